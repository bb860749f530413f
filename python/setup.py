"""Build hooks for the kda-kernels wheel (metadata is in pyproject.toml).

- build_py bundles a prebuilt libkda into kda_kernels/lib/: $KDA_LIBRARY if set, else the
  checkout's build (build/src/, then the newest build-*/src/), else it configures and builds the
  `kda` target with CMake under python/build/libkda (and the compiled torch op when the building
  Python imports torch). Beside it go the compiled torch ops found next to that libkda
  (libkda_torch-<torch version>.so, one per torch release built; the package loads the one of
  the running torch, or none). Editable installs bundle nothing: the package then finds the
  checkout's build itself, so a rebuild is picked up without reinstalling.
- bdist_wheel tags the wheel py3-none-<platform>: it holds native libraries but no Python
  extension module (ctypes, and torch.ops.load_library for the compiled op), so one wheel serves
  every Python 3 on the platform.
"""

import importlib.util
import os
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


def _cmake_build(locate):
    build_dir = HERE / "build" / "libkda"
    print(f"kda-kernels: no libkda found; building it with CMake in {build_dir}")
    subprocess.check_call([
        "cmake", "-S", str(REPO_ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
        "-DKDA_BUILD_TESTS=OFF", "-DKDA_BUILD_CLI=OFF", f"-DKDA_TORCH_PYTHON={sys.executable}",
    ])
    jobs = ["-j", str(os.cpu_count() or 2)]
    subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "kda", *jobs])
    # The compiled torch op exists as a target when this Python imports torch (CMake says why
    # not otherwise).
    targets = subprocess.run(["cmake", "--build", str(build_dir), "--target", "help"],
                             capture_output=True, text=True).stdout
    if "kda_torch" in targets:
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "kda_torch", *jobs])
    return build_dir / "src" / locate.library_file_name()


def library_to_bundle():
    locate = _locate()
    explicit = locate.env_library()
    if explicit is not None:
        if not explicit.is_file():
            raise SystemExit(f"kda-kernels: ${locate.ENV_VAR}={explicit} is not a file")
        return explicit
    built = locate.repo_build_libraries(REPO_ROOT)
    return built[0] if built else _cmake_build(locate)


class BuildPy(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        locate = _locate()
        found = library_to_bundle()
        library = found.resolve()  # the real file behind libkda.so -> .so.0 -> ...
        lib_dir = Path(self.build_lib) / "kda_kernels" / "lib"
        target = lib_dir / locate.library_file_name()
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(library, target)
        print(f"kda-kernels: bundled {library} as {target}")
        # The compiled torch ops of the same build, looked for where the package will look
        # for them: beside the libkda path it loads (not behind its symlinks).
        for torch_op in locate.torch_op_files(found.parent):
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
