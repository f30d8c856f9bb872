/* guards.c: guard programs, evaluated in C on every call of a captured frame.
 *
 * A GuardProgram is built once from Python, from a list of guard tuples:
 *
 *     (kind, source, *params)
 *
 * A source names a value the frame can see: a root, then steps. Roots:
 *
 *     ("arg", i)              argument slot i (frame.localsplus[i]); "local" is
 *                             an alias
 *     ("global", name)        looked up as LOAD_GLOBAL does: globals, then builtins
 *     ("builtin", name)       builtins only
 *     ("closure", i)          contents of cell i of the function's closure
 *     ("cell", i)             cell i of the function's closure itself
 *     ("object", obj)         a fixed object (another module's globals dict),
 *                             held strongly
 *
 * Steps, written nested around a source or as a chain after the root:
 *
 *     ("attr", source, name)  getattr(source, name)
 *     ("item", source, key)   source[key]: lists, tuples and dicts read directly,
 *                             anything else through its __getitem__
 *     ("dict", source, key)   a plain dict lookup (no __getitem__/__missing__);
 *                             fails if source is not a dict
 *     ("size", source, d)     source.size(d) of a tensor, as an int
 *     ("stride", source, d)   source.stride(d) of a tensor, as an int
 *
 *     (root_kind, root, ((step_kind, key), ...))   the same as a chain, as
 *     ember/capture/source.py's Source.getter() encodes it, e.g.
 *     ("local", 0, (("attr", "layer"), ("dict", "weight")))
 *
 * Kinds and their parameters:
 *
 *     ("TENSOR_MATCH", source, type, dtype, sizes, strides, storage_offset,
 *      requires_grad[, meta])   exact type; sizes/strides are tuples whose entries
 *                               may be None (any); strides or storage_offset None
 *                               means any
 *     ("TYPE_MATCH", source, type)       type(value) is type
 *     ("ID_MATCH", source, obj)          value is obj (held through a weak
 *                                        reference when obj supports them)
 *     ("EQUALS_MATCH", source, const)    same exact type and equal; const is
 *                                        None, bool, int, float, str or a tuple
 *                                        of them (floats compare -0.0 != 0.0,
 *                                        nan == nan)
 *     ("TENSOR_MATCH", source, example)  the same, read from an example tensor
 *                                        (which is not kept)
 *     ("LEN_MATCH", source, n)           a list, tuple or dict of length n
 *     ("DICT_KEYS", source, keys)        a dict with exactly these keys, in order
 *     ("GRAD_MODE", enabled)             ember's thread-local grad mode; also
 *                                        written ("GRAD_MODE", None, enabled)
 *     ("AUTOCAST", dtype or None)        ember.autocast's thread-local dtype (None:
 *                                        off)
 *     ("COMPILE_CONTEXT", callback)      this thread's capture state is callback
 *                                        (or RUN_ONLY): the entry was compiled by
 *                                        the ember.compile call now running, not
 *                                        one with another backend or options
 *                                        (torch's BACKEND_MATCH); also written
 *                                        ("COMPILE_CONTEXT", None, callback)
 *     ("ALIAS", source, other, same)     `source is other` equals same (other is a
 *                                        source too): two paths to one mutable
 *                                        object, or to two distinct ones
 *     ("LAMBDA", source, predicate, description)
 *                                        escape hatch: predicate(value) is true
 *     ("SYM_REL", sources, program, op, description)
 *                                        a relation between integers read from
 *                                        sources (sizes and strides, [dynamic]):
 *                                        the postfix program over them compared
 *                                        with 0 by op ("==", "!=", "<", "<="); the
 *                                        program is a flat tuple of (opcode, arg)
 *                                        pairs: 0 push sources[arg], 1 push arg,
 *                                        2 add, 3 mul, 4 floordiv, 5 mod, 6 min,
 *                                        7 max (Python's semantics; an overflow or
 *                                        a division by zero fails the guard)
 *
 * Guards run in the order given and stop at the first failure; a source is
 * resolved at most once per run, on first use, and nothing is kept between runs.
 * A source that cannot be resolved (missing attribute, key, global, empty cell)
 * fails the guard that needed it; any other exception from getattr/getitem or a
 * predicate propagates. In the common case (arguments, globals, closure cells,
 * plain attributes; tensor, type, identity, constant, length, grad-mode checks)
 * no Python code runs.
 */
#include "capture.h"

#include <math.h>

enum { SRC_ARG, SRC_GLOBAL, SRC_BUILTIN, SRC_CLOSURE, SRC_CELL, SRC_OBJECT, SRC_ATTR,
       SRC_ITEM, SRC_DICT, SRC_SIZE, SRC_STRIDE };
enum { G_TENSOR, G_TYPE, G_ID, G_EQUALS, G_LEN, G_DICT_KEYS, G_GRAD, G_CONTEXT,
       G_LAMBDA, G_ALIAS, G_AUTOCAST, G_SYM_REL };
/* SYM_REL program opcodes and relations */
enum { SYM_PUSH_SRC, SYM_PUSH_CONST, SYM_ADD, SYM_MUL, SYM_FLOORDIV, SYM_MOD, SYM_MIN,
       SYM_MAX, SYM_NOPS };
enum { REL_EQ, REL_NE, REL_LT, REL_LE };
#define SYM_STACK 32          /* the deepest a SYM_REL program may push */

#define ANY PY_SSIZE_T_MIN    /* wildcard size, stride or storage offset */

/* An autocast state in words: "off" or its dtype's name. */
static const char *
autocast_name(int code)
{
    if (code < 0 || code >= EM_NDTYPES)
        return "off";
    return em_dtypes[code]->name;
}
#define MAX_CONST_DEPTH 16

typedef struct {
    int kind;
    int base;                 /* parent source for ATTR and ITEM, else -1 */
    Py_ssize_t index;         /* ARG, CLOSURE */
    PyObject *key;            /* GLOBAL/BUILTIN/ATTR name, ITEM key */
    PyObject *name;           /* for messages: "self.layer.weight" */
    /* DICT and ITEM of a dict or OrderedDict: the last lookup, reused while the base
     * is the same dict with the same version tag (PEP 509: every write gives a dict
     * a new version, unique to the process, and a new dict gets one too, so the
     * pair names one state of one dict, which holds memo_value, borrowed). */
    PyObject *memo_dict;      /* compared by identity only */
    uint64_t memo_version;
    PyObject *memo_value;
} Source;

typedef struct {
    int kind;
    int source;               /* -1 for GRAD_MODE and COMPILE_CONTEXT */
    PyObject *obj;            /* type, constant, weakref or object, predicate */
    PyObject *desc;           /* LAMBDA description */
    int flag;                 /* ID: weak; GRAD: expected; TENSOR: requires_grad */
    int meta;
    em_dtype_t dtype;
    int ndim;
    Py_ssize_t n;             /* LEN; ALIAS: the other source */
    Py_ssize_t offset;
    Py_ssize_t *geom;         /* TENSOR: sizes[ndim] then strides[ndim] */
    int nsyms, nprog, relop;  /* SYM_REL: syms[nsyms] source indices, prog[2 * nprog] */
    int *syms;
    Py_ssize_t *prog;
} Guard;

typedef struct {
    PyObject_HEAD
    int nsources, nguards;
    Source *sources;
    Guard *guards;
    int cleared;              /* tp_clear ran: the program fails every check */
    PyObject *descr;          /* tuple of str: one line per guard (not the guard tuples,
                               * which would keep guarded objects alive) */
    PyObject *seen;           /* identity of a source -> its index (em_guards_find_source) */
    PyObject *argnames, *freenames;   /* while building only */
} GuardProgram;

/* ------------------------------------------------------------------ building */

static PyObject *weak_target(PyObject *ref);

typedef struct {
    GuardProgram *prog;
    PyObject *seen;           /* identity of a source -> its index */
    int cap_sources;
    int lookup_only;          /* find sources, never add them (-2: not there) */
} Builder;

static PyObject *
name_for_slot(PyObject *names, Py_ssize_t i, const char *fallback)
{
    if (names != NULL && PyTuple_Check(names) && i < PyTuple_GET_SIZE(names) &&
        PyUnicode_Check(PyTuple_GET_ITEM(names, i)))
        return Py_NewRef(PyTuple_GET_ITEM(names, i));
    return PyUnicode_FromFormat("%s%zd", fallback, i);
}

/* Appends s (whose references it takes over) unless an equal source exists;
 * dedupe is the identity of the source. Returns its index or -1. */
