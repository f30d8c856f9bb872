/* grid_sample.c: sampling an image at the points of a grid (python/ember/ops/sampling.py):
 *
 *   grid_sampler_2d / _3d(input (N, C, [D,] H, W), grid (N, *out, d), interpolation_mode,
 *                         padding_mode, align_corners) -> (N, C, *out)
 *   grid_sampler_2d / _3d_backward(grad_output, input, grid, interpolation_mode,
 *                                  padding_mode, align_corners) -> (grad_input, grad_grid)
 *
 * Each grid point becomes a source position per axis (grid[..., 0] is x, the width):
 * (g + 1) / 2 (size - 1) with align_corners, else ((g + 1) size - 1) / 2; then for
 * bilinear and nearest the padding mode (border clips to [0, size - 1], reflection
 * reflects about the border pixels' centres (align_corners) or outer edges, then clips;
 * zeros reads 0 outside). Per axis the point has taps (an index, a weight and the
 * weight's derivative for the position): nearest one (the position rounded half to
 * even, weight 1, derivative 0), bilinear two (floor and floor + 1, 1 - t and t),
 * bicubic (2-d only) four (floor - 1 .. floor + 2, Keys' cubic convolution with
 * A = -0.75 (R. Keys, "Cubic convolution interpolation for digital image processing",
 * 1981; the A PyTorch uses), each tap index passed through the padding mode itself, as
 * bicubic's position is not padded). A corner is one tap per axis: its weight is the
 * product of the axes' weights, and out[c] = sum over the in-bounds corners of weight
 * times input[c] at the corner.
 *
 * The gradients: grad_input[c] at a corner += weight * grad_output[c]; grad_grid per
 * axis = the position's derivative for the grid coordinate (the unnormalising scale
 * times the padding's +-1 or 0) times the sum over channels and corners of grad_output
 * times input times the corner weight's derivative for that axis.
 *
 * Everything is computed in double (float32 inputs read and their results rounded
 * once; float16 and bfloat16 through float32 copies). On the pool (em_run_chunked,
 * fixed chunks): the forward and grad_grid by grid points, each computed alone (the
 * forward in runs of GS_RUN points: their corners, then channel by channel); grad_input
 * by (batch, block of GS_CB channels), each block's points in order (runs of GS_RUN
 * points too), the blocks' shares of grad_grid kept apart and added in block order; so results are the same at every
 * thread count.
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
#define GS_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define GS_CLONES
#endif

enum { GS_BILINEAR, GS_NEAREST, GS_BICUBIC };
enum { GS_ZEROS, GS_BORDER, GS_REFLECTION };
#define GS_CB 8          /* channels per grad_input work item */
#define GS_MAXTAPS 4
#define GS_MAXCORNERS 16      /* 4 x 4 (2-d bicubic); 8 for 3-d trilinear */

typedef struct {
    bool f32;
    int d, mode, pad;
    bool align;
    Py_ssize_t N, C, S, Q;          /* S: input pixels per plane, Q: grid points per batch */
    Py_ssize_t size[3];             /* input sizes by axis: x (W), y (H), z (D) */
    Py_ssize_t stride[3];           /* element strides of those axes in a plane */
    const char *x, *g, *go;         /* contiguous input, grid, grad_output */
    char *out, *gx, *gg;            /* results (contiguous) */
    double *part;                   /* backward: grad_grid shares (N, blocks, Q, d) */
    Py_ssize_t blocks;
} gs_ctx;

typedef struct {
    int n;                          /* corners */
    Py_ssize_t off[GS_MAXCORNERS];  /* in-plane element offset */
    double w[GS_MAXCORNERS];        /* weight */
    double dw[GS_MAXCORNERS][3];    /* weight's derivative per axis position */
    double mult[3];                 /* d position / d grid coordinate per axis */
} gs_point;

