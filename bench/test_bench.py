"""Tests of the benchmark harness that need no GPU, for both operators: the byte counts against
SPEC's figures, the chunk sampling against the full float64 reference, the report, fla's config
pins, the options; with torch (CPU is enough) also the eager baseline against the reference,
the device-side inputs and a --cpu-dry-run of the whole command.

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
from kda_testing import (  # noqa: E402
    INTRA_PASS_BAR,
    PASS_BAR,
    library_loads,
    make_intra_problem,
    make_problem,
)

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
    for case in cm.CASES + cm.INTRA_CASES:
        if case.spec_floor_us:
            floor = cm.floor_us(sum(cm.case_bytes(case)))
            assert abs(floor - case.spec_floor_us) / case.spec_floor_us < 0.01, case.name
    assert cm.floor_us(411e6, bandwidth=4.11e12) == pytest.approx(100.0)


def test_intra_spec_figures():
    """SPEC-chunk-bwd-intra.md: 1210.6 MB (floor 283.5 µs) at T=8192 and 302.6 MB (70.9 µs) at
    the model shape, bf16, safe_gate either way; 336.3 / 1345.3 MB in float32."""
    mb = {c.name: sum(cm.case_bytes(c)) / 1e6 for c in cm.INTRA_CASES}
    assert round(mb["intra-long-bf16"], 1) == round(mb["intra-long-bf16-safe"], 1) == 1210.6
    assert round(mb["intra-model-bf16"], 1) == round(mb["intra-model-bf16-safe"], 1) == 302.6
    fp32 = {T: sum(cm.case_bytes(cm.Case("f", "float32", T=T, **cm.INTRA_SHAPE))) / 1e6
            for T in (2048, 8192)}
    assert (round(fp32[2048], 1), round(fp32[8192], 1)) == (336.3, 1345.3)
    for case in cm.INTRA_CASES:
        assert case.op == cm.INTRA and case.target_share == 0.70 and case.spec_fla_us
    assert [c.safe_gate for c in cm.INTRA_CASES] == [False, True, False, True]


def test_every_case_has_one_target():
    every = cm.CASES + cm.INTRA_CASES
    for case in every:
        assert bool(case.target_share) != bool(case.target_speedup), case.name
    assert len({c.name for c in every}) == len(every)
    assert sum(cm.CASES_BY_NAME["varlen-bf16"].seqlens) == 8192


SMALL_CASES = [
    cm.Case("t-fp32", "float32", B=2, T=100, H=2, K=32, V=48, BT=64),
    cm.Case("t-fp16-hx-gva", "float16", h="x", T=70, H=2, HV=4, K=16, V=16, BT=16),
    cm.Case("t-fp32-varlen", "float32", seqlens=(37, 64, 1, 0, 50), H=1, HV=2, K=8, V=8,
            BT=32),
]


SMALL_INTRA_CASES = [
    cm.Case("t-intra-fp32", "float32", op=cm.INTRA, B=2, T=100, H=2, K=32, BT=64),
    cm.Case("t-intra-bf16-beta32-gva", "bfloat16", op=cm.INTRA, beta="float32", T=70, H=2,
            HV=4, K=16, BT=16, safe_gate=True),
    cm.Case("t-intra-fp16-varlen", "float16", op=cm.INTRA, seqlens=(37, 64, 1, 0, 50), H=1,
            HV=2, K=8, BT=32),
]


def numpy_problem(case, seed=0):
    if case.op == cm.INTRA:
        return make_intra_problem(
            seed=seed, B=case.B, T=case.T, H=case.H, HV=case.hv, K=case.K, BT=case.BT,
            x=case.x, beta_dtype=case.beta or None, seqlens=list(case.seqlens) or None,
            safe_gate=case.safe_gate)
    inputs, options = make_problem(
        seed=seed, B=case.B, T=case.T, H=case.H, HV=case.hv, K=case.K, V=case.V, BT=case.BT,
        x=case.x, h_dtype=case.h, seqlens=list(case.seqlens) or None)
    return inputs, options


def operator(case):
    return getattr(kk, cm.FLA_NAMES[case.op])


def options_of(case, options):
    """The operator's own options of a make_problem / make_intra_problem result."""
    if case.op == cm.INTRA:
        return dict(chunk_size=case.BT, safe_gate=options["safe_gate"])
    return dict(chunk_size=case.BT, scale=options["scale"])


