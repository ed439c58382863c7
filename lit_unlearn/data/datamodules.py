"""LightningDataModules: plain classification (to train the target) and paired retain/forget (to unlearn)."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset

from lit_unlearn.core.errors import UserError
from lit_unlearn.data.arrays import ImageSource, ImageSplits
from lit_unlearn.data.digits import DigitsSource
from lit_unlearn.data.forget_sets import ClassForget, ForgetSpec
from lit_unlearn.data.paired import PairedBatchStream, ResumableDataLoader
from lit_unlearn.core.plug_points import EvalLoaders, MicroBatched

__all__ = ["ClassificationDataModule", "PairedDataModule", "UnlearningDataModule"]


class ClassificationDataModule(pl.LightningDataModule):
    """Train split for fitting, test split for validation. Defaults to the bundled digits.

    With `forget`, training uses the retain split only (the training set minus that forget set): this is how a
    retrained reference is made, with every other part of the recipe unchanged.
    """

    def __init__(self, dataset: ImageSource | None = None, batch_size: int = 128, eval_batch_size: int = 512,
                 num_workers: int = 0, seed: int = 0, forget: ForgetSpec | None = None) -> None:
        super().__init__()
        self.dataset = dataset or DigitsSource()
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.num_workers, self.seed, self.forget = num_workers, seed, forget
        self.splits: ImageSplits | None = None
        self.train_set: Dataset | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.splits is None:
            self.splits = self.dataset.load()
            self.train_set = self.splits.train
            if self.forget is not None:
                _, retain = self.forget.split(self.splits.train.labels.numpy())
                self.train_set = self.splits.train.subset(retain)

    def train_dataloader(self) -> DataLoader:
        gen = torch.Generator().manual_seed(self.seed)
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, generator=gen,
                          num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.splits.test, batch_size=self.eval_batch_size, num_workers=self.num_workers)

    test_dataloader = val_dataloader


class PairedDataModule(pl.LightningDataModule, EvalLoaders, MicroBatched):
    """Yields (retain_batch, forget_batch) per training step and one validation loader per named eval set.

    Subclasses implement `build()` → (retain dataset, forget dataset, {name: eval dataset}); the eval sets
    should include "forget" and "retain" (the unlearning trainers report their loss change from the start).
    """

    def __init__(self, retain_batch_size: int = 256, forget_batch_size: int = 64, eval_batch_size: int = 512,
                 seed: int = 0, num_workers: int = 0, micro_batch_size: int | None = None) -> None:
        """
        Args:
            retain_batch_size, forget_batch_size: the global batches, split over every process.
            micro_batch_size: the most items of each side one process passes through the model at once: its share
                of a global batch is split into equal micro-batches whose gradients are summed before the step
                (lit_unlearn.data.micro_batches). None: the whole share in one pass.
        """
        super().__init__()
        self.retain_batch_size, self.forget_batch_size = retain_batch_size, forget_batch_size
        self.micro_batch_size = micro_batch_size
        self.eval_batch_size, self.seed, self.num_workers = eval_batch_size, seed, num_workers
        self.retain_set: Dataset | None = None
        self.forget_set: Dataset | None = None
        self.eval_sets: dict[str, Dataset] = {}
        self.collate_fn = None  # e.g. padding for token batches; None: torch's default collate

    def build(self) -> tuple[Dataset, Dataset, dict[str, Dataset]]:
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.retain_set is None:
            self.retain_set, self.forget_set, self.eval_sets = self.build()
            if len(self.forget_set) == 0:
                raise UserError("the forget set is empty: nothing to unlearn")
            if len(self.retain_set) == 0:
                raise UserError("the retain set is empty")

    @property
    def eval_split_names(self) -> list[str]:
        return list(self.eval_sets)

    def train_dataloader(self) -> ResumableDataLoader:
        stream = PairedBatchStream(self.retain_set, self.forget_set, self.retain_batch_size,
                                   self.forget_batch_size, seed=self.seed, collate_fn=self.collate_fn)
        return ResumableDataLoader(stream, num_workers=self.num_workers)

    def eval_dataloaders(self) -> dict[str, DataLoader]:
        return {name: DataLoader(ds, batch_size=self.eval_batch_size, num_workers=self.num_workers,
                                 collate_fn=self.collate_fn)
                for name, ds in self.eval_sets.items()}

    def val_dataloader(self) -> list[DataLoader]:
        return list(self.eval_dataloaders().values())


class UnlearningDataModule(PairedDataModule):
    """Image unlearning: forget/retain are a split of the training set; eval sets add the test set, and for a
    class-based forget set also the test examples of the forgotten class and of the other classes."""

    def __init__(self, dataset: ImageSource | None = None, forget: ForgetSpec | None = None,
                 retain_batch_size: int = 256, forget_batch_size: int = 64, eval_batch_size: int = 512,
                 seed: int = 0, num_workers: int = 0, micro_batch_size: int | None = None) -> None:
        super().__init__(retain_batch_size, forget_batch_size, eval_batch_size, seed, num_workers, micro_batch_size)
        self.dataset = dataset or DigitsSource()
        self.forget = forget or ClassForget(0)
        self.forget_indices = self.retain_indices = None

    def build(self) -> tuple[Dataset, Dataset, dict[str, Dataset]]:
        splits = self.dataset.load()
        self.forget_indices, self.retain_indices = self.forget.split(splits.train.labels.numpy())
        forget_set = splits.train.subset(self.forget_indices)
        retain_set = splits.train.subset(self.retain_indices)
        evals: dict[str, Dataset] = {"forget": forget_set, "retain": retain_set, "test": splits.test}
        cls = self.forget.forget_class
        if cls is not None:
            in_class = (splits.test.labels == cls).numpy()
            evals["test_forget_class"] = splits.test.subset(in_class.nonzero()[0])
            evals["test_other_classes"] = splits.test.subset((~in_class).nonzero()[0])
        return retain_set, forget_set, evals
