"""`pip install ./python` the way a user on a machine without network does it (no index, no build
isolation), and `pip install -e` for development: each installed copy is then imported in a
fresh interpreter, away from the checkout, and must load the right libkda and compute what the
checkout's package computes, for both operators. The README's one command runs in a fresh
virtual environment, as written (offline), once the prerequisites it lists are there, and
without them fails with a message that names them; on a copy of the checkout it builds
everything with CMake and, after a source change, rebuilds. Needs pip, setuptools >= 64 and
wheel (or setuptools >= 70.1), as `tools/run-tests.sh` installs them, and for the build cmake
and the C++ build's packages; no GPU, no network."""

import json
import os
import re
import shlex
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import numpy as np
import pytest

import kda_kernels as kk
from kda_kernels import _locate
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
                  "torch_op": kda_kernels.torch_op_backend(detail=True),
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
    assert result.returncode == 0, _failure_text(result)
    return result.stdout


def _probe(python, cwd, env):
    result = subprocess.run([str(python), "-c", PROBE, str(REPO_ROOT / "tests" / "python")],
                            capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    assert result.returncode == 0, _failure_text(result)
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
    # The compiled torch ops beside the bundled library are bundled with it.
    torch_ops = [p.name for p in _locate.torch_op_files(library.parent)]
    assert [p.name for p in _locate.torch_op_files(lib_dir)] == torch_ops, log
    # Imported from an unrelated folder with only the install on the path.
    found = _probe(sys.executable, tmp_path, _clean_env(PYTHONPATH=str(site)))
    assert Path(found["package"]).resolve().parent == (site / "kda_kernels").resolve()
    assert Path(found["library"]).resolve().parent == lib_dir.resolve()
    assert found["version"] == kk.__version__
    assert found["outputs"] == _expected_outputs()
    # With torch, the installed package uses the compiled op it bundles (built for this torch),
    # bound to the bundled libkda.
    wanted = os.environ.get("KDA_TORCH_OP") or "auto"
    if kk.torch_op_backend() is not None and wanted != "python":
        from kda_kernels import _torch_ext

        name = _locate.torch_op_file_name(_torch_ext.torch_release())
        if name in torch_ops:
            assert found["torch_op"] == f"compiled ({lib_dir / name})", found["torch_op"]


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


def _fresh_venv(env_dir, parent_packages):
    """A new virtual environment with pip (ensurepip: offline) and what the Python version's
    ensurepip brings (setuptools 65 on 3.11 and older, nothing more on 3.12+). With
    `parent_packages`, this interpreter's site-packages are added to it by a .pth file: they
    stand in for the README's `pip install numpy "setuptools>=70.1"` step, which needs a
    network or a wheelhouse (system_site_packages alone is not enough where this interpreter is
    itself a virtual environment: it exposes the base installation's packages, not this one's)."""
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    if parent_packages:
        venv_site = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True).stdout.strip()
        ours = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
        pth = Path(venv_site, "kda_test_parent_site.pth")
        pth.write_text("\n".join(dict.fromkeys(ours)) + "\n")
    return python


def _readme_install_command():
    """The README's one install command (`pip install ...`, the only one in a sh block), as its
    words."""
    readme = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.S)
    commands = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()
                if line.startswith("pip install")]
    assert len(commands) == 1, f"README.md: expected one pip command, found {commands}"
    words = shlex.split(commands[0])
    assert words[-1] == "./python" and "--no-build-isolation" in words, words
    return words


def _run_readme_command(python, env, package_dir=PACKAGE_DIR):
    """The README's command, offline (PIP_NO_INDEX, as `--no-index` would), by `python`'s pip
    (`pip` of the README is the environment's pip; ./python is the checkout's package folder)."""
    words = _readme_install_command()
    args = [str(python), "-m", *words[:-1], str(package_dir)]
    return subprocess.run(args, capture_output=True, text=True, env=dict(env, PIP_NO_INDEX="1"),
                          cwd=package_dir.parent, timeout=900)


@needs_build_tools
def test_readme_offline_install_in_a_fresh_venv(tmp_path):
    # The prerequisites present (numpy, setuptools, wheel from this interpreter), the README's
    # command as written: it resolves numpy from what is installed, builds and bundles the library.
    python = _fresh_venv(tmp_path / "venv", parent_packages=True)
    library = Path(kk.library_path()).resolve()
    result = _run_readme_command(python, _clean_env(KDA_LIBRARY=str(library)))
    assert result.returncode == 0, _failure_text(result)
    found = _probe(python, tmp_path, _clean_env())
    assert Path(found["library"]).resolve().parent.name == "lib"
    assert Path(found["package"]).resolve().parent.parent != PACKAGE_DIR.resolve()
    assert found["outputs"] == _expected_outputs()


