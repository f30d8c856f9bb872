/* elementwise.c: eager kernels of the elementwise kinds, computed by NumPy ufuncs.
 *
 * Every kernel applies PyTorch's result dtype and shape (rules.c) first, then
 * allocates the output with PyTorch's layout, then lets the ufunc compute into
 * it with an explicit loop signature. Meta inputs (or meta mode) stop after
 * the allocation.
 */
#include "kutil.h"
#include <float.h>
#include <math.h>

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

/* The result of dtype dt for the broadcast geometry g of operands, laid out as
 * TensorIterator lays it out; *done is set when nothing is left to compute (also on
 * error, when the result is NULL). */
static em_Tensor *
layout_out(PyObject **operands, int n, em_Geom *g, em_dtype_t dt, bool *done)
{
    g->dtype = dt;
    em_elementwise_strides(operands, n, g);
    bool meta = want_meta(operands, n);
    em_Tensor *out = em_tensor_empty_like_layout(g, meta);
    *done = out == NULL || meta || out->numel == 0;
    return out;
}

/* The result by the op kind's rule (layout_out's *done). */
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
    return em_finish(out, em_ufunc_call(op->ufunc, operands, n, out->array, compute, out->dtype));
}

/* add/sub(self, other, *, alpha): self (op) other * alpha. */
static PyObject *
k_binary_alpha(em_Op *op, PyObject **args)
{
    PyObject *alpha = args[2];
    em_dtype_t compute;
    bool done;
    em_Tensor *out = elementwise_out(op, args, 2, &compute, &done);
    if (out == NULL)
        return NULL;
    bool unit = PyLong_CheckExact(alpha) && PyLong_AsLong(alpha) == 1;
    if (!unit && !em_is_inexact(compute) && PyFloat_Check(alpha)) {
        Py_DECREF(out);
        PyErr_Format(PyExc_RuntimeError,
                     "%U(): For integral input tensors, argument alpha must not be a floating "
                     "point number.", op->name);
        return NULL;
    }
    if (done)
        return (PyObject *)out;
    if (unit)
        return em_finish(out, em_ufunc_call(op->ufunc, args, 2, out->array, compute, compute));
    /* out = other * alpha, then out = self (op) out */
    PyObject *scaled[2] = {args[1], alpha};
    int st = em_ufunc_call(em_np.multiply, scaled, 2, out->array, compute, compute);
    if (st == 0) {
        PyObject *second[2] = {args[0], (PyObject *)out};
        st = em_ufunc_call(op->ufunc, second, 2, out->array, compute, compute);
    }
    return em_finish(out, st);
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
    absexp = PyObject_CallOneArg(em_np.absolute, exp);
    if (absexp == NULL)
        goto error;
    PyObject *ins[2] = {args[0], absexp};
    if (em_ufunc_call(op->ufunc, ins, 2, out->array, compute, compute) < 0)
        goto error;
    neg = PyObject_CallFunction(em_np.less, "(Oi)", exp, 0);
    absbase = neg ? PyObject_CallOneArg(em_np.absolute, base) : NULL;
    not_one = absbase ? PyObject_CallFunction(em_np.not_equal, "(Oi)", absbase, 1) : NULL;
    mask = not_one ? PyObject_CallFunctionObjArgs(em_np.logical_and, neg, not_one, NULL) : NULL;
    if (mask == NULL)
        goto error;
    PyObject *kw = Py_BuildValue("{sO}", "where", mask);
    PyObject *a = kw ? Py_BuildValue("(Oi)", (PyObject *)out->array, 0) : NULL;
    r = a ? PyObject_Call(em_np.copyto, a, kw) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(kw);
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
    em_dtype_t compute;
    bool done;
    em_Tensor *out = elementwise_out(op, args, 2, &compute, &done);
    if (out == NULL)
        return NULL;
    if (!em_is_inexact(compute) && !em_Tensor_Check(args[1])) {
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
    if (!em_is_inexact(compute)) {
        int neg = any_negative_int(args[1]);
        if (neg < 0)
            return em_finish(out, -1);
        if (neg > 0)
            return em_finish(out, int_pow_negative(op, args, out, compute));
    }
    return em_finish(out, em_ufunc_call(op->ufunc, args, 2, out->array, compute, compute));
}

/* -1 with PyTorch's error when the integer divisor b holds a zero. */
static int
check_divisor(PyObject *b)
{
    int zero = -1;
    if (!em_Tensor_Check(b)) {
        zero = !PyObject_IsTrue(b);
    }
    else {
        PyObject *eq = PyObject_CallFunction(em_np.equal, "(Oi)", ((em_Tensor *)b)->array, 0);
        PyObject *anyz = eq ? PyObject_CallMethod(eq, "any", NULL) : NULL;
        zero = anyz ? PyObject_IsTrue(anyz) : -1;
        Py_XDECREF(eq);
        Py_XDECREF(anyz);
    }
    if (zero > 0)
        PyErr_SetString(PyExc_RuntimeError, "ZeroDivisionError");
    return zero != 0 ? -1 : 0;
}

/* div(self, other, *, rounding_mode=None): true division, or "trunc"/"floor"
 * rounding, which keep integer dtypes. */
static PyObject *
k_div(em_Op *op, PyObject **args)
{
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
    if (em_broadcast("div", args, 2, &g) < 0)
        return NULL;
    em_dtype_t rt = em_result_type(args, 2);
    if (rt == EM_BOOL) {
        PyErr_Format(PyExc_NotImplementedError,
                     "div(): \"div_%s_cpu\" not implemented for 'Bool'", m);
        return NULL;
    }
    bool done;
    em_Tensor *out = layout_out(args, 2, &g, rt, &done);
    if (done)
        return (PyObject *)out;
    int st;
    if (!em_is_float(rt)) {
        /* integer division by zero is an error in PyTorch */
        if (check_divisor(args[1]) < 0)
            return em_finish(out, -1);
        st = em_ufunc_call(floor ? em_np.floor_divide : em_np.fmod, args, 2, out->array,
                           rt, rt);
        if (!floor && st == 0) {
            /* trunc(a / b) = (a - fmod(a, b)) / b, exact in integers */
            PyObject *a1[2] = {args[0], (PyObject *)out};
            st = em_ufunc_call(em_np.subtract, a1, 2, out->array, rt, rt);
            PyObject *a2[2] = {(PyObject *)out, args[1]};
            if (st == 0)
                st = em_ufunc_call(em_np.floor_divide, a2, 2, out->array, rt, rt);
        }
        return em_finish(out, st);
    }
    if (floor) {
        /* Python's floor division (fmod-based), as PyTorch's div_floor: 1 // 0.1 is 9 */
        return em_finish(out, em_ufunc_call(em_np.floor_divide, args, 2, out->array, rt, rt));
    }
    st = em_ufunc_call(op->ufunc, args, 2, out->array, rt, rt);
    if (st == 0) {
        PyObject *one[1] = {(PyObject *)out};
        st = em_ufunc_call(em_np.trunc, one, 1, out->array, rt, rt);
    }
    return em_finish(out, st);
}

/* Runs the C loop `loop` (cloops.c) over the tensors ins into out; out is floating
 * point for every op that gets here. */
static PyObject *
run_cloop(em_Tensor *out, const char *loop, PyObject **ins, int nin, const double *params)
{
    int c = em_cloop(loop, ins, nin, out, params);
    if (c == 0) {
        PyErr_Format(PyExc_SystemError, "no C loop %s for %s", loop,
                     em_dtypes[out->dtype]->name);
        c = -1;
    }
    return em_finish(out, c < 0 ? -1 : 0);
}

/* Kernels of ops of nin tensor operands computed by one C loop: sigmoid, erf, gelu,
 * silu, ..., special_zeta. The loop has the op's name unless given; params are the op's
 * numbers. */
static PyObject *
cloop_kernel(em_Op *op, PyObject **args, int nin, const char *loop, const double *params)
{
    em_dtype_t compute;
    bool done;
    em_Tensor *out = elementwise_out(op, args, nin, &compute, &done);
    if (done)
        return (PyObject *)out;
    return run_cloop(out, loop != NULL ? loop : PyUnicode_AsUTF8(op->name), args, nin,
                     params);
}

/* An op computed by the C loop named after it, with its numbers (its parameters after
 * self) as the loop's params: sigmoid(x) = 1 / (1 + exp(-x)); also erf, erfc, rsqrt,
 * silu, mish, softplus(self, beta, threshold), elu(self, alpha, scale, input_scale),
 * leaky_relu(self, negative_slope). */
static PyObject *
k_cloop(em_Op *op, PyObject **args)
{
    double p[EM_MAX_PARAMS];
    /* complex operands of ops whose rule takes them (sigmoid, rsqrt): no C loop, the
     * decomposition (complex-capable prims) */
    if ((op->rule & EM_RULE_COMPLEX) && em_Tensor_Check(args[0]) &&
        em_is_complex(((em_Tensor *)args[0])->dtype))
        return em_decomposed_kernel(op, args);
    for (int i = 1; i < op->nparams; i++)
        if ((p[i - 1] = PyFloat_AsDouble(args[i])) == -1.0 && PyErr_Occurred())
            return NULL;
    return cloop_kernel(op, args, 1, NULL, p);
}

/* A binary op computed by the C loop named after it (special_zeta): both operands are
 * tensors (the op takes no numbers), broadcast and converted by em_cloop. */
static PyObject *
k_cloop_binary(em_Op *op, PyObject **args)
{
    return cloop_kernel(op, args, 2, NULL, NULL);
}

/* relu(x) = maximum(x, 0), NaN-propagating: a C loop for floats, the ufunc for integers. */
static PyObject *
k_relu(em_Op *op, PyObject **args)
{
    em_dtype_t compute;
    bool done;
    em_Tensor *out = elementwise_out(op, args, 1, &compute, &done);
    if (done)
        return (PyObject *)out;
    if (em_is_float(out->dtype))
        return run_cloop(out, "relu", args, 1, NULL);
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL)
        return em_finish(out, -1);
    PyObject *in[2] = {args[0], zero};
    int st = em_ufunc_call(op->ufunc, in, 2, out->array, compute, compute);
    Py_DECREF(zero);
    return em_finish(out, st);
}

