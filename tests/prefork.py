"""Real processes for `python -m MODULE ARGS` or `python SCRIPT ARGS` without paying the imports each time.

A server process imports torch, Lightning, transformers and the lit-unlearn commands once; each run is a child
forked from it. The child is a real process of its own: its own pid, signals delivered to it as to any process
(SIGKILL, SIGTERM, SLURM's SIGUSR1), its own exit status, the interpreter's normal shutdown. What it skips is
what every test of ours would otherwise repeat: about 6 CPU-seconds of imports. The console script and the
interpreter start itself stay covered by tests that exec a fresh interpreter (tests/test_cli_and_resume.py,
tests/test_cli_errors.py).

    server.run([sys.executable, "-m", "lit_unlearn.cli", ...], cwd=..., env=..., timeout=...)  # subprocess.run
    server.popen([sys.executable, "tests/worker.py", ...], cwd=..., env=...)  # subprocess.Popen: pid, communicate

Runs may overlap (the ranks of one job). Where Lightning's launcher (DDP, DeepSpeed) re-executes the interpreter for
ranks 1.., a forked rank 0 asks this server for them too: each is forked as rank 0 was, in rank 0's process group,
writing to rank 0's output, and rank 0's launcher holds it as it would a Popen (poll, wait, send_signal). A rank
Lightning re-executes as a fresh interpreter stays covered by test_cli_and_resume.py's 2-process DDP run (no server
there), and ranks a test starts itself by test_cluster.py's 2 nodes and test_own_job.py's torchrun-like ranks.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PRELOAD = ("torch", "lightning.pytorch", "transformers", "lit_unlearn.cli", "lit_unlearn.commands",
           "lit_unlearn.launch.runs", "lit_unlearn.modules", "lit_unlearn.data", "lit_unlearn.models",
           "lit_unlearn.callbacks", "lit_unlearn.metrics", "jsonargparse", "tensorboard.compat.proto.event_pb2")


def _send(conn: socket.socket, obj) -> None:
    data = json.dumps(obj).encode()
    conn.sendall(struct.pack("!I", len(data)) + data)


def _recv(conn: socket.socket):
    head = b""
    while len(head) < 4:
        chunk = conn.recv(4 - len(head))
        if not chunk:
            raise ConnectionError("the prefork server closed the connection")
        head += chunk
    (n,) = struct.unpack("!I", head)
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the prefork server closed the connection")
        data += chunk
    return json.loads(data)


def _start(address: str, command: list[str], cwd, env, stdout: str, stderr: str, **extra) -> tuple[socket.socket, int]:
    """Ask the server at `address` for `command` ([sys.executable, "-m", MODULE, *ARGS] or [sys.executable, SCRIPT,
    *ARGS]): the connection that will bring its exit status, and its pid."""
    what = {"module": command[2]} if command[1] == "-m" else {"script": str(command[1])}
    args = command[3:] if command[1] == "-m" else command[2:]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(address)
    _send(conn, {**what, "args": [str(a) for a in args], "cwd": str(cwd), "env": {k: str(v) for k, v in env.items()},
                 "stdout": stdout, "stderr": stderr, **extra})
    return conn, _recv(conn)["pid"]


# ----- the server ------------------------------------------------------------------------------------------------
_ADDRESS: str | None = None  # the server's socket, for a forked run's launcher to ask for more ranks


def _child(request: dict, listener: socket.socket, conn: socket.socket) -> None:
    """In the forked child: become the requested process, then exit through the interpreter's normal shutdown."""
    listener.close()
    conn.close()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    if request.get("pgid"):  # a rank its launcher asked for: in the launching rank's group, as a Popen child is
        os.setpgid(0, request["pgid"])
    else:
        os.setpgrp()  # a kill aimed at this run's group reaches none of the server's other children
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    # appending: a launched rank writes to the launching rank's files, as an inherited descriptor would
    for fd, path, mode in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_APPEND),
                           (2, request["stderr"], os.O_WRONLY | os.O_APPEND)):
        target = os.open(path, mode)
        os.dup2(target, fd)
        os.close(target)
    import io

    # Unbuffered like PYTHONUNBUFFERED=1: what was written before a SIGKILL is in the files.
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True, encoding="utf-8")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True, encoding="utf-8",
                                  errors="backslashreplace")
    sys.stdin = open(0)  # noqa: SIM115 - the process's stdin, for its lifetime
    # sys.path as the interpreter builds it: the working folder (-m) or the script's folder first, then PYTHONPATH's
    module, script = request.get("module"), request.get("script")
    sys.path[0] = request["cwd"] if module else os.path.dirname(os.path.abspath(script))
    sys.path[1:1] = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    _launch_ranks_through_the_server(request["stdout"], request["stderr"])
    import runpy

    sys.argv = [module or script, *request["args"]]
    code = 0
    try:
        if module:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001 - as the interpreter would: traceback on stderr, status 1
        import traceback

        traceback.print_exc()
        code = 1
    sys.exit(code)


def _launch_ranks_through_the_server(stdout: str, stderr: str) -> None:
    """Lightning's script launchers start ranks 1.. with subprocess.Popen([sys.executable, ...]); in this run those
    become requests to the server (any other Popen is the real one)."""
    import types

    real = subprocess

    def popen(command, *args, env=None, cwd=None, **kwargs):
        command = [str(c) for c in command]
        if args or kwargs or len(command) < 2 or command[0] != sys.executable:
            return real.Popen(command, *args, env=env, cwd=cwd, **kwargs)
        conn, pid = _start(_ADDRESS, command, cwd or os.getcwd(), os.environ if env is None else env, stdout, stderr,
                           pgid=os.getpgrp())
        return LaunchedRank(command, conn, pid)

    shim = types.SimpleNamespace(**{n: getattr(real, n) for n in dir(real) if not n.startswith("__")})
    shim.Popen = popen
    for name in ("lightning.pytorch.strategies.launchers.subprocess_script",
                 "lightning.fabric.strategies.launchers.subprocess_script"):
        if name in sys.modules:
            sys.modules[name].subprocess = shim


