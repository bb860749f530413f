"""The operator on torch tensors, registered as the custom op
``torch.ops.kda_kernels.chunk_kda_bwd_wy_dqkg_fused``.

Being a custom op with a fake (meta) implementation is what lets torch.compile(fullgraph=True)
trace a caller without a graph break, and the CUDA path does nothing a CUDA graph cannot capture:
outputs come from torch's caching allocator, the kernel goes on torch's current stream, and
cu_seqlens / chunk_indices on the GPU are passed as device pointers, never read on the host.
"""

from typing import Optional, Tuple

import torch

from . import _abi, _numpy_path, _problem

OP_QUALNAME = "kda_kernels::" + _problem.OP_NAME

_DTYPE_CODES = {
    torch.float16: _abi.DTYPE_F16,
    torch.bfloat16: _abi.DTYPE_BF16,
    torch.float32: _abi.DTYPE_F32,
    torch.float64: _abi.DTYPE_F64,
    torch.int32: _abi.DTYPE_I32,
    torch.int64: _abi.DTYPE_I64,
}
_DEVICE_TYPES = {"cpu": _abi.DEVICE_CPU, "cuda": _abi.DEVICE_CUDA}


def describe(name, tensor):
    """kda_tensor field values of a torch tensor (``_problem.tensor_fields``); TypeError or
    ValueError naming the argument when it cannot be expressed as a kda_tensor at all (foreign
    dtype, sparse layout, device other than cpu/cuda). Paid for 17 tensors on every call, so the
    common case is a few dict lookups and the messages are built only on failure."""
    code = _DTYPE_CODES.get(tensor.dtype)
    device = tensor.device
    device_type = _DEVICE_TYPES.get(device.type)
    if code is None or device_type is None or tensor.layout != torch.strided:
        _refuse(name, tensor, code, device_type)
    return _problem.tensor_fields(tensor.data_ptr(), code, tensor.shape, tensor.stride(),
                                  device_type, device.index or 0)


def _refuse(name, tensor, code, device_type):
    where = f"{_problem.OP_NAME}: argument '{name}'"
    if code is None:
        raise TypeError(
            f"{where}: expected dtype float16, bfloat16, float32, int32 or int64, "
            f"got {tensor.dtype}"
        )
    if tensor.layout != torch.strided:
        raise ValueError(f"{where}: expected a dense (strided) tensor, got {tensor.layout}")
    raise ValueError(f"{where}: expected a cpu or cuda tensor, got one on {tensor.device}")


def _empty_outputs(q, v, A):
    layout = _problem.output_layout(q.shape, v.shape, A.shape)
    return [
        q.new_empty(shape, dtype=q.dtype if in_x else torch.float32)
        for shape, in_x in layout.values()
    ]


def _run(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    v_new: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    A: torch.Tensor,
    h: torch.Tensor,
    do: torch.Tensor,
    dh: torch.Tensor,
    dv: torch.Tensor,
    scale: Optional[float],
    cu_seqlens: Optional[torch.Tensor],
    chunk_size: int,
    chunk_indices: Optional[torch.Tensor],
    state_v_first: bool,
    backend: Optional[str],
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The custom op's implementation for real (CPU or CUDA) tensors: allocate the outputs on
    q's device, describe every tensor and run libkda on the chosen backend."""
    options = _problem.scalar_options(scale, chunk_size, state_v_first)
    on_cuda = q.device.type == "cuda"
    code = _problem.backend_code(backend, on_cuda)
    fields = [
        describe(name, t)
        for name, t in zip(_abi.INPUT_FIELDS, (q, k, v, v_new, g, beta, A, h, do, dh, dv))
    ]
    fields.append(_problem.OMITTED if cu_seqlens is None else describe("cu_seqlens", cu_seqlens))
    fields.append(
        _problem.OMITTED if chunk_indices is None else describe("chunk_indices", chunk_indices)
    )
    outputs = _empty_outputs(q, v, A)
    fields.extend(describe(name, out) for name, out in zip(_abi.OUTPUT_FIELDS, outputs))
    # The core makes q's device current for the launch itself; torch's current stream on that
    # device is the one a caller (or a CUDA graph capture) expects the work on.
    stream = torch.cuda.current_stream(q.device).cuda_stream if on_cuda else None
    _problem.run(fields, options, code, stream)
    return tuple(outputs)


chunk_kda_bwd_wy_dqkg_fused_op = torch.library.custom_op(OP_QUALNAME, _run, mutates_args=())


@chunk_kda_bwd_wy_dqkg_fused_op.register_fake
def _fake(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, cu_seqlens, chunk_size,
          chunk_indices, state_v_first, backend):
    return tuple(_empty_outputs(q, v, A))


def call(tensors, scale, cu_seqlens, chunk_size, chunk_indices, state_v_first, backend):
    """The public function's torch path: checks what the dispatcher would report without naming
    the argument, or not at all, then calls the custom op. Each of the eleven inputs must be a
    tensor (cu_seqlens and chunk_indices may be None); `backend` must be a name; and a tensor on
    the meta device must not be mixed with real ones (the dispatcher would send the call to the
    fake implementation and hand back uninitialized outputs)."""
    q = tensors["q"]
    on_meta = isinstance(q, torch.Tensor) and q.is_meta
    for name, value in (*tensors.items(), ("cu_seqlens", cu_seqlens),
                        ("chunk_indices", chunk_indices)):
        if value is None and name in ("cu_seqlens", "chunk_indices"):
            continue
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"{_problem.OP_NAME}: argument '{name}': expected a torch.Tensor like q, "
                f"got {type(value).__name__}"
            )
        if value.is_meta != on_meta:
            raise ValueError(
                f"{_problem.OP_NAME}: argument '{name}': is on {value.device} but q is on "
                f"{q.device}; tensors on the meta device only go with other meta tensors"
            )
    has_scale, scale_value, chunk, svf = _problem.scalar_options(scale, chunk_size, state_v_first)
    _problem.backend_code(backend, on_cuda=False)  # a ValueError naming it, before the dispatcher
    return torch.ops.kda_kernels.chunk_kda_bwd_wy_dqkg_fused(
        *tensors.values(),
        scale_value if has_scale else None,
        cu_seqlens,
        chunk,
        chunk_indices,
        bool(svf),
        backend,
    )


def chunk_indices(cu_seqlens, chunk_size):
    """chunk_indices for a torch cu_seqlens (int32 or int64, as the operator takes it): computed on
    the host (a CUDA cu_seqlens is copied there, which synchronizes), returned on cu_seqlens'
    device in its dtype."""
    if cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise TypeError(
            f"chunk_indices: argument 'cu_seqlens': expected dtype int32 or int64, "
            f"got {cu_seqlens.dtype}"
        )
    host = cu_seqlens.detach().to("cpu", torch.int64).numpy()
    pairs = _numpy_path.chunk_indices(host, chunk_size)
    return torch.from_numpy(pairs).to(device=cu_seqlens.device, dtype=cu_seqlens.dtype)