/* sign(x): the C loop for floats (0 for NaN, as PyTorch), NumPy's sign for integers,
 * the identity for bool. */
static PyObject *
k_sign(em_Op *op, PyObject **args)
{
    em_dtype_t compute;
    bool done;
    em_Tensor *out = elementwise_out(op, args, 1, &compute, &done);
    if (done)
        return (PyObject *)out;
    if (em_is_float(out->dtype))
        return run_cloop(out, "sign", args, 1, NULL);
    if (out->dtype == EM_BOOL)
        return em_finish(out, PyArray_CopyInto(out->array, ((em_Tensor *)args[0])->array));
    return em_finish(out, em_ufunc_call(op->ufunc, args, 1, out->array, compute, compute));
}

/* floor, ceil, trunc, round: the ufunc for floats; integers pass through (a copy). */
static PyObject *
k_rounding(em_Op *op, PyObject **args)
{
    em_dtype_t compute;
    bool done;
    em_Tensor *out = elementwise_out(op, args, 1, &compute, &done);
    if (done)
        return (PyObject *)out;
    if (!em_is_float(out->dtype))
        return em_finish(out, PyArray_CopyInto(out->array, ((em_Tensor *)args[0])->array));
    return em_finish(out, em_ufunc_call(op->ufunc, args, 1, out->array, compute, compute));
}

