/* embedding_bag.c: sums, means or maxima of bags of embedding rows
 * (python/ember/ops/embedding_bag.py):
 *
 *   _embedding_bag(weight (V, D), indices (n,), offsets, scale_grad_by_freq, mode, sparse,
 *                  per_sample_weights, include_last_offset, padding_idx)
 *       -> (output (B, D), offset2bag (n,), bag_size (B,), max_indices)
 *   _embedding_bag_backward(grad (B, D), indices, offsets, offset2bag, bag_size,
 *                           maximum_indices, num_weights, scale_grad_by_freq, mode, sparse,
 *                           per_sample_weights, padding_idx) -> grad_weight (V, D)
 *   _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag,
 *                                              mode, padding_idx) -> (n,)
 *
 * Bag b holds the positions offsets[b] .. offsets[b + 1] (the last bag to the end, or,
 * with include_last_offset (offsets has B + 1 entries), to offsets[B]: later positions
 * are in no bag's sum but offset2bag gives them B - 1); padding_idx (-1: none; the
 * composite makes it non-negative) entries count in no bag. mode 0 sums (times the
 * per-sample weights), 1 takes the mean over the counted entries, 2 the maximum per
 * column (the first largest; max_indices holds its weight row); an empty bag is zeros.
 * bag_size is the count for mean and max and zeros for sum; max_indices (B, D) for max,
 * the counts for mean, zeros (B,) for sum. The integer results have the indices' dtype
 * (int64 when indices and offsets differ).
 *
 * Sums accumulate in the weight's dtype (float32 for float16 and bfloat16, computed from
 * float32 copies) in index order, as index_add does. On the pool
 * (em_run_chunked, fixed chunks): the forward by bags, the per-sample weights' gradient
 * by positions, the weight's gradient by blocks of EB_COLS columns, each block's
 * positions in order; so results are the same at every thread count.
 */
/* O3 (vectorised row loops) without contracting a * b + c: the results do not depend on
 * the host's FMA; the clones only widen the vectors (element-wise, same results). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "no-trapping-math", "no-math-errno", "fp-contract=off")
#endif
#include "kutil.h"
#include "runtime/runtime.h"
#include <math.h>
#include <stdlib.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(EM_NO_CLONES)
#define EB_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define EB_CLONES
#endif

#define EB_COLS 16
enum { EB_SUM, EB_MEAN, EB_MAX };

typedef struct {
    bool f32, idx64, out64;
    int mode;
    Py_ssize_t V, D, n, B, noff, pad;   /* pad: padding row or -1 */
    Py_ssize_t end;                    /* positions from end on count in no bag */
    const char *w, *idx, *off, *psw;   /* contiguous inputs */
    bool off64;
    char *out, *o2b, *size, *maxi;     /* forward results */
    const char *g, *bag_size, *maxin, *o2bin;   /* backward inputs */
    bool bs64, mi64, o2b64;
    const int64_t *freq;               /* backward: occurrences per row (or NULL) */
    char *gw, *gp;                     /* backward results */
} eb_ctx;

static inline Py_ssize_t
ild(const char *p, bool i64, Py_ssize_t i)
{
    return i64 ? (Py_ssize_t)((const int64_t *)p)[i] : (Py_ssize_t)((const int32_t *)p)[i];
}

static inline void
ist(char *p, bool i64, Py_ssize_t i, Py_ssize_t v)
{
    if (i64)
        ((int64_t *)p)[i] = v;
    else
        ((int32_t *)p)[i] = (int32_t)v;
}

static inline Py_ssize_t
bag_start(const eb_ctx *p, Py_ssize_t b)
{
    return ild(p->off, p->off64, b);
}

/* the end of bag b's counted positions */
static inline Py_ssize_t
bag_end(const eb_ctx *p, Py_ssize_t b)
{
    return b + 1 < p->noff ? ild(p->off, p->off64, b + 1) : p->n;
}

