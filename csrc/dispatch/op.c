/* op.c: the Op type, argument binding, and the dispatcher.
 *
 * An Op is one overload of an entry of the op table (python/ember/ops). It is
 * callable (vectorcall) and is also a method descriptor, so `t.add(y)` reaches
 * op_vectorcall(add, [t, y]) with no bound-method object and no Python frame.
 *
 * A call: bind arguments to the signature (trying overloads in order), then
 * dispatch by the thread's mode (eager or meta: the kernel, which produces
 * meta outputs from meta inputs; trace: the Python tracer), then record an
 * autograd node when grad mode is on and an input requires grad.
 */
#include "ember.h"
#include <structmember.h>

em_Op *em_ops[EM_NOPS];
PyObject *em_kw_dtype, *em_kw_memory_format, *em_str_contiguous_format;

#define EM_OPS_NAME(id, name) name,
static const char *const qualnames[] = {EM_OPS(EM_OPS_NAME)};
#undef EM_OPS_NAME

bool
em_is_number(PyObject *o)
{
    if (PyFloat_Check(o) || PyLong_Check(o) || PyComplex_Check(o))
        return true;
    return PyArray_IsScalar(o, Number) || PyArray_IsScalar(o, Bool);
}

/* Python number for a number-like object (NumPy scalars become int/float/bool). */
PyObject *
em_number_from(PyObject *o)
{
    if (PyFloat_CheckExact(o) || PyLong_CheckExact(o) || PyBool_Check(o)) {
        Py_INCREF(o);
        return o;
    }
    if (PyArray_IsScalar(o, Bool))
        return PyBool_FromLong(PyObject_IsTrue(o));
    if (PyArray_IsScalar(o, Integer) || (PyLong_Check(o)))
        return PyNumber_Long(o);
    if (PyArray_IsScalar(o, Floating) || PyFloat_Check(o))
        return PyNumber_Float(o);
    if (PyComplex_CheckExact(o))
        return Py_NewRef(o);
    if (PyArray_IsScalar(o, ComplexFloating) || PyComplex_Check(o)) {
        Py_complex c = PyComplex_AsCComplex(o);
        return c.real == -1.0 && PyErr_Occurred() ? NULL : PyComplex_FromCComplex(c);
    }
    PyErr_Format(PyExc_TypeError, "expected a number, got %s", Py_TYPE(o)->tp_name);
    return NULL;
}

/* ------------------------------------------------------------------ binding */

static const char *
type_name(em_argtype_t t)
{
    switch (t) {
    case EM_ARG_TENSOR: return "Tensor";
    case EM_ARG_SCALAR: return "Number";
    case EM_ARG_INT: return "int";
    case EM_ARG_INTLIST: return "tuple of ints";
    case EM_ARG_BOOL: return "bool";
    case EM_ARG_FLOAT: return "float";
    case EM_ARG_DTYPE: return "ember.dtype";
    case EM_ARG_STR: return "str";
    case EM_ARG_TENSORLIST: return "tuple of Tensors";
    case EM_ARG_DEVICE: return "ember.device";
    case EM_ARG_GENERATOR: return "ember.Generator";
    default: return "object";
    }
}

static const char *
display_name(PyObject *name)
{
    const char *s = PyUnicode_AsUTF8(name);
    return (s != NULL && strcmp(s, "self") == 0) ? "input" : s;
}

/* strict: a 0-d integer tensor is not an int (see bind_overload) */
static bool
is_int_like(PyObject *o, bool strict)
{
    if (PyLong_Check(o))
        return true;
    if (PyArray_IsScalar(o, Integer))
        return true;
    if (em_Tensor_Check(o) && !strict) {
        em_Tensor *t = (em_Tensor *)o;
        return t->ndim == 0 && em_is_int(t->dtype) && t->array != NULL;
    }
    return false;
}

/* Converts one argument; *conv receives a new reference (the value to bind).
 * Returns 1 on success, 0 on a type mismatch (no exception set), -1 on error. */
