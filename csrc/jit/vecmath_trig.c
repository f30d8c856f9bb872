/* vecmath_trig.c: sinf and cosf as IR (vecmath.h), correct over the whole float range.
 *
 * Argument reduction (Payne and Hanek's method, in float64 arithmetic): |x| = M 2^k
 * with M a 24-bit integer. Of the bits b_j of 2/pi = sum b_j 2^-j, those with
 * k - j >= 2 only add multiples of 4 to |x| 2/pi (a whole number of turns), so
 * |x| 2/pi = M F_k (mod 4) with F_k = sum over j >= k - 1 of b_j 2^(k - j). A table
 * indexed by x's biased exponent holds F_k in three parts A + B + C of 28, 28 and 53
 * bits; M A and M B are exact float64 products. With p = M A mod 4 (exact),
 * n = round(p + M B) and r = ((p - n) + M B) + M C, |x| = (n + r) pi/2 (mod 2 pi) with
 * |r| <= 1/2 and r good to float64 rounding relative to r itself, however close |x|
 * is to a multiple of pi/2. Then theta = r pi/2 in [-pi/4, pi/4] and sin/cos of theta
 * by their Taylor series in float64 (degree 11 and 12; the truncation error is under
 * 2^-36), the quadrant n mod 4 choosing which and its sign; rounded once to float32.
 * The bits of 2/pi were computed with exact integer arithmetic (Machin's formula).
 * Special values as libm: sin(+-0) = +-0, cos(+-0) = 1, +-inf and NaN give NaN.
 */
#include "jit/vecmath.h"

#include <math.h>
#include <pthread.h>

/* 2/pi in hexadecimal: 0.A2F9836E... (256 bits) */
static const char two_over_pi[] =
    "A2F9836E4E441529FC2757D1F534DDC0DB6295993C439041FE5163ABDEBBC561";

static int
bit(int j)
{
    /* b_j, j >= 1: the (j - 1)th bit after the point */
    if (j < 1 || j > (int)(4 * (sizeof two_over_pi - 1)))
        return 0;
    char h = two_over_pi[(j - 1) / 4];
    int d = h <= '9' ? h - '0' : h - 'A' + 10;
    return (d >> (3 - (j - 1) % 4)) & 1;
}

/* sum of b_j 2^(k - j) for j in [lo, lo + len) */
static double
chunk(int k, int lo, int len)
{
    unsigned long long i = 0;
    for (int j = lo; j < lo + len; j++)
        i = (i << 1) | (unsigned long long)bit(j);
    return ldexp((double)i, k - (lo + len - 1));
}

