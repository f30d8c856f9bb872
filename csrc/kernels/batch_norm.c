/* batch_norm.c: batch_norm's eager forward, the kernel of
 * _native_batch_norm_legit_functional (python/ember/ops/nn_ops.py), and the per-channel
 * statistics its fused backward (nn_grad.c, _C._grad_batch_norm_train) recomputes.
 *
 * For contiguous float32/float64 (N, C, *) inputs whose weight, bias and running
 * statistics (each optional) are contiguous (C,) tensors of the input's dtype: evaluation
 * (the running statistics normalise), training without running statistics, and training
 * that updates them (the new running statistics, momentum-weighted with the batch's
 * mean and unbiased variance, in the same pass). Every other case (strided, empty or
 * half inputs, one value per channel, statistics of another dtype) runs the op's
 * decomposition, errors included.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "no-trapping-math", "no-math-errno", "fp-contract=fast")
#endif
#include "kutil.h"
#include "runtime/runtime.h"
#include <math.h>
#include <stdlib.h>

/* Channel c's mean, biased variance and rstd (sums in double; float32 runs in
 * em_lane_sum_f32's lanes) of the contiguous (N, C, S) x: what the forward kernel
 * saves and the fused backward (nn_grad.c) recomputes. */
EM_CLONES void
em_bn_stats_of(const void *x, Py_ssize_t N, Py_ssize_t C, Py_ssize_t S, Py_ssize_t c, bool f32,
            double eps, double *mean, double *var, double *rstd)
{
    double s = 0.0, q = 0.0, cnt = (double)(N * S);
    for (Py_ssize_t n = 0; n < N; n++) {
        Py_ssize_t off = (n * C + c) * S;
        if (f32)
            s += em_lane_sum_f32((const float *)x + off, S, 0.0f, 0);
        else
            for (Py_ssize_t i = 0; i < S; i++)
                s += ((const double *)x)[off + i];
    }
    double m = s / cnt;
    for (Py_ssize_t n = 0; n < N; n++) {
        Py_ssize_t off = (n * C + c) * S;
        if (f32)
            q += em_lane_sum_f32((const float *)x + off, S, (float)m, 1);
        else
            for (Py_ssize_t i = 0; i < S; i++) {
                double d = ((const double *)x)[off + i] - m;
                q += d * d;
            }
    }
    *mean = m;
    *var = q / cnt;
    *rstd = 1.0 / sqrt(q / cnt + eps);
}


/* The forward for the cases above: y = ((x - mean) rstd) w + b, with the batch's mean and
 * rstd in training (sums in double in a fixed order, as the fused backward recomputes
 * them), the running statistics' in evaluation. Training with running statistics also
 * writes, per channel, new_mean = (1 - momentum) running_mean + momentum mean and
 * new_var = (1 - momentum) running_var + momentum var n / (n - 1) (the unbiased
 * variance, n values per channel), computed in double and rounded once. Channels are the
 * units of work (em_run_chunked's items), each computed alone, so results are identical
 * at every thread count and run to run. */
typedef struct {
    const void *x, *w, *b, *rm, *rv;
    void *y, *nm, *nv;             /* nm, nv: the new running statistics (or NULL) */
    double *mean, *rstd;           /* per channel, the saved statistics */
    Py_ssize_t N, C, S;
    double eps, momentum;
    bool training;
} bnf_ctx;

/* channel c's statistics (training: the batch's, with the running update when asked;
 * evaluation: the running ones) */