static inline double
ld(const char *p, bool f32, Py_ssize_t i)
{
    return f32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static inline void
st(char *p, bool f32, Py_ssize_t i, double v)
{
    if (f32)
        ((float *)p)[i] = (float)v;
    else
        ((double *)p)[i] = v;
}

/* c clipped to [0, size - 1]; *d: its derivative (0 where clipped) */
static inline double
clip(double c, Py_ssize_t size, double *d)
{
    if (c <= 0) {
        *d = 0;
        return 0;
    }
    if (c >= (double)(size - 1)) {
        *d = 0;
        return (double)(size - 1);
    }
    *d = 1;
    return c;
}

/* c reflected into [twice_lo / 2, twice_hi / 2] about its ends; *d: +-1 */
static inline double
reflect(double c, double twice_lo, double twice_hi, double *d)
{
    if (twice_lo == twice_hi) {
        *d = 0;
        return 0;
    }
    double lo = twice_lo / 2, span = (twice_hi - twice_lo) / 2, sign = 1;
    c -= lo;
    if (c < 0) {
        c = -c;
        sign = -1;
    }
    double extra = fmod(c, span), flips = floor(c / span);
    if (fmod(flips, 2.0) == 0) {
        *d = sign;
        return extra + lo;
    }
    *d = -sign;
    return span - extra + lo;
}

/* an axis position (or bicubic tap position) through the padding mode */
static inline double
padded(double c, Py_ssize_t size, int pad, bool align, double *d)
{
    double d1 = 1, d2 = 1;
    if (pad == GS_BORDER)
        c = clip(c, size, &d1);
    else if (pad == GS_REFLECTION) {
        c = align ? reflect(c, 0, 2.0 * (double)(size - 1), &d1)
                  : reflect(c, -1, 2.0 * (double)size - 1, &d1);
        c = clip(c, size, &d2);
    }
    *d = d1 * d2;
    return c;
}

/* Keys' cubic convolution weights for the taps at -1, 0, 1, 2 from t in [0, 1) and
 * their derivatives for t */
static inline void
cubic(double t, double *w, double *dw)
{
    const double A = -0.75;
    double u = t + 1, v = 1 - t, z = 2 - t;
    w[0] = ((A * u - 5 * A) * u + 8 * A) * u - 4 * A;
    w[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
    w[2] = ((A + 2) * v - (A + 3)) * v * v + 1;
    w[3] = ((A * z - 5 * A) * z + 8 * A) * z - 4 * A;
    dw[0] = (3 * A * u - 10 * A) * u + 8 * A;
    dw[1] = (3 * (A + 2) * t - 2 * (A + 3)) * t;
    dw[2] = -(3 * (A + 2) * v - 2 * (A + 3)) * v;
    dw[3] = -((3 * A * z - 10 * A) * z + 8 * A);
}

/* grid point (n, q)'s in-bounds corners (with the weights' derivatives when want_dw) */
static inline __attribute__((always_inline)) void
point(const gs_ctx *p, Py_ssize_t n, Py_ssize_t q, gs_point *pt, bool want_dw)
{
    int nt[3];
    Py_ssize_t idx[3][GS_MAXTAPS];
    double w[3][GS_MAXTAPS], dw[3][GS_MAXTAPS];
    bool ok[3][GS_MAXTAPS];
    for (int a = 0; a < p->d; a++) {
        Py_ssize_t size = p->size[a];
        double g = ld(p->g, p->f32, (n * p->Q + q) * p->d + a);
        double scale = p->align ? (double)(size - 1) / 2 : (double)size / 2;
        double c = p->align ? (g + 1) / 2 * (double)(size - 1)
                            : ((g + 1) * (double)size - 1) / 2, dc = 1;
        if (p->mode != GS_BICUBIC)
            c = padded(c, size, p->pad, p->align, &dc);
        pt->mult[a] = scale * dc;
        if (p->mode == GS_NEAREST) {
            double r = nearbyint(c);
            nt[a] = 1;
            idx[a][0] = (Py_ssize_t)r;
            ok[a][0] = r >= 0 && r <= (double)(size - 1);
            w[a][0] = 1;
            dw[a][0] = 0;
        }
        else if (p->mode == GS_BILINEAR) {
            double lo = floor(c), t = c - lo;
            nt[a] = 2;
            for (int k = 0; k < 2; k++) {
                double at = lo + k;
                ok[a][k] = at >= 0 && at <= (double)(size - 1);
                idx[a][k] = ok[a][k] ? (Py_ssize_t)at : 0;
            }
            w[a][0] = 1 - t;
            w[a][1] = t;
            dw[a][0] = -1;
            dw[a][1] = 1;
        }
        else {
            double lo = floor(c), t = c - lo;
            nt[a] = 4;
            cubic(t, w[a], dw[a]);
            for (int k = 0; k < 4; k++) {
                double unused, at = padded(lo - 1 + k, size, p->pad, p->align, &unused);
                ok[a][k] = at >= 0 && at <= (double)(size - 1);
                idx[a][k] = ok[a][k] ? (Py_ssize_t)at : 0;
            }
        }
    }
    int total = 1, m = 0;
    for (int a = 0; a < p->d; a++)
        total *= nt[a];
    int next[3] = {0, 0, 0};
    for (int k = 0; k < total; k++) {
        int tap[3] = {next[0], next[1], next[2]};
        bool in = true;
        for (int a = 0; a < p->d; a++)
            in = in && ok[a][tap[a]];
        for (int a = 0; a < p->d; a++) {       /* the next corner: x fastest */
            if (++next[a] < nt[a])
                break;
            next[a] = 0;
        }
        if (!in)
            continue;
        Py_ssize_t off = 0;
        double wt = 1;
        for (int a = 0; a < p->d; a++) {
            off += idx[a][tap[a]] * p->stride[a];
            wt *= w[a][tap[a]];
        }
        for (int a = 0; want_dw && a < p->d; a++) {
            double dv = dw[a][tap[a]];
            for (int b = 0; b < p->d; b++)
                if (b != a)
                    dv *= w[b][tap[b]];
            pt->dw[m][a] = dv;
        }
        pt->off[m] = off;
        pt->w[m] = wt;
        m++;
    }
    pt->n = m;
}

/* point() for 2-d bilinear and nearest without the general loops over axes and taps:
 * the same corners in the same order (x fastest), the same products */
static inline __attribute__((always_inline)) void
point2(const gs_ctx *p, Py_ssize_t n, Py_ssize_t q, gs_point *pt, bool want_dw)
{
    Py_ssize_t W = p->size[0], H = p->size[1];
    double c[2];
    for (int a = 0; a < 2; a++) {
        Py_ssize_t size = p->size[a];
        double g = ld(p->g, p->f32, (n * p->Q + q) * 2 + a), dc = 1;
        double scale = p->align ? (double)(size - 1) / 2 : (double)size / 2;
        double v = p->align ? (g + 1) / 2 * (double)(size - 1)
                            : ((g + 1) * (double)size - 1) / 2;
        if (p->pad != GS_ZEROS)
            v = padded(v, size, p->pad, p->align, &dc);
        pt->mult[a] = scale * dc;
        c[a] = v;
    }
    int m = 0;
    if (p->mode == GS_NEAREST) {
        double rx = nearbyint(c[0]), ry = nearbyint(c[1]);
        if (rx >= 0 && rx <= (double)(W - 1) && ry >= 0 && ry <= (double)(H - 1)) {
            pt->off[0] = (Py_ssize_t)ry * W + (Py_ssize_t)rx;
            pt->w[0] = 1;
            pt->dw[0][0] = pt->dw[0][1] = 0;
            m = 1;
        }
        pt->n = m;
        return;
    }
    double x0 = floor(c[0]), y0 = floor(c[1]), tx = c[0] - x0, ty = c[1] - y0;
    double wx[2] = {1 - tx, tx}, wy[2] = {1 - ty, ty}, dwv[2] = {-1, 1};
    bool okx[2] = {x0 >= 0 && x0 <= (double)(W - 1), x0 + 1 >= 0 && x0 + 1 <= (double)(W - 1)};
    bool oky[2] = {y0 >= 0 && y0 <= (double)(H - 1), y0 + 1 >= 0 && y0 + 1 <= (double)(H - 1)};
    for (int j = 0; j < 2; j++) {
        for (int i = 0; i < 2; i++) {
            if (!(okx[i] && oky[j]))
                continue;
            pt->off[m] = ((Py_ssize_t)y0 + j) * W + (Py_ssize_t)x0 + i;
            pt->w[m] = wx[i] * wy[j];
            if (want_dw) {
                pt->dw[m][0] = dwv[i] * wy[j];
                pt->dw[m][1] = dwv[j] * wx[i];
            }
            m++;
        }
    }
    pt->n = m;
}

/* The forward over a run of up to GS_RUN consecutive points of one batch: their corners
 * first, then channel by channel (each output row written in order, each input plane
 * read while it is in cache); every output is the same sum over its corners in order. */
#define GS_RUN 64
typedef struct {
    gs_point pt[GS_RUN];
} gs_run;

#define GS_FORWARD_RUN(T)                                                                 \
    static inline void forward_run_##T(const gs_ctx *p, Py_ssize_t n, Py_ssize_t q0,      \
                                       int len, const gs_run *r)                          \
    {                                                                                     \
        const T *x = (const T *)p->x + n * p->C * p->S;                                   \
        T *o = (T *)p->out + n * p->C * p->Q + q0;                                        \
        for (Py_ssize_t c = 0; c < p->C; c++) {                                           \
            const T *plane = x + c * p->S;                                                \
            T *row = o + c * p->Q;                                                        \
            for (int j = 0; j < len; j++) {                                               \
                const Py_ssize_t *off = r->pt[j].off;                                     \
                const double *w = r->pt[j].w;                                             \
                double v;                                                                 \
                if (r->pt[j].n == 4) { /* bilinear inside: the same sum, unrolled */         \
                    v = w[0] * (double)plane[off[0]];                                     \
                    v += w[1] * (double)plane[off[1]];                                    \
                    v += w[2] * (double)plane[off[2]];                                    \
                    v += w[3] * (double)plane[off[3]];                                    \
                }                                                                         \
                else {                                                                    \
                    v = 0;                                                                \
                    for (int k = 0; k < r->pt[j].n; k++)                                  \
                        v += w[k] * (double)plane[off[k]];                                \
                }                                                                         \
                row[j] = (T)v;                                                            \
            }                                                                             \
        }                                                                                 \
    }
GS_FORWARD_RUN(float)
GS_FORWARD_RUN(double)

GS_CLONES static void
forward_range(void *ctx, int64_t start, int64_t end)
{
    const gs_ctx *p = ctx;
    gs_run run;
    for (int64_t i = start; i < end;) {
        Py_ssize_t n = i / p->Q, q0 = i % p->Q;
        int len = 0;
        while (len < GS_RUN && i < end && q0 + len < p->Q) {
            if (p->d == 2 && p->mode != GS_BICUBIC)
                point2(p, n, q0 + len, &run.pt[len], false);
            else
                point(p, n, q0 + len, &run.pt[len], false);
            len++;
            i++;
        }
        if (p->f32)
            forward_run_float(p, n, q0, len, &run);
        else
            forward_run_double(p, n, q0, len, &run);
    }
}

/* a run of len points' share of the channels c0 .. c1, channel by channel (each plane's
 * additions in the points' order, as point by point): grad_input scattered, grad_grid's
 * sums (before the positions' derivatives) into acc; in the input's type T */
#define GS_BACKWARD_RUN(T)                                                                \
    static inline void backward_run_##T(const gs_ctx *p, Py_ssize_t n, Py_ssize_t q0,     \
                                        int len, Py_ssize_t c0, Py_ssize_t c1,            \
                                        const gs_run *r, double (*acc)[3])                \
    {                                                                                     \
        for (Py_ssize_t c = c0; c < c1; c++) {                                            \
            const T *x = (const T *)p->x + (n * p->C + c) * p->S;                         \
            const T *go = (const T *)p->go + (n * p->C + c) * p->Q + q0;                  \
            T *gx = (T *)p->gx + (n * p->C + c) * p->S;                                   \
            for (int j = 0; j < len; j++) {                                               \
                const gs_point *pt = &r->pt[j];                                           \
                double g = (double)go[j];                                                 \
                for (int k = 0; k < pt->n; k++) {                                         \
                    Py_ssize_t at = pt->off[k];                                           \
                    gx[at] = (T)((double)gx[at] + pt->w[k] * g);                          \
                    double xv = g * (double)x[at];                                        \
                    for (int a = 0; a < p->d; a++)                                        \
                        acc[j][a] += xv * pt->dw[k][a];                                   \
                }                                                                         \
            }                                                                             \
        }                                                                                 \
    }
