#!/usr/bin/env python3
"""Static instruction mix of one kernel's loops: for each backward branch of the kernel's SASS
whose body holds a matrix instruction (HGMMA, HMMA), the body's instruction count and its most
frequent opcodes, smallest body first (the innermost loop that does the products, e.g. the WY
kernel's K loop). Used to predict a rung before a device call (e.g. the WY K loop's 1339 -> 1115
instructions with 32-bit offsets).

    dev/sass-loops.py LIB_OR_OBJECT KERNEL_SUBSTRING [--min-bytes N] [--top N]

Needs cuobjdump and nvdisasm on PATH (dev/journal/status.md says where the venv has them). Counts are
static: a loop's body as laid out, each instruction once, whatever branches inside it skip.
"""

import argparse
import collections
import re
import sys

from sass_dump import functions

INTEGER_OPS = {"IMAD", "LEA", "IADD3", "IADD", "VIADD", "SHF", "LOP3", "ISETP", "SEL", "MOV",
               "R2UR", "S2UR", "ULDC", "UMOV", "UIADD3", "ULEA", "UIMAD", "ULOP3", "USHF"}


def opcode(text):
    """The opcode without its guard predicate and modifiers: '@!P0 IMAD.WIDE R1, ...' -> IMAD."""
    return re.sub(r"^@!?U?P[0-9T]\s+", "", text).split()[0].split(".")[0]


def loops(code, min_bytes):
    """(start, end) of every backward branch whose body holds HGMMA or HMMA, smallest first."""
    matrix = [a for a, t in code if opcode(t) in ("HGMMA", "HMMA")]
    found = set()
    for address, text in code:
        target = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", text)
        if not target:
            continue
        start = int(target.group(1), 16)
        if start < address and address - start >= min_bytes and any(
                start <= m <= address for m in matrix):
            found.add((start, address))
    return sorted(found, key=lambda span: span[1] - span[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path")
    parser.add_argument("kernel")
    parser.add_argument("--min-bytes", type=lambda s: int(s, 0), default=0x1000,
                        help="shortest loop body to report, in bytes of code (default 0x1000)")
    parser.add_argument("--top", type=int, default=12, help="opcodes listed per loop")
    args = parser.parse_args()
    funcs = functions(args.path, args.kernel)
    if not funcs:
        sys.exit(f"sass-loops: no function of {args.path} holds {args.kernel!r}")
    for name, code in funcs.items():
        print(f"{name}: {len(code)} instructions")
        for start, end in loops(code, args.min_bytes):
            body = [t for a, t in code if start <= a <= end]
            mix = collections.Counter(opcode(t) for t in body)
            integer = sum(n for op, n in mix.items() if op in INTEGER_OPS)
            top = ", ".join(f"{op} {n}" for op, n in mix.most_common(args.top))
            print(f"  loop {start:#x}..{end:#x}: {len(body)} instructions, {integer} integer/"
                  f"address ops; {top}")


if __name__ == "__main__":
    main()
