/* shape.c: cat (a prim), flip, roll and pad (decomposed ops with their own kernels),
 * and the composites that are pure sugar over views: stack, split, chunk, unbind,
 * flatten, unflatten, movedim, narrow, repeat, tile, the *_as forms and T / mT.
 *
 * A composite runs in every mode and calls the ops it is made of through the
 * dispatcher by id (em_call_op), so autograd and tracers see those ops, never the
 * composite.
 */
#include "kutil.h"

static PyObject *
call_ints(int id, PyObject *self, const Py_ssize_t *v, int n)
{
    PyObject *t = em_int_tuple(v, n);
    if (t == NULL)
        return NULL;
    PyObject *a[2] = {self, t};
    PyObject *r = em_call_op(id, a, 2, NULL);
    Py_DECREF(t);
    return r;
}

/* slice(self, d, start, stop) through the dispatcher */
static PyObject *
call_slice(PyObject *self, Py_ssize_t d, Py_ssize_t start, Py_ssize_t stop)
{
    PyObject *a[5] = {self, PyLong_FromSsize_t(d), PyLong_FromSsize_t(start),
                      PyLong_FromSsize_t(stop), PyLong_FromLong(1)};
    PyObject *r = (a[1] && a[2] && a[3] && a[4]) ? em_call_op(EM_OP_SLICE, a, 5, NULL) : NULL;
    for (int i = 1; i < 5; i++)
        Py_XDECREF(a[i]);
    return r;
}

/* op(self, d) for an op of id taking a dim: unsqueeze, cat */
static PyObject *
call_dim(int id, PyObject *self, Py_ssize_t d)
{
    PyObject *pd = PyLong_FromSsize_t(d);
    if (pd == NULL)
        return NULL;
    PyObject *a[2] = {self, pd};
    PyObject *r = em_call_op(id, a, 2, NULL);
    Py_DECREF(pd);
    return r;
}


/* ------------------------------------------------------------------ cat */

static bool
cat_skipped(em_Tensor *t)
{
    return t->ndim == 1 && t->sizes[0] == 0;
}

/* cat(tensors, dim=0) */
static PyObject *
k_cat(em_Op *op, PyObject **args)
{
    PyObject *list = args[0];
    Py_ssize_t n = PyTuple_GET_SIZE(list);
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "cat(): expected a non-empty list of Tensors");
        return NULL;
    }
    PyObject **items = &PyTuple_GET_ITEM(list, 0);
    em_dtype_t dt = EM_UNDEFINED;
    em_Tensor *ref = NULL;
    bool meta = em_tls.mode == EM_MODE_META;
    for (Py_ssize_t i = 0; i < n; i++) {
        em_Tensor *t = (em_Tensor *)items[i];
        dt = em_promote_types(dt, t->dtype);
        meta |= em_is_meta(t);
        if (t->ndim == 0) {
            PyErr_Format(PyExc_RuntimeError, "cat(): zero-dimensional tensor (at position %zd) "
                         "cannot be concatenated", i);
            return NULL;
        }
        if (ref == NULL && !cat_skipped(t))
            ref = t;
    }
    if (ref == NULL) {
        Py_ssize_t zero = 0;
        return (PyObject *)em_empty(1, &zero, dt, meta);
    }
    Py_ssize_t d;
    if (em_dim_arg(args[1], ref->ndim, &d) < 0)
        return NULL;
    Py_ssize_t sizes[EM_MAX_DIMS];
    memcpy(sizes, ref->sizes, sizeof(Py_ssize_t) * ref->ndim);
    sizes[d] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        em_Tensor *t = (em_Tensor *)items[i];
        if (cat_skipped(t))
            continue;
        if (t->ndim != ref->ndim) {
            PyErr_Format(PyExc_RuntimeError, "cat(): Tensors must have same number of "
                         "dimensions: got %d and %d", ref->ndim, t->ndim);
            return NULL;
        }
        for (int k = 0; k < ref->ndim; k++) {
            if (k != d && t->sizes[k] != ref->sizes[k]) {
                PyErr_Format(PyExc_RuntimeError, "cat(): Sizes of tensors must match except in "
                             "dimension %zd. Expected size %zd but got size %zd for tensor "
                             "number %zd in the list.", d, ref->sizes[k], t->sizes[k], i);
                return NULL;
            }
        }
        sizes[d] += t->sizes[d];
    }
    em_Tensor *out = em_empty(ref->ndim, sizes, dt, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    npy_intp *ostrides = PyArray_STRIDES(out->array);
    Py_ssize_t offset = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        em_Tensor *t = (em_Tensor *)items[i];
        if (cat_skipped(t))
            continue;
        if (t->numel > 0) {
            /* (no base: out outlives the piece) */
            PyArray_Descr *descr = PyArray_DESCR(out->array);
            Py_INCREF(descr);
            PyArrayObject *piece = (PyArrayObject *)PyArray_NewFromDescr(
                &PyArray_Type, descr, t->ndim, (npy_intp *)t->sizes, ostrides,
                PyArray_BYTES(out->array) + offset * ostrides[d], NPY_ARRAY_WRITEABLE, NULL);
            int st = piece ? PyArray_CopyInto(piece, t->array) : -1;
            Py_XDECREF(piece);
            if (st < 0) {
                Py_DECREF(out);
                return NULL;
            }
        }
        offset += t->sizes[d];
    }
    return (PyObject *)out;
}

