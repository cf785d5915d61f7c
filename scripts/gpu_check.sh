#!/usr/bin/env bash
# The GPU paths in one run, for a machine with a CUDA device (about 8 minutes on one GPU): every CUDA-marked test;
# MAE trained for a few steps under torchrun with NCCL (one process), bf16 autocast and torch.compile; and the
# throughput benches against plain PyTorch loops measured in the same run (MAE ViT-B/16 at batch 256, U-ViT-S at
# batch 128, the ensemble trainer). Writes OUT/table.md (default gpu-check/) with one line per check and every
# bench's table, and OUT/throughput.jsonl, which `lab reproduce --dry-run --throughput` estimates GPU-hours from.
#   bash scripts/setup.sh && bash scripts/gpu_check.sh [OUT]
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${1:-gpu-check}
mkdir -p "$OUT"
if ! $PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "no CUDA device: this check is for a GPU machine" >&2
  exit 2
fi
ROWS=()
check() {  # check NAME COMMAND…: run it, its output in OUT/NAME.log, one row of the table
  local name=$1 start=$SECONDS status=pass
  shift
  "$@" >"$OUT/$name.log" 2>&1 || status=FAIL
  ROWS+=("| $name | $status | $((SECONDS - start)) s |")
}
$PY -c "from lab.data.readers import write_digits_folder; write_digits_folder('$OUT/digits', image_size=32)"
check cuda-tests timeout 240 $PY -m pytest -q -m gpu -p no:cacheprovider tests
check mae-nccl-bf16-compile timeout 180 $PY -m torch.distributed.run --standalone --nproc_per_node=1 -m lab train \
  lab/configs/mae_tiny.yaml "data.root=$OUT/digits" train.epochs=1 train.precision=bf16 train.compile=true \
  train.batch_size=64 data.workers=2 --runs-dir "$OUT/runs" --no-progress
check bench-mae-vit-b16 timeout 120 $PY bench/mae_throughput.py --record "$OUT/throughput.jsonl"
check bench-uvit-s timeout 120 $PY bench/uvit_throughput.py --record "$OUT/throughput.jsonl"
check bench-ensemble timeout 120 $PY bench/sweep.py --repeats 3
{
  echo "# GPU check: $($PY -c 'import torch; print(torch.cuda.get_device_name(0), "torch", torch.__version__)')"
  echo
  echo "| check | result | time |"
  echo "| --- | --- | --- |"
  printf '%s\n' "${ROWS[@]}"
  for bench in bench-mae-vit-b16 bench-uvit-s bench-ensemble; do
    echo; echo "## $bench"; echo; echo '```'; tail -n 25 "$OUT/$bench.log"; echo '```'
  done
} >"$OUT/table.md"
cat "$OUT/table.md"
! grep -q "| FAIL |" "$OUT/table.md"
