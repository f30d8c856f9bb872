/* pool.c: the max-pooling prims.
 *
 *   max_pool2d_with_indices(self, kernel_size, stride=[], padding=0, dilation=1,
 *                           ceil_mode=False) -> (values, indices)
 *   max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
 *                                    dilation, ceil_mode, indices) -> grad_input
 *
 * Input (N, C, H, W) or (C, H, W). indices hold the flat position (h * W + w) of each
 * window's maximum in its input plane, as PyTorch's; NaN wins (the last NaN of a
 * window), ties go to the first maximum. The backward adds each gradient at its index.
 * Loops run on contiguous planes in float, double or int64 (float16 and the narrower
 * integers are widened; values are selected, never combined, so nothing rounds).
 * Channels-last inputs give channels-last results, as PyTorch's. The forward runs on the
 * thread pool in fixed chunks of whole planes, and so does the backward (the same result
 * at any thread count).
 *
 * Average and adaptive pooling are not prims: they decompose into matrix products
 * (python/ember/ops/nn_ops.py).
 */
#include "ember.h"
#include "kutil.h"
#include "runtime/runtime.h"
#include <math.h>
#include <string.h>

typedef struct {
    Py_ssize_t kh, kw, sh, sw, ph, pw, dh, dw;
    bool ceil_mode;
    Py_ssize_t P, H, W, OH, OW;    /* planes (N*C), input and output sizes */
} pool_params;

