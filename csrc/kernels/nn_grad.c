/* nn_grad.c: fused eager gradients of nn ops whose backward formula, written with ops
 * (python/ember/ops/), would take many passes over memory: silu, gelu, softmax,
 * log_softmax, layer_norm, cross_entropy (class indices) and embedding.
 *
 * Each _C._grad_* function returns the gradient(s) computed in one or two passes over
 * the operands, or None when its case does not apply, and the formula then computes
 * them with ops. The case applies only in eager mode with grad mode off (a backward
 * without create_graph: no gradient of the gradient is recorded, and no tracer has to
 * see the ops) and for real (not meta) contiguous float32/float64 operands of one
 * dtype. Large inputs run on the thread pool (em_run_chunked, kutil.c) in chunks whose
 * bounds depend only on the sizes, and every reduction adds in a fixed order, so results
 * are identical at every thread count.
 *
 * batch_norm's backward recomputes the statistics as its forward (batch_norm.c,
 * em_bn_stats_of) computed them.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "no-trapping-math", "no-math-errno", "fp-contract=fast")
#endif
#include "kutil.h"
#include "runtime/runtime.h"
#include <math.h>
#include <stdlib.h>
#include "kernels/vecmath.h"

#define INV_SQRT_2PI 0.39894228040143267794
#define SQRT1_2 0.70710678118654752440
#define SQRT_2_OVER_PI 0.79788456080286535588
#define GELU_KAPPA 0.044715

/* Whether a fused gradient may run at all: eager mode, grad mode off. */
static bool
fused_mode(void)
{
    return em_tls.mode == EM_MODE_EAGER && !em_tls.grad_enabled;
}

static bool
same_shape(em_Tensor *a, em_Tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d])
            return false;
    return true;
}

/* The common prologue of the fused gradients: x and its gradient g, both plain of x's
 * dtype and of one shape, in eager mode with grad mode off; x when the case applies,
 * NULL when it does not (no exception). */
static em_Tensor *
fused_operands(PyObject *g, PyObject *x)
{
    if (!fused_mode() || !em_Tensor_Check(x))
        return NULL;
    em_Tensor *t = (em_Tensor *)x;
    if (!em_plain_float(g, t->dtype) || !em_plain_float(x, t->dtype) ||
        !same_shape((em_Tensor *)g, t))
        return NULL;
    return t;
}

/* A new contiguous tensor like `like` (its data's address stored at *slot, inside the
 * job's context) filled by fn32 or fn64 (by like's dtype) over n work items of `unit`
 * elements each, by em_run_chunked; NULL with an exception. */
static PyObject *
run_into_new(em_Tensor *like, void **slot, em_range_fn fn32, em_range_fn fn64, void *ctx,
             int64_t n, int64_t unit)
{
    em_Tensor *out = em_empty_contiguous(like);
    if (out == NULL || like->numel == 0)
        return (PyObject *)out;
    *slot = PyArray_DATA(out->array);
    return em_finish(out,
                     em_run_chunked(like->dtype == EM_FLOAT32 ? fn32 : fn64, ctx, n, unit));
}

/* The three flags want_input, want_weight, want_bias from args[0..2]: 0, or -1 with an
 * exception. */
static int
wanted(PyObject *const *args, int want[3])
{
    for (int i = 0; i < 3; i++)
        if ((want[i] = PyObject_IsTrue(args[i])) < 0)
            return -1;
    return 0;
}

/* (gx, gw, gb) as a tuple, None for those NULL; the references are stolen (and
 * released when the tuple cannot be built). */
static PyObject *
grads_tuple(em_Tensor *gx, em_Tensor *gw, em_Tensor *gb)
{
    PyObject *r = PyTuple_Pack(3, gx ? (PyObject *)gx : Py_None, gw ? (PyObject *)gw : Py_None,
                               gb ? (PyObject *)gb : Py_None);
    Py_XDECREF(gx);
    Py_XDECREF(gw);
    Py_XDECREF(gb);
    return r;
}

/* Row reductions over kutil.h's 16 float lanes (em_v16f: the order of the additions
 * is fixed by the code, not the compiler): sum(a * b) (b NULL: sum(a)) and the
 * maximum; centred sums are em_lane_sum_f32's, as the forward kernels take them. */
static inline float
dot_f32(const float *restrict a, const float *restrict b, Py_ssize_t n)
{
    em_v16f l = {0};
    Py_ssize_t i = 0;
    for (; i + EM_LANES <= n; i += EM_LANES) {
        em_v16f u, v;
        memcpy(&u, a + i, sizeof u);
        if (b != NULL) {
            memcpy(&v, b + i, sizeof v);
            u *= v;
        }
        l += u;
    }
    float s = em_lanes_total(l);
    for (; i < n; i++)
        s += b != NULL ? a[i] * b[i] : a[i];
    return s;
}

static inline float
max_f32(const float *restrict x, Py_ssize_t n)
{
    em_v16f l = {0};
    l -= INFINITY;
    Py_ssize_t i = 0;
    for (; i + EM_LANES <= n; i += EM_LANES) {
        em_v16f v;
        memcpy(&v, x + i, sizeof v);
        em_v16i gt = v > l;
        l = (em_v16f)((gt & (em_v16i)v) | (~gt & (em_v16i)l));
    }
    float m = -INFINITY;
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    for (int j = 0; j < EM_LANES; j++)
        m = l[j] > m ? l[j] : m;
    return m;
}

