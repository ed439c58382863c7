"""Calibrate δ, the reference-free verification's equivalence margin, on models that never saw the forget authors,
and measure the pass rates it gives on worlds it was not calibrated on.

    python benchmarks/calibrate_holdout_delta.py [--worlds runs/tofu/worlds] [--calibration-seeds 100,...,115]
        [--test-seeds 0,...,5] [--levels 01,05,10] [--jobs 2] [--write]

1. Builds (or reuses) the TOFU worlds of every seed with the retain-only model of every level
   (lit_unlearn.worlds.tofu_world; `--jobs` worlds at a time, one thread each).
2. Per level and world: the retain-only model's forget-vs-holdout attack scores (its saved report), and the
   target's (scored here), split into the steering and reporting halves exactly as HoldoutVerification splits
   them; each (world, half) gives the band its pooled intervals need and the band its per-author intervals need.
3. Per level, δ = the largest pooled band and δ_author = the largest per-author band of the calibration worlds'
   retain-only models, each rounded up to 0.01 (lit_unlearn.verification.holdout_calibration.delta_from_bands).
4. On the test worlds (never used for δ): the share of (world, half) cases where the retain-only model passes
   (goal ≥ 90 %) and where the target passes (goal 0 %).
`--write` stores δ and every case in lit_unlearn/verification/holdout_delta.json (the packaged default) and the
table in docs/generated/holdout_calibration.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ATTACKS = ["loss", "zlib", "min_k", "min_k_plus_plus", "gradnorm"]


def build(worlds: str, seeds: list[int], levels: list[str], jobs: int) -> None:
    """Each seed's world in its own process (one thread each), `jobs` at a time."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    code = ("import sys; from lit_unlearn.worlds.tofu_world import prepare_tofu_world as p; "
            "p(sys.argv[1], seed=int(sys.argv[2]), levels=sys.argv[3].split(','), log=lambda *a: None)")
    pending, running = list(seeds), []
    while pending or running:
        while pending and len(running) < jobs:
            seed = pending.pop(0)
            running.append((seed, time.perf_counter(), subprocess.Popen(
                [sys.executable, "-c", code, worlds, str(seed), ",".join(levels)], env=env)))
        time.sleep(2)
        for item in list(running):
            seed, started, proc = item
            if proc.poll() is not None:
                running.remove(item)
                if proc.returncode:
                    sys.exit(f"world seed {seed} failed (exit {proc.returncode})")
                print(f"world seed {seed}: ready ({time.perf_counter() - started:.0f} s)", flush=True)


def target_scores(world, level: str) -> dict:
    """The target's per-item attack scores on forget and holdout (membership passes only)."""
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.metrics import TofuEvaluator
    from lit_unlearn.models import CausalLM

    cache = world.folder / f"target_{level}_attacks.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    splits = TofuSource(str(world.data), level).eval_splits()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = TofuEvaluator(load_tokenizer(str(world.tokenizer)), {k: splits[k] for k in ("forget", "holdout")}).run(
            CausalLM(name_or_path=str(world.target)), only=["membership", "gradnorm"])
    cache.write_text(json.dumps(report.per_item["mia"]))
    return report.per_item["mia"]


