"""Makes flash-linear-attention's chunk_kda train through kda_kernels.

fla dispatches its ``chunk_kda`` itself (0.5.2: through the KDA registry; 0.6.x: through a
registry of that function) to backends; ``enable()`` registers one whose ``chunk_kda`` is
``kda_kernels.chunk_kda`` (the layer: fla's forward, our backward where we have kernels) and
whose verifier hands back to fla every call that layer does not serve, saying why.

Works with fla 0.5.2 and 0.6.x, told apart by what the installed fla provides (_fla_release).
For the calls handed back, fla's own backward dispatches its stages
``chunk_kda_bwd_wy_dqkg_fused`` (fla/ops/kda/chunk_bwd.py) and ``chunk_kda_bwd_intra``
(fla/ops/kda/chunk_intra.py), both decorated ``@dispatch('kda')``, through its KDA backend
registry: for each call it walks the registered backends by priority and takes the first whose
verifier accepts the call and that implements the function; if none does, fla's own Triton
kernel runs. The same backend implements those two as well, and, when asked for by name
(``enable(ops=...)``: it is not yet faster than fla's kernel everywhere, docs/performance.md),
fla's reverse state scan ``chunk_gated_delta_rule_bwd_dhu`` (fla/ops/common/chunk_delta_h.py,
``@dispatch('common')``: the scan every delta-rule layer's backward shares, so fla's Gated
DeltaNet trains on it too); no other fla function, so every other keeps its usual path. Their
verifiers hand back to fla every call this library has no kernel for: non-CUDA tensors, other
dtypes, K or V > 256, chunk sizes other than 16/32/64, and any operator whose CUDA kernel the
loaded libkda lacks (``enable()`` asks the library once, see ``CUDA_KERNELS``).

fla is optional: it is imported by ``enable()``, not by ``import kda_kernels``.

Examples
--------
>>> import kda_kernels.fla
>>> kda_kernels.fla.enable()     # doctest: +SKIP
>>> o, _ = fla.ops.kda.chunk_kda(q, k, v, g, beta)   # trains through kda_kernels.chunk_kda
>>> kda_kernels.fla.enable(ops=("chunk_kda_bwd_wy_dqkg_fused",))  # doctest: +SKIP
>>> kda_kernels.fla.disable()    # doctest: +SKIP
"""

import threading

from . import _api, _fla_pieces, _fla_release

BACKEND_TYPE = "kda_kernels"
# fla: lower runs first. 1 puts this ahead of fla's optional GPU backends (flash_kda 3,
# tilelang 5); 0 belongs to the Ascend backend, which is only available on NPUs.
PRIORITY = 1
# What libkda has kernels for; anything else goes back to fla (SPEC.md, SPEC-chunk-bwd-intra.md).
_X_DTYPES = ("float16", "bfloat16", "float32")
_CHUNK_SIZES = (16, 32, 64)
_MAX_HEAD_DIM = 256

# Whether the loaded libkda's cuda backend has a kernel for each operator (by fla name), as
# enable() found by running a small problem of it on the GPU once (the C ABI has no query for
# it): True, or False with the library's reason in CUDA_KERNEL_NOTES, and then fla runs its own
# kernel for that operator. An operator missing here (not probed: enable() was not called) is
# handed back to fla too.
CUDA_KERNELS = {}
CUDA_KERNEL_NOTES = {}

# The operators of libkda that fla dispatches through its KDA registry (its stage functions of
# the same names), and through its "common" registry (the state scans that KDA shares with the
# other delta rules); the others (chunk_kda_bwd_epilogue) have no fla counterpart.
STAGES = ("chunk_kda_bwd_wy_dqkg_fused", "chunk_kda_bwd_intra")
COMMON_STAGES = ("chunk_gated_delta_rule_bwd_dhu",)
# What enable() takes when not told (ops=None): every operator that is faster than fla's kernel
# on the calls it serves. The reverse scan is not yet (2-7% slower at one chain per SM, about 2x
# on many sequences: docs/performance.md), and it would run under every delta-rule layer.
OPT_IN = COMMON_STAGES

