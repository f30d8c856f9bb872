/* codegen.c: one kernel spec -> one LLVM function, through the LLVM-C builder.
 *
 * A kernel spec is the plain tuple python/ember/compiler/codegen.py makes:
 *
 *     (sizes, nreduce, params, instrs)
 *
 * sizes: the iteration domain, outer to inner; the last `nreduce` dims are reduced.
 * params: the dtype code of each pointer argument. The function is
 * `void f(void **args, int64_t start, int64_t end)`: args[i] points at element 0 of
 * buffer i, and when dim 0 is not reduced it runs only over [start, end) of dim 0 (so
 * threads can split it); a kernel reducing every dim ignores the range.
 * instrs, in order, on numbered registers (an index is offset + sum(coeffs[d]*i_d)):
 *
 *     ("load", dst, param, coeffs, offset)
 *     ("const", dst, dtype, value)            ("iota", dst, dtype, dim)
 *     ("cast", dst, dtype, src)               the only conversion: every other
 *                                             instruction's operands must already be
 *                                             of its dtype (a bool condition for select;
 *                                             a stored value of the buffer's dtype)
 *     (unary, dst, dtype, src)                neg exp log tanh reciprocal abs sqrt not
 *                                             floor trunc sin cos erf expm1 log1p
 *     (binary, dst, dtype, a, b)              add sub mul div max min pow and or xor;
 *                                             add of bools is `or` (PyTorch's True +
 *                                             True is True)
 *     (compare, dst, dtype, a, b)             lt le gt ge eq ne; dtype of a and b;
 *                                             the result is bool
 *     ("select", dst, dtype, cond, a, b)
 *     ("store", param, coeffs, offset, src)   every point of the domain
 *     ("reduce", param, op, coeffs, offset, src)
 *                                             sum/max/min/prod over the reduced dims
 *                                             (their coeffs are 0), kept in a register
 *                                             and stored once per outer point
 *     ("accumulate", param, op, coeffs, offset, src)
 *                                             buffer[index] = op(buffer[index], src) in
 *                                             memory (a reduction along outer dims)
 *
 * Loops are plain counted loops over compile-time sizes; LLVM's loop vectoriser
 * (run by jit.c at O2) turns the innermost one into vector code of the host's width.
 * Float sum reductions carry llvm.loop.vectorize.enable so that it may reorder them.
 */
#include "jit/jit.h"

#include <math.h>

typedef struct {
    LLVMContextRef C;
    LLVMModuleRef M;
    LLVMBuilderRef B;
    LLVMValueRef fn;
    int ndim, nreduce;
    Py_ssize_t sizes[EM_MAX_DIMS];
    int nparams;
    LLVMValueRef *ptr;
    em_dtype_t *ptype;
    PyObject *instrs;
    LLVMValueRef iv[EM_MAX_DIMS];
    int nregs;
    LLVMValueRef *reg;
    em_dtype_t *rtype;
    LLVMValueRef *acc;        /* per instruction index: accumulator alloca or NULL */
    /* per instruction index, for float max/min reductions: an i8 alloca recording
     * whether a NaN was seen. Their accumulator holds order-preserving integer keys of
     * the floats (see float_key), so the fold is an integer smax/smin and the NaN flag
     * an `or`: both reductions LLVM 14's loop vectoriser widens, where a NaN-propagating
     * float max is not. */
    LLVMValueRef *nan_acc;
    bool float_sum;
    bool split;               /* dim 0 runs over [start, end): threads split it */
    LLVMValueRef start, end;
    LLVMTypeRef i64;
} cg_t;

/* ------------------------------------------------------------------ types */

static LLVMTypeRef
mem_type(cg_t *g, em_dtype_t t)
{
    switch (t) {
    case EM_BOOL: case EM_UINT8: case EM_INT8: return LLVMInt8TypeInContext(g->C);
    case EM_INT16: return LLVMInt16TypeInContext(g->C);
    case EM_INT32: return LLVMInt32TypeInContext(g->C);
    case EM_INT64: return LLVMInt64TypeInContext(g->C);
    case EM_FLOAT32: return LLVMFloatTypeInContext(g->C);
    case EM_FLOAT64: return LLVMDoubleTypeInContext(g->C);
    default: return NULL;
    }
}

static LLVMTypeRef
reg_type(cg_t *g, em_dtype_t t)
{
    return t == EM_BOOL ? LLVMInt1TypeInContext(g->C) : mem_type(g, t);
}

static int
check_dtype(em_dtype_t t)
{
    if (t < 0 || t >= EM_NDTYPES || t == EM_FLOAT16) {
        PyErr_Format(PyExc_NotImplementedError, "ember JIT: dtype %s is not supported",
                     t >= 0 && t < EM_NDTYPES ? em_dtypes[t]->name : "?");
        return -1;
    }
    return 0;
}

