"""Tests of the benchmark harness that need no GPU: the byte counts against SPEC's figures, the
chunk sampling against the full float64 reference, the report, the options; with torch (CPU is
enough) also the eager baseline against the reference and a --cpu-dry-run of the whole command.

    KDA_LIBRARY=build/src/libkda.so python3 -m pytest bench -q
"""

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
for path in (BENCH, REPO / "tests" / "python"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
if str(REPO / "python") not in sys.path:
    sys.path.append(str(REPO / "python"))

import cases as cm  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402
from kda_testing import PASS_BAR, library_loads, make_problem  # noqa: E402

kk = pytest.importorskip("kda_kernels")


needs_library = pytest.mark.skipif(not library_loads(), reason="libkda not found (KDA_LIBRARY)")
try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


# --- bytes and floors ---------------------------------------------------------------------


def test_spec_figures():
    """SPEC.md / the issue: 411 MB and 96 µs at the model shape in bf16 with fp32 h, 344 MB
    with h in X, 537 MB in fp32; and every floor the issue states."""
    mb = {name: sum(cm.case_bytes(cm.CASES_BY_NAME[name])) / 1e6
          for name in ("model-bf16", "model-bf16-hx", "model-fp32")}
    assert round(mb["model-bf16"]) == 411
    assert round(mb["model-bf16-hx"]) == 344
    assert round(mb["model-fp32"]) == 537
    for case in cm.CASES:
        if case.spec_floor_us:
            floor = cm.floor_us(sum(cm.case_bytes(case)))
            assert abs(floor - case.spec_floor_us) / case.spec_floor_us < 0.01, case.name
    assert cm.floor_us(411e6, bandwidth=4.11e12) == pytest.approx(100.0)


def test_every_case_has_one_target():
    for case in cm.CASES:
        assert bool(case.target_share) != bool(case.target_speedup), case.name
    assert len({c.name for c in cm.CASES}) == len(cm.CASES)
    assert sum(cm.CASES_BY_NAME["varlen-bf16"].seqlens) == 8192


SMALL_CASES = [
    cm.Case("t-fp32", "float32", B=2, T=100, H=2, K=32, V=48, BT=64),
    cm.Case("t-fp16-hx-gva", "float16", h="x", T=70, H=2, HV=4, K=16, V=16, BT=16),
    cm.Case("t-fp32-varlen", "float32", seqlens=(37, 64, 1, 0, 50), H=1, HV=2, K=8, V=8,
            BT=32),
]


def numpy_problem(case, seed=0):
    inputs, options = make_problem(
        seed=seed, B=case.B, T=case.T, H=case.H, HV=case.hv, K=case.K, V=case.V, BT=case.BT,
        x=case.x, h_dtype=case.h, seqlens=list(case.seqlens) or None)
    return inputs, options


@needs_library
@pytest.mark.parametrize("case", SMALL_CASES, ids=lambda c: c.name)
def test_problem_bytes_match_the_formula(case):
    inputs, options = numpy_problem(case)
    cu = options.get("cu_seqlens")
    ci = kk.chunk_indices(cu, case.BT).astype(np.int32) if cu is not None else None
    outputs = kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options, backend="cpu")
    assert cm.problem_bytes(inputs, outputs, extra=(cu, ci)) == cm.case_bytes(case)


def test_rotation_sets():
    l2 = 60e6
    model = cm.CASES_BY_NAME["model-bf16"]
    small = cm.CASES_BY_NAME["small-bf16"]
    assert cm.rotation_sets(cm.case_bytes(model)[0], l2) == 1
    n = cm.rotation_sets(cm.case_bytes(small)[0], l2)
    assert n > 1 and n * cm.case_bytes(small)[0] >= 3 * l2
    assert cm.rotation_sets(1, l2) == 32


def test_select_cases():
    assert [c.name for c in cm.select_cases("")] == [c.name for c in cm.CASES]
    names = [c.name for c in cm.select_cases("small-bf16,model-fp16*")]
    assert names == ["model-fp16", "model-fp16-hx", "model-fp16-bt16", "model-fp16-bt32",
                     "small-bf16"]
    with pytest.raises(ValueError, match="nope"):
        cm.select_cases("nope")


