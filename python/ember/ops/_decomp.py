"""Shared by the nn and linear-algebra entries whose eager kernel runs their
decomposition (kernel "decomposed", csrc/kernels/nn.c)."""
from .. import _C


def run_decomposition(entry, args):
    """The Python meta rule of such an op: its decomposition run on meta tensors (in meta
    mode, grad off), which is exactly what its C kernel does on meta inputs. Not on
    symbolic sizes yet: the ops inside would compute at the hint sizes (fx/sym_fake.py)."""
    if any(type(a).__name__ == "SymFake" for a in args):
        raise TypeError(f"{entry.name}(): no symbolic-size rule yet (its decomposition "
                        "computes at the captured sizes)")
    prev_mode, prev_grad = _C._get_mode(), _C.is_grad_enabled()
    try:                      # (set inside: an interrupt after a set still restores)
        _C._set_mode(_C.MODE_META)
        _C._set_grad_enabled(False)
        return entry.decompose(*args)
    finally:
        _C._set_grad_enabled(prev_grad)
        _C._set_mode(*prev_mode)
