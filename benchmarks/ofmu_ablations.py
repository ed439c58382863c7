"""The OFMU paper's two ablations on the TOFU world, at the bench's own OFMU points: what the HVP penalty and the
decorrelation term do to forgetting and utility, and how far each part of a round moves the weights.

    python benchmarks/ofmu_ablations.py [--worlds runs/tofu/worlds] [--seed 100] [--out runs/ofmu_ablations]
        [--write docs/generated/ofmu_ablations.md]

On validation world 100 (nothing here chooses a reported setting), forget01, configs/bench/bench_tofu_ofmu_paper.yaml's
OFMU (2 inner steps, η_out 0.01, β 0.1, ρ 1, clips 1, finite-difference HVPs) at the two points its budgets chose:
inner rate 3e-2 for 13 steps (10 epochs) and 1e-2 for 38 steps (30 epochs). Variants: the paper's form; no HVP
penalty (ρ = 0: the outer step is retain descent alone); no decorrelation (β = 0: the inner steps are plain ascent on
L_f); ρ rising from 0.05 by 0.1 a round (RhoScheduler, as the paper's outer loop raises ρ_k); and the inner ascent
alone (η_out 1e-12: a round ends where the inner steps do). Per step, from the module's own diagnostics: the penalty's share of the outer direction ‖2ρ∇²Φ∇Φ‖ / (‖∇L_r‖ + ‖2ρ∇²Φ∇Φ‖) and the inner ascent's
displacement ‖θ_T − θ_0‖ against the outer step's η_out‖d‖; at the end, forget quality against the world's
retain-only model and model utility (TofuEvaluation), and ΔL_f / −ΔL_r on the evaluation items.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from report import options, publish  # benchmarks/report.py, beside this script

OFMU = {"inner_steps": 2, "outer_lr": 0.01, "beta": 0.1, "inner_clip_norm": 1.0, "outer_clip_norm": 1.0,
        "hvp": "finite_difference"}
POINTS = [(3e-2, 13), (1e-2, 38)]  # (inner_lr, steps): the bench's choices at 10 and 30 epochs
VARIANTS = {"paper's form": {}, "no HVP penalty (ρ = 0)": {"rho": 0.0}, "no decorrelation (β = 0)": {"beta": 0.0},
            "inner ascent alone (η_out 1e-12)": {"outer_lr": 1e-12},
            "ρ rising (0.05 + 0.1 a round)": {}}
# variants that differ by a callback: the ρ schedule the paper's outer loop has (RhoScheduler), from a small start
SCHEDULES = {"ρ rising (0.05 + 0.1 a round)": {"schedule": "linear", "rho0": 0.05, "rate": 0.1}}
KEYS = ("ofmu/penalty_norm", "ofmu/retain_grad_norm", "ofmu/inner_shift_norm", "ofmu/outer_step_norm", "ofmu/cosine")


def run(world: Path, inner_lr: float, steps: int, variant: str, out: Path) -> dict:
    from lit_unlearn.callbacks import RhoScheduler, TofuEvaluation, TrajectoryRecorder
    from lit_unlearn.experiments.unlearning_run import tofu_run_specs
    from lit_unlearn.launch.runs import RunSpec, launch

    label = "".join(c if c.isalnum() else "_" for c in variant.split(" (")[0])
    name = f"lr{inner_lr:g}_s{steps}_{label}"
    done = out / f"{name}.json"
    if done.is_file():  # a finished run is read back: the script resumes where it stopped
        return json.loads(done.read_text())
    model, data = tofu_run_specs({"class_path": "lit_unlearn.modules.OFMUModule",
                                  "init_args": {**OFMU, "inner_lr": inner_lr, **VARIANTS[variant]}}, world, "01")
    recorder = TrajectoryRecorder(step_keys=KEYS)
    evaluation = TofuEvaluation(reference=str(world / "retain_only_01_eval.json"), metrics=["forget_quality",
                                                                                            "model_utility"])
    trainer = {"max_steps": steps, "max_epochs": -1, "val_check_interval": steps, "check_val_every_n_epoch": None,
               "log_every_n_steps": 1, "logger": False, "enable_checkpointing": False}
    schedule = [RhoScheduler(**SCHEDULES[variant])] if variant in SCHEDULES else []
    launch(RunSpec(out / name, model, data, trainer, seed=0, callbacks=[recorder, evaluation, *schedule],
                   configure=lambda m: setattr(m.run_report, "enabled", False)))
    rows = recorder.steps
    share = [r["ofmu/penalty_norm"] / (r["ofmu/retain_grad_norm"] + r["ofmu/penalty_norm"]) for r in rows
             if r.get("ofmu/retain_grad_norm", 0) + r.get("ofmu/penalty_norm", 0) > 0]
    mean = lambda key: statistics.mean(r[key] for r in rows if key in r)  # noqa: E731
    summary = evaluation.last_report.summary
    last = recorder.epochs[-1]
    result = {"inner_lr": inner_lr, "steps": steps, "variant": variant,
              "penalty_share": statistics.mean(share) if share else math.nan,
              "inner_shift": mean("ofmu/inner_shift_norm"), "outer_step": mean("ofmu/outer_step_norm"),
              "cosine": mean("ofmu/cosine"), "forget_quality": summary.get("forget_quality"),
              "model_utility": summary.get("model_utility"),
              "delta_forget": last.get("unlearn/delta_forget_loss"),
              "neg_delta_retain": last.get("unlearn/neg_delta_retain_loss")}
    out.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(result))
    return result


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--worlds", default="runs/tofu/worlds")
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--out", default="runs/ofmu_ablations")
    args = parser.parse_args()
    from lit_unlearn.worlds.tofu_world import prepare_tofu_world

    world = prepare_tofu_world(args.worlds, seed=args.seed, levels=("01",)).folder
    rows = []
    for inner_lr, steps in POINTS:
        for variant in VARIANTS:
            rows.append(run(world, inner_lr, steps, variant, Path(args.out)))
            print(rows[-1], flush=True)
    g = lambda x, d=3: "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}g}"  # noqa: E731
    lines = ["# The OFMU paper's ablations on the TOFU world (validation world, forget01)", "",
             f"Generated by `python benchmarks/ofmu_ablations.py {' '.join(sys.argv[1:])}` (world seed {args.seed}). "
             "Means over the run's steps for the shares and displacements; FQ and MU at the end (TofuEvaluation "
             "against the world's retain-only model); ΔL_f, −ΔL_r on the evaluation items.", "",
             "| inner lr, steps | variant | FQ | MU | ΔL_f | −ΔL_r | penalty share of the outer direction | "
             "‖θ_T − θ_0‖ (inner) | η_out‖d‖ (outer) | cos(∇L_f, ∇L_r) |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['inner_lr']:g}, {r['steps']} | {r['variant']} | {g(r['forget_quality'])} | "
              f"{g(r['model_utility'])} | {g(r['delta_forget'])} | {g(r['neg_delta_retain'])} | "
              f"{g(r['penalty_share'])} | {g(r['inner_shift'])} | {g(r['outer_step'])} | {g(r['cosine'])} |"
              for r in rows]
    text = "\n".join(lines) + "\n"
    publish(text, args.write)


if __name__ == "__main__":
    main()
