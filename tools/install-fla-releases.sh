#!/usr/bin/env bash
# Installs every fla release of tests/python/fla_releases.txt into DEST/<version>/ (a --target
# folder each, so that the releases sit side by side; use one with PYTHONPATH=DEST/<version>) and
# prints the folders, colon-separated, for KDA_FLA_TREES (tools/run-tests.sh):
#   tools/install-fla-releases.sh DEST [PYTHON]
# A folder that already holds its release is kept. fla's dependencies (torch, triton, einops)
# must be in PYTHON's environment.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:?usage: tools/install-fla-releases.sh DEST [PYTHON]}
python=${2:-python3}
trees=()
while read -r version; do
  case "$version" in '' | '#'*) continue ;; esac
  tree=$dest/$version
  if [ ! -f "$tree/fla/layers/kda.py" ]; then
    rm -rf "$tree"
    "$python" -m pip install -q --disable-pip-version-check --no-cache-dir --no-deps \
      --target "$tree" "fla-core==$version" "flash-linear-attention==$version" >&2
  fi
  trees+=("$(cd "$tree" && pwd)")
done <tests/python/fla_releases.txt
(IFS=:; echo "${trees[*]}")
