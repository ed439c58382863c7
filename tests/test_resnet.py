import pytest
import torch

from lit_unlearn.models import CifarResNet, resnet20


def test_resnet20_has_the_papers_size_and_shapes():
    net = resnet20()
    # He et al. (2016), Table 6: ResNet-20 has 0.27M parameters (option-A shortcuts add none).
    assert sum(p.numel() for p in net.parameters()) == 269_722
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) + 1 == 20  # 19 conv layers + the classifier
    assert CifarResNet(8, 10, 1)(torch.randn(3, 1, 8, 8)).shape == (3, 10)


def test_resnet_rejects_bad_configurations():
    with pytest.raises(ValueError, match="6n\\+2"):
        CifarResNet(depth=21)
    with pytest.raises(ValueError, match="batch, channels"):
        resnet20()(torch.randn(3, 32, 32))
