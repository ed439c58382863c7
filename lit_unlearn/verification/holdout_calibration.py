"""δ, the equivalence margin of the reference-free verification, calibrated on models that never saw the forget set.

On the tiny TOFU world, each calibration seed gives a retain-only model per forget level: it never saw the forget
authors, so whatever band its forget-vs-holdout intervals need is what "never trained on" looks like with that many
items and authors, author style differences included. For each level, every (seed, half) case gives the band its
pooled intervals need and the band its per-author intervals need (`HoldoutVerdict`); δ (pooled) and δ_author are
the largest of each, rounded up to 0.01. The calibration seeds are not the test seeds: the pass rates on the test
worlds (docs/generated/holdout_calibration.md) are measured on models δ never saw.

`benchmarks/calibrate_holdout_delta.py` runs it and writes `holdout_delta.json` beside this file; to recalibrate for
other data, run it on worlds built from that data, or pass `delta=` to HoldoutVerification.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources

from lit_unlearn.errors import UserError

__all__ = ["calibrated_delta", "calibration", "delta_from_bands", "CALIBRATION_FILE"]

CALIBRATION_FILE = "holdout_delta.json"


def delta_from_bands(bands: list[float]) -> float:
    """The smallest δ (a multiple of 0.01) that every calibration case's band fits in."""
    if not bands:
        raise ValueError("no calibration cases")
    return min(0.5, math.ceil(round(max(bands), 9) * 100) / 100)


@lru_cache(maxsize=1)
def calibration() -> dict:
    """The packaged calibration: {"delta": {level: δ}, "cases": ..., "command": ...}."""
    path = resources.files("lit_unlearn.verification") / CALIBRATION_FILE
    if not path.is_file():
        return {"delta": {}}
    return json.loads(path.read_text())


def calibrated_delta(level: str | None) -> tuple[float, float]:
    """(δ pooled, δ per author) calibrated for a forget level."""
    table = calibration().get("delta", {})
    if level not in table:
        raise UserError(f"no calibrated δ for forget level {level!r} (calibrated: {sorted(table) or 'none'}): pass "
                        "HoldoutVerification(delta=..., delta_author=...), or calibrate with "
                        "benchmarks/calibrate_holdout_delta.py")
    return float(table[level]["pooled"]), float(table[level]["author"])
