"""The torch face on CPU tensors, for both operators: the custom ops' registration (schema, fake
implementation), torch.compile tracing without graph breaks, strided and bfloat16 tensors,
kernel choice, errors. Skipped when torch is not installed."""

import numpy as np
import shutil

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the torch tests need it)")

import kda_kernels as kk  # noqa: E402
from kda_testing import (  # noqa: E402
    INPUT_NAMES,
    INTRA_INPUT_NAMES,
    INTRA_OUTPUT_NAMES,
    INTRA_PASS_BAR,
    PASS_BAR,
    assert_close_all,
    core_accepted_dtypes,
    listed_dtypes,
    make_intra_problem,
    make_problem,
    to_float64,
    to_torch,
    torch_intra_problem,
    torch_problem,
)


def op(inputs, options, **kw):
    return kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options, **kw)


def test_custom_op_is_registered():
    packet = torch.ops.kda_kernels.chunk_kda_bwd_wy_dqkg_fused
    schema = str(packet.default._schema)
    assert schema.startswith("kda_kernels::chunk_kda_bwd_wy_dqkg_fused(")
    assert "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)" in schema
    assert 'str? backend=None, str cuda_kernel="auto")' in schema


def test_cpu_tensors_equal_numpy_path():
    inputs, options = make_problem(seqlens=[30, 1, 40], BT=16, K=16, V=8, x="float16")
    expected = op(inputs, options)
    tensors = {name: torch.from_numpy(a) for name, a in inputs.items()}
    got = op(tensors, {**options, "cu_seqlens": torch.from_numpy(options["cu_seqlens"])})
    for t, a in zip(got, expected):
        assert isinstance(t, torch.Tensor)
        np.testing.assert_array_equal(t.numpy(), a)


@pytest.mark.parametrize("h_dtype", ["float32", "x"])
def test_cpu_bfloat16_tensors(h_dtype):
    inputs, options = torch_problem(x="bfloat16", h_dtype=h_dtype, T=70, H=2, HV=4, K=16, V=24,
                                    BT=32)
    reference = to_float64(op(inputs, options, backend="cpu-ref"))
    outputs = op(inputs, options)
    assert outputs[2].dtype == torch.bfloat16
    assert all(o.dtype == torch.float32 for i, o in enumerate(outputs) if i != 2)
    assert_close_all(to_float64(outputs), reference, PASS_BAR["bfloat16"])


def test_cpu_strided_tensors():
    inputs, options = torch_problem(x="float32", B=2, T=40, H=2, K=16, V=8, BT=16)
    # Same values, other storage orders: transposed T/H storage and every other element.
    strided = {}
    for name, t in inputs.items():
        if t.dim() >= 3 and t.shape[2] > 1:
            strided[name] = t.transpose(1, 2).contiguous().transpose(1, 2)
        else:
            strided[name] = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)[..., ::2]
            strided[name].copy_(t)
        assert not strided[name].is_contiguous()
    for a, b in zip(op(strided, options, backend="cpu-ref"), op(inputs, options,
                                                               backend="cpu-ref")):
        assert torch.equal(a, b)


def test_chunk_indices_takes_int32_or_int64_only():
    for dtype in (torch.float32, torch.uint8, torch.bool):
        with pytest.raises(TypeError, match="'cu_seqlens': expected dtype int32 or int64"):
            kk.chunk_indices(torch.tensor([0, 5, 40]).to(dtype), 16)


def test_chunk_indices_keeps_dtype():
    cu = torch.tensor([0, 1, 17, 17, 50], dtype=torch.int32)
    pairs = kk.chunk_indices(cu, 16)
    assert pairs.dtype == torch.int32
    assert pairs.tolist() == [[0, 0], [1, 0], [3, 0], [3, 1], [3, 2]]


def _op_args(inputs, options):
    return (*(inputs[n] for n in INPUT_NAMES), options.get("scale"), options.get("cu_seqlens"),
            options["chunk_size"], options.get("chunk_indices"), options["state_v_first"], None,
            "auto")


@pytest.mark.parametrize("varlen", [False, True], ids=["fixed", "varlen"])
def test_opcheck(varlen):
    """torch's own checks of a custom op: schema, fake implementation vs real, AOT dispatch."""
    shape = dict(seqlens=[20, 13]) if varlen else dict(B=2, T=33)
    inputs, options = torch_problem(x="float16", H=1, HV=2, K=8, V=8, BT=16, **shape)
    torch.library.opcheck(torch.ops.kda_kernels.chunk_kda_bwd_wy_dqkg_fused.default,
                          _op_args(inputs, options))


