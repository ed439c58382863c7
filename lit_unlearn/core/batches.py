"""What a batch is, in one place: images `(x, y)` or tokenised text `{"input_ids", "attention_mask", "labels"}`.

Every trainer and evaluation asks `logits_and_labels(network, batch)` and gets logits [B, ..., V] with labels
[B, ...] (IGNORE_INDEX where there is no target), so the same unlearning code runs on classifiers and on
causal language models.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["is_token_batch", "logits_and_labels", "batch_size", "to_device"]


def is_token_batch(batch: Any) -> bool:
    return isinstance(batch, Mapping) and "input_ids" in batch


def logits_and_labels(network: nn.Module, batch: Any) -> tuple[Tensor, Tensor]:
    if is_token_batch(batch):
        if "labels" not in batch:
            raise KeyError("a token batch needs 'labels' (IGNORE_INDEX on prompt and padding positions)")
        logits = network(batch["input_ids"], attention_mask=batch.get("attention_mask"))
        logits = getattr(logits, "logits", logits)
        # Causal LM: position t predicts token t+1.
        return logits[:, :-1], batch["labels"][:, 1:]
    x, y = batch
    return network(x), y


def batch_size(batch: Any) -> int:
    return batch["input_ids"].shape[0] if is_token_batch(batch) else batch[1].shape[0]


def to_device(batch: Any, device: torch.device | str) -> Any:
    if is_token_batch(batch):
        return {k: v.to(device) if isinstance(v, Tensor) else v for k, v in batch.items()}
    return type(batch)(t.to(device) for t in batch)
