/* vecmath_erfc.c: erfcf as IR (vecmath.h).
 *
 * Two variants, chosen by the target: with FMA (AVX2, AVX-512) an all-float32 one,
 * 16 lanes with AVX-512 and 8 with AVX2 (em_erfcf32, below); without FMA the float64
 * one (em_erfcf), whose exact products FMA-less float32 code could not form cheaply.
 *
 * The float64 variant: the Chebyshev fit of erfc_fit.h (Numerical Recipes in C, erfcc; shared with eager's
 * float32 erfc and gelu), for z = |x|:
 *     erfc(z) = t exp(-z^2 + C + t P(t)),   t = 1 / (1 + z/2),
 * evaluated in float64 (z^2 is exact there, so the tail keeps its relative accuracy;
 * exp by em_vm_exp2_f64 to degree 7, 7e-9 relative), and erfc(x) = 2 - erfc(-x) for
 * negative x, then rounded once to float32 (gradual underflow included). The fit's
 * relative error is below 1.2e-7 over all z >= 0: the result is within 2.3 ulp
 * (vecmath_accuracy). z is clamped to 10.5, beyond which erfc rounds to 0.
 * Cost: float64 halves the vector width (8 lanes with AVX-512), ~55 vector operations
 * per 8 elements; the polynomials by Estrin's scheme (one iteration's dependency chain
 * is what limits the loop: 6% less time than Horner's, measured).
 * Special values as libm: erfc(+-0) = 1, erfc(inf) = 0, erfc(-inf) = 2, NaN in NaN out;
 * subnormal x give 1. Float64 erfc calls libm (no vector version here).
 */
#include "jit/vecmath.h"

#include "kernels/erfc_fit.h"

#include <math.h>

#define ZMAX 10.5

static LLVMValueRef erfc_float32(LLVMModuleRef M);

