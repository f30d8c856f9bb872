/* compiled_frame.c: what a cache hit calls instead of the frame.
 *
 * A CompiledFrame gathers the graph's inputs from the frame's argument slots (and
 * from globals, closure cells and attribute chains, so that a module's parameters
 * are read afresh on every call), calls the compiled graph with them, and rebuilds
 * the frame's return value from the graph's flat outputs. All three steps are C;
 * only an exception takes a Python detour, to add the user's source line to the
 * traceback.
 *
 * Input getters are the tuples ember.capture.source.Source.getter() makes:
 *     (root_kind, root, ((step_kind, key), ...))
 * root_kind: "local" (slot index), "global" (name), "closure" (cell index),
 * "object" (the object itself); step_kind: "attr", "item", "dict".
 * The output spec is a tree: ("t", i) the graph's i-th output, ("c", value) a
 * constant, ("tuple", specs), ("list", specs), ("dict", keys, specs).
 *
 * The graph runs with capture off on this thread (see em_capture_swap_state).
 */
#include "capture.h"

enum { ROOT_LOCAL, ROOT_GLOBAL, ROOT_CLOSURE, ROOT_OBJECT };
enum { STEP_ATTR, STEP_ITEM, STEP_DICT };
enum { OUT_TENSOR, OUT_CONST, OUT_TUPLE, OUT_LIST, OUT_DICT };

typedef struct {
    int root_kind;
    Py_ssize_t index;      /* slot or cell index */
    PyObject *root;        /* name (global) or object (object root); borrowed from spec */
    int nsteps;
    int *step_kinds;
    PyObject **keys;       /* borrowed from spec */
} getter_t;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fn;          /* the compiled graph: fn(*inputs) -> tuple of outputs */
    PyObject *getters;     /* the getter tuples (owns what getter_t borrows) */
    PyObject *spec;        /* output spec */
    PyObject *globals;     /* the function's globals */
    PyObject *closure;     /* the function's cells (tuple) or NULL */
    PyObject *on_error;    /* Python: on_error(exc) -> exc, adds the user's frame */
    PyObject *name;
    int ngetters;
    getter_t *g;
    Py_ssize_t calls;
} CompiledFrame;

static PyObject *
fetch(CompiledFrame *self, const getter_t *g, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *obj;
    switch (g->root_kind) {
    case ROOT_LOCAL:
        if (g->index >= nargs) {
            PyErr_Format(PyExc_RuntimeError, "compiled frame: argument slot %zd missing",
                         g->index);
            return NULL;
        }
        obj = args[g->index];
        Py_INCREF(obj);
        break;
    case ROOT_GLOBAL:
        obj = PyDict_GetItemWithError(self->globals, g->root);
        if (obj == NULL) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_NameError, "name '%U' is not defined", g->root);
            return NULL;
        }
        Py_INCREF(obj);
        break;
    case ROOT_CLOSURE:
        if (self->closure == NULL || g->index >= PyTuple_GET_SIZE(self->closure)) {
            PyErr_SetString(PyExc_RuntimeError, "compiled frame: closure cell missing");
            return NULL;
        }
        obj = PyCell_GET(PyTuple_GET_ITEM(self->closure, g->index));
        if (obj == NULL) {
            PyErr_SetString(PyExc_NameError, "free variable referenced before assignment");
            return NULL;
        }
        Py_INCREF(obj);
        break;
    default:
        obj = g->root;
        Py_INCREF(obj);
    }
    for (int s = 0; s < g->nsteps; s++) {
        PyObject *next;
        if (g->step_kinds[s] == STEP_ATTR)
            next = PyObject_GetAttr(obj, g->keys[s]);
        else if (g->step_kinds[s] == STEP_DICT && PyDict_Check(obj)) {
            next = PyDict_GetItemWithError(obj, g->keys[s]);
            if (next == NULL && !PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, g->keys[s]);
            Py_XINCREF(next);
        }
        else
            next = PyObject_GetItem(obj, g->keys[s]);
        Py_DECREF(obj);
        if (next == NULL)
            return NULL;
        obj = next;
    }
    return obj;
}

