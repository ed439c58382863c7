"""The figure of an unlearning run: forget / retain losses and accuracies over steps, from the evaluations the
run made (before unlearning, after each validation), with the step it ended on marked."""

from __future__ import annotations

from collections.abc import Sequence

from lit_unlearn.reporting.plotting import pyplot

__all__ = ["trajectory_figure"]


def trajectory_figure(history: Sequence[dict[str, float]], ended_on: int | None = None, title: str = ""):
    """A matplotlib figure, or None when matplotlib is not installed (`pip install lit-unlearn[plots]`)."""
    plt = pyplot(required=False)
    if plt is None:
        return None
    rows = sorted(history, key=lambda r: r["step"])
    steps = [r["step"] for r in rows]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.4))
    for key, ax in (("loss", ax_loss), ("acc", ax_acc)):
        for split in ("forget", "retain", "test", "test_forget_class", "test_other_classes"):
            name = f"val/{split}_{key}"
            if any(name in r for r in rows):
                ax.plot(steps, [r.get(name, float("nan")) for r in rows], marker=".", label=split)
        if ended_on is not None:
            ax.axvline(ended_on, color="0.3", ls="--", lw=0.8, label="ended on")
        ax.set_xlabel("step")
        ax.set_ylabel(key)
    ax_loss.set_yscale("log")
    ax_acc.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig
