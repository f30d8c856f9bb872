"""RemovableHandle: what register_*_hook returns; remove() unregisters the hook.

Hooks live in ordered dicts keyed by the handle's id, so removing one is O(1) and the
remaining hooks keep their order. The handle holds the dicts weakly: a handle that
outlives its module does not keep the module's hooks alive.
"""
import itertools
import weakref
from collections import OrderedDict

from ..autograd.function import Function

_ids = itertools.count()


class RemovableHandle:
    """A registration that can be undone with remove() or by leaving a with block."""

    def __init__(self, hooks_dict, *, extra_dict=None):
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = next(_ids)
        extras = extra_dict if isinstance(extra_dict, (list, tuple)) else (
            [extra_dict] if extra_dict is not None else [])
        self.extra_dict_ref = tuple(weakref.ref(d) for d in extras)

    def remove(self):
        for ref in (self.hooks_dict_ref, *self.extra_dict_ref):
            d = ref()
            if d is not None and self.id in d:
                del d[self.id]

    def __getstate__(self):
        return (self.hooks_dict_ref(), self.id,
                tuple(ref() for ref in self.extra_dict_ref))

    def __setstate__(self, state):
        hooks, self.id, extras = state
        self.hooks_dict_ref = weakref.ref(hooks if hooks is not None else OrderedDict())
        self.extra_dict_ref = tuple(weakref.ref(d) for d in extras if d is not None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def register_node_hook(node, hook):
    """hook(grad_inputs, grad_outputs) -> None or new grad_inputs, run after the autograd
    node ran (PyTorch's Node.register_hook; the engine reads node._post_hooks)."""
    hooks = node.__dict__.setdefault("_post_hooks", [])
    hooks.append(hook)
    return _ListHandle(hooks, hook)


class _ListHandle:
    def __init__(self, hooks, hook):
        self._hooks, self._hook = hooks, hook

    def remove(self):
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


class BackwardHook:
    """A module's full backward hooks for one call (Module._call_impl, as PyTorch's
    torch.utils.hooks.BackwardHook): the module's tensor inputs and outputs pass through
    identity autograd Functions, whose backwards see the gradients with respect to the
    outputs (the pre-hooks run there and may replace them) and then with respect to the
    inputs (the full hooks run there and may replace those)."""

    def __init__(self, module, hooks, pre_hooks):
        self.module = module
        self.hooks = hooks
        self.pre_hooks = pre_hooks
        self.n_inputs = 0
        self.input_positions = None       # tensor arguments routed through the identity
        self.grad_outputs = None

    def setup_input_hook(self, args):
        from .. import _C
        self.n_inputs = len(args)
        positions = [i for i, a in enumerate(args) if isinstance(a, _C.Tensor)]
        if not (_C.is_grad_enabled() and any(args[i].requires_grad for i in positions)):
            return args
        self.input_positions = positions
        new = _identity(self._input_backward, [args[i] for i in positions])
        args = list(args)
        for i, t in zip(positions, new):
            args[i] = t
        return tuple(args)

    def setup_output_hook(self, result):
        from .. import _C
        if isinstance(result, _C.Tensor):
            tensors, rebuild = [result], lambda ts: ts[0]
        elif isinstance(result, (tuple, list)):
            at = [i for i, r in enumerate(result) if isinstance(r, _C.Tensor)]
            tensors = [result[i] for i in at]

            def rebuild(ts):
                out = list(result)
                for i, t in zip(at, ts):
                    out[i] = t
                return type(result)(out)
        else:
            return result
        if not (_C.is_grad_enabled() and any(t.requires_grad for t in tensors)):
            return result
        return rebuild(_identity(self._output_backward, tensors, materialize=False))

    def _output_backward(self, grads):
        grads = tuple(grads)
        for hook in self.pre_hooks:
            res = hook(self.module, grads)
            if res is not None:
                res = tuple(res) if isinstance(res, (tuple, list)) else (res,)
                if len(res) != len(grads):
                    raise RuntimeError(f"Backward pre hook returned an invalid number of "
                                       f"grad_output, got {len(res)}, but expected "
                                       f"{len(grads)}")
                grads = res
        self.grad_outputs = grads
        if self.input_positions is None and self.hooks:
            # no input requires grad: the hooks run now, with no gradient for the inputs
            none = (None,) * self.n_inputs
            for hook in self.hooks:
                res = hook(self.module, none, grads)
                if res is not None and not all(r is None for r in res):
                    raise RuntimeError("Backward hook for Modules where no input requires "
                                       "gradient should always return None or None for all "
                                       "gradients.")
            self.grad_outputs = None
        return grads

    def _input_backward(self, grads):
        grad_input = [None] * self.n_inputs
        for i, g in zip(self.input_positions, grads):
            grad_input[i] = g
        grad_input = tuple(grad_input)
        for hook in self.hooks:
            res = hook(self.module, grad_input, self.grad_outputs)
            if res is not None:
                res = tuple(res) if isinstance(res, (tuple, list)) else (res,)
                if len(res) != len(grad_input):
                    raise RuntimeError(f"Backward hook returned an invalid number of "
                                       f"grad_input, got {len(res)}, but expected "
                                       f"{len(grad_input)}")
                grad_input = res
        self.grad_outputs = None
        return tuple(grad_input[i] for i in self.input_positions)


def _identity(backward, tensors, materialize=True):
    return _Identity.apply(backward, materialize, *tensors)


class _Identity(Function):
    """The tensors as they are (new tensors sharing their memory); its backward hands
    the gradients to `backward`, which may replace them."""

    @staticmethod
    def forward(ctx, backward, materialize, *tensors):
        ctx.backward = backward
        ctx.set_materialize_grads(materialize)
        ctx.mark_non_differentiable(*[t for t in tensors if not t.requires_grad])
        return tensors

    @staticmethod
    def backward(ctx, *grads):
        return (None, None) + tuple(ctx.backward(grads))
