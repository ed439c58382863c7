"""Start unlearning part of the way back to the base model: θ ← θ₀ + keep·(θ − θ₀) before the first step
(lit_unlearn.algorithms.interpolation), where θ₀ is the model the target was fine-tuned from.

A named option, off unless this callback is given: the methods' papers start from the target. The base is what a
Llama-2-7B user has anyway (the public model their fine-tune started from); no retain-only model is read.

It applies at the start of training (step 0 only), after the metric sources have measured the target itself (its
model utility is the ratio's baseline, its verdict the "before" column) and before a stop rule's first look. A
resumed run starts past step 0 from its checkpoint, so nothing is applied twice. DeepSpeed keeps its own copies of
the weights by then (fp32 partitions), so under DeepSpeed the callback refuses: interpolate the target's folder
beforehand instead.
"""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info

from lit_unlearn.core.errors import MissingFileError, UserError
from lit_unlearn.core.plug_points import UnlearningRun, as_plug

__all__ = ["InterpolateTowardBase"]


class InterpolateTowardBase(Callback):
    def __init__(self, base: str, keep: float = 0.5) -> None:
        """
        Args:
            base: the model the target was fine-tuned from: a Hugging Face folder with safetensors weights (the
                TOFU world's `runs/tofu/world/base`; at Llama-2-7B, the downloaded chat model's folder).
            keep: how much of the fine-tuning delta θ − θ₀ stays (0: the base itself, 1: the target unchanged).
        """
        super().__init__()
        if not 0.0 <= keep <= 1.0:
            raise UserError(f"InterpolateTowardBase: keep must be in [0, 1] (the share of the fine-tuning delta "
                            f"that stays), got {keep}")
        self.base, self.keep = base, keep
        self.moved = 0

    def on_train_start(self, trainer, pl_module) -> None:
        if trainer.global_step != 0:
            return
        run = as_plug(pl_module, UnlearningRun)
        if run and run.zero_stage:
            raise UserError("InterpolateTowardBase does not run under DeepSpeed (its optimizer keeps its own copy of "
                            "the weights): interpolate the target's folder beforehand, or use DDP")
        from lit_unlearn.algorithms.interpolation import interpolate_toward_

        network = run.network if run else pl_module
        hf = getattr(network, "model", None)
        if hf is None or not hasattr(hf, "config"):
            raise UserError("InterpolateTowardBase needs a Hugging Face causal LM (lit_unlearn.models.CausalLM)")
        if hasattr(hf, "peft_config"):
            raise UserError("InterpolateTowardBase: a LoRA network trains adapters only; interpolate the full "
                            "target first (or drop the callback)")
        params = list(hf.named_parameters())
        self.moved = interpolate_toward_(params, _base_tensors(self.base, {n for n, _ in params}), self.keep)
        rank_zero_info(f"InterpolateTowardBase: {self.moved} tensors moved to θ₀ + {self.keep}·(θ − θ₀), "
                       f"θ₀ = {self.base}")


def _base_tensors(base: str, names: set[str]) -> dict:
    """The base's tensors of these names, read from its safetensors files one tensor at a time."""
    from safetensors import safe_open

    from lit_unlearn.core.hub import resolve_pretrained

    folder = Path(resolve_pretrained(base, "base model"))
    if not folder.is_dir():
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(str(base), allow_patterns=["*.safetensors", "*.json"]))
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise MissingFileError(f"InterpolateTowardBase: no *.safetensors in {folder}; save the base with "
                               "save_pretrained (safetensors is its default)")
    out = {}
    for f in files:
        with safe_open(str(f), framework="pt") as handle:
            for key in handle.keys():
                if key in names:
                    out[key] = handle.get_tensor(key)
    missing = sorted(names - set(out))
    if missing:
        raise UserError(f"InterpolateTowardBase: the base {base} lacks {len(missing)} of the target's tensors "
                        f"(first: {missing[0]}); it must be the model the target was fine-tuned from")
    return out