#define EB_FORWARD(T)                                                                     \
    EB_CLONES static void forward_bag_##T(const eb_ctx *p, Py_ssize_t b)                  \
    {                                                                                     \
        const T *w = (const T *)p->w, *psw = (const T *)p->psw;                           \
        T *restrict out = (T *)p->out + b * p->D;                                         \
        Py_ssize_t s = bag_start(p, b), e = bag_end(p, b), cnt = 0, D = p->D;             \
        for (Py_ssize_t j = 0; j < D; j++)                                                \
            out[j] = 0;                                                                   \
        for (Py_ssize_t i = s; i < e; i++) {                                              \
            Py_ssize_t r = ild(p->idx, p->idx64, i);                                      \
            if (r == p->pad)                                                              \
                continue;                                                                 \
            const T *restrict row = w + r * D;                                            \
            if (p->mode == EB_MAX) {                                                      \
                for (Py_ssize_t j = 0; j < D; j++)                                        \
                    if (cnt == 0 || row[j] > out[j]) {                                    \
                        out[j] = row[j];                                                  \
                        ist(p->maxi, p->out64, b * D + j, r);                             \
                    }                                                                     \
            }                                                                             \
            else if (psw != NULL) {                                                       \
                T sc = psw[i];                                                            \
                for (Py_ssize_t j = 0; j < D; j++)                                        \
                    out[j] += row[j] * sc;                                                \
            }                                                                             \
            else {                                                                        \
                for (Py_ssize_t j = 0; j < D; j++)                                        \
                    out[j] += row[j];                                                     \
            }                                                                             \
            cnt++;                                                                        \
        }                                                                                 \
        if (p->mode == EB_MEAN && cnt > 1)                                                \
            for (Py_ssize_t j = 0; j < D; j++)                                            \
                out[j] /= (T)cnt;                                                         \
        if (p->mode == EB_MAX && cnt == 0)                                                \
            for (Py_ssize_t j = 0; j < D; j++)                                            \
                ist(p->maxi, p->out64, b * D + j, 0);                                     \
        ist(p->size, p->out64, b, p->mode == EB_SUM ? 0 : cnt);                           \
        if (p->mode == EB_MEAN)                                                           \
            ist(p->maxi, p->out64, b, cnt);                                               \
        else if (p->mode == EB_SUM)                                                       \
            ist(p->maxi, p->out64, b, 0);                                                 \
    }
EB_FORWARD(float)
EB_FORWARD(double)

static void
forward_range(void *ctx, int64_t start, int64_t end)
{
    const eb_ctx *p = ctx;
    for (int64_t b = start; b < end; b++) {
        if (p->f32)
            forward_bag_float(p, b);
        else
            forward_bag_double(p, b);
        /* offset2bag: the positions from this bag's start to the next bag's start */
        Py_ssize_t s = bag_start(p, b), e = b + 1 < p->B ? bag_start(p, b + 1) : p->n;
        for (Py_ssize_t i = s; i < e; i++)
            ist(p->o2b, p->out64, i, b);
    }
}

/* whether position i counts in its bag */
static inline bool
kept(const eb_ctx *p, Py_ssize_t i, Py_ssize_t r)
{
    return r != p->pad && i < p->end;
}

#define EB_BACKWARD(T)                                                                    \
    EB_CLONES static void backward_cols_##T(const eb_ctx *p, Py_ssize_t j0, Py_ssize_t j1) \
    {                                                                                     \
        const T *g = (const T *)p->g, *psw = (const T *)p->psw;                           \
        T *gw = (T *)p->gw;                                                               \
        Py_ssize_t D = p->D;                                                              \
        if (p->mode == EB_MAX) {                                                          \
            for (Py_ssize_t b = 0; b < p->B; b++) {                                       \
                if (ild(p->bag_size, p->bs64, b) == 0)                                    \
                    continue;                                                             \
                for (Py_ssize_t j = j0; j < j1; j++) {                                    \
                    Py_ssize_t r = ild(p->maxin, p->mi64, b * D + j);                     \
                    if (r >= 0 && r < p->V)                                               \
                        gw[r * D + j] += g[b * D + j];                                    \
                }                                                                         \
            }                                                                             \
            return;                                                                       \
        }                                                                                 \
        for (Py_ssize_t i = 0; i < p->n; i++) {                                           \
            Py_ssize_t r = ild(p->idx, p->idx64, i), b = ild(p->o2bin, p->o2b64, i);      \
            if (!kept(p, i, r) || b < 0 || b >= p->B)                                     \
                continue;                                                                 \
            T sc = psw != NULL ? psw[i] : (T)1;                                           \
            if (p->mode == EB_MEAN) {                                                     \
                Py_ssize_t c = ild(p->bag_size, p->bs64, b);                              \
                sc /= (T)(c > 1 ? c : 1);                                                 \
            }                                                                             \
            if (p->freq != NULL)                                                          \
                sc /= (T)p->freq[r];                                                      \
            const T *restrict gr = g + b * D;                                             \
            T *restrict dst = gw + r * D;                                                 \
            for (Py_ssize_t j = j0; j < j1; j++)                                          \
                dst[j] += gr[j] * sc;                                                     \
        }                                                                                 \
    }
