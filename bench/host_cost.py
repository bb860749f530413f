"""Host cost of one call of the Python package, layer by layer.

A call's host cost (argument checks, tensor descriptions, output allocations, the custom-op
dispatch, the ctypes call) is paid on every backward step, and at small shapes it is more than
the kernel itself. This measures it on a problem so small that the computation is negligible:
T=16, H=1 (one work unit, so no worker threads) on the `cpu` backend by default (runs anywhere
torch runs), or on CUDA tensors with --device cuda (the kernel is asynchronous there, so the
time is the enqueue cost). Pin it to one core (taskset -c 1) on a shared machine.

Layers, outermost first (each includes the ones below it):
  public       kda_kernels.chunk_kda_bwd_wy_dqkg_fused(...)
  custom-op    torch.ops.kda_kernels.chunk_kda_bwd_wy_dqkg_fused(...)
  impl         the custom op's implementation (describe, allocate, pack, call)
  fla-backend  the fla backend's verifier + function, as fla's dispatch calls them (fla is not
               imported: the backend class is built against a stand-in base class)
  kda_run      ctypes kda_run on a problem packed beforehand (the C call and the computation)

    PYTHONPATH=python python3 bench/host_cost.py [--device cpu|cuda] [--calls N]

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
from kda_kernels import _abi, _library, _problem, _torch_op  # noqa: E402


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


def packed_call(inputs, BT, device):
    """A kda_run on a problem packed once (outputs allocated once): the floor of the layers."""
    outputs = _torch_op._empty_outputs(inputs["q"], inputs["v"], inputs["A"])
    fields = [_torch_op.describe(name, t) for name, t in inputs.items()]
    fields += [_problem.OMITTED, _problem.OMITTED]
    fields += [_torch_op.describe(name, t) for name, t in zip(_abi.OUTPUT_FIELDS, outputs)]
    problem = _problem.pack(fields, _problem.scalar_options(None, BT, False))
    dll = _library.library().dll
    backend = _abi.BACKENDS["cuda" if device == "cuda" else "cpu"]
    stream = torch.cuda.current_stream().cuda_stream if device == "cuda" else None
    ref = ctypes.byref(problem)
    # The closure keeps `outputs` alive: the packed problem points into them.
    return lambda: (dll.kda_run(ref, backend, stream), outputs)


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
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    inputs, BT = make_inputs(args.device)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    args_list = list(inputs.values())
    backend = fla_backend()

    def fla_call():
        ok, reason = backend.chunk_kda_bwd_wy_dqkg_fused_verifier(**inputs, chunk_size=BT)
        if not ok and args.device == "cuda":
            raise RuntimeError(reason)
        return backend.chunk_kda_bwd_wy_dqkg_fused(**inputs, chunk_size=BT)

    layers = {
        "public": lambda: kda_kernels.chunk_kda_bwd_wy_dqkg_fused(**inputs, chunk_size=BT),
        "custom-op": lambda: torch.ops.kda_kernels.chunk_kda_bwd_wy_dqkg_fused(
            *args_list, None, None, BT, None, False, None),
        "impl": lambda: _torch_op._run(*args_list, None, None, BT, None, False, None),
        "fla-backend": fla_call,
        "kda_run": packed_call(inputs, BT, args.device),
    }
    print(f"host cost per call, {args.device} tensors, T=16 H=1 K=V=16 BT=16, "
          f"best and median of 5 rounds of {args.calls} calls (torch {torch.__version__})")
    print(f"{'layer':<12} {'best us':>9} {'median us':>10}")
    for name, fn in layers.items():
        best, median = time_layer(fn, args.calls, sync)
        print(f"{name:<12} {best:9.1f} {median:10.1f}")


if __name__ == "__main__":
    main()
