"""User errors through the command line: a few lines on stderr, no traceback, exit code 2, and what to do. Most
cases call the command line in this process (what it says is the point, not the process); the exit path, the help
and the import-time noise go through real processes. Also: every command's --help answers fast and writes nothing,
and a failed run leaves nothing behind."""

import json
import subprocess
import sys
import time

import pytest

from helpers import cli_here

pytestmark = pytest.mark.slow

TINY = ["--model.init_args.network.init_args.depth=8"]


def run(args, cwd, env, timeout=600):
    return subprocess.run([sys.executable, "-m", "lit_unlearn.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def assert_user_error(proc, *needles):
    err = proc.stderr.strip()
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], err[-3000:])
    assert "Traceback" not in err and "Traceback" not in proc.stdout, err[-3000:]
    assert len(err.splitlines()) <= 3, err
    for needle in needles:
        assert needle in err, (needle, err)


@pytest.fixture(scope="module")
def target(digits_target):
    return digits_target


@pytest.fixture(scope="module")
def tofu_assets(tmp_path_factory):
    from lit_unlearn.data import generate_fictitious_tofu, train_bpe_tokenizer, write_tofu_json
    from lit_unlearn.models import CausalLM, tiny_llama_config

    root = tmp_path_factory.mktemp("tofu")
    write_tofu_json(root / "data", n_authors=10, n_questions=2, seed=0)
    splits = generate_fictitious_tofu(n_authors=10, n_questions=2, seed=0)
    tok = train_bpe_tokenizer([r["question"] + " " + r["answer"] for rows in splits.values() for r in rows],
                              root / "model", vocab_size=300)
    CausalLM(config=tiny_llama_config(vocab_size=len(tok), hidden_size=16, layers=1, intermediate_size=32),
             seed=0).save_pretrained(root / "model")
    return root


@pytest.mark.parametrize("case", [
    ("forget class 42", ["--data.init_args.forget.init_args.forget_class=42"], ["forget_class=42", "classes present"]),
    ("overlapping split", ["--data.init_args.forget=lit_unlearn.data.IndexForget",
                           "--data.init_args.forget.init_args.forget=[0,1]",
                           "--data.init_args.forget.init_args.retain=[1,2]"], ["both the forget and the retain"]),
    ("eta < 0", ["--model.init_args.eta=-1"], ["eta must be positive"]),
    ("another architecture", ["--model.init_args.network.init_args.depth=14"], ["Configure the same architecture"]),
    ("RandomForget 1.0", ["--data.init_args.forget=lit_unlearn.data.RandomForget",
                          "--data.init_args.forget.init_args.fraction=1.0"], ["fraction must be in (0, 1)"]),
    ("unknown target metric", ["--target", "forget_accc <= 0.1"], ["did you mean 'forget_acc'"]),
    ("target met at step 0", ["--target", "retain_acc >= 0.5"], ["already met before unlearning"]),
    ("unknown key", ["--trainer.max_stepz=3"], ["max_stepz"]),
], ids=lambda c: c[0])
def test_bad_unlearning_inputs_are_one_message(case, target, tmp_path, subprocess_env):
    _, args, needles = case
    depth = [] if "another architecture" in case[0] else TINY
    proc = cli_here(["unlearn", f"--model.init_args.target_ckpt={target}", *depth, *args], tmp_path)
    assert_user_error(proc, *needles)
    hamu = tmp_path / "runs/digits/hamu"
    assert not hamu.exists() or not any(hamu.iterdir()), f"a failed run left {list(hamu.rglob('*'))} behind"


def test_missing_target_and_relative_target_without_reference(tmp_path, target, subprocess_env):
    assert_user_error(run(["unlearn", "--model.init_args.target_ckpt=missing/last.ckpt", *TINY], tmp_path,
                          subprocess_env), "lit-unlearn pretrain")
    config = tmp_path / "ga.yaml"
    config.write_text("trainer:\n  callbacks:\n    - class_path: lit_unlearn.callbacks.StopAtTarget\n"
                      "      init_args: {target: 'ua within 0.05 of retrain'}\n")
    assert_user_error(cli_here(["unlearn", "--preset", "digits_ga", "--config", str(config),
                                f"--model.init_args.target_ckpt={target}", *TINY], tmp_path),
                      "ForgettingVerification")


