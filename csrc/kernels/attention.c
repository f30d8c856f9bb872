/* attention.c: fused scaled dot product attention on the CPU (the prims
 *
 *   _scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p=0.,
 *       is_causal=False, *, attn_mask=None, scale=None) -> (output, logsumexp)
 *   _scaled_dot_product_flash_attention_for_cpu_backward(grad_out, query, key, value,
 *       out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None)
 *       -> (grad_query, grad_key, grad_value)
 *
 * query (B, H, L, E), key (B, H, S, E), value (B, H, S, Ev); float32 or float64
 * (float16 computed in float32, logsumexp float32); attn_mask of query's dtype (added;
 * scaled_dot_product_attention turns a boolean mask into 0 / -inf), broadcastable to
 * (B, H, L, S). The score matrix is never formed: each unit of work is one block of
 * BR query rows of one (batch, head), which walks the keys BC at a time: scores of the
 * block, an online softmax (the running row maximum and sum; what was accumulated is
 * rescaled when the maximum grows) and the block's probabilities times V accumulated.
 * The forward also returns each row's log-sum-exp (logsumexp; a row that sees no key
 * gets output 0 and logsumexp 0, as PyTorch's), from which the backward recomputes the probabilities of
 * any block: a pass over key blocks sums dK and dV over the query blocks, a pass over
 * query blocks sums dQ over the key blocks, so no two threads write one gradient row.
 * With is_causal (query i sees keys j <= i, top-left aligned) blocks that are wholly
 * hidden are skipped. Units run on the thread pool (csrc/runtime/threadpool.c), query
 * blocks in zig-zag order so the threads' contiguous ranges have equal causal work.
 * Layouts are PyTorch's: the output is laid out as query, logsumexp and the gradients
 * are allocated (B, L, H[, X]) and viewed (B, H, L[, X]). Unlike PyTorch's kernel, value's
 * head dim may differ from query's. dropout_p must be 0 (the composite
 * scaled_dot_product_attention takes its decomposition when it is not).
 */
#include "kutil.h"
#include "runtime/runtime.h"

#include <stdatomic.h>
#include <stdlib.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "no-trapping-math", "no-math-errno", "fp-contract=fast")
#endif
#include "kernels/vecmath.h"

/* Block sizes: a BR x BC score block, the packed K and V blocks and the accumulators
 * stay in L2 (about 100 KB in float32 at head dim 64). */
enum { BR = 64, BC = 128 };
enum { MASK_NONE, MASK_FLOAT };

typedef struct {
    int64_t B, H, L, S, E, Ev;
    const char *q, *k, *v, *mask, *go, *o, *lse;
    char *out, *lse_out, *dq, *dk, *dv, *delta;
    /* element strides: (batch, head, row, column); ls: logsumexp's (batch, head, row) */
    int64_t qs[4], ks[4], vs[4], ms[4], gs[4], os[4], ls[3], dqs[4], dks[4], dvs[4];
    int mask_kind;
    bool causal;
    double scale;
    int64_t nqb, nkb;       /* query and key blocks per (batch, head) */
    atomic_int failed;      /* a thread could not allocate its scratch */
} attn_args;

/* The t-th of n blocks in the order 0, n-1, 1, n-2, ...: contiguous ranges of it hold
 * as many early (cheap under a causal mask) as late blocks. */
static inline int64_t
zigzag(int64_t t, int64_t n)
{
    return t % 2 == 0 ? t / 2 : n - 1 - t / 2;
}

/* Work unit u of (batch * head, block) units, nb blocks per (batch, head): its batch,
 * head and block (blocks in zigzag order). */
static inline void
unit_decode(const attn_args *a, int64_t u, int64_t nb, int64_t *b, int64_t *h,
            int64_t *blk)
{
    int64_t bh = u / nb;
    *b = bh / a->H;
    *h = bh % a->H;
    *blk = zigzag(u % nb, nb);
}

