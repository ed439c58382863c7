"""The membership attacks of the TOFU evaluation: forget items (members, label 0) against holdout items
(non-members, label 1), and the gradient pass only the gradient-norm attack needs.

Loss, zlib, Min-K% and Min-K%++ read the teacher-forced pass of the items' answers (lit_unlearn.metrics.
tofu_scoring); gradnorm needs a backward pass per item (`gradient_norms`); the reference attack needs the
retain-only model's per-item NLLs from its saved report. Every attack's per-item scores are kept in item order:
the reference-free verification resamples them by author, and a later run's reference attack reads the NLLs.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lit_unlearn.algorithms.losses import IGNORE_INDEX
from lit_unlearn.core.batches import logits_and_labels
from lit_unlearn.core.errors import UserError
from lit_unlearn.metrics.membership_attacks import FEATURES, SCORING_ATTACKS, scoring_attack_scores
from lit_unlearn.metrics.mia_convention import MIAConvention
from lit_unlearn.metrics.tofu.torch_metrics import ItemMean, MembershipAUC
from lit_unlearn.metrics.tofu.scoring import AnswerStats, TeacherForcedScoring

__all__ = ["MIA_ATTACKS", "attack_scores", "gradient_norms", "membership_scores", "reference_nll", "restore_order"]

MIA_ATTACKS = SCORING_ATTACKS  # from the scoring pass; gradnorm and reference apart (metrics.membership_attacks)


def restore_order(values: list[float], world: int) -> list[float]:
    """Per-item values gathered from rank::world shards (rank 0's, then rank 1's, ...) back in item order."""
    n = len(values)
    order = [i for r in range(world) for i in range(r, n, world)]
    out = [0.0] * n
    for j, i in enumerate(order):
        out[i] = values[j]
    return out


def attack_scores(rows: list[dict], stats: list[AnswerStats], convention: MIAConvention, min_k: float,
                  tokenizer) -> dict[str, Tensor]:
    """The scoring-pass attacks' per-item scores (higher: more likely a non-member) and the learned attack's
    extra per-item features (lit_unlearn.metrics.membership_attacks)."""
    conv = convention
    scored = [st.scored(conv.drop_last_token) for st in stats]
    if conv.zlib_text == "answer":
        texts = [r["answer"] for r in rows]
    else:
        texts = [tokenizer.decode(st.label_ids.tolist(), skip_special_tokens=True) for st in stats]
    # the loss is the mean over every answer token (TOFU's), whatever the convention cuts for the token-wise ones
    scored = [AnswerStats(st.nll, sc.logp, sc.mu, sc.var, sc.correct, sc.label_ids, sc.rank)
              for st, sc in zip(stats, scored)]
    scores = scoring_attack_scores(scored, texts, min_k, conv.k_rounding, conv.var_floor)
    return {name: torch.tensor(values, dtype=torch.float64) for name, values in scores.items()}


def gradient_norms(network: nn.Module, scoring: TeacherForcedScoring, pairs: list[tuple[str, str]], device,
                   p: float = 2.0, drop_last: bool = False, cache: dict | None = None) -> Tensor:
    """Gradient-norm attack scores: per item, the mean over parameter tensors of ‖∇ mean answer NLL‖_p. `cache`:
    pair -> score of the current weights (lit_unlearn.metrics.weights_memo), read and filled."""
    cache = {} if cache is None else cache
    params = [q for q in network.parameters() if q.requires_grad]
    enabled = []
    if not params:  # a frozen model (e.g. evaluated standalone): differentiate w.r.t. its float weights
        enabled = [q for q in network.parameters() if q.is_floating_point()]
        for q in enabled:
            q.requires_grad_(True)
        params = enabled
    out = []
    try:
        for pair in pairs:
            if pair in cache:
                out.append(cache[pair])
                continue
            with torch.enable_grad():
                logits, labels = logits_and_labels(network, scoring.batch([pair], device))
                valid = (labels != IGNORE_INDEX)[0]
                lp = torch.log_softmax(logits[0][valid].float(), -1).gather(
                    -1, labels[0][valid].unsqueeze(-1)).squeeze(-1)
                lp = lp[:-1] if drop_last and lp.numel() > 1 else lp
                grads = torch.autograd.grad(-lp.mean(), params, allow_unused=True)
            norms = [g.detach().float().norm(p=p) for g in grads if g is not None]
            out.append(cache.setdefault(pair, torch.stack(norms).mean().item()))
    finally:
        for q in enabled:
            q.requires_grad_(False)
    return torch.tensor(out, dtype=torch.float64)


def reference_nll(reference: dict | None) -> dict[str, list[float]] | None:
    """The retain-only model's per-item forget and holdout NLLs from its report, if it recorded them."""
    mia = ((reference or {}).get("per_item") or {}).get("mia") or {}
    if not mia.get("forget_nll") or not mia.get("holdout_nll"):
        return None
    return {"forget": mia["forget_nll"], "holdout": mia["holdout_nll"]}


def membership_scores(sides: dict[str, tuple[list[dict], list[AnswerStats], int]], extra: dict[str, dict[str, Tensor]],
                      convention: MIAConvention, min_k: float, tokenizer, world: int,
                      summary: dict) -> dict[str, list[float]]:
    """The attacks' AUCs into summary (`mia/{attack}_auc`) and every attack's per-item scores in item order.

    sides: "forget" and "holdout" -> (this process's rows, their answers' stats, all items of the split);
    extra: per side, scores of attacks from other passes (gradnorm, reference), this process's rows."""
    attacks = list(MIA_ATTACKS) + sorted(extra.get("forget", {}))
    metrics = {a: MembershipAUC() for a in attacks}
    item_scores: dict[str, ItemMean] = {}
    for split, (rows, stats, _) in sides.items():
        scores = attack_scores(rows, stats, convention, min_k, tokenizer)
        scores.update(extra.get(split, {}))
        # not an attack: each item's mean predictive entropy over its answer tokens (−E_p[log p]), which a forget
        # objective that aims at the unseen items' level reads (HAMU's forget_entropy)
        item_scores[f"{split}_entropy"] = ItemMean()
        item_scores[f"{split}_entropy"].update(torch.tensor([-float(st.mu.double().mean()) for st in stats],
                                                            dtype=torch.float64))
        for a, m in metrics.items():
            m.update(scores[a], split == "holdout")
            item_scores[f"{split}_{a}"] = ItemMean()
            item_scores[f"{split}_{a}"].update(scores[a])
        for name in FEATURES:  # per item only: the learned attack's inputs, not attacks of their own
            item_scores[f"{split}_{name}"] = ItemMean()
            item_scores[f"{split}_{name}"].update(scores[name])
    for a, m in metrics.items():
        summary[f"mia/{a}_auc"] = m.compute().item()
    mia = {key: restore_order(m.per_item().tolist(), world) for key, m in item_scores.items()}
    mia.update({f"{split}_nll": mia[f"{split}_loss"] for split in ("forget", "holdout")})
    return mia


def reference_attack(ref: dict[str, list[float]], split: str, n_items: int, loss: Tensor, rank: int,
                     world: int) -> Tensor:
    """The reference attack's scores: this model's NLL minus the retain-only model's, item by item."""
    theirs = ref[split]
    if len(theirs) != n_items:
        raise UserError(f"the reference report scored {len(theirs)} {split} items, this data has {n_items}: "
                        "evaluate the retain-only model on the same data")
    return loss - torch.tensor(theirs[rank::world], dtype=torch.float64)
