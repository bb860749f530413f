"""Where libkda may be found. Standard library only: setup.py loads this file by path to bundle
the same library that a development checkout would use."""

import os
import sys
from pathlib import Path

ENV_VAR = "KDA_LIBRARY"
# Which implementation the torch ops get: auto (the compiled one when it loads, else the ctypes
# one), compiled (that one or an error), python (the ctypes one). See _torch_ext.
TORCH_OP_ENV_VAR = "KDA_TORCH_OP"
TORCH_OP_MODES = ("auto", "compiled", "python")
# The CUDA kernel that kernel="auto" stands for in the package's functions (read once, at import:
# the library itself reads no environment). Unset: the library's own choice.
KERNEL_ENV_VAR = "KDA_CUDA_KERNEL"


def library_file_name():
    """The platform's file name for the shared library CMake builds from target `kda`."""
    if sys.platform == "darwin":
        return "libkda.dylib"
    if sys.platform == "win32":
        return "kda.dll"
    return "libkda.so"


def torch_op_file_name(torch_version):
    """The compiled torch op's file name for a torch release ("2.11.0": no local tag such as
    +cu130, which does not change torch's C++ ABI), as CMake names it (src/torch_op)."""
    name = library_file_name()
    stem, dot, suffix = name.partition(".")
    return f"{stem}_torch-{torch_version}{dot}{suffix}"


def torch_op_files(library_dir):
    """Every compiled torch op (of any torch version) in a folder, by name."""
    stem, dot, suffix = library_file_name().partition(".")
    return sorted(Path(library_dir).glob(f"{stem}_torch-*{dot}{suffix}"))


def bundled_library(package_dir):
    """The copy a wheel carries inside the package."""
    return Path(package_dir) / "lib" / library_file_name()


def repo_build_libraries(repo_root):
    """Libraries built in a checkout: build/ first, then build-*/ (and other build*/ folders),
    newest first, since several build trees often sit side by side during development."""
    root = Path(repo_root)
    name = library_file_name()
    preferred = root / "build" / "src" / name
    others = [p for p in root.glob("build*/src/" + name) if p != preferred and p.is_file()]
    others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return ([preferred] if preferred.is_file() else []) + others


def env_library():
    """$KDA_LIBRARY as a Path, or None when unset or empty."""
    value = os.environ.get(ENV_VAR, "")
    return Path(value) if value else None


def env_kernel():
    """$KDA_CUDA_KERNEL, or None when unset or empty."""
    return os.environ.get(KERNEL_ENV_VAR, "") or None
