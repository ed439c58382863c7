#!/usr/bin/env bash
# lit-unlearn's TOFU evaluation against open-unlearning's, side by side (benchmarks/llm_scale/tofu_eval_vs_open_unlearning.py).
#   benchmarks/llm_scale/tofu_eval_vs_open_unlearning.sh OPEN_UNLEARNING_CHECKOUT [--level 10] [--rounds 3] [--world DIR]
# The checkout: git clone https://github.com/locuslab/open-unlearning && git -C open-unlearning checkout d3d7cf9
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
python="${PYTHON:-$here/.venv/bin/python}"
[ -x "$python" ] || python=python
cd "$here"
exec "$python" benchmarks/llm_scale/tofu_eval_vs_open_unlearning.py "$@"
