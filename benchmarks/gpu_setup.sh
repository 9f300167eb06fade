#!/usr/bin/env bash
# What a lent GPU machine needs to run benchmarks/gpu.py, built on a development machine into the
# ignored folder .gpu/ (it travels with the call: `carry: [".gpu"]`, 64 MiB in all with the checkout):
#
#   .gpu/wheels/   faiss-cpu and pydantic for the GPU machine's Python (3.12, manylinux x86-64), the
#                  versions this checkout's .venv has; the machine has torch, numpy, pyarrow, scipy,
#                  scikit-learn, sentencepiece, PyYAML, regex, nvidia-ml-py, but not these
#   .gpu/data/     the prepared dataset of configs/bible6-cpu.yaml (`make demo` or `interlingua prepare`)
#   .gpu/before/   the product at REV (default: the last commit), for the "before" figures
#
#   benchmarks/gpu_setup.sh [DATASET_DIR] [REV]
#
# It prints the one command to run there. Ray, MLflow and Beam are not built: Ray's wheel alone is
# 79 MB (34 MB of it a Java jar), and gpu.py drives the product's training parts without them.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-runs/bible6-cpu/data}
rev=${2:-HEAD}
py=${PY:-.venv/bin/python}
[ -x "$py" ] || { echo "no $py: run make install first (or set PY to a python with pip)" >&2; exit 1; }
[ -f "$data/manifest.json" ] || { echo "no prepared dataset at $data: run 'interlingua prepare -c configs/bible6-cpu.yaml' first" >&2; exit 1; }
if [ -e .gpu ] && [ ! -f .gpu/.built-by-gpu_setup ]; then
  echo ".gpu exists and was not built by this script: move it away first (nothing was changed)" >&2; exit 1
fi
rm -rf .gpu && mkdir -p .gpu/wheels .gpu/before && touch .gpu/.built-by-gpu_setup
version() { "$py" -c "import importlib.metadata as m; print(m.version('$1'))"; }
for pkg in faiss-cpu pydantic pydantic_core annotated-types typing-inspection; do
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .gpu/wheels "$pkg==$(version "$pkg")" 2>&1 | grep -v "is ignored" || true
done
cp -r "$data" .gpu/data
git archive "$rev" model core evaluation orchestration pipelines | tar -x -C .gpu/before
bytes=$(( $(du -sb .gpu | cut -f1) + $(git ls-files -z | xargs -0 cat | wc -c) ))
echo "built .gpu: $(ls .gpu/wheels | wc -l) wheels, the dataset, the code at $(git rev-parse --short "$rev"); $((bytes / 1048576)) MiB with the checkout (limit 64)"
[ "$bytes" -lt $((64 * 1048576)) ] || { echo "over the 64 MiB a call may carry" >&2; exit 1; }
cat <<'RUN'
run there (carry .gpu):
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/wheels/*.whl && PYTHONPATH=/tmp/site python3 benchmarks/gpu.py all --data .gpu/data --before-tree .gpu/before --out $OUT
RUN
