/* indexing.c: advanced indexing (index, index_put), nonzero, gather, the scatter
 * family, index_select, index_add, masked_fill and masked_select, and the C composites
 * nonzero(as_tuple=...), argwhere and where(condition).
 *
 * index / index_put follow PyTorch: bool masks become the index tensors of their
 * non-zero positions, the index tensors broadcast together, and the broadcast shape
 * replaces the indexed dims where they are adjacent (else it goes first). The result
 * is laid out as TensorIterator lays out self restrided over the indices. Values are
 * computed by NumPy's fancy indexing on the index arrays (after PyTorch's checks).
 */
#include "kutil.h"

/* ------------------------------------------------------------------ the index plan */

typedef struct {
    int dim;                        /* the dim of self it indexes */
    int ndim;
    Py_ssize_t sizes[EM_MAX_DIMS];
    Py_ssize_t strides[EM_MAX_DIMS];
    PyArrayObject *arr;             /* int64 values (NULL for meta) */
} IdxEnt;

typedef struct {
    int n;                          /* defined entries */
    int span;                       /* dims of self the indices cover */
    bool masks;                     /* some came from bool masks */
    IdxEnt ent[EM_MAX_DIMS];
    int bnd;
    Py_ssize_t bshape[EM_MAX_DIMS];
    em_Geom out;                    /* the result's geometry */
    PyArrayObject *mask;            /* the only index is this mask: NumPy takes it as is */
    int mask_dim;
} Plan;

static void
plan_clear(Plan *p)
{
    for (int k = 0; k < p->n; k++)
        Py_CLEAR(p->ent[k].arr);
    Py_CLEAR(p->mask);
    p->n = 0;
}

/* 1 with *bad the first value of the integer index array idx outside [lo, size), 0 when
 * there is none, -1 with an error. */
static int
out_of_range(PyArrayObject *idx, Py_ssize_t lo, Py_ssize_t size, long long *bad)
{
    PyArrayObject *c = (PyArrayObject *)PyArray_FROM_OTF((PyObject *)idx, NPY_INT64,
                                                         NPY_ARRAY_CARRAY_RO);
    if (c == NULL)
        return -1;
    const npy_int64 *v = (const npy_int64 *)PyArray_DATA(c);
    int r = 0;
    for (npy_intp i = 0, n = PyArray_SIZE(c); r == 0 && i < n; i++)
        if (v[i] < lo || v[i] >= size) {
            *bad = (long long)v[i];
            r = 1;
        }
    Py_DECREF(c);
    return r;
}

/* index (a vector, or 0-d) as a 1-D int64 array. */
static PyObject *
flat_index(em_Tensor *index)
{
    PyObject *iv = PyArray_FROM_OTF((PyObject *)index->array, NPY_INT64, NPY_ARRAY_CARRAY_RO);
    npy_intp n = index->numel;
    PyArray_Dims flat = {&n, 1};
    PyObject *r = iv ? PyArray_Newshape((PyArrayObject *)iv, &flat, NPY_CORDER) : NULL;
    Py_XDECREF(iv);
    return r;
}

/* -1 with PyTorch's error unless index is int64 or int32. */
static int
check_index_dtype(const char *name, em_Tensor *index)
{
    if (index->dtype == EM_INT64 || index->dtype == EM_INT32)
        return 0;
    PyErr_Format(PyExc_RuntimeError, "%s(): Expected dtype int32 or int64 for index", name);
    return -1;
}

/* Whether o (a sequence of Tensors and None) holds exactly one tensor. */
static bool
sole_tensor(PyObject *seq)
{
    int n = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++)
        n += PySequence_Fast_GET_ITEM(seq, i) != Py_None;
    return n == 1;
}

static int
add_entry(Plan *p, int dim, int ndim, const Py_ssize_t *sizes, const Py_ssize_t *strides,
          PyArrayObject *arr)
{
    if (p->n >= EM_MAX_DIMS) {
        Py_XDECREF(arr);
        PyErr_SetString(PyExc_IndexError, "too many indices");
        return -1;
    }
    IdxEnt *e = &p->ent[p->n++];
    e->dim = dim;
    e->ndim = ndim;
    memcpy(e->sizes, sizes, sizeof(Py_ssize_t) * ndim);
    memcpy(e->strides, strides, sizeof(Py_ssize_t) * ndim);
    e->arr = arr;   /* steals */
    return 0;
}

/* Parses indices (a sequence of Tensors and None) for self. With compute, masks become
 * index arrays; without (meta), a mask is an error unless allow_masks (index_put, whose
 * result shape does not depend on it). */
static int
plan_parse(const char *name, em_Tensor *self, PyObject *indices, bool compute,
           bool allow_masks, Plan *p)
{
    p->n = 0;
    p->masks = false;
    p->mask = NULL;
    PyObject *seq = PySequence_Fast(indices, "indices must be a tuple of Tensors or None");
    if (seq == NULL)
        return -1;
    bool sole = sole_tensor(seq);
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    int cursor = 0;
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        if (o == Py_None) {
            cursor++;
        }
        else if (em_Tensor_Check(o)) {
            em_Tensor *t = (em_Tensor *)o;
            if (t->dtype == EM_BOOL || t->dtype == EM_UINT8) {
                if (t->ndim == 0) {
                    PyErr_Format(PyExc_IndexError, "%s(): a 0-dim boolean index is only "
                                 "supported in x[...] indexing", name);
                    goto error;
                }
                for (int k = 0; k < t->ndim; k++) {
                    if (cursor + k >= self->ndim || t->sizes[k] != self->sizes[cursor + k]) {
                        PyErr_Format(PyExc_IndexError, "%s(): The shape of the mask %s at "
                                     "index %d does not match the shape of the indexed tensor "
                                     "%s at index %d", name, em_tshape(t), k, em_tshape(self),
                                     cursor + k);
                        goto error;
                    }
                }
                p->masks = true;
                if (!compute) {
                    if (!allow_masks) {
                        PyErr_Format(PyExc_NotImplementedError,
                                     "%s(): boolean mask indices give a result whose shape "
                                     "depends on the mask's values, which meta tensors do not "
                                     "have", name);
                        goto error;
                    }
                    cursor += t->ndim;
                    continue;
                }
                PyArrayObject *m = t->array;
                if (sole) {
                    /* the mask alone: its true count is all the geometry needs, and
                     * NumPy indexes with it directly (no nonzero arrays) */
                    Py_ssize_t cnt = PyArray_CountNonzero(m), one = 1;
                    if (cnt < 0)
                        goto error;
                    for (int k = 0; k < t->ndim; k++)
                        if (add_entry(p, cursor + k, 1, &cnt, &one, NULL) < 0)
                            goto error;
                    /* (a uint8 mask is a mask; NumPy would read it as indices) */
                    p->mask = t->dtype == EM_BOOL ? (Py_INCREF(m), m)
                              : (PyArrayObject *)PyArray_FROM_OTF((PyObject *)m, NPY_BOOL,
                                                                  NPY_ARRAY_FORCECAST);
                    if (p->mask == NULL)
                        goto error;
                    p->mask_dim = cursor;
                    cursor += t->ndim;
                    continue;
                }
                PyObject *nz = PyArray_Nonzero(m);
                if (nz == NULL)
                    goto error;
                for (int k = 0; k < t->ndim; k++) {
                    PyArrayObject *a = (PyArrayObject *)PyArray_FROM_OTF(
                        PyTuple_GET_ITEM(nz, k), NPY_INT64, NPY_ARRAY_CARRAY);
                    Py_ssize_t one = 1;
                    Py_ssize_t n = a ? PyArray_DIMS(a)[0] : 0;
                    if (a == NULL || add_entry(p, cursor + k, 1, &n, &one, a) < 0) {
                        Py_DECREF(nz);
                        goto error;
                    }
                }
                Py_DECREF(nz);
                cursor += t->ndim;
            }
            else if (t->dtype == EM_INT64 || t->dtype == EM_INT32) {
                PyArrayObject *a = NULL;
                if (compute) {
                    a = t->dtype == EM_INT64 ? (Py_INCREF(t->array), t->array)
                        : (PyArrayObject *)PyArray_FROM_OTF((PyObject *)t->array, NPY_INT64,
                                                            NPY_ARRAY_ALIGNED);
                    if (a == NULL)
                        goto error;
                }
                if (add_entry(p, cursor, t->ndim, t->sizes, t->strides, a) < 0)
                    goto error;
                cursor++;
            }
            else {
                PyErr_Format(PyExc_IndexError, "%s(): tensors used as indices must be long, "
                             "int, byte or bool tensors", name);
                goto error;
            }
        }
        else {
            PyErr_Format(PyExc_TypeError, "%s(): expected a Tensor or None in indices, got %s",
                         name, Py_TYPE(o)->tp_name);
            goto error;
        }
        if (cursor > self->ndim) {
            PyErr_Format(PyExc_IndexError, "%s(): too many indices for tensor of dimension %d "
                         "(got %d)", name, self->ndim, cursor);
            goto error;
        }
    }
    p->span = cursor;
    Py_DECREF(seq);
    return 0;
