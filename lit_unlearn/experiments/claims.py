"""The CV experiment suite: reruns the HAMU paper's comparisons and checks its claims on our own numbers.

Studies (each optional, driven by one YAML file such as configs/claims_digits.yaml):
- trajectories: ΔL_f and −ΔL_r per epoch for every method at each ρ (ρ-mixture forget sets);
- hardness:     Pearson correlation between HAMU's mean κ̄ (clipped g_r·g_f, over steps) and ρ;
- quota:        HAMU's ΔL_f after a fixed budget against Q/η, with the R² of a linear fit;
- stopping:     a long HAMU run with κ₂ stopping in monitor-only mode: where −ΔL_r peaks vs where it would fire;
- ablation:     per-layer quota (‖g_r⁽ⁱ⁾‖‖g_f⁽ⁱ⁾‖ allocation) vs uniform quota vs one global constraint.
Everything lands in `out_dir`: one CSV per study, summary.json / summary.md, and PNG figures.
"""

from __future__ import annotations

import copy
import csv
import json
import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.stats
import yaml

from lit_unlearn.experiments.runs import RunResult, train_target, unlearning_run

__all__ = ["STUDIES", "load_config", "run_suite"]

STUDIES = ("trajectories", "hardness", "quota", "stopping", "ablation")
EPOCH_COLUMNS = {
    "delta_forget_loss": "unlearn/delta_forget_loss",
    "neg_delta_retain_loss": "unlearn/neg_delta_retain_loss",
    "forget_acc": "val/forget_acc",
    "retain_acc": "val/retain_acc",
    "test_acc": "val/test_acc",
}
REQUIRED = ("network", "dataset", "target", "forget", "data", "epochs", "methods")


def load_config(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"experiment config {path} not found (packaged ones: `lit-unlearn configs`)")
    cfg = yaml.safe_load(path.read_text()) or {}
    missing = [k for k in REQUIRED if k not in cfg]
    if missing:
        raise ValueError(f"{path}: missing top-level keys {missing}")
    unknown = [s for s in cfg.get("studies", STUDIES) if s not in STUDIES]
    if unknown:
        raise ValueError(f"{path}: unknown studies {unknown}; choose from {STUDIES}")
    if "hardness" in cfg.get("studies", STUDIES) and "HAMU" not in cfg["methods"]:
        raise ValueError(f"{path}: the hardness study needs a method named HAMU")
    return cfg


