#!/usr/bin/env python3
"""Summarizes an ncu SASS table (`ncu --import REP --page source --csv --print-source sass`, as
dev/gpu-check.sh's ncu-intra / ncu-wy parts write it): warp instructions and stall samples per
opcode, the stall reasons with the opcodes that waited most on each, and (--stretches) the
kernel cut at its CTA barriers: each stretch's warp instructions, its share of the stall samples
and its most sampled instructions, the view that shows which part of a unit's work waits.

    dev/ncu-sass-summary.py logs/ncu-intra-sass.csv [--top 25] [--stretches]
"""

import argparse
import collections
import csv
import re


def opcode(source):
    """The opcode without predicate and modifiers ("@!P0 LDG.E.128 ..." -> "LDG")."""
    text = re.sub(r"^@!?U?P\w+\s+", "", source.strip())
    return text.split()[0].split(".")[0] if text else "?"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv_file")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--stretches", action="store_true",
                        help="also cut the kernel at its BAR.SYNC instructions (SASS order)")
    args = parser.parse_args()
    with open(args.csv_file, newline="") as f:
        rows = list(csv.reader(f))
    header_at = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    header = rows[header_at]
    col = {name: i for i, name in enumerate(header)}
    data = [r for r in rows[header_at + 1:] if len(r) == len(header)]
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def number(row, name):
        try:
            return int(row[col[name]] or 0)
        except ValueError:
            return 0

    instructions = collections.Counter()
    samples = collections.Counter()
    per_reason = collections.Counter()
    reason_ops = collections.defaultdict(collections.Counter)
    for r in data:
        op = opcode(r[col["Source"]])
        instructions[op] += number(r, "Instructions Executed")
        samples[op] += number(r, "Warp Stall Sampling (All Samples)")
        for reason in reasons:
            v = number(r, reason)
            per_reason[reason] += v
            reason_ops[reason][op] += v
    total_i = sum(instructions.values()) or 1
    total_s = sum(samples.values()) or 1
    print(f"warp instructions {total_i}, stall samples {total_s}")
    print(f"{'opcode':<12} {'instr':>10} {'%':>6} {'samples':>8} {'%':>6}")
    for op, n in instructions.most_common(args.top):
        print(f"{op:<12} {n:>10} {100 * n / total_i:5.1f}% {samples[op]:>8} "
              f"{100 * samples[op] / total_s:5.1f}%")
    total_r = sum(per_reason.values()) or 1
    print("stall reasons:")
    for reason, v in per_reason.most_common(12):
        waiting = reason_ops[reason].most_common(4) if v else []
        top = ", ".join(f"{o} {100 * c / v:.0f}%" for o, c in waiting)
        print(f"  {reason:<24} {100 * v / total_r:5.1f}%   on: {top}")
    if args.stretches:
        print_stretches(data, col, number, total_s)


def print_stretches(data, col, number, total_samples):
    """The kernel in SASS order, cut after each BAR.SYNC: per stretch its static and executed
    warp instructions, its stall samples and its three most sampled instructions. A loop's body
    shows as the stretches between its barriers; the executed count divided by the number of
    warps x units (or x loop trips) gives the per-warp figure."""
    stretches = [[]]
    for r in data:
        stretches[-1].append(r)
        if opcode(r[col["Source"]]) == "BAR":
            stretches.append([])
    print("stretches (cut after each CTA barrier, SASS order):")
    print(f"{'#':>3} {'static':>7} {'executed':>12} {'samples %':>10}  most sampled")
    for n, rows in enumerate(s for s in stretches if s):
        executed = sum(number(r, "Instructions Executed") for r in rows)
        sampled = sum(number(r, "Warp Stall Sampling (All Samples)") for r in rows)
        top = sorted(rows, key=lambda r: -number(r, "Warp Stall Sampling (All Samples)"))[:3]
        hot = "; ".join(
            f"{r[col['Source']].strip()[:32]} ({number(r, 'Warp Stall Sampling (All Samples)')})"
            for r in top)
        print(f"{n:>3} {len(rows):>7} {executed:>12} {100 * sampled / (total_samples or 1):9.1f}%  {hot}")


if __name__ == "__main__":
    main()
