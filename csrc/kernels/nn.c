/* nn.c: eager kernels of the nn ops that are not prims (python/ember/ops/nn_ops.py and
 * linalg.py).
 *
 * "decomposed": the op's eager result is its decomposition into prims (the entry's
 * `decompose`), run with grad mode off; the op's own backward formula is what autograd
 * records. One source of truth for eager, meta and compiled results: in meta mode the
 * prims it calls produce meta tensors, so the same function is the op's C rule.
 *
 * "linear": input @ weight^T + bias straight through NumPy's matmul (the hot path of
 * every Linear layer), with the decomposition's checks and result.
 *
 * "embedding": the rows of the weight picked by the indices (NumPy's take), where the
 * decomposition multiplies by a one-hot matrix.
 */
#include "ember.h"

static PyObject *str_decompose;

static PyObject *
k_decomposed(em_Op *op, PyObject **args)
{
    if (str_decompose == NULL &&
        (str_decompose = PyUnicode_InternFromString("decompose")) == NULL)
        return NULL;
    PyObject *fn = PyObject_GetAttr(op->entry, str_decompose);
    if (fn == NULL)
        return NULL;
    int grad = em_tls.grad_enabled;
    em_tls.grad_enabled = 0;
    PyObject *r = PyObject_Vectorcall(fn, args, op->nparams, NULL);
    em_tls.grad_enabled = grad;
    Py_DECREF(fn);
    return r;
}

/* linear(input, weight, bias=None) for a 2-d weight and an input of >= 1 dims with the
 * same dtype; anything else (errors included) takes the decomposition. */
static PyObject *
k_linear(em_Op *op, PyObject **args)
{
    em_Tensor *x = (em_Tensor *)args[0], *w = (em_Tensor *)args[1];
    em_Tensor *b = args[2] == Py_None ? NULL : (em_Tensor *)args[2];
    if (x->ndim < 1 || w->ndim != 2 || x->dtype != w->dtype || !em_is_float(x->dtype) ||
        x->sizes[x->ndim - 1] != w->sizes[1] || x->sizes[x->ndim - 1] == 0 ||
        (b != NULL && (b->dtype != x->dtype || b->ndim > 1 ||
                       (b->ndim == 1 && b->sizes[0] != w->sizes[0] && b->sizes[0] != 1))) ||
        em_tls.mode == EM_MODE_META || em_is_meta(x) || em_is_meta(w) ||
        (b != NULL && em_is_meta(b)))
        return k_decomposed(op, args);
    em_Geom g = {.ndim = x->ndim, .dtype = x->dtype};
    for (int d = 0; d < x->ndim - 1; d++)
        g.sizes[d] = x->sizes[d];
    g.sizes[x->ndim - 1] = w->sizes[0];
    em_contiguous_strides(&g);
    em_Tensor *out = em_tensor_empty(&g, false);
    if (out == NULL || out->numel == 0)
        return (PyObject *)out;
    PyObject *wt = PyArray_Transpose(w->array, NULL);
    if (wt == NULL)
        goto error;
    /* a contiguous (..., in) input is one (rows, in) matrix: a single GEMM, as PyTorch */
    PyObject *xin = (PyObject *)x, *x2 = NULL;
    PyArrayObject *o2 = NULL;
    if (x->ndim > 2 && em_tensor_is_contiguous(x)) {
        npy_intp rows = x->numel / x->sizes[x->ndim - 1];
        npy_intp xd[2] = {rows, x->sizes[x->ndim - 1]}, od[2] = {rows, w->sizes[0]};
        PyArray_Dims xs = {xd, 2}, os = {od, 2};
        x2 = PyArray_Newshape(x->array, &xs, NPY_CORDER);
        o2 = x2 ? (PyArrayObject *)PyArray_Newshape(out->array, &os, NPY_CORDER) : NULL;
        if (o2 == NULL) {
            Py_XDECREF(x2);
            Py_DECREF(wt);
            goto error;
        }
        xin = x2;
    }
    PyObject *ins[2] = {xin, wt};
    int st = em_ufunc_call(op->ufunc, ins, 2, o2 ? o2 : out->array, x->dtype, x->dtype);
    Py_DECREF(wt);
    Py_XDECREF(x2);
    Py_XDECREF(o2);
    if (st < 0)
        goto error;
    if (b != NULL) {
        PyObject *add = PyObject_GetAttrString(em_numpy, "add");
        if (add == NULL)
            goto error;
        PyObject *ins2[2] = {(PyObject *)out, (PyObject *)b};
        st = em_ufunc_call(add, ins2, 2, out->array, x->dtype, x->dtype);
        Py_DECREF(add);
        if (st < 0)
            goto error;
    }
    return (PyObject *)out;
error:
    Py_DECREF(out);
    return NULL;
}

/* embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse): the rows of a 2-d
 * weight picked by int32/int64 indices (NumPy's take); meta calls, wrong arguments and
 * empty results take the decomposition, which raises PyTorch's errors. */
static PyObject *
k_embedding(em_Op *op, PyObject **args)
{
    em_Tensor *w = (em_Tensor *)args[0], *idx = (em_Tensor *)args[1];
    if (em_tls.mode == EM_MODE_META || em_is_meta(w) || em_is_meta(idx) || w->ndim != 2 ||
        (idx->dtype != EM_INT64 && idx->dtype != EM_INT32) || idx->numel == 0 ||
        w->sizes[1] == 0)
        return k_decomposed(op, args);
    PyArrayObject *ia = (PyArrayObject *)PyArray_FromAny(
        (PyObject *)idx->array, PyArray_DescrFromType(NPY_INT64), 0, 0,
        NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST, NULL);
    if (ia == NULL)
        return NULL;
    const int64_t *iv = PyArray_DATA(ia);
    Py_ssize_t n = idx->numel, rows = w->sizes[0];
    for (Py_ssize_t i = 0; i < n; i++) {
        if (iv[i] < 0 || iv[i] >= rows) {
            Py_DECREF(ia);
            PyErr_SetString(PyExc_IndexError, "index out of range in self");
            return NULL;
        }
    }
    PyObject *arr = PyArray_TakeFrom(w->array, (PyObject *)ia, 0, NULL, NPY_RAISE);
    Py_DECREF(ia);
    if (arr == NULL)
        return NULL;
    PyObject *out = (PyObject *)em_tensor_from_array((PyArrayObject *)arr, NULL, 0);
    Py_DECREF(arr);
    return out;
}

const em_KernelEntry em_nn_kernels[] = {
    {"decomposed", k_decomposed},
    {"linear", k_linear},
    {"embedding", k_embedding},
    {NULL, NULL},
};
