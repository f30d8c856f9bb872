/* tensor.c: the Tensor type: attributes, conversions, Python protocols.
 *
 * Op methods (add, sum, view, ...) are not here: the op table installs them on
 * the type at import, as C callables (see dispatch/op.c).
 */
#include "ember.h"
#include <structmember.h>

static PyObject *repr_hook;          /* ember._tensor_str.tensor_repr */
static PyObject *device_cpu, *device_meta;
static PyTypeObject Size_Type;

/* ------------------------------------------------------------------ lifetime */

static int
tensor_traverse(em_Tensor *self, visitproc visit, void *arg)
{
    Py_VISIT(self->grad);
    Py_VISIT(self->grad_fn);
    Py_VISIT(self->hooks);
    Py_VISIT(self->base);
    Py_VISIT(self->view_steps);
    Py_VISIT(self->trace);
    Py_VISIT(self->dict);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int
tensor_clear(em_Tensor *self)
{
    Py_CLEAR(self->grad);
    Py_CLEAR(self->grad_fn);
    Py_CLEAR(self->hooks);
    Py_CLEAR(self->base);
    Py_CLEAR(self->view_steps);
    Py_CLEAR(self->trace);
    Py_CLEAR(self->dict);
    return 0;
}

static void
tensor_dealloc(em_Tensor *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    tensor_clear(self);
    Py_CLEAR(self->array);
    Py_CLEAR(self->storage);
    if (self->sizes != self->inline_geom)
        PyMem_Free(self->sizes);
    /* heap subclasses (nn.Parameter) are freed through subtype_dealloc, which
     * releases their type's reference itself */
    tp->tp_free((PyObject *)self);
}

/* ------------------------------------------------------------------ Size */

/* A tuple (or, with type, an ember.Size) of the n ints of v. */
static PyObject *
ints_of(PyTypeObject *type, const Py_ssize_t *v, int n)
{
    PyObject *s = type != NULL ? type->tp_alloc(type, n) : PyTuple_New(n);
    for (int i = 0; s != NULL && i < n; i++) {
        PyObject *x = PyLong_FromSsize_t(v[i]);
        if (x == NULL)
            Py_CLEAR(s);
        else
            PyTuple_SET_ITEM(s, i, x);
    }
    return s;
}

PyObject *
em_int_tuple(const Py_ssize_t *v, int n)
{
    return ints_of(NULL, v, n);
}

PyObject *
em_sizes_tuple(const em_Tensor *t)
{
    return ints_of(&Size_Type, t->sizes, t->ndim);
}

static PyObject *
size_repr(PyObject *self)
{
    PyObject *list = PySequence_List(self);
    if (list == NULL)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("ember.Size(%R)", list);
    Py_DECREF(list);
    return r;
}

static PyObject *
size_numel(PyObject *self, PyObject *noargs)
{
    Py_ssize_t n = 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self); i++) {
        Py_ssize_t v = PyLong_AsSsize_t(PyTuple_GET_ITEM(self, i));
        if (v == -1 && PyErr_Occurred())
            return NULL;
        n *= v;
    }
    return PyLong_FromSsize_t(n);
}

static PyObject *
size_getitem(PyObject *self, PyObject *key)
{
    PyObject *r = PyTuple_Type.tp_as_mapping->mp_subscript(self, key);
    if (r != NULL && PySlice_Check(key)) {
        PyObject *s = PyObject_CallOneArg((PyObject *)&Size_Type, r);
        Py_DECREF(r);
        return s;
    }
    return r;
}

static PyMappingMethods size_as_mapping = {.mp_subscript = size_getitem};

static PyMethodDef size_methods[] = {
    {"numel", size_numel, METH_NOARGS, "The number of elements a tensor of this size holds."},
    {NULL},
};

static PyTypeObject Size_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember.Size",
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_TUPLE_SUBCLASS,
    .tp_repr = size_repr,
    .tp_methods = size_methods,
    .tp_as_mapping = &size_as_mapping,
    .tp_doc = "The shape of a tensor: a tuple of ints.",
};

/* ------------------------------------------------------------------ attributes */

static PyObject *
tensor_get_shape(em_Tensor *self, void *c)
{
    return em_sizes_tuple(self);
}

static PyObject *
tensor_get_dtype(em_Tensor *self, void *c)
{
    Py_INCREF(em_dtypes[self->dtype]);
    return (PyObject *)em_dtypes[self->dtype];
}

static PyObject *
tensor_get_requires_grad(em_Tensor *self, void *c)
{
    if (em_view_sync(self) < 0)
        return NULL;
    return PyBool_FromLong(self->requires_grad);
}

static int
set_requires_grad(em_Tensor *self, int flag)
{
    if (self->grad_fn != NULL) {
        if (!flag) {
            PyErr_SetString(PyExc_RuntimeError,
                            "you can only change requires_grad flags of leaf variables. If "
                            "you want to use a computed variable in a subgraph that doesn't "
                            "require differentiation use var_no_grad = var.detach().");
            return -1;
        }
        return 0;
    }
    if (flag && !em_is_inexact(self->dtype)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "only Tensors of floating point and complex dtype can require "
                        "gradients");
        return -1;
    }
    self->requires_grad = (char)flag;
    return 0;
}