needs_ml_dtypes_for = pytest.mark.skipif(
    importlib.util.find_spec("ml_dtypes") is None, reason="bfloat16 NumPy arrays need ml_dtypes")


def with_marks(cases):
    return [pytest.param(c, id=c.name, marks=[needs_ml_dtypes_for] if c.x == "bfloat16" else [])
            for c in cases]


@needs_library
@pytest.mark.parametrize("case", with_marks(SMALL_CASES + SMALL_INTRA_CASES))
def test_problem_bytes_match_the_formula(case):
    inputs, options = numpy_problem(case)
    cu = options.get("cu_seqlens")
    ci = kk.chunk_indices(cu, case.BT).astype(np.int32) if cu is not None else None
    outputs = operator(case)(**inputs, **options, backend="cpu")
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
    assert cm.select_cases("", cm.INTRA) == list(cm.INTRA_CASES)
    assert [c.name for c in cm.select_cases("*-safe", cm.INTRA)] == [
        "intra-long-bf16-safe", "intra-model-bf16-safe"]
    with pytest.raises(ValueError, match="matches no case of chunk_bwd_intra"):
        cm.select_cases("model-bf16", cm.INTRA)  # the other operator's case


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
@pytest.mark.parametrize("case", with_marks(SMALL_CASES + SMALL_INTRA_CASES))
def test_sampled_reference_equals_the_full_reference(case):
    inputs, options = numpy_problem(case, seed=5)
    full = operator(case)(**inputs, **options, backend="cpu-ref")
    table = cm.chunk_table(case.batch, case.total_t, case.BT, case.seqlens or None)
    picks = cm.pick_chunks(table, case.hv, budget=3 * case.BT * case.hv, seed=1)
    plan = cm.sample_plan(table, picks)
    assert not plan.full and plan.label() == f"{len(picks)}/{len(table)} chunks"
    small = cm.sample_inputs(inputs, plan)
    assert list(small) == list(case.input_names)
    sampled = operator(case)(**small, **options_of(case, options),
                             cu_seqlens=plan.cu_seqlens, backend="cpu-ref")
    expected = cm.sample_outputs(full, plan)
    assert len(sampled) == len(case.output_names)
    for name, got, want in zip(case.output_names, sampled, expected):
        assert got.shape == want.shape, name
        np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                                   rtol=1e-12, atol=1e-12, err_msg=name)


# --- report -------------------------------------------------------------------------------


PASS_BARS = {cm.WY: PASS_BAR, cm.INTRA: INTRA_PASS_BAR}


def fake_rows(intra=False):
    model = cm.CASES_BY_NAME["model-bf16"]
    small = cm.CASES_BY_NAME["small-bf16"]
    long_intra = cm.CASES_BY_NAME["intra-long-bf16"]
    rows = []
    table = [
        (model, "kda", "simt", 800.0, 1e-7), (model, "kda", "auto", 110.0, 2e-3),
        (model, "fla", "", 357.0, 1.7e-3), (model, "torch-eager", "", 1720.0, 1e-7),
        (small, "kda", "simt", 10.0, float("nan")), (small, "fla", "", 30.0, 1e-3),
    ]
    if intra:
        table += [(long_intra, "kda", "auto", 350.0, 4e-4), (long_intra, "fla", "", 1999.0, 5e-4)]
    for case, impl, kernel, us, err in table:
        read, written = cm.case_bytes(case)
        row = dict(case=case.name, op=case.op, impl=impl, kernel=kernel,
                   shape=case.shape_text(), x=case.x, h_dtype=case.h_dtype, bytes_read=read,
                   bytes_written=written, bytes=read + written, sets=1, reps=10, median_us=us,
                   min_us=us, loop_us=us, host_us=5.0, err_sample="all chunks", note="",
                   gpu="x", run_at="now")
        row.update({f: err for f in report.err_fields(case.op)})
        rows.append(row)
    return rows


