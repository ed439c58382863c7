"""Your own forget, retain and holdout data, stated the way the ecosystem states it: a role, a file, a format and a
column map (torchtune's `column_map`, open-unlearning's `question_key` / `answer_key`, litgpt's `--data.json_path`).

    OwnData(forget="data/forget.jsonl", retain="data/retain.jsonl", holdout="data/holdout.jsonl",
            columns={"question": "prompt", "answer": "completion"})
    OwnData(forget="chats.parquet", retain="keep.parquet", format="chat")                # a `messages` column
    OwnData(forget={"path": "docs_f.csv", "format": "text", "columns": {"text": "body"}}, retain=...)

Each role is a path (JSON list, JSON lines, parquet, CSV, or a folder written by `datasets`' `save_to_disk`) or a
mapping {path, format, columns, split} that overrides the shared `format` / `columns` / `split` for that role. File
names are yours: nothing is looked up by TOFU's names (TOFU's release is one such spec:
lit_unlearn.data.tofu_source.tofu_layout).

Formats, and what a row becomes (the QA rows the rest of the project reads):
- "qa": `question` and `answer` columns (renamed by `columns`); optional `paraphrased_answer`, `perturbed_answer`
  (TOFU's truth ratio reads them), `paraphrased_question` and `group` (who an item is about: the verdict resamples
  groups, as TOFU's authors; without it, consecutive blocks of `items_per_group` items stand in).
- "chat": a `messages` column of {role, content} turns ending with the assistant's; the last assistant turn is the
  answer, the turns before it the question (earlier turns are written as "role: content" lines before the last one).
- "text": a `text` column of plain documents: every token is trained and scored (an empty question).

Roles: forget and retain are required; holdout (items of the same kind the model never saw: what the verdict
compares the forget set with) and the evaluation sets are optional. `eval_forget` / `eval_retain` are QA sets with
TOFU's perturbed columns for the TOFU table; without them the table's retain side is a fixed sample of the retain set
(`eval_retain_items`) and the metrics that need perturbed answers are reported as skipped.

Every file is read and checked when the source is built (no model is loaded yet): `check()` is the preflight's
data part (lit_unlearn.launch.preflight).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lit_unlearn.core.errors import MissingFileError, UserError
from lit_unlearn.core.plug_points import EvalSplitsSource

__all__ = ["OwnData", "DataFile", "read_records", "to_rows", "FORMATS", "ROLE_COLUMNS", "overlap", "nearest_level"]

FORMATS = ("qa", "chat", "text")
# format -> (required roles, optional roles): the roles of a row a column map may rename
ROLE_COLUMNS = {"qa": (("question", "answer"), ("paraphrased_answer", "perturbed_answer", "paraphrased_question",
                                                 "group")),
                "chat": (("messages",), ("group",)),
                "text": (("text",), ("group",))}
SUFFIXES = (".json", ".jsonl", ".parquet", ".csv")
ITEMS_PER_GROUP = 20  # TOFU's authors: 20 items each
# The calibrated verdict's forget levels and their item counts (TOFU's forget01/05/10)
LEVEL_ITEMS = {"01": 40, "05": 200, "10": 400}


@dataclass
class DataFile:
    """One role's data: where it is, its format and how its columns are named."""

    path: str
    format: str = "qa"
    columns: dict[str, str] = field(default_factory=dict)
    split: str | None = None  # a split of a saved DatasetDict folder

    def describe(self) -> str:
        return self.path + (f" (split {self.split})" if self.split else "")