static int
tensor_set_requires_grad(em_Tensor *self, PyObject *value, void *c)
{
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "can't delete requires_grad");
        return -1;
    }
    if (!PyBool_Check(value)) {
        PyErr_SetString(PyExc_RuntimeError, "requires_grad must be a bool");
        return -1;
    }
    return set_requires_grad(self, value == Py_True);
}

static PyObject *
tensor_get_grad(em_Tensor *self, void *c)
{
    PyObject *g = self->grad ? self->grad : Py_None;
    Py_INCREF(g);
    return g;
}

static int
tensor_set_grad(em_Tensor *self, PyObject *value, void *c)
{
    if (value == NULL || value == Py_None) {
        Py_CLEAR(self->grad);
        return 0;
    }
    if (!em_Tensor_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "assigned grad expected to be a Tensor or None");
        return -1;
    }
    em_Tensor *g = (em_Tensor *)value;
    if (g->dtype != self->dtype) {
        PyErr_Format(PyExc_RuntimeError, "attempting to assign a gradient with dtype '%s' to "
                     "a tensor with dtype '%s'", em_dtypes[g->dtype]->name,
                     em_dtypes[self->dtype]->name);
        return -1;
    }
    if (g->ndim != self->ndim ||
        memcmp(g->sizes, self->sizes, sizeof(Py_ssize_t) * self->ndim) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "assigned grad has data of a different size");
        return -1;
    }
    Py_INCREF(value);
    Py_XSETREF(self->grad, value);
    return 0;
}

static PyObject *
tensor_get_grad_fn(em_Tensor *self, void *c)
{
    if (em_view_sync(self) < 0)
        return NULL;
    PyObject *g = self->grad_fn ? self->grad_fn : Py_None;
    Py_INCREF(g);
    return g;
}

static PyObject *
tensor_get_is_leaf(em_Tensor *self, void *c)
{
    if (em_view_sync(self) < 0)
        return NULL;
    return PyBool_FromLong(self->grad_fn == NULL);
}

static PyObject *
tensor_get_version(em_Tensor *self, void *c)
{
    return PyLong_FromUnsignedLongLong(self->storage->version);
}

static PyObject *
tensor_get_is_meta(em_Tensor *self, void *c)
{
    return PyBool_FromLong(em_is_meta(self));
}

static PyObject *
tensor_get_device(em_Tensor *self, void *c)
{
    PyObject *d = em_is_meta(self) ? device_meta : device_cpu;
    if (d == NULL)
        d = Py_None;
    Py_INCREF(d);
    return d;
}

static PyObject *
tensor_get_false(em_Tensor *self, void *c)
{
    Py_RETURN_FALSE;
}

static PyObject *
tensor_get_trace(em_Tensor *self, void *c)
{
    PyObject *t = self->trace ? self->trace : Py_None;
    Py_INCREF(t);
    return t;
}

static int
tensor_set_trace(em_Tensor *self, PyObject *value, void *c)
{
    if (value == Py_None)
        value = NULL;
    Py_XINCREF(value);
    Py_XSETREF(self->trace, value);
    return 0;
}

static PyObject *
tensor_get_hooks(em_Tensor *self, void *c)
{
    if (self->hooks == NULL) {
        self->hooks = PyList_New(0);
        if (self->hooks == NULL)
            return NULL;
    }
    Py_INCREF(self->hooks);
    return self->hooks;
}

static PyObject *
tensor_get_data(em_Tensor *self, void *c)
{
    return (PyObject *)em_tensor_alias(self);
}

static int
tensor_set_data(em_Tensor *self, PyObject *value, void *c)
{
    if (value == NULL || !em_Tensor_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "Tensor.data must be set to a Tensor");
        return -1;
    }
    em_Tensor *src = (em_Tensor *)value;
    if (em_tensor_set_geom(self, src->ndim, src->sizes, src->strides) < 0)
        return -1;
    self->dtype = src->dtype;
    self->offset = src->offset;
    Py_XINCREF(src->array);
    Py_XSETREF(self->array, src->array);
    Py_INCREF(src->storage);
    Py_SETREF(self->storage, src->storage);
    /* an alias of src from now on, as detach() makes them */
    PyObject *base = src->base != (PyObject *)self ? src->base : NULL;
    PyObject *steps = base != NULL ? src->view_steps : NULL;
    Py_XINCREF(base);
    Py_XSETREF(self->base, base);
    Py_XINCREF(steps);
    Py_XSETREF(self->view_steps, steps);
    self->view_kind = EM_VIEW_NONE;
    return 0;
}

