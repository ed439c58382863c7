"""The part of the TOFU and MUSE evaluation callbacks that does not depend on the benchmark: when to evaluate (at
the end of fitting, and at the start or every n epochs if asked), and where the report goes (the trainer's
loggers as `{kind}/...` scalars, `{kind}_{tag}.{md,json}` in its folder, the console)."""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.callbacks import Callback

from lit_unlearn.core.console import say
from lit_unlearn.core.plug_points import DataFromSource, as_plug, require

__all__ = ["EvaluationCallback"]


class EvaluationCallback(Callback):
    kind = "report"    # the scalar prefix and file stem
    title = "Report"   # the heading in the markdown file and the console

    # Set by each benchmark: the plug point `source=` must declare, and the datamodule that provides one (named in
    # the error when neither is given).
    source_protocol: type
    datamodule_type: str

    def __init__(self, source=None, every_n_epochs: int = 0, evaluate_at_start: bool = False) -> None:
        super().__init__()
        self.source, self.every_n_epochs, self.evaluate_at_start = source, every_n_epochs, evaluate_at_start
        self._evaluator = None
        self.last_report = None

    def _build_evaluator(self, trainer, source):
        """The benchmark's evaluator over `source`."""
        raise NotImplementedError

    def _source(self, trainer):
        data = as_plug(trainer.datamodule, DataFromSource)
        source = self.source or (data.source if data else None)
        return require(source, self.source_protocol, type(self).__name__,
                       f"give `source=` or use a {self.datamodule_type}", structural=True)

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit":  # a missing source fails now, not at the first evaluation
            self._source(trainer)

    def _get_evaluator(self, trainer):
        """The evaluator, built on first use over `source=` or the datamodule's source."""
        if self._evaluator is None:
            self._evaluator = self._build_evaluator(trainer, self._source(trainer))
        return self._evaluator

    def run_options(self) -> dict:
        """Keyword arguments of the evaluator's `run` (a benchmark's callback may narrow what is computed)."""
        return {}

    def evaluate(self, trainer, pl_module, tag: str):
        return self.publish(trainer, self._get_evaluator(trainer).run(pl_module.network, pl_module.device,
                                                                      **self.run_options()), tag)

    def publish(self, trainer, report, tag: str):
        """Log a report (`{kind}/...` scalars, and `gold_standard/...` for its measures against a retain-only model's
        report if it has them),
        write `{kind}_{tag}.{md,json}` and print its table."""
        self.last_report = report
        folder = trainer.log_dir or trainer.default_root_dir  # a collective under DDP: every rank asks
        if trainer.is_global_zero:
            scalars = {f"{self.kind}/{k}": v for k, v in report.summary.items() if v is not None}
            scalars.update({f"gold_standard/{k}": v for k, v in (getattr(report, "verification", None) or {}).items()
                            if isinstance(v, (int, float)) and v is not None})
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
