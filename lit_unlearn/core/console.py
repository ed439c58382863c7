"""The tool's own lines on the console: printed once (global rank 0), on stdout, flushed at once."""

from __future__ import annotations

import sys

__all__ = ["say", "fmt"]


def say(message: str) -> None:
    """Print `message` on stdout from the first process only (Lightning's notion of rank zero)."""
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    if getattr(rank_zero_only, "rank", 0) == 0:
        print(message, file=sys.stdout, flush=True)


def fmt(value, spec: str = ".4g", missing: str = "n/a") -> str:
    """A number for a table: floats with `spec`, other values as they print, None as `missing`."""
    if value is None:
        return missing
    return format(value, spec) if isinstance(value, float) else str(value)
