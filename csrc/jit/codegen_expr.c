/* codegen_expr.c: the value of one loop-IR instruction, through the LLVM-C builder.
 *
 * Instructions arrive decoded and checked (codegen_loops.c): operands are registers of
 * the dtype the instruction computes in (cast is the only conversion) and that dtype
 * is in the instruction's domain (loop_ir.h), so every case below is defined.
 * Bools are i1 in registers; float16 and bfloat16 are float32 (codegen_half.c).
 * add of bools is `or` (PyTorch's True + True is True);
 * float max/min propagate NaN; exp, expm1, log, log1p, tanh, sin, cos, erf, erfc and pow of
 * float32 are the IR functions of vecmath.h (vectorisable); float64 and the other
 * functions call libm.
 */
#include "jit/codegen.h"
#include "jit/vecmath.h"

#include <math.h>

/* ------------------------------------------------------------------ types */

LLVMTypeRef
em_cg_mem_type(em_cg *g, em_dtype_t t)
{
    switch (t) {
    case EM_BOOL: case EM_UINT8: case EM_INT8: return LLVMInt8TypeInContext(g->C);
    case EM_INT16: case EM_FLOAT16: case EM_BFLOAT16: return LLVMInt16TypeInContext(g->C);
    case EM_INT32: return LLVMInt32TypeInContext(g->C);
    case EM_INT64: return LLVMInt64TypeInContext(g->C);
    case EM_FLOAT32: return LLVMFloatTypeInContext(g->C);
    case EM_FLOAT64: return LLVMDoubleTypeInContext(g->C);
    default: return NULL;
    }
}

LLVMTypeRef
em_cg_reg_type(em_cg *g, em_dtype_t t)
{
    if (em_is_half(t))      /* widened (codegen_half.c) */
        return LLVMFloatTypeInContext(g->C);
    return t == EM_BOOL ? LLVMInt1TypeInContext(g->C) : em_cg_mem_type(g, t);
}

static bool
is_unsigned(em_dtype_t t)
{
    return t == EM_UINT8 || t == EM_BOOL;
}

/* ------------------------------------------------------------------ helpers */

static LLVMValueRef
intrinsic(em_cg *g, const char *name, LLVMTypeRef type, LLVMValueRef *args, int nargs)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(g->M, id, &type, 1);
    LLVMTypeRef ft = LLVMIntrinsicGetType(g->C, id, &type, 1);
    return LLVMBuildCall2(g->B, ft, f, args, nargs, "");
}

static LLVMValueRef
call_fn(em_cg *g, LLVMValueRef f, LLVMValueRef *args, int nargs)
{
    return LLVMBuildCall2(g->B, LLVMGlobalGetValueType(f), f, args, nargs, "");
}

/* libm's function `name` (float64) or `name`f (float32) of one argument. */
static LLVMValueRef
libm1(em_cg *g, const char *name, em_dtype_t t, LLVMValueRef a)
{
    char fname[32];
    snprintf(fname, sizeof fname, "%s%s", name, t == EM_FLOAT32 ? "f" : "");
    return call_fn(g, em_ir_libm(g->M, fname, em_cg_reg_type(g, t), 1), &a, 1);
}

/* ------------------------------------------------------------------ conversions */

/* A float to integer dtype `to` as eager (NumPy, and PyTorch) converts on x86: truncated
 * to int32 (int64 for int64), where a value out of that range or NaN gives the most
 * negative one (cvttss2si's "integer indefinite"), then narrowed by dropping high bits
 * (200.7 to uint8 is 200, -2.5 is 254). A bare fptosi into a narrow type would be
 * poison outside its range. */
static LLVMValueRef
float_to_int(em_cg *g, LLVMValueRef v, em_dtype_t to)
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
    LLVMTypeRef tt = em_cg_reg_type(g, to);
    return tt == it ? r : LLVMBuildTrunc(g->B, r, tt, "");
}

static LLVMValueRef
convert(em_cg *g, LLVMValueRef v, em_dtype_t from, em_dtype_t to)
{
    if (from == to)
        return v;
    if (em_is_half(from))   /* a float32 in its register */
        from = EM_FLOAT32;
    if (em_is_half(to)) {   /* a float32 rounded to `to` */
        g->last_bits = em_cg_narrow(g, to, convert(g, v, from, EM_FLOAT32));
        return em_cg_widen(g, to, g->last_bits);
    }
    LLVMTypeRef tt = em_cg_reg_type(g, to);
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
    if (tf)
        return is_unsigned(from) ? LLVMBuildUIToFP(g->B, v, tt, "")
                                 : LLVMBuildSIToFP(g->B, v, tt, "");
    return LLVMBuildIntCast2(g->B, v, tt, !is_unsigned(from), "");
}

