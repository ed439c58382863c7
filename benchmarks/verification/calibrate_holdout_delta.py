"""Calibrate the full verdict's margins on models that never saw the forget authors, and measure, on worlds the margins
never saw, how often never-trained models and targets pass, how much power the verdict has, and what margins a model's
own holdout items would give.

    python benchmarks/verification/calibrate_holdout_delta.py [--worlds runs/tofu/worlds] [--calibration-seeds 100,...,115]
        [--test-seeds 0,...,5] [--levels 01,05,10] [--jobs 2] [--write]

1. Builds (or reuses) every seed's TOFU world with the retain-only model of every level.
2. Per level and world, in processes of one thread (`--jobs` at a time), a "case" per (model, half): the retain-only
   model (calibration and test worlds) and the target (test worlds) scored on the half exactly as the verdict scores
   it (lit_unlearn.verification.verdict_runner.VerdictRunner): as it is, relearned on the half's first forget
   authors at every rate and step count (the others measured), and at 4 bits; each condition judged relative to the
   world's base model and raw. A case keeps, per condition, mode and attack, how far the pooled interval and each
   author's interval reach from 0.5, and the margins the model's own holdout items give (two author sets against
   each other). Cases are cached in each world's folder (verdict_cases/).
3. Margins per level, mode, condition and attack: the largest reach of the calibration worlds' retain-only cases,
   pooled and per author, rounded up to 0.01.
4. On the test worlds: the share of cases where the retain-only model passes (goal ≥ 90 %) and the target passes
   (goal 0 %): the full verdict and each part, with calibrated margins and with the model's own.
5. Power: per level and attack, the smallest true AUC at which the verdict (calibrated margins, relative scoring, the
   reporting half's item counts and authors) fails at least 80 % of the time, simulated with author effects of the
   size the retain-only models show.
`--write` stores the margins and every case in lit_unlearn/verification/holdout_delta.json (the packaged default)
and the tables in docs/generated/holdout_calibration.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from lit_unlearn.verification.holdout_calibration import margin_key  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import command, options  # benchmarks/report.py
from process_pool import run_all  # benchmarks/process_pool.py

MODELS = ("retain_only", "target")
CASE_VERSION = 1


def build(worlds: str, seeds: list[int], levels: list[str], jobs: int) -> None:
    """Each seed's world in its own process (one thread each), `jobs` at a time."""
    code = ("import sys; from lit_unlearn.worlds.tofu_world import prepare_tofu_world as p; "
            "p(sys.argv[1], seed=int(sys.argv[2]), levels=sys.argv[3].split(','), log=lambda *a: None)")
    run_all([[sys.executable, "-c", code, worlds, str(seed), ",".join(levels)] for seed in seeds], jobs, "world")


def case_path(worlds: str, seed: int, level: str, model: str, kind: str = "") -> Path:
    """A case's file; `kind` names a calibration of other conditions (e.g. "paraphrase"), kept apart."""
    from lit_unlearn.worlds.tofu_world import world_folder

    return world_folder(worlds, seed) / "verdict_cases" / f"{kind + '_' if kind else ''}{model}_{level}.json"


def spec_identity(**changes) -> dict:
    """What a case was scored under (as JSON gives it back: tuples become lists)."""
    from lit_unlearn.verification.full_verdict import VerdictSpec

    return json.loads(json.dumps({"version": CASE_VERSION, "spec": VerdictSpec(**changes).as_dict()}))