# Per operator: tensors that must have q's dtype, tensors that must be float32, tensors that may
# be either (the verifiers' dtype rules; h / dh of chunk_bwd_wy_dqkg have a rule of their own).
_DTYPE_RULES = {
    "chunk_kda_bwd_wy_dqkg_fused": (("k", "v", "v_new", "A", "do", "dv"), ("g",), ("beta",)),
    "chunk_kda_bwd_intra": (("k",), ("g", "dAqk", "dAkk", "dq", "dk", "db", "dg"), ("beta",)),
    # the optional g, gk (float32) and h0, dht (X or float32) when given
    "chunk_gated_delta_rule_bwd_dhu": (("k", "w", "do", "dv"), ("g", "gk"), ("h0", "dht")),
}

_lock = threading.Lock()
_backend_class = None
# Subclasses of _backend_class that run a subset of the operators, by frozenset of fla names.
_subset_classes = {}


def _name(dtype):
    return str(dtype).replace("torch.", "")


def _unsupported_reason(fla_name, tensors, chunk_size, cu_seqlens, chunk_indices):
    """Why libkda's cuda backend cannot take this call of operator `fla_name` (tensors: its
    required tensor arguments by name, q first), or None when it can.

    This is a capability gate, not validation: it sends fla the cases we have no kernel for;
    malformed arguments still reach the core, which validates them and raises. It runs on every
    backward step, so the accepting path compares dtype objects and builds no strings.
    """
    import torch

    q = tensors["q"]
    for name, t in (("cu_seqlens", cu_seqlens), ("chunk_indices", chunk_indices)):
        if t is not None and not isinstance(t, torch.Tensor):
            return f"{name} is a {type(t).__name__}, not a torch.Tensor"
        if t is not None and t.device != q.device:
            return f"{name} is on {t.device}, q on {q.device}"
    x = q.dtype
    if x not in (torch.float16, torch.bfloat16, torch.float32):
        return f"q has dtype {_name(x)}; kda_kernels has kernels for {', '.join(_X_DTYPES)}"
    same_as_q, float32, x_or_float32 = _DTYPE_RULES[fla_name]
    for name in same_as_q:
        if tensors[name].dtype != x:
            return f"{name} has dtype {_name(tensors[name].dtype)}, q has {_name(x)}"
    for name in float32:
        if name in tensors and tensors[name].dtype != torch.float32:
            return f"{name} has dtype {_name(tensors[name].dtype)}; kda_kernels needs float32"
    for name in x_or_float32:
        if name not in tensors:  # an optional tensor not given
            continue
        dtype = tensors[name].dtype
        if dtype != x and dtype != torch.float32:
            return f"{name} has dtype {_name(dtype)}; kda_kernels needs {_name(x)} or float32"
    if "h" in tensors:
        h, dh = tensors["h"], tensors["dh"]
        if (h.dtype != x and h.dtype != torch.float32) or dh.dtype != h.dtype:
            return (f"h, dh have dtypes {_name(h.dtype)}, {_name(dh.dtype)}; "
                    f"need float32 or {_name(x)}")
    K = q.shape[-1]
    if "v" in tensors or "do" in tensors:
        V = tensors["v" if "v" in tensors else "do"].shape[-1]
        if K > _MAX_HEAD_DIM or V > _MAX_HEAD_DIM:
            return f"K={K}, V={V}; kda_kernels has kernels up to {_MAX_HEAD_DIM}"
    elif K > _MAX_HEAD_DIM:
        return f"K={K}; kda_kernels has kernels up to {_MAX_HEAD_DIM}"
    if chunk_size not in _CHUNK_SIZES:
        return f"chunk_size={chunk_size}; kda_kernels has kernels for {_CHUNK_SIZES}"
    device = q.device
    for name, t in tensors.items():
        if t.device != device or device.type != "cuda":
            return f"{name} is on {t.device}; kda_kernels takes CUDA tensors on q's device"
    available = CUDA_KERNELS.get(fla_name)
    if not available:
        if available is None:
            return f"the CUDA kernel of {fla_name} was not probed (kda_kernels.fla.enable())"
        return (f"the loaded libkda has no CUDA kernel for {fla_name} "
                f"({CUDA_KERNEL_NOTES.get(fla_name, '')})")
    return None


