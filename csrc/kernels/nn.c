/* nn.c: eager kernels of the nn ops that are not prims (python/ember/ops/nn_ops.py and
 * linalg.py).
 *
 * "decomposed": the op's eager result is its decomposition into prims (the entry's
 * `decompose`), run with grad mode off; the op's own backward formula is what autograd
 * records. One source of truth for eager, meta and compiled results: in meta mode the
 * prims it calls produce meta tensors, so the same function is the op's C rule.
 *
 * "linear": input @ weight^T + bias (the hot path of every Linear layer), the product
 * by the runtime's blocked BLAS calls on the pool (em_blas_matmul, as linalg.c's
 * matmul) or NumPy's matmul, with the decomposition's checks and result.
 *
 * "batch_norm_functional": batch_norm.c's em_batch_norm_kernel.
 *
 * "embedding": the rows of the weight picked by the indices (copied on the pool).
 *
 * "layer_norm", "cross_entropy_loss": their common cases (float32/float64 rows; unweighted
 * (N, C) logits with class indices) in one C pass, statistics in double (float32
 * layer_norm rows: cloops.c's vectorised loop, lane sums gathered in double, the
 * normalisation in float32); the other cases take the decomposition.
 */
#include "kutil.h"
#include "runtime/runtime.h"
#include <math.h>

PyObject *
em_decomposed_kernel(em_Op *op, PyObject **args)
{
    if (op->decompose == NULL) {
        PyErr_Format(PyExc_TypeError, "%U has no decomposition", op->name);
        return NULL;
    }
    int grad = em_tls.grad_enabled;
    em_tls.grad_enabled = 0;
    PyObject *r = PyObject_Vectorcall(op->decompose, args, op->nparams, NULL);
    em_tls.grad_enabled = grad;
    return r;
}

/* out += b (NULL: nothing) */
static int
add_bias(em_Tensor *out, em_Tensor *b)
{
    if (b == NULL)
        return 0;
    PyObject *ins[2] = {(PyObject *)out, (PyObject *)b};
    return em_ufunc_call(em_np.add, ins, 2, out->array, out->dtype, out->dtype);
}

/* linear(input, weight, bias=None) for a 2-d weight and an input of >= 1 dims with the
 * same dtype; anything else (errors included) takes the decomposition. */
static PyObject *
k_linear(em_Op *op, PyObject **args)
{
    em_Tensor *x = (em_Tensor *)args[0], *w = (em_Tensor *)args[1];
    em_Tensor *b = args[2] == Py_None ? NULL : (em_Tensor *)args[2];
    if (x->ndim < 1 || w->ndim != 2 || x->dtype != w->dtype || !em_is_float(x->dtype) ||
        x->sizes[x->ndim - 1] != w->sizes[1] || x->sizes[x->ndim - 1] == 0 ||
        (b != NULL && (b->dtype != x->dtype || b->ndim > 1 ||
                       (b->ndim == 1 && b->sizes[0] != w->sizes[0] && b->sizes[0] != 1))) ||
        em_tls.mode == EM_MODE_META || em_is_meta(x) || em_is_meta(w) ||
        (b != NULL && em_is_meta(b)))
        return em_decomposed_kernel(op, args);
    em_Geom g = {.ndim = x->ndim, .dtype = x->dtype};
    for (int d = 0; d < x->ndim - 1; d++)
        g.sizes[d] = x->sizes[d];
    g.sizes[x->ndim - 1] = w->sizes[0];
    em_contiguous_strides(&g);
    em_Tensor *out = em_tensor_empty(&g, false);
    if (out == NULL || out->numel == 0)
        return (PyObject *)out;
    if (x->dtype == EM_FLOAT32 || x->dtype == EM_FLOAT64) {
        /* the runtime's blocked product over the pool (see linalg.c), w^T a view */
        Py_ssize_t ts[2] = {w->sizes[1], w->sizes[0]}, tst[2] = {w->strides[1], w->strides[0]};
        em_Tensor *wv = em_tensor_view(w, 2, ts, tst, w->offset);
        if (wv == NULL)
            goto error;
        int st = em_blas_matmul(x, wv, out);
        Py_DECREF(wv);
        if (st < 0)
            goto error;
        if (st == 0)
            return add_bias(out, b) < 0 ? em_finish(out, -1) : (PyObject *)out;
    }
    PyObject *wt = PyArray_Transpose(w->array, NULL);
    if (wt == NULL)
        goto error;
    /* a contiguous (..., in) input is one (rows, in) matrix: a single GEMM, as PyTorch */
    PyObject *xin = (PyObject *)x, *x2 = NULL;
    PyArrayObject *o2 = NULL;
    if (x->ndim > 2 && em_tensor_is_contiguous(x)) {
        npy_intp rows = x->numel / x->sizes[x->ndim - 1];
        npy_intp xd[2] = {rows, x->sizes[x->ndim - 1]}, od[2] = {rows, w->sizes[0]};
        PyArray_Dims xs = {xd, 2}, os = {od, 2};
        x2 = PyArray_Newshape(x->array, &xs, NPY_CORDER);
        o2 = x2 ? (PyArrayObject *)PyArray_Newshape(out->array, &os, NPY_CORDER) : NULL;
        if (o2 == NULL) {
            Py_XDECREF(x2);
            Py_DECREF(wt);
            goto error;
        }
        xin = x2;
    }
    PyObject *ins[2] = {xin, wt};
    /* bfloat16 (NumPy has no matmul loop for it) computes in float32 */
    em_dtype_t compute = x->dtype == EM_BFLOAT16 ? EM_FLOAT32 : x->dtype;
    int st = em_ufunc_call(op->ufunc, ins, 2, o2 ? o2 : out->array, compute, compute);
    Py_DECREF(wt);
    Py_XDECREF(x2);
    Py_XDECREF(o2);
    if (st < 0 || add_bias(out, b) < 0)
        goto error;
    return (PyObject *)out;
error:
    Py_DECREF(out);
    return NULL;
}