def score_case(worlds: str, seed: int, level: str, model: str, conditions: list[str] | None = None,
               kind: str = "", **spec) -> None:
    """Score one model of one world and level on both halves, every condition (or `conditions`, under a VerdictSpec
    with `spec` changed), both modes; write its case file."""
    import torch

    torch.set_num_threads(1)
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.models import CausalLM
    from lit_unlearn.verification.full_verdict import attack_bands, pick_scores, self_margins
    from lit_unlearn.verification.learned_attack import LEARNED_INPUTS
    from lit_unlearn.verification.verdict_runner import VerdictRunner
    from lit_unlearn.worlds.tofu_world import TofuWorld, TofuWorldRecipe, world_folder

    from lit_unlearn.verification.full_verdict import VerdictSpec

    world = TofuWorld(world_folder(worlds, seed), seed, TofuWorldRecipe())
    splits = TofuSource(str(world.data), level).eval_splits()
    runner = VerdictRunner(load_tokenizer(str(world.tokenizer)), splits["forget"], splits["holdout"], level,
                           spec=VerdictSpec(**spec), base=str(world.base), margins=(0.5, 0.5))
    path = world.retain_only(level) if model == "retain_only" else world.target
    network = CausalLM(name_or_path=str(path)).eval()
    out = {**spec_identity(**spec), "seed": seed, "level": level, "model": model, "halves": {}}
    for half in ("steering", "reporting"):
        scored = runner.score(network, half, conditions)
        items = runner.items[half]
        row = {"forget_groups": [str(g) for g in items.forget_groups],
               "holdout_groups": [str(g) for g in items.holdout_groups], "conditions": {}}
        for mode in ("relative", "raw"):
            verdict = runner.judge(scored, half, mode=mode, power=False)  # margins need the reaches only
            for condition, v in verdict.verdicts.items():
                entry = row["conditions"].setdefault(condition, {})
                authors = {a: {str(author): va.intervals[a].deviation() for author, va in v.authors.items()}
                           for a in v.pooled.intervals}
                entry[mode] = {"pooled": {a: iv.deviation() for a, iv in v.pooled.intervals.items()},
                               "authors": authors, "auc": {a: iv.auc for a, iv in v.pooled.intervals.items()},
                               "bands": attack_bands(v)}
                if condition in ("none", "paraphrase"):  # per-item scores: the power simulation's author effects
                    s = scored[condition]
                    base = None if mode != "relative" else (s.base or runner.base_scores(half))
                    entry[mode]["items"] = {
                        "forget": {a: [x - y for x, y in zip(s.mia[f"forget_{a}"], base[f"forget_{a}"])]
                                   if base else list(s.mia[f"forget_{a}"]) for a in runner.attacks if a != "learned"},
                        "holdout": pick_scores(s.mia, base, "holdout", [a for a in runner.attacks if a != "learned"])}
            if mode == "relative" and len(set(items.holdout_groups)) >= 4:
                for condition, s in scored.items():
                    names = list(dict.fromkeys([*runner.attacks, *LEARNED_INPUTS]))
                    h = pick_scores(s.mia, runner.base_scores(half), "holdout", names)
                    pooled, author = self_margins(h, items.holdout_groups, runner.attacks, runner.spec)
                    row["conditions"][condition]["relative"]["self_margins"] = {"pooled": pooled, "author": author}
        out["halves"][half] = row
    target = case_path(worlds, seed, level, model, kind)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(out))


def load_case(worlds: str, seed: int, level: str, model: str, kind: str = "", **spec) -> dict | None:
    path = case_path(worlds, seed, level, model, kind)
    if not path.is_file():
        return None
    case = json.loads(path.read_text())
    ident = spec_identity(**spec)
    return case if case.get("version") == ident["version"] and case.get("spec", ident["spec"]) == ident["spec"] \
        else None


def _round_up(x: float) -> float:
    return min(0.5, math.ceil(round(x, 9) * 100) / 100)


def margins_from(cases: list[dict], level: str, inflation: float = 1.0) -> dict:
    """{mode: {condition or "relearning": {attack: [pooled, author]}}}: the largest reach over the cases (both halves
    each; every relearning condition into one), times `inflation`, rounded up to 0.01, at most 0.5; "best" takes per
    condition and attack the tighter mode."""
    out: dict = {}
    for case in cases:
        for half in case["halves"].values():
            for condition, modes in half["conditions"].items():
                for mode, entry in modes.items():
                    if mode not in ("relative", "raw"):
                        continue
                    slot = out.setdefault(mode, {}).setdefault(margin_key(condition), {})
                    for attack, (pooled, author) in entry["bands"].items():
                        old = slot.get(attack, [0.0, 0.0])
                        slot[attack] = [max(old[0], pooled), max(old[1], author)]
    from lit_unlearn.verification.holdout_calibration import best_modes

    k = inflation
    margins = {m: {c: {a: [_round_up(k * p), _round_up(k * w)] for a, (p, w) in att.items()}
                   for c, att in conds.items()} for m, conds in out.items()}
    margins["best"] = best_modes(margins["relative"], margins["raw"])
    return margins


def leave_one_out(cases: list[dict], level: str, inflation: float, mode: str = "best") -> tuple[int, int]:
    """(halves passing the full verdict, halves) when each calibration world is judged with margins from the others
    (times `inflation`): how often a world the margins never saw passes, estimated on the calibration worlds."""
    passes = total = 0
    for i, case in enumerate(cases):
        m = margins_from(cases[:i] + cases[i + 1:], level, inflation)
        for half in case["halves"].values():
            passes += case_ratios(half, mode, m[mode], m["best"])["full"] <= 1.0
            total += 1
    return passes, total


INFLATIONS = [round(1 + 0.05 * i, 2) for i in range(21)]  # 1.00 ... 2.00


