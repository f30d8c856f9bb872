/* tensor_new.c: making tensors: fresh memory, NumPy arrays, views, aliases, meta. */
#include "ember.h"

void
em_contiguous_strides(em_Geom *g)
{
    Py_ssize_t s = 1;
    for (int i = g->ndim - 1; i >= 0; i--) {
        g->strides[i] = s;
        s *= g->sizes[i] > 1 ? g->sizes[i] : 1;
    }
}

Py_ssize_t
em_geom_numel(const em_Geom *g)
{
    Py_ssize_t n = 1;
    for (int i = 0; i < g->ndim; i++)
        n *= g->sizes[i];
    return n;
}

static em_Tensor *
tensor_alloc(void)
{
    em_Tensor *t = (em_Tensor *)em_Tensor_Type.tp_alloc(&em_Tensor_Type, 0);
    if (t == NULL)
        return NULL;
    t->sizes = t->inline_geom;
    t->strides = t->inline_geom + EM_INLINE_DIMS;
    t->dtype = EM_FLOAT32;
    return t;
}

int
em_tensor_set_geom(em_Tensor *t, int ndim, const Py_ssize_t *sizes, const Py_ssize_t *strides)
{
    if (ndim > EM_MAX_DIMS) {
        PyErr_Format(PyExc_RuntimeError, "tensors have at most %d dimensions, got %d",
                     EM_MAX_DIMS, ndim);
        return -1;
    }
    if (t->sizes != t->inline_geom) {
        PyMem_Free(t->sizes);
        t->sizes = t->inline_geom;
        t->strides = t->inline_geom + EM_INLINE_DIMS;
    }
    if (ndim > EM_INLINE_DIMS) {
        Py_ssize_t *mem = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * ndim);
        if (mem == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->sizes = mem;
        t->strides = mem + ndim;
    }
    t->ndim = ndim;
    Py_ssize_t n = 1;
    for (int i = 0; i < ndim; i++) {
        t->sizes[i] = sizes[i];
        t->strides[i] = strides[i];
        n *= sizes[i];
    }
    t->numel = n;
    return 0;
}

/* A tensor of that geometry, dtype and storage offset, with no data or storage yet
 * (inlined: every op's result is made through it). */
static inline Py_ALWAYS_INLINE em_Tensor *
tensor_of(int ndim, const Py_ssize_t *sizes, const Py_ssize_t *strides, em_dtype_t dtype,
          Py_ssize_t offset)
{
    em_Tensor *t = tensor_alloc();
    if (t != NULL && em_tensor_set_geom(t, ndim, sizes, strides) < 0)
        Py_CLEAR(t);
    if (t != NULL) {
        t->dtype = dtype;
        t->offset = offset;
    }
    return t;
}

em_Tensor *
em_tensor_from_array(PyArrayObject *array, em_Storage *storage, Py_ssize_t offset)
{
    em_dtype_t dt = em_dtype_from_npy(PyArray_TYPE(array));
    if (dt == EM_UNDEFINED) {
        PyErr_Format(PyExc_TypeError,
                     "can't convert np.ndarray of type %S. The only supported types are: "
                     "float64, float32, float16, complex64, complex128, int64, int32, int16, "
                     "int8, uint8, and bool.",
                     (PyObject *)PyArray_DESCR(array));
        return NULL;
    }
    int nd = PyArray_NDIM(array);
    Py_ssize_t strides[EM_MAX_DIMS];
    int itemsize = em_dtypes[dt]->itemsize;
    for (int i = 0; i < nd; i++) {
        Py_ssize_t b = PyArray_STRIDES(array)[i];
        if (b < 0) {
            PyErr_SetString(PyExc_ValueError,
                            "At least one stride in the given numpy array is negative, and "
                            "tensors with negative strides are not currently supported. (You "
                            "can probably work around this by making a copy of your array "
                            " with array.copy().) ");
            return NULL;
        }
        if (b % itemsize != 0) {
            PyErr_SetString(PyExc_ValueError,
                            "given numpy array strides not a multiple of the element byte size. "
                            "Copy the numpy array to reallocate the memory.");
            return NULL;
        }
        strides[i] = b / itemsize;
    }
    em_Tensor *t = tensor_of(nd, PyArray_DIMS(array), strides, dt, offset);
    if (t == NULL)
        return NULL;
    Py_INCREF(array);
    t->array = array;
    Py_XINCREF(storage);
    t->storage = storage != NULL ? storage : em_storage_new(array);
    if (t->storage == NULL)
        Py_CLEAR(t);
    return t;
}

