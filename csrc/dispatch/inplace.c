/* inplace.c: in-place ops (add_, mul_, copy_, ...).
 *
 * An in-place op names its functional twin (add_ -> add). It runs the twin's
 * kernel, checks that the result fits self (same shape; a dtype self can hold),
 * writes it into self's memory and bumps the version counter shared by self
 * and its views. With autograd on, the twin's node is recorded over a copy of
 * self's old value and self is rebased onto that node; when self is a view, its
 * base's history is rebased instead (CopySlices, csrc/autograd/view.c) and self
 * becomes a view of the new base. In trace mode the tracer receives the in-place
 * op itself and functionalizes it (ember.aot.functionalize).
 */
#include "ember.h"
#include "kernels/kutil.h"

/* PyTorch's canCast: no float into integers, nothing but bool into bool. */
static bool
can_cast(em_dtype_t from, em_dtype_t to)
{
    if (em_is_complex(from) && !em_is_complex(to))
        return false;
    if (em_is_float(from) && !em_is_inexact(to))
        return false;
    if (from != EM_BOOL && to == EM_BOOL)
        return false;
    return true;
}

static int
check_fits(em_Op *op, em_Tensor *self, em_Tensor *res)
{
    for (int d = 0; self->numel > 0 && d < self->ndim; d++) {
        if (self->strides[d] == 0 && self->sizes[d] > 1) {
            PyErr_Format(PyExc_RuntimeError,
                         "%U(): unsupported operation: more than one element of the "
                         "written-to tensor refers to a single memory location. Please "
                         "clone() the tensor before performing the operation.", op->name);
            return -1;
        }
    }
    if (res->ndim != self->ndim ||
        memcmp(res->sizes, self->sizes, sizeof(Py_ssize_t) * self->ndim) != 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "%U(): output with shape %s doesn't match the broadcast shape %s",
                     op->name, em_tshape(self), em_tshape(res));
        return -1;
    }
    if (em_is_complex(self->dtype) && em_is_float(res->dtype)) {
        /* abs_, angle_: a real result would be stored as complex numbers */
        PyErr_Format(PyExc_RuntimeError,
                     "In-place %U is not supported for complex tensors.", op->name);
        return -1;
    }
    if (!can_cast(res->dtype, self->dtype)) {
        PyErr_Format(PyExc_RuntimeError,
                     "%U(): result type %s can't be cast to the desired output type %s",
                     op->name, em_dtype_torch_name(res->dtype),
                     em_dtype_torch_name(self->dtype));
        return -1;
    }
    return 0;
}

/* A copy of self's current value that keeps self's place in the autograd graph. */
static em_Tensor *
snapshot(em_Tensor *self)
{
    em_Tensor *copy = em_tensor_contiguous(self);
    if (copy == NULL)
        return NULL;
    if (copy == self) {
        Py_DECREF(copy);
        em_Geom g = {.ndim = self->ndim, .dtype = self->dtype};
        memcpy(g.sizes, self->sizes, sizeof(Py_ssize_t) * self->ndim);
        copy = em_tensor_empty(&g, em_is_meta(self));
        if (copy == NULL)
            return NULL;
        if (!em_is_meta(self) && PyArray_CopyInto(copy->array, self->array) < 0) {
            Py_DECREF(copy);
            return NULL;
        }
    }
    copy->requires_grad = self->requires_grad;
    Py_XINCREF(self->trace);
    Py_XSETREF(copy->trace, self->trace);
    Py_XINCREF(self->grad_fn);
    Py_XSETREF(copy->grad_fn, self->grad_fn);
    copy->output_nr = self->output_nr;
    return copy;
}

static bool
any_requires_grad(em_Op *op, PyObject **args)
{
    for (int i = 0; i < op->nparams; i++)
        if (em_Tensor_Check(args[i]) && ((em_Tensor *)args[i])->requires_grad)
            return true;
    return false;
}

/* Whether autograd can follow an in-place update of self: PyTorch's refusals of leaves,
 * views of leaves and views made in no-grad mode. *rebase: self is a view whose base's
 * history the update rebases. */
static int
check_differentiable(em_Op *op, em_Tensor *self, bool *rebase)
{
    *rebase = false;
    em_Tensor *base = (em_Tensor *)self->base;
    bool view = base != NULL && self->view_kind != EM_VIEW_NONE;
    if (view && self->view_kind == EM_VIEW_NOGRAD) {
        PyErr_SetString(PyExc_RuntimeError,
                        "A view was created in no_grad mode and is being modified inplace "
                        "with grad mode enabled. Given that this use case is ambiguous and "
                        "error-prone, it is forbidden. You can clarify your code by moving "
                        "both the view and the inplace either both inside the no_grad block "
                        "(if you don't want the inplace to be tracked) or both outside (if "
                        "you want the inplace to be tracked).");
        return -1;
    }
    if (view && base->requires_grad && base->grad_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a view of a leaf Variable that requires grad is being used in an "
                        "in-place operation.");
        return -1;
    }
    if (self->requires_grad && self->grad_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a leaf Variable that requires grad is being used in an in-place "
                        "operation.");
        return -1;
    }
    if (view && self->view_steps == NULL) {
        PyErr_Format(PyExc_NotImplementedError,
                     "%U(): this view was not made by view ops autograd can replay, so an "
                     "in-place update of it cannot be differentiated; use the out-of-place "
                     "op", op->name);
        return -1;
    }
    *rebase = view;
    return 0;
}

