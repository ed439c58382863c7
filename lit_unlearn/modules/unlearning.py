"""Shared glue for unlearning trainers (manual optimization over (retain, forget) batch pairs).

A subclass implements `unlearning_step(retain_batch, forget_batch) -> dict of scalars to log`. This base loads the
target weights, keeps BatchNorm statistics frozen (the paper's setting), computes the task loss of the global batch
and turns a NaN/inf loss into a clear error, and owns the training step and the checkpointed state. Its other jobs
live in their own pieces:
- per-loss gradients and updates, unsharded or under ZeRO: `GradientAccess` (modules/gradient_access.py);
- the eval splits before training and at each validation: `EvalSplitMetrics` (modules/eval_splits.py);
- the before/after report when fitting ends, and what callbacks add to it: `self.run_report`, a `RunReport`
  (modules/run_report.py).
"""

from __future__ import annotations

from typing import ClassVar

import contextlib
from collections.abc import Iterator

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from lit_unlearn.algorithms.losses import IGNORE_INDEX, mean_nll
from lit_unlearn.core.batches import batch_size, is_token_batch, logits_and_labels
from lit_unlearn.storage.checkpoints import load_network_weights
from lit_unlearn.distributed.sharded_grads import zero_stage
from lit_unlearn.core.errors import UserError
from lit_unlearn.core.plug_points import MicroBatched, UnlearningRun, as_plug
from lit_unlearn.data.micro_batches import micro_batch_parts, share_of
from lit_unlearn.modules.eval_splits import EvalSplitMetrics
from lit_unlearn.modules.gradient_access import GradientAccess
from lit_unlearn.modules.run_report import RunReport

__all__ = ["UnlearningModule"]

_BN_TYPES = (nn.modules.batchnorm._BatchNorm,)