def cases(worlds: str, seeds: list[int], level: str, split_seed: int = 0) -> list[dict]:
    """Per world and half: the band the retain-only model's and the target's intervals need."""
    from lit_unlearn.verification.steering_halves import half_verdict, split_halves
    from lit_unlearn.worlds.tofu_world import prepare_tofu_world

    out = []
    for seed in seeds:
        world = prepare_tofu_world(worlds, seed=seed, levels=(level,), log=lambda *a: None)
        models = {"retain_only": json.loads(world.reference(level).read_text())["per_item"]["mia"],
                  "target": target_scores(world, level)}
        n = {side: len(models["target"][f"{side}_loss"]) for side in ("forget", "holdout")}
        groups = {side: [i // 20 for i in range(n[side])] for side in n}
        halves = {side: split_halves(groups[side], split_seed) for side in n}
        for half in ("steering", "reporting"):
            row = {"seed": seed, "half": half}
            for name, mia in models.items():
                verdict = half_verdict(mia, groups, halves, half, ATTACKS, delta=0.5, delta_author=0.5)
                row[name] = {"pooled": verdict.pooled.band, "author": max(v.band for v in verdict.authors.values()),
                             "worst": verdict.as_dict()["worst"],
                             "auc": {a: round(iv.auc, 4) for a, iv in verdict.pooled.intervals.items()}}
            out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="runs/tofu/worlds")
    ap.add_argument("--calibration-seeds", default=",".join(str(s) for s in range(100, 116)))
    ap.add_argument("--test-seeds", default="0,1,2,3,4,5")
    ap.add_argument("--levels", default="01,05,10")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    calibration = [int(s) for s in args.calibration_seeds.split(",")]
    test = [int(s) for s in args.test_seeds.split(",")]
    levels = args.levels.split(",")
    build(args.worlds, calibration + test, levels, args.jobs)

    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    from lit_unlearn.verification.holdout_calibration import delta_from_bands

    result = {"delta": {}, "levels": {}, "calibration_seeds": calibration, "test_seeds": test,
              "command": "python benchmarks/calibrate_holdout_delta.py " + " ".join(sys.argv[1:]),
              "rule": "the largest retain-only band (pooled, and per author) over calibration worlds x halves, "
                      "rounded up to 0.01"}
    lines = ["| level | δ (pooled) | δ_author | calibration cases | test: retain-only passes | test: target passes | "
             "calibration: retain-only bands, pooled / per author | test: retain-only bands | test: target bands |",
             "|---|---|---|---|---|---|---|---|---|"]
    for level in levels:
        cal, tst = cases(args.worlds, calibration, level), cases(args.worlds, test, level)
        delta = delta_from_bands([c["retain_only"]["pooled"] for c in cal])
        delta_author = delta_from_bands([c["retain_only"]["author"] for c in cal])

        def passes(case):
            return case["pooled"] <= delta and case["author"] <= delta_author

        ro = [passes(c["retain_only"]) for c in tst]
        tg = [passes(c["target"]) for c in tst]
        result["delta"][level] = {"pooled": delta, "author": delta_author}
        result["levels"][level] = {"calibration": cal, "test": tst, "retain_only_pass_rate": sum(ro) / len(ro),
                                   "target_pass_rate": sum(tg) / len(tg)}
        fmt = lambda cs, who: ", ".join(f"{c[who]['pooled']:.2f}/{c[who]['author']:.2f}" for c in cs)  # noqa: E731
        lines.append(f"| forget{level} | {delta:.2f} | {delta_author:.2f} | {len(cal)} | {sum(ro)}/{len(ro)} | "
                     f"{sum(tg)}/{len(tg)} | {fmt(cal, 'retain_only')} | {fmt(tst, 'retain_only')} | "
                     f"{fmt(tst, 'target')} |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        (REPO / "lit_unlearn/verification/holdout_delta.json").write_text(json.dumps(result, indent=1) + "\n")
        out = REPO / "docs/generated/holdout_calibration.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(f"# δ calibration of the reference-free verification\n\nGenerated by `{result['command']}`.\n"
                       f"Calibration worlds: seeds {calibration}; test worlds: seeds {test}. Rule: {result['rule']}. "
                       "A case is one world and one half (steering or reporting) of the forget and holdout items; "
                       "its bands are the half-widths around 0.5 that every attack's interval needs, for all forget "
                       "items (pooled) and for the worst forget author (per author); a case passes when both are "
                       "within their δ.\n\n" + table + "\n")
        print(f"wrote {out.relative_to(REPO)} and lit_unlearn/verification/holdout_delta.json")


if __name__ == "__main__":
    main()
