#!/usr/bin/env python3
"""Summarizes an ncu SASS table (`ncu --import REP --page source --csv --print-source sass`, as
dev/gpu-check.sh's ncu-intra / ncu-wy parts write it): warp instructions and stall samples per
opcode, and the stall reasons with the opcodes that waited most on each.

    dev/ncu-sass-summary.py logs/ncu-intra-sass.csv [--top 25]
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


if __name__ == "__main__":
    main()
