"""`lit-unlearn`: the dispatcher. It finds the commands (`lit_unlearn.commands`), parses each one way, and turns
user errors into one line.

    lit-unlearn --help                       every command, with its purpose, and the packaged presets
    lit-unlearn COMMAND --help               one command's options (never starts any work)
    lit-unlearn [--verbose] [--debug] COMMAND ...

Function commands are parsed from their entry point's signature (jsonargparse: `--help`, `--config FILE`, `--name
value` / `--name=value`, dashes or underscores); training commands take their own options, then LightningCLI's
(`lit_unlearn.launch.arguments`). A user error (a bad value, a missing file, an unknown key) is one line on
stderr and exit code 2; `--debug` shows its traceback. Errors that are the tool's own fault keep their traceback.
`--verbose` shows the libraries' info lines and warnings that are hidden by default (lit_unlearn.core.quiet). Nothing
heavy (Lightning, torch, transformers) is imported before a command runs.
"""

from __future__ import annotations

import difflib
import inspect
import sys
import textwrap
from collections.abc import Sequence

from lit_unlearn.commands import Command, all_commands
from lit_unlearn.core.errors import RunFailed, UserError, did_you_mean, user_error_message

__all__ = ["main", "top_help", "command_help", "parse_function_arguments"]


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return f"lit-unlearn {installed('lit-unlearn')}"
    except PackageNotFoundError:
        return "lit-unlearn (not installed: running from a checkout)"


def top_help(commands: dict[str, Command]) -> str:
    from lit_unlearn.launch.presets import describe_configs
    from lit_unlearn.storage.packaged_files import KINDS

    lines = ["usage: lit-unlearn [--verbose] [--debug] [--version] COMMAND [options]", "",
             "Machine unlearning with PyTorch Lightning: HAMU, OFMU and the baselines, verified against a model",
             "retrained without the forget set (vision) or against holdout data it never saw (LLMs).", "", "commands:"]
    width = max(len(n) for n in commands)
    lines += [f"  {name:{width}s}  {cmd.purpose}" for name, cmd in commands.items()]
    lines += ["", "presets (--preset NAME), by the command that runs them (`lit-unlearn configs` shows their paths):"]
    for kind, (_, runners) in KINDS.items():
        if runners:
            lines.append(f"  {' / '.join(runners)}:")
            lines += [f"    {name:30s} {purpose}" for name, _, purpose, _ in describe_configs(kind)]
    lines += ["", "options:", "  --verbose    show the libraries' own info lines and warnings (hidden by default)",
              "  --debug      show the traceback of user errors", "  --version    show the version", "",
              "`lit-unlearn COMMAND --help` shows a command's options. Docs: README.md and docs/."]
    return "\n".join(lines)


# ----- function commands: the entry point's signature is the command line -------------------------------------------
def _parser(cmd: Command):
    from jsonargparse import ActionConfigFile, ArgumentParser

    doc = inspect.getdoc(cmd.run) or ""
    description = doc.split("\n\nArgs:")[0].strip() or cmd.purpose
    epilog = "\n".join(["examples:", *[f"  {e}" for e in cmd.examples]]) if cmd.examples else None
    parser = ArgumentParser(prog=f"lit-unlearn {cmd.name}", description=description, epilog=epilog,
                            exit_on_error=False, default_env=False)
    if "config" not in inspect.signature(cmd.run).parameters:  # a command's own --config (a spec file) wins
        parser.add_argument("--config", action=ActionConfigFile, help="read the options from a YAML file")
    parser.add_function_arguments(cmd.run, fail_untyped=True, as_group=False)
    return parser


def parse_function_arguments(cmd: Command, argv: Sequence[str]) -> dict:
    """The keyword arguments of a function command's entry point, from its command line."""
    from lit_unlearn.launch.arguments import options_of, positional_as_options, spelled_for_jsonargparse

    parser = _parser(cmd)
    options = options_of(cmd.run, training=False)
    if cmd.positional:
        argv = positional_as_options(argv, options, cmd.positional)
    try:
        config = parser.parse_args(spelled_for_jsonargparse(argv, options))
    except Exception as err:  # noqa: BLE001 - jsonargparse raises ArgumentError (or its own) with a plain message
        raise UserError(_argument_error(cmd, str(err))) from None
    values = config.as_dict()
    params = inspect.signature(cmd.run).parameters
    if "config" not in params:
        values.pop("config", None)  # the options file itself (--config), already read into the values
    return {k: v for k, v in values.items() if k in params}


