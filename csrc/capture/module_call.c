/* ModuleCall: OptimizedModule.__call__ (and .forward) in C; FunctionCall: what
 * ember.compile(fn) returns, in C (below).
 *
 * ember.compile(module) returns an OptimizedModule; its call sets this thread's capture
 * state to the compile call's callback, calls the wrapped module (or its forward
 * straight away, when Module.__call__ would do nothing else: no hooks, no
 * _compiled_call_impl), and restores the state. The Python method doing that cost a
 * wrapper frame, five dict reads and two set_state calls on every cache hit; this does
 * the same in C. The instance keeps what the call needs in its __dict__ under
 * "_ember_call": (module, callback, plain) where plain says the module's class keeps
 * Module.__call__ and _call_impl. Calls that need the Python method (fullgraph or
 * ember.compiler.config.strict, which re-check fallen-back code; a missing entry) go to
 * `slow`, the Python method.
 *
 * Both first try em_capture_call_cached (eval_frame.c): a cache hit of the function
 * (or of the class's forward, when the module is plain and called with positional
 * arguments) run with no frame pushed for it. */
#include "capture.h"

#if EM_CAPTURE_HOOK

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *slow;        /* the Python method: slow(self, *args, **kwargs) */
} ModuleCall;

static PyObject *s_ember_call, *s_forward;
static PyObject *s_hook_names[5];

/* ember.compiler.config.strict, set by its setter (set_strict below): read on every
 * call, so a flag rather than an attribute lookup. */
static int strict_mode;

static PyObject *
set_strict(PyObject *module, PyObject *flag)
{
    int v = PyObject_IsTrue(flag);
    if (v < 0)
        return NULL;
    strict_mode = v;
    Py_RETURN_NONE;
}

static PyMethodDef call_methods[] = {
    {"set_strict", set_strict, METH_O,
     "set_strict(flag): ember.compiler.config.strict, as the compiled calls read it"},
    {NULL},
};

/* The class's forward when mod's call may skip Module.__call__ and its instance
 * dict does not shadow forward: a Python function (borrowed), else NULL. */
static PyObject *
plain_forward(PyObject *mod)
{
    PyObject *fwd = _PyType_Lookup(Py_TYPE(mod), s_forward);
    if (fwd == NULL || !PyFunction_Check(fwd))
        return NULL;
    PyObject **dictptr = _PyObject_GetDictPtr(mod);
    if (dictptr != NULL && *dictptr != NULL &&
        PyDict_GetItemWithError(*dictptr, s_forward) != NULL)
        return NULL;
    return PyErr_Occurred() ? NULL : fwd;
}

/* 1 when a hook dict (or _compiled_call_impl) of mod is set and non-empty. */
static int
has_hooks(PyObject *mod)
{
    PyObject **dictptr = _PyObject_GetDictPtr(mod);
    if (dictptr == NULL || *dictptr == NULL)
        return 1;
    for (size_t i = 0; i < sizeof(s_hook_names) / sizeof(s_hook_names[0]); i++) {
        PyObject *v = PyDict_GetItemWithError(*dictptr, s_hook_names[i]);
        if (v == NULL) {
            if (PyErr_Occurred())
                return -1;
            continue;
        }
        int t = PyObject_IsTrue(v);
        if (t != 0)
            return t;
    }
    return 0;
}

static PyObject *
module_call_vectorcall(ModuleCall *self, PyObject *const *args, size_t nargsf,
                       PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *small[9], **argv = small, *result = NULL, *old = NULL, *mine = NULL;
    if (nargs < 1)
        return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject **dictptr = _PyObject_GetDictPtr(args[0]);
    PyObject *entry = dictptr != NULL && *dictptr != NULL
                      ? PyDict_GetItemWithError(*dictptr, s_ember_call) : NULL;
    if (entry == NULL && PyErr_Occurred())
        return NULL;
    if (entry == NULL || !PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 4 ||
        PyTuple_GET_ITEM(entry, 3) != Py_False || strict_mode ||
        nargs + nkw > (Py_ssize_t)(sizeof(small) / sizeof(small[0])))
        return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    PyObject *mod = PyTuple_GET_ITEM(entry, 0), *callback = PyTuple_GET_ITEM(entry, 1);
    int plain = PyTuple_GET_ITEM(entry, 2) == Py_True;
    if (plain) {
        int h = has_hooks(mod);
        if (h < 0)
            return NULL;
        plain = !h;
    }
    Py_INCREF(entry);              /* the call may replace the instance's entry */
    argv[0] = mod;
    for (Py_ssize_t i = 1; i < nargs + nkw; i++)
        argv[i] = args[i];
    PyObject *fwd = plain && kwnames == NULL ? plain_forward(mod) : NULL;
    if (fwd == NULL && PyErr_Occurred())
        goto error;
    if (fwd != NULL && em_capture_call_cached(fwd, callback, argv, nargs, &result)) {
        Py_DECREF(entry);
        return result;
    }
    if (em_capture_swap_state(callback, &old) < 0)
        goto error;
    if (plain)
        result = PyObject_VectorcallMethod(s_forward, argv, (size_t)nargs, kwnames);
    else
        result = PyObject_Vectorcall(mod, argv + 1, (size_t)(nargs - 1), kwnames);
    /* back to the state before, on every path (the callback's reference goes) */
    if (em_capture_swap_state(old, &mine) < 0) {
        Py_CLEAR(result);
        Py_XDECREF(old);
        goto error;
    }
    Py_XDECREF(mine);
    Py_XDECREF(old);
    Py_DECREF(entry);
    return result;

error:
    Py_DECREF(entry);
    return NULL;
}

