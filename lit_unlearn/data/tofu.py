"""TOFU and WaterDrum-TOFU: split loading (HF hub or local files), QA formatting, and the paired DataModule.

Sources
- `TofuSource("locuslab/TOFU")`: hub dataset; each split is a config (`forget10`, `retain90`,
  `forget10_perturbed`, `retain_perturbed`, `real_authors_perturbed`, `world_facts_perturbed`, `holdout10`).
- `TofuSource("path/to/folder")`: the same split names as `{split}.json`, `.jsonl` or `.parquet` files
  (what `write_tofu_json` produces for the generated fictitious-author set).
- `WaterDrumSource("Glow-AI/WaterDrum-TOFU")`: configs `forget_01/05/10` with splits `forget`/`retain`
  (hub), or a folder with `forget_10/forget.json` etc. It has no perturbed answers: truth-ratio metrics
  need a TOFU-format `eval_source`.

Formatting: the loss is on answer tokens only. `template="plain"` gives "Question: …\nAnswer: …",
"llama2" the Llama-2 chat form "[INST] … [/INST] …", "chat" the tokenizer's own chat template.
`input_format="lit-unlearn"` (default) tokenises the prompt and " answer" separately and appends EOS, so the
answer tokens never depend on the prompt; `input_format="open-unlearning"` tokenises prompt + answer as one
string with open-unlearning's template tags (plain: "Question: …\nAnswer: …", llama2: "[INST] … [/INST]…" with
no space before the answer), as its published numbers were produced (docs/llm.md, "Differences").

Refusals: `TofuDataModule(alternate_answers="generated" | path)` adds a refusal to every forget item (as
`alt_input_ids` / `alt_labels`, padded by `pad_collate`), which IdkDPO prefers to the forget answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from lit_unlearn.errors import MissingFileError, UserError
from lit_unlearn.algorithms.losses import IGNORE_INDEX
from lit_unlearn.data.datamodules import PairedDataModule

__all__ = ["TofuSource", "WaterDrumSource", "QAFormatter", "TokenizedQA", "pad_collate", "TofuDataModule",
           "FORGET_SPLITS", "QAFinetuneDataModule", "INPUT_FORMATS"]

FORGET_SPLITS = {"01": ("forget01", "retain99"), "05": ("forget05", "retain95"), "10": ("forget10", "retain90")}
TEMPLATES = ("plain", "llama2", "chat")
INPUT_FORMATS = ("lit-unlearn", "open-unlearning")
# open-unlearning's template tags (configs/model/*.yaml): user start, user end, assistant start.
OPEN_UNLEARNING_TAGS = {"plain": ("Question: ", "\n", "Answer: "), "llama2": ("[INST] ", " [/INST]", "")}


def _read_local(folder: Path, split: str) -> list[dict]:
    for ext in (".json", ".jsonl", ".parquet"):
        path = folder / f"{split}{ext}"
        if path.is_file():
            try:
                if ext == ".json":
                    rows = json.loads(path.read_text())
                elif ext == ".jsonl":
                    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
                else:
                    import pandas as pd

                    rows = pd.read_parquet(path).to_dict("records")
            except json.JSONDecodeError as err:
                raise UserError(f"{path} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); "
                                "a split is a JSON list of records, or JSON lines") from None
            except (OSError, ValueError) as err:  # an unreadable parquet file
                raise UserError(f"{path} cannot be read ({str(err).splitlines()[0]})") from None
            if not isinstance(rows, list):
                raise UserError(f"{path} is not a JSON list (of records, or of texts)")
            return rows
    raise MissingFileError(f"split {split!r} not found in {folder} (looked for {split}.json / .jsonl / .parquet)")


QA_COLUMNS = ("question", "answer")
PERTURBED_COLUMNS = ("question", "answer", "paraphrased_answer", "perturbed_answer")
EVAL_COLUMNS = {"forget": PERTURBED_COLUMNS, "retain": PERTURBED_COLUMNS,
                "real_authors": ("question", "answer", "perturbed_answer"),
                "world_facts": ("question", "answer", "perturbed_answer"), "holdout": QA_COLUMNS}


def check_columns(rows: list[dict], required: tuple[str, ...], split: str, where: str) -> None:
    """Refuse a split whose rows lack a column the evaluation needs, before any model is run."""
    if not rows:
        raise UserError(f"split {split!r} in {where} is empty")
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    if bad is not None:
        raise UserError(f"split {split!r} in {where}: row {bad} is not a record (an object with question, answer, "
                        f"...): {str(rows[bad])[:60]!r}")
    missing = sorted({c for r in rows for c in required if c not in r})
    if missing:
        bad = [i for i, r in enumerate(rows) if any(c not in r for c in missing)]
        have = sorted(rows[bad[0]])
        rows_text = f"row {bad[0]}" if len(bad) == 1 else f"{len(bad)} rows (the first: row {bad[0]})"
        if len(bad) == len(rows):
            rows_text = "every row"
        raise UserError(f"split {split!r} in {where}: {rows_text} has no column(s) {missing} (it has {have}, question "
                        f"{str(rows[bad[0]].get('question', ''))[:50]!r}); the TOFU evaluation needs TOFU's "
                        "*_perturbed splits (paraphrased_answer, perturbed_answer)")
    if "perturbed_answer" in required:
        for i, r in enumerate(rows):
            answers = r["perturbed_answer"]
            if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
                raise UserError(f"split {split!r} in {where}: row {i}'s perturbed_answer is not a non-empty list of "
                                f"strings (got {type(answers).__name__}): TOFU's perturbed splits hold a list per row")


class TofuSource:
    def __init__(self, path: str = "locuslab/TOFU", forget_level: str = "10", cache_dir: str | None = None) -> None:
        """
        Args:
            path: HF hub dataset name or a local folder of `{split}.json|jsonl|parquet`.
            forget_level: "01", "05" or "10" (forget01 + retain99, …).
        """
        if forget_level not in FORGET_SPLITS:
            raise UserError(f"forget_level={forget_level!r}: choose one of {sorted(FORGET_SPLITS)}")
        self.path, self.forget_level, self.cache_dir = path, forget_level, cache_dir

    @property
    def is_local(self) -> bool:
        return Path(self.path).exists()

    def load_split(self, split: str) -> list[dict]:
        if self.is_local:
            return _read_local(Path(self.path), split)
        from lit_unlearn.hub import hub_error, resolve_pretrained

        resolve_pretrained(self.path, "TOFU data", "`lit-unlearn tofu-demo` writes runs/tofu/data")
        import datasets

        try:
            return list(datasets.load_dataset(self.path, split, split="train", cache_dir=self.cache_dir))
        except (OSError, ConnectionError) as err:
            raise hub_error("dataset", f"{self.path}:{split}", err) from err

    def forget_retain(self) -> tuple[list[dict], list[dict]]:
        forget, retain = FORGET_SPLITS[self.forget_level]
        rows = self.load_split(forget), self.load_split(retain)
        for split, data in zip((forget, retain), rows):
            check_columns(data, QA_COLUMNS, split, self.path)
        return rows

    def eval_splits(self) -> dict[str, list[dict]]:
        """The TOFU evaluation sets, their columns checked before any work; missing optional ones (real authors,
        world facts, holdout) are skipped."""
        out = {"forget": self.load_split(f"forget{self.forget_level}_perturbed"),
               "retain": self.load_split("retain_perturbed")}
        for name, split in (("real_authors", "real_authors_perturbed"), ("world_facts", "world_facts_perturbed"),
                            ("holdout", f"holdout{self.forget_level}")):
            try:
                out[name] = self.load_split(split)
            except FileNotFoundError:
                continue
        for name, rows in out.items():
            check_columns(rows, EVAL_COLUMNS[name], name, self.path)
        return out


class WaterDrumSource(TofuSource):
    def __init__(self, path: str = "Glow-AI/WaterDrum-TOFU", forget_level: str = "10", watermarked: bool = True,
                 cache_dir: str | None = None) -> None:
        super().__init__(path, forget_level, cache_dir)
        self.config = f"{'' if watermarked else 'unwatermarked_'}forget_{forget_level}"

    def _load(self, split: str) -> list[dict]:
        if self.is_local:
            return _read_local(Path(self.path) / self.config, split)
        import datasets

        return list(datasets.load_dataset(self.path, self.config, split=split, cache_dir=self.cache_dir))

    def forget_retain(self) -> tuple[list[dict], list[dict]]:
        return self._load("forget"), self._load("retain")

    def eval_splits(self) -> dict[str, list[dict]]:
        forget, retain = self.forget_retain()
        return {"forget": forget, "retain": retain}


MAX_LENGTH = 512  # TOFU's and open-unlearning's: every TOFU answer fits with a Llama tokenizer


class QAFormatter:
    def __init__(self, tokenizer, template: str = "plain", max_length: int = MAX_LENGTH,
                 input_format: str = "lit-unlearn") -> None:
        if template not in TEMPLATES:
            raise UserError(f"template={template!r}: choose one of {TEMPLATES}")
        if input_format not in INPUT_FORMATS:
            raise UserError(f"input_format={input_format!r}: choose one of {INPUT_FORMATS}")
        if tokenizer.pad_token_id is None:
            raise UserError("the tokenizer has no pad token: set tokenizer.pad_token (e.g. to the eos token)")
        if not (isinstance(max_length, int) and max_length > 1):
            raise UserError(f"max_length must be an integer > 1, got {max_length!r}")
        self.tokenizer, self.template, self.max_length = tokenizer, template, max_length
        self.input_format = input_format
        self.truncated: set[tuple[str, str]] = set()  # (question, answer) pairs cut at max_length

    def prompt(self, question: str) -> str:
        if self.template == "plain":
            return f"Question: {question}\nAnswer:"
        if self.template == "llama2":
            return f"[INST] {question} [/INST]"
        return self.tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                                  add_generation_prompt=True)

    def prompt_ids(self, question: str) -> list[int]:
        tok = self.tokenizer
        if self.input_format == "open-unlearning":
            return self._open_unlearning(question, None)[1]
        ids = tok(self.prompt(question), add_special_tokens=False)["input_ids"]
        return ([tok.bos_token_id] if tok.bos_token_id is not None and self.template != "chat" else []) + ids

    def _open_unlearning(self, question: str, answer: str | None) -> tuple[list[int], list[int]]:
        """(prompt + answer ids, prompt ids) as open-unlearning's preprocess_chat_instance makes them."""
        tok = self.tokenizer
        if self.template == "chat":
            user = [{"role": "user", "content": question}]
            prompt = list(tok.apply_chat_template(user, tokenize=True, add_generation_prompt=True))
            if answer is None:
                return prompt, prompt
            full = list(tok.apply_chat_template(user + [{"role": "assistant", "content": answer}], tokenize=True,
                                                add_generation_prompt=False))
            return full, prompt
        start, end, assistant = OPEN_UNLEARNING_TAGS[self.template]
        text = start + question + end + assistant
        prompt = self._cut(text, question, answer)
        return (prompt if answer is None else self._cut(text + answer, question, answer)), prompt

    def _cut(self, text: str, question: str, answer: str | None) -> list[int]:
        """The tokenizer's ids of text, truncated at max_length as open-unlearning does, noting any cut."""
        ids = self.tokenizer(text, add_special_tokens=True)["input_ids"]
        if len(ids) <= self.max_length:
            return ids
        self.truncated.add((question, answer or ""))
        return self.tokenizer(text, add_special_tokens=True, max_length=self.max_length, truncation=True)["input_ids"]

    def encode(self, question: str, answer: str) -> dict[str, Tensor]:
        """input_ids = prompt + " answer" + eos; labels = IGNORE_INDEX on the prompt (loss on the answer only)."""
        tok = self.tokenizer
        if self.input_format == "open-unlearning":
            ids, prompt = self._open_unlearning(question, answer)
            if tok.eos_token_id is not None and ids[-1] != tok.eos_token_id:
                ids = ids + [tok.eos_token_id]
            if len(prompt) >= len(ids):
                raise UserError(f"max_length={self.max_length} leaves no answer token for question {question[:60]!r}")
            labels = [IGNORE_INDEX] * len(prompt) + ids[len(prompt):]
            return {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels)}
        prompt = self.prompt_ids(question)
        answer_ids = tok(" " + answer.strip(), add_special_tokens=False)["input_ids"]
        if tok.eos_token_id is not None:
            answer_ids = answer_ids + [tok.eos_token_id]
        ids = prompt + answer_ids
        if len(ids) > self.max_length:
            self.truncated.add((question, answer))
            ids = ids[: self.max_length]
        n_prompt = min(len(prompt), len(ids))
        if n_prompt >= len(ids):
            raise UserError(f"max_length={self.max_length} leaves no answer token for question {question[:60]!r}")
        labels = [IGNORE_INDEX] * n_prompt + ids[n_prompt:]
        return {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels)}


