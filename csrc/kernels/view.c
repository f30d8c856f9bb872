/* view.c: views (view, permute, expand, select, slice, ...), basic indexing,
 * copies (clone, _to_copy) and the composites built on them.
 *
 * A view kernel only computes new sizes, strides and storage offset; the same
 * code therefore serves real and meta tensors.
 */
#include "ember.h"

static em_Tensor *
as_tensor(PyObject *o)
{
    return (em_Tensor *)o;
}

static PyObject *
view_of(em_Tensor *self, int ndim, const Py_ssize_t *sizes, const Py_ssize_t *strides,
        Py_ssize_t offset)
{
    return (PyObject *)em_tensor_view(self, ndim, sizes, strides, offset);
}

/* Reads a tuple of ints (already converted by the binder). */
static int
int_tuple(PyObject *tup, Py_ssize_t *out, int *n)
{
    Py_ssize_t len = PyTuple_GET_SIZE(tup);
    if (len > EM_MAX_DIMS) {
        PyErr_Format(PyExc_RuntimeError, "at most %d dimensions are supported", EM_MAX_DIMS);
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
        PyObject *s = em_format_shape(n, shape);
        if (s)
            PyErr_Format(PyExc_RuntimeError,
                         "cannot reshape tensor of 0 elements into shape %U because the "
                         "unspecified dimension size -1 can be any value and is ambiguous", s);
        Py_XDECREF(s);
        return -1;
    }
    if (infer >= 0 && numel % prod == 0) {
        shape[infer] = numel / prod;
        return 0;
    }
    if (infer < 0 && prod == numel)
        return 0;
    PyObject *s = em_format_shape(n, shape);
    if (s)
        PyErr_Format(PyExc_RuntimeError, "shape '%U' is invalid for input of size %zd", s, numel);
    Py_XDECREF(s);
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
    em_Tensor *self = as_tensor(args[0]);
    Py_ssize_t shape[EM_MAX_DIMS], strides[EM_MAX_DIMS];
    int n;
    if (int_tuple(args[1], shape, &n) < 0 || infer_size(shape, n, self->numel) < 0)
        return NULL;
    if (!compute_stride(self->ndim, self->sizes, self->strides, self->numel, n, shape,
                        strides)) {
        PyObject *sz = em_format_shape(self->ndim, self->sizes);
        PyObject *st = em_format_shape(self->ndim, self->strides);
        PyObject *to = em_format_shape(n, shape);
        if (sz && st && to)
            PyErr_Format(PyExc_RuntimeError,
                         "view size is not compatible with input tensor's size and stride (at "
                         "least one dimension spans across two contiguous subspaces): size %U "
                         "and stride %U viewed as %U. Use .reshape(...) instead.", sz, st, to);
        Py_XDECREF(sz);
        Py_XDECREF(st);
        Py_XDECREF(to);
        return NULL;
    }
    return view_of(self, n, shape, strides, self->offset);
}

static PyObject *
call_slot(em_slot_t slot, const char *name, PyObject *const *args, Py_ssize_t n)
{
    if (em_slots[slot] == NULL) {
        PyErr_Format(PyExc_RuntimeError, "op %s is not bound", name);
        return NULL;
    }
    return em_op_call(em_slots[slot], args, n);
}

static em_Op *view_op, *clone_op, *to_copy_op;

static PyObject *
call_named(em_Op *op, const char *name, PyObject *const *args, Py_ssize_t n)
{
    if (op == NULL) {
        PyErr_Format(PyExc_RuntimeError, "op %s is not bound", name);
        return NULL;
    }
    return em_op_call(op, args, n);
}

