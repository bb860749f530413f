"""The public functions. Torch tensors go through the registered custom ops; NumPy arrays go to
the CPU backends directly. Each operator's function is made from its table (_public_function:
fla's signature, for help() and for fla's keyword calls) with its docstring (DOCS), and hands its
arguments to the one shared path (_call)."""

import numpy as np

from . import _abi, _library, _locate, _numpy_path, _problem, _signatures

try:
    import torch
except ImportError:  # torch is optional: the NumPy path needs only numpy
    torch = None

# torch.library.custom_op arrived in torch 2.4; older torch gets a clear error on use.
_TORCH_OP = torch is not None and hasattr(torch.library, "custom_op")
if _TORCH_OP:
    from . import _torch_op

    _TORCH_OPS = _torch_op.OPS
    _Tensor = torch.Tensor


def _auto_kernel():
    """The kernel name that kernel="auto" stands for: $KDA_CUDA_KERNEL, read once here (the
    package's edge: the library reads no environment), else "auto" (the library's choice); None
    when the variable names no kernel (each call with "auto" then raises, naming it)."""
    name = _locate.env_kernel()
    if name is None:
        return "auto"
    return name if name in _abi.KERNELS else None


AUTO_KERNEL = _auto_kernel()


def _kernel(kernel):
    """The kernel a CUDA call runs: `kernel`, or for "auto" what AUTO_KERNEL says."""
    if kernel != "auto":
        return kernel
    if AUTO_KERNEL is None:
        names = ", ".join(repr(n) for n in _abi.KERNELS)
        raise ValueError(f"environment variable {_locate.KERNEL_ENV_VAR}: expected one of "
                         f"{names}, got {_locate.env_kernel()!r} (read when kda_kernels was "
                         f"imported)")
    return AUTO_KERNEL


def _torch_kernel(kernel, anchor, backend):
    """The kernel of a torch call: AUTO_KERNEL's choice for "auto" where the call runs on the
    cuda backend (CUDA tensors, as ``anchor``, the first tensor, says; backend None or "cuda");
    the CPU backends take "auto" as it is."""
    if kernel == "auto" and (backend is None or backend == "cuda") and anchor.is_cuda:
        return _kernel(kernel)
    return kernel


def _is_torch_tensor(x):
    return torch is not None and isinstance(x, torch.Tensor)


# Each operator's docstring, by fla name: what help() shows for its public function.
DOCS = {}

# What every operator raises (a section of each docstring).
_RAISES = """Raises
------
TypeError
    An argument has the wrong dtype or is not an array of the first tensor's kind.
ValueError
    An argument has the wrong rank, shape, size, device or contents (cu_seqlens,
    chunk_indices), ``backend`` or ``kernel`` is unknown, or a CPU backend is given a
    kernel other than 'auto'.
NotImplementedError
    The backend or the kernel does not support this case.
RuntimeError
    libkda was not found, the backend is not available in it, or a CUDA error occurred.
"""

