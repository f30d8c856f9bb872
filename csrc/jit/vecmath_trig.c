/* vecmath_trig.c: sinf and cosf as IR (vecmath.h), correct over the whole float range.
 *
 * Argument reduction to theta = |x| - n pi/2, |theta| <= pi/4, in float64:
 * - |x| < 2^25: n = round(|x| 2/pi) and Cody and Waite's three-step subtraction of
 *   n pi/2 (pi/2 split so that each product with n is exact);
 * - |x| >= 2^25: Payne and Hanek's method, in 64-bit integers (vectorisable: no table
 *   lookups, the chunks of 2/pi are chosen by selects): with |x| = M 2^k (M a 24-bit
 *   integer), the bits of 2/pi with weight 4 or more in 2^k 2/pi only add whole turns,
 *   so |x| 2/pi mod 4 needs the 96 bits of 2/pi after them; M times them gives n and
 *   the fraction to 2^-94, good to float64 rounding relative to theta itself however
 *   close |x| is to a multiple of pi/2.
 * Both are computed (branch-free) and selected. theta is rounded once to float32 (half
 * an ulp of theta however small it is), then sin/cos of it by float32 minimax
 * polynomials on [-pi/4, pi/4] (Cephes sinf.c and cosf.c), n mod 4 choosing which and
 * its sign: at most 1.56 ulp over the float range (docs/vecmath.md). The bits of 2/pi
 * and pi/2 were computed with exact integer arithmetic (Machin's formula).
 * Special values as libm: sin(+-0) = +-0, cos(+-0) = 1, +-inf and NaN give NaN.
 */
#include "jit/vecmath.h"

#include <math.h>

/* 2/pi = 0.A2F9836E 4E441529 ... in 32-bit words (the first 224 bits) */
static const unsigned two_over_pi[7] = {0xa2f9836e, 0x4e441529, 0xfc2757d1, 0xf534ddc0,
                                        0xdb629599, 0x3c439041, 0xfe5163ab};

/* pi/2 = P1 + P2 + P3: P1 and P2 of 27 and 21 significant bits (products with n
 * < 2^25 are exact), P3 rounded */
#define PIO2_1 0x1.921fb54p+0
#define PIO2_2 0x1.10b461p-30
#define PIO2_3 0x1.a62633145c06ep-58

/* with_large false: the Cody-Waite path alone, right for |x| < 2^25 and for inf, NaN
 * (codegen_loops.c runs it first and again with the whole function when a larger
 * argument was seen) */
