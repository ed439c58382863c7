"""Would more of each item's answer tokens add power? Measured before adopting: how much of an item's attack score
is token noise, for models that never saw the forget authors (the retain-only models of calibration worlds:
decision data, never the test worlds).

    python benchmarks/verification/token_split_reliability.py [--worlds runs/tofu/worlds] [--seeds 100,101,102]
        [--levels 01,05,10] [--write docs/generated/token_split_reliability.md]

Each forget and holdout item's scored answer tokens are split into two halves (odd and even positions); each half
is scored by the attack as if it were the answer (the project's own per-item functions,
lit_unlearn.metrics.membership_attacks.scoring_attack_scores, on the half's tokens), raw and relative to the base
model's score of the same half. Over the items (both sides, both of the verdict's halves) the Pearson correlation r
of the two half-scores gives, by Spearman-Brown, the reliability of the score from all tokens, R = 2r / (1 + r): the
share of its variance across items that is the item's own (its difficulty, its author, forget or holdout), not the
sampling of its tokens. 1 - R is all that more tokens of the same items could remove: with infinitely many, the
items' score variance would fall to R of what it is, i.e. at most 1 / R times as many effectively independent
items. Loss, entropy and rank already average every answer token; Min-K % and Min-K %++ keep the 40 % most
surprising, and their R beside the loss's says what reading all tokens instead costs or gains. (zlib is the loss
over the text's compressed length: its R is the loss's. The gradient norm needs a backward pass per half; not
measured.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, the folders
from report import command, publish  # benchmarks/report.py  # noqa: E402
from verification.retain_only_study import (  # noqa: E402
    listed, over_worlds, pooled_correlations, retain_only_world, study_options)

ATTACKS = ("loss", "min_k", "min_k_plus_plus", "entropy_mean", "entropy_spread", "token_rank")


def half_scores(evaluator, network, rows: list[dict]) -> dict[str, np.ndarray]:
    """{attack: [2, n_items]}: each item's score from its odd-position and from its even-position answer tokens
    (the tokens the evaluator's convention scores)."""
    import torch

    from lit_unlearn.metrics.membership_attacks import scoring_attack_scores
    from lit_unlearn.metrics.tofu.scoring import AnswerStats

    conv = evaluator.convention
    evaluator.scoring.new_run()
    with torch.no_grad():
        stats = evaluator.scoring.stats(network, [(r["question"], r["answer"]) for r in rows], torch.device("cpu"))
    evaluator.scoring.new_run()
    out = []
    for parity in (0, 1):
        halves = []
        for st in stats:
            sc = st.scored(conv.drop_last_token)
            pick = lambda t: None if t is None else t[parity::2]  # noqa: E731
            logp = pick(sc.logp)
            halves.append(AnswerStats(float(-logp.double().mean()), logp, pick(sc.mu), pick(sc.var),
                                      pick(sc.correct), pick(sc.label_ids), pick(sc.rank)))
        texts = [r["answer"] for r in rows]
        scores = scoring_attack_scores(halves, texts, evaluator.min_k, conv.k_rounding, conv.var_floor)
        out.append({a: np.asarray(scores[a], float) for a in ATTACKS})
    return {a: np.stack([out[0][a], out[1][a]]) for a in ATTACKS}


def reliabilities(worlds: str, seed: int, level: str) -> dict[str, dict[str, float]]:
    """{mode: {attack: r (half-split correlation)}} for the retain-only model of one world and level."""
    from lit_unlearn.models import CausalLM

    world, runner, network = retain_only_world(worlds, seed, level)
    base = CausalLM(name_or_path=str(world.base)).eval()
    chunks: dict[str, dict[str, list[np.ndarray]]] = {"raw": {}, "relative": {}}
    for half in ("steering", "reporting"):
        items = runner.items[half]
        evaluator = runner._evaluator(items.forget, items.holdout)
        for rows in (items.forget, items.holdout):
            mine, theirs = half_scores(evaluator, network, rows), half_scores(evaluator, base, rows)
            for attack in ATTACKS:
                chunks["raw"].setdefault(attack, []).append(mine[attack])
                chunks["relative"].setdefault(attack, []).append(mine[attack] - theirs[attack])
    return pooled_correlations(chunks)


def spearman_brown(r: float) -> float:
    return 2 * r / (1 + r)


def table(results: dict[tuple[int, str], dict[str, dict[str, float]]]) -> str:
    levels = sorted({level for _, level in results})
    lines = ["| level | attack | R raw (per world) | R relative (per world) | token noise 1 − R, relative (median "
             "world) | most items gained by more tokens, relative (1/R) |", "|---|---|---|---|---|---|"]
    for level in levels:
        worlds = [r for (_, lv), r in sorted(results.items()) if lv == level]
        for attack in ATTACKS:
            raw = [spearman_brown(r["raw"][attack]) for r in worlds]
            rel = [spearman_brown(r["relative"][attack]) for r in worlds]
            med = float(np.median(rel))
            gain = f"{1 / med:.2f}" if med > 0 else "– (R ≤ 0: the score is token noise)"
            lines.append(f"| forget{level} | {attack} | {listed(raw)} | {listed(rel)} | {1 - med:.2f} | {gain} |")
    return "\n".join(lines)


def main() -> None:
    args = study_options(__doc__).parse_args()
    results = over_worlds(args, reliabilities, lambda seed, level, r: f"seed {seed} forget{level}: " + ", ".join(
        f"{a} {spearman_brown(v):.2f}" for a, v in r["relative"].items()))
    head = ("# How much of an item's attack score is token noise\n\n> Per attack, the reliability R of an item's "
            "score from all its scored answer tokens (Spearman-Brown from two halves: odd and even positions), for "
            "the retain-only models of calibration worlds (never the test worlds).\n> 1 - R is the share of the "
            "score's variance across items that more tokens of the same items could remove.\n\nCommand: `"
            f"{command()}`.\n\n")
    publish(table(results) + "\n", args.write, head)


if __name__ == "__main__":
    main()
