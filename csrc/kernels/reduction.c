/* reduction.c: eager kernels of the reduction kinds (sum, mean, amax, max, argmax).
 *
 * Parameter layout of EM_KIND_REDUCE ops: (self, dim, keepdim[, *, dtype]).
 */
#include "kutil.h"

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
    PyObject *args[5] = {(PyObject *)self->array, axes, (PyObject *)em_dtypes[compute]->descr,
                         (PyObject *)out->array, keepdim ? Py_True : Py_False};
    PyObject *r = em_ufunc_method(ufunc, em_str_reduce, args, 1, reduce_kwnames);
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

static em_dtype_t
acc_dtype(em_dtype_t t)
{
    return em_is_half(t) ? EM_FLOAT32 : t;
}

static Py_ssize_t
reduced_count(em_Tensor *self, const bool *mask)
{
    Py_ssize_t n = 1;
    for (int d = 0; d < self->ndim; d++)
        if (mask[d])
            n *= self->sizes[d];
    return n;
}

/* A fresh contiguous temporary of geometry g in dtype dt. */
static em_Tensor *
temp_of(const em_Geom *g, em_dtype_t dt)
{
    em_Geom t = *g;
    t.dtype = dt;
    em_contiguous_strides(&t);
    return em_tensor_empty(&t, false);
}

static em_Tensor *
temp_like(em_Tensor *self, em_dtype_t dt)
{
    return em_empty(self->ndim, self->sizes, dt, false);
}

/* ufunc(a[, b]) -> out with the loop in dtype ct. */
static int
uf(PyObject *ufunc, PyObject *a, PyObject *b, em_Tensor *out, em_dtype_t ct, em_dtype_t rt)
{
    PyObject *ins[2] = {a, b};
    return em_ufunc_call(ufunc, ins, b == NULL ? 1 : 2, out->array, ct, rt);
}

static int
uf_scalar(PyObject *ufunc, PyObject *a, double v, em_Tensor *out, em_dtype_t ct)
{
    PyObject *f = PyFloat_FromDouble(v);
    if (f == NULL)
        return -1;
    int st = uf(ufunc, a, f, out, ct, ct);
    Py_DECREF(f);
    return st;
}

/* Copies src into out, whose shape is src's with size-1 dims dropped (keepdim=False). */
static int
copy_reshaped(em_Tensor *out, em_Tensor *src)
{
    if (out->numel == 0)
        return 0;
    PyArray_Dims shape = {(npy_intp *)out->sizes, out->ndim};
    PyObject *v = PyArray_Newshape(src->array, &shape, NPY_CORDER);
    if (v == NULL)
        return -1;
    int st = PyArray_CopyInto(out->array, (PyArrayObject *)v);
    Py_DECREF(v);
    return st;
}

static int
reduce_mask_of(PyObject *dims, em_Tensor *self, bool *mask)
{
    PyObject *owned = NULL;
    if (PyLong_Check(dims) && (dims = owned = PyTuple_Pack(1, dims)) == NULL)
        return -1;
    int st = em_reduce_dims(dims, self->ndim, mask);
    Py_XDECREF(owned);
    return st;
}

/* sum, mean, amax, prod, ...: (self, dim, keepdim[, dtype]); dim None, an int or a
 * tuple of ints. float16 accumulates in float32, as PyTorch's reductions do (NumPy would
 * accumulate strided reductions in float16). */
/* A float32 sum over the trailing dims of a C-contiguous tensor (all of them, or the
 * last few) straight into the contiguous float32 acc: cloops.c's vectorised row sums
 * instead of NumPy's reduce. 1 when done, 0 when the case is not this one. */
static int
sum_rows_f32(em_Op *op, em_Tensor *self, const bool *mask, em_Tensor *acc)
{
    if (op->ufunc != em_np.add || self->dtype != EM_FLOAT32 || acc->dtype != EM_FLOAT32 ||
        self->numel == 0 || !PyArray_IS_C_CONTIGUOUS(self->array) ||
        !PyArray_IS_C_CONTIGUOUS(acc->array))
        return 0;
    int first = self->ndim;
    while (first > 0 && mask[first - 1])
        first--;
    for (int d = 0; d < first; d++)
        if (mask[d] && self->sizes[d] != 1)
            return 0;
    Py_ssize_t n = 1;
    for (int d = first; d < self->ndim; d++)
        n *= self->sizes[d];
    Py_ssize_t rows = self->numel / n;
    if (acc->numel != rows)
        return 0;
    const float *x = PyArray_DATA(self->array);
    float *y = PyArray_DATA(acc->array);
    PyThreadState *ts = self->numel >= (1 << 16) ? PyEval_SaveThread() : NULL;
    em_sum_rows_f32(x, y, rows, n);
    if (ts != NULL)
        PyEval_RestoreThread(ts);
    return 1;
}

