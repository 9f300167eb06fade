#!/usr/bin/env bash
# The product's own commands on a lent GPU machine, beside the bare loop over the same model, in one call:
#
#   benchmarks/gpu_setup.sh --product CONFIG        here: .gpu/ (Ray, MLflow, faiss-cpu; CONFIG's dataset)
#   benchmarks/gpu_product.sh CONFIG [OVERRIDE...]  there, carrying .gpu, with OUT set
#
# 1. bare     benchmarks/gpu.py feed over CONFIG's model and token budget: tokens/s, NVML busy, profiled
#             kernel busy, one process without Ray (5 s warm-up, 10 s measured)
# 2. train    `interlingua train -c CONFIG` through Ray Train with runtime.use_gpu=true, the GPU's
#             utilization sampled by nvidia-smi every 0.5 s; tokens/s per log window in MLflow
# 3. evaluate `interlingua evaluate -c CONFIG`: the test split's similarity error, embedding on a GPU actor
#
# Into $OUT: env.txt, bare.jsonl, profiles.txt, train.log, evaluate.log, gpu-util.csv and run.tar.gz (the
# run's MLflow database, run.json and evaluation metrics; not its checkpoints). GPU_SITE names an unpacked
# site folder instead of .gpu/site.tar.xz (a dry run on a development machine, with runtime.use_gpu=false);
# BARE=0 skips step 1 (a second run on the same machine); BARE_S=N measures the bare loop for N seconds
# (default 10; a host-bound loop's tokens/s varies by +-12 % between 20-step windows, so a reference for a
# 3-minute Ray run is best measured about as long).
set -uo pipefail
config=${1:?usage: benchmarks/gpu_product.sh CONFIG [OVERRIDE...]}
shift
out=${OUT:?set OUT to the folder for the results}
cd "$(dirname "$0")/.."
site=${GPU_SITE:-/tmp/site}
if [ ! -d "$site/ray" ]; then
  mkdir -p "$site" && tar -xJf .gpu/site.tar.xz -C "$site" || exit 1
fi
export PYTHONPATH=$site:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
set -- dataset_dir=.gpu/data runtime.use_gpu=true "$@"
stamp() { echo "$(date -u +%H:%M:%S) $*"; }
value() {  # one resolved config value (e.g. train.max_tokens) under the overrides that follow it
  local key=$1
  shift
  python3 -c "import sys; from orchestration.config import load_config; c = load_config(sys.argv[1], sys.argv[3:]);
print(eval('c.' + sys.argv[2]))" "$config" "$key" "$@"
}
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; uptime
  python3 -c "import sys, torch, ray, mlflow, faiss; print(sys.version.split()[0], 'torch', torch.__version__,
'cudnn', torch.backends.cudnn.version(), 'ray', ray.__version__, 'mlflow', mlflow.__version__, 'faiss', faiss.__version__)"
  git rev-parse --short HEAD 2>/dev/null; } > "$out/env.txt" 2>&1
cat "$out/env.txt"
minutes=$(value train.max_minutes "$@") || exit 1
sets=()
for o in "$@"; do sets+=(--set "$o"); done
if [ "${BARE:-1}" != 0 ]; then
  max_tokens=$(value train.max_tokens "$@") || exit 1
  stamp "bare loop: $config, train.max_tokens=$max_tokens"
  bare_s=${BARE_S:-10}
  timeout $((bare_s + 90)) python3 benchmarks/gpu.py feed --config "$config" --data .gpu/data --out "$out" \
    --max-tokens "$max_tokens" --prefetch 8 --label bare --warm-s 5 --measure-s "$bare_s" "${sets[@]}" \
    | grep '^{' | tee "$out/bare.jsonl"
fi
sampler=
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 500 \
    > "$out/gpu-util.csv" &
  sampler=$!
fi
stamp "train: interlingua train -c $config $*"
timeout $(python3 -c "print(int(${minutes:-10} * 60 + 150))") python3 -m orchestration.cli train -v -c "$config" "$@" \
  > "$out/train.log" 2>&1
stamp "train exited $? ($(grep -c 'tok/s' "$out/train.log") progress lines)"
[ -n "$sampler" ] && kill "$sampler"
stamp "evaluate"
timeout 150 python3 -m orchestration.cli evaluate -c "$config" "$@" > "$out/evaluate.log" 2>&1
stamp "evaluate exited $?"
tail -20 "$out/evaluate.log"
run_dir=$(value run_location "$@")
tar -czf "$out/run.tar.gz" --exclude='checkpoints' --exclude='ray-*' --exclude='*.safetensors' --exclude='*.npy' \
  --exclude='*.pt' runs/mlflow.db "$run_dir" 2>/dev/null
ls -la "$out"
