"""dev/ab-builds.sh, the part of the GPU A/B scripts that decides what comes back from a device
call: only summary.txt and logs.tar.gz under $OUT (a call brings back 8 files, and a run that
left more lost every result), steps skipped with a line once the deadline
(KDA_AB_SECONDS) is near, and the logs packed on exit or SIGTERM. Runs without a GPU."""

import os
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

DEV = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def workdir(tmp_path):
    """A checkout-like folder: dev/ab-builds.sh and an empty .carry (no carried build)."""
    root = tmp_path / "repo"
    (root / "dev").mkdir(parents=True)
    shutil.copy(DEV / "ab-builds.sh", root / "dev" / "ab-builds.sh")
    (root / ".carry").mkdir()
    return root


def run_script(root, out, body, seconds, **kwargs):
    env = dict(os.environ, OUT=str(out), KDA_AB_SECONDS=str(seconds))
    script = ". dev/ab-builds.sh\nab_builds t\n" + body
    return subprocess.Popen(["bash", "-c", script], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kwargs)


def packed_logs(out):
    with tarfile.open(out / "t" / "logs.tar.gz") as tar:
        return sorted(Path(name).name for name in tar.getnames())


def test_only_the_summary_and_the_archive_come_back(tmp_path):
    root = workdir(tmp_path)
    out = tmp_path / "out"
    body = ('echo "step one done" >>"$summary"\n'
            'echo log-a >"$logs/a.log"\n'
            'echo log-b >"$logs/b.log"\n')
    proc = run_script(root, out, body, 100)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, stdout
    assert sorted(p.name for p in (out / "t").iterdir()) == ["logs.tar.gz", "summary.txt"]
    assert packed_logs(out) == ["a.log", "b.log"]
    # The summary is printed last, for the call's output tail.
    assert "step one done" in stdout


def test_a_step_past_the_deadline_is_skipped_with_a_line(tmp_path):
    root = workdir(tmp_path)
    out = tmp_path / "out"
    body = ('ab_fits 1 "short step" && echo "short step ran" >>"$summary"\n'
            'ab_fits 100 "long step" && echo "long step ran" >>"$summary"\n')
    proc = run_script(root, out, body, 10)
    stdout, _ = proc.communicate(timeout=60)
    summary = (out / "t" / "summary.txt").read_text()
    assert "short step ran" in summary
    assert "long step ran" not in summary
    assert "skipped (deadline, KDA_AB_SECONDS=10): long step" in summary


def test_sigterm_still_packs_the_logs_and_says_so(tmp_path):
    root = workdir(tmp_path)
    out = tmp_path / "out"
    body = ('echo "before the kill" >>"$summary"\n'
            'echo partial >"$logs/partial.log"\n'
            'echo ready\n'
            'sleep 30 & wait\n'
            'echo "after the kill" >>"$summary"\n')
    proc = run_script(root, out, body, 100)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=30)
    assert proc.returncode == 143, stdout
    summary = (out / "t" / "summary.txt").read_text()
    assert "before the kill" in summary
    assert "killed after" in summary
    assert "after the kill" not in summary
    assert packed_logs(out) == ["partial.log"]


def test_time_left_counts_down(tmp_path):
    root = workdir(tmp_path)
    out = tmp_path / "out"
    started = time.monotonic()
    proc = run_script(root, out, "sleep 1\nab_time_left\n", 50)
    stdout, _ = proc.communicate(timeout=60)
    left = int(stdout.strip().splitlines()[0])
    assert 45 <= left <= 49, stdout
    assert time.monotonic() - started < 30