@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_compile_fullgraph_cpu(compiler):
    """aot_eager traces the way inductor would, without a C++ compiler; inductor itself lowers
    the custom op through its fallback, which once failed on a schema argument named `kernel`
    (the H200's torch.compile tests caught it)."""
    if compiler == "inductor" and shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("inductor on the cpu needs a C++ compiler (g++)")
    inputs, options = torch_problem(x="float32", T=48, K=16, V=16, BT=16)

    def step(q, k, v, v_new, g, beta, A, h, do, dh, dv):
        dq, dk, dv2, db, dg, dA = kk.chunk_kda_bwd_wy_dqkg_fused(
            q * 1.0, k, v, v_new, g, beta, A, h, do, dh, dv, chunk_size=16)
        return dq + dk, dv2, db, dg, dA

    compiled = torch.compile(step, fullgraph=True, backend=compiler)
    for a, b in zip(compiled(**inputs), step(**inputs)):
        assert torch.equal(a, b)


def test_errors_name_the_argument():
    inputs, options = torch_problem(T=32, K=8, V=8, BT=16)
    with pytest.raises(TypeError, match="argument 'k'"):
        op({**inputs, "k": inputs["k"].numpy()}, options)
    with pytest.raises(ValueError, match="argument 'q'"):
        op({**inputs, "q": inputs["q"][0]}, options)
    with pytest.raises(TypeError, match="argument 'g'"):
        op({**inputs, "g": inputs["g"].half()}, options)
    with pytest.raises(TypeError, match="argument 'beta'"):
        op({**inputs, "beta": inputs["beta"].to(torch.int8)}, options)
    with pytest.raises(ValueError, match="argument 'h'"):
        op({**inputs, "h": torch.cat([inputs["h"], inputs["h"]], dim=1)}, options)
    with pytest.raises(ValueError, match="argument 'A'"):
        op(inputs, {**options, "chunk_size": 32})
    with pytest.raises(ValueError, match="argument 'backend'"):
        op(inputs, options, backend="tpu")


def test_kernel_choice_on_cpu_tensors():
    inputs, options = torch_problem(T=32, K=8, V=8, BT=16)
    with pytest.raises(ValueError, match="kernel: simt is a cuda kernel; backend cpu takes "
                       "kernel auto"):
        op(inputs, options, kernel="simt")
    with pytest.raises(ValueError, match="argument 'kernel': expected one of"):
        op(inputs, options, kernel="fast")
    with pytest.raises(ValueError, match="argument 'kernel'"):
        op(inputs, options, kernel=None)  # not a str: refused before the dispatcher
    for a, b in zip(op(inputs, options, kernel="auto"), op(inputs, options)):
        assert torch.equal(a, b)


def test_custom_op_takes_keywords_and_defaults():
    """Called directly through torch.ops, the op fills in the schema's defaults."""
    inputs, options = torch_problem(T=32, K=8, V=8, BT=16)
    direct = torch.ops.kda_kernels.chunk_kda_bwd_wy_dqkg_fused(**inputs, chunk_size=16)
    for a, b in zip(direct, op(inputs, options)):
        assert torch.equal(a, b)


def test_torch_path_argument_kinds():
    """What torch's dispatcher would report without naming the argument (or not at all). The
    public function looks at the tensors only when the op fails (issue 13's host budget): its
    named error then stands alone, as if checked first, and a bad tensor still comes before a
    bad option."""
    inputs, options = torch_problem(T=32, K=8, V=8, BT=16)
    with pytest.raises(TypeError, match="argument 'k': expected a torch.Tensor") as raised:
        op({**inputs, "k": None}, options)
    assert raised.value.__context__ is None and raised.value.__cause__ is None
    with pytest.raises(ValueError, match="argument 'backend'"):
        op(inputs, options, backend=1)
    with pytest.raises(TypeError, match="argument 'k': expected a torch.Tensor"):
        op({**inputs, "k": None}, options, backend=1)
    with pytest.raises(TypeError, match="argument 'k': expected a torch.Tensor"):
        op({**inputs, "k": None}, {**options, "scale": 1})  # an int scale: converted, after k
    # One meta tensor among real ones: the dispatcher would pick the fake implementation and
    # return uninitialized CPU outputs.
    with pytest.raises(ValueError, match="argument 'k': is on meta") as raised:
        op({**inputs, "k": inputs["k"].to("meta")}, options)
    assert raised.value.__context__ is None
    with pytest.raises(ValueError, match="argument 'k': is on cpu but q is on meta"):
        op({**inputs, "q": inputs["q"].to("meta")}, options)
    # All on meta is shape inference: outputs on meta with the SPEC shapes.
    meta = op({n: t.to("meta") for n, t in inputs.items()}, options)
    assert all(o.device.type == "meta" for o in meta)
    assert meta[0].shape == inputs["q"].shape and meta[2].dtype == inputs["v"].dtype


