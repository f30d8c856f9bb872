/* codegen_random.c: the loop IR's random draws (rand, randn), emitted inline as IR.
 *
 * A draw is Philox4x32-10 (Salmon, Moraes, Dror, Shaw, SC 2011) of a 128-bit counter
 * under a 64-bit key: key = the seed (low, high 32 bits), counter = (index low, index
 * high, offset low, offset high), the layout of python/ember/philox.py, which is the
 * reference the kernels are tested against. Each round is two 32 x 32 -> 64-bit
 * products (zext, mul, shift, trunc) and xors: no branch, no call, no state carried
 * from one element to the next, so the loop vectoriser widens it like any arithmetic
 * (vpmuludq) and any element can be drawn again, in any kernel, from (seed, offset,
 * index) alone.
 *
 * From the four words: rand float32 is (w0 >> 8) * 2^-24, float64
 * ((w0 >> 5) * 2^26 + (w1 >> 6)) * 2^-53 (multiples of the ulp below 1: never 1);
 * randn is Box-Muller, sqrt(-2 log u1) cos(2 pi u2) with u1 = 1 - (w0 >> 8) * 2^-24 in
 * (0, 1] and u2 = (w2 >> 8) * 2^-24: float32 computes with the IR logf and cosf of
 * vecmath.h (vectorisable, a few ulp), float64 with libm.
 */
#include "jit/codegen.h"
#include "jit/vecmath.h"

/* Salmon et al. 2011, Philox4x32: multipliers and Weyl key increments */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define PHILOX_ROUNDS 10

typedef struct {
    LLVMBuilderRef B;
    LLVMTypeRef i32, i64;
} philox_t;

static LLVMValueRef
c32(philox_t *p, unsigned v)
{
    return LLVMConstInt(p->i32, v, 0);
}

/* the high and low 32 bits of the 64-bit product a * m */
static void
mulhilo(philox_t *p, LLVMValueRef a, unsigned m, LLVMValueRef *hi, LLVMValueRef *lo)
{
    LLVMValueRef prod = LLVMBuildMul(p->B, LLVMBuildZExt(p->B, a, p->i64, ""),
                                     LLVMConstInt(p->i64, m, 0), "");
    *lo = LLVMBuildTrunc(p->B, prod, p->i32, "");
    *hi = LLVMBuildTrunc(p->B, LLVMBuildLShr(p->B, prod, LLVMConstInt(p->i64, 32, 0), ""),
                         p->i32, "");
}

static LLVMValueRef
low32(philox_t *p, LLVMValueRef v)
{
    return LLVMBuildTrunc(p->B, v, p->i32, "");
}

static LLVMValueRef
high32(philox_t *p, LLVMValueRef v)
{
    return LLVMBuildTrunc(p->B, LLVMBuildLShr(p->B, v, LLVMConstInt(p->i64, 32, 0), ""),
                          p->i32, "");
}

/* The four words of Philox4x32-10 under key seed at counter (index, offset). */
static void
philox4x32(philox_t *p, LLVMValueRef seed, LLVMValueRef offset, LLVMValueRef index,
           LLVMValueRef w[4])
{
    LLVMBuilderRef B = p->B;
    LLVMValueRef c0 = low32(p, index), c1 = high32(p, index);
    LLVMValueRef c2 = low32(p, offset), c3 = high32(p, offset);
    LLVMValueRef k0 = low32(p, seed), k1 = high32(p, seed);
    for (int r = 0; r < PHILOX_ROUNDS; r++) {
        LLVMValueRef hi0, lo0, hi1, lo1;
        mulhilo(p, c0, PHILOX_M0, &hi0, &lo0);
        mulhilo(p, c2, PHILOX_M1, &hi1, &lo1);
        c0 = LLVMBuildXor(B, LLVMBuildXor(B, hi1, c1, ""), k0, "");
        c1 = lo1;
        c2 = LLVMBuildXor(B, LLVMBuildXor(B, hi0, c3, ""), k1, "");
        c3 = lo0;
        if (r + 1 < PHILOX_ROUNDS) {
            k0 = LLVMBuildAdd(B, k0, c32(p, PHILOX_W0), "");
            k1 = LLVMBuildAdd(B, k1, c32(p, PHILOX_W1), "");
        }
    }
    w[0] = c0;
    w[1] = c1;
    w[2] = c2;
    w[3] = c3;
}

