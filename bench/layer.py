#!/usr/bin/env python3
"""A KDA layer's backward through fla's ``chunk_kda``, with and without kda_kernels (issues 13
and 14): per-kernel GPU time, eager wall time, CUDA-graph time and every gradient against fla's.

    python3 bench/layer.py                                   # 1x8192x32 and 4x8192x32
    python3 bench/layer.py --shapes 1x8192x32 --modes fla,both
    python3 bench/layer.py --full-autotune                   # every fla kernel autotuned
    python3 bench/layer.py --autotune NAME,NAME              # those fla kernels autotuned

For each shape (B x T x H, K = V = 128, bfloat16) and each mode, on one set of inputs:

- ``fla``: fla's own kernels (our backend not registered);
- ``wy``: ``kda_kernels.fla.enable(ops=("chunk_kda_bwd_wy_dqkg_fused",))``;
- ``both``: ``kda_kernels.fla.enable(ops=(WY, INTRA))``: chunk_kda_bwd_wy_dqkg_fused and
  chunk_kda_bwd_intra inside fla's own backward;
- ``layer``: ``kda_kernels.fla.enable()``: fla's chunk_kda dispatched to kda_kernels.chunk_kda
  (fla's forward; the backward's stages where ``kda_kernels._layer.SPLIT_STAGES`` says: fla's
  scans, our WY and intra operators, fla's activation backwards);
- ``layer-epilogue``: the same with ``kda_kernels._layer.BACKWARD = "epilogue"`` (fla's scans,
  then our fused epilogue: ``_layer.EPILOGUE_STAGES``);
- ``layer-epilogue-kda-scans``: the same with our state scans (``_layer.FORWARD_SCAN`` and
  ``REVERSE_SCAN = "kda"``: chunk_fwd_h, chunk_bwd_dhu), for the scans' before and after;
- ``layer-prep``: the epilogue tail with our first pass (``_layer.PREP = "kda"``:
  chunk_bwd_prep) and fla's state scans;
- ``layer-library``: every stage of the backward ours (``_layer.use_library_stages()``:
  chunk_bwd_prep, both state scans, the epilogue: ``_layer.LIBRARY_STAGES``).

it measures

1. the backward's GPU time per kernel: torch.profiler (CUDA activity) around ``--profile-reps``
   backward runs, each kernel's time summed per name and divided by the runs; the sum is the
   backward's GPU time (memset and memcpy activities included), and the span from the first
   kernel's start to the last one's end is recorded beside it;
2. the eager backward's wall time: the forward runs before the timer starts (outside the timed
   region, so that every timed backward frees its graph as training does; retain_graph would
   keep the saved tensors alive and repeat a backward no training step runs), then
   ``torch.cuda.synchronize()``, the backward, ``synchronize()`` again; the median of ``--reps``
   runs after ``--warmup`` (the forward's wall time is recorded too);
3. forward + backward captured in one CUDA graph (the inputs and output gradients are static
   tensors; warm-up on a side stream, then ``torch.cuda.graph`` around the forward and
   ``torch.autograd.backward``), timed per replay with CUDA events; a capture that fails is
   reported with its error text, and the other measurements stand;
4. every gradient's err_ratio = rms(x - ref) / rms(ref), float64 accumulation, against mode
   fla's gradients on the same inputs (for mode fla: a second run against its first, which shows
   whether fla is run-to-run deterministic); the graph's gradients against the same mode's eager
   ones. A gradient of a mode above SPEC.md's bfloat16 bar (8e-3; twice that for the dA_log and
   ddt_bias sums: kda_testing.bar_beside_fla) is an error.

Then the issues' two yardsticks: GPU time saved (fla's backward GPU time minus the mode's)
against eager wall time saved, and their ratio (issue 13: the wall saving at B=1 T=8192 H=32 is
at least 80% of the GPU saving: the host adds back little of what the kernels save); and mode
both's backward GPU time against issue 14's 2.0 ms at that shape.

Inputs (``--call test``, the default) are made as fla's tests/ops/test_kda.py ``test_chunk``
makes them for chunk_kda with a precomputed gate: q, k, v uniform in [0, 1) in bfloat16 (l2
normalized in the kernel: ``use_qk_l2norm_in_kernel=True``); g = logsigmoid(N(0, 1)) in
float32; beta = sigmoid(N(0, 1)) in bfloat16; an initial state N(0, 1) in float32 with
``output_final_state=True`` and N(0, 1) gradients for o and the final state. The rest are the
defaults chunk_kda and fla's Kimi Linear layer (fla/layers/kda.py) share: scale K^-0.5 (the
layer passes none), chunk size 64, safe_gate=False with no lower bound (the layer's defaults),
recompute in the backward (disable_recompute=False); and state_v_first=False, chunk_kda's
default (the layer passes True: see --call layer). This is the call the tuned fla configs were
recorded for
(../shared/fla_best_configs_h200.json: bfloat16 X and beta, h in bfloat16 (fla makes h and dh
in k's dtype), state_v_first False), and the one whose backward the 2026-12-01 profile in
../shared/research/whole-backward-analysis.md lists (l2norm in the kernel, no gate kernels).
``--call layer`` calls chunk_kda as fla's KimiDeltaAttention layer does in training
(fla/layers/kda.py): raw gate input N(0, 1) in bfloat16 with A_log = log(U(1, 16)) and dt_bias
= softplus^-1(dt), dt log-uniform in [1e-3, 1e-1] (the layer's initialisation), gate, beta
sigmoid and l2norm in the kernel, state_v_first=True, no initial or final state; the gradients
then include A_log's and dt_bias's. The WY pin file has no entry for that call (beta reaches
the WY kernel in float32, and state_v_first is True), so fla's WY kernel runs its first config
there unless --full-autotune.

fla's autotuners: every fla kernel runs its first autotune config (no autotuning: a fresh machine
would spend minutes on it), except the two our backend replaces, which run tuned winners so that
fla's side of the comparison is its best: chunk_kda_bwd_kernel_wy_dqkg_fused from
``--fla-configs`` (the entry for the call's autotune key) and chunk_kda_bwd_kernel_intra from
``--intra-pin`` (num_warps, num_stages; default 2,2, the winner of a full autotune at T=8192 on
an H200 with safe_gate False). ``--full-autotune`` lets every other fla kernel autotune,
``--autotune NAMES`` only the named ones (fla kernel function names, as the output lists them:
e.g. the backward's, since issue 14's 2.0 ms is a backward time, without paying the forward's
autotuning on a fresh machine). The output lists the config every autotuned fla kernel ran
with, and how it was chosen.

Writes ``layer.json`` (every number) and ``layer.md`` (the tables) under ``--out`` after every
shape, and prints the tables. Exit status: 0 ok; 1 a mode raised, or a gradient of a mode is
above the bar; 2 bad usage, no CUDA device, fla or a libkda with the cuda backend missing.
"""

