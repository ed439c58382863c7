"""Decide on one half, report on the other: the forget and holdout items split into a steering half (what a stop
rule or a controller may read during unlearning) and a reporting half (what the final verdict is computed on, and
nothing before it).

Authors stay whole where each half keeps at least two of them (TOFU's forget05/10 and holdout05/10: 10 and 20
authors); with fewer (forget01 and holdout01: 2 authors) each author's items are split instead, so both halves see
both authors. The split is a fixed function of the seed, written into the run's report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lit_unlearn.verification.holdout_equivalence import group_indices

__all__ = ["Halves", "split_halves", "half_verdict", "author_groups", "MIN_AUTHORS_PER_HALF", "ITEMS_PER_AUTHOR"]

MIN_AUTHORS_PER_HALF = 2
ITEMS_PER_AUTHOR = 20  # TOFU's layout: a split's items come author by author, 20 each


def author_groups(rows: list[dict], what: str, items_per_author: int = ITEMS_PER_AUTHOR) -> list:
    """Each row's author: its `author` field, or TOFU's layout (consecutive blocks of `items_per_author`)."""
    if rows and all("author" in r for r in rows):
        return [r["author"] for r in rows]
    if len(rows) % items_per_author:
        from lit_unlearn.core.errors import UserError

        raise UserError(f"the {what} split has {len(rows)} items, not a multiple of items_per_author="
                        f"{items_per_author}: give each row an `author` field (the bootstrap resamples authors) or "
                        "set items_per_author")
    return [i // items_per_author for i in range(len(rows))]


@dataclass(frozen=True)
class Halves:
    steering: tuple[int, ...]   # item indices, ascending
    reporting: tuple[int, ...]
    by: str                     # "author" or "item within author"
    seed: int

    def as_dict(self) -> dict:
        return {"steering": list(self.steering), "reporting": list(self.reporting), "by": self.by, "seed": self.seed}


def split_halves(groups: Sequence, seed: int, min_per_half: int = MIN_AUTHORS_PER_HALF) -> Halves:
    """Split item indices 0..n-1, whose authors are `groups`, into two disjoint halves covering them all."""
    members = group_indices(groups)
    rng = np.random.default_rng(seed)
    steering: list[int] = []
    if len(members) >= 2 * min_per_half:
        order = rng.permutation(len(members))
        for g in order[: len(members) // 2]:
            steering += members[g].tolist()
        by = "author"
    else:
        for items in members:
            if len(items) < 2:
                raise ValueError("an author with a single item cannot be split into two halves")
            steering += items[rng.permutation(len(items))[: len(items) // 2]].tolist()
        by = "item within author"
    chosen = set(steering)
    return Halves(tuple(sorted(steering)), tuple(i for i in range(len(groups)) if i not in chosen), by, seed)


def half_verdict(mia: dict[str, list[float]], groups: dict[str, list], halves: dict[str, Halves], half: str,
                 attacks: list[str], delta: float, delta_author: float, alpha: float = 0.05, n_boot: int = 2000):
    """The verdict (pooled and per forget author) on one half, from per-item attack scores of whole splits
    (`mia`: a report's per_item["mia"], `{side}_{attack}` lists in item order) and each side's authors and
    halves."""
    from lit_unlearn.verification.holdout_equivalence import holdout_verdict

    pick = {side: getattr(halves[side], half) for side in ("forget", "holdout")}
    attacks = [a for a in attacks if f"forget_{a}" in mia and f"holdout_{a}" in mia]
    if not attacks:
        raise ValueError("no per-item attack scores for forget and holdout items")
    scores = {side: {a: [mia[f"{side}_{a}"][i] for i in pick[side]] for a in attacks} for side in pick}
    return holdout_verdict(scores["forget"], scores["holdout"], [groups["forget"][i] for i in pick["forget"]],
                           [groups["holdout"][i] for i in pick["holdout"]], delta, delta_author, alpha, n_boot, seed=0)
