"""Tiny Llamas trained from scratch for the offline worlds, through the launch path (a run folder per model:
resumable, pre-emption safe), then saved with their tokenizer in the HF layout (`CausalLM(name_or_path=...)`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["TINY_SIZE", "train_tiny_llama", "tiny_network_spec"]

TINY_SIZE = {"hidden_size": 128, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate_size": 256}


def tiny_network_spec(vocab_size: int, seed: int, size: dict | None = None, max_positions: int = 512,
                      init_from: str | None = None) -> dict[str, Any]:
    """The CausalLM spec of a fresh tiny Llama (or of a saved one to continue from, `init_from`)."""
    from lit_unlearn.models.causal_lm import tiny_llama_config

    if init_from is not None:
        return {"class_path": "lit_unlearn.models.CausalLM", "init_args": {"name_or_path": str(init_from)}}
    config = tiny_llama_config(vocab_size=vocab_size, max_positions=max_positions, **(size or TINY_SIZE))
    return {"class_path": "lit_unlearn.models.CausalLM", "init_args": {"config": config, "seed": seed}}


def train_tiny_llama(out: str | Path, tokenizer, data, epochs: int, lr: float, seed: int, *,
                     identity: dict[str, Any], network: dict | None = None, root: str | Path | None = None,
                     module_args: dict | None = None, trainer: dict | None = None, progress: bool = False) -> Path:
    """Train a tiny Llama (`network`: a CausalLM spec, default a fresh TINY_SIZE one) on `data` (a DataModule or a
    DataLoader of token batches) with AdamW, and save it with its tokenizer to `out`. `identity` says what defines
    the run (an interrupted build resumes the run of the same identity from its folder under `root`)."""
    from lit_unlearn.launch.runs import RunSpec, launch

    out = Path(out)
    model = {"class_path": "lit_unlearn.modules.SupervisedModule",
             "init_args": {"network": network or tiny_network_spec(len(tokenizer), seed), "lr": lr,
                           **(module_args or {})}}
    launched = launch(RunSpec(root or out.parent / ".runs" / out.name, model, data,
                              trainer={"max_epochs": epochs, "limit_val_batches": 0, **(trainer or {})}, seed=seed,
                              identity={"model": model, **identity}, progress=progress))
    launched.model.network.save_pretrained(out)
    tokenizer.save_pretrained(str(out))
    return out