DOCS["chunk_kda_bwd_wy_dqkg_fused"] = """KDA chunk backward through the WY representation: gradients dq, dk, dv, db, dg, dA.

The contract is SPEC.md's (the same as flash-linear-attention 0.5.2's Triton kernel of this
name). X below is one of float16, bfloat16, float32, the same for every X tensor. Arguments
are validated once, in libkda; a bad one raises an exception whose message names it.

Parameters
----------
q, k : array, shape [B, T, H, K], dtype X
    Queries and keys (K <= 256).
v, v_new : array, shape [B, T, HV, V], dtype X
    Values and corrected values (V <= 256). HV is a multiple of H (GVA: value head hv reads
    query/key head hv // (HV // H)).
g : array, shape [B, T, HV, K], float32
    Cumulative gate within each chunk, in log2 space (the operator uses exp2).
beta : array, shape [B, T, HV], dtype X or float32
A : array, shape [B, T, HV, BT], dtype X
    The per-chunk WY matrix, BT = chunk_size; used as stored (no mask is applied).
h, dh : array, shape [B, NT, HV, K, V] ([B, NT, HV, V, K] when state_v_first), float32 or X
    Chunk states and their gradients, both of one dtype. NT = ceil(T / BT) per batch row,
    or with cu_seqlens the total number of chunks over all sequences (B = 1).
do, dv : array, shape [B, T, HV, V], dtype X
    Gradient of the output and of v_new. dv is only read.
scale : float, optional
    Query scale; None means K ** -0.5.
cu_seqlens : array, shape [N + 1], int32 or int64, optional
    Sequence boundaries of N sequences packed along T (then B must be 1).
chunk_size : int, default 64
    BT: 16, 32 or 64; must equal A.shape[-1].
chunk_indices : array, shape [NT, 2], int32 or int64, optional
    (sequence id, chunk id within the sequence) for every chunk; derived from cu_seqlens
    when omitted (see ``kda_kernels.chunk_indices``).
state_v_first : bool, default False
    h and dh are stored [.., V, K] instead of [.., K, V].
backend : {None, 'cuda', 'cpu', 'cpu-ref'}, keyword-only
    None runs CUDA tensors on 'cuda' (on the tensors' device and torch's current stream)
    and CPU data on 'cpu' (float32, threaded). 'cpu-ref' is the float64 reference.
kernel : {'auto', 'simt', 'sm80_mma'}, keyword-only, default 'auto'
    The CUDA kernel: 'auto' the fastest that takes the problem (or the one the environment
    variable KDA_CUDA_KERNEL named when kda_kernels was imported), 'simt' the float32 FFMA
    kernel (every option and dtype), 'sm80_mma' the tensor-core kernel (refused,
    NotImplementedError, for a problem it cannot take). The CPU backends take 'auto' only.

All arrays are either torch tensors (CPU or CUDA; both run through the custom op
``torch.ops.kda_kernels.chunk_kda_bwd_wy_dqkg_fused``, which torch.compile traces and CUDA
graphs capture) or NumPy arrays (CPU backends; bfloat16 as ml_dtypes' dtype). Inputs may
have any non-negative element strides (broadcast dimensions included); outputs are new.

Returns
-------
dq, dk : array, shape [B, T, HV, K], float32
    Per value head; for GVA the caller sums groups of HV // H heads.
dv : array, shape [B, T, HV, V], dtype X
db : array, shape [B, T, HV], float32
dg : array, shape [B, T, HV, K], float32
    Before the caller's reverse cumulative sum.
dA : array, shape [B, T, HV, BT], float32
    Strictly lower triangular within each chunk.

Outputs are new contiguous arrays of the inputs' kind, on q's device.

""" + _RAISES + """
Examples
--------
>>> dq, dk, dv2, db, dg, dA = chunk_kda_bwd_wy_dqkg_fused(
...     q, k, v, v_new, g, beta, A, h, do, dh, dv, chunk_size=64)  # doctest: +SKIP
"""

