"""benchmarks/bench_backfill_worst_auc.py finds the run that made a bench row by the identity its run.json records:
the same method, world, level and seed, the row's hyper-parameters and its step budget, never a neighbour's."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_backfill_worst_auc import find_run  # noqa: E402


def _run(root: Path, name: str, lr: float, steps: int) -> Path:
    folder = root / name / "version_0"
    folder.mkdir(parents=True)
    model = folder / "model"
    (folder / "run.json").write_text(json.dumps({
        "identity": {"model": {"init_args": {"lr": lr}}, "trainer": {"max_steps": steps}},
        "final_model": str(model)}))
    return model


def test_the_row_finds_its_own_run_among_neighbours(tmp_path):
    method = "OFMU (separate clip, holdout ceiling)"  # parentheses and a comma in the name
    base = f"{method}-world_seed1-forget05-seed1-"
    mine = _run(tmp_path, base + "aaaa", 0.01, 13)
    _run(tmp_path, base + "bbbb", 0.03, 13)  # another grid point
    _run(tmp_path, base + "cccc", 0.01, 7)  # another budget
    _run(tmp_path, f"{method}-world_seed2-forget05-seed2-dddd", 0.01, 13)  # another seed
    row = {"method": method, "world": "world_seed1", "level": "05", "seed": 1, "point": {"inner_lr": 0.01},
           "steps": 13}
    # the point is matched on the run's init_args: inner_lr is absent from these, so nothing matches
    assert find_run([tmp_path], row) is None
    row["point"] = {"lr": 0.01}
    assert find_run([tmp_path], row) == mine
    row["steps"] = 9
    assert find_run([tmp_path], row) is None
