/* blas.c: matrix products of compiled graphs, straight into the BLAS NumPy bundles.
 *
 * NumPy 2's wheels ship OpenBLAS as scipy_openblas64 (symbols prefixed scipy_ and
 * suffixed 64_, 64-bit integers). _C._set_blas(path) finds its cblas_?gemm; a
 * product whose operands BLAS can read directly (row- or column-major 2-D views,
 * batches of them) is then one call per matrix, with no NumPy machinery on the way.
 * Anything else (no BLAS found, other layouts) returns 1 and the caller uses
 * numpy.matmul.
 */
#include "runtime/runtime.h"

#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

typedef void (*sgemm64_t)(int, int, int, int64_t, int64_t, int64_t, float, const float *,
                          int64_t, const float *, int64_t, float, float *, int64_t);
typedef void (*dgemm64_t)(int, int, int, int64_t, int64_t, int64_t, double, const double *,
                          int64_t, const double *, int64_t, double, double *, int64_t);
typedef void (*sgemm32_t)(int, int, int, int, int, int, float, const float *, int,
                          const float *, int, float, float *, int);
typedef void (*dgemm32_t)(int, int, int, int, int, int, double, const double *, int,
                          const double *, int, double, double *, int);
typedef void (*sgemv64_t)(int, int, int64_t, int64_t, float, const float *, int64_t,
                          const float *, int64_t, float, float *, int64_t);
typedef void (*dgemv64_t)(int, int, int64_t, int64_t, double, const double *, int64_t,
                          const double *, int64_t, double, double *, int64_t);
typedef void (*sgemv32_t)(int, int, int, int, float, const float *, int, const float *, int,
                          float, float *, int);
typedef void (*dgemv32_t)(int, int, int, int, double, const double *, int, const double *,
                          int, double, double *, int);

static void *sgemm, *dgemm, *sgemv, *dgemv;
static bool ilp64;
static PyObject *blas_name;
/* openblas_set_num_threads of that library, and the count ember.set_num_threads asked
 * for (0: never asked, leave the library's own setting) */
static void (*blas_set_threads)(int);
static int (*blas_get_threads)(void);
static int blas_threads;

/* ember.set_num_threads(n) also sets the threads of the BLAS that matrix products run
 * on (NumPy's, shared by eager and compiled products), as torch.set_num_threads does
 * for PyTorch's. */
void
em_blas_set_threads(int n)
{
    blas_threads = n;
    if (blas_set_threads != NULL)
        blas_set_threads(n);
}

