"""Which implementation the torch custom ops get, decided once, when _torch_op is imported:

- compiled: libkda_torch-<torch version>.so (src/torch_op), the ops registered from C++ and
  calling libkda's C++ API directly: a few microseconds of host time a call;
- python: the ops registered from Python over libkda's C ABI through ctypes (_torch_op).

The compiled library is used when it sits beside the libkda this package loads (the same build,
or the same wheel) and was built for the running torch's release: its C++ ABI changes between
torch releases, so a library built for another one is never loaded. It links libkda; it is
loaded after the package's own ctypes handle of libkda, whose soname it then binds to, and
checked to be bound to that very file (one libkda per process). Anything that stops it (none
built, another torch, libkda failing to load) leaves the python ops, and ``torch_op_backend()``
says why. $KDA_TORCH_OP picks: auto (default), compiled (an error when it cannot be used),
python (never load it).
"""

import ctypes
import os
from pathlib import Path

import torch

from . import _library, _locate


class Choice:
    """The outcome: ``backend`` ("compiled" or "python") and ``detail`` (the compiled library's
    path, or why the python ops are used)."""

    def __init__(self, backend, detail):
        self.backend = backend
        self.detail = detail

    def __repr__(self):
        return f"{self.backend} ({self.detail})"


def torch_release():
    """torch's version without its local tag: "2.11.0" for "2.11.0+cu130"."""
    return torch.__version__.split("+")[0]


def mode():
    value = os.environ.get(_locate.TORCH_OP_ENV_VAR, "") or "auto"
    if value not in _locate.TORCH_OP_MODES:
        raise ValueError(
            f"kda_kernels: ${_locate.TORCH_OP_ENV_VAR}={value!r}: expected one of "
            + ", ".join(_locate.TORCH_OP_MODES)
        )
    return value


def choose():
    """Load the compiled ops if they can be used; the Choice. Raises LibraryError when
    $KDA_TORCH_OP=compiled and they cannot, or when the compiled library is bound to another
    libkda than the package's (it is loaded then, so the python ops cannot be registered)."""
    wanted = mode()
    if wanted == "python":
        return Choice("python", f"${_locate.TORCH_OP_ENV_VAR}=python")
    path, reason = _load_compiled()
    if path is not None:
        return Choice("compiled", str(path))
    if wanted == "compiled":
        raise _library.LibraryError(
            f"kda_kernels: ${_locate.TORCH_OP_ENV_VAR}=compiled, but the compiled torch op "
            f"cannot be used: {reason}"
        )
    return Choice("python", reason)


def _load_compiled():
    """(path, None) once the compiled library is loaded, else (None, why not)."""
    candidates = [p for p in _library.candidates() if p.is_file()]
    if not candidates:
        return None, "no libkda was found, so no compiled op beside it either"
    library_path = candidates[0]
    path = library_path.parent / _locate.torch_op_file_name(torch_release())
    if not path.is_file():
        others = [p.name for p in _locate.torch_op_files(library_path.parent)]
        built = f" (there: {', '.join(others)})" if others else ""
        return None, (f"no {path.name} for torch {torch.__version__} beside {library_path}"
                      f"{built}")
    try:
        library = _library.library()
    except _library.LibraryError as e:
        return None, f"libkda did not load: {e}"
    if library.path != library_path:
        return None, f"{library_path} did not load (the package uses {library.path})"
    try:
        torch.ops.load_library(str(path))
    except OSError as e:  # another torch build, a missing dependency: nothing was registered
        return None, f"{path} did not load: {e}"
    bound = _bound_libkda(path)
    if not _same_file(bound, library.path):
        raise _library.LibraryError(
            f"kda_kernels: {path} is bound to {bound}, not to the libkda this package loaded "
            f"({library.path}); install matching builds side by side"
        )
    return path, None


def _bound_libkda(path):
    info = ctypes.CDLL(str(path)).kda_torch_libkda_path
    info.argtypes = []
    info.restype = ctypes.c_char_p
    return Path(info().decode("utf-8", "replace"))


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
