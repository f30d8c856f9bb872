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
 * AVX512VL), narrowing is its instruction instead (vcvtneps2bf16, 1.2-1.8x the
 * integer sequence's throughput on cache-resident data here): a call of a scalar
 * function em_bf16_narrow whose call site names vector variants (the VFABI
 * attribute "vector-function-abi-variant"), so the loop vectoriser widens it to 8 or
 * 16 lanes; the variants are always-inline and jit.py's pipeline inlines them after
 * vectorising. The instruction, like PyTorch's on such hosts, treats float32
 * subnormals (below 2^-126) as zero, where the integer sequence and eager round them;
 * a NaN stays a quiet NaN of its sign.
 *
 * float16 uses LLVM's `half` conversions where the target has F16C (vcvtph2ps,
 * vcvtps2ph, vectorised); without F16C those would become calls of compiler-rt
 * functions the process does not have, so the same conversions are emitted with
 * integer operations instead.
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

/* The AVX512_BF16 conversion of n floats (4 < n: 8 or 16) to bfloat16 bits. */
static LLVMValueRef
cvtneps2bf16(LLVMModuleRef M, LLVMBuilderRef B, LLVMValueRef v, unsigned n)
{
    const char *name = n == 16 ? "llvm.x86.avx512bf16.cvtneps2bf16.512"
                               : "llvm.x86.avx512bf16.cvtneps2bf16.256";
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(M, id, NULL, 0);
    return LLVMBuildCall2(B, LLVMIntrinsicGetType(LLVMGetModuleContext(M), id, NULL, 0), f,
                          &v, 1, "");
}

static void
fn_attrs(LLVMContextRef C, LLVMValueRef fn, const char **names, int n)
{
    for (int i = 0; i < n; i++) {
        unsigned kind = LLVMGetEnumAttributeKindForName(names[i], strlen(names[i]));
        LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                                LLVMCreateEnumAttribute(C, kind, 0));
    }
}

/* em_bf16_narrow (i16 (float), never inlined: the vectoriser must see the call) and
 * its vector variants em_bf16_narrow_v8 and _v16, kept alive through the pipeline's
 * first inlining by @llvm.compiler.used; made once per module. */
static LLVMValueRef
bf16_native_fn(em_cg *g)
{
    static const char *scalar_attrs[] = {"noinline", "nounwind", "readnone", "willreturn"};
    static const char *vector_attrs[] = {"alwaysinline", "nounwind", "readnone",
                                         "willreturn"};
    LLVMValueRef fn = LLVMGetNamedFunction(g->M, "em_bf16_narrow");
    if (fn != NULL)
        return fn;
    LLVMContextRef C = g->C;
    LLVMTypeRef f32 = LLVMFloatTypeInContext(C), i16 = LLVMInt16TypeInContext(C);
    LLVMBuilderRef B = LLVMCreateBuilderInContext(C);
    LLVMValueRef used[2];
    for (unsigned k = 0; k < 2; k++) {
        unsigned n = k == 0 ? 8 : 16;
        LLVMTypeRef vf = LLVMVectorType(f32, n), vi = LLVMVectorType(i16, n);
        LLVMValueRef vfn = LLVMAddFunction(g->M, n == 8 ? "em_bf16_narrow_v8"
                                                        : "em_bf16_narrow_v16",
                                           LLVMFunctionType(vi, &vf, 1, 0));
        LLVMSetLinkage(vfn, LLVMInternalLinkage);
        fn_attrs(C, vfn, vector_attrs, 4);
        LLVMPositionBuilderAtEnd(B, LLVMAppendBasicBlockInContext(C, vfn, "entry"));
        LLVMBuildRet(B, cvtneps2bf16(g->M, B, LLVMGetParam(vfn, 0), n));
        used[k] = LLVMConstBitCast(vfn, LLVMPointerType(LLVMInt8TypeInContext(C), 0));
    }
    fn = LLVMAddFunction(g->M, "em_bf16_narrow", LLVMFunctionType(i16, &f32, 1, 0));
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    fn_attrs(C, fn, scalar_attrs, 4);
    LLVMPositionBuilderAtEnd(B, LLVMAppendBasicBlockInContext(C, fn, "entry"));
    LLVMTypeRef v8 = LLVMVectorType(f32, 8);
    LLVMValueRef zero = LLVMConstInt(LLVMInt32TypeInContext(C), 0, 0);
    LLVMValueRef x = LLVMBuildInsertElement(B, LLVMGetUndef(v8), LLVMGetParam(fn, 0), zero, "");
    LLVMBuildRet(B, LLVMBuildExtractElement(B, cvtneps2bf16(g->M, B, x, 8), zero, ""));
    LLVMDisposeBuilder(B);
    LLVMTypeRef at = LLVMArrayType(LLVMPointerType(LLVMInt8TypeInContext(C), 0), 2);
    LLVMValueRef keep = LLVMAddGlobal(g->M, at, "llvm.compiler.used");
    LLVMSetLinkage(keep, LLVMAppendingLinkage);
    LLVMSetSection(keep, "llvm.metadata");
    LLVMSetInitializer(keep, LLVMConstArray(LLVMPointerType(LLVMInt8TypeInContext(C), 0),
                                            used, 2));
    return fn;
}

