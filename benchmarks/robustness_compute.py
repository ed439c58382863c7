"""Robustness against compute: the distillation stage's settings (α, noise or base, epochs, soft or hard targets)
after an unlearning method, each point's full verdict (relearning included) against its compute as a share of the
retain-only fine-tune's, on validation worlds only; the retain-only model (100 %) and the unlearned teacher as the
two ends.

    python benchmarks/robustness_compute.py [--worlds runs/tofu/worlds] [--seeds 100] [--level 01]
        [--teacher tofu_tiny_holdout_match] [--points default] [--out runs/robustness] [--write docs/generated/...]

Per world: the teacher is `lit-unlearn tofu-demo --preset TEACHER` on that world (its own folder, reused); every point
distils it (lit_unlearn.distill.distill_model, a run folder per point, reused) and judges the student with the full
verdict on the reporting half, with the calibrated margins (lit_unlearn.verification); compute counts the teacher's
unlearning steps (3 units per token read) plus the distillation's, over the retain-only fine-tune's units. Writes a
table (markdown) and the figure (compute share against the relearning part's band ratio, and before any attack).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# (label, DistillSpec fields)
POINTS = {
    "default": [
        ("noise α=0.5, 1 epoch", {"alpha": 0.5, "epochs": 1.0}),
        ("noise α=0.5, 2 epochs", {"alpha": 0.5, "epochs": 2.0}),
        ("noise α=0.8, 1 epoch", {"alpha": 0.8, "epochs": 1.0}),
        ("noise α=0.8, 2 epochs", {"alpha": 0.8, "epochs": 2.0}),
        ("noise α=0.8, 3 epochs", {"alpha": 0.8, "epochs": 3.0}),
        ("noise α=1, 3 epochs", {"alpha": 1.0, "epochs": 3.0}),
        ("base α=1, 2 epochs", {"alpha": 1.0, "init": "base", "epochs": 2.0}),
        ("noise α=0.8, 2 epochs, hard targets", {"alpha": 0.8, "epochs": 2.0, "targets": "hard"}),
        ("noise α=0.8, 2 epochs, answers' labels ½", {"alpha": 0.8, "epochs": 2.0, "label_weight": 0.5}),
    ],
    # a few of the same points after another first stage (e.g. --teacher tofu_tiny_hamu_holdout_match)
    "first_stage": [
        ("noise α=0.5, 1 epoch", {"alpha": 0.5, "epochs": 1.0}),
        ("noise α=0.5, 2 epochs", {"alpha": 0.5, "epochs": 2.0}),
        ("base α=1, 2 epochs", {"alpha": 1.0, "init": "base", "epochs": 2.0}),
    ],
}


def teacher_run(worlds: Path, seed: int, level: str, preset: str, out: Path) -> Path:
    """The teacher's run folder: tofu-demo with `preset` on the world (made once)."""
    folder = out / f"teacher_{preset}_seed{seed}_l{level}"
    done = list(folder.glob("runs/tofu/*/version_*/model/config.json"))
    if not done:
        folder.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([sys.executable, "-m", "lit_unlearn", "tofu-demo", "--seed", str(seed), "--level", level,
                               "--worlds", str(worlds.resolve()), "--preset", preset,
                               "--trainer.enable_progress_bar=false"], cwd=folder, capture_output=True, text=True)
        (folder / "tofu-demo.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode:
            sys.exit(f"teacher failed: see {folder / 'tofu-demo.log'}\n{proc.stderr[-2000:]}")
        done = list(folder.glob("runs/tofu/*/version_*/model/config.json"))
    return done[0].parent.parent


def measure(worlds: Path, seed: int, level: str, preset: str, points, out: Path) -> list[dict]:
    import torch

    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.distill import DistillSpec, distill_model
    from lit_unlearn.distill.stage import distillation_data, finetune_units
    from lit_unlearn.metrics.membership_attacks import STATISTICS
    from lit_unlearn.models import CausalLM
    from lit_unlearn.verification.verdict_runner import VerdictRunner
    from lit_unlearn.worlds.tofu_world import prepare_tofu_world

    world = prepare_tofu_world(worlds, seed=seed, levels=(level,), log=lambda *a: None)
    run = teacher_run(worlds, seed, level, preset, out)
    tokens_read = json.loads((run / "results.json").read_text()).get("tokens_read")
    source, tok = TofuSource(str(world.data), level), load_tokenizer(str(world.tokenizer))
    splits = source.eval_splits()
    runner = VerdictRunner(tok, splits["forget"], splits["holdout"], level, base=str(world.base))
    _, ft_units = finetune_units(distillation_data(source, tok, DistillSpec()), DistillSpec().finetune_epochs)
    teacher_units = 3 * (tokens_read or 0)
    rows = []

    def judge(label: str, network, units: float | None) -> dict:
        cache = out / "verdicts" / f"seed{seed}_l{level}_{preset}" / (label.replace(" ", "_").replace("/", "-") +
                                                                     ".json")
        if cache.is_file():
            return json.loads(cache.read_text())
        v = runner.verdict(network.eval(), "reporting", reads=frozenset(STATISTICS) - {"learned"})
        row = {"label": label, "seed": seed, "level": level, "compute_share": units,
               "band_ratio": v.band_ratio, "passed": v.passed, "headline": v.headline(),
               **{f"{p}": (v.part(p) or {}).get("band_ratio") for p in ("before", "relearning", "quantisation")},
               "worst": v.worst}
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(row, indent=1, default=float))
        return row

    rows.append(judge("retain-only model (the gold standard)", CausalLM(name_or_path=str(world.retain_only(level))),
                      1.0))
    rows.append(judge(f"teacher: {preset}", CausalLM(name_or_path=str(run / "model")), teacher_units / ft_units))
    for label, fields in points:
        spec = DistillSpec(**fields)
        result = distill_model(run / "model", source, tok, spec, out / f"seed{seed}_l{level}_{preset}" /
                               label.replace(" ", "_").replace("/", "-"), base=str(world.base))
        row = judge(label, CausalLM(name_or_path=result["model"]),
                    (teacher_units + result["units"]) / result["finetune_units"])
        row["spec"] = fields
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    fmt = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731
    lines = ["| world | point | compute / retain-only fine-tune | before any attack | after relearning | at 4 bits | "
             "verdict (what fails it) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        w = r["worst"]
        verdict = "FORGOTTEN" if r["passed"] else f"not forgotten ({w['attack']}, {w['scope']}, {w['condition']})"
        share = "n/a" if r["compute_share"] is None else f"{r['compute_share']:.0%}"
        lines.append(f"| {r['seed']} | {r['label']} | {share} | {fmt(r['before'])} | {fmt(r['relearning'])} | "
                     f"{fmt(r['quantisation'])} | {verdict} |")
    return "\n".join(lines)


def figure(rows: list[dict], path: Path) -> None:
    from lit_unlearn.reporting.plotting import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in rows:
        if r["compute_share"] is None:
            continue
        marker = "*" if r["label"].startswith("retain-only") else "s" if r["label"].startswith("teacher") else "o"
        ax.scatter(r["compute_share"], r["relearning"], marker=marker, s=70)
        ax.annotate(r["label"], (r["compute_share"], r["relearning"]), fontsize=6, xytext=(3, 3),
                    textcoords="offset points")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.axvline(0.5, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("compute / the retain-only fine-tune's (token passes)")
    ax.set_ylabel("band ratio after relearning (≤ 1 passes)")
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="runs/tofu/worlds")
    ap.add_argument("--seeds", default="100")
    ap.add_argument("--level", default="01")
    ap.add_argument("--teacher", default="tofu_tiny_holdout_match")
    ap.add_argument("--points", default="default", choices=sorted(POINTS))
    ap.add_argument("--out", default="runs/robustness")
    ap.add_argument("--write", default=None, help="a markdown file for the table (the figure beside it, .png)")
    args = ap.parse_args()
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        rows += measure(Path(args.worlds), seed, args.level, args.teacher, POINTS[args.points], Path(args.out))
    text = table(rows)
    print(text)
    if args.write:
        out = Path(args.write)
        out.parent.mkdir(parents=True, exist_ok=True)
        figure(rows, out.with_suffix(".png"))
        command = "python benchmarks/robustness_compute.py " + " ".join(sys.argv[1:])
        out.write_text(f"# Robustness against compute: the distillation stage after {args.teacher}, forget"
                       f"{args.level}\n\nGenerated by `{command}` (validation worlds only). Each point's full verdict on "
                       "the reporting half (calibrated margins); compute counts the unlearning steps (3 token-pass "
                       "units per token read) and the distillation (3 per student token, 1 per teacher token) over "
                       f"the retain-only fine-tune's (3 per token, 8 epochs). Figure: [{out.with_suffix('.png').name}]"
                       f"({out.with_suffix('.png').name}).\n\n" + text + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
