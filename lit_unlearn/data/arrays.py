"""In-memory (image, label) datasets and the common interface every image source returns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

__all__ = ["ArrayDataset", "ImageSplits", "ImageSource"]


class ArrayDataset(Dataset):
    """Images (N, C, H, W) float32 and integer labels (N,), indexed directly (no per-item decoding)."""

    def __init__(self, images: Tensor, labels: Tensor) -> None:
        if images.ndim != 4:
            raise ValueError(f"images must be shaped (N, C, H, W), got {tuple(images.shape)}")
        if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
            raise ValueError(f"labels must be shaped ({images.shape[0]},), got {tuple(labels.shape)}")
        self.images = images.float().contiguous()
        self.labels = labels.long().contiguous()

    def __len__(self) -> int:
        return self.labels.shape[0]

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        return self.images[i], self.labels[i]

    def get_batch(self, indices: np.ndarray | Tensor) -> tuple[Tensor, Tensor]:
        idx = torch.as_tensor(np.asarray(indices), dtype=torch.long)
        return self.images[idx], self.labels[idx]

    def subset(self, indices: np.ndarray | Tensor) -> ArrayDataset:
        idx = torch.as_tensor(np.asarray(indices), dtype=torch.long)
        return ArrayDataset(self.images[idx], self.labels[idx])


@dataclass
class ImageSplits:
    train: ArrayDataset
    test: ArrayDataset
    num_classes: int
    in_channels: int


class ImageSource:
    """Where images come from: `load()` returns the train/test splits (subclasses: digits, CIFAR-10)."""

    def load(self) -> ImageSplits:
        raise NotImplementedError
