"""The forget objectives HAMU's constrained step can take as L_f, each a *gain*: the quantity whose increase is
forgetting (HAMU demands g_f·δ ≥ Q_i per block, with g_f = ∇gain).

The HAMU paper states its step for any forget objective by replacing g_f; these are the ones the project has:
- "nll": the mean answer NLL over the forget batch (the paper's L_f, gradient ascent's direction);
- "npo": −NPO_β, the negative of Zhang et al.'s loss against a frozen reference (the target): the gain's gradient
  is GA's reweighted by 2σ(β·log-ratio), so items already forgotten stop pulling;
- "holdout_match": −mean_i [W1(s_i, Q_s) + z_w·W1(z_i, Q_z)], the negative of HoldoutMatch's distance from each
  forget item's per-token surprisal and Min-K %++ profile to the holdout items' (lit_unlearn.algorithms
  .token_profile): nothing to gain past the holdout profile.
`READS` says which per-token statistics each objective trains on (lit_unlearn.metrics.membership_attacks), so the
verdict can be given apart on the attacks it does not read.
"""

from __future__ import annotations

from torch import Tensor

from lit_unlearn.algorithms.losses import npo_item_losses
from lit_unlearn.algorithms.token_profile import profile_distance

__all__ = ["FORGET_OBJECTIVES", "READS", "npo_gain", "profile_gain"]

FORGET_OBJECTIVES = ("nll", "npo", "holdout_match")
READS = {"nll": frozenset({"surprisal"}), "npo": frozenset({"surprisal"}),
         "holdout_match": frozenset({"surprisal", "standardised_logprob"})}


def npo_gain(logprob: Tensor, reference_logprob: Tensor, beta: float) -> Tensor:
    """Each item's −NPO_β term from its summed answer log-probability [B]; their mean is −NPO_β."""
    return -npo_item_losses(logprob, reference_logprob, beta)


def profile_gain(surprisal: Tensor, z: Tensor, mask: Tensor, grid_surprisal, grid_z, z_weight: float) -> Tensor:
    """Each item's −[W1(surprisal_i, grid_s) + z_weight·W1(z_i, grid_z)] [B]."""
    return -(profile_distance(surprisal, mask, grid_surprisal) + z_weight * profile_distance(z, mask, grid_z))
