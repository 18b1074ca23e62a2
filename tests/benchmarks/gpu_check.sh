#!/usr/bin/env bash
# The fused attention path's checks and figures on a GPU (issue 12), one command per step, output under OUT.
#
#   tests/benchmarks/gpu_check.sh prepare        # here, with network, once: pydantic's wheels into .whl/
#   tests/benchmarks/gpu_check.sh bench [OUT]    # on the GPU: bench_attention.py's tables, bfloat16
#   tests/benchmarks/gpu_check.sh tests [OUT]    # on the GPU: tests/test_fused_attention.py on CUDA
#   tests/benchmarks/gpu_check.sh tiles [OUT]    # on the GPU: the kernels' time for several tile sizes
#   tests/benchmarks/gpu_check.sh all   [OUT]    # bench, tests and tiles
#
# OUT defaults to $OUT, else ./gpu_check_out. Each step writes its log there (env.txt, tests.txt, bench.txt,
# tiles.txt) as it goes, so a step cut short still leaves what it printed.
#
# The GPU machine needs PyTorch with CUDA and Triton (>= 3.3, for tl.gather), and dape_core's own imports:
# numpy, matplotlib, tokenizers, tabulate, threadpoolctl, pytest, and pydantic. Where pydantic is missing and
# nothing can be downloaded there, `prepare` (run on a machine with network) saves the wheels of the
# versions installed here, for CPython 3.12 on x86-64 Linux (GPU_PYTHON=3.11 etc. for another Python), into
# .whl/ (ignored by git); carry that folder to the GPU machine, where the steps install it into /tmp/site.
#
# Not yet run on a GPU when written: the kernels have run only in Triton's interpreter (CPU), and compile
# for sm_80, sm_86 and sm_90 offline (Triton 3.9's ptxas: tests/benchmarks/fused_resources.py). Compiling is
# slow: each configuration (kernel size, form, dtype, tiles) compiles a forward and a backward kernel,
# measured here at 6 and 14 minutes on a CPU shared by ~20 jobs (seconds to a minute on an idle one); Triton
# caches them in ~/.triton/cache for the machine's life. `bench` compiles one configuration (bfloat16, 1x3)
# and, with torch.compile, three 125M models (about a minute each); `tests` three configurations
# (DAPE_FUSED_TESTS_ALL=1: about fifteen); `tiles` six. On a machine whose commands are cut at 10 minutes, run
# `bench` and `tests` as separate commands, bench first.
set -uo pipefail
cd "$(dirname "$0")/../.."
step="${1:-all}"
out="${2:-${OUT:-gpu_check_out}}"
python="${PYTHON:-python3}"

prepare() {
  local target="${GPU_PYTHON:-3.12}" packages=()
  for name in pydantic pydantic-core annotated-types typing-inspection; do
    packages+=("$name==$("$python" -c "import importlib.metadata as m; print(m.version('$name'))")")
  done
  "$python" -m pip download --no-deps --only-binary=:all: --python-version "$target" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${packages[@]}"
}

setup() {
  mkdir -p "$out"
  if ! "$python" -c "import pydantic" 2>/dev/null; then
    if ! ls .whl/*.whl >/dev/null 2>&1; then
      echo "pydantic is missing and .whl/ holds no wheels: run '$0 prepare' on a machine with network" >&2
      exit 2
    fi
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

run_tests() {
  DAPE_FUSED_TESTS_ON_CUDA=1 "$python" -m pytest -q -p no:cacheprovider tests/test_fused_attention.py \
    --durations=10 2>&1 | tee "$out/tests.txt"
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
  tests) setup && run_tests ;;
  bench) setup && run_bench ;;
  tiles) setup && run_tiles ;;
  all) setup && run_bench; run_tests; run_tiles ;;
  *) echo "usage: $0 prepare|tests|bench|tiles|all [OUT]" >&2; exit 2 ;;
esac
