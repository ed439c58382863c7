"""Packaged configs laid out by kind (lit_unlearn.storage.packaged_files): every config sits in a kind's folder, a base is
only ever extended, each command lists and accepts only its kinds (a wrong kind is one line naming the command
that runs it), and `lit-unlearn configs` says which command runs which. The command line is called in-process."""

from pathlib import Path

import pytest

from lit_unlearn.cli import main
from lit_unlearn.launch.presets import extends_of
from lit_unlearn.storage.packaged_files import KINDS, config_kind, list_configs, packaged_config

ROOT = Path(__file__).resolve().parents[1]


def cli(argv, capsys):
    """(exit code, stdout, stderr) of `lit-unlearn ARGV`, run in this process."""
    try:
        main(list(argv))
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_every_config_sits_in_a_kind_folder_and_bases_are_only_extended():
    files = sorted((ROOT / "configs").rglob("*.yaml"))
    assert len(files) == len(list_configs()) and files
    for path in files:
        kind = path.relative_to(ROOT / "configs").parts[0]
        assert kind in KINDS and config_kind(path.stem) == kind, path
    for name in list_configs():
        parent = extends_of(packaged_config(name))
        if parent is not None:
            assert config_kind(parent) == "base", (name, parent)  # extends only bases
    extended = {extends_of(packaged_config(n)) for n in list_configs()}
    assert set(list_configs("base")) <= extended  # and every base is extended by something
    assert {k for k in KINDS if list_configs(k)} == set(KINDS)


@pytest.mark.parametrize("argv, needles", [
    (["unlearn", "--preset", "digits_pretrain"], ["'digits_pretrain' is trains a target", "lit-unlearn pretrain --preset digits_pretrain"]),
    (["pretrain", "--preset", "tofu_tiny_hamu"], ["lit-unlearn unlearn --preset tofu_tiny_hamu"]),
    (["tofu-demo", "--preset", "tofu_tiny_unlearn"], ["`# extends:`"]),
    (["bench", "--preset", "tofu_tiny_hamu"], ["not a config for `lit-unlearn bench`"]),
    (["experiment", "--preset", "bench_tofu_tiny"], ["lit-unlearn bench --preset bench_tofu_tiny"]),
    (["unlearn", "--preset", "tofu_tiny_hamm"], ["did you mean 'tofu_tiny_hamu'"]),
], ids=lambda x: " ".join(x) if isinstance(x, list) and x and x[0] in ("unlearn", "pretrain", "tofu-demo", "bench", "experiment") else "")
def test_a_command_accepts_only_its_kinds_and_says_which_command_runs_the_config(argv, needles, capsys):
    code, out, err = cli(argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)


def test_help_lists_only_the_commands_kinds_and_configs_says_who_runs_what(capsys):
    _, unlearn_help, _ = cli(["unlearn", "--help"], capsys)
    presets = unlearn_help.split("presets (--preset NAME):")[1]
    assert "tofu_tiny_hamu" in presets and "bench_tofu_tiny" not in presets and "digits_pretrain" not in presets
    _, bench_help, _ = cli(["bench", "--help"], capsys)
    assert "bench_muse_tiny" in bench_help and "tofu_tiny_hamu" not in bench_help
    _, listing, _ = cli(["configs"], capsys)
    assert "bench: a benchmark of every LLM method (lit-unlearn bench --preset NAME)" in listing
    assert "base: shared settings for `# extends:` (named by `# extends:` lines only)" in listing
    assert str(Path("configs/unlearn/tofu_tiny/tofu_tiny_hamu.yaml")) in listing
    _, only, _ = cli(["configs", "--kind", "pretrain"], capsys)
    assert "digits_pretrain" in only and "tofu_tiny_hamu" not in only
