"""The house rules, checked on the source: no import cycle among the project's modules, no import from a lower
layer to a higher one (docs/guide/architecture.md), the command line's help paths import nothing heavy, and adding a
command is one file in lit_unlearn/commands."""

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Lowest first. A module may import its own layer and the layers below it, never one above.
LAYERS = [
    ("base", ["core", "storage", "reporting", "__init__"]),
    ("algorithms", ["algorithms"]),
    ("data, models, metrics, verification", ["data", "models", "metrics", "distributed", "verification"]),
    ("modules", ["modules"]),
    ("callbacks", ["callbacks"]),
    ("launch", ["launch"]),
    ("worlds", ["worlds"]),
    ("bench, experiments, audit, distill", ["bench", "experiments", "audit", "distill"]),
    ("commands", ["commands"]),
    ("dispatcher", ["cli", "__main__"]),
]
LAYER_OF = {part: i for i, (_, parts) in enumerate(LAYERS) for part in parts}


def _module_files() -> dict[str, Path]:
    files = {}
    for path in (REPO / "lit_unlearn").rglob("*.py"):
        rel = path.relative_to(REPO).with_suffix("")
        files[".".join(rel.parts).removesuffix(".__init__")] = path
    for path in (REPO / "callbacks").glob("*.py"):  # installed as lit_unlearn.callbacks
        files[f"lit_unlearn.callbacks.{path.stem}".removesuffix(".__init__")] = path
    return files


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The project modules `path` imports, at any depth of the file (lazy imports count too)."""
    out = set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            # `from package import submodule` imports the submodule; `from module import name` the module.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name and t.startswith("lit_unlearn"):
                out.add(t)
    return out


def _graph():
    files = _module_files()
    return {name: _imports(path, name, set(files)) for name, path in files.items()}


def _layer(module: str) -> int:
    part = module.split(".")[1] if module.count(".") else "__init__"
    return LAYER_OF[part]


def test_the_package_root_holds_only_the_dispatcher():
    dispatcher = ["__init__.py", "__main__.py", "cli.py"]
    loose = sorted(p.name for p in (REPO / "lit_unlearn").glob("*.py"))
    assert loose == dispatcher, f"put these in the folder of their layer (docs/guide/architecture.md): {set(loose) - set(dispatcher)}"


def test_every_module_has_a_layer():
    missing = sorted({m.split(".")[1] for m in _graph() if m.count(".") and m.split(".")[1] not in LAYER_OF})
    assert not missing, f"give these a layer in LAYERS and docs/guide/architecture.md: {missing}"


def _upward(graph) -> list[str]:
    return [f"{a} ({LAYERS[_layer(a)][0]}) imports {b} ({LAYERS[_layer(b)][0]})"
            for a, deps in graph.items() for b in deps if _layer(b) > _layer(a)]


def _cycles(graph) -> list[list[str]]:
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return cycles


def test_no_import_goes_up_a_layer():
    up = _upward(_graph())
    assert not up, "\n".join(up)


def test_no_import_cycle():
    cycles = _cycles(_graph())
    assert not cycles, cycles


def test_the_checks_find_a_planted_cycle_and_upward_import():
    graph = _graph()
    assert "lit_unlearn.core.errors" in graph["lit_unlearn.cli"]  # the dispatcher imports the errors module
    graph["lit_unlearn.core.errors"] = graph["lit_unlearn.core.errors"] | {"lit_unlearn.cli"}  # planted: base → dispatcher
    assert _upward(graph) == ["lit_unlearn.core.errors (base) imports lit_unlearn.cli (dispatcher)"]
    assert any({"lit_unlearn.cli", "lit_unlearn.core.errors"} <= set(c) for c in _cycles(graph))


@pytest.mark.parametrize("args", [["--help"], ["configs"], ["tofu-eval", "--help"], ["unlearn", "--help"],
                                  ["bench", "--help"], ["tofu-demo", "--help"]])
def test_help_and_listing_import_nothing_heavy(args, tmp_path):
    """`lit-unlearn --help`, `configs` and every COMMAND --help never load Lightning, torch or transformers."""
    code = ("import sys; from lit_unlearn.cli import main\n"
            f"main({args!r})\n"
            "heavy = [m for m in ('torch', 'lightning', 'transformers', 'deepspeed') if m in sys.modules]\n"
            "print('HEAVY', heavy)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "HEAVY []" in proc.stdout, proc.stdout[-500:]
    assert not any(tmp_path.iterdir())  # no run folder, no cache, no file


def test_adding_a_command_is_one_file(tmp_path):
    """A new file in the commands package is listed, documented and parsed without touching anything else. The file
    goes into a folder of its own that the subprocess adds to the package's path (the registry walks `__path__`),
    so the repository is never written while other tests read it."""
    extra = tmp_path / "more_commands"
    extra.mkdir()
    (extra / "zz_hello.py").write_text('from lit_unlearn.commands import command\n\n\n'
                                       '@command("hello", "say hello")\n'
                                       'def hello(name: str = "world", times: int = 1) -> None:\n'
                                       '    """Say hello.\n\n    Args:\n        name: who\n        times: how often\n    """\n'
                                       '    print(("hello " + name + " ") * times)\n')
    launcher = tmp_path / "launch.py"
    launcher.write_text("import sys\nimport lit_unlearn.commands as commands\n"
                        f"commands.__path__.append({str(extra)!r})\n"
                        "from lit_unlearn.cli import main\nmain(sys.argv[1:])\n")
    run = lambda *a: subprocess.run([sys.executable, str(launcher), *a], cwd=tmp_path,  # noqa: E731
                                    capture_output=True, text=True, timeout=60)
    assert "say hello" in run("--help").stdout
    assert "--times" in run("hello", "--help").stdout
    assert run("hello", "--name=you", "--times", "2").stdout.strip() == "hello you hello you"
    bad = run("hello", "--tims", "2")
    assert bad.returncode == 2 and "did you mean --times" in bad.stderr, bad.stderr
    assert not (REPO / "lit_unlearn" / "commands" / "zz_hello.py").exists()


def _plug_names() -> dict[str, set[str]]:
    """The names each side offers the other: the methods the callbacks' classes define (read by modules), the
    modules' (read by callbacks), and every plug point's members (read by either)."""
    import lit_unlearn.core.plug_points as plugs

    def defined(paths):
        return {n.name for p in paths for n in ast.walk(ast.parse(p.read_text()))
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("__")}

    import lightning.pytorch as pl

    lightning = set(dir(pl.Callback)) | set(dir(pl.LightningModule))  # Lightning's own hooks are not plugs
    members = {name for proto in vars(plugs).values() if isinstance(proto, type) and proto.__module__ == plugs.__name__
               for name in [*proto.__dict__, *getattr(proto, "__annotations__", {})] if not name.startswith("_")}
    callbacks, modules = sorted((REPO / "callbacks").glob("*.py")), sorted((REPO / "lit_unlearn/modules").glob("*.py"))
    return {"callbacks": (defined(modules) | members) - lightning, "modules": (defined(callbacks) | members) - lightning}


def _found_by_shape(source: str, names: set[str]) -> list[str]:
    """hasattr(x, "name") and getattr(x, "name", default) calls whose name is another side's plug."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in names
                and (node.func.id == "hasattr" or len(node.args) == 3)):
            hits.append(f"{node.func.id}(…, {node.args[1].value!r}) at line {node.lineno}")
    return hits


