"""Each run owns its folder, and only that run resumes from it.

    <root>/version_N/            root = the logger's save_dir/name (e.g. runs/digits/hamu)
        run.json                 fingerprint, the configuration it was taken of, status, SLURM job, final checkpoint
        checkpoints/             periodic checkpoints and last.ckpt (always this run's latest)
        hpc_ckpt_K.ckpt          written at the step boundary after a pre-emption signal; removed when the run ends
        events..., results.*     TensorBoard logs and the results table

The **fingerprint** is a hash of what defines the run: the model (method, network, hyper-parameters, target), the
data (dataset, forget set, batches) and the seed. Resuming (`--ckpt_path last`, `auto`, a path, or a SLURM
requeue) only ever continues a folder whose run has the same fingerprint and has not finished; a mismatch is an
error naming both runs and what differs. A new run claims the next `version_N` atomically (mkdir), so two
launches in one root never share a folder.

Processes of one run agree on the folder: the launching process exports it (LIT_UNLEARN_RUN_DIR) to the
processes Lightning starts; processes started separately (multi-node, torchrun) read the claim that rank 0
leaves under the root for their launch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lit_unlearn.storage.checkpoint_io import atomic_write_bytes, checkpoint_is_loadable
from lit_unlearn.core.errors import MissingFileError, UserError
from lit_unlearn.core.process import process_rank
from lit_unlearn.storage.specs import fingerprint

__all__ = ["RunFolder", "prepare_run", "release_claim", "run_identity", "diff_identity", "RUN_FILE",
           "checkpoint_candidates", "newest_loadable_checkpoint", "process_rank", "shown", "read_run"]

RUN_FILE = "run.json"
ENV_DIR, ENV_CKPT = "LIT_UNLEARN_RUN_DIR", "LIT_UNLEARN_RUN_CKPT"
_VERSION = re.compile(r"^version_(\d+)$")


def run_identity(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a resolved config that defines a run: model, data and seed."""
    return {"model": config.get("model"), "data": config.get("data"), "seed_everything": config.get("seed_everything")}


def diff_identity(a: dict, b: dict, prefix: str = "", limit: int = 4) -> list[str]:
    """Human-readable differences between two identities, e.g. 'model.init_args.eta: 0.05 → 0.1'."""
    out: list[str] = []
    for key in sorted(set(a or {}) | set(b or {}), key=str):
        x, y = (a or {}).get(key), (b or {}).get(key)
        where = f"{prefix}{key}"
        if isinstance(x, dict) and isinstance(y, dict):
            out += diff_identity(x, y, where + ".", limit)
        elif x != y:
            out.append(f"{where}: {x!r} → {y!r}")
        if len(out) >= limit:
            break
    return out[:limit]


def shown(path) -> str:
    """A path as the user gave it: relative to the working directory when it is inside it."""
    try:
        return os.path.relpath(path) if not os.path.relpath(path).startswith("..") else str(path)
    except ValueError:
        return str(path)


def _launch_id() -> str | None:
    """An id every process of one launch shares, for processes started separately (multi-node)."""
    for key in ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"):
        if os.environ.get(key):
            return f"{key}-{os.environ[key]}-{os.environ.get('SLURM_RESTART_COUNT', '0')}"
    if os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
        return f"{os.environ['MASTER_ADDR']}-{os.environ['MASTER_PORT']}"
    return None