static LLVMValueRef
bf16_narrow_native(em_cg *g, LLVMValueRef v)
{
    static const char variants[] =
        "_ZGV_LLVM_N8v_em_bf16_narrow(em_bf16_narrow_v8),"
        "_ZGV_LLVM_N16v_em_bf16_narrow(em_bf16_narrow_v16)";
    static const char key[] = "vector-function-abi-variant";
    LLVMValueRef fn = bf16_native_fn(g);
    LLVMValueRef call = LLVMBuildCall2(g->B, LLVMGlobalGetValueType(fn), fn, &v, 1, "");
    LLVMAddCallSiteAttribute(call, LLVMAttributeFunctionIndex,
                             LLVMCreateStringAttribute(g->C, key, sizeof key - 1, variants,
                                                       sizeof variants - 1));
    return call;
}

/* ------------------------------------------------------------------ float16 */

/* Without F16C: the magnitude's bits << 13 are a float32 2^112 times too small (also
 * for subnormals: multiplying by a power of two is exact); infinity and NaN (exponent
 * 31) get float32's all-ones exponent instead. */
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
    LLVMValueRef fin = LLVMBuildBitCast(
        B, LLVMBuildFMul(B, LLVMBuildBitCast(B, sh, f32, ""), f32c(g, 0x1p112), ""), i32, "");
    LLVMValueRef special = LLVMBuildOr(B, sh, i32c(g, 0x7f800000), "");
    LLVMValueRef big = LLVMBuildICmp(B, LLVMIntUGE, mag, i32c(g, 0x7c00), "");
    LLVMValueRef r = LLVMBuildOr(B, LLVMBuildSelect(B, big, special, fin, ""), sign, "");
    return LLVMBuildBitCast(B, r, f32, "");
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
    LLVMValueRef norm = LLVMBuildAdd(B, mag, i32c(g, 0xc8000fffULL), "");  /* -112<<23 + 0xfff */
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
    if (t == EM_BFLOAT16)
        return bf16_widen(g, h);
    if (!g->f16c)
        return f16_widen_bits(g, h);
    LLVMValueRef x = LLVMBuildBitCast(g->B, h, LLVMHalfTypeInContext(g->C), "");
    return LLVMBuildFPExt(g->B, x, LLVMFloatTypeInContext(g->C), "");
}

LLVMValueRef
em_cg_narrow(em_cg *g, em_dtype_t t, LLVMValueRef v)
{
    if (t == EM_BFLOAT16)
        return g->bf16_native ? bf16_narrow_native(g, v) : bf16_narrow(g, v);
    if (!g->f16c)
        return f16_narrow_bits(g, v);
    LLVMValueRef x = LLVMBuildFPTrunc(g->B, v, LLVMHalfTypeInContext(g->C), "");
    return LLVMBuildBitCast(g->B, x, LLVMInt16TypeInContext(g->C), "");
}