/* ------------------------------------------------------------------ arithmetic */

static LLVMValueRef
fmax_nan(em_cg *g, LLVMValueRef a, LLVMValueRef b, bool is_max)
{
    LLVMValueRef gt = LLVMBuildFCmp(g->B, is_max ? LLVMRealOGT : LLVMRealOLT, a, b, "");
    LLVMValueRef r = LLVMBuildSelect(g->B, gt, a, b, "");
    LLVMValueRef a_nan = LLVMBuildFCmp(g->B, LLVMRealUNO, a, a, "");
    return LLVMBuildSelect(g->B, a_nan, a, r, "");   /* NaN propagates, as in PyTorch */
}

static LLVMValueRef
int_extreme(em_cg *g, LLVMValueRef a, LLVMValueRef b, bool is_max, em_dtype_t t)
{
    bool u = is_unsigned(t);
    LLVMIntPredicate p = is_max ? (u ? LLVMIntUGT : LLVMIntSGT) : (u ? LLVMIntULT : LLVMIntSLT);
    return LLVMBuildSelect(g->B, LLVMBuildICmp(g->B, p, a, b, ""), a, b, "");
}

static LLVMValueRef
binary(em_cg *g, em_ir_t op, em_dtype_t t, LLVMValueRef a, LLVMValueRef b)
{
    bool f = em_is_float(t);
    switch (op) {
    case EM_IR_ADD:
        if (t == EM_BOOL)
            return LLVMBuildOr(g->B, a, b, "");          /* True + True is True */
        return f ? LLVMBuildFAdd(g->B, a, b, "") : LLVMBuildAdd(g->B, a, b, "");
    case EM_IR_SUB:
        return f ? LLVMBuildFSub(g->B, a, b, "") : LLVMBuildSub(g->B, a, b, "");
    case EM_IR_MUL:
        return f ? LLVMBuildFMul(g->B, a, b, "") : LLVMBuildMul(g->B, a, b, "");
    case EM_IR_DIV:
        return LLVMBuildFDiv(g->B, a, b, "");
    case EM_IR_MAX:
    case EM_IR_MIN:
        if (f)
            return fmax_nan(g, a, b, op == EM_IR_MAX);
        return int_extreme(g, a, b, op == EM_IR_MAX, t);
    case EM_IR_POW: {
        LLVMValueRef args[2] = {a, b};
        if (t == EM_FLOAT32)
            return call_fn(g, em_ir_powf(g->M), args, 2);
        return call_fn(g, em_ir_libm(g->M, t == EM_FLOAT32 ? "powf" : "pow",
                                     em_cg_reg_type(g, t), 2), args, 2);
    }
    case EM_IR_AND:
        return LLVMBuildAnd(g->B, a, b, "");
    case EM_IR_OR:
        return LLVMBuildOr(g->B, a, b, "");
    case EM_IR_XOR:
        return LLVMBuildXor(g->B, a, b, "");
    default:
        break;
    }
    PyErr_Format(PyExc_SystemError, "ember JIT: %s is not a binary op", em_ir_info[op].name);
    return NULL;
}

/* float32: the IR function of vecmath.h; float64: libm's */
static LLVMValueRef
transcendental(em_cg *g, em_ir_t op, em_dtype_t t, LLVMValueRef a)
{
    static const struct {
        em_ir_t op;
        const char *libm;
        LLVMValueRef (*ir)(LLVMModuleRef);
    } fns[] = {
        {EM_IR_EXP, "exp", em_ir_expf},       {EM_IR_ERF, "erf", em_ir_erff},
        {EM_IR_LOG, "log", em_ir_logf},       {EM_IR_TANH, "tanh", em_ir_tanhf},
        {EM_IR_SIN, "sin", em_ir_sinf},       {EM_IR_COS, "cos", em_ir_cosf},
        {EM_IR_EXPM1, "expm1", em_ir_expm1f}, {EM_IR_LOG1P, "log1p", em_ir_log1pf},
        {EM_IR_ERFC, "erfc", em_ir_erfcf},
    };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        if (fns[i].op != op)
            continue;
        if (t == EM_FLOAT32 && g->trig_small && (op == EM_IR_SIN || op == EM_IR_COS)) {
            LLVMValueRef big = LLVMBuildFCmp(g->B, LLVMRealOGE,
                                             intrinsic(g, "llvm.fabs", LLVMTypeOf(a), &a, 1),
                                             LLVMConstReal(LLVMTypeOf(a), 0x1p25), "");
            g->trig_big = LLVMBuildOr(
                g->B, g->trig_big, LLVMBuildZExt(g->B, big, LLVMTypeOf(g->trig_big), ""), "");
            return call_fn(g, (op == EM_IR_SIN ? em_ir_sinf_small : em_ir_cosf_small)(g->M),
                           &a, 1);
        }
        if (t == EM_FLOAT32)
            return call_fn(g, fns[i].ir(g->M), &a, 1);
        return libm1(g, fns[i].libm, t, a);
    }
    PyErr_Format(PyExc_SystemError, "ember JIT: %s is not transcendental", em_ir_info[op].name);
    return NULL;
}

