/* reduction.c: eager kernels of the reduction kinds (sum, mean, amax, max, argmax).
 *
 * Parameter layout of EM_KIND_REDUCE ops: (self, dim, keepdim[, *, dtype]).
 */
#include "ember.h"

static PyObject *reduce_kwnames;   /* ("axis", "dtype", "out", "keepdims") */
static PyObject *return_types;     /* name -> structseq type */

/* (values, indices) as a named tuple, like torch.return_types.max. */
static PyObject *
return_pair(PyObject *opname, PyObject *a, PyObject *b)
{
    PyObject *tp = PyDict_GetItemWithError(return_types, opname);
    if (tp == NULL) {
        if (PyErr_Occurred())
            return NULL;
        static PyStructSequence_Field fields[] = {
            {"values", NULL}, {"indices", NULL}, {NULL, NULL}};
        char name[96];
        snprintf(name, sizeof name, "ember.return_types.%s", PyUnicode_AsUTF8(opname));
        PyStructSequence_Desc desc = {NULL, NULL, fields, 2};
        desc.name = strdup(name);   /* lives as long as the type */
        tp = (PyObject *)PyStructSequence_NewType(&desc);
        if (tp == NULL)
            return NULL;
        if (PyDict_SetItem(return_types, opname, tp) < 0) {
            Py_DECREF(tp);
            return NULL;
        }
        Py_DECREF(tp);
    }
    PyObject *r = PyStructSequence_New((PyTypeObject *)tp);
    if (r == NULL)
        return NULL;
    Py_INCREF(a);
    PyStructSequence_SET_ITEM(r, 0, a);
    Py_INCREF(b);
    PyStructSequence_SET_ITEM(r, 1, b);
    return r;
}

static bool
want_meta(em_Tensor *self)
{
    return em_tls.mode == EM_MODE_META || em_is_meta(self);
}

/* Geometry of a reduction's result. */
static void
reduced_geom(em_Tensor *self, const bool *mask, bool keepdim, em_Geom *g)
{
    g->ndim = 0;
    for (int d = 0; d < self->ndim; d++) {
        if (!mask[d])
            g->sizes[g->ndim++] = self->sizes[d];
        else if (keepdim)
            g->sizes[g->ndim++] = 1;
    }
    em_contiguous_strides(g);
}

static PyObject *
axes_tuple(const bool *mask, int ndim)
{
    int n = 0;
    for (int d = 0; d < ndim; d++)
        n += mask[d];
    PyObject *t = PyTuple_New(n);
    if (t == NULL)
        return NULL;
    for (int d = 0, k = 0; d < ndim; d++)
        if (mask[d])
            PyTuple_SET_ITEM(t, k++, PyLong_FromLong(d));
    return t;
}

