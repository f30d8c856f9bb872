/* jit.c: compiling kernel specs to machine code with LLVM, and loading it into ORC's
 * LLJIT.
 *
 * One LLJIT per process, made on first use: target CPU "generic" plus the host's
 * features (LLVMGetHostCPUFeatures; EMBER_LLVM_FEATURES overrides), as the notes on
 * LLVM 14 on this CPU recommend. Compiling and loading are two separate steps, so that
 * object code can be cached (python/ember/compiler/kernel_cache.py decides what to
 * compile and keeps the results):
 *
 *   _jit_compile(specs, names, passes, threads) -> tuple of bytes (ELF object files)
 *       Each kernel is one LLVM module in its own LLVMContext, built through the LLVM-C
 *       builder (codegen_loops.c; the GIL held, as it reads the spec's Python objects),
 *       then verified, optimised with the new pass manager (its pipeline string, e.g.
 *       compiler/jit.py's lean one) and turned into an object file by worker threads,
 *       one target machine each, with the GIL released: kernels compile in parallel.
 *   JitKernel(object, name)
 *       Adds one object file to the JIT under its own resource tracker (removed when
 *       the JitKernel dies) and looks up `name`: linking only, no compilation.
 *   _jit_ir(spec, name, passes) -> (ir, optimized_ir)
 *       The textual IR of one kernel before and after optimisation, for logs and tests.
 *
 * The functions kernels call (symbols.c's fixed set, defined when the JIT starts, and
 * any C math library function a `call` names) resolve when an object is linked: a
 * definition generator looks up missing ones with em_jit_libm_address, so an object
 * read from disk links without its module ever being built.
 *
 * fork(): compile threads run with the GIL released, holding compile_lock, so an atfork
 * handler takes compile_lock before a fork: no thread is inside LLVM's compilation when
 * the child starts, and the child keeps using the JIT (kernels compiled before the fork
 * run, new ones compile). Linking (JitKernel) holds the GIL, which the forking thread
 * holds. tests/test_data_workers.py forks while another thread runs compiled kernels,
 * then compiles and runs in the children.
 */
#include "jit/jit.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <structmember.h>
#include <time.h>
#include <unistd.h>

#include <llvm/Config/llvm-config.h>

#define MAX_COMPILE_THREADS 16

static LLVMOrcLLJITRef jit;
static LLVMTargetRef target;
static char *host_features;
static char *triple;
static const char *cpu_name = "generic";

/* one target machine per compile thread (a TargetMachine is not shared between
 * threads), made on first use; compile_lock serialises compiles (and fork) */
static LLVMTargetMachineRef compile_tms[MAX_COMPILE_THREADS][4];   /* by codegen level */
static pthread_mutex_t compile_lock = PTHREAD_MUTEX_INITIALIZER;

/* counters for tests and benchmarks: kernels optimised and compiled to object code,
 * object files linked into the JIT */
static atomic_long n_compiled, n_loaded;

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
make_tm(LLVMCodeGenOptLevel level)
{
    return LLVMCreateTargetMachine(target, triple, cpu_name, host_features, level,
                                   LLVMRelocDefault, LLVMCodeModelJITDefault);
}

/* compile_tms[thread][level], made if needed; NULL with an exception set */
static LLVMTargetMachineRef
compile_tm(int thread, int level)
{
    LLVMTargetMachineRef *tm = &compile_tms[thread][level];
    if (*tm == NULL && (*tm = make_tm((LLVMCodeGenOptLevel)level)) == NULL)
        PyErr_SetString(PyExc_RuntimeError, "LLVM could not make a target machine");
    return *tm;
}

/* Defines the missing symbols an object refers to that the C math library (or the
 * process) has. Runs during a lookup, under the GIL; touches no Python. */
