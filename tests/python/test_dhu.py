"""chunk_gated_delta_rule_bwd_dhu (chunk_bwd_dhu, the reverse state scan) from Python on the CPU
backends: cpu-ref against an independent float64 NumPy scan, cpu against cpu-ref, on NumPy
arrays and on torch CPU tensors through the compiled op; the outputs' named extents (chunk
count, sequence count, state orientation) on every path, fake tensors included; and the
device-cu_seqlens rule's message."""

import math

import numpy as np
import pytest

import kda_kernels as kk

torch = pytest.importorskip("torch")

dhu = kk.chunk_gated_delta_rule_bwd_dhu


def err_ratio(x, ref):
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    return float(np.sqrt(np.mean((x - ref) ** 2)) / np.sqrt(np.mean(ref ** 2)))


def problem(B=1, T=100, H=2, HV=2, K=16, V=24, BT=16, seqlens=None, v_first=False, seed=0):
    rng = np.random.default_rng(seed)
    if seqlens:
        T = sum(seqlens)
    f32 = np.float32
    p = dict(q=rng.standard_normal((B, T, H, K)).astype(f32),
             k=(rng.standard_normal((B, T, H, K)) / math.sqrt(K)).astype(f32),
             w=(rng.standard_normal((B, T, HV, K)) / math.sqrt(K * BT)).astype(f32),
             do=rng.standard_normal((B, T, HV, V)).astype(f32),
             dv=rng.standard_normal((B, T, HV, V)).astype(f32))
    bounds = np.concatenate([[0], np.cumsum(seqlens)]) if seqlens else None
    starts = []
    for a, b in (zip(bounds[:-1], bounds[1:]) if seqlens else [(0, T)]):
        starts += [(t0, min(BT, b - t0)) for t0 in range(a, b, BT)]
    decay = -rng.uniform(0.001, 1.0, (B, T, HV, K)) / math.log(2)
    gk = np.empty_like(decay)
    for t0, n in starts:
        gk[:, t0:t0 + n] = np.cumsum(decay[:, t0:t0 + n], axis=1)
    p["gk"] = gk.astype(f32)
    N = len(seqlens) if seqlens else B
    p["dht"] = rng.standard_normal((N, HV, V, K) if v_first else (N, HV, K, V)).astype(f32)
    p["cu_seqlens"] = bounds.astype(np.int64) if seqlens else None
    return p, starts, bounds


def scan_float64(p, starts, bounds, scale, v_first):
    """dh, dh0, dv2 in float64 with the per-channel gate: the math of docs/design.md."""
    q, k, w, do, dv, gk = (p[n].astype(np.float64) for n in ("q", "k", "w", "do", "dv", "gk"))
    B, T, H, K = q.shape
    HV, V = w.shape[2], do.shape[3]
    dht = p["dht"].astype(np.float64)
    if v_first:
        dht = dht.swapaxes(-1, -2)
    group = HV // H
    dh = np.zeros((B, len(starts), HV, K, V))
    dv2 = dv.copy()
    dh0 = dht.copy()  # a sequence of no tokens passes dht through
    seq_of = [int(np.searchsorted(bounds, t0, side="right")) - 1 if bounds is not None else 0
              for t0, _ in starts]
    for b in range(B):
        for hv in range(HV):
            h = hv // group
            D = {}
            for i in reversed(range(len(starts))):
                n = seq_of[i] if bounds is not None else b
                S = D.setdefault(n, dht[n, hv].copy())
                t0, L = starts[i]
                dh[b, i, hv] = S
                rows = slice(t0, t0 + L)
                dv2[b, rows, hv] = dv[b, rows, hv] + k[b, rows, h] @ S
                D[n] = (np.exp2(gk[b, t0 + L - 1, hv])[:, None] * S
                        + scale * q[b, rows, h].T @ do[b, rows, hv]
                        - w[b, rows, hv].T @ dv2[b, rows, hv])
            for n, S in D.items():
                dh0[n, hv] = S
    if v_first:
        dh, dh0 = dh.swapaxes(-1, -2), dh0.swapaxes(-1, -2)
    return dh, dh0, dv2