@needs_build_tools
def test_readme_offline_install_names_missing_prerequisites(tmp_path):
    # A fresh virtual environment and nothing else: the README's command fails (no network, no
    # build tools), and what it prints names the prerequisites the README lists, not a bare
    # "No module named 'wheel'" from setup.py's imports.
    python = _fresh_venv(tmp_path / "venv", parent_packages=False)
    has = subprocess.run([str(python), "-c", "import setuptools; print(setuptools.__version__)"],
                         capture_output=True, text=True)
    result = _run_readme_command(python, _clean_env())
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    if has.returncode != 0:
        # No setuptools at all (Python 3.12+): setup.py never runs; pip names the backend.
        assert "setuptools" in output, output[-3000:]
        return
    version = tuple(int(x) for x in re.findall(r"\d+", has.stdout)[:2])
    if version >= (70, 1):
        pytest.skip(f"this venv's setuptools {has.stdout.strip()} builds wheels by itself")
    assert "No module named 'wheel'" not in output, output[-3000:]
    assert "kda-kernels: building the package needs setuptools >= 70.1" in output, output[-3000:]
    assert "numpy" in output, output[-3000:]


def _failure_text(result):
    """What a failed build says: every CMake error with the lines after it (they sit in the
    middle of pip's output), then the output's ends."""
    text = result.stdout + result.stderr
    lines = text.splitlines()
    errors = []
    for i, line in enumerate(lines):
        if "CMake Error" in line or "error:" in line:
            errors.extend(lines[i:i + 12])
    return "\n".join(errors[:200]) + "\n...\n" + result.stdout[-2000:] + result.stderr[-2000:]


def _cmake_finds_the_build_dependencies():
    """Whether CMake finds what configuring libkda needs (the Debian packages .ci/run installs:
    Eigen3, nlohmann_json): a GPU machine has CMake but not them."""
    import tempfile
    with tempfile.TemporaryDirectory() as scratch:
        Path(scratch, "CMakeLists.txt").write_text(
            "cmake_minimum_required(VERSION 3.25)\nproject(probe LANGUAGES NONE)\n"
            "find_package(Eigen3 3.3 REQUIRED NO_MODULE)\n"
            "find_package(nlohmann_json 3.10 REQUIRED)\n")
        return subprocess.run(["cmake", "-S", scratch, "-B", str(Path(scratch, "b"))],
                              capture_output=True).returncode == 0


needs_cmake = pytest.mark.skipif(
    shutil.which("cmake") is None or shutil.which("git") is None
    or not (REPO_ROOT / ".git").exists() or not _cmake_finds_the_build_dependencies(),
    reason="needs cmake with libkda's build dependencies (Eigen3, nlohmann_json), git and a git "
           "checkout (the build copies the tracked files)",
)


def _copy_checkout(dest):
    """The checkout's files (tracked, and untracked ones git does not ignore: a copy of a
    working tree beside an older .git, as on the GPU machines, holds files its index does not
    know), as they are here, not its builds, in `dest`."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO_ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = REPO_ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


@needs_build_tools
@needs_cmake
def test_one_command_builds_everything_and_rebuilds_after_a_change(tmp_path):
    """The README's one command, offline, in a fresh virtual environment holding this
    interpreter's packages (torch among them where it is installed), on a copy of the checkout:
    it builds libkda (CPU-only here through CMAKE_ARGS, to bound the test's time) and, with
    torch, the compiled op for that torch, and installs the package bundling both. After a
    change to a library source the same command rebuilds, and the installed library is the
    changed one: nothing is bundled as found."""
    checkout = tmp_path / "checkout"
    _copy_checkout(checkout)
    python = _fresh_venv(tmp_path / "venv", parent_packages=True)
    env = _clean_env(CMAKE_ARGS="-DKDA_ENABLE_CUDA=OFF")
    result = _run_readme_command(python, env, checkout / "python")
    assert result.returncode == 0, _failure_text(result)
    found = _probe(python, tmp_path, _clean_env())
    lib_dir = Path(found["library"]).resolve().parent
    assert lib_dir.name == "lib" and checkout not in lib_dir.parents
    assert found["version"] == kk.__version__
    assert found["outputs"] == _expected_outputs()
    has_torch = subprocess.run([str(python), "-c", "import torch"], env=_clean_env(),
                               capture_output=True).returncode == 0
    if has_torch and os.environ.get("KDA_TORCH_OP") != "python":
        assert found["torch_op"].startswith(f"compiled ({lib_dir}/libkda_torch-"), found

    # A source change: kda_version() now says so. The same command rebuilds and installs it.
    c_api = checkout / "src" / "core" / "c_api.cpp"
    text = c_api.read_text()
    assert "return kda::kVersionString;" in text
    c_api.write_text(text.replace("return kda::kVersionString;", 'return "changed-here";'))
    result = _run_readme_command(python, env, checkout / "python")
    assert result.returncode == 0, _failure_text(result)
    assert _probe(python, tmp_path, _clean_env())["version"] == "changed-here"
