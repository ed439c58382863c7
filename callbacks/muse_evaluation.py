"""Run the MUSE evaluation from inside training: at the end of fitting (and at the start, or every n epochs, if
asked), log VerbMem / KnowMem / PrivLeak / ES / EM to the trainer's loggers (TensorBoard: `muse/...`) and write
`muse_{tag}.{md,json}` to its folder. Every process takes part (items split rank::world)."""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.callbacks import Callback

from lit_unlearn.console import say
from lit_unlearn.errors import UserError

__all__ = ["MuseEvaluation"]


class MuseEvaluation(Callback):
    def __init__(self, source=None, reference: str | None = None, retrain_auc: float | None = None,
                 verbmem_max_new_tokens: int = 128, knowmem_max_new_tokens: int = 32, batch_size: int = 8,
                 every_n_epochs: int = 0, evaluate_at_start: bool = False) -> None:
        """
        Args:
            source: a MuseSource (default: the datamodule's).
            reference: the retrained model's saved report (PrivLeak's AUC_retrain); retrain_auc: a number instead
                (e.g. MUSE's published 0.4772 for News at Min-40%).
        """
        super().__init__()
        self.source, self.reference, self.retrain_auc = source, reference, retrain_auc
        self.verbmem_tokens, self.knowmem_tokens = verbmem_max_new_tokens, knowmem_max_new_tokens
        self.batch_size, self.every_n_epochs, self.evaluate_at_start = batch_size, every_n_epochs, evaluate_at_start
        self._evaluator = None
        self.last_report = None

    def _get_evaluator(self, trainer):
        if self._evaluator is None:
            from lit_unlearn.metrics.muse_eval import MuseEvaluator

            dm = trainer.datamodule
            source = self.source or getattr(dm, "source", None)
            if source is None or not hasattr(source, "texts"):
                raise UserError("MuseEvaluation needs a MuseSource (give `source=` or use a MuseDataModule)")
            self._evaluator = MuseEvaluator(dm.tokenizer, source, self.verbmem_tokens, self.knowmem_tokens,
                                            self.batch_size, self.reference, self.retrain_auc)
        return self._evaluator

    def evaluate(self, trainer, pl_module, tag: str):
        report = self._get_evaluator(trainer).run(pl_module.network, pl_module.device)
        self.last_report = report
        folder = trainer.log_dir or trainer.default_root_dir
        if trainer.is_global_zero:
            scalars = {f"muse/{k}": v for k, v in report.summary.items() if v is not None}
            for logger in trainer.loggers:
                logger.log_metrics(scalars, step=trainer.global_step)
            Path(folder).mkdir(parents=True, exist_ok=True)
            report.save(Path(folder) / f"muse_{tag}.json")
            (Path(folder) / f"muse_{tag}.md").write_text(f"# MUSE ({tag}, step {trainer.global_step})\n\n"
                                                          + report.table() + "\n")
            say(f"\nMUSE evaluation ({tag}, step {trainer.global_step})\n{report.table()}")
        return report

    def on_train_start(self, trainer, pl_module) -> None:
        if self.evaluate_at_start and trainer.global_step == 0:
            self.evaluate(trainer, pl_module, "start")

    def on_validation_end(self, trainer, pl_module) -> None:
        if self.every_n_epochs and not trainer.sanity_checking and (trainer.current_epoch + 1) % self.every_n_epochs == 0:
            self.evaluate(trainer, pl_module, f"epoch{trainer.current_epoch + 1}")

    def on_fit_end(self, trainer, pl_module) -> None:
        self.evaluate(trainer, pl_module, "results")
