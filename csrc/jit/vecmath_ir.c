/* vecmath_ir.c: elementary functions for JIT kernels: the building blocks of
 * vecmath.h, expf and erff (log, expm1, tanh, sin, cos and pow are in vecmath_*.c).
 *
 * expf and erff are emitted as IR (internal, always-inlined functions the loop
 * vectoriser can widen): expf is the same branch-free Cephes recipe as
 * csrc/kernels/vecmath.h (coefficients from the Cephes Math Library, S. L. Moshier,
 * expf.c), over the whole float range: 2^n is applied in two factors, so results
 * just below the overflow threshold stay finite and results below FLT_MIN underflow
 * gradually into subnormals, as libm's do; erff uses fits of our own
 * (tools/fit_erf.py). Other functions, and float64, call libm through absolute
 * symbols defined in the JIT.
 */
#include "jit/vecmath.h"

#include <math.h>

/* ------------------------------------------------------------------ building blocks */

int
em_vm_begin(em_vm *v, LLVMModuleRef M, const char *name, int nargs)
{
    v->M = M;
    v->C = LLVMGetModuleContext(M);
    v->f32 = LLVMFloatTypeInContext(v->C);
    v->f64 = LLVMDoubleTypeInContext(v->C);
    v->i32 = LLVMInt32TypeInContext(v->C);
    v->i64 = LLVMInt64TypeInContext(v->C);
    v->B = NULL;
    v->fn = LLVMGetNamedFunction(M, name);
    if (v->fn != NULL)
        return 1;
    LLVMTypeRef params[2] = {v->f32, v->f32};
    v->fn = LLVMAddFunction(M, name, LLVMFunctionType(v->f32, params, (unsigned)nargs, 0));
    LLVMSetLinkage(v->fn, LLVMInternalLinkage);
    const char *attrs[] = {"alwaysinline", "nounwind", "readnone", "willreturn"};
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++)
        LLVMAddAttributeAtIndex(v->fn, LLVMAttributeFunctionIndex,
                                LLVMCreateEnumAttribute(v->C, LLVMGetEnumAttributeKindForName(
                                                                  attrs[i], strlen(attrs[i])), 0));
    v->B = LLVMCreateBuilderInContext(v->C);
    LLVMPositionBuilderAtEnd(v->B, LLVMAppendBasicBlockInContext(v->C, v->fn, "entry"));
    return 0;
}

LLVMValueRef
em_vm_end(em_vm *v, LLVMValueRef r)
{
    LLVMBuildRet(v->B, r);
    LLVMDisposeBuilder(v->B);
    v->B = NULL;
    return v->fn;
}

LLVMValueRef
em_vm_intrinsic(em_vm *v, const char *name, LLVMValueRef *args, int n)
{
    LLVMTypeRef t = LLVMTypeOf(args[0]);
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(v->M, id, &t, 1);
    return LLVMBuildCall2(v->B, LLVMIntrinsicGetType(v->C, id, &t, 1), f, args,
                          (unsigned)n, "");
}

LLVMValueRef
em_vm_call(em_vm *v, LLVMValueRef fn, LLVMValueRef *args, int n)
{
    return LLVMBuildCall2(v->B, LLVMGlobalGetValueType(fn), fn, args, (unsigned)n, "");
}

LLVMValueRef
em_vm_fma(em_vm *v, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c)
{
    /* fused where the target has FMA; llvm.fma would become a libm call without */
    LLVMValueRef args[3] = {a, b, c};
    return em_vm_intrinsic(v, "llvm.fmuladd", args, 3);
}

LLVMValueRef
em_vm_const(LLVMValueRef like, double value)
{
    return LLVMConstReal(LLVMTypeOf(like), value);
}

LLVMValueRef
em_vm_poly(em_vm *v, const double *c, int n, LLVMValueRef u)
{
    LLVMValueRef p = em_vm_const(u, c[n - 1]);
    for (int i = n - 2; i >= 0; i--)
        p = em_vm_fma(v, p, u, em_vm_const(u, c[i]));
    return p;
}

