"""`lit-unlearn bench`: every LLM unlearning method under one setting (same target, retain-only references, step
budget and evaluation), hyper-parameters chosen per method on a validation world, table + CSV + figure.

    lit-unlearn bench                                   # offline: the tiny generated stand-in (about 25 minutes)
    lit-unlearn bench --methods NPO,RMU --out runs/b    # a subset
    lit-unlearn bench --preset bench_tofu_llama2_7b     # real TOFU on Llama-2-7B (GPUs; see the config header)
    lit-unlearn bench --preset bench_muse_tiny          # MUSE: the generated news stand-in

Interrupted? Run the same command again: finished runs are read back from OUT/runs.jsonl.
"""

from __future__ import annotations

import argparse

from lit_unlearn.console import say

__all__ = ["main"]


def main(argv: list[str]) -> None:
    from lit_unlearn.bench import load_bench_spec, run_bench
    from lit_unlearn.packaged_configs import packaged_config

    p = argparse.ArgumentParser(prog="lit-unlearn bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", default="bench_tofu_tiny", help="a packaged bench config (default: %(default)s)")
    src.add_argument("--config", help="a bench config file (see configs/bench_tofu_tiny.yaml)")
    p.add_argument("--out", help="output folder (default: the config's out_dir)")
    p.add_argument("--methods", help="comma-separated subset of the config's methods")
    p.add_argument("--levels", help="comma-separated forget levels (01,05,10)")
    p.add_argument("--seeds", help="comma-separated seeds")
    p.add_argument("--steps", type=int, help="override the step budget")
    args = p.parse_args(argv)
    spec = load_bench_spec(args.config or packaged_config(args.preset))
    if args.levels:
        spec.forget_levels = [x.strip().zfill(2) for x in args.levels.split(",")]
    if args.seeds:
        spec.seeds = [int(x) for x in args.seeds.split(",")]
    if args.steps:
        spec.steps = args.steps
    results = run_bench(spec, args.out, args.methods.split(",") if args.methods else None, log=say)
    say("\n" + results.read_text())
    say(f"(table: {results}; CSV: {results.with_suffix('.csv')}; figure: {results.parent / 'figure.png'})")