static PyObject *
rebuild(PyObject *spec, PyObject *outs)
{
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 2) {
        PyErr_SetString(PyExc_SystemError, "compiled frame: bad output spec");
        return NULL;
    }
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
    PyObject *a = PyTuple_GET_ITEM(spec, 1);
    switch (kind) {
    case OUT_TENSOR: {
        Py_ssize_t i = PyLong_AsSsize_t(a);
        if (i < 0 || i >= PyTuple_GET_SIZE(outs)) {
            PyErr_SetString(PyExc_SystemError, "compiled frame: output index out of range");
            return NULL;
        }
        PyObject *o = PyTuple_GET_ITEM(outs, i);
        Py_INCREF(o);
        return o;
    }
    case OUT_CONST:
        Py_INCREF(a);
        return a;
    case OUT_TUPLE:
    case OUT_LIST: {
        Py_ssize_t n = PyTuple_GET_SIZE(a);
        PyObject *res = kind == OUT_TUPLE ? PyTuple_New(n) : PyList_New(n);
        for (Py_ssize_t i = 0; res != NULL && i < n; i++) {
            PyObject *v = rebuild(PyTuple_GET_ITEM(a, i), outs);
            if (v == NULL) {
                Py_CLEAR(res);
                break;
            }
            if (kind == OUT_TUPLE)
                PyTuple_SET_ITEM(res, i, v);
            else
                PyList_SET_ITEM(res, i, v);
        }
        return res;
    }
    case OUT_DICT: {
        PyObject *specs = PyTuple_GET_ITEM(spec, 2);
        PyObject *res = PyDict_New();
        for (Py_ssize_t i = 0; res != NULL && i < PyTuple_GET_SIZE(a); i++) {
            PyObject *v = rebuild(PyTuple_GET_ITEM(specs, i), outs);
            if (v == NULL || PyDict_SetItem(res, PyTuple_GET_ITEM(a, i), v) < 0)
                Py_CLEAR(res);
            Py_XDECREF(v);
        }
        return res;
    }
    default:
        PyErr_SetString(PyExc_SystemError, "compiled frame: unknown output kind");
        return NULL;
    }
}

/* The graph raised: let Python put the user's source line into the traceback
 * (on_error re-raises the exception from a frame at that line). */
static void
add_user_frame(CompiledFrame *self)
{
    if (self->on_error == NULL)
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value == NULL) {
        PyErr_Restore(type, value, tb);
        return;
    }
    if (tb != NULL)
        PyException_SetTraceback(value, tb);
    PyObject *fixed = PyObject_CallOneArg(self->on_error, value);
    if (fixed == NULL || !PyExceptionInstance_Check(fixed)) {
        Py_XDECREF(fixed);
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
        return;
    }
    Py_XDECREF(type);
    Py_XDECREF(tb);
    Py_DECREF(value);
    PyObject *ftype = (PyObject *)Py_TYPE(fixed);
    Py_INCREF(ftype);
    PyErr_Restore(ftype, fixed, PyException_GetTraceback(fixed));
}

