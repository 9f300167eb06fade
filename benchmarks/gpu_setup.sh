#!/usr/bin/env bash
# What a lent GPU machine needs to run the benchmarks there, built on a development machine into the
# ignored folder .gpu/ (it travels with the call: `carry: [".gpu"]`, 64 MiB in all with the checkout).
#
#   benchmarks/gpu_setup.sh [DATASET_DIR] [REV]       the GPU figures (benchmarks/gpu.py):
#     .gpu/wheels/   faiss-cpu and pydantic for the GPU machine's Python (3.12, manylinux x86-64), the
#                    versions this checkout's .venv has; the machine has torch, numpy, pyarrow, scipy,
#                    scikit-learn, sentencepiece, PyYAML, regex, nvidia-ml-py, but not these
#     .gpu/data/     the prepared dataset of configs/bible6-cpu.yaml (`make demo` or `interlingua prepare`)
#     .gpu/before/   the product at REV (default: the last commit), for the "before" figures
#
#   benchmarks/gpu_setup.sh --scaling DATASET_DIR      the 16-core figures (benchmarks/scaling.py), in
#   two calls on one warm machine (together they are over one call's 64 MiB):
#     .gpu/site.tar.xz  Ray (train, data), MLflow, pydantic and faiss-cpu at this checkout's pins, for
#                       Python 3.12, with every dependency the machine's image lacks
#                       (benchmarks/gpu_machine_packages.txt), unpacked as installed, pruned of what no
#                       benchmark loads (Ray's Java jar, dashboard web client, RLlib, LLM and Serve
#                       libraries; MLflow's web UI, server and Databricks client; tests, type stubs),
#                       its large binaries stripped of their symbol tables, xz-compressed: about 44 MB.
#                       The first call unpacks it into /tmp/site, which stays while the machine is held,
#                       and measures `embed`
#     .gpu/verses.txt.xz  the KJV verses, one per line (embed's input; the Bible database is not carried)
#     .gpu/data/        the demo's dataset prepared with prepare.output.train_shards=16 (each of 8 training
#                       workers needs its own row groups): the second call carries only it, and trains
#
#   benchmarks/gpu_setup.sh --product CONFIG           the product's own commands on the GPU
#   (benchmarks/gpu_product.sh there: `interlingua train` and `evaluate` through Ray with runtime.use_gpu,
#   beside gpu.py's bare loop over the same model), in one call:
#     .gpu/site.tar.xz  Ray, MLflow, pydantic and faiss-cpu, as --scaling builds them
#     .gpu/data/        CONFIG's prepared dataset (`interlingua prepare -c CONFIG` here: Beam is not carried)
#
#   benchmarks/gpu_setup.sh --prepare                  the 16-core preparation figures (scaling.py prepare):
#     .gpu/site.tar.xz  Beam, Dask and the preparation's own dependencies, as above (no Ray, no MLflow)
#     .gpu/bible6.db.xz the six Bible versions of configs/bible6-cpu.yaml, as a copy of the Bible database
#
# It prints the commands to run there.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=gpu
case "${1:-}" in --scaling) mode=scaling; shift ;; --prepare) mode=prepare; shift ;; --product) mode=product; shift ;; esac
py=${PY:-.venv/bin/python}
if [ "$mode" = product ]; then  # the argument is the config; its dataset is the one carried
  config=${1:?"--product needs the config, e.g. configs/bible6-gpu.yaml"}
  set -- "$("$py" -c "import sys; from orchestration.config import load_config; print(load_config(sys.argv[1]).data_dir)" "$config")"
fi
data=${1:-runs/bible6-cpu/data}
rev=${2:-HEAD}
[ -x "$py" ] || { echo "no $py: run make install first (or set PY to a python with pip)" >&2; exit 1; }
[ "$mode" = prepare ] || [ -f "$data/manifest.json" ] || { echo "no prepared dataset at $data: run 'interlingua prepare -c configs/bible6-cpu.yaml' first" >&2; exit 1; }
if [ -e .gpu ] && [ ! -f .gpu/.built-by-gpu_setup ]; then
  echo ".gpu exists and was not built by this script: move it away first (nothing was changed)" >&2; exit 1
