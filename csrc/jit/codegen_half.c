/* codegen_half.c: float16 and bfloat16, the storage dtypes compiled code computes in
 * float32.
 *
 * A register of either dtype holds its value widened to float32 (exactly: every
 * float16 and bfloat16 is a float32), so a cast from one to float32 is free and the
 * only operations of theirs are loads (widen), stores (narrow) and casts to them
 * (narrow, then widen again: a float32 rounded to the dtype). Memory holds their 16
 * bits as i16. Narrowing rounds to nearest, ties to even, as NumPy's and ml_dtypes'
 * casts (eager's) do, and as PyTorch does.
 *
 * bfloat16 is converted with integer operations (LLVM 14 aborts on any arithmetic or
 * extension of its `bfloat` type): widening is a shift; narrowing adds 0x7fff plus
 * the lowest kept bit before dropping 16 bits. Where the target has AVX512_BF16 (and
 * AVX512VL), narrowing is its instruction instead (vcvtneps2bf16, 1.3x the integer
 * sequence's throughput on cache-resident data here), called as a native conversion
 * (below) the loop vectoriser widens to 8 or 16 lanes. The instruction treats
 * float32 subnormals (below 2^-126) as zeros, where the integer sequence and eager
 * round them; a NaN stays a quiet NaN of its sign.
 *
 * float16 converts with F16C's instructions (vcvtph2ps, vcvtps2ph) where the target
 * has them at AVX-512 width, called the same way: LLVM 14 has no legal vector `half`
 * type on x86 and, in a kernel of any size, scalarises some `fpext`/`fptrunc` of
 * `<16 x half>` element by element (a tanh/sigmoid chain ran at 0.12 Gelem/s, ten
 * times slower than with integer conversions). Elsewhere float16 converts with integer
 * operations (without F16C, LLVM's would call compiler-rt functions the process does
 * not have).
 */
#include "jit/codegen.h"

#include <string.h>

static LLVMValueRef
i32c(em_cg *g, unsigned long long v)
{
    return LLVMConstInt(LLVMInt32TypeInContext(g->C), v, 0);
}

static LLVMValueRef
f32c(em_cg *g, double v)
{
    return LLVMConstReal(LLVMFloatTypeInContext(g->C), v);
}

/* ------------------------------------------------------------------ bfloat16 */

/* bits << 16 is the float32 */
static LLVMValueRef
bf16_widen(em_cg *g, LLVMValueRef h)
{
    LLVMBuilderRef B = g->B;
    LLVMValueRef w = LLVMBuildZExt(B, h, LLVMInt32TypeInContext(g->C), "");
    return LLVMBuildBitCast(B, LLVMBuildShl(B, w, i32c(g, 16), ""),
                            LLVMFloatTypeInContext(g->C), "");
}

/* the high 16 bits of bits + 0x7fff + (bit 16 of bits): round to nearest, ties to even
 * (a carry into the exponent is right, up to infinity); a NaN keeps its sign and
 * becomes the quiet NaN 0x7fc0, as ml_dtypes makes it */
static LLVMValueRef
bf16_narrow(em_cg *g, LLVMValueRef v)
{
    LLVMBuilderRef B = g->B;
    LLVMTypeRef i32 = LLVMInt32TypeInContext(g->C);
    LLVMValueRef bits = LLVMBuildBitCast(B, v, i32, "");
    LLVMValueRef odd = LLVMBuildAnd(B, LLVMBuildLShr(B, bits, i32c(g, 16), ""),
                                    i32c(g, 1), "");
    LLVMValueRef r = LLVMBuildAdd(B, bits, LLVMBuildAdd(B, odd, i32c(g, 0x7fff), ""), "");
    r = LLVMBuildLShr(B, r, i32c(g, 16), "");
    LLVMValueRef nan = LLVMBuildOr(
        B, LLVMBuildAnd(B, LLVMBuildLShr(B, bits, i32c(g, 16), ""), i32c(g, 0x8000), ""),
        i32c(g, 0x7fc0), "");
    r = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUNO, v, v, ""), nan, r, "");
    return LLVMBuildTrunc(B, r, LLVMInt16TypeInContext(g->C), "");
}

