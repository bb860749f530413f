"""chunk_kda_bwd_intra on NumPy arrays (CPU backends): the threaded float32 `cpu` backend against
the float64 reference `cpu-ref` on fresh random inputs over SPEC-chunk-bwd-intra.md's matrix,
the golden files on both backends, and the properties that make the Python plumbing
trustworthy: strided inputs read right, outputs fully written, inputs untouched, unread dA
entries ignored."""

import numpy as np
import pytest

import kda_kernels as kk
import kda_kernels._numpy_path as numpy_path
from kda_testing import (
    INTRA_GOLDEN_BAR,
    INTRA_GOLDEN_CASES,
    INTRA_INPUT_NAMES,
    INTRA_OUTPUT_NAMES,
    INTRA_PASS_BAR,
    assert_close_all,
    intra_golden_case,
    intra_golden_dir,
    make_intra_problem,
    ml_dtypes,
)

needs_ml_dtypes = pytest.mark.skipif(ml_dtypes is None,
                                     reason="bfloat16 NumPy arrays need ml_dtypes")


def case(name, marks=(), **args):
    return pytest.param(name, args, id=name, marks=marks)


# Every X with beta in X and in float32, BT 16/32/64, tails, odd K, GVA, safe_gate, varlen
# with a length-1 (and an empty) sequence; strong decays in every case (make_intra_problem).
CASES = [
    case("fp32-B2-BT64-tail", B=2, T=150, H=2, K=64, BT=64),
    case("fp32-BT16-H3-tail", T=100, H=3, K=32, BT=16),
    case("fp32-BT32-safe", T=96, K=32, BT=32, safe_gate=True),
    case("fp32-beta-x-K1", T=40, K=1, BT=16),
    case("fp16-BT64", T=130, K=64, BT=64, x="float16"),
    case("fp16-beta-f32-K100", T=130, H=1, K=100, BT=64, x="float16", beta_dtype="float32"),
    case("fp16-BT16-safe", T=50, K=16, BT=16, x="float16", safe_gate=True),
    case("bf16-BT64", needs_ml_dtypes, B=2, T=150, K=128, BT=64, x="bfloat16"),
    case("bf16-beta-f32-BT32", needs_ml_dtypes, T=70, K=48, BT=32, x="bfloat16",
         beta_dtype="float32"),
    case("fp32-odd-K7", T=45, K=7, BT=16),
    case("fp16-odd-K33", T=45, K=33, BT=32, x="float16"),
    case("fp32-K256", T=64, H=1, K=256, BT=64),
    case("fp32-gva-H2-HV4", T=96, H=2, HV=4, K=64, BT=32),
    case("fp16-gva-H1-HV3", T=33, H=1, HV=3, K=16, BT=16, x="float16"),
    case("fp32-varlen-BT16", seqlens=[1, 16, 16, 17], K=32, BT=16, safe_gate=True),
    case("fp32-varlen-BT32", seqlens=[37, 64, 1, 0, 50], K=16, BT=32),
    case("bf16-varlen-gva-BT64", needs_ml_dtypes, seqlens=[100, 1, 64, 3], H=2, HV=4, K=32,
         BT=64, x="bfloat16"),
    case("fp16-varlen-beta-f32", seqlens=[5, 1, 40], K=24, BT=16, x="float16",
         beta_dtype="float32"),
]


def run(inputs, options, **kw):
    return kk.chunk_kda_bwd_intra(**inputs, **options, **kw)


def check(outputs, reference, bar, label=""):
    return assert_close_all(outputs, reference, bar, label, names=INTRA_OUTPUT_NAMES)


@pytest.mark.parametrize(("name", "args"), CASES)
def test_cpu_backend_matches_reference(name, args):
    inputs, options = make_intra_problem(seed=len(name), **args)
    reference = run(inputs, options, backend="cpu-ref")
    check(run(inputs, options), reference, INTRA_PASS_BAR[args.get("x", "float32")], name)


