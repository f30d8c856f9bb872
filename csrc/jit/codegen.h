/* codegen.h: internal to kernel code generation. codegen_loops.c decodes a kernel spec
 * into em_instr records once and emits the function and its loops; codegen_expr.c
 * emits the value of one instruction (a conversion, an arithmetic op, a comparison,
 * a reduction's identity and fold). */
#ifndef EMBER_JIT_CODEGEN_H
#define EMBER_JIT_CODEGEN_H

#include "jit/jit.h"
#include "jit/loop_ir.h"

/* One instruction of the loop IR, decoded and checked (registers defined before use,
 * operands of the dtype it computes in, a dtype it computes in). */
/* the most size arguments a symbolic kernel takes */
#define EM_MAX_SYM_ARGS 32

typedef struct {
    em_ir_t op;
    em_dtype_t dtype;        /* what it computes in; load, store, fold: its buffer's */
    int dst;                 /* the register it defines, or -1 */
    int args[4];             /* the registers it reads: em_ir_info[op].form's operands */
    int param;               /* load, store, fold: the buffer */
    Py_ssize_t offset;       /* load, store, fold: the index, offset + coeffs . i */
    Py_ssize_t coeffs[EM_MAX_DIMS];
    /* a symbolic kernel's size argument standing for the offset / a coefficient, or -1 */
    int offset_sym;
    int coeff_sym[EM_MAX_DIMS];
    em_reduction_t reduction;   /* fold */
    int dim;                 /* iota */
    double fvalue;           /* const, floating dtypes */
    long long ivalue;        /* const, integer and bool dtypes */
    int value_sym;           /* const: size argument k as its value (converted), or -1 */
    int nargs;               /* how many registers it reads */
    char fn[16];             /* call: the libm function (with its f for float32) */
    /* gather: the stride (or size argument, gstride_sym >= 0) each index register is
     * multiplied by; bound: its size n is offset (offset_sym), its index tensor dim */
    Py_ssize_t gstride[3];
    int gstride_sym[3];
    int gfirst;              /* gather: 0; scatter: 1 (args[0] is the value) */
} em_instr;

typedef struct {
    LLVMContextRef C;
    LLVMModuleRef M;
    LLVMBuilderRef B;
    LLVMValueRef fn;
    LLVMTypeRef i64;
    int ndim, nreduce;
    Py_ssize_t sizes[EM_MAX_DIMS];
    /* a symbolic kernel ([dynamic]): dim d's size is size argument size_sym[d] (or -1:
     * sizes[d]); its nsyms int64 size arguments, read once at entry, are symv */
    int size_sym[EM_MAX_DIMS];
    int nsyms;
    LLVMValueRef symv[EM_MAX_SYM_ARGS];
    int nparams;
    em_dtype_t *ptype;       /* per buffer */
    LLVMValueRef *ptr;
    Py_ssize_t ninstrs;
    em_instr *instrs;
    int nregs;
    LLVMValueRef *reg;       /* per register: its value once emitted */
    em_dtype_t *rtype;       /* per register: its dtype */
    /* per float16/bfloat16 register (all defined by a load or a cast): its 16 bits, so
     * a store of it stores them (no second rounding); last_bits: those of the latest
     * conversion to such a dtype (codegen_expr.c) */
    LLVMValueRef *half_bits;
    LLVMValueRef last_bits;
    LLVMValueRef iv[EM_MAX_DIMS];
    LLVMValueRef *acc;       /* per instruction: a reduce's accumulator alloca, or NULL */
    /* per instruction, for float max/min reductions: an i8 alloca recording whether a
     * NaN was seen. Their accumulator holds order-preserving integer keys of the floats
     * (see em_cg_float_key), so the fold is an integer smax/smin and the NaN flag an
     * `or`: both reductions LLVM 14's loop vectoriser widens, where a NaN-propagating
     * float max is not. */
    LLVMValueRef *nan_acc;
    bool float_sum;
    bool split;              /* dim 0 runs over [start, end): threads split it */
    LLVMValueRef start, end;
    /* float32 sin and cos in a pointwise kernel (codegen_loops.c): its innermost loop
     * runs first with their variants right below 2^25 only (trig_small), OR-ing into
     * trig_big (i32) whether an argument was larger, and again with the whole functions
     * if one was */
    bool trig_split;
    bool trig_small;
    LLVMValueRef trig_big;
    /* a row kernel's phases (loop_ir.py): the instructions [lo, hi) the reduced dims'
     * loops run now (all of them when the kernel has one phase) */
    Py_ssize_t phase_lo, phase_hi;
    int *rphase;             /* per register: the phase defining it (decoding) */
    int phase;               /* the phase being decoded */
    bool f16_native;         /* the target has F16C and AVX512F (vcvtph2ps zmm, ...) */
    bool bf16_native;        /* the target has AVX512_BF16 and AVX512VL (vcvtneps2bf16) */
    /* bound instructions: the body takes one more argument, the int64[4] error record
     * (flag, value, n, index tensor) it fills when an index value is out of range */
    bool bounds;
    LLVMValueRef err;
} em_cg;

LLVMTypeRef em_cg_mem_type(em_cg *g, em_dtype_t t);    /* in memory (bool: i8) */
LLVMTypeRef em_cg_reg_type(em_cg *g, em_dtype_t t);    /* in a register (bool: i1) */

/* float16 and bfloat16 (codegen_half.c): registers hold them as float32, memory as
 * i16. widen: the i16 bits of a t to its float32; narrow: a float32 rounded to nearest
 * even to the i16 bits of t. */
LLVMValueRef em_cg_widen(em_cg *g, em_dtype_t t, LLVMValueRef h);
LLVMValueRef em_cg_narrow(em_cg *g, em_dtype_t t, LLVMValueRef v);

/* The value of an instruction of form const, iota, unary, binary, compare, select,
 * call or random from the registers it reads. */
LLVMValueRef em_cg_expr(em_cg *g, const em_instr *ins);

/* A random draw (codegen_random.c): rand (U[0, 1)) or randn (N(0, 1)) in float dtype
 * t of Philox4x32-10 under key seed at counter (index, offset), all i64. */
LLVMValueRef em_cg_random(em_cg *g, em_ir_t op, em_dtype_t t, LLVMValueRef seed,
                          LLVMValueRef offset, LLVMValueRef index);

/* Reductions: the identity, and acc folded with v, in dtype t. */
LLVMValueRef em_cg_identity(em_cg *g, em_reduction_t r, em_dtype_t t);
LLVMValueRef em_cg_combine(em_cg *g, em_reduction_t r, em_dtype_t t, LLVMValueRef acc,
                           LLVMValueRef v);

/* Float max/min reductions: the integer type as wide as float dtype t, and the map
 * bits -> key (its own inverse) whose signed order is the floats' order. */
LLVMTypeRef em_cg_key_type(em_cg *g, em_dtype_t t);
LLVMValueRef em_cg_float_key(em_cg *g, LLVMValueRef bits);

#endif /* EMBER_JIT_CODEGEN_H */