/* out's rows [a, b) = the weight's rows idx[a..b) (row bytes each) */
typedef struct {
    const char *w;
    const int64_t *idx;
    char *out;
    size_t row;
} gather_job;

static void
gather_range(void *c, int64_t a, int64_t b)
{
    gather_job *j = c;
    for (int64_t i = a; i < b; i++)
        memcpy(j->out + (size_t)i * j->row, j->w + (size_t)j->idx[i] * j->row, j->row);
}

/* embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse): the rows of a 2-d
 * weight picked by int32/int64 indices (from EM_POOL_FROM elements at 2 threads or more,
 * a contiguous weight's rows copied on the pool in fixed chunks, em_run_chunked; else
 * NumPy's take); meta calls, wrong arguments and
 * empty results take the decomposition, which raises PyTorch's errors. */
static PyObject *
k_embedding(em_Op *op, PyObject **args)
{
    em_Tensor *w = (em_Tensor *)args[0], *idx = (em_Tensor *)args[1];
    if (em_tls.mode == EM_MODE_META || em_is_meta(w) || em_is_meta(idx) || w->ndim != 2 ||
        (idx->dtype != EM_INT64 && idx->dtype != EM_INT32) || idx->numel == 0 ||
        w->sizes[1] == 0)
        return em_decomposed_kernel(op, args);
    PyArrayObject *ia = (PyArrayObject *)PyArray_FromAny(
        (PyObject *)idx->array, PyArray_DescrFromType(NPY_INT64), 0, 0,
        NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST, NULL);
    if (ia == NULL)
        return NULL;
    const int64_t *iv = PyArray_DATA(ia);
    Py_ssize_t n = idx->numel, rows = w->sizes[0];
    for (Py_ssize_t i = 0; i < n; i++) {
        if (iv[i] < 0 || iv[i] >= rows) {
            Py_DECREF(ia);
            PyErr_SetString(PyExc_IndexError, "index out of range in self");
            return NULL;
        }
    }
    /* NumPy's take on one thread (measured no slower than a row loop), rows of a
     * contiguous weight copied on the pool when it has threads for them */
    if (!PyArray_IS_C_CONTIGUOUS(w->array) || em_pool_threads() < 2 ||
        (double)n * (double)w->sizes[1] < EM_POOL_FROM ||
        em_check_ndim("embedding", idx->ndim + 1) < 0) {
        PyObject *arr = PyErr_Occurred() ? NULL
                        : PyArray_TakeFrom(w->array, (PyObject *)ia, 0, NULL, NPY_RAISE);
        Py_DECREF(ia);
        if (arr == NULL)
            return NULL;
        PyObject *out = (PyObject *)em_tensor_from_array((PyArrayObject *)arr, NULL, 0);
        Py_DECREF(arr);
        return out;
    }
    /* rows copied in fixed chunks of whole rows (a copy: the same at any thread count) */
    Py_ssize_t sizes[EM_MAX_DIMS];
    memcpy(sizes, idx->sizes, sizeof(Py_ssize_t) * idx->ndim);
    sizes[idx->ndim] = w->sizes[1];
    em_Tensor *out = em_empty(idx->ndim + 1, sizes, w->dtype, false);
    if (out == NULL) {
        Py_DECREF(ia);
        return NULL;
    }
    size_t row = (size_t)w->sizes[1] * (size_t)PyArray_ITEMSIZE(w->array);
    gather_job job = {PyArray_BYTES(w->array), iv, PyArray_BYTES(out->array), row};
    int st = em_run_chunked(gather_range, &job, n, w->sizes[1]);
    Py_DECREF(ia);
    return em_finish(out, st);
}