fi
rm -rf .gpu && mkdir -p .gpu/wheels .gpu/before && touch .gpu/.built-by-gpu_setup
version() { "$py" -c "import importlib.metadata as m; print(m.version('$1'))"; }
download() {  # wheels for the GPU machine's Python into $1, with their dependencies unless --no-deps follows
  local dest=$1; shift
  "$py" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$dest" "$@" 2>&1 | grep -v "is ignored" || true
}
checkout=$(git ls-files -z | xargs -0 cat | wc -c)
carried() {  # the MiB a call carries with these paths and the checkout; fails over the 64 MiB limit
  local bytes=$(( $(du -sbc "$@" | tail -1 | cut -f1) + checkout ))
  echo $((bytes / 1048576))
  [ "$bytes" -lt $((64 * 1048576)) ] || { echo "over the 64 MiB a call may carry: $* ($((bytes / 1048576)) MiB)" >&2; exit 1; }
}
site_tarball() {  # the wheels in .gpu/wheels that the machine's image lacks, unpacked (= installed), pruned, xz
  "$py" - <<'PY'
import os, re, shutil, zipfile
norm = lambda name: re.sub(r"[-_.]+", "-", name.lower())
have = {norm(line.strip()) for line in open("benchmarks/gpu_machine_packages.txt") if line.strip() and line[0] != "#"}
have.discard("protobuf")  # the machine's protobuf 7 is newer than Ray's and Beam's pins allow
have |= {"boto3", "botocore", "s3transfer"}  # Beam's optional S3 file system; no benchmark reads S3 there
site = ".gpu/site"
for wheel in sorted(os.listdir(".gpu/wheels")):
    if norm(wheel.split("-")[0]) in have:
        continue
    archive = zipfile.ZipFile(os.path.join(".gpu/wheels", wheel))
    for member in archive.infolist():  # a wheel unpacked is installed; keep its files' modes (Ray's binaries)
        path = archive.extract(member, site)
        if member.external_attr >> 16:
            os.chmod(path, (member.external_attr >> 16) & 0o777 | 0o600)
for pruned in ("ray/jars", "ray/dashboard/client/build", "ray/rllib", "ray/llm", "ray/serve", "mlflow/server/js",
               "sqlalchemy/testing", "alembic/testing",
               # MLflow's Databricks client, Docker, server and sklearn-serialization needs, imported only
               # there; `databricks` itself stays (MLflow imports find_spec("databricks.agents"))
               "databricks/sdk", "docker", "huey", "gunicorn", "skops"):
    shutil.rmtree(os.path.join(site, pruned), ignore_errors=True)
for folder, names, _ in list(os.walk(site)):  # the packages' own test suites
    if "tests" in names:
        shutil.rmtree(os.path.join(folder, "tests"))
for folder, _, names in os.walk(site):  # type stubs: read by type checkers, never imported
    for name in names:
        if name.endswith(".pyi"):
            os.remove(os.path.join(folder, name))
import subprocess
for folder, _, names in os.walk(site):  # the symbol tables of the large binaries (Ray's servers): 30 % of them
    for name in names:
        path = os.path.join(folder, name)
        if os.path.getsize(path) > 5 * 2**20 and open(path, "rb").read(4) == b"\x7fELF":
            subprocess.run(["strip", "--strip-unneeded", path], check=True)
PY
  tar -C .gpu/site -cf - . | xz -T0 -9e > .gpu/site.tar.xz
  rm -rf .gpu/site .gpu/wheels .gpu/before
}
if [ "$mode" = prepare ]; then
  download .gpu/wheels "apache-beam==$(version apache-beam)" "dask==$(version dask)" "distributed==$(version distributed)" \
    "datasketch==$(version datasketch)" "py3langid==$(version py3langid)" "pydantic==$(version pydantic)" \
    "protobuf==$(version protobuf)"
  site_tarball
  "$py" - <<'PY'
import sqlite3
from orchestration.config import load_config
from pipelines.sources import bible_db_path
source = load_config("configs/bible6-cpu.yaml").prepare.sources[0]
db = sqlite3.connect(".gpu/bible6.db")
db.execute("ATTACH ? AS src", (bible_db_path(source),))
db.execute(db.execute("SELECT sql FROM src.sqlite_master WHERE name = 'bible'").fetchone()[0])
marks = ",".join("?" * len(source.versions))
db.execute(f"INSERT INTO main.bible SELECT * FROM src.bible WHERE bbName IN ({marks})", list(source.versions.values()))
db.commit()
db.close()
PY
  xz -9 .gpu/bible6.db
  mib=$(carried .gpu)
  echo "built .gpu for the preparation figures: $(du -sh .gpu/site.tar.xz | cut -f1) of packages, the six Bible versions;" \
       "$mib MiB with the checkout (limit 64)"
  cat <<'RUN'
