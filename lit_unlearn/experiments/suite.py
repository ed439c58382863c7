"""The experiment suite: reruns the HAMU paper's comparisons and checks its claims on our own numbers, on a vision
task (ρ: the share of the forget set drawn from other classes) or on a TOFU world (`world:`; ρ: the share of forget
items whose semantic duplicate the retain set holds, the paper's WaterDrum-TOFU hard case).

Studies (each optional, driven by one YAML file such as configs/experiment/experiment_digits.yaml):
- trajectories: ΔL_f and −ΔL_r per epoch for every method at each ρ (ρ-mixture forget sets);
- hardness:     Pearson correlation between HAMU's mean κ̄ (clipped g_r·g_f, over steps) and ρ;
- quota:        HAMU's ΔL_f after a fixed budget against Q/η, with the R² of a linear fit;
- stopping:     a long HAMU run with κ₂ stopping in monitor-only mode: where −ΔL_r peaks vs where it would fire;
- ablation:     per-layer quota (‖g_r⁽ⁱ⁾‖‖g_f⁽ⁱ⁾‖ allocation) vs uniform quota vs one global constraint;
- verification: every method against the retrained model (UA/RA/TA, MIA-efficacy, forget-vs-retrain AUC, Avg.
                Gap) at each ρ, run for the full budget and stopped at a forget target (HAMU also steered by the
                quota controller).
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

from lit_unlearn.core.errors import UserError, did_you_mean
from lit_unlearn.experiments.unlearning_run import (
    RunResult,
    describe_callback,
    tofu_unlearning_run,
    train_target,
    unlearning_run,
)
from lit_unlearn.storage.specs import fingerprint, read_spec_file
from lit_unlearn.core.console import fmt

__all__ = ["STUDIES", "load_config", "run_suite"]

_fmt = fmt

STUDIES = ("trajectories", "hardness", "quota", "stopping", "ablation", "verification")
EPOCH_COLUMNS = {
    "delta_forget_loss": "unlearn/delta_forget_loss",
    "neg_delta_retain_loss": "unlearn/neg_delta_retain_loss",
    "forget_acc": "val/forget_acc",
    "retain_acc": "val/retain_acc",
    "test_acc": "val/test_acc",
}
REQUIRED = ("network", "dataset", "target", "forget", "data", "epochs", "methods")
REQUIRED_TOFU = ("world", "data", "epochs", "methods")


SCHEMA: dict[str, tuple[str, ...]] = {
    "": ("out_dir", "seeds", "network", "dataset", "target", "forget", "world", "data", "epochs", "rhos", "studies",
         "methods", "quota", "stopping", "ablation", "verification"),
    "world": ("seed", "root", "level", "eval_items"),
    "target": ("epochs", "lr", "batch_size", "ckpt"),
    "forget": ("forget_class", "size"),
    "data": ("retain_batch_size", "forget_batch_size", "steps_per_epoch"),
    "quota": ("method", "rho", "epochs", "ratios"),
    "stopping": ("method", "rho", "epochs", "callback"),
    "ablation": ("method", "rho", "epochs", "variants"),
    "verification": ("rhos", "epochs", "target", "every_n_steps", "patience", "controller", "extra_methods"),
}


def _check_keys(values: dict, section: str, path: Path) -> None:
    allowed = SCHEMA[section]
    for key in values:
        if key not in allowed:
            where = f"{section}.{key}" if section else str(key)
            raise UserError(f"{path}: unknown key {where!r}{did_you_mean(key, allowed)}; allowed here: "
                            f"{', '.join(allowed)}")


def load_config(path: str | Path) -> dict[str, Any]:
    """Read and validate a suite config: unknown keys are refused (with a suggestion), specs must be buildable."""
    path = Path(path)
    cfg = read_spec_file(path, "experiment config", "configs/experiment/experiment_digits.yaml")
    _check_keys(cfg, "", path)
    for section in SCHEMA:
        if section and isinstance(cfg.get(section), dict):
            _check_keys(cfg[section], section, path)
    missing = [k for k in (REQUIRED_TOFU if "world" in cfg else REQUIRED) if k not in cfg]
    if missing:
        raise UserError(f"{path}: missing top-level keys {missing}")
    if "world" not in cfg and "steps_per_epoch" in (cfg.get("data") or {}):
        raise UserError(f"{path}: data.steps_per_epoch is for a TOFU world (`world:`); a vision run's epoch is a pass "
                        "over its data")
    if "world" in cfg and "verification" in cfg.get("studies", STUDIES):
        raise UserError(f"{path}: the verification study judges against a retrained vision model; on a TOFU world "
                        "drop it from `studies` and verify with `lit-unlearn bench` (the full verdict)")
    unknown = [s for s in cfg.get("studies", STUDIES) if s not in STUDIES]
    if unknown:
        raise UserError(f"{path}: unknown studies {unknown}; choose from {', '.join(STUDIES)}")
    if "hardness" in cfg.get("studies", STUDIES) and "HAMU" not in cfg["methods"]:
        raise UserError(f"{path}: the hardness study needs a method named HAMU")
    methods = {**cfg["methods"], **((cfg.get("verification") or {}).get("extra_methods") or {})}
    for name, spec in methods.items():
        if not isinstance(spec, dict) or "class_path" not in spec:
            raise UserError(f"{path}: method {name!r} needs a class_path (e.g. lit_unlearn.modules.HAMUModule)")
        bad = set(spec) - {"class_path", "init_args"}
        if bad:
            raise UserError(f"{path}: method {name!r} has unknown keys {sorted(bad)}; use class_path and init_args")
    if "verification" in cfg.get("studies", STUDIES):
        from lit_unlearn.verification.targets import parse_targets

        parse_targets((cfg.get("verification") or {}).get("target", "forget_vs_retrain_auc <= 0.6"))
    return cfg


class ExperimentSuite:
    def __init__(self, cfg: dict[str, Any], out_dir: Path, log=print) -> None:
        self.cfg, self.out, self.log = cfg, out_dir, log
        self.out.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        self.world: Path | None = None
        if "world" in cfg:  # the world's own target: built once, cached under its key
            from lit_unlearn.worlds.tofu_world import prepare_tofu_world

            world = cfg["world"]
            self.world = prepare_tofu_world(world.get("root", "runs/tofu/worlds"), seed=int(world.get("seed", 100)),
                                            levels=(str(world.get("level", "10")),), log=log).folder
            self.target = self.world / "target"
        else:
            target = cfg["target"]
            ckpt = Path(target.get("ckpt") or self.out / "target.ckpt")
            self.target = train_target(cfg["network"], cfg["dataset"], ckpt, epochs=int(target.get("epochs", 4)),
                                       lr=float(target.get("lr", 1e-3)), batch_size=int(target.get("batch_size", 128)))
        self.log(f"target: {self.target} ({time.perf_counter() - started:.0f} s)")
        self.seeds = list(cfg.get("seeds", [0]))
        self.summary: dict[str, Any] = {"config": cfg}
        self.trajectory_runs: list[tuple[str, float, int, RunResult]] = []
        self.total_runs, self.done_runs, self.started = 0, 0, time.perf_counter()
        # Finished runs, kept as they finish: a relaunched suite reads them back instead of running them again.
        self.done_file = self.out / "runs.jsonl"
        self.done: dict[str, RunResult] = {}
        if self.done_file.is_file():
            for line in self.done_file.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    self.done[row["key"]] = RunResult(row["label"], row["epochs"], row["steps"], row["info"])

    def plan(self, studies: list[str]) -> int:
        """How many unlearning runs the chosen studies make (for the progress line and its ETA)."""
        cfg, seeds = self.cfg, len(self.seeds)
        rhos, methods = len(cfg.get("rhos", [0.0, 0.25, 0.5, 0.75])), len(cfg["methods"])
        verification = cfg.get("verification") or {}
        counts = {
            "trajectories": seeds * rhos * methods,
            "hardness": 0 if "trajectories" in studies and "HAMU" in cfg["methods"] else seeds * rhos,
            "quota": seeds * len((cfg.get("quota") or {}).get("ratios", [0.001, 0.002, 0.004, 0.006, 0.008])),
            "stopping": 1,
            "ablation": seeds * len((cfg.get("ablation") or {}).get("variants") or [0, 1, 2]),
            "verification": seeds * len(verification.get("rhos", [0.0, 0.5])) * 2
            * (methods + len(verification.get("extra_methods") or {})),
        }
        self.total_runs = sum(counts[s] for s in studies)
        return self.total_runs

    def run(self, label: str, method: str, rho: float, seed: int, epochs: int, init_overrides: dict | None = None,
            kappa_stopping: dict | None = None, callbacks: list | None = None, spec: dict | None = None) -> RunResult:
        spec = copy.deepcopy(spec or self.cfg["methods"][method])
        spec.setdefault("init_args", {}).update(init_overrides or {})
        forget, data = self.cfg.get("forget"), self.cfg["data"]
        started = time.perf_counter()
        task = {"world": str(self.world), **self.cfg["world"]} if self.world else {
            "network": self.cfg["network"], "dataset": self.cfg["dataset"], "forget": forget}
        key = fingerprint({"label": label, "spec": spec, "rho": float(rho), "seed": seed, "epochs": epochs,
                           "kappa_stopping": kappa_stopping, **task, "data": data,
                           "callbacks": [describe_callback(cb) for cb in callbacks or []]})
        result = self.done.get(key)
        if result is None and self.world:
            world = self.cfg["world"]
            result = tofu_unlearning_run(
                label, spec, self.world, str(world.get("level", "10")), duplicates=float(rho), epochs=epochs,
                retain_batch_size=int(data["retain_batch_size"]), forget_batch_size=int(data["forget_batch_size"]),
                eval_items=world.get("eval_items", 200), seed=seed, kappa_stopping=kappa_stopping, root=self.out,
                callbacks=callbacks, steps_per_epoch=data.get("steps_per_epoch"))
        elif result is None:
            result = unlearning_run(
                label, spec, self.cfg["network"], self.cfg["dataset"], self.target,
                forget_class=int(forget.get("forget_class", 0)), rho=float(rho), forget_size=forget.get("size"),
                epochs=epochs, retain_batch_size=int(data["retain_batch_size"]),
                forget_batch_size=int(data["forget_batch_size"]), seed=seed, kappa_stopping=kappa_stopping,
                root=self.out, callbacks=callbacks)
        if key not in self.done:
            with self.done_file.open("a") as f:
                f.write(json.dumps({"key": key, "label": result.label, "epochs": result.epochs, "steps": result.steps,
                                    "info": result.info}, default=_json_value) + "\n")
            self.done[key] = result
        diverged = result.info.get("diverged_step")
        note = f" DIVERGED at step {diverged}, curve kept up to its last evaluation" if diverged is not None else ""
        self.done_runs += 1
        if self.total_runs:
            elapsed = time.perf_counter() - self.started
            eta = elapsed / self.done_runs * max(self.total_runs - self.done_runs, 0)
            label = f"[{self.done_runs}/{self.total_runs}, ETA {int(eta // 60)}:{int(eta % 60):02d}] {label}"
        v = result.info.get("verification")
        if v:  # measured on the weights the run ended on (the closest to the target, with a stop)
            ended = result.info.get("ended_on_step")
            note += (f" → AUC {v.get('forget_vs_retrain_auc', math.nan):.3f}, Avg. Gap {v.get('avg_gap', math.nan):.4f},"
                     f" UA {v.get('ua', math.nan):.3f}" + (f", ended on step {ended}" if ended is not None else ""))
            self.log(f"  {label}: ρ={rho} seed={seed}{note} ({time.perf_counter() - started:.1f} s)")
            return result
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
                         "kappa_start": float(kappas[0]), "cosine_mean": float(np.nanmean(cosines)),
                         "cosine_start": float(cosines[0]), "steps": len(kappas)})
        _write_csv(self.out / "hardness.csv", rows)
        rhos = [r["rho"] for r in rows]
        self.summary["hardness"] = {"rows": rows, "kappa": _pearson(rhos, [r["kappa_mean"] for r in rows]),
                                    "kappa_start": _pearson(rhos, [r["kappa_start"] for r in rows]),
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


    def verification(self) -> None:
        from lit_unlearn.callbacks import ForgettingVerification, QuotaController, StopAtTarget
        from lit_unlearn.verification import RetrainedReference

        study = self.cfg.get("verification", {})
        target = study.get("target", "forget_vs_retrain_auc <= 0.6")
        methods = {**self.cfg["methods"], **(study.get("extra_methods") or {})}
        rows = []
        for seed in self.seeds:
            for rho in study.get("rhos", [0.0, 0.5]):
                for method, spec in methods.items():
                    for stop in (False, True):
                        callbacks = [ForgettingVerification(reference=RetrainedReference(
                            cache_dir=str(self.out / "retrained")))]
                        if stop:
                            callbacks.append(StopAtTarget(target, every_n_steps=int(study.get("every_n_steps", 6)),
                                                          patience=int(study.get("patience", 2)), verbose=False))
                            if study.get("controller") and spec["class_path"].endswith("HAMUModule"):
                                callbacks.append(QuotaController(**study["controller"]))
                        result = self.run(f"{method}{' (stop)' if stop else ''}", method, rho, seed,
                                          int(study.get("epochs", self.cfg["epochs"])), callbacks=callbacks, spec=spec)
                        v = result.info.get("verification") or {}
                        ended = result.info.get("ended_on_step")
                        rows.append({"method": method, "rho": rho, "seed": seed, "stop": stop,
                                     "steps": ended if ended is not None else result.info.get("final_step"),
                                     **{k: v.get(k, math.nan) for k in VERIFICATION_COLUMNS},
                                     "diverged_step": result.info.get("diverged_step", ""),
                                     "already_met": bool(result.info.get("already_met", False))})
        _write_csv(self.out / "verification.csv", rows)
        self.summary["verification"] = {"target": target, "rows": rows, "table": _verification_table(rows)}


def _json_value(value: Any) -> Any:
    """numpy / torch scalars as plain numbers in runs.jsonl."""
    return value.item() if hasattr(value, "item") else str(value)


VERIFICATION_COLUMNS = ("ua", "ra", "ta", "mia_efficacy", "forget_vs_retrain_auc", "forget_vs_retrain_auc_raw",
                        "avg_gap", "ua_retrain", "ra_retrain", "ta_retrain", "mia_efficacy_retrain",
                        "test_other_classes_acc", "forget_loss_median", "forget_loss_median_retrain")


def _verification_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and standard deviation over seeds of Avg. Gap and the forget-vs-retrain AUC, per method, ρ, stop."""
    out = []
    keys = sorted({(r["method"], r["rho"], r["stop"]) for r in rows}, key=lambda k: (k[1], list(
        dict.fromkeys(r["method"] for r in rows)).index(k[0]), k[2]))
    for method, rho, stop in keys:
        mine = [r for r in rows if (r["method"], r["rho"], r["stop"]) == (method, rho, stop)]
        entry = {"method": method, "rho": rho, "stop": stop, "runs": len(mine),
                 "steps": float(np.mean([r["steps"] for r in mine]))}
        for k in ("avg_gap", "forget_vs_retrain_auc", "ua", "ra", "ta", "mia_efficacy"):
            vals = np.array([r[k] for r in mine], dtype=float)
            entry[k], entry[f"{k}_sd"] = float(np.nanmean(vals)), float(np.nanstd(vals))
        out.append(entry)
    return out


