"""The one launch path. Every training run is a `RunSpec` fitted by `fit_run`, with two front ends:
- code: a `RunSpec` built by its caller (bench grid points, experiment runs, a world's tiny models, retrained
  references), `launch(spec)`;
- the command line: `build_run` parses a preset plus LightningCLI arguments (LightningCLI builds the model, the
  datamodule and the Trainer's arguments and claims the run folder) into the same `RunSpec`.
Both are made ready by `prepare_launch`, which builds the one kind of Trainer (`build_trainer`): callbacks in their
declared order, the progress bar, and what every managed run gets (lit_unlearn.launch.trainer_builder).

So every run has its own folder (lit_unlearn.launch.run_folder) and resumes from it (`ckpt_path` 'last', 'auto',
a path, or a SLURM requeue), saves a consistent checkpoint at the next step boundary on SIGUSR1/SIGTERM and
exits with 128 + the signal, writes its checkpoints atomically, and leaves a truthful `run.json` (finished,
interrupted with how to resume, or failed). Retrained references the run's callbacks need are trained first, as
runs of their own (`train_classifier`; fitting a run can launch another, so both live here).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lit_unlearn.core.errors import UserError

__all__ = ["RunSpec", "Launched", "launch", "prepare_launch", "build_run", "fit_run", "add_target", "train_classifier",
           "prepare_references", "retrained_reference_of"]


@dataclass
class RunSpec:
    """One training run built in code. `model` and `data` are `{class_path, init_args}` specs (built after
    seeding, as LightningCLI builds them) or objects already built; with objects, `identity` says what defines
    the run (its fingerprint decides which unfinished run a relaunch resumes)."""

    root: str | Path                      # run folders go to root/version_N
    model: Any
    data: Any
    trainer: dict[str, Any] = field(default_factory=dict)   # pl.Trainer keyword arguments
    seed: int = 0
    callbacks: list = field(default_factory=list)
    identity: dict[str, Any] | None = None
    ckpt_path: str | None = "auto"        # resume this configuration's unfinished run if it has a checkpoint
    final_checkpoint: bool = False        # keep the final weights as checkpoints/last.ckpt
    progress: bool = False                # a step progress bar (on a terminal)
    configure: Any = None                 # called with the built model before fitting (e.g. switch its report off)
    run: Any = None                       # a run folder already claimed (the command line claims it before it
                                          # builds the objects, whose logger and checkpoints point into it)
    managed: bool = True                  # False: no run folder (a command that only reads a config)
    from_command_line: bool = False


@dataclass
class Launched:
    """A run's objects: what `fit_run` fits and reports on."""

    trainer: Any
    model: Any
    datamodule: Any
    run: Any = None                       # its RunFolder (None: an unmanaged run)
    ckpt_path: str | None = None          # unmanaged runs: the checkpoint to resume from
    from_command_line: bool = False       # a training command: say where the final checkpoint is, resume by flag


def launch(spec: RunSpec) -> Launched:
    """Build the objects of `spec`, claim the run's folder (or the unfinished one it resumes), and fit them."""
    return fit_run(prepare_launch(spec))


def prepare_launch(spec: RunSpec) -> Launched:
    """The objects of `spec`, its run folder (claimed now, or the one the command line claimed) and its Trainer,
    ready for `fit_run`."""
    import lightning.pytorch as pl

    from lit_unlearn.launch.cluster import command_line
    from lit_unlearn.launch.run_folder import prepare_run, release_claim
    from lit_unlearn.launch.trainer_builder import build_trainer
    from lit_unlearn.core.quiet import quiet_lightning
    from lit_unlearn.storage.specs import build

    quiet_lightning()
    run = spec.run
    trainer_args: dict[str, Any] = dict(spec.trainer)
    if not spec.from_command_line:  # built in code: seed, build the objects, claim the folder
        pl.seed_everything(spec.seed, verbose=False)
        trainer_args = {"logger": False, "enable_model_summary": False, "num_sanity_val_steps": 0,
                        "accelerator": "cpu", "devices": 1, **trainer_args}
    model = build(spec.model) if isinstance(spec.model, dict) else spec.model
    data = build(spec.data) if isinstance(spec.data, dict) else spec.data
    if spec.configure is not None:
        spec.configure(model)
    if run is None and spec.managed and not spec.from_command_line:
        if spec.identity is None and not (isinstance(spec.model, dict) and isinstance(spec.data, dict)):
            raise ValueError("RunSpec with built objects needs `identity` (what defines the run)")
        identity = spec.identity if spec.identity is not None else \
            {"model": spec.model, "data": spec.data, "seed_everything": spec.seed}
        run = prepare_run(spec.root, identity, spec.ckpt_path, command=command_line())
    try:
        callbacks = list(spec.callbacks)
        if spec.final_checkpoint:
            from lit_unlearn.callbacks.final_checkpoint import FinalCheckpoint

            callbacks.append(FinalCheckpoint(dirpath=str(run.checkpoints), save_top_k=0, save_last=True))
        elif not spec.from_command_line:
            trainer_args.setdefault("enable_checkpointing", False)
        trainer = build_trainer(trainer_args, callbacks, run, spec.progress)
    except BaseException:
        if run is not None:
            run.remove_if_empty()
            release_claim(run)
        raise
    return Launched(trainer, model, data, run, None if run is not None else spec.ckpt_path,
                    from_command_line=spec.from_command_line)