static int
int_item(PyObject *tup, Py_ssize_t i, long *out)
{
    *out = PyLong_AsLong(PyTuple_GET_ITEM(tup, i));
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static LLVMValueRef
get_reg(cg_t *g, long r)
{
    if (r < 0 || r >= g->nregs || g->reg[r] == NULL) {
        PyErr_Format(PyExc_ValueError, "ember JIT: register %ld used before definition", r);
        return NULL;
    }
    return g->reg[r];
}

/* Register r, which must hold a value of dtype t: nothing converts implicitly (the loop
 * IR casts explicitly; python/ember/compiler/loop_ir.py verifies the same rule). */
static LLVMValueRef
get_operand(cg_t *g, long r, em_dtype_t t, const char *op)
{
    LLVMValueRef v = get_reg(g, r);
    if (v == NULL)
        return NULL;
    if (g->rtype[r] != t) {
        PyErr_Format(PyExc_ValueError,
                     "ember JIT: %s computes in %s but register %ld holds %s (a cast is "
                     "missing)", op, em_dtypes[t]->name, r, em_dtypes[g->rtype[r]]->name);
        return NULL;
    }
    return v;
}

static int
set_reg(cg_t *g, long r, LLVMValueRef v, em_dtype_t t)
{
    if (r < 0 || r >= g->nregs) {
        PyErr_Format(PyExc_ValueError, "ember JIT: bad register %ld", r);
        return -1;
    }
    g->reg[r] = v;
    g->rtype[r] = t;
    return 0;
}

/* ------------------------------------------------------------------ helpers */

static LLVMValueRef
intrinsic(cg_t *g, const char *name, LLVMTypeRef type, LLVMValueRef *args, int nargs)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(g->M, id, &type, 1);
    LLVMTypeRef ft = LLVMIntrinsicGetType(g->C, id, &type, 1);
    return LLVMBuildCall2(g->B, ft, f, args, nargs, "");
}

static LLVMValueRef
call_fn(cg_t *g, LLVMValueRef f, LLVMValueRef *args, int nargs)
{
    return LLVMBuildCall2(g->B, LLVMGlobalGetValueType(f), f, args, nargs, "");
}

/* offset + sum(coeffs[d] * iv[d]) as i64 */
static LLVMValueRef
index_of(cg_t *g, PyObject *coeffs, PyObject *offset)
{
    long off = PyLong_AsLong(offset);
    if (off == -1 && PyErr_Occurred())
        return NULL;
    if (!PyTuple_Check(coeffs) || PyTuple_GET_SIZE(coeffs) != g->ndim) {
        PyErr_SetString(PyExc_ValueError, "ember JIT: index coefficients do not match the domain");
        return NULL;
    }
    LLVMValueRef idx = LLVMConstInt(g->i64, (unsigned long long)off, 1);
    for (int d = 0; d < g->ndim; d++) {
        long c;
        if (int_item(coeffs, d, &c) < 0)
            return NULL;
        if (c == 0)
            continue;
        LLVMValueRef term = c == 1 ? g->iv[d]
                                   : LLVMBuildMul(g->B, g->iv[d],
                                                  LLVMConstInt(g->i64, (unsigned long long)c, 1), "");
        idx = LLVMBuildAdd(g->B, idx, term, "");
    }
    return idx;
}

static LLVMValueRef
address(cg_t *g, long param, PyObject *coeffs, PyObject *offset)
{
    if (param < 0 || param >= g->nparams) {
        PyErr_Format(PyExc_ValueError, "ember JIT: bad parameter %ld", param);
        return NULL;
    }
    LLVMValueRef idx = index_of(g, coeffs, offset);
    if (idx == NULL)
        return NULL;
    return LLVMBuildInBoundsGEP2(g->B, mem_type(g, g->ptype[param]), g->ptr[param], &idx, 1, "");
}

/* A float to integer dtype `to` as eager (NumPy, and PyTorch) converts on x86: truncated
 * to int32 (int64 for int64), where a value out of that range or NaN gives the most
 * negative one (cvttss2si's "integer indefinite"), then narrowed by dropping high bits
 * (200.7 to uint8 is 200, -2.5 is 254). A bare fptosi into a narrow type would be
 * poison outside its range. */
static LLVMValueRef
float_to_int(cg_t *g, LLVMValueRef v, em_dtype_t to)
{
    bool wide = to == EM_INT64;
    LLVMTypeRef it = wide ? g->i64 : LLVMInt32TypeInContext(g->C);
    LLVMTypeRef ft = LLVMTypeOf(v);
    double lim = wide ? 9223372036854775808.0 : 2147483648.0;
    LLVMValueRef in = LLVMBuildAnd(
        g->B, LLVMBuildFCmp(g->B, LLVMRealOGE, v, LLVMConstReal(ft, -lim), ""),
        LLVMBuildFCmp(g->B, LLVMRealOLT, v, LLVMConstReal(ft, lim), ""), "");
    /* convert a value known to be in range (0 otherwise), then select */
    LLVMValueRef safe = LLVMBuildSelect(g->B, in, v, LLVMConstReal(ft, 0.0), "");
    LLVMValueRef r = LLVMBuildSelect(g->B, in, LLVMBuildFPToSI(g->B, safe, it, ""),
                                     LLVMConstInt(it, wide ? 1ULL << 63 : 1ULL << 31, 0), "");
    LLVMTypeRef tt = reg_type(g, to);
    return tt == it ? r : LLVMBuildTrunc(g->B, r, tt, "");
}