static int
intern_source(Builder *b, Source *s, PyObject *dedupe)
{
    int index = -1;
    if (dedupe == NULL)
        goto done;
    PyObject *known = PyDict_GetItemWithError(b->seen, dedupe);
    if (known != NULL) {
        index = (int)PyLong_AsLong(known);
        goto done;
    }
    if (PyErr_Occurred())
        goto done;
    if (b->lookup_only) {
        index = -2;
        goto done;
    }
    GuardProgram *p = b->prog;
    if (p->nsources == b->cap_sources) {
        int cap = b->cap_sources ? 2 * b->cap_sources : 8;
        Source *grown = PyMem_Realloc(p->sources, cap * sizeof(Source));
        if (grown == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        p->sources = grown;
        b->cap_sources = cap;
    }
    PyObject *idx = PyLong_FromLong(p->nsources);
    if (idx == NULL || PyDict_SetItem(b->seen, dedupe, idx) < 0) {
        Py_XDECREF(idx);
        goto done;
    }
    Py_DECREF(idx);
    index = p->nsources++;
    p->sources[index] = *s;
    p->sources[index].memo_dict = p->sources[index].memo_value = NULL;
    p->sources[index].memo_version = 0;
    s->key = s->name = NULL;   /* moved into the program */

done:
    Py_XDECREF(s->key);
    Py_XDECREF(s->name);
    Py_XDECREF(dedupe);
    return index;
}

static int
is_tag(PyObject *tag, const char *name)
{
    return PyUnicode_Check(tag) && PyUnicode_CompareWithASCIIString(tag, name) == 0;
}

/* A root: ("arg" | "local", i), ("closure" | "cell", i), ("global" | "builtin", name)
 * or ("object", obj). */
static int
add_root(Builder *b, PyObject *tag, PyObject *root)
{
    Source s = {.base = -1};
    PyObject *dedupe = NULL;
    if (is_tag(tag, "arg") || is_tag(tag, "local") || is_tag(tag, "closure") ||
        is_tag(tag, "cell")) {
        bool arg = is_tag(tag, "arg") || is_tag(tag, "local");
        s.kind = arg ? SRC_ARG : is_tag(tag, "cell") ? SRC_CELL : SRC_CLOSURE;
        if (!PyLong_Check(root)) {
            PyErr_Format(PyExc_TypeError, "guard source %U: the index must be an int, got %R",
                         tag, root);
            return -1;
        }
        s.index = PyLong_AsSsize_t(root);
        if (s.index == -1 && PyErr_Occurred())
            return -1;
        if (s.index < 0) {
            PyErr_Format(PyExc_ValueError, "guard source %U: negative index", tag);
            return -1;
        }
        s.name = arg ? name_for_slot(b->prog->argnames, s.index, "arg")
                     : name_for_slot(b->prog->freenames, s.index, "closure");
        dedupe = Py_BuildValue("(in)", s.kind, s.index);
    }
    else if (is_tag(tag, "global") || is_tag(tag, "builtin")) {
        s.kind = is_tag(tag, "global") ? SRC_GLOBAL : SRC_BUILTIN;
        if (!PyUnicode_CheckExact(root)) {
            PyErr_Format(PyExc_TypeError, "guard source %U: the name must be a str, got %R",
                         tag, root);
            return -1;
        }
        s.key = Py_NewRef(root);
        PyUnicode_InternInPlace(&s.key);
        s.name = Py_NewRef(s.key);
        dedupe = Py_BuildValue("(iO)", s.kind, s.key);
    }
    else if (is_tag(tag, "object")) {
        /* A fixed object (another module's globals, the builtins dict), held. */
        s.kind = SRC_OBJECT;
        s.key = Py_NewRef(root);
        s.name = PyModule_Check(root) ? PyModule_GetNameObject(root)
                                      : PyUnicode_FromFormat("<%s object>",
                                                             Py_TYPE(root)->tp_name);
        if (s.name == NULL) {
            PyErr_Clear();
            s.name = PyUnicode_FromString("<object>");
        }
        dedupe = Py_BuildValue("(iN)", s.kind, PyLong_FromVoidPtr(root));
    }
    else {
        PyErr_Format(PyExc_ValueError,
                     "unknown guard source root %R (expected 'arg'/'local', 'global', "
                     "'builtin', 'closure', 'cell' or 'object')", tag);
        return -1;
    }
    if (s.name == NULL) {
        Py_XDECREF(s.key);
        Py_XDECREF(dedupe);
        return -1;
    }
    return intern_source(b, &s, dedupe);
}

/* A step from source base: ("attr", name), ("item", key) or ("dict", key). */
static int
add_step(Builder *b, int base, PyObject *tag, PyObject *key)
{
    Source s = {.base = base};
    if (is_tag(tag, "attr")) {
        if (!PyUnicode_CheckExact(key)) {
            PyErr_Format(PyExc_TypeError, "guard source attr: the name must be a str, got %R",
                         key);
            return -1;
        }
        s.kind = SRC_ATTR;
    }
    else if (is_tag(tag, "item") || is_tag(tag, "dict")) {
        s.kind = is_tag(tag, "item") ? SRC_ITEM : SRC_DICT;
        if (PyObject_Hash(key) == -1)
            return -1;
    }
    else if (is_tag(tag, "size") || is_tag(tag, "stride")) {
        s.kind = is_tag(tag, "size") ? SRC_SIZE : SRC_STRIDE;
        if (!PyLong_CheckExact(key)) {
            PyErr_Format(PyExc_TypeError, "guard source %U: the dim must be an int, got %R",
                         tag, key);
            return -1;
        }
        s.index = PyLong_AsSsize_t(key);
        if (s.index == -1 && PyErr_Occurred())
            return -1;
        if (s.index < 0 || s.index >= EM_MAX_DIMS) {
            PyErr_Format(PyExc_ValueError, "guard source %U: dim %R out of range", tag, key);
            return -1;
        }
    }
    else {
        PyErr_Format(PyExc_ValueError,
                     "unknown guard source step %R (expected 'attr', 'item', 'dict', 'size' "
                     "or 'stride')", tag);
        return -1;
    }
    s.key = Py_NewRef(key);
    if (s.kind == SRC_ATTR)
        PyUnicode_InternInPlace(&s.key);
    PyObject *base_name = b->prog->sources[base].name;
    s.name = s.kind == SRC_ATTR ? PyUnicode_FromFormat("%U.%U", base_name, s.key)
             : s.kind == SRC_SIZE ? PyUnicode_FromFormat("%U.size(%zd)", base_name, s.index)
             : s.kind == SRC_STRIDE ? PyUnicode_FromFormat("%U.stride(%zd)", base_name, s.index)
                                  : PyUnicode_FromFormat("%U[%R]", base_name, s.key);
    if (s.name == NULL) {
        Py_DECREF(s.key);
        return -1;
    }
    /* (kind, base, type(key), key): 1 and True are different keys here. */
    PyObject *dedupe = Py_BuildValue("(iiOO)", s.kind, base, (PyObject *)Py_TYPE(key), key);
    return intern_source(b, &s, dedupe);
}

/* Adds src and the sources it is built on; returns its index or -1. Two forms:
 *   nested: ("arg", 0), ("attr", ("arg", 0), "layer"), ("item", src, 1), ...
 *   chain:  (root_kind, root, ((step_kind, key), ...)), as capture/source.py
 *           encodes sources: ("local", 0, (("attr", "layer"), ("attr", "weight")))
 */
static int
add_source(Builder *b, PyObject *src)
{
    if (!PyTuple_Check(src) || PyTuple_GET_SIZE(src) < 2 || PyTuple_GET_SIZE(src) > 3 ||
        !PyUnicode_Check(PyTuple_GET_ITEM(src, 0))) {
        PyErr_Format(PyExc_ValueError,
                     "a guard source must be a tuple like ('arg', 0), got %R", src);
        return -1;
    }
    PyObject *tag = PyTuple_GET_ITEM(src, 0);
    if (is_tag(tag, "attr") || is_tag(tag, "item") || is_tag(tag, "dict") ||
        is_tag(tag, "size") || is_tag(tag, "stride")) {
        if (PyTuple_GET_SIZE(src) != 3) {
            PyErr_Format(PyExc_ValueError, "guard source %R: expected (%U, source, key)", src,
                         tag);
            return -1;
        }
        int base = add_source(b, PyTuple_GET_ITEM(src, 1));
        if (base < 0)
            return base;
        return add_step(b, base, tag, PyTuple_GET_ITEM(src, 2));
    }
    int index = add_root(b, tag, PyTuple_GET_ITEM(src, 1));
    if (index < 0 || PyTuple_GET_SIZE(src) == 2)
        return index;
    PyObject *steps = PyTuple_GET_ITEM(src, 2);
    if (!PyTuple_Check(steps)) {
        PyErr_Format(PyExc_ValueError, "guard source %R: steps must be a tuple of "
                     "(kind, key) pairs", src);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(steps) && index >= 0; i++) {
        PyObject *step = PyTuple_GET_ITEM(steps, i);
        if (!PyTuple_Check(step) || PyTuple_GET_SIZE(step) != 2) {
            PyErr_Format(PyExc_ValueError, "guard source %R: bad step %R", src, step);
            return -1;
        }
        index = add_step(b, index, PyTuple_GET_ITEM(step, 0), PyTuple_GET_ITEM(step, 1));
    }
    return index;
}

static int
valid_constant(PyObject *v, int depth)
{
    if (v == Py_None || PyBool_Check(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v) ||
        PyUnicode_CheckExact(v))
        return 1;
    if (PyTuple_CheckExact(v) && depth < MAX_CONST_DEPTH) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); i++) {
            if (!valid_constant(PyTuple_GET_ITEM(v, i), depth + 1))
                return 0;
        }
        return 1;
    }
    return 0;
}

