/* transpose_copy.c: the copy of a permuted dense layout into a C-contiguous one (what
 * x.t().contiguous() or x.transpose(-1, -2).clone() run), in cache-sized tiles.
 *
 * NumPy's copy walks the destination in order and reads the source one large stride
 * apart, missing the cache on every element. Here the copy is split into planes over
 * the destination's last dim and the dim whose source stride is one element; each
 * plane is copied in TILE x TILE blocks, so both sides of a block stay in the cache.
 * Bands of TILE rows of the planes are the units of the thread pool's fixed chunks
 * (em_run_chunked: a plain copy, the same bytes at any thread count).
 * Anything else (casts, overlap, byte-swapped or unaligned data, other layouts) is
 * left to NumPy.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include "kutil.h"

#define TILE 32

/* One R x C plane: dst[r * dr + c] = src[c * sc + r] (strides in elements). */
#define PLANE(T)                                                                         \
static void                                                                              \
plane_##T(T *restrict dst, const T *restrict src, Py_ssize_t R, Py_ssize_t C,           \
          Py_ssize_t dr, Py_ssize_t sc)                                                  \
{                                                                                        \
    for (Py_ssize_t r0 = 0; r0 < R; r0 += TILE) {                                        \
        Py_ssize_t r1 = r0 + TILE < R ? r0 + TILE : R;                                   \
        for (Py_ssize_t c0 = 0; c0 < C; c0 += TILE) {                                    \
            Py_ssize_t c1 = c0 + TILE < C ? c0 + TILE : C;                               \
            for (Py_ssize_t r = r0; r < r1; r++)                                         \
                for (Py_ssize_t c = c0; c < c1; c++)                                     \
                    dst[r * dr + c] = src[c * sc + r];                                   \
        }                                                                                \
    }                                                                                    \
}

PLANE(uint8_t)
PLANE(uint16_t)
PLANE(uint64_t)
#if defined(__SSE2__)
/* 4-byte items: 4x4 blocks transposed in SSE registers (16 bytes per load and store),
 * the tile's ragged edges element by element. */
#include <xmmintrin.h>
static void
plane_uint32_t(uint32_t *restrict dst, const uint32_t *restrict src, Py_ssize_t R,
               Py_ssize_t C, Py_ssize_t dr, Py_ssize_t sc)
{
    for (Py_ssize_t r0 = 0; r0 < R; r0 += TILE) {
        Py_ssize_t r1 = r0 + TILE < R ? r0 + TILE : R;
        Py_ssize_t r4 = r0 + ((r1 - r0) & ~(Py_ssize_t)3);
        for (Py_ssize_t c0 = 0; c0 < C; c0 += TILE) {
            Py_ssize_t c1 = c0 + TILE < C ? c0 + TILE : C;
            Py_ssize_t c4 = c0 + ((c1 - c0) & ~(Py_ssize_t)3);
            for (Py_ssize_t r = r0; r < r4; r += 4) {
                for (Py_ssize_t c = c0; c < c4; c += 4) {
                    const float *s = (const float *)(src + c * sc + r);
                    __m128 a = _mm_loadu_ps(s), b = _mm_loadu_ps(s + sc);
                    __m128 e = _mm_loadu_ps(s + 2 * sc), f = _mm_loadu_ps(s + 3 * sc);
                    _MM_TRANSPOSE4_PS(a, b, e, f);
                    float *d = (float *)(dst + r * dr + c);
                    _mm_storeu_ps(d, a);
                    _mm_storeu_ps(d + dr, b);
                    _mm_storeu_ps(d + 2 * dr, e);
                    _mm_storeu_ps(d + 3 * dr, f);
                }
                for (Py_ssize_t rr = r; rr < r + 4; rr++)
                    for (Py_ssize_t c = c4; c < c1; c++)
                        dst[rr * dr + c] = src[c * sc + rr];
            }
            for (Py_ssize_t r = r4; r < r1; r++)
                for (Py_ssize_t c = c0; c < c1; c++)
                    dst[r * dr + c] = src[c * sc + r];
        }
    }
}
#else
PLANE(uint32_t)
#endif

