/* cloops.c: elementwise loops written in C, for ops NumPy has no single ufunc for
 * (sigmoid, erf, gelu, silu, softplus, elu, mish, lerp, ...).
 *
 * Each op has a float32 and a float64 loop over contiguous memory; the float32 loops
 * are cloned for AVX-512 and AVX2 on x86-64 and call the branch-free functions of
 * vecmath.h, so the compiler vectorises them for the CPU at hand; the float64 loops
 * call libm where they need a transcendental. em_cloop runs a loop for any operands:
 * inputs already laid out like the output (and of the compute dtype) are read in
 * place; any other input (another dtype, broadcast, strided) is first copied into a
 * buffer laid out like the output. float16 results are computed in float32 and
 * rounded once at the end, as PyTorch computes half ops in float.
 */
/* These loops are the point of the file: let the compiler vectorise them fully
 * (before kutil.h and vecmath.h, so their inline functions get the same options and
 * inline), and fuse a * b + c into FMAs where the clone has them (-std=c11 alone
 * forbids it; the polynomials only gain accuracy, and no function here relies on a
 * rounded product). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "no-trapping-math", "no-math-errno", "fp-contract=fast")
#endif
#include "kutil.h"
#include "runtime/runtime.h"
#include "kernels/vecmath.h"
#include "kernels/special.h"

typedef void (*loop32_fn)(const float *const *in, float *restrict y, Py_ssize_t n,
                          const double *p);
typedef void (*loop64_fn)(const double *const *in, double *restrict y, Py_ssize_t n,
                          const double *p);

/* A unary loop without parameters: y = EXPR(v), v the input element. */
#define UNARY32(fname, EXPR)                                                          \
    EM_CLONES static void fname(const float *const *in, float *restrict y, Py_ssize_t n, \
                                const double *p)                                      \
    {                                                                                 \
        const float *restrict x = in[0];                                              \
        for (Py_ssize_t i = 0; i < n; i++) {                                          \
            float v = x[i];                                                           \
            y[i] = (EXPR);                                                            \
        }                                                                             \
    }
#define UNARY64(fname, EXPR)                                                          \
    static void fname(const double *const *in, double *restrict y, Py_ssize_t n,      \
                      const double *p)                                                \
    {                                                                                 \
        const double *restrict x = in[0];                                             \
        for (Py_ssize_t i = 0; i < n; i++) {                                          \
            double v = x[i];                                                          \
            y[i] = (EXPR);                                                            \
        }                                                                             \
    }
/* float64 loops the compiler can vectorise without libm (selects, sqrt, division) */
#define UNARY64V(fname, EXPR)                                                         \
    EM_CLONES static void fname(const double *const *in, double *restrict y, Py_ssize_t n, \
                                const double *p)                                      \
    {                                                                                 \
        const double *restrict x = in[0];                                             \
        for (Py_ssize_t i = 0; i < n; i++) {                                          \
            double v = x[i];                                                          \
            y[i] = (EXPR);                                                            \
        }                                                                             \
    }

#define SQRT1_2 0.70710678118654752440
#define SQRT_2_OVER_PI 0.79788456080286535588
#define GELU_KAPPA 0.044715

/* sigmoid(x) = 1 / (1 + exp(-x)) */
UNARY32(sigmoid_f32, 1.0f / (1.0f + em_expf(-v)))
UNARY64(sigmoid_f64, 1.0 / (1.0 + exp(-v)))

/* relu: max(x, 0), NaN stays NaN */
UNARY32(relu_f32, v != v ? v : (v > 0.0f ? v : 0.0f))
UNARY64V(relu_f64, v != v ? v : (v > 0.0 ? v : 0.0))

/* sign: (x > 0) - (x < 0); 0 for zeros of either sign and for NaN, as PyTorch gives */
UNARY32(sign_f32, (float)(v > 0.0f) - (float)(v < 0.0f))
UNARY64V(sign_f64, (double)(v > 0.0) - (double)(v < 0.0))

