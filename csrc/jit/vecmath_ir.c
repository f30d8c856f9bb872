/* vecmath_ir.c: elementary functions for JIT kernels.
 *
 * expf is emitted as IR (an internal, always-inlined function the loop vectoriser
 * can widen): the same branch-free Cephes recipe as csrc/kernels/vecmath.h
 * (coefficients from the Cephes Math Library, S. L. Moshier, expf.c). Other
 * functions call libm through absolute symbols defined in the JIT.
 */
#include "jit/jit.h"

#include <math.h>

static LLVMValueRef
fcall(LLVMBuilderRef B, LLVMModuleRef M, const char *name, LLVMTypeRef t, LLVMValueRef *args,
      int n)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(M, id, &t, 1);
    return LLVMBuildCall2(B, LLVMIntrinsicGetType(LLVMGetModuleContext(M), id, &t, 1), f,
                          args, n, "");
}

static LLVMValueRef
fma3(LLVMBuilderRef B, LLVMModuleRef M, LLVMTypeRef t, LLVMValueRef a, LLVMValueRef b,
     LLVMValueRef c)
{
    LLVMValueRef args[3] = {a, b, c};
    return fcall(B, M, "llvm.fmuladd", t, args, 3);
}

LLVMValueRef
em_ir_expf(LLVMModuleRef M)
{
    LLVMValueRef fn = LLVMGetNamedFunction(M, "em_expf");
    if (fn != NULL)
        return fn;
    LLVMContextRef C = LLVMGetModuleContext(M);
    LLVMTypeRef f32 = LLVMFloatTypeInContext(C), i32 = LLVMInt32TypeInContext(C);
    LLVMTypeRef ft = LLVMFunctionType(f32, &f32, 1, 0);
    fn = LLVMAddFunction(M, "em_expf", ft);
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    const char *attrs[] = {"alwaysinline", "nounwind", "readnone", "willreturn"};
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++)
        LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                                LLVMCreateEnumAttribute(C, LLVMGetEnumAttributeKindForName(
                                                               attrs[i], strlen(attrs[i])), 0));
    LLVMBuilderRef B = LLVMCreateBuilderInContext(C);
    LLVMPositionBuilderAtEnd(B, LLVMAppendBasicBlockInContext(C, fn, "entry"));
    LLVMValueRef x = LLVMGetParam(fn, 0);
#define K(v) LLVMConstReal(f32, (v))
    const double lo = -87.33654, hi = 88.72283;
    LLVMValueRef c = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, x, K(lo), ""), K(lo), x, "");
    c = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, c, K(hi), ""), K(hi), c, "");
    LLVMValueRef t = fma3(B, M, f32, c, K(1.44269504088896341), K(0.5));
    LLVMValueRef n = fcall(B, M, "llvm.floor", f32, &t, 1);
    LLVMValueRef r = fma3(B, M, f32, n, K(-0.693359375), c);
    r = fma3(B, M, f32, n, K(2.12194440e-4), r);
    LLVMValueRef p = K(1.9875691500e-4);
    static const double coef[] = {1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                                  1.6666665459e-1, 5.0000001201e-1};
    for (size_t i = 0; i < sizeof coef / sizeof coef[0]; i++)
        p = fma3(B, M, f32, p, r, K(coef[i]));
    LLVMValueRef r2 = LLVMBuildFMul(B, r, r, "");
    LLVMValueRef y = fma3(B, M, f32, p, r2, r);
    y = LLVMBuildFAdd(B, y, K(1.0), "");
    LLVMValueRef ni = LLVMBuildFPToSI(B, n, i32, "");
    ni = LLVMBuildShl(B, LLVMBuildAdd(B, ni, LLVMConstInt(i32, 127, 0), ""),
                      LLVMConstInt(i32, 23, 0), "");
    LLVMValueRef e = LLVMBuildFMul(B, y, LLVMBuildBitCast(B, ni, f32, ""), "");
    e = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, x, K(lo), ""), K(0.0), e, "");
    e = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, x, K(hi), ""), K(INFINITY), e, "");
    e = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUNO, x, x, ""), x, e, "");
#undef K
    LLVMBuildRet(B, e);
    LLVMDisposeBuilder(B);
    return fn;
}

LLVMValueRef
em_ir_libm(LLVMModuleRef M, const char *name, LLVMTypeRef type, int nargs)
{
    LLVMValueRef fn = LLVMGetNamedFunction(M, name);
    if (fn != NULL)
        return fn;
    LLVMTypeRef params[2] = {type, type};
    fn = LLVMAddFunction(M, name, LLVMFunctionType(type, params, (unsigned)nargs, 0));
    LLVMContextRef C = LLVMGetModuleContext(M);
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(C, LLVMGetEnumAttributeKindForName(
                                                           "nounwind", 8), 0));
    return fn;
}

/* libm entry points the kernels may call: defined as absolute symbols, so the JIT
 * never searches the process (our extension's symbols are not global). */
int
em_jit_define_symbols(LLVMOrcLLJITRef J)
{
    static const struct {
        const char *name;
        void *addr;
    } syms[] = {
        {"expf", (void *)(float (*)(float))expf}, {"exp", (void *)(double (*)(double))exp},
        {"logf", (void *)(float (*)(float))logf}, {"log", (void *)(double (*)(double))log},
        {"tanhf", (void *)(float (*)(float))tanhf}, {"tanh", (void *)(double (*)(double))tanh},
        {"powf", (void *)(float (*)(float, float))powf},
        {"pow", (void *)(double (*)(double, double))pow},
        {"sinf", (void *)(float (*)(float))sinf}, {"sin", (void *)(double (*)(double))sin},
        {"cosf", (void *)(float (*)(float))cosf}, {"cos", (void *)(double (*)(double))cos},
        {"erff", (void *)(float (*)(float))erff}, {"erf", (void *)(double (*)(double))erf},
        {"expm1f", (void *)(float (*)(float))expm1f},
        {"expm1", (void *)(double (*)(double))expm1},
        {"log1pf", (void *)(float (*)(float))log1pf},
        {"log1p", (void *)(double (*)(double))log1p},
        {"memset", (void *)memset}, {"memcpy", (void *)memcpy},
    };
    size_t n = sizeof syms / sizeof syms[0];
    LLVMJITCSymbolMapPair pairs[32];
    for (size_t i = 0; i < n; i++) {
        pairs[i].Name = LLVMOrcLLJITMangleAndIntern(J, syms[i].name);
        pairs[i].Sym.Address = (LLVMOrcExecutorAddress)(uintptr_t)syms[i].addr;
        pairs[i].Sym.Flags.GenericFlags =
            LLVMJITSymbolGenericFlagsExported | LLVMJITSymbolGenericFlagsCallable;
        pairs[i].Sym.Flags.TargetFlags = 0;
    }
    LLVMErrorRef err = LLVMOrcJITDylibDefine(LLVMOrcLLJITGetMainJITDylib(J),
                                             LLVMOrcAbsoluteSymbols(pairs, n));
    if (err) {
        char *msg = LLVMGetErrorMessage(err);
        PyErr_Format(PyExc_RuntimeError, "ember JIT: defining libm symbols: %s", msg);
        LLVMDisposeErrorMessage(msg);
        return -1;
    }
    return 0;
}
