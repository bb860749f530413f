"""The operator on NumPy arrays (CPU backends): the threaded float32 `cpu` backend against the
float64 reference `cpu-ref` over the option matrix, plus the properties that make the Python
plumbing trustworthy: strided inputs read right, outputs fully written, inputs untouched."""

import numpy as np
import pytest

import kda_kernels as kk
import kda_kernels._numpy_path as numpy_path
from kda_testing import (
    INPUT_NAMES,
    PASS_BAR,
    assert_close_all,
    make_problem,
    ml_dtypes,
)

needs_ml_dtypes = pytest.mark.skipif(ml_dtypes is None, reason="bfloat16 NumPy arrays need ml_dtypes")

def case(name, marks=(), **args):
    return pytest.param(name, args, id=name, marks=marks)


# Dtypes, h in float32 or X, BT 16/32/64, tails, varlen, GVA, state_v_first, odd head dims.
CASES = [
    case("fp32-B2-BT64", B=2, T=128, H=2, K=32, V=32, BT=64),
    case("fp32-tail-BT16-K32-V48", T=100, H=3, K=32, V=48, BT=16),
    case("fp32-scale", T=40, K=16, V=16, BT=32, scale=0.3),
    case("fp16-hf32-BT32", T=96, BT=32, x="float16"),
    case("fp16-hx-BT64-tail", T=130, BT=64, x="float16", h_dtype="x"),
    case("fp16-beta-f32-BT16", T=50, BT=16, x="float16", beta_dtype="float32"),
    case("fp32-gva-H2-HV4", T=70, H=2, HV=4, K=32, V=16, BT=32),
    case("fp16-gva-H1-HV3", T=33, H=1, HV=3, K=16, V=16, BT=16, x="float16"),
    case("fp32-state-v-first", T=100, K=64, V=32, BT=64, state_v_first=True),
    case("fp32-odd-K7-V33", T=45, K=7, V=33, BT=16),
    case("fp16-odd-K33-V7", T=45, K=33, V=7, BT=32, x="float16", h_dtype="x"),
    case("fp32-varlen-BT32", seqlens=[37, 64, 1, 0, 50], BT=32),
    case("fp16-varlen-BT16-svf", seqlens=[5, 16, 17, 40], BT=16, x="float16", state_v_first=True),
    case("fp32-varlen-gva-BT64", seqlens=[100, 3, 64], H=2, HV=4, K=16, V=24, BT=64),
    case("bf16-hx-varlen", needs_ml_dtypes, seqlens=[20, 70], BT=32, x="bfloat16", h_dtype="x"),
    case("bf16-hf32", needs_ml_dtypes, T=64, BT=16, x="bfloat16"),
]


def run(inputs, options, **kw):
    return kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options, **kw)


@pytest.mark.parametrize(("name", "args"), CASES)
def test_cpu_backend_matches_reference(name, args):
    inputs, options = make_problem(seed=len(name), **args)
    reference = run(inputs, options, backend="cpu-ref")
    x = args.get("x", "float32")
    assert_close_all(run(inputs, options), reference, PASS_BAR[x], name)


def test_outputs_have_spec_shapes_and_dtypes():
    inputs, options = make_problem(B=2, T=40, H=2, HV=4, K=8, V=12, BT=16, x="float16")
    dq, dk, dv, db, dg, dA = run(inputs, options)
    assert dq.shape == dk.shape == dg.shape == (2, 40, 4, 8)
    assert dv.shape == (2, 40, 4, 12) and dv.dtype == np.float16
    assert db.shape == (2, 40, 4)
    assert dA.shape == (2, 40, 4, 16)
    for out in (dq, dk, db, dg, dA):
        assert out.dtype == np.float32 and out.flags.c_contiguous


