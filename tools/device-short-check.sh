#!/usr/bin/env bash
# The short GPU check, for a session with only a few minutes of device time left: the items the
# long checks (tools/device-check.sh, tools/device-python-bench.sh) cover that matter most for
# the open issues, each under a timeout cut to one overall deadline:
#   1. `pip install ./python` offline (no index, no build isolation) into a fresh target, bundling
#      the carried library, and one run of the op on the GPU through that installed copy;
#   2. every golden file through `kda run --check --backend cuda`, and `kda run` without
#      --backend on the GPU machine (it must pick cuda): tools/device-check.sh --parts golden;
#   3. the C++ CUDA-graph capture-and-replay test;
#   4. the Python GPU suite (without the fla-dependent tests) against the installed package, with
#      whatever time is left.
# Needs .carry (tools/stage-device-carry.sh), carried. Writes logs and summary.txt under $OUT and
# prints the summary last.
#   tools/device-short-check.sh [SECONDS]   (the deadline, default 95)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:?set OUT to the folder for logs}
. tools/deadline.sh
deadline_in "${1:-95}"
summary="$out/summary.txt"
: >"$summary"
row() { printf '%-44s %s  [%ss]\n' "$1" "$2" "$SECONDS" | tee -a "$summary" >/dev/null; }
verdict() { [ "$1" -eq 0 ] && echo PASS || echo "FAIL (rc $1)"; }
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export KDA_GOLDEN_DIR=$PWD/.carry/golden
build=$PWD/.carry/build
{
  date -u
  nvidia-smi -L
  nvcc --version | tail -1
  python3 -m pip --version
} >"$out/env.txt" 2>&1

# 1. The package as a user installs it here: offline, into a fresh folder, outside the checkout.
site=/tmp/kda-site
rm -rf "$site"
timeout "$(left 40)" env KDA_LIBRARY="$build/src/libkda.so" python3 -m pip install \
  --no-build-isolation --no-index --no-deps --target "$site" ./python >"$out/pip.log" 2>&1
prc=$?
row "pip install ./python --no-index" "$(verdict $prc)"
# From /tmp, with only the install on the path: the checkout's python/ cannot be what imports.
(cd /tmp && timeout "$(left 30)" env -u KDA_LIBRARY PYTHONPATH="$site" python3 -c '
import torch, kda_kernels
print("kda_kernels from", kda_kernels.__file__)
print("libkda from", kda_kernels.library_path())
B, T, H, K, V, BT = 1, 256, 2, 64, 64, 64
dev = "cuda"
g = torch.Generator(device=dev).manual_seed(0)
r = lambda *s, dt=torch.bfloat16: torch.randn(*s, device=dev, generator=g).to(dt)
NT = T // BT
q, k = r(B, T, H, K), r(B, T, H, K)
v, v_new, do, dv = r(B, T, H, V), r(B, T, H, V), r(B, T, H, V), r(B, T, H, V)
gk = -torch.rand(B, T, H, K, device=dev, generator=g).cumsum(1) * 0.05
beta = torch.rand(B, T, H, device=dev, generator=g)
A = r(B, T, H, BT) * 0.1
h, dh = r(B, NT, H, K, V, dt=torch.float32), r(B, NT, H, K, V, dt=torch.float32)
outs = kda_kernels.chunk_kda_bwd_wy_dqkg_fused(q=q, k=k, v=v, v_new=v_new, g=gk, beta=beta, A=A,
                                                h=h, do=do, dh=dh, dv=dv, scale=K ** -0.5,
                                                chunk_size=BT)
torch.cuda.synchronize()
ok = all(bool(torch.isfinite(o).all()) for o in outs)
print("outputs", [tuple(o.shape) for o in outs], "finite", ok)
raise SystemExit(0 if ok else 1)
') >"$out/pip.log.run" 2>&1
irc=$?
cat "$out/pip.log.run" >>"$out/pip.log"
rm -f "$out/pip.log.run"
row "installed package runs the op on cuda" "$(verdict $irc)"

# 2. The command-line tool: the golden files, then the default backend with a GPU present (the
#    golden part of the full check, its rows appended to this summary).
timeout "$(left 90)" tools/device-check.sh --build "$build" --golden "$KDA_GOLDEN_DIR" \
  --out "$out/golden" --parts golden >/dev/null 2>&1
cat "$out/golden/summary.txt" >>"$summary" 2>/dev/null ||
  row "device-check.sh --parts golden" "FAIL: no summary (timed out?)"
rm -f "$out/golden/env.txt"  # the same as ours; the device tool brings back 8 files at most

# 3. The C++ graph test.
export LD_LIBRARY_PATH="$build/src:${LD_LIBRARY_PATH:-}"
timeout "$(left 20)" "$build/tests/test_cuda" --gtest_color=no \
  --gtest_filter='Cuda.GraphCapture*' >"$out/graph.log" 2>&1
grc=$?
gpassed=$(grep -cE '^\[       OK \] Cuda.GraphCapture' "$out/graph.log")
row "Cuda.GraphCapture* (C++)" "$([ $grc -eq 0 ] && [ "$gpassed" -ge 1 ] && echo PASS || echo FAIL):\
 $gpassed ran and passed, rc $grc"

# 4. The Python GPU suite against the install, with the time left.
timeout "$(left 300)" env -u KDA_LIBRARY PYTHONPATH="$site" python3 -m pytest -q -rs \
  -p no:cacheprovider -n 8 tests/python \
  --deselect tests/python/test_fla.py::test_chunk_kda_gradients_with_and_without_backend \
  --deselect tests/python/test_cuda.py::test_against_fla_triton >"$out/pytest.log" 2>&1
trc=$?
row "pytest tests/python (installed, no fla)" "$(verdict $trc): $(tail -1 "$out/pytest.log")"

echo "== summary ($(date -u +%FT%TZ))"
cat "$summary"