# --- sampling -----------------------------------------------------------------------------


def test_chunk_table():
    table = cm.chunk_table(2, 100, 64)
    assert [(c.b, c.t0, c.length, c.hb, c.hc) for c in table] == [
        (0, 0, 64, 0, 0), (0, 64, 36, 0, 1), (1, 0, 64, 1, 0), (1, 64, 36, 1, 1)]
    table = cm.chunk_table(1, 152, 32, seqlens=[37, 64, 1, 0, 50])
    assert [(c.t0, c.length, c.hc) for c in table] == [
        (0, 32, 0), (32, 5, 1), (37, 32, 2), (69, 32, 3), (101, 1, 4), (102, 32, 5),
        (134, 18, 6)]


def test_pick_chunks():
    table = cm.chunk_table(4, 8192, 64)
    picks = cm.pick_chunks(table, heads=32, budget=65536, seed=3)
    assert picks == sorted(set(picks))
    assert picks[0] == 0 and picks[-1] == len(table) - 1
    assert sum(table[i].length for i in picks) * 32 <= 65536
    assert len(picks) == 32  # the budget is spent exactly with full chunks
    assert picks == cm.pick_chunks(table, heads=32, budget=65536, seed=3)
    assert cm.pick_chunks(table, 32, budget=10 ** 9) == list(range(len(table)))
    assert cm.pick_chunks(table, 32, budget=0) == list(range(len(table)))
    varlen = cm.chunk_table(1, 152, 32, seqlens=[37, 64, 1, 0, 50])
    assert 4 in cm.pick_chunks(varlen, heads=1, budget=1)  # the shortest chunk (length 1)


@needs_library
@pytest.mark.parametrize("case", SMALL_CASES, ids=lambda c: c.name)
def test_sampled_reference_equals_the_full_reference(case):
    inputs, options = numpy_problem(case, seed=5)
    full = kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options, backend="cpu-ref")
    table = cm.chunk_table(case.batch, case.total_t, case.BT, case.seqlens or None)
    picks = cm.pick_chunks(table, case.hv, budget=3 * case.BT * case.hv, seed=1)
    plan = cm.sample_plan(table, picks)
    assert not plan.full and plan.label() == f"{len(picks)}/{len(table)} chunks"
    small = cm.sample_inputs(inputs, plan)
    sampled = kk.chunk_kda_bwd_wy_dqkg_fused(
        **small, scale=options["scale"], chunk_size=case.BT, cu_seqlens=plan.cu_seqlens,
        backend="cpu-ref")
    expected = cm.sample_outputs(full, plan)
    for name, got, want in zip(cm.OUTPUT_NAMES, sampled, expected):
        assert got.shape == want.shape, name
        np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                                   rtol=1e-12, atol=1e-12, err_msg=name)


# --- report -------------------------------------------------------------------------------


def fake_rows():
    model = cm.CASES_BY_NAME["model-bf16"]
    small = cm.CASES_BY_NAME["small-bf16"]
    rows = []
    for case, impl, kernel, us, err in [
        (model, "kda", "general", 800.0, 1e-7), (model, "kda", "auto", 110.0, 2e-3),
        (model, "fla", "", 357.0, 1.7e-3), (model, "torch-eager", "", 1720.0, 1e-7),
        (small, "kda", "general", 10.0, float("nan")), (small, "fla", "", 30.0, 1e-3),
    ]:
        read, written = cm.case_bytes(case)
        row = dict(case=case.name, impl=impl, kernel=kernel, shape=case.shape_text(),
                   x=case.x, h_dtype=case.h_dtype, bytes_read=read, bytes_written=written,
                   bytes=read + written, sets=1, reps=10, median_us=us, min_us=us,
                   loop_us=us, host_us=5.0, err_sample="all chunks", note="", gpu="x",
                   run_at="now")
        row.update({f: err for f in report.ERR_FIELDS})
        rows.append(row)
    return rows


