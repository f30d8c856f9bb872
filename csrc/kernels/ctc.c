/* ctc.c: the connectionist temporal classification loss (python/ember/ops/ctc.py):
 *
 *   _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)
 *       -> (neg_log_likelihood (N,), log_alpha (N, T, 2 max(target_lengths) + 1))
 *   _ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths,
 *                      neg_log_likelihood, log_alpha, blank, zero_infinity) -> (T, N, C)
 *
 * log_probs is (T, N, C) float32/float64; targets (N, S) padded or the targets of all
 * samples concatenated (1-d), int32 or int64. Sample b's extended label sequence l' puts
 * the blank before, between and after its L = target_lengths[b] labels (2L + 1 states);
 * the forward variable alpha_t(s), the log-probability of the prefixes of l' ending in
 * state s after t + 1 frames, follows alpha_t(s) = lp_t(l'_s) + logsumexp(alpha_{t-1}(s),
 * alpha_{t-1}(s - 1), alpha_{t-1}(s - 2) when l'_s is a label unlike l'_{s-2}), and the
 * loss is -logsumexp of the last two states at the last frame (Graves et al., 2006).
 * The backward variable beta runs the same recursion from the end; the gradient is
 * PyTorch's: exp(lp_t(c)) - exp(logsumexp_{s: l'_s = c}(alpha_t(s) + beta_t(s)) + nll -
 * lp_t(c)), times the loss's gradient (the derivative through a log_softmax that made
 * log_probs: it sums to zero over c), zero for frames past the input length, and zero
 * for a sample whose loss is infinite when zero_infinity.
 *
 * Everything is computed in log space in double (float32 inputs read and their results
 * rounded once); log_alpha is -inf outside each sample's frames and states. The backward
 * reads the saved loss and log_alpha (as PyTorch's) and keeps two rows of beta.
 * Samples are the units of work on the pool, each computed alone, so results are the same
 * at every thread count.
 */
#include "kutil.h"
#include "runtime/runtime.h"
#include <math.h>
#include <stdlib.h>

static const char CTC[] = "ctc_loss_allocate_outputs";

typedef struct {
    const char *lp;                /* (T, N, C) contiguous */
    bool f32;
    const char *tg;                /* targets, contiguous */
    bool tg64;
    const Py_ssize_t *tg_start;    /* per sample: its first target */
    const Py_ssize_t *il, *tl;     /* input and target lengths */
    Py_ssize_t T, N, C, S2;        /* S2: log_alpha's last size */
    Py_ssize_t blank;
    bool zero_infinity;
    void *nll, *la;                /* forward: its results; backward: the saved ones */
    const double *grad;            /* backward: the loss's gradient per sample */
    void *gx;                      /* backward result (T, N, C) */
    int failed;                    /* set when a sample's scratch could not be allocated */
} ctc_ctx;

static inline double
lp_at(const ctc_ctx *p, Py_ssize_t t, Py_ssize_t b, Py_ssize_t c)
{
    Py_ssize_t i = (t * p->N + b) * p->C + c;
    return p->f32 ? (double)((const float *)p->lp)[i] : ((const double *)p->lp)[i];
}

/* sample b's extended labels (blank, l1, blank, ..., lL, blank) into ext and, per state,
 * whether it may be entered from two states back (a label unlike the one before it) */
static void
extend(const ctc_ctx *p, Py_ssize_t b, Py_ssize_t *ext, char *skip)
{
    Py_ssize_t S = 2 * p->tl[b] + 1;
    for (Py_ssize_t s = 0; s < S; s++) {
        Py_ssize_t i = p->tg_start[b] + s / 2;
        ext[s] = s % 2 == 0 ? p->blank
                            : p->tg64 ? (Py_ssize_t)((const int64_t *)p->tg)[i]
                                      : (Py_ssize_t)((const int32_t *)p->tg)[i];
        skip[s] = s >= 2 && s % 2 == 1 && ext[s] != ext[s - 2];
    }
}

