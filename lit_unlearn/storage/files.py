"""Writing files so that a reader (or a resumed run) never sees half of one: write a temporary sibling, flush it to
disk, rename it over the target (atomic on one filesystem), and sync the folder entry. Symbolic links are swapped
the same way. Only the standard library: the base layer."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text", "atomic_symlink", "replace_folder"]


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # not supported on this platform / filesystem
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | Path, fsync: bool = True) -> Iterator[Path]:
    """A temporary sibling of `path` to write into; renamed over `path` when the block ends without an error,
    removed otherwise. fsync: flush the file and the folder entry to disk (a checkpoint must survive a crash)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        if fsync:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if fsync:
        _fsync_dir(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes, fsync: bool = True) -> None:
    with atomic_path(path, fsync) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | Path, text: str, fsync: bool = False) -> None:
    with atomic_path(path, fsync) as tmp:
        tmp.write_text(text)


def atomic_symlink(link: str | Path, target: str | Path) -> bool:
    """Point `link` at `target` (a relative link when `target` is relative), swapping any existing link at once.
    False where the filesystem has no symbolic links."""
    link = Path(link)
    tmp = link.with_name(f".{link.name}-{os.getpid()}")
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target, target_is_directory=True)
        os.replace(tmp, link)
        return True
    except OSError:
        tmp.unlink(missing_ok=True)
        return False


def replace_folder(written: str | Path, folder: str | Path) -> Path:
    """Move a completely written folder to `folder`, replacing what was there (folders cannot be renamed over a
    non-empty one: the old one is removed just before)."""
    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    Path(written).rename(folder)
    return folder
