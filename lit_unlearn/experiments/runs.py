"""One unlearning run (or target training) in process, from plain class_path/init_args specs.

The experiment suite launches dozens of short runs; building them here instead of one CLI process each saves
the interpreter and import start-up per run, and gives the recorder's rows back directly.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from lit_unlearn.callbacks import ForgettingVerification, KappaEarlyStopping, StopAtTarget, TrajectoryRecorder
from lit_unlearn.data import ClassificationDataModule, MixtureForget, UnlearningDataModule
from lit_unlearn.errors import UserError
from lit_unlearn.modules import ClassifierModule
from lit_unlearn.specs import build

__all__ = ["RunResult", "build", "train_target", "unlearning_run"]


def _trainer(max_steps: int, callbacks: list, root: Path, max_epochs: int = -1, **kw) -> pl.Trainer:
    return pl.Trainer(max_steps=max_steps, max_epochs=max_epochs, callbacks=callbacks, logger=False,
                      enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                      log_every_n_steps=1, default_root_dir=str(root), accelerator="auto", devices=1, **kw)


def train_target(network_spec: dict, dataset_spec: dict, ckpt: Path, epochs: int, lr: float = 1e-3,
                 batch_size: int = 128, seed: int = 0) -> Path:
    """Train the target once; later runs reuse `ckpt` (delete it to retrain)."""
    if ckpt.is_file():
        return ckpt
    pl.seed_everything(seed, verbose=False)
    module = ClassifierModule(build(network_spec), lr=lr)
    module.network_spec = network_spec  # recorded in the checkpoint's training recipe (for retrained references)
    dm = ClassificationDataModule(build(dataset_spec), batch_size=batch_size, seed=seed)
    trainer = _trainer(-1, [], ckpt.parent, max_epochs=epochs)
    trainer.fit(module, dm)
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    trainer.save_checkpoint(str(ckpt))
    return ckpt


@dataclass
class RunResult:
    label: str
    epochs: list[dict[str, float]]
    steps: list[dict[str, float]]
    info: dict[str, Any] = field(default_factory=dict)  # steps_per_epoch, diverged_step, κ₂ stop steps

    def final(self, key: str) -> float:
        return self.epochs[-1].get(key, float("nan"))


def unlearning_run(label: str, method_spec: dict, network_spec: dict, dataset_spec: dict, target_ckpt: Path,
                   forget_class: int, rho: float, forget_size: int, epochs: int, retain_batch_size: int,
                   forget_batch_size: int, seed: int = 0, kappa_stopping: dict | None = None,
                   root: Path = Path("runs/experiments"), callbacks: list | None = None) -> RunResult:
    """Unlearn a ρ-mixture forget set for `epochs` epochs, validating (and recording) after each one.
    `callbacks` are added to the run (e.g. ForgettingVerification, StopAtTarget); the verification measures
    and the step the run ended on are returned in `info`."""
    pl.seed_everything(seed, verbose=False)
    spec = copy.deepcopy(method_spec)
    spec.setdefault("init_args", {})
    module = build(spec, network=build(network_spec), target_ckpt=str(target_ckpt))
    dm = UnlearningDataModule(build(dataset_spec), MixtureForget(forget_class, rho=rho, size=forget_size, seed=seed),
                              retain_batch_size=retain_batch_size, forget_batch_size=forget_batch_size, seed=seed)
    dm.setup("fit")
    steps_per_epoch = len(dm.train_dataloader())
    recorder = TrajectoryRecorder()
    extra = list(callbacks or [])
    callbacks: list = [recorder, *extra]
    stopper = None
    if kappa_stopping is not None:
        stopper = KappaEarlyStopping(verbose=False, **kappa_stopping)
        callbacks.append(stopper)
    module.report = False  # the suite writes its own tables
    trainer = _trainer(epochs * steps_per_epoch, callbacks, root, check_val_every_n_epoch=1)
    info: dict[str, Any] = {"steps_per_epoch": steps_per_epoch}
    try:
        trainer.fit(module, dm)
    except FloatingPointError as err:  # GA-style objectives can blow up: keep the trajectory up to there
        info.update(diverged_step=trainer.global_step, error=str(err).split(":")[0])
    except UserError as err:  # a forget target already met by the target model: a result (no unlearning needed)
        if "already met before unlearning" not in str(err):
            raise
        info.update(already_met=True)
        module.ended_on(0, note=str(err))
    if stopper is not None:
        info.update(would_stop_step=stopper.would_stop_step, stopped_step=stopper.stopped_step)
    if "diverged_step" in info or "already_met" in info:  # Lightning skipped the end-of-fit hooks
        for cb in extra:
            if isinstance(cb, StopAtTarget) and cb.history and "diverged_step" in info:
                cb.on_train_end(trainer, module)  # end on the closest weights seen before the divergence
        for cb in extra:
            if isinstance(cb, ForgettingVerification) and cb.before is not None:
                try:
                    cb.on_fit_end(trainer, module)
                except (FloatingPointError, ValueError):  # non-finite weights: nothing measurable
                    pass
    info.update(verification=module.verification, ended_on_step=module.ended_on_step,
                final_step=trainer.global_step)
    return RunResult(label, recorder.epochs, recorder.steps, info)
