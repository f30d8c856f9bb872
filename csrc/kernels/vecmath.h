/* vecmath.h: branch-free elementary functions the compiler can vectorise.
 *
 * Used by the C loops of eager kernels (cloops.c). Each function is exact at its
 * special values (NaN in -> NaN out) and accurate to a few ulp elsewhere.
 */
#ifndef EM_VECMATH_H
#define EM_VECMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

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
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float e = y * scale;
    e = x < -87.33654f ? 0.0f : e;
    e = x > 88.72283f ? INFINITY : e;
    return x != x ? x : e;
}

#endif /* EM_VECMATH_H */
