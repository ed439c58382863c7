"""`lit-unlearn`: LightningCLI subcommands plus shortcuts for the common jobs.

    lit-unlearn fit --config configs/cifar10_hamu.yaml [--ckpt_path last]  any LightningCLI subcommand
    lit-unlearn pretrain [LightningCLI args]   fit with the packaged target-training config first
    lit-unlearn unlearn  [LightningCLI args]   fit with the packaged HAMU config first (needs a target)
    lit-unlearn demo [--fresh]                 pretrain a digits target, unlearn class 0 with HAMU-Q, print the table
    lit-unlearn experiment [--preset claims_digits | --config FILE] [--out DIR] [--studies a,b] [--no-plots]
                                               the CV experiment suite (trajectories, κ̄–ρ, quota, stopping, ablation)
    lit-unlearn tofu-demo [--preset tofu_tiny_hamu] [--fresh]
                                               offline TOFU: data, tokenizer, tiny Llama target + retrain, unlearn
    lit-unlearn tofu-eval --model M --data D [--reference R] [--save S]   the TOFU table of one model
    lit-unlearn configs                        list the packaged configs

`pretrain` and `unlearn` put their packaged config before your arguments, so a later `--config` or `--x.y`
overrides it. Pick another packaged config by name: `lit-unlearn unlearn --preset digits_npo`. A packaged
config may start from another (`# extends: digits_unlearn` in its header); both are passed, base first.
With plain `lit-unlearn fit`, pass the chain yourself: `--config configs/digits_unlearn.yaml --config
configs/digits_ga.yaml`.
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
            args=args,
            run=run,
        )


def config_chain(name: str) -> list[str]:
    """The packaged config `name` preceded by the ones it extends (a `# extends: OTHER` line near its top)."""
    chain: list[str] = []
    while name:
        path = packaged_config(name)
        if path in chain:
            raise SystemExit(f"packaged config {name!r} extends itself (cycle in '# extends:' lines)")
        chain.insert(0, path)
        header = Path(path).read_text().splitlines()[:5]
        name = next((ln.split(":", 1)[1].strip() for ln in header if ln.startswith("# extends:")), "")
    return chain


def _with_preset(argv: list[str], default: str) -> list[str]:
    preset = default
    if "--preset" in argv:
        i = argv.index("--preset")
        if i + 1 >= len(argv):
            raise SystemExit("--preset needs a config name (see `lit-unlearn configs`)")
        preset = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    configs = [arg for path in config_chain(preset) for arg in ("--config", path)]
    return ["fit", *configs, *argv]


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


def run_experiment(argv: list[str]) -> None:
    import argparse

    from lit_unlearn.experiments import STUDIES, load_config, run_suite

    parser = argparse.ArgumentParser(prog="lit-unlearn experiment", description="Run the CV experiment suite.")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--preset", default="claims_digits", help="a packaged suite config (default: %(default)s)")
    source.add_argument("--config", help="a suite config file (see configs/claims_digits.yaml)")
    parser.add_argument("--out", help="output folder (default: the config's out_dir)")
    parser.add_argument("--studies", help=f"comma-separated subset of {','.join(STUDIES)}")
    parser.add_argument("--no-plots", action="store_true", help="write the CSVs and tables only")
    args = parser.parse_args(argv)
    cfg = load_config(args.config or packaged_config(args.preset))
    studies = args.studies.split(",") if args.studies else None
    if studies and (bad := [s for s in studies if s not in STUDIES]):
        raise SystemExit(f"unknown studies {bad}; choose from {', '.join(STUDIES)}")
    warnings.filterwarnings("ignore", message=r".*`IterableDataset` has `__len__` defined.*")
    try:
        run_suite(cfg, args.out, studies, plots=not args.no_plots, log=lambda m: print(m, flush=True))
    except FileNotFoundError as err:  # missing data: say where the suite config sets it, without a traceback
        raise SystemExit(f"{err}\n(in an experiment config the data folder is dataset.init_args.root)") from err


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else ""
    if command in PRESETS:
        UnlearnCLI(args=_with_preset(argv[1:], PRESETS[command]))
    elif command == "demo":
        run_demo(argv[1:])
    elif command == "tofu-demo":
        from lit_unlearn.recipes.tofu_demo import run_tofu_demo

        run_tofu_demo(argv[1:])
    elif command == "tofu-eval":
        from lit_unlearn.recipes.tofu_eval import main as tofu_eval

        tofu_eval(argv[1:])
    elif command == "experiment":
        run_experiment(argv[1:])
    elif command == "configs":
        for p in sorted(resources.files("lit_unlearn.configs").iterdir(), key=lambda p: p.name):
            if p.name.endswith(".yaml"):
                print(p)
    else:
        UnlearnCLI(args=argv)


if __name__ == "__main__":
    main()