/* Reads an int or None (-> ANY). */
static int
int_or_any(PyObject *v, Py_ssize_t *out, const char *what)
{
    if (v == Py_None) {
        *out = ANY;
        return 0;
    }
    if (!PyLong_Check(v) || PyBool_Check(v)) {
        PyErr_Format(PyExc_TypeError, "TENSOR_MATCH %s: expected int or None, got %.100s",
                     what, Py_TYPE(v)->tp_name);
        return -1;
    }
    *out = PyLong_AsSsize_t(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* ("TENSOR_MATCH", source, example): the metadata of an example tensor, copied
 * (the tensor itself is not kept). */
static int
parse_tensor_example(PyObject *example, Guard *g)
{
    const em_Tensor *t = (const em_Tensor *)example;
    g->obj = Py_NewRef(Py_TYPE(example));
    g->dtype = t->dtype;
    g->ndim = t->ndim;
    g->geom = PyMem_Malloc((2 * g->ndim + 1) * sizeof(Py_ssize_t));
    if (g->geom == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int d = 0; d < g->ndim; d++) {
        g->geom[d] = t->sizes[d];
        g->geom[g->ndim + d] = t->strides[d];
    }
    g->offset = t->offset;
    g->flag = t->requires_grad != 0;
    g->meta = em_is_meta(t);
    return 0;
}

static int
parse_tensor_match(PyObject *spec, Guard *g)
{
    Py_ssize_t n = PyTuple_GET_SIZE(spec);
    if (n == 3 && em_Tensor_Check(PyTuple_GET_ITEM(spec, 2)))
        return parse_tensor_example(PyTuple_GET_ITEM(spec, 2), g);
    if (n != 8 && n != 9) {
        PyErr_SetString(PyExc_ValueError,
                        "TENSOR_MATCH takes (kind, source, example_tensor) or (kind, "
                        "source, type, dtype, sizes, strides, storage_offset, "
                        "requires_grad[, meta])");
        return -1;
    }
    PyObject *type = PyTuple_GET_ITEM(spec, 2), *dtype = PyTuple_GET_ITEM(spec, 3);
    PyObject *sizes = PyTuple_GET_ITEM(spec, 4), *strides = PyTuple_GET_ITEM(spec, 5);
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &em_Tensor_Type)) {
        PyErr_Format(PyExc_TypeError, "TENSOR_MATCH: %R is not a Tensor type", type);
        return -1;
    }
    if (!PyObject_TypeCheck(dtype, &em_DType_Type)) {
        PyErr_Format(PyExc_TypeError, "TENSOR_MATCH: expected an ember dtype, got %R", dtype);
        return -1;
    }
    if (!PyTuple_Check(sizes) || PyTuple_GET_SIZE(sizes) > EM_MAX_DIMS ||
        (strides != Py_None &&
         (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != PyTuple_GET_SIZE(sizes)))) {
        PyErr_SetString(PyExc_TypeError,
                        "TENSOR_MATCH: sizes must be a tuple, strides None or a tuple of "
                        "the same length");
        return -1;
    }
    g->obj = Py_NewRef(type);
    g->dtype = ((em_DType *)dtype)->code;
    g->ndim = (int)PyTuple_GET_SIZE(sizes);
    g->geom = PyMem_Malloc((2 * g->ndim + 1) * sizeof(Py_ssize_t));
    if (g->geom == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int d = 0; d < g->ndim; d++) {
        if (int_or_any(PyTuple_GET_ITEM(sizes, d), &g->geom[d], "sizes") < 0)
            return -1;
        if (strides == Py_None)
            g->geom[g->ndim + d] = ANY;
        else if (int_or_any(PyTuple_GET_ITEM(strides, d), &g->geom[g->ndim + d],
                            "strides") < 0)
            return -1;
    }
    if (int_or_any(PyTuple_GET_ITEM(spec, 6), &g->offset, "storage_offset") < 0)
        return -1;
    g->flag = PyObject_IsTrue(PyTuple_GET_ITEM(spec, 7));
    g->meta = n == 9 ? PyObject_IsTrue(PyTuple_GET_ITEM(spec, 8)) : 0;
    return (g->flag < 0 || g->meta < 0) ? -1 : 0;
}

static int
expect_params(PyObject *spec, Py_ssize_t n, const char *form)
{
    if (PyTuple_GET_SIZE(spec) != n) {
        PyErr_Format(PyExc_ValueError, "guard %R: expected %s", spec, form);
        return -1;
    }
    return 0;
}

/* ("SYM_REL", sources, program, op, description): see the top of the file. The
 * program is checked once here (opcodes, source indices, stack depth), so running it
 * needs no checks but arithmetic ones. */
static int
parse_sym_rel(Builder *b, PyObject *spec, Guard *g)
{
    static const char *ops[] = {"==", "!=", "<", "<="};
    if (expect_params(spec, 5, "('SYM_REL', sources, program, op, description)") < 0)
        return -1;
    PyObject *srcs = PyTuple_GET_ITEM(spec, 1), *prog = PyTuple_GET_ITEM(spec, 2);
    PyObject *op = PyTuple_GET_ITEM(spec, 3), *desc = PyTuple_GET_ITEM(spec, 4);
    g->kind = G_SYM_REL;
    g->source = -1;
    if (!PyTuple_Check(srcs) || !PyTuple_Check(prog) || PyTuple_GET_SIZE(prog) % 2 ||
        PyTuple_GET_SIZE(prog) == 0 || PyTuple_GET_SIZE(srcs) > INT_MAX / 2 ||
        PyTuple_GET_SIZE(prog) > INT_MAX / 2 || !PyUnicode_Check(op) ||
        !PyUnicode_Check(desc)) {
        PyErr_SetString(PyExc_TypeError, "SYM_REL takes a tuple of sources, a non-empty "
                        "tuple of (opcode, arg) pairs, an op and a str description");
        return -1;
    }
    g->relop = -1;
    for (int k = 0; k < (int)(sizeof(ops) / sizeof(ops[0])); k++) {
        if (PyUnicode_CompareWithASCIIString(op, ops[k]) == 0)
            g->relop = k;
    }
    if (g->relop < 0) {
        PyErr_Format(PyExc_ValueError, "SYM_REL: unknown relation %R", op);
        return -1;
    }
    g->desc = Py_NewRef(desc);
    g->nsyms = (int)PyTuple_GET_SIZE(srcs);
    g->nprog = (int)PyTuple_GET_SIZE(prog) / 2;
    g->syms = PyMem_Malloc((g->nsyms ? g->nsyms : 1) * sizeof(int));
    g->prog = PyMem_Malloc(2 * g->nprog * sizeof(Py_ssize_t));
    if (g->syms == NULL || g->prog == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int k = 0; k < g->nsyms; k++) {
        g->syms[k] = add_source(b, PyTuple_GET_ITEM(srcs, k));
        if (g->syms[k] < 0)
            return -1;
    }
    int depth = 0;
    for (int k = 0; k < 2 * g->nprog; k++) {
        g->prog[k] = PyLong_AsSsize_t(PyTuple_GET_ITEM(prog, k));
        if (g->prog[k] == -1 && PyErr_Occurred())
            return -1;
        if (k % 2)
            continue;
        Py_ssize_t code = g->prog[k];
        if (code < 0 || code >= SYM_NOPS) {
            PyErr_Format(PyExc_ValueError, "SYM_REL: unknown opcode %zd", code);
            return -1;
        }
        if (code == SYM_PUSH_SRC || code == SYM_PUSH_CONST)
            depth++;
        else
            depth--;
        if (depth < 1 || depth > SYM_STACK) {
            PyErr_SetString(PyExc_ValueError, "SYM_REL: malformed program (stack)");
            return -1;
        }
    }
    for (int k = 0; k < g->nprog; k++) {
        Py_ssize_t arg = PyLong_AsSsize_t(PyTuple_GET_ITEM(prog, 2 * k + 1));
        if (g->prog[2 * k] == SYM_PUSH_SRC && (arg < 0 || arg >= g->nsyms)) {
            PyErr_Format(PyExc_ValueError, "SYM_REL: source index %zd out of range", arg);
            return -1;
        }
    }
    if (depth != 1) {
        PyErr_SetString(PyExc_ValueError, "SYM_REL: malformed program (result)");
        return -1;
    }
    return 0;
}

