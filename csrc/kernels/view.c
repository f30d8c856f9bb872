/* view.c: views (view, permute, expand, select, slice, ...), basic indexing,
 * copies (clone, _to_copy) and the composites built on them.
 *
 * A view kernel only computes new sizes, strides and storage offset; the same
 * code therefore serves real and meta tensors.
 */
#include "kutil.h"

/* Reads op's tuple of sizes or dims (already converted by the binder). */
static int
int_tuple(em_Op *op, PyObject *tup, Py_ssize_t *out, int *n)
{
    Py_ssize_t len = PyTuple_GET_SIZE(tup);
    if (len > EM_MAX_DIMS) {
        /* named here: reshape is a composite, which the dispatcher does not name while
         * tracing */
        PyErr_Format(PyExc_RuntimeError, "%U(): at most %d dimensions are supported, but "
                     "%zd sizes were given", op->name, EM_MAX_DIMS, len);
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        out[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(tup, i));
        if (out[i] == -1 && PyErr_Occurred())
            return -1;
    }
    *n = (int)len;
    return 0;
}

/* Replaces a -1 in shape by the size that keeps numel (PyTorch's infer_size). */
static int
infer_size(Py_ssize_t *shape, int n, Py_ssize_t numel)
{
    Py_ssize_t prod = 1;
    int infer = -1;
    for (int i = 0; i < n; i++) {
        if (shape[i] == -1) {
            if (infer >= 0) {
                PyErr_SetString(PyExc_RuntimeError, "only one dimension can be inferred");
                return -1;
            }
            infer = i;
        }
        else if (shape[i] < 0) {
            PyErr_Format(PyExc_RuntimeError, "invalid shape dimension %zd", shape[i]);
            return -1;
        }
        else {
            prod *= shape[i];
        }
    }
    if (infer >= 0 && prod == 0) {
        PyErr_Format(PyExc_RuntimeError, "cannot reshape tensor of 0 elements into shape %s "
                     "because the unspecified dimension size -1 can be any value and is "
                     "ambiguous", em_shape_s(n, shape));
        return -1;
    }
    if (infer >= 0 && numel % prod == 0) {
        shape[infer] = numel / prod;
        return 0;
    }
    if (infer < 0 && prod == numel)
        return 0;
    PyErr_Format(PyExc_RuntimeError, "shape '%s' is invalid for input of size %zd",
                 em_shape_s(n, shape), numel);
    return -1;
}

/* Strides for viewing (sizes, strides) as newshape without a copy, following
 * PyTorch's computeStride; returns 0 when no such view exists. */
