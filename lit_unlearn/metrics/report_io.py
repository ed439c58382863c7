"""Reports in and out: a saved reference report read back (with one-line errors that say how to make one), and
where a standalone evaluation report goes (the console, a JSON file, TensorBoard scalars)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

__all__ = ["finish_report", "load_report"]


def load_report(report: str | Path | dict | None, what: str, how: str, has: Callable[[dict], bool],
                lacks: str) -> dict | None:
    """A saved report (a path or the dict itself), checked: `has(data)` must hold, else a one-line error naming
    the file and `lacks` (what is missing); a missing or unreadable file says `how` to make one."""
    from lit_unlearn.core.errors import MissingFileError, UserError

    if report is None:
        return None
    where = "the reference" if isinstance(report, dict) else str(report)
    if isinstance(report, dict):
        data = report
    else:
        path = Path(report)
        if not path.is_file():
            raise MissingFileError(f"{what} {path} not found: {how}")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise UserError(f"{what} {path} is not JSON ({err.msg}): {how}") from None
    if not isinstance(data, dict) or not has(data):
        raise UserError(f"{where} has no {lacks}: it is not a report saved by {how.split('(')[-1].rstrip(')')}")
    return data


def finish_report(report, prefix: str, save: str | None = None, logdir: str | None = None) -> None:
    """Print the table; with `save` write the JSON, with `logdir` the summary as TensorBoard scalars ({prefix}/...)."""
    print(report.table())
    if save:
        print(f"(saved to {report.save(save)})")
    if logdir:
        from lit_unlearn.reporting.tensorboard import write_scalars

        write_scalars(logdir, {f"{prefix}/{k}": v for k, v in report.summary.items()})
