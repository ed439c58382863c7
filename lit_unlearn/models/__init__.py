from lit_unlearn.models.causal_lm import CausalLM, tiny_llama_config
from lit_unlearn.models.resnet_cifar import CifarResNet, resnet20

__all__ = ["CausalLM", "CifarResNet", "resnet20", "tiny_llama_config"]
