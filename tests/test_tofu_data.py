"""TOFU-format data: the generator, local loading, QA formatting (loss on answer tokens only), the causal-LM
wrapper, the evaluator's per-item numbers against a direct computation, and one HAMU step on a tiny Llama."""

import copy
import json
import math

import pytest
import torch

from helpers import quick_trainer, tiny_tofu
from lit_unlearn.algorithms import hamu_step
from lit_unlearn.algorithms.losses import IGNORE_INDEX
from lit_unlearn.data import (
    QAFormatter,
    TofuDataModule,
    TofuSource,
    WaterDrumSource,
    generate_fictitious_tofu,
    pad_collate,
)
from lit_unlearn.metrics import TofuEvaluator
from lit_unlearn.models import CausalLM, tiny_llama_config
from lit_unlearn.modules import HAMUModule


@pytest.fixture(scope="module")
def tofu(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tofu")
    splits, tok = tiny_tofu(folder, seed=1)
    return folder, splits, tok


def test_generator_follows_tofu_layout(tofu):
    _, s, _ = tofu
    assert len(s["full"]) == 80 and len(s["forget10"]) == 8 and len(s["retain90"]) == 72
    assert s["forget10"] == s["full"][-8:]  # TOFU's forget sets are the last authors
    assert {r["question"] for r in s["forget05"]} <= {r["question"] for r in s["forget10"]}
    full_q = {r["question"] for r in s["full"]}
    assert not {r["question"] for r in s["holdout10"]} & full_q
    for r in s["forget10_perturbed"]:
        assert len(r["perturbed_answer"]) == 5 and r["answer"] not in r["perturbed_answer"]
        assert r["paraphrased_answer"] != r["answer"]
    assert all(len(r["perturbed_answer"]) == 3 for r in s["world_facts_perturbed"])
    assert {r["question"] for r in s["retain_perturbed"]} <= {r["question"] for r in s["retain90"]}
    assert generate_fictitious_tofu(n_authors=20, n_questions=4, seed=1) == s  # a pure function of the seed


def test_local_sources_read_json_jsonl_parquet_and_name_what_is_missing(tofu, tmp_path):
    folder, s, _ = tofu
    src = TofuSource(str(folder / "data"))
    forget, retain = src.forget_retain()
    assert forget == s["forget10"] and retain == s["retain90"]
    assert set(src.eval_splits()) == {"forget", "retain", "real_authors", "world_facts", "holdout"}
    import pandas as pd

    (tmp_path / "forget05.jsonl").write_text("\n".join(json.dumps(r) for r in s["forget05"]))
    pd.DataFrame(s["retain95"]).to_parquet(tmp_path / "retain95.parquet")
    assert TofuSource(str(tmp_path), "05").forget_retain() == (s["forget05"], s["retain95"])
    with pytest.raises(FileNotFoundError, match="forget10"):
        TofuSource(str(tmp_path)).forget_retain()
    with pytest.raises(ValueError, match="forget_level"):
        TofuSource(str(tmp_path), "20")
    (tmp_path / "forget_10").mkdir()
    (tmp_path / "forget_10" / "forget.json").write_text(json.dumps(s["forget10"]))
    (tmp_path / "forget_10" / "retain.json").write_text(json.dumps(s["retain90"]))
    assert WaterDrumSource(str(tmp_path)).forget_retain() == (s["forget10"], s["retain90"])
    duplicates = [{"question": "q?", "answer": "a."}]
    (tmp_path / "forget_10" / "semantic_duplicate.json").write_text(json.dumps(duplicates))
    hard = WaterDrumSource(str(tmp_path), retain_duplicates=True)
    assert hard.forget_retain() == (s["forget10"], s["retain90"] + duplicates)
    assert hard.eval_splits()["retain"] == s["retain90"]  # what is evaluated does not change
    with pytest.raises(ValueError, match="forget_10 only"):
        WaterDrumSource(str(tmp_path), "05", retain_duplicates=True)


def test_retain_duplicates_add_each_forget_items_paraphrase_to_the_retain_set_only(tofu):
    """TOFU's semantic duplicates (the HAMU paper's hard case): the retain set gains, per forget item, its
    paraphrased question and answer; the forget set and the evaluation splits stay as they were."""
    folder, s, _ = tofu
    plain, hard = TofuSource(str(folder / "data")), TofuSource(str(folder / "data"), retain_duplicates=True)
    forget, retain = hard.forget_retain()
    assert forget == s["forget10"] and retain[:len(s["retain90"])] == s["retain90"]
    added = retain[len(s["retain90"]):]
    assert len(added) == len(s["forget10"])
    assert added == [{"question": r["paraphrased_question"], "answer": r["paraphrased_answer"]}
                     for r in s["forget10_perturbed"]]
    assert all(d["answer"] != f["answer"] for d, f in zip(added, forget))  # a paraphrase, not a copy
    assert hard.eval_splits() == plain.eval_splits()
    # a share: that many of the same duplicates, the same draw on every run, none at 0
    half = TofuSource(str(folder / "data"), retain_duplicates=0.5).forget_retain()[1][len(s["retain90"]):]
    assert len(half) == round(0.5 * len(added)) and all(d in added for d in half)
    assert half == TofuSource(str(folder / "data"), retain_duplicates=0.5).forget_retain()[1][len(s["retain90"]):]
    assert half != added[:len(half)]  # drawn, not the first items (the forget set is ordered by author)
    assert TofuSource(str(folder / "data"), retain_duplicates=0.0).forget_retain() == plain.forget_retain()
    with pytest.raises(ValueError, match="share in \\[0, 1\\]"):
        TofuSource(str(folder / "data"), retain_duplicates=1.5)


def test_formatter_puts_the_loss_on_answer_tokens_only(tofu):
    _, _, tok = tofu
    for template in ("plain", "llama2"):
        fmt = QAFormatter(tok, template)
        item = fmt.encode("Where was Ines Varga born?", "Ines Varga was born in Graz.")
        ids, labels = item["input_ids"], item["labels"]
        n_prompt = len(fmt.prompt_ids("Where was Ines Varga born?"))
        assert (labels[:n_prompt] == IGNORE_INDEX).all() and (labels[n_prompt:] == ids[n_prompt:]).all()
        assert tok.decode(ids[n_prompt:]) == " Ines Varga was born in Graz.</s>"
        assert "[INST]" in tok.decode(ids) if template == "llama2" else "Question:" in tok.decode(ids)
    batch = pad_collate(tok.pad_token_id)([fmt.encode("q?", "a b c"), fmt.encode("a longer question?", "x")])
    assert batch["input_ids"].shape == batch["labels"].shape == batch["attention_mask"].shape
    assert (batch["labels"][batch["attention_mask"] == 0] == IGNORE_INDEX).all()
    with pytest.raises(ValueError, match="max_length"):
        QAFormatter(tok, max_length=3).encode("a long question here", "answer")


def test_causal_lm_wrapper_round_trips_and_refuses_bad_arguments(tofu, tmp_path):
    _, _, tok = tofu
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)))
    ids = torch.tensor([[1, 5, 9, 12]])
    net.save_pretrained(tmp_path / "m")
    again = CausalLM(name_or_path=str(tmp_path / "m"))
    torch.testing.assert_close(net(ids), again(ids))
    with pytest.raises(ValueError, match="exactly one"):
        CausalLM()
    with pytest.raises(FileNotFoundError, match="no such folder"):
        CausalLM(name_or_path="./nowhere")
    lora = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), lora={"r": 4, "alpha": 8})
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