static int
compute_stride(int on, const Py_ssize_t *oshape, const Py_ssize_t *ostride, Py_ssize_t numel,
               int nn, const Py_ssize_t *nshape, Py_ssize_t *nstride)
{
    if (numel == 0 || on == 0) {
        if (on == nn && memcmp(oshape, nshape, sizeof(Py_ssize_t) * on) == 0) {
            memcpy(nstride, ostride, sizeof(Py_ssize_t) * on);
            return 1;
        }
        Py_ssize_t s = 1;
        for (int i = nn - 1; i >= 0; i--) {
            nstride[i] = s;
            s *= nshape[i] > 1 ? nshape[i] : 1;
        }
        return 1;
    }
    int view_d = nn - 1;
    Py_ssize_t chunk_base = ostride[on - 1], tensor_numel = 1, view_numel = 1;
    for (int tensor_d = on - 1; tensor_d >= 0; tensor_d--) {
        tensor_numel *= oshape[tensor_d];
        if (tensor_d == 0 ||
            (oshape[tensor_d - 1] != 1 && ostride[tensor_d - 1] != tensor_numel * chunk_base)) {
            while (view_d >= 0 && (view_numel < tensor_numel || nshape[view_d] == 1)) {
                nstride[view_d] = view_numel * chunk_base;
                view_numel *= nshape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel)
                return 0;
            if (tensor_d > 0) {
                chunk_base = ostride[tensor_d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

/* view(self, size) */
static PyObject *
k_view(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t shape[EM_MAX_DIMS], strides[EM_MAX_DIMS];
    int n;
    if (int_tuple(op, args[1], shape, &n) < 0 || infer_size(shape, n, self->numel) < 0)
        return NULL;
    if (!compute_stride(self->ndim, self->sizes, self->strides, self->numel, n, shape,
                        strides)) {
        return PyErr_Format(PyExc_RuntimeError,
                            "view size is not compatible with input tensor's size and stride "
                            "(at least one dimension spans across two contiguous subspaces): "
                            "size %s and stride %s viewed as %s. Use .reshape(...) instead.",
                            em_tshape(self), em_shape_s(self->ndim, self->strides),
                            em_shape_s(n, shape));
    }
    return (PyObject *)em_tensor_view(self, n, shape, strides, self->offset);
}

/* reshape(self, shape): a view when the strides allow it, else a copy (composite). */
static PyObject *
k_reshape(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t shape[EM_MAX_DIMS], strides[EM_MAX_DIMS];
    int n;
    if (int_tuple(op, args[1], shape, &n) < 0 || infer_size(shape, n, self->numel) < 0)
        return NULL;
    if (compute_stride(self->ndim, self->sizes, self->strides, self->numel, n, shape, strides))
        return em_call_op(EM_OP_VIEW, args, 2, NULL);
    PyObject *copy = em_call_op(EM_OP_CLONE, args, 1, NULL);
    if (copy == NULL)
        return NULL;
    /* clone keeps a dense permuted layout; force a contiguous one for the view */
    if (!em_tensor_is_contiguous((em_Tensor *)copy)) {
        Py_DECREF(copy);
        copy = em_clone_contiguous(args[0]);
        if (copy == NULL)
            return NULL;
    }
    PyObject *va[2] = {copy, args[1]};
    PyObject *res = em_call_op(EM_OP_VIEW, va, 2, NULL);
    Py_DECREF(copy);
    return res;
}

/* permute(self, dims) */
static PyObject *
k_permute(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t dims[EM_MAX_DIMS], sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
    int n;
    if (int_tuple(op, args[1], dims, &n) < 0)
        return NULL;
    if (n != self->ndim) {
        PyErr_Format(PyExc_RuntimeError,
                     "permute(): number of dimensions in the tensor input does not "
                     "match the length of the desired ordering of dimensions i.e. input.dim() "
                     "= %d is not equal to len(dims) = %d", self->ndim, n);
        return NULL;
    }
    bool seen[EM_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) {
        if (em_wrap_dim(&dims[i], self->ndim) < 0)
            return NULL;
        if (seen[dims[i]]) {
            PyErr_SetString(PyExc_RuntimeError, "permute(): duplicate dims are not allowed.");
            return NULL;
        }
        seen[dims[i]] = true;
        sizes[i] = self->sizes[dims[i]];
        strides[i] = self->strides[dims[i]];
    }
    return (PyObject *)em_tensor_view(self, n, sizes, strides, self->offset);
}

static PyObject *
swap_dims(em_Tensor *self, Py_ssize_t d0, Py_ssize_t d1)
{
    if (em_wrap_dim(&d0, self->ndim) < 0 || em_wrap_dim(&d1, self->ndim) < 0)
        return NULL;
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
    memcpy(sizes, self->sizes, sizeof(Py_ssize_t) * self->ndim);
    memcpy(strides, self->strides, sizeof(Py_ssize_t) * self->ndim);
    if (self->ndim > 0) {
        sizes[d0] = self->sizes[d1];
        sizes[d1] = self->sizes[d0];
        strides[d0] = self->strides[d1];
        strides[d1] = self->strides[d0];
    }
    return (PyObject *)em_tensor_view(self, self->ndim, sizes, strides, self->offset);
}

/* transpose(self, dim0, dim1) */
static PyObject *
k_transpose(em_Op *op, PyObject **args)
{
    Py_ssize_t d0 = PyLong_AsSsize_t(args[1]), d1 = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred())
        return NULL;
    return swap_dims((em_Tensor *)args[0], d0, d1);
}

/* t(self): transpose of a tensor with at most 2 dimensions */
static PyObject *
k_t(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    if (self->ndim > 2) {
        PyErr_Format(PyExc_RuntimeError,
                     "t() expects a tensor with <= 2 dimensions, but self is %dD", self->ndim);
        return NULL;
    }
    return swap_dims(self, 0, self->ndim == 2 ? 1 : 0);
}

/* expand(self, size, *, implicit=False) */
static PyObject *
k_expand(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
    int n;
    if (int_tuple(op, args[1], sizes, &n) < 0)
        return NULL;
    if (n < self->ndim)
        return PyErr_Format(PyExc_RuntimeError,
                            "expand(): the number of sizes provided (%d) must be greater or "
                            "equal to the number of dimensions in the tensor (%d); target "
                            "sizes %s, tensor sizes %s", n, self->ndim, em_shape_s(n, sizes),
                            em_tshape(self));
    int off = n - self->ndim;
    for (int i = n - 1; i >= 0; i--) {
        int j = i - off;
        if (j < 0) {
            if (sizes[i] < 0) {
                PyErr_Format(PyExc_RuntimeError,
                             "The expanded size of the tensor (%zd) isn't allowed in a leading, "
                             "non-existing dimension %d", sizes[i], i);
                return NULL;
            }
            strides[i] = 0;
            continue;
        }
        if (sizes[i] == -1)
            sizes[i] = self->sizes[j];
        if (sizes[i] < 0) {
            PyErr_Format(PyExc_RuntimeError,
                         "expand(): the expanded size of the tensor (%zd) isn't allowed at "
                         "dimension %d", sizes[i], i);
            return NULL;
        }
        if (self->sizes[j] == sizes[i]) {
            strides[i] = self->strides[j];
        }
        else if (self->sizes[j] == 1) {
            strides[i] = 0;
        }
        else {
            return PyErr_Format(PyExc_RuntimeError,
                                "The expanded size of the tensor (%zd) must match the existing "
                                "size (%zd) at non-singleton dimension %d.  Target sizes: %s.  "
                                "Tensor sizes: %s", sizes[i], self->sizes[j], i,
                                em_shape_s(n, sizes), em_tshape(self));
        }
    }
    return (PyObject *)em_tensor_view(self, n, sizes, strides, self->offset);
}

/* unsqueeze(self, dim) */
static PyObject *
k_unsqueeze(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t d = PyLong_AsSsize_t(args[1]);
    if (d == -1 && PyErr_Occurred())
        return NULL;
    if (em_check_ndim("unsqueeze", self->ndim + 1) < 0 || em_wrap_dim(&d, self->ndim + 1) < 0)
        return NULL;
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
    for (int i = 0, j = 0; i <= self->ndim; i++) {
        if (i == d) {
            sizes[i] = 1;
            strides[i] = d >= self->ndim ? 1 : self->sizes[d] * self->strides[d];
        }
        else {
            sizes[i] = self->sizes[j];
            strides[i] = self->strides[j];
            j++;
        }
    }
    return (PyObject *)em_tensor_view(self, self->ndim + 1, sizes, strides, self->offset);
}

/* squeeze(self, dim=None): drops size-1 dims (all, or those named) */
static PyObject *
k_squeeze(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    bool mask[EM_MAX_DIMS];
    if (em_reduce_dims(args[1], self->ndim, mask) < 0)
        return NULL;
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < self->ndim; i++) {
        if (mask[i] && self->sizes[i] == 1)
            continue;
        sizes[n] = self->sizes[i];
        strides[n] = self->strides[i];
        n++;
    }
    return (PyObject *)em_tensor_view(self, n, sizes, strides, self->offset);
}

/* Geometry of select(dim, index); returns the new offset or -1 with an error. */
static int
select_geom(em_Tensor *self, Py_ssize_t dim, Py_ssize_t index, Py_ssize_t *sizes,
            Py_ssize_t *strides, Py_ssize_t *offset, Py_ssize_t *wrapped)
{
    if (self->ndim == 0) {
        PyErr_SetString(PyExc_IndexError, "select() cannot be applied to a 0-dim tensor.");
        return -1;
    }
    if (em_wrap_dim(&dim, self->ndim) < 0)
        return -1;
    Py_ssize_t size = self->sizes[dim];
    if (index < -size || index >= size) {
        PyErr_Format(PyExc_IndexError, "select(): index %zd out of range for tensor of size "
                     "%s at dimension %zd", index, em_tshape(self), dim);
        return -1;
    }
    if (index < 0)
        index += size;
    for (int i = 0, j = 0; i < self->ndim; i++) {
        if (i == dim)
            continue;
        sizes[j] = self->sizes[i];
        strides[j] = self->strides[i];
        j++;
    }
    *offset = self->offset + index * self->strides[dim];
    *wrapped = dim;
    return 0;
}

/* select(self, dim, index) */
static PyObject *
k_select(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t dim = PyLong_AsSsize_t(args[1]), index = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred())
        return NULL;
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS], offset, wd;
    if (select_geom(self, dim, index, sizes, strides, &offset, &wd) < 0)
        return NULL;
    return (PyObject *)em_tensor_view(self, self->ndim - 1, sizes, strides, offset);
}

static int
opt_index(PyObject *o, Py_ssize_t dflt, Py_ssize_t *out)
{
    if (o == Py_None) {
        *out = dflt;
        return 0;
    }
    *out = PyLong_AsSsize_t(o);
    if (*out == -1 && PyErr_Occurred()) {
        /* bounds beyond Py_ssize_t clamp like Python slices */
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        *out = _PyLong_Sign(o) < 0 ? PY_SSIZE_T_MIN / 2 : PY_SSIZE_T_MAX / 2;
    }
    return 0;
}

/* Geometry of slice(dim, start, end, step) (Python's clamping rules). */
static int
slice_geom(em_Tensor *self, PyObject *dimo, PyObject *starto, PyObject *endo, PyObject *stepo,
           Py_ssize_t *sizes, Py_ssize_t *strides, Py_ssize_t *offset)
{
    Py_ssize_t dim = PyLong_AsSsize_t(dimo), step = PyLong_AsSsize_t(stepo), start, end;
    if (PyErr_Occurred())
        return -1;
    if (self->ndim == 0) {
        PyErr_SetString(PyExc_IndexError, "slice() cannot be applied to a 0-dim tensor.");
        return -1;
    }
    if (em_wrap_dim(&dim, self->ndim) < 0)
        return -1;
    if (step <= 0) {
        PyErr_SetString(PyExc_RuntimeError, "slice step must be positive");
        return -1;
    }
    Py_ssize_t size = self->sizes[dim];
    if (opt_index(starto, 0, &start) < 0 || opt_index(endo, size, &end) < 0)
        return -1;
    if (start < 0)
        start += size;
    if (end < 0)
        end += size;
    start = start < 0 ? 0 : (start > size ? size : start);
    end = end < start ? start : (end > size ? size : end);
    memcpy(sizes, self->sizes, sizeof(Py_ssize_t) * self->ndim);
    memcpy(strides, self->strides, sizeof(Py_ssize_t) * self->ndim);
    sizes[dim] = (end - start + step - 1) / step;
    strides[dim] = self->strides[dim] * step;
    *offset = self->offset + (sizes[dim] > 0 ? start * self->strides[dim] : 0);
    return 0;
}

/* slice(self, dim=0, start=None, end=None, step=1) */
static PyObject *
k_slice(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS], offset;
    if (slice_geom(self, args[1], args[2], args[3], args[4], sizes, strides, &offset) < 0)
        return NULL;
    return (PyObject *)em_tensor_view(self, self->ndim, sizes, strides, offset);
}

