"""RMU, SimNPO and IdkDPO on a tiny Llama: each one-step update equals SGD on the objective written out here
independently (plain torch ops, not lit_unlearn's loss functions), the refusals reach the batches, and the
knobs fail with clear messages."""

import copy
import re

import pytest
import torch
import torch.nn.functional as F

from helpers import quick_trainer
from lit_unlearn.data import TofuDataModule, TofuSource, generate_fictitious_tofu, train_bpe_tokenizer, write_tofu_json
from lit_unlearn.data.refusals import generate_refusals, load_refusals
from lit_unlearn.core.errors import UserError
from lit_unlearn.models import CausalLM, tiny_llama_config
from lit_unlearn.modules import IdkDPOModule, RMUModule, SimNPOModule

LR = 0.05


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("llm")
    write_tofu_json(root / "data", n_authors=20, n_questions=4, seed=1)
    s = generate_fictitious_tofu(n_authors=20, n_questions=4, seed=1)
    texts = [r["question"] + " " + r["answer"] for rows in s.values() for r in rows] + generate_refusals()
    tok = train_bpe_tokenizer(texts, root / "tok", vocab_size=400)
    return root, tok


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def _net(tok, seed=0):
    return CausalLM(config=tiny_llama_config(vocab_size=len(tok), layers=3), seed=seed)


def _dm(root, tok, **kw):
    dm = TofuDataModule(TofuSource(str(root / "data")), tok, retain_batch_size=6, forget_batch_size=4, **kw)
    dm.setup("fit")
    return dm


def _first_pair(dm):
    return next(iter(dm.train_dataloader()))


# ----- the objectives, written out -------------------------------------------------------------------------------
def _token_logps(net, ids, mask, labels):
    """Per example: summed log p of the answer tokens and their number (next-token shift done here)."""
    logits = net(ids, attention_mask=mask)[:, :-1].double()
    target = labels[:, 1:]
    keep = target != -100
    lp = torch.log_softmax(logits, -1).gather(-1, target.clamp_min(0)[..., None])[..., 0]
    return (lp * keep).sum(-1), keep.sum(-1)


def _retain_nll(net, b):
    logits = net(b["input_ids"], attention_mask=b["attention_mask"])[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), b["labels"][:, 1:].reshape(-1),
                           ignore_index=-100)


def _simnpo(cur, ref, r, f, beta=4.5, delta=0.0, gamma=0.125, alpha=1.0):
    lp, n = _token_logps(cur, f["input_ids"], f["attention_mask"], f["labels"])
    term = -(2 / beta) * F.logsigmoid(beta * (-lp / n - delta)).mean()
    return gamma * term + alpha * _retain_nll(cur, r)


def _idkdpo(cur, ref, r, f, beta=0.1):
    def ratio(ids, mask, labels):
        with torch.no_grad():
            ref_lp, _ = _token_logps(ref, ids, mask, labels)
        return _token_logps(cur, ids, mask, labels)[0] - ref_lp

    win = ratio(f["alt_input_ids"], f["alt_attention_mask"], f["alt_labels"])
    lose = ratio(f["input_ids"], f["attention_mask"], f["labels"])
    return -(2 / beta) * F.logsigmoid(beta * (win - lose)).mean() + _retain_nll(cur, r)


def _layer_output(net, b, layer):
    out = {}
    h = net.model.model.layers[layer].register_forward_hook(lambda m, i, o: out.setdefault("h", o[0] if isinstance(o, tuple) else o))
    net(b["input_ids"], attention_mask=b["attention_mask"])
    h.remove()
    return out["h"].double()