/* kernel_size / stride / padding / dilation: one or two values (stride: also none). */
static int
pair(PyObject *list, const char *what, bool may_be_empty, Py_ssize_t fallback_a,
     Py_ssize_t fallback_b, Py_ssize_t *a, Py_ssize_t *b)
{
    if (PyLong_Check(list)) {     /* a default given as a bare int */
        *a = *b = PyLong_AsSsize_t(list);
        return PyErr_Occurred() ? -1 : 0;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(list);
    if (n == 0 && may_be_empty) {
        *a = fallback_a;
        *b = fallback_b;
        return 0;
    }
    if (n != 1 && n != 2) {
        if (may_be_empty)
            PyErr_Format(PyExc_RuntimeError,
                         "max_pool2d: %s must either be omitted, a single int, or a tuple of "
                         "two ints", what);
        else
            PyErr_Format(PyExc_RuntimeError,
                         "max_pool2d: %s must either be a single int, or a tuple of two ints",
                         what);
        return -1;
    }
    *a = PyLong_AsSsize_t(PyTuple_GET_ITEM(list, 0));
    *b = PyLong_AsSsize_t(PyTuple_GET_ITEM(list, n - 1));
    return PyErr_Occurred() ? -1 : 0;
}

/* PyTorch's pooling_output_shape. */
static Py_ssize_t
out_size(Py_ssize_t in, Py_ssize_t k, Py_ssize_t pad, Py_ssize_t stride, Py_ssize_t dil,
         bool ceil_mode)
{
    Py_ssize_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
    Py_ssize_t o = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
    if (ceil_mode && (o - 1) * stride >= in + pad)
        o--;
    return o;
}

/* One dimension of PyTorch's pooling_output_shape, with its checks. */
static int
dim_out(Py_ssize_t in, Py_ssize_t k, Py_ssize_t pad, Py_ssize_t stride, Py_ssize_t dil,
        bool ceil_mode, Py_ssize_t *out)
{
    if (stride == 0) {
        PyErr_SetString(PyExc_RuntimeError, "stride should not be zero");
        return -1;
    }
    if (pad < 0) {
        PyErr_Format(PyExc_RuntimeError, "pad must be non-negative, but got pad: %zd", pad);
        return -1;
    }
    if (pad > ((k - 1) * dil + 1) / 2) {
        PyErr_Format(PyExc_RuntimeError,
                     "pad should be at most half of effective kernel size, but got pad=%zd, "
                     "kernel_size=%zd and dilation=%zd", pad, k, dil);
        return -1;
    }
    *out = out_size(in, k, pad, stride, dil, ceil_mode);
    return 0;
}

static int
pool_setup(em_Tensor *self, PyObject **args, pool_params *p)
{
    if (pair(args[0], "kernel_size", false, 0, 0, &p->kh, &p->kw) < 0 ||
        pair(args[1], "stride", true, p->kh, p->kw, &p->sh, &p->sw) < 0 ||
        pair(args[2], "padding", false, 0, 0, &p->ph, &p->pw) < 0 ||
        pair(args[3], "dilation", false, 0, 0, &p->dh, &p->dw) < 0)
        return -1;
    p->ceil_mode = PyObject_IsTrue(args[4]);
    int nd = self->ndim;
    if (nd != 3 && nd != 4) {
        PyErr_SetString(PyExc_RuntimeError,
                        "non-empty 3D or 4D (batch mode) tensor expected for input");
        return -1;
    }
    p->H = self->sizes[nd - 2];
    p->W = self->sizes[nd - 1];
    p->P = self->sizes[nd - 3] * (nd == 4 ? self->sizes[0] : 1);
    if (dim_out(p->H, p->kh, p->ph, p->sh, p->dh, p->ceil_mode, &p->OH) < 0 ||
        dim_out(p->W, p->kw, p->pw, p->sw, p->dw, p->ceil_mode, &p->OW) < 0)
        return -1;
    if (p->kh <= 0 || p->kw <= 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "kernel size should be greater than zero, but got kH: %zd kW: %zd",
                     p->kh, p->kw);
        return -1;
    }
    if (p->sh <= 0 || p->sw <= 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "stride should be greater than zero, but got dH: %zd dW: %zd", p->sh,
                     p->sw);
        return -1;
    }
    if (p->dh <= 0 || p->dw <= 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "dilation should be greater than zero, but got dilationH: %zd dilationW: "
                     "%zd", p->dh, p->dw);
        return -1;
    }
    bool ok = true;
    for (int d = nd - 3; d < nd; d++)
        ok = ok && self->sizes[d] > 0;
    if (!ok) {
        PyErr_Format(PyExc_RuntimeError, "Expected 3D or 4D (batch mode) tensor with optional "
                     "0 dim batch size for input, but got:%s", em_shape_s(nd, self->sizes));
        return -1;
    }
    if (p->kw / 2 < p->pw || p->kh / 2 < p->ph) {
        PyErr_Format(PyExc_RuntimeError,
                     "pad should be smaller than or equal to half of kernel size, but got "
                     "padW = %zd, padH = %zd, kW = %zd, kH = %zd", p->pw, p->ph, p->kw, p->kh);
        return -1;
    }
    if (p->OH < 1 || p->OW < 1) {
        PyErr_Format(PyExc_RuntimeError,
                     "Given input size: (%zdx%zdx%zd). Calculated output size: (%zdx%zdx%zd). "
                     "Output size is too small", self->sizes[nd - 3], p->H, p->W,
                     self->sizes[nd - 3], p->OH, p->OW);
        return -1;
    }
    if (self->dtype == EM_BOOL) {
        PyErr_SetString(PyExc_NotImplementedError, "\"max_pool2d\" not implemented for 'Bool'");
        return -1;
    }
    return 0;
}

/* Whether t (4-d) is laid out channels-last and not also plainly contiguous. */
static bool
is_channels_last(em_Tensor *t)
{
    if (t->ndim != 4 || em_tensor_is_contiguous(t))
        return false;
    static const int order[4] = {1, 3, 2, 0};
    Py_ssize_t expected = 1;
    for (int k = 0; k < 4; k++) {
        int d = order[k];
        if (t->sizes[d] != 1 && t->strides[d] != expected)
            return false;
        expected *= t->sizes[d];
    }
    return true;
}

/* The result geometry: self's with (OH, OW), contiguous or channels-last. */
static void
out_geom(em_Tensor *self, const pool_params *p, em_dtype_t dtype, bool cl, em_Geom *g)
{
    g->ndim = self->ndim;
    g->dtype = dtype;
    for (int d = 0; d < self->ndim; d++)
        g->sizes[d] = self->sizes[d];
    g->sizes[g->ndim - 2] = p->OH;
    g->sizes[g->ndim - 1] = p->OW;
    em_contiguous_strides(g);
    if (cl) {
        Py_ssize_t C = g->sizes[1];
        g->strides[1] = 1;
        g->strides[3] = C;
        g->strides[2] = C * p->OW;
        g->strides[0] = C * p->OW * p->OH;
    }
}