def test_every_build_is_tested_before_any_sanitizer_run(tmp_path):
    """A tight deadline must drop sanitizer runs, not an experiment's tests; a build whose tests
    did not pass is named UNTESTED (fake test binary and compute-sanitizer, no GPU)."""
    root = workdir(tmp_path)
    out = tmp_path / "out"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "libkda.so.0.2").write_text("")
    fake_test = bin_dir / "test_fake"
    fake_test.write_text('#!/usr/bin/env bash\n'
                         'case "$LD_LIBRARY_PATH" in\n'
                         '  */exp) echo "[  FAILED  ] 1 test" ;;\n'
                         '  *) echo "[  PASSED  ] 3 tests." ;;\n'
                         'esac\n')
    sanitizer = bin_dir / "compute-sanitizer"
    sanitizer.write_text('#!/usr/bin/env bash\necho "========= ERROR SUMMARY: 0 errors"\n')
    for script in (fake_test, sanitizer):
        script.chmod(0o755)
    env = dict(os.environ, OUT=str(out), KDA_AB_SECONDS="100",
               PATH=f"{bin_dir}:{os.environ['PATH']}")
    script = (f". dev/ab-builds.sh\nab_builds t exp={tmp_path / 'exp'}\n"
              f"ab_check_builds {fake_test} 30 'Subset.*'\n")
    proc = subprocess.run(["bash", "-c", script], cwd=root, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = (out / "t" / "summary.txt").read_text().splitlines()
    tests = [i for i, line in enumerate(lines) if ": test_fake rc" in line]
    sanitizers = [i for i, line in enumerate(lines) if "check rc" in line]
    assert len(tests) == 2 and len(sanitizers) == 4, lines
    assert max(tests) < min(sanitizers), lines
    assert "UNTESTED: exp (test_fake did not pass or did not run)" in lines
    assert not any(line.startswith("UNTESTED: base") for line in lines), lines


@pytest.mark.parametrize("tests, sanitizers", [("0", ""), ("1", ""), ("1", "memcheck"),
                                               ("1", "memcheck,racecheck")])
def test_the_switches_pick_tests_and_sanitizers(tmp_path, tests, sanitizers):
    """KDA_AB_TESTS=0 (timings only: diagnostic builds) names every build UNTESTED and runs no
    test; KDA_AB_SANITIZERS names the tools (empty: none)."""
    root = workdir(tmp_path)
    out = tmp_path / "out"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_test = bin_dir / "test_fake"
    fake_test.write_text('#!/usr/bin/env bash\necho "[  PASSED  ] 3 tests."\n')
    sanitizer = bin_dir / "compute-sanitizer"
    sanitizer.write_text('#!/usr/bin/env bash\necho "========= ERROR SUMMARY: 0 errors"\n')
    for script in (fake_test, sanitizer):
        script.chmod(0o755)
    env = dict(os.environ, OUT=str(out), KDA_AB_SECONDS="100", KDA_AB_TESTS=tests,
               KDA_AB_SANITIZERS=sanitizers, PATH=f"{bin_dir}:{os.environ['PATH']}")
    script = f". dev/ab-builds.sh\nab_builds t\nab_check_builds {fake_test} 30 'Subset.*'\n"
    proc = subprocess.run(["bash", "-c", script], cwd=root, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = (out / "t" / "summary.txt").read_text().splitlines()
    test_lines = [line for line in lines if ": test_fake rc" in line]
    tool_lines = [line for line in lines if " rc " in line and ": test_fake" not in line]
    if tests == "0":
        assert test_lines == [], lines
        assert "UNTESTED: base (KDA_AB_TESTS=0: timings only)" in lines
    else:
        assert len(test_lines) == 1 and not any(line.startswith("UNTESTED") for line in lines)
    tools = sanitizers.replace(",", " ").split()  # space- or comma-separated
    assert [line.split(":")[1].split()[0] for line in tool_lines] == tools, lines


@pytest.mark.parametrize("spec", ["missing=DIR/none.tar.xz", "empty=DIR"])
def test_a_build_that_is_not_there_stops_the_run(tmp_path, spec):
    """A missing NAME=FILE.tar.xz (or a folder without the library) must not fall back to the
    carried build, whose rows would then read as the experiment's."""
    root = workdir(tmp_path)
    out = tmp_path / "out"
    (tmp_path / "empty").mkdir()
    spec = spec.replace("DIR", str(tmp_path / "empty") if spec.startswith("empty") else
                        str(tmp_path))
    env = dict(os.environ, OUT=str(out), KDA_AB_SECONDS="100")
    script = f'. dev/ab-builds.sh\nab_builds t {spec}\necho "went on" >>"$summary"\n'
    proc = subprocess.run(["bash", "-c", script], cwd=root, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    summary = (out / "t" / "summary.txt").read_text()
    assert "no libkda.so.0.2 there" in summary
    assert "went on" not in summary


def test_kernel_times_take_the_median_of_ncu_in_microseconds(tmp_path):
    """ab_kda_kernel_times reads ncu's gpu__time_duration lines (any time unit) and writes one
    median per build and label (fake ncu, no GPU)."""
    root = workdir(tmp_path)
    out = tmp_path / "out"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ncu = bin_dir / "ncu"
    ncu.write_text('#!/usr/bin/env bash\n'
                   'echo "    gpu__time_duration.sum      usecond      240.50"\n'
                   'echo "    gpu__time_duration.sum      nsecond      1,000,000"\n'
                   'echo "    gpu__time_duration.sum      msecond      0.2"\n')
    ncu.chmod(0o755)
    op = f"abtest{os.getpid()}"
    inputs = Path(f"/tmp/{op}-kimi.safetensors")
    inputs.write_text("")
    try:
        env = dict(os.environ, OUT=str(out), KDA_AB_SECONDS="100",
                   PATH=f"{bin_dir}:{os.environ['PATH']}")
        script = f". dev/ab-builds.sh\nab_builds t\nab_kda_kernel_times {op} gate_params 3 kimi\n"
        proc = subprocess.run(["bash", "-c", script], cwd=root, env=env, capture_output=True,
                              text=True, timeout=60)
    finally:
        inputs.unlink()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = (out / "t" / "summary.txt").read_text().splitlines()
    assert "base kimi gate_params kernel median 240.50 us of 3 (rc 0)" in lines, lines