import argparse
import itertools
import json
import math
import statistics
import sys
import time
import traceback
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO / "tests" / "python"))  # fla_tuning, kda_testing
sys.path.append(str(REPO / "python"))  # kda_kernels, unless PYTHONPATH or an install has it

sys.path.insert(0, str(BENCH))  # layer_chart, also when this module is imported
from fla_tuning import find_pin, load_pins  # noqa: E402
from kda_testing import PASS_BAR, bar_beside_fla  # noqa: E402

import layer_chart  # noqa: E402
from layer_chart import short_name  # noqa: E402

WY = "chunk_kda_bwd_wy_dqkg_fused"
INTRA = "chunk_kda_bwd_intra"
MODES = ("fla", "wy", "both", "layer", "layer-epilogue", "layer-epilogue-kda-scans",
         "layer-prep", "layer-library", "cudnn")
MODE_OPS = {"fla": (), "wy": (WY,), "both": (WY, INTRA), "layer": (WY, INTRA, "chunk_kda"),
            "layer-epilogue": (WY, INTRA, "chunk_kda"),
            "layer-epilogue-kda-scans": (WY, INTRA, "chunk_kda"),
            "layer-prep": (WY, INTRA, "chunk_kda"), "layer-library": (WY, INTRA, "chunk_kda"),
            "cudnn": ()}
# The modes each call runs by default: cuDNN-frontend's sm90 engine serves only --call cudnn (its
# backward declines the gate, the beta sigmoid and l2norm in the kernel).
DEFAULT_MODES = {"test": ("fla", "wy", "both", "layer"),
                 "layer": ("fla", "wy", "both", "layer", "layer-epilogue"),
                 "cudnn": ("fla", "layer", "layer-epilogue", "cudnn")}
CUDNN_PLAN = "kda_hopper_cuda"
# fla's Triton kernels behind the two operators our backend replaces.
FLA_WY_KERNEL = "chunk_kda_bwd_kernel_wy_dqkg_fused"
FLA_INTRA_KERNEL = "chunk_kda_bwd_kernel_intra"
CALLS = ("test", "layer", "cudnn")
K = V = 128
BT = 64  # chunk_kda's default chunk size
X_DTYPE = "bfloat16"
ERR_BAR = PASS_BAR[X_DTYPE]  # SPEC.md's bar, which tests/python/test_fla.py holds the layer to
# The issues' yardsticks, both at this shape (B, T, H).
TARGET_SHAPE = (1, 8192, 32)
WALL_SHARE_TARGET = 0.8  # issue 13: wall time saved >= 80% of GPU time saved
BACKWARD_TARGET_US = 2000.0  # issue 14: mode both's whole backward <= 2.0 ms
DEFAULT_SHAPES = "1x8192x32,4x8192x32"
# The issues' varlen mix: six sequences of these lengths packed into one row of 8192 tokens
# (--shapes mixH, e.g. mix32).
VARLEN_MIX = (1300, 547, 2048, 963, 271, 3063)
DEFAULT_FLA_CONFIGS = REPO / ".carry" / "fla_best_configs_h200.json"  # dev/stage-carry.sh's copy
DEFAULT_INTRA_PIN = "2,2"
TOP_KERNELS = 4  # kernels named in the table's row
DEVICE = "cuda"  # bench/test_layer.py runs the harness on "cpu" with a stand-in for chunk_kda

T_START = time.perf_counter()


def log(message):
    print(f"[{time.perf_counter() - T_START:7.1f}s] {message}", flush=True)


# --- options ------------------------------------------------------------------------------


def parse_shapes(text):
    """'1x8192x32,4x8192x32,mix32' -> [(1, 8192, 32), (4, 8192, 32), (1, 8192, 32, VARLEN_MIX)]:
    BxTxH, or mixH for VARLEN_MIX's sequences packed into B = 1 (T their sum); ValueError
    naming a bad one."""
    shapes = []
    for item in text.split(","):
        item = item.strip()
        if item.startswith("mix") and item[3:].isdigit() and int(item[3:]) > 0:
            shapes.append((1, sum(VARLEN_MIX), int(item[3:]), VARLEN_MIX))
            continue
        parts = item.split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"shape {item!r} is not BxTxH (positive integers, e.g. 1x8192x32) "
                             f"or mixH (the varlen mix, e.g. mix32)")
        shapes.append(tuple(int(p) for p in parts))
    return shapes


def seq_lengths(shape):
    """The packed sequences' lengths of a varlen shape, () for B sequences of T tokens."""
    return tuple(shape[3]) if len(shape) > 3 else ()


def parse_intra_pin(text):
    """'2,2' -> {'num_warps': 2, 'num_stages': 2}; 'none' -> None (no pin)."""
    if text.strip().lower() == "none":
        return None
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"--intra-pin {text!r} is not num_warps,num_stages (e.g. 2,2) or none")
    return {"num_warps": int(parts[0]), "num_stages": int(parts[1])}


