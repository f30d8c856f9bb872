/* special.c: the special functions of ember.special in float64 (digamma, the Hurwitz
 * zeta function, erfinv, erfcx, ndtri, the modified Bessel functions I0 and I1 and their
 * exponentially scaled forms), with PyTorch's values at poles, infinities and NaN.
 *
 * Each is written from its defining series or expansion: digamma by the recurrence
 * psi(x + 1) = psi(x) + 1/x up to x >= 10 and its asymptotic series; zeta(x, q) by
 * Euler-Maclaurin summation; erfinv and ndtri by Halley's iteration on erf/erfc from
 * Winitzki's closed-form estimate; erfcx by exp(x^2) erfc(x) (the square split exactly)
 * and, from x = 10, by the continued fraction of erfc; I0 and I1 by their power series
 * up to 30 and their asymptotic (Hankel) expansion beyond.
 */
#include <float.h>
#include <math.h>

#include "kernels/special.h"

#define EM_PI 3.14159265358979323846
#define SQRT_PI 1.77245385090551602730
#define SQRT_2 1.41421356237309504880
#define EPS DBL_EPSILON

/* B_2j / (2j)! for j = 1..12, from the Bernoulli numbers B_2 = 1/6, B_4 = -1/30, ...,
 * B_24 = -236364091/2730 (the Euler-Maclaurin and Stirling correction terms) */
static const double bern[12] = {
    0.083333333333333329,    -0.0013888888888888889,   3.3068783068783071e-05,
    -8.2671957671957675e-07, 2.08767569878681e-08,     -5.2841901386874932e-10,
    1.3382536530684679e-11,  -3.3896802963225827e-13,  8.5860620562778452e-15,
    -2.1748686985580619e-16, 5.5090028283602295e-18,   -1.3954464685812522e-19,
};

double
em_digamma(double x)
{
    if (isnan(x) || x == -INFINITY)
        return NAN;
    if (x == 0.0)
        return copysign(INFINITY, -x);     /* -inf at +0, +inf at -0, as PyTorch */
    double acc = 0.0;
    if (x < 0.0) {
        if (x == floor(x))
            return NAN;
        /* reflection: psi(x) = psi(1 - x) - pi / tan(pi x), tan(pi x) from x's fraction */
        double frac = x - floor(x);
        acc = -EM_PI / tan(EM_PI * frac);
        x = 1.0 - x;
    }
    if (x == INFINITY)
        return INFINITY;
    while (x < 10.0) {
        acc -= 1.0 / x;
        x += 1.0;
    }
    /* psi(x) ~ log x - 1/(2x) - sum_j B_2j / (2j x^2j) */
    double inv2 = 1.0 / (x * x), pw = inv2, ser = 0.0;
    for (int j = 1; j <= 7; j++) {
        /* B_2j / (2j) = bern[j-1] * (2j - 1)! */
        double b = bern[j - 1];
        for (int m = 2; m < 2 * j; m++)
            b *= m;
        ser += b * pw;
        pw *= inv2;
    }
    return acc + log(x) - 0.5 / x - ser;
}

double
em_zeta(double x, double q)
{
    if (isnan(x) || isnan(q))
        return NAN;
    if (x == 1.0)
        return INFINITY;
    if (x < 1.0)
        return NAN;
    if (q <= 0.0) {
        if (q == floor(q))
            return INFINITY;
        if (x != floor(x))
            return NAN;      /* (q + k)^-x is not real */
    }
    /* PyTorch's NaN for an infinite q, and for an infinite x beside q > 1 */
    if (q == INFINITY || (x == INFINITY && q > 1.0))
        return NAN;
    /* sum_{k < N} (q + k)^-x directly until q + N > 9 (at least 9 terms) ... */
    double s = pow(q, -x), a = q, b = 0.0;
    int i = 0;
    while (i < 9 || a <= 9.0) {
        i++;
        a += 1.0;
        b = pow(a, -x);
        s += b;
        if (fabs(b) <= EPS * fabs(s))
            return s;
    }
    /* ... then the tail from a = q + N: its integral, minus half its first term (s
     * holds all of it), and the Bernoulli terms B_2j/(2j)! x(x+1)...(x+2j-2) a^(1-x-2j) */
    s += b * a / (x - 1.0) - 0.5 * b;
    double rise = 1.0, k = 0.0;
    for (int j = 0; j < 12; j++) {
        rise *= x + k;
        b /= a;
        double t = rise * b * bern[j];
        s += t;
        if (fabs(t) <= EPS * fabs(s))
            break;
        k += 1.0;
        rise *= x + k;
        b /= a;
        k += 1.0;
    }
    return s;
}

/* exp(x * x) with the rounding error of the square folded in (fma gives it exactly) */
static double
exp_sq(double x)
{
    double x2 = x * x, err = fma(x, x, -x2);
    return exp(x2) * (1.0 + err);
}

double
em_erfcx(double x)
{
    if (isnan(x))
        return NAN;
    if (x < 0.0) {
        if (x < -26.7)
            return INFINITY;     /* 2 exp(x^2) overflows */
        return 2.0 * exp_sq(x) - em_erfcx(-x);
    }
    if (x < 10.0)
        return exp_sq(x) * erfc(x);
    /* erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))) */
    double t = x;
    for (int k = 40; k >= 1; k--)
        t = x + 0.5 * k / t;
    return 1.0 / (SQRT_PI * t);
}

