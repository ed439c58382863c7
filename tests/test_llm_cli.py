"""The packaged LLM configs (tiny and Llama-2-7B / DeepSpeed) parsing through the command line, and the preset
tofu-demo runs at each level. The demo itself, end to end: tests/test_tofu_demo.py."""

import pytest


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
