/* compiled_frame.c: what a cache hit calls instead of the frame.
 *
 * A CompiledFrame gathers the graph's inputs from the frame's argument slots (and
 * from globals, closure cells and attribute chains, so that a module's parameters
 * are read afresh on every call), calls the compiled graph with them, then runs the
 * frame program: it builds the values the frame returns and writes (the graph's
 * outputs, objects fetched through sources, new tuples, lists and dicts), replays the
 * frame's Python side effects in program order, and returns the result. All of it is
 * C; only an exception from the graph takes a Python detour: the frame then runs
 * eagerly, so the caller sees eager's result or exception, traceback and all.
 *
 * Input getters are the tuples ember.capture.source.Source.getter() makes:
 *     (root_kind, root, ((step_kind, key), ...))
 * root_kind: "local" (slot index), "global" (name), "closure" (cell index),
 * "object" (the object itself); step_kind: "attr", "item", "dict", "size" and
 * "stride" (of a tensor at an int dim: a symbolic size's value, [dynamic]) and
 * "scalar" (a float as a new 0-d float64 tensor: a dynamic float's graph input,
 * ember/capture/sym_floats.py).
 *
 * The program is ember/capture/program.py's (values, effects, result), decoded once
 * here into value_t and effect_t records.
 *
 * The graph and the effects run with capture off on this thread (see
 * em_capture_swap_state).
 */
#include "capture.h"

enum { ROOT_LOCAL, ROOT_GLOBAL, ROOT_CLOSURE, ROOT_OBJECT };
enum { STEP_ATTR, STEP_ITEM, STEP_DICT, STEP_SIZE, STEP_STRIDE, STEP_SCALAR };
enum { V_OUT, V_CONST, V_SRC, V_TUPLE, V_LIST, V_DICT, V_CALL1 };
enum { E_LIST_SET, E_DICT_SET, E_SETATTR, E_DELATTR, E_SETITEM, E_DELITEM };

typedef struct {
    int root_kind;
    int guard_src;         /* the guard program's source for the same chain, or -1 */
    Py_ssize_t index;      /* slot or cell index */
    PyObject *root;        /* name (global) or object (object root); borrowed from spec */
    int nsteps;
    int *step_kinds;
    PyObject **keys;       /* borrowed from spec */
} getter_t;

typedef struct {
    int kind;
    Py_ssize_t index;      /* OUT: output index; CALL1: the argument value */
    PyObject *obj;         /* CONST: the object; DICT: the keys; CALL1: the callable
                            * (borrowed from the program tuple) */
    getter_t g;            /* SRC */
    int n;                 /* TUPLE, LIST, DICT: number of items */
    int *items;            /* value indices, each < this value's own */
} value_t;

typedef struct {
    int kind;
    int target, value;     /* value indices (value -1 for deletions) */
    PyObject *key;         /* attribute name or item key (borrowed) */
} effect_t;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fn;          /* the compiled graph: fn(*inputs) -> tuple of outputs */
    PyObject *getters;     /* the getter tuples (owns what getter_t borrows) */
    PyObject *program;     /* (values, effects, result) (owns what the records borrow) */
    PyObject *globals;     /* the function's globals */
    PyObject *closure;     /* the function's cells (tuple) or NULL */
    PyObject *on_error;    /* Python: on_error(exc, args) -> the frame run eagerly */
    PyObject *name;
    int ngetters;
    getter_t *g;
    int nvalues, neffects, result;
    value_t *values;
    effect_t *effects;
    Py_ssize_t nouts;      /* the largest output index + 1 */
    Py_ssize_t calls;
} CompiledFrame;

/* A new 0-d float64 tensor holding float obj (a dynamic float input). */
static PyObject *
scalar_tensor(PyObject *obj)
{
    em_Geom geom = {.ndim = 0, .dtype = EM_FLOAT64};
    em_Tensor *t;
    double v;
    if (!PyFloat_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "compiled frame: a dynamic float input is %.100s, "
                     "not float", Py_TYPE(obj)->tp_name);
        return NULL;
    }
    v = PyFloat_AS_DOUBLE(obj);
    t = em_tensor_empty(&geom, false);
    if (t == NULL)
        return NULL;
    *(double *)PyArray_DATA(t->array) = v;
    return (PyObject *)t;
}

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
        else if (g->step_kinds[s] == STEP_SIZE || g->step_kinds[s] == STEP_STRIDE) {
            Py_ssize_t d = PyLong_AsSsize_t(g->keys[s]);
            const em_Tensor *t = (const em_Tensor *)obj;
            next = NULL;
            if (!em_Tensor_Check(obj) || d < 0 || d >= t->ndim) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_RuntimeError, "compiled frame: no dim %zd of a "
                                 "tensor to read a size from", d);
            }
            else
                next = PyLong_FromSsize_t(g->step_kinds[s] == STEP_SIZE ? t->sizes[d]
                                                                        : t->strides[d]);
        }
        else if (g->step_kinds[s] == STEP_SCALAR)
            next = scalar_tensor(obj);
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

