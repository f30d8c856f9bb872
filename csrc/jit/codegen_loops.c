/* codegen_loops.c: one kernel spec -> one LLVM function, through the LLVM-C builder.
 *
 * A kernel spec is the plain tuple python/ember/compiler/loop_ir.py's Kernel.spec()
 * makes:
 *
 *     (sizes, nreduce, params, instrs[, nsyms])
 *
 * A symbolic kernel ([dynamic]) takes nsyms int64 size arguments: any size, index
 * coefficient or offset may be a one-element tuple (k,) standing for size argument k,
 * read at entry from the int64 array args[nparams] (the runtime evaluates them from
 * the call's sizes); its loops then run to that bound (none when it is 0).
 *
 * sizes: the iteration domain, outer to inner; the last `nreduce` dims are reduced.
 * params: the dtype code of each pointer argument. The function is
 * `void f(void **args, int64_t start, int64_t end)`: args[i] points at element 0 of
 * buffer i, and when dim 0 is not reduced it runs only over [start, end) of dim 0 (so
 * threads can split it); a kernel reducing every dim ignores the range.
 * instrs: the instructions in order, each a tuple of its name (loop_ir.h's table) and
 * its fields by form (Stmt.spec()): on numbered registers, an index being
 * offset + sum(coeffs[d] * i_d),
 *
 *     load     (name, dst, param, coeffs, offset)
 *     store    (name, param, coeffs, offset, src)        every point of the domain
 *     fold     (name, param, reduction, coeffs, offset, src)
 *              reduce: sum/prod/max/min over the reduced dims (their coeffs are 0),
 *              kept in a register and stored once per outer point; accumulate:
 *              buffer[index] = reduction(buffer[index], src) in memory
 *     const    (name, dst, dtype, value)     iota (name, dst, dtype, dim)
 *     unary    (name, dst, dtype, a)         binary, compare (name, dst, dtype, a, b)
 *     select   (name, dst, dtype, c, a, b)     call (name, dst, dtype, fn, a[, b])
 *              call: the C math library's function fn (fn`f` in float32), looked
 *              up when decoded, of 1 or 2 operands
 *     random   (name, dst, dtype, seed, offset, index)   int64 operands; a Philox
 *              draw (codegen_random.c)
 *     phase    (name,)   a row kernel's next phase: at each point of the kept dims the
 *              reduced dims' loops run once per phase, in order, each with its own
 *              instructions and reductions; a register lives in its phase
 *     bound    (name, dst, dtype, n, k, a)   int64 a wrapped into [0, n) (a + n when
 *              negative); a value outside [-n, n) reads as 0 and is recorded: the
 *              largest and smallest such values are kept (integer max/min reductions,
 *              which vectorise) and stored, when any, into the error record
 *              {1, value, n, k} at args[nparams + 1] as the function returns (the
 *              runtime raises IndexError)
 *     gather   (name, dst, param, coeffs, offset, strides, a[, b[, c]])   a load at
 *              the index plus stride_j * register_j (bound results)
 *     scatter  (name, param, reduction, coeffs, offset, strides, v, a[, b[, c]])
 *              an accumulate of v at such an index
 *
 * The spec is decoded into em_instr records first, and checked: registers defined
 * before use, every operand of the dtype its instruction computes in (cast is the only
 * conversion; a select's condition is bool; a stored value is of its buffer's dtype),
 * and that dtype in the instruction's domain. float16 and bfloat16 are storage dtypes
 * (codegen_half.c): only a cast computes in them, and a fold into such a buffer
 * folds float32 values. Emission then switches on the form.
 *
 * Loops are plain counted loops over compile-time sizes; LLVM's loop vectoriser (in
 * every pipeline jit.c runs) turns the innermost one into vector code of the host's width.
 * Float sum reductions carry llvm.loop.vectorize.enable so that it may reorder them.
 */
#include "jit/codegen.h"

#include <math.h>

/* ------------------------------------------------------------------ decoding */

static PyObject *op_codes, *reduction_codes;     /* name -> code, from loop_ir.h */

static int
add_code(PyObject *table, const char *name, int code)
{
    PyObject *v = PyLong_FromLong(code);
    int st = v == NULL ? -1 : PyDict_SetItemString(table, name, v);
    Py_XDECREF(v);
    return st;
}

static int
init_code_tables(void)
{
    if (op_codes != NULL)
        return 0;
    PyObject *ops = PyDict_New(), *reds = PyDict_New();
    int st = ops != NULL && reds != NULL ? 0 : -1;
    for (int i = 0; st == 0 && i < EM_IR_NOPS; i++)
        st = add_code(ops, em_ir_info[i].name, i);
    for (int i = 0; st == 0 && i < EM_NREDUCTIONS; i++)
        st = add_code(reds, em_reduction_names[i], i);
    if (st < 0) {
        Py_XDECREF(ops);
        Py_XDECREF(reds);
        return -1;
    }
    op_codes = ops;
    reduction_codes = reds;
    return 0;
}

/* The code of name in table, or -1 with an exception set. */
static int
code_of(PyObject *table, PyObject *name, const char *what)
{
    PyObject *code = PyUnicode_Check(name) ? PyDict_GetItemWithError(table, name) : NULL;
    if (code == NULL) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "ember JIT: unknown %s %R", what, name);
        return -1;
    }
    return (int)PyLong_AsLong(code);
}

static int
check_dtype(long t)
{
    if (t < 0 || t >= EM_NDTYPES) {
        PyErr_Format(PyExc_NotImplementedError, "ember JIT: dtype %s is not supported",
                     t >= 0 && t < EM_NDTYPES ? em_dtypes[t]->name : "?");
        return -1;
    }
    return 0;
}

static bool
in_domain(em_domain_t d, em_dtype_t t)
{
    switch (d) {
    case EM_DOMAIN_FLOAT: return em_is_float(t);
    case EM_DOMAIN_INTEGRAL: return !em_is_float(t);
    case EM_DOMAIN_NOT_BOOL: return t != EM_BOOL;
    default: return true;
    }
}

/* An integer of a spec: an int, or (k,) for size argument k (*sym = k, else -1). */
static int
decode_int(em_cg *g, PyObject *o, Py_ssize_t *value, int *sym)
{
    *sym = -1;
    *value = 0;
    if (PyTuple_Check(o)) {
        long k = PyTuple_GET_SIZE(o) == 1 ? PyLong_AsLong(PyTuple_GET_ITEM(o, 0)) : -1;
        if (PyErr_Occurred())
            return -1;
        if (k < 0 || k >= g->nsyms) {
            PyErr_SetString(PyExc_ValueError, "ember JIT: bad size argument");
            return -1;
        }
        *sym = (int)k;
        return 0;
    }
    *value = PyLong_AsSsize_t(o);
    return *value == -1 && PyErr_Occurred() ? -1 : 0;
}

