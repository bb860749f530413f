"""The operator on CUDA tensors: against the float64 CPU reference over the option matrix, the
golden files, fla's Triton kernel in the same process, torch.compile, CUDA graphs, streams and
errors. Skipped without torch, a CUDA device, or a libkda built with the cuda backend."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the GPU tests need it)")

import kda_kernels as kk  # noqa: E402
from kda_testing import (  # noqa: E402
    GOLDEN_BAR,
    INPUT_NAMES,
    OUTPUT_NAMES,
    PASS_BAR,
    assert_close_all,
    err_ratio,
    golden_case,
    golden_dir,
    to_float64,
    to_torch,
    torch_problem,
    torch_to_device,
)

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    pytest.mark.skipif(torch.cuda.is_available() and not kk.backend_available("cuda"),
                       reason="the loaded libkda was built without the cuda backend"),
]


def op(inputs, options, **kw):
    return kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options, **kw)


def reference(inputs, options):
    """The float64 reference on CPU copies of the same tensors."""
    cpu_inputs, cpu_options = torch_to_device(inputs, options, "cpu")
    return to_float64(op(cpu_inputs, cpu_options, backend="cpu-ref"))


def case(name, **args):
    return pytest.param(args, id=name)


CASES = [
    case("fp32-B2-BT64", B=2, T=256, H=2, K=64, V=64, BT=64),
    case("fp16-hf32-BT32-tail", T=200, H=2, K=128, V=128, BT=32, x="float16"),
    case("fp16-hx-BT64", T=128, H=2, K=128, V=128, BT=64, x="float16", h_dtype="x"),
    case("bf16-hf32-BT16", T=100, H=3, K=32, V=48, BT=16, x="bfloat16"),
    case("bf16-hx-BT64", B=2, T=300, H=2, K=128, V=128, BT=64, x="bfloat16", h_dtype="x"),
    case("bf16-beta-f32", T=64, K=64, V=64, BT=32, x="bfloat16", beta_dtype="float32"),
    case("fp32-gva", T=100, H=2, HV=4, K=32, V=32, BT=32),
    case("bf16-gva-svf", T=150, H=2, HV=6, K=64, V=32, BT=64, x="bfloat16", state_v_first=True),
    case("fp16-odd-K7-V33", T=45, K=7, V=33, BT=16, x="float16"),
    case("fp32-odd-K33-V7", T=45, K=33, V=7, BT=32),
    case("fp32-K256-V256", T=64, H=1, K=256, V=256, BT=64),
    case("fp32-varlen", seqlens=[37, 64, 1, 0, 50], K=64, V=64, BT=32),
    case("bf16-varlen", seqlens=[64, 65, 171], K=128, V=128, BT=64, x="bfloat16"),
    case("fp16-varlen-svf", seqlens=[5, 16, 17, 40], K=32, V=16, BT=16, x="float16",
         state_v_first=True),
]


@pytest.mark.parametrize("args", CASES)
def test_matches_reference(args):
    inputs, options = torch_problem(device="cuda", seed=1, **args)
    expected = reference(inputs, options)
    outputs = op(inputs, options)
    assert all(o.is_cuda and o.device == inputs["q"].device for o in outputs)
    assert_close_all(to_float64(outputs), expected, PASS_BAR[args.get("x", "float32")])


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_varlen_device_chunk_indices(index_dtype):
    inputs, options = torch_problem(device="cuda", seqlens=[37, 64, 1, 0, 50], K=64, V=32, BT=32,
                                    x="bfloat16")
    cu = options["cu_seqlens"].to(index_dtype)
    without = op(inputs, {**options, "cu_seqlens": cu})
    indices = kk.chunk_indices(cu, 32)
    assert indices.is_cuda and indices.dtype == index_dtype
    with_indices = op(inputs, {**options, "cu_seqlens": cu, "chunk_indices": indices})
    for a, b in zip(without, with_indices):
        assert torch.equal(a, b)


def test_strided_inputs():
    inputs, options = torch_problem(device="cuda", B=2, T=130, H=2, HV=4, K=64, V=32, BT=64,
                                    x="bfloat16")
    strided = {}
    for name, t in inputs.items():
        wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
        strided[name] = wide[..., ::2] if name in ("q", "v", "h") else wide[..., t.shape[-1]:]
        strided[name].copy_(t)
    assert_close_all(to_float64(op(strided, options)), reference(inputs, options),
                     PASS_BAR["bfloat16"])


@pytest.mark.parametrize("case", [
    "fixed_b2_t128_k64_bt64_fp32", "tail_t100_k32_v48_bt16_fp32", "varlen_5seq_k64_bt32_fp32",
    "gva_h2_hv4_k32_bt32_fp32", "svf_k64_v32_bt64_fp32", "fixed_t192_k64_bt64_fp16",
    "varlen_3seq_k128_bt64_bf16",
])
def test_golden(case):
    path = golden_dir() / f"{case}.safetensors"
    assert path.is_file(), f"golden file missing: {path} (set KDA_GOLDEN_DIR)"
    inputs, options, expected, x = golden_case(path)
    tensors = {name: to_torch(a, "cuda") for name, a in inputs.items()}
    if x == "bfloat16":  # without ml_dtypes golden_case widens bf16 to float32: narrow back
        tensors = {n: t.bfloat16() if n not in ("g", "h", "dh") else t for n, t in tensors.items()}
    if "cu_seqlens" in options:
        options["cu_seqlens"] = to_torch(options["cu_seqlens"], "cuda")
    outputs = op(tensors, options)
    assert_close_all(to_float64(outputs), expected, GOLDEN_BAR[x])


@pytest.mark.parametrize("x", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("kernel", ["auto", "simt", "sm80_mma"])
def test_kernel_choice(kernel, x):
    """Each kernel, chosen through the kernel= keyword in one process, meets the bar on a
    problem the tensor-core kernel takes (K = V = 128; float32 X runs its 3xTF32 form)."""
    inputs, options = torch_problem(device="cuda", T=256, H=2, K=128, V=128, BT=64, x=x)
    assert_close_all(to_float64(op(inputs, options, kernel=kernel)), reference(inputs, options),
                     PASS_BAR[x], kernel)


def test_sm80_mma_refuses_what_it_cannot_take():
    # K = 32 is outside its head dims (64, 128) for every X; simt takes it.
    inputs, options = torch_problem(device="cuda", T=128, K=32, V=64, BT=64, x="float32")
    with pytest.raises(NotImplementedError, match="sm80_mma"):
        op(inputs, options, kernel="sm80_mma")
    assert_close_all(to_float64(op(inputs, options, kernel="simt")), reference(inputs, options),
                     PASS_BAR["float32"])


def test_kernel_environment_variable():
    """KDA_CUDA_KERNEL, read once when kda_kernels is imported, names the kernel that
    kernel='auto' runs; an explicit kernel= wins; an unknown value is an error naming the
    variable at each call that relies on it (in fresh interpreters: the package reads it at
    import)."""
    import os
    import subprocess
    import sys

    code = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
import kda_kernels as kk
from kda_testing import torch_problem
inputs, options = torch_problem(device="cuda", T=256, H=2, K=128, V=128, BT=64, x="bfloat16")
run = lambda **kw: kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options, **kw)
try:
    auto = run()
except ValueError as e:
    print("ERROR", e)
    sys.exit(0)
same = lambda a, b: all(torch.equal(x, y) for x, y in zip(a, b))
print("AUTO_IS", "simt" if same(auto, run(kernel="simt")) else "",
      "sm80_mma" if same(auto, run(kernel="sm80_mma")) else "",
      "EXPLICIT", same(run(kernel="sm80_mma"), run(kernel="sm80_mma")))
"""
    tests_dir = os.path.dirname(os.path.abspath(__file__))

    def run_with(value):
        env = dict(os.environ)
        env.pop("KDA_CUDA_KERNEL", None)
        if value is not None:
            env["KDA_CUDA_KERNEL"] = value
        result = subprocess.run([sys.executable, "-c", code, tests_dir], capture_output=True,
                                text=True, env=env, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout.strip().splitlines()[-1]

    assert run_with("simt").startswith("AUTO_IS simt ")
    assert run_with(None).startswith("AUTO_IS  sm80_mma")
    said = run_with("fastest")
    assert said.startswith("ERROR") and "KDA_CUDA_KERNEL" in said and "'fastest'" in said, said


def test_runs_on_the_current_stream():
    inputs, options = torch_problem(device="cuda", T=256, K=128, V=128, BT=64, x="bfloat16")
    expected = op(inputs, options)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = op(inputs, options)
    side.synchronize()
    for a, b in zip(got, expected):
        assert torch.equal(a, b)


def test_no_host_synchronization():
    inputs, options = torch_problem(device="cuda", seqlens=[100, 28], K=64, V=64, BT=64,
                                    x="bfloat16")
    op(inputs, options)  # first call loads the library
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        op(inputs, options)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("varlen", [False, True], ids=["fixed", "varlen"])
def test_compile_fullgraph(varlen):
    shape = dict(seqlens=[100, 1, 155]) if varlen else dict(B=2, T=256)
    inputs, options = torch_problem(device="cuda", H=2, K=128, V=128, BT=64, x="bfloat16",
                                    **shape)

    def step(q, k, v, v_new, g, beta, A, h, do, dh, dv, cu_seqlens=None):
        dq, dk, dv2, db, dg, dA = kk.chunk_kda_bwd_wy_dqkg_fused(
            q * 2, k, v, v_new, g, beta, A, h, do, dh, dv, cu_seqlens=cu_seqlens,
            chunk_size=64)
        return dq.sum(dim=2), dk, dv2 * 2, db, dg, dA

    compiled = torch.compile(step, fullgraph=True)
    args = dict(inputs, cu_seqlens=options.get("cu_seqlens"))
    for a, b in zip(compiled(**args), step(**args)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("varlen", [False, True], ids=["fixed", "varlen"])
def test_cuda_graph_capture_and_replay(varlen):
    shape = dict(seqlens=[100, 1, 155]) if varlen else dict(B=2, T=256)
    static, options = torch_problem(device="cuda", H=2, K=128, V=128, BT=64, x="bfloat16",
                                    **shape)
    if varlen:
        options["chunk_indices"] = kk.chunk_indices(options["cu_seqlens"], 64)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside capture, as torch's graph docs ask
        for _ in range(2):
            op(static, options)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = op(static, options)

    fresh, _ = torch_problem(device="cuda", seed=7, H=2, K=128, V=128, BT=64, x="bfloat16",
                             **shape)
    for name in INPUT_NAMES:
        static[name].copy_(fresh[name])
    graph.replay()
    torch.cuda.synchronize()
    for name, a, b in zip(OUTPUT_NAMES, captured, op(fresh, options)):
        assert torch.equal(a, b), name


def test_errors_on_cuda():
    inputs, options = torch_problem(device="cuda", T=64, K=32, V=32, BT=32)
    with pytest.raises(ValueError, match="argument 'h'"):
        op({**inputs, "h": inputs["h"].cpu()}, options)
    with pytest.raises(ValueError, match="argument 'q'"):
        op({**inputs, "q": inputs["q"][0]}, options)
    with pytest.raises(TypeError, match="argument 'A'"):
        op({**inputs, "A": inputs["A"].half()}, options)
    with pytest.raises(ValueError, match="backend"):
        op(inputs, options, backend="cpu")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_second_device():
    inputs, options = torch_problem(device="cuda:1", T=128, K=64, V=64, BT=64, x="bfloat16")
    outputs = op(inputs, options)
    assert all(o.device == torch.device("cuda:1") for o in outputs)
    assert_close_all(to_float64(outputs), reference(inputs, options), PASS_BAR["bfloat16"])


@pytest.mark.parametrize("x", ["bfloat16", "float16"])
def test_against_fla_triton(x):
    """fla's Triton kernel and ours on the same inputs in one process: ours within SPEC's pass
    bar of the float64 reference, and within the golden bar of fla's outputs."""
    pytest.importorskip("fla", reason="flash-linear-attention (fla) is not installed")
    from fla.ops.kda.chunk_bwd import chunk_kda_bwd_wy_dqkg_fused as fla_op
    from fla_tuning import trim_fla_autotuners

    import kda_kernels.fla

    trim_fla_autotuners()  # accuracy does not depend on fla's tuning; autotuning takes minutes
    kda_kernels.fla.disable()  # fla's own kernel, not a dispatch to ours
    inputs, options = torch_problem(device="cuda", B=1, T=512, H=4, K=128, V=128, BT=64, x=x)
    expected = reference(inputs, options)
    ours = to_float64(op(inputs, options))
    # fla's function needs the scale spelled out (its chunk_kda fills in K ** -0.5 before).
    theirs = to_float64(fla_op(**inputs, **{**options, "scale": 128**-0.5}))
    ratios_ours = assert_close_all(ours, expected, PASS_BAR[x], "kda_kernels")
    ratios_fla = {n: err_ratio(t, e) for n, t, e in zip(OUTPUT_NAMES, theirs, expected)}
    # Shown by `pytest -rP` (and under -n, where workers' output is otherwise lost).
    print(f"\n[{x}] err_ratio vs float64 reference, per output {OUTPUT_NAMES}")
    print("  kda_kernels: " + " ".join(f"{ratios_ours[n]:.2e}" for n in OUTPUT_NAMES))
    print("  fla Triton:  " + " ".join(f"{ratios_fla[n]:.2e}" for n in OUTPUT_NAMES))
    assert_close_all(ours, theirs, GOLDEN_BAR[x], "kda_kernels vs fla")
