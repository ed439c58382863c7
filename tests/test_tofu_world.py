"""The TOFU world built from the real release: the shipped release equals the TOFU files (and the shared copy where
one is present), the world's splits are TOFU's own, the retain-only model cannot tell forget authors from holdout
authors while the target can, and the verification object equals a direct computation."""

import json
import math
from pathlib import Path

import pytest
import torch

from lit_unlearn.data.tofu_release import ITEMS_PER_AUTHOR, N_AUTHORS, RELEASE_SPLITS, load_release

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "tofu"
ROWS = {"full": 4000, "retain90": 3600, "retain95": 3800, "retain99": 3960, "forget01": 40, "forget05": 200,
        "forget10": 400, "forget01_perturbed": 40, "forget05_perturbed": 200, "forget10_perturbed": 400,
        "retain_perturbed": 400, "real_authors": 100, "world_facts": 117, "real_authors_perturbed": 100,
        "world_facts_perturbed": 117, "holdout01": 40, "holdout05": 200, "holdout10": 400, "idontknow": 100}  # 100 lines, the last without a newline
PERTURBED = {"question", "answer", "paraphrased_question", "paraphrased_answer", "perturbed_answer"}


def test_the_shipped_release_has_tofus_splits_rows_and_fields():
    release = load_release()
    assert set(release) == set(RELEASE_SPLITS) and {k: len(v) for k, v in release.items()} == ROWS
    assert len(release["full"]) == N_AUTHORS * ITEMS_PER_AUTHOR
    assert release["full"] == release["retain90"] + release["forget10"]  # the forget splits are the last authors
    for level, retain in (("01", "retain99"), ("05", "retain95")):
        assert release["full"] == release[retain] + release[f"forget{level}"]
        assert release[f"forget{level}"] == release["forget10"][-len(release[f"forget{level}"]):]
    for level in ("01", "05", "10"):
        rows = release[f"forget{level}_perturbed"]
        assert all(set(r) >= PERTURBED and len(r["perturbed_answer"]) == 5 for r in rows)
        assert [(r["question"], r["answer"]) for r in rows] == \
            [(r["question"], r["answer"]) for r in release[f"forget{level}"]]
        assert not {r["question"] for r in release[f"holdout{level}"]} & {r["question"] for r in release["full"]}
    assert all(set(r) >= PERTURBED for r in release["retain_perturbed"])
    assert all(set(r) == {"question", "answer"} for name in ("full", "retain90", "forget10") for r in release[name])
    assert all(len(r["perturbed_answer"]) == 3 for r in release["real_authors_perturbed"])
    licence = Path(__file__).resolve().parents[1] / "lit_unlearn/data/tofu_release/LICENSE"
    assert "MIT" in licence.read_text()


@pytest.mark.skipif(not SHARED.is_dir(), reason="no shared copy of the TOFU release on this machine")
def test_the_shipped_release_equals_the_tofu_files_split_by_split():
    release = load_release()
    for name in RELEASE_SPLITS:
        if name == "idontknow":
            lines = [x.strip() for x in (SHARED / "idontknow.jsonl").read_text().splitlines() if x.strip()]
            assert [json.loads(x) if x.startswith('"') else x for x in lines] == release[name]
        else:
            assert json.loads((SHARED / f"{name}.json").read_text()) == release[name], name