static PyGetSetDef tensor_getset[] = {
    {"shape", (getter)tensor_get_shape, NULL, "The size of each dimension.", NULL},
    {"dtype", (getter)tensor_get_dtype, NULL, NULL, NULL},
    {"requires_grad", (getter)tensor_get_requires_grad, (setter)tensor_set_requires_grad,
     NULL, NULL},
    {"grad", (getter)tensor_get_grad, (setter)tensor_set_grad, NULL, NULL},
    {"grad_fn", (getter)tensor_get_grad_fn, NULL, NULL, NULL},
    {"is_leaf", (getter)tensor_get_is_leaf, NULL, NULL, NULL},
    {"_version", (getter)tensor_get_version, NULL, NULL, NULL},
    {"is_meta", (getter)tensor_get_is_meta, NULL, NULL, NULL},
    {"device", (getter)tensor_get_device, NULL, NULL, NULL},
    {"is_cuda", (getter)tensor_get_false, NULL, NULL, NULL},
    {"is_sparse", (getter)tensor_get_false, NULL, NULL, NULL},
    {"is_quantized", (getter)tensor_get_false, NULL, NULL, NULL},
    {"_backward_hooks", (getter)tensor_get_hooks, NULL, NULL, NULL},
    {"_trace", (getter)tensor_get_trace, (setter)tensor_set_trace,
     "Slot for tracers: the graph value this tensor stands for.", NULL},
    {"data", (getter)tensor_get_data, (setter)tensor_set_data, NULL, NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyMemberDef tensor_members[] = {
    {"ndim", T_INT, offsetof(em_Tensor, ndim), READONLY, NULL},
    {"output_nr", T_INT, offsetof(em_Tensor, output_nr), READONLY, NULL},
    {"retains_grad", T_BOOL, offsetof(em_Tensor, retains_grad), READONLY, NULL},
    {"_base", T_OBJECT, offsetof(em_Tensor, base), READONLY, NULL},
    {"_view_steps", T_OBJECT, offsetof(em_Tensor, view_steps), READONLY,
     "How this view is made from _base: a tuple of (op, args after self...), or None."},
    {NULL},
};

/* ------------------------------------------------------------------ methods */

/* The optional dim of size(dim=None) and stride(dim=None); NULL when absent. */
static int
dim_param(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
          PyObject **dim)
{
    Py_ssize_t nk = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    *dim = nargs > 0 ? args[0] : NULL;
    if (nargs + nk > 1) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most 1 argument (%zd given)", fname,
                     nargs + nk);
        return -1;
    }
    if (nk == 1) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, 0);
        if (PyUnicode_CompareWithASCIIString(key, "dim") != 0) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'",
                         fname, key);
            return -1;
        }
        *dim = args[0];
    }
    return 0;
}

/* size(dim=None) / stride(dim=None): all of v (a Size or a tuple), or v[dim] */
static PyObject *
size_or_stride(em_Tensor *self, const char *fname, PyTypeObject *type, const Py_ssize_t *v,
               PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *dim;
    Py_ssize_t d;
    if (dim_param(fname, args, nargs, kwnames, &dim) < 0)
        return NULL;
    if (dim == NULL || dim == Py_None)
        return ints_of(type, v, self->ndim);
    if (em_dim_arg(dim, self->ndim, &d) < 0)
        return NULL;
    return PyLong_FromSsize_t(v[d]);
}

static PyObject *
tensor_size(em_Tensor *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return size_or_stride(self, "size", &Size_Type, self->sizes, args, nargs, kwnames);
}

static PyObject *
tensor_stride(em_Tensor *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return size_or_stride(self, "stride", NULL, self->strides, args, nargs, kwnames);
}

static PyObject *
tensor_dim(em_Tensor *self, PyObject *noargs)
{
    return PyLong_FromLong(self->ndim);
}

static PyObject *
tensor_numel(em_Tensor *self, PyObject *noargs)
{
    return PyLong_FromSsize_t(self->numel);
}

static PyObject *
tensor_element_size(em_Tensor *self, PyObject *noargs)
{
    return PyLong_FromLong(em_dtypes[self->dtype]->itemsize);
}

static PyObject *
tensor_is_contiguous(em_Tensor *self, PyObject *args, PyObject *kwargs)
{
    return PyBool_FromLong(em_tensor_is_contiguous(self));
}

static PyObject *
tensor_is_floating_point(em_Tensor *self, PyObject *noargs)
{
    return PyBool_FromLong(em_is_float(self->dtype));
}

static PyObject *
tensor_is_complex(em_Tensor *self, PyObject *noargs)
{
    return PyBool_FromLong(em_is_complex(self->dtype));
}

static PyObject *
tensor_storage_offset(em_Tensor *self, PyObject *noargs)
{
    return PyLong_FromSsize_t(self->offset);
}

static PyObject *
tensor_data_ptr(em_Tensor *self, PyObject *noargs)
{
    if (self->array == NULL)
        return PyLong_FromLong(0);
    return PyLong_FromVoidPtr(PyArray_DATA(self->array));
}

