"""The house rules, checked on the source: no import cycle among the project's modules, no import from a lower
layer to a higher one (docs/architecture.md), the command line's help paths import nothing heavy, and adding a
command is one file in lit_unlearn/commands."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Lowest first. A module may import its own layer and the layers below it, never one above.
LAYERS = [
    ("base", ["errors", "console", "quiet", "hub", "eval_mode", "batches", "tensorboard", "trajectory_plot",
              "plotting", "files", "checkpoint_io", "checkpoints", "specs", "packaged_files", "process",
              "__init__"]),
    ("algorithms", ["algorithms"]),
    ("data, models, metrics, verification", ["results_tables", "data", "models", "metrics", "distributed",
                                              "verification"]),
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


def test_every_module_has_a_layer():
    missing = sorted({m.split(".")[1] for m in _graph() if m.count(".") and m.split(".")[1] not in LAYER_OF})
    assert not missing, f"give these a layer in LAYERS and docs/architecture.md: {missing}"


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
    assert "lit_unlearn.errors" in graph["lit_unlearn.cli"]  # the dispatcher imports the errors module
    graph["lit_unlearn.errors"] = graph["lit_unlearn.errors"] | {"lit_unlearn.cli"}  # planted: base → dispatcher
    assert _upward(graph) == ["lit_unlearn.errors (base) imports lit_unlearn.cli (dispatcher)"]
    assert any({"lit_unlearn.cli", "lit_unlearn.errors"} <= set(c) for c in _cycles(graph))


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
    """A new file in lit_unlearn/commands is listed, documented and parsed without touching anything else."""
    folder = REPO / "lit_unlearn" / "commands"
    added = folder / "zz_hello.py"
    added.write_text('from lit_unlearn.commands import command\n\n\n'
                     '@command("hello", "say hello")\n'
                     'def hello(name: str = "world", times: int = 1) -> None:\n'
                     '    """Say hello.\n\n    Args:\n        name: who\n        times: how often\n    """\n'
                     '    print(("hello " + name + " ") * times)\n')
    try:
        run = lambda *a: subprocess.run([sys.executable, "-m", "lit_unlearn", *a], cwd=tmp_path,  # noqa: E731
                                        capture_output=True, text=True, timeout=60)
        assert "say hello" in run("--help").stdout
        assert "--times" in run("hello", "--help").stdout
        assert run("hello", "--name=you", "--times", "2").stdout.strip() == "hello you hello you"
        bad = run("hello", "--tims", "2")
        assert bad.returncode == 2 and "did you mean --times" in bad.stderr, bad.stderr
    finally:
        added.unlink()
