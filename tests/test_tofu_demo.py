"""`lit-unlearn tofu-demo`, the default job, run once on the shared world (seed 0, forget01) and read by every test
here: the full verdict on the half no decision read, recomputed from its per-item scores; the looks' cadence; the
TOFU table that the standalone `tofu-eval` reproduces; TensorBoard; the final weights as a Hugging Face folder that
plain transformers loads and that `export` rebuilds from the checkpoint; and, instrumented, the stop rule and the
training objective never reading the reporting half.

The run is called in this process (its process is not what is checked; the console script runs as a process in
tests/test_own_job.py and tests/test_slurm_scripts.py), which lets the instrument see every row read."""

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from helpers import cli_here

pytestmark = pytest.mark.slow
STEPS = 5  # the preset runs 150; 5 steps give 2 looks (at the start and after 5 steps): all that is checked here


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


def _deciding(method):
    def wrapped(*args, **kwargs):
        _Reads.deciding = True
        try:
            return method(*args, **kwargs)
        finally:
            _Reads.deciding = False
    return wrapped


@pytest.fixture(scope="module")
def demo(tofu_world, tmp_path_factory):
    """The demo as a user runs it (its preset, every condition of the full verdict) for STEPS steps. The forget and
    holdout rows of both halves are instrumented as HoldoutVerification sets them up (what the looks and the
    verdict's own scoring read); StopAtTarget's looks, HAMU's quota controller and the training objective (which
    reads the holdout items' profile) are marked as decisions."""
    from lit_unlearn.callbacks import HoldoutVerification, QuotaController, StopAtTarget
    from lit_unlearn.modules import HoldoutMatchModule

    folder = tmp_path_factory.mktemp("demo")
    setup = HoldoutVerification.setup

    def instrumented_setup(self, trainer, pl_module, stage):
        setup(self, trainer, pl_module, stage)
        for half in self._splits:
            for side in ("forget", "holdout"):
                self._splits[half][side] = [_TrackedRow(r, half) for r in self._splits[half][side]]
                items = self.runner.items[half]
                setattr(items, side, [_TrackedRow(r, half) for r in getattr(items, side)])

    patched = {(StopAtTarget, "evaluate"): _deciding(StopAtTarget.evaluate),
               (QuotaController, "quota"): _deciding(QuotaController.quota),
               (HoldoutMatchModule, "objective"): _deciding(HoldoutMatchModule.objective),
               (HoldoutVerification, "setup"): instrumented_setup}
    originals = {key: getattr(*key) for key in patched}
    _Reads.log = []
    try:
        for (owner, name), method in patched.items():
            setattr(owner, name, method)
        proc = cli_here(["tofu-demo", "--worlds", str(tofu_world.folder.parent), "--trainer.enable_progress_bar=false",
                         f"--trainer.max_steps={STEPS}"], folder, check=True)
    finally:
        for (owner, name), method in originals.items():
            setattr(owner, name, method)
    run = folder / "runs/tofu/holdout_match/version_0"
    return SimpleNamespace(folder=folder, stdout=proc.stdout, run=run, reads=list(_Reads.log),
                           result=json.loads((run / "holdout_verification.json").read_text()))


def test_the_full_verdict_is_on_the_reporting_half_and_every_condition_recomputes_from_its_scores(demo):
    """Before: the target fails (every attack near AUC 1). After: the full verdict (before any attack, relearning
    at every rate and step count, 4-bit, the paraphrased questions where the calibration has them), each condition
    recomputed here from the per-item scores it was decided on; the verdict is the worst condition's."""
    from lit_unlearn.verification.holdout_calibration import calibration
    from lit_unlearn.verification.holdout_equivalence import holdout_verdict

    assert "StopAtTarget 'holdout_band_ratio <= 1 and model_utility_ratio >= 0.95'" in demo.stdout, demo.stdout[-3000:]
    after, before, spec = demo.result["after"], demo.result["before"], demo.result["spec"]
    assert not before["passed"] and before["band_ratio"] > 1.4
    full = after["full"]
    assert set(full["judged"]) == {"none", "int4"} | {f"relearn lr={lr:g} steps={s}" for lr in spec["relearn_lrs"]
                                                      for s in spec["relearn_steps"]} | (
        {"paraphrase"} if spec["paraphrase"] else set())
    assert spec["paraphrase"] == ("paraphrase" in calibration()["margins"]["01"]["best"])  # TOFU has paraphrases
    ratios = {}
    for condition, judged in full["judged"].items():
        saved = full["conditions"][condition]
        attacks = list(saved["pooled"]["intervals"])
        assert sorted(judged["forget"]) == sorted(attacks) and "learned" in attacks
        author_margins = next(iter(saved["authors"].values()))["delta"]
        again = holdout_verdict(judged["forget"], judged["holdout"], judged["forget_groups"], judged["holdout_groups"],
                                saved["pooled"]["delta"], author_margins, spec["alpha"], spec["n_boot"], spec["seed"])
        assert again.band_ratio == pytest.approx(saved["band_ratio"], abs=1e-12), condition
        ratios[condition] = again.band_ratio
    assert full["band_ratio"] == pytest.approx(max(ratios.values()), abs=1e-12)
    assert full["passed"] == (max(ratios.values()) <= 1)
    measured = len(full["judged"]["relearn lr=0.001 steps=10"]["forget"]["loss"])
    assert 0 < measured < len(full["judged"]["none"]["forget"]["loss"])  # relearning measures the other author
    assert f"reference-free verification (reporting half): {full['headline']}" in demo.stdout
    assert "'holdout_band_ratio <= 1 and model_utility_ratio >= 0.95': " in demo.stdout


