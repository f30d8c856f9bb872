/* random.c: random ops that draw from an ember.Generator.
 *
 * uniform, normal, bernoulli and exponential are the functional twins of the
 * in-place uniform_, normal_, bernoulli_ and exponential_ (the dispatcher
 * writes their result into self, bumps the version and handles autograd, see
 * csrc/dispatch/inplace.c); randint and randperm are factories.
 *
 * Every draw goes through the NumPy Generator an ember.Generator holds (its
 * `_np`), as rand and randn in factory.c do, so ember.manual_seed and
 * Generator.manual_seed make all of them reproducible. uniform and normal take
 * the same draws as rand and randn (random / standard_normal in float32, or
 * float64 for float64 results) and scale them in that precision, so their
 * decompositions into rand/randn give the same numbers.
 */
#include "kutil.h"
#include <math.h>

static PyObject *default_generator;    /* ember.random.default_generator, set at import */

PyObject *
em_set_default_generator(PyObject *self, PyObject *gen)
{
    Py_INCREF(gen);
    Py_XSETREF(default_generator, gen);
    Py_RETURN_NONE;
}

PyObject *
em_numpy_generator(em_Op *op, PyObject **args)
{
    PyObject *gen = em_arg(op, args, "generator");
    if (gen == NULL || gen == Py_None)
        gen = default_generator;
    if (gen == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ember's default generator is not initialised");
        return NULL;
    }
    PyObject *np_gen = PyObject_GetAttrString(gen, "_np");
    if (np_gen == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%U(): generator must be an ember.Generator, not %s",
                     op->name, Py_TYPE(gen)->tp_name);
    }
    return np_gen;
}

/* Calls np_gen.method(*args, **kwargs) and checks that it gave an ndarray. */
static PyArrayObject *
draw(PyObject *np_gen, const char *method, PyObject *args, PyObject *kwargs)
{
    PyObject *fn = PyObject_GetAttrString(np_gen, method);
    if (fn == NULL)
        return NULL;
    PyObject *r = PyObject_Call(fn, args, kwargs);
    Py_DECREF(fn);
    if (r != NULL && !PyArray_Check(r)) {
        PyErr_Format(PyExc_TypeError, "numpy Generator.%s returned %s, not an ndarray",
                     method, Py_TYPE(r)->tp_name);
        Py_CLEAR(r);
    }
    return (PyArrayObject *)r;
}

/* np_gen.method(size, dtype) for a tensor out's shape. */
static PyArrayObject *
draw_like(em_Op *op, PyObject **args, em_Tensor *out, const char *method, em_dtype_t dtype)
{
    PyArrayObject *res = NULL;
    PyObject *np_gen = em_numpy_generator(op, args);
    PyObject *size = np_gen ? em_sizes_tuple(out) : NULL;
    PyObject *call = size ? PyTuple_Pack(2, size, (PyObject *)em_dtypes[dtype]->descr)
                          : NULL;
    if (call != NULL)
        res = draw(np_gen, method, call, NULL);
    Py_XDECREF(call);
    Py_XDECREF(size);
    Py_XDECREF(np_gen);
    return res;
}

/* The float type the draws for a result of dtype t are made in. */
static em_dtype_t
draw_dtype(em_dtype_t t)
{
    return t == EM_FLOAT64 ? EM_FLOAT64 : EM_FLOAT32;
}

static int
check_float(const char *opname, em_dtype_t t)
{
    if (em_is_float(t))
        return 0;
    PyErr_Format(PyExc_RuntimeError, "%s(): expected a floating point tensor, got %s",
                 opname, em_dtype_torch_name(t));
    return -1;
}

/* An uninitialised contiguous tensor of self's shape (meta if self is, or in
 * meta mode). */
static em_Tensor *
empty_like(em_Tensor *self, em_dtype_t dtype)
{
    em_Geom g = {.ndim = self->ndim, .dtype = dtype};
    memcpy(g.sizes, self->sizes, sizeof(Py_ssize_t) * self->ndim);
    em_contiguous_strides(&g);
    return em_tensor_empty(&g, em_tls.mode == EM_MODE_META || em_is_meta(self));
}