/* rsqrt = 1 / sqrt(x) */
UNARY32(rsqrt_f32, 1.0f / sqrtf(v))
UNARY64V(rsqrt_f64, 1.0 / sqrt(v))

UNARY32(erf_f32, em_erff(v))
UNARY64(erf_f64, erf(v))
UNARY32(erfc_f32, em_erfcf(v))
UNARY64(erfc_f64, erfc(v))

/* Phi(x) = erfc(-x/sqrt(2)) / 2 for gelu: vecmath.h's erfc tail alone, z = |x|/sqrt(2)
 * (its fit holds for every z >= 0 to 1.2e-7 relative, and Phi(x) = 1 - erfc(z)/2 for
 * x > 0 is in [0.5, 1], so the series near 0 that erf needs is not), with exp(-z^2 + q)
 * as one expf: -z^2 = -x^2/2 taken from x itself (z's rounding would cost 1e-5 relative
 * in the tail) as -xh^2/2 (exact, xh = |x| to 12 bits) plus the rest, their sum's
 * rounding error (2Sum) applied as the factor 1 + err. */
static inline float
gelu_phif(float x)
{
    float z = fabsf(x) * (float)SQRT1_2;
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = em_erfc_tail_p(t);
    float xa = fabsf(x), xc = xa > 14.8f ? 14.8f : xa;  /* erfc(14.8/sqrt(2)) is 0 */
    float xh = em_bits_to_float(em_float_to_bits(xc) & ~(int32_t)0xfff);
    float a = -0.5f * xh * xh, b = -0.5f * (xc - xh) * (xc + xh) + EM_ERFC_FIT_C + t * p;
    float s = a + b, bb = s - a, err = (a - (s - bb)) + (b - bb);
    /* exp(s) for s in [-112, 0.01] (em_expf's steps without its overflow and NaN
     * cases): 0 below -87.3, where erfc(z) < 1e-38 */
    float sc = s < -87.3f ? -87.3f : s;
    float n = floorf(sc * 1.44269504088896341f + 0.5f);
    float r = sc - n * 0.693359375f - n * -2.12194440e-4f;
    float q = 1.9875691500e-4f;
    q = q * r + 1.3981999507e-3f;
    q = q * r + 8.3334519073e-3f;
    q = q * r + 4.1665795894e-2f;
    q = q * r + 1.6666665459e-1f;
    q = q * r + 5.0000001201e-1f;
    float ex = (q * (r * r) + r + 1.0f) * em_bits_to_float(((int32_t)n + 127) << 23);
    ex = s < -87.3f ? 0.0f : ex;
    /* erfc(z); NaN for NaN x through t, 0 for infinite x (t = 0) */
    float e = t * ex * (1.0f + err);
    return x < 0.0f ? 0.5f * e : 1.0f - 0.5f * e;
}

/* gelu(x) = x Phi(x) (no cancellation for negative x) */
UNARY32(gelu_f32, v * gelu_phif(v))
UNARY64(gelu_f64, 0.5 * v * erfc(-v * SQRT1_2))

/* gelu's derivative times g: Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi)
 * (nn_grad.c's fused gradient; no GIL handling) */
#define INV_SQRT_2PI 0.39894228040143267794
EM_CLONES static void
gelu_grad_f32(const float *restrict g, const float *restrict x, float *restrict y,
              Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = g[i] * (gelu_phif(v) + v * em_expf(-0.5f * v * v) * (float)INV_SQRT_2PI);
    }
}

void
em_gelu_grad_f32(const float *g, const float *x, float *y, Py_ssize_t n)
{
    gelu_grad_f32(g, x, y, n);
}

/* gelu, tanh approximation: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
UNARY32(gelu_tanh_f32,
        0.5f * v * (1.0f + em_tanhf((float)SQRT_2_OVER_PI * (v + (float)GELU_KAPPA * v * v * v))))
UNARY64(gelu_tanh_f64, 0.5 * v * (1.0 + tanh(SQRT_2_OVER_PI * (v + GELU_KAPPA * v * v * v))))

/* silu(x) = x sigmoid(x) = x / (1 + exp(-x)) */
UNARY32(silu_f32, v / (1.0f + em_expf(-v)))
UNARY64(silu_f64, v / (1.0 + exp(-v)))