EB_BACKWARD(float)
EB_BACKWARD(double)

static void
backward_range(void *ctx, int64_t start, int64_t end)
{
    const eb_ctx *p = ctx;
    for (int64_t blk = start; blk < end; blk++) {
        Py_ssize_t j0 = blk * EB_COLS, j1 = j0 + EB_COLS < p->D ? j0 + EB_COLS : p->D;
        if (p->f32)
            backward_cols_float(p, j0, j1);
        else
            backward_cols_double(p, j0, j1);
    }
}

static void
psw_range(void *ctx, int64_t start, int64_t end)
{
    const eb_ctx *p = ctx;
    for (int64_t i = start; i < end; i++) {
        Py_ssize_t r = ild(p->idx, p->idx64, i), b = ild(p->o2bin, p->o2b64, i);
        double v = 0;
        if (kept(p, i, r) && b >= 0 && b < p->B) {
            for (Py_ssize_t j = 0; j < p->D; j++) {
                if (p->f32)
                    v += (double)((const float *)p->g)[b * p->D + j] *
                         (double)((const float *)p->w)[r * p->D + j];
                else
                    v += ((const double *)p->g)[b * p->D + j] *
                         ((const double *)p->w)[r * p->D + j];
            }
        }
        if (p->f32)
            ((float *)p->gp)[i] = (float)v;
        else
            ((double *)p->gp)[i] = v;
    }
}

static int
check_index_dtype(em_Tensor *t, const char *name)
{
    if (t->dtype != EM_INT64 && t->dtype != EM_INT32) {
        PyErr_Format(PyExc_RuntimeError, "Expected tensor for argument #1 '%s' to have one of "
                     "the following scalar types: Long, Int; but got torch.%sTensor instead "
                     "(while checking arguments for embedding_bag)", name,
                     em_dtype_torch_name(t->dtype));
        return -1;
    }
    return 0;
}

static int
check_float(em_Tensor *w)
{
    if (!em_is_float(w->dtype)) {
        PyErr_Format(PyExc_RuntimeError, "Expected tensor for argument #1 'weight' to have one "
                     "of the following scalar types: Half, BFloat16, Float, Double; but got "
                     "torch.%sTensor instead (while checking arguments for embedding_bag)",
                     em_dtype_torch_name(w->dtype));
        return -1;
    }
    return 0;
}

/* offsets (first 0, non-decreasing, at most n) and indices (in [0, V)), read */
static int
check_values(eb_ctx *p)
{
    if (p->noff > 0) {
        Py_ssize_t first = ild(p->off, p->off64, 0), last = ild(p->off, p->off64, p->noff - 1);
        if (first != 0) {
            PyErr_Format(PyExc_RuntimeError, "offsets[0] has to be 0, i.e., the first sequence "
                         "in the mini-batch has to start from position 0. However, got %zd",
                         first);
            return -1;
        }
        if (last > p->n) {
            PyErr_Format(PyExc_RuntimeError, "offsets[-1] can not be greater than input's "
                         "length %zd but got offsets[-1] of %zd", p->n, last);
            return -1;
        }
        for (Py_ssize_t b = 1; b < p->noff; b++)
            if (ild(p->off, p->off64, b) < ild(p->off, p->off64, b - 1)) {
                PyErr_SetString(PyExc_RuntimeError,
                                "embedding_bag: offsets must be non-decreasing");
                return -1;
            }
    }
    for (Py_ssize_t i = 0; i < p->n; i++) {
        Py_ssize_t r = ild(p->idx, p->idx64, i);
        if (r < 0 || r >= p->V) {
            PyErr_Format(PyExc_RuntimeError, "embedding_bag: index %zd is out of bounds for a "
                         "weight of %zd rows", r, p->V);
            return -1;
        }
    }
    return 0;
}