static LLVMErrorRef
generate_libm(LLVMOrcDefinitionGeneratorRef gen, void *ctx, LLVMOrcLookupStateRef *state,
              LLVMOrcLookupKind kind, LLVMOrcJITDylibRef jd,
              LLVMOrcJITDylibLookupFlags flags, LLVMOrcCLookupSet set, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        void *addr = em_jit_libm_address(LLVMOrcSymbolStringPoolEntryStr(set[i].Name));
        if (addr == NULL)
            continue;          /* the lookup fails, naming it */
        LLVMOrcRetainSymbolStringPoolEntry(set[i].Name);
        LLVMJITCSymbolMapPair pair = {
            set[i].Name,
            {(LLVMOrcExecutorAddress)(uintptr_t)addr,
             {LLVMJITSymbolGenericFlagsExported | LLVMJITSymbolGenericFlagsCallable, 0}},
        };
        LLVMOrcMaterializationUnitRef mu = LLVMOrcAbsoluteSymbols(&pair, 1);
        LLVMErrorRef err = LLVMOrcJITDylibDefine(jd, mu);
        if (err) {
            LLVMOrcDisposeMaterializationUnit(mu);
            return err;
        }
    }
    return LLVMErrorSuccess;
}

static void
fork_prepare(void)
{
    pthread_mutex_lock(&compile_lock);
}

static void
fork_release(void)
{
    pthread_mutex_unlock(&compile_lock);
}

bool
em_jit_has_feature(const char *name)
{
    /* a CPU feature of LLVM's host list ("+avx2,+avx512bf16,..."), not an instruction:
     * each token compared whole, by length and bytes */
    size_t n = strlen(name);
    for (const char *p = host_features; p != NULL && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len == n + 1 && p[0] == '+' && memcmp(p + 1, name, n) == 0)
            return true;
        p = end != NULL ? end + 1 : p + len;
    }
    return false;
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
    char *err_msg = NULL;
    if (LLVMGetTargetFromTriple(triple, &target, &err_msg)) {
        PyErr_Format(PyExc_RuntimeError, "LLVM has no target for %s: %s", triple, err_msg);
        LLVMDisposeMessage(err_msg);
        return -1;
    }
    LLVMTargetMachineRef tm = make_tm(LLVMCodeGenLevelDefault);
    if (tm == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "LLVM could not make a target machine");
        return -1;
    }
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
    LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(jit),
                                LLVMOrcCreateCustomCAPIDefinitionGenerator(generate_libm,
                                                                           NULL));
    pthread_atfork(fork_prepare, fork_release, fork_release);
    return 0;
}

static double
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ------------------------------------------------------------------ building */

/* A module holding the kernel of spec as function `name`, in a new context, for the
 * JIT's target; NULL with an exception set. */
static LLVMModuleRef
build_module(PyObject *spec, const char *name)
{
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMContextSetDiagnosticHandler(ctx, quiet_diagnostics, NULL);
    LLVMModuleRef M = LLVMModuleCreateWithNameInContext(name, ctx);
    LLVMSetTarget(M, LLVMOrcLLJITGetTripleString(jit));
    LLVMSetDataLayout(M, LLVMOrcLLJITGetDataLayoutStr(jit));
    if (em_codegen_kernel(M, spec, name) < 0) {
        LLVMDisposeModule(M);
        LLVMContextDispose(ctx);
        return NULL;
    }
    return M;
}

static void
dispose_module(LLVMModuleRef M)
{
    if (M == NULL)
        return;
    LLVMContextRef ctx = LLVMGetModuleContext(M);
    LLVMDisposeModule(M);
    LLVMContextDispose(ctx);
}

