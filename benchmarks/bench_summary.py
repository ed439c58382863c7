"""docs/bench/results.md: which methods forget, keep utility and resist the attacks at each forget level, read from
each level's bench table (its results.csv) and nothing else.

    python benchmarks/bench_summary.py --level 01=runs/bench_tofu_e10 --level 05=runs/bench_tofu_l05 \
        [--level 10=runs/bench_tofu_l10] [--write docs/bench/results.md]

Per method and level, over the test seeds:
- forgets: the reference-free verification passes in every seed (mean `verified` = 1);
- keeps utility: mean model utility ≥ the bench's floor (0.9) × the target's mean;
- resists the attacks: after relearning, 4-bit quantisation and paraphrasing, the mean band ratio stays ≤ 1 (inside
  the calibrated band), i.e. `robust` in every seed.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

ATTACKS = ("relearn band ratio", "int4 band ratio", "paraphrase band ratio")


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
        forgets = _num(r["verified"]) == 1.0
        keeps = mu is not None and mu >= floor * mu_t
        attacks = [_num(r.get(a, "")) for a in ATTACKS]
        resists = forgets and _num(r.get("robust", "")) == 1.0  # robust in every seed: every attack within the band
        out.append({"method": r["method"], "point": r["hyper_parameters"], "seeds": int(r["seeds"]),
                    "verified": _num(r["verified"]), "band": _num(r["band ratio"]), "mu_ratio": mu / mu_t,
                    "attacks": attacks, "forgets": forgets, "keeps": keeps, "resists": resists})
    return out, {"MU": mu_t, "seeds": int(target["seeds"]), "band": _num(target["band ratio"])}


def render(levels: dict[str, Path], floor: float) -> str:
    lines = ["Written by `python benchmarks/bench_summary.py " +
             " ".join(f"--level {lv}={p}" for lv, p in levels.items()) + " --write docs/bench/results.md` from each "
             "level's bench table; nothing else is read.", "",
             "# Bench results: who forgets, keeps utility and resists the attacks, per forget level", "",
             "- **forgets**: the reference-free verification (forget vs holdout authors, calibrated band) passes in "
             "every test seed;",
             f"- **keeps utility**: mean model utility ≥ {floor:g} × the target's;",
             "- **resists**: forgets, and after relearning (10 AdamW steps on other forget authors), 4-bit "
             "quantisation and paraphrased questions every seed stays inside the band (band ratios ≤ 1).", "",
             "Band ratios are means over seeds (≤ 1 passes; each level's heading gives the target's).", ""]
    for level, folder in levels.items():
        rows, target = level_rows(folder, level, floor)
        lines += [f"## forget{level} ({target['seeds']} test seeds; table: {folder.name}, "
                  f"[tofu_forget{level}_results.md](tofu_forget{level}_results.md))", "",
                  f"The target (before unlearning): band ratio {target['band']:.3g}, model utility {target['MU']:.3g}.",
                  "",
                  "| method | chosen point | verified (share of seeds) | band ratio | MU / target's | relearn | "
                  "4-bit | paraphrase | forgets | keeps utility | resists |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            f = [f"{a:.3g}" if a is not None else "n/a" for a in r["attacks"]]
            lines.append(f"| {r['method']} | {r['point']} | {r['verified']:.2g} | {r['band']:.3g} | "
                         f"{r['mu_ratio']:.3f} | {' | '.join(f)} | {'yes' if r['forgets'] else 'no'} | "
                         f"{'yes' if r['keeps'] else 'no'} | {'yes' if r['resists'] else 'no'} |")
        both = [r["method"] for r in rows if r["forgets"] and r["keeps"]]
        robust = [r["method"] for r in rows if r["resists"] and r["keeps"]]
        lines += ["", f"At forget{level}: forgets and keeps utility: {', '.join(both) or 'none'}; also resists "
                  f"every attack: {', '.join(robust) or 'none'}.", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--level", action="append", required=True, help="LEVEL=BENCH_OUT_FOLDER")
    ap.add_argument("--floor", type=float, default=0.9)
    ap.add_argument("--write", type=Path)
    args = ap.parse_args()
    levels = dict(item.split("=", 1) for item in args.level)
    text = render({lv.zfill(2): Path(p) for lv, p in levels.items()}, args.floor)
    print(text)
    if args.write:
        args.write.write_text(text + "\n")


if __name__ == "__main__":
    main()
