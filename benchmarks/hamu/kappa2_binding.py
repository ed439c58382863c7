"""HAMU's κ₂ stop where its constraint binds: does the rule fire near the turn of −ΔL_r (where the retain loss, after
improving, starts to rise), as the paper's reading of κ₂ says?

    python benchmarks/hamu/kappa2_binding.py --world runs/tofu/worlds/seed100-… [--level 01] [--eta 0.05]
        [--quotas 0.04,0.045,0.048] [--steps 150] [--every 10] [--out runs/hamu_kappa2]
        [--write docs/generated/hamu_kappa2_binding.md]

At the bench's Q = 0.005 the first-order gain HAMU can reach without raising the retain loss (≈ η = 0.05 with clipped
gradients) is ten times the quota, so the constraint never binds and κ₂ never fires. Here Q is set near that reach
(clipped units, the paper's), on a validation world: each run goes on past the rule (no stop), recording per step
whether the step was irreconcilable (κ > κ₂ in the aggregate test: reachable gain < Q) and, every `--every` steps,
the forget and retain losses on the first 200 items of each. Reported per Q: the first irreconcilable step, the first
of 3 in a row (patience 3), the step where −ΔL_r is largest (its turn) and ΔL_f, −ΔL_r at each.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import command, options, publish  # benchmarks/report.py

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def run(world: Path, level: str, eta: float, quota: float, steps: int, every: int, out: Path) -> dict:
    from lit_unlearn.callbacks import TrajectoryRecorder
    from lit_unlearn.experiments.unlearning_run import tofu_run_specs
    from lit_unlearn.launch.runs import RunSpec, launch

    done = out / f"q{quota:g}.json"
    if done.is_file():
        return json.loads(done.read_text())
    method = {"class_path": "lit_unlearn.modules.HAMUModule", "init_args": {"eta": eta, "quota": quota}}
    spec, data = tofu_run_specs(method, world, level, eval_items=200)
    recorder = TrajectoryRecorder()
    trainer = {"max_steps": steps, "max_epochs": -1, "val_check_interval": every, "check_val_every_n_epoch": None,
               "log_every_n_steps": 1, "logger": False, "enable_checkpointing": False}
    launch(RunSpec(out / f"q{quota:g}", spec, data, trainer, seed=0, callbacks=[recorder],
                   configure=lambda m: setattr(m.run_report, "enabled", False)))
    result = {"quota": quota, "eta": eta, "level": level, "steps": recorder.steps,
              "evals": [{k: r.get(k) for k in ("step", "unlearn/delta_forget_loss", "unlearn/neg_delta_retain_loss")}
                        for r in recorder.epochs]}
    out.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(result))
    return result


def summary(result: dict) -> dict:
    flags = [(int(s["step"]), s.get("irreconcilable", 0.0) > 0) for s in result["steps"]]
    first = next((t for t, f in flags if f), None)
    streak, patient = 0, None
    for t, f in flags:
        streak = streak + 1 if f else 0
        if streak == 3 and patient is None:
            patient = t
    evals = [e for e in result["evals"] if e["unlearn/neg_delta_retain_loss"] is not None]
    turn = max(evals, key=lambda e: e["unlearn/neg_delta_retain_loss"])
    reach = [s.get("hamu/reachable_gain") for s in result["steps"] if s.get("hamu/reachable_gain") is not None]
    share = sum(f for _, f in flags) / len(flags) if flags else 0.0

    def at(step):
        if step is None:
            return None
        return min(evals, key=lambda e: abs(e["step"] - step))

    return {"quota": result["quota"], "first": first, "patience3": patient, "turn": int(turn["step"]),
            "turn_eval": turn, "at_first": at(first), "at_patience3": at(patient), "irreconcilable_share": share,
            "reach_first": reach[0] if reach else None, "reach_last": reach[-1] if reach else None,
            "last": evals[-1]}


def table(rows: list[dict]) -> str:
    f = lambda x: "-" if x is None else f"{x:.4g}"  # noqa: E731
    lines = ["| Q | reachable gain, first / last step | irreconcilable steps | κ₂ fires (first; 3 in a row) | "
             "−ΔL_r turns at (its −ΔL_r, ΔL_f) | at the first firing: ΔL_f, −ΔL_r | at the end: ΔL_f, −ΔL_r |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        e, a, z = r["turn_eval"], r["at_first"], r["last"]
        fire = "never" if r["first"] is None else f"{r['first']}; {r['patience3'] if r['patience3'] else 'never'}"
        lines.append(
            f"| {r['quota']:g} | {f(r['reach_first'])} / {f(r['reach_last'])} | {r['irreconcilable_share']:.0%} | "
            f"{fire} | step {r['turn']} ({f(e['unlearn/neg_delta_retain_loss'])}, "
            f"{f(e['unlearn/delta_forget_loss'])}) | "
            + ("-" if a is None else f"{f(a['unlearn/delta_forget_loss'])}, {f(a['unlearn/neg_delta_retain_loss'])}")
            + f" | {f(z['unlearn/delta_forget_loss'])}, {f(z['unlearn/neg_delta_retain_loss'])} |")
    return "\n".join(lines)


def main() -> None:
    ap = options(__doc__)
    ap.add_argument("--world", required=True)
    ap.add_argument("--level", default="01")
    ap.add_argument("--eta", type=float, default=0.05)
    ap.add_argument("--quotas", default="0.04,0.045,0.048")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--out", default="runs/hamu_kappa2")
    args = ap.parse_args()
    rows = [summary(run(Path(args.world), args.level, args.eta, float(q), args.steps, args.every, Path(args.out)))
            for q in args.quotas.split(",")]
    text = table(rows)
    head = ("# HAMU's κ₂ stop where its constraint binds\n\n> Does the κ₂ rule fire near the turn of −ΔL_r once Q is "
            "near the reachable gain?\n> Validation world, HAMU's paper form (clipped units), no stop: every run "
            "goes past the rule.\n> Irreconcilable: the step's reachable gain without raising L_r fell below Q.\n\n"
            f"Command: `{command()}`. η {args.eta:g}, "
            f"forget{args.level}, {args.steps} steps, batches 32 + 32, losses every {args.every} steps on the "
            "first 200 forget and retain items (ΔL_f, −ΔL_r from the start).\n\n")
    publish(text + "\n", args.write, head)


if __name__ == "__main__":
    main()
