"""Data: image and text sources, forget-set specifications, paired batch streams and the DataModules.

Names load on first use (PEP 562), so that a caller that only reads and scores data (the evaluation) does not
import Lightning with the DataModules."""

from __future__ import annotations

import importlib

_WHERE = {
    "ArrayDataset": "lit_unlearn.data.arrays",
    "ImageSource": "lit_unlearn.data.arrays",
    "ImageSplits": "lit_unlearn.data.arrays",
    "Cifar10Source": "lit_unlearn.data.cifar10",
    "read_cifar10_batch": "lit_unlearn.data.cifar10",
    "ClassificationDataModule": "lit_unlearn.data.datamodules",
    "PairedDataModule": "lit_unlearn.data.datamodules",
    "UnlearningDataModule": "lit_unlearn.data.datamodules",
    "DigitsSource": "lit_unlearn.data.digits",
    "ClassForget": "lit_unlearn.data.forget_sets",
    "ForgetSpec": "lit_unlearn.data.forget_sets",
    "IndexForget": "lit_unlearn.data.forget_sets",
    "MixtureForget": "lit_unlearn.data.forget_sets",
    "RandomForget": "lit_unlearn.data.forget_sets",
    "check_split": "lit_unlearn.data.forget_sets",
    "PairedBatchStream": "lit_unlearn.data.paired",
    "ResumableDataLoader": "lit_unlearn.data.paired",
    "stream_positions": "lit_unlearn.data.paired",
    "generate_fictitious_tofu": "lit_unlearn.data.fictitious_authors",
    "write_tofu_json": "lit_unlearn.data.fictitious_authors",
    "QAFinetuneDataModule": "lit_unlearn.data.tofu",
    "QAFormatter": "lit_unlearn.data.qa_format",
    "TofuDataModule": "lit_unlearn.data.tofu",
    "QADataModule": "lit_unlearn.data.tofu",
    "OwnData": "lit_unlearn.data.own_data",
    "TofuSource": "lit_unlearn.data.tofu_source",
    "TokenizedQA": "lit_unlearn.data.qa_format",
    "WaterDrumSource": "lit_unlearn.data.tofu_source",
    "pad_collate": "lit_unlearn.data.qa_format",
    "train_bpe_tokenizer": "lit_unlearn.data.tokenizer",
    "generate_fictitious_muse": "lit_unlearn.data.fictitious_news",
    "write_muse_json": "lit_unlearn.data.fictitious_news",
    "MuseDataModule": "lit_unlearn.data.muse",
    "MuseSource": "lit_unlearn.data.muse",
    "TextWindows": "lit_unlearn.data.muse",
}

__all__ = list(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_WHERE))