/* round(self, *, decimals): rint(self * 10**decimals) / 10**decimals, as PyTorch (for
 * decimals < 0, rint(self / 10**-decimals) * 10**-decimals). */
static PyObject *
k_round_decimals(em_Op *op, PyObject **args)
{
    em_dtype_t compute;
    bool done;
    long d = PyLong_AsLong(args[1]);
    if (d == -1 && PyErr_Occurred())
        return NULL;
    em_Tensor *out = elementwise_out(op, args, 1, &compute, &done);
    if (done)
        return (PyObject *)out;
    if (d == 0)
        return em_finish(out, em_ufunc_call(op->ufunc, args, 1, out->array, compute, compute));
    PyObject *scale = PyFloat_FromDouble(pow(10.0, (double)labs(d)));
    if (scale == NULL)
        return em_finish(out, -1);
    PyObject *first[2] = {args[0], scale}, *self_out[1] = {(PyObject *)out},
             *last[2] = {(PyObject *)out, scale};
    int st = em_ufunc_call(d > 0 ? em_np.multiply : em_np.true_divide, first, 2, out->array,
                           compute, compute);
    if (st == 0)
        st = em_ufunc_call(op->ufunc, self_out, 1, out->array, compute, compute);
    if (st == 0)
        st = em_ufunc_call(d > 0 ? em_np.true_divide : em_np.multiply, last, 2, out->array,
                           compute, compute);
    Py_DECREF(scale);
    return em_finish(out, st);
}

