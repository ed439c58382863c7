from lit_unlearn.models.resnet_cifar import CifarResNet, resnet20

__all__ = ["CifarResNet", "resnet20"]
