"""One call of an operator through the C ABI, for every operator alike: its options converted to
the C header, its tensors described, its outputs' shapes, the problem struct packed, and
kda_<op>_run called.

The NumPy and torch paths each describe their own arrays (data pointer, dtype code, shape,
element strides, device) and allocate their own outputs; everything they share is here. No rule
of the contract is checked in Python: the core validates once and its message becomes the
exception (see _errors).
"""

import ctypes
import operator

from . import _abi, _errors, _library, _signatures

_INT64_MAX = 2**63 - 1

# Where validate_before_allocating describes outputs not allocated yet (see there).
_PLACEHOLDER_BASE = 1 << 58
_PLACEHOLDER_ALIGN = 1 << 12
_ITEMSIZE = {_abi.DTYPE_F16: 2, _abi.DTYPE_BF16: 2, _abi.DTYPE_F32: 4, _abi.DTYPE_I32: 4,
             _abi.DTYPE_I64: 8, _abi.DTYPE_F64: 8}

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


def _host_values(index):
    """An index tensor's values when they are on the host (a NumPy array, a list or a CPU torch
    tensor), else None."""
    device = getattr(index, "device", None)
    if device is not None and getattr(device, "type", "cpu") != "cpu":
        return None
    tolist = getattr(index, "tolist", None)
    return tolist() if tolist is not None else list(index)


# The value tensors a state scan's V comes from, the first one present ([B, T, HV, V]).
_VALUE_TENSORS = ("do", "u", "v")


