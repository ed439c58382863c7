"""`lit-unlearn validate|test|predict`: LightningCLI's evaluation loops on a config and a checkpoint."""

from __future__ import annotations

from lit_unlearn.commands import command


def _loop(name: str):
    def run(lightning_args: list[str]) -> None:
        from lit_unlearn.launch.arguments import expand_config_arguments
        from lit_unlearn.launch.lightning_cli import UnlearnCLI

        UnlearnCLI(args=[name, *expand_config_arguments(lightning_args)])

    run.__doc__ = (f"LightningCLI's {name} loop: --config FILE (repeatable), --ckpt_path CKPT and --KEY=VALUE "
                   "overrides.")
    return run


for _name in ("validate", "test", "predict"):
    command(_name, f"LightningCLI's {_name} loop on a config and a checkpoint (--config FILE --ckpt_path CKPT)",
            training=True, order=90)(_loop(_name))
