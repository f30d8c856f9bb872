/* rules.c: shape, dtype and layout rules shared by the eager kernels and the meta path.
 *
 * The same rules are written in Python (python/ember/ops/meta.py) for tracing;
 * tests/test_op_rules.py checks that the two agree.
 */
#include "ember.h"

int
em_wrap_dim(Py_ssize_t *dim, int ndim)
{
    int n = ndim > 0 ? ndim : 1;
    Py_ssize_t d = *dim;
    if (d < -n || d >= n) {
        PyErr_Format(PyExc_IndexError,
                     "Dimension out of range (expected to be in range of [%d, %d], but got %zd)",
                     -n, n - 1, d);
        return -1;
    }
    if (d < 0)
        d += n;
    *dim = ndim > 0 ? d : 0;
    return 0;
}

int
em_int_arg(PyObject *o, Py_ssize_t *out)
{
    *out = PyLong_AsSsize_t(o);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

int
em_dim_arg(PyObject *o, int ndim, Py_ssize_t *out)
{
    return em_int_arg(o, out) < 0 ? -1 : em_wrap_dim(out, ndim);
}

int
em_reduce_dims(PyObject *dims, int ndim, bool *mask)
{
    if (dims == Py_None || (PyTuple_Check(dims) && PyTuple_GET_SIZE(dims) == 0)) {
        for (int i = 0; i < ndim; i++)
            mask[i] = true;
        return 0;
    }
    for (int i = 0; i < ndim; i++)
        mask[i] = false;
    PyObject *seq = PySequence_Fast(dims, "dim must be an int or a tuple of ints");
    if (seq == NULL)
        return -1;
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) {
        Py_ssize_t d = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, k));
        if (d == -1 && PyErr_Occurred())
            goto error;
        Py_ssize_t orig = d;
        if (em_wrap_dim(&d, ndim) < 0)
            goto error;
        if (ndim == 0)
            continue;
        if (mask[d]) {
            PyErr_Format(PyExc_RuntimeError, "dim %zd appears multiple times in the list of dims",
                         orig < 0 ? d : orig);
            goto error;
        }
        mask[d] = true;
    }
    Py_DECREF(seq);
    return 0;
error:
    Py_DECREF(seq);
    return -1;
}

/* ------------------------------------------------------------------ promotion */

static em_dtype_t
number_dtype(PyObject *o)
{
    if (PyBool_Check(o) || PyArray_IsScalar(o, Bool))
        return EM_BOOL;
    if (PyLong_Check(o) || PyArray_IsScalar(o, Integer))
        return EM_INT64;
    if (PyComplex_Check(o) || PyArray_IsScalar(o, ComplexFloating))
        return em_default_dtype == EM_FLOAT64 ? EM_COMPLEX128 : EM_COMPLEX64;
    return em_default_dtype;   /* Python floats take the default dtype's place */
}

static em_dtype_t
combine_categories(em_dtype_t higher, em_dtype_t lower)
{
    if (higher != EM_UNDEFINED && em_is_complex(higher))
        return higher;
    if (lower != EM_UNDEFINED && em_is_complex(lower)) {
        /* a float group keeps its precision: float64 with a complex number is complex128 */
        if (higher != EM_UNDEFINED && em_is_float(higher))
            return higher == EM_FLOAT64 ? EM_COMPLEX128 : EM_COMPLEX64;
        return lower;
    }
    if (higher != EM_UNDEFINED && em_is_float(higher))
        return higher;
    if (higher == EM_BOOL || (lower != EM_UNDEFINED && em_is_float(lower)))
        return em_promote_types(higher, lower);
    if (higher != EM_UNDEFINED)
        return higher;
    return lower;
}

/* c10's result_type: dimensioned tensors, then 0-d tensors, then Python numbers,
 * each group only able to raise the category of the one above it. */
em_dtype_t
em_result_type(PyObject **operands, int n)
{
    em_dtype_t dim_r = EM_UNDEFINED, zero_r = EM_UNDEFINED, wrap_r = EM_UNDEFINED;
    for (int i = 0; i < n; i++) {
        PyObject *o = operands[i];
        if (o == NULL || o == Py_None)
            continue;
        if (em_Tensor_Check(o)) {
            em_Tensor *t = (em_Tensor *)o;
            if (t->ndim > 0)
                dim_r = em_promote_types(dim_r, t->dtype);
            else
                zero_r = em_promote_types(zero_r, t->dtype);
        }
        else {
            wrap_r = em_promote_types(wrap_r, number_dtype(o));
        }
    }
    return combine_categories(dim_r, combine_categories(zero_r, wrap_r));
}

