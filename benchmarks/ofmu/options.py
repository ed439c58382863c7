"""OFMU in the paper's form against each named option, on the TOFU world, as docs/findings/ofmu.md reports them.

    python benchmarks/ofmu/options.py [--seed 0] [--level 01] [--rounds 40] [--worlds runs/tofu/worlds]
        [--out runs/ofmu_options] [--write docs/generated/ofmu_options.md]

Four runs of `lit-unlearn unlearn --preset tofu_tiny_ofmu` (finite-difference HVPs) that differ only in the two
options: the paper's form (one joint clip of the outer direction, unbounded inner ascent), `outer_clip=separate`,
`forget_ceiling=holdout` (the inner ascent bounded at the model's own holdout NLL), and both. Reported: the
reference-free verification on the reporting half (band against δ), model utility against the target's, the
forget and retain losses of the run's table, and the retain-only model's forget quality (gold standard).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import command, options, publish  # benchmarks/report.py

VARIANTS = {
    "paper (joint clip, no ceiling)": ["--model.init_args.outer_clip=joint", "--model.init_args.forget_ceiling=null"],
    "outer_clip=separate": ["--model.init_args.outer_clip=separate", "--model.init_args.forget_ceiling=null"],
    "forget_ceiling=holdout": ["--model.init_args.outer_clip=joint", "--model.init_args.forget_ceiling=holdout"],
    "both": ["--model.init_args.outer_clip=separate", "--model.init_args.forget_ceiling=holdout"],
}


def main() -> None:
    ap = options(__doc__)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--level", default="01")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--worlds", default="runs/tofu/worlds")
    ap.add_argument("--out", default="runs/ofmu_options")
    args = ap.parse_args()
    from lit_unlearn.worlds.tofu_world import prepare_tofu_world

    world = prepare_tofu_world(args.worlds, seed=args.seed, levels=(args.level,), log=print)
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", str(os.cpu_count() or 2)))
    rows = []
    for name, overrides in VARIANTS.items():
        folder = Path(args.out) / name.split(" ")[0].replace("=", "_")
        (folder / "runs/tofu").mkdir(parents=True, exist_ok=True)
        link = folder / "runs/tofu/world"
        if not link.exists():
            link.symlink_to(world.folder.resolve(), target_is_directory=True)
        run_args = ["unlearn", "--preset", "tofu_tiny_ofmu", f"--seed_everything={args.seed}",
                   f"--data.init_args.seed={args.seed}", f"--data.init_args.source.init_args.forget_level={args.level}",
                   f"--trainer.max_steps={args.rounds}", "--model.init_args.hvp=finite_difference",
                   "--trainer.enable_progress_bar=false", *overrides]
        done = [p for p in (folder / "runs/tofu/ofmu").glob("version_*") if (p / "holdout_verification.json").is_file()]
        if not done:  # a finished run in this variant's folder is reused
            started = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "lit_unlearn", *run_args], cwd=folder, env=env,
                                  capture_output=True, text=True)
            (folder / "unlearn.log").write_text(proc.stdout + proc.stderr)
            if proc.returncode:
                sys.exit(f"{name}: failed, see {folder / 'unlearn.log'}\n" + proc.stderr[-2000:])
            (folder / "seconds.txt").write_text(f"{time.perf_counter() - started:.0f}\n")
        run = max((folder / "runs/tofu/ofmu").glob("version_*"), key=lambda p: p.stat().st_mtime)
        hv = json.loads((run / "holdout_verification.json").read_text())
        table = {r["split"]: r for r in json.loads((run / "results.json").read_text())["rows"]}
        gold = json.loads((run / "tofu_results.json").read_text())["summary"]
        verdict = hv["after"]["verdict"]
        timing = folder / "seconds.txt"
        rows.append({"variant": name, "band_ratio": verdict["band_ratio"], "pooled": verdict["pooled"]["band"],
                     "delta": hv["delta"], "passed": verdict["passed"], "worst": verdict["worst"],
                     "mu_ratio": hv["after"]["model_utility_ratio"],
                     "forget_loss": (table["forget"]["loss_before"], table["forget"]["loss_after"]),
                     "retain_loss": (table["retain"]["loss_before"], table["retain"]["loss_after"]),
                     "fq": gold.get("forget_quality"),
                     "seconds": int(timing.read_text()) if timing.is_file() else "n/a (not recorded)",
                     "command": "lit-unlearn " + " ".join(run_args)})
        print(json.dumps(rows[-1]), flush=True)
    lines = ["| variant | band ratio | pooled band (δ) | verdict | MU / target's | forget loss | retain loss | gold: forget quality | "
             "time (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['band_ratio']:.3f} | {r['pooled']:.3f} ({r['delta']:.2f}) | "
                     f"{'pass' if r['passed'] else 'FAIL (' + r['worst'] + ')'} | {r['mu_ratio']:.3f} | "
                     f"{r['forget_loss'][0]:.2f} → {r['forget_loss'][1]:.2f} | "
                     f"{r['retain_loss'][0]:.2f} → {r['retain_loss'][1]:.2f} | {r['fq']:.3g} | {r['seconds']} |")
    text = "\n".join(lines)
    publish(text + "\n", args.write,
            f"# OFMU: the paper's form and its named options\n\nGenerated by `{command()}`: world seed {args.seed}, "
            f"forget{args.level}, {args.rounds} rounds each; every run is `{rows[0]['command']}` with the variant's "
            "two options. The verdict and the utility ratio are on the reporting half; forget quality is against "
            "the retain-only model (gold standard, never decided on).\n\n")


if __name__ == "__main__":
    main()
