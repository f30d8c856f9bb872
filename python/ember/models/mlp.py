"""A multi-layer perceptron."""
from .. import nn


class MLP(nn.Module):
    """Linear layers of the given hidden sizes with an activation (and optional dropout)
    between them: net.0 (Linear), net.1 (activation), ... as an nn.Sequential."""

    def __init__(self, in_features, hidden=(64, 64), out_features=10, activation="relu",
                 dropout=0.0):
        super().__init__()
        acts = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "silu": nn.SiLU}
        layers, width = [], in_features
        for h in hidden:
            layers.append(nn.Linear(width, h))
            layers.append(acts[activation]())
            if dropout:
                layers.append(nn.Dropout(dropout))
            width = h
        layers.append(nn.Linear(width, out_features))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x.flatten(1) if x.ndim > 2 else x)
