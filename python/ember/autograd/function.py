"""ember.autograd.Function: custom differentiable operations, as torch.autograd.Function.

    class Exp(ember.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            y, = ctx.saved_tensors
            return g * y

    y = Exp.apply(x)

`apply` runs forward with grad mode off (and capture off: the user's forward is no frame
of its own under ember.compile), then hangs the tensor outputs from one node of the C
engine (`_C._make_node`, a Python-callable node, csrc/autograd/node.c) whose backward
calls the class's backward with the context. Also as PyTorch: the setup_context form
(forward without ctx, then setup_context(ctx, inputs, output)), needs_input_grad,
save_for_backward / saved_tensors (checked against in-place writes since, freed after a
backward without retain_graph), mark_dirty (an input written in place and returned
continues its history from the node), mark_non_differentiable, set_materialize_grads,
and @once_differentiable.

Compiled: each subclass's `apply` is a function of its own, allowed in graphs
(ember.compiler.allow_in_graph): capture records one call node for it (its outputs
computed on fake tensors). AOT autograd traces that node on fakes like any other code:
the forward's ops go into the forward graph, and, when the C engine reaches the node
during the joint trace, the backward's ops into the backward graph. A forward that
cannot run on fake tensors makes the frame fall back (counted); a backward that cannot
be traced makes the backend fail (counted, the graph then runs eagerly).
"""
from __future__ import annotations

import functools
import inspect

from .. import _C
from .grad_mode import no_grad

Tensor = _C.Tensor

_FREED = ("Trying to backward through the graph a second time (or directly access saved "
          "tensors after they have already been freed). Saved intermediate values of the "
          "graph are freed when you call .backward() or autograd.grad(). Specify "
          "retain_graph=True if you need to backward through the graph a second time or "
          "if you need to access saved tensors after calling backward.")


class FunctionCtx:
    """The `ctx` of forward/setup_context and backward; any attribute may be set on it."""

    def save_for_backward(self, *tensors):
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save variables, but argument "
                                f"{i} is of type {type(t).__name__}")
        self._saved = tuple((t, None if t is None else t._version) for t in tensors)

    def save_for_forward(self, *tensors):
        self._saved_for_forward = tensors

    @property
    def saved_tensors(self):
        saved = getattr(self, "_saved", ())
        if saved is None:
            raise RuntimeError(_FREED)
        out = []
        for i, (t, version) in enumerate(saved):
            if t is not None and t._version != version:
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified "
                    f"by an inplace operation: [{t.dtype} {list(t.shape)}], which "
                    f"is saved tensor {i} of {self._name}, is at version {t._version}; "
                    f"expected version {version} instead.")
            out.append(t)
        return tuple(out)

    saved_variables = saved_tensors

    def mark_dirty(self, *tensors):
        self._dirty = tensors

    def mark_non_differentiable(self, *tensors):
        self._non_differentiable = tensors

    def set_materialize_grads(self, value: bool):
        self.materialize_grads = bool(value)

    _name = "Function"
    materialize_grads = True


class _FunctionBackward:
    """The node's backward: the class's backward on the context, its gradients checked
    and laid out one per forward argument."""

    def __init__(self, cls, ctx, arg_is_tensor, out_meta):
        self.cls = cls
        self.ctx = ctx
        self.arg_is_tensor = arg_is_tensor
        self.out_meta = out_meta        # (shape, dtype) per output, None for non-tensors

    def __call__(self, *grads):
        ctx = self.ctx
        if ctx.materialize_grads:
            from .. import zeros
            grads = tuple(zeros(m[0], dtype=m[1]) if g is None and m is not None else g
                          for g, m in zip(grads, self.out_meta))
        backward = _backward_of(self.cls)
        with _capture_off():
            res = backward(ctx, *grads)
        if not isinstance(res, tuple):
            res = (res,)
        n = len(self.arg_is_tensor)
        if len(res) < n or any(g is not None for g in res[n:]):
            raise RuntimeError(f"function {ctx._name} returned an incorrect number of "
                               f"gradients (expected {n}, got {len(res)})")
        for i, (g, is_tensor) in enumerate(zip(res, self.arg_is_tensor)):
            if g is not None and not is_tensor:
                raise RuntimeError(f"function {ctx._name} returned a gradient different than "
                                   f"None at position {i + 1}, but the corresponding forward "
                                   "input was not a Variable")
        return res[:n]

    def _release_saved(self):
        """The engine is done with this node (no retain_graph): free what the context
        saved. True when something was (a later backward through the node raises)."""
        saved = getattr(self.ctx, "_saved", ())
        self.ctx._saved = None
        return bool(saved)


def _backward_of(cls):
    if getattr(cls, "backward") is not Function.backward:
        return cls.backward
    return cls.vjp


class _capture_off:
    """The user's forward and backward are not frames of their own under ember.compile
    (a captured frame records apply as one node)."""

    def __enter__(self):
        from ..capture import _hook
        self._cm = _hook.disable()
        self._cm.__enter__()

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


def _bind(fn, skip, args, kwargs):
    """forward's arguments with keywords and defaults bound by its signature (its first
    `skip` parameters, ctx, not counted)."""
    sig = inspect.signature(fn)
    sig = sig.replace(parameters=list(sig.parameters.values())[skip:])
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    if bound.kwargs:
        raise TypeError(f"{fn.__qualname__}: apply() passes arguments to forward by "
                        "position; keyword-only parameters are not supported")
    return tuple(bound.args)


