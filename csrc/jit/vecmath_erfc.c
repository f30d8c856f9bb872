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
 *     erfc(z) = t S(t) exp(-z^2),   t = 1 / (1 + z/2),   S a polynomial in u = t - 1/2
 * (Numerical Recipes' t; S = erfc(z) exp(z^2) / t fitted by tools/fit_erfc.py on t in
 * [1/(1 + 10.1/2), 1], relative error 1.8e-8). Float32 keeps the tail's relative
 * accuracy by carrying what each rounding loses: z^2 = hi + lo (an exact FMA product),
 * exp(-z^2) = exp(-hi) (1 - lo); t by its residual (1 + z/2 as a TwoSum, 1 - t d by
 * FMA); both folded into t (1 + ct - lo). exp(-hi) is Cephes expf's reduction and
 * polynomial, scaled by 2^n last, as 2^(n + 64) 2^-64, so a subnormal result rounds once.
 * Negative x: 2 - erfc(|x|). Within 3.9 ulp (tools/fit_erfc.py's model; measured
 * 3.84 over 10^7 points, 4.20 over 10^8, by ember.compiler.vecmath_accuracy).
 * Speed: exp(-hi) depends on z alone, so it runs beside the division and S (the
 * former form t exp(-z^2 + q(t)) put exp after both: half again the time, bound by
 * that chain); now the ~50 vector operations bound the loop (two vectors per
 * iteration gain nothing, docs/vecmath.md);
 * S is A(u) + u^6 B(u), two Horner chains of 6, exp's polynomial by Estrin's scheme.
 * Special values as libm's. */

#define FIT_N 12

/* S(t) = erfc(z) exp(z^2) / t in u = t - 1/2 (tools/fit_erfc.py) */
static const double fit_s[FIT_N] = {
    0.5107913613319397, 0.6871607303619385, 0.5589429140090942, 0.1457650512456894,
    -0.17203092575073242, -0.10357670485973358, 0.09788212925195694, 0.05297183245420456,
    -0.07569585740566254, -0.010721198283135891, 0.03698026388883591, -0.0043372297659516335};

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
    LLVMValueRef x = LLVMGetParam(v.fn, 0), dl;
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
    /* S(u) = A(u) + u^6 B(u): two Horner chains of 6 */
    LLVMValueRef u2 = LLVMBuildFMul(B, u, u, "");
    LLVMValueRef u6 = LLVMBuildFMul(B, LLVMBuildFMul(B, u2, u2, ""), u2, "");
    LLVMValueRef sp = em_vm_fma(&v, em_vm_poly(&v, fit_s + 6, FIT_N - 6, u), u6,
                                em_vm_poly(&v, fit_s, 6, u));
    /* exp(-z^2) = exp(-hi) (1 - lo), exp(-hi) = 2^n (1 + e): Cephes expf's reduction
     * and polynomial (vecmath_ir.c), a chain of its own beside the division's */
    LLVMValueRef hi = LLVMBuildFMul(B, zc, zc, "");
    LLVMValueRef lo = exact_fma(&v, zc, zc, LLVMBuildFNeg(B, hi, ""));
    LLVMValueRef nh = LLVMBuildFNeg(B, hi, "");                       /* >= -111 */
    LLVMValueRef n = em_vm_floor(&v, em_vm_fma(&v, nh, F(1.44269504088896341), F(0.5)));
    LLVMValueRef r = em_vm_fma(&v, n, F(-0.693359375), nh);
    r = em_vm_fma(&v, n, F(2.12194440e-4), r);
    LLVMValueRef e = em_vm_fma(&v, em_vm_poly_estrin(&v, em_vm_exp_poly, EM_VM_EXP_POLY_N, r),
                               LLVMBuildFMul(B, r, r, ""), r);          /* exp(r) - 1 */
    /* t (1 + ct - lo) S, times 1 + e in one FMA */
    LLVMValueRef tc = em_vm_fma(&v, th, LLVMBuildFSub(B, ct, lo, ""), th);
    LLVMValueRef ts = LLVMBuildFMul(B, tc, sp, "");
    LLVMValueRef y = em_vm_fma(&v, ts, e, ts);
    /* times 2^n, n in [-161, 0], as 2^(n + 64) (normal: the product is exact) then
     * 2^-64 (the one rounding, into a subnormal when the result is one): the same
     * bits as 2^n in any two exact factors, with one factor built rather than two */
    LLVMValueRef bits = LLVMBuildShl(B, LLVMBuildAdd(B, LLVMBuildFPToSI(B, n, v.i32, ""),
                                                     K32(127 + 64), ""), K32(23), "");
    y = LLVMBuildFMul(B, LLVMBuildFMul(B, y, LLVMBuildBitCast(B, bits, v.f32, ""), ""),
                      F(0x1p-64), "");
    y = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOGT, z, ZMAX), F(0.0), y);
    y = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealOLT, x, 0.0), LLVMBuildFSub(B, F(2.0), y, ""), y);
    y = em_vm_select(&v, em_vm_fcmp(&v, LLVMRealUNO, x, 0.0), x, y);
#undef F
#undef K32
    return em_vm_end(&v, y);
}