DOCS["chunk_kda_bwd_intra"] = """KDA chunk backward, intra-chunk part: the gradients that flow through the chunk's Aqk
and Akk matrices back to q, k, beta and g, added to the incoming dq, dk, db, dg.

The contract is SPEC-chunk-bwd-intra.md's (the same as flash-linear-attention 0.5.2's
Triton kernel of this name). X below is one of float16, bfloat16, float32, the same for q
and k. Arguments are validated once, in libkda; a bad one raises an exception whose
message names it.

Parameters
----------
q, k : array, shape [B, T, H, K], dtype X
    Queries and keys (K <= 256).
g : array, shape [B, T, HV, K], float32
    Chunk-local cumulative gate in log2 space (the operator uses exp2), non-increasing
    along time inside every chunk. HV is a multiple of H (GVA: value head hv reads
    query/key head hv // (HV // H)); everything but q and k is at the HV value heads.
beta : array, shape [B, T, HV], dtype X or float32
dAqk, dAkk : array, shape [B, T, HV, BT], float32
    Gradients of the chunk's Aqk (scale already in it) and Akk; row t's columns are
    positions inside t's chunk, read lower-inclusive (j <= i, the diagonal included).
    Entries above the diagonal, and columns past a short chunk's end, are never read.
dq, dk : array, shape [B, T, HV, K], float32
    The incoming gradients (only read).
db : array, shape [B, T, HV], float32
dg : array, shape [B, T, HV, K], float32
cu_seqlens : array, shape [N + 1], int32 or int64, optional
    Sequence boundaries of N sequences packed along T (then B must be 1).
chunk_indices : array, shape [NT, 2], int32 or int64, optional
    (sequence id, chunk id within the sequence) for every chunk; derived from cu_seqlens
    when omitted (see ``kda_kernels.chunk_indices``); ignored without cu_seqlens.
chunk_size : int, default 64
    BT: 16, 32 or 64; must equal dAqk.shape[-1] and dAkk.shape[-1].
safe_gate : bool, default False
    fla's algorithm switch (the gate is bounded: per-token natural-log decays >= -5). It
    changes nothing mathematically.
backend : {None, 'cuda', 'cpu', 'cpu-ref'}, keyword-only
    None runs CUDA tensors on 'cuda' (on the tensors' device and torch's current stream)
    and CPU data on 'cpu' (float32, threaded). 'cpu-ref' is the float64 reference.
kernel : {'auto', 'simt', 'sm80_mma'}, keyword-only, default 'auto'
    The CUDA kernel ('auto': the fastest that takes the problem, or the one the environment
    variable KDA_CUDA_KERNEL named when kda_kernels was imported); a kernel the operator
    does not have is refused (NotImplementedError). The CPU backends take 'auto' only.

All arrays are either torch tensors (CPU or CUDA; both run through the custom op
``torch.ops.kda_kernels.chunk_kda_bwd_intra``, which torch.compile traces and CUDA graphs
capture) or NumPy arrays (CPU backends; bfloat16 as ml_dtypes' dtype). Inputs may have any
non-negative element strides (broadcast dimensions included); outputs are new.

Returns
-------
dq, dk : array, shape [B, T, HV, K], float32
    Incoming plus intra-chunk terms, per value head (for GVA the caller sums groups of
    HV // H heads).
db : array, shape [B, T, HV], float32
dg : array, shape [B, T, HV, K], float32
    Before the caller's reverse chunk-local cumulative sum.

Outputs are new contiguous arrays of the inputs' kind, on q's device; no input is written.

""" + _RAISES + """
Examples
--------
>>> dq, dk, db, dg = chunk_kda_bwd_intra(
...     q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, chunk_size=64)  # doctest: +SKIP
"""

DOCS["chunk_kda_bwd_prep"] = """KDA layer backward, first pass: gk, w, u, qg, kg and the intra-chunk dv for the state scans.

Per chunk and value head hv (query/key head hv // (HV // H)), from the layer's raw inputs, the
forward's Akk and Aqk and do, in one pass: the gate's activation and its chunk-local cumsum in
log2 space (gk = cumsum(gate) / ln 2), the beta sigmoid and l2norm where the layer runs them in
the kernel, then w = A (beta k̂ 2^gk), u = A (beta v), qg = q̂ 2^gk, kg = k̂ 2^(gk_last − gk) (fla's
recompute_w_u_fwd; last = the chunk's last token) and dv = Aqkᵀ do (fla's chunk_kda_bwd_dAv).
What the two state scans (chunk_gated_delta_rule_fwd_h, chunk_gated_delta_rule_bwd_dhu) read.
X below is one of float16, bfloat16, float32. 'cpu-ref' computes it in float64, 'cpu' in
float32.

Parameters
----------
q, k : array, shape [B, T, H, K], dtype X
    The layer's queries and keys, before l2norm.
v : array, shape [B, T, HV, V], dtype X
g : array, shape [B, T, HV, K], dtype X or float32
    Per-token natural-log decays, or with use_gate_in_kernel the gate's raw input.
beta : array, shape [B, T, HV], dtype X or float32
    Or its logits with use_beta_sigmoid_in_kernel.
A : array, shape [B, T, HV, BT], dtype X
    The forward's Akk; row t's columns are positions inside t's chunk, read lower-inclusive
    (j <= i, the diagonal included). Entries above the diagonal, and columns past a short
    chunk's end, are never read.
Aqk : array, shape [B, T, HV, BT], dtype X
    The forward's Aqk (scale already in it), read like A.
do : array, shape [B, T, HV, V], dtype X
    The gradient by the layer's output o.
A_log : array, shape [HV], float32, optional
dt_bias : array, shape [HV * K], float32, optional
    Only with use_gate_in_kernel (A_log required unless lower_bound is set).
cu_seqlens : array, shape [N + 1], int32 or int64, optional
    Sequence boundaries of N sequences packed along T (then B must be 1).
chunk_size : int, default 64
    BT: 16, 32 or 64; must equal A.shape[-1] and Aqk.shape[-1].
chunk_indices : array, shape [NT, 2], int32 or int64, optional
    (sequence id, chunk id within the sequence) for every chunk; derived from cu_seqlens
    when omitted.
use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval,
lower_bound
    The layer's options, as fla's chunk_kda takes them.
backend : {None, 'cuda', 'cpu', 'cpu-ref'}, keyword-only
kernel : {'auto'}, keyword-only

Returns
-------
gk : array, shape [B, T, HV, K], float32
    The decay's chunk-local cumulative sum, in log2 space.
w : array, shape [B, T, HV, K], dtype X
u : array, shape [B, T, HV, V], dtype X
qg, kg : array, shape [B, T, HV, K], dtype X
dv : array, shape [B, T, HV, V], dtype X
    The intra-chunk part of the value gradient, Aqkᵀ · do.

Outputs are new contiguous arrays of the inputs' kind, on q's device; no input is written.

""" + _RAISES