/* ------------------------------------------------------------------ broadcasting */

int
em_broadcast(const char *opname, PyObject **operands, int n, em_Geom *out)
{
    int nd = 0;
    for (int i = 0; i < n; i++)
        if (operands[i] != NULL && em_Tensor_Check(operands[i]))
            nd = ((em_Tensor *)operands[i])->ndim > nd ? ((em_Tensor *)operands[i])->ndim : nd;
    out->ndim = nd;
    for (int d = 0; d < nd; d++)
        out->sizes[d] = 1;
    int owner[EM_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        if (operands[i] == NULL || !em_Tensor_Check(operands[i]))
            continue;
        em_Tensor *t = (em_Tensor *)operands[i];
        int off = nd - t->ndim;
        for (int d = 0; d < t->ndim; d++) {
            Py_ssize_t s = t->sizes[d], *o = &out->sizes[off + d];
            if (s == *o)
                continue;
            if (*o == 1) {
                *o = s;
                owner[off + d] = i;
            }
            else if (s != 1) {
                em_Tensor *a = (em_Tensor *)operands[owner[off + d]];
                PyErr_Format(PyExc_RuntimeError,
                             "%s(): The size of tensor a (%zd) must match the size of tensor "
                             "b (%zd) at non-singleton dimension %d (shapes %s and %s)",
                             opname, *o, s, off + d, em_tshape(a), em_tshape(t));
                return -1;
            }
        }
    }
    return 0;
}

bool
em_any_meta(PyObject **operands, int n)
{
    for (int i = 0; i < n; i++)
        if (operands[i] != NULL && em_Tensor_Check(operands[i]) &&
            em_is_meta((em_Tensor *)operands[i]))
            return true;
    return false;
}

/* ------------------------------------------------------------------ layout */

static bool
tensor_same_shape(const em_Tensor *t, const em_Geom *g)
{
    if (t->ndim != g->ndim)
        return false;
    for (int d = 0; d < g->ndim; d++)
        if (t->sizes[d] != g->sizes[d])
            return false;
    return true;
}

/* TensorIterator's output strides for a geometry g whose operands have strides st[k]
 * (broadcast to g's rank, 0 where broadcast): dims are ordered innermost-first by the
 * operands' strides, a broadcast dim (stride 0) not voting, ties broken by size; with
 * skip_unit, dims of size 1 do not vote either (advanced indexing's layout). */
void
em_tensoriter_strides(int nops, Py_ssize_t (*st)[EM_MAX_DIMS], em_Geom *g, bool skip_unit)
{
    int nd = g->ndim;
    if (nd <= 1) {
        em_contiguous_strides(g);
        return;
    }
    int perm[EM_MAX_DIMS];    /* perm[0] is the innermost dimension */
    for (int i = 0; i < nd; i++)
        perm[i] = nd - 1 - i;
    for (int i = 1; i < nd; i++) {
        int dim1 = i;
        for (int dim0 = i - 1; dim0 >= 0; dim0--) {
            int a = perm[dim0], b = perm[dim1], cmp = 0;
            for (int k = 0; k < nops; k++) {
                Py_ssize_t s0 = st[k][a], s1 = st[k][b];
                if (s0 == 0 || s1 == 0 || (skip_unit && (g->sizes[a] == 1 || g->sizes[b] == 1)))
                    continue;
                if (s0 != s1) {
                    cmp = s0 < s1 ? -1 : 1;
                    break;
                }
                if (g->sizes[a] > g->sizes[b]) {
                    cmp = 1;
                    break;
                }
            }
            if (cmp > 0) {
                perm[dim0] = b;
                perm[dim1] = a;
                dim1 = dim0;
            }
            else if (cmp < 0) {
                break;
            }
        }
    }
    Py_ssize_t next = 1;
    for (int i = 0; i < nd; i++) {
        g->strides[perm[i]] = next;
        next *= g->sizes[perm[i]];
    }
}

