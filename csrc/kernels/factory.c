/* factory.c: tensors made from sizes or from another tensor's metadata:
 * zeros, ones, full, empty, arange, rand, randn and their *_like forms.
 *
 * Keyword parameters are found by name: dtype, device, requires_grad, generator.
 */
#include "kutil.h"
#include <math.h>

PyObject *
em_arg(em_Op *op, PyObject **args, const char *name)
{
    for (int i = 0; i < op->nparams; i++)
        if (PyUnicode_CompareWithASCIIString(op->params[i].name, name) == 0)
            return args[i];
    return NULL;
}

int
em_device_is_meta(PyObject *device)
{
    if (device == NULL || device == Py_None)
        return em_tls.mode == EM_MODE_META;
    PyObject *s = PyUnicode_Check(device) ? (Py_INCREF(device), device)
                                          : PyObject_GetAttrString(device, "type");
    if (s == NULL)
        return -1;
    int r = -1;
    if (!PyUnicode_Check(s))
        PyErr_Format(PyExc_TypeError, "expected a device, got %R", device);
    else if (PyUnicode_CompareWithASCIIString(s, "meta") == 0)
        r = 1;
    else if (PyUnicode_CompareWithASCIIString(s, "cpu") == 0 ||
             strncmp(PyUnicode_AsUTF8(s), "cpu:", 4) == 0)
        r = em_tls.mode == EM_MODE_META;
    else
        PyErr_Format(PyExc_RuntimeError,
                     "ember runs on the CPU only: device %R is not available", device);
    Py_DECREF(s);
    return r;
}

static em_dtype_t
dtype_arg(em_Op *op, PyObject **args, em_dtype_t dflt)
{
    PyObject *d = em_arg(op, args, "dtype");
    if (d == NULL || d == Py_None)
        return dflt;
    return ((em_DType *)d)->code;
}

int
em_sizes_geom(PyObject *sizes, em_Geom *g)
{
    Py_ssize_t n = PyTuple_GET_SIZE(sizes);
    if (n > EM_MAX_DIMS) {
        PyErr_Format(PyExc_RuntimeError, "at most %d dimensions are supported", EM_MAX_DIMS);
        return -1;
    }
    g->ndim = (int)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        g->sizes[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, i));
        if (g->sizes[i] == -1 && PyErr_Occurred())
            return -1;
        if (g->sizes[i] < 0) {
            PyErr_Format(PyExc_RuntimeError, "Trying to create tensor with negative dimension "
                         "%zd: %s", g->sizes[i], em_shape_s(g->ndim, g->sizes));
            return -1;
        }
    }
    em_contiguous_strides(g);
    return 0;
}

PyObject *
em_factory_finish(em_Op *op, PyObject **args, em_Tensor *t)
{
    if (t == NULL)
        return NULL;
    PyObject *rg = em_arg(op, args, "requires_grad");
    if (rg == Py_True) {
        if (!em_is_float(t->dtype)) {
            Py_DECREF(t);
            PyErr_SetString(PyExc_RuntimeError,
                            "Only Tensors of floating point dtype can require gradients");
            return NULL;
        }
        t->requires_grad = 1;
    }
    return (PyObject *)t;
}

static int
fill(em_Tensor *t, PyObject *value)
{
    if (em_is_meta(t) || t->numel == 0)
        return 0;
    return PyArray_FillWithScalar(t->array, value);
}

/* Geometry from either a size tuple (args[0]) or a tensor (the *_like forms). */
static int
target_geom(em_Op *op, PyObject **args, em_Geom *g, bool *meta)
{
    PyObject *first = args[0];
    int m = em_device_is_meta(em_arg(op, args, "device"));
    if (m < 0)
        return -1;
    if (em_Tensor_Check(first)) {
        em_Tensor *like = (em_Tensor *)first;
        g->ndim = like->ndim;
        memcpy(g->sizes, like->sizes, sizeof(Py_ssize_t) * like->ndim);
        em_elementwise_strides(&first, 1, g);   /* preserve_format, as PyTorch's *_like */
        g->dtype = dtype_arg(op, args, like->dtype);
        *meta = m || em_is_meta(like);
        return 0;
    }
    if (em_sizes_geom(first, g) < 0)
        return -1;
    g->dtype = dtype_arg(op, args, em_default_dtype);
    *meta = m;
    return 0;
}

