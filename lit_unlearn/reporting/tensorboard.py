"""What a run shows in TensorBoard besides scalars: its results tables as text, figures, and hparams with the
final metrics (instead of Lightning's `hp_metric = -1`). Every helper is a no-op for loggers that are not
TensorBoard's, and on processes other than rank zero."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["tensorboard_writers", "log_text", "log_figure", "log_final_hparams", "log_scalars", "write_scalars"]


def tensorboard_writers(trainer) -> list:
    from lightning.pytorch.loggers import TensorBoardLogger

    if not trainer.is_global_zero:
        return []
    return [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]


def log_scalars(trainer, values: Mapping[str, float], step: int) -> None:
    if trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.log_metrics({k: float(v) for k, v in values.items() if v is not None}, step=step)


def write_scalars(logdir, values: Mapping[str, float], step: int = 0, text: Mapping[str, str] | None = None,
                  figures: Mapping[str, Any] | None = None) -> None:
    """Scalars (and markdown texts, matplotlib figures) into TensorBoard event files under `logdir`, outside any
    training run (the standalone evaluations, the audit, the bench)."""
    from pathlib import Path

    from torch.utils.tensorboard import SummaryWriter

    Path(logdir).mkdir(parents=True, exist_ok=True)
    with SummaryWriter(str(logdir)) as writer:
        for tag, value in values.items():
            if value is not None:
                writer.add_scalar(tag, float(value), step)
        for tag, markdown in (text or {}).items():
            writer.add_text(tag, "\n" + markdown, step)
        for tag, figure in (figures or {}).items():
            writer.add_figure(tag, figure, step, close=False)


def log_text(trainer, tag: str, markdown: str, step: int) -> None:
    for logger in tensorboard_writers(trainer):
        # TensorBoard's text plugin renders markdown; tables need a blank line before them.
        logger.experiment.add_text(tag, "\n" + markdown, global_step=step)


def log_figure(trainer, tag: str, figure, step: int) -> None:
    for logger in tensorboard_writers(trainer):
        logger.experiment.add_figure(tag, figure, global_step=step, close=False)


def log_final_hparams(trainer, params: Mapping[str, Any], metrics: Mapping[str, float]) -> None:
    """The run's hyper-parameters beside its final metrics (TensorBoard's HPARAMS tab)."""
    flat = {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in params.items() if v is not None}
    clean = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and v == v}
    for logger in tensorboard_writers(trainer):
        logger.log_hyperparams(flat, metrics=clean)