def inflation_for(cases: list[dict], level: str, goal: float = 0.9) -> tuple[float, list]:
    """The smallest common inflation of the largest reaches at which the calibration worlds, each left out in turn,
    pass the full verdict at least `goal` of the time ("best" scoring), and the curve (inflation, passes, total).
    Every attack and condition is one more way for a never-trained model to fail: the largest reach of each alone
    holds each alone, not all of them at once."""
    curve = []
    for k in INFLATIONS:
        passes, total = leave_one_out(cases, level, k)
        curve.append((k, passes, total))
        if passes >= goal * total:
            return k, curve
    return INFLATIONS[-1], curve


def part_of(condition: str) -> str:
    from lit_unlearn.verification.full_verdict import part_of as part

    return part(condition)


def band_ratio(entry: dict, margins: dict, attacks=None) -> float:
    """A condition's band ratio under margins {attack: [pooled, author]}."""
    ratios = []
    for a, reach in entry["pooled"].items():
        if attacks is not None and a not in attacks:
            continue
        ratios.append(reach / margins[a][0])
        ratios += [r / margins[a][1] for r in entry["authors"][a].values()]
    return max(ratios)


def best_entry(modes: dict, chosen: dict) -> dict:
    """A condition's reaches with each attack taken in its chosen mode ({attack: [pooled, author, mode]})."""
    return {"pooled": {a: modes[m[2]]["pooled"][a] for a, m in chosen.items()},
            "authors": {a: modes[m[2]]["authors"][a] for a, m in chosen.items()}}


def case_ratios(half: dict, mode: str, margins: dict | None, best: dict | None = None) -> dict[str, float]:
    """Per part, the band ratio of one half of one case (margins None: the model's own; mode "best": each attack in
    the mode `best` chose for it)."""
    out: dict[str, float] = {}
    for condition, modes in half["conditions"].items():
        entry = best_entry(modes, best[margin_key(condition)]) if mode == "best" else modes[mode]
        if margins is None:
            own = entry.get("self_margins")
            if own is None:
                return {}
            m = {a: [own["pooled"][a], own["author"][a]] for a in own["pooled"]}
        else:
            m = margins[margin_key(condition)]
        r = band_ratio(entry, m)
        part = part_of(condition)
        out[part] = max(out.get(part, 0.0), r)
    out["full"] = max(out.values())
    return out


def pass_rates(cases: list[dict], mode: str, margins: dict | None, best: dict | None = None) -> dict[str, list[int]]:
    """{part: [passes, cases]} over the (case, half) pairs."""
    out: dict[str, list[int]] = {}
    for case in cases:
        for half in case["halves"].values():
            for part, r in case_ratios(half, mode, margins, best).items():
                slot = out.setdefault(part, [0, 0])
                slot[0] += r <= 1.0
                slot[1] += 1
    return out


def author_share(cases: list[dict], attack: str, mode: str = "relative", condition: str = "none") -> float:
    """The share of an attack's per-item variance (the model as it is) that lies between authors
    (lit_unlearn.verification.verdict_power.author_share), averaged over the cases' sides and halves."""
    from lit_unlearn.verification.verdict_power import author_share as share_of

    shares = []
    for case in cases:
        for half in case["halves"].values():
            entry = half["conditions"][condition][mode]
            for side, groups in (("forget", half["forget_groups"]), ("holdout", half["holdout_groups"])):
                values = entry["items"][side].get(attack)
                share = None if values is None else share_of(values, groups)
                if share is not None:
                    shares.append(share)
    return float(sum(shares) / len(shares)) if shares else 0.0


def power_table(cases: list[dict], margins: dict, fg: list, hg: list, attacks: list[str], sims: int,
                seed: int = 0, condition: str = "none") -> dict:
    """Per attack, before any attack on the weights: the smallest true AUC the verdict fails 80 % of the time
    (lit_unlearn.verification.verdict_power, to 0.01), the rate at AUC 0.8 and the pass rate at AUC 0.5; learned uses
    the author share of the loss (its own inputs' structure)."""
    from lit_unlearn.verification.verdict_power import check_power, fail_rates

    out = {}
    for attack in attacks:
        pooled, author, mode = margins["best"][condition][attack]
        share = author_share(cases, attack if attack != "learned" else "loss", mode, condition)
        p = check_power(fg, hg, (pooled, author), share, sims=sims, seed=seed)
        null_pass = 1 - float(fail_rates([0.5], fg, hg, (pooled, author), share, sims=sims, seed=seed)[0])
        out[attack] = {"author_share": share, "auc_80": p.detectable_auc, "rate_at_08": p.rate,
                       "has_power": p.has_power, "null_pass": null_pass, "mode": mode}
    return out


