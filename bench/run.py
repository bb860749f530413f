#!/usr/bin/env python3
"""The performance table of chunk_kda_bwd_wy_dqkg_fused on a CUDA GPU, in one command:
bytes, bandwidth floor, our median time, fla's Triton time in the same process, a PyTorch eager
baseline, share of floor, speedup, pass/fail against each case's target, and per-output
err_ratio of ours and fla's against the float64 reference. See bench/README.md.

    python3 bench/run.py                      # every case, the general kernel then auto
    python3 bench/run.py --cases 'model-*' --kernels env --quick

Writes bench.csv, bench.md and bench.png under --out (merged with the rows already there:
rows of the same case, implementation and kernel are replaced) and prints the Markdown last.
"""

import argparse
import dataclasses
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(REPO / "tests" / "python"))  # kda_testing: err_ratio, SPEC's pass bars
sys.path.append(str(REPO / "python"))  # kda_kernels, unless PYTHONPATH or an install has it

import cases as cases_mod  # noqa: E402
import report  # noqa: E402
from fla_tuning import find_pin, load_pins, pin  # noqa: E402
from kda_testing import PASS_BAR, err_ratio  # noqa: E402

# fla's WY kernel: the winners of a full autotune on an H200, per autotune key.
DEFAULT_FLA_CONFIGS = REPO.parent / "shared" / "fla_best_configs_h200.json"
FLA_WY_KERNEL = "chunk_kda_bwd_kernel_wy_dqkg_fused"

T_START = time.perf_counter()