/* This thread's scratch of at least `bytes`, kept between calls (the pool's threads
 * live as long as the process): the block loops allocate nothing per work unit. NULL
 * when it cannot grow (the caller flags the failure). */
static _Thread_local void *tl_scratch;
static _Thread_local size_t tl_scratch_bytes;

static void *
thread_scratch(size_t bytes)
{
    if (bytes > tl_scratch_bytes) {
        void *p = malloc(bytes);
        if (p == NULL)
            return NULL;
        free(tl_scratch);
        tl_scratch = p;
        tl_scratch_bytes = bytes;
    }
    return tl_scratch;
}

#define T float
#define ITYPE int32_t
#define SUF f32
#define EXP em_expf
#define LOG logf
#include "kernels/attention_loops.h"
#undef T
#undef ITYPE
#undef SUF
#undef EXP
#undef LOG

#define T double
#define ITYPE int64_t
#define SUF f64
#define EXP exp
#define LOG log
#include "kernels/attention_loops.h"
#undef T
#undef ITYPE
#undef SUF
#undef EXP
#undef LOG

static const char FWD[] = "_scaled_dot_product_flash_attention_for_cpu";

/* data and element strides of a 4-d tensor in the compute dtype ct, its last dim read as
 * vectors: a contiguous copy (held in *hold) when it has another dtype or its last
 * stride is not 1. */
static int
operand(em_Tensor *t, em_dtype_t ct, PyArrayObject **hold, const char **data, int64_t st[4])
{
    PyArrayObject *arr = t->array;
    if (t->dtype != ct || (t->ndim > 0 && t->sizes[t->ndim - 1] > 1 && t->strides[t->ndim - 1] != 1)) {
        PyArray_Descr *d = PyArray_DescrFromType(em_dtypes[ct]->npy_type);
        arr = *hold = (PyArrayObject *)PyArray_FromAny((PyObject *)t->array, d, 0, 0,
                                                        NPY_ARRAY_C_CONTIGUOUS |
                                                        NPY_ARRAY_ALIGNED |
                                                        NPY_ARRAY_FORCECAST |
                                                        NPY_ARRAY_ENSURECOPY, NULL);
        if (arr == NULL)
            return -1;
    }
    int itemsize = (int)PyArray_ITEMSIZE(arr);
    for (int d = 0; d < t->ndim; d++)
        st[d] = PyArray_STRIDE(arr, d) / itemsize;
    *data = PyArray_BYTES(arr);
    return 0;
}

/* The dtype the kernels compute in: float16 and bfloat16 in float32 (rounded once at
 * the end). */
static em_dtype_t
compute_dtype(em_dtype_t t)
{
    return t == EM_FLOAT64 ? EM_FLOAT64 : EM_FLOAT32;
}

static int
check_qkv(const char *name, em_Tensor *q, em_Tensor *k, em_Tensor *v)
{
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4) {
        PyErr_Format(PyExc_RuntimeError, "%s: Expected query, key and value to be 4-d "
                     "(batch, heads, sequence, head dim), got %d, %d and %d dims", name,
                     q->ndim, k->ndim, v->ndim);
        return -1;
    }
    if (k->dtype != q->dtype || v->dtype != q->dtype) {
        PyErr_Format(PyExc_RuntimeError, "%s: Expected query, key, and value to have the same "
                     "dtype, but got query.dtype: %s key.dtype: %s and value.dtype: %s "
                     "instead.", name, em_dtype_torch_name(q->dtype),
                     em_dtype_torch_name(k->dtype), em_dtype_torch_name(v->dtype));
        return -1;
    }
    if (q->dtype != EM_FLOAT32 && q->dtype != EM_FLOAT64 && !em_is_half(q->dtype)) {
        PyErr_Format(PyExc_RuntimeError, "%s: Expected data type in FP32, FP64, BF16, FP16, but got "
                     "%s instead.", name, em_dtype_torch_name(q->dtype));
        return -1;
    }
    for (int d = 0; d < 2; d++)
        if (k->sizes[d] != q->sizes[d] || v->sizes[d] != q->sizes[d]) {
            PyErr_Format(PyExc_RuntimeError, "%s: Expected query, key and value to have the "
                         "same batch size and number of heads", name);
            return -1;
        }
    if (k->sizes[3] != q->sizes[3] || v->sizes[2] != k->sizes[2]) {
        PyErr_Format(PyExc_RuntimeError, "%s: Expected key to have query's head dim and "
                     "value key's sequence length, got query %s, key %s, value %s", name,
                     em_shape_s(4, q->sizes), em_shape_s(4, k->sizes),
                     em_shape_s(4, v->sizes));
        return -1;
    }
    return 0;
}