/* ------------------------------------------------------------------ native conversions
 *
 * A conversion instruction the loop vectoriser cannot emit by itself (a target
 * intrinsic) is called through a scalar function, never inlined before vectorising,
 * whose call sites name its vector variants ("vector-function-abi-variant"): the
 * vectoriser calls a variant instead, and the pipeline's last always-inline inlines it.
 * @llvm.compiler.used keeps the variants alive until then. */

typedef LLVMValueRef (*conversion_body)(em_cg *g, LLVMBuilderRef B, LLVMValueRef x,
                                        unsigned lanes);

/* Appends fns to @llvm.compiler.used (one global per module). */
static void
keep_alive(em_cg *g, LLVMValueRef *fns, unsigned n)
{
    LLVMTypeRef i8p = LLVMPointerType(LLVMInt8TypeInContext(g->C), 0);
    LLVMValueRef items[8];
    unsigned count = 0;
    LLVMValueRef old = LLVMGetNamedGlobal(g->M, "llvm.compiler.used");
    if (old != NULL) {
        LLVMValueRef init = LLVMGetInitializer(old);
        int k = LLVMGetNumOperands(init);
        for (int i = 0; i < k && count < 8; i++)
            items[count++] = LLVMGetOperand(init, (unsigned)i);
        LLVMDeleteGlobal(old);
    }
    for (unsigned i = 0; i < n && count < 8; i++)
        items[count++] = LLVMConstBitCast(fns[i], i8p);
    LLVMValueRef keep = LLVMAddGlobal(g->M, LLVMArrayType(i8p, count), "llvm.compiler.used");
    LLVMSetLinkage(keep, LLVMAppendingLinkage);
    LLVMSetSection(keep, "llvm.metadata");
    LLVMSetInitializer(keep, LLVMConstArray(i8p, items, count));
}

static void
fn_attrs(LLVMContextRef C, LLVMValueRef fn, const char *first)
{
    const char *names[] = {first, "nounwind", "readnone", "willreturn"};
    for (int i = 0; i < 4; i++) {
        unsigned kind = LLVMGetEnumAttributeKindForName(names[i], strlen(names[i]));
        LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                                LLVMCreateEnumAttribute(C, kind, 0));
    }
}

static LLVMTypeRef
lanes_of(LLVMTypeRef t, unsigned lanes)
{
    return lanes == 1 ? t : LLVMVectorType(t, lanes);
}

/* `to name(from)` computed by body, and its variants name_v<lanes> for each of
 * lanes[0..n) (made once per module); then a call of it on x. */
