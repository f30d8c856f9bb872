/* mode.c: the thread-local dispatch mode (eager, meta, trace), grad mode and autocast. */
#include "ember.h"

_Thread_local em_ThreadState em_tls = {EM_MODE_EAGER, 1, NULL, -1};

static PyObject *
is_grad_enabled(PyObject *self, PyObject *noargs)
{
    return PyBool_FromLong(em_tls.grad_enabled);
}

/* _set_grad_enabled(flag) -> previous flag */
static PyObject *
set_grad_enabled(PyObject *self, PyObject *flag)
{
    int v = PyObject_IsTrue(flag);
    if (v < 0)
        return NULL;
    int prev = em_tls.grad_enabled;
    em_tls.grad_enabled = v;
    return PyBool_FromLong(prev);
}

/* _set_autocast(dtype or None) -> the previous one: this thread's autocast dtype */
static PyObject *
set_autocast(PyObject *self, PyObject *dtype)
{
    int v = -1;
    if (dtype != Py_None) {
        v = em_dtype_from_object(dtype);
        if (v < 0)
            return NULL;
        if (!em_is_float((em_dtype_t)v)) {
            PyErr_SetString(PyExc_ValueError, "autocast needs a floating dtype");
            return NULL;
        }
    }
    int prev = em_tls.autocast;
    em_tls.autocast = v;
    return Py_NewRef(prev < 0 ? Py_None : (PyObject *)em_dtypes[prev]);
}

static PyObject *
get_autocast(PyObject *self, PyObject *noargs)
{
    int v = em_tls.autocast;
    return Py_NewRef(v < 0 ? Py_None : (PyObject *)em_dtypes[v]);
}

/* _set_mode(mode, tracer=None) -> (previous mode, previous tracer) */
static PyObject *
set_mode(PyObject *self, PyObject *args)
{
    int mode;
    PyObject *tracer = Py_None;
    if (!PyArg_ParseTuple(args, "i|O:_set_mode", &mode, &tracer))
        return NULL;
    if (mode < EM_MODE_EAGER || mode > EM_MODE_TRACE) {
        PyErr_Format(PyExc_ValueError, "unknown dispatch mode %d", mode);
        return NULL;
    }
    if (mode == EM_MODE_TRACE && !PyCallable_Check(tracer)) {
        PyErr_SetString(PyExc_TypeError, "trace mode needs a callable tracer");
        return NULL;
    }
    PyObject *prev_tracer = em_tls.tracer ? em_tls.tracer : Py_None;
    PyObject *res = Py_BuildValue("(iO)", em_tls.mode, prev_tracer);
    if (res == NULL)
        return NULL;
    Py_XDECREF(em_tls.tracer);
    em_tls.tracer = NULL;
    if (tracer != Py_None) {
        Py_INCREF(tracer);
        em_tls.tracer = tracer;
    }
    em_tls.mode = mode;
    return res;
}

/* The type of symbolic integers ([dynamic]: ember.fx.shape_env.SymInt), set once by
 * Python: in trace mode, int and int-list parameters bind them as they are, for the
 * tracer to compute with (em_is_symint). */
static PyObject *symint_type = NULL;

bool
em_is_symint(PyObject *v)
{
    return symint_type != NULL && em_tls.mode == EM_MODE_TRACE &&
        PyObject_TypeCheck(v, (PyTypeObject *)symint_type);
}

static PyObject *
set_symint_type(PyObject *self, PyObject *type)
{
    if (!PyType_Check(type)) {
        PyErr_SetString(PyExc_TypeError, "_set_symint_type needs a type");
        return NULL;
    }
    Py_XSETREF(symint_type, Py_NewRef(type));
    Py_RETURN_NONE;
}

static PyObject *
get_mode(PyObject *self, PyObject *noargs)
{
    return Py_BuildValue("(iO)", em_tls.mode, em_tls.tracer ? em_tls.tracer : Py_None);
}

static PyMethodDef mode_methods[] = {
    {"is_grad_enabled", is_grad_enabled, METH_NOARGS,
     "True when operations record autograd history in this thread."},
    {"_set_grad_enabled", set_grad_enabled, METH_O, NULL},
    {"_set_autocast", set_autocast, METH_O,
     "_set_autocast(dtype or None): this thread's autocast dtype; returns the previous."},
    {"_get_autocast", get_autocast, METH_NOARGS,
     "This thread's autocast dtype, or None when autocast is off."},
    {"_set_mode", set_mode, METH_VARARGS,
     "_set_mode(mode, tracer=None): set this thread's dispatch mode; returns the previous."},
    {"_get_mode", get_mode, METH_NOARGS, NULL},
    {"_set_symint_type", set_symint_type, METH_O,
     "_set_symint_type(type): symbolic ints bound as they are in trace mode."},
    {NULL},
};

int
em_mode_init(PyObject *module)
{
    if (PyModule_AddIntConstant(module, "MODE_EAGER", EM_MODE_EAGER) < 0 ||
        PyModule_AddIntConstant(module, "MODE_META", EM_MODE_META) < 0 ||
        PyModule_AddIntConstant(module, "MODE_TRACE", EM_MODE_TRACE) < 0 ||
        PyModule_AddIntConstant(module, "AUTOCAST_LOWER", EM_AUTOCAST_LOWER) < 0 ||
        PyModule_AddIntConstant(module, "AUTOCAST_FP32", EM_AUTOCAST_FP32) < 0 ||
        PyModule_AddIntConstant(module, "AUTOCAST_PROMOTE", EM_AUTOCAST_PROMOTE) < 0)
        return -1;
    return PyModule_AddFunctions(module, mode_methods);
}