@pytest.mark.parametrize("empty", [dict(B=2, T=0), dict(B=0, T=20)], ids=["T0", "B0"])
def test_empty_problems(empty):
    inputs, options = torch_problem(K=8, V=8, BT=16, **empty)
    outputs = op(inputs, options)
    assert [o.shape for o in outputs][0] == inputs["q"].shape
    assert all(o.numel() == 0 for o in outputs)


def test_numpy_arguments_with_torch_q_are_rejected():
    inputs, options = torch_problem(seqlens=[10, 22], K=8, V=8, BT=16)
    with pytest.raises(TypeError, match="argument 'cu_seqlens'"):
        op(inputs, {**options, "cu_seqlens": options["cu_seqlens"].numpy()})


def test_to_torch_roundtrip_bfloat16():
    pytest.importorskip("ml_dtypes", reason="bfloat16 NumPy arrays need ml_dtypes")
    inputs, _ = make_problem(T=16, K=4, V=4, BT=16, x="bfloat16")
    t = to_torch(inputs["q"])
    assert t.dtype == torch.bfloat16
    np.testing.assert_array_equal(t.float().numpy(), inputs["q"].astype(np.float32))


# --- chunk_kda_bwd_intra -------------------------------------------------------------------


def intra(inputs, options, **kw):
    return kk.chunk_kda_bwd_intra(**inputs, **options, **kw)


def test_intra_custom_op_is_registered():
    schema = str(torch.ops.kda_kernels.chunk_kda_bwd_intra.default._schema)
    assert schema == (
        "kda_kernels::chunk_kda_bwd_intra(Tensor q, Tensor k, Tensor g, Tensor beta, "
        "Tensor dAqk, Tensor dAkk, Tensor dq, Tensor dk, Tensor db, Tensor dg, "
        "Tensor? cu_seqlens=None, Tensor? chunk_indices=None, SymInt chunk_size=64, "
        'bool safe_gate=False, str? backend=None, str cuda_kernel="auto") '
        "-> (Tensor, Tensor, Tensor, Tensor)")


@pytest.mark.parametrize("x", ["float32", "float16"])
def test_intra_cpu_tensors_equal_numpy_path(x):
    inputs, options = make_intra_problem(seqlens=[30, 1, 40], BT=16, K=16, H=1, HV=2, x=x,
                                         beta_dtype="float32", safe_gate=True)
    expected = intra(inputs, options)
    tensors = {name: torch.from_numpy(a) for name, a in inputs.items()}
    got = intra(tensors, {**options, "cu_seqlens": torch.from_numpy(options["cu_seqlens"])})
    assert len(got) == 4
    for t, a in zip(got, expected):
        assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
        np.testing.assert_array_equal(t.numpy(), a)


@pytest.mark.parametrize("beta_dtype", [None, "float32"], ids=["beta-x", "beta-f32"])
def test_intra_cpu_bfloat16_tensors(beta_dtype):
    inputs, options = torch_intra_problem(x="bfloat16", beta_dtype=beta_dtype, T=70, H=2, HV=4,
                                          K=16, BT=32)
    reference = to_float64(intra(inputs, options, backend="cpu-ref"))
    outputs = intra(inputs, options)
    assert all(o.dtype == torch.float32 for o in outputs)
    assert_close_all(to_float64(outputs), reference, INTRA_PASS_BAR["bfloat16"],
                     names=INTRA_OUTPUT_NAMES)


def test_intra_cpu_strided_tensors():
    inputs, options = torch_intra_problem(x="float32", B=2, T=40, H=2, K=16, BT=16)
    strided = {}
    for name, t in inputs.items():
        if t.dim() >= 3 and t.shape[2] > 1:
            strided[name] = t.transpose(1, 2).contiguous().transpose(1, 2)
        else:
            strided[name] = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)[..., ::2]
            strided[name].copy_(t)
        assert not strided[name].is_contiguous()
    for a, b in zip(intra(strided, options, backend="cpu-ref"),
                    intra(inputs, options, backend="cpu-ref")):
        assert torch.equal(a, b)


