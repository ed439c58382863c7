"""Loading never runs code from the user's files: a crafted checkpoint whose unpickling would write a file is refused
by `export`, by resume and as a target (one line naming the opt-in, exit code 2) and the file is not written; the
opt-in (LIT_UNLEARN_TRUST_CHECKPOINT_CODE=1) is the only thing between the file and its code. Checkpoints the
project writes itself load under the allow-list. The command line is called in-process."""

from __future__ import annotations

import os

import pytest
import torch

from helpers import cli_here
from lit_unlearn.storage.safe_load import TRUST_ENV, load_checkpoint


class WritesAFile:
    """Unpickled, it writes `path`: what a crafted checkpoint's payload does (here harmlessly)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return exec, (f"open({self.path!r}, 'w').write('the checkpoint ran code')",)


@pytest.fixture
def crafted(tmp_path, digits_target):
    """A Lightning-shaped checkpoint (the digits target's real state) with the payload beside it."""
    blob = torch.load(digits_target, map_location="cpu", weights_only=True)
    marker = tmp_path / "pwned.txt"
    blob["hyper_parameters"] = {"note": WritesAFile(str(marker))}
    path = tmp_path / "crafted.ckpt"
    torch.save(blob, path)
    return path, marker


def _refused(proc, marker):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr[-2000:])
    assert "outside the allow-list" in lines[0] and TRUST_ENV in lines[0], lines[0]
    assert not marker.exists()


def test_export_refuses_a_crafted_checkpoint(crafted, tmp_path):
    path, marker = crafted
    _refused(cli_here(["export", str(path), str(tmp_path / "out")], tmp_path), marker)
    assert not (tmp_path / "out").exists()


def test_a_crafted_checkpoint_is_refused_as_a_target_and_to_resume_from(crafted, digits_target, tmp_path):
    path, marker = crafted
    tiny = ["--trainer.max_steps=1", "--trainer.enable_progress_bar=false", "--trainer.accelerator=cpu",
            "--model.init_args.network.init_args.depth=8", "--trainer.limit_val_batches=0"]
    _refused(cli_here(["unlearn", f"--model.init_args.target_ckpt={path}", *tiny], tmp_path), marker)
    _refused(cli_here(["unlearn", f"--model.init_args.target_ckpt={digits_target}", *tiny, "--ckpt_path",
                       str(path)], tmp_path), marker)
    assert not any((tmp_path / "runs").rglob("run.json")) if (tmp_path / "runs").exists() else True


def test_the_opt_in_is_all_that_stands_between_the_file_and_its_code(crafted, monkeypatch):
    path, marker = crafted
    with pytest.raises(Exception, match=TRUST_ENV):
        load_checkpoint(path)
    assert not marker.exists()
    monkeypatch.setenv(TRUST_ENV, "1")
    with pytest.warns(UserWarning, match="code allowed"):
        load_checkpoint(path)
    assert marker.read_text() == "the checkpoint ran code"


def test_the_checkpoints_the_project_writes_load_under_the_allow_list(digits_target):
    blob = load_checkpoint(digits_target)
    assert "state_dict" in blob and os.environ.get(TRUST_ENV) is None