/* (w >> 8) * 2^-24 in float type ft: exact, in [0, 1) */
static LLVMValueRef
unit24(philox_t *p, LLVMValueRef w, LLVMTypeRef ft)
{
    /* below 2^24, so the signed conversion (which every vector ISA has) is exact */
    LLVMValueRef top = LLVMBuildLShr(p->B, w, c32(p, 8), "");
    return LLVMBuildFMul(p->B, LLVMBuildSIToFP(p->B, top, ft, ""),
                         LLVMConstReal(ft, 0x1p-24), "");
}

static LLVMValueRef
call1(em_cg *g, LLVMValueRef fn, LLVMValueRef a)
{
    return LLVMBuildCall2(g->B, LLVMGlobalGetValueType(fn), fn, &a, 1, "");
}

LLVMValueRef
em_cg_random(em_cg *g, em_ir_t op, em_dtype_t t, LLVMValueRef seed, LLVMValueRef offset,
             LLVMValueRef index)
{
    philox_t p = {g->B, LLVMInt32TypeInContext(g->C), g->i64};
    LLVMTypeRef ft = em_cg_reg_type(g, t);
    LLVMValueRef w[4];
    if ((t != EM_FLOAT32 && t != EM_FLOAT64) || (op != EM_IR_RAND && op != EM_IR_RANDN)) {
        PyErr_Format(PyExc_SystemError, "ember JIT: %s is not a random draw of a float",
                     em_ir_info[op].name);
        return NULL;
    }
    philox4x32(&p, seed, offset, index, w);
    if (op == EM_IR_RAND) {
        if (t == EM_FLOAT32)
            return unit24(&p, w[0], ft);
        /* 27 bits of w0 above 26 bits of w1: an integer below 2^53, exact in float64 */
        LLVMValueRef a = LLVMBuildZExt(g->B, LLVMBuildLShr(g->B, w[0], c32(&p, 5), ""),
                                       g->i64, "");
        LLVMValueRef b = LLVMBuildZExt(g->B, LLVMBuildLShr(g->B, w[1], c32(&p, 6), ""),
                                       g->i64, "");
        LLVMValueRef m = LLVMBuildOr(
            g->B, LLVMBuildShl(g->B, a, LLVMConstInt(g->i64, 26, 0), ""), b, "");
        return LLVMBuildFMul(g->B, LLVMBuildSIToFP(g->B, m, ft, ""),
                             LLVMConstReal(ft, 0x1p-53), "");
    }
    /* Box-Muller: u1 in (0, 1], so its logarithm is finite */
    LLVMValueRef u1 = LLVMBuildFSub(g->B, LLVMConstReal(ft, 1.0), unit24(&p, w[0], ft), "");
    LLVMValueRef u2 = unit24(&p, w[2], ft);
    LLVMValueRef lg, cs;
    LLVMValueRef angle = LLVMBuildFMul(g->B, u2, LLVMConstReal(ft, 6.283185307179586), "");
    if (t == EM_FLOAT32) {
        lg = call1(g, em_ir_logf(g->M), u1);
        cs = call1(g, em_ir_cosf(g->M), angle);
    }
    else {
        lg = call1(g, em_ir_libm(g->M, "log", ft, 1), u1);
        cs = call1(g, em_ir_libm(g->M, "cos", ft, 1), angle);
    }
    LLVMValueRef r2 = LLVMBuildFMul(g->B, LLVMConstReal(ft, -2.0), lg, "");
    unsigned id = LLVMLookupIntrinsicID("llvm.sqrt", 9);
    LLVMValueRef sqrt_fn = LLVMGetIntrinsicDeclaration(g->M, id, &ft, 1);
    LLVMValueRef r = LLVMBuildCall2(g->B, LLVMIntrinsicGetType(g->C, id, &ft, 1), sqrt_fn,
                                    &r2, 1, "");
    return LLVMBuildFMul(g->B, r, cs, "");
}
