"""kda_kernels.chunk_kda: a whole KDA layer for training (../shared/SPEC-chunk-kda.md), with fla's
call and semantics, returning ``(o, final_state)``.

It is a torch.autograd.Function. The forward is fla's ``chunk_kda_fwd`` (this library has no
forward yet), with fla's l2norm and beta sigmoid in front of it. The backward runs fla's stages
up to the reverse state scan (the recompute of w/u, the forward state scan, dAv, the reverse
scan), then one of two tails, as ``BACKWARD`` (or ``KDA_LAYER_BACKWARD`` at import) says:

- ``"split"``: this library's WY and intra operators
  (chunk_kda_bwd_wy_dqkg_fused, chunk_kda_bwd_intra, called directly), then fla's reverse
  cumsum of dg and fla's gate, l2norm and beta sigmoid backwards (``SPLIT_STAGES``);
- ``"epilogue"``: this library's fused epilogue (chunk_kda_bwd_epilogue), which writes every
  gradient of the layer's raw inputs in one pass per chunk (``EPILOGUE_STAGES``). Its fast
  kernel takes bf16 with chunks of 64, K = V = 128 and one value head per query head; every
  other problem runs its general kernel, several times slower (docs/performance.md);
- ``"auto"`` (the default): the epilogue where its fast kernel runs (``epilogue_is_fast``), else
  the split tail. On an H100 the epilogue tail is the faster at B=1 and B=4, T=8192, H=32 and on
  the varlen mix, in the Kimi layer's call and in cuDNN's (docs/performance.md).

Where the stages before the tails run: ``FORWARD_SCAN`` / ``REVERSE_SCAN`` (or
``KDA_LAYER_FORWARD_SCAN`` / ``KDA_LAYER_REVERSE_SCAN`` at import) for the state scans, fla's
(``chunk_gated_delta_rule_fwd_h``, ``chunk_gated_delta_rule_bwd_dhu``: "fla") or this library's
(chunk_fwd_h, chunk_bwd_dhu: "kda"); ``PREP`` (or ``KDA_LAYER_PREP``) for what the epilogue
tail's scans read (the gate's cumsum, l2norm, w, u, qg, kg and dAv's dv), fla's stages ("fla")
or this library's chunk_bwd_prep, one pass per chunk ("kda"). All three default to "auto":
ours where the layer was measured faster through them (``prep_is_fast``: prep's bf16 kernel,
any head grouping; ``scan_is_fast``: the epilogue's shape), fla's elsewhere. On an H100 at
B=1 T=8192 H=32 and on the varlen mix (the Kimi call) the backward through all of ours took
2.21 and 2.30 ms against 2.84 and 2.62 with fla's first pass and scans (docs/performance.md).
With all three "kda" (``use_library_stages()``) the backward runs none of fla's kernels.

``STAGES`` is the split tail's list unless ``BACKWARD`` is "epilogue" ("auto" picks per call).
The backward recomputes what fla's default call recomputes (fla's ``disable_recompute=False``);
with ``disable_recompute=True`` the forward saves w, qg, kg, v_new and h (fla's forward keeps
them then) and the backward skips the recompute of w, u, qg, kg (fla's first pass) and the
forward state scan.

Needs fla (0.5.2 or 0.6.x) and CUDA tensors; the error says which is missing.
"""

import dataclasses
import os

import torch

from . import _api, _fla_pieces

# Where each stage of the layer's backward runs, in the order it runs (for the bench's tables):
# with BACKWARD = "epilogue",
EPILOGUE_STAGES = (
    ("gate + chunk cumsum (recompute)", "fla"),
    ("l2norm of q, k (recompute)", "fla"),
    ("recompute w, u, qg, kg", "fla"),
    ("forward state scan (h, v_new)", "fla"),
    ("dAv (intra-chunk dv)", "fla"),
    ("reverse state scan (dh, dh0, dv)", "fla"),
    ("epilogue: chunk_kda_bwd_epilogue (WY, intra, cumsum, gate, l2norm, beta backward)",
     "kda_kernels"),
)

