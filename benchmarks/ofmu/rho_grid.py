"""OFMU in its paper's form over a grid of ρ_0 × T on a validation world: where the penalty 2ρ∇²Φ·∇Φ sits against the
retain gradient ∇L_r (its share of the outer direction, every round), and the forget quality and model utility each
point reaches. No clip anywhere, exact (autograd) HVPs, ρ_k rising geometrically from ρ_0 by the RhoScheduler.

Validation worlds only (default seed 100): this grid chooses nothing that a test world reports. Each point is written
as one JSON line when it finishes (a rerun skips the points already there).

    python benchmarks/ofmu/rho_grid.py --worlds runs/tofu/worlds --seed 100 --level 01 --rhos 1e-3,1e-2,1e-1,1 \
        --inner-steps 5,10 --rounds 20 --out runs/ofmu_rho_grid --write docs/generated/ofmu_rho_grid_01.md
"""

from __future__ import annotations

import sys
import json
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import command, options  # benchmarks/report.py


def evaluate(network, world, level: str, tok) -> dict:
    from lit_unlearn.data import TofuSource
    from lit_unlearn.metrics import TofuEvaluator

    splits = TofuSource(str(world.data), level).eval_splits()
    report = TofuEvaluator(tok, splits, reference=str(world.reference(level)), gradnorm=False).run(
        network, only=["forget_quality", "model_utility"])
    return {k: report.summary.get(k) for k in ("forget_quality", "model_utility", "forget_truth_ratio")}


def paper_form(world, level: str, rho0: float, inner_steps: int, rounds: int, lr: float, rate: float, batch: int,
               callbacks: list):
    """(module, data, trainer) of one point of the paper's form from the world's target: no clip, exact HVPs,
    η_in = η_out = lr, β = 0.1, ρ_k = ρ_0·rate^k; `callbacks` run beside the RhoScheduler, every round logged."""
    import lightning.pytorch as pl
    import torch

    from lit_unlearn.callbacks import RhoScheduler
    from lit_unlearn.data import TofuDataModule, TofuSource
    from lit_unlearn.models import CausalLM
    from lit_unlearn.modules import OFMUModule

    torch.manual_seed(0)
    module = OFMUModule(CausalLM(name_or_path=str(world.target)), inner_steps=inner_steps, inner_lr=lr, beta=0.1,
                        outer_lr=lr, hvp="autograd", freeze_batchnorm=False)
    module.run_report.enabled = False  # the script measures the model itself; no results.md in the working folder
    data = TofuDataModule(TofuSource(str(world.data), level), str(world.tokenizer), retain_batch_size=batch,
                          forget_batch_size=batch)
    trainer = pl.Trainer(max_steps=rounds, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0, log_every_n_steps=1,
                         accelerator="cpu",
                         callbacks=[RhoScheduler("geometric", rho0=rho0, rate=rate, cap=None), *callbacks])
    return module, data, trainer


ROUND_KEYS = ("ofmu/rho", "ofmu/retain_grad_norm", "ofmu/hvp_norm", "ofmu/penalty_norm", "ofmu/outer_step_norm",
              "ofmu/inner_shift_norm", "ofmu/grad_phi_norm", "train/forget_loss", "train/retain_loss")


def round_log(rows: list[dict], echo: bool = False):
    """A callback that appends every OFMU round's logged terms to `rows` ({"round", "rho", "retain_grad_norm", ...}:
    ROUND_KEYS less their prefix), printing each as a JSON line if `echo`."""
    import lightning.pytorch as pl

    class RoundLog(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, *args):
            m = trainer.callback_metrics
            if "ofmu/penalty_norm" in m:
                rows.append({"round": trainer.global_step - 1,
                             **{k.split("/")[1]: float(m[k]) for k in ROUND_KEYS if k in m}})
                if echo:
                    print(json.dumps(rows[-1]), flush=True)

    return RoundLog()


def run_point(world, level: str, rho0: float, inner_steps: int, rounds: int, lr: float, rate: float, batch: int):
    """(network, tokenizer, every round's penalty and retain-gradient norms and the penalty's share of them)."""
    rows: list[dict] = []
    module, data, trainer = paper_form(world, level, rho0, inner_steps, rounds, lr, rate, batch, [round_log(rows)])
    trainer.fit(module, data)
    shares = []
    for r in rows:
        p, g = r["penalty_norm"], r["retain_grad_norm"]
        shares.append({"round": r["round"], "rho": r["rho"], "penalty": p, "retain": g,
                       "share": p / (p + g) if p + g > 0 else 0.0, "forget_loss": r["forget_loss"],
                       "retain_loss": r["retain_loss"]})
    return module.network, data.tokenizer, shares