error:
    Py_DECREF(seq);
    plan_clear(p);
    return -1;
}

/* The broadcast shape of the index entries; IndexError as PyTorch words it. */
static int
plan_broadcast(const char *name, Plan *p)
{
    int nd = 0;
    for (int k = 0; k < p->n; k++)
        nd = p->ent[k].ndim > nd ? p->ent[k].ndim : nd;
    p->bnd = nd;
    for (int i = 0; i < nd; i++)
        p->bshape[i] = 1;
    for (int k = 0; k < p->n; k++) {
        IdxEnt *e = &p->ent[k];
        int off = nd - e->ndim;
        for (int i = 0; i < e->ndim; i++) {
            Py_ssize_t s = e->sizes[i], *o = &p->bshape[off + i];
            if (s == *o || s == 1)
                continue;
            if (*o == 1) {
                *o = s;
                continue;
            }
            PyObject *shapes = PyUnicode_FromString("");
            for (int j = 0; shapes != NULL && j < p->n; j++)
                Py_SETREF(shapes, PyUnicode_FromFormat("%U%s%s", shapes, j ? ", " : "",
                                                       em_shape_s(p->ent[j].ndim,
                                                                  p->ent[j].sizes)));
            if (shapes != NULL)
                PyErr_Format(PyExc_IndexError, "%s(): shape mismatch: indexing tensors could "
                             "not be broadcast together with shapes %U", name, shapes);
            Py_XDECREF(shapes);
            return -1;
        }
    }
    return 0;
}

static bool
plan_adjacent(const Plan *p)
{
    for (int k = 1; k < p->n; k++)
        if (p->ent[k].dim != p->ent[0].dim + k)
            return false;
    return true;
}

/* The result geometry of self[indices] (p->out). */
static int
plan_geometry(Plan *p, em_Tensor *self)
{
    bool adj = plan_adjacent(p);
    bool indexed[EM_MAX_DIMS] = {false};
    for (int k = 0; k < p->n; k++)
        indexed[p->ent[k].dim] = true;
    int before[EM_MAX_DIMS], after[EM_MAX_DIMS], nb = 0, na = 0;
    for (int d = 0; d < self->ndim; d++) {
        if (indexed[d])
            continue;
        if (adj && d < p->ent[0].dim)
            before[nb++] = d;
        else
            after[na++] = d;
    }
    int nd = nb + p->bnd + na;
    if (em_check_ndim(NULL, nd) < 0)
        return -1;
    Py_ssize_t (*st)[EM_MAX_DIMS] = PyMem_Malloc(sizeof(*st) * (p->n + 1));
    if (st == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    em_Geom *g = &p->out;
    g->ndim = nd;
    g->dtype = self->dtype;
    for (int i = 0; i < nb; i++) {
        g->sizes[i] = self->sizes[before[i]];
        st[0][i] = self->strides[before[i]];
    }
    for (int i = 0; i < p->bnd; i++) {
        g->sizes[nb + i] = p->bshape[i];
        st[0][nb + i] = 0;
    }
    for (int i = 0; i < na; i++) {
        g->sizes[nb + p->bnd + i] = self->sizes[after[i]];
        st[0][nb + p->bnd + i] = self->strides[after[i]];
    }
    for (int k = 0; k < p->n; k++) {
        IdxEnt *e = &p->ent[k];
        Py_ssize_t *s = st[k + 1];
        for (int i = 0; i < nd; i++)
            s[i] = 0;
        int off = p->bnd - e->ndim;
        for (int i = 0; i < e->ndim; i++)
            s[nb + off + i] = e->sizes[i] == p->bshape[off + i] ? e->strides[i] : 0;
    }
    em_tensoriter_strides(p->n + 1, st, g, true);
    PyMem_Free(st);
    return 0;
}

/* Every index value within [-size, size) of the dim it indexes (IndexError). */
static int
plan_check_bounds(Plan *p, em_Tensor *self)
{
    Py_ssize_t nidx = 1;
    for (int i = 0; i < p->bnd; i++)
        nidx *= p->bshape[i];
    for (int k = 0; k < p->n; k++) {
        IdxEnt *e = &p->ent[k];
        if (e->arr != NULL && self->sizes[e->dim] == 0 && nidx > 0) {
            PyErr_SetString(PyExc_IndexError, "index is out of bounds for dimension with size "
                            "0");
            return -1;
        }
    }
    if (em_geom_numel(&p->out) == 0)
        return 0;   /* nothing is read or written: PyTorch checks nothing more */
    for (int k = 0; k < p->n; k++) {
        Py_ssize_t size = self->sizes[p->ent[k].dim];
        long long bad;
        int r = p->ent[k].arr ? out_of_range(p->ent[k].arr, -size, size, &bad) : 0;
        if (r > 0)   /* (an entry without an array: positions from a mask) */
            PyErr_Format(PyExc_IndexError, "index %lld is out of bounds for dimension %d "
                         "with size %zd", bad, k, size);
        if (r != 0)
            return -1;
    }
    return 0;
}

/* A view of arr broadcast to shape (zero strides where it grows). */
static PyObject *
broadcast_view(PyArrayObject *arr, int nd, const Py_ssize_t *shape)
{
    npy_intp strides[EM_MAX_DIMS];
    int off = nd - PyArray_NDIM(arr);
    for (int i = 0; i < nd; i++) {
        int j = i - off;
        strides[i] = (j < 0 || PyArray_DIMS(arr)[j] != shape[i]) ? 0 : PyArray_STRIDES(arr)[j];
    }
    return (PyObject *)em_array_view(arr, nd, shape, strides, PyArray_BYTES(arr));
}

/* NumPy's key for the plan: slice(None) for unindexed dims, the index arrays broadcast
 * to the common shape (so NumPy and PyTorch place the result dims alike). */
static PyObject *
plan_key(Plan *p)
{
    if (p->mask != NULL) {
        PyObject *key = PyTuple_New(p->mask_dim + 1);
        for (int i = 0; key != NULL && i < p->mask_dim; i++) {
            PyObject *s = PySlice_New(NULL, NULL, NULL);
            if (s == NULL)
                Py_CLEAR(key);
            else
                PyTuple_SET_ITEM(key, i, s);
        }
        if (key != NULL) {
            Py_INCREF(p->mask);
            PyTuple_SET_ITEM(key, p->mask_dim, (PyObject *)p->mask);
        }
        return key;
    }
    int len = 0;
    for (int k = 0; k < p->n; k++)
        len = p->ent[k].dim + 1 > len ? p->ent[k].dim + 1 : len;
    PyObject *key = PyTuple_New(len);
    if (key == NULL)
        return NULL;
    for (int i = 0; i < len; i++) {
        PyObject *s = PySlice_New(NULL, NULL, NULL);
        if (s == NULL) {
            Py_DECREF(key);
            return NULL;
        }
        PyTuple_SET_ITEM(key, i, s);
    }
    for (int k = 0; k < p->n; k++) {
        PyObject *b = broadcast_view(p->ent[k].arr, p->bnd, p->bshape);
        if (b == NULL) {
            Py_DECREF(key);
            return NULL;
        }
        PyObject *old = PyTuple_GET_ITEM(key, p->ent[k].dim);
        PyTuple_SET_ITEM(key, p->ent[k].dim, b);
        Py_DECREF(old);
    }
    return key;
}

static bool
any_meta_in(PyObject *indices)
{
    PyObject *seq = PySequence_Fast(indices, "");
    if (seq == NULL) {
        PyErr_Clear();
        return false;
    }
    bool r = false;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        r |= em_Tensor_Check(o) && em_is_meta((em_Tensor *)o);
    }
    Py_DECREF(seq);
    return r;
}