/* alias(self): a view of the whole tensor */
static PyObject *
k_alias(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    return (PyObject *)em_tensor_view(self, self->ndim, self->sizes, self->strides, self->offset);
}

/* Geometry of diagonal(offset, dim1, dim2): dim1 and dim2 removed, the diagonal last. */
static int
diagonal_geom(em_Tensor *self, PyObject **args, Py_ssize_t *sizes, Py_ssize_t *strides,
              Py_ssize_t *offset)
{
    Py_ssize_t off = PyLong_AsSsize_t(args[0]), d1, d2;
    if ((off == -1 && PyErr_Occurred()) || em_dim_arg(args[1], self->ndim, &d1) < 0 ||
        em_dim_arg(args[2], self->ndim, &d2) < 0)
        return -1;
    if (d1 == d2) {
        PyErr_Format(PyExc_RuntimeError, "diagonal dimensions cannot be identical %S, %S",
                     args[1], args[2]);
        return -1;
    }
    Py_ssize_t len, start = self->offset;
    if (off >= 0) {
        len = self->sizes[d1] < self->sizes[d2] - off ? self->sizes[d1] : self->sizes[d2] - off;
        start += off * self->strides[d2];
    }
    else {
        len = self->sizes[d1] + off < self->sizes[d2] ? self->sizes[d1] + off : self->sizes[d2];
        start -= off * self->strides[d1];
    }
    if (len <= 0) {
        len = 0;
        start = self->offset;
    }
    int j = 0;
    for (int i = 0; i < self->ndim; i++) {
        if (i == d1 || i == d2)
            continue;
        sizes[j] = self->sizes[i];
        strides[j] = self->strides[i];
        j++;
    }
    sizes[j] = len;
    strides[j] = self->strides[d1] + self->strides[d2];
    *offset = start;
    return 0;
}

/* diagonal(self, offset=0, dim1=0, dim2=1) */
static PyObject *
k_diagonal(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS], offset;
    if (diagonal_geom(self, args + 1, sizes, strides, &offset) < 0)
        return NULL;
    return (PyObject *)em_tensor_view(self, self->ndim - 1, sizes, strides, offset);
}

/* Reads as_strided's size, stride and storage_offset (None: self's) into an offset in
 * self's storage (scatter: relative to `from`'s offset, as as_strided_scatter's result is
 * a copy of `from` at offset 0); checks that the view stays inside self's storage, as
 * PyTorch's setStorage does. */
static int
as_strided_geom(em_Op *op, em_Tensor *self, PyObject **args, Py_ssize_t *sizes,
                Py_ssize_t *strides, int *n, Py_ssize_t *offset, const em_Tensor *from)
{
    int ns;
    if (int_tuple(op, args[0], sizes, n) < 0 || int_tuple(op, args[1], strides, &ns) < 0)
        return -1;
    if (ns != *n) {
        PyErr_Format(PyExc_RuntimeError, "mismatch in length of strides and shape");
        return -1;
    }
    *offset = args[2] == Py_None ? from->offset : PyLong_AsSsize_t(args[2]);
    if (*offset == -1 && PyErr_Occurred())
        return -1;
    if (from != self)
        *offset -= from->offset;
    if (*offset < 0) {
        PyErr_Format(PyExc_RuntimeError, "Tensor: invalid storage offset %zd", *offset);
        return -1;
    }
    Py_ssize_t need = 1;       /* the storage the view spans, in elements */
    for (int i = 0; i < *n; i++) {
        if (sizes[i] < 0) {
            PyErr_Format(PyExc_RuntimeError, "Storage size calculation overflowed with "
                         "sizes=%s and strides=%s", em_shape_s(*n, sizes),
                         em_shape_s(*n, strides));
            return -1;
        }
        if (strides[i] < 0) {
            PyErr_Format(PyExc_RuntimeError, "as_strided: Negative strides are not supported "
                         "at the moment, got strides: %s", em_shape_s(*n, strides));
            return -1;
        }
        if (sizes[i] == 0)
            need = 0;
        else if (need)
            need += (sizes[i] - 1) * strides[i];
    }
    if (self->storage->array != NULL && need > 0) {
        /* in self's elements (a view_as_real of a complex storage counts its floats) */
        Py_ssize_t have = PyArray_NBYTES(self->storage->array) /
                          em_dtypes[self->dtype]->itemsize;
        if (*offset + need > have) {
            Py_ssize_t item = em_dtypes[self->dtype]->itemsize;
            PyErr_Format(PyExc_RuntimeError, "setStorage: sizes %s, strides %s, storage "
                         "offset %zd, and itemsize %zd requiring a storage size of %zd are "
                         "out of bounds for storage of size %zd", em_shape_s(*n, sizes),
                         em_shape_s(*n, strides), *offset, item, (*offset + need) * item,
                         have * item);
            return -1;
        }
    }
    return 0;
}