static int
convert_arg(const em_Param *p, PyObject *v, PyObject **conv, bool strict)
{
    if (v == Py_None && p->optional) {
        Py_INCREF(v);
        *conv = v;
        return 1;
    }
    switch (p->type) {
    case EM_ARG_TENSOR:
        if (em_Tensor_Check(v)) {
            Py_INCREF(v);
            *conv = v;
            return 1;
        }
        if (p->number_ok && em_is_number(v)) {
            *conv = em_number_from(v);
            return *conv ? 1 : -1;
        }
        if (p->number_ok && em_is_symint(v)) {
            *conv = Py_NewRef(v);      /* a size as a Python number: the tracer's */
            return 1;
        }
        return 0;
    case EM_ARG_SCALAR:
        if (em_is_number(v)) {
            *conv = em_number_from(v);
            return *conv ? 1 : -1;
        }
        if (em_is_symint(v)) {
            *conv = Py_NewRef(v);
            return 1;
        }
        if (em_Tensor_Check(v) && ((em_Tensor *)v)->numel == 1 && !em_is_meta((em_Tensor *)v)) {
            *conv = PyObject_CallMethod(v, "item", NULL);
            return *conv ? 1 : -1;
        }
        return 0;
    case EM_ARG_INT:
        if (PyLong_CheckExact(v)) {    /* the common case, before the tracer's sizes */
            *conv = Py_NewRef(v);
            return 1;
        }
        if (em_is_symint(v)) {
            *conv = Py_NewRef(v);
            return 1;
        }
        if (PyBool_Check(v) || !is_int_like(v, strict))
            return 0;
        *conv = PyNumber_Index(v);
        return *conv ? 1 : -1;
    case EM_ARG_INTLIST: {
        bool sym = em_is_symint(v);
        if (sym || (is_int_like(v, strict) && !PyBool_Check(v))) {
            if (!p->int1 && !p->varargs_list)
                return 0;
            PyObject *i = sym ? Py_NewRef(v) : PyNumber_Index(v);
            if (i == NULL)
                return -1;
            *conv = PyTuple_Pack(1, i);
            Py_DECREF(i);
            return *conv ? 1 : -1;
        }
        if (!PyTuple_Check(v) && !PyList_Check(v))
            return 0;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
        PyObject *t = PyTuple_New(n);
        if (t == NULL)
            return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(v, i);
            if (PyLong_CheckExact(item) || em_is_symint(item)) {
                PyTuple_SET_ITEM(t, i, Py_NewRef(item));
                continue;
            }
            if (PyBool_Check(item) || !is_int_like(item, strict)) {
                Py_DECREF(t);
                return 0;
            }
            PyObject *iv = PyNumber_Index(item);
            if (iv == NULL) {
                Py_DECREF(t);
                return -1;
            }
            PyTuple_SET_ITEM(t, i, iv);
        }
        *conv = t;
        return 1;
    }
    case EM_ARG_BOOL:
        if (!PyBool_Check(v) && !PyArray_IsScalar(v, Bool))
            return 0;
        *conv = PyBool_FromLong(PyObject_IsTrue(v));
        return 1;
    case EM_ARG_FLOAT:
        if (!PyFloat_Check(v) && !PyLong_Check(v) && !PyArray_IsScalar(v, Number))
            return 0;
        *conv = PyNumber_Float(v);
        return *conv ? 1 : -1;
    case EM_ARG_DTYPE: {
        if (PyObject_TypeCheck(v, &em_DType_Type)) {
            Py_INCREF(v);
            *conv = v;
            return 1;
        }
        if (v == (PyObject *)&PyFloat_Type || v == (PyObject *)&PyLong_Type ||
            v == (PyObject *)&PyBool_Type) {
            em_dtype_t t = em_dtype_from_object(v);
            *conv = (PyObject *)em_dtypes[t];
            Py_INCREF(*conv);
            return 1;
        }
        return 0;
    }
    case EM_ARG_STR:
        if (!PyUnicode_Check(v))
            return 0;
        Py_INCREF(v);
        *conv = v;
        return 1;
    case EM_ARG_TENSORLIST: {
        if (!PyTuple_Check(v) && !PyList_Check(v))
            return 0;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
        for (Py_ssize_t i = 0; i < n; i++)
            if (!em_Tensor_Check(PySequence_Fast_GET_ITEM(v, i)))
                return 0;
        *conv = PySequence_Tuple(v);
        return *conv ? 1 : -1;
    }
    case EM_ARG_DEVICE:
    case EM_ARG_GENERATOR:
    case EM_ARG_ANY:
        Py_INCREF(v);
        *conv = v;
        return 1;
    }
    return 0;
}

typedef struct {
    int kind;          /* 0 ok, 1 arity/keyword problem, 2 type mismatch, -1 exception */
    int param;         /* offending parameter */
    PyObject *value;   /* offending value (borrowed) */
    char msg[200];
    bool strict;       /* input: 0-d integer tensors do not bind to int parameters */
} bind_status;

static void
clear_bound(PyObject **out, int n)
{
    for (int i = 0; i < n; i++)
        Py_CLEAR(out[i]);
}

/* Binds args to op's signature into out[0..nparams) (new references). */
static int
bind(em_Op *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **out,
     bind_status *st)
{
    PyObject *raw[EM_MAX_PARAMS] = {NULL};
    PyObject *packed = NULL;
    int np = op->nparams;
    st->kind = 0;
    for (int i = 0; i < np; i++)
        out[i] = NULL;   /* a failed bind clears out[], converted or not */
    if (nargs > op->npositional) {
        /* view(2, 3): trailing ints pack into a final int[] parameter */
        int last = op->npositional - 1;
        if (last >= 0 && op->params[last].varargs_list) {
            packed = PyTuple_New(nargs - last);
            if (packed == NULL) {
                st->kind = -1;
                return -1;
            }
            for (Py_ssize_t i = last; i < nargs; i++) {
                Py_INCREF(args[i]);
                PyTuple_SET_ITEM(packed, i - last, args[i]);
            }
            for (int i = 0; i < last; i++)
                raw[i] = args[i];
            raw[last] = packed;
        }
        else {
            st->kind = 1;
            snprintf(st->msg, sizeof st->msg, "takes %d positional arguments but %zd were given",
                     op->npositional, nargs);
            return -1;
        }
    }
    else {
        for (Py_ssize_t i = 0; i < nargs; i++)
            raw[i] = args[i];
    }
    if (kwnames != NULL) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t k = 0; k < nk; k++) {
            PyObject *key = PyTuple_GET_ITEM(kwnames, k);
            int found = -1;
            for (int i = 0; i < np; i++) {
                if (op->params[i].name == key) {
                    found = i;
                    break;
                }
            }
            if (found < 0) {
                for (int i = 0; i < np; i++) {
                    if (PyUnicode_Compare(op->params[i].name, key) == 0) {
                        found = i;
                        break;
                    }
                }
                /* PyTorch spells the first tensor 'input' in functions */
                if (found < 0 && np > 0 && PyUnicode_CompareWithASCIIString(key, "input") == 0 &&
                    PyUnicode_CompareWithASCIIString(op->params[0].name, "self") == 0)
                    found = 0;
            }
            if (found < 0) {
                st->kind = 1;
                snprintf(st->msg, sizeof st->msg, "got an unexpected keyword argument '%s'",
                         PyUnicode_AsUTF8(key));
                goto fail;
            }
            if (raw[found] != NULL) {
                st->kind = 1;
                snprintf(st->msg, sizeof st->msg, "got multiple values for argument '%s'",
                         display_name(op->params[found].name));
                goto fail;
            }
            raw[found] = args[nargs + k];
        }
    }
    for (int i = 0; i < np; i++) {
        const em_Param *p = &op->params[i];
        PyObject *v = raw[i];
        if (v == NULL) {
            if (p->defval == NULL) {
                st->kind = 1;
                snprintf(st->msg, sizeof st->msg, "missing required argument '%s'",
                         display_name(p->name));
                goto fail;
            }
            Py_INCREF(p->defval);
            out[i] = p->defval;
            continue;
        }
        int r = convert_arg(p, v, &out[i], st->strict);
        if (r < 0) {
            st->kind = -1;
            goto fail;
        }
        if (r == 0) {
            out[i] = NULL;
            st->kind = 2;
            st->param = i;
            st->value = v;
            goto fail;
        }
    }
    Py_XDECREF(packed);
    return 0;