def test_finalize_verdicts():
    rows = {(r["case"], r["impl"], r["kernel"]): r
            for r in report.finalize(fake_rows(), cm.H200_COPY_BANDWIDTH, PASS_BAR)}
    general = rows[("model-bf16", "kda", "general")]
    auto = rows[("model-bf16", "kda", "auto")]
    assert general["floor_us"] == pytest.approx(96.35, abs=0.05)
    assert general["perf"] == "FAIL" and auto["perf"] == "PASS"
    assert auto["share_of_floor"] == pytest.approx(general["floor_us"] / 110.0)
    assert auto["speedup_vs_fla"] == pytest.approx(357 / 110)
    assert general["accuracy"] == "PASS" and general["err_vs_fla"] == pytest.approx(1e-7 / 1.7e-3)
    assert auto["accuracy"] == "PASS"  # 2e-3 is within bf16's 8e-3 bar
    assert rows[("model-bf16", "fla", "")]["accuracy"] == ""  # fla is not judged
    assert rows[("model-bf16", "torch-eager", "")]["speedup_vs_fla"] == pytest.approx(357 / 1720)
    small = rows[("small-bf16", "kda", "general")]
    assert small["perf"] == "PASS"  # 3x fla's speed, target 2x
    assert small["accuracy"] == "FAIL" and math.isnan(small["err_max"])


def test_finalize_without_fla():
    rows = [r for r in fake_rows() if r["impl"] != "fla"]
    report.finalize(rows, cm.H200_COPY_BANDWIDTH, PASS_BAR)
    small = [r for r in rows if r["case"] == "small-bf16"][0]
    assert small["perf"].startswith("n/a") and small["speedup_vs_fla"] is None


def test_csv_round_trip_and_merge(tmp_path):
    rows = report.finalize(fake_rows(), cm.H200_COPY_BANDWIDTH, PASS_BAR)
    path = tmp_path / "bench.csv"
    report.write_csv(path, rows)
    back = report.read_csv(path)
    assert len(back) == len(rows)
    assert back[0]["median_us"] == rows[0]["median_us"] and back[0]["case"] == "model-bf16"
    newer = dict(back[1], median_us=99.0)
    merged = report.merge_rows(back, [newer])
    assert len(merged) == len(rows)
    assert [r["median_us"] for r in merged if report.row_key(r) == report.row_key(newer)] == [99.0]
    assert report.read_csv(tmp_path / "missing.csv") == []


def test_merge_runs_of_several_folders(tmp_path):
    rows = report.finalize(fake_rows(), cm.H200_COPY_BANDWIDTH, PASS_BAR)
    first, second, out = tmp_path / "a", tmp_path / "b", tmp_path / "out"
    first.mkdir()
    second.mkdir()
    report.write_csv(first / "bench.csv", [r for r in rows if r["case"] == "model-bf16"])
    newer = [dict(r, median_us=77.0) for r in rows if r["case"] == "small-bf16"]
    report.write_csv(second / "bench.csv", newer)
    assert run.main(["--merge", str(first), str(second), "--out", str(out), "--fresh"]) == 0
    merged = report.read_csv(out / "bench.csv")
    assert {report.row_key(r) for r in merged} == {report.row_key(r) for r in rows}
    assert {r["median_us"] for r in merged if r["case"] == "small-bf16"} == {77.0}
    assert "merged from" in (out / "bench.md").read_text()
    # A folder without rows is an error, not an empty table.
    assert run.main(["--merge", str(tmp_path / "none"), "--out", str(out)]) == 1


