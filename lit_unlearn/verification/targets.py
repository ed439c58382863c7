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

from lit_unlearn.core.errors import UserError, did_you_mean
from lit_unlearn.metrics.metric_units import METRIC_UNITS, MetricUnit

__all__ = ["METRICS", "ForgetTarget", "MetricInfo", "parse_targets"]


MetricInfo = MetricUnit  # a target's metric: its unit (lit_unlearn.metrics.metric_units)
METRICS: dict[str, MetricUnit] = {n: u for n, u in METRIC_UNITS.items() if u.target}
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
