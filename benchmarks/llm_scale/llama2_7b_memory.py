"""Per-rank memory of the unlearning methods on Llama-2 models under DeepSpeed ZeRO-2 / ZeRO-3: a model with one
named term per buffer, for any depth, precision and device (no GPU needed to compute it).

`rank_memory` is checked against measured peaks at Llama-2-7B's real width on CPU (benchmarks/llm_scale/llama2_7b_width_cpu.py,
fp32, 2 processes, 1 layer); the GPU table this script prints is computed from the same terms in bf16.

The terms (elements n of the network, d ranks, w bytes per weight: 2 bf16, 4 fp32; DeepSpeed's defaults
reduce_bucket_size 5e8, stage3_max_live_parameters 1e9, each in elements):
- model states. ZeRO-3: w·n/d weight partitions; an fp32 master copy 4n/d (a separate copy in fp32 runs too: the
  storages of DeepSpeed 0.19.8's fp16_ and fp32_partitioned_groups_flat differ; the first version of this model
  assumed they alias, and measured 1.12× at 7B width); a w·n/d gradient partition buffer (DeepSpeed accumulates in the model dtype unless
  grad_accum_dtype says otherwise). ZeRO-2: the full weights w·n; the fp32 master partition 4n/d (a clone, in fp32
  too); the fp32 gradient partition 4n/d. Optimizer state: 8n/d for AdamW, none for
  plain SGD (HAMU's and OFMU's configs, and GradDiff here).
- the method's own slices: HAMU one copy of its g_r slices, in the gradient partition's dtype, and so does GradDiff
  (the same two backward passes: g_r is kept while g_f is computed; HAMU adds only float64 statistics over chunks
  of 4M elements); OFMU 12 fp32 slices at its peak inside the outer HVP
  (∇Φ, g_r and the HVP's vectors, and in the nested ∇Φ evaluation g_f, g_r, a, b, a unit vector and the ±h
  gradients) plus copies of the weight slices at the round's start and at the shift (2·w·n/d); NPO and RMU a frozen
  reference: w·n/d under ZeRO-3 (sharded with the engine), w·n under ZeRO-2 (replicated).
- the gradient reduction, at the end of each backward: the reduce bucket w·min(bucket, n) holding the gradients.
  ZeRO-3 reduce-scatters it as one coalesced call over a second flat copy, and on CPU gloo's reduce-scatter needs
  working buffers of 1.5× its input (measured in a side experiment with torch 2.13's gloo backend; 0 on GPUs, where
  NCCL works in place). ZeRO-2 reduces to each destination rank in turn over a flat copy of that rank's slices,
  w·min(bucket, n)/d (gloo's reduce is in place, measured the same way), and with overlap_comm it keeps the
  gradients of the other ranks' parameters until the next reduction clears them, w·min(bucket, n)·(d−1)/d (found by
  a census of the tensors resident at the ZeRO-2 peak, benchmarks/llm_scale/llama2_7b_width_cpu.py WIDTH_CENSUS_AT: each rank
  held 0.87 GiB of the other rank's gradients besides the bucket).
- ZeRO-3's gathered weights, during forward and backward: w·min(max_live, n) (parameters stay gathered while they
  will be used again soon, up to stage3_max_live_parameters), plus the largest gradient before it enters the bucket.
- activations with gradient checkpointing (one layer input kept per layer, one layer's working set live:
  ≈ 34·b·s·h·w/2 + 5·b·heads·s²·w/2 bytes, Korthikanti et al. 2022), fp32 logits and their gradient.
The peak is the model states and the bucket plus the larger of the two phases' own buffers (gathered weights, the
largest gradient and activations while computing; the reduction's copies), over a process baseline (the interpreter and the imported libraries: measured on CPU, about 1 GB on GPUs with CUDA).

    python benchmarks/llm_scale/llama2_7b_memory.py [--gpus 8] [--micro-batch 4] [--seq 512]
"""

from __future__ import annotations

import sys
from pathlib import Path
from dataclasses import dataclass

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py, process_pool.py, the folders
from report import options  # benchmarks/report.py

GB = 1024**3
LLAMA2_7B = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 32}
DEEPSPEED_DEFAULTS = {"reduce_bucket_size": 5e8, "stage3_max_live_parameters": 1e9}
OPTIMIZER_STATE_BYTES = {"sgd": 0, "adamw": 8}
METHOD_OPTIMIZER = {"hamu": "sgd", "ofmu": "sgd", "graddiff": "sgd", "npo": "adamw", "rmu": "adamw"}
GLOO_REDUCE_SCATTER_FACTOR = 1.5  # extra bytes per input byte, measured (CPU only)


def llama_parameters(cfg: dict) -> dict[str, int]:
    """Element counts of a Llama model (untied head, no biases), by part."""
    v, h, f, layers = cfg["vocab_size"], cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    kv = h * cfg.get("num_key_value_heads", cfg["num_attention_heads"]) // cfg["num_attention_heads"]
    layer = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h
    return {"embedding": v * h, "head": v * h, "layers": layers * layer, "norm": h,
            "total": 2 * v * h + layers * layer + h, "largest": max(v * h, h * f)}