/* A load's, store's or fold's buffer and index coefficients. */
static int
decode_address(em_cg *g, PyObject *coeffs, PyObject *offset, em_instr *ins)
{
    if (ins->param < 0 || ins->param >= g->nparams) {
        PyErr_Format(PyExc_ValueError, "ember JIT: bad parameter %d", ins->param);
        return -1;
    }
    ins->dtype = g->ptype[ins->param];
    if (PyTuple_GET_SIZE(coeffs) != g->ndim) {
        PyErr_SetString(PyExc_ValueError,
                        "ember JIT: index coefficients do not match the domain");
        return -1;
    }
    for (int d = 0; d < g->ndim; d++)
        if (decode_int(g, PyTuple_GET_ITEM(coeffs, d), &ins->coeffs[d], &ins->coeff_sym[d]) < 0)
            return -1;
    return decode_int(g, offset, &ins->offset, &ins->offset_sym);
}

/* Operand k of ins: a register defined before, holding the dtype ins computes in
 * (any for a cast; bool for a select's condition; int64 for a random draw's seed,
 * offset and index). Nothing converts implicitly (the
 * loop IR casts explicitly; python/ember/compiler/loop_ir.py verifies the same rule). */
static int
check_operand(em_cg *g, const em_instr *ins, int k)
{
    int r = ins->args[k];
    em_dtype_t want = ins->op == EM_IR_CAST ? EM_UNDEFINED
                      : ins->op == EM_IR_SELECT && k == 0 ? EM_BOOL
                      : em_ir_info[ins->op].form == EM_FORM_RANDOM ? EM_INT64
                      : em_ir_info[ins->op].form == EM_FORM_GATHER ? EM_INT64
                      : em_ir_info[ins->op].form == EM_FORM_SCATTER && k > 0 ? EM_INT64
                      : ins->dtype;
    /* a fold into a float16 or bfloat16 buffer folds float32 values (rounded once, when
     * the result is stored) */
    if ((em_ir_info[ins->op].form == EM_FORM_FOLD ||
         em_ir_info[ins->op].form == EM_FORM_SCATTER) && em_is_half(want))
        want = EM_FLOAT32;
    if (r < 0 || r >= g->nregs || g->rtype[r] == EM_UNDEFINED || g->rphase[r] != g->phase) {
        PyErr_Format(PyExc_ValueError, "ember JIT: register %d used before definition", r);
        return -1;
    }
    if (want != EM_UNDEFINED && g->rtype[r] != want) {
        PyErr_Format(PyExc_ValueError,
                     "ember JIT: %s computes in %s but register %d holds %s (a cast is "
                     "missing)", em_ir_info[ins->op].name, em_dtypes[want]->name, r,
                     em_dtypes[g->rtype[r]]->name);
        return -1;
    }
    return 0;
}

/* A call's function: libm's `fn`, `fn`f in float32, found in the process now so that
 * a missing one is an error here and not a failed link later. */
static int
decode_function(em_instr *ins, PyObject *fn)
{
    const char *base = PyUnicode_AsUTF8(fn);
    if (base == NULL)
        return -1;
    int n = snprintf(ins->fn, sizeof ins->fn, "%s%s", base,
                     ins->dtype == EM_FLOAT32 ? "f" : "");
    if (n < 0 || (size_t)n >= sizeof ins->fn) {
        PyErr_Format(PyExc_ValueError, "ember JIT: function name %R is too long", fn);
        return -1;
    }
    if (em_jit_libm_address(ins->fn) == NULL) {
        PyErr_Format(PyExc_ValueError, "ember JIT: no function %s in the C math library",
                     ins->fn);
        return -1;
    }
    return 0;
}