static LLVMValueRef
convert(cg_t *g, LLVMValueRef v, em_dtype_t from, em_dtype_t to)
{
    if (from == to)
        return v;
    LLVMTypeRef tt = reg_type(g, to);
    bool ff = em_is_float(from), tf = em_is_float(to);
    if (to == EM_BOOL) {
        if (ff)
            return LLVMBuildFCmp(g->B, LLVMRealUNE, v, LLVMConstReal(LLVMTypeOf(v), 0.0), "");
        return LLVMBuildICmp(g->B, LLVMIntNE, v, LLVMConstInt(LLVMTypeOf(v), 0, 0), "");
    }
    if (ff && tf)
        return LLVMBuildFPCast(g->B, v, tt, "");
    if (ff)
        return float_to_int(g, v, to);
    bool unsigned_src = from == EM_BOOL || from == EM_UINT8;
    if (tf)
        return unsigned_src ? LLVMBuildUIToFP(g->B, v, tt, "") : LLVMBuildSIToFP(g->B, v, tt, "");
    return LLVMBuildIntCast2(g->B, v, tt, !unsigned_src, "");
}

static LLVMValueRef
fmax_nan(cg_t *g, LLVMValueRef a, LLVMValueRef b, bool is_max)
{
    LLVMValueRef gt = LLVMBuildFCmp(g->B, is_max ? LLVMRealOGT : LLVMRealOLT, a, b, "");
    LLVMValueRef r = LLVMBuildSelect(g->B, gt, a, b, "");
    LLVMValueRef a_nan = LLVMBuildFCmp(g->B, LLVMRealUNO, a, a, "");
    return LLVMBuildSelect(g->B, a_nan, a, r, "");   /* NaN propagates, as in PyTorch */
}

static LLVMValueRef
binary(cg_t *g, const char *op, em_dtype_t t, LLVMValueRef a, LLVMValueRef b)
{
    bool f = em_is_float(t), u = t == EM_UINT8 || t == EM_BOOL;
    if (strcmp(op, "add") == 0 && t == EM_BOOL)
        return LLVMBuildOr(g->B, a, b, "");          /* True + True is True */
    if (strcmp(op, "add") == 0)
        return f ? LLVMBuildFAdd(g->B, a, b, "") : LLVMBuildAdd(g->B, a, b, "");
    if (strcmp(op, "sub") == 0 && t != EM_BOOL)
        return f ? LLVMBuildFSub(g->B, a, b, "") : LLVMBuildSub(g->B, a, b, "");
    if (strcmp(op, "mul") == 0)
        return f ? LLVMBuildFMul(g->B, a, b, "") : LLVMBuildMul(g->B, a, b, "");
    if (strcmp(op, "div") == 0 && f)
        return LLVMBuildFDiv(g->B, a, b, "");
    if (strcmp(op, "max") == 0 || strcmp(op, "min") == 0) {
        bool mx = op[1] == 'a';
        if (f)
            return fmax_nan(g, a, b, mx);
        LLVMIntPredicate p = mx ? (u ? LLVMIntUGT : LLVMIntSGT) : (u ? LLVMIntULT : LLVMIntSLT);
        return LLVMBuildSelect(g->B, LLVMBuildICmp(g->B, p, a, b, ""), a, b, "");
    }
    if (strcmp(op, "pow") == 0 && f) {
        LLVMValueRef args[2] = {a, b};
        return call_fn(g, em_ir_libm(g->M, t == EM_FLOAT32 ? "powf" : "pow",
                                     reg_type(g, t), 2), args, 2);
    }
    if (!f && strcmp(op, "and") == 0)
        return LLVMBuildAnd(g->B, a, b, "");
    if (!f && strcmp(op, "or") == 0)
        return LLVMBuildOr(g->B, a, b, "");
    if (!f && strcmp(op, "xor") == 0)
        return LLVMBuildXor(g->B, a, b, "");
    PyErr_Format(PyExc_NotImplementedError, "ember JIT: binary %s on %s", op,
                 em_dtypes[t]->name);
    return NULL;
}

static LLVMValueRef
unary(cg_t *g, const char *op, em_dtype_t t, LLVMValueRef a)
{
    bool f = em_is_float(t);
    LLVMTypeRef ty = reg_type(g, t);
    if (strcmp(op, "neg") == 0 && t != EM_BOOL)
        return f ? LLVMBuildFNeg(g->B, a, "") : LLVMBuildNeg(g->B, a, "");
    if (strcmp(op, "not") == 0 && !f)
        return LLVMBuildNot(g->B, a, "");
    if (!f)
        goto unsupported;
    if (strcmp(op, "reciprocal") == 0)
        return LLVMBuildFDiv(g->B, LLVMConstReal(ty, 1.0), a, "");
    if (strcmp(op, "abs") == 0)
        return intrinsic(g, "llvm.fabs", ty, &a, 1);
    if (strcmp(op, "sqrt") == 0)
        return intrinsic(g, "llvm.sqrt", ty, &a, 1);
    if (strcmp(op, "exp") == 0) {
        if (t == EM_FLOAT32)
            return call_fn(g, em_ir_expf(g->M), &a, 1);
        return call_fn(g, em_ir_libm(g->M, "exp", ty, 1), &a, 1);
    }
    if (strcmp(op, "erf") == 0 && t == EM_FLOAT32)
        return call_fn(g, em_ir_erff(g->M), &a, 1);
    if (strcmp(op, "log") == 0)
        return call_fn(g, em_ir_libm(g->M, t == EM_FLOAT32 ? "logf" : "log", ty, 1), &a, 1);
    if (strcmp(op, "floor") == 0)
        return intrinsic(g, "llvm.floor", ty, &a, 1);
    if (strcmp(op, "trunc") == 0)
        return intrinsic(g, "llvm.trunc", ty, &a, 1);
    static const char *libm[][2] = {
        {"tanh", "tanhf"}, {"sin", "sinf"}, {"cos", "cosf"}, {"erf", "erff"},
        {"expm1", "expm1f"}, {"log1p", "log1pf"},
    };
    for (size_t i = 0; i < sizeof libm / sizeof libm[0]; i++)
        if (strcmp(op, libm[i][0]) == 0)
            return call_fn(g, em_ir_libm(g->M, libm[i][t == EM_FLOAT32], ty, 1), &a, 1);
unsupported:
    PyErr_Format(PyExc_NotImplementedError, "ember JIT: %s on %s", op, em_dtypes[t]->name);
    return NULL;
}