/* reshape(self, shape): a view when the strides allow it, else a copy (composite). */
static PyObject *
k_reshape(em_Op *op, PyObject **args)
{
    em_Tensor *self = as_tensor(args[0]);
    Py_ssize_t shape[EM_MAX_DIMS], strides[EM_MAX_DIMS];
    int n;
    if (int_tuple(args[1], shape, &n) < 0 || infer_size(shape, n, self->numel) < 0)
        return NULL;
    if (compute_stride(self->ndim, self->sizes, self->strides, self->numel, n, shape, strides)) {
        PyObject *va[2] = {args[0], args[1]};
        return call_named(view_op, "view", va, 2);
    }
    PyObject *ca[1] = {args[0]};
    PyObject *copy = call_named(clone_op, "clone", ca, 1);
    if (copy == NULL)
        return NULL;
    /* clone keeps a dense permuted layout; force a contiguous one for the view */
    if (!em_tensor_is_contiguous(as_tensor(copy))) {
        PyObject *fmt = PyUnicode_FromString("contiguous_format");
        PyObject *kw = Py_BuildValue("(s)", "memory_format");
        PyObject *a2[2] = {args[0], fmt};
        Py_DECREF(copy);
        copy = (fmt && kw) ? PyObject_Vectorcall((PyObject *)clone_op, a2, 1, kw) : NULL;
        Py_XDECREF(fmt);
        Py_XDECREF(kw);
        if (copy == NULL)
            return NULL;
    }
    PyObject *va[2] = {copy, args[1]};
    PyObject *res = call_named(view_op, "view", va, 2);
    Py_DECREF(copy);
    return res;
}

/* permute(self, dims) */
static PyObject *
k_permute(em_Op *op, PyObject **args)
{
    em_Tensor *self = as_tensor(args[0]);
    Py_ssize_t dims[EM_MAX_DIMS], sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
    int n;
    if (int_tuple(args[1], dims, &n) < 0)
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
    return view_of(self, n, sizes, strides, self->offset);
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
    return view_of(self, self->ndim, sizes, strides, self->offset);
}

/* transpose(self, dim0, dim1) */
static PyObject *
k_transpose(em_Op *op, PyObject **args)
{
    Py_ssize_t d0 = PyLong_AsSsize_t(args[1]), d1 = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred())
        return NULL;
    return swap_dims(as_tensor(args[0]), d0, d1);
}

/* t(self): transpose of a tensor with at most 2 dimensions */
static PyObject *
k_t(em_Op *op, PyObject **args)
{
    em_Tensor *self = as_tensor(args[0]);
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
    em_Tensor *self = as_tensor(args[0]);
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
    int n;
    if (int_tuple(args[1], sizes, &n) < 0)
        return NULL;
    if (n < self->ndim) {
        PyObject *s = em_format_shape(n, sizes), *t = em_format_shape(self->ndim, self->sizes);
        if (s && t)
            PyErr_Format(PyExc_RuntimeError,
                         "expand(): the number of sizes provided (%d) must be greater or equal "
                         "to the number of dimensions in the tensor (%d); target sizes %U, "
                         "tensor sizes %U", n, self->ndim, s, t);
        Py_XDECREF(s);
        Py_XDECREF(t);
        return NULL;
    }
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
            PyObject *s = em_format_shape(n, sizes), *t = em_format_shape(self->ndim, self->sizes);
            if (s && t)
                PyErr_Format(PyExc_RuntimeError,
                             "The expanded size of the tensor (%zd) must match the existing "
                             "size (%zd) at non-singleton dimension %d.  Target sizes: %U.  "
                             "Tensor sizes: %U", sizes[i], self->sizes[j], i, s, t);
            Py_XDECREF(s);
            Py_XDECREF(t);
            return NULL;
        }
    }
    return view_of(self, n, sizes, strides, self->offset);
}

/* unsqueeze(self, dim) */
static PyObject *
k_unsqueeze(em_Op *op, PyObject **args)
{
    em_Tensor *self = as_tensor(args[0]);
    Py_ssize_t d = PyLong_AsSsize_t(args[1]);
    if (d == -1 && PyErr_Occurred())
        return NULL;
    if (em_wrap_dim(&d, self->ndim + 1) < 0)
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
    return view_of(self, self->ndim + 1, sizes, strides, self->offset);
}

