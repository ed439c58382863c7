"""The command line of the training commands, before LightningCLI sees it.

A training command (`pretrain`, `unlearn`, `demo`, `tofu-demo`, ...) takes its own few options and the shared
`--preset` / `--target` (declared once, here), in the `--name value` or `--name=value` form, and hands the rest to
LightningCLI after the preset's configs. Every `--config FILE` is replaced by its `# extends:` chain, so a user's
config that extends a preset is extended wherever its `# extends:` line stands in the header comment.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lit_unlearn.core.errors import UserError, did_you_mean
from lit_unlearn.launch.presets import config_chain

__all__ = ["Option", "PRESET", "TARGET", "options_of", "split_options", "spelled_for_jsonargparse",
           "positional_as_options",
           "lightning_arguments", "expand_config_arguments", "check_class_arguments"]


@dataclass(frozen=True)
class Option:
    """One `--name` option of a training command (`--name value`, `--name=value`; a flag takes no value)."""

    name: str
    help: str
    metavar: str = "VALUE"
    flag: bool = False
    default: Any = None
    convert: Callable[[str], Any] = str

    @property
    def spelling(self) -> str:
        return "--" + self.name.replace("_", "-")

    def usage(self) -> str:
        return self.spelling if self.flag else f"{self.spelling} {self.metavar}"


PRESET = Option("preset", "a packaged config (`lit-unlearn configs` lists them)", "NAME")
TARGET = Option("target", 'stop at a forget target and end on the weights closest to it, e.g. '
                '"forget_vs_retrain_auc <= 0.6", "ua within 0.05 of retrain", "forget_quality >= 0.05"', "TARGET")


def options_of(run: Callable, training: bool = True) -> list[Option]:
    """A command's own options, from its keyword parameters (a training command's after the first, which takes the
    LightningCLI arguments, and without the shared --preset/--target): a bool default makes a flag; the
    docstring's `Args:` lines give the help."""
    docs = _arg_docs(run.__doc__ or "")
    out = []
    for i, (name, p) in enumerate(inspect.signature(run).parameters.items()):
        if training and (i == 0 or name in ("preset", "target")):
            continue
        if p.kind not in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD):
            continue
        default = None if p.default is inspect.Parameter.empty else p.default
        flag = isinstance(default, bool)
        convert = type(default) if isinstance(default, (int, float)) and not flag else str
        out.append(Option(name, docs.get(name, ""), name.upper(), flag, default, convert))
    return out


def _arg_docs(doc: str) -> dict[str, str]:
    """{parameter: help} from a Google-style `Args:` section."""
    out: dict[str, str] = {}
    lines = inspect.cleandoc(doc).splitlines()
    inside, current = False, None
    for line in lines:
        if line.strip() == "Args:":
            inside = True
            continue
        if inside:
            if line and not line.startswith(" "):
                break
            text = line.strip()
            if ":" in text and text.split(":", 1)[0].isidentifier() and line.startswith("    ") and \
                    not line.startswith("        "):
                current, rest = text.split(":", 1)
                out[current] = rest.strip()
            elif current and text:
                out[current] += " " + text
    return out


FLAG_VALUES = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def positional_as_options(argv: Sequence[str], options: Sequence[Option], positional: Sequence[str]) -> list[str]:
    """`CKPT OUT --x 1` → `--checkpoint CKPT --out OUT --x 1`: bare arguments (not an option's value) take the
    positional parameters' names in order; more of them than names is a one-line error."""
    flags = {o.name for o in options if o.flag}
    out: list[str] = []
    bare: list[str] = []
    argv = list(argv)
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            out.append(arg)
            name = arg[2:].split("=")[0].replace("-", "_")
            takes_value = "=" not in arg and name not in flags and not (name.startswith("no_") and name[3:] in flags)
            if takes_value and i + 1 < len(argv):
                out.append(argv[i + 1])
                i += 1
        else:
            bare.append(arg)
        i += 1
    if len(bare) > len(positional):
        raise UserError(f"unexpected argument(s) {bare[len(positional):]}: this command takes "
                        + (" ".join(n.upper() for n in positional) or "no positional arguments"))
    return [a for name, value in zip(positional, bare) for a in (f"--{name}", value)] + out


def spelled_for_jsonargparse(argv: Sequence[str], options: Sequence[Option]) -> list[str]:
    """A function command's arguments as jsonargparse reads them: `--max-new-tokens` → `--max_new_tokens`, a bare
    flag `--fresh` → `--fresh=true`, `--no-fresh` → `--fresh=false` (the spellings split_options accepts too)."""
    flags = {o.name for o in options if o.flag}
    out: list[str] = []
    argv = list(argv)
    for i, arg in enumerate(argv):
        if not arg.startswith("--") or arg == "--":
            out.append(arg)
            continue
        name, eq, value = arg[2:].partition("=")
        name = name.replace("-", "_")
        if name in flags and not eq and (i + 1 >= len(argv) or argv[i + 1].lower() not in FLAG_VALUES):
            out.append(f"--{name}=true")
        elif name.startswith("no_") and name[3:] in flags and not eq:
            out.append(f"--{name[3:]}=false")
        else:
            out.append(f"--{name}" + (f"={value}" if eq else ""))
    return out