# and with BACKWARD = "split": our two operators between fla's stages.
SPLIT_STAGES = (
    ("gate + chunk cumsum (recompute)", "fla"),
    ("recompute w, u, qg, kg", "fla"),
    ("forward state scan (h, v_new)", "fla"),
    ("dAv (dAqk, intra-chunk dv)", "fla"),
    ("reverse state scan (dh, dh0, dv)", "fla"),
    ("WY: chunk_kda_bwd_wy_dqkg_fused", "kda_kernels"),
    ("intra: chunk_kda_bwd_intra", "kda_kernels"),
    ("reverse cumsum of dg", "fla"),
    ("gate backward (dA_log, ddt_bias)", "fla"),
    ("l2norm backward", "fla"),
    ("beta sigmoid backward", "fla"),
)

_X_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

_BACKWARDS = ("auto", "split", "epilogue")
BACKWARD = os.environ.get("KDA_LAYER_BACKWARD", "auto")
if BACKWARD not in _BACKWARDS:
    raise ValueError(f"KDA_LAYER_BACKWARD: expected one of {_BACKWARDS}, got {BACKWARD!r}")
STAGES = EPILOGUE_STAGES if BACKWARD == "epilogue" else SPLIT_STAGES

# Where the state scans run: "fla" (as the stage lists say), "kda" (chunk_fwd_h, chunk_bwd_dhu)
# or "auto" (ours at the shape the layer was measured faster through them: scan_is_fast).
_SCAN_CHOICES = ("auto", "fla", "kda")


def _scan_choice(variable):
    value = os.environ.get(variable, "auto")
    if value not in _SCAN_CHOICES:
        raise ValueError(f"{variable}: expected one of {_SCAN_CHOICES}, got {value!r}")
    return value


FORWARD_SCAN = _scan_choice("KDA_LAYER_FORWARD_SCAN")
REVERSE_SCAN = _scan_choice("KDA_LAYER_REVERSE_SCAN")
# Where the epilogue tail's first pass runs: "fla" (EPILOGUE_STAGES' first five rows), "kda"
# (chunk_bwd_prep) or "auto" (chunk_bwd_prep where its bf16 kernel runs: prep_is_fast).
_PREP_CHOICES = ("auto", "fla", "kda")
PREP = os.environ.get("KDA_LAYER_PREP", "auto")
if PREP not in _PREP_CHOICES:
    raise ValueError(f"KDA_LAYER_PREP: expected one of {_PREP_CHOICES}, got {PREP!r}")

# With BACKWARD = "epilogue" and the first pass ours (PREP "kda", or "auto" where prep_is_fast),
_PREP_ROW = ("prep: chunk_kda_bwd_prep (gate + cumsum, l2norm, w, u, qg, kg, dAv's dv)",
             "kda_kernels")
PREP_STAGES = (_PREP_ROW, EPILOGUE_STAGES[3], EPILOGUE_STAGES[5], EPILOGUE_STAGES[-1])

# and with PREP and both scans "kda": every stage is this library's.
LIBRARY_STAGES = (
    _PREP_ROW,
    ("forward state scan: chunk_gated_delta_rule_fwd_h (h, v_new)", "kda_kernels"),
    ("reverse state scan: chunk_gated_delta_rule_bwd_dhu (dh, dh0, dv)", "kda_kernels"),
    EPILOGUE_STAGES[-1],
)


def use_library_stages(on=True):
    """Every stage of the epilogue tail this library's (on) or the defaults' (fla's first pass
    and scans): sets PREP, FORWARD_SCAN and REVERSE_SCAN."""
    global PREP, FORWARD_SCAN, REVERSE_SCAN
    PREP = FORWARD_SCAN = REVERSE_SCAN = "kda" if on else "fla"


def prep_is_fast(q, v, chunk_size):
    """Whether chunk_kda_bwd_prep runs its bf16 kernel: bf16, chunks of 64, K = V = 128 (any head
    grouping; the layer passes contiguous tensors). Its general kernel is slower than fla's
    stages (docs/performance.md)."""
    return (q.dtype == torch.bfloat16 and chunk_size == 64 and q.shape[-1] == 128
            and v.shape[-1] == 128)


def prep_choice(q, v, chunk_size, prep=None):
    """Where the epilogue tail's first pass runs for this layer: PREP's choice, "auto" resolved
    by prep_is_fast."""
    prep = PREP if prep is None else prep
    if prep == "auto":
        return "kda" if prep_is_fast(q, v, chunk_size) else "fla"
    return prep