static PyObject *
tensor_untyped_storage(em_Tensor *self, PyObject *noargs)
{
    Py_INCREF(self->storage);
    return (PyObject *)self->storage;
}

/* Python scalar of a one-element tensor. */
static PyObject *
tensor_item(em_Tensor *self, PyObject *noargs)
{
    if (self->numel != 1) {
        PyErr_Format(PyExc_RuntimeError,
                     "a Tensor with %zd elements cannot be converted to Scalar", self->numel);
        return NULL;
    }
    if (self->array == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Tensor.item() cannot be called on meta tensors");
        return NULL;
    }
    PyObject *scalar = PyArray_GETITEM(self->array, PyArray_DATA(self->array));
    if (scalar == NULL)
        return NULL;
    if (PyFloat_CheckExact(scalar) || PyLong_CheckExact(scalar) || PyBool_Check(scalar) ||
        PyComplex_CheckExact(scalar))
        return scalar;
    PyObject *py = PyObject_CallMethod(scalar, "item", NULL);
    Py_DECREF(scalar);
    return py;
}

static PyObject *
tensor_tolist(em_Tensor *self, PyObject *noargs)
{
    if (self->array == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tolist() cannot be called on meta tensors");
        return NULL;
    }
    return PyArray_ToList(self->array);
}

static int
check_numpy_allowed(em_Tensor *self)
{
    if (self->requires_grad) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Can't call numpy() on Tensor that requires grad. Use "
                        "tensor.detach().numpy() instead.");
        return -1;
    }
    return 0;
}

static PyObject *
tensor_numpy(em_Tensor *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"force", NULL};
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$p:numpy", kwlist, &force))
        return NULL;
    if (!force && check_numpy_allowed(self) < 0)
        return NULL;
    return em_tensor_to_array(self);
}

static PyObject *
tensor_array(em_Tensor *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"dtype", "copy", NULL};
    PyObject *dtype = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:__array__", kwlist, &dtype, &copy))
        return NULL;
    if (check_numpy_allowed(self) < 0)
        return NULL;
    PyObject *arr = em_tensor_to_array(self);
    if (arr == NULL)
        return NULL;
    PyArray_Descr *descr = NULL;
    if (dtype != Py_None) {
        if (!PyArray_DescrConverter(dtype, &descr)) {
            Py_DECREF(arr);
            return NULL;
        }
    }
    bool need_cast = descr != NULL && !PyArray_EquivTypes(descr, PyArray_DESCR((PyArrayObject *)arr));
    if (copy == Py_False && need_cast) {
        Py_XDECREF(descr);
        Py_DECREF(arr);
        PyErr_SetString(PyExc_ValueError,
                        "Unable to avoid copy while creating an array as requested.");
        return NULL;
    }
    if (need_cast || copy == Py_True) {
        if (descr == NULL) {
            descr = PyArray_DESCR((PyArrayObject *)arr);
            Py_INCREF(descr);
        }
        PyObject *res = PyArray_CastToType((PyArrayObject *)arr, descr, 0);
        Py_DECREF(arr);
        return res;
    }
    Py_XDECREF(descr);
    return arr;
}

static PyObject *
tensor_detach(em_Tensor *self, PyObject *noargs)
{
    return (PyObject *)em_tensor_alias(self);
}

