/* vecmath.h: branch-free elementary functions the compiler can vectorise.
 *
 * Used by the C loops of eager kernels (cloops.c). Each function is exact at its
 * special values (NaN in -> NaN out, infinities and signed zeros as C99's libm gives
 * them) and accurate to a few ulp elsewhere. Branches are written as ternaries that
 * select between values computed on every lane, so GCC turns them into blends.
 *
 * Only float32 lives here: the float64 loops call libm, which is correctly rounded or
 * nearly so, and the tests hold float64 to 1e-10.
 */
#ifndef EM_VECMATH_H
#define EM_VECMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/erfc_fit.h"

static inline float
em_bits_to_float(int32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline int32_t
em_float_to_bits(float f)
{
    int32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

/* exp(x) in float32: range reduction x = n ln2 + r, then a degree-6 polynomial.
 * Coefficients from the Cephes Math Library (S. L. Moshier), expf.c. */
static inline float
em_expf(float x)
{
    float c = x < -87.33654f ? -87.33654f : x;   /* ternaries, not fminf: they vectorise */
    c = c > 88.72283f ? 88.72283f : c;
    float n = floorf(c * 1.44269504088896341f + 0.5f);
    float r = c - n * 0.693359375f - n * -2.12194440e-4f;
    float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r2 + r + 1.0f;
    /* 2^n in two factors: n reaches 128 just below the overflow threshold */
    int32_t ni = (int32_t)n;
    float scale = em_bits_to_float((ni + (ni > 0 ? 126 : 127)) << 23);
    float e = y * scale * (ni > 0 ? 2.0f : 1.0f);
    e = x < -87.33654f ? 0.0f : e;
    e = x > 88.72283f ? INFINITY : e;
    return x != x ? x : e;
}

/* exp(x) - 1 without the cancellation near 0: the Taylor series for |x| < 0.5 (terms to
 * x^8/8!, truncation below 2e-8 relative), expf(x) - 1 elsewhere (|result| >= 0.39, so
 * the subtraction loses at most a bit). */
static inline float
em_expm1f(float x)
{
    float p = 1.0f / 40320.0f;
    p = p * x + 1.0f / 5040.0f;
    p = p * x + 1.0f / 720.0f;
    p = p * x + 1.0f / 120.0f;
    p = p * x + 1.0f / 24.0f;
    p = p * x + 1.0f / 6.0f;
    p = p * x + 0.5f;
    float small = x + x * x * p;
    float big = em_expf(x) - 1.0f;
    /* x + x*x*p is +0 at x = -0: expm1(-0) is -0 (libm's and PyTorch's elu keep it) */
    return x == 0.0f ? x : fabsf(x) < 0.5f ? small : big;
}

/* log(x) in float32: x = 2^e m with m in [sqrt(1/2), sqrt(2)), then
 * log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716, by its series to s^9
 * (truncation below 3e-10 relative); e ln2 is added in two parts (ln2_hi has 9
 * significant bits, so e * ln2_hi is exact). Subnormals are scaled by 2^23 first. */
static inline float
em_logf(float x)
{
    float xs = x < 1.17549435e-38f ? x * 8388608.0f : x;
    int32_t e_adj = x < 1.17549435e-38f ? -23 : 0;
    int32_t ix = em_float_to_bits(xs);
    int32_t mant = ix & 0x007fffff;
    int32_t big = mant > 0x003504f3;       /* m > sqrt(2): take m / 2 */
    float m = em_bits_to_float(mant | (big ? 0x3f000000 : 0x3f800000));
    float e = (float)(((ix >> 23) & 0xff) - 127 + e_adj + big);
    float f = m - 1.0f;                    /* exact (Sterbenz) */
    float s = f / (2.0f + f);
    float s2 = s * s;
    float r = 2.0f / 9.0f;
    r = r * s2 + 2.0f / 7.0f;
    r = r * s2 + 2.0f / 5.0f;
    r = r * s2 + 2.0f / 3.0f;
    float logm = 2.0f * s + s * s2 * r;
    float y = e * 0.693359375f + (logm + e * -2.12194440e-4f);
    y = x < 0.0f ? NAN : y;
    y = x == 0.0f ? -INFINITY : y;
    y = x == INFINITY ? INFINITY : y;
    return x != x ? x : y;
}

/* log(1 + x): u = 1 + x rounded, then log(u) corrected by (x - (u - 1)) / u, the
 * first-order term of what the rounding of u lost (exact when u == 1). */
static inline float
em_log1pf(float x)
{
    float u = 1.0f + x;
    float y = em_logf(u) + (x - (u - 1.0f)) / u;
    y = u == 0.0f ? -INFINITY : y;
    y = x == INFINITY ? INFINITY : y;
    return x != x ? x : y;
}

/* tanh(x) = -expm1(-2|x|) / (expm1(-2|x|) + 2) with x's sign: no cancellation near 0,
 * and 1 (not NaN) for large |x|. */
static inline float
em_tanhf(float x)
{
    float a = fabsf(x);
    float e = em_expm1f(-2.0f * a);
    float t = -e / (e + 2.0f);
    return copysignf(t, x);
}

/* erf(x) for |x| < 0.75: its Taylor series, terms to x^19 (truncation below 5e-11
 * relative); the coefficients are 2/sqrt(pi) (-1)^n / (n! (2n + 1)). */
static inline float
em_erf_small(float x)
{
    float x2 = x * x;
    float p = -1.63658447e-7f;
    p = p * x2 + 1.64621144e-6f;
    p = p * x2 - 1.49256504e-5f;
    p = p * x2 + 1.20553330e-4f;
    p = p * x2 - 8.54832702e-4f;
    p = p * x2 + 5.22397763e-3f;
    p = p * x2 - 2.68661706e-2f;
    p = p * x2 + 1.12837917e-1f;
    p = p * x2 - 3.76126389e-1f;
    p = p * x2 + 1.12837917f;
    return x * p;
}

/* erfc(z) for z >= 0 (NaN for NaN), by the Chebyshev fit of Numerical Recipes in C (2nd
 * ed., section 6.2, erfcc; fractional error below 1.2e-7):
 *     erfc(z) = t exp(-z^2 - 1.26551223 + t P(t)),   t = 1 / (1 + z/2),
 * with exp(-z^2) taken as exp(-zh^2) exp(-(z - zh)(z + zh)), zh = z to 12 bits, so that
 * the rounding of z^2 does not cost relative accuracy in the tail. */
/* P(t) of that fit (Horner; erfc_fit.h's coefficients, which the JIT shares) */
static inline float
em_erfc_tail_p(float t)
{
    const float *c = em_erfc_fit_p;
    float p = c[8];
    p = p * t + c[7];
    p = p * t + c[6];
    p = p * t + c[5];
    p = p * t + c[4];
    p = p * t + c[3];
    p = p * t + c[2];
    p = p * t + c[1];
    p = p * t + c[0];
    return p;
}

static inline float
em_erfc_tail(float z)
{
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = em_erfc_tail_p(t);
    float zc = z > 10.5f ? 10.5f : z;      /* erfc(10.5) underflows float32 anyway */
    float zh = em_bits_to_float(em_float_to_bits(zc) & ~(int32_t)0xfff);
    float r = t * em_expf(-zh * zh) * em_expf(-(zc - zh) * (zc + zh) + EM_ERFC_FIT_C + t * p);
    r = z > 10.5f ? 0.0f : r;
    return z != z ? z : r;
}

/* erf(x) for float32: the series for |x| < 0.75, else sign(x) (1 - erfc(|x|)), where
 * erfc(|x|) < 0.29 and its error shrinks in the subtraction. */
static inline float
em_erff(float x)
{
    float big = copysignf(1.0f - em_erfc_tail(fabsf(x)), x);
    return fabsf(x) < 0.75f ? em_erf_small(x) : big;
}

/* erfc(x) for float32: 1 - erf(x) for |x| < 0.75 (the result is in (0.28, 1.72)), the
 * tail for larger x, 2 - erfc(-x) for x <= -0.75. */
static inline float
em_erfcf(float x)
{
    float z = fabsf(x);
    float tail = em_erfc_tail(z);
    float r = x < 0.0f ? 2.0f - tail : tail;
    return z < 0.75f ? 1.0f - em_erf_small(x) : r;
}

#endif /* EM_VECMATH_H */