/* mish(x) = x tanh(softplus(x)) = x tanh(log1p(exp(x))) */
UNARY32(mish_f32, v * em_tanhf(em_log1pf(em_expf(v))))
UNARY64(mish_f64, v * tanh(log1p(exp(v))))

/* softplus(x; beta, threshold) = x where beta x > threshold, else log1p(exp(beta x)) / beta */
EM_CLONES static void
softplus_f32(const float *const *in, float *restrict y, Py_ssize_t n, const double *p)
{
    const float *restrict x = in[0];
    const float beta = (float)p[0], threshold = (float)p[1];
    for (Py_ssize_t i = 0; i < n; i++) {
        float bx = x[i] * beta;
        float s = em_log1pf(em_expf(bx)) / beta;
        y[i] = bx > threshold ? x[i] : s;
    }
}

static void
softplus_f64(const double *const *in, double *restrict y, Py_ssize_t n, const double *p)
{
    const double *restrict x = in[0];
    const double beta = p[0], threshold = p[1];
    for (Py_ssize_t i = 0; i < n; i++) {
        double bx = x[i] * beta;
        y[i] = bx > threshold ? x[i] : log1p(exp(bx)) / beta;
    }
}

/* elu(x; alpha, scale, input_scale) = scale x for x > 0, else
 * alpha scale expm1(input_scale x) (NaN goes the first way, as in PyTorch) */
EM_CLONES static void
elu_f32(const float *const *in, float *restrict y, Py_ssize_t n, const double *p)
{
    const float *restrict x = in[0];
    const float negcoef = (float)(p[0] * p[1]), poscoef = (float)p[1], incoef = (float)p[2];
    for (Py_ssize_t i = 0; i < n; i++) {
        float v = x[i];
        float neg = em_expm1f(v * incoef) * negcoef;
        y[i] = v <= 0.0f ? neg : v * poscoef;
    }
}

static void
elu_f64(const double *const *in, double *restrict y, Py_ssize_t n, const double *p)
{
    const double *restrict x = in[0];
    const double negcoef = p[0] * p[1], poscoef = p[1], incoef = p[2];
    for (Py_ssize_t i = 0; i < n; i++) {
        double v = x[i];
        y[i] = v <= 0.0 ? expm1(v * incoef) * negcoef : v * poscoef;
    }
}

