"""The experiment suite on a tiny configuration: every study writes its CSV, and the claims it reports are
recomputed here from those CSVs with independent code (scipy / numpy)."""

import csv
import json

import numpy as np
import pytest
import scipy.stats
import torch
import torch.nn.functional as F

from helpers import digits_dm, quick_trainer
from lit_unlearn.callbacks import TrajectoryRecorder
from lit_unlearn.launch.presets import config_chain
from lit_unlearn.experiments import STUDIES, load_config, run_suite
from lit_unlearn.models import CifarResNet
from lit_unlearn.modules import HAMUModule

TINY = {
    "seeds": [0],
    "network": {"class_path": "lit_unlearn.models.CifarResNet",
                "init_args": {"depth": 8, "num_classes": 10, "in_channels": 1}},
    "dataset": {"class_path": "lit_unlearn.data.DigitsSource", "init_args": {"seed": 0}},
    "target": {"epochs": 1},
    "forget": {"forget_class": 0, "size": 60},
    "data": {"retain_batch_size": 256, "forget_batch_size": 32},
    "epochs": 1,
    "rhos": [0.0, 0.5, 1.0],
    "methods": {
        "HAMU": {"class_path": "lit_unlearn.modules.HAMUModule", "init_args": {"eta": 0.1, "quota": 0.002}},
        "GA": {"class_path": "lit_unlearn.modules.GAModule", "init_args": {"lr": 0.001}},
    },
    "quota": {"ratios": [0.005, 0.01, 0.02], "epochs": 1},
    "stopping": {"rho": 0.5, "epochs": 2},
    "ablation": {"rho": 0.5, "epochs": 1},
}


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_suite_writes_every_study_and_its_claims_match_the_csvs(tmp_path):
    summary = run_suite(TINY, tmp_path, log=lambda m: None)
    for name in ("trajectories", "hardness", "quota", "stopping", "ablation"):
        assert (tmp_path / f"{name}.csv").is_file(), name
    for fig in ("trajectories", "hardness", "quota", "stopping"):
        assert (tmp_path / f"{fig}.png").stat().st_size > 1000
    assert "Pearson" in (tmp_path / "summary.md").read_text()
    assert json.loads((tmp_path / "summary.json").read_text())["quota"]["rows"]

    traj = _rows(tmp_path / "trajectories.csv")
    assert {(r["method"], float(r["rho"])) for r in traj} == {(m, rho) for m in ("HAMU", "GA") for rho in (0, .5, 1)}
    starts = [r for r in traj if r["epoch"] == "0"]
    assert len(starts) == 6 and all(float(r["delta_forget_loss"]) == 0.0 for r in starts)
    ga_end = [r for r in traj if r["method"] == "GA" and r["epoch"] == "1"]
    assert all(float(r["delta_forget_loss"]) > 0 for r in ga_end)  # ascent raised the forget loss

    hard = _rows(tmp_path / "hardness.csv")
    r = scipy.stats.pearsonr([float(x["rho"]) for x in hard], [float(x["kappa_mean"]) for x in hard]).statistic
    assert summary["hardness"]["kappa"]["r"] == pytest.approx(r)

    quota = _rows(tmp_path / "quota.csv")
    x, y = np.array([float(q["q_over_eta"]) for q in quota]), np.array([float(q["delta_forget_loss"]) for q in quota])
    slope, intercept = np.polyfit(x, y, 1)
    r2 = 1 - ((y - slope * x - intercept) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    assert summary["quota"]["r2"] == pytest.approx(r2, rel=1e-6)

    stop = _rows(tmp_path / "stopping.csv")
    gains = [float(s["neg_delta_retain_loss"]) for s in stop]
    assert summary["stopping"]["peak_step"] == int(stop[int(np.argmax(gains))]["step"])
    assert summary["stopping"]["total_steps"] == int(stop[-1]["step"]) > 0
    assert {a["variant"] for a in _rows(tmp_path / "ablation.csv")} == {"per-layer quota", "uniform quota",
                                                                       "global constraint"}


@pytest.mark.slow
def test_the_suite_on_a_tofu_world_varies_the_retain_sets_duplicates_and_checks_the_same_claims(tmp_path, tofu_world):
    """experiment_tofu's form on the shared world: ρ is the share of forget items whose semantic duplicate joins the
    retain set, so the retain gradient (and κ) differs between ρ = 0 and 1 from the first step; each claim is
    recomputed from the CSVs; the retrained-model verification is refused with a pointer to the bench."""
    cfg = {"seeds": [0], "world": {"root": str(tofu_world.folder.parent), "seed": 0, "level": "01", "eval_items": 16},
           "data": {"retain_batch_size": 20, "forget_batch_size": 20, "steps_per_epoch": 2}, "epochs": 1,
           "rhos": [0.0, 0.5, 1.0],
           "studies": ["trajectories", "hardness", "quota", "stopping"],
           "methods": {"HAMU": {"class_path": "lit_unlearn.modules.HAMUModule", "init_args": {"eta": 0.05, "quota": 0.005}},
                       "FT": {"class_path": "lit_unlearn.modules.FTModule", "init_args": {"lr": 1e-3, "optimizer": "adamw"}}},
           "quota": {"rho": 1.0, "ratios": [0.05, 0.1, 0.2]}, "stopping": {"rho": 1.0, "epochs": 2}}
    summary = run_suite(cfg, tmp_path, plots=False, log=lambda m: None)
    hard = _rows(tmp_path / "hardness.csv")
    starts = {float(r["rho"]): float(r["kappa_start"]) for r in hard}
    assert set(starts) == {0.0, 0.5, 1.0} and starts[0.0] != starts[1.0]
    r = scipy.stats.pearsonr([float(x["rho"]) for x in hard], [float(x["kappa_mean"]) for x in hard]).statistic
    assert summary["hardness"]["kappa"]["r"] == pytest.approx(r)
    traj = _rows(tmp_path / "trajectories.csv")
    assert {(x["method"], float(x["rho"])) for x in traj} == {(m, rho) for m in ("HAMU", "FT") for rho in (0, .5, 1)}
    for key in {(x["method"], x["rho"]) for x in traj}:  # the suite's epochs (2 steps), not the loader's passes
        assert sorted((x["epoch"], x["step"]) for x in traj if (x["method"], x["rho"]) == key) == [("0", "0"), ("1", "2")]
    assert all(float(x["delta_forget_loss"]) == 0.0 for x in traj if x["epoch"] == "0")
    assert all(float(x["delta_forget_loss"]) != 0.0 for x in traj if x["epoch"] == "1")
    quota = _rows(tmp_path / "quota.csv")
    x, y = np.array([float(q["q_over_eta"]) for q in quota]), np.array([float(q["delta_forget_loss"]) for q in quota])
    slope, intercept = np.polyfit(x, y, 1)
    assert summary["quota"]["r2"] == pytest.approx(1 - ((y - slope * x - intercept) ** 2).sum()
                                                   / ((y - y.mean()) ** 2).sum(), rel=1e-6)
    assert summary["stopping"]["total_steps"] == 4
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps({**cfg, "studies": ["verification"]}))
    with pytest.raises(ValueError, match="lit-unlearn bench"):
        load_config(bad)


