"""kda_kernels.fla against the installed fla (0.5.2 or 0.6.x; tools/run-tests.sh runs this file
once per fla release it finds): registering with fla's KDA backend registry, fla's own dispatch
reaching our functions with its keywords (on the CPU too), the verifiers' hand-backs, the probe
of which operators the library has CUDA kernels for, and a KDA layer's forward + backward
through fla's chunk_kda with and without our backend, counting the calls fla's dispatch makes to
each of our two functions. Skipped without torch or fla; the tests marked needs_cuda also need a
CUDA device and the cuda backend."""

import contextlib
import inspect
import itertools
import time

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the fla tests need it)")
pytest.importorskip("fla", reason="flash-linear-attention (fla) is not installed")

import torch.nn.functional as F  # noqa: E402
from fla.ops.kda import chunk_kda  # noqa: E402

import kda_kernels as kk  # noqa: E402
import kda_kernels.fla as kfla  # noqa: E402
from fla_tuning import trim_fla_autotuners  # noqa: E402
from kda_kernels import _fla_release, _signatures  # noqa: E402

# The operators fla dispatches (chunk_kda_bwd_epilogue has no fla counterpart).
STAGE_SIGNATURES = [s for s in _signatures.SIGNATURES if s.fla_name in kfla.STAGES]

RELEASE = _fla_release.load()
kda_registry = RELEASE.registry
from kda_testing import (  # noqa: E402
    PASS_BAR, err_ratio, record_calls, torch_intra_problem, torch_problem)

# Correctness does not depend on fla's tuning: one config per kernel, no autotuning (which took
# minutes per layer test on a fresh machine).
trim_fla_autotuners()

needs_cuda = pytest.mark.skipif(
    not (torch.cuda.is_available() and kk.backend_available("cuda")),
    reason="needs a CUDA device and a libkda with the cuda backend",
)


WY = "chunk_kda_bwd_wy_dqkg_fused"
INTRA = "chunk_kda_bwd_intra"
LAYER = "chunk_kda"


def _fla_function(fla_name):
    """fla's function of that name, past its @dispatch('kda') wrapper."""
    from fla.ops.kda.chunk_bwd import chunk_kda_bwd_wy_dqkg_fused
    from fla.ops.kda.chunk_intra import chunk_kda_bwd_intra

    fn = {WY: chunk_kda_bwd_wy_dqkg_fused, INTRA: chunk_kda_bwd_intra}[fla_name]
    return getattr(fn, "__wrapped__", fn)


def _parameters(fn, skip=()):
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()
            if p.name not in skip and p.kind != inspect.Parameter.VAR_KEYWORD]


# The keywords fla 0.6 added to each stage function, after 0.5.2's parameters.
ADDED_IN_06 = {WY: [("chunk_offsets", None), ("use_graph", False)],
               INTRA: [("lower_bound", None), ("use_graph", False)]}


def test_release_shape():
    """The machinery found is the one this fla release has (told apart by what it provides;
    the version string only confirms it here)."""
    import fla

    major_minor = tuple(int(x) for x in fla.__version__.split(".")[:2])
    assert RELEASE.shape == ("fla.backends" if major_minor >= (0, 6) else "fla.ops.backends")
    assert RELEASE.version == fla.__version__


@pytest.mark.parametrize("sig", STAGE_SIGNATURES, ids=lambda s: s.op_name)
def test_backend_methods_take_flas_parameters(sig):
    """fla's dispatch calls our methods with its own function's arguments: same names, order
    and defaults, those of 0.5.2 and then those 0.6 added (no GPU needed); chunk_kda_bwd_intra's
    public function has 0.5.2's."""
    backend_class = kfla._make_backend_class()
    theirs = _parameters(_fla_function(sig.fla_name))
    ours = _parameters(getattr(backend_class, sig.fla_name), skip=("self",))
    assert ours[:len(theirs)] == theirs
    assert ours[len(theirs):] in ([], ADDED_IN_06[sig.fla_name])
    assert _parameters(getattr(backend_class, sig.fla_name + "_verifier"),
                       skip=("self",)) == ours
    if RELEASE.shape == "fla.backends":
        assert ours == theirs  # 0.6.x: every keyword it passes is a named parameter
    if sig.fla_name == INTRA:
        public = _parameters(kk.chunk_kda_bwd_intra, skip=("backend", "kernel"))
        assert public + ADDED_IN_06[INTRA] == ours


