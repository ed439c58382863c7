"""The OFMU paper's TOFU table as a budget curve: forget quality and model utility of each method against the
number of epochs, one `lit-unlearn bench --preset bench_tofu_ofmu_paper --epochs E` output folder per budget.

    python benchmarks/ofmu/budget_curve.py --runs 10=runs/ofmu_paper_e10 30=runs/ofmu_paper_e30 --level 01 \
        --figure docs/generated/ofmu_paper_budget_01.png --write docs/generated/ofmu_paper_budget_01.md

Each point is the bench's own: the method's point chosen on the validation world at that budget, the mean over the
test seeds with the half-width of its 95 % t-interval. FOLDER is a bench's output folder (its results.csv), a copy of
that CSV, or the bench's table as published (its results.md, e.g. docs/generated/ofmu_paper_form_tofu_01_e10.md,
where the run folder is gone). Trains nothing.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import options  # benchmarks/report.py

FQ_FLOOR = 1e-12  # the figure's lowest forget quality: the target's lies far below and would squash the rest
PAPER = {"GA": (1.88e-4, 0.55), "NPO": (0.40, 0.58), "RMU": (0.40, 0.62), "OFMU": (0.42, 0.63)}  # 7B, forget01


def read_budget(path: Path, level: str) -> dict[str, dict]:
    """method -> its row at `level` (the keys of results.csv) from a bench folder, a results CSV or a results table."""
    if path.suffix == ".md":
        rows = _published_rows(path, level)
    else:
        rows = {}
        with open(path / "results.csv" if path.is_dir() else path) as f:
            for row in csv.DictReader(f):
                if row["forget_level"] == level:
                    rows[row["method"]] = row
    if not rows:
        raise SystemExit(f"{path} has no forget{level} rows")
    return rows


def _published_rows(path: Path, level: str) -> dict[str, dict]:
    """The rows of a bench's results.md table under "## forget{level}": "mean ± ci" cells split into the CSV's value
    and ci95 keys (a cell without ± is one seed's value, ci 0)."""
    lines = path.read_text().splitlines()
    try:
        start = lines.index(f"## forget{level}")
    except ValueError:
        return {}
    rest = lines[start + 1:]
    first = next((i for i, line in enumerate(rest) if line.startswith("|")), len(rest))
    table = []
    for line in rest[first:]:  # the section's first table, up to the line that ends it
        if not line.startswith("|"):
            break
        table.append(line)
    if len(table) < 3:
        return {}
    head = [c.strip() for c in table[0].strip("|").split("|")]
    rows = {}
    for line in table[2:]:
        cells = dict(zip(head, (c.strip() for c in line.strip("|").split("|"))))
        row = {"forget_level": level, "method": cells["method"], "hyper_parameters": cells["hyper-parameters"]}
        for column in ("FQ (gold)", "MU"):
            mean, _, ci = cells[column].partition("±")
            row[column], row[f"{column} ci95"] = mean.strip(), ci.strip() or "0"
        rows[cells["method"]] = row
    return rows


def curve(runs: dict[int, Path], level: str) -> dict[str, list[tuple[int, float, float, float, float, str]]]:
    """method -> [(epochs, FQ, FQ ci95, MU, MU ci95, chosen point)] in budget order; FQ and MU are NaN where the
    chosen point diverged on every test seed (no value: an empty CSV cell; "diverged (n/N)" or "n/a" in its table)."""
    out: dict[str, list] = {}
    for epochs in sorted(runs):
        for method, row in read_budget(runs[epochs], level).items():
            out.setdefault(method, []).append((epochs, *_value(row, "FQ (gold)"), *_value(row, "MU"),
                                               row["hyper_parameters"]))
    return out


def _value(row: dict, column: str) -> tuple[float, float]:
    """(mean, ci95) of a column; (NaN, 0) where the chosen point diverged and the row has no value."""
    if row[column] in ("", "n/a") or row[column].startswith("diverged"):
        return math.nan, 0.0
    return float(row[column]), float(row[f"{column} ci95"] or 0)


def _point(hp: str) -> str:
    """A point as the bench's table writes it, from the CSV's JSON or the published table's own text."""
    import json

    from lit_unlearn.bench.results import point_text

    return point_text(json.loads(hp)) if hp.startswith("{") else hp


def table(points: dict[str, list], level: str) -> str:
    budgets = sorted({e for pts in points.values() for e, *_ in pts})
    head = "| method | " + " | ".join(f"{e} epochs: FQ / MU (point)" for e in budgets) + " | paper (7B, forget01) |"
    lines = [head, "|" + "---|" * (len(budgets) + 2)]
    for method, pts in points.items():
        by = {e: (fq, fqc, mu, muc, hp) for e, fq, fqc, mu, muc, hp in pts}
        cells = []
        for e in budgets:
            if e not in by:
                cells.append("–")
                continue
            fq, fqc, mu, muc, hp = by[e]
            if math.isnan(fq) and math.isnan(mu):
                cells.append(f"diverged ({_point(hp)})")
                continue
            cells.append(f"{fq:.2g} ± {fqc:.2g} / {mu:.3f} ± {muc:.3f} ({_point(hp)})")
        paper = PAPER.get(method)
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {f'{paper[0]:.3g} / {paper[1]}' if paper and level == '01' else '–'} |")
    return "\n".join(lines)


def figure(points: dict[str, list], path: Path, level: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_fq, ax_mu) = plt.subplots(1, 2, figsize=(10, 4))
    for method, pts in points.items():
        pts = [p for p in pts if not math.isnan(p[1])]  # a diverged budget has no point to draw
        if not pts:
            continue
        epochs = [p[0] for p in pts]
        ax_fq.errorbar(epochs, [max(p[1], FQ_FLOOR) for p in pts], marker="o", label=method)
        ax_mu.errorbar(epochs, [p[3] for p in pts], yerr=[p[4] for p in pts], marker="o", capsize=3, label=method)
    ax_fq.set(xscale="log", yscale="log", xlabel="epochs over the forget set",
              ylabel=f"forget quality (gold; < {FQ_FLOOR:g} drawn at it)", title=f"forget{level}: forget quality")
    ax_mu.set(xscale="log", xlabel="epochs over the forget set", ylabel="model utility", title=f"forget{level}: utility")
    budgets = sorted({p[0] for pts in points.values() for p in pts})
    for ax in (ax_fq, ax_mu):
        ax.set_xticks(budgets, [str(b) for b in budgets])
        ax.minorticks_off()
    ax_mu.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--runs", nargs="+", required=True,
                        help="EPOCHS=FOLDER, one per budget (a bench folder, its results.csv or its results.md)")
    parser.add_argument("--level", default="01")
    parser.add_argument("--figure", type=Path)
    args = parser.parse_args()
    runs = {}
    for item in args.runs:
        epochs, _, folder = item.partition("=")
        if not folder:
            raise SystemExit(f"--runs takes EPOCHS=FOLDER, got {item!r}")
        runs[int(epochs)] = Path(folder)
    points = curve(runs, args.level)
    text = table(points, args.level)
    print(text)
    if args.figure:
        figure(points, args.figure, args.level)
    if args.write:
        command = " ".join(["python benchmarks/ofmu/budget_curve.py", "--runs", *args.runs, "--level", args.level,
                            *(["--figure", str(args.figure)] if args.figure else []), "--write", str(args.write)])
        args.write.write_text(f"# The OFMU paper's TOFU table against the budget (forget{args.level})\n\nGenerated by "
                              f"`{command}` from the benches' results (each point chosen on validation world 100 "
                              f"at its budget; mean over test worlds 0-2 ± 95 % half-width).\n\n{text}\n"
                              + (f"\n![budget curve]({args.figure.name})\n\nA forget quality below {FQ_FLOOR:g} is "
                                 f"drawn at {FQ_FLOOR:g}.\n" if args.figure else "")
                              + ("\n\"diverged\": the point chosen on validation diverged (a NaN loss) on every test "
                                 "seed, so that budget has no value and no point in the figure.\n"
                                 if " diverged (" in text else ""))


if __name__ == "__main__":
    main()