static int
decode_instr(em_cg *g, PyObject *tup, em_instr *ins)
{
    PyObject *name, *coeffs = NULL, *offset = NULL, *reduction = NULL, *value = NULL;
    int dtype = EM_UNDEFINED, ok, *a = ins->args;
    if (!PyTuple_Check(tup) || PyTuple_GET_SIZE(tup) < 1) {
        PyErr_SetString(PyExc_ValueError, "ember JIT: malformed instruction");
        return -1;
    }
    int code = code_of(op_codes, PyTuple_GET_ITEM(tup, 0), "instruction");
    if (code < 0)
        return -1;
    const em_ir_info_t *info = &em_ir_info[code];
    int nargs = em_form_operands[info->form];
    ins->op = (em_ir_t)code;
    ins->dst = -1;
    ins->value_sym = -1;
    switch (info->form) {
    case EM_FORM_LOAD:
        ok = PyArg_ParseTuple(tup, "OiiO!O;ember JIT: malformed load", &name, &ins->dst,
                              &ins->param, &PyTuple_Type, &coeffs, &offset);
        break;
    case EM_FORM_GATHER: {
        PyObject *strides;
        nargs = (int)PyTuple_GET_SIZE(tup) - 6;
        ok = nargs >= 1 && nargs <= 3 &&
             PyArg_ParseTuple(tup, "OiiO!OO!i|ii", &name, &ins->dst, &ins->param,
                              &PyTuple_Type, &coeffs, &offset, &PyTuple_Type, &strides,
                              &a[0], &a[1], &a[2]);
        if (ok && PyTuple_GET_SIZE(strides) != nargs)
            ok = 0;
        for (int j = 0; ok && j < nargs; j++)
            if (decode_int(g, PyTuple_GET_ITEM(strides, j), &ins->gstride[j],
                           &ins->gstride_sym[j]) < 0)
                return -1;
        if (!ok && !PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "ember JIT: a gather adds 1 to 3 index "
                                              "registers, each with its stride");
        break;
    }
    case EM_FORM_SCATTER: {
        PyObject *strides;
        nargs = (int)PyTuple_GET_SIZE(tup) - 6;
        ok = nargs >= 2 && nargs <= 4 &&
             PyArg_ParseTuple(tup, "OiOO!OO!ii|ii", &name, &ins->param, &reduction,
                              &PyTuple_Type, &coeffs, &offset, &PyTuple_Type, &strides,
                              &a[0], &a[1], &a[2], &a[3]);
        if (ok && PyTuple_GET_SIZE(strides) != nargs - 1)
            ok = 0;
        for (int j = 0; ok && j < nargs - 1; j++)
            if (decode_int(g, PyTuple_GET_ITEM(strides, j), &ins->gstride[j],
                           &ins->gstride_sym[j]) < 0)
                return -1;
        if (!ok && !PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "ember JIT: a scatter folds a value at 1 to 3 "
                                              "index registers, each with its stride");
        ins->gfirst = 1;
        break;
    }
    case EM_FORM_BOUND: {
        PyObject *n;
        ok = PyArg_ParseTuple(tup, "OiiOii;ember JIT: malformed bound", &name, &ins->dst,
                              &dtype, &n, &ins->dim, &a[0]);
        if (ok && decode_int(g, n, &ins->offset, &ins->offset_sym) < 0)
            return -1;
        if (ok && dtype != EM_INT64) {
            PyErr_SetString(PyExc_ValueError, "ember JIT: bound checks int64 values");
            return -1;
        }
        g->bounds = true;
        break;
    }
    case EM_FORM_STORE:
        ok = PyArg_ParseTuple(tup, "OiO!Oi;ember JIT: malformed store", &name, &ins->param,
                              &PyTuple_Type, &coeffs, &offset, &a[0]);
        break;
    case EM_FORM_FOLD:
        ok = PyArg_ParseTuple(tup, "OiOO!Oi;ember JIT: malformed fold", &name, &ins->param,
                              &reduction, &PyTuple_Type, &coeffs, &offset, &a[0]);
        break;
    case EM_FORM_CONST:
        ok = PyArg_ParseTuple(tup, "OiiO;ember JIT: malformed const", &name, &ins->dst,
                              &dtype, &value);
        break;
    case EM_FORM_IOTA:
        ok = PyArg_ParseTuple(tup, "Oiii;ember JIT: malformed iota", &name, &ins->dst, &dtype,
                              &ins->dim);
        break;
    case EM_FORM_PHASE:
        if (PyTuple_GET_SIZE(tup) != 1 || g->nreduce == 0) {
            PyErr_SetString(PyExc_ValueError, "ember JIT: a phase takes no operands, in a "
                                              "kernel with reduced dims");
            return -1;
        }
        g->phase++;
        ins->nargs = 0;
        return 0;
    case EM_FORM_CALL:
        nargs = (int)PyTuple_GET_SIZE(tup) - 4;
        ok = nargs >= 1 && nargs <= 2 &&
             PyArg_ParseTuple(tup, "OiiO!i|i", &name, &ins->dst, &dtype, &PyUnicode_Type,
                              &value, &a[0], &a[1]);
        if (!ok && !PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "ember JIT: a call takes 1 or 2 operands");
        break;
    default:          /* unary, binary, compare, select: dst, dtype, operands */
        ok = PyTuple_GET_SIZE(tup) == 3 + nargs &&
             PyArg_ParseTuple(tup, "Oii|iii", &name, &ins->dst, &dtype, &a[0], &a[1], &a[2]);
        if (!ok && !PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "ember JIT: %s takes %d operands", info->name,
                         nargs);
        break;
    }
    if (!ok)
        return -1;
    if (coeffs != NULL) {
        if (decode_address(g, coeffs, offset, ins) < 0)
            return -1;
    }
    else {
        if (check_dtype(dtype) < 0)
            return -1;
        ins->dtype = (em_dtype_t)dtype;
        if (em_is_half(ins->dtype) && ins->op != EM_IR_CAST) {
            PyErr_Format(PyExc_NotImplementedError, "ember JIT: %s in %s (computed in "
                         "float32: only casts convert to it)", info->name,
                         em_dtypes[ins->dtype]->name);
            return -1;
        }
        if (!in_domain(info->domain, ins->dtype)) {
            PyErr_Format(PyExc_NotImplementedError, "ember JIT: %s on %s", info->name,
                         em_dtypes[ins->dtype]->name);
            return -1;
        }
    }
    if (reduction != NULL) {
        if ((code = code_of(reduction_codes, reduction, "reduction")) < 0)
            return -1;
        ins->reduction = (em_reduction_t)code;
        if ((ins->op == EM_IR_ACCUMULATE || ins->op == EM_IR_SCATTER) &&
            ins->dtype == EM_BOOL) {
            PyErr_SetString(PyExc_ValueError, "ember JIT: accumulate into a bool buffer");
            return -1;
        }
    }
    ins->nargs = nargs;
    if (info->form == EM_FORM_CALL) {
        if (decode_function(ins, value) < 0)
            return -1;
    }
    else if (value != NULL && PyTuple_Check(value)) {
        /* a symbolic kernel's size argument as a value (a mean's count), converted */
        Py_ssize_t unused;
        if (info->form != EM_FORM_CONST || ins->dtype == EM_BOOL ||
            decode_int(g, value, &unused, &ins->value_sym) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "ember JIT: a size argument as a value");
            return -1;
        }
    }
    else if (value != NULL) {
        if (em_is_float(ins->dtype))
            ins->fvalue = PyFloat_AsDouble(value);
        else
            ins->ivalue = PyLong_AsLongLong(value);
        if (PyErr_Occurred())
            return -1;
    }
    if (info->form == EM_FORM_IOTA && (ins->dim < 0 || ins->dim >= g->ndim)) {
        PyErr_Format(PyExc_ValueError, "ember JIT: iota of dim %d", ins->dim);
        return -1;
    }
    for (int k = 0; k < nargs; k++)
        if (check_operand(g, ins, k) < 0)
            return -1;
    if (info->form == EM_FORM_STORE || info->form == EM_FORM_FOLD ||
        info->form == EM_FORM_SCATTER)
        return 0;
    if (ins->dst < 0 || ins->dst >= g->nregs || g->rtype[ins->dst] != EM_UNDEFINED) {
        PyErr_Format(PyExc_ValueError, "ember JIT: bad register %d", ins->dst);
        return -1;
    }
    g->rtype[ins->dst] = info->form == EM_FORM_COMPARE ? EM_BOOL : ins->dtype;
    g->rphase[ins->dst] = g->phase;
    return 0;
}

