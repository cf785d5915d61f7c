#!/usr/bin/env bash
# Create .venv (if missing) and install Residual Lab into it. Extra arguments name pip extras: `ui`, `diffusion`,
# `cluster`, `embed`, `all` (the whole lab: pages, notebooks, diffusion, SLURM, UMAP), `test` (all, and the tests').
# Without extras: the core, which trains, analyses and reproduces from the command line.
#   TORCH_SPEC overrides the torch pair (default: the release this project is tested with).
#   TORCH_INDEX is where torch comes from: by default PyTorch's CPU-only wheels where no NVIDIA GPU is found (a few
#   hundred MB rather than the multi-GB CUDA build Linux gets from PyPI), the default index where one is; set
#   TORCH_INDEX="" for the default index everywhere. Where the CPU index cannot be reached, the default is used.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-"torch==2.14.1 torchvision==0.29.1"}
if [ -z "${TORCH_INDEX+set}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 || [ "$(uname)" = Darwin ]; then TORCH_INDEX=""  # macOS: PyPI's is CPU
  else TORCH_INDEX="https://download.pytorch.org/whl/cpu"; fi
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# torch first and explicitly, so no later requirement makes pip resolve a different (multi-GB) build
# shellcheck disable=SC2086
if [ -z "$TORCH_INDEX" ] || ! .venv/bin/python -m pip install -q --retries 0 --timeout 15 --index-url "$TORCH_INDEX" \
    $TORCH_SPEC 2>/dev/null; then
  .venv/bin/python -m pip install -q $TORCH_SPEC
fi
extras=""
[ $# -gt 0 ] && extras="[$(IFS=,; echo "$*")]"
.venv/bin/python -m pip install -q -e ".${extras}"
# UMAP's and pynndescent's numba kernels compile into their on-disk cache now, once, instead of in the first process
# that embeds with UMAP (the Rank page's embedding, a test): about 30 s on two cores
if .venv/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('umap') is None)"; then
  .venv/bin/python -c "import umap"
fi
