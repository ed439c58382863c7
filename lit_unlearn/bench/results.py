"""The bench's outputs: results.{md,csv} (mean over seeds per method and forget level, ± the half-width of its 95 %
t-interval over seeds in the table; the CSV also has the std), grid.csv (every
validation run, its level and whether it was chosen), figure.png (the test runs per method and level, TOFU:
forget quality against model utility; MUSE: VerbMem on D_f against KnowMem on D_r), one Pareto figure per level
(`pareto_<level>.png`: every grid point of the validation world and every seed of the test world, the chosen
point marked), and all of it in TensorBoard (OUT/tensorboard: the figures and the table as text)."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

from lit_unlearn.bench.spec import BenchSpec

__all__ = ["write_outputs", "aggregate", "chosen_point", "shown_columns", "table_columns", "table_cell", "point_text"]


def _mean_std(values: list[float | None]) -> tuple[float | None, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)


def t_half_width(std: float | None, n: int, level: float = 0.95) -> float | None:
    """Half-width of the t-interval for a mean of n seeds (None for one seed: no interval)."""
    if std is None or n < 2:
        return None
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2, n - 1) * std / n ** 0.5)


def aggregate(rows: list[dict], order: list[str], columns: list[str], chosen: dict | None = None) -> list[dict]:
    """One row per (level, method) of the test runs: mean and std of each metric over seeds. With `chosen`
    ({(method, validation level): (point, why)}), only a method's runs at its chosen point: an OUT that two configs
    share (e.g. a grid extended in a second config) holds test runs of one method at several points."""
    out = []
    tests = [r for r in rows if r.get("phase", "test") == "test"]
    for level in sorted({r["level"] for r in tests}):
        for method in ["Target", *order]:
            point = None if chosen is None or method == "Target" else chosen_point(chosen, method, level)
            mine = [r for r in tests if r["level"] == level and r["method"] == method and
                    (point is None or r["point"] == point)]
            if not mine:
                continue
            agg = {"level": level, "method": method, "seeds": len(mine), "point": mine[0]["point"]}
            agg["diverged"] = sum(1 for r in mine if r.get("diverged"))  # seeds whose loss became NaN: no values
            for col in columns:
                present = [r.get(col) for r in mine if r.get(col) is not None]
                if any(isinstance(v, str) for v in present):  # a text column (what fails the verdict): each value
                    counts = {v: present.count(v) for v in dict.fromkeys(present)}  # and in how many seeds
                    agg[col] = "; ".join(f"{v} ({n}/{len(present)})" for v, n in counts.items())
                    agg[col + " std"] = agg[col + " ci95"] = None
                    continue
                agg[col], agg[col + " std"] = _mean_std(present)
                agg[col + " ci95"] = t_half_width(agg[col + " std"], len(present))
            out.append(agg)
    return out


def table_cell(row: dict, col: str) -> str:
    """One cell of results.md: "mean ± half-width"; "diverged (N/N)" where every seed that ran diverged (NaN loss), so
    the reader is not left with a bare "n/a"."""
    mean, half_width = row[col], row[col + " ci95"]
    if mean is None:
        n = row.get("diverged", 0)
        return f"diverged ({n}/{n})" if n and n == row["seeds"] else "n/a"  # else a seed that ran lacks the column
    if isinstance(mean, str):
        return mean
    fmt = ".2e" if col.startswith("FQ") and abs(mean) < 1e-2 else ".3g"
    return f"{mean:{fmt}}" + (f" ± {half_width:{fmt}}" if half_width else "")


def point_text(point: dict) -> str:
    """A grid point as the tables write it: "lr=0.001, beta=0.1", or "-" for none."""
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items()) or "-"


def shown_columns(bench, rows: list[dict]) -> list[str]:
    """The bench's columns and the wall time per run (unlearning, the evaluation and the audit); an optional column
    (a part of the verdict a bench may not run) only where some run has it."""
    optional = getattr(bench, "optional", ())
    return [c for c in [*bench.columns, "seconds"] if c not in optional or any(r.get(c) is not None for r in rows)]


def table_columns(bench, columns: list[str], table: list[dict]) -> list[str]:
    """The columns of results.md: the benchmark's reader's columns (all shown ones where it names none) that some row
    has a value for; the first verification's give way to the full verdict's where the audit ran."""
    wanted = bench.table_columns or columns
    filled = [c for c in wanted if c in columns and any(r.get(c) is not None for r in table)]
    if "decision" in filled:
        filled = [c for c in filled if c not in bench.superseded_by_audit]
    return filled


def write_outputs(spec: BenchSpec, bench, out: Path, rows: list[dict], chosen: dict, val_world: str,
                  order: list[str]) -> Path:
    """chosen: {(method, validation level): (point, why)}."""
    columns = shown_columns(bench, rows)
    table = aggregate(rows, order, columns, chosen)
    with (out / "results.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["forget_level", "method", "seeds", "hyper_parameters"] +
                   [c for col in columns for c in (col, col + " std", col + " ci95")])
        for r in table:
            w.writerow([r["level"], r["method"], r["seeds"], json.dumps(r["point"])] +
                       [r[c] for col in columns for c in (col, col + " std", col + " ci95")])
    diverged = ["diverged"] if any(r.get("diverged") for r in rows) else []  # a point whose loss became NaN/inf
    with (out / "grid.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "level", "hyper_parameters", "chosen", *columns, *diverged])
        for r in rows:
            if r["world"] == val_world and r.get("phase") == "validation":
                pick = chosen_point(chosen, r["method"], r["level"]) == r["point"] and r["method"] != "Target"
                w.writerow([r["method"], r["level"], json.dumps(r["point"]), pick,
                            *[r.get(c) for c in [*columns, *diverged]]])
    # The budget as the runs had it: epochs over each level's forget set win over the step count (spec.py).
    budget = f"{spec.epochs:g} epochs over each forget set" if spec.epochs else f"{spec.steps} steps"
    lines = [f"# Bench ({bench.name.upper()}): every method, one setting ({budget}, batch "
             f"{spec.batch_size}, seeds {spec.seeds})", "",
             "Mean over seeds ± the half-width of its 95 % t-interval. results.csv beside this table has every "
             "column, with the std. Hyper-parameters chosen on the validation world: "
             f"{bench.criterion_for(spec.selection).format(floor=spec.utility_floor)}. Target = before unlearning.", ""]
    shown = table_columns(bench, columns, table)
    for level in sorted({r["level"] for r in table}):
        lines += [f"## {bench.level_title(level)}", "",
                  "| method | hyper-parameters | " + " | ".join(shown) + " |", "|---|---|" + "---|" * len(shown)]
        for r in table:
            if r["level"] == level:
                lines.append(f"| {r['method']} | {point_text(r['point'])} | " +
                             " | ".join(table_cell(r, c) for c in shown) + " |")
        lines.append("")
    lines += ["Terms:", ""] + [f"- **{c}**: {bench.terms[c]}" for c in shown if c in bench.terms]
    if any(r["diverged"] == r["seeds"] for r in table):
        lines.append("- **diverged (N/N)**: the chosen point's loss became NaN or inf on every one of the N test "
                     "seeds, so the row has no values")
    lines += [f"- {r['method']} ({bench.level_title(r['level'])}) diverged on {r['diverged']}/{r['seeds']} test seeds: "
              "its means are over the others" for r in table if 0 < r["diverged"] < r["seeds"]]
    lines += [""]
    lines += ["Chosen on validation:", ""] + [f"- {m} ({bench.level_title(lv)}): {point_text(p)} ({why})"
                                             for (m, lv), (p, why) in chosen.items()]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    # a grid-only bench (forget_levels: [] beside a validation_level) has no test runs to draw
    figures = {"results": _figure(table, out / "figure.png", *bench.figure, bench.level_title)} if table else {}
    for level in sorted({r["level"] for r in rows}):
        figures[f"pareto/{level}"] = _pareto(rows, level, chosen, val_world, out / f"pareto_{level}.png",
                                             *bench.figure, bench.level_title)
    _to_tensorboard(out / "tensorboard", "\n".join(lines), figures)
    return out / "results.md"


def _pyplot():
    from lit_unlearn.reporting.plotting import pyplot

    return pyplot()


def _figure(table: list[dict], path: Path, x: str, y: str, log_y: bool, level_title):
    plt = _pyplot()
    levels = sorted({r["level"] for r in table})
    fig, axes = plt.subplots(1, len(levels), figsize=(4.2 * len(levels), 3.8), squeeze=False)
    methods = sorted({r["method"] for r in table})
    markers = {m: "osD^v<>pPX*h"[i % 12] for i, m in enumerate(methods)}
    palette = plt.get_cmap("tab20").colors  # with the markers: distinct pairs for up to 60 methods
    colours = {m: palette[i % len(palette)] for i, m in enumerate(methods)}
    for ax, level in zip(axes[0], levels):
        for r in table:
            if r["level"] != level or r[x] is None or r[y] is None:
                continue
            ax.errorbar(r[x], max(r[y], 1e-12) if log_y else r[y], xerr=r[x + " std"] or None,
                        yerr=None if log_y else (r[y + " std"] or None), marker=markers[r["method"]],
                        color=colours[r["method"]], label=r["method"], linestyle="none")
        if log_y:
            ax.set_yscale("log")
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.set_title(level_title(level))
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return fig


def _pareto(rows: list[dict], level: str, chosen: dict, val_world: str, path: Path, x: str, y: str, log_y: bool,
            level_title):
    """Every validation grid point (hollow) and every test seed (filled) of one level; the chosen points ringed."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    mine = [r for r in rows if r["level"] == level and r.get(x) is not None and r.get(y) is not None]
    methods = sorted({r["method"] for r in mine})
    palette = plt.get_cmap("tab20").colors  # 20 colours: the packaged bench has 11 rows (methods and the target)
    colours = {m: palette[i % len(palette)] for i, m in enumerate(methods)}
    for method in methods:
        for phase, filled in (("validation", False), ("test", True)):
            pts = [r for r in mine if r["method"] == method and r.get("phase", "test") == phase]
            if not pts:
                continue
            xs, ys = [r[x] for r in pts], [max(r[y], 1e-12) if log_y else r[y] for r in pts]
            ax.scatter(xs, ys, s=36, marker="o" if method != "Target" else "s",
                       facecolors=colours[method] if filled else "none", edgecolors=colours[method],
                       label=f"{method} ({'test seeds' if filled else 'grid'})")
            if phase == "validation":
                pick = chosen_point(chosen, method, level)
                for r in pts:
                    if pick is not None and r["point"] == pick and method != "Target":
                        ax.scatter([r[x]], [max(r[y], 1e-12) if log_y else r[y]], s=160, marker="*",
                                   facecolors="none", edgecolors="black", linewidths=1.2)
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(f"{level_title(level)}: every grid point (hollow, validation world) and seed (filled, test); "
                 "★ chosen", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="best", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return fig


def chosen_point(chosen: dict, method: str, level: str) -> dict | None:
    """The point chosen for `method` at `level` (or at the one validation level that chose for every level)."""
    if (method, level) in chosen:
        return chosen[(method, level)][0]
    return next((p for (m, _), (p, _) in chosen.items() if m == method), None)


def _to_tensorboard(folder: Path, markdown: str, figures: dict) -> None:
    from lit_unlearn.reporting.tensorboard import write_scalars

    write_scalars(folder, {}, text={"bench/results": markdown},
                  figures={f"bench/{name}": fig for name, fig in figures.items()})
    plt = _pyplot()
    for fig in figures.values():
        plt.close(fig)
