"""SqueezeNet 1.0 as the TX2 dataset's runs trained it: torchvision's layers, with each Fire
module's ReLU applied once after the concatenation of its two expand branches (torchvision
applies one to each branch before it) and no Dropout before the classifier.

The dataset's squeezenet specs name torchvision's `squeezenet1_0`, but the pruned model files
its runs loaded (the `model` column) are the authors' own, written in this form
(github.com/ICIdsl/performance_modelling, models/pruned/imagenet/random_pruning/squeezenet_*.py).
The computation is the same; what autograd keeps is not: the branches' outputs are freed after
the concatenation instead of being kept by their ReLUs, a quarter of what it saves.
Module names are torchvision's, so that the specs' `out_channels` apply.
"""

import torch
from torch import nn


class Fire(nn.Module):
    def __init__(self, inplanes: int, squeeze: int, expand1x1: int, expand3x3: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(inplanes, squeeze, kernel_size=1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(squeeze, expand1x1, kernel_size=1)
        self.expand3x3 = nn.Conv2d(squeeze, expand3x3, kernel_size=3, padding=1)
        self.activation = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.squeeze_activation(self.squeeze(x))
        return self.activation(torch.cat([self.expand1x1(x), self.expand3x3(x)], 1))


class SqueezeNet(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 96, kernel_size=7, stride=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
            Fire(96, 16, 64, 64),
            Fire(128, 16, 64, 64),
            Fire(128, 32, 128, 128),
            nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
            Fire(256, 32, 128, 128),
            Fire(256, 48, 192, 192),
            Fire(384, 48, 192, 192),
            Fire(384, 64, 256, 256),
            nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
            Fire(512, 64, 256, 256),
        )
        # index 1 is the final convolution, as in torchvision's (whose index 0 is its Dropout)
        self.classifier = nn.Sequential(
            nn.Identity(),
            nn.Conv2d(512, num_classes, kernel_size=1),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d((1, 1)),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


def squeezenet(num_classes: int = 1000) -> SqueezeNet:
    return SqueezeNet(num_classes)