def add_target(callbacks: list, target: str) -> None:
    """Retarget the run's StopAtTarget, or add one (with a retrained reference when the target needs it)."""
    from lit_unlearn.callbacks import ForgettingVerification, StopAtTarget
    from lit_unlearn.verification.targets import parse_targets

    parts = parse_targets(target)
    stopper = next((cb for cb in callbacks if isinstance(cb, StopAtTarget)), None)
    if stopper is not None:
        stopper.target = target
        return
    callbacks.append(StopAtTarget(target))  # its place in the order is CALLBACK_ORDER's
    if any(p.needs_reference for p in parts) and parts[0].info.kind == "classifier" and \
            not any(isinstance(cb, ForgettingVerification) for cb in callbacks):
        callbacks.append(ForgettingVerification())


def build_run(lightning_args: list[str], preset: str | None = None, target: str | None = None,
              manage_runs: bool = True) -> Launched:
    """The command-line front end: the preset's configs, then the user's LightningCLI arguments (LightningCLI
    builds model, datamodule and the Trainer's arguments, and claims the run's folder), as a RunSpec made ready
    by `prepare_launch`; `target` adds or retargets a StopAtTarget. manage_runs: the run gets its own folder and
    resume logic; off for commands that only read a config (`lit-unlearn retrain`)."""
    from lit_unlearn.launch.arguments import check_class_arguments, lightning_arguments
    from lit_unlearn.launch.lightning_cli import UnlearnCLI

    args = lightning_arguments(preset, lightning_args)
    check_class_arguments(args)
    cli = UnlearnCLI(args=args, run=False, manage_runs=manage_runs)
    try:
        cli.record_network_spec()
        callbacks = list(cli.trainer_callbacks)
        if target is not None:
            add_target(callbacks, target)
        args = cli.trainer_arguments
        spec = RunSpec(root=cli.run_folder.path.parent if cli.run_folder else ".", model=cli.model,
                       data=cli.datamodule, trainer=args, seed=int(cli.config.get("seed_everything") or 0),
                       callbacks=callbacks, ckpt_path=cli.config.get("ckpt_path"), run=cli.run_folder,
                       managed=manage_runs, progress=args.get("enable_progress_bar", True) is not False,
                       from_command_line=True)
        return prepare_launch(spec)
    except BaseException:
        if cli.run_folder is not None:
            cli.run_folder.remove_if_empty()
        raise


def _stop_signal(stop: SystemExit) -> int:
    from lit_unlearn.callbacks.preemption import Preempted

    if isinstance(stop, Preempted):
        return stop.signum
    if isinstance(stop.code, int) and stop.code > 128:  # 128 + the signal, as a bench between runs exits
        return stop.code - 128
    return signal.SIGTERM if stop.code is None else signal.SIGINT  # Lightning's SIGTERM exit, or Ctrl+C (code 1)


