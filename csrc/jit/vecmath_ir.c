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

static LLVMValueRef
fcall(LLVMBuilderRef B, LLVMModuleRef M, const char *name, LLVMTypeRef t, LLVMValueRef *args,
      int n)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(M, id, &t, 1);
    return LLVMBuildCall2(B, LLVMIntrinsicGetType(LLVMGetModuleContext(M), id, &t, 1), f,
                          args, n, "");
}

static LLVMValueRef
fma3(LLVMBuilderRef B, LLVMModuleRef M, LLVMTypeRef t, LLVMValueRef a, LLVMValueRef b,
     LLVMValueRef c)
{
    LLVMValueRef args[3] = {a, b, c};
    return fcall(B, M, "llvm.fmuladd", t, args, 3);
}

/* A float -> float IR function named `name`, internal and always inlined; *B is left
 * at its entry block. */
static LLVMValueRef
begin_fn(LLVMModuleRef M, const char *name, LLVMBuilderRef *B)
{
    LLVMContextRef C = LLVMGetModuleContext(M);
    LLVMTypeRef f32 = LLVMFloatTypeInContext(C);
    LLVMValueRef fn = LLVMAddFunction(M, name, LLVMFunctionType(f32, &f32, 1, 0));
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    const char *attrs[] = {"alwaysinline", "nounwind", "readnone", "willreturn"};
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++)
        LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                                LLVMCreateEnumAttribute(C, LLVMGetEnumAttributeKindForName(
                                                               attrs[i], strlen(attrs[i])), 0));
    *B = LLVMCreateBuilderInContext(C);
    LLVMPositionBuilderAtEnd(*B, LLVMAppendBasicBlockInContext(C, fn, "entry"));
    return fn;
}

LLVMValueRef
em_ir_expf(LLVMModuleRef M)
{
    LLVMValueRef fn = LLVMGetNamedFunction(M, "em_expf");
    if (fn != NULL)
        return fn;
    LLVMContextRef C = LLVMGetModuleContext(M);
    LLVMTypeRef f32 = LLVMFloatTypeInContext(C), i32 = LLVMInt32TypeInContext(C);
    LLVMBuilderRef B;
    fn = begin_fn(M, "em_expf", &B);
    LLVMValueRef x = LLVMGetParam(fn, 0);
#define K(v) LLVMConstReal(f32, (v))
    /* below lo, exp(x) rounds to 0 (it is under half the smallest subnormal); hi is the
     * largest float whose exp is finite */
    const double lo = -103.972084, hi = 88.72283;
    LLVMValueRef c = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, x, K(lo), ""), K(lo), x, "");
    c = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, c, K(hi), ""), K(hi), c, "");
    LLVMValueRef t = fma3(B, M, f32, c, K(1.44269504088896341), K(0.5));
    LLVMValueRef n = fcall(B, M, "llvm.floor", f32, &t, 1);
    LLVMValueRef r = fma3(B, M, f32, n, K(-0.693359375), c);
    r = fma3(B, M, f32, n, K(2.12194440e-4), r);
    LLVMValueRef p = K(1.9875691500e-4);
    static const double coef[] = {1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                                  1.6666665459e-1, 5.0000001201e-1};
    for (size_t i = 0; i < sizeof coef / sizeof coef[0]; i++)
        p = fma3(B, M, f32, p, r, K(coef[i]));
    LLVMValueRef r2 = LLVMBuildFMul(B, r, r, "");
    LLVMValueRef y = fma3(B, M, f32, p, r2, r);
    y = LLVMBuildFAdd(B, y, K(1.0), "");
    /* y * 2^n, n in [-150, 128], as y * 2^n1 * 2^n2 with n1 = floor(n / 2): both
     * factors are normal floats, the first product is exact and the second rounds
     * once (into a subnormal when the result is one) */
    LLVMValueRef ni = LLVMBuildFPToSI(B, n, i32, "");
    LLVMValueRef n1 = LLVMBuildAShr(B, ni, LLVMConstInt(i32, 1, 0), "");
    LLVMValueRef n2 = LLVMBuildSub(B, ni, n1, "");
    LLVMValueRef e = y;
    LLVMValueRef half[2] = {n1, n2};
    for (int k = 0; k < 2; k++) {
        LLVMValueRef bits = LLVMBuildShl(B, LLVMBuildAdd(B, half[k], LLVMConstInt(i32, 127, 0), ""),
                                         LLVMConstInt(i32, 23, 0), "");
        e = LLVMBuildFMul(B, e, LLVMBuildBitCast(B, bits, f32, ""), "");
    }
    e = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, x, K(lo), ""), K(0.0), e, "");
    e = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, x, K(hi), ""), K(INFINITY), e, "");
    e = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUNO, x, x, ""), x, e, "");
