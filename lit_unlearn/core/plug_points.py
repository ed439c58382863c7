"""The plug points between modules, callbacks and data sources, declared.

A module or callback that reads another part of the run names what it reads by one of these Protocols; the part
that offers it declares it by subclassing the Protocol (nominal, not found by the shape of its attributes: a method
of the same name on an unrelated object is not a plug). Data sources are the exception: one the user passes as
`source=` may be any object with the Protocol's methods (`require(..., structural=True)`); the project's own
declare theirs all the same. `plug_point` finds the one in a run and, when none is
there, fails at the start of fit with one line that says what to add.

They sit in the lowest layer so that the modules (which read callbacks) and the callbacks (which read modules and
data sources) can both name them without importing each other.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, TypeVar, runtime_checkable

from lit_unlearn.core.errors import UserError

__all__ = ["HoldoutLossSource", "HoldoutProfileSource", "ForgetLossGoal", "QuotaSteered", "UpdateGuarded",
           "RhoScheduled", "ForgetPasses", "UnlearningRun", "HardnessRecorded", "EntropyInForgetLoss", "StopTargets",
           "DataFromSource", "QAFormatted", "EvalSplitsSource", "EvalLoaders", "MicroBatched", "TextsSource",
           "as_plug", "declares", "plug_point", "plug_points", "require"]

P = TypeVar("P")


@runtime_checkable
class HoldoutLossSource(Protocol):
    """The model's mean NLL on unseen (holdout) items: the forget-loss ceiling of HAMU and OFMU."""

    def holdout_loss(self, trainer=None, pl_module=None) -> float | None: ...


@runtime_checkable
class HoldoutProfileSource(Protocol):
    """The holdout items' per-token profile (surprisal and Min-K %++ values) that HoldoutMatch steers to."""

    def holdout_token_profile(self, trainer=None, pl_module=None) -> dict[str, list[float]] | None: ...


@runtime_checkable
class ForgetLossGoal(Protocol):
    """A mean forget loss to steer to, implied by a stop rule's target (read by HAMU's quota controller)."""

    def loss_goal(self, trainer, pl_module) -> float | None: ...


@runtime_checkable
class QuotaSteered(Protocol):
    """A module whose forget quota a controller sets each step (HAMU, variant Q)."""

    quota_policy: Any
    variant: str


@runtime_checkable
class UpdateGuarded(Protocol):
    """A module that asks registered guards before it applies each update (HAMU: the κ₂ stop)."""

    def register_update_guard(self, guard) -> None: ...


@runtime_checkable
class RhoScheduled(Protocol):
    """A module whose penalty weight ρ a schedule sets each step (OFMU)."""

    rho: float


@runtime_checkable
class ForgetPasses(Protocol):
    """A training stream that pairs retain with forget batches and knows how many rounds one pass over the forget set
    takes (its size and its global forget batch)."""

    n_forget: int
    forget_batch_size: int


@runtime_checkable
class UnlearningRun(Protocol):
    """An unlearning module as callbacks read it: its network, its evaluation before unlearning, the run's report,
    how its target was made (a retrained reference rebuilds it) and the DeepSpeed stage it runs under."""

    network: Any
    initial_eval: dict | None
    run_report: Any
    target_ckpt: str | None
    network_spec: dict | None
    zero_stage: int


@runtime_checkable
class HardnessRecorded(Protocol):
    """A module that keeps its last step's closed-form solution (HAMU: κ, the gradient norms, whether the step was
    irreconcilable) and the clip the norms were taken under."""

    last_step: Any
    clip_norm: float | None


@runtime_checkable
class EntropyInForgetLoss(Protocol):
    """A module whose forget loss may add the answers' mean predictive entropy (HAMU's forget_entropy): a holdout
    ceiling on that loss adds the holdout items' entropy too."""

    forget_entropy: bool


@runtime_checkable
class StopTargets(Protocol):
    """A callback that stops a run at targets on named metrics (StopAtTarget): others read which metrics."""

    targets: list


@runtime_checkable
class DataFromSource(Protocol):
    """A datamodule built on a data source (TOFU, MUSE): an evaluator without its own `source=` reads this one."""

    source: Any


@runtime_checkable
class QAFormatted(Protocol):
    """A datamodule that formats question-answer pairs (its QAFormatter: template, max_length, input format)."""

    formatter: Any


@runtime_checkable
class EvalSplitsSource(Protocol):
    """TOFU-format data: the evaluation splits by name (forget, retain, holdout, …)."""

    def eval_splits(self) -> dict[str, list[dict]]: ...


@runtime_checkable
class EvalLoaders(Protocol):
    """A datamodule's evaluation loaders by split name (forget, retain, test, …)."""

    def eval_dataloaders(self) -> dict[str, Any]: ...


@runtime_checkable
class MicroBatched(Protocol):
    """A datamodule's cap on the items one process passes through the model at once (None: its whole share of a
    global batch): the trainers split each share into equal micro-batches and sum their gradients."""

    micro_batch_size: int | None


@runtime_checkable
class TextsSource(Protocol):
    """MUSE-format data: the corpora by name."""

    def texts(self, config: str, split: str) -> list[str]: ...


def declares(obj: Any, protocol: type) -> bool:
    """Whether `obj`'s class declares `protocol` (subclasses it), not merely has its attributes."""
    return protocol in type(obj).__mro__


def as_plug(obj: Any, protocol: type[P]) -> P | None:
    """`obj` if it declares `protocol`, else None: for a part that is read only where the run has it."""
    return obj if declares(obj, protocol) else None


def plug_points(candidates: Iterable[Any], protocol: type[P]) -> list[P]:
    """Every candidate that declares `protocol`, in order."""
    return [c for c in candidates if declares(c, protocol)]


def plug_point(candidates: Iterable[Any], protocol: type[P], needed_by: str, fix: str) -> P:
    """The first candidate that declares `protocol`; a one-line UserError naming `needed_by` and `fix` if none."""
    found = plug_points(candidates, protocol)
    if not found:
        raise UserError(f"{needed_by} needs {_doc(protocol)} (a {protocol.__name__}), and the run has none: {fix}")
    return found[0]


def require(obj: Any, protocol: type[P], needed_by: str, fix: str, structural: bool = False) -> P:
    """`obj` itself, if it declares `protocol` (or, with `structural`, has its methods: a data source the user
    writes needs only `eval_splits`); otherwise a one-line UserError."""
    if obj is None or not (declares(obj, protocol) or (structural and isinstance(obj, protocol))):
        what = "nothing" if obj is None else type(obj).__name__
        raise UserError(f"{needed_by} needs {_doc(protocol)} (a {protocol.__name__}), got {what}: {fix}")
    return obj


def _doc(protocol: type) -> str:
    first = (protocol.__doc__ or protocol.__name__).strip().splitlines()[0].rstrip(".")
    return first[:1].lower() + first[1:]