static LLVMValueRef
compare(cg_t *g, const char *op, em_dtype_t t, LLVMValueRef a, LLVMValueRef b)
{
    static const struct {
        const char *name;
        LLVMRealPredicate fp;
        LLVMIntPredicate sp, up;
    } preds[] = {
        {"lt", LLVMRealOLT, LLVMIntSLT, LLVMIntULT}, {"le", LLVMRealOLE, LLVMIntSLE, LLVMIntULE},
        {"gt", LLVMRealOGT, LLVMIntSGT, LLVMIntUGT}, {"ge", LLVMRealOGE, LLVMIntSGE, LLVMIntUGE},
        {"eq", LLVMRealOEQ, LLVMIntEQ, LLVMIntEQ}, {"ne", LLVMRealUNE, LLVMIntNE, LLVMIntNE},
    };
    for (size_t i = 0; i < sizeof preds / sizeof preds[0]; i++) {
        if (strcmp(op, preds[i].name) != 0)
            continue;
        if (em_is_float(t))
            return LLVMBuildFCmp(g->B, preds[i].fp, a, b, "");
        bool u = t == EM_UINT8 || t == EM_BOOL;
        return LLVMBuildICmp(g->B, u ? preds[i].up : preds[i].sp, a, b, "");
    }
    return NULL;
}

/* ------------------------------------------------------------------ reductions */

/* The integer type as wide as float dtype t. */
static LLVMTypeRef
key_type(cg_t *g, em_dtype_t t)
{
    return LLVMIntTypeInContext(g->C, t == EM_FLOAT64 ? 64 : 32);
}

/* bits -> key (and key -> bits: the map is its own inverse): the integer whose signed
 * order is the floats' order, -0.0 just below +0.0 (a negative float's magnitude bits
 * are flipped). */
static LLVMValueRef
float_key(cg_t *g, LLVMValueRef bits)
{
    LLVMTypeRef it = LLVMTypeOf(bits);
    unsigned w = LLVMGetIntTypeWidth(it);
    LLVMValueRef sign = LLVMBuildAShr(g->B, bits, LLVMConstInt(it, w - 1, 0), "");
    LLVMValueRef mag = LLVMBuildLShr(g->B, sign, LLVMConstInt(it, 1, 0), "");
    return LLVMBuildXor(g->B, bits, mag, "");
}

static LLVMValueRef
identity(cg_t *g, const char *op, em_dtype_t t)
{
    LLVMTypeRef ty = reg_type(g, t);
    bool f = em_is_float(t);
    if (strcmp(op, "sum") == 0)
        return f ? LLVMConstReal(ty, 0.0) : LLVMConstInt(ty, 0, 0);
    if (strcmp(op, "prod") == 0)
        return f ? LLVMConstReal(ty, 1.0) : LLVMConstInt(ty, 1, 0);
    if (strcmp(op, "max") == 0)
        return f ? LLVMConstReal(ty, -INFINITY)
                 : LLVMConstInt(ty, t == EM_UINT8 || t == EM_BOOL ? 0 : (1ULL << (LLVMGetIntTypeWidth(ty) - 1)), 0);
    if (strcmp(op, "min") == 0)
        return f ? LLVMConstReal(ty, INFINITY)
                 : LLVMConstInt(ty, t == EM_UINT8 || t == EM_BOOL ? ~0ULL
                                                                   : ~(1ULL << (LLVMGetIntTypeWidth(ty) - 1)), 0);
    return NULL;
}

static LLVMValueRef
combine(cg_t *g, const char *op, em_dtype_t t, LLVMValueRef acc, LLVMValueRef v)
{
    if (strcmp(op, "sum") == 0)
        return binary(g, "add", t, acc, v);      /* bools: or */
    if (strcmp(op, "prod") == 0)
        return binary(g, "mul", t, acc, v);
    if (strcmp(op, "max") == 0 || strcmp(op, "min") == 0) {
        if (em_is_float(t))   /* the new value first: a NaN anywhere sticks */
            return fmax_nan(g, v, acc, op[1] == 'a');
        return binary(g, op, t, acc, v);
    }
    PyErr_Format(PyExc_NotImplementedError, "ember JIT: reduction %s", op);
    return NULL;
}

/* The dtype a reduce instruction accumulates in: its destination's. */
static em_dtype_t
reduce_dtype(cg_t *g, PyObject *ins)
{
    long param;
    if (int_item(ins, 1, &param) < 0 || param < 0 || param >= g->nparams)
        return EM_UNDEFINED;
    return g->ptype[param];
}