static double table[3][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void
fill_table(void)
{
    for (int e = 0; e < 256; e++) {
        int k = (e == 0 ? 1 : e) - 150;         /* |x| = M 2^k */
        int j0 = k - 1 > 1 ? k - 1 : 1;
        table[0][e] = chunk(k, j0, 28);
        table[1][e] = chunk(k, j0 + 28, 28);
        table[2][e] = chunk(k, j0 + 56, 53);
    }
}

static LLVMValueRef
table_global(em_vm *v, int part)
{
    static const char *names[3] = {"em_2_over_pi_a", "em_2_over_pi_b", "em_2_over_pi_c"};
    LLVMValueRef g = LLVMGetNamedGlobal(v->M, names[part]);
    if (g != NULL)
        return g;
    pthread_once(&table_once, fill_table);
    LLVMValueRef vals[256];
    for (int e = 0; e < 256; e++)
        vals[e] = LLVMConstReal(v->f64, table[part][e]);
    LLVMTypeRef at = LLVMArrayType(v->f64, 256);
    g = LLVMAddGlobal(v->M, at, names[part]);
    LLVMSetInitializer(g, LLVMConstArray(v->f64, vals, 256));
    LLVMSetGlobalConstant(g, 1);
    LLVMSetLinkage(g, LLVMInternalLinkage);
    LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
    return g;
}

static LLVMValueRef
load_part(em_vm *v, int part, LLVMValueRef index)
{
    LLVMValueRef g = table_global(v, part);
    LLVMValueRef idx[2] = {LLVMConstInt(v->i64, 0, 0), index};
    LLVMValueRef p = LLVMBuildInBoundsGEP2(v->B, LLVMArrayType(v->f64, 256), g, idx, 2, "");
    return LLVMBuildLoad2(v->B, v->f64, p, "");
}

static LLVMValueRef
build_trig(LLVMModuleRef M, const char *name, bool is_cos)
{
    em_vm v;
    if (em_vm_begin(&v, M, name, 1))
        return v.fn;
    LLVMBuilderRef B = v.B;
    LLVMValueRef x = LLVMGetParam(v.fn, 0);
#define D(c) LLVMConstReal(v.f64, (c))
#define K32(c) LLVMConstInt(v.i32, (unsigned long long)(c), 1)
    LLVMValueRef bits = LLVMBuildBitCast(B, x, v.i32, "");
    LLVMValueRef be = LLVMBuildAnd(B, LLVMBuildLShr(B, bits, K32(23), ""), K32(0xff), "");
    LLVMValueRef normal = LLVMBuildICmp(B, LLVMIntNE, be, K32(0), "");
    LLVMValueRef mi = LLVMBuildOr(B, LLVMBuildAnd(B, bits, K32(0x7fffff), ""),
                                  em_vm_select(&v, normal, K32(0x800000), K32(0)), "");
    LLVMValueRef m = LLVMBuildSIToFP(B, mi, v.f64, "");
    LLVMValueRef index = LLVMBuildZExt(B, be, v.i64, "");
    LLVMValueRef pa = LLVMBuildFMul(B, m, load_part(&v, 0, index), "");
    LLVMValueRef pb = LLVMBuildFMul(B, m, load_part(&v, 1, index), "");
    LLVMValueRef pc = LLVMBuildFMul(B, m, load_part(&v, 2, index), "");
    /* p = M A mod 4 */
    LLVMValueRef p = em_vm_fma(&v, em_vm_floor(&v, LLVMBuildFMul(B, pa, D(0.25), "")),
                               D(-4.0), pa);
    LLVMValueRef n = em_vm_floor(&v, LLVMBuildFAdd(B, LLVMBuildFAdd(B, p, pb, ""), D(0.5), ""));
    LLVMValueRef r = LLVMBuildFAdd(B, LLVMBuildFAdd(B, LLVMBuildFSub(B, p, n, ""), pb, ""),
                                   pc, "");
    LLVMValueRef th = LLVMBuildFMul(B, r, D(1.5707963267948966), "");
    LLVMValueRef t2 = LLVMBuildFMul(B, th, th, "");
    /* Taylor series: sin(t) = t (1 - t^2/3! + ...), cos(t) = 1 - t^2/2! + ... */
    double sc[6], cc[7], f = 1.0;
    for (int i = 0; i < 6; i++) {
        sc[i] = (i % 2 ? -1.0 : 1.0) / f;
        f *= (2 * i + 2) * (2 * i + 3);
    }
    f = 1.0;
    for (int i = 0; i < 7; i++) {
        cc[i] = (i % 2 ? -1.0 : 1.0) / f;
        f *= (2 * i + 1) * (2 * i + 2);
    }
    LLVMValueRef s = LLVMBuildFMul(B, th, em_vm_poly(&v, sc, 6, t2), "");
    LLVMValueRef c = em_vm_poly(&v, cc, 7, t2);
    LLVMValueRef q = LLVMBuildFPToSI(B, n, v.i32, "");
    if (is_cos)
        q = LLVMBuildAdd(B, q, K32(1), "");        /* cos(a) = sin(a + pi/2) */
    LLVMValueRef odd = LLVMBuildICmp(B, LLVMIntNE, LLVMBuildAnd(B, q, K32(1), ""), K32(0), "");
    LLVMValueRef neg = LLVMBuildICmp(B, LLVMIntNE, LLVMBuildAnd(B, q, K32(2), ""), K32(0), "");
    LLVMValueRef y = em_vm_select(&v, odd, c, s);
    y = em_vm_select(&v, neg, LLVMBuildFNeg(B, y, ""), y);
    LLVMValueRef yf = LLVMBuildFPTrunc(B, y, v.f32, "");
    if (!is_cos)   /* sin is odd: sin(x) = sign(x) sin(|x|) */
        yf = em_vm_select(&v, LLVMBuildICmp(B, LLVMIntSLT, bits, K32(0), ""),
                          LLVMBuildFNeg(B, yf, ""), yf);
    LLVMValueRef bad = LLVMBuildICmp(B, LLVMIntEQ, be, K32(0xff), "");      /* inf, NaN */
    yf = em_vm_select(&v, bad, LLVMConstReal(v.f32, NAN), yf);
#undef D
#undef K32
    return em_vm_end(&v, yf);
}

LLVMValueRef
em_ir_sinf(LLVMModuleRef M)
{
    return build_trig(M, "em_sinf", false);
}

LLVMValueRef
em_ir_cosf(LLVMModuleRef M)
{
    return build_trig(M, "em_cosf", true);
}
