"""Cost of one OFMU outer round in units of one plain backward pass, against the count the algorithm implies.

A round does T evaluations of ∇Φ (each: two gradients kept as graphs plus one double backward through
them for the cosine term) and one outer evaluation (∇Φ with its graph, then the HVP through it: a
third-order backward). Measured side by side in one run, on the same network and batches:
  u        one plain forward+backward of one batch (the unit),
  c_phi    one ∇Φ evaluation,
  c_outer  one ∇Φ-with-graph + HVP,
  round    one OFMU training step through Lightning (T inner + outer + the update).
Printed: round/u, the expected count (T·c_phi + c_outer)/u, their ratio (≈ 1: the trainer adds nothing
beyond the algorithm), and c_phi/u, c_outer/u against a rule of thumb (double backward ≈ 2u).

    python benchmarks/ofmu/round_cost.py [--inner-steps 5] [--rounds 6] [--batch 64] [--hvp autograd]
"""

from __future__ import annotations

import sys
from pathlib import Path
import logging
import statistics
import time
import warnings

import lightning.pytorch as pl
import torch
import torch.nn.functional as F

from lit_unlearn.algorithms.ofmu import phi_gradient_autograd
from lit_unlearn.models import CifarResNet
from lit_unlearn.modules import OFMUModule


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from hamu.step_overhead import StepTimer, SyntheticCifar  # noqa: E402
from report import options  # benchmarks/report.py


def _median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def components(net, batch, beta, repeats):
    params = [p for p in net.parameters() if p.requires_grad]
    (xr, yr), (xf, yf) = batch

    def plain():
        torch.autograd.grad(F.cross_entropy(net(xf), yf), params)

    def phi():
        phi_gradient_autograd(F.cross_entropy(net(xf), yf), F.cross_entropy(net(xr), yr), params, beta)

    def outer():
        pg = phi_gradient_autograd(F.cross_entropy(net(xf), yf), F.cross_entropy(net(xr), yr), params, beta,
                                   create_graph=True)
        torch.autograd.grad(pg.grad, params, grad_outputs=[g.detach() for g in pg.grad])

    return _median_time(plain, repeats), _median_time(phi, repeats), _median_time(outer, repeats)


def main() -> None:
    parser = options(__doc__, full=True, write=False)
    parser.add_argument("--inner-steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--beta", type=float, default=0.1)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)

    torch.manual_seed(0)
    net = CifarResNet(depth=args.depth, num_classes=10, in_channels=3).eval()  # BatchNorm frozen, as in training
    dm = SyntheticCifar(n=args.batch * (args.rounds + 2), batch=args.batch)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    before = components(net, batch, args.beta, repeats=3)

    timer = StepTimer()
    module = OFMUModule(net, inner_steps=args.inner_steps, inner_lr=1e-4, beta=args.beta, outer_lr=1e-4, rho=1.0)
    module.run_report.enabled = False
    trainer = pl.Trainer(max_steps=args.rounds + 1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                         callbacks=[timer], log_every_n_steps=1)
    trainer.fit(module, dm)
    rounds = timer.times[1:]  # drop the warm-up round
    after = components(module.network.eval(), batch, args.beta, repeats=3)

    u, c_phi, c_outer = (statistics.mean(pair) for pair in zip(before, after))  # bracket the fit: same load
    round_t = statistics.median(rounds)
    expected = args.inner_steps * c_phi + c_outer
    print(f"ResNet-{args.depth}, batch {args.batch}+{args.batch}, T = {args.inner_steps}, {len(rounds)} timed "
          f"rounds, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"  u (plain forward+backward)   {u * 1e3:8.1f} ms")
    print(f"  ∇Φ evaluation                {c_phi * 1e3:8.1f} ms = {c_phi / u:5.2f} u  (rule of thumb: 2 grads + "
          "double backward ≈ 4 u)")
    print(f"  ∇Φ with graph + HVP          {c_outer * 1e3:8.1f} ms = {c_outer / u:5.2f} u")
    print(f"  one outer round (measured)   {round_t * 1e3:8.1f} ms = {round_t / u:5.2f} u")
    print(f"  expected T·∇Φ + outer        {expected * 1e3:8.1f} ms = {expected / u:5.2f} u")
    print(f"round / expected: {round_t / expected:.3f} (1.0 = no cost beyond the algorithm's own passes)")


if __name__ == "__main__":
    main()
