#!/usr/bin/env python3
"""Compares the SASS of two builds of libkda kernel by kernel: which instantiations are the same
once addresses, encodings and parameter-block offsets (c[0x0][...]) are set aside. Shows that a
library combining changes measured in separate builds runs, kernel by kernel, the code that ran
on the GPU.

    dev/sass-compare.py A.so B.so [NAME_SUBSTRING]    (default substring: _kernel)

Needs cuobjdump and nvdisasm on PATH (dev/journal/status.md says where the venv has them).
"""

import re
import sys

from sass_dump import functions


def kernels(lib):
    """{function name: [normalized instructions]} of every function in lib's fatbins: addresses
    and encodings dropped, parameter-block offsets (c[0x0][...]) made one placeholder."""
    return {name: [re.sub(r"c\[0x0\]\[0x[0-9a-f]+\]", "c[0x0][P]", text) for _, text in code]
            for name, code in functions(lib).items()}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    a, b = kernels(sys.argv[1]), kernels(sys.argv[2])
    pattern = sys.argv[3] if len(sys.argv) > 3 else "_kernel"
    counts = {"same": 0, "DIFF": 0, "only in A": 0}
    for name in sorted(n for n in a if pattern in n):
        verdict = "only in A" if name not in b else "same" if a[name] == b[name] else "DIFF"
        counts[verdict] += 1
        sizes = f"{len(a[name]):5d} {len(b.get(name, [])):5d}"
        print(f"{verdict:9s} {sizes} {name}")
    print(", ".join(f"{k}: {v}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
