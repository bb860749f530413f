"""Builds one kda_problem from described tensors and options, and runs it through kda_run.

The NumPy and torch paths each describe their own arrays (data pointer, dtype code, shape,
element strides, device) and allocate their own outputs; everything they share is here. No rule
of the contract is checked in Python: the core validates once and its message becomes the
exception (see _errors).
"""

import ctypes
import operator

from . import _abi, _errors, _library

OP_NAME = "chunk_kda_bwd_wy_dqkg_fused"

_INT64_MAX = 2**63 - 1


def output_layout(q_shape, v_shape, A_shape):
    """SPEC's output shapes, derived from the inputs' shapes.

    Returns ``{name: (shape, in_x)}`` for dq, dk, dv_out, db, dg, dA, where ``in_x`` marks the
    output stored in the X dtype (dv_out); the others are float32. When q, v or A does not have
    rank 4 the extents are 0: the core then reports that input, which it checks before any
    output. dA's last extent is A's, so a bad chunk_size never sizes an allocation.
    """
    B, T, K = (q_shape[0], q_shape[1], q_shape[3]) if len(q_shape) == 4 else (0, 0, 0)
    HV, V = (v_shape[2], v_shape[3]) if len(v_shape) == 4 else (0, 0)
    BT = A_shape[3] if len(A_shape) == 4 else 0
    return {
        "dq": ((B, T, HV, K), False),
        "dk": ((B, T, HV, K), False),
        "dv_out": ((B, T, HV, V), True),
        "db": ((B, T, HV), False),
        "dg": ((B, T, HV, K), False),
        "dA": ((B, T, HV, BT), False),
    }


def backend_code(backend, on_cuda):
    """kda_backend code for a backend name; None picks cuda for CUDA tensors, else cpu."""
    if backend is None:
        backend = "cuda" if on_cuda else "cpu"
    code = _abi.BACKENDS.get(backend) if isinstance(backend, str) else None
    if code is None:
        names = ", ".join(repr(n) for n in _abi.BACKENDS)
        raise ValueError(f"{OP_NAME}: argument 'backend': expected None, {names}, got {backend!r}")
    return code


def scalar_options(scale, chunk_size, state_v_first):
    """Python scalars as the C struct holds them: (has_scale, scale, chunk_size, state_v_first).
    Only conversions: whether the values are allowed is the core's call."""
    if scale is None:
        has_scale, scale_value = 0, 0.0
    else:
        # float() would also take True and numeric strings: a number, or nothing.
        bad = isinstance(scale, (bool, str, bytes))
        try:
            has_scale, scale_value = 1, 0.0 if bad else float(scale)
        except (TypeError, ValueError):
            bad = True
        if bad:
            raise TypeError(
                f"{OP_NAME}: argument 'scale': expected a float or None, got {type(scale).__name__}"
            )
    try:
        chunk = operator.index(chunk_size)
    except TypeError:
        raise TypeError(
            f"{OP_NAME}: argument 'chunk_size': expected an int, got {type(chunk_size).__name__}"
        ) from None
    if not -_INT64_MAX <= chunk <= _INT64_MAX:  # ctypes would wrap it silently
        raise ValueError(f"{OP_NAME}: argument 'chunk_size': {chunk} does not fit in int64")
    # bool() would read any non-empty string, 'False' included, as True.
    if isinstance(state_v_first, (str, bytes)) or state_v_first not in (True, False):
        raise TypeError(
            f"{OP_NAME}: argument 'state_v_first': expected a bool, got {state_v_first!r}"
        )
    return has_scale, scale_value, chunk, int(bool(state_v_first))


# kda_tensor's values for an omitted argument: data NULL, rank 0.
OMITTED = (0,) * (5 + 2 * _abi.MAX_RANK)
_PAD = (0,) * _abi.MAX_RANK


def tensor_fields(data, dtype, shape, strides, device_type, device_index):
    """kda_tensor's field values in struct order, for one array (shape and element strides as
    sequences of ints). A rank over MAX_RANK keeps its rank and first MAX_RANK extents: the core
    reports it by name."""
    rank = len(shape)
    if rank <= _abi.MAX_RANK:
        pad = _PAD[rank:]
        return (data, dtype, rank, device_type, device_index, *shape, *pad, *strides, *pad)
    return (data, dtype, rank, device_type, device_index, *shape[: _abi.MAX_RANK],
            *strides[: _abi.MAX_RANK])


def pack(fields, options):
    """The kda_problem of one call.

    Parameters
    ----------
    fields : sequence of tuple
        ``tensor_fields(...)`` (or ``OMITTED``) of every tensor in kda_problem's order: the
        eleven inputs (q .. dv), cu_seqlens, chunk_indices, then the six outputs (dq .. dA).
    options : tuple
        ``scalar_options(...)``'s result.
    """
    has_scale, scale, chunk_size, state_v_first = options
    values = [_abi.ABI_VERSION, state_v_first, chunk_size, has_scale, 0, scale]
    for tensor in fields:
        values.extend(tensor)
    return _abi.KdaProblem.from_buffer_copy(_abi.PROBLEM_STRUCT.pack(*values))


def run(fields, options, backend, stream=None):
    """Run the operator once on ``pack(fields, options)``.

    Parameters
    ----------
    fields, options
        As for ``pack``.
    backend : int
        ``backend_code(...)``'s result.
    stream : int or None
        A cudaStream_t as an integer, for the cuda backend; None is the default stream.
    """
    lib = _library.library()
    status = lib.dll.kda_run(ctypes.byref(pack(fields, options)), backend, stream)
    _errors.check(status, lib, OP_NAME)


def count_chunks(cu_seqlens_ptr, n_entries, chunk_size):
    """Number of chunks for an int64 host cu_seqlens; raises like the operator."""
    lib = _library.library()
    num = ctypes.c_int64(0)
    ptr = ctypes.cast(cu_seqlens_ptr, ctypes.POINTER(ctypes.c_int64))
    _errors.check(lib.dll.kda_count_chunks(ptr, n_entries, chunk_size, ctypes.byref(num)), lib,
                  "chunk_indices")
    return num.value


def fill_chunk_indices(cu_seqlens_ptr, n_entries, chunk_size, out_ptr, num_chunks):
    """Writes (sequence id, chunk id) int64 pairs for every chunk into out_ptr."""
    lib = _library.library()
    i64_p = ctypes.POINTER(ctypes.c_int64)
    status = lib.dll.kda_chunk_indices(ctypes.cast(cu_seqlens_ptr, i64_p), n_entries, chunk_size,
                                       ctypes.cast(out_ptr, i64_p), num_chunks)
    _errors.check(status, lib, "chunk_indices")
