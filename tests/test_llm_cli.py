"""The offline TOFU job end to end through the CLI, the standalone evaluator agreeing with the in-training
one, and the packaged LLM configs (tiny and Llama-2-7B / DeepSpeed) parsing."""

import json
import subprocess
import sys

import pytest


def cli(args, cwd, env):
    proc = subprocess.run([sys.executable, "-m", "lit_unlearn.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


@pytest.mark.slow
def test_tofu_demo_end_to_end_gives_the_full_verdict_on_the_half_no_decision_read_and_standalone_eval_reproduces_it(
        tmp_path, subprocess_env, tofu_world):
    """The default job as a user runs it, whole (world seed 0, forget01): HoldoutMatch, looks at the steering half
    every 5 steps toward its target (the verdict of the model as it is and model utility ≥ 0.95 × the target's), then
    the full verdict on the reporting half (before any attack, relearning, 4-bit), every condition of which is
    recomputed here from the per-item scores it was decided on; the TOFU table with the gold standard, TensorBoard,
    and the final weights as a Hugging Face folder that `tofu-eval` scores as the callback did. A budget of 10 steps
    (3 looks) instead of the preset's 150: what is checked here (the looks' cadence, the stop rule's report, the
    verdict's files and their recomputation, the exports) is the same, and the suite's longest test is a third as
    long. Every seed of every
    level at the full budget: benchmarks/tofu_world/demo_seeds.py (docs/generated/tofu_demo_*.md)."""
    from lit_unlearn.verification.holdout_equivalence import holdout_verdict

    out = cli(["tofu-demo", "--worlds", str(tofu_world.folder.parent), "--trainer.enable_progress_bar=false",
               "--trainer.max_steps=10"], tmp_path, subprocess_env)
    assert "StopAtTarget 'holdout_band_ratio <= 1 and model_utility_ratio >= 0.95'" in out.stdout, out.stdout[-3000:]
    run = tmp_path / "runs/tofu/holdout_match/version_0"
    result = json.loads((run / "holdout_verification.json").read_text())
    after, before = result["after"], result["before"]
    assert not before["passed"] and before["band_ratio"] > 1.4  # the target: every attack near AUC 1
    full, spec = after["full"], result["spec"]
    assert set(full["judged"]) == {"none", "int4"} | {f"relearn lr={lr:g} steps={s}" for lr in spec["relearn_lrs"]
                                                      for s in spec["relearn_steps"]} | (
        {"paraphrase"} if spec["paraphrase"] else set())
    from lit_unlearn.verification.holdout_calibration import calibration

    assert spec["paraphrase"] == ("paraphrase" in calibration()["margins"]["01"]["best"])  # TOFU has paraphrases
    ratios = {}
    for condition, judged in full["judged"].items():
        saved = full["conditions"][condition]
        attacks = list(saved["pooled"]["intervals"])
        assert sorted(judged["forget"]) == sorted(attacks) and "learned" in attacks
        author_margins = next(iter(saved["authors"].values()))["delta"]
        again = holdout_verdict(judged["forget"], judged["holdout"], judged["forget_groups"], judged["holdout_groups"],
                                saved["pooled"]["delta"], author_margins, spec["alpha"], spec["n_boot"], spec["seed"])
        assert again.band_ratio == pytest.approx(saved["band_ratio"], abs=1e-12), condition
        ratios[condition] = again.band_ratio
    assert full["band_ratio"] == pytest.approx(max(ratios.values()), abs=1e-12)
    assert full["passed"] == (max(ratios.values()) <= 1)
    measured = len(full["judged"]["relearn lr=0.001 steps=10"]["forget"]["loss"])
    assert 0 < measured < len(full["judged"]["none"]["forget"]["loss"])  # relearning measures the other author
    assert f"reference-free verification (reporting half): {full['headline']}" in out.stdout
    assert "'holdout_band_ratio <= 1 and model_utility_ratio >= 0.95': " in out.stdout
    assert (run / "model" / "model.safetensors").is_file()  # the final weights, loadable by other tools
    events = list(run.glob("events.out.tfevents.*"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(events[0]))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"verify/band_ratio", "verify/passed", "verify/min_k_plus_plus_auc", "verify/steering/band_ratio",
            "verify/full/band_ratio", "verify/full/relearning_band_ratio"} <= tags
    looks = [e.step for e in acc.Scalars("verify/steering/band_ratio")]
    assert result["looks"] == len(looks) >= 2 and looks[0] == 0 and all(s % 5 == 0 for s in looks)  # the cadence
    assert {"tofu/forget/es", "tofu/mia/gradnorm_auc", "gold_standard/forget_quality"} <= tags
    results = json.loads((run / "tofu_results.json").read_text())["summary"]
    world = tmp_path / "runs/tofu/world"  # the link to the world in use
    assert world.resolve() == tofu_world.folder.resolve()
    from helpers import cli_here  # the demo above is the process under test; the evaluation runs in this one

    again = cli_here(["tofu-eval", "--model", str(run / "model"), "--data", str(world / "data"), "--level",
                      "01", "--reference", str(world / "retain_only_01_eval.json"), "--save",
                      str(tmp_path / "again.json")], tmp_path)
    assert again.returncode == 0 and "forget_quality" in again.stdout, again.stderr[-3000:]
    standalone = json.loads((tmp_path / "again.json").read_text())["summary"]
    for key in ("forget_quality", "model_utility", "forget_truth_ratio", "forget/rouge", "mia/min_k_auc", "forget/es",
                "mia/reference_auc"):
        assert standalone[key] == pytest.approx(results[key], rel=1e-6), key


@pytest.mark.parametrize("preset", ["tofu_llama2_7b_hamu_zero2", "tofu_llama2_7b_hamu_zero3",
                                    "waterdrum_llama2_7b_hamu_lora", "tofu_llama2_7b_ofmu_lora", "tofu_llama2_7b_ofmu_zero3",
                                    "tofu_tiny_ofmu", "tofu_tiny_npo", "tofu_tiny_simnpo", "tofu_tiny_idkdpo",
                                    "tofu_tiny_rmu", "tofu_tiny_holdout_match", "tofu_tiny_holdout_match_10", "tofu_tiny_hamu_holdout_match", "tofu_tiny_base_distill", "tofu_tiny_base_answers", "tofu_llama2_7b_simnpo", "tofu_llama2_7b_idkdpo",
                                    "tofu_llama2_7b_rmu", "tofu_llama2_7b_npo", "muse_news_llama2_7b_npo"])
def test_llm_configs_parse(preset, capsys):
    """Each packaged LLM config parses through the command line (in this process: the process is not the point)."""
    from lit_unlearn.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["unlearn", "--preset", preset, "--print_config"])
    assert stop.value.code in (0, None)
    assert "class_path: lit_unlearn.models.CausalLM" in capsys.readouterr().out


@pytest.mark.parametrize("args, expected", [([], "tofu_tiny_holdout_match"),
                                            (["--level", "10"], "tofu_tiny_holdout_match_10"),
                                            (["--level", "05"], "tofu_tiny_holdout_match"),
                                            (["--level", "10", "--preset", "tofu_tiny_hamu"], "tofu_tiny_hamu")])
def test_tofu_demo_runs_the_default_chosen_for_its_level_unless_a_preset_is_named(args, expected, tmp_path,
                                                                                    monkeypatch):
    """The default's settings per forget level (tofu_demo.LEVEL_PRESETS); any other --preset is run as named. The
    world build and the fit are replaced by recorders: what is tested is which preset reaches the launch path."""
    from lit_unlearn.cli import main
    from lit_unlearn.launch import runs
    from lit_unlearn.worlds import tofu_world

    seen = []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tofu_world, "prepare_tofu_world",
                        lambda *a, **k: type("W", (), {"folder": tmp_path / "world"})())
    monkeypatch.setattr(runs, "build_run", lambda lightning_args, preset, target=None: seen.append(preset))
    monkeypatch.setattr(runs, "fit_run", lambda launched: None)
    main(["tofu-demo", *args])
    assert seen == [expected]