class _Suite:
    def __init__(self, cfg: dict[str, Any], out_dir: Path, log=print) -> None:
        self.cfg, self.out, self.log = cfg, out_dir, log
        self.out.mkdir(parents=True, exist_ok=True)
        target = cfg["target"]
        ckpt = Path(target.get("ckpt") or self.out / "target.ckpt")
        started = time.perf_counter()
        self.target = train_target(cfg["network"], cfg["dataset"], ckpt, epochs=int(target.get("epochs", 4)),
                                   lr=float(target.get("lr", 1e-3)), batch_size=int(target.get("batch_size", 128)))
        self.log(f"target: {self.target} ({time.perf_counter() - started:.0f} s)")
        self.seeds = list(cfg.get("seeds", [0]))
        self.summary: dict[str, Any] = {"config": cfg}
        self.trajectory_runs: list[tuple[str, float, int, RunResult]] = []

    def run(self, label: str, method: str, rho: float, seed: int, epochs: int, init_overrides: dict | None = None,
            kappa_stopping: dict | None = None) -> RunResult:
        spec = copy.deepcopy(self.cfg["methods"][method])
        spec.setdefault("init_args", {}).update(init_overrides or {})
        forget, data = self.cfg["forget"], self.cfg["data"]
        started = time.perf_counter()
        result = unlearning_run(
            label, spec, self.cfg["network"], self.cfg["dataset"], self.target,
            forget_class=int(forget.get("forget_class", 0)), rho=float(rho), forget_size=forget.get("size"),
            epochs=epochs, retain_batch_size=int(data["retain_batch_size"]),
            forget_batch_size=int(data["forget_batch_size"]), seed=seed, kappa_stopping=kappa_stopping,
            root=self.out)
        diverged = result.info.get("diverged_step")
        note = f" DIVERGED at step {diverged}, curve kept up to its last evaluation" if diverged is not None else ""
        self.log(f"  {label}: ρ={rho} seed={seed}{note} → ΔL_f {result.final('unlearn/delta_forget_loss'):+.4f}, "
                 f"−ΔL_r {result.final('unlearn/neg_delta_retain_loss'):+.4f} ({time.perf_counter() - started:.1f} s)")
        return result

    # ----- studies -------------------------------------------------------------------------------------------------
    def trajectories(self) -> None:
        rows = []
        for seed in self.seeds:
            for rho in self.cfg.get("rhos", [0.0, 0.25, 0.5, 0.75]):
                for method in self.cfg["methods"]:
                    result = self.run(method, method, rho, seed, int(self.cfg["epochs"]))
                    self.trajectory_runs.append((method, float(rho), seed, result))
                    rows += _epoch_rows(result, method=method, rho=rho, seed=seed)
        _write_csv(self.out / "trajectories.csv", rows)
        finals = [r for r in rows if r["epoch"] == max(x["epoch"] for x in rows if x["method"] == r["method"]
                                                        and x["rho"] == r["rho"] and x["seed"] == r["seed"])]
        self.summary["trajectories"] = {"final": finals}

    def hardness(self) -> None:
        if not any(m == "HAMU" for m, *_ in self.trajectory_runs):
            for seed in self.seeds:
                for rho in self.cfg.get("rhos", [0.0, 0.25, 0.5, 0.75]):
                    self.trajectory_runs.append(("HAMU", float(rho), seed,
                                                 self.run("HAMU", "HAMU", rho, seed, int(self.cfg["epochs"]))))
        rows = []
        for method, rho, seed, result in self.trajectory_runs:
            if method != "HAMU":
                continue
            kappas = [s["kappa_global"] for s in result.steps if "kappa_global" in s]
            cosines = [s["cosine_global"] for s in result.steps if "cosine_global" in s]
            rows.append({"rho": rho, "seed": seed, "kappa_mean": float(np.mean(kappas)),
                         "cosine_mean": float(np.nanmean(cosines)), "steps": len(kappas)})
        _write_csv(self.out / "hardness.csv", rows)
        rhos = [r["rho"] for r in rows]
        self.summary["hardness"] = {"rows": rows, "kappa": _pearson(rhos, [r["kappa_mean"] for r in rows]),
                                    "cosine": _pearson(rhos, [r["cosine_mean"] for r in rows])}

    def quota(self) -> None:
        study = self.cfg.get("quota", {})
        method = study.get("method", "HAMU")
        eta = float(self.cfg["methods"][method]["init_args"]["eta"])
        rows = []
        for seed in self.seeds:
            for ratio in study.get("ratios", [0.001, 0.002, 0.004, 0.006, 0.008]):
                q = float(ratio) * eta
                result = self.run(f"{method} Q/η={ratio}", method, study.get("rho", 0.0), seed,
                                  int(study.get("epochs", self.cfg["epochs"])), {"quota": q})
                infeasible = [s.get("hamu/branch_infeasible", math.nan) for s in result.steps]
                rows.append({"quota": q, "q_over_eta": float(ratio), "seed": seed,
                             "steps": int(result.epochs[-1]["step"]),
                             "delta_forget_loss": result.final("unlearn/delta_forget_loss"),
                             "neg_delta_retain_loss": result.final("unlearn/neg_delta_retain_loss"),
                             "infeasible_blocks_per_step": float(np.nanmean(infeasible)) if infeasible else math.nan})
        _write_csv(self.out / "quota.csv", rows)
        fit = scipy.stats.linregress([r["q_over_eta"] for r in rows], [r["delta_forget_loss"] for r in rows])
        per_seed = {}
        for seed in self.seeds:
            mine = [r for r in rows if r["seed"] == seed]
            if len({r["q_over_eta"] for r in mine}) > 2:
                per_seed[str(seed)] = scipy.stats.linregress([r["q_over_eta"] for r in mine],
                                                             [r["delta_forget_loss"] for r in mine]).rvalue ** 2
        self.summary["quota"] = {"rows": rows, "slope": fit.slope, "intercept": fit.intercept,
                                 "r2": fit.rvalue ** 2, "p_value": fit.pvalue, "r2_per_seed": per_seed}

    def stopping(self) -> None:
        study = self.cfg.get("stopping", {})
        method = study.get("method", "HAMU")
        rule = {"mode": "hard", "criterion": "aggregate", "patience": 1, **study.get("callback", {}),
                "monitor_only": True}
        result = self.run(f"{method} (κ₂ monitor only)", method, study.get("rho", 0.5), self.seeds[0],
                          int(study.get("epochs", 4 * self.cfg["epochs"])), kappa_stopping=rule)
        rows = _epoch_rows(result, method=method, rho=study.get("rho", 0.5), seed=self.seeds[0])
        _write_csv(self.out / "stopping.csv", rows)
        _write_csv(self.out / "stopping_steps.csv", result.steps)
        gains = [r["neg_delta_retain_loss"] for r in rows]
        peak = int(np.nanargmax(gains))
        self.summary["stopping"] = {
            "rule": rule,
            "peak_step": rows[peak]["step"], "peak_neg_delta_retain_loss": gains[peak],
            "turns_down": peak < len(rows) - 1,
            "final_neg_delta_retain_loss": gains[-1],
            "would_stop_step": result.info.get("would_stop_step"),
            "irreconcilable_steps": int(sum(s.get("irreconcilable", 0.0) for s in result.steps)),
            "total_steps": int(rows[-1]["step"]),
        }

    def ablation(self) -> None:
        study = self.cfg.get("ablation", {})
        method = study.get("method", "HAMU")
        variants = study.get("variants") or {"per-layer quota": {}, "uniform quota": {"allocation": "uniform"},
                                             "global constraint": {"grouping": "global"}}
        rows = []
        for seed in self.seeds:
            for name, overrides in variants.items():
                result = self.run(f"{method} {name}", method, study.get("rho", 0.5), seed,
                                  int(study.get("epochs", self.cfg["epochs"])), overrides)
                rows.append({"variant": name, "seed": seed, **{k: result.final(v) for k, v in EPOCH_COLUMNS.items()}})
        _write_csv(self.out / "ablation.csv", rows)
        self.summary["ablation"] = {"rows": rows}