/* ------------------------------------------------------------------ silu, gelu */

typedef struct {
    const void *g, *x;
    void *y;
    int kind;                      /* 0 silu, 1 gelu (erf), 2 gelu (tanh) */
} pw_ctx;

EM_CLONES static void
pw_f32(const float *restrict g, const float *restrict x, float *restrict y, int64_t n,
       int kind)
{
    if (kind == 0) {
        for (int64_t i = 0; i < n; i++) {
            float v = x[i], s = 1.0f / (1.0f + em_expf(-v));
            y[i] = g[i] * s * (1.0f + v * (1.0f - s));
        }
    }
    else if (kind == 1) {
        em_gelu_grad_f32(g, x, y, n);     /* cloops.c: shares gelu's Phi */
    }
    else {
        for (int64_t i = 0; i < n; i++) {
            float v = x[i], v2 = v * v;
            float t = em_tanhf((float)SQRT_2_OVER_PI * (v + (float)GELU_KAPPA * v2 * v));
            float left = 0.5f * (1.0f + t);
            float right = 0.5f * v * (1.0f - t * t) *
                          ((float)SQRT_2_OVER_PI * (1.0f + 3.0f * (float)GELU_KAPPA * v2));
            y[i] = g[i] * (left + right);
        }
    }
}

static void
pw_f64(const double *restrict g, const double *restrict x, double *restrict y, int64_t n,
       int kind)
{
    for (int64_t i = 0; i < n; i++) {
        double v = x[i], d;
        if (kind == 0) {
            double s = 1.0 / (1.0 + exp(-v));
            d = s * (1.0 + v * (1.0 - s));
        }
        else if (kind == 1) {
            d = 0.5 * erfc(-v * SQRT1_2) + v * exp(-0.5 * v * v) * INV_SQRT_2PI;
        }
        else {
            double v2 = v * v, t = tanh(SQRT_2_OVER_PI * (v + GELU_KAPPA * v2 * v));
            d = 0.5 * (1.0 + t) +
                0.5 * v * (1.0 - t * t) * (SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_KAPPA * v2));
        }
        y[i] = g[i] * d;
    }
}

static void
pw_range32(void *c, int64_t a, int64_t b)
{
    pw_ctx *p = c;
    pw_f32((const float *)p->g + a, (const float *)p->x + a, (float *)p->y + a, b - a,
           p->kind);
}

static void
pw_range64(void *c, int64_t a, int64_t b)
{
    pw_ctx *p = c;
    pw_f64((const double *)p->g + a, (const double *)p->x + a, (double *)p->y + a, b - a,
           p->kind);
}

/* _grad_pointwise(kind, grad, self): grad * d op(self)/d self for kind 0 silu,
 * 1 gelu, 2 gelu(approximate='tanh'); None when the case does not apply. */
static PyObject *
grad_pointwise(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "_grad_pointwise takes 3 arguments");
    int kind = (int)PyLong_AsLong(args[0]);
    if (kind == -1 && PyErr_Occurred())
        return NULL;
    em_Tensor *x = fused_operands(args[1], args[2]);
    if (x == NULL || kind < 0 || kind > 2)
        Py_RETURN_NONE;
    pw_ctx c = {PyArray_DATA(((em_Tensor *)args[1])->array), PyArray_DATA(x->array), NULL,
                kind};
    return run_into_new(x, &c.y, pw_range32, pw_range64, &c, x->numel, 1);
}

/* ------------------------------------------------------------------ rows */

typedef struct {
    const void *g, *y;
    void *out;
    Py_ssize_t n;
    int log;
} sm_ctx;

/* softmax: gx = y (g - sum(g y)); log_softmax (y the log-probabilities):
 * gx = g - exp(y) sum(g) */
EM_CLONES static void
sm_rows_f32(const float *restrict g, const float *restrict y, float *restrict o,
            int64_t rows, Py_ssize_t n, int log)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict gr = g + r * n, *restrict yr = y + r * n;
        float *restrict or = o + r * n;
        float s = dot_f32(gr, log ? NULL : yr, n);
        if (log)
            for (Py_ssize_t i = 0; i < n; i++)
                or[i] = gr[i] - em_expf(yr[i]) * s;
        else
            for (Py_ssize_t i = 0; i < n; i++)
                or[i] = yr[i] * (gr[i] - s);
    }
}

static void
sm_rows_f64(const double *restrict g, const double *restrict y, double *restrict o,
            int64_t rows, Py_ssize_t n, int log)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *restrict gr = g + r * n, *restrict yr = y + r * n;
        double *restrict or = o + r * n;
        double s = 0.0;
        for (Py_ssize_t i = 0; i < n; i++)
            s += log ? gr[i] : gr[i] * yr[i];
        for (Py_ssize_t i = 0; i < n; i++)
            or[i] = log ? gr[i] - exp(yr[i]) * s : yr[i] * (gr[i] - s);
    }
}