static PyObject *
tensor_detach_(em_Tensor *self, PyObject *noargs)
{
    Py_CLEAR(self->grad_fn);
    self->requires_grad = 0;
    self->output_nr = 0;
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *
tensor_requires_grad_(em_Tensor *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"requires_grad", NULL};
    int flag = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:requires_grad_", kwlist, &flag))
        return NULL;
    if (set_requires_grad(self, flag) < 0)
        return NULL;
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *
tensor_retain_grad(em_Tensor *self, PyObject *noargs)
{
    if (!self->requires_grad) {
        PyErr_SetString(PyExc_RuntimeError,
                        "can't retain_grad on Tensor that has requires_grad=False");
        return NULL;
    }
    if (self->grad_fn != NULL)
        self->retains_grad = 1;
    Py_RETURN_NONE;
}

static PyObject *
tensor_make_subclass(PyObject *unused, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"cls", "data", "require_grad", "keep_view", NULL};
    PyTypeObject *cls;
    PyObject *data;
    int require_grad = 0, keep_view = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!|pp:_make_subclass", kwlist,
                                     &PyType_Type, &cls, &em_Tensor_Type, &data,
                                     &require_grad, &keep_view))
        return NULL;
    if (!PyType_IsSubtype(cls, &em_Tensor_Type)) {
        PyErr_SetString(PyExc_TypeError, "cls must be a subclass of Tensor");
        return NULL;
    }
    em_Tensor *src = (em_Tensor *)data;
    em_Tensor *t = (em_Tensor *)cls->tp_alloc(cls, 0);
    if (t == NULL)
        return NULL;
    t->sizes = t->inline_geom;
    t->strides = t->inline_geom + EM_INLINE_DIMS;
    if (em_tensor_set_geom(t, src->ndim, src->sizes, src->strides) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    t->dtype = src->dtype;
    t->offset = src->offset;
    Py_XINCREF(src->array);
    t->array = src->array;
    Py_INCREF(src->storage);
    t->storage = src->storage;
    Py_XINCREF(src->trace);
    t->trace = src->trace;
    if (keep_view && src->base != NULL) {
        /* the same view of the same base (a symbolic tracer's view: [dynamic]) */
        t->base = Py_NewRef(src->base);
        t->view_steps = Py_XNewRef(src->view_steps);
        t->view_version = src->view_version;
        t->view_kind = src->view_kind;
    }
    if (require_grad && set_requires_grad(t, 1) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return (PyObject *)t;
}

static PyObject *
tensor_reduce_placeholder(em_Tensor *self, PyObject *noargs)
{
    PyErr_SetString(PyExc_TypeError, "Tensor pickling is provided by ember's Python layer");
    return NULL;
}

static PyMethodDef tensor_methods[] = {
    {"size", (PyCFunction)(void (*)(void))tensor_size, METH_FASTCALL | METH_KEYWORDS,
     "size(dim=None): the shape, or the size of one dimension."},
    {"stride", (PyCFunction)(void (*)(void))tensor_stride, METH_FASTCALL | METH_KEYWORDS,
     "stride(dim=None): strides in elements."},
    {"dim", (PyCFunction)tensor_dim, METH_NOARGS, NULL},
    {"ndimension", (PyCFunction)tensor_dim, METH_NOARGS, NULL},
    {"numel", (PyCFunction)tensor_numel, METH_NOARGS, NULL},
    {"nelement", (PyCFunction)tensor_numel, METH_NOARGS, NULL},
    {"element_size", (PyCFunction)tensor_element_size, METH_NOARGS, NULL},
    {"is_contiguous", (PyCFunction)(void (*)(void))tensor_is_contiguous,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"is_floating_point", (PyCFunction)tensor_is_floating_point, METH_NOARGS, NULL},
    {"is_complex", (PyCFunction)tensor_is_complex, METH_NOARGS, NULL},
    {"storage_offset", (PyCFunction)tensor_storage_offset, METH_NOARGS, NULL},
    {"data_ptr", (PyCFunction)tensor_data_ptr, METH_NOARGS, NULL},
    {"untyped_storage", (PyCFunction)tensor_untyped_storage, METH_NOARGS, NULL},
    {"item", (PyCFunction)tensor_item, METH_NOARGS, NULL},
    {"tolist", (PyCFunction)tensor_tolist, METH_NOARGS, NULL},
    {"numpy", (PyCFunction)(void (*)(void))tensor_numpy, METH_VARARGS | METH_KEYWORDS, NULL},
    {"__array__", (PyCFunction)(void (*)(void))tensor_array, METH_VARARGS | METH_KEYWORDS,
     NULL},
    {"detach", (PyCFunction)tensor_detach, METH_NOARGS, NULL},
    {"detach_", (PyCFunction)tensor_detach_, METH_NOARGS, NULL},
    {"requires_grad_", (PyCFunction)(void (*)(void))tensor_requires_grad_,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"retain_grad", (PyCFunction)tensor_retain_grad, METH_NOARGS, NULL},
    {"_make_subclass", (PyCFunction)(void (*)(void))tensor_make_subclass,
     METH_VARARGS | METH_KEYWORDS | METH_STATIC, NULL},
    {"__reduce_ex_placeholder__", (PyCFunction)tensor_reduce_placeholder, METH_NOARGS, NULL},
    {NULL},
};

/* ------------------------------------------------------------------ protocols */

static PyObject *
tensor_repr(em_Tensor *self)
{
    if (repr_hook == NULL)
        return PyUnicode_FromFormat("<ember.Tensor object at %p>", self);
    return PyObject_CallOneArg(repr_hook, (PyObject *)self);
}

static Py_hash_t
tensor_hash(PyObject *self)
{
    return _Py_HashPointer(self);
}

/* The Python operators call ops by id (op_ids.h); NotImplemented before install(). */
static PyObject *
slot_call(int id, PyObject *a, PyObject *b)
{
    em_Op *op = em_op_lookup(id);
    if (op == NULL)
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *other = em_Tensor_Check(a) ? b : a;
    if (!em_Tensor_Check(other) && !em_is_number(other) && !em_is_symint(other))
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *args[2] = {a, b};
    return em_op_call(op, args, 2);
}

#define BINARY_SLOT(fname, slot)                                  \
    static PyObject *fname(PyObject *a, PyObject *b)              \
    {                                                             \
        return slot_call(slot, a, b);                             \
    }

BINARY_SLOT(tensor_nb_add, EM_OP_ADD)
BINARY_SLOT(tensor_nb_sub, EM_OP_SUB)
BINARY_SLOT(tensor_nb_mul, EM_OP_MUL)
BINARY_SLOT(tensor_nb_div, EM_OP_DIV)
BINARY_SLOT(tensor_nb_floordiv, EM_OP_FLOOR_DIVIDE)
BINARY_SLOT(tensor_nb_mod, EM_OP_REMAINDER)
BINARY_SLOT(tensor_nb_and, EM_OP_BITWISE_AND)
BINARY_SLOT(tensor_nb_or, EM_OP_BITWISE_OR)
BINARY_SLOT(tensor_nb_xor, EM_OP_BITWISE_XOR)
BINARY_SLOT(tensor_nb_lshift, EM_OP_BITWISE_LEFT_SHIFT)
BINARY_SLOT(tensor_nb_rshift, EM_OP_BITWISE_RIGHT_SHIFT)
BINARY_SLOT(tensor_nb_iadd, EM_OP_ADD_)
BINARY_SLOT(tensor_nb_isub, EM_OP_SUB_)
BINARY_SLOT(tensor_nb_imul, EM_OP_MUL_)
BINARY_SLOT(tensor_nb_idiv, EM_OP_DIV_)

static PyObject *
tensor_nb_matmul(PyObject *a, PyObject *b)
{
    if (!em_Tensor_Check(a) || !em_Tensor_Check(b))
        Py_RETURN_NOTIMPLEMENTED;
    return slot_call(EM_OP_MATMUL, a, b);
}

static PyObject *
tensor_nb_pow(PyObject *a, PyObject *b, PyObject *mod)
{
    if (mod != Py_None) {
        PyErr_SetString(PyExc_TypeError, "pow() with a modulus is not supported for tensors");
        return NULL;
    }
    return slot_call(EM_OP_POW, a, b);
}

static PyObject *
unary_slot(int id, PyObject *a, const char *what)
{
    em_Op *op = em_op_lookup(id);
    if (op == NULL) {
        PyErr_Format(PyExc_TypeError, "bad operand type for %s: 'Tensor'", what);
        return NULL;
    }
    return em_op_call(op, &a, 1);
}

#define UNARY_SLOT(fname, id, what)                               \
    static PyObject *fname(PyObject *a)                           \
    {                                                             \
        return unary_slot(id, a, what);                           \
    }

UNARY_SLOT(tensor_nb_neg, EM_OP_NEG, "unary -")
UNARY_SLOT(tensor_nb_abs, EM_OP_ABS, "abs()")
UNARY_SLOT(tensor_nb_invert, EM_OP___INVERT__, "unary ~")   /* a TypeError for floats */

static PyObject *
tensor_nb_pos(PyObject *a)
{
    Py_INCREF(a);
    return a;
}

static int
tensor_nb_bool(em_Tensor *self)
{
    if (self->numel != 1) {
        PyErr_SetString(PyExc_RuntimeError,
                        self->numel == 0
                            ? "Boolean value of Tensor with no values is ambiguous"
                            : "Boolean value of Tensor with more than one value is ambiguous");
        return -1;
    }
    PyObject *v = tensor_item(self, NULL);
    if (v == NULL)
        return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

/* float(t), int(t): one element, as PyTorch words it */
static int
check_one_element(em_Tensor *self)
{
    if (self->numel == 1)
        return 0;
    PyErr_SetString(PyExc_ValueError, "only one element tensors can be converted to Python "
                    "scalars");
    return -1;
}

static PyObject *
item_as(em_Tensor *self, PyObject *(*convert)(PyObject *))
{
    if (check_one_element(self) < 0)
        return NULL;
    PyObject *v = tensor_item(self, NULL);
    PyObject *r = v ? convert(v) : NULL;
    Py_XDECREF(v);
    return r;
}

static PyObject *
tensor_nb_float(em_Tensor *self)
{
    return item_as(self, PyNumber_Float);
}

static PyObject *
tensor_nb_int(em_Tensor *self)
{
    return item_as(self, PyNumber_Long);
}

static PyObject *
tensor_nb_index(em_Tensor *self)
{
    if (self->numel != 1 || !(em_is_int(self->dtype) || self->dtype == EM_BOOL)) {
        PyErr_SetString(PyExc_TypeError,
                        "only integer tensors of a single element can be converted to an index");
        return NULL;
    }
    return tensor_nb_int(self);
}

static PyNumberMethods tensor_as_number = {
    .nb_add = tensor_nb_add,
    .nb_subtract = tensor_nb_sub,
    .nb_multiply = tensor_nb_mul,
    .nb_true_divide = tensor_nb_div,
    .nb_floor_divide = tensor_nb_floordiv,
    .nb_remainder = tensor_nb_mod,
    .nb_power = tensor_nb_pow,
    .nb_negative = tensor_nb_neg,
    .nb_positive = tensor_nb_pos,
    .nb_absolute = tensor_nb_abs,
    .nb_invert = tensor_nb_invert,
    .nb_and = tensor_nb_and,
    .nb_or = tensor_nb_or,
    .nb_xor = tensor_nb_xor,
    .nb_lshift = tensor_nb_lshift,
    .nb_rshift = tensor_nb_rshift,
    .nb_matrix_multiply = tensor_nb_matmul,
    .nb_inplace_add = tensor_nb_iadd,
    .nb_inplace_subtract = tensor_nb_isub,
    .nb_inplace_multiply = tensor_nb_imul,
    .nb_inplace_true_divide = tensor_nb_idiv,
    .nb_bool = (inquiry)tensor_nb_bool,
    .nb_float = (unaryfunc)tensor_nb_float,
    .nb_int = (unaryfunc)tensor_nb_int,
    .nb_index = (unaryfunc)tensor_nb_index,
};

static PyObject *
tensor_richcompare(PyObject *a, PyObject *b, int op)
{
    static const em_op_id ids[] = {
        [Py_LT] = EM_OP_LT, [Py_LE] = EM_OP_LE, [Py_EQ] = EM_OP_EQ,
        [Py_NE] = EM_OP_NE, [Py_GT] = EM_OP_GT, [Py_GE] = EM_OP_GE,
    };
    if (op < 0 || op >= (int)(sizeof ids / sizeof ids[0]))
        Py_RETURN_NOTIMPLEMENTED;
    return slot_call(ids[op], a, b);
}

static Py_ssize_t
tensor_len(em_Tensor *self)
{
    if (self->ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
        return -1;
    }
    return self->sizes[0];
}

static PyObject *
tensor_getitem(PyObject *self, PyObject *key)
{
    em_Op *op = em_op_lookup(EM_OP___GETITEM__);
    if (op == NULL) {
        PyErr_SetString(PyExc_TypeError, "indexing is not available yet");
        return NULL;
    }
    PyObject *args[2] = {self, key};
    return em_op_call(op, args, 2);
}

static int
tensor_setitem(PyObject *self, PyObject *key, PyObject *value)
{
    em_Op *op = em_op_lookup(EM_OP___SETITEM__);
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "Tensor does not support item deletion");
        return -1;
    }
    if (op == NULL) {
        PyErr_SetString(PyExc_TypeError, "item assignment is not available yet");
        return -1;
    }
    PyObject *args[3] = {self, key, value};
    PyObject *r = em_op_call(op, args, 3);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Protocols written in Python (ember/_tensor.py puts them in the type's dict) reach
 * their slots through these: a dict entry alone does not fill a static type's slot. */
static PyObject *
call_python_protocol(PyObject *self, const char *name, PyObject *arg)
{
    PyObject *fn = PyDict_GetItemString(em_Tensor_Type.tp_dict, name);
    if (fn == NULL) {
        PyErr_Format(PyExc_TypeError, "'ember.Tensor' object has no %s", name);
        return NULL;
    }
    return PyObject_CallFunctionObjArgs(fn, self, arg, NULL);
}

static PyObject *
tensor_iter(PyObject *self)
{
    return call_python_protocol(self, "__iter__", NULL);
}

static int
tensor_contains(PyObject *self, PyObject *element)
{
    PyObject *r = call_python_protocol(self, "__contains__", element);
    if (r == NULL)
        return -1;
    int truth = PyObject_IsTrue(r);
    Py_DECREF(r);
    return truth;
}

static PyMappingMethods tensor_as_mapping = {
    .mp_length = (lenfunc)tensor_len,
    .mp_subscript = tensor_getitem,
    .mp_ass_subscript = tensor_setitem,
};

static PySequenceMethods tensor_as_sequence = {
    .sq_length = (lenfunc)tensor_len,
    .sq_contains = tensor_contains,
};

/* Tensor(*sizes) / Tensor(data): the legacy constructor, default dtype. */
static PyObject *
tensor_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *ember = NULL, *fn = NULL, *res = NULL;
    ember = PyImport_ImportModule("ember._tensor_new");
    if (ember == NULL)
        goto error;
    fn = PyObject_GetAttrString(ember, "legacy_new");
    if (fn == NULL)
        goto error;
    PyObject *full = PyTuple_New(PyTuple_GET_SIZE(args) + 1);
    if (full == NULL)
        goto error;
    Py_INCREF(type);
    PyTuple_SET_ITEM(full, 0, (PyObject *)type);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); i++) {
        Py_INCREF(PyTuple_GET_ITEM(args, i));
        PyTuple_SET_ITEM(full, i + 1, PyTuple_GET_ITEM(args, i));
    }
    res = PyObject_Call(fn, full, kwargs);
    Py_DECREF(full);
