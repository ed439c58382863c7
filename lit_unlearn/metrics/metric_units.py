"""Every metric the project measures a run by, declared once: its kind, what it means, where a report keeps it, what
it costs to compute (a TOFU metric's per-item passes, a classifier metric's evaluation splits), whether it needs a
reference model, and the value it would ideally take.

Read by the forget targets (lit_unlearn.verification.targets: which names a target may use and how far a value is
from its ideal), by the TOFU evaluator (the passes a request pays for) and by the classifier verifier (the splits).
A metric a config asks for (a target, `TofuEvaluation(metrics=[...])`) is looked up here.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Passes", "MetricUnit", "METRIC_UNITS", "EVERY_SPLIT", "UTILITY_SPLITS", "units_of"]

EVERY_SPLIT = "*"  # every evaluated split but the holdout
UTILITY_SPLITS = frozenset({"retain", "real_authors", "world_facts"})  # model utility's nine numbers


@dataclass(frozen=True)
class Passes:
    """The per-item passes a TOFU metric needs."""
    score: frozenset = frozenset()     # splits whose answers (and paraphrased, perturbed answers) are teacher-forced
    generate: frozenset = frozenset()  # splits whose questions are answered greedily (ROUGE)
    membership: bool = False           # forget and holdout answers teacher-forced (the attacks)
    gradnorm: bool = False             # a backward pass per forget and holdout item

    def __or__(self, other: "Passes") -> "Passes":
        return Passes(self.score | other.score, self.generate | other.generate, self.membership or other.membership,
                      self.gradnorm or other.gradnorm)

    def resolved(self, splits: list[str]) -> "Passes":
        """EVERY_SPLIT spelled out, and splits this data lacks dropped."""
        def names(s):
            return frozenset(n for n in splits if n != "holdout" and (EVERY_SPLIT in s or n in s))
        return Passes(names(self.score), names(self.generate), self.membership, self.gradnorm)


FORGET_SCORES = Passes(score=frozenset({"forget"}))
UTILITY = Passes(score=UTILITY_SPLITS, generate=UTILITY_SPLITS)


@dataclass(frozen=True)
class MetricUnit:
    kind: str                          # "classifier" or "tofu"
    description: str
    report_key: str | None = None      # TOFU: the key in the report's summary (None: not the evaluator's)
    passes: Passes | None = None       # TOFU: the per-item passes it needs
    splits: tuple[str, ...] = ()       # classifier: the evaluation splits it needs
    needs_reference: bool = False      # the retrained (retain-only) model's evaluation
    ideal: float | None = None         # the value of a model that never saw the forget set, where there is one
    source: str | None = None          # the callback that measures it, when not the kind's default
    target: bool = True                # may be named in a forget target


def _c(description, splits, **kw) -> MetricUnit:
    return MetricUnit("classifier", description, splits=tuple(splits), **kw)


def _t(description, report_key=None, passes=None, **kw) -> MetricUnit:
    return MetricUnit("tofu", description, report_key, passes, **kw)


METRIC_UNITS: dict[str, MetricUnit] = {
    # classifiers (lit_unlearn.verification.classifier)
    "forget_acc": _c("accuracy on D_f", ["forget"]),
    "ua": _c("unlearning accuracy, 1 − accuracy on D_f", ["forget"]),
    "forget_loss": _c("mean loss on D_f", ["forget"]),
    "forget_loss_median": _c("median per-example loss on D_f", ["forget"]),
    "delta_forget_loss": _c("mean loss on D_f minus its value before unlearning", ["forget"]),
    "retain_acc": _c("accuracy on D_r", ["retain"]),
    "ra": _c("retain accuracy", ["retain"]),
    "retain_loss": _c("mean loss on D_r", ["retain"], target=False),
    "test_acc": _c("test accuracy", ["test"]),
    "ta": _c("test accuracy", ["test"]),
    "test_loss": _c("mean loss on the test split", ["test"], target=False),
    "test_forget_class_acc": _c("test accuracy on the forgotten class", ["test_forget_class"]),
    "test_other_classes_acc": _c("test accuracy on the other classes", ["test_other_classes"]),
    "mia_efficacy": _c("fraction of D_f an SVC membership attack calls non-members", ["retain", "test", "forget"]),
    "forget_vs_retrain_auc": _c("ROC AUC telling D_f losses from the retrained model's (0.5: indistinguishable)",
                                ["forget"], needs_reference=True, ideal=0.5),
    "forget_vs_retrain_auc_raw": _c("the same AUC, not folded", ["forget"], needs_reference=True, target=False),
    "forget_vs_retrain_auc_entropy": _c("the same AUC on predictive entropy", ["forget"], needs_reference=True,
                                        target=False),
    "avg_gap": _c("mean |metric − retrained| over UA, RA, TA, MIA-efficacy", ["forget", "retain", "test"],
                  needs_reference=True, ideal=0.0),
    # TOFU (lit_unlearn.metrics.TofuEvaluator)
    "forget_quality": _t("KS-test p-value of forget truth ratios against the retain-only model", "forget_quality",
                         FORGET_SCORES, needs_reference=True, ideal=1.0),
    "privleak": _t("Min-K% MIA AUC relative to the retain-only model's, in % (0: same)", "privleak",
                   Passes(membership=True), needs_reference=True, ideal=0.0),
    "forget_vs_retain_only_auc": _t("ROC AUC telling the model's per-item TOFU forget losses from the retain-only "
                                    "model's (0.5: indistinguishable)", "verification/forget_vs_retain_only_auc",
                                    FORGET_SCORES, needs_reference=True, ideal=0.5),
    "holdout_band_ratio": _t("how far the membership attacks' forget-vs-holdout AUC intervals reach from 0.5, over "
                             "their calibrated margins, pooled and per forget author (no retrained model; passes at "
                             "≤ 1)", ideal=0.0, source="lit_unlearn.callbacks.HoldoutVerification"),
    "forget_truth_ratio": _t("TOFU forget truth ratio", "forget_truth_ratio", FORGET_SCORES),
    "model_utility": _t("TOFU model utility", "model_utility", UTILITY),
    "model_utility_ratio": _t("TOFU model utility over the target's (before unlearning)",
                              "verification/model_utility_ratio", UTILITY),
    "forget_prob": _t("mean answer probability on the forget split", "forget/prob", FORGET_SCORES),
    "forget_loss_tofu": _t("mean answer NLL on the forget split", "forget/nll", FORGET_SCORES),
}


def units_of(kind: str, **where) -> dict[str, MetricUnit]:
    """The units of one kind whose fields equal `where` (e.g. units_of("tofu", target=True))."""
    return {n: u for n, u in METRIC_UNITS.items()
            if u.kind == kind and all(getattr(u, k) == v for k, v in where.items())}