def test_evaluator_per_item_values_equal_a_direct_computation(tofu):
    folder, s, tok = tofu
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=3)
    splits = TofuSource(str(folder / "data")).eval_splits()
    report = TofuEvaluator(tok, splits, max_new_tokens=8).run(net)
    fmt = QAFormatter(tok)

    def direct_nll(q, a):
        # log-probabilities summed over the answer tokens, located by tokenising prompt and answer separately
        prompt = fmt.prompt_ids(q)
        answer = tok(" " + a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        ids = torch.tensor([prompt + answer])
        with torch.no_grad():
            logp = torch.log_softmax(net(ids)[0].double(), -1)
        total = sum(logp[len(prompt) + j - 1, t].item() for j, t in enumerate(answer))
        return -total / len(answer)

    row = splits["forget"][0]
    nll_para = direct_nll(row["question"], row["paraphrased_answer"])
    nll_pert = [direct_nll(row["question"], a) for a in row["perturbed_answer"]]
    tr = math.exp(nll_para - sum(nll_pert) / len(nll_pert))
    assert report.per_item["forget"]["truth_ratio"][0] == pytest.approx(tr, rel=1e-4)
    assert report.per_item["forget"]["prob"][0] == pytest.approx(math.exp(-direct_nll(row["question"], row["answer"])),
                                                                rel=1e-4)
    assert report.summary["forget_quality"] is None and any("forget quality" in n for n in report.notes)
    assert report.summary["model_utility"] is not None and "mia/min_k_auc" in report.summary


def test_one_hamu_step_on_a_tiny_llama_is_the_closed_form(tofu):
    folder, _, tok = tofu
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)))
    start = copy.deepcopy(net)
    dm = TofuDataModule(TofuSource(str(folder / "data")), tok, retain_batch_size=8, forget_batch_size=4)
    module = HAMUModule(net, eta=0.05, quota=0.01, grouping="global")
    quick_trainer(1, limit_val_batches=0).fit(module, dm)
    retain, forget = next(iter(dm.train_dataloader()))

    def grads(batch):
        logits = start(batch["input_ids"], attention_mask=batch["attention_mask"])[:, :-1]
        labels = batch["labels"][:, 1:]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        return torch.autograd.grad(loss, list(start.parameters()))

    gr, gf = grads(retain), grads(forget)
    dot = lambda a, b: sum((x.double() * y.double()).sum() for x, y in zip(a, b)).reshape(1)  # noqa: E731
    step = hamu_step(dot(gr, gr), dot(gf, gf), dot(gr, gf), eta=0.05, quota=0.01)
    for p0, p1, a, b in zip(start.parameters(), net.parameters(), gf, gr):
        torch.testing.assert_close(p1 - p0, (step.coef_f[0] * a + step.coef_r[0] * b).float(), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("name", ["FT", "GA", "GradDiff", "KL", "NPO", "SCRUB"])
def test_baselines_move_the_loss_they_target_on_a_tiny_llama(tofu, name):
    from lit_unlearn.modules import FTModule, GAModule, GradDiffModule, KLModule, NPOModule, SCRUBModule

    folder, _, tok = tofu
    make = {"FT": lambda n: FTModule(n, lr=1e-2, optimizer="adam"), "GA": lambda n: GAModule(n, lr=1e-2),
            "GradDiff": lambda n: GradDiffModule(n, lr=0.5), "KL": lambda n: KLModule(n, lr=1e-2),
            "NPO": lambda n: NPOModule(n, lr=1e-2, retain_weight=0.0),
            "SCRUB": lambda n: SCRUBModule(n, lr=1e-2, schedule="combined", alpha=0.0, gamma=1.0)}[name]
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=2)
    dm = TofuDataModule(TofuSource(str(folder / "data")), tok, retain_batch_size=8, forget_batch_size=8)
    retain, forget = next(iter(dm.train_dataloader())) if dm.setup("fit") is None else None
    module = make(net)

    def loss(batch):
        with torch.no_grad():
            return module.compute_loss(batch).item()

    side = retain if name in ("FT", "SCRUB") else forget
    before = loss(side)
    quick_trainer(2, limit_val_batches=0).fit(module, dm)
    after = loss(side)
    assert (after < before) if name in ("FT", "SCRUB") else (after > before)


