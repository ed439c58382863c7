"""HAMU's combination δ = a·g_f + b·g_r for bf16 gradients: float32 arithmetic where its error bound allows
(combine_precision="auto", the default) against every bf16 block in float64 (combine_precision="float64", the
earlier implementation), side by side in one run on this machine's CPU (a GPU too where one is present).

    python benchmarks/hamu/combine_speed.py [--elements 50000000] [--repeats 5] [--device cuda]

Prints the median time of each and their ratio, and the largest difference between the two results in bf16 steps.
"""

from __future__ import annotations

import sys
from pathlib import Path
import time

import torch

from lit_unlearn.algorithms import combine_into

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import options  # benchmarks/report.py


def median_time(fn, repeats: int, sync) -> float:
    times = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = options(__doc__, full=True, write=False)
    ap.add_argument("--elements", type=int, default=50_000_000, help="one gradient tensor's size (bf16)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", action="append", choices=("cpu", "cuda"), help="default: the CPU and any GPU")
    args = ap.parse_args()
    devices = args.device or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        g = torch.Generator(device=device).manual_seed(0)
        gf = torch.randn(args.elements, generator=g, device=device).to(torch.bfloat16)
        gr = torch.randn(args.elements, generator=g, device=device).to(torch.bfloat16)
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        out = {}
        timed = {}
        for work in (torch.float32, torch.float64):
            o = gf.clone()
            timed[work] = median_time(lambda: combine_into([o], [gf], [gr], [-0.731], [0.298], [work]),
                                      args.repeats, sync)
            out[work] = o
        steps = (out[torch.float32].view(torch.int16).int() - out[torch.float64].view(torch.int16).int()).abs()
        print(f"{device}: {args.elements:,} bf16 elements; float32 arithmetic {timed[torch.float32] * 1e3:.1f} ms, "
              f"float64 {timed[torch.float64] * 1e3:.1f} ms, ratio float32/float64 "
              f"{timed[torch.float32] / timed[torch.float64]:.3f}; results differ by ≤ {steps.max().item()} bf16 "
              f"step in {(steps > 0).float().mean().item():.2e} of elements")


if __name__ == "__main__":
    main()
