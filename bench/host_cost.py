"""Host cost of one call of the Python package, layer by layer, for both implementations of the
torch ops: the compiled one (libkda_torch, C++) and the python one (ctypes).

A call's host cost (argument checks, tensor descriptions, output allocations, the custom-op
dispatch, the call into libkda) is paid on every backward step, and at small shapes it is more
than the kernel itself. This measures it on a problem so small that the computation is small:
T=16, H=1 (one work unit, so no worker threads) on the `cpu` backend by default (runs anywhere
torch runs; the computation is then part of every layer, and kda_run is that floor), or on CUDA
tensors with --device cuda (the kernel is asynchronous there, so the time is the enqueue cost).
Pin it to one core (taskset -c 1) on a shared machine.

Layers, outermost first (each includes the ones below it), for the operator --op names:
  public       kda_kernels.<fla name>(...)
  custom-op    torch.ops.kda_kernels.<fla name>.default(...): the torch op
  impl         the python op's implementation (describe, allocate, pack, ctypes call), called
               directly: the same in both columns
  fla-backend  the fla backend's verifier + function, as fla's dispatch calls them (fla is not
               imported: the backend class is built against a stand-in base class; on CPU
               tensors its verifier takes the accepting path of CUDA tensors)
  kda_run      ctypes kda_<op>_run on a problem packed beforehand (the C call and the
               computation)

Each implementation runs in a process of its own (KDA_TORCH_OP=compiled / python: the ops are
registered once per process); --torch-op picks one of them, or both (default).

    PYTHONPATH=python python3 bench/host_cost.py [--op chunk_bwd_wy_dqkg|chunk_bwd_intra]
        [--device cpu|cuda] [--calls N] [--torch-op both|compiled|python]

Prints, per layer and implementation, the best and the median of 5 rounds of N calls, in
microseconds per call.
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

OPS = {"chunk_bwd_wy_dqkg": "chunk_kda_bwd_wy_dqkg_fused",
       "chunk_bwd_intra": "chunk_kda_bwd_intra"}
LAYERS = ("public", "custom-op", "impl", "fla-backend", "kda_run")
IMPLEMENTATIONS = ("compiled", "python")


def make_intra_inputs(torch, device, T=16, H=1, K=16, BT=16):
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


def make_inputs(torch, device, T=16, H=1, K=16, V=16, BT=16):
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


def measure(args):
    """Every layer in this process, with the torch ops' implementation $KDA_TORCH_OP names:
    {layer: (best, median)}, and the implementation's detail."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import kda_kernels
    import kda_kernels.fla as kfla
    from kda_kernels import _abi, _library, _problem, _signatures, _torch_op

    fla_name = OPS[args.op]
    make = make_intra_inputs if args.op == "chunk_bwd_intra" else make_inputs
    inputs, BT = make(torch, args.device)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    # The op's positional arguments: the inputs, then the options (chunk_size=BT).
    defaults = [BT if name == "chunk_size" else default
                for name, default in _signatures.BY_FLA_NAME[fla_name].params]
    op_args = [*inputs.values(), *defaults, None, "auto"]
    torch_op = _torch_op.OPS[fla_name]

    if args.device == "cuda":
        # The backend's verifier hands back calls of operators it has not probed.
        kfla.probe_cuda_kernels()
    else:
        # On CPU tensors: the verifier's accepting path, which every GPU call takes (CPU
        # tensors would be handed back to fla, through the slower path that says why).
        kfla.CUDA_KERNELS.update({fla_name: True})
    # The fla backend, built on a stand-in base class so that fla (and Triton) need not be
    # importable: only the two methods fla's dispatch calls are timed.
    backend = kfla._make_backend_class(object, device_type=args.device)()
    verifier = getattr(backend, fla_name + "_verifier")
    function = getattr(backend, fla_name)

    def fla_call():
        ok, reason = verifier(**inputs, chunk_size=BT)
        if not ok:
            raise RuntimeError(reason)
        return function(**inputs, chunk_size=BT)

    # kda_run: kda_<op>_run on a problem packed once (outputs allocated once): the floor.
    op = _problem.OPERATORS[fla_name]
    outputs = torch_op._empty_outputs(op_args)
    tensors = [_torch_op.describe(op, name, t) for name, t in zip(op.input_names, op_args)]
    tensors += [_problem.OMITTED] * len(op.optional_names)
    tensors += [_torch_op.describe(op, name, t) for name, t in zip(op.output_names, outputs)]
    problem = op.pack(tensors, op.convert_options([op_args[i] for i in torch_op._option_at]))
    run = _library.library().entry(op.signature, "run")
    backend_code = _abi.BACKENDS["cuda" if args.device == "cuda" else "cpu"]
    stream = torch.cuda.current_stream().cuda_stream if args.device == "cuda" else None
    ref = ctypes.byref(problem)  # points into `outputs`, which the closure below keeps alive

    public = getattr(kda_kernels, fla_name)
    layers = {
        "public": lambda: public(**inputs, chunk_size=BT),
        "custom-op": lambda: torch_op.default(*op_args),
        "impl": lambda: torch_op.run_ctypes(*op_args),
        "fla-backend": fla_call,
        "kda_run": lambda: (run(ref, backend_code, _abi.KERNELS["auto"], stream), outputs),
    }
    times = {name: time_layer(fn, args.calls, sync) for name, fn in layers.items()}
    return dict(times=times, detail=kda_kernels.torch_op_backend(detail=True),
                torch=torch.__version__)