def log(message):
    print(f"[{time.perf_counter() - T_START:7.1f}s] {message}", flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Benchmark chunk_kda_bwd_wy_dqkg_fused against fla's Triton kernel and the "
                    "bandwidth floor (bench/README.md).")
    p.add_argument("--cases", default="",
                   help="comma-separated case names or fnmatch patterns (default: all; --list)")
    p.add_argument("--list", action="store_true", help="list the cases with bytes and floors")
    p.add_argument("--merge", nargs="+", metavar="DIR",
                   help="measure nothing: merge the bench.csv of each DIR (later ones win on the "
                        "same case, implementation and kernel) into --out and write its "
                        "bench.csv, bench.md and bench.png; for runs split over several GPUs or "
                        "device calls")
    p.add_argument("--out", default=str(BENCH / "out"),
                   help="output directory for bench.csv, bench.md, bench.png (default bench/out)")
    p.add_argument("--fresh", action="store_true",
                   help="drop the rows already in --out/bench.csv instead of merging into them")
    p.add_argument("--kernels", default="general,auto",
                   help="kernel choices to measure, one child process each, comma-separated: "
                        "general, auto (the default dispatch) (default general,auto; fla "
                        "and the eager baseline run in the first only); 'env' runs in this "
                        "process with the environment's KDA_CUDA_KERNEL")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 20 timed runs after 3 warm-ups (default 200 after 10)")
    p.add_argument("--reps", type=int, default=None, help="timed runs per implementation")
    p.add_argument("--warmup", type=int, default=None, help="warm-up runs per implementation")
    p.add_argument("--no-fla", action="store_true", help="skip fla's Triton kernel")
    p.add_argument("--fla-configs", default=str(DEFAULT_FLA_CONFIGS),
                   help="JSON of fla's tuned winners per autotune key (default "
                        "../shared/fla_best_configs_h200.json): a case whose key is there runs "
                        "that config without autotuning; other cases autotune; '' autotunes all")
    p.add_argument("--fla-autotune-off", action="store_true",
                   help="run fla's kernel with its first autotune config only (no autotuning: "
                        "for correctness-only runs; its times are then not fla's best)")
    p.add_argument("--no-reference", action="store_true",
                   help="skip the float64 reference (no err_ratio columns)")
    p.add_argument("--no-eager", action="store_true", help="skip the PyTorch eager baseline")
    p.add_argument("--ref-budget", type=int, default=65536,
                   help="tokens x value heads the reference recomputes per case; larger cases "
                        "are checked on a sample of whole chunks (default 65536: the model "
                        "shape in full)")
    p.add_argument("--bandwidth", default=str(cases_mod.H200_COPY_BANDWIDTH),
                   help="copy bandwidth in bytes/s for the floors (default 4.27e12, SPEC's "
                        "H200 figure), or 'measured' to use --measure-bandwidth's figure")
    p.add_argument("--measure-bandwidth", action="store_true",
                   help="time a 1 GiB device-to-device copy once and print its bandwidth")
    p.add_argument("--l2-mb", type=float, default=60.0,
                   help="L2 size in MB: input sets are rotated so one round moves >= 3x it")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cpu-dry-run", action="store_true",
                   help="exercise the whole harness on the CPU with shrunken cases, the cpu "
                        "backend and wall-clock timing (numbers are meaningless); fla only "
                        "with TRITON_INTERPRET=1 and --fla-autotune-off")
    # Set by the parent process for its children.
    p.add_argument("--rows-json", help=argparse.SUPPRESS)
    p.add_argument("--ref-cache", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.reps is None:
        args.reps = 20 if args.quick else 200
    if args.warmup is None:
        args.warmup = 3 if args.quick else 10
    if args.reps < 1 or args.warmup < 0:
        p.error("--reps must be >= 1 and --warmup >= 0")
    if args.bandwidth != "measured":
        try:
            args.bandwidth = float(args.bandwidth)
        except ValueError:
            p.error(f"--bandwidth: expected bytes/s or 'measured', got {args.bandwidth!r}")
        if args.bandwidth <= 0:
            p.error("--bandwidth must be positive")
    else:
        args.measure_bandwidth = True
    args.kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    bad = [k for k in args.kernels if k not in (*KERNEL_ENV, "env")]
    if not args.kernels or bad or ("env" in args.kernels and len(args.kernels) > 1):
        p.error(f"--kernels: expected some of general, auto, or env alone; "
                f"got {args.kernels}")
    if args.cpu_dry_run and os.environ.get("TRITON_INTERPRET") != "1":
        args.no_fla = True  # fla's kernels run on a CPU only under Triton's interpreter
    try:
        args.selected = cases_mod.select_cases(args.cases)
    except ValueError as e:
        p.error(str(e))
    return args


# The environment of each --kernels choice; the library reads it once per process.
KERNEL_ENV = {
    "general": {"KDA_CUDA_KERNEL": "general"},
    "auto": {"KDA_CUDA_KERNEL": "auto"},
}


def kernel_label():
    """What the library will run in this process: the default dispatch (tensor-core path where it
    applies) unless KDA_CUDA_KERNEL=general (src/cuda/cuda_backend.cu)."""
    return "general" if os.environ.get("KDA_CUDA_KERNEL") == "general" else "auto"


def list_cases(selected, bandwidth):
    bw = bandwidth if isinstance(bandwidth, float) else cases_mod.H200_COPY_BANDWIDTH
    print(f"{'case':<18} {'MB':>7} {'floor µs':>9} {'issue µs':>9}  {'target':<16} shape")
    for case in selected:
        total = sum(cases_mod.case_bytes(case))
        issue = f"{case.spec_floor_us:g}" if case.spec_floor_us else "—"
        print(f"{case.name:<18} {total / 1e6:7.1f} {cases_mod.floor_us(total, bw):9.1f} "
              f"{issue:>9}  {case.target_text:<16} {case.shape_text()}")


# --- one process: measure the selected cases ------------------------------------------------


def shrink(case):
    """A small version of a case for --cpu-dry-run (same options, tiny extents; a short last
    chunk unless the eager baseline, which needs whole chunks, runs on it)."""
    group = case.hv // case.H
    T = 2 * case.BT if case.eager else case.BT + case.BT // 2
    return dataclasses.replace(
        case, B=min(case.B, 2), T=T, H=2,
        HV=2 * group if case.HV else 0, K=min(case.K, 32), V=min(case.V, 16),
        seqlens=(37, 64, 1, 50) if case.seqlens else ())


class WallTimer:
    """--cpu-dry-run's stand-in for measure.DeviceTimer: wall-clock time per call."""

    def measure(self, calls, reps, warmup, batch=None):
        for i in range(warmup):
            calls[i % len(calls)]()
        times = []
        for i in range(reps):
            t0 = time.perf_counter()
            calls[i % len(calls)]()
            times.append((time.perf_counter() - t0) * 1e6)
        median = statistics.median(times)
        return dict(median_us=median, min_us=min(times), loop_us=median, host_us=median,
                    starved=0)


class Bench:
    """Measures cases in this process; the library reads KDA_CUDA_KERNEL once, so one kernel
    choice per process."""

    def __init__(self, args):
        import torch

        import kda_kernels
        import measure

        self.args, self.torch, self.kk, self.measure = args, torch, kda_kernels, measure
        self.kernel = kernel_label()
        self.env_lines = []
        self.measured_bandwidth = None
        self.fla = None
        self.fla_note = ""
        self.fla_pins = None  # fla's tuned configs per autotune key (--fla-configs)
        if args.cpu_dry_run:
            self.device = torch.device("cpu")
            self.timer = WallTimer()
            self.gpu = "cpu (dry run)"
            self.env_lines.append("CPU dry run: shrunken cases, cpu backend, wall-clock times")
        else:
            self._init_cuda()
        if not args.no_fla:
            self.fla = measure.Fla()
            if self.fla.error:
                self.fla_note = self.fla.error
                log(f"fla skipped: {self.fla.error}")
                self.fla = None
            else:
                self.env_lines.append(f"fla {self.fla.version}")
                if args.fla_autotune_off:
                    config = self.fla.autotune_off()
                    self.fla_note = f"fla autotune off: one config ({config}), times untuned"
                    log(self.fla_note)
                elif args.fla_configs and Path(args.fla_configs).is_file():
                    self.fla_pins = load_pins(args.fla_configs)
                    self.env_lines.append(f"fla pinned to the tuned configs of {args.fla_configs}")
                else:
                    log(f"fla: no tuned configs ({args.fla_configs or 'none given'}): every key "
                        "autotunes (minutes each on a fresh machine)")

    def _init_cuda(self):
        torch, kda_kernels, measure, args = self.torch, self.kk, self.measure, self.args
        if not torch.cuda.is_available():
            raise SystemExit("bench: torch sees no CUDA device (use --cpu-dry-run on a CPU)")
        if not kda_kernels.backend_available("cuda"):
            raise SystemExit(f"bench: the libkda at {kda_kernels.library_path()} has no cuda "
                             "backend (set KDA_LIBRARY to a CUDA build)")
        self.device = torch.device("cuda", torch.cuda.current_device())
        torch.backends.cuda.matmul.allow_tf32 = False  # the eager baseline: IEEE float32 dots
        self.gpu = torch.cuda.get_device_name(self.device)
        self.env_lines += measure.describe_env(self.device, kda_kernels)
        self.timer = measure.DeviceTimer(self.device, log)
        if args.measure_bandwidth:
            self.measured_bandwidth = measure.copy_bandwidth(self.device)
            log(f"device-to-device copy: {self.measured_bandwidth / 1e12:.3f} TB/s "
                f"(read + write; SPEC's H200 figure is 4.27)")
            self.env_lines.append(
                f"measured copy bandwidth {self.measured_bandwidth / 1e12:.3f} TB/s")

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def row(self, case, impl, nbytes, timing, errs, sample, note=""):
        read, written = nbytes
        row = dict(case=case.name, impl=impl, kernel=self.kernel if impl == "kda" else "",
                   shape=case.shape_text(), x=case.x, h_dtype=case.h_dtype, bytes_read=read,
                   bytes_written=written, bytes=read + written, note=note, gpu=self.gpu,
                   run_at=datetime.datetime.now().isoformat(timespec="seconds"))
        if timing:
            row.update(sets=timing["sets"], reps=timing["reps"], median_us=timing["median_us"],
                       min_us=timing["min_us"], loop_us=timing["loop_us"],
                       host_us=timing["host_us"])
            if timing.get("starved"):
                row["note"] = (note + "; " if note else "") + (
                    f"{timing['starved']} timed calls may include host time")
        if errs is not None:
            row.update({f"err_{n}": e for n, e in zip(cases_mod.OUTPUT_NAMES, errs)})
            row["err_sample"] = sample
        if len(row["note"]) > 300:  # a compiler's error can run to pages: the log has it all
            row["note"] = row["note"][:300] + " ..."
        row["note"] = " ".join(row["note"].split())  # one line in the CSV and the Markdown
        return row

    def time_calls(self, calls, n_sets, batch=None):
        timing = self.timer.measure(calls, self.args.reps, self.args.warmup, batch)
        return dict(timing, sets=n_sets, reps=self.args.reps)

    def reference(self, case, inputs, scale):
        """The float64 reference on the sampled chunks: (plan, outputs as float64 arrays)."""
        torch, kk = self.torch, self.kk
        table = cases_mod.chunk_table(case.batch, case.total_t, case.BT, case.seqlens or None)
        picks = cases_mod.pick_chunks(table, case.hv, self.args.ref_budget, self.args.seed)
        plan = cases_mod.sample_plan(table, picks)
        small = {n: t.cpu() for n, t in cases_mod.sample_inputs(inputs, plan).items()}
        checksum = [float(small[n].double().sum()) for n in cases_mod.INPUT_NAMES]
        cache = None
        if self.args.ref_cache:
            cache = Path(self.args.ref_cache) / (
                f"{case.name}-seed{self.args.seed}-budget{self.args.ref_budget}.npz")
            if cache.is_file():
                saved = np.load(cache)
                if list(saved["checksum"]) == checksum:
                    log(f"  reference: reused from the first kernel's run ({plan.label()})")
                    return plan, tuple(saved[n] for n in cases_mod.OUTPUT_NAMES)
        t0 = time.perf_counter()
        outputs = kk.chunk_kda_bwd_wy_dqkg_fused(
            **small, scale=scale, chunk_size=case.BT,
            cu_seqlens=torch.from_numpy(plan.cu_seqlens), backend="cpu-ref")
        ref = self.measure.to_float64(outputs)
        log(f"  reference: float64 cpu-ref on {plan.label()} in {time.perf_counter() - t0:.1f} s")
        if cache is not None:
            np.savez(cache, checksum=np.array(checksum),
                     **dict(zip(cases_mod.OUTPUT_NAMES, ref)))
        return plan, ref

    def errors(self, outputs, plan, ref):
        got = self.measure.to_float64(cases_mod.sample_outputs(outputs, plan))
        return [err_ratio(o, r) for o, r in zip(got, ref)]

    def run_case(self, case, rows):
        """Measure one case: ours, then fla's, then the eager baseline, appending a row for
        each to `rows` (an error row for a stage that raised, and the next stage still runs)."""
        torch, args = self.torch, self.args
        log(f"== {case.name}: {case.shape_text()} (target {case.target_text})")
        nbytes = cases_mod.case_bytes(case)
        n_sets = cases_mod.rotation_sets(nbytes[0], args.l2_mb * 1e6)
        sets = [self.measure.make_inputs(case, args.seed + i, self.device)
                for i in range(n_sets)]
        try:
            cu = sets[0][1]
            scale = case.K ** -0.5
            log(f"  {sum(nbytes) / 1e6:.1f} MB, floor {cases_mod.floor_us(sum(nbytes)):.1f} µs "
                f"at SPEC's 4.27 TB/s; {n_sets} input set(s) rotated")
            plan = ref = None
            if not args.no_reference:
                try:
                    plan, ref = self.reference(case, sets[0][0], scale)
                except Exception as exc:  # measure the speed all the same
                    traceback.print_exc()
                    log(f"  reference failed ({type(exc).__name__}: {exc}): no err_ratio")
                    plan = ref = None
            check = (plan, ref)
            self.stage(rows, case, "kda", nbytes,
                       lambda: self.run_ours(case, sets, cu, scale, nbytes, check))
            if self.fla is not None:
                self.stage(rows, case, "fla", nbytes,
                           lambda: self.run_fla(case, sets, cu, scale, nbytes, check))
            elif not args.no_fla and self.fla_note:
                rows.append(self.row(case, "fla", nbytes, None, None, "", self.fla_note))
            if case.eager and not args.no_eager and not case.varlen:
                self.stage(rows, case, "torch-eager", nbytes,
                           lambda: self.run_eager(case, sets, scale, nbytes, check))
        finally:
            sets.clear()  # free the inputs before the next case
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    def stage(self, rows, case, impl, nbytes, measure):
        try:
            rows.append(measure())
        except Exception as exc:  # keep going: the other implementations still get measured
            traceback.print_exc()
            log(f"  {case.name} {impl} failed: {type(exc).__name__}: {exc}")
            rows.append(self.row(case, impl, nbytes, None, None, "",
                                 f"error: {type(exc).__name__}: {exc}"))

    def checked(self, outputs, check):
        """(errors or None, sample label) of outputs against the reference."""
        plan, ref = check
        if ref is None:
            return None, ""
        return self.errors(outputs, plan, ref), plan.label()

    def run_ours(self, case, sets, cu, scale, nbytes, check):
        kk = self.kk
        ci = kk.chunk_indices(cu, case.BT) if cu is not None else None

        def ours(inputs):
            return kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, scale=scale, cu_seqlens=cu,
                                                  chunk_size=case.BT, chunk_indices=ci)

        outputs = ours(sets[0][0])
        self.sync()
        note = ""
        actual = cases_mod.problem_bytes(sets[0][0], outputs, extra=(cu, ci))
        if actual != nbytes:
            note = f"bytes {actual} differ from the case formula {nbytes}"
            log("  warning: " + note)
        errs, sample = self.checked(outputs, check)
        del outputs
        timing = self.time_calls([lambda i=i: ours(i) for i, _ in sets], len(sets))
        log(f"  kda ({self.kernel}): {timing['median_us']:.1f} µs median "
            f"({cases_mod.floor_us(sum(nbytes)) / timing['median_us']:.0%} of floor), "
            f"loop {timing['loop_us']:.1f} µs/call" + _err_text(errs))
        return self.row(case, "kda", actual, timing, errs, sample, note)

    def run_fla(self, case, sets, cu, scale, nbytes, check):
        fla = self.fla
        ci = fla.prepare_chunk_indices(cu, case.BT) if cu is not None else None

        def theirs(inputs):
            return fla.call(inputs, scale, case.BT, cu, ci)

        note = self.fla_note
        if self.fla_pins is not None:
            config = find_pin(self.fla_pins, FLA_WY_KERNEL, BT=case.BT, HV=case.hv, X=case.x,
                              beta=case.x, h=case.x if case.h == "x" else "float32",
                              varlen=case.varlen, state_v_first=False)
            tuner = fla.autotuner()
            if config is not None:
                log(f"  fla: pinned to its tuned config {pin(tuner, config)}")
            else:
                tuner.configs = getattr(tuner, "all_configs", tuner.configs)
                tuner.cache.clear()
                note = "fla autotuned here (no tuned config recorded for this key)"
                log("  " + note)

        log("  fla: first call (Triton compiles; an unpinned key also autotunes: minutes on a "
            "fresh machine)")
        t0 = time.perf_counter()
        outputs = theirs(sets[0][0])
        self.sync()
        log(f"  fla: first call took {time.perf_counter() - t0:.1f} s; config "
            f"{fla.best_config()}")
        errs, sample = self.checked(outputs, check)
        del outputs
        timing = self.time_calls([lambda i=i: theirs(i) for i, _ in sets], len(sets))
        log(f"  fla: {timing['median_us']:.1f} µs median, loop {timing['loop_us']:.1f} µs/call"
            + _err_text(errs))
        return self.row(case, "fla", nbytes, timing, errs, sample, note)

    def run_eager(self, case, sets, scale, nbytes, check):
        from eager import chunk_kda_bwd_wy_dqkg_eager

        def eager(inputs):
            return chunk_kda_bwd_wy_dqkg_eager(**inputs, scale=scale, chunk_size=case.BT)

        outputs = eager(sets[0][0])
        errs, sample = self.checked(outputs, check)
        del outputs
        # ~40 kernels a call: small batches keep the launch queue from filling up.
        timing = self.time_calls([lambda i=i: eager(i) for i, _ in sets], len(sets), batch=5)
        log(f"  torch eager: {timing['median_us']:.1f} µs median" + _err_text(errs))
        return self.row(case, "torch-eager", nbytes, timing, errs, sample)

    def error_row(self, case, exc):
        read, written = cases_mod.case_bytes(case)
        return self.row(case, "kda", (read, written), None, None, "",
                        f"error: {type(exc).__name__}: {exc}")