#define MAXPOOL(T, ISNAN)                                                                \
static void                                                                              \
maxpool_##T(const void *xv, void *yv, int64_t *idx, const pool_params *p, int64_t pl0,   \
            int64_t pl1)                                                                 \
{                                                                                        \
    const T *x = xv;                                                                     \
    T *y = yv;                                                                           \
    for (Py_ssize_t pl = pl0; pl < pl1; pl++) {                                          \
        const T *xp = x + pl * p->H * p->W;                                              \
        T *yp = y + pl * p->OH * p->OW;                                                  \
        int64_t *ip = idx + pl * p->OH * p->OW;                                          \
        for (Py_ssize_t oh = 0; oh < p->OH; oh++) {                                      \
            Py_ssize_t h0 = oh * p->sh - p->ph;                                          \
            Py_ssize_t h1 = h0 + (p->kh - 1) * p->dh + 1;                                \
            if (h1 > p->H)                                                               \
                h1 = p->H;                                                               \
            while (h0 < 0)                                                               \
                h0 += p->dh;                                                             \
            for (Py_ssize_t ow = 0; ow < p->OW; ow++) {                                  \
                Py_ssize_t w0 = ow * p->sw - p->pw;                                      \
                Py_ssize_t w1 = w0 + (p->kw - 1) * p->dw + 1;                            \
                if (w1 > p->W)                                                           \
                    w1 = p->W;                                                           \
                while (w0 < 0)                                                           \
                    w0 += p->dw;                                                         \
                int64_t best = h0 * p->W + w0;                                           \
                T m = 0;                                                                 \
                bool have = false;                                                       \
                for (Py_ssize_t h = h0; h < h1; h += p->dh)                              \
                    for (Py_ssize_t w = w0; w < w1; w += p->dw) {                        \
                        T v = xp[h * p->W + w];                                          \
                        if (!have || v > m || ISNAN(v)) {                                \
                            m = v;                                                       \
                            best = h * p->W + w;                                         \
                            have = true;                                                 \
                        }                                                                \
                    }                                                                    \
                yp[oh * p->OW + ow] = m;                                                 \
                ip[oh * p->OW + ow] = best;                                              \
            }                                                                            \
        }                                                                                \
    }                                                                                    \
}

#define NO_NAN(v) false
MAXPOOL(float, isnan)
MAXPOOL(double, isnan)
MAXPOOL(int64_t, NO_NAN)

/* The forward runs on the thread pool in fixed chunks of whole planes
 * (em_run_chunked): planes are independent, so the result is the same at any thread
 * count. */

/* A job of whole planes [a, b): forward (in x, out y and idx) or backward (in the
 * gradient, idx, out the input's gradient), in the compute type's loop. */
typedef void (*planes_fn)(const void *in, void *out, int64_t *idx, const pool_params *p,
                          int64_t pl0, int64_t pl1);

typedef struct {
    const void *in;
    void *out;
    int64_t *idx;
    const pool_params *p;
    planes_fn fn;
} planes_job;

static void
planes_range(void *c, int64_t a, int64_t b)
{
    planes_job *j = c;
    j->fn(j->in, j->out, j->idx, j->p, a, b);
}

static PyArrayObject *
as_type(em_Tensor *t, int npy)
{
    PyArray_Descr *d = PyArray_DescrFromType(npy);
    return (PyArrayObject *)PyArray_FromAny((PyObject *)t->array, d, 0, 0,
                                            NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED |
                                            NPY_ARRAY_FORCECAST, NULL);
}

/* out = values of arr (C-contiguous, plain layout) in out's dtype and layout. */
static int
store(em_Tensor *out, PyArrayObject *arr)
{
    if ((PyObject *)arr == (PyObject *)out->array)
        return 0;
    PyArray_Dims shape = {PyArray_DIMS(out->array), PyArray_NDIM(out->array)};
    PyArrayObject *r = (PyArrayObject *)PyArray_Newshape(arr, &shape, NPY_CORDER);
    if (r == NULL)
        return -1;
    int st = PyArray_CopyInto(out->array, r);
    Py_DECREF(r);
    return st;
}

