"""End-to-end through the `lit-unlearn` console script: pretrain → unlearn, and SIGKILL → resume bit for bit."""

import json
import signal

import pytest
import torch

from helpers import assert_same_update, cli_here
from helpers import cli_process as cli

pytestmark = pytest.mark.slow

TINY_NET = ["--model.init_args.network.init_args.depth=8"]


@pytest.fixture(scope="module")
def target(digits_target):
    return digits_target


def test_pretrain_then_unlearn_writes_table_and_tensorboard(tmp_path, subprocess_env):
    """pretrain → unlearn through the console script, as a user runs them (the one place the suite trains a target
    in its own process)."""
    cli(["pretrain", "--trainer.max_epochs=1", "--trainer.enable_progress_bar=false", *TINY_NET], tmp_path,
        subprocess_env)
    target = tmp_path / "runs/digits/target/latest/checkpoints/last.ckpt"
    out = cli(["unlearn", f"--model.init_args.target_ckpt={target}", "--trainer.max_steps=12",
               "--trainer.enable_progress_bar=false", *TINY_NET], tmp_path, subprocess_env)
    assert "| forget |" in out.stdout and "| retain |" in out.stdout and "| test |" in out.stdout
    run = tmp_path / "runs/digits/hamu/version_0"
    results = json.loads((run / "results.json").read_text())
    assert {r["split"] for r in results["rows"]} >= {"forget", "retain", "test"}
    assert results["global_step"] == 12
    forget = next(r for r in results["rows"] if r["split"] == "forget")
    assert forget["loss_after"] > forget["loss_before"]  # the forget loss rose
    assert list(run.glob("events.out.tfevents.*")) and (run / "config.yaml").is_file()
    listed = cli_here(["configs"], tmp_path, check=True).stdout
    assert "digits_hamu.yaml" in listed and "cifar10_hamu.yaml" in listed


def test_the_recipe_a_target_records_retrains_it_bit_for_bit(target, tmp_path):
    """The retrained reference repeats the target's training with its recorded recipe; on the full training set
    (no forget set) that must give the target itself, bit for bit, or the reference is not the target's recipe."""
    from lit_unlearn.data import DigitsSource
    from lit_unlearn.launch.runs import train_classifier
    from lit_unlearn.verification import TrainingRecipe

    recipe = TrainingRecipe.from_checkpoint(target)
    assert recipe.epochs == 2 and recipe.network["init_args"]["depth"] == 8
    again = train_classifier(recipe, DigitsSource(test_fraction=0.2, seed=0), root=tmp_path).state_dict()
    original = torch.load(target, map_location="cpu", weights_only=True)["state_dict"]
    assert again.keys() == original.keys()
    for k in original:
        assert torch.equal(again[k], original[k]), k


def test_unlearn_without_target_says_how_to_make_one(tmp_path):
    out = cli_here(["unlearn", "--model.init_args.target_ckpt=missing/last.ckpt", *TINY_NET], tmp_path)
    assert out.returncode != 0 and "lit-unlearn pretrain" in out.stderr


def _straight_and_crashed(tmp_path, name, config_text, target):
    """The CLI arguments of a kill-and-resume comparison (config written to tmp_path/name) and its two run
    folders, one for the uninterrupted run and one for the killed and resumed one."""
    config = tmp_path / name
    config.write_text(config_text)
    common = ["--config", str(config), f"--model.init_args.target_ckpt={target}", *TINY_NET]
    straight, crashed = tmp_path / "straight", tmp_path / "crashed"
    straight.mkdir(), crashed.mkdir()
    return common, straight, crashed


def _final_state(folder, kappa=True):
    ckpt = torch.load(folder / "runs/digits/hamu/latest/checkpoints/last.ckpt", map_location="cpu", weights_only=True)
    state = next(v for k, v in ckpt["callbacks"].items() if k.startswith("KappaEarlyStopping")) if kappa else None
    return ckpt["state_dict"], ckpt["global_step"], state


RESUME_CONFIG = """
trainer:
  max_steps: 30
  enable_progress_bar: false
  callbacks:
    # Monitor-only κ₂ watcher with a margin so wide that it fires at step 0: its record must survive the crash.
    - class_path: lit_unlearn.callbacks.KappaEarlyStopping
      init_args: {mode: soft, epsilon: 1.0, monitor_only: true, patience: 1}
    - class_path: lit_unlearn.callbacks.FinalCheckpoint
      init_args: {filename: "hamu-{step}", every_n_train_steps: 4,
                  save_top_k: -1, save_last: true}
model:
  init_args: {eta: 0.05, quota: 0.02}
data:
  init_args: {retain_batch_size: 64, forget_batch_size: 32}
"""


