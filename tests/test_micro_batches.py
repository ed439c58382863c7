"""Gradient accumulation: a process's share split into equal micro-batches gives the step the whole share gives.

Every method whose losses are normalised by the whole batch (compute_loss's token mean, item_count's item mean) or
are means over each part's equal number of items (NPO, SimNPO, DPO) must take the same step from the same start
with and without `micro_batch_size`; the methods that cannot split a step say so in one line.
"""

import copy

import pytest
import torch

from helpers import assert_same_update, quick_trainer, tiny_tofu
from lit_unlearn.algorithms.losses import IGNORE_INDEX, mean_nll
from lit_unlearn.core.batches import logits_and_labels
from lit_unlearn.core.errors import UserError
from lit_unlearn.data import TofuDataModule, TofuSource
from lit_unlearn.data.micro_batches import micro_batch_parts, share_of, split_batch
from lit_unlearn.data.refusals import generate_refusals
from lit_unlearn.models import CausalLM, tiny_llama_config
from lit_unlearn.modules import (CIRModule, FTModule, GAModule, GradDiffModule, HAMUModule, IdkDPOModule, NPOModule,
                                 OFMUModule, SimNPOModule)

RETAIN, FORGET, MICRO = 8, 4, 2  # 4 parts: 2 retain + 1 forget items each


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("micro")
    return root, tiny_tofu(root, seed=3, extra_texts=generate_refusals())[1]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def _dm(assets, micro, **kw):
    root, tok = assets
    return TofuDataModule(TofuSource(str(root / "data")), tok, retain_batch_size=RETAIN, forget_batch_size=FORGET,
                          eval_items=4, micro_batch_size=micro, **kw)


def _net(assets, dtype="float32"):
    net = CausalLM(config=tiny_llama_config(vocab_size=len(assets[1]), layers=2), seed=0)
    return net.double() if dtype == "float64" else net


def _fit(assets, make, micro, steps=2, dtype="float32", **data_kw):
    module = make(_net(assets, dtype))
    start = copy.deepcopy(module.network.state_dict())
    quick_trainer(steps, limit_val_batches=0).fit(module, _dm(assets, micro, **data_kw))
    return start, module


CASES = {
    "GradDiff": lambda net: GradDiffModule(net, lr=0.05),
    "GA": lambda net: GAModule(net, lr=0.05),
    "FT": lambda net: FTModule(net, lr=0.05),
    "NPO": lambda net: NPOModule(net, lr=0.05),
    "SimNPO": lambda net: SimNPOModule(net, lr=0.05, optimizer="sgd", weight_decay=0.0),
    "HAMU": lambda net: HAMUModule(net, eta=0.05, quota=0.01),
    "HAMU, forget ceiling": lambda net: HAMUModule(net, eta=0.05, quota=0.01, forget_ceiling=3.0),
    "HAMU, NPO objective": lambda net: HAMUModule(net, eta=0.05, quota=0.01, forget_objective="npo"),
    "OFMU, finite differences": lambda net: OFMUModule(net, inner_steps=2, inner_lr=0.01, outer_lr=0.05, rho=0.1,
                                                       hvp="finite_difference"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_micro_batches_take_the_step_the_whole_share_takes(assets, name):
    if name.startswith("OFMU"):
        # Its finite differences divide rounding (the parts' sums run in another order) by fd_step, and the inner
        # ascent grows what is left: ~3e-3 apart after one round in float32. In float64, one round tests the
        # accumulation itself (4e-12 apart when written); a second round already differs by 4e-4 (the rounding of
        # the first, grown through the second's inner steps), so one round is compared.
        start, whole = _fit(assets, CASES[name], micro=None, steps=1, dtype="float64")
        _, parts = _fit(assets, CASES[name], micro=MICRO, steps=1, dtype="float64")
        tol = 1e-8
    else:
        start, whole = _fit(assets, CASES[name], micro=None)
        _, parts = _fit(assets, CASES[name], micro=MICRO)
        tol = 2e-4
    assert parts.micro_parts == 4 and whole.micro_parts == 1
    compared, moved = assert_same_update(whole.network.state_dict(), parts.network.state_dict(), start, tol=tol)
    assert moved > 0 and moved == compared


def test_idkdpo_with_its_refusals_splits_too(assets):
    make = lambda net: IdkDPOModule(net, lr=0.005, optimizer="sgd", weight_decay=0.0)  # noqa: E731
    start, whole = _fit(assets, make, micro=None, steps=1, alternate_answers="generated")
    _, parts = _fit(assets, make, micro=MICRO, steps=1, alternate_answers="generated")
    compared, moved = assert_same_update(whole.network.state_dict(), parts.network.state_dict(), start, tol=2e-4)
    assert moved > 0


def test_the_token_mean_weights_each_part_by_its_tokens(assets):
    """The parts' answer lengths differ, so a plain mean of their token means is not the share's token mean: the
    normaliser that reads the whole share's count is what makes the equivalence above hold."""
    dm = _dm(assets, None)
    dm.setup("fit")
    retain, _ = next(iter(dm.train_dataloader()))
    net = _net(assets)
    module = GradDiffModule(net)
    with torch.no_grad():
        whole = module.compute_loss(retain)
        chunks = split_batch(retain, 4)
        weighted = sum(module.compute_loss(c) for c in chunks) / 4
        plain = sum(mean_nll(*logits_and_labels(net, c)) for c in chunks) / 4
    tokens = [int((c["labels"][:, 1:] != IGNORE_INDEX).sum()) for c in chunks]
    assert len(set(tokens)) > 1 and share_of(chunks[0]).tokens == sum(tokens)
    torch.testing.assert_close(weighted, whole, rtol=1e-6, atol=0)
    assert abs(float(plain - whole)) > 1e-4 * float(whole)


def test_shares_that_do_not_split_evenly_are_refused_in_one_line():
    assert micro_batch_parts(8, 4, None) == 1 and micro_batch_parts(8, 4, 8) == 1 and micro_batch_parts(8, 4, 2) == 4
    with pytest.raises(UserError, match=r"forget share \(6 items\) does not split into 4 equal micro-batches") as err:
        micro_batch_parts(8, 6, 2)
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="micro_batch_size must be ≥ 1"):
        micro_batch_parts(8, 4, 0)


@pytest.mark.parametrize("make, fix", [
    (lambda net: CIRModule(net), "hooks rebuild the forget gradients"),
    (lambda net: OFMUModule(net, inner_steps=1, hvp="autograd"), "use hvp='finite_difference'"),
])
def test_methods_that_cannot_split_a_step_say_what_to_do(assets, make, fix):
    with pytest.raises(UserError, match=fix) as err:
        _fit(assets, make, micro=MICRO, steps=1)
    assert "micro_batch_size to null" in str(err.value) and "\n" not in str(err.value)
