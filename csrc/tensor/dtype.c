/* dtype.c: ember's dtype objects and PyTorch's type-promotion lattice. */
#include "ember.h"
#include <structmember.h>

em_DType *em_dtypes[EM_NDTYPES];
em_dtype_t em_default_dtype = EM_FLOAT32;

static const struct {
    const char *name;
    const char *torch_name;
    int npy_type;
} dtype_info[EM_NDTYPES] = {
    [EM_BOOL] = {"bool", "Bool", NPY_BOOL},
    [EM_UINT8] = {"uint8", "Byte", NPY_UINT8},
    [EM_INT8] = {"int8", "Char", NPY_INT8},
    [EM_INT16] = {"int16", "Short", NPY_INT16},
    [EM_INT32] = {"int32", "Int", NPY_INT32},
    [EM_INT64] = {"int64", "Long", NPY_INT64},
    [EM_FLOAT16] = {"float16", "Half", NPY_FLOAT16},
    [EM_FLOAT32] = {"float32", "Float", NPY_FLOAT32},
    [EM_FLOAT64] = {"float64", "Double", NPY_FLOAT64},
    [EM_BFLOAT16] = {"bfloat16", "BFloat16", -1},     /* set by em_dtype_init */
    [EM_COMPLEX64] = {"complex64", "ComplexFloat", NPY_COMPLEX64},
    [EM_COMPLEX128] = {"complex128", "ComplexDouble", NPY_COMPLEX128},
};

/* NumPy's type number of ml_dtypes.bfloat16 (a user-defined NumPy dtype) */
static int npy_bfloat16 = -1;

const char *
em_dtype_torch_name(em_dtype_t t)
{
    return (t >= 0 && t < EM_NDTYPES) ? dtype_info[t].torch_name : "Undefined";
}

/* c10::promoteTypes restricted to ember's dtypes. */
em_dtype_t
em_promote_types(em_dtype_t a, em_dtype_t b)
{
    if (a == EM_UNDEFINED)
        return b;
    if (b == EM_UNDEFINED || a == b)
        return a;
    if (a == EM_BOOL)
        return b;
    if (b == EM_BOOL)
        return a;
    if (em_is_complex(a) || em_is_complex(b)) {
        /* the complex type whose parts hold both: float64 or complex128 anywhere gives
         * complex128, else complex64 (ember has no complex32) */
        if (a == EM_COMPLEX128 || b == EM_COMPLEX128 || a == EM_FLOAT64 || b == EM_FLOAT64)
            return EM_COMPLEX128;
        return EM_COMPLEX64;
    }
    if (em_is_float(a) || em_is_float(b)) {
        if (!em_is_float(a))
            return b;
        if (!em_is_float(b))
            return a;
        if (em_dtypes[a]->itemsize == em_dtypes[b]->itemsize)
            return EM_FLOAT32;          /* float16 and bfloat16: neither holds the other */
        return em_dtypes[a]->itemsize > em_dtypes[b]->itemsize ? a : b;
    }
    /* two distinct integer types */
    if (a == EM_UINT8 || b == EM_UINT8) {
        em_dtype_t other = a == EM_UINT8 ? b : a;
        return other == EM_INT8 ? EM_INT16 : other;
    }
    return em_dtypes[a]->itemsize >= em_dtypes[b]->itemsize ? a : b;
}

em_dtype_t
em_dtype_from_npy(int npy_type)
{
    switch (npy_type) {
    case NPY_BOOL: return EM_BOOL;
    case NPY_UINT8: return EM_UINT8;
    case NPY_INT8: return EM_INT8;
    case NPY_INT16: return EM_INT16;
    case NPY_INT32: return EM_INT32;
    case NPY_INT64: return EM_INT64;
    case NPY_FLOAT16: return EM_FLOAT16;
    case NPY_FLOAT32: return EM_FLOAT32;
    case NPY_FLOAT64: return EM_FLOAT64;
    case NPY_COMPLEX64: return EM_COMPLEX64;
    case NPY_COMPLEX128: return EM_COMPLEX128;
    default:
        if (npy_type == npy_bfloat16 && npy_bfloat16 >= 0)
            return EM_BFLOAT16;
        /* long long and long are both 64 bits here; NumPy may use either number */
        if (npy_type == NPY_LONGLONG || npy_type == NPY_LONG)
            return EM_INT64;
        if (npy_type == NPY_INT)
            return EM_INT32;
        return EM_UNDEFINED;
    }
}