def _as_file(role: str, value: Any, format: str, columns: dict | None, split: str | None) -> DataFile | None:
    if value is None:
        return None
    if isinstance(value, (str, Path)):
        value = {"path": str(value)}
    if not isinstance(value, dict) or "path" not in value:
        raise UserError(f"data role {role!r}: give a file path, or a mapping with a `path` (and optionally format, "
                        f"columns, split); got {value!r}")
    unknown = sorted(set(value) - {"path", "format", "columns", "split"})
    if unknown:
        raise UserError(f"data role {role!r}: unknown key(s) {unknown}; a role takes path, format, columns, split")
    spec = DataFile(str(value["path"]), value.get("format") or format, dict(columns or {}),
                    value.get("split", split))
    spec.columns.update(value.get("columns") or {})
    if spec.format not in FORMATS:
        raise UserError(f"data role {role!r}: format {spec.format!r}; choose one of {', '.join(FORMATS)}")
    roles = set(sum(ROLE_COLUMNS[spec.format], ()))
    wrong = sorted(set(spec.columns) - roles - {"question", "answer", "messages", "text"})
    if wrong:
        raise UserError(f"data role {role!r}: the column map names {wrong}, which the {spec.format!r} format does not "
                        f"read; it maps {sorted(roles)} to your column names, e.g. {{question: prompt, answer: "
                        "completion}")
    return spec


# ----- reading ---------------------------------------------------------------------------------------------------------
def read_records(path: str | Path, split: str | None = None) -> list[dict]:
    """The records of a JSON / JSON-lines / parquet / CSV file, or of a folder written by `datasets`' save_to_disk;
    a missing or unreadable file is one line that says what to fix."""
    p = Path(path).expanduser()
    if not p.exists():
        raise MissingFileError(f"data file {path} not found")
    if p.is_dir():
        return _read_saved_dataset(p, split)
    suffix = p.suffix.lower()
    if suffix not in SUFFIXES:
        raise UserError(f"{path}: unsupported file type {p.suffix or '(none)'!r}; give {', '.join(SUFFIXES)} or a "
                        "folder written by datasets' save_to_disk")
    try:
        text = None if suffix == ".parquet" else p.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"{path} is not UTF-8 text (byte {err.start})") from None
    if suffix == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
    elif suffix == ".parquet":
        rows = _read_parquet(p)
    else:
        rows = _read_json(p, text, lines=suffix == ".jsonl")
    if not rows:
        raise UserError(f"{path} holds no records")
    return rows


