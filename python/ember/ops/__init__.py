"""The op table (see registry.py): every operator, declared once, by family."""
from . import registry, schema, meta  # noqa: F401
from . import elementwise, reductions, views, linalg, factories, random_ops  # noqa: F401
from . import activations  # noqa: F401
from . import nn_ops  # noqa: F401
from . import shapes, indexing  # noqa: F401
from . import closeness, order_stats, combining  # noqa: F401
from . import products, pointwise_composites, arranging  # noqa: F401
from . import factorizations  # noqa: F401
from . import complex  # noqa: F401
from . import special_functions, spectral  # noqa: F401
from . import embedding_bag, sampling, ctc  # noqa: F401
from . import autocast_lists
from . import api
from .. import prims as _prims

_public = None


def install(namespace):
    """Binds the table to C and fills `namespace`, ember.ops.api and ember.prims."""
    global _public
    autocast_lists.apply(registry.BY_NAME)
    _public = registry.install(namespace)
    namespace.update(linalg.WRAPPERS)     # einsum(equation, *operands)
    namespace.update(combining.WRAPPERS)  # block_diag(*tensors), cartesian_prod(*tensors)
    namespace.update(shapes.WRAPPERS)     # split(tensor, split_size_or_sections, dim)
    for name, c_op in _public.items():
        setattr(api, name, c_op)
    for entry in registry.ENTRIES:
        if entry.prim:
            setattr(_prims, entry.name, _public[entry.name])
    return _public


def public():
    return dict(_public)


def entries():
    return list(registry.ENTRIES)
