/* module.c: ember._C, the one extension module. */
#define EM_IMPORT_ARRAY
#include "ember.h"

static PyObject *
result_type(PyObject *self, PyObject *args)
{
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n > 16) {
        PyErr_SetString(PyExc_TypeError, "result_type takes at most 16 operands");
        return NULL;
    }
    PyObject *ops[16];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyTuple_GET_ITEM(args, i);
        if (!em_Tensor_Check(o) && !em_is_number(o)) {
            PyErr_Format(PyExc_TypeError,
                         "result_type(): expected Tensors or numbers, got %s",
                         Py_TYPE(o)->tp_name);
            return NULL;
        }
        ops[i] = o;
    }
    em_dtype_t t = em_result_type(ops, (int)n);
    if (t == EM_UNDEFINED) {
        PyErr_SetString(PyExc_TypeError, "result_type() needs at least one operand");
        return NULL;
    }
    Py_INCREF(em_dtypes[t]);
    return (PyObject *)em_dtypes[t];
}

static PyObject *
promote_types(PyObject *self, PyObject *args)
{
    PyObject *a, *b;
    if (!PyArg_ParseTuple(args, "O!O!:promote_types", &em_DType_Type, &a, &em_DType_Type, &b))
        return NULL;
    em_dtype_t t = em_promote_types(((em_DType *)a)->code, ((em_DType *)b)->code);
    Py_INCREF(em_dtypes[t]);
    return (PyObject *)em_dtypes[t];
}

static PyObject *
get_default_dtype(PyObject *self, PyObject *noargs)
{
    Py_INCREF(em_dtypes[em_default_dtype]);
    return (PyObject *)em_dtypes[em_default_dtype];
}

static PyObject *
set_default_dtype(PyObject *self, PyObject *d)
{
    if (!PyObject_TypeCheck(d, &em_DType_Type) || !em_is_float(((em_DType *)d)->code)) {
        PyErr_SetString(PyExc_TypeError,
                        "only floating-point types are supported as the default type");
        return NULL;
    }
    em_default_dtype = ((em_DType *)d)->code;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"result_type", result_type, METH_VARARGS,
     "result_type(*operands): the dtype PyTorch's promotion gives these tensors and numbers."},
    {"promote_types", promote_types, METH_VARARGS, NULL},
    {"get_default_dtype", get_default_dtype, METH_NOARGS, NULL},
    {"set_default_dtype", set_default_dtype, METH_O, NULL},
    {"_llvm_info", em_llvm_info, METH_NOARGS, NULL},
    {"_set_default_generator", em_set_default_generator, METH_O, NULL},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ember._C",
    .m_doc = "Ember's C core: tensors, the dispatcher, eager kernels, autograd.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__C(void)
{
    import_array();
    import_umath();
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (em_numpy_init() < 0 || PyModule_AddIntConstant(m, "MAX_DIMS", EM_MAX_DIMS) < 0 ||
        em_dtype_init(m) < 0 || em_dlpack_init(m) < 0 || em_tensor_init_type(m) < 0 ||
        em_mode_init(m) < 0 ||
        em_op_init(m) < 0 || em_node_init_type(m) < 0 || em_engine_init(m) < 0 ||
        em_view_init(m) < 0 || em_reduction_init() < 0 || em_registry_init(m) < 0 ||
        em_capture_init(m) < 0 || em_compiled_frame_init(m) < 0 ||
        em_compiled_graph_init(m) < 0 || em_jit_init_type(m) < 0 || em_blas_init(m) < 0 ||
        em_threadpool_init(m) < 0 || em_aot_function_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