def _apply(cls, *args, **kwargs):
    setup = _has_setup_context(cls)
    if kwargs or setup:
        args = _bind(cls.forward, 0 if setup else 1, args, kwargs)
    ctx = FunctionCtx()
    ctx._name = f"{cls.__name__}Backward"
    arg_is_tensor = tuple(isinstance(a, Tensor) for a in args)
    ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
    executable = _C.is_grad_enabled() and any(ctx.needs_input_grad)
    with no_grad(), _capture_off():
        if setup:
            output = cls.forward(*args)
            cls.setup_context(ctx, args, output)
        else:
            output = cls.forward(ctx, *args)
    return _wrap_outputs(cls, ctx, args, arg_is_tensor, output, executable)


def _wrap_outputs(cls, ctx, args, arg_is_tensor, output, executable):
    is_tuple = isinstance(output, tuple)
    outs = list(output) if is_tuple else [output]
    dirty = getattr(ctx, "_dirty", ())
    non_diff = {id(t) for t in getattr(ctx, "_non_differentiable", ())}
    input_ids = {id(a) for a in args if isinstance(a, Tensor)}
    out_ids = {id(o) for o in outs if isinstance(o, Tensor)}
    if any(id(t) not in out_ids for t in dirty):
        raise RuntimeError("Some elements marked as dirty during the forward method were not "
                           "returned as output. The inputs that are modified inplace must all "
                           "be outputs of the Function.")
    dirty_ids = {id(t) for t in dirty}
    if dirty:
        # marked dirty: one more version, as PyTorch counts it (values unchanged)
        with no_grad():
            for t in dirty:
                t.copy_(t)
    attach = []                       # the node's outputs (None: not differentiable)
    for k, o in enumerate(outs):
        if not isinstance(o, Tensor):
            attach.append(None)
            continue
        is_input, is_dirty = id(o) in input_ids, id(o) in dirty_ids
        differentiable = id(o) not in non_diff
        if is_dirty and executable:
            if o.requires_grad and o.grad_fn is None:
                raise RuntimeError("a leaf Variable that requires grad has been used in an "
                                   "in-place operation.")
            if o._base is not None and o._base.requires_grad:
                raise NotImplementedError(
                    f"{cls.__name__}: mark_dirty on a view of a tensor that requires grad is "
                    "not supported")
        elif is_input and not is_dirty:
            o = outs[k] = o.detach()  # a new tensor sharing the input's memory, as PyTorch
        attach.append(o if differentiable else None)
    if executable:
        meta = tuple((tuple(o.shape), o.dtype) if isinstance(o, Tensor) else None
                     for o in outs)
        backward = _FunctionBackward(cls, ctx, arg_is_tensor, meta)
        _C._make_node(backward, tuple(args), tuple(attach), ctx._name)
    return tuple(outs) if is_tuple else outs[0]


def _has_setup_context(cls):
    return getattr(cls, "setup_context") is not Function.setup_context


class Function:
    """Base class of custom autograd operations: subclasses define static forward and
    backward (and optionally setup_context) and are called through `Cls.apply`."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)

        def apply(*args, **kwargs):
            return _apply(cls, *args, **kwargs)
        apply.__qualname__ = f"{cls.__qualname__}.apply"
        apply.__name__ = f"{cls.__name__}.apply"
        apply.__doc__ = f"Runs {cls.__qualname__}.forward, differentiable through its backward."
        apply.function_class = cls
        cls.apply = staticmethod(apply)
        try:
            from ..compiler import allow_in_graph
        except ImportError:       # a subclass made while ember itself is importing
            return
        allow_in_graph(apply)

    def __init__(self, *args, **kwargs):
        import warnings
        warnings.warn(f"{type(self)} should not be instantiated. Methods on autograd "
                      "functions are all static, so you should invoke them on the class "
                      "itself.", DeprecationWarning, stacklevel=2)

    def __call__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is "
                           "deprecated. Please use new-style autograd function with static "
                           "forward method. (Example: Cls.apply(...) with @staticmethod "
                           "forward and backward)")

    @staticmethod
    def forward(*args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward "
                                  "mode AD.")

    vjp = backward

    @staticmethod
    def jvp(ctx, *grad_inputs):
        raise NotImplementedError("You must implement the jvp function for custom "
                                  "autograd.Function to use it with forward mode AD.")

    @classmethod
    def apply(cls, *args, **kwargs):
        raise RuntimeError("autograd.Function.apply is called on a subclass")


class InplaceFunction(Function):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace


_ONCE = "trying to differentiate twice a function that was marked with @once_differentiable"


def _once_error(*grads):
    raise RuntimeError(_ONCE)


def once_differentiable(fn):
    """A backward that is not itself differentiable: it runs with grad mode off, and
    under create_graph its results hang from a node that raises when differentiated."""
    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with no_grad():
            outputs = fn(ctx, *args)
        if not _C.is_grad_enabled():
            return outputs
        if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            return outputs
        is_tuple = isinstance(outputs, tuple)
        outs = list(outputs) if is_tuple else [outputs]
        outs = [o.detach() if isinstance(o, Tensor) else o for o in outs]
        _C._make_node(_once_error, tuple(args),
                      tuple(o if isinstance(o, Tensor) and o.dtype.is_floating_point
                            else None for o in outs), "DelayedError")
        return tuple(outs) if is_tuple else outs[0]
    return wrapper


__all__ = ["Function", "FunctionCtx", "InplaceFunction", "once_differentiable"]