/* leaky_relu(x; slope) = x for x > 0, else slope x */
EM_CLONES static void
leaky_relu_f32(const float *const *in, float *restrict y, Py_ssize_t n, const double *p)
{
    const float *restrict x = in[0];
    const float slope = (float)p[0];
    for (Py_ssize_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : x[i] * slope;
}

EM_CLONES static void
leaky_relu_f64(const double *const *in, double *restrict y, Py_ssize_t n, const double *p)
{
    const double *restrict x = in[0];
    const double slope = p[0];
    for (Py_ssize_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0 ? x[i] : x[i] * slope;
}

/* nan_to_num(x; nan, posinf, neginf) */
EM_CLONES static void
nan_to_num_f32(const float *const *in, float *restrict y, Py_ssize_t n, const double *p)
{
    const float *restrict x = in[0];
    const float nanv = (float)p[0], pos = (float)p[1], neg = (float)p[2];
    for (Py_ssize_t i = 0; i < n; i++) {
        float v = x[i];
        float r = v != v ? nanv : v;
        r = v == INFINITY ? pos : r;
        y[i] = v == -INFINITY ? neg : r;
    }
}

EM_CLONES static void
nan_to_num_f64(const double *const *in, double *restrict y, Py_ssize_t n, const double *p)
{
    const double *restrict x = in[0];
    const double nanv = p[0], pos = p[1], neg = p[2];
    for (Py_ssize_t i = 0; i < n; i++) {
        double v = x[i];
        double r = v != v ? nanv : v;
        r = v == INFINITY ? pos : r;
        y[i] = v == -INFINITY ? neg : r;
    }
}

/* clamp(x; lo, hi) with number bounds (-inf/inf when absent, never NaN): NaN in x stays
 * NaN; lo > hi gives hi */
EM_CLONES static void
clamp_f32(const float *const *in, float *restrict y, Py_ssize_t n, const double *p)
{
    const float *restrict x = in[0];
    const float lo = (float)p[0], hi = (float)p[1];
    for (Py_ssize_t i = 0; i < n; i++) {
        float r = x[i] < lo ? lo : x[i];
        y[i] = r > hi ? hi : r;
    }
}

EM_CLONES static void
clamp_f64(const double *const *in, double *restrict y, Py_ssize_t n, const double *p)
{
    const double *restrict x = in[0];
    const double lo = p[0], hi = p[1];
    for (Py_ssize_t i = 0; i < n; i++) {
        double r = x[i] < lo ? lo : x[i];
        y[i] = r > hi ? hi : r;
    }
}

/* lerp(start, end, weight), as PyTorch computes it: from start for |weight| < 0.5, from
 * end otherwise, so that weight 1 gives end exactly. */
#define LERP(s, e, w) (fabs(w) < 0.5 ? (s) + (w) * ((e) - (s)) : (e) - ((e) - (s)) * (1 - (w)))
#define LERPF(s, e, w) \
    (fabsf(w) < 0.5f ? (s) + (w) * ((e) - (s)) : (e) - ((e) - (s)) * (1.0f - (w)))

EM_CLONES static void
lerp_f32(const float *const *in, float *restrict y, Py_ssize_t n, const double *p)
{
    const float *restrict s = in[0], *restrict e = in[1], *restrict w = in[2];
    for (Py_ssize_t i = 0; i < n; i++)
        y[i] = LERPF(s[i], e[i], w[i]);
}

EM_CLONES static void
lerp_f64(const double *const *in, double *restrict y, Py_ssize_t n, const double *p)
{
    const double *restrict s = in[0], *restrict e = in[1], *restrict w = in[2];
    for (Py_ssize_t i = 0; i < n; i++)
        y[i] = LERP(s[i], e[i], w[i]);
}

EM_CLONES static void
lerp_scalar_f32(const float *const *in, float *restrict y, Py_ssize_t n, const double *p)
{
    const float *restrict s = in[0], *restrict e = in[1];
    const float w = (float)p[0];
    for (Py_ssize_t i = 0; i < n; i++)
        y[i] = LERPF(s[i], e[i], w);
}

EM_CLONES static void
lerp_scalar_f64(const double *const *in, double *restrict y, Py_ssize_t n, const double *p)
{
    const double *restrict s = in[0], *restrict e = in[1];
    const double w = p[0];
    for (Py_ssize_t i = 0; i < n; i++)
        y[i] = LERP(s[i], e[i], w);
}

/* The special functions (special.c, float64 scalar functions): float32 computes in
 * float64 and rounds once. */
#define SPECIAL1(fname, FN)                                                           \
    static void fname##_f32(const float *const *in, float *restrict y, Py_ssize_t n,  \
                            const double *p)                                          \
    {                                                                                 \
        (void)p;                                                                      \
        for (Py_ssize_t i = 0; i < n; i++)                                            \
            y[i] = (float)FN((double)in[0][i]);                                       \
    }                                                                                 \
    static void fname##_f64(const double *const *in, double *restrict y, Py_ssize_t n, \
                            const double *p)                                          \
    {                                                                                 \
        (void)p;                                                                      \
        for (Py_ssize_t i = 0; i < n; i++)                                            \
            y[i] = FN(in[0][i]);                                                      \
    }

SPECIAL1(lgamma, lgamma)
SPECIAL1(digamma, em_digamma)
SPECIAL1(erfinv, em_erfinv)
SPECIAL1(erfcx, em_erfcx)
SPECIAL1(ndtri, em_ndtri)
SPECIAL1(i0, em_i0)
SPECIAL1(i0e, em_i0e)
SPECIAL1(i1, em_i1)
SPECIAL1(i1e, em_i1e)