/* ------------------------------------------------------------------ layer_norm */

#define LAYER_NORM(T)                                                                    \
static void                                                                              \
layer_norm_##T(const T *x, const T *w, const T *b, T *y, Py_ssize_t rows, Py_ssize_t n,  \
               double eps)                                                               \
{                                                                                        \
    for (Py_ssize_t r = 0; r < rows; r++) {                                              \
        const T *xr = x + r * n;                                                         \
        T *yr = y + r * n;                                                               \
        double mean = 0, var = 0;                                                        \
        for (Py_ssize_t i = 0; i < n; i++)                                               \
            mean += xr[i];                                                               \
        mean /= (double)n;                                                               \
        for (Py_ssize_t i = 0; i < n; i++) {                                             \
            double d = xr[i] - mean;                                                     \
            var += d * d;                                                                \
        }                                                                                \
        double rstd = 1.0 / sqrt(var / (double)n + eps);                                 \
        for (Py_ssize_t i = 0; i < n; i++) {                                             \
            double v = (xr[i] - mean) * rstd;                                            \
            if (w != NULL)                                                               \
                v *= w[i];                                                               \
            if (b != NULL)                                                               \
                v += b[i];                                                               \
            yr[i] = (T)v;                                                                \
        }                                                                                \
    }                                                                                    \
}

LAYER_NORM(double)

/* A C-contiguous, aligned array of t (new reference), or NULL with no error when t is
 * None. */
static PyArrayObject *
dense_array(PyObject *t)
{
    if (t == Py_None)
        return NULL;
    return (PyArrayObject *)PyArray_FromAny((PyObject *)((em_Tensor *)t)->array, NULL, 0, 0,
                                            NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED, NULL);
}

/* layer_norm(input, normalized_shape, weight, bias, eps, cudnn_enable): float32/float64
 * inputs whose weight and bias (if any) share their dtype and have the normalized shape;
 * everything else (errors, meta, float16) takes the decomposition. */
/* The rows of layer_norm's kernel go to the thread pool in fixed chunks of whole rows
 * (em_run_chunked): each row is normalised alone, so the result is the same at any
 * thread count. */

typedef struct {
    const void *x, *w, *b;
    void *y;
    Py_ssize_t n;
    double eps;
    bool f32;
} ln_job;

static void
ln_range(void *c, int64_t a, int64_t b)
{
    ln_job *j = c;
    if (j->f32)
        em_layer_norm_f32((const float *)j->x + a * j->n, j->w, j->b,
                          (float *)j->y + a * j->n, b - a, j->n, j->eps);
    else
        layer_norm_double((const double *)j->x + a * j->n, j->w, j->b,
                          (double *)j->y + a * j->n, b - a, j->n, j->eps);
}