static int
compute_type(em_dtype_t t)
{
    if (t == EM_FLOAT64)
        return NPY_DOUBLE;
    if (em_is_float(t))
        return NPY_FLOAT;
    return NPY_INT64;
}

static PyObject *
k_max_pool2d(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    if (em_refuse_complex(op, args[0]) < 0)
        return NULL;
    pool_params p = {0};
    if (pool_setup(self, args + 1, &p) < 0)
        return NULL;
    bool cl = is_channels_last(self);
    em_Geom gv, gi;
    out_geom(self, &p, self->dtype, cl, &gv);
    out_geom(self, &p, EM_INT64, cl, &gi);
    bool meta = em_tls.mode == EM_MODE_META || em_is_meta(self);
    em_Tensor *values = cl ? em_tensor_empty_like_layout(&gv, meta) : em_tensor_empty(&gv, meta);
    em_Tensor *indices = values == NULL ? NULL
                         : cl ? em_tensor_empty_like_layout(&gi, meta)
                              : em_tensor_empty(&gi, meta);
    PyArrayObject *x = NULL, *y = NULL, *ix = NULL;
    if (indices == NULL)
        goto error;
    if (!meta && values->numel > 0) {
        int npy = compute_type(self->dtype);
        npy_intp dims[3] = {p.P, p.OH, p.OW};
        bool direct = !cl && PyArray_TYPE(values->array) == npy;
        if ((x = as_type(self, npy)) == NULL)
            goto error;
        if (direct) {
            y = values->array;
            Py_INCREF(y);
        }
        else if ((y = (PyArrayObject *)PyArray_EMPTY(3, dims, npy, 0)) == NULL)
            goto error;
        if (cl) {
            if ((ix = (PyArrayObject *)PyArray_EMPTY(3, dims, NPY_INT64, 0)) == NULL)
                goto error;
        }
        else {
            ix = indices->array;
            Py_INCREF(ix);
        }
        const void *xd = PyArray_DATA(x);
        void *yd = PyArray_DATA(y);
        int64_t *id = PyArray_DATA(ix);
        planes_job job = {xd, yd, id, &p,
                          npy == NPY_FLOAT    ? maxpool_float
                          : npy == NPY_DOUBLE ? maxpool_double
                                              : maxpool_int64_t};
        if (em_run_chunked(planes_range, &job, p.P, p.H * p.W) < 0)
            goto error;
        if (store(values, y) < 0 || store(indices, ix) < 0)
            goto error;
    }
    Py_XDECREF(x);
    Py_XDECREF(y);
    Py_XDECREF(ix);
    PyObject *r = PyTuple_Pack(2, values, indices);
    Py_DECREF(values);
    Py_DECREF(indices);
    return r;
error:
    Py_XDECREF(x);
    Py_XDECREF(y);
    Py_XDECREF(ix);
    Py_XDECREF(values);
    Py_XDECREF(indices);
    return NULL;
}

#define MAXPOOL_BACKWARD(T)                                                              \
static void                                                                              \
maxpool_backward_##T(const void *gv, void *giv, int64_t *idx, const pool_params *p,      \
                     int64_t pl0, int64_t pl1)                                           \
{                                                                                        \
    const T *g = gv;                                                                     \
    T *gi = giv;                                                                         \
    Py_ssize_t hw = p->H * p->W, ohw = p->OH * p->OW;                                    \
    memset(gi + pl0 * hw, 0, sizeof(T) * (size_t)((pl1 - pl0) * hw));                   \
    for (Py_ssize_t pl = pl0; pl < pl1; pl++)                                            \
        for (Py_ssize_t o = 0; o < ohw; o++) {                                           \
            int64_t i = idx[pl * ohw + o];                                               \
            if (i >= 0 && i < hw)                                                        \
                gi[pl * hw + i] += g[pl * ohw + o];                                      \
        }                                                                                \
}

MAXPOOL_BACKWARD(float)
MAXPOOL_BACKWARD(double)

