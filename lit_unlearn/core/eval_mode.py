"""Evaluate a network in eval mode and give every submodule its own mode back afterwards.

`network.train(was_training)` would put *every* submodule back in training mode, which silently unfreezes
BatchNorm layers that an unlearning run keeps in eval mode on purpose; this restores each module's flag.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn

__all__ = ["eval_mode"]


@contextlib.contextmanager
def eval_mode(network: nn.Module) -> Iterator[None]:
    modes = [(m, m.training) for m in network.modules()]
    network.eval()
    try:
        yield
    finally:
        for m, mode in modes:
            m.training = mode
