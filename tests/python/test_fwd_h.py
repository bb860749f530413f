"""chunk_gated_delta_rule_fwd_h (chunk_fwd_h, the forward state scan) from Python on the CPU
backends: cpu-ref against an independent float64 NumPy scan, cpu against it, on NumPy arrays
and on torch CPU tensors through the compiled op; fla's positional order and switches; the
outputs' named extents (chunk count, sequence count, state orientation) on every path, fake
tensors included; k as the operator's first tensor in the messages; the device-cu_seqlens
rule."""

import math

import numpy as np
import pytest

import kda_kernels as kk

torch = pytest.importorskip("torch")

fwd_h = kk.chunk_gated_delta_rule_fwd_h


def err_ratio(x, ref):
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    return float(np.sqrt(np.mean((x - ref) ** 2)) / np.sqrt(np.mean(ref ** 2)))


def problem(B=1, T=100, H=2, HV=2, K=16, V=24, BT=16, seqlens=None, v_first=False, use_g=False,
            seed=0):
    rng = np.random.default_rng(seed)
    if seqlens:
        T = sum(seqlens)
    f32 = np.float32
    p = dict(k=(rng.standard_normal((B, T, H, K)) / math.sqrt(K)).astype(f32),
             w=(rng.standard_normal((B, T, HV, K)) / math.sqrt(K * BT)).astype(f32),
             u=rng.standard_normal((B, T, HV, V)).astype(f32))
    bounds = np.concatenate([[0], np.cumsum(seqlens)]) if seqlens else None
    starts = []
    for a, b in (zip(bounds[:-1], bounds[1:]) if seqlens else [(0, T)]):
        starts += [(t0, min(BT, b - t0)) for t0 in range(a, b, BT)]
    for name, shape in (("gk", (B, T, HV, K)), ("g", (B, T, HV))):
        decay = -rng.uniform(0.001, 1.0, shape) / math.log(2)
        gate = np.empty_like(decay)
        for t0, n in starts:
            gate[:, t0:t0 + n] = np.cumsum(decay[:, t0:t0 + n], axis=1)
        p[name] = gate.astype(f32)
    if not use_g:
        p["g"] = None
    N = len(seqlens) if seqlens else B
    state = (N, HV, V, K) if v_first else (N, HV, K, V)
    p["initial_state"] = rng.standard_normal(state).astype(f32)
    p["cu_seqlens"] = bounds.astype(np.int64) if seqlens else None
    return p, starts, bounds