DOCS["chunk_kda_bwd_epilogue"] = """KDA layer backward, last pass: the gradients of the layer's raw inputs from the scans'.

Per chunk and query/key head, from the layer's raw inputs, the forward's Akk and what the two
state scans produce (h, dh, v_new, dv), in one pass: the WY and intra-chunk terms, dAqk =
scale · do · v_newᵀ, the chunk-local reverse cumsum of dg, the gate's, the beta sigmoid's and
l2norm's backward, and GVA's sum (docs/design.md, "The fused backward epilogue"). Its float64
judge is the layer's chunked reference (checked against ../shared/golden-kda). X below is one
of float16, bfloat16, float32. 'cpu-ref' computes it in float64, 'cpu' in float32, 'cuda' on
the tensor cores with K up to 128 (larger K raises NotImplementedError; the CPU backends take
any K): bf16 products for the model's shape (bfloat16, chunk_size 64, K = V = 128, HV = H, h and
dh in bfloat16), TF32 (3xTF32 for float32 X) otherwise.

Parameters
----------
q, k : array, shape [B, T, H, K], dtype X
    The layer's queries and keys, before l2norm.
v : array, shape [B, T, HV, V], dtype X
g : array, shape [B, T, HV, K], dtype X or float32
    Per-token natural-log decays, or with use_gate_in_kernel the gate's raw input.
beta : array, shape [B, T, HV], dtype X or float32
    Or its logits with use_beta_sigmoid_in_kernel.
A : array, shape [B, T, HV, BT], dtype X
    The forward's Akk = (I + M)⁻¹ per chunk, used as stored.
h, dh : array, shape [B, NT, HV, K, V] ([.., V, K] when state_v_first), float32 or X
    The state at each chunk's start, and the gradient by the state at its end.
v_new, dv : array, shape [B, T, HV, V], dtype X
    The forward scan's v_new and the reverse scan's dv (Aqkᵀ · do included).
do : array, shape [B, T, HV, V], dtype X
A_log : array, shape [HV], float32, optional
dt_bias : array, shape [HV * K], float32, optional
    Only with use_gate_in_kernel (A_log required unless lower_bound is set).
scale, cu_seqlens, chunk_size, chunk_indices, state_v_first
    As for chunk_kda_bwd_wy_dqkg_fused.
use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval,
lower_bound
    The layer's options, as fla's chunk_kda takes them.
backend : {None, 'cuda', 'cpu', 'cpu-ref'}, keyword-only
kernel : {'auto'}, keyword-only

Returns
-------
dq, dk : array, shape [B, T, H, K], dtype X
dv : array, shape [B, T, HV, V], dtype X
dg : array, shape [B, T, HV, K], float32
    By g as passed (the raw gate input with use_gate_in_kernel).
dbeta : array, shape [B, T, HV], float32
    By beta as passed (the logits with use_beta_sigmoid_in_kernel).
dA_log : array, shape [HV], float32
ddt_bias : array, shape [HV, K], float32
    0 where the input does not enter the layer (no gate in the kernel, or no dt_bias).

""" + _RAISES

