"""CIFAR-10 from the standard python pickles (`cifar-10-batches-py/data_batch_1..5`, `test_batch`).

Nothing is downloaded: point `root` at the extracted archive (https://www.cs.toronto.edu/~kriz/cifar.html,
"CIFAR-10 python version"), either the `cifar-10-batches-py` folder itself or its parent.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from lit_unlearn.core.errors import MissingFileError, UserError
from lit_unlearn.data.arrays import ArrayDataset, ImageSource, ImageSplits

__all__ = ["Cifar10Source", "read_cifar10_batch", "CIFAR10_MEAN", "CIFAR10_STD"]

TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_FILES = ["test_batch"]
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


def read_cifar10_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One pickle → (uint8 images (N, 3, 32, 32), int64 labels (N,))."""
    with open(path, "rb") as fh:
        entry = pickle.load(fh, encoding="bytes")
    try:
        data = entry[b"data"]
        labels = entry[b"labels"]
    except KeyError as err:
        raise UserError(f"{path} is not a CIFAR-10 python batch (no {err.args[0]!r} key)") from None
    data = np.asarray(data, dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise UserError(f"{path}: expected data shaped (N, 3072), got {data.shape}")
    return data.reshape(-1, 3, 32, 32), np.asarray(labels, dtype=np.int64)


class Cifar10Source(ImageSource):
    def __init__(self, root: str = "data/cifar-10-batches-py") -> None:
        self.root = root

    def _folder(self) -> Path:
        root = Path(self.root).expanduser()
        for candidate in (root, root / "cifar-10-batches-py"):
            if all((candidate / f).is_file() for f in TRAIN_FILES + TEST_FILES):
                return candidate
        missing = [f for f in TRAIN_FILES + TEST_FILES if not (root / f).is_file()]
        raise MissingFileError(
            f"CIFAR-10 python pickles not found under {root.resolve()} (missing: {', '.join(missing)}). "
            "Download 'cifar-10-python.tar.gz' from https://www.cs.toronto.edu/~kriz/cifar.html, extract it, and "
            "set data.init_args.dataset.init_args.root to the 'cifar-10-batches-py' folder. "
            "For an offline run use lit_unlearn.data.DigitsSource instead."
        )

    def load(self) -> ImageSplits:
        folder = self._folder()

        def read(files: list[str]) -> ArrayDataset:
            parts = [read_cifar10_batch(folder / f) for f in files]
            images = np.concatenate([p[0] for p in parts]).astype(np.float32) / 255.0
            mean = np.asarray(CIFAR10_MEAN, dtype=np.float32)[None, :, None, None]
            std = np.asarray(CIFAR10_STD, dtype=np.float32)[None, :, None, None]
            labels = np.concatenate([p[1] for p in parts])
            return ArrayDataset(torch.from_numpy((images - mean) / std), torch.from_numpy(labels))

        return ImageSplits(train=read(TRAIN_FILES), test=read(TEST_FILES), num_classes=10, in_channels=3)
