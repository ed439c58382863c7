"""The OFMU paper's two ablations on the TOFU world: what the HVP penalty and the decorrelation term do to forgetting
and utility, what weighting the same terms linearly instead of the bi-level structure does, and how far each part
of a round moves the weights.

    python benchmarks/ofmu/ablations.py --form paper --rho0 R [--rounds 13] [--lambdas 0.1,1,10]
        [--worlds runs/tofu/worlds] [--seed 100] [--out runs/ofmu_ablations_paper] [--write FILE]
    python benchmarks/ofmu/ablations.py [--form clipped] [--write docs/generated/ofmu_ablations.md]

On validation world 100 (nothing here chooses a reported setting), forget01.
`--form paper`: configs/bench/bench_tofu_ofmu_paper.yaml's OFMU in the paper's form (T = 5 inner steps, η_in = η_out
= 1e-3, β 0.1, exact HVPs, no clip, ρ_k = ρ_0·1.1^k) at the ρ_0 its validation grid chose, for the bench's rounds.
Variants: the paper's form; no decorrelation (β = 0: the inner steps are plain ascent on L_f); and the same terms
weighted linearly over a λ grid (structure="linear": θ ← θ − η_out·(∇L_r − λ∇Φ), one step a round, no inner loop,
no penalty).
`--form clipped` (the earlier tables' form: 2 inner steps, η_out 0.01, β 0.1, ρ 1, clips 1, finite-difference HVPs)
at the two points its budgets chose: inner rate 3e-2 for 13 steps (10 epochs) and 1e-2 for 38 steps (30 epochs).
Variants: that form; no HVP penalty (ρ = 0: the outer step is retain descent alone); no decorrelation (β = 0); ρ
rising from 0.05 by 0.1 a round (RhoScheduler); and the inner ascent alone (η_out 1e-12: a round ends where the
inner steps do).
Per step, from the module's own diagnostics: the penalty's share of the outer direction ‖2ρ∇²Φ∇Φ‖ / (‖∇L_r‖ +
‖2ρ∇²Φ∇Φ‖) and the inner ascent's displacement ‖θ_T − θ_0‖ against the outer step's η_out‖d‖; at the end, forget
quality against the world's retain-only model and model utility (TofuEvaluation), and ΔL_f / −ΔL_r on the
evaluation items.
"""

from __future__ import annotations

import sys
import json
import math
import statistics
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import command, options, publish  # benchmarks/report.py

CLIPPED = {"inner_steps": 2, "outer_lr": 0.01, "beta": 0.1, "inner_clip_norm": 1.0, "outer_clip_norm": 1.0,
           "hvp": "finite_difference"}
POINTS = [(3e-2, 13), (1e-2, 38)]  # (inner_lr, steps): the clipped form's bench choices at 10 and 30 epochs
CLIPPED_VARIANTS = {"paper's form": {}, "no HVP penalty (ρ = 0)": {"rho": 0.0},
                    "no decorrelation (β = 0)": {"beta": 0.0}, "inner ascent alone (η_out 1e-12)": {"outer_lr": 1e-12},
                    "ρ rising (0.05 + 0.1 a round)": {}}
PAPER = {"inner_steps": 5, "inner_lr": 1e-3, "outer_lr": 1e-3, "beta": 0.1, "hvp": "autograd"}
RISING = {"schedule": "geometric", "rho0": None, "rate": 1.1, "cap": None}  # the bench's: ρ_k = ρ_0·1.1^k
KEYS = ("ofmu/penalty_norm", "ofmu/retain_grad_norm", "ofmu/inner_shift_norm", "ofmu/outer_step_norm", "ofmu/cosine")


def paper_variants(lambdas: list[float]) -> dict[str, tuple[dict, dict | None]]:
    """name -> (init_args over PAPER, the RhoScheduler's arguments or None)."""
    variants = {"paper's form": ({}, RISING), "no decorrelation (β = 0)": ({"beta": 0.0}, RISING)}
    for lam in lambdas:
        variants[f"linear weighting, λ = {lam:g}"] = ({"structure": "linear", "linear_weight": lam}, None)
    return variants


def clipped_variants(inner_lr: float) -> dict[str, tuple[dict, dict | None]]:
    rising = {"schedule": "linear", "rho0": 0.05, "rate": 0.1}
    return {name: ({**CLIPPED, "inner_lr": inner_lr, **args}, rising if name.startswith("ρ rising") else None)
            for name, args in CLIPPED_VARIANTS.items()}