/* Fills g's domain, params and instructions from spec (allocating its arrays). */
static int
decode_spec(em_cg *g, PyObject *spec)
{
    PyObject *sizes, *params, *instrs;
    g->nsyms = 0;
    if (!PyTuple_Check(spec) || !PyArg_ParseTuple(spec, "O!iO!O!|i", &PyTuple_Type, &sizes,
                                                  &g->nreduce, &PyTuple_Type, &params,
                                                  &PyTuple_Type, &instrs, &g->nsyms)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "ember JIT: a kernel spec is (sizes, nreduce, "
                                             "params, instrs)");
        return -1;
    }
    if (init_code_tables() < 0)
        return -1;
    g->ndim = (int)PyTuple_GET_SIZE(sizes);
    if (g->ndim > EM_MAX_DIMS || g->nreduce < 0 || g->nreduce > g->ndim ||
        g->nsyms < 0 || g->nsyms > EM_MAX_SYM_ARGS) {
        PyErr_SetString(PyExc_ValueError, "ember JIT: bad domain");
        return -1;
    }
    for (int d = 0; d < g->ndim; d++)
        if (decode_int(g, PyTuple_GET_ITEM(sizes, d), &g->sizes[d], &g->size_sym[d]) < 0)
            return -1;
    g->nparams = (int)PyTuple_GET_SIZE(params);
    g->ninstrs = PyTuple_GET_SIZE(instrs);
    g->nregs = (int)g->ninstrs + 1;
    g->ptr = PyMem_Calloc(g->nparams + 1, sizeof(LLVMValueRef));
    g->ptype = PyMem_Calloc(g->nparams + 1, sizeof(em_dtype_t));
    g->instrs = PyMem_Calloc(g->ninstrs + 1, sizeof(em_instr));
    g->reg = PyMem_Calloc(g->nregs, sizeof(LLVMValueRef));
    g->rtype = PyMem_Calloc(g->nregs, sizeof(em_dtype_t));
    g->rphase = PyMem_Calloc(g->nregs, sizeof(int));
    g->half_bits = PyMem_Calloc(g->nregs, sizeof(LLVMValueRef));
    g->acc = PyMem_Calloc(g->ninstrs + 1, sizeof(LLVMValueRef));
    g->nan_acc = PyMem_Calloc(g->ninstrs + 1, sizeof(LLVMValueRef));
    if (!g->ptr || !g->ptype || !g->instrs || !g->reg || !g->rtype || !g->rphase || !g->half_bits ||
        !g->acc || !g->nan_acc) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < g->nparams; i++) {
        long t = PyLong_AsLong(PyTuple_GET_ITEM(params, i));
        if ((t == -1 && PyErr_Occurred()) || check_dtype(t) < 0)
            return -1;
        g->ptype[i] = (em_dtype_t)t;
    }
    for (int r = 0; r < g->nregs; r++)
        g->rtype[r] = EM_UNDEFINED;
    for (Py_ssize_t k = 0; k < g->ninstrs; k++)
        if (decode_instr(g, PyTuple_GET_ITEM(instrs, k), &g->instrs[k]) < 0)
            return -1;
    return 0;
}

/* ------------------------------------------------------------------ memory */

/* ins's address: element offset + sum(coeffs[d] * iv[d]) of its buffer */
static LLVMValueRef
address(em_cg *g, const em_instr *ins)
{
    LLVMValueRef idx = ins->offset_sym >= 0 ? g->symv[ins->offset_sym]
                                            : LLVMConstInt(g->i64, (unsigned long long)ins->offset, 1);
    for (int d = 0; d < g->ndim; d++) {
        Py_ssize_t c = ins->coeffs[d];
        LLVMValueRef term = g->iv[d];
        if (ins->coeff_sym[d] >= 0)
            term = LLVMBuildNSWMul(g->B, term, g->symv[ins->coeff_sym[d]], "");
        else if (c == 0)
            continue;
        else if (c != 1)
            term = LLVMBuildMul(g->B, term, LLVMConstInt(g->i64, (unsigned long long)c, 1), "");
        idx = LLVMBuildAdd(g->B, idx, term, "");
    }
    em_form_t form = em_ir_info[ins->op].form;
    if (form == EM_FORM_GATHER || form == EM_FORM_SCATTER) {
        for (int j = 0; j + ins->gfirst < ins->nargs; j++) {
            LLVMValueRef st = ins->gstride_sym[j] >= 0
                ? g->symv[ins->gstride_sym[j]]
                : LLVMConstInt(g->i64, (unsigned long long)ins->gstride[j], 1);
            LLVMValueRef r = g->reg[ins->args[j + ins->gfirst]];
            idx = LLVMBuildAdd(g->B, idx, LLVMBuildMul(g->B, r, st, ""), "");
        }
    }
    return LLVMBuildInBoundsGEP2(g->B, em_cg_mem_type(g, g->ptype[ins->param]),
                                 g->ptr[ins->param], &idx, 1, "");
}

static unsigned
align_of(em_dtype_t t)
{
    return (unsigned)em_dtypes[t]->itemsize;
}

/* The element of dtype t at addr, as a register holds it (bool: i1; float16 and
 * bfloat16: widened to float32). */
static LLVMValueRef
load_at(em_cg *g, em_dtype_t t, LLVMValueRef addr)
{
    LLVMValueRef v = LLVMBuildLoad2(g->B, em_cg_mem_type(g, t), addr, "");
    LLVMSetAlignment(v, align_of(t));
    if (t == EM_BOOL)
        v = LLVMBuildICmp(g->B, LLVMIntNE, v, LLVMConstInt(em_cg_mem_type(g, t), 0, 0), "");
    else if (em_is_half(t))
        v = em_cg_widen(g, t, v);
    return v;
}

static LLVMValueRef
emit_load(em_cg *g, const em_instr *ins)
{
    em_dtype_t t = ins->dtype;
    if (!em_is_half(t))
        return load_at(g, t, address(g, ins));
    LLVMValueRef bits = LLVMBuildLoad2(g->B, em_cg_mem_type(g, t), address(g, ins), "");
    LLVMSetAlignment(bits, align_of(t));
    g->half_bits[ins->dst] = bits;
    return em_cg_widen(g, t, bits);
}

/* A register's value stored as an element of dtype t (float16 and bfloat16: rounded to
 * nearest even, exact for a register of that dtype). */
static void
store_at(em_cg *g, em_dtype_t t, LLVMValueRef v, LLVMValueRef addr)
{
    if (t == EM_BOOL)
        v = LLVMBuildZExt(g->B, v, em_cg_mem_type(g, t), "");
    else if (em_is_half(t))
        v = em_cg_narrow(g, t, v);
    LLVMSetAlignment(LLVMBuildStore(g->B, v, addr), align_of(t));
}

/* ------------------------------------------------------------------ reductions */

static bool
keyed(const em_instr *ins)
{
    return em_is_float(ins->dtype) &&
           (ins->reduction == EM_REDUCE_MAX || ins->reduction == EM_REDUCE_MIN);
}