static int
parse_guard(Builder *b, PyObject *spec, Guard *g)
{
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 2 ||
        !PyUnicode_Check(PyTuple_GET_ITEM(spec, 0))) {
        PyErr_Format(PyExc_ValueError,
                     "a guard must be a tuple (kind, source, *params), got %R", spec);
        return -1;
    }
    PyObject *kind = PyTuple_GET_ITEM(spec, 0);
    g->source = -1;
    if (PyUnicode_CompareWithASCIIString(kind, "GRAD_MODE") == 0) {
        /* ("GRAD_MODE", enabled) or ("GRAD_MODE", None, enabled) */
        Py_ssize_t n = PyTuple_GET_SIZE(spec);
        if ((n != 2 && n != 3) || (n == 3 && PyTuple_GET_ITEM(spec, 1) != Py_None)) {
            PyErr_Format(PyExc_ValueError,
                         "guard %R: expected ('GRAD_MODE', enabled) or ('GRAD_MODE', None, "
                         "enabled)", spec);
            return -1;
        }
        g->kind = G_GRAD;
        g->flag = PyObject_IsTrue(PyTuple_GET_ITEM(spec, n - 1));
        return g->flag < 0 ? -1 : 0;
    }
    if (PyUnicode_CompareWithASCIIString(kind, "AUTOCAST") == 0) {
        /* ("AUTOCAST", dtype or None): the thread's autocast dtype (None: off) */
        PyObject *d = PyTuple_GET_ITEM(spec, PyTuple_GET_SIZE(spec) - 1);
        if (PyTuple_GET_SIZE(spec) != 2) {
            PyErr_Format(PyExc_ValueError, "guard %R: expected ('AUTOCAST', dtype or None)",
                         spec);
            return -1;
        }
        g->kind = G_AUTOCAST;
        g->flag = d == Py_None ? -1 : (int)em_dtype_from_object(d);
        return g->flag < -1 || (d != Py_None && g->flag < 0) ? -1 : 0;
    }
    if (PyUnicode_CompareWithASCIIString(kind, "COMPILE_CONTEXT") == 0) {
        /* ("COMPILE_CONTEXT", callback) or ("COMPILE_CONTEXT", None, callback) */
        Py_ssize_t n = PyTuple_GET_SIZE(spec);
        if ((n != 2 && n != 3) || (n == 3 && PyTuple_GET_ITEM(spec, 1) != Py_None) ||
            !PyCallable_Check(PyTuple_GET_ITEM(spec, n - 1))) {
            PyErr_Format(PyExc_ValueError,
                         "guard %R: expected ('COMPILE_CONTEXT', callback) or "
                         "('COMPILE_CONTEXT', None, callback)", spec);
            return -1;
        }
        g->kind = G_CONTEXT;
        g->obj = Py_NewRef(PyTuple_GET_ITEM(spec, n - 1));
        return 0;
    }
    if (PyUnicode_CompareWithASCIIString(kind, "SYM_REL") == 0)
        return parse_sym_rel(b, spec, g);
    g->source = add_source(b, PyTuple_GET_ITEM(spec, 1));
    if (g->source < 0)
        return -1;
    if (PyUnicode_CompareWithASCIIString(kind, "TENSOR_MATCH") == 0) {
        g->kind = G_TENSOR;
        return parse_tensor_match(spec, g);
    }
    if (PyUnicode_CompareWithASCIIString(kind, "TYPE_MATCH") == 0) {
        if (expect_params(spec, 3, "('TYPE_MATCH', source, type)") < 0)
            return -1;
        g->kind = G_TYPE;
        g->obj = PyTuple_GET_ITEM(spec, 2);
        if (!PyType_Check(g->obj)) {
            g->obj = NULL;
            PyErr_SetString(PyExc_TypeError, "TYPE_MATCH needs a type");
            return -1;
        }
        Py_INCREF(g->obj);
        return 0;
    }
    if (PyUnicode_CompareWithASCIIString(kind, "ID_MATCH") == 0) {
        if (expect_params(spec, 3, "('ID_MATCH', source, obj)") < 0)
            return -1;
        g->kind = G_ID;
        PyObject *obj = PyTuple_GET_ITEM(spec, 2);
        /* A weak reference keeps guarded modules and functions from living as
         * long as the code object; objects without weakref support (None,
         * ints, ...) are held strongly, so their address cannot be reused. */
        g->obj = PyWeakref_NewRef(obj, NULL);
        if (g->obj != NULL) {
            g->flag = 1;
            return 0;
        }
        if (!PyErr_ExceptionMatches(PyExc_TypeError))
            return -1;
        PyErr_Clear();
        g->obj = Py_NewRef(obj);
        return 0;
    }
    if (PyUnicode_CompareWithASCIIString(kind, "EQUALS_MATCH") == 0) {
        if (expect_params(spec, 3, "('EQUALS_MATCH', source, value)") < 0)
            return -1;
        g->kind = G_EQUALS;
        PyObject *v = PyTuple_GET_ITEM(spec, 2);
        if (!valid_constant(v, 0)) {
            PyErr_Format(PyExc_TypeError,
                         "EQUALS_MATCH takes None, bool, int, float, str or a tuple of "
                         "them, got %.100s", Py_TYPE(v)->tp_name);
            return -1;
        }
        g->obj = Py_NewRef(v);
        return 0;
    }
    if (PyUnicode_CompareWithASCIIString(kind, "LEN_MATCH") == 0) {
        if (expect_params(spec, 3, "('LEN_MATCH', source, n)") < 0)
            return -1;
        g->kind = G_LEN;
        g->n = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 2));
        return (g->n == -1 && PyErr_Occurred()) ? -1 : 0;
    }
    if (PyUnicode_CompareWithASCIIString(kind, "ALIAS") == 0) {
        if (expect_params(spec, 4, "('ALIAS', source, other_source, same)") < 0)
            return -1;
        g->kind = G_ALIAS;
        int other = add_source(b, PyTuple_GET_ITEM(spec, 2));
        if (other < 0)
            return -1;
        g->n = other;
        g->flag = PyObject_IsTrue(PyTuple_GET_ITEM(spec, 3));
        return g->flag < 0 ? -1 : 0;
    }
    if (PyUnicode_CompareWithASCIIString(kind, "DICT_KEYS") == 0) {
        if (expect_params(spec, 3, "('DICT_KEYS', source, keys)") < 0)
            return -1;
        g->kind = G_DICT_KEYS;
        g->obj = PySequence_Tuple(PyTuple_GET_ITEM(spec, 2));
        return g->obj == NULL ? -1 : 0;
    }
    if (PyUnicode_CompareWithASCIIString(kind, "LAMBDA") == 0) {
        if (expect_params(spec, 4, "('LAMBDA', source, predicate, description)") < 0)
            return -1;
        g->kind = G_LAMBDA;
        if (!PyCallable_Check(PyTuple_GET_ITEM(spec, 2)) ||
            !PyUnicode_Check(PyTuple_GET_ITEM(spec, 3))) {
            PyErr_SetString(PyExc_TypeError, "LAMBDA needs a callable and a str description");
            return -1;
        }
        g->obj = Py_NewRef(PyTuple_GET_ITEM(spec, 2));
        g->desc = Py_NewRef(PyTuple_GET_ITEM(spec, 3));
        return 0;
    }
    PyErr_Format(PyExc_ValueError,
                 "unknown guard kind %R (expected TENSOR_MATCH, TYPE_MATCH, ID_MATCH, "
                 "EQUALS_MATCH, LEN_MATCH, DICT_KEYS, GRAD_MODE, COMPILE_CONTEXT, SYM_REL or "
                 "LAMBDA)", kind);
    return -1;
}

/* "(4, 3)", "(4,)", "()"; "?" for a wildcard. */
static PyObject *
dims_text(const Py_ssize_t *v, int n)
{
    PyObject *parts = PyList_New(n), *sep = NULL, *joined = NULL, *r = NULL;
    for (int d = 0; parts != NULL && d < n; d++) {
        PyObject *t = v[d] == ANY ? PyUnicode_FromString("?")
                                  : PyUnicode_FromFormat("%zd", v[d]);
        if (t == NULL)
            goto error;
        PyList_SET_ITEM(parts, d, t);
    }
    if (parts == NULL || (sep = PyUnicode_FromString(", ")) == NULL)
        goto error;
    joined = PyUnicode_Join(sep, parts);
    if (joined != NULL)
        r = PyUnicode_FromFormat(n == 1 ? "(%U,)" : "(%U)", joined);
error:
    Py_XDECREF(parts);
    Py_XDECREF(sep);
    Py_XDECREF(joined);
    return r;
}

/* One guard in words, e.g. "x: tensor float32 shape (4, 3) stride (3, 1)
 * requires_grad=False", "len(xs) == 3", "self.training == True". */
