"""Bad arguments raise ValueError or TypeError naming the argument, for both operators. The rules
live in libkda's validation; these tests show its message reaches the Python caller as the right
exception."""

import numpy as np
import pytest

import kda_kernels as kk
from kda_testing import core_accepted_dtypes, listed_dtypes, make_intra_problem, make_problem


def problem(**kw):
    args = dict(B=1, T=40, H=2, K=8, V=8, BT=16)
    args.update(kw)
    return make_problem(**args)


def mutate_inputs(name, fn, **kw):
    def apply():
        inputs, options = problem(**kw)
        inputs[name] = fn(inputs[name])
        return inputs, options

    return apply


def mutate_options(changes, **kw):
    def apply():
        inputs, options = problem(**kw)
        options.update(changes(options) if callable(changes) else changes)
        return inputs, options

    return apply


def hv_not_multiple_of_h():
    inputs, options = problem(H=2, HV=4)
    for name in ("v", "v_new", "g", "beta", "A", "h", "do", "dh", "dv"):
        inputs[name] = inputs[name][:, :, :3]
    return inputs, options


def names(argument, op="chunk_kda_bwd_wy_dqkg_fused"):
    """The core starts a message with "argument 'x': ..." (a few cu_seqlens checks, and the
    backend's kernel check, with "x: ..."); after the Python prefix "<fla name>: "."""
    return rf"^{op}: (argument '{argument}'|{argument}):"


# (id, build (inputs, options), exception, argument named in the message)
BAD = [
    ("wrong-rank", mutate_inputs("q", lambda a: a[0]), ValueError, "q"),
    ("wrong-rank-h", mutate_inputs("h", lambda a: a[0]), ValueError, "h"),
    ("wrong-dtype-g", mutate_inputs("g", lambda a: a.astype(np.float16)), TypeError, "g"),
    ("wrong-dtype-k", mutate_inputs("k", lambda a: a.astype(np.float16)), TypeError, "k"),
    ("float64-q", mutate_inputs("q", lambda a: a.astype(np.float64)), TypeError, "q"),
    ("dh-dtype-not-h", mutate_inputs("dh", lambda a: a.astype(np.float16), x="float16"),
     TypeError, "dh"),
    ("big-endian", mutate_inputs("q", lambda a: a.astype(">f4")), TypeError, "q"),
    ("foreign-dtype", mutate_inputs("beta", lambda a: a.astype(np.int8)), TypeError, "beta"),
    ("not-an-array", mutate_inputs("k", lambda a: a.tolist()), TypeError, "k"),
    ("chunk-size-vs-A", mutate_options({"chunk_size": 32}), ValueError, "A"),
    ("chunk-size-not-allowed", mutate_options({"chunk_size": 48}), ValueError, "chunk_size"),
    ("chunk-size-not-int", mutate_options({"chunk_size": 16.0}), TypeError, "chunk_size"),
    ("hv-not-multiple-of-h", hv_not_multiple_of_h, ValueError, "v"),
    ("K-over-256", mutate_inputs("q", lambda a: np.zeros(a.shape[:3] + (257,), a.dtype)),
     ValueError, "q"),
    ("shape-mismatch", mutate_inputs("do", lambda a: a[:, :-1]), ValueError, "do"),
    ("cu-seqlens-decreasing",
     mutate_options({"cu_seqlens": np.array([0, 30, 20, 40], np.int64)}), ValueError,
     "cu_seqlens"),
    ("cu-seqlens-end-not-T",
     mutate_options({"cu_seqlens": np.array([0, 10, 39], np.int64)}), ValueError, "cu_seqlens"),
    ("cu-seqlens-with-B2",
     mutate_options({"cu_seqlens": np.array([0, 40], np.int64)}, B=2), ValueError, "cu_seqlens"),
    ("cu-seqlens-float",
     mutate_options({"cu_seqlens": np.array([0.0, 40.0], np.float32)}), TypeError,
     "cu_seqlens"),
    ("h-chunk-count", mutate_inputs("h", lambda a: np.concatenate([a, a[:, :1]], axis=1)),
     ValueError, "h"),
    ("chunk-indices-disagree",
     mutate_options({"chunk_indices": np.array([[0, 0], [0, 2], [1, 0]], np.int64),
                     "cu_seqlens": np.array([0, 20, 40], np.int64)}), ValueError,
     "chunk_indices"),
    ("chunk-indices-without-cu-seqlens",
     mutate_options({"chunk_indices": np.zeros((3, 2), np.int64)}), ValueError, "chunk_indices"),
    ("scale-nan", mutate_options({"scale": float("nan")}), ValueError, "scale"),
    ("scale-past-float32", mutate_options({"scale": 1e39}), ValueError, "scale"),
    ("scale-bool", mutate_options({"scale": True}), TypeError, "scale"),
    ("scale-string", mutate_options({"scale": "1.0"}), TypeError, "scale"),
    ("state-v-first-string", mutate_options({"state_v_first": "False"}), TypeError,
     "state_v_first"),
    ("negative-strides", mutate_inputs("v", lambda a: a[:, ::-1]), ValueError, "v"),
]


