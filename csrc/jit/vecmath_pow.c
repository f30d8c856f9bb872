/* vecmath_pow.c: powf as IR (vecmath.h).
 *
 * |x|^y = 2^(y log2|x|), both steps in float64: log2|x| = e + log(m) / ln2 with
 * |x| = 2^e m, m in [sqrt(1/2), sqrt(2)), log(m) = 2 atanh(s), s = (m - 1) / (m + 1)
 * (|s| < 0.172), by its series 2 (s + s^3/3 + ... + s^17/17); 2^t = 2^n exp(f ln2) with
 * n = round(t), |f| <= 1/2, by the Taylor series of exp to degree 11. Relative error
 * about 2^-43, far below float32's; one rounding to float32 at the end (overflow and
 * gradual underflow included). The sign and the special cases are C99's (F.9.4.4):
 * pow(x, +-0) = 1 and pow(1, y) = 1 even for NaN; pow(-1, +-inf) = 1; a negative x
 * with an odd integer y gives a negative result, with a non-integer finite y NaN;
 * zeros and infinities follow from the float64 steps with the sign rule.
 */
#include "jit/vecmath.h"

#include <math.h>

/* log2(a) for a float64 a > 0, finite */
#define L(c) LLVMConstInt(v->i64, (unsigned long long)(c), 1)
#define D(c) LLVMConstReal(v->f64, (c))

static LLVMValueRef
log2_f64(em_vm *v, LLVMValueRef a)
{
    LLVMBuilderRef B = v->B;
    LLVMValueRef bits = LLVMBuildSub(B, LLVMBuildBitCast(B, a, v->i64, ""),
                                     L(0x3FE6A09E667F3BCDLL), "");   /* sqrt(1/2) */
    LLVMValueRef e = LLVMBuildAShr(B, bits, L(52), "");
    LLVMValueRef mb = LLVMBuildAdd(B, LLVMBuildAnd(B, bits, L(0xFFFFFFFFFFFFFLL), ""),
                                   L(0x3FE6A09E667F3BCDLL), "");
    LLVMValueRef m = LLVMBuildBitCast(B, mb, v->f64, "");
    LLVMValueRef s = LLVMBuildFDiv(B, LLVMBuildFSub(B, m, D(1.0), ""),
                                   LLVMBuildFAdd(B, m, D(1.0), ""), "");
    double c[9];
    for (int i = 0; i < 9; i++)       /* 2/ln2 * 1/(2i+1) */
        c[i] = 2.0 / 0.6931471805599453 / (2 * i + 1);
    LLVMValueRef lm = LLVMBuildFMul(B, s, em_vm_poly(v, c, 9, LLVMBuildFMul(B, s, s, "")),
                                    "");
    /* e fits in 32 bits: converting from i32 vectorises everywhere */
    LLVMValueRef ef = LLVMBuildSIToFP(B, LLVMBuildTrunc(B, e, v->i32, ""), v->f64, "");
    return LLVMBuildFAdd(B, ef, lm, "");
}

/* 2^t for a float64 t in [-300, 300] (vecmath.h) */
LLVMValueRef
em_vm_exp2_f64(em_vm *v, LLVMValueRef t, int degree)
{
    LLVMBuilderRef B = v->B;
    /* adding 1.5 * 2^52 rounds t to an integer n, left in the low bits */
    LLVMValueRef big = LLVMBuildFAdd(B, t, D(6755399441055744.0), "");
    LLVMValueRef n = LLVMBuildFSub(B, big, D(6755399441055744.0), "");
    LLVMValueRef g = LLVMBuildFMul(B, LLVMBuildFSub(B, t, n, ""), D(0.6931471805599453), "");
    double c[16], f = 1.0;
    if (degree > 15)
        degree = 15;
    for (int i = 0; i <= degree; i++) {
        c[i] = 1.0 / f;
        f *= i + 1;
    }
    LLVMValueRef p = em_vm_poly(v, c, degree + 1, g);
    LLVMValueRef scale = LLVMBuildShl(
        B, LLVMBuildAdd(B, LLVMBuildBitCast(B, big, v->i64, ""), L(1023), ""), L(52), "");
    return LLVMBuildFMul(B, p, LLVMBuildBitCast(B, scale, v->f64, ""), "");
}

