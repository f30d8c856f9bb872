/* erfc_fit.h: the Chebyshev fit of erfc that eager's float32 erfc and gelu
 * (kernels/vecmath.h, cloops.c) and the JIT's (jit/vecmath_erf.c) evaluate.
 *
 * Numerical Recipes in C (2nd ed., section 6.2, erfcc), fractional error below 1.2e-7
 * for every z >= 0:
 *     erfc(z) = t exp(-z^2 + EM_ERFC_FIT_C + t P(t)),   t = 1 / (1 + z/2),
 * P's coefficients lowest degree first, as float32 (the value both evaluate). */
#ifndef EM_ERFC_FIT_H
#define EM_ERFC_FIT_H

#define EM_ERFC_FIT_N 9
#define EM_ERFC_FIT_C (-1.26551223f)

static const float em_erfc_fit_p[EM_ERFC_FIT_N] = {
    1.00002368f, 0.37409196f, 0.09678418f, -0.18628806f, 0.27886807f,
    -1.13520398f, 1.48851587f, -0.82215223f, 0.17087277f};

#endif /* EM_ERFC_FIT_H */
