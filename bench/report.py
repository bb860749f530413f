"""Rows of results -> derived columns, CSV, Markdown tables and the chart.

A row is a dict of one (case, implementation, kernel) measurement of either operator. The
measuring code fills the raw fields (RAW_FIELDS); `finalize` derives the rest from them, from
the case's target and from the fla row of the same case, so that rows merged from several runs
(one invocation per operator or group of cases) are judged together. No torch here.
"""

import csv
import math
from pathlib import Path

from cases import ALL_OUTPUT_NAMES, CASES_BY_NAME, OP_OUTPUTS, OPS, WY, floor_us

ERR_FIELDS = tuple(f"err_{name}" for name in ALL_OUTPUT_NAMES)
RAW_FIELDS = (
    "case", "op", "impl", "kernel", "shape", "x", "h_dtype", "bytes_read", "bytes_written",
    "bytes", "sets", "reps", "median_us", "min_us", "loop_us", "host_us", "b2b_us",
    *ERR_FIELDS, "err_sample", "fla_config", "note", "gpu", "run_at",
)
DERIVED_FIELDS = (
    "floor_us", "share_of_floor", "target", "speedup_vs_fla", "perf", "err_max", "err_bar",
    "accuracy", "err_vs_fla",
)
FIELDS = RAW_FIELDS[:10] + DERIVED_FIELDS[:1] + RAW_FIELDS[10:] + DERIVED_FIELDS[1:]
IMPL_ORDER = {"kda": 0, "fla": 1, "torch-eager": 2}
KERNEL_ORDER = {"simt": 0, "sm80_mma": 1, "auto": 2}
NUMERIC = {"bytes_read", "bytes_written", "bytes", "sets", "reps", "median_us", "min_us",
           "loop_us", "host_us", "b2b_us", *ERR_FIELDS, "floor_us", "share_of_floor",
           "speedup_vs_fla", "err_max", "err_bar", "err_vs_fla"}


def number(value):
    """A float from a row field ('' and None give None; 'nan' gives nan)."""
    if value is None or value == "":
        return None
    return float(value)


def row_key(row):
    return (row["case"], row["impl"], row.get("kernel", ""))


def row_op(row):
    """The row's operator: its op field, else its case's (rows of older CSVs), else the first."""
    if row.get("op"):
        return row["op"]
    case = CASES_BY_NAME.get(row["case"])
    return case.op if case else WY


def err_fields(op):
    """The err_* columns of an operator's outputs."""
    return tuple(f"err_{name}" for name in OP_OUTPUTS[op])


def sort_rows(rows):
    order = {name: i for i, name in enumerate(CASES_BY_NAME)}
    return sorted(rows, key=lambda r: (order.get(r["case"], len(order)),
                                       IMPL_ORDER.get(r["impl"], 9),
                                       KERNEL_ORDER.get(r.get("kernel", ""), 9)))


def merge_rows(old, new):
    """`old` rows with those of `new` replacing any of the same (case, impl, kernel)."""
    merged = {row_key(r): r for r in old}
    merged.update({row_key(r): r for r in new})
    return sort_rows(merged.values())


def finalize(rows, bandwidth, pass_bars):
    """Fill DERIVED_FIELDS in place. `pass_bars` maps an operator to {X dtype name: SPEC's
    err_ratio bar}."""
    fla = {r["case"]: r for r in rows if r["impl"] == "fla"}
    for row in rows:
        op = row["op"] = row_op(row)
        case = CASES_BY_NAME.get(row["case"])
        total = number(row.get("bytes"))
        median = number(row.get("median_us"))
        floor = floor_us(total, bandwidth) if total else None
        row["floor_us"] = floor
        row["share_of_floor"] = floor / median if floor and median else None
        fla_row = fla.get(row["case"])
        fla_median = number(fla_row.get("median_us")) if fla_row else None
        row["speedup_vs_fla"] = (fla_median / median
                                 if fla_median and median and row["impl"] != "fla" else None)
        row["target"] = case.target_text if case and row["impl"] == "kda" else ""
        row["perf"] = _perf_verdict(row, case)

        errs = [number(row.get(f)) for f in err_fields(op)]
        have = [e for e in errs if e is not None]
        row["err_max"] = max(have, key=lambda e: math.inf if math.isnan(e) else e) if have else None
        row["err_bar"] = pass_bars[op].get(row.get("x")) if have else None
        if have and row["impl"] != "fla":
            ok = len(have) == len(errs) and all(math.isfinite(e) and e <= row["err_bar"]
                                                for e in have)
            row["accuracy"] = "PASS" if ok else "FAIL"
        else:
            row["accuracy"] = ""
        row["err_vs_fla"] = None
        if have and row["impl"] != "fla" and fla_row:
            theirs = [number(fla_row.get(f)) for f in err_fields(op)]
            ratios = [e / t for e, t in zip(errs, theirs)
                      if e is not None and t is not None and t > 0]
            row["err_vs_fla"] = max(ratios) if ratios else None
    return rows


