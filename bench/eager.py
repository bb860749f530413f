"""A batched PyTorch eager implementation of chunk_kda_bwd_wy_dqkg_fused (SPEC.md steps 1-12),
the baseline SPEC's performance section quotes (~1720 µs at the model shape on an H200).

Every (batch row, chunk, value head) unit is computed at once with batched matmuls in float32
(inputs widened once; TF32 is left to torch's default, which is off for matmul). Fixed length
only, with T a multiple of BT and h / dh stored [.., K, V]; GVA is handled by repeating q and k.
"""

import torch


def _chunked(x, B, NT, BT):
    """[B, T, heads, d] -> [B, NT, heads, BT, d] in float32."""
    heads, d = x.shape[2], x.shape[3]
    return x.float().view(B, NT, BT, heads, d).transpose(2, 3)


def _unchunked(x, B, T):
    """[B, NT, heads, BT, d] -> [B, T, heads, d] (contiguous)."""
    B_, NT, heads, BT, d = x.shape
    return x.transpose(2, 3).reshape(B, T, heads, d)


def chunk_kda_bwd_wy_dqkg_eager(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, chunk_size):
    B, T, H, K = q.shape
    HV = v.shape[2]
    BT = chunk_size
    if T % BT:
        raise ValueError(f"eager baseline: T={T} is not a multiple of BT={BT}")
    NT = T // BT
    group = HV // H

    Q = _chunked(q, B, NT, BT)                                  # [B, NT, H, BT, K]
    Kk = _chunked(k, B, NT, BT)
    if group > 1:
        Q = Q.repeat_interleave(group, dim=2)                   # [B, NT, HV, BT, K]
        Kk = Kk.repeat_interleave(group, dim=2)
    Vv = _chunked(v, B, NT, BT)                                 # [B, NT, HV, BT, V]
    Vn = _chunked(v_new, B, NT, BT)
    dO = _chunked(do, B, NT, BT)
    dV = _chunked(dv, B, NT, BT)
    G = _chunked(g, B, NT, BT)                                  # [B, NT, HV, BT, K]
    Abar = _chunked(A, B, NT, BT)                               # [B, NT, HV, BT(i), BT(j)]
    beta_c = beta.float().view(B, NT, BT, HV).transpose(2, 3)   # [B, NT, HV, BT]
    bcol = beta_c.unsqueeze(-1)                                 # β scaling rows
    S = h.float()                                               # [B, NT, HV, K, V]
    dS = dh.float()

    E = torch.exp2(G)
    gn = G[..., -1:, :]                                         # [B, NT, HV, 1, K]
    St = S.transpose(-1, -2)                                    # [.., V, K]
    At = Abar.transpose(-1, -2)                                 # Āᵀ

    dQ = (dO @ St) * E * scale                                  # 1
    dK0 = (Vn @ dS.transpose(-1, -2)) * torch.exp2(gn - G)      # 2
    dW = -(dV @ St)                                             # 3
    dvb = At @ dV                                               # 4
    dv_out = bcol * dvb
    KG = Kk * E                                                 # 5
    dkgb = At @ dW
    db = (dvb * Vv).sum(-1) + (dkgb * KG).sum(-1)               # 6
    dk = dK0 + dkgb * E * bcol                                  # 7
    dgk = torch.exp2(gn[..., 0, :]) * (S * dS).sum(-1) + (Kk * dK0).sum(-2)  # 8: [.., K]
    dg = Q * dQ - Kk * dK0 + KG * dkgb * bcol                   # 9
    dg[..., -1, :] += dgk
    lower = torch.ones(BT, BT, dtype=torch.bool, device=q.device).tril(-1)  # i > j
    D = dV @ Vv.transpose(-1, -2) + dW @ KG.transpose(-1, -2)   # 11
    X = (D * beta_c.unsqueeze(-2)).masked_fill(~lower, 0.0)     # X[i][j] = D[i][j] β[j], i > j
    dA = -(At @ X @ At).masked_fill(~lower, 0.0)                # 12

    return (
        _unchunked(dQ, B, T),                                   # 10: dq = dQ
        _unchunked(dk, B, T),
        _unchunked(dv_out, B, T).to(v.dtype),
        db.view(B, NT, HV, BT).transpose(2, 3).reshape(B, T, HV),
        _unchunked(dg, B, T),
        _unchunked(dA, B, T),
    )