def test_finalize_verdicts():
    rows = {(r["case"], r["impl"], r["kernel"]): r
            for r in report.finalize(fake_rows(), cm.H200_COPY_BANDWIDTH, PASS_BARS)}
    general = rows[("model-bf16", "kda", "simt")]
    auto = rows[("model-bf16", "kda", "auto")]
    assert general["floor_us"] == pytest.approx(96.35, abs=0.05)
    assert general["perf"] == "FAIL" and auto["perf"] == "PASS"
    assert auto["share_of_floor"] == pytest.approx(general["floor_us"] / 110.0)
    assert auto["speedup_vs_fla"] == pytest.approx(357 / 110)
    assert general["accuracy"] == "PASS" and general["err_vs_fla"] == pytest.approx(1e-7 / 1.7e-3)
    assert auto["accuracy"] == "PASS"  # 2e-3 is within bf16's 8e-3 bar
    assert rows[("model-bf16", "fla", "")]["accuracy"] == ""  # fla is not judged
    assert rows[("model-bf16", "torch-eager", "")]["speedup_vs_fla"] == pytest.approx(357 / 1720)
    small = rows[("small-bf16", "kda", "simt")]
    assert small["perf"] == "PASS"  # 3x fla's speed, target 2x
    assert small["accuracy"] == "FAIL" and math.isnan(small["err_max"])


def test_finalize_intra_rows():
    """chunk_bwd_intra rows are judged on their own four outputs and SPEC's bars for them."""
    rows = {(r["case"], r["impl"], r["kernel"]): r
            for r in report.finalize(fake_rows(intra=True), cm.H200_COPY_BANDWIDTH, PASS_BARS)}
    ours = rows[("intra-long-bf16", "kda", "auto")]
    assert ours["err_bar"] == 2e-3 and ours["accuracy"] == "PASS"  # no err_dv / err_dA needed
    assert ours["floor_us"] == pytest.approx(283.5, abs=0.05)
    assert ours["perf"] == "PASS" and ours["share_of_floor"] == pytest.approx(283.5 / 350, 1e-3)
    assert ours["speedup_vs_fla"] == pytest.approx(1999 / 350)
    assert ours["err_vs_fla"] == pytest.approx(0.8)
    md = report.markdown(list(rows.values()))
    assert "chunk_bwd_intra: err_ratio against the float64 reference" in md
    assert "| case | implementation | dq | dk | db | dg | sample |" in md
    assert "| case | implementation | dq | dk | dv | db | dg | dA | sample |" in md


def test_rows_of_older_csvs_get_their_cases_operator(tmp_path):
    rows = fake_rows(intra=True)
    for row in rows:
        del row["op"]
    report.write_csv(tmp_path / "bench.csv", rows)
    back = report.finalize(report.read_csv(tmp_path / "bench.csv"), cm.H200_COPY_BANDWIDTH,
                           PASS_BARS)
    assert {r["case"]: r["op"] for r in back}["intra-long-bf16"] == cm.INTRA
    assert {r["case"]: r["op"] for r in back}["model-bf16"] == cm.WY


def test_finalize_without_fla():
    rows = [r for r in fake_rows() if r["impl"] != "fla"]
    report.finalize(rows, cm.H200_COPY_BANDWIDTH, PASS_BARS)
    small = [r for r in rows if r["case"] == "small-bf16"][0]
    assert small["perf"].startswith("n/a") and small["speedup_vs_fla"] is None