def test_experiment_config_typo_and_tofu_data_errors(tmp_path, tofu_assets, subprocess_env):
    bad = tmp_path / "suite.yaml"
    from lit_unlearn.storage.packaged_files import packaged_config

    bad.write_text(open(packaged_config("experiment_digits")).read().replace("epochs: 10", "epochz: 10"))
    assert_user_error(cli_here(["experiment", "--config", str(bad)], tmp_path),
                      "unknown key 'epochz'", "did you mean 'epochs'")
    model, data = tofu_assets / "model", tofu_assets / "data"
    assert_user_error(cli_here(["tofu-eval", "--model", str(model), "--tokenizer", "nowhere/tok/en", "--data",
                                str(data)], tmp_path), "tokenizer 'nowhere/tok/en': no such folder")
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in data.iterdir():
        rows = json.loads(f.read_text())
        if f.name == "forget01_perturbed.json":
            rows = [{k: v for k, v in r.items() if k != "perturbed_answer"} for r in rows]
        (broken / f.name).write_text(json.dumps(rows))
    started = time.perf_counter()
    assert_user_error(cli_here(["tofu-eval", "--model", str(model), "--data", str(broken)], tmp_path),
                      "no column(s) ['perturbed_answer']", "forget")
    not_a_report = tmp_path / "ref.json"
    not_a_report.write_text("{}")
    assert_user_error(cli_here(["tofu-eval", "--model", str(model), "--data", str(data), "--reference",
                                str(not_a_report)], tmp_path), "per-item forget truth ratios")
    assert time.perf_counter() - started < 120  # refused before any evaluation work


def test_help_everywhere_is_fast_and_writes_nothing(tmp_path, subprocess_env):
    from lit_unlearn.commands import all_commands

    COMMANDS = all_commands()
    for args in (["--help"], *[[name, "--help"] for name in COMMANDS]):
        started = time.perf_counter()
        proc = run(args, tmp_path, subprocess_env, timeout=60)
        assert proc.returncode == 0, (args, proc.stderr[-2000:])
        assert "usage" in proc.stdout.lower(), args
        assert time.perf_counter() - started < 30, args
    assert not any(tmp_path.iterdir()), list(tmp_path.iterdir())  # no run folder, no cache, no file
    top = run(["--help"], tmp_path, subprocess_env).stdout
    assert all(name in top for name in COMMANDS) and "digits_hamu" in top  # commands and presets listed


def test_function_commands_read_their_options_from_a_config_file(tmp_path, subprocess_env):
    """`--config` works on the commands parsed from their signatures: the file's values are used (here a model
    folder that is not there, named in a one-line error) and the command line still overrides them."""
    config = tmp_path / "eval.yaml"
    config.write_text("model: ./nowhere/model\ndata: ./nowhere/data\nlevel: '01'\nmax_length: 256\n")
    assert_user_error(cli_here(["tofu-eval", "--config", str(config)], tmp_path),
                      "model './nowhere/model': no such folder")
    assert_user_error(cli_here(["tofu-eval", "--config", str(config), "--model", "./elsewhere"], tmp_path),
                      "model './elsewhere': no such folder")


def _truncated(target, folder):
    bad = folder / "t.ckpt"
    bad.write_bytes(target.read_bytes()[:100_000])
    return ["unlearn", f"--model.init_args.target_ckpt={bad}", *TINY]


def _one_row_without_perturbed(data, folder):
    broken = folder / "data"
    broken.mkdir()
    for f in data.iterdir():
        rows = json.loads(f.read_text())
        if f.name == "forget01_perturbed.json":
            del rows[1]["perturbed_answer"]
        (broken / f.name).write_text(json.dumps(rows))
    return broken