CASES = [
    pytest.param(dict(B=2, T=100, BT=16), id="fixed-B2-BT16"),
    pytest.param(dict(T=130, H=1, HV=3, K=20, V=36, BT=64, v_first=True), id="gva-vfirst-BT64"),
    pytest.param(dict(seqlens=[1, 33, 0, 47], BT=32), id="varlen-empty-and-length-1"),
]


@pytest.mark.parametrize("args", CASES)
def test_numpy_cpu_ref_and_cpu_against_float64(args):
    p, starts, bounds = problem(**args)
    v_first = args.get("v_first", False)
    BT = args.get("BT", 16)
    scale = 0.7
    ref = scan_float64(p, starts, bounds, scale, v_first)
    chunk_indices = None
    if bounds is not None:
        chunk_indices = np.array([(n, c) for n, L in enumerate(args["seqlens"])
                                  for c in range(-(-L // BT))], dtype=np.int64)
    for backend, bar in (("cpu-ref", 1e-7), ("cpu", 1e-5)):  # float32 outputs: 1e-7 is rounding
        for indices in ([None, chunk_indices] if bounds is not None else [None]):
            out = dhu(p["q"], p["k"], p["w"], p["do"], p["dv"], gk=p["gk"], dht=p["dht"],
                      scale=scale, state_v_first=v_first, cu_seqlens=p["cu_seqlens"],
                      chunk_size=BT, chunk_indices=indices, backend=backend)
            assert [o.shape for o in out] == [r.shape for r in ref]
            for name, got, want in zip(("dh", "dh0", "dv2"), out, ref):
                assert err_ratio(got, want) <= bar, (backend, name, err_ratio(got, want))


def test_torch_cpu_op_named_extents_and_fake():
    args = dict(seqlens=[5, 40, 1], BT=16, v_first=True, K=16, V=24)
    p, starts, bounds = problem(**args)
    t = {n: (torch.from_numpy(a) if a is not None else None) for n, a in p.items()}
    out = dhu(t["q"], t["k"], t["w"], t["do"], t["dv"], gk=t["gk"], dht=t["dht"],
              state_v_first=True, cu_seqlens=t["cu_seqlens"], chunk_size=16, backend="cpu")
    NT = sum(-(-L // 16) for L in args["seqlens"])
    assert out[0].shape == (1, NT, 2, 24, 16) and out[1].shape == (3, 2, 24, 16)
    ref = scan_float64(p, starts, bounds, 16 ** -0.5, True)
    for got, want in zip(out, ref):
        assert err_ratio(got.numpy(), want) <= 1e-5
    # Fake tensors (torch.compile's shape inference): the same shapes, from chunk_indices.
    from torch._subclasses.fake_tensor import FakeTensorMode

    chunk_indices = torch.tensor([(n, c) for n, L in enumerate(args["seqlens"])
                                  for c in range(-(-L // 16))])
    with FakeTensorMode() as mode:
        fake = {n: (mode.from_tensor(v) if v is not None else None) for n, v in t.items()}
        fci = mode.from_tensor(chunk_indices)
        shapes = [o.shape for o in dhu(fake["q"], fake["k"], fake["w"], fake["do"], fake["dv"],
                                       gk=fake["gk"], dht=fake["dht"], state_v_first=True,
                                       cu_seqlens=fake["cu_seqlens"], chunk_size=16,
                                       chunk_indices=fci, backend="cpu")]
    assert shapes == [o.shape for o in out]


def test_wrong_chunk_count_is_refused_naming_dh():
    p, _, _ = problem(T=40, BT=16)
    with pytest.raises(ValueError, match="chunk_size"):
        dhu(p["q"], p["k"], p["w"], p["do"], p["dv"], gk=p["gk"], chunk_size=48, backend="cpu")