static PyObject *
make_filled(em_Op *op, PyObject **args, PyObject *value, bool infer_from_value)
{
    em_Geom g;
    bool meta;
    if (target_geom(op, args, &g, &meta) < 0)
        return NULL;
    if (infer_from_value && !em_Tensor_Check(args[0])) {
        PyObject *d = em_arg(op, args, "dtype");
        if (d == NULL || d == Py_None)
            g.dtype = PyBool_Check(value) ? EM_BOOL
                      : PyLong_Check(value) ? EM_INT64
                      : PyComplex_Check(value) ? (em_default_dtype == EM_FLOAT64 ? EM_COMPLEX128
                                                                             : EM_COMPLEX64)
                      : em_default_dtype;
    }
    em_Tensor *t = em_tensor_empty_like_layout(&g, meta);
    if (t != NULL && value != NULL && fill(t, value) < 0)
        Py_CLEAR(t);
    return em_factory_finish(op, args, t);
}

static PyObject *
filled_with(em_Op *op, PyObject **args, long value)
{
    PyObject *v = PyLong_FromLong(value);
    PyObject *r = v ? make_filled(op, args, v, false) : NULL;
    Py_XDECREF(v);
    return r;
}

static PyObject *
k_zeros(em_Op *op, PyObject **args)
{
    return filled_with(op, args, 0);
}

static PyObject *
k_ones(em_Op *op, PyObject **args)
{
    return filled_with(op, args, 1);
}

static PyObject *
k_empty(em_Op *op, PyObject **args)
{
    return make_filled(op, args, NULL, false);
}

/* full(size, fill_value) / full_like(self, fill_value) */
static PyObject *
k_full(em_Op *op, PyObject **args)
{
    return make_filled(op, args, args[1], true);
}

/* arange(end) or arange(start, end, step=1) */
static PyObject *
k_arange(em_Op *op, PyObject **args)
{
    PyObject *start, *end, *step;
    PyObject *zero = PyLong_FromLong(0), *one = PyLong_FromLong(1);
    PyObject *res = NULL;
    if (zero == NULL || one == NULL)
        goto done;
    if (op->nparams >= 3 && PyUnicode_CompareWithASCIIString(op->params[1].name, "end") == 0) {
        start = args[0];
        end = args[1];
        step = args[2];
    }
    else {
        start = zero;
        end = args[0];
        step = one;
    }
    bool is_float = PyFloat_Check(start) || PyFloat_Check(end) || PyFloat_Check(step);
    em_dtype_t dt = dtype_arg(op, args, is_float ? em_default_dtype : EM_INT64);
    double s = PyFloat_AsDouble(start), e = PyFloat_AsDouble(end), st = PyFloat_AsDouble(step);
    if (PyErr_Occurred())
        goto done;
    if (st == 0) {
        PyErr_SetString(PyExc_RuntimeError, "arange(): step must be nonzero");
        goto done;
    }
    if ((st > 0 && e < s) || (st < 0 && e > s)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "arange(): upper bound and larger bound inconsistent with step sign");
        goto done;
    }
    int m = em_device_is_meta(em_arg(op, args, "device"));
    if (m < 0)
        goto done;
    Py_ssize_t n;
    if (!is_float) {
        long long ls = PyLong_AsLongLong(start), le = PyLong_AsLongLong(end),
                  lst = PyLong_AsLongLong(step);
        if (PyErr_Occurred())
            goto done;
        n = (Py_ssize_t)((le - ls + lst + (lst > 0 ? -1 : 1)) / lst);
    }
    else {
        n = (Py_ssize_t)ceil((e - s) / st);
    }
    if (n < 0)
        n = 0;
    em_Geom g = {.ndim = 1, .dtype = dt, .sizes = {n}};
    em_contiguous_strides(&g);
    em_Tensor *t = em_tensor_empty(&g, m);
    if (t != NULL && !m && n > 0) {
        /* values start + i * step, computed in double (int64 for integers) */
        PyObject *r = PyObject_CallFunction(em_np.arange, "(n)", n);
        PyObject *v = NULL;
        if (r != NULL) {
            PyObject *mul = PyNumber_Multiply(r, step);
            if (mul != NULL) {
                v = PyNumber_Add(mul, start);
                Py_DECREF(mul);
            }
            Py_DECREF(r);
        }
        if (v == NULL || PyArray_CopyInto(t->array, (PyArrayObject *)v) < 0)
            Py_CLEAR(t);
        Py_XDECREF(v);
    }
    res = em_factory_finish(op, args, t);
done:
    Py_XDECREF(zero);
    Py_XDECREF(one);
    return res;
}

/* d rounded to the precision of the floating dtype dt. */
static int
round_to_float(double d, em_dtype_t dt, double *out)
{
    if (dt == EM_FLOAT64) {
        *out = d;
        return 0;
    }
    if (dt == EM_FLOAT32) {
        *out = (double)(float)d;
        return 0;
    }
    PyObject *f = PyFloat_FromDouble(d);     /* float16: through NumPy's half */
    PyObject *h = f ? PyObject_CallOneArg((PyObject *)em_dtypes[dt]->descr->typeobj, f) : NULL;
    Py_XDECREF(f);
    *out = h ? PyFloat_AsDouble(h) : -1.0;
    Py_XDECREF(h);
    return h != NULL && !PyErr_Occurred() ? 0 : -1;
}