@dataclass
class RunFolder:
    path: Path
    fingerprint: str
    identity: dict[str, Any]
    resume_from: str | None = None
    new: bool = True
    notes: list[str] = field(default_factory=list)
    outer: tuple[str | None, str | None] = (None, None)  # the enclosing run's shared folder and checkpoint, if any

    @property
    def version(self) -> str:
        return self.path.name

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def record(self, **updates: Any) -> dict[str, Any]:
        """Update run.json (atomically) with `updates`; returns the new content. Rank zero only."""
        if process_rank() != 0:
            return {}
        data = read_run(self.path) or {}
        data.update(updates)
        atomic_write_bytes(self.path / RUN_FILE, json.dumps(data, indent=1, default=str).encode())
        return data

    def has_checkpoint(self) -> bool:
        return any(checkpoint_is_loadable(p) for p in checkpoint_candidates(self.path))

    def remove_if_empty(self) -> bool:
        """A failed new run that wrote no checkpoint leaves nothing that looks like a result."""
        if self.new and not self.has_checkpoint() and process_rank() == 0:
            shutil.rmtree(self.path, ignore_errors=True)
            return True
        return False

    def remove_hpc_checkpoints(self) -> None:
        """A finished run leaves no pre-emption checkpoint that a relaunch could mistake for unfinished work."""
        for path in self.path.glob("hpc_ckpt_*.ckpt"):
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def read_run(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(folder) / RUN_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def checkpoint_candidates(folder: Path) -> list[Path]:
    """Every checkpoint of a run folder, newest first (hpc, last, periodic); temporary files are skipped."""
    found = [*folder.glob("hpc_ckpt_*.ckpt"), *(folder / "checkpoints").glob("*.ckpt")]
    found = [p for p in found if not p.name.startswith(".")]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def newest_loadable_checkpoint(folder: Path) -> tuple[Path | None, list[Path]]:
    """(the newest checkpoint that is intact, the newer ones that are not)."""
    damaged = []
    for path in checkpoint_candidates(folder):
        if checkpoint_is_loadable(path):
            return path, damaged
        damaged.append(path)
    return None, damaged


def newest_finished_run(root: str | Path) -> dict[str, Any] | None:
    """The run.json of the newest run under `root` that finished, or None."""
    return next((r for r in map(read_run, _versions(Path(root))) if r and r.get("status") == "finished"), None)


def _versions(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _VERSION.match(p.name)]
    return sorted(found, key=lambda p: int(_VERSION.match(p.name).group(1)), reverse=True)


def _claim_new(root: Path, fp: str, identity: dict, extra: dict) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    n = max((int(_VERSION.match(p.name).group(1)) for p in _versions(root)), default=-1) + 1
    while True:
        folder = root / f"version_{n}"
        try:
            folder.mkdir()  # atomic: two launches never get the same folder
            break
        except FileExistsError:
            n += 1
    atomic_write_bytes(folder / RUN_FILE, json.dumps(
        {"fingerprint": fp, "identity": identity, "status": "running", "created": time.strftime("%Y-%m-%d %H:%M:%S"),
         **extra}, indent=1, default=str).encode())
    return folder


def _resumable(root: Path, fp: str) -> tuple[list[Path], list[tuple[Path, dict]]]:
    """(unfinished runs of this fingerprint, newest first; unfinished runs of other fingerprints)."""
    mine, others = [], []
    for folder in _versions(root):
        info = read_run(folder)
        if not info or info.get("status") == "finished":
            continue
        (mine if info.get("fingerprint") == fp else others).append(folder if info.get("fingerprint") == fp
                                                                     else (folder, info))
    return mine, others


def _checkpoint_identity(path: Path) -> dict | None:
    if path.is_dir():
        return None  # a sharded checkpoint: its identity lives in the rank files; not checked
    from lit_unlearn.storage.safe_load import load_checkpoint

    try:
        blob = load_checkpoint(path, mmap=True)
    except Exception:  # noqa: BLE001 - an unreadable or refused file is reported by the loader that resumes from it
        return None
    return blob.get("run_identity") if isinstance(blob, dict) else None


def prepare_run(root: str | Path, identity: dict[str, Any], ckpt_path: str | None, command: str = "") -> RunFolder:
    """Decide this run's folder and the checkpoint it resumes from (see the module docstring). `identity` is what
    defines the run (`run_identity` of a LightningCLI config, or a launch spec's)."""
    root = Path(root).expanduser().resolve()  # run.json and checkpoints name absolute paths
    fp = fingerprint(identity)
    inherited = os.environ.get(ENV_DIR)
    if inherited and (read_run(Path(inherited)) or {}).get("fingerprint") == fp:  # started by this run's launcher
        return RunFolder(Path(inherited), fp, identity, os.environ.get(ENV_CKPT) or None, new=False)
    slurm = os.environ.get("SLURM_JOB_ID")
    extra = {"slurm_job_id": slurm, "command": command}

    def resume_in(folder: Path, why: str) -> RunFolder:
        ckpt, damaged = newest_loadable_checkpoint(folder)
        run = RunFolder(folder, fp, identity, str(ckpt) if ckpt else None, new=False)
        if damaged:
            run.notes.append(f"skipped damaged checkpoint(s) {[shown(d) for d in damaged]} (a write that was cut "
                             f"short); resuming from {shown(ckpt)}")
        run.notes.append(why)
        return run

    if ckpt_path in ("last", "auto"):
        mine, others = _resumable(root, fp)
        for folder in mine:
            if newest_loadable_checkpoint(folder)[0] is not None:
                return _shared(resume_in(folder, f"resuming {shown(folder)}"))
        if ckpt_path == "last":
            hint = ""
            if others:
                folder, info = others[0]
                diff = "; ".join(diff_identity(info.get("identity") or {}, identity)) or "another configuration"
                hint = f"; the unfinished run {shown(folder)} belongs to another configuration ({diff})"
            raise MissingFileError(f"--ckpt_path last: no unfinished run of this configuration with a checkpoint "
                                   f"in {shown(root)}{hint}. Start without --ckpt_path, or use --ckpt_path auto to resume "
                                   "when possible")
    elif ckpt_path is not None:
        path = Path(ckpt_path).expanduser()
        if not path.exists():
            raise MissingFileError(f"--ckpt_path {ckpt_path}: no such checkpoint")
        if not checkpoint_is_loadable(path):
            raise UserError(f"--ckpt_path {ckpt_path}: the checkpoint is damaged (cut-short write); use "
                            "--ckpt_path last to resume from the newest intact one")
        from lit_unlearn.storage.safe_load import check_checkpoint

        check_checkpoint(path)  # a file the user names is vetted before anything is built or claimed
        owner = _checkpoint_identity(path)
        if owner and owner.get("fingerprint") not in (None, fp):
            diff = "; ".join(diff_identity(owner.get("identity") or {}, identity)) or "another configuration"
            raise UserError(f"--ckpt_path {ckpt_path} belongs to run {shown(owner.get('folder'))} ({diff}); this run's "
                            "configuration differs. Resume it with its own configuration, or start a new run")
        folder = Path(owner["folder"]) if owner and owner.get("folder") and Path(owner["folder"]).is_dir() else None
        if folder is not None and (read_run(folder) or {}).get("fingerprint") == fp:
            run = RunFolder(folder, fp, identity, str(path.resolve()), new=False,
                            notes=[f"resuming {shown(folder)} from {shown(path)}"])
            return _shared(run)
        run = RunFolder(_claim_new(root, fp, identity, extra), fp, identity, str(path.resolve()), new=True,
                        notes=[f"starting a new run from {shown(path)}"])
        return _shared(run)
    elif slurm:  # a requeued SLURM job relaunches the same command: continue its own pre-empted run
        for folder in _resumable(root, fp)[0]:
            if (read_run(folder) or {}).get("slurm_job_id") == slurm and newest_loadable_checkpoint(folder)[0]:
                return _shared(resume_in(folder, f"requeued SLURM job {slurm}: resuming {shown(folder)}"))
    if process_rank() != 0:
        return _wait_for_claim(root, fp, identity)
    return _shared(RunFolder(_claim_new(root, fp, identity, extra), fp, identity, None, new=True))


def _claim_file(root: Path) -> Path | None:
    launch = _launch_id()
    return None if launch is None else root / f".launch-{re.sub(r'[^A-Za-z0-9_.-]', '_', launch)}.json"


def _shared(run: RunFolder) -> RunFolder:
    """Tell the processes of this launch which folder and checkpoint it uses (a run started inside another one, such
    as a retrained reference trained before an unlearning run, hands the enclosing run's values back when done)."""
    run.outer = (os.environ.get(ENV_DIR), os.environ.get(ENV_CKPT))
    os.environ[ENV_DIR], os.environ[ENV_CKPT] = str(run.path), run.resume_from or ""
    claim = _claim_file(run.path.parent)
    if claim is not None and process_rank() == 0:
        atomic_write_bytes(claim, json.dumps({"folder": str(run.path), "ckpt": run.resume_from, "fingerprint":
                                              run.fingerprint, "created": time.time()}).encode())
    return run


def release_claim(run: RunFolder) -> None:
    """The launch is over: its claim must not steer a later launch that reuses the same address and port."""
    claim = _claim_file(run.path.parent)
    if claim is not None and process_rank() == 0:
        claim.unlink(missing_ok=True)
    if os.environ.get(ENV_DIR) == str(run.path):  # a later run in this process is another run
        for key, value in zip((ENV_DIR, ENV_CKPT), run.outer):
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _wait_for_claim(root: Path, fp: str, identity: dict, timeout: float = 300.0) -> RunFolder:
    claim = _claim_file(root)
    if claim is None:
        raise UserError("a process of rank > 0 was started without its launcher's run folder (set "
                        f"{ENV_DIR}, or launch with MASTER_ADDR/MASTER_PORT so ranks can agree on it)")
    deadline = time.time() + timeout
    while time.time() < deadline:
        if claim.is_file():
            data = json.loads(claim.read_text())
            if data.get("fingerprint") == fp and time.time() - float(data.get("created", 0)) < 600:
                return RunFolder(Path(data["folder"]), fp, identity, data.get("ckpt"), new=False)
        time.sleep(0.2)
    raise UserError(f"waited {timeout:.0f} s for rank 0 to create this run's folder ({claim} never appeared)")
