"""TOFU and membership-inference metrics against independent computations on hand-built inputs."""

import math
import zlib

import numpy as np
import pytest
import scipy.stats
import torch

from lit_unlearn.metrics import AnswerProbability, ForgetQuality, MembershipAUC, NormalisedProbability, TruthRatio
from lit_unlearn.metrics.tofu import formulas as tofu_math

NLL_CORRECT = torch.tensor([0.2, 1.5, 0.7, 3.0], dtype=torch.float64)
NLL_PERTURBED = torch.tensor([[1.0, 2.0, 0.5], [0.3, 0.4, 0.9], [2.0, 2.0, 2.0], [0.1, 5.0, 1.0]], dtype=torch.float64)


def _tr_by_hand():
    out = []
    for c, row in zip(NLL_CORRECT.tolist(), NLL_PERTURBED.tolist()):
        p_correct = math.exp(-c)
        p_wrong = math.prod(math.exp(-x) for x in row) ** (1 / len(row))  # geometric mean
        out.append(p_wrong / p_correct)
    return np.array(out)


def test_truth_ratio_and_its_two_aggregations():
    tr = _tr_by_hand()
    m = TruthRatio("forget")
    m.update(NLL_CORRECT[:2], NLL_PERTURBED[:2])
    m.update(NLL_CORRECT[2:], NLL_PERTURBED[2:])  # two batches: states accumulate
    np.testing.assert_allclose(m.per_item().numpy(), tr, rtol=1e-12)
    assert m.compute().item() == pytest.approx(np.mean(np.minimum(tr, 1 / tr)))
    t = TruthRatio("true")
    t.update(NLL_CORRECT, NLL_PERTURBED)
    assert t.compute().item() == pytest.approx(np.mean(np.maximum(0, 1 - tr)))


def test_probabilities():
    p = AnswerProbability()
    p.update(NLL_CORRECT)
    assert p.compute().item() == pytest.approx(np.mean(np.exp(-NLL_CORRECT.numpy())))
    n = NormalisedProbability()
    n.update(NLL_CORRECT, NLL_PERTURBED)
    pt, pw = np.exp(-NLL_CORRECT.numpy()), np.exp(-NLL_PERTURBED.numpy()).sum(1)
    assert n.compute().item() == pytest.approx(np.mean(pt / (pt + pw)))


def test_forget_quality_is_the_ks_p_value_against_the_reference():
    rng = np.random.default_rng(0)
    ref = rng.lognormal(0.0, 0.5, size=40).tolist()
    fq = ForgetQuality(ref)
    fq.update(NLL_CORRECT, NLL_PERTURBED)
    assert fq.compute().item() == pytest.approx(scipy.stats.ks_2samp(_tr_by_hand(), ref).pvalue)
    with pytest.raises(ValueError, match="retrained"):
        ForgetQuality([])


def test_model_utility_is_the_harmonic_mean_of_nine_values():
    values = {k: 0.1 * (i + 1) for i, k in enumerate(tofu_math.MODEL_UTILITY_KEYS)}
    assert tofu_math.model_utility(values) == pytest.approx(9 / sum(1 / v for v in values.values()))
    assert tofu_math.model_utility({**values, "retain/rouge": 0.0}) == 0.0
    with pytest.raises(KeyError):
        tofu_math.model_utility({"retain/prob": 1.0})


def test_rouge_l_recall_by_hand():
    # LCS("the cat sat", "the cat sat on the mat") = 3 tokens, reference length 6 → recall 0.5; stemming
    # makes "cats"/"cat" match.
    got = tofu_math.rouge_l_recall(["the cat sat", "cats running", "nothing alike"],
                                   ["the cat sat on the mat", "cat run", "completely different words"])
    assert got == pytest.approx([0.5, 1.0, 0.0])


def test_membership_scores_by_brute_force():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(7, 11, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 11, (7,), generator=g)
    logp = torch.log_softmax(logits, -1)
    token_lp = logp[torch.arange(7), labels]
    lowest = sorted(token_lp.tolist())[:math.ceil(0.4 * 7)]
    assert tofu_math.min_k_score(token_lp, 0.4) == pytest.approx(-np.mean(lowest))
    # Min-K%++ with the vocabulary mean/std written out per position.
    p = np.exp(logp.numpy())
    z = []
    for t in range(7):
        mu = (p[t] * logp[t].numpy()).sum()
        sd = math.sqrt((p[t] * logp[t].numpy() ** 2).sum() - mu**2)
        z.append((token_lp[t].item() - mu) / sd)
    assert tofu_math.min_k_plus_plus_score(token_lp, logits, 0.4) == pytest.approx(-np.mean(sorted(z)[:3]))
    assert tofu_math.zlib_score(2.0, "abcabc") == pytest.approx(2.0 / len(zlib.compress(b"abcabc")))


def test_auc_counts_pairs():
    forget, holdout = [0.1, 0.5, 0.9, 0.3], [0.4, 0.8, 1.2]
    pairs = sum((h > f) + 0.5 * (h == f) for f in forget for h in holdout) / (len(forget) * len(holdout))
    m = MembershipAUC()
    m.update(torch.tensor(forget), is_holdout=False)
    m.update(torch.tensor(holdout), is_holdout=True)
    assert m.compute().item() == pytest.approx(pairs)
    assert tofu_math.privleak(0.75, 0.5) == pytest.approx(((1 - 0.75) - 0.5) / 0.5 * 100)


def _two_rank_worker(rank, world, port, out):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    tr, auc = TruthRatio("forget"), MembershipAUC()
    tr.update(NLL_CORRECT[rank::world], NLL_PERTURBED[rank::world])
    auc.update(NLL_CORRECT[rank::world], is_holdout=False)
    auc.update(NLL_PERTURBED[rank::world, 0], is_holdout=True)
    values = (tr.compute().item(), auc.compute().item(), sorted(tr.per_item().tolist()))
    torch.save(values, f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.slow
def test_metrics_are_the_same_over_two_processes(tmp_path, spawn):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spawn(_two_rank_worker, (2, port, str(tmp_path)), nprocs=2)
    single_tr, single_auc = TruthRatio("forget"), MembershipAUC()
    single_tr.update(NLL_CORRECT, NLL_PERTURBED)
    single_auc.update(NLL_CORRECT, is_holdout=False)
    single_auc.update(NLL_PERTURBED[:, 0], is_holdout=True)
    for rank in range(2):
        tr, auc, items = torch.load(tmp_path / f"rank{rank}.pt")
        assert tr == pytest.approx(single_tr.compute().item())
        assert auc == pytest.approx(single_auc.compute().item())
        assert items == pytest.approx(sorted(single_tr.per_item().tolist()))  # every rank sees all items