static void
sm_range32(void *c, int64_t a, int64_t b)
{
    sm_ctx *p = c;
    sm_rows_f32((const float *)p->g + a * p->n, (const float *)p->y + a * p->n,
                (float *)p->out + a * p->n, b - a, p->n, p->log);
}

static void
sm_range64(void *c, int64_t a, int64_t b)
{
    sm_ctx *p = c;
    sm_rows_f64((const double *)p->g + a * p->n, (const double *)p->y + a * p->n,
                (double *)p->out + a * p->n, b - a, p->n, p->log);
}

/* _grad_softmax(grad, result, log): the gradient of softmax (log: log_softmax) over
 * the last dim from its result; None when the case does not apply. */
static PyObject *
grad_softmax(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "_grad_softmax takes 3 arguments");
    int log = PyObject_IsTrue(args[2]);
    if (log < 0)
        return NULL;
    em_Tensor *y = fused_operands(args[0], args[1]);
    if (y == NULL || y->ndim == 0)
        Py_RETURN_NONE;
    Py_ssize_t n = y->sizes[y->ndim - 1];
    sm_ctx c = {PyArray_DATA(((em_Tensor *)args[0])->array), PyArray_DATA(y->array), NULL,
                n, log};
    return run_into_new(y, &c.out, sm_range32, sm_range64, &c, n ? y->numel / n : 0, n);
}

/* ------------------------------------------------------------------ layer_norm */

/* Rows are split into LN_SLABS fixed slabs (fewer when there are fewer rows); each slab
 * sums its rows' contributions to the weight's and the bias's gradients (in the
 * dtype), and the slabs' sums are then added in slab order in double: the same result
 * at any thread count. */
#define LN_SLABS 32

typedef struct {
    const void *g, *x, *w;
    void *gx;
    void *gw, *gb;                 /* slabs x n partial sums (of the dtype), or NULL */
    int64_t rows, slabs;
    Py_ssize_t n;
    double eps;
} ln_ctx;

/* One row: mean and rstd as the forward kernel computes them (lane sums gathered in
 * double), then gx = rstd (gxh - mean(gxh) - xh mean(gxh xh)), gxh = g w,
 * xh = (x - mean) rstd; gw += g xh, gb += g. */
EM_CLONES static void
ln_rows_f32(const float *restrict g, const float *restrict x, const float *restrict w,
            float *restrict gx, float *restrict gw, float *restrict gb, int64_t r0,
            int64_t r1, Py_ssize_t n, double eps)
{
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict gr = g + r * n, *restrict xr = x + r * n;
        float mean, rstd;
        em_row_moments_f32(xr, n, eps, &mean, &rstd);
        em_v16f l1 = {0}, l2 = {0};
        Py_ssize_t i = 0;
        for (; i + EM_LANES <= n; i += EM_LANES) {
            em_v16f gv, xv, wv;
            memcpy(&gv, gr + i, sizeof gv);
            memcpy(&xv, xr + i, sizeof xv);
            xv = (xv - mean) * rstd;
            if (w != NULL) {
                memcpy(&wv, w + i, sizeof wv);
                gv *= wv;
            }
            l1 += gv;
            l2 += gv * xv;
        }
        float a1 = em_lanes_total(l1), a2 = em_lanes_total(l2);
        for (; i < n; i++) {
            float gh = w ? gr[i] * w[i] : gr[i], xh = (xr[i] - mean) * rstd;
            a1 += gh;
            a2 += gh * xh;
        }
        if (gw != NULL && gb != NULL)
            for (i = 0; i < n; i++) {
                gw[i] += gr[i] * ((xr[i] - mean) * rstd);
                gb[i] += gr[i];
            }
        else if (gw != NULL)
            for (i = 0; i < n; i++)
                gw[i] += gr[i] * ((xr[i] - mean) * rstd);
        else if (gb != NULL)
            for (i = 0; i < n; i++)
                gb[i] += gr[i];
        if (gx != NULL) {
            float m1 = a1 / (float)n, m2 = a2 / (float)n;
            float *restrict gxr = gx + r * n;
            if (w != NULL)
                for (i = 0; i < n; i++)
                    gxr[i] = rstd * (gr[i] * w[i] - m1 - (xr[i] - mean) * rstd * m2);
            else
                for (i = 0; i < n; i++)
                    gxr[i] = rstd * (gr[i] - m1 - (xr[i] - mean) * rstd * m2);
        }
    }
}

static void
ln_rows_f64(const double *restrict g, const double *restrict x, const double *restrict w,
            double *restrict gx, double *restrict gw, double *restrict gb, int64_t r0,
            int64_t r1, Py_ssize_t n, double eps)
{
    for (int64_t r = r0; r < r1; r++) {
        const double *restrict gr = g + r * n, *restrict xr = x + r * n;
        double sum = 0.0, sq = 0.0, a1 = 0.0, a2 = 0.0;
        for (Py_ssize_t i = 0; i < n; i++)
            sum += xr[i];
        double mean = sum / (double)n;
        for (Py_ssize_t i = 0; i < n; i++)
            sq += (xr[i] - mean) * (xr[i] - mean);
        double rstd = 1.0 / sqrt(sq / (double)n + eps);
        for (Py_ssize_t i = 0; i < n; i++) {
            double gh = w ? gr[i] * w[i] : gr[i], xh = (xr[i] - mean) * rstd;
            a1 += gh;
            a2 += gh * xh;
            if (gw)
                gw[i] += gr[i] * xh;
            if (gb)
                gb[i] += gr[i];
        }
        if (gx) {
            double m1 = a1 / (double)n, m2 = a2 / (double)n;
            for (Py_ssize_t i = 0; i < n; i++) {
                double gh = w ? gr[i] * w[i] : gr[i];
                gx[r * n + i] = rstd * (gh - m1 - (xr[i] - mean) * rstd * m2);
            }
        }
    }
}

