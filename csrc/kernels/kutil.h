/* kutil.h: helpers shared by the kernels (kutil.c): result geometry, copies,
 * PyTorch-worded shape errors, argument reading; and the C loops of cloops.c. */
#ifndef EMBER_KUTIL_H
#define EMBER_KUTIL_H

#include "ember.h"
#include "runtime/runtime.h"

/* The clones of a kernel's hot loops for x86-64's AVX-512 and AVX2 levels (the
 * loader picks the host's); nothing elsewhere or with EM_NO_CLONES. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(EM_NO_CLONES)
#define EM_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define EM_CLONES
#endif

/* Whether a kernel computes geometry only (meta mode or a meta input). */
static inline bool
em_meta_of(em_Tensor *t)
{
    return em_tls.mode == EM_MODE_META || em_is_meta(t);
}

/* What a kernel returns: out, or NULL (out released) when st < 0. */
static inline PyObject *
em_finish(em_Tensor *out, int st)
{
    if (st < 0)
        Py_CLEAR(out);
    return (PyObject *)out;
}

/* A fresh tensor of t's shape and dtype dt, laid out as empty_like(t) would
 * (dense layouts are kept). */
em_Tensor *em_empty_like(em_Tensor *t, em_dtype_t dt, bool meta);
/* A fresh contiguous tensor. */
em_Tensor *em_empty(int ndim, const Py_ssize_t *sizes, em_dtype_t dt, bool meta);

/* A fresh contiguous (real) tensor of t's shape and dtype. */
static inline em_Tensor *
em_empty_contiguous(em_Tensor *t)
{
    return em_empty(t->ndim, t->sizes, t->dtype, false);
}

/* Whether o is a real (not meta), C-contiguous tensor of dtype dt, float32 or float64:
 * the operands the float kernels of batch_norm.c and nn_grad.c read directly. */
static inline bool
em_plain_float(PyObject *o, em_dtype_t dt)
{
    if (!em_Tensor_Check(o))
        return false;
    em_Tensor *t = (em_Tensor *)o;
    return !em_is_meta(t) && t->dtype == dt && (dt == EM_FLOAT32 || dt == EM_FLOAT64) &&
           PyArray_IS_C_CONTIGUOUS(t->array);
}
/* Copies (and casts) src (a Tensor, an array or a number) into dst, unless dst is meta. */
int em_copy_into(em_Tensor *dst, PyObject *src);

/* transpose_copy.c: src copied into the C-contiguous dst of its shape and dtype in
 * cache-sized tiles when src is a permuted dense layout whose unit-stride dim is not
 * the last one, on the thread pool in fixed chunks; 1 when it ran, 0 when the case is not
 * this one, -1 with an exception (a signal handler raised meanwhile). */
int em_transpose_copy(PyArrayObject *dst, PyArrayObject *src);
/* The same for another same-dtype layout whose last dim is contiguous into a
 * C-contiguous dst of at least EM_NOGIL_FROM elements: its rows on the pool in fixed
 * chunks (1, 0 or -1 as above). */
int em_strided_copy(PyArrayObject *dst, PyArrayObject *src);

/* A tuple of ints (already converted by the binder) into out; n receives the length. */
int em_int_list(PyObject *tup, Py_ssize_t *out, int *n, int max);
/* -1 with a RuntimeError unless a result of ndim dims fits EM_MAX_DIMS: every kernel
 * building a geometry with more dims than its input checks before it fills a
 * fixed-size array. The message names `name` (NULL: the dispatcher adds the op's name,
 * which it does not for composites while tracing). */
int em_check_ndim(const char *name, Py_ssize_t ndim);
/* NotImplementedError naming op and t's dtype when t is complex and op's rule does not
 * take complex operands (max, sort, clamp: no order on complex numbers) */
int em_refuse_complex(em_Op *op, PyObject *t);

/* out[..., j, ...] = src[..., idx[..., j, ...], ...] along d, over idx's shape (out
 * has idx's shape; src may be larger in the other dims). idx is int64, in range. */
void em_gather_loop(PyArrayObject *src, PyArrayObject *idx, int d, PyArrayObject *out);
/* A view of arr reversed along d (negative stride). */
PyArrayObject *em_flip_view(PyArrayObject *arr, int d);
/* An array of base's dtype over dims with byte strides, its element 0 at data inside
 * base's memory, writeable when base is; it keeps base alive. New reference. */
PyArrayObject *em_array_view(PyArrayObject *base, int nd, const npy_intp *dims,
                             const npy_intp *strides, char *data);

