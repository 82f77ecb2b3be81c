#!/usr/bin/env bash
# The model suite (decoding ms/token, the cost curve, training tokens/s and MFU) of an earlier
# commit and of this checkout, back to back on this machine, one BLAS thread each:
#
#   bash benchmarks/speed_before_after.sh BEFORE_COMMIT OUT_DIR [REPEATS]
#
# writes OUT_DIR/before-model.json (the earlier commit, run from a temporary git worktree with
# its own package on PYTHONPATH) and OUT_DIR/after-model.json (this checkout). The "after" run
# also times the readable path beside the fast one in the same process (decode_readable,
# verify_readable), the ratio that does not depend on how busy the machine was between runs.
set -euo pipefail
before=${1:?pass the earlier commit, e.g. 8ece7a9}
out=${2:?pass the output directory}
repeats=${3:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
worktree=$(mktemp -d)
trap 'git -C "$here" worktree remove --force "$worktree" >/dev/null 2>&1 || rm -rf "$worktree"' EXIT
git -C "$here" worktree add --detach "$worktree" "$before" >/dev/null
export OPENBLAS_NUM_THREADS=1
(cd "$worktree" && PYTHONPATH="$worktree" python -m minieagle bench --suite model \
  --repeats "$repeats" --out "$out/before-model.json")
(cd "$here" && PYTHONPATH="$here" python -m minieagle bench --suite model \
  --repeats "$repeats" --out "$out/after-model.json")
