"""The audit on the TOFU world: the full verdict of a shallowly unlearned model, the target and a retain-only model.
Relearning on one forget author brings the shallow model's other author back more than it teaches a model that never
saw that author, the target stays recognised, the relearning never trains on the items it measures, and the
paraphrase probe asks TOFU's own paraphrased questions."""

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def audited(tofu_world, tmp_path_factory):
    from helpers import gradient_ascent_on_forget
    from lit_unlearn.audit import AuditSpec, run_audit
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.models import CausalLM
    from lit_unlearn.verification import relearning_probe, verdict_runner

    tok = load_tokenizer(str(tofu_world.tokenizer))
    source = TofuSource(str(tofu_world.data), "01")
    # shallow unlearning: ten gradient-ascent steps (Adam, lr 3e-4): the forget answers' NLL goes past unseen
    # authors' for one author, not for the other, and nothing spreads the change
    shallow = gradient_ascent_on_forget(tofu_world, lr=3e-4, steps=10)
    scored = []
    real = verdict_runner.VerdictRunner.scorer

    def scorer(self, network, forget, holdout):
        scored.append([r["question"] for r in forget])
        return real(self, network, forget, holdout)

    verdict_runner.VerdictRunner.scorer = scorer
    relearning_probe.Reads.log = []
    try:
        spec = AuditSpec(relearn_lrs=[5e-4], relearn_steps=[10], n_boot=500)
        report = run_audit({"unlearned": shallow.eval(), "target": CausalLM(name_or_path=str(tofu_world.target)),
                            "retain-only": CausalLM(name_or_path=str(tofu_world.retain_only("01")))},
                           tok, source, spec, tmp_path_factory.mktemp("audit"), reference_model=str(tofu_world.base),
                           reads=frozenset({"surprisal"}), log=lambda *a: None)
        trained = {q for q, _ in relearning_probe.Reads.log}
    finally:
        verdict_runner.VerdictRunner.scorer = real
        relearning_probe.Reads.log = None
    return report, scored, trained, source


def test_relearning_recovers_shallow_forgetting_more_than_it_teaches_a_model_that_never_saw_the_author(audited):
    report, *_ = audited
    r = {name: res["verdict"] for name, res in report.results.items()}
    condition = "relearn lr=0.0005 steps=10"
    drop = {name: v["measures"]["none"]["forget_nll"] - v["measures"][condition]["forget_nll"] for name, v in r.items()}
    assert drop["unlearned"] > drop["retain-only"] + 0.3, drop
    assert r["target"]["conditions"][condition]["pooled"]["intervals"]["loss"]["auc"] > 0.95
    assert r["target"]["band_ratio"] > 1 and not r["unlearned"]["parts"]["relearning"]["passed"]
    assert report.robust is False and "NOT ROBUST" in report.table() and "NOT FORGOTTEN" in report.table()
    assert "- unlearned, power, before: " in report.table() and r["unlearned"]["decision"] == "not forgotten"
    assert r["unlearned"]["reads"] == ["surprisal"] and "entropy_mean" in r["unlearned"]["unread_attacks"]


def test_the_attack_never_trains_on_what_it_measures_and_asks_toFUs_paraphrases(audited):
    report, scored, trained, source = audited
    rows = source.eval_splits()["forget"]
    relearn_scored = [qs for qs in scored if len(qs) == 10]  # the measured author's reporting items
    assert relearn_scored and trained and all(not trained & set(qs) for qs in relearn_scored)
    paraphrased = {r["paraphrased_question"] for r in rows}
    probes = [qs for qs in scored if set(qs) <= paraphrased]
    counted = all("paraphrase" in r["verdict"]["conditions"] for r in report.results.values())
    from lit_unlearn.verification.holdout_calibration import calibration

    assert counted == ("paraphrase" in calibration()["margins"][report.level]["best"])  # the verdict's part there
    # each subject asked once; the base model on the same rows once (the verdict's runner keeps it), or per subject
    # beside the uncounted probe
    assert len(probes) == (len(report.results) + 1 if counted else 2 * len(report.results))
    assert all(not set(qs) & {r["question"] for r in rows} for qs in probes)