static PyObject *
set_blas(PyObject *self, PyObject *path)
{
    const char *p = PyUnicode_AsUTF8(path);
    if (p == NULL)
        return NULL;
    void *h = dlopen(p, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (h == NULL)
        h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        Py_RETURN_FALSE;
    static const struct {
        const char *s, *d, *threads, *get_threads, *sv, *dv;
        bool ilp64;
    } names[] = {
        {"scipy_cblas_sgemm64_", "scipy_cblas_dgemm64_", "scipy_openblas_set_num_threads64_",
         "scipy_openblas_get_num_threads64_", "scipy_cblas_sgemv64_", "scipy_cblas_dgemv64_",
         true},
        {"cblas_sgemm64_", "cblas_dgemm64_", "openblas_set_num_threads64_",
         "openblas_get_num_threads64_", "cblas_sgemv64_", "cblas_dgemv64_", true},
        {"scipy_cblas_sgemm", "scipy_cblas_dgemm", "scipy_openblas_set_num_threads",
         "scipy_openblas_get_num_threads", "scipy_cblas_sgemv", "scipy_cblas_dgemv", false},
        {"cblas_sgemm", "cblas_dgemm", "openblas_set_num_threads", "openblas_get_num_threads",
         "cblas_sgemv", "cblas_dgemv", false},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *s = dlsym(h, names[i].s), *d = dlsym(h, names[i].d);
        if (s != NULL && d != NULL) {
            sgemm = s;
            dgemm = d;
            sgemv = dlsym(h, names[i].sv);
            dgemv = dlsym(h, names[i].dv);
            if (sgemv == NULL || dgemv == NULL)
                sgemv = dgemv = NULL;
            ilp64 = names[i].ilp64;
            *(void **)&blas_set_threads = dlsym(h, names[i].threads);
            *(void **)&blas_get_threads = dlsym(h, names[i].get_threads);
            if (blas_set_threads != NULL && blas_threads > 0)
                blas_set_threads(blas_threads);
            Py_XSETREF(blas_name, PyUnicode_FromString(names[i].s));
            Py_RETURN_TRUE;
        }
    }
    Py_RETURN_FALSE;
}

static PyObject *
blas_info(PyObject *self, PyObject *noargs)
{
    if (blas_name == NULL)
        Py_RETURN_NONE;
    Py_INCREF(blas_name);
    return blas_name;
}

/* How BLAS reads a (rows x cols) view with strides (rs, cs): 0 no-trans, 1 trans,
 * -1 unreadable; *ld receives the leading dimension. */
static int
layout(Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t rs, Py_ssize_t cs, int64_t *ld)
{
    if (cs == 1 || cols == 1) {
        Py_ssize_t l = rows == 1 ? cols : rs;
        if (l >= cols && l >= 1) {
            *ld = l;
            return 0;
        }
    }
    if (rs == 1 || rows == 1) {
        Py_ssize_t l = cols == 1 ? rows : cs;
        if (l >= rows && l >= 1) {
            *ld = l;
            return 1;
        }
    }
    return -1;
}

/* A product of one row, c (1 x n) = a (1 x k) op(b) (k x n) + beta c, as a matrix-vector
 * product:
 * y = op(b)^T x, b read as stored (rows n of k when transposed, else rows k of n). A
 * KV-cache decode's Linear layers are all such products (one token), which BLAS's gemm
 * runs about 4x slower than its gemv. Which routine a product takes depends on its
 * shape alone (one output row per matrix), never on the thread count. */
static void
gemv_row(em_dtype_t t, int ta, int tb, int64_t n, int64_t k, const char *a, int64_t lda,
         const char *b, int64_t ldb, double beta, char *c)
{
    int op = tb ? NO_TRANS : TRANS;
    int64_t rows = tb ? n : k, cols = tb ? k : n, inc = ta ? lda : 1;
    /* (BLAS may scale y by beta = 0 rather than overwrite it: no NaN of the buffer's
     * last contents may survive) */
    if (beta == 0.0)
        memset(c, 0, (size_t)n * (t == EM_FLOAT32 ? sizeof(float) : sizeof(double)));
    if (t == EM_FLOAT32) {
        if (ilp64)
            ((sgemv64_t)sgemv)(ROW_MAJOR, op, rows, cols, 1.0f, (const float *)b, ldb,
                               (const float *)a, inc, (float)beta, (float *)c, 1);
        else
            ((sgemv32_t)sgemv)(ROW_MAJOR, op, (int)rows, (int)cols, 1.0f, (const float *)b,
                               (int)ldb, (const float *)a, (int)inc, (float)beta, (float *)c,
                               1);
    }
    else {
        if (ilp64)
            ((dgemv64_t)dgemv)(ROW_MAJOR, op, rows, cols, 1.0, (const double *)b, ldb,
                               (const double *)a, inc, beta, (double *)c, 1);
        else
            ((dgemv32_t)dgemv)(ROW_MAJOR, op, (int)rows, (int)cols, 1.0, (const double *)b,
                               (int)ldb, (const double *)a, (int)inc, beta, (double *)c, 1);
    }
}

/* c = op(a) @ op(b) + beta c, row-major, one BLAS call (float32 or float64; the sizes
 * fit the library's integers). */
static void
gemm_beta(em_dtype_t t, int ta, int tb, int64_t m, int64_t n, int64_t k, const void *a,
          int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
    if (m == 1 && sgemv != NULL) {
        gemv_row(t, ta, tb, n, k, a, lda, b, ldb, beta, c);
        return;
    }
    int A = ta ? TRANS : NO_TRANS, B = tb ? TRANS : NO_TRANS;
    if (t == EM_FLOAT32) {
        if (ilp64)
            ((sgemm64_t)sgemm)(ROW_MAJOR, A, B, m, n, k, 1.0f, a, lda, b, ldb, (float)beta, c,
                               ldc);
        else
            ((sgemm32_t)sgemm)(ROW_MAJOR, A, B, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b,
                               (int)ldb, (float)beta, c, (int)ldc);
    }
    else {
        if (ilp64)
            ((dgemm64_t)dgemm)(ROW_MAJOR, A, B, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
        else
            ((dgemm32_t)dgemm)(ROW_MAJOR, A, B, (int)m, (int)n, (int)k, 1.0, a, (int)lda, b,
                               (int)ldb, beta, c, (int)ldc);
    }
}

/* c = op(a) @ op(b) */
static inline void
gemm(em_dtype_t t, int ta, int tb, int64_t m, int64_t n, int64_t k, const char *a, int64_t lda,
     const char *b, int64_t ldb, char *c, int64_t ldc)
{
    gemm_beta(t, ta, tb, m, n, k, a, lda, b, ldb, 0.0, c, ldc);
}

/* A product split across Ember's thread pool: `batch` matrices (or one: the folded
 * product), each in blocks of `rows` rows and `cols` columns of the output (one of the
 * two whole); unit u is block u % blocks of matrix u / blocks, one single-threaded BLAS
 * call. */
typedef struct {
    em_Tensor *a, *b, *out;
    em_dtype_t t;
    int ta, tb, itemsize;
    int64_t m, n, k, lda, ldb, rows, cols, blocks;
    bool fold;
    int64_t kc;                    /* k split in chunks of kc (0: not split) */
    char *part;                    /* the chunks' (m x n) partial products */
    /* epilogues (or NULL), run on each panel of rows (a row of blocks) by the thread
     * that completes its last block: panel_done counts the blocks done per panel */
    em_epilogue_t *ep;
    atomic_int *panel_done;
} gemm_job_t;

/* Element offsets of batch entry i in a and b (batch dims aligned from the right, size
 * 1 broadcast). */
static void
batch_offsets(em_Tensor *a, em_Tensor *b, em_Tensor *out, Py_ssize_t i, Py_ssize_t *ao,
              Py_ssize_t *bo)
{
    int nd = out->ndim, na = a->ndim, nb = b->ndim;
    Py_ssize_t rem = i;
    *ao = *bo = 0;
    for (int d = nd - 3; d >= 0; d--) {
        Py_ssize_t idx = rem % out->sizes[d];
        rem /= out->sizes[d];
        int da = d - (nd - na), db = d - (nd - nb);
        if (da >= 0 && a->sizes[da] != 1)
            *ao += idx * a->strides[da];
        if (db >= 0 && b->sizes[db] != 1)
            *bo += idx * b->strides[db];
    }
}

/* unit u: the product of chunk u of the contraction, [u kc, u kc + kc), into partial
 * u (one matrix: the k-split runs on unbatched products only) */
static void
gemm_kchunks(void *ctx, int64_t lo, int64_t hi)
{
    gemm_job_t *j = ctx;
    const char *abase = PyArray_BYTES(j->a->array), *bbase = PyArray_BYTES(j->b->array);
    for (int64_t u = lo; u < hi; u++) {
        int64_t k0 = u * j->kc, kk = j->k - k0 < j->kc ? j->k - k0 : j->kc;
        /* column k0 of a row-major a, row k0 of a transposed one; row k0 of b likewise */
        int64_t ao = j->ta ? k0 * j->lda : k0, bo = j->tb ? k0 : k0 * j->ldb;
        gemm(j->t, j->ta, j->tb, j->m, j->n, kk, abase + ao * j->itemsize, j->lda,
             bbase + bo * j->itemsize, j->ldb, j->part + u * j->m * j->n * j->itemsize, j->n);
    }
}

static void
gemm_units(void *ctx, int64_t lo, int64_t hi)
{
    gemm_job_t *j = ctx;
    const char *abase = PyArray_BYTES(j->a->array), *bbase = PyArray_BYTES(j->b->array);
    char *cbase = PyArray_BYTES(j->out->array);
    int64_t rblocks = (j->m + j->rows - 1) / j->rows;
    int64_t cblocks = j->blocks / rblocks;
    for (int64_t u = lo; u < hi; u++) {
        int64_t i = u / j->blocks, blk = u % j->blocks;
        /* with epilogues, the blocks of a panel of rows are consecutive units, so that
         * panels complete in order; else those of a column of blocks */
        int64_t row = j->ep != NULL ? blk / cblocks : blk % rblocks;
        int64_t col = j->ep != NULL ? blk % cblocks : blk / rblocks;
        int64_t r0 = row * j->rows, c0 = col * j->cols;
        int64_t r = j->m - r0 < j->rows ? j->m - r0 : j->rows;
        int64_t c = j->n - c0 < j->cols ? j->n - c0 : j->cols;
        Py_ssize_t ao = 0, bo = 0;
        if (!j->fold)
            batch_offsets(j->a, j->b, j->out, (Py_ssize_t)i, &ao, &bo);
        /* row r0 of op(a): r0 rows down a row-major a, r0 columns along a transposed one;
         * column c0 of op(b) likewise */
        ao += j->ta ? r0 : r0 * j->lda;
        bo += j->tb ? c0 * j->ldb : c0;
        gemm(j->t, j->ta, j->tb, r, c, j->k, abase + ao * j->itemsize, j->lda,
             bbase + bo * j->itemsize, j->ldb,
             cbase + (((int64_t)i * j->m + r0) * j->n + c0) * j->itemsize, j->n);
        if (j->ep != NULL &&
            atomic_fetch_add(&j->panel_done[i * rblocks + row], 1) + 1 == cblocks) {
            /* the last block of rows [g0, g1) of the product is made (and the others'
             * writes are seen: the counter orders them): its epilogues' outer indices
             * over those rows (panels are multiples of every band), while they are in
             * cache */
            int64_t g0 = (int64_t)i * j->m + r0, g1 = g0 + r;
            for (int e = 0; e < j->ep->n; e++)
                j->ep->fn[e](j->ep->args[e], g0 / j->ep->band[e], g1 / j->ep->band[e]);
        }
    }
}

/* A compiled graph's products run as single-threaded BLAS calls on Ember's pool, BLAS's
 * own threads set to 1 meanwhile, so that the pool and BLAS never run threads at once
 * (a kernel's workers spinning while BLAS's threads compute would put more threads than
 * cores). Each matrix of the product is cut into a grid of blocks fixed by its shape
 * alone: about one per GEMM_BLOCK_MACS multiply-adds (at most MAX_GEMM_BLOCKS), rows
 * of the output (a multiple of ROW_ALIGN) by columns (a multiple of COL_ALIGN), in the
 * proportions that pack the least again (a convolution's (channels x batch*pixels)
 * product, 16 rows by 16384 columns, is cut in columns only). The blocks are the same on any number of threads, so
 * results are identical at every thread count (OpenBLAS's own threading splits by its
 * thread count, and its small-matrix kernels round differently). A batch of matrices
 * (batch x heads) is split by matrix too. Products of at least POOL_GEMM_MIN
 * multiply-adds spread their blocks over the pool's threads; smaller ones run them in
 * order on the calling thread. */
#define POOL_GEMM_MIN (1 << 18)
#define GEMM_BLOCK_MACS (1 << 22)
#define MAX_GEMM_BLOCKS 64
#define ROW_ALIGN 16
#define COL_ALIGN 64

static Py_ssize_t pool_gemm_calls;     /* products run on the pool (_blas_pool_calls) */
static Py_ssize_t epilogue_gemm_calls;  /* products that ran their epilogues by blocks */
static Py_ssize_t blas_switches;        /* products that set BLAS's threads to 1 */

static int64_t
ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* A product whose output is too small to cut in enough blocks (at most KSPLIT_OUT
 * elements) but whose contraction is long (a Linear's weight gradient, g^T x over a
 * batch of rows: 64 x 65536 x 64) is split along k instead, in at most KSPLIT_MAX
 * chunks of a multiple of KSPLIT_ALIGN fixed by the shape: each chunk's product into
 * its own partial, the partials then added in chunk order. Cutting rows would pack the
 * long operand once per block. */
#define KSPLIT_OUT (1 << 16)
#define KSPLIT_MAX 16
#define KSPLIT_ALIGN 256

/* o[i] = the sum of the chunks' partials p[u mn + i], in chunk order */
#define ADD_PARTIALS(T)                                                                  \
static void                                                                              \
add_partials_##T(T *o, const T *p, size_t mn, int64_t chunks)                            \
{                                                                                        \
    for (size_t i = 0; i < mn; i++) {                                                    \
        T v = p[i];                                                                      \
        for (int64_t u = 1; u < chunks; u++)                                             \
            v += p[u * mn + i];                                                          \
        o[i] = v;                                                                        \
    }                                                                                    \
}

ADD_PARTIALS(float)
ADD_PARTIALS(double)

static int
pool_gemm_ksplit(gemm_job_t *j, int how)
{
    double macs = (double)j->m * j->n * j->k;
    int64_t chunks = (int64_t)(macs / GEMM_BLOCK_MACS);
    if (chunks > KSPLIT_MAX)
        chunks = KSPLIT_MAX;
    j->kc = ceil_div(ceil_div(j->k, chunks), KSPLIT_ALIGN) * KSPLIT_ALIGN;
    chunks = ceil_div(j->k, j->kc);
    size_t mn = (size_t)(j->m * j->n), isz = (size_t)j->itemsize;
    j->part = malloc(mn * isz * (size_t)chunks);
    if (j->part == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    bool parallel = em_pool_threads() > 1 && (how == EM_GEMM_POOL || macs >= POOL_GEMM_MIN);
    pool_gemm_calls += parallel;
    int st = em_parallel_for(gemm_kchunks, j, chunks, 1, parallel);
    if (st == 0) {
        char *c = PyArray_BYTES(j->out->array);
        if (j->t == EM_FLOAT32)
            add_partials_float((float *)c, (const float *)j->part, mn, chunks);
        else
            add_partials_double((double *)c, (const double *)j->part, mn, chunks);
    }
    free(j->part);
    return st;
}

static int64_t
gcd(int64_t a, int64_t b)
{
    while (b != 0) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The rows a block of a product with epilogues is a multiple of (ROW_ALIGN and every
 * epilogue's band), or 0 when blocks of whole bands cannot be cut: a batch of
 * matrices whose rows a band crosses. At least m means one block per matrix. */
static int64_t
epilogue_align(const gemm_job_t *j, int64_t batch)
{
    int64_t align = ROW_ALIGN;
    for (int e = 0; e < j->ep->n; e++) {
        int64_t band = j->ep->band[e];
        if (band <= 0 || (batch > 1 && j->m % band != 0) || (batch * j->m) % band != 0)
            return 0;
    }
    for (int e = 0; e < j->ep->n && align < j->m; e++)
        align = align / gcd(align, j->ep->band[e]) * j->ep->band[e];
    return align < j->m ? align : j->m;
}

/* BLAS's own threads set to 1 for the single-threaded calls of a product of `macs`
 * multiply-adds a matrix: the count blas_restore_after puts back (0: nothing changed).
 * Below POOL_GEMM_MIN a call is single-threaded already (OpenBLAS runs products of at
 * most 4 x 65536 multiply-adds on the calling thread: its GEMM_MULTITHREAD_THRESHOLD
 * times SMP_THRESHOLD_MIN), so the two library calls a product would cost are skipped. */
static int
blas_single_for(double macs)
{
    if (macs < POOL_GEMM_MIN)
        return 0;
    int threads = blas_threads;
    if (threads == 0 && blas_get_threads != NULL)
        threads = blas_get_threads();
    if (threads == 1)
        return 0;
    blas_set_threads(1);
    blas_switches++;
    return threads > 0 ? threads : 1;
}

static void
blas_restore_after(int threads)
{
    if (threads > 0)
        blas_set_threads(threads);
}

static int
pool_gemm(gemm_job_t *j, int64_t batch, int how)
{
    /* how (EM_GEMM_*, max-autotune's pick): one BLAS call, the pool whenever it has
     * threads, or the pool for large products */
    if (blas_set_threads == NULL || how == EM_GEMM_ONE_CALL)
        return 1;
    double macs = (double)j->m * j->n * j->k;
    int64_t per = macs >= (double)GEMM_BLOCK_MACS * MAX_GEMM_BLOCKS
                      ? MAX_GEMM_BLOCKS
                      : (int64_t)(macs / GEMM_BLOCK_MACS) + 1;     /* blocks a matrix */
    /* each row block packs again the columns of b it reads, each column block the rows
     * of a: r x c blocks pack r * k * n + c * m * k elements, least (for r * c = per)
     * at r / c = m / n */
    int64_t rmax = ceil_div(j->m, ROW_ALIGN), cmax = j->n / COL_ALIGN > 1 ? j->n / COL_ALIGN : 1;
    int64_t rblocks = (int64_t)(sqrt((double)per * j->m / j->n) + 0.5);
    if (rblocks < 1)
        rblocks = 1;
    if (rblocks > rmax)
        rblocks = rmax;
    int64_t cblocks = ceil_div(per, rblocks);
    if (cblocks > cmax) {
        cblocks = cmax;
        rblocks = ceil_div(per, cblocks) < rmax ? ceil_div(per, cblocks) : rmax;
    }
    int64_t align = ROW_ALIGN;
    if (j->ep != NULL && (align = epilogue_align(j, batch)) == 0) {
        j->ep = NULL;           /* the caller runs the epilogues after the product */
        align = ROW_ALIGN;
    }
    /* with epilogues, rows in multiples of every band (the grid otherwise as without:
     * no block packs more than it would) */
    j->rows = ceil_div(ceil_div(j->m, rblocks), align) * align;
    if (j->rows > j->m)
        j->rows = j->m;
    j->cols = ceil_div(ceil_div(j->n, cblocks), COL_ALIGN) * COL_ALIGN;
    if (j->cols > j->n)
        j->cols = j->n;
    rblocks = ceil_div(j->m, j->rows);
    j->blocks = rblocks * ceil_div(j->n, j->cols);
    if (batch == 1 && !j->fold && j->blocks < per && (double)j->m * j->n <= KSPLIT_OUT &&
        j->k >= 2 * KSPLIT_ALIGN && macs >= 2.0 * GEMM_BLOCK_MACS) {
        int threads = blas_single_for(macs);
        int st = pool_gemm_ksplit(j, how);
        blas_restore_after(threads);
        return st;
    }
    bool parallel = em_pool_threads() > 1 &&
                    (how == EM_GEMM_POOL || (double)batch * macs >= POOL_GEMM_MIN);
    /* on the pool, the epilogues run after the product, split across the pool: by
     * panels, the last panels' epilogues would run alone on one thread (not measured
     * reliably yet, so not done; the grid stays as cut above either way) */
    if (j->ep != NULL && parallel)
        j->ep = NULL;
    j->panel_done = NULL;
    if (j->ep != NULL &&
        (j->panel_done = PyMem_RawCalloc((size_t)(batch * rblocks), sizeof(atomic_int))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    pool_gemm_calls += parallel;
    int threads = blas_single_for(macs);
    int st = em_parallel_for(gemm_units, j, batch * j->blocks, 1, parallel);
    blas_restore_after(threads);
    if (j->ep != NULL) {
        PyMem_RawFree(j->panel_done);
        j->ep->done = true;
        epilogue_gemm_calls++;
    }
    return st;
}

/* out = a @ b with a (..., m, k), b (..., k, n), out contiguous (..., m, n), batch
 * dims equal or broadcast (stride 0). Returns 0 done, 1 not handled here, -1 when a
 * signal handler raised while it ran on the pool. */
int
em_blas_matmul(em_Tensor *a, em_Tensor *b, em_Tensor *out)
{
    return em_blas_matmul_how(a, b, out, EM_GEMM_AUTO);
}

int
em_blas_matmul_how(em_Tensor *a, em_Tensor *b, em_Tensor *out, int how)
{
    return em_blas_matmul_ep(a, b, out, how, NULL);
}

int
em_blas_matmul_ep(em_Tensor *a, em_Tensor *b, em_Tensor *out, int how, em_epilogue_t *ep)
{
    if (ep != NULL)
        ep->done = false;
    if (ep != NULL && (ep->n <= 0 || ep->n > EM_MAX_EPILOGUES))
        ep = NULL;
    if (sgemm == NULL || (out->dtype != EM_FLOAT32 && out->dtype != EM_FLOAT64) ||
        a->dtype != out->dtype || b->dtype != out->dtype || a->ndim < 2 || b->ndim < 2 ||
        out->ndim != (a->ndim > b->ndim ? a->ndim : b->ndim) || out->numel == 0)
        return 1;
    int nd = out->ndim, na = a->ndim, nb = b->ndim;
    int64_t m = a->sizes[na - 2], k = a->sizes[na - 1], n = b->sizes[nb - 1];
    if (k == 0 || b->sizes[nb - 2] != k)
        return 1;
    int64_t lda, ldb;
    int ta = layout(m, k, a->strides[na - 2], a->strides[na - 1], &lda);
    int tb = layout(k, n, b->strides[nb - 2], b->strides[nb - 1], &ldb);
    if (ta < 0 || tb < 0)
        return 1;
    Py_ssize_t batch = out->numel / (m * n);
    int itemsize = em_dtypes[out->dtype]->itemsize;
    const char *abase = PyArray_BYTES(a->array), *bbase = PyArray_BYTES(b->array);
    char *cbase = PyArray_BYTES(out->array);
    /* batch dims are aligned from the right; a missing or size-1 dim broadcasts.
     * One matrix b for every batch (a Linear's weight) with the batches of a stacked
     * row after row is a single (batch * m) x k product. */
    bool fold = batch > 1 && ta == 0 && (ilp64 || batch * m <= INT32_MAX);
    Py_ssize_t expect = m * lda;
    for (int d = nd - 3; fold && d >= 0; d--) {
        int da = d - (nd - na), db = d - (nd - nb);
        if (db >= 0 && b->sizes[db] != 1 && b->strides[db] != 0)
            fold = false;
        else if (da >= 0 && a->sizes[da] != 1) {
            fold = a->sizes[da] == out->sizes[d] && a->strides[da] == expect;
            expect *= a->sizes[da];
        }
        else if (out->sizes[d] != 1)
            fold = false;   /* a broadcast along a batch of b's zero-stride copies: its
                             * rows are not batch * m stacked ones */
    }
    gemm_job_t job = {a, b, out, out->dtype, ta, tb, itemsize, fold ? batch * m : m, n, k,
                      lda, ldb, 0, 0, 0, fold, 0, NULL, ep, NULL};
    int st = pool_gemm(&job, fold ? 1 : batch, how);
    if (st != 1)
        return st;
    /* EM_GEMM_ONE_CALL: one call on one thread (BLAS's own threads would compete with
     * the pool's spinning workers for the cores) */
    bool one = how == EM_GEMM_ONE_CALL && blas_set_threads != NULL && blas_threads > 1;
    if (one)
        blas_set_threads(1);
    if (fold) {
        Py_BEGIN_ALLOW_THREADS
        gemm(out->dtype, 0, tb, batch * m, n, k, abase, lda, bbase, ldb, cbase, n);
        Py_END_ALLOW_THREADS
        if (one)
            blas_set_threads(blas_threads);
        return 0;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < batch; i++) {
        Py_ssize_t ao, bo;
        batch_offsets(a, b, out, i, &ao, &bo);
        gemm(out->dtype, ta, tb, m, n, k, abase + ao * itemsize, lda, bbase + bo * itemsize, ldb,
             cbase + i * m * n * itemsize, n);
    }
    Py_END_ALLOW_THREADS
    if (one)
        blas_set_threads(blas_threads);
    return 0;
}

static PyObject *
blas_pool_calls(PyObject *self, PyObject *noargs)
{
    return PyLong_FromSsize_t(pool_gemm_calls);
}

static PyObject *
blas_epilogue_calls(PyObject *self, PyObject *noargs)
{
    return PyLong_FromSsize_t(epilogue_gemm_calls);
}

static PyObject *
blas_thread_switches(PyObject *self, PyObject *noargs)
{
    return PyLong_FromSsize_t(blas_switches);
}

static PyMethodDef blas_methods[] = {
    {"_set_blas", set_blas, METH_O, "_set_blas(path): use this library's cblas_?gemm."},
    {"_blas_info", blas_info, METH_NOARGS, "The gemm symbol compiled graphs call, or None."},
    {"_blas_pool_calls", blas_pool_calls, METH_NOARGS,
     "How many products of compiled graphs ran split across Ember's pool."},
    {"_blas_thread_switches", blas_thread_switches, METH_NOARGS,
     "How many products set BLAS's own threads to 1 around their single-threaded calls."},
    {"_blas_epilogue_calls", blas_epilogue_calls, METH_NOARGS,
     "How many products of compiled graphs ran their epilogues on each block of rows."},
    {NULL},
};

int
em_blas_init(PyObject *module)
{
    return PyModule_AddFunctions(module, blas_methods);
}

/* ------------------------------------------------------------------ eager kernels' GEMM
 *
 * The eager convolution (kernels/conv.c) multiplies cache-sized blocks itself, each
 * block one single-threaded call from a thread of Ember's pool: em_blas_single(1)
 * before such a job sets BLAS's own threads to 1 (returning the count to restore),
 * em_blas_single(0)'s counterpart em_blas_restore puts them back. em_blas_gemm is
 * c = op(a) @ op(b) (+ c when accumulate), row-major; false when no BLAS was found. */
bool
em_blas_gemm(em_dtype_t t, int ta, int tb, int64_t m, int64_t n, int64_t k, const void *a,
             int64_t lda, const void *b, int64_t ldb, bool accumulate, void *c, int64_t ldc)
{
    if (sgemm == NULL || (t != EM_FLOAT32 && t != EM_FLOAT64) ||
        (!ilp64 && (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX ||
                    ldb > INT32_MAX || ldc > INT32_MAX)))
        return false;
    gemm_beta(t, ta, tb, m, n, k, a, lda, b, ldb, accumulate ? 1.0 : 0.0, c, ldc);
    return true;
}

bool
em_blas_available(void)
{
    return sgemm != NULL;
}

/* BLAS's threads set to 1 for a pool job of single-threaded calls: returns the count
 * to give em_blas_restore (0: nothing to restore). */
int
em_blas_single(void)
{
    if (blas_set_threads == NULL || blas_threads == 1)
        return 0;
    blas_set_threads(1);
    return blas_threads > 0 ? blas_threads : 1;
}

void
em_blas_restore(int threads)
{
    if (threads > 0 && blas_set_threads != NULL)
        blas_set_threads(threads);
}
