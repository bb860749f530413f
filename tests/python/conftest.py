"""Makes the package importable from the checkout when it is not installed, and prints which
libkda the tests run against."""

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("kda_kernels") is None:  # not installed, not on PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import kda_kernels  # noqa: E402


def pytest_report_header(config):
    try:
        return f"kda_kernels from {Path(kda_kernels.__file__).parent}, libkda {kda_kernels.library_path()}"
    except kda_kernels.LibraryError as e:
        return f"kda_kernels: {e}"
