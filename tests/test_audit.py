"""The audit on the TOFU world: relearning brings a shallowly unlearned model's held-out forget author back more
than it teaches a retain-only model about that author, the target stays recognised, the attack never trains on
the part it measures, and the paraphrase probe asks TOFU's own paraphrased questions."""

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def audited(tofu_world, tmp_path_factory):
    from helpers import gradient_ascent_on_forget
    from lit_unlearn.audit import AuditSpec, run_audit
    from lit_unlearn.audit import run as audit_run
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.models import CausalLM

    tok = load_tokenizer(str(tofu_world.tokenizer))
    source = TofuSource(str(tofu_world.data), "01")
    # shallow unlearning: ten gradient-ascent steps (Adam, lr 3e-4): the forget answers' NLL goes past unseen
    # authors' for one author, not for the other, and nothing spreads the change
    shallow = gradient_ascent_on_forget(tofu_world, lr=3e-4, steps=10)
    measured, relearned = [], []
    real_measure, real_relearn = audit_run._measure, audit_run._relearned

    def measure(network, tokenizer, rows, *args):
        measured.append([r["question"] for r in rows])
        return real_measure(network, tokenizer, rows, *args)

    def relearn(network, tokenizer, source, rows, *args):
        relearned.append([r["question"] for r in rows])
        return real_relearn(network, tokenizer, source, rows, *args)

    audit_run._measure, audit_run._relearned = measure, relearn
    try:
        spec = AuditSpec(relearn_steps=10, quant_bits=[4], attacks=["loss", "zlib", "min_k"], n_boot=500)
        report = run_audit({"unlearned": shallow.eval(), "target": CausalLM(name_or_path=str(tofu_world.target)),
                            "retain-only": CausalLM(name_or_path=str(tofu_world.retain_only("01")))},
                           tok, source, spec, tmp_path_factory.mktemp("audit"), log=lambda *a: None)
    finally:
        audit_run._measure, audit_run._relearned = real_measure, real_relearn
    return report, measured, relearned, source


def test_relearning_recovers_shallow_forgetting_more_than_it_teaches_a_model_that_never_saw_the_author(audited):
    report, *_ = audited
    r = report.results
    drop = {name: r[name]["none"]["forget_nll"] - r[name]["relearn"]["forget_nll"] for name in r}
    assert drop["unlearned"] > drop["retain-only"] + 0.5, drop  # measured: 1.24 nats against none
    assert r["target"]["relearn"]["auc"]["loss"] > 0.95  # the target recognises the held-out author throughout
    assert r["target"]["none"]["band_ratio"] > 1 and not r["unlearned"]["relearn"]["passed"]
    assert report.robust is False and "NOT ROBUST" in report.table()


def test_the_attack_never_trains_on_what_it_measures_and_asks_toFUs_paraphrases(audited):
    report, measured, relearned, source = audited
    held_out = set(measured[0])
    assert relearned and all(not held_out & set(rows) for rows in relearned)
    assert report.split["relearn_items"] == report.split["measured_items"] == 20
    rows = source.eval_splits()["forget"]
    paraphrased = {r["paraphrased_question"] for r in rows if r["question"] in held_out}
    per_subject = len(measured) // len(report.results)
    conditions = list(report.results["unlearned"])
    asked = measured[conditions.index("paraphrase")]
    assert set(asked) == paraphrased and not set(asked) & held_out and per_subject == len(conditions)