@pytest.fixture
def cpu_backend(monkeypatch):
    """Our backend registered with the real fla registry, built to accept CPU tensors (the
    host-cost bench's variant: the verifiers' rules with the device type "cpu") and with both
    operators marked as having kernels, so that fla's own dispatch runs our functions on the
    library's cpu backend, without a GPU."""
    backend_class = kfla._make_backend_class(RELEASE.base_class, device_type="cpu")
    monkeypatch.setattr(kfla, "CUDA_KERNELS", {WY: True, INTRA: True})
    RELEASE.register(backend_class())
    yield backend_class
    RELEASE.unregister(kfla.BACKEND_TYPE)


def _fla_dispatched(fla_name):
    from fla.ops.kda.chunk_bwd import chunk_kda_bwd_wy_dqkg_fused
    from fla.ops.kda.chunk_intra import chunk_kda_bwd_intra

    return {WY: chunk_kda_bwd_wy_dqkg_fused, INTRA: chunk_kda_bwd_intra}[fla_name]


@pytest.mark.parametrize("sig", STAGE_SIGNATURES, ids=lambda s: s.op_name)
def test_flas_dispatch_runs_our_functions_with_its_keywords(cpu_backend, sig):
    """fla's own dispatch (the wrapper on its stage function) reaches our function, which gives
    the public function's results; with 0.6's keywords too (use_graph=True is served)."""
    if sig.fla_name == WY:
        inputs, options = torch_problem(x="float32", seqlens=[1, 40, 64, 70], BT=32, HV=4, H=2)
        want = kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options)
        call = dict(inputs, scale=options.get("scale"), cu_seqlens=options["cu_seqlens"],
                    chunk_size=options["chunk_size"], chunk_indices=options.get("chunk_indices"))
    else:
        inputs, options = torch_intra_problem(x="float32", T=100, BT=32, safe_gate=True)
        want = kk.chunk_kda_bwd_intra(**inputs, **options)
        call = dict(inputs, cu_seqlens=None, chunk_indices=None, chunk_size=options["chunk_size"],
                    safe_gate=True)
    recorded, restore = record_calls(cpu_backend, (sig.fla_name,))
    calls = recorded[sig.fla_name]
    try:
        extra = [{}]
        if RELEASE.shape == "fla.backends":
            extra.append({"use_graph": True, **({"chunk_offsets": None} if sig.fla_name == WY
                                                else {"lower_bound": -5.0})})
        for keywords in extra:
            got = _fla_dispatched(sig.fla_name)(**call, **keywords)
            assert len(got) == len(want)
            for a, b in zip(got, want):
                assert torch.equal(a, b)
    finally:
        restore()
    assert len(calls) == len(extra)
    assert all(calls[i].items() >= extra[i].items() for i in range(len(extra)))


DHU = "chunk_gated_delta_rule_bwd_dhu"


def _fla_reverse_scan():
    """fla's reverse state scan as its 'common' dispatch wraps it."""
    from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_bwd_dhu

    return chunk_gated_delta_rule_bwd_dhu


def test_reverse_scan_method_takes_flas_parameters():
    """The reverse scan's backend method and verifier take fla's parameters: 0.5.2's, then the
    keywords 0.6 added (chunk_offsets, use_graph)."""
    backend_class = kfla._make_backend_class()
    fla_fn = _fla_reverse_scan()
    theirs = _parameters(getattr(fla_fn, "__wrapped__", fla_fn))
    ours = _parameters(getattr(backend_class, DHU), skip=("self",))
    assert ours[:len(theirs)] == theirs
    assert ours[len(theirs):] in ([], [("chunk_offsets", None), ("use_graph", False)])
    assert _parameters(getattr(backend_class, DHU + "_verifier"), skip=("self",)) == ours