_RUN_PARTS = ("pl_module", "trainer", "cb", "callback", "callbacks", "module", "datamodule")


def _probes_a_part(source: str) -> list[str]:
    """hasattr(part, …) and getattr(part, "name", default) where `part` is a module, the trainer, a callback or the
    datamodule: an attribute looked for instead of a plug point declared, whatever its name."""
    import re

    part = re.compile(rf"\b({'|'.join(_RUN_PARTS)})\b")
    return [f"{ast.unparse(node)} at line {node.lineno}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr")
            and len(node.args) >= 2 and (node.func.id == "hasattr" or len(node.args) == 3)
            and part.search(ast.unparse(node.args[0]))]


def test_no_callback_or_module_probes_a_part_of_the_run_for_an_attribute():
    found = {p.name: hits for folder in (REPO / "callbacks", REPO / "lit_unlearn/modules")
             for p in sorted(folder.glob("*.py")) if (hits := _probes_a_part(p.read_text()))}
    assert not found, f"declare a Protocol in lit_unlearn.core.plug_points and read it with as_plug/plug_point: {found}"
    planted = 'def on_train_end(self, trainer, pl_module):\n    step = getattr(pl_module, "last_step", None)\n'
    assert _probes_a_part(planted) == ["getattr(pl_module, 'last_step', None) at line 2"]


