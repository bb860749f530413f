"""Finds and loads libkda once, and declares the C functions' signatures.

Importing the package never loads the library; the first call that needs it does, so the package
imports on a machine without libkda and the error says where it looked.
"""

import ctypes
import threading
from pathlib import Path

from . import _abi, _locate, _signatures

_PACKAGE_DIR = Path(__file__).resolve().parent
# python/kda_kernels -> python -> the repository root (only meaningful in a checkout).
_REPO_ROOT = _PACKAGE_DIR.parent.parent


class LibraryError(RuntimeError):
    """libkda could not be found or loaded, speaks another C ABI version, or its operators'
    argument tables differ from this package's (_signatures)."""


class Library:
    """The loaded libkda: its ctypes handle and the path it came from."""

    def __init__(self, path, layouts=None):
        self.path = Path(path)
        self.dll = ctypes.CDLL(str(self.path))
        # The version first: a library of another ABI may lack the entries declared below.
        self.dll.kda_abi_version.argtypes = []
        self.dll.kda_abi_version.restype = ctypes.c_int32
        abi = self.dll.kda_abi_version()
        if abi != _abi.ABI_VERSION:
            raise LibraryError(
                f"{self.path} has C ABI version {abi}, but this kda_kernels speaks version "
                f"{_abi.ABI_VERSION}; install matching versions of the library and the package"
            )
        layouts = _abi.LAYOUTS if layouts is None else layouts
        _declare(self.dll, _COMMON_FUNCTIONS)
        problems = table_mismatches(self.dll, layouts)
        if problems:
            raise LibraryError(
                f"{self.path} (C ABI version {abi}) does not match this kda_kernels' operator "
                f"tables: " + "; ".join(problems) + ". Install matching versions of the library "
                "and the package"
            )
        _declare(self.dll, _operator_functions(layouts))

    def last_error(self):
        return self.dll.kda_last_error().decode("utf-8", "replace")

    def entry(self, signature, what):
        """The C function kda_<op>_<what> ('run' or 'validate') of an operator."""
        return getattr(self.dll, f"kda_{signature.op_name}_{what}")


_I64_P = ctypes.POINTER(ctypes.c_int64)
# name: (argtypes, restype) of the functions every operator shares.
_COMMON_FUNCTIONS = {
    "kda_version": ([], ctypes.c_char_p),
    "kda_last_error": ([], ctypes.c_char_p),
    "kda_backend_available": ([ctypes.c_int32], ctypes.c_int32),
    "kda_kernel_name": ([ctypes.c_int32], ctypes.c_char_p),
    "kda_op_name": ([ctypes.c_int32], ctypes.c_char_p),
    "kda_op_num_args": ([ctypes.c_int32], ctypes.c_int32),
    "kda_op_problem_size": ([ctypes.c_int32], ctypes.c_int64),
    "kda_op_arg": ([ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(_abi.KdaArgInfo)],
                   ctypes.c_int32),
    "kda_count_chunks": ([_I64_P, ctypes.c_int64, ctypes.c_int64, _I64_P], ctypes.c_int32),
    "kda_chunk_indices": ([_I64_P, ctypes.c_int64, ctypes.c_int64, _I64_P, ctypes.c_int64],
                          ctypes.c_int32),
}


def _operator_functions(layouts):
    """kda_<op>_validate / kda_<op>_run of every operator, taking its problem struct."""
    functions = {}
    for layout in layouts:
        problem_p = ctypes.POINTER(layout.ctype)
        op = layout.signature.op_name
        functions[f"kda_{op}_validate"] = ([problem_p], ctypes.c_int32)
        functions[f"kda_{op}_run"] = (
            [problem_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p], ctypes.c_int32)
    return functions


def _declare(dll, functions):
    for name, (argtypes, restype) in functions.items():
        fn = getattr(dll, name)
        fn.argtypes = argtypes
        fn.restype = restype


def _decode(value):
    return None if value is None else value.decode("utf-8", "replace")


def table_mismatches(dll, layouts):
    """Where the library's operator tables differ from `layouts` (a list of sentences; empty
    when they agree): each operator's name, number of arguments, problem struct size, and every
    argument's name, role, rank and byte offset; and the kernel names."""
    problems = []
    for layout in layouts:
        sig = layout.signature
        where = f"operator {sig.op}"
        name = _decode(dll.kda_op_name(sig.op))
        if name != sig.op_name:
            problems.append(f"{where} is {name!r} in the library, {sig.op_name!r} here")
            continue
        where = f"operator {sig.op_name}"
        count = dll.kda_op_num_args(sig.op)
        rows = our_rows(layout)
        if count != len(rows):
            problems.append(f"{where} has {count} rows in the library, {len(rows)} here")
        size = dll.kda_op_problem_size(sig.op)
        if size != layout.size:
            problems.append(f"{where}'s problem struct is {size} bytes in the library, "
                            f"{layout.size} here")
        info = _abi.KdaArgInfo()
        for index, ours in enumerate(rows[: max(count, 0)]):
            if dll.kda_op_arg(sig.op, index, ctypes.byref(info)) != _abi.STATUS_OK:
                problems.append(f"{where} argument {index}: kda_op_arg failed "
                                f"({_decode(dll.kda_last_error())})")
                continue
            theirs = (_decode(info.name), info.role, info.type, info.rank, _decode(info.rule),
                      info.offset)
            if theirs != ours:
                problems.append(
                    f"{where} argument {index} is {_describe_arg(*theirs)} in the library, "
                    f"{_describe_arg(*ours)} here")
    for name, code in _abi.KERNELS.items():
        theirs = _decode(dll.kda_kernel_name(code))
        if theirs != name:
            problems.append(f"kernel {code} is {theirs!r} in the library, {name!r} here")
    return problems


def our_rows(layout):
    """The rows this package packs for an operator, as kda_op_arg reports rows: (name, role,
    type, rank, rule, byte offset), tensors and options in the table's order."""
    sig = layout.signature
    args, options = list(sig.args), list(sig.options)
    rows = []
    for _, role, _, _, rule, _ in sig.rows:
        if role == _signatures.ROLE_OPTION and options:
            opt = options.pop(0)
            rows.append((opt.name, role, _signatures.OPTION_TYPES[opt.kind], 0, rule,
                         layout.option_offsets[opt.name]))
        elif role != _signatures.ROLE_OPTION and args:
            arg = args.pop(0)
            rows.append(_tensor_row(arg, layout))
    rows += [_tensor_row(arg, layout) for arg in args]
    return rows


def _tensor_row(arg, layout):
    if arg.role == _signatures.ROLE_OUTPUT:
        kind = _signatures.TYPE_OF_Q if arg.x else _signatures.TYPE_F32
        rule = " ".join(name if dim is None else f"{name}.{dim}" for name, dim in arg.shape)
    else:
        kind, rule = arg.type_code, ""
    return (arg.name, arg.role, kind, arg.rank, rule, layout.offsets[arg.name])


def _describe_arg(name, role, kind, rank, rule, offset):
    role_name = _signatures.ROLE_NAMES.get(role, f"role {role}")
    return f"{name!r} ({role_name}, type {kind}, rank {rank}, rule {rule!r}, at byte {offset})"


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