static void
ln_range(void *c, int64_t a, int64_t b, bool f32)
{
    ln_ctx *p = c;
    for (int64_t s = a; s < b; s++) {
        int64_t r0 = p->rows * s / p->slabs, r1 = p->rows * (s + 1) / p->slabs;
        if (f32)
            ln_rows_f32(p->g, p->x, p->w, p->gx, p->gw ? (float *)p->gw + s * p->n : NULL,
                        p->gb ? (float *)p->gb + s * p->n : NULL, r0, r1, p->n, p->eps);
        else
            ln_rows_f64(p->g, p->x, p->w, p->gx, p->gw ? (double *)p->gw + s * p->n : NULL,
                        p->gb ? (double *)p->gb + s * p->n : NULL, r0, r1, p->n, p->eps);
    }
}

static void
ln_range32(void *c, int64_t a, int64_t b)
{
    ln_range(c, a, b, true);
}

static void
ln_range64(void *c, int64_t a, int64_t b)
{
    ln_range(c, a, b, false);
}

/* The slabs' partial sums (slabs x n of like's dtype: a float32 slab sums its rows in
 * float32, as PyTorch's per-thread buffers do) added in order, in double, into a new
 * tensor shaped like like. */
static em_Tensor *
slab_total(const void *part, int64_t slabs, Py_ssize_t n, em_Tensor *like)
{
    em_Tensor *t = em_empty_contiguous(like);
    if (t == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        double s = 0.0;
        for (int64_t k = 0; k < slabs; k++)
            s += like->dtype == EM_FLOAT32 ? (double)((const float *)part)[k * n + i]
                                           : ((const double *)part)[k * n + i];
        if (like->dtype == EM_FLOAT32)
            ((float *)PyArray_DATA(t->array))[i] = (float)s;
        else
            ((double *)PyArray_DATA(t->array))[i] = s;
    }
    return t;
}

/* _grad_layer_norm(grad, input, k, weight, eps, want_input, want_weight, want_bias):
 * layer_norm's gradients over the last k dims (weight and bias shaped like them) as a
 * tuple (None for those not wanted); None when the case does not apply. */
static PyObject *
grad_layer_norm(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8)
        return PyErr_Format(PyExc_TypeError, "_grad_layer_norm takes 8 arguments");
    long k = PyLong_AsLong(args[2]);
    double eps = PyFloat_AsDouble(args[4]);
    int want[3];
    if (wanted(args + 5, want) < 0 || PyErr_Occurred())
        return NULL;
    em_Tensor *g = (em_Tensor *)args[0], *x = fused_operands(args[0], args[1]);
    em_Tensor *w = args[3] == Py_None ? NULL : (em_Tensor *)args[3];
    if (x == NULL || (w != NULL && !em_plain_float(args[3], x->dtype)) || k < 1 ||
        k > x->ndim)
        Py_RETURN_NONE;
    Py_ssize_t n = 1;
    for (int d = x->ndim - (int)k; d < x->ndim; d++)
        n *= x->sizes[d];
    if (n == 0 || x->numel == 0 || (w != NULL && w->numel != n))
        Py_RETURN_NONE;
    int64_t rows = x->numel / n;
    int64_t slabs = rows < LN_SLABS ? rows : LN_SLABS;
    char *part = NULL;
    size_t item = x->dtype == EM_FLOAT32 ? sizeof(float) : sizeof(double);
    em_Tensor *gx = NULL, *gw = NULL, *gb = NULL;
    em_Geom pg = {.ndim = (int)k, .dtype = x->dtype};
    for (int d = 0; d < k; d++)
        pg.sizes[d] = x->sizes[x->ndim - k + d];
    em_contiguous_strides(&pg);
    if (want[1] || want[2]) {
        part = calloc((size_t)slabs * n * ((want[1] != 0) + (want[2] != 0)), item);
        if (part == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
    }
    if (want[0] && (gx = em_empty_contiguous(x)) == NULL)
        goto error;
    ln_ctx c = {PyArray_DATA(g->array), PyArray_DATA(x->array),
                w ? PyArray_DATA(w->array) : NULL, gx ? PyArray_DATA(gx->array) : NULL,
                want[1] ? part : NULL, want[2] ? part + (want[1] ? slabs * n * item : 0) : NULL,
                rows, slabs, n, eps};
    if (em_run_chunked(x->dtype == EM_FLOAT32 ? ln_range32 : ln_range64, &c, slabs,
                       x->numel / slabs) < 0)
        goto error;
    if (want[1] || want[2]) {
        em_Tensor *like = em_tensor_empty(&pg, false);
        if (like == NULL)
            goto error;
        if (want[1])
            gw = slab_total(c.gw, slabs, n, like);
        if (want[2])
            gb = slab_total(c.gb, slabs, n, like);
        Py_DECREF(like);
        if ((want[1] && gw == NULL) || (want[2] && gb == NULL))
            goto error;
    }
    free(part);
    return grads_tuple(gx, gw, gb);
error:
    free(part);
    Py_XDECREF(gx);
    Py_XDECREF(gw);
    Py_XDECREF(gb);
    return NULL;
}

