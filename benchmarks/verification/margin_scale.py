"""Margins scaled to the user's recipe, from what a 7B user has (the base model, the target, holdout authors): does
scaling the packaged margins by how far the user's fine-tune spreads authors it never saw fix the off-recipe false
alarms of docs/generated/verdict_transfer*.md without letting targets pass?

    python benchmarks/verification/margin_scale.py [--transfer runs/tofu/transfer_worlds] [--calibration-seeds
        100,101,102] [--worlds runs/tofu/worlds] [--levels 01,05] [--scores relative]
        [--write docs/generated/verdict_margin_scale.md]

The scale of a model: TOFU's 20 holdout10 authors (never seen by the base, the target or any retain-only model),
each item scored by the eight score attacks relative to the base model (`--scores raw`: the model's own scores, the
mode the verdict takes for most attacks at forget01); the authors split at random into two sets
of 10 (20 splits, one seed), and each attack's pooled interval reach from 0.5 between the two sets, averaged over
splits and attacks. It measures how far the fine-tune moves authors it never saw, author by author: what the
calibrated margins must absorb in a never-saw-it model. The candidate calibration scales every packaged margin by
k = scale(the user's target) / scale(the calibration recipe's targets), the latter from calibration worlds only
(seeds 100-102; the transfer worlds 6 and 7 are neither calibration nor test worlds of the packaged margins). All
margins scaled by one k divide every band ratio by k, so a case passes every band iff its packaged band ratio <= k
(power aside); the per-case band ratios are those verdict_transfer.py cached beside each world. Nothing here is
chosen on the transfer worlds: the statistic, its splits and k's formula were fixed before they were read.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import command, options, publish  # benchmarks/report.py
from verification.verdict_transfer import RECIPES, case_file  # noqa: E402

SCORE_ATTACKS = ("loss", "zlib", "min_k", "min_k_plus_plus", "gradnorm", "entropy_mean", "entropy_spread",
                 "token_rank")
SPLITS, SEED = 20, 0


def scale_file(world: Path, scores: str) -> Path:
    return world / "transfer_cases" / ("scale.json" if scores == "relative" else f"scale_{scores}.json")


def author_spread(relative: dict[str, list[float]], groups: list[int]) -> dict[str, float]:
    """{attack: mean pooled reach from 0.5} over SPLITS random halvings of the authors (one set standing for the
    forget side), the verdict's own interval (author-resampled, 95 %)."""
    from dataclasses import replace

    from lit_unlearn.verification.full_verdict import VerdictSpec, author_split_bands

    sums = {a: 0.0 for a in relative}
    for bands in author_split_bands(relative, groups, list(relative), replace(VerdictSpec(), seed=SEED), SPLITS):
        for a, (pooled, _) in bands.items():
            sums[a] += pooled / SPLITS
    return sums


def world_scale(world: Path, scores: str = "relative") -> dict:
    """The scale of the world's target and (for comparison only) of its forget01 retain-only model; cached."""
    cached = scale_file(world, scores)
    if cached.is_file():
        return json.loads(cached.read_text())
    import torch

    torch.set_num_threads(1)
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.models import CausalLM
    from lit_unlearn.verification.verdict_runner import VerdictRunner

    started = time.perf_counter()
    rows = TofuSource(str(world / "data"), "10").eval_splits()["holdout"]
    groups = [i // 20 for i in range(len(rows))]
    half = len(rows) // 2
    runner = VerdictRunner(load_tokenizer(str(world / "tokenizer")), rows[:half], rows[half:], None,
                           mode="relative", base=str(world / "base"), margins=({}, {}), attacks=SCORE_ATTACKS)

    def scored(path: Path) -> dict[str, list[float]]:
        mia = runner.scorer(CausalLM(name_or_path=str(path)).eval(), rows[:half], rows[half:])
        return {a: [*mia[f"forget_{a}"], *mia[f"holdout_{a}"]] for a in SCORE_ATTACKS if f"forget_{a}" in mia}

    base = scored(world / "base") if scores == "relative" else None
    out = {"world": str(world), "authors": len(set(groups)), "scores": scores}
    for name, path in (("target", world / "target"), ("retain_only_01", world / "retain_only_01")):
        if not path.is_dir():
            continue
        mine = scored(path)
        relative = mine if base is None else {a: [x - b for x, b in zip(v, base[a])] for a, v in mine.items()}
        per_attack = author_spread(relative, groups)
        out[name] = {"scale": sum(per_attack.values()) / len(per_attack), "per_attack": per_attack}
    out["seconds"] = time.perf_counter() - started
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(out, indent=1))
    return out


def calibration_worlds(worlds: str, seeds: list[int]) -> list[Path]:
    """The calibration recipe's worlds (base and target; forget01's retain-only model for the comparison)."""
    from lit_unlearn.worlds.tofu_world import prepare_tofu_world

    return [prepare_tofu_world(worlds, s, levels=["01"], log=print).folder for s in seeds]


