/* loop_ir.h: the loop IR's instruction set, for csrc/jit.
 *
 * GENERATED from python/ember/compiler/loop_ir.py by
 * `python -m ember.compiler.loop_ir_header`: do not edit. */
#ifndef EMBER_LOOP_IR_H
#define EMBER_LOOP_IR_H

typedef enum {
    EM_FORM_LOAD = 0,
    EM_FORM_STORE = 1,
    EM_FORM_FOLD = 2,
    EM_FORM_CONST = 3,
    EM_FORM_IOTA = 4,
    EM_FORM_UNARY = 5,
    EM_FORM_BINARY = 6,
    EM_FORM_COMPARE = 7,
    EM_FORM_SELECT = 8,
    EM_FORM_CALL = 9,
    EM_FORM_RANDOM = 10,
    EM_FORM_PHASE = 11,
    EM_FORM_BOUND = 12,
    EM_FORM_GATHER = 13,
    EM_FORM_SCATTER = 14,
    EM_NFORMS
} em_form_t;

typedef enum {
    EM_DOMAIN_ANY = 0,
    EM_DOMAIN_FLOAT = 1,
    EM_DOMAIN_INTEGRAL = 2,
    EM_DOMAIN_NOT_BOOL = 3,
    EM_NDOMAINS
} em_domain_t;

typedef enum {
    EM_IR_LOAD = 0,
    EM_IR_STORE = 1,
    EM_IR_REDUCE = 2,
    EM_IR_ACCUMULATE = 3,
    EM_IR_CONST = 4,
    EM_IR_IOTA = 5,
    EM_IR_CAST = 6,
    EM_IR_NEG = 7,
    EM_IR_EXP = 8,
    EM_IR_LOG = 9,
    EM_IR_TANH = 10,
    EM_IR_RECIPROCAL = 11,
    EM_IR_ABS = 12,
    EM_IR_SQRT = 13,
    EM_IR_NOT = 14,
    EM_IR_FLOOR = 15,
    EM_IR_TRUNC = 16,
    EM_IR_SIN = 17,
    EM_IR_COS = 18,
    EM_IR_ERF = 19,
    EM_IR_EXPM1 = 20,
    EM_IR_LOG1P = 21,
    EM_IR_ERFC = 22,
    EM_IR_ADD = 23,
    EM_IR_SUB = 24,
    EM_IR_MUL = 25,
    EM_IR_DIV = 26,
    EM_IR_MAX = 27,
    EM_IR_MIN = 28,
    EM_IR_POW = 29,
    EM_IR_AND = 30,
    EM_IR_OR = 31,
    EM_IR_XOR = 32,
    EM_IR_LT = 33,
    EM_IR_LE = 34,
    EM_IR_GT = 35,
    EM_IR_GE = 36,
    EM_IR_EQ = 37,
    EM_IR_NE = 38,
    EM_IR_SELECT = 39,
    EM_IR_CALL = 40,
    EM_IR_RAND = 41,
    EM_IR_RANDN = 42,
    EM_IR_PHASE = 43,
    EM_IR_BOUND = 44,
    EM_IR_GATHER = 45,
    EM_IR_SCATTER = 46,
    EM_IR_NOPS
} em_ir_t;

typedef enum {
    EM_REDUCE_SUM = 0,
    EM_REDUCE_PROD = 1,
    EM_REDUCE_MAX = 2,
    EM_REDUCE_MIN = 3,
    EM_NREDUCTIONS
} em_reduction_t;

typedef struct {
    const char *name;
    em_form_t form;
    em_domain_t domain;
} em_ir_info_t;

/* the registers an instruction of each form reads */
static const int em_form_operands[EM_NFORMS] = {
    0, 1, 1, 0, 0, 1, 2, 2, 3, -1, 3, 0, 1, -1, -1,
};