/* ------------------------------------------------------------------ cross_entropy */

typedef struct {
    const void *x;
    const int64_t *t;
    const double *scale;           /* per row (NULL: `s` for every row) */
    double s;
    void *out;
    Py_ssize_t n;
    int64_t ignore;
} ce_ctx;

/* gx[r] = scale_r (softmax(x[r]) - onehot(t[r])); rows whose target is ignored get 0 */
EM_CLONES static void
ce_rows_f32(const ce_ctx *p, int64_t r0, int64_t r1)
{
    Py_ssize_t n = p->n;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict xr = (const float *)p->x + r * n;
        float *restrict or = (float *)p->out + r * n;
        int64_t t = p->t[r];
        if (t == p->ignore) {
            for (Py_ssize_t i = 0; i < n; i++)
                or[i] = 0.0f;
            continue;
        }
        float m = max_f32(xr, n);
        for (Py_ssize_t i = 0; i < n; i++)
            or[i] = em_expf(xr[i] - m);
        float s = dot_f32(or, NULL, n);
        float k = (float)((p->scale ? p->scale[r] : p->s) / (double)s);
        for (Py_ssize_t i = 0; i < n; i++)
            or[i] *= k;
        or[t] -= (float)(p->scale ? p->scale[r] : p->s);
    }
}

static void
ce_rows_f64(const ce_ctx *p, int64_t r0, int64_t r1)
{
    Py_ssize_t n = p->n;
    for (int64_t r = r0; r < r1; r++) {
        const double *xr = (const double *)p->x + r * n;
        double *or = (double *)p->out + r * n;
        int64_t t = p->t[r];
        if (t == p->ignore) {
            for (Py_ssize_t i = 0; i < n; i++)
                or[i] = 0.0;
            continue;
        }
        double m = -INFINITY, s = 0.0, sc = p->scale ? p->scale[r] : p->s;
        for (Py_ssize_t i = 0; i < n; i++)
            m = xr[i] > m ? xr[i] : m;
        for (Py_ssize_t i = 0; i < n; i++)
            s += (or[i] = exp(xr[i] - m));
        for (Py_ssize_t i = 0; i < n; i++)
            or[i] *= sc / s;
        or[t] -= sc;
    }
}

static void
ce_range32(void *c, int64_t a, int64_t b)
{
    ce_rows_f32(c, a, b);
}

static void
ce_range64(void *c, int64_t a, int64_t b)
{
    ce_rows_f64(c, a, b);
}

/* _grad_cross_entropy(grad, input, target, reduction, ignore_index): the gradient of
 * cross_entropy(input, target) for (N, C) logits and (N,) int64 class indices without
 * class weights or label smoothing (reduction 0 none, 1 mean, 2 sum); None when the
 * case does not apply (or a target is out of range: the formula raises). */
static PyObject *
grad_cross_entropy(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "_grad_cross_entropy takes 5 arguments");
    long reduction = PyLong_AsLong(args[3]);
    long long ignore = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (!fused_mode() || !em_Tensor_Check(args[1]) || !em_Tensor_Check(args[2]))
        Py_RETURN_NONE;
    em_Tensor *g = (em_Tensor *)args[0], *x = (em_Tensor *)args[1];
    em_Tensor *t = (em_Tensor *)args[2];
    if (!em_plain_float(args[0], x->dtype) || !em_plain_float(args[1], x->dtype) ||
        x->ndim != 2 ||
        em_is_meta(t) || t->dtype != EM_INT64 || t->ndim != 1 || t->sizes[0] != x->sizes[0] ||
        !PyArray_IS_C_CONTIGUOUS(t->array) || reduction < 0 || reduction > 2 ||
        (reduction == 0 ? g->ndim != 1 || g->sizes[0] != x->sizes[0] : g->ndim != 0) ||
        x->numel == 0)
        Py_RETURN_NONE;
    Py_ssize_t N = x->sizes[0], C = x->sizes[1];
    const int64_t *tv = PyArray_DATA(t->array);
    Py_ssize_t valid = 0;
    for (Py_ssize_t r = 0; r < N; r++) {
        if (tv[r] == ignore)
            continue;
        if (tv[r] < 0 || tv[r] >= C)
            Py_RETURN_NONE;
        valid++;
    }
    ce_ctx c = {PyArray_DATA(x->array), tv, NULL, 0.0, NULL, C, (int64_t)ignore};
    double *scale = NULL;
    if (reduction == 0) {
        scale = malloc(sizeof(double) * (size_t)N);
        if (scale == NULL)
            return PyErr_NoMemory();
        for (Py_ssize_t r = 0; r < N; r++)
            scale[r] = x->dtype == EM_FLOAT32 ? ((const float *)PyArray_DATA(g->array))[r]
                                              : ((const double *)PyArray_DATA(g->array))[r];
        c.scale = scale;
    }
    else {
        double gv = x->dtype == EM_FLOAT32 ? *(const float *)PyArray_DATA(g->array)
                                           : *(const double *)PyArray_DATA(g->array);
        /* every row ignored (valid == 0): every row's gradient is 0, as PyTorch's */
        c.s = reduction == 1 ? (valid ? gv / (double)valid : 0.0) : gv;
        if (x->dtype == EM_FLOAT32 && reduction == 1 && valid)  /* scaled in float32 */
            c.s = (float)gv * (float)(1.0 / (double)valid);
        else if (x->dtype == EM_FLOAT32)
            c.s = (float)c.s;
    }
    PyObject *out = run_into_new(x, &c.out, ce_range32, ce_range64, &c, N, C);
    free(scale);
    return out;
}