static PyObject *
frame_vectorcall(CompiledFrame *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *small[16], **inputs = small, *outs = NULL, *res = NULL;
    int n = self->ngetters, got = 0;
    if (n > 16) {
        inputs = PyMem_Malloc(sizeof(PyObject *) * n);
        if (inputs == NULL)
            return PyErr_NoMemory();
    }
    for (; got < n; got++) {
        inputs[got] = fetch(self, &self->g[got], args, nargs);
        if (inputs[got] == NULL)
            goto done;
    }
    self->calls++;
#if EM_CAPTURE_HOOK
    PyObject *saved = NULL, *left = NULL;
    if (em_capture_swap_state(NULL, &saved) < 0)
        goto done;
#endif
    outs = PyObject_Vectorcall(self->fn, inputs, n, NULL);
    if (outs == NULL)
        add_user_frame(self);
#if EM_CAPTURE_HOOK
    if (em_capture_swap_state(saved, &left) < 0)
        Py_CLEAR(outs);
    Py_XDECREF(saved);
    Py_XDECREF(left);
#endif
    if (outs == NULL)
        goto done;
    if (!PyTuple_Check(outs)) {
        PyErr_Format(PyExc_TypeError, "compiled graph returned %s, not a tuple",
                     Py_TYPE(outs)->tp_name);
        goto done;
    }
    res = rebuild(self->spec, outs);
done:
    for (int i = 0; i < got; i++)
        Py_DECREF(inputs[i]);
    if (inputs != small)
        PyMem_Free(inputs);
    Py_XDECREF(outs);
    return res;
}

/* ------------------------------------------------------------------ construction */

static int
parse_getter(PyObject *tup, getter_t *g)
{
    const char *root_kind;
    PyObject *root, *steps;
    if (!PyTuple_Check(tup) || !PyArg_ParseTuple(tup, "sOO!", &root_kind, &root,
                                                 &PyTuple_Type, &steps))
        return -1;
    if (strcmp(root_kind, "local") == 0 || strcmp(root_kind, "closure") == 0) {
        g->root_kind = root_kind[0] == 'l' ? ROOT_LOCAL : ROOT_CLOSURE;
        g->index = PyLong_AsSsize_t(root);
        if (g->index < 0)
            goto bad;
    }
    else if (strcmp(root_kind, "global") == 0 && PyUnicode_Check(root)) {
        g->root_kind = ROOT_GLOBAL;
    }
    else if (strcmp(root_kind, "object") == 0) {
        g->root_kind = ROOT_OBJECT;
    }
    else {
        goto bad;
    }
    g->root = root;
    g->nsteps = (int)PyTuple_GET_SIZE(steps);
    g->step_kinds = PyMem_Calloc(g->nsteps ? g->nsteps : 1, sizeof(int));
    g->keys = PyMem_Calloc(g->nsteps ? g->nsteps : 1, sizeof(PyObject *));
    if (g->step_kinds == NULL || g->keys == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int s = 0; s < g->nsteps; s++) {
        const char *kind;
        PyObject *key;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(steps, s), "sO", &kind, &key))
            return -1;
        if (strcmp(kind, "attr") == 0 && PyUnicode_Check(key))
            g->step_kinds[s] = STEP_ATTR;
        else if (strcmp(kind, "item") == 0)
            g->step_kinds[s] = STEP_ITEM;
        else if (strcmp(kind, "dict") == 0)
            g->step_kinds[s] = STEP_DICT;
        else
            goto bad;
        g->keys[s] = key;
    }
    return 0;
bad:
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "CompiledFrame: bad input getter %R", tup);
    return -1;
}

static void
frame_dealloc(CompiledFrame *self)
{
    PyObject_GC_UnTrack(self);
    for (int i = 0; self->g != NULL && i < self->ngetters; i++) {
        PyMem_Free(self->g[i].step_kinds);
        PyMem_Free(self->g[i].keys);
    }
    PyMem_Free(self->g);
    Py_XDECREF(self->fn);
    Py_XDECREF(self->getters);
    Py_XDECREF(self->spec);
    Py_XDECREF(self->globals);
    Py_XDECREF(self->closure);
    Py_XDECREF(self->on_error);
    Py_XDECREF(self->name);
    PyObject_GC_Del(self);
}

static int
frame_traverse(CompiledFrame *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fn);
    Py_VISIT(self->getters);
    Py_VISIT(self->spec);
    Py_VISIT(self->globals);
    Py_VISIT(self->closure);
    Py_VISIT(self->on_error);
    return 0;
}

