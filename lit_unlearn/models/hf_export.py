"""A causal LM's weights as a plain Hugging Face folder (safetensors, config, tokenizer) that
`AutoModelForCausalLM.from_pretrained` loads with nothing from lit-unlearn installed, so that other tools can
evaluate an unlearning run's result.

LoRA runs are merged into the base weights (on a copy: the run's model is left as it is). The folder is written
beside its final place and renamed into it, so a reader never sees half of one.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

from lit_unlearn.storage.files import replace_folder

from torch import nn

__all__ = ["export_hf", "HF_FOLDER"]

HF_FOLDER = "model"  # in a run folder: the final weights as a Hugging Face folder


def export_hf(network: nn.Module, tokenizer, folder: str | Path) -> Path:
    """Write `network` (a lit_unlearn CausalLM, or a transformers model) and `tokenizer` to `folder`."""
    model = getattr(network, "model", network)
    if hasattr(model, "merge_and_unload"):  # a peft model: the adapters folded into the weights
        model = copy.deepcopy(model).merge_and_unload()
    folder = Path(folder)
    tmp = folder.with_name(f".{folder.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(tmp))
    return replace_folder(tmp, folder)
