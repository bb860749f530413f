"""The backward's first pass against the fla stages it stands in for, in one process on one GPU:
chunk_bwd_prep (kda_kernels' chunk_kda_bwd_prep) against fla's gate cumsum, l2norm of q and k,
beta sigmoid, recompute_w_u_fwd and chunk_kda_bwd_dAv run one after another:

    python3 bench/prep.py [--shapes 1x8192x32,mix32] [--calls default,kimi] [--reps 50]
                          [--fla-autotune]

For each shape (B x T x H, HV = H, K = V = 128, bfloat16, chunks of 64) and call ("default": g
the per-token log decay, l2norm in the kernel; "kimi": the gate in the kernel with lower_bound
-5, the beta sigmoid, l2norm): the median device time of ours and of fla's five or six kernels
together (CUDA events behind a spin kernel, bench/measure.py), our byte floor (every input byte
once, every output byte once, at the measured copy bandwidth) and, at fixed-length shapes, each
output's err_ratio = rms(x - ref) / rms(ref) against the same math in float64 on the GPU (the
math of src/ops/chunk_bwd_prep/reference.cpp). fla's kernels run their first config unless
--fla-autotune. Akk and Aqk are random (Akk unit lower triangular): the pass is the same
arithmetic whatever their values (Akk is zero above its diagonal, as the forward stores it).
"mix32" is the issues' varlen mix at H = 32.
"""

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import DeviceTimer, copy_bandwidth  # noqa: E402
# The scans bench's sizes, its shapes ("BxTxH" or "mixH": the issues' varlen mix) and error.
from scans import BT, K, V, chunk_starts, err_ratio, shape_of, varlen_indices  # noqa: E402

LOWER_BOUND = -5.0
OUTPUTS = ("gk", "w", "u", "qg", "kg", "dv")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="1x8192x32,mix32")
    p.add_argument("--calls", default="default,kimi")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--fla-autotune", action="store_true")
    return p.parse_args(argv)


def problem(B, T, seqlens, H, kimi, device, seed=0):
    """The pass's inputs: the layer's raw q, k, v, g, beta (A_log, dt_bias with the gate in the
    kernel), the forward's Akk and Aqk, do, and the index tensors."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)

    def randn(*shape, scale=1.0, dtype=torch.bfloat16):
        return (torch.randn(*shape, generator=gen, device=device) * scale).to(dtype)

    p = dict(q=randn(B, T, H, K), k=randn(B, T, H, K), v=randn(B, T, H, V), do=randn(B, T, H, V))
    if kimi:
        p["g"] = randn(B, T, H, K)
        p["beta"] = randn(B, T, H)
        p["A_log"] = torch.rand(H, generator=gen, device=device) * 2
        p["dt_bias"] = randn(H * K, scale=0.5, dtype=torch.float32)
    else:
        p["g"] = (-torch.rand(B, T, H, K, generator=gen, device=device) * 0.3).to(torch.bfloat16)
        p["beta"] = torch.rand(B, T, H, generator=gen, device=device).to(torch.bfloat16)
        p["A_log"] = p["dt_bias"] = None
    _, _, lens = chunk_starts(T, seqlens)  # each token's place in its chunk:
    pos = torch.cat([torch.arange(n, device=device) for n in lens])
    # Akk as the forward stores it: unit lower triangular, zero above the diagonal (fla's
    # recompute reads every column of a row; ours reads the lower triangle only).
    col = torch.arange(BT, device=device)[None, :]
    akk = torch.randn(B, T, H, BT, generator=gen, device=device) * 0.1
    akk = torch.where((col < pos[:, None])[None, :, None, :], akk, 0.0)
    p["A"] = torch.where((col == pos[:, None])[None, :, None, :], 1.0, akk).to(torch.bfloat16)
    p["Aqk"] = randn(B, T, H, BT, scale=0.1)
    p["cu_seqlens"], p["chunk_indices"] = varlen_indices(seqlens, device, torch.int64)
    return p


def prep_float64(p, kimi):
    """gk, w, u, qg, kg, dv of a fixed-length problem (T a multiple of BT) in float64."""
    f = {n: (t.double() if t is not None and t.is_floating_point() else t) for n, t in p.items()}
    B, T, H, _ = f["q"].shape
    NC = T // BT

    def chunks(x):  # [B, T, H, ...] -> [B, NC, BT, H, ...]
        return x.reshape(B, NC, BT, *x.shape[2:])

    g = f["g"]
    if kimi:
        x = g + f["dt_bias"].view(H, K)
        g = LOWER_BOUND * torch.sigmoid(torch.exp(f["A_log"])[:, None] * x)
    G = chunks(g).cumsum(2)
    beta = torch.sigmoid(f["beta"]) if kimi else f["beta"]
    beta = chunks(beta)[..., None]

    def l2norm(x):
        return x / (x.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt()

    q, k = chunks(l2norm(f["q"])), chunks(l2norm(f["k"]))
    v, do = chunks(f["v"]), chunks(f["do"])
    tril = torch.ones(BT, BT, dtype=torch.float64, device=q.device).tril()
    A = chunks(f["A"]) * tril[None, None, :, None, :]      # [B, NC, i, H, j]
    Aqk = chunks(f["Aqk"]) * tril[None, None, :, None, :]
    E = G.exp()
    w = torch.einsum("bnihj,bnjhk->bnihk", A, beta * k * E)
    u = torch.einsum("bnihj,bnjhv->bnihv", A, beta * v)
    qg = q * E
    kg = k * (G[:, :, -1:] - G).exp()
    dv = torch.einsum("bnihj,bnihv->bnjhv", Aqk, do)
    out = (G / math.log(2), w, u, qg, kg, dv)
    return tuple(x.reshape(B, T, *x.shape[3:]) for x in out)


def run_ours(p, kimi, backend="cuda"):
    """gk, w, u, qg, kg, dv by kda_kernels' chunk_kda_bwd_prep."""
    from kda_kernels import _torch_op

    return _torch_op.OPS["chunk_kda_bwd_prep"].run(
        p["q"], p["k"], p["v"], p["g"], p["beta"], p["A"], p["Aqk"], p["do"], p["A_log"],
        p["dt_bias"], p["cu_seqlens"], BT, p["chunk_indices"], True, kimi, kimi, False,
        LOWER_BOUND if kimi else None, backend, "auto")


