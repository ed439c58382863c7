"""Checkpoint files that are either the old version or the new one, never a torn mix, whenever a kill comes.

Lightning serialises a checkpoint to memory, then writes it through a temporary file made by `mkstemp()` in
$TMPDIR and moved over the target. When $TMPDIR is another filesystem (node-local /tmp against a shared
checkpoint disk, the usual cluster layout) that move is a copy, and a kill during it leaves a truncated file
(seen: a 0-byte last.ckpt that blocked resume). Here the temporary file lives beside the target, is fsynced,
renamed over it (atomic on one filesystem) and the directory entry fsynced too.

`checkpoint_is_loadable` is the cheap integrity test resume uses to skip a damaged checkpoint: a torch.save file
is a zip archive whose central directory is written last, so a truncated file is not a readable zip; a
DeepSpeed checkpoint folder counts only when its completion marker exists.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from lit_unlearn.storage.files import atomic_write_bytes

__all__ = ["AtomicCheckpointIO", "atomic_write_bytes", "checkpoint_is_loadable", "COMPLETE_MARKER"]

COMPLETE_MARKER = "CHECKPOINT_COMPLETE"  # written last into a sharded (DeepSpeed) checkpoint folder


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch checkpoint IO with writes that survive a kill (temporary file in the same folder,
    fsync, rename)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        atomic_write_bytes(path, buffer.getvalue())


def checkpoint_is_loadable(path: str | Path) -> bool:
    """A checkpoint file whose zip structure is intact, or a sharded checkpoint folder with its completion marker."""
    path = Path(path)
    if path.is_dir():
        return (path / COMPLETE_MARKER).is_file()
    if not path.is_file() or path.stat().st_size == 0:
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith("data.pkl") for name in archive.namelist())
    except (zipfile.BadZipFile, OSError):
        return False