def _argument_error(cmd: Command, message: str) -> str:
    message = " ".join(message.split())
    names = list(inspect.signature(cmd.run).parameters)
    if "unrecognized arguments" in message:
        bad = [a.split("=")[0].lstrip("-") for a in message.split(":", 1)[1].split() if a.startswith("--")]
        close = [c for b in bad for c in difflib.get_close_matches(b, names, n=1)]
        hint = f" (did you mean --{close[0]}?)" if close else ""
        return (f"{message}{hint}; `lit-unlearn {cmd.name}` takes "
                + ", ".join(f"--{n}" for n in names) + " and --config")
    return message + f" (see `lit-unlearn {cmd.name} --help`)"


# ----- training commands: own options, then LightningCLI ------------------------------------------------------------
def training_options(cmd: Command):
    from lit_unlearn.launch.arguments import PRESET, TARGET, Option, options_of

    shared = []
    if cmd.preset is not None:
        shared.append(Option(PRESET.name, PRESET.help + f" (default {cmd.preset})", PRESET.metavar,
                             default=cmd.preset))
    if cmd.target:
        shared.append(TARGET)
    return shared + options_of(cmd.run)


WIDTH = 118  # help text is wrapped to this many columns


def _wrapped(label: str, text: str, indent: int = 26) -> list[str]:
    """An option's line: its label, then its help wrapped under the help column."""
    first = f"  {label:{indent - 2}s}" if len(label) < indent - 3 else f"  {label}\n" + " " * indent
    lines = textwrap.wrap(text, WIDTH - indent) or [""]
    return (first + lines[0]).split("\n") + [" " * indent + line for line in lines[1:]]


def _choices(cmd: Command, name: str) -> str | None:
    import typing

    annotation = inspect.signature(cmd.run).parameters[name].annotation
    hints = typing.get_type_hints(cmd.run) if isinstance(annotation, str) else {}
    kind = hints.get(name, annotation)
    args = typing.get_args(kind)
    if typing.get_origin(kind) is typing.Literal:
        return "{" + ",".join(map(str, args)) + "}"
    return None


def command_help(cmd: Command) -> str:
    """One layout for every command: usage, what it does, its options (one spelling each, defaults shown), the
    LightningCLI part of a training command, its presets by kind, and its examples one per line."""
    from lit_unlearn.launch.arguments import options_of

    options = training_options(cmd) if cmd.training else options_of(cmd.run, training=False)
    positional = [o for o in options if o.name in cmd.positional]
    named = [o for o in options if o.name not in cmd.positional]
    required = {n for n, p in inspect.signature(cmd.run).parameters.items() if p.default is inspect.Parameter.empty
                and not (cmd.training and n in ("preset", "target"))}  # a training command's preset has a default
    usage = [f"{o.name.upper()}" for o in positional]
    usage += [o.usage() if o.name in required else f"[{o.usage()}]" for o in named]
    own_config = "config" in inspect.signature(cmd.run).parameters  # a command's own --config (a spec file) wins
    tail = " [--config FILE] [--KEY=VALUE ...]" if cmd.training else "" if own_config else " [--config FILE]"
    doc = (inspect.getdoc(cmd.run) or cmd.purpose).split("\n\nArgs:")[0]
    head = f"usage: lit-unlearn {cmd.name} "
    words = " ".join(u.replace(" ", "\u00a0") for u in usage) + tail.replace("E ", "E\u00a0", 1)  # no break in "--x X"
    lines = [*(line.replace("\u00a0", " ") for line in textwrap.wrap(words, WIDTH, initial_indent=head,
                                                                    subsequent_indent=" " * len(head),
                                                                    break_on_hyphens=False)), "", doc, ""]
    if positional:
        lines.append("arguments:")
        for o in positional:
            lines += _wrapped(o.name.upper(), o.help)
        lines.append("")
    lines.append("options:")
    for o in named:
        choices = None if cmd.training else _choices(cmd, o.name)
        label = (o.spelling.replace("--", "--[no-]", 1) if o.default else o.spelling) if o.flag else \
            f"{o.spelling} {choices or o.metavar}"
        default = "" if o.name in required or o.default is None or o.flag else f" (default: {o.default})"
        lines += _wrapped(label, (o.help or "") + default)
    if cmd.training:
        lines += _wrapped("--config FILE", "a LightningCLI config (repeatable; its `# extends:` chain comes first)")
        lines += _wrapped("--ckpt_path P", "resume: 'last' (this configuration's unfinished run), 'auto' (resume if "
                                           "possible, else start anew) or a checkpoint path")
        lines += _wrapped("--print_config", "print the whole config (keep it as your YAML) and stop")
        lines += _wrapped("--KEY=VALUE", "any LightningCLI override, e.g. --model.init_args.eta=0.05 "
                                         "--trainer.max_steps=200")
        lines += _wrapped("--help-all", "every LightningCLI option of the preset (loads Lightning)")
    elif not own_config:
        lines += _wrapped("--config FILE", "read the options from a YAML file")
    lines += _wrapped("-h, --help", "show this help")
    lines += _presets_help(cmd)
    if cmd.examples:
        lines += ["", "examples:", *[f"  {e}" for e in cmd.examples]]
    return "\n".join(lines) + "\n"


