"""Cluster-grade runs on CPU: pre-emption signals at random points inside steps under a simulated SLURM job, then a
requeued relaunch, give final weights bit-equal to an uninterrupted run (one process and 2-process DDP); runs in
one root never resume each other; a kill in the middle of a checkpoint write leaves a resumable run; a 2-node
launch (NODE_RANK / MASTER_ADDR on localhost, gloo) makes the same update as one process."""

import json
import os
import random
import socket
import stat
import subprocess
import sys

import pytest
import torch

from helpers import assert_same_update, cli_here, cli_process
from lit_unlearn.storage.checkpoint_io import AtomicCheckpointIO, checkpoint_is_loadable

pytestmark = pytest.mark.slow

TINY = ["--model.init_args.network.init_args.depth=8", "--trainer.enable_progress_bar=false",
        "--data.init_args.retain_batch_size=64", "--data.init_args.forget_batch_size=32"]
CONFIG = """
trainer:
  max_steps: 24
  callbacks:
    - class_path: lit_unlearn.callbacks.KappaEarlyStopping
      init_args: {mode: soft, epsilon: 1.0, monitor_only: true, patience: 1}
    - class_path: lit_unlearn.callbacks.FinalCheckpoint
      init_args: {filename: "hamu-{step}", every_n_train_steps: 5, save_top_k: -1, save_last: true}
model:
  init_args: {eta: 0.05, quota: 0.02}
"""


@pytest.fixture
def cli(prefork):
    """`lit-unlearn ARGS` as a real process of its own, forked from the pre-imported server (tests/prefork.py)."""
    return lambda args, cwd, env, check=True: cli_process(args, cwd, env, check, prefork)


@pytest.fixture(scope="module")
def target(digits_target):
    return digits_target


def final_weights(folder):
    runs = [json.loads((p / "run.json").read_text()) for p in (folder / "runs/digits/hamu").glob("version_*")]
    finished = [r for r in runs if r["status"] == "finished"]
    assert len(finished) == 1, runs
    ckpt = torch.load(finished[0]["final_checkpoint"], map_location="cpu", weights_only=True)
    return ckpt["state_dict"], ckpt["global_step"]


def assert_bit_equal(a, b):
    (sa, step_a), (sb, step_b) = a, b
    assert step_a == step_b
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


@pytest.fixture(scope="module")
def straight(target, tmp_path_factory, subprocess_env_module):
    folder = tmp_path_factory.mktemp("straight")
    (folder / "cfg.yaml").write_text(CONFIG)
    cli_here(["unlearn", "--config", "cfg.yaml", f"--model.init_args.target_ckpt={target}", *TINY], folder,
             check=True)  # the reference run: its process is not the point
    return final_weights(folder)


@pytest.fixture(scope="module")
def subprocess_env_module():
    tests = os.path.dirname(__file__)
    return dict(os.environ, PYTHONPATH=os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]),
                PYTHONUNBUFFERED="1")