/* zeta(x, q), the Hurwitz zeta function: two inputs laid out like the output */
static void
zeta_f32(const float *const *in, float *restrict y, Py_ssize_t n, const double *p)
{
    (void)p;
    for (Py_ssize_t i = 0; i < n; i++)
        y[i] = (float)em_zeta((double)in[0][i], (double)in[1][i]);
}

static void
zeta_f64(const double *const *in, double *restrict y, Py_ssize_t n, const double *p)
{
    (void)p;
    for (Py_ssize_t i = 0; i < n; i++)
        y[i] = em_zeta(in[0][i], in[1][i]);
}

typedef struct {
    const char *name;
    int nin;
    loop32_fn f32;
    loop64_fn f64;
} loop_entry;

static const loop_entry loops[] = {
    {"sigmoid", 1, sigmoid_f32, sigmoid_f64},
    {"relu", 1, relu_f32, relu_f64},
    {"sign", 1, sign_f32, sign_f64},
    {"rsqrt", 1, rsqrt_f32, rsqrt_f64},
    {"erf", 1, erf_f32, erf_f64},
    {"erfc", 1, erfc_f32, erfc_f64},
    {"gelu", 1, gelu_f32, gelu_f64},
    {"gelu_tanh", 1, gelu_tanh_f32, gelu_tanh_f64},
    {"silu", 1, silu_f32, silu_f64},
    {"mish", 1, mish_f32, mish_f64},
    {"softplus", 1, softplus_f32, softplus_f64},
    {"elu", 1, elu_f32, elu_f64},
    {"leaky_relu", 1, leaky_relu_f32, leaky_relu_f64},
    {"nan_to_num", 1, nan_to_num_f32, nan_to_num_f64},
    {"clamp", 1, clamp_f32, clamp_f64},
    {"lerp", 3, lerp_f32, lerp_f64},
    {"lerp_scalar", 2, lerp_scalar_f32, lerp_scalar_f64},
    {"lgamma", 1, lgamma_f32, lgamma_f64},
    {"digamma", 1, digamma_f32, digamma_f64},
    {"erfinv", 1, erfinv_f32, erfinv_f64},
    {"special_erfcx", 1, erfcx_f32, erfcx_f64},
    {"special_ndtri", 1, ndtri_f32, ndtri_f64},
    {"i0", 1, i0_f32, i0_f64},
    {"special_i0e", 1, i0e_f32, i0e_f64},
    {"special_i1", 1, i1_f32, i1_f64},
    {"special_i1e", 1, i1e_f32, i1e_f64},
    {"special_zeta", 2, zeta_f32, zeta_f64},
    {NULL, 0, NULL, NULL},
};

/* t holds its elements in the memory order of out (a dense tensor): the same sizes,
 * and the same strides wherever a size exceeds 1. */
static bool
same_layout(const em_Tensor *t, const em_Tensor *out)
{
    if (t->ndim != out->ndim)
        return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->sizes[d] != out->sizes[d] || (t->sizes[d] > 1 && t->strides[d] != out->strides[d]))
            return false;
    return true;
}

#define EM_CLOOP_MAX_IN 3

/* A loop's elements [a, b) (every operand laid out alike: an element's offset is the
 * same in each), one pool chunk. */
typedef struct {
    const loop_entry *e;
    const void *const *ptrs;
    int nin;
    void *dst;
    const double *params;
    bool f32;
} cloop_job;

static void
cloop_range(void *ctx, int64_t a, int64_t b)
{
    cloop_job *j = ctx;
    size_t isz = j->f32 ? sizeof(float) : sizeof(double);
    const void *in[EM_CLOOP_MAX_IN];
    for (int i = 0; i < j->nin; i++)
        in[i] = (const char *)j->ptrs[i] + a * isz;
    void *y = (char *)j->dst + a * isz;
    if (j->f32)
        j->e->f32((const float *const *)in, y, b - a, j->params);
    else
        j->e->f64((const double *const *)in, y, b - a, j->params);
}

