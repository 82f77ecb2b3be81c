#!/usr/bin/env bash
# The GPU run: the CuPy tests, then the shipped target's decoding speed and cost curve and the
# decoding methods side by side, all on CuPy, with the NumPy lane of the same machine beside them.
#
#   benchmarks/gpu.sh [OUT_DIR]            on a CUDA machine with CuPy (324 s on one H200 on
#                                          2026-12-04, the methods step with its tree sizing
#                                          266 s of it; each step's limit below)
#   benchmarks/gpu.sh --dry-run [OUT_DIR]  anywhere: the same steps on NumPy at toy sizes (the
#                                          CuPy tests then skip), to check the script before a
#                                          GPU is spent on it
#
# OUT_DIR defaults to docs/results. It receives gpu-machine.txt (driver, CuPy, versions),
# gpu-tests.log (pytest of tests/test_cupy.py), gpu-cost.json and gpu-host-cost.json (vanilla
# ms/token and verification cost of N = 1..64 tokens relative to one, on CuPy and on one CPU
# thread), gpu-bench-methods.json (tau, n-alpha, speedup of every method at T = 0 and T = 1 on
# held-out and out-of-domain prompts), gpu-head-train.json (a short training run of the EAGLE-1
# and EAGLE-3 heads on CuPy: loss + backward + clipping + AdamW, s/step, tokens/s, MFU against the
# GPU's float32 matmul peak; benchmarks/head_train_step.py) and gpu-run.log (all output). Each step
# runs even when an earlier one failed; the exit status is that of the first failure.
# The package need not be installed: the script puts the repository on PYTHONPATH.
set -uo pipefail

device=gpu repeats=2 new_tokens=64 method_tokens=32 per_kind=1 cost_repeats=5
# the head training run: batch 8 x 128 positions, 7 TTT steps (the shipped heads' shape), 3 warm-up
# steps and 3 rounds of 10 timed steps per head
train_shape=(--batch 8 --seq-len 128 --ttt-steps 7 --warmup 3 --repeats 3 --steps 10)
if [[ "${1:-}" == "--dry-run" ]]; then
  device=cpu repeats=1 new_tokens=8 method_tokens=8 per_kind=1 cost_repeats=1
  train_shape=(--batch 2 --seq-len 16 --ttt-steps 2 --warmup 1 --repeats 1 --steps 2)
  shift
fi
# Each step has a time limit (seconds x GPU_LIMIT_SCALE), so one that hangs leaves time for the rest.
scale="${GPU_LIMIT_SCALE:-1}"
out="${1:-docs/results}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python="${PYTHON:-python3}"
status=0
step() {  # step NAME SECONDS LOG COMMAND...: run (at most SECONDS x scale), copy its output to
  # LOG, remember the first failure
  local name="$1" seconds=$(($2 * scale)) log="$3"
  shift 3
  echo "=== $name: $* ($(date -u +%H:%M:%S), limit $seconds s)"
  local start=$SECONDS
  timeout "$seconds" "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc after $((SECONDS - start)) s"
  if ((rc != 0 && status == 0)); then status=$rc; fi
}

{
  step machine 60 "$out/gpu-machine.txt" "$python" - <<'EOF'
import platform, numpy
print("python", platform.python_version(), "numpy", numpy.__version__)
try:
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(0)
    print("cupy", cupy.__version__, "CUDA runtime", cupy.cuda.runtime.runtimeGetVersion(),
          "driver", cupy.cuda.runtime.driverGetVersion())
    print("device", props["name"].decode(), f"{props['totalGlobalMem'] / 2**30:.0f} GiB,",
          props["multiProcessorCount"], "multiprocessors")
except Exception as error:
    print("no CuPy device:", type(error).__name__, error)
EOF
  step cupy-tests 180 "$out/gpu-tests.log" "$python" -m pytest tests/test_cupy.py -q -rs \
    -p no:cacheprovider
  step cost-curve 60 /dev/null "$python" benchmarks/real_model_cost.py --model minieagle/pretrained/small \
    --device "$device" --repeats "$cost_repeats" --new-tokens "$new_tokens" --out "$out/gpu-cost.json"
  step host-cost-curve 60 /dev/null env OPENBLAS_NUM_THREADS=1 "$python" benchmarks/real_model_cost.py \
    --model minieagle/pretrained/small --device cpu --repeats "$cost_repeats" \
    --new-tokens "$new_tokens" --out "$out/gpu-host-cost.json"
  step head-train 120 /dev/null "$python" benchmarks/head_train_step.py --device "$device" \
    "${train_shape[@]}" --out "$out/gpu-head-train.json"
  step methods 420 /dev/null "$python" -m minieagle bench --suite methods --device "$device" --prompts both \
    --prompts-per-corpus "$per_kind" --repeats "$repeats" --new-tokens "$method_tokens" \
    --out "$out/gpu-bench.json"
  echo "=== done: exit $status"
  exit "$status"
} 2>&1 | tee "$out/gpu-run.log"
exit "${PIPESTATUS[0]}"