def fit_run(launched: Launched) -> Launched:
    """Fit, and keep the run's folder truthful: finished (final checkpoint printed, hpc checkpoints removed,
    `latest` updated), interrupted (how to resume; exit code 128 + signal), or failed (removed if it holds no
    checkpoint). Retrained references the callbacks need are made first."""
    from lit_unlearn.callbacks.preemption import Preempted
    from lit_unlearn.core.console import say
    from lit_unlearn.distributed.shutdown import release_process_group
    from lit_unlearn.launch.run_folder import newest_loadable_checkpoint, release_claim, shown

    trainer, run = launched.trainer, launched.run
    if run is None:
        prepare_references(trainer, launched.model, launched.datamodule)
        _fit(trainer, launched, launched.ckpt_path)
        return launched
    for note in run.notes:
        say(note)
    try:
        prepare_references(trainer, launched.model, launched.datamodule)
        _fit(trainer, launched, run.resume_from)
    except SystemExit as stop:  # a pre-emption signal, SIGTERM (Lightning) or Ctrl+C (Lightning exits with 1)
        signum = _stop_signal(stop)
        name = signal.Signals(signum).name
        info = run.record(status="interrupted", interrupted_at_step=trainer.global_step, signal=name)
        command = info.get("command") or "lit-unlearn ..."
        # A training command resumes with --ckpt_path last; a run built in code resumes by itself ('auto') when
        # the command that built it runs again.
        hint = f"{command} --ckpt_path last" if launched.from_command_line and "--ckpt_path" not in command \
            else command
        say(f"interrupted at step {trainer.global_step} by {name}; resume with: {hint}")
        release_claim(run)
        if isinstance(stop, Preempted) and stop.boundary:  # every rank stopped at the same step: no collective
            release_process_group()                           # is in flight
        raise SystemExit(128 + int(signum)) from None
    except BaseException as err:
        if not run.remove_if_empty():
            run.record(status="failed", failed_at_step=trainer.global_step)
        release_claim(run)
        if isinstance(err, FloatingPointError) and launched.from_command_line:
            from lit_unlearn.core.errors import RunFailed

            good = _newest_finite_checkpoint(run.path)
            where = f"the last finite weights are in {shown(good)}" if good else "no checkpoint with finite weights"
            raise RunFailed(f"{str(err).splitlines()[0]} ({where})") from err
        raise
    run.remove_hpc_checkpoints()
    final = run.checkpoints / "last.ckpt"
    if not final.exists():  # no FinalCheckpoint: the newest checkpoint the run wrote
        final = newest_loadable_checkpoint(run.path)[0] or final
    model_folder = _export_final_model(launched)
    run.record(status="finished", global_step=trainer.global_step,
               final_checkpoint=str(final) if final.exists() else None,
               final_model=None if model_folder is None else str(model_folder))
    _point_latest(run.path)
    release_claim(run)
    if final.exists() and launched.from_command_line:  # runs built in code say nothing: their caller reports
        say(f"final checkpoint: {shown(final)}")
        if model_folder is not None:
            say(f"final model (Hugging Face folder): {shown(model_folder)}")
    return launched


def _fit(trainer, launched: Launched, ckpt_path: str | None) -> None:
    """trainer.fit, resuming only from a checkpoint that unpickles without running code
    (lit_unlearn.storage.safe_load): vetted here, then loaded by Lightning (or DeepSpeed) under the same allow-list."""
    import torch

    from lit_unlearn.storage.safe_load import allowed_globals, check_checkpoint, trusted

    if ckpt_path and Path(ckpt_path).exists():
        check_checkpoint(ckpt_path)
    with torch.serialization.safe_globals(list(allowed_globals())):
        trainer.fit(launched.model, launched.datamodule, ckpt_path=ckpt_path, weights_only=not trusted())


def _export_final_model(launched: Launched) -> Path | None:
    """An LLM unlearning run's final weights (after any stop rule restored the ones it chose) as a Hugging Face
    folder in its run folder (lit_unlearn.models.hf_export), written by rank zero."""
    from lit_unlearn.models.hf_export import HF_FOLDER, export_hf
    from lit_unlearn.modules.unlearning import UnlearningModule

    module, run = launched.model, launched.run
    network = getattr(module, "network", None)
    tokenizer = getattr(launched.datamodule, "tokenizer", None)
    if not isinstance(module, UnlearningModule) or not hasattr(network, "save_pretrained") or tokenizer is None:
        return None
    from lit_unlearn.distributed.gathered_weights import gathered_weights

    with gathered_weights(network):  # ZeRO-3 partitions: gathered on every rank (collective); rank zero writes
        if launched.trainer.is_global_zero:
            export_hf(network, tokenizer, run.path / HF_FOLDER)
    return run.path / HF_FOLDER

