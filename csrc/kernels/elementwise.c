/* elementwise.c: eager kernels of the elementwise kinds, computed by NumPy ufuncs.
 *
 * Every kernel applies PyTorch's result dtype and shape (rules.c) first, then
 * allocates the output with PyTorch's layout, then lets the ufunc compute into
 * it with an explicit loop signature. Meta inputs (or meta mode) stop after
 * the allocation.
 */
#include "ember.h"

static PyObject *extobj_var;       /* numpy's errstate context variable */
static PyObject *extobj_ignore;    /* errstate(all="ignore"): PyTorch never warns */
static PyObject *ufunc_kwnames;    /* ("out", "signature", "casting") */
static PyObject *sig_cache[4][EM_NDTYPES][EM_NDTYPES];

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
    PyObject *args[8], *owned[8] = {NULL};
    PyObject *sig = signature(nin, compute, result);
    int st = -1;
    if (sig == NULL)
        return -1;
    for (int i = 0; i < nin; i++) {
        PyObject *o = ins[i];
        if (em_Tensor_Check(o)) {
            args[i] = (PyObject *)((em_Tensor *)o)->array;
        }
        else if (em_is_int(compute) && PyLong_Check(o) && !PyBool_Check(o)) {
            if ((owned[i] = wrapped_int(o, compute)) == NULL)
                goto done;
            args[i] = owned[i];
        }
        else {
            args[i] = o;
        }
    }
    args[nin] = (PyObject *)out;
    args[nin + 1] = sig;
    args[nin + 2] = em_str_unsafe;
    PyObject *token = PyContextVar_Set(extobj_var, extobj_ignore);
    if (token == NULL)
        goto done;
    PyObject *r = PyObject_Vectorcall(ufunc, args, nin, ufunc_kwnames);
    if (PyContextVar_Reset(extobj_var, token) < 0) {
        Py_XDECREF(r);
        r = NULL;
    }
    Py_DECREF(token);
    if (r != NULL) {
        Py_DECREF(r);
        st = 0;
    }
done:
    for (int i = 0; i < nin; i++)
        Py_XDECREF(owned[i]);
    return st;
}

/* Collects the tensor-typed parameters (the operands) of an elementwise op. */
static int
operands_of(em_Op *op, PyObject **args, PyObject **operands)
{
    int n = 0;
    for (int i = 0; i < op->nparams && n < 3; i++)
        if (op->params[i].type == EM_ARG_TENSOR)
            operands[n++] = args[i];
    return n;
}

static bool
want_meta(PyObject **operands, int n)
{
    return em_tls.mode == EM_MODE_META || em_any_meta(operands, n);
}

/* Allocates the result; *done is set when nothing is left to compute (also on
 * error, when the result is NULL). */
static em_Tensor *
elementwise_out(em_Op *op, PyObject **operands, int n, em_dtype_t *compute, bool *done)
{
    em_Geom g;
    *done = true;
    if (em_elementwise_geom(op, operands, n, &g, compute) < 0)
        return NULL;
    bool meta = want_meta(operands, n);
    em_Tensor *out = em_tensor_empty_like_layout(&g, meta);
    *done = out == NULL || meta || out->numel == 0;
    return out;
}