/* frac(self) = self - trunc(self) */
static PyObject *
k_frac(em_Op *op, PyObject **args)
{
    em_dtype_t compute;
    bool done;
    em_Tensor *out = elementwise_out(op, args, 1, &compute, &done);
    if (done)
        return (PyObject *)out;
    int st = em_ufunc_call(op->ufunc, args, 1, out->array, compute, compute);
    PyObject *diff[2] = {args[0], (PyObject *)out};
    if (st == 0)
        st = em_ufunc_call(em_np.subtract, diff, 2, out->array, compute, compute);
    return em_finish(out, st);
}

/* gelu(self, *, approximate='none'|'tanh') */
static PyObject *
k_gelu(em_Op *op, PyObject **args)
{
    const char *a = PyUnicode_AsUTF8(args[1]);
    if (a == NULL)
        return NULL;
    bool tanh_ = strcmp(a, "tanh") == 0;
    if (!tanh_ && strcmp(a, "none") != 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "gelu(): approximate argument must be either none or tanh.");
        return NULL;
    }
    return cloop_kernel(op, args, 1, tanh_ ? "gelu_tanh" : "gelu", NULL);
}

/* nan_to_num(self, nan=None, posinf=None, neginf=None): floats through a C loop (the
 * defaults: 0 and the dtype's largest and lowest finite values); integers and bool
 * are copied. */
static PyObject *
k_nan_to_num(em_Op *op, PyObject **args)
{
    em_dtype_t compute;
    bool done;
    em_Tensor *out = elementwise_out(op, args, 1, &compute, &done);
    if (done)
        return (PyObject *)out;
    if (!em_is_float(out->dtype))
        return em_finish(out, PyArray_CopyInto(out->array, ((em_Tensor *)args[0])->array));
    double big = out->dtype == EM_FLOAT16    ? 65504.0
                 : out->dtype == EM_BFLOAT16 ? 3.3895313892515355e+38   /* 0x7f7f */
                 : out->dtype == EM_FLOAT32  ? FLT_MAX
                                             : DBL_MAX;
    double p[3] = {0.0, big, -big};
    for (int i = 0; i < 3; i++) {
        if (args[i + 1] == Py_None)
            continue;
        p[i] = PyFloat_AsDouble(args[i + 1]);
        if (p[i] == -1.0 && PyErr_Occurred())
            return em_finish(out, -1);
    }
    return run_cloop(out, "nan_to_num", args, 1, p);
}


/* out = minimum(maximum(x, lo), hi), either bound optional (None); NaN propagates
 * from x and from the bounds, and lo > hi gives hi, as PyTorch's clamp. */
