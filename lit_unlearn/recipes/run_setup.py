"""What a managed training run gets before its objects are built: its own folder (lit_unlearn.run_folder) wired
into the logger, the checkpoint callbacks and the trainer's root, the checkpoint to resume from, pre-emption
handling at step boundaries, atomic checkpoint writes, and Lightning's mid-step SLURM handler switched off."""

from __future__ import annotations

import sys
from pathlib import Path

from lit_unlearn.run_folder import RunFolder, prepare_run
from lit_unlearn.specs import namespace_to_dict

__all__ = ["assign_run_folder", "cluster_ready", "CHECKPOINT_CALLBACKS", "LOGGERS"]

CHECKPOINT_CALLBACKS = ("ModelCheckpoint", "FinalCheckpoint")
LOGGERS = ("TensorBoardLogger", "CSVLogger")


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
    run = prepare_run(root, namespace_to_dict(config), config.get("ckpt_path"),
                      command="lit-unlearn " + " ".join(sys.argv[1:]))
    config["trainer.default_root_dir"] = str(run.path)
    if logger is not None:
        logger["init_args"]["version"] = run.version
    for cb in config.trainer.get("callbacks") or []:
        if hasattr(cb, "get") and str(cb.get("class_path", "")).endswith(CHECKPOINT_CALLBACKS):
            cb["init_args"]["dirpath"] = str(run.checkpoints)
    config["ckpt_path"] = run.resume_from
    return run


def cluster_ready(trainer_config: dict, callbacks: list, run: RunFolder) -> list:
    """Trainer plugins and callbacks every managed run gets (see the module docstring)."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    from lit_unlearn.callbacks.preemption import Preemption
    from lit_unlearn.checkpoint_io import AtomicCheckpointIO

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
    return [*callbacks, Preemption(identity=identity)]