/* A linspace bound as PyTorch converts it to the result's dtype before computing:
 * floats round to the dtype's precision; integers truncate and must fit (a Python int
 * may also be negative for uint8, and wraps: -3 is 253). */
static int
bound_in_dtype(PyObject *v, em_dtype_t dt, double *out)
{
    double d = PyFloat_AsDouble(v);
    if (d == -1.0 && PyErr_Occurred())
        return -1;
    if (em_is_float(dt))
        return round_to_float(d, dt, out);
    if (dt == EM_BOOL) {
        *out = d != 0.0;
        return 0;
    }
    int bits = 8 * em_dtypes[dt]->itemsize;
    double hi = ldexp(1.0, bits - (dt == EM_UINT8 ? 0 : 1)) - 1.0;
    double lo = dt == EM_UINT8 ? (PyLong_Check(v) ? -ldexp(1.0, 63) : 0.0)
                               : -ldexp(1.0, bits - 1);
    if (!(d >= lo && d <= hi)) {
        PyErr_Format(PyExc_RuntimeError,
                     "linspace(): value cannot be converted to type %s without overflow",
                     em_dtypes[dt]->name);
        return -1;
    }
    double t = trunc(d);
    if (dt == EM_UINT8 && t < 0)
        t = (double)(uint8_t)(int64_t)t;
    *out = t;
    return 0;
}

/* linspace(start, end, steps): steps values from start to end (both converted to dtype
 * first), computed in double with the step rounded to the dtype, from start for the first
 * half and from end for the second (so both ends are exact) as PyTorch's kernel does,
 * then converted to dtype (integers truncate). */
static PyObject *
k_linspace(em_Op *op, PyObject **args)
{
    Py_ssize_t steps = PyLong_AsSsize_t(args[2]);
    if (steps == -1 && PyErr_Occurred())
        return NULL;
    if (steps < 0) {
        PyErr_SetString(PyExc_RuntimeError, "linspace(): number of steps must be non-negative");
        return NULL;
    }
    em_dtype_t dt = dtype_arg(op, args, em_default_dtype);
    if (dt == EM_BOOL && steps > 1) {
        PyErr_SetString(PyExc_NotImplementedError,
                        "linspace(): \"linspace_cpu\" not implemented for 'Bool'");
        return NULL;
    }
    double start, end;
    if (bound_in_dtype(args[0], dt, &start) < 0 || bound_in_dtype(args[1], dt, &end) < 0)
        return NULL;
    int m = em_device_is_meta(em_arg(op, args, "device"));
    if (m < 0)
        return NULL;
    em_Geom g = {.ndim = 1, .dtype = dt, .sizes = {steps}};
    em_contiguous_strides(&g);
    em_Tensor *t = em_tensor_empty(&g, m);
    if (t == NULL || m || steps == 0)
        return em_factory_finish(op, args, t);
    PyArrayObject *vals = dt == EM_FLOAT64 ? t->array
                          : (PyArrayObject *)PyArray_SimpleNew(1, &steps, NPY_DOUBLE);
    if (vals == NULL) {
        Py_DECREF(t);
        return NULL;
    }
    double *v = PyArray_DATA(vals);
    /* the step, in the dtype's precision for floats (PyTorch computes in the dtype) */
    double step = steps > 1 ? (end - start) / (double)(steps - 1) : 0.0;
    if (em_is_float(dt) && round_to_float(step, dt, &step) < 0) {
        if (vals != t->array)
            Py_DECREF(vals);
        Py_DECREF(t);
        return NULL;
    }
    Py_ssize_t half = steps / 2;
    for (Py_ssize_t i = 0; i < steps; i++)
        v[i] = i < half ? start + step * (double)i : end - step * (double)(steps - i - 1);
    if (steps == 1)
        v[0] = start;
    if (vals != t->array) {
        if (PyArray_CopyInto(t->array, vals) < 0)
            Py_CLEAR(t);
        Py_DECREF(vals);
    }
    return em_factory_finish(op, args, t);
}

