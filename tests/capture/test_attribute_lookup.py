"""Attribute lookup on modules inside captured code follows Python's order: data
descriptors of the class (properties), the instance dict, class attributes and
non-data descriptors (methods, staticmethods, classmethods, constants), and only then
Module.__getattr__ (parameters, buffers, submodules)."""
import numpy as np
import pytest

import ember
from ember import nn
from ember.capture import _hook, counters
from fresh_compiler import fresh_compiler  # noqa: F401  (autouse)

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")


class MethodShadowsSubmodule(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.Tanh()          # registered in _modules; the method below wins

    def act(self, x):                 # noqa: F811 - the point of the case
        return x * 3

    def forward(self, x):
        return self.act(x)


class PropertyShadowsInstanceDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.__dict__["scale"] = 9.0     # a data descriptor wins over the instance dict

    @property
    def scale(self):
        return 5.0

    def forward(self, x):
        return x * self.scale


class ModuleGetattrComesLast(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(ember.full((2,), 3.0))

    def forward(self, x):
        return x * self.w


class InstanceShadowsClass(nn.Module):
    bias = 1.0

    def __init__(self):
        super().__init__()
        self.__dict__["bias"] = 4.0      # a plain instance attribute

    def forward(self, x):
        return x + self.bias


class StaticAndClassMethods(nn.Module):
    factor = 2.0

    @staticmethod
    def double(x):
        return x * 2

    @classmethod
    def scaled(cls, x):
        return x * cls.factor

    def forward(self, x):
        return self.double(x) + self.scaled(x)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
@pytest.mark.parametrize("cls", [MethodShadowsSubmodule, PropertyShadowsInstanceDict,
                                 ModuleGetattrComesLast, InstanceShadowsClass,
                                 StaticAndClassMethods], ids=lambda c: c.__name__)
def test_lookup_order_matches_python(cls, backend):
    m = cls()
    x = ember.from_numpy(np.array([0.5, -1.0], dtype=np.float32))
    want = m(x)
    got = ember.compile(m, backend=backend, fullgraph=True)(x)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
    assert counters["stats"]["frames_fallback"] == 0


def test_method_wins_over_submodule_of_the_same_name():
    m = MethodShadowsSubmodule()
    x = ember.ones(2)
    assert ember.compile(m, fullgraph=True)(x).tolist() == [3.0, 3.0]