def _rmu(cur, ref, r, f, layer=1, c=6.5, alpha=3.0, gamma=1.0, seed=0):
    d = cur.model.config.hidden_size
    u = torch.rand(d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    control = c * u / torch.linalg.vector_norm(u)

    def masked_mse(h, target, labels):
        m = (labels != -100).double()
        per_token = ((h - target) ** 2).mean(-1)
        return ((per_token * m).sum(-1) / m.sum(-1)).mean()

    forget = masked_mse(_layer_output(cur, f, layer), control, f["labels"])
    with torch.no_grad():
        ref_h = _layer_output(ref, r, layer)
    retain = masked_mse(_layer_output(cur, r, layer), ref_h, r["labels"])
    return gamma * forget + alpha * retain


CASES = {
    "SimNPO": (lambda net: SimNPOModule(net, lr=LR, optimizer="sgd", weight_decay=0.0), _simnpo, {}),
    "IdkDPO": (lambda net: IdkDPOModule(net, lr=LR / 10, optimizer="sgd", weight_decay=0.0), _idkdpo,
               {"alternate_answers": "generated"}),
    "RMU": (lambda net: RMUModule(net, lr=LR, layer=1, steering=6.5, retain_weight=3.0, optimizer="sgd"), _rmu, {}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_one_step_equals_sgd_on_the_objective_written_out(assets, name):
    root, tok = assets
    make, objective, data_kw = CASES[name]
    lr = LR / 10 if name == "IdkDPO" else LR  # summed answer log-probabilities: larger gradients
    net = _net(tok)
    module = make(net)
    reference = copy.deepcopy(net)  # the target weights, which the module's reference copied
    with torch.no_grad():  # move away from the reference so that the reference terms have gradients
        g = torch.Generator().manual_seed(1)
        for p in module.network.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g))
    start = copy.deepcopy(module.network)
    dm = _dm(root, tok, **data_kw)
    retain, forget = _first_pair(dm)
    quick_trainer(1, limit_val_batches=0).fit(module, dm)

    loss = objective(start, reference, retain, forget)
    params = [p for p in start.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params)
    moved = 0
    for (n, p0), p1 in zip(start.named_parameters(), module.network.parameters()):
        expected = dict(zip([id(p) for p in params], grads)).get(id(p0))
        step = (p1 - p0).detach()
        if expected is None:  # frozen by the method (RMU): must not move
            assert torch.equal(step, torch.zeros_like(step)), n
            continue
        torch.testing.assert_close(step.double(), -lr * expected.double(), rtol=2e-3, atol=1e-7, msg=n)
        moved += bool(expected.abs().max() > 0)
    assert moved > 0
    with torch.no_grad():
        assert objective(module.network, reference, retain, forget) < loss


def test_rmu_trains_only_the_down_projections_up_to_its_layer(assets):
    _, tok = assets
    module = RMUModule(_net(tok), layer=2)
    trainable = {n for n, p in module.network.named_parameters() if p.requires_grad}
    assert trainable == {f"model.model.layers.{i}.mlp.down_proj.weight" for i in (0, 1, 2)}
    everything = RMUModule(_net(tok), layer=1, trainable=".*")
    names = [n for n, p in everything.network.named_parameters() if p.requires_grad]
    assert any("embed" in n for n in names) and not any(re.search(r"layers\.2\.|lm_head|model\.norm", n) for n in names)
    with pytest.raises(UserError, match=r"layer=7, but the model has 3 decoder layers"):
        RMUModule(_net(tok))
    with pytest.raises(UserError, match="matches no parameter"):
        RMUModule(_net(tok), layer=1, trainable="nothing_like_this")
    with pytest.raises(UserError, match="matches 3 modules"):
        RMUModule(_net(tok), module_regex=r"layers\.\d+$")


def test_refusals_reach_every_forget_item_and_user_files_are_read(assets, tmp_path):
    root, tok = assets
    dm = _dm(root, tok, alternate_answers="generated")
    retain, forget = _first_pair(dm)
    assert "alt_input_ids" not in retain
    assert forget["alt_input_ids"].shape == forget["alt_labels"].shape == forget["alt_attention_mask"].shape
    answers = [tok.decode(ids[labels != -100], skip_special_tokens=True).strip()
               for ids, labels in zip(forget["alt_input_ids"], forget["alt_labels"])]
    assert all(a in generate_refusals() for a in answers)
    again = _first_pair(_dm(root, tok, alternate_answers="generated"))[1]
    assert torch.equal(again["alt_input_ids"], forget["alt_input_ids"])  # fixed per item: resume-safe

    f = tmp_path / "idk.jsonl"
    f.write_text('"I do not know."\n{"answer": "No idea, sorry."}\nplain text line\n\n')
    assert load_refusals(f) == ["I do not know.", "No idea, sorry.", "plain text line"]
    with pytest.raises(UserError, match="not found"):
        _dm(root, tok, alternate_answers=str(tmp_path / "missing.txt"))
    module = IdkDPOModule(_net(tok))
    with pytest.raises(UserError, match="alternate_answers"):
        module.objective(*_first_pair(_dm(root, tok)))
