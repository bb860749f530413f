"""The package around the operators: import without libkda or torch, where libkda is looked for,
the check of the library's C ABI version and operator tables against the package's signatures,
version, backends, chunk_indices, signatures and help text."""

import dataclasses
import inspect
import os
import pydoc
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kda_kernels as kk
from kda_kernels import _abi, _library, _locate, _signatures

PACKAGE_PARENT = str(Path(kk.__file__).resolve().parents[1])


def run_python(code, **env):
    # The library search is what these check: the torch op's choice is left to its default
    # (tools/run-tests.sh insists on the compiled op, which a missing libkda cannot give).
    inherited = {k: v for k, v in os.environ.items() if k != "KDA_TORCH_OP"}
    environment = {**inherited, "PYTHONPATH": PACKAGE_PARENT, **env}
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


def test_help_of_intra_describes_shapes_and_dtypes():
    text = pydoc.render_doc(kk.chunk_kda_bwd_intra)
    for needle in ("Parameters", "Returns", "Raises", "[B, T, H, K]", "[B, T, HV, BT]",
                   "float32", "safe_gate", "cu_seqlens", "kernel", "log2"):
        assert needle in text


@pytest.mark.parametrize("sig", _signatures.SIGNATURES, ids=lambda s: s.op_name)
def test_public_functions_have_the_signature_tables_parameters(sig):
    """The public function's parameters are the signature's (fla's order and defaults), then the
    keyword-only backend and kernel."""
    params = inspect.signature(getattr(kk, sig.fla_name)).parameters
    expected = [(n, inspect.Parameter.empty if d is _signatures.REQUIRED else d)
                for n, d in sig.parameters()]
    assert [(p.name, p.default) for p in params.values()][: len(expected)] == expected
    assert [(p.name, p.default, p.kind) for p in list(params.values())[len(expected):]] == [
        ("backend", None, inspect.Parameter.KEYWORD_ONLY),
        ("kernel", "auto", inspect.Parameter.KEYWORD_ONLY)]


def test_signature_tables():
    wy, intra = _signatures.BY_NAME["chunk_bwd_wy_dqkg"], _signatures.BY_NAME["chunk_bwd_intra"]
    assert [a.name for a in intra.inputs] == ["q", "k", "g", "beta", "dAqk", "dAkk", "dq", "dk",
                                              "db", "dg"]
    assert [a.returned_as for a in wy.outputs] == ["dq", "dk", "dv", "db", "dg", "dA"]
    assert [a.returned_as for a in intra.outputs] == ["dq", "dk", "db", "dg"]
    assert _signatures.BY_FLA_NAME["chunk_kda_bwd_intra"] is intra
    # The struct sizes the C headers give (LP64), in KDA_OPS order: a 32-byte header
    # (abi_version, has_scale, scale, chunk_size, state_v_first) + 19 kda_tensors of 120 bytes, a
    # 24-byte header (abi_version, chunk_size, safe_gate) + 16 kda_tensors, a 56-byte header
    # (abi_version, has_scale, scale, chunk_size, five int32 switches, has_lower_bound,
    # lower_bound) + 22 kda_tensors, a 32-byte header (abi_version, has_scale, scale,
    # state_v_first, chunk_size) + 14 kda_tensors, a 24-byte header (abi_version,
    # output_final_state, chunk_size, save_new_value, state_v_first) + 11 kda_tensors, a 48-byte
    # header (abi_version, chunk_size, four int32 switches, has_lower_bound, lower_bound) + 18
    # kda_tensors.
    assert [layout.size for layout in _abi.LAYOUTS] == [32 + 19 * 120, 24 + 16 * 120,
                                                        56 + 22 * 120, 32 + 14 * 120,
                                                        24 + 11 * 120, 48 + 18 * 120]
    assert [o.name for o in wy.options] == ["scale", "chunk_size", "state_v_first"]
    assert wy.params == (("scale", None), ("cu_seqlens", None), ("chunk_size", 64),
                         ("chunk_indices", None), ("state_v_first", False))
    assert intra.params == (("cu_seqlens", None), ("chunk_indices", None), ("chunk_size", 64),
                            ("safe_gate", False))
    assert [a.shape for a in wy.outputs][5] == (("q", 0), ("q", 1), ("v", 2), ("A", 3))
    # The reverse scan's outputs have extents no input has: named in its rules.
    dhu = _signatures.BY_FLA_NAME["chunk_gated_delta_rule_bwd_dhu"]
    assert [a.shape for a in dhu.outputs][:2] == [
        (("q", 0), ("chunks", None), ("w", 2), ("state_rows", None), ("state_cols", None)),
        (("seqs", None), ("w", 2), ("state_rows", None), ("state_cols", None))]
    # The forward scan's first tensor is k (its anchor: X and the device), and fla's switches are
    # options with fla's defaults.
    fwd_h = _signatures.BY_FLA_NAME["chunk_gated_delta_rule_fwd_h"]
    assert [a.name for a in fwd_h.inputs] == ["k", "w", "u"]
    assert fwd_h.params == (("g", None), ("gk", None), ("initial_state", None),
                            ("output_final_state", False), ("chunk_size", 64),
                            ("save_new_value", True), ("state_v_first", False),
                            ("cu_seqlens", None), ("chunk_indices", None))
    assert [a.returned_as for a in fwd_h.outputs] == ["h", "v_new", "final_state"]
    assert [a.shape for a in fwd_h.outputs] == [
        (("k", 0), ("chunks", None), ("w", 2), ("state_rows", None), ("state_cols", None)),
        (("u", 0), ("u", 1), ("u", 2), ("u", 3)),
        (("seqs", None), ("w", 2), ("state_rows", None), ("state_cols", None))]
    assert fwd_h.inputs[1].dtypes == "float16, bfloat16 or float32 (the dtype of k)"