static LLVMValueRef
unary(em_cg *g, em_ir_t op, em_dtype_t t, LLVMValueRef a)
{
    bool f = em_is_float(t);
    LLVMTypeRef ty = em_cg_reg_type(g, t);
    switch (op) {
    case EM_IR_NEG:
        return f ? LLVMBuildFNeg(g->B, a, "") : LLVMBuildNeg(g->B, a, "");
    case EM_IR_NOT:
        return LLVMBuildNot(g->B, a, "");
    case EM_IR_RECIPROCAL:
        return LLVMBuildFDiv(g->B, LLVMConstReal(ty, 1.0), a, "");
    case EM_IR_ABS:
        return intrinsic(g, "llvm.fabs", ty, &a, 1);
    case EM_IR_SQRT:
        return intrinsic(g, "llvm.sqrt", ty, &a, 1);
    case EM_IR_FLOOR:
        return intrinsic(g, "llvm.floor", ty, &a, 1);
    case EM_IR_TRUNC:
        return intrinsic(g, "llvm.trunc", ty, &a, 1);
    case EM_IR_EXP:
    case EM_IR_ERF:
    case EM_IR_LOG:
    case EM_IR_TANH:
    case EM_IR_SIN:
    case EM_IR_COS:
    case EM_IR_EXPM1:
    case EM_IR_LOG1P:
    case EM_IR_ERFC:
        return transcendental(g, op, t, a);
    default:
        break;
    }
    PyErr_Format(PyExc_SystemError, "ember JIT: %s is not a unary op", em_ir_info[op].name);
    return NULL;
}

static LLVMValueRef
compare(em_cg *g, em_ir_t op, em_dtype_t t, LLVMValueRef a, LLVMValueRef b)
{
    LLVMRealPredicate fp;
    LLVMIntPredicate sp, up;
    switch (op) {
    case EM_IR_LT: fp = LLVMRealOLT; sp = LLVMIntSLT; up = LLVMIntULT; break;
    case EM_IR_LE: fp = LLVMRealOLE; sp = LLVMIntSLE; up = LLVMIntULE; break;
    case EM_IR_GT: fp = LLVMRealOGT; sp = LLVMIntSGT; up = LLVMIntUGT; break;
    case EM_IR_GE: fp = LLVMRealOGE; sp = LLVMIntSGE; up = LLVMIntUGE; break;
    case EM_IR_EQ: fp = LLVMRealOEQ; sp = up = LLVMIntEQ; break;
    case EM_IR_NE: fp = LLVMRealUNE; sp = up = LLVMIntNE; break;
    default:
        PyErr_Format(PyExc_SystemError, "ember JIT: %s is not a comparison",
                     em_ir_info[op].name);
        return NULL;
    }
    if (em_is_float(t))
        return LLVMBuildFCmp(g->B, fp, a, b, "");
    return LLVMBuildICmp(g->B, is_unsigned(t) ? up : sp, a, b, "");
}