static PyObject *
finish(em_Tensor *out, int status)
{
    if (status < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return (PyObject *)out;
}

/* The generic kernel: op->ufunc over the operands. */
static PyObject *
k_ufunc(em_Op *op, PyObject **args)
{
    PyObject *operands[3];
    int n = operands_of(op, args, operands);
    em_dtype_t compute;
    bool done;
    em_Tensor *out = elementwise_out(op, operands, n, &compute, &done);
    if (done)
        return (PyObject *)out;
    return finish(out, em_ufunc_call(op->ufunc, operands, n, out->array, compute, out->dtype));
}

/* add/sub(self, other, *, alpha): self (op) other * alpha. */
static PyObject *
k_binary_alpha(em_Op *op, PyObject **args)
{
    PyObject *operands[2] = {args[0], args[1]};
    PyObject *alpha = args[2];
    em_dtype_t compute;
    bool done;
    em_Tensor *out = elementwise_out(op, operands, 2, &compute, &done);
    if (out == NULL)
        return NULL;
    bool unit = PyLong_CheckExact(alpha) && PyLong_AsLong(alpha) == 1;
    if (!unit && !em_is_float(compute) && PyFloat_Check(alpha)) {
        Py_DECREF(out);
        PyErr_Format(PyExc_RuntimeError,
                     "%U(): For integral input tensors, argument alpha must not be a floating "
                     "point number.", op->name);
        return NULL;
    }
    if (done)
        return (PyObject *)out;
    if (unit)
        return finish(out, em_ufunc_call(op->ufunc, operands, 2, out->array, compute, compute));
    /* out = other * alpha, then out = self (op) out */
    PyObject *mul = PyObject_GetAttrString(em_numpy, "multiply");
    if (mul == NULL)
        return finish(out, -1);
    PyObject *scaled[2] = {args[1], alpha};
    int st = em_ufunc_call(mul, scaled, 2, out->array, compute, compute);
    Py_DECREF(mul);
    if (st == 0) {
        PyObject *second[2] = {args[0], (PyObject *)out};
        st = em_ufunc_call(op->ufunc, second, 2, out->array, compute, compute);
    }
    return finish(out, st);
}

static int
any_negative_int(PyObject *o)
{
    if (!em_Tensor_Check(o)) {
        if (PyLong_Check(o)) {
            int overflow;
            long v = PyLong_AsLongAndOverflow(o, &overflow);
            return v < 0 || overflow < 0;
        }
        return 0;
    }
    em_Tensor *t = (em_Tensor *)o;
    if (!em_is_int(t->dtype) || t->numel == 0)
        return 0;
    PyObject *mn = PyArray_Min(t->array, NPY_RAVEL_AXIS, NULL);
    if (mn == NULL)
        return -1;
    PyObject *zero = PyLong_FromLong(0);
    int r = PyObject_RichCompareBool(mn, zero, Py_LT);
    Py_DECREF(zero);
    Py_DECREF(mn);
    return r;
}

/* Integer power with negative exponents in a tensor, as PyTorch computes it:
 * 1 ** e = 1, (-1) ** e = +-1, anything else ** e = 0 (NumPy refuses these). */
static int
int_pow_negative(em_Op *op, PyObject **args, em_Tensor *out, em_dtype_t compute)
{
    PyObject *exp = (PyObject *)((em_Tensor *)args[1])->array;
    PyObject *base = em_Tensor_Check(args[0]) ? (PyObject *)((em_Tensor *)args[0])->array
                                             : args[0];
    PyObject *absexp = NULL, *neg = NULL, *absbase = NULL, *not_one = NULL, *mask = NULL,
             *r = NULL;
    int st = -1;
    absexp = PyObject_CallMethod(em_numpy, "absolute", "(O)", exp);
    if (absexp == NULL)
        goto error;
    PyObject *ins[2] = {args[0], absexp};
    if (em_ufunc_call(op->ufunc, ins, 2, out->array, compute, compute) < 0)
        goto error;
    neg = PyObject_CallMethod(em_numpy, "less", "(Oi)", exp, 0);
    absbase = neg ? PyObject_CallMethod(em_numpy, "absolute", "(O)", base) : NULL;
    not_one = absbase ? PyObject_CallMethod(em_numpy, "not_equal", "(Oi)", absbase, 1) : NULL;
    mask = not_one ? PyObject_CallMethod(em_numpy, "logical_and", "(OO)", neg, not_one) : NULL;
    if (mask == NULL)
        goto error;
    PyObject *copyto = PyObject_GetAttrString(em_numpy, "copyto");
    PyObject *kw = copyto ? Py_BuildValue("{sO}", "where", mask) : NULL;
    PyObject *a = kw ? Py_BuildValue("(Oi)", (PyObject *)out->array, 0) : NULL;
    r = a ? PyObject_Call(copyto, a, kw) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(kw);
    Py_XDECREF(copyto);
    st = r != NULL ? 0 : -1;
error:
    Py_XDECREF(r);
    Py_XDECREF(mask);
    Py_XDECREF(not_one);
    Py_XDECREF(absbase);
    Py_XDECREF(neg);
    Py_XDECREF(absexp);
    return st;
}

/* pow(self, exponent): NumPy's power; integers to a negative Python int are an error
 * (as in PyTorch), to negative exponents in a tensor as int_pow_negative says. */
static PyObject *
k_pow(em_Op *op, PyObject **args)
{
    PyObject *operands[2] = {args[0], args[1]};
    em_dtype_t compute;
    bool done;
    em_Tensor *out = elementwise_out(op, operands, 2, &compute, &done);
    if (out == NULL)
        return NULL;
    if (!em_is_float(compute) && !em_Tensor_Check(args[1])) {
        int neg = any_negative_int(args[1]);
        if (neg != 0) {
            Py_DECREF(out);
            if (neg > 0)
                PyErr_SetString(PyExc_RuntimeError,
                                "pow(): Integers to negative integer powers are not allowed.");
            return NULL;
        }
    }
    if (done)
        return (PyObject *)out;
    if (!em_is_float(compute)) {
        int neg = any_negative_int(args[1]);
        if (neg < 0)
            return finish(out, -1);
        if (neg > 0)
            return finish(out, int_pow_negative(op, args, out, compute));
    }
    return finish(out, em_ufunc_call(op->ufunc, operands, 2, out->array, compute, compute));
}

static PyObject *
numpy_ufunc(const char *name)
{
    return PyObject_GetAttrString(em_numpy, name);
}

static int
any_zero(PyObject *b)
{
    if (!em_Tensor_Check(b))
        return !PyObject_IsTrue(b);
    PyObject *eq = PyObject_CallMethod(em_numpy, "equal", "(Oi)", ((em_Tensor *)b)->array, 0);
    if (eq == NULL)
        return -1;
    PyObject *anyz = PyObject_CallMethod(eq, "any", NULL);
    Py_DECREF(eq);
    if (anyz == NULL)
        return -1;
    int r = PyObject_IsTrue(anyz);
    Py_DECREF(anyz);
    return r;
}

/* div(self, other, *, rounding_mode=None): true division, or "trunc"/"floor"
 * rounding, which keep integer dtypes. */
static PyObject *
k_div(em_Op *op, PyObject **args)
{
    PyObject *operands[2] = {args[0], args[1]};
    PyObject *mode = args[2];
    if (mode == Py_None)
        return k_ufunc(op, args);
    const char *m = PyUnicode_AsUTF8(mode);
    if (m == NULL)
        return NULL;
    bool trunc = strcmp(m, "trunc") == 0, floor = strcmp(m, "floor") == 0;
    if (!trunc && !floor) {
        PyErr_Format(PyExc_RuntimeError,
                     "div expected rounding_mode to be one of None, 'trunc', or 'floor' but "
                     "found '%s'", m);
        return NULL;
    }
    em_Geom g;
    if (em_broadcast("div", operands, 2, &g) < 0)
        return NULL;
    em_dtype_t rt = em_result_type(operands, 2);
    if (rt == EM_BOOL) {
        PyErr_Format(PyExc_NotImplementedError,
                     "div(): \"div_%s_cpu\" not implemented for 'Bool'", m);
        return NULL;
    }
    g.dtype = rt;
    em_elementwise_strides(operands, 2, &g);
    bool meta = want_meta(operands, 2);
    em_Tensor *out = em_tensor_empty_like_layout(&g, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    int st;
    if (!em_is_float(rt)) {
        /* integer division by zero is an error in PyTorch */
        int zero = any_zero(args[1]);
        if (zero < 0)
            return finish(out, -1);
        if (zero) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_RuntimeError, "ZeroDivisionError");
            return NULL;
        }
        PyObject *fd = numpy_ufunc(floor ? "floor_divide" : "fmod");
        if (fd == NULL)
            return finish(out, -1);
        if (floor) {
            st = em_ufunc_call(fd, operands, 2, out->array, rt, rt);
        }
        else {
            /* trunc(a / b) = (a - fmod(a, b)) / b, exact in integers */
            st = em_ufunc_call(fd, operands, 2, out->array, rt, rt);
            PyObject *sub = numpy_ufunc("subtract"), *fdiv = numpy_ufunc("floor_divide");
            if (st == 0 && sub && fdiv) {
                PyObject *a1[2] = {args[0], (PyObject *)out};
                st = em_ufunc_call(sub, a1, 2, out->array, rt, rt);
                PyObject *a2[2] = {(PyObject *)out, args[1]};
                if (st == 0)
                    st = em_ufunc_call(fdiv, a2, 2, out->array, rt, rt);
            }
            else if (st == 0)
                st = -1;
            Py_XDECREF(sub);
            Py_XDECREF(fdiv);
        }
        Py_DECREF(fd);
        return finish(out, st);
    }
    st = em_ufunc_call(op->ufunc, operands, 2, out->array, rt, rt);
    if (st == 0) {
        PyObject *round = numpy_ufunc(floor ? "floor" : "trunc");
        PyObject *one[1] = {(PyObject *)out};
        st = round ? em_ufunc_call(round, one, 1, out->array, rt, rt) : -1;
        Py_XDECREF(round);
    }
    return finish(out, st);
}