DOCS["chunk_gated_delta_rule_bwd_dhu"] = """The reverse state scan of a gated delta rule's chunked backward: dh, dh0, dv2.

Per sequence and value head, from the last chunk to the first, carrying the gradient by the
state D (K x V, float32) that starts at dht (or 0): dh[c] = D (the gradient by the state at
chunk c's end), dv2 = dv + 2^(g_last - g) · k·D over the chunk's tokens, then
D = 2^g_last 2^gk_last ⊙ D + scale · (2^g q)ᵀ·do − wᵀ·dv2 (docs/design.md, "The state scans").
For KDA, q and k are fla's qg and kg and gk the chunk-local log2 cumsum of the decay. X below is
one of float16, bfloat16, float32. 'cpu-ref' computes it in float64, 'cpu' in float32, 'cuda'
on the tensor cores for 16-bit X with chunk_size 64, K <= 128 and K, V multiples of 8 (else in
float32 on the CUDA cores).

Parameters
----------
q, k : array, shape [B, T, H, K], dtype X
w : array, shape [B, T, HV, K], dtype X
do, dv : array, shape [B, T, HV, V], dtype X
    dv: the intra-chunk value gradient (fla's dAv output).
g : array, shape [B, T, HV], float32, optional
    The per-head chunk-local log2 cumsum (Gated DeltaNet).
gk : array, shape [B, T, HV, K], float32, optional
    The same per key channel (KDA).
h0 : array, shape [N, HV, K, V] ([.., V, K] when state_v_first), X or float32, optional
    The initial state: only its shape is read (checked against dh0's). dh0 is returned either
    way (fla's function returns None without h0).
dht : array, like h0, optional
    The gradient by the final state.
scale : float, optional
    None: K ** -0.5.
state_v_first : bool
    States (h0, dht, dh, dh0) are [.., V, K].
cu_seqlens, chunk_size, chunk_indices
    As for chunk_kda_bwd_wy_dqkg_fused; with cu_seqlens on a GPU, chunk_indices is required (its
    rows are dh's chunk count).
backend : {None, 'cuda', 'cpu', 'cpu-ref'}, keyword-only
kernel : {'auto', 'simt', 'sm80_mma'}, keyword-only

Returns
-------
dh : array, shape [B, NT, HV, K, V] ([.., V, K] when state_v_first), dtype X
dh0 : array, shape [N, HV, K, V] (likewise), float32
    The gradient by the initial state (by a zero one when h0 is not given).
dv2 : array, shape [B, T, HV, V], dtype X

""" + _RAISES

