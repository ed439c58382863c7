"""The full verdict's power at TOFU's forget levels: per part (before any attack, relearning, 4-bit), how many checks
(attack × condition) have power, the detectable AUC (the smallest true AUC the most sensitive check with power
catches 80 % of the time) and the attacks without power, for the packaged calibrated margins ("best" scoring) on the
reporting half's item structure, with each attack's author share from the calibration's worlds.

    python benchmarks/verification/verdict_power.py --write docs/generated/verdict_power.md

Simulated (lit_unlearn.verification.verdict_power): no model is run. The structure is the verdict's own: TOFU's
authors of 20 items, split into halves by lit_unlearn.verification.steering_halves and, for relearning, measured on
the authors relearning_probe.relearn_split leaves out.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import options, publish  # benchmarks/report.py

AUTHORS = {"01": 2, "05": 10, "10": 20}  # TOFU's forget (and holdout) authors per level, 20 items each
PART_KEYS = {"before": "none", "relearning": "relearning", "quantisation": "int4"}


def structure(level: str, part: str) -> tuple[list, list]:
    """(forget groups, holdout groups) of the reporting half the part measures."""
    from lit_unlearn.verification.relearning_probe import relearn_split
    from lit_unlearn.verification.steering_halves import split_halves

    groups = [i // 20 for i in range(20 * AUTHORS[level])]
    f_half = split_halves(groups, 0).reporting
    fg, hg = [f"f{groups[i]}" for i in f_half], [f"h{groups[i]}" for i in f_half]  # holdout: as many authors
    if part == "relearning":
        _, measured = relearn_split(fg, 0.5)
        fg = [fg[i] for i in measured]
    return fg, hg


def level_rows(level: str) -> list[dict]:
    from lit_unlearn.verification.holdout_calibration import calibration
    from lit_unlearn.verification.verdict_power import check_power

    cal = calibration()
    shares = {a: v["author_share"] for a, v in cal["summary"][level]["power"].items()}
    rows = []
    for part, key in PART_KEYS.items():
        fg, hg = structure(level, part)
        checks = {a: check_power(fg, hg, (m[0], m[1]), shares.get(a, shares["loss"]))
                  for a, m in cal["margins"][level]["best"][key].items()}
        powered = {a: p for a, p in checks.items() if p.has_power}
        best = min(((p.detectable_auc, a) for a, p in powered.items() if p.detectable_auc is not None), default=None)
        # The limit the item structure sets: margins no wider than sampling alone needs (zero margins are widened to
        # what a simulated never-trained model passes 90 % of the time), i.e. no shift between forget and holdout
        # authors and no inflation; no calibration of this test on these authors and items could detect less.
        floor = {a: check_power(fg, hg, (0.0, 0.0), shares.get(a, shares["loss"])) for a in checks}
        limit = min(((p.detectable_auc, a) for a, p in floor.items() if p.detectable_auc is not None), default=None)
        rows.append({"level": level, "part": part, "forget": f"{len(set(fg))} x {len(fg) // len(set(fg))}",
                     "holdout": f"{len(set(hg))} x {len(hg) // len(set(hg))}", "powered": len(powered),
                     "checks": len(checks), "best": best, "limit": limit,
                     "rates": {a: p.rate for a, p in checks.items()},
                     "weak": sorted(a for a in checks if a not in powered)})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| level | part | forget authors x items | holdout authors x items | attacks with power | detectable AUC "
             "(attack) | limit of these items (attack) | without power (rate at AUC 0.8) |",
             "|---|---|---|---|---|---|---|---|"]

    def auc(pair):
        return "none" if pair is None else f"{pair[0]:.2f} ({pair[1]})"

    for r in rows:
        weak = ", ".join(f"{a} ({r['rates'][a]:.2f})" for a in r["weak"]) or "-"
        lines.append(f"| forget{r['level']} | {r['part']} | {r['forget']} | {r['holdout']} | {r['powered']} of "
                     f"{r['checks']} | {auc(r['best'])} | {auc(r['limit'])} | {weak} |")
    return "\n".join(lines)


def main() -> None:
    ap = options(__doc__)
    ap.add_argument("--levels", default="01,05,10")
    args = ap.parse_args()
    rows = [r for level in args.levels.split(",") for r in level_rows(level)]
    text = table(rows)
    head = ("# The full verdict's power at TOFU's levels\n\n> What the verdict could have caught, per level and "
            "part, with the packaged margins.\n> A check has power when it fails a true AUC of 0.8 at least half "
            "the time (simulated) and its margin is below 0.5.\n> The detectable AUC: the smallest true AUC the "
            "most sensitive check with power fails 80 % of the time.\n> The limit of these items: the same with "
            "margins from sampling alone (what a simulated never-trained model passes 90 % of the time, no author "
            "shift, no inflation): in this simulation, no calibration of this test on these authors and items detects less.\n\n"
            "Command: `python benchmarks/verification/verdict_power.py --write docs/generated/verdict_power.md`. "
            "Relearning is measured on the forget authors it did not train on; its margins are the worst of its "
            "eight rates and step counts.\n\n")
    publish(text + "\n", args.write, head)


if __name__ == "__main__":
    main()