def table(cal: list[dict], rows: list[tuple[str, int, str, dict, dict]]) -> tuple[str, float]:
    s_cal = sum(c["target"]["scale"] for c in cal) / len(cal)
    lines = ["| recipe | level | seed | target's scale | k | retain-only's scale | never-saw-it band ratios "
             "(packaged) | pass, packaged | pass, scaled | targets' band ratios | targets pass, scaled |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    totals = {"never": 0, "packaged": 0, "scaled": 0, "targets": 0, "target_pass": 0}
    for recipe, seed, level, scale, case in rows:
        k = scale["target"]["scale"] / s_cal
        never = [c["band_ratio"] for key, c in case["cases"].items() if key.startswith("retain_only")]
        targets = [c["band_ratio"] for key, c in case["cases"].items() if key.startswith("target")]
        totals["never"] += len(never)
        totals["packaged"] += sum(b <= 1 for b in never)
        totals["scaled"] += sum(b <= k for b in never)
        totals["targets"] += len(targets)
        totals["target_pass"] += sum(b <= k for b in targets)
        ro = scale.get("retain_only_01", {}).get("scale")
        lines.append(f"| {recipe} | {level} | {seed} | {scale['target']['scale']:.3f} | {k:.2f} | "
                     f"{'-' if ro is None else f'{ro:.3f}'} | {', '.join(f'{b:.2f}' for b in never)} | "
                     f"{sum(b <= 1 for b in never)}/{len(never)} | {sum(b <= k for b in never)}/{len(never)} | "
                     f"{', '.join(f'{b:.2f}' for b in targets)} | {sum(b <= k for b in targets)}/{len(targets)} |")
    lines.append(f"| all | | | | | | | {totals['packaged']}/{totals['never']} | {totals['scaled']}/{totals['never']} "
                 f"| | {totals['target_pass']}/{totals['targets']} |")
    return "\n".join(lines) + "\n\n" + follows(rows), s_cal


def follows(rows) -> str:
    """Whether a world's worst never-saw-it band ratio follows its target's spread (Spearman, per level), and
    whether the target's spread follows the retain-only model's (what it stands in for)."""
    from scipy.stats import spearmanr

    out = []
    for level in sorted({r[2] for r in rows}):
        mine = [r for r in rows if r[2] == level]
        spread = [r[3]["target"]["scale"] for r in mine]
        worst = [max(c["band_ratio"] for k, c in r[4]["cases"].items() if k.startswith("retain_only")) for r in mine]
        out.append(f"forget{level}: Spearman(target's spread, worst never-saw-it band ratio) = "
                   f"{spearmanr(spread, worst).statistic:.2f} over {len(mine)} worlds")
    pairs = {(r[0], r[1]): r[3] for r in rows if "retain_only_01" in r[3]}
    rho = spearmanr([s["target"]["scale"] for s in pairs.values()],
                    [s["retain_only_01"]["scale"] for s in pairs.values()]).statistic
    out.append(f"Spearman(target's spread, forget01 retain-only model's spread) = {rho:.2f} over {len(pairs)} worlds")
    return "\n".join(f"- {line}" for line in out)


def main() -> None:
    ap = options(__doc__)
    ap.add_argument("--transfer", default="runs/tofu/transfer_worlds")
    ap.add_argument("--worlds", default="runs/tofu/worlds", help="where the calibration worlds are (built if missing)")
    ap.add_argument("--calibration-seeds", default="100,101,102")
    ap.add_argument("--levels", default="01,05")
    ap.add_argument("--seeds", default="6,7", help="the transfer worlds' seeds")
    ap.add_argument("--scores", choices=("relative", "raw"), default="relative",
                    help="the attacks' scores relative to the base model, or the model's own")
    args = ap.parse_args()
    cal_worlds = calibration_worlds(args.worlds, [int(s) for s in args.calibration_seeds.split(",")])
    cal = []
    for w in cal_worlds:
        cal.append(world_scale(w, args.scores))
        print(f"calibration {w.name}: target scale {cal[-1]['target']['scale']:.4f}", flush=True)
    rows = []
    for seed in map(int, args.seeds.split(",")):
        for recipe in RECIPES:
            world = case_file(args.transfer, recipe, seed, "01").parents[1]
            scale = world_scale(world, args.scores)
            print(f"{recipe} seed {seed}: target scale {scale['target']['scale']:.4f}", flush=True)
            for level in args.levels.split(","):
                case = case_file(args.transfer, recipe, seed, level)
                if case.is_file():
                    rows.append((recipe, seed, level, scale, json.loads(case.read_text())))
    rows.sort(key=lambda r: (r[2], list(RECIPES).index(r[0]), r[1]))
    text, s_cal = table(cal, rows)
    per_attack = {a: sum(c["target"]["per_attack"][a] for c in cal) / len(cal) for a in SCORE_ATTACKS
                  if a in cal[0]["target"]["per_attack"]}
    head = ("# Margins scaled to the user's recipe: a candidate calibration from the base, the target and holdout "
            "authors\n\n"
            "> Each packaged margin times k = the target's author spread / the calibration recipe's; a never-saw-it "
            "case passes every band iff its packaged band ratio <= k.\n"
            "> Aim: never-saw-it models pass on every recipe, targets never do.\n\n"
            f"Command: `{command()}`. Calibration recipe's scale: {s_cal:.4f} (mean of the targets of calibration "
            f"worlds {args.calibration_seeds}; per attack: "
            + ", ".join(f"{a} {v:.3f}" for a, v in per_attack.items()) + "). \"Scale\": the mean pooled reach "
            "from 0.5 of forget-vs-holdout-style intervals between two random sets of 10 of TOFU's 20 holdout10 "
            f"authors, {'relative to the base' if args.scores == 'relative' else 'raw scores'} "
            "(benchmarks/verification/margin_scale.py). Band ratios and pass counts "
            "are of both halves (steering, reporting); power aside.\n\n")
    publish(text + "\n", args.write, head)


if __name__ == "__main__":
    main()