@pytest.mark.parametrize("backend", ["cpu", "cpu-ref"])
@pytest.mark.parametrize("case", INTRA_GOLDEN_CASES)
def test_golden(case, backend):
    path = intra_golden_dir() / f"{case}.safetensors"
    assert path.is_file(), (
        f"golden file missing: {path} (expected ../shared/golden-intra beside the checkout, "
        f"or set KDA_INTRA_GOLDEN_DIR)"
    )
    inputs, options, expected, x = intra_golden_case(path)
    # Without ml_dtypes the bf16 case's inputs are widened exactly to float32 (see
    # kda_testing.read_safetensors); the golden bar still applies.
    check(run(inputs, options, backend=backend), expected, INTRA_GOLDEN_BAR[x],
          f"{case} on {backend}")


def test_outputs_have_spec_shapes_and_dtypes():
    inputs, options = make_intra_problem(B=2, T=40, H=2, HV=4, K=8, BT=16, x="float16")
    dq, dk, db, dg = run(inputs, options)
    assert dq.shape == dk.shape == dg.shape == (2, 40, 4, 8)
    assert db.shape == (2, 40, 4)
    for out in (dq, dk, db, dg):
        assert out.dtype == np.float32 and out.flags.c_contiguous


@pytest.mark.parametrize("backend", ["cpu", "cpu-ref"])
def test_varlen_with_and_without_chunk_indices(backend):
    inputs, options = make_intra_problem(seqlens=[37, 64, 1, 0, 50], BT=32, K=16)
    without = run(inputs, options, backend=backend)
    indices = kk.chunk_indices(options["cu_seqlens"], 32)
    for dtype in (np.int64, np.int32):
        with_indices = run(inputs, options, chunk_indices=indices.astype(dtype), backend=backend)
        for a, b in zip(without, with_indices):
            np.testing.assert_array_equal(a, b)
    cu64 = options["cu_seqlens"].astype(np.int64)
    for a, b in zip(without, run(inputs, {**options, "cu_seqlens": cu64}, backend=backend)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", ["cpu", "cpu-ref"])
def test_unread_dA_entries_are_ignored(backend):
    """NaN, inf and 100 in every entry above the diagonal and past a short chunk's end give the
    same outputs, bit for bit, as zeros there (SPEC: never read)."""
    args = dict(seqlens=[37, 1, 50], H=2, HV=4, K=16, BT=32)
    garbage, options = make_intra_problem(seed=4, unread="garbage", **args)
    zero, _ = make_intra_problem(seed=4, unread="zero", **args)
    assert np.isnan(garbage["dAqk"]).any() and not np.isnan(zero["dAqk"]).any()
    for a, b in zip(run(garbage, options, backend=backend), run(zero, options, backend=backend)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", ["cpu", "cpu-ref"])
def test_safe_gate_changes_nothing_on_the_reference_and_little_on_cpu(backend):
    inputs, options = make_intra_problem(seed=2, T=100, K=32, BT=32)
    plain = run(inputs, {**options, "safe_gate": False}, backend=backend)
    safe = run(inputs, {**options, "safe_gate": True}, backend=backend)
    if backend == "cpu-ref":  # the float64 reference ignores it (SPEC)
        for a, b in zip(plain, safe):
            np.testing.assert_array_equal(a, b)
    else:
        check(safe, plain, INTRA_PASS_BAR["float32"])


def _strided_copy(array, rng):
    """The same values in a non-contiguous view: every other element of a buffer twice as large
    in a random dimension of extent > 1, or a transposed storage order."""
    dim = int(rng.choice([d for d in range(array.ndim) if array.shape[d] > 1]))
    if rng.integers(2) == 0:
        shape = list(array.shape)
        shape[dim] *= 2
        big = np.zeros(shape, dtype=array.dtype)
        index = [slice(None)] * array.ndim
        index[dim] = slice(None, None, 2)
        view = big[tuple(index)]
    else:
        order = list(reversed(range(array.ndim)))
        view = np.zeros(array.shape[::-1], dtype=array.dtype).transpose(order)
    view[...] = array
    assert not view.flags.c_contiguous
    return view


@pytest.mark.parametrize(
    "args",
    [dict(B=2, T=50, H=2, HV=4, K=12, BT=16, x="float16"),
     dict(seqlens=[30, 1, 33], K=16, BT=32, beta_dtype="float32")],
    ids=["fixed-fp16-gva", "varlen-fp32"],
)
def test_non_contiguous_inputs(args):
    inputs, options = make_intra_problem(seed=3, **args)
    rng = np.random.default_rng(5)
    strided = {name: _strided_copy(inputs[name], rng) for name in INTRA_INPUT_NAMES}
    # The reference reads each element through its strides: the results must be identical.
    expected = run(inputs, options, backend="cpu-ref")
    for a, b in zip(run(strided, options, backend="cpu-ref"), expected):
        np.testing.assert_array_equal(a, b)
    check(run(strided, options), expected, INTRA_PASS_BAR[args.get("x", "float32")])


def test_broadcast_inputs():
    """Zero strides (a broadcast incoming gradient) are read like any other stride."""
    inputs, options = make_intra_problem(seed=6, T=48, K=16, BT=16)
    broadcast = dict(inputs, db=np.broadcast_to(inputs["db"][:, :1], inputs["db"].shape))
    dense = dict(inputs, db=np.ascontiguousarray(broadcast["db"]))
    for a, b in zip(run(broadcast, options, backend="cpu-ref"),
                    run(dense, options, backend="cpu-ref")):
        np.testing.assert_array_equal(a, b)


def test_outputs_fully_written(monkeypatch):
    """Outputs start as NaN; every element must be overwritten."""

    def poisoned(shape, dtype):
        return np.full(shape, np.nan, dtype=dtype)

    monkeypatch.setattr(numpy_path, "new_output", poisoned)
    for args in (dict(T=100, K=32, BT=64), dict(seqlens=[37, 1, 0, 50], BT=16)):
        inputs, options = make_intra_problem(**args)
        for backend in ("cpu", "cpu-ref"):
            for name, out in zip(INTRA_OUTPUT_NAMES, run(inputs, options, backend=backend)):
                assert np.isfinite(out).all(), f"{backend} left {name} partly unwritten"


def test_inputs_are_not_modified():
    inputs, options = make_intra_problem(T=70, BT=32)
    before = {name: a.copy() for name, a in inputs.items()}
    for backend in ("cpu", "cpu-ref"):
        run(inputs, options, backend=backend)
    for name, a in inputs.items():
        np.testing.assert_array_equal(a, before[name], err_msg=name)


def test_outputs_are_incoming_plus_intra_terms():
    """Each output is its incoming input plus terms that do not depend on it: shifting every
    incoming gradient by one shifts every output by exactly that (in float64, on cpu-ref)."""
    inputs, options = make_intra_problem(seed=8, T=40, K=8, BT=16)
    base = run(inputs, options, backend="cpu-ref")
    shifted = dict(inputs, **{n: inputs[n] + np.float32(1.0) for n in ("dq", "dk", "db", "dg")})
    for name, a, b in zip(INTRA_OUTPUT_NAMES, base, run(shifted, options, backend="cpu-ref")):
        np.testing.assert_allclose(b - a, 1.0, rtol=0, atol=1e-6, err_msg=name)


def test_repeated_runs_are_identical():
    inputs, options = make_intra_problem(B=2, T=200, H=2, K=64, BT=64)
    first = run(inputs, options)
    for a, b in zip(first, run(inputs, options)):
        np.testing.assert_array_equal(a, b)


def test_positional_arguments_follow_fla_order():
    inputs, options = make_intra_problem(seqlens=[20, 30], BT=16, K=8)
    indices = kk.chunk_indices(options["cu_seqlens"], 16)
    positional = kk.chunk_kda_bwd_intra(
        *(inputs[n] for n in INTRA_INPUT_NAMES), options["cu_seqlens"], indices, 16, True)
    for a, b in zip(positional, run(inputs, {**options, "safe_gate": True})):
        np.testing.assert_array_equal(a, b)


@needs_ml_dtypes
def test_bfloat16_numpy_equals_float32_widened_when_reference():
    """bf16 inputs widen exactly to float32; the float64 reference's float32 outputs are then
    identical."""
    inputs, options = make_intra_problem(T=64, BT=32, x="bfloat16")
    widened = {n: a.astype(np.float32) if a.dtype.name == "bfloat16" else a
               for n, a in inputs.items()}
    for a, b in zip(run(inputs, options, backend="cpu-ref"),
                    run(widened, options, backend="cpu-ref")):
        np.testing.assert_array_equal(a, b)
