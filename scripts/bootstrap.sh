#!/usr/bin/env bash
# Create .venv and install lit-unlearn with its test extras. torch goes first and is pinned to the CPU build
# (2.13.0); everything else is installed around it, then we check pip did not swap it for another build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[test]"
.venv/bin/python - <<'PY'
import torch
assert torch.__version__.startswith("2.13.0"), f"pip replaced torch: {torch.__version__}"
print(f"lit-unlearn environment ready (torch {torch.__version__})")
PY