class UnlearningModule(GradientAccess, EvalSplitMetrics, pl.LightningModule, UnlearningRun):
    # The per-token statistics its forget objective reads (lit_unlearn.metrics.membership_attacks.STATISTICS): the
    # verdict is also given on the attacks that read none of them, which the objective cannot have been shaped to
    # pass. None: not declared, taken as every statistic but the learned attack's.
    READS: ClassVar[frozenset[str] | None] = None
    # Why its step cannot split a share into micro-batches (None: it computes its gradients through
    # GradientAccess.micro_gradients); a method, or an option, with backward passes of its own says why, and what to do.
    micro_batch_obstacle: str | None = None

    @property
    def reads_statistics(self) -> frozenset[str]:
        if self.READS is None:
            from lit_unlearn.metrics.membership_attacks import STATISTICS

            return frozenset(STATISTICS) - {"learned"}
        return self.READS

    def __init__(
        self,
        network: nn.Module,
        target_ckpt: str | None = None,
        freeze_batchnorm: bool = True,
        log_every_n_steps: int | None = None,
    ) -> None:
        """
        Args:
            network: the model to unlearn (e.g. `lit_unlearn.models.CifarResNet`).
            target_ckpt: weights of the trained target (a `lit-unlearn pretrain` checkpoint or a state dict).
            freeze_batchnorm: keep BatchNorm layers in eval mode while unlearning (running statistics frozen,
                affine parameters still updated), as in the HAMU paper.
            log_every_n_steps: compute the (cheap but not free) diagnostics every n steps; defaults to the
                Trainer's `log_every_n_steps`.
        """
        super().__init__()
        self.automatic_optimization = False
        self.network = network
        self.target_ckpt = target_ckpt
        if target_ckpt:
            load_network_weights(network, target_ckpt)
        self.freeze_batchnorm = freeze_batchnorm
        self._log_every = log_every_n_steps
        self.initial_eval: dict[str, dict[str, float]] | None = None
        self.final_eval: dict[str, dict[str, float]] | None = None
        self.val_metrics = nn.ModuleDict()
        self._eval_names: list[str] = []
        self._params: list[nn.Parameter] = []
        self.zero_stage = 0  # DeepSpeed ZeRO stage of the strategy, set in setup()
        self.network_spec: dict | None = None  # class_path/init_args of `network` when built from a config
        self.run_report = RunReport()  # the before/after table when fitting ends (callbacks add to it)
        self.history: list[dict[str, float]] = []  # every evaluation of the eval sets: before, then each validation
        # tokens of the retain and forget batches the steps read (token batches): a method's compute in token passes
        # is about 3 per token read (a forward and a backward pass each), more for methods with extra passes
        self.tokens_read = 0
        # equal micro-batches each side of this step's share is split into (the datamodule's micro_batch_size):
        # GradientAccess.micro_gradients sums their gradients
        self.micro_parts = 1

    # ----- hooks a subclass may override -------------------------------------------------------------------------
    def unlearning_step(self, retain_batch, forget_batch) -> dict[str, float | Tensor]:
        raise NotImplementedError

    def logits_and_labels(self, batch, network: nn.Module | None = None) -> tuple[Tensor, Tensor]:
        """(logits [B, ..., V], labels [B, ...]) of a batch under `network` (default: the model being unlearned).

        Images: (network(x), y). A causal-LM trainer returns shifted token logits and labels with
        IGNORE_INDEX on prompt/padding, and every loss in `lit_unlearn.algorithms.losses` works unchanged.
        """
        return logits_and_labels(network or self.network, batch)

    def compute_loss(self, batch) -> Tensor:
        """Mean task loss of the *global* batch: cross-entropy over every position that has a target.

        Token batches split over processes hold different numbers of answer tokens, so the average of the
        per-process token means is not the global token mean: rescale by the global token count (one
        all_reduce) so that the averaged gradient is the global batch's at any world size.
        """
        logits, labels = self.logits_and_labels(batch)
        loss = mean_nll(logits, labels)
        world = self.trainer.world_size if self._trainer is not None else 1
        distributed = world > 1 and dist.is_available() and dist.is_initialized()
        share = share_of(batch)  # a micro-batch: normalised by its whole share's token count, like one more rank
        if is_token_batch(batch) and (distributed or share is not None):
            local = (labels != IGNORE_INDEX).sum().to(torch.float64)
            total = local.clone() if share is None else torch.tensor(float(share.tokens), dtype=torch.float64,
                                                                      device=local.device)
            if distributed:
                dist.all_reduce(total)
            parts = share.parts if share is not None else 1
            loss = loss * (local * (world if distributed else 1) * parts / total).to(loss.dtype)
        return loss

    def item_losses(self, batch, with_entropy: bool = False, token_cap: float | None = None
                    ) -> tuple[Tensor, Tensor | None, float, Tensor | None]:
        """(each sequence's mean NLL [B], its mean predictive entropy [B] if asked, the global batch's sequence
        count, what a token cap left out [B] or None): per-item values whose sums divided by that count are means
        over the *global* batch under data parallelism. With `token_cap` τ the NLL is each sequence's mean of
        min(nll_t, τ) and the last value its mean of nll_t over the tokens past τ (losses.token_capped_nll), from
        the same forward pass."""
        from lit_unlearn.algorithms.losses import sequence_entropy, sequence_nll, token_capped_nll

        logits, labels = self.logits_and_labels(batch)
        token_past = None
        if token_cap is None:
            nll = sequence_nll(logits, labels)
        else:
            nll, token_past = token_capped_nll(logits, labels, token_cap)
        entropy = sequence_entropy(logits, labels) if with_entropy else None
        return nll, entropy, self.item_count(labels.shape[0], nll.device), token_past

    def hold_frozen_reference(self, reference: nn.Module) -> nn.Module:
        """Keep `reference` as `self._reference`: in eval mode, without gradients, and not a registered submodule, so
        checkpoints do not store a second model (a resumed run rebuilds it from the target as the first did)."""
        reference.eval()
        for p in reference.parameters():
            p.requires_grad_(False)
        object.__setattr__(self, "_reference", reference)
        return reference

    def item_count(self, local: int, device=None) -> float:
        """What a rank divides its sum of per-item values by so that the ranks' average is the global batch's
        mean: the global item count over the world size (the local count in one process). A micro-batch needs
        nothing more: the parts are equal, so their item means, averaged, are the share's."""
        count = float(local)
        world = self.trainer.world_size if self._trainer is not None else 1
        if world > 1 and dist.is_available() and dist.is_initialized():
            total = torch.tensor(count, dtype=torch.float64, device=device)
            dist.all_reduce(total)
            count = float(total) / world  # each rank's sum over count, averaged over ranks, is the global mean
        return count

    # ----- helpers for subclasses ----------------------------------------------------------------------------------
    @property
    def trainable_named_parameters(self) -> list[tuple[str, nn.Parameter]]:
        return [(n, p) for n, p in self.network.named_parameters() if p.requires_grad]

    def checked_loss(self, batch, which: str) -> Tensor:
        return self.checked(self.compute_loss(batch), which)

    def checked(self, loss: Tensor, which: str) -> Tensor:
        """`loss`, or a clear error if it is NaN/inf (says which loss, at which step, and what to try)."""
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"the {which} loss is {loss.item()} at step {self.global_step}: the model has diverged or the inputs "
                "contain NaN/inf. Lower the step size (eta / lr), check the data, or resume from an earlier checkpoint."
            )
        return loss

    def should_compute_diagnostics(self, steps_ahead: int = 0) -> bool:
        """Whether this step logs its diagnostics; `steps_ahead=1` asks before the optimizer step that counts it."""
        every = self._log_every or (self.trainer.log_every_n_steps if self._trainer is not None else 1) or 1
        return (self.global_step + steps_ahead) % every == 0

    @contextlib.contextmanager
    def preserved_buffers(self) -> Iterator[None]:
        """Extra forward passes (e.g. measuring a step's effect) must not move BatchNorm running statistics."""
        saved = [b.detach().clone() for b in self.network.buffers()]
        try:
            yield
        finally:
            with torch.no_grad():
                for b, s in zip(self.network.buffers(), saved):
                    b.copy_(s)

    # ----- Lightning plumbing ------------------------------------------------------------------------------------
    def train(self, mode: bool = True):
        super().train(mode)
        if mode:
            self._freeze_batchnorm()
        return self

    def _freeze_batchnorm(self) -> None:
        if self.freeze_batchnorm:
            for m in self.network.modules():
                if isinstance(m, _BN_TYPES):
                    m.eval()

    def setup(self, stage: str) -> None:
        self._params = [p for _, p in self.trainable_named_parameters]
        self.zero_stage = zero_stage(self.trainer.strategy) if self._trainer is not None else 0
        if not self._params:
            raise UserError("the network has no trainable parameters: nothing to unlearn")
        self.setup_eval_metrics()

    def configure_optimizers(self):
        # The trainer computes the whole update δ itself and writes p.grad = −δ; plain SGD with lr 1 applies it
        # (and gives Lightning an optimizer to count steps, checkpoint and, under sharding, to wrap).
        return torch.optim.SGD(self.optimized_parameters, lr=1.0)

    @property
    def optimized_parameters(self) -> list[nn.Parameter]:
        """What the optimizer steps: the trainable parameters (collected in setup, or now if it has not run)."""
        return self._params or [p for _, p in self.trainable_named_parameters]

    def training_step(self, batch, batch_idx: int):
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise UserError("unlearning trainers expect (retain_batch, forget_batch) pairs: use a PairedDataModule")
        retain_batch, forget_batch = batch
        self.micro_parts = self.micro_batch_parts(retain_batch, forget_batch)
        self.tokens_read += sum(int(b["attention_mask"].sum()) for b in (retain_batch, forget_batch)
                                if is_token_batch(b) and "attention_mask" in b)
        logs = self.unlearning_step(retain_batch, forget_batch)
        if logs:
            shown = {k: float(v) for k, v in logs.items() if k in ("train/forget_loss", "train/retain_loss")}
            rest = {k: float(v) for k, v in logs.items() if k not in shown}
            self.log_dict(shown, on_step=True, on_epoch=False, prog_bar=True)  # in the progress bar too
            if rest:
                self.log_dict(rest, on_step=True, on_epoch=False, prog_bar=False)

    def micro_batch_parts(self, retain_batch, forget_batch) -> int:
        """Into how many equal micro-batches this step's share is split (the datamodule's micro_batch_size; 1 when
        it has none or the module runs without a datamodule)."""
        datamodule = self.trainer.datamodule if self._trainer is not None else None
        plug = as_plug(datamodule, MicroBatched)
        size = plug.micro_batch_size if plug is not None else None
        if size is None:
            return 1
        parts = micro_batch_parts(batch_size(retain_batch), batch_size(forget_batch), size)
        if parts > 1 and self.micro_batch_obstacle:
            raise UserError(f"{type(self).__name__} cannot split a step into micro-batches ({self.micro_batch_obstacle}"
                            f"): set data.init_args.micro_batch_size to null, and lower the global batch or add GPUs "
                            f"if a process's share does not fit")
        return parts

    def on_train_start(self) -> None:
        self.evaluate_start()
        # Lightning does not call .train() when fitting starts (and the evaluation above restored the modes):
        # freeze here; validation loops restore per-module modes afterwards, so this holds for the whole fit.
        self._freeze_batchnorm()

    def print_once(self, msg: str) -> None:
        rank_zero_info(msg)

    def on_fit_end(self) -> None:
        self.final_eval = self.run_report.write(self, self.eval_loaders())

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["unlearning_initial_eval"] = self.initial_eval
        checkpoint["unlearning_history"] = self.history
        checkpoint["network_spec"] = self.network_spec  # what `lit-unlearn export` rebuilds the network from
        checkpoint["unlearning_tokens_read"] = self.tokens_read

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.initial_eval = checkpoint.get("unlearning_initial_eval")
        self.history = list(checkpoint.get("unlearning_history") or [])
        self.tokens_read = int(checkpoint.get("unlearning_tokens_read", 0))