static LLVMValueRef
build_trig(LLVMModuleRef M, const char *name, bool is_cos, bool with_large)
{
    em_vm v;
    if (em_vm_begin(&v, M, name, 1))
        return v.fn;
    LLVMBuilderRef B = v.B;
    LLVMValueRef x = LLVMGetParam(v.fn, 0);
#define D(c) LLVMConstReal(v.f64, (c))
#define K32(c) LLVMConstInt(v.i32, (unsigned long long)(c), 1)
#define L(c) LLVMConstInt(v.i64, (unsigned long long)(c), 0)
    LLVMValueRef bits = LLVMBuildBitCast(B, x, v.i32, "");
    LLVMValueRef ab = LLVMBuildAnd(B, bits, K32(0x7fffffff), "");
    LLVMValueRef be = LLVMBuildLShr(B, ab, K32(23), "");
    LLVMValueRef ax = LLVMBuildFPExt(B, LLVMBuildBitCast(B, ab, v.f32, ""), v.f64, "");

    /* |x| < 2^25: n = round(|x| 2/pi) < 2^25, r = |x| - n pi/2 in three exact steps
     * (Cody and Waite) */
    LLVMValueRef kd = LLVMBuildFAdd(B, LLVMBuildFMul(B, ax, D(0.63661977236758134), ""),
                                    D(0x1.8p52), "");       /* rounds to an integer */
    LLVMValueRef nd = LLVMBuildFSub(B, kd, D(0x1.8p52), "");
    LLVMValueRef rs = LLVMBuildFSub(B, ax, LLVMBuildFMul(B, nd, D(PIO2_1), ""), "");
    rs = LLVMBuildFSub(B, rs, LLVMBuildFMul(B, nd, D(PIO2_2), ""), "");
    rs = LLVMBuildFSub(B, rs, LLVMBuildFMul(B, nd, D(PIO2_3), ""), "");
    LLVMValueRef qs = LLVMBuildTrunc(B, LLVMBuildBitCast(B, kd, v.i64, ""), v.i32, "");
    LLVMValueRef th = rs, n = qs;
    if (with_large) {
        /* |x| >= 2^25 (Payne and Hanek), in integers: |x| = M 2^k, k >= 2. The bits of
         * 2/pi from the (k - 1)th (weight 2 in 2^k 2/pi) on, in 32-bit chunks G0, G1, G2
         * of weights 2^-30, 2^-62, 2^-94: M G0 mod 2^32 is M F_k mod 4 in units of 2^-30;
         * the sum below is |x| 2/pi mod 4 in units of 2^-62 (wrapping is mod 4) */
        LLVMValueRef bit0 = LLVMBuildSub(B, be, K32(152), "");         /* 0-based bit */
        bit0 = em_vm_select(&v, LLVMBuildICmp(B, LLVMIntSLT, bit0, K32(0), ""), K32(0), bit0);
        LLVMValueRef qw = LLVMBuildLShr(B, bit0, K32(5), "");
        LLVMValueRef sh = LLVMBuildAnd(B, bit0, K32(31), "");
        LLVMValueRef word[4];
        for (int i = 0; i < 4; i++) {
            word[i] = K32(two_over_pi[i]);
            for (int t = 1; t < 4; t++)
                word[i] = em_vm_select(&v, LLVMBuildICmp(B, LLVMIntEQ, qw, K32(t), ""),
                                       K32(two_over_pi[i + t]), word[i]);
        }
        LLVMValueRef m = LLVMBuildZExt(
            B, LLVMBuildOr(B, LLVMBuildAnd(B, ab, K32(0x7fffff), ""), K32(0x800000), ""),
            v.i64, "");
        LLVMValueRef prod[3];
        for (int i = 0; i < 3; i++) {
            /* G = the 32 bits of word[i] word[i + 1] from bit sh on (in 32-bit lanes; the
             * right shift in two steps, as a shift by 32 is undefined) */
            LLVMValueRef lo = LLVMBuildLShr(B, LLVMBuildLShr(B, word[i + 1], K32(1), ""),
                                            LLVMBuildSub(B, K32(31), sh, ""), "");
            LLVMValueRef g = LLVMBuildOr(B, LLVMBuildShl(B, word[i], sh, ""), lo, "");
            prod[i] = LLVMBuildMul(B, m, LLVMBuildZExt(B, g, v.i64, ""), "");
        }
        LLVMValueRef tot = LLVMBuildAdd(B, LLVMBuildShl(B, prod[0], L(32), ""), prod[1], "");
        tot = LLVMBuildAdd(B, tot, LLVMBuildLShr(B, prod[2], L(32), ""), "");
        LLVMValueRef nl = LLVMBuildLShr(B, LLVMBuildAdd(B, tot, L(1ULL << 61), ""), L(62), "");
        LLVMValueRef frac = LLVMBuildSub(B, tot, LLVMBuildShl(B, nl, L(62), ""), "");
        /* frac (|frac| <= 2^61) to float64 through two exact int32 conversions, one rounding */
        LLVMValueRef hi = LLVMBuildSIToFP(
            B, LLVMBuildTrunc(B, LLVMBuildAShr(B, frac, L(31), ""), v.i32, ""), v.f64, "");
        LLVMValueRef lo = LLVMBuildSIToFP(
            B, LLVMBuildTrunc(B, LLVMBuildAnd(B, frac, L(0x7fffffff), ""), v.i32, ""), v.f64, "");
        LLVMValueRef rem = LLVMBuildSIToFP(
            B, LLVMBuildTrunc(B, LLVMBuildLShr(B, LLVMBuildAnd(B, prod[2], L(0xffffffff), ""),
                                               L(1), ""), v.i32, ""), v.f64, "");
        LLVMValueRef rl = LLVMBuildFAdd(B, LLVMBuildFMul(B, hi, D(0x1p-31), ""),
                                        LLVMBuildFMul(B, lo, D(0x1p-62), ""), "");
        rl = LLVMBuildFAdd(B, rl, LLVMBuildFMul(B, rem, D(0x1p-93), ""), "");
        rl = LLVMBuildFMul(B, rl, D(1.5707963267948966), "");             /* radians */
        LLVMValueRef ql = LLVMBuildTrunc(B, nl, v.i32, "");

        LLVMValueRef large = LLVMBuildICmp(B, LLVMIntUGE, be, K32(152), "");
        th = em_vm_select(&v, large, rl, rs);
        n = em_vm_select(&v, large, ql, qs);
    }
    /* theta rounded once to float32 (half an ulp of theta, however small theta is),
     * then float32 minimax polynomials on [-pi/4, pi/4]: coefficients from the Cephes
     * Math Library (S. L. Moshier), sinf.c and cosf.c */
    static const double sc[] = {-1.6666654611e-1, 8.3321608736e-3, -1.9515295891e-4};
    static const double cc[] = {4.166664568298827e-2, -1.388731625493765e-3,
                                2.443315711809948e-5};
    LLVMValueRef tf = LLVMBuildFPTrunc(B, th, v.f32, "");
    LLVMValueRef z = LLVMBuildFMul(B, tf, tf, "");
    /* sin(t) = t + t z P(z) */
    LLVMValueRef s = em_vm_fma(&v, LLVMBuildFMul(B, tf, z, ""), em_vm_poly(&v, sc, 3, z), tf);
    /* cos(t) = 1 - z/2 + z^2 Q(z) */
    LLVMValueRef c = em_vm_fma(&v, LLVMBuildFMul(B, z, z, ""), em_vm_poly(&v, cc, 3, z),
                               em_vm_fma(&v, z, LLVMConstReal(v.f32, -0.5),
                                         LLVMConstReal(v.f32, 1.0)));
    LLVMValueRef q = n;
    if (is_cos)
        q = LLVMBuildAdd(B, q, K32(1), "");        /* cos(a) = sin(a + pi/2) */
    LLVMValueRef odd = LLVMBuildICmp(B, LLVMIntNE, LLVMBuildAnd(B, q, K32(1), ""), K32(0), "");
    LLVMValueRef neg = LLVMBuildICmp(B, LLVMIntNE, LLVMBuildAnd(B, q, K32(2), ""), K32(0), "");
    LLVMValueRef yf = em_vm_select(&v, odd, c, s);
    yf = em_vm_select(&v, neg, LLVMBuildFNeg(B, yf, ""), yf);
    if (!is_cos)   /* sin is odd: sin(x) = sign(x) sin(|x|) */
        yf = em_vm_select(&v, LLVMBuildICmp(B, LLVMIntSLT, bits, K32(0), ""),
                          LLVMBuildFNeg(B, yf, ""), yf);
    LLVMValueRef bad = LLVMBuildICmp(B, LLVMIntEQ, be, K32(0xff), "");      /* inf, NaN */
    yf = em_vm_select(&v, bad, LLVMConstReal(v.f32, NAN), yf);
#undef D
#undef K32
#undef L
    return em_vm_end(&v, yf);
}

LLVMValueRef
em_ir_sinf(LLVMModuleRef M)
{
    return build_trig(M, "em_sinf", false, true);
}

LLVMValueRef
em_ir_sinf_small(LLVMModuleRef M)
{
    return build_trig(M, "em_sinf_small", false, false);
}

LLVMValueRef
em_ir_cosf(LLVMModuleRef M)
{
    return build_trig(M, "em_cosf", true, true);
}

LLVMValueRef
em_ir_cosf_small(LLVMModuleRef M)
{
    return build_trig(M, "em_cosf_small", true, false);
}
