"""Run the bench: grid on the validation world, then every method × forget level × seed on the test world.

Every finished run is appended to OUT/runs.jsonl at once, so an interrupted bench resumes where it stopped
(rerun the same command). The table, CSV and figure are written from that file at the end.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_only

from lit_unlearn.bench.spec import BenchSpec, MethodSpec
from lit_unlearn.errors import UserError

__all__ = ["run_bench", "World", "TABLE_METRICS", "select_point"]

# table column -> TOFU report key
TABLE_METRICS = {"FQ": "forget_quality", "MU": "model_utility", "FTR": "forget_truth_ratio", "privleak": "privleak",
                 "ES": "forget/es", "forget ROUGE": "forget/rouge"}


class World:
    """A target, its data and one retain-only reference report per forget level."""

    def __init__(self, name: str, data: str, tokenizer: Any, target: str, references: dict[str, str],
                 template: str = "plain", network_args: dict | None = None) -> None:
        self.name, self.data, self.tokenizer, self.target = name, data, tokenizer, target
        self.references, self.template, self.network_args = references, template, network_args or {}

    def source(self, level: str):
        from lit_unlearn.data import TofuSource

        return TofuSource(self.data, level)


def _generated_world(folder: Path, seed: int, levels: list[str], max_new_tokens: int, log,
                     n_authors: int = 40, epochs: int = 30) -> World:
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.recipes.tofu_demo import prepare_tofu_assets

    refs = {}
    for level in levels:
        paths = prepare_tofu_assets(folder, seed=seed, forget_level=level, max_new_tokens=max_new_tokens,
                                    n_authors=n_authors, epochs=epochs,
                                    log=lambda msg: log(f"[{folder.name}] {msg.strip('= ')}"))
        refs[level] = str(paths["reference"])
    return World(folder.name, str(paths["data"]), load_tokenizer(str(paths["tokenizer"])), str(paths["target"]),
                 refs)


def _tofu_world(data: dict, levels: list[str], template: str) -> World:
    from lit_unlearn.data.tokenizer import load_tokenizer

    refs = {str(k).zfill(2): v for k, v in (data.get("references") or {}).items()}
    missing = [lv for lv in levels if lv not in refs]
    if missing:
        raise UserError(f"bench data.references has no retain-only report for forget levels {missing}: evaluate "
                        "each retain model with `lit-unlearn tofu-eval --save` and list the files")
    return World("tofu", data.get("path", "locuslab/TOFU"), load_tokenizer(data["tokenizer"]), data["target"], refs,
                 template, data.get("network_args"))


def _run_key(world: str, method: str, point: dict, level: str, seed: int) -> str:
    return json.dumps([world, method, point, level, seed], sort_keys=True)


def unlearn_and_evaluate(spec: BenchSpec, world: World, method: MethodSpec | None, point: dict, level: str,
                         seed: int) -> dict[str, Any]:
    """One run: the method's module on the world's target for `spec.steps` steps, then the TOFU report.
    method=None evaluates the target itself (the "before" row)."""
    from lit_unlearn.data import TofuDataModule
    from lit_unlearn.metrics import TofuEvaluator
    from lit_unlearn.models import CausalLM
    from lit_unlearn.specs import build

    pl.seed_everything(seed, verbose=False)
    network = CausalLM(name_or_path=world.target, **world.network_args)
    source = world.source(level)
    t0 = time.perf_counter()
    if method is not None:
        module = build({"class_path": method.class_path, "init_args": {**method.init_args, **point}}, network=network)
        dm = TofuDataModule(source, world.tokenizer, template=world.template, retain_batch_size=spec.batch_size,
                            forget_batch_size=spec.batch_size, seed=seed,
                            alternate_answers="generated" if method.needs_refusals else None)
        trainer_args = {"accelerator": "cpu", "devices": 1} | spec.trainer
        if isinstance(trainer_args.get("strategy"), dict):  # e.g. DeepSpeed ZeRO-3 in the 7B config
            trainer_args["strategy"] = build(trainer_args["strategy"])
        trainer = pl.Trainer(max_steps=spec.steps, max_epochs=-1, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                             limit_val_batches=0, **trainer_args)
        trainer.fit(module, dm)
        network = module.network
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = TofuEvaluator(world.tokenizer, source.eval_splits(), template=world.template,
                               max_new_tokens=spec.max_new_tokens, reference=world.references[level],
                               gradnorm=False).run(network)
    row = {"world": world.name, "method": method.name if method else "Target", "point": point, "level": level,
           "seed": seed, "seconds": round(time.perf_counter() - t0, 1)}
    row.update({col: report.summary.get(key) for col, key in TABLE_METRICS.items()})
    return row


def select_point(rows: list[dict], target_mu: float, floor: float) -> tuple[dict, str]:
    """The validation criterion: the highest forget quality among grid points that keep model utility at
    least `floor` × the target's; if none does, the highest utility. Returns (point, why)."""
    ok = [r for r in rows if r["MU"] is not None and r["MU"] >= floor * target_mu and r["FQ"] is not None]
    if ok:
        best = max(ok, key=lambda r: (r["FQ"], r["MU"]))
        return best["point"], f"max FQ with MU >= {floor:g} x target's"
    best = max(rows, key=lambda r: r["MU"] if r["MU"] is not None else -math.inf)
    return best["point"], f"no point kept MU >= {floor:g} x target's: max MU"