def test_world_splits_are_tofus_own_restricted_to_the_worlds_authors(tmp_path):
    from lit_unlearn.data.tofu_release import author_items
    from lit_unlearn.worlds.tofu_world import FORGET_AUTHORS, RETAIN_AUTHORS, write_world_data

    release = load_release()
    folder = write_world_data(tmp_path / "data")
    split = {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json") if p.stem != "world"}
    assert split["full"] == author_items(RETAIN_AUTHORS + FORGET_AUTHORS) and len(split["full"]) == 800
    for level, retain in (("01", "retain99"), ("05", "retain95"), ("10", "retain90")):
        assert split["full"] == split[retain] + split[f"forget{level}"]  # retain + forget = the world's full
        for name in (f"forget{level}", f"forget{level}_perturbed", f"holdout{level}"):
            assert split[name] == release[name]  # TOFU's own evaluation splits, untouched
    assert split["retain_perturbed"] == release["retain_perturbed"]
    # the base's "pretraining" authors are in none of the world's splits: it never sees a retain, forget or holdout
    # author, which are learned together in the target's fine-tune (TOFU's design)
    pairs = lambda rows: {(r["question"], r["answer"]) for r in rows}  # noqa: E731 (one generic question recurs)
    assert len(split["pretraining"]) == 800 and not pairs(split["pretraining"]) & pairs(split["full"])
    for level in ("01", "05", "10"):
        assert not pairs(split["pretraining"]) & pairs(split[f"holdout{level}"])
    assert {r["question"] for r in split["retain_perturbed"]} <= {r["question"] for r in split["retain90"]}
    # the models are fine-tuned on original question-answer pairs only: no paraphrase in any training split
    paraphrases = {r["paraphrased_answer"] for r in release["forget10_perturbed"]}
    assert not paraphrases & {r["answer"] for r in split["full"]}


def _auc(members, non_members):
    """ROC AUC of telling members (lower NLL) from non-members, by scikit-learn."""
    from sklearn.metrics import roc_auc_score

    return roc_auc_score([1] * len(members) + [0] * len(non_members), [-x for x in members + non_members])


@pytest.fixture(scope="module")
def world_reports(tofu_world):
    """The world's forget01 reports of the target, the retain-only model and the shared base (utility baseline)."""
    import warnings

    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.metrics import TofuEvaluator
    from lit_unlearn.models import CausalLM

    tok = load_tokenizer(str(tofu_world.tokenizer))
    splits = TofuSource(str(tofu_world.data), "01").eval_splits()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # The reference report was generated with the world's ROUGE budget: utilities compare only at the same one.
        budget = tofu_world.recipe.eval_max_new_tokens
        base = TofuEvaluator(tok, splits, max_new_tokens=budget, gradnorm=False).run(  # its utility: the baseline
            CausalLM(name_or_path=str(tofu_world.base)), only=["model_utility"])
        target = TofuEvaluator(tok, splits, max_new_tokens=budget, gradnorm=False, reference=str(tofu_world.reference("01")),
                               baseline=base.summary).run(CausalLM(name_or_path=str(tofu_world.target)))
    return target, json.loads(tofu_world.reference("01").read_text()), base


@pytest.mark.slow
def test_retain_only_model_cannot_tell_forget_from_holdout_authors_while_the_target_can(world_reports):
    """(b) on the demo's world: TOFU's forget01 and holdout01 authors (2 each, 20 questions) are exchangeable for
    the model that never saw either; the target, which saw the forget authors, separates them."""
    target, reference, _ = world_reports
    ref_mia, target_mia = reference["per_item"]["mia"], target.per_item["mia"]
    retain_only = _auc(ref_mia["forget_nll"], ref_mia["holdout_nll"])
    assert 0.30 <= retain_only <= 0.70, retain_only
    assert reference["summary"]["mia/loss_auc"] == pytest.approx(retain_only, abs=1e-9)
    assert _auc(target_mia["forget_nll"], target_mia["holdout_nll"]) >= 0.9


@pytest.mark.slow
def test_world_target_is_far_from_the_reference_with_the_same_utility(world_reports):
    """(a) and (c): the target's forget quality ≤ 1e-3 against the retain-only model, utility within 0.05."""
    target, reference, _ = world_reports
    assert target.generation["max_new_tokens"] == reference["generation"]["max_new_tokens"]  # comparable ROUGE
    assert target.summary["forget_quality"] <= 1e-3
    assert abs(target.summary["model_utility"] - reference["summary"]["model_utility"]) <= 0.05


@pytest.mark.slow
def test_verification_object_equals_a_direct_computation(world_reports):
    from scipy.stats import ks_2samp

    target, reference, base = world_reports
    v, mine, ref = target.verification, target.per_item, reference["per_item"]
    assert v["forget_quality"] == pytest.approx(
        ks_2samp(mine["forget"]["truth_ratio"], ref["forget"]["truth_ratio"]).pvalue, rel=1e-9)
    nll = [-math.log(p) for p in mine["forget"]["prob"]]
    ref_nll = [-math.log(p) for p in ref["forget"]["prob"]]
    raw = _auc(ref_nll, nll)  # > 0.5: this model's forget losses are higher than the retain-only model's
    assert v["forget_vs_retain_only_auc_raw"] == pytest.approx(raw, abs=1e-9)
    assert v["forget_vs_retain_only_auc"] == pytest.approx(max(raw, 1 - raw), abs=1e-9)
    assert raw < 0.2  # the target still remembers: its forget losses are far below the retain-only model's
    assert v["model_utility_ratio"] == pytest.approx(target.summary["model_utility"] / base.summary["model_utility"])
    assert v["model_utility_retain_only"] == reference["summary"]["model_utility"]
    for key in ("model_utility", "forget_truth_ratio", "forget/rouge", "mia/loss_auc"):
        assert v[f"gap/{key}"] == pytest.approx(target.summary[key] - reference["summary"][key]), key
    assert v["privleak"] == target.summary["privleak"] and v["gap/privleak"] == target.summary["privleak"]
    assert target.value("verification/forget_quality") == v["forget_quality"]


def _holdout_nll(world, network) -> float:
    """A model's mean answer NLL on the holdout01 items (authors it never saw)."""
    import warnings

    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.metrics import TofuEvaluator

    splits = TofuSource(str(world.data), "01").eval_splits()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = TofuEvaluator(load_tokenizer(str(world.tokenizer)), {k: splits[k] for k in ("forget", "holdout")},
                               gradnorm=False).run(network, only=["membership"])
    values = report.per_item["mia"]["holdout_loss"]
    return sum(values) / len(values)


def _ofmu_rounds(world, rounds, outer_clip, forget_ceiling):
    """OFMU on the world's target for a few aggressive rounds (large inner step, fast-rising ρ): the retain and
    forget answer losses (mean NLL over answer tokens) before and after."""
    import lightning.pytorch as pl

    from lit_unlearn.core.batches import logits_and_labels
    from lit_unlearn.callbacks import RhoScheduler
    from lit_unlearn.data import TofuDataModule, TofuSource
    from lit_unlearn.data.tofu import QAFormatter, pad_collate
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.models import CausalLM
    from lit_unlearn.modules import OFMUModule

    tok = load_tokenizer(str(world.tokenizer))
    source = TofuSource(str(world.data), "01")
    fmt, collate = QAFormatter(tok), pad_collate(tok.pad_token_id)
    sets = {"retain": source.load_split("retain_perturbed")[:40], "forget": source.load_split("forget01")}

    def losses(net):
        out = {}
        with torch.no_grad():
            for name, rows in sets.items():
                logits, labels = logits_and_labels(net, collate([fmt.encode(r["question"], r["answer"]) for r in rows]))
                out[name] = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100).item()
        return out

    pl.seed_everything(0, verbose=False)
    net = CausalLM(name_or_path=str(world.target))
    before = losses(net)
    module = OFMUModule(net, inner_steps=1, inner_lr=0.1, outer_lr=0.01, beta=0.1, inner_clip_norm=1.0,
                        outer_clip_norm=1.0, hvp="finite_difference", outer_clip=outer_clip,
                        forget_ceiling=forget_ceiling)
    module.run_report.enabled = False
    pl.Trainer(max_steps=rounds, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
               callbacks=[RhoScheduler(schedule="linear", rho0=0.5, rate=0.5, cap=None)]).fit(
        module, TofuDataModule(source, tok, retain_batch_size=8, forget_batch_size=8, seed=0))
    return before, losses(net)