static PyObject *
module_call_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *slow;
    if (!PyArg_ParseTuple(args, "O:ModuleCall", &slow))
        return NULL;
    if (!PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "ModuleCall: slow must be callable");
        return NULL;
    }
    ModuleCall *self = (ModuleCall *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)module_call_vectorcall;
    self->slow = Py_NewRef(slow);
    return (PyObject *)self;
}

static int
module_call_traverse(ModuleCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->slow);
    return 0;
}

static int
module_call_clear(ModuleCall *self)
{
    Py_CLEAR(self->slow);
    return 0;
}

static void
module_call_dealloc(ModuleCall *self)
{
    PyObject_GC_UnTrack(self);
    module_call_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A method when read from an instance, as the Python method it stands for. */
static PyObject *
module_call_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *
module_call_get_wrapped(ModuleCall *self, void *closure)
{
    return Py_NewRef(self->slow);
}

static PyGetSetDef module_call_getset[] = {
    {"__wrapped__", (getter)module_call_get_wrapped, NULL,
     "the Python method this stands for", NULL},
    {NULL},
};

static PyTypeObject ModuleCall_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember._C._capture.ModuleCall",
    .tp_basicsize = sizeof(ModuleCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "ModuleCall(slow): OptimizedModule.__call__ in C; slow is the "
              "Python method it stands for.",
    .tp_new = module_call_new,
    .tp_dealloc = (destructor)module_call_dealloc,
    .tp_traverse = (traverseproc)module_call_traverse,
    .tp_clear = (inquiry)module_call_clear,
    .tp_vectorcall_offset = offsetof(ModuleCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = module_call_descr_get,
    .tp_getset = module_call_getset,
};

/* ------------------------------------------------------------------ FunctionCall */

/* FunctionCall(fn, callback, slow): what ember.compile(fn) returns, the same in C:
 * capture state set to callback around fn(*args, **kwargs), so that a cache hit packs
 * no argument tuple and runs no wrapper frame (nor, for a Python function called with
 * its positional parameters, a frame of its own). slow (the Python wrapper) takes
 * strict mode, which re-checks fallen-back code; fullgraph compiles keep slow itself. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fn, *callback, *slow, *dict;
} FunctionCall;

static PyObject *
function_call_vectorcall(FunctionCall *self, PyObject *const *args, size_t nargsf,
                         PyObject *kwnames)
{
    PyObject *old = NULL, *mine = NULL, *result;
    if (strict_mode)
        return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    if (kwnames == NULL && PyFunction_Check(self->fn) &&
        em_capture_call_cached(self->fn, self->callback, args, PyVectorcall_NARGS(nargsf),
                               &result))
        return result;
    if (em_capture_swap_state(self->callback, &old) < 0)
        return NULL;
    result = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    if (em_capture_swap_state(old, &mine) < 0)
        Py_CLEAR(result);
    Py_XDECREF(mine);
    Py_XDECREF(old);
    return result;
}

static PyObject *
function_call_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *fn, *callback, *slow;
    if (!PyArg_ParseTuple(args, "OOO:FunctionCall", &fn, &callback, &slow))
        return NULL;
    if (!PyCallable_Check(fn) || !PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "FunctionCall: fn and slow must be callable");
        return NULL;
    }
    FunctionCall *self = (FunctionCall *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)function_call_vectorcall;
    self->fn = Py_NewRef(fn);
    self->callback = Py_NewRef(callback);
    self->slow = Py_NewRef(slow);
    return (PyObject *)self;
}

static int
function_call_traverse(FunctionCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fn);
    Py_VISIT(self->callback);
    Py_VISIT(self->slow);
    Py_VISIT(self->dict);
    return 0;
}

static int
function_call_clear(FunctionCall *self)
{
    Py_CLEAR(self->fn);
    Py_CLEAR(self->callback);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->dict);
    return 0;
}

static void
function_call_dealloc(FunctionCall *self)
{
    PyObject_GC_UnTrack(self);
    function_call_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyGetSetDef function_call_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyTypeObject FunctionCall_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember._C._capture.FunctionCall",
    .tp_basicsize = sizeof(FunctionCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "FunctionCall(fn, callback, slow): ember.compile(fn) in C; slow is "
              "the Python wrapper it stands for.",
    .tp_new = function_call_new,
    .tp_dealloc = (destructor)function_call_dealloc,
    .tp_traverse = (traverseproc)function_call_traverse,
    .tp_clear = (inquiry)function_call_clear,
    .tp_vectorcall_offset = offsetof(FunctionCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = module_call_descr_get,
    .tp_dictoffset = offsetof(FunctionCall, dict),
    .tp_getset = function_call_getset,
};

int
em_module_call_init(PyObject *m)
{
    static const char *hooks[] = {"_compiled_call_impl", "_forward_hooks",
                                  "_forward_pre_hooks", "_backward_hooks",
                                  "_backward_pre_hooks"};
    if (s_ember_call == NULL) {
        if ((s_ember_call = PyUnicode_InternFromString("_ember_call")) == NULL ||
            (s_forward = PyUnicode_InternFromString("forward")) == NULL)
            return -1;
        for (size_t i = 0; i < sizeof(hooks) / sizeof(hooks[0]); i++) {
            s_hook_names[i] = PyUnicode_InternFromString(hooks[i]);
            if (s_hook_names[i] == NULL)
                return -1;
        }
    }
    if (PyType_Ready(&ModuleCall_Type) < 0 ||
        PyModule_AddObjectRef(m, "ModuleCall", (PyObject *)&ModuleCall_Type) < 0 ||
        PyType_Ready(&FunctionCall_Type) < 0 ||
        PyModule_AddObjectRef(m, "FunctionCall", (PyObject *)&FunctionCall_Type) < 0 ||
        PyModule_AddFunctions(m, call_methods) < 0)
        return -1;
    return 0;
}

#endif /* EM_CAPTURE_HOOK */
