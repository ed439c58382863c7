"""Forget targets: what "forgotten enough" means for a run, and how far a model is from it.

Written as one line (CLI and YAML alike):

    forget_acc <= 0.05                        absolute threshold (<=, >=, <, >)
    delta_forget_loss >= 2                    ΔL_f against the start of unlearning
    forget_quality >= 0.1                     TOFU (KS p-value against the retain-only model)
    holdout_band_ratio <= 1                   forget vs holdout attacks inside 0.5 ± δ, pooled and per author
                                              (no retrained model; lit_unlearn.callbacks.HoldoutVerification)
    forget_vs_retrain_auc <= 0.6              needs the retrained reference
    ua within 0.05 of retrain                 |UA − UA_retrain| ≤ 0.05
    forget_loss_median within 25% of retrain  |m / m_retrain − 1| ≤ 0.25
    avg_gap <= 0.03 and forget_vs_retrain_auc <= 0.6     all of several (met when every part is met)

"Closest to the target", used to pick the weights a run ends on (for several parts: among weights meeting all
of them, the first part's distance; otherwise more parts met is closer, then the smaller sum of the unmet
parts' distances):
- a band around the retrained model's value: |value − value_retrain| (relative to it for a % band);
- a threshold on a metric that has an ideal value (an AUC's 0.5, a gap's 0): |value − ideal|;
- any other threshold: |value − threshold|, i.e. the least overshoot past it.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass

from lit_unlearn.errors import UserError, did_you_mean

__all__ = ["METRICS", "ForgetTarget", "MetricInfo", "parse_targets"]


@dataclass(frozen=True)
class MetricInfo:
    description: str
    kind: str  # "classifier" or "tofu"
    needs_reference: bool = False
    ideal: float | None = None
    source: str | None = None  # the callback that measures it, when not the kind's default

METRICS: dict[str, MetricInfo] = {
    # classifiers (lit_unlearn.verification.classifier)
    "forget_acc": MetricInfo("accuracy on D_f", "classifier"),
    "ua": MetricInfo("unlearning accuracy, 1 − accuracy on D_f", "classifier"),
    "forget_loss": MetricInfo("mean loss on D_f", "classifier"),
    "forget_loss_median": MetricInfo("median per-example loss on D_f", "classifier"),
    "delta_forget_loss": MetricInfo("mean loss on D_f minus its value before unlearning", "classifier"),
    "retain_acc": MetricInfo("accuracy on D_r", "classifier"),
    "ra": MetricInfo("retain accuracy", "classifier"),
    "test_acc": MetricInfo("test accuracy", "classifier"),
    "ta": MetricInfo("test accuracy", "classifier"),
    "test_forget_class_acc": MetricInfo("test accuracy on the forgotten class", "classifier"),
    "test_other_classes_acc": MetricInfo("test accuracy on the other classes", "classifier"),
    "mia_efficacy": MetricInfo("fraction of D_f an SVC membership attack calls non-members", "classifier"),
    "forget_vs_retrain_auc": MetricInfo("ROC AUC telling D_f losses from the retrained model's (0.5: "
                                        "indistinguishable)", "classifier", needs_reference=True, ideal=0.5),
    "avg_gap": MetricInfo("mean |metric − retrained| over UA, RA, TA, MIA-efficacy", "classifier",
                          needs_reference=True, ideal=0.0),
    # TOFU (lit_unlearn.metrics.TofuEvaluator)
    "forget_quality": MetricInfo("KS-test p-value of forget truth ratios against the retain-only model", "tofu",
                                 needs_reference=True, ideal=1.0),
    "privleak": MetricInfo("Min-K% MIA AUC relative to the retain-only model's, in % (0: same)", "tofu",
                           needs_reference=True, ideal=0.0),
    "forget_vs_retain_only_auc": MetricInfo("ROC AUC telling the model's per-item TOFU forget losses from the "
                                            "retain-only model's (0.5: indistinguishable)", "tofu",
                                            needs_reference=True, ideal=0.5),
    "holdout_band_ratio": MetricInfo("how far the membership attacks' forget-vs-holdout AUC intervals reach from "
                                     "0.5, over their calibrated margin δ, pooled and per forget author (no "
                                     "retrained model; passes at ≤ 1)", "tofu", ideal=0.0,
                                     source="lit_unlearn.callbacks.HoldoutVerification"),
    "forget_truth_ratio": MetricInfo("TOFU forget truth ratio", "tofu"),
    "model_utility": MetricInfo("TOFU model utility", "tofu"),
    "model_utility_ratio": MetricInfo("TOFU model utility over the target's (before unlearning)", "tofu"),
    "forget_prob": MetricInfo("mean answer probability on the forget split", "tofu"),
    "forget_loss_tofu": MetricInfo("mean answer NLL on the forget split", "tofu"),
}
_OPS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}
_THRESHOLD = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s*(<=|>=|<|>)\s*([-+0-9.eE]+)\s*$")
_BAND = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s+within\s+([0-9.eE+-]+)\s*(%?)\s+of\s+retrain\s*$")


def _unknown(name: str) -> UserError:
    return UserError(f"unknown target metric {name!r}{did_you_mean(name, METRICS)}; known: "
                     f"{', '.join(sorted(METRICS))}")


@dataclass(frozen=True)
class ForgetTarget:
    metric: str
    op: str | None = None  # threshold form
    value: float | None = None  # the threshold, or the band's tolerance
    percent: bool = False  # band given in % of the retrained value
    text: str = ""

    @classmethod
    def parse(cls, text: str) -> ForgetTarget:
        if isinstance(text, ForgetTarget):
            return text
        if not isinstance(text, str) or not text.strip():
            raise UserError(f"a forget target is one line such as 'forget_acc <= 0.05' or 'ua within 0.05 of "
                            f"retrain'; got {text!r}")
        m = _THRESHOLD.match(text)
        if m:
            name, op, value = m.group(1), m.group(2), _number(m.group(3), text)
            if name not in METRICS:
                raise _unknown(name)
            return cls(name, op, value, False, text.strip())
        m = _BAND.match(text)
        if m:
            name, tol, pct = m.group(1), _number(m.group(2), text), bool(m.group(3))
            if name not in METRICS:
                raise _unknown(name)
            if tol < 0:
                raise UserError(f"target {text!r}: the tolerance must be ≥ 0")
            return cls(name, None, tol / 100.0 if pct else tol, pct, text.strip())
        word = re.match(r"\s*([a-z_][a-z0-9_]*)", text)
        if word and word.group(1) not in METRICS:
            raise _unknown(word.group(1))
        raise UserError(f"cannot read the target {text!r}: write 'METRIC <= VALUE' (or >=, <, >) or 'METRIC within "
                        "TOL of retrain' / 'METRIC within P% of retrain'")

    @property
    def info(self) -> MetricInfo:
        return METRICS[self.metric]

    @property
    def is_band(self) -> bool:
        return self.op is None

    @property
    def needs_reference(self) -> bool:
        return self.is_band or self.info.needs_reference

    def _center(self, reference: Mapping[str, float] | None) -> float:
        if not self.is_band:
            return self.info.ideal if self.info.ideal is not None else float(self.value)
        if reference is None or reference.get(self.metric) is None:
            raise UserError(f"target {self.text!r} needs the retrained model's {self.metric}: add a retrained "
                            "reference (lit_unlearn.callbacks.ForgettingVerification, or `lit-unlearn retrain`)")
        return float(reference[self.metric])

    def met(self, value: float, reference: Mapping[str, float] | None = None) -> bool:
        if value is None or not math.isfinite(value):
            return False
        if not self.is_band:
            return bool(_OPS[self.op](value, self.value))
        center = self._center(reference)
        gap = abs(value - center)
        return gap <= self.value * abs(center) if self.percent else gap <= self.value

    def distance(self, value: float, reference: Mapping[str, float] | None = None) -> float:
        """How far `value` is from the target's center (see the module docstring); inf when not finite."""
        if value is None or not math.isfinite(value):
            return math.inf
        center = self._center(reference)
        gap = abs(value - center)
        return gap / abs(center) if self.is_band and self.percent and center else gap

    def __str__(self) -> str:
        return self.text or (f"{self.metric} {self.op} {self.value}" if self.op else
                             f"{self.metric} within {self.value} of retrain")


def _number(s: str, text: str) -> float:
    try:
        return float(s)
    except ValueError:
        raise UserError(f"target {text!r}: {s!r} is not a number") from None


def parse_targets(text: str | ForgetTarget | list) -> list[ForgetTarget]:
    """One target line, possibly several parts joined by ' and ', as a list of ForgetTargets (one kind)."""
    if isinstance(text, ForgetTarget):
        return [text]
    if isinstance(text, (list, tuple)):
        parts = [p for t in text for p in parse_targets(t)]
    else:
        if not isinstance(text, str) or not text.strip():
            ForgetTarget.parse(text)  # raises the grammar message
        parts = [ForgetTarget.parse(p) for p in re.split(r"\s+and\s+", text.strip())]
    kinds = {p.info.kind for p in parts}
    if len(kinds) > 1:
        raise UserError(f"target {text!r} mixes classifier and TOFU metrics; one run has one kind")
    return parts