static PyObject *
describe_guard(GuardProgram *p, PyObject *spec, const Guard *g)
{
    PyObject *kind = PyTuple_GET_ITEM(spec, 0);
    PyObject *name = g->source >= 0 ? p->sources[g->source].name : NULL;
    switch (g->kind) {
    case G_TENSOR: {
        const char *tname = ((PyTypeObject *)g->obj)->tp_name;
        PyObject *sizes = dims_text(g->geom, g->ndim);
        PyObject *strides = sizes ? dims_text(g->geom + g->ndim, g->ndim) : NULL;
        PyObject *offset = NULL, *r = NULL;
        if (strides == NULL)
            goto tensor_done;
        if (g->offset == ANY || g->offset == 0)
            offset = PyUnicode_FromString("");
        else
            offset = PyUnicode_FromFormat(" storage_offset=%zd", g->offset);
        if (offset != NULL)
            r = PyUnicode_FromFormat(
                "%U: %s %s shape %U stride %U%U requires_grad=%s%s", name,
                g->obj == (PyObject *)&em_Tensor_Type ? "tensor" : tname,
                em_dtypes[g->dtype]->name, sizes, strides, offset,
                g->flag ? "True" : "False", g->meta ? " device=meta" : "");
    tensor_done:
        Py_XDECREF(sizes);
        Py_XDECREF(strides);
        Py_XDECREF(offset);
        return r;
    }
    case G_TYPE:
        return PyUnicode_FromFormat("type(%U) is %s", name,
                                    ((PyTypeObject *)g->obj)->tp_name);
    case G_ID: {
        PyObject *target = g->flag ? weak_target(g->obj) : g->obj;
        if (target == NULL)
            return PyUnicode_FromFormat("%U is a dead object", name);
        PyObject *qual = PyObject_GetAttrString(target, "__qualname__");
        if (qual == NULL || !PyUnicode_Check(qual)) {
            PyErr_Clear();
            Py_XDECREF(qual);
            return PyUnicode_FromFormat("%U is the %s object at %p", name,
                                        Py_TYPE(target)->tp_name, (void *)target);
        }
        PyObject *r = PyUnicode_FromFormat("%U is the %s %U at %p", name,
                                           Py_TYPE(target)->tp_name, qual, (void *)target);
        Py_DECREF(qual);
        return r;
    }
    case G_EQUALS:
        return PyUnicode_FromFormat("%U == %.200R", name, g->obj);
    case G_LEN:
        return PyUnicode_FromFormat("len(%U) == %zd", name, g->n);
    case G_DICT_KEYS:
        return PyUnicode_FromFormat("tuple(%U.keys()) == %.200R", name, g->obj);
    case G_GRAD:
        return PyUnicode_FromFormat("ember.is_grad_enabled() == %s",
                                    g->flag ? "True" : "False");
    case G_CONTEXT:
        return PyUnicode_FromString("the ember.compile call running is the one that "
                                    "compiled this entry");
    case G_AUTOCAST:
        if (g->flag < 0)
            return PyUnicode_FromString("ember.is_autocast_enabled('cpu') == False");
        return PyUnicode_FromFormat("ember.is_autocast_enabled('cpu') == True and "
                                    "ember.get_autocast_dtype('cpu') == ember.%s",
                                    autocast_name(g->flag));
    case G_LAMBDA:
        return PyUnicode_FromFormat("%U %U", name, g->desc);
    case G_SYM_REL:
        return Py_NewRef(g->desc);
    case G_ALIAS:
        return PyUnicode_FromFormat("%U %s %U", name, g->flag ? "is" : "is not",
                                    p->sources[g->n].name);
    }
    return Py_NewRef(kind);
}

static void
program_release(GuardProgram *p)
{
    for (int i = 0; i < p->nsources; i++) {
        Py_CLEAR(p->sources[i].key);
        Py_CLEAR(p->sources[i].name);
    }
    for (int i = 0; i < p->nguards; i++) {
        Py_CLEAR(p->guards[i].obj);
        Py_CLEAR(p->guards[i].desc);
        PyMem_Free(p->guards[i].geom);
        p->guards[i].geom = NULL;
        PyMem_Free(p->guards[i].syms);
        p->guards[i].syms = NULL;
        PyMem_Free(p->guards[i].prog);
        p->guards[i].prog = NULL;
    }
    PyMem_Free(p->sources);
    PyMem_Free(p->guards);
    p->sources = NULL;
    p->guards = NULL;
    p->nsources = p->nguards = 0;
}

static PyObject *
program_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"guards", "argnames", "freenames", NULL};
    PyObject *guards, *argnames = Py_None, *freenames = Py_None, *spec = NULL;
    Builder b = {NULL, NULL, 0, 0};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OO:GuardProgram", kwlist, &guards,
                                     &argnames, &freenames))
        return NULL;
    GuardProgram *p = (GuardProgram *)type->tp_alloc(type, 0);
    if (p == NULL)
        return NULL;
    b.prog = p;
    spec = PySequence_Tuple(guards);
    if (spec == NULL)
        goto error;
    p->argnames = argnames == Py_None ? NULL : PySequence_Tuple(argnames);
    p->freenames = freenames == Py_None ? NULL : PySequence_Tuple(freenames);
    if ((argnames != Py_None && p->argnames == NULL) ||
        (freenames != Py_None && p->freenames == NULL))
        goto error;
    Py_ssize_t n = PyTuple_GET_SIZE(spec);
    if (n > INT_MAX / 2) {
        PyErr_SetString(PyExc_OverflowError, "too many guards");
        goto error;
    }
    p->guards = PyMem_Calloc(n ? n : 1, sizeof(Guard));
    p->descr = PyTuple_New(n);
    b.seen = PyDict_New();
    if (p->guards == NULL || p->descr == NULL || b.seen == NULL) {
        if (p->guards == NULL)
            PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        p->nguards++;   /* counted first so a half-parsed guard is released */
        if (parse_guard(&b, PyTuple_GET_ITEM(spec, i), &p->guards[i]) < 0)
            goto error;
        PyObject *line = describe_guard(p, PyTuple_GET_ITEM(spec, i), &p->guards[i]);
        if (line == NULL)
            goto error;
        PyTuple_SET_ITEM(p->descr, i, line);
    }
    p->seen = b.seen;        /* kept: em_guards_find_source */
    Py_DECREF(spec);
    Py_CLEAR(p->argnames);   /* only needed to name sources */
    Py_CLEAR(p->freenames);
    return (PyObject *)p;

error:
    Py_XDECREF(b.seen);
    Py_XDECREF(spec);
    Py_DECREF(p);
    return NULL;
}

static int
program_traverse(GuardProgram *p, visitproc visit, void *arg)
{
    for (int i = 0; i < p->nguards; i++) {
        Py_VISIT(p->guards[i].obj);
        Py_VISIT(p->guards[i].desc);
    }
    for (int i = 0; i < p->nsources; i++)
        Py_VISIT(p->sources[i].key);
    Py_VISIT(p->seen);
    return 0;
}

static int
program_clear(GuardProgram *p)
{
    p->cleared = 1;
    program_release(p);
    Py_CLEAR(p->descr);
    Py_CLEAR(p->seen);
    Py_CLEAR(p->argnames);
    Py_CLEAR(p->freenames);
    return 0;
}

