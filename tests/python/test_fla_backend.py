"""kda_kernels.fla's backend class without fla, for both operators: the verifiers' reasons, the
backend functions' direct path (they call the custom ops' implementations, skipping torch's
dispatcher), checked against the public functions on CPU tensors, and the probe that asks the
library which operators have a CUDA kernel. Needs torch, not fla or a GPU; the registry and the
layer tests on the GPU are in test_fla.py."""

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import kda_kernels as kk  # noqa: E402
import kda_kernels.fla as kfla  # noqa: E402
from kda_kernels import _fla_release, _signatures  # noqa: E402

# The operators fla dispatches (chunk_kda_bwd_epilogue has no fla counterpart).
STAGE_SIGNATURES = [s for s in _signatures.SIGNATURES if s.fla_name in kfla.STAGES]
from kda_testing import (INTRA_OUTPUT_NAMES, record_calls, torch_intra_problem,  # noqa: E402
                         torch_problem)


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
        "use_graph is 1, not a bool": dict(use_graph=1),
        "chunk_offsets is a list, not a torch.Tensor": dict(chunk_offsets=[0, 1]),
    }
    for want, change in cases.items():
        ok, reason = _verify(backend, **change)
        assert not ok, want
        assert want in reason, (want, reason)


def test_fla_06_keywords_pass_to_the_same_results(backend):
    """fla 0.6's keywords (chunk_offsets, use_graph; lower_bound for intra) change nothing we
    compute: the verifiers get past them (to the device check, the CPU tensors' only reason
    left) and the functions give the public functions' results."""
    inputs, options = torch_problem(x="float32", T=64, BT=32)
    extra = dict(chunk_offsets=torch.zeros(2, dtype=torch.int64), use_graph=True)
    assert _verify(backend, **extra)[1].startswith("q is on cpu")
    got = backend.chunk_kda_bwd_wy_dqkg_fused(**_fla_call(inputs, options), **extra)
    for a, b in zip(got, kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options)):
        assert torch.equal(a, b)
    inputs, options = torch_intra_problem(x="float32", T=64, BT=32, safe_gate=True)
    extra = dict(lower_bound=-5.0, use_graph=True)
    assert _verify_intra(backend, **extra)[1].startswith("q is on cpu")
    got = backend.chunk_kda_bwd_intra(**_fla_intra_call(inputs, options), **extra)
    for a, b in zip(got, kk.chunk_kda_bwd_intra(**inputs, **options)):
        assert torch.equal(a, b)


def test_backend_drops_chunk_indices_without_cu_seqlens(backend):
    """fla's kernels ignore chunk_indices when cu_seqlens is None; libkda refuses the pair, so
    the backend functions drop it."""
    inputs, options = torch_problem(x="float32", T=64, BT=32)
    call = dict(_fla_call(inputs, options), chunk_indices=torch.zeros(2, 2, dtype=torch.int64))
    for a, b in zip(backend.chunk_kda_bwd_wy_dqkg_fused(**call),
                    kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options)):
        assert torch.equal(a, b)


# --- chunk_kda_bwd_intra -------------------------------------------------------------------


def _fla_intra_call(inputs, options):
    """The keywords fla's chunk_kda_bwd passes to chunk_kda_bwd_intra."""
    return dict(inputs, cu_seqlens=options.get("cu_seqlens"),
                chunk_size=options.get("chunk_size", 64),
                chunk_indices=options.get("chunk_indices"),
                safe_gate=options.get("safe_gate", False))


@pytest.mark.parametrize(
    "args",
    [
        dict(x="bfloat16", T=100, BT=32),
        dict(x="float16", beta_dtype="float32", T=64, BT=16, safe_gate=True),
        dict(x="float32", seqlens=[1, 40, 64, 70], BT=32, HV=4, H=2),
        dict(x="float32", T=50, K=48, BT=64),
    ],
    ids=["bf16-tail", "fp16-beta32-safe", "varlen-gva", "fp32-K48"],
)
def test_intra_backend_function_matches_the_public_function(backend, args):
    inputs, options = torch_intra_problem(**args)
    want = kk.chunk_kda_bwd_intra(**inputs, **options)
    got = backend.chunk_kda_bwd_intra(**_fla_intra_call(inputs, options))
    assert len(got) == 4
    for name, a, b in zip(INTRA_OUTPUT_NAMES, got, want):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert torch.equal(a, b), name