/* The copy in units of TILE rows (of dim p) of one plane: unit u is band u % bands of
 * plane u / bands, the planes numbered over the outer dims in C order. */
typedef struct {
    char *s0, *d0;
    Py_ssize_t R, C, dr, sc, bands;
    npy_intp is;
    int no;
    npy_intp odims[EM_MAX_DIMS], oss[EM_MAX_DIMS], ods[EM_MAX_DIMS];
} tcopy_job;

static void
tcopy_range(void *ctx, int64_t a, int64_t b)
{
    tcopy_job *j = ctx;
    for (int64_t u = a; u < b; u++) {
        int64_t plane = u / j->bands, r0 = (u % j->bands) * TILE;
        Py_ssize_t rows = j->R - r0 < TILE ? j->R - r0 : TILE;
        char *sp = j->s0 + r0 * j->is, *dp = j->d0 + r0 * j->dr * j->is;
        for (int k = j->no - 1; k >= 0; k--) {
            int64_t i = plane % j->odims[k];
            plane /= j->odims[k];
            sp += i * j->oss[k];
            dp += i * j->ods[k];
        }
        switch (j->is) {
        case 1: plane_uint8_t((void *)dp, (void *)sp, rows, j->C, j->dr, j->sc); break;
        case 2: plane_uint16_t((void *)dp, (void *)sp, rows, j->C, j->dr, j->sc); break;
        case 4: plane_uint32_t((void *)dp, (void *)sp, rows, j->C, j->dr, j->sc); break;
        default: plane_uint64_t((void *)dp, (void *)sp, rows, j->C, j->dr, j->sc); break;
        }
    }
}

/* A copy these loops take: dst C-contiguous, of src's shape and dtype (aligned, native
 * byte order, items of 1, 2, 4 or 8 bytes, no objects). */
static bool
plain_pair(PyArrayObject *dst, PyArrayObject *src)
{
    int nd = PyArray_NDIM(dst);
    npy_intp is = PyArray_ITEMSIZE(dst);
    return nd == PyArray_NDIM(src) && PyArray_IS_C_CONTIGUOUS(dst) &&
           PyArray_EquivTypes(PyArray_DESCR(dst), PyArray_DESCR(src)) &&
           PyArray_DESCR(dst)->type_num < NPY_OBJECT && PyArray_ISALIGNED(src) &&
           PyArray_ISALIGNED(dst) && PyArray_ISNOTSWAPPED(src) &&
           PyArray_ISNOTSWAPPED(dst) && (is == 1 || is == 2 || is == 4 || is == 8) &&
           memcmp(PyArray_DIMS(dst), PyArray_DIMS(src), sizeof(npy_intp) * nd) == 0;
}

/* The source's extent (non-negative strides only) does not meet the destination's. */
static bool
apart(PyArrayObject *dst, PyArrayObject *src)
{
    const npy_intp *dims = PyArray_DIMS(src), *ss = PyArray_STRIDES(src);
    const char *s0 = PyArray_BYTES(src), *s1 = s0 + PyArray_ITEMSIZE(src);
    const char *d0 = PyArray_BYTES(dst), *d1 = d0 + PyArray_NBYTES(dst);
    for (int d = 0; d < PyArray_NDIM(src); d++) {
        if (ss[d] < 0)
            return false;
        s1 += ss[d] * (dims[d] - 1);
    }
    return !(s0 < d1 && d0 < s1);
}