int em_unary_cloop(const char *name, em_Tensor *in, em_Tensor *out);

/* sigmoid(x) = 1 / (1 + exp(-x)): a C loop for floats, else four ufunc passes. */
static PyObject *
k_sigmoid(em_Op *op, PyObject **args)
{
    PyObject *operands[1] = {args[0]};
    em_dtype_t compute;
    bool done;
    em_Tensor *out = elementwise_out(op, operands, 1, &compute, &done);
    if (done)
        return (PyObject *)out;
    int c = em_unary_cloop("sigmoid", (em_Tensor *)args[0], out);
    if (c != 0)
        return finish(out, c);
    static const char *steps[] = {"negative", "exp", "add", "reciprocal"};
    int st = 0;
    PyObject *one = PyLong_FromLong(1);
    for (int i = 0; i < 4 && st == 0 && one != NULL; i++) {
        PyObject *uf = numpy_ufunc(steps[i]);
        if (uf == NULL) {
            st = -1;
            break;
        }
        PyObject *in[2] = {i == 0 ? args[0] : (PyObject *)out, one};
        st = em_ufunc_call(uf, in, i == 2 ? 2 : 1, out->array, compute, compute);
        Py_DECREF(uf);
    }
    if (one == NULL)
        st = -1;
    Py_XDECREF(one);
    return finish(out, st);
}