/* eye(n, m=None): ones on the diagonal of an n x m matrix (m = n by default). */
static PyObject *
k_eye(em_Op *op, PyObject **args)
{
    Py_ssize_t n = PyLong_AsSsize_t(args[0]);
    Py_ssize_t m = args[1] == Py_None ? n : PyLong_AsSsize_t(args[1]);
    if (PyErr_Occurred())
        return NULL;
    if (n < 0 || m < 0) {
        PyErr_Format(PyExc_RuntimeError, "eye(): %s must be greater or equal to 0, got %zd",
                     n < 0 ? "n" : "m", n < 0 ? n : m);
        return NULL;
    }
    em_dtype_t dt = dtype_arg(op, args, em_default_dtype);
    int meta = em_device_is_meta(em_arg(op, args, "device"));
    if (meta < 0)
        return NULL;
    em_Geom g = {.ndim = 2, .dtype = dt, .sizes = {n, m}};
    em_contiguous_strides(&g);
    em_Tensor *t = em_tensor_empty(&g, meta);
    if (t == NULL || meta || t->numel == 0)
        return em_factory_finish(op, args, t);
    PyObject *zero = PyLong_FromLong(0), *one = PyLong_FromLong(1);
    int st = (zero && one) ? PyArray_FillWithScalar(t->array, zero) : -1;
    /* the diagonal: a strided view of (min(n, m),) with stride m + 1 */
    npy_intp k = n < m ? n : m, stride = (npy_intp)((m + 1) * em_dtypes[dt]->itemsize);
    if (st == 0 && k > 0) {
        PyArrayObject *diag = em_array_view(t->array, 1, &k, &stride, PyArray_DATA(t->array));
        st = diag ? PyArray_FillWithScalar(diag, one) : -1;
        Py_XDECREF(diag);
    }
    Py_XDECREF(zero);
    Py_XDECREF(one);
    if (st < 0)
        Py_CLEAR(t);
    return em_factory_finish(op, args, t);
}

static PyObject *
random_fill(em_Op *op, PyObject **args, const char *method)
{
    em_Geom g;
    bool meta;
    if (target_geom(op, args, &g, &meta) < 0)
        return NULL;
    if (!em_is_float(g.dtype)) {
        /* as PyTorch's kernels say it */
        PyErr_Format(PyExc_NotImplementedError, "%U(): \"%s\" not implemented for '%s'",
                     op->name, strcmp(method, "random") == 0 ? "check_uniform_bounds"
                                                             : "normal_kernel_cpu",
                     em_dtype_torch_name(g.dtype));
        return NULL;
    }
    em_Tensor *t = em_tensor_empty_like_layout(&g, meta);
    if (t == NULL || meta || t->numel == 0)
        return em_factory_finish(op, args, t);
    PyObject *np_gen = em_numpy_generator(op, args);
    if (np_gen == NULL) {
        Py_DECREF(t);
        return NULL;
    }
    em_dtype_t gen_dt = g.dtype == EM_FLOAT64 ? EM_FLOAT64 : EM_FLOAT32;
    PyObject *size = em_sizes_tuple(t);
    PyObject *vals = size ? PyObject_CallMethod(np_gen, method, "(OO)", size,
                                                (PyObject *)em_dtypes[gen_dt]->descr)
                          : NULL;
    Py_XDECREF(size);
    Py_DECREF(np_gen);
    if (vals != NULL && em_is_half(g.dtype) && strcmp(method, "random") == 0) {
        /* keep [0, 1): float32 draws near 1 would round up to 1 in float16 or
         * bfloat16, so take multiples of 2**-11 (2**-8), as PyTorch's uniform does */
        PyObject *scale = PyFloat_FromDouble(g.dtype == EM_FLOAT16 ? 2048.0 : 256.0);
        PyObject *scaled = scale ? PyNumber_Multiply(vals, scale) : NULL;
        PyObject *floored = scaled ? PyObject_CallOneArg(em_np.floor, scaled) : NULL;
        PyObject *r = floored ? PyNumber_TrueDivide(floored, scale) : NULL;
        Py_XDECREF(scale);
        Py_XDECREF(scaled);
        Py_XDECREF(floored);
        Py_SETREF(vals, r);
    }
    if (vals == NULL ||
        PyArray_CopyInto(t->array, (PyArrayObject *)vals) < 0)
        Py_CLEAR(t);
    Py_XDECREF(vals);
    return em_factory_finish(op, args, t);
}

static PyObject *
k_rand(em_Op *op, PyObject **args)
{
    return random_fill(op, args, "random");
}

static PyObject *
k_randn(em_Op *op, PyObject **args)
{
    return random_fill(op, args, "standard_normal");
}

const em_KernelEntry em_factory_kernels[] = {
    {"zeros", k_zeros},
    {"ones", k_ones},
    {"empty", k_empty},
    {"full", k_full},
    {"arange", k_arange},
    {"linspace", k_linspace},
    {"eye", k_eye},
    {"rand", k_rand},
    {"randn", k_randn},
    {NULL, NULL},
};