def _accepting_check(device_type="cuda", single_device=None):
    """A fast check of the common case that _unsupported_reason accepts, for the verifiers:
    accept(fla_name, tensors, chunk_size, cu_seqlens, chunk_indices) is True only for calls
    _unsupported_reason would accept (``tensors``: the required tensors in signature order).
    The dtypes of all the tensors are matched at once against every accepted combination, and
    the devices compared by index (see below), building no objects; a False sends the call to
    _unsupported_reason, which decides and says why. A few microseconds less per backward step
    (issue 13's host budget). `device_type` is "cuda" but for bench/host_cost.py, which times
    this path on CPU tensors.

    With one device of that type (`single_device`; by default: one visible CUDA device, or CPU
    tensors) every tensor on that device type is on q's device, so only the type is read (one
    C-level pass over the tensors, no index per tensor: ~0.6 us less a call on the development
    machine); with several, the indices are compared too."""
    import operator

    import torch

    f32 = torch.float32
    xs = (torch.float16, torch.bfloat16, torch.float32)
    dtypes = {
        # q k v v_new g beta A h do dh dv
        "chunk_kda_bwd_wy_dqkg_fused": frozenset(
            (x, x, x, x, f32, beta, x, h, x, h, x) for x in xs for beta in (x, f32)
            for h in (f32, x)),
        # q k g beta dAqk dAkk dq dk db dg
        "chunk_kda_bwd_intra": frozenset(
            (x, x, f32, beta, f32, f32, f32, f32, f32, f32) for x in xs for beta in (x, f32)),
        # q k w do dv (the optional tensors are the verifier's)
        "chunk_gated_delta_rule_bwd_dhu": frozenset((x, x, x, x, x) for x in xs),
    }
    # The last extents that must be <= _MAX_HEAD_DIM: q's K, and V (v's for WY, do's for dhu).
    head_dims = {"chunk_kda_bwd_wy_dqkg_fused": (0, 2), "chunk_kda_bwd_intra": (0,),
                 "chunk_gated_delta_rule_bwd_dhu": (0, 3)}
    Tensor = torch.Tensor
    dtype_of = operator.attrgetter("dtype")
    on_device = operator.attrgetter("is_" + device_type)
    if single_device is None:
        single_device = device_type != "cuda" or torch.cuda.device_count() == 1

    def accept(fla_name, tensors, chunk_size, cu_seqlens, chunk_indices):
        if tuple(map(dtype_of, tensors)) not in dtypes[fla_name]:
            return False
        if single_device:
            if not all(map(on_device, tensors)):
                return False
            for t in (cu_seqlens, chunk_indices):
                if t is not None and (not isinstance(t, Tensor) or not on_device(t)):
                    return False
        else:
            device = tensors[0].get_device()  # the device's index (-1 on the CPU)
            for t in tensors:
                if t.get_device() != device or not on_device(t):
                    return False
            for t in (cu_seqlens, chunk_indices):
                if t is not None and (not isinstance(t, Tensor) or t.get_device() != device
                                      or not on_device(t)):
                    return False
        for i in head_dims[fla_name]:
            if tensors[i].shape[-1] > _MAX_HEAD_DIM:
                return False
        return chunk_size in _CHUNK_SIZES and CUDA_KERNELS.get(fla_name) is True

    return accept


def _release_keywords_reason(chunk_offsets=None, use_graph=False, lower_bound=None):
    """Why the keywords fla 0.6 added to the stage functions rule a call out, or None.

    None of them changes what the operators compute, so each is served when well-formed:
    ``chunk_offsets`` (WY; fla's own function ignores it too: it is for the state scans),
    ``use_graph`` (both; fla's static buffers for CUDA-graph capture: our outputs come from
    torch's caching allocator, which capture serves from the graph's pool, the kernels run on
    torch's current stream and nothing synchronizes; the sentinel rows of fla's static chunk
    list, sequence id < 0, are skipped by our kernels as by fla's), ``lower_bound`` (intra; it
    moves the reference point of fla's Triton exponentials only, a constant that cancels)."""
    import torch

    if chunk_offsets is not None and not isinstance(chunk_offsets, torch.Tensor):
        return f"chunk_offsets is a {type(chunk_offsets).__name__}, not a torch.Tensor"
    if use_graph is not True and use_graph is not False:
        return f"use_graph is {use_graph!r}, not a bool"
    if lower_bound is not None and not isinstance(lower_bound, (int, float)):
        return f"lower_bound is a {type(lower_bound).__name__}, not a number"
    return None