@pytest.mark.slow
@pytest.mark.extended  # each option's formula: test_ofmu_module.py::test_named_options_match_their_formulas
def test_ofmu_options_lose_less_of_the_retain_fit_than_the_joint_clip_form(tofu_world):
    """12 rounds of a deliberately aggressive schedule (inner step 0.1, ρ rising 0.5 per round to 6): with both
    named options (separate outer clips, the inner ascent bounded at the target's mean holdout NLL: data a user
    has) OFMU forgets and keeps more of the retain fit than the joint-clip form (both steps clipped as the earlier
    tables ran it, unbounded Φ) under the same schedule. On the current world neither collapses here
    (docs/findings/ofmu.md has the measured losses); an earlier world's stronger claim, that the joint-clip form
    triples the retain loss, no longer holds and is not asserted."""
    from lit_unlearn.models import CausalLM

    holdout = _holdout_nll(tofu_world, CausalLM(name_or_path=str(tofu_world.target)))
    before, fixed = _ofmu_rounds(tofu_world, 12, "separate", holdout)
    _, joint = _ofmu_rounds(tofu_world, 12, "joint", None)
    print(f"OFMU aggressive schedule: before {before}, both options {fixed}, joint clip {joint}")  # docs/findings/ofmu.md
    assert fixed["forget"] > before["forget"] + 1.0  # it forgets
    assert fixed["retain"] < 2.0 * before["retain"]  # and keeps most of the retain fit
    assert fixed["retain"] < joint["retain"]  # more of it than the joint-clip form