em_dtype_t
em_dtype_from_object(PyObject *obj)
{
    if (PyObject_TypeCheck(obj, &em_DType_Type))
        return ((em_DType *)obj)->code;
    if (obj == (PyObject *)&PyFloat_Type)
        return EM_FLOAT64;
    if (obj == (PyObject *)&PyLong_Type)
        return EM_INT64;
    if (obj == (PyObject *)&PyBool_Type)
        return EM_BOOL;
    if (obj == (PyObject *)&PyComplex_Type)
        return EM_COMPLEX128;
    PyArray_Descr *descr = NULL;
    if (PyArray_DescrConverter2(obj, &descr) && descr != NULL) {
        em_dtype_t t = em_dtype_from_npy(descr->type_num);
        Py_DECREF(descr);
        if (t != EM_UNDEFINED)
            return t;
    }
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "expected an ember dtype (such as ember.float32), got %R",
                 obj);
    return EM_UNDEFINED;
}

/* ------------------------------------------------------------------ the type */

static PyObject *
dtype_repr(em_DType *self)
{
    return PyUnicode_FromFormat("ember.%s", self->name);
}

static PyObject *
dtype_is_floating_point(em_DType *self, void *c)
{
    return PyBool_FromLong(em_is_float(self->code));
}

static PyObject *
dtype_is_signed(em_DType *self, void *c)
{
    return PyBool_FromLong(self->code != EM_BOOL && self->code != EM_UINT8);
}

static PyObject *
dtype_is_complex(em_DType *self, void *c)
{
    return PyBool_FromLong(em_is_complex(self->code));
}

static PyObject *
dtype_torch_name(em_DType *self, void *c)
{
    return PyUnicode_FromString(em_dtype_torch_name(self->code));
}

static PyObject *
dtype_reduce(em_DType *self, PyObject *noargs)
{
    /* pickles as the module attribute, so the singleton survives */
    return PyUnicode_FromString(self->name);
}

static PyGetSetDef dtype_getset[] = {
    {"is_floating_point", (getter)dtype_is_floating_point, NULL, NULL, NULL},
    {"is_signed", (getter)dtype_is_signed, NULL, NULL, NULL},
    {"is_complex", (getter)dtype_is_complex, NULL, NULL, NULL},
    {"_torch_name", (getter)dtype_torch_name, NULL,
     "'Float': the scalar type name PyTorch's messages use", NULL},
    {NULL},
};

static PyMemberDef dtype_members[] = {
    {"itemsize", T_INT, offsetof(em_DType, itemsize), READONLY, NULL},
    {"numpy_dtype", T_OBJECT, offsetof(em_DType, descr), READONLY, NULL},
    {"_code", T_INT, offsetof(em_DType, code), READONLY, NULL},
    {"_name", T_STRING, offsetof(em_DType, name), READONLY,
     "'float32', as the attribute of ember"},
    {NULL},
};

static PyMethodDef dtype_methods[] = {
    {"__reduce__", (PyCFunction)dtype_reduce, METH_NOARGS, NULL},
    {NULL},
};

PyTypeObject em_DType_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember.dtype",
    .tp_basicsize = sizeof(em_DType),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_repr = (reprfunc)dtype_repr,
    .tp_getset = dtype_getset,
    .tp_members = dtype_members,
    .tp_methods = dtype_methods,
    .tp_doc = "The data type of an ember Tensor (ember.float32, ember.int64, ...).",
};

/* ml_dtypes.bfloat16's NumPy descriptor (a new reference), its type number noted. */
static PyArray_Descr *
bfloat16_descr(void)
{
    PyArray_Descr *descr = NULL;
    PyObject *mod = PyImport_ImportModule("ml_dtypes"), *type = NULL;
    if (mod == NULL) {
        PyErr_SetString(PyExc_ImportError, "ember needs the ml_dtypes package for its "
                        "bfloat16 dtype (pip install ml_dtypes)");
        return NULL;
    }
    type = PyObject_GetAttrString(mod, "bfloat16");
    Py_DECREF(mod);
    if (type == NULL)
        return NULL;
    if (!PyArray_DescrConverter(type, &descr))
        descr = NULL;
    Py_DECREF(type);
    if (descr != NULL)
        npy_bfloat16 = descr->type_num;
    return descr;
}

int
em_dtype_init(PyObject *module)
{
    if (PyType_Ready(&em_DType_Type) < 0)
        return -1;
    for (int i = 0; i < EM_NDTYPES; i++) {
        em_DType *d = PyObject_New(em_DType, &em_DType_Type);
        if (d == NULL)
            return -1;
        d->code = (em_dtype_t)i;
        d->name = dtype_info[i].name;
        d->descr = i == EM_BFLOAT16 ? bfloat16_descr()
                                    : PyArray_DescrFromType(dtype_info[i].npy_type);
        if (d->descr == NULL)
            return -1;
        d->npy_type = d->descr->type_num;
        d->itemsize = (int)PyDataType_ELSIZE(d->descr);
        em_dtypes[i] = d;
        Py_INCREF(d);
        if (PyModule_AddObject(module, d->name, (PyObject *)d) < 0) {
            Py_DECREF(d);
            return -1;
        }
    }
    Py_INCREF(&em_DType_Type);
    return PyModule_AddObject(module, "dtype", (PyObject *)&em_DType_Type);
}
