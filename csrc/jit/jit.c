/* jit.c: compiling kernel specs to machine code with LLVM's ORC LLJIT.
 *
 * One LLJIT per process, made on first use: target CPU "generic" plus the host's
 * features (LLVMGetHostCPUFeatures; EMBER_LLVM_FEATURES overrides), as the notes on
 * LLVM 14 on this CPU recommend. A JitModule is one LLVM module holding every kernel
 * of a graph: built through the LLVM-C builder (codegen_loops.c), verified, optimised
 * with the new pass manager ("default<O2>"), added to the JIT under its own resource
 * tracker (removed when the JitModule dies) and looked up to function pointers.
 * The textual IR, before and after optimisation, is kept for logs and tests; it is
 * never parsed.
 *
 * fork(): a child may keep using the JIT (kernels compiled before the fork run, new ones
 * compile) with no atfork handler, because no thread can be inside LLVM when Python
 * forks: every LLVM call here is made holding the GIL and none calls back into Python,
 * the forking thread holds the GIL, and LLJIT runs without compile threads (its
 * ExecutionSession dispatches in place). tests/test_data_workers.py forks while another
 * thread runs compiled kernels, then compiles and runs in the children.
 */
#include "jit/jit.h"

#include <stdlib.h>
#include <time.h>

static LLVMOrcLLJITRef jit;
static LLVMTargetMachineRef pass_tm;     /* for LLVMRunPasses: the JIT's target */
static char *host_features;
static char *triple;
static const char *cpu_name = "generic";

static PyObject *
llvm_error(LLVMErrorRef err, const char *what)
{
    char *msg = LLVMGetErrorMessage(err);
    PyErr_Format(PyExc_RuntimeError, "LLVM %s failed: %s", what, msg);
    LLVMDisposeErrorMessage(msg);
    return NULL;
}

static void
report_session_error(void *ctx, LLVMErrorRef err)
{
    /* lookups report through their own LLVMErrorRef; keep stderr quiet */
    LLVMConsumeError(err);
}

/* The vectoriser's remarks ("loop not vectorized: ...") would go to stderr: they are
 * notes for whoever reads the IR, not errors (those come back as LLVMErrorRef). */
static void
quiet_diagnostics(LLVMDiagnosticInfoRef info, void *ctx)
{
    (void)info;
    (void)ctx;
}

static LLVMTargetMachineRef
make_tm(void)
{
    LLVMTargetRef target;
    char *err = NULL;
    if (LLVMGetTargetFromTriple(triple, &target, &err)) {
        PyErr_Format(PyExc_RuntimeError, "LLVM has no target for %s: %s", triple, err);
        LLVMDisposeMessage(err);
        return NULL;
    }
    return LLVMCreateTargetMachine(target, triple, cpu_name, host_features,
                                   LLVMCodeGenLevelDefault, LLVMRelocDefault,
                                   LLVMCodeModelJITDefault);
}

static int
jit_init(void)
{
    if (jit != NULL)
        return 0;
    LLVMInitializeNativeTarget();
    LLVMInitializeNativeAsmPrinter();
    triple = LLVMGetDefaultTargetTriple();
    const char *env = getenv("EMBER_LLVM_FEATURES");
    host_features = env ? LLVMCreateMessage(env) : LLVMGetHostCPUFeatures();
    LLVMTargetMachineRef tm = make_tm();
    if (tm == NULL)
        return -1;
    LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
    LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(
        builder, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm));
    LLVMErrorRef err = LLVMOrcCreateLLJIT(&jit, builder);
    if (err) {
        jit = NULL;
        llvm_error(err, "JIT creation");
        return -1;
    }
    LLVMOrcExecutionSessionSetErrorReporter(LLVMOrcLLJITGetExecutionSession(jit),
                                            report_session_error, NULL);
    if (em_jit_define_symbols(jit) < 0)
        return -1;
    pass_tm = make_tm();
    return pass_tm ? 0 : -1;
}

/* ------------------------------------------------------------------ JitModule */

typedef struct {
    PyObject_HEAD
    LLVMOrcResourceTrackerRef rt;
    PyObject *names;          /* tuple of kernel names */
    PyObject *addresses;      /* tuple of ints */
    PyObject *ir;             /* textual IR before optimisation */
    PyObject *optimized_ir;   /* after default<O2> */
    double compile_ms;
} JitModule;

static void
jitmodule_dealloc(JitModule *self)
{
    if (self->rt != NULL) {
        LLVMErrorRef err = LLVMOrcResourceTrackerRemove(self->rt);
        if (err)
            LLVMConsumeError(err);
        LLVMOrcReleaseResourceTracker(self->rt);
    }
    Py_XDECREF(self->names);
    Py_XDECREF(self->addresses);
    Py_XDECREF(self->ir);
    Py_XDECREF(self->optimized_ir);
    PyObject_Free(self);
}

static PyObject *
module_text(LLVMModuleRef M)
{
    char *s = LLVMPrintModuleToString(M);
    PyObject *r = PyUnicode_FromString(s);
    LLVMDisposeMessage(s);
    return r;
}

