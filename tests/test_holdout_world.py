"""The reference-free verification on the TOFU world: it fails the target and a collapsed (over-forgotten) model,
passes the retain-only model and fails a planted one; relearning never trains on what it measures; the paraphrase
part asks model and base the paraphrased questions. (That a run's decisions never read the reporting half:
tests/test_tofu_demo.py, on the demo's run.)"""

import pytest

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