static int
read_pad(PyObject *o, Py_ssize_t V, Py_ssize_t *pad)
{
    *pad = o == Py_None ? -1 : PyLong_AsSsize_t(o);
    if (*pad == -1 && PyErr_Occurred())
        return -1;
    if (*pad < -1 || *pad >= V) {
        PyErr_Format(PyExc_RuntimeError, "padding_idx must be within the number of "
                     "embeddings, -1 (none) through %zd, but got %zd", V - 1, *pad);
        return -1;
    }
    return 0;
}

static PyObject *
k_embedding_bag(em_Op *op, PyObject **args)
{
    em_Tensor *w = (em_Tensor *)args[0], *idx = (em_Tensor *)args[1], *off = (em_Tensor *)args[2];
    em_Tensor *psw = args[6] == Py_None ? NULL : (em_Tensor *)args[6];
    em_Tensor *out = NULL, *o2b = NULL, *size = NULL, *maxi = NULL;
    PyArrayObject *hw = NULL, *hi = NULL, *ho = NULL, *hp = NULL, *so = NULL;
    eb_ctx p = {0};
    if (check_index_dtype(idx, "indices") < 0 || check_index_dtype(off, "offsets") < 0 ||
        check_float(w) < 0)
        return NULL;
    if (w->ndim != 2 || off->ndim != 1 || idx->ndim > 1) {
        PyErr_Format(PyExc_RuntimeError, "_embedding_bag: expected a 2-d weight, 1-d indices "
                     "and 1-d offsets, got %s, %s and %s", em_tshape(w), em_tshape(idx),
                     em_tshape(off));
        return NULL;
    }
    long mode = PyLong_AsLong(args[4]);
    int last = PyObject_IsTrue(args[7]);
    if ((mode == -1 && PyErr_Occurred()) || last < 0)
        return NULL;
    if (mode < 0 || mode > 2) {
        PyErr_SetString(PyExc_RuntimeError, "`mode` must be sum, mean, or max.");
        return NULL;
    }
    p.V = w->sizes[0];
    p.D = w->sizes[1];
    if (read_pad(args[8], p.V, &p.pad) < 0)
        return NULL;
    if (psw != NULL && (mode != EB_SUM || psw->dtype != w->dtype ||
                        psw->numel != idx->numel)) {
        PyErr_SetString(PyExc_RuntimeError, mode != EB_SUM ?
                        "embedding_bag: per_sample_weights only supported with mode='sum'" :
                        "embedding_bag: per_sample_weights must have the weight's dtype and "
                        "one value per index");
        return NULL;
    }
    p.mode = (int)mode;
    p.n = idx->numel;
    p.noff = off->sizes[0];
    p.B = last ? (p.noff > 0 ? p.noff - 1 : 0) : p.noff;
    p.f32 = w->dtype != EM_FLOAT64;    /* half types computed from float32 copies */
    p.idx64 = idx->dtype == EM_INT64;
    p.off64 = off->dtype == EM_INT64;
    em_dtype_t idt = idx->dtype == off->dtype ? idx->dtype : EM_INT64;
    p.out64 = idt == EM_INT64;
    bool meta = em_meta_of(w) || em_is_meta(idx) || em_is_meta(off) ||
                (psw != NULL && em_is_meta(psw));
    Py_ssize_t osz[2] = {p.B, p.D};
    if ((out = em_empty(2, osz, w->dtype, meta)) == NULL ||
        (o2b = em_empty(1, &p.n, idt, meta)) == NULL ||
        (size = em_empty(1, &p.B, idt, meta)) == NULL ||
        (maxi = em_empty(mode == EB_MAX ? 2 : 1, osz, idt, meta)) == NULL)
        goto error;
    if (!meta) {
        if ((p.w = em_float_data(w, &hw)) == NULL || (p.idx = em_float_data(idx, &hi)) == NULL ||
            (p.off = em_float_data(off, &ho)) == NULL ||
            (psw != NULL && (p.psw = em_float_data(psw, &hp)) == NULL))
            goto error;
        if (check_values(&p) < 0)
            goto error;
        if ((p.out = em_float_dest(out, &so)) == NULL)
            goto error;
        p.o2b = PyArray_BYTES(o2b->array);
        p.size = PyArray_BYTES(size->array);
        p.maxi = PyArray_BYTES(maxi->array);
        if (p.B == 0) {
            for (Py_ssize_t i = 0; i < p.n; i++)
                ist(p.o2b, p.out64, i, 0);
        }
        else {
            Py_ssize_t unit = (p.n / p.B + 1) * p.D;
            if (em_run_chunked(forward_range, &p, p.B, unit) < 0)
                goto error;
        }
        if (em_float_finish(out, &so) < 0)
            goto error;
    }
    Py_XDECREF(hw);
    Py_XDECREF(hi);
    Py_XDECREF(ho);
    Py_XDECREF(hp);
    PyObject *r = PyTuple_Pack(4, out, o2b, size, maxi);
    Py_DECREF(out);
    Py_DECREF(o2b);
    Py_DECREF(size);
    Py_DECREF(maxi);
    return r;
error:
    Py_XDECREF(hw);
    Py_XDECREF(hi);
    Py_XDECREF(ho);
    Py_XDECREF(hp);
    Py_XDECREF(so);
    Py_XDECREF(out);
    Py_XDECREF(o2b);
    Py_XDECREF(size);
    Py_XDECREF(maxi);
    return NULL;
}

