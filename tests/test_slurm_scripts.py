"""The SLURM scripts work from a fresh clone (no runs/ folder, nothing made by hand): under a stand-in `sbatch` that,
like SLURM, opens the script's --output file before the script runs (and fails when its folder is missing), and a
stand-in `srun` that runs the command as one task with SLURM's variables set. The own-job script runs a tiny job to
its final model; the TOFU 7B script gets as far as the preflight, which stops it in one line on a machine without
GPUs, with its log where the script says."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from helpers import cli_here

pytestmark = pytest.mark.slow

SBATCH = r'''#!/usr/bin/env python3
import os, re, subprocess, sys
script, args = sys.argv[1], sys.argv[2:]
opts = dict(re.findall(r"^#SBATCH\s+--([\w-]+)=(\S+)", open(script).read(), re.M))
name, job = opts.get("job-name", "job"), "4242"
log = opts.get("output", "slurm-%j.out").replace("%x", name).replace("%j", job)
try:
    out = open(log, "a")  # SLURM opens the log before the script runs, and makes no folder for it
except OSError as err:
    sys.exit(f"sbatch: job {job} failed: cannot open {log}: {err}")
env = dict(os.environ, SLURM_JOB_ID=job, SLURM_JOB_NAME=name, SLURM_NNODES="1", SLURM_NTASKS="1",
           SLURM_NTASKS_PER_NODE="1", SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0",
           SLURM_NODELIST="localhost", SLURM_CPUS_PER_TASK="1", SLURM_SUBMIT_DIR=os.getcwd())
sys.exit(subprocess.call(["bash", script, *args], stdout=out, stderr=subprocess.STDOUT, env=env))
'''


@pytest.fixture
def clone(tmp_path, subprocess_env):
    """A fresh clone of this repository, and an environment with the stand-ins first on PATH."""
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    folder = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(folder)], check=True)
    assert not (folder / "runs").exists()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(SBATCH)
    (bin_dir / "srun").write_text('#!/bin/bash\nexec "$@"\n')
    for tool in ("sbatch", "srun"):
        (bin_dir / tool).chmod(0o755)
    env = dict(subprocess_env, PATH=f"{bin_dir}{os.pathsep}{subprocess_env['PATH']}",
               LIT_UNLEARN=str(Path(sys.executable).parent / "lit-unlearn"))
    return folder, env


def test_the_own_job_script_runs_a_job_from_its_yaml_in_a_fresh_clone(clone, tmp_path):
    from own_job_files import write_data, write_model

    folder, env = clone
    write_model(tmp_path / "model", steps=5)
    files = write_data(tmp_path / "data")
    job = cli_here(["unlearn", "--model-dir", str(tmp_path / "model"), "--forget", str(files["forget"]), "--retain",
                    str(files["retain"]), "--columns", "question=prompt,answer=completion", "--method", "graddiff",
                    "--out", str(tmp_path / "runs"), "--trainer.max_steps=2", "--trainer.enable_progress_bar=false",
                    "--data.init_args.retain_batch_size=8", "--data.init_args.forget_batch_size=8",
                    "--trainer.accelerator=cpu", "--print_config"], tmp_path, check=True).stdout
    (folder / "my_job.yaml").write_text(job)
    proc = subprocess.run(["sbatch", "scripts/slurm/unlearn.sbatch", "my_job.yaml"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)
    log = folder / "unlearn-4242.out"
    assert proc.returncode == 0 and log.is_file(), (proc.stderr, log.read_text()[-3000:] if log.is_file() else "")
    assert "final model (Hugging Face folder)" in log.read_text()
    runs = [json.loads(p.read_text()) for p in (tmp_path / "runs/graddiff").glob("version_*/run.json")]
    assert [r["status"] for r in runs] == ["finished"] and runs[0]["slurm_job_id"] == "4242"


def test_the_tofu_7b_scripts_open_their_log_and_stop_at_the_preflight_without_gpus(clone):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the script would start a 7B run")
    folder, env = clone
    for script, name in (("hamu_llama2_7b_zero3_1node.sbatch", "hamu-7b-zero3"),
                         ("hamu_llama2_7b_zero3_multinode.sbatch", "hamu-7b-zero3-mn")):
        proc = subprocess.run(["sbatch", f"scripts/slurm/{script}"], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=300)
        log = folder / f"{name}-4242.out"
        assert log.is_file(), proc.stderr
        text = log.read_text()
        assert proc.returncode == 2 and "this machine has none" in text and "Traceback" not in text, text[-3000:]
