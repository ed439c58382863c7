"""Fill the worst-AUC columns of TOFU bench rows made before those columns existed, from each run's saved model.

    python benchmarks/bench_backfill_worst_auc.py --out runs/bench_tofu_l05 --runs runs/b05a/runs runs/b05b/runs

For every test row of OUT/runs.jsonl without "worst AUC": find the run's folder (its run.json names the same method,
world, level, seed, hyper-parameters and step budget), load its final model (the world's target for the Target row),
score the membership attacks on the forget and holdout splits, and take the reporting half's verdict as the bench
does (`lit_unlearn.bench.adapters.verification_columns`, which the bench's evaluation calls). The row is filled only
if the recomputed band ratio equals the one the row already holds (to 1e-9): the same weights, data, margins and
code. Otherwise it is left alone and reported. Then `lit-unlearn bench --levels L --out OUT` finds every run done
and writes the table with the filled columns.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

COLUMNS = {"worst AUC": "verify/worst_auc", "worst AUC low": "verify/worst_auc_low",
           "worst AUC high": "verify/worst_auc_high"}


def find_run(folders: list[Path], row: dict) -> Path | None:
    """The final model of the run that made `row`, by the identity its run.json records."""
    prefix = f"{row['method']}-{row['world']}-forget{row['level']}-seed{row['seed']}-"
    for folder in folders:
        for run in sorted(folder.glob(f"{glob_escape(prefix)}*/version_*/run.json")):
            meta = json.loads(run.read_text())
            ident = meta.get("identity", {})
            args = ident.get("model", {}).get("init_args", {})
            if ident.get("trainer", {}).get("max_steps") != row.get("steps"):
                continue
            if all(args.get(k) == v for k, v in row["point"].items()) and meta.get("final_model"):
                return Path(meta["final_model"])
    return None


def glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "[]*?" else c for c in text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the bench's output folder (runs.jsonl, world_* links)")
    ap.add_argument("--runs", nargs="+", required=True, help="folders holding the runs' folders")
    ap.add_argument("--preset", default="bench_tofu_tiny")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    from lit_unlearn.bench import load_bench_spec
    from lit_unlearn.bench.adapters import get_benchmark, verification_columns
    from lit_unlearn.data import TofuSource
    from lit_unlearn.metrics import TofuEvaluator
    from lit_unlearn.models import CausalLM
    from lit_unlearn.packaged_files import packaged_config

    out = Path(args.out)
    rows = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines() if x.strip()]
    todo = [i for i, r in enumerate(rows) if r.get("phase") == "test" and r.get("worst AUC") is None]
    if not todo:
        print("every test row has its worst-AUC columns")
        return 0
    spec = load_bench_spec(packaged_config(args.preset, ("bench",), "bench"))
    spec.forget_levels = sorted({rows[i]["level"] for i in todo})
    tests, _ = get_benchmark(spec.benchmark).worlds(spec, out, lambda *a: None)
    worlds = {w.name: w for w in tests.values()}
    evaluators: dict = {}
    filled, refused = 0, []
    for n, i in enumerate(todo, 1):
        row = rows[i]
        world, level = worlds[row["world"]], row["level"]
        model = Path(world.target) if row["method"] == "Target" else find_run([Path(f) for f in args.runs], row)
        if model is None:
            refused.append(f"{row['method']} {row['world']} seed {row['seed']}: no run folder with its final model")
            continue
        key = (world.name, level)
        if key not in evaluators:
            splits = TofuSource(world.data, level).eval_splits()
            evaluators[key] = TofuEvaluator(world.tokenizer, {k: splits[k] for k in ("forget", "holdout")},
                                            template=world.template, max_length=world.max_length)
        ev = evaluators[key]
        report = ev.run(CausalLM(name_or_path=str(model), **world.network_args), only=["gradnorm"])
        columns = verification_columns(ev.splits, report.per_item["mia"], level, per_author=20)
        if abs(columns["verify/band_ratio"] - row["band ratio"]) > 1e-9:
            refused.append(f"{row['method']} {row['world']} seed {row['seed']}: band ratio "
                           f"{columns['verify/band_ratio']:.12g} recomputed, {row['band ratio']:.12g} in the row")
            continue
        row.update({col: columns[key] for col, key in COLUMNS.items()})
        filled += 1
        print(f"[{n}/{len(todo)}] {row['method']} {row['world']} seed {row['seed']}: worst AUC "
              f"{row['worst AUC']:.4f} [{row['worst AUC low']:.4f}, {row['worst AUC high']:.4f}]", flush=True)
    tmp = out / "runs.jsonl.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.replace(tmp, out / "runs.jsonl")
    print(f"filled {filled} of {len(todo)} rows; left alone: {len(refused)}")
    for r in refused:
        print("  " + r)
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