static int
clamp_into(em_Tensor *out, PyObject *x, PyObject *lo, PyObject *hi, em_dtype_t compute)
{
    if (em_is_float(out->dtype) && em_Tensor_Check(x) && !em_Tensor_Check(lo) &&
        !em_Tensor_Check(hi)) {
        /* number bounds on a float result: one C loop (NaN bounds take the ufuncs) */
        double p[2] = {-INFINITY, INFINITY};
        if ((lo != Py_None && (p[0] = PyFloat_AsDouble(lo)) == -1.0 && PyErr_Occurred()) ||
            (hi != Py_None && (p[1] = PyFloat_AsDouble(hi)) == -1.0 && PyErr_Occurred()))
            return -1;
        if (p[0] == p[0] && p[1] == p[1])
            return em_cloop("clamp", &x, 1, out, p) < 0 ? -1 : 0;
    }
    int st = 0;
    PyObject *src = x;
    if (lo != Py_None) {
        PyObject *in[2] = {x, lo};
        st = em_ufunc_call(em_np.maximum, in, 2, out->array, compute, compute);
        src = (PyObject *)out;
    }
    if (st == 0 && hi != Py_None) {
        PyObject *in[2] = {src, hi};
        st = em_ufunc_call(em_np.minimum, in, 2, out->array, compute, compute);
    }
    return st;
}

/* hardtanh(self, min_val=-1, max_val=1): clamp keeping self's dtype (the bounds are
 * converted to it). */
static PyObject *
k_hardtanh(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    if (self->dtype == EM_BOOL) {
        PyErr_SetString(PyExc_RuntimeError, "hardtanh(): Bool inputs not supported for hardtanh");
        return NULL;
    }
    if (self->dtype == EM_UINT8) {
        double lo = PyFloat_AsDouble(args[1]);
        if (lo == -1.0 && PyErr_Occurred())
            return NULL;
        if (lo < 0) {
            PyErr_SetString(PyExc_RuntimeError, "hardtanh(): cannot do hardtanh on an unsigned "
                            "type with negative lower bound.");
            return NULL;
        }
    }
    em_dtype_t compute;
    bool done;
    em_Tensor *out = elementwise_out(op, args, 1, &compute, &done);
    if (done)
        return (PyObject *)out;
    return em_finish(out, clamp_into(out, args[0], args[1], args[2], compute));
}

/* clamp(self, min=None, max=None): bounds are tensors or numbers, and promote. */
static PyObject *
k_clamp(em_Op *op, PyObject **args)
{
    if (em_refuse_complex(op, args[0]) < 0)
        return NULL;
    if (args[1] == Py_None && args[2] == Py_None) {
        PyErr_SetString(PyExc_RuntimeError,
                        "clamp(): At least one of 'min' or 'max' must not be None");
        return NULL;
    }
    em_Geom g;
    if (em_broadcast("clamp", args, 3, &g) < 0)
        return NULL;
    em_dtype_t rt = em_result_type(args, 3);
    /* as PyTorch: bool only has the one-sided kernels with a tensor bound */
    bool one_tensor_bound = (args[1] == Py_None) != (args[2] == Py_None) &&
                            em_Tensor_Check(args[1] == Py_None ? args[2] : args[1]);
    if (rt == EM_BOOL && !one_tensor_bound) {
        PyErr_SetString(PyExc_NotImplementedError,
                        "clamp(): \"clamp\" not implemented for 'Bool'");
        return NULL;
    }
    bool done;
    em_Tensor *out = layout_out(args, 3, &g, rt, &done);
    if (done)
        return (PyObject *)out;
    return em_finish(out, clamp_into(out, args[0], args[1], args[2], rt));
}

/* floor_divide / remainder: Python's floor semantics (NumPy's); an integer divisor of
 * zero is an error, as in PyTorch. */
static PyObject *
k_int_checked(em_Op *op, PyObject **args)
{
    em_dtype_t compute;
    bool done;
    em_Tensor *out = elementwise_out(op, args, 2, &compute, &done);
    if (done)
        return (PyObject *)out;
    if (!em_is_float(compute) && check_divisor(args[1]) < 0)
        return em_finish(out, -1);
    return em_finish(out, em_ufunc_call(op->ufunc, args, 2, out->array, compute, compute));
}

