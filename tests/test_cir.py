"""CIR (collapsing the shared directions out of the update) against written-out references: the collapsed gradient
with empty bases is autograd's weight gradient, with bases it is the gradient of projected inputs and output
gradients formed with explicit projection matrices, and one module step equals the update written out here."""

import copy

import pytest
import torch
import torch.nn.functional as F

from helpers import quick_trainer
from lit_unlearn.algorithms.cir import collapsed_weight_grad, project_out, shared_basis


def test_shared_basis_is_orthonormal_and_holds_the_mean_and_top_components():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 6, generator=g, dtype=torch.float64) @ torch.diag(torch.tensor([5.0, 3, 1, 1, 1, 1.0],
                                                                                        dtype=torch.float64)) + 2.0
    b = shared_basis(x, 2)
    torch.testing.assert_close(b @ b.T, torch.eye(3, dtype=torch.float64))
    mean = x.mean(0)
    assert float(project_out(mean[None], b).norm()) < 1e-9  # the mean direction is gone
    _, _, vh = torch.linalg.svd(x - mean, full_matrices=False)
    for v in vh[:2]:  # and the top two principal directions
        assert float(project_out(v[None], b).norm()) < 1e-9
    assert float(project_out(vh[3][None], b).norm()) > 0.5  # a lesser one mostly stays


def test_collapsed_gradient_is_autograds_with_no_basis_and_the_projected_one_otherwise():
    g = torch.Generator().manual_seed(1)
    layer = torch.nn.Linear(5, 4, bias=False).double()
    x = torch.randn(7, 5, generator=g, dtype=torch.float64, requires_grad=True)
    w_out = torch.randn(7, 4, generator=g, dtype=torch.float64)
    out = layer(x)
    out.retain_grad()
    (out * w_out).sum().backward()
    empty = torch.zeros(0, 5, dtype=torch.float64), torch.zeros(0, 4, dtype=torch.float64)
    torch.testing.assert_close(collapsed_weight_grad(x.detach(), out.grad, *empty), layer.weight.grad)
    bx, bg = shared_basis(torch.randn(30, 5, generator=g, dtype=torch.float64), 1), \
        shared_basis(torch.randn(30, 4, generator=g, dtype=torch.float64), 1)
    px, pg = torch.eye(5, dtype=torch.float64) - bx.T @ bx, torch.eye(4, dtype=torch.float64) - bg.T @ bg
    want = sum(torch.outer(pg @ out.grad[t], px @ x.detach()[t]) for t in range(7))
    torch.testing.assert_close(collapsed_weight_grad(x.detach(), out.grad, bx, bg), want)


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    from lit_unlearn.data import generate_fictitious_tofu, train_bpe_tokenizer, write_tofu_json

    root = tmp_path_factory.mktemp("cir")
    write_tofu_json(root / "data", n_authors=20, n_questions=4, seed=1)
    s = generate_fictitious_tofu(n_authors=20, n_questions=4, seed=1)
    tok = train_bpe_tokenizer([r["question"] + " " + r["answer"] for rows in s.values() for r in rows], root / "tok",
                              vocab_size=400)
    return root, tok


def _nll(net, b):
    logits = net(b["input_ids"], attention_mask=b["attention_mask"])[:, :-1].double()
    return F.cross_entropy(logits.transpose(1, 2), b["labels"][:, 1:], ignore_index=-100)


def test_one_cir_step_equals_the_update_written_out(assets, tmp_path, monkeypatch):
    """Two steps with basis_every=1: the first only measures (and makes the bases from its tokens), the second
    ascends the collapsed forget gradient at norm lr and descends the retain NLL; written out with hooks of our own
    and explicit projection matrices."""
    from lit_unlearn.data import TofuDataModule, TofuSource
    from lit_unlearn.models import CausalLM, tiny_llama_config
    from lit_unlearn.modules import CIRModule

    monkeypatch.chdir(tmp_path)
    root, tok = assets
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok), layers=2), seed=0)
    module = CIRModule(net, lr=0.05, retain_lr=0.01, components=2, basis_every=1)
    dm = TofuDataModule(TofuSource(str(root / "data")), tok, retain_batch_size=6, forget_batch_size=4)
    dm.setup("fit")
    batches = iter(dm.train_dataloader())
    (_, f1), (r2, f2) = next(batches), next(batches)
    start = copy.deepcopy(module.network)
    quick_trainer(1, limit_val_batches=0).fit(module, dm)
    after_first = copy.deepcopy(module.network)
    for (n, p0), p1 in zip(start.named_parameters(), after_first.parameters()):  # measuring only: retain step
        if not p0.requires_grad:
            assert torch.equal(p0, p1), n

    # written out: the tokens' inputs and output gradients of every MLP linear layer, from our own hooks
    def captured(model, batch):
        store, handles = {}, []
        for name, m in model.named_modules():
            if isinstance(m, torch.nn.Linear) and "mlp" in name:
                handles.append(m.register_forward_hook(lambda mod, a, o, name=name: store.__setitem__(name, [a[0], o])))
        loss = _nll(model, batch)
        outs = {k: v[1] for k, v in store.items()}
        for o in outs.values():
            o.retain_grad()
        loss.backward()
        for h in handles:
            h.remove()
        mask = batch["attention_mask"].bool()
        return {k: (store[k][0].detach()[mask].double(), outs[k].grad[mask].double()) for k in store}

    first = copy.deepcopy(start)
    for p in first.parameters():
        p.requires_grad_(True)
    measured = captured(first, f1)
    bases = {k: (shared_basis(x, 2), shared_basis(g, 2)) for k, (x, g) in measured.items()}
    model = copy.deepcopy(after_first)
    for p in model.parameters():
        p.requires_grad_(True)
    tokens = captured(model, f2)
    collapsed = {}
    for k, (x, g) in tokens.items():
        bx, bg = bases[k]
        px = torch.eye(x.shape[1], dtype=torch.float64) - bx.T @ bx
        pg = torch.eye(g.shape[1], dtype=torch.float64) - bg.T @ bg
        collapsed[k + ".weight"] = (g @ pg).T @ (x @ px)
    norm = torch.sqrt(sum((c ** 2).sum() for c in collapsed.values()))
    retain_model = copy.deepcopy(after_first)
    names = [n for n, p in retain_model.named_parameters() if n in collapsed]
    grads_r = dict(zip(names, torch.autograd.grad(_nll(retain_model, r2),
                                                  [dict(retain_model.named_parameters())[n] for n in names])))
    module2 = CIRModule(copy.deepcopy(start), lr=0.05, retain_lr=0.01, components=2, basis_every=1)
    quick_trainer(2, limit_val_batches=0).fit(module2, dm)
    for n, p in module2.network.named_parameters():
        p0 = dict(after_first.named_parameters())[n]
        if n in collapsed:
            want = p0.double() + 0.05 * collapsed[n] / norm - 0.01 * grads_r[n].double()
            torch.testing.assert_close(p.double(), want, rtol=1e-4, atol=1e-6, msg=n)
        else:
            assert torch.equal(p, p0), n
    assert len(collapsed) == 6  # gate, up and down of both layers
