"""The torch ops' two implementations (_torch_ext): which one a process gets and why, and that
the compiled one (libkda_torch, C++) computes and fails exactly like the ctypes one (bitwise
outputs on the CPU backends, the same exception classes and messages). The compiled op is
loaded once per process, so the comparisons call both implementations directly: the op
through torch's dispatcher (``.default``) and the ctypes implementation (``run_ctypes``). Run
with KDA_TORCH_OP=python they compare the python op with itself, and the tests that need the
compiled op skip, saying so. Needs torch, not a GPU."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import kda_kernels as kk  # noqa: E402
from kda_kernels import _locate, _signatures, _torch_ext, _torch_op  # noqa: E402
from kda_testing import (  # noqa: E402
    INPUT_NAMES,
    INTRA_INPUT_NAMES,
    library_loads,
    torch_intra_problem,
    torch_problem,
)

pytestmark = pytest.mark.skipif(not library_loads(), reason="libkda not found (KDA_LIBRARY)")

WY = "chunk_kda_bwd_wy_dqkg_fused"
INTRA = "chunk_kda_bwd_intra"
PACKAGE_PARENT = str(Path(kk.__file__).resolve().parents[1])


def compiled_beside(library):
    return Path(library).parent / _locate.torch_op_file_name(_torch_ext.torch_release())


def compiled_active():
    return kk.torch_op_backend() == "compiled"


needs_compiled = pytest.mark.skipif(
    not compiled_active(),
    reason=f"the torch ops are not the compiled ones here: {kk.torch_op_backend(detail=True)}")


def test_the_compiled_op_is_used_where_it_was_built():
    built = compiled_beside(kk.library_path()).is_file()
    wanted = os.environ.get("KDA_TORCH_OP") or "auto"
    expected = "compiled" if built and wanted != "python" else "python"
    assert kk.torch_op_backend() == expected, kk.torch_op_backend(detail=True)
    detail = kk.torch_op_backend(detail=True)
    if expected == "compiled":
        assert detail == f"compiled ({compiled_beside(kk.library_path())})"
    else:
        assert detail.startswith("python (")


@pytest.mark.parametrize("sig", _signatures.SIGNATURES, ids=lambda s: s.op_name)
def test_one_schema_for_both_implementations(sig):
    """The compiled op's schema (written in C++) is the one the python op would register."""
    registered = str(getattr(torch.ops.kda_kernels, sig.fla_name).default._schema)
    assert registered == f"kda_kernels::{sig.fla_name}{_torch_op.OPS[sig.fla_name].schema}"


def wy_args(inputs, options, backend="cpu", kernel="auto"):
    return (*(inputs[n] for n in INPUT_NAMES), options.get("scale"), options.get("cu_seqlens"),
            options["chunk_size"], options.get("chunk_indices"), options["state_v_first"],
            backend, kernel)


def intra_args(inputs, options, backend="cpu", kernel="auto"):
    return (*(inputs[n] for n in INTRA_INPUT_NAMES), options.get("cu_seqlens"),
            options.get("chunk_indices"), options["chunk_size"], options["safe_gate"], backend,
            kernel)


def strided(inputs):
    """The same values in other storage orders: transposed T/H storage, or every other
    element."""
    out = {}
    for name, t in inputs.items():
        if t.dim() >= 3 and t.shape[2] > 1:
            out[name] = t.transpose(1, 2).contiguous().transpose(1, 2)
        else:
            out[name] = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)[..., ::2]
            out[name].copy_(t)
    return out


def assert_same_outputs(fla_name, args):
    op = _torch_op.OPS[fla_name]
    compiled = op.default(*args)
    ctypes_path = op.run_ctypes(*args)
    assert len(compiled) == len(ctypes_path) == len(_signatures.BY_FLA_NAME[fla_name].outputs)
    for i, (a, b) in enumerate(zip(compiled, ctypes_path)):
        assert a.dtype == b.dtype and a.shape == b.shape and a.is_contiguous(), i
        assert torch.equal(a, b), i