def test_intra_backend_drops_chunk_indices_without_cu_seqlens(backend):
    inputs, options = torch_intra_problem(x="float32", T=64, BT=32)
    call = dict(_fla_intra_call(inputs, options),
                chunk_indices=torch.zeros(2, 2, dtype=torch.int64))
    for a, b in zip(backend.chunk_kda_bwd_intra(**call),
                    kk.chunk_kda_bwd_intra(**inputs, **options)):
        assert torch.equal(a, b)


def test_intra_backend_function_reports_bad_input_like_the_public_function(backend):
    inputs, options = torch_intra_problem(x="float32", T=64, BT=32)
    inputs["dAkk"] = inputs["dAkk"][..., :16]  # dAkk's last extent must be chunk_size
    with pytest.raises(ValueError, match="'dAkk'") as direct:
        backend.chunk_kda_bwd_intra(**_fla_intra_call(inputs, options))
    with pytest.raises(ValueError) as public:
        kk.chunk_kda_bwd_intra(**inputs, **options)
    assert str(direct.value) == str(public.value)


def _verify_intra(backend, **changes):
    inputs, options = torch_intra_problem(x="bfloat16", T=64, BT=64)
    call = _fla_intra_call(inputs, options)
    call.update(changes)
    return backend.chunk_kda_bwd_intra_verifier(**call)


def test_intra_verifier_reasons(backend):
    """Every hand-back names what we lack; CPU tensors reach the device check, and the check
    that the library has the operator's CUDA kernel comes after it."""
    inputs, _ = torch_intra_problem(x="bfloat16", T=64, BT=64)
    cases = {
        "q has dtype float64": dict(q=inputs["q"].double(), k=inputs["k"].double()),
        "k has dtype float32, q has bfloat16": dict(k=inputs["k"].float()),
        "g has dtype bfloat16; kda_kernels needs float32": dict(g=inputs["g"].bfloat16()),
        "dAqk has dtype float16": dict(dAqk=inputs["dAqk"].half()),
        "dq has dtype bfloat16; kda_kernels needs float32": dict(dq=inputs["dq"].bfloat16()),
        "db has dtype float64": dict(db=inputs["db"].double()),
        "beta has dtype float16; kda_kernels needs bfloat16 or float32":
            dict(beta=inputs["beta"].half()),
        "K=300": dict((n, torch.zeros(*inputs[n].shape[:3], 300, dtype=inputs[n].dtype))
                      for n in ("q", "k", "g", "dq", "dk", "dg")),
        "chunk_size=128": dict(chunk_size=128),
        "chunk_size=8": dict(chunk_size=8),
        "q is on cpu": {},
        "cu_seqlens is a list": dict(cu_seqlens=[0, 64]),
        "chunk_indices is on meta, q on cpu": dict(chunk_indices=torch.zeros(1, 2, device="meta")),
        "unknown arguments ['future']": dict(future=1),
        "use_graph is 'yes', not a bool": dict(use_graph="yes"),
        "lower_bound is a str, not a number": dict(lower_bound="-5"),
    }
    for want, change in cases.items():
        ok, reason = _verify_intra(backend, **change)
        assert not ok, want
        assert want in reason, (want, reason)
    # beta in float32 with bf16 q/k is supported: the only reason left is the device.
    assert _verify_intra(backend, beta=inputs["beta"].float())[1].startswith("q is on cpu")


def _as_cuda(tensors):
    """Stand-ins for CUDA tensors (dtype, shape, device), so that the checks after the device
    check run on a machine without a GPU."""
    cuda = torch.device("cuda", 0)
    return {n: SimpleNamespace(dtype=t.dtype, shape=t.shape, device=cuda)
            for n, t in tensors.items()}


@pytest.mark.parametrize("sig", STAGE_SIGNATURES, ids=lambda s: s.op_name)
def test_verifier_hands_back_an_operator_without_a_cuda_kernel(monkeypatch, sig):
    if sig.fla_name == "chunk_kda_bwd_intra":
        inputs, _ = torch_intra_problem(x="bfloat16", T=64, BT=64)
    else:
        inputs, _ = torch_problem(x="bfloat16", T=64, BT=64)
    tensors = _as_cuda(inputs)

    def reason():
        return kfla._unsupported_reason(sig.fla_name, tensors, 64, None, None)

    monkeypatch.setattr(kfla, "CUDA_KERNELS", {})
    assert "was not probed" in reason()
    monkeypatch.setattr(kfla, "CUDA_KERNELS", {sig.fla_name: False})
    monkeypatch.setattr(kfla, "CUDA_KERNEL_NOTES", {sig.fla_name: "no kernel yet"})
    assert reason() == f"the loaded libkda has no CUDA kernel for {sig.fla_name} (no kernel yet)"
    monkeypatch.setattr(kfla, "CUDA_KERNELS", {sig.fla_name: True})
    assert reason() is None