/* stack(tensors, dim=0): each unsqueezed at dim, then cat */
static PyObject *
k_stack(em_Op *op, PyObject **args)
{
    PyObject *list = args[0];
    Py_ssize_t n = PyTuple_GET_SIZE(list);
    if (n == 0) {
        PyErr_SetString(PyExc_RuntimeError, "stack(): stack expects a non-empty TensorList");
        return NULL;
    }
    em_Tensor *first = (em_Tensor *)PyTuple_GET_ITEM(list, 0);
    for (Py_ssize_t i = 1; i < n; i++) {
        em_Tensor *t = (em_Tensor *)PyTuple_GET_ITEM(list, i);
        if (t->ndim != first->ndim ||
            memcmp(t->sizes, first->sizes, sizeof(Py_ssize_t) * t->ndim) != 0) {
            return PyErr_Format(PyExc_RuntimeError, "stack(): stack expects each tensor to be "
                                "equal size, but got %s at entry 0 and %s at entry %zd",
                                em_tshape(first), em_tshape(t), i);
        }
    }
    Py_ssize_t d;
    if (em_check_ndim("stack", first->ndim + 1) < 0 ||
        em_dim_arg(args[1], first->ndim + 1, &d) < 0)
        return NULL;
    PyObject *parts = PyTuple_New(n);
    for (Py_ssize_t i = 0; parts != NULL && i < n; i++) {
        PyObject *u = call_dim(EM_OP_UNSQUEEZE, PyTuple_GET_ITEM(list, i), d);
        if (u == NULL)
            Py_CLEAR(parts);
        else
            PyTuple_SET_ITEM(parts, i, u);
    }
    if (parts == NULL)
        return NULL;
    PyObject *r = call_dim(EM_OP_CAT, parts, d);
    Py_DECREF(parts);
    return r;
}

/* The tensors viewed with at least `rank` dims (1-D [n] -> [1, n] for vstack). */
static PyObject *
atleast(PyObject *list, int rank)
{
    Py_ssize_t n = PyTuple_GET_SIZE(list);
    PyObject *out = PyTuple_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        em_Tensor *t = (em_Tensor *)PyTuple_GET_ITEM(list, i);
        PyObject *v;
        if (t->ndim >= rank) {
            Py_INCREF(t);
            v = (PyObject *)t;
        }
        else {
            Py_ssize_t shape[2] = {1, 1};
            if (t->ndim == 1)
                shape[rank - 1] = t->sizes[0];
            v = call_ints(EM_OP_RESHAPE, (PyObject *)t, shape, rank);
        }
        if (v == NULL)
            Py_CLEAR(out);
        else
            PyTuple_SET_ITEM(out, i, v);
    }
    return out;
}

/* hstack(tensors): cat along 1 (0 when the tensors are 1-D) */
static PyObject *
k_hstack(em_Op *op, PyObject **args)
{
    PyObject *list = atleast(args[0], 1);
    if (list == NULL)
        return NULL;
    Py_ssize_t d = PyTuple_GET_SIZE(list) > 0 &&
                   ((em_Tensor *)PyTuple_GET_ITEM(list, 0))->ndim == 1 ? 0 : 1;
    PyObject *r = call_dim(EM_OP_CAT, list, d);
    Py_DECREF(list);
    return r;
}

/* vstack(tensors): cat along 0 of the tensors made at least 2-D */
static PyObject *
k_vstack(em_Op *op, PyObject **args)
{
    PyObject *list = atleast(args[0], 2);
    if (list == NULL)
        return NULL;
    PyObject *r = call_dim(EM_OP_CAT, list, 0);
    Py_DECREF(list);
    return r;
}

/* ------------------------------------------------------------------ splitting */

static PyObject *
slices_of(PyObject *self, Py_ssize_t d, const Py_ssize_t *lengths, Py_ssize_t n)
{
    PyObject *out = PyTuple_New(n);
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *s = call_slice(self, d, start, start + lengths[i]);
        start += lengths[i];
        if (s == NULL)
            Py_CLEAR(out);
        else
            PyTuple_SET_ITEM(out, i, s);
    }
    return out;
}

static PyObject *
split_even(PyObject *self, Py_ssize_t d, Py_ssize_t split)
{
    em_Tensor *t = (em_Tensor *)self;
    Py_ssize_t size = t->sizes[d];
    Py_ssize_t n = split == 0 ? 1 : (size + split - 1) / split;
    if (n < 1)
        n = 1;
    Py_ssize_t *lengths = PyMem_Malloc(sizeof(Py_ssize_t) * n);
    if (lengths == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t rest = size - i * split;
        lengths[i] = rest < split ? rest : split;
    }
    PyObject *r = slices_of(self, d, lengths, n);
    PyMem_Free(lengths);
    return r;
}

