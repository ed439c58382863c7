"""`lit-unlearn`: LightningCLI subcommands plus shortcuts for the common jobs.

    lit-unlearn fit --config configs/digits_hamu.yaml [--ckpt_path last]   any LightningCLI subcommand
    lit-unlearn pretrain [LightningCLI args]   fit with the packaged target-training config first
    lit-unlearn unlearn  [LightningCLI args]   fit with the packaged HAMU config first (needs a target)
    lit-unlearn demo [--fresh]                 pretrain a digits target, unlearn class 0 with HAMU-Q, print the table
    lit-unlearn configs                        list the packaged configs

`pretrain` and `unlearn` put their packaged config before your arguments, so a later `--config` or `--x.y`
overrides it. Pick another packaged config by name: `lit-unlearn unlearn --preset cifar10_hamu`.
"""

from __future__ import annotations

import sys
import warnings
from importlib import resources
from pathlib import Path

from lightning.pytorch.cli import LightningCLI

__all__ = ["UnlearnCLI", "main", "packaged_config"]

PRESETS = {"pretrain": "digits_pretrain", "unlearn": "digits_hamu"}


def packaged_config(name: str) -> str:
    """Path of a config shipped with the package (`configs/NAME.yaml` in the repository)."""
    path = resources.files("lit_unlearn.configs") / f"{name.removesuffix('.yaml')}.yaml"
    if not path.is_file():
        available = sorted(p.name for p in resources.files("lit_unlearn.configs").iterdir() if p.name.endswith(".yaml"))
        raise SystemExit(f"no packaged config {name!r}; available: {', '.join(available)}")
    return str(path)


class UnlearnCLI(LightningCLI):
    def __init__(self, args=None, run: bool = True) -> None:
        warnings.filterwarnings("ignore", message=r".*`IterableDataset` has `__len__` defined.*")
        super().__init__(
            model_class=None,
            datamodule_class=None,
            subclass_mode_model=True,
            subclass_mode_data=True,
            auto_configure_optimizers=False,
            # Resuming into an existing log folder must not abort on its saved config.yaml.
            save_config_kwargs={"overwrite": True},
            seed_everything_default=0,
            args=args,
            run=run,
        )


def _with_preset(argv: list[str], default: str) -> list[str]:
    preset = default
    if "--preset" in argv:
        i = argv.index("--preset")
        if i + 1 >= len(argv):
            raise SystemExit("--preset needs a config name (see `lit-unlearn configs`)")
        preset = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    return ["fit", "--config", packaged_config(preset), *argv]


def run_demo(argv: list[str]) -> None:
    """The embedded default job: target on digits → HAMU-Q unlearning of class 0 → before/after table."""
    fresh = "--fresh" in argv
    target = Path("runs/digits/target/checkpoints/last.ckpt")
    if fresh or not target.is_file():
        print("== 1/2: training the target model (ResNet-20 on scikit-learn digits) ==", flush=True)
        UnlearnCLI(args=_with_preset([], "digits_pretrain"))
    else:
        print(f"== 1/2: reusing the target at {target} (pass --fresh to retrain) ==", flush=True)
    print("== 2/2: unlearning class 0 with HAMU-Q ==", flush=True)
    UnlearnCLI(args=_with_preset([f"--model.init_args.target_ckpt={target}"], "digits_hamu"))
    print("TensorBoard: tensorboard --logdir runs/digits", flush=True)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else ""
    if command in PRESETS:
        UnlearnCLI(args=_with_preset(argv[1:], PRESETS[command]))
    elif command == "demo":
        run_demo(argv[1:])
    elif command == "configs":
        for p in sorted(resources.files("lit_unlearn.configs").iterdir(), key=lambda p: p.name):
            if p.name.endswith(".yaml"):
                print(p)
    else:
        UnlearnCLI(args=argv)


if __name__ == "__main__":
    main()