/* ------------------------------------------------------------------ embedding */

/* The weight's rows are cut in EMB_CHUNKS fixed blocks (fewer when it has fewer rows);
 * block c zeroes its rows, then adds into them the gradient rows whose index falls in
 * it, in order (order[start[c]..start[c + 1]): a stable counting sort of the rows by
 * block), so every element gets its additions in index order whatever thread runs the
 * block. Without the pool the blocks are one (all rows in order: the same sums). */
#define EMB_CHUNKS 64

typedef struct {
    const void *g;
    const int64_t *idx, *order, *start;
    void *out;
    Py_ssize_t d, vc, V;
    bool f32;
} emb_ctx;

#define EMB_ADD(T)                                                                       \
static void                                                                              \
emb_add_##T(const T *restrict g, const int64_t *idx, const int64_t *order, int64_t i0,   \
            int64_t i1, T *restrict out, Py_ssize_t d)                                    \
{                                                                                        \
    for (int64_t k = i0; k < i1; k++) {                                                  \
        int64_t i = order != NULL ? order[k] : k;                                        \
        const T *gr = g + i * d;                                                         \
        T *orow = out + idx[i] * d;                                                      \
        for (Py_ssize_t j = 0; j < d; j++)                                               \
            orow[j] += gr[j];                                                            \
    }                                                                                    \
}

EMB_ADD(float)
EMB_ADD(double)

/* blocks [a, b) of the weight's rows */
static void
emb_range(void *c, int64_t a, int64_t b)
{
    emb_ctx *p = c;
    size_t isz = p->f32 ? sizeof(float) : sizeof(double);
    for (int64_t blk = a; blk < b; blk++) {
        int64_t v0 = blk * p->vc, v1 = v0 + p->vc < p->V ? v0 + p->vc : p->V;
        memset((char *)p->out + (size_t)(v0 * p->d) * isz, 0, (size_t)((v1 - v0) * p->d) * isz);
        int64_t i0 = p->order != NULL ? p->start[blk] : 0;
        int64_t i1 = p->order != NULL ? p->start[blk + 1] : p->start[0];
        if (p->f32)
            emb_add_float(p->g, p->idx, p->order, i0, i1, p->out, p->d);
        else
            emb_add_double(p->g, p->idx, p->order, i0, i1, p->out, p->d);
    }
}

/* _grad_embedding(grad, indices, num_weights, padding_idx): the (num_weights, D)
 * gradient of embedding's weight: grad's rows added at their indices in order,
 * padding_idx's row (when >= 0) left zero; None when the case does not apply. */
static PyObject *
grad_embedding(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "_grad_embedding takes 4 arguments");
    Py_ssize_t V = PyLong_AsSsize_t(args[2]);
    long long pad = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (!fused_mode() || !em_Tensor_Check(args[0]) || !em_Tensor_Check(args[1]))
        Py_RETURN_NONE;
    em_Tensor *g = (em_Tensor *)args[0], *ix = (em_Tensor *)args[1];
    if (!em_plain_float(args[0], g->dtype) || em_is_meta(ix) || ix->dtype != EM_INT64 ||
        !PyArray_IS_C_CONTIGUOUS(ix->array) || g->ndim != ix->ndim + 1 || V < 0)
        Py_RETURN_NONE;
    for (int d = 0; d < ix->ndim; d++)
        if (g->sizes[d] != ix->sizes[d])
            Py_RETURN_NONE;
    Py_ssize_t D = g->sizes[g->ndim - 1], M = ix->numel;
    const int64_t *iv = PyArray_DATA(ix->array);
    for (Py_ssize_t i = 0; i < M; i++)
        if (iv[i] < 0 || iv[i] >= V)
            Py_RETURN_NONE;
    Py_ssize_t sz[2] = {V, D};
    em_Tensor *out = em_empty(2, sz, g->dtype, false);
    if (out == NULL)
        return NULL;
    if (M == 0 || D == 0 || V == 0) {
        memset(PyArray_DATA(out->array), 0, (size_t)PyArray_NBYTES(out->array));
        return (PyObject *)out;
    }
    int64_t start1[1] = {M};
    emb_ctx c = {PyArray_DATA(g->array), iv, NULL, start1, PyArray_DATA(out->array), D, V, V,
                 g->dtype == EM_FLOAT32};
    int64_t *order = NULL, *start = NULL, *fill = NULL, blocks = 1;
    double work = (double)(M + V) * (double)D;
    if (work >= EM_POOL_FROM && em_pool_threads() > 1 && V > 1) {
        c.vc = (V + EMB_CHUNKS - 1) / EMB_CHUNKS;
        blocks = (V + c.vc - 1) / c.vc;
        order = PyMem_Malloc(sizeof(int64_t) * (size_t)M);
        start = PyMem_Calloc((size_t)blocks + 1, sizeof(int64_t));
        fill = PyMem_Malloc(sizeof(int64_t) * (size_t)blocks);
        if (order == NULL || start == NULL || fill == NULL) {
            PyErr_NoMemory();
            goto error;
        }
        for (Py_ssize_t i = 0; i < M; i++)
            start[iv[i] / c.vc + 1]++;
        for (int64_t b = 0; b < blocks; b++)
            start[b + 1] += start[b];
        memcpy(fill, start, sizeof(int64_t) * (size_t)blocks);
        for (Py_ssize_t i = 0; i < M; i++)
            order[fill[iv[i] / c.vc]++] = i;
        c.order = order;
        c.start = start;
    }
    /* blocks of whole rows, each about an equal share of the work */
    if (em_run_chunked(emb_range, &c, blocks, (int64_t)(work / (double)blocks) + 1) < 0)
        goto error;
    PyMem_Free(order);
    PyMem_Free(start);
    PyMem_Free(fill);
    if (pad >= 0 && pad < V)
        memset((char *)PyArray_DATA(out->array) + pad * D * PyArray_ITEMSIZE(out->array), 0,
               (size_t)D * PyArray_ITEMSIZE(out->array));
    return (PyObject *)out;
