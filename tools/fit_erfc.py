"""Fits the coefficients of the JIT's all-float32 erfc (csrc/jit/vecmath_erfc.c,
em_ir_erfcf's FMA variant) and reports the error of a float32 evaluation of them
(NumPy, FMA emulated in float64).

    erfc(z) = t S(t) exp(-z^2),   t = 1 / (1 + z/2),  z >= 0,  S a polynomial in u = t - 1/2

(Numerical Recipes' t, with S = erfc(z) exp(z^2) / t fitted on t in [1/(1 + 10.1/2), 1],
one formula down to z = 0). S's coefficients are fitted one by one (relative least
squares on Chebyshev nodes) after rounding the lower ones to float32. exp(-z^2) is
exp(-hi) (1 - lo) with z^2 = hi + lo exactly, so exp(-hi) runs beside the division and
S. The model evaluates S and exp's polynomial in the JIT's order (two halves, estrin),
so its error is the JIT's.

    python tools/fit_erfc.py
"""
import math

import numpy as np

ZMAX, DEG = 10.1, 12
f32, f64 = np.float32, np.float64
erfc = np.vectorize(math.erfc)


def nodes(a, b, n=4000):
    k = np.arange(n)
    return (a + b) / 2 + (b - a) / 2 * np.cos((2 * k + 1) * np.pi / (2 * n))


def fit():
    t = nodes(1 / (1 + ZMAX / 2), 1.0)
    z = 2 * (1 / t - 1)
    y = erfc(z) * np.exp(z * z) / t
    v = np.vander(t - 0.5, DEG, increasing=True)
    r, c = y.copy(), []
    for k in range(DEG):
        ck, *_ = np.linalg.lstsq(v[:, k:] / y[:, None], r / y, rcond=None)
        c.append(f32(ck[0]))
        r = r - f64(c[-1]) * (t - 0.5) ** k
    return c, np.abs(r / y).max()


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
    """S(u) = A(u) + u^6 B(u), A and B by Horner: two shorter dependency chains"""
    u2 = f32(u * u)
    return fma(horner(c[6:], u), f32(f32(u2 * u2) * u2), horner(c[:6], u))


def erfc32(x, s):
    x = x.astype(f32)
    z = np.abs(x)
    zc = np.minimum(z, f32(10.5))
    d = fma(zc, f32(0.5), f32(1))
    dl = f32(f64(1) + f64(zc) * 0.5 - f64(d))
    th = f32(f32(1) / d)
    ct = f32(fma(-th, d, f32(1)) - f32(th * dl))      # t = th (1 + ct)
    sp = two_halves(s, f32(th - f32(0.5)))
    hi = f32(zc * zc)
    lo = fma(zc, zc, -hi)
    n = np.floor(fma(-hi, f32(1.44269504088896341), f32(0.5)))
    r = fma(n, f32(2.12194440e-4), fma(n, f32(-0.693359375), -hi))
    e = fma(estrin(EXP_P, r), f32(r * r), r)            # exp(r) - 1
    tc = fma(th, f32(ct - lo), th)
    ts = f32(tc * sp)
    y = fma(ts, e, ts)
    ni = n.astype(np.int32)
    n1 = ni >> 1
    y = f32(y * np.ldexp(f32(1), n1).astype(f32))
    y = f32(y * np.ldexp(f32(1), ni - n1).astype(f32))
    y = np.where(z > f32(10.5), f32(0), y)
    return np.where(x < 0, f32(f32(2) - y), y)


def main():
    s, err = fit()
    print("S =", [float(c) for c in s])
    print(f"fit error {err:.2e} (relative)")
    x = np.concatenate([np.linspace(-11, 11, 2_000_001), np.geomspace(1e-9, 10.1, 1_000_000),
                        np.linspace(9, 10.1, 1_000_000)]).astype(f32)
    with np.errstate(all="ignore"):
        got = erfc32(x, s).astype(f64)
    want = erfc(x.astype(f64))
    ulp = np.spacing(want.astype(f32)).astype(f64)
    e = np.abs(got - want) / ulp
    print(f"float32 evaluation: max {e.max():.2f} ulp at x = {x[np.argmax(e)]}")


if __name__ == "__main__":
    main()