def test_sigkill_mid_epoch_then_resume_matches_an_uninterrupted_run(target, tmp_path, subprocess_env, prefork):
    # 21 steps per epoch at these batch sizes; checkpoints every 4 steps; killed at step 26, so the last
    # checkpoint is step 24, mid-way through the second epoch.
    common, straight, crashed = _straight_and_crashed(tmp_path, "resume.yaml", RESUME_CONFIG, target)
    cli_here(["unlearn", *common], straight, check=True)  # the process is not the point: in this one
    killed = cli(["unlearn", *common, "--trainer.callbacks+=kill_switch.KillAtStep", "--trainer.callbacks.step=26"],
                 crashed, subprocess_env, check=False, prefork=prefork)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    ckpt = torch.load(crashed / "runs/digits/hamu/version_0/checkpoints/last.ckpt", map_location="cpu",
                      weights_only=True)
    assert ckpt["global_step"] == 24
    resumed = cli_here(["unlearn", *common, "--ckpt_path=last"], crashed, check=True)
    assert "resuming runs/digits/hamu/version_0" in resumed.stdout  # the same run, in its own folder
    assert not (crashed / "runs/digits/hamu/version_1").exists()
    a_state, a_step, a_kappa = _final_state(straight)
    b_state, b_step, b_kappa = _final_state(crashed)
    assert a_step == b_step == 30
    assert a_state.keys() == b_state.keys()
    for k in a_state:
        assert torch.equal(a_state[k], b_state[k]), k  # bit for bit
    assert a_kappa == b_kappa and a_kappa["would_stop_step"] == 0


TARGET_CONFIG = """
trainer:
  max_steps: 60
  enable_progress_bar: false
  callbacks:
    - class_path: lit_unlearn.callbacks.ForgettingVerification
    - class_path: lit_unlearn.callbacks.StopAtTarget
      init_args: {target: "forget_vs_retrain_auc <= 0.6", every_n_steps: 3, patience: 3}
    - class_path: lit_unlearn.callbacks.QuotaController
      init_args: {horizon: 10}
    - class_path: lit_unlearn.callbacks.FinalCheckpoint
      init_args: {filename: "hamu-{step}", every_n_train_steps: 4,
                  save_top_k: -1, save_last: true}
data:
  init_args: {retain_batch_size: 64, forget_batch_size: 32}
"""


def _callback_state(folder, prefix):
    ckpt = torch.load(folder / "runs/digits/hamu/latest/checkpoints/last.ckpt", map_location="cpu", weights_only=True)
    return next(v for k, v in ckpt["callbacks"].items() if k.startswith(prefix))


def test_killed_and_resumed_target_run_keeps_the_stop_and_controller_state(target, tmp_path, subprocess_env,
                                                                          prefork):
    """SIGKILL in the middle of a run that stops at a target with the quota controller; the resumed run ends on
    the same step, with the same evaluation history and closest weights, bit-equal to an uninterrupted run."""
    common, straight, crashed = _straight_and_crashed(tmp_path, "target.yaml", TARGET_CONFIG, target)
    cli_here(["unlearn", *common], straight, check=True)
    stop = _callback_state(straight, "StopAtTarget")
    assert stop["first_met_step"] is not None and len(stop["history"]) >= 4
    kill_at = int(stop["history"][2]["step"]) + 2  # after a few evaluations, between checkpoints
    killed = cli(["unlearn", *common, "--trainer.callbacks+=kill_switch.KillAtStep",
                  f"--trainer.callbacks.step={kill_at}"], crashed, subprocess_env, check=False, prefork=prefork)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    cli_here(["unlearn", *common, "--ckpt_path=last"], crashed, check=True)
    a_state, a_step, _ = _final_state(straight, kappa=False)
    b_state, b_step, _ = _final_state(crashed, kappa=False)
    assert a_step == b_step
    for k in a_state:
        assert torch.equal(a_state[k], b_state[k]), k
    resumed_stop = _callback_state(crashed, "StopAtTarget")
    assert resumed_stop["history"] == stop["history"] and resumed_stop["ended_on_step"] == stop["ended_on_step"]
    assert _callback_state(crashed, "QuotaController") == _callback_state(straight, "QuotaController")


def test_two_process_ddp_matches_one_process_at_the_same_global_batch(target, tmp_path, subprocess_env):
    """World-size invariance: 2 CPU processes (gloo), each taking half of every global batch, make the same
    update as one process, to fp32 reduction-order noise. (Over several steps that noise can flip a block's
    branch near a boundary, so the comparison is on one step, relative to the update's size.) Both ranks are fresh
    interpreters, rank 1 re-executed by Lightning's launcher: the one such run in the suite (elsewhere the prefork
    server forks the ranks it asks for)."""
    args = ["unlearn", f"--model.init_args.target_ckpt={target}", "--trainer.max_steps=1",
            "--trainer.enable_progress_bar=false", "--trainer.accelerator=cpu", "--model.init_args.eta=0.05",
            "--model.init_args.quota=0.02", "--data.init_args.retain_batch_size=64",
            "--data.init_args.forget_batch_size=32", "--trainer.limit_val_batches=0", *TINY_NET]
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    cli_here([*args, "--trainer.devices=1"], one, check=True)
    cli([*args, "--trainer.devices=2", "--trainer.strategy=ddp"], two, subprocess_env)
    start = torch.load(target, map_location="cpu", weights_only=True)["state_dict"]
    a, a_step, _ = _final_state(one)
    b, b_step, _ = _final_state(two)
    assert a_step == b_step == 1
    assert assert_same_update(a, b, start, tol=1e-4)[1] > 10  # and more than 10 tensors moved