def test_modules_and_callbacks_find_each_other_through_declared_plug_points_only():
    """No module finds a callback, and no callback a module, by probing for an attribute
    (lit_unlearn.core.plug_points: the offering class declares the Protocol, `plug_point` finds it)."""
    names = _plug_names()
    assert {"holdout_loss", "holdout_token_profile", "loss_goal", "quota_policy", "rho"} <= names["modules"]
    found = {f"{side}/{p.name}": hits for side, folder in (("callbacks", REPO / "callbacks"),
                                                            ("modules", REPO / "lit_unlearn/modules"))
             for p in sorted(folder.glob("*.py")) if (hits := _found_by_shape(p.read_text(), names[side]))}
    assert not found, found
    planted = 'def setup(self):\n    src = next(cb for cb in self.trainer.callbacks if hasattr(cb, "holdout_loss"))\n'
    assert _found_by_shape(planted, names["modules"]) == ["hasattr(…, 'holdout_loss') at line 2"]


def test_a_missing_plug_point_is_one_line_at_the_start_of_fit():
    from lightning.pytorch.callbacks import Callback

    from lit_unlearn.callbacks import HoldoutVerification, QuotaController, RhoScheduler, StopAtTarget
    from lit_unlearn.core.errors import UserError
    from lit_unlearn.core.plug_points import (ForgetLossGoal, HoldoutLossSource, HoldoutProfileSource, QuotaSteered,
                                         RhoScheduled, declares, plug_point)

    class LooksLikeOne(Callback):  # the shape without the declaration is not a plug
        def holdout_loss(self, trainer=None, pl_module=None):
            return 1.0

    with pytest.raises(UserError) as err:
        plug_point([LooksLikeOne()], HoldoutLossSource, "HAMU forget_ceiling='holdout'",
                   "add lit_unlearn.callbacks.HoldoutVerification to trainer.callbacks")
    assert "\n" not in str(err.value) and "HoldoutVerification" in str(err.value)
    assert declares(HoldoutVerification.__new__(HoldoutVerification), HoldoutLossSource)
    assert HoldoutProfileSource in HoldoutVerification.__mro__ and ForgetLossGoal in StopAtTarget.__mro__
    from lit_unlearn.modules import GAModule, HAMUModule, OFMUModule

    assert QuotaSteered in HAMUModule.__mro__ and RhoScheduled in OFMUModule.__mro__
    with pytest.raises(UserError, match="QuotaController needs a module whose forget quota .*a QuotaSteered"):
        QuotaController(goal=1.0).setup(None, GAModule.__new__(GAModule), "fit")
    with pytest.raises(UserError, match="RhoScheduler needs a module whose penalty weight .*a RhoScheduled"):
        RhoScheduler().setup(None, GAModule.__new__(GAModule), "fit")


# sha256 (first 16 hex digits) of the source of LightningCLI.instantiate_trainer, _instantiate_trainer, _parser and
# _get in lightning 2.6.6, the version setup.py pins.
LIGHTNING_CLI_PRIVATE_SOURCE = "43b8cb788939f0f6"