def _perf_verdict(row, case):
    if row["impl"] != "kda" or case is None or number(row.get("median_us")) is None:
        return ""
    if case.target_speedup:
        speedup = row["speedup_vs_fla"]
        if speedup is None:
            return "n/a (no fla time)"
        return "PASS" if speedup >= case.target_speedup else "FAIL"
    return "PASS" if row["share_of_floor"] >= case.target_share else "FAIL"


# --- CSV ----------------------------------------------------------------------------------


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(row.get(k)) for k in FIELDS})


def read_csv(path):
    """Rows of a CSV written by write_csv (raw fields only; numbers as floats)."""
    if not Path(path).is_file():
        return []
    with open(path, newline="") as f:
        rows = []
        for raw in csv.DictReader(f):
            row = {k: raw.get(k, "") for k in RAW_FIELDS}
            for k in RAW_FIELDS:
                if k in NUMERIC:
                    row[k] = number(row[k])
            rows.append(row)
    return rows


# --- Markdown -----------------------------------------------------------------------------


def _us(value):
    return "—" if value is None else f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def _pct(value):
    return "—" if value is None else f"{value:.0%}"


def _times(value):
    return "—" if value is None else f"{value:.2f}x"


def _err(value):
    return "—" if value is None else f"{value:.1e}"


