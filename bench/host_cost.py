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

Timing (round_plan, time_layer): a round is a back-to-back loop of calls timed with the host's
clock, after one untimed call and a synchronization. On CPU tensors: 5 rounds of N calls
(--calls, default 2000). On CUDA tensors the calls only enqueue kernels, and two things must not
leak GPU time into the host's clock: (1) CUDA's launch queue holds about 1000 pending launches,
past which a launch waits for the GPU to drain it, so a long round of a small kernel times the
GPU, not the host; a round is therefore at most 200 calls (one kernel each), N calls in all
(at least 5 rounds), with a synchronization after each round, outside its timed loop; (2) the
kernels should wait in the queue, as on a busy GPU in training, not run beside the launches: each
round is queued behind a spin kernel (torch.cuda._sleep) sized to outlast it, from a generous
bound on a call's host time (200 us, or twice what an untimed batch of the layer measured when
that is more; cycles counted at ~2 GHz, the H200's clock). A round that finished after its spin
kernel did is counted and printed as a note (its calls still had at most 200 launches queued, so
its time is still the host's).

Prints, per layer and implementation, the best and the median of the rounds, in microseconds per
call. Then, for the compiled op, where the custom-op layer's time goes (op_breakdown): the op's
body timed by its own probe (libkda_torch's kda_torch_probe: the options and input views, the
output allocations, the stream lookup, kda::run), the layer again with each round's results kept
(no release inside the timed calls), and the release of those results (the tuple and the
outputs: the allocator's frees); what the layer takes beyond the body and the release is Python's
argument parsing, torch's dispatcher and Autograd fallback and the results' wrapping. The H200
machines have no perf, so this is the breakdown there.
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

# The operators (library name -> fla name), from libkda's tables as the package holds them: read
# from the file, since the package itself is imported only once measure() has set the process up.
_TABLES = Path(__file__).resolve().parents[1] / "python" / "kda_kernels" / "op_tables.json"
# The operators fla dispatches (kda_kernels.fla.STAGES), whose every layer, the fla backend's
# included, this measures.
_FLA_STAGES = ("chunk_kda_bwd_wy_dqkg_fused", "chunk_kda_bwd_intra")
OPS = {op["name"]: op["fla_name"] for op in json.loads(_TABLES.read_text())["ops"]
       if op["fla_name"] in _FLA_STAGES}
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


ROUNDS = 5
# --device cuda: calls a round at most (one kernel launch each), well below the ~1000 pending
# launches CUDA queues before a launch waits for the GPU.
CUDA_CALLS_PER_ROUND = 200
# The spin kernel before a round lasts this long per call of the round at least (a generous
# bound on one call's host time), in torch.cuda._sleep's clock cycles at ~2 GHz (H200: 1.98 GHz).
CUDA_SPIN_US_PER_CALL = 200.0
SPIN_CYCLES_PER_US = 2000
# Calls of the untimed batch whose host time sizes the spin for slower layers.
CALIBRATION_CALLS = 20
# Bound on the calibrated host time per call (a stalled batch must not size a spin of seconds).
MAX_CALIBRATED_US = 2000.0
# A child process (one implementation) that has not finished by then is reported as cut.
CHILD_TIMEOUT_S = 100
# The compiled op's probe phases (src/torch_op/probe.hpp's Phase, in order), as printed.
PROBE_PHASES = ("inputs", "outputs", "stream", "run")
PROBE_WORDS = {"inputs": "options and input views", "outputs": "output allocations",
               "stream": "stream lookup", "run": "kda::run (validation and backend)"}


def round_plan(device, calls):
    """(rounds, calls per round) for --calls `calls` on `device`: 5 rounds of `calls` on the
    CPU; on CUDA `calls` in all, in rounds of at most CUDA_CALLS_PER_ROUND calls (at least 5
    rounds), so that a round never fills CUDA's launch queue."""
    calls = max(1, int(calls))
    if device != "cuda":
        return ROUNDS, calls
    per_round = min(calls, CUDA_CALLS_PER_ROUND)
    return max(ROUNDS, -(-calls // per_round)), per_round


def spin_cycles(calls_per_round, measured_us_per_call=0.0):
    """Clock cycles of the spin kernel that precedes a round of `calls_per_round` calls: the
    round's calls at CUDA_SPIN_US_PER_CALL each, or at twice `measured_us_per_call` (what an
    untimed batch of the layer took a call) when that is more."""
    per_call = max(CUDA_SPIN_US_PER_CALL, 2.0 * measured_us_per_call)
    return int(calls_per_round * per_call * SPIN_CYCLES_PER_US)


def time_layer(fn, plan, sync, spin=None):
    """Host time per call of `fn` in microseconds over the rounds of `plan` (round_plan's): the
    best and the median round, and how many rounds outlasted their spin. Before each round: one
    untimed call, `sync()`, then `spin()` when given (it enqueues the spin kernel and returns an
    object whose query() is True once the spin is over); the timer covers the round's calls
    only; the spin's state is read and the device synchronized after it stops."""
    rounds, per_round = plan
    times, uncovered = [], 0
    for _ in range(rounds):
        fn()
        sync()
        pending = spin() if spin is not None else None
        start = time.perf_counter()
        for _ in range(per_round):
            fn()
        elapsed = time.perf_counter() - start
        if pending is not None and pending.query():
            uncovered += 1
        sync()
        times.append(elapsed / per_round * 1e6)
    return min(times), statistics.median(times), uncovered


def cuda_spin(torch, fn, per_round, sync):
    """spin() for time_layer on CUDA: a torch.cuda._sleep sized by spin_cycles from the host time
    of an untimed batch of `fn`, then an event recorded behind it; None without _sleep."""
    if not hasattr(torch.cuda, "_sleep"):
        return None
    fn()  # a layer's first call may initialize things (kernel attributes, caches): not timed
    sync()
    start = time.perf_counter()
    for _ in range(CALIBRATION_CALLS):
        fn()
    measured = min((time.perf_counter() - start) / CALIBRATION_CALLS * 1e6, MAX_CALIBRATED_US)
    sync()
    cycles = spin_cycles(per_round, measured)

    def spin():
        torch.cuda._sleep(cycles)
        done = torch.cuda.Event()
        done.record()
        return done

    return spin


def time_release(fn, plan, sync, spin=None):
    """Host time per call of `fn` with each round's results kept (none released inside the
    timed calls), and of releasing them afterwards (clearing the list that holds them), in
    microseconds: the medians of the rounds of `plan`, each prepared as time_layer's."""
    rounds, per_round = plan
    kept, released = [], []
    for _ in range(rounds):
        fn()
        sync()
        pending = spin() if spin is not None else None
        results = []
        start = time.perf_counter()
        for _ in range(per_round):
            results.append(fn())
        mid = time.perf_counter()
        results.clear()
        end = time.perf_counter()
        del pending
        sync()
        kept.append((mid - start) / per_round * 1e6)
        released.append((end - mid) / per_round * 1e6)
    return statistics.median(kept), statistics.median(released)


def op_breakdown(torch, library_path, fn, plan, sync, device):
    """Where the compiled op's custom-op layer `fn` spends its time: {"phases": {phase: mean µs
    a call inside the op's body, PROBE_PHASES}, "layer": the layer's median with the probe on,
    "kept"/"release": time_release's medians}."""
    probe = ctypes.CDLL(str(library_path)).kda_torch_probe
    probe.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_int]
    probe.restype = ctypes.c_int64
    spin = cuda_spin(torch, fn, plan[1], sync) if device == "cuda" else None
    probe(1, None, 0)
    try:
        _, median, _ = time_layer(fn, plan, sync, spin)
    finally:
        totals = (ctypes.c_int64 * len(PROBE_PHASES))()
        calls = probe(0, totals, len(PROBE_PHASES))
    phases = {name: totals[i] / max(calls, 1) / 1e3 for i, name in enumerate(PROBE_PHASES)}
    kept, release = time_release(fn, plan, sync, spin)
    return dict(phases=phases, calls=calls, layer=median, kept=kept, release=release)


def breakdown_lines(implementation, b):
    """op_breakdown's result as printed lines."""
    body = sum(b["phases"].values())
    parts = ", ".join(f"{PROBE_WORDS[n]} {b['phases'][n]:.1f}" for n in PROBE_PHASES)
    outside = b["layer"] - body
    return [
        f"{implementation}: where custom-op's time goes (us a call; the op's probe, mean of "
        f"{b['calls']} calls; layers as medians of rounds):",
        f"  inside the op's body {body:.1f}: {parts}",
        f"  custom-op with the probe on {b['layer']:.1f}: {outside:.1f} outside the body "
        f"(Python's argument parsing, dispatcher, Autograd fallback, results, their release)",
        f"  custom-op with each round's results kept {b['kept']:.1f}; releasing them "
        f"afterwards (result tuple and outputs) {b['release']:.1f}",
    ]


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
    plan = round_plan(args.device, args.calls)
    times, uncovered = {}, {}
    for name, fn in layers.items():
        began = time.perf_counter()
        spin = cuda_spin(torch, fn, plan[1], sync) if args.device == "cuda" else None
        best, median, late = time_layer(fn, plan, sync, spin)
        # Progress on stderr (the parent passes it through): a cut run still shows how far it got.
        print(f"  [{os.environ.get('KDA_TORCH_OP', '?')}] {name}: best {best:.1f} us, median "
              f"{median:.1f} us, {time.perf_counter() - began:.1f} s", file=sys.stderr, flush=True)
        times[name] = (best, median)
        if late:
            uncovered[name] = late
    breakdown = None
    if _torch_op.CHOICE.backend == "compiled":
        began = time.perf_counter()
        breakdown = op_breakdown(torch, _torch_op.CHOICE.detail, layers["custom-op"], plan, sync,
                                 args.device)
        print(f"  [{os.environ.get('KDA_TORCH_OP', '?')}] custom-op breakdown: "
              f"{time.perf_counter() - began:.1f} s", file=sys.stderr, flush=True)
    spun = args.device != "cuda" or hasattr(torch.cuda, "_sleep")
    return dict(times=times, uncovered=uncovered, spun=spun, plan=plan, breakdown=breakdown,
                detail=kda_kernels.torch_op_backend(detail=True), torch=torch.__version__)


def run_child(args, implementation):
    """measure() in a process whose ops are `implementation`'s; None and the error when that
    implementation cannot be loaded."""
    env = dict(os.environ, KDA_TORCH_OP=implementation)
    command = [sys.executable, __file__, "--op", args.op, "--device", args.device, "--calls",
               str(args.calls), "--torch-op", implementation, "--json"]
    try:
        result = subprocess.run(command, stdout=subprocess.PIPE, text=True, env=env,
                                timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"cut after {CHILD_TIMEOUT_S} s (its progress lines are above)"
    if result.returncode != 0:
        return None, f"exit status {result.returncode} (its error is above)"
    return json.loads(result.stdout.strip().splitlines()[-1]), None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", default="chunk_bwd_wy_dqkg", choices=tuple(OPS))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--calls", type=int, default=2000,
                        help="calls a round on cpu (5 rounds); calls in all on cuda (rounds of "
                             f"at most {CUDA_CALLS_PER_ROUND}, at least {ROUNDS} rounds)")
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
    rounds, per_round = round_plan(args.device, args.calls)
    queued = " each behind a spin kernel" if args.device == "cuda" else ""
    print(f"host cost per call of {OPS[args.op]}, {args.device} tensors, {shape}, best and "
          f"median of {rounds} rounds of {per_round} calls{queued}, us (torch {torch_version})")
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
    for implementation in wanted:
        result = results[implementation]
        if result and not result["spun"]:
            notes.append(f"{implementation}: torch.cuda._sleep is missing: rounds not queued "
                         f"behind a spin kernel (still at most {per_round} launches each)")
        if result and result["uncovered"]:
            late = ", ".join(f"{layer} {n}" for layer, n in result["uncovered"].items())
            notes.append(f"{implementation}: rounds that outlasted their spin kernel: {late} (of "
                         f"{rounds}; at most {per_round} launches queued, so host time still)")
    for note in notes:
        print(note)
    for implementation in wanted:
        result = results[implementation]
        if result and result.get("breakdown"):
            print("\n".join(breakdown_lines(implementation, result["breakdown"])))
    if not measured:
        sys.exit(1)


if __name__ == "__main__":
    main()