/* the backward kernels' common reading: grad (B, D), indices, offsets, offset2bag */
static int
read_backward(em_Tensor *g, em_Tensor *idx, em_Tensor *off, em_Tensor *o2b, eb_ctx *p)
{
    if (check_index_dtype(idx, "indices") < 0 || check_index_dtype(off, "offsets") < 0 ||
        check_index_dtype(o2b, "offset2bag") < 0 || check_float(g) < 0)
        return -1;
    if (g->ndim != 2 || off->ndim != 1 || idx->ndim > 1 || o2b->ndim != 1 ||
        o2b->numel != idx->numel ||
        (off->sizes[0] != g->sizes[0] && off->sizes[0] != g->sizes[0] + 1)) {
        PyErr_Format(PyExc_RuntimeError, "_embedding_bag backward: expected grad (B, D), 1-d "
                     "indices, offset2bag of as many and B or B + 1 offsets, got %s, %s, %s "
                     "and %s", em_tshape(g), em_tshape(idx), em_tshape(o2b), em_tshape(off));
        return -1;
    }
    p->B = g->sizes[0];
    p->D = g->sizes[1];
    p->n = idx->numel;
    p->noff = off->sizes[0];
    p->f32 = g->dtype != EM_FLOAT64;
    p->idx64 = idx->dtype == EM_INT64;
    p->off64 = off->dtype == EM_INT64;
    p->o2b64 = o2b->dtype == EM_INT64;
    return 0;
}

/* with include_last_offset (B + 1 offsets) the positions from offsets[B] count in no bag */
static void
set_end(eb_ctx *p)
{
    p->end = p->noff == p->B + 1 && p->B >= 0 ? ild(p->off, p->off64, p->B) : p->n;
}