error:
    PyMem_Free(order);
    PyMem_Free(start);
    PyMem_Free(fill);
    Py_DECREF(out);
    return NULL;
}

/* ------------------------------------------------------------------ batch_norm (backward) */

/* The gradients of training-mode batch normalisation of a contiguous (N, C, *) tensor:
 * channel c's values are N runs of S contiguous elements. Channels are the units of
 * work (each computed alone, in a fixed order). */
typedef struct {
    const void *x, *g, *w;
    void *gx, *gw, *gb;
    Py_ssize_t N, C, S;
    double eps;
} bn_ctx;

static void
bn_stats(const bn_ctx *p, Py_ssize_t c, bool f32, double *mean, double *rstd)
{
    double var;
    em_bn_stats_of(p->x, p->N, p->C, p->S, c, f32, p->eps, mean, &var, rstd);
}

EM_CLONES static void
bn_channel_f32(const bn_ctx *p, Py_ssize_t c)
{
    double md, rd;
    bn_stats(p, c, true, &md, &rd);
    float mean = (float)md, rstd = (float)rd;
    float w = p->w ? ((const float *)p->w)[c] : 1.0f;
    double sg = 0.0, sgx = 0.0;        /* sum(g), sum(g xhat) */
    for (Py_ssize_t n = 0; n < p->N; n++) {
        Py_ssize_t off = (n * p->C + c) * p->S;
        const float *restrict x = (const float *)p->x + off, *restrict g = (const float *)p->g + off;
        em_v16f l1 = {0}, l2 = {0};
        Py_ssize_t i = 0;
        for (; i + EM_LANES <= p->S; i += EM_LANES) {
            em_v16f gv, xv;
            memcpy(&gv, g + i, sizeof gv);
            memcpy(&xv, x + i, sizeof xv);
            l1 += gv;
            l2 += gv * ((xv - mean) * rstd);
        }
        float a1 = em_lanes_total(l1), a2 = em_lanes_total(l2);
        for (; i < p->S; i++) {
            a1 += g[i];
            a2 += g[i] * ((x[i] - mean) * rstd);
        }
        sg += a1;
        sgx += a2;
    }
    if (p->gw)
        ((float *)p->gw)[c] = (float)sgx;
    if (p->gb)
        ((float *)p->gb)[c] = (float)sg;
    if (p->gx) {
        double cnt = (double)(p->N * p->S);
        float m1 = (float)(w * sg / cnt), m2 = (float)(w * sgx / cnt);
        for (Py_ssize_t n = 0; n < p->N; n++) {
            Py_ssize_t off = (n * p->C + c) * p->S;
            const float *restrict x = (const float *)p->x + off;
            const float *restrict g = (const float *)p->g + off;
            float *restrict gx = (float *)p->gx + off;
            for (Py_ssize_t i = 0; i < p->S; i++)
                gx[i] = rstd * (g[i] * w - m1 - (x[i] - mean) * rstd * m2);
        }
    }
}

static void
bn_channel_f64(const bn_ctx *p, Py_ssize_t c)
{
    double mean, rstd;
    bn_stats(p, c, false, &mean, &rstd);
    double w = p->w ? ((const double *)p->w)[c] : 1.0;
    const double *x = p->x, *g = p->g;
    double sg = 0.0, sgx = 0.0;
    for (Py_ssize_t n = 0; n < p->N; n++) {
        Py_ssize_t off = (n * p->C + c) * p->S;
        for (Py_ssize_t i = 0; i < p->S; i++) {
            sg += g[off + i];
            sgx += g[off + i] * ((x[off + i] - mean) * rstd);
        }
    }
    if (p->gw)
        ((double *)p->gw)[c] = sgx;
    if (p->gb)
        ((double *)p->gb)[c] = sg;
    if (p->gx) {
        double cnt = (double)(p->N * p->S), m1 = w * sg / cnt, m2 = w * sgx / cnt;
        for (Py_ssize_t n = 0; n < p->N; n++) {
            Py_ssize_t off = (n * p->C + c) * p->S;
            for (Py_ssize_t i = 0; i < p->S; i++)
                ((double *)p->gx)[off + i] =
                    rstd * (g[off + i] * w - m1 - (x[off + i] - mean) * rstd * m2);
        }
    }
}