/* The accumulator of each reduce, in the function's entry block. */
static void
alloc_accumulators(em_cg *g)
{
    for (Py_ssize_t k = 0; k < g->ninstrs; k++) {
        const em_instr *ins = &g->instrs[k];
        if (ins->op == EM_IR_BOUND) {
            /* the largest and smallest out-of-range values seen (none yet) */
            g->acc[k] = LLVMBuildAlloca(g->B, g->i64, "bad_hi");
            g->nan_acc[k] = LLVMBuildAlloca(g->B, g->i64, "bad_lo");
            LLVMBuildStore(g->B, LLVMConstInt(g->i64, (unsigned long long)INT64_MIN, 1),
                           g->acc[k]);
            LLVMBuildStore(g->B, LLVMConstInt(g->i64, (unsigned long long)INT64_MAX, 1),
                           g->nan_acc[k]);
            continue;
        }
        if (ins->op != EM_IR_REDUCE)
            continue;
        em_dtype_t t = ins->dtype;
        if (keyed(ins)) {
            g->acc[k] = LLVMBuildAlloca(g->B, em_cg_key_type(g, t), "acc_key");
            g->nan_acc[k] = LLVMBuildAlloca(g->B, LLVMInt8TypeInContext(g->C), "seen_nan");
        }
        else
            g->acc[k] = LLVMBuildAlloca(g->B, em_cg_reg_type(g, t), "acc");
        if (em_is_float(t) && ins->reduction == EM_REDUCE_SUM)
            g->float_sum = true;
    }
}

static int
init_accumulators(em_cg *g)
{
    for (Py_ssize_t k = g->phase_lo; k < g->phase_hi; k++) {
        const em_instr *ins = &g->instrs[k];
        if (ins->op != EM_IR_REDUCE)
            continue;
        LLVMValueRef id = em_cg_identity(g, ins->reduction, ins->dtype);
        if (id == NULL)
            return -1;
        if (g->nan_acc[k] != NULL) {
            id = em_cg_float_key(g, LLVMConstBitCast(id, em_cg_key_type(g, ins->dtype)));
            LLVMBuildStore(g->B, LLVMConstInt(LLVMInt8TypeInContext(g->C), 0, 0),
                           g->nan_acc[k]);
        }
        LLVMBuildStore(g->B, id, g->acc[k]);
    }
    return 0;
}

static void
store_accumulators(em_cg *g)
{
    for (Py_ssize_t k = g->phase_lo; k < g->phase_hi; k++) {
        const em_instr *ins = &g->instrs[k];
        if (ins->op != EM_IR_REDUCE)
            continue;
        em_dtype_t t = ins->dtype;
        LLVMValueRef v;
        if (g->nan_acc[k] == NULL)
            v = LLVMBuildLoad2(g->B, em_cg_reg_type(g, t), g->acc[k], "");
        else {                   /* the key back to a float, NaN if one was seen */
            v = LLVMBuildLoad2(g->B, em_cg_key_type(g, t), g->acc[k], "");
            v = LLVMBuildBitCast(g->B, em_cg_float_key(g, v), em_cg_reg_type(g, t), "");
            LLVMTypeRef i8 = LLVMInt8TypeInContext(g->C);
            LLVMValueRef seen = LLVMBuildLoad2(g->B, i8, g->nan_acc[k], "");
            v = LLVMBuildSelect(g->B, LLVMBuildICmp(g->B, LLVMIntNE, seen,
                                                    LLVMConstInt(i8, 0, 0), ""),
                                LLVMConstReal(em_cg_reg_type(g, t), NAN), v, "");
        }
        store_at(g, t, v, address(g, ins));
    }
}

/* A reduce: v folded into its accumulator. */
static int
emit_reduce(em_cg *g, Py_ssize_t k, const em_instr *ins, LLVMValueRef v)
{
    em_dtype_t t = ins->dtype;
    if (g->nan_acc[k] != NULL) {
        LLVMTypeRef i8 = LLVMInt8TypeInContext(g->C);
        LLVMValueRef seen = LLVMBuildLoad2(g->B, i8, g->nan_acc[k], "");
        LLVMValueRef isnan = LLVMBuildZExt(g->B, LLVMBuildFCmp(g->B, LLVMRealUNO, v, v, ""),
                                           i8, "");
        LLVMBuildStore(g->B, LLVMBuildOr(g->B, seen, isnan, ""), g->nan_acc[k]);
        LLVMValueRef key = em_cg_float_key(g, LLVMBuildBitCast(g->B, v,
                                                               em_cg_key_type(g, t), ""));
        LLVMValueRef cur = LLVMBuildLoad2(g->B, em_cg_key_type(g, t), g->acc[k], "");
        LLVMIntPredicate p = ins->reduction == EM_REDUCE_MAX ? LLVMIntSGT : LLVMIntSLT;
        LLVMValueRef gt = LLVMBuildICmp(g->B, p, key, cur, "");
        LLVMBuildStore(g->B, LLVMBuildSelect(g->B, gt, key, cur, ""), g->acc[k]);
        return 0;
    }
    LLVMValueRef cur = LLVMBuildLoad2(g->B, em_cg_reg_type(g, t), g->acc[k], "");
    LLVMValueRef nv = em_cg_combine(g, ins->reduction, t, cur, v);
    if (nv == NULL)
        return -1;
    LLVMBuildStore(g->B, nv, g->acc[k]);
    return 0;
}

/* ------------------------------------------------------------------ indices */

static LLVMValueRef
bound_size(em_cg *g, const em_instr *ins)
{
    return ins->offset_sym >= 0 ? g->symv[ins->offset_sym]
                                : LLVMConstInt(g->i64, (unsigned long long)ins->offset, 1);
}

/* A bound: the index value wrapped into [0, n), 0 where it is outside [-n, n) (and
 * then folded into the instruction's largest and smallest bad values). */
static LLVMValueRef
emit_bound(em_cg *g, Py_ssize_t k, const em_instr *ins)
{
    LLVMValueRef v = g->reg[ins->args[0]], n = bound_size(g, ins);
    LLVMValueRef zero = LLVMConstInt(g->i64, 0, 0);
    LLVMValueRef w = LLVMBuildSelect(g->B, LLVMBuildICmp(g->B, LLVMIntSLT, v, zero, ""),
                                     LLVMBuildAdd(g->B, v, n, ""), v, "");
    LLVMValueRef bad = LLVMBuildICmp(g->B, LLVMIntUGE, w, n, "");
    LLVMValueRef hi = LLVMBuildLoad2(g->B, g->i64, g->acc[k], "");
    LLVMValueRef lo = LLVMBuildLoad2(g->B, g->i64, g->nan_acc[k], "");
    LLVMValueRef ch = LLVMBuildSelect(
        g->B, bad, v, LLVMConstInt(g->i64, (unsigned long long)INT64_MIN, 1), "");
    LLVMValueRef cl = LLVMBuildSelect(
        g->B, bad, v, LLVMConstInt(g->i64, (unsigned long long)INT64_MAX, 1), "");
    LLVMBuildStore(g->B, LLVMBuildSelect(g->B, LLVMBuildICmp(g->B, LLVMIntSGT, ch, hi, ""),
                                         ch, hi, ""), g->acc[k]);
    LLVMBuildStore(g->B, LLVMBuildSelect(g->B, LLVMBuildICmp(g->B, LLVMIntSLT, cl, lo, ""),
                                         cl, lo, ""), g->nan_acc[k]);
    return LLVMBuildSelect(g->B, bad, zero, w, "");
}