def run_suite(cfg: dict[str, Any], out_dir: str | Path | None = None, studies: Iterable[str] | None = None,
              plots: bool = True, log=print) -> dict[str, Any]:
    out = Path(out_dir or cfg.get("out_dir", "runs/experiments"))
    chosen = list(studies or cfg.get("studies", STUDIES))
    suite = _Suite(cfg, out, log)
    for name in STUDIES:  # fixed order: hardness reuses the trajectory runs
        if name in chosen:
            log(f"== {name} ==")
            getattr(suite, name)()
    summary = suite.summary
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    (out / "summary.md").write_text(summary_markdown(summary))
    if plots:
        from lit_unlearn.experiments.plots import plot_all

        summary["figures"] = [str(p) for p in plot_all(out)]
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    log(f"results in {out}/ (summary.md, *.csv" + (", *.png)" if plots else ")"))
    return summary


# ----- small helpers -------------------------------------------------------------------------------------------------
def _epoch_rows(result: RunResult, **tags: Any) -> list[dict[str, Any]]:
    diverged = result.info.get("diverged_step")
    return [{**tags, "epoch": int(r["epoch"]), "step": int(r["step"]),
             **{k: r.get(v, math.nan) for k, v in EPOCH_COLUMNS.items()},
             "diverged_step": "" if diverged is None else int(diverged)} for r in result.epochs]


