"""The part of the TOFU and MUSE evaluation callbacks that does not depend on the benchmark: when to evaluate (at
the end of fitting, and at the start or every n epochs if asked), and where the report goes (the trainer's
loggers as `{kind}/...` scalars, `{kind}_{tag}.{md,json}` in its folder, the console)."""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.callbacks import Callback

from lit_unlearn.console import say

__all__ = ["ReportEvaluation"]


class ReportEvaluation(Callback):
    kind = "report"    # the scalar prefix and file stem
    title = "Report"   # the heading in the markdown file and the console

    def __init__(self, every_n_epochs: int = 0, evaluate_at_start: bool = False) -> None:
        super().__init__()
        self.every_n_epochs, self.evaluate_at_start = every_n_epochs, evaluate_at_start
        self._evaluator = None
        self.last_report = None

    def _get_evaluator(self, trainer):
        """The benchmark's evaluator (built once, on first use)."""
        raise NotImplementedError

    def evaluate(self, trainer, pl_module, tag: str):
        report = self._get_evaluator(trainer).run(pl_module.network, pl_module.device)
        self.last_report = report
        folder = trainer.log_dir or trainer.default_root_dir  # a collective under DDP: every rank asks
        if trainer.is_global_zero:
            scalars = {f"{self.kind}/{k}": v for k, v in report.summary.items() if v is not None}
            for logger in trainer.loggers:
                logger.log_metrics(scalars, step=trainer.global_step)
            Path(folder).mkdir(parents=True, exist_ok=True)
            report.save(Path(folder) / f"{self.kind}_{tag}.json")
            (Path(folder) / f"{self.kind}_{tag}.md").write_text(
                f"# {self.title} ({tag}, step {trainer.global_step})\n\n" + report.table() + "\n")
            say(f"\n{self.title} evaluation ({tag}, step {trainer.global_step})\n{report.table()}")
        return report

    def on_train_start(self, trainer, pl_module) -> None:
        if self.evaluate_at_start and trainer.global_step == 0:
            self.evaluate(trainer, pl_module, "start")

    def on_validation_end(self, trainer, pl_module) -> None:
        if self.every_n_epochs and not trainer.sanity_checking and (trainer.current_epoch + 1) % self.every_n_epochs == 0:
            self.evaluate(trainer, pl_module, f"epoch{trainer.current_epoch + 1}")

    def on_fit_end(self, trainer, pl_module) -> None:
        self.evaluate(trainer, pl_module, "results")