/* log(exp(a) + exp(b)) and of three terms: one exp per term but the largest */
static inline double
lse2(double a, double b)
{
    double m = a > b ? a : b, o = a > b ? b : a;
    if (m == -INFINITY)
        return -INFINITY;
    return m + log1p(exp(o - m));
}

static inline double
lse3(double a, double b, double c)
{
    double m = a > b ? a : b;
    m = m > c ? m : c;
    if (m == -INFINITY)
        return -INFINITY;
    return m + log(exp(a - m) + exp(b - m) + exp(c - m));
}

/* value v into element i of p's float32 (f32) or float64 result at base */
static inline void
put(void *base, Py_ssize_t i, bool f32, double v)
{
    if (f32)
        ((float *)base)[i] = (float)v;
    else
        ((double *)base)[i] = v;
}

/* One frame of the recursion, alpha's (d = -1: from the frame before) or beta's (d = 1:
 * from the frame after) over the S states: to[s] = lpx[s] + logsumexp(from[s],
 * from[s + d] when it is a state, from[s + 2d] when the state between may be skipped:
 * skip[s] going forward, skip[s + 2] backward). */
static void
recursion_step(const double *from, double *to, const double *lpx, const char *skip,
               Py_ssize_t S, Py_ssize_t d)
{
    for (Py_ssize_t s = 0; s < S; s++) {
        Py_ssize_t s1 = s + d, s2 = s + 2 * d;
        double v;
        if (s2 >= 0 && s2 < S && skip[d < 0 ? s : s2])
            v = lse3(from[s], from[s1], from[s2]);
        else if (s1 >= 0 && s1 < S)
            v = lse2(from[s], from[s1]);
        else
            v = from[s];
        to[s] = v + lpx[s];
    }
}

/* frame t's log-probabilities of sample b's extended labels */
static void
gather_frame(const ctc_ctx *p, Py_ssize_t t, Py_ssize_t b, const Py_ssize_t *ext, Py_ssize_t S,
             double *lpx)
{
    for (Py_ssize_t s = 0; s < S; s++)
        lpx[s] = lp_at(p, t, b, ext[s]);
}

/* alpha (Tb rows of S states, Tb = input length) of sample b into a (scratch lpx of S);
 * the negative log likelihood returned */
static double
forward_sample(const ctc_ctx *p, Py_ssize_t b, const Py_ssize_t *ext, const char *skip,
               double *lpx, double *a)
{
    Py_ssize_t Tb = p->il[b], S = 2 * p->tl[b] + 1;
    if (Tb == 0)
        return p->tl[b] == 0 ? 0.0 : INFINITY;
    gather_frame(p, 0, b, ext, S, lpx);
    for (Py_ssize_t s = 0; s < S; s++)
        a[s] = s < 2 ? lpx[s] : -INFINITY;
    for (Py_ssize_t t = 1; t < Tb; t++) {
        gather_frame(p, t, b, ext, S, lpx);
        recursion_step(a + (t - 1) * S, a + t * S, lpx, skip, S, -1);
    }
    const double *last = a + (Tb - 1) * S;
    return -(S >= 2 ? lse2(last[S - 1], last[S - 2]) : last[S - 1]);
}

/* per-sample scratch: ext and skip (S each), lpx (S) and the rows (cells doubles) */
typedef struct {
    Py_ssize_t *ext;
    char *skip;
    double *lpx, *rows;
} ctc_scratch;

static int
scratch_new(ctc_scratch *w, Py_ssize_t S, size_t cells)
{
    w->ext = malloc(sizeof(Py_ssize_t) * (size_t)S);
    w->skip = malloc((size_t)S);
    w->lpx = malloc(sizeof(double) * ((size_t)S + cells));
    w->rows = w->lpx ? w->lpx + S : NULL;
    return w->ext && w->skip && w->lpx ? 0 : -1;
}

