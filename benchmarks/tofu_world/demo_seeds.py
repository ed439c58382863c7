"""`lit-unlearn tofu-demo` per world seed, as a user runs it, and the table docs/findings/tofu-world.md shows.

    python benchmarks/tofu_world/demo_seeds.py [--level 01] [--seeds 0,1,2] [--worlds runs/tofu/worlds]
        [--out runs/demo_seeds] [--write docs/generated/tofu_demo_01.md] [-- EXTRA tofu-demo ARGUMENTS]

Per seed: `lit-unlearn tofu-demo --seed S --level L` in its own folder (worlds shared through --worlds), timed
as a whole, then from the files it wrote: the step the target was met and the step the run ended on, the looks
at the steering half, the reporting half's verdict before any attack (each attack's AUC, the band ratio) and the
full verdict (after relearning and at 4 bits; what fails it; on the attacks the method does not read), model
utility against the target's, and the gold standard (the retain-only model on the same half; forget quality), which
no decision read. Also the world's own checks: the target's forget quality against the retain-only model and their utility
gap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import command, options  # benchmarks/report.py

REPO = Path(__file__).resolve().parents[2]


def run_seed(seed: int, level: str, worlds: Path, out: Path, extra: list[str]) -> dict:
    """Run tofu-demo for one seed in its own folder (reused when that folder already holds its finished run)."""
    folder = out / f"level{level}_seed{seed}"
    command = ["tofu-demo", "--seed", str(seed), "--level", level, "--worlds", str(worlds.resolve()),
               "--trainer.enable_progress_bar=false", *extra]
    log = folder / "tofu-demo.log"
    if not (log.is_file() and list(folder.glob("runs/tofu/*/version_*/holdout_verification.json"))):
        folder.mkdir(parents=True, exist_ok=True)
        started = time.time()
        proc = subprocess.run([sys.executable, "-m", "lit_unlearn", *command], cwd=folder, capture_output=True,
                              text=True)
        log.write_text(proc.stdout + proc.stderr)
        (folder / "seconds.txt").write_text(f"{time.time() - started:.0f}\n")
        if proc.returncode:
            sys.exit(f"seed {seed}: tofu-demo failed (exit {proc.returncode}); see {log}\n" + proc.stderr[-2000:])
    run = max((folder / "runs/tofu").glob("*/version_*"), key=lambda p: p.stat().st_mtime)
    timing = folder / "seconds.txt"
    # a run from before this script timed runs: from its folder's creation to its log's last write
    seconds = int(timing.read_text()) if timing.is_file() else round(log.stat().st_mtime - (folder / "runs").stat().st_ctime)
    hv = json.loads((run / "holdout_verification.json").read_text())
    tofu = json.loads((run / "tofu_results.json").read_text())
    start = json.loads((run / "tofu_start.json").read_text())
    stop = [line for line in log.read_text().splitlines() if "StopAtTarget '" in line]
    after = hv["after"]["verdict"]
    gold = (hv.get("gold_standard") or {}).get("verdict") or {}
    per_item, split = hv["after"]["per_item"], hv["split"]
    authors: dict[int, list[float]] = {}
    for value, index in zip(per_item["forget_loss"], split["forget"]["reporting"]):
        authors.setdefault(index // 20, []).append(value)
    full = hv["after"].get("full") or {}
    parts = full.get("parts") or {}
    return {"seed": seed, "level": level, "seconds": seconds, "stop": stop[-1].lstrip("- ") if stop else "?",
            "looks": hv["looks"], "ratio": after["band_ratio"], "passed": after["passed"],
            "full_ratio": full.get("band_ratio"), "full_passed": full.get("passed"),
            "relearn": (parts.get("relearning") or {}).get("band_ratio"),
            "int4": (parts.get("quantisation") or {}).get("band_ratio"), "unread": full.get("unread_band_ratio"),
            "fails_on": "-" if full.get("passed") else "{attack} ({scope}), {condition}".format(**full["worst"])
            if full else "n/a",
            "worst": after["worst"], "auc": {a: iv["auc"] for a, iv in after["pooled"]["intervals"].items()},
            "mu_ratio": hv["after"]["model_utility_ratio"], "gold_ratio": gold.get("band_ratio"),
            "gold_passed": gold.get("passed"), "fq": tofu["summary"].get("forget_quality"),
            "target_fq": start["summary"].get("forget_quality"), "target_ratio": (hv.get("before") or {}).get(
                "band_ratio"), "author_nll": [sum(v) / len(v) for _, v in sorted(authors.items())],
            "holdout_nll": sum(per_item["holdout_loss"]) / len(per_item["holdout_loss"]),
            "command": "lit-unlearn " + " ".join(command)}


# The compact table's columns; everything else a row holds goes to the CSV beside it.
TERMS = ("**Band ratio**: over every attack, the widest reach of its forget-vs-holdout AUC interval from 0.5, divided by "
         "that attack's margin (calibrated on models that never saw the forget authors); ≤ 1 passes. **Before any "
         "attack**: the model as it is; **after relearning**: the worst of eight fine-tunes on some forget authors, "
         "measured on the others; **at 4 bits**: the weights rounded to 4 bits. **Verdict**: FORGOTTEN when all three "
         "pass. **MU / target's**: model utility (TOFU's nine-number harmonic mean) over the target's. The per-attack "
         "AUCs, the stop rule's summary, its looks, the per-author NLLs and the gold standard's and target's numbers "
         "are in the CSV.")


def csv_rows(rows: list[dict]) -> list[dict]:
    """Every number of every row, one column each (the CSV beside the table)."""
    out = []
    for r in rows:
        row = {"seed": r["seed"], "verdict": verdict_of(r), "fails_on": r["fails_on"],
               "band_ratio_before": r["ratio"], "band_ratio_relearning": r["relearn"], "band_ratio_4bit": r["int4"],
               "unread_attacks_band_ratio": r["unread"], "mu_over_target": r["mu_ratio"], "looks": r["looks"],
               "stop_rule": r["stop"], **{f"{a}_auc": v for a, v in r["auc"].items()},
               "forget_nll_per_author": " ".join(f"{v:.3f}" for v in r["author_nll"]), "holdout_nll": r["holdout_nll"],
               "gold_band_ratio": r["gold_ratio"], "gold_forget_quality": r["fq"],
               "target_band_ratio": r["target_ratio"], "target_forget_quality": r["target_fq"],
               "seconds": r["seconds"]}
        out.append(row)
    return out


def verdict_of(r: dict) -> str:
    if r["full_passed"] is not None:
        return "FORGOTTEN" if r["full_passed"] else "not forgotten"
    return "pass before any attack" if r["passed"] else "FAIL"


def table(rows: list[dict]) -> str:
    """The table a reader needs: the verdict, where it fails, the three parts' band ratios, utility, time."""
    fmt = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731
    head = ["seed", "verdict", "fails on (attack, scope, condition)", "band ratio before any attack",
            "after relearning", "at 4 bits", "MU / target's", "time (s)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["seed"], verdict_of(r), r["fails_on"], f"{r['ratio']:.3f}", fmt(r["relearn"]), fmt(r["int4"]),
                 f"{r['mu_ratio']:.3f}", r["seconds"]]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    before = sum(r["passed"] and r["mu_ratio"] >= 0.95 for r in rows)
    full = sum(bool(r["full_passed"]) and r["mu_ratio"] >= 0.95 for r in rows)
    lines += ["", f"Passes before any attack with model utility ≥ 0.95× the target's: {before} of {len(rows)} seeds; "
              f"the full verdict (relearning and 4 bits too): {full} of {len(rows)}.", "", TERMS]
    return "\n".join(lines)