DOCS["chunk_gated_delta_rule_fwd_h"] = """The forward state scan of a gated delta rule's chunked forward: h, v_new, final_state.

Per sequence and value head, from the first chunk to the last, carrying the state S (K x V,
float32) that starts at initial_state (or 0): h[c] = S (the state at chunk c's start),
v_new = u − w·S over the chunk's tokens, then S = 2^g_last 2^gk_last ⊙ S + kᵀ·(2^(g_last − g)
v_new) (docs/design.md, "The state scans"). For KDA, k is fla's kg and gk the chunk-local log2
cumsum of the decay; w and u are the WY step's outputs. X below is one of float16, bfloat16,
float32, k's dtype. 'cpu-ref' computes it in float64, 'cpu' in float32 with fla's roundings (S
enters w·S in X, the gated v_new enters kᵀ· in X), 'cuda' on the GPU (a problem its kernels do
not take raises NotImplementedError).

Parameters
----------
k : array, shape [B, T, H, K], dtype X
    The keys (KDA: kg); K <= 256.
w : array, shape [B, T, HV, K], dtype X
u : array, shape [B, T, HV, V], dtype X
    V <= 256. HV is a multiple of H (value head hv reads key head hv // (HV // H)).
g : array, shape [B, T, HV], float32, optional
    The per-head chunk-local log2 cumsum (Gated DeltaNet).
gk : array, shape [B, T, HV, K], float32, optional
    The same per key channel (KDA).
initial_state : array, shape [N, HV, K, V] ([.., V, K] when state_v_first), X or float32, optional
    The state before each sequence's first chunk; None: zero.
output_final_state : bool, default False
    fla's switch; final_state is always written (fla returns None without it).
chunk_size : int, default 64
    BT: 16, 32 or 64.
save_new_value : bool, default True
    fla's switch; v_new is always written (fla returns None without it).
state_v_first : bool, default False
    States (initial_state, h, final_state) are [.., V, K].
cu_seqlens, chunk_indices
    As for chunk_kda_bwd_wy_dqkg_fused; with cu_seqlens on a GPU, chunk_indices is required (its
    rows are h's chunk count).
backend : {None, 'cuda', 'cpu', 'cpu-ref'}, keyword-only
kernel : {'auto', 'simt', 'sm80_mma'}, keyword-only

Returns
-------
h : array, shape [B, NT, HV, K, V] ([.., V, K] when state_v_first), dtype X
    NT = ceil(T / BT) per batch row, or with cu_seqlens the chunks of all sequences (B = 1).
v_new : array, shape [B, T, HV, V], dtype X
final_state : array, shape [N, HV, K, V] (likewise), float32
    The state after each sequence's last chunk (initial_state for a sequence of no tokens).

Outputs are new contiguous arrays of the inputs' kind, on k's device.

""" + _RAISES


def _public_function(sig):
    """The public function of operator `sig` (_signatures.Signature): fla's parameter list from
    the table (the required tensors, then fla's optional tensors and options with their
    defaults), then the keyword-only backend and kernel. Written as source and compiled, as
    dataclasses does, so that help(), inspect and keyword calls see the real parameters and a
    call costs what a hand-written function does (no argument binding per call). Torch tensors
    go through the custom op (its arguments are the table's rows in the same order), anything
    else to _call."""
    params = sig.parameters()
    names = [name for name, _ in params]
    anchor = names[0]  # q, or chunk_fwd_h's k: what says torch or NumPy, and the device
    rows = [row[0] for row in sig.rows if row[1] != _signatures.ROLE_OUTPUT]
    assert names == rows, (sig.fla_name, names, rows)
    listed = ", ".join(name if default is _signatures.REQUIRED else f"{name}={default!r}"
                       for name, default in params)
    inputs = ", ".join(f"{a.name}={a.name}" for a in sig.inputs)
    optionals = ", ".join(f"{a.name}={a.name}" for a in sig.optionals)
    options = "".join(f"{o.name}, " for o in sig.options)
    # Made inside a maker so that the operator's torch op and ctypes plumbing are bound once (a
    # closure cell per call, as cheap as a hand-written function's global) while every other
    # name is this module's.
    source = (
        f"def _make(_OP, _OPERATOR):\n"
        f"  def {sig.fla_name}({listed}, *, backend=None, kernel='auto'):\n"
        f"    if _TORCH_OP and isinstance({anchor}, _Tensor):\n"
        f"        return _OP.call(({', '.join(names)}, backend,\n"
        f"                         _torch_kernel(kernel, {anchor}, backend)))\n"
        f"    return _call(_OPERATOR, dict({inputs}), dict({optionals}), ({options}), backend,\n"
        f"                 kernel)\n"
        f"  return {sig.fla_name}\n")
    scope = {}
    exec(compile(source, f"<kda_kernels {sig.fla_name}>", "exec"), globals(), scope)
    function = scope["_make"](_TORCH_OPS[sig.fla_name] if _TORCH_OP else None,
                              _problem.OPERATORS[sig.fla_name])
    function.__doc__ = DOCS[sig.fla_name]
    function.__module__ = __name__
    return function