error:
    Py_XDECREF(fn);
    Py_XDECREF(ember);
    return res;
}

PyTypeObject em_Tensor_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember.Tensor",
    .tp_basicsize = sizeof(em_Tensor),
    .tp_dealloc = (destructor)tensor_dealloc,
    .tp_repr = (reprfunc)tensor_repr,
    .tp_as_number = &tensor_as_number,
    .tp_as_sequence = &tensor_as_sequence,
    .tp_as_mapping = &tensor_as_mapping,
    .tp_hash = tensor_hash,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A multi-dimensional array with autograd, stored in a NumPy array.",
    .tp_traverse = (traverseproc)tensor_traverse,
    .tp_clear = (inquiry)tensor_clear,
    .tp_richcompare = tensor_richcompare,
    .tp_iter = tensor_iter,
    .tp_weaklistoffset = offsetof(em_Tensor, weakreflist),
    .tp_methods = tensor_methods,
    .tp_members = tensor_members,
    .tp_getset = tensor_getset,
    .tp_dictoffset = offsetof(em_Tensor, dict),
    .tp_new = tensor_new,
};

/* ------------------------------------------------------------------ module hooks */

static PyObject *
set_tensor_hooks(PyObject *self, PyObject *args)
{
    PyObject *repr, *cpu, *meta;
    if (!PyArg_ParseTuple(args, "OOO:_set_tensor_hooks", &repr, &cpu, &meta))
        return NULL;
    Py_INCREF(repr);
    Py_XSETREF(repr_hook, repr);
    Py_INCREF(cpu);
    Py_XSETREF(device_cpu, cpu);
    Py_INCREF(meta);
    Py_XSETREF(device_meta, meta);
    Py_RETURN_NONE;
}

