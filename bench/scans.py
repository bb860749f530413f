"""The state scans against fla's, in one process on one GPU: chunk_bwd_dhu (the reverse scan)
against fla's chunk_gated_delta_rule_bwd_dhu and chunk_fwd_h (the forward scan) against fla's
chunk_gated_delta_rule_fwd_h:

    python3 bench/scans.py [--scans dhu,fwd_h] [--shapes 1x8192x32,4x8192x32,mix32] [--reps 50]
                           [--fla-autotune]

For each scan, shape (B x T x H, K = V = 128, bfloat16, chunks of 64, the KDA call: per-channel
gate gk; the reverse scan with dht, the forward one with an initial state) and state layout
(K-first, and V-first as the Kimi layer keeps it): the median device time of ours and of fla's
Triton kernel (CUDA events behind a spin kernel, bench/measure.py), the byte floor (every input
byte the kernel needs and every output byte once, at the measured copy bandwidth; of gk only the
chunks' last rows) and each output's err_ratio = rms(x - ref) / rms(ref) against a float64 scan
on the GPU (the math of src/ops/chunk_bwd_dhu/reference.cpp and src/ops/chunk_fwd_h/
reference.cpp). fla's kernels run their first config unless --fla-autotune (then they autotune
in this process first). "mix32" is the issues' varlen mix (1300, 547, 2048, 963, 271, 3063
tokens) at H = 32.
"""

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import DeviceTimer, copy_bandwidth  # noqa: E402

MIX = (1300, 547, 2048, 963, 271, 3063)
BT, K, V = 64, 128, 128


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scans", default="dhu,fwd_h")
    p.add_argument("--shapes", default="1x8192x32,mix32")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--fla-autotune", action="store_true")
    return p.parse_args(argv)


def shape_of(text):
    """(B, seqlens or None, H) from "BxTxH" or "mixH"."""
    if text.startswith("mix"):
        return 1, MIX, int(text[3:])
    B, T, H = (int(x) for x in text.split("x"))
    return B, None, H


def chunk_starts(T, seqlens):
    """(sequence bounds, chunk start tokens, chunk lengths) of a batch row."""
    bounds = [0]
    for n in (seqlens or [T]):
        bounds.append(bounds[-1] + n)
    starts, lens = [], []
    for a, b in zip(bounds, bounds[1:]):
        for t0 in range(a, b, BT):
            starts.append(t0)
            lens.append(min(BT, b - t0))
    return bounds, starts, lens


