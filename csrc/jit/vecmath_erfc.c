/* vecmath_erfc.c: erfcf as IR (vecmath.h).
 *
 * The Chebyshev fit of erfc_fit.h (Numerical Recipes in C, erfcc; shared with eager's
 * float32 erfc and gelu), for z = |x|:
 *     erfc(z) = t exp(-z^2 + C + t P(t)),   t = 1 / (1 + z/2),
 * evaluated in float64 (z^2 is exact there, so the tail keeps its relative accuracy;
 * exp by em_vm_exp2_f64 to degree 7, 7e-9 relative), and erfc(x) = 2 - erfc(-x) for
 * negative x, then rounded once to float32 (gradual underflow included). The fit's
 * relative error is below 1.2e-7 over all z >= 0: the result is within 2.3 ulp
 * (vecmath_accuracy). z is clamped to 10.5, beyond which erfc rounds to 0.
 * Cost: float64 halves the vector width (8 lanes with AVX-512), ~55 vector operations
 * per 8 elements.
 * Special values as libm: erfc(+-0) = 1, erfc(inf) = 0, erfc(-inf) = 2, NaN in NaN out;
 * subnormal x give 1. Float64 erfc calls libm (no vector version here).
 */
#include "jit/vecmath.h"

#include "kernels/erfc_fit.h"

#include <math.h>

#define ZMAX 10.5

LLVMValueRef
em_ir_erfcf(LLVMModuleRef M)
{
    em_vm v;
    if (em_vm_begin(&v, M, "em_erfcf", 1))
        return v.fn;
    LLVMBuilderRef B = v.B;
    LLVMValueRef x = LLVMGetParam(v.fn, 0);
#define D(c) LLVMConstReal(v.f64, (c))
    double p[EM_ERFC_FIT_N];
    for (int i = 0; i < EM_ERFC_FIT_N; i++)
        p[i] = em_erfc_fit_p[i];
    LLVMValueRef ax = em_vm_fabs(&v, x);
    LLVMValueRef z = LLVMBuildFPExt(B, ax, v.f64, "");
    z = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOGT, z, ZMAX), D(ZMAX), z);
    LLVMValueRef t = LLVMBuildFDiv(B, D(1.0), em_vm_fma(&v, z, D(0.5), D(1.0)), "");
    LLVMValueRef q = em_vm_fma(&v, t, em_vm_poly(&v, p, EM_ERFC_FIT_N, t), D(EM_ERFC_FIT_C));
    LLVMValueRef arg = em_vm_fma(&v, LLVMBuildFNeg(B, z, ""), z, q);   /* >= -112 */
    LLVMValueRef e = LLVMBuildFMul(
        B, t, em_vm_exp2_f64(&v, LLVMBuildFMul(B, arg, D(1.4426950408889634), ""), 7), "");
    e = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOLT, x, 0.0),
                     LLVMBuildFSub(B, D(2.0), e, ""), e);
    LLVMValueRef y = LLVMBuildFPTrunc(B, e, v.f32, "");
    y = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOGT, x, ZMAX),
                     LLVMConstReal(v.f32, 0.0), y);
    y = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealUNO, x, 0.0), x, y);
#undef D
    return em_vm_end(&v, y);
}