static int
init_accumulators(cg_t *g)
{
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(g->instrs); k++) {
        PyObject *ins = PyTuple_GET_ITEM(g->instrs, k);
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(ins, 0), "reduce") != 0)
            continue;
        em_dtype_t t = reduce_dtype(g, ins);
        const char *op = PyUnicode_AsUTF8(PyTuple_GET_ITEM(ins, 2));
        if (t == EM_UNDEFINED || op == NULL)
            return -1;
        LLVMValueRef id = identity(g, op, t);
        if (id == NULL) {
            PyErr_Format(PyExc_NotImplementedError, "ember JIT: reduction %s", op);
            return -1;
        }
        if (g->nan_acc[k] != NULL) {
            id = float_key(g, LLVMConstBitCast(id, key_type(g, t)));
            LLVMBuildStore(g->B, LLVMConstInt(LLVMInt8TypeInContext(g->C), 0, 0),
                           g->nan_acc[k]);
        }
        LLVMBuildStore(g->B, id, g->acc[k]);
    }
    return 0;
}

static int
store_accumulators(cg_t *g)
{
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(g->instrs); k++) {
        PyObject *ins = PyTuple_GET_ITEM(g->instrs, k);
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(ins, 0), "reduce") != 0)
            continue;
        long param;
        if (int_item(ins, 1, &param) < 0)
            return -1;
        em_dtype_t t = g->ptype[param];
        LLVMValueRef v;
        if (g->nan_acc[k] == NULL)
            v = LLVMBuildLoad2(g->B, reg_type(g, t), g->acc[k], "");
        else {                   /* the key back to a float, NaN if one was seen */
            v = LLVMBuildLoad2(g->B, key_type(g, t), g->acc[k], "");
            v = LLVMBuildBitCast(g->B, float_key(g, v), reg_type(g, t), "");
            LLVMTypeRef i8 = LLVMInt8TypeInContext(g->C);
            LLVMValueRef seen = LLVMBuildLoad2(g->B, i8, g->nan_acc[k], "");
            v = LLVMBuildSelect(g->B, LLVMBuildICmp(g->B, LLVMIntNE, seen,
                                                    LLVMConstInt(i8, 0, 0), ""),
                                LLVMConstReal(reg_type(g, t), NAN), v, "");
        }
        LLVMValueRef addr = address(g, param, PyTuple_GET_ITEM(ins, 3), PyTuple_GET_ITEM(ins, 4));
        if (addr == NULL)
            return -1;
        if (t == EM_BOOL)
            v = LLVMBuildZExt(g->B, v, mem_type(g, t), "");
        LLVMSetAlignment(LLVMBuildStore(g->B, v, addr), (unsigned)em_dtypes[t]->itemsize);
    }
    return 0;
}

/* ------------------------------------------------------------------ the body */