/* split(self, split_size, dim=0) */
static PyObject *
k_split(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t split, d;
    if (self->ndim == 0) {
        PyErr_SetString(PyExc_RuntimeError, "split(): split expects at least a 1-dimensional "
                        "tensor");
        return NULL;
    }
    if (em_int_arg(args[1], &split) < 0 || em_dim_arg(args[2], self->ndim, &d) < 0)
        return NULL;
    if (split < 0) {
        PyErr_Format(PyExc_RuntimeError, "split(): split expects split_size be non-negative, "
                     "but got split_size=%zd", split);
        return NULL;
    }
    if (split == 0 && self->sizes[d] != 0) {
        PyErr_Format(PyExc_RuntimeError, "split(): split_size can only be 0 if dimension size "
                     "is 0, but got dimension size of %zd", self->sizes[d]);
        return NULL;
    }
    return split_even(args[0], d, split);
}

/* split(self, split_sizes, dim=0) / split_with_sizes */
static PyObject *
k_split_with_sizes(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t n = PyTuple_GET_SIZE(args[1]), d, total = 0;
    if (self->ndim == 0) {
        PyErr_SetString(PyExc_RuntimeError, "split_with_sizes(): split expects at least a "
                        "1-dimensional tensor");
        return NULL;
    }
    if (em_dim_arg(args[2], self->ndim, &d) < 0)
        return NULL;
    Py_ssize_t *lengths = PyMem_Malloc(sizeof(Py_ssize_t) * (n ? n : 1));
    if (lengths == NULL)
        return PyErr_NoMemory();
    bool negative = false;
    for (Py_ssize_t i = 0; i < n; i++) {
        lengths[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(args[1], i));
        negative |= lengths[i] < 0;
        total += lengths[i];
    }
    PyObject *r = NULL;
    if (PyErr_Occurred())
        ;
    else if (negative)
        PyErr_Format(PyExc_RuntimeError, "split_with_sizes(): split_with_sizes expects "
                     "split_sizes have only non-negative entries, but got split_sizes=%s",
                     em_shape_s((int)n, lengths));
    else if (total != self->sizes[d])
        PyErr_Format(PyExc_RuntimeError, "split_with_sizes(): split_with_sizes expects "
                     "split_sizes to sum exactly to %zd (input tensor's size at dimension "
                     "%zd), but got split_sizes=%s", self->sizes[d], d,
                     em_shape_s((int)n, lengths));
    else
        r = slices_of(args[0], d, lengths, n);
    PyMem_Free(lengths);
    return r;
}

/* chunk(self, chunks, dim=0) */
static PyObject *
k_chunk(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t chunks, d;
    if (self->ndim == 0) {
        PyErr_SetString(PyExc_RuntimeError, "chunk(): chunk expects at least a 1-dimensional "
                        "tensor");
        return NULL;
    }
    if (em_int_arg(args[1], &chunks) < 0 || em_dim_arg(args[2], self->ndim, &d) < 0)
        return NULL;
    if (chunks <= 0) {
        PyErr_Format(PyExc_RuntimeError, "chunk(): chunk expects `chunks` to be greater than 0, "
                     "got: %zd", chunks);
        return NULL;
    }
    Py_ssize_t size = self->sizes[d], split = (size + chunks - 1) / chunks;
    if (split == 0 && size == 0) {
        Py_ssize_t *lengths = PyMem_Calloc(chunks, sizeof(Py_ssize_t));
        if (lengths == NULL)
            return PyErr_NoMemory();
        PyObject *r = slices_of(args[0], d, lengths, chunks);
        PyMem_Free(lengths);
        return r;
    }
    return split_even(args[0], d, split);
}

/* unbind(self, dim=0): the selects along dim */
static PyObject *
k_unbind(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t d;
    if (self->ndim == 0) {
        PyErr_SetString(PyExc_IndexError, "unbind(): Dimension specified as 0 but tensor has "
                        "no dimensions");
        return NULL;
    }
    if (em_dim_arg(args[1], self->ndim, &d) < 0)
        return NULL;
    Py_ssize_t n = self->sizes[d];
    PyObject *out = PyTuple_New(n), *pd = PyLong_FromSsize_t(d);
    for (Py_ssize_t i = 0; out != NULL && pd != NULL && i < n; i++) {
        PyObject *pi = PyLong_FromSsize_t(i);
        PyObject *a[3] = {args[0], pd, pi};
        PyObject *s = pi ? em_call_op(EM_OP_SELECT, a, 3, NULL) : NULL;
        Py_XDECREF(pi);
        if (s == NULL)
            Py_CLEAR(out);
        else
            PyTuple_SET_ITEM(out, i, s);
    }
    if (pd == NULL)
        Py_CLEAR(out);
    Py_XDECREF(pd);
    return out;
}

/* ------------------------------------------------------------------ reshaping */

/* flatten(self, start_dim=0, end_dim=-1) */
static PyObject *
k_flatten(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t s, e;
    if (em_dim_arg(args[1], self->ndim, &s) < 0 || em_dim_arg(args[2], self->ndim, &e) < 0)
        return NULL;
    if (self->ndim == 0) {
        Py_ssize_t one = 1;
        return call_ints(EM_OP_RESHAPE, args[0], &one, 1);
    }
    if (s > e) {
        PyErr_SetString(PyExc_RuntimeError, "flatten(): flatten() has invalid args: start_dim "
                        "cannot come after end_dim");
        return NULL;
    }
    if (s == e) {
        Py_INCREF(self);
        return (PyObject *)self;
    }
    Py_ssize_t shape[EM_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < s; i++)
        shape[n++] = self->sizes[i];
    Py_ssize_t merged = 1;
    for (Py_ssize_t i = s; i <= e; i++)
        merged *= self->sizes[i];
    shape[n++] = merged;
    for (int i = (int)e + 1; i < self->ndim; i++)
        shape[n++] = self->sizes[i];
    return call_ints(EM_OP_RESHAPE, args[0], shape, n);
}

