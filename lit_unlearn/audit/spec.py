"""What an audit does, fixed in a config (configs/audit/*.yaml) and stated in its report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from lit_unlearn.errors import UserError, did_you_mean

__all__ = ["AuditSpec", "load_audit_spec"]


@dataclass
class AuditSpec:
    # Relearning (Hu et al. 2025; Deeb & Roger 2024): fine-tune on one part of the forget set, split by author,
    # then measure the other part, which the attack never trained on.
    relearn_steps: int = 10
    relearn_lr: float = 5e-4
    relearn_batch_size: int = 8
    relearn_share: float = 0.5          # the share of forget authors relearned (the first ones, in split order)
    # Round-to-nearest, group-wise weight quantisation (Zhang et al. 2025).
    quant_bits: list[int] = field(default_factory=lambda: [8, 4])
    quant_group_size: int = 128
    # TOFU's paraphrased questions.
    paraphrase: bool = True
    # The reference-free verification's settings (None: the calibrated margins of the forget level).
    delta: float | None = None
    delta_author: float | None = None
    alpha: float = 0.05
    n_boot: int = 2000
    attacks: list[str] = field(default_factory=lambda: ["loss", "zlib", "min_k", "min_k_plus_plus", "gradnorm"])
    seed: int = 0
    max_new_tokens: int | None = None   # ROUGE's generation budget (None: covers ≥ 95 % of the answers)

    def __post_init__(self) -> None:
        if self.relearn_steps < 1 or not self.relearn_lr > 0 or self.relearn_batch_size < 1:
            raise UserError("audit: relearn_steps, relearn_lr and relearn_batch_size must be positive")
        if not 0 < self.relearn_share < 1:
            raise UserError(f"audit: relearn_share must be in (0, 1), got {self.relearn_share}")
        if any(not 2 <= b <= 16 for b in self.quant_bits) or self.quant_group_size < 1:
            raise UserError(f"audit: quant_bits must be in [2, 16] and quant_group_size ≥ 1, got {self.quant_bits}, "
                            f"{self.quant_group_size}")

    def as_dict(self) -> dict:
        return asdict(self)


def load_audit_spec(path: str | Path | None) -> AuditSpec:
    """The audit config (YAML mapping of AuditSpec fields); None: the defaults. Unknown keys are one-line errors."""
    if path is None:
        return AuditSpec()
    import yaml

    path = Path(path)
    if not path.is_file():
        raise UserError(f"audit config {path} not found")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: an audit config is a mapping of AuditSpec fields")
    known = [f.name for f in fields(AuditSpec)]
    for key in data:
        if key not in known:
            raise UserError(f"{path}: unknown key {key!r}{did_you_mean(key, known)}; known: {', '.join(known)}")
    return AuditSpec(**data)