def run(world: Path, init_args: dict, schedule: dict | None, steps: int, name: str, out: Path) -> dict:
    from lit_unlearn.callbacks import RhoScheduler, TofuEvaluation, TrajectoryRecorder
    from lit_unlearn.experiments.unlearning_run import tofu_run_specs
    from lit_unlearn.launch.runs import RunSpec, launch

    done = out / f"{name}.json"
    if done.is_file():  # a finished run is read back: the script resumes where it stopped
        return json.loads(done.read_text())
    model, data = tofu_run_specs({"class_path": "lit_unlearn.modules.OFMUModule", "init_args": init_args}, world, "01")
    recorder = TrajectoryRecorder(step_keys=KEYS)
    evaluation = TofuEvaluation(reference=str(world / "retain_only_01_eval.json"), metrics=["forget_quality",
                                                                                            "model_utility"])
    trainer = {"max_steps": steps, "max_epochs": -1, "val_check_interval": steps, "check_val_every_n_epoch": None,
               "log_every_n_steps": 1, "logger": False, "enable_checkpointing": False}
    launch(RunSpec(out / name, model, data, trainer, seed=0,
                   callbacks=[recorder, evaluation, *([RhoScheduler(**schedule)] if schedule else [])],
                   configure=lambda m: setattr(m.run_report, "enabled", False)))
    rows = recorder.steps
    share = [r["ofmu/penalty_norm"] / (r["ofmu/retain_grad_norm"] + r["ofmu/penalty_norm"]) for r in rows
             if r.get("ofmu/retain_grad_norm", 0) + r.get("ofmu/penalty_norm", 0) > 0]
    def mean(key):  # nan where the variant logs no such value (the linear weighting has no inner loop)
        values = [r[key] for r in rows if key in r]
        return statistics.mean(values) if values else math.nan

    summary = evaluation.last_report.summary
    last = recorder.epochs[-1]
    result = {"steps": steps, "run": name,
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
    parser.add_argument("--form", choices=("paper", "clipped"), default="clipped")
    parser.add_argument("--rho0", type=float, help="--form paper: the ρ_0 the bench's validation grid chose")
    parser.add_argument("--rounds", type=int, default=13, help="--form paper: the bench's rounds (10 epochs: 13)")
    parser.add_argument("--lambdas", default="0.1,1,10", help="--form paper: the linear weighting's λ grid")
    parser.add_argument("--worlds", default="runs/tofu/worlds")
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--out", default=None, help="default: runs/ofmu_ablations (clipped), _paper (paper)")
    args = parser.parse_args()
    from lit_unlearn.worlds.tofu_world import prepare_tofu_world

    world = prepare_tofu_world(args.worlds, seed=args.seed, levels=("01",)).folder
    out = Path(args.out or ("runs/ofmu_ablations_paper" if args.form == "paper" else "runs/ofmu_ablations"))
    rows = []
    if args.form == "paper":
        if args.rho0 is None:
            parser.error("--form paper needs --rho0 (the bench's validation choice)")
        points = [(f"ρ_0 {args.rho0:g}, {args.rounds} rounds", args.rounds,
                   {n: ({**PAPER, "rho": args.rho0, **a}, sch) for n, (a, sch) in
                    paper_variants([float(x) for x in args.lambdas.split(",")]).items()})]
    else:
        points = [(f"inner lr {lr:g}, {steps} steps", steps, clipped_variants(lr)) for lr, steps in POINTS]
    for label, steps, variants in points:
        for name, (init_args, schedule) in variants.items():
            # a linear-weighting run reads no ρ: its result serves every ρ_0 at the same rounds
            key = f"{label}_{name}" if schedule or args.form == "clipped" else f"{steps} rounds_{name}"
            slug = "".join(c if c.isalnum() else "_" for c in key)
            rows.append({**run(world, init_args, schedule, steps, slug, out), "point": label, "variant": name})
            print(rows[-1], flush=True)
    g = lambda x, d=3: "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}g}"  # noqa: E731
    lines = ["| point | variant | FQ | MU | ΔL_f | −ΔL_r | penalty share of the outer direction | "
             "‖θ_T − θ_0‖ (inner) | η_out‖d‖ (outer) | cos(∇L_f, ∇L_r) |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['point']} | {r['variant']} | {g(r['forget_quality'])} | "
              f"{g(r['model_utility'])} | {g(r['delta_forget'])} | {g(r['neg_delta_retain'])} | "
              f"{g(r['penalty_share'])} | {g(r['inner_shift'])} | {g(r['outer_step'])} | {g(r['cosine'])} |"
              for r in rows]
    form = "the paper's form" if args.form == "paper" else "the clipped form of the earlier tables"
    head = (f"# The OFMU paper's ablations on the TOFU world, {form} (validation world, forget01)\n\n"
            f"Generated by `{command()}` (world seed {args.seed}). Means over the run's steps for the shares and "
            "displacements; FQ and MU at the end (TofuEvaluation against the world's retain-only model); ΔL_f, −ΔL_r "
            "on the evaluation items.\n\n")
    publish("\n".join(lines) + "\n", args.write, head)


if __name__ == "__main__":
    main()
