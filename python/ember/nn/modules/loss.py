"""Loss modules: configuration (reduction) held in a module, the math in nn.functional."""
from .. import functional as F
from .module import Module


class _Loss(Module):
    """Base of the losses: resolves the legacy size_average/reduce flags into
    reduction ('none' | 'mean' | 'sum')."""

    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        if size_average is not None or reduce is not None:
            reduction = F._legacy_reduction(size_average, reduce)
        self.reduction = reduction


class MSELoss(_Loss):
    """Mean squared error: reduction over (input - target) ** 2."""

    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """Mean absolute error: reduction over |input - target|."""

    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)
