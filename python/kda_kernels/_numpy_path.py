"""The operator on NumPy arrays: describe them for the core, allocate outputs, run on a CPU
backend.

NumPy has no bfloat16 of its own; arrays of the ``bfloat16`` dtype that ml_dtypes registers are
taken as such (matched by dtype name, so ml_dtypes is never imported here).
"""

import numpy as np

from . import _abi, _problem

# numpy dtype -> kda dtype code. float64 and the integer types are passed through so that the
# core, not Python, decides where they are allowed (e.g. int32/int64 for cu_seqlens only). Keyed
# by dtype object: dtype.name builds a string on every call, slower than the rest of a describe.
_DTYPE_CODES = {
    np.dtype(np.float16): _abi.DTYPE_F16,
    np.dtype(np.float32): _abi.DTYPE_F32,
    np.dtype(np.float64): _abi.DTYPE_F64,
    np.dtype(np.int32): _abi.DTYPE_I32,
    np.dtype(np.int64): _abi.DTYPE_I64,
}


def _dtype_code(dtype):
    code = _DTYPE_CODES.get(dtype)
    if code is None and dtype.name == "bfloat16" and dtype.isnative:  # ml_dtypes' bfloat16
        code = _abi.DTYPE_BF16
    return code


def describe(name, array):
    """kda_tensor field values of a NumPy array (``_problem.tensor_fields``); a
    TypeError/ValueError naming the argument when the array cannot be expressed as a kda_tensor
    at all (not an ndarray, foreign dtype, odd strides)."""
    where = f"{_problem.OP_NAME}: argument '{name}'"
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{where}: expected a numpy.ndarray, got {type(array).__name__}")
    code = _dtype_code(array.dtype)
    if code is None:
        raise TypeError(
            f"{where}: expected dtype float16, bfloat16 (ml_dtypes), float32, int32 or int64 "
            f"in native byte order, got {array.dtype.str} ({array.dtype.name})"
        )
    itemsize = array.dtype.itemsize
    if any(s % itemsize for s in array.strides):
        raise ValueError(f"{where}: byte strides {array.strides} are not whole elements")
    return _problem.tensor_fields(
        array.__array_interface__["data"][0],  # ndarray.ctypes is ~10x slower
        code,
        array.shape,
        tuple(s // itemsize for s in array.strides),
        _abi.DEVICE_CPU,
        0,
    )


def new_output(shape, dtype):
    """A fresh contiguous output array (the core requires contiguous outputs). A function of
    its own so a test can hand out poisoned arrays and see that every element is written."""
    return np.empty(shape, dtype=dtype)


def run(arrays, scale, cu_seqlens, chunk_size, chunk_indices, state_v_first, backend):
    """The operator on NumPy arrays; returns (dq, dk, dv, db, dg, dA) as new arrays.

    ``arrays`` maps the eleven input names (q .. dv) to arrays.
    """
    options = _problem.scalar_options(scale, chunk_size, state_v_first)
    code = _problem.backend_code(backend, on_cuda=False)
    fields = [describe(name, arrays[name]) for name in _abi.INPUT_FIELDS]
    for name, value in (("cu_seqlens", cu_seqlens), ("chunk_indices", chunk_indices)):
        fields.append(_problem.OMITTED if value is None else describe(name, value))

    q = arrays["q"]
    layout = _problem.output_layout(q.shape, arrays["v"].shape, arrays["A"].shape)
    outputs = {
        name: new_output(shape, q.dtype if in_x else np.float32)
        for name, (shape, in_x) in layout.items()
    }
    fields.extend(describe(name, out) for name, out in outputs.items())
    _problem.run(fields, options, code)
    return tuple(outputs[name] for name in _abi.OUTPUT_FIELDS)


def chunk_indices(cu_seqlens, chunk_size):
    """(sequence id, chunk id) int64 pairs, shape [NT, 2], from a host cu_seqlens."""
    values = np.asarray(cu_seqlens)
    if values.dtype.kind not in "iu" and not (values.size == 0 and values.dtype.kind == "f"):
        # Integers only: a float entry would be truncated without a word ([] reads as float64).
        raise TypeError(
            f"chunk_indices: argument 'cu_seqlens': expected integers, got dtype {values.dtype}"
        )
    if values.dtype.kind == "u" and values.size and values.max() > np.iinfo(np.int64).max:
        raise ValueError(
            f"chunk_indices: argument 'cu_seqlens': entry {values.max()} does not fit in int64"
        )
    cu = np.ascontiguousarray(values, dtype=np.int64)
    if cu.ndim != 1:
        raise ValueError(f"chunk_indices: argument 'cu_seqlens': expected rank 1, got {cu.ndim}")
    _, _, chunk, _ = _problem.scalar_options(None, chunk_size, False)
    num = _problem.count_chunks(cu.ctypes.data, cu.shape[0], chunk)
    out = np.empty((num, 2), dtype=np.int64)
    _problem.fill_chunk_indices(cu.ctypes.data, cu.shape[0], chunk, out.ctypes.data, num)
    return out