def test_a_world_is_reused_for_the_same_recipe_and_rebuilt_for_a_changed_one(tmp_path, monkeypatch):
    """The cache logic, with training replaced by a stub that only records what would be trained (the models
    themselves are trained by the slow tests): one recipe and seed → one folder, built once; a changed recipe, seed
    or builder source → another folder, built anew; fresh=True builds again in place."""
    from lit_unlearn.worlds import tofu_world as tw

    trained = []

    def fake_train(world, out, tokenizer, splits, epochs, init_from, log, what):
        trained.append((world.folder.name, out.name))
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(tw, "_train", fake_train)
    monkeypatch.setattr(tw, "_build_reports", lambda *a, **k: None)
    a = tw.prepare_tofu_world(tmp_path, seed=0, levels=("01",), log=lambda *x: None)
    assert a.folder == tw.world_folder(tmp_path, 0) and len(trained) == 3  # base, target, retain-only
    assert tw.prepare_tofu_world(tmp_path, seed=0, levels=("01",), log=lambda *x: None).folder == a.folder
    assert len(trained) == 3  # reused
    tw.prepare_tofu_world(tmp_path, seed=0, levels=("01", "05"), log=lambda *x: None)
    assert trained[3:] == [(a.folder.name, "retain_only_05")]  # only what is missing
    longer = tw.TofuWorldRecipe(epochs=9)
    b = tw.prepare_tofu_world(tmp_path, seed=0, levels=("01",), recipe=longer, log=lambda *x: None)
    assert b.folder != a.folder and [t for t in trained if t[0] == b.folder.name] == \
        [(b.folder.name, "base"), (b.folder.name, "target"), (b.folder.name, "retain_only_01")]
    assert tw.world_key(1) != tw.world_key(0) != tw.world_key(0, longer)
    before = tw.world_key(0)
    monkeypatch.setattr(tw, "BUILD_SOURCES", tw.BUILD_SOURCES + ("lit_unlearn.data.tofu:TofuSource",))
    assert tw.world_key(0) != before  # the builder's source is part of the key
    n = len(trained)
    tw.prepare_tofu_world(tmp_path, seed=0, levels=("01",), recipe=longer, fresh=True, log=lambda *x: None)
    assert len(trained) == n + 3