/* out = self + value * (tensor1 (op) tensor2), op multiply or true_divide */
static int
add_scaled(em_Tensor *out, PyObject **args, PyObject *ufunc, em_dtype_t compute)
{
    PyObject *value = args[3];
    PyObject *in[2] = {args[1], args[2]};
    if (em_ufunc_call(ufunc, in, 2, out->array, compute, compute) < 0)
        return -1;
    if (!(PyLong_CheckExact(value) && PyLong_AsLong(value) == 1)) {
        PyObject *v = value;
        if (!em_is_float(compute) && PyFloat_Check(value)) {
            /* PyTorch converts value to the integer dtype first (2.5 -> 2) */
            v = PyNumber_Long(value);
            if (v == NULL)
                return -1;
        }
        else {
            Py_INCREF(v);
        }
        PyObject *sc[2] = {(PyObject *)out, v};
        int st = em_ufunc_call(em_np.multiply, sc, 2, out->array, compute, compute);
        Py_DECREF(v);
        if (st < 0)
            return -1;
    }
    PyObject *sum[2] = {args[0], (PyObject *)out};
    return em_ufunc_call(em_np.add, sum, 2, out->array, compute, compute);
}

/* addcmul(self, tensor1, tensor2, *, value=1) = self + value * tensor1 * tensor2 */
static PyObject *
k_addcmul(em_Op *op, PyObject **args)
{
    em_dtype_t compute;
    bool done;
    em_Tensor *out = elementwise_out(op, args, 3, &compute, &done);
    if (done)
        return (PyObject *)out;
    return em_finish(out, add_scaled(out, args, em_np.multiply, compute));
}

/* addcdiv(self, tensor1, tensor2, *, value=1) = self + value * tensor1 / tensor2; the
 * division is true division, so integer tensor1 and tensor2 are refused as PyTorch
 * refuses them. */
static PyObject *
k_addcdiv(em_Op *op, PyObject **args)
{
    if (em_Tensor_Check(args[1]) && em_Tensor_Check(args[2]) &&
        !em_is_float(((em_Tensor *)args[1])->dtype) &&
        !em_is_float(((em_Tensor *)args[2])->dtype)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "addcdiv(): Integer division with addcdiv is no longer supported, and "
                        "in a future release addcdiv will perform a true division of tensor1 "
                        "and tensor2. The historic addcdiv behavior can be implemented as "
                        "(input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for "
                        "integer inputs and as (input + value * tensor1 / tensor2) for float "
                        "inputs. The future addcdiv behavior is just the latter "
                        "implementation: (input + value * tensor1 / tensor2), for all dtypes.");
        return NULL;
    }
    em_dtype_t compute;
    bool done;
    em_Tensor *out = elementwise_out(op, args, 3, &compute, &done);
    if (done)
        return (PyObject *)out;
    return em_finish(out, add_scaled(out, args, em_np.true_divide, compute));
}

/* lerp(self, end, weight): weight a tensor (lerp.Tensor) or a number (lerp.Scalar);
 * every tensor must have self's dtype, a floating one. */
static PyObject *
k_lerp(em_Op *op, PyObject **args)
{
    em_Tensor *self = (em_Tensor *)args[0];
    static const char *what[3] = {"self", "end", "weight"};
    for (int i = 1; i < 3; i++) {
        if (em_Tensor_Check(args[i]) && ((em_Tensor *)args[i])->dtype != self->dtype) {
            PyErr_Format(PyExc_RuntimeError, "lerp(): expected dtype %s for `%s` but got dtype %s",
                         em_dtypes[self->dtype]->name, what[i],
                         em_dtypes[((em_Tensor *)args[i])->dtype]->name);
            return NULL;
        }
    }
    if (!em_is_float(self->dtype)) {
        PyErr_Format(PyExc_NotImplementedError, "lerp(): \"lerp\" not implemented for '%s'",
                     em_dtype_torch_name(self->dtype));
        return NULL;
    }
    em_Geom g;
    if (em_broadcast("lerp", args, 3, &g) < 0)
        return NULL;
    bool done;
    em_Tensor *out = layout_out(args, 3, &g, self->dtype, &done);
    if (done)
        return (PyObject *)out;
    if (em_Tensor_Check(args[2]))
        return run_cloop(out, "lerp", args, 3, NULL);
    double w = PyFloat_AsDouble(args[2]);
    if (w == -1.0 && PyErr_Occurred())
        return em_finish(out, -1);
    return run_cloop(out, "lerp_scalar", args, 2, &w);
}

