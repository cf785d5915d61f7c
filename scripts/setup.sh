#!/usr/bin/env bash
# Create .venv (if missing) and install Residual Lab into it. Extra arguments name pip extras, e.g. `test`.
#   TORCH_SPEC overrides the torch pair (default: the CPU/CUDA wheels this project is tested with); set
#   TORCH_SPEC="torch torchvision" to take the current release instead.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-"torch==2.14.1 torchvision==0.29.1"}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# torch first and explicitly, so no later requirement makes pip resolve a different (multi-GB) build
# shellcheck disable=SC2086
.venv/bin/python -m pip install -q $TORCH_SPEC
extras=""
[ $# -gt 0 ] && extras="[$(IFS=,; echo "$*")]"
.venv/bin/python -m pip install -q -e ".${extras}"
# UMAP's and pynndescent's numba kernels compile into their on-disk cache now, once, instead of in the first process
# that embeds with UMAP (the Rank page's embedding, a test): about 30 s on two cores
.venv/bin/python -c "import umap"