def _make_backend_class(base_class=None, device_type="cuda"):
    """The backend class, derived from fla's BaseBackend (or from `base_class`, for tests and the
    host-cost bench that run without fla; `device_type` as for _accepting_check)."""
    if base_class is None:
        base_class = _fla_release.load().base_class

    import torch

    from . import _torch_op  # fla brings torch; plain `import kda_kernels.fla` does not need it

    wy = _torch_op.OPS["chunk_kda_bwd_wy_dqkg_fused"].run
    intra = _torch_op.OPS["chunk_kda_bwd_intra"].run
    dhu = _torch_op.OPS["chunk_gated_delta_rule_bwd_dhu"].run
    kernel = _api._kernel("auto")  # $KDA_CUDA_KERNEL's choice, as the public functions make it
    accept = _accepting_check(device_type)
    Tensor = torch.Tensor

    class KdaKernelsBackend(base_class):
        """fla KDA backend running chunk_kda_bwd_wy_dqkg_fused and chunk_kda_bwd_intra on
        kda_kernels' CUDA kernels.

        fla calls with keywords, in its own parameter order (for the WY function:
        state_v_first before cu_seqlens). The parameters are fla 0.6's, which are 0.5.2's
        followed by the keywords 0.6 added (see _release_keywords_reason). **kwargs keeps a
        future extra keyword from breaking the call: the verifier then hands the call back to
        fla, naming it, so that no keyword is dropped unseen. The functions call the ops with
        every argument positional, skipping the public functions' argument checks (the
        verifier saw the call): the compiled op through torch's dispatcher (its implementation
        is C++), or the python op's implementation directly (past the dispatcher, whose Python
        custom-op layers cost ~40 us of host time a call and buy nothing here: fla's dispatch
        is torch.compiler.disable'd, so these always run eagerly on plain CUDA tensors, like
        fla's own Triton launch).
        """

        backend_type = BACKEND_TYPE
        package_name = None  # this module is loaded already; nothing to look for
        env_var = None  # enable()/disable() are the switch
        priority = PRIORITY

        def chunk_kda_bwd_wy_dqkg_fused_verifier(self, q, k, v, v_new, g, beta, A, h, do, dh,
                                                 dv, scale=None, state_v_first=False,
                                                 cu_seqlens=None, chunk_size=64,
                                                 chunk_indices=None, chunk_offsets=None,
                                                 use_graph=False, **kwargs):
            if (not kwargs and (chunk_offsets is None or isinstance(chunk_offsets, Tensor))
                    and (use_graph is False or use_graph is True)
                    and accept("chunk_kda_bwd_wy_dqkg_fused",
                               (q, k, v, v_new, g, beta, A, h, do, dh, dv), chunk_size,
                               cu_seqlens, chunk_indices)):
                return True, None
            if kwargs:
                return False, f"unknown arguments {sorted(kwargs)}"
            reason = _release_keywords_reason(chunk_offsets=chunk_offsets, use_graph=use_graph)
            if reason is not None:
                return False, reason
            tensors = dict(q=q, k=k, v=v, v_new=v_new, g=g, beta=beta, A=A, h=h, do=do, dh=dh,
                           dv=dv)
            reason = _unsupported_reason("chunk_kda_bwd_wy_dqkg_fused", tensors, chunk_size,
                                         cu_seqlens, chunk_indices)
            return reason is None, reason

        def chunk_kda_bwd_wy_dqkg_fused(self, q, k, v, v_new, g, beta, A, h, do, dh, dv,
                                        scale=None, state_v_first=False, cu_seqlens=None,
                                        chunk_size=64, chunk_indices=None, chunk_offsets=None,
                                        use_graph=False, **kwargs):
            if cu_seqlens is None:
                chunk_indices = None  # fla ignores it then; libkda would refuse it
            return wy(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, cu_seqlens, chunk_size,
                      chunk_indices, state_v_first, None, kernel)

        def chunk_kda_bwd_intra_verifier(self, q, k, g, beta, dAqk, dAkk, dq, dk, db, dg,
                                         cu_seqlens=None, chunk_indices=None, chunk_size=64,
                                         safe_gate=False, lower_bound=None, use_graph=False,
                                         **kwargs):
            if (not kwargs and (lower_bound is None or isinstance(lower_bound, (int, float)))
                    and (use_graph is False or use_graph is True)
                    and accept("chunk_kda_bwd_intra", (q, k, g, beta, dAqk, dAkk, dq, dk, db, dg),
                               chunk_size, cu_seqlens, chunk_indices)):
                return True, None
            if kwargs:
                return False, f"unknown arguments {sorted(kwargs)}"
            reason = _release_keywords_reason(use_graph=use_graph, lower_bound=lower_bound)
            if reason is not None:
                return False, reason
            tensors = dict(q=q, k=k, g=g, beta=beta, dAqk=dAqk, dAkk=dAkk, dq=dq, dk=dk, db=db,
                           dg=dg)
            reason = _unsupported_reason("chunk_kda_bwd_intra", tensors, chunk_size, cu_seqlens,
                                         chunk_indices)
            return reason is None, reason

        def chunk_kda_bwd_intra(self, q, k, g, beta, dAqk, dAkk, dq, dk, db, dg,
                                cu_seqlens=None, chunk_indices=None, chunk_size=64,
                                safe_gate=False, lower_bound=None, use_graph=False, **kwargs):
            if cu_seqlens is None:
                chunk_indices = None  # fla ignores it then; libkda would refuse it
            return intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens, chunk_indices,
                         chunk_size, safe_gate, None, kernel)

        def chunk_gated_delta_rule_bwd_dhu_verifier(self, q, k, w, do, dv, g=None, gk=None,
                                                    h0=None, dht=None, scale=None,
                                                    state_v_first=False, cu_seqlens=None,
                                                    chunk_size=64, chunk_indices=None,
                                                    chunk_offsets=None, use_graph=False,
                                                    **kwargs):
            f32, device = torch.float32, q.device
            if (not kwargs and (use_graph is False or use_graph is True)
                    and (chunk_offsets is None or isinstance(chunk_offsets, Tensor))
                    and all(t is None or (getattr(t, "device", None) == device
                                          and t.dtype == f32) for t in (g, gk))
                    and all(t is None or (getattr(t, "device", None) == device
                                          and t.dtype in (q.dtype, f32)) for t in (h0, dht))
                    and accept("chunk_gated_delta_rule_bwd_dhu", (q, k, w, do, dv), chunk_size,
                               cu_seqlens, chunk_indices)):
                return True, None
            given = {name: t for name, t in (("g", g), ("gk", gk), ("h0", h0), ("dht", dht))
                     if t is not None}
            if kwargs:
                return False, f"unknown arguments {sorted(kwargs)}"
            reason = _release_keywords_reason(chunk_offsets=chunk_offsets, use_graph=use_graph)
            if reason is not None:
                return False, reason
            for name, t in given.items():
                if not hasattr(t, "dtype") or not hasattr(t, "device"):
                    return False, f"{name} is a {type(t).__name__}, not a torch.Tensor"
            tensors = dict(q=q, k=k, w=w, do=do, dv=dv, **given)
            reason = _unsupported_reason("chunk_gated_delta_rule_bwd_dhu", tensors, chunk_size,
                                         cu_seqlens, chunk_indices)
            return reason is None, reason

        def chunk_gated_delta_rule_bwd_dhu(self, q, k, w, do, dv, g=None, gk=None, h0=None,
                                           dht=None, scale=None, state_v_first=False,
                                           cu_seqlens=None, chunk_size=64, chunk_indices=None,
                                           chunk_offsets=None, use_graph=False, **kwargs):
            if cu_seqlens is None:
                chunk_indices = None  # fla ignores it then; libkda would refuse it
            elif chunk_indices is None:  # as fla's function makes it (dh's chunk count)
                chunk_indices = _fla_pieces.load().prepare_chunk_indices(cu_seqlens, chunk_size)
            dh, dh0, dv2 = dhu(q, k, w, do, dv, g, gk, h0, dht, scale, state_v_first,
                               cu_seqlens, chunk_size, chunk_indices, None, kernel)
            return dh, dh0 if h0 is not None else None, dv2

        def chunk_kda_verifier(self, q, k, v, g, beta, scale=None, initial_state=None,
                               output_final_state=False, use_qk_l2norm_in_kernel=False,
                               use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
                               allow_neg_eigval=False, safe_gate=False, lower_bound=None,
                               disable_recompute=False, return_intermediate_states=False,
                               state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None,
                               cp_context=None, use_graph=False, max_num_seqs=None, **kwargs):
            reason = _chunk_kda_reason(q, k, v, g, beta, initial_state, cu_seqlens,
                                       disable_recompute, return_intermediate_states, cp_context,
                                       use_graph, kwargs)
            return reason is None, reason

        def chunk_kda(self, q, k, v, g, beta, scale=None, initial_state=None,
                      output_final_state=False, use_qk_l2norm_in_kernel=False,
                      use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
                      allow_neg_eigval=False, safe_gate=False, lower_bound=None,
                      disable_recompute=False, return_intermediate_states=False,
                      state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, cp_context=None,
                      use_graph=False, max_num_seqs=None, **kwargs):
            from ._layer import chunk_kda

            # fla reads A_log and dt_bias only with the gate in the kernel; chunk_kda does too.
            return chunk_kda(q, k, v, g, beta, scale, initial_state, output_final_state,
                             use_qk_l2norm_in_kernel, use_gate_in_kernel,
                             use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate,
                             lower_bound, state_v_first, cu_seqlens, kwargs.get("A_log"),
                             kwargs.get("dt_bias"), kwargs.get("chunk_size", 64),
                             disable_recompute)

    return KdaKernelsBackend


