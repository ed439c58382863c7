"""Every package folder is listed in setup.py, so a non-editable install has all of it (the editable install
the tests use would hide a missing one)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_setup_lists_every_package():
    tree = ast.parse((ROOT / "setup.py").read_text())
    listed = next(ast.literal_eval(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PACKAGES")
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "lit_unlearn").rglob("__init__.py")}
    assert found - set(listed) == set(), "add these to PACKAGES in setup.py"
