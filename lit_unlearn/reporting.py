"""Before/after evaluation of a classifier on named splits, and the results table every unlearning run writes."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader

__all__ = ["per_sample_stats", "evaluate_splits", "results_rows", "format_table", "write_results"]


def per_sample_stats(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """Per-example cross-entropy and correctness (float)."""
    return F.cross_entropy(logits, labels, reduction="none"), (logits.argmax(-1) == labels).float()


@torch.no_grad()
def evaluate_splits(network: nn.Module, loaders: Mapping[str, DataLoader],
                    device: torch.device | str = "cpu",
                    forward: Callable[[nn.Module, Tensor], Tensor] | None = None) -> dict[str, dict[str, float]]:
    """{split: {"loss", "acc", "n"}} over full splits, network in eval mode (its mode is restored after)."""
    was_training = network.training
    network.eval()
    out: dict[str, dict[str, float]] = {}
    try:
        for name, loader in loaders.items():
            loss_sum = correct = n = 0.0
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                logits = network(x) if forward is None else forward(network, x)
                loss, ok = per_sample_stats(logits, y)
                loss_sum += loss.sum().item()
                correct += ok.sum().item()
                n += y.numel()
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
