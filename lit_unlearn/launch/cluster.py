"""What every managed training run gets: its own folder (lit_unlearn.launch.run_folder) wired into the logger, the
checkpoint callbacks and the trainer's root, the checkpoint to resume from, pre-emption handling at step
boundaries, atomic checkpoint writes, and Lightning's mid-step SLURM handler switched off.

`assign_run_folder` works on a LightningCLI config before its objects are built; `cluster_ready` adds the plugins
and callbacks to any trainer's arguments (a LightningCLI config node or plain `pl.Trainer` keyword arguments).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from lit_unlearn.launch.run_folder import RunFolder, prepare_run, run_identity
from lit_unlearn.storage.specs import namespace_to_dict

__all__ = ["assign_run_folder", "cluster_ready", "CHECKPOINT_CALLBACKS", "LOGGERS", "command_line"]

CHECKPOINT_CALLBACKS = ("ModelCheckpoint", "FinalCheckpoint")
LOGGERS = ("TensorBoardLogger", "CSVLogger")


def command_line() -> str:
    """The command that started this process, as a user would retype it to resume: quoted for a POSIX shell, so an
    argument holding spaces or brackets (a bench method such as "OFMU (rho per epoch)") pastes back whole."""
    return "lit-unlearn " + shlex.join(sys.argv[1:])


def _logger_root(config) -> tuple[Path, object]:
    """(the run root, the logger's config node) — runs live in <save_dir>/<name>/version_N."""
    logger = config.trainer.get("logger") if config.get("trainer") is not None else None
    if isinstance(logger, list):
        logger = next((lg for lg in logger if str(lg.get("class_path", "")).endswith(LOGGERS)), None)
    if logger is None or logger is True or not hasattr(logger, "get") or \
            not str(logger.get("class_path", "")).endswith(LOGGERS):
        return Path(config.trainer.get("default_root_dir") or ".") / "lightning_logs", None
    args = logger.get("init_args")
    return Path(args.get("save_dir") or ".") / str(args.get("name") or "lightning_logs"), logger


def assign_run_folder(config) -> RunFolder:
    """Choose the run's folder (new, or the one it resumes) and point the config's logger, checkpoint callbacks
    and root at it; `ckpt_path` becomes the concrete checkpoint to resume from."""
    root, logger = _logger_root(config)
    run = prepare_run(root, run_identity(namespace_to_dict(config)), config.get("ckpt_path"), command=command_line())
    config["trainer.default_root_dir"] = str(run.path)
    if logger is not None:
        logger["init_args"]["version"] = run.version
    for cb in config.trainer.get("callbacks") or []:
        if hasattr(cb, "get") and str(cb.get("class_path", "")).endswith(CHECKPOINT_CALLBACKS):
            cb["init_args"]["dirpath"] = str(run.checkpoints)
    config["ckpt_path"] = run.resume_from
    return run


def cluster_ready(trainer_config, callbacks: list, run: RunFolder) -> list:
    """Put the plugins every managed run gets into `trainer_config` (atomic checkpoint writes unless DeepSpeed
    writes its own, and SLURM detection without Lightning's mid-step requeue) and return `callbacks` with the
    Preemption callback added (and, first, TrainingOver: a signal during the final evaluation stops the run)."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    from lit_unlearn.callbacks.preemption import Preemption, TrainingOver
    from lit_unlearn.storage.checkpoint_io import AtomicCheckpointIO

    plugins = trainer_config.get("plugins") or []
    plugins = list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
    strategy = trainer_config.get("strategy")
    if "deepspeed" not in type(strategy).__name__.lower() and "deepspeed" not in str(strategy).lower() \
            and not any(hasattr(p, "save_checkpoint") for p in plugins):
        plugins.append(AtomicCheckpointIO())
    if SLURMEnvironment.detect() and not any(isinstance(p, SLURMEnvironment) for p in plugins):
        plugins.append(SLURMEnvironment(auto_requeue=False))  # Preemption saves at the step boundary instead
    trainer_config["plugins"] = plugins
    identity = {"fingerprint": run.fingerprint, "folder": str(run.path), "identity": run.identity}
    preemption = Preemption(identity=identity)
    return [TrainingOver(preemption), *callbacks, preemption]
