"""Judge an unlearning run against the retrained gold standard (classifiers).

At setup the retrained reference is loaded: given, or from the cache, where the launch path trained it before the
run started (`RetrainedReference.ensure`, called by lit_unlearn.launch.runs.fit_run). Before the first
step and when fitting ends the callback measures UA, RA, TA, per-class test accuracy, MIA-efficacy, the
forget-vs-retrain AUC and Avg. Gap, for the model and for the reference; it logs them to TensorBoard
(`verify/*`, step 0 and the final step) and hands them to the run's results table and `results.json`
("verification"). It is also the metric source a `StopAtTarget` callback reads during the run.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback

from lit_unlearn.core.console import say
from lit_unlearn.callbacks.metric_source import MetricSource
from lit_unlearn.core.errors import UserError
from lit_unlearn.core.plug_points import UnlearningRun, as_plug, require
from lit_unlearn.modules.unlearning import UnlearningModule
from lit_unlearn.verification import CLASSIFIER_METRICS, ClassifierVerifier, Measures, RetrainedReference
from lit_unlearn.verification.classifier import REFERENCE_METRICS

__all__ = ["ForgettingVerification"]

# What the results table reports side by side (before / after / retrained).
SUMMARY = ("ua", "ra", "ta", "test_forget_class_acc", "test_other_classes_acc", "mia_efficacy", "forget_loss",
           "forget_loss_median", "forget_vs_retrain_auc", "avg_gap")


class ForgettingVerification(Callback, MetricSource):
    kind = "classifier"

    def __init__(self, reference: RetrainedReference | str | None = "auto", mia_feature: str = "confidence",
                 batch_size: int = 512) -> None:
        """
        Args:
            reference: the retrained model: "auto" (`RetrainedReference()`: trained from the target's recipe on
                D_r and cached), a `RetrainedReference`, or None to measure absolute quantities only.
            mia_feature: the MIA-efficacy feature (confidence, entropy, m_entropy, loss, correctness, prob).
            batch_size: evaluation batch size.
        """
        super().__init__()
        if isinstance(reference, str) and reference != "auto":
            raise UserError(f"ForgettingVerification(reference={reference!r}): give 'auto', None or a "
                            "RetrainedReference(ckpt=..., recipe=...)")
        self.reference = RetrainedReference() if reference == "auto" else reference
        self.mia_feature, self.batch_size = mia_feature, batch_size
        self.verifier: ClassifierVerifier | None = None
        self._reference_network = None
        self.reference_measures: Measures | None = None
        self.before: dict[str, float] | None = None
        self.after: dict[str, float] | None = None

    # ----- lit_unlearn.callbacks.metric_source.MetricSource (read by StopAtTarget) -------------------------------------
    @property
    def has_reference(self) -> bool:
        return self.reference is not None

    def available(self, metric: str) -> bool:
        return metric in CLASSIFIER_METRICS and (self.has_reference or metric not in REFERENCE_METRICS)

    def reference_values(self) -> dict[str, float] | None:
        return None if self.reference_measures is None else dict(self.reference_measures.scalars)

    def forget_loss_goal(self, trainer, pl_module) -> float | None:
        """The retrained model's mean forget loss."""
        ref = self.reference_values()
        return None if ref is None else ref.get("forget_loss")

    def wants_more_forgetting(self) -> bool | None:
        return None

    def target_values(self, trainer, pl_module, names=None) -> dict[str, float]:
        self._ensure_reference_measured(pl_module)
        run = as_plug(pl_module, UnlearningRun)
        initial = ((run.initial_eval if run else None) or {}).get("forget", {}).get("loss")
        return self.verifier.measure(pl_module.network, pl_module.device, reference=self.reference_measures,
                                     initial_forget_loss=initial, only=names).scalars

    # ----- Lightning hooks ---------------------------------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit" or self.verifier is not None:
            return
        dm = trainer.datamodule
        eval_sets = getattr(dm, "eval_sets", None)
        if not eval_sets or not isinstance(pl_module, UnlearningModule):
            raise UserError("ForgettingVerification needs a classifier unlearning run (an UnlearningDataModule with "
                            "forget/retain/test eval sets); for TOFU use lit_unlearn.callbacks.TofuEvaluation")
        self.verifier = ClassifierVerifier(eval_sets, self.batch_size, self.mia_feature)
        if self.reference is not None:
            self._reference_network = self._load_reference(trainer, pl_module, dm)

    def _load_reference(self, trainer, pl_module, dm):
        for attr in ("dataset", "forget", "forget_indices", "retain_indices"):
            if getattr(dm, attr, None) is None:
                raise UserError(f"ForgettingVerification retrains on D_r, which needs the datamodule's {attr!r} "
                                "(an UnlearningDataModule has it); or give reference.ckpt")
        run = require(pl_module, UnlearningRun, "ForgettingVerification's retrained reference",
                      "unlearn with an UnlearningModule, or give reference.ckpt")
        kwargs = dict(target_ckpt=run.target_ckpt, network_spec=run.network_spec, dataset=dm.dataset, forget=dm.forget,
                      forget_indices=dm.forget_indices, n_train=len(dm.forget_indices) + len(dm.retain_indices),
                      log=say, device=trainer.strategy.root_device)
        return self.reference.load(pl_module.network, **kwargs)

    def _ensure_reference_measured(self, pl_module) -> None:
        if self._reference_network is not None and self.reference_measures is None:
            network = self._reference_network.to(pl_module.device)
            self.reference_measures = self.verifier.measure(network, pl_module.device)
            self._reference_network = network.cpu()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.before is None and trainer.global_step == 0:  # the target, before any update (kept on resume)
            self.before = self.target_values(trainer, pl_module)
            self._log(trainer, self.before, step=0)

    def on_fit_end(self, trainer, pl_module) -> None:
        if self.verifier is None or self.before is None:
            return
        self.after = self.target_values(trainer, pl_module)
        self._log(trainer, self.after, step=trainer.global_step)
        ref = self.reference_values()
        pl_module.run_report.add_verification(before=self.before, after=self.after, retrain=ref,
                                              reference_splits=self._reference_splits(),
                                              reference_info=getattr(self.reference, "info", None))

    def _reference_splits(self) -> dict[str, dict[str, float]] | None:
        if self.reference_measures is None:
            return None
        s = self.reference_measures.scalars
        return {split: {"loss": s[f"{split}_loss"], "acc": s[f"{split}_acc"]}
                for split in self.reference_measures.features if f"{split}_loss" in s}

    @staticmethod
    def _log(trainer, values: dict[str, float], step: int) -> None:
        if not trainer.is_global_zero:
            return
        scalars = {f"verify/{k}": float(v) for k, v in values.items() if k in SUMMARY or k.startswith("forget_vs")}
        for logger in trainer.loggers:
            logger.log_metrics(scalars, step=step)

    def state_dict(self) -> dict[str, Any]:
        return {"before": self.before}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.before = state_dict.get("before")
