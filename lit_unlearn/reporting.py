"""Before/after evaluation of a classifier or language model on named splits, and the results table every unlearning run writes."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader

from lit_unlearn.algorithms.losses import IGNORE_INDEX
from lit_unlearn.batches import logits_and_labels, to_device

__all__ = ["per_sample_stats", "evaluate_splits", "results_rows", "format_table", "write_results"]


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
    """{split: {"loss", "acc", "n"}} over full splits (per-example means), network in eval mode (restored after)."""
    was_training = network.training
    network.eval()
    out: dict[str, dict[str, float]] = {}
    try:
        for name, loader in loaders.items():
            loss_sum = correct = n = 0.0
            for batch in loader:
                loss, ok = per_sample_stats(*logits_and_labels(network, to_device(batch, device)))
                loss_sum += loss.sum().item()
                correct += ok.sum().item()
                n += loss.numel()
            out[name] = {"loss": loss_sum / max(n, 1), "acc": correct / max(n, 1), "n": int(n)}
    finally:
        network.train(was_training)
    return out


def results_rows(before: Mapping[str, Mapping[str, float]], after: Mapping[str, Mapping[str, float]]) -> list[dict]:
    rows = []
    for split in after:
        b, a = before.get(split, {}), after[split]
        rows.append({
            "split": split,
            "n": a.get("n"),
            "loss_before": b.get("loss"), "loss_after": a["loss"],
            "delta_loss": (a["loss"] - b["loss"]) if "loss" in b else None,
            "acc_before": b.get("acc"), "acc_after": a["acc"],
        })
    return rows


def format_table(rows: list[dict]) -> str:
    """A GitHub-markdown table (readable in a terminal too)."""
    cols = ["split", "n", "loss_before", "loss_after", "delta_loss", "acc_before", "acc_after"]

    def fmt(v):
        if v is None:
            return "-"
        return f"{v:.4f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def write_results(rows: list[dict], folder: str | Path, extra: Mapping | None = None) -> Path:
    """results.csv, results.md and results.json in `folder`; returns the markdown path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "results.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (folder / "results.md").write_text(format_table(rows) + "\n")
    (folder / "results.json").write_text(json.dumps({"rows": rows, **(extra or {})}, indent=2))
    return folder / "results.md"
