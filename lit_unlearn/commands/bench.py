"""`lit-unlearn bench`: every LLM unlearning method under one setting, hyper-parameters chosen per method on a
validation world, table + CSV + figures."""

from __future__ import annotations

from lit_unlearn.commands import command


@command("bench", "every LLM method on one TOFU setting: grid on a validation world, FQ/MU/... table, CSV, figures",
         order=65, examples=("lit-unlearn bench", "lit-unlearn bench --methods NPO,RMU --out runs/b",
                             "lit-unlearn bench --preset bench_tofu_llama2_7b",
                             "lit-unlearn bench --preset bench_muse_tiny"))
def bench(preset: str = "bench_tofu_tiny", config: str | None = None, out: str | None = None,
          methods: str | None = None, levels: str | None = None, seeds: str | None = None,
          steps: int | None = None, epochs: float | None = None, audit: bool = False) -> None:
    """Every LLM unlearning method under one setting (same target, retain-only references, step budget and
    evaluation), hyper-parameters chosen per method on a validation world. Interrupted? Run the same command
    again: finished runs are read back from OUT/runs.jsonl and an interrupted run resumes from its checkpoint.

    Args:
        preset: a packaged bench config (bench_tofu_tiny, bench_tofu_llama2_7b, bench_muse_tiny, ...)
        config: a bench config file instead (see configs/bench/bench_tofu_tiny.yaml)
        out: output folder (default: the config's out_dir)
        methods: comma-separated subset of the config's methods (names holding commas are matched whole)
        levels: comma-separated forget levels (01,05,10)
        seeds: comma-separated test seeds; the validation grid keeps the config's first seed, so several jobs
            (one seed each) can share one OUT once its grid is done
        steps: override the step budget
        epochs: override the budget in epochs over each forget set (a budget curve: one OUT per value)
        audit: also give every test run the full verdict (TOFU); a run that finished without it is judged from its
            saved final model, not trained again
    """
    from lit_unlearn.bench import load_bench_spec, run_bench
    from lit_unlearn.bench.spec import split_method_names
    from lit_unlearn.core.console import say
    from lit_unlearn.storage.packaged_files import packaged_config

    spec = load_bench_spec(config or packaged_config(preset, ("bench",), "bench"))
    if levels:
        spec.forget_levels = [x.strip().zfill(2) for x in levels.split(",")]
    if seeds:  # test seeds: the grid keeps the config's first, so jobs of different seeds share one grid
        spec.grid_seed = spec.seeds[0] if spec.grid_seed is None else spec.grid_seed
        spec.seeds = [int(x) for x in seeds.split(",")]
    if steps:
        spec.steps, spec.epochs = steps, None  # a step budget given here wins over the config's epochs
    if epochs:
        spec.epochs = epochs
    if audit:
        spec.audit = True
    only = split_method_names(methods, [m.name for m in spec.methods]) if methods else None
    results = run_bench(spec, out, only, log=say)
    say("\n" + results.read_text())
    say(f"(table: {results}; CSV: {results.with_suffix('.csv')}; figures: {results.parent})")