/* The bytes g's storage takes, in *nbytes; a RuntimeError as PyTorch's when the
 * size does not fit (NumPy's own ValueError would name neither the sizes nor the
 * cause). */
static int
check_allocation(const em_Geom *g, Py_ssize_t *nbytes)
{
    Py_ssize_t n = em_dtypes[g->dtype]->itemsize;
    bool overflow = false;
    for (int i = 0; i < g->ndim; i++) {
        if (g->sizes[i] == 0) {
            *nbytes = 0;
            return 0;
        }
        if (!overflow && __builtin_mul_overflow(n, g->sizes[i], &n))
            overflow = true;
    }
    *nbytes = n;
    if (!overflow)
        return 0;
    PyObject *sizes = PyList_New(g->ndim);
    if (sizes == NULL)
        return -1;
    for (int i = 0; i < g->ndim; i++) {
        PyObject *v = PyLong_FromSsize_t(g->sizes[i]);
        if (v == NULL) {
            Py_DECREF(sizes);
            return -1;
        }
        PyList_SET_ITEM(sizes, i, v);
    }
    PyErr_Format(PyExc_RuntimeError, "Storage size calculation overflowed with sizes=%R",
                 sizes);
    Py_DECREF(sizes);
    return -1;
}

em_Tensor *
em_tensor_empty(const em_Geom *g, bool meta)
{
    em_Tensor *t;
    if (meta) {
        em_Geom c = *g;
        em_contiguous_strides(&c);
        t = tensor_of(c.ndim, c.sizes, c.strides, c.dtype, 0);
        if (t != NULL && (t->storage = em_storage_new(NULL)) == NULL)
            Py_CLEAR(t);
        return t;
    }
    Py_ssize_t nbytes;
    if (check_allocation(g, &nbytes) < 0)
        return NULL;
    PyArray_Descr *descr = em_dtypes[g->dtype]->descr;
    Py_INCREF(descr);
    PyArrayObject *arr = (PyArrayObject *)PyArray_NewFromDescr(
        &PyArray_Type, descr, g->ndim, (npy_intp *)g->sizes, NULL, NULL, 0, NULL);
    if (arr == NULL) {
        if (PyErr_ExceptionMatches(PyExc_MemoryError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_RuntimeError, "DefaultCPUAllocator: can't allocate memory: "
                         "you tried to allocate %zd bytes.", nbytes);
        }
        return NULL;
    }
    t = em_tensor_from_array(arr, NULL, 0);
    Py_DECREF(arr);
    if (t != NULL && t->numel == 0) {
        /* NumPy gives empty arrays zero strides; PyTorch keeps contiguous ones */
        em_Geom c = *g;
        em_contiguous_strides(&c);
        memcpy(t->strides, c.strides, sizeof(Py_ssize_t) * g->ndim);
    }
    return t;
}

static bool
geom_is_contiguous(const em_Geom *g)
{
    Py_ssize_t expected = 1;
    for (int i = g->ndim - 1; i >= 0; i--) {
        if (g->sizes[i] == 1)
            continue;
        if (g->strides[i] != expected)
            return false;
        expected *= g->sizes[i];
    }
    return true;
}

em_Tensor *
em_tensor_empty_like_layout(const em_Geom *g, bool meta)
{
    Py_ssize_t numel = em_geom_numel(g);
    if (numel == 0 || geom_is_contiguous(g))
        return em_tensor_empty(g, meta);
    /* a dense permuted layout: one flat buffer, viewed with g's strides */
    em_Geom flat = {.ndim = 1, .dtype = g->dtype, .sizes = {numel}};
    em_contiguous_strides(&flat);
    em_Tensor *buf = em_tensor_empty(&flat, meta);
    if (buf == NULL)
        return NULL;
    em_Tensor *t = em_tensor_view(buf, g->ndim, g->sizes, g->strides, 0);
    Py_DECREF(buf);
    if (t != NULL)
        Py_CLEAR(t->base);
    return t;
}

em_Tensor *
em_tensor_view(em_Tensor *base, int ndim, const Py_ssize_t *sizes, const Py_ssize_t *strides,
               Py_ssize_t offset)
{
    return em_tensor_view_dtype(base, base->dtype, ndim, sizes, strides, offset);
}

/* A view of base's storage read as another dtype (view_as_real, view_as_complex): sizes,
 * strides and offset count elements of that dtype. */