def _read_json(p: Path, text: str, lines: bool) -> list:
    if not lines:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            if not (err.msg.startswith("Extra data") and text.lstrip().startswith("{")):
                raise UserError(f"{p} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None
            lines = True  # JSON lines in a .json file, as `datasets` reads them
        else:
            if isinstance(data, dict) and len(data) == 1 and isinstance(next(iter(data.values())), list):
                data = next(iter(data.values()))  # {"data": [...]}
            if not isinstance(data, list):
                raise UserError(f"{p}: expected a JSON list of records (or JSON lines), got a {type(data).__name__}")
            return data
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise UserError(f"{p}: line {i} is not valid JSON ({err.msg}, column {err.colno})") from None
    return rows


def _plain(value):
    """numpy arrays and scalars from parquet / Arrow as plain Python values."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _read_parquet(p: Path) -> list[dict]:
    try:
        import pyarrow.parquet as pq

        table = pq.read_table(p)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise UserError(f"{p} cannot be read as parquet ({str(err).splitlines()[0][:160]})") from None
    return [_plain(r) for r in table.to_pylist()]


def _read_saved_dataset(p: Path, split: str | None) -> list[dict]:
    if not any((p / name).is_file() for name in ("dataset_dict.json", "dataset_info.json", "state.json")):
        raise UserError(f"{p} is a folder but not a saved dataset (no dataset_dict.json or dataset_info.json): give "
                        "a file, or a folder written by datasets' save_to_disk")
    import datasets

    loaded = datasets.load_from_disk(str(p))
    if isinstance(loaded, datasets.DatasetDict):
        names = list(loaded)
        if split is None and len(names) == 1:
            split = names[0]
        if split not in loaded:
            raise UserError(f"{p} holds splits {names}: name one with `split`")
        loaded = loaded[split]
    rows = [_plain(r) for r in loaded]
    if not rows:
        raise UserError(f"{p} holds no records")
    return rows


# ----- rows ------------------------------------------------------------------------------------------------------------
def _type(value) -> str:
    return "text" if isinstance(value, str) else "null" if value is None else type(value).__name__


def _column(records: list, role: str, column: str, where: str) -> list:
    if not all(isinstance(r, dict) for r in records):
        i = next(i for i, r in enumerate(records) if not isinstance(r, dict))
        raise UserError(f"{where}: record {i} is not an object with named columns: {str(records[i])[:60]!r}")
    missing = [i for i, r in enumerate(records) if column not in r]
    if missing:
        have = sorted(records[missing[0]])
        which = "every record" if len(missing) == len(records) else \
            f"{len(missing)} record(s) (the first: record {missing[0]})"
        mapped = f"column {column!r} (the {role!r} column)" if column != role else f"column {role!r}"
        raise UserError(f"{where}: {which} has no {mapped}; it has {have}; map yours with columns: "
                        f"{{{role}: YOUR_COLUMN}}")
    return [r[column] for r in records]


def _texts(values: list, role: str, column: str, where: str, allow_empty: bool = False) -> list[str]:
    bad = [i for i, v in enumerate(values) if not isinstance(v, str) or (not allow_empty and not v.strip())]
    if bad:
        i = bad[0]
        kinds = sorted({_type(v) for v in values})
        what = "empty text" if isinstance(values[i], str) else f"a {_type(values[i])}"
        raise UserError(f"{where}: column {column!r} ({role}) must be non-empty text in every record; record {i} is "
                        f"{what} ({len(bad)} such record(s); types seen: {', '.join(kinds)})")
    return values


def _answer_list(value, where: str, i: int) -> list[str]:
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            value = json.loads(value)  # a CSV cell holding a JSON list
        except json.JSONDecodeError:
            pass
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise UserError(f"{where}: record {i}'s perturbed_answer must be a non-empty list of texts (TOFU's wrong "
                        f"answers), got {_type(value)}")
    return value


def _chat_pair(messages, where: str, i: int) -> tuple[str, str]:
    if isinstance(messages, str):
        try:
            messages = json.loads(messages)
        except json.JSONDecodeError:
            pass
    ok = isinstance(messages, list) and messages and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages)
    if not ok:
        raise UserError(f"{where}: record {i}'s messages must be a list of {{role, content}} turns, got "
                        f"{str(messages)[:60]!r}")
    if messages[-1]["role"] != "assistant" or not any(m["role"] == "user" for m in messages[:-1]):
        raise UserError(f"{where}: record {i}'s conversation must end with an assistant turn after a user turn "
                        f"(roles: {[m['role'] for m in messages]})")
    *before, last = messages
    earlier = [f"{m['role']}: {m['content']}" for m in before[:-1]]
    question = "\n".join(earlier + [before[-1]["content"]]) if before[-1]["role"] == "user" else \
        "\n".join(f"{m['role']}: {m['content']}" for m in before)
    return question, last["content"]


def to_rows(records: list, spec: DataFile, where: str, items_per_group: int = ITEMS_PER_GROUP) -> list[dict]:
    """A role's records as QA rows ({question, answer, author, ...}), every required column present and typed."""
    required, optional = ROLE_COLUMNS[spec.format]
    name = {role: spec.columns.get(role, role) for role in required + optional}
    if spec.format == "qa":
        questions = _texts(_column(records, "question", name["question"], where), "question", name["question"], where)
        answers = _texts(_column(records, "answer", name["answer"], where), "answer", name["answer"], where)
        rows = [{"question": q, "answer": a} for q, a in zip(questions, answers)]
        for role in ("paraphrased_answer", "paraphrased_question"):
            if all(name[role] in r for r in records):
                values = _texts([r[name[role]] for r in records], role, name[role], where)
                for row, v in zip(rows, values):
                    row[role] = v
        if all(name["perturbed_answer"] in r for r in records):
            for i, (row, r) in enumerate(zip(rows, records)):
                row["perturbed_answer"] = _answer_list(r[name["perturbed_answer"]], where, i)
    elif spec.format == "chat":
        pairs = [_chat_pair(m, where, i) for i, m in enumerate(_column(records, "messages", name["messages"], where))]
        rows = [{"question": q, "answer": a} for q, a in pairs]
    else:
        texts = _texts(_column(records, "text", name["text"], where), "text", name["text"], where)
        rows = [{"question": "", "answer": t} for t in texts]
    if "group" in spec.columns or all("group" in r for r in records):
        groups = _column(records, "group", name["group"], where)
        bad = next((i for i, g in enumerate(groups) if not isinstance(g, (str, int))), None)
        if bad is not None:
            raise UserError(f"{where}: record {bad}'s group must be a name or a number, got {_type(groups[bad])}")
    else:  # consecutive blocks stand in for who the items are about
        groups = [f"block{i // items_per_group}" for i in range(len(rows))]
    for row, g in zip(rows, groups):
        row["author"] = g
    return rows


# ----- overlap ---------------------------------------------------------------------------------------------------------
def _normalised(row: dict) -> str:
    return re.sub(r"[^0-9a-z]+", " ", (row["question"] + " " + row["answer"]).lower()).strip()


def overlap(forget: list[dict], retain: list[dict]) -> tuple[int, int, dict | None]:
    """(exact duplicates, further normalised-text duplicates, the first forget row that is in the retain set)."""
    exact_keys = {(r["question"], r["answer"]) for r in retain}
    norm_keys = {_normalised(r) for r in retain}
    exact = [r for r in forget if (r["question"], r["answer"]) in exact_keys]
    near = [r for r in forget if (r["question"], r["answer"]) not in exact_keys and _normalised(r) in norm_keys]
    first = (exact or near or [None])[0]
    return len(exact), len(near), first


def nearest_level(n_items: int) -> str:
    """The calibrated forget level (TOFU's forget01/05/10) whose item count is nearest to `n_items` (log scale)."""
    import math

    return min(LEVEL_ITEMS, key=lambda lv: abs(math.log(LEVEL_ITEMS[lv]) - math.log(max(n_items, 1))))


# ----- the source ------------------------------------------------------------------------------------------------------
class OwnData(EvalSplitsSource):
    """The user's forget / retain / holdout / evaluation data (see the module docstring)."""

    def __init__(self, forget: str | dict | None = None, retain: str | dict | None = None,
                 holdout: str | dict | None = None,
                 eval_forget: str | dict | None = None, eval_retain: str | dict | None = None,
                 format: str = "qa", columns: dict[str, str] | None = None, split: str | None = None,
                 items_per_group: int = ITEMS_PER_GROUP, eval_retain_items: int = 400,
                 allow_overlap: bool = False, base_model: str | None = None) -> None:
        """
        Args:
            forget: what the model must forget: a file / saved-dataset folder, or {path, format, columns, split}.
            retain: what it must keep.
            holdout: items of the same kind the model never saw: the verdict compares the forget set with them
                (without it, the run says what it could not check).
            eval_forget: the forget items with TOFU's paraphrased_answer / perturbed_answer, for the TOFU table's
                truth ratio (default: the forget set itself, those metrics skipped).
            eval_retain: retain items for model utility, with perturbed answers where you have them (default: a
                fixed sample of `eval_retain_items` retain items).
            format: "qa", "chat" or "text" for every role that does not name its own.
            columns: {role: your column}, e.g. {question: prompt, answer: completion}, for every role.
            split: the split of a saved DatasetDict folder, for every role that does not name its own.
            items_per_group: without a `group` column, consecutive blocks of this many items stand in for who the
                items are about (the verdict's bootstrap resamples groups).
            eval_retain_items: the size of the default model-utility sample of the retain set.
            allow_overlap: accept forget items that also stand in the retain set (refused by default: they
                cannot be both forgotten and kept).
            base_model: the model yours was fine-tuned from, if you have it (a folder or hub name): the verdict
                then scores every item relative to it (difficulty calibration). Part of the job's description
                rather than of the data, kept here so that one line of the config states it.
        """
        if format not in FORMATS:
            raise UserError(f"format {format!r}: choose one of {', '.join(FORMATS)}")
        if not (isinstance(items_per_group, int) and items_per_group >= 1) or eval_retain_items < 1:
            raise UserError("items_per_group and eval_retain_items must be positive integers")
        given = {"forget": forget, "retain": retain, "holdout": holdout, "eval_forget": eval_forget,
                 "eval_retain": eval_retain}
        self.files = {role: _as_file(role, v, format, columns, split) for role, v in given.items()}
        if self.files["forget"] is None:
            raise UserError("no forget data: give --forget FILE (or data.init_args.source.init_args.forget in your "
                            "YAML)")
        self.items_per_group, self.eval_retain_items, self.allow_overlap = (items_per_group, eval_retain_items,
                                                                            allow_overlap)
        self.base_model = base_model
        self._rows: dict[str, list[dict]] = {}

    # what TofuSource offers, so that the datamodule, the verdict and the TOFU table read this source alike
    @property
    def path(self) -> str:
        return str(Path(self.files["forget"].path).parent)

    @property
    def forget_level(self) -> str:
        """The calibrated level nearest to this forget set's size: whose margins the verdict borrows."""
        return nearest_level(len(self.rows("forget")))

    def rows(self, role: str) -> list[dict]:
        """A role's QA rows, read and checked once."""
        if role not in self._rows:
            spec = self.files[role]
            if spec is None:
                raise UserError(f"no {role} data: give --{role} FILE (or data.init_args.source.init_args.{role} in "
                                "your YAML)")
            where = f"{role} data {spec.describe()}"
            self._rows[role] = to_rows(read_records(spec.path, spec.split), spec, where, self.items_per_group)
        return self._rows[role]

    def check(self) -> list[str]:
        """Read and check every given file, and the forget/retain overlap; returns notes on what will be skipped.
        Raises a one-line UserError on the first problem."""
        for role, spec in self.files.items():
            if spec is not None:
                self.rows(role)
        exact, near, first = overlap(self.rows("forget"), self.rows("retain"))
        if (exact or near) and not self.allow_overlap:
            shown = (first["question"] or first["answer"])[:60]
            raise UserError(f"{exact + near} forget item(s) also stand in the retain set ({exact} exact, {near} equal "
                            f"after normalising case, spacing and punctuation); the first: {shown!r}. Remove them "
                            "from one side (or set allow_overlap: true)")
        notes = []
        if self.base_model is not None:
            from lit_unlearn.models.model_folder import check_model_folder

            check_model_folder(self.base_model, "base model")
        if self.files["holdout"] is not None:  # without it, the verdict's callback says what it cannot check
            exact_h, near_h, first_h = overlap(self.rows("holdout"), self.rows("forget") + self.rows("retain"))
            if exact_h or near_h:
                raise UserError(f"{exact_h + near_h} holdout item(s) also stand in the forget or retain set; the "
                                f"first: {(first_h['question'] or first_h['answer'])[:60]!r}. Holdout items must be "
                                "ones the model never saw")
        evaluated = self.eval_splits()
        if "perturbed_answer" not in evaluated["forget"][0]:
            notes.append("no perturbed answers for the forget items: TOFU's truth ratio and forget quality are "
                         "skipped (give eval_forget=FILE with paraphrased_answer and perturbed_answer columns)")
        return notes

    def load_split(self, split: str) -> list[dict]:
        return self.rows(split)

    def forget_retain(self) -> tuple[list[dict], list[dict]]:
        return self.rows("forget"), self.rows("retain")

    def eval_splits(self) -> dict[str, list[dict]]:
        out = {"forget": self.rows("eval_forget") if self.files["eval_forget"] else self.rows("forget")}
        if self.files["eval_retain"]:
            out["retain"] = self.rows("eval_retain")
        elif self.files["retain"]:
            import random

            retain = self.rows("retain")
            k = min(self.eval_retain_items, len(retain))
            out["retain"] = [retain[i] for i in sorted(random.Random(0).sample(range(len(retain)), k))]
        if self.files["holdout"]:
            out["holdout"] = self.rows("holdout")
        return out
