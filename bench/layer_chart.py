#!/usr/bin/env python3
"""A chart of bench/layer.py's result: for each shape, one horizontal bar per mode (fla, wy,
both), the backward's GPU time split by stage, as an SVG file that needs no plotting library
(the GPU machines and CI have none).

    python3 bench/layer_chart.py LAYER_JSON OUT_SVG

bench/layer.py writes layer.svg beside layer.json with the same function (``svg``).
"""

import json
import sys
from html import escape
from pathlib import Path

# The stages of a KDA layer's backward, in bar order: (label, substrings of a kernel's short
# name that belong to it, colour). Our stage operators and fla's kernels for the same stages
# share a stage (and a colour); the segment's text says whose kernel ran. The fused epilogue
# (and its reduction) replaces several stages, so it has its own.
STAGES = (
    ("intra (chunk_kda_bwd_intra)", ("intra",), "#d62728"),
    ("WY (chunk_kda_bwd_wy_dqkg_fused)", ("wy_dqkg",), "#1f77b4"),
    ("h recompute", ("fwd_kernel_h", "chunk_fwd_h"), "#9467bd"),
    ("dh", ("bwd_kernel_dhu", "chunk_bwd_dhu"), "#8c564b"),
    ("w, u recompute (fla) / first pass (chunk_kda_bwd_prep)", ("recompute_w_u", "chunk_bwd_prep"),
     "#e377c2"),
    ("epilogue (chunk_kda_bwd_epilogue)", ("chunk_bwd_epilogue", "gate_params"), "#2ca02c"),
    ("other kernels", ("",), "#7f7f7f"),
)
# Every CUDA kernel of this project lives in this namespace (the profiler's full kernel name).
OUR_NAMESPACE = "kda::cuda::"

# What each bench/layer.py mode ran, as the bar's label.
MODE_LABELS = {"fla": "fla's kernels", "wy": "kda: WY op", "both": "kda: WY + intra",
               "layer": "kda: chunk_kda, split", "layer-epilogue": "kda: chunk_kda, epilogue",
               "layer-epilogue-kda-scans": "kda: chunk_kda, epilogue, our scans",
               "layer-prep": "kda: chunk_kda, our prep, fla's scans",
               "layer-library": "kda: chunk_kda, every stage ours",
               "cudnn": "cuDNN-frontend sm90"}

WIDTH = 900
LEFT = 150  # room for the mode labels
RIGHT = 20
BAR = 28
GAP = 14


def short_name(name):
    """A kernel's name without return type, namespaces, template arguments or parameters:
    'void kda::cuda::wy_dqkg_mma_kernel<T<1> >(P)' -> 'wy_dqkg_mma_kernel'. Triton kernels keep
    their function name."""
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "(" and depth == 0:
            break
        elif depth == 0:
            out.append(ch)
    text = "".join(out).strip()
    if text.startswith("void "):
        text = text[len("void "):]
    return text.rsplit("::", 1)[-1].strip() or name


def stage_of(kernel_name):
    """The index in STAGES of a kernel (the first stage whose substring it holds)."""
    name = short_name(kernel_name)
    for i, (_, keys, _) in enumerate(STAGES):
        if any(key in name for key in keys):
            return i
    return len(STAGES) - 1


def stage_times(result):
    """[(µs, ours)] per stage of one mode's result: its kernels' times summed by stage, and
    whether any of the stage's time is one of our kernels'."""
    times = [[0.0, False] for _ in STAGES]
    for kernel in result.get("kernels", []):
        i = stage_of(kernel["name"])
        times[i][0] += float(kernel["us"])
        times[i][1] = times[i][1] or OUR_NAMESPACE in kernel["name"]
    return [tuple(t) for t in times]


def shape_title(shape, options):
    """The panel's title: B and T, or the packed sequences of a varlen shape."""
    lengths = shape.get("seq_lengths") or []
    rows = (f"varlen {len(lengths)} sequences (T={shape.get('T')})" if lengths
            else f"B={shape.get('B')} T={shape.get('T')}")
    return (f"KDA layer backward through fla's chunk_kda, {rows} H={shape.get('H')} "
            f"K=V={options.get('K', '')} {options.get('x', '')}: GPU time per stage")


def _text(x, y, body, size=12, anchor="start", fill="#000", weight="normal"):
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-family="sans-serif" font-size="{size}" '
            f'text-anchor="{anchor}" fill="{fill}" font-weight="{weight}">{escape(body)}</text>')


def svg(record):
    """The chart of a layer.json record as SVG text: one panel per shape, one bar per mode
    with results (a mode that failed is listed with its error instead of a bar)."""
    parts = []
    y = 28
    shapes = record.get("shapes", [])
    options = record.get("settings", {})
    for shape in shapes:
        modes = shape.get("modes", {})
        parts.append(_text(10, y, shape_title(shape, options), size=14, weight="bold"))
        y += 14
        totals = [r.get("backward_gpu_us") for r in modes.values() if r.get("backward_gpu_us")]
        scale = (WIDTH - LEFT - RIGHT) / max(totals) if totals else 0.0
        for mode, result in modes.items():
            y += GAP
            total = result.get("backward_gpu_us")
            if not total:
                parts.append(_text(10, y + BAR * 0.65, MODE_LABELS.get(mode, mode)))
                parts.append(_text(LEFT, y + BAR * 0.65,
                                   f"no result: {result.get('error', 'not measured')}",
                                   fill="#a00"))
                y += BAR
                continue
            parts.append(_text(10, y + BAR * 0.45, MODE_LABELS.get(mode, mode), weight="bold"))
            parts.append(_text(10, y + BAR * 0.95, f"{total / 1000:.2f} ms", size=11))
            x = LEFT
            theirs = "cuDNN" if mode == "cudnn" else "fla"
            for (label, _, colour), (us, ours) in zip(STAGES, stage_times(result)):
                if us <= 0:
                    continue
                w = us * scale
                who = "ours" if ours else theirs
                parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{BAR}" '
                             f'fill="{colour}" stroke="#fff" stroke-width="1">'
                             f'<title>{escape(label)}: {us:.0f} µs ({who})</title></rect>')
                if w > 70:
                    parts.append(_text(x + w / 2, y + BAR * 0.65, f"{who} {us:.0f}", size=11,
                                       anchor="middle", fill="#fff"))
                x += w
            y += BAR
        y += 34
    # The legend: one swatch per stage, wrapped to the chart's width.
    x = 10
    for label, _, colour in STAGES:
        width = 16 + 7 * len(label) + 18
        if x > 10 and x + width > WIDTH:
            x, y = 10, y + 18
        parts.append(f'<rect x="{x}" y="{y - 11}" width="12" height="12" fill="{colour}"/>')
        parts.append(_text(x + 16, y, label, size=11))
        x += width
    y += 12
    note = ("Times: torch.profiler's CUDA kernel time per backward (bench/layer.py); "
            "\"ours\" marks stages run by kda_kernels.")
    parts.append(_text(10, y + 14, note, size=10, fill="#444"))
    height = y + 24
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}">')
    background = f'<rect width="{WIDTH}" height="{height}" fill="#fff"/>'
    return "\n".join([head, background, *parts, "</svg>"]) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: layer_chart.py LAYER_JSON OUT_SVG", file=sys.stderr)
        return 2
    record = json.loads(Path(argv[0]).read_text())
    Path(argv[1]).write_text(svg(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