static PyObject *
k_layer_norm(em_Op *op, PyObject **args)
{
    em_Tensor *x = (em_Tensor *)args[0];
    PyObject *shape = args[1], *wo = args[2], *bo = args[3];
    Py_ssize_t k = PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : 0;
    bool fast = em_tls.mode != EM_MODE_META && !em_is_meta(x) && k > 0 && k <= x->ndim &&
                (x->dtype == EM_FLOAT32 || x->dtype == EM_FLOAT64) && x->numel > 0;
    Py_ssize_t n = 1;
    for (Py_ssize_t i = 0; fast && i < k; i++) {
        Py_ssize_t d = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
        fast = d == x->sizes[x->ndim - k + i];
        n *= d;
    }
    PyErr_Clear();
    PyObject *wb[2] = {wo, bo};
    for (int j = 0; fast && j < 2; j++) {
        if (wb[j] == Py_None)
            continue;
        em_Tensor *t = (em_Tensor *)wb[j];
        fast = !em_is_meta(t) && t->dtype == x->dtype && t->ndim == k &&
               memcmp(t->sizes, x->sizes + x->ndim - k, sizeof(Py_ssize_t) * k) == 0;
    }
    if (!fast)
        return em_decomposed_kernel(op, args);
    double eps = PyFloat_AsDouble(args[4]);
    if (eps == -1.0 && PyErr_Occurred())
        return NULL;
    em_Geom g = {.ndim = x->ndim, .dtype = x->dtype};
    memcpy(g.sizes, x->sizes, sizeof(Py_ssize_t) * x->ndim);
    em_contiguous_strides(&g);
    em_Tensor *out = em_tensor_empty(&g, false);
    PyArrayObject *xa = NULL, *wa = NULL, *ba = NULL;
    if (out == NULL || (xa = dense_array(args[0])) == NULL ||
        (wo != Py_None && (wa = dense_array(wo)) == NULL) ||
        (bo != Py_None && (ba = dense_array(bo)) == NULL)) {
        Py_XDECREF(out);
        Py_XDECREF(xa);
        Py_XDECREF(wa);
        return NULL;
    }
    Py_ssize_t rows = x->numel / n;
    ln_job job = {PyArray_DATA(xa), wa ? PyArray_DATA(wa) : NULL,
                  ba ? PyArray_DATA(ba) : NULL, PyArray_DATA(out->array), n, eps,
                  x->dtype == EM_FLOAT32};
    int st = em_run_chunked(ln_range, &job, rows, n);
    Py_DECREF(xa);
    Py_XDECREF(wa);
    Py_XDECREF(ba);
    if (st < 0)
        Py_CLEAR(out);
    return (PyObject *)out;
}

/* ------------------------------------------------------------------ cross_entropy_loss */

/* Per-sample losses of (N, C) logits x against class indices t:
 *   (1 - s) (lse - x[t]) + s / C (C lse - sum x), 0 where t == ignore. */
#define CROSS_ENTROPY(T)                                                                 \
static Py_ssize_t                                                                        \
cross_entropy_##T(const T *x, const int64_t *t, double *loss, Py_ssize_t N, Py_ssize_t C,\
                  int64_t ignore, double smoothing, Py_ssize_t *valid)                  \
{                                                                                        \
    *valid = 0;                                                                          \
    for (Py_ssize_t r = 0; r < N; r++) {                                                 \
        int64_t c = t[r];                                                                \
        if (c == ignore) {                                                               \
            loss[r] = 0;                                                                 \
            continue;                                                                    \
        }                                                                                \
        if (c < 0 || c >= C)                                                             \
            return r;                                                                    \
        const T *xr = x + r * C;                                                         \
        double m = xr[0], sum = 0, total = 0;                                            \
        for (Py_ssize_t i = 1; i < C; i++)                                               \
            if (xr[i] > m || xr[i] != xr[i])                                             \
                m = xr[i];                                                               \
        for (Py_ssize_t i = 0; i < C; i++) {                                             \
            sum += exp(xr[i] - m);                                                       \
            total += xr[i];                                                              \
        }                                                                                \
        double lse = m + log(sum);                                                       \
        loss[r] = (1 - smoothing) * (lse - xr[c]);                                       \
        if (smoothing > 0)                                                               \
            loss[r] += smoothing / (double)C * ((double)C * lse - total);                \
        (*valid)++;                                                                      \
    }                                                                                    \
    return -1;                                                                           \
}

CROSS_ENTROPY(double)

/* The float32 case of the same: the rows' logsumexp and sum from cloops.c's vectorised
 * loop (into loss and a scratch row; on the pool in fixed chunks of whole rows,
 * em_run_chunked: each row's figures are the same at any thread count), then the
 * per-sample formula above. Called with the GIL held: the row of the first target out
 * of range (no exception), -1 done, -2 with an exception (a signal handler raised). */

typedef struct {
    const float *x;
    double *loss, *total;
    Py_ssize_t C;
} ce_ctx;

static void
ce_lse_range(void *c, int64_t a, int64_t b)
{
    ce_ctx *p = c;
    em_lse_rows_f32(p->x + a * p->C, p->loss + a, p->total ? p->total + a : NULL, b - a,
                    p->C);
}