def test_csv_round_trip_and_merge(tmp_path):
    rows = report.finalize(fake_rows(), cm.H200_COPY_BANDWIDTH, PASS_BARS)
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
    rows = report.finalize(fake_rows(), cm.H200_COPY_BANDWIDTH, PASS_BARS)
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
    rows = report.finalize(fake_rows(), cm.H200_COPY_BANDWIDTH, PASS_BARS)
    md = report.markdown(rows, ["header line"])
    lines = md.splitlines()
    assert lines[0] == "header line"
    assert "fla's configs" not in md
    table = [line for line in lines if line.startswith("| model-bf16 |")]
    assert len(table) == 2 + 4  # two kda kernels in the speed table; four rows of errors
    assert "| 357 |" in table[0] and "| PASS |" in table[1]
    assert "PyTorch eager" in md and "fla is 4.8x faster" in md
    assert "Notes:" not in md
    for row in rows:
        row["note"] = "untuned" if row["impl"] == "fla" else ""
    notes = report.markdown(rows).split("Notes:\n")[1].splitlines()
    assert notes == ["- model-bf16 fla, small-bf16 fla: untuned"]
    rows[2]["fla_config"] = "num_warps: 4, num_stages: 3 (autotuned)"
    assert "- model-bf16: num_warps: 4, num_stages: 3 (autotuned)" in report.markdown(rows)
    assert "Back to back" not in md  # no --back-to-back: no table
    message = report.chart(tmp_path / "bench.png", rows)
    if importlib.util.find_spec("matplotlib") is None:
        assert "matplotlib" in message
    else:
        assert (tmp_path / "bench.png").stat().st_size > 1000


def test_back_to_back_table():
    """--back-to-back's rows: ours and fla's wall time per call, and fla's over ours."""
    rows = fake_rows()
    for row in rows:
        if row["case"] == "small-bf16":
            row["b2b_us"] = 20.0 if row["impl"] == "kda" else 50.0
    rows = report.finalize(rows, cm.H200_COPY_BANDWIDTH, PASS_BARS)
    md = report.markdown(rows)
    table = md.split("Back to back")[1].splitlines()
    assert "| small-bf16 | kda (simt) | 20.0 | 2.50x |" in table
    assert "| small-bf16 | fla | 50.0 | — |" in table
    assert not any(line.startswith("| model-bf16") for line in table)


# --- options ------------------------------------------------------------------------------


def test_parse_args():
    args = run.parse_args([])
    assert args.op == cm.WY and args.kernels == ["simt", "sm80_mma", "auto"]
    assert args.reps == 200 and args.warmup == 10
    assert args.bandwidth == cm.H200_COPY_BANDWIDTH and len(args.selected) == len(cm.CASES)
    args = run.parse_args(["--quick", "--cases", "gva-*", "--kernels", "auto",
                           "--bandwidth", "measured", "--reps", "7"])
    assert (args.reps, args.warmup, args.kernels) == (7, 3, ["auto"])
    assert args.measure_bandwidth and [c.name for c in args.selected] == ["gva-bf16"]
    assert run.parse_args(["--bandwidth", "3.9e12"]).bandwidth == 3.9e12
    args = run.parse_args(["--op", "chunk_bwd_intra", "--kernels", "sm80_mma,simt"])
    assert args.selected == list(cm.INTRA_CASES) and args.kernels == ["sm80_mma", "simt"]
    for bad in (["--kernels", "fast"], ["--kernels", "env"], ["--kernels", "general,auto"],
                ["--kernels", "auto,auto"], ["--kernels", ""], ["--bandwidth", "x"],
                ["--cases", "nope"], ["--reps", "0"], ["--op", "chunk_fwd"],
                ["--op", "chunk_bwd_intra", "--cases", "model-bf16"], ["--back-to-back", "-1"]):
        with pytest.raises(SystemExit):
            run.parse_args(bad)
    assert run.parse_args(["--cpu-dry-run"]).no_fla
    assert run.parse_args([]).back_to_back == 0
    assert run.parse_args(["--back-to-back", "1000"]).back_to_back == 1000


def test_list_runs(capsys):
    assert run.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "model-bf16" in out and "411.4" in out and "96.4" in out
    assert run.main(["--list", "--op", "chunk_bwd_intra"]) == 0
    out = capsys.readouterr().out
    assert "intra-long-bf16-safe" in out and "1210.6" in out and "283.5" in out
    assert "1133" in out and "\nmodel-bf16 " not in out


