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

FIRST_FIVE = ["loss", "zlib", "min_k", "min_k_plus_plus", "gradnorm"]
FIRST_MARGINS = (0.33, 0.46)  # the first verification's forget01 margins (one δ for the five attacks, raw scores)


@pytest.fixture(scope="module")
def runner(tofu_world):
    """The verdict as HoldoutVerification gives it on the shared world (seed 0, a test world of the calibration):
    every attack, scores relative to the world's base, calibrated margins."""
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.verification.verdict_runner import VerdictRunner

    splits = TofuSource(str(tofu_world.data), "01").eval_splits()
    return VerdictRunner(load_tokenizer(str(tofu_world.tokenizer)), splits["forget"], splits["holdout"], "01",
                         base=str(tofu_world.base))


def test_target_and_collapsed_model_fail_while_the_retain_only_model_passes_the_full_verdict(tofu_world, runner):
    """The retain-only model passes every condition's bands (relearning and 4-bit included) on the steering half, and
    is never read as "not forgotten" (at forget01 it may read "undecided": relearning is measured on one author's 10
    items, where few checks have power); the target and a collapsed model fail before any attack, on opposite
    sides."""
    from helpers import gradient_ascent_on_forget
    from lit_unlearn.models import CausalLM

    retain_only = runner.verdict(CausalLM(name_or_path=str(tofu_world.retain_only("01"))), "steering")
    assert retain_only.band_ratio <= 1.0 and retain_only.decision != "not forgotten", retain_only.table()
    assert retain_only.passed or any(m.startswith("relearning: no check has power") for m in retain_only.missing())
    assert set(retain_only.verdicts) == set(runner.spec.conditions())

    target = runner.verdict(CausalLM(name_or_path=str(tofu_world.target)), "steering", conditions=["none"])
    from lit_unlearn.metrics.membership_attacks import ORIENTED

    none = target.verdicts["none"]
    assert not target.passed and none.worst[1].side() == "remembers"
    assert none.restricted(ORIENTED).wants_more_forgetting()
    assert all(iv.auc > 0.95 for a, iv in none.pooled.intervals.items() if a != "entropy_spread")
    assert "NOT FORGOTTEN" in target.headline()

    # GA at a high learning rate: the forget answers' NLL far above unseen authors'. Over-forgetting is as
    # recognisable as remembering.
    net = gradient_ascent_on_forget(tofu_world, lr=3e-3, steps=15)
    collapsed = runner.verdict(net.eval(), "steering", conditions=["none"]).verdicts["none"]
    assert not collapsed.passed and not collapsed.restricted(ORIENTED).wants_more_forgetting()
    loss = collapsed.pooled.intervals["loss"]
    assert loss.side() == "over-forgotten" and loss.high < 0.2


def test_a_model_that_keeps_every_forget_tokens_surprisal_but_tempers_the_rest_fails_only_the_new_verdict(
        tofu_world, runner):
    """The retain-only model with the forget items' next-token distributions tempered (T = 1.25) around an unchanged
    answer-token probability (tests/helpers.PlantedDistribution): every per-token surprisal, so the loss, zlib,
    Min-K % and the gradient norm, is the never-trained model's, and the first verification's margins pass those
    attacks; the new verdict fails it, and still fails it on the attacks an objective that reads only the surprisal
    cannot have been shaped to pass. (Min-K %++, the fifth attack of the first verification, sees a temperature:
    it standardises by the moments of log p, whose mean is minus the entropy, so no model can change its predictive
    entropy and keep Min-K %++.)"""
    from helpers import PlantedDistribution
    from lit_unlearn.data import QAFormatter
    from lit_unlearn.models import CausalLM
    from lit_unlearn.verification.full_verdict import Scored
    from lit_unlearn.verification.holdout_equivalence import holdout_verdict

    retain_only = CausalLM(name_or_path=str(tofu_world.retain_only("01"))).eval()
    items = runner.items["steering"]
    planted = PlantedDistribution(retain_only, QAFormatter(runner.tokenizer), items.forget, 1.25).eval()
    mia, honest = (runner.scorer(m, items.forget, items.holdout) for m in (planted, retain_only))
    assert max(abs(a - b) for a, b in zip(mia["forget_loss"], honest["forget_loss"])) < 1e-5
    surprisal_attacks = ["loss", "zlib", "min_k", "gradnorm"]
    first = holdout_verdict({a: mia[f"forget_{a}"] for a in surprisal_attacks},
                            {a: mia[f"holdout_{a}"] for a in surprisal_attacks}, items.forget_groups,
                            items.holdout_groups, *FIRST_MARGINS)
    assert first.passed, first.as_dict()
    verdict = runner.judge({"none": Scored(mia, list(range(len(items.forget))))}, "steering",
                           reads=frozenset({"surprisal"}))
    assert not verdict.passed and verdict.worst["attack"] in ("entropy_mean", "entropy_spread", "token_rank",
                                                              "min_k_plus_plus", "learned")
    assert verdict.unread_band_ratio() > 1  # gradnorm, entropy, rank and the learned attack see it
    honest_verdict = runner.judge({"none": Scored(honest, list(range(len(items.forget))))}, "steering")
    assert honest_verdict.passed