static void
program_dealloc(GuardProgram *p)
{
    PyObject_GC_UnTrack(p);
    program_clear(p);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

/* ------------------------------------------------------------------ evaluation */

typedef struct {
    const GuardProgram *prog;
    const em_GuardInputs *in;
    PyObject **vals;          /* new references; NULL until resolved */
    PyObject **reason;        /* NULL unless verbose */
} Eval;

/* Stores a failure message when verbose. Returns 0 (a failure) or -1. */
static int
fail(Eval *ev, const char *fmt, ...)
{
    if (ev->reason == NULL || *ev->reason != NULL)
        return 0;
    va_list va;
    va_start(va, fmt);
    *ev->reason = PyUnicode_FromFormatV(fmt, va);
    va_end(va);
    return *ev->reason == NULL ? -1 : 0;
}

static PyObject *
lookup_mapping(PyObject *map, PyObject *key)
{
    if (PyDict_Check(map))
        return Py_XNewRef(PyDict_GetItemWithError(map, key));
    PyObject *v = PyObject_GetItem(map, key);
    if (v == NULL && PyErr_ExceptionMatches(PyExc_KeyError))
        PyErr_Clear();
    return v;
}

/* The dict version tag is read on CPython 3.11 only (deprecated after it). */
#if PY_VERSION_HEX < 0x030C0000
#define EM_DICT_MEMO 1
#else
#define EM_DICT_MEMO 0
#endif

/* base[key] for an exact dict or OrderedDict base (both look up as dict does, with
 * no __missing__): a new reference, or NULL (with an exception set or not). */
static PyObject *
dict_item(Source *s, PyObject *base)
{
#if EM_DICT_MEMO
    uint64_t version = ((PyDictObject *)base)->ma_version_tag;
    if (s->memo_dict == base && s->memo_version == version && s->memo_value != NULL)
        return Py_NewRef(s->memo_value);
#endif
    PyObject *v = PyDict_GetItemWithError(base, s->key);
    if (v == NULL)
        return NULL;
#if EM_DICT_MEMO
    /* written together after the lookup (which may have run a key's __eq__), with no
     * Python code between the writes, so another thread sees one consistent memo */
    s->memo_dict = base;
    s->memo_version = ((PyDictObject *)base)->ma_version_tag;
    s->memo_value = v;
#endif
    return Py_NewRef(v);
}

/* Resolves source i. Returns 1 and a borrowed *out, 0 if it does not exist, -1. */
static int
resolve(Eval *ev, int i, PyObject **out)
{
    if (ev->vals[i] != NULL) {
        *out = ev->vals[i];
        return 1;
    }
    const Source *s = &ev->prog->sources[i];
#if EM_DICT_MEMO
    /* The common case first (a module's parameters and buffers): an item of a dict
     * already resolved this call whose memo holds (set by dict_item for exact dicts
     * only, so the memo's dict being the base says what the slow path would). */
    if ((s->kind == SRC_DICT || s->kind == SRC_ITEM) && s->base >= 0 &&
        s->memo_value != NULL && ev->vals[s->base] == s->memo_dict &&
        ((PyDictObject *)s->memo_dict)->ma_version_tag == s->memo_version) {
        *out = ev->vals[i] = Py_NewRef(s->memo_value);
        return 1;
    }
#endif
    const em_GuardInputs *in = ev->in;
    PyObject *base = NULL, *v = NULL;
    if (s->base >= 0) {
        int r = resolve(ev, s->base, &base);
        if (r <= 0)
            return r;
    }
    switch (s->kind) {
    case SRC_ARG:
        if (s->index >= in->nargs || in->args[s->index] == NULL)
            return fail(ev, "argument '%U' is missing", s->name);
        v = Py_NewRef(in->args[s->index]);
        break;
    case SRC_GLOBAL:
    case SRC_BUILTIN:
        if (s->kind == SRC_GLOBAL && in->globals != NULL) {
            v = lookup_mapping(in->globals, s->key);
            if (v == NULL && PyErr_Occurred())
                return -1;
        }
        if (v == NULL && in->builtins != NULL) {
            v = lookup_mapping(in->builtins, s->key);
            if (v == NULL && PyErr_Occurred())
                return -1;
        }
        if (v == NULL)
            return fail(ev, "%s '%U' is not defined",
                        s->kind == SRC_GLOBAL ? "global name" : "builtin", s->key);
        break;
    case SRC_CLOSURE: {
        PyObject *cl = in->closure;
        if (cl == NULL || !PyTuple_Check(cl) || s->index >= PyTuple_GET_SIZE(cl) ||
            !PyCell_Check(PyTuple_GET_ITEM(cl, s->index)))
            return fail(ev, "closure variable '%U' is missing", s->name);
        v = PyCell_GET(PyTuple_GET_ITEM(cl, s->index));
        if (v == NULL)
            return fail(ev, "closure variable '%U' is empty", s->name);
        Py_INCREF(v);
        break;
    }
    case SRC_CELL: {
        PyObject *cl = in->closure;
        if (cl == NULL || !PyTuple_Check(cl) || s->index >= PyTuple_GET_SIZE(cl))
            return fail(ev, "closure cell '%U' is missing", s->name);
        v = Py_NewRef(PyTuple_GET_ITEM(cl, s->index));
        break;
    }
    case SRC_OBJECT:
        v = Py_NewRef(s->key);
        break;
    case SRC_DICT:
        if (!PyDict_Check(base))
            return fail(ev, "'%U' is no longer a dict (got %s)",
                        ev->prog->sources[s->base].name, Py_TYPE(base)->tp_name);
        v = PyDict_CheckExact(base) || PyODict_CheckExact(base)
            ? dict_item(&ev->prog->sources[i], base)
            : Py_XNewRef(PyDict_GetItemWithError(base, s->key));
        if (v == NULL && PyErr_Occurred())
            return -1;
        if (v == NULL)
            return fail(ev, "'%U' has no key %R", ev->prog->sources[s->base].name, s->key);
        break;
    case SRC_SIZE:
    case SRC_STRIDE: {
        if (!em_Tensor_Check(base))
            return fail(ev, "'%U' is no longer a tensor (got %s)",
                        ev->prog->sources[s->base].name, Py_TYPE(base)->tp_name);
        const em_Tensor *t = (const em_Tensor *)base;
        if (s->index >= t->ndim)
            return fail(ev, "'%U' has %d dims, not %zd", ev->prog->sources[s->base].name,
                        t->ndim, s->index + 1);
        v = PyLong_FromSsize_t(s->kind == SRC_SIZE ? t->sizes[s->index]
                                                   : t->strides[s->index]);
        if (v == NULL)
            return -1;
        break;
    }
    case SRC_ATTR:
        v = PyObject_GetAttr(base, s->key);
        if (v == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                return -1;
            PyErr_Clear();
            return fail(ev, "'%U' has no attribute '%U'", ev->prog->sources[s->base].name,
                        s->key);
        }
        break;
    case SRC_ITEM:
        if ((PyList_CheckExact(base) || PyTuple_CheckExact(base)) &&
            PyLong_CheckExact(s->key)) {
            Py_ssize_t k = PyLong_AsSsize_t(s->key);
            Py_ssize_t n = Py_SIZE(base);
            if (k == -1 && PyErr_Occurred())
                return -1;
            if (k < 0)
                k += n;
            if (k < 0 || k >= n)
                return fail(ev, "'%U' has no index %R (length %zd)",
                            ev->prog->sources[s->base].name, s->key, n);
            v = Py_NewRef(PyList_CheckExact(base) ? PyList_GET_ITEM(base, k)
                                                  : PyTuple_GET_ITEM(base, k));
        }
        else if (PyDict_CheckExact(base) || PyODict_CheckExact(base)) {
            v = dict_item(&ev->prog->sources[i], base);
            if (v == NULL && PyErr_Occurred())
                return -1;
        }
        else {
            v = PyObject_GetItem(base, s->key);
            if (v == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_KeyError) &&
                    !PyErr_ExceptionMatches(PyExc_IndexError))
                    return -1;
                PyErr_Clear();
            }
        }
        if (v == NULL)
            return fail(ev, "'%U' has no item %R", ev->prog->sources[s->base].name, s->key);
        break;
    }
    ev->vals[i] = v;
    *out = v;
    return 1;
}

/* Constant equality for the EQUALS_MATCH types; c was validated when built. */
static int
const_equal(PyObject *v, PyObject *c)
{
    if (v == c)
        return 1;
    if (Py_TYPE(v) != Py_TYPE(c))
        return 0;
    if (PyLong_CheckExact(c))
        return PyObject_RichCompareBool(v, c, Py_EQ);   /* exact ints: no Python code */
    if (PyFloat_CheckExact(c)) {
        double x = PyFloat_AS_DOUBLE(v), y = PyFloat_AS_DOUBLE(c);
        if (isnan(x) || isnan(y))
            return isnan(x) && isnan(y);
        return x == y && signbit(x) == signbit(y);
    }
    if (PyUnicode_CheckExact(c))
        return PyUnicode_Compare(v, c) == 0;
    if (PyTuple_CheckExact(c)) {
        if (PyTuple_GET_SIZE(v) != PyTuple_GET_SIZE(c))
            return 0;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(c); i++) {
            int r = const_equal(PyTuple_GET_ITEM(v, i), PyTuple_GET_ITEM(c, i));
            if (r <= 0)
                return r;
        }
        return 1;
    }
    return 0;   /* None and bools are singletons: identity decided it */
}

static int
check_tensor(Eval *ev, const Guard *g, PyObject *v, PyObject *name)
{
    if (Py_TYPE(v) != (PyTypeObject *)g->obj)
        return fail(ev, "tensor '%U' type mismatch: expected %s, got %s", name,
                    ((PyTypeObject *)g->obj)->tp_name, Py_TYPE(v)->tp_name);
    const em_Tensor *t = (const em_Tensor *)v;
    if (t->dtype != g->dtype)
        return fail(ev, "tensor '%U' dtype mismatch: expected %s, got %s", name,
                    em_dtypes[g->dtype]->name, em_dtypes[t->dtype]->name);
    if (t->ndim != g->ndim)
        return fail(ev, "tensor '%U' ndim mismatch: expected %d, got %d", name, g->ndim,
                    t->ndim);
    const Py_ssize_t *sizes = g->geom, *strides = g->geom + g->ndim;
    for (int d = 0; d < g->ndim; d++) {
        if (sizes[d] != ANY && t->sizes[d] != sizes[d])
            return fail(ev, "tensor '%U' size mismatch at dim %d: expected %zd, got %zd",
                        name, d, sizes[d], t->sizes[d]);
    }
    for (int d = 0; d < g->ndim; d++) {
        if (strides[d] != ANY && t->strides[d] != strides[d])
            return fail(ev, "tensor '%U' stride mismatch at dim %d: expected %zd, got %zd",
                        name, d, strides[d], t->strides[d]);
    }
    if (g->offset != ANY && t->offset != g->offset)
        return fail(ev, "tensor '%U' storage offset mismatch: expected %zd, got %zd", name,
                    g->offset, t->offset);
    if ((t->requires_grad != 0) != (g->flag != 0))
        return fail(ev, "tensor '%U' requires_grad mismatch: expected %s, got %s", name,
                    g->flag ? "True" : "False", t->requires_grad ? "True" : "False");
    if (em_is_meta(t) != (g->meta != 0))
        return fail(ev, "tensor '%U' device mismatch: expected %s, got %s", name,
                    g->meta ? "meta" : "cpu", em_is_meta(t) ? "meta" : "cpu");
    return 1;
}

