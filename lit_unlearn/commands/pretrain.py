"""`lit-unlearn pretrain`: train a target model (the one that will later unlearn)."""

from __future__ import annotations

from lit_unlearn.commands import command


@command("pretrain", "train a target model (preset digits_pretrain; any LightningCLI override)", training=True,
         preset="digits_pretrain", order=20,
         examples=("lit-unlearn pretrain", "lit-unlearn pretrain --preset cifar10_pretrain "
                   "--data.init_args.dataset.init_args.root=/data/cifar-10-batches-py"))
def pretrain(lightning_args: list[str], preset: str) -> None:
    """Train a target model. The preset's config comes first (default digits_pretrain); --config files and
    --KEY=VALUE overrides follow and win, as in LightningCLI. Every checkpoint records the training recipe, so the
    retrained reference can repeat it on the retain set alone."""
    from lit_unlearn.launch.runs import build_run, fit_run

    fit_run(build_run(lightning_args, preset))