em_Tensor *
em_tensor_view_dtype(em_Tensor *base, em_dtype_t dtype, int ndim, const Py_ssize_t *sizes,
                     const Py_ssize_t *strides, Py_ssize_t offset)
{
    em_Tensor *t = tensor_of(ndim, sizes, strides, dtype, offset);
    if (t == NULL)
        return NULL;
    Py_INCREF(base->storage);
    t->storage = base->storage;
    PyObject *root = base->base ? base->base : (PyObject *)base;
    Py_INCREF(root);
    t->base = root;
    if (base->array != NULL) {
        PyArrayObject *st = base->storage->array;
        int itemsize = em_dtypes[dtype]->itemsize;
        npy_intp bstrides[EM_MAX_DIMS];
        for (int i = 0; i < ndim; i++)
            bstrides[i] = strides[i] * itemsize;
        PyArray_Descr *descr = dtype == base->dtype ? PyArray_DESCR(base->array)
                                                    : em_dtypes[dtype]->descr;
        Py_INCREF(descr);
        int flags = PyArray_FLAGS(st) & NPY_ARRAY_WRITEABLE;
        PyArrayObject *view = (PyArrayObject *)PyArray_NewFromDescr(
            &PyArray_Type, descr, ndim, (npy_intp *)sizes, bstrides,
            PyArray_BYTES(st) + offset * itemsize, flags, NULL);
        if (view == NULL)
            goto error;
        Py_INCREF(st);
        if (PyArray_SetBaseObject(view, (PyObject *)st) < 0) {
            Py_DECREF(view);
            goto error;
        }
        t->array = view;
    }
    return t;
error:
    Py_DECREF(t);
    return NULL;
}

em_Tensor *
em_tensor_alias(em_Tensor *src)
{
    em_Tensor *t = tensor_of(src->ndim, src->sizes, src->strides, src->dtype, src->offset);
    if (t == NULL)
        return NULL;
    Py_XINCREF(src->array);
    t->array = src->array;
    Py_INCREF(src->storage);
    t->storage = src->storage;
    Py_XINCREF(src->base);
    t->base = src->base;
    Py_XINCREF(src->view_steps);
    t->view_steps = src->view_steps;
    Py_XINCREF(src->trace);
    t->trace = src->trace;
    return t;
}

bool
em_tensor_is_contiguous(const em_Tensor *t)
{
    Py_ssize_t expected = 1;
    if (t->numel == 0)
        return true;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->sizes[i] == 1)
            continue;
        if (t->strides[i] != expected)
            return false;
        expected *= t->sizes[i];
    }
    return true;
}

PyObject *
em_tensor_to_array(em_Tensor *t)
{
    if (t->array == NULL) {
        PyErr_SetString(PyExc_NotImplementedError,
                        "Cannot access data of a meta tensor: it has shape and dtype only");
        return NULL;
    }
    Py_INCREF(t->array);
    return (PyObject *)t->array;
}

em_Tensor *
em_tensor_contiguous(em_Tensor *t)
{
    if (em_tensor_is_contiguous(t)) {
        Py_INCREF(t);
        return t;
    }
    em_Geom g = {.ndim = t->ndim, .dtype = t->dtype};
    memcpy(g.sizes, t->sizes, sizeof(Py_ssize_t) * t->ndim);
    em_Tensor *out = em_tensor_empty(&g, em_is_meta(t));
    if (out == NULL || em_is_meta(t))
        return out;
    if (PyArray_CopyInto(out->array, t->array) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

const char *
em_shape_s(int ndim, const Py_ssize_t *sizes)
{
    static _Thread_local char bufs[4][EM_MAX_DIMS * 22 + 8];
    static _Thread_local unsigned next;
    char *b = bufs[next++ % 4];
    size_t k = 1, cap = sizeof bufs[0] - 4;     /* room for "...]" */
    b[0] = '[';
    for (int i = 0; i < ndim; i++) {
        int w = snprintf(b + k, cap - k, "%s%zd", i ? ", " : "", sizes[i]);
        if (w < 0 || (size_t)w >= cap - k) {
            strcpy(b + k, "...]");
            return b;
        }
        k += (size_t)w;
    }
    strcpy(b + k, "]");
    return b;
}

em_Tensor *
em_tensor_meta_like(em_Tensor *src)
{
    em_Tensor *t = tensor_of(src->ndim, src->sizes, src->strides, src->dtype, src->offset);
    if (t != NULL) {
        t->requires_grad = src->requires_grad;
        if ((t->storage = em_storage_new(NULL)) == NULL)
            Py_CLEAR(t);
    }
    return t;
}