/* The keys of a dict, in order. Keys compare by identity first, then (str) in C
 * or (anything else but tensors, which match only themselves: an optimizer's
 * state) with ==. */
static int
check_dict_keys(Eval *ev, const Guard *g, PyObject *v, PyObject *name)
{
    if (!PyDict_Check(v))
        return fail(ev, "'%U' is no longer a dict (got %s)", name, Py_TYPE(v)->tp_name);
    Py_ssize_t n = PyTuple_GET_SIZE(g->obj);
    if (PyDict_GET_SIZE(v) != n)
        return fail(ev, "keys of '%U' changed: expected %zd keys, got %zd", name, n,
                    PyDict_GET_SIZE(v));
    Py_ssize_t pos = 0, i = 0;
    PyObject *key, *value;
    while (PyDict_Next(v, &pos, &key, &value)) {
        if (i >= n)   /* an __eq__ below grew the dict */
            return fail(ev, "keys of '%U' changed while being checked", name);
        PyObject *expected = PyTuple_GET_ITEM(g->obj, i++);
        int same = key == expected;
        if (!same && PyUnicode_CheckExact(key) && PyUnicode_CheckExact(expected))
            same = PyUnicode_Compare(key, expected) == 0;
        else if (!same && !em_Tensor_Check(key) && !em_Tensor_Check(expected)) {
            Py_INCREF(key);
            same = PyObject_RichCompareBool(key, expected, Py_EQ);
            Py_DECREF(key);
            if (same < 0)
                return -1;
        }
        if (!same)
            return fail(ev, "keys of '%U' changed: expected %R, got %R at position %zd",
                        name, expected, key, i - 1);
    }
    return 1;
}

/* The object an ID_MATCH guard holds through a weak reference, or NULL if dead. */
static PyObject *
weak_target(PyObject *ref)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *target = NULL;
    if (PyWeakref_GetRef(ref, &target) <= 0) {
        PyErr_Clear();
        return NULL;
    }
    Py_DECREF(target);   /* only compared by address; ref keeps no one alive */
    return target;
#else
    PyObject *target = PyWeakref_GET_OBJECT(ref);
    return target == Py_None ? NULL : target;
#endif
}

/* Python's floor division and modulo of a and b != 0 (no overflow: b == -1 and
 * a == PY_SSIZE_T_MIN is refused by the caller). */