def named_extents(shapes, options, optionals, anchor):
    """The outputs' extents that no input has, by the names the tables' shape rules give them,
    as the core computes them (validation::state_scan_extent, behind chunk_bwd_dhu's and
    chunk_fwd_h's named_extent): "chunks" (chunk_indices' rows; without cu_seqlens
    ceil(T / chunk_size); else counted from host cu_seqlens), "seqs" (len(cu_seqlens) - 1, else
    B), "state_rows" and "state_cols" (K, V; V, K with state_v_first). B, T and K come from
    ``anchor``, the operator's first input (q, or chunk_fwd_h's k: [B, T, H, K]), V from the
    first of "do", "u", "v" in ``shapes``. -1 where the inputs do not say (device cu_seqlens and
    no chunk_indices): the core's validation then names what is missing."""
    x = tuple(shapes.get(anchor, ()))
    cu_seqlens, chunk_indices = optionals.get("cu_seqlens"), optionals.get("chunk_indices")
    chunk_size = options.get("chunk_size", 64)
    if chunk_indices is not None:
        chunks = chunk_indices.shape[0]
    elif cu_seqlens is None:
        chunks = -(-x[1] // chunk_size) if len(x) == 4 and chunk_size > 0 else -1
    else:
        values = _host_values(cu_seqlens) if chunk_size > 0 else None
        chunks = -1 if values is None else sum(
            -(-max(b - a, 0) // chunk_size) for a, b in zip(values, values[1:]))
    K = x[3] if len(x) == 4 else -1
    value = next((tuple(shapes[n]) for n in _VALUE_TENSORS if n in shapes), ())
    V = value[3] if len(value) == 4 else -1
    v_first = bool(options.get("state_v_first", False))
    return {"chunks": chunks,
            "seqs": cu_seqlens.shape[0] - 1 if cu_seqlens is not None else (x[0] if x else -1),
            "state_rows": V if v_first else K,
            "state_cols": K if v_first else V}


class Operator:
    """An operator's Python-side plumbing, built from its signature (_signatures).

    Attributes: ``signature``; ``name`` (fla's function name, the prefix of every message);
    ``input_names`` (the required tensors; the first, ``anchor``, is q or chunk_fwd_h's k: it
    sets X and the device), ``optional_names`` (cu_seqlens, chunk_indices),
    ``output_names`` (table names, "out.dq" ...), ``returned`` (the names outputs are returned
    under); ``layout`` (its _abi.ProblemLayout).
    """

    def __init__(self, signature):
        self.signature = signature
        self.name = signature.fla_name
        self.layout = _abi.LAYOUT_BY_FLA_NAME[self.name]
        self.input_names = tuple(a.name for a in signature.inputs)
        self.anchor = self.input_names[0]
        self.optional_names = tuple(a.name for a in signature.optionals)
        self.output_names = tuple(a.name for a in signature.outputs)
        self.returned = tuple(a.returned_as for a in signature.outputs)
        self.option_names = tuple(o.name for o in signature.options)
        # What each input (optional ones included) takes, for a dtype libkda has no code for.
        self.dtypes = {a.name: a.dtypes for a in signature.tensor_args}
        # (output's rank, [(input name, dim)], in X) per output, for output_layout.
        self._outputs = tuple((a.rank, a.shape, a.x) for a in signature.outputs)
        # Whether some output has an extent the operator names (output_layout needs the options
        # and the optional tensors then).
        self.named = any(dim is None for a in signature.outputs for _, dim in a.shape)
        self._ranks = {a.name: a.rank for a in signature.args}
        # Where each header field comes from: ABI version, an option's converted value, or 0.
        self._header = []
        for field, _ in signature.header:
            source = ("abi",) if field == "abi_version" else ("zero",)
            for i, opt in enumerate(signature.options):
                if field in opt.fields:
                    source = ("option", i, opt.fields.index(field))
            self._header.append(source)

    # --- options --------------------------------------------------------------------------

    def where(self, argument):
        return f"{self.name}: argument '{argument}'"

    def convert_options(self, values):
        """The options (in the signature's option order) as canonical Python values: a float or
        None, an int, a bool. Only conversions: whether a value is allowed is the core's call;
        a value that is not of the option's kind at all is a TypeError naming it."""
        return tuple(self._convert(opt, value)
                     for opt, value in zip(self.signature.options, values))

    def _convert(self, opt, value):
        if opt.kind == "optional_float":
            if value is None:
                return None
            # float() would also take True and numeric strings: a number, or nothing.
            if not isinstance(value, (bool, str, bytes)):
                try:
                    return float(value)
                except (TypeError, ValueError):
                    pass
                except OverflowError:  # float(10**400): a number, but not one we can take
                    raise ValueError(
                        f"{self.where(opt.name)}: expected a finite float, got an "
                        f"{type(value).__name__} too large for a float"
                    ) from None
            raise TypeError(
                f"{self.where(opt.name)}: expected a float or None, got {type(value).__name__}"
            )
        if opt.kind == "int":
            try:
                number = operator.index(value)
            except TypeError:
                raise TypeError(
                    f"{self.where(opt.name)}: expected an int, got {type(value).__name__}"
                ) from None
            if not -_INT64_MAX <= number <= _INT64_MAX:  # ctypes would wrap it silently
                raise ValueError(f"{self.where(opt.name)}: {number} does not fit in int64")
            return number
        # bool() would read any non-empty string, 'False' included, as True.
        if isinstance(value, (str, bytes)) or value not in (True, False):
            raise TypeError(f"{self.where(opt.name)}: expected a bool, got {value!r}")
        return bool(value)

    def header(self, options):
        """The C header's values (abi_version first) from convert_options' result."""
        values = []
        for source in self._header:
            if source[0] == "abi":
                values.append(_abi.ABI_VERSION)
            elif source[0] == "zero":
                values.append(0)
            else:
                _, i, part = source
                value = options[i]
                kind = self.signature.options[i].kind
                if kind == "optional_float":  # (has_x, x)
                    value = (0, 0.0)[part] if value is None else (1, value)[part]
                elif kind == "bool":
                    value = int(value)
                values.append(value)
        return values

    def backend_code(self, backend, on_cuda):
        """kda_backend code for a backend name; None picks cuda for CUDA tensors, else cpu."""
        if backend is None:
            backend = "cuda" if on_cuda else "cpu"
        code = _abi.BACKENDS.get(backend) if isinstance(backend, str) else None
        if code is None:
            names = ", ".join(repr(n) for n in _abi.BACKENDS)
            raise ValueError(f"{self.where('backend')}: expected None, {names}, got {backend!r}")
        return code

    def kernel_code(self, kernel):
        """KDA_KERNEL_* code for a kernel name ('auto', 'simt', 'sm80_mma')."""
        code = _abi.KERNELS.get(kernel) if isinstance(kernel, str) else None
        if code is None:
            names = ", ".join(repr(n) for n in _abi.KERNELS)
            raise ValueError(f"{self.where('kernel')}: expected one of {names}, got {kernel!r}")
        return code

    # --- tensors --------------------------------------------------------------------------

    def output_layout(self, shapes, options=None, optionals=None):
        """The outputs' (shape, in_x) in table order, derived from the inputs' shapes
        (``shapes`` maps input names to shapes) and, for the extents an operator names (its
        rule's terms without a dot: ``named_extents``), from ``options`` (option name to
        value) and ``optionals`` (optional tensor name to array, tensor or None). in_x marks an
        output stored in X (the anchor's dtype); the others are float32. Where a source input
        does not have its table rank the extents are 0: the core then reports that input, which
        it checks before any output."""
        named = (named_extents(shapes, options or {}, optionals or {}, self.anchor)
                 if self.named else {})
        layout = []
        for rank, sources, in_x in self._outputs:
            shape = []
            for name, dim in sources:
                if dim is None:
                    shape.append(max(named[name], 0))
                    continue
                source = shapes[name]
                shape.append(source[dim] if len(source) == self._ranks[name] else 0)
            layout.append((tuple(shape), in_x))
        return layout

    def validate_before_allocating(self, tensors, layout, x_code, device, options):
        """Validates a call whose outputs are not allocated yet, so that a call that cannot run
        is refused before its outputs are: a bad chunk_size once gave "MemoryError: Unable to
        allocate 4.00 TiB" for broadcast inputs instead of the chunk_size error.

        ``tensors`` holds the field values of the inputs and optional tensors (table order),
        ``layout`` is ``output_layout``'s result, ``x_code`` X's code (the anchor's dtype),
        ``device`` the anchor's (device type, index). The outputs are described, contiguous, at
        placeholder addresses from 2^58 on: above every user-space address of a 64-bit Linux
        process (2^57 at most, with 5-level paging), where no input lies, host or device (CUDA's
        unified addresses are user-space ones): they overlap no input, as the fresh outputs
        will not. The core's validation reads descriptors only (and the contents of host index
        tensors, which are inputs: docs/reliability.md), so the placeholders are never
        dereferenced. Raises the core's error naming the argument. Placeholders past 2^63
        (outputs far beyond any memory) are not described: the run validates anyway."""
        base = _PLACEHOLDER_BASE
        outputs = []
        for shape, in_x in layout:
            code = x_code if in_x else _abi.DTYPE_F32
            count, strides = 1, []
            for n in reversed(shape):
                strides.append(count)
                count *= max(n, 0)
            outputs.append(tensor_fields(base, code, shape, strides[::-1], *device))
            base += (count * _ITEMSIZE[code] // _PLACEHOLDER_ALIGN + 1) * _PLACEHOLDER_ALIGN
        if base >= 1 << 63:
            return
        lib = _library.library()
        problem = self.pack([*tensors, *outputs], options)
        _errors.check(lib.entry(self.signature, "validate")(ctypes.byref(problem)), lib,
                      self.name)

    def pack(self, tensors, options):
        """The problem struct of one call: ``tensors`` holds the kda_tensor field values of
        every argument in table order (inputs, cu_seqlens, chunk_indices, outputs);
        ``options`` is convert_options' result."""
        return self.layout.pack(self.header(options), tensors)

    def run(self, tensors, options, backend, kernel, stream=None):
        """Run the operator once on ``pack(tensors, options)``.

        Parameters
        ----------
        tensors, options
            As for ``pack``.
        backend, kernel : int
            ``backend_code(...)`` and ``kernel_code(...)``'s results.
        stream : int or None
            A cudaStream_t as an integer, for the cuda backend; None is the default stream.
        """
        lib = _library.library()
        problem = self.pack(tensors, options)
        status = lib.entry(self.signature, "run")(ctypes.byref(problem), backend, kernel, stream)
        _errors.check(status, lib, self.name)


OPERATORS = {s.fla_name: Operator(s) for s in _signatures.SIGNATURES}
CHUNK_BWD_WY_DQKG = OPERATORS["chunk_kda_bwd_wy_dqkg_fused"]
CHUNK_BWD_INTRA = OPERATORS["chunk_kda_bwd_intra"]


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


def chunk_size_value(chunk_size, where="chunk_indices"):
    """chunk_size as an int64 for the chunk helpers (TypeError/ValueError naming it)."""
    try:
        chunk = operator.index(chunk_size)
    except TypeError:
        raise TypeError(
            f"{where}: argument 'chunk_size': expected an int, got {type(chunk_size).__name__}"
        ) from None
    if not -_INT64_MAX <= chunk <= _INT64_MAX:
        raise ValueError(f"{where}: argument 'chunk_size': {chunk} does not fit in int64")
    return chunk
