from lit_unlearn.data.arrays import ArrayDataset, ImageSource, ImageSplits
from lit_unlearn.data.cifar10 import Cifar10Source, read_cifar10_batch
from lit_unlearn.data.datamodules import ClassificationDataModule, PairedDataModule, UnlearningDataModule
from lit_unlearn.data.digits import DigitsSource
from lit_unlearn.data.fictitious_authors import generate_fictitious_tofu, write_tofu_json
from lit_unlearn.data.fictitious_news import generate_fictitious_muse, write_muse_json
from lit_unlearn.data.forget_sets import ClassForget, ForgetSpec, IndexForget, MixtureForget, RandomForget, check_split
from lit_unlearn.data.tofu import (
    QAFinetuneDataModule,
    QAFormatter,
    TofuDataModule,
    TofuSource,
    TokenizedQA,
    WaterDrumSource,
    pad_collate,
)
from lit_unlearn.data.muse import MuseDataModule, MuseSource, TextWindows
from lit_unlearn.data.tokenizer import train_bpe_tokenizer
from lit_unlearn.data.paired import PairedBatchStream, ResumableDataLoader, stream_positions

__all__ = [
    "ArrayDataset", "ImageSource", "ImageSplits", "Cifar10Source", "read_cifar10_batch",
    "ClassificationDataModule", "PairedDataModule", "UnlearningDataModule", "DigitsSource",
    "ClassForget", "ForgetSpec", "IndexForget", "MixtureForget", "RandomForget", "check_split",
    "PairedBatchStream", "ResumableDataLoader", "stream_positions", "generate_fictitious_tofu", "write_tofu_json",
    "QAFinetuneDataModule", "QAFormatter", "TofuDataModule", "TofuSource", "TokenizedQA", "WaterDrumSource",
    "pad_collate", "train_bpe_tokenizer", "generate_fictitious_muse", "write_muse_json", "MuseDataModule",
    "MuseSource", "TextWindows",
]
