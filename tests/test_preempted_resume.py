"""A pre-emption in the middle of a bench grid point or an experiment run stops the whole command at a step
boundary (exit 128 + signal, an hpc checkpoint written), and running the same command again resumes that run from
its checkpoint and ends with exactly the numbers of a command that was never interrupted: every run goes through
the one launch path (lit_unlearn.launch.runs)."""

import json
import shutil
import signal

import pytest

from signal_injector import SignalAt

pytestmark = pytest.mark.slow


def _signal_the_first_run_under(monkeypatch, folder, step):
    """From now on, the first run launched under `folder` (other than a target's training) receives SIGUSR1 inside
    the backward pass of `step`."""
    import importlib

    import lit_unlearn.launch.runs as runs

    # by module path: the package re-exports a function of the same name as this module
    experiment_runs = importlib.import_module("lit_unlearn.experiments.unlearning_run")

    real, fired = runs.prepare_launch, []

    def prepare_with_signal(spec):
        launched = real(spec)
        if not fired and str(spec.root).startswith(str(folder)) and "target" not in str(spec.root):
            fired.append(spec.root)
            launched.trainer.callbacks.append(SignalAt(step, "backward"))
        return launched

    monkeypatch.setattr(runs, "prepare_launch", prepare_with_signal)
    monkeypatch.setattr(experiment_runs, "prepare_launch", prepare_with_signal)  # imported by name there
    return fired


def _rows(path):
    return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in path.read_text().splitlines()]


def test_a_preempted_bench_resumes_its_grid_point_exactly(tmp_path, monkeypatch):
    from lit_unlearn.bench import load_bench_spec, run_bench

    def spec(out):
        cfg = tmp_path / f"{out}.yaml"
        cfg.write_text(f"""
out_dir: {tmp_path / out}
data: {{kind: generated, seed: 0, validation_seed: 1, n_authors: 10, epochs: 4}}
forget_levels: ["01", "05"]
seeds: [0]
steps: 4
batch_size: 8
max_new_tokens: 4
methods:
  GA: {{class_path: lit_unlearn.modules.GAModule, init_args: {{optimizer: adamw}}, grid: {{lr: [1.0e-3]}}}}
""")
        return load_bench_spec(cfg)

    straight = run_bench(spec("a"), log=lambda *a: None).parent
    for world in straight.glob("world_*"):  # the same worlds: only the unlearning runs are repeated
        shutil.copytree(world, tmp_path / "b" / world.name, symlinks=True)
    fired = _signal_the_first_run_under(monkeypatch, tmp_path / "b" / "runs", step=2)
    with pytest.raises(SystemExit) as stop:
        run_bench(spec("b"), log=lambda *a: None)
    assert stop.value.code == 128 + signal.SIGUSR1 and fired
    assert list(fired[0].glob("**/hpc_ckpt_*.ckpt"))  # the interrupted grid point kept its state
    assert not (tmp_path / "b" / "runs.jsonl").exists() or (len(_rows(tmp_path / "b" / "runs.jsonl"))
                                                             < len(_rows(straight / "runs.jsonl")))
    monkeypatch.undo()
    resumed = run_bench(spec("b"), log=lambda *a: None).parent
    assert _rows(resumed / "runs.jsonl") == _rows(straight / "runs.jsonl")


def test_a_preempted_experiment_resumes_its_run_exactly(tmp_path, monkeypatch):
    from lit_unlearn.experiments import run_suite
    from test_experiments import TINY

    cfg = {**TINY, "rhos": [0.5]}
    straight = run_suite(cfg, tmp_path / "a", studies=["trajectories"], plots=False, log=lambda m: None)
    # the same target: the unlearning runs are what is pre-empted (a target's training from a classification
    # DataLoader resumes exactly at epoch boundaries only)
    (tmp_path / "b").mkdir()
    shutil.copy(tmp_path / "a" / "target.ckpt", tmp_path / "b" / "target.ckpt")
    fired = _signal_the_first_run_under(monkeypatch, tmp_path / "b" / "runs", step=1)
    with pytest.raises(SystemExit) as stop:
        run_suite(cfg, tmp_path / "b", studies=["trajectories"], plots=False, log=lambda m: None)
    assert stop.value.code == 128 + signal.SIGUSR1 and fired
    monkeypatch.undo()
    resumed = run_suite(cfg, tmp_path / "b", studies=["trajectories"], plots=False, log=lambda m: None)
    a, b = (tmp_path / "a" / "trajectories.csv").read_text(), (tmp_path / "b" / "trajectories.csv").read_text()
    assert a == b and a.count("\n") > 2
    assert json.dumps(straight["trajectories"], sort_keys=True, default=float) == \
        json.dumps(resumed["trajectories"], sort_keys=True, default=float)