static int
apply_effect(const effect_t *e, PyObject **vals)
{
    PyObject *t = vals[e->target], *v = e->value >= 0 ? vals[e->value] : NULL;
    switch (e->kind) {
    case E_LIST_SET:
        return PyList_SetSlice(t, 0, PY_SSIZE_T_MAX, v);
    case E_DICT_SET:
        PyDict_Clear(t);
        return PyDict_Update(t, v);
    case E_SETATTR:
        return PyObject_SetAttr(t, e->key, v);
    case E_DELATTR:
        return PyObject_DelAttr(t, e->key);
    case E_SETITEM:
        return PyObject_SetItem(t, e->key, v);
    case E_DELITEM:
        return PyObject_DelItem(t, e->key);
    }
    PyErr_SetString(PyExc_SystemError, "compiled frame: unknown effect");
    return -1;
}

/* Computes the program's values from the graph's outputs, applies its effects and
 * returns its result (a new reference), or NULL. */
static PyObject *
run_program(CompiledFrame *self, PyObject *outs, PyObject *const *args, Py_ssize_t nargs,
            const em_Resolved *r)
{
    PyObject *small[16], **vals = small, *res = NULL;
    int n = self->nvalues, done = 0;
    if (PyTuple_GET_SIZE(outs) < self->nouts) {
        PyErr_Format(PyExc_SystemError, "compiled frame: the graph returned %zd outputs, "
                     "expected %zd", PyTuple_GET_SIZE(outs), self->nouts);
        return NULL;
    }
    if (n > 16 && (vals = PyMem_Malloc(sizeof(PyObject *) * n)) == NULL)
        return PyErr_NoMemory();
    for (; done < n; done++) {
        const value_t *v = &self->values[done];
        PyObject *o = NULL;
        switch (v->kind) {
        case V_OUT:
            o = Py_NewRef(PyTuple_GET_ITEM(outs, v->index));
            break;
        case V_CONST:
            o = Py_NewRef(v->obj);
            break;
        case V_SRC: {
            int k = v->g.guard_src;
            o = (r != NULL && k >= 0 && k < r->n && r->vals[k] != NULL)
                ? Py_NewRef(r->vals[k]) : fetch(self, &v->g, args, nargs);
            break;
        }
        case V_TUPLE:
        case V_LIST:
            o = v->kind == V_TUPLE ? PyTuple_New(v->n) : PyList_New(v->n);
            for (int i = 0; o != NULL && i < v->n; i++) {
                PyObject *item = Py_NewRef(vals[v->items[i]]);
                if (v->kind == V_TUPLE)
                    PyTuple_SET_ITEM(o, i, item);
                else
                    PyList_SET_ITEM(o, i, item);
            }
            break;
        case V_DICT:
            o = PyDict_New();
            for (int i = 0; o != NULL && i < v->n; i++) {
                if (PyDict_SetItem(o, PyTuple_GET_ITEM(v->obj, i), vals[v->items[i]]) < 0)
                    Py_CLEAR(o);
            }
            break;
        case V_CALL1:
            o = PyObject_CallOneArg(v->obj, vals[v->index]);
            break;
        }
        if (o == NULL)
            goto done;
        vals[done] = o;
    }
    for (int i = 0; i < self->neffects; i++)
        if (apply_effect(&self->effects[i], vals) < 0)
            goto done;
    res = Py_NewRef(vals[self->result]);
done:
    for (int i = 0; i < done; i++)
        Py_DECREF(vals[i]);
    if (vals != small)
        PyMem_Free(vals);
    return res;
}

/* The graph raised (an Exception, not KeyboardInterrupt or SystemExit): nothing the
 * frame does is visible yet (graphs write into their inputs after they have run, or put
 * in-place writes back when they raise: aot/eager.py's restoring_inputs; the side effects
 * have not run), so on_error(exc, args) runs the frame's code eagerly instead and
 * returns its result or raises its exception, with the user's own frames. */
