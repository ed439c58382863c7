"""RMU baseline (Li et al. 2024, WMDP): steer the activations of one layer on forget tokens towards a fixed
random direction, and keep them equal to the frozen model's on retain tokens.

loss = γ·MSE(h_ℓ(forget), c·u) + α·MSE(h_ℓ(retain), h_ℓ^ref(retain)), both averaged over answer tokens;
h_ℓ is the output of decoder layer ℓ, read with a forward hook; u ~ U[0,1)^d normalised once (seeded), c the
steering coefficient. Only the parameters matching `trainable` move (WMDP: mlp.down_proj of layers ℓ−2..ℓ).
Defaults are the WMDP paper's for Llama-class 7B models (ℓ = 7, c = 20, α = 100, lr 5e-5); open-unlearning's
TOFU config instead uses c = 2, α = 1 and trains every parameter (`trainable: ".*"`).
"""

from __future__ import annotations

import re

import torch
from torch import Tensor, nn

from lit_unlearn.algorithms.losses import IGNORE_INDEX, activation_mse, rmu_control_vector
from lit_unlearn.core.batches import is_token_batch
from lit_unlearn.core.errors import UserError
from lit_unlearn.modules.objective import ObjectiveUnlearningModule

__all__ = ["RMUModule", "find_layer", "layer_count"]

_LAYER_LIST = re.compile(r"(?:^|\.)layers$")


def layer_count(network: nn.Module) -> int:
    for name, module in network.named_modules():
        if _LAYER_LIST.search(name) and isinstance(module, nn.ModuleList):
            return len(module)
    raise UserError("RMU needs a decoder with a `layers` ModuleList (a Hugging Face causal LM); set module_regex "
                    "to the module whose output RMU should steer")


def find_layer(network: nn.Module, pattern: str) -> tuple[str, nn.Module]:
    """The one module whose name matches `pattern` (re.search); a clear error for none or several."""
    found = [(n, m) for n, m in network.named_modules() if n and re.search(pattern, n)]
    if len(found) != 1:
        what = "no module" if not found else f"{len(found)} modules ({', '.join(n for n, _ in found[:4])}, …)"
        raise UserError(f"module_regex {pattern!r} matches {what}: it must name exactly one layer")
    return found[0]


class _Capture:
    """Forward hook that keeps a module's output (the hidden states when it returns a tuple)."""

    def __init__(self, module: nn.Module) -> None:
        self.value: Tensor | None = None
        self.handle = module.register_forward_hook(self)

    def __call__(self, module, inputs, output) -> None:
        self.value = output[0] if isinstance(output, (tuple, list)) else output

    def take(self) -> Tensor:
        value, self.value = self.value, None
        if value is None:
            raise RuntimeError("the RMU layer was not run by the forward pass")
        return value


class RMUModule(ObjectiveUnlearningModule):
    READS = frozenset({"activations"})  # hidden activations on forget items
    uses_reference = True

    def __init__(self, network: nn.Module, lr: float = 5e-5, layer: int = 7, steering: float = 20.0,
                 retain_weight: float = 100.0, forget_weight: float = 1.0, module_regex: str | None = None,
                 trainable: str | None = None, control_seed: int = 0, optimizer: str = "adamw", **kwargs) -> None:
        """
        Args:
            layer: ℓ, the decoder layer whose output is steered (default 7, WMDP's choice for 7B models).
            steering: c, the norm of the random target activation.
            retain_weight: α, the weight of the retain activation-matching term.
            forget_weight: γ, the weight of the forget steering term.
            module_regex: the steered module, if not `layers.{layer}` (matched with re.search, exactly one).
            trainable: regex of the parameters that move (default: mlp.down_proj.weight of layers ℓ−2..ℓ;
                ".*" trains everything, as open-unlearning's TOFU config does).
            control_seed: seed of the random direction u (fixed, so a resumed run steers to the same vector).
        """
        n_layers = None if module_regex else layer_count(network)
        if n_layers is not None and not 0 <= layer < n_layers:
            raise UserError(f"RMU layer={layer}, but the model has {n_layers} decoder layers (0..{n_layers - 1}): "
                            "set model.init_args.layer")
        module_regex = module_regex or rf"(?:^|\.)layers\.{layer}$"
        layer_name, _ = find_layer(network, module_regex)
        if trainable is None:
            first = max(0, layer - 2)
            trainable = rf"(?:^|\.)layers\.({'|'.join(str(i) for i in range(first, layer + 1))})\.mlp\.down_proj\.weight$"
        names = [n for n, _ in network.named_parameters()]
        # Parameters after layer ℓ (later layers, final norm, LM head) cannot change h_ℓ: frozen, so that
        # trainable=".*" does not leave DDP waiting for gradients that never come.
        upstream = len(names) if n_layers is None else \
            1 + max(i for i, n in enumerate(names) if re.search(rf"(?:^|\.)layers\.{layer}\.", n))
        train = {n for n in names[:upstream] if re.search(trainable, n)}
        if not train:
            raise UserError(f"trainable={trainable!r} matches no parameter of the model up to the steered layer")
        for name, p in network.named_parameters():
            p.requires_grad_(name in train)
        super().__init__(network, lr=lr, optimizer=optimizer, **kwargs)
        if steering <= 0:
            raise UserError(f"RMU needs steering > 0, got {steering}")
        self.layer_name = layer_name
        self.steering, self.retain_weight, self.forget_weight = steering, retain_weight, forget_weight
        self.trainable_pattern, self.control_seed = trainable, control_seed
        self._control: Tensor | None = None

    # ----- activations ----------------------------------------------------------------------------------------------
    def activations(self, batch, network: nn.Module) -> Tensor:
        """Layer-ℓ output [B, T, d] of `network` on a token batch."""
        if not is_token_batch(batch):
            raise UserError("RMU steers a language model's hidden states: it needs token batches (TOFU / MUSE data)")
        capture = _Capture(dict(network.named_modules())[self.layer_name])
        try:
            network(batch["input_ids"], attention_mask=batch.get("attention_mask"))
        finally:
            capture.handle.remove()
        return capture.take()

    def control_vector(self, dim: int, like: Tensor) -> Tensor:
        if self._control is None or self._control.numel() != dim:
            self._control = rmu_control_vector(dim, self.steering, self.control_seed)
        return self._control.to(device=like.device, dtype=like.dtype)

    def objective(self, retain_batch, forget_batch):
        h_f = self.activations(forget_batch, self.network)
        forget_term = activation_mse(h_f, self.control_vector(h_f.shape[-1], h_f), forget_batch["labels"] != IGNORE_INDEX)
        h_r = self.activations(retain_batch, self.network)
        with torch.no_grad():
            h_ref = self.activations(retain_batch, self.reference)
        retain_term = activation_mse(h_r, h_ref, retain_batch["labels"] != IGNORE_INDEX)
        loss = self.forget_weight * forget_term + self.retain_weight * retain_term
        return loss, {"train/rmu_forget": forget_term.detach(), "train/rmu_retain": retain_term.detach()}