def scan_float64(p, starts, bounds, v_first):
    """h, v_new, final_state in float64: the math of docs/design.md ("The state scans"), chunk
    by chunk from each sequence's initial state."""
    k, w, u, gk = (p[n].astype(np.float64) for n in ("k", "w", "u", "gk"))
    g = p["g"].astype(np.float64) if p["g"] is not None else None
    B, T, H, K = k.shape
    HV, V = w.shape[2], u.shape[3]
    S0 = p["initial_state"].astype(np.float64)
    if v_first:
        S0 = S0.swapaxes(-1, -2)
    group = HV // H
    h = np.zeros((B, len(starts), HV, K, V))
    v_new = np.zeros_like(u)
    final = S0.copy()  # a sequence of no tokens passes its initial state through
    seq_of = [int(np.searchsorted(bounds, t0, side="right")) - 1 if bounds is not None else 0
              for t0, _ in starts]
    for b in range(B):
        for hv in range(HV):
            S = {}
            for i, (t0, L) in enumerate(starts):
                n = seq_of[i] if bounds is not None else b
                state = S.setdefault(n, S0[n, hv].copy())
                rows, last = slice(t0, t0 + L), t0 + L - 1
                h[b, i, hv] = state
                v_new[b, rows, hv] = u[b, rows, hv] - w[b, rows, hv] @ state
                x = v_new[b, rows, hv]
                decay = np.exp2(gk[b, last, hv])
                if g is not None:
                    x = np.exp2(g[b, last, hv] - g[b, rows, hv])[:, None] * x
                    decay = decay * np.exp2(g[b, last, hv])
                S[n] = decay[:, None] * state + k[b, rows, hv // group].T @ x
            for n, state in S.items():
                final[n, hv] = state
    if v_first:
        h, final = h.swapaxes(-1, -2), final.swapaxes(-1, -2)
    return h, v_new, final


def chunk_indices_of(seqlens, BT):
    return np.array([(n, c) for n, L in enumerate(seqlens) for c in range(-(-L // BT))],
                    dtype=np.int64).reshape(-1, 2)


CASES = [
    pytest.param(dict(B=2, T=100, BT=16), id="fixed-B2-BT16"),
    pytest.param(dict(T=130, H=1, HV=3, K=20, V=36, BT=64, v_first=True), id="gva-vfirst-BT64"),
    pytest.param(dict(seqlens=[1, 33, 0, 47], BT=32), id="varlen-empty-and-length-1"),
    pytest.param(dict(B=2, T=70, BT=32, use_g=True), id="per-head-gate-g"),
]


@pytest.mark.parametrize("args", CASES)
def test_numpy_cpu_ref_and_cpu_against_float64(args):
    p, starts, bounds = problem(**args)
    v_first = args.get("v_first", False)
    BT = args.get("BT", 16)
    ref = scan_float64(p, starts, bounds, v_first)
    chunk_indices = chunk_indices_of(args["seqlens"], BT) if bounds is not None else None
    for backend, bar in (("cpu-ref", 1e-7), ("cpu", 1e-5)):  # float32 outputs: 1e-7 is rounding
        for indices in ([None, chunk_indices] if bounds is not None else [None]):
            out = fwd_h(p["k"], p["w"], p["u"], g=p["g"], gk=p["gk"],
                        initial_state=p["initial_state"], state_v_first=v_first,
                        cu_seqlens=p["cu_seqlens"], chunk_size=BT, chunk_indices=indices,
                        backend=backend)
            assert [o.shape for o in out] == [r.shape for r in ref]
            assert [o.dtype for o in out] == [np.float32] * 3
            for name, got, want in zip(("h", "v_new", "final_state"), out, ref):
                assert err_ratio(got, want) <= bar, (backend, name, err_ratio(got, want))


def test_fla_positional_order_and_switches():
    """fla's order (k, w, u, g, gk, initial_state, output_final_state, chunk_size,
    save_new_value, state_v_first, cu_seqlens): its two switches change nothing, every output is
    returned; without initial_state the scan starts from zero."""
    p, starts, bounds = problem(T=40, BT=16)
    a = fwd_h(p["k"], p["w"], p["u"], None, p["gk"], p["initial_state"], False, 16, True, False,
              None, backend="cpu")
    b = fwd_h(p["k"], p["w"], p["u"], None, p["gk"], p["initial_state"], True, 16, False, False,
              None, backend="cpu")
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    zero = dict(p, initial_state=np.zeros_like(p["initial_state"]))
    ref = scan_float64(zero, starts, bounds, False)
    out = fwd_h(p["k"], p["w"], p["u"], gk=p["gk"], chunk_size=16, backend="cpu-ref")
    for got, want in zip(out, ref):
        assert err_ratio(got, want) <= 1e-7


def test_torch_cpu_op_named_extents_bf16_and_fake():
    args = dict(seqlens=[5, 40, 1], BT=16, v_first=True, K=16, V=24)
    p, starts, bounds = problem(**args)
    t = {n: (torch.from_numpy(a) if a is not None else None) for n, a in p.items()}
    out = fwd_h(t["k"], t["w"], t["u"], gk=t["gk"], initial_state=t["initial_state"],
                state_v_first=True, cu_seqlens=t["cu_seqlens"], chunk_size=16, backend="cpu")
    NT = sum(-(-L // 16) for L in args["seqlens"])
    assert out[0].shape == (1, NT, 2, 24, 16) and out[2].shape == (3, 2, 24, 16)
    assert out[1].shape == t["u"].shape
    ref = scan_float64(p, starts, bounds, True)
    for got, want in zip(out, ref):
        assert err_ratio(got.numpy(), want) <= 1e-5
    # bfloat16 X (k, w, u; the gates and the initial state float32): h and v_new in X, within
    # the bf16 bar against the float64 scan of the rounded inputs.
    x = {n: t[n].bfloat16() for n in ("k", "w", "u")}
    rounded = dict(p, **{n: x[n].float().numpy() for n in x})
    ref16 = scan_float64(rounded, starts, bounds, True)
    out16 = fwd_h(x["k"], x["w"], x["u"], gk=t["gk"], initial_state=t["initial_state"],
                  state_v_first=True, cu_seqlens=t["cu_seqlens"], chunk_size=16, backend="cpu")
    assert [o.dtype for o in out16] == [torch.bfloat16, torch.bfloat16, torch.float32]
    for got, want in zip(out16, ref16):
        assert err_ratio(got.float().numpy(), want) <= 8e-3
    # Fake tensors (torch.compile's shape inference): the same shapes, from chunk_indices.
    from torch._subclasses.fake_tensor import FakeTensorMode

    chunk_indices = torch.from_numpy(chunk_indices_of(args["seqlens"], 16))
    with FakeTensorMode() as mode:
        fake = {n: (mode.from_tensor(v) if v is not None else None) for n, v in t.items()}
        fci = mode.from_tensor(chunk_indices)
        shapes = [o.shape for o in fwd_h(fake["k"], fake["w"], fake["u"], gk=fake["gk"],
                                         initial_state=fake["initial_state"],
                                         state_v_first=True, cu_seqlens=fake["cu_seqlens"],
                                         chunk_size=16, chunk_indices=fci, backend="cpu")]
    assert shapes == [o.shape for o in out]


def test_the_messages_name_k_the_first_tensor():
    p, _, _ = problem(T=40, BT=16)
    with pytest.raises(ValueError, match="chunk_size"):
        fwd_h(p["k"], p["w"], p["u"], gk=p["gk"], chunk_size=48, backend="cpu")
    with pytest.raises(TypeError,
                       match="argument 'w': expected dtype float32 \\(the dtype of k\\)"):
        fwd_h(p["k"], p["w"].astype(np.float16), p["u"], backend="cpu")
    with pytest.raises(TypeError, match="argument 'k': expected a numpy.ndarray like the other"):
        fwd_h(p["k"].tolist(), p["w"], p["u"], backend="cpu")
    t = {n: torch.from_numpy(p[n]) for n in ("k", "w", "u")}
    with pytest.raises(ValueError, match="argument 'w': is on meta but k is on cpu"):
        torch.ops.kda_kernels.chunk_gated_delta_rule_fwd_h(t["k"], t["w"].to("meta"), t["u"],
                                                             backend="cpu")
    with pytest.raises(TypeError, match="argument 'u': expected dtype float16, bfloat16 or "
                                        "float32 \\(the dtype of k\\), got torch.int8"):
        fwd_h(t["k"], t["w"], t["u"].to(torch.int8), backend="cpu")
