"""The operators on torch tensors, each the custom op ``torch.ops.kda_kernels.<fla name>``
(chunk_kda_bwd_wy_dqkg_fused, chunk_kda_bwd_intra), in one of two implementations (_torch_ext
picks, once, at import):

- compiled: registered from C++ by libkda_torch (src/torch_op), which calls libkda's C++ API;
  its fake (meta) implementation is registered here;
- python: registered here by one helper from the operator's signature (_signatures): schema,
  implementation over libkda's C ABI (ctypes), fake implementation.

Both have one schema (test_torch checks that they agree), the same checks in the same order and
the same exceptions and messages. Being a custom op with a fake implementation is what lets
torch.compile(fullgraph=True) trace a caller without a graph break, and the CUDA path does
nothing a CUDA graph cannot capture: outputs come from torch's caching allocator, the kernel goes
on torch's current stream, and cu_seqlens / chunk_indices on the GPU are passed as device
pointers, never read on the host.

Every op takes its arguments positionally in the public function's order (the required
tensors, then fla's optional tensors and options with their defaults), then ``backend`` (a name
or None) and ``cuda_kernel`` (a name: the public functions' ``kernel`` keyword).
"""

import torch

from . import _abi, _numpy_path, _problem, _torch_ext

_DTYPE_CODES = {
    torch.float16: _abi.DTYPE_F16,
    torch.bfloat16: _abi.DTYPE_BF16,
    torch.float32: _abi.DTYPE_F32,
    torch.float64: _abi.DTYPE_F64,
    torch.int32: _abi.DTYPE_I32,
    torch.int64: _abi.DTYPE_I64,
}
_DEVICE_TYPES = {"cpu": _abi.DEVICE_CPU, "cuda": _abi.DEVICE_CUDA}


def describe(op, name, tensor):
    """kda_tensor field values of a torch tensor (``_problem.tensor_fields``); TypeError or
    ValueError naming the argument when it cannot be expressed as a kda_tensor at all (None,
    which the dispatcher passes for a required tensor; foreign dtype, sparse layout, device
    other than cpu/cuda). Paid for every tensor of every call, so the common case is a few dict
    lookups and the messages are built only on failure."""
    if tensor is None:
        raise _none_error(op, name)
    code = _DTYPE_CODES.get(tensor.dtype)
    device = tensor.device
    device_type = _DEVICE_TYPES.get(device.type)
    if code is None or device_type is None or tensor.layout != torch.strided or tensor.is_nested:
        _refuse(op, name, tensor, code)
    return _problem.tensor_fields(tensor.data_ptr(), code, tensor.shape, tensor.stride(),
                                  device_type, device.index or 0)


def _none_error(op, name):
    return TypeError(f"{op.where(name)}: expected a torch.Tensor, got None")


def _refuse(op, name, tensor, code):
    where = op.where(name)
    if code is None:
        # What this argument takes, not every dtype libkda has a code for.
        raise TypeError(f"{where}: expected dtype {op.dtypes[name]}, got {tensor.dtype}")
    if tensor.layout != torch.strided or tensor.is_nested:
        raise ValueError(f"{where}: expected a dense (strided) tensor, got {_layout(tensor)}")
    raise ValueError(f"{where}: expected a cpu or cuda tensor, got one on {tensor.device}")


def _layout(tensor):
    return "a nested tensor" if tensor.is_nested else str(tensor.layout)


def _schema(op):
    """The custom op's schema, from the signature: "(Tensor q, ..., Tensor? cu_seqlens=None, ...,
    str? backend=None, str cuda_kernel=\"auto\") -> (Tensor, ...)", with the public function's
    defaults. The public keyword `kernel` is `cuda_kernel` here: Inductor's fallback for custom
    ops takes a parameter named `kernel` of its own, and a schema argument of that name broke
    torch.compile ("FallbackKernel.create() got multiple values for argument 'kernel'", seen on
    the H200)."""
    sig = op.signature
    params = [f"Tensor {name}" for name in op.input_names]
    for name, default in sig.params:
        kind = "Tensor?" if name in op.optional_names else sig.option(name).schema
        params.append(f"{kind} {name}={default}")
    params += ["str? backend=None", 'str cuda_kernel="auto"']
    returns = ", ".join(["Tensor"] * len(op.output_names))
    return f"({', '.join(params)}) -> ({returns})"