GS_BACKWARD_RUN(float)
GS_BACKWARD_RUN(double)

/* items: (batch, channel block): grad_input of the block's planes (points in order) and
 * the block's share of grad_grid, in runs of GS_RUN points */
GS_CLONES static void
backward_range(void *ctx, int64_t start, int64_t end)
{
    const gs_ctx *p = ctx;
    gs_run run;
    double acc[GS_RUN][3];
    size_t el = p->f32 ? sizeof(float) : sizeof(double);
    for (int64_t i = start; i < end; i++) {
        Py_ssize_t n = i / p->blocks, blk = i % p->blocks;
        Py_ssize_t c0 = blk * GS_CB, c1 = c0 + GS_CB < p->C ? c0 + GS_CB : p->C;
        memset(p->gx + (size_t)((n * p->C + c0) * p->S) * el, 0,
               (size_t)((c1 - c0) * p->S) * el);
        double *part = p->part + (n * p->blocks + blk) * p->Q * p->d;
        for (Py_ssize_t q0 = 0; q0 < p->Q; q0 += GS_RUN) {
            int len = p->Q - q0 < GS_RUN ? (int)(p->Q - q0) : GS_RUN;
            for (int j = 0; j < len; j++) {
                if (p->d == 2 && p->mode != GS_BICUBIC)
                    point2(p, n, q0 + j, &run.pt[j], true);
                else
                    point(p, n, q0 + j, &run.pt[j], true);
                acc[j][0] = acc[j][1] = acc[j][2] = 0;
            }
            if (p->f32)
                backward_run_float(p, n, q0, len, c0, c1, &run, acc);
            else
                backward_run_double(p, n, q0, len, c0, c1, &run, acc);
            for (int j = 0; j < len; j++)
                for (int a = 0; a < p->d; a++)
                    part[(q0 + j) * p->d + a] = acc[j][a] * run.pt[j].mult[a];
        }
    }
}

