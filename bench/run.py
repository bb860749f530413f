#!/usr/bin/env python3
"""The performance table of one operator on a CUDA GPU, in one command: bytes, bandwidth floor,
our median time per kernel choice, fla's Triton time in the same process, a PyTorch eager
baseline (chunk_bwd_wy_dqkg), share of floor, speedup, pass/fail against each case's target,
and per-output err_ratio of ours and fla's against the float64 reference. See bench/README.md.

    python3 bench/run.py                                  # chunk_bwd_wy_dqkg, every case
    python3 bench/run.py --op chunk_bwd_intra             # the second operator's cases
    python3 bench/run.py --cases 'model-*' --kernels auto --quick

Every kernel choice (--kernels simt,sm80_mma,auto) is timed in this one process through the
operators' kernel= keyword. Writes bench.csv, bench.md, bench.png and fla_configs.json under
--out (merged with what is already there: rows of the same case, implementation and kernel are
replaced) and prints the Markdown last.
"""

import argparse
import dataclasses
import datetime
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(REPO / "tests" / "python"))  # kda_testing: err_ratio, SPEC's pass bars
sys.path.append(str(REPO / "python"))  # kda_kernels, unless PYTHONPATH or an install has it

import cases as cases_mod  # noqa: E402
import report  # noqa: E402
from fla_tuning import find_pin, load_pins, pin  # noqa: E402
from kda_testing import INTRA_PASS_BAR, PASS_BAR, err_ratio  # noqa: E402

# fla's tuned winners on an H200, per kernel and autotune key.
DEFAULT_FLA_CONFIGS = REPO.parent / "shared" / "fla_best_configs_h200.json"
# SPEC's err_ratio bars against the float64 reference, per operator and X dtype.
PASS_BARS = {cases_mod.WY: PASS_BAR, cases_mod.INTRA: INTRA_PASS_BAR}
KERNELS = ("simt", "sm80_mma", "auto")  # the library's kernel choices (kda_kernel_name)
FLA_CONFIGS_FILE = "fla_configs.json"

T_START = time.perf_counter()


def log(message):
    print(f"[{time.perf_counter() - T_START:7.1f}s] {message}", flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Benchmark one operator against fla's Triton kernel and the bandwidth "
                    "floor (bench/README.md).")
    p.add_argument("--op", default=cases_mod.WY, choices=cases_mod.OPS,
                   help="the operator (default chunk_bwd_wy_dqkg)")
    p.add_argument("--cases", default="",
                   help="comma-separated case names or fnmatch patterns of --op's cases "
                        "(default: all; --list)")
    p.add_argument("--list", action="store_true", help="list the cases with bytes and floors")
    p.add_argument("--merge", nargs="+", metavar="DIR",
                   help="measure nothing: merge the bench.csv of each DIR (later ones win on the "
                        "same case, implementation and kernel) into --out and write its "
                        "bench.csv, bench.md and bench.png; for runs split over several GPUs or "
                        "device calls")
    p.add_argument("--out", default=str(BENCH / "out"),
                   help="output directory for bench.csv, bench.md, bench.png, fla_configs.json "
                        "(default bench/out)")
    p.add_argument("--fresh", action="store_true",
                   help="drop the rows already in --out/bench.csv instead of merging into them")
    p.add_argument("--kernels", default=",".join(KERNELS),
                   help="kernel choices to time, comma-separated, all in this process through "
                        "the kernel= keyword: simt, sm80_mma, auto (default all three; a kernel "
                        "the library refuses for a case gets a row saying so)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 20 timed runs after 3 warm-ups (default 200 after 10)")
    p.add_argument("--reps", type=int, default=None, help="timed runs per implementation")
    p.add_argument("--warmup", type=int, default=None, help="warm-up runs per implementation")
    p.add_argument("--no-fla", action="store_true", help="skip fla's Triton kernel")
    p.add_argument("--fla-configs", default=str(DEFAULT_FLA_CONFIGS),
                   help="comma-separated JSON files of fla's tuned configs per kernel and "
                        "autotune key (default ../shared/fla_best_configs_h200.json; a run "
                        "writes its own choices to --out/fla_configs.json, in the same format): "
                        "a case whose key is there runs that config without autotuning; other "
                        "cases autotune; '' autotunes all")
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
    p.add_argument("--back-to-back", type=int, default=0, metavar="N",
                   help="also time ours (each kernel choice) and fla's as a training loop issues "
                        "them: N calls on one input set in a row, no spin kernel and no input "
                        "rotation, wall time / N from a synchronize to a synchronize (the median "
                        "of 5 such loops): column b2b_us, and a table in bench.md (default 0: "
                        "off)")
    p.add_argument("--cpu-dry-run", action="store_true",
                   help="exercise the whole harness on the CPU with shrunken cases, the cpu "
                        "backend (which takes kernel auto only: the kernel choices are labels "
                        "there) and wall-clock timing (numbers are meaningless); fla only with "
                        "TRITON_INTERPRET=1 and --fla-autotune-off")
    args = p.parse_args(argv)
    if args.reps is None:
        args.reps = 20 if args.quick else 200
    if args.warmup is None:
        args.warmup = 3 if args.quick else 10
    if args.reps < 1 or args.warmup < 0:
        p.error("--reps must be >= 1 and --warmup >= 0")
    if args.back_to_back < 0:
        p.error("--back-to-back must be >= 0")
    if args.bandwidth != "measured":
        try:
            args.bandwidth = float(args.bandwidth)
        except ValueError:
            p.error(f"--bandwidth: expected bytes/s or 'measured', got {args.bandwidth!r}")
        if args.bandwidth <= 0:
            p.error("--bandwidth must be positive")
    else:
        args.measure_bandwidth = True
    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    bad = [k for k in kernels if k not in KERNELS]
    if not kernels or bad or len(set(kernels)) != len(kernels):
        p.error(f"--kernels: expected some of {', '.join(KERNELS)} (each once), got "
                f"{args.kernels!r}")
    args.kernels = kernels
    if args.cpu_dry_run and os.environ.get("TRITON_INTERPRET") != "1":
        args.no_fla = True  # fla's kernels run on a CPU only under Triton's interpreter
    try:
        args.selected = cases_mod.select_cases(args.cases, args.op)
    except ValueError as e:
        p.error(str(e))
    return args