def test_markdown_and_chart(tmp_path):
    rows = report.finalize(fake_rows(), cm.H200_COPY_BANDWIDTH, PASS_BAR)
    md = report.markdown(rows, ["header line"])
    lines = md.splitlines()
    assert lines[0] == "header line"
    table = [line for line in lines if line.startswith("| model-bf16 |")]
    assert len(table) == 2 + 4  # two kda kernels in the speed table; four rows of errors
    assert "| 357 |" in table[0] and "| PASS |" in table[1]
    assert "PyTorch eager" in md and "fla is 4.8x faster" in md
    assert "Notes:" not in md
    for row in rows:
        row["note"] = "untuned" if row["impl"] == "fla" else ""
    notes = report.markdown(rows).split("Notes:\n")[1].splitlines()
    assert notes == ["- model-bf16 fla, small-bf16 fla: untuned"]
    message = report.chart(tmp_path / "bench.png", rows)
    if importlib.util.find_spec("matplotlib") is None:
        assert "matplotlib" in message
    else:
        assert (tmp_path / "bench.png").stat().st_size > 1000


# --- options ------------------------------------------------------------------------------


def test_parse_args():
    args = run.parse_args([])
    assert args.kernels == ["general", "auto"] and args.reps == 200 and args.warmup == 10
    assert args.bandwidth == cm.H200_COPY_BANDWIDTH and len(args.selected) == len(cm.CASES)
    args = run.parse_args(["--quick", "--cases", "gva-*", "--kernels", "env",
                           "--bandwidth", "measured", "--reps", "7"])
    assert (args.reps, args.warmup, args.kernels) == (7, 3, ["env"])
    assert args.measure_bandwidth and [c.name for c in args.selected] == ["gva-bf16"]
    assert run.parse_args(["--bandwidth", "3.9e12"]).bandwidth == 3.9e12
    for bad in (["--kernels", "fast"], ["--kernels", "env,auto"], ["--bandwidth", "x"],
                ["--cases", "nope"], ["--reps", "0"]):
        with pytest.raises(SystemExit):
            run.parse_args(bad)
    assert run.parse_args(["--cpu-dry-run"]).no_fla


def test_list_runs(capsys):
    assert run.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "model-bf16" in out and "411.4" in out and "96.4" in out


def test_shrink_keeps_the_options():
    for case in cm.CASES:
        small = run.shrink(case)
        assert (small.x, small.h, small.BT, small.varlen) == (case.x, case.h, case.BT,
                                                              case.varlen)
        assert small.hv // small.H == case.hv // case.H
        assert sum(cm.case_bytes(small)) < 5e6


# --- with torch (CPU) ---------------------------------------------------------------------


def torch_inputs(case, seed=0):
    import measure

    return measure.make_inputs(case, seed, torch.device("cpu"))


@needs_torch
@needs_library
@pytest.mark.parametrize("case", [
    cm.Case("e-fp32", "float32", B=2, T=128, H=2, K=32, V=16, BT=64),
    cm.Case("e-bf16-gva-hx", "bfloat16", h="x", T=96, H=2, HV=4, K=16, V=32, BT=32),
    cm.Case("e-fp16-bt16", "float16", T=64, H=3, K=16, V=16, BT=16),
], ids=lambda c: c.name)
def test_eager_matches_the_reference(case):
    from eager import chunk_kda_bwd_wy_dqkg_eager
    from kda_testing import assert_close_all

    inputs, cu = torch_inputs(case)
    assert cu is None
    scale = case.K ** -0.5
    got = chunk_kda_bwd_wy_dqkg_eager(**inputs, scale=scale, chunk_size=case.BT)
    ref = kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, scale=scale, chunk_size=case.BT,
                                         backend="cpu-ref")
    f64 = [t.to(torch.float64).numpy() for t in got]
    assert got[2].dtype == inputs["v"].dtype
    bar = 1e-5 if case.x == "float32" else PASS_BAR[case.x]
    assert_close_all(f64, [t.to(torch.float64).numpy() for t in ref], bar, case.name)