/* unflatten(self, dim, sizes) */
static PyObject *
k_unflatten(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t d, sizes[EM_MAX_DIMS], shape[EM_MAX_DIMS];
    int ns;
    if (em_dim_arg(args[1], self->ndim, &d) < 0 ||
        em_int_list(args[2], sizes, &ns, EM_MAX_DIMS) < 0)
        return NULL;
    if (ns == 0) {
        PyErr_SetString(PyExc_RuntimeError, "unflatten(): unflatten: sizes must be non-empty");
        return NULL;
    }
    Py_ssize_t size = self->ndim ? self->sizes[d] : 1, known = 1;
    int infer = -1;
    for (int i = 0; i < ns; i++) {
        if (sizes[i] == -1) {
            if (infer >= 0) {
                PyErr_SetString(PyExc_RuntimeError, "unflatten(): only one dimension can be "
                                "inferred");
                return NULL;
            }
            infer = i;
        }
        else {
            known *= sizes[i];
        }
    }
    if (infer >= 0 && known != 0 && size % known == 0)
        sizes[infer] = size / known;
    else if (infer >= 0 || known != size) {
        if (infer >= 0)
            sizes[infer] = -1;
        return PyErr_Format(PyExc_RuntimeError, "unflatten(): unflatten: Provided sizes %s "
                            "don't multiply up to the size of dim %zd (%zd) in the input "
                            "tensor", em_shape_s(ns, sizes), d, size);
    }
    if (em_check_ndim("unflatten", self->ndim + ns - 1) < 0)
        return NULL;
    int n = 0;
    for (int i = 0; i < self->ndim; i++) {
        if (i == d)
            for (int k = 0; k < ns; k++)
                shape[n++] = sizes[k];
        else
            shape[n++] = self->sizes[i];
    }
    if (self->ndim == 0)
        for (int k = 0; k < ns; k++)
            shape[n++] = sizes[k];
    return call_ints(EM_OP_VIEW, args[0], shape, n);
}

/* Reads an int[1] argument (tuple) of dims, wrapped. */
static int
dims_of(PyObject *tup, int ndim, Py_ssize_t *out, int *n)
{
    if (em_int_list(tup, out, n, EM_MAX_DIMS) < 0)
        return -1;
    for (int i = 0; i < *n; i++)
        if (em_wrap_dim(&out[i], ndim) < 0)
            return -1;
    return 0;
}

/* movedim(self, source, destination) */
static PyObject *
k_movedim(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t src[EM_MAX_DIMS], dst[EM_MAX_DIMS], raw[EM_MAX_DIMS];
    int ns, nd, nr;
    if (em_int_list(args[1], src, &ns, EM_MAX_DIMS) < 0 ||
        em_int_list(args[2], dst, &nd, EM_MAX_DIMS) < 0)
        return NULL;
    if (ns != nd)
        return PyErr_Format(PyExc_RuntimeError, "movedim(): movedim: Invalid source or "
                            "destination dims: source (%s dims) should contain the same number "
                            "of dims as destination (%s dims)", em_shape_s(ns, src),
                            em_shape_s(nd, dst));
    for (int which = 0; which < 2; which++) {
        PyObject *tup = args[1 + which];
        Py_ssize_t *v = which ? dst : src;
        if (em_int_list(tup, raw, &nr, EM_MAX_DIMS) < 0 || dims_of(tup, self->ndim, v, &nr) < 0)
            return NULL;
        for (int i = 0; i < nr; i++)
            for (int j = 0; j < i; j++)
                if (v[i] == v[j])
                    return PyErr_Format(PyExc_RuntimeError, "movedim(): movedim: repeated "
                                        "dim in `%s` (%s)", which ? "destination" : "source",
                                        em_shape_s(nr, raw));
    }
    int nd_ = self->ndim > 0 ? self->ndim : 0;
    Py_ssize_t perm[EM_MAX_DIMS];
    bool used_src[EM_MAX_DIMS] = {false}, used_dst[EM_MAX_DIMS] = {false};
    for (int i = 0; i < nd_; i++)
        perm[i] = -1;
    for (int i = 0; i < ns && nd_ > 0; i++) {
        perm[dst[i]] = src[i];
        used_src[src[i]] = true;
        used_dst[dst[i]] = true;
    }
    for (int i = 0, s = 0; i < nd_; i++) {
        if (used_dst[i])
            continue;
        while (used_src[s])
            s++;
        perm[i] = s++;
    }
    return call_ints(EM_OP_PERMUTE, args[0], perm, nd_);
}

