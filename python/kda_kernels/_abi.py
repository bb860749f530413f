"""ctypes mirror of include/kda/kda.h (ABI version 1).

Only layouts and codes live here; nothing is loaded. Keep this file in step with kda.h: the
library's kda_abi_version() is compared with ABI_VERSION when it is loaded, so a layout change
on the C side that bumps KDA_ABI_VERSION is caught instead of silently misread.
"""

import ctypes
import struct

ABI_VERSION = 1
MAX_RANK = 6

# kda_status
STATUS_OK = 0
STATUS_INVALID_ARGUMENT = 1
STATUS_UNSUPPORTED = 2
STATUS_BACKEND_UNAVAILABLE = 3
STATUS_CUDA_ERROR = 4
STATUS_INTERNAL = 5

# dtype codes
DTYPE_F16 = 0
DTYPE_BF16 = 1
DTYPE_F32 = 2
DTYPE_I32 = 3
DTYPE_I64 = 4
DTYPE_F64 = 5

# device types
DEVICE_CPU = 0
DEVICE_CUDA = 1

# backends, by the names SPEC and the `kda` command use
BACKENDS = {"cpu-ref": 0, "cpu": 1, "cuda": 2}


class KdaTensor(ctypes.Structure):
    """kda_tensor: a strided view; data NULL and rank 0 mean "argument omitted"."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("device_type", ctypes.c_int32),
        ("device_index", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_RANK),
        ("strides", ctypes.c_int64 * MAX_RANK),  # in elements
    ]


# Python argument name -> kda_problem field name ("do" is a C++ keyword, hence "do_").
INPUT_FIELDS = {
    "q": "q",
    "k": "k",
    "v": "v",
    "v_new": "v_new",
    "g": "g",
    "beta": "beta",
    "A": "A",
    "h": "h",
    "do": "do_",
    "dh": "dh",
    "dv": "dv",
}
INDEX_FIELDS = ("cu_seqlens", "chunk_indices")
# Output names in the order the operator returns them (dv_out is returned as "dv").
OUTPUT_FIELDS = ("dq", "dk", "dv_out", "db", "dg", "dA")


# kda_problem's tensor fields, in struct order.
TENSOR_FIELDS = (*INPUT_FIELDS.values(), *INDEX_FIELDS, *OUTPUT_FIELDS)


class KdaProblem(ctypes.Structure):
    """kda_problem: every tensor of one call plus the scalar options."""

    _fields_ = [
        ("abi_version", ctypes.c_int32),
        ("state_v_first", ctypes.c_int32),
        ("chunk_size", ctypes.c_int64),
        ("has_scale", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
        ("scale", ctypes.c_double),
    ] + [(field, KdaTensor) for field in TENSOR_FIELDS]


def _struct_format(ctype):
    """The struct-module format of a ctypes type, in native alignment (so padding matches C).
    A simple ctypes type's _type_ is its struct code ('P' void*, 'i' int32, 'l'/'q' int64...)."""
    if issubclass(ctype, ctypes.Structure):
        return "".join(_struct_format(t) for _, t in ctype._fields_)
    if issubclass(ctype, ctypes.Array):
        return f"{ctype._length_}{_struct_format(ctype._type_)}"
    return ctype._type_


# Packs a whole kda_problem in one call: setting ~250 ctypes fields one by one costs more than
# the kernel launch on small problems. Derived from KdaProblem, so there is one layout.
PROBLEM_STRUCT = struct.Struct(_struct_format(KdaProblem))
assert PROBLEM_STRUCT.size == ctypes.sizeof(KdaProblem)
