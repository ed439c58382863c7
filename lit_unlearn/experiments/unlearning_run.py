"""One unlearning run (or target training) in process, from plain class_path/init_args specs, through the launch
path (each run has its own folder under the suite's out_dir/runs: resumable and pre-emption safe).

The experiment suite launches dozens of short runs; building them here instead of one CLI process each saves
the interpreter and import start-up per run, and gives the recorder's rows back directly.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lit_unlearn.callbacks import ForgettingVerification, KappaEarlyStopping, StopAtTarget, TrajectoryRecorder
from lit_unlearn.core.errors import UserError
from lit_unlearn.launch.runs import RunSpec, fit_run, launch, prepare_launch
from lit_unlearn.storage.specs import build, fingerprint

__all__ = ["RunResult", "build", "describe_callback", "tofu_run_specs", "tofu_unlearning_run", "train_target",
           "unlearning_run"]

TRAINER = {"log_every_n_steps": 1, "accelerator": "auto"}


def train_target(network_spec: dict, dataset_spec: dict, ckpt: Path, epochs: int, lr: float = 1e-3,
                 batch_size: int = 128, seed: int = 0) -> Path:
    """Train the target once; later runs reuse `ckpt` (delete it to retrain)."""
    if ckpt.is_file():
        return ckpt
    model = {"class_path": "lit_unlearn.modules.ClassifierModule", "init_args": {"network": network_spec, "lr": lr}}
    data = {"class_path": "lit_unlearn.data.ClassificationDataModule",
            "init_args": {"dataset": dataset_spec, "batch_size": batch_size, "seed": seed}}

    def record_spec(module) -> None:  # the checkpoint's training recipe names the network (retrained references)
        module.network_spec = network_spec

    launched = launch(RunSpec(ckpt.parent / "runs" / "target", model, data, {"max_epochs": epochs, **TRAINER},
                              seed=seed, configure=record_spec))
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    launched.trainer.save_checkpoint(str(ckpt))
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
    spec = copy.deepcopy(method_spec)
    spec["init_args"] = {**(spec.get("init_args") or {}), "network": network_spec, "target_ckpt": str(target_ckpt)}
    data = {"class_path": "lit_unlearn.data.UnlearningDataModule",
            "init_args": {"dataset": dataset_spec, "retain_batch_size": retain_batch_size,
                          "forget_batch_size": forget_batch_size, "seed": seed,
                          "forget": {"class_path": "lit_unlearn.data.MixtureForget",
                                     "init_args": {"forget_class": forget_class, "rho": rho, "size": forget_size,
                                                   "seed": seed}}}}
    return _run_in_epochs(label, spec, data, epochs, seed, kappa_stopping, root, callbacks)


def tofu_unlearning_run(label: str, method_spec: dict, world: Path, level: str, duplicates: float, epochs: int,
                        retain_batch_size: int, forget_batch_size: int, eval_items: int | None = 200, seed: int = 0,
                        kappa_stopping: dict | None = None, root: Path = Path("runs/experiments"),
                        callbacks: list | None = None, steps_per_epoch: int | None = None) -> RunResult:
    """The same on a TOFU world: unlearn forget`level` from the world's target, with the semantic duplicates of a
    share `duplicates` of the forget items in the retain set (TofuSource(retain_duplicates=...)), the LLM
    counterpart of ρ; validating on `eval_items` forget and retain items after each epoch. `steps_per_epoch` makes an
    "epoch" that many steps (a pass over the data is as many steps as the longer side needs, here the retain set)."""
    spec, data = tofu_run_specs(method_spec, world, level, duplicates, retain_batch_size, forget_batch_size,
                                eval_items, seed)
    return _run_in_epochs(label, spec, data, epochs, seed, kappa_stopping, root, callbacks, steps_per_epoch)


def tofu_run_specs(method_spec: dict, world: str | Path, level: str, duplicates: float = 0.0,
                   retain_batch_size: int = 32, forget_batch_size: int = 32, eval_items: int | None = None,
                   seed: int = 0) -> tuple[dict, dict]:
    """The model and data specs of an unlearning run on a TOFU world: `method_spec` applied to the world's target,
    and forget`level` against its retain set with the duplicates of a share `duplicates` of the forget items."""
    world = Path(world)
    spec = copy.deepcopy(method_spec)
    spec["init_args"] = {**(spec.get("init_args") or {}),
                         "network": {"class_path": "lit_unlearn.models.CausalLM",
                                     "init_args": {"name_or_path": str(world / "target")}}}
    data = {"class_path": "lit_unlearn.data.TofuDataModule",
            "init_args": {"source": {"class_path": "lit_unlearn.data.TofuSource",
                                     "init_args": {"path": str(world / "data"), "forget_level": level,
                                                   "retain_duplicates": float(duplicates)}},
                          "tokenizer": str(world / "tokenizer"), "retain_batch_size": retain_batch_size,
                          "forget_batch_size": forget_batch_size, "eval_items": eval_items, "seed": seed}}
    return spec, data


def _run_in_epochs(label: str, spec: dict, data: dict, epochs: int, seed: int, kappa_stopping: dict | None,
                   root: Path, callbacks: list | None, steps_per_epoch: int | None = None) -> RunResult:
    dm = build(data)
    dm.setup("fit")
    every = {"check_val_every_n_epoch": 1}
    if steps_per_epoch:  # validate every `steps_per_epoch` steps, wherever the data's own epochs end
        every = {"val_check_interval": int(steps_per_epoch), "check_val_every_n_epoch": None}
    else:
        steps_per_epoch = len(dm.train_dataloader())
    recorder = TrajectoryRecorder()
    extra = list(callbacks or [])
    callbacks: list = [recorder, *extra]
    stopper = None
    if kappa_stopping is not None:
        stopper = KappaEarlyStopping(verbose=False, **kappa_stopping)
        callbacks.append(stopper)
    trainer_args = {"max_steps": epochs * steps_per_epoch, "max_epochs": -1, **every, **TRAINER}
    identity = {"model": spec, "data": data, "seed": seed, "trainer": trainer_args, "label": label,
                "callbacks": [describe_callback(cb) for cb in callbacks]}

    def no_report(module) -> None:
        module.run_report.enabled = False  # the suite writes its own tables

    launched = prepare_launch(RunSpec(Path(root) / "runs" / f"{_safe(label)}-{fingerprint(identity, 10)}", spec, dm,
                                      trainer_args, seed=seed, callbacks=callbacks, identity=identity,
                                      configure=no_report))
    trainer, module = launched.trainer, launched.model
    info: dict[str, Any] = {"steps_per_epoch": steps_per_epoch}
    try:
        fit_run(launched)
    except FloatingPointError as err:  # GA-style objectives can blow up: keep the trajectory up to there
        info.update(diverged_step=trainer.global_step, error=str(err).split(":")[0])
    except UserError as err:  # a forget target already met by the target model: a result (no unlearning needed)
        if "already met before unlearning" not in str(err):
            raise
        info.update(already_met=True)
        module.run_report.ended_on(0, note=str(err))
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
    info.update(verification=module.run_report.verification, ended_on_step=module.run_report.ended_on_step,
                final_step=trainer.global_step)
    return RunResult(label, recorder.epochs, recorder.steps, info)


def _safe(label: str) -> str:
    """A label as a folder name."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:60]


def describe_callback(callback) -> Any:
    """What a callback contributes to a run's identity: its class and public settings."""
    from lit_unlearn.storage.specs import describe

    try:
        return describe(callback)
    except Exception:  # noqa: BLE001 - an attribute that does not describe: the class still tells runs apart
        return type(callback).__qualname__
