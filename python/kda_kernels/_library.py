"""Finds and loads libkda once, and declares the C functions' signatures.

Importing the package never loads the library; the first call that needs it does, so the package
imports on a machine without libkda and the error says where it looked.
"""

import ctypes
import threading
from pathlib import Path

from . import _abi, _locate

_PACKAGE_DIR = Path(__file__).resolve().parent
# python/kda_kernels -> python -> the repository root (only meaningful in a checkout).
_REPO_ROOT = _PACKAGE_DIR.parent.parent


class LibraryError(RuntimeError):
    """libkda could not be found or loaded, or speaks another C ABI version."""


class Library:
    """The loaded libkda: its ctypes handle and the path it came from."""

    def __init__(self, path):
        self.path = Path(path)
        self.dll = ctypes.CDLL(str(self.path))
        _declare(self.dll)
        abi = self.dll.kda_abi_version()
        if abi != _abi.ABI_VERSION:
            raise LibraryError(
                f"{self.path} has C ABI version {abi}, but this kda_kernels speaks version "
                f"{_abi.ABI_VERSION}; install matching versions of the library and the package"
            )

    def last_error(self):
        return self.dll.kda_last_error().decode("utf-8", "replace")


def _declare(dll):
    problem_p = ctypes.POINTER(_abi.KdaProblem)
    i64_p = ctypes.POINTER(ctypes.c_int64)
    signatures = {
        "kda_version": ([], ctypes.c_char_p),
        "kda_abi_version": ([], ctypes.c_int32),
        "kda_last_error": ([], ctypes.c_char_p),
        "kda_backend_available": ([ctypes.c_int32], ctypes.c_int32),
        "kda_validate": ([problem_p], ctypes.c_int32),
        "kda_run": ([problem_p, ctypes.c_int32, ctypes.c_void_p], ctypes.c_int32),
        "kda_count_chunks": ([i64_p, ctypes.c_int64, ctypes.c_int64, i64_p], ctypes.c_int32),
        "kda_chunk_indices": (
            [i64_p, ctypes.c_int64, ctypes.c_int64, i64_p, ctypes.c_int64],
            ctypes.c_int32,
        ),
    }
    for name, (argtypes, restype) in signatures.items():
        fn = getattr(dll, name)
        fn.argtypes = argtypes
        fn.restype = restype


def candidates():
    """Paths tried, in order. $KDA_LIBRARY, when set, is the only candidate: an explicit choice
    should fail loudly rather than fall back to some other build."""
    explicit = _locate.env_library()
    if explicit is not None:
        return [explicit]
    return [_locate.bundled_library(_PACKAGE_DIR)] + _locate.repo_build_libraries(_REPO_ROOT)


def _describe_search():
    explicit = _locate.env_library()
    if explicit is not None:
        return f"${_locate.ENV_VAR}={explicit}"
    name = _locate.library_file_name()
    return (
        f"${_locate.ENV_VAR} (unset), {_locate.bundled_library(_PACKAGE_DIR)}, "
        f"{_REPO_ROOT / 'build*' / 'src' / name}"
    )


_lock = threading.Lock()
_library = None


def library():
    """The loaded Library, loading it on first use."""
    global _library
    if _library is not None:
        return _library
    with _lock:
        if _library is None:
            _library = _load()
    return _library


def _load():
    failures = []
    for path in candidates():
        if not path.is_file():
            continue
        try:
            return Library(path)
        except OSError as e:  # a broken or foreign-architecture file: say so, try the next
            failures.append(f"{path}: {e}")
        except AttributeError as e:  # loads, but is not libkda (a kda_* symbol is missing)
            failures.append(f"{path}: not libkda ({e})")
    detail = ("; could not load: " + "; ".join(failures)) if failures else ""
    raise LibraryError(
        f"kda_kernels: libkda was not found (looked at {_describe_search()}){detail}. "
        f"Build it with `cmake -S <repo> -B <repo>/build && cmake --build <repo>/build "
        f"--target kda`, or set {_locate.ENV_VAR} to the path of {_locate.library_file_name()}."
    )