WY_CASES = {
    "bf16-gva-tail": dict(x="bfloat16", T=70, H=2, HV=4, K=16, V=24, BT=32),
    "fp16-hx-beta32-varlen": dict(x="float16", h_dtype="x", beta_dtype="float32",
                                  seqlens=[30, 1, 40], K=16, V=8, BT=16),
    "fp32-svf-scale": dict(x="float32", state_v_first=True, B=2, T=40, K=48, V=24, BT=16,
                           scale=0.3),
    "fp32-empty": dict(x="float32", B=2, T=0, K=8, V=8, BT=16),
}


def assert_compiled_equals_ctypes(op, make_args, inputs, options, backend):
    """Both implementations agree on the problem, on a strided copy of its inputs, and (varlen)
    with chunk_indices passed explicitly."""
    assert_same_outputs(op, make_args(inputs, options, backend))
    assert_same_outputs(op, make_args(strided(inputs), options, backend))
    if "cu_seqlens" in options:
        options["chunk_indices"] = kk.chunk_indices(options["cu_seqlens"], options["chunk_size"])
        assert_same_outputs(op, make_args(inputs, options, backend))


@pytest.mark.parametrize("backend", ["cpu", "cpu-ref"])
@pytest.mark.parametrize("case", WY_CASES.values(), ids=WY_CASES.keys())
def test_wy_compiled_equals_ctypes(case, backend):
    inputs, options = torch_problem(seed=7, **case)
    assert_compiled_equals_ctypes(WY, wy_args, inputs, options, backend)


INTRA_CASES = {
    "bf16-gva-tail": dict(x="bfloat16", T=70, H=2, HV=4, K=16, BT=32),
    "fp16-beta32-varlen-safe": dict(x="float16", beta_dtype="float32", seqlens=[30, 1, 40],
                                    K=16, BT=16, safe_gate=True),
    "fp32-K48-B2": dict(x="float32", B=2, T=50, K=48, BT=64),
    "fp32-empty": dict(x="float32", B=0, T=20, K=8, BT=16),
}


@pytest.mark.parametrize("backend", ["cpu", "cpu-ref"])
@pytest.mark.parametrize("case", INTRA_CASES.values(), ids=INTRA_CASES.keys())
def test_intra_compiled_equals_ctypes(case, backend):
    inputs, options = torch_intra_problem(seed=7, **case)
    assert_compiled_equals_ctypes(INTRA, intra_args, inputs, options, backend)


def outcome(fn, args):
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001: the class and message are what is compared
        return type(e), str(e)
    return None


def broadcast_to_huge(inputs, keep, last_48, T=2**40):
    """The inputs broadcast (stride 0) to T tokens, but those in `keep`; `last_48`'s last extent
    made 48."""
    huge = {}
    for name, t in inputs.items():
        if name in keep:
            huge[name] = t
            continue
        shape = (1, T) + tuple(t.shape[2:])
        if name == last_48:
            shape = shape[:-1] + (48,)
        huge[name] = t.reshape(-1)[:1].reshape((1,) * t.dim()).expand(shape)
    return huge


def bad_wy_calls():
    inputs, options = torch_problem(T=32, H=2, K=8, V=8, BT=16)
    varlen, varlen_options = torch_problem(seqlens=[10, 22], K=8, V=8, BT=16)

    def call(backend="cpu", kernel="auto", **changes):
        return wy_args({**inputs, **changes}, options, backend, kernel)

    return {
        "q-rank": call(q=inputs["q"][0]),
        "g-dtype": call(g=inputs["g"].half()),
        "beta-int8": call(beta=inputs["beta"].to(torch.int8)),
        "A-complex": call(A=inputs["A"].to(torch.complex64)),
        "q-bool": call(q=inputs["q"].bool()),
        "q-None": call(q=None),
        "dv-None": call(dv=None),
        "cu_seqlens-int8": wy_args(varlen, {**varlen_options,
                                           "cu_seqlens": varlen_options["cu_seqlens"].to(
                                               torch.int8)}),
        "h-chunks": call(h=torch.cat([inputs["h"], inputs["h"]], dim=1)),
        "v-heads": call(v=inputs["v"][:, :, :1]),
        "A-chunk-size": wy_args(inputs, {**options, "chunk_size": 32}),
        "scale-inf": wy_args(inputs, {**options, "scale": float("inf")}),
        "rank-7": call(q=inputs["q"][None, None, None]),
        "backend": call(backend="tpu"),
        "kernel": call(kernel="fast"),
        "simt-on-cpu": call(kernel="simt"),
        "cuda-on-cpu-tensors": call(backend="cuda"),
        "cu_seqlens-B2": wy_args(
            {**inputs, **{n: torch.cat([inputs[n]] * 2) for n in INPUT_NAMES}},
            {**options, "cu_seqlens": torch.tensor([0, 32], dtype=torch.int32)}),
        "cu_seqlens-float": wy_args(varlen, {**varlen_options,
                                            "cu_seqlens": varlen_options["cu_seqlens"].float()}),
        "cu_seqlens-decreasing": wy_args(varlen, {**varlen_options, "cu_seqlens": torch.tensor(
            [0, 22, 10, 32], dtype=torch.int32)}),
        "chunk_indices-alone": wy_args(inputs, {**options,
                                               "chunk_indices": torch.zeros(2, 2, dtype=torch.int64)}),
        # Outputs of 64 TiB each that cannot be allocated: validated with placeholder outputs,
        # so the error is chunk_size's, not the allocator's.
        "outputs-too-large": wy_args(broadcast_to_huge(inputs, ("h", "dh"), "A", 48),
                                     {**options, "chunk_size": 48}),
    }