static double
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* JitModule(specs, name, passes="default<O2>") */
static PyObject *
jitmodule_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"specs", "name", "passes", NULL};
    PyObject *specs;
    const char *name, *passes = "default<O2>";
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!s|s:JitModule", kwlist, &PyTuple_Type,
                                     &specs, &name, &passes))
        return NULL;
    if (jit_init() < 0)
        return NULL;
    double t0 = now_ms();
    Py_ssize_t n = PyTuple_GET_SIZE(specs);
    JitModule *self = PyObject_New(JitModule, type);
    if (self == NULL)
        return NULL;
    self->rt = NULL;
    self->names = PyTuple_New(n);
    self->addresses = PyTuple_New(n);
    self->ir = self->optimized_ir = NULL;
    if (self->names == NULL || self->addresses == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
    LLVMContextRef ctx = LLVMOrcThreadSafeContextGetContext(tsc);
    LLVMContextSetDiagnosticHandler(ctx, quiet_diagnostics, NULL);
    LLVMModuleRef M = LLVMModuleCreateWithNameInContext(name, ctx);
    LLVMSetTarget(M, LLVMOrcLLJITGetTripleString(jit));
    LLVMSetDataLayout(M, LLVMOrcLLJITGetDataLayoutStr(jit));
    static long counter;
    char fname[128];
    for (Py_ssize_t i = 0; i < n; i++) {
        snprintf(fname, sizeof fname, "em_%s_%ld_%zd", name, ++counter, i);
        if (em_codegen_kernel(M, PyTuple_GET_ITEM(specs, i), fname) < 0)
            goto error_module;
        PyObject *s = PyUnicode_FromString(fname);
        if (s == NULL)
            goto error_module;
        PyTuple_SET_ITEM(self->names, i, s);
    }
    char *msg = NULL;
    if (LLVMVerifyModule(M, LLVMReturnStatusAction, &msg)) {
        PyErr_Format(PyExc_RuntimeError, "ember JIT: invalid LLVM module %s: %s", name, msg);
        LLVMDisposeMessage(msg);
        goto error_module;
    }
    LLVMDisposeMessage(msg);
    self->ir = module_text(M);
    LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
    LLVMErrorRef err = LLVMRunPasses(M, passes, pass_tm, opts);
    LLVMDisposePassBuilderOptions(opts);
    if (err) {
        llvm_error(err, "optimisation");
        goto error_module;
    }
    self->optimized_ir = module_text(M);
    if (self->ir == NULL || self->optimized_ir == NULL)
        goto error_module;
    if (em_jit_define_calls(jit, M) < 0)
        goto error_module;
    LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(jit);
    self->rt = LLVMOrcJITDylibCreateResourceTracker(jd);
    err = LLVMOrcLLJITAddLLVMIRModuleWithRT(jit, self->rt,
                                            LLVMOrcCreateNewThreadSafeModule(M, tsc));
    LLVMOrcDisposeThreadSafeContext(tsc);
    if (err) {
        llvm_error(err, "adding the module");
        Py_DECREF(self);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        LLVMOrcExecutorAddress addr = 0;
        err = LLVMOrcLLJITLookup(jit, &addr, PyUnicode_AsUTF8(PyTuple_GET_ITEM(self->names, i)));
        if (err) {
            llvm_error(err, "symbol lookup (code generation)");
            Py_DECREF(self);
            return NULL;
        }
        PyObject *a = PyLong_FromUnsignedLongLong(addr);
        if (a == NULL) {
            Py_DECREF(self);
            return NULL;
        }
        PyTuple_SET_ITEM(self->addresses, i, a);
    }
    self->compile_ms = now_ms() - t0;
    return (PyObject *)self;
error_module:
    LLVMDisposeModule(M);
    LLVMOrcDisposeThreadSafeContext(tsc);
    Py_DECREF(self);
    return NULL;
}

static PyObject *
jitmodule_get(JitModule *self, void *which)
{
    PyObject *v = NULL;
    switch ((int)(intptr_t)which) {
    case 0: v = self->names; break;
    case 1: v = self->addresses; break;
    case 2: v = self->ir; break;
    case 3: v = self->optimized_ir; break;
    default: return PyFloat_FromDouble(self->compile_ms);
    }
    if (v == NULL)
        v = Py_None;
    Py_INCREF(v);
    return v;
}

static PyGetSetDef jitmodule_getset[] = {
    {"names", (getter)jitmodule_get, NULL, "Kernel function names.", (void *)0},
    {"addresses", (getter)jitmodule_get, NULL, "Kernel entry points.", (void *)1},
    {"ir", (getter)jitmodule_get, NULL, "LLVM IR as built.", (void *)2},
    {"optimized_ir", (getter)jitmodule_get, NULL, "LLVM IR after optimisation.", (void *)3},
    {"compile_ms", (getter)jitmodule_get, NULL, "Time to build and compile.", (void *)4},
    {NULL},
};

static PyTypeObject JitModule_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember._C.JitModule",
    .tp_basicsize = sizeof(JitModule),
    .tp_dealloc = (destructor)jitmodule_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Kernels compiled to machine code (one LLVM module).",
    .tp_getset = jitmodule_getset,
    .tp_new = jitmodule_new,
};

static PyObject *
jit_target(PyObject *self, PyObject *noargs)
{
    if (jit_init() < 0)
        return NULL;
    return Py_BuildValue("{ssssss}", "triple", triple, "cpu", cpu_name, "features",
                         host_features);
}

static PyMethodDef jit_methods[] = {
    {"_jit_target", jit_target, METH_NOARGS,
     "The target the JIT compiles for: triple, CPU and features."},
    {NULL},
};

int
em_jit_init_type(PyObject *module)
{
    if (PyType_Ready(&JitModule_Type) < 0)
        return -1;
    Py_INCREF(&JitModule_Type);
    if (PyModule_AddObject(module, "JitModule", (PyObject *)&JitModule_Type) < 0)
        return -1;
    return PyModule_AddFunctions(module, jit_methods);
}
