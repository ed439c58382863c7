"""One command-line style: every command's help has the same layout (usage, what it does, options with one spelling
each and their defaults, presets grouped by kind, examples one per line), option names are spelled with dashes,
shared options default alike across commands, and `--version` answers. Called in this process."""

from __future__ import annotations

import inspect
import re

import pytest

from lit_unlearn.cli import command_help, main
from lit_unlearn.commands import all_commands

COMMANDS = all_commands()


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_has_the_one_layout(name):
    cmd = COMMANDS[name]
    text = command_help(cmd)
    lines = text.splitlines()
    assert lines[0].startswith(f"usage: lit-unlearn {name}")
    assert "options:" in lines and "  -h, --help              show this help" in lines
    sections = [line for line in lines if re.fullmatch(r"[a-z ()\-]+[a-z)]:", line)]
    assert sections[0] in ("arguments:", "options:") and len(sections) == len(set(sections)), sections
    own = [n for i, n in enumerate(inspect.signature(cmd.run).parameters) if not (cmd.training and i == 0)]
    options = text.split("\noptions:\n", 1)[1]
    for param in own:
        if param in cmd.positional:
            assert f"  {param.upper()}" in text
            continue
        spelled = "--" + param.replace("_", "-")
        assert re.search(rf"^  ({re.escape(spelled)}|--\[no-\]{re.escape(spelled[2:])})\b", options, re.M), \
            (name, spelled)
    own_spellings = re.findall(r"^  (--[\w\-]+)", options, re.M)
    assert len(own_spellings) == len(set(own_spellings)), own_spellings  # one line per option (bench's --config)
    usage = text.split("\n\n", 1)[0]
    in_usage = re.findall(r"\[(--[\w\-]+)", usage)
    assert len(in_usage) == len(set(in_usage)), in_usage
    lightning = {"--ckpt_path", "--print_config"}  # LightningCLI's own spelling
    assert all("_" not in s for s in own_spellings if s not in lightning), own_spellings
    if cmd.examples:
        examples = text.split("\nexamples:\n", 1)[1].splitlines()
        assert examples == [f"  {e}" for e in cmd.examples]
        assert all(e.startswith(f"lit-unlearn {name}") for e in cmd.examples)
    if "presets (--preset NAME):" in text:
        after = text.split("presets (--preset NAME):\n", 1)[1].splitlines()
        assert re.fullmatch(r"  \w+ \(.+\):", after[0]), after[0]  # grouped by kind


def test_the_shared_options_default_alike_and_version_answers(capsys):
    levels = {name: inspect.signature(COMMANDS[name].run).parameters["level"].default
              for name in ("audit", "tofu-eval", "tofu-demo")}
    assert set(levels.values()) == {"01"}, levels
    main(["--version"])
    assert re.match(r"lit-unlearn \S+", capsys.readouterr().out)