# The keywords fla's chunk_kda takes through **kwargs that kda_kernels.chunk_kda serves.
_CHUNK_KDA_KEYWORDS = frozenset(("A_log", "dt_bias", "chunk_size"))


def _chunk_kda_reason(q, k, v, g, beta, initial_state, cu_seqlens, disable_recompute,
                      return_intermediate_states, cp_context, use_graph, kwargs):
    """Why kda_kernels.chunk_kda does not take this call of fla's chunk_kda (fla runs it then),
    or None. Malformed calls are accepted: kda_kernels.chunk_kda raises for them, naming the
    argument, as fla would."""
    import torch

    unknown = sorted(set(kwargs) - _CHUNK_KDA_KEYWORDS)
    if unknown:
        return f"arguments kda_kernels.chunk_kda does not take: {unknown}"
    if cp_context is not None:
        return "context parallelism (cp_context) is not served by kda_kernels.chunk_kda yet"
    if return_intermediate_states is not False:
        return "return_intermediate_states is an inference path: fla serves it"
    if use_graph is not False:
        return "use_graph's static varlen chunk lists are not served by kda_kernels.chunk_kda yet"
    tensors = (q, k, v, g, beta)
    if not torch.is_grad_enabled() or not any(
            isinstance(t, torch.Tensor) and t.requires_grad
            for t in (*tensors, initial_state, kwargs.get("A_log"), kwargs.get("dt_bias"))):
        return "no gradient is needed: the forward is fla's either way, and fla serves inference"
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return None  # malformed: chunk_kda names the argument
    x = q.dtype
    if x not in (torch.float16, torch.bfloat16, torch.float32):
        return f"q has dtype {_name(x)}; kda_kernels has kernels for {', '.join(_X_DTYPES)}"
    if not q.is_cuda:
        return f"q is on {q.device}; kda_kernels.chunk_kda runs on CUDA tensors"
    if q.shape[-1] > _MAX_HEAD_DIM or v.shape[-1] > _MAX_HEAD_DIM:
        return (f"K={q.shape[-1]}, V={v.shape[-1]}; kda_kernels has kernels up to "
                f"{_MAX_HEAD_DIM}")
    for fla_name in STAGES:
        if not CUDA_KERNELS.get(fla_name):
            return (f"the loaded libkda has no CUDA kernel for {fla_name} "
                    f"({CUDA_KERNEL_NOTES.get(fla_name, 'not probed')})")
    return None