static PyObject *
k_embedding_bag_backward(em_Op *op, PyObject **args)
{
    em_Tensor *g = (em_Tensor *)args[0], *idx = (em_Tensor *)args[1];
    em_Tensor *off = (em_Tensor *)args[2], *o2b = (em_Tensor *)args[3];
    em_Tensor *bs = (em_Tensor *)args[4], *mi = (em_Tensor *)args[5];
    em_Tensor *psw = args[10] == Py_None ? NULL : (em_Tensor *)args[10], *gw = NULL;
    PyArrayObject *hg = NULL, *hi = NULL, *ho = NULL, *hb = NULL, *hs = NULL, *hm = NULL,
                  *hp = NULL, *sw = NULL;
    int64_t *freq = NULL;
    eb_ctx p = {0};
    if (read_backward(g, idx, off, o2b, &p) < 0)
        return NULL;
    p.V = PyLong_AsSsize_t(args[6]);
    long mode = PyLong_AsLong(args[8]);
    int sgbf = PyObject_IsTrue(args[7]);
    if (((p.V == -1 || mode == -1) && PyErr_Occurred()) || sgbf < 0)
        return NULL;
    if (p.V < 0 || mode < 0 || mode > 2) {
        PyErr_Format(PyExc_RuntimeError, "_embedding_bag_backward: bad num_weights %zd or "
                     "mode %ld", p.V, mode);
        return NULL;
    }
    if (read_pad(args[11], p.V, &p.pad) < 0 || check_index_dtype(bs, "bag_size") < 0 ||
        check_index_dtype(mi, "maximum_indices") < 0)
        return NULL;
    p.mode = (int)mode;
    if (bs->numel < (mode == EB_SUM ? 0 : p.B) ||
        (mode == EB_MAX && mi->numel != p.B * p.D) ||
        (psw != NULL && (psw->numel != p.n || psw->dtype != g->dtype))) {
        PyErr_Format(PyExc_RuntimeError, "_embedding_bag_backward: bag_size %s, "
                     "maximum_indices %s or per_sample_weights do not fit grad %s",
                     em_tshape(bs), em_tshape(mi), em_tshape(g));
        return NULL;
    }
    Py_ssize_t sz[2] = {p.V, p.D};
    bool meta = em_meta_of(g) || em_is_meta(idx) || em_is_meta(off) || em_is_meta(o2b);
    if ((gw = em_empty(2, sz, g->dtype, meta)) == NULL)
        return NULL;
    if (!meta && gw->numel > 0) {
        if ((p.gw = em_float_dest(gw, &sw)) == NULL)
            goto error;
        memset(p.gw, 0, (size_t)gw->numel * (p.f32 ? sizeof(float) : sizeof(double)));
        if ((p.g = em_float_data(g, &hg)) == NULL || (p.idx = em_float_data(idx, &hi)) == NULL ||
            (p.off = em_float_data(off, &ho)) == NULL ||
            (p.o2bin = em_float_data(o2b, &hb)) == NULL ||
            (p.bag_size = em_float_data(bs, &hs)) == NULL ||
            (p.maxin = em_float_data(mi, &hm)) == NULL ||
            (psw != NULL && (p.psw = em_float_data(psw, &hp)) == NULL))
            goto error;
        p.bs64 = bs->dtype == EM_INT64;
        p.mi64 = mi->dtype == EM_INT64;
        set_end(&p);
        for (Py_ssize_t i = 0; i < p.n; i++) {
            Py_ssize_t r = ild(p.idx, p.idx64, i);
            if (r < 0 || r >= p.V) {
                PyErr_Format(PyExc_RuntimeError, "embedding_bag: index %zd is out of bounds "
                             "for a weight of %zd rows", r, p.V);
                goto error;
            }
        }
        if (sgbf && mode != EB_MAX) {
            freq = PyMem_Calloc((size_t)(p.V ? p.V : 1), sizeof(int64_t));
            if (freq == NULL) {
                PyErr_NoMemory();
                goto error;
            }
            for (Py_ssize_t i = 0; i < p.n; i++)
                freq[ild(p.idx, p.idx64, i)]++;
            p.freq = freq;
        }
        Py_ssize_t blocks = (p.D + EB_COLS - 1) / EB_COLS;
        if (em_run_chunked(backward_range, &p, blocks, (p.n + p.B) * EB_COLS) < 0 ||
            em_float_finish(gw, &sw) < 0)
            goto error;
    }
    PyMem_Free(freq);
    Py_XDECREF(hg);
    Py_XDECREF(hi);
    Py_XDECREF(ho);
    Py_XDECREF(hb);
    Py_XDECREF(hs);
    Py_XDECREF(hm);
    Py_XDECREF(hp);
    return (PyObject *)gw;
error:
    PyMem_Free(freq);
    Py_XDECREF(sw);
    Py_XDECREF(hg);
    Py_XDECREF(hi);
    Py_XDECREF(ho);
    Py_XDECREF(hb);
    Py_XDECREF(hs);
    Py_XDECREF(hm);
    Py_XDECREF(hp);
    Py_XDECREF(gw);
    return NULL;
}

