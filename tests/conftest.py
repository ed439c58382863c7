import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
sys.path.insert(0, str(TESTS))

# One compute thread per process, forced (not a default a parent may have set): two test workers share two cores,
# and every CLI, DDP and DeepSpeed process they start inherits this environment. Idle OpenMP threads spin, so
# 2 threads per process on a loaded 2-core machine triple wall time. The shared world's build beside the workers
# (pytest_configure) gets one thread too.
for _key, _value in (("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1"), ("TOKENIZERS_PARALLELISM", "false")):
    os.environ[_key] = _value


def shared_folder(tmp_path_factory, name):
    """A folder every test worker of this session sees (the workers' temporary roots share a parent)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    folder.mkdir(exist_ok=True)
    return folder


# The TOFU world the tests share, cached across sessions under a folder keyed by its recipe, seed, release and the
# source that builds it (lit_unlearn.worlds.tofu_world.world_folder): a changed builder makes a new world. A prebuilt
# copy ships with the package (lit_unlearn/worlds/prebuilt_world.py) and fills an empty cache in seconds.
WORLDS = Path(os.environ.get("LIT_UNLEARN_TEST_WORLDS", Path.home() / ".cache" / "lit-unlearn" / "worlds"))
WORLD_LEVELS = ("01",)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: end-to-end runs (CLI subprocesses, kill/resume); CI runs them too")
    config.addinivalue_line("markers", "extended: minutes-long checks whose property a test in the main command "
                                       "covers (docs/guide/architecture.md lists them); run with `pytest -m "
                                       "extended tests`")
    import torch

    torch.set_num_threads(1)
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # xdist hands out the files in the order of LONGEST_FIRST
    if _is_controller(config) and "not slow" not in (config.option.markexpr or "") and \
            (config.option.markexpr or "").strip() != "extended":
        _WORLD_BUILD.append(_start_world_build())


def pytest_unconfigure(config):
    for build in _WORLD_BUILD:
        _report_world_build(*build)


# The longest files first, so that what is left at the end of a run is short and the two workers finish together
# (test time per file, the README's command with --durations=0 on a 2-core AVX2 machine: 20-195 s for each file
# here, at most 24 for every other). xdist's default order is by the number of tests in a file, which put a 33-second
# one-test file last. The first three do not read the TOFU world, which is built beside them where the shipped copy
# is not the current builder's: about 4 minutes of work before the first test that needs it.
LONGEST_FIRST = ("test_own_job.py", "test_deepspeed.py", "test_cli_and_resume.py", "test_cluster.py",
                 "test_tofu_demo.py", "test_holdout_world.py", "test_bench.py", "test_tofu_world.py",
                 "test_experiments.py", "test_tofu_data.py", "test_gpu_check.py", "test_slurm_scripts.py",
                 "test_preempted_resume.py", "test_distributed_shutdown.py", "test_tofu_eval_units.py",
                 "test_audit.py")
_WORLD_BUILD: list = []


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order
    early = {item.path.name for item in items if "tofu_world" in item.fixturenames} & set(LONGEST_FIRST[:3])
    if early:  # they would wait on the world's build instead of running beside it
        raise pytest.UsageError(f"{sorted(early)} read the TOFU world: move them after the first three files of "
                                "LONGEST_FIRST (tests/conftest.py)")


def _is_controller(config) -> bool:
    """The process that starts the test workers (pytest -n N), not a worker and not a plain run."""
    return not os.environ.get("PYTEST_XDIST_WORKER") and bool(getattr(config.option, "numprocesses", None))


def _start_world_build():
    """Install (tests/shipped_world.py) or build the shared world in a process of its own, one thread, while the
    workers run the files that do not read it (LONGEST_FIRST puts them first). A test that needs the world waits on
    the world's file lock; if this build fails, the first such test builds it (and says why it cannot). Two threads
    alone used to come first, but they ran it only 1.3 times faster than one: beside the tests the same cores do
    more."""
    import subprocess
    import tempfile
    import time

    code = ("import sys, time; t = time.perf_counter(); sys.path.insert(0, sys.argv[3]); "
            "from shipped_world import prepare_test_world as p; "
            "f = p(sys.argv[1], levels=sys.argv[2].split(',')).folder; "
            "print(f, round(time.perf_counter() - t))")
    out = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen([sys.executable, "-c", code, str(WORLDS), ",".join(WORLD_LEVELS), str(TESTS)],
                            env=dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1"),
                            stdout=out, stderr=subprocess.STDOUT, text=True)
    return proc, out, time.perf_counter()


def _report_world_build(proc, out, started) -> None:
    import time

    code = proc.wait()
    out.seek(0)
    lines = out.read().strip().splitlines()
    if code:
        print("\nbuilding the shared TOFU world failed (the tests that read it built it or said why):\n"
              + "\n".join(lines[-30:]))
    else:
        folder, seconds = lines[-1].rsplit(" ", 1)
        print(f"\nshared TOFU world: {folder} ({seconds} s, beside the tests; "
              f"{time.perf_counter() - started:.0f} s since the start)")


@pytest.fixture(scope="session")
def subprocess_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture(scope="session")
def prefork(subprocess_env):
    """Single-process runs forked from a server that has imported torch, Lightning and the commands once
    (tests/prefork.py): real processes, without ~6 CPU-s of imports each."""
    from prefork import Server

    server = Server(subprocess_env)
    yield server
    server.close()


@pytest.fixture
def spawn(prefork, subprocess_env, tmp_path):
    """spawn(fn, args, nprocs): torch.multiprocessing.spawn's contract (fn(rank, *args) in each of nprocs processes,
    all started together, an error if any fails), with the ranks forked from the prefork server. fn must live at the
    top level of a test file, and args must be JSON values."""
    import inspect
    import json

    def run(fn, args, nprocs):
        command = [sys.executable, str(TESTS / "spawn_worker.py"), inspect.getsourcefile(fn), fn.__name__]
        ranks = [prefork.popen([*command, str(rank), json.dumps(list(args))], tmp_path, subprocess_env)
                 for rank in range(nprocs)]
        for rank, proc in enumerate(ranks):
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, f"rank {rank} of {fn.__name__} failed ({proc.returncode}):\n{err[-3000:]}"

    return run


@pytest.fixture(scope="session")
def tofu_world():
    """The default TOFU world from the real release (seed 0, forget01's retain-only model and report): the shipped
    prebuilt copy where it is the current builder's (tests/shipped_world.py), otherwise built beside the first test
    files (or here, under its file lock, in a plain run); cached across sessions in WORLDS, which is the folder
    `tofu-demo --worlds` reads."""
    from shipped_world import prepare_test_world

    return prepare_test_world(WORLDS, levels=WORLD_LEVELS)


@pytest.fixture(scope="session")
def digits_target(tmp_path_factory):
    """A small digits target (ResNet-8, 2 epochs), trained once per session by `lit-unlearn pretrain` called in this
    process (the process is not what these tests are about) and shared by the CLI, cluster and error tests; the
    console script's own pretrain → unlearn is test_cli_and_resume.py's first test."""
    from filelock import FileLock

    from lit_unlearn.cli import main

    folder = shared_folder(tmp_path_factory, "digits_target")
    ckpt = folder / "runs/digits/target/latest/checkpoints/last.ckpt"
    with FileLock(str(folder / ".lock")):
        if not ckpt.is_file():
            cwd = os.getcwd()
            os.chdir(folder)
            try:
                main(["pretrain", "--trainer.max_epochs=2", "--trainer.enable_progress_bar=false",
                      "--model.init_args.network.init_args.depth=8"])
            finally:
                os.chdir(cwd)
    assert ckpt.is_file()
    return ckpt


_TIMELINE = os.environ.get("LIT_UNLEARN_TEST_TIMELINE")  # a file: each test phase's worker, start and end


if _TIMELINE:
    import time as _time

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        t0 = _time.time()
        yield
        with open(_TIMELINE, "a") as f:
            f.write(f"{os.environ.get('PYTEST_XDIST_WORKER', '-')}\t{t0:.2f}\t{_time.time():.2f}\t{item.nodeid}\n")
