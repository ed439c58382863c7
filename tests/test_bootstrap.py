"""scripts/bootstrap.sh chooses the torch build: CPU by default, the CUDA build where `nvidia-smi` sees a GPU or when
asked (--gpu, from TORCH_INDEX when given), and --cpu wins over a GPU. Checked on its dry run (the install commands
it would run), with a stand-in nvidia-smi."""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import REPO


def _dry_run(tmp_path, *args, gpu=False, **env):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    if gpu:
        smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 (UUID: GPU-0)'\n")
        smi.chmod(0o755)
    elif smi.exists():
        smi.unlink()
    path = f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin"
    proc = subprocess.run(["bash", str(REPO / "scripts/bootstrap.sh"), *args], capture_output=True, text=True,
                          env={"PATH": path, "LIT_UNLEARN_BOOTSTRAP_DRY_RUN": "1", "HOME": str(tmp_path), **env})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("args, gpu, build", [((), False, "cpu"), ((), True, "gpu"), (("--gpu",), False, "gpu"),
                                              (("--cpu",), True, "cpu")])
def test_the_torch_build_follows_the_machine_or_the_flag(tmp_path, args, gpu, build):
    out = _dry_run(tmp_path, *args, gpu=gpu, TORCH_INDEX="https://example.org/whl/cu128")
    assert f"bootstrap: {build} build of torch" in out
    torch_line = next(line for line in out.splitlines() if '"torch==2.13.0"' in line or "torch==2.13.0" in line)
    assert ("--index-url https://example.org/whl/cu128" in torch_line) == (build == "gpu")
    assert any("-e .[test]" in line for line in out.splitlines())


def test_an_unknown_option_is_refused(tmp_path):
    proc = subprocess.run(["bash", str(REPO / "scripts/bootstrap.sh"), "--cuda"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown option --cuda" in proc.stderr
