"""The package around the operator: import without libkda or torch, where libkda is looked for,
version, backends, chunk_indices, help text."""

import os
import pydoc
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kda_kernels as kk
from kda_kernels import _library, _locate

PACKAGE_PARENT = str(Path(kk.__file__).resolve().parents[1])


def run_python(code, **env):
    environment = {**os.environ, "PYTHONPATH": PACKAGE_PARENT, **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=environment, timeout=120)


# The first call that needs libkda, printing the LibraryError it raises.
LIBRARY_ERROR_PROBE = (
    "import numpy as np, kda_kernels as kk\n"
    "try:\n"
    "    kk.chunk_indices(np.array([0, 4]), 16)\n"
    "except kk.LibraryError as e:\n"
    "    print('ERROR', e)\n"
)


def test_imports_without_library_and_first_call_says_where_it_looked(tmp_path):
    missing = tmp_path / "nowhere" / "libkda.so"
    result = run_python(LIBRARY_ERROR_PROBE, KDA_LIBRARY=str(missing))
    assert result.returncode == 0, result.stderr
    assert "ERROR" in result.stdout and str(missing) in result.stdout
    assert "KDA_LIBRARY" in result.stdout


def test_a_shared_library_that_is_not_libkda_is_a_library_error():
    import _ctypes  # a loadable shared object with no kda_* symbols

    foreign = Path(_ctypes.__file__).resolve()
    result = run_python(LIBRARY_ERROR_PROBE, KDA_LIBRARY=str(foreign))
    assert result.returncode == 0, result.stderr
    assert "ERROR" in result.stdout and f"{foreign}: not libkda" in result.stdout


def test_imports_and_runs_numpy_without_torch():
    # sys.modules["torch"] = None makes `import torch` fail, as on a machine without torch.
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import numpy as np, kda_kernels as kk\n"
        "print(kk.chunk_indices(np.array([0, 20]), 16).tolist())\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[[0, 0], [0, 1]]"


def test_library_candidates_order(monkeypatch, tmp_path):
    monkeypatch.setenv("KDA_LIBRARY", str(tmp_path / "libkda.so"))
    assert _library.candidates() == [tmp_path / "libkda.so"]
    monkeypatch.delenv("KDA_LIBRARY")
    found = _library.candidates()
    assert found[0] == _locate.bundled_library(Path(kk.__file__).parent)


def test_repo_build_libraries_prefers_build_then_newest(tmp_path):
    name = _locate.library_file_name()
    for i, folder in enumerate(("build-old", "build-new", "build")):
        lib = tmp_path / folder / "src" / name
        lib.parent.mkdir(parents=True)
        lib.write_bytes(b"")
        os.utime(lib, (1000 + i, 1000 + i))
    os.utime(tmp_path / "build" / "src" / name, (1, 1))  # build/ wins even when oldest
    found = [p.parent.parent.name for p in _locate.repo_build_libraries(tmp_path)]
    assert found == ["build", "build-new", "build-old"]


def test_version_and_library_path():
    assert re.fullmatch(r"\d+\.\d+\.\d+", kk.__version__)
    assert kk.library_path().is_file()
    with pytest.raises(AttributeError):
        kk.no_such_attribute  # noqa: B018


def test_backend_available():
    assert kk.backend_available("cpu-ref") is True
    assert kk.backend_available("cpu") is True
    assert kk.backend_available("cuda") in (True, False)
    with pytest.raises(ValueError, match="gpu"):
        kk.backend_available("gpu")


@pytest.mark.parametrize("as_type", [list, lambda x: np.array(x, np.int32), np.array])
def test_chunk_indices(as_type):
    pairs = kk.chunk_indices(as_type([0, 1, 17, 17, 50]), 16)
    assert pairs.dtype == np.int64 and pairs.shape == (5, 2)
    assert pairs.tolist() == [[0, 0], [1, 0], [3, 0], [3, 1], [3, 2]]


def test_help_describes_shapes_and_dtypes():
    text = pydoc.render_doc(kk.chunk_kda_bwd_wy_dqkg_fused)
    for needle in ("Parameters", "Returns", "[B, T, H, K]", "[B, NT, HV, K, V]", "float32",
                   "state_v_first", "cu_seqlens", "Raises"):
        assert needle in text