static void
scratch_free(ctc_scratch *w)
{
    free(w->ext);
    free(w->skip);
    free(w->lpx);
}

static void
forward_range(void *c, int64_t lo, int64_t hi)
{
    ctc_ctx *p = c;
    for (int64_t b = lo; b < hi; b++) {
        Py_ssize_t Tb = p->il[b], S = 2 * p->tl[b] + 1;
        ctc_scratch w;
        if (scratch_new(&w, S, (size_t)(Tb > 0 ? Tb : 1) * (size_t)S) < 0) {
            scratch_free(&w);
            p->failed = 1;
            return;
        }
        extend(p, b, w.ext, w.skip);
        double nll = forward_sample(p, b, w.ext, w.skip, w.lpx, w.rows);
        for (Py_ssize_t t = 0; t < p->T; t++)
            for (Py_ssize_t s = 0; s < p->S2; s++)
                put(p->la, (b * p->T + t) * p->S2 + s, p->f32,
                    t < Tb && s < S ? w.rows[t * S + s] : -INFINITY);
        put(p->nll, b, p->f32, nll);
        scratch_free(&w);
    }
}

/* the saved log_alpha of sample b at (t, s) and its saved loss */
static inline double
alpha_at(const ctc_ctx *p, Py_ssize_t b, Py_ssize_t t, Py_ssize_t s)
{
    Py_ssize_t i = (b * p->T + t) * p->S2 + s;
    return p->f32 ? (double)((const float *)p->la)[i] : ((const double *)p->la)[i];
}

static void
backward_range(void *c, int64_t lo, int64_t hi)
{
    ctc_ctx *p = c;
    for (int64_t b = lo; b < hi; b++) {
        Py_ssize_t Tb = p->il[b], S = 2 * p->tl[b] + 1, C = p->C;
        ctc_scratch w;
        /* rows: beta (two rows, S each) and the per-class sums (C) */
        if (scratch_new(&w, S, 2 * (size_t)S + (size_t)C) < 0) {
            scratch_free(&w);
            p->failed = 1;
            return;
        }
        extend(p, b, w.ext, w.skip);
        double *next = w.rows, *cur = next + S, *lcab = cur + S;
        double nll = p->f32 ? (double)((const float *)p->nll)[b] : ((const double *)p->nll)[b];
        double g = p->grad[b];
        bool zero = Tb == 0 || (p->zero_infinity && nll == INFINITY);
        /* frames past the input length (and every frame of a zeroed sample) get 0 */
        for (Py_ssize_t t = zero ? 0 : Tb; t < p->T; t++)
            for (Py_ssize_t k = 0; k < C; k++)
                put(p->gx, (t * p->N + b) * C + k, p->f32, 0.0);
        for (Py_ssize_t t = zero ? -1 : Tb - 1; t >= 0; t--) {
            /* beta at frame t, from the frame after it */
            gather_frame(p, t, b, w.ext, S, w.lpx);
            if (t == Tb - 1)
                for (Py_ssize_t s = 0; s < S; s++)
                    cur[s] = (s >= S - 2 ? 0.0 : -INFINITY) + w.lpx[s];
            else
                recursion_step(next, cur, w.lpx, w.skip, S, 1);
            for (Py_ssize_t k = 0; k < C; k++)
                lcab[k] = -INFINITY;
            for (Py_ssize_t s = 0; s < S; s++) {
                Py_ssize_t k = w.ext[s];
                lcab[k] = lse2(lcab[k], alpha_at(p, b, t, s) + cur[s]);
            }
            for (Py_ssize_t k = 0; k < C; k++) {
                double lp = lp_at(p, t, b, k);
                put(p->gx, (t * p->N + b) * C + k, p->f32,
                    (exp(lp) - exp(lcab[k] + nll - lp)) * g);
            }
            double *tmp = next;
            next = cur;
            cur = tmp;
        }
        scratch_free(&w);
    }
}

