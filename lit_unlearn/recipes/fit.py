"""`lit-unlearn pretrain` / `unlearn`: a packaged config (preset), the user's configs and overrides, then fit.

The objects are built by LightningCLI (run=False), adjusted (a `--target` adds or retargets StopAtTarget), and
fitted here, so every command that trains goes through the same place.
"""

from __future__ import annotations

import sys

from lit_unlearn.errors import UserError

__all__ = ["fit_command", "build_run", "fit_run", "add_target"]

FIT_HELP = """usage: lit-unlearn {name} [--preset NAME] [--target TARGET] [--ckpt_path PATH|last] [--config FILE]
                        [--KEY=VALUE ...]

{purpose}. The preset's config comes first (default {preset}); --config files and --key=value overrides follow
and win, as in LightningCLI.

options:
  --preset NAME       a packaged config; `lit-unlearn configs` lists them
  --target TARGET     stop at a forget target and end on the weights closest to it, e.g.
                      "forget_vs_retrain_auc <= 0.6", "ua within 0.05 of retrain", "forget_acc <= 0.05"
  --ckpt_path P       resume from a checkpoint; 'last' resumes this run's latest
  --config FILE       a LightningCLI config (repeatable)
  --KEY=VALUE         any LightningCLI override, e.g. --model.init_args.eta=0.05 --trainer.max_steps=200
  --help-all          every LightningCLI option of the preset

examples:
  lit-unlearn {name}
  lit-unlearn {name} --preset {example}
"""


def add_target(trainer, target: str) -> None:
    """Retarget the run's StopAtTarget, or add one (with a retrained reference when the target needs it)."""
    from lightning.pytorch.callbacks import Checkpoint

    from lit_unlearn.callbacks import ForgettingVerification, StopAtTarget
    from lit_unlearn.verification.targets import parse_targets

    parts = parse_targets(target)
    callbacks = trainer.callbacks
    stopper = next((cb for cb in callbacks if isinstance(cb, StopAtTarget)), None)
    at = next((i for i, cb in enumerate(callbacks) if isinstance(cb, Checkpoint)), len(callbacks))
    if stopper is not None:
        stopper.target = target
        return
    new = [StopAtTarget(target)]
    if any(p.needs_reference for p in parts) and parts[0].info.kind == "classifier" and \
            not any(isinstance(cb, ForgettingVerification) for cb in callbacks):
        new.insert(0, ForgettingVerification())
    callbacks[at:at] = new  # before the checkpoint callbacks: the closest weights are restored before they save


def build_run(argv: list[str], default_preset: str):
    """(LightningCLI object with model, datamodule, trainer; ckpt_path) for a preset plus user arguments."""
    from lit_unlearn.cli import UnlearnCLI, preset_args

    target = None
    if "--target" in argv:
        i = argv.index("--target")
        if i + 1 >= len(argv):
            raise UserError('--target needs a value, e.g. --target "forget_vs_retrain_auc <= 0.6"')
        target, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    _, args = preset_args(argv, default_preset)
    cli = UnlearnCLI(args=args, run=False)
    cli.record_network_spec()
    if target is not None:
        add_target(cli.trainer, target)
    return cli, cli.config.get("ckpt_path")


def resolve_checkpoint(trainer, ckpt_path: str | None) -> str | None:
    """'last' → this run's latest checkpoint (an error when there is none); a path must exist."""
    from pathlib import Path

    from lit_unlearn.console import say
    from lit_unlearn.errors import MissingFileError

    if ckpt_path is None:
        return None
    if ckpt_path == "last":
        folder = getattr(trainer.checkpoint_callback, "dirpath", None)
        last = Path(folder) / "last.ckpt" if folder else None
        if last is None or not last.exists():
            raise MissingFileError(f"--ckpt_path last: no checkpoint to resume in {folder or 'this run'}; "
                                   "start without --ckpt_path")
        ckpt_path = str(last)
    elif not Path(ckpt_path).exists():
        raise MissingFileError(f"--ckpt_path {ckpt_path}: no such checkpoint")
    say(f"resuming from {ckpt_path}")
    return ckpt_path


def fit_run(cli, ckpt_path: str | None = None):
    cli.trainer.fit(cli.model, cli.datamodule, ckpt_path=resolve_checkpoint(cli.trainer, ckpt_path))
    return cli


def fit_command(argv: list[str], default_preset: str, name: str, purpose: str) -> None:
    if any(a in ("-h", "--help") for a in argv):
        example = "digits_npo" if name == "unlearn" else "cifar10_pretrain"
        print(FIT_HELP.format(name=name, purpose=purpose[0].upper() + purpose[1:], preset=default_preset,
                              example=example))
        return
    if "--help-all" in argv:
        from lit_unlearn.cli import UnlearnCLI, preset_args

        _, args = preset_args([a for a in argv if a != "--help-all"], default_preset)
        try:
            UnlearnCLI(args=[*args, "--help"], run=False)
        except SystemExit:
            pass
        sys.stdout.flush()
        return
    cli, ckpt_path = build_run(argv, default_preset)
    fit_run(cli, ckpt_path)