static const em_ir_info_t em_ir_info[EM_IR_NOPS] = {
    {"load", EM_FORM_LOAD, EM_DOMAIN_ANY},
    {"store", EM_FORM_STORE, EM_DOMAIN_ANY},
    {"reduce", EM_FORM_FOLD, EM_DOMAIN_ANY},
    {"accumulate", EM_FORM_FOLD, EM_DOMAIN_ANY},
    {"const", EM_FORM_CONST, EM_DOMAIN_ANY},
    {"iota", EM_FORM_IOTA, EM_DOMAIN_ANY},
    {"cast", EM_FORM_UNARY, EM_DOMAIN_ANY},
    {"neg", EM_FORM_UNARY, EM_DOMAIN_NOT_BOOL},
    {"exp", EM_FORM_UNARY, EM_DOMAIN_FLOAT},
    {"log", EM_FORM_UNARY, EM_DOMAIN_FLOAT},
    {"tanh", EM_FORM_UNARY, EM_DOMAIN_FLOAT},
    {"reciprocal", EM_FORM_UNARY, EM_DOMAIN_FLOAT},
    {"abs", EM_FORM_UNARY, EM_DOMAIN_FLOAT},
    {"sqrt", EM_FORM_UNARY, EM_DOMAIN_FLOAT},
    {"not", EM_FORM_UNARY, EM_DOMAIN_INTEGRAL},
    {"floor", EM_FORM_UNARY, EM_DOMAIN_FLOAT},
    {"trunc", EM_FORM_UNARY, EM_DOMAIN_FLOAT},
    {"sin", EM_FORM_UNARY, EM_DOMAIN_FLOAT},
    {"cos", EM_FORM_UNARY, EM_DOMAIN_FLOAT},
    {"erf", EM_FORM_UNARY, EM_DOMAIN_FLOAT},
    {"expm1", EM_FORM_UNARY, EM_DOMAIN_FLOAT},
    {"log1p", EM_FORM_UNARY, EM_DOMAIN_FLOAT},
    {"erfc", EM_FORM_UNARY, EM_DOMAIN_FLOAT},
    {"add", EM_FORM_BINARY, EM_DOMAIN_ANY},
    {"sub", EM_FORM_BINARY, EM_DOMAIN_NOT_BOOL},
    {"mul", EM_FORM_BINARY, EM_DOMAIN_ANY},
    {"div", EM_FORM_BINARY, EM_DOMAIN_FLOAT},
    {"max", EM_FORM_BINARY, EM_DOMAIN_ANY},
    {"min", EM_FORM_BINARY, EM_DOMAIN_ANY},
    {"pow", EM_FORM_BINARY, EM_DOMAIN_FLOAT},
    {"and", EM_FORM_BINARY, EM_DOMAIN_INTEGRAL},
    {"or", EM_FORM_BINARY, EM_DOMAIN_INTEGRAL},
    {"xor", EM_FORM_BINARY, EM_DOMAIN_INTEGRAL},
    {"lt", EM_FORM_COMPARE, EM_DOMAIN_ANY},
    {"le", EM_FORM_COMPARE, EM_DOMAIN_ANY},
    {"gt", EM_FORM_COMPARE, EM_DOMAIN_ANY},
    {"ge", EM_FORM_COMPARE, EM_DOMAIN_ANY},
    {"eq", EM_FORM_COMPARE, EM_DOMAIN_ANY},
    {"ne", EM_FORM_COMPARE, EM_DOMAIN_ANY},
    {"select", EM_FORM_SELECT, EM_DOMAIN_ANY},
    {"call", EM_FORM_CALL, EM_DOMAIN_FLOAT},
    {"rand", EM_FORM_RANDOM, EM_DOMAIN_FLOAT},
    {"randn", EM_FORM_RANDOM, EM_DOMAIN_FLOAT},
    {"phase", EM_FORM_PHASE, EM_DOMAIN_ANY},
    {"bound", EM_FORM_BOUND, EM_DOMAIN_INTEGRAL},
    {"gather", EM_FORM_GATHER, EM_DOMAIN_ANY},
    {"scatter", EM_FORM_SCATTER, EM_DOMAIN_ANY},
};

static const char *const em_reduction_names[EM_NREDUCTIONS] = {
    "sum", "prod", "max", "min",
};

#endif /* EMBER_LOOP_IR_H */