/* as_strided(self, size, stride, storage_offset=None): a view of self's storage */
static PyObject *
k_as_strided(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS], offset;
    int n;
    if (as_strided_geom(op, self, args + 1, sizes, strides, &n, &offset, self) < 0)
        return NULL;
    return (PyObject *)em_tensor_view(self, n, sizes, strides, offset);
}

/* ------------------------------------------------------------------ complex views */

/* view_as_real(self): a complex tensor's memory as its parts, a last dim of 2 */
static PyObject *
k_view_as_real(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    if (!em_is_complex(self->dtype)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "view_as_real is only supported for complex tensors");
        return NULL;
    }
    if (em_check_ndim("view_as_real", self->ndim + 1) < 0)
        return NULL;
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
    for (int d = 0; d < self->ndim; d++) {
        sizes[d] = self->sizes[d];
        strides[d] = 2 * self->strides[d];
    }
    sizes[self->ndim] = 2;
    strides[self->ndim] = 1;
    return (PyObject *)em_tensor_view_dtype(self, em_complex_value_type(self->dtype),
                                            self->ndim + 1, sizes, strides, 2 * self->offset);
}

/* view_as_complex(self): pairs along a last dim of 2 (stride 1) as complex numbers */
static PyObject *
k_view_as_complex(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    int nd = self->ndim;
    if (self->dtype != EM_FLOAT32 && self->dtype != EM_FLOAT64) {
        PyErr_Format(PyExc_RuntimeError,
                     "view_as_complex is only supported for float and double tensors, but got "
                     "a tensor of scalar type: %s", em_dtype_torch_name(self->dtype));
        return NULL;
    }
    if (nd == 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Input tensor must have one or more dimensions");
        return NULL;
    }
    if (self->sizes[nd - 1] != 2) {
        PyErr_SetString(PyExc_RuntimeError, "Tensor must have a last dimension of size 2");
        return NULL;
    }
    if (self->strides[nd - 1] != 1) {
        PyErr_SetString(PyExc_RuntimeError, "Tensor must have a last dimension with stride 1");
        return NULL;
    }
    for (int d = 0; d < nd - 1; d++) {
        if (self->strides[d] % 2 != 0) {
            PyErr_SetString(PyExc_RuntimeError,
                            "Tensor must have a stride divisible by 2 for all but last "
                            "dimension");
            return NULL;
        }
    }
    if (self->offset % 2 != 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Tensor must have a storage_offset divisible by 2");
        return NULL;
    }
    Py_ssize_t strides[EM_MAX_DIMS];
    for (int d = 0; d < nd - 1; d++)
        strides[d] = self->strides[d] / 2;
    em_dtype_t dt = self->dtype == EM_FLOAT32 ? EM_COMPLEX64 : EM_COMPLEX128;
    return (PyObject *)em_tensor_view_dtype(self, dt, nd - 1, self->sizes, strides,
                                            self->offset / 2);
}

/* ------------------------------------------------------------------ copies */

static em_Tensor *
copy_with_dtype(em_Tensor *self, em_dtype_t dtype, bool contiguous)
{
    bool meta = em_meta_of(self);
    em_Tensor *out = contiguous ? em_empty(self->ndim, self->sizes, dtype, meta)
                                : em_empty_like(self, dtype, meta);
    return (em_Tensor *)em_finish(out, out == NULL ? 0 : em_copy_into(out, (PyObject *)self));
}

static bool
wants_contiguous(PyObject *memory_format)
{
    if (memory_format == Py_None)
        return false;
    PyObject *s = PyObject_Str(memory_format);
    bool r = s != NULL && PyUnicode_CompareWithASCIIString(s, "preserve_format") != 0;
    Py_XDECREF(s);
    PyErr_Clear();
    return r;
}

/* clone(self, *, memory_format=None): a copy keeping a dense layout */
static PyObject *
k_clone(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    return (PyObject *)copy_with_dtype(self, self->dtype, wants_contiguous(args[1]));
}

/* _to_copy(self, *, dtype=None): a copy converted to dtype */
static PyObject *
k_to_copy(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    em_dtype_t dt = args[1] == Py_None ? self->dtype : ((em_DType *)args[1])->code;
    return (PyObject *)copy_with_dtype(self, dt, false);
}

/* contiguous(self): self, or a contiguous copy (composite) */
static PyObject *
k_contiguous(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    if (em_tensor_is_contiguous(self)) {
        Py_INCREF(self);
        return (PyObject *)self;
    }
    return em_clone_contiguous(args[0]);
}

/* The scatter ops write src into a view of self: PyTorch wants src of the view's size. */
static int
check_scatter_src(em_Tensor *view, PyObject *src)
{
    em_Tensor *s = (em_Tensor *)src;
    if (s->ndim == view->ndim &&
        memcmp(s->sizes, view->sizes, sizeof(Py_ssize_t) * s->ndim) == 0)
        return 0;
    PyErr_Format(PyExc_RuntimeError, "expected src to have a size equal to the slice of "
                 "self. src size = %s, slice size = %s", em_tshape(s), em_tshape(view));
    return -1;
}

/* A copy of self with src written into its view (sizes, strides, offset); -1 from the
 * geometry (its error set) gives NULL. */
static PyObject *
scatter_into(em_Tensor *out, int st, int ndim, const Py_ssize_t *sizes,
             const Py_ssize_t *strides, Py_ssize_t offset, PyObject *src)
{
    em_Tensor *view = st < 0 ? NULL : em_tensor_view(out, ndim, sizes, strides, offset);
    st = view == NULL || check_scatter_src(view, src) < 0 ? -1 : em_copy_into(view, src);
    Py_XDECREF(view);
    return em_finish(out, st);
}

/* select_scatter(self, src, dim, index): self with src written at select(dim, index) */
static PyObject *
k_select_scatter(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS], offset, wd;
    Py_ssize_t dim = PyLong_AsSsize_t(args[2]), index = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    em_Tensor *out = copy_with_dtype(self, self->dtype, false);
    if (out == NULL)
        return NULL;
    int st = select_geom(out, dim, index, sizes, strides, &offset, &wd);
    return scatter_into(out, st, self->ndim - 1, sizes, strides, offset, args[1]);
}

