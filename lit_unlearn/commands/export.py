"""`lit-unlearn export CKPT OUT`: any checkpoint of an LLM run as a Hugging Face folder other tools load."""

from __future__ import annotations

from lit_unlearn.commands import command


@command("export", "a checkpoint of an LLM run (plain, DeepSpeed ZeRO sharded, LoRA) as a Hugging Face folder",
         order=60, positional=("checkpoint", "out"),
         examples=("lit-unlearn export runs/tofu/hamu/latest/checkpoints/last.ckpt hamu_hf",
                   "lit-unlearn export runs/tofu7b/hamu/version_0/checkpoints/step=100.ckpt out --base "
                   "open-unlearning/tofu_Llama-2-7b-chat-hf_full"))
def export(checkpoint: str, out: str, base: str | None = None, tokenizer: str | None = None, adapter: bool = False,
           max_shard_size: str = "5GB") -> None:
    """Write a checkpoint of an LLM unlearning run as a Hugging Face folder (safetensors, sharded above
    --max-shard-size, config, tokenizer) that `AutoModelForCausalLM.from_pretrained(OUT)` loads with nothing from
    lit-unlearn installed. A DeepSpeed ZeRO-2/3 sharded checkpoint folder is consolidated on this machine, whatever
    GPUs and world size the run used; a LoRA run is merged into the base weights (--adapter keeps the adapter).

    Args:
        checkpoint: a .ckpt file, or a DeepSpeed sharded checkpoint folder (`…/checkpoints/step=N.ckpt/`)
        out: the Hugging Face folder to write (replaced if it exists)
        base: the Hugging Face model the run started from (default: the one the checkpoint records)
        tokenizer: tokenizer folder or hub name (default: the base's)
        adapter: for a LoRA run, save the peft adapter instead of merged weights
        max_shard_size: largest safetensors file (e.g. 5GB, 500MB)
    """
    from lit_unlearn.models.checkpoint_export import export_checkpoint

    folder = export_checkpoint(checkpoint, out, base, tokenizer, adapter, max_shard_size)
    print(f"exported {checkpoint} to {folder} (AutoModelForCausalLM.from_pretrained({str(folder)!r}))")
