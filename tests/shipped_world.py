"""The shared TOFU world, shipped prebuilt with the package (lit_unlearn/worlds/prebuilt_world.py): its tokenizer,
base, target and forget01 retain-only model and that model's report are copied into the world cache instead of being
trained there, which took 3-6 CPU-minutes of every test run from an empty cache.

The copy is used only when its folder name, seed{S}-{world_key}, is the current builder's (the key covers the recipe,
the seed, the release and the builder's source): a changed builder builds the world as before, and
test_tofu_world.py's test of the shipped copy says to refresh it:

    python tests/shipped_world.py        # the report again where only the evaluation changed (about 20 s),
                                         # else the world afresh (about 4 min on 2 cores); --rebuild: always

Weights trained on one CPU serve the tests on any other: none compares a trained number with a golden one. The
builder itself still runs in the main command, on a one-layer recipe (test_tofu_world.py), and its cache logic is
tested there too."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from lit_unlearn.worlds.prebuilt_world import (MODEL_FILES, MODELS, PREBUILT, REPORT, SEED, TOKENIZER_FILES,
                                               install_prebuilt)

SHIPPED = PREBUILT


def shipped_folder(root) -> Path:
    """Where the shipped copy of the world that `root` would hold for the current builder lies (it may not exist)."""
    from lit_unlearn.worlds.tofu_world import world_folder

    return SHIPPED / world_folder(root, SEED).name


def install_shipped_world(root) -> bool:
    """Copy the shipped world into `root` where it is the current builder's and `root` lacks its parts, under the
    world's lock (the lock prepare_tofu_world takes: never beside a build). True if anything was copied."""
    from filelock import FileLock

    from lit_unlearn.worlds.tofu_world import world_folder

    folder = world_folder(root, SEED)
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        return bool(install_prebuilt(folder))


def prepare_test_world(root, levels=("01",), log=lambda *a: None):
    """The shared test world: the shipped copy where it is current (prepare_tofu_world copies it itself), then
    whatever the builder finds missing."""
    from lit_unlearn.worlds.tofu_world import prepare_tofu_world

    return prepare_tofu_world(root, seed=SEED, levels=levels, log=log)


def ship(build_root: Path, rebuild: bool = False) -> Path:
    """Refresh the shipped copy: where its models are the current builder's (and not `rebuild`), only the
    retain-only model's report, evaluated again under `build_root` if the evaluation code has changed (seconds);
    otherwise the whole world, built afresh there."""
    from lit_unlearn.worlds.tofu_world import prepare_tofu_world

    shipped = shipped_folder(build_root)
    if shipped.is_dir() and not rebuild:
        world = prepare_test_world(build_root)
        shutil.copyfile(world.folder / REPORT, shipped / REPORT)
        return shipped
    world = prepare_tofu_world(build_root, seed=SEED, levels=("01",), fresh=True)
    target = SHIPPED / world.folder.name
    shutil.rmtree(SHIPPED, ignore_errors=True)
    for part in ("tokenizer", *MODELS):
        (target / part).mkdir(parents=True)
        for name in TOKENIZER_FILES if part == "tokenizer" else MODEL_FILES:
            shutil.copyfile(world.folder / part / name, target / part / name)
    shutil.copyfile(world.folder / REPORT, target / REPORT)
    return target


if __name__ == "__main__":
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    with tempfile.TemporaryDirectory() as tmp:
        print(f"shipped: {ship(Path(tmp), rebuild='--rebuild' in sys.argv)}")