def _err_text(errs):
    if not errs:
        return ""
    return "; err_ratio " + " ".join(f"{n}={e:.1e}" for n, e in zip(cases_mod.OUTPUT_NAMES, errs))


def measure_here(args, sink):
    """Measure the selected cases in this process; `sink(rows, bench)` gets the rows so far
    after every case (so a run cut short keeps what it measured)."""
    bench = Bench(args)
    selected = [shrink(c) for c in args.selected] if args.cpu_dry_run else args.selected
    rows = []
    log(f"kda kernel: {bench.kernel}; {len(selected)} case(s); {args.reps} timed runs after "
        f"{args.warmup} warm-ups")
    for case in selected:
        try:
            bench.run_case(case, rows)
        except Exception as exc:  # keep going: one failing case must not lose the others
            traceback.print_exc()
            log(f"  {case.name} failed: {type(exc).__name__}: {exc}")
            rows.append(bench.error_row(case, exc))
        sink(rows, bench)
    return rows, bench


# --- outputs --------------------------------------------------------------------------------


class Outputs:
    """bench.csv / bench.md / bench.png under --out, merged with the rows already there."""

    def __init__(self, args, argv):
        self.args = args
        self.dir = Path(args.out)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.csv = self.dir / "bench.csv"
        self.old = [] if args.fresh else report.read_csv(self.csv)
        if self.old:
            log(f"merging into the {len(self.old)} rows of {self.csv} (--fresh to start over)")
        self.command = "python3 bench/run.py " + " ".join(argv)

    def write(self, new_rows, env_lines, measured_bandwidth, final=False):
        bandwidth = self.args.bandwidth
        if bandwidth == "measured":
            bandwidth = measured_bandwidth or cases_mod.H200_COPY_BANDWIDTH
        rows = report.merge_rows(self.old, [dict(r) for r in new_rows])
        report.finalize(rows, bandwidth, PASS_BAR)
        report.write_csv(self.csv, rows)
        merged = " Rows of earlier runs are merged in (see bench.csv's run_at)." if self.old else ""
        timed = "wall-clock" if self.args.cpu_dry_run else "CUDA-event"
        header = [
            f"Measured {datetime.date.today().isoformat()} by `{self.command}`.{merged}",
            "",
            *(f"- {line}" for line in env_lines),
            f"- floor = bytes / {bandwidth / 1e12:.3f} TB/s; times are medians of {timed} "
            f"timed calls ({self.args.reps} after {self.args.warmup} warm-ups), inputs rotated "
            f"so that repeated calls do not find them in L2",
        ]
        md = report.markdown(rows, header)
        (self.dir / "bench.md").write_text(md + "\n")
        if final:
            log(report.chart(self.dir / "bench.png", rows))
            log(f"wrote {self.csv}, {self.dir / 'bench.md'}")
            print("\n" + md, flush=True)
        return rows