_STRIDED = torch.strided
_BACKEND_NAMES = frozenset(_abi.BACKENDS)
_KERNEL_NAMES = frozenset(_abi.KERNELS)
_INT64_MAX = 2**63 - 1


def _plain_float_or_none(value):
    return value is None or type(value) is float


def _plain_int(value):
    return type(value) is int and -_INT64_MAX <= value <= _INT64_MAX


def _plain_bool(value):
    return type(value) is bool


# Per option kind: whether a value needs no conversion (convert_options would return it as is).
_PLAIN = {"optional_float": _plain_float_or_none, "int": _plain_int, "bool": _plain_bool}


class TorchOp:
    """One operator as a torch custom op: its ctypes implementation (``run_ctypes``), its fake
    implementation, the public function's torch path (``call``), and ``run``: what the fla
    backend calls with every argument positional (the compiled op's dispatcher entry, or
    run_ctypes past torch's dispatcher)."""

    def __init__(self, op, compiled):
        self.op = op
        self.qualname = "kda_kernels::" + op.name
        params = [name for name, _ in op.signature.params]
        first = len(op.input_names)
        self._input_at = tuple(range(first))
        self._optional_at = tuple(first + params.index(n) for n in op.optional_names)
        self._tensor_at = self._input_at + self._optional_at
        self._option_at = tuple(first + params.index(n) for n in op.option_names)
        self._option_plain = tuple(
            (i, _PLAIN[o.kind]) for i, o in zip(self._option_at, op.signature.options))
        self.num_args = first + len(params) + 2  # + backend, kernel
        # Every parameter's name and default (None for the required tensors), in order.
        self._names = (*op.input_names, *params, "backend", "cuda_kernel")
        self._defaults = ((None,) * first + tuple(d for _, d in op.signature.params)
                          + (None, "auto"))
        self.schema = _schema(op)
        if compiled:
            # Defined in C++ (with set_python_module naming this module, where torch requires
            # the fake implementation of a C++ op to be registered).
            torch.library.register_fake(self.qualname)(self.fake)
        else:
            custom_op = torch.library.custom_op(self.qualname, self.run_ctypes, mutates_args=(),
                                                schema=self.schema)
            custom_op.register_fake(self.fake)
        self.packet = getattr(torch.ops.kda_kernels, op.name)
        self.default = self.packet.default
        # The fla backend's calls are always eager (fla's dispatch is torch.compiler.disable'd):
        # the compiled op's dispatcher entry itself, which OpOverload.__call__ only forwards to
        # (a Python frame less per call). The public function keeps ``default``, which
        # torch.compile traces.
        self.run = getattr(self.default, "_op", self.default) if compiled else self.run_ctypes

    def _positional(self, args, kwargs):
        """All arguments positionally, defaults filled in: the dispatcher hands the
        implementations what the caller wrote, keywords and omitted defaults included."""
        if len(args) == self.num_args and not kwargs:
            return args
        full = list(args) + list(self._defaults[len(args):])
        for name, value in kwargs.items():
            full[self._names.index(name)] = value
        return full

    def _layout(self, args):
        """The outputs' (shape, in_x), from the inputs' shapes (and for an operator's named
        extents its options and optional tensors)."""
        op = self.op
        shapes = {name: t.shape for name, t in zip(op.input_names, args)}
        if not op.named:
            return op.output_layout(shapes)
        options = {name: args[i] for name, i in zip(op.option_names, self._option_at)}
        optionals = {name: args[i] for name, i in zip(op.optional_names, self._optional_at)}
        return op.output_layout(shapes, options, optionals)

    def _empty_outputs(self, args):
        q = args[0]
        return [q.new_empty(shape, dtype=q.dtype if in_x else torch.float32)
                for shape, in_x in self._layout(args)]

    def run_ctypes(self, *args, **kwargs):
        """The ctypes implementation for real (CPU or CUDA) tensors: allocate the outputs on
        q's device, describe every tensor and run libkda on the chosen backend. The python
        op's implementation; with the compiled op, what tests and benchmarks compare it to."""
        op = self.op
        args = self._positional(args, kwargs)
        options = op.convert_options([args[i] for i in self._option_at])
        q = args[0]
        on_cuda = q is not None and q.device.type == "cuda"  # None: refused below, naming q
        backend = op.backend_code(args[-2], on_cuda)
        kernel = op.kernel_code(args[-1])
        tensors = [describe(op, name, t) for name, t in zip(op.input_names, args)]
        for name, i in zip(op.optional_names, self._optional_at):
            value = args[i]
            tensors.append(_problem.OMITTED if value is None else describe(op, name, value))
        try:
            outputs = self._empty_outputs(args)
        except (MemoryError, RuntimeError):  # torch.OutOfMemoryError is a RuntimeError
            # Allocated before validation, which the run does: nothing is checked twice on the
            # hot path. When the outputs cannot be allocated, a call that could not run anyway
            # says why (a bad chunk_size, not "can't allocate 64 TiB"); a valid one keeps the
            # allocation's error.
            self._refuse_if_invalid(args, tensors, options)
            raise
        tensors.extend(describe(op, name, out) for name, out in zip(op.output_names, outputs))
        # The core makes q's device current for the launch itself; torch's current stream on
        # that device is the one a caller (or a CUDA graph capture) expects the work on.
        stream = torch.cuda.current_stream(q.device).cuda_stream if on_cuda else None
        op.run(tensors, options, backend, kernel, stream)
        return tuple(outputs)

    def _refuse_if_invalid(self, args, tensors, options):
        """The core's error for this call, validated with placeholder outputs
        (``Operator.validate_before_allocating``), raised without the allocation error as its
        context; nothing when the call is valid."""
        op = self.op
        q = args[0]
        device = (_DEVICE_TYPES[q.device.type], q.device.index or 0)
        try:
            op.validate_before_allocating(tensors, self._layout(args), tensors[0][1],
                                          device, options)
        except (TypeError, ValueError) as invalid:
            raise invalid from None

    def fake(self, *args, **kwargs):
        args = self._positional(args, kwargs)
        for name, i in zip(self.op.input_names, self._input_at):
            if args[i] is None:
                raise _none_error(self.op, name)
        self._refuse_meta_beside_real(args)
        return tuple(self._empty_outputs(args))

    def _refuse_meta_beside_real(self, args):
        """The dispatcher sends every call with a meta tensor to the fake implementation, one
        with meta tensors among real ones too, which would get uninitialized real outputs:
        refused here (ValueError naming the first tensor on the other side of q), whichever way
        the op was called. All-meta calls (shape inference) and fake tensors (torch.compile)
        pass."""
        on_meta = args[0].is_meta
        for i in self._tensor_at:
            value = args[i]
            if isinstance(value, torch.Tensor) and value.is_meta != on_meta:
                raise self._argument_error(args, i)

    def call(self, args):
        """The public function's torch path, ``args`` being the op's arguments in order (q a
        torch.Tensor): what the dispatcher would report without naming the argument, or not at
        all, is reported naming it. Each required input must be a dense tensor (the optional
        ones may be None); the options must be of their kinds; `backend` and `kernel` must be
        names; and a tensor on the meta device must not be mixed with real ones (the dispatcher
        sends such a call to the fake implementation, which refuses it).

        Paid on every call, so the common one costs a few comparisons: options of their usual
        types and known names go straight to the op, and the tensors are looked at only when
        the op fails (a non-tensor, a sparse or a nested tensor fails in the dispatcher or the
        op): then the first bad tensor's named error replaces the op's, as if checked first.
        Anything else (options to convert, like an int scale or a NumPy integer chunk_size, or
        to refuse) takes the full sequence: tensors, options, backend, kernel, then the op."""
        for i, plain in self._option_plain:
            if not plain(args[i]):
                return self._call_checked(args)
        backend, kernel = args[-2], args[-1]
        if ((backend is not None and (type(backend) is not str or backend not in _BACKEND_NAMES))
                or type(kernel) is not str or kernel not in _KERNEL_NAMES):
            return self._call_checked(args)
        try:
            return self.default(*args)
        except Exception:
            error = self._tensor_error(args)
            if error is None:
                raise
        raise error

    def _call_checked(self, args):
        """``call`` with every check before the op, in the order of the arguments' kinds."""
        error = self._tensor_error(args)
        if error is not None:
            raise error
        for i, plain in self._option_plain:
            if not plain(args[i]):
                args = self._converted(args)
                break
        backend, kernel = args[-2], args[-1]
        if backend is not None and (type(backend) is not str or backend not in _BACKEND_NAMES):
            self.op.backend_code(backend, on_cuda=False)  # the ValueError naming it
        if type(kernel) is not str or kernel not in _KERNEL_NAMES:
            self.op.kernel_code(kernel)
        return self.default(*args)

    def _tensor_error(self, args):
        """The error naming the first tensor argument that is not a dense tensor on q's side of
        the meta device (None: the optional ones may be), or None."""
        on_meta = args[0].is_meta
        for i in self._input_at:
            value = args[i]
            if (not isinstance(value, torch.Tensor) or value.is_meta != on_meta
                    or value.layout is not _STRIDED or value.is_nested):
                return self._argument_error(args, i)
        for i in self._optional_at:
            value = args[i]
            if value is not None and (not isinstance(value, torch.Tensor)
                                      or value.is_meta != on_meta
                                      or value.layout is not _STRIDED or value.is_nested):
                return self._argument_error(args, i)
        return None

    def _argument_error(self, args, i):
        name = self._names[i]
        value = args[i]
        anchor = self.op.anchor  # q, or chunk_fwd_h's k
        x = args[0]
        if not isinstance(value, torch.Tensor):
            return TypeError(
                f"{self.op.where(name)}: expected a torch.Tensor like {anchor}, got "
                f"{type(value).__name__}"
            )
        if value.is_meta != x.is_meta:
            return ValueError(
                f"{self.op.where(name)}: is on {value.device} but {anchor} is on {x.device}; "
                f"tensors on the meta device only go with other meta tensors"
            )
        # The dispatcher has no kernel for some layouts (nested tensors; sparse ones with some
        # torch versions) and raises NotImplementedError without the argument's name.
        return ValueError(
            f"{self.op.where(name)}: expected a dense (strided) tensor, got {_layout(value)}"
        )

    def _converted(self, args):
        """``args`` with the options converted (TypeError/ValueError naming a bad one)."""
        options = self.op.convert_options([args[i] for i in self._option_at])
        args = list(args)
        for i, value in zip(self._option_at, options):
            args[i] = value
        return args


CHOICE = _torch_ext.choose()
OPS = {name: TorchOp(op, CHOICE.backend == "compiled")
       for name, op in _problem.OPERATORS.items()}


def chunk_indices(cu_seqlens, chunk_size):
    """chunk_indices for a torch cu_seqlens (int32 or int64, as the operators take it): computed
    on the host (a CUDA cu_seqlens is copied there, which synchronizes), returned on cu_seqlens'
    device in its dtype."""
    if cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise TypeError(
            f"chunk_indices: argument 'cu_seqlens': expected dtype int32 or int64, "
            f"got {cu_seqlens.dtype}"
        )
    host = cu_seqlens.detach().to("cpu", torch.int64).numpy()
    pairs = _numpy_path.chunk_indices(host, chunk_size)
    return torch.from_numpy(pairs).to(device=cu_seqlens.device, dtype=cu_seqlens.dtype)
