"""Per-GPU memory of HAMU and OFMU on Llama-2-7B under DeepSpeed ZeRO-2 / ZeRO-3, computed (no GPU needed).

Counts the parameters exactly (the Llama-2-7B architecture built on the meta device) and applies ZeRO's
accounting for bf16 weights, an fp32 master copy (the optimizer is plain SGD without momentum: no other
state) and gradients, plus what each method adds on this rank's slices:
- HAMU: an fp32 copy of g_r (the update is combined in place in g_f's);
- OFMU (hvp="finite_difference"), at its peak inside the outer HVP: ∇Φ and g_r at θ, the HVP's unit vector and
  its +h result, and inside the nested ∇Φ evaluation g_f, g_r, a, b (or its HVP result), a unit vector and the
  ±h gradients: 11 fp32 slices; plus bf16 copies of the weight slices at the round's start and at the shift
  (one fp32-equivalent): 12 fp32 slices in all.
Activations are estimated for gradient checkpointing (one layer input kept per layer, one layer's full
activations live).

    python benchmarks/llama2_7b_memory.py [--gpus 8] [--micro-batch 4] [--seq 512]
"""

from __future__ import annotations

import argparse

import torch

GB = 1024**3


def llama2_7b_params() -> int:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    return sum(p.numel() for p in model.parameters()), cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--micro-batch", type=int, default=4, help="sequences per GPU per side (retain, forget)")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--json", help="also write the computed table here (benchmarks/gpu_check.sh compares with it)")
    args = ap.parse_args()
    n, cfg = llama2_7b_params()
    d = args.gpus
    weights_bf16, master_fp32, grads_bf16, hamu_fp32 = 2 * n, 4 * n, 2 * n, 4 * n  # bytes over all GPUs
    # Activations with checkpointing: per layer the bf16 input (b·s·h), plus one layer's working set
    # (≈ 34·b·s·h bytes + 5·b·heads·s² for attention scores in bf16, Korthikanti et al. 2022).
    b, s, h = args.micro_batch, args.seq, cfg.hidden_size
    act = cfg.num_hidden_layers * 2 * b * s * h + 34 * b * s * h + 5 * b * cfg.num_attention_heads * s * s
    logits = 4 * b * s * cfg.vocab_size  # fp32 logits for the loss
    ofmu_fp32 = 12 * 4 * n  # OFMU's peak working set of fp32 slices (module docstring)
    rows = {
        "HAMU ZeRO-2": (weights_bf16 + (master_fp32 + grads_bf16 + hamu_fp32) / d, hamu_fp32 / d),
        "HAMU ZeRO-3": ((weights_bf16 + master_fp32 + grads_bf16 + hamu_fp32) / d, hamu_fp32 / d),
        "OFMU ZeRO-2": (weights_bf16 + (master_fp32 + grads_bf16 + ofmu_fp32) / d, ofmu_fp32 / d),
        "OFMU ZeRO-3": ((weights_bf16 + master_fp32 + grads_bf16 + ofmu_fp32) / d, ofmu_fp32 / d),
    }
    print(f"Llama-2-7B: {n:,} parameters; {d} GPUs; micro-batch {b} × {s} tokens per side")
    print(f"  activations (checkpointed, one side at a time) ≈ {act / GB:.1f} GB, fp32 logits {logits / GB:.1f} GB")
    results = {}
    for name, (states, own) in rows.items():
        total = states + act + logits
        results[name] = total / GB
        print(f"  {name}: model states {states / GB:5.1f} GB/GPU (the method's own working set {own / GB:.1f}"
              f" GB of it), with activations ≈ {total / GB:5.1f} GB/GPU of 80")
    print(f"  KL / NPO / SCRUB also keep a frozen bf16 reference model: +{weights_bf16 / GB:.1f} GB/GPU (replicated)")
    if args.json:
        import json
        from pathlib import Path

        Path(args.json).write_text(json.dumps({"gpus": d, "micro_batch": b, "seq": s, "parameters": n,
                                               "computed_gb_per_gpu": results}, indent=1))


if __name__ == "__main__":
    main()
