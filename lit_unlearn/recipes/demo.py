"""`lit-unlearn demo`: the embedded default job, offline, a minute or so on 2 CPU cores.

1. the target: ResNet-20 trained on scikit-learn's digits (reused when it exists; --fresh retrains it);
2. the retrained reference: the same recipe on the retain set alone (cached under runs/retrained);
3. HAMU unlearns digit 0, steered towards the retrained model (QuotaController) and stopped at the forget
   target (StopAtTarget, default "forget_vs_retrain_auc <= 0.6"), ending on the weights closest to it;
4. the table: before / after / retrained, UA, RA, TA, MIA-efficacy, forget-vs-retrain AUC, Avg. Gap, with
   TensorBoard logs under runs/digits.
"""

from __future__ import annotations

from pathlib import Path

from lit_unlearn.console import say

__all__ = ["main"]

TARGET = Path("runs/digits/target/latest/checkpoints/last.ckpt")
HELP = f"""usage: lit-unlearn demo [--fresh] [--target TARGET] [--KEY=VALUE ...]

The embedded default job, offline: train a ResNet-20 target on scikit-learn's digits (reused if
{TARGET} exists), train the retrained reference (the same recipe without digit 0; cached), unlearn digit 0
with HAMU until the forget target is met, and print the before / after / retrained table. TensorBoard logs
and results.{{md,csv,json}} go under runs/digits/.

options:
  --fresh            retrain the target (and so the reference) from scratch
  --target TARGET    the forget target (default: the preset's "forget_vs_retrain_auc <= 0.6")
  --KEY=VALUE        LightningCLI overrides for the unlearning run, e.g. --model.init_args.eta=0.02

The same steps one by one: lit-unlearn pretrain; lit-unlearn retrain; lit-unlearn unlearn.
"""


def main(argv: list[str]) -> None:
    if any(a in ("-h", "--help") for a in argv):
        print(HELP)
        return
    from lit_unlearn.recipes.fit import build_run, fit_run
    from lit_unlearn.recipes.retrain import retrained_reference

    fresh = "--fresh" in argv
    argv = [a for a in argv if a != "--fresh"]
    if fresh or not TARGET.is_file():
        say("== 1/3: training the target (ResNet-20 on scikit-learn digits) ==")
        fit_run(*build_run([], "digits_pretrain"))
    else:
        say(f"== 1/3: reusing the target at {TARGET} (--fresh retrains it) ==")
    unlearn_args = [f"--model.init_args.target_ckpt={TARGET}", *argv]
    say("== 2/3: the retrained reference (the target's recipe on the retain set alone) ==")
    cli, ckpt_path = build_run(unlearn_args, "digits_hamu")
    _, reference, _ = retrained_reference(cli)
    say(f"   {'trained' if reference.info.get('trained') else 'cached'}: {reference.info.get('ckpt')}")
    say("== 3/3: unlearning digit 0 with HAMU, stopping at the forget target ==")
    fit_run(cli, ckpt_path)
    say("TensorBoard: tensorboard --logdir runs/digits")
