import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
sys.path.insert(0, str(TESTS))

# One compute thread per process, forced (not a default a parent may have set): two test workers share two cores,
# and every CLI, DDP and DeepSpeed process they start inherits this environment. Idle OpenMP threads spin, so
# 2 threads per process on a loaded 2-core machine triple wall time. Assets built before the workers start
# (pytest_configure) get both cores explicitly.
for _key, _value in (("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1"), ("TOKENIZERS_PARALLELISM", "false")):
    os.environ[_key] = _value


def shared_folder(tmp_path_factory, name):
    """A folder every test worker of this session sees (the workers' temporary roots share a parent)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    folder.mkdir(exist_ok=True)
    return folder


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: end-to-end runs (CLI subprocesses, kill/resume); CI runs them too")
    import torch

    torch.set_num_threads(1)


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
