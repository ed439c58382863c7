"""HAMU over other forget objectives (`forget_objective`): one step of the module against the same step written out
here with plain torch (the objective's gain, autograd's g_r and g_f, then hamu_step's closed form)."""

import copy

import numpy as np
import pytest
import torch
from helpers import quick_trainer, tiny_tofu
from lightning.pytorch.callbacks import Callback

from lit_unlearn.algorithms import hamu_step
from lit_unlearn.data import TofuDataModule, TofuSource
from lit_unlearn.core.errors import UserError
from lit_unlearn.models import CausalLM, tiny_llama_config
from lit_unlearn.modules import HAMUModule
from lit_unlearn.core.plug_points import HoldoutProfileSource

GRID_S = np.linspace(0.5, 9.0, 21)   # a holdout profile given by its quantiles (surprisal), fixed for the test
GRID_Z = np.linspace(-3.0, 1.0, 21)  # and Min-K %++'s z


@pytest.fixture(scope="module")
def tofu(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tofu")
    _, tok = tiny_tofu(folder, seed=1)
    return folder, tok


class FixedProfile(Callback, HoldoutProfileSource):
    def holdout_token_profile(self, trainer=None, pl_module=None):
        return {"surprisal": GRID_S.tolist(), "z": GRID_Z.tolist()}


def _pair(folder, tok):
    dm = TofuDataModule(TofuSource(str(folder / "data")), tok, retain_batch_size=8, forget_batch_size=4)
    dm.setup("fit")
    return dm, *next(iter(dm.train_dataloader()))


def _items(net, batch):
    """Per item: its answer positions' log-softmax rows and target ids (shifted, prompt and padding dropped)."""
    logits = net(batch["input_ids"], attention_mask=batch["attention_mask"])[:, :-1]
    labels = batch["labels"][:, 1:]
    out = []
    for i in range(labels.shape[0]):
        keep = labels[i] != -100
        out.append((torch.log_softmax(logits[i][keep].double(), -1), labels[i][keep]))
    return out


def _npo_gain(net, reference, batch, beta):
    """(1/B) Σ_i (2/β)·log σ(−β·(log p_θ(y_i) − log p_ref(y_i))), the sums over each answer's tokens."""
    terms = []
    with torch.no_grad():
        ref = [lp.gather(-1, y[:, None]).sum() for lp, y in _items(reference, batch)]
    for (lp, y), r in zip(_items(net, batch), ref):
        ratio = lp.gather(-1, y[:, None]).sum() - r
        terms.append((2.0 / beta) * torch.nn.functional.logsigmoid(-beta * ratio))
    return torch.stack(terms).mean()


def _w1_to_grid(values, grid):
    """mean_k |v_(k) − Q((k − ½)/n)|, Q interpolated linearly in the grid (numpy, not the project's helper)."""
    v = torch.sort(values).values
    n = v.numel()
    levels = (np.arange(n) + 0.5) / n
    q = np.interp(levels * (len(grid) - 1), np.arange(len(grid)), grid)
    return (v - torch.as_tensor(q, dtype=v.dtype)).abs().mean()


def _profile_gain(net, batch, z_weight):
    terms = []
    for lp, y in _items(net, batch):
        picked = lp.gather(-1, y[:, None]).squeeze(-1)
        p = lp.exp()
        mu = (p * lp).sum(-1)
        var = (p * (lp - mu[:, None]) ** 2).sum(-1)
        z = (picked - mu) / torch.sqrt(var.clamp_min(0) + 1e-8)
        terms.append(-(_w1_to_grid(-picked, GRID_S) + z_weight * _w1_to_grid(z, GRID_Z)))
    return torch.stack(terms).mean()


@pytest.mark.parametrize("objective", ["npo", "holdout_match"])
def test_one_step_over_another_forget_objective_is_the_closed_form_on_its_gain(tofu, objective):
    folder, tok = tofu
    torch.manual_seed(0)
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)))
    module = HAMUModule(net, eta=0.05, quota=0.01, grouping="global", forget_objective=objective, npo_beta=0.5,
                        profile_z_weight=0.7)
    reference = copy.deepcopy(net)  # what "npo" compares with: the model as given
    with torch.no_grad():  # move off the reference, so that NPO's weights 2σ(β·log-ratio) are not all 1
        for p in module.network.parameters():
            p.add_(0.02 * torch.randn_like(p))
    start = copy.deepcopy(module.network)
    dm, retain, forget = _pair(folder, tok)
    quick_trainer(1, limit_val_batches=0, callbacks=[FixedProfile()]).fit(module, dm)

    params = list(start.parameters())
    logits = start(retain["input_ids"], attention_mask=retain["attention_mask"])[:, :-1]
    loss_r = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                               retain["labels"][:, 1:].reshape(-1))
    gain = _npo_gain(start, reference, forget, 0.5) if objective == "npo" else _profile_gain(start, forget, 0.7)
    gr = torch.autograd.grad(loss_r, params)
    gf = torch.autograd.grad(gain, params)
    dot = lambda a, b: sum((x.double() * y.double()).sum() for x, y in zip(a, b)).reshape(1)  # noqa: E731
    step = hamu_step(dot(gr, gr), dot(gf, gf), dot(gr, gf), eta=0.05, quota=0.01)
    moved = 0.0
    for p0, p1, a, b in zip(params, module.network.parameters(), gf, gr):
        expected = (step.coef_f[0] * a + step.coef_r[0] * b).float()
        torch.testing.assert_close(p1.detach() - p0.detach(), expected, rtol=1e-3, atol=1e-7)
        moved += float(expected.abs().sum())
    assert moved > 0
    with torch.no_grad():  # the gain the module reports is the written-out one, at the weights after the step
        after = _npo_gain(module.network, reference, forget, 0.5) if objective == "npo" else \
            _profile_gain(module.network, forget, 0.7)
        module._profile_source = FixedProfile()
        assert module.forget_loss(forget).item() == pytest.approx(after.item(), rel=1e-4, abs=1e-6)
    assert module.reads_statistics == ({"surprisal"} if objective == "npo" else {"surprisal", "standardised_logprob"})


def test_forget_objective_errors_are_one_line(tofu):
    folder, tok = tofu
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)))
    with pytest.raises(UserError, match="choose one of"):
        HAMUModule(net, forget_objective="kl")
    with pytest.raises(UserError, match="shape the NLL objective"):
        HAMUModule(net, forget_objective="npo", forget_ceiling=3.0)
    module = HAMUModule(net, forget_objective="holdout_match")
    dm, _, _ = _pair(folder, tok)
    with pytest.raises(UserError, match="needs the holdout items.* profile .*HoldoutVerification") as err:
        quick_trainer(1, limit_val_batches=0).fit(module, dm)
    assert "\n" not in str(err.value)