@pytest.mark.parametrize(("build", "error", "argument"),
                         [pytest.param(*b[1:], id=b[0]) for b in BAD])
def test_bad_argument_raises_naming_it(build, error, argument):
    inputs, options = build()
    with pytest.raises(error, match=names(argument)):
        kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options)


def test_exception_types_are_exact():
    """ValueError for values and TypeError for dtypes, not one posing as the other."""
    inputs, options = problem()
    with pytest.raises(ValueError) as info:
        kk.chunk_kda_bwd_wy_dqkg_fused(**{**inputs, "q": inputs["q"][0]}, **options)
    assert not isinstance(info.value, TypeError)
    with pytest.raises(TypeError) as info:
        kk.chunk_kda_bwd_wy_dqkg_fused(**{**inputs, "g": inputs["g"].astype(np.float16)}, **options)
    assert "chunk_kda_bwd_wy_dqkg_fused" in str(info.value)


def test_unknown_backend():
    inputs, options = problem()
    with pytest.raises(ValueError, match=names("backend")):
        kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options, backend="gpu")


def test_cuda_backend_on_host_arrays():
    inputs, options = problem()
    # Without a cuda backend the library says it is unavailable; with one, that the arrays are
    # not on a CUDA device. Either way the message names the backend.
    error = ValueError if kk.backend_available("cuda") else RuntimeError
    with pytest.raises(error, match="cuda"):
        kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options, backend="cuda")


@pytest.mark.parametrize("backend", ["cpu", "cpu-ref"])
@pytest.mark.parametrize("kernel", ["simt", "sm80_mma"])
def test_cpu_backends_take_kernel_auto_only(backend, kernel):
    inputs, options = problem()
    with pytest.raises(ValueError, match=names("kernel") + f" {kernel} is a cuda kernel; backend "
                       f"{backend} takes kernel auto"):
        kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options, backend=backend, kernel=kernel)
    explicit = kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options, backend=backend,
                                              kernel="auto")
    for a, b in zip(explicit, kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options,
                                                             backend=backend)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kernel", ["fast", "", "AUTO", None, 1])
def test_unknown_kernel(kernel):
    inputs, options = problem()
    with pytest.raises(ValueError, match=names("kernel") + " expected one of 'auto', 'simt', "
                       "'sm80_mma', got"):
        kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options, kernel=kernel)


def test_chunk_indices_rejects_bad_cu_seqlens():
    with pytest.raises(ValueError, match="cu_seqlens"):
        kk.chunk_indices(np.array([0, 9, 3]), 16)
    with pytest.raises(TypeError, match="'cu_seqlens': expected integers, got dtype float64"):
        kk.chunk_indices(np.array([0, 5.7, 40]), 16)  # 5.7 must not be read as 5
    with pytest.raises(ValueError, match="does not fit in int64"):
        kk.chunk_indices(np.array([0, 2**63], np.uint64), 16)
    np.testing.assert_array_equal(kk.chunk_indices([0, 20], 16), [[0, 0], [0, 1]])
    assert kk.chunk_indices([0], 16).shape == (0, 2)


@pytest.mark.parametrize("empty", [dict(B=2, T=0), dict(B=0, T=20), dict(T=0, seqlens=[])],
                         ids=["T0", "B0", "no-sequences"])
def test_empty_problems_give_empty_outputs(empty):
    """NumPy gives empty arrays zero strides; the core takes any strides for a view without
    elements, so an empty problem returns empty outputs."""
    inputs, options = make_problem(H=2, K=8, V=8, BT=16, **empty)
    outputs = kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options)
    assert outputs[0].shape == inputs["q"].shape[:3] + (8,)
    assert all(o.size == 0 for o in outputs)


