"""Fits the coefficients of the JIT's float32 erf (csrc/jit/vecmath_ir.c, em_ir_erff)
and reports the error of a float32 evaluation of them.

    erf(x) = x * P(x^2)                          |x| < 1
    erf(x) = sign(x) * (1 - exp(Q(|x| - 1)))     1 <= |x| < 3.93   (Q ~ log erfc)
    erf(x) = sign(x)                             beyond

Least squares on Chebyshev nodes (relative error for P), in float64; the printed
coefficients are rounded to float32 as the C code uses them.

    python tools/fit_erf.py
"""
import math

import numpy as np

DEG_P, DEG_Q, SPLIT, TOP = 6, 9, 1.0, 3.93

erf = np.vectorize(math.erf)
erfc = np.vectorize(math.erfc)


def nodes(a, b, n=4000):
    k = np.arange(n)
    return (a + b) / 2 + (b - a) / 2 * np.cos((2 * k + 1) * np.pi / (2 * n))


def fit():
    x = nodes(0.0, SPLIT)
    y = erf(x) / x
    v = np.vander(x * x, DEG_P + 1, increasing=True)
    p, *_ = np.linalg.lstsq(v / y[:, None], np.ones_like(y), rcond=None)
    xb = nodes(SPLIT, TOP)
    vb = np.vander(xb - SPLIT, DEG_Q + 1, increasing=True)
    q, *_ = np.linalg.lstsq(vb, np.log(erfc(xb)), rcond=None)
    return p.astype(np.float32), q.astype(np.float32)


def erf32(x, p, q):
    f = np.float32
    x = x.astype(f)
    ax = np.abs(x)

    def horner(c, u):
        acc = np.full_like(u, c[-1])
        for ci in c[-2::-1]:
            acc = (acc * u + ci).astype(f)
        return acc
    small = x * horner(p, (x * x).astype(f))
    big = (f(1) - np.exp(horner(q, (ax - f(SPLIT)).astype(f))).astype(f)).astype(f)
    big = np.copysign(np.where(ax >= f(TOP), f(1), big), x)
    return np.where(ax < f(SPLIT), small, big).astype(f)


def main():
    p, q = fit()
    print("P =", [float(c) for c in p])
    print("Q =", [float(c) for c in q])
    x = np.concatenate([np.linspace(-5, 5, 2_000_001),
                        np.geomspace(1e-30, 1, 100_000)]).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        got = erf32(x, p, q).astype(np.float64)
    want = erf(x.astype(np.float64))
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    err = np.abs(got - want) / ulp
    print(f"max error {err.max():.2f} ulp at x = {x[np.argmax(err)]}, mean {err.mean():.3f}")


if __name__ == "__main__":
    main()