/* At the function's end: the first bound that saw a bad value fills the error record
 * {1, value (its largest, else its smallest), n, index tensor}. */
static void
emit_bound_errors(em_cg *g)
{
    LLVMValueRef min = LLVMConstInt(g->i64, (unsigned long long)INT64_MIN, 1);
    LLVMValueRef max = LLVMConstInt(g->i64, (unsigned long long)INT64_MAX, 1);
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->C, g->fn, "checked");
    for (Py_ssize_t k = 0; k < g->ninstrs; k++) {
        const em_instr *ins = &g->instrs[k];
        if (ins->op != EM_IR_BOUND)
            continue;
        LLVMValueRef hi = LLVMBuildLoad2(g->B, g->i64, g->acc[k], "");
        LLVMValueRef lo = LLVMBuildLoad2(g->B, g->i64, g->nan_acc[k], "");
        LLVMValueRef has_hi = LLVMBuildICmp(g->B, LLVMIntNE, hi, min, "");
        LLVMValueRef found = LLVMBuildOr(g->B, has_hi,
                                         LLVMBuildICmp(g->B, LLVMIntNE, lo, max, ""), "");
        LLVMBasicBlockRef record = LLVMAppendBasicBlockInContext(g->C, g->fn, "bad_index");
        LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(g->C, g->fn, "next");
        LLVMBuildCondBr(g->B, found, record, next);
        LLVMPositionBuilderAtEnd(g->B, record);
        LLVMValueRef fields[4] = {
            LLVMConstInt(g->i64, 1, 0), LLVMBuildSelect(g->B, has_hi, hi, lo, ""),
            bound_size(g, ins), LLVMConstInt(g->i64, (unsigned long long)ins->dim, 0)};
        for (int j = 3; j >= 0; j--) {       /* the flag last */
            LLVMValueRef jj = LLVMConstInt(g->i64, (unsigned long long)j, 0);
            LLVMBuildStore(g->B, fields[j],
                           LLVMBuildInBoundsGEP2(g->B, g->i64, g->err, &jj, 1, ""));
        }
        LLVMBuildBr(g->B, done);
        LLVMPositionBuilderAtEnd(g->B, next);
    }
    LLVMBuildBr(g->B, done);
    LLVMPositionBuilderAtEnd(g->B, done);
}

/* ------------------------------------------------------------------ the body */