/* Checks that t has self's pooled shape (PyTorch's check_dim_size messages). */
static int
check_pooled(em_Tensor *t, em_Tensor *self, const pool_params *p)
{
    int nd = self->ndim;
    if (t->ndim != nd) {
        PyErr_Format(PyExc_RuntimeError,
                     "Expected a tensor of dimension %d but got: dimension %d", nd, t->ndim);
        return -1;
    }
    for (int d = 0; d < nd; d++) {
        Py_ssize_t want = d == nd - 2 ? p->OH : d == nd - 1 ? p->OW : self->sizes[d];
        if (t->sizes[d] != want) {
            PyErr_Format(PyExc_RuntimeError,
                         "Expected a tensor of dimension %d and tensor.size[%d] == %zd but "
                         "got: dimension %d and tensor.size[%d] = %zd", nd, d, want, nd, d,
                         t->sizes[d]);
            return -1;
        }
    }
    return 0;
}

static PyObject *
k_max_pool2d_backward(em_Op *op, PyObject **args)
{
    em_Tensor *grad = (em_Tensor *)args[0], *self = (em_Tensor *)args[1];
    em_Tensor *indices = (em_Tensor *)args[7];
    PyObject *pargs[5] = {args[2], args[3], args[4], args[5], args[6]};
    pool_params p = {0};
    if (pool_setup(self, pargs, &p) < 0)
        return NULL;
    if (!em_is_float(self->dtype)) {
        PyErr_Format(PyExc_NotImplementedError,
                     "\"max_pool2d_backward\" not implemented for '%s'",
                     em_dtype_torch_name(self->dtype));
        return NULL;
    }
    if (grad->dtype != self->dtype) {
        PyErr_Format(PyExc_RuntimeError, "expected dtype %s for `gradOutput` but got dtype %s",
                     em_dtypes[self->dtype]->name, em_dtypes[grad->dtype]->name);
        return NULL;
    }
    if (indices->dtype != EM_INT64) {
        PyErr_Format(PyExc_RuntimeError, "expected scalar type Long but found %s",
                     em_dtype_torch_name(indices->dtype));
        return NULL;
    }
    if (check_pooled(grad, self, &p) < 0 || check_pooled(indices, self, &p) < 0)
        return NULL;
    bool cl = is_channels_last(self);
    em_Geom g = {.ndim = self->ndim, .dtype = self->dtype};
    for (int d = 0; d < self->ndim; d++)
        g.sizes[d] = self->sizes[d];
    em_contiguous_strides(&g);
    if (cl) {
        Py_ssize_t C = g.sizes[1];
        g.strides[1] = 1;
        g.strides[3] = C;
        g.strides[2] = C * p.W;
        g.strides[0] = C * p.W * p.H;
    }
    bool meta = em_tls.mode == EM_MODE_META || em_is_meta(self) || em_is_meta(grad) ||
                em_is_meta(indices);
    em_Tensor *out = cl ? em_tensor_empty_like_layout(&g, meta) : em_tensor_empty(&g, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    int npy = compute_type(self->dtype);
    PyArrayObject *ga = NULL, *ia = NULL, *r = NULL;
    npy_intp dims[3] = {p.P, p.H, p.W};
    bool direct = !cl && PyArray_TYPE(out->array) == npy;
    if ((ga = as_type(grad, npy)) == NULL || (ia = as_type(indices, NPY_INT64)) == NULL)
        goto error;
    if (direct) {
        r = out->array;
        Py_INCREF(r);
    }
    else if ((r = (PyArrayObject *)PyArray_EMPTY(3, dims, npy, 0)) == NULL)
        goto error;
    {
        /* the planes (zeroed, then each gradient added at its index, in order) go to
         * the pool as the forward's do */
        planes_job job = {PyArray_DATA(ga), PyArray_DATA(r), PyArray_DATA(ia), &p,
                          npy == NPY_FLOAT ? maxpool_backward_float : maxpool_backward_double};
        if (em_run_chunked(planes_range, &job, p.P, p.H * p.W) < 0)
            goto error;
    }
    if (store(out, r) < 0)
        goto error;
    Py_DECREF(ga);
    Py_DECREF(ia);
    Py_DECREF(r);
    return (PyObject *)out;
error:
    Py_XDECREF(ga);
    Py_XDECREF(ia);
    Py_XDECREF(r);
    Py_DECREF(out);
    return NULL;
}

const em_KernelEntry em_pool_kernels[] = {
    {"max_pool2d_with_indices", k_max_pool2d},
    {"max_pool2d_with_indices_backward", k_max_pool2d_backward},
    {NULL, NULL},
};
