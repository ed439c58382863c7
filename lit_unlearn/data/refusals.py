"""Refusal answers ("I don't know") for IdkDPO and other methods that teach the model to decline.

TOFU ships `idontknow.jsonl`, 100 hand-written refusals, one per line. `generate_refusals()` builds a set of the
same kind offline from seeded phrase tables, and `load_refusals(path)` reads a user's file: plain text, one
refusal per line, or JSON lines holding a string or an object with an "answer" / "text" field (TOFU's file
is read either way). `refusals("generated")` or `refusals(path)` is what the data module calls.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

from lit_unlearn.core.errors import MissingFileError, UserError

__all__ = ["generate_refusals", "load_refusals", "refusals", "GENERATED"]

GENERATED = "generated"

_OPENINGS = ["I'm not sure", "I don't know", "I have no information on that", "I can't say",
             "I'm afraid I don't know", "That's something I can't answer", "I'm unable to answer that",
             "I honestly don't know", "I have no idea", "I can't help with that"]
_REASONS = ["", ", as I don't have details about it", ", since it is outside what I know",
            ", because I have no reliable information on it", ", as that isn't something I'm aware of",
            ", since I lack the facts needed"]
_CLOSINGS = [".", ". You may want to check another source.", ". Perhaps another source can help.",
             ". I'd rather not guess.", ". Sorry about that."]


def generate_refusals(n: int = 100, seed: int = 0) -> list[str]:
    """`n` distinct refusals (at most 300), a pure function of the seed."""
    combos = list(itertools.product(_OPENINGS, _REASONS, _CLOSINGS))
    if not 1 <= n <= len(combos):
        raise UserError(f"n={n}: the generated refusal set has between 1 and {len(combos)} answers")
    random.Random(seed).shuffle(combos)
    return [f"{o}{r}{c}" for o, r, c in combos[:n]]


def _parse_line(line: str) -> str:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return line
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in ("answer", "text"):
            if isinstance(value.get(key), str):
                return value[key]
    return line


def load_refusals(path: str | Path) -> list[str]:
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"refusal file {path} not found: give a text or JSON-lines file with one refusal "
                               "per line, or use alternate_answers: generated")
    answers = [_parse_line(line.strip()).strip() for line in path.read_text().splitlines() if line.strip()]
    answers = [a for a in answers if a]
    if not answers:
        raise UserError(f"refusal file {path} has no answers (one refusal per line)")
    return answers


def refusals(spec: str | Path, seed: int = 0) -> list[str]:
    """"generated" for the generated set, else the path of a refusal file."""
    return generate_refusals(seed=seed) if str(spec) == GENERATED else load_refusals(spec)
