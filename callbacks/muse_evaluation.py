"""Run the MUSE evaluation from inside training: at the end of fitting (and at the start, or every n epochs, if
asked), log VerbMem / KnowMem / PrivLeak / ES / EM to the trainer's loggers (TensorBoard: `muse/...`) and write
`muse_{tag}.{md,json}` to its folder. Every process takes part (items split rank::world)."""

from __future__ import annotations

from lit_unlearn.callbacks.evaluation_callback import EvaluationCallback
from lit_unlearn.core.plug_points import TextsSource

__all__ = ["MuseEvaluation"]


class MuseEvaluation(EvaluationCallback):
    kind = "muse"
    title = "MUSE"
    source_protocol, datamodule_type = TextsSource, "MuseDataModule"

    def __init__(self, source=None, reference: str | None = None, retrain_auc: float | None = None,
                 verbmem_max_new_tokens: int = 128, knowmem_max_new_tokens: int = 32, batch_size: int = 8,
                 every_n_epochs: int = 0, evaluate_at_start: bool = False, max_length: int = 2048) -> None:
        """
        Args:
            source: a MuseSource (default: the datamodule's).
            reference: the retrained model's saved report (PrivLeak's AUC_retrain); retrain_auc: a number instead
                (e.g. MUSE's published 0.4772 for News at Min-40%).
            max_length: longest scored sequence (MUSE's 2048; longer texts keep their last tokens).
        """
        super().__init__(source, every_n_epochs, evaluate_at_start)
        self.reference, self.retrain_auc = reference, retrain_auc
        self.verbmem_tokens, self.knowmem_tokens = verbmem_max_new_tokens, knowmem_max_new_tokens
        self.batch_size, self.max_length = batch_size, max_length

    def _build_evaluator(self, trainer, source):
        from lit_unlearn.metrics.muse.evaluator import MuseEvaluator

        return MuseEvaluator(trainer.datamodule.tokenizer, source, self.verbmem_tokens, self.knowmem_tokens,
                             self.batch_size, self.reference, self.retrain_auc, max_length=self.max_length)
