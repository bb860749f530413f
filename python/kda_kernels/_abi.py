"""ctypes mirror of include/kda/kda.h (C ABI version 2): codes, kda_tensor, kda_arg_info, and one
problem struct per operator built from its signature (_signatures).

Only layouts and codes live here; nothing is loaded. When libkda is loaded, _library compares
its kda_abi_version() with ABI_VERSION and its argument tables (kda_op_*: names, roles, ranks,
byte offsets, struct sizes) with the layouts built here, so a library whose structs differ from
these is refused instead of silently misread.
"""

import ctypes
import struct

from . import _signatures

ABI_VERSION = _signatures.ABI_VERSION
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
# KDA_KERNEL_*, by kda_kernel_name()'s names (checked against the library when it is loaded)
KERNELS = {"auto": 0, "simt": 1, "sm80_mma": 2}


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


class KdaArgInfo(ctypes.Structure):
    """kda_arg_info: one row of an operator's argument table, as kda_op_arg reports it."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("doc", ctypes.c_char_p),
        ("role", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("offset", ctypes.c_int64),
        ("type", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("rule", ctypes.c_char_p),
    ]


_HEADER_CTYPES = {
    _signatures.INT32: ctypes.c_int32,
    _signatures.INT64: ctypes.c_int64,
    _signatures.FLOAT64: ctypes.c_double,
}


def _struct_format(ctype):
    """The struct-module format of a ctypes type, in native alignment (so padding matches C).
    A simple ctypes type's _type_ is its struct code ('P' void*, 'i' int32, 'l'/'q' int64...)."""
    if issubclass(ctype, ctypes.Structure):
        return "".join(_struct_format(t) for _, t in ctype._fields_)
    if issubclass(ctype, ctypes.Array):
        return f"{ctype._length_}{_struct_format(ctype._type_)}"
    return ctype._type_


class ProblemLayout:
    """An operator's C problem struct (kda_<op>_problem): the scalar header, then one kda_tensor
    per argument-table row in table order.

    Packing sets every field in one struct.pack call: setting ~250 ctypes fields one by one
    costs more than a kernel launch on small problems. The struct format is derived from the
    ctypes Structure, so there is one layout.
    """

    def __init__(self, signature):
        self.signature = signature
        fields = [(name, _HEADER_CTYPES[code]) for name, code in signature.header]
        fields += [(arg.member, KdaTensor) for arg in signature.args]
        self.ctype = type(f"kda_{signature.op_name}_problem", (ctypes.Structure,),
                          {"_fields_": fields})
        self.struct = struct.Struct(_struct_format(self.ctype))
        assert self.struct.size == ctypes.sizeof(self.ctype)
        self.size = ctypes.sizeof(self.ctype)
        # Byte offset of every argument's kda_tensor, by table name.
        self.offsets = {arg.name: getattr(self.ctype, arg.member).offset
                        for arg in signature.args}
        # Byte offset of every option's (first) field, by name.
        self.option_offsets = {opt.name: getattr(self.ctype, opt.fields[0]).offset
                               for opt in signature.options}

    def pack(self, header, tensors):
        """The problem struct of one call.

        Parameters
        ----------
        header : sequence
            The scalar header's values in its order (abi_version first).
        tensors : sequence of tuple
            kda_tensor field values (``_problem.tensor_fields`` or ``OMITTED``) of every
            argument in table order.
        """
        values = list(header)
        for tensor in tensors:
            values.extend(tensor)
        return self.ctype.from_buffer_copy(self.struct.pack(*values))


LAYOUTS = tuple(ProblemLayout(s) for s in _signatures.SIGNATURES)
LAYOUT_BY_FLA_NAME = {layout.signature.fla_name: layout for layout in LAYOUTS}