def engines(p, kimi):
    """(name, closure returning gk, w, u, qg, kg, dv) for ours and fla's stages."""
    from kda_kernels import _fla_pieces

    f = _fla_pieces.load()
    cu, ci = p["cu_seqlens"], p["chunk_indices"]
    scale = K ** -0.5

    def kda():
        return run_ours(p, kimi)

    def fla():
        qn, _ = f.l2norm_fwd(p["q"])
        kn, _ = f.l2norm_fwd(p["k"])
        if kimi:
            gk = f.kda_gate_chunk_cumsum(g=p["g"], A_log=p["A_log"], dt_bias=p["dt_bias"],
                                         scale=f.RCP_LN2, chunk_size=BT, cu_seqlens=cu,
                                         chunk_indices=ci, lower_bound=LOWER_BOUND)
            beta = f.fused_beta_sigmoid(p["beta"], scale=1.0)
        else:
            gk = f.chunk_local_cumsum(p["g"], scale=f.RCP_LN2, chunk_size=BT, cu_seqlens=cu,
                                      chunk_indices=ci)
            beta = p["beta"]
        w, u, qg, kg = f.recompute_w_u_fwd(q=qn, k=kn, v=p["v"], beta=beta, A=p["A"], gk=gk,
                                           cu_seqlens=cu, chunk_indices=ci)
        _, dv = f.chunk_kda_bwd_dAv(q=qn, k=kn, v=p["v"], do=p["do"], A=p["Aqk"], scale=scale,
                                    cu_seqlens=cu, chunk_size=BT, chunk_indices=ci)
        return gk, w, u, qg, kg, dv

    return (("kda", kda), ("fla", fla))


def floor_bytes(p):
    """Our pass's bytes: every input once, every output once."""
    inputs = sum(t.numel() * t.element_size() for n, t in p.items()
                 if t is not None and n not in ("cu_seqlens", "chunk_indices"))
    B, T, H, _ = p["q"].shape
    outputs = B * T * H * (K * 4 + 3 * K * 2 + 2 * V * 2)
    return inputs + outputs


def main(argv=None):
    args = parse_args(argv)
    device = torch.device("cuda")
    if not args.fla_autotune:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
        from kda_kernels import _fla_pieces
        from fla_tuning import trim_fla_autotuners

        _fla_pieces.load()
        trim_fla_autotuners()
    timer = DeviceTimer(device, log=lambda m: print(m, flush=True))
    bandwidth = copy_bandwidth(device)
    print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s; fla "
          f"{'autotuned here' if args.fla_autotune else 'first config'}", flush=True)
    rows = []
    for text in args.shapes.split(","):
        B, seqlens, H = shape_of(text)
        T = sum(seqlens) if seqlens else 8192
        for call in args.calls.split(","):
            kimi = call == "kimi"
            p = problem(B, T, seqlens, H, kimi, device)
            ref = None if seqlens or T % BT else prep_float64(p, kimi)
            floor_us = floor_bytes(p) / bandwidth * 1e6
            for name, fn in engines(p, kimi):
                out = fn()
                errs = ([(n, err_ratio(x, r)) for n, x, r in zip(OUTPUTS, out, ref)]
                        if ref is not None else [])
                t = timer.measure([fn], args.reps, args.warmup)
                rows.append((text, call, name, t["median_us"], floor_us, errs))
                print(f"{text} {call} {name}: {t['median_us']:.1f} us, floor {floor_us:.1f} us, "
                      + ", ".join(f"err {n} {e:.2e}" for n, e in errs), flush=True)
    print("\n| shape | call | engine | median µs | floor µs | % of floor | err_ratio |")
    print("|---|---|---|---|---|---|---|")
    for shape, call, name, us, floor, errs in rows:
        err = ", ".join(f"{n} {e:.1e}" for n, e in errs) or "-"
        print(f"| {shape} | {call} | {name} | {us:.1f} | {floor:.1f} | {100 * floor / us:.0f}% "
              f"| {err} |")


if __name__ == "__main__":
    main()
