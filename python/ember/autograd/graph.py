"""The autograd graph's node types, as users meet them through grad_fn."""
from .. import _C

Node = _C.Node


class AccumulateGrad:
    """Stands for a leaf in next_functions: gradients reaching it accumulate in .grad."""

    def __init__(self, variable):
        self.variable = variable

    def name(self):
        return "AccumulateGrad"

    def __repr__(self):
        return f"<AccumulateGrad object at {id(self):#x}>"

    @property
    def next_functions(self):
        return ()


_C._set_accumulate_grad(AccumulateGrad)
