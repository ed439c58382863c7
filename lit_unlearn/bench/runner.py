"""Run the bench: grid on the validation world, then every method × forget level × seed on the test world.

Every run goes through the launch path (its own folder under OUT/runs/, pre-emption safe), and every finished
run is appended to OUT/runs.jsonl at once: an interrupted bench resumes where it stopped when the same command runs
again (finished runs are read back, the interrupted one continues from its checkpoint). Benches sharing one OUT
(other seeds, other methods) read it again before each run, so none runs what another has finished. The table, CSV
and figures are written from that file at the end.
"""

from __future__ import annotations

import functools

import json
import time
from pathlib import Path
from typing import Any, Callable

from lightning.pytorch.utilities import rank_zero_only

from lit_unlearn.bench.adapters import World, get_benchmark
from lit_unlearn.bench.between_runs import stop_between_runs
from lit_unlearn.bench.spec import BenchSpec, MethodSpec
from lit_unlearn.core.errors import UserError
from lit_unlearn.core.console import fmt

__all__ = ["run_bench", "unlearn_and_evaluate"]

_fmt = functools.partial(fmt, spec=".3g")  # this table's number format
AUDITED = "forgotten"  # a column only the audit fills: a finished row without it was run with the audit off


def _run_key(world: str, method: str, point: dict, level: str, seed: int, steps: int) -> str:
    return json.dumps([world, method, point, level, seed, steps], sort_keys=True)


def _append_row(done_file: Path, row: dict) -> None:
    """One finished run's line, appended in one write: jobs of different seeds may share one runs.jsonl."""
    import os

    fd = os.open(done_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(row) + "\n").encode())
    finally:
        os.close(fd)


def _shown(bench, row: dict) -> list[str]:
    """The columns a run's log line shows: the first two it has a value for (a validation run or one with the audit
    off has no verdict columns), then the benchmark's progress columns (utility and the gold standard's measure)."""
    have = [c for c in bench.columns if row.get(c) is not None]
    return list(dict.fromkeys([*have[:2], *(c for c in bench.progress if c in have)]))


def _no_report(module) -> None:
    module.run_report.enabled = False  # the bench evaluates with the benchmark's own report


def _steps(spec: BenchSpec, method: MethodSpec | None, n_forget: int | None = None) -> int:
    """A run's step budget: the method's own steps, else its or the bench's epochs over the forget set (one step
    takes one forget batch), else the bench's steps."""
    import math

    if method is not None and method.steps:
        return method.steps
    epochs = (method.epochs if method is not None else None) or spec.epochs
    if epochs and n_forget:
        return max(1, math.ceil(epochs * n_forget / spec.batch_size))
    return spec.steps


def _run_plan(spec: BenchSpec, bench, world: World, method: MethodSpec, point: dict, level: str, seed: int,
              runs: Path) -> tuple[Path, dict, dict, dict]:
    """Where a method's run at a point lives (runs/KEY, KEY naming what defines it), and its model, trainer and
    identity specs: one place, so that training and auditing a finished run later find the same folder."""
    from lit_unlearn.storage.specs import fingerprint

    own = {k: v for k, v in point.items() if not k.startswith("distill.")}
    args = bench.method_args(world, level, {**method.init_args, **own})
    model = {"class_path": method.class_path, "init_args": {**args, "network": _network_spec(world)}}
    trainer = {"max_steps": _steps(spec, method, bench.forget_size(world, level)), "max_epochs": -1,
               "limit_val_batches": 0, **spec.trainer}
    identity = {"model": model, "world": world.name, "level": level, "seed": seed, "trainer": trainer}
    if method.callbacks:  # what the method reads during the run (HoldoutMatch: the holdout measurement)
        identity["callbacks"] = method.callbacks
    key = f"{method.name}-{world.name}-forget{level}-seed{seed}-{fingerprint(identity, 8)}"
    return runs / key, model, trainer, identity


def _network_spec(world: World, path: str | None = None) -> dict:
    return {"class_path": "lit_unlearn.models.CausalLM",
            "init_args": {"name_or_path": path or world.target, **world.network_args}}


def _audit_folder(runs: Path, world: World, method: MethodSpec | None, level: str, seed: int) -> Path:
    return runs / f"audit-{world.name}-forget{level}-seed{seed}-{method.name if method else 'Target'}"