def test_flas_common_dispatch_runs_our_reverse_scan(monkeypatch):
    """fla's 'common' dispatch (the wrapper on chunk_gated_delta_rule_bwd_dhu) reaches our
    function when our backend is registered, which gives the public function's results (dh0
    None without h0, as fla's); on the CPU, with the verifiers' rules for CPU tensors."""
    if RELEASE.common_registry is None:
        pytest.skip("this fla has no 'common' registry")
    backend_class = kfla._make_backend_class(RELEASE.base_class, device_type="cpu")
    monkeypatch.setattr(kfla, "CUDA_KERNELS", {DHU: True})
    gen = torch.Generator().manual_seed(0)
    B, T, H, HV, K, V, BT = 1, 100, 1, 2, 16, 24, 32
    q, k = (torch.randn(B, T, H, K, generator=gen) / K for _ in range(2))
    w = torch.randn(B, T, HV, K, generator=gen) / K
    do, dv = (torch.randn(B, T, HV, V, generator=gen) for _ in range(2))
    gk = -torch.rand(B, T, HV, K, generator=gen)
    for t0 in range(0, T, BT):
        gk[:, t0:t0 + BT] = gk[:, t0:t0 + BT].cumsum(1)
    dht = torch.randn(B, HV, K, V, generator=gen)
    call = dict(q=q, k=k, w=w, do=do, dv=dv, gk=gk, dht=dht, scale=0.5, chunk_size=BT)
    want = kk.chunk_gated_delta_rule_bwd_dhu(**call)
    RELEASE.register(backend_class())
    recorded, restore = record_calls(backend_class, (DHU,))
    try:
        for h0 in (None, torch.zeros(B, HV, K, V)):
            dh, dh0, dv2 = _fla_reverse_scan()(**call, h0=h0)
            assert torch.equal(dh, want[0]) and torch.equal(dv2, want[2])
            assert dh0 is None if h0 is None else torch.equal(dh0, want[1])
    finally:
        restore()
        RELEASE.unregister(kfla.BACKEND_TYPE)
    assert len(recorded[DHU]) == 2


@pytest.fixture
def enabled():
    kfla.enable()
    yield
    kfla.disable()


@needs_cuda
def test_enable_disable_round_trip():
    before = dict(kda_registry._backends)
    assert not kfla.is_enabled()
    kfla.enable()
    kfla.enable()  # twice is harmless
    assert kfla.is_enabled()
    assert kda_registry._backends[kfla.BACKEND_TYPE].priority == kfla.PRIORITY
    kfla.disable()
    assert not kfla.is_enabled()
    assert dict(kda_registry._backends) == before
    active = kda_registry.get_active()
    assert active is None or active.backend_type != kfla.BACKEND_TYPE
    kfla.disable()  # harmless when not enabled


def _verify(changes=None, fla_name=WY):
    if fla_name == WY:
        inputs, options = torch_problem(device="cuda", T=64, K=64, V=64, BT=64, x="bfloat16")
        call = dict(inputs, scale=None, state_v_first=False, cu_seqlens=None, chunk_size=64,
                    chunk_indices=None)
    else:
        inputs, options = torch_intra_problem(device="cuda", T=64, K=64, BT=64, x="bfloat16")
        call = dict(inputs, cu_seqlens=None, chunk_size=64, chunk_indices=None, safe_gate=False)
    if changes is not None:
        call.update(changes(call) if callable(changes) else changes)
    backend = kda_registry._backends[kfla.BACKEND_TYPE]
    return backend.verify(fla_name, **call)


@needs_cuda
def test_verifier_hands_unsupported_cases_back(enabled):
    assert _verify() == (True, None)
    rejected = {
        "cpu tensors": lambda c: {n: t.cpu() for n, t in c.items() if isinstance(t, torch.Tensor)},
        "float64": lambda c: {n: c[n].double() for n in ("q", "k", "v", "v_new", "A", "do", "dv")},
        "K > 256": lambda c: {n: torch.zeros(*c[n].shape[:3], 512, dtype=c[n].dtype,
                                             device="cuda") for n in ("q", "k", "g")},
        "g in bf16": lambda c: {"g": c["g"].bfloat16()},
        "chunk_size 128": {"chunk_size": 128},
    }
    for why, change in rejected.items():
        ok, reason = _verify(change)
        assert not ok and reason, why


def _intra_refusal():
    """None when the library runs chunk_kda_bwd_intra on CUDA, else its message."""
    inputs, options = torch_intra_problem(device="cuda", T=16, H=1, K=16, BT=16)
    try:
        kk.chunk_kda_bwd_intra(**inputs, **options)
        return None
    except NotImplementedError as e:
        return str(e)


