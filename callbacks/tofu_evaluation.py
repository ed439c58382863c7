"""Run the TOFU evaluation from inside training: at the end of fitting (and every n epochs if asked), log the
metrics to the trainer's logger (TensorBoard: `tofu/...`) and write `tofu_results.{md,json}` to its folder.

Every process takes part (items are split rank::world and the metric states gathered), so it also works
under data parallelism.
"""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info

__all__ = ["TofuEvaluation"]


class TofuEvaluation(Callback):
    def __init__(self, source=None, reference: str | None = None, template: str | None = None,
                 max_new_tokens: int = 200, batch_size: int = 32, every_n_epochs: int = 0,
                 evaluate_at_start: bool = False, require_reference: bool = False) -> None:
        """
        Args:
            source: a TofuSource for the eval splits (default: the datamodule's source).
            reference: the retrain model's saved report (JSON) for forget quality; None reports it missing.
            template: QA template (default: the datamodule's).
            every_n_epochs: also evaluate after every n-th validation (0: only at the end).
            evaluate_at_start: evaluate once before the first step too (logged at step 0).
        """
        super().__init__()
        self.source, self.reference, self.template = source, reference, template
        self.max_new_tokens, self.batch_size, self.every_n_epochs = max_new_tokens, batch_size, every_n_epochs
        self.evaluate_at_start, self.require_reference = evaluate_at_start, require_reference
        self._evaluator = None
        self.last_report = None

    def _get_evaluator(self, trainer):
        if self._evaluator is None:
            from lit_unlearn.metrics import TofuEvaluator

            dm = trainer.datamodule
            source = self.source or getattr(dm, "source", None)
            if source is None or not hasattr(source, "eval_splits"):
                raise ValueError("TofuEvaluation needs a TofuSource (give `source=` or use a TofuDataModule)")
            template = self.template or getattr(getattr(dm, "formatter", None), "template", "plain")
            self._evaluator = TofuEvaluator(dm.tokenizer, source.eval_splits(), template=template,
                                            max_new_tokens=self.max_new_tokens, batch_size=self.batch_size,
                                            reference=self.reference, require_reference=self.require_reference)
        return self._evaluator

    def evaluate(self, trainer, pl_module, tag: str):
        report = self._get_evaluator(trainer).run(pl_module.network, pl_module.device)
        self.last_report = report
        folder = trainer.log_dir or trainer.default_root_dir  # a collective under DDP: every rank asks
        if trainer.is_global_zero:
            scalars = {f"tofu/{k}": v for k, v in report.summary.items() if v is not None}
            for logger in trainer.loggers:
                logger.log_metrics(scalars, step=trainer.global_step)
            Path(folder).mkdir(parents=True, exist_ok=True)
            report.save(Path(folder) / f"tofu_{tag}.json")
            (Path(folder) / f"tofu_{tag}.md").write_text(f"# TOFU ({tag}, step {trainer.global_step})\n\n"
                                                          + report.table() + "\n")
            rank_zero_info(f"\nTOFU evaluation ({tag}, step {trainer.global_step})\n{report.table()}")
        return report

    def on_train_start(self, trainer, pl_module) -> None:
        if self.evaluate_at_start and trainer.global_step == 0:
            self.evaluate(trainer, pl_module, "start")

    def on_validation_end(self, trainer, pl_module) -> None:
        if self.every_n_epochs and not trainer.sanity_checking and (trainer.current_epoch + 1) % self.every_n_epochs == 0:
            self.evaluate(trainer, pl_module, f"epoch{trainer.current_epoch + 1}")

    def on_fit_end(self, trainer, pl_module) -> None:
        self.evaluate(trainer, pl_module, "results")