def test_shrink_keeps_the_options():
    for case in cm.CASES + cm.INTRA_CASES:
        small = run.shrink(case)
        assert (small.op, small.x, small.h, small.BT, small.varlen, small.safe_gate) == (
            case.op, case.x, case.h, case.BT, case.varlen, case.safe_gate)
        assert small.hv // small.H == case.hv // case.H
        assert sum(cm.case_bytes(small)) < 5e6


def test_fla_pin_keys():
    """The WY kernel's entries as in ../shared/fla_best_configs_h200.json; the intra kernel's by
    its own autotune key (BK, NC, BT, HV), the dtypes Triton adds to it, and safe_gate."""
    assert run.fla_pin_key(cm.CASES_BY_NAME["model-bf16-hx"]) == dict(
        BT=64, HV=32, X="bfloat16", beta="bfloat16", h="bfloat16", varlen=False,
        state_v_first=False)
    assert run.fla_pin_key(cm.CASES_BY_NAME["intra-long-bf16-safe"]) == dict(
        BK=32, NC=4, BT=64, HV=32, X="bfloat16", beta="bfloat16", varlen=False, safe_gate=True)
    small = cm.Case("s", "float32", op=cm.INTRA, K=7, BT=16, H=2, HV=4, beta="float32")
    assert run.fla_pin_key(small) == dict(BK=8, NC=1, BT=16, HV=4, X="float32", beta="float32",
                                          varlen=False, safe_gate=False)


def test_fla_configs_round_trip(tmp_path):
    """A run's fla_configs.json holds the configs fla ran with, keyed like --fla-configs reads
    them: a later run finds each case's entry (and entries of the same key are replaced)."""
    from fla_tuning import find_pin, load_pins

    args = run.parse_args(["--out", str(tmp_path), "--op", "chunk_bwd_intra"])
    outputs = run.Outputs(args, [])
    case = cm.CASES_BY_NAME["intra-model-bf16"]
    key = run.fla_pin_key(case)
    first = dict(kernel="chunk_kda_bwd_kernel_intra", **key,
                 config=dict(num_warps=4, num_stages=3), how="autotuned", case=case.name)
    outputs.write_pins([first])
    outputs = run.Outputs(args, [])
    outputs.write_pins([dict(first, config=dict(num_warps=8, num_stages=2))])
    entries = load_pins(tmp_path / "fla_configs.json")
    assert len(entries) == 1
    assert find_pin(entries, "chunk_kda_bwd_kernel_intra", **key) == dict(num_warps=8,
                                                                          num_stages=2)
    assert find_pin(entries, "chunk_kda_bwd_kernel_intra",
                    **run.fla_pin_key(cm.CASES_BY_NAME["intra-model-bf16-safe"])) is None


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


def torch_options(case):
    if case.op == cm.INTRA:
        return dict(chunk_size=case.BT, safe_gate=case.safe_gate)
    return dict(scale=case.K ** -0.5, chunk_size=case.BT)