@needs_cuda
def test_probe_agrees_with_the_library(enabled):
    """enable() records per operator whether the library has its CUDA kernel; the record says
    what a direct call finds, and the intra verifier follows it."""
    assert kfla.CUDA_KERNELS[WY] is True
    refusal = _intra_refusal()
    assert kfla.CUDA_KERNELS[INTRA] is (refusal is None)
    ok, reason = _verify(fla_name=INTRA)
    if refusal is None:
        assert (ok, reason) == (True, None)
    else:
        assert not ok and "has no CUDA kernel for chunk_kda_bwd_intra" in reason
        assert refusal in reason


@needs_cuda
def test_intra_verifier_hands_unsupported_cases_back(enabled, monkeypatch):
    # As if the library had the kernel, so that every other rule is seen on its own.
    monkeypatch.setitem(kfla.CUDA_KERNELS, INTRA, True)
    assert _verify(fla_name=INTRA) == (True, None)
    rejected = {
        "cpu tensors": lambda c: {n: t.cpu() for n, t in c.items() if isinstance(t, torch.Tensor)},
        "float64": lambda c: {n: c[n].double() for n in ("q", "k")},
        "K > 256": lambda c: {n: torch.zeros(*c[n].shape[:3], 512, dtype=c[n].dtype,
                                             device="cuda") for n in ("q", "k", "g", "dq", "dk",
                                                                      "dg")},
        "dq in bf16": lambda c: {"dq": c["dq"].bfloat16()},
        "chunk_size 128": {"chunk_size": 128},
    }
    for why, change in rejected.items():
        ok, reason = _verify(change, fla_name=INTRA)
        assert not ok and reason, why