/* squeeze(self, dim=None): drops size-1 dims (all, or those named) */
static PyObject *
k_squeeze(em_Op *op, PyObject **args)
{
    em_Tensor *self = as_tensor(args[0]);
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
    return view_of(self, n, sizes, strides, self->offset);
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
        PyObject *s = em_format_shape(self->ndim, self->sizes);
        if (s)
            PyErr_Format(PyExc_IndexError,
                         "select(): index %zd out of range for tensor of size %U at dimension "
                         "%zd", index, s, dim);
        Py_XDECREF(s);
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
    em_Tensor *self = as_tensor(args[0]);
    Py_ssize_t dim = PyLong_AsSsize_t(args[1]), index = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred())
        return NULL;
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS], offset, wd;
    if (select_geom(self, dim, index, sizes, strides, &offset, &wd) < 0)
        return NULL;
    return view_of(self, self->ndim - 1, sizes, strides, offset);
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
    em_Tensor *self = as_tensor(args[0]);
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS], offset;
    if (slice_geom(self, args[1], args[2], args[3], args[4], sizes, strides, &offset) < 0)
        return NULL;
    return view_of(self, self->ndim, sizes, strides, offset);
}

/* alias(self): a view of the whole tensor */
static PyObject *
k_alias(em_Op *op, PyObject **args)
{
    em_Tensor *self = as_tensor(args[0]);
    return view_of(self, self->ndim, self->sizes, self->strides, self->offset);
}

/* ------------------------------------------------------------------ copies */

static bool
want_meta(em_Tensor *t)
{
    return em_tls.mode == EM_MODE_META || em_is_meta(t);
}

static int
copy_into(em_Tensor *dst, PyObject *src)
{
    if (em_is_meta(dst))
        return 0;
    PyObject *arr;
    if (em_Tensor_Check(src)) {
        arr = em_tensor_to_array(as_tensor(src));
    }
    else {
        PyArray_Descr *d = PyArray_DESCR(dst->array);
        Py_INCREF(d);
        arr = PyArray_FromAny(src, d, 0, 0, 0, NULL);
    }
    if (arr == NULL)
        return -1;
    int r = PyArray_CopyInto(dst->array, (PyArrayObject *)arr);
    Py_DECREF(arr);
    return r;
}

static em_Tensor *
copy_with_dtype(em_Tensor *self, em_dtype_t dtype, bool contiguous)
{
    em_Geom g = {.ndim = self->ndim, .dtype = dtype};
    memcpy(g.sizes, self->sizes, sizeof(Py_ssize_t) * self->ndim);
    PyObject *operand = (PyObject *)self;
    if (contiguous)
        em_contiguous_strides(&g);
    else
        em_elementwise_strides(&operand, 1, &g);
    bool meta = want_meta(self);
    em_Tensor *out = em_tensor_empty_like_layout(&g, meta);
    if (out == NULL || meta)
        return out;
    if (copy_into(out, (PyObject *)self) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
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
    em_Tensor *self = as_tensor(args[0]);
    return (PyObject *)copy_with_dtype(self, self->dtype, wants_contiguous(args[1]));
}

/* _to_copy(self, *, dtype=None): a copy converted to dtype */
static PyObject *
k_to_copy(em_Op *op, PyObject **args)
{
    em_Tensor *self = as_tensor(args[0]);
    em_dtype_t dt = args[1] == Py_None ? self->dtype : ((em_DType *)args[1])->code;
    return (PyObject *)copy_with_dtype(self, dt, false);
}

/* contiguous(self): self, or a contiguous copy (composite) */
static PyObject *
k_contiguous(em_Op *op, PyObject **args)
{
    em_Tensor *self = as_tensor(args[0]);
    if (em_tensor_is_contiguous(self)) {
        Py_INCREF(self);
        return (PyObject *)self;
    }
    PyObject *fmt = PyUnicode_FromString("contiguous_format");
    PyObject *kw = Py_BuildValue("(s)", "memory_format");
    PyObject *a2[2] = {args[0], fmt};
    PyObject *r = (fmt && kw && clone_op)
                      ? PyObject_Vectorcall((PyObject *)clone_op, a2, 1, kw) : NULL;
    if (r == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "op clone is not bound");
    Py_XDECREF(fmt);
    Py_XDECREF(kw);
    return r;
}

/* The scatter ops write src into a view of self: PyTorch wants src of the view's size. */
static int
check_scatter_src(em_Tensor *view, PyObject *src)
{
    em_Tensor *s = as_tensor(src);
    if (s->ndim == view->ndim &&
        memcmp(s->sizes, view->sizes, sizeof(Py_ssize_t) * s->ndim) == 0)
        return 0;
    PyObject *a = em_format_shape(s->ndim, s->sizes);
    PyObject *b = em_format_shape(view->ndim, view->sizes);
    if (a && b)
        PyErr_Format(PyExc_RuntimeError, "expected src to have a size equal to the slice of "
                     "self. src size = %U, slice size = %U", a, b);
    Py_XDECREF(a);
    Py_XDECREF(b);
    return -1;
}

/* select_scatter(self, src, dim, index): self with src written at select(dim, index) */
static PyObject *
k_select_scatter(em_Op *op, PyObject **args)
{
    em_Tensor *self = as_tensor(args[0]);
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS], offset, wd;
    Py_ssize_t dim = PyLong_AsSsize_t(args[2]), index = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    em_Tensor *out = copy_with_dtype(self, self->dtype, false);
    if (out == NULL)
        return NULL;
    if (select_geom(out, dim, index, sizes, strides, &offset, &wd) < 0)
        goto error;
    em_Tensor *view = em_tensor_view(out, self->ndim - 1, sizes, strides, offset);
    if (view == NULL)
        goto error;
    int st = check_scatter_src(view, args[1]) < 0 ? -1 : copy_into(view, args[1]);
    Py_DECREF(view);
    if (st < 0)
        goto error;
    return (PyObject *)out;
error:
    Py_DECREF(out);
    return NULL;
}

