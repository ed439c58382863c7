"""HAMU's named options against the reference-free verification, on the TOFU world, as docs/findings/hamu.md reports them.

    python benchmarks/hamu/forgetting_options.py [--seed 0] [--level 01] [--worlds runs/tofu/worlds]
        [--out runs/hamu_options] [--write docs/generated/hamu_options.md]

`lit-unlearn tofu-demo --preset tofu_tiny_hamu` (HAMU with the quota controller, steered by the holdout NLL and
stopped by the verification)
four times, differing only in HAMU's options: the paper's form (no forget ceiling), `forget_ceiling=holdout` (the
preset's default), and that plus `forget_entropy` or `preconditioner=adam`. Reported per run: the stop rule's
outcome, the reporting half's AUC of every attack, the pooled and per-author bands against their margins, utility
against the target's, and each forget author's mean answer NLL beside the holdout items'.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import command, options, publish  # benchmarks/report.py

VARIANTS = {
    "paper (no ceiling)": ["--model.init_args.forget_ceiling=null"],
    "forget_ceiling=holdout (default)": [],
    "+ forget_entropy": ["--model.init_args.forget_entropy=true"],
    "+ preconditioner=adam": ["--model.init_args.preconditioner=adam"],
}


def main() -> None:
    ap = options(__doc__)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--level", default="01")
    ap.add_argument("--worlds", default="runs/tofu/worlds")
    ap.add_argument("--out", default="runs/hamu_options")
    args = ap.parse_args()
    rows = []
    for name, overrides in VARIANTS.items():
        folder = Path(args.out) / "".join(c if c.isalnum() else "_" for c in name).strip("_")
        folder.mkdir(parents=True, exist_ok=True)
        run_args = ["tofu-demo", "--preset", "tofu_tiny_hamu", "--seed", str(args.seed), "--level", args.level,
                   "--worlds", str(Path(args.worlds).resolve()), "--trainer.enable_progress_bar=false", *overrides]
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "lit_unlearn", *run_args], cwd=folder, capture_output=True,
                              text=True)
        (folder / "tofu-demo.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode:
            sys.exit(f"{name}: failed, see {folder / 'tofu-demo.log'}\n" + proc.stderr[-2000:])
        run = max((folder / "runs/tofu/hamu").glob("version_*"), key=lambda p: p.stat().st_mtime)
        hv = json.loads((run / "holdout_verification.json").read_text())
        after = hv["after"]["verdict"]
        per_item, split = hv["after"]["per_item"], hv["split"]
        forget = per_item["forget_loss"]
        authors: dict[int, list[float]] = {}
        for value, index in zip(forget, split["forget"]["reporting"]):
            authors.setdefault(index // 20, []).append(value)
        stop = [line for line in proc.stdout.splitlines() if "StopAtTarget '" in line]
        rows.append({"variant": name, "stop": stop[-1].lstrip("- ") if stop else "?",
                     "auc": {a: iv["auc"] for a, iv in after["pooled"]["intervals"].items()},
                     "pooled": after["pooled"]["band"], "author": max(v["band"] for v in after["authors"].values()),
                     "ratio": after["band_ratio"], "passed": after["passed"], "worst": after["worst"],
                     "mu": hv["after"]["model_utility_ratio"],
                     "author_nll": {a: statistics.mean(v) for a, v in sorted(authors.items())},
                     "holdout_nll": statistics.mean(per_item["holdout_loss"]), "delta": hv["delta"],
                     "delta_author": hv["delta_author"], "seconds": round(time.perf_counter() - started),
                     "command": "lit-unlearn " + " ".join(run_args).replace(str(Path(args.worlds).resolve()),
                                                                             args.worlds)})
        print(json.dumps(rows[-1]), flush=True)
    attacks = list(rows[0]["auc"])
    head = ["variant", "stop rule", *[f"{a} AUC" for a in attacks], "pooled band", "worst author band", "band ratio",
            "verdict", "MU / target's", "forget NLL per author (holdout)", "time (s)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        nll = ", ".join(f"{v:.2f}" for v in r["author_nll"].values()) + f" ({r['holdout_nll']:.2f})"
        lines.append("| " + " | ".join([r["variant"], r["stop"].replace("|", "/"), *[f"{r['auc'][a]:.3f}" for a in attacks],
                                        f"{r['pooled']:.3f}", f"{r['author']:.3f}", f"{r['ratio']:.3f}",
                                        "pass" if r["passed"] else f"FAIL ({r['worst']})", f"{r['mu']:.3f}", nll,
                                        str(r["seconds"])]) + " |")
    text = "\n".join(lines)
    publish(text + "\n", args.write,
            f"# HAMU's forgetting options against the reference-free verification\n\nGenerated by `{command()}`: "
            f"world seed {args.seed}, forget{args.level}; each row is `{rows[1]['command']}` with the variant's "
            f"options. Margins: δ = {rows[0]['delta']:.2f} (pooled), δ_author = {rows[0]['delta_author']:.2f}; "
            "everything on the reporting half.\n\n")


if __name__ == "__main__":
    main()