def list_cases(selected, bandwidth):
    bw = bandwidth if isinstance(bandwidth, float) else cases_mod.H200_COPY_BANDWIDTH
    print(f"{'case':<22} {'MB':>7} {'floor µs':>9} {'spec µs':>8} {'fla µs':>7}  "
          f"{'target':<16} shape")
    for case in selected:
        total = sum(cases_mod.case_bytes(case))
        spec = f"{case.spec_floor_us:g}" if case.spec_floor_us else "—"
        fla = f"{case.spec_fla_us:g}" if case.spec_fla_us else "—"
        print(f"{case.name:<22} {total / 1e6:7.1f} {cases_mod.floor_us(total, bw):9.1f} "
              f"{spec:>8} {fla:>7}  {case.target_text:<16} {case.shape_text()}")


# --- measuring ----------------------------------------------------------------------------


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


def fla_pin_key(case):
    """The fields of a pin-file entry that identify `case`'s autotune key of fla's kernel.

    chunk_kda_bwd_kernel_wy_dqkg_fused: BT, HV, the dtypes (X, beta, h), varlen,
    state_v_first. chunk_kda_bwd_kernel_intra: its autotune key (BK, NC, BT, HV) with the
    dtypes Triton adds to it (X, beta; varlen for the index tensors), and safe_gate, which
    Triton's key leaves out but which changes the kernel (a SAFE_GATE constexpr).
    """
    if case.op == cases_mod.WY:
        return dict(BT=case.BT, HV=case.hv, X=case.x, beta=case.x,
                    h=case.x if case.h == "x" else "float32", varlen=case.varlen,
                    state_v_first=False)
    BK = min(32, 1 << max(case.K - 1, 0).bit_length())  # fla: min(32, next_power_of_2(K))
    return dict(BK=BK, NC=-(-case.BT // min(16, case.BT)), BT=case.BT, HV=case.hv, X=case.x,
                beta=case.beta_dtype, varlen=case.varlen, safe_gate=case.safe_gate)


class Bench:
    """Measures the selected cases of one operator in this process, every kernel choice
    through the kernel= keyword."""

    def __init__(self, args):
        import torch

        import kda_kernels
        import measure

        self.args, self.torch, self.kk, self.measure = args, torch, kda_kernels, measure
        self.op = args.op
        self.ours_fn = getattr(kda_kernels, cases_mod.FLA_NAMES[self.op])
        self.env_lines = [f"operator {self.op} (kda_kernels.{cases_mod.FLA_NAMES[self.op]})"]
        self.measured_bandwidth = None
        self.fla = None
        self.fla_note = ""
        self.fla_pins = None  # fla's tuned configs per kernel and autotune key (--fla-configs)
        self.fla_choices = []  # pin-file entries of the configs fla ran with here
        if args.cpu_dry_run:
            self.device = torch.device("cpu")
            self.timer = WallTimer()
            self.gpu = "cpu (dry run)"
            self.env_lines.append("CPU dry run: shrunken cases, cpu backend (kernel auto: the "
                                  "kernel choices are labels only), wall-clock times")
        else:
            self._init_cuda()
        if os.environ.get("KDA_CUDA_KERNEL"):
            log(f"note: KDA_CUDA_KERNEL={os.environ['KDA_CUDA_KERNEL']} picks what the 'auto' "
                "rows run (unset it to time the library's own choice)")
        if not args.no_fla:
            self.fla = measure.Fla(self.op)
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
                elif args.fla_configs:
                    files = [f for f in args.fla_configs.split(",") if f]
                    self.fla_pins = [e for f in files if Path(f).is_file() for e in load_pins(f)]
                    found = [f for f in files if Path(f).is_file()]
                    if found:
                        self.env_lines.append(f"fla pinned to the tuned configs of "
                                              f"{', '.join(found)} where they have the key")
                    else:
                        log(f"fla: none of {args.fla_configs} exists: every key autotunes")
                else:
                    log("fla: no tuned configs given: every key autotunes (minutes each on a "
                        "fresh machine)")

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

    def row(self, case, impl, nbytes, timing, errs, sample, note="", kernel=""):
        read, written = nbytes
        row = dict(case=case.name, op=case.op, impl=impl, kernel=kernel,
                   shape=case.shape_text(), x=case.x, h_dtype=case.h_dtype, bytes_read=read,
                   bytes_written=written, bytes=read + written, note=note, gpu=self.gpu,
                   run_at=datetime.datetime.now().isoformat(timespec="seconds"))
        if timing:
            row.update(sets=timing["sets"], reps=timing["reps"], median_us=timing["median_us"],
                       min_us=timing["min_us"], loop_us=timing["loop_us"],
                       host_us=timing["host_us"], b2b_us=timing.get("b2b_us"))
            if timing.get("starved"):
                row["note"] = (note + "; " if note else "") + (
                    f"{timing['starved']} timed calls may include host time")
        if errs is not None:
            row.update({f"err_{n}": e for n, e in zip(case.output_names, errs)})
            row["err_sample"] = sample
        if len(row["note"]) > 300:  # a compiler's error can run to pages: the log has it all
            row["note"] = row["note"][:300] + " ..."
        row["note"] = " ".join(row["note"].split())  # one line in the CSV and the Markdown
        return row

    def time_calls(self, calls, n_sets, batch=None, back_to_back=False):
        timing = self.timer.measure(calls, self.args.reps, self.args.warmup, batch)
        if back_to_back and self.args.back_to_back:
            timing["b2b_us"] = self.back_to_back(calls[0], self.args.back_to_back)
        return dict(timing, sets=n_sets, reps=self.args.reps)

    def back_to_back(self, call, n, loops=5):
        """Wall time per call of `n` calls of `call` (one input set) issued in a row, as a
        training loop issues them: from a synchronize to a synchronize, no spin kernel, so each
        call costs the larger of its host time and its kernel's; the median of `loops` loops."""
        call()
        self.sync()
        times = []
        for _ in range(loops):
            start = time.perf_counter()
            for _ in range(n):
                call()
            self.sync()
            times.append((time.perf_counter() - start) / n * 1e6)
        return statistics.median(times)

    def options(self, case, scale):
        """The operator's options of `case`, as keywords of the public function."""
        if case.op == cases_mod.WY:
            return dict(scale=scale, chunk_size=case.BT)
        return dict(chunk_size=case.BT, safe_gate=case.safe_gate)

    def reference(self, case, inputs, scale):
        """The float64 reference on the sampled chunks: (plan, outputs as float64 arrays)."""
        torch = self.torch
        table = cases_mod.chunk_table(case.batch, case.total_t, case.BT, case.seqlens or None)
        picks = cases_mod.pick_chunks(table, case.hv, self.args.ref_budget, self.args.seed)
        plan = cases_mod.sample_plan(table, picks)
        small = {n: t.cpu() for n, t in cases_mod.sample_inputs(inputs, plan).items()}
        t0 = time.perf_counter()
        outputs = self.ours_fn(**small, **self.options(case, scale),
                               cu_seqlens=torch.from_numpy(plan.cu_seqlens), backend="cpu-ref")
        ref = self.measure.to_float64(outputs)
        log(f"  reference: float64 cpu-ref on {plan.label()} in {time.perf_counter() - t0:.1f} s")
        return plan, ref

    def errors(self, outputs, plan, ref):
        got = self.measure.to_float64(cases_mod.sample_outputs(outputs, plan))
        return [err_ratio(o, r) for o, r in zip(got, ref)]

    def run_case(self, case, rows):
        """Measure one case: ours once per kernel choice, then fla's, then the eager baseline,
        appending a row for each to `rows` (an error row for a stage that raised, and the next
        stage still runs)."""
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
            for kernel in args.kernels:
                self.stage(rows, case, "kda", nbytes,
                           lambda: self.run_ours(case, sets, cu, scale, nbytes, check, kernel),
                           kernel)
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

    def stage(self, rows, case, impl, nbytes, measure, kernel=""):
        try:
            rows.append(measure())
        except NotImplementedError as exc:  # the library has no such kernel for this case
            log(f"  {case.name} {impl} ({kernel}): refused: {exc}")
            rows.append(self.row(case, impl, nbytes, None, None, "", f"refused: {exc}",
                                 kernel=kernel))
        except Exception as exc:  # keep going: the other implementations still get measured
            traceback.print_exc()
            log(f"  {case.name} {impl} failed: {type(exc).__name__}: {exc}")
            rows.append(self.row(case, impl, nbytes, None, None, "",
                                 f"error: {type(exc).__name__}: {exc}", kernel=kernel))

    def checked(self, outputs, check):
        """(errors or None, sample label) of outputs against the reference."""
        plan, ref = check
        if ref is None:
            return None, ""
        return self.errors(outputs, plan, ref), plan.label()

    def run_ours(self, case, sets, cu, scale, nbytes, check, kernel):
        kk = self.kk
        ci = kk.chunk_indices(cu, case.BT) if cu is not None else None
        options = self.options(case, scale)
        # The cpu backend of a dry run takes kernel auto only; the choice is then a label.
        passed = "auto" if self.args.cpu_dry_run else kernel

        def ours(inputs):
            return self.ours_fn(**inputs, **options, cu_seqlens=cu, chunk_indices=ci,
                                kernel=passed)

        outputs = ours(sets[0][0])
        self.sync()
        note = ""
        actual = cases_mod.problem_bytes(sets[0][0], outputs, extra=(cu, ci))
        if actual != nbytes:
            note = f"bytes {actual} differ from the case formula {nbytes}"
            log("  warning: " + note)
        errs, sample = self.checked(outputs, check)
        del outputs
        timing = self.time_calls([lambda i=i: ours(i) for i, _ in sets], len(sets),
                                 back_to_back=True)
        log(f"  kda ({kernel}): {timing['median_us']:.1f} µs median "
            f"({cases_mod.floor_us(sum(nbytes)) / timing['median_us']:.0%} of floor), "
            f"loop {timing['loop_us']:.1f} µs/call" + _b2b_text(timing) + _err_text(case, errs))
        return self.row(case, "kda", actual, timing, errs, sample, note, kernel=kernel)

    def run_fla(self, case, sets, cu, scale, nbytes, check):
        fla = self.fla
        ci = fla.prepare_chunk_indices(cu, case.BT) if cu is not None else None

        def theirs(inputs):
            return fla.call(inputs, case, scale, cu, ci)

        note, tuning = self.fla_note, "first config" if self.args.fla_autotune_off else ""
        key = fla_pin_key(case)
        if not self.args.fla_autotune_off:
            config = None
            if self.fla_pins is not None:
                config = find_pin(self.fla_pins, fla.kernel_name, **key)
            if config is not None:
                log(f"  fla: pinned to its tuned config {pin(fla.autotuner(), config)}")
                tuning = "pinned"
            else:
                fla.autotune_afresh()
                tuning = "autotuned"
                note = "fla autotuned here (no tuned config recorded for this key)"
                log("  " + note)

        log("  fla: first call (Triton compiles; an unpinned key also autotunes: minutes on a "
            "fresh machine)")
        t0 = time.perf_counter()
        outputs = theirs(sets[0][0])
        self.sync()
        chosen = fla.best_config()
        log(f"  fla: first call took {time.perf_counter() - t0:.1f} s; config {chosen}")
        if chosen is not None and tuning != "first config":  # an untuned config is no pin
            self.fla_choices.append(dict(kernel=fla.kernel_name, **key,
                                         config=self.measure.config_dict(chosen),
                                         how=tuning, case=case.name))
        errs, sample = self.checked(outputs, check)
        del outputs
        timing = self.time_calls([lambda i=i: theirs(i) for i, _ in sets], len(sets),
                                 back_to_back=True)
        log(f"  fla: {timing['median_us']:.1f} µs median, loop {timing['loop_us']:.1f} µs/call"
            + _b2b_text(timing) + _err_text(case, errs))
        row = self.row(case, "fla", nbytes, timing, errs, sample, note)
        row["fla_config"] = f"{chosen} ({tuning})" if chosen is not None else ""
        return row

    def run_eager(self, case, sets, scale, nbytes, check):
        from eager import chunk_kda_bwd_wy_dqkg_eager

        def eager(inputs):
            return chunk_kda_bwd_wy_dqkg_eager(**inputs, scale=scale, chunk_size=case.BT)

        outputs = eager(sets[0][0])
        errs, sample = self.checked(outputs, check)
        del outputs
        # ~40 kernels a call: small batches keep the launch queue from filling up.
        timing = self.time_calls([lambda i=i: eager(i) for i, _ in sets], len(sets), batch=5)
        log(f"  torch eager: {timing['median_us']:.1f} µs median" + _err_text(case, errs))
        return self.row(case, "torch-eager", nbytes, timing, errs, sample)

    def error_row(self, case, exc):
        return self.row(case, "kda", cases_mod.case_bytes(case), None, None, "",
                        f"error: {type(exc).__name__}: {exc}")


def _b2b_text(timing):
    return f", back-to-back {timing['b2b_us']:.1f} µs/call" if "b2b_us" in timing else ""


def _err_text(case, errs):
    if not errs:
        return ""
    return "; err_ratio " + " ".join(f"{n}={e:.1e}" for n, e in zip(case.output_names, errs))


def measure_here(args, sink):
    """Measure the selected cases in this process; `sink(rows, bench)` gets the rows so far
    after every case (so a run cut short keeps what it measured)."""
    bench = Bench(args)
    selected = [shrink(c) for c in args.selected] if args.cpu_dry_run else args.selected
    rows = []
    log(f"{args.op}: kernels {', '.join(args.kernels)}; {len(selected)} case(s); {args.reps} "
        f"timed runs after {args.warmup} warm-ups")
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
    """bench.csv / bench.md / bench.png / fla_configs.json under --out, merged with what is
    already there."""

    def __init__(self, args, argv):
        self.args = args
        self.dir = Path(args.out)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.csv = self.dir / "bench.csv"
        self.pins = self.dir / FLA_CONFIGS_FILE
        self.old = [] if args.fresh else report.read_csv(self.csv)
        self.old_pins = [] if args.fresh or not self.pins.is_file() else load_pins(self.pins)
        if self.old:
            log(f"merging into the {len(self.old)} rows of {self.csv} (--fresh to start over)")
        self.command = "python3 bench/run.py " + " ".join(argv)

    def write(self, new_rows, env_lines, measured_bandwidth, fla_choices=(), final=False):
        bandwidth = self.args.bandwidth
        if bandwidth == "measured":
            bandwidth = measured_bandwidth or cases_mod.H200_COPY_BANDWIDTH
        rows = report.merge_rows(self.old, [dict(r) for r in new_rows])
        report.finalize(rows, bandwidth, PASS_BARS)
        report.write_csv(self.csv, rows)
        if fla_choices:
            self.write_pins(fla_choices)
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

    def write_pins(self, choices):
        """fla's configs of this run, in --fla-configs' format (entries replace those of the
        same kernel and key already in the file), so that a later run can pin them."""
        def key(entry):
            return json.dumps({k: v for k, v in entry.items()
                               if k not in ("config", "how", "case")}, sort_keys=True)

        entries = {key(e): e for e in self.old_pins}
        entries.update({key(e): e for e in choices})
        self.pins.write_text(json.dumps(dict(
            what="fla's configs chosen by bench/run.py runs (how: autotuned here, or pinned from "
                 "--fla-configs), per kernel and autotune key; pass this file to --fla-configs "
                 "to pin them",
            entries=list(entries.values())), indent=1) + "\n")


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
    outputs = Outputs(args, argv)
    if args.merge:
        return merge_runs(args.merge, outputs)
    rows, bench = measure_here(
        args, lambda rows, bench: outputs.write(rows, bench.env_lines, bench.measured_bandwidth,
                                                bench.fla_choices))
    outputs.write(rows, bench.env_lines, bench.measured_bandwidth, bench.fla_choices, final=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
