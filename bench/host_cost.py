"""Host cost of one call of the Python package, layer by layer.

A call's host cost (argument checks, tensor descriptions, output allocations, the custom-op
dispatch, the ctypes call) is paid on every backward step, and at small shapes it is more than
the kernel itself. This measures it on a problem so small that the computation is negligible:
T=16, H=1 (one work unit, so no worker threads) on the `cpu` backend by default (runs anywhere
torch runs), or on CUDA tensors with --device cuda (the kernel is asynchronous there, so the
time is the enqueue cost). Pin it to one core (taskset -c 1) on a shared machine.

Layers, outermost first (each includes the ones below it), for the operator --op names:
  public       kda_kernels.<fla name>(...)
  custom-op    torch.ops.kda_kernels.<fla name>(...)
  impl         the custom op's implementation (describe, allocate, pack, call)
  fla-backend  the fla backend's verifier + function, as fla's dispatch calls them (fla is not
               imported: the backend class is built against a stand-in base class)
  kda_run      ctypes kda_<op>_run on a problem packed beforehand (the C call and the
               computation)

    PYTHONPATH=python python3 bench/host_cost.py [--op chunk_bwd_wy_dqkg|chunk_bwd_intra]
                                                 [--device cpu|cuda] [--calls N]

Prints mean and median microseconds per call for each layer (best of 5 rounds of N calls).
"""

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import kda_kernels  # noqa: E402
from kda_kernels import _abi, _library, _problem, _signatures, _torch_op  # noqa: E402

OPS = {sig.op_name: sig.fla_name for sig in _signatures.SIGNATURES}


def make_intra_inputs(device, T=16, H=1, K=16, BT=16):
    gen = torch.Generator().manual_seed(0)

    def r(*shape, dtype=torch.float32, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(dtype=dtype, device=device)

    g = (-torch.rand(1, T, H, K, generator=gen).cumsum(1) * 0.1).to(device)
    return dict(
        q=r(1, T, H, K, dtype=torch.bfloat16), k=r(1, T, H, K, dtype=torch.bfloat16), g=g,
        beta=torch.rand(1, T, H, generator=gen).to(device), dAqk=r(1, T, H, BT).tril(),
        dAkk=r(1, T, H, BT).tril(-1), dq=r(1, T, H, K, scale=0.1), dk=r(1, T, H, K, scale=0.1),
        db=r(1, T, H, scale=0.1), dg=r(1, T, H, K, scale=0.02),
    ), BT


def make_inputs(device, T=16, H=1, K=16, V=16, BT=16):
    gen = torch.Generator().manual_seed(0)

    def r(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, generator=gen).to(dtype=dtype, device=device)

    NT = (T + BT - 1) // BT
    g = (-torch.rand(1, T, H, K, generator=gen).cumsum(1) * 0.1).to(device)
    return dict(
        q=r(1, T, H, K), k=r(1, T, H, K), v=r(1, T, H, V), v_new=r(1, T, H, V), g=g,
        beta=torch.rand(1, T, H, generator=gen).to(device), A=r(1, T, H, BT) * 0.1,
        h=r(1, NT, H, K, V, dtype=torch.float32), do=r(1, T, H, V),
        dh=r(1, NT, H, K, V, dtype=torch.float32), dv=r(1, T, H, V),
    ), BT


def fla_backend():
    """The fla backend object, built on a stand-in base class so that fla (and Triton) need not
    be importable: only the two methods fla's dispatch calls are timed."""
    import kda_kernels.fla as kfla

    return kfla._make_backend_class(object)()


def packed_call(fla_name, args, device):
    """A kda_<op>_run on a problem packed once (outputs allocated once): the floor of the
    layers. `args` are the custom op's positional arguments."""
    op, torch_op = _problem.OPERATORS[fla_name], _torch_op.OPS[fla_name]
    outputs = torch_op._empty_outputs(args)
    tensors = [_torch_op.describe(op, name, t) for name, t in zip(op.input_names, args)]
    tensors += [_problem.OMITTED] * len(op.optional_names)
    tensors += [_torch_op.describe(op, name, t) for name, t in zip(op.output_names, outputs)]
    options = op.convert_options([args[i] for i in torch_op._option_at])
    problem = op.pack(tensors, options)
    run = _library.library().entry(op.signature, "run")
    backend = _abi.BACKENDS["cuda" if device == "cuda" else "cpu"]
    stream = torch.cuda.current_stream().cuda_stream if device == "cuda" else None
    ref = ctypes.byref(problem)
    # The closure keeps `outputs` alive: the packed problem points into them.
    return lambda: (run(ref, backend, _abi.KERNELS["auto"], stream), outputs)


def time_layer(fn, calls, sync):
    rounds = []
    for _ in range(5):
        fn()
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
        sync()
    return min(rounds), statistics.median(rounds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", default="chunk_bwd_wy_dqkg", choices=tuple(OPS))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    fla_name = OPS[args.op]
    intra = args.op == "chunk_bwd_intra"
    inputs, BT = (make_intra_inputs if intra else make_inputs)(args.device)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    # The custom op's positional arguments: the inputs, then the options (chunk_size=BT).
    defaults = [BT if name == "chunk_size" else default
                for name, default in _signatures.BY_FLA_NAME[fla_name].params]
    op_args = [*inputs.values(), *defaults, None, "auto"]
    backend = fla_backend()
    verifier = getattr(backend, fla_name + "_verifier")
    function = getattr(backend, fla_name)

    def fla_call():
        ok, reason = verifier(**inputs, chunk_size=BT)
        if not ok and args.device == "cuda":
            raise RuntimeError(reason)
        return function(**inputs, chunk_size=BT)

    public = getattr(kda_kernels, fla_name)
    custom_op = getattr(torch.ops.kda_kernels, fla_name)
    impl = _torch_op.OPS[fla_name].run
    layers = {
        "public": lambda: public(**inputs, chunk_size=BT),
        "custom-op": lambda: custom_op(*op_args),
        "impl": lambda: impl(*op_args),
        "fla-backend": fla_call,
        "kda_run": packed_call(fla_name, op_args, args.device),
    }
    shape = "T=16 H=1 K=16 BT=16" if intra else "T=16 H=1 K=V=16 BT=16"
    print(f"host cost per call of {fla_name}, {args.device} tensors, {shape}, "
          f"best and median of 5 rounds of {args.calls} calls (torch {torch.__version__})")
    print(f"{'layer':<12} {'best us':>9} {'median us':>10}")
    for name, fn in layers.items():
        best, median = time_layer(fn, args.calls, sync)
        print(f"{name:<12} {best:9.1f} {median:10.1f}")


if __name__ == "__main__":
    main()