/* The common gather of self[..., i0, i1, ...]: integer index tensors over adjacent dims
 * that end with self's last, into a C-contiguous out of 4- or 8-byte elements (im2col's
 * decomposition in compiled graphs reads its receptive fields so). Each broadcast index
 * position becomes one byte offset, computed once; then every position of the dims
 * before the indexed ones copies its elements at those offsets. 1 when done, 0 when
 * the plan is not of that form (NumPy's fancy indexing takes it), -1 with an error.
 * Bounds were checked. */
static int
index_gather(const Plan *p, em_Tensor *self, em_Tensor *out)
{
    int nb = p->ent[0].dim;
    size_t item = (size_t)PyArray_ITEMSIZE(out->array);
    if (p->mask != NULL || !plan_adjacent(p) || p->ent[p->n - 1].dim != self->ndim - 1 ||
        (item != 4 && item != 8) || !PyArray_IS_C_CONTIGUOUS(out->array) ||
        out->numel != PyArray_SIZE(out->array) || out->ndim != nb + p->bnd ||
        self->array == NULL)
        return 0;
    for (int k = 0; k < p->n; k++)
        if (p->ent[k].arr == NULL || PyArray_TYPE(p->ent[k].arr) != NPY_INT64 ||
            PyArray_NDIM(p->ent[k].arr) != p->ent[k].ndim)
            return 0;
    Py_ssize_t nidx = 1, nouter = 1;
    for (int i = 0; i < p->bnd; i++)
        nidx *= p->bshape[i];
    for (int i = 0; i < nb; i++)
        nouter *= self->sizes[i];
    Py_ssize_t *off = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(nidx > 0 ? nidx : 1));
    if (off == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t c[EM_MAX_DIMS] = {0};
    for (Py_ssize_t j = 0; j < nidx; j++) {
        Py_ssize_t o = 0;
        for (int k = 0; k < p->n; k++) {
            const IdxEnt *e = &p->ent[k];
            int lead = p->bnd - e->ndim;
            const char *a = PyArray_BYTES(e->arr);
            for (int i = 0; i < e->ndim; i++)
                if (e->sizes[i] != 1)
                    a += c[lead + i] * PyArray_STRIDES(e->arr)[i];
            Py_ssize_t v = (Py_ssize_t)*(const npy_int64 *)a, size = self->sizes[e->dim];
            o += (v < 0 ? v + size : v) * self->strides[e->dim] * (Py_ssize_t)item;
        }
        off[j] = o;
        for (int i = p->bnd - 1; i >= 0 && ++c[i] == p->bshape[i]; i--)
            c[i] = 0;
    }
    /* runs of consecutive source elements (a receptive field's row), copied at once:
     * off[r] and len[r] for r < nruns, in place of the offsets */
    Py_ssize_t *len = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)nidx);
    if (len == NULL) {
        PyMem_Free(off);
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t nruns = 0;
    for (Py_ssize_t j = 0; j < nidx; j++) {
        if (nruns > 0 && off[j] == off[nruns - 1] + len[nruns - 1])
            len[nruns - 1] += (Py_ssize_t)item;
        else {
            off[nruns] = off[j];
            len[nruns++] = (Py_ssize_t)item;
        }
    }
    const char *src = PyArray_BYTES(self->array);
    char *dst = PyArray_BYTES(out->array);
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t oc[EM_MAX_DIMS] = {0};
    for (Py_ssize_t b = 0; b < nouter; b++) {
        const char *base = src;
        for (int i = 0; i < nb; i++)
            base += oc[i] * self->strides[i] * (Py_ssize_t)item;
        for (Py_ssize_t r = 0; r < nruns; r++) {
            memcpy(dst, base + off[r], (size_t)len[r]);
            dst += len[r];
        }
        for (int i = nb - 1; i >= 0 && ++oc[i] == self->sizes[i]; i--)
            oc[i] = 0;
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(len);
    PyMem_Free(off);
    return 1;
}

/* index(self, indices) */
static PyObject *
k_index(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    bool meta = em_meta_of(self) || any_meta_in(args[1]);
    Plan p;
    if (plan_parse("index", self, args[1], !meta, false, &p) < 0)
        return NULL;
    em_Tensor *out = NULL;
    if (p.n == 0) {
        if (PySequence_Size(args[1]) == 0) {
            PyErr_SetString(PyExc_IndexError, "index(): at least one index must be provided");
            return NULL;
        }
        out = em_empty_like(self, self->dtype, meta);
        if (out != NULL && em_copy_into(out, (PyObject *)self) < 0)
            Py_CLEAR(out);
        return (PyObject *)out;
    }
    if (plan_broadcast("index", &p) < 0 || plan_geometry(&p, self) < 0 ||
        (!meta && plan_check_bounds(&p, self) < 0))
        goto done;
    out = em_tensor_empty_like_layout(&p.out, meta);
    if (out == NULL || meta || out->numel == 0)
        goto done;
    int fast = index_gather(&p, self, out);
    if (fast != 0) {
        if (fast < 0)
            Py_CLEAR(out);
        goto done;
    }
    PyObject *key = plan_key(&p);
    PyObject *res = key ? PyObject_GetItem((PyObject *)self->array, key) : NULL;
    Py_XDECREF(key);
    if (res == NULL || em_copy_into(out, res) < 0)
        Py_CLEAR(out);
    Py_XDECREF(res);
done:
    plan_clear(&p);
    return (PyObject *)out;
}

/* Whether values broadcast to shape (leading size-1 dims may be dropped). */
static int
check_values(const char *name, em_Tensor *values, const em_Geom *g)
{
    bool ok = true;
    for (int i = 0; i < values->ndim; i++) {
        int j = g->ndim - values->ndim + i;
        Py_ssize_t s = values->sizes[i];
        ok &= s == 1 || (j >= 0 && s == g->sizes[j]);
    }
    if (ok)
        return 0;
    PyErr_Format(PyExc_RuntimeError, "%s(): shape mismatch: value tensor of shape %s cannot "
                 "be broadcast to indexing result of shape %s", name, em_tshape(values),
                 em_shape_s(g->ndim, g->sizes));
    return -1;
}

/* values as an array NumPy can write with (values of self's dtype). Numbers convert as
 * PyTorch converts them into a tensor of another dtype, wrapping (-7 into uint8 is 249):
 * through NumPy's own array of them, then an unsafe cast (a Python int out of the
 * dtype's range is an OverflowError for NumPy's direct conversion). */
static PyObject *
cast_values(PyObject *values, em_dtype_t dt)
{
    PyObject *a = PyArray_FromAny(values, NULL, 0, 0, 0, NULL);
    if (a == NULL)
        return NULL;
    PyArray_Descr *d = em_dtypes[dt]->descr;
    Py_INCREF(d);
    PyObject *r = PyArray_CastToType((PyArrayObject *)a, d, 0);
    Py_DECREF(a);
    return r;
}

static PyObject *
values_array(PyObject *values, em_dtype_t dt)
{
    if (em_Tensor_Check(values))
        return em_tensor_to_array((em_Tensor *)values);
    return cast_values(values, dt);
}

/* NumPy's ufunc.at walks its operands with the legacy iterators, which hold at most 32
 * dims (and 32 index arrays): beyond, it crashes. */
#define UFUNC_AT_MAX_DIMS 32

static bool
too_many_dims(PyObject *o)
{
    return PyArray_Check(o) && PyArray_NDIM((PyArrayObject *)o) > UFUNC_AT_MAX_DIMS;
}

static bool
ufunc_at_fits(PyArrayObject *a, PyObject *key, PyObject *vals)
{
    if (PyArray_NDIM(a) > UFUNC_AT_MAX_DIMS || too_many_dims(vals) || too_many_dims(key))
        return false;
    if (!PyTuple_Check(key))
        return true;
    if (PyTuple_GET_SIZE(key) > UFUNC_AT_MAX_DIMS)
        return false;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(key); i++)
        if (too_many_dims(PyTuple_GET_ITEM(key, i)))
            return false;
    return true;
}

