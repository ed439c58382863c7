"""Every package folder is listed in setup.py, so a non-editable install has all of it (the editable install
the tests use would hide a missing one)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_setup_lists_every_package():
    tree = ast.parse((ROOT / "setup.py").read_text())
    listed = next(ast.literal_eval(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PACKAGES")
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "lit_unlearn").rglob("__init__.py")}
    assert found - set(listed) == set(), "add these to PACKAGES in setup.py"


@pytest.mark.slow
def test_a_wheel_installed_elsewhere_has_the_callbacks_configs_and_data_and_runs_from_another_folder(tmp_path):
    """A non-editable install (a built wheel, unpacked into its own folder) carries lit_unlearn.callbacks and
    lit_unlearn.configs (which live outside lit_unlearn/ in the repository), every config kind, the TOFU release and
    the calibrated δ, and works from a folder that is not the repository."""
    import subprocess
    import sys
    import zipfile

    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
                    str(ROOT)], check=True, capture_output=True, timeout=300)
    wheel = next(wheels.glob("lit_unlearn-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("lit_unlearn/callbacks/holdout_verification.py", "lit_unlearn/configs/unlearn/tofu_tiny/"
                   "tofu_tiny_hamu.yaml", "lit_unlearn/configs/bench/bench_tofu_tiny.yaml",
                   "lit_unlearn/data/tofu_release/tofu.tar.xz", "lit_unlearn/verification/holdout_delta.json",
                   "lit_unlearn/launch/__init__.py", "lit_unlearn/worlds/__init__.py"):
        assert needed in names, needed
    from lit_unlearn.worlds.prebuilt_world import PREBUILT  # the world tofu-demo copies instead of training it

    shipped = sorted(p.relative_to(PREBUILT.parent.parent.parent).as_posix() for p in PREBUILT.rglob("*") if p.is_file())
    assert len(shipped) >= 18 and set(shipped) <= set(names), sorted(set(shipped) - set(names))
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = ("import lit_unlearn, lit_unlearn.callbacks as c; from lit_unlearn.storage.packaged_files import packaged_config; "
            "from lit_unlearn.verification.holdout_calibration import calibrated_margins; "
            "from lit_unlearn.data.tofu_release import load_release; "
            "print(lit_unlearn.__file__); print(packaged_config('tofu_tiny_hamu')); print(calibrated_margins('01')); "
            "print(len(load_release()['forget01'])); print(c.HoldoutVerification.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(site)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.splitlines()
    from lit_unlearn.verification.holdout_calibration import calibrated_margins
    assert out[0].startswith(str(site)) and out[1].startswith(str(site)) and out[3] == "40", out
    assert out[2] == str(calibrated_margins("01")), out  # the packaged margins are the repository's
    cli = subprocess.run([sys.executable, "-m", "lit_unlearn", "configs", "--kind", "bench"], cwd=elsewhere,
                         capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "PYTHONPATH": str(site)})
    assert cli.returncode == 0 and "bench_tofu_tiny" in cli.stdout and str(site) in cli.stdout, cli.stderr[-2000:]
