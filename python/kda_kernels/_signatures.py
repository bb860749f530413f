"""The operators' signatures, once: for each operator of libkda its fla function name, its
argument table (the rows of include/kda/ops/<op>_args.h: name, role, rank, in table order), the
scalar header of its C problem struct, its options and its outputs in return order.

Everything else in the package is derived from these tables: the ctypes problem structs and
their one-call packing (_abi), the check of a loaded libkda's own tables (kda_op_* functions,
_library), the NumPy path, the torch custom ops' schemas and fake implementations (_torch_op)
and the fla backend's method names (fla). Pure Python: nothing is loaded or imported.
"""

from dataclasses import dataclass

# kda/args.h
ROLE_INPUT = 0
ROLE_OPTIONAL = 1
ROLE_OUTPUT = 2
ROLE_NAMES = {ROLE_INPUT: "input", ROLE_OPTIONAL: "optional", ROLE_OUTPUT: "output"}

# Struct codes of the scalar header fields (the struct module's, native alignment).
INT32, INT64, FLOAT64 = "i", "q", "d"

REQUIRED = object()  # the default of a parameter without one

# The dtypes an argument takes, as the core's messages list them (src/torch_op/tensors.hpp has
# the same words): what the bindings tell an array of a dtype libkda has no code for (bool,
# int8, a big-endian or an object array), instead of every dtype libkda has a code for.
DTYPES_X = "float16, bfloat16 or float32"
DTYPES_OF_Q = "float16, bfloat16 or float32 (the dtype of q)"
DTYPES_OF_Q_OR_F32 = "float16, bfloat16 or float32 (the dtype of q, or float32)"
DTYPES_OF_H = "float16, bfloat16 or float32 (the dtype of h)"
DTYPES_F32 = "float32"
DTYPES_INDEX = "int32 or int64"


@dataclass(frozen=True)
class Arg:
    """One row of an operator's argument table.

    ``name`` is the table's ("do", "out.dq"); ``member`` the C struct member ("do_" for "do");
    for outputs, ``shape`` says where each extent comes from, as (input name, dim) pairs, and
    ``x`` whether it is stored in q's dtype (else float32); for inputs, ``dtypes`` is what the
    argument takes (one of the DTYPES_* above).
    """

    name: str
    member: str
    role: int
    rank: int
    shape: tuple = ()
    x: bool = False
    dtypes: str = ""

    @property
    def returned_as(self):
        """An output's name in the returned tuple ("out.dv_out" -> "dv")."""
        name = self.name[len("out."):]
        return name[: -len("_out")] if name.endswith("_out") else name


@dataclass(frozen=True)
class Option:
    """A scalar parameter of the Python signature, and how it is stored in the C header.

    kind: "optional_float" (None or a number: stored as fields (has_x, x)), "int" (int64 field)
    or "bool" (int32 field). ``schema`` is its type in the torch custom op's schema.
    """

    name: str
    kind: str
    default: object
    fields: tuple

    @property
    def schema(self):
        return {"optional_float": "float?", "int": "SymInt", "bool": "bool"}[self.kind]


@dataclass(frozen=True)
class Signature:
    """One operator.

    op            the library's operator code (KDA_OP_*) and name (kda_op_name)
    fla_name      fla's function name: the public function, the torch op and fla's dispatch
    args          the argument table, in table (= C struct) order
    header        the C problem struct's scalar fields before the tensors: (field, struct code)
    params        the Python signature after the required inputs, in fla's order: the
                  names of optional tensors and options, each with its default
    """

    op: int
    op_name: str
    fla_name: str
    args: tuple
    header: tuple
    options: tuple
    params: tuple

    @property
    def inputs(self):
        """The required tensor arguments, in order (the leading positional parameters)."""
        return tuple(a for a in self.args if a.role == ROLE_INPUT)

    @property
    def optionals(self):
        return tuple(a for a in self.args if a.role == ROLE_OPTIONAL)

    @property
    def outputs(self):
        """Outputs in table order, which is also the order they are returned in."""
        return tuple(a for a in self.args if a.role == ROLE_OUTPUT)

    @property
    def tensor_args(self):
        """Inputs and optional inputs, in table order (what a caller passes)."""
        return tuple(a for a in self.args if a.role != ROLE_OUTPUT)

    def option(self, name):
        for o in self.options:
            if o.name == name:
                return o
        raise KeyError(name)

    def parameters(self):
        """[(name, default)] of the whole Python signature (REQUIRED for the inputs), before the
        keyword-only backend and kernel."""
        return [(a.name, REQUIRED) for a in self.inputs] + list(self.params)


def _inputs(*rows):
    return tuple(Arg(name, member, ROLE_INPUT, rank, dtypes=dtypes)
                 for name, member, rank, dtypes in rows)