# ----- retrained references: runs of their own, before the run that needs them ----------------------------------------
def train_classifier(recipe, dataset, forget=None, network_spec: dict | None = None,
                     root: str | Path = "runs/retrained", progress: bool = False):
    """Train a classifier with `recipe` on `dataset`'s training split (minus `forget`, when given), exactly as
    `lit-unlearn pretrain` does (seed_everything(seed), build the network, AdamW, seeded shuffling, one optimizer
    step per batch), through the launch path. Returns the trained SupervisedModule (its `network` is the model)."""
    from lit_unlearn.data.datamodules import ClassificationDataModule
    from lit_unlearn.storage.specs import describe

    spec = recipe.network or network_spec
    if spec is None:
        raise UserError("the training recipe does not say which network to build: give recipe.network "
                        "(class_path/init_args) or train the target with `lit-unlearn pretrain`")
    model = {"class_path": "lit_unlearn.modules.SupervisedModule",
             "init_args": {"network": spec, "lr": recipe.lr, "weight_decay": recipe.weight_decay}}
    data = ClassificationDataModule(dataset, batch_size=recipe.batch_size, seed=recipe.data_seed, forget=forget)
    identity = {"recipe": recipe.as_dict(), "network": spec, "dataset": describe(dataset),
                "forget": None if forget is None else describe(forget)}
    launched = launch(RunSpec(root, model, data, trainer={"max_epochs": recipe.epochs, "limit_val_batches": 0,
                                                          "accelerator": "auto"},
                              seed=recipe.seed, identity=identity, progress=progress))
    launched.model.network_spec = spec
    launched.model.network.eval()
    return launched.model


def _train_reference(recipe, dataset, forget, network_spec, root):
    return train_classifier(recipe, dataset, forget, network_spec, root, progress=True).network


def prepare_references(trainer, module, datamodule) -> None:
    """Train, before fitting, every retrained reference the run's callbacks will load (cached: once per setting)."""
    from lit_unlearn.callbacks.forgetting_verification import ForgettingVerification
    from lit_unlearn.core.console import say

    for cb in trainer.callbacks:
        if isinstance(cb, ForgettingVerification) and cb.reference is not None:
            cb.reference.ensure(module, datamodule, _train_reference, log=say)


def retrained_reference_of(launched: Launched):
    """(reference network, its RetrainedReference, the datamodule) of a built unlearning run, trained now if it is
    not cached yet (the run's ForgettingVerification settings, or the defaults: the target's recipe, cache
    runs/retrained)."""
    from lit_unlearn.callbacks.forgetting_verification import ForgettingVerification
    from lit_unlearn.core.console import say
    from lit_unlearn.verification import RetrainedReference

    dm, module = launched.datamodule, launched.model
    dm.setup("fit")
    if getattr(dm, "forget_indices", None) is None:
        raise UserError("`lit-unlearn retrain` works on image unlearning configs (UnlearningDataModule); for TOFU "
                        "the retain-only model is made by `lit-unlearn tofu-demo` / fine-tuning on the retain split")
    verification = next((cb for cb in launched.trainer.callbacks if isinstance(cb, ForgettingVerification)), None)
    reference = (verification.reference if verification is not None and verification.reference is not None
                 else RetrainedReference())
    reference.ensure(module, dm, _train_reference, log=say)
    network = reference.load(module.network, target_ckpt=getattr(module, "target_ckpt", None),
                             network_spec=getattr(module, "network_spec", None), dataset=dm.dataset, forget=dm.forget,
                             forget_indices=dm.forget_indices, n_train=len(dm.forget_indices) + len(dm.retain_indices),
                             log=say)
    return network, reference, dm


def _newest_finite_checkpoint(folder: Path) -> Path | None:
    """The newest intact checkpoint of a run whose weights are all finite (a diverged run's last ones may not be)."""
    import torch

    from lit_unlearn.launch.run_folder import checkpoint_candidates
    from lit_unlearn.storage.checkpoint_io import checkpoint_is_loadable
    from lit_unlearn.storage.safe_load import load_checkpoint

    for path in checkpoint_candidates(folder):
        if path.is_file() and checkpoint_is_loadable(path):
            state = load_checkpoint(path, mmap=True).get("state_dict", {})
            if all(torch.isfinite(v).all() for v in state.values() if torch.is_tensor(v) and v.is_floating_point()):
                return path
    return None


def _point_latest(folder: Path) -> None:
    """`<root>/latest` → the run that finished last (a stable path to its final checkpoint)."""
    from lit_unlearn.storage.files import atomic_symlink
    from lit_unlearn.launch.run_folder import process_rank

    if process_rank() == 0:
        atomic_symlink(folder.parent / "latest", folder.name)  # no symbolic links: run.json has the path anyway