@pytest.mark.parametrize("sig", STAGE_SIGNATURES, ids=lambda s: s.op_name)
def test_probe_problems_are_valid(sig):
    """The tiny problems enable() runs on the GPU pass validation (here on the cpu backend):
    a refusal of the probe can then only mean the library lacks the kernel."""
    from kda_kernels import _torch_op

    args = list(kfla._probe_arguments(sig.fla_name, "cpu"))
    args[-2] = "cpu"
    outputs = _torch_op.OPS[sig.fla_name].run(*args)
    assert len(outputs) == len(sig.outputs)


def test_probe_records_what_the_library_refuses(monkeypatch):
    from kda_kernels import _torch_op

    ran = []

    def accepts(*args):
        ran.append("wy")

    def refuses(*args):
        ran.append("intra")
        raise NotImplementedError("chunk_kda_bwd_intra: no CUDA kernel for it yet")

    monkeypatch.setattr(_torch_op.OPS["chunk_kda_bwd_wy_dqkg_fused"], "run", accepts)
    monkeypatch.setattr(_torch_op.OPS["chunk_kda_bwd_intra"], "run", refuses)
    monkeypatch.setattr(_torch_op.OPS[DHU], "run", lambda *args: ran.append("dhu"))
    monkeypatch.setattr(kfla, "CUDA_KERNELS", {})
    monkeypatch.setattr(kfla, "CUDA_KERNEL_NOTES", {})
    found = kfla.probe_cuda_kernels("cpu")
    assert ran == ["wy", "intra", "dhu"]
    assert found == {"chunk_kda_bwd_wy_dqkg_fused": True, "chunk_kda_bwd_intra": False,
                     DHU: True}
    assert kfla.CUDA_KERNEL_NOTES == {
        "chunk_kda_bwd_intra": "chunk_kda_bwd_intra: no CUDA kernel for it yet"}


def _standins(tensors, cuda=True, index=0, changes=()):
    """Stand-ins for tensors on cuda:`index` (or the CPU): what the verifiers read (dtype,
    shape, device, is_cuda, get_device()). `changes` maps names to (dtype, last extent, device
    index) replacements, any of them None to keep."""
    out = {}
    for name, t in tensors.items():
        dtype, last, where = dict(changes).get(name, (None, None, None))
        at = index if where is None else where
        shape = t.shape if last is None else (*t.shape[:-1], last)
        device = torch.device("cuda", at) if cuda else torch.device("cpu")
        out[name] = SimpleNamespace(dtype=dtype or t.dtype, shape=shape, device=device,
                                    is_cuda=cuda, get_device=(lambda at=at: at) if cuda
                                    else (lambda: -1))
    return out


@pytest.mark.parametrize("single_device", (False, True), ids=("devices", "one-device"))
@pytest.mark.parametrize("sig", STAGE_SIGNATURES, ids=lambda s: s.op_name)
def test_fast_acceptance_agrees_with_the_reasons(monkeypatch, sig, single_device):
    """The verifiers' fast path accepts only what _unsupported_reason accepts, and does accept
    the common calls (every X, beta and h dtype it takes), so that they never pay for the
    slower path. With one visible device (single_device) it reads no device index: tensors on
    another index cannot occur then, and are left out."""
    wy = sig.fla_name == "chunk_kda_bwd_wy_dqkg_fused"
    make = torch_problem if wy else torch_intra_problem
    monkeypatch.setattr(kfla, "CUDA_KERNELS", {sig.fla_name: True})
    accept = kfla._accepting_check(single_device=single_device)
    names = [a.name for a in sig.inputs]
    variants, must_accept = [], []
    for x in ("float16", "bfloat16", "float32"):
        for beta in (None, "float32"):
            for h in (("float32", "x") if wy else ("float32",)):
                extra = dict(h_dtype=h) if wy else {}
                inputs, _ = make(x=x, beta_dtype=beta, T=64, BT=64, **extra)
                variants.append((inputs, ()))
                must_accept.append(len(variants) - 1)
    inputs, _ = make(x="bfloat16", T=64, BT=64)
    f16, f64 = torch.float16, torch.float64
    for name in names:
        variants += [(inputs, ((name, (f16, None, None)),)), (inputs, ((name, (f64, None, None)),))]
        if not single_device:
            variants += [(inputs, ((name, (None, None, 1)),))]
    variants += [(inputs, (("q", (None, 300, None)),))]
    if wy:
        variants += [(inputs, (("v", (None, 300, None)),))]
    for i, (tensors, changes) in enumerate(variants):
        for cuda in (True, False):
            for chunk_size in (64, 128):
                standins = _standins(tensors, cuda=cuda, changes=changes)
                fast = accept(sig.fla_name, tuple(standins[n] for n in names), chunk_size,
                              None, None)
                reason = kfla._unsupported_reason(sig.fla_name, standins, chunk_size, None, None)
                assert not fast or reason is None, (changes, cuda, chunk_size, reason)
                if i in must_accept and cuda and chunk_size == 64:
                    assert fast, (i, reason)
    # Index tensors on another device, or not tensors at all, are for the slower path.
    standins = _standins(inputs)
    args = (sig.fla_name, tuple(standins[n] for n in names), 64)
    assert accept(*args, None, None)
    assert not accept(*args, [0, 64], None)
    assert not accept(*args, None, torch.zeros(1, 2))  # a CPU tensor


