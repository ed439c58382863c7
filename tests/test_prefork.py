"""The forked runs the slow tests use (tests/prefork.py) behave as `subprocess` runs of the same command: exit
status, death by a signal, captured output, environment, working folder, sys.argv and sys.path, and overlapping
runs that talk to each other."""

import os
import signal
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

SCRIPT = """
import os, sys, signal
print("argv", sys.argv[1:], "cwd", os.getcwd(), "var", os.environ.get("PREFORK_VAR"), flush=True)
print("path0", sys.path[0], file=sys.stderr, flush=True)
how = sys.argv[1]
if how == "signal":
    os.kill(os.getpid(), signal.SIGKILL)
if how == "raise":
    raise ValueError("boom")
if how == "pair":
    import socket
    path = sys.argv[2]
    if sys.argv[3] == "listen":
        s = socket.socket(socket.AF_UNIX); s.bind(path); s.listen(1); c, _ = s.accept(); print(c.recv(5).decode())
    else:
        import time
        while not os.path.exists(path):
            time.sleep(0.01)
        c = socket.socket(socket.AF_UNIX); c.connect(path); c.sendall(b"hello")
sys.exit(int(sys.argv[2]) if how == "exit" else 0)
"""


@pytest.mark.parametrize("how, args", [("exit", ["3"]), ("exit", ["0"]), ("signal", []), ("raise", [])])
def test_a_forked_run_ends_as_a_fresh_one_does(how, args, prefork, tmp_path, subprocess_env):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(subprocess_env, PREFORK_VAR="seen")
    command = [sys.executable, str(script), how, *args]
    forked = prefork.run(command, work, env, timeout=60)
    fresh = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert forked.returncode == fresh.returncode == {"exit": int(args[0]) if args else 0, "signal": -signal.SIGKILL,
                                                     "raise": 1}[how]
    assert forked.stdout == fresh.stdout and f"cwd {work}" in forked.stdout and "var seen" in forked.stdout
    assert forked.stderr.splitlines()[0] == fresh.stderr.splitlines()[0] == f"path0 {tmp_path}"
    if how == "raise":
        assert "ValueError: boom" in forked.stderr and "ValueError: boom" in fresh.stderr


def test_overlapping_forked_runs_can_talk_and_a_timeout_kills(prefork, tmp_path, subprocess_env):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    sock = str(tmp_path / "s")
    server = prefork.popen([sys.executable, str(script), "pair", sock, "listen"], tmp_path, subprocess_env)
    client = prefork.popen([sys.executable, str(script), "pair", sock, "send"], tmp_path, subprocess_env)
    assert client.communicate(60)[1].startswith("path0") and client.returncode == 0
    out, _ = server.communicate(60)
    assert out.splitlines()[-1] == "hello" and server.returncode == 0
    (tmp_path / "sleep.py").write_text("import time\ntime.sleep(60)\n")
    slow = prefork.popen([sys.executable, str(tmp_path / "sleep.py")], tmp_path, subprocess_env)
    with pytest.raises(subprocess.TimeoutExpired):
        slow.communicate(timeout=0.5)
    assert slow.returncode == -signal.SIGKILL
    with pytest.raises(ProcessLookupError):
        os.kill(slow.pid, 0)


LAUNCHER = """
import os, sys
preloaded = "transformers" in sys.modules  # before any import of ours: a rank forked from the server has it
if sys.argv[1] == "rank":
    print("rank", sys.argv[2], "same group", os.getpgrp() == int(sys.argv[3]), "preloaded", preloaded, flush=True)
    if sys.argv[2] == "sleeps":
        import time
        open("sleeping", "w").close()  # the launcher kills it only once it has printed
        time.sleep(60)
    sys.exit(5)
from lightning.pytorch.strategies.launchers import subprocess_script as launcher  # where Lightning starts ranks
if os.path.exists("sleeping"):  # an earlier run's
    os.remove("sleeping")
me = [sys.executable, sys.argv[0], "rank"]
ends = launcher.subprocess.Popen([*me, "ends", str(os.getpgrp())], env=dict(os.environ), cwd=None)
sleeps = launcher.subprocess.Popen([*me, "sleeps", str(os.getpgrp())], env=dict(os.environ), cwd=None)
print("ends with", ends.wait(60), ends.poll(), flush=True)
import time
started = time.monotonic()
while not os.path.exists("sleeping") and time.monotonic() - started < 60:
    time.sleep(0.05)
print("sleeper running", sleeps.poll() is None, flush=True)
sleeps.kill()
print("sleeper killed", sleeps.wait(60), flush=True)
"""


def test_ranks_a_forked_run_launches_behave_as_popen_children(prefork, tmp_path, subprocess_env):
    """Lightning's launcher in a forked run gets its ranks from the server (forked: the imports already done): each
    in the launcher's process group, writing to its output, with Popen's wait, poll and kill; the same script in a
    fresh interpreter (real Popen, fresh ranks) prints the same but for that."""
    script = tmp_path / "launch.py"
    script.write_text(LAUNCHER)
    command = [sys.executable, str(script), "launch"]
    forked = prefork.run(command, tmp_path, subprocess_env, timeout=120)
    fresh = subprocess.run(command, cwd=tmp_path, env=subprocess_env, capture_output=True, text=True, timeout=120)
    for run, preloaded in ((forked, True), (fresh, False)):
        expected = [f"rank {r} same group True preloaded {preloaded}" for r in ("ends", "sleeps")] + \
            ["ends with 5 5", "sleeper running True", f"sleeper killed {-signal.SIGKILL}"]
        assert run.returncode == 0, run.stderr[-2000:]
        assert sorted(run.stdout.splitlines()) == sorted(expected), run.stdout
