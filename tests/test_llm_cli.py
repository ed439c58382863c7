"""The offline TOFU job end to end through the CLI, the standalone evaluator agreeing with the in-training
one, and the packaged LLM configs (tiny and Llama-2-7B / DeepSpeed) parsing."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def cli(args, cwd, env):
    proc = subprocess.run([sys.executable, "-m", "lit_unlearn.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def test_tofu_demo_then_standalone_eval_reproduces_the_callback(tmp_path, subprocess_env, tofu_world):
    out = cli(["tofu-demo", "--worlds", str(tofu_world.folder.parent), "--trainer.max_steps=10",
               "--trainer.enable_progress_bar=false"], tmp_path, subprocess_env)
    assert "TOFU evaluation (results, step 10)" in out.stdout
    # the packaged HAMU config stops at a verified target: forget quality and utility relative to the target's
    assert "StopAtTarget 'forget_quality >= 0.05 and model_utility_ratio >= 0.9'" in out.stdout
    assert "Verification against the retain-only model" in out.stdout
    run = tmp_path / "runs/tofu/hamu/version_0"
    results = json.loads((run / "tofu_results.json").read_text())
    start = json.loads((run / "tofu_start.json").read_text())["summary"]
    for summary in (results["summary"], start):
        assert summary["forget_quality"] is not None and 0 <= summary["forget_quality"] <= 1
        assert 0 < summary["model_utility"] <= 1
    verification = results["verification"]
    assert verification["model_utility_ratio"] == pytest.approx(results["summary"]["model_utility"]
                                                                / start["model_utility"])
    assert 0.5 <= verification["forget_vs_retain_only_auc"] <= 1
    results = results["summary"]
    events = list(run.glob("events.out.tfevents.*"))
    assert events
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(events[0]))
    acc.Reload()
    for key in ("forget/es", "forget/em", "mia/gradnorm_auc", "mia/reference_auc"):  # the added metrics reach TB
        assert f"tofu/{key}" in acc.Tags()["scalars"], key
        assert results[key] is not None
    assert {"verify/forget_quality", "verify/model_utility_ratio"} <= set(acc.Tags()["scalars"])
    world = tmp_path / "runs/tofu/world"  # the link to the world in use
    assert world.resolve() == tofu_world.folder.resolve()
    reference = json.loads((world / "retain_only_01_eval.json").read_text())
    assert len(reference["per_item"]["forget"]["truth_ratio"]) == 40  # TOFU's forget01: 2 authors x 20
    again = cli(["tofu-eval", "--model", str(tmp_path / "runs/tofu/hamu/latest/checkpoints/last.ckpt"), "--base",
                 str(world / "target"), "--data", str(world / "data"), "--forget-level", "01", "--reference",
                 str(world / "retain_only_01_eval.json"), "--max-new-tokens", "48", "--save",
                 str(tmp_path / "again.json")], tmp_path, subprocess_env)
    assert "forget_quality" in again.stdout
    standalone = json.loads((tmp_path / "again.json").read_text())["summary"]
    for key in ("forget_quality", "model_utility", "forget_truth_ratio", "forget/rouge", "mia/min_k_auc", "forget/es",
                "mia/reference_auc"):
        assert standalone[key] == pytest.approx(results[key], rel=1e-6), key


@pytest.mark.parametrize("preset", ["tofu_llama2_7b_hamu_zero2", "tofu_llama2_7b_hamu_zero3",
                                    "waterdrum_llama2_7b_hamu_lora", "tofu_llama2_7b_ofmu_lora", "tofu_llama2_7b_ofmu_zero3",
                                    "tofu_tiny_ofmu", "tofu_tiny_npo", "tofu_tiny_simnpo", "tofu_tiny_idkdpo",
                                    "tofu_tiny_rmu", "tofu_llama2_7b_simnpo", "tofu_llama2_7b_idkdpo",
                                    "tofu_llama2_7b_rmu", "muse_news_llama2_7b_npo"])
def test_llm_configs_parse(preset, tmp_path, subprocess_env):
    out = cli(["unlearn", "--preset", preset, "--print_config"], tmp_path, subprocess_env)
    assert "class_path: lit_unlearn.models.CausalLM" in out.stdout
