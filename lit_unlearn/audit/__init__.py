"""`lit-unlearn audit`: does the forgetting survive the attacks the literature uses to bring knowledge back
(relearning on part of the forget set, weight quantisation, paraphrased questions)? Each attack is measured with
the reference-free verification (forget vs holdout), beside the same attack on the target and, where one exists,
on a retain-only model (the gold standard)."""

from lit_unlearn.audit.spec import AuditSpec, load_audit_spec
from lit_unlearn.audit.run import run_audit, AuditReport

__all__ = ["AuditSpec", "load_audit_spec", "run_audit", "AuditReport"]
