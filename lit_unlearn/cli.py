"""`lit-unlearn`: the project's commands on top of LightningCLI.

    lit-unlearn --help                       every command, with its purpose, and the packaged presets
    lit-unlearn COMMAND --help               one command's options (never starts any work)
    lit-unlearn [--verbose] [--debug] COMMAND ...

A user error (a bad value, a missing file, an unknown key) is one message on stderr and exit code 2;
`--debug` shows its traceback. Errors that are the tool's own fault keep their traceback. `--verbose` shows
the libraries' info lines and warnings that are hidden by default (lit_unlearn.quiet).
"""

from __future__ import annotations

import difflib
import sys
import warnings
from collections.abc import Callable

from lightning.pytorch.cli import LightningCLI

from lit_unlearn.distributed.shutdown import release_process_group
from lit_unlearn.errors import UserError, user_error_message
from lit_unlearn.packaged_configs import config_chain, packaged_config
from lit_unlearn.specs import namespace_to_dict

__all__ = ["UnlearnCLI", "main", "packaged_config", "COMMANDS"]

LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test", "predict")


class UnlearnCLI(LightningCLI):
    """LightningCLI with the project's defaults. run=False parses a plain config (no subcommand) and adds
    `--ckpt_path`, so a command can adjust the objects before it fits them."""

    last_run_folder = None  # the folder claimed by the latest construction (cleaned up if it fails)

    def __init__(self, args=None, run: bool = True, manage_runs: bool = False) -> None:
        self._standalone = not run
        self._manage_runs = manage_runs and not run
        self.run_folder = None
        warnings.filterwarnings("ignore", message=r".*`IterableDataset` has `__len__` defined.*")
        # Our checkpoints hold the state after each update on purpose (resume is exact from there).
        warnings.filterwarnings("ignore", message=r".*Using ModelCheckpoint with manual optimization.*")
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

    def before_instantiate_classes(self) -> None:
        if self._manage_runs:
            from lit_unlearn.recipes.run_setup import assign_run_folder

            self.run_folder = assign_run_folder(self.config)
            UnlearnCLI.last_run_folder = self.run_folder

    def _instantiate_trainer(self, config, callbacks):
        from lightning.pytorch.callbacks import ProgressBar

        from lit_unlearn.callbacks.step_progress import StepProgressBar

        listed = [*(config.get("callbacks") or []), *callbacks]
        if config.get("enable_progress_bar", True) is not False and not any(isinstance(c, ProgressBar) for c in listed):
            callbacks = [*callbacks, StepProgressBar()]  # steps, not "Epoch 19/-2", for step-bounded runs
        if self.run_folder is not None:
            from lit_unlearn.recipes.run_setup import cluster_ready

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


def preset_args(argv: list[str], default: str) -> tuple[str, list[str]]:
    """(preset name, LightningCLI args: the preset's config chain first, then the user's arguments)."""
    preset = default
    if "--preset" in argv:
        i = argv.index("--preset")
        if i + 1 >= len(argv):
            raise UserError("--preset needs a config name (see `lit-unlearn configs`)")
        preset = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    return preset, [arg for path in config_chain(preset) for arg in ("--config", path)] + list(argv)


def _with_preset(argv: list[str], default: str) -> list[str]:
    """`fit` + the preset's configs + the user's arguments (for plain LightningCLI runs)."""
    return ["fit", *preset_args(argv, default)[1]]


# ----- commands ------------------------------------------------------------------------------------------------------
def _pretrain(argv):
    from lit_unlearn.recipes.fit import fit_command

    fit_command(argv, "digits_pretrain", "pretrain", "train a target model")


def _unlearn(argv):
    from lit_unlearn.recipes.fit import fit_command

    fit_command(argv, "digits_hamu", "unlearn", "unlearn a trained target")


def _retrain(argv):
    from lit_unlearn.recipes.retrain import main as retrain

    retrain(argv)


def _demo(argv):
    from lit_unlearn.recipes.demo import main as demo

    demo(argv)


def _experiment(argv):
    from lit_unlearn.recipes.experiment import main as experiment

    experiment(argv)


