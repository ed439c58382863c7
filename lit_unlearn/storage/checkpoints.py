"""Loading a target model's weights from a Lightning checkpoint or a plain state-dict file."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from lit_unlearn.core.errors import MissingFileError, UserError

__all__ = ["load_network_weights"]


def load_network_weights(network: nn.Module, path: str, prefix: str = "network.") -> None:
    """Load weights saved by `lit-unlearn pretrain` (a Lightning checkpoint whose module holds `network`) or a
    plain `torch.save(model.state_dict())` file into `network`, strictly."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise MissingFileError(
            f"target checkpoint {file} not found. Train the target first (`lit-unlearn pretrain ...`) "
            "or point model.init_args.target_ckpt at an existing .ckpt / state-dict file."
        )
    if file.is_dir():
        raise UserError(f"target checkpoint {file} is a folder (a sharded DeepSpeed checkpoint?): give its .ckpt "
                        "file, or consolidate it first (`lit-unlearn export`)")
    from lit_unlearn.storage.safe_load import load_checkpoint

    try:
        blob = load_checkpoint(file)
    except (RuntimeError, EOFError, OSError) as err:  # truncated zip, not a torch file, unreadable
        reason = str(err).split(".")[0].strip()
        raise UserError(f"target checkpoint {file} cannot be read ({reason}): it is truncated or not a checkpoint; "
                        "use the run's checkpoints/last.ckpt or train the target again (`lit-unlearn pretrain`)") \
            from None
    state = blob.get("state_dict", blob) if isinstance(blob, dict) else None
    if not isinstance(state, dict):
        raise UserError(f"{file} holds neither a Lightning checkpoint nor a state dict")
    if any(k.startswith(prefix) for k in state):
        state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    result = network.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise UserError(
            f"{file} does not match the configured network: missing {result.missing_keys[:5]}, unexpected "
            f"{result.unexpected_keys[:5]}. Configure the same architecture (depth, width, num_classes, "
            "in_channels) that the target was trained with."
        )