/* diagonal_scatter(self, src, offset=0, dim1=0, dim2=1) */
static PyObject *
k_diagonal_scatter(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS], offset;
    em_Tensor *out = copy_with_dtype(self, self->dtype, false);
    if (out == NULL)
        return NULL;
    int st = diagonal_geom(out, args + 2, sizes, strides, &offset);
    return scatter_into(out, st, self->ndim - 1, sizes, strides, offset, args[1]);
}

/* as_strided_scatter(self, src, size, stride, storage_offset=None): a copy of self with
 * src written where as_strided(size, stride, storage_offset) reads, the offset taken
 * relative to self's (as PyTorch's) */
static PyObject *
k_as_strided_scatter(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS], offset;
    int n;
    em_Tensor *out = copy_with_dtype(self, self->dtype, false);
    if (out == NULL)
        return NULL;
    int st = as_strided_geom(op, out, args + 2, sizes, strides, &n, &offset, self);
    return scatter_into(out, st, n, sizes, strides, offset, args[1]);
}

/* slice_scatter(self, src, dim=0, start=None, end=None, step=1) */
static PyObject *
k_slice_scatter(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS], offset;
    em_Tensor *out = copy_with_dtype(self, self->dtype, false);
    if (out == NULL)
        return NULL;
    int st = slice_geom(out, args[2], args[3], args[4], args[5], sizes, strides, &offset);
    return scatter_into(out, st, self->ndim, sizes, strides, offset, args[1]);
}

