"""What the measurements on calibration worlds' retain-only models share (paraphrase_probe_correlation.py,
token_split_reliability.py): the options naming the worlds, seeds and levels; one world's verdict runner and
retain-only model; the loop over levels and seeds; and the correlation of paired scores pooled over a world's items.
Decision data only: these worlds are the calibration's (seeds 100-115), never the test worlds.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from report import options  # benchmarks/report.py (the importing script puts benchmarks/ on the path)

__all__ = ["study_options", "retain_only_world", "over_worlds", "pooled_correlations", "listed"]


def study_options(doc: str):
    """The script's parser (report.options) with --worlds, --seeds and --levels."""
    ap = options(doc)
    ap.add_argument("--worlds", default="runs/tofu/worlds")
    ap.add_argument("--seeds", default="100,101,102")
    ap.add_argument("--levels", default="01,05,10")
    return ap


def retain_only_world(worlds: str, seed: int, level: str, spec=None):
    """(world, its VerdictRunner at `level` relative to its base with margins (0.5, 0.5), its retain-only model in
    eval mode), one thread."""
    import torch

    torch.set_num_threads(1)
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.models import CausalLM
    from lit_unlearn.verification.verdict_runner import VerdictRunner
    from lit_unlearn.worlds.tofu_world import TofuWorld, TofuWorldRecipe, world_folder

    world = TofuWorld(world_folder(worlds, seed), seed, TofuWorldRecipe())
    splits = TofuSource(str(world.data), level).eval_splits()
    extra = {} if spec is None else {"spec": spec}
    runner = VerdictRunner(load_tokenizer(str(world.tokenizer)), splits["forget"], splits["holdout"], level,
                           base=str(world.base), margins=(0.5, 0.5), **extra)
    return world, runner, CausalLM(name_or_path=str(world.retain_only(level))).eval()


def over_worlds(args, measure: Callable[[str, int, str], dict],
                done: Callable[[int, str, dict], str]) -> dict[tuple[int, str], dict]:
    """{(seed, level): measure(worlds, seed, level)} over args.levels, then args.seeds; `done` says what to print
    after each."""
    results = {}
    for level in args.levels.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            results[(seed, level)] = measure(args.worlds, seed, level)
            print(done(seed, level, results[(seed, level)]), flush=True)
    return results


def pooled_correlations(chunks: dict[str, dict[str, list[np.ndarray]]]) -> dict[str, dict[str, float]]:
    """{mode: {attack: Pearson r}} of the two rows of each attack's [2, n] chunks, concatenated over the items."""
    return {mode: {attack: float(np.corrcoef(np.concatenate(parts, axis=1))[0, 1]) for attack, parts in by.items()}
            for mode, by in chunks.items()}


def listed(values) -> str:
    """Per-world values in a table cell."""
    return ", ".join(f"{v:.2f}" for v in values)
