"""The margins of the reference-free verdict, calibrated on models that never saw the forget set.

On the tiny TOFU world each calibration seed gives a retain-only model per forget level: it never saw the forget
authors, so how far its forget-vs-holdout intervals reach from 0.5 is what "never trained on" looks like with that
many items and authors, author style included. For every level, scoring mode (relative to the base model, or raw),
condition (the model as it is, relearned at each rate and step count, quantised) and attack, every (world, half)
case gives the reach of its pooled interval and the largest reach of its per-author intervals; the margins are the
largest of each over the calibration cases, rounded up to 0.01. The calibration seeds are not the test seeds:
docs/generated/holdout_calibration.md gives the pass rates on test worlds, the power, and the margins a model's own
holdout items give (lit_unlearn.verification.full_verdict.self_margins).

`benchmarks/calibrate_holdout_delta.py` writes `holdout_delta.json` beside this file; to recalibrate for other data,
run it on worlds built from that data, or give margins of your own (HoldoutVerification(delta=..., delta_author=...)).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources

from lit_unlearn.errors import UserError

__all__ = ["calibrated_margins", "calibration", "delta_from_bands", "CALIBRATION_FILE", "calibrated_levels"]

CALIBRATION_FILE = "holdout_delta.json"


def delta_from_bands(bands: list[float]) -> float:
    """The smallest δ (a multiple of 0.01) that every calibration case's band fits in."""
    if not bands:
        raise ValueError("no calibration cases")
    return min(0.5, math.ceil(round(max(bands), 9) * 100) / 100)


@lru_cache(maxsize=1)
def calibration() -> dict:
    """The packaged calibration: {"margins": {level: {mode: {condition: {attack: [pooled, author]}}}}, ...}."""
    path = resources.files("lit_unlearn.verification") / CALIBRATION_FILE
    if not path.is_file():
        return {"margins": {}}
    return json.loads(path.read_text())


def calibrated_levels() -> list[str]:
    return sorted(calibration().get("margins", {}))


def calibrated_margins(level: str | None, mode: str = "relative", condition: str = "none",
                       attacks=None) -> tuple[dict[str, float], dict[str, float]]:
    """(pooled margins, per-author margins), by attack, calibrated for a forget level, scoring mode and condition."""
    table = calibration().get("margins", {})
    if level not in table:
        raise UserError(f"no calibrated margins for forget level {level!r} (calibrated: {calibrated_levels() or 'none'}"
                        "): pass HoldoutVerification(delta=..., delta_author=...) or delta='self', or calibrate with "
                        "benchmarks/calibrate_holdout_delta.py")
    if mode not in table[level] or condition not in table[level][mode]:
        raise UserError(f"no calibrated margins for forget{level}, {mode} scoring, condition {condition!r} "
                        f"(calibrated: {sorted(table[level].get(mode, {}))}): calibrate it with "
                        "benchmarks/calibrate_holdout_delta.py")
    margins = table[level][mode][condition]
    lacking = sorted(set(attacks or ()) - set(margins))
    if lacking:
        raise UserError(f"no calibrated margins for attacks {lacking} at forget{level} ({mode}, {condition}); "
                        f"calibrated: {sorted(margins)}")
    return {a: float(v[0]) for a, v in margins.items()}, {a: float(v[1]) for a, v in margins.items()}
