"""MUSE (Shi et al. 2024; muse-bench/MUSE-News, muse-bench/MUSE-Books): its layout, loading, and unlearning batches.

The hub datasets have one config per use, each with named splits:

    raw       forget, retain1, retain2, holdout        {"text"}: the corpora (unlearn on forget, keep retain1)
    knowmem   forget_qa, retain_qa, retain_qa_icl, ... {"question", "answer"}: knowledge memorisation QA
    verbmem   forget                                   {"prompt", "gt"}: verbatim memorisation
    privleak  forget, retain, holdout                  {"text"}: membership inference
    scal      forget_1 .. forget_4                     {"text"}: growing forget sets (News; scalability)
    sust      forget_1 .. forget_4                     {"text"}: successive requests (News; sustainability)

A local copy uses MUSE's own `load_data.py` layout, `FOLDER/{config}/{split}.json` (JSON lists; raw and privleak
files are lists of strings), which is also what `write_muse_json` (the generated stand-in) writes. MUSE-Books has
no knowmem QA; its KnowMem metrics are then reported as missing.

`MuseDataModule` gives (retain, forget) batches of `max_length`-token windows of the raw texts, the loss on every
token, as MUSE's baselines train; `forget="scal/forget_2"` (or "sust/forget_3") unlearns one of those folds instead
of raw/forget. Running the scalability and sustainability studies (one unlearning per fold, sequentially for
`sust`) is left to the user's loop over that argument.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset

from lit_unlearn.data.datamodules import PairedDataModule
from lit_unlearn.data.tofu import _read_local, pad_collate
from lit_unlearn.core.errors import MissingFileError, UserError
from lit_unlearn.core.plug_points import DataFromSource, TextsSource

__all__ = ["MuseSource", "MuseDataModule", "TextWindows", "MUSE_LAYOUT"]

MUSE_LAYOUT = {"raw": ("forget", "retain1", "retain2", "holdout"),
               "knowmem": ("forget_qa", "retain_qa", "forget_qa_icl", "retain_qa_icl"),
               "verbmem": ("forget",), "privleak": ("forget", "retain", "holdout"),
               "scal": tuple(f"forget_{k}" for k in range(1, 5)), "sust": tuple(f"forget_{k}" for k in range(1, 5))}
COLUMNS = {"raw": ("text",), "privleak": ("text",), "knowmem": ("question", "answer"), "verbmem": ("prompt", "gt"),
           "scal": ("text",), "sust": ("text",)}


class MuseSource(TextsSource):
    def __init__(self, path: str = "muse-bench/MUSE-News", cache_dir: str | None = None) -> None:
        """path: a hub name (muse-bench/MUSE-News, muse-bench/MUSE-Books) or a local folder in MUSE's layout."""
        self.path, self.cache_dir = path, cache_dir
        self._loaded: dict[tuple[str, str], list[dict]] = {}  # each split read once (evaluations reread them)

    @property
    def is_local(self) -> bool:
        return Path(self.path).exists()

    def load(self, config: str, split: str) -> list[dict]:
        """Rows of one config's split as dicts (strings become {"text": ...}); columns checked. Read once, then
        shared: do not modify them."""
        if (config, split) in self._loaded:
            return self._loaded[(config, split)]
        if config not in MUSE_LAYOUT:
            raise UserError(f"MUSE has no config {config!r}; its configs are {sorted(MUSE_LAYOUT)}")
        if self.is_local:
            rows = _read_local(Path(self.path) / config, split)
        else:
            rows = self._load_hub(config, split)
        rows = [{"text": r} if isinstance(r, str) else dict(r) for r in rows]
        if not rows:
            raise UserError(f"MUSE {config}/{split} in {self.path} is empty")
        missing = sorted({c for c in COLUMNS[config] if c not in rows[0]})
        if missing:
            raise UserError(f"MUSE {config}/{split} in {self.path} has no column(s) {missing} (it has "
                            f"{sorted(rows[0])})")
        self._loaded[(config, split)] = rows
        return rows

    def _load_hub(self, config: str, split: str) -> list[dict]:
        from lit_unlearn.core.hub import hub_error, resolve_pretrained

        resolve_pretrained(self.path, "MUSE data", "`lit_unlearn.data.write_muse_json` writes an offline stand-in")
        import datasets

        try:
            return list(datasets.load_dataset(self.path, config, split=split, cache_dir=self.cache_dir))
        except (OSError, ConnectionError) as err:
            raise hub_error("dataset", f"{self.path}:{config}/{split}", err) from err

    def has(self, config: str, split: str) -> bool:
        try:
            self.load(config, split)
            return True
        except (MissingFileError, FileNotFoundError, ValueError):
            return False

    def texts(self, config: str, split: str) -> list[str]:
        return [r["text"] for r in self.load(config, split)]


class TextWindows(Dataset):
    """Texts tokenised (BOS + text + EOS) and cut into windows of at most `max_length` tokens; the loss is on
    every token."""

    def __init__(self, texts: list[str], tokenizer: Any, max_length: int = 2048) -> None:
        if not texts:
            raise UserError("no texts to train on")
        self.items = []
        for text in texts:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            ids = ([tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []) + ids + \
                ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])
            for i in range(0, len(ids), max_length):
                window = torch.tensor(ids[i:i + max_length])
                if len(window) > 1:
                    self.items.append({"input_ids": window, "labels": window.clone()})

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        return self.items[i]


class MuseDataModule(PairedDataModule, DataFromSource):
    """(retain, forget) batches of MUSE's raw texts: forget = raw/forget, retain = raw/retain1 (MUSE's choice;
    retain2 is left for evaluation)."""

    def __init__(self, source: MuseSource | None = None, tokenizer: Any = None, max_length: int = 2048,
                 retain_split: str = "retain1", retain_batch_size: int = 32, forget_batch_size: int = 32,
                 eval_batch_size: int = 32, seed: int = 0, num_workers: int = 0, forget: str = "raw/forget",
                 micro_batch_size: int | None = None) -> None:
        """forget: "CONFIG/SPLIT" of the texts to unlearn (raw/forget, or a scal / sust fold such as scal/forget_2);
        micro_batch_size: the most items of each side one GPU passes through the model at once (None: all)."""
        super().__init__(retain_batch_size, forget_batch_size, eval_batch_size, seed, num_workers, micro_batch_size)
        config, _, split = forget.partition("/")
        if config not in ("raw", "scal", "sust") or split not in MUSE_LAYOUT.get(config, ()):
            raise UserError(f"forget={forget!r}: use raw/forget or scal|sust/forget_1..4")
        self.forget = (config, split)
        self.source = source or MuseSource()
        if tokenizer is None:
            raise UserError("MuseDataModule needs a tokenizer (an object, a hub name or a local folder)")
        if isinstance(tokenizer, (str, Path)):
            from lit_unlearn.data.tokenizer import load_tokenizer

            tokenizer = load_tokenizer(str(tokenizer))
        if retain_split not in MUSE_LAYOUT["raw"]:
            raise UserError(f"retain_split={retain_split!r}: choose one of {MUSE_LAYOUT['raw']}")
        self.tokenizer, self.max_length, self.retain_split = tokenizer, max_length, retain_split
        self.collate_fn = pad_collate(tokenizer.pad_token_id)

    def build(self):
        forget = TextWindows(self.source.texts(*self.forget), self.tokenizer, self.max_length)
        retain = TextWindows(self.source.texts("raw", self.retain_split), self.tokenizer, self.max_length)
        return retain, forget, {"forget": forget, "retain": retain}
