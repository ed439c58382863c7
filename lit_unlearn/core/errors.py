"""Errors that are the user's to fix (a bad value, a missing file, an impossible request).

The command line prints a `UserError` as one line on stderr, without a traceback, and exits with code 2
(`--debug` shows the traceback). Anything else is the tool's own fault and keeps its traceback.
`UserError` subclasses ValueError, so library callers can catch it as one.

Configuration parsers (jsonargparse, behind LightningCLI) catch exceptions raised while they build objects and
re-raise them with a long validation report around the message. Every UserError therefore records its
message, and `user_error_message` finds it again inside whatever wrapped it.
"""

from __future__ import annotations

__all__ = ["UserError", "MissingFileError", "RunFailed", "user_error_message", "did_you_mean"]

_RAISED: list[str] = []  # messages of the UserErrors created in this process (most recent last)


class UserError(ValueError):
    """Bad input: the message says what is wrong, the value, and how to fix it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        _RAISED.append(str(message))
        del _RAISED[:-20]


def did_you_mean(name: str, known) -> str:
    """" (did you mean 'x'?)" for the closest of `known` to a misspelt `name`, or "" when none is close."""
    import difflib

    close = difflib.get_close_matches(str(name), list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder the user pointed at (or must create first) does not exist."""


class RunFailed(RuntimeError):
    """A run that started and could not go on (its weights diverged): one line on stderr and exit code 1, with
    where its last good checkpoint is; the run folder keeps everything written before."""


def _chain(err: BaseException):
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def user_error_message(err: BaseException) -> str | None:
    """The one-line message to show for `err` if it is (or wraps) a user error, else None."""
    for e in _chain(err):
        if isinstance(e, UserError):
            return str(e)
    text = str(err)
    for message in reversed(_RAISED):  # wrapped by a config parser: the recorded message is inside its text
        if message and message in text:
            return message
    for e in _chain(err):  # the config parser's own complaints (unknown key, wrong type)
        if type(e).__module__.startswith("jsonargparse") or type(e).__name__ == "ArgumentError":
            return _first_lines(str(e))
    return None


def _first_lines(text: str, n: int = 3) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return " ".join(lines[:n])