static int
emit_body(cg_t *g)
{
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(g->instrs); k++) {
        PyObject *ins = PyTuple_GET_ITEM(g->instrs, k);
        if (!PyTuple_Check(ins) || PyTuple_GET_SIZE(ins) < 2) {
            PyErr_SetString(PyExc_ValueError, "ember JIT: malformed instruction");
            return -1;
        }
        const char *op = PyUnicode_AsUTF8(PyTuple_GET_ITEM(ins, 0));
        if (op == NULL)
            return -1;
        Py_ssize_t n = PyTuple_GET_SIZE(ins);
        long dst = -1, a0 = 0, a1 = 0, a2 = 0;
        bool red = strcmp(op, "reduce") == 0, acc = strcmp(op, "accumulate") == 0;
        if (red || acc || strcmp(op, "store") == 0) {
            /* store: (op, param, coeffs, offset, src); reduce and accumulate:
             * (op, param, rop, coeffs, offset, src) */
            long param, src;
            int at = red || acc ? 3 : 2;
            if (n != at + 3 || int_item(ins, 1, &param) < 0 || int_item(ins, at + 2, &src) < 0)
                return -1;
            if (param < 0 || param >= g->nparams) {
                PyErr_Format(PyExc_ValueError, "ember JIT: bad parameter %ld", param);
                return -1;
            }
            em_dtype_t t = g->ptype[param];
            LLVMValueRef v = get_operand(g, src, t, op);
            if (v == NULL)
                return -1;
            const char *rop = at == 3 ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(ins, 2)) : "";
            if (rop == NULL)
                return -1;
            if (red && g->nan_acc[k] != NULL) {
                LLVMTypeRef i8 = LLVMInt8TypeInContext(g->C);
                LLVMValueRef seen = LLVMBuildLoad2(g->B, i8, g->nan_acc[k], "");
                LLVMValueRef isnan = LLVMBuildZExt(
                    g->B, LLVMBuildFCmp(g->B, LLVMRealUNO, v, v, ""), i8, "");
                LLVMBuildStore(g->B, LLVMBuildOr(g->B, seen, isnan, ""), g->nan_acc[k]);
                LLVMValueRef key = float_key(g, LLVMBuildBitCast(g->B, v, key_type(g, t), ""));
                LLVMValueRef cur = LLVMBuildLoad2(g->B, key_type(g, t), g->acc[k], "");
                LLVMValueRef gt = LLVMBuildICmp(g->B, rop[1] == 'a' ? LLVMIntSGT : LLVMIntSLT,
                                                key, cur, "");
                LLVMBuildStore(g->B, LLVMBuildSelect(g->B, gt, key, cur, ""), g->acc[k]);
                continue;
            }
            if (red) {
                LLVMValueRef cur = LLVMBuildLoad2(g->B, reg_type(g, t), g->acc[k], "");
                LLVMValueRef nv = combine(g, rop, t, cur, v);
                if (nv == NULL)
                    return -1;
                LLVMBuildStore(g->B, nv, g->acc[k]);
                continue;
            }
            if (acc && t == EM_BOOL) {
                PyErr_SetString(PyExc_ValueError, "ember JIT: accumulate into a bool buffer");
                return -1;
            }
            LLVMValueRef addr = address(g, param, PyTuple_GET_ITEM(ins, at),
                                        PyTuple_GET_ITEM(ins, at + 1));
            if (addr == NULL)
                return -1;
            unsigned align = (unsigned)em_dtypes[t]->itemsize;
            if (acc) {            /* buffer[index] = rop(buffer[index], v) */
                LLVMValueRef cur = LLVMBuildLoad2(g->B, mem_type(g, t), addr, "");
                LLVMSetAlignment(cur, align);
                v = combine(g, rop, t, cur, v);
                if (v == NULL)
                    return -1;
            }
            if (t == EM_BOOL)
                v = LLVMBuildZExt(g->B, v, mem_type(g, t), "");
            LLVMSetAlignment(LLVMBuildStore(g->B, v, addr), align);
            continue;
        }
        if (int_item(ins, 1, &dst) < 0)
            return -1;
        if (strcmp(op, "load") == 0) {
            long param;
            if (n != 5 || int_item(ins, 2, &param) < 0)
                return -1;
            LLVMValueRef addr = address(g, param, PyTuple_GET_ITEM(ins, 3), PyTuple_GET_ITEM(ins, 4));
            if (addr == NULL)
                return -1;
            em_dtype_t t = g->ptype[param];
            LLVMValueRef v = LLVMBuildLoad2(g->B, mem_type(g, t), addr, "");
            LLVMSetAlignment(v, (unsigned)em_dtypes[t]->itemsize);
            if (t == EM_BOOL)
                v = LLVMBuildICmp(g->B, LLVMIntNE, v, LLVMConstInt(mem_type(g, t), 0, 0), "");
            if (set_reg(g, dst, v, t) < 0)
                return -1;
            continue;
        }
        long dt_code;
        if (int_item(ins, 2, &dt_code) < 0)
            return -1;
        em_dtype_t t = (em_dtype_t)dt_code;
        if (check_dtype(t) < 0)
            return -1;
        LLVMTypeRef ty = reg_type(g, t);
        LLVMValueRef v = NULL;
        if (strcmp(op, "const") == 0) {
            PyObject *val = PyTuple_GET_ITEM(ins, 3);
            if (em_is_float(t))
                v = LLVMConstReal(ty, PyFloat_AsDouble(val));
            else
                v = LLVMConstInt(ty, (unsigned long long)PyLong_AsLongLong(val), 1);
            if (PyErr_Occurred())
                return -1;
        }
        else if (strcmp(op, "iota") == 0) {
            if (int_item(ins, 3, &a0) < 0 || a0 < 0 || a0 >= g->ndim)
                return -1;
            v = convert(g, g->iv[a0], EM_INT64, t);
        }
        else if (strcmp(op, "cast") == 0) {
            if (int_item(ins, 3, &a0) < 0 || get_reg(g, a0) == NULL)
                return -1;
            v = convert(g, g->reg[a0], g->rtype[a0], t);
        }
        else if (strcmp(op, "select") == 0) {
            if (n != 6 || int_item(ins, 3, &a0) < 0 || int_item(ins, 4, &a1) < 0 ||
                int_item(ins, 5, &a2) < 0)
                return -1;
            LLVMValueRef c = get_operand(g, a0, EM_BOOL, op);
            LLVMValueRef x = c ? get_operand(g, a1, t, op) : NULL;
            LLVMValueRef y = x ? get_operand(g, a2, t, op) : NULL;
            if (y == NULL)
                return -1;
            v = LLVMBuildSelect(g->B, c, x, y, "");
        }
        else if (n == 4) {
            if (int_item(ins, 3, &a0) < 0)
                return -1;
            LLVMValueRef x = get_operand(g, a0, t, op);
            v = x ? unary(g, op, t, x) : NULL;
            if (v == NULL)
                return -1;
        }
        else if (n == 5) {
            if (int_item(ins, 3, &a0) < 0 || int_item(ins, 4, &a1) < 0)
                return -1;
            LLVMValueRef x = get_operand(g, a0, t, op);
            LLVMValueRef y = x ? get_operand(g, a1, t, op) : NULL;
            if (y == NULL)
                return -1;
            v = compare(g, op, t, x, y);
            if (v != NULL) {
                if (set_reg(g, dst, v, EM_BOOL) < 0)
                    return -1;
                continue;
            }
            v = binary(g, op, t, x, y);
            if (v == NULL)
                return -1;
        }
        else {
            PyErr_Format(PyExc_ValueError, "ember JIT: unknown instruction %s", op);
            return -1;
        }
        if (set_reg(g, dst, v, t) < 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ loops */

static void
mark_vectorize(cg_t *g, LLVMValueRef latch_br)
{
    LLVMMetadataRef tmp = LLVMTemporaryMDNode(g->C, NULL, 0);
    LLVMMetadataRef kv[2] = {
        LLVMMDStringInContext2(g->C, "llvm.loop.vectorize.enable", 26),
        LLVMValueAsMetadata(LLVMConstInt(LLVMInt1TypeInContext(g->C), 1, 0)),
    };
    LLVMMetadataRef prop = LLVMMDNodeInContext2(g->C, kv, 2);
    LLVMMetadataRef ops[2] = {tmp, prop};
    LLVMMetadataRef id = LLVMMDNodeInContext2(g->C, ops, 2);
    LLVMMetadataReplaceAllUsesWith(tmp, id);
    LLVMSetMetadata(latch_br, LLVMGetMDKindIDInContext(g->C, "llvm.loop", 9),
                    LLVMMetadataAsValue(g->C, id));
}

static int
emit_nest(cg_t *g, int d)
{
    if (d == g->ndim)
        return emit_body(g);
    bool first_reduced = g->nreduce > 0 && d == g->ndim - g->nreduce;
    if (first_reduced && init_accumulators(g) < 0)
        return -1;
    if (g->sizes[d] > 0) {
        bool ranged = d == 0 && g->split;
        LLVMValueRef lo = ranged ? g->start : LLVMConstInt(g->i64, 0, 0);
        LLVMValueRef hi = ranged ? g->end
                                 : LLVMConstInt(g->i64, (unsigned long long)g->sizes[d], 0);
        LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->B);
        LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(g->C, g->fn, "loop");
        LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->C, g->fn, "done");
        if (ranged)
            LLVMBuildCondBr(g->B, LLVMBuildICmp(g->B, LLVMIntSLT, lo, hi, ""), head, exit);
        else
            LLVMBuildBr(g->B, head);
        LLVMPositionBuilderAtEnd(g->B, head);
        LLVMValueRef phi = LLVMBuildPhi(g->B, g->i64, "i");
        g->iv[d] = phi;
        if (emit_nest(g, d + 1) < 0)
            return -1;
        LLVMValueRef next = LLVMBuildAdd(g->B, phi, LLVMConstInt(g->i64, 1, 0), "");
        LLVMValueRef more = LLVMBuildICmp(g->B, LLVMIntSLT, next, hi, "");
        LLVMBasicBlockRef latch = LLVMGetInsertBlock(g->B);
        LLVMValueRef br = LLVMBuildCondBr(g->B, more, head, exit);
        if (d == g->ndim - 1 && g->float_sum)
            mark_vectorize(g, br);
        LLVMAddIncoming(phi, &lo, &pre, 1);
        LLVMAddIncoming(phi, &next, &latch, 1);
        LLVMPositionBuilderAtEnd(g->B, exit);
    }
    if (first_reduced && store_accumulators(g) < 0)
        return -1;
    return 0;
}