def run_suite(cfg: dict[str, Any], out_dir: str | Path | None = None, studies: Iterable[str] | None = None,
              plots: bool = True, log=print) -> dict[str, Any]:
    out = Path(out_dir or cfg.get("out_dir", "runs/experiments"))
    chosen = list(studies or cfg.get("studies", STUDIES))
    suite = ExperimentSuite(cfg, out, log)
    suite.summary["rho_means"] = ("the share of forget items whose semantic duplicate the retain set holds "
                                  f"(TOFU world {suite.world.name}, forget{cfg['world'].get('level', '10')})"
                                  if suite.world else "the share of the forget set drawn from other classes")
    log(f"{suite.plan([s for s in STUDIES if s in chosen])} unlearning runs in {', '.join(s for s in STUDIES if s in chosen)}")
    suite.started = time.perf_counter()
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
    """One row per evaluation, numbered in the suite's epochs (step / steps per epoch: on a TOFU world an epoch is
    `data.steps_per_epoch` steps, not the data loader's pass over the retain set)."""
    diverged = result.info.get("diverged_step")
    per_epoch = result.info.get("steps_per_epoch")
    return [{**tags, "epoch": int(round(r["step"] / per_epoch)) if per_epoch else int(r["epoch"]),
             "step": int(r["step"]), **{k: r.get(v, math.nan) for k, v in EPOCH_COLUMNS.items()},
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




def summary_markdown(summary: dict[str, Any]) -> str:
    lines = ["# Experiment summary", ""] + ([f"ρ: {summary['rho_means']}.", ""] if "rho_means" in summary else [])
    if "trajectories" in summary:
        lines += ["## Final ΔL_f and −ΔL_r per method and ρ", "",
                  "| method | ρ | seed | ΔL_f | −ΔL_r | forget acc | retain acc | test acc |", "|---" * 8 + "|"]
        for r in summary["trajectories"]["final"]:
            lines.append(f"| {r['method']} | {r['rho']} | {r['seed']} | " + " | ".join(
                _fmt(r[k]) for k in EPOCH_COLUMNS) + " |")
        lines.append("")
    if "hardness" in summary:
        h = summary["hardness"]
        lines += ["## Hardness: κ̄ vs ρ (HAMU runs; κ = g_r·g_f on the clipped gradients)", "",
                  "| ρ | seed | κ at the start | mean κ̄ over the run | mean cos | steps |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['rho']} | {r['seed']} | {_fmt(r.get('kappa_start', math.nan))} | {_fmt(r['kappa_mean'])} | "
                  f"{_fmt(r['cosine_mean'])} | {r['steps']} |" for r in h["rows"]]
        start = h.get("kappa_start", {"r": math.nan, "p_value": math.nan})
        lines += ["", f"Pearson r(κ̄, ρ) = {_fmt(h['kappa']['r'])} (p = {_fmt(h['kappa']['p_value'])}, "
                  f"n = {h['kappa']['n']}); at the start r(κ, ρ) = {_fmt(start['r'])} (p = {_fmt(start['p_value'])}); "
                  f"r(cos, ρ) = {_fmt(h['cosine']['r'])}.", ""]
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
    if "verification" in summary:
        v = summary["verification"]
        lines += [f"## Verification against the retrained model (target {v['target']!r})", "",
                  "Mean ± sd over seeds. AUC: forget-vs-retrain distinguishability (0.5 = indistinguishable).", "",
                  "| method | ρ | stop at target | steps | Avg. Gap | AUC | UA | RA | TA | MIA-efficacy |",
                  "|---" * 10 + "|"]
        for r in v["table"]:
            lines.append(f"| {r['method']} | {r['rho']} | {'yes' if r['stop'] else 'no'} | {r['steps']:.0f} | "
                         + " | ".join(f"{r[k]:.3f} ± {r[k + '_sd']:.3f}" if k in ("avg_gap", "forget_vs_retrain_auc")
                                      else f"{r[k]:.3f}" for k in ("avg_gap", "forget_vs_retrain_auc", "ua", "ra",
                                                                    "ta", "mia_efficacy")) + " |")
        lines.append("")
    if "ablation" in summary:
        lines += ["## Ablation: how the constraint is split", "",
                  "| variant | seed | ΔL_f | −ΔL_r | forget acc | retain acc | test acc |", "|---" * 7 + "|"]
        lines += [f"| {r['variant']} | {r['seed']} | " + " | ".join(_fmt(r[k]) for k in EPOCH_COLUMNS) + " |"
                  for r in summary["ablation"]["rows"]]
        lines.append("")
    return "\n".join(lines)