# --- chunk_kda_bwd_intra -------------------------------------------------------------------


def intra_problem(**kw):
    args = dict(B=1, T=40, H=2, K=8, BT=16)
    args.update(kw)
    return make_intra_problem(**args)


def intra_inputs(name, fn, **kw):
    def apply():
        inputs, options = intra_problem(**kw)
        inputs[name] = fn(inputs[name])
        return inputs, options

    return apply


def intra_options(changes, **kw):
    def apply():
        inputs, options = intra_problem(**kw)
        options.update(changes)
        return inputs, options

    return apply


def intra_hv_not_multiple_of_h():
    inputs, options = intra_problem(H=2, HV=4)
    for name in ("g", "beta", "dAqk", "dAkk", "dq", "dk", "db", "dg"):
        inputs[name] = inputs[name][:, :, :3]
    return inputs, options


INTRA_BAD = [
    ("wrong-rank-q", intra_inputs("q", lambda a: a[0]), ValueError, "q"),
    ("wrong-rank-db", intra_inputs("db", lambda a: a[..., None]), ValueError, "db"),
    ("q-float64", intra_inputs("q", lambda a: a.astype(np.float64)), TypeError, "q"),
    ("k-not-q-dtype", intra_inputs("k", lambda a: a.astype(np.float16)), TypeError, "k"),
    ("g-float16", intra_inputs("g", lambda a: a.astype(np.float16)), TypeError, "g"),
    ("beta-float16-with-fp32-q", intra_inputs("beta", lambda a: a.astype(np.float16)),
     TypeError, "beta"),
    ("dAqk-float16", intra_inputs("dAqk", lambda a: a.astype(np.float16)), TypeError, "dAqk"),
    ("dq-float16", intra_inputs("dq", lambda a: a.astype(np.float16)), TypeError, "dq"),
    ("db-float16", intra_inputs("db", lambda a: a.astype(np.float16)), TypeError, "db"),
    ("big-endian-dg", intra_inputs("dg", lambda a: a.astype(">f4")), TypeError, "dg"),
    ("foreign-dtype", intra_inputs("beta", lambda a: a.astype(np.int8)), TypeError, "beta"),
    ("not-an-array", intra_inputs("dAkk", lambda a: a.tolist()), TypeError, "dAkk"),
    ("chunk-size-vs-dAqk", intra_options({"chunk_size": 32}), ValueError, "dAqk"),
    ("dAkk-columns", intra_inputs("dAkk", lambda a: a[..., :8]), ValueError, "dAkk"),
    ("chunk-size-not-allowed", intra_options({"chunk_size": 48}), ValueError, "chunk_size"),
    ("chunk-size-not-int", intra_options({"chunk_size": 16.0}), TypeError, "chunk_size"),
    ("hv-not-multiple-of-h", intra_hv_not_multiple_of_h, ValueError, "g"),
    ("K-over-256", intra_inputs("q", lambda a: np.zeros(a.shape[:3] + (257,), a.dtype)),
     ValueError, "q"),
    ("shape-mismatch-dk", intra_inputs("dk", lambda a: a[:, :-1]), ValueError, "dk"),
    ("cu-seqlens-decreasing",
     intra_options({"cu_seqlens": np.array([0, 30, 20, 40], np.int64)}), ValueError,
     "cu_seqlens"),
    ("cu-seqlens-end-not-T",
     intra_options({"cu_seqlens": np.array([0, 10, 39], np.int64)}), ValueError, "cu_seqlens"),
    ("cu-seqlens-with-B2",
     intra_options({"cu_seqlens": np.array([0, 40], np.int64)}, B=2), ValueError, "cu_seqlens"),
    ("cu-seqlens-float",
     intra_options({"cu_seqlens": np.array([0.0, 40.0], np.float32)}), TypeError, "cu_seqlens"),
    ("chunk-indices-disagree",
     intra_options({"chunk_indices": np.array([[0, 0], [0, 2], [1, 0]], np.int64),
                    "cu_seqlens": np.array([0, 20, 40], np.int64)}), ValueError,
     "chunk_indices"),
    ("safe-gate-string", intra_options({"safe_gate": "False"}), TypeError, "safe_gate"),
    ("safe-gate-int", intra_options({"safe_gate": 2}), TypeError, "safe_gate"),
    ("negative-strides", intra_inputs("k", lambda a: a[:, ::-1]), ValueError, "k"),
]


