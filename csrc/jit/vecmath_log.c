/* vecmath_log.c: logf and log1pf as IR (vecmath.h).
 *
 * logf: x = 2^e * m with m in [sqrt(1/2), sqrt(2)) (subnormals scaled by 2^23 first),
 * f = m - 1 (exact), log(x) = f - f^2/2 + f^3 P(f) + e ln2 with ln2 in two parts.
 * P and the split of ln2 are from the Cephes Math Library (S. L. Moshier, logf.c).
 * log1pf: u = 1 + x rounded, log1p(x) = log(u) + (x - (u - 1)) / u, the second term
 * correcting the rounding of u (exact below 2^-24, where u is 1).
 * Special values as libm: log(+-0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN in
 * NaN out; log1p(-1) = -inf, log1p(+-0) = +-0.
 */
#include "jit/vecmath.h"

#include <math.h>

LLVMValueRef
em_ir_logf(LLVMModuleRef M)
{
    em_vm v;
    if (em_vm_begin(&v, M, "em_logf", 1))
        return v.fn;
    LLVMBuilderRef B = v.B;
    LLVMValueRef x = LLVMGetParam(v.fn, 0);
#define F(c) LLVMConstReal(v.f32, (c))
#define K32(c) LLVMConstInt(v.i32, (unsigned long long)(c), 1)
    LLVMValueRef tiny = em_vm_fcmp(&v, LLVMRealOLT, x, 0x1p-126);
    LLVMValueRef xs = em_vm_select(&v, tiny, LLVMBuildFMul(B, x, F(0x1p23), ""), x);
    /* subtracting sqrt(1/2)'s bits puts m's range [sqrt(1/2), sqrt(2)) at exponent 0 */
    LLVMValueRef bits = LLVMBuildSub(B, LLVMBuildBitCast(B, xs, v.i32, ""), K32(0x3f3504f3), "");
    LLVMValueRef e = LLVMBuildAShr(B, bits, K32(23), "");
    e = LLVMBuildSub(B, e, em_vm_select(&v, tiny, K32(23), K32(0)), "");
    LLVMValueRef mb = LLVMBuildAdd(B, LLVMBuildAnd(B, bits, K32(0x7fffff), ""), K32(0x3f3504f3), "");
    LLVMValueRef f = LLVMBuildFSub(B, LLVMBuildBitCast(B, mb, v.f32, ""), F(1.0), "");
    LLVMValueRef ef = LLVMBuildSIToFP(B, e, v.f32, "");
    /* Cephes logf.c */
    static const double P[] = {3.3333331174E-1, -2.4999993993E-1, 2.0000714765E-1,
                               -1.6668057665E-1, 1.4249322787E-1, -1.2420140846E-1,
                               1.1676998740E-1, -1.1514610310E-1, 7.0376836292E-2};
    LLVMValueRef z = LLVMBuildFMul(B, f, f, "");
    LLVMValueRef y = LLVMBuildFMul(B, LLVMBuildFMul(B, f, z, ""),
                                   em_vm_poly(&v, P, (int)(sizeof P / sizeof P[0]), f), "");
    y = em_vm_fma(&v, ef, F(-2.12194440e-4), y);
    y = em_vm_fma(&v, z, F(-0.5), y);
    LLVMValueRef r = LLVMBuildFAdd(B, f, y, "");
    r = em_vm_fma(&v, ef, F(0.693359375), r);
    r = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOLT, x, 0.0), F(NAN), r);
    r = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOEQ, x, 0.0), F(-INFINITY), r);
    r = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOEQ, x, INFINITY), x, r);
    r = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealUNO, x, 0.0), x, r);
#undef F
#undef K32
    return em_vm_end(&v, r);
}

LLVMValueRef
em_ir_log1pf(LLVMModuleRef M)
{
    LLVMValueRef logf_fn = em_ir_logf(M);
    em_vm v;
    if (em_vm_begin(&v, M, "em_log1pf", 1))
        return v.fn;
    LLVMBuilderRef B = v.B;
    LLVMValueRef x = LLVMGetParam(v.fn, 0);
#define F(c) LLVMConstReal(v.f32, (c))
    LLVMValueRef u = LLVMBuildFAdd(B, x, F(1.0), "");
    LLVMValueRef l = em_vm_call(&v, logf_fn, &u, 1);
    LLVMValueRef c = LLVMBuildFDiv(B, LLVMBuildFSub(B, x, LLVMBuildFSub(B, u, F(1.0), ""), ""),
                                   u, "");
    LLVMValueRef r = LLVMBuildFAdd(B, l, c, "");
    /* where the correction is inf - inf or 0 / 0, log(u) is the answer */
    LLVMValueRef whole = LLVMBuildOr(B, em_vm_fcmp(&v, LLVMRealOEQ, x, INFINITY),
                                     em_vm_fcmp(&v, LLVMRealOLE, x, -1.0), "");
    r = em_vm_select(&v, whole, l, r);
    r = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOEQ, x, 0.0), x, r);
#undef F
    return em_vm_end(&v, r);
}