def slurm_env(base, folder, job="4242", restart=0):
    """A simulated SLURM job: the variables Lightning detects, and an `scontrol` on PATH that records requeues."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "scontrol"
    stub.write_text(f"#!/bin/sh\necho \"$@\" >> {folder / 'scontrol.log'}\n")
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    return dict(base, PATH=f"{bin_dir}{os.pathsep}{base['PATH']}", SLURM_JOB_ID=job, SLURM_NTASKS="1",
                SLURM_NTASKS_PER_NODE="1", SLURM_JOB_NAME="unlearn", SLURM_NODELIST="localhost", SLURM_NNODES="1",
                SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0", SLURM_RESTART_COUNT=str(restart))


TRIALS = random.Random(7).sample([(s, p) for s in (3, 7, 11, 16) for p in
                                  ("forward", "backward", "optimizer", "batch_start", "save")], 4)


@pytest.mark.parametrize("step,phase", TRIALS)
def test_slurm_preemption_inside_a_step_then_requeue_is_exact(cli, step, phase, target, straight, tmp_path,
                                                             subprocess_env_module):
    if phase == "save" and step % 5:
        step = 10  # checkpoints are written every 5 steps: land the signal inside a real write
    (tmp_path / "cfg.yaml").write_text(CONFIG)
    common = ["unlearn", "--config", "cfg.yaml", f"--model.init_args.target_ckpt={target}", *TINY]
    env = slurm_env(subprocess_env_module, tmp_path)
    first = cli([*common, "--trainer.callbacks+=signal_injector.SignalAt", f"--trainer.callbacks.step={step}",
                 f"--trainer.callbacks.phase={phase}"], tmp_path, env, check=False)
    assert first.returncode == 128 + 10, first.stdout[-2000:] + first.stderr[-3000:]  # SIGUSR1
    assert "interrupted at step" in first.stdout and "--ckpt_path last" in first.stdout
    assert "requeue 4242" in (tmp_path / "scontrol.log").read_text()
    run = tmp_path / "runs/digits/hamu/version_0"
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    hpc = list(run.glob("hpc_ckpt_*.ckpt"))
    assert len(hpc) == 1 and torch.load(hpc[0], weights_only=True)["global_step"] == step + 1  # the boundary
    # The requeued job runs the same command (same job id): it resumes its own run, in its own folder.
    again = cli(common, tmp_path, slurm_env(subprocess_env_module, tmp_path, restart=1))
    assert "requeued SLURM job 4242: resuming" in again.stdout
    assert not (tmp_path / "runs/digits/hamu/version_1").exists() and not list(run.glob("hpc_ckpt_*.ckpt"))
    assert_bit_equal(straight, final_weights(tmp_path))


def test_sigterm_says_how_to_resume_and_exits_non_zero(cli, target, straight, tmp_path, subprocess_env_module):
    (tmp_path / "cfg.yaml").write_text(CONFIG)
    common = ["unlearn", "--config", "cfg.yaml", f"--model.init_args.target_ckpt={target}", *TINY]
    first = cli([*common, "--trainer.callbacks+=signal_injector.SignalAt", "--trainer.callbacks.step=9",
                 "--trainer.callbacks.signal_name=TERM"], tmp_path, subprocess_env_module, check=False)
    assert first.returncode == 128 + 15 and "interrupted at step 10 by SIGTERM" in first.stdout, first.stdout
    cli_here([*common, "--ckpt_path", "last"], tmp_path, check=True)
    assert_bit_equal(straight, final_weights(tmp_path))


def test_the_printed_resume_command_pastes_back_as_the_same_arguments(monkeypatch):
    """The command a run records (and prints after "resume with:") keeps an argument holding spaces, brackets or
    quotes whole when a shell reads it back."""
    import shlex

    from lit_unlearn.launch.cluster import command_line

    argv = ["bench", "--methods", "OFMU (rho per epoch),GA", "--out", "runs/a b", "--trainer.x=it's"]
    monkeypatch.setattr(sys, "argv", ["/usr/bin/lit-unlearn", *argv])
    assert shlex.split(command_line()) == ["lit-unlearn", *argv]


def test_runs_in_one_root_never_resume_each_other(cli, target, tmp_path, subprocess_env_module):
    (tmp_path / "cfg.yaml").write_text(CONFIG)
    a = ["unlearn", "--config", "cfg.yaml", f"--model.init_args.target_ckpt={target}", *TINY]
    b = [*a, "--model.init_args.eta=0.1"]
    env = slurm_env(subprocess_env_module, tmp_path, job="1")
    killed = cli([*a, "--trainer.callbacks+=signal_injector.SignalAt", "--trainer.callbacks.step=12"], tmp_path,
                 env, check=False)
    assert killed.returncode == 138
    # Another configuration: `last` refuses (naming the other run and the difference), `auto` starts anew.
    refused = cli_here([*b, "--ckpt_path", "last"], tmp_path)  # what it says is the point: in this process
    assert refused.returncode == 2 and "version_0" in refused.stderr and "eta: 0.05 → 0.1" in refused.stderr
    # Under another SLURM job, B does not pick up A's pre-emption checkpoint.
    fresh = cli(b, tmp_path, slurm_env(subprocess_env_module, tmp_path, job="2"))
    assert "resuming" not in fresh.stdout
    assert json.loads((tmp_path / "runs/digits/hamu/version_1/run.json").read_text())["status"] == "finished"
    assert list((tmp_path / "runs/digits/hamu/version_0").glob("hpc_ckpt_*.ckpt"))  # A's is still A's
    # A checkpoint of run A given explicitly to run B is refused too.
    ckpt = next((tmp_path / "runs/digits/hamu/version_0/checkpoints").glob("hamu-*.ckpt"))
    wrong = cli_here([*b, "--ckpt_path", str(ckpt)], tmp_path)
    assert wrong.returncode == 2 and "belongs to run" in wrong.stderr
    # Nothing to resume for B now (it finished): `last` is an error, `auto` starts version_2.
    assert cli_here([*b, "--ckpt_path", "last"], tmp_path).returncode == 2
    cli_here([*b, "--ckpt_path", "auto", "--trainer.max_steps=2"], tmp_path, check=True)
    assert (tmp_path / "runs/digits/hamu/version_2").is_dir()


def test_a_kill_during_a_checkpoint_write_leaves_a_resumable_run(cli, target, straight, tmp_path,
                                                                  subprocess_env_module):
    (tmp_path / "cfg.yaml").write_text(CONFIG)
    common = ["unlearn", "--config", "cfg.yaml", f"--model.init_args.target_ckpt={target}", *TINY]
    killed = cli([*common, "--trainer.callbacks+=signal_injector.SignalAt", "--trainer.callbacks.step=15",
                  "--trainer.callbacks.phase=save", "--trainer.callbacks.signal_name=KILL"], tmp_path,
                 subprocess_env_module, check=False)
    assert killed.returncode == -9
    ckpts = tmp_path / "runs/digits/hamu/version_0/checkpoints"
    assert list(ckpts.glob(".*.tmp-*")), "the write was cut short"  # the half-written temporary file
    assert checkpoint_is_loadable(ckpts / "last.ckpt")  # the previous last.ckpt is intact
    cli_here([*common, "--ckpt_path", "last"], tmp_path, check=True)
    assert_bit_equal(straight, final_weights(tmp_path))


def test_ddp_preemption_then_resume_is_exact(cli, target, tmp_path, subprocess_env_module):
    (tmp_path / "cfg.yaml").write_text(CONFIG.replace("max_steps: 24", "max_steps: 12"))
    common = ["unlearn", "--config", "cfg.yaml", f"--model.init_args.target_ckpt={target}", *TINY,
              "--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp"]
    straight_dir = tmp_path / "straight"
    straight_dir.mkdir()
    (straight_dir / "cfg.yaml").write_text(CONFIG.replace("max_steps: 24", "max_steps: 12"))
    cli(common, straight_dir, subprocess_env_module)
    first = cli([*common, "--trainer.callbacks+=signal_injector.SignalAt", "--trainer.callbacks.step=6",
                 "--trainer.callbacks.phase=backward"], tmp_path, subprocess_env_module, check=False)
    assert first.returncode == 138, first.stdout[-2000:] + first.stderr[-3000:]
    cli([*common, "--ckpt_path", "last"], tmp_path, subprocess_env_module)
    assert_bit_equal(final_weights(straight_dir), final_weights(tmp_path))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_make_the_same_update_as_one_process(target, tmp_path, subprocess_env_module):
    args = ["unlearn", f"--model.init_args.target_ckpt={target}", *TINY, "--trainer.max_steps=1",
            "--trainer.accelerator=cpu", "--trainer.limit_val_batches=0", "--model.init_args.eta=0.05",
            "--model.init_args.quota=0.02", "--trainer.callbacks=[]"]
    one = tmp_path / "one"
    one.mkdir()
    cli_here([*args, "--trainer.devices=1"], one, check=True)
    port = str(_free_port())
    procs = []
    for node in (0, 1):
        env = dict(subprocess_env_module, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, NODE_RANK=str(node),
                   WORLD_SIZE="2", LOCAL_RANK="0")
        procs.append(subprocess.Popen([sys.executable, "-m", "lit_unlearn.cli", *args, "--trainer.num_nodes=2",
                                       "--trainer.devices=1", "--trainer.strategy=ddp"], cwd=tmp_path, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, out[-2000:] + err[-3000:]
    start = torch.load(target, map_location="cpu", weights_only=True)["state_dict"]
    (a, _), (b, _) = final_weights(one), final_weights(tmp_path)
    assert assert_same_update(a, b, start, tol=1e-4)[1] > 10  # and more than 10 tensors moved
    assert len(list((tmp_path / "runs/digits/hamu").glob("version_*"))) == 1  # both nodes in one run folder


def test_atomic_checkpoint_io_never_leaves_a_torn_file(tmp_path):
    io = AtomicCheckpointIO()
    path = tmp_path / "x.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.ones(3)}}, path)
    assert checkpoint_is_loadable(path)
    path.write_bytes(path.read_bytes()[:100])  # what a cut-short non-atomic copy leaves
    assert not checkpoint_is_loadable(path)
    (tmp_path / "empty.ckpt").write_bytes(b"")
    assert not checkpoint_is_loadable(tmp_path / "empty.ckpt")
    io.save_checkpoint({"state_dict": {"w": torch.zeros(3)}}, path)
    assert torch.equal(torch.load(path, weights_only=True)["state_dict"]["w"], torch.zeros(3))
    assert not list(tmp_path.glob(".*tmp*"))
