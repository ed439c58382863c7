"""The margins of the reference-free verdict, calibrated on models that never saw the forget set.

On the tiny TOFU world each calibration seed gives a retain-only model per forget level: it never saw the forget
authors, so how far its forget-vs-holdout intervals reach from 0.5 is what "never trained on" looks like with that
many items and authors, author style included. For every level, scoring mode (relative to the base model, or raw),
condition (the model as it is, relearned at each rate and step count, quantised) and attack, every (world, half)
case gives the reach of its pooled interval and the largest reach of its per-author intervals; the margins are the
largest of each over the calibration cases (for relearning, of the worst of its eight rates and step counts), times
one inflation per level that makes a world the margins never saw pass the whole verdict often enough (estimated on
the calibration worlds, each left out in turn), rounded up to 0.01. The calibration seeds are not the test seeds:
docs/generated/holdout_calibration.md gives the pass rates on test worlds, the power, and the margins a model's own
holdout items give (lit_unlearn.verification.full_verdict.self_margins).

`benchmarks/verification/calibrate_holdout_delta.py` writes `holdout_delta.json` beside this file; to recalibrate for
other data, run it on worlds built from that data, or give margins of your own (HoldoutVerification(delta=...,
delta_author=...)).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources

from lit_unlearn.core.errors import UserError

__all__ = ["calibrated_margins", "calibrated_modes", "margin_key", "calibration", "delta_from_bands", "CALIBRATION_FILE",
           "calibrated_levels", "best_modes"]

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


def margin_key(condition: str) -> str:
    """Where a condition's margins are kept: every relearning attack shares one set ("relearning": calibrated on the
    worst of the eight rates and step counts, as the verdict counts the worst), the others their own."""
    return "relearning" if condition.startswith("relearn") else condition


def calibrated_margins(level: str | None, mode: str = "relative", condition: str = "none",
                       attacks=None) -> tuple[dict[str, float], dict[str, float]]:
    """(pooled margins, per-author margins), by attack, calibrated for a forget level, scoring mode and condition."""
    table = calibration().get("margins", {})
    if level not in table:
        raise UserError(f"no calibrated margins for forget level {level!r} (calibrated: {calibrated_levels() or 'none'}"
                        "): pass HoldoutVerification(delta=..., delta_author=...) or delta='self', or calibrate with "
                        "benchmarks/verification/calibrate_holdout_delta.py")
    key = margin_key(condition)
    if mode not in table[level] or key not in table[level][mode]:
        script = "calibrate_paraphrase.py" if key == "paraphrase" else "calibrate_holdout_delta.py"
        raise UserError(f"no calibrated margins for forget{level}, {mode} scoring, condition {condition!r} "
                        f"(calibrated: {sorted(table[level].get(mode, {}))}): calibrate it with "
                        f"benchmarks/verification/{script}, or leave that condition out")
    margins = table[level][mode][key]
    lacking = sorted(set(attacks or ()) - set(margins))
    if lacking:
        raise UserError(f"no calibrated margins for attacks {lacking} at forget{level} ({mode}, {condition}); "
                        f"calibrated: {sorted(margins)}")
    return {a: float(v[0]) for a, v in margins.items()}, {a: float(v[1]) for a, v in margins.items()}


def calibrated_modes(level: str | None, condition: str = "none") -> dict[str, str]:
    """{attack: "relative" or "raw"}: the scoring each attack uses in the "best" mode of a level and condition."""
    calibrated_margins(level, "best", condition)  # the one-line error where it is missing
    return {a: v[2] for a, v in calibration()["margins"][level]["best"][margin_key(condition)].items()}


def best_modes(relative: dict, raw: dict) -> dict:
    """{condition: {attack: [pooled, author, mode]}}: per condition and attack, the scoring whose calibrated margins
    are tighter (the smaller pooled + per-author sum; relative on a tie): a choice made on the calibration worlds,
    whose pass rates the test worlds then measure. Where the base model is given, the verdict never uses a wider
    null than raw scoring would."""
    out: dict = {}
    for condition, rel in relative.items():
        out[condition] = {}
        for attack, (p, a) in rel.items():
            q, b = raw[condition][attack]
            out[condition][attack] = [p, a, "relative"] if p + a <= q + b else [q, b, "raw"]
    return out