static int
emit_body(em_cg *g)
{
    for (Py_ssize_t k = g->phase_lo; k < g->phase_hi; k++) {
        const em_instr *ins = &g->instrs[k];
        LLVMValueRef v, addr, cur;
        switch (em_ir_info[ins->op].form) {
        case EM_FORM_LOAD:
        case EM_FORM_GATHER:
            g->reg[ins->dst] = emit_load(g, ins);
            break;
        case EM_FORM_BOUND:
            g->reg[ins->dst] = emit_bound(g, k, ins);
            break;
        case EM_FORM_STORE:
            if (em_is_half(ins->dtype) && g->half_bits[ins->args[0]] != NULL) {
                LLVMValueRef st = LLVMBuildStore(g->B, g->half_bits[ins->args[0]],
                                                 address(g, ins));
                LLVMSetAlignment(st, align_of(ins->dtype));
                break;
            }
            store_at(g, ins->dtype, g->reg[ins->args[0]], address(g, ins));
            break;
        case EM_FORM_FOLD:
            v = g->reg[ins->args[0]];
            if (ins->op == EM_IR_REDUCE) {
                if (emit_reduce(g, k, ins, v) < 0)
                    return -1;
                break;
            }
            /* accumulate: buffer[index] = reduction(buffer[index], v) */
            /* fallthrough */
        case EM_FORM_SCATTER:       /* the same at a gathered index */
            v = g->reg[ins->args[0]];
            addr = address(g, ins);
            cur = load_at(g, ins->dtype, addr);
            v = em_cg_combine(g, ins->reduction, ins->dtype, cur, v);
            if (v == NULL)
                return -1;
            store_at(g, ins->dtype, v, addr);
            break;
        default:
            g->last_bits = NULL;
            v = em_cg_expr(g, ins);
            if (v == NULL)
                return -1;
            g->reg[ins->dst] = v;
            if (ins->op == EM_IR_CAST && em_is_half(ins->dtype))
                g->half_bits[ins->dst] = g->last_bits;
            break;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ loops */

static void
mark_vectorize(em_cg *g, LLVMValueRef latch_br)
{
    LLVMMetadataRef tmp = LLVMTemporaryMDNode(g->C, NULL, 0);
    LLVMMetadataRef kv[2] = {
        LLVMMDStringInContext2(g->C, "llvm.loop.vectorize.enable", 26),
        LLVMValueAsMetadata(LLVMConstInt(LLVMInt1TypeInContext(g->C), 1, 0)),
    };
    LLVMMetadataRef prop = LLVMMDNodeInContext2(g->C, kv, 2);
    LLVMMetadataRef ops[2] = {tmp, prop};
    LLVMMetadataRef id = LLVMMDNodeInContext2(g->C, ops, 2);
    LLVMMetadataReplaceAllUsesWith(tmp, id);
    LLVMSetMetadata(latch_br, LLVMGetMDKindIDInContext(g->C, "llvm.loop", 9),
                    LLVMMetadataAsValue(g->C, id));
}

static int emit_nest(em_cg *g, int d);

/* The loop over dim d. With g->trig_small, float32 sin and cos are their variants
 * right below 2^25 and g->trig_big is left, after the loop, at whether an argument was
 * larger (an `or` reduction, which the vectoriser widens). */
static int
emit_loop(em_cg *g, int d)
{
    LLVMTypeRef i32 = LLVMInt32TypeInContext(g->C);
    LLVMValueRef zero = LLVMConstInt(i32, 0, 0), big = NULL;
    bool ranged = d == 0 && g->split;
    LLVMValueRef lo = ranged ? g->start : LLVMConstInt(g->i64, 0, 0);
    LLVMValueRef hi = ranged ? g->end
                             : g->size_sym[d] >= 0 ? g->symv[g->size_sym[d]]
                             : LLVMConstInt(g->i64, (unsigned long long)g->sizes[d], 0);
    /* a size argument may be 0: the loop is entered only below its bound */
    ranged = ranged || g->size_sym[d] >= 0;
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->B);
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(g->C, g->fn, "loop");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->C, g->fn, "done");
    if (ranged)
        LLVMBuildCondBr(g->B, LLVMBuildICmp(g->B, LLVMIntSLT, lo, hi, ""), head, exit);
    else
        LLVMBuildBr(g->B, head);
    LLVMPositionBuilderAtEnd(g->B, head);
    LLVMValueRef phi = LLVMBuildPhi(g->B, g->i64, "i");
    g->iv[d] = phi;
    if (g->trig_small)
        g->trig_big = big = LLVMBuildPhi(g->B, i32, "big");
    if (emit_nest(g, d + 1) < 0)
        return -1;
    LLVMValueRef next = LLVMBuildAdd(g->B, phi, LLVMConstInt(g->i64, 1, 0), "");
    LLVMValueRef more = LLVMBuildICmp(g->B, LLVMIntSLT, next, hi, "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(g->B);
    LLVMValueRef br = LLVMBuildCondBr(g->B, more, head, exit);
    if (d == g->ndim - 1 && g->float_sum)
        mark_vectorize(g, br);
    LLVMAddIncoming(phi, &lo, &pre, 1);
    LLVMAddIncoming(phi, &next, &latch, 1);
    LLVMPositionBuilderAtEnd(g->B, exit);
    if (big != NULL) {
        LLVMAddIncoming(big, &zero, &pre, 1);
        LLVMAddIncoming(big, &g->trig_big, &latch, 1);
        LLVMValueRef out = LLVMBuildPhi(g->B, i32, "");
        if (ranged)
            LLVMAddIncoming(out, &zero, &pre, 1);
        LLVMAddIncoming(out, &g->trig_big, &latch, 1);
        g->trig_big = out;
    }
    return 0;
}

static int emit_dim(em_cg *g, int d);

/* The loops from dim d inwards; at the first reduced dim, once per phase. */
static int
emit_nest(em_cg *g, int d)
{
    if (d == g->ndim)
        return emit_body(g);
    if (g->nreduce == 0 || d != g->ndim - g->nreduce)
        return emit_dim(g, d);
    g->phase_lo = 0;
    while (g->phase_lo < g->ninstrs) {
        g->phase_hi = g->phase_lo;
        while (g->phase_hi < g->ninstrs && g->instrs[g->phase_hi].op != EM_IR_PHASE)
            g->phase_hi++;
        if (emit_dim(g, d) < 0)
            return -1;
        g->phase_lo = g->phase_hi + 1;
    }
    g->phase_lo = 0;
    g->phase_hi = g->ninstrs;
    return 0;
}

static int
emit_dim(em_cg *g, int d)
{
    bool first_reduced = g->nreduce > 0 && d == g->ndim - g->nreduce;
    if (first_reduced && init_accumulators(g) < 0)
        return -1;
    bool some = g->sizes[d] > 0 || g->size_sym[d] >= 0;
    if (some && d == g->ndim - 1 && g->trig_split) {
        /* the innermost loop with sin and cos right below 2^25 only, and again with the
         * whole functions (the kernel is pointwise and reads no buffer it writes, so
         * running it twice gives the same values) if an argument was larger: the
         * Payne-Hanek reduction costs two thirds of sin's time */
        g->trig_small = true;
        int status = emit_loop(g, d);
        g->trig_small = false;
        if (status < 0)
            return -1;
        LLVMBasicBlockRef redo = LLVMAppendBasicBlockInContext(g->C, g->fn, "trig_large");
        LLVMBasicBlockRef cont = LLVMAppendBasicBlockInContext(g->C, g->fn, "trig_done");
        LLVMBuildCondBr(g->B,
                        LLVMBuildICmp(g->B, LLVMIntNE, g->trig_big,
                                      LLVMConstInt(LLVMTypeOf(g->trig_big), 0, 0), ""),
                        redo, cont);
        LLVMPositionBuilderAtEnd(g->B, redo);
        if (emit_loop(g, d) < 0)
            return -1;
        LLVMBuildBr(g->B, cont);
        LLVMPositionBuilderAtEnd(g->B, cont);
    }
    else if (some && emit_loop(g, d) < 0)
        return -1;
    if (first_reduced)
        store_accumulators(g);
    return 0;
}

/* Whether the kernel is pointwise (no folds), computes float32 sin or cos and reads no
 * buffer it writes (so that its innermost loop may run twice, see emit_nest). */
static bool
wants_trig_split(em_cg *g)
{
    bool trig = false;
    for (Py_ssize_t k = 0; k < g->ninstrs; k++) {
        const em_instr *ins = &g->instrs[k];
        em_form_t form = em_ir_info[ins->op].form;
        if (form == EM_FORM_FOLD || form == EM_FORM_SCATTER)
            return false;
        if ((ins->op == EM_IR_SIN || ins->op == EM_IR_COS) && ins->dtype == EM_FLOAT32)
            trig = true;
        if (form != EM_FORM_STORE)
            continue;
        for (Py_ssize_t j = 0; j < g->ninstrs; j++)
            if (em_ir_info[g->instrs[j].op].form == EM_FORM_LOAD
                && g->instrs[j].param == ins->param)
                return false;
    }
    return trig && g->ndim > 0;
}

static bool
nonreduced_empty(em_cg *g)
{
    for (int d = 0; d < g->ndim - g->nreduce; d++)
        if (g->sizes[d] == 0 && g->size_sym[d] < 0)
            return true;
    return false;
}

/* ------------------------------------------------------------------ the functions */

static void
add_fn_attr(em_cg *g, LLVMValueRef fn, unsigned index, const char *name)
{
    unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
    LLVMAddAttributeAtIndex(fn, index, LLVMCreateEnumAttribute(g->C, kind, 0));
}

/* The body `void name.body(T0 *noalias p0, ..., int64_t start, int64_t end)` (always
 * inlined), g->B left at its entry block, and the entry point
 * `void name(void **args, int64_t start, int64_t end)` calling it. */
static int
build_functions(em_cg *g, const char *name)
{
    /* the body takes one noalias pointer per buffer (outputs are fresh allocations;
     * inputs are only read), so the vectoriser needs no overlap checks; the entry
     * point unpacks args and calls it (always inlined, which turns noalias into scoped
     * alias metadata) */
    LLVMTypeRef i8p = LLVMPointerType(LLVMInt8TypeInContext(g->C), 0);
    /* buffers, start, end, size arguments[, the error record] */
    int np = g->nparams + 2 + g->nsyms + (g->bounds ? 1 : 0);
    LLVMTypeRef *ptys = PyMem_Calloc(np + 1, sizeof(LLVMTypeRef));
    LLVMValueRef *cargs = PyMem_Calloc(np + 1, sizeof(LLVMValueRef));
    if (ptys == NULL || cargs == NULL) {
        PyMem_Free(ptys);
        PyMem_Free(cargs);
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < g->nparams; i++)
        ptys[i] = LLVMPointerType(em_cg_mem_type(g, g->ptype[i]), 0);
    for (int i = g->nparams; i < np; i++)
        ptys[i] = g->i64;
    if (g->bounds)
        ptys[np - 1] = LLVMPointerType(g->i64, 0);
    char body_name[160];
    snprintf(body_name, sizeof body_name, "%s.body", name);
    LLVMTypeRef void_t = LLVMVoidTypeInContext(g->C);
    g->fn = LLVMAddFunction(g->M, body_name,
                            LLVMFunctionType(void_t, ptys, (unsigned)np, 0));
    LLVMSetLinkage(g->fn, LLVMInternalLinkage);
    add_fn_attr(g, g->fn, LLVMAttributeFunctionIndex, "nounwind");
    add_fn_attr(g, g->fn, LLVMAttributeFunctionIndex, "alwaysinline");
    for (int i = 0; i < g->nparams; i++) {
        add_fn_attr(g, g->fn, (unsigned)i + 1, "noalias");
        add_fn_attr(g, g->fn, (unsigned)i + 1, "nocapture");
        g->ptr[i] = LLVMGetParam(g->fn, (unsigned)i);
    }
    g->start = LLVMGetParam(g->fn, (unsigned)g->nparams);
    g->end = LLVMGetParam(g->fn, (unsigned)g->nparams + 1);
    for (int k = 0; k < g->nsyms; k++)
        g->symv[k] = LLVMGetParam(g->fn, (unsigned)(g->nparams + 2 + k));
    if (g->bounds)
        g->err = LLVMGetParam(g->fn, (unsigned)(np - 1));
    LLVMTypeRef outer_params[3] = {LLVMPointerType(i8p, 0), g->i64, g->i64};
    LLVMValueRef outer = LLVMAddFunction(g->M, name,
                                         LLVMFunctionType(void_t, outer_params, 3, 0));
    add_fn_attr(g, outer, LLVMAttributeFunctionIndex, "nounwind");
    LLVMPositionBuilderAtEnd(g->B, LLVMAppendBasicBlockInContext(g->C, outer, "entry"));
    for (int i = 0; i < g->nparams; i++) {
        LLVMValueRef idx = LLVMConstInt(g->i64, (unsigned long long)i, 0);
        LLVMValueRef slot = LLVMBuildInBoundsGEP2(g->B, i8p, LLVMGetParam(outer, 0), &idx,
                                                  1, "");
        cargs[i] = LLVMBuildBitCast(g->B, LLVMBuildLoad2(g->B, i8p, slot, ""), ptys[i], "");
    }
    cargs[g->nparams] = LLVMGetParam(outer, 1);
    cargs[g->nparams + 1] = LLVMGetParam(outer, 2);
    if (g->nsyms > 0) {
        /* the size arguments: int64s at args[nparams] */
        LLVMValueRef idx = LLVMConstInt(g->i64, (unsigned long long)g->nparams, 0);
        LLVMValueRef slot = LLVMBuildInBoundsGEP2(g->B, i8p, LLVMGetParam(outer, 0), &idx,
                                                  1, "");
        LLVMValueRef vals = LLVMBuildBitCast(g->B, LLVMBuildLoad2(g->B, i8p, slot, ""),
                                             LLVMPointerType(g->i64, 0), "");
        for (int k = 0; k < g->nsyms; k++) {
            LLVMValueRef kk = LLVMConstInt(g->i64, (unsigned long long)k, 0);
            cargs[g->nparams + 2 + k] = LLVMBuildLoad2(
                g->B, g->i64, LLVMBuildInBoundsGEP2(g->B, g->i64, vals, &kk, 1, ""), "");
        }
    }
    if (g->bounds) {
        /* the error record: an int64[4] at args[nparams + 1] */
        LLVMValueRef idx = LLVMConstInt(g->i64, (unsigned long long)g->nparams + 1, 0);
        LLVMValueRef slot = LLVMBuildInBoundsGEP2(g->B, i8p, LLVMGetParam(outer, 0), &idx,
                                                  1, "");
        cargs[np - 1] = LLVMBuildBitCast(g->B, LLVMBuildLoad2(g->B, i8p, slot, ""),
                                         LLVMPointerType(g->i64, 0), "");
    }
    LLVMBuildCall2(g->B, LLVMGlobalGetValueType(g->fn), g->fn, cargs, (unsigned)np, "");
    LLVMBuildRetVoid(g->B);
    PyMem_Free(cargs);
    PyMem_Free(ptys);
    LLVMPositionBuilderAtEnd(g->B, LLVMAppendBasicBlockInContext(g->C, g->fn, "entry"));
    return 0;
}

int
em_codegen_kernel(LLVMModuleRef M, PyObject *spec, const char *name)
{
    em_cg g = {0};
    int status = -1;
    g.M = M;
    g.C = LLVMGetModuleContext(M);
    g.i64 = LLVMInt64TypeInContext(g.C);
    g.f16_native = em_jit_has_feature("f16c") && em_jit_has_feature("avx512f");
    g.bf16_native = em_jit_has_feature("avx512bf16") && em_jit_has_feature("avx512vl");
    if (decode_spec(&g, spec) < 0)
        goto done;
    g.split = g.nreduce < g.ndim;
    g.phase_lo = 0;
    g.phase_hi = g.ninstrs;
    g.trig_split = wants_trig_split(&g);
    g.B = LLVMCreateBuilderInContext(g.C);
    if (build_functions(&g, name) < 0)
        goto done;
    alloc_accumulators(&g);
    if (!nonreduced_empty(&g) && emit_nest(&g, 0) < 0)
        goto done;
    if (g.bounds)
        emit_bound_errors(&g);
    LLVMBuildRetVoid(g.B);
    status = 0;
done:
    if (g.B)
        LLVMDisposeBuilder(g.B);
    PyMem_Free(g.ptr);
    PyMem_Free(g.ptype);
    PyMem_Free(g.instrs);
    PyMem_Free(g.reg);
    PyMem_Free(g.rtype);
    PyMem_Free(g.rphase);
    PyMem_Free(g.half_bits);
    PyMem_Free(g.acc);
    PyMem_Free(g.nan_acc);
    return status;
}