LLVMValueRef
em_cg_expr(em_cg *g, const em_instr *ins)
{
    em_dtype_t t = ins->dtype;
    LLVMTypeRef ty = em_cg_reg_type(g, t);
    LLVMValueRef *r = g->reg;
    const int *a = ins->args;
    switch (em_ir_info[ins->op].form) {
    case EM_FORM_CONST:
        if (ins->value_sym >= 0)
            return convert(g, g->symv[ins->value_sym], EM_INT64, t);
        if (em_is_float(t))
            return LLVMConstReal(ty, ins->fvalue);
        return LLVMConstInt(ty, (unsigned long long)ins->ivalue, 1);
    case EM_FORM_IOTA:
        return convert(g, g->iv[ins->dim], EM_INT64, t);
    case EM_FORM_UNARY:
        if (ins->op == EM_IR_CAST)
            return convert(g, r[a[0]], g->rtype[a[0]], t);
        return unary(g, ins->op, t, r[a[0]]);
    case EM_FORM_BINARY:
        return binary(g, ins->op, t, r[a[0]], r[a[1]]);
    case EM_FORM_COMPARE:
        return compare(g, ins->op, t, r[a[0]], r[a[1]]);
    case EM_FORM_SELECT:
        return LLVMBuildSelect(g->B, r[a[0]], r[a[1]], r[a[2]], "");
    case EM_FORM_RANDOM:
        return em_cg_random(g, ins->op, t, r[a[0]], r[a[1]], r[a[2]]);
    case EM_FORM_CALL: {
        LLVMValueRef args[2];
        for (int k = 0; k < ins->nargs && k < 2; k++)
            args[k] = r[a[k]];
        return call_fn(g, em_ir_libm(g->M, ins->fn, ty, ins->nargs), args, ins->nargs);
    }
    default:
        break;
    }
    PyErr_Format(PyExc_SystemError, "ember JIT: %s has no value", em_ir_info[ins->op].name);
    return NULL;
}

/* ------------------------------------------------------------------ reductions */

LLVMTypeRef
em_cg_key_type(em_cg *g, em_dtype_t t)
{
    return LLVMIntTypeInContext(g->C, t == EM_FLOAT64 ? 64 : 32);
}

/* bits -> key (and key -> bits: the map is its own inverse): the integer whose signed
 * order is the floats' order, -0.0 just below +0.0 (a negative float's magnitude bits
 * are flipped). */
LLVMValueRef
em_cg_float_key(em_cg *g, LLVMValueRef bits)
{
    LLVMTypeRef it = LLVMTypeOf(bits);
    unsigned w = LLVMGetIntTypeWidth(it);
    LLVMValueRef sign = LLVMBuildAShr(g->B, bits, LLVMConstInt(it, w - 1, 0), "");
    LLVMValueRef mag = LLVMBuildLShr(g->B, sign, LLVMConstInt(it, 1, 0), "");
    return LLVMBuildXor(g->B, bits, mag, "");
}

LLVMValueRef
em_cg_identity(em_cg *g, em_reduction_t r, em_dtype_t t)
{
    LLVMTypeRef ty = em_cg_reg_type(g, t);
    bool f = em_is_float(t);
    unsigned long long sign = f ? 0 : 1ULL << (LLVMGetIntTypeWidth(ty) - 1);
    switch (r) {
    case EM_REDUCE_SUM:
        return f ? LLVMConstReal(ty, 0.0) : LLVMConstInt(ty, 0, 0);
    case EM_REDUCE_PROD:
        return f ? LLVMConstReal(ty, 1.0) : LLVMConstInt(ty, 1, 0);
    case EM_REDUCE_MAX:
        return f ? LLVMConstReal(ty, -INFINITY)
                 : LLVMConstInt(ty, is_unsigned(t) ? 0 : sign, 0);
    case EM_REDUCE_MIN:
        return f ? LLVMConstReal(ty, INFINITY)
                 : LLVMConstInt(ty, is_unsigned(t) ? ~0ULL : ~sign, 0);
    default:
        break;
    }
    PyErr_Format(PyExc_SystemError, "ember JIT: reduction %d", (int)r);
    return NULL;
}

LLVMValueRef
em_cg_combine(em_cg *g, em_reduction_t r, em_dtype_t t, LLVMValueRef acc, LLVMValueRef v)
{
    switch (r) {
    case EM_REDUCE_SUM:
        return binary(g, EM_IR_ADD, t, acc, v);      /* bools: or */
    case EM_REDUCE_PROD:
        return binary(g, EM_IR_MUL, t, acc, v);
    case EM_REDUCE_MAX:
    case EM_REDUCE_MIN:
        if (em_is_float(t))   /* the new value first: a NaN anywhere sticks */
            return fmax_nan(g, v, acc, r == EM_REDUCE_MAX);
        return int_extreme(g, acc, v, r == EM_REDUCE_MAX, t);
    default:
        break;
    }
    PyErr_Format(PyExc_SystemError, "ember JIT: reduction %d", (int)r);
    return NULL;
}
