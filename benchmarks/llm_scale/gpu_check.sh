#!/usr/bin/env bash
# The prepared GPU check (benchmarks/llm_scale/gpu_check.py): Llama-2-7B-scale HAMU / GradDiff / OFMU / TOFU-evaluator
# measurements on one 80-140 GB GPU, offline, in ≤ 8 minutes. Results: $OUT (or benchmarks/results).
#   bash benchmarks/llm_scale/gpu_check.sh              on a GPU machine
#   bash benchmarks/llm_scale/gpu_check.sh --dry-run    the same script on CPU with a tiny Llama (CI runs this)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1
exec "$PY" benchmarks/llm_scale/gpu_check.py "$@"