def calibration_options(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options every calibration on the TOFU worlds shares: where the worlds are, which seeds calibrate and
    which test, the levels, processes side by side, power simulations, and one case to score (internal)."""
    ap.add_argument("--worlds", default="runs/tofu/worlds")
    ap.add_argument("--calibration-seeds", default=",".join(str(s) for s in range(100, 116)))
    ap.add_argument("--test-seeds", default="0,1,2,3,4,5")
    ap.add_argument("--levels", default="01,05,10")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--sims", type=int, default=100, help="simulated data sets per power evaluation")
    ap.add_argument("--case", nargs=4, metavar=("WORLDS", "SEED", "LEVEL", "MODEL"), help=argparse.SUPPRESS)
    return ap


def main() -> None:
    ap = calibration_options(options(__doc__, write=False))
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if args.case:
        worlds, seed, level, model = args.case
        score_case(worlds, int(seed), level, model)
        return
    calibration = [int(s) for s in args.calibration_seeds.split(",")]
    test = [int(s) for s in args.test_seeds.split(",")]
    levels = args.levels.split(",")
    todo = [(s, lv, m) for lv in levels for s in calibration + test for m in MODELS
            if (m == "retain_only" or s in test) and load_case(args.worlds, s, lv, m) is None]
    build(args.worlds, sorted({s for s, _, _ in todo}), levels, args.jobs)  # the worlds of the cases to score
    run_all([[sys.executable, __file__, "--case", args.worlds, str(s), lv, m] for s, lv, m in todo], args.jobs,
             "case")
    write(args, calibration, test, levels)


def write(args, calibration: list[int], test: list[int], levels: list[str]) -> None:
    from lit_unlearn.verification.full_verdict import PARTS

    command_line = command()
    result = {"version": 2, "margins": {}, "levels": {}, "calibration_seeds": calibration, "test_seeds": test,
              "command": command_line,
              "rule": "per level, scoring mode, condition and attack: the largest reach from 0.5 of the retain-only "
                      "models' intervals (pooled, and per author) over calibration worlds x halves, times one "
                      "inflation per level (the smallest on a grid of 0.05 at which each calibration world, judged "
                      "with the margins of the others, passes the full verdict in at least 90 % of halves), rounded "
                      "up to 0.01, at most 0.5; the verdict's scoring takes per condition and attack the mode "
                      "(relative to the base model, or raw) whose margins are tighter"}
    lines = []
    for level in levels:
        cal = [load_case(args.worlds, s, level, "retain_only") for s in calibration]
        tst = {m: [load_case(args.worlds, s, level, m) for s in test] for m in MODELS}
        inflation, curve = inflation_for(cal, level)
        margins = margins_from(cal, level, inflation)
        result["margins"][level] = margins
        result.setdefault("inflation", {})[level] = {"chosen": inflation, "leave_one_out": curve}
        rates = {(m, mode, kind): pass_rates(tst[m], mode, margins[mode] if kind == "calibrated" else None,
                                             margins["best"])
                 for m in MODELS for mode in ("best", "relative", "raw") for kind in ("calibrated", "self")
                 if kind == "calibrated" or mode == "relative"}
        first = tst["retain_only"][0]["halves"]["reporting"]
        attacks = list(first["conditions"]["none"]["relative"]["pooled"])
        power = power_table(cal, margins, first["forget_groups"], first["holdout_groups"], attacks, args.sims)
        result["levels"][level] = {"rates": {f"{m}/{mode}/{kind}": r for (m, mode, kind), r in rates.items()},
                                   "power": power,
                                   "calibration_cases": [{"seed": c["seed"], "halves": c["halves"]} for c in cal],
                                   "test_cases": {m: [{"seed": c["seed"], "halves": c["halves"]} for c in tst[m]]
                                                  for m in MODELS}}
        lines += _level_tables(level, margins, rates, power, attacks, cal, PARTS, inflation, curve)
    text = "\n".join(lines)
    print(text)
    if args.write:
        slim = {k: v for k, v in result.items() if k != "levels"}
        slim["summary"] = {lv: {"rates": v["rates"], "power": v["power"]} for lv, v in result["levels"].items()}
        (REPO / "lit_unlearn/verification/holdout_delta.json").write_text(json.dumps(slim, indent=1) + "\n")
        out = REPO / "docs/generated/holdout_calibration.md"
        out.write_text(f"# Calibration of the full reference-free verdict\n\nGenerated by `{command_line}`.\n"
                       f"Calibration worlds: seeds {calibration}; test worlds: seeds {test}. Rule: {result['rule']}. "
                       "A case is one world and one half (steering or reporting) of the forget and holdout items. "
                       "Conditions: the model as it is (none), relearned (AdamW, batch 8, on the half's first forget "
                       "authors, the others measured; lr 1e-5, 1e-4, 5e-4, 1e-3 at 10 and 100 steps) and 4-bit "
                       "round-to-nearest (int4). Relative: every score minus the world's base model's on the same "
                       "item; raw: the model alone.\n\n" + text + "\n")
        print(f"wrote {out.relative_to(REPO)} and lit_unlearn/verification/holdout_delta.json")


def _level_tables(level: str, margins: dict, rates: dict, power: dict, attacks: list[str], cal: list[dict],
                  parts, inflation: float, curve: list) -> list[str]:
    fmt = lambda r: f"{r[0]}/{r[1]}" if r else "n/a"  # noqa: E731
    lines = [f"## forget{level}", "",
             f"Inflation of the largest calibration reaches: **{inflation:.2f}** (leave one calibration world out, the "
             "full verdict with \"best\" scoring; passing halves: " +
             ", ".join(f"{k:.2f}: {p}/{t}" for k, p, t in curve) + "; the smallest reaching 90 % is taken).", "",
             "Margins of the model as it is (condition none), pooled / per author, by attack: with every score "
             "relative to the base model, raw, and the verdict's (per attack the tighter of the two, chosen on these "
             "calibration worlds). The classic five are the first verification's attacks; its single δ was the "
             "largest over them (0.33 / 0.46, 0.33 / 0.48, 0.30 / 0.47 at forget01, 05, 10, raw).", "",
             "| attack | relative | raw | the verdict's |", "|---|---|---|---|"]
    for a in attacks:
        rel, raw, best = margins["relative"]["none"][a], margins["raw"]["none"][a], margins["best"]["none"][a]
        lines.append(f"| {a} | {rel[0]:.2f} / {rel[1]:.2f} | {raw[0]:.2f} / {raw[1]:.2f} | {best[0]:.2f} / "
                     f"{best[1]:.2f} ({best[2]}) |")
    classic = ["loss", "zlib", "min_k", "min_k_plus_plus", "gradnorm"]
    cells = [" / ".join(f"{max(margins[m]['none'][a][i] for a in classic):.2f}" for i in (0, 1))
             for m in ("relative", "raw", "best")]
    lines.append(f"| largest over the classic five | {cells[0]} | {cells[1]} | {cells[2]} |")
    lines += ["", "The verdict's largest margin per condition (pooled / per author; the attack that sets it):", "",
              "| condition | pooled | per author |", "|---|---|---|"]
    for condition, att in margins["best"].items():
        p = max(att.items(), key=lambda kv: kv[1][0])
        w = max(att.items(), key=lambda kv: kv[1][1])
        lines.append(f"| {condition} | {p[1][0]:.2f} ({p[0]}) | {w[1][1]:.2f} ({w[0]}) |")
    lines += ["", "Pass rates on the test worlds ((world, half) cases passing / cases): the full verdict and each "
              "part, with the calibrated margins of each scoring, and with the margins each model's own holdout items "
              "give (self, relative scoring; two author sets of its holdout half against each other; needs 4 holdout "
              "authors a half).", "",
              "| model | scoring | margins | full | " + " | ".join(parts) + " |", "|---|---|---|---|" + "---|" * len(parts)]
    for (m, mode, kind), r in rates.items():
        lines.append(f"| {m} | {mode} | {kind} | {fmt(r.get('full'))} | " + " | ".join(fmt(r.get(p)) for p in parts)
                     + " |")
    lines += ["", "Power (the verdict's scoring and margins, the model as it is, the reporting half's items and "
              "authors): the smallest true AUC at which the verdict of that attack alone fails in ≥ 80 % of simulated "
              "data sets (author effects of the share of variance the calibration models show), and its pass rate at "
              "AUC 0.5.", ""]
    return lines + power_rows(power) + [""]


def power_rows(power: dict) -> list[str]:
    """The power table (power_table's output): per attack its scoring, author share, detectable AUC, null pass."""
    lines = ["| attack | scoring | author share of variance | AUC failing ≥ 80 % | passes at 0.5 |",
             "|---|---|---|---|---|"]
    for a, p in power.items():
        auc80 = "never (< 80 % even at 1.0)" if p["auc_80"] is None else f"{p['auc_80']:.2f}"
        lines.append(f"| {a} | {p['mode']} | {p['author_share']:.2f} | {auc80} | {p['null_pass']:.2f} |")
    return lines


if __name__ == "__main__":
    main()