static LLVMValueRef
call_vectorisable(em_cg *g, const char *name, LLVMTypeRef from, LLVMTypeRef to,
                  const unsigned *lanes, unsigned n, conversion_body body, LLVMValueRef x)
{
    char vname[64], attr[512];
    size_t len = 0;
    attr[0] = '\0';
    for (unsigned k = 0; k < n; k++) {
        int w = snprintf(attr + len, sizeof attr - len, "%s_ZGV_LLVM_N%uv_%s(%s_v%u)",
                         k ? "," : "", lanes[k], name, name, lanes[k]);
        if (w > 0 && (size_t)w < sizeof attr - len)
            len += (size_t)w;
    }
    LLVMValueRef fn = LLVMGetNamedFunction(g->M, name);
    if (fn == NULL) {
        LLVMBuilderRef B = LLVMCreateBuilderInContext(g->C);
        LLVMValueRef variants[4];
        for (unsigned k = 0; k < n && k < 4; k++) {
            LLVMTypeRef vf = lanes_of(from, lanes[k]);
            snprintf(vname, sizeof vname, "%s_v%u", name, lanes[k]);
            LLVMValueRef v = LLVMAddFunction(
                g->M, vname, LLVMFunctionType(lanes_of(to, lanes[k]), &vf, 1, 0));
            LLVMSetLinkage(v, LLVMInternalLinkage);
            fn_attrs(g->C, v, "alwaysinline");
            LLVMPositionBuilderAtEnd(B, LLVMAppendBasicBlockInContext(g->C, v, "entry"));
            LLVMBuildRet(B, body(g, B, LLVMGetParam(v, 0), lanes[k]));
            variants[k] = v;
        }
        keep_alive(g, variants, n < 4 ? n : 4);
        fn = LLVMAddFunction(g->M, name, LLVMFunctionType(to, &from, 1, 0));
        LLVMSetLinkage(fn, LLVMInternalLinkage);
        fn_attrs(g->C, fn, "noinline");
        LLVMPositionBuilderAtEnd(B, LLVMAppendBasicBlockInContext(g->C, fn, "entry"));
        LLVMBuildRet(B, body(g, B, LLVMGetParam(fn, 0), 1));
        LLVMDisposeBuilder(B);
    }
    static const char key[] = "vector-function-abi-variant";
    LLVMValueRef call = LLVMBuildCall2(g->B, LLVMGlobalGetValueType(fn), fn, &x, 1, "");
    LLVMAddCallSiteAttribute(call, LLVMAttributeFunctionIndex,
                             LLVMCreateStringAttribute(g->C, key, sizeof key - 1, attr,
                                                       (unsigned)len));
    return call;
}

static LLVMValueRef
x86_intrinsic(em_cg *g, LLVMBuilderRef B, const char *name, LLVMValueRef *args, unsigned n)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(g->M, id, NULL, 0);
    return LLVMBuildCall2(B, LLVMIntrinsicGetType(g->C, id, NULL, 0), f, args, n, "");
}

/* x as an 8 or 16 lane vector (a scalar in lane 0), and lane 0 of a result back */
static LLVMValueRef
widen_lanes(em_cg *g, LLVMBuilderRef B, LLVMValueRef x, unsigned lanes, unsigned want)
{
    if (lanes == want)
        return x;
    LLVMValueRef zero = LLVMConstInt(LLVMInt32TypeInContext(g->C), 0, 0);
    return LLVMBuildInsertElement(B, LLVMGetUndef(LLVMVectorType(LLVMTypeOf(x), want)), x,
                                  zero, "");
}

static LLVMValueRef
lane0(em_cg *g, LLVMBuilderRef B, LLVMValueRef v, unsigned lanes)
{
    if (lanes != 1)
        return v;
    return LLVMBuildExtractElement(B, v, LLVMConstInt(LLVMInt32TypeInContext(g->C), 0, 0), "");
}

/* vcvtneps2bf16 (AVX512_BF16, AVX512VL) */
static LLVMValueRef
bf16_narrow_body(em_cg *g, LLVMBuilderRef B, LLVMValueRef x, unsigned lanes)
{
    unsigned n = lanes == 16 ? 16 : 8;
    LLVMValueRef v = widen_lanes(g, B, x, lanes, n);
    v = x86_intrinsic(g, B, n == 16 ? "llvm.x86.avx512bf16.cvtneps2bf16.512"
                                    : "llvm.x86.avx512bf16.cvtneps2bf16.256", &v, 1);
    return lane0(g, B, v, lanes);
}

/* vcvtph2ps (F16C, AVX512F): 16 lanes by the intrinsic; a scalar by LLVM's scalar
 * `half` extension (F16C's scalar form) */
