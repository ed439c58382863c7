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
  --ckpt_path P       resume: 'last' (this configuration's unfinished run), 'auto' (resume if possible, else
                      start anew) or a checkpoint path; each run has its own folder (docs/cluster.md)
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


def build_run(argv: list[str], default_preset: str, manage_runs: bool = True):
    """(LightningCLI object with model, datamodule, trainer; ckpt_path) for a preset plus user arguments.
    manage_runs: the run gets its own folder and resume logic (lit_unlearn.run_folder); off for commands that
    only read a config (retrain)."""
    from lit_unlearn.cli import UnlearnCLI, preset_args

    target = None
    if "--target" in argv:
        i = argv.index("--target")
        if i + 1 >= len(argv):
            raise UserError('--target needs a value, e.g. --target "forget_vs_retrain_auc <= 0.6"')
        target, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    _, args = preset_args(argv, default_preset)
    UnlearnCLI.last_run_folder = None
    try:
        cli = UnlearnCLI(args=args, run=False, manage_runs=manage_runs)
        cli.record_network_spec()
        if target is not None:
            add_target(cli.trainer, target)
    except BaseException:
        if UnlearnCLI.last_run_folder is not None:  # a failed start leaves no empty run folder behind
            UnlearnCLI.last_run_folder.remove_if_empty()
        raise
    return cli, cli.config.get("ckpt_path")


def fit_run(cli, ckpt_path: str | None = None):
    """Fit, and keep the run's folder truthful: finished (final checkpoint printed, hpc checkpoints removed,
    `latest` updated), interrupted (how to resume; exit code 128 + signal), or failed (removed if it holds no
    checkpoint)."""
    import signal

    from lit_unlearn.callbacks.preemption import Preempted
    from lit_unlearn.console import say
    from lit_unlearn.distributed.shutdown import release_process_group
    from lit_unlearn.run_folder import release_claim

    run = getattr(cli, "run_folder", None)
    trainer = cli.trainer
    if run is None:
        trainer.fit(cli.model, cli.datamodule, ckpt_path=ckpt_path)
        return cli
    for note in run.notes:
        say(note)
    try:
        trainer.fit(cli.model, cli.datamodule, ckpt_path=run.resume_from)
    except SystemExit as stop:  # a pre-emption signal, SIGTERM (Lightning) or Ctrl+C (Lightning exits with 1)
        signum = stop.signum if isinstance(stop, Preempted) else (signal.SIGTERM if stop.code is None
                                                                   else signal.SIGINT)
        name = signal.Signals(signum).name
        info = run.record(status="interrupted", interrupted_at_step=trainer.global_step, signal=name)
        command = info.get("command") or "lit-unlearn ..."
        hint = command if "--ckpt_path" in command else f"{command} --ckpt_path last"
        say(f"interrupted at step {trainer.global_step} by {name}; resume with: {hint}")
        release_claim(run)
        if isinstance(stop, Preempted):  # every rank stopped at the same boundary: no collective is in flight
            release_process_group()
        raise SystemExit(128 + int(signum)) from None
    except BaseException:
        if not run.remove_if_empty():
            run.record(status="failed", failed_at_step=trainer.global_step)
        release_claim(run)
        raise
    from lit_unlearn.run_folder import newest_loadable_checkpoint

    run.remove_hpc_checkpoints()
    final = run.checkpoints / "last.ckpt"
    if not final.exists():  # no FinalCheckpoint: the newest checkpoint the run wrote
        final = newest_loadable_checkpoint(run.path)[0] or final
    run.record(status="finished", global_step=trainer.global_step,
               final_checkpoint=str(final) if final.exists() else None)
    _point_latest(run.path)
    release_claim(run)
    if final.exists():
        from lit_unlearn.run_folder import shown

        say(f"final checkpoint: {shown(final)}")
    return cli


def _point_latest(folder) -> None:
    """`<root>/latest` → the run that finished last (a stable path to its final checkpoint)."""
    import os

    from lit_unlearn.run_folder import _rank

    if _rank() != 0:
        return
    link = folder.parent / "latest"
    tmp = folder.parent / f".latest-{os.getpid()}"
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(folder.name, target_is_directory=True)
        os.replace(tmp, link)  # atomic swap of the link
    except OSError:  # a filesystem without symbolic links: the path is in run.json anyway
        tmp.unlink(missing_ok=True)


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