fail:
    clear_bound(out, np);
    Py_XDECREF(packed);
    return -1;
}

static PyObject *
describe_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *parts = PyList_New(0);
    if (parts == NULL)
        return NULL;
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nargs + nk; i++) {
        PyObject *s;
        const char *tn = em_Tensor_Check(args[i]) ? "Tensor" : Py_TYPE(args[i])->tp_name;
        if (i < nargs)
            s = PyUnicode_FromString(tn);
        else
            s = PyUnicode_FromFormat("%U=%s", PyTuple_GET_ITEM(kwnames, i - nargs), tn);
        if (s == NULL || PyList_Append(parts, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(parts);
            return NULL;
        }
        Py_DECREF(s);
    }
    PyObject *sep = PyUnicode_FromString(", ");
    PyObject *r = sep ? PyUnicode_Join(sep, parts) : NULL;
    Py_XDECREF(sep);
    Py_DECREF(parts);
    return r;
}

static void
raise_bind_error(em_Op *op, bind_status *st, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames)
{
    const char *name = PyUnicode_AsUTF8(op->name);
    if (op->next != NULL) {
        PyObject *got = describe_args(args, nargs, kwnames);
        if (got == NULL)
            return;
        PyObject *expected = PyUnicode_FromString("");
        for (em_Op *o = op; o != NULL && expected != NULL; o = o->next) {
            PyObject *line = PyUnicode_FromFormat("%U\n * %U", expected, o->schema);
            Py_SETREF(expected, line);
        }
        if (expected != NULL)
            PyErr_Format(PyExc_TypeError,
                         "%s() received an invalid combination of arguments - got (%U), but "
                         "expected one of:%U",
                         name, got, expected);
        Py_XDECREF(expected);
        Py_DECREF(got);
        return;
    }
    if (st->kind == 1) {
        PyErr_Format(PyExc_TypeError, "%s() %s", name, st->msg);
        return;
    }
    const em_Param *p = &op->params[st->param];
    const char *tn = em_Tensor_Check(st->value) ? "Tensor" : Py_TYPE(st->value)->tp_name;
    if (p->kwonly)
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be %s, not %s", name,
                     display_name(p->name), type_name(p->type), tn);
    else
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' (position %d) must be %s, not %s",
                     name, display_name(p->name), st->param + 1, type_name(p->type), tn);
}

/* Binds a call to the first overload that accepts it (new references in bound).
 * With several overloads a 0-d integer tensor first binds only to Tensor
 * parameters, as in PyTorch: max(x, t) is max.other, max(x, 1) is max.dim.
 * Returns NULL with an exception set when no overload accepts the call. */
static em_Op *
bind_overload(em_Op *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
              PyObject **bound)
{
    bind_status st = {0}, first = {0};
    for (int pass = op->next != NULL ? 0 : 1; pass < 2; pass++) {
        st.strict = pass == 0;
        for (em_Op *o = op; o != NULL; o = o->next) {
            if (bind(o, args, nargs, kwnames, bound, &st) == 0)
                return o;
            if (st.kind < 0)
                return NULL;
            if (o == op)
                first = st;
        }
    }
    raise_bind_error(op, &first, args, nargs, kwnames);
    return NULL;
}

/* ------------------------------------------------------------------ dispatch */

PyObject *
em_call_tracer(em_Op *op, PyObject **args)
{
    PyObject *tup = PyTuple_New(op->nparams);
    if (tup == NULL)
        return NULL;
    for (int i = 0; i < op->nparams; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(tup, i, args[i]);
    }
    PyObject *tracer = em_tls.tracer;
    Py_INCREF(tracer);
    PyObject *res = PyObject_CallFunctionObjArgs(tracer, (PyObject *)op, tup, NULL);
    Py_DECREF(tracer);
    Py_DECREF(tup);
    return res;
}

/* Whether msg starts with "name(" (or "name_(", the in-place twin's name). */
static bool
message_names(PyObject *msg, PyObject *name)
{
    bool r = false;
    for (int k = 0; k < 2 && !r && name != NULL; k++) {
        PyObject *prefix = PyUnicode_FromFormat(k == 0 ? "%U(" : "%U_(", name);
        if (prefix == NULL) {
            PyErr_Clear();
            return true;
        }
        r = PyUnicode_Tailmatch(msg, prefix, 0, PY_SSIZE_T_MAX, -1) == 1;
        Py_DECREF(prefix);
    }
    return r;
}

/* A kernel failed: makes the message name the op ("view(): ..."), as invariant 2
 * asks. Only plain messages of the built-in exception types change; the type,
 * traceback and cause stay. Indexing (__getitem__) keeps Python's wording. */
