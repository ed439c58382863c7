"""LightningCLI with the project's defaults: the parser behind every training command.

`UnlearnCLI(args, run=False, manage_runs=True)` parses a preset's configs plus the user's arguments (no
subcommand; `--ckpt_path` added), claims the run's folder before the objects are built
(lit_unlearn.launch.cluster), and builds model, datamodule and trainer, so that `lit_unlearn.launch.runs` can adjust
and fit them. A construction that fails leaves no empty run folder behind.
"""

from __future__ import annotations

import sys
import warnings

from lightning.pytorch.cli import LightningCLI

from lit_unlearn.quiet import quiet_lightning
from lit_unlearn.specs import namespace_to_dict

__all__ = ["UnlearnCLI", "print_lightning_help"]


class UnlearnCLI(LightningCLI):
    """LightningCLI with the project's defaults. run=False parses a plain config (no subcommand) and adds
    `--ckpt_path`, so a command can adjust the objects before it fits them."""

    def __init__(self, args=None, run: bool = True, manage_runs: bool = False) -> None:
        self._standalone = not run
        self._manage_runs = manage_runs and not run
        self.run_folder = None
        quiet_lightning()
        warnings.filterwarnings("ignore", message=r".*`IterableDataset` has `__len__` defined.*")
        # Our checkpoints hold the state after each update on purpose (resume is exact from there).
        warnings.filterwarnings("ignore", message=r".*Using ModelCheckpoint with manual optimization.*")
        try:
            super().__init__(
                model_class=None,
                datamodule_class=None,
                subclass_mode_model=True,
                subclass_mode_data=True,
                auto_configure_optimizers=False,
                # Resuming into an existing log folder must not abort on its saved config.yaml.
                save_config_kwargs={"overwrite": True},
                seed_everything_default=0,
                trainer_defaults={"enable_model_summary": False},
                parser_kwargs={"exit_on_error": False},
                args=args,
                run=run,
            )
        except BaseException:
            if self.run_folder is not None:  # a failed start leaves no empty run folder behind
                self.run_folder.remove_if_empty()
            raise

    def before_instantiate_classes(self) -> None:
        if self._manage_runs:
            from lit_unlearn.launch.cluster import assign_run_folder

            self.run_folder = assign_run_folder(self.config)

    def _instantiate_trainer(self, config, callbacks):
        from lightning.pytorch.callbacks import ProgressBar

        from lit_unlearn.callbacks.step_progress import StepProgressBar

        listed = [*(config.get("callbacks") or []), *callbacks]
        if config.get("enable_progress_bar", True) is not False and not any(isinstance(c, ProgressBar) for c in listed):
            callbacks = [*callbacks, StepProgressBar()]  # steps, not "Epoch 19/-2", for step-bounded runs
        if self.run_folder is not None:
            from lit_unlearn.launch.cluster import cluster_ready

            callbacks = cluster_ready(config, callbacks, self.run_folder)
        return super()._instantiate_trainer(config, callbacks)

    def add_arguments_to_parser(self, parser) -> None:
        if self._standalone:
            parser.add_argument("--ckpt_path", type=str | None, default=None,
                                help="resume from this checkpoint, or 'last' for the run's latest")

    def before_fit(self) -> None:
        self.record_network_spec()

    def record_network_spec(self) -> None:
        # The network's class_path/init_args, for what needs to build the same architecture again (the training
        # recipe a target checkpoint records; the retrained reference).
        config = self.config[self.subcommand] if getattr(self, "subcommand", None) else self.config
        network = namespace_to_dict(config.get("model", {}).get("init_args", {}).get("network"))
        if isinstance(network, dict) and "class_path" in network and hasattr(self.model, "network_spec"):
            self.model.network_spec = network


def print_lightning_help(preset: str | None, argv: list[str]) -> None:
    """Every LightningCLI option of a preset (its configs loaded), for `COMMAND --help-all`."""
    from lit_unlearn.launch.arguments import lightning_arguments

    try:
        UnlearnCLI(args=[*lightning_arguments(preset, argv), "--help"], run=False)
    except SystemExit:
        pass
    sys.stdout.flush()
