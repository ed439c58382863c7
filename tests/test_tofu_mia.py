"""The TOFU report's memorisation and membership additions (extraction strength, exact memorisation, gradnorm and
reference MIAs) and the open-unlearning convention, each against an independent computation: token-by-token
loops through the model, open-unlearning's own formulas written out, `.backward()` into `.grad`, scikit-learn."""

import math
import zlib

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from helpers import tiny_tofu
from lit_unlearn.data import QAFormatter, TofuSource, generate_fictitious_tofu, train_bpe_tokenizer, write_tofu_json
from lit_unlearn.metrics import TofuEvaluator
from lit_unlearn.metrics.tofu import formulas as tofu_math
from lit_unlearn.metrics.tofu.mia import restore_order as _restore_order
from lit_unlearn.models import CausalLM, tiny_llama_config


@pytest.fixture(scope="module")
def tofu(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tofu_mia")
    _, tok = tiny_tofu(folder, seed=2)
    eval_splits = TofuSource(str(folder / "data")).eval_splits()
    # A target that has partly memorised the forget answers, so extraction and memorisation are not all zero.
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=3)
    fmt = QAFormatter(tok)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    items = [fmt.encode(r["question"], r["answer"]) for r in eval_splits["forget"][:6]]
    for _ in range(40):
        for it in items:
            logits = net(it["input_ids"][None])[0, :-1]
            loss = torch.nn.functional.cross_entropy(logits, it["labels"][1:], ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            opt.step()
    net.eval()
    return eval_splits, tok, net


def _answer_tokens(tok, fmt, question, answer):
    """Prompt and answer ids tokenised separately (not through the evaluator's batching)."""
    return fmt.prompt_ids(question), tok(" " + answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]


def _teacher_forced(net, prompt, answer):
    ids = torch.tensor([prompt + answer])
    with torch.no_grad():
        logits = net(ids)[0].double()
    rows = [logits[len(prompt) + j - 1] for j in range(len(answer))]
    return torch.stack(rows), torch.tensor(answer)


def _es_open_unlearning(preds, labels):
    """open-unlearning's loop, verbatim in spirit: the first k whose suffixes agree (k ends at n − 1)."""
    n = len(labels)
    for k in range(n):
        if torch.equal(preds[k:], labels[k:]):
            break
    return 1 - k / n


def test_extraction_strength_and_exact_memorisation_by_brute_force():
    for bits in ([1, 1, 1], [0, 1, 1], [1, 0, 1], [1, 1, 0], [0, 0, 0], [1]):
        c = torch.tensor(bits, dtype=torch.bool)
        n = len(bits)
        k = next((i for i in range(n) if all(bits[i:])), n)  # smallest k with an all-correct suffix, else n
        assert tofu_math.extraction_strength(c) == pytest.approx(1 - k / n)
        labels = torch.arange(n)
        preds = torch.where(c, labels, labels + 100)
        assert tofu_math.extraction_strength(c, no_suffix_is_last=True) == pytest.approx(
            _es_open_unlearning(preds, labels))
        assert tofu_math.exact_memorization(c) == pytest.approx(sum(bits) / n)


def test_min_k_rounding_and_moment_form():
    lp = torch.tensor([-0.1, -2.0, -0.5, -3.0, -1.0], dtype=torch.float64)
    assert tofu_math.min_k_score(lp, 0.5, "ceil") == pytest.approx(-np.mean([-3.0, -2.0, -1.0]))  # ⌈2.5⌉ = 3
    assert tofu_math.min_k_score(lp, 0.5, "floor") == pytest.approx(-np.mean([-3.0, -2.0]))       # ⌊2.5⌋ = 2
    assert tofu_math.min_k_score(lp, 0.1, "floor") == pytest.approx(3.0)                          # at least 1
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(5, 9, generator=g, dtype=torch.float64)
    logp = torch.log_softmax(logits, -1)
    mu = (logp.exp() * logp).sum(-1)
    var = (logp.exp() * logp**2).sum(-1) - mu**2
    # min_k_plus_plus_score takes its moments in float32 (as the evaluator does): the two agree to float32's
    # resolution; measured 1.5e-6 apart under ATEN_CPU_CAPABILITY=default, under 1e-6 with AVX2 and AVX512
    assert tofu_math.min_k_plus_plus_from_moments(lp, mu, var) == pytest.approx(
        tofu_math.min_k_plus_plus_score(lp, logits), rel=1e-5)


def test_restore_order_inverts_the_rank_interleaved_gather():
    for n in range(0, 9):
        for world in (1, 2, 3):
            items = list(range(n))
            gathered = [x for r in range(world) for x in items[r::world]]
            assert _restore_order([float(x) for x in gathered], world) == [float(x) for x in items]


def test_es_em_and_min_k_per_item_equal_token_loops_in_both_conventions(tofu):
    splits, tok, net = tofu
    fmt = QAFormatter(tok)
    ours = TofuEvaluator(tok, splits, max_new_tokens=4, gradnorm=False).run(net)
    ou = TofuEvaluator(tok, splits, max_new_tokens=4, gradnorm=False, mia_convention="open-unlearning").run(net)
    assert ours.mia_convention == "lit-unlearn" and ou.mia_convention == "open-unlearning"
    es, em, es_ou, em_ou = [], [], [], []
    min_k, min_k_ou, zl_ou, nll = [], [], [], []
    for r in splits["forget"]:
        prompt, answer = _answer_tokens(tok, fmt, r["question"], r["answer"])
        logits, labels = _teacher_forced(net, prompt, answer)
        preds = logits.argmax(-1)
        correct = (preds == labels).tolist()
        n = len(correct)
        k = next((i for i in range(n) if all(correct[i:])), n)
        es.append(1 - k / n)
        em.append(sum(correct) / n)
        es_ou.append(_es_open_unlearning(preds[:-1], labels[:-1]))  # open-unlearning drops the EOS position
        em_ou.append(float((preds[:-1] == labels[:-1]).double().mean()))
        lp = torch.log_softmax(logits, -1)[torch.arange(n), labels]
        nll.append(-lp.mean().item())
        min_k.append(-np.mean(sorted(lp.tolist())[:math.ceil(0.4 * n)]))
        min_k_ou.append(-np.mean(sorted(lp[:-1].tolist())[:max(1, int(0.4 * (n - 1)))]))
        text = tok.decode(labels.tolist(), skip_special_tokens=True)
        zl_ou.append(nll[-1] / len(zlib.compress(text.encode())))
    assert max(es) > 0.2, "the fixture should have memorised something"
    np.testing.assert_allclose(ours.per_item["forget"]["es"], es, atol=1e-12)
    np.testing.assert_allclose(ours.per_item["forget"]["em"], em, atol=1e-12)
    np.testing.assert_allclose(ou.per_item["forget"]["es"], es_ou, atol=1e-12)
    np.testing.assert_allclose(ou.per_item["forget"]["em"], em_ou, atol=1e-12)
    assert ours.summary["forget/es"] == pytest.approx(np.mean(es))
    np.testing.assert_allclose(ours.per_item["mia"]["forget_nll"], nll, rtol=1e-5)

    holdout = []
    for r in splits["holdout"]:
        prompt, answer = _answer_tokens(tok, fmt, r["question"], r["answer"])
        logits, labels = _teacher_forced(net, prompt, answer)
        lp = torch.log_softmax(logits, -1)[torch.arange(len(answer)), labels]
        holdout.append((lp, -lp.mean().item(), tok.decode(labels.tolist(), skip_special_tokens=True)))
    labels01 = [0] * len(min_k) + [1] * len(holdout)
    auc = lambda xs: roc_auc_score(labels01, xs)  # noqa: E731
    assert ours.summary["mia/min_k_auc"] == pytest.approx(
        auc(min_k + [-np.mean(sorted(lp.tolist())[:math.ceil(0.4 * len(lp))]) for lp, _, _ in holdout]), abs=1e-9)
    assert ou.summary["mia/min_k_auc"] == pytest.approx(
        auc(min_k_ou + [-np.mean(sorted(lp[:-1].tolist())[:max(1, int(0.4 * (len(lp) - 1)))]) for lp, _, _ in holdout]),
        abs=1e-9)
    assert ou.summary["mia/zlib_auc"] == pytest.approx(
        auc(zl_ou + [n / len(zlib.compress(t.encode())) for _, n, t in holdout]), abs=1e-9)
    # Without a reference, open-unlearning reports privleak against AUC 0.5; we leave it out.
    assert "privleak" not in ours.summary
    assert ou.summary["privleak"] == pytest.approx(((1 - ou.summary["mia/min_k_auc"]) - 0.5) / (0.5 + 1e-10) * 100)
    assert any("fallback" in n for n in ou.notes)
    assert "open-unlearning" in ou.table()


def test_gradnorm_and_reference_attacks_equal_direct_computations(tofu, tmp_path):
    splits, tok, net = tofu
    fmt = QAFormatter(tok)
    retrained = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=4)
    ref_path = TofuEvaluator(tok, splits, max_new_tokens=4, gradnorm=False).run(retrained).save(tmp_path / "ref.json")
    report = TofuEvaluator(tok, splits, max_new_tokens=4, reference=ref_path).run(net)

    def nll_and_gradnorm(model, question, answer):
        prompt, ans = _answer_tokens(tok, fmt, question, answer)
        ids = torch.tensor([prompt + ans])
        model.zero_grad()
        logits = model(ids)[0]
        lp = torch.log_softmax(logits[len(prompt) - 1:len(prompt) - 1 + len(ans)], -1)[torch.arange(len(ans)),
                                                                                        torch.tensor(ans)]
        (-lp.mean()).backward()  # open-unlearning's way: through .grad, then the mean of per-tensor norms
        norms = [p.grad.norm(2).item() for p in model.parameters() if p.grad is not None]
        model.zero_grad()
        return -lp.mean().item(), float(np.mean(norms))

    rows = splits["forget"] + splits["holdout"]
    labels01 = [0] * len(splits["forget"]) + [1] * len(splits["holdout"])
    target = [nll_and_gradnorm(net, r["question"], r["answer"]) for r in rows]
    ref_nll = [nll_and_gradnorm(retrained, r["question"], r["answer"])[0] for r in rows]
    assert report.summary["mia/gradnorm_auc"] == pytest.approx(roc_auc_score(labels01, [g for _, g in target]),
                                                                abs=1e-9)
    assert report.summary["mia/reference_auc"] == pytest.approx(
        roc_auc_score(labels01, [t - r for (t, _), r in zip(target, ref_nll)]), abs=1e-9)
    assert all(p.grad is None for p in net.parameters())  # the attack leaves no gradients behind


