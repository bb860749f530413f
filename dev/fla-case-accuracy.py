"""One case of fla's tests/ops/test_kda.py::test_chunk_varlen (same construction and seed), run
through fla's chunk_kda with fla's kernels, with our WY operator only, our intra operator only and
both, every gradient's err_ratio against a float64 token recurrence (and against fla's own float32
reference, the one fla's test compares with): which stage moves which gradient, and whether ours
is further from float64 than fla's or only further from fla's float32 reference.

    PYTHONPATH=<fla>:python:tests/python python3 dev/fla-case-accuracy.py [--mask-p 0.9] [--D 64]

Needs a GPU, fla and a libkda with the cuda backend."""

import argparse

import torch
import torch.nn.functional as F


def recurrence64(q, k, v, g, beta, h0, cu, A_log, dt_bias):
    """o and the final states of fla's test case in float64: gate in kernel
    (g <- -exp(A_log) * softplus(g + dt_bias)), no l2norm (the test normalises q outside),
    S <- diag(exp g_t) S; S <- S + beta_t k_t (v_t - S^T k_t); o_t = scale S^T q_t."""
    H, D = q.shape[2], q.shape[3]
    scale = D ** -0.5
    g = -A_log.view(1, 1, H, 1).exp() * F.softplus(g + dt_bias.view(1, 1, H, D))
    outs, finals = [], []
    for n in range(len(cu) - 1):
        S = h0[n]  # [H, K, V]
        for t in range(int(cu[n]), int(cu[n + 1])):
            S = S * g[0, t].exp().unsqueeze(-1)
            kt, vt = k[0, t], v[0, t]
            pred = torch.einsum("hk,hkv->hv", kt, S)
            S = S + beta[0, t].view(H, 1, 1) * kt.unsqueeze(-1) * (vt - pred).unsqueeze(1)
            outs.append(scale * torch.einsum("hk,hkv->hv", q[0, t], S))
        finals.append(S)
    return torch.stack(outs).unsqueeze(0), torch.stack(finals)


def err_ratio(ref, x):
    ref, x = ref.double(), x.double()
    return ((x - ref).square().mean().sqrt() / (ref.square().mean().sqrt() + 1e-30)).item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mask-p", type=float, default=0.9)
    parser.add_argument("--D", type=int, default=64)
    parser.add_argument("--H", type=int, default=4)
    parser.add_argument("--cu", default="0,256,500,1000")
    parser.add_argument("--dtype", default="float16")
    args = parser.parse_args()

    from fla.ops.kda import chunk_kda
    from fla.ops.kda.gate import naive_kda_gate
    from fla.ops.kda.naive import naive_recurrent_kda
    from fla_tuning import trim_fla_autotuners

    import kda_kernels.fla as kfla

    device, dtype, H, D, mask_p = "cuda", getattr(torch, args.dtype), args.H, args.D, args.mask_p
    torch.manual_seed(42)
    cu = torch.LongTensor([int(x) for x in args.cu.split(",")]).to(device)
    T, N = int(cu[-1]), len(cu) - 1
    # The draws in the test's order, on the test's devices (CPU first, moved after).
    q = torch.randn((1, T, H, D), dtype=dtype)
    k = F.normalize(torch.randn(1, T, H, D, dtype=torch.float32), p=2, dim=-1).to(dtype)
    v = torch.randn((1, T, H, D), dtype=dtype)
    g = torch.randn(1, T, H, D, dtype=dtype)
    A_log = torch.log(torch.randn(1, 1, H, 1, dtype=torch.float32, device=device).uniform_(1, 16))
    dt_bias = torch.randn(H * D, dtype=torch.float32, device=device)
    mask = torch.rand_like(g) > mask_p
    g = g * mask + (~mask) * (-1000)
    beta = torch.rand(1, T, H, dtype=dtype).sigmoid()
    h0 = torch.randn((N, H, D, D), dtype=torch.float32)
    q, k, v, g, beta, h0 = (x.to(device) for x in (q, k, v, g, beta, h0))
    do = torch.randn_like(v)
    dht = torch.rand_like(h0)
    leaves = dict(q=q, k=k, v=v, g=g, beta=beta, h0=h0, A_log=A_log, dt_bias=dt_bias)

    def grads_of(loss_fn, cast):
        xs = {n: t.detach().to(cast(t)).requires_grad_() for n, t in leaves.items()}
        loss = loss_fn(xs)
        loss.backward()
        return {n: x.grad.detach() for n, x in xs.items()}

    def ref64(xs):
        o, ht = recurrence64(F.normalize(xs["q"], p=2, dim=-1), xs["k"], xs["v"], xs["g"],
                             xs["beta"], xs["h0"], cu.tolist(), xs["A_log"], xs["dt_bias"])
        return (o * do.double()).sum() + (ht * dht.double()).sum()

    def ref32(xs):
        total = 0
        for i in range(N):
            s = slice(int(cu[i]), int(cu[i + 1]))
            o, ht = naive_recurrent_kda(
                q=F.normalize(xs["q"][:, s], p=2, dim=-1), k=xs["k"][:, s], v=xs["v"][:, s],
                beta=xs["beta"][:, s],
                g=naive_kda_gate(xs["g"][:, s].float(), xs["A_log"].float(), xs["dt_bias"].float()),
                initial_state=xs["h0"][i], output_final_state=True)
            total = total + (o * do[:, s]).sum() + (ht * dht[i]).sum()
        return total

    def tri(xs):
        o, ht = chunk_kda(q=F.normalize(xs["q"], p=2, dim=-1), k=xs["k"], v=xs["v"], g=xs["g"],
                         beta=xs["beta"], A_log=xs["A_log"], dt_bias=xs["dt_bias"],
                         initial_state=xs["h0"], output_final_state=True, cu_seqlens=cu,
                         use_gate_in_kernel=True, chunk_size=64)
        return (o * do).sum() + (ht * dht).sum()

    exact = grads_of(ref64, lambda t: torch.float64)
    fla_ref = grads_of(ref32, lambda t: t.dtype)
    trim_fla_autotuners()
    rows = {"fla's float32 reference": fla_ref}
    for mode, ops in (("fla", None), ("ours: wy", ("chunk_kda_bwd_wy_dqkg_fused",)),
                      ("ours: intra", ("chunk_kda_bwd_intra",)), ("ours: both", ())):
        kfla.disable()
        if ops is not None:
            kfla.enable(ops=ops or None)
        rows[mode] = grads_of(tri, lambda t: t.dtype)
        trim_fla_autotuners()
    kfla.disable()
    names = list(leaves)
    print(f"case: H={H} D={D} mask_p={mask_p} cu={cu.tolist()} {args.dtype}, gate in kernel")
    print("err_ratio against float64 (and, after /, against fla's float32 reference)")
    print(f"| {'run':24} | " + " | ".join(f"d{n:7}" for n in names) + " |")
    for mode, grads in rows.items():
        cells = [f"{err_ratio(exact[n], grads[n]):.1e}/{err_ratio(fla_ref[n], grads[n]):.1e}"
                 for n in names]
        print(f"| {mode:24} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