/* Output strides of an elementwise op, as TensorIterator chooses them: if all
 * inputs are contiguous and of the output's shape, contiguous; otherwise the
 * dimensions are ordered by the inputs' strides (broadcast dimensions don't vote). */
void
em_elementwise_strides(PyObject **operands, int n, em_Geom *g)
{
    int nd = g->ndim;
    em_Tensor *ts[8];
    int nt = 0;
    bool all_contig_same = true;
    for (int i = 0; i < n && nt < 8; i++) {
        if (operands[i] == NULL || !em_Tensor_Check(operands[i]))
            continue;
        em_Tensor *t = (em_Tensor *)operands[i];
        ts[nt++] = t;
        if (!tensor_same_shape(t, g) || !em_tensor_is_contiguous(t))
            all_contig_same = false;
    }
    if (all_contig_same || nd <= 1) {
        em_contiguous_strides(g);
        return;
    }
    /* broadcast strides of every operand to the output's rank */
    Py_ssize_t st[8][EM_MAX_DIMS];
    for (int k = 0; k < nt; k++) {
        em_Tensor *t = ts[k];
        int off = nd - t->ndim;
        for (int d = 0; d < nd; d++) {
            if (d < off)
                st[k][d] = 0;
            else if (t->sizes[d - off] == 1 && g->sizes[d] != 1)
                st[k][d] = 0;
            else
                st[k][d] = t->strides[d - off];
        }
    }
    em_tensoriter_strides(nt, st, g, false);
}

/* ------------------------------------------------------------------ elementwise kinds */

int
em_elementwise_geom(em_Op *op, PyObject **operands, int n, em_Geom *g, em_dtype_t *compute)
{
    const char *name = PyUnicode_AsUTF8(op->name);
    if (em_broadcast(name, operands, n, g) < 0)
        return -1;
    em_dtype_t rt = em_result_type(operands, n);
    for (int i = 0; (op->rule & EM_RULE_NO_BOOL) && i < n; i++) {
        /* as in PyTorch, any bool operand is refused (sub(x, True) too) */
        PyObject *o = operands[i];
        if (o != NULL && (PyBool_Check(o) ||
                          (em_Tensor_Check(o) && ((em_Tensor *)o)->dtype == EM_BOOL))) {
            PyErr_Format(PyExc_RuntimeError,
                         "%s(): not supported on bool tensors (use the logical_* or bitwise "
                         "ops instead)", name);
            return -1;
        }
    }
    if (((op->rule & EM_RULE_INTEGRAL) && em_is_float(rt)) ||
        ((op->rule & EM_RULE_NOT_BOOL) && rt == EM_BOOL) ||
        ((op->rule & EM_RULE_FLOATING) && !em_is_float(rt)) ||
        (!(op->rule & EM_RULE_COMPLEX) && em_is_complex(rt))) {
        PyErr_Format(PyExc_NotImplementedError, "%s(): \"%s\" not implemented for '%s'", name,
                     name, em_dtype_torch_name(rt));
        return -1;
    }
    switch (op->kind) {
    case EM_KIND_UNARY:
    case EM_KIND_BINARY:
        *compute = g->dtype = rt;
        if (op->rule & EM_RULE_COMPLEX_TO_REAL)
            g->dtype = em_complex_value_type(rt);
        break;
    case EM_KIND_UNARY_FLOAT:
    case EM_KIND_BINARY_FLOAT:
        *compute = g->dtype = em_is_inexact(rt) ? rt : em_default_dtype;
        break;
    case EM_KIND_COMPARE:
        *compute = rt;
        g->dtype = EM_BOOL;
        break;
    default:
        PyErr_Format(PyExc_SystemError, "%s: not an elementwise kind", name);
        return -1;
    }
    if ((op->rule & EM_RULE_NO_HALF) && (g->dtype == EM_FLOAT16 || g->dtype == EM_BFLOAT16)) {
        PyErr_Format(PyExc_NotImplementedError, "%s(): \"%s\" not implemented for '%s'", name,
                     name, em_dtype_torch_name(g->dtype));
        return -1;
    }
    em_elementwise_strides(operands, n, g);
    return 0;
}
