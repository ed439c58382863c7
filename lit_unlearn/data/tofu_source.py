"""TOFU and WaterDrum-TOFU splits: from the HF hub or a local folder, their columns checked before any work.

- `TofuSource("locuslab/TOFU")`: hub dataset; each split is a config (`forget10`, `retain90`,
  `forget10_perturbed`, `retain_perturbed`, `real_authors_perturbed`, `world_facts_perturbed`, `holdout10`).
- `TofuSource("path/to/folder")`: the same split names as `{split}.json`, `.jsonl` or `.parquet` files
  (what `write_tofu_json` produces for the generated fictitious-author set).
- `WaterDrumSource("Glow-AI/WaterDrum-TOFU")`: configs `forget_01/05/10` with splits `forget`/`retain`
  (hub), or a folder with `forget_10/forget.json` etc. It has no perturbed answers: truth-ratio metrics
  need a TOFU-format `eval_source`.
"""

from __future__ import annotations

from pathlib import Path

from lit_unlearn.core.errors import MissingFileError, UserError
from lit_unlearn.core.plug_points import EvalSplitsSource

__all__ = ["TofuSource", "WaterDrumSource", "FORGET_SPLITS", "EVAL_COLUMNS", "check_columns", "tofu_layout"]

FORGET_SPLITS = {"01": ("forget01", "retain99"), "05": ("forget05", "retain95"), "10": ("forget10", "retain90")}


def _read_local(folder: Path, split: str) -> list[dict]:
    """A split of a local folder: `{split}.json`, `.jsonl` or `.parquet`, read by the one reader of data files
    (lit_unlearn.data.own_data.read_records)."""
    from lit_unlearn.data.own_data import read_records

    for ext in (".json", ".jsonl", ".parquet"):
        path = folder / f"{split}{ext}"
        if path.is_file():
            return read_records(path)
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


class TofuSource(EvalSplitsSource):
    def __init__(self, path: str = "locuslab/TOFU", forget_level: str = "10", cache_dir: str | None = None,
                 retain_duplicates: bool | float = False) -> None:
        """
        Args:
            path: HF hub dataset name or a local folder of `{split}.json|jsonl|parquet`.
            forget_level: "01", "05" or "10" (forget01 + retain99, …).
            retain_duplicates: the unlearning retain set also holds a semantic duplicate of every forget item (its
                paraphrased question and paraphrased answer, from TOFU's perturbed forget split): the hard case of
                the HAMU paper's WaterDrum-TOFU study, where forgetting an item and keeping its paraphrase conflict.
                WaterDrum's own duplicates are paraphrases made for it; TOFU's are the ones its truth ratio uses.
                A number in [0, 1] is the share of forget items whose duplicate joins (a fixed draw, the same on
                every run): the LLM counterpart of the vision suite's ρ-mixtures. The evaluation splits are unchanged.
        """
        if forget_level not in FORGET_SPLITS:
            raise UserError(f"forget_level={forget_level!r}: choose one of {sorted(FORGET_SPLITS)}")
        if not 0.0 <= float(retain_duplicates) <= 1.0:
            raise UserError(f"retain_duplicates={retain_duplicates!r}: give true/false or a share in [0, 1]")
        self.path, self.forget_level, self.cache_dir = path, forget_level, cache_dir
        self.retain_duplicates = retain_duplicates

    @property
    def is_local(self) -> bool:
        return Path(self.path).exists()

    def load_split(self, split: str) -> list[dict]:
        if self.is_local:
            return _read_local(Path(self.path), split)
        from lit_unlearn.core.hub import hub_error, resolve_pretrained

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
        if self.retain_duplicates:
            paraphrased = self.load_split(f"{forget}_perturbed")
            check_columns(paraphrased, ("paraphrased_question", "paraphrased_answer"), f"{forget}_perturbed",
                          self.path)
            rows = rows[0], rows[1] + semantic_duplicates(paraphrased, float(self.retain_duplicates))
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


def semantic_duplicates(paraphrased: list[dict], share: float = 1.0) -> list[dict]:
    """One QA row per forget item (or for round(share·N) of them, drawn once with a fixed seed): its paraphrased
    question and paraphrased answer."""
    import random

    chosen = range(len(paraphrased))
    if share < 1.0:
        chosen = sorted(random.Random(0).sample(range(len(paraphrased)), round(share * len(paraphrased))))
    return [{"question": paraphrased[i]["paraphrased_question"], "answer": paraphrased[i]["paraphrased_answer"]}
            for i in chosen]


class WaterDrumSource(TofuSource):
    def __init__(self, path: str = "Glow-AI/WaterDrum-TOFU", forget_level: str = "10", watermarked: bool = True,
                 cache_dir: str | None = None, retain_duplicates: bool = False) -> None:
        """retain_duplicates: WaterDrum's own `semantic_duplicate` split (forget_10 only) joins the retain set."""
        super().__init__(path, forget_level, cache_dir)
        self.retain_duplicates = retain_duplicates
        if retain_duplicates and forget_level != "10":
            raise UserError("WaterDrum-TOFU has semantic duplicates for forget_10 only: use forget_level='10'")
        self.config = f"{'' if watermarked else 'unwatermarked_'}forget_{forget_level}"

    def _load(self, split: str) -> list[dict]:
        if self.is_local:
            return _read_local(Path(self.path) / self.config, split)
        import datasets

        return list(datasets.load_dataset(self.path, self.config, split=split, cache_dir=self.cache_dir))

    def forget_retain(self) -> tuple[list[dict], list[dict]]:
        retain = self._load("retain") + (self._load("semantic_duplicate") if self.retain_duplicates else [])
        return self._load("forget"), retain

    def eval_splits(self) -> dict[str, list[dict]]:
        return {"forget": self._load("forget"), "retain": self._load("retain")}


def tofu_layout(folder: str | Path, level: str = "10") -> dict[str, str]:
    """TOFU's release as this spec: its file names are one preset of the roles (the data of `lit-unlearn
    tofu-demo`'s world, or a local copy of locuslab/TOFU)."""
    if level not in FORGET_SPLITS:
        raise UserError(f"TOFU level {level!r}: choose one of {sorted(FORGET_SPLITS)}")
    forget, retain = FORGET_SPLITS[level]
    folder = Path(folder)

    def find(split: str) -> str:
        for suffix in (".json", ".jsonl", ".parquet"):
            if (folder / f"{split}{suffix}").is_file():
                return str(folder / f"{split}{suffix}")
        raise MissingFileError(f"TOFU split {split!r} not found in {folder}")

    return {"forget": find(forget), "retain": find(retain), "holdout": find(f"holdout{level}"),
            "eval_forget": find(f"{forget}_perturbed"), "eval_retain": find("retain_perturbed")}
