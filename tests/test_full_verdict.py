"""The full verdict's pieces against independent references: the learned attack's cross-fitting against a version
written out with scikit-learn, per-attack margins against the definition, relative scoring, the relearning probe
(its snapshots are the shorter attacks, and it never reads a measured item), a model's own margins, and the
statistics each method declares it reads."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from lit_unlearn.algorithms.cross_fit import cross_fitted_scores, fold_ids
from lit_unlearn.verification.full_verdict import HalfItems, Scored, VerdictSpec, judge, self_margins
from lit_unlearn.verification.holdout_equivalence import equivalence_verdict, holdout_verdict
from lit_unlearn.verification.learned_attack import learned_attack_scores


def _sklearn_cross_fit(x, y, groups, k, repeats, seed):
    """Cross-fitting written out: the documented fold rule (per side, that side's distinct groups in order of first
    appearance, permuted and dealt round-robin; k' = min(k, groups on the smaller side)), one Generator drawing the
    permutations side 0 then side 1 per repeat, StandardScaler + LogisticRegression(C=1) fitted on the other folds."""
    rng = np.random.default_rng(seed)
    total = np.zeros(len(y))
    sides = [np.flatnonzero(y == s) for s in (0, 1)]
    names = [list(dict.fromkeys(groups[i] for i in idx)) for idx in sides]
    kk = max(2, min(k, *[len(n) for n in names]))
    for _ in range(repeats):
        fold = np.zeros(len(y), dtype=int)
        for idx, side_names in zip(sides, names):
            order = rng.permutation(len(side_names))
            where = {side_names[g]: j % kk for j, g in enumerate(order)}
            for i in idx:
                fold[i] = where[groups[i]]
        for f in range(kk):
            test = fold == f
            scaler = StandardScaler().fit(x[~test])
            model = LogisticRegression(C=1.0, tol=1e-12, max_iter=10_000).fit(scaler.transform(x[~test]), y[~test])
            total[test] += model.predict_proba(scaler.transform(x[test]))[:, 1]
    return total / repeats


def test_a_saturated_learned_score_is_its_limit_without_a_warning():
    """A separable item's logit can pass exp's range; its probability is then exactly 0 or 1, quietly."""
    import warnings

    from lit_unlearn.algorithms.cross_fit import predict_logistic

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = predict_logistic(np.array([[-800.0], [0.0], [800.0]]), np.array([1.0]), 0.0)
    assert p.tolist() == [0.0, 0.5, 1.0]


def test_the_learned_attacks_cross_fitting_matches_sklearn_written_out():
    rng = np.random.default_rng(0)
    groups = [f"f{i // 12}" for i in range(60)] + [f"h{i // 12}" for i in range(48)]
    y = np.r_[np.zeros(60), np.ones(48)]
    x = rng.normal(size=(108, 6)) + 0.7 * y[:, None] * np.array([1, 0, 0.5, 0, 0, 0])
    x[:, 5] = 3.0  # a constant column: scaled by 1, as StandardScaler does
    ours, kind = cross_fitted_scores(x, y, groups, k=3, repeats=4, seed=7)
    assert kind == "group"
    np.testing.assert_allclose(ours, _sklearn_cross_fit(x, y, groups, 3, 4, 7), atol=1e-6)


def test_folds_keep_authors_whole_and_fall_back_to_items_with_one_author_a_side():
    rng = np.random.default_rng(1)
    y = np.r_[np.zeros(40), np.ones(40)]
    groups = [i // 10 for i in range(40)] + [100 + i // 10 for i in range(40)]
    folds, kind = fold_ids(y, groups, 5, rng)
    assert kind == "group" and len(set(folds)) == 4  # k' = 4 authors a side
    for g in set(groups):
        assert len({folds[i] for i in range(80) if groups[i] == g}) == 1
    one = [0] * 40 + [100 + i // 10 for i in range(40)]
    folds, kind = fold_ids(y, one, 5, rng)
    assert kind == "item" and len(set(folds[:40])) == 5


def test_the_learned_attack_finds_a_signal_spread_over_features_that_each_attack_alone_barely_shows():
    """Forget items differ from holdout items by a shift of 0.35 sd in each of six independent features: each alone
    has a true AUC of Φ(0.35/√2) = 0.598, the best combination Φ(0.35·√6/√2) = 0.728. The cross-fitted classifier
    lands between (0.68 here: five fold models score on slightly different scales), well above any one feature."""
    from scipy.stats import norm

    rng = np.random.default_rng(3)
    names = ["loss", "zlib", "min_k", "entropy_mean", "entropy_spread", "token_rank"]
    n = 300
    f = {a: (rng.normal(size=n) - 0.35).tolist() for a in names}
    h = {a: rng.normal(size=n).tolist() for a in names}
    fg, hg = [i // 10 for i in range(n)], [i // 10 for i in range(n)]
    fs, hs, kind = learned_attack_scores(f, h, fg, hg, folds=5, repeats=3)
    single = max(abs(equivalence_verdict({a: f[a]}, {a: h[a]}, fg, hg, 0.5).intervals[a].auc - 0.5) for a in names)
    combined = equivalence_verdict({"l": fs}, {"l": hs}, fg, hg, 0.5).intervals["l"].auc - 0.5
    best = norm.cdf(0.35 * np.sqrt(6) / np.sqrt(2)) - 0.5
    assert kind == "group" and single < 0.16 and single + 0.05 < combined <= best + 0.03


def test_per_attack_margins_decide_by_each_attacks_own_reach():
    rng = np.random.default_rng(2)
    f = {"a": rng.normal(0.3, 1, 40).tolist(), "b": rng.normal(0, 1, 40).tolist()}
    h = {"a": rng.normal(0, 1, 40).tolist(), "b": rng.normal(0, 1, 40).tolist()}
    g = [i // 10 for i in range(40)]
    margins = {"a": 0.45, "b": 0.2}
    v = equivalence_verdict(f, h, g, g, margins, n_boot=500)
    ratios = {a: max(0.5 - iv.low, iv.high - 0.5) / margins[a] for a, iv in v.intervals.items()}
    assert v.band_ratio == pytest.approx(max(ratios.values()))
    assert v.passed == (max(ratios.values()) <= 1)
    assert {iv.attack for iv in v.failing()} == {a for a, r in ratios.items() if r > 1}
    assert v.restricted(["b"]).band_ratio == pytest.approx(ratios["b"])
    with pytest.raises(ValueError, match="no margin"):
        equivalence_verdict(f, h, g, g, {"a": 0.3})


def test_relative_scoring_is_the_verdict_on_model_minus_base_scores():
    rng = np.random.default_rng(4)
    half = HalfItems([{}] * 20, [{}] * 20, [i // 10 for i in range(20)], [i // 10 for i in range(20)], [], [])
    names = ("loss", "zlib")
    mia = {f"{s}_{a}": rng.normal(size=20).tolist() for s in ("forget", "holdout") for a in names}
    mia.update({"forget_loss": mia["forget_loss"], "holdout_loss": mia["holdout_loss"]})
    base = {k: rng.normal(size=20).tolist() for k in mia}
    spec = VerdictSpec(n_boot=300)
    margins = ({a: 0.4 for a in names}, {a: 0.45 for a in names})
    got = judge({"none": Scored(mia, list(range(20)))}, half, list(names), lambda c: margins, spec, base).verdicts["none"]
    diff = {s: {a: [x - y for x, y in zip(mia[f"{s}_{a}"], base[f"{s}_{a}"])] for a in names}
            for s in ("forget", "holdout")}
    want = holdout_verdict(diff["forget"], diff["holdout"], half.forget_groups, half.holdout_groups, margins[0],
                           margins[1], n_boot=300)
    assert got.band_ratio == pytest.approx(want.band_ratio)
    assert {a: iv.auc for a, iv in got.pooled.intervals.items()} == {a: iv.auc
                                                                     for a, iv in want.pooled.intervals.items()}


def test_own_margins_are_the_largest_reach_of_holdout_against_holdout_and_need_four_authors():
    from lit_unlearn.core.errors import UserError

    rng = np.random.default_rng(5)
    groups = [i // 10 for i in range(60)]
    scores = {"loss": (rng.normal(size=60) + np.repeat(rng.normal(0, 0.5, 6), 10)).tolist()}
    spec = VerdictSpec(n_boot=300, self_splits=3)
    pooled, author = self_margins(scores, groups, ["loss"], spec)
    # written out: the same three random halvings of the six authors, reach of each interval, the largest
    draw = np.random.default_rng(spec.seed)
    best_p = best_a = 0.0
    for _ in range(3):
        order = draw.permutation(6)
        side = {int(j): ("f" if r < 3 else "h") for r, j in enumerate(order)}
        fi = [i for i in range(60) if side[groups[i]] == "f"]
        hi = [i for i in range(60) if side[groups[i]] == "h"]
        v = holdout_verdict({"loss": [scores["loss"][i] for i in fi]}, {"loss": [scores["loss"][i] for i in hi]},
                            [groups[i] for i in fi], [groups[i] for i in hi], 0.5, 0.5, n_boot=300)
        best_p = max(best_p, v.pooled.intervals["loss"].deviation())
        best_a = max(best_a, max(a.intervals["loss"].deviation() for a in v.authors.values()))
    assert pooled["loss"] == pytest.approx(np.ceil(round(best_p, 9) * 100) / 100)
    assert author["loss"] == pytest.approx(min(0.5, np.ceil(round(best_a, 9) * 100) / 100))
    with pytest.raises(UserError, match="at least 4 holdout authors"):
        self_margins(scores, [i // 20 for i in range(60)], ["loss"], spec)


def test_methods_declare_what_they_read_and_the_unread_attacks_follow():
    from lit_unlearn.metrics.membership_attacks import ATTACKS, STATISTICS, unread_attacks
    from lit_unlearn.modules import GAModule, HoldoutMatchModule, RMUModule
    from lit_unlearn.modules.unlearning import UnlearningModule

    assert all(a.reads <= set(STATISTICS) for a in ATTACKS.values())
    assert unread_attacks(ATTACKS, HoldoutMatchModule.READS) == ["gradnorm", "entropy_mean", "entropy_spread",
                                                                "token_rank", "learned"]
    assert unread_attacks(ATTACKS, GAModule.READS) == ["gradnorm", "entropy_mean", "entropy_spread", "token_rank",
                                                       "learned"]
    assert unread_attacks(ATTACKS, RMUModule.READS) == list(ATTACKS)
    # a module that declares nothing is taken to read every statistic but the learned attack's
    assert unread_attacks(ATTACKS, UnlearningModule.reads_statistics.fget(UnlearningModule.__new__(
        UnlearningModule))) == ["learned"]


def test_every_llm_method_declares_the_statistics_it_reads():
    import inspect

    import lit_unlearn.modules as modules
    from lit_unlearn.metrics.membership_attacks import STATISTICS
    from lit_unlearn.modules.unlearning import UnlearningModule

    llm = [c for _, c in inspect.getmembers(modules, inspect.isclass)
           if issubclass(c, UnlearningModule) and c is not UnlearningModule and c.__name__ != "ObjectiveUnlearningModule"]
    assert len(llm) >= 14
    for cls in llm:
        assert cls.READS is not None, f"{cls.__name__} does not declare READS"
        assert cls.READS <= set(STATISTICS), cls.__name__


def test_relearning_snapshots_are_the_shorter_attacks_and_read_only_the_rows_given(tmp_path):
    import torch

    from helpers import tiny_tofu
    from lit_unlearn.data import QAFormatter, TofuSource
    from lit_unlearn.models import CausalLM, tiny_llama_config
    from lit_unlearn.verification.relearning_probe import Reads, relearn_split, relearned, same_author

    _, tok = tiny_tofu(tmp_path, seed=2)
    rows = TofuSource(str(tmp_path / "data")).eval_splits()["forget"][:12]
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=3)
    fmt = QAFormatter(tok)
    Reads.log = []
    try:
        long = {n: {k: v.clone() for k, v in m.state_dict().items()}
                for n, m in relearned(net, fmt, tok.pad_token_id, rows[:6], 1e-3, [3, 7], batch_size=4)}
        read = set(Reads.log)
    finally:
        Reads.log = None
    short = next(iter(relearned(net, fmt, tok.pad_token_id, rows[:6], 1e-3, [3], batch_size=4)))[1]
    for k, v in short.state_dict().items():
        torch.testing.assert_close(v, long[3][k], rtol=0, atol=0)
    assert any(not torch.equal(long[3][k], long[7][k]) for k in long[3])
    assert read == {(r["question"], r["answer"]) for r in rows[:6]}
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in net.state_dict().items())  # the model is untouched
    relearn, measured = relearn_split(["a"] * 3 + ["b"] * 3 + ["c"] * 3, 0.5)
    assert relearn == [0, 1, 2] and measured == list(range(3, 9))
    assert not same_author(["a"] * 3 + ["b"] * 3 + ["c"] * 3, relearn, measured)
    relearn, measured = relearn_split(["a"] * 5, 0.5)  # one author: split by item, and the report is told
    assert relearn == [0, 1] and measured == [2, 3, 4] and same_author(["a"] * 5, relearn, measured)
    with pytest.raises(ValueError, match="at least 2 forget items"):
        relearn_split(["a"], 0.5)


def test_the_paraphrase_condition_asks_the_forget_items_otherwise_and_subtracts_the_base_on_the_same_questions():
    """The fourth part: the scorer sees each forget item under its paraphrased question (the holdout items as they
    are); relative scores subtract the base model's score of the same paraphrased question, not of the original; a
    paraphrase that fails fails the verdict; without a paraphrased question it is one line that says what to add."""
    from lit_unlearn.core.errors import UserError
    from lit_unlearn.verification.full_verdict import PARAPHRASE, part_of, score_conditions

    rng = np.random.default_rng(7)
    forget = [{"question": f"q{i}", "paraphrased_question": f"p{i}", "answer": f"a{i}"} for i in range(20)]
    holdout = [{"question": f"h{i}", "answer": f"b{i}"} for i in range(20)]
    groups = [i // 10 for i in range(20)]
    half = HalfItems(forget, holdout, groups, groups, [], [])
    names = ("loss", "zlib")
    table = {r["question"]: {a: float(rng.normal()) for a in names} for r in forget + holdout}
    table.update({r["paraphrased_question"]: {a: float(rng.normal(2.0)) for a in names} for r in forget})
    asked = []

    def scorer(network, f_rows, h_rows):  # a score per question: what the model would give
        asked.append([r["question"] for r in f_rows])
        out = {f"forget_{a}": [table[r["question"]][a] + network for r in f_rows] for a in names}
        out.update({f"holdout_{a}": [table[r["question"]][a] + network for r in h_rows] for a in names})
        return out

    spec = VerdictSpec(n_boot=300, paraphrase=True)
    assert spec.conditions()[-1] == PARAPHRASE and part_of(PARAPHRASE) == "paraphrase"
    assert PARAPHRASE not in VerdictSpec().conditions()  # undecided until a runner sees the data and margins
    scored = score_conditions(0.0, half, scorer, spec, conditions=["none", PARAPHRASE])
    assert asked == [[r["question"] for r in forget], [r["paraphrased_question"] for r in forget]]
    margins = ({a: 0.4 for a in names}, {a: 0.45 for a in names})
    model = {c: Scored({k: [x + (0.3 if k.startswith("forget") else 0.0) for x in v] for k, v in s.mia.items()},
                       s.forget_idx) for c, s in scored.items()}  # the model: forget items 0.3 above the base
    model[PARAPHRASE].base = scored[PARAPHRASE].mia
    got = judge(model, half, list(names), lambda c: margins, spec, scored["none"].mia).verdicts[PARAPHRASE]
    want = holdout_verdict({a: [0.3] * 20 for a in names}, {a: [0.0] * 20 for a in names}, groups, groups,
                           margins[0], margins[1], n_boot=300)
    assert got.band_ratio == pytest.approx(want.band_ratio) and not got.passed  # every forget item apart
    assert {a: iv.auc for a, iv in got.pooled.intervals.items()} == {a: iv.auc
                                                                     for a, iv in want.pooled.intervals.items()}
    assert all(iv.auc in (0.0, 1.0) for iv in got.pooled.intervals.values())
    model[PARAPHRASE].base = None  # the original questions' base scores would be the wrong subtraction
    with pytest.raises(ValueError, match="same questions"):
        judge(model, half, list(names), lambda c: margins, spec, scored["none"].mia)
    full = judge({"none": Scored(scored["none"].mia, list(range(20)), None),
                  PARAPHRASE: Scored(model[PARAPHRASE].mia, list(range(20)), scored[PARAPHRASE].mia)},
                 half, list(names), lambda c: margins, spec, scored["none"].mia, power=False)
    assert full.part("paraphrase")["band_ratio"] == pytest.approx(got.band_ratio) and full.decision == "not forgotten"
    assert full.verdicts["none"].band_ratio < 1 < full.band_ratio
    with pytest.raises(UserError, match="3 of 20 forget items have none"):
        score_conditions(0.0, HalfItems([{**r, "paraphrased_question": ""} if i < 3 else r
                                         for i, r in enumerate(forget)], holdout, groups, groups, [], []),
                         scorer, spec, conditions=[PARAPHRASE])


def test_the_paraphrase_part_needs_its_own_calibrated_margins_and_says_how_to_make_them():
    """Until calibrate_paraphrase.py has stored them, asking for the paraphrase part with calibrated margins is one
    line that names the script (the margins of the model as it is would judge a shifted question wrongly)."""
    from lit_unlearn.core.errors import UserError
    from lit_unlearn.verification.holdout_calibration import calibrated_margins, calibration

    if "paraphrase" in calibration()["margins"]["01"]["best"]:
        pooled, author = calibrated_margins("01", "best", "paraphrase")
        assert set(pooled) == set(author) and all(0 < v <= 0.5 for v in (*pooled.values(), *author.values()))
        return
    with pytest.raises(UserError, match="calibrate_paraphrase.py, or leave that condition out"):
        calibrated_margins("01", "best", "paraphrase")


def test_by_default_the_paraphrase_part_runs_where_the_items_have_paraphrases_and_calibrated_margins_include_it(
        monkeypatch):
    from lit_unlearn.verification import holdout_calibration
    from lit_unlearn.verification.verdict_runner import resolve_paraphrase

    asked = [{"question": "q", "paraphrased_question": "p", "answer": "a"}] * 3
    plain = [{"question": "q", "answer": "a"}] * 3
    stored = {"margins": {"01": {"best": {"none": {}, "paraphrase": {}}}, "05": {"best": {"none": {}}}}}
    monkeypatch.setattr(holdout_calibration, "calibration", lambda: stored)
    spec, note = resolve_paraphrase(VerdictSpec(), asked, "01", "calibrated")
    assert spec.paraphrase is True and note == "" and spec.conditions()[-1] == "paraphrase"
    for rows, level, margins, why in ((plain, "01", "calibrated", "no `paraphrased_question`"),
                                      (asked, "05", "calibrated", "no calibrated margins for it at forget05"),
                                      (asked, "01", "self", "not the calibrated ones"),
                                      (asked, "01", (0.3, 0.45), "not the calibrated ones")):
        spec, note = resolve_paraphrase(VerdictSpec(), rows, level, margins)
        assert spec.paraphrase is False and "paraphrase" not in spec.conditions() and why in note, note
    spec, note = resolve_paraphrase(VerdictSpec(paraphrase=True), plain, "05", "self")  # asked for: kept, and
    assert spec.paraphrase is True  # the runner's margins or scoring then say what is missing
    assert resolve_paraphrase(VerdictSpec(paraphrase=False), asked, "01", "calibrated")[0].paraphrase is False
