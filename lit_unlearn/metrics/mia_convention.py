"""How the TOFU membership and memorisation scores are computed: ours, or open-unlearning's, exactly.

The two differ in small choices that move the numbers (on one tiny model: Min-K% AUC 0.988 vs 0.982, privleak
−89.3 vs −85.9), so a report states which it used, and `open-unlearning` lets numbers sit beside its tables.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MIAConvention", "CONVENTIONS", "get_convention"]


@dataclass(frozen=True)
class MIAConvention:
    name: str
    drop_last_token: bool      # Min-K%, Min-K%++, ES, EM, gradnorm skip the last answer token (EOS)
    k_rounding: str            # "ceil" or "floor" of k·n (at least 1 either way)
    var_floor: float           # Min-K%++: lower bound on the per-token variance σ²
    zlib_text: str             # "answer": the answer string; "decoded": the decoded answer tokens, specials skipped
    es_no_suffix_is_last: bool  # ES when even the last token is wrong: 0 (ours) or 1/n (open-unlearning's loop)
    privleak_fallback_auc: float | None  # without a retain-only reference: omit (None), or compare with this AUC
    privleak_eps: float        # added to privleak's denominator


CONVENTIONS = {
    "lit-unlearn": MIAConvention("lit-unlearn", drop_last_token=False, k_rounding="ceil", var_floor=1e-12,
                                 zlib_text="answer", es_no_suffix_is_last=False, privleak_fallback_auc=None,
                                 privleak_eps=0.0),
    "open-unlearning": MIAConvention("open-unlearning", drop_last_token=True, k_rounding="floor", var_floor=1e-6,
                                     zlib_text="decoded", es_no_suffix_is_last=True, privleak_fallback_auc=0.5,
                                     privleak_eps=1e-10),
}


def get_convention(name: str | MIAConvention) -> MIAConvention:
    if isinstance(name, MIAConvention):
        return name
    if name not in CONVENTIONS:
        from lit_unlearn.core.errors import UserError

        raise UserError(f"mia_convention={name!r} is not known: use one of {sorted(CONVENTIONS)}")
    return CONVENTIONS[name]
