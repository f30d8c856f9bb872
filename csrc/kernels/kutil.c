/* kutil.c: helpers of the reduction, view, shape and indexing kernels (kutil.h). */
#include "kutil.h"

static PyObject *api_module;   /* ember.ops.api */
static PyObject *op_cache;     /* name -> Op */
static PyObject *np_cache;     /* name -> numpy attribute */
static PyObject *extobj_var, *extobj_ignore;
static PyObject *kw_out_casting;

em_Op *
em_op_named(const char *name)
{
    if (op_cache == NULL && (op_cache = PyDict_New()) == NULL)
        return NULL;
    PyObject *o = PyDict_GetItemString(op_cache, name);
    if (o != NULL)
        return (em_Op *)o;
    if (api_module == NULL && (api_module = PyImport_ImportModule("ember.ops.api")) == NULL)
        return NULL;
    o = PyObject_GetAttrString(api_module, name);
    if (o == NULL)
        return NULL;
    if (!em_Op_Check(o)) {
        Py_DECREF(o);
        PyErr_Format(PyExc_RuntimeError, "ember.ops.api.%s is not an op", name);
        return NULL;
    }
    int st = PyDict_SetItemString(op_cache, name, o);
    Py_DECREF(o);   /* the cache keeps it alive */
    return st < 0 ? NULL : (em_Op *)o;
}

PyObject *
em_call(const char *name, PyObject *const *args, Py_ssize_t nargs)
{
    em_Op *op = em_op_named(name);
    return op == NULL ? NULL : em_op_call(op, args, nargs);
}

PyObject *
em_call_kw(const char *name, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    em_Op *op = em_op_named(name);
    return op == NULL ? NULL : PyObject_Vectorcall((PyObject *)op, args, nargs, kwnames);
}

PyObject *
em_np(const char *name)
{
    if (np_cache == NULL && (np_cache = PyDict_New()) == NULL)
        return NULL;
    PyObject *o = PyDict_GetItemString(np_cache, name);
    if (o != NULL)
        return o;
    o = PyObject_GetAttrString(em_numpy, name);
    if (o == NULL)
        return NULL;
    int st = PyDict_SetItemString(np_cache, name, o);
    Py_DECREF(o);
    return st < 0 ? NULL : o;
}

PyObject *
em_errstate_ignore(void)
{
    if (extobj_ignore == NULL) {
        PyObject *umath = PyImport_ImportModule("numpy._core.umath");
        if (umath == NULL)
            return NULL;
        extobj_var = PyObject_GetAttrString(umath, "_extobj_contextvar");
        PyObject *make = PyObject_GetAttrString(umath, "_make_extobj");
        Py_DECREF(umath);
        if (extobj_var == NULL || make == NULL) {
            Py_XDECREF(make);
            return NULL;
        }
        PyObject *kw = Py_BuildValue("{ss}", "all", "ignore");
        PyObject *noargs = PyTuple_New(0);
        if (kw != NULL && noargs != NULL)
            extobj_ignore = PyObject_Call(make, noargs, kw);
        Py_XDECREF(kw);
        Py_XDECREF(noargs);
        Py_DECREF(make);
        if (extobj_ignore == NULL)
            return NULL;
    }
    return PyContextVar_Set(extobj_var, extobj_ignore);
}

int
em_errstate_restore(PyObject *token)
{
    int st = PyContextVar_Reset(extobj_var, token);
    Py_DECREF(token);
    return st;
}

PyObject *
em_ufunc_method(PyObject *ufunc, const char *method, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames)
{
    PyObject *name = PyUnicode_InternFromString(method);
    if (name == NULL)
        return NULL;
    PyObject *token = em_errstate_ignore();
    if (token == NULL) {
        Py_DECREF(name);
        return NULL;
    }
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *stack[16];
    if (nargs + nk + 1 > 16) {
        Py_DECREF(name);
        em_errstate_restore(token);
        PyErr_SetString(PyExc_SystemError, "em_ufunc_method: too many arguments");
        return NULL;
    }
    stack[0] = ufunc;
    for (Py_ssize_t i = 0; i < nargs + nk; i++)
        stack[i + 1] = args[i];
    PyObject *r = PyObject_VectorcallMethod(name, stack, (nargs + 1), kwnames);
    Py_DECREF(name);
    if (em_errstate_restore(token) < 0)
        Py_CLEAR(r);
    return r;
}

int
em_ufunc_out(PyObject *ufunc, PyObject **ins, int nin, PyArrayObject *out)
{
    if (kw_out_casting == NULL &&
        (kw_out_casting = Py_BuildValue("(ss)", "out", "casting")) == NULL)
        return -1;
    PyObject *args[8];
    for (int i = 0; i < nin; i++)
        args[i] = em_Tensor_Check(ins[i]) ? (PyObject *)((em_Tensor *)ins[i])->array : ins[i];
    args[nin] = (PyObject *)out;
    args[nin + 1] = em_str_unsafe;
    PyObject *token = em_errstate_ignore();
    if (token == NULL)
        return -1;
    PyObject *r = PyObject_Vectorcall(ufunc, args, nin, kw_out_casting);
    if (em_errstate_restore(token) < 0)
        Py_CLEAR(r);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

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
    /* a converting copy never warns (NaN or 1e200 into an integer or float32), as
     * PyTorch's never does */
    bool converts = PyArray_TYPE((PyArrayObject *)arr) != PyArray_TYPE(dst->array);
    PyObject *token = converts ? em_errstate_ignore() : NULL;
    if (converts && token == NULL) {
        Py_DECREF(arr);
        return -1;
    }
    int r = PyArray_CopyInto(dst->array, (PyArrayObject *)arr);
    Py_DECREF(arr);
    if (converts && em_errstate_restore(token) < 0)
        r = -1;
    return r;
}

PyObject *
em_shape_str(em_Tensor *t)
{
    return em_format_shape(t->ndim, t->sizes);
}

PyObject *
em_error(PyObject *exc, const char *fmt, ...)
{
    va_list va;
    va_start(va, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, va);
    va_end(va);
    if (msg != NULL) {
        PyErr_SetObject(exc, msg);
        Py_DECREF(msg);
    }
    return NULL;
}

int
em_int_arg(PyObject *o, Py_ssize_t *out)
{
    *out = PyLong_AsSsize_t(o);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

int
em_dim_arg(PyObject *o, int ndim, Py_ssize_t *out)
{
    if (em_int_arg(o, out) < 0)
        return -1;
    return em_wrap_dim(out, ndim);
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
    PyArray_Descr *descr = PyArray_DESCR(arr);
    Py_INCREF(descr);
    PyArrayObject *v = (PyArrayObject *)PyArray_NewFromDescr(
        &PyArray_Type, descr, ndim, PyArray_DIMS(arr), strides, data,
        PyArray_FLAGS(arr) & NPY_ARRAY_WRITEABLE, NULL);
    if (v == NULL)
        return NULL;
    Py_INCREF(arr);
    if (PyArray_SetBaseObject(v, (PyObject *)arr) < 0) {
        Py_DECREF(v);
        return NULL;
    }
    return v;
}