def test_reverse_scan_verifier(monkeypatch):
    """chunk_gated_delta_rule_bwd_dhu's verifier takes fla's KDA call (qg, kg, w, do, dv in X, gk
    and dht in float32) on CUDA stand-ins and hands back, naming why, a bfloat16 gk, an h0 of
    another dtype, CPU tensors, a chunk size we have no kernel for and unknown keywords."""
    monkeypatch.setattr(kfla, "CUDA_KERNELS", {DHU: True})
    backend = kfla._make_backend_class(base_class=object)()
    x = torch.zeros(1, 64, 2, 32, dtype=torch.bfloat16)
    tensors = dict(q=x, k=x, w=x, do=x, dv=x, gk=x.float(), dht=torch.zeros(1, 2, 32, 32),
                   h0=torch.zeros(1, 2, 32, 32, dtype=torch.bfloat16))
    ok = _standins(tensors)
    assert backend.chunk_gated_delta_rule_bwd_dhu_verifier(**ok, chunk_size=64) == (True, None)
    cases = [
        (dict(_standins(tensors, changes=[("gk", (torch.bfloat16, None, None))])), {},
         "gk has dtype bfloat16; kda_kernels needs float32"),
        (dict(_standins(tensors, changes=[("h0", (torch.float16, None, None))])), {},
         "h0 has dtype float16; kda_kernels needs bfloat16 or float32"),
        (dict(_standins(tensors, cuda=False)), {}, "on cpu"),
        (ok, dict(chunk_size=128), "chunk_size=128"),
        (ok, dict(extra=1), "unknown arguments ['extra']"),
    ]
    for standins, options, why in cases:
        accepted, reason = backend.chunk_gated_delta_rule_bwd_dhu_verifier(
            **standins, **{"chunk_size": 64, **options})
        assert not accepted and why in reason, (why, reason)

def test_fast_acceptance_reads_one_device_by_default(monkeypatch):
    """The verifiers' default: the one-device path where torch sees exactly one CUDA device,
    the index comparisons otherwise (and always the one-device path on CPU tensors, which
    bench/host_cost.py times)."""
    seen = []
    monkeypatch.setattr(kfla, "CUDA_KERNELS", {"chunk_kda_bwd_intra": True})
    inputs, _ = torch_intra_problem(x="bfloat16", T=64, BT=64)
    names = [a.name for a in _signatures.BY_FLA_NAME["chunk_kda_bwd_intra"].inputs]
    for count in (1, 2):
        monkeypatch.setattr(torch.cuda, "device_count", lambda count=count: count)
        accept = kfla._accepting_check()
        # q on cuda:0, the others on cuda:1: only the index comparison refuses it.
        standins = _standins(inputs, changes=[(n, (None, None, 1)) for n in names[1:]])
        seen.append(accept("chunk_kda_bwd_intra", tuple(standins[n] for n in names), 64, None,
                           None))
    assert seen == [True, False]


# --- enable(ops=...): a subset of the operators ------------------------------------------------

WY, INTRA, LAYER = "chunk_kda_bwd_wy_dqkg_fused", "chunk_kda_bwd_intra", "chunk_kda"
DHU = "chunk_gated_delta_rule_bwd_dhu"


