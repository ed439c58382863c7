"""Where a standalone evaluation report goes: the console (its table), a JSON file, TensorBoard scalars."""

from __future__ import annotations

from pathlib import Path

__all__ = ["finish_report"]


def finish_report(report, prefix: str, save: str | None = None, logdir: str | None = None) -> None:
    """Print the table; with `save` write the JSON, with `logdir` the summary as TensorBoard scalars ({prefix}/...)."""
    print(report.table())
    if save:
        print(f"(saved to {report.save(save)})")
    if logdir:
        from lit_unlearn.tensorboard import write_scalars

        write_scalars(logdir, {f"{prefix}/{k}": v for k, v in report.summary.items()})
