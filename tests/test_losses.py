"""The baselines' loss pieces against independent computations (torch's own ops, scipy, explicit loops)."""

import numpy as np
import pytest
import scipy.special
import scipy.stats
import torch
import torch.nn.functional as F

from lit_unlearn.algorithms.losses import (
    IGNORE_INDEX,
    kl_to_reference,
    mean_nll,
    npo_loss,
    sequence_logprob,
)


def _lm_batch(seed=0, b=3, t=5, v=7):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=g, dtype=torch.float64)
    labels = torch.randint(0, v, (b, t), generator=g)
    labels[0, :2] = IGNORE_INDEX  # a prompt
    labels[2, -1] = IGNORE_INDEX  # padding
    return logits, labels


def test_mean_nll_is_cross_entropy_for_classifiers_and_token_mean_for_lms():
    logits = torch.randn(6, 4, dtype=torch.float64)
    labels = torch.tensor([0, 1, 2, 3, 1, 0])
    torch.testing.assert_close(mean_nll(logits, labels), F.cross_entropy(logits, labels))
    lm_logits, lm_labels = _lm_batch()
    logp = scipy.special.log_softmax(lm_logits.numpy(), axis=-1)
    terms = [-logp[i, j, lm_labels[i, j]] for i in range(3) for j in range(5) if lm_labels[i, j] != IGNORE_INDEX]
    assert mean_nll(lm_logits, lm_labels).item() == pytest.approx(np.mean(terms), rel=1e-6)


def test_sequence_logprob_sums_target_logprobs_per_example():
    logits, labels = _lm_batch(1)
    logp = scipy.special.log_softmax(logits.numpy(), axis=-1)
    expected = [sum(logp[i, j, labels[i, j]] for j in range(5) if labels[i, j] != IGNORE_INDEX) for i in range(3)]
    np.testing.assert_allclose(sequence_logprob(logits, labels).numpy(), expected, rtol=1e-6)


def test_kl_to_reference_is_kl_of_reference_from_current():
    logits, labels = _lm_batch(2)
    ref = logits + torch.randn_like(logits)
    p_ref = scipy.special.softmax(ref.numpy(), axis=-1)
    p_cur = scipy.special.softmax(logits.numpy(), axis=-1)
    per_pos = [scipy.stats.entropy(p_ref[i, j], p_cur[i, j]) for i in range(3) for j in range(5)
               if labels[i, j] != IGNORE_INDEX]
    assert kl_to_reference(logits, ref, labels).item() == pytest.approx(np.mean(per_pos), rel=1e-6)
    assert kl_to_reference(ref, ref, labels).item() == pytest.approx(0.0, abs=1e-12)


def test_npo_gradient_is_ga_reweighted_by_the_log_ratio():
    beta = 0.7
    logp = torch.tensor([-0.3, -2.0, -5.0], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([-0.5, -0.5, -0.5], dtype=torch.float64)
    (grad,) = torch.autograd.grad(npo_loss(logp, ref, beta), logp)
    # d/dlogp_i of −(2/β)·mean log σ(−β r) = (2/B)·σ(β r_i): a descent step lowers log p, less so once forgotten.
    expected = 2 / 3 * scipy.special.expit(beta * (logp.detach() - ref).numpy())
    np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-10)
    assert grad[0] > grad[1] > grad[2] > 0


def test_shape_and_empty_target_errors_say_what_is_wrong():
    with pytest.raises(ValueError, match="disagree"):
        mean_nll(torch.randn(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="no position"):
        mean_nll(torch.randn(2, 5), torch.full((2,), IGNORE_INDEX))
    with pytest.raises(ValueError, match="beta"):
        npo_loss(torch.zeros(2), torch.zeros(2), beta=0.0)
