#!/usr/bin/env bash
# Set up everything the tests need on a fresh machine (venv, packages, Debian's chromium), then run them all.
# Extra arguments go to pytest (e.g. `-m "not slow"`, or `-n 0` for one process). The tests run on two workers;
# --dist loadgroup keeps each file's tests on one worker, the server and browser tests together and the torchrun tests
# together (tests/conftest.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
if ! [ -x /usr/bin/chromium ]; then
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# Bytecode caches are written during the run even where PYTHONDONTWRITEBYTECODE is set: the suite starts dozens of
# Python processes (workers, job children, kernels, torchrun ranks), each of which would otherwise compile the lab
# from source again, and each worker would rewrite every test module's asserts again.
exec env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m pytest -n 2 --dist loadgroup "$@"