def unlearn_and_evaluate(spec: BenchSpec, bench, world: World, method: MethodSpec | None, point: dict, level: str,
                         seed: int, runs: Path = Path("runs"), audit: bool = False) -> dict[str, Any]:
    """One run: the method's module on the world's target for its step budget (through the launch path, in its
    own folder under `runs`), then the benchmark's report (and with `audit`, the audit's columns). method=None
    evaluates the target itself (the "before" row)."""
    from lit_unlearn.algorithms.token_passes import training_units
    from lit_unlearn.launch.runs import RunSpec, launch
    from lit_unlearn.storage.specs import build

    t0 = time.perf_counter()
    reads = frozenset()  # the target has no forget objective
    compute: dict[str, Any] = {}
    if method is None:
        trained = build(_network_spec(world))
    else:
        root, model, trainer, identity = _run_plan(spec, bench, world, method, point, level, seed, runs)
        launched = launch(RunSpec(root, model, bench.datamodule(world, level, seed, spec, method), trainer,
                                  seed=seed, callbacks=[build(c) for c in method.callbacks], identity=identity,
                                  configure=_no_report))
        trained = launched.model.network
        reads = launched.model.reads_statistics
        compute["unlearn/units"] = training_units(launched.model.tokens_read)
        if method.distill is not None:
            trained, compute = _distilled(bench, world, level, method, point, launched, compute)
    summary = {**bench.evaluate(world, level, trained, spec, reads), **compute}
    if audit:
        summary.update(bench.audit(world, level, trained, spec, _audit_folder(runs, world, method, level, seed),
                                   reads))
    return bench_row(bench, world, method, point, level, seed, time.perf_counter() - t0, summary)


def audit_finished_run(spec: BenchSpec, bench, world: World, method: MethodSpec | None, point: dict, level: str,
                       seed: int, runs: Path) -> dict[str, Any] | None:
    """The audit's columns of a run that finished without them (audit switched on after it ran): its final model,
    read back from its folder, judged as a run with the audit on would have been; None where the folder holds no
    finished run's model (removed, or a distilled method's, whose model is the distillation's)."""
    from lit_unlearn.launch.run_folder import newest_finished_run
    from lit_unlearn.storage.specs import build

    if method is None:
        network, reads = build(_network_spec(world)), frozenset()
    elif method.distill is not None:
        return None
    else:
        root, model, _, _ = _run_plan(spec, bench, world, method, point, level, seed, runs)
        finished = newest_finished_run(root)
        if not finished or not finished.get("final_model") or not Path(finished["final_model"]).is_dir():
            return None
        # the module built around the final weights: its declared reads are those of the run that made them
        module = build({**model, "init_args": {**model["init_args"],
                                               "network": _network_spec(world, finished["final_model"])}})
        network, reads = module.network, module.reads_statistics
    return bench.audit(world, level, network.eval(), spec, _audit_folder(runs, world, method, level, seed), reads)


def bench_row(bench, world: World, method: MethodSpec | None, point: dict, level: str, seed: int, seconds: float,
              summary: dict) -> dict[str, Any]:
    """A run's row of runs.jsonl: what was run, how long it took, and the benchmark's columns from `summary` (None
    where it has no value: a diverged run has none)."""
    return {"world": world.name, "method": method.name if method else "Target", "point": point, "level": level,
            "seed": seed, "seconds": round(seconds, 1),
            **{col: summary.get(key) for col, key in bench.columns.items()}}


def _distilled(bench, world: World, level: str, method: MethodSpec, point: dict, launched, compute: dict):
    """The method's result distilled into its shrunk and perturbed copy (lit_unlearn.distill), in the run's folder;
    the compute of both stages against the retain-only fine-tune's."""
    from lit_unlearn.data import TofuSource
    from lit_unlearn.distill import DistillSpec, distill_model
    from lit_unlearn.models import CausalLM

    spec = DistillSpec(**{**method.distill, **{k[len("distill."):]: v for k, v in point.items()
                                               if k.startswith("distill.")}})
    teacher = Path(launched.run.path) / "model"
    result = distill_model(teacher, TofuSource(world.data, level), world.tokenizer, spec,
                           Path(launched.run.path) / "distill", base=world.base, template=world.template,
                           max_length=world.max_length)
    units = compute["unlearn/units"] + result["units"]
    return CausalLM(name_or_path=result["model"]), {**compute, "distill/units": result["units"],
                                                    "compute/share": units / result["finetune_units"]}


