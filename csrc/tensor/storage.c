/* storage.c: the memory shared by a tensor and its views, with its version counter. */
#include "ember.h"

em_Storage *
em_storage_new(PyArrayObject *array)
{
    em_Storage *s = PyObject_New(em_Storage, &em_Storage_Type);
    if (s == NULL)
        return NULL;
    Py_XINCREF(array);
    s->array = array;
    s->version = 0;
    return s;
}

static void
storage_dealloc(em_Storage *self)
{
    Py_XDECREF(self->array);
    PyObject_Free(self);
}

static PyObject *
storage_nbytes(em_Storage *self, void *c)
{
    if (self->array == NULL)
        return PyLong_FromLong(0);
    return PyLong_FromSsize_t(PyArray_NBYTES(self->array));
}

static PyObject *
storage_version(em_Storage *self, void *c)
{
    return PyLong_FromUnsignedLongLong(self->version);
}

static PyObject *
storage_data_ptr(em_Storage *self, PyObject *noargs)
{
    if (self->array == NULL)
        return PyLong_FromLong(0);
    return PyLong_FromVoidPtr(PyArray_DATA(self->array));
}

/* _snapshot() -> (copy of the memory, version); _restore(snapshot) puts both back. For
 * graphs that run their writes into inputs in place: a call that raises leaves the
 * inputs as they were, so the frame can run again eagerly from eager's starting state. */
static PyObject *
storage_snapshot(em_Storage *self, PyObject *noargs)
{
    PyObject *copy = self->array == NULL ? Py_NewRef(Py_None)
                                         : PyArray_NewCopy(self->array, NPY_KEEPORDER);
    if (copy == NULL)
        return NULL;
    return Py_BuildValue("(NK)", copy, (unsigned long long)self->version);
}

static PyObject *
storage_restore(em_Storage *self, PyObject *snapshot)
{
    PyObject *copy;
    unsigned long long version;
    if (!PyArg_ParseTuple(snapshot, "OK:_restore", &copy, &version))
        return NULL;
    if (self->array != NULL) {
        if (!PyArray_Check(copy)) {
            PyErr_SetString(PyExc_TypeError, "_restore: not a snapshot of this storage");
            return NULL;
        }
        if (PyArray_CopyInto(self->array, (PyArrayObject *)copy) < 0)
            return NULL;
    }
    self->version = (uint64_t)version;
    Py_RETURN_NONE;
}

static PyGetSetDef storage_getset[] = {
    {"nbytes", (getter)storage_nbytes, NULL, NULL, NULL},
    {"version", (getter)storage_version, NULL, NULL, NULL},
    {NULL},
};

static PyMethodDef storage_methods[] = {
    {"data_ptr", (PyCFunction)storage_data_ptr, METH_NOARGS, NULL},
    {"_snapshot", (PyCFunction)storage_snapshot, METH_NOARGS, NULL},
    {"_restore", (PyCFunction)storage_restore, METH_O, NULL},
    {NULL},
};

PyTypeObject em_Storage_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember.UntypedStorage",
    .tp_basicsize = sizeof(em_Storage),
    .tp_dealloc = (destructor)storage_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_getset = storage_getset,
    .tp_methods = storage_methods,
    .tp_doc = "The memory behind a tensor and its views; holds the version counter.",
};