LLVMValueRef
em_ir_erfcf(LLVMModuleRef M)
{
    if (em_jit_has_feature("fma"))
        return erfc_float32(M);
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
    LLVMValueRef q = em_vm_fma(&v, t, em_vm_poly_estrin(&v, p, EM_ERFC_FIT_N, t),
                               D(EM_ERFC_FIT_C));
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

/* ------------------------------------------------------------------ float32, FMA */

/* The float32 variant, for all z = |x| (one formula, no blend of sub-ranges):
 *     erfc(z) = t exp(-z^2 + q(t)),   t = 1 / (1 + z/2),   q = c0 + u P(u), u = t - 1/2
 * (Numerical Recipes' form, refitted by tools/fit_erfc.py on t in [1/(1 + 10.1/2), 1]:
 * the fit's error is 7e-9 in the exponent). Float32 keeps the relative accuracy of the
 * tail by carrying what each rounding loses: z^2 = hi + lo (an exact FMA product), the
 * sum -hi + q by a TwoSum (q rounded once, |q| < 1.4; c0's low part added back), t by
 * its residual (1 + z/2 as a TwoSum, 1 - t d by FMA), all folded into one relative
 * correction applied after exp of the rounded sum (Cephes expf's reduction and
 * polynomial, scaled by 2^n in two factors so a subnormal result rounds once).
 * Negative x: 2 - erfc(|x|). Within 3.6 ulp (tools/fit_erfc.py's model; measured on the
 * JIT by ember.compiler.vecmath_accuracy, docs/vecmath.md).
 * Speed: the loop is bound by one element's dependency chain (~100 cycles of latency
 * against ~60 vector operations), so the polynomials are evaluated as short chains:
 * P as A(u) + u^5 B(u), two Horner chains of 5, and exp's polynomial by Estrin's scheme
 * (P wholly by Estrin's scheme would lose an ulp to cancellation near t = 1, where q
 * is near 0). Special values as libm's. */

#define FIT_N 10

static const double fit_c0_hi = -0.671794056892395, fit_c0_lo = -2.1362847490991044e-08;
static const double fit_p[FIT_N] = {
    1.34528648853302, 0.1893710047006607, -0.375166118144989, -0.15782234072685242,
    0.2822566032409668, 0.10945329815149307, -0.2941754162311554, -0.01072610355913639,
    0.26573386788368225, -0.14525213837623596};

static LLVMValueRef
exact_fma(em_vm *v, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c)
{
    LLVMValueRef args[3] = {a, b, c};
    return em_vm_intrinsic(v, "llvm.fma", args, 3);
}

/* s + err = a + b exactly (Knuth's TwoSum); returns s */
static LLVMValueRef
two_sum(em_vm *v, LLVMValueRef a, LLVMValueRef b, LLVMValueRef *err)
{
    LLVMBuilderRef B = v->B;
    LLVMValueRef s = LLVMBuildFAdd(B, a, b, "");
    LLVMValueRef bb = LLVMBuildFSub(B, s, a, "");
    LLVMValueRef aa = LLVMBuildFSub(B, s, bb, "");
    *err = LLVMBuildFAdd(B, LLVMBuildFSub(B, a, aa, ""), LLVMBuildFSub(B, b, bb, ""), "");
    return s;
}

static LLVMValueRef
erfc_float32(LLVMModuleRef M)
{
    em_vm v;
    if (em_vm_begin(&v, M, "em_erfcf32", 1))
        return v.fn;
    LLVMBuilderRef B = v.B;
    LLVMValueRef x = LLVMGetParam(v.fn, 0), e1, dl;
#define F(c) LLVMConstReal(v.f32, (c))
#define K32(c) LLVMConstInt(v.i32, (unsigned long long)(c), 1)
    LLVMValueRef z = em_vm_fabs(&v, x);
    LLVMValueRef zc = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOGT, z, ZMAX), F(ZMAX), z);
    /* t = th (1 + ct) */
    LLVMValueRef d = two_sum(&v, F(1.0), LLVMBuildFMul(B, zc, F(0.5), ""), &dl);
    LLVMValueRef th = LLVMBuildFDiv(B, F(1.0), d, "");
    LLVMValueRef ct = LLVMBuildFSub(B, exact_fma(&v, LLVMBuildFNeg(B, th, ""), d, F(1.0)),
                                    LLVMBuildFMul(B, th, dl, ""), "");
    LLVMValueRef u = LLVMBuildFSub(B, th, F(0.5), "");
    /* P(u) = A(u) + u^5 B(u): two Horner chains of 5 (all of P by Estrin's scheme
     * would lose an ulp to cancellation near t = 1) */
    LLVMValueRef u2 = LLVMBuildFMul(B, u, u, "");
    LLVMValueRef u5 = LLVMBuildFMul(B, LLVMBuildFMul(B, u2, u2, ""), u, "");
    LLVMValueRef pu = em_vm_fma(&v, em_vm_poly(&v, fit_p + 5, FIT_N - 5, u), u5,
                                em_vm_poly(&v, fit_p, 5, u));
    LLVMValueRef q = em_vm_fma(&v, u, pu, F(fit_c0_hi));
    LLVMValueRef hi = LLVMBuildFMul(B, zc, zc, "");
    LLVMValueRef lo = exact_fma(&v, zc, zc, LLVMBuildFNeg(B, hi, ""));
    LLVMValueRef s = two_sum(&v, LLVMBuildFNeg(B, hi, ""), q, &e1);    /* >= -112 */
    LLVMValueRef corr = LLVMBuildFAdd(
        B, LLVMBuildFAdd(B, e1, LLVMBuildFSub(B, F(fit_c0_lo), lo, ""), ""), ct, "");
    /* exp(s) = 2^n e, Cephes expf's reduction and polynomial (vecmath_ir.c) */
    LLVMValueRef n = em_vm_floor(&v, em_vm_fma(&v, s, F(1.44269504088896341), F(0.5)));
    LLVMValueRef r = em_vm_fma(&v, n, F(-0.693359375), s);
    r = em_vm_fma(&v, n, F(2.12194440e-4), r);
    LLVMValueRef e = em_vm_fma(&v, em_vm_poly_estrin(&v, em_vm_exp_poly, EM_VM_EXP_POLY_N, r),
                               LLVMBuildFMul(B, r, r, ""), r);          /* exp(r) - 1 */
    /* t (1 + corr), formed beside the polynomial, times 1 + e in one FMA */
    LLVMValueRef tc = em_vm_fma(&v, th, corr, th);
    LLVMValueRef y = em_vm_fma(&v, tc, e, tc);
    /* times 2^n, n in [-161, 0], as 2^n1 2^n2: exact, then one rounding */
    LLVMValueRef ni = LLVMBuildFPToSI(B, n, v.i32, "");
    LLVMValueRef n1 = LLVMBuildAShr(B, ni, K32(1), "");
    LLVMValueRef half[2] = {n1, LLVMBuildSub(B, ni, n1, "")};
    for (int k = 0; k < 2; k++) {
        LLVMValueRef bits = LLVMBuildShl(B, LLVMBuildAdd(B, half[k], K32(127), ""), K32(23), "");
        y = LLVMBuildFMul(B, y, LLVMBuildBitCast(B, bits, v.f32, ""), "");
    }
    y = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOGT, z, ZMAX), F(0.0), y);
    y = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOLT, x, 0.0), LLVMBuildFSub(B, F(2.0), y, ""), y);
    y = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealUNO, x, 0.0), x, y);
#undef F
#undef K32
    return em_vm_end(&v, y);
}
