"""scikit-learn's bundled handwritten digits (1,797 8×8 greyscale images, 10 classes): the offline stand-in
for CIFAR-10 in the embedded default and the tests. Ships with scikit-learn, so nothing is downloaded."""

from __future__ import annotations

import numpy as np
import torch

from lit_unlearn.core.errors import UserError
from lit_unlearn.data.arrays import ArrayDataset, ImageSource, ImageSplits

__all__ = ["DigitsSource"]


class DigitsSource(ImageSource):
    """Stratified, seeded train/test split of the digits, standardised with the train split's statistics."""

    def __init__(self, test_fraction: float = 0.2, seed: int = 0) -> None:
        if not 0.0 < test_fraction < 1.0:
            raise UserError(f"test_fraction must be in (0, 1), got {test_fraction}")
        self.test_fraction = test_fraction
        self.seed = seed

    def load(self) -> ImageSplits:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        digits = load_digits()
        images = digits.images.astype(np.float32)[:, None] / 16.0  # (N, 1, 8, 8) in [0, 1]
        labels = digits.target.astype(np.int64)
        tr, te = train_test_split(
            np.arange(len(labels)), test_size=self.test_fraction, random_state=self.seed, stratify=labels
        )
        mean, std = images[tr].mean(), images[tr].std()
        images = (images - mean) / std
        as_ds = lambda idx: ArrayDataset(torch.from_numpy(images[idx]), torch.from_numpy(labels[idx]))  # noqa: E731
        return ImageSplits(train=as_ds(np.sort(tr)), test=as_ds(np.sort(te)), num_classes=10, in_channels=1)
