"""Lightning's DeepSpeedStrategy on CPU processes (gloo), for testing sharded training without a GPU.

The stock strategy refuses anything but CUDA; DeepSpeed itself runs on CPU with its CPU accelerator. This
subclass only (1) skips the CUDA check, (2) skips the CUDA device-index validation and (3) passes the local
rank as DeepSpeed's device rank, and (4) keeps DeepSpeed from compiling its shared-memory collectives extension
(`shm_comm`: about 76 CPU-seconds on a clean machine, and it only speeds up collectives between CPU processes;
gloo carries them instead). On GPUs use the stock `lightning.pytorch.strategies.DeepSpeedStrategy`
(the packaged Llama-2-7B configs use `lit_unlearn.distributed.DeepSpeedStrategy`, which adds checkpoint
completion markers). It touches Lightning internals, which is one reason lightning is pinned.
"""

from __future__ import annotations

import argparse

from lightning.fabric.utilities.seed import reset_seed
from lightning.pytorch.strategies.ddp import DDPStrategy

from lit_unlearn.distributed.deepspeed_strategy import DeepSpeedStrategy

__all__ = ["CPUDeepSpeedStrategy"]


class CPUDeepSpeedStrategy(DeepSpeedStrategy):
    strategy_name = "deepspeed_cpu"

    def setup_environment(self) -> None:
        DDPStrategy.setup_environment(self)  # the parent's parent: no CUDA check

    def setup_distributed(self) -> None:
        import importlib

        # (4): gloo only; TorchBackend is built by the next call. Not `import deepspeed.comm.torch as m`: the package
        # rebinds its attribute `torch` to torch itself, so that form patches torch and leaves DeepSpeed building.
        ds_torch_comm = importlib.import_module("deepspeed.comm.torch")
        ds_torch_comm.build_shm_op = lambda: None
        reset_seed()
        self.set_world_ranks()
        self._init_deepspeed_distributed()

    def _setup_model_and_optimizer(self, model, optimizer, lr_scheduler=None):
        import deepspeed

        params = filter(lambda p: p.requires_grad, model.parameters())
        engine, ds_optimizer, _, _ = deepspeed.initialize(
            args=argparse.Namespace(device_rank=self.local_rank), config=self.config, model=model,
            model_parameters=params, optimizer=optimizer, lr_scheduler=lr_scheduler, dist_init_required=False)
        return engine, ds_optimizer
