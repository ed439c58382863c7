"""The memory model's parameter count (benchmarks/llm_scale/llama2_7b_memory.py) against transformers' own model on
the meta device, and the terms that distinguish ZeRO-2 from ZeRO-3 and one method from another."""

import pytest
import torch

from helpers import benchmark_script

memory = benchmark_script("llm_scale/llama2_7b_memory")


@pytest.mark.parametrize("cfg", [memory.LLAMA2_7B, {**memory.LLAMA2_7B, "num_hidden_layers": 1},
                                 {"vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632,
                                  "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4}])
def test_parameter_count_equals_transformers_on_the_meta_device(cfg):
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(**cfg, tie_word_embeddings=False))
    parts = memory.llama_parameters(cfg)
    assert parts["total"] == sum(p.numel() for p in model.parameters())
    assert parts["embedding"] == model.model.embed_tokens.weight.numel()
    assert parts["largest"] == max(p.numel() for p in model.parameters())


def test_terms_follow_the_stage_the_dtype_and_the_method():
    cfg, gib = {**memory.LLAMA2_7B, "num_hidden_layers": 1}, 1024**3
    n = memory.llama_parameters(cfg)["total"]

    def terms(stage, method, **kw):
        return memory.rank_memory(memory.Setting(cfg, stage, 2, method, baseline=0.0, **kw))

    z2, z3 = terms(2, "hamu", weight_bytes=4), terms(3, "hamu", weight_bytes=4)
    assert z2["weights (full)"] == 4 * n and z3["weights (partitions)"] == 4 * n / 2
    assert z2["fp32 master"] == z3["fp32 master"] == 4 * n / 2  # a separate copy in fp32 too
    assert terms(3, "hamu")["gradient partition"] == 2 * n / 2  # ZeRO-3 reduces in bf16, ZeRO-2 keeps fp32
    assert terms(2, "hamu")["gradient partition"] == 4 * n / 2
    assert terms(3, "graddiff")["the method's own"] == terms(3, "hamu")["the method's own"]  # both keep g_r
    assert terms(3, "npo")["optimizer state"] == 8 * n / 2  # AdamW
    assert terms(3, "npo", optimizer="sgd")["optimizer state"] == 0
    assert terms(3, "hamu", gloo=True)["gloo reduce-scatter buffers"] == 1.5 * 2 * n  # CPU only
    assert terms(3, "hamu")["gloo reduce-scatter buffers"] == 0
    fp32 = terms(3, "hamu", weight_bytes=4, gloo=True)  # the measured setting: the reduction is the peak
    states = sum(v for k, v in fp32.items() if k in ("weights (partitions)", "fp32 master", "gradient partition",
                                                     "optimizer state", "the method's own", "reduce bucket"))
    assert fp32["peak phase"] == "reduction"
    assert fp32["peak"] == states + fp32["reduce-scatter flat copy"] + fp32["gloo reduce-scatter buffers"]
    assert z3["reduce bucket"] == 4 * n < 4 * 5e8  # touched up to the trained elements
    assert 8 * gib < terms(3, "ofmu", weight_bytes=4)["the method's own"] < 16 * gib
