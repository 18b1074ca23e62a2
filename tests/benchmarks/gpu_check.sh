#!/usr/bin/env bash
# A GPU machine's checks and figures, one command per step, output under OUT. The first step is `orchestrator
# doctor` (what a user runs on a new machine); the rest are issue 12's tables and the CUDA tests.
#
#   tests/benchmarks/gpu_check.sh prepare        # here, with network, once: the wheels the GPU machine may lack
#   tests/benchmarks/gpu_check.sh doctor [OUT]   # on the GPU: orchestrator doctor (checks, then its benchmark)
#   tests/benchmarks/gpu_check.sh check  [OUT]   # on the GPU: bench_selfcheck.py (the self-check's cost)
#   tests/benchmarks/gpu_check.sh bench  [OUT]   # on the GPU: bench_attention.py's 125M tables, bfloat16
#   tests/benchmarks/gpu_check.sh dist   [OUT]   # on the GPU: bench_distributed.py (350M, FSDP vs one device)
#   tests/benchmarks/gpu_check.sh tests  [OUT]   # on the GPU: tests/test_fused_attention.py on CUDA
#   tests/benchmarks/gpu_check.sh tiles  [OUT]   # on the GPU: the kernels' time for several tile sizes
#   tests/benchmarks/gpu_check.sh all    [OUT]   # doctor, check, bench, dist, tests, tiles (in that order)
#   tests/benchmarks/gpu_check.sh lease  [OUT]   # one command for a short device lease (under 10 minutes):
#                                                # doctor, check, bench, dist, each cut at its own time limit
#
# OUT defaults to $OUT, else ./gpu_check_out. Each step writes its log there (env.txt, doctor.txt, check.txt,
# bench.txt, dist.txt, tests.txt, tiles.txt) as it goes, so a step cut short still leaves what it printed; `doctor` also
# writes its exit code to doctor.rc (1: a check failed).
#
# The GPU machine needs PyTorch with CUDA and Triton (>= 3.3, for tl.gather), and dape_core's own imports:
# numpy, matplotlib, tokenizers, tabulate, threadpoolctl, pytest, and pydantic; `orchestrator doctor` also typer
# and rich (without them the step calls the same code, orchestrator.doctor.run_doctor, directly). Where those
# are missing and nothing can be downloaded there, `prepare` (run on a machine with network) saves the wheels of
# the versions installed here, for CPython 3.12 on x86-64 Linux (GPU_PYTHON=3.11 etc. for another Python), into
# .whl/ (ignored by git); carry that folder to the GPU machine, where the steps install it into /tmp/site.
#
# Not yet run on a GPU when written: the kernels have run only in Triton's interpreter (CPU), and compile for
# sm_80, sm_86 and sm_90 offline (Triton 3.9's ptxas: tests/benchmarks/fused_resources.py). Compiling is slow:
# each configuration (kernel size, form, dtype, tiles) compiles a forward and a backward kernel, measured here
# at 6 and 14 minutes on a CPU shared by ~20 jobs (seconds to a minute on an idle one); Triton caches them in
# ~/.triton/cache for the machine's life. `doctor` compiles three configurations (bfloat16 1x3 and 1x5,
# float32 1x3, at the 125M layer's width; its benchmark reuses the first); `bench` the bfloat16 1x3 one and,
# with torch.compile, three 125M models (about a minute each); `tests` three (DAPE_FUSED_TESTS_ALL=1: about
# fifteen); `tiles` six. On a machine whose commands are cut at 10 minutes, run the steps as separate
# commands, doctor first (`doctor` with QUICK=1: the checks without the benchmark).
set -uo pipefail
cd "$(dirname "$0")/../.."
step="${1:-all}"
out="${2:-${OUT:-gpu_check_out}}"
python="${PYTHON:-python3}"

prepare() {
  local target="${GPU_PYTHON:-3.12}" packages=()
  for name in pydantic pydantic-core annotated-types typing-inspection typer click rich shellingham \
      markdown-it-py mdurl pygments tabulate; do
    packages+=("$name==$("$python" -c "import importlib.metadata as m; print(m.version('$name'))")")
  done
  "$python" -m pip download --no-deps --only-binary=:all: --python-version "$target" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${packages[@]}"
}