/* attn_mask (None or a tensor) into a: kind and (B, H, L, S) strides (of its own
 * layout; mask_data finds the data), 0 where it broadcasts. */
static int
check_mask(const char *name, PyObject *m, em_Tensor *q, int64_t S, attn_args *a)
{
    a->mask_kind = MASK_NONE;
    if (m == Py_None)
        return 0;
    em_Tensor *t = (em_Tensor *)m;
    if (t->dtype != q->dtype) {     /* as PyTorch's kernel: no boolean mask */
        PyErr_Format(PyExc_RuntimeError, "%s: Attention mask is the same data type as query "
                     "(expected %s, got %s)", name, em_dtype_torch_name(q->dtype),
                     em_dtype_torch_name(t->dtype));
        return -1;
    }
    Py_ssize_t want[4] = {q->sizes[0], q->sizes[1], q->sizes[2], S};
    if (t->ndim > 4)
        goto shape;
    for (int d = 0; d < 4; d++) {
        int td = d - (4 - t->ndim);
        if (td < 0 || t->sizes[td] == 1)
            a->ms[d] = 0;
        else if (t->sizes[td] == want[d])
            a->ms[d] = t->strides[td];
        else
            goto shape;
    }
    a->mask_kind = MASK_FLOAT;
    return 0;
shape:
    PyErr_Format(PyExc_RuntimeError, "%s: attn_mask of shape %s does not broadcast to %s",
                 name, em_shape_s(t->ndim, t->sizes), em_shape_s(4, want));
    return -1;
}

/* The mask's data in the compute dtype (a float16 mask converted, held in *hold). */
static int
mask_data(PyObject *m, em_dtype_t ct, attn_args *a, PyArrayObject **hold)
{
    if (a->mask_kind == MASK_NONE)
        return 0;
    em_Tensor *t = (em_Tensor *)m;
    if (t->dtype == ct) {
        a->mask = PyArray_BYTES(t->array);
        return 0;
    }
    int64_t st[4];
    if (operand(t, ct, hold, &a->mask, st) < 0)
        return -1;
    for (int d = 0; d < 4; d++) {         /* the copy is contiguous: its strides */
        int td = d - (4 - t->ndim);
        if (a->ms[d] != 0)
            a->ms[d] = st[td];
    }
    return 0;
}

static int
check_dropout(const char *name, PyObject *p)
{
    double d = PyFloat_AsDouble(p);
    if (d == -1 && PyErr_Occurred())
        return -1;
    if (d != 0) {      /* scaled_dot_product_attention takes its decomposition then */
        PyErr_Format(PyExc_RuntimeError, "%s: Currently do not support dropout > 0", name);
        return -1;
    }
    return 0;
}

