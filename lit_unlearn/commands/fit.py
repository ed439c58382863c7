"""`lit-unlearn fit`: plain LightningCLI training from `--config` files, through the same launch path as every run."""

from __future__ import annotations

from lit_unlearn.commands import command


@command("fit", "fit any LightningCLI config (--config FILE ...), with run folders, resume and pre-emption safety",
         training=True, target=True, order=80, examples=("lit-unlearn fit --config configs/unlearn/cifar10/cifar10_hamu.yaml",))
def fit(lightning_args: list[str], target: str | None = None) -> None:
    """Fit the model and data of LightningCLI configs (--config FILE, repeatable; each one's `# extends:` chain
    first) and --KEY=VALUE overrides."""
    from lit_unlearn.launch.runs import build_run, fit_run

    fit_run(build_run(lightning_args, None, target))