/* grad_grid: the blocks' shares added in block order */
static void
grid_grad_range(void *ctx, int64_t start, int64_t end)
{
    const gs_ctx *p = ctx;
    for (int64_t i = start; i < end; i++) {
        Py_ssize_t n = i / p->Q, q = i % p->Q;
        for (int a = 0; a < p->d; a++) {
            double v = 0;
            for (Py_ssize_t b = 0; b < p->blocks; b++)
                v += p->part[((n * p->blocks + b) * p->Q + q) * p->d + a];
            st(p->gg, p->f32, (n * p->Q + q) * p->d + a, v);
        }
    }
}

static const char *
torch_type(em_Tensor *t)
{
    return em_dtype_torch_name(t->dtype);
}

/* the checks of python/ember/ops/sampling.py's _grid_check, in its order and words;
 * fills p's geometry */
static int
read_args(em_Tensor *x, em_Tensor *g, PyObject *mode, PyObject *pad, PyObject *align,
          gs_ctx *p)
{
    if (x->dtype != g->dtype) {
        PyErr_Format(PyExc_RuntimeError, "grid_sampler(): expected input and grid to have "
                     "same dtype, but input has %s and grid has %s", torch_type(x),
                     torch_type(g));
        return -1;
    }
    if ((x->ndim != 4 && x->ndim != 5) || g->ndim != x->ndim) {
        PyErr_Format(PyExc_RuntimeError, "grid_sampler(): expected 4D or 5D input and grid "
                     "with same number of dimensions, but got input with sizes %s and grid "
                     "with sizes %s", em_tshape(x), em_tshape(g));
        return -1;
    }
    if (x->sizes[0] != g->sizes[0]) {
        PyErr_Format(PyExc_RuntimeError, "grid_sampler(): expected grid and input to have "
                     "same batch size, but got input with sizes %s and grid with sizes %s",
                     em_tshape(x), em_tshape(g));
        return -1;
    }
    int d = x->ndim - 2;
    if (g->sizes[g->ndim - 1] != d) {
        PyErr_Format(PyExc_RuntimeError, "grid_sampler(): expected grid to have size %d in "
                     "last dimension, but got grid with sizes %s", d, em_tshape(g));
        return -1;
    }
    for (int k = 2; k < x->ndim; k++) {
        if (x->sizes[k] <= 0) {
            PyErr_Format(PyExc_RuntimeError, "grid_sampler(): expected input to have "
                         "non-empty spatial dimensions, but input has sizes %s with "
                         "dimension %d being empty", em_tshape(x), k);
            return -1;
        }
    }
    if (!em_is_float(x->dtype)) {
        PyErr_Format(PyExc_NotImplementedError, "\"grid_sampler_%dd_cpu\" not implemented "
                     "for '%s'", d, torch_type(x));
        return -1;
    }
    long m = PyLong_AsLong(mode), pm = PyLong_AsLong(pad);
    int al = PyObject_IsTrue(align);
    if ((m == -1 || pm == -1 || al < 0) && PyErr_Occurred())
        return -1;
    if (m < 0 || m > 2 || pm < 0 || pm > 2) {
        PyErr_Format(PyExc_RuntimeError, "grid_sampler(): unknown interpolation mode %ld or "
                     "padding mode %ld", m, pm);
        return -1;
    }
    if (m == GS_BICUBIC && d == 3) {
        PyErr_SetString(PyExc_RuntimeError, "grid_sampler(): bicubic interpolation only "
                        "supports 4D input");
        return -1;
    }
    p->f32 = x->dtype != EM_FLOAT64;     /* half types computed from float32 copies */
    p->d = d;
    p->mode = (int)m;
    p->pad = (int)pm;
    p->align = al;
    p->N = x->sizes[0];
    p->C = x->sizes[1];
    p->S = 1;
    for (int a = 0; a < d; a++) {
        p->size[a] = x->sizes[x->ndim - 1 - a];
        p->stride[a] = p->S;
        p->S *= p->size[a];
    }
    p->Q = 1;
    for (int k = 1; k < g->ndim - 1; k++)
        p->Q *= g->sizes[k];
    return 0;
}