/* fill(self, value): a tensor like self, every element value */
static PyObject *
k_fill(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    bool meta = em_meta_of(self);
    em_Tensor *out = em_empty_like(self, self->dtype, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    return em_finish(out, PyArray_FillWithScalar(out->array, args[1]));
}

/* copy(self, src): src broadcast to self's shape, in self's dtype and layout */
static PyObject *
k_copy(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    PyObject *pair[2] = {args[0], args[1]};
    em_Geom g;
    if (em_broadcast("copy_", pair, 2, &g) < 0)
        return NULL;
    if (g.ndim != self->ndim || memcmp(g.sizes, self->sizes, sizeof(Py_ssize_t) * g.ndim))
        return PyErr_Format(PyExc_RuntimeError, "copy_(): the source of shape %s cannot be "
                            "broadcast to the destination of shape %s",
                            em_tshape((em_Tensor *)args[1]), em_tshape(self));
    g.dtype = self->dtype;
    em_elementwise_strides(&pair[0], 1, &g);
    bool meta = em_meta_of(self) || em_any_meta(pair, 2);
    em_Tensor *out = em_tensor_empty_like_layout(&g, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    return em_finish(out, em_copy_into(out, args[1]));
}

/* ------------------------------------------------------------------ indexing
 *
 * x[key]: ints, slices, None and Ellipsis apply as select / slice / unsqueeze views (each
 * dispatched); tensor indices (integer tensors, bool masks, lists, NumPy arrays, Python
 * bools) are collected with the dim they index and handed to the index op at the end,
 * which places the advanced dims by PyTorch's rule. x[key] = v writes through the same
 * views, and through index_put for tensor indices. */

typedef enum { IT_NONE, IT_ELLIPSIS, IT_INT, IT_SLICE, IT_BOOL, IT_TENSOR } item_kind;

typedef struct {
    item_kind kind;
    PyObject *obj;        /* borrowed item, or an owned tensor for IT_TENSOR */
    Py_ssize_t ival;      /* IT_INT value, IT_BOOL truth */
} Item;

/* PyTorch's heuristic (from NumPy) for a non-tuple sequence used as a key: a short one
 * holding a tensor, a sequence, a slice, None or ... is a tuple of indices. */
static bool
sequence_as_tuple(PyObject *key)
{
    if (PyTuple_Check(key))
        return true;
    if (em_Tensor_Check(key) || PyArray_Check(key) || PyUnicode_Check(key) ||
        PyBytes_Check(key) || !PySequence_Check(key))
        return false;
    Py_ssize_t n = PySequence_Size(key);
    if (n < 0) {
        PyErr_Clear();
        return false;
    }
    if (n >= 32)
        return false;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_GetItem(key, i);
        if (o == NULL) {
            PyErr_Clear();
            return false;
        }
        bool r = em_Tensor_Check(o) || (PySequence_Check(o) && !PyUnicode_Check(o)) ||
                 PySlice_Check(o) || o == Py_Ellipsis || o == Py_None;
        Py_DECREF(o);
        if (r)
            return true;
    }
    return false;
}

/* An index tensor from a NumPy array or a (nested) sequence: bool stays bool, numbers
 * become int64 (floats truncate, as PyTorch's indexing does). */
static PyObject *
index_tensor_from(PyObject *obj)
{
    PyObject *arr = PyArray_FROM_O(obj);
    if (arr == NULL)
        return NULL;
    int t = PyArray_TYPE((PyArrayObject *)arr);
    int want = t == NPY_BOOL ? NPY_BOOL : NPY_INT64;
    if (!PyArray_ISBOOL((PyArrayObject *)arr) && !PyArray_ISINTEGER((PyArrayObject *)arr) &&
        !PyArray_ISFLOAT((PyArrayObject *)arr) && PyArray_SIZE((PyArrayObject *)arr) > 0) {
        Py_DECREF(arr);
        PyErr_SetString(PyExc_IndexError, "tensors used as indices must be long, int, byte or "
                        "bool tensors");
        return NULL;
    }
    PyObject *c = PyArray_FROM_OTF(arr, want, NPY_ARRAY_CARRAY | NPY_ARRAY_ENSURECOPY |
                                   NPY_ARRAY_FORCECAST);
    Py_DECREF(arr);
    if (c == NULL)
        return NULL;
    PyObject *tensor = (PyObject *)em_tensor_from_array((PyArrayObject *)c, NULL, 0);
    Py_DECREF(c);
    return tensor;
}

/* The same built with ops (full, stack) while tracing, so the index is part of the
 * traced graph rather than a tensor made outside it. */
static PyObject *
index_tensor_traced(PyObject *obj, int dtype_code)
{
    if (PyArray_Check(obj)) {
        PyObject *list = PyObject_CallMethod(obj, "tolist", NULL);
        PyObject *r = list ? index_tensor_traced(list, dtype_code) : NULL;
        Py_XDECREF(list);
        return r;
    }
    PyObject *dt = (PyObject *)em_dtypes[dtype_code];
    PyObject *r = NULL;
    if (PyList_Check(obj) || PyTuple_Check(obj)) {
        Py_ssize_t n = PySequence_Size(obj);
        if (n == 0) {
            PyObject *shape = Py_BuildValue("(i)", 0), *zero = PyLong_FromLong(0);
            PyObject *a[3] = {shape, zero, dt};
            r = (shape && zero) ? em_call_op(EM_OP_FULL, a, 2, em_kw_dtype) : NULL;
            Py_XDECREF(shape);
            Py_XDECREF(zero);
        }
        else {
            PyObject *parts = PyTuple_New(n);
            for (Py_ssize_t i = 0; parts != NULL && i < n; i++) {
                PyObject *e = PySequence_GetItem(obj, i);
                PyObject *t = e ? index_tensor_traced(e, dtype_code) : NULL;
                Py_XDECREF(e);
                if (t == NULL)
                    Py_CLEAR(parts);
                else
                    PyTuple_SET_ITEM(parts, i, t);
            }
            r = parts ? em_call_op(EM_OP_STACK, &parts, 1, NULL) : NULL;
            Py_XDECREF(parts);
        }
    }
    else {
        PyObject *v = dtype_code == EM_BOOL ? PyBool_FromLong(PyObject_IsTrue(obj))
                                            : PyNumber_Long(obj);
        PyObject *shape = PyTuple_New(0);
        PyObject *a[3] = {shape, v, dt};
        r = (v && shape) ? em_call_op(EM_OP_FULL, a, 2, em_kw_dtype) : NULL;
        Py_XDECREF(v);
        Py_XDECREF(shape);
    }
    return r;
}

static int
classify(PyObject *k, Item *it)
{
    it->obj = k;
    if (k == Py_None) {
        it->kind = IT_NONE;
        return 0;
    }
    if (k == Py_Ellipsis) {
        it->kind = IT_ELLIPSIS;
        return 0;
    }
    if (PySlice_Check(k)) {
        it->kind = IT_SLICE;
        return 0;
    }
    if (PyBool_Check(k) || PyArray_IsScalar(k, Bool)) {
        it->kind = IT_BOOL;
        it->ival = PyObject_IsTrue(k);
        return 0;
    }
    if (em_Tensor_Check(k)) {
        em_Tensor *t = (em_Tensor *)k;
        if (t->ndim == 0 && !em_is_meta(t) && (em_is_int(t->dtype) || t->dtype == EM_BOOL)) {
            PyObject *v = PyArray_GETITEM(t->array, PyArray_DATA(t->array));
            if (v == NULL)
                return -1;
            if (t->dtype == EM_BOOL || t->dtype == EM_UINT8) {
                it->kind = IT_BOOL;
                it->ival = PyObject_IsTrue(v);
            }
            else {
                it->kind = IT_INT;
                it->ival = PyLong_AsSsize_t(v);
            }
            Py_DECREF(v);
            return PyErr_Occurred() ? -1 : 0;
        }
        Py_INCREF(k);
        it->kind = IT_TENSOR;
        return 0;
    }
    if (PyLong_Check(k) || PyArray_IsScalar(k, Integer)) {
        it->kind = IT_INT;
        it->ival = PyNumber_AsSsize_t(k, PyExc_IndexError);
        return (it->ival == -1 && PyErr_Occurred()) ? -1 : 0;
    }
    if (PyArray_Check(k) || ((PyList_Check(k) || PyTuple_Check(k)))) {
        PyObject *t = index_tensor_from(k);
        if (t != NULL && em_tls.mode == EM_MODE_TRACE && em_tls.tracer != NULL) {
            int code = ((em_Tensor *)t)->dtype;
            Py_SETREF(t, index_tensor_traced(k, code));
        }
        if (t == NULL)
            return -1;
        it->kind = IT_TENSOR;
        it->obj = t;
        return 0;
    }
    if (PyUnicode_Check(k)) {
        PyErr_Format(PyExc_TypeError, "new(): invalid data type '%s'", Py_TYPE(k)->tp_name);
        return -1;
    }
    if (PyIndex_Check(k)) {
        it->kind = IT_INT;
        it->ival = PyNumber_AsSsize_t(k, PyExc_IndexError);
        return (it->ival == -1 && PyErr_Occurred()) ? -1 : 0;
    }
    PyErr_Format(PyExc_IndexError, "only integers, slices (`:`), ellipsis (`...`), None and "
                 "long or byte Variables are valid indices (got %s)", Py_TYPE(k)->tp_name);
    return -1;
}

static void
items_clear(Item *items, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (items[i].kind == IT_TENSOR)
            Py_CLEAR(items[i].obj);
}

static int
dims_consumed(const Item *it)
{
    switch (it->kind) {
    case IT_INT:
    case IT_SLICE:
        return 1;
    case IT_TENSOR: {
        em_Tensor *t = (em_Tensor *)it->obj;
        return (t->dtype == EM_BOOL || t->dtype == EM_UINT8) ? t->ndim : 1;
    }
    default:
        return 0;
    }
}

/* Applies the basic part of key to self: *view receives the resulting view (dispatched
 * select / slice / unsqueeze ops) and *indices the tensor indices for index / index_put
 * (a tuple with None for the dims they leave, or NULL when there are none). */
static int
apply_key(em_Tensor *self, PyObject *key, PyObject **view, PyObject **indices)
{
    *view = NULL;
    *indices = NULL;
    PyObject *items_t;
    if (sequence_as_tuple(key))
        items_t = PySequence_Tuple(key);
    else
        items_t = PyTuple_Pack(1, key);
    if (items_t == NULL)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(items_t);
    Item *items = PyMem_Calloc(n ? n : 1, sizeof(Item));
    Py_ssize_t *adv_pos = PyMem_Calloc(n ? n : 1, sizeof(Py_ssize_t));
    PyObject **adv = PyMem_Calloc(n ? n : 1, sizeof(PyObject *));
    Py_ssize_t nclassified = 0, nadv = 0;
    int st = -1;
    PyObject *cur = NULL;
    if (items == NULL || adv_pos == NULL || adv == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int consumed = 0;
    for (Py_ssize_t i = 0; i < n; i++, nclassified++) {
        if (classify(PyTuple_GET_ITEM(items_t, i), &items[i]) < 0)
            goto done;
        consumed += dims_consumed(&items[i]);
    }
    if (consumed > self->ndim) {
        PyErr_Format(PyExc_IndexError, "too many indices for tensor of dimension %d",
                     self->ndim);
        goto done;
    }
    Py_INCREF(self);
    cur = (PyObject *)self;
    Py_ssize_t dim = 0, span = 0;
    bool viewed = false, seen_ellipsis = false;
    for (Py_ssize_t i = 0; i < n; i++) {
        Item *it = &items[i];
        PyObject *next = NULL;
        if (it->kind == IT_ELLIPSIS) {
            /* the first ... stands for the dims the other items leave; PyTorch reads
             * any further ones as nothing */
            if (!seen_ellipsis)
                dim += self->ndim - consumed;
            seen_ellipsis = true;
            continue;
        }
        if (it->kind == IT_TENSOR) {
            adv_pos[nadv] = dim;
            adv[nadv++] = it->obj;
            dim += dims_consumed(it);
            span = dim;
            continue;
        }
        PyObject *pdim = PyLong_FromSsize_t(dim);
        if (pdim == NULL)
            goto done;
        if ((it->kind == IT_NONE || it->kind == IT_BOOL) &&
            ((em_Tensor *)cur)->ndim >= EM_MAX_DIMS) {
            PyErr_Format(PyExc_RuntimeError, "index: at most %d dimensions are supported, "
                         "but %s adds dimension %d", EM_MAX_DIMS,
                         it->kind == IT_NONE ? "None" : "a bool", EM_MAX_DIMS + 1);
            Py_DECREF(pdim);
            goto done;
        }
        if (it->kind == IT_NONE || it->kind == IT_BOOL) {
            PyObject *a[2] = {cur, pdim};
            next = em_call_op(EM_OP_UNSQUEEZE, a, 2, NULL);
            if (next != NULL && it->kind == IT_BOOL) {
                /* a Python bool: a new dim of size 1, kept (True) or emptied (False) */
                Py_ssize_t len = it->ival ? 1 : 0;
                em_Geom g = {.ndim = 1, .dtype = EM_INT64, .sizes = {len}};
                em_contiguous_strides(&g);
                em_Tensor *t = em_tensor_empty(&g, false);
                if (t != NULL && len)
                    *(npy_int64 *)PyArray_DATA(t->array) = 0;
                if (t == NULL) {
                    Py_DECREF(pdim);
                    Py_DECREF(next);
                    goto done;
                }
                it->kind = IT_TENSOR;   /* owned from now on */
                it->obj = (PyObject *)t;
                adv_pos[nadv] = dim;
                adv[nadv++] = (PyObject *)t;
                span = dim + 1;
            }
            dim++;
        }
        else if (it->kind == IT_SLICE) {
            PySliceObject *s = (PySliceObject *)it->obj;
            PyObject *step = s->step == Py_None ? NULL : s->step;
            if (step != NULL && PyLong_Check(step) && _PyLong_Sign(step) <= 0) {
                /* Python's indexing error, before the op's own */
                PyErr_SetString(PyExc_ValueError, "step must be greater than zero");
                Py_DECREF(pdim);
                goto done;
            }
            PyObject *one = PyLong_FromLong(1);
            PyObject *a[5] = {cur, pdim, s->start, s->stop, step ? step : one};
            next = one ? em_call_op(EM_OP_SLICE, a, 5, NULL) : NULL;
            Py_XDECREF(one);
            dim++;
        }
        else {   /* IT_INT */
            em_Tensor *c = (em_Tensor *)cur;
            Py_ssize_t size = c->sizes[dim];
            if (it->ival < -size || it->ival >= size) {
                PyErr_Format(PyExc_IndexError,
                             "index %zd is out of bounds for dimension %zd with size %zd",
                             it->ival, dim, size);
            }
            else {
                PyObject *idx = PyLong_FromSsize_t(it->ival);
                PyObject *a[3] = {cur, pdim, idx};
                next = idx ? em_call_op(EM_OP_SELECT, a, 3, NULL) : NULL;
                Py_XDECREF(idx);
            }
        }
        Py_DECREF(pdim);
        if (next == NULL)
            goto done;
        Py_SETREF(cur, next);
        viewed = true;
    }
    if (nadv > 0) {
        Py_ssize_t len = span > adv_pos[nadv - 1] + 1 ? span : adv_pos[nadv - 1] + 1;
        /* a mask spans its dims: one entry for it, then the following positions */
        PyObject *tup = PyList_New(0);
        Py_ssize_t at = 0;
        for (Py_ssize_t k = 0; tup != NULL && k < nadv; k++) {
            for (; at < adv_pos[k]; at++)
                if (PyList_Append(tup, Py_None) < 0)
                    Py_CLEAR(tup);
            if (tup != NULL && PyList_Append(tup, adv[k]) < 0)
                Py_CLEAR(tup);
            em_Tensor *t = (em_Tensor *)adv[k];
            at += (t->dtype == EM_BOOL || t->dtype == EM_UINT8) ? t->ndim : 1;
        }
        (void)len;
        if (tup == NULL)
            goto done;
        *indices = PyList_AsTuple(tup);
        Py_DECREF(tup);
        if (*indices == NULL)
            goto done;
    }
    else if (!viewed) {
        /* x[...] and x[()] are views of the whole tensor */
        PyObject *a[1] = {cur};
        Py_SETREF(cur, em_call_op(EM_OP_ALIAS, a, 1, NULL));
        if (cur == NULL)
            goto done;
    }
    *view = cur;
    cur = NULL;
    st = 0;
done:
    Py_XDECREF(cur);
    if (items != NULL)
        items_clear(items, nclassified);
    PyMem_Free(items);
    PyMem_Free(adv_pos);
    PyMem_Free(adv);
    Py_DECREF(items_t);
    return st;
}

/* __getitem__(self, indices) (composite) */
static PyObject *
k_getitem(em_Op *op, PyObject **args)
{
    PyObject *view, *indices;
    if (apply_key((em_Tensor *)args[0], args[1], &view, &indices) < 0)
        return NULL;
    if (indices == NULL)
        return view;
    PyObject *a[2] = {view, indices};
    PyObject *r = em_call_op(EM_OP_INDEX, a, 2, NULL);
    Py_DECREF(view);
    Py_DECREF(indices);
    return r;
}

/* PyTorch's error when value does not broadcast to the indexing result view. */
static int
check_broadcast_to(em_Tensor *v, PyObject *value)
{
    PyObject *pair[2] = {(PyObject *)v, value};
    em_Geom g;
    if (em_broadcast("__setitem__", pair, 2, &g) == 0 && g.ndim == v->ndim &&
        memcmp(g.sizes, v->sizes, sizeof(Py_ssize_t) * g.ndim) == 0)
        return 0;
    PyErr_Clear();
    PyErr_Format(PyExc_RuntimeError, "shape mismatch: value tensor of shape %s cannot be "
                 "broadcast to indexing result of shape %s", em_tshape((em_Tensor *)value),
                 em_tshape(v));
    return -1;
}

/* x[mask] = number or 0-d tensor is PyTorch's masked_fill_ (values cast). */
static bool
is_mask_fill(PyObject *key, PyObject *value)
{
    return em_Tensor_Check(key) && (((em_Tensor *)key)->dtype == EM_BOOL ||
                                    ((em_Tensor *)key)->dtype == EM_UINT8) &&
           (!em_Tensor_Check(value) || ((em_Tensor *)value)->ndim == 0);
}

/* mask (indexing self's leading dims) as a bool tensor broadcasting over self, with
 * index's error when its shape does not match. */
static PyObject *
mask_over(em_Tensor *self, em_Tensor *mask)
{
    for (int d = 0; d < mask->ndim; d++) {
        if (d >= self->ndim || mask->sizes[d] != self->sizes[d])
            return PyErr_Format(PyExc_IndexError, "The shape of the mask %s at index %d does "
                                "not match the shape of the indexed tensor %s at index %d",
                                em_tshape(mask), d, em_tshape(self), d);
    }
    PyObject *m = (PyObject *)mask;
    Py_INCREF(m);
    if (mask->dtype != EM_BOOL) {
        PyObject *a[2] = {m, (PyObject *)em_dtypes[EM_BOOL]};
        Py_SETREF(m, em_call_op(EM_OP__TO_COPY, a, 1, em_kw_dtype));
        if (m == NULL)
            return NULL;
    }
    if (mask->ndim == self->ndim)
        return m;
    Py_ssize_t sizes[EM_MAX_DIMS];
    for (int d = 0; d < self->ndim; d++)
        sizes[d] = d < mask->ndim ? mask->sizes[d] : 1;
    PyObject *shape = em_int_tuple(sizes, self->ndim), *r = NULL;
    if (shape != NULL) {
        PyObject *a[2] = {m, shape};
        r = em_call_op(EM_OP_VIEW, a, 2, NULL);
        Py_DECREF(shape);
    }
    Py_DECREF(m);
    return r;
}

/* A 0-d tensor of dtype holding number (dispatched, so tracers see it). */
static PyObject *
full_scalar(PyObject *number, em_dtype_t dtype)
{
    PyObject *empty = PyTuple_New(0);
    PyObject *a[3] = {empty, number, (PyObject *)em_dtypes[dtype]};
    PyObject *r = empty ? em_call_op(EM_OP_FULL, a, 2, em_kw_dtype) : NULL;
    Py_XDECREF(empty);
    return r;
}

/* x[key] = value as dispatched in-place ops on the view x[basic part of key]: copy_ or
 * fill_, masked_fill_ for a lone mask and a scalar, else index_put_. Autograd (in-place
 * updates of views) and tracers (functionalization) see the writes. */
static PyObject *
setitem_dispatched(em_Tensor *self, PyObject *key, PyObject *value)
{
    PyObject *view, *indices, *res = NULL;
    if (apply_key(self, key, &view, &indices) < 0)
        return NULL;
    em_Tensor *v = (em_Tensor *)view;
    if (indices == NULL) {
        PyObject *a[2] = {view, value};
        if (!em_Tensor_Check(value))
            res = em_call_op(EM_OP_FILL_, a, 2, NULL);
        else if (check_broadcast_to(v, value) == 0)
            res = em_call_op(EM_OP_COPY_, a, 2, NULL);
    }
    else if (is_mask_fill(key, value)) {
        PyObject *mask = mask_over(v, (em_Tensor *)key);
        if (mask != NULL) {
            PyObject *a[3] = {view, mask, value};
            res = em_call_op(EM_OP_MASKED_FILL_, a, 3, NULL);
            Py_DECREF(mask);
        }
    }
    else {
        PyObject *val = value;
        Py_INCREF(val);
        if (!em_Tensor_Check(value))
            Py_SETREF(val, full_scalar(value, v->dtype));
        if (val != NULL) {
            PyObject *a[3] = {view, indices, val};
            res = em_call_op(EM_OP_INDEX_PUT_, a, 3, NULL);
            Py_DECREF(val);
        }
    }
    Py_XDECREF(indices);
    Py_DECREF(view);
    if (res == NULL)
        return NULL;
    Py_DECREF(res);
    Py_RETURN_NONE;
}

/* __setitem__(self, indices, value): writes value into self[indices] in place. */
static PyObject *
k_setitem(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    PyObject *value = args[2];
    if (!em_Tensor_Check(value) && !em_is_number(value)) {
        PyErr_Format(PyExc_TypeError, "can't assign a %s to a Tensor (expected a Tensor or a "
                     "number)", Py_TYPE(value)->tp_name);
        return NULL;
    }
    bool tracing = em_tls.mode == EM_MODE_TRACE && em_tls.tracer != NULL;
    bool grad = em_tls.grad_enabled &&
                (self->requires_grad ||
                 (em_Tensor_Check(value) && ((em_Tensor *)value)->requires_grad));
    if (tracing || grad)
        return setitem_dispatched(self, args[1], value);
    /* the fast path: written through views, no autograd, one version bump */
    int grad_mode = em_tls.grad_enabled;
    em_tls.grad_enabled = 0;
    PyObject *view, *indices;
    int ok = apply_key(self, args[1], &view, &indices);
    em_tls.grad_enabled = grad_mode;
    if (ok < 0)
        return NULL;
    em_Tensor *v = (em_Tensor *)view;
    int st;
    if (indices != NULL) {
        /* other tensor values go through index_put_, which wants self's dtype */
        st = em_index_put_inplace(v, indices, value, is_mask_fill(args[1], value));
        Py_DECREF(indices);
    }
    else {
        st = em_Tensor_Check(value) ? check_broadcast_to(v, value) : 0;
        if (st == 0)
            st = em_copy_into(v, value);
    }
    Py_DECREF(view);
    if (st < 0)
        return NULL;
    self->storage->version++;
    Py_RETURN_NONE;
}

/* Python composite: the op entry's `impl` runs with the bound arguments. */
static PyObject *
k_python(em_Op *op, PyObject **args)
{
    if (op->impl == NULL) {
        PyErr_Format(PyExc_TypeError, "%U has no impl", op->name);
        return NULL;
    }
    return PyObject_Vectorcall(op->impl, args, op->nparams, NULL);
}

const em_KernelEntry em_view_kernels[] = {
    {"view", k_view},
    {"reshape", k_reshape},
    {"permute", k_permute},
    {"transpose", k_transpose},
    {"t", k_t},
    {"expand", k_expand},
    {"unsqueeze", k_unsqueeze},
    {"squeeze", k_squeeze},
    {"select", k_select},
    {"slice", k_slice},
    {"alias", k_alias},
    {"view_as_real", k_view_as_real},
    {"view_as_complex", k_view_as_complex},
    {"clone", k_clone},
    {"to_copy", k_to_copy},
    {"contiguous", k_contiguous},
    {"select_scatter", k_select_scatter},
    {"slice_scatter", k_slice_scatter},
    {"diagonal", k_diagonal},
    {"diagonal_scatter", k_diagonal_scatter},
    {"as_strided", k_as_strided},
    {"as_strided_scatter", k_as_strided_scatter},
    {"fill", k_fill},
    {"copy", k_copy},
    {"getitem", k_getitem},
    {"setitem", k_setitem},
    {"python", k_python},
    {NULL, NULL},
};
