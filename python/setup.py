"""Build hooks for the kda-kernels wheel (metadata is in pyproject.toml).

- build_py builds libkda with CMake and bundles it into kda_kernels/lib/, with the compiled torch
  op (libkda_torch-<torch version>.so) when the installing environment has torch. The build tree
  is the checkout's build-pip/, configured by this file (Release, no tests or CLI) and brought up
  to date on every install: a re-install after a source change rebuilds what changed and bundles
  the result; nothing is ever bundled as found. CMAKE_ARGS (e.g. "-DKDA_ENABLE_CUDA=OFF") adds
  configure options. The one exception is $KDA_LIBRARY: that file is bundled as it is, with the
  compiled torch ops beside it.
- The compiled op is built for the torch of the installing environment. Under pip's build
  isolation that torch is hidden from this process (pip puts its build environment first through
  PYTHONPATH), so the same interpreter is asked again in isolated mode (-I), which sees the
  environment's own site-packages.
- Editable installs bundle nothing: the package finds the checkout's builds itself (build/
  first, then the newest build*/; _locate), which a developer rebuilds; only a checkout that has
  none gets build-pip/ built.
- bdist_wheel tags the wheel py3-none-<platform>: it holds native libraries but no Python
  extension module (ctypes, and torch.ops.load_library for the compiled op), so one wheel serves
  every Python 3 on the platform.
"""

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

import setuptools

PREREQUISITES = (
    "kda-kernels: building the package needs setuptools >= 70.1 (or an older setuptools >= 64 "
    "with the wheel package), and installing it needs numpy >= 1.21; this environment has "
    f"setuptools {setuptools.__version__} and no wheel. `pip install --no-build-isolation` uses "
    "the environment's build tools and installs none (a fresh virtual environment has pip and at "
    "most setuptools 65): install them first, e.g. pip install numpy \"setuptools>=70.1\" (from "
    "the network, or --no-index --find-links DIR for a local wheelhouse), or let pip fetch them "
    "with a plain `pip install ./python` (network needed)."
)

try:
    from setuptools.command.bdist_wheel import bdist_wheel  # setuptools >= 70.1
except ImportError:
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:
        raise SystemExit(PREREQUISITES) from None

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent


def _locate():
    """kda_kernels/_locate.py, loaded by path: the same search rules as the package's, without
    importing the package (which would import torch)."""
    spec = importlib.util.spec_from_file_location("_kda_locate", HERE / "kda_kernels" / "_locate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILD_DIR = REPO_ROOT / "build-pip"


def _torch_python():
    """The interpreter (and its flags) whose torch the compiled op is built for: this one when it
    imports torch, the same one in isolated mode when only that sees torch (pip's build
    isolation), else this one (CMake then says that it cannot import torch, and builds no op)."""
    if importlib.util.find_spec("torch") is not None:
        return sys.executable, ""
    isolated = subprocess.run([sys.executable, "-I", "-c", "import torch"], capture_output=True)
    if isolated.returncode == 0:
        return sys.executable, "-I"
    return sys.executable, ""


def cmake_build():
    """Configure (every time: cheap, and CMAKE_ARGS or the torch may have changed) and build
    libkda and, where torch is found, the compiled torch op in BUILD_DIR; returns the paths of
    the libkda and the torch op (or None) just built."""
    python, flags = _torch_python()
    print(f"kda-kernels: building libkda with CMake in {BUILD_DIR}")
    subprocess.check_call([
        "cmake", "-S", str(REPO_ROOT), "-B", str(BUILD_DIR), "-DCMAKE_BUILD_TYPE=Release",
        "-DKDA_BUILD_TESTS=OFF", "-DKDA_BUILD_CLI=OFF", f"-DKDA_TORCH_PYTHON={python}",
        f"-DKDA_TORCH_PYTHON_FLAGS={flags}", *shlex.split(os.environ.get("CMAKE_ARGS", "")),
    ])
    # CMake names the compiled op it configured (empty when torch was not found, and it says
    # why); an op of another torch left in the tree from an earlier configuration is not it.
    torch_op = (BUILD_DIR / "kda_torch_op_file.txt").read_text().strip()
    targets = ["kda"] + (["kda_torch"] if torch_op else [])
    jobs = ["-j", str(os.cpu_count() or 2)]
    subprocess.check_call(["cmake", "--build", str(BUILD_DIR), "--target", *targets, *jobs])
    library = BUILD_DIR / "src" / _locate().library_file_name()
    return library, (BUILD_DIR / "src" / torch_op) if torch_op else None


def libraries_to_bundle():
    """(libkda, [compiled torch ops]) for the wheel: $KDA_LIBRARY and the ops beside it, else a
    fresh build's."""
    locate = _locate()
    explicit = locate.env_library()
    if explicit is not None:
        if not explicit.is_file():
            raise SystemExit(f"kda-kernels: ${locate.ENV_VAR}={explicit} is not a file")
        # The ops are looked for where the package will look for them: beside the libkda path
        # it loads (not behind its symlinks).
        return explicit, locate.torch_op_files(explicit.parent)
    library, torch_op = cmake_build()
    return library, [torch_op] if torch_op else []


class BuildPy(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            # The package loads the checkout's own builds (a developer rebuilds them); a fresh
            # checkout without one gets build-pip/, and $KDA_LIBRARY, loaded instead, needs none.
            locate = _locate()
            if locate.env_library() is None and not locate.repo_build_libraries(REPO_ROOT):
                cmake_build()
            return
        locate = _locate()
        found, torch_ops = libraries_to_bundle()
        library = found.resolve()  # the real file behind libkda.so -> .so.0 -> ...
        lib_dir = Path(self.build_lib) / "kda_kernels" / "lib"
        target = lib_dir / locate.library_file_name()
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(library, target)
        print(f"kda-kernels: bundled {library} as {target}")
        for torch_op in torch_ops:
            shutil.copyfile(torch_op.resolve(), lib_dir / torch_op.name)
            print(f"kda-kernels: bundled {torch_op} as {lib_dir / torch_op.name}")


class NativeDistribution(Distribution):
    """Holds a native library: the wheel is platform-specific and installs into platlib."""

    def has_ext_modules(self):
        return True


class BdistWheel(bdist_wheel):
    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform  # no Python extension: any Python 3 on this platform


setup(distclass=NativeDistribution, cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