def run_child(args, implementation):
    """measure() in a process whose ops are `implementation`'s; None and the error when that
    implementation cannot be loaded."""
    env = dict(os.environ, KDA_TORCH_OP=implementation)
    command = [sys.executable, __file__, "--op", args.op, "--device", args.device, "--calls",
               str(args.calls), "--torch-op", implementation, "--json"]
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        return None, (result.stderr.strip().splitlines() or ["failed"])[-1]
    return json.loads(result.stdout.strip().splitlines()[-1]), None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", default="chunk_bwd_wy_dqkg", choices=tuple(OPS))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--torch-op", default="both", choices=("both", *IMPLEMENTATIONS))
    parser.add_argument("--json", action="store_true", help="one JSON line (for the parent)")
    args = parser.parse_args()
    if args.json:
        os.environ["KDA_TORCH_OP"] = args.torch_op
        print(json.dumps(measure(args)))
        return

    wanted = IMPLEMENTATIONS if args.torch_op == "both" else (args.torch_op,)
    results, notes = {}, []
    for implementation in wanted:
        results[implementation], error = run_child(args, implementation)
        if error:
            notes.append(f"{implementation}: not measured: {error}")
        else:
            notes.append(f"{implementation}: {results[implementation]['detail']}")
    measured = [r for r in results.values() if r]
    torch_version = measured[0]["torch"] if measured else "?"
    shape = "T=16 H=1 K=16 BT=16" if args.op == "chunk_bwd_intra" else "T=16 H=1 K=V=16 BT=16"
    print(f"host cost per call of {OPS[args.op]}, {args.device} tensors, {shape}, best and "
          f"median of 5 rounds of {args.calls} calls, us (torch {torch_version})")
    print(f"{'layer':<12}" + "".join(f" {name + ' best':>14} {'median':>7}" for name in wanted))
    for layer in LAYERS:
        cells = []
        for implementation in wanted:
            result = results[implementation]
            if result is None:
                cells.append(f" {'-':>14} {'-':>7}")
            else:
                best, median = result["times"][layer]
                cells.append(f" {best:14.1f} {median:7.1f}")
        print(f"{layer:<12}" + "".join(cells))
    for note in notes:
        print(note)
    if not measured:
        sys.exit(1)


if __name__ == "__main__":
    main()
