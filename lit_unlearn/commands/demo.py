"""`lit-unlearn demo`: the embedded default job, offline (20 s from nothing on a 2-core AVX512 machine).

1. the target: ResNet-20 trained on scikit-learn's digits (reused when it exists; --fresh retrains it);
2. the retrained reference: the same recipe on the retain set alone (cached under runs/retrained);
3. HAMU unlearns digit 0, steered towards the retrained model (QuotaController) and stopped at the forget
   target (StopAtTarget, default "forget_vs_retrain_auc <= 0.6"), ending on the weights closest to it;
4. the table: before / after / retrained, UA, RA, TA, MIA-efficacy, forget-vs-retrain AUC, Avg. Gap, with
   TensorBoard logs under runs/digits.
"""

from __future__ import annotations

from pathlib import Path

from lit_unlearn.commands import command

TARGET = Path("runs/digits/target/latest/checkpoints/last.ckpt")


@command("demo", "the embedded default: digits target, retrained reference, HAMU stopped at the forget target, table",
         training=True, target=True, order=10,
         examples=("lit-unlearn demo", 'lit-unlearn demo --target "ua within 0.05 of retrain"'))
def demo(lightning_args: list[str], target: str | None = None, fresh: bool = False) -> None:
    """The embedded default job, offline: train a ResNet-20 target on scikit-learn's digits (reused if
    runs/digits/target/latest/checkpoints/last.ckpt exists), train the retrained reference (the same recipe without
    digit 0; cached), unlearn digit 0 with HAMU until the forget target is met, and print the before / after /
    retrained table. TensorBoard logs and results.{md,csv,json} go under runs/digits/. The same steps one by one:
    lit-unlearn pretrain; lit-unlearn retrain; lit-unlearn unlearn.

    Args:
        fresh: retrain the target (and so the reference) from scratch
    """
    from lit_unlearn.core.console import say
    from lit_unlearn.launch.runs import retrained_reference_of
    from lit_unlearn.launch.runs import build_run, fit_run

    if fresh or not TARGET.is_file():
        say("== 1/3: training the target (ResNet-20 on scikit-learn digits) ==")
        fit_run(build_run([], "digits_pretrain"))
    else:
        say(f"== 1/3: reusing the target at {TARGET} (--fresh retrains it) ==")
    say("== 2/3: the retrained reference (the target's recipe on the retain set alone) ==")
    launched = build_run([f"--model.init_args.target_ckpt={TARGET}", *lightning_args], "digits_hamu", target)
    _, reference, _ = retrained_reference_of(launched)
    say(f"   {'trained' if reference.info.get('trained') else 'cached'}: {reference.info.get('ckpt')}")
    say("== 3/3: unlearning digit 0 with HAMU, stopping at the forget target ==")
    fit_run(launched)
    say("TensorBoard: tensorboard --logdir runs/digits")
