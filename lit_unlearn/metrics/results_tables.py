"""Before/after evaluation of a classifier or language model on named splits, and the results table every unlearning run writes."""

from __future__ import annotations

import functools

import csv
import json
from collections.abc import Mapping
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader

from lit_unlearn.algorithms.losses import IGNORE_INDEX
from lit_unlearn.core.batches import logits_and_labels, to_device
from lit_unlearn.core.eval_mode import eval_mode
from lit_unlearn.core.console import fmt

__all__ = ["per_sample_stats", "evaluate_splits", "results_rows", "verification_rows", "format_table",
           "results_markdown", "write_results"]

_fmt = functools.partial(fmt, spec=".4f", missing="-")  # this table's number format


def per_sample_stats(logits: Tensor, labels: Tensor, ignore_index: int = IGNORE_INDEX) -> tuple[Tensor, Tensor]:
    """Per-example loss and accuracy: cross-entropy and correctness for a classifier; mean NLL over the target
    tokens and the fraction of them predicted (argmax) for a language model."""
    if logits.dim() == 2:
        return F.cross_entropy(logits, labels, reduction="none"), (logits.argmax(-1) == labels).float()
    valid = labels != ignore_index
    nll = F.cross_entropy(logits.float().transpose(1, 2), labels.clamp_min(0), reduction="none") * valid
    count = valid.sum(-1).clamp_min(1)
    correct = ((logits.argmax(-1) == labels) & valid).sum(-1)
    return nll.sum(-1) / count, correct.float() / count


@torch.no_grad()
def evaluate_splits(network: nn.Module, loaders: Mapping[str, DataLoader],
                    device: torch.device | str = "cpu") -> dict[str, dict[str, float]]:
    """{split: {"loss", "acc", "n"}} over full splits (per-example means), in eval mode (each module's mode restored)."""
    out: dict[str, dict[str, float]] = {}
    with eval_mode(network):
        for name, loader in loaders.items():
            loss_sum = correct = n = 0.0
            for batch in loader:
                loss, ok = per_sample_stats(*logits_and_labels(network, to_device(batch, device)))
                loss_sum += loss.sum().item()
                correct += ok.sum().item()
                n += loss.numel()
            out[name] = {"loss": loss_sum / max(n, 1), "acc": correct / max(n, 1), "n": int(n)}
    return out


def results_rows(before: Mapping[str, Mapping[str, float]], after: Mapping[str, Mapping[str, float]],
                 retrain: Mapping[str, Mapping[str, float]] | None = None) -> list[dict]:
    """One row per eval split: loss and accuracy before and after unlearning (and of the retrained model)."""
    rows = []
    for split in after:
        b, a = before.get(split, {}), after[split]
        row = {
            "split": split,
            "n": a.get("n"),
            "loss_before": b.get("loss"), "loss_after": a["loss"],
            "delta_loss": (a["loss"] - b["loss"]) if "loss" in b else None,
            "acc_before": b.get("acc"), "acc_after": a["acc"],
        }
        if retrain is not None:
            r = retrain.get(split, {})
            row["loss_retrain"], row["acc_retrain"] = r.get("loss"), r.get("acc")
        rows.append(row)
    return rows


# The verification table: label, key in the measures, shown per model and as |after − retrain|.
VERIFICATION_ROWS = (
    ("UA (1 − forget acc)", "ua"), ("RA (retain acc)", "ra"), ("TA (test acc)", "ta"),
    ("test acc, forgotten class", "test_forget_class_acc"), ("test acc, other classes", "test_other_classes_acc"),
    ("MIA-efficacy", "mia_efficacy"), ("median forget loss", "forget_loss_median"),
    ("forget-vs-retrain AUC", "forget_vs_retrain_auc"), ("Avg. Gap", "avg_gap"),
)


def verification_rows(before: Mapping[str, float], after: Mapping[str, float],
                      retrain: Mapping[str, float] | None) -> list[dict]:
    rows = []
    for label, key in VERIFICATION_ROWS:
        if key not in after:
            continue
        r = None if retrain is None else retrain.get(key)
        if key == "forget_vs_retrain_auc" and retrain is not None:
            r = 0.5  # the retrained model against itself
        elif key == "avg_gap" and retrain is not None:
            r = 0.0
        gap = None if r is None or key in ("forget_vs_retrain_auc", "avg_gap") else abs(after[key] - r)
        rows.append({"measure": label, "before": before.get(key), "after": after[key], "retrain": r,
                     "gap_after": gap})
    return rows




def format_table(rows: list[dict], cols: list[str] | None = None) -> str:
    """A GitHub-markdown table (readable in a terminal too)."""
    cols = cols or list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def write_results(rows: list[dict], folder: str | Path, extra: Mapping | None = None,
                  verification: list[dict] | None = None, notes: list[str] | None = None) -> Path:
    """results.csv, results.md and results.json in `folder`; returns the markdown path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "results.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (folder / "results.md").write_text(results_markdown(rows, verification, notes) + "\n")
    (folder / "results.json").write_text(json.dumps({"rows": rows, **(extra or {})}, indent=2, default=_json_default))
    return folder / "results.md"


def results_markdown(rows: list[dict], verification: list[dict] | None = None, notes: list[str] | None = None) -> str:
    text = format_table(rows)
    if verification:
        text += "\n\n" + format_table(verification)
    if notes:
        text += "\n\n" + "\n".join(f"- {n}" for n in notes)
    return text


def _json_default(value):
    if hasattr(value, "item"):
        return value.item()
    return str(value)
