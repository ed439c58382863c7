"""Calibrate the verdict's fourth part, the paraphrase (each forget item asked by TOFU's paraphrased question, the
holdout items as they are), on models that never saw the forget authors, and measure on worlds the margins never saw
how often never-trained models and targets pass it.

    python benchmarks/verification/calibrate_paraphrase.py [--worlds runs/tofu/worlds]
        [--calibration-seeds 100,...,115] [--test-seeds 0,...,5] [--levels 01,05,10] [--jobs 2] [--store]
        [--write docs/generated/holdout_calibration_paraphrase.md]

The rule of the other conditions' margins (benchmarks/verification/calibrate_holdout_delta.py), on this part alone:
per level, scoring mode and attack the largest reach from 0.5 of the calibration worlds' retain-only models'
intervals (pooled, and per author; both halves of each world), times the smallest inflation on a grid of 0.05 at
which each calibration world, judged with the margins of the others, passes this part in at least 90 % of halves,
rounded up to 0.01, at most 0.5; per attack the tighter of relative and raw scoring. Relative scores subtract the
base model's score of the same paraphrased question. The paraphrased questions shift the forget side's scores for
any model (the holdout items have no paraphrases in TOFU), which is why the margins of the model as it is do not
serve: the table shows how often they fail never-trained models here.

A case is one model of one world and level, scored as it is with the paraphrased questions (both halves, both
modes), cached in the world's verdict_cases/ as paraphrase_{model}_{level}.json. `--store` puts the
margins into lit_unlearn/verification/holdout_delta.json (margins[level][mode]["paraphrase"], and a "paraphrase" entry
with the rule, seeds and rates); only then can the verdict's `paraphrase` option run with calibrated margins. The
other conditions' cases are not rescored here: a full verdict with the fourth part fails a never-trained model at
most as often as the other parts do plus this part's rate (a union bound).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from process_pool import run_all  # benchmarks/process_pool.py  # noqa: E402
from report import command, options, publish  # benchmarks/report.py  # noqa: E402
from verification.calibrate_holdout_delta import (  # noqa: E402
    MODELS,
    build,
    calibration_options,
    inflation_for,
    load_case,
    margins_from,
    pass_rates,
    power_rows,
    power_table,
    score_case,
)

KIND = "paraphrase"
CONDITIONS = ["paraphrase"]
RULE = ("per level, scoring mode and attack: the largest reach from 0.5 of the retain-only models' intervals under "
        "the paraphrased questions (pooled, and per author) over calibration worlds x halves, times the smallest "
        "inflation on a grid of 0.05 at which each calibration world, judged with the margins of the others, passes "
        "the paraphrase part in at least 90 % of halves, rounded up to 0.01, at most 0.5; per attack the tighter of "
        "relative and raw scoring")


def only(cases: list[dict], condition: str) -> list[dict]:
    """The cases with one condition kept (each part's pass rate and inflation are then that part's alone)."""
    return [{**c, "halves": {h: {**v, "conditions": {condition: v["conditions"][condition]}}
                             for h, v in c["halves"].items()}} for c in cases]


def as_paraphrase(cases: list[dict]) -> list[dict]:
    """The paraphrase cases under the name of the model as it is: to judge them with that condition's margins."""
    return [{**c, "halves": {h: {**v, "conditions": {"none": v["conditions"]["paraphrase"]}}
                             for h, v in c["halves"].items()}} for c in cases]


def level_report(cal: list[dict], tst: dict[str, list[dict]], packaged: dict | None, sims: int) -> dict:
    """Margins, the inflation's curve, pass rates on the test worlds and power, for one level."""
    cal = only(cal, "paraphrase")
    inflation, curve = inflation_for(cal, "")
    margins = margins_from(cal, "", inflation)
    rates = {m: pass_rates(only(tst[m], "paraphrase"), "best", margins["best"], margins["best"])["paraphrase"]
             for m in MODELS}
    out = {"margins": {mode: {"paraphrase": margins[mode]["paraphrase"]} for mode in margins},
           "inflation": {"chosen": inflation, "leave_one_out": curve}, "rates": rates}
    if packaged is not None:  # the packaged margins of the model as it is, on the same cases (the audit's probe)
        out["with_none_margins"] = {m: pass_rates(as_paraphrase(tst[m]), "best", packaged, packaged)["before"]
                                    for m in MODELS}
    first = tst["retain_only"][0]["halves"]["reporting"]
    attacks = list(first["conditions"]["paraphrase"]["relative"]["pooled"])
    out["power"] = power_table(cal, margins, first["forget_groups"], first["holdout_groups"],
                               attacks, sims, condition="paraphrase")
    return out