/* a = a * scale + shift, in a's precision (float32 or float64, contiguous). */
static void
affine(PyArrayObject *a, double scale, double shift)
{
    npy_intp n = PyArray_SIZE(a);
    if (PyArray_TYPE(a) == NPY_FLOAT) {
        float *p = PyArray_DATA(a), s = (float)scale, b = (float)shift;
        for (npy_intp i = 0; i < n; i++) {
            float v = p[i] * s;
            p[i] = v + b;
        }
    }
    else {
        double *p = PyArray_DATA(a);
        for (npy_intp i = 0; i < n; i++) {
            double v = p[i] * scale;
            p[i] = v + shift;
        }
    }
}

/* Draws with method, scales them and writes them into a new tensor like self. */
static PyObject *
scaled_draw(em_Op *op, PyObject **args, const char *method, double scale, double shift)
{
    em_Tensor *self = (em_Tensor *)args[0];
    em_Tensor *out = empty_like(self, self->dtype);
    if (out == NULL || em_is_meta(out) || out->numel == 0)
        return (PyObject *)out;
    PyArrayObject *vals = draw_like(op, args, out, method, draw_dtype(self->dtype));
    if (vals == NULL)
        goto error;
    affine(vals, scale, shift);
    int st = PyArray_CopyInto(out->array, vals);
    Py_DECREF(vals);
    if (st < 0)
        goto error;
    return (PyObject *)out;
error:
    Py_DECREF(out);
    return NULL;
}

/* uniform(self, from=0, to=1, *, generator): from + (to - from) * U[0, 1) */
static PyObject *
k_uniform(em_Op *op, PyObject **args)
{
    double from = PyFloat_AsDouble(args[1]), to = PyFloat_AsDouble(args[2]);
    if (PyErr_Occurred() || check_float("uniform_", ((em_Tensor *)args[0])->dtype) < 0)
        return NULL;
    if (!(from <= to)) {
        PyErr_Format(PyExc_RuntimeError,
                     "uniform_(): expects to return a [from, to) range, but found "
                     "from=%R > to=%R", args[1], args[2]);
        return NULL;
    }
    return scaled_draw(op, args, "random", to - from, from);
}

/* normal(self, mean=0, std=1, *, generator): mean + std * N(0, 1) */
static PyObject *
k_normal(em_Op *op, PyObject **args)
{
    double mean = PyFloat_AsDouble(args[1]), std = PyFloat_AsDouble(args[2]);
    if (PyErr_Occurred() || check_float("normal_", ((em_Tensor *)args[0])->dtype) < 0)
        return NULL;
    if (!(std >= 0.0)) {
        PyErr_Format(PyExc_RuntimeError, "normal_(): expects std >= 0.0, but found std=%R",
                     args[2]);
        return NULL;
    }
    return scaled_draw(op, args, "standard_normal", std, mean);
}

/* exponential(self, lambd=1, *, generator): -log(1 - U[0, 1)) / lambd, in float64 */
static PyObject *
k_exponential(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    double lambd = PyFloat_AsDouble(args[1]);
    if (PyErr_Occurred() || check_float("exponential_", self->dtype) < 0)
        return NULL;
    if (!(lambd > 0.0)) {
        PyErr_Format(PyExc_RuntimeError,
                     "exponential_(): expects lambda > 0.0, but found lambda=%R", args[1]);
        return NULL;
    }
    em_Tensor *out = empty_like(self, self->dtype);
    if (out == NULL || em_is_meta(out) || out->numel == 0)
        return (PyObject *)out;
    PyArrayObject *vals = draw_like(op, args, out, "random", EM_FLOAT64);
    if (vals == NULL)
        goto error;
    double *p = PyArray_DATA(vals);
    for (npy_intp i = 0, n = PyArray_SIZE(vals); i < n; i++)
        p[i] = -log1p(-p[i]) / lambd;
    int st = PyArray_CopyInto(out->array, vals);
    Py_DECREF(vals);
    if (st < 0)
        goto error;
    return (PyObject *)out;
error:
    Py_DECREF(out);
    return NULL;
}