/* Factories (factory.c): the argument of op's parameter `name` (NULL when op has none);
 * whether a device argument (NULL, None, "cpu", "meta", an ember.device) asks for meta
 * tensors (1, 0, or -1 with an error); a size tuple as a contiguous geometry (PyTorch's
 * error for a negative size); t with requires_grad=True applied (floating dtypes only;
 * NULL passes through). */
PyObject *em_arg(em_Op *op, PyObject **args, const char *name);
int em_device_is_meta(PyObject *device);
int em_sizes_geom(PyObject *sizes, em_Geom *g);
PyObject *em_factory_finish(em_Op *op, PyObject **args, em_Tensor *t);
/* The NumPy Generator behind op's generator argument, or behind ember's default
 * generator (random.c). New reference. */
PyObject *em_numpy_generator(em_Op *op, PyObject **args);

/* Float kernels that compute float16 and bfloat16 in float32 (kutil.c): t's contiguous
 * data (float32 for a half type; a new reference in *hold); where to write the contiguous
 * result t (its data, or for a half type a float32 scratch in *scratch); and the scratch
 * rounded into t (released; 0 when there is none, or -1 with an exception). */
const char *em_float_data(em_Tensor *t, PyArrayObject **hold);
char *em_float_dest(em_Tensor *t, PyArrayObject **scratch);
int em_float_finish(em_Tensor *t, PyArrayObject **scratch);

/* clone(t, memory_format=contiguous_format), dispatched. */
PyObject *em_clone_contiguous(PyObject *t);

/* Kernels' work on the thread pool (kutil.c): fn over `items` independent items
 * (elements, rows, planes) of `unit` elements each, in fixed chunks of whole items of
 * about EM_POOL_CHUNK elements; spread over the pool's threads from EM_POOL_FROM
 * elements (when it has more than one), else in order on this thread (the GIL released
 * from EM_NOGIL_FROM elements, signals checked between chunks). Each item is computed
 * alone and the chunks do not depend on the thread count, so results are identical at
 * any thread count. 0, or -1 with an exception (a signal handler raised). */
#define EM_POOL_CHUNK 32768
#define EM_POOL_FROM 131072
#define EM_NOGIL_FROM 32768
int em_run_chunked(em_range_fn fn, void *ctx, int64_t items, int64_t unit);

/* cloops.c: name's C loop over ins into out (params: the op's scalars); 1 when it ran,
 * 0 when no loop fits (the caller computes otherwise), -1 with an exception. */
int em_cloop(const char *name, PyObject **ins, int nin, em_Tensor *out, const double *params);
/* softmax (log_out: log_softmax) of contiguous float rows along the last dim into out;
 * 1 when it ran, 0 when it does not apply, -1 with an exception. */
int em_softmax_lastdim(em_Tensor *x, em_Tensor *out, int log_out);
/* layer_norm of rows x rows of n contiguous float32 values into y (w, b: n values or
 * NULL); the caller releases the GIL. */
void em_layer_norm_f32(const float *x, const float *w, const float *b, float *y,
                       Py_ssize_t rows, Py_ssize_t n, double eps);
/* y[r] = the sum of row r of rows x n contiguous float32 values (no GIL handling). */
void em_sum_rows_f32(const float *x, float *y, Py_ssize_t rows, Py_ssize_t n);
/* lse[r] = logsumexp of row r, total[r] = its sum (total may be NULL), of rows x n contiguous float32 values
 * (NaN rows give NaN); no GIL handling. */
void em_lse_rows_f32(const float *x, double *lse, double *total, Py_ssize_t rows,
                     Py_ssize_t n);

/* x[indices] = value for tensor indices (a tuple of Tensors and None), in place and
 * without autograd (indexing.c): __setitem__'s path. A tensor value must have self's
 * dtype unless cast (PyTorch's masked_fill case: x[mask] = 0-d tensor). */
int em_index_put_inplace(em_Tensor *self, PyObject *indices, PyObject *value, bool cast);

/* Float lane sums shared by the row kernels (cloops.c, nn_grad.c, conv_loops.c):
 * 16 float lanes as GCC vectors, so every target clone gets full-width operations and
 * the order of the additions is fixed by the code, not by the compiler. The files
 * including these define their optimisation pragma first, and the helpers inline into
 * their (cloned) callers. */
typedef float em_v16f __attribute__((vector_size(64)));
typedef int32_t em_v16i __attribute__((vector_size(64)));
typedef float em_v8f __attribute__((vector_size(32)));
typedef float em_v4f __attribute__((vector_size(16)));
#define EM_LANES 16
#define EM_LANE_CHUNK 1024

/* The 16 lanes of l added as a tree (halves, quarters, then 4 scalars): short rows
 * pay little for their reductions. */
