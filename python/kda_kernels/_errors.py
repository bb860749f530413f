"""kda_status -> Python exception. The message is the core's own (kda_last_error()), which names
the bad argument; nothing is re-checked here."""

import re

from . import _abi

# The core words every dtype complaint as "expected dtype ..." or "expected the dtype of ...".
_DTYPE_COMPLAINT = re.compile(r"expected (the )?dtype")


def check(status, library, where):
    """Raise the exception for a failed call's status; return None on success.

    Parameters
    ----------
    status : int
        The kda_status a C function returned.
    library : _library.Library
        The library that returned it (for its last error and, on backend errors, its path).
    where : str
        The Python function the call was made for, prefixed to the message.
    """
    if status == _abi.STATUS_OK:
        return
    message = f"{where}: {library.last_error()}"
    if status == _abi.STATUS_INVALID_ARGUMENT:
        # A wrong dtype is a type error to a Python caller; anything else about the arguments
        # (ranks, shapes, sizes, devices) is a value error.
        if _DTYPE_COMPLAINT.search(message):
            raise TypeError(message)
        raise ValueError(message)
    if status == _abi.STATUS_UNSUPPORTED:
        raise NotImplementedError(message)
    if status == _abi.STATUS_BACKEND_UNAVAILABLE:
        # Which libkda was loaded is the first thing to know when a backend is missing.
        raise RuntimeError(f"{message} (library: {library.path})")
    raise RuntimeError(f"{message} (status {status})")