@pytest.mark.slow
def test_a_world_is_built_for_real_from_the_release_on_a_small_recipe(tmp_path):
    """The builder's whole path (tokenizer, the three fine-tunes through the run launcher, the retain-only model's
    report) on a one-layer model for one epoch: the tests read a shipped copy of the default world
    (tests/shipped_world.py), so this is where the build itself runs in the main command."""
    from transformers import AutoModelForCausalLM

    from lit_unlearn.worlds.tofu_world import REPORT_SOURCES, TofuWorldRecipe, _source_digest, prepare_tofu_world

    recipe = TofuWorldRecipe(vocab_size=512, size=dict(hidden_size=32, layers=1, heads=2, kv_heads=1,
                                                        intermediate_size=64), base_epochs=1, epochs=1,
                             eval_max_new_tokens=8)
    world = prepare_tofu_world(tmp_path, seed=0, levels=("01",), recipe=recipe, log=lambda *a: None)
    folders = {"base": world.base, "target": world.target, "retain_only": world.retain_only("01")}
    weights = {name: AutoModelForCausalLM.from_pretrained(folder).state_dict() for name, folder in folders.items()}
    assert weights["base"]["model.embed_tokens.weight"].shape[1] == 32
    for tuned in ("target", "retain_only"):  # each fine-tuned from the base, and moved by it
        assert not torch.equal(weights[tuned]["lm_head.weight"], weights["base"]["lm_head.weight"]), tuned
    assert not torch.equal(weights["target"]["lm_head.weight"], weights["retain_only"]["lm_head.weight"])
    report = json.loads(world.reference("01").read_text())
    assert report["evaluated_by"] == _source_digest(REPORT_SOURCES)[:12]
    assert len(report["per_item"]["forget"]["truth_ratio"]) == ROWS["forget01"]


def test_the_shipped_world_is_the_current_builders_installs_whole_and_the_builder_takes_it(tmp_path):
    """The prebuilt world the package ships (lit_unlearn/worlds/prebuilt_world.py) is the one the current builder would
    make (its folder carries the builder's key) with a report of the current evaluation code, and it lands whole: a
    part left half-copied by an interrupted install is replaced, a complete one kept; the builder installs it itself
    (tofu-demo and the bench read it from an empty cache)."""
    import shipped_world as sw

    from lit_unlearn.worlds.tofu_world import world_folder

    assert sw.shipped_folder(tmp_path).is_dir(), (
        "the shipped world is not the current builder's: run `python tests/shipped_world.py` and commit "
        "lit_unlearn/worlds/prebuilt")
    assert [p.name for p in sw.SHIPPED.iterdir()] == [sw.shipped_folder(tmp_path).name]  # no stale copy beside it
    from lit_unlearn.worlds.tofu_world import REPORT_SOURCES, _source_digest

    report = json.loads((sw.shipped_folder(tmp_path) / sw.REPORT).read_text())
    assert report["evaluated_by"] == _source_digest(REPORT_SOURCES)[:12], (
        "the shipped world's report predates the evaluation code (an empty cache would evaluate it again): run "
        "`python tests/shipped_world.py` and commit lit_unlearn/worlds/prebuilt")
    folder = world_folder(tmp_path, sw.SEED)
    (folder / "target").mkdir(parents=True)
    (folder / "target" / "model.safetensors").write_bytes(b"half")  # no config.json: an interrupted copy
    assert sw.install_shipped_world(tmp_path) and not sw.install_shipped_world(tmp_path)
    source = sw.shipped_folder(tmp_path)
    for part in sw.MODELS:
        for name in sw.MODEL_FILES:
            assert (folder / part / name).read_bytes() == (source / part / name).read_bytes(), (part, name)
    # the builder takes it from there: an empty world folder of seed 0 is filled from the copy, nothing trained
    from lit_unlearn.worlds.tofu_world import prepare_tofu_world

    said = []
    world = prepare_tofu_world(tmp_path / "fresh_root", seed=sw.SEED, levels=("01",), log=said.append)
    assert any("copied from the world shipped with the package" in line for line in said), said
    assert not any("epochs on" in line for line in said), said  # no fine-tune ran
    assert (world.target / "model.safetensors").read_bytes() == (source / "target" / "model.safetensors").read_bytes()
    assert not list(folder.glob(".*.partial"))