def _pearson(x: list[float], y: list[float]) -> dict[str, float]:
    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return {"r": math.nan, "p_value": math.nan, "n": len(x)}
    res = scipy.stats.pearsonr(x, y)
    return {"r": float(res.statistic), "p_value": float(res.pvalue), "n": len(x)}


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def summary_markdown(summary: dict[str, Any]) -> str:
    lines = ["# Experiment summary", ""]
    if "trajectories" in summary:
        lines += ["## Final ΔL_f and −ΔL_r per method and ρ", "",
                  "| method | ρ | seed | ΔL_f | −ΔL_r | forget acc | retain acc | test acc |", "|---" * 8 + "|"]
        for r in summary["trajectories"]["final"]:
            lines.append(f"| {r['method']} | {r['rho']} | {r['seed']} | " + " | ".join(
                _fmt(r[k]) for k in EPOCH_COLUMNS) + " |")
        lines.append("")
    if "hardness" in summary:
        h = summary["hardness"]
        lines += ["## Hardness: mean κ̄ vs ρ (HAMU runs)", "", "| ρ | seed | mean κ̄ | mean cos | steps |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['rho']} | {r['seed']} | {_fmt(r['kappa_mean'])} | {_fmt(r['cosine_mean'])} | {r['steps']} |"
                  for r in h["rows"]]
        lines += ["", f"Pearson r(κ̄, ρ) = {_fmt(h['kappa']['r'])} (p = {_fmt(h['kappa']['p_value'])}, "
                  f"n = {h['kappa']['n']}); r(cos, ρ) = {_fmt(h['cosine']['r'])}.", ""]
    if "quota" in summary:
        q = summary["quota"]
        per_seed = "; per seed " + ", ".join(f"{k}: {_fmt(v)}" for k, v in q["r2_per_seed"].items()) \
            if q.get("r2_per_seed") else ""
        lines += ["## Quota: ΔL_f after a fixed budget vs Q/η", "",
                  "| Q/η | Q | steps | ΔL_f | −ΔL_r | infeasible blocks/step |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['q_over_eta']} | {_fmt(r['quota'])} | {r['steps']} | {_fmt(r['delta_forget_loss'])} | "
                  f"{_fmt(r['neg_delta_retain_loss'])} | {_fmt(r['infeasible_blocks_per_step'])} |" for r in q["rows"]]
        lines += ["", f"Linear fit: ΔL_f = {_fmt(q['slope'])}·(Q/η) + {_fmt(q['intercept'])}, "
                  f"R² = {_fmt(q['r2'])}{per_seed}.", ""]
    if "stopping" in summary:
        s = summary["stopping"]
        lines += ["## Stopping: κ₂ rule (monitor only) vs where −ΔL_r turns down", "",
                  f"- −ΔL_r peaks at step {s['peak_step']} ({_fmt(s['peak_neg_delta_retain_loss'])}); "
                  f"{'it turns down afterwards' if s['turns_down'] else 'it is still rising at the end'} "
                  f"(final {_fmt(s['final_neg_delta_retain_loss'])} after {s['total_steps']} steps).",
                  f"- the κ₂ rule would have stopped at step {s['would_stop_step']} "
                  f"({s['irreconcilable_steps']} irreconcilable steps in all).", ""]
    if "ablation" in summary:
        lines += ["## Ablation: how the constraint is split", "",
                  "| variant | seed | ΔL_f | −ΔL_r | forget acc | retain acc | test acc |", "|---" * 7 + "|"]
        lines += [f"| {r['variant']} | {r['seed']} | " + " | ".join(_fmt(r[k]) for k in EPOCH_COLUMNS) + " |"
                  for r in summary["ablation"]["rows"]]
        lines.append("")
    return "\n".join(lines)