def run_bench(spec: BenchSpec, out: str | Path | None = None, only: list[str] | None = None,
              log: Callable[[str], None] = print) -> Path:
    from lit_unlearn.bench.results import write_outputs

    if spec.paraphrase:  # fail before any run, not at the first verdict after hours of training
        if not spec.audit or spec.benchmark != "tofu":
            raise UserError("bench: paraphrase: true is a part of the full verdict on TOFU: set audit: true "
                            "(benchmark: tofu)")
        from lit_unlearn.verification.holdout_calibration import calibrated_margins

        for level in spec.forget_levels:
            calibrated_margins(level, "best", "paraphrase")
    out = Path(out or spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bench = get_benchmark(spec.benchmark)
    methods = [m for m in spec.methods if not only or m.name in only]
    if only and (unknown := set(only) - {m.name for m in spec.methods}):
        raise UserError(f"unknown bench methods {sorted(unknown)}; the config has {[m.name for m in spec.methods]}")
    done_file = out / "runs.jsonl"
    done: dict[str, dict] = {}

    def read_done(complete_lines_only: bool = False) -> None:
        if done_file.is_file():
            text = done_file.read_text()
            if complete_lines_only:  # another bench may be writing its line at this moment
                text = text[:text.rfind("\n") + 1]
            for line in text.splitlines():
                if line.strip():
                    row = json.loads(line)
                    done[_run_key(row["world"], row["method"], row["point"], row["level"], row["seed"],
                                  row.get("steps", spec.steps))] = row  # a run's key holds the budget it ran

    read_done()

    def run(world, method, point, level, seed, phase):
        steps = _steps(spec, method, bench.forget_size(world, level))
        key = _run_key(world.name, method.name if method else "Target", point, level, seed, steps)
        if key not in done:  # another bench on this OUT (other methods, other seeds) may have finished it since
            read_done(complete_lines_only=True)
        audit = spec.audit and phase == "test" and bench.name == "tofu"
        if key in done and audit and not done[key].get("diverged") and done[key].get(AUDITED) is None:
            started = time.perf_counter()
            columns = audit_finished_run(spec, bench, world, method, point, level, seed, out / "runs")
            if columns is not None:
                row = {**done[key], **{c: columns[k] for c, k in bench.columns.items() if k in columns}}
                if rank_zero_only.rank == 0:  # the later line of a key wins when the file is read back
                    _append_row(done_file, row)
                done[key] = row
                log(f"  {phase:10s} {row['method']:9s} {level} seed {seed} {point or ''}: audited the finished run "
                    f"({time.perf_counter() - started:.1f} s)")
            else:
                log(f"  {phase:10s} {done[key]['method']:9s} {level} seed {seed}: no final model to audit in its "
                    "folder; its row keeps no audit columns")
        if key not in done:
            started = time.perf_counter()
            try:
                result = unlearn_and_evaluate(spec, bench, world, method, point, level, seed, out / "runs", audit)
            except FloatingPointError as err:  # a diverged point is a result: recorded, never chosen, not retried
                result = {**bench_row(bench, world, method, point, level, seed, time.perf_counter() - started, {}),
                          "diverged": str(err).splitlines()[0]}
            row = {**result, "phase": phase, "steps": steps}
            if rank_zero_only.rank == 0:  # every process runs the same loop; one writes
                _append_row(done_file, row)
            done[key] = row
            shown = f"diverged: {row['diverged']}" if row.get("diverged") else \
                " ".join(f"{c} {_fmt(row[c])}" for c in _shown(bench, row))
            log(f"  {phase:10s} {row['method']:9s} {level} seed {seed} {point or ''}: {shown} ({row['seconds']} s)")
        return done[key]

    with stop_between_runs(out):
        tests, val = bench.worlds(spec, out, log)
        levels = bench.levels(spec)
        val_levels = bench.validation_levels(spec)
        chosen: dict[tuple[str, str], tuple[dict, str]] = {}  # (method, level) -> (point, why)
        grid_seed = spec.seeds[0] if spec.grid_seed is None else spec.grid_seed
        for val_level in val_levels:
            log(f"== grid on the validation world ({bench.level_title(val_level)}, seed {grid_seed}) ==")
            target_val = run(val, None, {}, val_level, grid_seed, "validation")
            for m in methods:
                rows = [run(val, m, p, val_level, grid_seed, "validation") for p in m.grid_points()]
                finite = [r for r in rows if not r.get("diverged")]
                chosen[(m.name, val_level)] = bench.select(finite, target_val, spec.utility_floor, spec.selection) \
                    if finite else (rows[0]["point"], "every point diverged: the first is run on the test worlds")
                log(f"  {m.name}: chose {chosen[(m.name, val_level)][0]} ({chosen[(m.name, val_level)][1]})")
        log("== every method x forget level x seed on the test world" + ("s" if len(set(
            w.name for w in tests.values())) > 1 else "") + " ==")
        for level in levels:
            pick = level if level in val_levels else val_levels[0]  # one validation level chooses for every level
            for seed in spec.seeds:
                run(tests[seed], None, {}, level, seed, "test")
                for m in methods:
                    run(tests[seed], m, chosen[(m.name, pick)][0], level, seed, "test")
        rows = list(done.values())
        return write_outputs(spec, bench, out, rows, chosen, val.name, [m.name for m in methods])