def write(out: Path, level: str, command: str, run_command: str, stop_rule: str, rows: list[dict]) -> None:
    """The page (what was run, the stop rule once, the table, the terms) and its CSV beside it."""
    import csv

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# tofu-demo at forget{level}, per world seed\n\nGenerated by `{command}`; each row is "
                   f"`{run_command}` with its seed, stopped by {stop_rule}. The verdicts and the utility ratio are on "
                   "the reporting half, which no decision read. Every number of each row: "
                   f"[{out.with_suffix('.csv').name}]({out.with_suffix('.csv').name}).\n\n" + table(rows) + "\n")
    with out.with_suffix(".csv").open("w", newline="") as f:
        data = csv_rows(rows)
        writer = csv.DictWriter(f, list(data[0]))
        writer.writeheader()
        writer.writerows(data)


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = options(__doc__)
    ap.add_argument("--level", default="01")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--worlds", default="runs/tofu/worlds")
    ap.add_argument("--out", default="runs/demo_seeds")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 2))
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        rows.append(run_seed(seed, args.level, Path(args.worlds), Path(args.out), extra))
        print(json.dumps(rows[-1]), flush=True)
    text = table(rows)
    print(text)
    if args.write:
        command_line = command()
        out = Path(args.write)
        rule = rows[0]["stop"].split(":")[0].removeprefix("StopAtTarget ")
        write(out, args.level, command_line, rows[0]["command"].replace(str(Path(args.worlds).resolve()), args.worlds),
              f"StopAtTarget {rule}", rows)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
