"""`lit-unlearn experiment`: the experiment suite (lit_unlearn.experiments) on a vision task or a TOFU world, driven
by one YAML file."""

from __future__ import annotations

from lit_unlearn.commands import command


@command("experiment", "the HAMU paper's experiment suite (vision or TOFU): trajectories, hardness, quota, stopping, "
         "ablation, verification",
         order=50, examples=("lit-unlearn experiment", "lit-unlearn experiment --studies verification",
                             "lit-unlearn experiment --preset experiment_digits_paper --out runs/claims"))
def experiment(preset: str = "experiment_digits", config: str | None = None, out: str | None = None,
               studies: str | None = None, plots: bool = True) -> None:
    """Run the experiment suite (docs/findings/experiments.md) on a vision task or a TOFU world. Every finished run is kept in
    OUT/runs.jsonl and every run has its own resumable folder: an interrupted suite continues where it stopped when
    the same command runs again.

    Args:
        preset: a packaged suite config (experiment_digits, experiment_digits_paper, experiment_cifar10,
            experiment_tofu)
        config: a suite config file instead (see configs/experiment/experiment_digits.yaml)
        out: output folder (default: the config's out_dir)
        studies: comma-separated subset of trajectories,hardness,quota,stopping,ablation,verification
        plots: write the figures (--no-plots: the CSVs and tables only)
    """
    from lit_unlearn.core.console import say
    from lit_unlearn.core.errors import UserError
    from lit_unlearn.experiments import STUDIES, load_config, run_suite
    from lit_unlearn.storage.packaged_files import packaged_config

    cfg = load_config(config or packaged_config(preset, ("experiment",), "experiment"))
    chosen = studies.split(",") if studies else None
    if chosen and (bad := [s for s in chosen if s not in STUDIES]):
        raise UserError(f"unknown studies {bad}; choose from {', '.join(STUDIES)}")
    try:
        run_suite(cfg, out, chosen, plots=plots, log=say)
    except FileNotFoundError as err:  # missing data: say where the suite config sets it
        raise UserError(f"{err} (in an experiment config the data folder is dataset.init_args.root)") from err