_INDEX_ARGS = (
    Arg("cu_seqlens", "cu_seqlens", ROLE_OPTIONAL, 1, dtypes=DTYPES_INDEX),
    Arg("chunk_indices", "chunk_indices", ROLE_OPTIONAL, 2, dtypes=DTYPES_INDEX),
)

# --- chunk_bwd_wy_dqkg: fla's chunk_kda_bwd_wy_dqkg_fused (SPEC.md) ------------------------

_BTHVK = (("q", 0), ("q", 1), ("v", 2), ("q", 3))
CHUNK_BWD_WY_DQKG = Signature(
    op=0,
    op_name="chunk_bwd_wy_dqkg",
    fla_name="chunk_kda_bwd_wy_dqkg_fused",
    args=_inputs(("q", "q", 4, DTYPES_X), ("k", "k", 4, DTYPES_OF_Q),
                 ("v", "v", 4, DTYPES_OF_Q), ("v_new", "v_new", 4, DTYPES_OF_Q),
                 ("g", "g", 4, DTYPES_F32), ("beta", "beta", 3, DTYPES_OF_Q_OR_F32),
                 ("A", "A", 4, DTYPES_OF_Q), ("h", "h", 5, DTYPES_OF_Q_OR_F32),
                 ("do", "do_", 4, DTYPES_OF_Q), ("dh", "dh", 5, DTYPES_OF_H),
                 ("dv", "dv", 4, DTYPES_OF_Q))
    + _INDEX_ARGS
    + (
        Arg("out.dq", "dq", ROLE_OUTPUT, 4, _BTHVK),
        Arg("out.dk", "dk", ROLE_OUTPUT, 4, _BTHVK),
        Arg("out.dv_out", "dv_out", ROLE_OUTPUT, 4, (("q", 0), ("q", 1), ("v", 2), ("v", 3)),
            x=True),
        Arg("out.db", "db", ROLE_OUTPUT, 3, _BTHVK[:3]),
        Arg("out.dg", "dg", ROLE_OUTPUT, 4, _BTHVK),
        # A's last extent, so that a bad chunk_size never sizes an allocation.
        Arg("out.dA", "dA", ROLE_OUTPUT, 4, _BTHVK[:3] + (("A", 3),)),
    ),
    header=(("abi_version", INT32), ("state_v_first", INT32), ("chunk_size", INT64),
            ("has_scale", INT32), ("reserved0", INT32), ("scale", FLOAT64)),
    options=(
        Option("scale", "optional_float", None, ("has_scale", "scale")),
        Option("chunk_size", "int", 64, ("chunk_size",)),
        Option("state_v_first", "bool", False, ("state_v_first",)),
    ),
    params=(("scale", None), ("cu_seqlens", None), ("chunk_size", 64), ("chunk_indices", None),
            ("state_v_first", False)),
)

# --- chunk_bwd_intra: fla's chunk_kda_bwd_intra (SPEC-chunk-bwd-intra.md) ------------------

_BTHVK_INTRA = (("q", 0), ("q", 1), ("g", 2), ("q", 3))
CHUNK_BWD_INTRA = Signature(
    op=1,
    op_name="chunk_bwd_intra",
    fla_name="chunk_kda_bwd_intra",
    args=_inputs(("q", "q", 4, DTYPES_X), ("k", "k", 4, DTYPES_OF_Q),
                 ("g", "g", 4, DTYPES_F32), ("beta", "beta", 3, DTYPES_OF_Q_OR_F32),
                 ("dAqk", "dAqk", 4, DTYPES_F32), ("dAkk", "dAkk", 4, DTYPES_F32),
                 ("dq", "dq", 4, DTYPES_F32), ("dk", "dk", 4, DTYPES_F32),
                 ("db", "db", 3, DTYPES_F32), ("dg", "dg", 4, DTYPES_F32))
    + _INDEX_ARGS
    + (
        Arg("out.dq", "dq_out", ROLE_OUTPUT, 4, _BTHVK_INTRA),
        Arg("out.dk", "dk_out", ROLE_OUTPUT, 4, _BTHVK_INTRA),
        Arg("out.db", "db_out", ROLE_OUTPUT, 3, _BTHVK_INTRA[:3]),
        Arg("out.dg", "dg_out", ROLE_OUTPUT, 4, _BTHVK_INTRA),
    ),
    header=(("abi_version", INT32), ("safe_gate", INT32), ("chunk_size", INT64)),
    options=(
        Option("chunk_size", "int", 64, ("chunk_size",)),
        Option("safe_gate", "bool", False, ("safe_gate",)),
    ),
    params=(("cu_seqlens", None), ("chunk_indices", None), ("chunk_size", 64),
            ("safe_gate", False)),
)

SIGNATURES = (CHUNK_BWD_WY_DQKG, CHUNK_BWD_INTRA)
BY_FLA_NAME = {s.fla_name: s for s in SIGNATURES}