def markdown(rows, header_lines=()):
    """The results as Markdown: the speed table (one line per case and kernel choice), the
    accuracy table (per output, ours and fla's) and a line for the PyTorch eager baseline."""
    fla = {r["case"]: r for r in rows if r["impl"] == "fla"}
    out = list(header_lines)
    if out:
        out.append("")
    out += [
        "| case | shape | MB | floor µs | kda kernel | kda µs | share of floor | target | "
        "result | fla µs | fla share | kda vs fla | max err_ratio kda / fla | accuracy |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    kda_rows = [r for r in rows if r["impl"] == "kda"]
    cases_with_kda = {r["case"] for r in kda_rows}
    listed = kda_rows + [r for r in rows if r["impl"] == "fla" and r["case"] not in cases_with_kda]
    for row in sort_rows(listed):
        f = fla.get(row["case"], {})
        is_kda = row["impl"] == "kda"
        out.append("| " + " | ".join([
            row["case"], row.get("shape", ""),
            f"{number(row.get('bytes')) / 1e6:.0f}" if number(row.get("bytes")) else "—",
            _us(row.get("floor_us")),
            row.get("kernel", "") if is_kda else "(not run)",
            _us(number(row.get("median_us"))) if is_kda else "—",
            _pct(row.get("share_of_floor")) if is_kda else "—",
            row.get("target", ""),
            (row.get("perf") or "—") if is_kda else "—",
            _us(number(f.get("median_us"))),
            _pct(f.get("share_of_floor")),
            _times(row.get("speedup_vs_fla")) if is_kda else "—",
            f"{_err(row.get('err_max')) if is_kda else '—'} / {_err(f.get('err_max'))}",
            (row.get("accuracy") or "—") if is_kda else "—",
        ]) + " |")

    for op in OPS:  # one table per operator: their outputs differ
        err_rows = [r for r in rows if r.get("err_max") is not None and row_op(r) == op]
        if not err_rows:
            continue
        names = OP_OUTPUTS[op]
        out += ["", f"{op}: err_ratio against the float64 reference, per output (the sample "
                "says which chunks the reference recomputed):", "",
                "| case | implementation | " + " | ".join(names) + " | sample |",
                "|---|---|" + "---|" * len(names) + "---|"]
        for row in sort_rows(err_rows):
            label = row["impl"] + (f" ({row['kernel']})" if row.get("kernel") else "")
            out.append("| " + " | ".join(
                [row["case"], label]
                + [_err(number(row.get(f))) for f in err_fields(op)]
                + [row.get("err_sample", "")]) + " |")

    b2b = [r for r in sort_rows(rows)
           if r["impl"] in ("kda", "fla") and number(r.get("b2b_us")) is not None]
    if b2b:
        out += ["", "Back to back (`--back-to-back`: calls on one input set issued in a row, as a "
                "training loop issues them; wall time per call, host cost included):", "",
                "| case | implementation | µs per call | fla / this |", "|---|---|---|---|"]
        for row in b2b:
            f = fla.get(row["case"], {})
            theirs, ours = number(f.get("b2b_us")), number(row.get("b2b_us"))
            label = row["impl"] + (f" ({row['kernel']})" if row.get("kernel") else "")
            ratio = _times(theirs / ours) if theirs and row["impl"] == "kda" else "—"
            out.append(f"| {row['case']} | {label} | {_us(ours)} | {ratio} |")

    configs = [r for r in sort_rows(rows) if r["impl"] == "fla" and r.get("fla_config")]
    if configs:
        out += ["", "fla's configs (pin them with `--fla-configs <out>/fla_configs.json`):", ""]
        out += [f"- {r['case']}: {r['fla_config']}" for r in configs]

    for row in sort_rows(r for r in rows if r["impl"] == "torch-eager"):
        f = fla.get(row["case"])
        line = (f"\nPyTorch eager (batched einsum over all (chunk, head) units, float32 math), "
                f"{row['case']}: {_us(number(row.get('median_us')))} µs, "
                f"{_pct(row.get('share_of_floor'))} of floor")
        if f and number(f.get("median_us")) and number(row.get("median_us")):
            line += (f"; fla is {number(row['median_us']) / number(f['median_us']):.1f}x "
                     f"faster than it")
        line += f"; max err_ratio {_err(row.get('err_max'))} ({row.get('accuracy') or '—'})."
        out.append(line)
    notes = {}  # one line per distinct note, naming the rows it applies to
    for r in sort_rows(rows):
        if r.get("note"):
            label = r["impl"] + (f" ({r['kernel']})" if r.get("kernel") else "")
            notes.setdefault(r["note"], []).append(f"{r['case']} {label}")
    if notes:
        out += ["", "Notes:"] + [f"- {', '.join(where)}: {note}" for note, where in notes.items()]
    return "\n".join(out)


# --- chart --------------------------------------------------------------------------------


def chart(path, rows):
    """A bar chart of share of floor per case: one bar per kda kernel choice and one for fla,
    with the target share marked. Returns a message when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no chart"
    cases = [name for name in CASES_BY_NAME if any(r["case"] == name for r in rows)]
    series = sorted({("kda", r.get("kernel", "")) for r in rows if r["impl"] == "kda"},
                    key=lambda s: KERNEL_ORDER.get(s[1], 9))
    series.append(("fla", ""))
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.1 * len(cases) + 2), 4.8))
    for s, (impl, kernel) in enumerate(series):
        values = []
        for name in cases:
            match = [r for r in rows if r["case"] == name and r["impl"] == impl
                     and (r.get("kernel", "") == kernel or impl == "fla")]
            share = match[0].get("share_of_floor") if match else None
            values.append(share or 0.0)
        xs = [i - 0.4 + width * (s + 0.5) for i in range(len(cases))]
        label = f"kda ({kernel})" if impl == "kda" else "fla Triton"
        bars = ax.bar(xs, [100 * v for v in values], width, label=label)
        ax.bar_label(bars, labels=[f"{100 * v:.0f}" if v else "" for v in values], fontsize=7)
    for i, name in enumerate(cases):
        target = CASES_BY_NAME[name].target_share
        if target:
            ax.hlines(100 * target, i - 0.45, i + 0.45, colors="black", linestyles="dashed",
                      linewidth=1)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels(cases, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("share of the bandwidth floor (%)")
    ops = sorted({CASES_BY_NAME[name].op for name in cases})
    note = "; small-bf16's target is 2x fla" if "small-bf16" in cases else ""
    ax.set_title(f"{', '.join(ops)}: floor / time (dashed: target share{note})", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"chart: {path}"