@needs_torch
@needs_library
@pytest.mark.parametrize("case", [
    cm.Case("m-bf16-varlen", "bfloat16", seqlens=(37, 64, 1, 50), H=2, K=16, V=16, BT=32),
    cm.Case("m-fp32-hx-gva", "float32", h="x", B=2, T=80, H=1, HV=2, K=8, V=8, BT=16),
], ids=lambda c: c.name)
def test_make_inputs_and_torch_sampling(case):
    inputs, cu = torch_inputs(case)
    assert inputs["h"].dtype == getattr(torch, case.h_dtype)
    assert inputs["g"].dtype == torch.float32 and float(inputs["g"].max()) <= 0.0
    again, _ = torch_inputs(case)
    assert all(torch.equal(inputs[n], again[n]) for n in inputs)  # seeded
    ci = kk.chunk_indices(cu, case.BT) if cu is not None else None
    outputs = kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, scale=case.K ** -0.5, cu_seqlens=cu,
                                             chunk_size=case.BT, chunk_indices=ci)
    assert cm.problem_bytes(inputs, outputs, extra=(cu, ci)) == cm.case_bytes(case)
    table = cm.chunk_table(case.batch, case.total_t, case.BT, case.seqlens or None)
    plan = cm.sample_plan(table, cm.pick_chunks(table, case.hv, 2 * case.BT * case.hv))
    small = cm.sample_inputs(inputs, plan)
    sampled = kk.chunk_kda_bwd_wy_dqkg_fused(
        **small, scale=case.K ** -0.5, chunk_size=case.BT,
        cu_seqlens=torch.from_numpy(plan.cu_seqlens))
    for got, want in zip(sampled, cm.sample_outputs(outputs, plan)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def dry_run(tmp_path, *extra):
    env = dict(os.environ)
    env.pop("KDA_CUDA_KERNEL", None)
    result = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--cpu-dry-run", "--reps", "2", "--warmup", "1",
         "--out", str(tmp_path), *extra],
        capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


@needs_torch
@needs_library
def test_cpu_dry_run_in_process(tmp_path):
    out = dry_run(tmp_path, "--kernels", "env", "--cases", "model-bf16,varlen-bf16,gva-bf16")
    rows = report.read_csv(tmp_path / "bench.csv")
    assert {(r["case"], r["impl"]) for r in rows} == {
        ("model-bf16", "kda"), ("model-bf16", "torch-eager"), ("varlen-bf16", "kda"),
        ("gva-bf16", "kda")}
    assert all(r["err_dq"] is not None and r["err_dq"] < 1e-5 for r in rows)
    assert out.rstrip().splitlines()[-1].startswith("PyTorch eager")
    assert (tmp_path / "bench.md").read_text().count("| model-bf16 |") == 3


@needs_torch
@needs_library
def test_cpu_dry_run_one_child_per_kernel_merges(tmp_path):
    dry_run(tmp_path, "--cases", "small-bf16", "--no-reference")
    out = dry_run(tmp_path, "--cases", "long-bf16", "--ref-budget", "100")
    assert "reference: reused from the first kernel's run (3/4 chunks)" in out
    rows = report.finalize(report.read_csv(tmp_path / "bench.csv"), cm.H200_COPY_BANDWIDTH,
                           PASS_BAR)
    keys = [(r["case"], r["impl"], r["kernel"]) for r in rows]
    assert keys == [("long-bf16", "kda", "general"), ("long-bf16", "kda", "auto"),
                    ("small-bf16", "kda", "general"), ("small-bf16", "kda", "auto")]
    long = [r for r in rows if r["case"] == "long-bf16"]
    # B=2, T=96, BT=64: 4 chunks; a budget of 100 token-heads keeps first, last and shortest.
    assert all(r["err_sample"] == "3/4 chunks" and r["accuracy"] == "PASS" for r in long)
    dry_run(tmp_path, "--cases", "small-bf16", "--no-reference", "--fresh", "--kernels", "env")
    assert len(report.read_csv(tmp_path / "bench.csv")) == 1


