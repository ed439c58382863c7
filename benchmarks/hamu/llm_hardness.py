"""The HAMU paper's LLM claims on the TOFU world: the mean hardness κ̄ is higher when the retain set holds
semantic duplicates of the forget items (its WaterDrum-TOFU study: 6.1e-4 against 4.0e-4), and there HAMU-Q improves
both ΔL_f and −ΔL_r while baselines slide along the diagonal; with `--studies quota,ablation` also ΔL_f against Q/η
(the paper: linear, R² 0.999) and the per-layer constraint against uniform quotas and one global constraint.

    python benchmarks/hamu/llm_hardness.py [--world runs/tofu/worlds/seed100-…] [--level 10] [--steps 60]
        [--studies hardness,quota,ablation] [--out runs/hamu_hardness] [--write docs/generated/hamu_llm_hardness.md]

On one world (a validation world: nothing here chooses a setting for a reported number), the paper's form of each
method (no ceiling, no controller) runs `--steps` steps on the plain retain set and on the retain set with TOFU's
semantic duplicates of the forget items (TofuSource(retain_duplicates=True): each forget item's paraphrased question
and answer). κ̄ is the mean over steps of κ = ĝ_r·ĝ_f over all parameters (the clipped gradients' dot product, the
quantity the paper averages), with its cosine; ΔL_f and −ΔL_r are the forget and retain losses' changes from the
start (on the run's evaluation items, the same in both variants: the duplicates are not evaluated).
"""

from __future__ import annotations

import sys
import json
import math
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import command, options, publish  # benchmarks/report.py

METHODS = {
    "HAMU": {"class_path": "lit_unlearn.modules.HAMUModule", "init_args": {"eta": 0.05, "quota": 0.005}},
    "GA": {"class_path": "lit_unlearn.modules.GAModule", "init_args": {"lr": 1e-4, "optimizer": "adamw"}},
    "GradDiff": {"class_path": "lit_unlearn.modules.GradDiffModule", "init_args": {"lr": 0.05}},
}


QUOTA_RATIOS = (0.02, 0.05, 0.1, 0.2)  # Q/η at η = 0.05
ABLATION = {"per-layer quota": {}, "uniform quota": {"allocation": "uniform"}, "global constraint": {"grouping": "global"}}