LLVMValueRef
em_vm_poly_estrin(em_vm *v, const double *c, int n, LLVMValueRef u)
{
    /* level by level: terms c[2i] + c[2i+1] u, then pairs of those with u^2, ... */
    LLVMValueRef t[32];
    if (n > 32)
        n = 32;
    for (int i = 0; i < n; i++)
        t[i] = em_vm_const(u, c[i]);
    LLVMValueRef pw = u;
    while (n > 1) {
        int m = 0;
        for (int i = 0; i < n; i += 2)
            t[m++] = i + 1 < n ? em_vm_fma(v, t[i + 1], pw, t[i]) : t[i];
        n = m;
        if (n > 1)
            pw = LLVMBuildFMul(v->B, pw, pw, "");
    }
    return t[0];
}

LLVMValueRef
em_vm_select(em_vm *v, LLVMValueRef cond, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildSelect(v->B, cond, a, b, "");
}

LLVMValueRef
em_vm_fcmp(em_vm *v, LLVMRealPredicate p, LLVMValueRef a, double b)
{
    return LLVMBuildFCmp(v->B, p, a, em_vm_const(a, b), "");
}

LLVMValueRef
em_vm_fabs(em_vm *v, LLVMValueRef a)
{
    return em_vm_intrinsic(v, "llvm.fabs", &a, 1);
}

LLVMValueRef
em_vm_floor(em_vm *v, LLVMValueRef a)
{
    return em_vm_intrinsic(v, "llvm.floor", &a, 1);
}

LLVMValueRef
em_vm_copysign(em_vm *v, LLVMValueRef mag, LLVMValueRef sign)
{
    LLVMValueRef args[2] = {mag, sign};
    return em_vm_intrinsic(v, "llvm.copysign", args, 2);
}

/* ------------------------------------------------------------------ exp and erf */

/* Cephes expf.c's polynomial: exp(r) = 1 + r + r^2 P(r) for |r| <= ln2 / 2 (expm1f uses
 * it too) */
const double em_vm_exp_poly[EM_VM_EXP_POLY_N] = {
    5.0000001201e-1, 1.6666665459e-1, 4.1665795894e-2,
    8.3334519073e-3, 1.3981999507e-3, 1.9875691500e-4};

LLVMValueRef
em_ir_expf(LLVMModuleRef M)
{
    em_vm v;
    if (em_vm_begin(&v, M, "em_expf", 1))
        return v.fn;
    LLVMBuilderRef B = v.B;
    LLVMValueRef x = LLVMGetParam(v.fn, 0);
#define F(c) LLVMConstReal(v.f32, (c))
#define K32(c) LLVMConstInt(v.i32, (unsigned long long)(c), 1)
    /* below -103.972084, exp(x) rounds to 0 (it is under half the smallest subnormal);
     * 88.72283 is the largest float whose exp is finite. x is clamped a little beyond
     * them, where the computed value itself rounds to 0 (n = -150 and y <= 1: 2^-150 at
     * most, a tie that rounds to even) or overflows to inf (n = 128, y > 1), so that no
     * select is needed afterwards (the same bits as selecting 0 and inf: checked on
     * every float of [-105, -103] and [88, 90]) */
    const double lo = -104.0, hi = 88.8;
    LLVMValueRef c = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOLT, x, lo), F(lo), x);
    c = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOGT, c, hi), F(hi), c);
    LLVMValueRef n = em_vm_floor(&v, em_vm_fma(&v, c, F(1.44269504088896341), F(0.5)));
    LLVMValueRef r = em_vm_fma(&v, n, F(-0.693359375), c);
    r = em_vm_fma(&v, n, F(2.12194440e-4), r);
    LLVMValueRef p = em_vm_poly(&v, em_vm_exp_poly, EM_VM_EXP_POLY_N, r);
    LLVMValueRef y = em_vm_fma(&v, p, LLVMBuildFMul(B, r, r, ""), r);
    y = LLVMBuildFAdd(B, y, F(1.0), "");
    /* y * 2^n, n in [-150, 128], as y * 2^n1 * 2^n2 with n1 = floor(n / 2): both
     * factors are normal floats, the first product is exact and the second rounds
     * once (into a subnormal when the result is one) */
    LLVMValueRef ni = LLVMBuildFPToSI(B, n, v.i32, "");
    LLVMValueRef n1 = LLVMBuildAShr(B, ni, K32(1), "");
    LLVMValueRef half[2] = {n1, LLVMBuildSub(B, ni, n1, "")};
    LLVMValueRef e = y;
    for (int k = 0; k < 2; k++) {
        LLVMValueRef bits = LLVMBuildShl(B, LLVMBuildAdd(B, half[k], K32(127), ""), K32(23), "");
        e = LLVMBuildFMul(B, e, LLVMBuildBitCast(B, bits, v.f32, ""), "");
    }
    e = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealUNO, x, 0.0), x, e);
