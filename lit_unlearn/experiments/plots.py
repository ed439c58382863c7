"""Figures for the experiment suite, drawn from its CSV files (so they can be redrawn without rerunning)."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

__all__ = ["plot_all"]


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _pyplot():
    from lit_unlearn.reporting.plotting import pyplot

    return pyplot()


def plot_trajectories(rows: list[dict[str, str]], path: Path) -> Path:
    plt = _pyplot()
    rhos = sorted({float(r["rho"]) for r in rows})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, axes = plt.subplots(2, len(rhos), figsize=(3.2 * len(rhos), 5.6), squeeze=False, sharex=True)
    for j, rho in enumerate(rhos):
        for method in methods:
            by_epoch = defaultdict(list)
            for r in rows:
                if r["method"] == method and float(r["rho"]) == rho:
                    by_epoch[int(r["epoch"])].append((float(r["delta_forget_loss"]), float(r["neg_delta_retain_loss"])))
            epochs = sorted(by_epoch)
            for i in range(2):  # mean over seeds
                axes[i][j].plot(epochs, [sum(v[i] for v in by_epoch[e]) / len(by_epoch[e]) for e in epochs],
                                marker=".", label=method)
        axes[0][j].set_title(f"ρ = {rho:g}")
        axes[1][j].set_xlabel("epoch")
    axes[0][0].set_ylabel("ΔL_f (forget loss increase)")
    axes[1][0].set_ylabel("−ΔL_r (retain loss decrease)")
    for ax in axes.flat:
        ax.axhline(0.0, color="0.7", lw=0.8)
    for ax in axes[0]:  # diverging baselines span decades: symlog keeps the small, stable curves visible
        ax.set_yscale("symlog", linthresh=0.1)
    for ax in axes[1]:
        ax.set_yscale("symlog", linthresh=0.01)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_xy(rows: list[dict[str, str]], x: str, y: str, path: Path, xlabel: str, ylabel: str, fit: bool = False,
            title: str = "") -> Path:
    plt = _pyplot()
    xs, ys = [float(r[x]) for r in rows], [float(r[y]) for r in rows]
    fig, ax = plt.subplots(figsize=(4.2, 3.4))
    ax.plot(xs, ys, "o")
    if fit and len(set(xs)) > 1:
        import numpy as np

        slope, intercept = np.polyfit(xs, ys, 1)
        grid = np.linspace(min(xs), max(xs), 50)
        ax.plot(grid, slope * grid + intercept, "--", color="0.4")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_stopping(rows: list[dict[str, str]], would_stop: float | None, path: Path) -> Path:
    plt = _pyplot()
    steps = [int(r["step"]) for r in rows]
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.plot(steps, [float(r["neg_delta_retain_loss"]) for r in rows], marker=".", label="−ΔL_r")
    ax2 = ax.twinx()
    ax2.plot(steps, [float(r["delta_forget_loss"]) for r in rows], color="C1", marker=".", label="ΔL_f")
    ax2.set_yscale("symlog", linthresh=0.1)
    if would_stop is not None:
        ax.axvline(would_stop, color="C3", ls="--", label="κ₂ rule fires")
    ax.set_xlabel("step")
    ax.set_ylabel("−ΔL_r")
    ax2.set_ylabel("ΔL_f")
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(lines, [ln.get_label() for ln in lines], fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_all(out: Path) -> list[Path]:
    import json

    out = Path(out)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
    figures = []
    if (out / "trajectories.csv").is_file():
        figures.append(plot_trajectories(_read(out / "trajectories.csv"), out / "trajectories.png"))
    if (out / "hardness.csv").is_file():
        r = summary.get("hardness", {}).get("kappa", {}).get("r", float("nan"))
        figures.append(plot_xy(_read(out / "hardness.csv"), "rho", "kappa_mean", out / "hardness.png", "ρ",
                               "mean κ̄ (HAMU steps)", fit=True, title=f"Pearson r = {r:.3f}"))
    if (out / "quota.csv").is_file():
        r2 = summary.get("quota", {}).get("r2", float("nan"))
        figures.append(plot_xy(_read(out / "quota.csv"), "q_over_eta", "delta_forget_loss", out / "quota.png",
                               "Q/η", "ΔL_f after the budget", fit=True, title=f"linear fit R² = {r2:.3f}"))
    if (out / "stopping.csv").is_file():
        figures.append(plot_stopping(_read(out / "stopping.csv"), summary.get("stopping", {}).get("would_stop_step"),
                                     out / "stopping.png"))
    return figures