static void
bnf_stats(const bnf_ctx *p, Py_ssize_t c, bool f32, double *mean, double *rstd)
{
    if (!p->training) {
        *mean = f32 ? ((const float *)p->rm)[c] : ((const double *)p->rm)[c];
        double v = f32 ? ((const float *)p->rv)[c] : ((const double *)p->rv)[c];
        *rstd = 1.0 / sqrt(v + p->eps);
        return;
    }
    double var;
    em_bn_stats_of(p->x, p->N, p->C, p->S, c, f32, p->eps, mean, &var, rstd);
    if (p->nm == NULL)
        return;
    double n = (double)(p->N * p->S), m = p->momentum;
    double unbiased = var * n / (n - 1.0);
    if (f32) {
        ((float *)p->nm)[c] = (float)((1.0 - m) * ((const float *)p->rm)[c] + m * *mean);
        ((float *)p->nv)[c] = (float)((1.0 - m) * ((const float *)p->rv)[c] + m * unbiased);
    }
    else {
        ((double *)p->nm)[c] = (1.0 - m) * ((const double *)p->rm)[c] + m * *mean;
        ((double *)p->nv)[c] = (1.0 - m) * ((const double *)p->rv)[c] + m * unbiased;
    }
}

/* The forward of channels [lo, hi) in T (float: the statistics rounded to float, as
 * saved), one function per dtype. */
#define BNF_RANGE(NAME, T)                                                               \
    static void NAME(void *ctx, int64_t lo, int64_t hi)                                  \
    {                                                                                    \
        const bnf_ctx *p = ctx;                                                          \
        for (Py_ssize_t c = lo; c < hi; c++) {                                           \
            double md, rd;                                                               \
            bnf_stats(p, c, sizeof(T) == sizeof(float), &md, &rd);                       \
            T mean = (T)md, rstd = (T)rd;                                                \
            T w = p->w ? ((const T *)p->w)[c] : (T)1, b = p->b ? ((const T *)p->b)[c] : (T)0; \
            for (Py_ssize_t n = 0; n < p->N; n++) {                                      \
                Py_ssize_t off = (n * p->C + c) * p->S;                                  \
                const T *restrict x = (const T *)p->x + off;                             \
                T *restrict y = (T *)p->y + off;                                         \
                for (Py_ssize_t i = 0; i < p->S; i++)                                    \
                    y[i] = (x[i] - mean) * rstd * w + b;                                 \
            }                                                                            \
            p->mean[c] = mean;                                                           \
            p->rstd[c] = rstd;                                                           \
        }                                                                                \
    }
EM_CLONES BNF_RANGE(bnf_range32, float)
BNF_RANGE(bnf_range64, double)

bool
em_bn_vector(PyObject *o, em_Tensor *x)
{
    return o == Py_None ||
           (em_plain_float(o, x->dtype) && ((em_Tensor *)o)->ndim == 1 &&
            ((em_Tensor *)o)->sizes[0] == x->sizes[1]);
}

/* a (C,) vector of x's dtype (or None): its data, or NULL; *ok false when o does not fit */
static const void *
bnf_vector(PyObject *o, em_Tensor *x, bool *ok)
{
    if (!em_bn_vector(o, x))
        *ok = false;
    return o == Py_None || !*ok ? NULL : PyArray_DATA(((em_Tensor *)o)->array);
}

/* A new (C,) tensor of dtype dt: the C doubles v rounded (v not NULL), a copy of src's C
 * values (src not NULL), or uninitialised. */
static em_Tensor *
bnf_channels(Py_ssize_t C, em_dtype_t dt, const double *v, const void *src)
{
    em_Tensor *t = em_empty(1, &C, dt, false);
    if (t == NULL)
        return NULL;
    void *d = PyArray_DATA(t->array);
    if (src != NULL)
        memcpy(d, src, (size_t)C * (dt == EM_FLOAT32 ? sizeof(float) : sizeof(double)));
    else if (v != NULL)
        for (Py_ssize_t c = 0; c < C; c++) {
            if (dt == EM_FLOAT32)
                ((float *)d)[c] = (float)v[c];
            else
                ((double *)d)[c] = v[c];
        }
    return t;
}