def _probe_arguments(fla_name, device):
    """A small zero-filled problem of operator `fla_name` on `device` (B=1, T=64, one head,
    K = V = BT = 64, bfloat16 X, contiguous: a problem each of the first operator's kernels
    takes, so that a KDA_CUDA_KERNEL choice does not make the probe fail), as the positional
    arguments of its torch op's implementation."""
    import torch

    def zeros(*shape, dtype=torch.float32):
        return torch.zeros(*shape, dtype=dtype, device=device)

    x, n = torch.bfloat16, 64
    tok = (1, n, 1, n)
    if fla_name == "chunk_gated_delta_rule_bwd_dhu":
        tensors = [zeros(*tok, dtype=x) for _ in range(5)]
        return (*tensors, None, zeros(*tok), None, None, None, False, None, n, None, "cuda",
                _api._kernel("auto"))
    if fla_name == "chunk_kda_bwd_wy_dqkg_fused":
        state = (1, 1, 1, n, n)
        tensors = [zeros(*tok, dtype=x), zeros(*tok, dtype=x), zeros(*tok, dtype=x),
                   zeros(*tok, dtype=x), zeros(*tok), zeros(1, n, 1, dtype=x),
                   zeros(*tok, dtype=x), zeros(*state), zeros(*tok, dtype=x), zeros(*state),
                   zeros(*tok, dtype=x)]
        return (*tensors, None, None, n, None, False, "cuda", _api._kernel("auto"))
    tensors = [zeros(*tok, dtype=x), zeros(*tok, dtype=x), zeros(*tok), zeros(1, n, 1),
               zeros(*tok), zeros(*tok), zeros(*tok), zeros(*tok), zeros(1, n, 1), zeros(*tok)]
    return (*tensors, None, None, n, False, "cuda", _api._kernel("auto"))