/* tril / triu(self, diagonal=0): self with the elements above (tril) or below (triu)
 * the diagonal-th diagonal of the last two dims zeroed; a contiguous result. */
static PyObject *
triangle(em_Op *op, PyObject **args, bool lower)
{
    em_Tensor *self = (em_Tensor *)args[0];
    const char *name = lower ? "tril" : "triu";
    Py_ssize_t k = PyLong_AsSsize_t(args[1]);
    if (k == -1 && PyErr_Occurred())
        return NULL;
    if (self->ndim < 2) {
        PyErr_Format(PyExc_RuntimeError, "%s(): input tensor must have at least 2 dimensions",
                     name);
        return NULL;
    }
    bool meta = em_meta_of(self);
    em_Tensor *out = em_empty(self->ndim, self->sizes, self->dtype, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    if (PyArray_CopyInto(out->array, self->array) < 0)
        return em_finish(out, -1);
    Py_ssize_t rows = self->sizes[self->ndim - 2], cols = self->sizes[self->ndim - 1];
    Py_ssize_t batch = out->numel / (rows * cols);
    size_t item = (size_t)em_dtypes[self->dtype]->itemsize;
    char *base = PyArray_DATA(out->array);
    for (Py_ssize_t b = 0; b < batch; b++) {
        for (Py_ssize_t i = 0; i < rows; i++) {
            char *row = base + (size_t)((b * rows + i) * cols) * item;
            /* tril keeps j <= i + k: zero [i + k + 1, cols); triu keeps j >= i + k */
            Py_ssize_t lo = lower ? i + k + 1 : 0, hi = lower ? cols : i + k;
            lo = lo < 0 ? 0 : (lo > cols ? cols : lo);
            hi = hi < 0 ? 0 : (hi > cols ? cols : hi);
            if (hi > lo)
                memset(row + (size_t)lo * item, 0, (size_t)(hi - lo) * item);
        }
    }
    return (PyObject *)out;
}

static PyObject *
k_tril(em_Op *op, PyObject **args)
{
    return triangle(op, args, true);
}

static PyObject *
k_triu(em_Op *op, PyObject **args)
{
    return triangle(op, args, false);
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
    bool done;
    em_Tensor *out = layout_out(args, 3, &g, em_result_type(args + 1, 2), &done);
    if (done)
        return (PyObject *)out;
    if (copyto_kwnames == NULL &&
        (copyto_kwnames = Py_BuildValue("(ss)", "casting", "where")) == NULL)
        return em_finish(out, -1);
    int st = 0;
    for (int i = 0; i < 2 && st == 0; i++) {
        PyObject *src = args[2 - i];
        if (em_Tensor_Check(src))
            src = (PyObject *)((em_Tensor *)src)->array;
        PyObject *call[4] = {(PyObject *)out->array, src, em_str_unsafe,
                             i == 0 ? Py_True : (PyObject *)((em_Tensor *)cond)->array};
        PyObject *r = PyObject_Vectorcall(em_np.copyto, call, 2, copyto_kwnames);
        if (r == NULL)
            st = -1;
        Py_XDECREF(r);
    }
    return em_finish(out, st);
}

const em_KernelEntry em_elementwise_kernels[] = {
    {"where", k_where},
    {"ufunc", k_ufunc},
    {"binary_alpha", k_binary_alpha},
    {"pow", k_pow},
    {"div", k_div},
    {"cloop", k_cloop},
    {"cloop_binary", k_cloop_binary},
    {"relu", k_relu},
    {"sign", k_sign},
    {"rounding", k_rounding},
    {"round_decimals", k_round_decimals},
    {"frac", k_frac},
    {"gelu", k_gelu},
    {"nan_to_num", k_nan_to_num},
    {"hardtanh", k_hardtanh},
    {"clamp", k_clamp},
    {"int_checked", k_int_checked},
    {"addcmul", k_addcmul},
    {"addcdiv", k_addcdiv},
    {"lerp", k_lerp},
    {"tril", k_tril},
    {"triu", k_triu},
    {NULL, NULL},
};