static PyObject *
run_eagerly(CompiledFrame *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (self->on_error == NULL || !PyErr_ExceptionMatches(PyExc_Exception))
        return NULL;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value == NULL) {
        PyErr_Restore(type, value, tb);
        return NULL;
    }
    if (tb != NULL)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    PyObject *slots = PyTuple_New(nargs), *res = NULL;
    if (slots != NULL) {
        for (Py_ssize_t i = 0; i < nargs; i++)
            PyTuple_SET_ITEM(slots, i, Py_NewRef(args[i]));
        res = PyObject_CallFunctionObjArgs(self->on_error, value, slots, NULL);
        Py_DECREF(slots);
    }
    Py_DECREF(value);
    return res;
}

static PyObject *
run(CompiledFrame *self, PyObject *const *args, Py_ssize_t nargs, const em_Resolved *r)
{
    PyObject *small[16], **inputs = small, *outs = NULL, *res = NULL;
    int n = self->ngetters, got = 0;
    if (self->program == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "compiled frame was cleared");
        return NULL;
    }
    if (n > 16) {
        inputs = PyMem_Malloc(sizeof(PyObject *) * n);
        if (inputs == NULL)
            return PyErr_NoMemory();
    }
    for (; got < n; got++) {
        int k = self->g[got].guard_src;
        if (r != NULL && k >= 0 && k < r->n && r->vals[k] != NULL)
            inputs[got] = Py_NewRef(r->vals[k]);      /* resolved by the guards */
        else
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
        res = run_eagerly(self, args, nargs);
    else if (!PyTuple_Check(outs)) {
        PyErr_Format(PyExc_TypeError, "compiled graph returned %s, not a tuple",
                     Py_TYPE(outs)->tp_name);
        Py_CLEAR(outs);
    }
    else
        res = run_program(self, outs, args, nargs, r);
#if EM_CAPTURE_HOOK
    if (em_capture_swap_state(saved, &left) < 0)
        Py_CLEAR(res);
    Py_XDECREF(saved);
    Py_XDECREF(left);
#endif
done:
    for (int i = 0; i < got; i++)
        Py_DECREF(inputs[i]);
    if (inputs != small)
        PyMem_Free(inputs);
    Py_XDECREF(outs);
    return res;
}

static PyObject *
frame_vectorcall(CompiledFrame *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    return run(self, args, PyVectorcall_NARGS(nargsf), NULL);
}

PyObject *
em_compiled_frame_call(PyObject *frame, PyObject *const *args, Py_ssize_t nargs,
                       const em_Resolved *resolved)
{
    return run((CompiledFrame *)frame, args, nargs, resolved);
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
        else if (strcmp(kind, "size") == 0 && PyLong_CheckExact(key))
            g->step_kinds[s] = STEP_SIZE;
        else if (strcmp(kind, "stride") == 0 && PyLong_CheckExact(key))
            g->step_kinds[s] = STEP_STRIDE;
        else if (strcmp(kind, "scalar") == 0)
            g->step_kinds[s] = STEP_SCALAR;
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
free_records(CompiledFrame *self)
{
    for (int i = 0; self->g != NULL && i < self->ngetters; i++) {
        PyMem_Free(self->g[i].step_kinds);
        PyMem_Free(self->g[i].keys);
    }
    PyMem_Free(self->g);
    self->g = NULL;
    self->ngetters = 0;
    for (int i = 0; self->values != NULL && i < self->nvalues; i++) {
        PyMem_Free(self->values[i].items);
        PyMem_Free(self->values[i].g.step_kinds);
        PyMem_Free(self->values[i].g.keys);
    }
    PyMem_Free(self->values);
    self->values = NULL;
    self->nvalues = 0;
    PyMem_Free(self->effects);
    self->effects = NULL;
    self->neffects = 0;
}

static void
frame_dealloc(CompiledFrame *self)
{
    PyObject_GC_UnTrack(self);
    free_records(self);
    Py_XDECREF(self->fn);
    Py_XDECREF(self->getters);
    Py_XDECREF(self->program);
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
    Py_VISIT(self->program);
    Py_VISIT(self->globals);
    Py_VISIT(self->closure);
    Py_VISIT(self->on_error);
    return 0;
}

/* Breaks reference cycles (globals -> function -> code -> cache -> frame -> globals);
 * the records borrow from the tuples cleared here, so they go first. */
static int
frame_clear(CompiledFrame *self)
{
    free_records(self);
    Py_CLEAR(self->fn);
    Py_CLEAR(self->getters);
    Py_CLEAR(self->program);
    Py_CLEAR(self->globals);
    Py_CLEAR(self->closure);
    Py_CLEAR(self->on_error);
    return 0;
}

/* Value indices must point backwards (to values computed before). */
static int
parse_index(PyObject *o, int limit, const char *what)
{
    long i = PyLong_Check(o) ? PyLong_AsLong(o) : -1;
    if (i < 0 || i >= limit) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "CompiledFrame: bad %s index %R", what, o);
        return -1;
    }
    return (int)i;
}