static void
bn_range32(void *c, int64_t a, int64_t b)
{
    for (int64_t k = a; k < b; k++)
        bn_channel_f32(c, k);
}

static void
bn_range64(void *c, int64_t a, int64_t b)
{
    for (int64_t k = a; k < b; k++)
        bn_channel_f64(c, k);
}

/* _grad_batch_norm_train(grad, input, weight, eps, want_input, want_weight, want_bias):
 * the gradients of training batch normalisation's output (statistics recomputed) as a
 * tuple (None for those not wanted); None when the case does not apply. */
static PyObject *
grad_batch_norm_train(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7)
        return PyErr_Format(PyExc_TypeError, "_grad_batch_norm_train takes 7 arguments");
    double eps = PyFloat_AsDouble(args[3]);
    int want[3];
    if (wanted(args + 4, want) < 0 || PyErr_Occurred())
        return NULL;
    em_Tensor *g = (em_Tensor *)args[0], *x = fused_operands(args[0], args[1]);
    if (x == NULL || x->ndim < 2 || x->numel == 0 || !em_bn_vector(args[2], x))
        Py_RETURN_NONE;
    Py_ssize_t N = x->sizes[0], C = x->sizes[1], S = x->numel / (N * C);
    em_Tensor *gx = NULL, *gw = NULL, *gb = NULL;
    if ((want[0] && (gx = em_empty_contiguous(x)) == NULL) ||
        (want[1] && (gw = em_empty(1, &C, x->dtype, false)) == NULL) ||
        (want[2] && (gb = em_empty(1, &C, x->dtype, false)) == NULL))
        goto error;
    bn_ctx c = {PyArray_DATA(x->array), PyArray_DATA(g->array),
                args[2] == Py_None ? NULL : PyArray_DATA(((em_Tensor *)args[2])->array),
                gx ? PyArray_DATA(gx->array) : NULL, gw ? PyArray_DATA(gw->array) : NULL,
                gb ? PyArray_DATA(gb->array) : NULL, N, C, S, eps};
    if (em_run_chunked(x->dtype == EM_FLOAT32 ? bn_range32 : bn_range64, &c, C, N * S) < 0)
        goto error;
    return grads_tuple(gx, gw, gb);
error:
    Py_XDECREF(gx);
    Py_XDECREF(gw);
    Py_XDECREF(gb);
    return NULL;
}

static PyObject *
conv_loops_level(PyObject *mod, PyObject *noargs)
{
    return PyLong_FromLong(em_conv_cpu_level());
}

static PyMethodDef nn_grad_methods[] = {
    {"_grad_pointwise", (PyCFunction)(void (*)(void))grad_pointwise, METH_FASTCALL,
     "_grad_pointwise(kind, grad, self): silu (0), gelu (1), gelu tanh (2) gradients."},
    {"_grad_softmax", (PyCFunction)(void (*)(void))grad_softmax, METH_FASTCALL,
     "_grad_softmax(grad, result, log): softmax/log_softmax's last-dim gradient."},
    {"_grad_layer_norm", (PyCFunction)(void (*)(void))grad_layer_norm, METH_FASTCALL,
     "_grad_layer_norm(grad, input, k, weight, eps, want_input, want_weight, want_bias)."},
    {"_grad_cross_entropy", (PyCFunction)(void (*)(void))grad_cross_entropy, METH_FASTCALL,
     "_grad_cross_entropy(grad, input, target, reduction, ignore_index)."},
    {"_grad_embedding", (PyCFunction)(void (*)(void))grad_embedding, METH_FASTCALL,
     "_grad_embedding(grad, indices, num_weights, padding_idx)."},
    {"_grad_batch_norm_train", (PyCFunction)(void (*)(void))grad_batch_norm_train,
     METH_FASTCALL,
     "_grad_batch_norm_train(grad, input, weight, eps, want_input, want_weight, want_bias)."},
    {"_grad_conv_weight", (PyCFunction)(void (*)(void))em_grad_conv_weight, METH_FASTCALL,
     "_grad_conv_weight(input, grad_output, kh, kw, stride, padding, dilation, groups): "
     "a 2-d convolution's weight gradient (conv.c)."},
    {"_conv_loops_level", (PyCFunction)(void (*)(void))conv_loops_level, METH_NOARGS,
     "_conv_loops_level(): the eager convolution loops' path: 2 AVX-512, 1 AVX2+FMA, 0 "
     "generic (the host's, narrowed by EMBER_LLVM_FEATURES)."},
    {NULL},
};

int
em_nn_grad_init(PyObject *module)
{
    return PyModule_AddFunctions(module, nn_grad_methods);
}
