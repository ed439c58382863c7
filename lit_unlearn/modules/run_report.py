"""The run's before/after report, written when fitting ends: the eval splits before and after (and the retrained
model's column), the verification measures and the step the run ended on, as results.{md,csv,json}, the console
table, and TensorBoard (the table as text, the trajectory figure, hparams with the final metrics).

Callbacks add to it while the run goes: `ForgettingVerification` calls `add_verification`, `StopAtTarget` calls
`ended_on`. A run whose caller writes its own tables (the bench, the experiment suite) sets `enabled = False`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lit_unlearn.core.console import say
from lit_unlearn.metrics.results_tables import evaluate_splits, results_markdown, results_rows, verification_rows, write_results

__all__ = ["RunReport"]


class RunReport:
    def __init__(self) -> None:
        self.enabled = True
        self.reference_eval: dict[str, dict[str, float]] | None = None  # the retrained model's eval splits
        self.verification: dict | None = None
        self.ended_on_step: int | None = None
        self.notes: list[str] = []

    # ----- what callbacks add ---------------------------------------------------------------------------------------
    def add_verification(self, before: dict, after: dict, retrain: dict | None, reference_splits: dict | None = None,
                         reference_info: dict | None = None) -> None:
        """Measures of the target, the unlearned model and the retrained reference (None without one)."""
        self.reference_eval = reference_splits
        flat = {k: after.get(k) for k in after}
        for k, v in before.items():
            flat[f"{k}_before"] = v
        for k, v in (retrain or {}).items():
            flat[f"{k}_retrain"] = v
        if retrain is not None:
            flat["mia_efficacy_retrain"] = retrain.get("mia_efficacy")
            flat["ua_retrain"] = retrain.get("ua")
        self.verification = {**flat, "table": verification_rows(before, after, retrain), "reference": reference_info}

    def ended_on(self, step: int, note: str | None = None) -> None:
        """The weights now in the network are those of `step` (the closest to the target)."""
        self.ended_on_step = int(step)
        if note:
            self.notes.append(note)

    # ----- writing it -----------------------------------------------------------------------------------------------
    def write(self, module, loaders) -> dict[str, dict[str, float]] | None:
        """Evaluate the eval splits after training and write every output (rank zero writes; all evaluate)."""
        if not self.enabled or not loaders or module.initial_eval is None:
            return None
        final_eval = evaluate_splits(module.network, loaders, module.device)
        trainer = module.trainer
        folder = trainer.log_dir or trainer.default_root_dir  # a collective under DDP: every rank asks
        if trainer.is_global_zero:
            step = module.global_step
            rows = results_rows(module.initial_eval, final_eval, self.reference_eval)
            table = (self.verification or {}).get("table")
            extra: dict[str, Any] = {"global_step": step, "method": type(module).__name__,
                                     "ended_on_step": step if self.ended_on_step is None else self.ended_on_step,
                                     "tokens_read": module.tokens_read, "notes": self.notes}
            if self.verification is not None:
                extra["verification"] = {k: v for k, v in self.verification.items() if k != "table"}
            path = write_results(rows, folder, extra=extra, verification=table, notes=self.notes)
            ended = "" if self.ended_on_step in (None, step) else f", ended on step {self.ended_on_step}"
            markdown = results_markdown(rows, table, self.notes)
            say(f"\n{type(module).__name__} after {step} steps{ended}\n{markdown}\n(written to {path})")
            self._to_tensorboard(module, markdown, rows, folder)
        return final_eval

    def _to_tensorboard(self, module, markdown: str, rows: list[dict], folder) -> None:
        """The results table as text, the trajectory as an image (also trajectory.png), hparams with the final
        metrics."""
        from lit_unlearn.reporting.tensorboard import log_figure, log_final_hparams, log_text
        from lit_unlearn.reporting.trajectory_plot import trajectory_figure

        trainer, step = module.trainer, module.global_step
        log_text(trainer, "results", markdown, step)
        figure = trajectory_figure(module.history, self.ended_on_step, title=f"{type(module).__name__}")
        if figure is not None:
            figure.savefig(Path(folder) / "trajectory.png", dpi=110)
            log_figure(trainer, "trajectory", figure, step)
            from lit_unlearn.reporting.plotting import pyplot

            pyplot().close(figure)
        final = {f"final/{r['split']}_{k}": r[f"{k}_after"] for r in rows for k in ("loss", "acc")}
        for key in ("ua", "ra", "ta", "mia_efficacy", "avg_gap", "forget_vs_retrain_auc"):
            if (self.verification or {}).get(key) is not None:
                final[f"final/{key}"] = self.verification[key]
        final["final/ended_on_step"] = float(step if self.ended_on_step is None else self.ended_on_step)
        log_final_hparams(trainer, {"method": type(module).__name__, **dict(module.hparams)}, final)