/* _native_batch_norm_legit_functional(input, weight, bias, running_mean, running_var,
 * training, momentum, eps) -> (output, mean, rstd, new_running_mean, new_running_var):
 * the cases above here, the decomposition otherwise (errors included). */
PyObject *
em_batch_norm_kernel(em_Op *op, PyObject **args)
{
    em_Tensor *x = (em_Tensor *)args[0];
    int training = PyObject_IsTrue(args[5]);
    double momentum = PyFloat_AsDouble(args[6]);
    double eps = PyFloat_AsDouble(args[7]);
    if (training < 0 || PyErr_Occurred())
        return NULL;
    bool ok = em_tls.mode != EM_MODE_META && em_Tensor_Check(args[0]) &&
              em_plain_float(args[0], x->dtype) && x->ndim >= 2 && x->numel > 0;
    const void *w = NULL, *b = NULL, *rm = NULL, *rv = NULL;
    if (ok) {
        w = bnf_vector(args[1], x, &ok);
        b = bnf_vector(args[2], x, &ok);
        rm = bnf_vector(args[3], x, &ok);
        rv = bnf_vector(args[4], x, &ok);
    }
    Py_ssize_t N = ok ? x->sizes[0] : 0, C = ok ? x->sizes[1] : 0;
    Py_ssize_t S = ok ? x->numel / (N * C) : 0;
    /* the decomposition raises for missing running statistics in evaluation; running
     * statistics come in pairs; one value per channel has no unbiased variance (the
     * decomposition's inf) */
    if (!ok || (rm == NULL) != (rv == NULL) || (training ? N * S <= 1 : rm == NULL))
        return em_decomposed_kernel(op, args);
    em_Tensor *y = NULL, *tm = NULL, *tr = NULL, *nm = NULL, *nv = NULL;
    double *st = malloc(sizeof(double) * 2 * (size_t)C);
    if (st == NULL)
        return PyErr_NoMemory();
    bnf_ctx c = {PyArray_DATA(x->array), w, b, rm, rv, NULL, NULL, NULL, st, st + C, N, C, S,
                 eps, momentum, training != 0};
    if ((y = em_empty_contiguous(x)) == NULL)
        goto error;
    c.y = PyArray_DATA(y->array);
    if (training && rm != NULL) {        /* the new running statistics, filled per channel */
        if ((nm = bnf_channels(C, x->dtype, NULL, NULL)) == NULL ||
            (nv = bnf_channels(C, x->dtype, NULL, NULL)) == NULL)
            goto error;
        c.nm = PyArray_DATA(nm->array);
        c.nv = PyArray_DATA(nv->array);
    }
    if (em_run_chunked(x->dtype == EM_FLOAT32 ? bnf_range32 : bnf_range64, &c, C, N * S) < 0)
        goto error;
    if ((tm = bnf_channels(C, x->dtype, c.mean, NULL)) == NULL ||
        (tr = bnf_channels(C, x->dtype, c.rstd, NULL)) == NULL)
        goto error;
    if (!training) {
        nm = bnf_channels(C, x->dtype, NULL, rm);
        nv = nm ? bnf_channels(C, x->dtype, NULL, rv) : NULL;
    }
    else if (rm == NULL) {   /* two results: one tensor twice would say they share memory */
        Py_ssize_t zero = 0;
        nm = em_empty(1, &zero, x->dtype, false);
        nv = nm ? em_empty(1, &zero, x->dtype, false) : NULL;
    }
    if (nv == NULL)
        goto error;
    free(st);
    PyObject *r = PyTuple_Pack(5, y, tm, tr, nm, nv);
    Py_DECREF(y);
    Py_DECREF(tm);
    Py_DECREF(tr);
    Py_DECREF(nm);
    Py_DECREF(nv);
    return r;
error:
    free(st);
    Py_XDECREF(y);
    Py_XDECREF(tm);
    Py_XDECREF(tr);
    Py_XDECREF(nm);
    Py_XDECREF(nv);
    return NULL;
}