@pytest.mark.parametrize(("build", "error", "argument"),
                         [pytest.param(*b[1:], id=b[0]) for b in INTRA_BAD])
def test_intra_bad_argument_raises_naming_it(build, error, argument):
    inputs, options = build()
    with pytest.raises(error, match=names(argument, "chunk_kda_bwd_intra")) as info:
        kk.chunk_kda_bwd_intra(**inputs, **options)
    # ValueError for values and TypeError for dtypes, not one posing as the other.
    assert error is TypeError or not isinstance(info.value, TypeError)


def test_intra_unknown_backend_and_kernel():
    inputs, options = intra_problem()
    with pytest.raises(ValueError, match=names("backend", "chunk_kda_bwd_intra")):
        kk.chunk_kda_bwd_intra(**inputs, **options, backend="gpu")
    with pytest.raises(ValueError, match=names("kernel", "chunk_kda_bwd_intra")):
        kk.chunk_kda_bwd_intra(**inputs, **options, kernel="fast")


@pytest.mark.parametrize("backend", ["cpu", "cpu-ref"])
@pytest.mark.parametrize("kernel", ["simt", "sm80_mma"])
def test_intra_cpu_backends_take_kernel_auto_only(backend, kernel):
    inputs, options = intra_problem()
    with pytest.raises(ValueError, match=names("kernel", "chunk_kda_bwd_intra")
                       + f" {kernel} is a cuda kernel; backend {backend} takes kernel auto"):
        kk.chunk_kda_bwd_intra(**inputs, **options, backend=backend, kernel=kernel)
    explicit = kk.chunk_kda_bwd_intra(**inputs, **options, backend=backend, kernel="auto")
    for a, b in zip(explicit, kk.chunk_kda_bwd_intra(**inputs, **options, backend=backend)):
        np.testing.assert_array_equal(a, b)


def test_intra_cuda_backend_on_host_arrays():
    inputs, options = intra_problem()
    error = ValueError if kk.backend_available("cuda") else RuntimeError
    with pytest.raises(error, match="cuda"):
        kk.chunk_kda_bwd_intra(**inputs, **options, backend="cuda")


def test_intra_chunk_indices_without_cu_seqlens():
    """The library refuses chunk_indices without cu_seqlens, as for the first operator.
    (SPEC-chunk-bwd-intra.md says it is ignored, as fla's kernel does; the fla backend drops it
    in that case, see test_fla_backend.py.)"""
    inputs, options = intra_problem()
    with pytest.raises(ValueError, match=names("chunk_indices", "chunk_kda_bwd_intra")):
        kk.chunk_kda_bwd_intra(**inputs, **options, chunk_indices=np.zeros((3, 2), np.int64))


@pytest.mark.parametrize("empty", [dict(B=2, T=0), dict(B=0, T=20), dict(T=0, seqlens=[])],
                         ids=["T0", "B0", "no-sequences"])
def test_intra_empty_problems_give_empty_outputs(empty):
    inputs, options = make_intra_problem(H=2, K=8, BT=16, **empty)
    outputs = kk.chunk_kda_bwd_intra(**inputs, **options)
    assert outputs[0].shape == inputs["q"].shape[:3] + (8,)
    assert len(outputs) == 4 and all(o.size == 0 for o in outputs)


# --- cheap rejections first ----------------------------------------------------------------

HUGE_T = 2**40  # outputs of many TiB: more than any allocation can give


def _huge_broadcast(inputs, options, token_dims, BT):
    """The inputs broadcast (zero strides, no memory) to T = HUGE_T along dimension 1, the
    chunk-indexed ones (h, dh) left alone, the [.., BT] ones widened to BT, chunk_size BT."""
    huge = {}
    for name, a in inputs.items():
        if name not in token_dims:
            huge[name] = a
            continue
        shape = (a.shape[0], HUGE_T) + a.shape[2:]
        if token_dims[name]:  # last extent is the chunk size
            shape = shape[:-1] + (BT,)
        huge[name] = np.broadcast_to(a.reshape(-1)[:1].reshape((1,) * a.ndim), shape)
    return huge, dict(options, chunk_size=BT)


WY_TOKEN_DIMS = dict(q=0, k=0, v=0, v_new=0, g=0, beta=0, A=1, do=0, dv=0)
INTRA_TOKEN_DIMS = dict(q=0, k=0, g=0, beta=0, dAqk=1, dAkk=1, dq=0, dk=0, db=0, dg=0)


