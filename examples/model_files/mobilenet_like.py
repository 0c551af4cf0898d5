"""A MobileNet-like network written by hand (depthwise separable blocks, as in MobileNet v1),
in the style of many research code bases (and of the original perf4sight's model files):
activations called as functions, and the classifier's input flattened with
`x.view(x.size(0), -1)`.

Build it with `mobilenet_like(num_classes=1000)`; it needs only torch.
"""

import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """A depthwise 3x3 convolution, then a pointwise 1x1 one, each with BatchNorm and ReLU."""

    def __init__(self, in_planes, out_planes, stride=1):
        super(Block, self).__init__()
        self.conv1 = nn.Conv2d(in_planes, in_planes, kernel_size=3, stride=stride, padding=1, groups=in_planes,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv2 = nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=1, padding=0, bias=False)
        self.bn2 = nn.BatchNorm2d(out_planes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)))


class MobileNetLike(nn.Module):
    # (output channels, stride) of each block; stride 1 when given as a bare number
    cfg = [64, (128, 2), 128, (256, 2), 256, (512, 2), 512, 512, 512, 512, 512, (1024, 2), 1024]

    def __init__(self, num_classes=1000):
        super(MobileNetLike, self).__init__()
        self.conv1 = nn.Conv2d(3, 32, kernel_size=3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.layers = self._make_layers(in_planes=32)
        self.linear = nn.Linear(1024, num_classes)

    def _make_layers(self, in_planes):
        layers = []
        for x in self.cfg:
            out_planes = x if isinstance(x, int) else x[0]
            stride = 1 if isinstance(x, int) else x[1]
            layers.append(Block(in_planes, out_planes, stride))
            in_planes = out_planes
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layers(out)
        out = F.avg_pool2d(out, out.size(3))
        out = out.view(out.size(0), -1)
        return self.linear(out)


def mobilenet_like(num_classes=1000):
    return MobileNetLike(num_classes=num_classes)