static Py_ssize_t
floor_div(Py_ssize_t a, Py_ssize_t b)
{
    Py_ssize_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* A SYM_REL guard: 1 holds, 0 fails (with a reason), -1 error. */
static int
run_sym_rel(Eval *ev, const Guard *g)
{
    Py_ssize_t stack[SYM_STACK];
    int sp = 0;
    for (int k = 0; k < g->nprog; k++) {
        Py_ssize_t code = g->prog[2 * k], arg = g->prog[2 * k + 1], a, b, r = 0;
        if (code == SYM_PUSH_SRC) {
            PyObject *v = NULL;
            int res = resolve(ev, g->syms[arg], &v);
            if (res <= 0)
                return res;
            if (!PyLong_Check(v))
                return fail(ev, "'%U' is not an int", ev->prog->sources[g->syms[arg]].name);
            r = PyLong_AsSsize_t(v);
            if (r == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                return fail(ev, "%U: a value out of range", g->desc);
            }
            stack[sp++] = r;   /* depth checked when built */
            continue;
        }
        if (code == SYM_PUSH_CONST) {
            stack[sp++] = arg;
            continue;
        }
        b = stack[--sp];
        a = stack[--sp];
        switch (code) {
        case SYM_ADD:
            if (__builtin_add_overflow(a, b, &r))
                return fail(ev, "%U: overflow", g->desc);
            break;
        case SYM_MUL:
            if (__builtin_mul_overflow(a, b, &r))
                return fail(ev, "%U: overflow", g->desc);
            break;
        case SYM_FLOORDIV:
        case SYM_MOD:
            if (b == 0 || (b == -1 && a == PY_SSIZE_T_MIN))
                return fail(ev, "%U: division by zero or overflow", g->desc);
            r = floor_div(a, b);
            if (code == SYM_MOD)
                r = a - r * b;
            break;
        case SYM_MIN:
            r = a < b ? a : b;
            break;
        case SYM_MAX:
            r = a > b ? a : b;
            break;
        }
        stack[sp++] = r;
    }
    Py_ssize_t x = stack[0];
    int holds = g->relop == REL_EQ ? x == 0 : g->relop == REL_NE ? x != 0
              : g->relop == REL_LT ? x < 0 : x <= 0;
    return holds ? 1 : fail(ev, "size guard failed: %U", g->desc);
}

static int
run_guard(Eval *ev, const Guard *g)
{
    PyObject *v = NULL, *name = NULL;
    if (g->kind == G_GRAD) {
        if ((em_tls.grad_enabled != 0) == (g->flag != 0))
            return 1;
        return fail(ev, "grad mode changed: expected %s, got %s",
                    g->flag ? "enabled" : "disabled", g->flag ? "disabled" : "enabled");
    }
    if (g->kind == G_AUTOCAST) {
        if (em_tls.autocast == g->flag)
            return 1;
        return fail(ev, "autocast changed: expected %s, got %s", autocast_name(g->flag),
                    autocast_name(em_tls.autocast));
    }
    if (g->kind == G_SYM_REL)
        return run_sym_rel(ev, g);
    if (g->kind == G_CONTEXT) {
        if (em_capture_state_is(g->obj))
            return 1;
        return fail(ev, "compiled by another ember.compile call (its own backend and "
                    "options), or checked with capture off");
    }
    int r = resolve(ev, g->source, &v);
    if (r <= 0)
        return r;
    name = ev->prog->sources[g->source].name;
    switch (g->kind) {
    case G_TENSOR:
        return check_tensor(ev, g, v, name);
    case G_TYPE:
        if (Py_TYPE(v) == (PyTypeObject *)g->obj)
            return 1;
        return fail(ev, "type of '%U' changed: expected %s, got %s", name,
                    ((PyTypeObject *)g->obj)->tp_name, Py_TYPE(v)->tp_name);
    case G_ID: {
        PyObject *expected = g->flag ? weak_target(g->obj) : g->obj;
        if (expected == v)
            return 1;
        if (expected == NULL)
            return fail(ev, "'%U' was guarded on an object that no longer exists", name);
        return fail(ev, "'%U' is a different object: expected %s at %p, got %s at %p", name,
                    Py_TYPE(expected)->tp_name, (void *)expected, Py_TYPE(v)->tp_name,
                    (void *)v);
    }
    case G_EQUALS:
        r = const_equal(v, g->obj);
        if (r != 0)
            return r;
        if (Py_TYPE(v) != Py_TYPE(g->obj))
            return fail(ev, "type of '%U' changed: expected %s, got %s", name,
                        Py_TYPE(g->obj)->tp_name, Py_TYPE(v)->tp_name);
        return fail(ev, "value of '%U' changed: expected %R, got %R", name, g->obj, v);
    case G_LEN: {
        Py_ssize_t n;
        if (PyList_Check(v) || PyTuple_Check(v))
            n = Py_SIZE(v);
        else if (PyDict_Check(v))
            n = PyDict_GET_SIZE(v);
        else
            return fail(ev, "'%U' is no longer a list, tuple or dict (got %s)", name,
                        Py_TYPE(v)->tp_name);
        if (n == g->n)
            return 1;
        return fail(ev, "length of '%U' changed: expected %zd, got %zd", name, g->n, n);
    }
    case G_DICT_KEYS:
        return check_dict_keys(ev, g, v, name);
    case G_ALIAS: {
        PyObject *other = NULL;
        r = resolve(ev, (int)g->n, &other);
        if (r <= 0)
            return r;
        if ((v == other) == (g->flag != 0))
            return 1;
        return fail(ev, "'%U' %s '%U' now", name, g->flag ? "is no longer" : "is",
                    ev->prog->sources[g->n].name);
    }
    case G_LAMBDA: {
        PyObject *res = PyObject_CallOneArg(g->obj, v);
        if (res == NULL)
            return -1;
        r = PyObject_IsTrue(res);
        Py_DECREF(res);
        if (r != 0)
            return r;
        return fail(ev, "guard on '%U' failed: %U", name, g->desc);
    }
    }
    PyErr_SetString(PyExc_SystemError, "corrupt guard program");
    return -1;
}

void
em_resolved_clear(em_Resolved *r)
{
    for (int i = 0; r->vals != NULL && i < r->n; i++)
        Py_XDECREF(r->vals[i]);
    if (r->vals != NULL && r->vals != r->small)
        PyMem_Free(r->vals);
    r->vals = NULL;
    r->n = 0;
}

/* Runs the guards; the resolved sources are left in *res (released by the caller). */
static int
check(GuardProgram *p, const em_GuardInputs *in, PyObject **reason, em_Resolved *res)
{
    Eval ev = {p, in, NULL, reason};
    int result = 1;
    res->vals = NULL;
    res->n = 0;
    if (reason != NULL)
        *reason = NULL;
    if (p->cleared) {
        if (reason != NULL)
            *reason = PyUnicode_FromString("guard program was cleared");
        return reason != NULL && *reason == NULL ? -1 : 0;
    }
    if (p->nsources > (int)(sizeof(res->small) / sizeof(res->small[0]))) {
        res->vals = PyMem_Calloc(p->nsources, sizeof(PyObject *));
        if (res->vals == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    else {
        memset(res->small, 0, sizeof(res->small));
        res->vals = res->small;
    }
    res->n = p->nsources;
    ev.vals = res->vals;
    /* Keep the program alive: a predicate or getattr may drop the last reference. */
    Py_INCREF(p);
    for (int i = 0; i < p->nguards; i++) {
        result = run_guard(&ev, &p->guards[i]);
        if (result <= 0)
            break;
    }
    Py_DECREF(p);
    if (result < 0 && reason != NULL)
        Py_CLEAR(*reason);
    return result;
}

int
em_guards_check(PyObject *program, const em_GuardInputs *in, PyObject **reason)
{
    em_Resolved res;
    int result = check((GuardProgram *)program, in, reason, &res);
    em_resolved_clear(&res);
    return result;
}

int
em_guards_check_resolved(PyObject *program, const em_GuardInputs *in, em_Resolved *out)
{
    return check((GuardProgram *)program, in, NULL, out);
}

int
em_guards_find_source(PyObject *program, PyObject *getter)
{
    GuardProgram *p = (GuardProgram *)program;
    if (!em_GuardProgram_Check(program) || p->seen == NULL || p->cleared)
        return -1;
    Builder b = {p, p->seen, p->nsources, 1};
    int index = add_source(&b, getter);
    if (index < 0) {
        PyErr_Clear();
        return -1;
    }
    return index;
}

/* ------------------------------------------------------------------ Python methods */

PyTypeObject *em_FrameInfo_Type;

static PyStructSequence_Field frame_info_fields[] = {
    {"code", "the code object of the frame"},
    {"func", "the function being called (frame.f_func)"},
    {"globals", "the function's globals"},
    {"builtins", "the function's builtins"},
    {"args", "the argument slots in slot order: positional, keyword-only, *args, **kwargs"},
    {"closure", "the function's closure: a tuple of cells, or None"},
    {NULL},
};

static PyStructSequence_Desc frame_info_desc = {
    "ember._C._capture.FrameInfo",
    "What the converter sees of a frame: its code, function, globals, builtins, "
    "argument values and closure (never the frame itself).",
    frame_info_fields,
    6,
};

PyObject *
em_frame_info_new(PyObject *code, PyObject *func, PyObject *globals, PyObject *builtins,
                  PyObject *args, PyObject *closure)
{
    PyObject *info = PyStructSequence_New(em_FrameInfo_Type);
    if (info == NULL)
        return NULL;
    PyObject *items[6] = {code, func, globals, builtins, args, closure};
    for (int i = 0; i < 6; i++)
        PyStructSequence_SET_ITEM(info, i, Py_NewRef(items[i] ? items[i] : Py_None));
    return info;
}

/* check(args, globals=None, builtins=None, closure=None), args a sequence of the
 * argument values or a FrameInfo. */
static int
parse_inputs(PyObject *args, PyObject *kwds, const char *fname, em_GuardInputs *in,
             PyObject **fast)
{
    static char *kwlist[] = {"args", "globals", "builtins", "closure", NULL};
    PyObject *values, *globals = Py_None, *builtins = Py_None, *closure = Py_None;
    char format[32];
    PyOS_snprintf(format, sizeof(format), "O|OOO:%s", fname);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, format, kwlist, &values, &globals,
                                     &builtins, &closure))
        return -1;
    if (Py_TYPE(values) == em_FrameInfo_Type) {
        globals = PyStructSequence_GET_ITEM(values, 2);
        builtins = PyStructSequence_GET_ITEM(values, 3);
        closure = PyStructSequence_GET_ITEM(values, 5);
        values = PyStructSequence_GET_ITEM(values, 4);
    }
    *fast = PySequence_Fast(values, "guard inputs: args must be a sequence or a FrameInfo");
    if (*fast == NULL)
        return -1;
    in->args = PySequence_Fast_ITEMS(*fast);
    in->nargs = PySequence_Fast_GET_SIZE(*fast);
    in->globals = globals == Py_None ? NULL : globals;
    in->builtins = builtins == Py_None ? NULL : builtins;
    in->closure = closure == Py_None ? NULL : closure;
    return 0;
}

static PyObject *
program_check(PyObject *self, PyObject *args, PyObject *kwds)
{
    em_GuardInputs in;
    PyObject *fast = NULL;
    if (parse_inputs(args, kwds, "check", &in, &fast) < 0)
        return NULL;
    int r = em_guards_check(self, &in, NULL);
    Py_DECREF(fast);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

static PyObject *
program_check_verbose(PyObject *self, PyObject *args, PyObject *kwds)
{
    em_GuardInputs in;
    PyObject *fast = NULL, *reason = NULL;
    if (parse_inputs(args, kwds, "check_verbose", &in, &fast) < 0)
        return NULL;
    int r = em_guards_check(self, &in, &reason);
    Py_DECREF(fast);
    if (r < 0)
        return NULL;
    if (r > 0)
        Py_RETURN_NONE;
    return reason ? reason : PyUnicode_FromString("guard failed");
}

static Py_ssize_t
program_len(PyObject *self)
{
    return ((GuardProgram *)self)->nguards;
}

static PyObject *
program_repr(PyObject *self)
{
    GuardProgram *p = (GuardProgram *)self;
    return PyUnicode_FromFormat("<GuardProgram: %d guards on %d sources>", p->nguards,
                                p->nsources);
}

static PyObject *
program_get_guards(PyObject *self, void *c)
{
    GuardProgram *p = (GuardProgram *)self;
    return p->descr ? Py_NewRef(p->descr) : PyTuple_New(0);
}

static PyObject *
program_get_sources(PyObject *self, void *c)
{
    GuardProgram *p = (GuardProgram *)self;
    PyObject *t = PyTuple_New(p->nsources);
    for (int i = 0; t != NULL && i < p->nsources; i++)
        PyTuple_SET_ITEM(t, i, Py_NewRef(p->sources[i].name));
    return t;
}

static PyMethodDef program_methods[] = {
    {"check", (PyCFunction)(void (*)(void))program_check, METH_VARARGS | METH_KEYWORDS,
     "check(args, globals=None, builtins=None, closure=None) -> bool\n\n"
     "Runs the guards over argument values (or a FrameInfo)."},
    {"check_verbose", (PyCFunction)(void (*)(void))program_check_verbose,
     METH_VARARGS | METH_KEYWORDS,
     "check_verbose(args, globals=None, builtins=None, closure=None) -> str | None\n\n"
     "None if every guard passes, else why the first failing guard failed."},
    {NULL},
};

static PyGetSetDef program_getset[] = {
    {"guards", program_get_guards, NULL,
     "one line per guard, e.g. 'TENSOR_MATCH x: ember.Tensor float32[8, 4]'", NULL},
    {"sources", program_get_sources, NULL, "the names of the distinct sources read", NULL},
    {NULL},
};

static PySequenceMethods program_as_sequence = {.sq_length = program_len};

PyTypeObject em_GuardProgram_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember._C._capture.GuardProgram",
    .tp_basicsize = sizeof(GuardProgram),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "GuardProgram(guards, argnames=None, freenames=None)\n\n"
              "Guards evaluated in C; see csrc/capture/guards.c for the tuple format. "
              "argnames and freenames name argument slots and closure cells in messages.",
    .tp_new = program_new,
    .tp_dealloc = (destructor)program_dealloc,
    .tp_traverse = (traverseproc)program_traverse,
    .tp_clear = (inquiry)program_clear,
    .tp_repr = program_repr,
    .tp_methods = program_methods,
    .tp_getset = program_getset,
    .tp_as_sequence = &program_as_sequence,
};

int
em_guards_init(PyObject *module)
{
    if (PyType_Ready(&em_GuardProgram_Type) < 0)
        return -1;
    if (em_FrameInfo_Type == NULL) {
        em_FrameInfo_Type = PyStructSequence_NewType(&frame_info_desc);
        if (em_FrameInfo_Type == NULL)
            return -1;
    }
    Py_INCREF(&em_GuardProgram_Type);
    if (PyModule_AddObject(module, "GuardProgram", (PyObject *)&em_GuardProgram_Type) < 0) {
        Py_DECREF(&em_GuardProgram_Type);
        return -1;
    }
    Py_INCREF(em_FrameInfo_Type);
    if (PyModule_AddObject(module, "FrameInfo", (PyObject *)em_FrameInfo_Type) < 0) {
        Py_DECREF(em_FrameInfo_Type);
        return -1;
    }
    return 0;
}