def run_bench(spec: BenchSpec, out: str | Path | None = None, only: list[str] | None = None,
              log: Callable[[str], None] = print) -> Path:
    from lit_unlearn.bench.report import write_outputs

    out = Path(out or spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
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
            row = {**unlearn_and_evaluate(spec, world, method, point, level, seed), "phase": phase}
            if rank_zero_only.rank == 0:  # every process runs the same loop; one writes
                with done_file.open("a") as f:
                    f.write(json.dumps(row) + "\n")
            done[key] = row
            log(f"  {phase:10s} {row['method']:9s} forget{level} seed {seed} {point or ''}: FQ {_fmt(row['FQ'])} "
                f"MU {_fmt(row['MU'])} ({row['seconds']} s)")
        return done[key]

    data = spec.data
    if data.get("kind", "generated") == "generated":
        size = {"n_authors": int(data.get("n_authors", 40)), "epochs": int(data.get("epochs", 30))}
        test = _generated_world(out / "world_test", int(data.get("seed", 0)), spec.forget_levels,
                                spec.max_new_tokens, log, **size)
        val = _generated_world(out / "world_validation", int(data.get("validation_seed", 1)),
                               [spec.validation_level], spec.max_new_tokens, log, **size)
    elif data.get("kind") == "tofu":
        test = val = _tofu_world(data, spec.forget_levels, spec.template)
    else:
        raise UserError(f"bench data.kind must be 'generated' or 'tofu', got {data.get('kind')!r}")

    log(f"== grid on the validation world (forget{spec.validation_level}, seed {spec.seeds[0]}) ==")
    target_val = run(val, None, {}, spec.validation_level, spec.seeds[0], "validation")
    chosen = {}
    for m in methods:
        rows = [run(val, m, p, spec.validation_level, spec.seeds[0], "validation") for p in m.grid_points()]
        chosen[m.name] = select_point(rows, target_val["MU"], spec.utility_floor)
        log(f"  {m.name}: chose {chosen[m.name][0]} ({chosen[m.name][1]})")
    log("== every method x forget level x seed on the test world ==")
    for level in spec.forget_levels:
        for seed in spec.seeds:
            run(test, None, {}, level, seed, "test")
            for m in methods:
                run(test, m, chosen[m.name][0], level, seed, "test")
    rows = list(done.values())
    return write_outputs(spec, out, rows, chosen, test.name, val.name, [m.name for m in methods])


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3g}"