static int
frame_clear(CompiledFrame *self)
{
    Py_CLEAR(self->fn);
    Py_CLEAR(self->spec);
    Py_CLEAR(self->globals);
    Py_CLEAR(self->closure);
    Py_CLEAR(self->on_error);
    return 0;
}

/* CompiledFrame(fn, getters, spec, globals, closure, on_error, name) */
static PyObject *
frame_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *fn, *getters, *spec, *globals, *closure, *on_error, *name;
    if (!PyArg_ParseTuple(args, "OO!OO!OOU:CompiledFrame", &fn, &PyTuple_Type, &getters,
                          &spec, &PyDict_Type, &globals, &closure, &on_error, &name))
        return NULL;
    if (closure != Py_None && !PyTuple_Check(closure)) {
        PyErr_SetString(PyExc_TypeError, "CompiledFrame: closure must be a tuple or None");
        return NULL;
    }
    CompiledFrame *self = PyObject_GC_New(CompiledFrame, type);
    if (self == NULL)
        return NULL;
    memset(((char *)self) + sizeof(PyObject), 0, sizeof(CompiledFrame) - sizeof(PyObject));
    self->vectorcall = (vectorcallfunc)frame_vectorcall;
    Py_INCREF(fn);
    self->fn = fn;
    Py_INCREF(getters);
    self->getters = getters;
    Py_INCREF(spec);
    self->spec = spec;
    Py_INCREF(globals);
    self->globals = globals;
    if (closure != Py_None) {
        Py_INCREF(closure);
        self->closure = closure;
    }
    if (on_error != Py_None) {
        Py_INCREF(on_error);
        self->on_error = on_error;
    }
    Py_INCREF(name);
    self->name = name;
    self->ngetters = (int)PyTuple_GET_SIZE(getters);
    self->g = PyMem_Calloc(self->ngetters ? self->ngetters : 1, sizeof(getter_t));
    if (self->g == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    for (int i = 0; i < self->ngetters; i++)
        if (parse_getter(PyTuple_GET_ITEM(getters, i), &self->g[i]) < 0)
            goto error;
    PyObject_GC_Track(self);
    return (PyObject *)self;
error:
    Py_DECREF(self);
    return NULL;
}

static PyObject *
frame_repr(CompiledFrame *self)
{
    return PyUnicode_FromFormat("<CompiledFrame %U: %d inputs>", self->name, self->ngetters);
}

static PyObject *
frame_get_calls(CompiledFrame *self, void *c)
{
    return PyLong_FromSsize_t(self->calls);
}

static PyObject *
frame_get_fn(CompiledFrame *self, void *c)
{
    PyObject *f = self->fn ? self->fn : Py_None;
    Py_INCREF(f);
    return f;
}

static PyGetSetDef frame_getset[] = {
    {"calls", (getter)frame_get_calls, NULL, "How many times this entry ran.", NULL},
    {"fn", (getter)frame_get_fn, NULL, "The compiled graph.", NULL},
    {NULL},
};

static PyTypeObject CompiledFrame_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember._C.CompiledFrame",
    .tp_basicsize = sizeof(CompiledFrame),
    .tp_dealloc = (destructor)frame_dealloc,
    .tp_vectorcall_offset = offsetof(CompiledFrame, vectorcall),
    .tp_repr = (reprfunc)frame_repr,
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Runs a captured graph in place of a frame: gather inputs, call, rebuild.",
    .tp_traverse = (traverseproc)frame_traverse,
    .tp_clear = (inquiry)frame_clear,
    .tp_getset = frame_getset,
    .tp_new = frame_new,
};

int
em_compiled_frame_init(PyObject *module)
{
    if (PyType_Ready(&CompiledFrame_Type) < 0)
        return -1;
    Py_INCREF(&CompiledFrame_Type);
    return PyModule_AddObject(module, "CompiledFrame", (PyObject *)&CompiledFrame_Type);
}
