"""The distillation stage's pieces against written-out references: shrink-and-perturb (UNDO's corruption) against
its formula and PyTorch's Xavier bound, the distillation loss against a per-position loop, the token-pass count
against the batches, and the stage end to end on the TOFU world (never a forget item read; compute counted)."""

import math

import pytest
import torch

from lit_unlearn.algorithms.losses import distillation_loss
from lit_unlearn.algorithms.shrink_perturb import shrink_perturb_, xavier_uniform_bound


def test_shrink_perturb_is_the_written_out_formula():
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(6, 4, generator=g), torch.randn(6, generator=g)
    params = [("w", w.clone()), ("b", b.clone())]
    share = shrink_perturb_(params, alpha=0.3, beta=0.5, generator=torch.Generator().manual_seed(7))
    noise = (torch.rand(6, 4, generator=torch.Generator().manual_seed(7)) * 2 - 1) * math.sqrt(6 / (4 + 6))
    torch.testing.assert_close(params[0][1], 0.7 * w + 0.3 * 0.5 * noise)
    torch.testing.assert_close(params[1][1], 0.7 * b)  # vectors only shrink
    assert share == 1.0 and xavier_uniform_bound(torch.Size([6, 4])) == pytest.approx(
        torch.nn.init._calculate_fan_in_and_fan_out(w)[0] ** 0 * math.sqrt(6 / 10))
    toward = {"w": torch.ones(6, 4), "b": torch.zeros(6)}
    params = [("w", w.clone()), ("b", b.clone())]
    shrink_perturb_(params, 0.25, toward=toward, where=lambda n: n == "w")
    torch.testing.assert_close(params[0][1], 0.75 * w + 0.25)
    torch.testing.assert_close(params[1][1], b)  # not picked
    with pytest.raises(ValueError):
        shrink_perturb_(params, 1.5)


def test_distillation_loss_equals_a_loop_over_positions():
    g = torch.Generator().manual_seed(1)
    s, t = torch.randn(2, 5, 7, generator=g, dtype=torch.float64), torch.randn(2, 5, 7, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    kl, ce, n = 0.0, 0.0, 0
    for i in range(2):
        for j in range(5):
            if mask[i, j]:
                p = torch.softmax(t[i, j] / 2.0, -1)
                q = torch.log_softmax(s[i, j], -1)
                kl += float((p * (p.log() - q)).sum())
                ce += float(-q[t[i, j].argmax()])
                n += 1
    assert distillation_loss(s, t, mask, temperature=2.0).item() == pytest.approx(kl / n)
    assert distillation_loss(s, t, mask, targets="hard").item() == pytest.approx(ce / n)
    assert distillation_loss(t, t, mask).item() == pytest.approx(0.0, abs=1e-12)


@pytest.mark.slow
def test_the_stage_distils_without_the_forget_set_and_counts_its_compute(tofu_world, tmp_path):
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tokenizer import load_tokenizer
    from lit_unlearn.distill import DistillSpec, distill_model
    from lit_unlearn.distill.stage import distillation_data
    from lit_unlearn.models import CausalLM

    source, tok = TofuSource(str(tofu_world.data), "01"), load_tokenizer(str(tofu_world.tokenizer))
    spec = DistillSpec(epochs=0.02, alpha=0.5)
    data = distillation_data(source, tok, spec)
    data.setup("fit")
    forget = {(r["question"], r["answer"]) for r in source.load_split("forget01")}
    assert not forget & {(r["question"], r["answer"]) for r in data.train_set.rows}
    tokens = sum(len(data.train_set[i]["input_ids"]) for i in range(len(data.train_set)))
    result = distill_model(tofu_world.target, source, tok, spec, tmp_path / "d")
    assert result["finetune_units"] == 3 * 8 * tokens == 3 * 8 * result["tokens_per_epoch"]
    steps = math.ceil(0.02 * len(data.train_set) / 8)
    assert result["steps"] == steps and 0 < result["units"] <= 4 * steps * 8 * 512
    assert result["compute_share"] == pytest.approx(result["units"] / result["finetune_units"])
    student = CausalLM(name_or_path=result["model"])
    teacher = CausalLM(name_or_path=str(tofu_world.target))
    with torch.no_grad():
        moved = [float((a - b).norm() / b.norm()) for (_, a), (_, b) in
                 zip(student.named_parameters(), teacher.named_parameters()) if b.dim() == 2]
    assert min(moved) > 0.2  # half-way to noise, a few steps of distillation later
    again = distill_model(tofu_world.target, source, tok, spec, tmp_path / "d")  # resumes: nothing more to do
    assert again["units"] == result["units"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = sorted((tmp_path / "d" / "tensorboard").rglob("events.out.tfevents.*"))
    assert events, "no TensorBoard events under d/tensorboard"
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    shares = acc.Scalars("distill/compute_share")  # TensorBoard shows the stage's cost as it runs
    assert {"distill/loss", "distill/units"} <= set(acc.Tags()["scalars"])
    assert shares[-1].value == pytest.approx(result["compute_share"], rel=0.2)


def test_the_stage_takes_its_strategy_from_its_config_and_keeps_its_own_schedule():
    """The packaged 7B config shards the student with DeepSpeed ZeRO-3 (the strategy builds from its mapping, as the
    launch path builds it); a config that sets what the stage derives itself (the step count, the logger) is refused
    in one line naming the key."""
    from lit_unlearn.core.errors import UserError
    from lit_unlearn.distill import DistillSpec
    from lit_unlearn.distill.spec import load_distill_spec
    from lit_unlearn.distributed import zero_stage
    from lit_unlearn.storage.packaged_files import packaged_config
    from lit_unlearn.storage.specs import build

    pytest.importorskip("deepspeed")
    spec = load_distill_spec(packaged_config("distill_llama2_7b_zero3", ("distill",)))
    assert zero_stage(build(spec.trainer["strategy"])) == 3
    assert spec.trainer["precision"] == "bf16-mixed" and spec.lr == pytest.approx(1e-5)
    assert load_distill_spec(packaged_config("distill_tofu", ("distill",))).trainer == {}
    for key in ("max_steps", "logger"):
        with pytest.raises(UserError, match=f"trainer.{key} is set by the stage"):
            DistillSpec(trainer={key: 3, "devices": 2})