def _kda_layer(T, H, K, V, seqlens, device="cuda", seed=0):
    """Leaf tensors for chunk_kda, the way fla's own tests make them (bf16; gate in log space)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    B = 1 if seqlens else 2
    T = sum(seqlens) if seqlens else T
    N = len(seqlens) if seqlens else B

    def rand(*shape, dtype=torch.bfloat16, f=torch.rand):
        return f(*shape, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)

    leaves = dict(
        q=rand(B, T, H, K),
        k=rand(B, T, H, K),
        v=rand(B, T, H, V),
        g=F.logsigmoid(rand(B, T, H, K, dtype=torch.float32, f=torch.randn)),
        beta=rand(B, T, H, f=torch.randn).sigmoid(),
        initial_state=rand(N, H, K, V, dtype=torch.float32, f=torch.randn),
    )
    leaves = {n: t.requires_grad_(True) for n, t in leaves.items()}
    grads = dict(do=rand(B, T, H, V, f=torch.randn),
                 dht=rand(N, H, K, V, dtype=torch.float32, f=torch.randn))
    cu = None
    if seqlens:
        cu = torch.tensor([0, *itertools.accumulate(seqlens)], dtype=torch.long, device=device)
    return leaves, grads, cu


def _forward_backward(leaves, grads, cu):
    for t in leaves.values():
        t.grad = None
    o, ht = chunk_kda(**leaves, output_final_state=True, use_qk_l2norm_in_kernel=True,
                      cu_seqlens=cu)
    loss = (o * grads["do"]).sum() + (ht * grads["dht"]).sum()
    torch.cuda.synchronize()
    start = time.perf_counter()
    loss.backward()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    return {n: t.grad.clone() for n, t in leaves.items()}, elapsed


def _median_backward_ms(leaves, grads, cu, repeat=10):
    times = sorted(_forward_backward(leaves, grads, cu)[1] for _ in range(repeat))
    return 1e3 * times[len(times) // 2]


@contextlib.contextmanager
def backend_calls(ops=None):
    """Counts the calls fla's dispatch makes to our backend's functions
    (chunk_kda_bwd_wy_dqkg_fused, chunk_kda_bwd_intra, chunk_kda): the counters wrap the methods
    on the backend class that enable() registers, which is what fla's dispatch looks up
    (getattr on the registered instance). `ops` is enable()'s: by default the two stage
    functions alone, so that fla's own backward runs and dispatches them (with chunk_kda
    enabled too, fla's chunk_kda goes to kda_kernels.chunk_kda, which calls our operators
    directly). Yields a dict of lists, by function name, that get one entry per call
    (kda_testing.record_calls)."""
    # Registers the class; the caller decides whether it stays registered.
    kfla.enable(ops=(WY, INTRA) if ops is None else ops)
    calls, restore = record_calls(kfla._backend_class, (WY, INTRA, LAYER))
    try:
        yield calls
    finally:
        restore()


@needs_cuda
@pytest.mark.parametrize("seqlens", [None, [300, 1, 1000, 747]], ids=["fixed", "varlen"])
def test_chunk_kda_gradients_with_and_without_backend(seqlens):
    leaves, grads, cu = _kda_layer(T=1024, H=4, K=128, V=128, seqlens=seqlens)
    kfla.disable()
    fla_grads, _ = _forward_backward(leaves, grads, cu)
    fla_ms = _median_backward_ms(leaves, grads, cu)

    try:
        with backend_calls() as calls:
            our_grads, _ = _forward_backward(leaves, grads, cu)
        assert calls[WY], "fla's backward did not call kda_kernels' chunk_kda_bwd_wy_dqkg_fused"
        # chunk_kda_bwd_intra runs on our kernel when the library has one, else fla's: the
        # verifier hands it back and our method is never called.
        if kfla.CUDA_KERNELS[INTRA]:
            assert calls[INTRA], "fla's backward did not call kda_kernels' chunk_kda_bwd_intra"
        else:
            assert calls[INTRA] == [], kfla.CUDA_KERNEL_NOTES[INTRA]
        our_ms = _median_backward_ms(leaves, grads, cu)
    finally:
        kfla.disable()

    try:  # fla's chunk_kda on kda_kernels.chunk_kda: one call, no stage dispatched by fla
        with backend_calls(ops=kfla._functions()) as calls:
            layer_grads, _ = _forward_backward(leaves, grads, cu)
        assert len(calls[LAYER]) == 1 and calls[WY] == calls[INTRA] == [], calls
    finally:
        kfla.disable()
    for name in leaves:
        ratio = err_ratio(layer_grads[name].double().cpu().numpy(),
                          fla_grads[name].double().cpu().numpy())
        assert ratio <= PASS_BAR["bfloat16"], f"layer d{name}: err_ratio {ratio:.2e}"

    ratios = {n: err_ratio(our_grads[n].double().cpu().numpy(),
                           fla_grads[n].double().cpu().numpy()) for n in leaves}
    # Shown by `pytest -rP` (and under -n, where workers' output is otherwise lost).
    label = "varlen" if seqlens else "fixed"
    print(f"\n[chunk_kda bf16 {label}] gradient err_ratio, ours vs fla: "
          + " ".join(f"d{n}={r:.2e}" for n, r in ratios.items()))
    print(f"[chunk_kda bf16 {label}] whole backward, median of 10: fla {fla_ms:.3f} ms, "
          f"with kda_kernels {our_ms:.3f} ms")
    for name, ratio in ratios.items():
        assert ratio <= PASS_BAR["bfloat16"], f"d{name}: err_ratio {ratio:.2e}"


@needs_cuda
def test_call_counter_stays_at_zero_without_the_backend():
    """The counter of the layer test above observes the path that really runs: with our backend
    not registered, a whole layer backward leaves it at zero (so that test's `assert calls`
    fails), and the gradients are fla's own, bit for bit."""
    leaves, grads, cu = _kda_layer(T=256, H=2, K=64, V=64, seqlens=None)
    kfla.disable()
    fla_grads, _ = _forward_backward(leaves, grads, cu)
    with backend_calls() as calls:
        kfla.disable()  # registered by backend_calls(); taken away again before the run
        unregistered_grads, _ = _forward_backward(leaves, grads, cu)
    assert calls == {WY: [], INTRA: [], LAYER: []}
    for name in leaves:
        assert torch.equal(unregistered_grads[name], fla_grads[name]), name
    with backend_calls() as calls:
        _forward_backward(leaves, grads, cu)
    kfla.disable()
    assert calls[WY], "registered, the backend must be called (or the counter counts nothing)"
    assert bool(calls[INTRA]) == kfla.CUDA_KERNELS[INTRA]