def run(world: Path, level: str, duplicates: bool, method: str, steps: int, out: Path,
        overrides: dict | None = None, label: str = "") -> dict:
    from lit_unlearn.callbacks import TrajectoryRecorder
    from lit_unlearn.experiments.unlearning_run import tofu_run_specs
    from lit_unlearn.launch.runs import RunSpec, launch

    name = f"{method}{label}_{'duplicates' if duplicates else 'plain'}"
    done = out / f"{name}.json"
    if done.is_file():  # a finished run is read back (the study resumes where it stopped)
        return json.loads(done.read_text())
    method_spec = METHODS[method]
    method_spec = {**method_spec, "init_args": {**method_spec["init_args"], **(overrides or {})}}
    spec, data = tofu_run_specs(method_spec, world, level, float(duplicates), eval_items=200)
    recorder = TrajectoryRecorder()
    trainer = {"max_steps": steps, "max_epochs": -1, "val_check_interval": steps // 3, "check_val_every_n_epoch": None,
               "log_every_n_steps": 1, "logger": False, "enable_checkpointing": False}
    launch(RunSpec(out / name, spec, data, trainer, seed=0,
                   callbacks=[recorder], configure=lambda m: setattr(m.run_report, "enabled", False)))
    kappas = [r["kappa_global"] for r in recorder.steps if "kappa_global" in r]
    cosines = [r["cosine_global"] for r in recorder.steps if "cosine_global" in r]
    last = recorder.epochs[-1]
    result = {"method": method, "duplicates": duplicates,
              "kappa_mean": sum(kappas) / len(kappas) if kappas else math.nan,
              "cosine_mean": sum(cosines) / len(cosines) if cosines else math.nan,
              "delta_forget": last.get("unlearn/delta_forget_loss", math.nan),
              "neg_delta_retain": last.get("unlearn/neg_delta_retain_loss", math.nan), "steps": steps}
    out.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(result))
    return result


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--world", required=True, help="a built world folder (runs/tofu/worlds/seed100-…)")
    parser.add_argument("--level", default="10")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--studies", default="hardness")
    parser.add_argument("--out", default="runs/hamu_hardness")
    args = parser.parse_args()
    world, out = Path(args.world), Path(args.out)
    studies = args.studies.split(",")
    rows, quota_rows, ablation_rows = [], [], []
    if "hardness" in studies:
        for method in args.methods.split(","):
            for duplicates in (False, True):
                rows.append(run(world, args.level, duplicates, method, args.steps, out))
                print(rows[-1], flush=True)
    if "quota" in studies:
        for ratio in QUOTA_RATIOS:
            eta = METHODS["HAMU"]["init_args"]["eta"]
            quota_rows.append({"ratio": ratio, **run(world, args.level, True, "HAMU", args.steps, out,
                                                     {"quota": ratio * eta}, f"_q{ratio:g}")})
            print(quota_rows[-1], flush=True)
    if "ablation" in studies:
        for name, overrides in ABLATION.items():
            ablation_rows.append({"variant": name, **run(world, args.level, True, "HAMU", args.steps, out, overrides,
                                                         "_" + name.replace(" ", "_"))})
            print(ablation_rows[-1], flush=True)
    fmt = lambda x: "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4g}"  # noqa: E731
    lines = [f"# HAMU's LLM claims with and without semantic duplicates in the retain set (TOFU world, forget{args.level})", "",
             f"Generated by `{command()}`. {args.steps} steps of "
             "each method's paper form from the world's target, retain and forget batches of 32; κ̄ and cos: the mean "
             "over steps of the clipped gradients' dot product and cosine over all parameters (HAMU's own, recorded "
             "each step); ΔL_f, −ΔL_r: from the start, on the first 200 forget and retain items.", "",
             "| method | retain set | κ̄ | mean cos(g_r, g_f) | ΔL_f | −ΔL_r |", "|---|---|---|---|---|---|",
             *[f"| {r['method']} | {'with duplicates' if r['duplicates'] else 'plain'} | {fmt(r['kappa_mean'])} | "
               f"{fmt(r['cosine_mean'])} | {fmt(r['delta_forget'])} | {fmt(r['neg_delta_retain'])} |" for r in rows]]
    hamu = {r["duplicates"]: r for r in rows if r["method"] == "HAMU"}
    if len(hamu) == 2:
        lines += ["", f"κ̄ with duplicates / plain: {hamu[True]['kappa_mean']:.4g} / {hamu[False]['kappa_mean']:.4g} "
                  f"(the paper, Llama-2-7B on WaterDrum-TOFU: 6.1e-4 / 4.0e-4)."]
    if quota_rows:
        import numpy as np

        x = np.array([r["ratio"] for r in quota_rows])
        y = np.array([r["delta_forget"] for r in quota_rows])
        slope, intercept = np.polyfit(x, y, 1)
        r2 = 1 - ((y - (slope * x + intercept)) ** 2).sum() / ((y - y.mean()) ** 2).sum()
        lines += ["", "## ΔL_f against Q/η (HAMU, retain set with duplicates, η 0.05)", "",
                  "| Q/η | ΔL_f | −ΔL_r | κ̄ |", "|---|---|---|---|",
                  *[f"| {r['ratio']:g} | {fmt(r['delta_forget'])} | {fmt(r['neg_delta_retain'])} | "
                    f"{fmt(r['kappa_mean'])} |" for r in quota_rows],
                  "", f"Linear fit: ΔL_f = {slope:.4g}·Q/η + {intercept:.4g}, R² {r2:.4f} (the paper: R² 0.999)."]
    if ablation_rows:
        lines += ["", "## How the constraint is split (HAMU, retain set with duplicates)", "",
                  "| variant | ΔL_f | −ΔL_r | κ̄ |", "|---|---|---|---|",
                  *[f"| {r['variant']} | {fmt(r['delta_forget'])} | {fmt(r['neg_delta_retain'])} | "
                    f"{fmt(r['kappa_mean'])} |" for r in ablation_rows]]
    text = "\n".join(lines) + "\n"
    publish(text, args.write)


if __name__ == "__main__":
    main()