/* relu(x) = maximum(x, 0), NaN-propagating. */
static PyObject *
k_relu(em_Op *op, PyObject **args)
{
    PyObject *operands[1] = {args[0]};
    em_dtype_t compute;
    bool done;
    em_Tensor *out = elementwise_out(op, operands, 1, &compute, &done);
    if (done)
        return (PyObject *)out;
    int c = em_unary_cloop("relu", (em_Tensor *)args[0], out);
    if (c != 0)
        return finish(out, c);
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL)
        return finish(out, -1);
    PyObject *in[2] = {args[0], zero};
    int st = em_ufunc_call(op->ufunc, in, 2, out->array, compute, compute);
    Py_DECREF(zero);
    return finish(out, st);
}

static PyObject *copyto_kwnames;   /* ("casting", "where") */

/* where(condition, self, other): other, then self copied in where condition holds. */
static PyObject *
k_where(em_Op *op, PyObject **args)
{
    PyObject *cond = args[0];
    if (!em_Tensor_Check(cond) || ((em_Tensor *)cond)->dtype != EM_BOOL) {
        PyErr_Format(PyExc_RuntimeError,
                     "where(): expected condition to be a boolean tensor, but got %s",
                     em_Tensor_Check(cond)
                         ? em_dtypes[((em_Tensor *)cond)->dtype]->name : Py_TYPE(cond)->tp_name);
        return NULL;
    }
    em_Geom g;
    if (em_broadcast("where", args, 3, &g) < 0)
        return NULL;
    g.dtype = em_result_type(args + 1, 2);
    em_elementwise_strides(args, 3, &g);
    bool meta = want_meta(args, 3);
    em_Tensor *out = em_tensor_empty_like_layout(&g, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    PyObject *copyto = PyObject_GetAttrString(em_numpy, "copyto");
    if (copyto == NULL)
        return finish(out, -1);
    int st = 0;
    for (int i = 0; i < 2 && st == 0; i++) {
        PyObject *src = args[2 - i];
        if (em_Tensor_Check(src))
            src = (PyObject *)((em_Tensor *)src)->array;
        PyObject *call[4] = {(PyObject *)out->array, src, em_str_unsafe,
                             i == 0 ? Py_True : (PyObject *)((em_Tensor *)cond)->array};
        PyObject *r = PyObject_Vectorcall(copyto, call, 2, copyto_kwnames);
        if (r == NULL)
            st = -1;
        Py_XDECREF(r);
    }
    Py_DECREF(copyto);
    return finish(out, st);
}

const em_KernelEntry em_elementwise_kernels[] = {
    {"where", k_where},
    {"ufunc", k_ufunc},
    {"binary_alpha", k_binary_alpha},
    {"pow", k_pow},
    {"div", k_div},
    {"sigmoid", k_sigmoid},
    {"relu", k_relu},
    {NULL, NULL},
};

int
em_elementwise_init(void)
{
    PyObject *umath = PyImport_ImportModule("numpy._core.umath");
    if (umath == NULL)
        return -1;
    extobj_var = PyObject_GetAttrString(umath, "_extobj_contextvar");
    PyObject *make = PyObject_GetAttrString(umath, "_make_extobj");
    Py_DECREF(umath);
    if (extobj_var == NULL || make == NULL) {
        Py_XDECREF(make);
        return -1;
    }
    PyObject *kw = Py_BuildValue("{ss}", "all", "ignore");
    PyObject *noargs = PyTuple_New(0);
    if (kw && noargs)
        extobj_ignore = PyObject_Call(make, noargs, kw);
    Py_XDECREF(kw);
    Py_XDECREF(noargs);
    Py_DECREF(make);
    if (extobj_ignore == NULL)
        return -1;
    ufunc_kwnames = Py_BuildValue("(sss)", "out", "signature", "casting");
    copyto_kwnames = Py_BuildValue("(ss)", "casting", "where");
    return (ufunc_kwnames && copyto_kwnames) ? 0 : -1;
}
