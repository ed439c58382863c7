"""Compute counted as the field counts it, in token passes: a forward pass costs one unit per token and a backward
pass two, so a training step costs 3 per token it reads and a frozen model's forward 1. Every compute share in the
project (unlearning, distillation, a reset's Fisher passes, the retain-only fine-tune it is compared with) is a ratio
of these units."""

from __future__ import annotations

__all__ = ["FORWARD_UNITS", "TRAINING_UNITS", "training_units"]

FORWARD_UNITS = 1
TRAINING_UNITS = 3  # forward 1 + backward 2


def training_units(tokens: int, passes: float = 1):
    """The units of `passes` training passes over `tokens` tokens (an int for whole passes)."""
    return TRAINING_UNITS * passes * tokens
