"""Robustness against compute: the distillation stage's settings (α, noise scale, base or noise, epochs, soft or
hard targets) after an unlearning method, and the lines that read no teacher, each point's full verdict (relearning
included) and model utility against its compute as a share of the retain-only fine-tune's, on validation worlds
only; the target (0 %) and the retain-only model (100 %) as the two ends.

    python benchmarks/bench/robustness_compute.py [--worlds runs/tofu/worlds] [--seeds 100] [--level 01]
        [--teacher tofu_tiny_holdout_match] [--points default|first_stage|lines] [--out runs/robustness]
        [--write docs/generated/...]

Per world: the teacher is `lit-unlearn tofu-demo --preset TEACHER` on that world (its own folder, reused); every point
distils it (lit_unlearn.distill.distill_model, a run folder per point, reused) and judges the student with the full
verdict on the reporting half, with the calibrated margins (lit_unlearn.verification), and its model utility over the
target's; compute counts the teacher's unlearning steps (3 units per token read) plus the distillation's, over the
retain-only fine-tune's units. The "lines" points read no teacher: the retain-only fine-tune on a shorter schedule
(lit_unlearn.worlds.retain_finetune) and the target's importance reset plus a retain repair
(lit_unlearn.algorithms.importance_reset). Writes a table (markdown) and the figure (compute share against the
relearning part's band ratio, and against model utility).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import command, options  # benchmarks/report.py

REPO = Path(__file__).resolve().parents[2]

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
        ("noise α=0.8, β=0.3, 2 epochs", {"alpha": 0.8, "beta": 0.3, "epochs": 2.0}),
        ("noise α=0.8, β=1, 2 epochs", {"alpha": 0.8, "beta": 1.0, "epochs": 2.0}),
    ],
    # a few of the same points after another first stage (e.g. --teacher tofu_tiny_hamu_holdout_match)
    "first_stage": [
        ("noise α=0.5, 1 epoch", {"alpha": 0.5, "epochs": 1.0}),
        ("noise α=0.5, 2 epochs", {"alpha": 0.5, "epochs": 2.0}),
        ("base α=1, 2 epochs", {"alpha": 1.0, "init": "base", "epochs": 2.0}),
    ],
    # the two lines a stage has to beat, neither reading the teacher: the retain-only fine-tune on a shorter
    # schedule (a model that never saw the forget set), and the target with its most forget-specific coordinates
    # (diagonal Fisher, forget over retain) put back to the base's values, then repaired on the retain set
    "lines": [
        ("retrain, 2 epochs", {"stage": "retrain", "epochs": 2}),
        ("retrain, 4 epochs", {"stage": "retrain", "epochs": 4}),
        ("retrain, 6 epochs", {"stage": "retrain", "epochs": 6}),
        ("retrain, 4 epochs, lr 3e-3", {"stage": "retrain", "epochs": 4, "lr": 3e-3}),   # a faster rate buys none?
        ("reset 5 %, repair 1 epoch", {"stage": "reset", "share": 0.05, "epochs": 1}),
        ("reset 30 %, no repair", {"stage": "reset", "share": 0.3, "epochs": 0}),
        ("reset 30 %, repair 1 epoch", {"stage": "reset", "share": 0.3, "epochs": 1}),
        ("reset 60 %, repair 1 epoch", {"stage": "reset", "share": 0.6, "epochs": 1}),
        ("reset 60 %, repair 3 epochs", {"stage": "reset", "share": 0.6, "epochs": 3}),
        # the control: the same shares drawn at random, to tell selection from the share's own effect
        ("random reset 30 %, repair 1 epoch", {"stage": "reset", "share": 0.3, "epochs": 1, "select": "random"}),
        ("random reset 60 %, repair 1 epoch", {"stage": "reset", "share": 0.6, "epochs": 1, "select": "random"}),
    ],
}
FISHER_RETAIN_ITEMS = 200   # retain items read for F_retain (the forget set is read whole)


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


def reset_and_repair(world, level: str, tok, source, fields: dict, out: Path) -> tuple[Path, int]:
    """The target with the `share` of coordinates of highest forget-over-retain Fisher put back to the base's
    values (lit_unlearn.algorithms.importance_reset; `select: random` draws them at random instead), then `epochs`
    of the retain fine-tune; (model, units)."""
    import torch

    from lit_unlearn.algorithms.importance_reset import fisher_diagonal, importance_scores, reset_to_reference
    from lit_unlearn.algorithms.losses import mean_nll
    from lit_unlearn.algorithms.token_passes import training_units
    from lit_unlearn.core.batches import logits_and_labels
    from lit_unlearn.data.tofu import FORGET_SPLITS, QAFinetuneDataModule
    from lit_unlearn.models import CausalLM
    from lit_unlearn.worlds.retain_finetune import finetune_on_retain
    from lit_unlearn.worlds.tofu_world import KNOWLEDGE

    units_file = out / "reset_units.json"
    if not (out / "reset" / "config.json").is_file():
        network, base = CausalLM(name_or_path=str(world.target)), CausalLM(name_or_path=str(world.base))
        read = {"tokens": 0}

        def count(batch) -> None:
            read["tokens"] += int(batch["attention_mask"].sum())

        def batches(splits):
            dm = QAFinetuneDataModule(source, tok, splits=tuple(splits), template="plain",
                                      max_length=world.recipe.max_length, batch_size=4, seed=0)
            dm.setup("fit")
            return dm.train_dataloader()

        loss = lambda net, b: mean_nll(*logits_and_labels(net, b))  # noqa: E731
        size = lambda b: int(b["input_ids"].shape[0])  # noqa: E731
        with torch.enable_grad():
            forget = fisher_diagonal(network, batches([FORGET_SPLITS[level][0]]), loss, on_batch=count)
            retain = fisher_diagonal(network, batches([FORGET_SPLITS[level][1], *KNOWLEDGE]), loss,
                                     max_items=FISHER_RETAIN_ITEMS, items_of=size, on_batch=count)
        scores = importance_scores(forget, retain)
        if fields.get("select") == "random":  # the control: the same share, no selection (the Fisher passes kept)
            g = torch.Generator().manual_seed(0)
            scores = {n: torch.rand(s.shape, generator=g, dtype=s.dtype) for n, s in scores.items()}
        reset_to_reference(network, base, scores, fields["share"])
        network.save_pretrained(out / "reset")
        tok.save_pretrained(str(out / "reset"))
        units_file.write_text(json.dumps({"fisher_units": training_units(read["tokens"])}))
    units = json.loads(units_file.read_text())["fisher_units"]
    if not fields["epochs"]:
        return out / "reset", units
    model = finetune_on_retain(world, level, out / "repaired", fields["epochs"], tok, init_from=out / "reset")
    return model, units


def measure(worlds: Path, seed: int, level: str, preset: str, points, out: Path) -> list[dict]:
    import torch

    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    from lit_unlearn.algorithms.token_passes import training_units
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.distill import DistillSpec, distill_model
    from lit_unlearn.distill.stage import distillation_data, finetune_units
    from lit_unlearn.metrics import TofuEvaluator
    from lit_unlearn.metrics.membership_attacks import STATISTICS
    from lit_unlearn.models import CausalLM
    from lit_unlearn.verification.verdict_runner import VerdictRunner
    from lit_unlearn.worlds.retain_finetune import finetune_on_retain
    from lit_unlearn.worlds.tofu_world import prepare_tofu_world

    world = prepare_tofu_world(worlds, seed=seed, levels=(level,), log=lambda *a: None)
    distils = any(fields.get("stage", "distill") == "distill" for _, fields in points)
    run = teacher_run(worlds, seed, level, preset, out) if distils else None  # the lines read no teacher
    tokens_read = json.loads((run / "results.json").read_text()).get("tokens_read") if run else None
    source, tok = TofuSource(str(world.data), level), load_tokenizer(str(world.tokenizer))
    splits = source.eval_splits()
    runner = VerdictRunner(tok, splits["forget"], splits["holdout"], level, base=str(world.base))
    tokens_per_epoch, ft_units = finetune_units(distillation_data(source, tok, DistillSpec()),
                                                DistillSpec().finetune_epochs)
    teacher_units = training_units(tokens_read or 0)
    folder = out / (f"seed{seed}_l{level}_{preset}" if distils else f"seed{seed}_l{level}_lines")
    cache_dir = out / "verdicts" / folder.name
    rows = []

    def utility(model_dir) -> float:
        """Model utility (TOFU's), cached beside the verdicts by the model's folder."""
        cache = out / "utility" / f"{Path(model_dir).resolve()}".strip("/").replace("/", "__")
        if not cache.is_file():
            report = TofuEvaluator(tok, splits, max_length=world.recipe.max_length,
                                   max_new_tokens=world.recipe.eval_max_new_tokens).run(
                CausalLM(name_or_path=str(model_dir)))
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps({"model_utility": report.summary["model_utility"]}))
        return json.loads(cache.read_text())["model_utility"]

    target_mu = utility(world.target)

    def judge(label: str, model_dir, units: float | None, reads=frozenset(STATISTICS) - {"learned"}) -> dict:
        cache = cache_dir / (label.replace(" ", "_").replace("/", "-") + ".json")
        if cache.is_file():
            row = json.loads(cache.read_text())
        else:
            v = runner.verdict(CausalLM(name_or_path=str(model_dir)).eval(), "reporting", reads=reads)
            row = {"label": label, "seed": seed, "level": level, "compute_share": units,
                   "band_ratio": v.band_ratio, "passed": v.passed, "headline": v.headline(),
                   **{f"{p}": (v.part(p) or {}).get("band_ratio") for p in ("before", "relearning", "quantisation")},
                   "worst": v.worst}
        if "mu_ratio" not in row:  # a verdict cached before utility was measured gains it once
            row["mu_ratio"] = utility(model_dir) / target_mu
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(row, indent=1, default=float))
        return row

    rows.append(judge("target (nothing removed)", world.target, 0.0, reads=frozenset()))
    rows.append(judge("retain-only model (the gold standard)", world.retain_only(level), 1.0))
    if distils:
        rows.append(judge(f"teacher: {preset}", run / "model", teacher_units / ft_units))
    for label, fields in points:
        fields = dict(fields)
        stage = fields.pop("stage", "distill")
        where = folder / label.replace(" ", "_").replace("/", "-")
        if stage == "retrain":   # never saw the forget set: reads nothing of it
            model = finetune_on_retain(world, level, where, fields["epochs"], tok, lr=fields.get("lr"))
            row = judge(label, model, training_units(tokens_per_epoch, fields["epochs"]) / ft_units,
                        reads=frozenset())
        elif stage == "reset":   # reads the forget set's NLL gradients
            model, units = reset_and_repair(world, level, tok, source, fields, where)
            row = judge(label, model, (units + training_units(tokens_per_epoch, fields["epochs"])) / ft_units,
                        reads=frozenset({"loss"}))
        else:
            result = distill_model(run / "model", source, tok, DistillSpec(**fields), where, base=str(world.base))
            row = judge(label, result["model"], (teacher_units + result["units"]) / result["finetune_units"])
        row["spec"] = {"stage": stage, **fields}
        rows.append(row)
    return rows


def meets_all(row: dict) -> bool:
    """The issue's three targets at once: the full verdict, utility >= 0.95 x the target's, compute <= 50 %."""
    return bool(row["passed"]) and row["mu_ratio"] >= 0.95 and (row["compute_share"] or 0.0) <= 0.5


def table(rows: list[dict]) -> str:
    fmt = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731
    lines = ["| world | point | compute / retain-only fine-tune | before any attack | after relearning | at 4 bits | "
             "MU / target's | verdict (what fails it) | all three targets |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        w = r["worst"]
        verdict = "FORGOTTEN" if r["passed"] else f"not forgotten ({w['attack']}, {w['scope']}, {w['condition']})"
        share = "n/a" if r["compute_share"] is None else f"{r['compute_share']:.0%}"
        lines.append(f"| {r['seed']} | {r['label']} | {share} | {fmt(r['before'])} | {fmt(r['relearning'])} | "
                     f"{fmt(r['quantisation'])} | {fmt(r['mu_ratio'])} | {verdict} | "
                     f"{'yes' if meets_all(r) else 'no'} |")
    return "\n".join(lines)


def figure(rows: list[dict], path: Path) -> None:
    from lit_unlearn.reporting.plotting import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in rows:
        if r["compute_share"] is None:
            continue
        stage = (r.get("spec") or {}).get("stage", "distill")
        marker = ("*" if r["label"].startswith(("retain-only", "target")) else
                  "s" if r["label"].startswith("teacher") else {"retrain": "^", "reset": "v"}.get(stage, "o"))
        for ax, key in zip(axes, ("relearning", "mu_ratio")):
            ax.scatter(r["compute_share"], r[key], marker=marker, s=70)
            ax.annotate(r["label"], (r["compute_share"], r[key]), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
    axes[0].axhline(1.0, color="grey", lw=0.8, ls="--")
    axes[1].axhline(0.95, color="grey", lw=0.8, ls="--")
    for ax in axes:
        ax.axvline(0.5, color="grey", lw=0.8, ls=":")
        ax.set_xlabel("compute / the retain-only fine-tune's (token passes)")
    axes[0].set_ylabel("band ratio after relearning (≤ 1 passes)")
    axes[1].set_ylabel("model utility / the target's (≥ 0.95 wanted)")
    fig.suptitle("o distillation, ^ retrain on a shorter schedule, v importance reset + repair, * the target and "
                 "the retain-only model (the two ends), ■ teacher", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main() -> None:
    ap = options(__doc__)
    ap.add_argument("--worlds", default="runs/tofu/worlds")
    ap.add_argument("--seeds", default="100")
    ap.add_argument("--level", default="01")
    ap.add_argument("--teacher", default="tofu_tiny_holdout_match")
    ap.add_argument("--points", default="default", choices=sorted(POINTS))
    ap.add_argument("--out", default="runs/robustness")
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
        command_line = command()
        title = ("the lines a robust stage has to beat" if args.points == "lines" else
                 f"the distillation stage after {args.teacher}")
        out.write_text(f"# Robustness against compute: {title}, forget{args.level}\n\nGenerated by `{command_line}` "
                       "(validation worlds only). Each point's full verdict on the reporting half (calibrated "
                       "margins) and model utility over the target's; compute counts the unlearning steps (3 "
                       "token-pass units per token read), the distillation (3 per student token, 1 per teacher "
                       "token), a reset's Fisher passes (3 per token read) and any retain fine-tune (3 per token) "
                       "over the retain-only fine-tune's (3 per token, 8 epochs). Figure: "
                       f"[{out.with_suffix('.png').name}]({out.with_suffix('.png').name}).\n\n" + text + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