def _first_pair(tofu, retain_batch_size=8, forget_batch_size=4):
    """A datamodule over the fixture's data and its first (retain, forget) pair: what a 1-step fit trains on."""
    folder, _, tok = tofu
    dm = TofuDataModule(TofuSource(str(folder / "data")), tok, retain_batch_size=retain_batch_size,
                        forget_batch_size=forget_batch_size)
    dm.setup("fit")
    retain, forget = next(iter(dm.train_dataloader()))
    return dm, retain, forget


def _answer_positions(model, batch):
    """(logits, labels) at every answer position of a batch (shifted, padding and prompt dropped), plain torch."""
    logits = model(batch["input_ids"], attention_mask=batch["attention_mask"])[:, :-1]
    labels = batch["labels"][:, 1:]
    keep = labels != -100
    return logits[keep], labels[keep]


def _per_item(net, batch):
    """(each item's mean answer NLL, each item's mean predictive entropy), written out with plain torch."""
    logits = net(batch["input_ids"], attention_mask=batch["attention_mask"])[:, :-1]
    labels = batch["labels"][:, 1:]
    nll, ent = [], []
    for i in range(labels.shape[0]):
        keep = labels[i] != -100
        logp = torch.log_softmax(logits[i][keep], -1)
        nll.append(-logp.gather(-1, labels[i][keep].unsqueeze(-1)).mean())
        ent.append(-(logp.exp() * logp).sum(-1).mean())
    return torch.stack(nll), torch.stack(ent)


@pytest.mark.parametrize("options", [{"forget_ceiling": "cap"}, {"preconditioner": "adam"},
                                     {"forget_ceiling": "cap", "preconditioner": "adam"}], ids=str)