static void
name_error(em_Op *op)
{
    static PyObject *dunder;
    PyObject *type, *value, *tb, *args = NULL;
    PyErr_Fetch(&type, &value, &tb);
    if (dunder == NULL && (dunder = PyUnicode_InternFromString("__")) == NULL)
        goto restore;
    PyErr_NormalizeException(&type, &value, &tb);
    if (value == NULL || PyUnicode_Tailmatch(op->name, dunder, 0, 2, -1) == 1 ||
        (type != PyExc_RuntimeError && type != PyExc_IndexError &&
         type != PyExc_ValueError && type != PyExc_TypeError &&
         type != PyExc_NotImplementedError))
        goto restore;
    args = PyObject_GetAttrString(value, "args");
    if (args == NULL || !PyTuple_Check(args) || PyTuple_GET_SIZE(args) != 1 ||
        !PyUnicode_Check(PyTuple_GET_ITEM(args, 0)))
        goto restore;
    PyObject *msg = PyTuple_GET_ITEM(args, 0);
    if (message_names(msg, op->name) ||
        (op->functional != NULL && message_names(msg, op->functional->name)))
        goto restore;
    PyObject *named = PyUnicode_FromFormat("%U(): %U", op->name, msg);
    PyObject *new_args = named ? PyTuple_Pack(1, named) : NULL;
    if (new_args == NULL || PyObject_SetAttrString(value, "args", new_args) < 0)
        PyErr_Clear();
    Py_XDECREF(named);
    Py_XDECREF(new_args);
restore:
    PyErr_Clear();
    Py_XDECREF(args);
    PyErr_Restore(type, value, tb);
}

static PyObject *call_bound(em_Op *op, PyObject **args);

/* Autocast: whether t is a tensor autocast may cast (floating, float64 aside). */
static bool
autocast_eligible(PyObject *t)
{
    if (!em_Tensor_Check(t))
        return false;
    em_dtype_t d = ((em_Tensor *)t)->dtype;
    return em_is_float(d) && d != EM_FLOAT64;
}

/* t cast to dtype when eligible and not already of it: a new reference. */
static PyObject *
autocast_one(PyObject *t, em_dtype_t dtype)
{
    if (!autocast_eligible(t) || ((em_Tensor *)t)->dtype == dtype)
        return Py_NewRef(t);
    PyObject *args[2] = {t, (PyObject *)em_dtypes[dtype]};
    return em_call_op(EM_OP__TO_COPY, args, 1, em_kw_dtype);
}

/* The promoting ops' result type, argument by argument, as PyTorch's autocast
 * prioritize(): float32 wins, the autocast dtype stays, another half type is an error. */
static int
autocast_prioritize(em_dtype_t *current, PyObject *t)
{
    if (!autocast_eligible(t))
        return 0;
    em_dtype_t next = ((em_Tensor *)t)->dtype;
    if (*current == EM_FLOAT32 || next == EM_FLOAT32)
        *current = EM_FLOAT32;
    else if (*current != next) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Unexpected floating ScalarType in at::autocast::prioritize");
        return -1;
    }
    return 0;
}

/* The op under autocast (em_tls.autocast set, op->autocast a policy): its tensor and
 * tensor-list arguments cast as PyTorch's CPU autocast casts them, then the op. */
static PyObject *
autocast_call(em_Op *op, PyObject **args)
{
    PyObject *cast[EM_MAX_PARAMS] = {NULL};
    PyObject *seqs[EM_MAX_PARAMS] = {NULL};    /* tensor-list arguments, made fast */
    PyObject *result = NULL;
    em_dtype_t target = (em_dtype_t)em_tls.autocast;
    int n = op->nparams;
    if (n > EM_MAX_PARAMS) {
        PyErr_SetString(PyExc_SystemError, "autocast: too many parameters");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        PyObject *a = args[i];
        if (a != NULL && op->params[i].type == EM_ARG_TENSORLIST && PySequence_Check(a) &&
            !em_Tensor_Check(a) && (seqs[i] = PySequence_Fast(a, "a tensor list")) == NULL)
            goto error;
    }
    if (op->autocast == EM_AUTOCAST_FP32)
        target = EM_FLOAT32;
    else if (op->autocast == EM_AUTOCAST_PROMOTE) {
        /* float32 if any eligible argument is, the autocast dtype if all are */
        for (int i = 0; i < n; i++) {
            if (seqs[i] == NULL) {
                if (args[i] != NULL && autocast_prioritize(&target, args[i]) < 0)
                    goto error;
                continue;
            }
            for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(seqs[i]); j++)
                if (autocast_prioritize(&target, PySequence_Fast_GET_ITEM(seqs[i], j)) < 0)
                    goto error;
        }
    }
    for (int i = 0; i < n; i++) {
        PyObject *a = args[i];
        if (a == NULL)
            continue;
        if (seqs[i] != NULL) {
            Py_ssize_t m = PySequence_Fast_GET_SIZE(seqs[i]);
            if ((cast[i] = PyTuple_New(m)) == NULL)
                goto error;
            for (Py_ssize_t j = 0; j < m; j++) {
                PyObject *t = autocast_one(PySequence_Fast_GET_ITEM(seqs[i], j), target);
                if (t == NULL)
                    goto error;
                PyTuple_SET_ITEM(cast[i], j, t);
            }
        }
        else if (op->params[i].type == EM_ARG_TENSOR) {
            if ((cast[i] = autocast_one(a, target)) == NULL)
                goto error;
        }
        else
            cast[i] = Py_NewRef(a);
    }
    result = call_bound(op, cast);
error:
    for (int i = 0; i < n; i++) {
        Py_XDECREF(cast[i]);
        Py_XDECREF(seqs[i]);
    }
    return result;
}

PyObject *
em_op_call_bound(em_Op *op, PyObject **args)
{
    if (em_tls.autocast >= 0 && op->autocast != EM_AUTOCAST_NONE &&
        em_tls.mode != EM_MODE_META)
        return autocast_call(op, args);
    return call_bound(op, args);
}