def tables(level: str, r: dict, packaged: dict | None) -> list[str]:
    fmt = lambda x: f"{x[0]}/{x[1]}"  # noqa: E731
    m = r["margins"]
    lines = [f"## forget{level}", "",
             f"Inflation: **{r['inflation']['chosen']:.2f}** (leave one calibration world out, the paraphrase part; "
             "passing halves: " + ", ".join(f"{k:.2f}: {p}/{t}" for k, p, t in r["inflation"]["leave_one_out"])
             + ").", "", "Margins, pooled / per author, by attack (the verdict's: per attack the tighter mode); beside "
             "them the margins of the model as it is (condition none, packaged):", "",
             "| attack | relative | raw | the verdict's | none (packaged) |", "|---|---|---|---|---|"]
    for a, best in m["best"]["paraphrase"].items():
        rel, raw = m["relative"]["paraphrase"][a], m["raw"]["paraphrase"][a]
        none = "n/a" if packaged is None else f"{packaged['none'][a][0]:.2f} / {packaged['none'][a][1]:.2f}"
        lines.append(f"| {a} | {rel[0]:.2f} / {rel[1]:.2f} | {raw[0]:.2f} / {raw[1]:.2f} | {best[0]:.2f} / "
                     f"{best[1]:.2f} ({best[2]}) | {none} |")
    lines += ["", "Pass rates on the test worlds ((world, half) cases passing / cases), the paraphrase part with its "
              "calibrated margins (goal: never-trained ≥ 90 %, targets 0 %):", "", "| model | paraphrase |",
              "|---|---|"] + [f"| {mdl} | {fmt(x)} |" for mdl, x in r["rates"].items()]
    if "with_none_margins" in r:
        lines += ["", "The same cases judged with the packaged margins of the model as it is (what the audit's probe "
                  "did):", "", "| model | paraphrase, with the margins of condition none |", "|---|---|"]
        lines += [f"| {mdl} | {fmt(x)} |" for mdl, x in r["with_none_margins"].items()]
    lines += ["", "Power of the paraphrase part (its margins, the reporting half's items and authors): the smallest "
              "true AUC one attack's check fails in ≥ 80 % of simulated data sets, and its pass rate at AUC 0.5.", ""]
    return lines + power_rows(r["power"]) + [""]


def store(result: dict, path: Path) -> None:
    """Merge the paraphrase margins into the packaged calibration, leaving every other condition as it is."""
    calibration = json.loads(path.read_text())
    for level, r in result["levels"].items():
        for mode, conds in r["margins"].items():
            calibration["margins"][level][mode]["paraphrase"] = conds["paraphrase"]
    calibration["paraphrase"] = {k: v for k, v in result.items() if k != "levels"}
    calibration["paraphrase"]["summary"] = {lv: {"inflation": r["inflation"]["chosen"], "rates": r["rates"],
                                                 "power": r["power"]} for lv, r in result["levels"].items()}
    path.write_text(json.dumps(calibration, indent=1) + "\n")


def main() -> None:
    ap = calibration_options(options(__doc__))
    ap.add_argument("--store", action="store_true", help="merge the margins into the packaged calibration")
    args = ap.parse_args()
    if args.case:
        worlds, seed, level, model = args.case
        score_case(worlds, int(seed), level, model, CONDITIONS, KIND, paraphrase=True)
        return
    calibration = [int(s) for s in args.calibration_seeds.split(",")]
    test = [int(s) for s in args.test_seeds.split(",")]
    levels = args.levels.split(",")
    todo = [(s, lv, m) for lv in levels for s in calibration + test for m in MODELS
            if (m == "retain_only" or s in test) and load_case(args.worlds, s, lv, m, KIND, paraphrase=True) is None]
    build(args.worlds, sorted({s for s, _, _ in todo}), levels, args.jobs)
    run_all([[sys.executable, __file__, "--case", args.worlds, str(s), lv, m] for s, lv, m in todo], args.jobs,
            "case")
    from lit_unlearn.verification.holdout_calibration import calibration as packaged_calibration

    result = {"calibration_seeds": calibration, "test_seeds": test, "command": command(), "rule": RULE, "levels": {}}
    lines = []
    for level in levels:
        cal = [load_case(args.worlds, s, level, "retain_only", KIND, paraphrase=True) for s in calibration]
        tst = {m: [load_case(args.worlds, s, level, m, KIND, paraphrase=True) for s in test] for m in MODELS}
        packaged = packaged_calibration().get("margins", {}).get(level, {}).get("best")
        result["levels"][level] = level_report(cal, tst, packaged, args.sims)
        lines += tables(level, result["levels"][level], packaged)
    head = (f"# Calibration of the verdict's paraphrase part\n\nGenerated by `{command()}`. Calibration worlds: seeds "
            f"{calibration}; test worlds: seeds {test}. Rule: {RULE}. A case is one world and one half (steering or "
            "reporting) of the forget and holdout items.\n\n")
    publish("\n".join(lines), args.write, head)
    if args.store:
        store(result, REPO / "lit_unlearn/verification/holdout_delta.json")
        print("stored the paraphrase margins in lit_unlearn/verification/holdout_delta.json")


if __name__ == "__main__":
    main()
