"""Would the paraphrased questions add power as further probes of the same forget items? Measured before adopting:
how strongly an item's score under its original question and under its paraphrase agree, for models that never saw
the forget authors (the retain-only models of calibration worlds: decision data, never the test worlds).

    python benchmarks/verification/paraphrase_probe_correlation.py [--worlds runs/tofu/worlds] [--seeds 100,101,102]
        [--levels 01,05,10] [--write docs/generated/paraphrase_probe_correlation.md]

Per attack: the Pearson correlation ρ over the forget items (both halves) of the two scores, raw and relative to the
base model (the base's score of the same question subtracted), and what averaging the two probes per item would
give the forget side: its item noise shrinks by (1 + ρ)/2, i.e. 2/(1 + ρ) times as many independent items (the
holdout side has no paraphrases in TOFU and keeps its count). A ρ near 1 means the paraphrase repeats the item and
adds nothing; only a low ρ makes the second probe worth its correlated interval.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, the folders
from report import publish  # benchmarks/report.py  # noqa: E402
from verification.retain_only_study import (  # noqa: E402
    listed, over_worlds, pooled_correlations, retain_only_world, study_options)

CONDITIONS = ["none", "paraphrase"]


def correlations(worlds: str, seed: int, level: str) -> dict[str, dict[str, float]]:
    """{mode: {attack: ρ}} for the retain-only model of one world and level."""
    from lit_unlearn.metrics.membership_attacks import ATTACKS
    from lit_unlearn.verification.full_verdict import VerdictSpec

    _, runner, network = retain_only_world(worlds, seed, level, VerdictSpec(paraphrase=True))
    pairs: dict[str, dict[str, list[np.ndarray]]] = {"raw": {}, "relative": {}}
    for half in ("steering", "reporting"):
        scored = runner.score(network, half, CONDITIONS)
        none, para = scored["none"], scored["paraphrase"]
        assert none.forget_idx == para.forget_idx == list(range(len(runner.items[half].forget)))
        base = runner.base_scores(half)
        for attack in (a for a in ATTACKS if a != "learned"):  # per-item scores (the learned attack is fitted on them)
            key = f"forget_{attack}"
            a, b = np.asarray(none.mia[key], float), np.asarray(para.mia[key], float)
            pairs["raw"].setdefault(attack, []).append(np.stack([a, b]))
            if base is not None and para.base is not None and key in base and key in para.base:
                rel = np.stack([a - np.asarray(base[key], float), b - np.asarray(para.base[key], float)])
                pairs["relative"].setdefault(attack, []).append(rel)
    return pooled_correlations(pairs)


def table(results: dict[tuple[int, str], dict[str, dict[str, float]]]) -> str:
    levels = sorted({level for _, level in results})
    attacks = sorted({a for r in results.values() for a in r["raw"]})
    lines = ["| level | attack | ρ raw (per world) | ρ relative (per world) | forget items gained by averaging, "
             "relative (×, median world) |", "|---|---|---|---|---|"]
    for level in levels:
        worlds = [(seed, r) for (seed, lv), r in sorted(results.items()) if lv == level]
        for attack in attacks:
            raw = [r["raw"].get(attack, float("nan")) for _, r in worlds]
            rel = [r["relative"].get(attack, float("nan")) for _, r in worlds]
            gain = 2.0 / (1.0 + float(np.nanmedian(rel))) if not all(np.isnan(rel)) else float("nan")
            lines.append(f"| forget{level} | {attack} | {listed(raw)} | {listed(rel)} | {gain:.2f} |")
    return "\n".join(lines)


def main() -> None:
    args = study_options(__doc__).parse_args()
    results = over_worlds(args, correlations, lambda seed, level, _: f"world {seed}, forget{level}: done")
    head = ("# The paraphrased questions as further probes: how much they repeat the original\n\n> Per attack, the "
            "correlation of a forget item's score under its original and its paraphrased question, for the "
            "retain-only models of calibration worlds (never the test worlds).\n> Averaging the two probes per "
            "item would give the forget side 2/(1 + ρ) times as many independent items.\n\nCommand: `python "
            f"benchmarks/verification/paraphrase_probe_correlation.py --seeds {args.seeds} --levels {args.levels} "
            "--write docs/generated/paraphrase_probe_correlation.md`.\n\n")
    publish(table(results) + "\n", args.write, head)


if __name__ == "__main__":
    main()