class _FakeRegistry:
    """What enable() / disable() / enabled_operators() use of fla's KDA registry, without fla:
    0.6's (fla.backends: BackendRegistry, a dict of backends by type) or, with `cached_active`,
    0.5.2's (fla.ops.backends: the same plus a lock and a cached active backend)."""

    def __init__(self, cached_active):
        import threading

        self._backends = {}
        self.cached_active = cached_active
        if cached_active:
            self._lock = threading.RLock()
            self._active = None

    def register(self, backend):
        self._backends[backend.backend_type] = backend
        if self.cached_active:
            self._update_active_backend()

    def _update_active_backend(self):
        self._active = next(iter(self._backends.values()), None)


def _dispatch_like_fla(registry, func_name, fla_kernel, *args):
    """fla's @dispatch rule for one call (fla/ops/backends, `dispatch`): the first backend whose
    verifier (a missing one accepts) accepts and whose function is not None runs the call, else
    fla's own kernel does."""
    for backend in registry._backends.values():
        verifier = getattr(backend, func_name + "_verifier", None)
        if verifier is not None and not verifier(*args)[0]:
            continue
        impl = getattr(backend, func_name, None)
        if impl is None:
            continue
        return impl(*args)
    return fla_kernel(*args)


@pytest.fixture(params=["fla.backends", "fla.ops.backends"])
def fake_fla(monkeypatch, request):
    """enable() against a fake registry of either fla release's shape, with a backend class
    built on `object` (no fla) and both operators recorded as having CUDA kernels (no probe)."""
    registry = _FakeRegistry(cached_active=request.param == "fla.ops.backends")
    release = _fla_release.FlaRelease(request.param, "fake", object, registry, False)
    monkeypatch.setattr(kfla, "_release", lambda: release)
    monkeypatch.setattr(kfla._api, "backend_available", lambda name: True)
    monkeypatch.setattr(kfla, "CUDA_KERNELS", {WY: True, INTRA: True, DHU: True})
    monkeypatch.setattr(kfla, "_backend_class", kfla._make_backend_class(object))
    monkeypatch.setattr(kfla, "_subset_classes", {})
    return registry


def test_operator_names():
    # The reverse scan only by name (OPT_IN: not yet faster than fla's everywhere).
    assert kfla._operator_names(None) == (WY, INTRA, LAYER)
    assert kfla._operator_names((DHU, LAYER)) == (DHU, LAYER)
    assert kfla._operator_names((INTRA, WY)) == (WY, INTRA)  # _functions()' order
    assert kfla._operator_names(WY) == (WY,)  # a lone name, not its letters
    with pytest.raises(ValueError, match=r"unknown operator\(s\) \['chunk_bwd_intra'\]"):
        kfla._operator_names(["chunk_bwd_intra"])  # the library's name, not fla's
    with pytest.raises(ValueError, match="no operator given"):
        kfla._operator_names(())


def test_enable_a_subset_of_the_operators(fake_fla):
    """enable(ops=(WY,)) registers a subclass of the backend class whose intra function and
    verifier are None; enable() again takes both back, and disable() removes the backend."""
    kfla.enable(ops=(WY,))
    assert kfla.is_enabled()
    assert kfla.enabled_operators() == (WY,)
    backend = fake_fla._backends[kfla.BACKEND_TYPE]
    assert isinstance(backend, kfla._backend_class)
    assert backend.chunk_kda_bwd_intra is None and backend.chunk_kda_bwd_intra_verifier is None
    assert type(backend).chunk_kda_bwd_wy_dqkg_fused is kfla._backend_class.__dict__[WY]

    # The same subset again reuses its class; another subset replaces the registration.
    kfla.enable(ops=[WY])
    assert type(fake_fla._backends[kfla.BACKEND_TYPE]) is type(backend)
    kfla.enable(ops=(INTRA,))
    assert kfla.enabled_operators() == (INTRA,)
    kfla.enable(ops=(WY, INTRA))
    assert kfla.enabled_operators() == (WY, INTRA)
    assert fake_fla._backends[kfla.BACKEND_TYPE].chunk_kda is None
    kfla.enable()
    assert kfla.enabled_operators() == (WY, INTRA, LAYER)
    assert fake_fla._backends[kfla.BACKEND_TYPE].chunk_gated_delta_rule_bwd_dhu is None
    kfla.enable(ops=(WY, INTRA, DHU, LAYER))
    assert type(fake_fla._backends[kfla.BACKEND_TYPE]) is kfla._backend_class
    assert kfla.enabled_operators() == (WY, INTRA, DHU, LAYER)
    kfla.disable()
    assert not kfla.is_enabled() and kfla.enabled_operators() == ()
    assert fake_fla._backends == {}
    if fake_fla.cached_active:
        assert fake_fla._active is None  # 0.5.2's cached choice no longer names ours