/* ufunc.at(a, key, vals): a[key] = ufunc(a[key], vals), repeated positions applied in
 * turn. When NumPy's ufunc.at cannot take the operands (ufunc_at_fits), the same on
 * one dimension: the flat positions a[key] selects (from an arange of a's shape, by
 * NumPy's fancy indexing, which takes up to 63 index arrays and 64 dims), vals
 * broadcast to them, into a's flat copy, which is then copied back. */
static int
ufunc_at(PyObject *ufunc, PyArrayObject *a, PyObject *key, PyObject *vals)
{
    if (ufunc_at_fits(a, key, vals)) {
        PyObject *args[3] = {(PyObject *)a, key, vals};
        PyObject *r = em_ufunc_method(ufunc, em_str_at, args, 3, NULL);
        Py_XDECREF(r);
        return r ? 0 : -1;
    }
    int st = -1;
    npy_intp n = PyArray_SIZE(a);
    PyArray_Dims flat = {&n, 1}, shape = {PyArray_DIMS(a), PyArray_NDIM(a)};
    PyObject *all = NULL, *grid = NULL, *pos = NULL, *vb = NULL, *pflat = NULL;
    PyObject *vflat = NULL, *af = NULL, *back = NULL;
    all = PyArray_Arange(0.0, (double)n, 1.0, NPY_INTP);
    grid = all ? PyArray_Newshape((PyArrayObject *)all, &shape, NPY_CORDER) : NULL;
    pos = grid ? PyObject_GetItem(grid, key) : NULL;
    PyObject *pshape = pos ? PyObject_GetAttrString(pos, "shape") : NULL;
    vb = pshape ? PyObject_CallFunctionObjArgs(em_np.broadcast_to, vals, pshape, NULL)
                : NULL;
    Py_XDECREF(pshape);
    pflat = vb ? PyArray_Ravel((PyArrayObject *)pos, NPY_CORDER) : NULL;
    vflat = pflat ? PyArray_Ravel((PyArrayObject *)vb, NPY_CORDER) : NULL;
    af = vflat ? PyArray_NewCopy(a, NPY_CORDER) : NULL;
    back = af ? PyArray_Newshape((PyArrayObject *)af, &flat, NPY_CORDER) : NULL;
    if (back != NULL) {
        PyObject *args[3] = {back, pflat, vflat};
        PyObject *r = em_ufunc_method(ufunc, em_str_at, args, 3, NULL);
        st = r ? PyArray_CopyInto(a, (PyArrayObject *)af) : -1;
        Py_XDECREF(r);
    }
    Py_XDECREF(all);
    Py_XDECREF(grid);
    Py_XDECREF(pos);
    Py_XDECREF(vb);
    Py_XDECREF(pflat);
    Py_XDECREF(vflat);
    Py_XDECREF(af);
    Py_XDECREF(back);
    return st;
}

/* Writes values into arr at the plan's positions (added with accumulate). */
static int
plan_write(Plan *p, PyArrayObject *arr, PyObject *values, bool accumulate)
{
    PyObject *key = plan_key(p);
    PyObject *v = key ? values_array(values, em_dtype_from_npy(PyArray_TYPE(arr))) : NULL;
    int st = -1;
    if (v != NULL && !accumulate) {
        st = PyObject_SetItem((PyObject *)arr, key, v);
    }
    else if (v != NULL) {
        st = ufunc_at(em_np.add, arr, key, v);
    }
    Py_XDECREF(key);
    Py_XDECREF(v);
    return st;
}

/* Checks (and, unless meta, computes) a plan for writing values into self[indices]. */
static int
plan_for_write(const char *name, em_Tensor *self, PyObject *indices, em_Tensor *values,
               bool meta, Plan *p)
{
    if (plan_parse(name, self, indices, !meta, true, p) < 0)
        return -1;
    if (values != NULL && values->dtype != self->dtype) {
        PyErr_Format(PyExc_RuntimeError, "%s(): Index put requires the source and destination "
                     "dtypes match, got %s for the destination and %s for the source.", name,
                     em_dtype_torch_name(self->dtype), em_dtype_torch_name(values->dtype));
        goto error;
    }
    if (p->n == 0 && !(meta && p->masks)) {
        /* every entry None: the whole tensor */
        p->out.ndim = self->ndim;
        memcpy(p->out.sizes, self->sizes, sizeof(Py_ssize_t) * self->ndim);
        if (values != NULL && check_values(name, values, &p->out) < 0)
            goto error;
        return 0;
    }
    if (meta && p->masks)
        return 0;   /* the values' shape cannot be checked without the masks */
    if (plan_broadcast(name, p) < 0 || plan_geometry(p, self) < 0 ||
        (!meta && plan_check_bounds(p, self) < 0))
        goto error;
    if (values != NULL && check_values(name, values, &p->out) < 0)
        goto error;
    return 0;
error:
    plan_clear(p);
    return -1;
}

