"""Margins from the base model, calibrated on one recipe and tested on the others: the two candidate calibrations of
issue "a verdict that holds on the user's own model" (part 2) that margin_scale.py left unmeasured.

    python benchmarks/verification/base_margins.py [--level 05] [--calibration-seeds 100,101,102]
        [--transfer-seeds 6,7] [--jobs 2] [--write docs/generated/verdict_base_margins_05.md]

A 7B user has the base model, which never saw the forget or the holdout authors. Its forget-vs-holdout separation,
on the user's own items and under each of the verdict's conditions (as it is, relearned, 4 bits, paraphrased), is
a never-saw-it model's separation that no recipe chose. Two margins are built from it, each attack and condition,
pooled and per author, scores raw (relative to the base, the base scores zero):

- **base band**: k x the reach from 0.5 of the base's own intervals (the verdict's author-resampled 90 % interval);
- **base bootstrap**: k x the largest reach over 16 author-level bootstrap replicates of the base's items (each side's
  authors drawn with replacement, every replicate judged by the verdict's interval), the replicates standing in for
  the calibration worlds of the packaged rule.

k, one number per candidate, is the smallest on a grid of 0.05 from 0.5 (a margin narrower than the base's own reach
is allowed: a fine-tuned model may separate less than the base) at which every never-saw-it case of the calibration
recipe (worlds 100-102, both halves) passes every band: chosen there only. The test: the transfer
worlds of verdict_transfer.py (seeds 6 and 7, seven recipes, both halves), where never-saw-it models should pass
every band (aim >= 90 %) and targets none. "Passes" is every band, power aside; a margin that reaches 0.5 has no
power and is counted in its own column. The packaged margins' column is read from verdict_transfer.py's cached cases.

Each (world, model) is scored once, in a process of one thread, and its per-item scores under every condition are
cached beside the world (base_margin_cases/); a rerun only scores what is missing.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from process_pool import run_all  # benchmarks/process_pool.py

from report import command, options, publish  # benchmarks/report.py
from verification.verdict_transfer import RECIPES, case_file  # noqa: E402

MODELS = ("base", "retain_only", "target")
CALIBRATION_RECIPE = "calibration's"
REPLICATES, REPLICATE_SEED = 16, 0
K_GRID = [round(0.5 + 0.05 * i, 2) for i in range(71)]  # 0.50 ... 4.00


def world_of(worlds: str, recipe: str, seed: int, level: str):
    from lit_unlearn.worlds.tofu_world import TofuWorldRecipe, prepare_tofu_world

    return prepare_tofu_world(worlds, seed, levels=[level], recipe=TofuWorldRecipe(**RECIPES[recipe]),
                              log=lambda *a: None)


def scores_file(worlds: str, recipe: str, seed: int, level: str, model: str) -> Path:
    from lit_unlearn.worlds.tofu_world import TofuWorldRecipe, world_folder

    folder = world_folder(worlds, seed, TofuWorldRecipe(**RECIPES[recipe]))
    return folder / "base_margin_cases" / f"{level}_{model}.json"


def score(worlds: str, recipe: str, seed: int, level: str, model: str) -> None:
    """Every condition's raw per-item scores of one model on both halves, and the halves' author groups."""
    import torch

    torch.set_num_threads(1)
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.models import CausalLM
    from lit_unlearn.verification.full_verdict import VerdictSpec
    from lit_unlearn.verification.verdict_runner import VerdictRunner

    started = time.perf_counter()
    world = world_of(worlds, recipe, seed, level)
    splits = TofuSource(str(world.data), level).eval_splits()
    runner = VerdictRunner(load_tokenizer(str(world.tokenizer)), splits["forget"], splits["holdout"], level,
                           spec=VerdictSpec(paraphrase=True), mode="raw", margins=(0.5, 0.5))
    path = {"base": world.base, "retain_only": world.retain_only(level), "target": world.target}[model]
    network = CausalLM(name_or_path=str(path)).eval()
    out = {"recipe": recipe, "seed": seed, "level": level, "model": model, "spec": runner.spec.as_dict(),
           "halves": {}}
    for half in ("steering", "reporting"):
        items = runner.items[half]
        scored = runner.score(network, half)
        out["halves"][half] = {
            "forget_groups": [str(g) for g in items.forget_groups],
            "holdout_groups": [str(g) for g in items.holdout_groups],
            "conditions": {c: {"mia": {k: [float(x) for x in v] for k, v in s.mia.items()},
                               "forget_idx": list(s.forget_idx)} for c, s in scored.items()}}
    out["seconds"] = time.perf_counter() - started
    target = scores_file(worlds, recipe, seed, level, model)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(out))


# ----- the analysis: reaches of every attack's intervals from cached scores ------------------------------------------
def _sides(condition: dict, half: dict, names) -> tuple[dict, dict, list, list]:
    from lit_unlearn.verification.full_verdict import pick_scores

    mia, idx = condition["mia"], condition["forget_idx"]
    forget = pick_scores(mia, None, "forget", names)
    holdout = pick_scores(mia, None, "holdout", names)
    return forget, holdout, [half["forget_groups"][i] for i in idx], half["holdout_groups"]


def reaches(forget: dict, holdout: dict, fg: list, hg: list, spec) -> dict[str, tuple[float, float]]:
    """{attack: (pooled reach, largest per-author reach)} of the verdict's intervals (full_verdict.condition_verdict,
    the learned attack included) on one condition's raw scores."""
    from lit_unlearn.verification.full_verdict import attack_bands, condition_verdict
    from lit_unlearn.verification.learned_attack import LEARNED_INPUTS

    attacks = [a for a in ATTACKS if a == "learned" or a in forget]
    f = {k: v for k, v in forget.items() if k in attacks}
    h = {k: v for k, v in holdout.items() if k in attacks}
    learned = tuple({k: side[k] for k in LEARNED_INPUTS if k in side} for side in (forget, holdout))
    half_margins = ({a: 0.5 for a in attacks}, {a: 0.5 for a in attacks})
    verdict, _ = condition_verdict(f, h, fg, hg, attacks, half_margins, spec, learned)
    return attack_bands(verdict)


