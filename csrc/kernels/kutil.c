/* kutil.c: helpers shared by the kernels (kutil.h). */
#include "kutil.h"

em_Tensor *
em_empty_like(em_Tensor *t, em_dtype_t dt, bool meta)
{
    em_Geom g = {.ndim = t->ndim, .dtype = dt};
    memcpy(g.sizes, t->sizes, sizeof(Py_ssize_t) * t->ndim);
    PyObject *operand = (PyObject *)t;
    em_elementwise_strides(&operand, 1, &g);
    return em_tensor_empty_like_layout(&g, meta);
}

em_Tensor *
em_empty(int ndim, const Py_ssize_t *sizes, em_dtype_t dt, bool meta)
{
    em_Geom g = {.ndim = ndim, .dtype = dt};
    memcpy(g.sizes, sizes, sizeof(Py_ssize_t) * ndim);
    em_contiguous_strides(&g);
    return em_tensor_empty(&g, meta);
}

int
em_copy_into(em_Tensor *dst, PyObject *src)
{
    if (em_is_meta(dst) || dst->numel == 0)
        return 0;
    PyObject *arr;
    if (em_Tensor_Check(src)) {
        arr = em_tensor_to_array((em_Tensor *)src);
    }
    else if (PyArray_Check(src)) {
        Py_INCREF(src);
        arr = src;
    }
    else {
        PyArray_Descr *d = PyArray_DESCR(dst->array);
        Py_INCREF(d);
        arr = PyArray_FromAny(src, d, 0, 0, 0, NULL);
    }
    if (arr == NULL)
        return -1;
    if (!em_is_float(dst->dtype) &&
        em_dtype_from_npy(PyArray_TYPE((PyArrayObject *)arr)) == EM_BFLOAT16) {
        /* through float32: ml_dtypes' own casts to integers saturate where PyTorch's
         * (and NumPy's float16 casts) wrap */
        PyObject *f = PyArray_Cast((PyArrayObject *)arr, NPY_FLOAT32);
        Py_DECREF(arr);
        if ((arr = f) == NULL)
            return -1;
    }
    /* a converting copy never warns (NaN or 1e200 into an integer or float32), as
     * PyTorch's never does */
    bool converts = PyArray_TYPE((PyArrayObject *)arr) != PyArray_TYPE(dst->array);
    PyObject *token = converts ? em_errstate_ignore() : NULL;
    if (converts && token == NULL) {
        Py_DECREF(arr);
        return -1;
    }
    int r = converts ? 0 : em_transpose_copy(dst->array, (PyArrayObject *)arr);
    if (r == 0 && !converts)
        r = em_strided_copy(dst->array, (PyArrayObject *)arr);
    r = r < 0 ? -1 : r > 0 ? 0 : PyArray_CopyInto(dst->array, (PyArrayObject *)arr);
    Py_DECREF(arr);
    if (converts && em_errstate_restore(token) < 0)
        r = -1;
    return r;
}

PyObject *
em_clone_contiguous(PyObject *t)
{
    PyObject *a[2] = {t, em_str_contiguous_format};
    return em_call_op(EM_OP_CLONE, a, 1, em_kw_memory_format);
}

