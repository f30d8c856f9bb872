/* registry.c: finds an eager kernel by the name the op table gives. */
#include "ember.h"
#include "kutil.h"

static const em_KernelEntry *families[] = {
    em_elementwise_kernels, em_reduction_kernels, em_view_kernels, em_linalg_kernels,
    em_factory_kernels, em_random_kernels, em_nn_kernels, em_conv_kernels, em_pool_kernels,
    em_attention_kernels, em_ctc_kernels, em_grid_sample_kernels, em_embedding_bag_kernels,
    em_shape_kernels, em_indexing_kernels,
};

em_kernel_fn
em_find_kernel(const char *name)
{
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (const em_KernelEntry *e = families[f]; e->name != NULL; e++)
            if (strcmp(e->name, name) == 0)
                return e->fn;
    return NULL;
}

static PyObject *
kernel_names(PyObject *self, PyObject *noargs)
{
    PyObject *list = PyList_New(0);
    for (size_t f = 0; list != NULL && f < sizeof families / sizeof families[0]; f++) {
        for (const em_KernelEntry *e = families[f]; e->name != NULL; e++) {
            PyObject *s = PyUnicode_FromString(e->name);
            if (s == NULL || PyList_Append(list, s) < 0) {
                Py_XDECREF(s);
                Py_CLEAR(list);
                break;
            }
            Py_DECREF(s);
        }
    }
    return list;
}

static PyMethodDef registry_methods[] = {
    {"_kernel_names", kernel_names, METH_NOARGS, "Names of the C kernels ops may use."},
    {NULL},
};

int
em_registry_init(PyObject *module)
{
    if (em_nn_grad_init(module) < 0)
        return -1;
    return PyModule_AddFunctions(module, registry_methods);
}