/* 0 when every probability in p (a tensor or a number) lies in [0, 1]. */
static int
check_probabilities(PyObject *p)
{
    if (!em_Tensor_Check(p)) {
        double v = PyFloat_AsDouble(p);
        if (v == -1.0 && PyErr_Occurred())
            return -1;
        if (v >= 0.0 && v <= 1.0)
            return 0;
        PyErr_Format(PyExc_RuntimeError, "bernoulli_(): expects p to be in [0, 1], but got "
                     "p=%R", p);
        return -1;
    }
    em_Tensor *t = (em_Tensor *)p;
    if (!em_is_float(t->dtype)) {
        PyErr_Format(PyExc_RuntimeError,
                     "bernoulli(): expected p to be a floating point tensor, got %s",
                     em_dtype_torch_name(t->dtype));
        return -1;
    }
    if (em_is_meta(t) || t->numel == 0)
        return 0;
    /* all(0 <= p <= 1): NaN fails both comparisons, so min/max alone would miss it */
    PyObject *arr = em_tensor_to_array(t), *ge = NULL, *le = NULL, *both = NULL, *ok = NULL;
    if (arr != NULL)
        ge = PyObject_CallFunction(em_np.greater_equal, "(Od)", arr, 0.0);
    if (ge != NULL)
        le = PyObject_CallFunction(em_np.less_equal, "(Od)", arr, 1.0);
    if (le != NULL)
        both = PyObject_CallFunctionObjArgs(em_np.logical_and, ge, le, NULL);
    if (both != NULL)
        ok = PyObject_CallOneArg(em_np.all, both);
    Py_XDECREF(both);
    Py_XDECREF(le);
    Py_XDECREF(ge);
    Py_XDECREF(arr);
    if (ok == NULL)
        return -1;
    int truth = PyObject_IsTrue(ok);
    Py_DECREF(ok);
    if (truth < 0)
        return -1;
    if (!truth) {
        PyErr_SetString(PyExc_RuntimeError,
                        "bernoulli(): expected all probabilities p to be in [0, 1]");
        return -1;
    }
    return 0;
}

/* bernoulli(self)                 p = self
 * bernoulli.p(self, float p)      p a number
 * bernoulli.Tensor(self, Tensor p) p broadcast to self's shape
 * -> 1 where U[0, 1) (drawn in float64) < p, else 0, in self's dtype. */