/* index_put(self, indices, values, accumulate=False) */
static PyObject *
k_index_put(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0], *values = (em_Tensor *)args[2];
    bool meta = em_meta_of(self) || em_is_meta(values) || any_meta_in(args[1]);
    Plan p;
    if (plan_for_write("index_put", self, args[1], values, meta, &p) < 0)
        return NULL;
    em_Tensor *out = em_empty_like(self, self->dtype, meta);
    if (out == NULL || meta || out->numel == 0)
        goto done;
    if (em_copy_into(out, (PyObject *)self) < 0)
        Py_CLEAR(out);
    else if (p.n == 0) {
        PyObject *v = values_array((PyObject *)values, self->dtype);
        int st = -1;
        if (v != NULL && args[3] == Py_True) {
            PyObject *ins[2] = {(PyObject *)out, v};
            st = em_ufunc_call(em_np.add, ins, 2, out->array, EM_UNDEFINED, EM_UNDEFINED);
        }
        else if (v != NULL)
            st = PyArray_CopyInto(out->array, (PyArrayObject *)v);
        Py_XDECREF(v);
        if (st < 0)
            Py_CLEAR(out);
    }
    else if (plan_write(&p, out->array, (PyObject *)values, args[3] == Py_True) < 0)
        Py_CLEAR(out);
done:
    plan_clear(&p);
    return (PyObject *)out;
}

/* Writes value (a Tensor or a number, cast to self's dtype) into self[indices] in place,
 * with no autograd: __setitem__'s fast path. Returns 0, or -1 with an error. */
int
em_index_put_inplace(em_Tensor *self, PyObject *indices, PyObject *value, bool cast)
{
    if (!cast && em_Tensor_Check(value) && ((em_Tensor *)value)->dtype != self->dtype) {
        PyErr_Format(PyExc_RuntimeError, "Index put requires the source and destination "
                     "dtypes match, got %s for the destination and %s for the source.",
                     em_dtype_torch_name(self->dtype),
                     em_dtype_torch_name(((em_Tensor *)value)->dtype));
        return -1;
    }
    Plan p;
    bool meta = em_is_meta(self);
    if (plan_parse("__setitem__", self, indices, !meta, true, &p) < 0)
        return -1;
    int st = 0;
    if (p.n > 0 && !meta) {
        st = plan_broadcast("index_put", &p);
        if (st == 0)
            st = plan_geometry(&p, self);
        if (st == 0)
            st = plan_check_bounds(&p, self);
        if (st == 0 && em_Tensor_Check(value))
            st = check_values("index_put", (em_Tensor *)value, &p.out);
        if (st == 0 && em_geom_numel(&p.out) > 0)
            st = plan_write(&p, self->array, value, false);
    }
    plan_clear(&p);
    return st;
}

/* ------------------------------------------------------------------ nonzero */

static PyObject *
dynamic_error(em_Op *op)
{
    PyErr_Format(PyExc_NotImplementedError, "%U(): the result's shape depends on the values "
                 "of the input, which meta tensors do not have", op->name);
    return NULL;
}

/* nonzero(self): [n, ndim] int64, laid out as PyTorch's CPU kernel (column-major) */
static PyObject *
k_nonzero(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    if (em_meta_of(self))
        return dynamic_error(op);
    if (self->ndim == 0) {
        PyObject *item = PyArray_GETITEM(self->array, PyArray_DATA(self->array));
        int truth = item ? PyObject_IsTrue(item) : -1;
        Py_XDECREF(item);
        if (truth < 0)
            return NULL;
        Py_ssize_t sizes[2] = {truth ? 1 : 0, 0};
        return (PyObject *)em_empty(2, sizes, EM_INT64, false);
    }
    PyObject *nz = PyArray_Nonzero(self->array);
    if (nz == NULL)
        return NULL;
    Py_ssize_t n = PyArray_DIMS((PyArrayObject *)PyTuple_GET_ITEM(nz, 0))[0];
    em_Geom g = {.ndim = 2, .dtype = EM_INT64, .sizes = {n, self->ndim},
                 .strides = {1, n > 0 ? n : 1}};
    em_Tensor *out = em_tensor_empty_like_layout(&g, false);
    for (int k = 0; out != NULL && k < self->ndim && n > 0; k++) {
        Py_ssize_t col = k * n, one = 1;
        em_Tensor *c = em_tensor_view(out, 1, &n, &one, out->offset + col);
        if (c == NULL || em_copy_into(c, PyTuple_GET_ITEM(nz, k)) < 0)
            Py_CLEAR(out);
        Py_XDECREF(c);
    }
    Py_DECREF(nz);
    return (PyObject *)out;
}

/* nonzero(self, *, as_tuple): the columns of nonzero(self) when as_tuple */
static PyObject *
nonzero_tuple(PyObject *self)
{
    PyObject *nz = em_call_op(EM_OP_NONZERO, &self, 1, NULL);
    if (nz == NULL)
        return NULL;
    PyObject *r;
    if (((em_Tensor *)self)->ndim == 0) {
        Py_ssize_t n = ((em_Tensor *)nz)->sizes[0];
        em_Tensor *col = em_empty(1, &n, EM_INT64, false);
        if (col != NULL && n == 1) {
            PyObject *zero = PyLong_FromLong(0);
            if (zero == NULL || PyArray_FillWithScalar(col->array, zero) < 0)
                Py_CLEAR(col);
            Py_XDECREF(zero);
        }
        r = col ? PyTuple_Pack(1, (PyObject *)col) : NULL;
        Py_XDECREF(col);
    }
    else {
        PyObject *one = PyLong_FromLong(1);
        PyObject *a[2] = {nz, one};
        r = one ? em_call_op(EM_OP_UNBIND, a, 2, NULL) : NULL;
        Py_XDECREF(one);
    }
    Py_DECREF(nz);
    return r;
}

static PyObject *
k_nonzero_tuple(em_Op *op, PyObject **args)
{
    if (args[1] != Py_True)
        return em_call_op(EM_OP_NONZERO, args, 1, NULL);
    return nonzero_tuple(args[0]);
}

static PyObject *
k_argwhere(em_Op *op, PyObject **args)
{
    return em_call_op(EM_OP_NONZERO, args, 1, NULL);
}

static PyObject *
k_where_cond(em_Op *op, PyObject **args)
{
    return nonzero_tuple(args[0]);
}

/* ------------------------------------------------------------------ gather / scatter */

static int
rank1(em_Tensor *t)
{
    return t->ndim > 0 ? t->ndim : 1;
}

static Py_ssize_t
size_at(em_Tensor *t, int d)
{
    return t->ndim ? t->sizes[d] : 1;
}

/* The array of t with at least one dim (0-d arrays as [1]). */
static PyArrayObject *
as_1d_at_least(PyArrayObject *a)
{
    if (PyArray_NDIM(a) > 0) {
        Py_INCREF(a);
        return a;
    }
    npy_intp one = 1;
    PyArray_Dims shape = {&one, 1};
    return (PyArrayObject *)PyArray_Newshape(a, &shape, NPY_CORDER);
}

/* Every value of index (int64) in [0, size) (RuntimeError, as gather/scatter word it). */
static int
check_range(em_Tensor *index, int d, Py_ssize_t size)
{
    long long bad;
    int r = out_of_range(index->array, 0, size, &bad);
    if (r > 0)
        PyErr_Format(PyExc_RuntimeError, "index %lld is out of bounds for dimension %d with "
                     "size %zd", bad, d, size);
    return r != 0 ? -1 : 0;
}