class TokenizedQA(Dataset):
    def __init__(self, rows: list[dict], formatter: QAFormatter, answer_key: str = "answer",
                 alternates: list[str] | None = None, seed: int = 0) -> None:
        """alternates: answers of which each item gets one (drawn once, seeded) as alt_input_ids / alt_labels."""
        if not rows:
            raise UserError("empty QA split")
        missing = [k for k in ("question", answer_key) if k not in rows[0]]
        if missing:
            raise UserError(f"QA rows need columns {missing}; got {sorted(rows[0])}")
        self.rows = rows
        self.items = [formatter.encode(r["question"], r[answer_key]) for r in rows]
        if alternates:
            # Drawn once per item (open-unlearning draws per access): the same pairs in every epoch and on resume.
            picks = torch.randint(len(alternates), (len(rows),), generator=torch.Generator().manual_seed(seed))
            for item, r, k in zip(self.items, rows, picks.tolist()):
                alt = formatter.encode(r["question"], alternates[k])
                item["alt_input_ids"], item["alt_labels"] = alt["input_ids"], alt["labels"]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        return self.items[i]


def pad_collate(pad_id: int):
    """Right-pad a list of {input_ids, labels} to the longest; attention_mask marks the real tokens. Alternate
    answers (alt_input_ids / alt_labels) are padded the same way, to their own longest, with alt_attention_mask."""
    def pad(items: list[dict[str, Tensor]], prefix: str) -> dict[str, Tensor]:
        n = max(len(it[f"{prefix}input_ids"]) for it in items)
        ids = torch.full((len(items), n), pad_id, dtype=torch.long)
        labels = torch.full((len(items), n), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(items), n), dtype=torch.long)
        for i, it in enumerate(items):
            k = len(it[f"{prefix}input_ids"])
            ids[i, :k], labels[i, :k], mask[i, :k] = it[f"{prefix}input_ids"], it[f"{prefix}labels"], 1
        return {f"{prefix}input_ids": ids, f"{prefix}attention_mask": mask, f"{prefix}labels": labels}

    def collate(items: list[dict[str, Tensor]]) -> dict[str, Tensor]:
        batch = pad(items, "")
        if "alt_input_ids" in items[0]:
            batch.update(pad(items, "alt_"))
        return batch

    return collate


class TofuDataModule(PairedDataModule):
    """(retain, forget) QA batches for unlearning a causal LM, plus loss/accuracy eval sets."""

    def __init__(self, source: TofuSource | None = None, tokenizer: Any = None, template: str = "plain",
                 max_length: int = MAX_LENGTH, retain_batch_size: int = 32, forget_batch_size: int = 32,
                 eval_batch_size: int = 64, seed: int = 0, num_workers: int = 0,
                 alternate_answers: str | None = None, input_format: str = "lit-unlearn") -> None:
        """
        Args:
            source: TofuSource / WaterDrumSource (default: the hub's locuslab/TOFU, forget10).
            tokenizer: a `transformers` tokenizer or its name/path (AutoTokenizer.from_pretrained).
            alternate_answers: "generated" (lit_unlearn.data.refusals) or a file of refusals, one per line (e.g.
                TOFU's idontknow.jsonl): every forget item gets one, for IdkDPO.
            input_format: "lit-unlearn" or "open-unlearning" (how prompt and answer are tokenised; see above).
        """
        super().__init__(retain_batch_size, forget_batch_size, eval_batch_size, seed, num_workers)
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
        return retain, forget, evals


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