def _evaluate_on_two_ranks(rank, world, port, folder, out):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from lit_unlearn.data.tokenizer import load_tokenizer

    tok = load_tokenizer(f"{folder}/tok")
    splits = TofuSource(f"{folder}/data").eval_splits()
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=5)
    report = TofuEvaluator(tok, splits, max_new_tokens=4).run(net)
    torch.save((report.summary, report.per_item["mia"]), f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_processes_give_the_same_report_and_item_order(tofu, tmp_path, spawn):
    import socket

    splits, tok, _ = tofu
    folder = tmp_path / "tofu"
    write_tofu_json(folder / "data", n_authors=20, n_questions=4, seed=2)
    tok.save_pretrained(str(folder / "tok"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spawn(_evaluate_on_two_ranks, (2, port, str(folder), str(tmp_path)), nprocs=2)
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=5)
    single = TofuEvaluator(tok, TofuSource(str(folder / "data")).eval_splits(), max_new_tokens=4).run(net)
    for rank in range(2):
        summary, mia = torch.load(tmp_path / f"rank{rank}.pt")
        for key in ("mia/gradnorm_auc", "mia/min_k_plus_plus_auc", "forget/es", "forget/em", "forget_truth_ratio"):
            assert summary[key] == pytest.approx(single.summary[key], rel=1e-5), key
        np.testing.assert_allclose(mia["forget_nll"], single.per_item["mia"]["forget_nll"], rtol=1e-5)
        np.testing.assert_allclose(mia["holdout_nll"], single.per_item["mia"]["holdout_nll"], rtol=1e-5)


@pytest.mark.slow
@pytest.mark.extended  # covered in the main command by test_tofu_world.py::test_retain_only_model_cannot_tell_...
def test_generated_forget_and_holdout_authors_are_exchangeable_for_the_retain_only_model(tmp_path):
    """A model that saw neither the forget nor the holdout authors cannot tell them apart: its MIA AUCs between
    the two lie in [0.35, 0.65] (30 authors on each side, so one unlucky author cannot decide the AUC). The
    generated stand-in's property (`tofu-demo --generated`); the real-TOFU world's retain-only model is checked
    for the same property in the main command (tests/test_tofu_world.py)."""
    import warnings

    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.worlds.generated_tofu import _corpus, _finetune

    data = write_tofu_json(tmp_path / "data", n_authors=300, n_questions=2, seed=0)
    splits = generate_fictitious_tofu(n_authors=300, n_questions=2, seed=0)
    assert len(splits["holdout10"]) == len(splits["forget10"]) == 60
    train_bpe_tokenizer(_corpus(data), tmp_path / "tok", vocab_size=512)
    tok = load_tokenizer(str(tmp_path / "tok"))
    source = TofuSource(str(data), "10")
    keep = {r["question"] for r in source.load_split("retain90")}
    assert not keep & {r["question"] for r in splits["forget10"] + splits["holdout10"]}
    _finetune(tmp_path / "retrain", data, tok, ("retain90", "real_authors", "world_facts"), keep, 30, 3e-3, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = TofuEvaluator(tok, source.eval_splits(), gradnorm=False).run(
            CausalLM(name_or_path=str(tmp_path / "retrain")), only=["privleak"])
    for attack in ("loss", "zlib", "min_k", "min_k_plus_plus"):
        assert 0.35 <= report.summary[f"mia/{attack}_auc"] <= 0.65, (attack, report.summary)


def test_entropy_rank_and_learned_features_equal_token_loops(tofu):
    """The attacks no objective of ours trains on, and the learned attack's extra features, against the answer
    tokens' full distributions computed here token by token (numpy's population std, quantiles, rank by counting)."""
    splits, tok, net = tofu
    fmt = QAFormatter(tok)
    mia = TofuEvaluator(tok, splits, max_new_tokens=4, gradnorm=False).run(net, only=["membership"]).per_item["mia"]
    for i, r in enumerate(splits["forget"]):
        prompt, answer = _answer_tokens(tok, fmt, r["question"], r["answer"])
        logits, labels = _teacher_forced(net, prompt, answer)
        p = torch.softmax(logits, -1).numpy()
        entropy = -(p * np.log(p)).sum(-1)
        ranks = [int((p[t] > p[t, labels[t]]).sum()) for t in range(len(labels))]
        surprisal = -np.log(p[np.arange(len(labels)), labels.numpy()])
        assert mia["forget_entropy_mean"][i] == pytest.approx(entropy.mean(), abs=1e-5)
        assert mia["forget_entropy_spread"][i] == pytest.approx(entropy.std(), abs=1e-5)
        assert mia["forget_token_rank"][i] == pytest.approx(np.mean(np.log1p(ranks)), abs=1e-9)
        assert mia["forget_top1_share"][i] == pytest.approx(np.mean([k == 0 for k in ranks]))
        for q, key in ((0.1, "surprisal_q10"), (0.5, "surprisal_q50"), (0.9, "surprisal_q90")):
            assert mia[f"forget_{key}"][i] == pytest.approx(np.quantile(surprisal, q), abs=1e-5)