/* gather(self, dim, index, *, sparse_grad=False) */
static PyObject *
k_gather(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0], *index = (em_Tensor *)args[2];
    Py_ssize_t d;
    if (em_dim_arg(args[1], self->ndim, &d) < 0)
        return NULL;
    if (check_index_dtype("gather", index) < 0)
        return NULL;
    if (rank1(index) != rank1(self)) {
        PyErr_SetString(PyExc_RuntimeError, "gather(): Index tensor must have the same number "
                        "of dimensions as input tensor");
        return NULL;
    }
    for (int a = 0; a < index->ndim; a++) {
        if (a != d && size_at(index, a) > size_at(self, a))
            return PyErr_Format(PyExc_RuntimeError, "gather(): Size does not match at "
                                "dimension %d expected index %s to be no larger than self %s "
                                "apart from dimension %zd", a, em_tshape(index),
                                em_tshape(self), d);
    }
    bool meta = em_meta_of(self) || em_is_meta(index);
    em_Tensor *out = em_empty(index->ndim, index->sizes, self->dtype, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    if (check_range(index, (int)d, size_at(self, (int)d)) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    PyArrayObject *i64 = (PyArrayObject *)PyArray_FROM_OTF((PyObject *)index->array,
                                                           NPY_INT64, NPY_ARRAY_ALIGNED);
    PyArrayObject *s = as_1d_at_least(self->array), *i = i64 ? as_1d_at_least(i64) : NULL;
    PyArrayObject *o = as_1d_at_least(out->array);
    Py_XDECREF(i64);
    if (s && i && o)
        em_gather_loop(s, i, (int)d, o);
    else
        Py_CLEAR(out);
    Py_XDECREF(s);
    Py_XDECREF(i);
    Py_XDECREF(o);
    return (PyObject *)out;
}

typedef enum { RED_NONE, RED_SUM, RED_PROD, RED_MEAN, RED_AMAX, RED_AMIN } red_t;

/* The flat (C-order) positions in a contiguous tensor of shape `sizes` that scatter
 * writes: index's positions with index's value along d. */
static PyArrayObject *
scatter_positions(em_Tensor *index, int d, int ndim, const Py_ssize_t *sizes)
{
    Py_ssize_t ostride[EM_MAX_DIMS];
    Py_ssize_t s = 1;
    for (int a = ndim - 1; a >= 0; a--) {
        ostride[a] = s;
        s *= sizes[a];
    }
    npy_intp n = index->numel;
    PyArrayObject *pos = (PyArrayObject *)PyArray_SimpleNew(1, &n, NPY_INT64);
    PyArrayObject *iv = pos ? (PyArrayObject *)PyArray_FROM_OTF(
        (PyObject *)index->array, NPY_INT64, NPY_ARRAY_CARRAY_RO) : NULL;
    if (iv == NULL) {
        Py_XDECREF(pos);
        return NULL;
    }
    npy_int64 *out = (npy_int64 *)PyArray_DATA(pos);
    const npy_int64 *v = (const npy_int64 *)PyArray_DATA(iv);
    Py_ssize_t counter[EM_MAX_DIMS] = {0};
    int nd = index->ndim;
    for (npy_intp k = 0; k < n; k++) {
        Py_ssize_t off = 0;
        for (int a = 0; a < nd; a++)
            off += (a == d ? v[k] : counter[a]) * ostride[a];
        if (nd == 0)
            off = v[k] * (ndim ? ostride[0] : 0);
        out[k] = off;
        for (int a = nd - 1; a >= 0; a--) {
            if (++counter[a] < index->sizes[a])
                break;
            counter[a] = 0;
        }
    }
    Py_DECREF(iv);
    return pos;
}

/* The first index.shape elements of src, as a contiguous 1-D array. */
static PyArrayObject *
src_values(em_Tensor *src, em_Tensor *index)
{
    PyArrayObject *a = src->array;
    PyArrayObject *v = em_array_view(a, index->ndim, index->sizes, PyArray_STRIDES(a),
                                     PyArray_BYTES(a));
    PyObject *flat = v ? PyArray_Ravel(v, NPY_CORDER) : NULL;
    Py_XDECREF(v);
    return (PyArrayObject *)flat;
}

static PyObject *
identity_for(red_t red, em_dtype_t dt)
{
    switch (red) {
    case RED_PROD:
        return PyLong_FromLong(1);
    case RED_AMAX:
    case RED_AMIN: {
        bool max = red == RED_AMAX;
        if (em_is_float(dt))
            return PyFloat_FromDouble(max ? -INFINITY : INFINITY);
        if (dt == EM_BOOL)
            return PyBool_FromLong(!max);
        PyObject *info = PyObject_CallFunctionObjArgs(em_np.iinfo,
                                                      (PyObject *)em_dtypes[dt]->descr, NULL);
        PyObject *r = info ? PyObject_GetAttrString(info, max ? "min" : "max") : NULL;
        Py_XDECREF(info);
        return r;
    }
    default:
        return PyLong_FromLong(0);
    }
}

/* The scatter family: scatter(src | value, reduce=add|multiply), scatter_add,
 * scatter_reduce(src, reduce, include_self). */
static PyObject *
k_scatter(em_Op *op, PyObject **args)
{
    const char *name = PyUnicode_AsUTF8(op->name);
    bool is_reduce_op = strncmp(name, "scatter_reduce", 14) == 0;
    bool is_add = strcmp(name, "scatter_add") == 0;
    em_Tensor *self = (em_Tensor *)args[0], *index = (em_Tensor *)args[2];
    em_Tensor *src = em_Tensor_Check(args[3]) ? (em_Tensor *)args[3] : NULL;
    PyObject *value = src ? NULL : args[3];
    red_t red = is_add ? RED_SUM : RED_NONE;
    bool include_self = true;
    if (op->nparams > 4 && PyUnicode_Check(args[4])) {
        const char *r = PyUnicode_AsUTF8(args[4]);
        if (is_reduce_op) {
            red = strcmp(r, "sum") == 0 ? RED_SUM : strcmp(r, "prod") == 0 ? RED_PROD
                  : strcmp(r, "mean") == 0 ? RED_MEAN : strcmp(r, "amax") == 0 ? RED_AMAX
                  : strcmp(r, "amin") == 0 ? RED_AMIN : RED_NONE;
            include_self = args[5] == Py_True;
        }
        else {
            red = strcmp(r, "add") == 0 ? RED_SUM : strcmp(r, "multiply") == 0 ? RED_PROD
                                                                              : RED_NONE;
        }
        if (red == RED_NONE) {
            if (is_reduce_op)
                PyErr_Format(PyExc_RuntimeError, "%s(): reduce argument must be either sum, "
                             "prod, mean, amax or amin, got %s", name, r);
            else
                PyErr_Format(PyExc_RuntimeError, "%s(): reduce argument must be either add or "
                             "multiply.", name);
            return NULL;
        }
    }
    Py_ssize_t d;
    if (em_dim_arg(args[1], self->ndim, &d) < 0)
        return NULL;
    if (check_index_dtype(name, index) < 0)
        return NULL;
    if (src != NULL && src->dtype != self->dtype) {
        PyErr_Format(PyExc_RuntimeError, "%s(): Expected self.dtype to be equal to src.dtype",
                     name);
        return NULL;
    }
    if (rank1(index) != rank1(self) || (src != NULL && rank1(index) != rank1(src))) {
        PyErr_Format(PyExc_RuntimeError, "%s(): Index tensor must have the same number of "
                     "dimensions as %s tensor", name, rank1(index) != rank1(self) ? "self"
                                                                                  : "src");
        return NULL;
    }
    for (int a = 0; a < index->ndim; a++) {
        if ((a != d && size_at(index, a) > size_at(self, a)) ||
            (src != NULL && size_at(index, a) > size_at(src, a)))
            return PyErr_Format(PyExc_RuntimeError, "%s(): Expected index %s to be smaller "
                                "than self %s apart from dimension %zd%s%s", name,
                                em_tshape(index), em_tshape(self), d,
                                src ? " and to be smaller size than src " : "",
                                src ? em_tshape(src) : "");
    }
    bool meta = em_meta_of(self) || em_is_meta(index) || (src && em_is_meta(src));
    em_Tensor *out = em_empty(self->ndim, self->sizes, self->dtype, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    int st = em_copy_into(out, (PyObject *)self);
    if (st < 0 || index->numel == 0)
        return em_finish(out, st);
    if (check_range(index, (int)d, size_at(self, (int)d)) < 0)
        return em_finish(out, -1);
    npy_intp numel = out->numel;
    PyArray_Dims flat_shape = {&numel, 1};
    PyArrayObject *flat = (PyArrayObject *)PyArray_Newshape(out->array, &flat_shape, NPY_CORDER);
    PyArrayObject *pos = flat ? scatter_positions(index, (int)d, self->ndim, self->sizes) : NULL;
    PyObject *vals = NULL, *count = NULL;
    st = pos ? 0 : -1;
    if (st == 0) {
        vals = src ? (PyObject *)src_values(src, index) : values_array(value, self->dtype);
        st = vals ? 0 : -1;
    }
    if (st == 0 && (!include_self || red == RED_NONE)) {
        PyObject *first = red == RED_NONE ? (Py_INCREF(vals), vals)
                                          : identity_for(red, self->dtype);
        st = first ? (PyArray_PutTo(flat, first, (PyObject *)pos, NPY_RAISE) ? 0 : -1) : -1;
        Py_XDECREF(first);
    }
    if (st == 0 && red != RED_NONE) {
        PyObject *uf = red == RED_PROD ? em_np.multiply : red == RED_AMAX ? em_np.maximum
                       : red == RED_AMIN ? em_np.minimum : em_np.add;
        st = ufunc_at(uf, flat, (PyObject *)pos, vals);
    }
    if (st == 0 && red == RED_MEAN) {
        /* divide by the number of values at each position (self counts when included) */
        em_dtype_t ct = em_is_float(self->dtype) ? self->dtype : EM_INT64;
        em_Tensor *c = em_empty(1, &numel, ct, false);
        PyObject *fill = PyLong_FromLong(include_self ? 1 : 0), *one = PyLong_FromLong(1);
        st = (c && fill && one) ? PyArray_FillWithScalar(c->array, fill) : -1;
        if (st == 0)
            st = ufunc_at(em_np.add, c->array, (PyObject *)pos, one);
        if (st == 0) {   /* positions nothing lands on keep self */
            PyObject *ins[2] = {(PyObject *)c, one};
            st = em_ufunc_call(em_np.maximum, ins, 2, c->array, EM_UNDEFINED, EM_UNDEFINED);
        }
        if (st == 0) {
            PyObject *ins[2] = {(PyObject *)flat, (PyObject *)c};
            st = em_ufunc_call(em_is_float(self->dtype) ? em_np.true_divide : em_np.floor_divide,
                               ins, 2, flat, EM_UNDEFINED, EM_UNDEFINED);
        }
        count = (PyObject *)c;
        Py_XDECREF(fill);
        Py_XDECREF(one);
    }
    Py_XDECREF(flat);
    Py_XDECREF(pos);
    Py_XDECREF(vals);
    Py_XDECREF(count);
    return em_finish(out, st);
}

/* index_select(self, dim, index) */
static PyObject *
k_index_select(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0], *index = (em_Tensor *)args[2];
    Py_ssize_t d;
    if (em_dim_arg(args[1], self->ndim, &d) < 0)
        return NULL;
    if (index->ndim > 1) {
        PyErr_SetString(PyExc_IndexError, "index_select(): Index is supposed to be a vector");
        return NULL;
    }
    if (check_index_dtype("index_select", index) < 0)
        return NULL;
    Py_ssize_t sizes[EM_MAX_DIMS];
    memcpy(sizes, self->sizes, sizeof(Py_ssize_t) * self->ndim);
    if (self->ndim)
        sizes[d] = index->numel;
    bool meta = em_meta_of(self) || em_is_meta(index);
    em_Tensor *out = em_empty(self->ndim, sizes, self->dtype, meta);
    if (out == NULL || meta)
        return (PyObject *)out;
    long long bad;
    int r = out_of_range(index->array, 0, size_at(self, (int)d), &bad);
    if (r > 0)
        PyErr_SetString(PyExc_IndexError, "index_select(): index out of range in self");
    if (r != 0 || out->numel == 0)
        return em_finish(out, r != 0 ? -1 : 0);
    PyArrayObject *s = as_1d_at_least(self->array);
    PyObject *iflat = flat_index(index);
    PyObject *t = (s && iflat) ? PyArray_TakeFrom(s, iflat, (int)d, NULL, NPY_RAISE) : NULL;
    Py_XDECREF(s);
    Py_XDECREF(iflat);
    int st = t ? em_copy_into(out, t) : -1;
    Py_XDECREF(t);
    return em_finish(out, st);
}

/* index_add's common case without NumPy's ufunc.at: out and src C-contiguous float32 or
 * float64 of one dtype, the index int64 or int32 (in range, negatives wrapped): each
 * slice src[.., i, ..] added into out[.., index[i], ..] in the order of i, the order
 * ufunc.at adds them, so the same results. 0 when it ran, 1 when the case is not this. */
static int
index_add_rows(em_Tensor *out, em_Tensor *src, em_Tensor *index, int d)
{
    if (out->dtype != src->dtype || (out->dtype != EM_FLOAT32 && out->dtype != EM_FLOAT64) ||
        !PyArray_IS_C_CONTIGUOUS(out->array) || !PyArray_IS_C_CONTIGUOUS(src->array) ||
        !PyArray_IS_C_CONTIGUOUS(index->array) ||
        (index->dtype != EM_INT64 && index->dtype != EM_INT32))
        return 1;
    Py_ssize_t outer = 1, inner = 1, size = out->sizes[d], n = index->numel;
    for (int k = 0; k < d; k++)
        outer *= out->sizes[k];
    for (int k = d + 1; k < out->ndim; k++)
        inner *= out->sizes[k];
    const void *ix = PyArray_DATA(index->array);
    bool f32 = out->dtype == EM_FLOAT32, i64 = index->dtype == EM_INT64;
    char *o = PyArray_DATA(out->array);
    const char *v = PyArray_DATA(src->array);
    size_t item = f32 ? sizeof(float) : sizeof(double);
    for (Py_ssize_t a = 0; a < outer; a++)
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t k = i64 ? (Py_ssize_t)((const int64_t *)ix)[i]
                               : (Py_ssize_t)((const int32_t *)ix)[i];
            if (k < 0)
                k += size;
            char *dst = o + (size_t)((a * size + k) * inner) * item;
            const char *from = v + (size_t)((a * n + i) * inner) * item;
            if (f32)
                for (Py_ssize_t j = 0; j < inner; j++)
                    ((float *)dst)[j] += ((const float *)from)[j];
            else
                for (Py_ssize_t j = 0; j < inner; j++)
                    ((double *)dst)[j] += ((const double *)from)[j];
        }
    return 0;
}

