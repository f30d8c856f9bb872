"""Fusion (compiler/fusion.py): what a kernel stores on the way, and where it reads it."""
import warnings

import numpy as np
import pytest

import ember
from ember.compiler.loop_ir import Affine, Kernel, LoopIRError, Param, Stmt, verify


def test_a_value_a_kernel_stores_is_computed_again_where_it_reads_another_point():
    """Found by the fuzzer: v0 is stored by the kernel computing the output (the
    backward saves it) and read there at v0[2] too; loading that element from the buffer
    read it before the loop's third point wrote it. It is computed again instead."""
    def f(x):
        v0 = x.nan_to_num()
        return v0 + v0 / v0[-1, None]

    base = np.zeros(7)
    base[1::2] = [0.3, -1.2, 0.8]
    for grad in (False, True):
        x = ember.from_numpy(base[1::2]).requires_grad_(grad)
        with warnings.catch_warnings():
            warnings.simplefilter("error")          # no fallback to aot_eager
            got = ember.compile(f, backend="llvm")(x)
        np.testing.assert_allclose(got.detach().numpy(), f(x).detach().numpy(), rtol=1e-15)


def _kernel(stmts):
    f64 = ember.float64
    return Kernel("k", (4,), 0, [Param(("in", 0), f64, 4), Param(("buf", 0), f64, 4)],
                  stmts)


def test_the_verifier_refuses_reads_of_what_the_kernel_has_not_written_yet():
    f64, i = ember.float64, Affine((1,))
    load_in = Stmt("load", 0, f64, param=0, index=i)
    store = Stmt("store", None, None, (0,), param=1, index=i)
    verify(_kernel([load_in, store, Stmt("load", 1, f64, param=1, index=i)]))
    with pytest.raises(LoopIRError, match="where this point has not written it"):
        verify(_kernel([load_in, store, Stmt("load", 1, f64, param=1, index=Affine((0,), 3))]))
    with pytest.raises(LoopIRError, match="where this point has not written it"):
        verify(_kernel([load_in, Stmt("load", 1, f64, param=1, index=i), store]))
    acc = Stmt("accumulate", None, None, (0,), param=1, index=i, value="sum")
    with pytest.raises(LoopIRError, match="where this point has not written it"):
        verify(_kernel([load_in, acc, Stmt("load", 1, f64, param=1, index=i)]))
