"""Linear algebra: matmul (NumPy's matmul, so BLAS for float32 and float64)."""
from .registry import MATMUL, op


def _matmul_backward(g, out, a, b):
    if a.ndim == 1 and b.ndim == 1:
        return g * b, g * a
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    g2 = g.unsqueeze(-2) if a.ndim == 1 else g
    g2 = g2.unsqueeze(-1) if b.ndim == 1 else g2
    ga = g2 @ b2.transpose(-1, -2)
    gb = a2.transpose(-1, -2) @ g2
    if a.ndim == 1:
        ga = ga.squeeze(-2)
    if b.ndim == 1:
        gb = gb.squeeze(-1)
    return ga.sum_to_size(a.shape), gb.sum_to_size(b.shape)


op("matmul(Tensor self, Tensor other) -> Tensor", MATMUL, "matmul", ufunc="matmul",
   prim=True, backward=_matmul_backward, operators=("__matmul__",),
   doc="Matrix product with NumPy's (and PyTorch's) rules for 1-D and batched operands.")