def parse_modes(text):
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if not modes or bad or len(set(modes)) != len(modes):
        raise ValueError(f"--modes: expected some of {', '.join(MODES)} (each once), got "
                         f"{text!r}")
    # fla runs first: its gradients are the others' reference.
    return [m for m in MODES if m in modes]


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="fla's chunk_kda forward + backward with and without kda_kernels: GPU time "
                    "per kernel, eager wall time, CUDA graph time, gradients against fla "
                    "(bench/README.md, 'The layer benchmark').")
    p.add_argument("--shapes", default=DEFAULT_SHAPES,
                   help=f"comma-separated BxTxH (K = V = 128, bfloat16; default {DEFAULT_SHAPES}) "
                        f"or mixH: sequences of {'+'.join(map(str, VARLEN_MIX))} tokens "
                        f"packed into B = 1 with cu_seqlens")
    p.add_argument("--modes", default=None,
                   help="fla (fla's kernels), wy (our chunk_kda_bwd_wy_dqkg_fused), both (both "
                        "of our operators in fla's backward), layer (kda_kernels.chunk_kda), "
                        "cudnn (cuDNN-frontend's sm90 engine, --call cudnn only); default "
                        "fla,wy,both,layer (--call cudnn: fla,layer,cudnn), fla first")
    p.add_argument("--call", default="test", choices=CALLS,
                   help="test: inputs and options as fla's test_chunk (precomputed gate; the "
                        "default); layer: as fla's KimiDeltaAttention calls chunk_kda in "
                        "training (gate and beta sigmoid in the kernel, state_v_first); cudnn: "
                        "the call cuDNN-frontend's sm90 backward serves (log-space gate, "
                        "post-sigmoid beta, q and k normalised beforehand, state_v_first)")
    p.add_argument("--fla-configs", default=str(DEFAULT_FLA_CONFIGS),
                   help="JSON file of fla's tuned configs (tests/python/fla_tuning.py's "
                        "format; default .carry/fla_best_configs_h200.json in the checkout): "
                        "fla's WY kernel runs the entry for the call's autotune key; 'none' "
                        "for no pin")
    p.add_argument("--intra-pin", default=DEFAULT_INTRA_PIN,
                   help="num_warps,num_stages for fla's chunk_kda_bwd_kernel_intra (default "
                        "2,2: a full autotune's winner at T=8192 on an H200, safe_gate False); "
                        "'none' for no pin")
    p.add_argument("--full-autotune", action="store_true",
                   help="let every fla kernel without a pin autotune over all its configs "
                        "(default: its first config only); add --fla-configs none "
                        "--intra-pin none to autotune the two pinned kernels too")
    p.add_argument("--autotune", default="",
                   help="comma-separated fla kernel function names that autotune over all "
                        "their configs while the others keep their first (not with "
                        "--full-autotune)")
    p.add_argument("--reps", type=int, default=20, help="timed eager backward runs (>= 10)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up runs before timing")
    p.add_argument("--profile-reps", type=int, default=3,
                   help="backward runs under the profiler (kernel times are per run)")
    p.add_argument("--graph-replays", type=int, default=20, help="timed CUDA graph replays")
    p.add_argument("--no-graph", action="store_true", help="skip the CUDA graph")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench-layer-out",
                   help="output directory for layer.json and layer.md (default bench-layer-out)")
    args = p.parse_args(argv)
    try:
        args.shapes = parse_shapes(args.shapes)
        args.modes = parse_modes(",".join(DEFAULT_MODES[args.call]) if args.modes is None
                                 else args.modes)
        if "cudnn" in args.modes and args.call != "cudnn":
            raise ValueError("--modes cudnn: cuDNN-frontend's backward serves --call cudnn only")
        args.intra_pin = parse_intra_pin(args.intra_pin)
    except ValueError as e:
        p.error(str(e))
    args.autotune = [name.strip() for name in args.autotune.split(",") if name.strip()]
    if args.autotune and args.full_autotune:
        p.error("--autotune names kernels; --full-autotune already autotunes every one")
    if len(set(args.autotune)) != len(args.autotune):
        p.error("--autotune names a kernel twice")
    if args.reps < 10:
        p.error("--reps must be >= 10 (the wall time is a median)")
    if args.warmup < 1 or args.profile_reps < 1 or args.graph_replays < 1:
        p.error("--warmup, --profile-reps and --graph-replays must be >= 1")
    if args.fla_configs.strip().lower() == "none":
        args.fla_configs = None
    return args


# --- pure helpers (tested without torch: bench/test_layer.py) ------------------------------


def shape_label(shape):
    lengths = seq_lengths(shape)
    if lengths:
        return f"mix({'+'.join(str(n) for n in lengths)})x{shape[2]}"
    return "x".join(str(n) for n in shape)


def wy_pin_key(H, call, varlen=False):
    """The fields of a fla_best_configs entry that identify the autotune key fla's WY kernel
    meets in chunk_kda's backward for `call`: BT, HV, the dtypes of X, beta and h, varlen,
    state_v_first. h (and dh) are in X's dtype: fla allocates them with ``k.new_empty``
    (fla/ops/common/chunk_delta_h.py); beta is X's dtype unless the beta sigmoid runs in the
    kernel, whose output is float32 (fla/ops/common/gate.py)."""
    as_the_layer = call == "layer"  # beta sigmoid in the kernel, state_v_first
    return dict(BT=BT, HV=H, X=X_DTYPE, beta="float32" if as_the_layer else X_DTYPE, h=X_DTYPE,
                varlen=varlen, state_v_first=as_the_layer)


