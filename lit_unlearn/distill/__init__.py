"""The distillation stage after unlearning (`--distill`): the unlearned model distilled into a shrunk and perturbed
copy of itself on retain and general-knowledge data, then judged by the full verdict."""

from lit_unlearn.distill.spec import DistillSpec, load_distill_spec
from lit_unlearn.distill.stage import distill_finished_run, distill_model, finetune_units

__all__ = ["DistillSpec", "load_distill_spec", "distill_finished_run", "distill_model", "finetune_units"]