@needs_torch
@needs_library
@pytest.mark.parametrize("case", [
    cm.Case("m-bf16-varlen", "bfloat16", seqlens=(37, 64, 1, 50), H=2, K=16, V=16, BT=32),
    cm.Case("m-fp32-hx-gva", "float32", h="x", B=2, T=80, H=1, HV=2, K=8, V=8, BT=16),
    cm.Case("m-intra-bf16-varlen", "bfloat16", op=cm.INTRA, seqlens=(37, 64, 1, 50), H=2,
            K=16, BT=32, safe_gate=True),
    cm.Case("m-intra-fp32-gva-beta32", "float32", op=cm.INTRA, beta="float32", B=2, T=80, H=1,
            HV=2, K=8, BT=16),
], ids=lambda c: c.name)
def test_make_inputs_and_torch_sampling(case):
    inputs, cu = torch_inputs(case)
    assert tuple(inputs) == case.input_names
    if case.op == cm.WY:
        assert inputs["h"].dtype == getattr(torch, case.h_dtype)
    assert inputs["g"].dtype == torch.float32 and float(inputs["g"].max()) <= 0.0
    assert inputs["beta"].dtype == getattr(torch, case.beta_dtype)
    again, _ = torch_inputs(case)
    assert all(torch.equal(inputs[n], again[n]) for n in inputs)  # seeded
    ci = kk.chunk_indices(cu, case.BT) if cu is not None else None
    fn = operator(case)
    outputs = fn(**inputs, **torch_options(case), cu_seqlens=cu, chunk_indices=ci)
    assert cm.problem_bytes(inputs, outputs, extra=(cu, ci)) == cm.case_bytes(case)
    table = cm.chunk_table(case.batch, case.total_t, case.BT, case.seqlens or None)
    plan = cm.sample_plan(table, cm.pick_chunks(table, case.hv, 2 * case.BT * case.hv))
    small = cm.sample_inputs(inputs, plan)
    sampled = fn(**small, **torch_options(case), cu_seqlens=torch.from_numpy(plan.cu_seqlens))
    for got, want in zip(sampled, cm.sample_outputs(outputs, plan)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@needs_torch
@pytest.mark.parametrize("case", [
    cm.Case("g-fixed", "bfloat16", op=cm.INTRA, B=2, T=100, H=2, K=16, BT=32),
    cm.Case("g-varlen", "float16", op=cm.INTRA, seqlens=(37, 64, 1, 50), H=1, HV=3, K=8,
            BT=16),
], ids=lambda c: c.name)
def test_intra_inputs_follow_spec(case):
    """SPEC-chunk-bwd-intra.md's inputs: unit-norm q, k rows; g chunk-local (its first row in
    every chunk is that row's own decay) and non-increasing inside every chunk; dAqk read
    lower-inclusive and dAkk strictly lower (0 elsewhere); strong decays reach about -7.2 per
    token (log2 of e^-5), inside safe_gate's bound."""
    import measure

    inputs, cu = torch_inputs(case, seed=3)
    norms = inputs["q"].float().norm(dim=-1)
    torch.testing.assert_close(norms, torch.ones_like(norms), atol=1e-2, rtol=0)
    position = measure.chunk_positions(case, torch.device("cpu"))
    g = inputs["g"].double()
    step = g[:, 1:] - g[:, :-1]                       # within a chunk: the row's log2 decay
    inside = (position[:, 1:] > 0)[..., None, None]
    assert bool((step.masked_fill(~inside, -1.0) < 0).all())
    assert float(step.masked_fill(~inside, 0).min()) >= -5 / math.log(2) - 1e-3
    first = g.masked_fill(~(position == 0)[..., None, None], -1.0)
    assert float(first.max()) < 0 and float(first.min()) >= -5 / math.log(2) - 1e-3
    column = torch.arange(case.BT)
    above = (column > position[..., None])[:, :, None, :]
    assert bool((inputs["dAqk"].masked_select(above) == 0).all())
    diagonal = (column == position[..., None])[:, :, None, :].expand_as(inputs["dAkk"])
    assert bool((inputs["dAkk"].masked_select(above | diagonal) == 0).all())
    assert float(inputs["dAqk"].masked_select(diagonal).abs().sum()) > 0


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
def test_cpu_dry_run(tmp_path):
    out = dry_run(tmp_path, "--kernels", "auto", "--cases", "model-bf16,varlen-bf16,gva-bf16")
    rows = report.read_csv(tmp_path / "bench.csv")
    assert {(r["case"], r["impl"]) for r in rows} == {
        ("model-bf16", "kda"), ("model-bf16", "torch-eager"), ("varlen-bf16", "kda"),
        ("gva-bf16", "kda")}
    assert all(r["err_dq"] is not None and r["err_dq"] < 1e-5 for r in rows)
    assert out.rstrip().splitlines()[-1].startswith("PyTorch eager")
    assert (tmp_path / "bench.md").read_text().count("| model-bf16 |") == 3


@needs_torch
@needs_library
def test_cpu_dry_run_every_kernel_in_one_process_and_merges(tmp_path):
    dry_run(tmp_path, "--cases", "small-bf16", "--no-reference", "--kernels", "simt,auto")
    out = dry_run(tmp_path, "--cases", "long-bf16", "--ref-budget", "100")
    assert out.count("reference: float64 cpu-ref on 3/4 chunks") == 1  # once for every kernel
    rows = report.finalize(report.read_csv(tmp_path / "bench.csv"), cm.H200_COPY_BANDWIDTH,
                           run.PASS_BARS)
    keys = [(r["case"], r["impl"], r["kernel"]) for r in rows]
    assert keys == [("long-bf16", "kda", "simt"), ("long-bf16", "kda", "sm80_mma"),
                    ("long-bf16", "kda", "auto"), ("small-bf16", "kda", "simt"),
                    ("small-bf16", "kda", "auto")]
    long = [r for r in rows if r["case"] == "long-bf16"]
    # B=2, T=96, BT=64: 4 chunks; a budget of 100 token-heads keeps first, last and shortest.
    assert all(r["err_sample"] == "3/4 chunks" and r["accuracy"] == "PASS" for r in long)
    dry_run(tmp_path, "--cases", "small-bf16", "--no-reference", "--fresh", "--kernels", "auto")
    assert len(report.read_csv(tmp_path / "bench.csv")) == 1
    assert report.read_csv(tmp_path / "bench.csv")[0]["b2b_us"] is None
    dry_run(tmp_path, "--cases", "small-bf16", "--no-reference", "--fresh", "--kernels", "auto",
            "--back-to-back", "3")
    [row] = report.read_csv(tmp_path / "bench.csv")
    assert row["b2b_us"] > 0
    assert "| small-bf16 | kda (auto) |" in (tmp_path / "bench.md").read_text()


@needs_torch
@needs_library
def test_cpu_dry_run_intra(tmp_path):
    out = dry_run(tmp_path, "--op", "chunk_bwd_intra", "--kernels", "auto,simt")
    rows = report.finalize(report.read_csv(tmp_path / "bench.csv"), cm.H200_COPY_BANDWIDTH,
                           run.PASS_BARS)
    assert [(r["case"], r["kernel"]) for r in rows] == [
        (c.name, k) for c in cm.INTRA_CASES for k in ("simt", "auto")]
    for row in rows:
        assert row["op"] == cm.INTRA and row["accuracy"] == "PASS", row
        assert row["err_dq"] < 1e-5 and row["err_dv"] is None and row["err_dA"] is None
        # Shrunken: B=1, T=96, H=2, K=32, BT=64, and the bytes of SPEC's formula.
        assert row["bytes"] == sum(cm.case_bytes(run.shrink(cm.CASES_BY_NAME[row["case"]])))
    md = (tmp_path / "bench.md").read_text()
    assert "chunk_bwd_intra: err_ratio" in md and "| dq | dk | db | dg | sample |" in md
    assert "operator chunk_bwd_intra" in out
    assert not (tmp_path / "fla_configs.json").exists()  # no fla in a dry run without Triton


@needs_torch
@needs_library
@pytest.mark.parametrize("op", cm.OPS)
def test_host_cost_runs_every_layer(op):
    result = subprocess.run([sys.executable, str(BENCH / "host_cost.py"), "--calls", "5",
                             "--op", op],
                            capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert cm.FLA_NAMES[op] in lines[0]
    assert lines[1].split() == ["layer", "compiled", "best", "median", "python", "best", "median"]
    rows = [line.split() for line in lines[2:7]]
    assert [row[0] for row in rows] == ["public", "custom-op", "impl", "fla-backend", "kda_run"]
    # Both implementations measured where both exist; the python one always does.
    assert all(float(row[3]) > 0 and float(row[4]) > 0 for row in rows), result.stdout
    compiled_built = "not measured" not in lines[7]
    assert lines[7].startswith("compiled: ") and lines[8].startswith("python: ")
    assert compiled_built == all(row[1] != "-" for row in rows), result.stdout
    # The compiled op's breakdown (its probe's phases, the results' release) comes last.
    breakdown = lines[9:]
    assert len(breakdown) == (4 if compiled_built else 0), result.stdout
    if compiled_built:
        assert breakdown[0].startswith("compiled: where custom-op's time goes")
        phases = breakdown[1].split(": ", 1)[1].split(", ")
        assert [p.rsplit(" ", 1)[0] for p in phases] == [
            "options and input views", "output allocations", "stream lookup",
            "kda::run (validation and backend)"]
        assert all(float(p.rsplit(" ", 1)[1]) >= 0 for p in phases)
        assert float(phases[1].rsplit(" ", 1)[1]) > 0 and float(phases[3].rsplit(" ", 1)[1]) > 0


def test_host_cost_rounds_keep_gpu_time_out():
    """--device cuda: rounds far below CUDA's ~1000 queued launches, each queued behind a spin
    kernel that outlasts it; --device cpu: 5 rounds of --calls, no spin."""
    import host_cost as hc

    assert hc.round_plan("cpu", 2000) == (5, 2000)
    assert hc.round_plan("cpu", 5) == (5, 5)
    assert hc.round_plan("cuda", 2000) == (10, 200)
    assert hc.round_plan("cuda", 5) == (5, 5)
    assert hc.round_plan("cuda", 450) == (5, 200)  # at least 5 rounds, none above the cap
    assert hc.round_plan("cuda", 4001) == (21, 200)
    rounds, per_round = hc.round_plan("cuda", 10**6)
    assert per_round * 5 <= 1000 and rounds * per_round >= 10**6
    # 200 µs a call at ~2 GHz, or twice what the layer measured when that is more.
    assert hc.spin_cycles(200) == 200 * 200 * 2000
    assert hc.spin_cycles(200, measured_us_per_call=50.0) == hc.spin_cycles(200)
    assert hc.spin_cycles(200, measured_us_per_call=300.0) == 200 * 600 * 2000


def test_host_cost_times_only_the_calls(monkeypatch):
    """time_layer's order per round: an untimed call, a sync, the spin enqueued, then the timer
    around the round's calls only; the spin's state and the sync come after the timer."""
    import host_cost as hc

    log, clock = [], [0.0]

    def perf_counter():
        log.append("clock")
        return clock[0]

    def call():
        log.append("call")
        clock[0] += 10e-6  # 10 µs a call

    class Pending:
        def __init__(self, over):
            self.over = over

        def query(self):
            log.append("query")
            return self.over

    spins = iter([False, True, False])  # the second round outlasts its spin

    def spin():
        log.append("spin")
        return Pending(next(spins))

    monkeypatch.setattr(hc.time, "perf_counter", perf_counter)
    best, median, uncovered = hc.time_layer(call, (3, 4), lambda: log.append("sync"), spin)
    assert (round(best, 6), round(median, 6), uncovered) == (10.0, 10.0, 1)
    one_round = ["call", "sync", "spin", "clock", "call", "call", "call", "call", "clock",
                 "query", "sync"]
    assert log == one_round * 3
    log.clear()
    assert hc.time_layer(call, (5, 2), lambda: log.append("sync"))[2] == 0  # cpu: no spin
    assert log == ["call", "sync", "clock", "call", "call", "clock", "sync"] * 5


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


def test_host_cost_measures_the_operators_fla_dispatches():
    """host_cost.py reads the operator list from the tables' file, before importing the package:
    its stage names are kda_kernels.fla's."""
    import host_cost as hc

    import kda_kernels.fla as kfla

    assert hc._FLA_STAGES == kfla.STAGES
    assert tuple(hc.OPS.values()) == kfla.STAGES


# --- bench/prep.py's float64 math (CPU) --------------------------------------------------------


@needs_torch
@needs_library
@pytest.mark.parametrize("kimi", [False, True], ids=["default", "kimi"])
def test_prep_bench_float64_matches_the_cpu_backend(kimi):
    """bench/prep.py's float64 pass (its err_ratio judge) against kda_kernels' cpu backend on
    the bench's own inputs: the two are the same math, to the outputs' bf16 rounding."""
    import prep

    p = prep.problem(1, 128, None, 2, kimi, torch.device("cpu"))
    ref = prep.prep_float64(p, kimi)
    ours = prep.run_ours(p, kimi, backend="cpu")
    for name, x, r in zip(prep.OUTPUTS, ours, ref):
        assert x.shape == r.shape, name
        assert prep.err_ratio(x, r) < (1e-6 if name == "gk" else 8e-3), name