/* The checks and the arguments common to both kernels, in PyTorch's order (its
 * messages): log_probs, targets, lengths, blank. Fills p (but the data pointers) and
 * the per-sample lengths and target starts (3 * N values in *lens, freed by the caller). */
static int
read_args(em_Tensor *lp, PyObject *targets, PyObject *il, PyObject *tl, PyObject *blank,
          ctc_ctx *p, Py_ssize_t **lens)
{
    *lens = NULL;
    if (lp->dtype != EM_FLOAT32 && lp->dtype != EM_FLOAT64) {
        PyErr_Format(PyExc_NotImplementedError, "\"ctc_loss_cpu\" not implemented for '%s'",
                     em_dtype_torch_name(lp->dtype));
        return -1;
    }
    em_Tensor *tg = (em_Tensor *)targets;
    if (tg->dtype != EM_INT64 && tg->dtype != EM_INT32) {
        PyErr_Format(PyExc_RuntimeError, "Expected tensor for argument #2 'targets' to have "
                     "scalar type Int; but got torch.%sTensor instead (while checking "
                     "arguments for %s)", em_dtype_torch_name(tg->dtype), CTC);
        return -1;
    }
    if (lp->ndim != 3) {
        PyErr_Format(PyExc_RuntimeError, "Expected 3-dimensional tensor, but got "
                     "%d-dimensional tensor for argument #1 'log_probs' (while checking "
                     "arguments for %s)", lp->ndim, CTC);
        return -1;
    }
    p->T = lp->sizes[0];
    p->N = lp->sizes[1];
    p->C = lp->sizes[2];
    p->blank = PyLong_AsSsize_t(blank);
    if (p->blank == -1 && PyErr_Occurred())
        return -1;
    if (p->blank < 0 || p->blank >= p->C) {
        PyErr_SetString(PyExc_RuntimeError, "blank must be in label range");
        return -1;
    }
    PyObject *fi = PySequence_Fast(il, "input_lengths must be a list of ints");
    PyObject *ft = fi ? PySequence_Fast(tl, "target_lengths must be a list of ints") : NULL;
    Py_ssize_t N = p->N;
    if (ft == NULL)
        goto error;
    if (PySequence_Fast_GET_SIZE(fi) != N) {
        PyErr_SetString(PyExc_RuntimeError, "input_lengths must be of size batch_size");
        goto error;
    }
    if (PySequence_Fast_GET_SIZE(ft) != N) {
        PyErr_SetString(PyExc_RuntimeError, "target_lengths must be of size batch_size");
        goto error;
    }
    Py_ssize_t *v = *lens = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(3 * N + 1));
    if (v == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    Py_ssize_t *ilv = v, *tlv = v + N, *start = v + 2 * N, maxl = 0, pos = 0;
    for (Py_ssize_t b = 0; b < N; b++) {
        ilv[b] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fi, b));
        tlv[b] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(ft, b));
        if (PyErr_Occurred())
            goto error;
    }
    for (Py_ssize_t b = 0; b < N; b++) {
        if (tlv[b] < 0) {
            PyErr_Format(PyExc_RuntimeError, "Expected target_lengths to have value at least "
                         "0, but got value %zd (while checking arguments for %s)", tlv[b], CTC);
            goto error;
        }
        maxl = tlv[b] > maxl ? tlv[b] : maxl;
        start[b] = tg->ndim == 1 ? pos : b * (tg->ndim == 2 ? tg->sizes[1] : 0);
        pos += tlv[b];
    }
    if (tg->ndim == 1) {
        if (tg->sizes[0] != pos) {
            PyErr_Format(PyExc_RuntimeError, "Expected tensor to have size %zd at dimension 0, "
                         "but got size %zd for argument #2 'targets' (while checking arguments "
                         "for %s)", pos, tg->sizes[0], CTC);
            goto error;
        }
    }
    else if (tg->ndim == 2) {
        if (tg->sizes[0] != N) {
            PyErr_Format(PyExc_RuntimeError, "Expected tensor to have size %zd at dimension 0, "
                         "but got size %zd for argument #2 'targets' (while checking arguments "
                         "for %s)", N, tg->sizes[0], CTC);
            goto error;
        }
        if (tg->sizes[1] < maxl) {
            PyErr_Format(PyExc_RuntimeError, "Expected tensor to have size at least %zd at "
                         "dimension 1, but got size %zd for argument #2 'targets' (while "
                         "checking arguments for %s)", maxl, tg->sizes[1], CTC);
            goto error;
        }
    }
    else {
        PyErr_Format(PyExc_RuntimeError, "ctc_loss: targets must be 1-d or 2-d, but got "
                     "%d-dimensional targets", tg->ndim);
        goto error;
    }
    for (Py_ssize_t b = 0; b < N; b++) {
        if (ilv[b] < 0 || ilv[b] > p->T) {
            PyErr_Format(PyExc_RuntimeError, "Expected input_lengths to have value at %s %zd, "
                         "but got value %zd (while checking arguments for %s)",
                         ilv[b] < 0 ? "least" : "most", ilv[b] < 0 ? (Py_ssize_t)0 : p->T,
                         ilv[b], CTC);
            goto error;
        }
    }
    p->il = ilv;
    p->tl = tlv;
    p->tg_start = start;
    p->S2 = 2 * maxl + 1;
    p->f32 = lp->dtype == EM_FLOAT32;
    p->tg64 = tg->dtype == EM_INT64;
    Py_DECREF(fi);
    Py_DECREF(ft);
    return 0;
