"""The operators' signatures, read from op_tables.json: libkda's tables (the rows of
include/kda/ops/<op>_args.h, as the C ABI's kda_op_* functions report them, written by the
kda_op_tables tool; ctest's op_tables_json_current keeps the file current). For each operator
its fla function name, its rows (tensors and options in fla's order, then the outputs), the
scalar header of its C problem struct, its options and its outputs in return order.

Everything else in the package is derived from these tables: the ctypes problem structs and
their one-call packing (_abi), the check of a loaded libkda's own tables (kda_op_* functions,
_library), the NumPy path, the torch custom ops' schemas and fake implementations (_torch_op)
and the fla backend's method names (fla). Pure Python: a JSON file is read, nothing is loaded.
"""

import json
from dataclasses import dataclass
from pathlib import Path

# kda/args.h
ROLE_INPUT = 0
ROLE_OPTIONAL = 1
ROLE_OUTPUT = 2
ROLE_OPTION = 3
ROLE_NAMES = {ROLE_INPUT: "input", ROLE_OPTIONAL: "optional", ROLE_OUTPUT: "output",
              ROLE_OPTION: "option"}
TYPE_X, TYPE_OF_Q, TYPE_OF_Q_OR_F32, TYPE_OF_H, TYPE_F32, TYPE_INDEX = range(6)
TYPE_BOOL, TYPE_INT, TYPE_FLOAT_OR_NONE = 6, 7, 8

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
DTYPE_TEXTS = {TYPE_X: DTYPES_X, TYPE_OF_Q: DTYPES_OF_Q, TYPE_OF_Q_OR_F32: DTYPES_OF_Q_OR_F32,
           TYPE_OF_H: DTYPES_OF_H, TYPE_F32: DTYPES_F32, TYPE_INDEX: DTYPES_INDEX}


def dtype_text(kind, anchor):
    """DTYPE_TEXTS[kind] for an operator whose first row (the anchor, which sets X) is
    ``anchor``: "the dtype of q" names chunk_fwd_h's k there."""
    text = DTYPE_TEXTS[kind]
    return text.replace("the dtype of q", f"the dtype of {anchor}") if anchor != "q" else text


@dataclass(frozen=True)
class Arg:
    """One row of an operator's argument table.

    ``name`` is the table's ("do", "out.dq"); ``member`` the ctypes field's name; for outputs, ``shape`` says where each extent comes from, as (input name, dim) pairs, and
    ``x`` whether it is stored in X, the first row's dtype (else float32); for inputs,
    ``dtypes`` is what the argument takes (one of the DTYPES_* above, naming the first row)
    and ``type_code`` its row's type (TYPE_X ... TYPE_INDEX).
    """

    name: str
    member: str
    role: int
    rank: int
    shape: tuple = ()
    x: bool = False
    dtypes: str = ""
    type_code: int = -1

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
    args          the tensor rows, in table (= C struct) order
    header        the C problem struct's scalar fields before the tensors: (field, struct code)
    params        the Python signature after the required inputs, in fla's order: the
                  names of optional tensors and options, each with its default
    rows          every row as libkda reports it: (name, role, type, rank, rule, offset)
    problem_size  sizeof the C problem struct
    """

    op: int
    op_name: str
    fla_name: str
    args: tuple
    header: tuple
    options: tuple
    params: tuple
    rows: tuple = ()
    problem_size: int = 0

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


_OPTION_KINDS = {TYPE_BOOL: "bool", TYPE_INT: "int", TYPE_FLOAT_OR_NONE: "optional_float"}
OPTION_TYPES = {kind: code for code, kind in _OPTION_KINDS.items()}


def _default(row):
    """An option's default from its table text ("64", "false", "none")."""
    kind, text = row["type"], row["rule"]
    if kind == TYPE_BOOL:
        return text == "true"
    if kind == TYPE_INT:
        return int(text)
    return None


def _shape_rule(rule):
    """"q.0 q.1 v.2 q.3" -> (("q", 0), ("q", 1), ("v", 2), ("q", 3)); a term without a dot is
    an extent the operator names ("chunks" -> ("chunks", None): _problem.named_extents)."""
    return tuple((term.rsplit(".", 1)[0], int(term.rsplit(".", 1)[1])) if "." in term
                 else (term, None) for term in rule.split())


def _signature(table):
    """One operator's Signature from its entry of op_tables.json."""
    args, header, options, params, rows = [], [("abi_version", INT32)], [], [], []
    anchor = table["rows"][0]["name"]  # the first row: q, or chunk_fwd_h's k
    for row in table["rows"]:
        name, role, kind = row["name"], row["role"], row["type"]
        rows.append((name, role, kind, row["rank"], row["rule"], row["offset"]))
        if role == ROLE_OPTION:
            if kind == TYPE_FLOAT_OR_NONE:
                fields = ("has_" + name, name)
                header += [(fields[0], INT32), (name, FLOAT64)]
            else:
                fields = (name,)
                header.append((name, INT32 if kind == TYPE_BOOL else INT64))
            options.append(Option(name, _OPTION_KINDS[kind], _default(row), fields))
            params.append((name, _default(row)))
            continue
        member = "t_" + name.replace(".", "_")
        if role == ROLE_OUTPUT:
            args.append(Arg(name, member, role, row["rank"], _shape_rule(row["rule"]),
                            x=kind == TYPE_OF_Q))
            continue
        args.append(Arg(name, member, role, row["rank"], dtypes=dtype_text(kind, anchor),
                        type_code=kind))
        if role == ROLE_OPTIONAL:
            params.append((name, None))
    return Signature(op=table["op"], op_name=table["name"], fla_name=table["fla_name"],
                     args=tuple(args), header=tuple(header), options=tuple(options),
                     params=tuple(params), rows=tuple(rows), problem_size=table["problem_size"])


_TABLES = json.loads((Path(__file__).resolve().parent / "op_tables.json").read_text())
ABI_VERSION = _TABLES["abi_version"]
SIGNATURES = tuple(_signature(table) for table in _TABLES["ops"])
BY_FLA_NAME = {s.fla_name: s for s in SIGNATURES}
BY_NAME = {s.op_name: s for s in SIGNATURES}
