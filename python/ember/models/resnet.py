"""A ResNet-18-style CNN (He et al., 2016) for small images: 3x3 stem (plus a max pool for
64x64 inputs), stages of BasicBlocks whose width doubles as the resolution halves, global
average pooling and a linear classifier. Names follow torchvision (conv1, bn1, layer1.0.
conv1, ..., downsample.0/.1, fc)."""
from .. import nn
from ..nn import functional as F


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes))
        else:
            self.downsample = None

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = self.downsample(x) if self.downsample is not None else x
        return F.relu(out + identity)


class ResNet(nn.Module):
    """depths: blocks per stage (ResNet-18: (2, 2, 2, 2)); width: channels of the first
    stage (64 in ResNet-18; each later stage doubles it); image_size 64 adds a stride-2
    max pool after the stem."""

    def __init__(self, depths=(2, 2, 2, 2), width=64, num_classes=10, in_channels=3,
                 image_size=32):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.maxpool = nn.MaxPool2d(3, 2, 1) if image_size >= 64 else nn.Identity()
        planes = width
        in_planes = width
        for i, n in enumerate(depths):
            stride = 1 if i == 0 else 2
            blocks = [BasicBlock(in_planes, planes, stride)]
            blocks += [BasicBlock(planes, planes) for _ in range(n - 1)]
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
            in_planes = planes
            planes *= 2
        self.num_stages = len(depths)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        for i in range(self.num_stages):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(self.avgpool(x).flatten(1))


def resnet18(num_classes=10, width=64, in_channels=3, image_size=32):
    return ResNet((2, 2, 2, 2), width, num_classes, in_channels, image_size)