def test_hamus_named_options_step_as_written_out(tofu, options):
    """forget_ceiling c: L_f = mean_i min(NLL_i, c), L_r gains Σ_{NLL_i > c} NLL_i / n; preconditioner="adam":
    the closed form on ĝ = s ⊙ g with s = (√v̂ + ε)^(−1/2), v̂ = (g_r² + g_f²)/2 at the first step, and
    δ = s ⊙ u. Both recomputed here with autograd and hamu_step, against one step of the module."""
    _, _, tok = tofu
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)))
    start = copy.deepcopy(net)
    dm, retain, forget = _first_pair(tofu)
    nll0, _ = _per_item(start, forget)
    middle = nll0.sort().values[1:3]  # a cap between two items' losses: some items past it, some not, no tie
    cap = float(middle.mean()) if options.get("forget_ceiling") else None
    kwargs = {**options, "forget_ceiling": cap}
    module = HAMUModule(net, eta=0.05, quota=0.01, grouping="global", **kwargs)
    quick_trainer(1, limit_val_batches=0).fit(module, dm)

    params = list(start.parameters())
    logits = start(retain["input_ids"], attention_mask=retain["attention_mask"])[:, :-1]
    loss_r = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), retain["labels"][:, 1:].reshape(-1))
    nll, _ = _per_item(start, forget)
    if cap is None:
        logits_f = start(forget["input_ids"], attention_mask=forget["attention_mask"])[:, :-1]
        loss_f = torch.nn.functional.cross_entropy(logits_f.reshape(-1, logits_f.shape[-1]),
                                                   forget["labels"][:, 1:].reshape(-1))
    else:
        past = nll.detach() > cap
        assert 0 < past.sum() < len(past)
        loss_r = loss_r + nll[past].sum() / len(nll)
        loss_f = torch.minimum(nll, torch.tensor(cap)).sum() / len(nll)
    gr = torch.autograd.grad(loss_r, params, retain_graph=True)
    gf = torch.autograd.grad(loss_f, params)
    scale = [torch.ones_like(p) for p in params]
    if options.get("preconditioner"):
        scale = [((a.double() ** 2 + b.double() ** 2) / 2).sqrt().add(1e-8).rsqrt() for a, b in zip(gr, gf)]
        gr = [s * g for s, g in zip(scale, gr)]
        gf = [s * g for s, g in zip(scale, gf)]
    dot = lambda a, b: sum((x.double() * y.double()).sum() for x, y in zip(a, b)).reshape(1)  # noqa: E731
    step = hamu_step(dot(gr, gr), dot(gf, gf), dot(gr, gf), eta=0.05, quota=0.01)
    for p0, p1, a, b, s in zip(params, net.parameters(), gf, gr, scale):
        torch.testing.assert_close(p1 - p0, (s * (step.coef_f[0] * a + step.coef_r[0] * b)).float(), rtol=1e-3,
                                   atol=1e-7)


def test_forget_entropy_adds_each_items_capped_entropy(tofu):
    """With forget_entropy the forget objective is mean_i [min(NLL_i, c) + min(H_i, c_H)], c and c_H the holdout
    items' levels (here given by a stand-in source)."""
    folder, _, tok = tofu
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)))
    module = HAMUModule(net, forget_ceiling="holdout", forget_entropy=True)
    dm = TofuDataModule(TofuSource(str(folder / "data")), tok, retain_batch_size=8, forget_batch_size=4)
    dm.setup("fit")
    _, forget = next(iter(dm.train_dataloader()))
    nll, ent = _per_item(net, forget)
    c, c_h = float(nll.sort().values[1:3].mean()), float(ent.sort().values[1:3].mean())

    class Holdout:
        def holdout_loss(self, *_):
            return c

        def holdout_entropy(self, *_):
            return c_h

    module._holdout_source = Holdout()
    expected = (nll.clamp(max=c).sum() + ent.clamp(max=c_h).sum()) / len(nll)
    assert module.forget_loss(forget).item() == pytest.approx(expected.item(), rel=1e-5)
    with pytest.raises(Exception, match="forget_entropy needs forget_ceiling='holdout'"):
        HAMUModule(net, forget_entropy=True)