/* narrow(self, dim, start, length) */
static PyObject *
k_narrow(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t d, start, length;
    if (self->ndim == 0) {
        PyErr_SetString(PyExc_RuntimeError, "narrow(): narrow() cannot be applied to a 0-dim "
                        "tensor.");
        return NULL;
    }
    if (em_dim_arg(args[1], self->ndim, &d) < 0 || em_int_arg(args[2], &start) < 0 ||
        em_int_arg(args[3], &length) < 0)
        return NULL;
    if (length < 0) {
        PyErr_SetString(PyExc_RuntimeError, "narrow(): length must be non-negative.");
        return NULL;
    }
    Py_ssize_t size = self->sizes[d];
    if (start < -size || start > size) {
        PyErr_Format(PyExc_IndexError, "narrow(): start out of range (expected to be in range "
                     "of [%zd, %zd], but got %zd)", -size, size, start);
        return NULL;
    }
    if (start < 0)
        start += size;
    if (start + length > size) {
        PyErr_Format(PyExc_RuntimeError, "narrow(): start (%zd) + length (%zd) exceeds "
                     "dimension size (%zd).", start, length, size);
        return NULL;
    }
    return call_slice(args[0], d, start, start + length);
}

/* narrow_copy(self, dim, start, length): a contiguous copy of narrow */
static PyObject *
k_narrow_copy(em_Op *op, PyObject **args)
{
    PyObject *v = k_narrow(op, args);
    if (v == NULL)
        return NULL;
    PyObject *r = em_call_op(EM_OP_CONTIGUOUS, &v, 1, NULL);
    if (r == v) {   /* already contiguous: still a copy */
        Py_DECREF(r);
        r = em_call_op(EM_OP_CLONE, &v, 1, NULL);
    }
    Py_DECREF(v);
    return r;
}

static PyObject *
call_with_shape_of(int id, PyObject *self, PyObject *other)
{
    em_Tensor *o = (em_Tensor *)other;
    return call_ints(id, self, o->sizes, o->ndim);
}

static PyObject *
k_view_as(em_Op *op, PyObject **args)
{
    return call_with_shape_of(EM_OP_VIEW, args[0], args[1]);
}

static PyObject *
k_reshape_as(em_Op *op, PyObject **args)
{
    return call_with_shape_of(EM_OP_RESHAPE, args[0], args[1]);
}

static PyObject *
k_expand_as(em_Op *op, PyObject **args)
{
    return call_with_shape_of(EM_OP_EXPAND, args[0], args[1]);
}

/* repeat(self, repeats): reshape to [1, s0, 1, s1, ...], expand to [r0, s0, r1, s1, ...],
 * reshape to [r0 * s0, ...] (a copy). To stay within EM_MAX_DIMS working dims, a dim
 * gets its own repeat dim only when both its size and its repeat exceed 1 (a size-1 dim
 * is expanded in place), and runs of dims repeated once are merged into one, so 64-dim
 * tensors repeat too. */
static PyObject *
repeat_impl(PyObject *selfo, const Py_ssize_t *reps, int n)
{
    em_Tensor *self = (em_Tensor *)selfo;
    if (n < self->ndim) {
        PyErr_SetString(PyExc_RuntimeError, "repeat(): Number of dimensions of repeat dims can "
                        "not be smaller than number of dimensions of tensor");
        return NULL;
    }
    Py_ssize_t shape[EM_MAX_DIMS], big[EM_MAX_DIMS], target[EM_MAX_DIMS];
    bool ones = true;
    int off = n - self->ndim, m = 0;
    bool run = false;            /* the last working dim is a run of dims repeated once */
    for (int i = 0; i < n; i++) {
        Py_ssize_t s = i < off ? 1 : self->sizes[i - off];
        target[i] = s * reps[i];
        if (reps[i] < 0)
            return PyErr_Format(PyExc_RuntimeError, "repeat(): Trying to create tensor with "
                                "negative dimension: %s", em_shape_s(n, target));
        if (reps[i] == 1 && run) {
            shape[m - 1] *= s;
            big[m - 1] *= s;
            continue;
        }
        run = reps[i] == 1;
        bool own = s != 1 && reps[i] != 1;     /* [r, s]; else one dim [r * s] */
        if (m + 1 + own > EM_MAX_DIMS) {
            PyErr_Format(PyExc_RuntimeError, "repeat(): at most %d dimensions are supported, "
                         "and repeating this tensor's dims of size above 1 needs more",
                         EM_MAX_DIMS);
            return NULL;
        }
        if (own) {
            shape[m] = 1;
            big[m++] = reps[i];
        }
        shape[m] = s;
        big[m++] = own ? s : s * reps[i];
        ones &= reps[i] == 1;
    }
    PyObject *v = call_ints(EM_OP_RESHAPE, selfo, shape, m);
    PyObject *e = v ? call_ints(EM_OP_EXPAND, v, big, m) : NULL;
    Py_XDECREF(v);
    PyObject *r = e ? call_ints(EM_OP_RESHAPE, e, target, n) : NULL;
    Py_XDECREF(e);
    if (r != NULL && (ones || ((em_Tensor *)r)->storage == self->storage)) {
        /* nothing was repeated: reshape returned a view; repeat always copies */
        Py_SETREF(r, em_clone_contiguous(r));
    }
    return r;
}