static PyObject *
call_bound(em_Op *op, PyObject **args)
{
    PyObject *result;
    bool tracing = em_tls.mode == EM_MODE_TRACE && em_tls.tracer != NULL;
    if (op->composite || (op->inplace && op->functional != NULL)) {
        /* a composite's C kernel reads sizes as C ints: while tracing, the tracer runs
         * it (symbolic sizes take its Python rule: fx/sym_meta.py) */
        result = op->composite ? (tracing ? em_call_tracer(op, args) : op->kernel(op, args))
                               : em_inplace_call(op, args);
        if (result == NULL && !tracing)
            name_error(op);
        return result;
    }
    if (tracing)
        result = em_call_tracer(op, args);
    else
        result = op->kernel(op, args);
    if (result == NULL) {
        if (!tracing)
            name_error(op);
        return NULL;
    }
    if (op->alias_param >= 0 && em_view_record(op, args, result) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    if (op->backward != NULL && em_tls.grad_enabled) {
        if (em_autograd_record(op, args, result) < 0) {
            Py_DECREF(result);
            return NULL;
        }
    }
    return result;
}

static PyObject *
op_vectorcall(em_Op *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *bound[EM_MAX_PARAMS];
    em_Op *o = bind_overload(op, args, nargs, kwnames, bound);
    if (o == NULL)
        return NULL;
    PyObject *res = em_op_call_bound(o, bound);
    clear_bound(bound, o->nparams);
    return res;
}

PyObject *
em_op_call(em_Op *op, PyObject *const *args, Py_ssize_t nargs)
{
    return op_vectorcall(op, args, (size_t)nargs, NULL);
}

em_Op *
em_op(int id)
{
    em_Op *op = em_op_lookup(id);
    if (op == NULL)
        PyErr_Format(PyExc_RuntimeError, "op %s is not bound (ember.ops.install() binds the "
                     "op table by csrc/dispatch/op_ids.h)",
                     (id >= 0 && id < EM_NOPS) ? qualnames[id] : "of an unknown id");
    return op;
}

PyObject *
em_call_op(int id, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    em_Op *op = em_op(id);
    return op == NULL ? NULL : op_vectorcall(op, args, (size_t)nargs, kwnames);
}

/* ------------------------------------------------------------------ the type */

static void
op_dealloc(em_Op *self)
{
    Py_XDECREF(self->name);
    Py_XDECREF(self->overload);
    Py_XDECREF(self->schema);
    Py_XDECREF(self->entry);
    Py_XDECREF(self->backward);
    Py_XDECREF(self->decompose);
    Py_XDECREF(self->impl);
    Py_XDECREF(self->ufunc);
    Py_XDECREF(self->reduce_ufunc);
    Py_XDECREF(self->backward_name);
    Py_XDECREF(self->next);
    Py_XDECREF(self->functional);
    for (int i = 0; i < self->nparams; i++) {
        Py_XDECREF(self->params[i].name);
        Py_XDECREF(self->params[i].defval);
    }
    PyObject_Free(self);
}

/* The parameter a non-in-place op's single result may share memory with, from the
 * entry's alias annotations (Tensor(a) self -> Tensor(a)); -1 when there is none. */
static int
set_alias_param(em_Op *op, PyObject *entry)
{
    op->alias_param = -1;
    if (op->inplace)
        return 0;
    PyObject *ap = PyObject_GetAttrString(entry, "aliased_params");
    if (ap == NULL)
        return -1;
    if (PyTuple_Check(ap) && PyTuple_GET_SIZE(ap) == 1 &&
        PyLong_Check(PyTuple_GET_ITEM(ap, 0))) {
        long i = PyLong_AsLong(PyTuple_GET_ITEM(ap, 0));
        if (i >= 0 && i < EM_MAX_PARAMS)
            op->alias_param = (int)i;
    }
    Py_DECREF(ap);
    return PyErr_Occurred() ? -1 : 0;
}

/* The entry's facts C reads per call or per backward, read once: its decompose and impl
 * functions, and which of (result, *args) its backward formula reads. */
static int
set_entry_facts(em_Op *op, PyObject *entry)
{
    op->backward_reads = UINT32_MAX;
    PyObject *dec = PyObject_GetAttrString(entry, "decompose");
    PyObject *impl = dec ? PyObject_GetAttrString(entry, "impl") : NULL;
    if (impl == NULL) {
        Py_XDECREF(dec);
        return -1;
    }
    if (dec != Py_None)
        op->decompose = dec;
    else
        Py_DECREF(dec);
    if (impl != Py_None)
        op->impl = impl;
    else
        Py_DECREF(impl);
    if (op->backward == NULL)
        return 0;
    PyObject *uses = PyObject_GetAttrString(entry, "backward_uses");
    if (uses == NULL)
        return -1;
    if (PyTuple_Check(uses) && PyTuple_GET_SIZE(uses) == op->nparams + 1) {
        op->backward_reads = 0;
        for (int i = 0; i <= op->nparams; i++) {
            int r = PyObject_IsTrue(PyTuple_GET_ITEM(uses, i));
            if (r < 0) {
                Py_DECREF(uses);
                return -1;
            }
            op->backward_reads |= (uint32_t)r << i;
        }
    }
    Py_DECREF(uses);
    return 0;
}

/* Op(name, overload, schema, params, kind, rule, kernel, backward, ufunc, reduce_ufunc,
 *    nouts, inplace, composite, entry, backward_name)
 * params: sequence of (name, type, optional, kwonly, has_default, default,
 *                      varargs_list, int1, number_ok). */
static PyObject *
op_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *name, *overload, *schema, *params, *backward, *ufunc, *reduce_ufunc, *entry,
        *bname;
    int kind, rule, nouts, inplace, composite;
    const char *kernel;
    if (!PyArg_ParseTuple(args, "UUUOiisOOOiipOU:Op", &name, &overload, &schema, &params, &kind,
                          &rule, &kernel, &backward, &ufunc, &reduce_ufunc, &nouts, &inplace,
                          &composite, &entry, &bname))
        return NULL;
    if (kind < 0 || kind >= EM_NKINDS) {
        PyErr_Format(PyExc_ValueError, "unknown op kind %d", kind);
        return NULL;
    }
    em_kernel_fn fn = em_find_kernel(kernel);
    if (fn == NULL) {
        PyErr_Format(PyExc_ValueError, "op %U: no C kernel named '%s'", name, kernel);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(params, "params must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t np = PySequence_Fast_GET_SIZE(seq);
    if (np > EM_MAX_PARAMS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "op %U has more than %d parameters", name, EM_MAX_PARAMS);
        return NULL;
    }
    em_Op *op = PyObject_New(em_Op, type);
    if (op == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    memset(((char *)op) + sizeof(PyObject), 0, sizeof(em_Op) - sizeof(PyObject));
    op->vectorcall = (vectorcallfunc)op_vectorcall;
    Py_INCREF(name);
    PyUnicode_InternInPlace(&name);
    op->name = name;
    Py_INCREF(overload);
    op->overload = overload;
    Py_INCREF(schema);
    op->schema = schema;
    op->kind = (em_kind_t)kind;
    op->kernel = fn;
    op->nouts = nouts;
    op->inplace = inplace;
    op->composite = composite;
    op->rule = rule;
    op->id = -1;
    op->npositional = 0;
    if (backward != Py_None) {
        Py_INCREF(backward);
        op->backward = backward;
    }
    op->ufunc_has_identity = 0;
    if (ufunc != Py_None) {
        Py_INCREF(ufunc);
        op->ufunc = ufunc;
        PyObject *ident = PyObject_GetAttrString(ufunc, "identity");
        if (ident == NULL) {
            Py_DECREF(seq);
            Py_DECREF(op);
            return NULL;
        }
        op->ufunc_has_identity = ident != Py_None;
        Py_DECREF(ident);
    }
    if (reduce_ufunc != Py_None) {
        Py_INCREF(reduce_ufunc);
        op->reduce_ufunc = reduce_ufunc;
    }
    Py_INCREF(entry);
    op->entry = entry;
    if (set_alias_param(op, entry) < 0) {
        Py_DECREF(seq);
        Py_DECREF(op);
        return NULL;
    }
    Py_INCREF(bname);
    op->backward_name = bname;
    for (Py_ssize_t i = 0; i < np; i++) {
        PyObject *pname, *pdef;
        int ptype, popt, pkw, phas, pvar, pint1, pnum;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "UipppOppp", &pname, &ptype,
                              &popt, &pkw, &phas, &pdef, &pvar, &pint1, &pnum))
            goto error;
        em_Param *p = &op->params[i];
        Py_INCREF(pname);
        PyUnicode_InternInPlace(&pname);
        p->name = pname;
        p->type = (em_argtype_t)ptype;
        p->optional = popt;
        p->kwonly = pkw;
        p->varargs_list = pvar;
        p->int1 = pint1;
        p->number_ok = pnum;
        if (phas) {
            Py_INCREF(pdef);
            p->defval = pdef;
        }
        op->nparams = (int)i + 1;
        if (!pkw)
            op->npositional = (int)i + 1;
    }
    Py_DECREF(seq);
    if (set_entry_facts(op, entry) < 0) {
        Py_DECREF(op);
        return NULL;
    }
    return (PyObject *)op;
error:
    Py_DECREF(seq);
    Py_DECREF(op);
    return NULL;
}

