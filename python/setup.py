"""Build hooks for the kda-kernels wheel (metadata is in pyproject.toml).

- build_py bundles a prebuilt libkda into kda_kernels/lib/: $KDA_LIBRARY if set, else the
  checkout's build (build/src/, then the newest build-*/src/), else it configures and builds the
  `kda` target with CMake under python/build/libkda. Editable installs bundle nothing: the
  package then finds the checkout's build itself, so a rebuild is picked up without reinstalling.
- bdist_wheel tags the wheel py3-none-<platform>: it holds a native library but no Python
  extension (ctypes only), so one wheel serves every Python 3 on the platform.
"""

import importlib.util
import os
import shutil
import subprocess
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
        "-DKDA_BUILD_TESTS=OFF", "-DKDA_BUILD_CLI=OFF",
    ])
    subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "kda", "-j",
                           str(os.cpu_count() or 2)])
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
        library = library_to_bundle().resolve()  # the real file behind libkda.so -> .so.0 -> ...
        target = Path(self.build_lib) / "kda_kernels" / "lib" / locate.library_file_name()
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(library, target)
        print(f"kda-kernels: bundled {library} as {target}")


class NativeDistribution(Distribution):
    """Holds a native library: the wheel is platform-specific and installs into platlib."""

    def has_ext_modules(self):
        return True


class BdistWheel(bdist_wheel):
    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform  # no Python extension: any Python 3 on this platform


setup(distclass=NativeDistribution, cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