def test_the_library_tables_match_the_signatures():
    lib = _library.library()
    assert _library.table_mismatches(lib.dll, _abi.LAYOUTS) == []
    assert lib.dll.kda_abi_version() == _abi.ABI_VERSION == 3


def _replace_arg(sig, index, **changes):
    args = list(sig.args)
    args[index] = dataclasses.replace(args[index], **changes)
    return dataclasses.replace(sig, args=tuple(args))


INTRA = _signatures.BY_NAME["chunk_bwd_intra"]
WRONG_TABLES = {
    "renamed argument": (_replace_arg(INTRA, 4, name="dA_qk"),
                         "argument 4 is 'dAqk' (input, type 4, rank 4, rule '', at byte 504) in the "
                         "library, 'dA_qk' (input, type 4, rank 4, rule '', at byte 504) here"),
    "wrong rank": (_replace_arg(INTRA, 3, rank=4), "argument 3 is 'beta' (input, type 2, rank 3"),
    "wrong role": (_replace_arg(INTRA, 10, role=_signatures.ROLE_INPUT),
                   "'cu_seqlens' (optional, type 5, rank 1"),
    "swapped arguments": (dataclasses.replace(INTRA, args=(INTRA.args[1], INTRA.args[0])
                                              + INTRA.args[2:]),
                          "argument 0 is 'q' (input, type 0, rank 4, rule '', at byte 24) in the "
                          "library, 'k'"),
    "missing argument": (dataclasses.replace(INTRA, args=INTRA.args[:-1]),
                         "has 18 rows in the library, 17 here"),
    "longer header": (dataclasses.replace(INTRA, header=INTRA.header + (("extra", "q"),)),
                      "problem struct is 1944 bytes in the library, 1952 here"),
    "other operator": (dataclasses.replace(INTRA, op_name="chunk_fwd"),
                       "operator 1 is 'chunk_bwd_intra' in the library, 'chunk_fwd' here"),
}


@pytest.mark.parametrize("what", WRONG_TABLES)
def test_a_wrong_table_is_a_library_error(what):
    sig, message = WRONG_TABLES[what]
    layouts = [_abi.LAYOUTS[0], _abi.ProblemLayout(sig)]
    with pytest.raises(kk.LibraryError, match="does not match this kda_kernels' operator tables"
                       ) as info:
        _library.Library(kk.library_path(), layouts=layouts)
    assert message in str(info.value)


def test_wrong_kernel_names_are_a_library_error(monkeypatch):
    monkeypatch.setattr(_abi, "KERNELS", {"auto": 0, "simt": 1, "tensor_core": 2})
    with pytest.raises(kk.LibraryError, match="kernel 2 is 'sm80_mma' in the library, "
                       "'tensor_core' here"):
        _library.Library(kk.library_path())


def test_another_abi_version_is_a_library_error(monkeypatch):
    monkeypatch.setattr(_abi, "ABI_VERSION", 4)
    with pytest.raises(kk.LibraryError, match="has C ABI version 3, but this kda_kernels speaks "
                       "version 4"):
        _library.Library(kk.library_path())


def test_a_wrong_table_fails_the_first_call(tmp_path):
    """At load time: a package whose table differs from the library's refuses the library on
    its first call, with the LibraryError saying where they differ. (With the compiled torch op
    present, importing the package loads libkda already, before this test can change a table:
    KDA_TORCH_OP=python keeps the load for the first call; test_torch_op.py checks the
    import-time load.)"""
    code = (
        "import dataclasses, numpy as np\n"
        "from kda_kernels import _abi, _signatures\n"
        "sig = _signatures.BY_NAME['chunk_bwd_wy_dqkg']\n"
        "bad = dataclasses.replace(sig, args=sig.args[:5] + (dataclasses.replace(sig.args[5], "
        "rank=4),) + sig.args[6:])\n"
        "_abi.LAYOUTS = (_abi.ProblemLayout(bad), _abi.LAYOUTS[1])\n"
        "import kda_kernels as kk\n"
        "try:\n"
        "    kk.chunk_indices(np.array([0, 4]), 16)\n"
        "except kk.LibraryError as e:\n"
        "    print('ERROR', e)\n"
    )
    result = run_python(code, KDA_LIBRARY=str(kk.library_path()), KDA_TORCH_OP="python")
    assert result.returncode == 0, result.stderr
    assert "ERROR" in result.stdout
    assert "operator chunk_bwd_wy_dqkg argument 5 is 'beta' (input, type 2, rank 3" in result.stdout