/* ufunc.reduce(self, axis=axes, dtype=compute, out=out, keepdims=keepdim) */
static int
ufunc_reduce(PyObject *ufunc, em_Tensor *self, const bool *mask, bool keepdim,
             em_dtype_t compute, em_Tensor *out)
{
    PyObject *axes = axes_tuple(mask, self->ndim);
    if (axes == NULL)
        return -1;
    PyObject *name = PyUnicode_FromString("reduce");
    PyObject *args[6] = {ufunc, (PyObject *)self->array, axes,
                         (PyObject *)em_dtypes[compute]->descr, (PyObject *)out->array,
                         keepdim ? Py_True : Py_False};
    PyObject *r = name ? PyObject_VectorcallMethod(name, args, 2, reduce_kwnames) : NULL;
    Py_XDECREF(name);
    Py_DECREF(axes);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static int
check_nonempty(em_Op *op, em_Tensor *self, const bool *mask)
{
    for (int d = 0; d < self->ndim; d++) {
        if (mask[d] && self->sizes[d] == 0) {
            PyErr_Format(PyExc_IndexError,
                         "%U(): Expected reduction dim %d to have non-zero size.", op->name, d);
            return -1;
        }
    }
    return 0;
}

/* sum, mean, amax, ...: (self, dim, keepdim[, dtype]) */
static PyObject *
k_reduce(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    bool keepdim = args[2] == Py_True;
    PyObject *dtype_arg = op->nparams > 3 ? args[3] : Py_None;
    bool mask[EM_MAX_DIMS];
    if (em_reduce_dims(args[1], self->ndim, mask) < 0)
        return NULL;
    em_Geom g;
    reduced_geom(self, mask, keepdim, &g);
    em_dtype_t in = self->dtype, out_t;
    if (dtype_arg != Py_None)
        out_t = ((em_DType *)dtype_arg)->code;
    else if ((op->rule & EM_RULE_INT_TO_LONG) && !em_is_float(in))
        out_t = EM_INT64;
    else
        out_t = in;
    if ((op->rule & EM_RULE_FLOAT_ONLY) && !em_is_float(out_t)) {
        PyErr_Format(PyExc_RuntimeError,
                     "%U(): could not infer output dtype. Input dtype must be either a floating "
                     "point or complex dtype. Got: %s", op->name, em_dtype_torch_name(out_t));
        return NULL;
    }
    g.dtype = out_t;
    /* reductions without an identity (max, min) refuse empty dims */
    bool has_identity = true;
    if (!(op->rule & EM_RULE_FLOAT_ONLY)) {
        PyObject *ident = PyObject_GetAttrString(op->ufunc, "identity");
        if (ident == NULL)
            return NULL;
        has_identity = ident != Py_None;
        Py_DECREF(ident);
    }
    if (!has_identity && self->numel == 0 &&
        (args[1] == Py_None || (PyTuple_Check(args[1]) && PyTuple_GET_SIZE(args[1]) == 0))) {
        PyErr_Format(PyExc_RuntimeError,
                     "%U(): Expected reduction dim to be specified for input.numel() == 0. "
                     "Specify the reduction dim with the 'dim' argument.", op->name);
        return NULL;
    }
    if (!has_identity && check_nonempty(op, self, mask) < 0)
        return NULL;
    bool meta = want_meta(self);
    em_Tensor *out = em_tensor_empty(&g, meta);
    if (out == NULL || meta)
        return (PyObject *)out;
    if (out_t == EM_FLOAT16) {
        /* float16 accumulates in float32, as PyTorch's reductions do (NumPy would
         * accumulate strided reductions in float16) */
        em_Geom acc_g = g;
        acc_g.dtype = EM_FLOAT32;
        em_Tensor *acc = em_tensor_empty(&acc_g, false);
        if (acc == NULL)
            goto error;
        int st = ufunc_reduce(op->ufunc, self, mask, keepdim, EM_FLOAT32, acc);
        if (st == 0 && (op->rule & EM_RULE_FLOAT_ONLY)) {
            Py_ssize_t count = 1;
            for (int d = 0; d < self->ndim; d++)
                if (mask[d])
                    count *= self->sizes[d];
            PyObject *n = PyLong_FromSsize_t(count);
            PyObject *div = PyObject_GetAttrString(em_numpy, "true_divide");
            PyObject *in2[2] = {(PyObject *)acc, n};
            st = (n && div) ? em_ufunc_call(div, in2, 2, acc->array, EM_FLOAT32, EM_FLOAT32)
                            : -1;
            Py_XDECREF(n);
            Py_XDECREF(div);
        }
        if (st == 0)
            st = PyArray_CopyInto(out->array, acc->array);
        Py_DECREF(acc);
        if (st < 0)
            goto error;
        return (PyObject *)out;
    }
    if (ufunc_reduce(op->ufunc, self, mask, keepdim, out_t, out) < 0)
        goto error;
    if (op->rule & EM_RULE_FLOAT_ONLY) {
        /* mean: divide the sum by the number of reduced elements */
        Py_ssize_t count = 1;
        for (int d = 0; d < self->ndim; d++)
            if (mask[d])
                count *= self->sizes[d];
        PyObject *n = PyLong_FromSsize_t(count);
        PyObject *div = PyObject_GetAttrString(em_numpy, "true_divide");
        PyObject *in2[2] = {(PyObject *)out, n};
        int st = (n && div) ? em_ufunc_call(div, in2, 2, out->array, out_t, out_t) : -1;
        Py_XDECREF(n);
        Py_XDECREF(div);
        if (st < 0)
            goto error;
    }
    return (PyObject *)out;
error:
    Py_DECREF(out);
    return NULL;
}

/* Index tensor of arg-reduction fn (numpy.argmax/argmin) along dim d. */
static em_Tensor *
arg_reduce(PyObject *fn, em_Tensor *self, int d, bool keepdim, const em_Geom *g, bool meta)
{
    em_Geom ig = *g;
    ig.dtype = EM_INT64;
    if (meta)
        return em_tensor_empty(&ig, true);
    PyObject *res;
    if (self->ndim == 0) {
        res = PyArray_ZEROS(0, NULL, NPY_INT64, 0);
    }
    else {
        PyObject *kw = Py_BuildValue("{sisO}", "axis", d, "keepdims",
                                     keepdim ? Py_True : Py_False);
        PyObject *a = PyTuple_Pack(1, (PyObject *)self->array);
        res = (kw && a) ? PyObject_Call(fn, a, kw) : NULL;
        Py_XDECREF(kw);
        Py_XDECREF(a);
    }
    if (res == NULL)
        return NULL;
    /* copied into a fresh tensor of the result's geometry (an empty NumPy result
     * has zero strides) */
    PyObject *arr = PyArray_FROM_O(res);   /* a 0-d result is a NumPy scalar */
    Py_DECREF(res);
    if (arr == NULL)
        return NULL;
    em_Tensor *t = em_tensor_empty(&ig, false);
    if (t != NULL && PyArray_CopyInto(t->array, (PyArrayObject *)arr) < 0)
        Py_CLEAR(t);
    Py_DECREF(arr);
    return t;
}

/* max.dim / min.dim: (self, dim, keepdim) -> (values, indices) */
static PyObject *
k_reduce_index(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t d = PyLong_AsSsize_t(args[1]);
    bool keepdim = args[2] == Py_True;
    if (d == -1 && PyErr_Occurred())
        return NULL;
    if (em_wrap_dim(&d, self->ndim) < 0)
        return NULL;
    bool mask[EM_MAX_DIMS] = {false};
    if (self->ndim > 0)
        mask[d] = true;
    if (check_nonempty(op, self, mask) < 0)
        return NULL;
    em_Geom g;
    reduced_geom(self, mask, keepdim, &g);
    g.dtype = self->dtype;
    bool meta = want_meta(self);
    em_Tensor *values = em_tensor_empty(&g, meta);
    em_Tensor *indices = NULL;
    PyObject *res = NULL;
    if (values == NULL)
        return NULL;
    if (!meta && ufunc_reduce(op->ufunc, self, mask, keepdim, self->dtype, values) < 0)
        goto done;
    indices = arg_reduce(op->reduce_ufunc, self, (int)d, keepdim, &g, meta);
    if (indices == NULL)
        goto done;
    res = return_pair(op->name, (PyObject *)values, (PyObject *)indices);
done:
    Py_XDECREF(values);
    Py_XDECREF(indices);
    return res;
}

/* max() / min() over all elements: a 0-d tensor. */
static PyObject *
k_reduce_all(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    if (self->numel == 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "%U(): Expected reduction dim to be specified for input.numel() == 0. "
                     "Specify the reduction dim with the 'dim' argument.", op->name);
        return NULL;
    }
    bool mask[EM_MAX_DIMS];
    for (int d = 0; d < self->ndim; d++)
        mask[d] = true;
    em_Geom g = {.ndim = 0, .dtype = self->dtype};
    bool meta = want_meta(self);
    em_Tensor *out = em_tensor_empty(&g, meta);
    if (out == NULL || meta)
        return (PyObject *)out;
    if (ufunc_reduce(op->ufunc, self, mask, false, self->dtype, out) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return (PyObject *)out;
}

/* argmax/argmin(self, dim=None, keepdim=False) */
static PyObject *
k_argreduce(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    bool keepdim = args[2] == Py_True;
    bool meta = want_meta(self);
    if (self->dtype == EM_BOOL) {
        PyErr_Format(PyExc_RuntimeError, "%U(): does not support bool input", op->name);
        return NULL;
    }
    if (args[1] == Py_None) {
        if (self->numel == 0) {
            PyErr_Format(PyExc_IndexError,
                         "%U(): Expected reduction dim to be specified for input.numel() == 0.",
                         op->name);
            return NULL;
        }
        em_Geom g = {.ndim = keepdim ? self->ndim : 0, .dtype = EM_INT64};
        for (int i = 0; i < g.ndim; i++)
            g.sizes[i] = 1;
        em_contiguous_strides(&g);
        if (meta)
            return (PyObject *)em_tensor_empty(&g, true);
        PyObject *flat = PyArray_Ravel(self->array, NPY_CORDER);
        if (flat == NULL)
            return NULL;
        PyObject *idx = PyObject_CallOneArg(op->reduce_ufunc, flat);
        Py_DECREF(flat);
        if (idx == NULL)
            return NULL;
        em_Tensor *out = em_tensor_empty(&g, false);
        if (out != NULL && PyArray_SETITEM(out->array, PyArray_DATA(out->array), idx) < 0)
            Py_CLEAR(out);
        Py_DECREF(idx);
        return (PyObject *)out;
    }
    Py_ssize_t d = PyLong_AsSsize_t(args[1]);
    if (d == -1 && PyErr_Occurred())
        return NULL;
    if (em_wrap_dim(&d, self->ndim) < 0)
        return NULL;
    bool mask[EM_MAX_DIMS] = {false};
    if (self->ndim > 0)
        mask[d] = true;
    if (check_nonempty(op, self, mask) < 0)
        return NULL;
    em_Geom g;
    reduced_geom(self, mask, keepdim, &g);
    return (PyObject *)arg_reduce(op->reduce_ufunc, self, (int)d, keepdim, &g, meta);
}

const em_KernelEntry em_reduction_kernels[] = {
    {"reduce", k_reduce},
    {"reduce_index", k_reduce_index},
    {"reduce_all", k_reduce_all},
    {"argreduce", k_argreduce},
    {NULL, NULL},
};

int
em_reduction_init(void)
{
    reduce_kwnames = Py_BuildValue("(ssss)", "axis", "dtype", "out", "keepdims");
    return_types = PyDict_New();
    return (reduce_kwnames && return_types) ? 0 : -1;
}