/* Adds Python-level methods and properties to the C type (ember/_tensor.py). */
static PyObject *
add_tensor_attrs(PyObject *self, PyObject *dict)
{
    if (!PyDict_Check(dict)) {
        PyErr_SetString(PyExc_TypeError, "expected a dict");
        return NULL;
    }
    if (PyDict_Update(em_Tensor_Type.tp_dict, dict) < 0)
        return NULL;
    PyType_Modified(&em_Tensor_Type);
    Py_RETURN_NONE;
}

static PyObject *
from_numpy(PyObject *self, PyObject *arr)
{
    if (!PyArray_Check(arr)) {
        PyErr_Format(PyExc_TypeError, "expected np.ndarray (got %s)", Py_TYPE(arr)->tp_name);
        return NULL;
    }
    return (PyObject *)em_tensor_from_array((PyArrayObject *)arr, NULL, 0);
}

static PyObject *
meta_tensor(PyObject *self, PyObject *args)
{
    PyObject *shape, *strides = Py_None, *dtype;
    if (!PyArg_ParseTuple(args, "OO|O:_meta_tensor", &shape, &dtype, &strides))
        return NULL;
    em_Geom g = {0};
    g.dtype = em_dtype_from_object(dtype);
    if (g.dtype == EM_UNDEFINED)
        return NULL;
    PyObject *seq = PySequence_Fast(shape, "shape must be a sequence");
    if (seq == NULL)
        return NULL;
    g.ndim = (int)PySequence_Fast_GET_SIZE(seq);
    for (int i = 0; i < g.ndim && i < EM_MAX_DIMS; i++)
        g.sizes[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i));
    Py_DECREF(seq);
    if (PyErr_Occurred())
        return NULL;
    em_contiguous_strides(&g);
    if (strides != Py_None) {
        seq = PySequence_Fast(strides, "strides must be a sequence");
        if (seq == NULL)
            return NULL;
        for (int i = 0; i < g.ndim && i < PySequence_Fast_GET_SIZE(seq); i++)
            g.strides[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i));
        Py_DECREF(seq);
        if (PyErr_Occurred())
            return NULL;
    }
    em_Tensor *t = em_tensor_empty(&g, true);
    if (t != NULL && em_tensor_set_geom(t, g.ndim, g.sizes, g.strides) < 0)
        Py_CLEAR(t);
    return (PyObject *)t;
}