def scan_is_fast(k, v, chunk_size):
    """Whether "auto" takes our state scans for this layer: where the layer was measured faster
    through them (docs/performance.md), the shape the epilogue's bf16 kernel takes
    (epilogue_is_fast; k has q's shape). Their tensor-core kernel takes more (16-bit X, K up to
    128); elsewhere fla's scans stay until measured."""
    return epilogue_is_fast(k, v, chunk_size)


def scan_choice(k, v, chunk_size, scan):
    """Where a state scan runs for this layer: FORWARD_SCAN's or REVERSE_SCAN's choice (scan),
    "auto" resolved by scan_is_fast."""
    if scan == "auto":
        return "kda" if scan_is_fast(k, v, chunk_size) else "fla"
    return scan


def epilogue_is_fast(q, v, chunk_size):
    """Whether chunk_kda_bwd_epilogue runs its bf16 kernel on this layer's backward: bf16, chunks
    of 64, K = V = 128, one value head per query head (h and dh come from fla's forward in q's
    dtype, every tensor contiguous). Other problems run its general kernel, several times slower
    than the split tail (docs/performance.md)."""
    return (q.dtype == torch.bfloat16 and chunk_size == 64 and q.shape[-1] == 128
            and v.shape[-1] == 128 and v.shape[-2] == q.shape[-2])


def backward_tail(q, v, chunk_size, backward=None):
    """The tail a backward of this layer runs: BACKWARD's, "auto" resolved by epilogue_is_fast."""
    backward = BACKWARD if backward is None else backward
    if backward == "auto":
        return "epilogue" if epilogue_is_fast(q, v, chunk_size) else "split"
    return backward


@dataclasses.dataclass(frozen=True)
class Options:
    """The call's options, resolved (scale set)."""

    scale: float
    output_final_state: bool
    use_qk_l2norm_in_kernel: bool
    use_gate_in_kernel: bool
    use_beta_sigmoid_in_kernel: bool
    allow_neg_eigval: bool
    safe_gate: bool
    lower_bound: float | None
    state_v_first: bool
    chunk_size: int
    disable_recompute: bool = False

    @property
    def beta_scale(self):
        return 2.0 if self.allow_neg_eigval else 1.0


def _shape(t):
    return list(t.shape)