static PyObject *
k_repeat(em_Op *op, PyObject **args)
{
    Py_ssize_t reps[EM_MAX_DIMS];
    int n;
    if (em_int_list(args[1], reps, &n, EM_MAX_DIMS) < 0)
        return NULL;
    return repeat_impl(args[0], reps, n);
}

/* tile(self, dims): repeat with dims padded with leading ones */
static PyObject *
k_tile(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t reps[EM_MAX_DIMS], padded[EM_MAX_DIMS];
    int n;
    if (em_int_list(args[1], reps, &n, EM_MAX_DIMS) < 0)
        return NULL;
    int m = n < self->ndim ? self->ndim : n;
    for (int i = 0; i < m; i++)
        padded[i] = i < m - n ? 1 : reps[i - (m - n)];
    return repeat_impl(args[0], padded, m);
}

/* Tensor.T: all dims reversed */
static PyObject *
k_numpy_T(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t perm[EM_MAX_DIMS];
    for (int i = 0; i < self->ndim; i++)
        perm[i] = self->ndim - 1 - i;
    return call_ints(EM_OP_PERMUTE, args[0], perm, self->ndim);
}

/* Tensor.mT: the last two dims swapped */
static PyObject *
k_mT(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    if (self->ndim < 2) {
        PyErr_Format(PyExc_RuntimeError, "tensor.mT is only supported on matrices or batches "
                     "of matrices. Got %d-D tensor.", self->ndim);
        return NULL;
    }
    PyObject *a[3] = {args[0], PyLong_FromLong(-2), PyLong_FromLong(-1)};
    PyObject *r = (a[1] && a[2]) ? em_call_op(EM_OP_TRANSPOSE, a, 3, NULL) : NULL;
    Py_XDECREF(a[1]);
    Py_XDECREF(a[2]);
    return r;
}

/* ------------------------------------------------------------------ flip, roll */

/* Reads dims, wrapped; duplicates are PyTorch's RuntimeError. */
static int
unique_dims(em_Op *op, PyObject *tup, int ndim, Py_ssize_t *dims, int *n)
{
    if (dims_of(tup, ndim, dims, n) < 0)
        return -1;
    for (int i = 0; i < *n; i++)
        for (int j = 0; j < i; j++)
            if (dims[i] == dims[j]) {
                PyErr_Format(PyExc_RuntimeError, "%U(): dim %zd appears multiple times in the "
                             "list of dims", op->name, dims[i]);
                return -1;
            }
    return 0;
}