@pytest.mark.parametrize("op", ["wy", "intra"])
def test_invalid_problem_is_refused_before_its_outputs_are_allocated(op):
    """A bad chunk_size on inputs whose outputs would take TiB: the chunk_size error, not a
    MemoryError from allocating the outputs first (the core validates a description of the
    outputs before NumPy allocates them)."""
    if op == "wy":
        inputs, options = problem()
        fn, dims = kk.chunk_kda_bwd_wy_dqkg_fused, WY_TOKEN_DIMS
        name = "chunk_kda_bwd_wy_dqkg_fused"
    else:
        inputs, options = intra_problem()
        fn, dims, name = kk.chunk_kda_bwd_intra, INTRA_TOKEN_DIMS, "chunk_kda_bwd_intra"
    huge, bad = _huge_broadcast(inputs, options, dims, BT=48)
    with pytest.raises(ValueError, match=names("chunk_size", name) + " expected 16, 32 or 64"):
        fn(**huge, **bad)


def test_valid_problem_too_large_for_memory_still_says_so():
    """The same inputs with a valid chunk size (h and dh broadcast to their chunk count): valid,
    so the allocation's MemoryError stands."""
    inputs, options = problem()
    huge, good = _huge_broadcast(inputs, options, WY_TOKEN_DIMS, BT=16)
    for name in ("h", "dh"):
        a = huge[name]
        huge[name] = np.broadcast_to(a[:, :1], (1, HUGE_T // 16) + a.shape[2:])
    with pytest.raises(MemoryError):
        kk.chunk_kda_bwd_wy_dqkg_fused(**huge, **good)


# --- the error contract's gaps (issue 15) ---------------------------------------------------


@pytest.mark.parametrize("scale", [10**400, -(10**400)], ids=["huge", "huge-negative"])
def test_scale_too_large_for_a_float_names_the_argument(scale):
    """float(10**400) raises a bare OverflowError ("int too large to convert to float"); the
    argument's name must be in the message, as for every other bad scale (ValueError: a number,
    but not one the operator takes)."""
    inputs, options = problem()
    with pytest.raises(ValueError, match=names("scale") + " expected a finite float, got an int "
                       "too large for a float"):
        kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **{**options, "scale": scale})


# --- a dtype libkda has no code for; a q that is no array -----------------------------------


@pytest.mark.parametrize("fla_name", ["chunk_kda_bwd_wy_dqkg_fused", "chunk_kda_bwd_intra"])
def test_foreign_dtype_lists_only_what_the_argument_takes(fla_name):
    """An array of a dtype libkda has no code for (bool, int8, big-endian, object) is refused by
    the NumPy path itself, naming the argument and the dtypes it takes: those libkda's validation
    takes for it. Every such error listed all the dtypes libkda has a code for (ints for q,
    floats for cu_seqlens)."""
    pytest.importorskip("ml_dtypes", reason="the dtypes libkda takes include bfloat16")
    wy = fla_name == "chunk_kda_bwd_wy_dqkg_fused"
    inputs, options = (problem(seqlens=[10, 22]) if wy
                       else intra_problem(seqlens=[10, 22]))
    options["chunk_indices"] = kk.chunk_indices(options["cu_seqlens"], options["chunk_size"])
    function = getattr(kk, fla_name)
    for name in (*inputs, "cu_seqlens", "chunk_indices"):
        accepted = core_accepted_dtypes(fla_name, name)
        for foreign in (np.bool_, np.int8, ">f4", object):
            args = {**inputs, **options}
            with np.errstate(invalid="ignore"):  # NaN (intra's unread entries) to an int
                args[name] = args[name].astype(foreign)
            with pytest.raises(TypeError, match=names(name, fla_name) + " expected dtype ") as info:
                function(**args)
            assert listed_dtypes(str(info.value)) == accepted, (foreign, str(info.value))


def test_a_q_that_is_no_array_is_told_the_kind_of_the_others():
    """q neither a NumPy array nor a torch tensor: the message names the kind of the call's
    other arrays."""
    inputs, options = problem()
    for q in (None, inputs["q"].tolist()):
        with pytest.raises(TypeError, match=names("q") + " expected a numpy.ndarray like the "
                           "other arguments, got "):
            kk.chunk_kda_bwd_wy_dqkg_fused(**{**inputs, "q": q}, **options)
