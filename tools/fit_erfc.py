"""Fits the coefficients of the JIT's all-float32 erfc (csrc/jit/vecmath_erfc.c,
em_ir_erfcf's FMA variant) and reports the error of a float32 evaluation of them
(NumPy, FMA emulated in float64).

    erfc(z) = t exp(-z^2 + q(t)),   t = 1 / (1 + z/2),  z >= 0
    q(t)    = c0 + u P(u),          u = t - 1/2          (q = log(erfc(z) / t) + z^2)

(the structure of Numerical Recipes' erfcc, refitted on the range used:
t in [1/(1 + 10.1/2), 1], one formula down to z = 0); c0 is kept as two floats
(hi + lo), P's coefficients are fitted one by one after rounding the lower ones to
float32 (least squares on Chebyshev nodes). The model evaluates P and exp's polynomial
in the JIT's order (two_halves, estrin), so its error is the JIT's.

    python tools/fit_erfc.py
"""
import math

import numpy as np

ZMAX, DEG = 10.1, 10
f32, f64 = np.float32, np.float64
erfc = np.vectorize(math.erfc)


def nodes(a, b, n=4000):
    k = np.arange(n)
    return (a + b) / 2 + (b - a) / 2 * np.cos((2 * k + 1) * np.pi / (2 * n))


def target(t):
    z = 2 * (1 / t - 1)
    return np.log(erfc(z)) + z * z - np.log(t)


def fit():
    t = nodes(1 / (1 + ZMAX / 2), 1.0)
    y = target(t)
    v = np.vander(t - 0.5, DEG + 1, increasing=True)
    c, *_ = np.linalg.lstsq(v, y, rcond=None)
    hi = f32(c[0])
    lo = f32(c[0] - f64(hi))
    resid, p = y - (f64(hi) + f64(lo)), []
    for k in range(1, DEG + 1):
        ck, *_ = np.linalg.lstsq(v[:, k:], resid, rcond=None)
        p.append(f32(ck[0]))
        resid = resid - f64(p[-1]) * (t - 0.5) ** k
    return hi, lo, p, np.abs(resid).max()


def fma(a, b, c):
    return f32(f64(a) * f64(b) + f64(c))


def two_sum(a, b):
    s = f32(a + b)
    bb = f32(s - a)
    aa = f32(s - bb)
    return s, f32(f32(a - aa) + f32(b - bb))


EXP_P = [5.0000001201e-1, 1.6666665459e-1, 4.1665795894e-2, 8.3334519073e-3,
         1.3981999507e-3, 1.9875691500e-4]      # Cephes expf.c, as vecmath_ir.c
def horner(c, u):
    acc = np.full_like(u, f32(c[-1]))
    for ci in c[-2::-1]:
        acc = fma(acc, u, f32(ci))
    return acc


def estrin(c, u):
    """as em_vm_poly_estrin: c[2i] + c[2i+1] u, then pairs with u^2, u^4, ..."""
    t, pw = [np.full_like(u, f32(ci)) for ci in c], u
    while len(t) > 1:
        t = [fma(t[i + 1], pw, t[i]) if i + 1 < len(t) else t[i] for i in range(0, len(t), 2)]
        pw = f32(pw * pw)
    return t[0]


def two_halves(c, u):
    """P(u) = A(u) + u^5 B(u), A and B by Horner: two shorter dependency chains (Estrin
    over all of P loses 1 ulp to cancellation near t = 1)"""
    u2 = f32(u * u)
    return fma(horner(c[5:], u), f32(f32(u2 * u2) * u), horner(c[:5], u))


def erfc32(x, hi_c, lo_c, p):
    x = x.astype(f32)
    z = np.abs(x)
    zc = np.minimum(z, f32(10.5))
    d = fma(zc, f32(0.5), f32(1))
    dl = f32(f64(1) + f64(zc) * 0.5 - f64(d))
    th = f32(f32(1) / d)
    ct = f32(fma(-th, d, f32(1)) - f32(th * dl))      # t = th (1 + ct)
    u = f32(th - f32(0.5))
    q = fma(u, two_halves(p, u), hi_c)
    hi = f32(zc * zc)
    lo = fma(zc, zc, -hi)
    s, e1 = two_sum(-hi, q)
    corr = f32(f32(e1 + f32(lo_c - lo)) + ct)
    n = np.floor(fma(s, f32(1.44269504088896341), f32(0.5)))
    r = fma(n, f32(2.12194440e-4), fma(n, f32(-0.693359375), s))
    e = fma(estrin(EXP_P, r), f32(r * r), r)            # exp(r) - 1
    tc = fma(th, corr, th)
    y = fma(tc, e, tc)
    ni = n.astype(np.int32)
    n1 = ni >> 1
    y = f32(y * np.ldexp(f32(1), n1).astype(f32))
    y = f32(y * np.ldexp(f32(1), ni - n1).astype(f32))
    y = np.where(z > f32(10.5), f32(0), y)
    return np.where(x < 0, f32(f32(2) - y), y)


def main():
    hi, lo, p, err = fit()
    print(f"c0 = {float(hi)!r} + {float(lo)!r}")
    print("P =", [float(c) for c in p])
    print(f"fit error {err:.2e} (absolute, in the exponent)")
    x = np.concatenate([np.linspace(-11, 11, 2_000_001), np.geomspace(1e-9, 10.1, 1_000_000),
                        np.linspace(9, 10.1, 1_000_000)]).astype(f32)
    with np.errstate(all="ignore"):
        got = erfc32(x, hi, lo, p).astype(f64)
    want = erfc(x.astype(f64))
    ulp = np.spacing(want.astype(f32)).astype(f64)
    e = np.abs(got - want) / ulp
    print(f"float32 evaluation: max {e.max():.2f} ulp at x = {x[np.argmax(e)]}")


if __name__ == "__main__":
    main()