def tuning_plan(entries, H, call, intra_pin, full_autotune, varlen=False):
    """What each of the two replaced fla kernels runs: {kernel: (config or None, how)}, how
    saying where the config comes from. `entries`: the pin file's entries (None: no file)."""
    plan = {}
    key = wy_pin_key(H, call, varlen)
    config = find_pin(entries, FLA_WY_KERNEL, **key) if entries is not None else None
    unpinned = "autotuned" if full_autotune else "first config (trimmed)"
    if config is not None:
        plan[FLA_WY_KERNEL] = (config, "pinned (--fla-configs, key " + _key_text(key) + ")")
    else:
        why = "no --fla-configs" if entries is None else "no entry for key " + _key_text(key)
        plan[FLA_WY_KERNEL] = (None, f"{unpinned}: {why}")
    if intra_pin is not None:
        plan[FLA_INTRA_KERNEL] = (dict(intra_pin), "pinned (--intra-pin)")
    else:
        plan[FLA_INTRA_KERNEL] = (None, f"{unpinned}: --intra-pin none")
    return plan


def _key_text(key):
    return " ".join(f"{k}={v}" for k, v in key.items())


def config_text(config):
    """{'BK': 64, 'num_warps': 4, 'num_stages': 3} -> 'BK=64 warps=4 stages=3'."""
    if config is None:
        return "?"
    kwargs = [f"{k}={v}" for k, v in config.items() if k not in ("num_warps", "num_stages")]
    return " ".join(kwargs + [f"warps={config.get('num_warps')}",
                              f"stages={config.get('num_stages')}"])


def is_device_event(event):
    """A profiler event that ran on the GPU (a kernel, memset or memcpy), not a host event."""
    kind = getattr(event, "device_type", None)
    return getattr(kind, "name", str(kind)).rsplit(".", 1)[-1] == "CUDA"


def kernel_times(events, runs):
    """The GPU time per kernel name of `runs` profiled runs, per run: a list of
    {name, us, calls} (calls per run), longest first. `events`: torch.profiler FunctionEvents
    (or anything with name, device_type and time_range.start / .end in µs); host events are
    skipped."""
    total, calls = {}, {}
    for event in events:
        if not is_device_event(event):
            continue
        us = event.time_range.end - event.time_range.start
        total[event.name] = total.get(event.name, 0.0) + us
        calls[event.name] = calls.get(event.name, 0) + 1
    rows = [dict(name=name, us=us / runs, calls=calls[name] / runs) for name, us in total.items()]
    return sorted(rows, key=lambda r: (-r["us"], r["name"]))


def device_span_us(events):
    """From the first GPU activity's start to the last one's end (µs): the kernels' sum plus the
    GPU's idle gaps between them. 0 without GPU activity."""
    ranges = [(e.time_range.start, e.time_range.end) for e in events if is_device_event(e)]
    if not ranges:
        return 0.0
    return max(end for _, end in ranges) - min(start for start, _ in ranges)


def yardsticks(modes, shape):
    """The issues' comparisons for one shape, from `modes` ({mode: result}, results holding
    backward_gpu_us and eager.bwd_wall_ms_median): per mode other than fla, GPU time saved,
    wall time saved and their ratio (issue 13), and mode both's backward GPU time against
    2.0 ms (issue 14). Verdicts only at TARGET_SHAPE, the shape the issues set them for."""
    at_target = tuple(shape) == TARGET_SHAPE  # varlen shapes have four fields: never
    fla = modes.get("fla", {})
    out = {"savings": {}, "backward_target": None}
    for mode, result in modes.items():
        if mode == "fla" or not _has_times(fla) or not _has_times(result):
            continue
        gpu_saved = fla["backward_gpu_us"] - result["backward_gpu_us"]
        wall_saved = 1e3 * (fla["eager"]["bwd_wall_ms_median"]
                            - result["eager"]["bwd_wall_ms_median"])
        share = wall_saved / gpu_saved if gpu_saved > 0 else None
        verdict = None
        if at_target:
            verdict = "met" if share is not None and share >= WALL_SHARE_TARGET else "not met"
        out["savings"][mode] = dict(gpu_saved_us=gpu_saved, wall_saved_us=wall_saved,
                                    wall_share=share, verdict=verdict)
    both = modes.get("both", {})
    if "backward_gpu_us" in both:
        us = both["backward_gpu_us"]
        out["backward_target"] = dict(
            us=us, target_us=BACKWARD_TARGET_US,
            verdict=("met" if us <= BACKWARD_TARGET_US else "not met") if at_target else None)
    return out


def _has_times(result):
    return "backward_gpu_us" in result and "bwd_wall_ms_median" in result.get("eager", {})


def _ms(value):
    return "—" if value is None else f"{value:.3f}"


def _err_cell(errs):
    if not errs:
        return "—"
    return ", ".join(f"{name} {value:.1e}" for name, value in errs.items())


def _row(mode, result):
    if "error" in result and "backward_gpu_us" not in result:
        return f"| {mode} | error: {result['error'].splitlines()[-1][:120]} | | | | |"
    kernels = ", ".join(f"{short_name(k['name'])}: {k['us']:.0f}"
                        for k in result.get("kernels", [])[:TOP_KERNELS])
    graph = result.get("graph", {})
    if "error" in graph:
        graph_cell = "capture failed: " + graph["error"].splitlines()[0][:80]
    else:
        graph_cell = _ms(graph.get("fwd_bwd_ms_median"))
    errs = result.get("err_ratio", {})
    err_cell = _err_cell(errs) + (" (rerun of fla)" if mode == "fla" and errs else "")
    gpu = result.get("backward_gpu_us")
    return (f"| {mode} | {'—' if gpu is None else f'{gpu:.0f}'} | {kernels} | "
            f"{_ms(result.get('eager', {}).get('bwd_wall_ms_median'))} | {graph_cell} | "
            f"{err_cell} |")