@pytest.mark.parametrize("method", ["OFMU", "HAMU"])
def test_a_holdout_ceiling_is_measured_from_the_first_step_without_a_stopping_rule(tofu, method, tmp_path,
                                                                                   monkeypatch):
    """forget_ceiling='holdout' with HoldoutVerification but no StopAtTarget (so no look ever happens): the ceiling
    is the model's mean NLL on the steering half's holdout items, measured at every step, the first included, and
    equal to a direct computation on the weights of that step."""
    import torch.nn.functional as F

    from lit_unlearn.core.batches import logits_and_labels
    from lit_unlearn.callbacks import HoldoutVerification
    from lit_unlearn.modules import OFMUModule

    folder, _, tok = tofu
    monkeypatch.chdir(tmp_path)  # the verification writes its report beside the run
    torch.manual_seed(0)
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)))
    start = copy.deepcopy(net)
    if method == "OFMU":
        module = OFMUModule(net, inner_steps=1, inner_lr=1e-3, outer_lr=1e-3, forget_ceiling="holdout")
    else:
        module = HAMUModule(net, forget_ceiling="holdout")
    seen = []
    if method == "OFMU":
        real_step = module.unlearning_step

        def recording_step(retain, forget):
            out = real_step(retain, forget)
            seen.append(module._ceiling)  # the ceiling this round used
            return out

        module.unlearning_step = recording_step
    else:
        real_ceiling = module.ceiling

        def recording_ceiling():
            out = real_ceiling()
            if len(seen) <= module.trainer.global_step:  # the first read of each step
                seen.append(out[0])
            return out

        module.ceiling = recording_ceiling
    verification = HoldoutVerification(items_per_author=4, n_boot=200)
    dm = TofuDataModule(TofuSource(str(folder / "data")), tok, retain_batch_size=8, forget_batch_size=4)
    quick_trainer(2, callbacks=[verification], limit_val_batches=0).fit(module, dm)
    assert verification.looks == 0 and verification.holdout_measurements == 2 and len(seen) == 2
    rows = verification._splits["steering"]["holdout"]
    with torch.no_grad():
        logits, labels = logits_and_labels(start.eval(), pad_collate(tok.pad_token_id)(
            [dm.formatter.encode(r["question"], r["answer"]) for r in rows]))
        per_item = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=IGNORE_INDEX, reduction="none")
        direct = ((per_item.sum(-1) / (labels != IGNORE_INDEX).sum(-1)).double().mean()).item()
    assert seen[0] == pytest.approx(direct, rel=1e-5)  # step 0's ceiling: the initial weights' holdout NLL
    assert seen[1] != seen[0]  # measured again on the moved weights


def test_eval_items_caps_the_run_report_splits_and_leaves_training_alone(tofu):
    """eval_items: the before/after table reads the first N items of each split; the training batches and the
    unlearning sets are unchanged; a non-positive cap is one error."""
    folder, _, tok = tofu
    full = TofuDataModule(TofuSource(str(folder / "data")), tok, retain_batch_size=4, forget_batch_size=2)
    capped = TofuDataModule(TofuSource(str(folder / "data")), tok, retain_batch_size=4, forget_batch_size=2,
                            eval_items=3)
    for dm in (full, capped):
        dm.setup("fit")
    for name in ("forget", "retain"):
        loader = capped.eval_dataloaders()[name]
        items = [row for batch in loader for row in batch["input_ids"]]
        want = [full.eval_dataloaders()[name].dataset[i]["input_ids"] for i in range(3)]
        assert len(items) == 3
        for got, ref in zip(items, want):
            assert torch.equal(got[: len(ref)], ref)
    a, b = next(iter(full.train_dataloader())), next(iter(capped.train_dataloader()))
    for x, y in zip(a, b):
        assert torch.equal(x["input_ids"], y["input_ids"])
    from lit_unlearn.core.errors import UserError

    with pytest.raises(UserError, match="eval_items must be"):
        TofuDataModule(TofuSource(str(folder / "data")), tok, eval_items=0)