static inline float
em_lanes_total(em_v16f l)
{
    em_v8f a, b;
    memcpy(&a, &l, sizeof a);
    memcpy(&b, (char *)&l + sizeof a, sizeof b);
    a += b;
    em_v4f c, d;
    memcpy(&c, &a, sizeof c);
    memcpy(&d, (char *)&a + sizeof c, sizeof d);
    c += d;
    return (c[0] + c[2]) + (c[1] + c[3]);
}

/* The sum of x[i] - c (sq: of (x[i] - c)^2) over n floats: 16 float lanes over chunks
 * of EM_LANE_CHUNK elements, each chunk's lanes added in order into a double total, so
 * a long row loses no more than a short one. */
static inline double
em_lane_sum_f32(const float *restrict x, Py_ssize_t n, float c, int sq)
{
    double total = 0.0;
    em_v16f cv = {0};
    cv += c;
    for (Py_ssize_t i0 = 0; i0 < n; i0 += EM_LANE_CHUNK) {
        Py_ssize_t i1 = i0 + EM_LANE_CHUNK < n ? i0 + EM_LANE_CHUNK : n, i = i0;
        em_v16f l = {0};
        for (; i + EM_LANES <= i1; i += EM_LANES) {
            em_v16f v;
            memcpy(&v, x + i, sizeof v);
            v -= cv;
            l += sq ? v * v : v;
        }
        for (; i < i1; i++) {
            float d = x[i] - c;
            total += sq ? d * d : d;
        }
        for (int j = 0; j < EM_LANES; j++)
            total += l[j];
    }
    return total;
}

/* A float32 row's mean and 1 / sqrt(biased variance + eps), as layer_norm's forward
 * and backward kernels both compute them (two passes, lane sums into double). */
static inline void
em_row_moments_f32(const float *restrict x, Py_ssize_t n, double eps, float *mean,
                   float *rstd)
{
    float m = (float)(em_lane_sum_f32(x, n, 0.0f, 0) / (double)n);
    double var = em_lane_sum_f32(x, n, m, 1) / (double)n;
    *mean = m;
    *rstd = (float)(1.0 / sqrt(var + eps));
}

/* y = g * gelu'(x) over n contiguous float32 values (no GIL handling). */
void em_gelu_grad_f32(const float *g, const float *x, float *y, Py_ssize_t n);
/* runtime/blas.c, for eager kernels that multiply blocks themselves: c = op(a) @ op(b)
 * (+ c when accumulate), row-major, one call on this thread (false: no BLAS found);
 * em_blas_single() before a pool job of such calls sets BLAS's own threads to 1 and
 * returns what em_blas_restore() puts back. */
bool em_blas_gemm(em_dtype_t t, int ta, int tb, int64_t m, int64_t n, int64_t k,
                  const void *a, int64_t lda, const void *b, int64_t ldb, bool accumulate,
                  void *c, int64_t ldc);
bool em_blas_available(void);
int em_blas_single(void);
void em_blas_restore(int threads);
/* conv_loops.c: C (m x n) = A B (+ C when acc), A's element (i, p) at A[i ars + p acs],
 * B's rows contiguous (ldb); and C[i, j] (+)= sum_p G[i, p] X[j, p], rows contiguous. */
/* the eager convolution loops' path (conv_loops.c): 2 AVX-512, 1 AVX2 and FMA, 0
 * generic; the host's, narrowed by EMBER_LLVM_FEATURES */
int em_conv_cpu_level(void);
void em_conv_gemm_f32(int64_t m, int64_t n, int64_t k, const float *A, int64_t ars,
                      int64_t acs, const float *B, int64_t ldb, float *C, int64_t ldc, int acc);
void em_conv_dot_f32(int64_t m, int64_t n, int64_t P, const float *G, int64_t ldg,
                     const float *X, int64_t ldx, float *C, int64_t ldc, int acc);
/* conv.c: _C._grad_conv_weight (registered with nn_grad.c's functions) */
PyObject *em_grad_conv_weight(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);
/* batch_norm.c: batch_norm's forward (_native_batch_norm_legit_functional's kernel) and
 * the per-channel statistics it saves and the fused backward (nn_grad.c) recomputes */
PyObject *em_batch_norm_kernel(em_Op *op, PyObject **args);
/* whether o (None allowed) is a per-channel vector for the (N, C, *) x: plain (above)
 * of x's dtype, of shape (C,) */
bool em_bn_vector(PyObject *o, em_Tensor *x);
void em_bn_stats_of(const void *x, Py_ssize_t N, Py_ssize_t C, Py_ssize_t S, Py_ssize_t c,
                    bool f32, double eps, double *mean, double *var, double *rstd);
/* nn_grad.c: adds the fused eager gradients (_C._grad_*) to the module. */
int em_nn_grad_init(PyObject *module);

#endif /* EMBER_KUTIL_H */