def check_arguments(q, k, v, g, beta, scale, initial_state, cu_seqlens, A_log, dt_bias,
                    use_gate_in_kernel, safe_gate, lower_bound, state_v_first, chunk_size):
    """Raise TypeError / ValueError naming the argument when the call is malformed; return the
    scale to use. fla's own rules, and the shapes fla assumes without checking."""
    where = "kda_kernels.chunk_kda"
    for name, t in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{where}: {name}: expected a torch.Tensor, got {type(t).__name__}")
    if q.dim() != 4:
        raise ValueError(f"{where}: q: expected rank 4 [B, T, H, K], got shape {_shape(q)}")
    B, T, H, K = q.shape
    if q.dtype not in _X_DTYPES:
        raise TypeError(f"{where}: q: expected dtype float16, bfloat16 or float32, got {q.dtype}")
    if k.shape != q.shape:
        raise ValueError(f"{where}: k: expected q's shape {_shape(q)}, got {_shape(k)}")
    if v.dim() != 4 or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"{where}: v: expected [B, T, HV, V] = [{B}, {T}, HV, V], got shape "
                         f"{_shape(v)}")
    HV = v.shape[2]
    if HV % H != 0:
        raise ValueError(f"{where}: v: its heads HV={HV} must be a multiple of q's H={H}")
    if g.shape != (B, T, HV, K):
        raise ValueError(f"{where}: g: expected shape {[B, T, HV, K]}, got {_shape(g)}")
    if beta.shape != (B, T, HV):
        raise ValueError(f"{where}: beta: expected shape {[B, T, HV]}, got {_shape(beta)}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{where}: {name}: expected q's dtype {q.dtype}, got {t.dtype}")
    for name, t in (("g", g), ("beta", beta)):
        if t.dtype != q.dtype and t.dtype != torch.float32:
            raise TypeError(f"{where}: {name}: expected q's dtype {q.dtype} or float32, got "
                            f"{t.dtype}")
    tensors = [("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)]
    N = B
    if cu_seqlens is not None:
        if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or \
                cu_seqlens.dtype not in (torch.int32, torch.int64) or cu_seqlens.numel() < 2:
            raise ValueError(f"{where}: cu_seqlens: expected a 1-D int32/int64 tensor of N+1 "
                             "offsets")
        if B != 1:
            raise ValueError(f"{where}: cu_seqlens: the batch size must be 1 with cu_seqlens "
                             f"(sequences packed along T), got B={B}")
        N = cu_seqlens.numel() - 1
        tensors.append(("cu_seqlens", cu_seqlens))
    if initial_state is not None:
        if not isinstance(initial_state, torch.Tensor) or initial_state.dtype != torch.float32:
            raise TypeError(f"{where}: initial_state: expected a float32 tensor")
        V = v.shape[3]
        want = [N, HV, V, K] if state_v_first else [N, HV, K, V]
        if _shape(initial_state) != want:
            raise ValueError(f"{where}: initial_state: expected shape {want} "
                             f"({'state_v_first' if state_v_first else 'K-first'}), got "
                             f"{_shape(initial_state)}")
        tensors.append(("initial_state", initial_state))
    if chunk_size not in (32, 64):
        raise ValueError(f"{where}: chunk_size: expected 32 or 64, got {chunk_size}")
    if use_gate_in_kernel:
        if A_log is None and lower_bound is None:
            raise ValueError(f"{where}: A_log: required with use_gate_in_kernel=True unless "
                             "lower_bound is set")
        for name, t, n in (("A_log", A_log, HV), ("dt_bias", dt_bias, HV * K)):
            if t is None:
                continue
            # fla reads them in float32 whatever their dtype (a bf16 layer's parameters are
            # bf16): any floating dtype is taken.
            if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() != n:
                raise ValueError(f"{where}: {name}: expected a floating tensor of {n} elements")
            tensors.append((name, t))
        if safe_gate:
            if lower_bound is None:
                raise ValueError(f"{where}: lower_bound: required with safe_gate=True and "
                                 "use_gate_in_kernel=True")
            if not -5 <= lower_bound < 0:
                raise ValueError(f"{where}: lower_bound: expected a value in [-5, 0) with "
                                 f"safe_gate=True, got {lower_bound}")
    for name, t in tensors:
        if not t.is_cuda or t.device != q.device:
            raise ValueError(f"{where}: {name}: expected a CUDA tensor on q's device ({q.device}):"
                             f" the layer runs on CUDA only, got one on {t.device}")
    return K ** -0.5 if scale is None else float(scale)


def _chunk_indices(f, cu_seqlens, chunk_size):
    if cu_seqlens is None:
        return None
    return f.prepare_chunk_indices(cu_seqlens, chunk_size)


class ChunkKDAFunction(torch.autograd.Function):
    """Inputs: q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, Options."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, opt):
        f = _fla_pieces.load()
        q, k, v, g, beta = (t.contiguous() for t in (q, k, v, g, beta))
        q_raw, k_raw = q, k
        q_rstd = k_rstd = None
        if opt.use_qk_l2norm_in_kernel:
            q, q_rstd = f.l2norm_fwd(q)
            k, k_rstd = f.l2norm_fwd(k)
        beta_raw = beta
        if opt.use_beta_sigmoid_in_kernel:
            beta = f.fused_beta_sigmoid(beta_raw, scale=opt.beta_scale)
        chunk_indices = _chunk_indices(f, cu_seqlens, opt.chunk_size)
        if not opt.use_gate_in_kernel:
            A_log = dt_bias = None  # fla's rule: they matter only for the gate in the kernel
        o, final_state, g_cumsum, Aqk, Akk, w, u, qg, kg, v_new, h, initial_state = f.chunk_kda_fwd(
            q=q, k=k, v=v, g=g, beta=beta, scale=opt.scale, initial_state=initial_state,
            output_final_state=opt.output_final_state, state_v_first=opt.state_v_first,
            cu_seqlens=cu_seqlens, chunk_indices=chunk_indices, chunk_size=opt.chunk_size,
            safe_gate=opt.safe_gate, lower_bound=opt.lower_bound,
            use_gate_in_kernel=opt.use_gate_in_kernel, A_log=A_log, dt_bias=dt_bias,
            disable_recompute=opt.disable_recompute)
        ctx.path = backward_tail(q, v, opt.chunk_size)
        # disable_recompute: the forward's intermediates, kept for the backward (else None).
        ctx.intermediates = (Intermediates(w, qg, kg, v_new, h)
                             if opt.disable_recompute else None)
        del u  # the backward reads v_new, not u
        if ctx.path == "epilogue":  # it takes the raw q, k (l2norm's backward is in it)
            q, k, q_rstd, k_rstd = q_raw, k_raw, None, None
        ctx.save_for_backward(q, q_rstd, k, k_rstd, v, g_cumsum, g, beta_raw, beta, A_log,
                              dt_bias, Aqk, Akk, initial_state, cu_seqlens, chunk_indices)
        ctx.opt = opt
        return o.to(q.dtype), final_state

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, do, dht):
        (q, q_rstd, k, k_rstd, v, g_cumsum, g_input, beta_raw, beta, A_log, dt_bias, Aqk, Akk,
         h0, cu_seqlens, chunk_indices) = ctx.saved_tensors
        opt = ctx.opt
        saved, ctx.intermediates = ctx.intermediates, None
        if ctx.path == "epilogue":
            grads = layer_backward_epilogue(q, k, v, g_cumsum, g_input, beta_raw, beta, A_log,
                                            dt_bias, Aqk, Akk, h0, cu_seqlens, chunk_indices, do,
                                            dht, opt, saved)
        else:
            grads = layer_backward(q, q_rstd, k, k_rstd, v, g_cumsum, g_input, beta_raw, beta,
                                   A_log, dt_bias, Aqk, Akk, h0, cu_seqlens, chunk_indices, do,
                                   dht, opt, saved)
        dq, dk, dv, dg, db, dA, dbias, dh0 = grads
        return dq, dk, dv, dg, db, dA, dbias, dh0, None, None


@dataclasses.dataclass(frozen=True)
class Intermediates:
    """What the forward keeps for the backward with disable_recompute=True (fla's tensors of
    the same names): w, qg, kg [B, T, HV, K], v_new [B, T, HV, V], and h, the state at each
    chunk's start (fla's u is not kept: the backward reads v_new)."""

    w: torch.Tensor
    qg: torch.Tensor
    kg: torch.Tensor
    v_new: torch.Tensor
    h: torch.Tensor


def _forward_scan(kg, w, u, gk, h0, cu_seqlens, chunk_indices, opt):
    """h (the state at each chunk's start) and v_new: fla's chunk_gated_delta_rule_fwd_h or
    ours, as FORWARD_SCAN says."""
    from . import _torch_op

    BT, svf = opt.chunk_size, opt.state_v_first
    if scan_choice(kg, u, BT, FORWARD_SCAN) == "kda":
        forward_scan = _torch_op.OPS["chunk_gated_delta_rule_fwd_h"].run
        h, v_new, _ = forward_scan(kg, w, u, None, gk, h0, False, BT, True, svf, cu_seqlens,
                                   chunk_indices, "cuda", _api._kernel("auto"))
        return h, v_new
    h, v_new, _ = _fla_pieces.load().chunk_gated_delta_rule_fwd_h(
        k=kg, w=w, u=u, gk=gk, initial_state=h0, output_final_state=False,
        cu_seqlens=cu_seqlens, chunk_indices=chunk_indices, chunk_size=BT, state_v_first=svf)
    return h, v_new


def _reverse_scan(qg, kg, w, do, dv, gk, h0, dht, cu_seqlens, chunk_indices, opt):
    """dh (the gradient by the state at each chunk's end), dh0 (None without h0) and dv2 (dv
    with the state's term): fla's chunk_gated_delta_rule_bwd_dhu or ours, as REVERSE_SCAN
    says."""
    from . import _torch_op

    BT, svf = opt.chunk_size, opt.state_v_first
    if scan_choice(kg, do, BT, REVERSE_SCAN) == "kda":
        reverse_scan = _torch_op.OPS["chunk_gated_delta_rule_bwd_dhu"].run
        dh, dh0, dv = reverse_scan(qg, kg, w, do, dv, None, gk, h0, dht, opt.scale, svf,
                                   cu_seqlens, BT, chunk_indices, "cuda", _api._kernel("auto"))
        return dh, dh0 if h0 is not None else None, dv
    return _fla_pieces.load().chunk_gated_delta_rule_bwd_dhu(
        q=qg, k=kg, w=w, gk=gk, h0=h0, dht=dht, do=do, dv=dv, scale=opt.scale,
        cu_seqlens=cu_seqlens, chunk_size=BT, chunk_indices=chunk_indices, state_v_first=svf)


def _scans(f, q, k, v, g, beta, Akk, Aqk, h0, cu_seqlens, chunk_indices, do, dht, opt,
           saved=None):
    """The stages before the tails: fla's recompute of w, u, qg, kg, the forward state scan,
    fla's dAv, the reverse state scan (the scans fla's, or ours as FORWARD_SCAN and REVERSE_SCAN
    say; `saved`, the forward's Intermediates, stand in for the recompute and the forward scan).
    Returns h, v_new, dAqk, dh, dh0 and the reverse scan's dv."""
    if saved is not None:
        w, qg, kg, h, v_new = saved.w, saved.qg, saved.kg, saved.h, saved.v_new
    else:
        w, u, qg, kg = f.recompute_w_u_fwd(q=q, k=k, v=v, beta=beta, A=Akk, gk=g,
                                           cu_seqlens=cu_seqlens, chunk_indices=chunk_indices)
        h, v_new = _forward_scan(kg, w, u, g, h0, cu_seqlens, chunk_indices, opt)
        del u
    dAqk, dv = f.chunk_kda_bwd_dAv(q=q, k=k, v=v_new, do=do, A=Aqk, scale=opt.scale,
                                   cu_seqlens=cu_seqlens, chunk_size=opt.chunk_size,
                                   chunk_indices=chunk_indices)
    dh, dh0, dv = _reverse_scan(qg, kg, w, do, dv, g, h0, dht, cu_seqlens, chunk_indices, opt)
    return h, v_new, dAqk, dh, dh0, dv


def _library_first_stages(q, k, v, g_input, beta_raw, Akk, Aqk, do, A_log32, bias32, h0, dht,
                          cu_seqlens, chunk_indices, opt, saved=None):
    """PREP = "kda": chunk_bwd_prep (gk, w, u, qg, kg and the intra-chunk dv from the raw
    inputs), then the state scans on its outputs (ours or fla's, as FORWARD_SCAN and
    REVERSE_SCAN say; `saved`, the forward's Intermediates, stand in for the forward scan and
    give the reverse scan its qg, kg, w). Returns h, v_new, dh, dh0 and the reverse scan's dv."""
    from . import _torch_op

    gate = opt.use_gate_in_kernel
    prep = _torch_op.OPS["chunk_kda_bwd_prep"].run
    gk, w, u, qg, kg, dv = prep(
        q, k, v, g_input, beta_raw, Akk, Aqk, do, A_log32, bias32, cu_seqlens, opt.chunk_size,
        chunk_indices, opt.use_qk_l2norm_in_kernel, gate, opt.use_beta_sigmoid_in_kernel,
        opt.allow_neg_eigval, opt.lower_bound if gate else None, "cuda", _api._kernel("auto"))
    if saved is not None:
        w, qg, kg, h, v_new = saved.w, saved.qg, saved.kg, saved.h, saved.v_new
    else:
        h, v_new = _forward_scan(kg, w, u, gk, h0, cu_seqlens, chunk_indices, opt)
    del u
    dh, dh0, dv = _reverse_scan(qg, kg, w, do, dv, gk, h0, dht, cu_seqlens, chunk_indices, opt)
    return h, v_new, dh, dh0, dv


def _gate_cumsum(f, g_cumsum, g_input, A_log, dt_bias, cu_seqlens, chunk_indices, opt):
    """The chunk-local cumsum of the log2 decays that fla's stages read: recomputed from the raw
    gate input when the gate is in the kernel (fla does the same)."""
    if not opt.use_gate_in_kernel:
        return g_cumsum
    return f.kda_gate_chunk_cumsum(g=g_input, A_log=A_log, dt_bias=dt_bias, scale=f.RCP_LN2,
                                   chunk_size=opt.chunk_size, cu_seqlens=cu_seqlens,
                                   chunk_indices=chunk_indices, lower_bound=opt.lower_bound)


def layer_backward_epilogue(q, k, v, g_cumsum, g_input, beta_raw, beta, A_log, dt_bias, Aqk,
                            Akk, h0, cu_seqlens, chunk_indices, do, dht, opt, saved=None):
    """BACKWARD = "epilogue": the gradients (dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0) of the
    raw inputs (q, k as given, beta as given: logits with the sigmoid in the kernel), as
    EPILOGUE_STAGES lists them (PREP_STAGES with our first pass, LIBRARY_STAGES with PREP and
    both scans "kda"): the first pass and the state scans, then one chunk_kda_bwd_epilogue."""
    from . import _torch_op

    f = _fla_pieces.load()
    do = do.contiguous()
    dht = None if dht is None else dht.contiguous()
    gate = opt.use_gate_in_kernel
    # The operators read the gate's parameters in float32 (fla does too, whatever their dtype).
    A_log32 = A_log.float().reshape(-1) if gate and A_log is not None else None
    bias32 = dt_bias.float().reshape(-1) if gate and dt_bias is not None else None
    if prep_choice(q, v, opt.chunk_size) == "kda":
        h, v_new, dh, dh0, dv = _library_first_stages(q, k, v, g_input, beta_raw, Akk, Aqk, do,
                                                      A_log32, bias32, h0, dht, cu_seqlens,
                                                      chunk_indices, opt, saved)
    else:
        qn, kn = q, k
        if opt.use_qk_l2norm_in_kernel:
            qn, _ = f.l2norm_fwd(q)
            kn, _ = f.l2norm_fwd(k)
        g = _gate_cumsum(f, g_cumsum, g_input, A_log, dt_bias, cu_seqlens, chunk_indices, opt)
        h, v_new, _, dh, dh0, dv = _scans(f, qn, kn, v, g, beta, Akk, Aqk, h0, cu_seqlens,
                                          chunk_indices, do, dht, opt, saved)
        del qn, kn, g
    epilogue = _torch_op.OPS["chunk_kda_bwd_epilogue"].run
    dq, dk, dv, dg, db, dA, dbias = epilogue(
        q, k, v, g_input, beta_raw, Akk, h, dh, v_new, dv, do, A_log32, bias32, opt.scale,
        cu_seqlens, opt.chunk_size, chunk_indices, opt.state_v_first, opt.use_qk_l2norm_in_kernel,
        gate, opt.use_beta_sigmoid_in_kernel, opt.allow_neg_eigval,
        opt.lower_bound if gate else None, "cuda", _api._kernel("auto"))
    dA = dA.reshape(A_log.shape).to(A_log.dtype) if A_log32 is not None else None
    dbias = dbias.reshape(dt_bias.shape).to(dt_bias.dtype) if bias32 is not None else None
    return dq, dk, dv, dg.to(g_input.dtype), db.to(beta_raw.dtype), dA, dbias, dh0


def layer_backward(q, q_rstd, k, k_rstd, v, g_cumsum, g_input, beta_raw, beta, A_log, dt_bias,
                   Aqk, Akk, h0, cu_seqlens, chunk_indices, do, dht, opt, saved=None):
    """BACKWARD = "split": the gradients (dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0) of the
    raw inputs, from what the forward saved (q and k normalised when l2norm is in the kernel, beta
    after its sigmoid), stage by stage as SPLIT_STAGES lists them."""
    from . import _torch_op

    f = _fla_pieces.load()
    BT, scale, svf = opt.chunk_size, opt.scale, opt.state_v_first
    do = do.contiguous()
    dht = None if dht is None else dht.contiguous()
    g = _gate_cumsum(f, g_cumsum, g_input, A_log, dt_bias, cu_seqlens, chunk_indices, opt)
    h, v_new, dAqk, dh, dh0, dv = _scans(f, q, k, v, g, beta, Akk, Aqk, h0, cu_seqlens,
                                         chunk_indices, do, dht, opt, saved)
    kernel = _api._kernel("auto")
    wy = _torch_op.OPS["chunk_kda_bwd_wy_dqkg_fused"].run
    intra = _torch_op.OPS["chunk_kda_bwd_intra"].run
    dq, dk, dv, db, dg, dAkk = wy(q, k, v, v_new, g, beta, Akk, h, do, dh, dv, scale, cu_seqlens,
                                  BT, chunk_indices, svf, "cuda", kernel)
    del h, dh, v_new
    dq, dk, db, dg = intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens, chunk_indices,
                           BT, opt.safe_gate, "cuda", kernel)
    H, HV = q.shape[2], v.shape[2]
    if HV > H:  # GVA: each q/k head collects the gradients of its HV/H value heads
        dq = dq.view(*dq.shape[:2], H, HV // H, dq.shape[-1]).sum(dim=3)
        dk = dk.view(*dk.shape[:2], H, HV // H, dk.shape[-1]).sum(dim=3)
    dg = f.chunk_local_cumsum(dg, chunk_size=BT, reverse=True, cu_seqlens=cu_seqlens,
                              chunk_indices=chunk_indices)
    dA = dbias = None
    if opt.use_gate_in_kernel:
        dg, dA, dbias = f.kda_gate_bwd(g=g_input, A_log=A_log, dt_bias=dt_bias, dyg=dg,
                                       lower_bound=opt.lower_bound)
    if opt.use_qk_l2norm_in_kernel:
        dq = f.l2norm_bwd(q, q_rstd, dq)
        dk = f.l2norm_bwd(k, k_rstd, dk)
    if opt.use_beta_sigmoid_in_kernel:
        db = f.fused_beta_sigmoid_bwd(beta_raw, db, scale=opt.beta_scale)
    return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dg.to(g_input.dtype),
            db.to(beta_raw.dtype), dA, dbias, dh0)


@torch.compiler.disable
def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
              use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, safe_gate=False,
              lower_bound=None, state_v_first=False, cu_seqlens=None, A_log=None, dt_bias=None,
              chunk_size=64, disable_recompute=False):
    """A KDA layer, forward and backward (fla's ``chunk_kda``: same arguments, same semantics).

    Parameters
    ----------
    q, k : torch.Tensor
        [B, T, H, K] queries and keys (float16, bfloat16 or float32, CUDA).
    v : torch.Tensor
        [B, T, HV, V] values; HV a multiple of H (GVA).
    g : torch.Tensor
        [B, T, HV, K] log decay (<= 0), or with ``use_gate_in_kernel`` the raw gate input.
    beta : torch.Tensor
        [B, T, HV] write strength, or with ``use_beta_sigmoid_in_kernel`` its logits.
    scale : float, optional
        Default K ** -0.5.
    initial_state : torch.Tensor, optional
        float32 [N, HV, K, V] ([N, HV, V, K] with ``state_v_first``); N = B, or the number of
        sequences with ``cu_seqlens``.
    output_final_state : bool
        Return the final state (same layout as ``initial_state``).
    use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval,
    safe_gate, lower_bound, state_v_first : as fla's chunk_kda.
    cu_seqlens : torch.Tensor, optional
        [N+1] offsets of sequences packed along T (B = 1).
    A_log, dt_bias : torch.Tensor, optional
        float32 [HV] and [HV*K], read only with ``use_gate_in_kernel`` (as in fla).
    chunk_size : int
        32 or 64.
    disable_recompute : bool
        Keep the forward's w, qg, kg, v_new and h for the backward (more memory), which then
        skips their recompute and the forward state scan (fla's switch).

    Returns
    -------
    (o, final_state): o [B, T, HV, V] in q's dtype; final_state float32 or None.

    The forward is fla's (a later release of this library replaces it); the backward runs this
    library's kernels where it has them (``kda_kernels._layer.EPILOGUE_STAGES`` for bf16 with
    chunks of 64, K = V = 128 and HV = H, else ``SPLIT_STAGES``). torch.compile runs it
    as a graph break (like fla's own chunk_kda); every kernel of the backward is CUDA-graph safe
    but fla's varlen forward reads cu_seqlens on the host.

    Raises
    ------
    TypeError, ValueError
        A malformed call, naming the argument.
    ImportError
        fla (0.5.2 or 0.6.x) is not installed.
    """
    scale = check_arguments(q, k, v, g, beta, scale, initial_state, cu_seqlens, A_log, dt_bias,
                            use_gate_in_kernel, safe_gate, lower_bound, state_v_first, chunk_size)
    opt = Options(scale, bool(output_final_state), bool(use_qk_l2norm_in_kernel),
                  bool(use_gate_in_kernel), bool(use_beta_sigmoid_in_kernel),
                  bool(allow_neg_eigval), bool(safe_gate), lower_bound, bool(state_v_first),
                  int(chunk_size), bool(disable_recompute))
    _fla_pieces.load()  # the ImportError before autograd wraps anything
    with torch.cuda.device(q.device):
        return ChunkKDAFunction.apply(q, k, v, g, beta, A_log, dt_bias, initial_state,
                                      cu_seqlens, opt)
