"""The audit as the last step of an LLM unlearning run (`lit-unlearn unlearn|tofu-demo --audit`): the run's final
weights attacked beside the model it started from (the target) and, where the data folder has one beside it as the
worlds lay it out (`retain_only_{level}/`), a retain-only model. Run after the fit has finished (the relearning
attack is a training run of its own), into the run's folder: `audit/audit.{md,json}` and TensorBoard `audit/*`."""

from __future__ import annotations

from pathlib import Path

from lit_unlearn.core.console import say
from lit_unlearn.core.errors import UserError

__all__ = ["audit_finished_run"]


def audit_finished_run(launched, config: str | None = None):
    """Audit a finished run (a Launched from the launch path); returns the AuditReport."""
    from lit_unlearn.audit.run import run_audit
    from lit_unlearn.audit.spec import load_audit_spec
    from lit_unlearn.models import CausalLM
    from lit_unlearn.storage.packaged_files import packaged_config

    module, dm = launched.model, launched.datamodule
    source = getattr(dm, "source", None)
    if source is None or not hasattr(source, "eval_splits") or not hasattr(module.network, "save_pretrained"):
        raise UserError("--audit attacks causal LMs on TOFU-format data (a TofuDataModule run)")
    spec = load_audit_spec(config or packaged_config("audit_tofu", ("audit",), "audit"))
    start = ((getattr(module, "network_spec", None) or {}).get("init_args") or {}).get("name_or_path")
    subjects = {"unlearned": module.network.cpu().eval(),
                "target": CausalLM(name_or_path=start) if start else None}
    world = Path(getattr(source, "path", "")).parent
    gold = world / f"retain_only_{getattr(source, 'forget_level', '')}"
    if (gold / "config.json").is_file():
        subjects["retain-only"] = CausalLM(name_or_path=str(gold))
    base = world / "base"  # the world's layout: the model the target was fine-tuned from
    reference = str(base) if (base / "config.json").is_file() else None
    out = Path(launched.run.path if launched.run is not None else ".") / "audit"
    say(f"== the audit of this run's final weights ({', '.join(k for k, v in subjects.items() if v is not None)}) ==")
    report = run_audit(subjects, dm.tokenizer, source, spec, out, template=getattr(dm.formatter, "template", "plain"),
                       reference_model=reference, reads=module.reads_statistics)
    say(report.table())
    say(f"AUDIT: {report.results['unlearned']['verdict']['headline']}")
    say(f"(written to {out}/audit.md, {out}/audit.json)")
    return report