def probe_cuda_kernels(device=None):
    """Run a tiny problem of every stage operator (STAGES) on the cuda backend once and record in
    CUDA_KERNELS whether the library took it (a refusal with NotImplementedError, the C
    side's KDA_STATUS_UNSUPPORTED, means it has no CUDA kernel for the operator; its message
    goes to CUDA_KERNEL_NOTES). Any other error propagates. The probe passes kernel 'auto', as
    the backend's calls do, so KDA_CUDA_KERNEL applies to it as to them. Needs a usable cuda
    backend; enable() calls it once, on torch's current CUDA device (`device`)."""
    import torch

    from . import _torch_op

    if device is None:
        device = torch.device("cuda", torch.cuda.current_device())
    device = torch.device(device)
    for name in STAGES + COMMON_STAGES:
        try:
            _torch_op.OPS[name].run(*_probe_arguments(name, device))
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            CUDA_KERNELS[name] = True
            CUDA_KERNEL_NOTES.pop(name, None)
        except NotImplementedError as e:
            CUDA_KERNELS[name] = False
            CUDA_KERNEL_NOTES[name] = str(e)
    return dict(CUDA_KERNELS)


def _release():
    """The installed fla's backend machinery (_fla_release.FlaRelease); ImportError when fla is
    missing or of an unsupported shape, RuntimeError when its dispatch is switched off."""
    release = _fla_release.load()
    if release.dispatch_disabled:
        raise RuntimeError(
            "fla's backend dispatch is off (FLA_DISABLE_BACKEND_DISPATCH=1), so fla would never "
            "call kda_kernels; unset it to use kda_kernels.fla"
        )
    return release


def _functions():
    """The fla functions the backend implements: one per operator of libkda (fla's stage
    functions), then the layer, chunk_kda."""
    return STAGES + COMMON_STAGES + ("chunk_kda",)


def _operator_names(ops):
    """`ops` (None: every operator but OPT_IN's) checked against the operators this backend
    has, as a tuple of fla names in _functions()' order."""
    every = _functions()
    if ops is None:
        return tuple(name for name in every if name not in OPT_IN)
    if isinstance(ops, str):
        ops = (ops,)  # a lone name, not its characters
    ops = tuple(ops)
    unknown = [op for op in ops if op not in every]
    if unknown:
        raise ValueError(f"kda_kernels.fla.enable(ops=...): unknown operator(s) {unknown}; "
                         f"the operators are {list(every)}")
    if not ops:
        raise ValueError("kda_kernels.fla.enable(ops=()): no operator given (disable() "
                         "removes the backend)")
    return tuple(name for name in every if name in ops)