def main() -> None:
    ap = options(__doc__)
    ap.add_argument("--worlds", default="runs/tofu/worlds")
    ap.add_argument("--seed", type=int, default=100)
    ap.add_argument("--level", default="01")
    ap.add_argument("--rhos", default="1e-3,1e-2,1e-1,1")
    ap.add_argument("--inner-steps", default="5,10")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--rate", type=float, default=1.1, help="ρ_k = ρ_0·rate^k")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--out", default="runs/ofmu_rho_grid")
    args = ap.parse_args()
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.models import CausalLM
    from lit_unlearn.worlds.tofu_world import prepare_tofu_world

    world = prepare_tofu_world(args.worlds, seed=args.seed, levels=(args.level,), log=print)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / f"points_{args.seed}_{args.level}.jsonl"
    done = [json.loads(line) for line in results.read_text().splitlines()] if results.is_file() else []
    tok = load_tokenizer(str(world.tokenizer))
    target_file = out / f"target_{args.seed}_{args.level}.json"
    if not target_file.is_file():
        target_file.write_text(json.dumps(evaluate(CausalLM(name_or_path=str(world.target)).eval(), world,
                                                   args.level, tok)))
    target = json.loads(target_file.read_text())
    for t in [int(x) for x in args.inner_steps.split(",")]:
        for rho0 in [float(x) for x in args.rhos.split(",")]:
            key = {"inner_steps": t, "rho0": rho0, "lr": args.lr, "rate": args.rate, "rounds": args.rounds}
            if any(all(d.get(k) == v for k, v in key.items()) for d in done):
                continue
            started = time.perf_counter()
            network, tok, shares = run_point(world, args.level, rho0, t, args.rounds, args.lr, args.rate, args.batch)
            row = {**key, **evaluate(network.eval(), world, args.level, tok), "shares": shares,
                   "seconds": round(time.perf_counter() - started)}
            row["mu_ratio"] = None if not target["model_utility"] or row["model_utility"] is None else \
                row["model_utility"] / target["model_utility"]
            with results.open("a") as f:
                f.write(json.dumps(row) + "\n")
            done.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "shares"}), flush=True)
    if args.write:
        write(Path(args.write), done, target, args)


def write(path: Path, rows: list[dict], target: dict, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def share(r, at):
        s = r["shares"]
        return s[0]["share"] if at == "first" else s[-1]["share"] if s else float("nan")

    lines = ["| T | ρ_0 | ρ at the last round | penalty share, round 0 | penalty share, last round | FQ | MU | MU / target's "
             "| forget loss, last round | seconds |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["inner_steps"], r["rho0"])):
        last = r["shares"][-1] if r["shares"] else {}
        lines.append(f"| {r['inner_steps']} | {r['rho0']:g} | {last.get('rho', float('nan')):.3g} | "
                     f"{share(r, 'first'):.3f} | {share(r, 'last'):.3f} | {r['forget_quality']:.3g} | "
                     f"{r['model_utility']:.3f} | {r['mu_ratio']:.3f} | {last.get('forget_loss', float('nan')):.3g} | "
                     f"{r['seconds']} |")
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for t in sorted({r["inner_steps"] for r in rows}):
        pts = sorted((r for r in rows if r["inner_steps"] == t), key=lambda r: r["rho0"])
        axes[0].plot([r["rho0"] for r in pts], [r["forget_quality"] for r in pts], "o-", label=f"T = {t}")
        axes[1].plot([r["rho0"] for r in pts], [r["mu_ratio"] for r in pts], "o-", label=f"T = {t}")
    for ax, name in zip(axes, ("forget quality", "model utility / the target's")):
        ax.set_xscale("log")
        ax.set_xlabel("ρ_0")
        ax.set_ylabel(name)
        ax.legend()
    axes[0].set_yscale("log")
    fig.tight_layout()
    figure = path.with_suffix(".png")
    fig.savefig(figure, dpi=120)
    command_line = command()
    path.write_text(
        f"# OFMU's paper form over ρ_0 × T (validation world {args.seed}, forget{args.level})\n\n"
        f"Generated by `{command_line}`. Each point: {args.rounds} rounds from the target, no clip, exact HVPs, "
        f"η_in = η_out = {args.lr:g}, β = 0.1, ρ_k = ρ_0·{args.rate:g}^k. **Penalty share**: ‖2ρ∇²Φ·∇Φ‖ / (‖2ρ∇²Φ·∇Φ‖ + "
        "‖∇L_r‖) of the outer direction (0.5: the two terms balance). **FQ**: TOFU's forget quality against the "
        f"world's retain-only model; **MU**: model utility (the target's: {target['model_utility']:.3f}). "
        f"Every round's share: the JSON lines beside the run ({args.out}).\n\n"
        + "\n".join(lines) + f"\n\n![FQ and MU against ρ_0 and T]({figure.name})\n")


if __name__ == "__main__":
    main()