def test_recorder_rows_are_the_evaluation_of_the_model_at_that_point():
    torch.manual_seed(0)
    module = HAMUModule(CifarResNet(depth=8, num_classes=10, in_channels=1), eta=0.1, quota=0.002)
    dm = digits_dm()
    recorder = TrajectoryRecorder()
    dm.setup("fit")
    steps = len(dm.train_dataloader())
    quick_trainer(2 * steps, callbacks=[recorder], check_val_every_n_epoch=1).fit(module, dm)
    assert [r["step"] for r in recorder.epochs] == [0, steps, 2 * steps]
    assert len(recorder.steps) == 2 * steps and all("kappa_global" in s for s in recorder.steps)
    # The last row must be the model as it ended, computed here directly.
    net = module.network.eval()
    forget = dm.eval_sets["forget"]
    with torch.no_grad():
        loss = F.cross_entropy(net(forget.images), forget.labels).item()
    assert recorder.epochs[-1]["val/forget_loss"] == pytest.approx(loss, rel=1e-4)
    assert recorder.epochs[-1]["unlearn/delta_forget_loss"] == pytest.approx(
        loss - recorder.epochs[0]["val/forget_loss"], rel=1e-3)


def test_packaged_suite_configs_load_and_method_configs_extend_the_shared_base():
    for name in ("experiment_digits", "experiment_cifar10", "experiment_tofu"):
        cfg = load_config(config_chain(name)[-1])
        assert set(cfg.get("studies", STUDIES)) <= set(STUDIES)
    for method in ("hamu", "ft", "ga", "graddiff", "kl", "scrub", "npo"):
        chain = config_chain(f"digits_{method}")
        assert [p.rsplit("/", 1)[-1] for p in chain] == ["digits_unlearn.yaml", f"digits_{method}.yaml"]


def test_bad_suite_configs_say_what_is_wrong(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("network: {}\n")
    with pytest.raises(ValueError, match="missing top-level keys"):
        load_config(bad)
    with pytest.raises(FileNotFoundError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad.write_text(json.dumps({**TINY, "studies": ["trajectories", "vibes"]}))
    with pytest.raises(ValueError, match="unknown studies"):
        load_config(bad)
    bad.write_text(json.dumps({**TINY, "epochz": 3}))  # a typo is refused, with the key it probably meant
    with pytest.raises(ValueError, match="unknown key 'epochz' \\(did you mean 'epochs'\\?\\)"):
        load_config(bad)
    bad.write_text(json.dumps({**TINY, "quota": {"ratio": [0.1]}}))
    with pytest.raises(ValueError, match="unknown key 'quota.ratio' \\(did you mean 'ratios'\\?\\)"):
        load_config(bad)
    bad.write_text(json.dumps({**TINY, "methods": {"HAMU": {"class_path": "x.Y", "init_arg": {}}}}))
    with pytest.raises(ValueError, match="unknown keys \\['init_arg'\\]"):
        load_config(bad)