/* Winitzki's estimate of erfinv (relative error below 2e-3) from L = log(1 - y^2) */
static double
winitzki(double L)
{
    const double a = 0.147, c = 2.0 / (EM_PI * 0.147);
    double t = c + 0.5 * L;
    return sqrt(sqrt(t * t - L / a) - t);
}

/* erfinv(y) for 0 < |y| <= 1/2: Halley's iteration on erf(x) = y */
static double
erfinv_central(double y)
{
    double x = copysign(winitzki(log1p(-y * y)), y);
    for (int it = 0; it < 8; it++) {
        double dx = (erf(x) - y) * (0.5 * SQRT_PI) * exp_sq(x);
        x -= dx / (1.0 + x * dx);
        if (fabs(dx) <= EPS * fabs(x))
            break;
    }
    return x;
}

/* erfcinv(z) for 0 < z <= 1/2 (a positive x): Halley's iteration on erfc(x) = z, the
 * step (erfc(x) - z) / erfc'(x) written with erfcx so that it holds in the far tail */
static double
erfcinv_tail(double z)
{
    double x = winitzki(log(z * (2.0 - z))), lz = log(z);
    for (int it = 0; it < 30; it++) {
        double dx = -(0.5 * SQRT_PI) * (em_erfcx(x) - exp(lz + x * x));
        x -= dx / (1.0 + x * dx);
        if (fabs(dx) <= EPS * fabs(x))
            break;
    }
    return x;
}

double
em_erfinv(double y)
{
    if (isnan(y) || fabs(y) > 1.0)
        return NAN;
    if (fabs(y) == 1.0)
        return copysign(INFINITY, y);
    if (y == 0.0)
        return y;
    if (fabs(y) <= 0.5)
        return erfinv_central(y);
    return copysign(erfcinv_tail(1.0 - fabs(y)), y);    /* 1 - |y| is exact */
}

double
em_ndtri(double p)
{
    if (isnan(p) || p < 0.0 || p > 1.0)
        return NAN;
    if (p == 0.0)
        return -INFINITY;
    if (p == 1.0)
        return INFINITY;
    /* ndtri(p) = -sqrt(2) erfcinv(2p); 2p and 2 - 2p are exact */
    double z = 2.0 * p;
    if (z <= 0.5)
        return -SQRT_2 * erfcinv_tail(z);
    if (z < 1.5)
        return -SQRT_2 * (z == 1.0 ? 0.0 : erfinv_central(1.0 - z));
    return SQRT_2 * erfcinv_tail(2.0 - z);
}

/* I_nu(x) for nu 0 or 1 and 0 <= x <= 30 by its power series (all terms positive):
 * sum_k (x/2)^(2k + nu) / (k! (k + nu)!) */
static double
bessel_i_series(double x, int nu)
{
    double q = 0.25 * x * x, term = nu ? 0.5 * x : 1.0, sum = term;
    for (int k = 1; k < 500; k++) {
        term *= q / ((double)k * (double)(k + nu));
        sum += term;
        if (term <= EPS * sum)
            break;
    }
    return sum;
}

/* exp(-x) I_nu(x) for x > 30 by the asymptotic expansion
 * 1/sqrt(2 pi x) sum_k (-1)^k prod_{m<=k} (4nu^2 - (2m-1)^2) / (k! (8x)^k) */
static double
bessel_ie_asym(double x, int nu)
{
    double mu = 4.0 * nu * nu, term = 1.0, sum = 1.0;
    for (int k = 1; k < 100; k++) {
        double odd = 2.0 * k - 1.0;
        term *= -(mu - odd * odd) / (8.0 * k * x);
        sum += term;
        if (fabs(term) <= EPS * fabs(sum))
            break;
    }
    return sum / sqrt(2.0 * EM_PI * x);
}

double
em_i0(double x)
{
    double ax = fabs(x);
    if (isnan(x))
        return NAN;
    if (ax <= 30.0)
        return bessel_i_series(ax, 0);
    return exp(ax) * bessel_ie_asym(ax, 0);     /* NaN at +-inf, as PyTorch */
}

double
em_i0e(double x)
{
    double ax = fabs(x);
    if (isnan(x))
        return NAN;
    if (ax <= 30.0)
        return bessel_i_series(ax, 0) * exp(-ax);
    return bessel_ie_asym(ax, 0);
}

double
em_i1(double x)
{
    double ax = fabs(x), v;
    if (isnan(x))
        return NAN;
    v = ax <= 30.0 ? bessel_i_series(ax, 1) : exp(ax) * bessel_ie_asym(ax, 1);
    return x < 0.0 ? -v : v;
}

double
em_i1e(double x)
{
    double ax = fabs(x), v;
    if (isnan(x))
        return NAN;
    v = ax <= 30.0 ? bessel_i_series(ax, 1) * exp(-ax) : bessel_ie_asym(ax, 1);
    return x < 0.0 ? -v : v;
}