def markdown(shape, call, modes, sticks):
    """The table of one shape and the yardsticks under it."""
    lengths = seq_lengths(shape)
    rows = f"varlen {len(lengths)} sequences ({', '.join(map(str, lengths))}), T={shape[1]}" \
        if lengths else f"B={shape[0]} T={shape[1]}"
    lines = [f"### chunk_kda {rows} H={shape[2]} K=V={K} {X_DTYPE} (--call {call})", "",
             "| mode | backward GPU µs | top kernels (name: µs) | eager bwd wall ms | "
             "graph fwd+bwd ms | err_ratio vs fla |",
             "|---|---|---|---|---|---|"]
    lines += [_row(mode, result) for mode, result in modes.items()]
    lines.append("")
    for mode, s in sticks["savings"].items():
        share = "—" if s["wall_share"] is None else f"{100 * s['wall_share']:.0f}%"
        verdict = f" (target >= {100 * WALL_SHARE_TARGET:.0f}%: {s['verdict']})" \
            if s["verdict"] else ""
        lines.append(f"- {mode}: GPU time saved by our kernels {s['gpu_saved_us']:.0f} µs, "
                     f"eager wall time saved {s['wall_saved_us']:.0f} µs: {share}{verdict}")
    target = sticks["backward_target"]
    if target is not None:
        verdict = f": {target['verdict']}" if target["verdict"] else \
            f" (the target is set at {shape_label(TARGET_SHAPE)})"
        lines.append(f"- both: backward GPU time {target['us'] / 1e3:.3f} ms vs the "
                     f"{target['target_us'] / 1e3:.1f} ms target{verdict}")
    configs = _configs_line(modes)
    if configs:
        lines.append(configs)
    return "\n".join(lines) + "\n"


def ran_configs(modes):
    """{kernel: {config, how}}: the config each autotuned fla kernel ran with, over all modes."""
    seen = {}
    for result in modes.values():
        for kernel, entry in result.get("fla_configs", {}).items():
            seen.setdefault(kernel, entry)
    return seen


def _configs_line(modes):
    """The replaced kernels' configs in full, the others counted by how they were chosen."""
    seen = ran_configs(modes)
    if not seen:
        return ""
    parts = [f"{kernel} {config_text(seen[kernel]['config'])} ({seen[kernel]['how']})"
             for kernel in (FLA_WY_KERNEL, FLA_INTRA_KERNEL) if kernel in seen]
    others = {}
    for kernel, entry in seen.items():
        if kernel not in (FLA_WY_KERNEL, FLA_INTRA_KERNEL):
            how = entry["how"]
            others[how] = others.get(how, 0) + 1
    parts += [f"{n} other kernels {how}" for how, n in sorted(others.items())]
    return "- fla's autotuned kernels ran: " + "; ".join(parts)


def err_failures(modes):
    """'mode dname err' for every gradient of a mode other than fla above its bar against fla's
    (kda_testing.bar_beside_fla: ERR_BAR, twice it for dA_log and ddt_bias), or not finite."""
    bad = []
    for mode, result in modes.items():
        if mode == "fla":
            continue
        for name, value in result.get("err_ratio", {}).items():
            bar = bar_beside_fla(name, X_DTYPE)
            if not value <= bar:  # NaN fails too
                bad.append(f"{mode} {name} {value:.2e} (bar {bar:.0e})")
    return bad


# --- the GPU side ---------------------------------------------------------------------------


def err_ratio(x, ref):
    """rms(x - ref) / rms(ref) with float64 accumulation (the plain rms(x - ref) when ref is all
    zero, as tests/python/kda_testing.py), on the tensors' device."""
    diff = x.double() - ref.double()
    num = float(diff.square().sum())
    den = float(ref.double().square().sum())
    return math.sqrt(num / den) if den > 0 else math.sqrt(num / max(diff.numel(), 1))


def call_options(call):
    """chunk_kda's keyword options for `call` (see the module docstring)."""
    if call == "test":
        return dict(use_qk_l2norm_in_kernel=True, output_final_state=True)
    if call == "cudnn":
        return dict(use_qk_l2norm_in_kernel=False, state_v_first=True, output_final_state=True)
    return dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                use_beta_sigmoid_in_kernel=True, state_v_first=True, output_final_state=False)


def make_inputs(shape, call, seed, device):
    """(leaves, output gradients): the leaves require grad; the output gradients are for o and
    (with an initial state) the final state, one state per sequence (B, or the varlen shape's
    sequences). Drawn on the device (B=4 T=8192 is 134 M values per tensor)."""
    import torch
    import torch.nn.functional as F

    B, T, H = shape[:3]
    N = len(seq_lengths(shape)) or B  # sequences: initial and final states
    gen = torch.Generator(device=device).manual_seed(seed)
    x = getattr(torch, X_DTYPE)

    def uniform(*size, dtype=torch.float32):
        return torch.rand(*size, generator=gen, device=device).to(dtype)

    def normal(*size, dtype=torch.float32):
        return torch.randn(*size, generator=gen, device=device).to(dtype)

    leaves = dict(q=uniform(B, T, H, K, dtype=x), k=uniform(B, T, H, K, dtype=x),
                  v=uniform(B, T, H, V, dtype=x))
    if call == "test":
        leaves["g"] = F.logsigmoid(normal(B, T, H, K))
        leaves["beta"] = normal(B, T, H, dtype=x).sigmoid()
        leaves["initial_state"] = normal(N, H, K, V)
        cotangents = [normal(B, T, H, V, dtype=x), normal(N, H, K, V)]
    elif call == "cudnn":
        # q, k with unit rows (normalised here, as cuDNN's backward needs them); log decays in
        # (-5, 0); beta after its sigmoid; a V-first initial state and final-state gradient.
        leaves["q"] = F.normalize(normal(B, T, H, K), dim=-1).to(x)
        leaves["k"] = F.normalize(normal(B, T, H, K), dim=-1).to(x)
        leaves["g"] = -5.0 * normal(B, T, H, K).sigmoid()
        leaves["beta"] = normal(B, T, H).sigmoid()  # float32: cuDNN's sm90 backward needs it
        leaves["initial_state"] = normal(N, H, V, K)
        cotangents = [normal(B, T, H, V, dtype=x), normal(N, H, V, K)]
    else:
        leaves["g"] = normal(B, T, H, K, dtype=x)  # the raw gate input
        leaves["beta"] = normal(B, T, H, dtype=x)  # logits: the sigmoid runs in the kernel
        leaves["A_log"] = torch.log(1 + 15 * uniform(H))  # log U(1, 16)
        dt = torch.exp(math.log(1e-3) + uniform(H * K) * (math.log(1e-1) - math.log(1e-3)))
        dt = dt.clamp(min=1e-4)
        leaves["dt_bias"] = dt + torch.log(-torch.expm1(-dt))  # softplus(dt_bias) = dt
        cotangents = [normal(B, T, H, V, dtype=x)]
    for t in leaves.values():
        t.requires_grad_(True)
    return leaves, cotangents