def bad_intra_calls():
    inputs, options = torch_intra_problem(T=32, K=8, BT=16)

    def call(backend="cpu", kernel="auto", **changes):
        return intra_args({**inputs, **changes}, options, backend, kernel)

    return {
        "q-rank": call(q=inputs["q"][0]),
        "dAkk-int8": call(dAkk=inputs["dAkk"].to(torch.int8)),
        "dg-half": call(dg=inputs["dg"].half()),
        "db-shape": call(db=torch.cat([inputs["db"], inputs["db"]], dim=1)),
        "dAqk-chunk-size": intra_args(inputs, {**options, "chunk_size": 32}),
        "backend": call(backend="gpu"),
        "kernel": call(kernel="tensor-core"),
        "sm80_mma-on-cpu-ref": call(backend="cpu-ref", kernel="sm80_mma"),
        "g-bool": call(g=inputs["g"].bool()),
        "k-int8": call(k=inputs["k"].to(torch.int8)),
        "k-None": call(k=None),
        "outputs-too-large": intra_args(broadcast_to_huge(inputs, (), "dAqk", 48),
                                        {**options, "chunk_size": 48}),
    }


@pytest.mark.parametrize(("fla_name", "case"),
                         [(WY, c) for c in bad_wy_calls()] + [(INTRA, c) for c in bad_intra_calls()])
def test_errors_are_those_of_the_ctypes_path(fla_name, case):
    """Same exception class, same message (naming the argument) from both implementations."""
    args = (bad_wy_calls() if fla_name == WY else bad_intra_calls())[case]
    op = _torch_op.OPS[fla_name]
    expected = outcome(op.run_ctypes, args)
    assert expected is not None, f"{case}: the ctypes path accepted it"
    assert expected[0] in (TypeError, ValueError, NotImplementedError, RuntimeError)
    assert expected[1].startswith(f"{fla_name}: "), expected
    assert outcome(op.default, args) == expected


@needs_compiled
def test_compiled_op_has_no_python_implementation():
    """The op torch dispatches to on CPU tensors is the C++ kernel, not the ctypes one: a call
    made while the ctypes implementation is disabled still runs."""
    inputs, options = torch_problem(T=32, K=8, V=8, BT=16)
    op = _torch_op.OPS[WY]
    original = op.run_ctypes
    op.run_ctypes = None
    try:
        outputs = torch.ops.kda_kernels.chunk_kda_bwd_wy_dqkg_fused(*wy_args(inputs, options))
    finally:
        op.run_ctypes = original
    assert len(outputs) == 6
    assert torch._C._dispatch_has_kernel_for_dispatch_key(op.qualname, "CPU")
    assert torch._C._dispatch_has_kernel_for_dispatch_key(op.qualname, "CUDA")


# --- which implementation a process gets (fresh interpreters) -----------------------------

PROBE = (
    "import kda_kernels as kk, torch\n"
    "print(kk.torch_op_backend(detail=True))\n"
    "print(kk.library_path())\n"
    "from kda_testing import torch_problem\n"
    "inputs, options = torch_problem(T=20, K=8, V=8, BT=16)\n"
    "out = kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options)\n"
    "print('ran', len(out))\n"
)