setup() {
  mkdir -p "$out"
  if ! "$python" -c "import pydantic, tabulate" 2>/dev/null; then
    if ! ls .whl/*.whl >/dev/null 2>&1; then
      echo "pydantic or tabulate is missing and .whl/ holds no wheels: run '$0 prepare' on a machine with network" >&2
      exit 2
    fi
    "$python" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  elif ! "$python" -c "import typer, rich" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
    "$python" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
    "$python" -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, \
'triton', triton.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
    git log -1 --format='commit %H %s' 2>/dev/null
  } | tee "$out/env.txt"
}

run_doctor() {
  local quick=()
  [ -n "${QUICK:-}" ] && quick=(--quick)
  local rc
  if "$python" -c "import typer, rich" 2>/dev/null; then
    "$python" -m orchestrator doctor "${quick[@]}" 2>&1 | tee "$out/doctor.txt"
    rc="${PIPESTATUS[0]}"
  else
    "$python" -c "import sys; from orchestrator.doctor import run_doctor; \
sys.exit(1 if run_doctor(quick=bool(sys.argv[1:])).failed else 0)" "${quick[@]}" 2>&1 | tee "$out/doctor.txt"
    rc="${PIPESTATUS[0]}"
  fi
  echo "$rc" > "$out/doctor.rc"
  return "$rc"
}

run_check() {
  "$python" tests/benchmarks/bench_selfcheck.py --device cuda 2>&1 | tee "$out/check.txt"
}

run_dist() {
  "$python" tests/benchmarks/bench_distributed.py 2>&1 | tee "$out/dist.txt"
}

# The steps of `lease`, each cut at its limit in seconds (what it printed so far stays in OUT): about 9.5
# minutes in all, for a device lent for 15 minutes with commands cut at 10. Not yet timed on a GPU: the limits
# are guesses from the compile times above; a step cut short says so in OUT/lease.txt.
LEASE_DOCTOR_S="${LEASE_DOCTOR_S:-210}" LEASE_CHECK_S="${LEASE_CHECK_S:-45}" LEASE_BENCH_S="${LEASE_BENCH_S:-240}"
LEASE_DIST_S="${LEASE_DIST_S:-60}"

lease() {
  local step limit rc
  for step in doctor check bench dist; do
    limit="LEASE_${step^^}_S"
    timeout -k 5 "${!limit}" bash "$0" "$step" "$out"
    rc=$?
    echo "$step: exit $rc$([ "$rc" = 124 ] && echo " (cut at ${!limit} s)")" | tee -a "$out/lease.txt"
  done
}

# --timeout: a test's first call compiles its kernels (see above), longer than pyproject's per-test bound allows.
run_tests() {
  DAPE_FUSED_TESTS_ON_CUDA=1 "$python" -m pytest -q -p no:cacheprovider tests/test_fused_attention.py \
    --durations=10 --timeout=1200 2>&1 | tee "$out/tests.txt"
}

run_bench() {
  "$python" tests/benchmarks/bench_attention.py --device cuda --dtype bfloat16 --no-float64-check \
    --shapes 125M --variants Kerple "DAPE 1x3" --train-lengths 512 1024 2048 --eval-lengths 8192 16384 \
    2>&1 | tee "$out/bench.txt"
}

run_tiles() {
  "$python" tests/benchmarks/tune_fused_tiles.py --batch 16 --length 512 --kernel 3 2>&1 | tee "$out/tiles.txt"
}

case "$step" in
  prepare) prepare ;;
  doctor) setup && run_doctor ;;
  check) setup && run_check ;;
  bench) setup && run_bench ;;
  dist) setup && run_dist ;;
  tests) setup && run_tests ;;
  tiles) setup && run_tiles ;;
  all) setup && { run_doctor; run_check; run_bench; run_dist; run_tests; run_tiles; } ;;
  lease) setup && lease ;;
  *) echo "usage: $0 prepare|doctor|check|bench|dist|tests|tiles|all|lease [OUT]" >&2; exit 2 ;;
esac