@dataclass
class Setting:
    cfg: dict
    stage: int                    # 2 or 3
    ranks: int
    method: str                   # hamu, ofmu, graddiff, npo, rmu
    weight_bytes: int = 2         # 2: bf16 (GPUs), 4: fp32 (CPU)
    micro_batch: int = 4          # sequences per rank per side (one side's activations live at a time)
    seq: int = 512
    baseline: float = 1.0 * GB    # the process before the model is built
    gloo: bool = False            # CPU collectives (gloo): reduce-scatter working buffers
    optimizer: str | None = None  # "sgd" or "adamw" (default: the method's packaged config's)
    weight_decay: bool = False    # torch SGD with weight decay builds grad + λ·w: one more gradient slice in its step
    trainable: int | None = None  # elements the optimizer updates (default all; RMU freezes the layers after ℓ)
    reduce_bucket_size: float = DEEPSPEED_DEFAULTS["reduce_bucket_size"]
    max_live_parameters: float = DEEPSPEED_DEFAULTS["stage3_max_live_parameters"]


def rank_memory(s: Setting) -> dict[str, float]:
    """Bytes per rank, term by term, and the peak (see the module docstring)."""
    p = llama_parameters(s.cfg)
    n, d, w = p["total"], s.ranks, s.weight_bytes
    h, v, layers = s.cfg["hidden_size"], s.cfg["vocab_size"], s.cfg["num_hidden_layers"]
    k = n if s.trainable is None else s.trainable  # what has gradients, a master copy and optimizer state
    t: dict[str, float] = {"process baseline": s.baseline}
    if s.stage == 3:
        t["weights (partitions)"] = w * n / d
    else:
        t["weights (full)"] = w * n
    grad = w if s.stage == 3 else 4  # ZeRO-3 reduces into the model dtype; ZeRO-2 keeps its partition in fp32
    t["fp32 master"] = 4 * k / d  # a copy of the partitions, in fp32 too
    t["gradient partition"] = grad * k / d
    optimizer = s.optimizer or METHOD_OPTIMIZER[s.method]
    t["optimizer state"] = OPTIMIZER_STATE_BYTES[optimizer] * k / d + (grad * k / d if s.weight_decay and
                                                                      optimizer == "sgd" else 0.0)
    own = {"hamu": grad * k / d, "ofmu": 12 * 4 * k / d + 2 * w * k / d, "graddiff": grad * k / d,
           "npo": w * n / d if s.stage == 3 else w * n}
    own["rmu"] = own["npo"]
    t["the method's own"] = own[s.method]
    bucket = w * min(s.reduce_bucket_size, k)
    t["reduce bucket"] = bucket  # filled during backward, reduced when full and at the backward's end
    if s.stage == 3:  # one coalesced reduce-scatter of the whole bucket, over a flat copy of it
        reduction = {"reduce-scatter flat copy": bucket,
                     "gloo reduce-scatter buffers": GLOO_REDUCE_SCATTER_FACTOR * bucket if s.gloo else 0.0}
    else:  # one reduce per destination rank over a flat copy of that rank's slices (gloo's reduce is in place);
        # with overlap_comm the gradients of the other ranks' parameters stay alive until the next reduction
        reduction = {"per-destination flat copy": bucket / d, "other ranks' gradients, kept": bucket * (d - 1) / d}
    b, sq, heads = s.micro_batch, s.seq, s.cfg["num_attention_heads"]
    activations = (layers * b * sq * h * w + 34 * b * sq * h * w / 2 + 5 * b * heads * sq * sq * w / 2
                   + 2 * 4 * b * sq * v)
    computing = {"activations and logits": activations, "largest gradient": w * p["largest"]}
    if s.stage == 3:
        computing["gathered weights"] = w * min(s.max_live_parameters, n)
    states = sum(t.values())
    t.update(reduction)
    t.update(computing)
    t["peak"] = states + max(sum(reduction.values()), sum(computing.values()))
    t["peak phase"] = "reduction" if sum(reduction.values()) >= sum(computing.values()) else "computing"
    return t


def main() -> None:
    ap = options(__doc__, full=True, write=False)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--micro-batch", type=int, default=4, help="sequences per GPU per side (retain, forget)")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--json", help="also write the computed table here (benchmarks/llm_scale/gpu_check.sh compares with it)")
    args = ap.parse_args()
    n = llama_parameters(LLAMA2_7B)["total"]
    print(f"Llama-2-7B: {n:,} parameters; {args.gpus} GPUs, bf16; micro-batch {args.micro_batch} × {args.seq} "
          "tokens per side. Computed from benchmarks/llm_scale/llama2_7b_memory.py's terms, which are checked against "
          "measured peaks at 7B width on CPU (docs/findings/llm-scale.md).")
    results = {}
    for method in ("hamu", "graddiff", "ofmu", "npo", "rmu"):
        for stage in (2, 3):
            trainable = None
            if method == "rmu":  # the packaged config: layer 7, trainable ".*": the embedding and layers 0..7
                parts = llama_parameters({**LLAMA2_7B, "num_hidden_layers": 8})
                trainable = parts["embedding"] + parts["layers"]
            m = rank_memory(Setting(LLAMA2_7B, stage, args.gpus, method, micro_batch=args.micro_batch, seq=args.seq,
                                    trainable=trainable))
            name = f"{method.upper() if method in ('hamu', 'ofmu', 'npo', 'rmu') else 'GradDiff'} ZeRO-{stage}"
            results[name] = m["peak"] / GB
            own = m["the method's own"] / GB
            print(f"  {name:15s} {m['peak'] / GB:6.1f} GiB/GPU (the method's own {own:5.1f} GiB;"
                  f" peak while {m['peak phase']})")
    if args.json:
        import json
        from pathlib import Path

        Path(args.json).write_text(json.dumps({"gpus": args.gpus, "micro_batch": args.micro_batch, "seq": args.seq,
                                               "parameters": n, "computed_gb_per_gpu": results}, indent=1))


if __name__ == "__main__":
    main()