static bool
nonreduced_empty(cg_t *g)
{
    for (int d = 0; d < g->ndim - g->nreduce; d++)
        if (g->sizes[d] == 0)
            return true;
    return false;
}

int
em_codegen_kernel(LLVMModuleRef M, PyObject *spec, const char *name)
{
    cg_t g = {0};
    PyObject *sizes, *params;
    int status = -1;
    if (!PyTuple_Check(spec) || !PyArg_ParseTuple(spec, "O!iO!O!", &PyTuple_Type, &sizes,
                                                  &g.nreduce, &PyTuple_Type, &params,
                                                  &PyTuple_Type, &g.instrs)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "ember JIT: a kernel spec is (sizes, nreduce, "
                                             "params, instrs)");
        return -1;
    }
    g.M = M;
    g.C = LLVMGetModuleContext(M);
    g.i64 = LLVMInt64TypeInContext(g.C);
    g.ndim = (int)PyTuple_GET_SIZE(sizes);
    if (g.ndim > EM_MAX_DIMS || g.nreduce < 0 || g.nreduce > g.ndim) {
        PyErr_SetString(PyExc_ValueError, "ember JIT: bad domain");
        return -1;
    }
    for (int d = 0; d < g.ndim; d++) {
        long s;
        if (int_item(sizes, d, &s) < 0)
            return -1;
        g.sizes[d] = s;
    }
    g.nparams = (int)PyTuple_GET_SIZE(params);
    Py_ssize_t ninstr = PyTuple_GET_SIZE(g.instrs);
    g.nregs = (int)ninstr + 1;
    g.ptr = PyMem_Calloc(g.nparams + 1, sizeof(LLVMValueRef));
    g.ptype = PyMem_Calloc(g.nparams + 1, sizeof(em_dtype_t));
    g.reg = PyMem_Calloc(g.nregs, sizeof(LLVMValueRef));
    g.rtype = PyMem_Calloc(g.nregs, sizeof(em_dtype_t));
    g.acc = PyMem_Calloc(ninstr + 1, sizeof(LLVMValueRef));
    g.nan_acc = PyMem_Calloc(ninstr + 1, sizeof(LLVMValueRef));
    if (!g.ptr || !g.ptype || !g.reg || !g.rtype || !g.acc || !g.nan_acc) {
        PyErr_NoMemory();
        goto done;
    }
    for (int i = 0; i < g.nparams; i++) {
        long t;
        if (int_item(params, i, &t) < 0 || check_dtype((em_dtype_t)t) < 0)
            goto done;
        g.ptype[i] = (em_dtype_t)t;
    }
    /* the body takes one noalias pointer per buffer (outputs are fresh allocations;
     * inputs are only read), so the vectoriser needs no overlap checks; the entry
     * point `void name(void **args)` unpacks args and calls it (inlined at O2, which
     * turns noalias into scoped alias metadata) */
    LLVMTypeRef i8p = LLVMPointerType(LLVMInt8TypeInContext(g.C), 0);
    g.split = g.nreduce < g.ndim;
    LLVMTypeRef *ptys = PyMem_Calloc(g.nparams + 3, sizeof(LLVMTypeRef));
    if (ptys == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int i = 0; i < g.nparams; i++)
        ptys[i] = LLVMPointerType(mem_type(&g, g.ptype[i]), 0);
    ptys[g.nparams] = g.i64;
    ptys[g.nparams + 1] = g.i64;
    char body_name[160];
    snprintf(body_name, sizeof body_name, "%s.body", name);
    g.fn = LLVMAddFunction(M, body_name, LLVMFunctionType(LLVMVoidTypeInContext(g.C), ptys,
                                                          (unsigned)g.nparams + 2, 0));
    LLVMSetLinkage(g.fn, LLVMInternalLinkage);
    unsigned k_nounwind = LLVMGetEnumAttributeKindForName("nounwind", 8);
    unsigned k_inline = LLVMGetEnumAttributeKindForName("alwaysinline", 12);
    unsigned k_noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
    unsigned k_nocapture = LLVMGetEnumAttributeKindForName("nocapture", 9);
    LLVMAddAttributeAtIndex(g.fn, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(g.C, k_nounwind, 0));
    LLVMAddAttributeAtIndex(g.fn, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(g.C, k_inline, 0));
    for (int i = 0; i < g.nparams; i++) {
        LLVMAddAttributeAtIndex(g.fn, (unsigned)i + 1, LLVMCreateEnumAttribute(g.C, k_noalias, 0));
        LLVMAddAttributeAtIndex(g.fn, (unsigned)i + 1,
                                LLVMCreateEnumAttribute(g.C, k_nocapture, 0));
        g.ptr[i] = LLVMGetParam(g.fn, (unsigned)i);
    }
    g.start = LLVMGetParam(g.fn, (unsigned)g.nparams);
    g.end = LLVMGetParam(g.fn, (unsigned)g.nparams + 1);
    g.B = LLVMCreateBuilderInContext(g.C);
    /* the entry point */
    LLVMTypeRef outer_params[3] = {LLVMPointerType(i8p, 0), g.i64, g.i64};
    LLVMValueRef outer = LLVMAddFunction(M, name, LLVMFunctionType(LLVMVoidTypeInContext(g.C),
                                                                   outer_params, 3, 0));
    LLVMAddAttributeAtIndex(outer, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(g.C, k_nounwind, 0));
    LLVMPositionBuilderAtEnd(g.B, LLVMAppendBasicBlockInContext(g.C, outer, "entry"));
    LLVMValueRef *cargs = PyMem_Calloc(g.nparams + 3, sizeof(LLVMValueRef));
    if (cargs == NULL) {
        PyMem_Free(ptys);
        PyErr_NoMemory();
        goto done;
    }
    for (int i = 0; i < g.nparams; i++) {
        LLVMValueRef idx = LLVMConstInt(g.i64, (unsigned long long)i, 0);
        LLVMValueRef slot = LLVMBuildInBoundsGEP2(g.B, i8p, LLVMGetParam(outer, 0), &idx, 1, "");
        cargs[i] = LLVMBuildBitCast(g.B, LLVMBuildLoad2(g.B, i8p, slot, ""), ptys[i], "");
    }
    cargs[g.nparams] = LLVMGetParam(outer, 1);
    cargs[g.nparams + 1] = LLVMGetParam(outer, 2);
    LLVMBuildCall2(g.B, LLVMGlobalGetValueType(g.fn), g.fn, cargs, (unsigned)g.nparams + 2, "");
    LLVMBuildRetVoid(g.B);
    PyMem_Free(cargs);
    PyMem_Free(ptys);
    LLVMPositionBuilderAtEnd(g.B, LLVMAppendBasicBlockInContext(g.C, g.fn, "entry"));
    for (Py_ssize_t k = 0; k < ninstr; k++) {
        PyObject *ins = PyTuple_GET_ITEM(g.instrs, k);
        if (PyTuple_Check(ins) && PyTuple_GET_SIZE(ins) == 6 &&
            PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(ins, 0), "reduce") == 0) {
            em_dtype_t t = reduce_dtype(&g, ins);
            if (t == EM_UNDEFINED) {
                PyErr_SetString(PyExc_ValueError, "ember JIT: bad reduce instruction");
                goto done;
            }
            const char *rop = PyUnicode_AsUTF8(PyTuple_GET_ITEM(ins, 2));
            if (rop == NULL)
                goto done;
            if (em_is_float(t) && (strcmp(rop, "max") == 0 || strcmp(rop, "min") == 0)) {
                g.acc[k] = LLVMBuildAlloca(g.B, key_type(&g, t), "acc_key");
                g.nan_acc[k] = LLVMBuildAlloca(g.B, LLVMInt8TypeInContext(g.C), "seen_nan");
            }
            else
                g.acc[k] = LLVMBuildAlloca(g.B, reg_type(&g, t), "acc");
            if (em_is_float(t) && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(ins, 2), "sum") == 0)
                g.float_sum = true;
        }
    }
    if (!nonreduced_empty(&g) && emit_nest(&g, 0) < 0)
        goto done;
    LLVMBuildRetVoid(g.B);
    status = 0;
done:
    if (g.B)
        LLVMDisposeBuilder(g.B);
    PyMem_Free(g.ptr);
    PyMem_Free(g.ptype);
    PyMem_Free(g.reg);
    PyMem_Free(g.rtype);
    PyMem_Free(g.acc);
    PyMem_Free(g.nan_acc);
    return status;
}