def _presets_help(cmd: Command) -> list[str]:
    """The packaged configs this command accepts as --preset, grouped by kind."""
    from lit_unlearn.launch.presets import describe_configs, kinds_for
    from lit_unlearn.storage.packaged_files import KINDS

    out = []
    for kind in kinds_for(cmd.name):
        rows = [(name, purpose) for name, _, purpose, _ in describe_configs(kind)]
        if rows:
            out += [f"  {kind} ({KINDS[kind][0]}):", *[f"    {name:34s} {purpose}" for name, purpose in rows]]
    return ["", "presets (--preset NAME):", *out] if out else []


def run_command(cmd: Command, argv: list[str]) -> None:
    if any(a in ("-h", "--help") for a in argv):
        print(command_help(cmd), end="")
        return
    if not cmd.training:
        cmd.run(**parse_function_arguments(cmd, argv))
        return
    from lit_unlearn.launch.arguments import split_options

    values, rest = split_options(argv, training_options(cmd))
    if cmd.preset is not None and not _named(argv, "--preset") and _extending_config(rest):
        values["preset"] = None  # a config that names what it extends is whole: the default preset is not beneath it
    if values.get("preset"):
        from lit_unlearn.launch.presets import check_preset

        check_preset(values["preset"], cmd.name)
    if "--help-all" in rest:
        from lit_unlearn.launch.lightning_cli import print_lightning_help

        print_lightning_help(values.get("preset"), [a for a in rest if a != "--help-all"])
        return
    cmd.run(rest, **values)


def _named(argv: Sequence[str], option: str) -> bool:
    return any(a == option or a.startswith(option + "=") for a in argv)


def _extending_config(argv: Sequence[str]) -> bool:
    """Whether a `--config FILE` among the arguments has an `# extends:` line."""
    from pathlib import Path

    from lit_unlearn.launch.presets import extends_of

    files = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--config"]
    files += [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]
    return any(Path(f).is_file() and extends_of(f) for f in files)


def main(argv: list[str] | None = None) -> None:
    try:
        _main(argv)
    except BrokenPipeError:  # a reader that closed early (`lit-unlearn --help | head`): not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        sys.exit(0)


def _main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose, debug = "--verbose" in argv, "--debug" in argv
    argv = [a for a in argv if a not in ("--verbose", "--debug")]
    commands = all_commands()
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(top_help(commands))
        return
    if argv[0] == "--version":
        print(version())
        return
    name, rest = argv[0], argv[1:]
    if not verbose:
        from lit_unlearn.core.quiet import silence_library_noise

        silence_library_noise()
    try:
        if name not in commands:
            raise UserError(f"unknown command {name!r}{did_you_mean(name, commands)}; `lit-unlearn --help` lists them")
        run_command(commands[name], rest)
        if "torch.distributed" in sys.modules:
            from lit_unlearn.distributed.shutdown import release_process_group

            release_process_group()  # a finished multi-process run exits cleanly instead of aborting at shutdown
    except (KeyboardInterrupt, SystemExit, BrokenPipeError):
        raise
    except RunFailed as err:
        if debug:
            raise
        print(f"lit-unlearn {name}: run failed: {err}", file=sys.stderr, flush=True)
        sys.exit(1)
    except BaseException as err:  # noqa: BLE001 - user errors become one line; the rest keep their traceback
        message = user_error_message(err)
        if message is None or debug:
            raise
        print(f"lit-unlearn {name}: error: {message}", file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
