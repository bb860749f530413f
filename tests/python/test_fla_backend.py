"""kda_kernels.fla's backend class without fla: the verifier's reasons and the backend function's
direct path (it calls the custom op's implementation, skipping torch's dispatcher), checked
against the public function on CPU tensors. Needs torch, not fla or a GPU; the registry and the
layer tests on the GPU are in test_fla.py."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import kda_kernels as kk  # noqa: E402
import kda_kernels.fla as kfla  # noqa: E402
from kda_testing import torch_problem  # noqa: E402


@pytest.fixture
def backend():
    return kfla._make_backend_class(object)()


def _fla_call(inputs, options):
    """The keywords fla's dispatch passes, in fla's order (state_v_first before cu_seqlens)."""
    return dict(inputs, scale=options.get("scale"),
                state_v_first=options.get("state_v_first", False),
                cu_seqlens=options.get("cu_seqlens"), chunk_size=options.get("chunk_size", 64),
                chunk_indices=options.get("chunk_indices"))


@pytest.mark.parametrize(
    "args",
    [
        dict(x="bfloat16", T=100, BT=32),
        dict(x="float16", h_dtype="x", beta_dtype="float32", T=64, BT=16, scale=0.3),
        dict(x="float32", seqlens=[1, 40, 64, 70], BT=32, HV=4, H=2),
        dict(x="float32", state_v_first=True, T=50, K=48, V=24, BT=16),
    ],
    ids=["bf16-tail", "fp16-hx-beta32-scale", "varlen-gva", "state-v-first"],
)
def test_backend_function_matches_the_public_function(backend, args):
    inputs, options = torch_problem(**args)
    want = kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options)
    got = backend.chunk_kda_bwd_wy_dqkg_fused(**_fla_call(inputs, options))
    assert len(got) == 6
    for name, a, b in zip(("dq", "dk", "dv", "db", "dg", "dA"), got, want):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert torch.equal(a, b), name


def test_backend_function_reports_bad_input_like_the_public_function(backend):
    inputs, options = torch_problem(x="float32", T=64, BT=32)
    inputs["A"] = inputs["A"][..., :16]  # A's last extent must be chunk_size
    with pytest.raises(ValueError, match="'A'") as direct:
        backend.chunk_kda_bwd_wy_dqkg_fused(**_fla_call(inputs, options))
    with pytest.raises(ValueError) as public:
        kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options)
    assert str(direct.value) == str(public.value)


def _verify(backend, **changes):
    inputs, options = torch_problem(x="bfloat16", T=64, BT=64)
    call = _fla_call(inputs, options)
    call.update(changes)
    return backend.chunk_kda_bwd_wy_dqkg_fused_verifier(**call)


def test_verifier_reasons(backend):
    """Every hand-back names what we lack; CPU tensors reach the device check last, so each
    earlier rule is seen on its own here."""
    inputs, _ = torch_problem(x="bfloat16", T=64, BT=64)
    cases = {
        "q has dtype float64": dict((n, inputs[n].double()) for n in
                                    ("q", "k", "v", "v_new", "A", "do", "dv")),
        "v has dtype float32, q has bfloat16": dict(v=inputs["v"].float()),
        "g has dtype bfloat16": dict(g=inputs["g"].bfloat16()),
        "beta has dtype float16": dict(beta=inputs["beta"].half()),
        "h, dh have dtypes float32, bfloat16": dict(dh=inputs["dh"].bfloat16()),
        "K=300": dict((n, torch.zeros(*inputs[n].shape[:3], 300, dtype=inputs[n].dtype))
                      for n in ("q", "k", "g")),
        "chunk_size=128": dict(chunk_size=128),
        "q is on cpu": {},
        "cu_seqlens is a list": dict(cu_seqlens=[0, 64]),
        "cu_seqlens is on meta, q on cpu": dict(cu_seqlens=torch.tensor([0, 64], device="meta")),
        "unknown arguments ['future']": dict(future=1),
    }
    for want, change in cases.items():
        ok, reason = _verify(backend, **change)
        assert not ok, want
        assert want in reason, (want, reason)