static LLVMValueRef
f16_widen_body(em_cg *g, LLVMBuilderRef B, LLVMValueRef x, unsigned lanes)
{
    LLVMTypeRef f32 = LLVMFloatTypeInContext(g->C);
    if (lanes == 1)
        return LLVMBuildFPExt(B, LLVMBuildBitCast(B, x, LLVMHalfTypeInContext(g->C), ""),
                              f32, "");
    LLVMValueRef args[4] = {
        x, LLVMConstNull(LLVMVectorType(f32, 16)),
        LLVMConstInt(LLVMInt16TypeInContext(g->C), 0xffff, 0),
        LLVMConstInt(LLVMInt32TypeInContext(g->C), 4, 0)};      /* current rounding */
    return x86_intrinsic(g, B, "llvm.x86.avx512.mask.vcvtph2ps.512", args, 4);
}

/* vcvtps2ph with rounding from MXCSR (to nearest even) */
static LLVMValueRef
f16_narrow_body(em_cg *g, LLVMBuilderRef B, LLVMValueRef x, unsigned lanes)
{
    LLVMTypeRef i16 = LLVMInt16TypeInContext(g->C);
    LLVMValueRef imm = LLVMConstInt(LLVMInt32TypeInContext(g->C), 4, 0);
    if (lanes == 16) {
        LLVMValueRef args[4] = {x, imm, LLVMConstNull(LLVMVectorType(i16, 16)),
                                LLVMConstInt(i16, 0xffff, 0)};
        return x86_intrinsic(g, B, "llvm.x86.avx512.mask.vcvtps2ph.512", args, 4);
    }
    LLVMValueRef args[2] = {widen_lanes(g, B, x, lanes, 8), imm};
    return lane0(g, B, x86_intrinsic(g, B, "llvm.x86.vcvtps2ph.256", args, 2), lanes);
}

/* ------------------------------------------------------------------ float16 */

/* Integer widening: a normal number's bits << 13 rebiased by 127 - 15; a subnormal
 * (and zero) is its mantissa times 2^-24, converted from the integer (no float
 * subnormal is ever an operand: those are slow on x86); infinity and NaN (exponent 31)
 * get float32's all-ones exponent. */
static LLVMValueRef
f16_widen_bits(em_cg *g, LLVMValueRef h)
{
    LLVMBuilderRef B = g->B;
    LLVMTypeRef i32 = LLVMInt32TypeInContext(g->C), f32 = LLVMFloatTypeInContext(g->C);
    LLVMValueRef w = LLVMBuildZExt(B, h, i32, "");
    LLVMValueRef sign = LLVMBuildShl(B, LLVMBuildAnd(B, w, i32c(g, 0x8000), ""),
                                     i32c(g, 16), "");
    LLVMValueRef mag = LLVMBuildAnd(B, w, i32c(g, 0x7fff), "");
    LLVMValueRef sh = LLVMBuildShl(B, mag, i32c(g, 13), "");
    LLVMValueRef normal = LLVMBuildAdd(B, sh, i32c(g, 112u << 23), "");
    LLVMValueRef sub = LLVMBuildBitCast(
        B, LLVMBuildFMul(B, LLVMBuildUIToFP(B, mag, f32, ""), f32c(g, 0x1p-24), ""), i32, "");
    LLVMValueRef special = LLVMBuildOr(B, sh, i32c(g, 0x7f800000), "");
    LLVMValueRef r = LLVMBuildSelect(
        B, LLVMBuildICmp(B, LLVMIntUGE, mag, i32c(g, 0x7c00), ""), special, normal, "");
    r = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntULT, mag, i32c(g, 0x400), ""), sub, r, "");
    return LLVMBuildBitCast(B, LLVMBuildOr(B, r, sign, ""), f32, "");
}

/* Without F16C, round to nearest even on the magnitude's bits: at or above 65520
 * (2^16 - 2^4, halfway to the next binade past the largest float16) infinity, NaN a
 * quiet NaN with the top of its payload; below 2^-14 (float16's subnormals) adding
 * 0.5 makes the float32 addition round at float16's subnormal spacing, the result's
 * low bits being the float16; otherwise rebias the exponent and add 0xfff plus the
 * kept lowest bit before dropping 13 bits. */
