"""The machine a time was measured on, in the words every stated time uses: the instruction set torch dispatches to
(ATEN_CPU_CAPABILITY may lower it), the number of cores, and one thread's float32 matmul rate.

    python benchmarks/machine.py          → e.g. "AVX512, 2 cores, 61 GFLOPS a thread (float32 matmul)"
"""

from __future__ import annotations

import os
import time


def describe(seconds: float = 2.0, n: int = 1024) -> str:
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b  # warm-up
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        a @ b
        count += 1
    gflops = 2 * n ** 3 * count / (time.perf_counter() - started) / 1e9
    capability = torch.backends.cpu.get_cpu_capability()
    return f"{capability}, {os.cpu_count()} cores, {gflops:.0f} GFLOPS a thread (float32 matmul)"


if __name__ == "__main__":
    print(describe())
