"""The operators on NumPy arrays: describe them for the core, allocate outputs, run on a CPU
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


def describe(op, name, array):
    """kda_tensor field values of a NumPy array (``_problem.tensor_fields``); a
    TypeError/ValueError naming the argument when the array cannot be expressed as a kda_tensor
    at all (not an ndarray, foreign dtype, odd strides). ``op`` is the _problem.Operator the
    array is for (its name prefixes the messages)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{op.where(name)}: expected a numpy.ndarray, got {type(array).__name__}")
    code = _dtype_code(array.dtype)
    if code is None:
        # What this argument takes, not every dtype libkda has a code for.
        dtypes = op.dtypes[name].replace("bfloat16", "bfloat16 (ml_dtypes)")
        raise TypeError(
            f"{op.where(name)}: expected dtype {dtypes} in native byte order, got "
            f"{array.dtype.str} ({array.dtype.name})"
        )
    itemsize = array.dtype.itemsize
    if any(s % itemsize for s in array.strides):
        raise ValueError(f"{op.where(name)}: byte strides {array.strides} are not whole elements")
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


def run(op, arrays, optionals, options, backend, kernel):
    """Operator ``op`` (a _problem.Operator) on NumPy arrays; returns its outputs as new arrays,
    in return order.

    ``arrays`` maps the required input names to arrays, ``optionals`` the optional ones
    (cu_seqlens, chunk_indices) to arrays or None; ``options`` holds the option values in the
    signature's option order, ``backend`` and ``kernel`` the names.
    """
    options = op.convert_options(options)
    backend_code = op.backend_code(backend, on_cuda=False)
    kernel_code = op.kernel_code(kernel)
    tensors = [describe(op, name, arrays[name]) for name in op.input_names]
    for name in op.optional_names:
        value = optionals[name]
        tensors.append(_problem.OMITTED if value is None else describe(op, name, value))

    x = arrays[op.anchor]  # q, or chunk_fwd_h's k: X's dtype
    shapes = {name: arrays[name].shape for name in op.input_names}
    named_options = dict(zip(op.option_names, options))
    layout = op.output_layout(shapes, named_options, optionals)
    # Validated before the outputs are allocated: a call that cannot run is refused in a moment,
    # whatever size its outputs would have (the run validates the real ones again).
    op.validate_before_allocating(tensors, layout, tensors[0][1], (_abi.DEVICE_CPU, 0), options)
    outputs = [new_output(shape, x.dtype if in_x else np.float32) for shape, in_x in layout]
    tensors.extend(describe(op, name, out) for name, out in zip(op.output_names, outputs))
    op.run(tensors, options, backend_code, kernel_code)
    return tuple(outputs)


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
    chunk = _problem.chunk_size_value(chunk_size)
    num = _problem.count_chunks(cu.ctypes.data, cu.shape[0], chunk)
    out = np.empty((num, 2), dtype=np.int64)
    _problem.fill_chunk_indices(cu.ctypes.data, cu.shape[0], chunk, out.ctypes.data, num)
    return out