@pytest.mark.parametrize("backend", ["cpu", "cpu-ref"])
def test_varlen_with_and_without_chunk_indices(backend):
    inputs, options = make_problem(seqlens=[37, 64, 1, 0, 50], BT=32, K=16, V=16)
    without = run(inputs, options, backend=backend)
    indices = kk.chunk_indices(options["cu_seqlens"], 32)
    for dtype in (np.int64, np.int32):
        with_indices = run(inputs, options, chunk_indices=indices.astype(dtype), backend=backend)
        for a, b in zip(without, with_indices):
            np.testing.assert_array_equal(a, b)


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
    [dict(B=2, T=50, H=2, HV=4, K=12, V=20, BT=16, x="float16"),
     dict(seqlens=[30, 1, 33], K=16, V=8, BT=32, state_v_first=True)],
    ids=["fixed-fp16-gva", "varlen-fp32-svf"],
)
def test_non_contiguous_inputs(args):
    inputs, options = make_problem(seed=3, **args)
    rng = np.random.default_rng(5)
    strided = {name: _strided_copy(inputs[name], rng) for name in INPUT_NAMES}
    # The reference reads each element through its strides: the results must be identical.
    expected = run(inputs, options, backend="cpu-ref")
    for a, b in zip(run(strided, options, backend="cpu-ref"), expected):
        np.testing.assert_array_equal(a, b)
    assert_close_all(run(strided, options), expected, PASS_BAR[args.get("x", "float32")])


def test_outputs_fully_written(monkeypatch):
    """Outputs start as NaN; every element must be overwritten (dA's unused columns with 0)."""

    def poisoned(shape, dtype):
        return np.full(shape, np.nan, dtype=dtype)

    monkeypatch.setattr(numpy_path, "new_output", poisoned)
    for args in (dict(T=100, K=32, V=48, BT=64), dict(seqlens=[37, 1, 0, 50], BT=16)):
        inputs, options = make_problem(**args)
        for backend in ("cpu", "cpu-ref"):
            for name, out in zip(("dq", "dk", "dv", "db", "dg", "dA"), run(inputs, options,
                                                                            backend=backend)):
                assert np.isfinite(out).all(), f"{backend} left {name} partly unwritten"


def test_inputs_are_not_modified():
    inputs, options = make_problem(T=70, BT=32)
    before = {name: a.copy() for name, a in inputs.items()}
    run(inputs, options)
    for name, a in inputs.items():
        np.testing.assert_array_equal(a, before[name], err_msg=name)


def test_repeated_runs_are_identical():
    inputs, options = make_problem(B=2, T=200, H=2, K=64, V=64, BT=64)
    first = run(inputs, options)
    for a, b in zip(first, run(inputs, options)):
        np.testing.assert_array_equal(a, b)


def test_scale_none_is_inverse_sqrt_k():
    inputs, options = make_problem(T=40, K=16, V=8, BT=16)
    default = run(inputs, {**options, "scale": None})
    explicit = run(inputs, {**options, "scale": 16**-0.5})
    for a, b in zip(default, explicit):
        np.testing.assert_array_equal(a, b)


def test_positional_arguments_follow_spec_order():
    inputs, options = make_problem(seqlens=[20, 30], BT=16, K=8, V=8)
    positional = kk.chunk_kda_bwd_wy_dqkg_fused(
        *(inputs[n] for n in INPUT_NAMES), None, options["cu_seqlens"], 16, None, False)
    for a, b in zip(positional, run(inputs, options)):
        np.testing.assert_array_equal(a, b)


@needs_ml_dtypes
def test_bfloat16_numpy_equals_float32_widened_when_reference():
    """bf16 inputs widen exactly to float32; the float64 reference then differs only in dv's
    rounding to bf16."""
    inputs, options = make_problem(T=64, BT=32, x="bfloat16", h_dtype="x")
    widened = {n: a.astype(np.float32) if a.dtype.name == "bfloat16" else a
               for n, a in inputs.items()}
    bf16 = run(inputs, options, backend="cpu-ref")
    f32 = run(widened, options, backend="cpu-ref")
    for name, a, b in zip(("dq", "dk", "dv", "db", "dg", "dA"), bf16, f32):
        if name == "dv":
            np.testing.assert_array_equal(a, b.astype(a.dtype))
        else:
            np.testing.assert_array_equal(a, b)