/* In trace mode the tracer takes the in-place op itself and returns (the functional
 * twin's result, a tensor standing for self's value before the write); it makes self
 * (and its base and other views) stand for the new value (ember.aot.functionalize). */
static PyObject *
traced_call(em_Op *op, PyObject **args, em_Tensor *self, bool grad, em_Tensor **old)
{
    PyObject *pair = em_call_tracer(op, args);
    if (pair == NULL)
        return NULL;
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
        !em_Tensor_Check(PyTuple_GET_ITEM(pair, 1))) {
        PyErr_Format(PyExc_TypeError, "the tracer must return (result, old value) for the "
                     "in-place op %U", op->name);
        Py_DECREF(pair);
        return NULL;
    }
    PyObject *res = PyTuple_GET_ITEM(pair, 0);
    Py_INCREF(res);
    if (grad) {
        em_Tensor *o = (em_Tensor *)PyTuple_GET_ITEM(pair, 1);
        o->requires_grad = self->requires_grad;
        Py_XINCREF(self->grad_fn);
        Py_XSETREF(o->grad_fn, self->grad_fn);
        o->output_nr = self->output_nr;
        Py_INCREF(o);
        *old = o;
    }
    Py_DECREF(pair);
    return res;
}

PyObject *
em_inplace_call(em_Op *op, PyObject **args)
{
    em_Op *fn = op->functional;
    if (!em_Tensor_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "%U(): self must be a Tensor", op->name);
        return NULL;
    }
    em_Tensor *self = (em_Tensor *)args[0];
    bool rebase = false;
    if (em_tls.grad_enabled) {
        if (em_view_sync_args(op, args) < 0)
            return NULL;
        bool base_grad = self->base != NULL && ((em_Tensor *)self->base)->requires_grad;
        if ((base_grad || any_requires_grad(op, args)) &&
            check_differentiable(op, self, &rebase) < 0)
            return NULL;
    }
    bool grad = em_tls.grad_enabled && fn->backward != NULL && any_requires_grad(op, args);
    rebase = rebase && grad;
    bool tracing = em_tls.mode == EM_MODE_TRACE && em_tls.tracer != NULL;
    em_Tensor *old = NULL;
    PyObject *res;
    if (tracing)
        res = traced_call(op, args, self, grad, &old);
    else {
        /* a copy of self's value before the write, keeping its place in the graph */
        if (grad && (old = snapshot(self)) == NULL)
            return NULL;
        res = fn->kernel(fn, args);
    }
    if (res == NULL) {
        Py_XDECREF(old);
        return NULL;
    }
    em_Tensor *r = (em_Tensor *)res;
    if (!em_Tensor_Check(res) || check_fits(op, self, r) < 0)
        goto error;
    /* em_copy_into: converting into self never warns (1e200 into float32), as PyTorch */
    if (!em_is_meta(self) && !em_is_meta(r) && em_copy_into(self, res) < 0)
        goto error;
    /* the twin's node saves its inputs before the write counts (so a saved input that
     * shares self's memory, as in a.mul_(a), is found modified) and self after it */
    PyObject *fargs[EM_MAX_PARAMS];
    PyObject *prev_fn = self->grad_fn;
    if (grad) {
        for (int i = 0; i < fn->nparams; i++)
            fargs[i] = args[i];
        fargs[0] = (PyObject *)old;
        if (em_autograd_record(fn, fargs, rebase ? res : (PyObject *)self) < 0)
            goto error;
    }
    self->storage->version++;
    if (grad && rebase && em_view_rebase(fn, fargs, self, res) < 0)
        goto error;
    if (grad && !rebase && self->grad_fn != prev_fn && em_Node_Check(self->grad_fn)) {
        em_Node *node = (em_Node *)self->grad_fn;   /* the twin's: self as written */
        if (self->output_nr < node->nout)
            node->outmeta[self->output_nr].version = self->storage->version;
    }
    Py_XDECREF(old);
    Py_DECREF(res);
    Py_INCREF(self);
    return (PyObject *)self;
error:
    Py_XDECREF(old);
    Py_DECREF(res);
    return NULL;
}