def test_stop_rule_objective_and_controller_never_read_the_reporting_half(demo):
    decided = [half for half, deciding in demo.reads if deciding]
    assert "steering" in decided  # the instrument sees the decisions' reads (this test can fail)
    assert "reporting" not in decided
    assert any(half == "reporting" for half, _ in demo.reads)  # the reporting half is read, for the report only
    split, after = demo.result["split"], demo.result["after"]
    assert set(split["forget"]["steering"]).isdisjoint(split["forget"]["reporting"])
    assert after["verdict"]["pooled"]["n_items"] == {"forget": 20, "holdout": 20}
    assert set(after["verdict"]["authors"]) == {"0", "1"}  # one test per forget author too


def test_tensorboard_has_the_looks_at_their_cadence_the_verdict_and_the_tofu_table(demo):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(next(demo.run.glob("events.out.tfevents.*"))))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"verify/band_ratio", "verify/passed", "verify/min_k_plus_plus_auc", "verify/steering/band_ratio",
            "verify/full/band_ratio", "verify/full/relearning_band_ratio"} <= tags
    looks = [e.step for e in acc.Scalars("verify/steering/band_ratio")]
    assert demo.result["looks"] == len(looks) >= 2 and looks[0] == 0 and all(s % 5 == 0 for s in looks)  # the cadence
    assert {"tofu/forget/es", "tofu/mia/gradnorm_auc", "gold_standard/forget_quality"} <= tags


def test_the_standalone_evaluation_of_the_final_folder_reproduces_the_runs_tofu_table(demo, tofu_world):
    results = json.loads((demo.run / "tofu_results.json").read_text())["summary"]
    world = demo.folder / "runs/tofu/world"  # the link to the world in use
    assert world.resolve() == tofu_world.folder.resolve()
    again = cli_here(["tofu-eval", "--model", str(demo.run / "model"), "--data", str(world / "data"), "--level",
                      "01", "--reference", str(world / "retain_only_01_eval.json"), "--save",
                      str(demo.folder / "again.json")], demo.folder)
    assert again.returncode == 0 and "forget_quality" in again.stdout, again.stderr[-3000:]
    standalone = json.loads((demo.folder / "again.json").read_text())["summary"]
    for key in ("forget_quality", "model_utility", "forget_truth_ratio", "forget/rouge", "mia/min_k_auc", "forget/es",
                "mia/reference_auc"):
        assert standalone[key] == pytest.approx(results[key], rel=1e-6), key


def test_the_runs_checkpoint_exports_to_the_same_weights_as_its_final_model(demo):
    """`lit-unlearn export last.ckpt OUT` (the base from the checkpoint's own record of its network) writes the
    tensors the run wrote as its final model."""
    from safetensors.torch import load_file

    proc = cli_here(["export", str(demo.run / "checkpoints/last.ckpt"), str(demo.run / "exported")], demo.folder)
    assert proc.returncode == 0, proc.stderr[-2000:]
    exported, final = load_file(demo.run / "exported/model.safetensors"), load_file(demo.run / "model/model.safetensors")
    assert exported.keys() == final.keys() and all(torch.equal(exported[k], final[k]) for k in final)


def test_final_model_loads_with_plain_transformers_and_gives_the_reports_nlls(demo, tofu_world, subprocess_env):
    """The final folder, loaded in a process where lit_unlearn cannot be imported, scores the reporting half's
    forget items as the run's report did."""
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tofu import QAFormatter
    from lit_unlearn.data.tokenizer import load_tokenizer

    model = demo.run / "model"
    assert (model / "model.safetensors").is_file() and (model / "tokenizer.json").is_file()
    assert "auto_map" not in json.loads((model / "config.json").read_text())
    rows = TofuSource(str(tofu_world.data), "01").load_split("forget01_perturbed")
    picked = [rows[i] for i in demo.result["split"]["forget"]["reporting"]]
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
    (demo.folder / "items.json").write_text(json.dumps(encoded))
    env = dict(subprocess_env)
    env["PYTHONPATH"] = ""  # nothing of the project's on the path either
    proc = subprocess.run([sys.executable, "-c", script, str(model), str(demo.folder / "items.json")], env=env,
                          capture_output=True, text=True, timeout=300, cwd=str(demo.folder))
    assert proc.returncode == 0, proc.stderr[-3000:]
    nll = json.loads(proc.stdout.strip().splitlines()[-1])
    assert nll == pytest.approx(demo.result["after"]["per_item"]["forget_loss"], rel=1e-5)
