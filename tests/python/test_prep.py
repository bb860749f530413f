"""chunk_kda_bwd_prep (chunk_bwd_prep, the backward's first pass) from Python on the CPU backends:
cpu-ref against an independent float64 NumPy implementation of its math, cpu against it, on NumPy
arrays (the C ABI) and on torch CPU tensors through the op; every activation option; garbage in
the entries of A and Aqk the operator must not read; the messages naming the argument."""

import math

import numpy as np
import pytest

import kda_kernels as kk

prep = kk.chunk_kda_bwd_prep

OUTPUTS = ("gk", "w", "u", "qg", "kg", "dv")


def err_ratio(x, ref):
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    return float(np.sqrt(np.mean((x - ref) ** 2)) / np.sqrt(np.mean(ref ** 2)))


def chunks_of(B, T, BT, seqlens):
    """(batch row, first token, length) of every chunk; chunks restart at every sequence."""
    if seqlens:
        bounds = np.concatenate([[0], np.cumsum(seqlens)])
        return [(0, t0, min(BT, b - t0)) for a, b in zip(bounds[:-1], bounds[1:])
                for t0 in range(a, b, BT)]
    return [(b, t0, min(BT, T - t0)) for b in range(B) for t0 in range(0, T, BT)]


def problem(B=1, T=100, H=2, HV=2, K=16, V=24, BT=16, seqlens=None, gate="none",
            beta_sigmoid=False, allow_neg_eigval=False, l2norm=True, seed=0):
    rng = np.random.default_rng(seed)
    if seqlens:
        B, T = 1, sum(seqlens)
    f32 = np.float32
    p = dict(q=rng.standard_normal((B, T, H, K)), k=rng.standard_normal((B, T, H, K)),
             v=rng.standard_normal((B, T, HV, V)), do=rng.standard_normal((B, T, HV, V)))
    p["g"] = (rng.standard_normal((B, T, HV, K)) if gate != "none"
              else -np.exp(np.log(1e-3) * rng.uniform(size=(B, T, HV, K))))
    p["beta"] = (rng.standard_normal((B, T, HV)) if beta_sigmoid
                 else 0.05 + 0.9 * rng.uniform(size=(B, T, HV)))
    p["A"] = 0.1 * rng.standard_normal((B, T, HV, BT))
    p["Aqk"] = 0.1 * rng.standard_normal((B, T, HV, BT))
    # A's unit diagonal, and garbage where the operator must not read (above the diagonal: every
    # column past a token's position in its chunk).
    for b, t0, L in chunks_of(B, T, BT, seqlens):
        for i in range(L):
            p["A"][b, t0 + i, :, i] = 1.0
            for name, bad in (("A", np.nan), ("Aqk", np.inf)):
                p[name][b, t0 + i, :, i + 1:] = bad
    p = {n: a.astype(f32) for n, a in p.items()}
    p["A_log"] = rng.uniform(0, 2, HV).astype(f32) if gate != "none" else None
    p["dt_bias"] = 0.5 * rng.standard_normal(HV * K).astype(f32) if gate != "none" else None
    p["cu_seqlens"] = (np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int64)
                       if seqlens else None)
    options = dict(chunk_size=BT, use_qk_l2norm_in_kernel=l2norm,
                   use_gate_in_kernel=gate != "none", use_beta_sigmoid_in_kernel=beta_sigmoid,
                   allow_neg_eigval=allow_neg_eigval,
                   lower_bound=-5.0 if gate == "lower_bound" else None)
    return p, options, chunks_of(B, T, BT, seqlens)


def softplus(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def prep_float64(p, o, chunks):
    """gk, w, u, qg, kg, dv in float64, chunk by chunk and value head (docs: the operator's
    table and its cpu-ref's header)."""
    x = {n: (a.astype(np.float64) if a is not None else None) for n, a in p.items()}
    B, T, H, K = x["q"].shape
    HV, V = x["v"].shape[2], x["v"].shape[3]
    out = dict(gk=np.zeros((B, T, HV, K)), w=np.zeros((B, T, HV, K)), u=np.zeros((B, T, HV, V)),
               qg=np.zeros((B, T, HV, K)), kg=np.zeros((B, T, HV, K)), dv=np.zeros((B, T, HV, V)))
    for b, t0, L in chunks:
        rows = slice(t0, t0 + L)
        for hv in range(HV):
            h = hv // (HV // H)
            gate = x["g"][b, rows, hv]
            if o["use_gate_in_kernel"]:
                raw = gate + (x["dt_bias"].reshape(HV, K)[hv] if x["dt_bias"] is not None else 0)
                s = math.exp(x["A_log"][hv]) if x["A_log"] is not None else 1.0
                gate = (o["lower_bound"] / (1 + np.exp(-s * raw)) if o["lower_bound"] is not None
                        else -s * softplus(raw))
            gk = np.cumsum(gate, axis=0) / math.log(2)
            beta = x["beta"][b, rows, hv]
            if o["use_beta_sigmoid_in_kernel"]:
                beta = (2 if o["allow_neg_eigval"] else 1) / (1 + np.exp(-beta))
            q, k = x["q"][b, rows, h], x["k"][b, rows, h]
            if o["use_qk_l2norm_in_kernel"]:
                q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6)
                k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
            A = np.tril(np.nan_to_num(x["A"][b, rows, hv, :L], nan=0.0, posinf=0.0))
            Aqk = np.tril(np.nan_to_num(x["Aqk"][b, rows, hv, :L], nan=0.0, posinf=0.0))
            out["gk"][b, rows, hv] = gk
            out["w"][b, rows, hv] = A @ (beta[:, None] * k * np.exp2(gk))
            out["u"][b, rows, hv] = A @ (beta[:, None] * x["v"][b, rows, hv])
            out["qg"][b, rows, hv] = q * np.exp2(gk)
            out["kg"][b, rows, hv] = k * np.exp2(gk[-1] - gk)
            out["dv"][b, rows, hv] = Aqk.T @ x["do"][b, rows, hv]
    return [out[n] for n in OUTPUTS]