def _subset_class(full_class, ops):
    """The backend class that runs only the operators `ops` (fla names): `full_class` itself for
    all of them, else a subclass whose other operators' functions and verifiers are None. fla's
    dispatch then passes those by: a missing verifier accepts the call, and a backend whose
    function is None is skipped (in both releases' dispatch: `if impl is None: continue`), so
    the next backend or fla's own kernel runs them without a call into this module."""
    others = [name for name in _functions() if name not in ops]
    if not others:
        return full_class
    key = frozenset(ops)
    if key not in _subset_classes:
        hidden = {}
        for name in others:
            hidden[name] = None
            hidden[name + "_verifier"] = None
        _subset_classes[key] = type(full_class.__name__ + "Subset", (full_class,), hidden)
    return _subset_classes[key]


def enable(ops=None):
    """Register kda_kernels as a backend of fla's KDA operations.

    From then on fla's ``chunk_kda`` trains through ``kda_kernels.chunk_kda`` (fla's forward,
    this library's backward where it has kernels) whenever a gradient is needed and the call is
    one it serves (no ``cp_context``, ``return_intermediate_states`` or ``use_graph``: those go
    back to fla, which logs the reason), and fla's
    ``chunk_kda_bwd_wy_dqkg_fused`` and ``chunk_kda_bwd_intra`` (steps inside fla's own
    backward, for the calls handed back), and with ``ops`` naming it
    ``chunk_gated_delta_rule_bwd_dhu`` (the reverse state scan of every delta-rule layer), run
    on kda_kernels' CUDA kernels whenever the call is one they have a kernel for (CUDA tensors,
    X in float16/bfloat16/float32, K, V <= 256, chunk_size 16/32/64, and an operator whose CUDA
    kernel the loaded libkda has: checked here once, by running a tiny problem of each, see
    ``CUDA_KERNELS``); other calls run fla's Triton kernels as before. Calling it again is
    harmless; a call with other ``ops`` replaces the previous choice.

    Parameters
    ----------
    ops : iterable of str, optional
        The fla names of the functions to take over (``chunk_kda`` and the stage functions),
        e.g. ``("chunk_kda_bwd_wy_dqkg_fused",)``; fla runs its own for the others. None (the
        default) takes every one kda_kernels has but those in ``OPT_IN`` (the reverse state
        scan, not yet faster than fla's everywhere), which only a name in ``ops`` takes.

    Raises
    ------
    ValueError
        ``ops`` names an operator kda_kernels does not have, or none.
    ImportError
        fla is not installed, or its backend machinery is neither 0.5.2's nor 0.6.x's (the
        message says what was found).
    RuntimeError
        The loaded libkda has no usable CUDA backend (it was built without nvcc, or no GPU is
        present), libkda was not found, or fla's dispatch is disabled.
    """
    global _backend_class
    names = _operator_names(ops)
    release = _release()
    if not _api.backend_available("cuda"):
        raise RuntimeError(
            f"kda_kernels.fla.enable(): the cuda backend is not available in "
            f"{_api.library_path()} (built without CUDA, or no GPU present)"
        )
    with _lock:
        if any(name not in CUDA_KERNELS for name in STAGES + COMMON_STAGES):
            probe_cuda_kernels()  # once: the loaded library does not change
        if _backend_class is None:
            _backend_class = _make_backend_class(release.base_class)
        release.register(_subset_class(_backend_class, names)())


def disable():
    """Remove kda_kernels from fla's KDA backends; fla's own kernels run again. Harmless when
    not enabled."""
    _release().unregister(BACKEND_TYPE)


def is_enabled():
    """Whether kda_kernels is registered with fla (False when fla is not installed)."""
    try:
        release = _release()
    except (ImportError, RuntimeError):
        return False
    return release.registered(BACKEND_TYPE) is not None


def enabled_operators():
    """The fla names of the operators the registered backend takes (all but OPT_IN's after
    ``enable()``, the chosen ones after ``enable(ops=...)``); () when not enabled."""
    try:
        release = _release()
    except (ImportError, RuntimeError):
        return ()
    backend = release.registered(BACKEND_TYPE)
    if backend is None:
        return ()
    return tuple(name for name in _functions() if getattr(backend, name, None) is not None)