/* Runs the named loop over the tensors ins (broadcast to out's shape) into out, a
 * freshly allocated dense tensor of a floating dtype; params are the op's numbers.
 * Returns 1 when done, 0 when there is no such loop or out is not floating point
 * (the caller computes another way), -1 on error. */
int
em_cloop(const char *name, PyObject **ins, int nin, em_Tensor *out, const double *params)
{
    const loop_entry *e = loops;
    while (e->name != NULL && strcmp(e->name, name) != 0)
        e++;
    if (e->name == NULL || !em_is_float(out->dtype))
        return 0;
    if (nin != e->nin || nin > EM_CLOOP_MAX_IN) {
        PyErr_Format(PyExc_SystemError, "cloop %s takes %d inputs, got %d", name, e->nin, nin);
        return -1;
    }
    if (out->numel == 0)
        return 1;
    em_dtype_t compute = out->dtype == EM_FLOAT64 ? EM_FLOAT64 : EM_FLOAT32;
    PyArray_Descr *descr = em_dtypes[compute]->descr;
    PyArrayObject *bufs[EM_CLOOP_MAX_IN] = {NULL}, *dst = NULL;
    const void *ptrs[EM_CLOOP_MAX_IN];
    int status = -1;
    for (int i = 0; i < nin; i++) {
        em_Tensor *t = (em_Tensor *)ins[i];
        if (t->dtype == compute && same_layout(t, out)) {
            ptrs[i] = PyArray_DATA(t->array);
            continue;
        }
        Py_INCREF(descr);
        bufs[i] = (PyArrayObject *)PyArray_NewLikeArray(out->array, NPY_KEEPORDER, descr, 0);
        if (bufs[i] == NULL || PyArray_CopyInto(bufs[i], t->array) < 0)
            goto done;
        ptrs[i] = PyArray_DATA(bufs[i]);
    }
    if (out->dtype == compute) {
        dst = out->array;
        Py_INCREF(dst);
    }
    else {
        Py_INCREF(descr);
        dst = (PyArrayObject *)PyArray_NewLikeArray(out->array, NPY_KEEPORDER, descr, 0);
        if (dst == NULL)
            goto done;
    }
    {
        /* elementwise: the chunks (fixed multiples of EM_POOL_CHUNK elements) give the
         * same results on any number of threads */
        cloop_job job = {e, ptrs, nin, PyArray_DATA(dst), params, compute == EM_FLOAT32};
        if (em_run_chunked(cloop_range, &job, out->numel, 1) < 0)
            goto done;
    }
    if (dst != out->array && PyArray_CopyInto(out->array, dst) < 0)
        goto done;
    status = 1;
done:
    for (int i = 0; i < nin; i++)
        Py_XDECREF(bufs[i]);
    Py_XDECREF(dst);
    return status;
}

/* ------------------------------------------------------------------ softmax rows */

/* softmax (or log_softmax) of each length-n row of x into y: the maximum first, then
 * exp(x - max) (stored in y), its sum, and a scale (or x - max - log(sum)). The max
 * and the sum keep 16 partial lanes so that the compiler vectorises them without
 * reassociating anything itself. */
/* (kutil.h's em_v16f lanes: every clone gets full-width operations whatever the
 * vectoriser makes of a loop; it leaves lane-array max loops scalar) */
/* The maximum of n floats, NaN when any is NaN (a NaN makes a softmax row NaN, as
 * exp(x - max) does; an all -inf row gives NaN too, through -inf - -inf): two
 * branch-free vector accumulators, a select by mask for the max and a NaN mask. */
