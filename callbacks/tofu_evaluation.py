"""Run the TOFU evaluation from inside training: at the end of fitting (and every n epochs if asked), log the
metrics to the trainer's logger (TensorBoard: `tofu/...`, and `verify/...` for the verification against the
retain-only model) and write `tofu_results.{md,json}` to its folder.

It is also the metric source of a `StopAtTarget` on TOFU metrics (forget quality, privleak and the
forget-vs-retain-only AUC against the retain-only model's report, forget truth ratio, model utility and its ratio
to the target's): those are evaluated with scoring passes only (no generation) except model utility. The target's
own numbers (the first evaluation, before any update) are kept, in checkpoints too, for the utility ratio.

Every process takes part (items are split rank::world and the metric states gathered), so it also works
under data parallelism.
"""

from __future__ import annotations


from lit_unlearn.callbacks.evaluation_callback import EvaluationCallback
from lit_unlearn.callbacks.metric_source import MetricSource
from lit_unlearn.core.plug_points import (
    DataFromSource,
    EvalSplitsSource,
    QAFormatted,
    StopTargets,
    as_plug,
    plug_points,
)

__all__ = ["TofuEvaluation"]

WORLD = "world"  # reference="world": the retain-only report beside the world's data folder


class TofuEvaluation(EvaluationCallback, MetricSource):
    kind = "tofu"
    title = "TOFU"
    source_protocol, datamodule_type = EvalSplitsSource, "TofuDataModule"

    def __init__(self, source=None, reference: str | None = None, template: str | None = None,
                 max_new_tokens: int | None = None, batch_size: int = 32, every_n_epochs: int = 0,
                 evaluate_at_start: bool = False, require_reference: bool = False,
                 mia_convention: str = "lit-unlearn", gradnorm: bool = True, max_length: int | None = None,
                 metrics: list[str] | None = None) -> None:
        """
        Args:
            source: a TofuSource for the eval splits (default: the datamodule's source).
            reference: the retain-only model's saved report (JSON) for forget quality; "world": the one beside the
                datamodule's data folder for its forget level (`retain_only_{level}_eval.json`, as the worlds of
                lit_unlearn.worlds lay them out); None reports forget quality as missing.
            template: QA template (default: the datamodule's).
            every_n_epochs: also evaluate after every n-th validation (0: only at the end).
            evaluate_at_start: evaluate once before the first step too (logged at step 0).
            mia_convention: "lit-unlearn" or "open-unlearning" (Min-K%, Min-K%++, zlib, ES/EM, privleak fallback
                exactly as open-unlearning computes them; the input format follows the datamodule's).
            gradnorm: run the gradient-norm MIA in full reports (one backward pass per forget/holdout item).
            max_length: longest scored sequence; longer ones are cut, counted in the report and warned about
                (default: the datamodule's, else TOFU's 512).
            metrics: compute only these (names of lit_unlearn.metrics.metric_units' TOFU units, or "membership" /
                "gradnorm" for the attacks' per-item scores), each paying only for the passes it declares; None:
                the full report.
        """
        super().__init__(source, every_n_epochs, evaluate_at_start)
        self.reference, self.template = reference, template
        self.max_new_tokens, self.batch_size, self.require_reference = max_new_tokens, batch_size, require_reference
        self.mia_convention, self.gradnorm, self.max_length = mia_convention, gradnorm, max_length
        self.start_summary: dict | None = None  # the target's numbers, before unlearning
        self._trainer = None
        from lit_unlearn.metrics.mia_convention import get_convention

        get_convention(mia_convention)  # a typo fails at construction, not after training
        if metrics is not None:
            from lit_unlearn.core.errors import UserError, did_you_mean
            from lit_unlearn.metrics.tofu.evaluator import PASSES, TARGET_METRICS

            known = {**TARGET_METRICS, **PASSES}
            for name in metrics:
                if name not in known:
                    raise UserError(f"TofuEvaluation: unknown metric {name!r}{did_you_mean(name, known)}; known: "
                                    f"{', '.join(sorted(known))}")
        self.metrics = None if metrics is None else list(metrics)

    def run_options(self) -> dict:
        return {} if self.metrics is None else {"only": self.metrics}

    def _build_evaluator(self, trainer, source):
        from lit_unlearn.data.tofu import MAX_LENGTH
        from lit_unlearn.metrics import TofuEvaluator

        qa = as_plug(trainer.datamodule, QAFormatted)
        formatter = qa.formatter if qa else None
        return TofuEvaluator(trainer.datamodule.tokenizer, source.eval_splits(),
                             template=self.template or (formatter.template if formatter else "plain"),
                             max_new_tokens=self.max_new_tokens, batch_size=self.batch_size,
                             max_length=self.max_length or (formatter.max_length if formatter else None) or MAX_LENGTH,
                             reference=self._reference_file(trainer), require_reference=self.require_reference,
                             mia_convention=self.mia_convention, gradnorm=self.gradnorm,
                             input_format=formatter.input_format if formatter else "lit-unlearn",
                             baseline=self.start_summary)

    def _reference_file(self, trainer):
        if self.reference != WORLD:
            return self.reference
        from pathlib import Path

        from lit_unlearn.core.errors import MissingFileError

        data = as_plug(trainer.datamodule, DataFromSource)
        source = data.source if data else None
        path = Path(getattr(source, "path", "")).parent / f"retain_only_{getattr(source, 'forget_level', '10')}_eval.json"
        if not path.is_file():
            raise MissingFileError(f"TofuEvaluation(reference='world'): {path} not found; build the world's retain-only "
                                   "model for this forget level first (`lit-unlearn tofu-demo`, or "
                                   "lit_unlearn.worlds.tofu_world.prepare_tofu_world(levels=[...])), or give the report's path")
        return str(path)

    def _remember_start(self, trainer, report) -> None:
        """The first full-utility numbers seen before any update are the target's: the utility ratio's baseline."""
        if self.start_summary is None and trainer.global_step == 0 and report.summary.get("model_utility") is not None:
            self.start_summary = dict(report.summary)
            evaluator = self._get_evaluator(trainer)
            evaluator.baseline = self.start_summary
            from lit_unlearn.metrics.tofu.verification import tofu_verification

            report.verification = tofu_verification(report.summary, report.per_item, evaluator.reference,
                                                    self.start_summary)

    def evaluate(self, trainer, pl_module, tag: str):
        if tag == "start" and self.start_summary is None:  # the ratio of the start is 1 by definition
            report = self._get_evaluator(trainer).run(pl_module.network, pl_module.device)
            self._remember_start(trainer, report)
            return self.publish(trainer, report, tag)
        return super().evaluate(trainer, pl_module, tag)

    def on_train_start(self, trainer, pl_module) -> None:
        # The utility ratio of a stop target needs the target's own utility before the first update.
        wants_ratio = any(t.metric == "model_utility_ratio"
                          for cb in plug_points(trainer.callbacks, StopTargets) for t in cb.targets)
        if trainer.global_step == 0 and (self.evaluate_at_start or (wants_ratio and self.start_summary is None)):
            self.evaluate(trainer, pl_module, "start")

    def state_dict(self) -> dict:
        return {"start_summary": self.start_summary}

    def load_state_dict(self, state_dict: dict) -> None:
        self.start_summary = state_dict.get("start_summary")
        if self._evaluator is not None:
            self._evaluator.baseline = self.start_summary

    # ----- lit_unlearn.callbacks.metric_source.MetricSource (read by StopAtTarget) -------------------------------------
    @property
    def has_reference(self) -> bool:
        return self.reference is not None

    def available(self, metric: str) -> bool:
        from lit_unlearn.metrics.tofu.evaluator import TARGET_METRICS

        return metric in TARGET_METRICS and (self.has_reference or metric not in ("forget_quality", "privleak",
                                                                             "forget_vs_retain_only_auc"))

    def setup(self, trainer, pl_module, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self._trainer = trainer  # the reference is read through the evaluator, built on first use

    def _reference_report(self) -> dict | None:
        if self.reference is None:
            return None
        return self._get_evaluator(self._trainer).reference

    def reference_values(self) -> dict[str, float] | None:
        ref = self._reference_report()
        if ref is None:
            return None
        summary = ref.get("summary", {})
        values = {"forget_quality": 1.0, "privleak": 0.0, "forget_vs_retain_only_auc": 0.5}  # against itself
        for name, key in (("forget_truth_ratio", "forget_truth_ratio"), ("model_utility", "model_utility"),
                          ("forget_prob", "forget/prob"), ("forget_loss_tofu", "forget/nll")):
            if summary.get(key) is not None:
                values[name] = summary[key]
        if summary.get("model_utility") is not None and (self.start_summary or {}).get("model_utility"):
            values["model_utility_ratio"] = summary["model_utility"] / self.start_summary["model_utility"]
        if "forget_loss_tofu" not in values:
            values["forget_loss_tofu"] = self.forget_loss_goal()
        return values

    def forget_loss_goal(self, trainer=None, pl_module=None) -> float | None:
        """The retain-only model's mean answer NLL on the forget split (a gold-standard goal: it needs that
        model; lit_unlearn.callbacks.HoldoutVerification steers without one)."""
        from lit_unlearn.metrics.tofu.verification import mean_forget_nll

        return mean_forget_nll(self._reference_report())

    def wants_more_forgetting(self) -> bool | None:
        return None

    def target_values(self, trainer, pl_module, names=None) -> dict[str, float]:
        from lit_unlearn.metrics.tofu.evaluator import TARGET_METRICS

        names = list(names or TARGET_METRICS)
        report = self._get_evaluator(trainer).run(pl_module.network, pl_module.device, only=names)
        self._remember_start(trainer, report)
        return {n: report.value(TARGET_METRICS[n][0]) for n in names}