def test_record_calls_passes_over_operators_the_subset_leaves_out():
    """record_calls (the fla peer run wraps every function of the registered class) leaves an
    attribute that is None alone: wrapping it would hand fla's dispatch a function to call."""

    class Backend:
        def stage(self, x=1):
            return x

        scan = None

    calls, restore = record_calls(Backend, ("stage", "scan"))
    assert Backend.scan is None
    assert Backend().stage(x=2) == 2
    assert calls == {"stage": [{"x": 2}], "scan": []}
    restore()
    assert Backend.scan is None and Backend().stage() == 1


@pytest.mark.parametrize("ops", [(WY,), (INTRA,), None], ids=["wy", "intra", "both"])
def test_dispatch_reaches_only_the_enabled_operators(fake_fla, monkeypatch, ops):
    """Through fla's dispatch rule, each operator runs on our function only when enabled, else
    on fla's kernel (our verifiers are stubbed to accept: the calls here carry no tensors)."""
    ran = []
    for name in (WY, INTRA):
        monkeypatch.setattr(kfla._backend_class, name + "_verifier",
                            lambda self, *args: (True, None))
        monkeypatch.setattr(kfla._backend_class, name,
                            lambda self, *args, name=name: ran.append(("ours", name)))
    kfla.enable(ops=ops)
    for name in (WY, INTRA):
        _dispatch_like_fla(fake_fla, name, lambda *args, name=name: ran.append(("fla", name)))
    expected = kfla._operator_names(ops)
    assert ran == [("ours" if name in expected else "fla", name) for name in (WY, INTRA)]


def test_enable_checks_ops_before_anything_else(monkeypatch):
    """A bad `ops` is a ValueError even where fla is missing (it names the operator)."""
    def no_fla():
        raise ImportError("kda_kernels.fla needs flash-linear-attention (fla): no fla")

    monkeypatch.setattr(kfla, "_release", no_fla)
    with pytest.raises(ValueError, match="unknown operator"):
        kfla.enable(ops=("chunk_kda_fwd",))
    with pytest.raises(ImportError):
        kfla.enable(ops=(WY,))


# --- which fla is installed ---------------------------------------------------------------


def _load_release_with(tmp_path, files):
    """_fla_release.load() in a fresh interpreter whose only fla is a stand-in package made of
    `files` (path under tmp_path: text); returns what it printed (the error's type and text)."""
    import subprocess
    import sys

    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    code = ("from kda_kernels import _fla_release\n"
            "try:\n    r = _fla_release.load(); print('OK', r.shape)\n"
            "except ImportError as e:\n    print(type(e).__name__, e)\n")
    env = dict(__import__("os").environ, PYTHONPATH=f"{tmp_path}:{kk.__path__[0]}/..")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip()


def test_missing_fla_is_named_as_missing(tmp_path):
    said = _load_release_with(tmp_path, {"placeholder.txt": ""})
    assert said.startswith("ImportError"), said
    assert "which is not installed" in said and "0.5.2 and 0.6.x" in said, said


def test_fla_of_another_shape_is_named_with_the_supported_releases(tmp_path):
    """An fla with neither release's machinery (an old 0.4, say): the error says which fla was
    found and which releases work, not that fla is missing."""
    said = _load_release_with(tmp_path, {"fla/__init__.py": "__version__ = '0.4.2'\n"})
    assert said.startswith("FlaUnsupportedError"), said
    assert "fla 0.4.2 at" in said and "no backend registry" in said, said
    assert "0.5.2 and 0.6.x" in said and "not installed" not in said, said


def test_fla_with_a_partial_registry_is_named(tmp_path):
    said = _load_release_with(tmp_path, {
        "fla/__init__.py": "__version__ = '0.7.0'\n",
        "fla/backends.py": "class BaseBackend:\n    pass\n",
    })
    assert said.startswith("FlaUnsupportedError"), said
    assert "has fla.backends but not what kda_kernels registers through" in said, said
    assert "BackendRegistry" in said, said
