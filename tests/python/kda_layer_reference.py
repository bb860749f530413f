"""A whole KDA layer in float64 torch, token by token, as ../shared/SPEC-chunk-kda.md writes it
(l2norm, both gate forms, the beta sigmoid, the recurrence; varlen, GVA, state_v_first): the
oracle of the random-shape tests of kda_kernels.chunk_kda, differentiated by torch's autograd.
The C++ layer reference (src/ops/chunk_kda/layer_reference.cpp) is the one the golden files
check; this one serves shapes no file holds."""

import torch
import torch.nn.functional as F


def activations(q, k, g, beta, *, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, lower_bound=None,
                A_log=None, dt_bias=None):
    """q, k, g (natural-log decay) and beta as the recurrence reads them."""
    if use_qk_l2norm_in_kernel:
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    if use_gate_in_kernel:
        HV, K = g.shape[-2:]
        x = g if dt_bias is None else g + dt_bias.view(HV, K)
        if lower_bound is not None:
            amplitude = 1.0 if A_log is None else torch.exp(A_log).view(HV, 1)
            g = lower_bound * torch.sigmoid(amplitude * x)
        else:
            g = -torch.exp(A_log).view(HV, 1) * F.softplus(x)
    if use_beta_sigmoid_in_kernel:
        beta = torch.sigmoid(beta) * (2.0 if allow_neg_eigval else 1.0)
    return q, k, g, beta


def recurrence(q, k, v, g, beta, scale, initial_state=None, state_v_first=False):
    """One sequence: q, k [T, H, K]; v [T, HV, V]; g [T, HV, K]; beta [T, HV]; initial_state
    [HV, K, V] ([HV, V, K] when state_v_first). Returns o [T, HV, V] and the final state (same
    layout as the initial one)."""
    T, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    heads = torch.arange(HV, device=q.device) // (HV // H)  # GVA: value head -> q/k head
    if initial_state is None:
        S = q.new_zeros(HV, K, V)
    else:
        S = initial_state.transpose(-1, -2) if state_v_first else initial_state
    outputs = []
    for t in range(T):
        qt, kt = q[t, heads], k[t, heads]  # [HV, K]
        S = torch.exp(g[t]).unsqueeze(-1) * S
        error = v[t] - torch.einsum("hkv,hk->hv", S, kt)
        S = S + beta[t].view(HV, 1, 1) * kt.unsqueeze(-1) * error.unsqueeze(1)
        outputs.append(scale * torch.einsum("hkv,hk->hv", S, qt))
    o = torch.stack(outputs) if outputs else v.new_zeros(0, HV, V)
    return o, (S.transpose(-1, -2) if state_v_first else S)


def chunk_kda_reference(q, k, v, g, beta, scale=None, initial_state=None, cu_seqlens=None,
                        state_v_first=False, **activation_options):
    """(o [B, T, HV, V], final_state [N, HV, ...]) of the layer, differentiable in every input."""
    if scale is None:
        scale = q.shape[-1] ** -0.5
    q, k, g, beta = activations(q, k, g, beta, **activation_options)
    B, T = q.shape[:2]
    if cu_seqlens is None:
        spans = [(b, 0, T) for b in range(B)]
    else:
        bounds = cu_seqlens.tolist()
        spans = [(0, bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]
    outputs, states = [], []
    for n, (b, start, end) in enumerate(spans):
        h0 = None if initial_state is None else initial_state[n]
        o, S = recurrence(q[b, start:end], k[b, start:end], v[b, start:end], g[b, start:end],
                          beta[b, start:end], scale, h0, state_v_first)
        outputs.append(o)
        states.append(S)
    if cu_seqlens is None:
        o = torch.stack(outputs)
    else:
        o = torch.cat(outputs).unsqueeze(0)
    return o, torch.stack(states)