@needs_cuda
def test_enable_one_operator_leaves_the_other_to_fla():
    """enable(ops=(WY,)), as the layer benchmark's `wy` mode uses it: fla's dispatch calls our
    WY function and never our intra function (fla's Triton kernel runs it), and the gradients
    stay within the bar of fla's own."""
    leaves, grads, cu = _kda_layer(T=256, H=2, K=64, V=64, seqlens=None)
    kfla.disable()
    fla_grads, _ = _forward_backward(leaves, grads, cu)
    try:
        with backend_calls(ops=(WY,)) as calls:  # counts on the full class, which the subset
            # inherits
            assert kfla.enabled_operators() == (WY,)
            wy_grads, _ = _forward_backward(leaves, grads, cu)
    finally:
        kfla.disable()
    assert calls[WY], "fla's backward did not call kda_kernels' chunk_kda_bwd_wy_dqkg_fused"
    assert calls[INTRA] == [], "chunk_kda_bwd_intra was not enabled but was called"
    for name in leaves:
        ratio = err_ratio(wy_grads[name].double().cpu().numpy(),
                          fla_grads[name].double().cpu().numpy())
        assert ratio <= PASS_BAR["bfloat16"], f"d{name}: err_ratio {ratio:.2e}"


def _chunk_kda_call(requires_grad=True, **overrides):
    B, T, H, K, V = 1, 16, 2, 16, 16
    x = dict(q=torch.randn(B, T, H, K), k=torch.randn(B, T, H, K), v=torch.randn(B, T, H, V),
             g=-torch.rand(B, T, H, K), beta=torch.rand(B, T, H))
    x = {name: t.requires_grad_(requires_grad) for name, t in x.items()}
    x.update(overrides)
    return x


def test_flas_chunk_kda_dispatch_reaches_our_layer(cpu_backend, monkeypatch):
    """fla's chunk_kda is dispatched to our backend's chunk_kda (0.5.2 through the KDA registry,
    0.6 through chunk_kda's own), with fla's keywords; the verifier hands back, with its reason,
    what kda_kernels.chunk_kda does not serve."""
    from fla.ops.kda import chunk_kda as fla_chunk_kda

    backend = cpu_backend()
    ran = []
    monkeypatch.setattr(cpu_backend, "chunk_kda",
                        lambda self, *args, **kwargs: ran.append(kwargs) or ("ours", None))
    # On CPU tensors the real verifier hands the call back (fla's own path would then need a
    # GPU): its reason, then a verifier stubbed to accept, so that dispatch reaches ours.
    ok, reason = backend.chunk_kda_verifier(**_chunk_kda_call())
    assert not ok and "runs on CUDA tensors" in reason
    monkeypatch.setattr(cpu_backend, "chunk_kda_verifier", lambda self, *a, **k: (True, None))
    A_log, dt_bias = torch.zeros(2), torch.zeros(32)
    got = fla_chunk_kda(**_chunk_kda_call(), use_gate_in_kernel=True, A_log=A_log,
                        dt_bias=dt_bias, chunk_size=32, output_final_state=True)
    assert got == ("ours", None)
    assert ran[0]["A_log"] is A_log and ran[0]["chunk_size"] == 32
    assert ran[0]["output_final_state"] is True
    # disable_recompute reaches ours (it keeps the forward's intermediates for the backward).
    fla_chunk_kda(**_chunk_kda_call(), disable_recompute=True)
    assert ran[1]["disable_recompute"] is True


@pytest.mark.parametrize("overrides, reason", [
    (dict(cp_context=object()), "context parallelism"),
    (dict(return_intermediate_states=True), "inference path"),
    (dict(use_graph=True), "use_graph"),
    (dict(transpose_state_layout=True), "does not take: ['transpose_state_layout']"),
])
def test_chunk_kda_verifier_hands_back_what_it_does_not_serve(cpu_backend, overrides, reason):
    ok, why = cpu_backend().chunk_kda_verifier(**_chunk_kda_call(**overrides))
    assert not ok and reason in why


def test_chunk_kda_verifier_hands_back_inference(cpu_backend):
    ok, why = cpu_backend().chunk_kda_verifier(**_chunk_kda_call(requires_grad=False))
    assert not ok and "no gradient is needed" in why
    with torch.no_grad():
        ok, why = cpu_backend().chunk_kda_verifier(**_chunk_kda_call())
    assert not ok and "no gradient is needed" in why
