#!/usr/bin/env bash
# One prepared device check (issue 16, item 5): on a machine with one CUDA GPU and no network, run
# the smoke profile of every chapter on cuda and the parity tests on cuda, in at most 8 minutes,
# printing one line per check. Needs the pinned stack with a CUDA torch build and the fetched corpora
# (make data) in LAYERLAB_CACHE (or ~/.cache/layerlab). Exit status: 0 if nothing failed.
#   PYTHON=.venv/bin/python scripts/gpu_check.sh
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
export PYTHONPATH="$PWD/lib${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TQDM_DISABLE=1
start=$(date +%s)
rc=0
# 1. every chapter's smoke run on cuda (one line each), at most 5 minutes
timeout 300 "$PY" scripts/gpu_check.py --device cuda || rc=1
# 2. the parity tests on cuda (one line per test), at most 3 minutes
timeout 180 "$PY" -m pytest -q -rA -p no:cacheprovider tests/test_cuda_parity.py 2>&1 \
  | grep -E '^(PASSED|FAILED|ERROR|SKIPPED)' | sed -E 's/^(PASSED|FAILED|ERROR|SKIPPED) /\1 parity     /'
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
echo "DONE gpu_check  $(( $(date +%s) - start )) s, exit $rc"
exit $rc