static int
parse_items(PyObject *tup, int limit, value_t *v)
{
    if (!PyTuple_Check(tup) || PyTuple_GET_SIZE(tup) > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "CompiledFrame: value items must be a tuple");
        return -1;
    }
    v->n = (int)PyTuple_GET_SIZE(tup);
    v->items = PyMem_Calloc(v->n ? v->n : 1, sizeof(int));
    if (v->items == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < v->n; i++)
        if ((v->items[i] = parse_index(PyTuple_GET_ITEM(tup, i), limit, "item")) < 0)
            return -1;
    return 0;
}

static int
tag_is(PyObject *tag, const char *name)
{
    return PyUnicode_Check(tag) && PyUnicode_CompareWithASCIIString(tag, name) == 0;
}

static int
parse_value(CompiledFrame *self, PyObject *spec, int at, value_t *v, PyObject *guards)
{
    Py_ssize_t n = PyTuple_Check(spec) ? PyTuple_GET_SIZE(spec) : 0;
    PyObject *tag = n ? PyTuple_GET_ITEM(spec, 0) : NULL;
    if (n == 2 && tag_is(tag, "out")) {
        v->kind = V_OUT;
        v->index = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 1));
        if (v->index < 0)
            goto bad;
        if (v->index + 1 > self->nouts)
            self->nouts = v->index + 1;
        return 0;
    }
    if (n == 2 && tag_is(tag, "const")) {
        v->kind = V_CONST;
        v->obj = PyTuple_GET_ITEM(spec, 1);
        return 0;
    }
    if (n == 2 && tag_is(tag, "src")) {
        v->kind = V_SRC;
        v->g.guard_src = guards == Py_None ? -1
            : em_guards_find_source(guards, PyTuple_GET_ITEM(spec, 1));
        return parse_getter(PyTuple_GET_ITEM(spec, 1), &v->g);
    }
    if (n == 2 && (tag_is(tag, "tuple") || tag_is(tag, "list"))) {
        v->kind = tag_is(tag, "tuple") ? V_TUPLE : V_LIST;
        return parse_items(PyTuple_GET_ITEM(spec, 1), at, v);
    }
    if (n == 3 && tag_is(tag, "dict")) {
        v->kind = V_DICT;
        v->obj = PyTuple_GET_ITEM(spec, 1);
        if (parse_items(PyTuple_GET_ITEM(spec, 2), at, v) < 0)
            return -1;
        if (!PyTuple_Check(v->obj) || PyTuple_GET_SIZE(v->obj) != v->n)
            goto bad;
        return 0;
    }
    if (n == 3 && tag_is(tag, "call1")) {
        v->kind = V_CALL1;
        v->obj = PyTuple_GET_ITEM(spec, 1);
        int j = parse_index(PyTuple_GET_ITEM(spec, 2), at, "argument");
        if (j < 0)
            return -1;
        v->index = j;
        if (!PyCallable_Check(v->obj))
            goto bad;
        return 0;
    }
bad:
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "CompiledFrame: bad program value %R", spec);
    return -1;
}

static const struct { const char *name; int kind, has_value; } effect_kinds[] = {
    {"list_set", E_LIST_SET, 1}, {"dict_set", E_DICT_SET, 1},
    {"setattr", E_SETATTR, 1}, {"delattr", E_DELATTR, 0},
    {"setitem", E_SETITEM, 1}, {"delitem", E_DELITEM, 0},
};