run there (carry .gpu):
mkdir -p /tmp/site && tar -xJf .gpu/site.tar.xz -C /tmp/site && xz -dc .gpu/bible6.db.xz > /tmp/bible6.db && PYTHONPATH=/tmp/site:$PWD python3 benchmarks/scaling.py --what prepare --bible-db /tmp/bible6.db --out $OUT
RUN
  exit 0
fi
if [ "$mode" = product ]; then
  download .gpu/wheels "ray[train,data]==$(version ray)" "mlflow==$(version mlflow)" "protobuf==$(version protobuf)" \
    "pydantic==$(version pydantic)" "faiss-cpu==$(version faiss-cpu)"
  site_tarball
  cp -r "$data" .gpu/data
  mib=$(carried .gpu)
  echo "built .gpu for the product on the GPU: $(du -sh .gpu/site.tar.xz | cut -f1) of packages, the dataset of $config;" \
       "$mib MiB with the checkout (limit 64)"
  cat <<RUN
run there (carry .gpu; a timeout of max_minutes + 4 minutes):
benchmarks/gpu_product.sh $config
RUN
  exit 0
fi
if [ "$mode" = scaling ]; then
  rows=$("$py" -c "import pyarrow.parquet as pq, glob; print(sum(pq.ParquetFile(f).metadata.num_row_groups for f in glob.glob('$data/train/*.parquet')))")
  [ "$rows" -ge 8 ] || { echo "$data has $rows training row groups; 8 workers need 8: prepare it with prepare.output.train_shards=16" >&2; exit 1; }
  download .gpu/wheels "ray[train,data]==$(version ray)" "mlflow==$(version mlflow)" "protobuf==$(version protobuf)" \
    "pydantic==$(version pydantic)" "faiss-cpu==$(version faiss-cpu)"
  site_tarball
  "$py" -c "import sys; sys.path.insert(0, 'benchmarks'); import embed; print('\n'.join(embed.verses(10**6)))" | xz -9 > .gpu/verses.txt.xz
  cp -r "$data" .gpu/data
  first=$(carried .gpu/site.tar.xz .gpu/verses.txt.xz)
  second=$(carried .gpu/data)
  echo "built .gpu for the scaling figures: $(du -sh .gpu/site.tar.xz | cut -f1) of packages, the dataset ($rows row groups);" \
       "$first MiB in the first call, $second MiB in the second, with the checkout (limit 64)"
  cat <<'RUN'
run there, first (carry .gpu/site.tar.xz and .gpu/verses.txt.xz; an empty /tmp/site, as on a fresh machine):
mkdir -p /tmp/site && tar -xJf .gpu/site.tar.xz -C /tmp/site && xz -dc .gpu/verses.txt.xz > /tmp/verses.txt && PYTHONPATH=/tmp/site:$PWD python3 benchmarks/scaling.py --what embed --text /tmp/verses.txt --out $OUT
then, on the same machine within its idle time (carry .gpu/data):
PYTHONPATH=/tmp/site:$PWD python3 benchmarks/scaling.py --what train --out $OUT dataset_dir=.gpu/data
RUN
  exit 0
fi
for pkg in faiss-cpu pydantic pydantic_core annotated-types typing-inspection; do
  download .gpu/wheels --no-deps "$pkg==$(version "$pkg")"
done
cp -r "$data" .gpu/data
git archive "$rev" model core evaluation orchestration pipelines | tar -x -C .gpu/before
mib=$(carried .gpu)
echo "built .gpu: $(ls .gpu/wheels | wc -l) wheels, the dataset, the code at $(git rev-parse --short "$rev"); $mib MiB with the checkout (limit 64)"
cat <<'RUN'
run there (carry .gpu):
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/wheels/*.whl && PYTHONPATH=/tmp/site python3 benchmarks/gpu.py all --data .gpu/data --before-tree .gpu/before --out $OUT
RUN
