"""HAMU's two passes over the full gradients -- the float64 statistics and the combination δ = a·g_f + b·g_r -- as
eager PyTorch (the trainer's default) against the same arithmetic fused by torch.compile into one kernel each
(`fused_passes=True`), side by side on one device. bf16 gradients of a Llama-2-7B-like layout, scaled by --scale.

    python benchmarks/hamu/fused_passes.py [--device cuda] [--scale 0.1] [--repeats 5]

Prints the median time of each and the ratio, and how far the fused results are from the eager ones.
"""

from __future__ import annotations

import sys
from pathlib import Path
import time

import torch

from lit_unlearn.algorithms import combine_into, tensor_stats
from lit_unlearn.algorithms.fused_passes import fused_combine_into, fused_tensor_stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from hamu.combine_speed import median_time  # noqa: E402
from report import options  # benchmarks/report.py

# (rows, cols, count) of Llama-2-7B's weight matrices: embedding and head, then 32 layers of q, k, v, o, gate, up, down
LAYOUT = [(32000, 4096, 2), (4096, 4096, 4 * 32), (11008, 4096, 3 * 32)]


def main() -> None:
    ap = options(__doc__, full=True, write=False)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--scale", type=float, default=0.1, help="fraction of the 7B layout's tensors to build")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    dev = args.device
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    g = torch.Generator(device=dev).manual_seed(0)
    shapes = [(r, c) for r, c, k in LAYOUT for _ in range(max(1, round(k * args.scale)))]
    gr = [torch.randn(s, generator=g, device=dev).to(torch.bfloat16) for s in shapes]
    gf = [torch.randn(s, generator=g, device=dev).to(torch.bfloat16) for s in shapes]
    n = sum(t.numel() for t in gr)
    # the trainer's own passes (lit_unlearn.algorithms.fused_passes), eager and fused
    coef_f = torch.full((len(gr),), -0.731, dtype=torch.float64, device=dev)
    coef_r = torch.full((len(gr),), 0.298, dtype=torch.float64, device=dev)
    work = [torch.float32] * len(gr)
    fused_c, outs = [t.clone() for t in gf], [t.clone() for t in gf]
    t0 = time.perf_counter()
    fused_s = torch.stack(fused_tensor_stats(gr, gf))
    fused_combine_into(fused_c, gf, gr, coef_f, coef_r, work)
    sync()
    compile_s = time.perf_counter() - t0
    eager_s = torch.stack(tensor_stats(gr, gf))
    combine_into(outs, gf, gr, coef_f.tolist(), coef_r.tolist(), work)
    rel = ((fused_s - eager_s).abs() / eager_s.abs().clamp_min(1e-300)).max().item()
    steps = max((a.view(torch.int16).int() - b.view(torch.int16).int()).abs().max().item()
                for a, b in zip(fused_c, outs))
    t_es = median_time(lambda: tensor_stats(gr, gf), args.repeats, sync)
    t_fs = median_time(lambda: fused_tensor_stats(gr, gf), args.repeats, sync)
    t_ec = median_time(lambda: combine_into(outs, gf, gr, coef_f.tolist(), coef_r.tolist(), work), args.repeats,
                       sync)
    t_fc = median_time(lambda: fused_combine_into(fused_c, gf, gr, coef_f, coef_r, work), args.repeats, sync)
    print(f"{dev}: {len(gr)} bf16 tensors, {n / 1e9:.2f} B elements (first compile {compile_s:.1f} s)")
    print(f"  statistics: eager {t_es * 1e3:.1f} ms, fused {t_fs * 1e3:.1f} ms, ratio {t_fs / t_es:.3f}; "
          f"largest relative difference {rel:.1e}")
    print(f"  combination: eager {t_ec * 1e3:.1f} ms, fused {t_fc * 1e3:.1f} ms, ratio {t_fc / t_ec:.3f}; "
          f"results differ by ≤ {steps} bf16 step")


if __name__ == "__main__":
    main()