static inline float
max_nan_f32(const float *restrict x, Py_ssize_t n)
{
    em_v16f lm = {0};
    em_v16i ln = {0};
    lm -= INFINITY;
    Py_ssize_t i = 0;
    for (; i + EM_LANES <= n; i += EM_LANES) {
        em_v16f v;
        memcpy(&v, x + i, sizeof v);
        em_v16i gt = v > lm;
        lm = (em_v16f)((gt & (em_v16i)v) | (~gt & (em_v16i)lm));
        ln |= v != v;
    }
    float m = -INFINITY;
    int32_t nan = 0;
    for (; i < n; i++) {
        m = x[i] > m ? x[i] : m;
        nan |= x[i] != x[i];
    }
    for (int j = 0; j < EM_LANES; j++) {
        m = lm[j] > m ? lm[j] : m;
        nan |= ln[j];
    }
    return nan ? NAN : m;
}

EM_CLONES static void
softmax_rows_f32(const float *restrict x, float *restrict y, Py_ssize_t rows, Py_ssize_t n,
                 int log_out)
{
    for (Py_ssize_t r = 0; r < rows; r++) {
        const float *restrict xr = x + r * n;
        float *restrict yr = y + r * n;
        float ls[EM_LANES];
        for (int j = 0; j < EM_LANES; j++)
            ls[j] = 0.0f;
        float m = max_nan_f32(xr, n);
        Py_ssize_t i;
        for (i = 0; i < n; i++)
            yr[i] = em_expf(xr[i] - m);
        i = 0;
        for (; i + EM_LANES <= n; i += EM_LANES)
            for (int j = 0; j < EM_LANES; j++)
                ls[j] += yr[i + j];
        float s = 0.0f;
        for (int j = 0; j < EM_LANES; j++)
            s += ls[j];
        for (; i < n; i++)
            s += yr[i];
        if (log_out) {
            float l = logf(s);
            for (i = 0; i < n; i++)
                yr[i] = (xr[i] - m) - l;
        }
        else {
            float inv = 1.0f / s;
            for (i = 0; i < n; i++)
                yr[i] *= inv;
        }
    }
}

/* ------------------------------------------------------------------ layer_norm rows */

/* layer_norm of each length-n float32 row of x into y: the mean and the biased variance
 * (two passes, lane sums into double), then (x - mean) * rstd * w + b in float32, as
 * PyTorch computes float32 rows. w and b may be NULL. */
EM_CLONES static void
layer_norm_rows_f32(const float *restrict x, const float *restrict w, const float *restrict b,
                    float *restrict y, Py_ssize_t rows, Py_ssize_t n, double eps)
{
    for (Py_ssize_t r = 0; r < rows; r++) {
        const float *restrict xr = x + r * n;
        float *restrict yr = y + r * n;
        float mean, rstd;
        em_row_moments_f32(xr, n, eps, &mean, &rstd);
        if (w != NULL && b != NULL)
            for (Py_ssize_t i = 0; i < n; i++)
                yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
        else if (w != NULL)
            for (Py_ssize_t i = 0; i < n; i++)
                yr[i] = (xr[i] - mean) * rstd * w[i];
        else if (b != NULL)
            for (Py_ssize_t i = 0; i < n; i++)
                yr[i] = (xr[i] - mean) * rstd + b[i];
        else
            for (Py_ssize_t i = 0; i < n; i++)
                yr[i] = (xr[i] - mean) * rstd;
    }
}

void
em_layer_norm_f32(const float *x, const float *w, const float *b, float *y, Py_ssize_t rows,
                  Py_ssize_t n, double eps)
{
    layer_norm_rows_f32(x, w, b, y, rows, n, eps);
}

/* The sum of each length-n float32 row of x into y (lane sums gathered in double, so
 * more accurate than a float pairwise sum): sum and mean over the last dims. */
EM_CLONES static void
sum_rows_f32(const float *restrict x, float *restrict y, Py_ssize_t rows, Py_ssize_t n)
{
    for (Py_ssize_t r = 0; r < rows; r++)
        y[r] = (float)em_lane_sum_f32(x + r * n, n, 0.0f, 0);
}

void
em_sum_rows_f32(const float *x, float *y, Py_ssize_t rows, Py_ssize_t n)
{
    sum_rows_f32(x, y, rows, n);
}


/* For each length-n float32 row of x: lse[r] = log(sum exp(x)) (the max taken out) and
 * total[r] = sum x (unless total is NULL), both in double: cross_entropy's per-row
 * statistics. The exps go
 * through a small buffer so that their loop vectorises like softmax's. */
