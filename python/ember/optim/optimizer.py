"""Optimizer: parameter groups, per-parameter state, and their state_dict.

An optimizer holds param_groups (dicts with "params" and the hyper-parameters, filled
from defaults) and state (a dict from each parameter to its buffers). Subclasses
implement step() with ember ops under no_grad (grad mode on only for
differentiable=True), updating parameters in place.

state_dict() uses PyTorch's layout — {"state": {index: {...}}, "param_groups": [{...,
"params": [indices]}]} with parameters numbered in group order — so checkpoints and
tooling written for torch.optim read it unchanged.
"""
from __future__ import annotations

import copy
import functools
import warnings
from collections import defaultdict
from itertools import chain

from .. import _C, zeros_like
from ..autograd.grad_mode import set_grad_enabled
from ..nn.modules.module import zero_grads
from ..nn.parameter import typename
from ._math import step_counter

Tensor = _C.Tensor


class _RequiredParameter:
    """Marks a hyper-parameter that has no default and must be given."""

    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()


def _use_grad(step):
    """Runs step() with grad mode set to the optimizer's `differentiable` default (off
    unless differentiable=True: the updates must not be recorded by autograd), as
    torch.optim's steps run."""
    @functools.wraps(step)
    def wrapper(self, *args, **kwargs):
        # a `with` block: ember.compile captures it (a grad-mode region of the graph)
        with set_grad_enabled(bool(self.defaults.get("differentiable", False))):
            return step(self, *args, **kwargs)
    return wrapper


# the devices torch.optim's capturable steps accept: never the CPU, so a capturable
# optimizer of CPU tensors raises at its first step, as torch.optim's does
_CAPTURABLE_DEVICES = ["cuda", "xpu", "hpu", "privateuseone"]


def _check_capturable(group, what="params and state_steps", xla=True):
    if group.get("capturable"):
        devices = _CAPTURABLE_DEVICES + (["xla"] if xla else [])
        raise AssertionError(f"If capturable=True, {what} must be on supported devices: "
                             f"{devices}.")


def _check_lr(lr):
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")


def _check_nonnegative(*checks):
    """torch.optim's ValueError for the first (what, value) that is not >= 0."""
    for what, value in checks:
        if not 0.0 <= value:
            raise ValueError(f"Invalid {what}: {value}")


def _scalar(v):
    """A group's hyper-parameter as a Python number (a 0-d tensor lr is allowed)."""
    return v.item() if isinstance(v, Tensor) else v


def _closure_loss(closure):
    if closure is None:
        return None
    from ..autograd import enable_grad
    with enable_grad():
        return closure()


class Optimizer:
    """Base class of the optimizers: Optimizer(params, defaults)."""

    def __init__(self, params, defaults):
        self.defaults = defaults
        self.state = defaultdict(dict)
        self.param_groups = []
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            f"Tensors or dicts, but got {typename(params)}")
        groups = list(params)
        if len(groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def __getstate__(self):
        return {"defaults": self.defaults, "state": self.state,
                "param_groups": self.param_groups}

    def __setstate__(self, state):
        self.__dict__.update(state)
        if not isinstance(self.state, defaultdict):
            self.state = defaultdict(dict, self.state)

    def __repr__(self):
        text = type(self).__name__ + " ("
        for i, group in enumerate(self.param_groups):
            text += f"\nParameter Group {i}\n"
            for key in sorted(group):
                if key != "params":
                    text += f"    {key}: {group[key]}\n"
        return text + ")"

    # ------------------------------------------------------------ groups

    def add_param_group(self, param_group):
        """Adds a group of parameters with its own hyper-parameters (the rest come from
        defaults), e.g. to train a newly unfrozen layer with another learning rate."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        else:
            params = list(params)
        names = []
        if params and isinstance(params[0], tuple):
            names = [name for name, _ in params]
            params = [p for _, p in params]
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params "
                                f"is {typename(p)}")
            if not (p.is_leaf or p.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")
        param_group["params"] = params
        if names:
            param_group["param_names"] = names
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError("parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            param_group.setdefault(name, default)
        if len({id(p) for p in params}) != len(params):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; "
                          "in future, this will cause an error", stacklevel=3)
        existing = {id(p) for g in self.param_groups for p in g["params"]}
        if existing & {id(p) for p in params}:
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    # ------------------------------------------------------------ gradients

    def zero_grad(self, set_to_none=True):
        """Clears the gradients of all optimized parameters (to None by default)."""
        zero_grads((p for group in self.param_groups for p in group["params"]), set_to_none)

    def step(self, closure=None):
        raise NotImplementedError

    def _params_with_grad(self, group):
        for p in group["params"]:
            if p.grad is not None:
                yield p

    def _grads(self, group, init, what="params and state_steps", xla=True):
        """(p, grad, state) of each parameter of group with a gradient, its step count
        advanced: grad negated under maximize; a new state gets its step counter, then
        zeroed buffers named by init (a tuple) or init(p, state). A capturable group
        raises first, as torch.optim's does."""
        params = list(self._params_with_grad(group))
        if params:
            _check_capturable(group, what, xla)
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = step_counter()
                if callable(init):
                    init(p, state)
                else:
                    state.update((name, zeros_like(p)) for name in init)
            state["step"].add_(1)
            yield p, -p.grad if group["maximize"] else p.grad, state

    # ------------------------------------------------------------ state dict

    def state_dict(self):
        """{"state": {index: state}, "param_groups": [group with "params": indices]}.
        The state's tensors are the live buffers (copy them to snapshot)."""
        index_of = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for p in group["params"]:
                index_of.setdefault(id(p), len(index_of))
            packed["params"] = [index_of[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {(index_of[id(k)] if isinstance(k, Tensor) else k): v
                 for k, v in self.state.items()}
        return {"state": state, "param_groups": groups}

    @staticmethod
    def _cast_state(param, value, key=None):
        """Loaded state follows its parameter's dtype, except the step counter."""
        if isinstance(value, Tensor):
            if key != "step" and param.is_floating_point() and value.is_floating_point():
                return value.to(param.dtype)
            return value
        if isinstance(value, dict):
            return {k: Optimizer._cast_state(param, v, k) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(Optimizer._cast_state(param, v, key) for v in value)
        return value

    def load_state_dict(self, state_dict):
        """Restores state and hyper-parameters saved by state_dict() (of this optimizer
        or of torch.optim's with the same parameter layout)."""
        state_dict = copy.deepcopy(state_dict)
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"])
               for g, s in zip(self.param_groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match "
                             "the size of optimizer's group")
        id_map = dict(zip(chain.from_iterable(s["params"] for s in saved_groups),
                          chain.from_iterable(g["params"] for g in self.param_groups)))
        state = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k in id_map:
                param = id_map[k]
                state[param] = self._cast_state(param, v)
            else:
                state[k] = v
        new_groups = []
        for group, saved in zip(self.param_groups, saved_groups):
            saved = dict(saved)
            saved["params"] = group["params"]
            if "param_names" in group and "param_names" not in saved:
                saved["param_names"] = group["param_names"]
            new_groups.append(saved)
        self.__setstate__({"state": state, "param_groups": new_groups})