def varlen_indices(seqlens, device, dtype=torch.int32):
    """cu_seqlens and chunk_indices of packed sequences of these lengths (None, None without)."""
    if not seqlens:
        return None, None
    bounds, _, _ = chunk_starts(sum(seqlens), seqlens)
    cu = torch.tensor(bounds, dtype=dtype, device=device)
    ci = torch.tensor([(i, c) for i, n in enumerate(seqlens) for c in range(-(-n // BT))],
                      dtype=dtype, device=device)
    return cu, ci


def problem(B, T, seqlens, H, v_first, device, seed=0):
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)

    def randn(*shape, scale=1.0, dtype=torch.bfloat16):
        return (torch.randn(*shape, generator=gen, device=device) * scale).to(dtype)

    q = randn(B, T, H, K, scale=K ** -0.5)
    k = randn(B, T, H, K, scale=K ** -0.5)
    w = randn(B, T, H, K, scale=K ** -0.5)
    do, dv = randn(B, T, H, V), randn(B, T, H, V)
    _, starts, lens = chunk_starts(T, seqlens)
    decay = -torch.rand(B, T, H, K, generator=gen, device=device) * 1.4427  # log2 per token
    gk = torch.empty_like(decay)
    for t0, n in zip(starts, lens):
        gk[:, t0:t0 + n] = decay[:, t0:t0 + n].cumsum(1)
    N = len(seqlens) if seqlens else B
    dht = randn(N, H, V, K, dtype=torch.float32) if v_first else randn(N, H, K, V,
                                                                          dtype=torch.float32)
    u = randn(B, T, H, V)
    cu, ci = varlen_indices(seqlens, device)
    return dict(q=q, k=k, w=w, do=do, dv=dv, u=u, gk=gk, dht=dht, cu_seqlens=cu,
                chunk_indices=ci)


def reverse_scan_float64(p, B, T, seqlens, scale, v_first):
    """dh, dh0, dv2 of the reverse scan in float64 (the cpu-ref's math), batched over heads."""
    f = {n: (t.double() if t is not None and t.is_floating_point() else t) for n, t in p.items()}
    q, k, w, do, dv, gk = f["q"], f["k"], f["w"], f["do"], f["dv"], f["gk"]
    dht = f["dht"].transpose(-1, -2) if v_first else f["dht"]
    bounds, starts, lens = chunk_starts(T, seqlens)
    H = q.shape[2]
    NT = len(starts)
    dh = torch.empty(B, NT, H, K, V, dtype=torch.float64, device=q.device)
    dv2 = torch.empty_like(dv)
    N = len(bounds) - 1 if seqlens else B
    dh0 = torch.empty(N, H, K, V, dtype=torch.float64, device=q.device)
    seq_of = [sum(1 for b in bounds[1:] if b <= t0) for t0 in starts]
    rows = range(B) if not seqlens else [0]
    for b in rows:
        D = {}
        for i in reversed(range(NT)):
            n = seq_of[i] if seqlens else b
            if n not in D:
                D[n] = dht[n].clone()  # [H, K, V]
            t0, L = starts[i], lens[i]
            S = D[n]
            dh[b, i] = S
            sl = slice(t0, t0 + L)
            x = torch.einsum("thk,hkv->thv", k[b, sl], S)
            dv2[b, sl] = dv[b, sl] + x
            decay = torch.exp2(gk[b, t0 + L - 1])  # [H, K]
            D[n] = (decay[..., None] * S + scale * torch.einsum("thk,thv->hkv", q[b, sl], do[b, sl])
                    - torch.einsum("thk,thv->hkv", w[b, sl], dv2[b, sl]))
        for n, S in D.items():
            dh0[n] = S
    if v_first:
        dh, dh0 = dh.transpose(-1, -2), dh0.transpose(-1, -2)
    return dh, dh0, dv2


def forward_scan_float64(p, B, T, seqlens, v_first):
    """h, v_new, final_state of the forward scan in float64, batched over heads; the initial
    state is p["dht"] (a state of the same shape)."""
    f = {n: (t.double() if t is not None and t.is_floating_point() else t) for n, t in p.items()}
    k, w, u, gk = f["k"], f["w"], f["u"], f["gk"]
    h0 = f["dht"].transpose(-1, -2) if v_first else f["dht"]
    bounds, starts, lens = chunk_starts(T, seqlens)
    H = k.shape[2]
    NT = len(starts)
    h = torch.empty(B, NT, H, K, V, dtype=torch.float64, device=k.device)
    v_new = torch.empty_like(u)
    final = h0.clone()
    seq_of = [sum(1 for b in bounds[1:] if b <= t0) for t0 in starts]
    for b in (range(B) if not seqlens else [0]):
        S = {}
        for i in range(NT):
            n = seq_of[i] if seqlens else b
            if n not in S:
                S[n] = h0[n].clone()
            t0, L = starts[i], lens[i]
            h[b, i] = S[n]
            sl = slice(t0, t0 + L)
            v_new[b, sl] = u[b, sl] - torch.einsum("thk,hkv->thv", w[b, sl], S[n])
            decay = torch.exp2(gk[b, t0 + L - 1])
            S[n] = decay[..., None] * S[n] + torch.einsum("thk,thv->hkv", k[b, sl], v_new[b, sl])
        for n, state in S.items():
            final[n] = state
    if v_first:
        h, final = h.transpose(-1, -2), final.transpose(-1, -2)
    return h, v_new, final


def err_ratio(x, ref):
    diff = (x.double() - ref).pow(2).mean().sqrt()
    return (diff / ref.pow(2).mean().sqrt()).item()


def main(argv=None):
    args = parse_args(argv)
    device = torch.device("cuda")
    from kda_kernels import _torch_op
    from fla.ops.common import chunk_delta_h

    def unwrapped(fn):
        return getattr(fn, "__wrapped__", fn)

    scans = args.scans.split(",")
    kernels = {"dhu": chunk_delta_h.chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64,
               "fwd_h": chunk_delta_h.chunk_gated_delta_rule_fwd_kernel_h_blockdim64}
    for tuner in kernels.values():
        if not args.fla_autotune and hasattr(tuner, "configs"):
            tuner.configs = tuner.configs[:1]
    fla_dhu = unwrapped(chunk_delta_h.chunk_gated_delta_rule_bwd_dhu)
    fla_fwd_h = unwrapped(chunk_delta_h.chunk_gated_delta_rule_fwd_h)
    ours_dhu = _torch_op.OPS["chunk_gated_delta_rule_bwd_dhu"].run
    ours_fwd_h = _torch_op.OPS["chunk_gated_delta_rule_fwd_h"].run
    timer = DeviceTimer(device, log=lambda m: print(m, flush=True))
    bandwidth = copy_bandwidth(device)
    print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s; fla "
          f"{'autotuned here' if args.fla_autotune else 'first config'}", flush=True)
    rows = []
    for text in args.shapes.split(","):
        B, seqlens, H = shape_of(text)
        T = sum(seqlens) if seqlens else 8192
        scale = K ** -0.5
        for v_first in (False, True):
            p = problem(B, T, seqlens, H, v_first, device)
            cu, ci = p["cu_seqlens"], p["chunk_indices"]
            NT = ci.shape[0] if seqlens else B * math.ceil(T / BT)
            N = len(seqlens) if seqlens else B
            states = NT * H * K * V * 2 + 2 * N * H * K * V * 4
            gk_last = NT * H * K * 4
            for scan in scans:
                if scan == "dhu":
                    ref = reverse_scan_float64(p, B, T, seqlens, scale, v_first)
                    floor_bytes = B * T * H * (3 * K * 2 + 3 * V * 2) + gk_last + states
                    h0 = torch.empty_like(p["dht"])
                    engines = (
                        ("kda", lambda: ours_dhu(p["q"], p["k"], p["w"], p["do"], p["dv"], None,
                                                 p["gk"], None, p["dht"], scale, v_first, cu, BT,
                                                 ci, "cuda", "auto")),
                        ("fla", lambda: fla_dhu(q=p["q"], k=p["k"], w=p["w"], do=p["do"],
                                                dv=p["dv"], gk=p["gk"], h0=h0, dht=p["dht"],
                                                scale=scale, state_v_first=v_first,
                                                cu_seqlens=cu, chunk_size=BT,
                                                chunk_indices=ci)))
                    names = ("dh", "dh0", "dv2")
                else:
                    ref = forward_scan_float64(p, B, T, seqlens, v_first)
                    floor_bytes = B * T * H * (2 * K * 2 + 2 * V * 2) + gk_last + states
                    engines = (
                        ("kda", lambda: ours_fwd_h(p["k"], p["w"], p["u"], None, p["gk"],
                                                   p["dht"], True, BT, True, v_first, cu, ci,
                                                   "cuda", "auto")),
                        ("fla", lambda: fla_fwd_h(k=p["k"], w=p["w"], u=p["u"], gk=p["gk"],
                                                  initial_state=p["dht"],
                                                  output_final_state=True, chunk_size=BT,
                                                  state_v_first=v_first, cu_seqlens=cu,
                                                  chunk_indices=ci)))
                    names = ("h", "v_new", "final_state")
                for name, fn in engines:
                    out = fn()
                    if scan == "fwd_h":
                        out = (out[0], out[1], out[2])
                    errs = [err_ratio(x, r) for x, r in zip(out, ref)]
                    t = timer.measure([fn], args.reps, args.warmup)
                    row = (scan, text, "V-first" if v_first else "K-first", name, t["median_us"],
                           floor_bytes / bandwidth * 1e6, list(zip(names, errs)))
                    rows.append(row)
                    print(f"{scan} {text} {row[2]} {name}: {row[4]:.1f} us, floor {row[5]:.1f} us, "
                          + ", ".join(f"err {n} {e:.2e}" for n, e in row[6]), flush=True)
    print("\n| scan | shape | state | engine | median µs | floor µs | % of floor | err_ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for scan, shape, layout, name, us, floor, errs in rows:
        err = ", ".join(f"{n} {e:.1e}" for n, e in errs)
        print(f"| {scan} | {shape} | {layout} | {name} | {us:.1f} | {floor:.1f} | "
              f"{100 * floor / us:.0f}% | {err} |")


if __name__ == "__main__":
    main()
