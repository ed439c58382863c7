"""HAMU's constrained step over HoldoutMatch's forget objective against HoldoutMatch's own AdamW step, at the same
stop rule and verdict (issue: HAMU over any forget objective).

    python benchmarks/hamu/over_objectives.py [--worlds runs/tofu/worlds] [--out runs/hamu_objectives]
        [--validation 100] [--test 0,1,2] [--level 01] [--write docs/generated/hamu_over_holdout_match_01.md]
        [--holdout-match-runs runs/demo_v3]

1. Validation (world --validation only): HAMU-HoldoutMatch at each (eta, quota) of GRID, through `tofu-demo
   --preset tofu_tiny_hamu_holdout_match`; the point chosen is the one the steering half liked best: its stop rule
   met (band ratio ≤ 1 and utility ≥ 0.95 × the target's), else the smallest steering band ratio at the run's end.
   Nothing on the reporting half or the test worlds is read to choose.
2. Test (worlds --test): HoldoutMatch (the default preset, its lr chosen earlier on worlds 100-101) and HAMU at the
   chosen point, each with the same stop rule; the reporting half's verdict before any attack, the full verdict,
   and model utility over the target's. "Keeps more utility at the same verdict": per seed, both pass before any
   attack and HAMU's utility ratio is the higher. `--holdout-match-runs DIR` reuses HoldoutMatch's runs of
   benchmarks/tofu_world/demo_seeds.py (DIR/level{L}_seed{S}, the same command) instead of making them again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from tofu_world.demo_seeds import run_seed  # noqa: E402
from report import options, publish  # benchmarks/report.py

GRID = [(0.2, 0.05), (1.0, 0.25)]
HAMU = "tofu_tiny_hamu_holdout_match"


def can_fail_ratio(folder: Path, part: str) -> float | None:
    """The full verdict's band ratio of one part counting only the attacks whose margin is below 0.5 there (a
    margin of 0.5 holds every interval: the report lists them under "no power here"), pooled and per author."""
    from lit_unlearn.verification.full_verdict import part_of

    run = max((folder / "runs/tofu").glob("*/version_*"), key=lambda p: p.stat().st_mtime)
    full = json.loads((run / "holdout_verification.json").read_text())["after"].get("full") or {}
    worst = None
    for condition, verdict in (full.get("conditions") or {}).items():
        if part_of(condition) != part:
            continue
        for scope in [verdict["pooled"], *verdict["authors"].values()]:
            for attack, iv in scope["intervals"].items():
                margin = scope["delta"][attack]
                if margin < 0.5:
                    ratio = max(abs(iv["low"] - 0.5), abs(iv["high"] - 0.5)) / margin
                    worst = ratio if worst is None else max(worst, ratio)
    return worst


def steering(folder: Path) -> dict:
    """The steering half's last look and whether the stop rule was met (what validation may read)."""
    run = max((folder / "runs/tofu").glob("*/version_*"), key=lambda p: p.stat().st_mtime)
    hv = json.loads((run / "holdout_verification.json").read_text())
    log = (folder / "tofu-demo.log").read_text()
    met = any("': met at step" in line for line in log.splitlines())
    return {"met": met, "steering_ratio": hv["last_steering_look"]["verdict"]["band_ratio"]
            if hv.get("last_steering_look") else None}


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--worlds", default="runs/tofu/worlds")
    parser.add_argument("--out", default="runs/hamu_objectives")
    parser.add_argument("--validation", type=int, default=100)
    parser.add_argument("--test", default="0,1,2")
    parser.add_argument("--level", default="01")
    parser.add_argument("--holdout-match-runs", help="DIR of benchmarks/tofu_world/demo_seeds.py runs to reuse")
    args = parser.parse_args()
    worlds, out = Path(args.worlds), Path(args.out)
    looks = []
    for eta, quota in GRID:
        extra = ["--preset", HAMU, f"--model.init_args.eta={eta}", f"--model.init_args.quota={quota}"]
        folder = out / f"validation_eta{eta:g}_q{quota:g}"
        run_seed(args.validation, args.level, worlds, folder, extra)
        looks.append({"eta": eta, "quota": quota, **steering(folder / f"level{args.level}_seed{args.validation}")})
        print(looks[-1], flush=True)
    best = min(looks, key=lambda r: (not r["met"], r["steering_ratio"] if r["steering_ratio"] is not None else 9))
    rows = []
    if args.holdout_match_runs:
        for seed in [int(s) for s in args.test.split(",")]:
            link = out / "holdout_match" / f"level{args.level}_seed{seed}"
            if not link.exists():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(Path(args.holdout_match_runs).resolve() / link.name)
    for seed in [int(s) for s in args.test.split(",")]:
        for name, extra in (("HoldoutMatch (AdamW)", []),
                            (f"HAMU over HoldoutMatch's objective (eta {best['eta']:g}, quota {best['quota']:g})",
                             ["--preset", HAMU, f"--model.init_args.eta={best['eta']}",
                              f"--model.init_args.quota={best['quota']}"])):
            sub = out / ("holdout_match" if not extra else f"hamu_eta{best['eta']:g}_q{best['quota']:g}")
            r = run_seed(seed, args.level, worlds, sub, extra)
            r["relearn_can_fail"] = can_fail_ratio(sub / f"level{args.level}_seed{seed}", "relearning")
            rows.append({"method": name, **r})
            print(name, seed, r["ratio"], r["mu_ratio"], r["full_ratio"], flush=True)
    fmt = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731
    lines = [f"# HAMU over HoldoutMatch's objective against HoldoutMatch, forget{args.level}", "",
             f"Generated by `python benchmarks/hamu/over_objectives.py --worlds {args.worlds} --out {args.out} "
             f"--validation {args.validation} --test {args.test} --level {args.level}"
             + (f" --holdout-match-runs {args.holdout_match_runs}" if args.holdout_match_runs else "")
             + (f" --write {args.write}`." if args.write else "`."), "",
             f"Validation world {args.validation} (steering half only; the chosen point first met the stop rule, else "
             "had the smallest steering band ratio):", "",
             "| eta | quota | stop rule met | steering band ratio at the end |", "|---|---|---|---|",
             *[f"| {r['eta']:g} | {r['quota']:g} | {r['met']} | {fmt(r['steering_ratio'])} |" for r in looks], "",
             f"Chosen: eta {best['eta']:g}, quota {best['quota']:g}. Test worlds (reporting half):", "",
             "| method | seed | stop | band ratio before any attack | passes before any attack | full verdict band "
             "ratio | after relearning | after relearning, attacks that can fail there | at 4 bits | MU / target's |",
             "|---|---|---|---|---|---|---|---|---|---|",
             *[f"| {r['method']} | {r['seed']} | {r['stop']} | {fmt(r['ratio'])} | {r['passed']} | "
               f"{fmt(r['full_ratio'])} | {fmt(r['relearn'])} | {fmt(r['relearn_can_fail'])} | {fmt(r['int4'])} | "
               f"{fmt(r['mu_ratio'])} |" for r in rows],
             "", "After relearning, attacks that can fail there: the relearning part's band ratio over the attacks "
             "whose calibrated margin is below 0.5 in that condition, pooled and per author (at forget01 the learned "
             "attack's margin is 0.5 in every relearning condition, and min_k's, min_k_plus_plus's and "
             "entropy_spread's in most: never-trained models reach that far in calibration)."]
    both = [(a, b) for a, b in zip(rows[::2], rows[1::2]) if a["passed"] and b["passed"]]
    lines += ["", f"Seeds where both pass before any attack: {len(both)} of {len(rows) // 2}; of those, HAMU keeps more "
              f"utility in {sum(b['mu_ratio'] > a['mu_ratio'] for a, b in both)}."]
    text = "\n".join(lines) + "\n"
    publish(text, args.write)


if __name__ == "__main__":
    main()