static PyObject *
reduce_impl(em_Op *op, em_Tensor *self, PyObject *dims, bool keepdim, PyObject *dtype_arg)
{
    bool mask[EM_MAX_DIMS];
    if (reduce_mask_of(dims, self, mask) < 0)
        return NULL;
    em_dtype_t in = self->dtype, out_t;
    if (em_is_complex(in) && !(op->rule & EM_RULE_COMPLEX)) {
        PyErr_Format(PyExc_NotImplementedError, "%U(): \"%U\" not implemented for '%s'",
                     op->name, op->name, em_dtype_torch_name(in));
        return NULL;
    }
    if (dtype_arg != Py_None)
        out_t = ((em_DType *)dtype_arg)->code;
    else if ((op->rule & EM_RULE_INT_TO_LONG) && !em_is_inexact(in))
        out_t = EM_INT64;
    else
        out_t = in;
    if ((op->rule & EM_RULE_FLOAT_ONLY) && !em_is_inexact(out_t)) {
        PyErr_Format(PyExc_RuntimeError,
                     "%U(): could not infer output dtype. Input dtype must be either a floating "
                     "point or complex dtype. Got: %s", op->name, em_dtype_torch_name(out_t));
        return NULL;
    }
    /* reductions without an identity (max, min) refuse empty dims */
    bool has_identity = (op->rule & EM_RULE_FLOAT_ONLY) || op->ufunc_has_identity;
    if (!has_identity && self->numel == 0 &&
        (dims == Py_None || (PyTuple_Check(dims) && PyTuple_GET_SIZE(dims) == 0))) {
        PyErr_Format(PyExc_RuntimeError,
                     "%U(): Expected reduction dim to be specified for input.numel() == 0. "
                     "Specify the reduction dim with the 'dim' argument.", op->name);
        return NULL;
    }
    if (!has_identity && check_nonempty(op, self, mask) < 0)
        return NULL;
    em_Geom g;
    reduced_geom(self, mask, keepdim, &g);
    g.dtype = out_t;
    bool meta = em_meta_of(self);
    em_Tensor *out = em_tensor_empty(&g, meta);
    if (out == NULL || meta)
        return (PyObject *)out;
    em_dtype_t ct = acc_dtype(out_t);
    em_Tensor *acc = ct == out_t ? (Py_INCREF(out), out) : temp_of(&g, ct);
    int st = acc == NULL ? -1
             : sum_rows_f32(op, self, mask, acc) ? 0
                                                  : ufunc_reduce(op->ufunc, self, mask, keepdim,
                                                                 ct, acc);
    if (st == 0 && (op->rule & EM_RULE_FLOAT_ONLY))   /* mean: the sum over the count */
        st = uf_scalar(em_np.true_divide, (PyObject *)acc, (double)reduced_count(self, mask),
                       acc, ct);
    if (st == 0 && acc != out)
        st = PyArray_CopyInto(out->array, acc->array);
    Py_XDECREF(acc);
    return em_finish(out, st);
}

static PyObject *
k_reduce(em_Op *op, PyObject **args)
{
    return reduce_impl(op, (em_Tensor *)args[0], args[1], args[2] == Py_True,
                       op->nparams > 3 ? args[3] : Py_None);
}