ATTACKS = ("loss", "zlib", "min_k", "min_k_plus_plus", "gradnorm", "entropy_mean", "entropy_spread", "token_rank",
           "learned")


def _resample(scores: dict, groups: list, chosen: list, tag: str) -> tuple[dict, list]:
    """The items of the chosen authors (with repeats, each copy its own author), in order."""
    by_author: dict = {}
    for i, g in enumerate(groups):
        by_author.setdefault(g, []).append(i)
    rows, names = [], []
    for j, author in enumerate(chosen):
        rows += by_author[author]
        names += [f"{tag}{j}:{author}"] * len(by_author[author])
    return {k: [v[i] for i in rows] for k, v in scores.items()}, names


def case_reaches(case: dict, spec, bootstrap: bool = False) -> dict:
    """{half: {condition: {attack: (pooled, author)}}}, or with `bootstrap` the largest of each over REPLICATES
    author-level bootstrap replicates of the half's items (both sides' authors drawn with replacement)."""
    import numpy as np

    from lit_unlearn.verification.learned_attack import LEARNED_INPUTS

    names = list(dict.fromkeys([*ATTACKS, *LEARNED_INPUTS]))
    out: dict = {}
    for half_name, half in case["halves"].items():
        out[half_name] = {}
        for c_name, condition in half["conditions"].items():
            f, h, fg, hg = _sides(condition, half, names)
            if not bootstrap:
                out[half_name][c_name] = reaches(f, h, fg, hg, spec)
                continue
            rng = np.random.default_rng(REPLICATE_SEED)
            f_authors, h_authors = list(dict.fromkeys(fg)), list(dict.fromkeys(hg))
            worst: dict = {}
            for _ in range(REPLICATES):
                fr, fgr = _resample(f, fg, list(rng.choice(f_authors, len(f_authors))), "f")
                hr, hgr = _resample(h, hg, list(rng.choice(h_authors, len(h_authors))), "h")
                for a, (p, au) in reaches(fr, hr, fgr, hgr, spec).items():
                    wp, wa = worst.get(a, (0.0, 0.0))
                    worst[a] = (max(wp, p), max(wa, au))
            out[half_name][c_name] = worst
    return out


def _round_up(x: float) -> float:
    return min(0.5, math.ceil(round(x, 9) * 100) / 100)