def cu_seqlens_of(shape, device):
    """chunk_kda's cu_seqlens (int32) for a varlen shape; None for B sequences of T tokens."""
    import torch

    lengths = seq_lengths(shape)
    if not lengths:
        return None
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)


def cudnn_chunk_kda(q, k, v, g, beta, initial_state=None, output_final_state=False,
                    state_v_first=True, use_qk_l2norm_in_kernel=False, cu_seqlens=None):
    """cuDNN-frontend's sm90 engine behind chunk_kda's call (--call cudnn): [B, T, ...] tensors as
    its packed THD layout with cu_seqlens of B sequences of T tokens (or the varlen shape's
    cu_seqlens, B = 1), its state [N, HV, V, K] (fla's state_v_first), the plan pinned to its
    fused Hopper CUDA engine."""
    import torch
    from cudnn.linear_attention.ops.kda import kimi_delta_attention

    if not state_v_first or use_qk_l2norm_in_kernel:
        raise ValueError("cudnn_chunk_kda serves --call cudnn only (V-first state, no l2norm)")
    B, T = q.shape[:2]
    packed = [t.reshape(B * T, *t.shape[2:]) for t in (q, k, v, g, beta)]
    if cu_seqlens is None:
        cu_seqlens = torch.arange(0, (B + 1) * T, T, dtype=torch.int32, device=q.device)
    o, final_state = kimi_delta_attention(*packed, cu_seqlens, initial_state=initial_state,
                                          output_final_state=output_final_state,
                                          plan_name=CUDNN_PLAN)
    return o.reshape(B, T, *o.shape[1:]), (final_state if output_final_state else None)


def grad_name(leaf):
    return "dh0" if leaf == "initial_state" else "d" + leaf


class Layer:
    """chunk_kda on fixed inputs: forward, backward, gradients."""

    def __init__(self, chunk_kda, leaves, cotangents, call, cu_seqlens=None):
        self.chunk_kda = chunk_kda
        self.leaves = leaves
        self.cotangents = cotangents
        self.options = call_options(call)
        if cu_seqlens is not None:
            self.options["cu_seqlens"] = cu_seqlens

    def clear_grads(self):
        # None, not zeros: the backward then writes fresh gradients (set_to_none, as training's
        # zero_grad does) instead of adding into old ones.
        for t in self.leaves.values():
            t.grad = None

    def forward(self):
        o, ht = self.chunk_kda(**self.leaves, **self.options)
        return [o] if ht is None else [o, ht]

    def backward(self, outputs):
        # The output gradients go straight into chunk_kda's backward: no loss kernels to time.
        import torch

        torch.autograd.backward(outputs, self.cotangents[:len(outputs)])

    def step(self):
        self.clear_grads()
        self.backward(self.forward())

    def grads(self, clone=True):
        return {grad_name(n): (t.grad.clone() if clone else t.grad)
                for n, t in self.leaves.items()}


def time_eager(layer, reps, warmup):
    """Median wall times (ms) of the forward and of the backward, each between two
    torch.cuda.synchronize() calls."""
    import torch

    fwd, bwd = [], []
    for i in range(warmup + reps):
        layer.clear_grads()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        outputs = layer.forward()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        layer.backward(outputs)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        del outputs
        if i >= warmup:
            fwd.append(1e3 * (t1 - t0))
            bwd.append(1e3 * (t2 - t1))
    return dict(bwd_wall_ms_median=statistics.median(bwd), bwd_wall_ms_min=min(bwd),
                fwd_wall_ms_median=statistics.median(fwd), reps=reps, warmup=warmup)


def profile_backward(layer, runs):
    """GPU time per kernel of the backward (per run), its sum and the mean span."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    events, spans = [], []
    for _ in range(runs):
        layer.clear_grads()
        outputs = layer.forward()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            layer.backward(outputs)
            torch.cuda.synchronize()
        del outputs
        run_events = [e for e in prof.events() if is_device_event(e)]
        spans.append(device_span_us(run_events))
        events += run_events
    kernels = kernel_times(events, runs)
    return dict(backward_gpu_us=sum(k["us"] for k in kernels),
                backward_gpu_span_us=statistics.mean(spans), kernels=kernels,
                profiled_runs=runs)


def start_profiler_once():
    """One profiled no-op before any timing: the first profiler session attaches CUPTI to the
    process, which may stay attached and add host time to later launches; started here, every
    mode's eager timing runs under the same conditions (else fla's, measured first, alone
    would run without it)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        torch.zeros(1, device=DEVICE).add_(1)
        torch.cuda.synchronize()