def run_children(args, argv, outputs):
    """One child process per KDA_CUDA_KERNEL choice; fla and the eager baseline in the first.
    The outputs are rewritten whenever a child reports a finished case, so a run cut short
    (e.g. by a time limit) keeps what it measured."""
    # SIGTERM (a time limit) as an exception, so that the scratch folder is removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    scratch = Path(tempfile.mkdtemp(prefix="kda-bench-"))
    done_rows, env_lines, bandwidth, failed = [], [], None, []
    try:
        for i, kernel in enumerate(args.kernels):
            rows_json = scratch / f"rows-{kernel}.json"
            command = [sys.executable, str(Path(__file__).resolve()), *argv,
                       "--kernels", "env", "--rows-json", str(rows_json),
                       "--ref-cache", str(scratch)]
            if i > 0:
                command += ["--no-fla", "--no-eager"]
            child_env = KERNEL_ENV[kernel]
            log(f"#### {' '.join(f'{k}={v}' for k, v in child_env.items())}: "
                f"{' '.join(command[1:])}")
            child = subprocess.Popen(command, env=dict(os.environ, **child_env))
            seen, rows = None, []
            while True:
                try:
                    rc = child.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    rc = None
                stamp = rows_json.stat().st_mtime_ns if rows_json.is_file() else None
                if stamp != seen:
                    seen = stamp
                    result = json.loads(rows_json.read_text())
                    rows = result["rows"]
                    env_lines += [line for line in result["env"] if line not in env_lines]
                    bandwidth = bandwidth or result.get("measured_bandwidth")
                    outputs.write(done_rows + rows, env_lines, bandwidth)
                if rc is not None:
                    break
            done_rows += rows
            if rc != 0:
                failed.append(f"kernel choice {kernel} exited with {rc}")
                log(f"#### {failed[-1]}")
        outputs.write(done_rows, env_lines, bandwidth, final=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for line in failed:
        log(f"FAILED: {line}")
    return 1 if failed else 0


def merge_runs(dirs, outputs):
    """--merge: the rows of each DIR's bench.csv, merged in order, written as one table."""
    rows = []
    for folder in dirs:
        csv_path = Path(folder) / "bench.csv"
        found = report.read_csv(csv_path)
        if not found:
            log(f"merge: no rows in {csv_path}")
            return 1
        log(f"merge: {len(found)} rows from {csv_path}")
        rows = report.merge_rows(rows, found)
    outputs.write(rows, [f"merged from {', '.join(str(d) for d in dirs)}"], None, final=True)
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.list:
        list_cases(args.selected, args.bandwidth)
        return 0

    if args.rows_json:  # a child of run_children: hand the rows back, write nothing else
        def sink(rows, bench):
            path = Path(args.rows_json)
            partial = path.with_suffix(".partial")
            partial.write_text(json.dumps(dict(
                rows=rows, env=bench.env_lines, measured_bandwidth=bench.measured_bandwidth)))
            os.replace(partial, path)  # the parent never reads a half-written file

        measure_here(args, sink)
        return 0

    outputs = Outputs(args, argv)
    if args.merge:
        return merge_runs(args.merge, outputs)
    if args.kernels == ["env"]:
        rows, bench = measure_here(
            args, lambda rows, bench: outputs.write(rows, bench.env_lines,
                                                    bench.measured_bandwidth))
        outputs.write(rows, bench.env_lines, bench.measured_bandwidth, final=True)
        return 0
    return run_children(args, argv, outputs)


if __name__ == "__main__":
    sys.exit(main())