def test_interpolating_toward_the_base_starts_training_from_the_written_out_mix(tofu, tmp_path):
    """InterpolateTowardBase: the first step starts from θ₀ + keep·(θ − θ₀), read from the base's safetensors, after
    the metric sources measured the target (they come first in the declared order); bad inputs are one line."""
    from lightning.pytorch.callbacks import Callback

    from lit_unlearn.algorithms.interpolation import interpolate_toward_
    from lit_unlearn.callbacks import HoldoutVerification, InterpolateTowardBase
    from lit_unlearn.core.errors import UserError
    from lit_unlearn.launch.trainer_builder import ordered_callbacks
    from lit_unlearn.modules import FTModule

    folder, _, tok = tofu
    base = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=2)
    base.save_pretrained(tmp_path / "base")
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=3)
    theta0 = dict(base.model.named_parameters())
    expected = {n: theta0[n].detach() + 0.3 * (p.detach() - theta0[n].detach()) for n, p in net.model.named_parameters()}
    seen = {}

    class FirstStep(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if not seen:
                seen.update({n: p.detach().clone() for n, p in pl_module.network.model.named_parameters()})

    dm = TofuDataModule(TofuSource(str(folder / "data")), tok, retain_batch_size=8, forget_batch_size=8)
    quick_trainer(1, limit_val_batches=0, callbacks=[InterpolateTowardBase(str(tmp_path / "base"), keep=0.3),
                                                     FirstStep()]).fit(FTModule(net, lr=1e-3), dm)
    assert seen.keys() == expected.keys()
    for n in expected:
        torch.testing.assert_close(seen[n], expected[n], rtol=0, atol=1e-6)
    # the pure function: its ends, and refusals
    a = {"w": torch.tensor([1.0, 2.0])}
    for keep, want in ((0.0, [5.0, 5.0]), (1.0, [1.0, 2.0]), (0.25, [4.0, 4.25])):
        t = torch.tensor([1.0, 2.0])
        interpolate_toward_([("w", t)], {"w": torch.tensor([5.0, 5.0])}, keep)
        assert t.tolist() == want
    with pytest.raises(KeyError):
        interpolate_toward_([("v", torch.zeros(2))], a, 0.5)
    with pytest.raises(ValueError):
        interpolate_toward_([("w", torch.zeros(3))], a, 0.5)
    with pytest.raises(UserError, match="keep must be in"):
        InterpolateTowardBase(str(tmp_path / "base"), keep=1.5)
    order = ordered_callbacks([InterpolateTowardBase(str(tmp_path / "base")), HoldoutVerification()])
    assert [type(c).__name__ for c in order] == ["HoldoutVerification", "InterpolateTowardBase"]


def test_base_distill_step_is_sgd_on_the_kl_to_the_base_written_out(tofu, tmp_path):
    """BaseDistill: one SGD step equals −lr·∇[w_f·KL(p_base ‖ p_θ) over the forget answer tokens + w_r·NLL(retain)],
    each written out with plain torch; the frozen reference is the base read from its folder, not the target."""
    from lit_unlearn.modules import BaseDistillModule

    folder, _, tok = tofu
    base = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=2)
    base.save_pretrained(tmp_path / "base")
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=3)
    start = copy.deepcopy(net)
    lr, w_f, w_r = 0.05, 0.7, 0.4
    module = BaseDistillModule(net, base=str(tmp_path / "base"), lr=lr, optimizer="sgd", forget_weight=w_f,
                               retain_weight=w_r)
    dm, retain, forget = _first_pair(tofu, forget_batch_size=8)
    quick_trainer(1, limit_val_batches=0).fit(module, dm)

    with torch.no_grad():
        base_logits, _ = _answer_positions(base, forget)
    logits_f, _ = _answer_positions(start, forget)
    p_base = torch.softmax(base_logits.double(), -1)
    kl = (p_base * (torch.log(p_base) - torch.log_softmax(logits_f.double(), -1))).sum(-1).mean()
    logits_r, labels_r = _answer_positions(start, retain)
    loss = w_f * kl + w_r * torch.nn.functional.cross_entropy(logits_r.double(), labels_r)
    grads = torch.autograd.grad(loss, list(start.parameters()))
    for (n, p0), g, p1 in zip(start.named_parameters(), grads, module.network.parameters()):
        torch.testing.assert_close(p1.detach() - p0.detach(), (-lr * g).float(), rtol=1e-4, atol=1e-7, msg=n)