def run_python(code, **env):
    environment = {k: v for k, v in os.environ.items() if k not in ("KDA_TORCH_OP",)}
    environment.update(PYTHONPATH=os.pathsep.join([PACKAGE_PARENT, str(Path(__file__).parent)]),
                       **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=environment, timeout=300)


def copy_library(folder):
    """A copy of the loaded libkda as a wheel lays it out: the real file named libkda.so."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / _locate.library_file_name()
    shutil.copyfile(Path(kk.library_path()).resolve(), target)
    return target


needs_built = pytest.mark.skipif(
    not compiled_beside(kk.library_path()).is_file(),
    reason=f"no compiled op beside {kk.library_path()} (built without torch?)")


@needs_built
def test_a_copy_laid_out_like_the_wheel_uses_the_compiled_op(tmp_path):
    """libkda.so and libkda_torch-<torch>.so side by side, as the wheel bundles them: the
    compiled op binds to the libkda the package loaded (by its soname: no libkda.so.0.x file
    is there) and runs."""
    library = copy_library(tmp_path / "lib")
    shutil.copyfile(compiled_beside(kk.library_path()), compiled_beside(library))
    result = run_python(PROBE, KDA_LIBRARY=str(library))
    assert result.returncode == 0, result.stderr[-3000:]
    detail, loaded, ran = result.stdout.splitlines()[-3:]
    assert detail == f"compiled ({compiled_beside(library)})"
    assert loaded == str(library) and ran == "ran 6"


def test_without_a_compiled_op_beside_libkda_the_python_op_is_used(tmp_path):
    library = copy_library(tmp_path / "lib")
    other = library.parent / _locate.torch_op_file_name("0.0.1")
    other.write_bytes(b"not loaded: built for another torch")
    result = run_python(PROBE, KDA_LIBRARY=str(library))
    assert result.returncode == 0, result.stderr[-3000:]
    detail = result.stdout.splitlines()[-3]
    name = _locate.torch_op_file_name(_torch_ext.torch_release())
    assert detail == (f"python (no {name} for torch {torch.__version__} beside {library} "
                      f"(there: {other.name}))")
    assert result.stdout.splitlines()[-1] == "ran 6"
    # Insisting on the compiled op makes that an error at import, with the same reason.
    insisted = run_python(PROBE, KDA_LIBRARY=str(library), KDA_TORCH_OP="compiled")
    assert insisted.returncode != 0
    assert ("LibraryError: kda_kernels: $KDA_TORCH_OP=compiled, but the compiled torch op "
            f"cannot be used: no {name}") in insisted.stderr


def test_a_compiled_op_that_does_not_load_leaves_the_python_op(tmp_path):
    library = copy_library(tmp_path / "lib")
    compiled_beside(library).write_bytes(b"\x7fELF truncated")
    result = run_python(PROBE, KDA_LIBRARY=str(library))
    assert result.returncode == 0, result.stderr[-3000:]
    detail = result.stdout.splitlines()[-3]
    assert detail.startswith(f"python ({compiled_beside(library)} did not load: "), detail
    assert result.stdout.splitlines()[-1] == "ran 6"


def test_kda_torch_op_python_and_unknown_values():
    result = run_python(PROBE, KDA_TORCH_OP="python")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-3] == "python ($KDA_TORCH_OP=python)"
    bad = run_python(PROBE, KDA_TORCH_OP="fast")
    assert bad.returncode != 0
    assert ("ValueError: kda_kernels: $KDA_TORCH_OP='fast': expected one of auto, compiled, "
            "python") in bad.stderr


@needs_built
def test_a_library_with_wrong_tables_leaves_the_python_op(tmp_path):
    """With the compiled op beside it, importing loads libkda (the op links it): a library whose
    tables differ from the package's is refused then, and the python op's first call raises
    the LibraryError."""
    # The package's modules are imported by its __init__, so a sitecustomize import hook changes
    # a table as soon as _abi exists, before _torch_op loads the library.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import builtins, dataclasses, sys\n"
        "_real = builtins.__import__\n"
        "def _hook(name, *args, **kwargs):\n"
        "    module = _real(name, *args, **kwargs)\n"
        "    abi = sys.modules.get('kda_kernels._abi')\n"
        "    if hasattr(abi, 'LAYOUTS') and not getattr(abi, '_changed', False):\n"
        "        abi._changed = True\n"
        "        sig = abi.LAYOUTS[0].signature\n"
        "        bad = dataclasses.replace(sig, args=sig.args[:5] + (dataclasses.replace(\n"
        "            sig.args[5], rank=4),) + sig.args[6:])\n"
        "        abi.LAYOUTS = (abi.ProblemLayout(bad), abi.LAYOUTS[1])\n"
        "    return module\n"
        "builtins.__import__ = _hook\n"
    )
    code = (
        "import kda_kernels as kk\n"
        "print(kk.torch_op_backend(detail=True))\n"
        "try:\n"
        "    kk.library_path()\n"
        "except kk.LibraryError as e:\n"
        "    print('ERROR', e)\n"
    )
    environment = {k: v for k, v in os.environ.items() if k != "KDA_TORCH_OP"}
    environment["PYTHONPATH"] = os.pathsep.join([str(site), PACKAGE_PARENT])
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=environment, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    detail, error = result.stdout.splitlines()[-2:]
    assert detail.startswith("python (libkda did not load: "), detail
    assert "operator chunk_bwd_wy_dqkg argument 5 is 'beta' (input, type 2, rank 3" in detail
    assert error.startswith("ERROR ") and "argument 5 is 'beta'" in error


@pytest.mark.parametrize("fla_name", [WY, INTRA])
def test_backward_through_an_op_raises(fla_name):
    """The ops are backward steps, not differentiable: with an input that requires grad, the
    outputs' backward raises (it must not warn and let a wrong gradient through), in either
    implementation; calls without such inputs take no autograd node."""
    if fla_name == WY:
        inputs, options = torch_problem(T=32, K=8, V=8, BT=16)
        args = wy_args(inputs, options)
    else:
        inputs, options = torch_intra_problem(T=32, K=8, BT=16)
        args = intra_args(inputs, options)
    packet = getattr(torch.ops.kda_kernels, fla_name)
    assert packet(*args)[0].grad_fn is None
    q = args[0].detach().requires_grad_()
    outputs = packet(q, *args[1:])
    with pytest.raises(RuntimeError, match=f"{fla_name}.* (is not implemented|no autograd formula)"):
        outputs[0].sum().backward()


# --- on a GPU (skipped without one) --------------------------------------------------------

def _no_gpu_reason():
    if not torch.cuda.is_available():
        return "no CUDA device"
    if not kk.backend_available("cuda"):
        return "the loaded libkda was built without the cuda backend"
    return None


needs_gpu = pytest.mark.skipif(_no_gpu_reason() is not None, reason=str(_no_gpu_reason()))


@needs_gpu
@pytest.mark.parametrize("fla_name", [WY, INTRA])
@pytest.mark.parametrize("kernel", ["auto", "simt"])
def test_cuda_compiled_equals_ctypes_on_a_side_stream(fla_name, kernel):
    """Both implementations on CUDA tensors, enqueued on a stream other than the default one
    (torch's current stream is what both must launch on), give bitwise equal outputs (the
    kernels are deterministic); the chunk_bwd_intra op has no simt kernel: both refuse it
    alike."""
    if fla_name == WY:
        inputs, options = torch_problem(device="cuda", x="bfloat16", seqlens=[100, 1, 155],
                                        H=2, HV=4, K=64, V=64, BT=64)
        args = wy_args(inputs, options, backend=None, kernel=kernel)
    else:
        inputs, options = torch_intra_problem(device="cuda", x="bfloat16", B=2, T=200, K=64,
                                              BT=64)
        args = intra_args(inputs, options, backend=None, kernel=kernel)
    op = _torch_op.OPS[fla_name]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        if fla_name == INTRA and kernel == "simt":
            expected = outcome(op.run_ctypes, args)
            assert expected is not None and expected[0] is NotImplementedError
            assert outcome(op.default, args) == expected
            return
        compiled = op.default(*args)
        ctypes_path = op.run_ctypes(*args)
    side.synchronize()
    for i, (a, b) in enumerate(zip(compiled, ctypes_path)):
        assert a.is_cuda and a.dtype == b.dtype and a.shape == b.shape, i
        assert torch.equal(a, b), i