@needs_torch
@needs_library
def test_host_cost_runs_every_layer():
    result = subprocess.run([sys.executable, str(BENCH / "host_cost.py"), "--calls", "5"],
                            capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    layers = [line.split()[0] for line in result.stdout.splitlines()[2:]]
    assert layers == ["public", "custom-op", "impl", "fla-backend", "kda_run"]


def test_run_module_needs_no_torch_to_import():
    code = ("import sys; sys.modules['torch'] = None; sys.path.insert(0, %r); import run, "
            "report, cases" % str(BENCH))
    subprocess.run([sys.executable, "-c", code], check=True)


class FakeCuda:
    """A simulated GPU stream for DeviceTimer: the host spends `host_us` of Python before
    each kernel launch, the kernel runs `kernel_us` on the device, events are stamped when the
    stream reaches them, and the host clock is what time.perf_counter reads."""

    def __init__(self, host_us, kernel_us, with_sleep=True):
        self.host, self.gpu_free = 0.0, 0.0  # µs
        self.host_us, self.kernel_us = host_us, kernel_us
        if with_sleep:
            self._sleep = lambda cycles: self.launch(cycles / 1000.0)  # 1000 cycles / µs
        cuda = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = cuda.gpu_free = max(cuda.host, cuda.gpu_free)
                cuda.host += 1.0

            def elapsed_time(self, other):
                return (other.t - self.t) / 1e3  # ms

        self.Event = Event

    def launch(self, duration):
        start = max(self.host, self.gpu_free)
        self.gpu_free = start + duration
        self.host += 2.0

    def synchronize(self, device=None):
        self.host = max(self.host, self.gpu_free)

    def call(self):
        self.host += self.host_us
        self.launch(self.kernel_us)

    def perf_counter(self):
        return self.host / 1e6


@needs_torch
@pytest.mark.parametrize("host_us,kernel_us", [(100.0, 20.0), (100.0, 400.0), (5.0, 50.0)])
def test_device_timer_times_the_device_not_the_host(monkeypatch, host_us, kernel_us):
    import measure

    fake = FakeCuda(host_us, kernel_us)
    monkeypatch.setattr(measure.torch, "cuda", fake)
    monkeypatch.setattr(measure.time, "perf_counter", fake.perf_counter)
    timer = measure.DeviceTimer("cuda", log=lambda m: None)
    assert timer.cycles_per_us == pytest.approx(1000.0)
    result = timer.measure([fake.call, fake.call], reps=60, warmup=2)
    # Each timed call: the kernel plus the end event's own tick (1 µs in the simulation).
    assert result["median_us"] == pytest.approx(kernel_us + 1.0, abs=1.5)
    assert result["starved"] == 0
    assert result["loop_us"] >= max(host_us, kernel_us)


@needs_torch
def test_device_timer_without_sleep_reports_host_time(monkeypatch):
    import measure

    fake = FakeCuda(100.0, 20.0, with_sleep=False)
    monkeypatch.setattr(measure.torch, "cuda", fake)
    monkeypatch.setattr(measure.time, "perf_counter", fake.perf_counter)
    timer = measure.DeviceTimer("cuda", log=lambda m: None)
    assert timer.cycles_per_us is None
    # The host-bound case the spin kernel exists for: without it the events time the host.
    assert timer.measure([fake.call], reps=10, warmup=1)["median_us"] > 100.0


@needs_torch
def test_device_timer_retries_when_the_host_falls_behind(monkeypatch):
    import measure

    fake = FakeCuda(10.0, 20.0)
    calls_made = []

    def call():  # the host gets 30x slower after the warm-up and the host-cost loop
        calls_made.append(1)
        fake.host_us = 10.0 if len(calls_made) <= 52 else 300.0
        fake.call()

    monkeypatch.setattr(measure.torch, "cuda", fake)
    monkeypatch.setattr(measure.time, "perf_counter", fake.perf_counter)
    timer = measure.DeviceTimer("cuda", log=lambda m: None)
    result = timer.measure([call], reps=50, warmup=2)
    # The first batch exhausts its tries with too short a spin and is kept as starved; the
    # second starts with the grown spin and gets a clean try.
    assert result["starved"] == 25
    assert result["median_us"] == pytest.approx(21.0, abs=1.5)
