"""Where each method stands against the robust-forgetting target at every level, from the bench's own test rows:
pass the full verdict (before any attack, after relearning, at 4 bits), keep model utility >= 0.95 x the target's,
use <= 50 % of the retain-only fine-tune's compute.

    python benchmarks/bench/robustness_levels.py --level 01=runs/bench_v3_l01 --level 05=runs/bench_v3_l05 \
        --level 10=runs/bench_v3_l10 --figure docs/bench/robustness_levels.png --write docs/bench/robustness_levels.md

Reads runs.jsonl (test phase only: the settings were chosen on the validation world); trains nothing. Utility is
taken relative to the target of the same world. A method's compute share is the bench's `compute share` column
(token passes against the retain-only fine-tune), filled for the stages that count it.
"""

from __future__ import annotations

import sys
import json
import statistics
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import options  # benchmarks/report.py

UTILITY_FLOOR, COMPUTE_CEILING = 0.95, 0.5


def test_phase_rows(folder: Path) -> list[dict]:
    rows = [json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("phase") == "test"]
    target = {r["seed"]: r["MU"] for r in rows if r["method"] == "Target"}
    for r in rows:
        r["MU ratio"] = r["MU"] / target[r["seed"]] if target.get(r["seed"]) else None
    return [r for r in rows if r["method"] != "Target"]


def meets_all(row: dict) -> bool:
    """The full verdict passed, utility kept, compute within the ceiling (where the row counts compute)."""
    share = row.get("compute share")
    return (bool(row.get("forgotten")) and (row["MU ratio"] or 0) >= UTILITY_FLOOR
            and (share is None or share <= COMPUTE_CEILING))


def summarise(rows: list[dict]) -> list[dict]:
    out = []
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        ratios = [r["MU ratio"] for r in mine if r["MU ratio"] is not None]
        shares = [r["compute share"] for r in mine if r.get("compute share") is not None]
        passes = [bool(r.get("forgotten")) for r in mine]
        out.append({"method": method, "seeds": len(mine), "passed": sum(passes),
                    "full band ratio": statistics.mean(r["full band ratio"] for r in mine),
                    "before": statistics.mean(r["band ratio"] for r in mine),
                    "relearn": statistics.mean(r["relearn band ratio"] for r in mine),
                    "int4": statistics.mean(r["int4 band ratio"] for r in mine),
                    "MU ratio": statistics.mean(ratios) if ratios else None,
                    "compute share": statistics.mean(shares) if shares else None,
                    "meets all": sum(meets_all(r) for r in mine)})
    return out


def table(level: str, summary: list[dict]) -> str:
    f = lambda x, d=3: "–" if x is None else f"{x:.{d}f}"  # noqa: E731
    lines = [f"## forget{level}", "",
             "| method | seeds passing the full verdict | full band ratio | before attack | after relearning | 4-bit | "
             "MU / target's | compute share | seeds meeting all three |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {s['method']} | {s['passed']}/{s['seeds']} | {f(s['full band ratio'])} | {f(s['before'])} | "
              f"{f(s['relearn'])} | {f(s['int4'])} | {f(s['MU ratio'])} | {f(s['compute share'], 2)} | "
              f"{s['meets all']}/{s['seeds']} |" for s in summary]
    return "\n".join(lines)


def figure(levels: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(levels), figsize=(5.2 * len(levels), 4.4), squeeze=False)
    methods = list(dict.fromkeys(r["method"] for rows in levels.values() for r in rows))
    palette = plt.get_cmap("tab20").colors
    markers = "osD^v<>pPX*h"
    for ax, (level, rows) in zip(axes[0], levels.items()):
        ax.fill_between([UTILITY_FLOOR, 1.3], 0.5, 1.0, color="green", alpha=0.12)  # where the target lies
        ax.axhline(1.0, color="green", lw=1, ls="--")
        ax.axvline(UTILITY_FLOOR, color="green", lw=1, ls="--")
        for i, method in enumerate(methods):
            mine = [r for r in rows if r["method"] == method and r["MU ratio"] is not None]
            if mine:
                ax.scatter([r["MU ratio"] for r in mine], [r["full band ratio"] for r in mine], s=30,
                           color=palette[i % len(palette)], marker=markers[i % len(markers)], label=method)
        ax.set(xlabel="model utility / the target's", ylabel="full band ratio (worst of before, relearning, 4-bit)",
               title=f"forget{level}: test seeds; target zone shaded", xlim=(-0.05, 1.3), ylim=(0.5, None))
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=6, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--level", action="append", required=True, help="LEVEL=BENCH_FOLDER")
    parser.add_argument("--figure", type=Path)
    args = parser.parse_args()
    levels = {}
    for item in args.level:
        level, _, folder = item.partition("=")
        levels[level] = test_phase_rows(Path(folder))
    text = "\n\n".join(table(level, summarise(rows)) for level, rows in levels.items())
    print(text)
    if args.figure:
        figure(levels, args.figure)
    if args.write:
        command = " ".join(["python benchmarks/bench/robustness_levels.py", *(f"--level {x}" for x in args.level),
                            *(["--figure", str(args.figure)] if args.figure else []), "--write", str(args.write)])
        args.write.write_text(
            "# Robust forgetting at every level: the full verdict, utility and compute, from the bench's test rows\n\n"
            f"Generated by `{command}`. Target: pass the full verdict (band ratio ≤ 1 before any attack, after "
            f"relearning and at 4 bits), model utility ≥ {UTILITY_FLOOR} × the target's, compute ≤ "
            f"{COMPUTE_CEILING:.0%} of the retain-only fine-tune's (counted where a stage counts it; – where not). "
            "Means over the test seeds.\n\n" + text + "\n"
            + (f"\n![robustness at every level]({args.figure.name})\n" if args.figure else ""))


if __name__ == "__main__":
    main()