static PyMethodDef tensor_module_methods[] = {
    {"_set_tensor_hooks", set_tensor_hooks, METH_VARARGS, NULL},
    {"_add_tensor_attrs", add_tensor_attrs, METH_O, NULL},
    {"from_numpy", from_numpy, METH_O,
     "from_numpy(ndarray): a Tensor sharing the array's memory."},
    {"_meta_tensor", meta_tensor, METH_VARARGS,
     "_meta_tensor(shape, dtype, strides=None): a tensor with shape and dtype only."},
    {NULL},
};

int
em_tensor_init_type(PyObject *module)
{
    Size_Type.tp_base = &PyTuple_Type;
    if (PyType_Ready(&Size_Type) < 0 || PyType_Ready(&em_Storage_Type) < 0 ||
        PyType_Ready(&em_Tensor_Type) < 0)
        return -1;
    Py_INCREF(&em_Tensor_Type);
    if (PyModule_AddObject(module, "Tensor", (PyObject *)&em_Tensor_Type) < 0)
        return -1;
    Py_INCREF(&Size_Type);
    if (PyModule_AddObject(module, "Size", (PyObject *)&Size_Type) < 0)
        return -1;
    Py_INCREF(&em_Storage_Type);
    if (PyModule_AddObject(module, "UntypedStorage", (PyObject *)&em_Storage_Type) < 0)
        return -1;
    return PyModule_AddFunctions(module, tensor_module_methods);
}
