"""Run the bench: grid on the validation world, then every method × forget level × seed on the test world.

Every run goes through the launch path (its own folder under OUT/runs/, pre-emption safe), and every finished
run is appended to OUT/runs.jsonl at once: an interrupted bench resumes where it stopped when the same command runs
again (finished runs are read back, the interrupted one continues from its checkpoint). The table, CSV and figures
are written from that file at the end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from lightning.pytorch.utilities import rank_zero_only

from lit_unlearn.bench.benchmarks import World, get_benchmark
from lit_unlearn.bench.spec import BenchSpec, MethodSpec
from lit_unlearn.errors import UserError

__all__ = ["run_bench", "unlearn_and_evaluate"]


def _run_key(world: str, method: str, point: dict, level: str, seed: int, steps: int) -> str:
    return json.dumps([world, method, point, level, seed, steps], sort_keys=True)


def _no_report(module) -> None:
    module.run_report.enabled = False  # the bench evaluates with the benchmark's own report


def unlearn_and_evaluate(spec: BenchSpec, bench, world: World, method: MethodSpec | None, point: dict, level: str,
                         seed: int, runs: Path = Path("runs")) -> dict[str, Any]:
    """One run: the method's module on the world's target for `spec.steps` steps (through the launch path, in its
    own folder under `runs`), then the benchmark's report. method=None evaluates the target itself (the "before"
    row)."""
    from lit_unlearn.launch.runs import RunSpec, launch
    from lit_unlearn.specs import fingerprint

    network = {"class_path": "lit_unlearn.models.CausalLM",
               "init_args": {"name_or_path": world.target, **world.network_args}}
    t0 = time.perf_counter()
    if method is None:
        from lit_unlearn.specs import build

        trained = build(network)
    else:
        model = {"class_path": method.class_path, "init_args": {**method.init_args, **point, "network": network}}
        trainer = {"max_steps": spec.steps, "max_epochs": -1, "limit_val_batches": 0, **spec.trainer}
        identity = {"model": model, "world": world.name, "level": level, "seed": seed, "trainer": trainer}
        key = f"{method.name}-{world.name}-forget{level}-seed{seed}-{fingerprint(identity, 8)}"
        launched = launch(RunSpec(runs / key, model, bench.datamodule(world, level, seed, spec, method), trainer,
                                  seed=seed, identity=identity, configure=_no_report))
        trained = launched.model.network
    summary = bench.evaluate(world, level, trained, spec)
    row = {"world": world.name, "method": method.name if method else "Target", "point": point, "level": level,
           "seed": seed, "seconds": round(time.perf_counter() - t0, 1)}
    row.update({col: summary.get(key) for col, key in bench.columns.items()})
    return row


def run_bench(spec: BenchSpec, out: str | Path | None = None, only: list[str] | None = None,
              log: Callable[[str], None] = print) -> Path:
    from lit_unlearn.bench.report import write_outputs

    out = Path(out or spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bench = get_benchmark(spec.benchmark)
    methods = [m for m in spec.methods if not only or m.name in only]
    if only and (unknown := set(only) - {m.name for m in spec.methods}):
        raise UserError(f"unknown bench methods {sorted(unknown)}; the config has {[m.name for m in spec.methods]}")
    done_file = out / "runs.jsonl"
    done = {}
    if done_file.is_file():
        for line in done_file.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[_run_key(row["world"], row["method"], row["point"], row["level"], row["seed"],
                              row.get("steps", spec.steps))] = row

    def run(world, method, point, level, seed, phase):
        key = _run_key(world.name, method.name if method else "Target", point, level, seed, spec.steps)
        if key not in done:
            row = {**unlearn_and_evaluate(spec, bench, world, method, point, level, seed, out / "runs"),
                   "phase": phase, "steps": spec.steps}
            if rank_zero_only.rank == 0:  # every process runs the same loop; one writes
                with done_file.open("a") as f:
                    f.write(json.dumps(row) + "\n")
            done[key] = row
            shown = " ".join(f"{c} {_fmt(row[c])}" for c in list(bench.columns)[:2])
            log(f"  {phase:10s} {row['method']:9s} {level} seed {seed} {point or ''}: {shown} ({row['seconds']} s)")
        return done[key]

    test, val = bench.worlds(spec, out, log)
    levels = bench.levels(spec)
    val_level = bench.validation_level(spec)
    log(f"== grid on the validation world ({val_level}, seed {spec.seeds[0]}) ==")
    target_val = run(val, None, {}, val_level, spec.seeds[0], "validation")
    chosen = {}
    for m in methods:
        rows = [run(val, m, p, val_level, spec.seeds[0], "validation") for p in m.grid_points()]
        chosen[m.name] = bench.select(rows, target_val, spec.utility_floor)
        log(f"  {m.name}: chose {chosen[m.name][0]} ({chosen[m.name][1]})")
    log("== every method x forget level x seed on the test world ==")
    for level in levels:
        for seed in spec.seeds:
            run(test, None, {}, level, seed, "test")
            for m in methods:
                run(test, m, chosen[m.name][0], level, seed, "test")
    rows = list(done.values())
    return write_outputs(spec, bench, out, rows, chosen, test.name, val.name, [m.name for m in methods])


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3g}"