static Py_ssize_t
cross_entropy_float(const float *x, const int64_t *t, double *loss, Py_ssize_t N,
                    Py_ssize_t C, int64_t ignore, double smoothing, Py_ssize_t *valid,
                    double *total)
{
    *valid = 0;
    for (Py_ssize_t r = 0; r < N; r++)
        if (t[r] != ignore && (t[r] < 0 || t[r] >= C))
            return r;
    ce_ctx job = {x, loss, smoothing > 0 ? total : NULL, C};
    if (em_run_chunked(ce_lse_range, &job, N, C) < 0)
        return -2;
    for (Py_ssize_t r = 0; r < N; r++) {
        int64_t c = t[r];
        if (c == ignore) {
            loss[r] = 0;
            continue;
        }
        double lse = loss[r];
        loss[r] = (1 - smoothing) * (lse - x[r * C + c]);
        if (smoothing > 0)
            loss[r] += smoothing / (double)C * ((double)C * lse - total[r]);
        (*valid)++;
    }
    return -1;
}

/* cross_entropy_loss(self, target, weight, reduction, ignore_index, label_smoothing) for
 * unweighted (N, C) float32/float64 logits and int64 class indices; anything else
 * (probabilities, spatial or unbatched inputs, weights, errors, meta) takes the
 * decomposition. */
static PyObject *
k_cross_entropy(em_Op *op, PyObject **args)
{
    em_Tensor *x = (em_Tensor *)args[0], *t = (em_Tensor *)args[1];
    long reduction = PyLong_AsLong(args[3]);
    long long ignore = PyLong_AsLongLong(args[4]);
    double smoothing = PyFloat_AsDouble(args[5]);
    if (PyErr_Occurred())
        return NULL;
    if (em_tls.mode == EM_MODE_META || em_is_meta(x) || em_is_meta(t) || args[2] != Py_None ||
        x->ndim != 2 || t->ndim != 1 || t->dtype != EM_INT64 ||
        (x->dtype != EM_FLOAT32 && x->dtype != EM_FLOAT64) || t->sizes[0] != x->sizes[0] ||
        x->sizes[1] == 0 || reduction < 0 || reduction > 2 || smoothing < 0 || smoothing > 1)
        return em_decomposed_kernel(op, args);
    Py_ssize_t N = x->sizes[0], C = x->sizes[1];
    PyArrayObject *xa = dense_array(args[0]), *ta = xa ? dense_array(args[1]) : NULL;
    if (ta == NULL) {
        Py_XDECREF(xa);
        return NULL;
    }
    double *loss = PyMem_Malloc(sizeof(double) * 2 * (N ? N : 1));
    if (loss == NULL) {
        Py_DECREF(xa);
        Py_DECREF(ta);
        return PyErr_NoMemory();
    }
    Py_ssize_t valid, bad;
    const void *xd = PyArray_DATA(xa);
    const int64_t *td = PyArray_DATA(ta);
    if (x->dtype == EM_FLOAT32) {
        bad = cross_entropy_float(xd, td, loss, N, C, ignore, smoothing, &valid, loss + N);
    }
    else {
        Py_BEGIN_ALLOW_THREADS
        bad = cross_entropy_double(xd, td, loss, N, C, ignore, smoothing, &valid);
        Py_END_ALLOW_THREADS
    }
    em_Tensor *out = NULL;
    if (bad == -2)
        goto done;
    if (bad >= 0) {
        PyErr_Format(PyExc_IndexError, "Target %lld is out of bounds.", (long long)td[bad]);
        goto done;
    }
    em_Geom g = {.ndim = reduction == 0 ? 1 : 0, .dtype = x->dtype, .sizes = {N}};
    em_contiguous_strides(&g);
    if ((out = em_tensor_empty(&g, false)) == NULL)
        goto done;
    if (reduction == 0) {
        for (Py_ssize_t r = 0; r < N; r++) {
            if (x->dtype == EM_FLOAT32)
                ((float *)PyArray_DATA(out->array))[r] = (float)loss[r];
            else
                ((double *)PyArray_DATA(out->array))[r] = loss[r];
        }
    }
    else {
        double s = 0;
        for (Py_ssize_t r = 0; r < N; r++)
            s += loss[r];
        if (reduction == 1)
            s = valid ? s / (double)valid : NAN;
        if (x->dtype == EM_FLOAT32)
            *(float *)PyArray_DATA(out->array) = (float)s;
        else
            *(double *)PyArray_DATA(out->array) = s;
    }
done:
    PyMem_Free(loss);
    Py_DECREF(xa);
    Py_DECREF(ta);
    return (PyObject *)out;
}

const em_KernelEntry em_nn_kernels[] = {
    {"decomposed", em_decomposed_kernel},
    {"linear", k_linear},
    {"embedding", k_embedding},
    {"layer_norm", k_layer_norm},
    {"cross_entropy_loss", k_cross_entropy},
    {"batch_norm_functional", em_batch_norm_kernel},
    {NULL, NULL},
};
