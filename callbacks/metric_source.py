"""The plug point between a stop rule (and HAMU's quota controller) and what measures forgetting.

A callback that measures a run's forget target declares `MetricSource` (subclasses it); `StopAtTarget` takes the first one in the
run whose kind matches the target's and that can compute every metric it names. Three do:
- `ForgettingVerification` (classifiers, against the retrained model);
- `TofuEvaluation` (TOFU's metrics, against the retain-only model's report where one is given);
- `HoldoutVerification` (TOFU-format data, against a holdout set: no retrained model).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from lit_unlearn.core.plug_points import plug_points

__all__ = ["MetricSource", "metric_sources"]


@runtime_checkable
class MetricSource(Protocol):
    kind: str  # "classifier" or "tofu": the targets it can measure (lit_unlearn.verification.targets.METRICS)

    def available(self, metric: str) -> bool:
        """Whether this source can compute `metric` in this run."""

    def target_values(self, trainer, pl_module, names: list[str] | None = None) -> dict[str, float]:
        """The current model's values of `names` (every metric it knows when None). Each call is one look."""

    def reference_values(self) -> dict[str, Any] | None:
        """What targets are measured against: the reference's values for bands ("within 0.05 of retrain"), and
        named thresholds such as `delta`; None when there is none."""

    def forget_loss_goal(self, trainer, pl_module) -> float | None:
        """The mean forget loss to steer to (HAMU's quota controller), or None if this source implies none."""

    def wants_more_forgetting(self) -> bool | None:
        """After a look that found the target unmet: True if the model still remembers (a controller should aim
        higher), False if it over-forgot or the cause is elsewhere, None if the source cannot tell."""


def metric_sources(callbacks, kind: str) -> list[MetricSource]:
    """The run's metric sources of one kind, in callback order."""
    return [cb for cb in plug_points(callbacks, MetricSource) if cb.kind == kind]
