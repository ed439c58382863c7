"""Run the TOFU evaluation from inside training: at the end of fitting (and every n epochs if asked), log the
metrics to the trainer's logger (TensorBoard: `tofu/...`) and write `tofu_results.{md,json}` to its folder.

It is also the metric source of a `StopAtTarget` on TOFU metrics (forget quality and privleak against the
retain-only model's report, forget truth ratio, model utility): those are evaluated with scoring passes only
(no generation) except model utility.

Every process takes part (items are split rank::world and the metric states gathered), so it also works
under data parallelism.
"""

from __future__ import annotations

import math

from lit_unlearn.callbacks.report_evaluation import ReportEvaluation

__all__ = ["TofuEvaluation"]


class TofuEvaluation(ReportEvaluation):
    kind = "tofu"
    title = "TOFU"
    source_type, source_has, datamodule_type = "TofuSource", "eval_splits", "TofuDataModule"

    def __init__(self, source=None, reference: str | None = None, template: str | None = None,
                 max_new_tokens: int = 200, batch_size: int = 32, every_n_epochs: int = 0,
                 evaluate_at_start: bool = False, require_reference: bool = False,
                 mia_convention: str = "lit-unlearn", gradnorm: bool = True) -> None:
        """
        Args:
            source: a TofuSource for the eval splits (default: the datamodule's source).
            reference: the retrain model's saved report (JSON) for forget quality; None reports it missing.
            template: QA template (default: the datamodule's).
            every_n_epochs: also evaluate after every n-th validation (0: only at the end).
            evaluate_at_start: evaluate once before the first step too (logged at step 0).
            mia_convention: "lit-unlearn" or "open-unlearning" (Min-K%, Min-K%++, zlib, ES/EM, privleak fallback
                exactly as open-unlearning computes them; the input format follows the datamodule's).
            gradnorm: run the gradient-norm MIA in full reports (one backward pass per forget/holdout item).
        """
        super().__init__(source, every_n_epochs, evaluate_at_start)
        self.reference, self.template = reference, template
        self.max_new_tokens, self.batch_size, self.require_reference = max_new_tokens, batch_size, require_reference
        self.mia_convention, self.gradnorm = mia_convention, gradnorm
        from lit_unlearn.metrics.mia_convention import get_convention

        get_convention(mia_convention)  # a typo fails at construction, not after training

    def _build_evaluator(self, trainer, source):
        from lit_unlearn.metrics import TofuEvaluator

        formatter = getattr(trainer.datamodule, "formatter", None)
        return TofuEvaluator(trainer.datamodule.tokenizer, source.eval_splits(),
                             template=self.template or getattr(formatter, "template", "plain"),
                             max_new_tokens=self.max_new_tokens, batch_size=self.batch_size,
                             reference=self.reference, require_reference=self.require_reference,
                             mia_convention=self.mia_convention, gradnorm=self.gradnorm,
                             input_format=getattr(formatter, "input_format", "lit-unlearn"))

    # ----- the metric-source protocol (read by StopAtTarget) ---------------------------------------------------------
    @property
    def has_reference(self) -> bool:
        return self.reference is not None

    def available(self, metric: str) -> bool:
        from lit_unlearn.metrics.tofu_eval import TARGET_METRICS

        return metric in TARGET_METRICS and (self.has_reference or metric not in ("forget_quality", "privleak"))

    def _reference_report(self) -> dict | None:
        if self.reference is None:
            return None
        from lit_unlearn.metrics.tofu_eval import _load_reference

        return _load_reference(self.reference)

    def reference_values(self) -> dict[str, float] | None:
        ref = self._reference_report()
        if ref is None:
            return None
        summary = ref.get("summary", {})
        values = {"forget_quality": 1.0, "privleak": 0.0}  # the retain-only model against itself
        for name, key in (("forget_truth_ratio", "forget_truth_ratio"), ("model_utility", "model_utility"),
                          ("forget_prob", "forget/prob"), ("forget_loss_tofu", "forget/nll")):
            if summary.get(key) is not None:
                values[name] = summary[key]
        if "forget_loss_tofu" not in values:
            values["forget_loss_tofu"] = self.reference_forget_loss()
        return values

    def reference_forget_loss(self) -> float | None:
        """The retain-only model's mean answer NLL on the forget split (HAMU's quota-controller goal)."""
        ref = self._reference_report()
        probs = ((ref or {}).get("per_item", {}).get("forget", {}) or {}).get("prob")
        if not probs:
            return None
        return float(sum(-math.log(max(p, 1e-300)) for p in probs) / len(probs))

    def target_values(self, trainer, pl_module, names=None) -> dict[str, float]:
        from lit_unlearn.metrics.tofu_eval import TARGET_METRICS

        names = list(names or TARGET_METRICS)
        report = self._get_evaluator(trainer).run(pl_module.network, pl_module.device, only=names)
        return {n: report.summary.get(TARGET_METRICS[n][0]) for n in names}
