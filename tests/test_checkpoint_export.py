"""`lit-unlearn export` without a sharded run: the streaming safetensors writer, LoRA runs (merged, or the adapter
alone) against the network they came from, and checkpoints that hold no causal-LM network. The 2-process ZeRO-3
export is tested in tests/test_deepspeed.py, a plain run's in tests/test_tofu_demo.py."""

import pytest
import torch

from lit_unlearn.data import train_bpe_tokenizer
from lit_unlearn.core.errors import UserError
from lit_unlearn.models import CausalLM, tiny_llama_config
from lit_unlearn.models.checkpoint_export import export_checkpoint


def test_export_materialises_one_tensor_at_a_time_and_writes_safetensors_transformers_reads(tmp_path):
    """The exporter plans shards from the sources' shapes and writes each file tensor by tensor: when a source is
    materialised, no earlier one is still alive; the files are named and indexed as transformers expects and load
    back exactly with safetensors itself (fp32 and bf16)."""
    import gc
    import json
    import weakref

    from safetensors.torch import load_file

    from lit_unlearn.models.checkpoint_export import _write_shards

    dtypes = [torch.float32, torch.bfloat16, torch.float32, torch.float32, torch.bfloat16]
    tensors = {f"layer{i}.weight": torch.randn(64, 48 + i, generator=torch.Generator().manual_seed(i)).to(dt)
               for i, dt in enumerate(dtypes)}
    alive, most = [], [0]

    class Lazy:  # what DeepSpeed's lazy consolidation hands over: shape, dtype, .contiguous() builds the tensor
        def __init__(self, t):
            self.t, self.shape, self.dtype = t, t.shape, t.dtype

        def contiguous(self):
            gc.collect()
            most[0] = max(most[0], sum(r() is not None for r in alive))
            out = self.t.clone()
            alive.append(weakref.ref(out))
            return out

    sizes = [t.numel() * t.element_size() for t in tensors.values()]
    limit = sizes[0] + sizes[1]
    assert _write_shards(((k, Lazy(v)) for k, v in tensors.items()), tmp_path, limit=limit, tied=False) == 5
    assert most[0] == 0  # every earlier tensor was released before the next was built
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    groups = [[0, 1], [2], [3], [4]]  # greedy under the limit: 12288 + 6272 bytes fit, 12800 + 13056 do not, ...
    assert files == [f"model-0000{i}-of-00004.safetensors" for i in (1, 2, 3, 4)]
    assert [index["weight_map"][f"layer{i}.weight"] for g in groups for i in g] == \
        [files[k] for k, g in enumerate(groups) for _ in g]
    assert sorted(p.name for p in tmp_path.glob("*.safetensors")) == files
    loaded = {k: v for f in files for k, v in load_file(str(tmp_path / f)).items()}
    assert loaded.keys() == tensors.keys()
    assert all(loaded[k].dtype == tensors[k].dtype and torch.equal(loaded[k], tensors[k]) for k in tensors)
    assert index["metadata"]["total_size"] == sum(sizes)
    one = tmp_path / "one"
    one.mkdir()
    assert _write_shards(iter(tensors.items()), one, limit=10 * sum(sizes), tied=True) == 5
    assert [p.name for p in one.iterdir()] == ["model.safetensors"]
    back = load_file(str(one / "model.safetensors"))
    assert all(torch.equal(back[k], tensors[k]) for k in tensors)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny Llama saved as a Hugging Face folder with its tokenizer: the model a LoRA run starts from."""
    folder = tmp_path_factory.mktemp("base")
    tok = train_bpe_tokenizer(["who wrote the book", "the author was born in a city by the sea"] * 4, folder,
                              vocab_size=300)
    CausalLM(config=tiny_llama_config(vocab_size=len(tok)), seed=0).save_pretrained(folder)
    return folder


def lora_checkpoint(base, tmp_path):
    """A LoRA run's Lightning checkpoint as the unlearning modules write it (network.* state, network_spec),
    with the adapter weights moved off their zero start."""
    spec = {"class_path": "lit_unlearn.models.CausalLM", "init_args": {"name_or_path": str(base),
                                                                        "lora": {"r": 4, "alpha": 8}}}
    network = CausalLM(**spec["init_args"])
    with torch.no_grad():
        g = torch.Generator().manual_seed(3)
        for name, p in network.named_parameters():
            if "lora_" in name:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
    path = tmp_path / "lora.ckpt"
    torch.save({"state_dict": {f"network.{k}": v for k, v in network.state_dict().items()},
                "network_spec": spec}, path)
    return path, network.eval()


def test_a_lora_run_exports_merged_and_as_an_adapter_with_the_runs_logits(base, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    path, network = lora_checkpoint(base, tmp_path)
    ids = torch.tensor([[5, 17, 42, 99, 7, 3, 250]])
    with torch.no_grad():
        want = network(ids)
        plain = CausalLM(name_or_path=str(base)).eval()(ids)
    assert (want - plain).abs().max() > 1e-3  # the adapter changes the logits: the comparison below means something
    merged = export_checkpoint(path, tmp_path / "merged")
    model = AutoModelForCausalLM.from_pretrained(str(merged)).eval()
    assert not any("lora" in n for n in model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, want, rtol=0, atol=1e-5)
    adapter = export_checkpoint(path, tmp_path / "adapter", adapter=True)
    assert (adapter / "adapter_config.json").is_file()
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base)), str(adapter)).eval()
    with torch.no_grad():
        torch.testing.assert_close(peft_model(input_ids=ids).logits, want, rtol=0, atol=1e-6)


def test_a_checkpoint_without_a_causal_lm_network_is_one_error(base, tmp_path):
    path = tmp_path / "classifier.ckpt"
    torch.save({"state_dict": {"network.fc.weight": torch.zeros(2, 3)}, "network_spec": None}, path)
    with pytest.raises(UserError, match="holds no causal-LM network weights"):
        export_checkpoint(path, tmp_path / "out", base=str(base))
    assert not (tmp_path / "out").exists()
