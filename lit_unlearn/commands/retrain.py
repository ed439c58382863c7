"""`lit-unlearn retrain`: the retrained reference (gold standard) of an unlearning config, trained once and cached.

It reads the unlearning config (default preset digits_hamu) for the data, the forget set and the target, takes
the retraining settings from its ForgettingVerification callback (default: the target's recipe, cache under
runs/retrained), trains the target's architecture on D_r alone through the launch path if no cached copy exists,
and prints where it is and how it scores. Unlearning runs with ForgettingVerification then load it from the cache.
"""

from __future__ import annotations

from lit_unlearn.commands import command


@command("retrain", "train, or find in the cache, the retrained reference of an unlearning config (gold standard)",
         training=True, preset="digits_hamu", order=40,
         examples=("lit-unlearn retrain", "lit-unlearn retrain --preset cifar10_hamu "
                   "--data.init_args.dataset.init_args.root=/data/cifar-10-batches-py"))
def retrain(lightning_args: list[str], preset: str) -> None:
    """Train, or find in the cache, the model retrained from scratch on the retain set alone with the target's recipe
    (same architecture, epochs, optimizer, seed): the gold standard unlearning runs are judged against. The data,
    forget set and target come from an unlearning config; the reference settings from its ForgettingVerification
    callback (default: the recipe stored in the target checkpoint, cache runs/retrained). On digits this takes
    seconds; on CIFAR-10 it costs as much as training the target, the field's standard price of verification."""
    from lit_unlearn.core.console import say
    from lit_unlearn.launch.runs import retrained_reference_of
    from lit_unlearn.launch.runs import build_run
    from lit_unlearn.metrics.results_tables import format_table
    from lit_unlearn.verification import ClassifierVerifier

    network, reference, dm = retrained_reference_of(build_run(lightning_args, preset, manage_runs=False))
    where = "trained now" if reference.info.get("trained") else "from the cache"
    say(f"retrained reference ({where}): {reference.info.get('ckpt')}")
    m = ClassifierVerifier(dm.eval_sets).measure(network, "cpu").scalars
    rows = [{"measure": k, "value": m[k]} for k in ("ua", "ra", "ta", "test_forget_class_acc", "test_other_classes_acc",
                                                   "mia_efficacy", "forget_loss_median") if k in m]
    say(format_table(rows))