/* slice_scatter(self, src, dim=0, start=None, end=None, step=1) */
static PyObject *
k_slice_scatter(em_Op *op, PyObject **args)
{
    em_Tensor *self = as_tensor(args[0]);
    Py_ssize_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS], offset;
    em_Tensor *out = copy_with_dtype(self, self->dtype, false);
    if (out == NULL)
        return NULL;
    if (slice_geom(out, args[2], args[3], args[4], args[5], sizes, strides, &offset) < 0)
        goto error;
    em_Tensor *view = em_tensor_view(out, self->ndim, sizes, strides, offset);
    if (view == NULL)
        goto error;
    int st = check_scatter_src(view, args[1]) < 0 ? -1 : copy_into(view, args[1]);
    Py_DECREF(view);
    if (st < 0)
        goto error;
    return (PyObject *)out;
error:
    Py_DECREF(out);
    return NULL;
}

/* fill(self, value): a tensor like self, every element value */
static PyObject *
k_fill(em_Op *op, PyObject **args)
{
    em_Tensor *self = as_tensor(args[0]);
    em_Geom g = {.ndim = self->ndim, .dtype = self->dtype};
    memcpy(g.sizes, self->sizes, sizeof(Py_ssize_t) * self->ndim);
    PyObject *operand = args[0];
    em_elementwise_strides(&operand, 1, &g);
    bool meta = want_meta(self);
    em_Tensor *out = em_tensor_empty_like_layout(&g, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    if (PyArray_FillWithScalar(out->array, args[1]) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return (PyObject *)out;
}

/* copy(self, src): src broadcast to self's shape, in self's dtype and layout */
static PyObject *
k_copy(em_Op *op, PyObject **args)
{
    em_Tensor *self = as_tensor(args[0]);
    PyObject *pair[2] = {args[0], args[1]};
    em_Geom g;
    if (em_broadcast("copy_", pair, 2, &g) < 0)
        return NULL;
    if (g.ndim != self->ndim || memcmp(g.sizes, self->sizes, sizeof(Py_ssize_t) * g.ndim)) {
        em_Tensor *src = as_tensor(args[1]);
        PyObject *a = em_format_shape(src->ndim, src->sizes);
        PyObject *b = em_format_shape(self->ndim, self->sizes);
        if (a && b)
            PyErr_Format(PyExc_RuntimeError,
                         "copy_(): the source of shape %U cannot be broadcast to the "
                         "destination of shape %U", a, b);
        Py_XDECREF(a);
        Py_XDECREF(b);
        return NULL;
    }
    g.dtype = self->dtype;
    em_elementwise_strides(&pair[0], 1, &g);
    bool meta = want_meta(self) || em_any_meta(pair, 2);
    em_Tensor *out = em_tensor_empty_like_layout(&g, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    if (copy_into(out, args[1]) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return (PyObject *)out;
}

/* ------------------------------------------------------------------ indexing */

static bool
is_basic_int(PyObject *o)
{
    if (PyBool_Check(o))
        return false;
    if (PyLong_Check(o) || PyArray_IsScalar(o, Integer))
        return true;
    return em_Tensor_Check(o) && as_tensor(o)->ndim == 0 && em_is_int(as_tensor(o)->dtype);
}

/* __getitem__(self, indices): ints, slices, None and Ellipsis, as a chain of
 * select / slice / unsqueeze ops that each dispatch (composite). */
static PyObject *
k_getitem(em_Op *op, PyObject **args)
{
    em_Tensor *self = as_tensor(args[0]);
    PyObject *key = args[1];
    PyObject *items = PyTuple_Check(key) ? (Py_INCREF(key), key) : PyTuple_Pack(1, key);
    if (items == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    int consumed = 0, ellipses = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyTuple_GET_ITEM(items, i);
        if (k == Py_Ellipsis)
            ellipses++;
        else if (is_basic_int(k) || PySlice_Check(k))
            consumed++;
        else if (k != Py_None) {
            Py_DECREF(items);
            PyErr_Format(PyExc_IndexError,
                         "ember: indexing with %s is not supported (only integers, slices, "
                         "None and ...)", em_Tensor_Check(k) ? "tensors" : Py_TYPE(k)->tp_name);
            return NULL;
        }
    }
    if (ellipses > 1) {
        Py_DECREF(items);
        PyErr_SetString(PyExc_IndexError, "an index can only have a single ellipsis ('...')");
        return NULL;
    }
    if (consumed > self->ndim) {
        Py_DECREF(items);
        PyErr_Format(PyExc_IndexError, "too many indices for tensor of dimension %d",
                     self->ndim);
        return NULL;
    }
    Py_INCREF(self);
    PyObject *cur = (PyObject *)self;
    Py_ssize_t dim = 0;
    bool viewed = false;
    for (Py_ssize_t i = 0; i < n && cur != NULL; i++) {
        PyObject *k = PyTuple_GET_ITEM(items, i), *next = NULL;
        if (k == Py_Ellipsis) {
            dim += self->ndim - consumed;
            continue;
        }
        PyObject *pdim = PyLong_FromSsize_t(dim);
        if (pdim == NULL) {
            Py_CLEAR(cur);
            break;
        }
        if (k == Py_None) {
            PyObject *a[2] = {cur, pdim};
            next = call_slot(EM_SLOT_UNSQUEEZE, "unsqueeze", a, 2);
            dim++;
        }
        else if (PySlice_Check(k)) {
            PySliceObject *s = (PySliceObject *)k;
            PyObject *step = s->step == Py_None ? NULL : s->step;
            if (step != NULL && PyLong_Check(step) && _PyLong_Sign(step) <= 0) {
                /* Python's indexing error, before the op's own */
                PyErr_SetString(PyExc_ValueError, "step must be greater than zero");
                Py_DECREF(pdim);
                Py_CLEAR(cur);
                break;
            }
            PyObject *one = PyLong_FromLong(1);
            PyObject *a[5] = {cur, pdim, s->start, s->stop, step ? step : one};
            next = one ? call_slot(EM_SLOT_SLICE, "slice", a, 5) : NULL;
            Py_XDECREF(one);
            dim++;
        }
        else {
            PyObject *idx = PyNumber_Index(k);
            em_Tensor *c = as_tensor(cur);
            if (idx != NULL) {
                Py_ssize_t iv = PyLong_AsSsize_t(idx);
                Py_ssize_t size = c->sizes[dim];
                if (!PyErr_Occurred() && (iv < -size || iv >= size))
                    PyErr_Format(PyExc_IndexError,
                                 "index %zd is out of bounds for dimension %zd with size %zd",
                                 iv, dim, size);
                if (!PyErr_Occurred()) {
                    PyObject *a[3] = {cur, pdim, idx};
                    next = call_slot(EM_SLOT_SELECT, "select", a, 3);
                }
                Py_DECREF(idx);
            }
        }
        Py_DECREF(pdim);
        Py_SETREF(cur, next);
        viewed = true;
    }
    Py_DECREF(items);
    if (cur != NULL && !viewed) {
        /* x[...] and x[()] are views of the whole tensor */
        PyObject *a[1] = {cur};
        Py_SETREF(cur, call_slot(EM_SLOT_ALIAS, "alias", a, 1));
    }
    return cur;
}

/* __setitem__(self, indices, value): copies value into self[indices] in place. */
static PyObject *
k_setitem(em_Op *op, PyObject **args)
{
    em_Tensor *self = as_tensor(args[0]);
    PyObject *value = args[2];
    if (em_tls.grad_enabled && self->requires_grad) {
        if (self->grad_fn == NULL)
            PyErr_SetString(PyExc_RuntimeError,
                            "a leaf Variable that requires grad is being used in an in-place "
                            "operation.");
        else
            PyErr_SetString(PyExc_NotImplementedError,
                            "ember: assigning into a tensor that requires grad is not "
                            "supported yet; assign under ember.no_grad() or into a copy");
        return NULL;
    }
    if (em_tls.grad_enabled && em_Tensor_Check(value) && as_tensor(value)->requires_grad) {
        PyErr_SetString(PyExc_NotImplementedError,
                        "ember: assigning a tensor that requires grad is not supported yet");
        return NULL;
    }
    if (!em_Tensor_Check(value) && !em_is_number(value)) {
        PyErr_Format(PyExc_TypeError,
                     "can't assign a %s to a Tensor (expected a Tensor or a number)",
                     Py_TYPE(value)->tp_name);
        return NULL;
    }
    int grad = em_tls.grad_enabled;
    em_tls.grad_enabled = 0;
    PyObject *ga[2] = {args[0], args[1]};
    PyObject *view = k_getitem(op, ga);
    em_tls.grad_enabled = grad;
    if (view == NULL)
        return NULL;
    em_Tensor *v = as_tensor(view);
    if (em_Tensor_Check(value)) {
        PyObject *pair[2] = {view, value};
        em_Geom g;
        if (em_broadcast("__setitem__", pair, 2, &g) < 0 || g.ndim != v->ndim ||
            memcmp(g.sizes, v->sizes, sizeof(Py_ssize_t) * g.ndim) != 0) {
            em_Tensor *val = as_tensor(value);
            PyObject *s1 = em_format_shape(val->ndim, val->sizes);
            PyObject *s2 = em_format_shape(v->ndim, v->sizes);
            PyErr_Clear();
            if (s1 && s2)
                PyErr_Format(PyExc_RuntimeError,
                             "shape mismatch: value tensor of shape %U cannot be broadcast to "
                             "indexing result of shape %U", s1, s2);
            Py_XDECREF(s1);
            Py_XDECREF(s2);
            Py_DECREF(view);
            return NULL;
        }
    }
    int st = copy_into(v, value);
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
    PyObject *impl = PyObject_GetAttrString(op->entry, "impl");
    if (impl == NULL)
        return NULL;
    PyObject *r = PyObject_Vectorcall(impl, args, op->nparams, NULL);
    Py_DECREF(impl);
    return r;
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
    {"clone", k_clone},
    {"to_copy", k_to_copy},
    {"contiguous", k_contiguous},
    {"select_scatter", k_select_scatter},
    {"slice_scatter", k_slice_scatter},
    {"fill", k_fill},
    {"copy", k_copy},
    {"getitem", k_getitem},
    {"setitem", k_setitem},
    {"python", k_python},
    {NULL, NULL},
};

/* _bind_view_ops(view, clone, _to_copy): the ops composites call. */
PyObject *
em_bind_view_ops(PyObject *self, PyObject *args)
{
    PyObject *v, *c, *t;
    if (!PyArg_ParseTuple(args, "O!O!O!", &em_Op_Type, &v, &em_Op_Type, &c, &em_Op_Type, &t))
        return NULL;
    Py_INCREF(v);
    Py_XSETREF(view_op, (em_Op *)v);
    Py_INCREF(c);
    Py_XSETREF(clone_op, (em_Op *)c);
    Py_INCREF(t);
    Py_XSETREF(to_copy_op, (em_Op *)t);
    Py_RETURN_NONE;
}
