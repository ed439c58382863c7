"""Do the verdict's margins travel beyond the recipe they were calibrated on? Never-saw-it models (retain-only) and
targets built by other recipes (fewer or more epochs, half or twice the learning rate, a wider or deeper model), each
judged by the full verdict with the packaged margins, both halves.

    python benchmarks/verification/verdict_transfer.py [--levels 05] [--seeds 6,7] [--recipes all] [--jobs 2]
        [--write docs/generated/verdict_transfer.md]

The aim (issue "a verdict that holds on the user's own model"): on every recipe, never-saw-it models read
"forgotten" in ≥ 90 % of cases and targets in 0 %. Seeds 6 and 7 are neither calibration (100-115) nor test (0-5)
worlds of the calibration. Each (recipe, seed) world is built once under --worlds, and each case's verdict is cached
beside it (transfer_cases/); a rerun only does what is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from process_pool import run_all  # benchmarks/process_pool.py

from report import options, publish  # benchmarks/report.py

RECIPES = {
    "calibration's": {},
    "4 epochs": {"epochs": 4},
    "12 epochs": {"epochs": 12},
    "lr x 0.5": {"lr": 7.5e-4},
    "lr x 2": {"lr": 3e-3},
    "wider (hidden 192)": {"size": {"hidden_size": 192, "layers": 2, "heads": 4, "kv_heads": 2,
                                    "intermediate_size": 384}},
    "deeper (3 layers)": {"size": {"hidden_size": 128, "layers": 3, "heads": 4, "kv_heads": 2,
                                   "intermediate_size": 256}},
}
MODELS = ("retain_only", "target")


def recipe_of(name: str):
    from lit_unlearn.worlds.tofu_world import TofuWorldRecipe

    return TofuWorldRecipe(**RECIPES[name])


def case_file(worlds: str, name: str, seed: int, level: str) -> Path:
    from lit_unlearn.worlds.tofu_world import world_folder

    return world_folder(worlds, seed, recipe_of(name)) / "transfer_cases" / f"{level}.json"


def run_case(worlds: str, name: str, seed: int, level: str) -> None:
    """Build the world if needed; judge its retain-only model and its target on both halves; write the case."""
    import torch

    torch.set_num_threads(1)
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.models import CausalLM
    from lit_unlearn.verification.verdict_runner import VerdictRunner
    from lit_unlearn.worlds.tofu_world import prepare_tofu_world

    started = time.perf_counter()
    world = prepare_tofu_world(worlds, seed, levels=[level], recipe=recipe_of(name), log=lambda *a: None)
    built = time.perf_counter() - started
    splits = TofuSource(str(world.data), level).eval_splits()
    runner = VerdictRunner(load_tokenizer(str(world.tokenizer)), splits["forget"], splits["holdout"], level,
                           base=str(world.base), mode="best", margins="calibrated")
    out = {"recipe": name, "overrides": RECIPES[name], "seed": seed, "level": level, "build_seconds": built,
           "cases": {}}
    for model in MODELS:
        path = world.retain_only(level) if model == "retain_only" else world.target
        network = CausalLM(name_or_path=str(path)).eval()
        for half in ("steering", "reporting"):
            v = runner.verdict(network, half)
            d = v.as_dict()
            out["cases"][f"{model}/{half}"] = {
                "decision": v.decision, "band_ratio": v.band_ratio, "headline": v.headline(),
                "parts": {p: (None if x is None else {"band_ratio": x["band_ratio"], "attack": x["attack"],
                                                      "condition": x["condition"]}) for p, x in d["parts"].items()},
                "detectable_auc": d["detectable_auc"], "missing": d["missing"]}
    out["seconds"] = time.perf_counter() - started
    target = case_file(worlds, name, seed, level)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(out, indent=1))


def table(rows: list[dict]) -> str:
    """Per recipe and level: never-saw-it models read forgotten / pass every band (power aside) / undecided, and
    targets read forgotten, each over the cases (seeds x halves)."""
    lines = ["| recipe | level | cases | never-saw-it: forgotten | never-saw-it: every band passes | never-saw-it: "
             "undecided | never-saw-it: worst part (band ratio) | targets: forgotten | targets: smallest band ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["recipe"], r["level"]), []).append(r)
    for (name, level), mine in groups.items():
        never = [c for r in mine for k, c in r["cases"].items() if k.startswith("retain_only")]
        targets = [c for r in mine for k, c in r["cases"].items() if k.startswith("target")]
        worst = max(never, key=lambda c: c["band_ratio"])
        part = max((p for p in worst["parts"].values() if p), key=lambda p: p["band_ratio"])
        lines.append(
            f"| {name} | {level} | {len(never)} | {sum(c['decision'] == 'forgotten' for c in never)}/{len(never)} | "
            f"{sum(c['band_ratio'] <= 1 for c in never)}/{len(never)} | "
            f"{sum(c['decision'] == 'undecided' for c in never)}/{len(never)} | "
            f"{worst['band_ratio']:.2f} ({part['attack']}, {part['condition']}) | "
            f"{sum(c['decision'] == 'forgotten' for c in targets)}/{len(targets)} | "
            f"{min(c['band_ratio'] for c in targets):.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = options(__doc__)
    ap.add_argument("--worlds", default="runs/tofu/transfer_worlds")
    ap.add_argument("--levels", default="05")
    ap.add_argument("--seeds", default="6,7")
    ap.add_argument("--recipes", default="all", help="comma-separated names of RECIPES, or all")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--case", nargs=4, metavar=("WORLDS", "RECIPE", "SEED", "LEVEL"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        worlds, name, seed, level = args.case
        run_case(worlds, name, int(seed), level)
        return
    names = list(RECIPES) if args.recipes == "all" else args.recipes.split(",")
    todo = [(n, s, lv) for lv in args.levels.split(",") for s in map(int, args.seeds.split(",")) for n in names]
    missing = [t for t in todo if not case_file(args.worlds, *t).is_file()]
    run_all([[sys.executable, __file__, "--case", args.worlds, n, str(s), lv] for n, s, lv in missing], args.jobs,
            "case", stop_on_failure=False)
    rows = [json.loads(case_file(args.worlds, *t).read_text()) for t in todo if case_file(args.worlds, *t).is_file()]
    text = table(rows)
    head = ("# Does the verdict travel? Never-saw-it models and targets of other recipes\n\n"
            "> The full verdict with the packaged margins on models built by recipes other than the calibration's.\n"
            "> Aim: never-saw-it models read \"forgotten\" in >= 90 % of cases, targets in 0 %.\n"
            "> A case is one world (recipe, seed) and one half of its items.\n\n"
            f"Command: `python benchmarks/verification/verdict_transfer.py --levels {args.levels} --seeds {args.seeds} "
            f"--recipes {args.recipes} --write {args.write}`. \"Every band passes\": all checks inside their "
            "margins, power aside; \"undecided\": every band passes but a part has no check with power.\n\n")
    publish(text + "\n", args.write, head)


if __name__ == "__main__":
    main()