def serve(address: str) -> None:
    global _ADDRESS
    _ADDRESS = address
    for name in PRELOAD:
        __import__(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(16)
    import threading

    if threading.active_count() != 1:  # forking a process with other threads can copy a lock some thread holds
        raise RuntimeError(f"the prefork server has {threading.active_count()} threads after its imports")
    print("ready", flush=True)
    while True:
        _reap(block=False)
        conn, _ = listener.accept()
        request = _recv(conn)
        if request.get("stop"):
            conn.close()
            break
        # A monitor per run waits for it and reports its status, so runs may overlap (the ranks of a job).
        if os.fork() == 0:
            pid = os.fork()
            if pid == 0:
                _child(request, listener, conn)  # never returns
            listener.close()
            _send(conn, {"pid": pid})
            _, status = os.waitpid(pid, 0)
            if not request.get("pgid"):  # a run ends, as for a caller reading its pipes, when its ranks have too
                _wait_for_group(pid)
            _send(conn, {"returncode": -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)})
            os._exit(0)  # the monitor: no interpreter shutdown of the server's state
        conn.close()
    listener.close()
    _reap(block=True)


def _wait_for_group(pgid: int) -> None:
    """Until no process is left in the run's process group (the ranks its launcher asked for join it)."""
    while True:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)


def _reap(block: bool) -> None:
    """Wait for finished monitors: their CPU time (and their runs') then counts in this server's, and so in the
    test session's (/usr/bin/time)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# ----- the client ------------------------------------------------------------------------------------------------
class Forked:
    """A run started by `Server.popen`, used like subprocess.Popen: pid, communicate(timeout), returncode."""

    def __init__(self, command, conn: socket.socket, pid: int, stdout: str, stderr: str) -> None:
        self.args, self._conn, self.pid, self._out, self._err = command, conn, pid, stdout, stderr
        self.returncode: int | None = None

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        if self.returncode is None:
            self._conn.settimeout(timeout)
            started = time.monotonic()
            try:
                self.returncode = _recv(self._conn)["returncode"]
            except TimeoutError:
                try:  # the run and the ranks its launcher asked for (its process group)
                    os.killpg(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self._conn.settimeout(None)
                self.returncode = _recv(self._conn)["returncode"]
                raise subprocess.TimeoutExpired(self.args, time.monotonic() - started) from None
            finally:
                if self.returncode is not None:
                    self._conn.close()
        out, err = Path(self._out).read_text(errors="replace"), Path(self._err).read_text(errors="replace")
        for path in (self._out, self._err):
            if os.path.exists(path):
                os.unlink(path)
        return out, err


class LaunchedRank:
    """A rank that a forked run's launcher asked the server for, held as subprocess.Popen: pid, poll, wait,
    send_signal, kill, terminate, returncode (Lightning's launcher and its child observer use these)."""

    def __init__(self, command, conn: socket.socket, pid: int) -> None:
        self.args, self._conn, self.pid = command, conn, pid
        self.returncode: int | None = None
        self._lock = threading.Lock()  # the launcher's observer thread polls while the main thread may wait

    def _ended(self, timeout: float | None) -> None:
        if self.returncode is None and select.select([self._conn], [], [], timeout)[0]:
            self.returncode = _recv(self._conn)["returncode"]
            self._conn.close()

    def poll(self) -> int | None:
        with self._lock:
            self._ended(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        with self._lock:
            self._ended(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:  # as Popen: never signal a rank already ended (its pid may be another's now)
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Server:
    def __init__(self, env: dict) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="prefork-"))
        self.address = str(self.folder / "socket")
        self.log = open(self.folder / "server.log", "w")  # noqa: SIM115 - the server's stderr, for its lifetime
        self.process = subprocess.Popen([sys.executable, __file__, self.address], env=env,
                                        stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError("the prefork server did not start:\n" + (self.folder / "server.log").read_text()[-3000:])

    def popen(self, command: list[str], cwd, env: dict) -> Forked:
        """Start `command` ([sys.executable, "-m", MODULE, *ARGS] or [sys.executable, SCRIPT, *ARGS]) in a forked
        child; output is captured as text."""
        if len(command) < 2 or command[0] != sys.executable:
            raise ValueError(f"prefork runs `{sys.executable} -m MODULE ...` or `... SCRIPT ...`, not {command[:3]}")
        out = tempfile.NamedTemporaryFile(dir=self.folder, delete=False)
        err = tempfile.NamedTemporaryFile(dir=self.folder, delete=False)
        out.close(), err.close()
        conn, pid = _start(self.address, command, cwd, env, out.name, err.name)
        return Forked(command, conn, pid, out.name, err.name)

    def run(self, command: list[str], cwd, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
        """subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)."""
        proc = self.popen(command, cwd, env)
        stdout, stderr = proc.communicate(timeout)
        return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)

    def close(self) -> None:
        try:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(self.address)
            _send(conn, {"stop": True})
            conn.close()
            self.process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
        finally:
            self.process.stdout.close()
            self.log.close()
            shutil.rmtree(self.folder, ignore_errors=True)


if __name__ == "__main__":
    serve(sys.argv[1])