error:
    Py_XDECREF(fi);
    Py_XDECREF(ft);
    PyMem_Free(*lens);
    *lens = NULL;
    return -1;
}

/* The arrays a kernel reads its operands' contiguous data from (new references, or
 * NULL), released together. */
enum { HOLD_LP, HOLD_TG, HOLD_NLL, HOLD_LA, HOLD_GRAD, N_HOLD };

/* the contiguous NumPy data of t (a new reference in *hold) */
static const char *
data_of(em_Tensor *t, PyArrayObject **hold)
{
    *hold = (PyArrayObject *)PyArray_GETCONTIGUOUS(t->array);
    return *hold == NULL ? NULL : PyArray_BYTES(*hold);
}

/* p's log_probs and targets (and zero_infinity zi), what both kernels read: 0, or -1
 * with an exception */
static int
bind_inputs(ctc_ctx *p, em_Tensor *lp, em_Tensor *tg, int zi, PyArrayObject **hold)
{
    p->zero_infinity = zi;
    if ((p->lp = data_of(lp, &hold[HOLD_LP])) == NULL ||
        (p->tg = data_of(tg, &hold[HOLD_TG])) == NULL)
        return -1;
    return 0;
}

static void
release(PyArrayObject **hold, Py_ssize_t *lens)
{
    for (int i = 0; i < N_HOLD; i++)
        Py_XDECREF(hold[i]);
    PyMem_Free(lens);
}

