"""Fast neural style transfer in the style of the PyTorch examples (Johnson et al.'s
TransformerNet: reflection-padded convolutions, instance norm, residual blocks,
nearest-upsampling convolutions), trained for 20 steps on synthetic images with a content
loss and a Gram-matrix style loss from a fixed random feature extractor."""
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvLayer(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super().__init__()
        self.reflection_pad = nn.ReflectionPad2d(kernel_size // 2)
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        return self.conv2d(self.reflection_pad(x))


class ResidualBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = nn.InstanceNorm2d(channels, affine=True)
        self.relu = nn.ReLU()

    def forward(self, x):
        residual = x
        out = self.relu(self.in1(self.conv1(x)))
        out = self.in2(self.conv2(out))
        return out + residual


class UpsampleConvLayer(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, upsample=None):
        super().__init__()
        self.upsample = upsample
        self.reflection_pad = nn.ReflectionPad2d(kernel_size // 2)
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        if self.upsample:
            x = F.interpolate(x, mode="nearest", scale_factor=self.upsample)
        return self.conv2d(self.reflection_pad(x))


class TransformerNet(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.conv1 = ConvLayer(3, c, kernel_size=5, stride=1)
        self.in1 = nn.InstanceNorm2d(c, affine=True)
        self.conv2 = ConvLayer(c, 2 * c, kernel_size=3, stride=2)
        self.in2 = nn.InstanceNorm2d(2 * c, affine=True)
        self.res1 = ResidualBlock(2 * c)
        self.res2 = ResidualBlock(2 * c)
        self.deconv1 = UpsampleConvLayer(2 * c, c, kernel_size=3, stride=1, upsample=2)
        self.in3 = nn.InstanceNorm2d(c, affine=True)
        self.deconv2 = ConvLayer(c, 3, kernel_size=5, stride=1)
        self.relu = nn.ReLU()

    def forward(self, x):
        y = self.relu(self.in1(self.conv1(x)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.res2(self.res1(y))
        y = self.relu(self.in3(self.deconv1(y)))
        return self.deconv2(y)


def gram_matrix(y):
    b, ch, h, w = y.size()
    features = y.view(b, ch, w * h)
    return features.bmm(features.transpose(1, 2)) / (ch * h * w)


def init_weights(model, seed):
    """Deterministic weights (the same numbers whatever library runs the script)."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan_in = int(np.prod(p.shape[1:])) if p.dim() > 1 else p.shape[0]
            w = rng.standard_normal(tuple(p.shape)) / np.sqrt(fan_in)
            if name.endswith("weight") and p.dim() == 1:
                w = 1.0 + 0.1 * w                    # instance norm scales
            p.copy_(torch.from_numpy(w).float())


def main():
    torch.manual_seed(0)
    transformer = TransformerNet()
    init_weights(transformer, 1)
    features = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(),
                             nn.Conv2d(6, 8, 3, padding=1, stride=2), nn.ReLU())
    init_weights(features, 2)
    for p in features.parameters():
        p.requires_grad_(False)
    rng = np.random.default_rng(3)
    content = torch.from_numpy(rng.uniform(0, 1, (4, 3, 16, 16))).float()
    style = torch.from_numpy(rng.uniform(0, 1, (1, 3, 16, 16))).float()
    gram_style = gram_matrix(features(style))
    optimizer = torch.optim.Adam(transformer.parameters(), 1e-3)
    mse_loss = nn.MSELoss()
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        y = transformer(content)
        f_y, f_x = features(y), features(content)
        content_loss = mse_loss(f_y, f_x)
        style_loss = mse_loss(gram_matrix(f_y), gram_style.expand(4, -1, -1)) * 1e3
        loss = content_loss + style_loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(json.dumps(losses))


if __name__ == "__main__":
    main()