def _intra_op_args(inputs, options):
    return (*(inputs[n] for n in INTRA_INPUT_NAMES), options.get("cu_seqlens"),
            options.get("chunk_indices"), options["chunk_size"], options["safe_gate"], None,
            "auto")


@pytest.mark.parametrize("varlen", [False, True], ids=["fixed", "varlen"])
def test_intra_opcheck(varlen):
    """torch's own checks of a custom op: schema, fake implementation vs real, AOT dispatch."""
    shape = dict(seqlens=[20, 13]) if varlen else dict(B=2, T=33)
    inputs, options = torch_intra_problem(x="float16", H=1, HV=2, K=8, BT=16, **shape)
    if varlen:
        options["chunk_indices"] = kk.chunk_indices(options["cu_seqlens"], 16)
    torch.library.opcheck(torch.ops.kda_kernels.chunk_kda_bwd_intra.default,
                          _intra_op_args(inputs, options))


def test_intra_compile_fullgraph_cpu():
    inputs, options = torch_intra_problem(x="float32", T=48, K=16, BT=16)

    def step(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg):
        dq2, dk2, db2, dg2 = kk.chunk_kda_bwd_intra(
            q * 1.0, k, g, beta, dAqk, dAkk, dq, dk, db, dg, chunk_size=16, safe_gate=True)
        return dq2 + dk2, db2, dg2

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for a, b in zip(compiled(**inputs), step(**inputs)):
        assert torch.equal(a, b)


def test_intra_errors_name_the_argument():
    inputs, options = torch_intra_problem(T=32, K=8, BT=16)
    with pytest.raises(TypeError, match="chunk_kda_bwd_intra: argument 'k'"):
        intra({**inputs, "k": inputs["k"].numpy()}, options)
    with pytest.raises(ValueError, match="argument 'q'"):
        intra({**inputs, "q": inputs["q"][0]}, options)
    with pytest.raises(TypeError, match="argument 'g'"):
        intra({**inputs, "g": inputs["g"].half()}, options)
    with pytest.raises(TypeError, match="argument 'dAkk'"):
        intra({**inputs, "dAkk": inputs["dAkk"].to(torch.int8)}, options)
    with pytest.raises(ValueError, match="argument 'db'"):
        intra({**inputs, "db": torch.cat([inputs["db"], inputs["db"]], dim=1)}, options)
    with pytest.raises(ValueError, match="argument 'dAqk'"):
        intra(inputs, {**options, "chunk_size": 32})
    with pytest.raises(TypeError, match="argument 'safe_gate'"):
        intra(inputs, {**options, "safe_gate": "yes"})
    with pytest.raises(ValueError, match="argument 'backend'"):
        intra(inputs, options, backend="tpu")
    with pytest.raises(ValueError, match="argument 'kernel'"):
        intra(inputs, options, kernel="tensor-core")
    with pytest.raises(ValueError, match="kernel: sm80_mma is a cuda kernel; backend cpu-ref"):
        intra(inputs, options, backend="cpu-ref", kernel="sm80_mma")


def test_intra_torch_path_argument_kinds():
    inputs, options = torch_intra_problem(T=32, K=8, BT=16)
    with pytest.raises(TypeError, match="argument 'dg': expected a torch.Tensor"):
        intra({**inputs, "dg": None}, options)
    with pytest.raises(TypeError, match="argument 'chunk_indices'"):
        intra(inputs, {**options, "chunk_indices": [[0, 0]]})
    with pytest.raises(ValueError, match="argument 'dq': is on meta"):
        intra({**inputs, "dq": inputs["dq"].to("meta")}, options)
    meta = intra({n: t.to("meta") for n, t in inputs.items()}, options)
    assert all(o.device.type == "meta" and o.dtype == torch.float32 for o in meta)
    assert meta[0].shape == inputs["dq"].shape and meta[2].shape == inputs["db"].shape


