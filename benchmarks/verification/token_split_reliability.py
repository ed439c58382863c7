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
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py
from report import command, options, publish  # benchmarks/report.py

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
    import torch

    torch.set_num_threads(1)
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.models import CausalLM
    from lit_unlearn.verification.verdict_runner import VerdictRunner
    from lit_unlearn.worlds.tofu_world import TofuWorld, TofuWorldRecipe, world_folder

    world = TofuWorld(world_folder(worlds, seed), seed, TofuWorldRecipe())
    splits = TofuSource(str(world.data), level).eval_splits()
    runner = VerdictRunner(load_tokenizer(str(world.tokenizer)), splits["forget"], splits["holdout"], level,
                           base=str(world.base), margins=(0.5, 0.5))
    network = CausalLM(name_or_path=str(world.retain_only(level))).eval()
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
    return {mode: {attack: float(np.corrcoef(np.concatenate(parts, axis=1))[0, 1]) for attack, parts in by.items()}
            for mode, by in chunks.items()}


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
            lines.append(f"| forget{level} | {attack} | {', '.join(f'{v:.2f}' for v in raw)} | "
                         f"{', '.join(f'{v:.2f}' for v in rel)} | {1 - med:.2f} | {gain} |")
    return "\n".join(lines)


def main() -> None:
    ap = options(__doc__)
    ap.add_argument("--worlds", default="runs/tofu/worlds")
    ap.add_argument("--seeds", default="100,101,102")
    ap.add_argument("--levels", default="01,05,10")
    args = ap.parse_args()
    results = {}
    for level in args.levels.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            results[(seed, level)] = reliabilities(args.worlds, seed, level)
            print(f"seed {seed} forget{level}: " + ", ".join(
                f"{a} {spearman_brown(r):.2f}" for a, r in results[(seed, level)]["relative"].items()), flush=True)
    head = ("# How much of an item's attack score is token noise\n\n> Per attack, the reliability R of an item's "
            "score from all its scored answer tokens (Spearman-Brown from two halves: odd and even positions), for "
            "the retain-only models of calibration worlds (never the test worlds).\n> 1 - R is the share of the "
            "score's variance across items that more tokens of the same items could remove.\n\nCommand: `"
            f"{command()}`.\n\n")
    publish(table(results) + "\n", args.write, head)


if __name__ == "__main__":
    main()
