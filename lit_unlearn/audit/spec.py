"""What an audit does, fixed in a config (configs/audit/*.yaml) and stated in its report: the full verdict's
attacks (lit_unlearn.verification.full_verdict.VerdictSpec) and the paraphrase probe beside them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from lit_unlearn.core.errors import UserError
from lit_unlearn.storage.specs import dataclass_spec

__all__ = ["AuditSpec", "load_audit_spec"]


@dataclass
class AuditSpec:
    # Relearning (Hu et al. 2025; Deeb & Roger 2024; UNDO's sweep): fine-tune on the first authors of the reporting
    # half's forget items, measure the others (never trained on), at every rate and step count; the worst counts.
    relearn_lrs: list[float] = field(default_factory=lambda: [1e-5, 1e-4, 5e-4, 1e-3])
    relearn_steps: list[int] = field(default_factory=lambda: [10, 100])
    relearn_batch_size: int = 8
    relearn_share: float = 0.5
    # Round-to-nearest, group-wise weight quantisation (Zhang et al. 2025).
    quant_bits: int = 4
    quant_group_size: int = 128
    # TOFU's paraphrased questions: the verdict's fourth part where its margins are calibrated; elsewhere a probe
    # beside the verdict, judged with the margins of the model as it is and not counted.
    paraphrase: bool = True
    # The verdict's settings. delta None: the calibrated margins of the level, condition and attack; "self": the
    # model's own holdout items.
    delta: float | str | None = None
    delta_author: float | str | None = None
    alpha: float = 0.05
    n_boot: int = 2000
    attacks: list[str] | None = None    # None: every attack (lit_unlearn.metrics.membership_attacks.ATTACKS)
    seed: int = 0
    split_seed: int = 0

    def __post_init__(self) -> None:
        if not self.relearn_steps or any(s < 1 for s in self.relearn_steps) or not self.relearn_lrs or \
                any(not lr > 0 for lr in self.relearn_lrs) or self.relearn_batch_size < 1:
            raise UserError("audit: relearn_lrs, relearn_steps and relearn_batch_size must be positive")
        if not 0 < self.relearn_share < 1:
            raise UserError(f"audit: relearn_share must be in (0, 1), got {self.relearn_share}")
        if not 2 <= self.quant_bits <= 16 or self.quant_group_size < 1:
            raise UserError(f"audit: quant_bits must be in [2, 16] and quant_group_size ≥ 1, got {self.quant_bits}, "
                            f"{self.quant_group_size}")

    def verdict_spec(self):
        from lit_unlearn.verification.full_verdict import VerdictSpec

        return VerdictSpec(relearn_lrs=tuple(self.relearn_lrs), relearn_steps=tuple(self.relearn_steps),
                           relearn_batch_size=self.relearn_batch_size, relearn_share=self.relearn_share,
                           quant_bits=self.quant_bits, quant_group_size=self.quant_group_size, alpha=self.alpha,
                           n_boot=self.n_boot, seed=self.seed, paraphrase=None if self.paraphrase else False)

    def margins(self):
        if self.delta == "self":
            return "self"
        if self.delta is None and self.delta_author is None:
            return "calibrated"
        if self.delta is None or self.delta_author is None:
            raise UserError("audit: give both delta and delta_author, or neither")
        return (float(self.delta), float(self.delta_author))

    def as_dict(self) -> dict:
        return asdict(self)


def load_audit_spec(path: str | Path | None) -> AuditSpec:
    """The audit config (YAML mapping of AuditSpec fields); None: the defaults. Unknown keys are one-line errors."""
    return dataclass_spec(AuditSpec, path, "audit config")
