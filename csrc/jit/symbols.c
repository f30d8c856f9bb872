/* symbols.c: the functions outside a module its kernels call (libm's, memset and
 * memcpy), defined in the JIT as absolute symbols, so that it never searches the process
 * (our extension's symbols are not global).
 *
 * The ones the code generator and LLVM's library-call simplifier emit are defined when
 * the JIT starts; a loop-IR `call` may name any other C math library function, looked up
 * by name (em_jit_libm_address) when it is decoded and defined when a module calling it
 * is added (em_jit_define_calls).
 */
#include "jit/jit.h"

#include <dlfcn.h>
#include <math.h>
#include <string.h>

static PyObject *defined;     /* names defined in the main JITDylib (a set of str) */

static int
define(LLVMOrcLLJITRef J, const char *const *names, void *const *addrs, size_t n)
{
    LLVMJITCSymbolMapPair pairs[32];
    if (n > sizeof pairs / sizeof pairs[0]) {
        PyErr_SetString(PyExc_SystemError, "ember JIT: too many symbols at once");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        pairs[i].Name = LLVMOrcLLJITMangleAndIntern(J, names[i]);
        pairs[i].Sym.Address = (LLVMOrcExecutorAddress)(uintptr_t)addrs[i];
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
    for (size_t i = 0; i < n; i++) {
        PyObject *s = PyUnicode_FromString(names[i]);
        int st = s == NULL ? -1 : PySet_Add(defined, s);
        Py_XDECREF(s);
        if (st < 0)
            return -1;
    }
    return 0;
}

int
em_jit_define_symbols(LLVMOrcLLJITRef J)
{
    static const char *const names[] = {
        "expf", "exp", "logf", "log", "tanhf", "tanh", "powf", "pow",
        /* LLVM's library-call simplifier turns pow(2, x) into exp2(x) or ldexp(1, n) */
        "exp2f", "exp2", "ldexpf", "ldexp",
        "sinf", "sin", "cosf", "cos", "erff", "erf", "expm1f", "expm1",
        "log1pf", "log1p", "memset", "memcpy",
    };
    static void *const addrs[] = {
        (void *)(float (*)(float))expf, (void *)(double (*)(double))exp,
        (void *)(float (*)(float))logf, (void *)(double (*)(double))log,
        (void *)(float (*)(float))tanhf, (void *)(double (*)(double))tanh,
        (void *)(float (*)(float, float))powf, (void *)(double (*)(double, double))pow,
        (void *)(float (*)(float))exp2f, (void *)(double (*)(double))exp2,
        (void *)(float (*)(float, int))ldexpf, (void *)(double (*)(double, int))ldexp,
        (void *)(float (*)(float))sinf, (void *)(double (*)(double))sin,
        (void *)(float (*)(float))cosf, (void *)(double (*)(double))cos,
        (void *)(float (*)(float))erff, (void *)(double (*)(double))erf,
        (void *)(float (*)(float))expm1f, (void *)(double (*)(double))expm1,
        (void *)(float (*)(float))log1pf, (void *)(double (*)(double))log1p,
        (void *)memset, (void *)memcpy,
    };
    _Static_assert(sizeof names / sizeof names[0] == sizeof addrs / sizeof addrs[0],
                   "one address per name");
    if (defined == NULL && (defined = PySet_New(NULL)) == NULL)
        return -1;
    return define(J, names, addrs, sizeof names / sizeof names[0]);
}

void *
em_jit_libm_address(const char *name)
{
    static void *libm;
    if (libm == NULL)
        libm = dlopen("libm.so.6", RTLD_LAZY);
    void *addr = libm != NULL ? dlsym(libm, name) : NULL;
    return addr != NULL ? addr : dlsym(RTLD_DEFAULT, name);
}

int
em_jit_define_calls(LLVMOrcLLJITRef J, LLVMModuleRef M)
{
    const char *names[32];
    void *addrs[32];
    size_t n = 0;
    for (LLVMValueRef f = LLVMGetFirstFunction(M); f != NULL; f = LLVMGetNextFunction(f)) {
        size_t len;
        const char *name = LLVMGetValueName2(f, &len);
        if (!LLVMIsDeclaration(f) || LLVMGetIntrinsicID(f) != 0)
            continue;
        PyObject *s = PyUnicode_FromStringAndSize(name, (Py_ssize_t)len);
        int known = s == NULL ? -1 : PySet_Contains(defined, s);
        Py_XDECREF(s);
        if (known < 0)
            return -1;
        if (known)
            continue;
        void *addr = em_jit_libm_address(name);
        if (addr == NULL) {
            PyErr_Format(PyExc_RuntimeError, "ember JIT: a kernel calls %s, which is not "
                         "in the C math library", name);
            return -1;
        }
        if (n == sizeof names / sizeof names[0]) {
            PyErr_SetString(PyExc_SystemError, "ember JIT: a module calls too many functions");
            return -1;
        }
        names[n] = name;
        addrs[n++] = addr;
    }
    return n ? define(J, names, addrs, n) : 0;
}
