"""The TOFU DataModules: paired (retain, forget) QA batches for unlearning, and plain QA fine-tuning batches (the
target and the retain-only model). The splits are read by lit_unlearn.data.tofu_source and formatted by
lit_unlearn.data.qa_format, which this module re-exports; reading and scoring TOFU (the evaluation) imports those
two alone and never Lightning.

Refusals: `TofuDataModule(alternate_answers="generated" | path)` adds a refusal to every forget item (as
`alt_input_ids` / `alt_labels`, padded by `pad_collate`), which IdkDPO prefers to the forget answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset

from lit_unlearn.data.datamodules import PairedDataModule
from lit_unlearn.data.own_data import OwnData
from lit_unlearn.data.qa_format import (  # noqa: F401  (re-exported: the TOFU names in one place)
    INPUT_FORMATS,
    MAX_LENGTH,
    OPEN_UNLEARNING_TAGS,
    TEMPLATES,
    QAFormatter,
    TokenizedQA,
    pad_collate,
)
from lit_unlearn.data.tofu_source import (  # noqa: F401
    EVAL_COLUMNS,
    FORGET_SPLITS,
    TofuSource,
    WaterDrumSource,
    _read_local,
    check_columns,
)
from lit_unlearn.core.errors import UserError
from lit_unlearn.core.plug_points import DataFromSource, QAFormatted

__all__ = ["TofuSource", "WaterDrumSource", "QAFormatter", "TokenizedQA", "pad_collate", "TofuDataModule", "QADataModule",
           "FORGET_SPLITS", "QAFinetuneDataModule", "INPUT_FORMATS"]


class TofuDataModule(PairedDataModule, DataFromSource, QAFormatted):
    """(retain, forget) QA batches for unlearning a causal LM, plus loss/accuracy eval sets."""

    def __init__(self, source: TofuSource | None = None, tokenizer: Any = None, template: str = "plain",
                 max_length: int = MAX_LENGTH, retain_batch_size: int = 32, forget_batch_size: int = 32,
                 eval_batch_size: int = 64, seed: int = 0, num_workers: int = 0,
                 alternate_answers: str | None = None, input_format: str = "lit-unlearn",
                 eval_items: int | None = None, micro_batch_size: int | None = None) -> None:
        """
        Args:
            source: TofuSource / WaterDrumSource (default: the hub's locuslab/TOFU, forget10).
            tokenizer: a `transformers` tokenizer or its name/path (AutoTokenizer.from_pretrained).
            alternate_answers: "generated" (lit_unlearn.data.refusals) or a file of refusals, one per line (e.g.
                TOFU's idontknow.jsonl): every forget item gets one, for IdkDPO.
            input_format: "lit-unlearn" or "open-unlearning" (how prompt and answer are tokenised; see above).
            eval_items: the run's before/after loss table reads the first N items of each split instead of all
                (retain90 is 3,600 items: two passes over it cost more than a short run at 7B on few devices).
            micro_batch_size: the most items of each side one process passes through the model at once (its share
                of the global batches split into equal micro-batches, gradients summed); None: all at once.
        """
        super().__init__(retain_batch_size, forget_batch_size, eval_batch_size, seed, num_workers, micro_batch_size)
        if eval_items is not None and eval_items < 1:
            raise UserError(f"eval_items must be ≥ 1 (or null for every item), got {eval_items}")
        self.eval_items = eval_items
        self.source = source or TofuSource()
        if tokenizer is None:
            raise UserError("TofuDataModule needs a tokenizer (an object, a hub name or a local folder)")
        if isinstance(tokenizer, (str, Path)):
            from lit_unlearn.data.tokenizer import load_tokenizer

            tokenizer = load_tokenizer(str(tokenizer))
        self.tokenizer = tokenizer
        self.formatter = QAFormatter(tokenizer, template, max_length, input_format)
        self.collate_fn = pad_collate(tokenizer.pad_token_id)
        self.alternates = None
        if alternate_answers is not None:
            from lit_unlearn.data.refusals import refusals

            self.alternates = refusals(alternate_answers, seed)

    def build(self):
        forget_rows, retain_rows = self.source.forget_retain()
        forget = TokenizedQA(forget_rows, self.formatter, alternates=self.alternates, seed=self.seed)
        retain = TokenizedQA(retain_rows, self.formatter)
        evals: dict[str, Dataset] = {"forget": forget, "retain": retain}
        if self.eval_items is not None:
            from torch.utils.data import Subset

            evals = {k: Subset(v, range(min(self.eval_items, len(v)))) for k, v in evals.items()}
        return retain, forget, evals


class QADataModule(TofuDataModule):
    """(retain, forget) batches of your own data: an `OwnData` source (lit_unlearn.data.own_data: QA pairs with any
    column names, chat messages or plain documents, under any file names), or any source with `forget_retain()` and
    `eval_splits()`. The same batches, evaluation sets and resume behaviour as TofuDataModule."""

    def __init__(self, source: OwnData | TofuSource | None, tokenizer: Any, template: str = "plain",
                 max_length: int = MAX_LENGTH, retain_batch_size: int = 32, forget_batch_size: int = 32,
                 eval_batch_size: int = 64, seed: int = 0, num_workers: int = 0,
                 alternate_answers: str | None = None, input_format: str = "lit-unlearn", eval_items: int | None = 200,
                 micro_batch_size: int | None = None) -> None:
        """
        Args:
            source: OwnData (forget, retain, holdout, evaluation files; format and column map).
            tokenizer: a `transformers` tokenizer or its folder / hub name (usually the model's folder).
            template: "plain" ("Question: …\nAnswer: …"), "llama2" ([INST] … [/INST]) or "chat" (the tokenizer's
                chat template).
            retain_batch_size: the global retain batch per step, split over every GPU of every node.
            forget_batch_size: the global forget batch per step.
            eval_items: the before/after loss table reads the first N items of each side (None: all).
            micro_batch_size: the most items of each side one GPU passes through the model at once; its share of the
                global batches is split into equal micro-batches (gradient accumulation). None: all at once.
        """
        if source is None:
            raise UserError("QADataModule needs a source: OwnData(forget=..., retain=...)")
        super().__init__(source, tokenizer, template, max_length, retain_batch_size, forget_batch_size,
                         eval_batch_size, seed, num_workers, alternate_answers, input_format, eval_items,
                         micro_batch_size)


class QAFinetuneDataModule(pl.LightningDataModule):
    """Plain fine-tuning batches over named QA splits (training the target on `full`, or the retain-only
    reference on `retain90`), validating on the forget split."""

    def __init__(self, source: TofuSource, tokenizer: Any, splits: tuple[str, ...] = ("full",), template: str = "plain",
                 max_length: int = MAX_LENGTH, batch_size: int = 32, seed: int = 0, val_split: str | None = None,
                 extra_rows: list[dict] | None = None, repeats: dict[str, int] | None = None,
                 length_buckets: int = 0) -> None:
        """
        Args:
            tokenizer: a `transformers` tokenizer or its name/path.
            extra_rows: QA records trained on besides the named splits (e.g. paraphrases as language knowledge).
            repeats: {split: n}: the split's items n times per epoch (e.g. short general-knowledge answers).
            length_buckets: 0 shuffles plainly; k > 0 batches items of similar length (groups of k batches sorted
                by length, lit_unlearn.data.bucketed_batches) with a loader that resumes mid-epoch exactly.
        """
        super().__init__()
        if isinstance(tokenizer, (str, Path)):
            from lit_unlearn.data.tokenizer import load_tokenizer

            tokenizer = load_tokenizer(str(tokenizer))
        self.source, self.tokenizer, self.splits = source, tokenizer, tuple(splits)
        self.extra_rows = list(extra_rows or [])
        self.repeats = dict(repeats or {})
        unknown = sorted(set(self.repeats) - set(self.splits))
        if unknown:
            raise UserError(f"repeats names splits {unknown} that are not trained on ({list(self.splits)})")
        self.formatter = QAFormatter(tokenizer, template, max_length)
        self.batch_size, self.seed, self.val_split = batch_size, seed, val_split
        self.length_buckets = length_buckets
        self.collate_fn = pad_collate(tokenizer.pad_token_id)
        self.train_set = self.val_set = None

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is None:
            rows = [r for split in self.splits for r in self.source.load_split(split) * self.repeats.get(split, 1)]
            self.train_set = TokenizedQA(rows + self.extra_rows, self.formatter)
            if self.val_split:
                self.val_set = TokenizedQA(self.source.load_split(self.val_split), self.formatter)

    def train_dataloader(self) -> DataLoader:
        if self.length_buckets:
            from lit_unlearn.data.bucketed_batches import LengthBucketedBatches
            from lit_unlearn.data.paired import ResumableDataLoader

            return ResumableDataLoader(LengthBucketedBatches(self.train_set, self.batch_size, self.seed,
                                                             self.length_buckets, self.collate_fn))
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, collate_fn=self.collate_fn,
                          generator=torch.Generator().manual_seed(self.seed))

    def val_dataloader(self) -> list[DataLoader]:
        if self.val_set is None:
            return []
        return [DataLoader(self.val_set, batch_size=self.batch_size, collate_fn=self.collate_fn)]