static PyObject *
k_embedding_bag_psw_backward(em_Op *op, PyObject **args)
{
    em_Tensor *g = (em_Tensor *)args[0], *w = (em_Tensor *)args[1], *idx = (em_Tensor *)args[2];
    em_Tensor *off = (em_Tensor *)args[3], *o2b = (em_Tensor *)args[4], *gp = NULL;
    PyArrayObject *hg = NULL, *hw = NULL, *hi = NULL, *ho = NULL, *hb = NULL, *sp = NULL;
    eb_ctx p = {0};
    if (read_backward(g, idx, off, o2b, &p) < 0 || check_float(w) < 0)
        return NULL;
    long mode = PyLong_AsLong(args[5]);
    if (mode == -1 && PyErr_Occurred())
        return NULL;
    if (mode != EB_SUM) {
        PyErr_SetString(PyExc_RuntimeError, "embedding_bag_backward: per_sample_weights only "
                        "supported for mode='sum'");
        return NULL;
    }
    if (w->ndim != 2 || w->sizes[1] != p.D || w->dtype != g->dtype) {
        PyErr_Format(PyExc_RuntimeError, "_embedding_bag_per_sample_weights_backward: "
                     "expected weight (V, %zd) of grad's dtype, got %s", p.D, em_tshape(w));
        return NULL;
    }
    p.V = w->sizes[0];
    if (read_pad(args[6], p.V, &p.pad) < 0)
        return NULL;
    bool meta = em_meta_of(g) || em_is_meta(w) || em_is_meta(idx) || em_is_meta(off) ||
                em_is_meta(o2b);
    if ((gp = em_empty(1, &p.n, g->dtype, meta)) == NULL)
        return NULL;
    if (!meta && p.n > 0) {
        if ((p.g = em_float_data(g, &hg)) == NULL || (p.w = em_float_data(w, &hw)) == NULL ||
            (p.idx = em_float_data(idx, &hi)) == NULL ||
            (p.off = em_float_data(off, &ho)) == NULL ||
            (p.o2bin = em_float_data(o2b, &hb)) == NULL)
            goto error;
        set_end(&p);
        for (Py_ssize_t i = 0; i < p.n; i++) {
            Py_ssize_t r = ild(p.idx, p.idx64, i);
            if (r < 0 || r >= p.V) {
                PyErr_Format(PyExc_RuntimeError, "embedding_bag: index %zd is out of bounds "
                             "for a weight of %zd rows", r, p.V);
                goto error;
            }
        }
        if ((p.gp = em_float_dest(gp, &sp)) == NULL ||
            em_run_chunked(psw_range, &p, p.n, p.D + 1) < 0 || em_float_finish(gp, &sp) < 0)
            goto error;
    }
    Py_XDECREF(hg);
    Py_XDECREF(hw);
    Py_XDECREF(hi);
    Py_XDECREF(ho);
    Py_XDECREF(hb);
    return (PyObject *)gp;
error:
    Py_XDECREF(hg);
    Py_XDECREF(hw);
    Py_XDECREF(hi);
    Py_XDECREF(ho);
    Py_XDECREF(hb);
    Py_XDECREF(sp);
    Py_XDECREF(gp);
    return NULL;
}

const em_KernelEntry em_embedding_bag_kernels[] = {
    {"embedding_bag", k_embedding_bag},
    {"embedding_bag_backward", k_embedding_bag_backward},
    {"embedding_bag_psw_backward", k_embedding_bag_psw_backward},
    {NULL, NULL},
};