for _sig in _signatures.SIGNATURES:
    globals()[_sig.fla_name] = _public_function(_sig)



def _call(op, inputs, optionals, options, backend, kernel):
    """An operator's path for anything but torch tensors on a torch with custom ops (NumPy
    arrays): the CPU backends directly. ``options`` are in the signature's option order."""
    x = inputs[op.anchor]  # q, or chunk_fwd_h's k
    if _is_torch_tensor(x):
        raise RuntimeError(
            f"kda_kernels needs torch >= 2.4 (torch.library.custom_op); found {torch.__version__}"
        )
    if not isinstance(x, np.ndarray):
        _refuse_anchor(op, x, inputs)
    return _numpy_path.run(op, inputs, optionals, options, backend, kernel)


def _refuse_anchor(op, x, inputs):
    """An anchor (q, or chunk_fwd_h's k) that is no array: the TypeError says which kind it
    should be, the kind of the call's other tensors (the NumPy path's "expected a
    numpy.ndarray" misled a call whose other arguments were all torch tensors)."""
    others = [value for name, value in inputs.items() if name != op.anchor]
    torch_ones = any(map(_is_torch_tensor, others))
    numpy_ones = any(isinstance(value, np.ndarray) for value in others)
    if torch_ones == numpy_ones:  # both kinds, or neither
        kind = "a numpy.ndarray or a torch.Tensor"
    else:
        kind = ("a torch.Tensor" if torch_ones else "a numpy.ndarray") + " like the other arguments"
    raise TypeError(f"{op.where(op.anchor)}: expected {kind}, got {type(x).__name__}")


def chunk_indices(cu_seqlens, chunk_size=64):
    """The chunk list the operators walk for packed sequences.

    Parameters
    ----------
    cu_seqlens : array, shape [N + 1], integer
        Non-decreasing sequence boundaries starting at 0 (NumPy array, sequence of ints, or torch
        tensor; a CUDA tensor is copied to the host, which synchronizes).
    chunk_size : int, default 64

    Returns
    -------
    array, shape [NT, 2]
        (sequence id, chunk id within the sequence) per chunk, in sequence order: an int64 NumPy
        array, or for a torch tensor a tensor of its dtype on its device.
    """
    if _is_torch_tensor(cu_seqlens) and _TORCH_OP:
        return _torch_op.chunk_indices(cu_seqlens, chunk_size)
    return _numpy_path.chunk_indices(cu_seqlens, chunk_size)


def torch_op_backend(detail=False):
    """Which implementation the torch ops (``torch.ops.kda_kernels.*``, and the public functions
    on torch tensors) have in this process: ``"compiled"`` (libkda_torch, registered from C++,
    calling libkda directly: the low host cost one) or ``"python"`` (registered from Python,
    calling libkda's C ABI through ctypes); None without torch (>= 2.4).

    The compiled one is used when it sits beside the loaded libkda, built for this torch
    release; the environment variable KDA_TORCH_OP (read at import) can ask for ``python`` or
    insist on ``compiled``. With ``detail=True`` the answer is followed by the compiled
    library's path or the reason the python ops are used, e.g. ``"python (no
    libkda_torch-2.11.0.so for torch 2.11.0 beside /x/libkda.so)"``.
    """
    if not _TORCH_OP:
        return None
    choice = _torch_op.CHOICE
    return repr(choice) if detail else choice.backend


def backend_available(name):
    """Whether backend `name` ('cpu-ref', 'cpu' or 'cuda') is compiled into the loaded libkda and
    usable on this machine (for 'cuda': a CUDA device of compute capability 9.0, Hopper, which
    the library's sm_90a kernels need)."""
    if name not in _abi.BACKENDS:
        names = ", ".join(repr(n) for n in _abi.BACKENDS)
        raise ValueError(f"backend_available: expected one of {names}, got {name!r}")
    return bool(_library.library().dll.kda_backend_available(_abi.BACKENDS[name]))


def library_path():
    """Path of the libkda this package loaded (loading it if needed)."""
    return _library.library().path


def version():
    """libkda's version string, e.g. '0.1.0'."""
    return _library.library().dll.kda_version().decode()