LLVMValueRef
em_ir_powf(LLVMModuleRef M)
{
    em_vm vm, *v = &vm;
    if (em_vm_begin(v, M, "em_powf", 2))
        return v->fn;
    LLVMBuilderRef B = v->B;
    LLVMValueRef x = LLVMGetParam(v->fn, 0), y = LLVMGetParam(v->fn, 1);
#define F(c) LLVMConstReal(v->f32, (c))
#define AND(a, b) LLVMBuildAnd(B, (a), (b), "")
    LLVMValueRef ax = LLVMBuildFPExt(B, em_vm_fabs(v, x), v->f64, "");
    LLVMValueRef yd = LLVMBuildFPExt(B, y, v->f64, "");
    /* log2 of 0 and inf by selects (the bit manipulation sees a finite a > 0) */
    LLVMValueRef finite = AND(em_vm_fcmp(v, LLVMRealOGT, ax, 0.0),
                              em_vm_fcmp(v, LLVMRealOLT, ax, INFINITY));
    LLVMValueRef l = log2_f64(v, em_vm_select(v, finite, ax, D(1.0)));
    l = em_vm_select(v, em_vm_fcmp(v, LLVMRealOEQ, ax, 0.0), D(-INFINITY), l);
    l = em_vm_select(v, em_vm_fcmp(v, LLVMRealOEQ, ax, INFINITY), D(INFINITY), l);
    l = em_vm_select(v, em_vm_fcmp(v, LLVMRealUNO, ax, 0.0), ax, l);
    LLVMValueRef t = LLVMBuildFMul(B, yd, l, "");
    LLVMValueRef t_nan = em_vm_fcmp(v, LLVMRealUNO, t, 0.0);
    LLVMValueRef tc = em_vm_select(v, em_vm_fcmp(v, LLVMRealOLT, t, -300.0), D(-300.0), t);
    tc = em_vm_select(v, em_vm_fcmp(v, LLVMRealOGT, tc, 300.0), D(300.0), tc);
    tc = em_vm_select(v, t_nan, D(0.0), tc);
    LLVMValueRef r = LLVMBuildFPTrunc(B, em_vm_exp2_f64(v, tc, 11), v->f32, "");
    r = em_vm_select(v, t_nan, F(NAN), r);
    /* y an integer (inf counts: it only matters with the sign rule), odd below 2^24 */
    LLVMValueRef ay = em_vm_fabs(v, y);
    LLVMValueRef yint = LLVMBuildFCmp(B, LLVMRealOEQ, em_vm_floor(v, y), y, "");
    LLVMValueRef small = em_vm_fcmp(v, LLVMRealOLT, ay, 0x1p24);
    LLVMValueRef yi = LLVMBuildFPToSI(B, em_vm_select(v, small, y, F(0.0)), v->i32, "");
    LLVMValueRef odd = AND(AND(yint, small), LLVMBuildTrunc(B, yi, LLVMInt1TypeInContext(v->C),
                                                            ""));
    LLVMValueRef xneg = LLVMBuildICmp(B, LLVMIntSLT, LLVMBuildBitCast(B, x, v->i32, ""),
                                      LLVMConstInt(v->i32, 0, 0), "");
    r = em_vm_select(v, AND(xneg, odd), LLVMBuildFNeg(B, r, ""), r);
    LLVMValueRef neg_finite = AND(em_vm_fcmp(v, LLVMRealOLT, x, 0.0),
                                  em_vm_fcmp(v, LLVMRealOGT, x, -INFINITY));
    LLVMValueRef yfrac = LLVMBuildNot(B, yint, "");
    r = em_vm_select(v, AND(neg_finite, yfrac), F(NAN), r);
    LLVMValueRef one = LLVMBuildOr(B, em_vm_fcmp(v, LLVMRealOEQ, y, 0.0),
                                   em_vm_fcmp(v, LLVMRealOEQ, x, 1.0), "");
    one = LLVMBuildOr(B, one, AND(em_vm_fcmp(v, LLVMRealOEQ, x, -1.0),
                                  em_vm_fcmp(v, LLVMRealOEQ, ay, INFINITY)), "");
    r = em_vm_select(v, one, F(1.0), r);
#undef F
#undef AND
#undef D
#undef L
    return em_vm_end(v, r);
}