def time_graph(layer, replays, reference):
    """Forward + backward captured in one CUDA graph: median replay time by CUDA events (ms),
    median wall time of a synchronized replay, and the graph's gradients against `reference`
    (the same mode's eager ones). Frees the graph before returning."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as capture requires
        for _ in range(3):
            layer.step()
    torch.cuda.current_stream().wait_stream(side)
    layer.clear_grads()  # the captured backward allocates .grad from the graph's pool
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            layer.backward(layer.forward())
        graph.replay()
        torch.cuda.synchronize()
        graph_grads = layer.grads(clone=False)
        errs = {n: err_ratio(graph_grads[n], reference[n]) for n in reference}
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
        for start, end in zip(starts, ends):
            start.record()
            graph.replay()
            end.record()
        torch.cuda.synchronize()
        device_ms = [s.elapsed_time(e) for s, e in zip(starts, ends)]
        walls = []
        for _ in range(replays):
            t0 = time.perf_counter()
            graph.replay()
            torch.cuda.synchronize()
            walls.append(1e3 * (time.perf_counter() - t0))
        return dict(fwd_bwd_ms_median=statistics.median(device_ms), fwd_bwd_ms_min=min(device_ms),
                    wall_ms_median=statistics.median(walls), replays=replays,
                    err_ratio_max_vs_eager=max(errs.values()))
    finally:
        del graph
        layer.clear_grads()


class FlaTuning:
    """fla's autotuners for this run: trimmed or autotuning, the two replaced kernels pinned,
    and a record of the config every autotuned fla kernel ran with (Autotuner.best_config is
    the config of its latest launch: cleared before each mode, read after)."""

    def __init__(self, plan, full_autotune, autotune=()):
        import fla_tuning

        self.tuners = fla_tuning.fla_autotuners()
        self.how = {}
        names = {_tuner_name(t) for t in self.tuners}
        unknown = sorted(set(autotune) - names)
        if unknown:
            raise RuntimeError(f"--autotune: fla has no autotuned kernel named {unknown} "
                               f"(it has {sorted(names)})")
        for kernel, (config, how) in plan.items():
            tuner = self._tuner(kernel)
            if config is not None:
                fla_tuning.pin(tuner, config)  # before trimming: pin keeps the original Config
            elif hasattr(tuner, "all_configs"):  # pinned for an earlier shape: unpin
                tuner.configs = list(tuner.all_configs)
                tuner.cache.clear()
            if config is None and kernel in autotune:  # not trimmed below
                how = "autotuned (--autotune): " + how.split(": ", 1)[-1]
            self.how[kernel] = how
        if not full_autotune:
            # A pinned tuner holds only its pin: kept either way.
            fla_tuning.trim_fla_autotuners(keep=autotune)
        for name in autotune:
            self.how.setdefault(name, "autotuned (--autotune)")
        self.default_how = "autotuned" if full_autotune else "first config (trimmed)"

    def _tuner(self, kernel):
        found = [t for t in self.tuners if _tuner_name(t) == kernel]
        if len(found) != 1:
            raise RuntimeError(f"fla has {len(found)} autotuned kernels named {kernel} (expected "
                               f"one): has fla changed?")
        return found[0]

    def clear(self):
        for tuner in self.tuners:
            tuner.best_config = None

    def ran(self):
        """{kernel: {config, how[, keys]}} for every fla autotuner launched since clear()."""
        out = {}
        for tuner in self.tuners:
            config = getattr(tuner, "best_config", None)
            if config is None:
                continue
            name = _tuner_name(tuner)
            entry = dict(config=_config_dict(config), how=self.how.get(name, self.default_how))
            if len(tuner.configs) > 1:  # autotuned: the winner per key
                entry["keys"] = {str(key): _config_dict(c) for key, c in tuner.cache.items()}
            out[name] = entry
        return out


def _tuner_name(tuner):
    return tuner.base_fn.__name__


def _config_dict(config):
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def set_mode(mode, kfla):
    if not MODE_OPS[mode]:  # fla's own kernels, or cuDNN-frontend's engine
        kfla.disable()
    else:
        kfla.enable(ops=MODE_OPS[mode])
    if "chunk_kda" in MODE_OPS[mode]:
        from kda_kernels import _layer

        library = mode == "layer-library"
        epilogue = mode.startswith("layer-epilogue") or mode in ("layer-prep", "layer-library")
        _layer.BACKWARD = "epilogue" if epilogue else "split"
        _layer.use_library_stages(library)
        if mode == "layer-epilogue-kda-scans":
            _layer.FORWARD_SCAN = _layer.REVERSE_SCAN = "kda"
        if mode == "layer-prep":
            _layer.PREP = "kda"


def run_mode(mode, layer, args, reference, tuning):
    """Every measurement of one mode; the mode's eager gradients are returned beside it."""
    import torch

    result = {}
    tuning.clear()
    t0 = time.perf_counter()
    layer.step()  # compiles fla's kernels on first use (and autotunes the untrimmed ones)
    torch.cuda.synchronize()
    result["first_call_s"] = time.perf_counter() - t0
    layer.step()  # the gradients of a warm run
    grads = layer.grads()
    result["eager"] = time_eager(layer, args.reps, args.warmup)
    # The last timed run's gradients against the first: the mode's run-to-run repeatability
    # (for mode fla, the err_ratio column: what "same as fla" can mean at best).
    again = layer.grads(clone=False)
    rerun = {n: err_ratio(again[n], grads[n]) for n in grads}
    del again
    result["rerun_err_ratio_max"] = max(rerun.values())
    if mode == "fla":
        result["err_ratio"] = rerun
    elif reference is not None:
        result["err_ratio"] = {n: err_ratio(grads[n], reference[n]) for n in grads}
    result.update(profile_backward(layer, args.profile_reps))
    if not args.no_graph:
        try:
            result["graph"] = time_graph(layer, args.graph_replays, grads)
        except Exception as e:  # a capture that fails is a finding, not a crash
            result["graph"] = dict(error=f"{type(e).__name__}: {e}")
            log(f"  {mode}: CUDA graph failed: {result['graph']['error']}")
            torch.cuda.synchronize()
    result["fla_configs"] = tuning.ran()
    layer.clear_grads()
    return result, grads


def describe(result):
    parts = [f"backward GPU {result['backward_gpu_us']:.0f} µs",
             f"eager bwd wall {result['eager']['bwd_wall_ms_median']:.3f} ms"]
    if "fwd_bwd_ms_median" in result.get("graph", {}):
        parts.append(f"graph fwd+bwd {result['graph']['fwd_bwd_ms_median']:.3f} ms")
    parts.append(f"first call {result['first_call_s']:.1f} s")
    return ", ".join(parts)