static PyObject *
op_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static PyObject *
op_repr(em_Op *self)
{
    return PyUnicode_FromFormat("<ember op %U>", self->schema);
}

static PyObject *
op_add_overload(em_Op *self, PyObject *other)
{
    if (!em_Op_Check(other)) {
        PyErr_SetString(PyExc_TypeError, "expected an Op");
        return NULL;
    }
    em_Op *o = self;
    while (o->next != NULL)
        o = o->next;
    Py_INCREF(other);
    o->next = (em_Op *)other;
    Py_RETURN_NONE;
}

static PyObject *
op_set_functional(em_Op *self, PyObject *other)
{
    if (!em_Op_Check(other)) {
        PyErr_SetString(PyExc_TypeError, "expected an Op");
        return NULL;
    }
    Py_INCREF(other);
    Py_XSETREF(self->functional, (em_Op *)other);
    Py_RETURN_NONE;
}

static PyObject *
op_overloads(em_Op *self, void *c)
{
    PyObject *list = PyList_New(0);
    for (em_Op *o = self; o != NULL && list != NULL; o = o->next) {
        if (PyList_Append(list, (PyObject *)o) < 0)
            Py_CLEAR(list);
    }
    return list;
}

/* Bind without running: returns the overload that matches and the bound args. */
static PyObject *
op_bind(em_Op *self, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    Py_ssize_t nk = kwargs ? PyDict_GET_SIZE(kwargs) : 0;
    PyObject **flat = PyMem_Malloc(sizeof(PyObject *) * (nargs + nk + 1));
    PyObject *kwnames = NULL, *res = NULL;
    if (flat == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < nargs; i++)
        flat[i] = PyTuple_GET_ITEM(args, i);
    if (nk > 0) {
        kwnames = PyTuple_New(nk);
        if (kwnames == NULL)
            goto done;
        Py_ssize_t pos = 0, k = 0;
        PyObject *key, *val;
        while (PyDict_Next(kwargs, &pos, &key, &val)) {
            Py_INCREF(key);
            PyTuple_SET_ITEM(kwnames, k, key);
            flat[nargs + k] = val;
            k++;
        }
    }
    PyObject *bound[EM_MAX_PARAMS];
    em_Op *o = bind_overload(self, flat, nargs, kwnames, bound);
    if (o == NULL)
        goto done;
    PyObject *tup = PyTuple_New(o->nparams);
    if (tup == NULL) {
        clear_bound(bound, o->nparams);
        goto done;
    }
    for (int i = 0; i < o->nparams; i++)
        PyTuple_SET_ITEM(tup, i, bound[i]);
    res = Py_BuildValue("(ON)", (PyObject *)o, tup);
done:
    Py_XDECREF(kwnames);
    PyMem_Free(flat);
    return res;
}

