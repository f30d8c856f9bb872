"""An MNIST training loop in the style of the PyTorch example (two convolutions, max
pooling, two linear layers, log_softmax and nll_loss; Adadelta with lr=1.0 and StepLR
with gamma=0.7 per epoch) on synthetic 12x12 digits; the dropout layers are left out so
that both libraries run the same computation."""
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.fc1 = nn.Linear(128, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def main():
    torch.manual_seed(1)
    rng = np.random.default_rng(4)
    images = rng.standard_normal((64, 1, 12, 12)).astype(np.float32)
    labels = rng.integers(0, 10, 64)
    images[np.arange(64), 0, labels, labels] += 3.0        # a learnable signal
    dataset = TensorDataset(torch.from_numpy(images), torch.from_numpy(labels))
    loader = DataLoader(dataset, batch_size=16, shuffle=False)
    model = Net()
    with torch.no_grad():
        for p in model.parameters():
            fan_in = int(np.prod(p.shape[1:])) if p.dim() > 1 else 16
            p.copy_(torch.from_numpy(rng.uniform(-1, 1, tuple(p.shape)) /
                                     np.sqrt(fan_in)).float())
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    losses = []
    for epoch in range(5):
        model.train()
        for data, target in loader:
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
    model.eval()
    with torch.no_grad():
        out = model(torch.from_numpy(images))
        losses.append(F.nll_loss(out, torch.from_numpy(labels), reduction="sum").item())
        losses.append(out.argmax(dim=1).eq(torch.from_numpy(labels)).sum().item())
    print(json.dumps(losses))


if __name__ == "__main__":
    main()
