"""The real-TOFU world's checks per seed, and the time to build it and run `tofu-demo` from nothing.

    python benchmarks/tofu_world_checks.py [--seeds 0,1,2] [--out runs/world_checks]

Per seed, in a fresh folder: `lit-unlearn tofu-demo --seed S` as a user runs it (world assets, then HAMU with the
quota controller until its target), timed as a whole; then, from the files it wrote:
  (a) the target's forget quality against the retain-only model (forget01; wanted <= 1e-3);
  (b) the retain-only model's loss-MIA AUC between forget01 and holdout01 authors (wanted in [0.30, 0.70] per
      seed, [0.40, 0.60] on average);
  (c) |model utility of the target - of the retain-only model| (wanted <= 0.05);
and the demo's outcome: the step its target was met, the step it ended on, and the verification numbers.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path


def checks(world: Path) -> dict:
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.metrics import TofuEvaluator
    from lit_unlearn.models import CausalLM

    reference = json.loads((world / "retain_only_01_eval.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        target = TofuEvaluator(load_tokenizer(str(world / "tokenizer")), TofuSource(str(world / "data"), "01")
                               .eval_splits(), max_new_tokens=48, gradnorm=False, reference=reference).run(
            CausalLM(name_or_path=str(world / "target")), only=["forget_quality", "model_utility"])
    return {"a_target_fq": target.summary["forget_quality"], "b_retain_only_auc": reference["summary"]["mia/loss_auc"],
            "c_mu_gap": abs(target.summary["model_utility"] - reference["summary"]["model_utility"])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--out", default="runs/world_checks")
    args = ap.parse_args()
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        folder = Path(args.out) / f"seed{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "lit_unlearn", "tofu-demo", "--seed", str(seed),
                               "--trainer.enable_progress_bar=false"], cwd=folder, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if proc.returncode:
            sys.exit(proc.stdout[-2000:] + proc.stderr[-3000:])
        run = folder / "runs/tofu/hamu/latest"
        result = json.loads((run / "results.json").read_text())
        verification = json.loads((run / "tofu_results.json").read_text())["verification"]
        met = [n for n in result.get("notes", []) if "met at step" in n or "never met" in n]
        rows.append({"seed": seed, "seconds": seconds, **checks(folder / f"runs/tofu/worlds/seed{seed}"),
                     "ended_on": result.get("ended_on_step"), "target": met[0] if met else "?",
                     **{k: verification.get(k) for k in ("forget_quality", "model_utility_ratio",
                                                         "forget_vs_retain_only_auc_raw", "privleak")}})
        print(json.dumps(rows[-1], default=str), flush=True)
    print("\n| seed | from nothing (s) | (a) target FQ | (b) retain-only AUC | (c) MU gap | demo: ended on step | FQ | "
          "MU ratio | AUC raw | privleak |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['seed']} | {r['seconds']:.0f} | {r['a_target_fq']:.3g} | {r['b_retain_only_auc']:.3f} | "
              f"{r['c_mu_gap']:.4f} | {r['ended_on']} | {r['forget_quality']:.3g} | {r['model_utility_ratio']:.3f} | "
              f"{r['forget_vs_retain_only_auc_raw']:.3f} | {r['privleak']:.1f} |")
    aucs = [r["b_retain_only_auc"] for r in rows]
    print(f"\n(b) mean {statistics.mean(aucs):.3f} over {len(aucs)} seeds; demo targets: "
          + "; ".join(r["target"] for r in rows))


if __name__ == "__main__":
    main()