def call(p, o, backend, **changes):
    args = dict(p, **changes)
    return prep(args["q"], args["k"], args["v"], args["g"], args["beta"], args["A"],
                args["Aqk"], args["do"], A_log=args["A_log"], dt_bias=args["dt_bias"],
                cu_seqlens=args["cu_seqlens"], backend=backend, **o)


CASES = [
    pytest.param(dict(B=2, T=100, BT=16), id="fixed-no-gate-BT16"),
    pytest.param(dict(T=130, H=1, HV=2, K=37, V=20, BT=64, gate="softplus", beta_sigmoid=True),
                 id="gva-softplus-sigmoid-BT64"),
    pytest.param(dict(seqlens=[1, 33, 0, 47], BT=32, gate="lower_bound", beta_sigmoid=True,
                      allow_neg_eigval=True, l2norm=False),
                 id="varlen-lower-bound-neg-eigval-no-l2norm"),
    pytest.param(dict(B=1, T=0, BT=16), id="no-tokens"),
]


@pytest.mark.parametrize("args", CASES)
def test_numpy_cpu_ref_and_cpu_against_float64(args):
    p, o, chunks = problem(**args)
    ref = prep_float64(p, o, chunks)
    for backend, bar in (("cpu-ref", 1e-6), ("cpu", 1e-5)):
        out = call(p, o, backend)
        assert [x.shape for x in out] == [r.shape for r in ref]
        assert [x.dtype for x in out] == [np.float32] * 6
        if not ref[0].size:
            continue
        for name, got, want in zip(OUTPUTS, out, ref):
            assert np.isfinite(got).all(), (backend, name)
            assert err_ratio(got, want) <= bar, (backend, name, err_ratio(got, want))


def test_chunk_indices_change_nothing():
    p, o, _ = problem(seqlens=[5, 40, 1], BT=16, gate="softplus")
    indices = np.array([(n, c) for n, L in enumerate([5, 40, 1]) for c in range(-(-L // 16))],
                       dtype=np.int64)
    a = call(p, o, "cpu-ref")
    b = prep(p["q"], p["k"], p["v"], p["g"], p["beta"], p["A"], p["Aqk"], p["do"],
             A_log=p["A_log"], dt_bias=p["dt_bias"], cu_seqlens=p["cu_seqlens"],
             chunk_indices=indices, backend="cpu-ref", **o)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_torch_cpu_op_bf16():
    torch = pytest.importorskip("torch")
    p, o, chunks = problem(seqlens=[5, 40, 1], BT=16, gate="softplus", beta_sigmoid=True)
    t = {n: (torch.from_numpy(a) if a is not None else None) for n, a in p.items()}
    out = call(t, o, "cpu")
    ref = prep_float64(p, o, chunks)
    for name, got, want in zip(OUTPUTS, out, ref):
        assert got.dtype == torch.float32
        assert err_ratio(got.numpy(), want) <= 1e-5, name
    # bfloat16 X (q, k, v, A, Aqk, do; g, beta and the gate parameters float32): gk in float32,
    # the others in X, within the bf16 bar against the float64 math of the rounded inputs.
    x = {n: t[n].bfloat16() for n in ("q", "k", "v", "A", "Aqk", "do")}
    rounded = dict(p, **{n: x[n].float().numpy() for n in x})
    out16 = call(dict(t, **x), o, "cpu")
    assert [a.dtype for a in out16] == [torch.float32] + [torch.bfloat16] * 5
    for name, got, want in zip(OUTPUTS, out16, prep_float64(rounded, o, chunks)):
        assert err_ratio(got.float().numpy(), want) <= 8e-3, name


def test_the_messages_name_the_argument():
    p, o, _ = problem(T=40, BT=16, gate="softplus")
    with pytest.raises(ValueError, match="argument 'A': expected last extent == chunk_size = 32"):
        call(p, dict(o, chunk_size=32), "cpu")
    with pytest.raises(ValueError, match="argument 'Aqk': expected last extent == chunk_size"):
        call(p, o, "cpu", Aqk=p["Aqk"][..., :8].copy())
    with pytest.raises(ValueError, match="argument 'A_log': given without use_gate_in_kernel"):
        call(p, dict(o, use_gate_in_kernel=False), "cpu")
    with pytest.raises(ValueError, match="argument 'lower_bound': expected a negative number"):
        call(p, dict(o, lower_bound=0.5), "cpu")
    with pytest.raises(ValueError, match="argument 'allow_neg_eigval'"):
        call(p, dict(o, allow_neg_eigval=True), "cpu")
    with pytest.raises(ValueError, match="argument 'do': expected"):
        call(p, o, "cpu", do=p["do"][..., :5].copy())
    with pytest.raises(TypeError,
                       match="argument 'Aqk': expected dtype float32 \\(the dtype of q\\)"):
        call(p, o, "cpu", Aqk=p["Aqk"].astype(np.float16))
