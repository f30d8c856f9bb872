"""The model, data and training loop the DDP tests run both on N ranks (worker_ddp.py)
and in one process on the whole batch (the reference)."""
import numpy as np

import ember
import ember.nn as nn

BATCH_PER_RANK = 4
STEPS = 5


class Net(nn.Module):
    """l2 is applied twice, so its weight gets two gradients per backward."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(6, 16)
        self.l2 = nn.Linear(16, 16)
        self.l3 = nn.Linear(16, 3)

    def forward(self, x):
        h = ember.tanh(self.l1(x))
        h = ember.tanh(self.l2(h))
        h = ember.tanh(self.l2(h))
        return self.l3(h)


class Deep(nn.Module):
    """Four layers of 24 x 24 (float64: 4.6 kB each): one bucket and one compiled piece
    per layer at bucket_cap_mb=0.004."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(24, 24) for _ in range(4)])

    def forward(self, x):
        for layer in self.layers:
            x = ember.tanh(layer(x))
        return x


def data(world, step):
    """The whole batch of one step: world * BATCH_PER_RANK rows."""
    rng = np.random.default_rng(1000 + step)
    n = world * BATCH_PER_RANK
    return rng.standard_normal((n, 6)), rng.standard_normal((n, 3))


def optimizer(name, params):
    if name == "sgd":
        return ember.optim.SGD(params, lr=0.1, momentum=0.9)
    return ember.optim.AdamW(params, lr=0.01, weight_decay=0.1)


def train(model, opt, world, rows_of_step, step_fn=None):
    """STEPS steps of mean squared error; rows_of_step(step) picks this process's rows."""
    for step in range(STEPS):
        x, y = data(world, step)
        rows = rows_of_step(step)
        opt.zero_grad()
        out = model(ember.from_numpy(x[rows]))
        loss = ((out - ember.from_numpy(y[rows])) ** 2).mean()
        loss.backward()
        opt.step()


def params_of(model):
    return {k: v.detach().numpy().copy() for k, v in model.named_parameters()}