static int
corners_of(const gs_ctx *p)
{
    int per = p->mode == GS_NEAREST ? 1 : p->mode == GS_BILINEAR ? 2 : 4;
    return p->d == 3 ? per * per * per : per * per;
}

static PyObject *
k_grid_sampler(em_Op *op, PyObject **args)
{
    em_Tensor *x = (em_Tensor *)args[0], *g = (em_Tensor *)args[1], *out = NULL;
    gs_ctx p = {0};
    PyArrayObject *hx = NULL, *hg = NULL, *so = NULL;
    if (read_args(x, g, args[2], args[3], args[4], &p) < 0)
        return NULL;
    Py_ssize_t sz[EM_MAX_DIMS];
    sz[0] = p.N;
    sz[1] = p.C;
    for (int k = 1; k < g->ndim - 1; k++)
        sz[k + 1] = g->sizes[k];
    bool meta = em_meta_of(x) || em_is_meta(g);
    if ((out = em_empty(x->ndim, sz, x->dtype, meta)) == NULL)
        return NULL;
    if (!meta && out->numel > 0) {
        if ((p.x = em_float_data(x, &hx)) == NULL || (p.g = em_float_data(g, &hg)) == NULL)
            goto error;
        if ((p.out = em_float_dest(out, &so)) == NULL ||
            em_run_chunked(forward_range, &p, p.N * p.Q, p.C * corners_of(&p) + 8) < 0 ||
            em_float_finish(out, &so) < 0)
            goto error;
    }
    Py_XDECREF(hx);
    Py_XDECREF(hg);
    return (PyObject *)out;
error:
    Py_XDECREF(hx);
    Py_XDECREF(hg);
    Py_XDECREF(so);
    Py_DECREF(out);
    return NULL;
}