@pytest.mark.parametrize("sam_rho, relearn_lr", [(0.0, 0.0), (0.05, 0.0), (0.0, 0.01)])
def test_holdout_match_steps_on_the_w1_to_the_holdout_items_token_profile_written_out(tofu, tmp_path, monkeypatch,
                                                                                      sam_rho, relearn_lr):
    """HoldoutMatch: the holdout profile is the start weights' per-token surprisal and Min-K %++ z over the steering
    half's holdout answers (each item's numpy quantiles averaged over items, the barycenter; and the pooled
    tokens' quantiles), from values written out with plain torch, and one SGD step equals
    −lr·∇[w_f·mean_i (W1(s_i) + z_w·W1(z_i)) + w_r·NLL(retain)], W1 written out per item with numpy's quantiles;
    with sam_rho ρ, the forget term's gradient is taken at θ + ρ·g/‖g‖ (g: its gradient at θ), the retain term's
    at θ; with relearn_lr α, the forget term's gradient is (1 − λ)·∇F(θ) + λ·∇F(θ') at
    θ' = θ − α·sign(∇NLL_forget), the simulated relearning step."""
    import numpy as np

    from lit_unlearn.callbacks import HoldoutVerification
    from lit_unlearn.modules import HoldoutMatchModule

    folder, _, tok = tofu
    monkeypatch.chdir(tmp_path)
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=3)
    start = copy.deepcopy(net)
    lr, w_f, w_r, w_z = 0.05, 0.7, 0.4, 0.3
    module = HoldoutMatchModule(net, lr=lr, optimizer="sgd", forget_weight=w_f, retain_weight=w_r, z_weight=w_z,
                                sam_rho=sam_rho, relearn_lr=relearn_lr, relearn_weight=0.6)
    verification = HoldoutVerification(items_per_author=4, n_boot=200)
    dm, retain, forget = _first_pair(tofu, forget_batch_size=4)
    quick_trainer(1, callbacks=[verification], limit_val_batches=0).fit(module, dm)

    def per_token(model, batch):  # [(surprisal, z) of each item's answer tokens]
        logits = model(batch["input_ids"], attention_mask=batch["attention_mask"])[:, :-1].double()
        labels = batch["labels"][:, 1:]
        out = []
        for i in range(labels.shape[0]):
            keep = labels[i] != -100
            logp = torch.log_softmax(logits[i][keep], -1)
            picked = logp.gather(-1, labels[i][keep].unsqueeze(-1)).squeeze(-1)
            mu = (logp.exp() * logp).sum(-1)
            sd = ((logp.exp() * (logp - mu.unsqueeze(-1)).square()).sum(-1) + 1e-8).sqrt()
            out.append((-picked, (picked - mu) / sd))
        return out

    rows = verification._splits["steering"]["holdout"]
    holdout = pad_collate(tok.pad_token_id)([dm.formatter.encode(r["question"], r["answer"]) for r in rows])
    with torch.no_grad():
        pooled = per_token(start, holdout)
    levels = np.linspace(0, 1, 101)
    profile = verification.holdout_token_profile()  # measured once, on the start weights (the only step's)
    for k, key in enumerate(("surprisal", "z")):  # z to 1e-3: the scorer's float32 moments
        barycenter = np.mean([np.quantile(p[k].numpy(), levels) for p in pooled], axis=0)
        np.testing.assert_allclose(profile[key], barycenter, rtol=1e-3, atol=1e-3 if k else 1e-5)
        np.testing.assert_allclose(profile[key + "_pooled"], np.quantile(torch.cat([p[k] for p in pooled]).numpy(),
                                                                         levels), rtol=1e-3, atol=1e-3 if k else 1e-5)
    grids = [np.array(profile["surprisal"]), np.array(profile["z"])]  # the same signs |v − Q| takes in the step

    def w1(values, grid):
        v, _ = torch.sort(values)
        u = (np.arange(len(v)) + 0.5) / len(v)
        return (v - torch.tensor(np.interp(u, levels, grid))).abs().mean()

    def forget_term(model):
        return w_f * torch.stack([w1(s, grids[0]) + w_z * w1(z, grids[1]) for s, z in per_token(model, forget)]).mean()

    params = list(start.parameters())
    g_f = torch.autograd.grad(forget_term(start), params)
    if sam_rho:
        shifted = copy.deepcopy(start)
        norm = torch.sqrt(sum(g.double().square().sum() for g in g_f))
        with torch.no_grad():
            for p, g in zip(shifted.parameters(), g_f):
                p.add_(sam_rho / norm * g)
        g_f = torch.autograd.grad(forget_term(shifted), list(shifted.parameters()))
    if relearn_lr:
        logits_f, labels_f = _answer_positions(start, forget)
        g_nll = torch.autograd.grad(torch.nn.functional.cross_entropy(logits_f, labels_f), params)
        relearned = copy.deepcopy(start)
        with torch.no_grad():
            for p, g in zip(relearned.parameters(), g_nll):
                p.sub_(relearn_lr * torch.sign(g))
        g_after = torch.autograd.grad(forget_term(relearned), list(relearned.parameters()))
        g_f = [0.4 * a + 0.6 * b for a, b in zip(g_f, g_after)]
    logits_r, labels_r = _answer_positions(start, retain)
    g_r = torch.autograd.grad(w_r * torch.nn.functional.cross_entropy(logits_r.double(), labels_r), params)
    grads = [a + b for a, b in zip(g_f, g_r)]
    for (n, p0), g, p1 in zip(start.named_parameters(), grads, module.network.parameters()):
        torch.testing.assert_close(p1.detach() - p0.detach(), (-lr * g).float(), rtol=1e-4, atol=1e-7, msg=n)
    with pytest.raises(Exception, match="add lit_unlearn.callbacks.HoldoutVerification"):
        quick_trainer(1, limit_val_batches=0).fit(HoldoutMatchModule(copy.deepcopy(start)), dm)


