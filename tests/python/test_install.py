"""`pip install ./python` the way a user on a machine without network does it (no index, no build
isolation), and `pip install -e` for development: each installed copy is then imported in a
fresh interpreter, away from the checkout, and must load the right libkda and compute what the
checkout's package computes, for both operators. Needs pip, setuptools >= 64 and wheel (or setuptools >= 70.1), as
`tools/run-tests.sh` installs them; no torch, no GPU."""

import json
import os
import site
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import numpy as np
import pytest

import kda_kernels as kk
from kda_testing import REPO_ROOT, library_loads, make_intra_problem, make_problem

PACKAGE_DIR = REPO_ROOT / "python"

# Runs in the installed copy's interpreter: where the package and the library came from, and the
# outputs of one fixed problem on cpu-ref.
PROBE = r"""
import json, sys
import numpy as np
import kda_kernels
sys.path.insert(0, sys.argv[1])
from kda_testing import make_intra_problem, make_problem
inputs, options = make_problem(seed=3, T=40, H=2, K=16, V=8, BT=16)
out = kda_kernels.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options, backend="cpu-ref")
inputs, options = make_intra_problem(seed=3, T=40, H=2, K=16, BT=16, unread="zero")
out += kda_kernels.chunk_kda_bwd_intra(**inputs, **options, backend="cpu-ref")
print(json.dumps({"package": kda_kernels.__file__, "library": str(kda_kernels.library_path()),
                  "version": kda_kernels.__version__,
                  "outputs": [np.asarray(o, dtype=np.float64).ravel().tolist() for o in out]}))
"""


needs_build_tools = pytest.mark.skipif(
    not library_loads()
    or subprocess.run([sys.executable, "-c", "import setuptools, wheel"],
                      capture_output=True).returncode != 0,
    reason="needs a built libkda, setuptools and wheel (tools/run-tests.sh installs them)",
)


def _clean_env(**extra):
    """The environment of a user's shell: no KDA_LIBRARY, nothing of the checkout on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("KDA_LIBRARY", "PYTHONPATH")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def _pip(python, *args, env):
    result = subprocess.run([str(python), "-m", "pip", "install", "--no-index",
                             "--no-build-isolation", "--no-deps", *args],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def _probe(python, cwd, env):
    result = subprocess.run([str(python), "-c", PROBE, str(REPO_ROOT / "tests" / "python")],
                            capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _expected_outputs():
    inputs, options = make_problem(seed=3, T=40, H=2, K=16, V=8, BT=16)
    out = kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options, backend="cpu-ref")
    inputs, options = make_intra_problem(seed=3, T=40, H=2, K=16, BT=16, unread="zero")
    out += kk.chunk_kda_bwd_intra(**inputs, **options, backend="cpu-ref")
    assert len(out) == 10
    return [np.asarray(o, dtype=np.float64).ravel().tolist() for o in out]


@needs_build_tools
def test_pip_install_offline_bundles_the_library(tmp_path):
    site = tmp_path / "site"
    library = Path(kk.library_path()).resolve()
    # Bundles the library KDA_LIBRARY names (setup.py's first choice), as on the GPU machine.
    log = _pip(sys.executable, "--target", str(site), str(PACKAGE_DIR),
               env=_clean_env(KDA_LIBRARY=str(library)))
    lib_dir = site / "kda_kernels" / "lib"
    assert list(lib_dir.glob("libkda*")), log
    # Imported from an unrelated folder with only the install on the path.
    found = _probe(sys.executable, tmp_path, _clean_env(PYTHONPATH=str(site)))
    assert Path(found["package"]).resolve().parent == (site / "kda_kernels").resolve()
    assert Path(found["library"]).resolve().parent == lib_dir.resolve()
    assert found["version"] == kk.__version__
    assert found["outputs"] == _expected_outputs()


@needs_build_tools
def test_pip_install_editable_uses_the_checkout(tmp_path):
    # A virtual environment that sees this interpreter's packages (numpy, setuptools, wheel, pip),
    # so that nothing needs the network. system_site_packages alone is not enough where this
    # interpreter is itself a virtual environment (the GPU machine's python3 is): it exposes the
    # base installation's packages, not this one's, so a .pth file adds this one's.
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    venv_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip()
    ours = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    Path(venv_site, "kda_test_parent_site.pth").write_text("\n".join(dict.fromkeys(ours)) + "\n")
    _pip(python, "-e", str(PACKAGE_DIR), env=_clean_env())
    found = _probe(python, tmp_path, _clean_env())
    # The checkout's sources and, with no KDA_LIBRARY and nothing bundled, a build in the checkout.
    assert Path(found["package"]).resolve().parent == (PACKAGE_DIR / "kda_kernels").resolve()
    assert REPO_ROOT.resolve() in Path(found["library"]).resolve().parents
    assert found["outputs"] == _expected_outputs()