static PyObject *
k_grid_sampler_backward(em_Op *op, PyObject **args)
{
    em_Tensor *go = (em_Tensor *)args[0], *x = (em_Tensor *)args[1], *g = (em_Tensor *)args[2];
    em_Tensor *gx = NULL, *gg = NULL;
    gs_ctx p = {0};
    PyArrayObject *hx = NULL, *hg = NULL, *ho = NULL, *sx = NULL, *sg = NULL;
    if (read_args(x, g, args[3], args[4], args[5], &p) < 0)
        return NULL;
    bool shape_ok = go->ndim == x->ndim && go->dtype == x->dtype && go->sizes[0] == p.N &&
                    go->sizes[1] == p.C;
    for (int k = 1; shape_ok && k < g->ndim - 1; k++)
        shape_ok = go->sizes[k + 1] == g->sizes[k];
    if (!shape_ok) {
        PyErr_Format(PyExc_RuntimeError, "grid_sampler backward: expected grad_output of "
                     "shape [N, C, *grid.shape[1:-1]] and input's dtype, got %s for input %s "
                     "and grid %s", em_tshape(go), em_tshape(x), em_tshape(g));
        return NULL;
    }
    bool meta = em_meta_of(x) || em_is_meta(g) || em_is_meta(go);
    if ((gx = em_empty(x->ndim, x->sizes, x->dtype, meta)) == NULL ||
        (gg = em_empty(g->ndim, g->sizes, g->dtype, meta)) == NULL)
        goto error;
    if (!meta) {
        size_t el = p.f32 ? sizeof(float) : sizeof(double);
        if ((p.gx = em_float_dest(gx, &sx)) == NULL || (p.gg = em_float_dest(gg, &sg)) == NULL)
            goto error;
        memset(p.gx, 0, (size_t)gx->numel * el);
        memset(p.gg, 0, (size_t)gg->numel * el);
    }
    if (!meta && p.N * p.C * p.Q > 0) {
        if ((p.x = em_float_data(x, &hx)) == NULL || (p.g = em_float_data(g, &hg)) == NULL ||
            (p.go = em_float_data(go, &ho)) == NULL)
            goto error;
        p.blocks = (p.C + GS_CB - 1) / GS_CB;
        size_t nparts = (size_t)(p.N * p.blocks * p.Q * p.d);
        p.part = PyMem_Malloc(sizeof(double) * (nparts ? nparts : 1));
        if (p.part == NULL) {
            PyErr_NoMemory();
            goto error;
        }
        int rc = em_run_chunked(backward_range, &p, p.N * p.blocks,
                                p.Q * (GS_CB * corners_of(&p) + 8));
        if (rc == 0)
            rc = em_run_chunked(grid_grad_range, &p, p.N * p.Q, p.blocks * p.d);
        PyMem_Free(p.part);
        if (rc < 0)
            goto error;
    }
    if (!meta && (em_float_finish(gx, &sx) < 0 || em_float_finish(gg, &sg) < 0))
        goto error;
    Py_XDECREF(hx);
    Py_XDECREF(hg);
    Py_XDECREF(ho);
    PyObject *r = PyTuple_Pack(2, gx, gg);
    Py_DECREF(gx);
    Py_DECREF(gg);
    return r;
error:
    Py_XDECREF(hx);
    Py_XDECREF(hg);
    Py_XDECREF(ho);
    Py_XDECREF(sx);
    Py_XDECREF(sg);
    Py_XDECREF(gx);
    Py_XDECREF(gg);
    return NULL;
}

const em_KernelEntry em_grid_sample_kernels[] = {
    {"grid_sampler", k_grid_sampler},
    {"grid_sampler_backward", k_grid_sampler_backward},
    {NULL, NULL},
};