static PyObject *
k_bernoulli(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    PyObject *p = em_arg(op, args, "p");
    if (p == NULL)
        p = args[0];
    if (check_probabilities(p) < 0)
        return NULL;
    if (em_Tensor_Check(p) && p != args[0]) {
        PyObject *pair[2] = {args[0], p};
        em_Geom g;
        if (em_broadcast("bernoulli_", pair, 2, &g) < 0)
            return NULL;
        if (g.ndim != self->ndim ||
            memcmp(g.sizes, self->sizes, sizeof(Py_ssize_t) * g.ndim) != 0) {
            return PyErr_Format(PyExc_RuntimeError, "bernoulli_(): p of shape %s cannot be "
                                "broadcast to self's shape %s", em_tshape((em_Tensor *)p),
                                em_tshape(self));
        }
    }
    em_Tensor *out = empty_like(self, self->dtype);
    if (out == NULL || em_is_meta(out) || out->numel == 0)
        return (PyObject *)out;
    PyObject *pval = em_Tensor_Check(p) ? em_tensor_to_array((em_Tensor *)p)
                                        : (Py_INCREF(p), p);
    PyArrayObject *u = pval ? draw_like(op, args, out, "random", EM_FLOAT64) : NULL;
    PyObject *cmp = u ? PyObject_RichCompare((PyObject *)u, pval, Py_LT) : NULL;
    /* a 0-d comparison gives a NumPy scalar */
    PyObject *mask = cmp ? PyArray_FROM_O(cmp) : NULL;
    int st = -1;
    if (mask != NULL)
        st = PyArray_CopyInto(out->array, (PyArrayObject *)mask);
    Py_XDECREF(cmp);
    Py_XDECREF(mask);
    Py_XDECREF(u);
    Py_XDECREF(pval);
    if (st < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return (PyObject *)out;
}

/* ------------------------------------------------------------------ factories */

/* An empty tensor of shape sizes for a factory: dtype (default int64), device and
 * requires_grad (floating point only) from the keyword arguments. */
static em_Tensor *
factory_empty(em_Op *op, PyObject **args, em_Geom *g)
{
    PyObject *d = em_arg(op, args, "dtype");
    g->dtype = (d == NULL || d == Py_None) ? EM_INT64 : ((em_DType *)d)->code;
    int meta = em_device_is_meta(em_arg(op, args, "device"));
    em_Tensor *t = meta < 0 ? NULL : em_tensor_empty(g, meta);
    return (em_Tensor *)em_factory_finish(op, args, t);
}

/* Copies vals (new reference, stolen) into t; t is returned, or NULL. */
static PyObject *
fill_from(em_Tensor *t, PyArrayObject *vals)
{
    if (vals == NULL || PyArray_CopyInto(t->array, vals) < 0)
        Py_CLEAR(t);
    Py_XDECREF(vals);
    return (PyObject *)t;
}

/* randint(high, size) / randint.low(low, high, size): integers in [low, high) */
static PyObject *
k_randint(em_Op *op, PyObject **args)
{
    PyObject *low = em_arg(op, args, "low"), *high = em_arg(op, args, "high");
    long long lo = low ? PyLong_AsLongLong(low) : 0, hi = PyLong_AsLongLong(high);
    if (PyErr_Occurred())
        return NULL;
    if (lo >= hi) {
        PyErr_Format(PyExc_RuntimeError,
                     "random_(): expects 'from' to be less than 'to', but got from=%lld >= "
                     "to=%lld", lo, hi);
        return NULL;
    }
    em_Geom g;
    if (em_sizes_geom(em_arg(op, args, "size"), &g) < 0)
        return NULL;
    em_Tensor *t = factory_empty(op, args, &g);
    if (t == NULL || em_is_meta(t) || t->numel == 0)
        return (PyObject *)t;
    PyObject *np_gen = em_numpy_generator(op, args);
    PyObject *call = np_gen ? Py_BuildValue("(LLN)", lo, hi, em_sizes_tuple(t)) : NULL;
    PyObject *kw = call ? Py_BuildValue("{sO}", "dtype",
                                        (PyObject *)em_dtypes[EM_INT64]->descr) : NULL;
    PyArrayObject *vals = kw ? draw(np_gen, "integers", call, kw) : NULL;
    Py_XDECREF(kw);
    Py_XDECREF(call);
    Py_XDECREF(np_gen);
    return fill_from(t, vals);
}

/* randperm(n): a random permutation of 0 .. n-1 */
static PyObject *
k_randperm(em_Op *op, PyObject **args)
{
    Py_ssize_t n = PyLong_AsSsize_t(args[0]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0) {
        PyErr_Format(PyExc_RuntimeError, "randperm(): n must be non-negative, got %zd", n);
        return NULL;
    }
    em_Geom g = {.ndim = 1, .sizes = {n}};
    em_contiguous_strides(&g);
    em_Tensor *t = factory_empty(op, args, &g);
    if (t == NULL || em_is_meta(t) || n == 0)
        return (PyObject *)t;
    PyObject *np_gen = em_numpy_generator(op, args);
    PyObject *call = np_gen ? Py_BuildValue("(n)", n) : NULL;
    PyArrayObject *vals = call ? draw(np_gen, "permutation", call, NULL) : NULL;
    Py_XDECREF(call);
    Py_XDECREF(np_gen);
    return fill_from(t, vals);
}

const em_KernelEntry em_random_kernels[] = {
    {"uniform", k_uniform},
    {"normal", k_normal},
    {"exponential", k_exponential},
    {"bernoulli", k_bernoulli},
    {"randint", k_randint},
    {"randperm", k_randperm},
    {NULL, NULL},
};
