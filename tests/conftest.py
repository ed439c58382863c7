import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
sys.path.insert(0, str(TESTS))

# Keep the 2-core machines responsive when tests spawn subprocesses; with two test workers (pytest -n 2), one
# thread each.
os.environ.setdefault("OMP_NUM_THREADS", "1" if os.environ.get("PYTEST_XDIST_WORKER") else "2")


def shared_folder(tmp_path_factory, name):
    """A folder every test worker of this session sees (the workers' temporary roots share a parent)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    folder.mkdir(exist_ok=True)
    return folder


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: end-to-end runs (CLI subprocesses, kill/resume); CI runs them too")


@pytest.fixture(scope="session")
def subprocess_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture(scope="session")
def tofu_world(tmp_path_factory):
    """The default TOFU world built from the real release (seed 0, forget01's retain-only model and report), built
    once per session (about 2 minutes on 2 cores) and shared: its folder is the one `tofu-demo --worlds` reads."""
    from filelock import FileLock

    from lit_unlearn.worlds.tofu_world import prepare_tofu_world

    root = shared_folder(tmp_path_factory, "worlds")
    with FileLock(str(root / ".lock")):  # one worker builds, the other waits and reads it
        return prepare_tofu_world(root / "seed0", seed=0, levels=("01",), log=lambda *a: None)