#define EM_LSE_BUF 256
EM_CLONES static void
lse_rows_f32(const float *restrict x, double *restrict lse, double *restrict total,
             Py_ssize_t rows, Py_ssize_t n)
{
    float buf[EM_LSE_BUF];
    for (Py_ssize_t r = 0; r < rows; r++) {
        const float *restrict xr = x + r * n;
        float m = max_nan_f32(xr, n);
        double s = 0.0;
        for (Py_ssize_t i0 = 0; i0 < n; i0 += EM_LSE_BUF) {
            Py_ssize_t k = n - i0 < EM_LSE_BUF ? n - i0 : EM_LSE_BUF;
            for (Py_ssize_t i = 0; i < k; i++)
                buf[i] = em_expf(xr[i0 + i] - m);
            s += em_lane_sum_f32(buf, k, 0.0f, 0);
        }
        lse[r] = (double)m + log(s);
        if (total != NULL)
            total[r] = em_lane_sum_f32(xr, n, 0.0f, 0);
    }
}

void
em_lse_rows_f32(const float *x, double *lse, double *total, Py_ssize_t rows, Py_ssize_t n)
{
    lse_rows_f32(x, lse, total, rows, n);
}

static void
softmax_rows_f64(const double *restrict x, double *restrict y, Py_ssize_t rows, Py_ssize_t n,
                 int log_out)
{
    for (Py_ssize_t r = 0; r < rows; r++) {
        const double *restrict xr = x + r * n;
        double *restrict yr = y + r * n;
        double m = -INFINITY;
        for (Py_ssize_t i = 0; i < n; i++)
            m = (xr[i] > m || xr[i] != xr[i]) ? xr[i] : m;
        double s = 0.0;
        for (Py_ssize_t i = 0; i < n; i++) {
            double e = exp(xr[i] - m);
            if (!log_out)
                yr[i] = e;
            s += e;
        }
        if (log_out) {
            double ls = log(s);
            for (Py_ssize_t i = 0; i < n; i++)
                yr[i] = (xr[i] - m) - ls;
        }
        else {
            for (Py_ssize_t i = 0; i < n; i++)
                yr[i] /= s;
        }
    }
}

typedef struct {
    const void *x;
    void *y;
    Py_ssize_t n;
    int log_out;
    bool f32;
} softmax_job;

static void
softmax_range(void *ctx, int64_t a, int64_t b)
{
    softmax_job *j = ctx;
    if (j->f32)
        softmax_rows_f32((const float *)j->x + a * j->n, (float *)j->y + a * j->n, b - a,
                         j->n, j->log_out);
    else
        softmax_rows_f64((const double *)j->x + a * j->n, (double *)j->y + a * j->n, b - a,
                         j->n, j->log_out);
}

/* softmax / log_softmax of a contiguous float32 or float64 tensor along its last dim
 * into out (same dtype, contiguous); rows on the pool (em_run_chunked: chunks of whole
 * rows, each row computed alone, the same results at any thread count). Returns 1 when done, 0 when the case is not this
 * one (the caller computes another way), -1 with an exception (a signal handler
 * raised while the rows ran on the pool). */
int
em_softmax_lastdim(em_Tensor *x, em_Tensor *out, int log_out)
{
    if (x->dtype != out->dtype || (x->dtype != EM_FLOAT32 && x->dtype != EM_FLOAT64) ||
        x->ndim == 0 || !PyArray_IS_C_CONTIGUOUS(x->array) ||
        !PyArray_IS_C_CONTIGUOUS(out->array) || x->numel == 0)
        return 0;
    Py_ssize_t n = x->sizes[x->ndim - 1], rows = x->numel / n;
    softmax_job job = {PyArray_DATA(x->array), PyArray_DATA(out->array), n, log_out,
                       x->dtype == EM_FLOAT32};
    return em_run_chunked(softmax_range, &job, rows, n) < 0 ? -1 : 1;
}
