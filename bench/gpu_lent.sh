#!/bin/sh
# bench/gpu.py on a lent GPU machine that has torch with CUDA but no network and none of this
# repo's other needs. Prepare here (the wheels travel in .whl, which .gitignore ignores; about
# 16 MB, under the 64 MiB a call carries), after the last commit to measure:
#
#   rm -rf .whl
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 -d .whl trl==1.16.0 datasets==5.2.0 dill multiprocess \
#       transformers==5.24.0 pluggy gguf
#   pip wheel --no-deps --no-build-isolation --no-index -w .whl ./core ./trl_env_processors/qwen
#
# then run `sh bench/gpu_lent.sh OUTDIR [gpu.py options]` there, carrying .whl. Every section,
# the install included, is meant to fit 8 minutes; gpu.json records the bench's own wall time
# (`seconds`) and, from TRL_ENV_BENCH_LAUNCHED, the time since this script started
# (`seconds_with_install`). The JSON is written after each section, so a run cut short keeps
# what it measured.
set -e
out=${1:?usage: sh bench/gpu_lent.sh OUTDIR [bench/gpu.py options]}
shift
TRL_ENV_BENCH_LAUNCHED=$(date +%s.%N)
export TRL_ENV_BENCH_LAUNCHED
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 bench/gpu.py --all --json --out "$out/gpu.json" "$@" >"$out/gpu_stdout.json"
echo "bench/gpu_lent.sh: $(python3 -c "import time; print(round(time.time() - $TRL_ENV_BENCH_LAUNCHED))") s in all"
