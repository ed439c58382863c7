"""ResNet for CIFAR-sized images (He et al. 2016, §4.2): depth 6n+2, three stages of n basic blocks.

ResNet-20 is n = 3 (~0.27 M parameters). Shortcuts follow the paper's option A (identity, with stride-2
subsampling and zero-padded channels where the stage changes), so shortcuts add no parameters.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from lit_unlearn.core.errors import UserError

__all__ = ["CifarResNet", "resnet20"]


class BasicBlock(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.stride = stride
        self.pad = planes - in_planes

    def shortcut(self, x: Tensor) -> Tensor:
        if self.stride != 1:
            x = x[:, :, :: self.stride, :: self.stride]
        if self.pad:
            x = F.pad(x, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return x

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """ResNet-(6n+2). `in_channels=1` and small inputs (8×8 digits) work unchanged: pooling is global."""

    def __init__(self, depth: int = 20, num_classes: int = 10, in_channels: int = 3, width: int = 16) -> None:
        super().__init__()
        if depth < 8 or (depth - 2) % 6:
            raise UserError(f"depth must be 6n+2 with n ≥ 1 (8, 14, 20, 32, 44, 56, 110); got {depth}")
        if num_classes < 2:
            raise UserError(f"num_classes must be ≥ 2, got {num_classes}")
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(in_channels, width, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        layers, planes = [], width
        for stage, mult in enumerate((1, 2, 4)):
            out_planes = width * mult
            blocks = []
            for b in range(n):
                stride = 2 if (stage > 0 and b == 0) else 1
                blocks.append(BasicBlock(planes, out_planes, stride))
                planes = out_planes
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = layers
        self.fc = nn.Linear(planes, num_classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 4:
            raise ValueError(f"expected images shaped (batch, channels, height, width), got {tuple(x.shape)}")
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.fc(out)


def resnet20(num_classes: int = 10, in_channels: int = 3) -> CifarResNet:
    return CifarResNet(depth=20, num_classes=num_classes, in_channels=in_channels)