/* index_add(self, dim, index, source, *, alpha=1) */
static PyObject *
k_index_add(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0], *index = (em_Tensor *)args[2];
    em_Tensor *source = (em_Tensor *)args[3];
    Py_ssize_t d;
    if (em_dim_arg(args[1], self->ndim, &d) < 0)
        return NULL;
    if (index->ndim > 1) {
        PyErr_SetString(PyExc_IndexError, "index_add(): Index is supposed to be a vector");
        return NULL;
    }
    if (check_index_dtype("index_add", index) < 0)
        return NULL;
    if (source->dtype != self->dtype) {
        PyErr_Format(PyExc_RuntimeError, "index_add(): self and source expected to have the "
                     "same dtype, but got (self) %s and (source) %s",
                     em_dtype_torch_name(self->dtype), em_dtype_torch_name(source->dtype));
        return NULL;
    }
    bool same = rank1(source) == rank1(self);
    for (int a = 0; same && a < self->ndim; a++)
        same = source->sizes[a] == (a == d ? index->numel : self->sizes[a]);
    if (!same) {
        PyErr_SetString(PyExc_RuntimeError, "index_add(): Source/destination tensor must have "
                        "same slice shapes.");
        return NULL;
    }
    bool meta = em_meta_of(self) || em_is_meta(index) || em_is_meta(source);
    em_Tensor *out = em_empty(self->ndim, self->sizes, self->dtype, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    PyObject *alpha = args[4];
    em_Tensor *scaled = source;
    Py_INCREF(scaled);
    if (!(PyLong_CheckExact(alpha) && PyLong_AsLong(alpha) == 1)) {
        Py_SETREF(scaled, em_empty(source->ndim, source->sizes, source->dtype, false));
        PyObject *ins[2] = {(PyObject *)source, alpha};
        if (scaled == NULL ||
            em_ufunc_call(em_np.multiply, ins, 2, scaled->array, EM_UNDEFINED, EM_UNDEFINED) < 0)
            Py_CLEAR(scaled);
    }
    if (scaled == NULL || em_copy_into(out, (PyObject *)self) < 0) {
        Py_XDECREF(scaled);
        return em_finish(out, -1);
    }
    long long bad;
    Py_ssize_t size = size_at(self, (int)d);
    int st = out_of_range(index->array, -size, size, &bad);
    if (st > 0) {
        PyErr_Format(PyExc_IndexError, "index_add(): index %lld is out of bounds for "
                     "dimension %zd with size %zd", bad, d, size);
        st = -1;
    }
    if (st == 0 && self->ndim == 0) {
        PyObject *ins[2] = {(PyObject *)out, (PyObject *)scaled};
        st = em_ufunc_call(em_np.add, ins, 2, out->array, EM_UNDEFINED, EM_UNDEFINED);
    }
    else if (st == 0 && index_add_rows(out, scaled, index, (int)d) == 0)
        st = 0;
    else if (st == 0) {
        PyObject *iflat = flat_index(index);
        PyObject *key = iflat ? PyTuple_New(d + 1) : NULL;
        for (Py_ssize_t i = 0; key != NULL && i < d; i++)
            PyTuple_SET_ITEM(key, i, PySlice_New(NULL, NULL, NULL));
        if (key != NULL) {
            Py_INCREF(iflat);
            PyTuple_SET_ITEM(key, d, iflat);
        }
        st = key ? ufunc_at(em_np.add, out->array, key, (PyObject *)scaled->array) : -1;
        Py_XDECREF(key);
        Py_XDECREF(iflat);
    }
    Py_DECREF(scaled);
    return em_finish(out, st);
}

