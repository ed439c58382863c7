"""Run the bench: grid on the validation world, then every method × forget level × seed on the test world.

Every finished run is appended to OUT/runs.jsonl at once, so an interrupted bench resumes where it stopped
(rerun the same command). The table, CSV and figure are written from that file at the end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_only

from lit_unlearn.bench.benchmarks import World, get_benchmark
from lit_unlearn.bench.spec import BenchSpec, MethodSpec
from lit_unlearn.errors import UserError

__all__ = ["run_bench", "unlearn_and_evaluate"]


def _run_key(world: str, method: str, point: dict, level: str, seed: int) -> str:
    return json.dumps([world, method, point, level, seed], sort_keys=True)


def unlearn_and_evaluate(spec: BenchSpec, bench, world: World, method: MethodSpec | None, point: dict, level: str,
                         seed: int, scratch: Path = Path(".")) -> dict[str, Any]:
    """One run: the method's module on the world's target for `spec.steps` steps, then the benchmark's report.
    method=None evaluates the target itself (the "before" row)."""
    from lit_unlearn.models import CausalLM
    from lit_unlearn.specs import build

    pl.seed_everything(seed, verbose=False)
    network = CausalLM(name_or_path=world.target, **world.network_args)
    t0 = time.perf_counter()
    if method is not None:
        module = build({"class_path": method.class_path, "init_args": {**method.init_args, **point}}, network=network)
        module.report = False  # the bench evaluates with the benchmark's own report
        trainer_args = {"accelerator": "cpu", "devices": 1, "default_root_dir": str(scratch)} | spec.trainer
        if isinstance(trainer_args.get("strategy"), dict):  # e.g. DeepSpeed ZeRO-3 in the 7B config
            trainer_args["strategy"] = build(trainer_args["strategy"])
        trainer = pl.Trainer(max_steps=spec.steps, max_epochs=-1, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                             limit_val_batches=0, **trainer_args)
        trainer.fit(module, bench.datamodule(world, level, seed, spec, method))
        network = module.network
    summary = bench.evaluate(world, level, network, spec)
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
                done[_run_key(row["world"], row["method"], row["point"], row["level"], row["seed"])] = row

    def run(world, method, point, level, seed, phase):
        key = _run_key(world.name, method.name if method else "Target", point, level, seed)
        if key not in done:
            row = {**unlearn_and_evaluate(spec, bench, world, method, point, level, seed, out / "scratch"),
                   "phase": phase}
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