def split_options(argv: Sequence[str], options: Sequence[Option]) -> tuple[dict[str, Any], list[str]]:
    """(the options' values, the other arguments in order). Unknown `--x` go to LightningCLI untouched."""
    by_spelling = {s: o for o in options for s in {o.spelling, "--" + o.name}}
    values = {o.name: o.default for o in options}
    rest: list[str] = []
    i = 0
    argv = list(argv)
    while i < len(argv):
        arg = argv[i]
        name, eq, inline = arg.partition("=")
        option = by_spelling.get(name)
        if option is None:
            rest.append(arg)
            i += 1
            continue
        if option.flag:
            if eq:
                if inline.lower() not in FLAG_VALUES:
                    raise UserError(f"{option.spelling} is a flag: give it alone, or ={{true,false}}, not {arg!r}")
                values[option.name] = FLAG_VALUES[inline.lower()]
            else:
                values[option.name] = True
            i += 1
            continue
        if eq:
            raw, i = inline, i + 1
        elif i + 1 < len(argv):
            raw, i = argv[i + 1], i + 2
        else:
            raise UserError(f"{option.spelling} needs a value ({option.metavar}): {option.help}")
        try:
            values[option.name] = option.convert(raw)
        except ValueError:
            raise UserError(f"{option.spelling} {raw!r}: expected {option.convert.__name__}") from None
    return values, rest


def expand_config_arguments(argv: Sequence[str]) -> list[str]:
    """Every `--config FILE` (or `--config=FILE`) preceded by the configs its `# extends:` chain names."""
    out: list[str] = []
    i = 0
    argv = list(argv)
    while i < len(argv):
        arg = argv[i]
        if arg == "--config" and i + 1 < len(argv):
            path, i = argv[i + 1], i + 2
        elif arg.startswith("--config="):
            path, i = arg.split("=", 1)[1], i + 1
        else:
            out.append(arg)
            i += 1
            continue
        out += [a for p in config_chain(path) for a in ("--config", p)]
    return out


def lightning_arguments(preset: str | None, argv: Sequence[str]) -> list[str]:
    """LightningCLI arguments: the preset's config chain first, then the user's (configs expanded)."""
    head = [a for p in config_chain(preset) for a in ("--config", p)] if preset else []
    return head + expand_config_arguments(argv)


def constructor_arguments(cls: type) -> list[str] | None:
    """The arguments a class's constructor takes, following `**kwargs` up to the base that takes them (a method
    passes the shared arguments on to UnlearningModule / ObjectiveUnlearningModule so); None where the chain ends in
    an open `**kwargs` (any name may be meant)."""
    names: list[str] = []
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters
        names += [n for n, p in params.items() if n != "self" and n not in names
                  and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return names
    return None


def check_class_arguments(args: Sequence[str]) -> None:
    """`--model.init_args.NAME` and `--data.init_args.NAME` must name an argument of the class the configs (and the
    arguments) configure: a misspelt one is a one-line error with the closest name and the valid ones, instead of
    the config parser's "does not validate against any of the Union subtypes"."""
    import importlib
    import re

    import yaml

    args = list(args)
    class_path: dict[str, str] = {}
    for i, arg in enumerate(args):
        if arg == "--config" and i + 1 < len(args):
            try:
                cfg = yaml.safe_load(open(args[i + 1])) or {}
            except (OSError, yaml.YAMLError):
                continue  # the parser reports a bad config file itself
            for key in ("model", "data"):
                node = cfg.get(key) if isinstance(cfg, dict) else None
                if isinstance(node, dict) and isinstance(node.get("class_path"), str):
                    class_path[key] = node["class_path"]
        m = re.match(r"--(model|data)(?:\.class_path)?=([\w.]+)$", arg)
        if m:
            class_path[m.group(1)] = m.group(2)
    for arg in args:
        m = re.match(r"--(model|data)\.init_args\.([A-Za-z_]\w*)", arg)
        if not m or m.group(1) not in class_path or "." not in class_path[m.group(1)]:
            continue
        key, name = m.groups()
        module, _, cls_name = class_path[key].rpartition(".")
        try:
            names = constructor_arguments(getattr(importlib.import_module(module), cls_name))
        except (ImportError, AttributeError, ValueError, TypeError):
            continue  # the parser says what is wrong with the class itself
        if names is None:
            continue
        if name not in names:
            raise UserError(f"--{key}.init_args.{name}: {cls_name} has no argument {name!r}"
                            f"{did_you_mean(name, names)}; its arguments: "
                            + ", ".join(names))
