#!/usr/bin/env bash
# Create .venv and install lit-unlearn with its test extras. torch goes first, pinned to 2.13.0; everything else is
# installed around it, then we check pip did not swap it for another build.
#   bash scripts/bootstrap.sh            CPU, or the GPU build where `nvidia-smi` sees a GPU
#   bash scripts/bootstrap.sh --gpu      the CUDA build of torch (TORCH_INDEX=URL: a wheel index to take it from)
#   bash scripts/bootstrap.sh --cpu      the CPU build even on a GPU machine
# LIT_UNLEARN_BOOTSTRAP_DRY_RUN=1 prints the install commands instead of running them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
MODE=auto
for arg in "$@"; do
  case "$arg" in
    --gpu) MODE=gpu ;;
    --cpu) MODE=cpu ;;
    *) echo "bootstrap.sh: unknown option $arg (use --gpu or --cpu)" >&2; exit 2 ;;
  esac
done
if [ "$MODE" = auto ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then MODE=gpu; else MODE=cpu; fi
fi
run() { if [ -n "${LIT_UNLEARN_BOOTSTRAP_DRY_RUN:-}" ]; then echo "+ $*"; else "$@"; fi; }

echo "lit-unlearn bootstrap: $MODE build of torch"
[ -x .venv/bin/python ] || run "$PY" -m venv .venv
run .venv/bin/python -m pip install -q --upgrade pip
if [ "$MODE" = gpu ]; then
  run .venv/bin/python -m pip install -q "torch==2.13.0" ${TORCH_INDEX:+--index-url "$TORCH_INDEX"}
else
  run .venv/bin/python -m pip install -q "torch==2.13.0"
fi
# DeepSpeed (in the extras) builds its CUDA ops when first used, not at install
DS_BUILD_OPS=0 run .venv/bin/python -m pip install -q -e ".[test]"
[ -n "${LIT_UNLEARN_BOOTSTRAP_DRY_RUN:-}" ] && exit 0
.venv/bin/python - "$MODE" <<'PY'
import sys
import torch
assert torch.__version__.startswith("2.13.0"), f"pip replaced torch: {torch.__version__}"
if sys.argv[1] == "gpu":
    assert torch.version.cuda, ("pip installed a CPU build of torch: give the CUDA wheel index, e.g. "
                                "TORCH_INDEX=https://download.pytorch.org/whl/cu128 bash scripts/bootstrap.sh --gpu")
    print(f"CUDA {torch.version.cuda}; GPUs visible: {torch.cuda.device_count()}")
print(f"lit-unlearn environment ready (torch {torch.__version__})")
PY