/* Verifies and optimises M; 0, or -1 with *error set (malloc'd). Touches no Python. */
static int
optimise(LLVMModuleRef M, const char *passes, LLVMTargetMachineRef tm, char **error)
{
    char *msg = NULL;
    if (LLVMVerifyModule(M, LLVMReturnStatusAction, &msg)) {
        size_t len = strlen(msg) + 64;
        *error = malloc(len);
        if (*error != NULL)
            snprintf(*error, len, "ember JIT: invalid LLVM module: %s", msg);
        LLVMDisposeMessage(msg);
        return -1;
    }
    LLVMDisposeMessage(msg);
    LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
    LLVMErrorRef err = LLVMRunPasses(M, passes, tm, opts);
    LLVMDisposePassBuilderOptions(opts);
    if (err) {
        char *m = LLVMGetErrorMessage(err);
        size_t len = strlen(m) + 64;
        *error = malloc(len);
        if (*error != NULL)
            snprintf(*error, len, "LLVM optimisation failed: %s", m);
        LLVMDisposeErrorMessage(m);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ compiling */

typedef struct {
    LLVMModuleRef module;
    const char *passes;           /* borrowed from the caller's str */
    int level;                    /* code generation: LLVMCodeGenOptLevel */
    LLVMMemoryBufferRef object;   /* the result */
    char *error;                  /* malloc'd message, or NULL */
} compile_job;

typedef struct {
    compile_job *jobs;
    Py_ssize_t njobs;
    atomic_long next;
} compile_queue;

typedef struct {
    compile_queue *queue;
    LLVMTargetMachineRef *tms;    /* by level */
} compile_worker;

static void
compile_one(compile_job *job, LLVMTargetMachineRef tm)
{
    if (optimise(job->module, job->passes, tm, &job->error) < 0) {
        if (job->error == NULL)
            job->error = strdup("ember JIT: out of memory");
        return;
    }
    char *msg = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, job->module, LLVMObjectFile, &msg,
                                            &job->object)) {
        size_t len = (msg ? strlen(msg) : 0) + 64;
        job->error = malloc(len);
        if (job->error != NULL)
            snprintf(job->error, len, "LLVM code generation failed: %s", msg ? msg : "?");
        job->object = NULL;
    }
    LLVMDisposeMessage(msg);
    /* the module is spent (code generation rewrites it): free it on this thread */
    dispose_module(job->module);
    job->module = NULL;
}

static void *
compile_worker_run(void *arg)
{
    compile_worker *w = arg;
    for (;;) {
        long i = atomic_fetch_add(&w->queue->next, 1);
        if (i >= w->queue->njobs)
            return NULL;
        compile_one(&w->queue->jobs[i], w->tms[w->queue->jobs[i].level]);
    }
}

/* Runs the queue on up to `threads` threads (the caller's included). Called with the
 * GIL released and compile_lock held. */
static void
run_queue(compile_queue *q, int threads)
{
    compile_worker workers[MAX_COMPILE_THREADS];
    pthread_t tids[MAX_COMPILE_THREADS];
    int started = 0;
    for (int t = 0; t < threads; t++) {
        workers[t].queue = q;
        workers[t].tms = compile_tms[t];
    }
    for (int t = 1; t < threads; t++) {
        if (pthread_create(&tids[t], NULL, compile_worker_run, &workers[t]) != 0)
            break;                      /* fewer threads: the queue still empties */
        started = t;
    }
    compile_worker_run(&workers[0]);
    for (int t = 1; t <= started; t++)
        pthread_join(tids[t], NULL);
}

