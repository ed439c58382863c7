"""docs/bench/results.md: which methods forget, keep utility and resist the attacks at each forget level, read from
each level's bench table (its results.csv) and nothing else.

    python benchmarks/bench/summary.py --level 01=runs/bench_tofu_e10 --level 05=runs/bench_tofu_l05 \
        [--level 10=runs/bench_tofu_l10] [--write docs/bench/results.md]

Per method and level, over the test seeds:
- passes before any attack: the verdict of the model as it is passes in every seed (mean `verified` = 1);
- forgotten: the full verdict (before any attack, after relearning at every rate and step count, at 4 bits) passes
  in every seed (mean `forgotten` = 1);
- keeps utility: mean model utility ≥ the bench's floor (0.9) × the target's mean.
"""

from __future__ import annotations

import sys
import csv
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import options, publish  # benchmarks/report.py

ATTACKS = ("band ratio", "relearn band ratio", "int4 band ratio", "unread band ratio")


def _num(x: str) -> float | None:
    return None if x in ("", "None") else float(x)


def level_rows(folder: Path, level: str, floor: float) -> tuple[list[dict], dict]:
    rows = [r for r in csv.DictReader((folder / "results.csv").open()) if r["forget_level"] == level]
    if not rows:
        raise SystemExit(f"{folder}/results.csv has no forget{level} rows")
    target = next(r for r in rows if r["method"] == "Target")
    mu_t = _num(target["MU"])
    out = []
    for r in rows:
        if r["method"] == "Target":
            continue
        mu = _num(r["MU"])
        before = _num(r["verified"]) == 1.0
        forgotten = _num(r.get("forgotten", "")) == 1.0
        keeps = mu is not None and mu >= floor * mu_t
        attacks = [_num(r.get(a, "")) for a in ATTACKS]
        out.append({"method": r["method"], "point": r["hyper_parameters"], "seeds": int(r["seeds"]),
                    "verified": _num(r["verified"]), "forgotten_share": _num(r.get("forgotten", "")),
                    "mu_ratio": mu / mu_t, "attacks": attacks, "before": before, "forgotten": forgotten,
                    "keeps": keeps, "fails_on": r.get("fails on", "")})
    return out, {"MU": mu_t, "seeds": int(target["seeds"]), "band": _num(target["band ratio"]),
                 "full": _num(target.get("full band ratio", ""))}


def render(levels: dict[str, Path], floor: float) -> str:
    lines = ["Written by `python benchmarks/bench/summary.py " +
             " ".join(f"--level {lv}={p}" for lv, p in levels.items()) + " --write docs/bench/results.md` from each "
             "level's bench table; nothing else is read.", "",
             "# Bench results: who forgets for real, per forget level", "",
             "- **passes before any attack**: the verdict of the model as it is (every attack, each with its "
             "calibrated margin; forget vs holdout authors, the reporting half) passes in every test seed;",
             "- **forgotten**: the full verdict passes in every test seed: before any attack, after relearning (on "
             "other forget authors of the half; lr 1e-5 to 1e-3, 10 and 100 steps, the worst counts) and at 4 bits;",
             f"- **keeps utility**: mean model utility ≥ {floor:g} × the target's;",
             "- **fails on**: the attack, scope and condition farthest over its margin, and in how many seeds;",
             "- **unread**: the full verdict's band ratio on the attacks the method's objective does not read.", "",
             "Band ratios are means over seeds (≤ 1 passes; each level's heading gives the target's).", ""]
    for level, folder in levels.items():
        rows, target = level_rows(folder, level, floor)
        full = "n/a" if target["full"] is None else f"{target['full']:.3g}"
        lines += [f"## forget{level} ({target['seeds']} test seeds; table: {folder.name}, "
                  f"[tofu_forget{level}_results.md](tofu_forget{level}_results.md))", "",
                  f"The target (before unlearning): band ratio {target['band']:.3g} before any attack, {full} in the "
                  f"full verdict; model utility {target['MU']:.3g}.", "",
                  "| method | chosen point | passes before any attack (share of seeds) | forgotten (share of seeds) | "
                  "band ratio | relearn | 4-bit | unread | MU / target's | fails on | forgotten and keeps utility |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            f = [f"{a:.3g}" if a is not None else "n/a" for a in r["attacks"]]
            share = "n/a" if r["forgotten_share"] is None else f"{r['forgotten_share']:.2g}"
            lines.append(f"| {r['method']} | {r['point']} | {r['verified']:.2g} | {share} | {' | '.join(f)} | "
                         f"{r['mu_ratio']:.3f} | {r['fails_on']} | "
                         f"{'yes' if r['forgotten'] and r['keeps'] else 'no'} |")
        before = [r["method"] for r in rows if r["before"] and r["keeps"]]
        real = [r["method"] for r in rows if r["forgotten"] and r["keeps"]]
        lines += ["", f"At forget{level}: passes before any attack and keeps utility: {', '.join(before) or 'none'}; "
                  f"forgotten (the full verdict) and keeps utility: {', '.join(real) or 'none'}.", ""]
    return "\n".join(lines)


def main() -> None:
    ap = options(__doc__, full=True)
    ap.add_argument("--level", action="append", required=True, help="LEVEL=BENCH_OUT_FOLDER")
    ap.add_argument("--floor", type=float, default=0.9)
    args = ap.parse_args()
    levels = dict(item.split("=", 1) for item in args.level)
    text = render({lv.zfill(2): Path(p) for lv, p in levels.items()}, args.floor)
    publish(text + "\n", args.write)


if __name__ == "__main__":
    main()
