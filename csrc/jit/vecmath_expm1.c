/* vecmath_expm1.c: expm1f and tanhf as IR (vecmath.h).
 *
 * expm1f: n = round(x / ln2), r = x - n ln2 (ln2 in two parts, Cody and Waite), so
 * |r| <= ln2 / 2; expm1(r) = r + r^2 P(r) with P the polynomial of the Cephes Math
 * Library's expf (S. L. Moshier, expf.c: exp(r) = 1 + r + r^2 P(r)); then
 * expm1(x) = 2^n expm1(r) + 2^n - 1, computed as 2 (2^(n-1) expm1(r) + (2^(n-1) - 1/2))
 * so that 2^(n-1) stays a normal float up to the overflow threshold (n = 128).
 * tanhf: tanh(|x|) = y / (y + 2) with y = expm1(2|x|), no cancellation anywhere; the
 * sign is x's; |x| >= 9.1 gives +-1 (tanh rounds to 1 there).
 * Special values as libm: expm1(+-0) = +-0, expm1(-inf) = -1, expm1(inf) = inf;
 * tanh(+-0) = +-0, tanh(+-inf) = +-1; NaN in NaN out.
 */
#include "jit/vecmath.h"

#include <math.h>

LLVMValueRef
em_ir_expm1f(LLVMModuleRef M)
{
    em_vm v;
    if (em_vm_begin(&v, M, "em_expm1f", 1))
        return v.fn;
    LLVMBuilderRef B = v.B;
    LLVMValueRef x = LLVMGetParam(v.fn, 0);
#define F(c) LLVMConstReal(v.f32, (c))
#define K32(c) LLVMConstInt(v.i32, (unsigned long long)(c), 1)
    /* below -20, expm1 rounds to -1; above hi (the largest float whose exp is finite)
     * it overflows */
    const double hi = 88.72283;
    LLVMValueRef c = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOLT, x, -20.0), F(-20.0), x);
    c = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOGT, c, hi), F(hi), c);
    LLVMValueRef n = em_vm_floor(&v, em_vm_fma(&v, c, F(1.44269504088896341), F(0.5)));
    LLVMValueRef r = em_vm_fma(&v, n, F(-0.693359375), c);
    r = em_vm_fma(&v, n, F(2.12194440e-4), r);
    LLVMValueRef p = em_vm_poly(&v, em_vm_exp_poly, EM_VM_EXP_POLY_N, r);
    LLVMValueRef q = em_vm_fma(&v, p, LLVMBuildFMul(B, r, r, ""), r);     /* expm1(r) */
    LLVMValueRef ni = LLVMBuildFPToSI(B, n, v.i32, "");
    LLVMValueRef t = LLVMBuildBitCast(
        B, LLVMBuildShl(B, LLVMBuildAdd(B, ni, K32(126), ""), K32(23), ""), v.f32, "");
    LLVMValueRef e = LLVMBuildFMul(
        B, em_vm_fma(&v, q, t, LLVMBuildFSub(B, t, F(0.5), "")), F(2.0), "");
    /* n = 0: expm1(r) itself (halving and doubling would round a subnormal) */
    e = em_vm_select(&v, LLVMBuildICmp(B, LLVMIntEQ, ni, K32(0), ""), q, e);
    e = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOGT, x, hi), F(INFINITY), e);
    e = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOEQ, x, 0.0), x, e);
    e = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealUNO, x, 0.0), x, e);
#undef F
#undef K32
    return em_vm_end(&v, e);
}

LLVMValueRef
em_ir_tanhf(LLVMModuleRef M)
{
    LLVMValueRef expm1_fn = em_ir_expm1f(M);
    em_vm v;
    if (em_vm_begin(&v, M, "em_tanhf", 1))
        return v.fn;
    LLVMBuilderRef B = v.B;
    LLVMValueRef x = LLVMGetParam(v.fn, 0);
#define F(c) LLVMConstReal(v.f32, (c))
    LLVMValueRef a = em_vm_fabs(&v, x);
    a = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOGT, a, 9.1), F(9.1), a);
    LLVMValueRef a2 = LLVMBuildFMul(B, a, F(2.0), "");
    LLVMValueRef y = em_vm_call(&v, expm1_fn, &a2, 1);
    LLVMValueRef r = LLVMBuildFDiv(B, y, LLVMBuildFAdd(B, y, F(2.0), ""), "");
#undef F
    return em_vm_end(&v, em_vm_copysign(&v, r, x));
}