def test_base_answers_relabel_forget_items_with_the_bases_greedy_answer_and_step_on_their_nll(tofu, tmp_path):
    """BaseAnswers: each forget item keeps its prompt and gets the base's greedy answer (checked against a greedy
    loop written out: argmax until end-of-sequence or the budget), and one SGD step equals
    −lr·∇[w_f·NLL(relabelled forget) + w_r·NLL(retain)] written out with plain torch."""
    from lit_unlearn.modules import BaseAnswersModule

    _, _, tok = tofu
    base = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=2)
    base.save_pretrained(tmp_path / "base")
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=3)
    start = copy.deepcopy(net)
    lr, w_f, w_r, budget = 0.05, 0.6, 0.3, 7
    module = BaseAnswersModule(net, base=str(tmp_path / "base"), lr=lr, optimizer="sgd", forget_weight=w_f,
                               retain_weight=w_r, max_new_tokens=budget)
    dm, retain, forget = _first_pair(tofu)
    eos = base.model.generation_config.eos_token_id
    relabelled = module.relabelled(forget)
    for i in range(forget["input_ids"].shape[0]):
        labels = forget["labels"][i][forget["attention_mask"][i].bool()]
        prompt = forget["input_ids"][i][:int((labels != -100).nonzero()[0, 0])].tolist()
        seq = list(prompt)
        with torch.no_grad():
            for _ in range(budget):
                seq.append(int(base(torch.tensor([seq]))[0, -1].argmax()))
                if seq[-1] == eos:
                    break
        if seq[-1] != eos:
            seq.append(eos)
        n = int(relabelled["attention_mask"][i].sum())
        assert relabelled["input_ids"][i][:n].tolist() == seq
        assert relabelled["labels"][i][:n].tolist() == [-100] * len(prompt) + seq[len(prompt):]
        assert (relabelled["labels"][i][n:] == -100).all()
    quick_trainer(1, limit_val_batches=0).fit(module, dm)

    def nll(model, batch):
        logits, labels = _answer_positions(model, batch)
        return torch.nn.functional.cross_entropy(logits.double(), labels)

    loss = w_f * nll(start, relabelled) + w_r * nll(start, retain)
    grads = torch.autograd.grad(loss, list(start.parameters()))
    for (n, p0), g, p1 in zip(start.named_parameters(), grads, module.network.parameters()):
        torch.testing.assert_close(p1.detach() - p0.detach(), (-lr * g).float(), rtol=1e-4, atol=1e-7, msg=n)


def test_hamus_forget_token_cap_steps_as_written_out(tofu):
    """forget_token_cap τ with a forget ceiling c: each item's NLL is the mean of min(nll_t, τ) over its answer
    tokens, the tokens past τ join L_r (Σ_t nll_t·[nll_t > τ] / n_i per item), then the item ceiling applies to the
    token-capped NLLs as before. Token NLLs written out with a loop, against one step of the module."""
    from lit_unlearn.core.errors import UserError

    _, _, tok = tofu
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok)))
    start = copy.deepcopy(net)
    dm, retain, forget = _first_pair(tofu)

    def token_nlls(model):
        logits = model(forget["input_ids"], attention_mask=forget["attention_mask"])[:, :-1]
        labels = forget["labels"][:, 1:]
        out = []
        for i in range(labels.shape[0]):
            keep = labels[i] != -100
            out.append(-torch.log_softmax(logits[i][keep], -1).gather(-1, labels[i][keep].unsqueeze(-1))[:, 0])
        return out

    with torch.no_grad():
        every = torch.cat(token_nlls(start))
    tau = float(every.quantile(0.7))  # some tokens of every kind of item past it
    capped0 = torch.stack([t.clamp(max=tau).mean() for t in token_nlls(start)]).detach()
    c = float(capped0.sort().values[1:3].mean())  # the item ceiling between two token-capped items
    module = HAMUModule(net, eta=0.05, quota=0.01, grouping="global", forget_ceiling=c, forget_token_cap=tau)
    quick_trainer(1, limit_val_batches=0).fit(module, dm)

    params = list(start.parameters())
    logits = start(retain["input_ids"], attention_mask=retain["attention_mask"])[:, :-1]
    loss_r = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), retain["labels"][:, 1:].reshape(-1))
    per_token = token_nlls(start)
    capped = torch.stack([t.clamp(max=tau).mean() for t in per_token])
    token_past = torch.stack([(t * (t.detach() > tau)).sum() / len(t) for t in per_token])
    past_items = capped.detach() > c
    assert 0 < past_items.sum() < len(capped) and (token_past > 0).any()
    n = len(capped)
    loss_r = loss_r + token_past.sum() / n + capped[past_items].sum() / n
    loss_f = torch.minimum(capped, torch.tensor(c)).sum() / n
    gr = torch.autograd.grad(loss_r, params, retain_graph=True)
    gf = torch.autograd.grad(loss_f, params)
    dot = lambda a, b: sum((x.double() * y.double()).sum() for x, y in zip(a, b)).reshape(1)  # noqa: E731
    step = hamu_step(dot(gr, gr), dot(gf, gf), dot(gr, gf), eta=0.05, quota=0.01)
    for p0, p1, a, b in zip(params, net.parameters(), gf, gr):
        torch.testing.assert_close(p1 - p0, (step.coef_f[0] * a + step.coef_r[0] * b).float(), rtol=1e-3, atol=1e-7)
    with pytest.raises(UserError, match="forget_token_cap needs a forget_ceiling"):
        HAMUModule(CausalLM(config=tiny_llama_config(vocab_size=len(tok))), forget_token_cap=3.0)