/* The bound arguments a Python call of method `what` passes: a tuple of nparams. */
static int
bound_from(em_Op *self, const char *what, PyObject *args, PyObject **bound)
{
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != self->nparams) {
        PyErr_Format(PyExc_TypeError, "%U.%s expects a tuple of %d bound arguments",
                     self->name, what, self->nparams);
        return -1;
    }
    for (int i = 0; i < self->nparams; i++)
        bound[i] = PyTuple_GET_ITEM(args, i);
    return 0;
}

/* Runs this overload's kernel on bound args, bypassing mode and autograd. */
static PyObject *
op_run_kernel(em_Op *self, PyObject *args)
{
    PyObject *bound[EM_MAX_PARAMS];
    return bound_from(self, "_kernel", args, bound) < 0 ? NULL : self->kernel(self, bound);
}

/* Runs bound args through the dispatcher (mode, then autograd). */
static PyObject *
op_call_bound_py(em_Op *self, PyObject *args)
{
    PyObject *bound[EM_MAX_PARAMS];
    return bound_from(self, "_call_bound", args, bound) < 0 ? NULL
                                                            : em_op_call_bound(self, bound);
}

/* The C rule: this op's kernel run on meta copies of the tensor arguments;
 * returns what it returns (meta tensors). */
static PyObject *
op_infer(em_Op *self, PyObject *args)
{
    PyObject *bound[EM_MAX_PARAMS];
    int nb = 0;
    PyObject *res = NULL;
    if (bound_from(self, "_infer", args, bound) < 0)
        return NULL;
    for (int i = 0; i < self->nparams; i++) {
        PyObject *a = bound[i];
        if (em_Tensor_Check(a))
            a = (PyObject *)em_tensor_meta_like((em_Tensor *)a);
        else if (PyTuple_Check(a) && PyTuple_GET_SIZE(a) > 0 &&
                 em_Tensor_Check(PyTuple_GET_ITEM(a, 0))) {
            Py_ssize_t n = PyTuple_GET_SIZE(a);
            PyObject *t = PyTuple_New(n);
            for (Py_ssize_t k = 0; t != NULL && k < n; k++) {
                PyObject *e = PyTuple_GET_ITEM(a, k);
                e = em_Tensor_Check(e) ? (PyObject *)em_tensor_meta_like((em_Tensor *)e)
                                       : (Py_INCREF(e), e);
                if (e == NULL)
                    Py_CLEAR(t);
                else
                    PyTuple_SET_ITEM(t, k, e);
            }
            a = t;
        }
        else
            Py_INCREF(a);
        if (a == NULL)
            goto done;
        bound[nb++] = a;
    }
    int saved = em_tls.mode;
    em_tls.mode = EM_MODE_META;
    int grad = em_tls.grad_enabled;
    em_tls.grad_enabled = 0;
    res = self->composite ? self->kernel(self, bound) : em_op_call_bound(self, bound);
    em_tls.mode = saved;
    em_tls.grad_enabled = grad;
done:
    for (int i = 0; i < nb; i++)
        Py_DECREF(bound[i]);
    return res;
}

static PyMethodDef op_methods[] = {
    {"_add_overload", (PyCFunction)op_add_overload, METH_O, NULL},
    {"_set_functional", (PyCFunction)op_set_functional, METH_O,
     "_set_functional(op): the out-of-place op this in-place op updates self with."},
    {"_bind", (PyCFunction)(void (*)(void))op_bind, METH_VARARGS | METH_KEYWORDS,
     "_bind(*args, **kwargs) -> (overload, bound args): match a call to a signature."},
    {"_kernel", (PyCFunction)op_run_kernel, METH_O,
     "_kernel(bound): run the eager kernel only (no mode, no autograd)."},
    {"_call_bound", (PyCFunction)op_call_bound_py, METH_O,
     "_call_bound(bound): dispatch bound args (mode, kernel, autograd)."},
    {"_infer", (PyCFunction)op_infer, METH_O,
     "_infer(bound): the C rule: the kernel run on meta copies of the arguments."},
    {NULL},
};

static PyObject *op_get_overloads(em_Op *self, void *c) { return op_overloads(self, c); }

static PyObject *
op_get_params(em_Op *self, void *c)
{
    PyObject *t = PyTuple_New(self->nparams);
    if (t == NULL)
        return NULL;
    for (int i = 0; i < self->nparams; i++) {
        Py_INCREF(self->params[i].name);
        PyTuple_SET_ITEM(t, i, self->params[i].name);
    }
    return t;
}

static PyObject *
op_get_module(em_Op *self, void *c)
{
    return PyUnicode_FromString("ember");
}

static PyGetSetDef op_getset[] = {
    {"overloads", (getter)op_get_overloads, NULL, NULL, NULL},
    {"param_names", (getter)op_get_params, NULL, NULL, NULL},
    {"__module__", (getter)op_get_module, NULL, NULL, NULL},
    {NULL},
};