@pytest.mark.parametrize("name", ["chunk_kda_bwd_wy_dqkg_fused", "chunk_kda_bwd_intra"])
def test_the_op_refuses_meta_tensors_among_real_ones(name):
    """Called through torch.ops, a meta tensor among real ones sends the call to the fake
    implementation, which refuses it naming the tensor (it would hand back uninitialized real
    outputs); all-meta calls are shape inference."""
    if name == "chunk_kda_bwd_wy_dqkg_fused":
        inputs, options = torch_problem(T=32, K=8, V=8, BT=16)
    else:
        inputs, options = torch_intra_problem(T=32, K=8, BT=16)
    packet = getattr(torch.ops.kda_kernels, name)
    with pytest.raises(ValueError, match=f"{name}: argument 'k': is on meta but q is on cpu; "
                       "tensors on the meta device only go with other meta tensors"):
        packet(**{**inputs, "k": inputs["k"].to("meta")}, **options)
    with pytest.raises(ValueError, match="argument 'k': is on cpu but q is on meta"):
        packet(**{**inputs, "q": inputs["q"].to("meta")}, **options)
    meta = packet(**{n: t.to("meta") for n, t in inputs.items()}, **options)
    assert all(o.device.type == "meta" for o in meta)


def test_intra_custom_op_takes_keywords_and_defaults():
    inputs, options = torch_intra_problem(T=32, K=8, BT=16)
    direct = torch.ops.kda_kernels.chunk_kda_bwd_intra(**inputs, chunk_size=16)
    for a, b in zip(direct, intra(inputs, options)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("empty", [dict(B=2, T=0), dict(B=0, T=20)], ids=["T0", "B0"])
def test_intra_empty_problems(empty):
    inputs, options = torch_intra_problem(K=8, BT=16, **empty)
    outputs = intra(inputs, options)
    assert outputs[0].shape == inputs["dq"].shape
    assert all(o.numel() == 0 for o in outputs)


def test_invalid_problem_whose_outputs_cannot_be_allocated_names_the_argument():
    """Inputs broadcast (stride 0) to T = 2^40 with a bad chunk_size: the outputs (64 TiB each)
    cannot be allocated, and the error is the core's about chunk_size, not torch's allocation
    failure (the torch path allocates first, and validates when that fails)."""
    inputs, options = torch_problem(T=32, K=8, V=8, BT=16)
    huge = {}
    for name, t in inputs.items():
        if name in ("h", "dh"):
            huge[name] = t
            continue
        shape = (1, 2**40) + tuple(t.shape[2:])
        if name == "A":
            shape = shape[:-1] + (48,)
        huge[name] = t.reshape(-1)[:1].reshape((1,) * t.dim()).expand(shape)
    with pytest.raises(ValueError, match="argument 'chunk_size': expected 16, 32 or 64"):
        op(huge, {**options, "chunk_size": 48})
    # Valid but too large (h, dh broadcast to the chunk count): the allocation error stands.
    for name in ("h", "dh"):
        huge[name] = inputs[name][:, :1].expand((1, 2**40 // 16) + tuple(inputs[name].shape[2:]))
    huge["A"] = huge["A"][..., :16]
    with pytest.raises(RuntimeError, match="alloc"):
        op(huge, options)


# --- the error contract's gaps (issue 15) ---------------------------------------------------


@pytest.mark.parametrize("which", ["wy", "intra"])
def test_non_strided_tensors_are_refused_naming_the_argument(which):
    """A sparse q reached the dispatcher, which raised NotImplementedError ("Could not run ...
    with arguments from the 'SparseCPU' backend") before our dense check could name it (so the
    issue saw it; torch 2.11 sends sparse CPU tensors on to our check). A nested tensor, strided
    by its layout, still does that with torch 2.11 ('NestedTensorCPU' backend). The public
    function replaces such an error with the named one."""
    if which == "wy":
        inputs, options = torch_problem(T=32, K=8, V=8, BT=16)
        call = op
    else:
        inputs, options = torch_intra_problem(T=32, K=8, BT=16)
        call = intra
    with pytest.raises(ValueError, match=r"argument 'q': expected a dense \(strided\) tensor, "
                       r"got torch.sparse_coo"):
        call({**inputs, "q": inputs["q"].to_sparse()}, options)
    with pytest.raises(ValueError, match=r"argument 'k': expected a dense \(strided\) tensor"):
        call({**inputs, "k": inputs["k"].reshape(-1, inputs["k"].shape[-1]).to_sparse_csr()
              .to_dense().reshape(inputs["k"].shape).to_sparse()}, options)
    nested = torch.nested.nested_tensor([inputs["q"][0]])
    with pytest.raises(ValueError, match=r"argument 'q': expected a dense \(strided\) tensor, "
                       r"got a nested tensor"):
        call({**inputs, "q": nested}, options)
    cu = torch.tensor([0, 32], dtype=torch.int64).to_sparse()
    with pytest.raises(ValueError, match=r"argument 'cu_seqlens': expected a dense"):
        call(inputs, {**options, "cu_seqlens": cu})


@pytest.mark.parametrize("name", ["chunk_kda_bwd_wy_dqkg_fused", "chunk_kda_bwd_intra"])
def test_schema_defaults_are_the_public_functions(name):
    """torch.ops.kda_kernels.<op> called directly needs only the required tensors: every other
    schema argument has the public function's default (kernel is cuda_kernel there)."""
    import inspect

    public = inspect.signature(getattr(kk, name)).parameters
    schema = getattr(torch.ops.kda_kernels, name).default._schema
    for arg in schema.arguments:
        param = public["kernel" if arg.name == "cuda_kernel" else arg.name]
        if param.default is inspect.Parameter.empty:
            assert not arg.has_default_value(), arg.name
        else:
            assert arg.has_default_value(), f"{arg.name} has no default in the schema"
            assert arg.default_value == param.default, arg.name
    assert len(schema.arguments) == len(public)


# --- None, a dtype libkda has no code for, a q that is no tensor ----------------------------

WY = "chunk_kda_bwd_wy_dqkg_fused"
INTRA = "chunk_kda_bwd_intra"


def _varlen_problem(fla_name):
    """Torch inputs and options (cu_seqlens and chunk_indices given) of a small varlen problem."""
    make = torch_problem if fla_name == WY else torch_intra_problem
    extra = dict(V=8) if fla_name == WY else {}
    inputs, options = make(seqlens=[10, 22], K=8, BT=16, **extra)
    options["chunk_indices"] = kk.chunk_indices(options["cu_seqlens"], 16)
    return inputs, options


@pytest.mark.parametrize("fla_name", [WY, INTRA])
def test_the_op_called_directly_names_a_required_tensor_given_none(fla_name):
    """torch.ops.kda_kernels.<op> itself, not the public function: the dispatcher passes None
    for a required tensor on to the implementation (an undefined tensor in C++), where the
    compiled op raised "RuntimeError: Unimplemented scalar type" and the python op an
    AttributeError."""
    inputs, options = _varlen_problem(fla_name)
    packet = getattr(torch.ops.kda_kernels, fla_name)
    for name in inputs:
        with pytest.raises(TypeError, match=rf"^{fla_name}: argument '{name}': expected a "
                           r"torch.Tensor, got None$"):
            packet(**{**inputs, name: None}, **options)


@pytest.mark.parametrize("fla_name", [WY, INTRA])
def test_foreign_dtype_lists_only_what_the_argument_takes(fla_name):
    """A tensor of a dtype libkda has no code for (bool, int8, uint8, complex64) is refused by the
    op itself, naming the argument and the dtypes it takes: those libkda's validation takes for
    it. Every such error listed all the dtypes libkda has a code for (ints for q, floats for
    cu_seqlens). Through the public function and the op called directly."""
    pytest.importorskip("ml_dtypes", reason="the dtypes libkda takes include bfloat16")
    inputs, options = _varlen_problem(fla_name)
    calls = (getattr(kk, fla_name), getattr(torch.ops.kda_kernels, fla_name))
    for name in (*inputs, "cu_seqlens", "chunk_indices"):
        accepted = core_accepted_dtypes(fla_name, name)
        for foreign in (torch.bool, torch.int8, torch.uint8, torch.complex64):
            args = {**inputs, **options}
            args[name] = args[name].to(foreign)
            for call in calls:
                with pytest.raises(TypeError, match=rf"^{fla_name}: argument '{name}': expected "
                                   "dtype ") as info:
                    call(**args)
                assert listed_dtypes(str(info.value)) == accepted, (foreign, str(info.value))


@pytest.mark.parametrize("fla_name", [WY, INTRA])
def test_a_q_that_is_no_tensor_among_torch_tensors_is_told_to_be_one(fla_name):
    """q neither a tensor nor an array (None, a list) sends the call down the NumPy path, which
    said "expected a numpy.ndarray" though every other argument is a torch tensor."""
    inputs, options = _varlen_problem(fla_name)
    for q in (None, inputs["q"].tolist()):
        with pytest.raises(TypeError, match=rf"^{fla_name}: argument 'q': expected a "
                           r"torch.Tensor like the other arguments, got "):
            getattr(kk, fla_name)(**{**inputs, "q": q}, **options)