/* ------------------------------------------------------------------ masks */

/* masked_fill(self, mask, value): value a number or a 0-d tensor */
static PyObject *
k_masked_fill(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0], *mask = (em_Tensor *)args[1];
    PyObject *value = args[2];
    if (mask->dtype != EM_BOOL) {
        PyErr_Format(PyExc_RuntimeError, "masked_fill(): masked_fill_ only supports boolean "
                     "masks, but got mask with dtype %s", em_dtypes[mask->dtype]->name);
        return NULL;
    }
    if (!em_is_complex(self->dtype) &&
        (PyComplex_Check(value) ||
         (em_Tensor_Check(value) && em_is_complex(((em_Tensor *)value)->dtype)))) {
        /* NumPy would keep the real part */
        PyErr_Format(PyExc_RuntimeError, "masked_fill(): value cannot be converted to type "
                     "%s without overflow", em_dtypes[self->dtype]->name);
        return NULL;
    }
    if (em_Tensor_Check(value) && ((em_Tensor *)value)->ndim != 0) {
        PyErr_Format(PyExc_RuntimeError, "masked_fill(): masked_fill_ only supports a "
                     "0-dimensional value tensor, but got tensor with %d dimension(s).",
                     ((em_Tensor *)value)->ndim);
        return NULL;
    }
    PyObject *pair[2] = {args[0], args[1]};
    em_Geom g;
    if (em_broadcast("masked_fill", pair, 2, &g) < 0)
        return NULL;
    bool meta = em_meta_of(self) || em_is_meta(mask) ||
                (em_Tensor_Check(value) && em_is_meta((em_Tensor *)value));
    em_Tensor *out = em_empty(g.ndim, g.sizes, self->dtype, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    em_Tensor *m = em_empty(g.ndim, g.sizes, EM_BOOL, false);
    PyObject *v = NULL;
    int st = (m && em_copy_into(out, (PyObject *)self) == 0 &&
              em_copy_into(m, (PyObject *)mask) == 0) ? 0 : -1;
    if (st == 0) {
        /* a 0-d tensor's value converts into self's dtype as a number does */
        PyObject *src = em_Tensor_Check(value) ? em_tensor_to_array((em_Tensor *)value)
                                               : (Py_INCREF(value), value);
        v = src ? cast_values(src, self->dtype) : NULL;
        Py_XDECREF(src);
        st = v ? 0 : -1;
    }
    if (st == 0)
        st = PyArray_PutMask(out->array, v, (PyObject *)m->array) ? 0 : -1;
    Py_XDECREF(v);
    Py_XDECREF(m);
    if (st < 0)
        Py_CLEAR(out);
    return (PyObject *)out;
}

/* masked_select(self, mask): the elements where mask (broadcast) is true, 1-D */
static PyObject *
k_masked_select(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0], *mask = (em_Tensor *)args[1];
    if (mask->dtype != EM_BOOL) {
        PyErr_SetString(PyExc_RuntimeError, "masked_select(): masked_select: expected "
                        "BoolTensor for mask");
        return NULL;
    }
    PyObject *pair[2] = {args[0], args[1]};
    em_Geom g;
    if (em_broadcast("masked_select", pair, 2, &g) < 0)
        return NULL;
    if (em_meta_of(self) || em_is_meta(mask))
        return dynamic_error(op);
    em_Tensor *x = em_empty(g.ndim, g.sizes, self->dtype, false);
    em_Tensor *m = em_empty(g.ndim, g.sizes, EM_BOOL, false);
    PyObject *r = NULL;
    if (x && m && em_copy_into(x, (PyObject *)self) == 0 &&
        em_copy_into(m, (PyObject *)mask) == 0) {
        PyObject *sel = PyObject_GetItem((PyObject *)x->array, (PyObject *)m->array);
        if (sel != NULL) {
            Py_ssize_t n = PyArray_SIZE((PyArrayObject *)sel);
            em_Tensor *out = em_empty(1, &n, self->dtype, false);
            if (out != NULL && em_copy_into(out, sel) < 0)
                Py_CLEAR(out);
            r = (PyObject *)out;
            Py_DECREF(sel);
        }
    }
    Py_XDECREF(x);
    Py_XDECREF(m);
    return r;
}

const em_KernelEntry em_indexing_kernels[] = {
    {"index", k_index},
    {"index_put", k_index_put},
    {"nonzero", k_nonzero},
    {"nonzero_tuple", k_nonzero_tuple},
    {"argwhere", k_argwhere},
    {"where_cond", k_where_cond},
    {"gather", k_gather},
    {"scatter", k_scatter},
    {"index_select", k_index_select},
    {"index_add", k_index_add},
    {"masked_fill", k_masked_fill},
    {"masked_select", k_masked_select},
    {NULL, NULL},
};
