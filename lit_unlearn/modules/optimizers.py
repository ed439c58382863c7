"""The optimizers a loss-based trainer can choose (`optimizer: sgd | adam | adamw`), checked at construction and
built the same way by every module that offers the choice."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from lit_unlearn.core.errors import UserError

__all__ = ["OPTIMIZERS", "build_optimizer", "check_optimizer"]

OPTIMIZERS = ("sgd", "adam", "adamw")


def check_optimizer(name: str) -> None:
    if name not in OPTIMIZERS:
        raise UserError(f"optimizer={name!r}: choose one of {OPTIMIZERS}")


def build_optimizer(name: str, params: Iterable[nn.Parameter], lr: float, momentum: float = 0.0,
                    weight_decay: float = 0.0) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
    return cls(params, lr=lr, weight_decay=weight_decay)