static int
parse_effect(CompiledFrame *self, PyObject *spec, effect_t *e)
{
    Py_ssize_t n = PyTuple_Check(spec) ? PyTuple_GET_SIZE(spec) : 0;
    PyObject *tag = n ? PyTuple_GET_ITEM(spec, 0) : NULL;
    size_t k = 0, nkinds = sizeof(effect_kinds) / sizeof(effect_kinds[0]);
    while (k < nkinds && !tag_is(tag, effect_kinds[k].name))
        k++;
    if (k == nkinds)
        goto bad;
    e->kind = effect_kinds[k].kind;
    int keyed = e->kind != E_LIST_SET && e->kind != E_DICT_SET;
    if (n != 2 + keyed + effect_kinds[k].has_value)
        goto bad;
    if ((e->target = parse_index(PyTuple_GET_ITEM(spec, 1), self->nvalues, "target")) < 0)
        return -1;
    e->key = keyed ? PyTuple_GET_ITEM(spec, 2) : NULL;
    if ((e->kind == E_SETATTR || e->kind == E_DELATTR) && !PyUnicode_Check(e->key))
        goto bad;
    e->value = -1;
    if (effect_kinds[k].has_value &&
        (e->value = parse_index(PyTuple_GET_ITEM(spec, n - 1), self->nvalues, "value")) < 0)
        return -1;
    return 0;
bad:
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "CompiledFrame: bad program effect %R", spec);
    return -1;
}

/* (values, effects, result) into value_t and effect_t records. */
static int
parse_program(CompiledFrame *self, PyObject *program, PyObject *guards)
{
    PyObject *values, *effects, *result;
    if (!PyTuple_Check(program) ||
        !PyArg_ParseTuple(program, "O!O!O", &PyTuple_Type, &values, &PyTuple_Type, &effects,
                          &result))
        return -1;
    if (PyTuple_GET_SIZE(values) > INT_MAX / 2 || PyTuple_GET_SIZE(effects) > INT_MAX / 2) {
        PyErr_SetString(PyExc_ValueError, "CompiledFrame: program too large");
        return -1;
    }
    int nv = (int)PyTuple_GET_SIZE(values), ne = (int)PyTuple_GET_SIZE(effects);
    self->values = PyMem_Calloc(nv ? nv : 1, sizeof(value_t));
    self->effects = PyMem_Calloc(ne ? ne : 1, sizeof(effect_t));
    if (self->values == NULL || self->effects == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < nv; i++) {
        self->nvalues = i + 1;    /* so that free_records sees what this one allocates */
        if (parse_value(self, PyTuple_GET_ITEM(values, i), i, &self->values[i], guards) < 0)
            return -1;
    }
    self->nvalues = nv;
    for (int i = 0; i < ne; i++)
        if (parse_effect(self, PyTuple_GET_ITEM(effects, i), &self->effects[i]) < 0)
            return -1;
    self->neffects = ne;
    self->result = parse_index(result, nv, "result");
    return self->result < 0 ? -1 : 0;
}

/* CompiledFrame(fn, getters, program, globals, closure, on_error, name, guards=None):
 * guards, the entry's GuardProgram, lets a cache hit reuse the sources it resolved. */
static PyObject *
frame_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *fn, *getters, *program, *globals, *closure, *on_error, *name;
    PyObject *guards = Py_None;
    if (!PyArg_ParseTuple(args, "OO!O!O!OOU|O:CompiledFrame", &fn, &PyTuple_Type, &getters,
                          &PyTuple_Type, &program, &PyDict_Type, &globals, &closure,
                          &on_error, &name, &guards))
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
    self->fn = Py_NewRef(fn);
    self->getters = Py_NewRef(getters);
    self->program = Py_NewRef(program);
    self->globals = Py_NewRef(globals);
    if (closure != Py_None)
        self->closure = Py_NewRef(closure);
    if (on_error != Py_None)
        self->on_error = Py_NewRef(on_error);
    self->name = Py_NewRef(name);
    int ngetters = (int)PyTuple_GET_SIZE(getters);
    self->g = PyMem_Calloc(ngetters ? ngetters : 1, sizeof(getter_t));
    if (self->g == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    self->ngetters = ngetters;
    for (int i = 0; i < ngetters; i++) {
        if (parse_getter(PyTuple_GET_ITEM(getters, i), &self->g[i]) < 0)
            goto error;
        self->g[i].guard_src = guards == Py_None ? -1
            : em_guards_find_source(guards, PyTuple_GET_ITEM(getters, i));
    }
    if (parse_program(self, program, guards) < 0)
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

PyTypeObject em_CompiledFrame_Type = {
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
    if (PyType_Ready(&em_CompiledFrame_Type) < 0)
        return -1;
    Py_INCREF(&em_CompiledFrame_Type);
    return PyModule_AddObject(module, "CompiledFrame", (PyObject *)&em_CompiledFrame_Type);
}
