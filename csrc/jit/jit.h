/* jit.h: the LLVM JIT (jit.c) and kernel code generation (codegen_loops.c,
 * codegen_expr.c, vecmath_ir.c). */
#ifndef EMBER_JIT_H
#define EMBER_JIT_H

#include "ember.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

/* Builds `void name(void **args, int64_t start, int64_t end)` for one kernel spec (see
 * codegen_loops.c) into M.
 * Returns 0, or -1 with a Python exception set (the module is then discarded). */
int em_codegen_kernel(LLVMModuleRef M, PyObject *spec, const char *name);

/* Whether the JIT's target features (the host's, or EMBER_LLVM_FEATURES) enable
 * `name` ("f16c", "avx512bf16", ...). */
bool em_jit_has_feature(const char *name);

/* Internal helper functions of a module (expf polynomial, ...), made on demand; the
 * others are in vecmath.h. */
LLVMValueRef em_ir_expf(LLVMModuleRef M);
LLVMValueRef em_ir_erff(LLVMModuleRef M);
LLVMValueRef em_ir_libm(LLVMModuleRef M, const char *name, LLVMTypeRef type, int nargs);

/* symbols.c: the functions outside a module its kernels call. em_jit_define_symbols
 * defines those the code generator emits; em_jit_libm_address finds a C math library
 * function by name (NULL if none); em_jit_define_calls defines the ones a module
 * declares that are not defined yet (before it is added). */
int em_jit_define_symbols(LLVMOrcLLJITRef J);
void *em_jit_libm_address(const char *name);
int em_jit_define_calls(LLVMOrcLLJITRef J, LLVMModuleRef M);

#endif /* EMBER_JIT_H */
