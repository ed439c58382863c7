"""`lit-unlearn retrain`: the retrained reference (gold standard) of an unlearning config, trained once and cached.

It reads the unlearning config (default preset digits_hamu) for the data, the forget set and the target, takes
the retraining settings from its ForgettingVerification callback (default: the target's recipe, cache under
runs/retrained), trains the target's architecture on D_r alone if no cached copy exists, and prints where it is
and how it scores. Unlearning runs with ForgettingVerification then load it from the cache.
"""

from __future__ import annotations

from lit_unlearn.console import say

__all__ = ["main", "retrained_reference"]

HELP = """usage: lit-unlearn retrain [--preset NAME] [--config FILE] [--KEY=VALUE ...]

Train, or find in the cache, the model retrained from scratch on the retain set alone with the target's recipe
(same architecture, epochs, optimizer, seed): the gold standard unlearning runs are judged against. The data,
forget set and target come from an unlearning config (default preset digits_hamu); the reference settings from
its ForgettingVerification callback (default: the recipe stored in the target checkpoint, cache runs/retrained).

On digits this takes seconds. On CIFAR-10 it costs as much as training the target (the paper's recipe: 50
epochs at batch 5000), which is the field's standard price of verification.

examples:
  lit-unlearn retrain
  lit-unlearn retrain --preset cifar10_hamu --data.init_args.dataset.init_args.root=/data/cifar-10-batches-py
"""


def retrained_reference(cli):
    """(reference network, its RetrainedReference, the datamodule) for an instantiated unlearning CLI."""
    from lit_unlearn.callbacks import ForgettingVerification
    from lit_unlearn.errors import UserError
    from lit_unlearn.verification import RetrainedReference

    dm, module = cli.datamodule, cli.model
    dm.setup("fit")
    if getattr(dm, "forget_indices", None) is None:
        raise UserError("`lit-unlearn retrain` works on image unlearning configs (UnlearningDataModule); for TOFU "
                        "the retain-only model is made by `lit-unlearn tofu-demo` / fine-tuning on the retain split")
    verification = next((cb for cb in cli.trainer.callbacks if isinstance(cb, ForgettingVerification)), None)
    reference = (verification.reference if verification is not None and verification.reference is not None
                 else RetrainedReference())
    network = reference.load(module.network, target_ckpt=getattr(module, "target_ckpt", None),
                             network_spec=getattr(module, "network_spec", None), dataset=dm.dataset, forget=dm.forget,
                             forget_indices=dm.forget_indices, n_train=len(dm.forget_indices) + len(dm.retain_indices),
                             log=say)
    return network, reference, dm


def main(argv: list[str]) -> None:
    if any(a in ("-h", "--help") for a in argv):
        print(HELP)
        return
    from lit_unlearn.recipes.fit import build_run
    from lit_unlearn.reporting import format_table
    from lit_unlearn.verification import ClassifierVerifier

    cli, _ = build_run(argv, "digits_hamu", manage_runs=False)
    network, reference, dm = retrained_reference(cli)
    where = "trained now" if reference.info.get("trained") else "from the cache"
    say(f"retrained reference ({where}): {reference.info.get('ckpt')}")
    m = ClassifierVerifier(dm.eval_sets).measure(network, "cpu").scalars
    rows = [{"measure": k, "value": m[k]} for k in ("ua", "ra", "ta", "test_forget_class_acc", "test_other_classes_acc",
                                                   "mia_efficacy", "forget_loss_median") if k in m]
    say(format_table(rows))