static LLVMValueRef
f16_narrow_bits(em_cg *g, LLVMValueRef v)
{
    LLVMBuilderRef B = g->B;
    LLVMTypeRef i32 = LLVMInt32TypeInContext(g->C), f32 = LLVMFloatTypeInContext(g->C);
    LLVMValueRef bits = LLVMBuildBitCast(B, v, i32, "");
    LLVMValueRef sign = LLVMBuildAnd(B, LLVMBuildLShr(B, bits, i32c(g, 16), ""),
                                     i32c(g, 0x8000), "");
    LLVMValueRef mag = LLVMBuildAnd(B, bits, i32c(g, 0x7fffffff), "");
    /* NaN: quiet, top ten payload bits kept; infinity and overflow: 0x7c00 */
    LLVMValueRef nan = LLVMBuildOr(B, i32c(g, 0x7e00),
                                   LLVMBuildAnd(B, LLVMBuildLShr(B, mag, i32c(g, 13), ""),
                                                i32c(g, 0x3ff), ""), "");
    LLVMValueRef over = LLVMBuildSelect(
        B, LLVMBuildICmp(B, LLVMIntUGT, mag, i32c(g, 0x7f800000), ""), nan,
        i32c(g, 0x7c00), "");
    /* subnormal (and zero): (|v| + 0.5) - the bits of 0.5, exact in the low bits */
    LLVMValueRef magf = LLVMBuildBitCast(B, mag, f32, "");
    LLVMValueRef sub = LLVMBuildSub(
        B, LLVMBuildBitCast(B, LLVMBuildFAdd(B, magf, f32c(g, 0.5), ""), i32, ""),
        i32c(g, 0x3f000000), "");
    /* normal: rebias (127 - 15) and round */
    LLVMValueRef odd = LLVMBuildAnd(B, LLVMBuildLShr(B, mag, i32c(g, 13), ""),
                                    i32c(g, 1), "");
    /* -112 << 23 (the exponent's rebias) + 0xfff */
    LLVMValueRef norm = LLVMBuildAdd(B, mag, i32c(g, 0xc8000fffULL), "");
    norm = LLVMBuildLShr(B, LLVMBuildAdd(B, norm, odd, ""), i32c(g, 13), "");
    LLVMValueRef r = LLVMBuildSelect(
        B, LLVMBuildICmp(B, LLVMIntULT, mag, i32c(g, 113u << 23), ""), sub, norm, "");
    r = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntUGE, mag, i32c(g, 0x477ff000), ""),
                        over, r, "");
    return LLVMBuildTrunc(B, LLVMBuildOr(B, r, sign, ""), LLVMInt16TypeInContext(g->C), "");
}

/* ------------------------------------------------------------------ both */

LLVMValueRef
em_cg_widen(em_cg *g, em_dtype_t t, LLVMValueRef h)
{
    static const unsigned sixteen[] = {16};
    if (t == EM_BFLOAT16)
        return bf16_widen(g, h);
    if (!g->f16_native)
        return f16_widen_bits(g, h);
    return call_vectorisable(g, "em_f16_widen", LLVMInt16TypeInContext(g->C),
                             LLVMFloatTypeInContext(g->C), sixteen, 1, f16_widen_body, h);
}

LLVMValueRef
em_cg_narrow(em_cg *g, em_dtype_t t, LLVMValueRef v)
{
    static const unsigned lanes[] = {8, 16};
    LLVMTypeRef f32 = LLVMFloatTypeInContext(g->C), i16 = LLVMInt16TypeInContext(g->C);
    if (t == EM_BFLOAT16 && g->bf16_native)
        return call_vectorisable(g, "em_bf16_narrow", f32, i16, lanes, 2, bf16_narrow_body,
                                 v);
    if (t == EM_BFLOAT16)
        return bf16_narrow(g, v);
    if (!g->f16_native)
        return f16_narrow_bits(g, v);
    return call_vectorisable(g, "em_f16_narrow", f32, i16, lanes, 2, f16_narrow_body, v);
}