int
em_transpose_copy(PyArrayObject *dst, PyArrayObject *src)
{
    int nd = PyArray_NDIM(dst);
    npy_intp is = PyArray_ITEMSIZE(dst);
    if (nd < 2 || !plain_pair(dst, src))
        return 0;
    const npy_intp *dims = PyArray_DIMS(dst), *ss = PyArray_STRIDES(src);
    const npy_intp *ds = PyArray_STRIDES(dst);
    int last = nd - 1, p = -1;
    /* the source's unit-stride dim, before the last one; the last dim read far apart */
    for (int d = 0; d < last; d++)
        if (ss[d] == is && dims[d] > 1)
            p = d;
    if (p < 0 || dims[p] < 8 || dims[last] < 8 || ss[last] % is != 0 || ss[last] <= is)
        return 0;
    if (!apart(dst, src))
        return 0;
    char *s0 = PyArray_BYTES(src), *d0 = PyArray_BYTES(dst);
    /* the outer dims (all but p and last) */
    tcopy_job j = {.s0 = s0, .d0 = d0, .R = dims[p], .C = dims[last], .dr = ds[p] / is,
                   .sc = ss[last] / is, .is = is, .no = 0};
    for (int d = 0; d < last; d++)
        if (d != p) {
            j.odims[j.no] = dims[d];
            j.oss[j.no] = ss[d];
            j.ods[j.no++] = ds[d];
        }
    int64_t planes = 1;
    for (int k = 0; k < j.no; k++)
        planes *= j.odims[k];
    j.bands = (j.R + TILE - 1) / TILE;
    /* units of TILE rows of one plane, in fixed chunks (em_run_chunked): a copy, so any
     * split gives the same bytes */
    return em_run_chunked(tcopy_range, &j, planes * j.bands, TILE * j.C) < 0 ? -1 : 1;
}

/* ------------------------------------------------------------------ other strided copies
 *
 * A same-dtype copy of another layout whose last dim is contiguous (permutes keeping the
 * last dim, row slices, broadcasts of rows, plain clones) into a C-contiguous destination,
 * from EM_NOGIL_FROM elements: the destination's rows are the units of em_run_chunked's
 * fixed chunks, one memcpy each. A source read with a step along its last dim stays
 * with NumPy (its strided loops measured 3x faster than a scalar row loop here). */
typedef struct {
    const char *s0;
    char *d0;
    int outer;                     /* dims before the last */
    npy_intp dims[EM_MAX_DIMS], ss[EM_MAX_DIMS];
    npy_intp is, n;                /* item size, row length */
} scopy_job;

static void
scopy_range(void *ctx, int64_t a, int64_t b)
{
    scopy_job *j = ctx;
    npy_intp idx[EM_MAX_DIMS];
    const char *sp = j->s0;
    int64_t r = a;
    for (int k = j->outer - 1; k >= 0; k--) {
        idx[k] = r % j->dims[k];
        r /= j->dims[k];
        sp += idx[k] * j->ss[k];
    }
    char *dp = j->d0 + a * j->n * j->is;
    for (int64_t u = a; u < b; u++, dp += j->n * j->is) {
        memcpy(dp, sp, (size_t)(j->n * j->is));
        for (int k = j->outer - 1; k >= 0; k--) {
            sp += j->ss[k];
            if (++idx[k] < j->dims[k])
                break;
            sp -= j->ss[k] * j->dims[k];
            idx[k] = 0;
        }
    }
}

int
em_strided_copy(PyArrayObject *dst, PyArrayObject *src)
{
    int nd = PyArray_NDIM(dst);
    npy_intp is = PyArray_ITEMSIZE(dst);
    /* (plain_pair first: it checks that src has dst's dims) */
    if (nd < 1 || PyArray_SIZE(dst) < EM_NOGIL_FROM || !plain_pair(dst, src) ||
        (PyArray_DIMS(src)[nd - 1] > 1 && PyArray_STRIDES(src)[nd - 1] != is) ||
        !apart(dst, src))
        return 0;
    const npy_intp *dims = PyArray_DIMS(dst), *ss = PyArray_STRIDES(src);
    const char *s0 = PyArray_BYTES(src);
    char *d0 = PyArray_BYTES(dst);
    scopy_job j = {.s0 = s0, .d0 = d0, .outer = nd - 1, .is = is, .n = dims[nd - 1]};
    /* trailing dims the source reads as one run join the row, up to EM_POOL_CHUNK
     * elements (short rows cost a call each; longer ones would leave too few units) */
    while (j.outer > 0 && ss[j.outer - 1] == is * j.n &&
           j.n * dims[j.outer - 1] <= EM_POOL_CHUNK) {
        j.n *= dims[j.outer - 1];
        j.outer--;
    }
    int64_t rows = 1;
    for (int d = 0; d < j.outer; d++) {
        j.dims[d] = dims[d];
        j.ss[d] = ss[d];
        rows *= dims[d];
    }
    return em_run_chunked(scopy_range, &j, rows, j.n) < 0 ? -1 : 1;
}
