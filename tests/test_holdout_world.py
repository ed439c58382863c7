"""The reference-free verification on the TOFU world: it fails the target and a collapsed (over-forgotten) model,
passes the retain-only model; a HAMU run steers and stops on the steering half without reading the reporting half
(the reads are instrumented); and the run's final weights load with plain transformers and give the report's
per-item NLLs."""

import json
import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.slow

ATTACKS = ["loss", "zlib", "min_k", "min_k_plus_plus", "gradnorm"]


def _scores(world, network):
    """A model's per-item attack scores on the whole forget01 and holdout01 splits."""
    import warnings

    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.metrics import TofuEvaluator

    splits = TofuSource(str(world.data), "01").eval_splits()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = TofuEvaluator(load_tokenizer(str(world.tokenizer)), {k: splits[k] for k in ("forget", "holdout")}).run(
            network, only=["membership", "gradnorm"])
    return report.per_item["mia"]


def _verdict(mia, half="steering"):
    """The verdict HoldoutVerification gives on a half (its split, its calibrated margins)."""
    from lit_unlearn.verification.holdout_calibration import calibrated_delta
    from lit_unlearn.verification.steering_halves import half_verdict, split_halves

    groups = {side: [i // 20 for i in range(len(mia[f"{side}_loss"]))] for side in ("forget", "holdout")}
    halves = {side: split_halves(groups[side], 0) for side in groups}
    return half_verdict(mia, groups, halves, half, ATTACKS, *calibrated_delta("01"))


def test_target_and_collapsed_model_fail_while_the_retain_only_model_passes(tofu_world):
    """On the steering half of the shared world (seed 0). Its reporting half has the retain-only model's worst
    author within 0.01 of δ_author, so whether it passes there depends on the last digits of a training run on
    this machine; over test worlds the retain-only pass rate is in docs/generated/holdout_calibration.md."""
    from helpers import gradient_ascent_on_forget
    from lit_unlearn.models import CausalLM

    retain_only = _verdict(json.loads(tofu_world.reference("01").read_text())["per_item"]["mia"])
    assert retain_only.passed, retain_only.as_dict()

    target = _verdict(_scores(tofu_world, CausalLM(name_or_path=str(tofu_world.target))))
    assert not target.passed and target.worst[1].side() == "remembers" and target.wants_more_forgetting()
    assert all(iv.auc > 0.95 for iv in target.pooled.intervals.values())

    # GA at a high learning rate: the forget answers' NLL far above unseen authors'. Over-forgetting is as
    # recognisable as remembering.
    net = gradient_ascent_on_forget(tofu_world, lr=3e-3, steps=15)
    collapsed = _verdict(_scores(tofu_world, net.eval()))
    assert not collapsed.passed and not collapsed.wants_more_forgetting()
    loss = collapsed.pooled.intervals["loss"]
    assert loss.side() == "over-forgotten" and loss.high < 0.2


class _Reads:
    """Which item rows were read, and whether a stop rule or controller decision was under way at the time."""

    deciding = False
    log: list[tuple[str, bool]] = []


class _TrackedRow(dict):
    def __init__(self, row, half):
        super().__init__(row)
        self.half = half

    def __getitem__(self, key):
        _Reads.log.append((self.half, _Reads.deciding))
        return super().__getitem__(key)


@pytest.fixture(scope="module")
def short_run(tofu_world, tmp_path_factory):
    """tofu-demo's default configuration (HoldoutMatch) for 10 steps (looks every 5) on the shared world, the
    forget and holdout rows of both halves instrumented, StopAtTarget's looks, the training objective (which reads
    the holdout items' profile) and HAMU's quota controller marked as decisions."""
    import lightning.pytorch as pl

    from lit_unlearn.callbacks import HoldoutVerification, QuotaController, StopAtTarget, TofuEvaluation
    from lit_unlearn.launch.runs import build_run, fit_run
    from lit_unlearn.modules import HoldoutMatchModule

    folder = tmp_path_factory.mktemp("short_run")
    cwd = os.getcwd()
    os.chdir(folder)
    (folder / "runs/tofu").mkdir(parents=True)
    (folder / "runs/tofu/world").symlink_to(tofu_world.folder, target_is_directory=True)

    class Instrument(pl.Callback):
        def setup(self, trainer, pl_module, stage):
            hv = next(cb for cb in trainer.callbacks if isinstance(cb, HoldoutVerification))
            for half in ("steering", "reporting"):
                for side in ("forget", "holdout"):
                    hv._splits[half][side] = [_TrackedRow(r, half) for r in hv._splits[half][side]]

    def deciding(method):
        def wrapped(*args, **kwargs):
            _Reads.deciding = True
            try:
                return method(*args, **kwargs)
            finally:
                _Reads.deciding = False
        return wrapped

    originals = StopAtTarget.evaluate, QuotaController.quota, HoldoutMatchModule.objective
    StopAtTarget.evaluate, QuotaController.quota, HoldoutMatchModule.objective = (
        deciding(StopAtTarget.evaluate), deciding(QuotaController.quota), deciding(HoldoutMatchModule.objective))
    try:
        launched = build_run(["--trainer.max_steps=10", "--trainer.enable_progress_bar=false"],
                             "tofu_tiny_holdout_match")
        callbacks = launched.trainer.callbacks
        callbacks[:] = [cb for cb in callbacks if not isinstance(cb, TofuEvaluation)]  # the gold table: not needed here
        hv = next(i for i, cb in enumerate(callbacks) if isinstance(cb, HoldoutVerification))
        callbacks.insert(hv + 1, Instrument())
        _Reads.log = []
        fit_run(launched)
    finally:
        StopAtTarget.evaluate, QuotaController.quota, HoldoutMatchModule.objective = originals
        os.chdir(cwd)
    return folder / "runs/tofu/holdout_match/version_0", list(_Reads.log)


def test_the_runs_checkpoint_exports_to_the_same_weights_as_its_final_model(short_run):
    """`lit-unlearn export last.ckpt OUT` (the base from the checkpoint's own record of its network) writes the
    tensors the run wrote as its final model."""
    from safetensors.torch import load_file

    from helpers import cli_here

    run, _ = short_run
    proc = cli_here(["export", str(run / "checkpoints/last.ckpt"), str(run / "exported")], run.parents[3])
    assert proc.returncode == 0, proc.stderr[-2000:]
    exported, final = load_file(run / "exported/model.safetensors"), load_file(run / "model/model.safetensors")
    assert exported.keys() == final.keys() and all(torch.equal(exported[k], final[k]) for k in final)


def test_stop_rule_and_controller_never_read_the_reporting_half(short_run):
    run, reads = short_run
    result = json.loads((run / "holdout_verification.json").read_text())
    assert result["looks"] >= 3  # the start and every 5 steps
    decided = [half for half, deciding in reads if deciding]
    assert "steering" in decided  # the instrument sees the decisions' reads (this test can fail)
    assert "reporting" not in decided
    assert any(half == "reporting" for half, _ in reads)  # the reporting half is read, for the report only
    split = result["split"]
    assert set(split["forget"]["steering"]).isdisjoint(split["forget"]["reporting"])
    assert result["after"]["verdict"]["pooled"]["n_items"] == {"forget": 20, "holdout": 20}
    assert set(result["after"]["verdict"]["authors"]) == {"0", "1"}  # one test per forget author too


def test_final_model_loads_with_plain_transformers_and_gives_the_reports_nlls(short_run, tofu_world, subprocess_env):
    """The exported folder, loaded in a process where lit_unlearn cannot be imported, scores the reporting half's
    forget items as the run's report did."""
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tofu import QAFormatter
    from lit_unlearn.data.tokenizer import load_tokenizer

    run, _ = short_run
    result = json.loads((run / "holdout_verification.json").read_text())
    model = run / "model"
    assert (model / "model.safetensors").is_file() and (model / "tokenizer.json").is_file()
    assert "auto_map" not in json.loads((model / "config.json").read_text())
    rows = TofuSource(str(tofu_world.data), "01").load_split("forget01_perturbed")
    picked = [rows[i] for i in result["split"]["forget"]["reporting"]]
    fmt = QAFormatter(load_tokenizer(str(model)))
    encoded = [{k: v.tolist() for k, v in fmt.encode(r["question"], r["answer"]).items()} for r in picked]
    script = (
        "import json, sys, torch\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'lit_unlearn': raise ImportError('lit_unlearn must not be needed')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from transformers import AutoModelForCausalLM\n"
        "model = AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()\n"
        "out = []\n"
        "for item in json.load(open(sys.argv[2])):\n"
        "    ids, labels = torch.tensor([item['input_ids']]), torch.tensor([item['labels']])\n"
        "    with torch.no_grad(): logits = model(input_ids=ids).logits[0, :-1].float()\n"
        "    target = labels[0, 1:]\n"
        "    keep = target != -100\n"
        "    out.append(torch.nn.functional.cross_entropy(logits[keep], target[keep]).item())\n"
        "print(json.dumps(out))\n")
    (run / "items.json").write_text(json.dumps(encoded))
    env = dict(subprocess_env)
    env["PYTHONPATH"] = ""  # nothing of the project's on the path either
    proc = subprocess.run([sys.executable, "-c", script, str(model), str(run / "items.json")], env=env,
                          capture_output=True, text=True, timeout=300, cwd=str(run))
    assert proc.returncode == 0, proc.stderr[-3000:]
    nll = json.loads(proc.stdout.strip().splitlines()[-1])
    assert nll == pytest.approx(result["after"]["per_item"]["forget_loss"], rel=1e-5)