def _muse_eval(argv):
    from lit_unlearn.recipes.muse_eval import main as muse_main

    muse_main(argv)


def _bench(argv):
    from lit_unlearn.recipes.bench import main as bench_main

    bench_main(argv)


def _tofu_demo(argv):
    from lit_unlearn.recipes.tofu_demo import run_tofu_demo

    run_tofu_demo(argv)


def _tofu_eval(argv):
    from lit_unlearn.recipes.tofu_eval import main as tofu_eval

    tofu_eval(argv)


def _configs(argv):
    from lit_unlearn.packaged_configs import describe_configs

    if argv and argv[0] in ("-h", "--help"):
        print("usage: lit-unlearn configs\n\nList the packaged configs (presets): name, purpose, path.")
        return
    for name, purpose, path in describe_configs():
        print(f"{name:34s} {purpose}\n{'':34s} {path}")


COMMANDS: dict[str, tuple[str, Callable[[list[str]], None]]] = {
    "demo": ("the embedded default: digits target, retrained reference, HAMU stopped at the forget target, table",
             _demo),
    "pretrain": ("train a target model (preset digits_pretrain; any LightningCLI override)", _pretrain),
    "retrain": ("train, or find in the cache, the retrained reference of an unlearning config (gold standard)",
                _retrain),
    "unlearn": ("unlearn a target (preset digits_hamu; --preset NAME, --target T, any LightningCLI override)",
                _unlearn),
    "experiment": ("the CV experiment suite: trajectories, hardness, quota, stopping, ablation, verification",
                   _experiment),
    "tofu-demo": ("offline TOFU: generated authors, tiny Llama target and retain-only model, unlearning, TOFU table",
                  _tofu_demo),
    "tofu-eval": ("the TOFU table (forget quality, model utility, ROUGE, MIA) of one model", _tofu_eval),
    "bench": ("every LLM method on one TOFU setting: grid on a validation world, FQ/MU/... table, CSV, figure",
              _bench),
    "muse-eval": ("the MUSE table (VerbMem, KnowMem, PrivLeak, ES, EM) of one model", _muse_eval),
    "configs": ("list the packaged configs (presets) and what each runs", _configs),
}


def top_help() -> str:
    from lit_unlearn.packaged_configs import describe_configs

    lines = ["usage: lit-unlearn [--verbose] [--debug] COMMAND [options]", "",
             "Machine unlearning with PyTorch Lightning: HAMU, OFMU and the baselines, verified against a model",
             "retrained without the forget set.", "", "commands:"]
    lines += [f"  {name:12s} {purpose}" for name, (purpose, _) in COMMANDS.items()]
    lines += [f"  {'fit|validate|test|predict':12s} plain LightningCLI (--config FILE ...)", "",
              "presets (--preset NAME; `lit-unlearn configs` shows their paths):"]
    lines += [f"  {name:32s} {purpose}" for name, purpose, _ in describe_configs()]
    lines += ["", "options:", "  --verbose    show the libraries' own info lines and warnings (hidden by default)",
              "  --debug      show the traceback of user errors", "",
              "`lit-unlearn COMMAND --help` shows a command's options. Docs: README.md and docs/."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose, debug = "--verbose" in argv, "--debug" in argv
    argv = [a for a in argv if a not in ("--verbose", "--debug")]
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(top_help())
        return
    command, rest = argv[0], argv[1:]
    if not verbose:
        from lit_unlearn.quiet import silence_library_noise

        silence_library_noise()
    try:
        if command in COMMANDS:
            COMMANDS[command][1](rest)
        elif command in LIGHTNING_SUBCOMMANDS:
            UnlearnCLI(args=argv)
        else:
            close = difflib.get_close_matches(command, [*COMMANDS, *LIGHTNING_SUBCOMMANDS], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UserError(f"unknown command {command!r}{hint}; `lit-unlearn --help` lists them")
        release_process_group()  # a finished multi-process run exits cleanly instead of aborting at shutdown
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as err:  # noqa: BLE001 - user errors become one line; the rest keep their traceback
        message = user_error_message(err)
        if message is None or debug:
            raise
        print(f"lit-unlearn {command}: error: {message}", file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
