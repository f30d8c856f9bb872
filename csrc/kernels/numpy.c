/* numpy.c: the NumPy glue of the kernels (ember.h), set up once when ember._C is
 * imported: the NumPy functions they call (em_np), NumPy's errstate set to ignore
 * (PyTorch never warns about inf/nan), and the calls of ufuncs and their methods. */
#include "ember.h"

PyObject *em_numpy;
em_NumPy em_np;
PyObject *em_str_unsafe, *em_str_at, *em_str_reduce, *em_str_accumulate;

static PyObject *extobj_var;       /* NumPy's errstate context variable */
static PyObject *extobj_ignore;    /* errstate(all="ignore") */
static PyObject *kw_out_sig;       /* ("out", "signature", "casting") */
static PyObject *kw_out;           /* ("out", "casting") */
static PyObject *sig_cache[4][EM_NDTYPES][EM_NDTYPES];

static int
errstate_init(void)
{
    PyObject *umath = PyImport_ImportModule("numpy._core.umath");
    if (umath == NULL)
        return -1;
    extobj_var = PyObject_GetAttrString(umath, "_extobj_contextvar");
    PyObject *make = PyObject_GetAttrString(umath, "_make_extobj");
    Py_DECREF(umath);
    PyObject *kw = Py_BuildValue("{ss}", "all", "ignore");
    PyObject *noargs = PyTuple_New(0);
    if (extobj_var != NULL && make != NULL && kw != NULL && noargs != NULL)
        extobj_ignore = PyObject_Call(make, noargs, kw);
    Py_XDECREF(make);
    Py_XDECREF(kw);
    Py_XDECREF(noargs);
    return extobj_ignore == NULL ? -1 : 0;
}

int
em_numpy_init(void)
{
    if ((em_numpy = PyImport_ImportModule("numpy")) == NULL || errstate_init() < 0)
        return -1;
#define EM_NUMPY_LOOKUP(name)                                           \
    if ((em_np.name = PyObject_GetAttrString(em_numpy, #name)) == NULL) \
        return -1;
    EM_NUMPY_FUNCTIONS(EM_NUMPY_LOOKUP)
#undef EM_NUMPY_LOOKUP
    em_str_unsafe = PyUnicode_InternFromString("unsafe");
    em_str_at = PyUnicode_InternFromString("at");
    em_str_reduce = PyUnicode_InternFromString("reduce");
    em_str_accumulate = PyUnicode_InternFromString("accumulate");
    kw_out_sig = Py_BuildValue("(sss)", "out", "signature", "casting");
    kw_out = Py_BuildValue("(ss)", "out", "casting");
    return (em_str_unsafe && em_str_at && em_str_reduce && em_str_accumulate && kw_out_sig &&
            kw_out) ? 0 : -1;
}

PyObject *
em_errstate_ignore(void)
{
    return PyContextVar_Set(extobj_var, extobj_ignore);
}

int
em_errstate_restore(PyObject *token)
{
    int st = PyContextVar_Reset(extobj_var, token);
    Py_DECREF(token);
    return st;
}

/* The loop signature (compute, ..., compute, result) of nin inputs, cached. */
static PyObject *
signature(int nin, em_dtype_t compute, em_dtype_t result)
{
    PyObject **slot = &sig_cache[nin][compute][result];
    if (*slot == NULL) {
        PyObject *t = PyTuple_New(nin + 1);
        if (t == NULL)
            return NULL;
        for (int i = 0; i <= nin; i++) {
            PyObject *d = (PyObject *)em_dtypes[i < nin ? compute : result]->descr;
            Py_INCREF(d);
            PyTuple_SET_ITEM(t, i, d);
        }
        *slot = t;
    }
    return *slot;
}

/* A Python int operand of an integer loop, wrapped to the loop's width as PyTorch
 * casts scalars (uint8 + -1 adds 255); NumPy 2 would raise OverflowError. */
static PyObject *
wrapped_int(PyObject *o, em_dtype_t t)
{
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    if (overflow) {
        PyErr_Format(PyExc_RuntimeError, "value cannot be converted to type %s without "
                     "overflow", em_dtypes[t]->name);
        return NULL;
    }
    switch (t) {
    case EM_UINT8: v = (uint8_t)v; break;
    case EM_INT8: v = (int8_t)v; break;
    case EM_INT16: v = (int16_t)v; break;
    case EM_INT32: v = (int32_t)v; break;
    default: break;
    }
    return PyLong_FromLongLong(v);
}

int
em_ufunc_call(PyObject *ufunc, PyObject **ins, int nin, PyArrayObject *out, em_dtype_t compute,
              em_dtype_t result)
{
    bool sig = compute != EM_UNDEFINED;
    if (nin < 1 || nin > 3 || (sig && (compute < 0 || compute >= EM_NDTYPES || result < 0 ||
                                       result >= EM_NDTYPES))) {
        PyErr_SetString(PyExc_SystemError, "em_ufunc_call: bad operand count or dtype");
        return -1;
    }
    PyObject *args[6], *owned[3] = {NULL};
    int st = -1, n = nin;
    for (int i = 0; i < nin; i++) {
        PyObject *o = ins[i];
        if (em_Tensor_Check(o)) {
            args[i] = (PyObject *)((em_Tensor *)o)->array;
        }
        else if (sig && em_is_int(compute) && PyLong_Check(o) && !PyBool_Check(o)) {
            if ((owned[i] = wrapped_int(o, compute)) == NULL)
                goto done;
            args[i] = owned[i];
        }
        else {
            args[i] = o;
        }
    }
    args[n++] = (PyObject *)out;
    if (sig && (args[n++] = signature(nin, compute, result)) == NULL)
        goto done;
    args[n++] = em_str_unsafe;
    PyObject *token = em_errstate_ignore();
    if (token == NULL)
        goto done;
    PyObject *r = PyObject_Vectorcall(ufunc, args, nin, sig ? kw_out_sig : kw_out);
    if (em_errstate_restore(token) < 0)
        Py_CLEAR(r);
    if (r != NULL) {
        Py_DECREF(r);
        st = 0;
    }
done:
    for (int i = 0; i < nin; i++)
        Py_XDECREF(owned[i]);
    return st;
}

PyObject *
em_ufunc_method(PyObject *ufunc, PyObject *method, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames)
{
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *stack[16];
    if (nargs + nk + 1 > 16) {
        PyErr_SetString(PyExc_SystemError, "em_ufunc_method: too many arguments");
        return NULL;
    }
    stack[0] = ufunc;
    for (Py_ssize_t i = 0; i < nargs + nk; i++)
        stack[i + 1] = args[i];
    PyObject *token = em_errstate_ignore();
    if (token == NULL)
        return NULL;
    PyObject *r = PyObject_VectorcallMethod(method, stack, nargs + 1, kwnames);
    if (em_errstate_restore(token) < 0)
        Py_CLEAR(r);
    return r;
}