/* _jit_compile(specs, names, passes, levels, threads) -> tuple of bytes */
static PyObject *
jit_compile(PyObject *self, PyObject *args)
{
    PyObject *specs, *names, *passes, *levels, *result = NULL;
    int threads;
    if (!PyArg_ParseTuple(args, "O!O!O!O!i:_jit_compile", &PyTuple_Type, &specs,
                          &PyTuple_Type, &names, &PyTuple_Type, &passes, &PyTuple_Type,
                          &levels, &threads))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(specs);
    if (PyTuple_GET_SIZE(names) != n || PyTuple_GET_SIZE(passes) != n ||
        PyTuple_GET_SIZE(levels) != n) {
        PyErr_SetString(PyExc_ValueError,
                        "_jit_compile: one name, pipeline and code generation level per spec");
        return NULL;
    }
    if (jit_init() < 0)
        return NULL;
    compile_job *jobs = PyMem_Calloc(n + 1, sizeof(compile_job));
    if (jobs == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, i));
        jobs[i].passes = PyUnicode_AsUTF8(PyTuple_GET_ITEM(passes, i));
        if (name == NULL || jobs[i].passes == NULL)
            goto done;
        long level = PyLong_AsLong(PyTuple_GET_ITEM(levels, i));
        if (level < 0 || level > 3) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "_jit_compile: code generation level %ld "
                             "is not 0 to 3", level);
            goto done;
        }
        jobs[i].level = (int)level;
        if ((jobs[i].module = build_module(PyTuple_GET_ITEM(specs, i), name)) == NULL)
            goto done;
    }
    if (threads > n)
        threads = (int)n;
    if (threads > MAX_COMPILE_THREADS)
        threads = MAX_COMPILE_THREADS;
    if (threads < 1)
        threads = 1;
    for (int t = 0; t < threads; t++)
        for (Py_ssize_t i = 0; i < n; i++)
            if (compile_tm(t, jobs[i].level) == NULL)
                goto done;
    compile_queue queue = {jobs, n, 0};
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&compile_lock);
    run_queue(&queue, threads);
    pthread_mutex_unlock(&compile_lock);
    Py_END_ALLOW_THREADS
    atomic_fetch_add(&n_compiled, (long)n);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (jobs[i].error != NULL) {
            PyErr_SetString(PyExc_RuntimeError, jobs[i].error);
            goto done;
        }
    }
    if ((result = PyTuple_New(n)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PyBytes_FromStringAndSize(LLVMGetBufferStart(jobs[i].object),
                                                (Py_ssize_t)LLVMGetBufferSize(jobs[i].object));
        if (b == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(result, i, b);
    }
done:
    for (Py_ssize_t i = 0; i < n; i++) {
        dispose_module(jobs[i].module);
        if (jobs[i].object != NULL)
            LLVMDisposeMemoryBuffer(jobs[i].object);
        free(jobs[i].error);
    }
    PyMem_Free(jobs);
    return result;
}

static PyObject *
module_text(LLVMModuleRef M)
{
    char *s = LLVMPrintModuleToString(M);
    PyObject *r = PyUnicode_FromString(s);
    LLVMDisposeMessage(s);
    return r;
}

/* _jit_ir(spec, name, passes) -> (ir, optimized_ir) */
static PyObject *
jit_ir(PyObject *self, PyObject *args)
{
    PyObject *spec, *before = NULL, *after = NULL, *result = NULL;
    const char *name, *passes;
    char *error = NULL;
    if (!PyArg_ParseTuple(args, "Oss:_jit_ir", &spec, &name, &passes))
        return NULL;
    if (jit_init() < 0)
        return NULL;
    LLVMTargetMachineRef tm = compile_tm(0, LLVMCodeGenLevelDefault);
    if (tm == NULL)
        return NULL;
    LLVMModuleRef M = build_module(spec, name);
    if (M == NULL)
        return NULL;
    if ((before = module_text(M)) == NULL)
        goto done;
    int st;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&compile_lock);
    st = optimise(M, passes, tm, &error);
    pthread_mutex_unlock(&compile_lock);
    Py_END_ALLOW_THREADS
    if (st < 0) {
        PyErr_SetString(PyExc_RuntimeError, error ? error : "ember JIT: out of memory");
        goto done;
    }
    if ((after = module_text(M)) == NULL)
        goto done;
    result = PyTuple_Pack(2, before, after);
done:
    free(error);
    Py_XDECREF(before);
    Py_XDECREF(after);
    dispose_module(M);
    return result;
}

/* ------------------------------------------------------------------ JitKernel */

typedef struct {
    PyObject_HEAD
    LLVMOrcResourceTrackerRef rt;
    PyObject *name;
    LLVMOrcExecutorAddress address;
    double load_ms;
    PyObject *weakrefs;
} JitKernel;