def margins_from(base: dict, k: float) -> dict:
    """{condition: {attack: (pooled, author)}}: k x the base's reaches, rounded up to 0.01, at most 0.5."""
    return {c: {a: (_round_up(k * p), _round_up(k * au)) for a, (p, au) in attacks.items()}
            for c, attacks in base.items()}


def judged(model: dict, margins: dict) -> tuple[bool, int, float]:
    """(every band passes, parts-without-power count, band ratio) of one half: a check whose margin reaches 0.5
    is without power and neither passes nor fails (as the verdict counts it)."""
    ratio, no_power = 0.0, 0
    for c, attacks in model.items():
        for a, (p, au) in attacks.items():
            mp, ma = margins[c][a]
            if mp >= 0.5:
                no_power += 1
                continue
            ratio = max(ratio, p / mp, au / ma if ma < 0.5 else 0.0)
    return ratio <= 1.0, no_power, ratio


def main() -> None:
    ap = options(__doc__)
    ap.add_argument("--level", default="05")
    ap.add_argument("--calibration-worlds", default="runs/tofu/worlds")
    ap.add_argument("--calibration-seeds", default="100,101,102")
    ap.add_argument("--transfer-worlds", default="runs/tofu/transfer_worlds")
    ap.add_argument("--transfer-seeds", default="6,7")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--score", nargs=5, metavar=("WORLDS", "RECIPE", "SEED", "LEVEL", "MODEL"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.score:
        worlds, recipe, seed, level, model = args.score
        score(worlds, recipe, int(seed), level, model)
        return
    level = args.level
    calibration = [(args.calibration_worlds, CALIBRATION_RECIPE, int(s)) for s in args.calibration_seeds.split(",")]
    transfer = [(args.transfer_worlds, r, int(s)) for s in args.transfer_seeds.split(",") for r in RECIPES]
    todo = [(w, r, s, m) for w, r, s in calibration for m in ("base", "retain_only")] + \
           [(w, r, s, m) for w, r, s in transfer for m in MODELS]
    missing = [t for t in todo if not scores_file(t[0], t[1], t[2], level, t[3]).is_file()]
    run_all([[sys.executable, __file__, "--score", w, r, str(s), level, m] for w, r, s, m in missing], args.jobs,
            "scoring", stop_on_failure=False)

    from lit_unlearn.verification.full_verdict import VerdictSpec

    reach = {}  # (w, r, s, model or base-kind) -> {half: {condition: {attack: (pooled, author)}}}
    for w, r, s, m in todo:
        path = scores_file(w, r, s, level, m)
        if not path.is_file():
            continue
        kinds = {"base band": False, "base bootstrap": True} if m == "base" else {m: False}
        cached = path.with_name(path.stem + "_reaches.json")  # the bootstrap's 16 verdicts a half take a while
        if cached.is_file() and cached.stat().st_mtime >= path.stat().st_mtime:
            reaches_of = json.loads(cached.read_text())
        else:
            case = json.loads(path.read_text())
            spec = VerdictSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in case["spec"].items()})
            reaches_of = {kind: case_reaches(case, spec, boot) for kind, boot in kinds.items()}
            cached.write_text(json.dumps(reaches_of))
        for kind in kinds:
            reach[(w, r, s, kind)] = reaches_of[kind]

    def outcomes(worlds_of: list, model: str, candidate: str, k: float) -> list[tuple[bool, int, float]]:
        out = []
        for w, r, s in worlds_of:
            base, mine = reach.get((w, r, s, candidate)), reach.get((w, r, s, model))
            if base is None or mine is None:
                continue
            for half in mine:
                out.append(judged(mine[half], margins_from(base[half], k)))
        return out

    chosen = {}
    lines = []
    for candidate in ("base band", "base bootstrap"):
        k_pick = None
        for k in K_GRID:
            cal = outcomes(calibration, "retain_only", candidate, k)
            if cal and all(p for p, _, _ in cal):
                k_pick = k
                break
        chosen[candidate] = k_pick
        cal = outcomes(calibration, "retain_only", candidate, k_pick or K_GRID[-1])
        lines.append(f"- **{candidate}**: k = {k_pick if k_pick else f'none up to {K_GRID[-1]}'} "
                     f"({len(cal)} calibration cases; their worst band ratio at k = 1: "
                     f"{max(x[2] for x in outcomes(calibration, 'retain_only', candidate, 1.0)):.2f}; at the chosen k, "
                     f"pooled checks without power in a case: {min(x[1] for x in cal)}-{max(x[1] for x in cal)})")

    packaged = json.loads((REPO / "lit_unlearn/verification/holdout_delta.json").read_text())["margins"][level]["best"]
    some = next(iter(reach.values()))
    conditions = list(next(iter(some.values())))
    checks = sum(len(a) for a in next(iter(some.values())).values())
    lost = sum(1 for c in conditions for m in packaged["relearning" if c.startswith("relearn") else c].values()
               if m[0] >= 0.5)  # [pooled, per author, the mode they hold for]
    lines.append(f"- packaged margins: {lost} of the {checks} pooled checks of a case without power (margin 0.5)")
    rows = ["| recipe | cases | packaged: never-saw-it pass | packaged: targets pass | "
            + " | ".join(f"{c}: never-saw-it pass | {c}: targets pass | {c}: checks without power (mean a case)"
                         for c in chosen) + " |",
            "|---|---|---|---|" + "---|---|---|" * len(chosen)]
    totals: dict = {}
    for recipe in RECIPES:
        worlds_of = [(w, r, s) for w, r, s in transfer if r == recipe]
        packaged = []
        for w, r, s in worlds_of:
            f = case_file(w, r, s, level)
            if f.is_file():
                packaged.append(json.loads(f.read_text())["cases"])
        never_pk = [c["band_ratio"] <= 1 for cases in packaged for k, c in cases.items() if k.startswith("retain")]
        target_pk = [c["band_ratio"] <= 1 for cases in packaged for k, c in cases.items() if k.startswith("target")]
        cells = [f"{sum(never_pk)}/{len(never_pk)}", f"{sum(target_pk)}/{len(target_pk)}"]
        totals.setdefault("packaged", [0, 0, 0, 0])
        for i, v in enumerate((sum(never_pk), len(never_pk), sum(target_pk), len(target_pk))):
            totals["packaged"][i] += v
        n_cases = 0
        for candidate, k in chosen.items():
            if k is None:
                cells += ["–", "–", "–"]
                continue
            never = outcomes(worlds_of, "retain_only", candidate, k)
            targets = outcomes(worlds_of, "target", candidate, k)
            n_cases = len(never)
            no_power = sum(x[1] for x in never + targets) / max(1, len(never + targets))
            cells += [f"{sum(p for p, _, _ in never)}/{len(never)}", f"{sum(p for p, _, _ in targets)}/{len(targets)}",
                      f"{no_power:.1f}"]
            t = totals.setdefault(candidate, [0, 0, 0, 0])
            for i, v in enumerate((sum(p for p, _, _ in never), len(never), sum(p for p, _, _ in targets),
                                   len(targets))):
                t[i] += v
        rows.append(f"| {recipe} | {n_cases or len(never_pk)} | " + " | ".join(cells) + " |")
    summary = ["", "Over the seven recipes (never-saw-it pass / cases; targets pass / cases):"]
    for name, (a, b, c, d) in totals.items():
        summary.append(f"- {name}: never-saw-it {a}/{b}, targets {c}/{d}")
    seconds = [json.loads(f.read_text())["seconds"] for f in (scores_file(w, r, s, level, m) for w, r, s, m in todo)
               if f.is_file()]
    head = (f"# Margins from the base model, forget{level}: calibrated on one recipe, tested on the others\n\n"
            f"> Command: `{command()}`. Each model's scoring took {min(seconds):.0f}-{max(seconds):.0f} s of one "
            "thread beside other jobs (the worlds already built). The recipes that change only the fine-tune's "
            "epochs (4, 12) share the base model of the calibration's recipe at each seed, so their margins are the "
            "same; the learning rate and the size change the base too.\n"
            "> k chosen on the calibration recipe's worlds "
            f"({args.calibration_seeds}) only: the smallest on a grid of 0.05 from 0.5 at which every never-saw-it "
            "case there passes every band. Passing: every band, power aside (a check whose margin reaches 0.5 is counted "
            "apart). The packaged margins' columns are verdict_transfer.py's cached cases.\n\n")
    publish("\n".join(lines) + "\n\n" + "\n".join(rows) + "\n" + "\n".join(summary) + "\n", args.write, head)


if __name__ == "__main__":
    main()