#undef F
#undef K32
    return em_vm_end(&v, e);
}

/* erff, branch-free so the loop vectoriser can widen it. For |x| < 1,
 * erf(x) = x * P(x^2); for 1 <= |x| < 3.93, erf(x) = sign(x) * (1 - exp(Q(|x| - 1)))
 * where Q approximates log(erfc); beyond, +-1. P and Q are least-squares fits on
 * Chebyshev nodes made by tools/fit_erf.py (at most ~2.5 ulp from the exact erf over
 * the float range; NaN gives NaN). */
LLVMValueRef
em_ir_erff(LLVMModuleRef M)
{
    LLVMValueRef exp_fn = em_ir_expf(M);
    em_vm v;
    if (em_vm_begin(&v, M, "em_erff", 1))
        return v.fn;
    static const double P[] = {1.128379225730896, -0.3761262893676758, 0.11283612251281738,
                               -0.026854809373617172, 0.00519005348905921,
                               -0.0008024353883229196, 7.898209878476337e-05};
    static const double Q[] = {-1.8496055603027344, -2.638967990875244, -0.8431020975112915,
                               -0.04158604145050049, 0.010097123682498932,
                               -0.002074095420539379, 0.0003319486859254539,
                               -3.694978659041226e-05, 2.36373034567805e-06,
                               -5.479321529833214e-08};
    LLVMBuilderRef B = v.B;
    LLVMValueRef x = LLVMGetParam(v.fn, 0);
#define F(c) LLVMConstReal(v.f32, (c))
    LLVMValueRef ax = em_vm_fabs(&v, x);
    LLVMValueRef small = LLVMBuildFMul(
        B, x, em_vm_poly(&v, P, (int)(sizeof P / sizeof P[0]), LLVMBuildFMul(B, x, x, "")), "");
    LLVMValueRef q = em_vm_poly(&v, Q, (int)(sizeof Q / sizeof Q[0]),
                                LLVMBuildFSub(B, ax, F(1.0), ""));
    /* Q is only used below 3.93: clamp its argument so exp never sees inf - inf */
    q = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOLT, q, -100.0), F(-100.0), q);
    LLVMValueRef big = LLVMBuildFSub(B, F(1.0), em_vm_call(&v, exp_fn, &q, 1), "");
    big = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOGE, ax, 3.93), F(1.0), big);
    big = em_vm_copysign(&v, big, x);
    LLVMValueRef y = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOLT, ax, 1.0), small, big);
    y = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealUNO, x, 0.0), x, y);
#undef F
    return em_vm_end(&v, y);
}

LLVMValueRef
em_ir_libm(LLVMModuleRef M, const char *name, LLVMTypeRef type, int nargs)
{
    LLVMValueRef fn = LLVMGetNamedFunction(M, name);
    if (fn != NULL)
        return fn;
    LLVMTypeRef params[2] = {type, type};
    fn = LLVMAddFunction(M, name, LLVMFunctionType(type, params, (unsigned)nargs, 0));
    LLVMContextRef C = LLVMGetModuleContext(M);
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(C, LLVMGetEnumAttributeKindForName(
                                                           "nounwind", 8), 0));
    return fn;
}