/* prod(self, *, dtype): over all elements */
static PyObject *
k_prod_all(em_Op *op, PyObject **args)
{
    return reduce_impl(op, (em_Tensor *)args[0], Py_None, false, args[1]);
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

/* The one dim max.dim and argmax reduce, wrapped, and as a mask; an empty one is an
 * error. */
static int
one_dim(em_Op *op, em_Tensor *self, PyObject *dim, Py_ssize_t *d, bool *mask)
{
    if (em_dim_arg(dim, self->ndim, d) < 0)
        return -1;
    memset(mask, 0, sizeof(bool) * EM_MAX_DIMS);
    mask[*d] = self->ndim > 0;
    return check_nonempty(op, self, mask);
}

/* max.dim / min.dim: (self, dim, keepdim) -> (values, indices) */
static PyObject *
k_reduce_index(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    if (em_refuse_complex(op, args[0]) < 0)
        return NULL;
    bool keepdim = args[2] == Py_True, mask[EM_MAX_DIMS];
    Py_ssize_t d;
    if (one_dim(op, self, args[1], &d, mask) < 0)
        return NULL;
    em_Geom g;
    reduced_geom(self, mask, keepdim, &g);
    g.dtype = self->dtype;
    bool meta = em_meta_of(self);
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
    if (em_refuse_complex(op, args[0]) < 0)
        return NULL;
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
    bool meta = em_meta_of(self);
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
    if (em_refuse_complex(op, args[0]) < 0)
        return NULL;
    bool keepdim = args[2] == Py_True;
    bool meta = em_meta_of(self);
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
    Py_ssize_t d;
    bool mask[EM_MAX_DIMS];
    if (one_dim(op, self, args[1], &d, mask) < 0)
        return NULL;
    em_Geom g;
    reduced_geom(self, mask, keepdim, &g);
    return (PyObject *)arg_reduce(op->reduce_ufunc, self, (int)d, keepdim, &g, meta);
}

/* ------------------------------------------------------------------ computed reductions
 * var, std, norm, logsumexp, softmax, cumsum/cumprod, all/any, sort, topk: NumPy
 * ufuncs (reduce, accumulate and elementwise loops) on temporaries, in float32 for
 * float16 inputs as PyTorch accumulates. */

/* var / std (op->ufunc is sqrt): (self, dim, unbiased, keepdim, *, correction) */
static PyObject *
k_var(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    PyObject *unbiased = args[2], *correction = args[4];
    bool keepdim = args[3] == Py_True;
    if (unbiased != Py_None && correction != Py_None) {
        PyErr_Format(PyExc_TypeError, "%U() received an invalid combination of arguments: "
                     "unbiased and correction cannot both be given", op->name);
        return NULL;
    }
    if (em_is_complex(self->dtype))     /* the parts' variances summed (ops/reductions.py) */
        return em_decomposed_kernel(op, args);
    if (!em_is_float(self->dtype)) {
        PyErr_Format(PyExc_RuntimeError,
                     "%U(): std and var only support floating point and complex dtypes",
                     op->name);
        return NULL;
    }
    double c = unbiased == Py_False ? 0.0 : 1.0;
    if (correction != Py_None && (c = PyFloat_AsDouble(correction)) == -1.0 && PyErr_Occurred())
        return NULL;
    bool mask[EM_MAX_DIMS];
    if (reduce_mask_of(args[1], self, mask) < 0)
        return NULL;
    em_Geom g, kg;
    reduced_geom(self, mask, keepdim, &g);
    reduced_geom(self, mask, true, &kg);
    g.dtype = self->dtype;
    bool meta = em_meta_of(self);
    em_Tensor *out = em_tensor_empty(&g, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    em_dtype_t ct = acc_dtype(self->dtype);
    Py_ssize_t n = reduced_count(self, mask);
    double dof = n - c;
    em_Tensor *mean = temp_of(&kg, ct), *d = temp_like(self, ct);
    em_Tensor *s = ct == out->dtype ? (Py_INCREF(out), out) : temp_of(&g, ct);
    int st = (mean && d && s) ? 0 : -1;
    if (st == 0)
        st = ufunc_reduce(em_np.add, self, mask, true, ct, mean);
    if (st == 0)
        st = uf_scalar(em_np.true_divide, (PyObject *)mean, (double)n, mean, ct);
    if (st == 0)
        st = uf(em_np.subtract, (PyObject *)self, (PyObject *)mean, d, ct, ct);
    if (st == 0)
        st = uf(em_np.multiply, (PyObject *)d, (PyObject *)d, d, ct, ct);
    if (st == 0)
        st = ufunc_reduce(em_np.add, d, mask, keepdim, ct, s);
    if (st == 0)
        st = uf_scalar(em_np.true_divide, (PyObject *)s, dof > 0 ? dof : 0.0, s, ct);
    if (st == 0 && op->ufunc != NULL)
        st = em_ufunc_call(op->ufunc, (PyObject **)&s, 1, s->array, ct, ct);
    if (st == 0 && s != out)
        st = PyArray_CopyInto(out->array, s->array);
    Py_XDECREF(mean);
    Py_XDECREF(d);
    Py_XDECREF(s);
    return em_finish(out, st);
}

/* The order of norm's p: None and 'fro' are 2; 'nuc' is not supported. */
static int
norm_order(PyObject *p, PyObject *dims, double *out)
{
    if (p == Py_None) {
        *out = 2.0;
        return 0;
    }
    if (PyUnicode_Check(p)) {
        if (PyUnicode_CompareWithASCIIString(p, "fro") == 0) {
            if (dims != Py_None && PyTuple_Check(dims) && PyTuple_GET_SIZE(dims) > 2) {
                PyErr_SetString(PyExc_RuntimeError,
                                "norm(): linalg.matrix_norm: dim must be a 2-tuple.");
                return -1;
            }
            *out = 2.0;
            return 0;
        }
        if (PyUnicode_CompareWithASCIIString(p, "nuc") == 0) {
            PyErr_SetString(PyExc_NotImplementedError,
                            "norm(): the nuclear norm (p='nuc') is not supported");
            return -1;
        }
        PyErr_Format(PyExc_RuntimeError, "norm(): linalg.matrix_norm: Order %U not supported.",
                     p);
        return -1;
    }
    if (em_Tensor_Check(p) || !em_is_number(p)) {
        if (em_Tensor_Check(p) && ((em_Tensor *)p)->numel == 1 && !em_is_meta((em_Tensor *)p)) {
            PyObject *item = PyObject_CallMethod(p, "item", NULL);
            if (item == NULL)
                return -1;
            *out = PyFloat_AsDouble(item);
            Py_DECREF(item);
            return PyErr_Occurred() ? -1 : 0;
        }
        PyErr_Format(PyExc_TypeError, "norm(): argument 'p' must be a number or a string, "
                     "not %s", em_Tensor_Check(p) ? "Tensor" : Py_TYPE(p)->tp_name);
        return -1;
    }
    *out = PyFloat_AsDouble(p);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/* norm(self, p='fro', dim=None, keepdim=False, *, dtype=None): the vector p-norm */
static PyObject *
k_norm(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    PyObject *dims = args[2], *dtype_arg = args[4];
    bool keepdim = args[3] == Py_True;
    double p;
    if (norm_order(args[1], dims, &p) < 0)
        return NULL;
    if (em_is_complex(self->dtype))     /* the norm of the magnitudes (ops/reductions.py) */
        return em_decomposed_kernel(op, args);
    if (!em_is_float(self->dtype)) {
        PyErr_Format(PyExc_RuntimeError, "norm(): linalg.vector_norm: Expected a floating "
                     "point or complex tensor as input. Got %s",
                     em_dtype_torch_name(self->dtype));
        return NULL;
    }
    em_dtype_t rt = dtype_arg == Py_None ? self->dtype : ((em_DType *)dtype_arg)->code;
    if (!em_is_float(rt)) {
        PyErr_Format(PyExc_RuntimeError, "norm(): linalg.vector_norm: dtype should be floating "
                     "point or complex, but got %s", em_dtype_torch_name(rt));
        return NULL;
    }
    bool mask[EM_MAX_DIMS];
    if (reduce_mask_of(dims, self, mask) < 0)
        return NULL;
    if (self->numel == 0 && (p < 0 || isinf(p))) {
        bool empty_dim = self->ndim == 0;
        for (int d = 0; d < self->ndim; d++)
            empty_dim |= mask[d] && self->sizes[d] == 0;
        if (empty_dim) {
            PyObject *pf = PyFloat_FromDouble(p);
            if (pf != NULL)
                PyErr_Format(PyExc_RuntimeError, "norm(): linalg.vector_norm cannot compute "
                             "the %R norm on an empty tensor because the operation does not "
                             "have an identity", pf);
            Py_XDECREF(pf);
            return NULL;
        }
    }
    em_Geom g;
    reduced_geom(self, mask, keepdim, &g);
    g.dtype = rt;
    bool meta = em_meta_of(self);
    em_Tensor *out = em_tensor_empty(&g, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    em_dtype_t ct = acc_dtype(rt);
    em_Tensor *a = temp_like(self, ct);
    em_Tensor *s = ct == rt ? (Py_INCREF(out), out) : temp_of(&g, ct);
    em_Tensor *nz = NULL;
    int st = (a && s) ? uf(em_np.absolute, (PyObject *)self, NULL, a, ct, ct) : -1;
    if (st < 0)
        goto done;
    if (isinf(p)) {
        st = ufunc_reduce(p > 0 ? em_np.maximum : em_np.minimum, a, mask, keepdim, ct, s);
    }
    else if (p == 0) {
        PyObject *zero = PyLong_FromLong(0);
        nz = temp_like(self, EM_BOOL);
        st = (zero && nz) ? uf(em_np.not_equal, (PyObject *)a, zero, nz, ct, EM_BOOL) : -1;
        Py_XDECREF(zero);
        if (st == 0)
            st = ufunc_reduce(em_np.add, nz, mask, keepdim, ct, s);
    }
    else if (p == 1) {
        st = ufunc_reduce(em_np.add, a, mask, keepdim, ct, s);
    }
    else if (p == 2) {
        st = uf(em_np.multiply, (PyObject *)a, (PyObject *)a, a, ct, ct);
        if (st == 0)
            st = ufunc_reduce(em_np.add, a, mask, keepdim, ct, s);
        if (st == 0)
            st = uf(em_np.sqrt, (PyObject *)s, NULL, s, ct, ct);
    }
    else {
        st = uf_scalar(em_np.power, (PyObject *)a, p, a, ct);
        if (st == 0)
            st = ufunc_reduce(em_np.add, a, mask, keepdim, ct, s);
        if (st == 0)
            st = uf_scalar(em_np.power, (PyObject *)s, 1.0 / p, s, ct);
    }
    if (st == 0 && s != out)
        st = PyArray_CopyInto(out->array, s->array);
done:
    Py_XDECREF(a);
    Py_XDECREF(s);
    Py_XDECREF(nz);
    return em_finish(out, st);
}

/* m where it is finite, else 0 (the shift of logsumexp and softmax). */
static int
finite_or_zero(em_Tensor *m)
{
    em_Tensor *fin = temp_like(m, EM_BOOL);
    if (fin == NULL)
        return -1;
    int st = uf(em_np.isfinite, (PyObject *)m, NULL, fin, m->dtype, EM_BOOL);
    PyObject *zero = st == 0 ? PyFloat_FromDouble(0.0) : NULL;
    PyObject *w = zero ? PyArray_Where((PyObject *)fin->array, (PyObject *)m->array, zero) : NULL;
    st = w != NULL ? PyArray_CopyInto(m->array, (PyArrayObject *)w) : -1;
    Py_XDECREF(w);
    Py_XDECREF(zero);
    Py_DECREF(fin);
    return st;
}

/* logsumexp(self, dim, keepdim): m + log(sum(exp(self - m))), m the finite maximum */
static PyObject *
k_logsumexp(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    if (em_refuse_complex(op, args[0]) < 0)
        return NULL;
    bool keepdim = args[2] == Py_True;
    bool mask[EM_MAX_DIMS];
    if (reduce_mask_of(args[1], self, mask) < 0)
        return NULL;
    em_dtype_t rt = em_is_float(self->dtype) ? self->dtype : em_default_dtype;
    em_Geom g, kg;
    reduced_geom(self, mask, keepdim, &g);
    reduced_geom(self, mask, true, &kg);
    g.dtype = rt;
    bool meta = em_meta_of(self);
    em_Tensor *out = em_tensor_empty(&g, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    if (reduced_count(self, mask) == 0) {
        PyObject *ninf = PyFloat_FromDouble(-INFINITY);
        int st = ninf ? PyArray_FillWithScalar(out->array, ninf) : -1;
        Py_XDECREF(ninf);
        return em_finish(out, st);
    }
    em_dtype_t ct = acc_dtype(rt);
    em_Tensor *m = temp_of(&kg, ct), *e = temp_like(self, ct), *s = temp_of(&kg, ct);
    int st = (m && e && s) ? ufunc_reduce(em_np.maximum, self, mask, true, ct, m) : -1;
    if (st == 0)
        st = finite_or_zero(m);
    if (st == 0)
        st = uf(em_np.subtract, (PyObject *)self, (PyObject *)m, e, ct, ct);
    if (st == 0)
        st = uf(em_np.exp, (PyObject *)e, NULL, e, ct, ct);
    if (st == 0)
        st = ufunc_reduce(em_np.add, e, mask, true, ct, s);
    if (st == 0)
        st = uf(em_np.log, (PyObject *)s, NULL, s, ct, ct);
    if (st == 0)
        st = uf(em_np.add, (PyObject *)s, (PyObject *)m, s, ct, ct);
    if (st == 0)
        st = copy_reshaped(out, s);
    Py_XDECREF(m);
    Py_XDECREF(e);
    Py_XDECREF(s);
    return em_finish(out, st);
}


/* softmax / log_softmax (op->ufunc is log): (self, dim, dtype) */
static PyObject *
k_softmax(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t d;
    if (em_dim_arg(args[1], self->ndim, &d) < 0)
        return NULL;
    if (args[2] == Py_None && !em_is_float(self->dtype) && self->numel > 0) {
        PyErr_Format(PyExc_NotImplementedError,
                     "%U(): \"%U_lastdim_kernel_impl\" not implemented for '%s'", op->name,
                     op->name, em_dtype_torch_name(self->dtype));
        return NULL;
    }
    em_dtype_t rt = args[2] == Py_None ? self->dtype : ((em_DType *)args[2])->code;
    bool meta = em_meta_of(self);
    em_Tensor *out = em_empty(self->ndim, self->sizes, rt, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    /* the common case, a contiguous float tensor along its last dim: one C pass per row */
    if (self->ndim > 0 && d == self->ndim - 1) {
        int st = em_softmax_lastdim(self, out, op->ufunc != NULL);
        if (st != 0)
            return em_finish(out, st);
    }
    bool mask[EM_MAX_DIMS] = {false};
    if (self->ndim > 0)
        mask[d] = true;
    em_Geom kg;
    reduced_geom(self, mask, true, &kg);
    em_dtype_t ct = em_is_float(rt) ? acc_dtype(rt) : EM_FLOAT64;
    em_Tensor *m = temp_of(&kg, ct), *z = temp_like(self, ct), *s = temp_of(&kg, ct);
    em_Tensor *e = NULL;
    int st = (m && z && s) ? ufunc_reduce(em_np.maximum, self, mask, true, ct, m) : -1;
    if (st == 0)
        st = uf(em_np.subtract, (PyObject *)self, (PyObject *)m, z, ct, ct);
    if (st == 0 && op->ufunc == NULL) {   /* softmax: e / sum(e) */
        st = uf(em_np.exp, (PyObject *)z, NULL, z, ct, ct);
        if (st == 0)
            st = ufunc_reduce(em_np.add, z, mask, true, ct, s);
        if (st == 0)
            st = uf(em_np.true_divide, (PyObject *)z, (PyObject *)s, z, ct, ct);
    }
    else if (st == 0) {                   /* log_softmax: z - log(sum(exp(z))) */
        e = temp_like(self, ct);
        st = e ? uf(em_np.exp, (PyObject *)z, NULL, e, ct, ct) : -1;
        if (st == 0)
            st = ufunc_reduce(em_np.add, e, mask, true, ct, s);
        if (st == 0)
            st = uf(em_np.log, (PyObject *)s, NULL, s, ct, ct);
        if (st == 0)
            st = uf(em_np.subtract, (PyObject *)z, (PyObject *)s, z, ct, ct);
    }
    if (st == 0)
        st = PyArray_CopyInto(out->array, z->array);
    Py_XDECREF(m);
    Py_XDECREF(z);
    Py_XDECREF(s);
    Py_XDECREF(e);
    return em_finish(out, st);
}

/* cumsum / cumprod (op->ufunc add / multiply): (self, dim, *, dtype) via ufunc.accumulate */
static PyObject *
k_cumulative(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    if (em_refuse_complex(op, args[0]) < 0)
        return NULL;
    Py_ssize_t d;
    if (em_dim_arg(args[1], self->ndim, &d) < 0)
        return NULL;
    em_dtype_t rt = args[2] != Py_None ? ((em_DType *)args[2])->code
                                       : (em_is_inexact(self->dtype) ? self->dtype : EM_INT64);
    bool meta = em_meta_of(self);
    em_Tensor *out = em_empty(self->ndim, self->sizes, rt, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    if (self->ndim == 0)
        return em_finish(out, em_copy_into(out, (PyObject *)self));
    em_dtype_t ct = acc_dtype(rt);
    em_Tensor *acc = ct == rt ? (Py_INCREF(out), out) : temp_like(self, ct);
    if (acc == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    static PyObject *kwnames;
    if (kwnames == NULL && (kwnames = Py_BuildValue("(sss)", "axis", "dtype", "out")) == NULL)
        return NULL;
    PyObject *axis = PyLong_FromSsize_t(d);
    PyObject *a[4] = {(PyObject *)self->array, axis, (PyObject *)em_dtypes[ct]->descr,
                      (PyObject *)acc->array};
    PyObject *r = axis ? em_ufunc_method(op->ufunc, em_str_accumulate, a, 1, kwnames) : NULL;
    Py_XDECREF(axis);
    int st = r ? 0 : -1;
    Py_XDECREF(r);
    if (st == 0 && acc != out)
        st = PyArray_CopyInto(out->array, acc->array);
    Py_DECREF(acc);
    return em_finish(out, st);
}

/* all / any (op->ufunc logical_and / logical_or): (self, dim, keepdim); bool results,
 * uint8 for uint8 inputs */
static PyObject *
k_logical(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    bool keepdim = args[2] == Py_True;
    bool mask[EM_MAX_DIMS] = {false};
    /* an empty dim list reduces nothing here (for sum it means every dim) */
    if (!(PyTuple_Check(args[1]) && PyTuple_GET_SIZE(args[1]) == 0) &&
        reduce_mask_of(args[1], self, mask) < 0)
        return NULL;
    em_Geom g;
    reduced_geom(self, mask, keepdim, &g);
    g.dtype = self->dtype == EM_UINT8 ? EM_UINT8 : EM_BOOL;
    bool meta = em_meta_of(self);
    em_Tensor *out = em_tensor_empty(&g, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    em_Tensor *b = g.dtype == EM_BOOL ? (Py_INCREF(out), out) : temp_of(&g, EM_BOOL);
    int st = b ? ufunc_reduce(op->ufunc, self, mask, keepdim, EM_BOOL, b) : -1;
    if (st == 0 && b != out)
        st = PyArray_CopyInto(out->array, b->array);
    Py_XDECREF(b);
    return em_finish(out, st);
}

/* The stable sorting permutation of arr along d (int64, C order): ascending, or
 * descending with ties still in their original order and NaN first. */
static PyArrayObject *
sort_indices(PyArrayObject *arr, int d, bool descending)
{
    if (!descending)
        return (PyArrayObject *)PyArray_ArgSort(arr, d, NPY_STABLESORT);
    /* descending: sort the reversed line ascending, read it backwards and map the
     * positions back: ties come out in their original order */
    PyArrayObject *rev = em_flip_view(arr, d);
    if (rev == NULL)
        return NULL;
    PyArrayObject *a = (PyArrayObject *)PyArray_ArgSort(rev, d, NPY_STABLESORT);
    Py_DECREF(rev);
    if (a == NULL)
        return NULL;
    PyArrayObject *ra = em_flip_view(a, d);
    Py_DECREF(a);
    if (ra == NULL)
        return NULL;
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(PyArray_NDIM(arr),
                                                            PyArray_DIMS(arr), NPY_INT64);
    PyObject *last = PyLong_FromSsize_t(PyArray_DIMS(arr)[d] - 1);
    PyObject *ins[2] = {last, (PyObject *)ra};
    int st = (out && last)
                 ? em_ufunc_call(em_np.subtract, ins, 2, out, EM_UNDEFINED, EM_UNDEFINED) : -1;
    Py_XDECREF(last);
    Py_DECREF(ra);
    if (st < 0)
        Py_CLEAR(out);
    return out;
}

/* sort_indices for any rank: NumPy's sort iterates with its legacy iterators, which
 * take at most 32 dims, so a higher-rank array is sorted as a contiguous copy viewed as
 * (before d, along d, after d), which sorts the same lines in the same order. */
static PyArrayObject *
sort_indices_nd(PyArrayObject *arr, int d, bool descending)
{
    int nd = PyArray_NDIM(arr);
    if (nd <= 32)
        return sort_indices(arr, d, descending);
    npy_intp *dims = PyArray_DIMS(arr), three[3] = {1, dims[d], 1};
    for (int i = 0; i < nd; i++)
        if (i != d)
            three[i < d ? 0 : 2] *= dims[i];
    PyArray_Dims shape3 = {three, 3}, shape = {dims, nd};
    PyArrayObject *c = PyArray_GETCONTIGUOUS(arr);
    PyArrayObject *flat = c ? (PyArrayObject *)PyArray_Newshape(c, &shape3, NPY_CORDER) : NULL;
    Py_XDECREF(c);
    PyArrayObject *idx = flat ? sort_indices(flat, 1, descending) : NULL;
    Py_XDECREF(flat);
    PyArrayObject *r = idx ? (PyArrayObject *)PyArray_Newshape(idx, &shape, NPY_CORDER) : NULL;
    Py_XDECREF(idx);
    return r;
}

/* values and indices of a sort of self along d, written into values / indices
 * (self's shape), or their first k along d when k >= 0 */
static int
sort_into(em_Tensor *self, int d, bool descending, em_Tensor *values, em_Tensor *indices)
{
    if (values->numel == 0)
        return 0;
    if (self->ndim == 0) {
        PyObject *zero = PyLong_FromLong(0);
        int st = zero ? PyArray_FillWithScalar(indices->array, zero) : -1;
        Py_XDECREF(zero);
        return st < 0 ? -1 : em_copy_into(values, (PyObject *)self);
    }
    PyArrayObject *idx = sort_indices_nd(self->array, d, descending);
    if (idx == NULL)
        return -1;
    PyArrayObject *take = idx;
    if (indices->sizes[d] != self->sizes[d]) {   /* topk: the first k */
        PyObject *stop = PyLong_FromSsize_t(indices->sizes[d]);
        PyObject *sl = stop ? PySlice_New(NULL, stop, NULL) : NULL;
        Py_XDECREF(stop);
        PyObject *key = sl ? PyTuple_New(self->ndim) : NULL;
        for (int i = 0; key != NULL && i < self->ndim; i++) {
            PyObject *k = i == d ? sl : PySlice_New(NULL, NULL, NULL);
            if (i == d)
                Py_INCREF(sl);
            PyTuple_SET_ITEM(key, i, k);
        }
        take = key ? (PyArrayObject *)PyObject_GetItem((PyObject *)idx, key) : NULL;
        Py_XDECREF(key);
        Py_XDECREF(sl);
        if (take == NULL) {
            Py_DECREF(idx);
            return -1;
        }
    }
    em_gather_loop(self->array, take, d, values->array);
    int st = PyArray_CopyInto(indices->array, take);
    if (take != idx)
        Py_DECREF(take);
    Py_DECREF(idx);
    return st;
}

/* sort(self, dim=-1, descending=False, *, stable=None) -> (values, indices) */
static PyObject *
k_sort(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    if (em_refuse_complex(op, args[0]) < 0)
        return NULL;
    Py_ssize_t d;
    if (em_dim_arg(args[1], self->ndim, &d) < 0)
        return NULL;
    bool meta = em_meta_of(self);
    em_Tensor *values = em_empty_like(self, self->dtype, meta);
    em_Tensor *indices = values ? em_empty_like(self, EM_INT64, meta) : NULL;
    PyObject *res = NULL;
    if (indices != NULL &&
        (meta || sort_into(self, (int)d, args[2] == Py_True, values, indices) == 0))
        res = return_pair(op->name, (PyObject *)values, (PyObject *)indices);
    Py_XDECREF(values);
    Py_XDECREF(indices);
    return res;
}

/* argsort(self, dim=-1, descending=False, *, stable=False): sort's indices */
static PyObject *
k_argsort(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    if (em_refuse_complex(op, args[0]) < 0)
        return NULL;
    Py_ssize_t d;
    if (em_dim_arg(args[1], self->ndim, &d) < 0)
        return NULL;
    bool meta = em_meta_of(self);
    em_Tensor *indices = em_empty_like(self, EM_INT64, meta);
    if (indices == NULL || meta || indices->numel == 0)
        return (PyObject *)indices;
    em_Tensor *values = em_empty_like(self, self->dtype, false);
    int st = values ? sort_into(self, (int)d, args[2] == Py_True, values, indices) : -1;
    Py_XDECREF(values);
    if (st < 0)
        Py_CLEAR(indices);
    return (PyObject *)indices;
}

/* topk(self, k, dim=-1, largest=True, sorted=True) -> (values, indices) */
static PyObject *
k_topk(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    if (em_refuse_complex(op, args[0]) < 0)
        return NULL;
    Py_ssize_t k, d;
    if (em_int_arg(args[1], &k) < 0 || em_dim_arg(args[2], self->ndim, &d) < 0)
        return NULL;
    Py_ssize_t size = self->ndim ? self->sizes[d] : 1;
    if (k < 0 || k > size) {
        PyErr_SetString(PyExc_RuntimeError, "topk(): selected index k out of range");
        return NULL;
    }
    if (self->dtype == EM_BOOL) {
        PyErr_SetString(PyExc_RuntimeError, "topk(): topk does not support bool dtypes on CPU");
        return NULL;
    }
    Py_ssize_t sizes[EM_MAX_DIMS];
    memcpy(sizes, self->sizes, sizeof(Py_ssize_t) * self->ndim);
    if (self->ndim)
        sizes[d] = k;
    bool meta = em_meta_of(self);
    em_Tensor *values = em_empty(self->ndim, sizes, self->dtype, meta);
    em_Tensor *indices = values ? em_empty(self->ndim, sizes, EM_INT64, meta) : NULL;
    PyObject *res = NULL;
    if (indices != NULL &&
        (meta || sort_into(self, (int)d, args[3] == Py_True, values, indices) == 0))
        res = return_pair(op->name, (PyObject *)values, (PyObject *)indices);
    Py_XDECREF(values);
    Py_XDECREF(indices);
    return res;
}

const em_KernelEntry em_reduction_kernels[] = {
    {"reduce", k_reduce},
    {"reduce_index", k_reduce_index},
    {"reduce_all", k_reduce_all},
    {"argreduce", k_argreduce},
    {"prod_all", k_prod_all},
    {"var", k_var},
    {"norm", k_norm},
    {"logsumexp", k_logsumexp},
    {"softmax", k_softmax},
    {"cumulative", k_cumulative},
    {"logical", k_logical},
    {"sort", k_sort},
    {"argsort", k_argsort},
    {"topk", k_topk},
    {NULL, NULL},
};

int
em_reduction_init(void)
{
    reduce_kwnames = Py_BuildValue("(ssss)", "axis", "dtype", "out", "keepdims");
    return_types = PyDict_New();
    return (reduce_kwnames && return_types) ? 0 : -1;
}
