"""From how many authors a side should the verdict's interval resample authors? Measured before adopting a lower
threshold than the verdict's (lit_unlearn.verification.holdout_equivalence.FEW_AUTHORS): how often each interval
holds the true AUC, simulated.

    python benchmarks/verification/author_interval_coverage.py [--sims 400] [--write docs/generated/author_interval_coverage.md]

Each simulated data set has G authors a side (forget and holdout) of m items each; an item's score is its author's
effect plus its own noise, normal, the author's share of the variance s (the calibration worlds show 6-25 %, docs/
findings/verification.md). Both sides draw their authors from the same population, so the true AUC is 0.5 (a model
that never saw the forget authors). The verdict's interval (the (1 − 2α) percentile interval of `group_bootstrap`,
α = 0.05, 1,000 replicates) is computed twice on the same data: resampling authors then items (author-aware), and
resampling items within the authors as they are (item-level, what the verdict does below FEW_AUTHORS). Coverage:
the share of data sets whose interval holds 0.5 (nominal 90 %); width: the mean interval width. The item-level
interval ignores how much authors differ, so its coverage falls as s grows; the author-aware one is honest only
if enough authors are drawn for the percentile interval to mean something.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py
from report import command, options, publish  # benchmarks/report.py

ALPHA = 0.05


def coverage(n_authors: int, items: int, share: float, sims: int, n_boot: int, seed: int) -> dict[str, tuple]:
    """{"author": (coverage, mean width), "item": (...)} over `sims` null data sets."""
    import lit_unlearn.verification.holdout_equivalence as he

    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_authors), items)
    held: dict[str, list[bool]] = {"author": [], "item": []}
    widths: dict[str, list[float]] = {"author": [], "item": []}
    saved = he.FEW_AUTHORS
    try:
        for s in range(sims):
            sides = [np.repeat(rng.normal(0, np.sqrt(share), n_authors), items)
                     + rng.normal(0, np.sqrt(1 - share), n_authors * items) for _ in range(2)]
            for kind, threshold in (("author", 1), ("item", n_authors + 1)):
                he.FEW_AUTHORS = threshold  # 1: always resample authors; above G: never
                reps = he.group_bootstrap({"a": sides[0]}, {"a": sides[1]}, groups, groups, n_boot, seed + s)["a"]
                low, high = np.quantile(reps, [ALPHA, 1 - ALPHA])
                held[kind].append(low <= 0.5 <= high)
                widths[kind].append(high - low)
    finally:
        he.FEW_AUTHORS = saved
    return {k: (float(np.mean(held[k])), float(np.mean(widths[k]))) for k in held}


def main() -> None:
    ap = options(__doc__)
    ap.add_argument("--sims", type=int, default=400)
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--authors", default="2,3,4,5,10,20")
    ap.add_argument("--items", type=int, default=10, help="items per author a side (TOFU's halves: 10)")
    ap.add_argument("--shares", default="0.06,0.15,0.25")
    args = ap.parse_args()
    from lit_unlearn.verification.holdout_equivalence import FEW_AUTHORS

    lines = ["| authors a side | author share s | coverage, author-aware | coverage, item-level | width, author-aware "
             "| width, item-level |", "|---|---|---|---|---|---|"]
    for g in (int(x) for x in args.authors.split(",")):
        for share in (float(x) for x in args.shares.split(",")):
            r = coverage(g, args.items, share, args.sims, args.boot, seed=1000 * g)
            lines.append(f"| {g} | {share:.2f} | {r['author'][0]:.2f} | {r['item'][0]:.2f} | {r['author'][1]:.3f} | "
                         f"{r['item'][1]:.3f} |")
            print(lines[-1], flush=True)
    head = ("# From how many authors a side the interval should resample authors\n\n> Simulated null data sets (true "
            f"AUC 0.5), {args.items} items per author a side, normal scores with an author share s of the variance; "
            f"nominal coverage {1 - 2 * ALPHA:.0%}. The verdict resamples authors from {FEW_AUTHORS} a side "
            f"(FEW_AUTHORS).\n\nCommand: `{command()}`.\n\n")
    publish("\n".join(lines) + "\n", args.write, head)


if __name__ == "__main__":
    main()
