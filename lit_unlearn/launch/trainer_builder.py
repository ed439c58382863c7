"""The one place a run's Trainer is made, whichever front end built the run (lit_unlearn.launch.runs): its
callbacks in their declared order, the step progress bar, and what every managed run gets (lit_unlearn.launch.
cluster: atomic checkpoint writes, pre-emption at step boundaries, the run folder as its root)."""

from __future__ import annotations

from typing import Any

__all__ = ["CALLBACK_ORDER", "ordered_callbacks", "build_trainer"]

# The order callbacks run in, by what they read: metric sources measure the start before a stop rule looks;
# the stop rule restores the weights it chose at train end before anything saves or reports them; the quota
# controller reads the stop rule's looks; checkpoint callbacks save last; pre-emption handling comes after all,
# except the note that training is over, which comes before the final evaluation (its signals stop the run at once).
CALLBACK_ORDER = (
    ("training over", ("TrainingOver",)),
    ("metric sources", ("ForgettingVerification", "TofuEvaluation", "HoldoutVerification", "MuseEvaluation")),
    ("stop rules", ("StopAtTarget",)),
    ("controllers", ("QuotaController", "RhoScheduler")),
    ("others", ()),
    ("checkpoints", ("ModelCheckpoint", "FinalCheckpoint")),
    ("pre-emption", ("Preemption",)),
)


def ordered_callbacks(callbacks: list) -> list:
    """`callbacks` in CALLBACK_ORDER (a stable sort: within a group, as given)."""
    rank = {name: i for i, (_, names) in enumerate(CALLBACK_ORDER) for name in names}
    others = next(i for i, (group, _) in enumerate(CALLBACK_ORDER) if group == "others")

    def group(cb) -> int:
        return next((rank[k.__name__] for k in type(cb).__mro__ if k.__name__ in rank), others)

    return sorted(callbacks, key=group)


def build_trainer(trainer_args: dict[str, Any], callbacks: list, run=None, progress: bool = False):
    """A run's Trainer: the step progress bar (or none), the plugins
    and the pre-emption callback every managed run gets (lit_unlearn.launch.cluster.cluster_ready), the run folder
    as its root, and the callbacks in CALLBACK_ORDER."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ProgressBar

    from lit_unlearn.launch.cluster import cluster_ready
    from lit_unlearn.storage.specs import build

    trainer_args = dict(trainer_args)
    callbacks = list(callbacks)
    if progress and trainer_args.get("enable_progress_bar", True) is not False:
        if not any(isinstance(c, ProgressBar) for c in callbacks):
            from lit_unlearn.callbacks.step_progress import StepProgressBar

            callbacks.append(StepProgressBar())  # steps, not "Epoch 19/-2", for step-bounded runs
    else:
        trainer_args["enable_progress_bar"] = False
    if isinstance(trainer_args.get("strategy"), dict):  # e.g. DeepSpeed ZeRO-3 in a 7B bench config
        trainer_args["strategy"] = build(trainer_args["strategy"])
    if run is not None:
        callbacks = cluster_ready(trainer_args, callbacks, run)
        trainer_args["default_root_dir"] = str(run.path)
    return pl.Trainer(callbacks=ordered_callbacks(callbacks), **trainer_args)