static PyMemberDef op_members[] = {
    {"__name__", T_OBJECT, offsetof(em_Op, name), READONLY, NULL},
    {"__qualname__", T_OBJECT, offsetof(em_Op, name), READONLY, NULL},
    {"name", T_OBJECT, offsetof(em_Op, name), READONLY, NULL},
    {"overload", T_OBJECT, offsetof(em_Op, overload), READONLY, NULL},
    {"schema", T_OBJECT, offsetof(em_Op, schema), READONLY, NULL},
    {"entry", T_OBJECT, offsetof(em_Op, entry), READONLY, NULL},
    {"backward", T_OBJECT, offsetof(em_Op, backward), READONLY, NULL},
    {"ufunc", T_OBJECT, offsetof(em_Op, ufunc), READONLY, NULL},
    {"kind", T_INT, offsetof(em_Op, kind), READONLY, NULL},
    {"nouts", T_INT, offsetof(em_Op, nouts), READONLY, NULL},
    {"inplace", T_INT, offsetof(em_Op, inplace), READONLY, NULL},
    {"composite", T_INT, offsetof(em_Op, composite), READONLY, NULL},
    {"autocast", T_INT, offsetof(em_Op, autocast), 0,
     "How ember.autocast casts its arguments (AUTOCAST_*; 0: not at all); set by "
     "install() from entry.autocast."},
    {"id", T_INT, offsetof(em_Op, id), READONLY,
     "Its id (entry.op_id; for the ops C calls, EM_OP_* of op_ids.h) once install() bound "
     "it, else -1."},
    {"backward_reads", T_UINT, offsetof(em_Op, backward_reads), READONLY,
     "Which of (result, *args) the backward formula reads: bit 0 the result, bit i + 1 "
     "parameter i (entry.backward_uses); all bits when that can't be told."},
    {"__doc__", T_OBJECT, offsetof(em_Op, schema), READONLY, NULL},
    {NULL},
};

PyTypeObject em_Op_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember.Op",
    .tp_basicsize = sizeof(em_Op),
    .tp_dealloc = (destructor)op_dealloc,
    .tp_vectorcall_offset = offsetof(em_Op, vectorcall),
    .tp_repr = (reprfunc)op_repr,
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "An operator of the op table (one overload).",
    .tp_methods = op_methods,
    .tp_members = op_members,
    .tp_getset = op_getset,
    .tp_descr_get = op_descr_get,
    .tp_new = op_new,
};

/* ------------------------------------------------------------------ module functions */

/* _bind_ops({qualified name: op}): em_ops[id] is the op of the name op_ids.h gives id
 * (none when the table has no such entry); every op's id is its place in the table,
 * which install() orders by entry.op_id (C's ops first, as op_ids.h numbers them). */
static PyObject *
bind_ops(PyObject *self, PyObject *table)
{
    if (!PyDict_Check(table)) {
        PyErr_SetString(PyExc_TypeError, "_bind_ops expects a dict of ops");
        return NULL;
    }
    PyObject *key, *o;
    Py_ssize_t pos = 0;
    for (int i = 0; PyDict_Next(table, &pos, &key, &o); i++) {
        if (!em_Op_Check(o)) {
            PyErr_Format(PyExc_TypeError, "_bind_ops: %R is not an Op", key);
            return NULL;
        }
        ((em_Op *)o)->id = i;
    }
    for (int i = 0; i < EM_NOPS; i++) {
        o = PyDict_GetItemString(table, qualnames[i]);
        Py_XINCREF(o);
        Py_XSETREF(em_ops[i], (em_Op *)o);
    }
    Py_RETURN_NONE;
}

static PyMethodDef op_module_methods[] = {
    {"_bind_ops", bind_ops, METH_O,
     "_bind_ops({qualified name: op}): fill the C table of ops by id (op_ids.h)."},
    {NULL},
};

int
em_op_init(PyObject *module)
{
    em_kw_dtype = Py_BuildValue("(s)", "dtype");
    em_kw_memory_format = Py_BuildValue("(s)", "memory_format");
    em_str_contiguous_format = PyUnicode_InternFromString("contiguous_format");
    if (em_kw_dtype == NULL || em_kw_memory_format == NULL ||
        em_str_contiguous_format == NULL || PyType_Ready(&em_Op_Type) < 0)
        return -1;
    Py_INCREF(&em_Op_Type);
    if (PyModule_AddObject(module, "Op", (PyObject *)&em_Op_Type) < 0)
        return -1;
    PyObject *names = PyTuple_New(EM_NOPS);
    for (int i = 0; names != NULL && i < EM_NOPS; i++) {
        PyObject *n = PyUnicode_FromString(qualnames[i]);
        if (n == NULL)
            Py_CLEAR(names);
        else
            PyTuple_SET_ITEM(names, i, n);
    }
    if (names == NULL || PyModule_AddObject(module, "OP_QUALNAMES", names) < 0) {
        Py_XDECREF(names);
        return -1;
    }
    static const char *argtypes[] = {"TENSOR", "SCALAR", "INT", "INTLIST", "BOOL", "FLOAT",
                                     "DTYPE", "STR", "TENSORLIST", "ANY", "DEVICE",
                                     "GENERATOR"};
    for (int i = 0; i < (int)(sizeof argtypes / sizeof argtypes[0]); i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "ARG_%s", argtypes[i]);
        if (PyModule_AddIntConstant(module, buf, i) < 0)
            return -1;
    }
    static const char *kinds[] = {"UNARY", "UNARY_FLOAT", "BINARY", "BINARY_FLOAT", "COMPARE",
                                  "REDUCE", "REDUCE_INDEX", "MATMUL", "VIEW", "FACTORY",
                                  "CUSTOM"};
    for (int i = 0; i < EM_NKINDS; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "KIND_%s", kinds[i]);
        if (PyModule_AddIntConstant(module, buf, i) < 0)
            return -1;
    }
    return PyModule_AddFunctions(module, op_module_methods);
}