static int
read_scale(PyObject *s, int64_t E, double *out)
{
    if (s == Py_None) {
        *out = 1.0 / sqrt((double)E);
        return 0;
    }
    *out = PyFloat_AsDouble(s);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* A fresh tensor of `sizes` (B, H, L, X) laid out (B, L, H, X), as PyTorch's kernels
 * lay out logsumexp and the gradients (nd 3: (B, H, L) laid out (B, L, H)). */
static em_Tensor *
blhx(int nd, const Py_ssize_t *sizes, em_dtype_t dtype, bool meta)
{
    em_Geom g = {.ndim = nd, .dtype = dtype};
    for (int d = 0; d < nd; d++)
        g.sizes[d] = sizes[d];
    Py_ssize_t x = nd == 4 ? sizes[3] : 1;
    if (nd == 4)
        g.strides[3] = 1;
    g.strides[1] = x;
    g.strides[2] = x * sizes[1];
    g.strides[0] = x * sizes[1] * sizes[2];
    return em_tensor_empty_like_layout(&g, meta);
}

static int
run(em_dtype_t dtype, em_range_fn f32, em_range_fn f64, attn_args *a, int64_t n)
{
    if (n == 0)
        return 0;
    /* one work item (batch, head, block) per chunk; the pool releases the GIL and
     * returns -1 with KeyboardInterrupt set when Ctrl-C stops it between chunks */
    if (em_parallel_for(dtype == EM_FLOAT32 ? f32 : f64, a, n, 1, 1) < 0)
        return -1;
    if (atomic_load(&a->failed)) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void
fill_dims(attn_args *a, em_Tensor *q, em_Tensor *k, em_Tensor *v)
{
    a->B = q->sizes[0];
    a->H = q->sizes[1];
    a->L = q->sizes[2];
    a->E = q->sizes[3];
    a->S = k->sizes[2];
    a->Ev = v->sizes[3];
    a->nqb = (a->L + BR - 1) / BR;
    a->nkb = (a->S + BC - 1) / BC;
}

/* A result in the compute dtype with rows of unit stride: t itself, or a fresh
 * contiguous array copied into t (float16, other layouts) by finish(). */
static PyArrayObject *
result_array(em_Tensor *t, em_dtype_t ct)
{
    if (t->dtype == ct && (t->sizes[3] <= 1 || t->strides[3] == 1)) {
        Py_INCREF(t->array);
        return t->array;
    }
    return (PyArrayObject *)PyArray_EMPTY(t->ndim, PyArray_DIMS(t->array),
                                         em_dtypes[ct]->npy_type, 0);
}

static int
finish(em_Tensor *t, PyArrayObject *arr)
{
    return arr == t->array ? 0 : PyArray_CopyInto(t->array, arr);
}

static void
strides_of(PyArrayObject *arr, int64_t *st)
{
    for (int d = 0; d < PyArray_NDIM(arr); d++)
        st[d] = PyArray_STRIDE(arr, d) / (int64_t)PyArray_ITEMSIZE(arr);
}

static PyObject *
k_flash_attention(em_Op *op, PyObject **args)
{
    em_Tensor *q = (em_Tensor *)args[0], *k = (em_Tensor *)args[1], *v = (em_Tensor *)args[2];
    attn_args a = {0};
    if (check_qkv(FWD, q, k, v) < 0 || check_dropout(FWD, args[3]) < 0 ||
        check_mask(FWD, args[5], q, k->sizes[2], &a) < 0 ||
        read_scale(args[6], q->sizes[3], &a.scale) < 0)
        return NULL;
    a.causal = PyObject_IsTrue(args[4]);
    fill_dims(&a, q, k, v);
    em_dtype_t ct = compute_dtype(q->dtype);
    bool meta = em_meta_of(q) || em_is_meta(k) || em_is_meta(v) ||
                (args[5] != Py_None && em_is_meta((em_Tensor *)args[5]));
    Py_ssize_t osz[4] = {a.B, a.H, a.L, a.Ev};
    /* laid out as query (empty_like), as PyTorch's */
    em_Tensor *out = a.Ev == a.E ? em_empty_like(q, q->dtype, meta)
                                 : em_empty(4, osz, q->dtype, meta);
    em_Tensor *lse = out == NULL ? NULL : blhx(3, osz, ct, meta);
    PyArrayObject *hq = NULL, *hk = NULL, *hv = NULL, *hm = NULL, *oa = NULL;
    if (lse == NULL)
        goto error;
    if (!meta && lse->numel > 0) {     /* value's head dim may be 0: rows get a logsumexp */
        if (operand(q, ct, &hq, &a.q, a.qs) < 0 || operand(k, ct, &hk, &a.k, a.ks) < 0 ||
            operand(v, ct, &hv, &a.v, a.vs) < 0 || mask_data(args[5], ct, &a, &hm) < 0 ||
            (oa = result_array(out, ct)) == NULL)
            goto error;
        a.out = PyArray_BYTES(oa);
        strides_of(oa, a.os);
        a.lse_out = PyArray_BYTES(lse->array);
        for (int d = 0; d < 3; d++)
            a.ls[d] = lse->strides[d];
        if (run(ct, forward_range_f32, forward_range_f64, &a, a.B * a.H * a.nqb) < 0 ||
            finish(out, oa) < 0)
            goto error;
    }
    Py_XDECREF(hq);
    Py_XDECREF(hk);
    Py_XDECREF(hv);
    Py_XDECREF(hm);
    Py_XDECREF(oa);
    PyObject *r = PyTuple_Pack(2, out, lse);
    Py_DECREF(out);
    Py_DECREF(lse);
    return r;
error:
    Py_XDECREF(hq);
    Py_XDECREF(hk);
    Py_XDECREF(hv);
    Py_XDECREF(hm);
    Py_XDECREF(oa);
    Py_XDECREF(out);
    Py_XDECREF(lse);
    return NULL;
}

static const char BWD[] = "_scaled_dot_product_flash_attention_for_cpu_backward";

static int
check_like(em_Tensor *t, em_dtype_t dtype, const char *what, int nd, const Py_ssize_t *sizes)
{
    bool ok = t->ndim == nd && t->dtype == dtype;
    for (int d = 0; ok && d < nd; d++)
        ok = t->sizes[d] == sizes[d];
    if (!ok) {
        PyErr_Format(PyExc_RuntimeError, "%s: Expected %s of shape %s and dtype %s, got %s "
                     "and %s", BWD, what, em_shape_s(nd, sizes), em_dtype_torch_name(dtype),
                     em_shape_s(t->ndim, t->sizes), em_dtype_torch_name(t->dtype));
        return -1;
    }
    return 0;
}

static PyObject *
k_flash_attention_backward(em_Op *op, PyObject **args)
{
    em_Tensor *go = (em_Tensor *)args[0], *q = (em_Tensor *)args[1];
    em_Tensor *k = (em_Tensor *)args[2], *v = (em_Tensor *)args[3];
    em_Tensor *o = (em_Tensor *)args[4], *lse = (em_Tensor *)args[5];
    attn_args a = {0};
    if (!em_is_float(q->dtype)) {     /* PyTorch's backward raises this one */
        PyErr_Format(PyExc_NotImplementedError,
                     "\"flash_attention_backward\" not implemented for '%s'",
                     em_dtype_torch_name(q->dtype));
        return NULL;
    }
    if (check_qkv(BWD, q, k, v) < 0 || check_dropout(BWD, args[6]) < 0 ||
        check_mask(BWD, args[8], q, k->sizes[2], &a) < 0 ||
        read_scale(args[9], q->sizes[3], &a.scale) < 0)
        return NULL;
    a.causal = PyObject_IsTrue(args[7]);
    fill_dims(&a, q, k, v);
    em_dtype_t ct = compute_dtype(q->dtype);
    Py_ssize_t osz[4] = {a.B, a.H, a.L, a.Ev};
    if (check_like(go, q->dtype, "grad_out", 4, osz) < 0 ||
        check_like(o, q->dtype, "out", 4, osz) < 0 ||
        check_like(lse, ct, "logsumexp", 3, osz) < 0)
        return NULL;
    bool meta = em_meta_of(q) || em_is_meta(k) || em_is_meta(v) || em_is_meta(go) ||
                em_is_meta(o) || em_is_meta(lse) ||
                (args[8] != Py_None && em_is_meta((em_Tensor *)args[8]));
    em_Tensor *dq = blhx(4, q->sizes, q->dtype, meta);
    em_Tensor *dk = dq == NULL ? NULL : blhx(4, k->sizes, q->dtype, meta);
    em_Tensor *dv = dk == NULL ? NULL : blhx(4, v->sizes, q->dtype, meta);
    PyArrayObject *hq = NULL, *hk = NULL, *hv = NULL, *hg = NULL, *ho = NULL, *hm = NULL;
    PyArrayObject *dqa = NULL, *dka = NULL, *dva = NULL;
    char *delta = NULL;
    if (dv == NULL)
        goto error;
    if (!meta && a.B * a.H > 0 && a.L > 0 && a.S > 0) {
        if (operand(q, ct, &hq, &a.q, a.qs) < 0 || operand(k, ct, &hk, &a.k, a.ks) < 0 ||
            operand(v, ct, &hv, &a.v, a.vs) < 0 || operand(go, ct, &hg, &a.go, a.gs) < 0 ||
            operand(o, ct, &ho, &a.o, a.os) < 0 || mask_data(args[8], ct, &a, &hm) < 0 ||
            (dqa = result_array(dq, ct)) == NULL || (dka = result_array(dk, ct)) == NULL ||
            (dva = result_array(dv, ct)) == NULL)
            goto error;
        a.lse = PyArray_BYTES(lse->array);
        for (int d = 0; d < 3; d++)
            a.ls[d] = lse->strides[d];
        a.dq = PyArray_BYTES(dqa);
        a.dk = PyArray_BYTES(dka);
        a.dv = PyArray_BYTES(dva);
        strides_of(dqa, a.dqs);
        strides_of(dka, a.dks);
        strides_of(dva, a.dvs);
        size_t itemsize = ct == EM_FLOAT32 ? sizeof(float) : sizeof(double);
        delta = PyMem_RawMalloc((size_t)(a.B * a.H * a.L) * itemsize);
        if (delta == NULL) {
            PyErr_NoMemory();
            goto error;
        }
        a.delta = delta;
        if (run(ct, delta_range_f32, delta_range_f64, &a, a.B * a.H) < 0 ||
            run(ct, dkv_range_f32, dkv_range_f64, &a, a.B * a.H * a.nkb) < 0 ||
            run(ct, dq_range_f32, dq_range_f64, &a, a.B * a.H * a.nqb) < 0 ||
            finish(dq, dqa) < 0 || finish(dk, dka) < 0 || finish(dv, dva) < 0)
            goto error;
    }
    else if (!meta) {        /* no query or no key: the gradients are 0 */
        PyArray_FILLWBYTE(dq->array, 0);
        PyArray_FILLWBYTE(dk->array, 0);
        PyArray_FILLWBYTE(dv->array, 0);
    }
    PyMem_RawFree(delta);
    Py_XDECREF(hq);
    Py_XDECREF(hk);
    Py_XDECREF(hv);
    Py_XDECREF(hg);
    Py_XDECREF(ho);
    Py_XDECREF(hm);
    Py_XDECREF(dqa);
    Py_XDECREF(dka);
    Py_XDECREF(dva);
    PyObject *r = PyTuple_Pack(3, dq, dk, dv);
    Py_DECREF(dq);
    Py_DECREF(dk);
    Py_DECREF(dv);
    return r;
error:
    PyMem_RawFree(delta);
    Py_XDECREF(hq);
    Py_XDECREF(hk);
    Py_XDECREF(hv);
    Py_XDECREF(hg);
    Py_XDECREF(ho);
    Py_XDECREF(hm);
    Py_XDECREF(dqa);
    Py_XDECREF(dka);
    Py_XDECREF(dva);
    Py_XDECREF(dq);
    Py_XDECREF(dk);
    Py_XDECREF(dv);
    return NULL;
}

const em_KernelEntry em_attention_kernels[] = {
    {"flash_attention", k_flash_attention},
    {"flash_attention_backward", k_flash_attention_backward},
    {NULL, NULL},
};