def _not_json(data, folder):
    broken = folder / "data"
    broken.mkdir()
    for f in data.iterdir():
        (broken / f.name).write_text(f.read_text())
    (broken / "real_authors_perturbed.json").write_text("[{\"question\": \"oops\",")
    return broken


@pytest.mark.parametrize("case", [
    "truncated checkpoint", "misspelt argument", "misspelt data argument", "row without perturbed_answer",
    "split not JSON", "local folder like a hub name", "hub name while offline"])
def test_bad_inputs_are_one_line_naming_the_file_row_or_key(case, target, tofu_assets, tmp_path, monkeypatch):
    model, data = tofu_assets / "model", tofu_assets / "data"
    (tmp_path / "runs").mkdir()
    args, needles = {
        "truncated checkpoint": (lambda: _truncated(target, tmp_path), ["t.ckpt cannot be read", "truncated"]),
        "misspelt argument": (lambda: ["unlearn", f"--model.init_args.target_ckpt={target}", *TINY,
                                       "--model.init_args.etaa=0.1"],
                              ["--model.init_args.etaa", "did you mean 'eta'", "its arguments: network"]),
        "misspelt data argument": (lambda: ["unlearn", f"--model.init_args.target_ckpt={target}", *TINY,
                                            "--data.init_args.retain_batchsize=8"],
                                   ["did you mean 'retain_batch_size'"]),
        "row without perturbed_answer": (lambda: ["tofu-eval", "--model", str(model), "--data",
                                                  str(_one_row_without_perturbed(data, tmp_path))],
                                         ["row 1 has no column(s) ['perturbed_answer']", "forget"]),
        "split not JSON": (lambda: ["tofu-eval", "--model", str(model), "--data", str(_not_json(data, tmp_path))],
                           ["real_authors_perturbed.json is not valid JSON (line 1"]),
        "local folder like a hub name": (lambda: ["tofu-eval", "--model", "runs/nonexist", "--data", str(data)],
                                         ["'runs/nonexist': no such folder (runs/ exists here"]),
        "hub name while offline": (lambda: ["tofu-eval", "--model", "nobody-here/nonexist", "--data", str(data)],
                                   ["'nobody-here/nonexist': no such folder"]),
    }[case]
    if case == "hub name while offline":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    proc = cli_here(args(), tmp_path)
    assert_user_error(proc, *needles)
    assert len(proc.stderr.strip().splitlines()) == 1
    assert time.perf_counter() - started < 60  # no hub retries, no evaluation before the error


def test_divergence_is_one_line_exit_1_naming_the_last_finite_checkpoint(target, tmp_path):
    config = tmp_path / "every_step.yaml"
    config.write_text("trainer:\n  callbacks:\n    - class_path: lit_unlearn.callbacks.FinalCheckpoint\n"
                      "      init_args: {filename: 'hamu-{step}', every_n_train_steps: 1, save_top_k: -1}\n")
    proc = cli_here(["unlearn", f"--model.init_args.target_ckpt={target}", *TINY, "--config", str(config),
                     "--model.init_args.eta=1e9", "--trainer.max_steps=20"], tmp_path)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(err) == 1 and "run failed:" in err[0] and "Traceback" not in proc.stderr, err
    named = err[0].split("the last finite weights are in ")[1].rstrip(")")
    import torch

    state = torch.load(tmp_path / named, map_location="cpu", weights_only=False)["state_dict"]
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())
    runs = [json.loads(p.read_text()) for p in (tmp_path / "runs/digits/hamu").glob("version_*/run.json")]
    assert [r["status"] for r in runs] == ["failed"]  # the run folder is kept, and says what happened


def test_a_reader_that_closes_early_gets_no_traceback(tmp_path, subprocess_env):
    proc = subprocess.run(f"{sys.executable} -m lit_unlearn.cli --help | head -1", shell=True, cwd=tmp_path,
                          env=subprocess_env, capture_output=True, text=True, timeout=120)
    assert proc.stdout.startswith("usage: lit-unlearn") and "Traceback" not in proc.stderr and \
        "BrokenPipe" not in proc.stderr, proc.stderr