int
em_int_list(PyObject *tup, Py_ssize_t *out, int *n, int max)
{
    PyObject *seq = PySequence_Fast(tup, "expected a sequence of ints");
    if (seq == NULL)
        return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    if (len > max) {
        Py_DECREF(seq);
        if (max == EM_MAX_DIMS)
            PyErr_Format(PyExc_RuntimeError, "at most %d dimensions are supported, got %zd "
                         "sizes", max, len);
        else
            PyErr_Format(PyExc_RuntimeError, "at most %d values are supported", max);
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        out[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i));
        if (out[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    *n = (int)len;
    return 0;
}

int
em_check_ndim(const char *name, Py_ssize_t ndim)
{
    if (ndim <= EM_MAX_DIMS)
        return 0;
    PyErr_Format(PyExc_RuntimeError, "%s%sat most %d dimensions are supported, but the "
                 "result would have %zd", name ? name : "", name ? "(): " : "", EM_MAX_DIMS,
                 ndim);
    return -1;
}

void
em_gather_loop(PyArrayObject *src, PyArrayObject *idx, int d, PyArrayObject *out)
{
    int ndim = PyArray_NDIM(idx);
    const npy_intp *shape = PyArray_DIMS(idx), *sst = PyArray_STRIDES(src),
                   *ist = PyArray_STRIDES(idx), *ost = PyArray_STRIDES(out);
    npy_intp total = PyArray_SIZE(idx), counter[EM_MAX_DIMS] = {0};
    int itemsize = (int)PyArray_ITEMSIZE(src);
    char *sp = PyArray_BYTES(src), *ip = PyArray_BYTES(idx), *op = PyArray_BYTES(out);
    for (npy_intp k = 0; k < total; k++) {
        char *s = sp + (*(npy_int64 *)ip) * sst[d];
        switch (itemsize) {
        case 1: *op = *s; break;
        case 2: memcpy(op, s, 2); break;
        case 4: memcpy(op, s, 4); break;
        case 8: memcpy(op, s, 8); break;
        default: memcpy(op, s, itemsize);
        }
        for (int a = ndim - 1; a >= 0; a--) {
            if (++counter[a] < shape[a]) {
                if (a != d)
                    sp += sst[a];
                ip += ist[a];
                op += ost[a];
                break;
            }
            if (a != d)
                sp -= sst[a] * (shape[a] - 1);
            ip -= ist[a] * (shape[a] - 1);
            op -= ost[a] * (shape[a] - 1);
            counter[a] = 0;
        }
    }
}

PyArrayObject *
em_flip_view(PyArrayObject *arr, int d)
{
    int ndim = PyArray_NDIM(arr);
    npy_intp strides[EM_MAX_DIMS];
    memcpy(strides, PyArray_STRIDES(arr), sizeof(npy_intp) * ndim);
    npy_intp n = PyArray_DIMS(arr)[d];
    char *data = PyArray_BYTES(arr) + (n > 0 ? (n - 1) * strides[d] : 0);
    strides[d] = -strides[d];
    return em_array_view(arr, ndim, PyArray_DIMS(arr), strides, data);
}

PyArrayObject *
em_array_view(PyArrayObject *base, int nd, const npy_intp *dims, const npy_intp *strides,
              char *data)
{
    PyArray_Descr *descr = PyArray_DESCR(base);
    Py_INCREF(descr);
    PyArrayObject *v = (PyArrayObject *)PyArray_NewFromDescr(
        &PyArray_Type, descr, nd, (npy_intp *)dims, (npy_intp *)strides, data,
        PyArray_FLAGS(base) & NPY_ARRAY_WRITEABLE, NULL);
    if (v == NULL)
        return NULL;
    Py_INCREF(base);
    if (PyArray_SetBaseObject(v, (PyObject *)base) < 0) {
        Py_DECREF(v);
        return NULL;
    }
    return v;
}

int
em_refuse_complex(em_Op *op, PyObject *t)
{
    if (t == NULL || !em_Tensor_Check(t) || !em_is_complex(((em_Tensor *)t)->dtype) ||
        (op->rule & EM_RULE_COMPLEX))
        return 0;
    PyErr_Format(PyExc_NotImplementedError, "%U(): \"%U\" not implemented for '%s'",
                 op->name, op->name, em_dtype_torch_name(((em_Tensor *)t)->dtype));
    return -1;
}

int
em_run_chunked(em_range_fn fn, void *ctx, int64_t items, int64_t unit)
{
    if (items <= 0)
        return 0;
    if (unit < 1)
        unit = 1;
    int64_t chunk = EM_POOL_CHUNK / unit > 0 ? EM_POOL_CHUNK / unit : 1;
    double elems = (double)items * (double)unit;
    if (elems >= EM_NOGIL_FROM)
        return em_parallel_for(fn, ctx, items, chunk,
                               elems >= EM_POOL_FROM && em_pool_threads() > 1);
    fn(ctx, 0, items);
    return 0;
}

/* the contiguous NumPy data of t, float32 for a half type (a new reference in *hold) */
const char *
em_float_data(em_Tensor *t, PyArrayObject **hold)
{
    if (em_is_half(t->dtype))
        *hold = (PyArrayObject *)PyArray_FromAny(
            (PyObject *)t->array, PyArray_DescrFromType(NPY_FLOAT32), 0, 0,
            NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_FORCECAST, NULL);
    else
        *hold = (PyArrayObject *)PyArray_GETCONTIGUOUS(t->array);
    return *hold == NULL ? NULL : PyArray_BYTES(*hold);
}

/* where a kernel writes the (contiguous) result t: its data, or for a half type a float32
 * scratch (*scratch, a new reference) that em_float_finish rounds into t */
char *
em_float_dest(em_Tensor *t, PyArrayObject **scratch)
{
    *scratch = NULL;
    if (!em_is_half(t->dtype))
        return PyArray_BYTES(t->array);
    *scratch = (PyArrayObject *)PyArray_EMPTY(PyArray_NDIM(t->array), PyArray_DIMS(t->array),
                                              NPY_FLOAT32, 0);
    return *scratch == NULL ? NULL : PyArray_BYTES(*scratch);
}

int
em_float_finish(em_Tensor *t, PyArrayObject **scratch)
{
    if (*scratch == NULL)
        return 0;
    int rc = em_copy_into(t, (PyObject *)*scratch);
    Py_CLEAR(*scratch);
    return rc;
}
