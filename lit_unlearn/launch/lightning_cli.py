"""LightningCLI with the project's defaults: the parser behind every training command.

`UnlearnCLI(args, run=False, manage_runs=True)` parses a preset's configs plus the user's arguments (no
subcommand; `--ckpt_path` added), claims the run's folder before the objects are built
(lit_unlearn.launch.cluster), and builds the model, the datamodule, the Trainer's arguments and its callbacks
(`trainer_arguments`, `trainer_callbacks`): `lit_unlearn.launch.runs.build_run` turns them into a RunSpec, whose
Trainer the one builder makes (lit_unlearn.launch.trainer_builder). With run=True (`lit-unlearn validate|test|
predict`) it is plain LightningCLI, its Trainer made by the same builder. A construction that fails leaves no
empty run folder behind.
"""

from __future__ import annotations

import sys
import warnings

from lightning.pytorch.cli import LightningCLI

from lit_unlearn.core.quiet import quiet_lightning
from lit_unlearn.storage.specs import namespace_to_dict

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
        if self._standalone:  # before any weights load or folder is made (lit_unlearn.launch.preflight)
            from lit_unlearn.core.console import say
            from lit_unlearn.launch.preflight import preflight

            for note in preflight(namespace_to_dict(self.config)):
                say(f"note: {note}")
        if self._manage_runs:
            from lit_unlearn.launch.cluster import assign_run_folder

            self.run_folder = assign_run_folder(self.config)

    def instantiate_trainer(self, **kwargs):
        """The Trainer's arguments and callbacks, LightningCLI's own included (its callback arguments and the
        config saver), gathered as LightningCLI.instantiate_trainer gathers them. Standalone (run=False) they are
        kept for `build_run`; a subcommand's Trainer is built now, by the same builder. It calls LightningCLI's
        private `_parser` and `_get` (no public hook hands over the arguments without building a Trainer): lightning
        is pinned, and tests/test_architecture.py fails when the code mirrored here changes."""
        parser = self._parser(self.subcommand)
        config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        callbacks = config.pop("callbacks", None) or []
        callbacks = list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
        callbacks += [self._get(self.config_init, key) for key in parser.callback_keys]
        if self.save_config_callback and not config.get("fast_dev_run", False):
            callbacks.append(self.save_config_callback(parser, self.config.get(str(self.subcommand), self.config),
                                                       **self.save_config_kwargs))
        self.trainer_arguments, self.trainer_callbacks = config, callbacks
        if self._standalone:
            return None
        from lit_unlearn.launch.trainer_builder import build_trainer

        return build_trainer(config, callbacks, progress=config.get("enable_progress_bar", True) is not False)

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
