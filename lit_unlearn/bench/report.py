"""The bench's outputs: results.{md,csv} (mean ± std over seeds per method and forget level), grid.csv (every
validation run and the chosen point), and figure.png (TOFU: forget quality against model utility per method;
MUSE: VerbMem on D_f against KnowMem on D_r)."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

from lit_unlearn.bench.spec import BenchSpec

__all__ = ["write_outputs", "aggregate"]


def _mean_std(values: list[float | None]) -> tuple[float | None, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)


def aggregate(rows: list[dict], world: str, order: list[str], columns: list[str]) -> list[dict]:
    """One row per (level, method) of the test world: mean and std of each metric over seeds."""
    out = []
    levels = sorted({r["level"] for r in rows if r["world"] == world})
    for level in levels:
        for method in ["Target", *order]:
            mine = [r for r in rows if r["world"] == world and r["level"] == level and r["method"] == method
                    and r.get("phase", "test") == "test"]
            if not mine:
                continue
            agg = {"level": level, "method": method, "seeds": len(mine), "point": mine[0]["point"]}
            for col in columns:
                agg[col], agg[col + " std"] = _mean_std([r.get(col) for r in mine])
            out.append(agg)
    return out


def _cell(mean, std, col) -> str:
    if mean is None:
        return "n/a"
    fmt = ".2e" if col == "FQ" and abs(mean) < 1e-2 else ".3g"
    return f"{mean:{fmt}}" + (f" ± {std:{fmt}}" if std else "")


def write_outputs(spec: BenchSpec, bench, out: Path, rows: list[dict], chosen: dict, test_world: str,
                  val_world: str, order: list[str]) -> Path:
    columns = list(bench.columns)
    table = aggregate(rows, test_world, order, columns)
    with (out / "results.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["forget_level", "method", "seeds", "hyper_parameters"] +
                   [c for col in columns for c in (col, col + " std")])
        for r in table:
            w.writerow([r["level"], r["method"], r["seeds"], json.dumps(r["point"])] +
                       [r[c] for col in columns for c in (col, col + " std")])
    with (out / "grid.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "hyper_parameters", "chosen", *columns])
        for r in rows:
            if r["world"] == val_world and r.get("phase") == "validation":
                pick = chosen.get(r["method"], ({},))[0] == r["point"] and r["method"] != "Target"
                w.writerow([r["method"], json.dumps(r["point"]), pick, *[r.get(c) for c in columns]])
    lines = [f"# Bench ({bench.name.upper()}): every method, one setting ({spec.steps} steps, batch "
             f"{spec.batch_size}, seeds {spec.seeds})", "",
             "Mean ± std over seeds. Hyper-parameters chosen on the validation world: "
             f"{bench.criterion.format(floor=spec.utility_floor)}. Target = before unlearning.", ""]
    for level in sorted({r["level"] for r in table}):
        lines += [f"## {bench.level_title(level)}", "",
                  "| method | hyper-parameters | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
        for r in table:
            if r["level"] == level:
                point = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in r["point"].items())
                lines.append(f"| {r['method']} | {point or '-'} | " +
                             " | ".join(_cell(r[c], r[c + ' std'], c) for c in columns) + " |")
        lines.append("")
    lines += ["Chosen on validation:", ""] + [f"- {m}: {p} ({why})" for m, (p, why) in chosen.items()]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    _figure(table, out / "figure.png", *bench.figure, bench.level_title)
    return out / "results.md"


def _figure(table: list[dict], path: Path, x: str, y: str, log_y: bool, level_title) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted({r["level"] for r in table})
    fig, axes = plt.subplots(1, len(levels), figsize=(4.2 * len(levels), 3.8), squeeze=False)
    methods = sorted({r["method"] for r in table})
    markers = dict(zip(methods, "osD^v<>pPX*h"))
    for ax, level in zip(axes[0], levels):
        for r in table:
            if r["level"] != level or r[x] is None or r[y] is None:
                continue
            ax.errorbar(r[x], max(r[y], 1e-12) if log_y else r[y], xerr=r[x + " std"] or None,
                        yerr=None if log_y else (r[y + " std"] or None), marker=markers[r["method"]],
                        label=r["method"], linestyle="none")
        if log_y:
            ax.set_yscale("log")
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.set_title(level_title(level))
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