def environment(kk, kfla):
    import torch
    import triton

    import fla

    from kda_kernels import _fla_release

    kda_registry = _fla_release.load().registry
    return dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                triton=triton.__version__, fla=getattr(fla, "__version__", "?"),
                libkda=str(kk.library_path()), torch_op=kk.torch_op_backend(detail=True),
                cuda_kernels=dict(kfla.CUDA_KERNELS),
                cuda_kernel_notes=dict(kfla.CUDA_KERNEL_NOTES),
                # fla's other KDA backends, and whether each would take calls (TileLang, say,
                # would run fla's WY step in mode fla where it is installed).
                fla_kda_backends={name: backend.is_available() and backend.is_enabled()
                                  for name, backend in sorted(kda_registry._backends.items())})


def write_outputs(out_dir, record, tables):
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "layer.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    (out_dir / "layer.md").write_text("\n".join(tables))
    (out_dir / "layer.svg").write_text(layer_chart.svg(record))


def print_configs(modes):
    """Which config every autotuned fla kernel ran with, over all modes of a shape."""
    log("  fla's autotuned kernels ran with:")
    for kernel, entry in sorted(ran_configs(modes).items()):
        log(f"    {kernel}: {config_text(entry['config'])} ({entry['how']})")


def setup(args):
    """Imports torch, fla and kda_kernels and checks the device; exits 2 with a message when
    something the run needs is missing. Returns (chunk_kda, kk, kfla, pin entries)."""
    try:
        import torch
    except ImportError as e:
        print(f"layer.py needs torch (and a CUDA device): {e}", file=sys.stderr)
        sys.exit(2)
    if not torch.cuda.is_available():
        print("layer.py needs a CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        sys.exit(2)
    try:
        from fla.ops.kda import chunk_kda
    except Exception as e:  # fla pulls in many modules: any failure means no fla
        print(f"layer.py needs flash-linear-attention (fla) on PYTHONPATH: {e}", file=sys.stderr)
        sys.exit(2)
    import kda_kernels as kk
    import kda_kernels.fla as kfla

    if any(m != "fla" for m in args.modes):
        if not kk.backend_available("cuda"):
            print(f"layer.py: the libkda at {kk.library_path()} has no cuda backend (modes wy, "
                  f"both need it; KDA_LIBRARY names the library)", file=sys.stderr)
            sys.exit(2)
        kfla.enable()  # probes which operators have CUDA kernels, once
        kfla.disable()
    entries = None
    if args.fla_configs is not None:
        if not Path(args.fla_configs).is_file():
            print(f"layer.py: --fla-configs {args.fla_configs} does not exist ('none' runs "
                  f"without the WY pin)", file=sys.stderr)
            sys.exit(2)
        entries = load_pins(args.fla_configs)
    return chunk_kda, kk, kfla, entries


def run_shape(shape, args, chunk_kda, kfla, tuning):
    """All modes of one shape: ({mode: result}, yardsticks)."""
    import torch

    leaves, cotangents = make_inputs(shape, args.call, args.seed, DEVICE)
    layer = Layer(chunk_kda, leaves, cotangents, args.call, cu_seqlens_of(shape, DEVICE))
    modes, reference = {}, None
    for mode in args.modes:
        log(f"{shape_label(shape)} {mode}: {'fla only' if mode == 'fla' else MODE_OPS[mode]}")
        try:
            set_mode(mode, kfla)
            layer.chunk_kda = cudnn_chunk_kda if mode == "cudnn" else chunk_kda
            result, grads = run_mode(mode, layer, args, reference, tuning)
            result["ops"] = list(kfla.enabled_operators())
            if mode == "fla":
                reference = grads
            del grads
            log(f"  {mode}: {describe(result)}")
        except Exception as e:
            result = dict(error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
            log(f"  {mode}: ERROR {result['traceback']}")
        finally:
            kfla.disable()
            layer.clear_grads()
            torch.cuda.empty_cache()
        modes[mode] = result
    del layer, leaves, cotangents, reference
    torch.cuda.empty_cache()
    return modes, yardsticks(modes, shape)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    chunk_kda, kk, kfla, entries = setup(args)
    out_dir = Path(args.out)
    record = dict(what="bench/layer.py: fla's chunk_kda forward + backward with and without "
                       "kda_kernels (see its docstring)", argv=argv,
                  settings=dict(call=args.call, K=K, V=V, BT=BT, x=X_DTYPE, reps=args.reps,
                                warmup=args.warmup, profile_reps=args.profile_reps,
                                graph_replays=None if args.no_graph else args.graph_replays,
                                seed=args.seed, full_autotune=args.full_autotune, autotune=args.autotune,
                                err_bar=ERR_BAR, options=call_options(args.call)),
                  env=environment(kk, kfla), shapes=[])
    log(f"env: {record['env']}")
    start_profiler_once()
    tables, failures = [], []
    for shape in args.shapes:
        plan = tuning_plan(entries, shape[2], args.call, args.intra_pin, args.full_autotune,
                           varlen=bool(seq_lengths(shape)))
        for kernel, (config, how) in plan.items():
            log(f"{shape_label(shape)}: fla's {kernel}: {config_text(config) if config else ''} "
                f"{how}")
        tuning = FlaTuning(plan, args.full_autotune, args.autotune)
        modes, sticks = run_shape(shape, args, chunk_kda, kfla, tuning)
        table = markdown(shape, args.call, modes, sticks)
        tables.append(table)
        record["shapes"].append(dict(shape=shape_label(shape), B=shape[0], T=shape[1],
                                     H=shape[2], seq_lengths=list(seq_lengths(shape)),
                                     modes=modes, yardsticks=sticks))
        write_outputs(out_dir, record, tables)
        print_configs(modes)
        print("\n" + table, flush=True)
        failures += [f"{shape_label(shape)} {mode}: {r['error']}" for mode, r in modes.items()
                     if "error" in r]
        failures += [f"{shape_label(shape)} {bad}"
                     for bad in err_failures(modes)]
    log(f"wrote {out_dir / 'layer.json'} and {out_dir / 'layer.md'}")
    if failures:
        print("layer.py: errors:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
