"""A training step of fla's KimiDeltaAttention layer (fla/layers/kda.py, its default settings:
gate and beta sigmoid in the kernel, l2norm in the kernel, V-first state) through fla's
chunk_kda, with fla's kernels and with kda_kernels' backend, on the installed fla (0.5.2 or
0.6.x; tools/run-tests.sh runs it once per release). The profiler counts the kernels each
backward launches: with our backend, fla's two Triton kernels we replace never run and ours run
once per layer backward (the WY and intra operators and our scans with
kda_kernels._layer.BACKWARD = "split"; the first pass, the scans, the fused epilogue and its
gate-parameter reduction with "epilogue" and with "auto", the default); every gradient (weights
and input) stays within the bf16 bar of fla's (twice it for A_log's and dt_bias's sums).
Needs torch, fla (with transformers, which fla's layers import), a CUDA device and the cuda
backend."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the fla tests need it)")
pytest.importorskip("fla", reason="flash-linear-attention (fla) is not installed")

import kda_kernels as kk  # noqa: E402
import kda_kernels.fla as kfla  # noqa: E402
from kda_testing import bar_beside_fla, err_ratio  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and kk.backend_available("cuda")),
    reason="needs a CUDA device and a libkda with the cuda backend",
)

# Kernel names as the profiler reports them: fla's Triton kernels for the two operators, and
# ours (C++ names in namespace kda::cuda; chunk_bwd_intra's in kda::cuda::intra,
# chunk_bwd_epilogue's in kda::cuda::epilogue, chunk_bwd_prep's in kda::cuda::prep, the state
# scans' in kda::cuda::scans, the WY operator's elsewhere).
FLA_KERNELS = {"wy": "chunk_kda_bwd_kernel_wy_dqkg_fused", "intra": "chunk_kda_bwd_kernel_intra"}
OUR_OPS = ("wy", "intra", "epilogue", "prep", "scans")
_NAMESPACES = {"intra": "kda::cuda::intra::", "epilogue": "kda::cuda::epilogue::",
               "prep": "kda::cuda::prep::", "scans": "kda::cuda::scans::"}


def _ours(name, op):
    if "kda::cuda::" not in name:
        return False
    which = next((o for o, ns in _NAMESPACES.items() if ns in name), "wy")
    return which == op


def _layer(seed=0):
    """fla's KimiDeltaAttention with its defaults (hidden 2048, 16 heads of 128), in bf16."""
    from fla_tuning import trim_fla_autotuners

    from fla.layers.kda import KimiDeltaAttention

    torch.manual_seed(seed)
    layer = KimiDeltaAttention().to(device="cuda", dtype=torch.bfloat16)
    trim_fla_autotuners()  # one config per fla kernel: correctness does not depend on tuning
    return layer


def _training_step(layer, x, do):
    """Forward and backward of one step; the gradients of the input and of every weight, and the
    CUDA kernels the backward launched, by name, with their counts."""
    from torch.profiler import ProfilerActivity, profile

    layer.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)
    o = layer(x)[0]
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        (o.float() * do).sum().backward()
        torch.cuda.synchronize()
    launches = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            launches[event.name] = launches.get(event.name, 0) + 1
    grads = {"x": x.grad.detach().clone()}
    grads.update({name: p.grad.detach().clone() for name, p in layer.named_parameters()
                  if p.grad is not None})
    return grads, launches


def _count(launches, fla_kernel=None, ours=None):
    """Launches of fla's kernel of that name, or of our kernels of operator `ours`."""
    if fla_kernel is not None:
        return sum(n for name, n in launches.items() if fla_kernel in name)
    return sum(n for name, n in launches.items() if _ours(name, ours))


# Our launches per layer backward, by chunk_kda's backward tail ("auto", the default, takes the
# epilogue here: bf16, heads of 128, one value head per query head). The first pass and the two
# scans are ours at this shape too (_layer's PREP and scans "auto"); the split tail takes fla's
# first pass and our scans.
EPILOGUE_LAUNCHES = {"wy": 0, "intra": 0, "epilogue": 2, "prep": 1, "scans": 2}
EXPECTED_OURS = {"split": {"wy": 1, "intra": 1, "epilogue": 0, "prep": 0, "scans": 2},
                 "epilogue": EPILOGUE_LAUNCHES, "auto": EPILOGUE_LAUNCHES}


@pytest.mark.parametrize("tail", sorted(EXPECTED_OURS))
def test_kimi_layer_training_step_runs_our_kernels(tail, monkeypatch):
    pytest.importorskip("transformers", reason="fla's layers import transformers")
    from kda_kernels import _layer as layer_module

    monkeypatch.setattr(layer_module, "BACKWARD", tail)
    layer = _layer()
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(2, 1024, layer.hidden_size, device="cuda", generator=gen,
                    dtype=torch.float32).to(torch.bfloat16)
    do = torch.randn(2, 1024, layer.hidden_size, device="cuda", generator=gen)

    kfla.disable()
    fla_grads, fla_launches = _training_step(layer, x, do)
    try:
        kfla.enable()
        our_grads, our_launches = _training_step(layer, x, do)
    finally:
        kfla.disable()
    ours = {op: _count(our_launches, ours=op) for op in OUR_OPS}
    theirs = {op: _count(our_launches, fla_kernel=name) for op, name in FLA_KERNELS.items()}
    without = {op: _count(fla_launches, fla_kernel=name) for op, name in FLA_KERNELS.items()}
    print(f"\n[KimiDeltaAttention, {tail}] backward launches with kda_kernels: ours {ours}, "
          f"fla's replaced kernels {theirs}; without: fla's {without}")
    # Without our backend fla's kernels run and ours do not (the counts observe the real path).
    assert without == {"wy": 1, "intra": 1}, fla_launches
    assert all(_count(fla_launches, ours=op) == 0 for op in OUR_OPS), fla_launches
    # With it: ours once per layer backward, none of the two fla kernels.
    assert ours == EXPECTED_OURS[tail], our_launches
    assert theirs == {"wy": 0, "intra": 0}, our_launches
    ratios = {n: err_ratio(our_grads[n].double().cpu().numpy(),
                           fla_grads[n].double().cpu().numpy()) for n in fla_grads}
    print(f"[KimiDeltaAttention, {tail}] gradient err_ratio, ours vs fla: "
          + " ".join(f"d{n}={r:.1e}" for n, r in sorted(ratios.items())))
    assert set(our_grads) == set(fla_grads)
    for name, ratio in ratios.items():
        bar = bar_beside_fla(name, "bfloat16")  # twice PASS_BAR for A_log's and dt_bias's sums
        assert ratio <= bar, f"d{name}: err_ratio {ratio:.2e}"