#undef K
    LLVMBuildRet(B, e);
    LLVMDisposeBuilder(B);
    return fn;
}

static LLVMValueRef
horner(LLVMBuilderRef B, LLVMModuleRef M, LLVMTypeRef t, const double *c, int n,
       LLVMValueRef u)
{
    LLVMValueRef p = LLVMConstReal(t, c[n - 1]);
    for (int i = n - 2; i >= 0; i--)
        p = fma3(B, M, t, p, u, LLVMConstReal(t, c[i]));
    return p;
}

/* erff, branch-free so the loop vectoriser can widen it. For |x| < 1,
 * erf(x) = x * P(x^2); for 1 <= |x| < 3.93, erf(x) = sign(x) * (1 - exp(Q(|x| - 1)))
 * where Q approximates log(erfc); beyond, +-1. P and Q are least-squares fits on
 * Chebyshev nodes made by tools/fit_erf.py (at most ~2.5 ulp from the exact erf over
 * the float range; NaN gives NaN). */
LLVMValueRef
em_ir_erff(LLVMModuleRef M)
{
    LLVMValueRef fn = LLVMGetNamedFunction(M, "em_erff");
    if (fn != NULL)
        return fn;
    static const double P[] = {1.128379225730896, -0.3761262893676758, 0.11283612251281738,
                               -0.026854809373617172, 0.00519005348905921,
                               -0.0008024353883229196, 7.898209878476337e-05};
    static const double Q[] = {-1.8496055603027344, -2.638967990875244, -0.8431020975112915,
                               -0.04158604145050049, 0.010097123682498932,
                               -0.002074095420539379, 0.0003319486859254539,
                               -3.694978659041226e-05, 2.36373034567805e-06,
                               -5.479321529833214e-08};
    LLVMBuilderRef B;
    fn = begin_fn(M, "em_erff", &B);
    LLVMTypeRef f32 = LLVMFloatTypeInContext(LLVMGetModuleContext(M));
    LLVMValueRef x = LLVMGetParam(fn, 0);
#define K(v) LLVMConstReal(f32, (v))
    LLVMValueRef ax = fcall(B, M, "llvm.fabs", f32, &x, 1);
    LLVMValueRef small = LLVMBuildFMul(
        B, x, horner(B, M, f32, P, (int)(sizeof P / sizeof P[0]), LLVMBuildFMul(B, x, x, "")),
        "");
    LLVMValueRef q = horner(B, M, f32, Q, (int)(sizeof Q / sizeof Q[0]),
                            LLVMBuildFSub(B, ax, K(1.0), ""));
    /* Q is only used below 3.93: clamp its argument so exp never sees inf - inf */
    q = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, q, K(-100.0), ""), K(-100.0), q, "");
    LLVMValueRef e = LLVMBuildCall2(B, LLVMGlobalGetValueType(em_ir_expf(M)), em_ir_expf(M),
                                    &q, 1, "");
    LLVMValueRef big = LLVMBuildFSub(B, K(1.0), e, "");
    big = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGE, ax, K(3.93), ""), K(1.0), big, "");
    LLVMValueRef cs[2] = {big, x};
    big = fcall(B, M, "llvm.copysign", f32, cs, 2);
    LLVMValueRef y = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, ax, K(1.0), ""), small,
                                     big, "");
    y = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUNO, x, x, ""), x, y, "");
#undef K
    LLVMBuildRet(B, y);
    LLVMDisposeBuilder(B);
    return fn;
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
