"""The SASS of a library's or object's functions, as cuobjdump prints it, read into Python: what
dev/sass-compare.py and dev/sass-loops.py both start from. Needs cuobjdump and nvdisasm on PATH
(dev/journal/status.md says where the venv has them)."""

import re
import subprocess


def functions(path, substring=""):
    """{function name: [(address, instruction text)]} of the functions of `path` (a shared library
    or an object file) whose name holds `substring`; the text is the instruction without its
    trailing ';' and encoding."""
    out = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True,
                         check=True).stdout
    funcs, name = {}, None
    for line in out.splitlines():
        header = re.match(r"\s*Function : (\S+)", line)
        if header:
            name = header.group(1) if substring in header.group(1) else None
            if name is not None:
                funcs[name] = []
            continue
        ins = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if name is not None and ins:
            funcs[name].append((int(ins.group(1), 16), ins.group(2).strip()))
    return funcs
