"""The real TOFU release (Maini et al., 2024; MIT licence), shipped with the package so that it works offline.

`load_release()` reads every split from `tofu_release/tofu.tar.xz` (421,932 bytes) into memory once per process;
`write_release(folder)` writes them out in the hub's layout (`{split}.json`, what `TofuSource(folder)` reads).
The licence notice and the citation are in `tofu_release/LICENSE` and `tofu_release/README.md`.

TOFU's structure, which the worlds built from it rely on: 200 fictitious authors × 20 questions in `full`, in
author order; `forget01/05/10` are the last 2/10/20 authors and `retain99/95/90` the rest; `retain_perturbed`
holds the first 20 authors' items with paraphrased and perturbed answers; `holdout01/05/10` are other fictitious
authors, never in `full`.
"""

from __future__ import annotations

import io
import json
import lzma
import tarfile
from functools import lru_cache
from importlib import resources
from pathlib import Path

__all__ = ["RELEASE_SPLITS", "ITEMS_PER_AUTHOR", "N_AUTHORS", "load_release", "release_split", "write_release",
           "author_items"]

RELEASE_SPLITS = (
    "full", "retain90", "retain95", "retain99", "forget01", "forget05", "forget10", "forget01_perturbed",
    "forget05_perturbed", "forget10_perturbed", "retain_perturbed", "real_authors", "real_authors_perturbed",
    "world_facts", "world_facts_perturbed", "holdout01", "holdout05", "holdout10", "idontknow",
)
ITEMS_PER_AUTHOR, N_AUTHORS = 20, 200


@lru_cache(maxsize=1)
def load_release() -> dict[str, list]:
    """{split: rows} of the whole release (idontknow: a list of refusal strings)."""
    blob = (resources.files("lit_unlearn.data") / "tofu_release" / "tofu.tar.xz").read_bytes()
    out: dict[str, list] = {}
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(blob))) as archive:
        for member in archive.getmembers():
            if not member.isfile():
                continue
            name = Path(member.name).name
            text = archive.extractfile(member).read().decode("utf-8")
            if name.endswith(".jsonl"):  # idontknow.jsonl: one refusal per line, as plain text
                out[name.removesuffix(".jsonl")] = [line.strip() for line in text.splitlines() if line.strip()]
            else:
                out[name.removesuffix(".json")] = json.loads(text)
    return out


def release_split(name: str) -> list:
    """One split's rows (a copy: callers may change them)."""
    release = load_release()
    if name not in release:
        from lit_unlearn.core.errors import UserError

        raise UserError(f"TOFU has no split {name!r}; its splits: {', '.join(RELEASE_SPLITS)}")
    return [dict(r) if isinstance(r, dict) else r for r in release[name]]


def author_items(authors) -> list[dict]:
    """The `full` items of the given author numbers (0-199, TOFU's order), 20 per author, in that order."""
    full = load_release()["full"]
    return [dict(full[ITEMS_PER_AUTHOR * a + i]) for a in authors for i in range(ITEMS_PER_AUTHOR)]


def write_release(folder: str | Path) -> Path:
    """Every split as `{split}.json` (and `idontknow.jsonl`) in `folder`: TOFU in the hub's layout."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in load_release().items():
        if name == "idontknow":
            (folder / "idontknow.jsonl").write_text("".join(r + "\n" for r in rows))
        else:
            (folder / f"{name}.json").write_text(json.dumps(rows, indent=1))
    return folder