/* flip(self, dims): a copy (self's layout) read through a reversed view */
static PyObject *
k_flip(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t dims[EM_MAX_DIMS];
    int n;
    if (unique_dims(op, args[1], self->ndim, dims, &n) < 0)
        return NULL;
    bool meta = em_meta_of(self);
    em_Tensor *out = em_empty_like(self, self->dtype, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    PyArrayObject *src = self->array;
    Py_INCREF(src);
    for (int i = 0; i < n && self->ndim > 0; i++) {
        PyArrayObject *f = em_flip_view(src, (int)dims[i]);
        Py_DECREF(src);
        if ((src = f) == NULL) {
            Py_DECREF(out);
            return NULL;
        }
    }
    int st = PyArray_CopyInto(out->array, src);
    Py_DECREF(src);
    if (st < 0)
        Py_CLEAR(out);
    return (PyObject *)out;
}

/* A NumPy view arr[..., start:stop, ...] along d. */
static PyArrayObject *
np_slice(PyArrayObject *arr, int d, Py_ssize_t start, Py_ssize_t stop)
{
    int nd = PyArray_NDIM(arr);
    npy_intp dims[EM_MAX_DIMS];
    memcpy(dims, PyArray_DIMS(arr), sizeof(npy_intp) * nd);
    dims[d] = stop - start;
    return em_array_view(arr, nd, dims, PyArray_STRIDES(arr),
                         PyArray_BYTES(arr) + start * PyArray_STRIDES(arr)[d]);
}

/* dst[..., at:at + (stop - start), ...] = src[..., start:stop, ...] along d */
static int
copy_range(PyArrayObject *dst, Py_ssize_t at, PyArrayObject *src, int d, Py_ssize_t start,
           Py_ssize_t stop)
{
    if (stop <= start)
        return 0;
    PyArrayObject *a = np_slice(dst, d, at, at + stop - start);
    PyArrayObject *b = a ? np_slice(src, d, start, stop) : NULL;
    int st = b ? PyArray_CopyInto(a, b) : -1;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return st;
}

/* roll(self, shifts, dims=[]) */
static PyObject *
k_roll(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t shifts[EM_MAX_DIMS], dims[EM_MAX_DIMS];
    int ns, nd;
    if (em_int_list(args[1], shifts, &ns, EM_MAX_DIMS) < 0 ||
        em_int_list(args[2], dims, &nd, EM_MAX_DIMS) < 0)
        return NULL;
    if (nd == 0 && ns != 1) {
        if (ns == 0)
            PyErr_SetString(PyExc_RuntimeError, "roll(): `shifts` required");
        else
            PyErr_Format(PyExc_RuntimeError, "roll(): shifts and dimensions must align. "
                         "shifts: %d, dims:0", ns);
        return NULL;
    }
    if (nd > 0 && ns != nd) {
        PyErr_Format(PyExc_RuntimeError, "roll(): shifts and dimensions must align. shifts: "
                     "%d, dims:%d", ns, nd);
        return NULL;
    }
    if (nd > 0 && self->ndim == 0) {
        PyErr_SetString(PyExc_IndexError, "roll(): Dimension specified as 0 but tensor has no "
                        "dimensions");
        return NULL;
    }
    for (int i = 0; i < nd; i++)
        if (em_wrap_dim(&dims[i], self->ndim) < 0)
            return NULL;
    bool meta = em_meta_of(self);
    em_Tensor *out = em_empty(self->ndim, self->sizes, self->dtype, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    PyArrayObject *cur;
    if (nd == 0) {   /* the flattened tensor, shifted, in C order */
        em_Tensor *c = em_tensor_contiguous(self);
        if (c == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyArray_Dims flat = {(npy_intp *)&self->numel, 1};
        cur = (PyArrayObject *)PyArray_Newshape(c->array, &flat, NPY_CORDER);
        Py_DECREF(c);
        dims[0] = 0;
        nd = 1;
    }
    else {
        cur = self->array;
        Py_INCREF(cur);
    }
    int st = cur ? 0 : -1;
    for (int i = 0; st == 0 && i < nd; i++) {
        int d = (int)dims[i];
        Py_ssize_t n = PyArray_DIMS(cur)[d], s = n ? ((shifts[i] % n) + n) % n : 0;
        PyArrayObject *next = (PyArrayObject *)PyArray_NewLikeArray(cur, NPY_CORDER, NULL, 0);
        if (next == NULL) {
            st = -1;
            break;
        }
        st = copy_range(next, s, cur, d, 0, n - s);
        if (st == 0)
            st = copy_range(next, 0, cur, d, n - s, n);
        Py_DECREF(cur);
        cur = next;
    }
    if (st == 0) {
        PyArray_Dims shape = {(npy_intp *)self->sizes, self->ndim};
        PyObject *v = PyArray_Newshape(cur, &shape, NPY_CORDER);
        st = v ? PyArray_CopyInto(out->array, (PyArrayObject *)v) : -1;
        Py_XDECREF(v);
    }
    Py_XDECREF(cur);
    if (st < 0)
        Py_CLEAR(out);
    return (PyObject *)out;
}

/* ------------------------------------------------------------------ pad */

typedef enum { PAD_CONSTANT, PAD_REFLECT, PAD_REPLICATE, PAD_CIRCULAR } pad_mode;

/* pad(self, pad, mode="constant", value=None): torch.nn.functional.pad */
static PyObject *
k_pad(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    Py_ssize_t pad[2 * EM_MAX_DIMS], sizes[EM_MAX_DIMS];
    int np_;
    if (em_int_list(args[1], pad, &np_, 2 * EM_MAX_DIMS) < 0)
        return NULL;
    const char *mode_s = PyUnicode_AsUTF8(args[2]);
    if (mode_s == NULL)
        return NULL;
    if (np_ % 2) {
        PyErr_SetString(PyExc_RuntimeError, "pad(): Padding length must be divisible by 2");
        return NULL;
    }
    int k = np_ / 2;
    if (k > self->ndim) {
        PyErr_Format(PyExc_RuntimeError, "pad(): Padding length should be less than or equal "
                     "to two times the input dimension but got padding length %d and input of "
                     "dimension %d", np_, self->ndim);
        return NULL;
    }
    pad_mode mode;
    if (strcmp(mode_s, "constant") == 0)
        mode = PAD_CONSTANT;
    else if (strcmp(mode_s, "reflect") == 0)
        mode = PAD_REFLECT;
    else if (strcmp(mode_s, "replicate") == 0)
        mode = PAD_REPLICATE;
    else if (strcmp(mode_s, "circular") == 0)
        mode = PAD_CIRCULAR;
    else {
        PyErr_Format(PyExc_NotImplementedError, "pad(): Unrecognised padding mode %s", mode_s);
        return NULL;
    }
    if (mode != PAD_CONSTANT) {
        if (args[3] != Py_None) {
            PyErr_Format(PyExc_RuntimeError, "pad(): Padding mode \"%s\" doesn't take in value "
                         "argument", mode_s);
            return NULL;
        }
        if (k < 1 || k > 3 || (self->ndim != k + 1 && self->ndim != k + 2)) {
            PyErr_Format(PyExc_NotImplementedError, "pad(): Padding size %d is not supported "
                         "for %dD input tensor.", np_, self->ndim);
            return NULL;
        }
        if (mode != PAD_CIRCULAR && self->dtype == EM_BOOL) {
            PyErr_Format(PyExc_NotImplementedError, "pad(): \"%s_pad%dd\" not implemented for "
                         "'Bool'", mode == PAD_REFLECT ? "reflection" : "replication", k);
            return NULL;
        }
    }
    memcpy(sizes, self->sizes, sizeof(Py_ssize_t) * self->ndim);
    for (int i = 0; i < k; i++) {
        int d = self->ndim - 1 - i;
        Py_ssize_t n = self->sizes[d], lo = pad[2 * i], hi = pad[2 * i + 1];
        if (mode == PAD_REFLECT && (lo >= n || hi >= n))
            return PyErr_Format(PyExc_RuntimeError, "pad(): Argument #4: Padding size should "
                                "be less than the corresponding input dimension, but got: "
                                "padding (%zd, %zd) at dimension %d of input %s", lo, hi, d,
                                em_tshape(self));
        if (mode == PAD_REPLICATE && n == 0)
            return PyErr_Format(PyExc_RuntimeError, "pad(): Expected a tensor with non-zero "
                                "sizes in the padded dims, but got: %s", em_tshape(self));
        if (mode == PAD_CIRCULAR && (lo > n || hi > n)) {
            PyErr_SetString(PyExc_RuntimeError, "pad(): Padding value causes wrapping around "
                            "more than once.");
            return NULL;
        }
        sizes[d] = n + lo + hi;
        if (sizes[d] < 0) {
            PyErr_Format(PyExc_RuntimeError, "pad(): The input size %zd, plus negative padding "
                         "%zd and %zd resulted in a negative output size, which is invalid. "
                         "Check dimension %d of your input.", n, lo, hi, d);
            return NULL;
        }
    }
    bool meta = em_meta_of(self);
    em_Tensor *out = em_empty(self->ndim, sizes, self->dtype, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    int st = 0;
    if (mode == PAD_CONSTANT) {
        PyObject *v = args[3] == Py_None ? PyLong_FromLong(0) : (Py_INCREF(args[3]), args[3]);
        st = v ? PyArray_FillWithScalar(out->array, v) : -1;
        Py_XDECREF(v);
        /* the kept part of self into its place */
        PyArrayObject *src = self->array, *dst = out->array;
        Py_INCREF(src);
        Py_INCREF(dst);
        for (int i = 0; st == 0 && i < k; i++) {
            int d = self->ndim - 1 - i;
            Py_ssize_t n = self->sizes[d], lo = pad[2 * i], hi = pad[2 * i + 1];
            Py_ssize_t s0 = lo < 0 ? -lo : 0, s1 = n - (hi < 0 ? -hi : 0);
            Py_ssize_t at = lo > 0 ? lo : 0;
            if (s1 < s0)
                s1 = s0;
            PyArrayObject *a = np_slice(src, d, s0, s1);
            PyArrayObject *b = a ? np_slice(dst, d, at, at + (s1 - s0)) : NULL;
            Py_DECREF(src);
            Py_DECREF(dst);
            src = a;
            dst = b;
            if (b == NULL)
                st = -1;
        }
        if (st == 0 && PyArray_SIZE(src) > 0)
            st = PyArray_CopyInto(dst, src);
        Py_XDECREF(src);
        Py_XDECREF(dst);
    }
    else {
        PyArrayObject *cur = self->array;
        Py_INCREF(cur);
        for (int i = 0; st == 0 && i < k; i++) {
            int d = self->ndim - 1 - i;
            Py_ssize_t n = self->sizes[d], lo = pad[2 * i], hi = pad[2 * i + 1];
            npy_intp len = n + lo + hi;
            PyArrayObject *idx = (PyArrayObject *)PyArray_SimpleNew(1, &len, NPY_INT64);
            if (idx == NULL) {
                st = -1;
                break;
            }
            npy_int64 *p = (npy_int64 *)PyArray_DATA(idx);
            for (npy_intp j = 0; j < len; j++) {
                Py_ssize_t s = j - lo;
                if (mode == PAD_REFLECT) {
                    s = s < 0 ? -s : s;
                    s = (n - 1) - s;
                    s = (n - 1) - (s < 0 ? -s : s);
                }
                else if (mode == PAD_REPLICATE)
                    s = s < 0 ? 0 : (s > n - 1 ? n - 1 : s);
                else
                    s = s < 0 ? s + n : (s >= n ? s - n : s);
                p[j] = s;
            }
            PyObject *next = PyArray_TakeFrom(cur, (PyObject *)idx, d, NULL, NPY_RAISE);
            Py_DECREF(idx);
            Py_DECREF(cur);
            cur = (PyArrayObject *)next;
            if (cur == NULL)
                st = -1;
        }
        if (st == 0)
            st = PyArray_CopyInto(out->array, cur);
        Py_XDECREF(cur);
    }
    if (st < 0)
        Py_CLEAR(out);
    return (PyObject *)out;
}

const em_KernelEntry em_shape_kernels[] = {
    {"cat", k_cat},
    {"stack", k_stack},
    {"hstack", k_hstack},
    {"vstack", k_vstack},
    {"split", k_split},
    {"split_with_sizes", k_split_with_sizes},
    {"chunk", k_chunk},
    {"unbind", k_unbind},
    {"flatten", k_flatten},
    {"unflatten", k_unflatten},
    {"movedim", k_movedim},
    {"narrow", k_narrow},
    {"narrow_copy", k_narrow_copy},
    {"view_as", k_view_as},
    {"reshape_as", k_reshape_as},
    {"expand_as", k_expand_as},
    {"repeat", k_repeat},
    {"tile", k_tile},
    {"numpy_T", k_numpy_T},
    {"mT", k_mT},
    {"flip", k_flip},
    {"roll", k_roll},
    {"pad", k_pad},
    {NULL, NULL},
};
