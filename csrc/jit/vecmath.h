/* vecmath.h: building blocks of the IR elementary functions (vecmath_ir.c, the
 * builders, and vecmath_{log,expm1,trig,pow,erfc}.c, the functions).
 *
 * Each function is an internal, always-inlined IR function of float32 scalars, built
 * once per module and branch-free (selects, no calls but intrinsics), so after
 * inlining the loop vectoriser widens it to the target's vector width (4 lanes with
 * SSE, 8 with AVX2, 16 with AVX-512) like any other arithmetic. Some compute in
 * float64 internally (argument reduction, pow's log and exp): the vectoriser widens
 * those too, at half the lanes per register. */
#ifndef EMBER_JIT_VECMATH_H
#define EMBER_JIT_VECMATH_H

#include "jit/jit.h"

typedef struct {
    LLVMModuleRef M;
    LLVMContextRef C;
    LLVMBuilderRef B;
    LLVMValueRef fn;
    LLVMTypeRef f32, f64, i32, i64;
} em_vm;

/* Starts the function `name` of nargs float32 arguments returning float32, internal
 * and always inlined, with v->B at its entry block; returns 0, or 1 when the module
 * already has it (v->fn is then that function and no builder is made). */
int em_vm_begin(em_vm *v, LLVMModuleRef M, const char *name, int nargs);
/* Returns value r from the function and disposes of the builder; gives v->fn. */
LLVMValueRef em_vm_end(em_vm *v, LLVMValueRef r);

LLVMValueRef em_vm_intrinsic(em_vm *v, const char *name, LLVMValueRef *args, int n);
LLVMValueRef em_vm_call(em_vm *v, LLVMValueRef fn, LLVMValueRef *args, int n);
LLVMValueRef em_vm_fma(em_vm *v, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c);
/* c[0] + u * (c[1] + u * (... c[n-1])), in u's type */
LLVMValueRef em_vm_poly(em_vm *v, const double *c, int n, LLVMValueRef u);
LLVMValueRef em_vm_const(LLVMValueRef like, double value);   /* of like's type */
LLVMValueRef em_vm_select(em_vm *v, LLVMValueRef cond, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef em_vm_fcmp(em_vm *v, LLVMRealPredicate p, LLVMValueRef a, double b);
LLVMValueRef em_vm_fabs(em_vm *v, LLVMValueRef a);
LLVMValueRef em_vm_floor(em_vm *v, LLVMValueRef a);
LLVMValueRef em_vm_copysign(em_vm *v, LLVMValueRef mag, LLVMValueRef sign);
/* 2^t for a float64 t in [-300, 300]: 2^n exp(f ln2), n = round(t), |f| <= 1/2, by
 * exp's Taylor series to `degree` (at most 15; 11 is float64-accurate to ~2^-43, 7 to
 * ~2^-27) */
LLVMValueRef em_vm_exp2_f64(em_vm *v, LLVMValueRef t, int degree);

/* Cephes expf.c's polynomial P, exp(r) = 1 + r + r^2 P(r) on |r| <= ln2 / 2, lowest
 * degree first (expf and expm1f) */
#define EM_VM_EXP_POLY_N 6
extern const double em_vm_exp_poly[EM_VM_EXP_POLY_N];

/* The functions (vecmath_*.c). */
LLVMValueRef em_ir_logf(LLVMModuleRef M);
LLVMValueRef em_ir_log1pf(LLVMModuleRef M);
LLVMValueRef em_ir_expm1f(LLVMModuleRef M);
LLVMValueRef em_ir_tanhf(LLVMModuleRef M);
LLVMValueRef em_ir_sinf(LLVMModuleRef M);
LLVMValueRef em_ir_cosf(LLVMModuleRef M);
/* sinf and cosf right below 2^25 (and for inf, NaN) only: no Payne-Hanek path */
LLVMValueRef em_ir_sinf_small(LLVMModuleRef M);
LLVMValueRef em_ir_cosf_small(LLVMModuleRef M);
LLVMValueRef em_ir_powf(LLVMModuleRef M);
LLVMValueRef em_ir_erfcf(LLVMModuleRef M);

#endif /* EMBER_JIT_VECMATH_H */
