"""`lit-unlearn experiment`: the CV experiment suite (lit_unlearn.experiments), driven by one YAML file."""

from __future__ import annotations

import argparse

from lit_unlearn.console import say

__all__ = ["main"]


def main(argv: list[str]) -> None:
    from lit_unlearn.experiments import STUDIES, load_config, run_suite
    from lit_unlearn.errors import UserError
    from lit_unlearn.packaged_configs import packaged_config

    parser = argparse.ArgumentParser(prog="lit-unlearn experiment",
                                     description="Run the CV experiment suite (docs/experiments.md).")
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
        raise UserError(f"unknown studies {bad}; choose from {', '.join(STUDIES)}")
    try:
        run_suite(cfg, args.out, studies, plots=not args.no_plots, log=say)
    except FileNotFoundError as err:  # missing data: say where the suite config sets it
        raise UserError(f"{err} (in an experiment config the data folder is dataset.init_args.root)") from err
