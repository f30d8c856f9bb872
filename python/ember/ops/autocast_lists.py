"""Which ops ember.autocast casts, and how: PyTorch's CPU autocast lists (the AMP
documentation's "CPU Ops that can autocast to bfloat16/float16", "CPU Ops that can
autocast to float32" and the promoting ops), restricted to the table's names; ops the
table implements under another name are listed by that name (the factorization prims
for linalg_*). `apply` sets entry.autocast (EM_AUTOCAST_* of ember.h) before install.
Ops on no list run in their inputs' dtypes, as PyTorch's do."""
from .. import _C

LOWER = ("conv1d", "conv2d", "conv3d", "convolution", "conv_transpose1d", "conv_transpose2d",
         "conv_transpose3d", "bmm", "mm", "addmm", "linear", "matmul",
         "scaled_dot_product_attention")

FP32 = ("avg_pool3d", "max_pool3d", "adaptive_avg_pool3d", "adaptive_max_pool3d",
        "binary_cross_entropy", "binary_cross_entropy_with_logits", "mse_loss", "nll_loss",
        "smooth_l1_loss", "cross_entropy_loss", "l1_loss", "huber_loss", "kl_div", "prod",
        "cdist", "linalg_inv", "linalg_cholesky", "linalg_qr", "_linalg_svd", "_linalg_eigh")

PROMOTE = ("stack", "cat", "index_copy")


def apply(by_name):
    """Sets the policy of every overload of the listed ops."""
    for names, policy in ((LOWER, _C.AUTOCAST_LOWER), (FP32, _C.AUTOCAST_FP32),
                          (PROMOTE, _C.AUTOCAST_PROMOTE)):
        for name in names:
            for entry in by_name[name]:
                entry.autocast = policy