def test_the_relearning_probe_never_trains_on_an_item_it_measures(tofu_world, runner):
    from lit_unlearn.models import CausalLM
    from lit_unlearn.verification import relearning_probe

    measured = []
    real = runner.scorer

    def scorer(network, forget, holdout):
        measured.append(([(r["question"], r["answer"]) for r in forget], [(r["question"], r["answer"]) for r in holdout]))
        return real(network, forget, holdout)

    relearning_probe.Reads.log = []
    runner.scorer = scorer
    try:
        conditions = ["relearn lr=0.001 steps=10"]
        runner.verdict(CausalLM(name_or_path=str(tofu_world.target)), "reporting", conditions=conditions)
        trained = set(relearning_probe.Reads.log)
    finally:
        relearning_probe.Reads.log = None
        del runner.scorer
    items = runner.items["reporting"]
    assert trained == {(items.forget[i]["question"], items.forget[i]["answer"]) for i in items.relearn}
    relearned = [m for m in measured if len(m[0]) < len(items.forget)]  # (the others: the base model, all items)
    assert len(relearned) == 1 and len(relearned[0][0]) == len(items.measured) == 10
    assert set(relearned[0][0]) == {(items.forget[i]["question"], items.forget[i]["answer"]) for i in items.measured}
    forget_measured, holdout_measured = map(set, relearned[0])
    assert not trained & forget_measured and not trained & holdout_measured
    authors = {items.forget_groups[i] for i in items.relearn}, {items.forget_groups[i] for i in items.measured}
    assert authors[0].isdisjoint(authors[1])


def test_the_paraphrase_part_scores_model_and_base_on_the_paraphrased_questions(tofu_world):
    """On the world's models: the fourth part's relative forget scores are the model's minus the base's, both asked
    the paraphrased questions; the holdout side is the model as it is; the target is told apart as it is."""
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.models import CausalLM
    from lit_unlearn.verification.full_verdict import VerdictSpec, asked_otherwise
    from lit_unlearn.verification.verdict_runner import VerdictRunner

    splits = TofuSource(str(tofu_world.data), "01").eval_splits()
    runner = VerdictRunner(load_tokenizer(str(tofu_world.tokenizer)), splits["forget"], splits["holdout"], "01",
                           VerdictSpec(paraphrase=True), mode="relative", base=str(tofu_world.base),
                           margins=(0.5, 0.5), attacks=["loss", "zlib"])
    target = CausalLM(name_or_path=str(tofu_world.target)).eval()
    verdict = runner.verdict(target, "steering", conditions=["none", "paraphrase"], power=False)
    items = runner.items["steering"]
    asked = asked_otherwise(items.forget)
    mine, base = (runner.scorer(m, asked, items.holdout) for m in (target, runner.base))
    judged = verdict.judged["paraphrase"]
    assert judged["forget"]["loss"] == pytest.approx([a - b for a, b in zip(mine["forget_loss"], base["forget_loss"])])
    original = runner.base_scores("steering")["forget_loss"]
    assert max(abs(a - b) for a, b in zip(original, base["forget_loss"])) > 0.05  # another question, another score
    assert judged["holdout"]["loss"] == pytest.approx(verdict.judged["none"]["holdout"]["loss"])
    assert verdict.part("paraphrase")["auc"] < 0.1 or verdict.part("paraphrase")["auc"] > 0.9  # the target recalls


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
    from lit_unlearn.verification.full_verdict import VerdictSpec

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
                    items = hv.runner.items[half]  # what the verdict's own scoring reads (base model, attacks)
                    setattr(items, side, [_TrackedRow(r, half) for r in getattr(items, side)])

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
        # One relearning condition instead of eight: which half each part reads does not depend on how many rates
        # the final verdict tries (every condition of the default spec: test_tofu_demo_end_to_end_…).
        callbacks[hv].spec = VerdictSpec(relearn_lrs=(1e-3,), relearn_steps=(10,))
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