def test_the_private_lightning_cli_api_we_mirror_is_the_pinned_one():
    """UnlearnCLI.instantiate_trainer (lit_unlearn/launch/lightning_cli.py) gathers the Trainer's arguments and
    callbacks as LightningCLI.instantiate_trainer does, through its private `_parser` and `_get`, so that the one
    Trainer builder makes every Trainer: LightningCLI has no public hook that hands over the arguments and callbacks
    without building a Trainer. lightning is pinned (setup.py) and this fails when the mirrored code changes: re-read
    it, update UnlearnCLI.instantiate_trainer, then the pin and this hash."""
    import hashlib
    import inspect

    import lightning
    from lightning.pytorch.cli import LightningCLI

    assert 'lightning==2.6.6' in (REPO / "setup.py").read_text() and lightning.__version__ == "2.6.6"
    source = "".join(inspect.getsource(getattr(LightningCLI, name))
                     for name in ("instantiate_trainer", "_instantiate_trainer", "_parser", "_get"))
    assert hashlib.sha256(source.encode()).hexdigest()[:16] == LIGHTNING_CLI_PRIVATE_SOURCE


def test_the_spec_files_have_one_loader(tmp_path):
    """bench, experiment suite, audit and distillation configs are read by lit_unlearn.storage.specs.read_spec_file: none of
    their packages parses YAML itself, and each refuses a file that is not a mapping with the same one-line error."""
    from lit_unlearn.audit.spec import load_audit_spec
    from lit_unlearn.bench.spec import load_bench_spec
    from lit_unlearn.distill.spec import load_distill_spec
    from lit_unlearn.core.errors import UserError
    from lit_unlearn.experiments.suite import load_config

    for package in ("bench", "experiments", "audit", "distill"):
        for path in (REPO / "lit_unlearn" / package).glob("*.py"):
            assert "yaml.safe_load" not in path.read_text(), path
    bad = tmp_path / "list.yaml"
    bad.write_text("- a\n- b\n")
    for load, what in ((load_bench_spec, "bench config"), (load_config, "experiment config"),
                       (load_audit_spec, "audit config"), (load_distill_spec, "distill config")):
        with pytest.raises(UserError, match=f"a {what} is a mapping of keys"):
            load(bad)
    typo = tmp_path / "typo.yaml"
    typo.write_text("relearn_lr: [1.0e-4]\n")
    with pytest.raises(UserError, match="unknown key 'relearn_lr' \\(did you mean 'relearn_lrs'"):
        load_audit_spec(typo)


def test_the_shared_constructor_arguments_live_on_one_base():
    """target_ckpt, freeze_batchnorm and log_every_n_steps are UnlearningModule's, lr, optimizer, momentum and
    weight_decay ObjectiveUnlearningModule's: a method restates one only to give it another default, passes the rest
    on as **kwargs, and LightningCLI still offers every one of them."""
    from jsonargparse import ArgumentParser

    import lit_unlearn.modules as modules
    from lit_unlearn.modules.objective import ObjectiveUnlearningModule
    from lit_unlearn.modules.unlearning import UnlearningModule

    def defaults(cls):
        return {n: p.default for n, p in inspect.signature(cls.__init__).parameters.items()
                if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and n not in ("self", "network")}

    shared = {UnlearningModule: defaults(UnlearningModule), ObjectiveUnlearningModule: defaults(ObjectiveUnlearningModule)}
    methods = [cls for cls in vars(modules).values() if isinstance(cls, type) and issubclass(cls, UnlearningModule)
               and cls not in shared]
    assert len(methods) >= 14
    for cls in methods:
        base = ObjectiveUnlearningModule if issubclass(cls, ObjectiveUnlearningModule) else UnlearningModule
        inherited = {**shared[UnlearningModule], **(shared[base] if base is ObjectiveUnlearningModule else {})}
        own = defaults(cls) if "__init__" in vars(cls) else {}
        restated = {n: d for n, d in own.items() if n in inherited and d == inherited[n]}
        assert not restated, f"{cls.__name__} restates {sorted(restated)} with the base's default: pass it as **kwargs"
        parser = ArgumentParser(exit_on_error=False)
        parser.add_class_arguments(cls, "model", skip={"network"})
        offered = {a.dest.split(".", 1)[1] for a in parser._actions if a.dest.startswith("model.")}
        assert set(inherited) <= offered, f"{cls.__name__}: LightningCLI does not offer {set(inherited) - offered}"
