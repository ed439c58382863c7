"""The TOFU world of seed 0 on the default recipe, shipped prebuilt with the package: its tokenizer, base, target and
forget01 retain-only model, and that model's report (about 7 MB in lit_unlearn/worlds/prebuilt/). `tofu-demo`, the
bench and the tests copy it into their world folder instead of training it there, which took 3-6 CPU-minutes.

The copy is used only where its folder name, seed{S}-{world_key}, is the current builder's (the key covers the recipe,
the seed, the release and the builder's source): after a change to the builder the world is built as before, and
tests/test_tofu_world.py says to refresh the copy (`python tests/shipped_world.py`). `fresh=True` always builds.
Weights trained on one CPU serve every other: the world is the same world wherever it is read.
"""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["PREBUILT", "SEED", "MODELS", "MODEL_FILES", "TOKENIZER_FILES", "REPORT", "prebuilt_source",
           "install_prebuilt"]

PREBUILT = Path(__file__).resolve().parent / "prebuilt"
SEED = 0
MODELS = ("base", "target", "retain_only_01")
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
               "tokenizer_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
REPORT = "retain_only_01_eval.json"  # evaluated again by prepare_tofu_world where the evaluation code has changed


def prebuilt_source(folder: str | Path) -> Path | None:
    """The shipped copy of the world `folder` is for (the same folder name: the same key), or None."""
    source = PREBUILT / Path(folder).name
    return source if source.is_dir() else None


def install_prebuilt(folder: str | Path) -> list[str]:
    """Copy into the world folder `folder` each part of the shipped copy that it lacks; the parts copied. Each part
    lands under a temporary name and is renamed into place, so an interrupted copy leaves nothing half-written that
    the builder would take for a model. The caller holds the world's lock (prepare_tofu_world's)."""
    from lit_unlearn.storage.files import atomic_path, replace_folder

    folder = Path(folder)
    source = prebuilt_source(folder)
    if source is None:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    copied = []
    for part in ("tokenizer", *MODELS):
        marker = "tokenizer.json" if part == "tokenizer" else "config.json"
        if (folder / part / marker).is_file():
            continue
        partial = folder / f".{part}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        replace_folder(shutil.copytree(source / part, partial), folder / part)
        copied.append(part)
    if not (folder / REPORT).is_file() and (source / REPORT).is_file():
        with atomic_path(folder / REPORT, fsync=False) as tmp:
            shutil.copyfile(source / REPORT, tmp)
        copied.append(REPORT)
    return copied
