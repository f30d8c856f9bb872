/* inplace.c: in-place ops (add_, mul_, copy_, ...).
 *
 * An in-place op names its functional twin (add_ -> add). It runs the twin's
 * kernel, checks that the result fits self (same shape; a dtype self can hold),
 * writes it into self's memory and bumps the version counter shared by self
 * and its views. With autograd on, the twin's node is recorded over a copy of
 * self's old value and self is rebased onto that node.
 */
#include "ember.h"
#include "kernels/kutil.h"

/* PyTorch's canCast: no float into integers, nothing but bool into bool. */
static bool
can_cast(em_dtype_t from, em_dtype_t to)
{
    if (em_is_float(from) && !em_is_float(to))
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
        PyObject *a = em_format_shape(self->ndim, self->sizes);
        PyObject *b = em_format_shape(res->ndim, res->sizes);
        if (a && b)
            PyErr_Format(PyExc_RuntimeError,
                         "%U(): output with shape %U doesn't match the broadcast shape %U",
                         op->name, a, b);
        Py_XDECREF(a);
        Py_XDECREF(b);
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

PyObject *
em_inplace_call(em_Op *op, PyObject **args)
{
    em_Op *fn = op->functional;
    if (!em_Tensor_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "%U(): self must be a Tensor", op->name);
        return NULL;
    }
    em_Tensor *self = (em_Tensor *)args[0];
    bool grad = em_tls.grad_enabled && fn->backward != NULL && any_requires_grad(op, args);
    if (em_tls.grad_enabled && self->requires_grad && self->grad_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a leaf Variable that requires grad is being used in an in-place "
                        "operation.");
        return NULL;
    }
    if (grad && self->base != NULL && ((em_Tensor *)self->base)->requires_grad) {
        PyErr_Format(PyExc_NotImplementedError,
                     "%U(): ember does not yet differentiate in-place updates of views of "
                     "tensors that require grad; use the out-of-place op", op->name);
        return NULL;
    }
    /* under tracing the tracer sees the functional op: in-place becomes a new value
     * that self stands for from now on (functionalization) */
    bool tracing = em_tls.mode == EM_MODE_TRACE && em_tls.tracer != NULL;
    PyObject *res = tracing ? em_call_tracer(fn, args) : fn->kernel(fn, args);
    if (res == NULL)
        return NULL;
    em_Tensor *r = (em_Tensor *)res;
    em_Tensor *old = NULL;
    if (!em_Tensor_Check(res) || check_fits(op, self, r) < 0)
        goto error;
    if (tracing && r->dtype != self->dtype) {
        /* the twin computed in the promoted dtype; self keeps its own, so the value self
         * stands for is the result converted into it, as the copy below converts */
        PyObject *kw = Py_BuildValue("(s)", "dtype");
        PyObject *a[2] = {res, (PyObject *)em_dtypes[self->dtype]};
        PyObject *conv = kw ? em_call_kw("_to_copy", a, 1, kw) : NULL;
        Py_XDECREF(kw);
        if (conv == NULL)
            goto error;
        Py_SETREF(res, conv);
        r = (em_Tensor *)res;
    }
    if (grad && (old = snapshot(self)) == NULL)
        goto error;
    /* em_copy_into: converting into self never warns (1e200 into float32), as PyTorch */
    if (!em_is_meta(self) && !em_is_meta(r) && em_copy_into(self, res) < 0)
        goto error;
    if (tracing) {
        Py_XINCREF(r->trace);
        Py_XSETREF(self->trace, r->trace);
    }
    self->storage->version++;
    if (grad) {
        PyObject *fargs[EM_MAX_PARAMS];
        for (int i = 0; i < fn->nparams; i++)
            fargs[i] = args[i];
        fargs[0] = (PyObject *)old;
        if (em_autograd_record(fn, fargs, (PyObject *)self) < 0)
            goto error;
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