static void
jitkernel_dealloc(JitKernel *self)
{
    if (self->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    if (self->rt != NULL) {
        LLVMErrorRef err = LLVMOrcResourceTrackerRemove(self->rt);
        if (err)
            LLVMConsumeError(err);
        LLVMOrcReleaseResourceTracker(self->rt);
    }
    Py_XDECREF(self->name);
    PyObject_Free(self);
}

/* JitKernel(object, name): object code linked into the JIT, `name` looked up */
static PyObject *
jitkernel_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"object", "name", NULL};
    Py_buffer obj;
    PyObject *name;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*U:JitKernel", kwlist, &obj, &name))
        return NULL;
    JitKernel *self = NULL;
    const char *cname = PyUnicode_AsUTF8(name);
    if (cname == NULL || jit_init() < 0)
        goto error;
    double t0 = now_ms();
    if ((self = PyObject_New(JitKernel, type)) == NULL)
        goto error;
    self->rt = NULL;
    self->weakrefs = NULL;
    self->address = 0;
    Py_INCREF(name);
    self->name = name;
    LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(obj.buf, (size_t)obj.len,
                                                                        cname);
    self->rt = LLVMOrcJITDylibCreateResourceTracker(LLVMOrcLLJITGetMainJITDylib(jit));
    LLVMErrorRef err = LLVMOrcLLJITAddObjectFileWithRT(jit, self->rt, buf);
    if (err) {                         /* the JIT owns buf even then */
        llvm_error(err, "adding an object file");
        goto error;
    }
    atomic_fetch_add(&n_loaded, 1);
    err = LLVMOrcLLJITLookup(jit, &self->address, cname);
    if (err) {
        llvm_error(err, "symbol lookup (linking)");
        goto error;
    }
    self->load_ms = now_ms() - t0;
    PyBuffer_Release(&obj);
    return (PyObject *)self;
error:
    PyBuffer_Release(&obj);
    Py_XDECREF(self);
    return NULL;
}

static PyMemberDef jitkernel_members[] = {
    {"name", T_OBJECT, offsetof(JitKernel, name), READONLY, "The kernel's function name."},
    {"address", T_ULONGLONG, offsetof(JitKernel, address), READONLY,
     "The kernel's entry point."},
    {"load_ms", T_DOUBLE, offsetof(JitKernel, load_ms), READONLY,
     "Time to link and look it up."},
    {NULL},
};

static PyTypeObject JitKernel_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember._C.JitKernel",
    .tp_basicsize = sizeof(JitKernel),
    .tp_dealloc = (destructor)jitkernel_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One kernel's object code linked into the JIT (freed with it).",
    .tp_members = jitkernel_members,
    .tp_weaklistoffset = offsetof(JitKernel, weakrefs),
    .tp_new = jitkernel_new,
};

/* ------------------------------------------------------------------ module functions */

static PyObject *
jit_target(PyObject *self, PyObject *noargs)
{
    if (jit_init() < 0)
        return NULL;
    return Py_BuildValue("{ssssssss}", "triple", triple, "cpu", cpu_name, "features",
                         host_features, "llvm", LLVM_VERSION_STRING);
}

static PyObject *
jit_stats(PyObject *self, PyObject *noargs)
{
    return Py_BuildValue("{slsl}", "compiled", atomic_load(&n_compiled), "loaded",
                         atomic_load(&n_loaded));
}

static PyMethodDef jit_methods[] = {
    {"_jit_target", jit_target, METH_NOARGS,
     "The target the JIT compiles for: triple, CPU, features and LLVM's version."},
    {"_jit_compile", jit_compile, METH_VARARGS,
     "_jit_compile(specs, names, passes, levels, threads): object code of each kernel "
     "spec (function names[i], optimised with pipeline passes[i], code generation level "
     "levels[i] 0-3), compiled on up to `threads` threads with the GIL released."},
    {"_jit_ir", jit_ir, METH_VARARGS,
     "_jit_ir(spec, name, passes): the kernel's LLVM IR before and after optimisation."},
    {"_jit_stats", jit_stats, METH_NOARGS,
     "Kernels compiled by LLVM and object files linked, since the process started."},
    {NULL},
};

int
em_jit_init_type(PyObject *module)
{
    if (PyType_Ready(&JitKernel_Type) < 0)
        return -1;
    Py_INCREF(&JitKernel_Type);
    if (PyModule_AddObject(module, "JitKernel", (PyObject *)&JitKernel_Type) < 0)
        return -1;
    return PyModule_AddFunctions(module, jit_methods);
}