static int
run(em_range_fn fn, ctc_ctx *p)
{
    if (p->N == 0)
        return 0;
    if (em_parallel_for(fn, p, p->N, 1, p->N > 1 && em_pool_threads() > 1) < 0)
        return -1;
    if (p->failed) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static PyObject *
k_ctc_loss(em_Op *op, PyObject **args)
{
    em_Tensor *lp = (em_Tensor *)args[0], *tg = (em_Tensor *)args[1];
    ctc_ctx p = {0};
    Py_ssize_t *lens = NULL;
    em_Tensor *nll = NULL, *la = NULL;
    PyArrayObject *hold[N_HOLD] = {NULL};
    int zi = PyObject_IsTrue(args[5]);
    if (zi < 0 || read_args(lp, args[1], args[2], args[3], args[4], &p, &lens) < 0)
        return NULL;
    bool meta = em_meta_of(lp) || em_is_meta(tg);
    Py_ssize_t lsz[3] = {p.N, p.T, p.S2};
    if ((nll = em_empty(1, &p.N, lp->dtype, meta)) == NULL ||
        (la = em_empty(3, lsz, lp->dtype, meta)) == NULL)
        goto error;
    if (!meta) {
        if (bind_inputs(&p, lp, tg, zi, hold) < 0)
            goto error;
        p.nll = PyArray_DATA(nll->array);
        p.la = PyArray_DATA(la->array);
        if (run(forward_range, &p) < 0)
            goto error;
    }
    release(hold, lens);
    PyObject *r = PyTuple_Pack(2, nll, la);
    Py_DECREF(nll);
    Py_DECREF(la);
    return r;
error:
    release(hold, lens);
    Py_XDECREF(nll);
    Py_XDECREF(la);
    return NULL;
}

static PyObject *
k_ctc_loss_backward(em_Op *op, PyObject **args)
{
    em_Tensor *g = (em_Tensor *)args[0], *lp = (em_Tensor *)args[1], *tg = (em_Tensor *)args[2];
    ctc_ctx p = {0};
    Py_ssize_t *lens = NULL;
    em_Tensor *gx = NULL;
    PyArrayObject *hold[N_HOLD] = {NULL};
    int zi = PyObject_IsTrue(args[8]);
    if (zi < 0 || read_args(lp, args[2], args[3], args[4], args[7], &p, &lens) < 0)
        return NULL;
    em_Tensor *nll = (em_Tensor *)args[5], *la = (em_Tensor *)args[6];
    Py_ssize_t lsz[3] = {p.N, p.T, p.S2};
    if (g->ndim != 1 || g->sizes[0] != p.N || nll->ndim != 1 || nll->sizes[0] != p.N ||
        nll->dtype != lp->dtype || la->ndim != 3 || la->dtype != lp->dtype ||
        la->sizes[0] != p.N || la->sizes[1] != p.T || la->sizes[2] != p.S2) {
        PyErr_Format(PyExc_RuntimeError, "_ctc_loss_backward: expected grad and "
                     "neg_log_likelihood of shape [%zd] and log_alpha of shape %s (of "
                     "log_probs' dtype), got %s, %s and %s", p.N, em_shape_s(3, lsz),
                     em_tshape(g), em_tshape(nll), em_tshape(la));
        goto error;
    }
    bool meta = em_meta_of(lp) || em_is_meta(tg) || em_is_meta(g) || em_is_meta(nll) ||
                em_is_meta(la);
    if ((gx = em_empty(3, lp->sizes, lp->dtype, meta)) == NULL)
        goto error;
    if (!meta) {
        if (bind_inputs(&p, lp, tg, zi, hold) < 0 ||
            (p.nll = (void *)data_of(nll, &hold[HOLD_NLL])) == NULL ||
            (p.la = (void *)data_of(la, &hold[HOLD_LA])) == NULL)
            goto error;
        hold[HOLD_GRAD] = (PyArrayObject *)PyArray_FromAny(
            (PyObject *)g->array, PyArray_DescrFromType(NPY_DOUBLE), 1, 1,
            NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_FORCECAST, NULL);
        if (hold[HOLD_GRAD] == NULL)
            goto error;
        p.grad = PyArray_DATA(hold[HOLD_GRAD]);
        p.gx = PyArray_DATA(gx->array);
        if (run(backward_range, &p) < 0)
            goto error;
    }
    release(hold, lens);
    return (PyObject *)gx;
error:
    release(hold, lens);
    Py_XDECREF(gx);
    return NULL;
}

const em_KernelEntry em_ctc_kernels[] = {
    {"ctc_loss", k_ctc_loss},
    {"ctc_loss_backward", k_ctc_loss_backward},
    {NULL, NULL},
};
