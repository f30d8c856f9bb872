/* eval_frame.c: the PEP 523 frame-evaluation hook (CPython 3.11) and the module
 * ember._C._capture.
 *
 * See docs/frame-hook.md for the frame internals this
 * relies on. In short, for each frame the hook is given:
 *
 *  1. Without touching the frame, it passes through to the evaluation function
 *     installed before it (or CPython's default) when: throwflag is set; the code
 *     is a generator, coroutine or async generator; the code is not a plain
 *     function (module code, class bodies, exec, notebook cells lack
 *     CO_OPTIMIZED|CO_NEWLOCALS); a trace or profile function is running
 *     (tstate->tracing), or one is set (sys.settrace, sys.setprofile: debuggers
 *     and coverage see the code they expect); the frame is not a fresh
 *     thread-owned frame; this thread has capture off or is evaluating guards; or the code is marked SKIP.
 *  2. It evaluates the guards of the code's cache entries (cache.c) over the
 *     argument slots, globals, builtins and closure. On a hit it "calls instead":
 *     it vectorcalls the entry's compiled callable with the argument slots
 *     frame->localsplus[0:nargs] and returns its result. The original frame is
 *     never evaluated; on 3.11 its caller (_PyEval_Vector) clears it.
 *  3. On a miss, unless the thread or code is run-only, it turns capture off for
 *     this thread and calls callback(frame_info, entries) (the protocol is in
 *     python/ember/capture/_hook.py), then turns it back on and acts on the
 *     answer: run the frame normally, mark the code SKIP or RUN_ONLY, or add an
 *     entry and call it instead.
 *
 * Recursion: a compiled callable that is a Python function re-enters this hook
 * with its own code. When an entry is added, that code is marked SKIP (unless it
 * already has a cache), so the compiled function's own frame runs normally while
 * the frames it calls are intercepted as usual. The converter must mark any
 * other code it generates and calls itself (skip_code()).
 *
 * Threads: the hook is installed on the interpreter only while at least one
 * thread has capture on (a count kept under the GIL); each thread's state (its
 * callback, RUN_ONLY, or nothing) lives in a Py_tss_t and new threads start with
 * capture off.
 */
#include "capture.h"

#if EM_CAPTURE_HOOK
#define Py_BUILD_CORE
#include "internal/pycore_frame.h"
#undef Py_BUILD_CORE
#endif

/* ------------------------------------------------------------------ sentinels */

typedef struct {
    PyObject_HEAD
    const char *name;
} Sentinel;

static PyObject *
sentinel_repr(PyObject *self)
{
    return PyUnicode_FromString(((Sentinel *)self)->name);
}

static PyTypeObject Sentinel_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember._C._capture.Sentinel",
    .tp_basicsize = sizeof(Sentinel),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_repr = sentinel_repr,
    .tp_doc = "A marker returned by capture callbacks.",
};

/* Statically allocated and never released, like None. */
static Sentinel skip_object = {PyObject_HEAD_INIT(&Sentinel_Type) "ember.capture.SKIP"};
static Sentinel run_only_object = {PyObject_HEAD_INIT(&Sentinel_Type) "ember.capture.RUN_ONLY"};
#define SKIP ((PyObject *)&skip_object)
#define RUN_ONLY ((PyObject *)&run_only_object)

#if EM_CAPTURE_HOOK

/* ------------------------------------------------------------------ state */

static Py_tss_t callback_key = Py_tss_NEEDS_INIT;   /* NULL, RUN_ONLY or a callable */
static _Thread_local int guards_running;   /* this thread is evaluating guards */
static _Thread_local int callback_depth;   /* this thread is inside the callback */
static _Thread_local int keep_disabled;    /* the callback asked to stay off */

static int active_threads;                 /* threads with capture on */
static int hook_linked;                    /* our hook is installed, or chained to */
static _PyFrameEvalFunction previous_eval; /* what we pass frames to; NULL: default */

static Py_ssize_t n_hits, n_misses, n_callbacks, n_fast_hits;
static PyObject *frame_log;     /* list, or NULL: record_frames() */

static PyObject *eval_frame_hook(PyThreadState *, _PyInterpreterFrame *, int);

static void
hook_install(void)
{
    if (hook_linked)
        return;
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction cur = _PyInterpreterState_GetEvalFrameFunc(interp);
    previous_eval = cur == _PyEval_EvalFrameDefault ? NULL : cur;
    _PyInterpreterState_SetEvalFrameFunc(interp, eval_frame_hook);
    hook_linked = 1;
}

static void
hook_remove(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    if (!hook_linked || frame_log != NULL)      /* recording: stays until it stops */
        return;
    /* If another hook was installed over ours, it chains to us: stay linked
     * (passing everything through) rather than cut it off. When it removes
     * itself it restores ours, and the next removal restores our predecessor. */
    if (_PyInterpreterState_GetEvalFrameFunc(interp) != eval_frame_hook)
        return;
    _PyInterpreterState_SetEvalFrameFunc(
        interp, previous_eval != NULL ? previous_eval : _PyEval_EvalFrameDefault);
    hook_linked = 0;
}

/* Makes state (NULL, RUN_ONLY or a callable; borrowed) this thread's capture
 * state, storing the previous one (a new reference, or NULL) in *old. Installs
 * or removes the hook as the number of threads with capture on crosses zero. */
static int
swap_state(PyObject *state, PyObject **old)
{
    PyObject *prev = PyThread_tss_get(&callback_key);
    if (PyThread_tss_set(&callback_key, state) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "ember.capture: cannot set thread-local state");
        return -1;
    }
    Py_XINCREF(state);
    if (prev == NULL && state != NULL && active_threads++ == 0)
        hook_install();
    else if (prev != NULL && state == NULL && --active_threads == 0)
        hook_remove();
    *old = prev;
    return 0;
}

int
em_capture_swap_state(PyObject *state, PyObject **old)
{
    return swap_state(state, old);
}

static inline PyObject *
eval_default(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag)
{
    if (previous_eval != NULL)
        return previous_eval(tstate, frame, throwflag);
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
}

/* ------------------------------------------------------------------ the hook */

#define NOT_CONVERTIBLE (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | \
                         CO_ITERABLE_COROUTINE)
#define PLAIN_FUNCTION (CO_OPTIMIZED | CO_NEWLOCALS)

static inline Py_ssize_t
bound_slots(PyCodeObject *code)
{
    return code->co_argcount + code->co_kwonlyargcount +
           ((code->co_flags & CO_VARARGS) != 0) + ((code->co_flags & CO_VARKEYWORDS) != 0);
}

/* Calls fn with the frame's argument slots (borrowed) instead of running it. */
static inline PyObject *
call_instead(PyObject *fn, _PyInterpreterFrame *frame, Py_ssize_t nargs)
{
    return PyObject_Vectorcall(fn, frame->localsplus, nargs, NULL);
}

static PyObject *
args_tuple(_PyInterpreterFrame *frame, Py_ssize_t nargs)
{
    PyObject *t = PyTuple_New(nargs);
    if (t == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyObject *v = frame->localsplus[i] ? frame->localsplus[i] : Py_None;
        PyTuple_SET_ITEM(t, i, Py_NewRef(v));
    }
    return t;
}

/* Marks the code of a compiled callable SKIP, so calling it does not ask the
 * converter about it (see the recursion note at the top). */
static int
mark_compiled_code(PyObject *fn, PyCodeObject *original)
{
    if (PyMethod_Check(fn))
        fn = PyMethod_GET_FUNCTION(fn);
    if (!PyFunction_Check(fn))
        return 0;
    PyCodeObject *code = (PyCodeObject *)PyFunction_GET_CODE(fn);
    if (code == original) {
        PyErr_SetString(PyExc_ValueError,
                        "capture callback: the compiled callable runs the original code "
                        "(return None to run the frame normally)");
        return -1;
    }
    if (em_cache_get(code) != NULL)
        return 0;
    return em_cache_mark(code, EM_CACHE_SKIP);
}

/* The miss path: asks the callback and acts on its answer. */
static PyObject *
convert_frame(PyThreadState *tstate, _PyInterpreterFrame *frame, PyObject *callback,
              Py_ssize_t nargs)
{
    PyCodeObject *code = frame->f_code;
    PyFunctionObject *func = frame->f_func;
    PyObject *args = NULL, *info = NULL, *entries = NULL, *res = NULL, *saved = NULL;
    PyObject *left = NULL, *fn = NULL;

    args = args_tuple(frame, nargs);
    if (args == NULL)
        goto error;
    info = em_frame_info_new((PyObject *)code, (PyObject *)func, frame->f_globals,
                             frame->f_builtins, args, func->func_closure);
    if (info == NULL)
        goto error;
    em_CodeCache *cache = em_cache_get(code);
    entries = cache != NULL ? Py_NewRef(cache->entries) : PyTuple_New(0);
    if (entries == NULL)
        goto error;

    /* Capture is off on this thread while the converter runs: user code it calls
     * (properties, reprs, helpers) must run normally. This may remove the hook
     * altogether for the duration, which also spares the converter its cost. */
    Py_INCREF(callback);
    if (swap_state(NULL, &saved) < 0) {
        Py_DECREF(callback);
        goto error;
    }
    Py_XDECREF(saved);   /* == callback, which we hold */
    int outer_keep = keep_disabled;
    keep_disabled = 0;
    callback_depth++;
    n_callbacks++;
    PyObject *cbargs[2] = {info, entries};
    res = PyObject_Vectorcall(callback, cbargs, 2, NULL);
    callback_depth--;
    int keep_off = keep_disabled;
    keep_disabled = outer_keep;
    if (!keep_off) {
        if (swap_state(callback, &left) < 0) {
            Py_DECREF(callback);
            goto error;
        }
        Py_XDECREF(left);   /* normally NULL: the callback restored what it set */
    }
    Py_DECREF(callback);
    Py_CLEAR(info);
    Py_CLEAR(entries);
    Py_CLEAR(args);
    if (res == NULL)
        return NULL;   /* never run the frame with an exception pending */

    if (res == Py_None) {
        Py_DECREF(res);
        return eval_default(tstate, frame, 0);
    }
    if (res == SKIP || res == RUN_ONLY) {
        int flag = res == SKIP ? EM_CACHE_SKIP : EM_CACHE_RUN_ONLY;
        Py_DECREF(res);
        if (em_cache_mark(code, flag) < 0)
            return NULL;
        return eval_default(tstate, frame, 0);
    }
    if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 2 ||
        !em_GuardProgram_Check(PyTuple_GET_ITEM(res, 0)) ||
        !PyCallable_Check(PyTuple_GET_ITEM(res, 1))) {
        PyErr_Format(PyExc_TypeError,
                     "capture callback must return None, SKIP, RUN_ONLY or "
                     "(GuardProgram, callable), got %.200R", res);
        goto error;
    }
    fn = Py_NewRef(PyTuple_GET_ITEM(res, 1));
    if (mark_compiled_code(fn, code) < 0 ||
        em_cache_add(code, PyTuple_GET_ITEM(res, 0), fn) < 0)
        goto error;
    Py_DECREF(res);
    PyObject *result = call_instead(fn, frame, nargs);
    Py_DECREF(fn);
    return result;

error:
    Py_XDECREF(args);
    Py_XDECREF(info);
    Py_XDECREF(entries);
    Py_XDECREF(res);
    Py_XDECREF(fn);
    return NULL;
}

static PyObject *
eval_frame_hook(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag)
{
    PyCodeObject *code = frame->f_code;
    if (frame_log != NULL && PyList_Append(frame_log, (PyObject *)code) < 0)
        return NULL;
    if (throwflag || (code->co_flags & NOT_CONVERTIBLE) ||
        (code->co_flags & PLAIN_FUNCTION) != PLAIN_FUNCTION || tstate->tracing > 0 ||
        tstate->cframe->use_tracing || guards_running || frame->owner != FRAME_OWNED_BY_THREAD ||
        _PyInterpreterFrame_LASTI(frame) >= 0)
        return eval_default(tstate, frame, throwflag);
    if (PyThread_tss_get(&callback_key) == NULL)
        return eval_default(tstate, frame, throwflag);
    em_CodeCache *cache = em_cache_get(code);
    if (cache != NULL && (cache->flags & EM_CACHE_SKIP))
        return eval_default(tstate, frame, throwflag);

    Py_ssize_t nargs = bound_slots(code);
    if (cache != NULL && PyTuple_GET_SIZE(cache->entries) > 0) {
        em_GuardInputs in = {frame->localsplus, nargs, frame->f_globals, frame->f_builtins,
                             frame->f_func->func_closure};
        PyObject *fn = NULL;
        em_Resolved resolved;
        guards_running++;
        int r = em_cache_lookup(code, &in, &fn, &resolved);
        guards_running--;
        if (r < 0) {
            em_resolved_clear(&resolved);
            return NULL;
        }
        if (r > 0) {
            n_hits++;
            /* a CompiledFrame takes the sources the guards resolved (each chain is
             * walked once per call); anything else is called with the slots */
            PyObject *result = em_CompiledFrame_Check(fn)
                ? em_compiled_frame_call(fn, frame->localsplus, nargs, &resolved)
                : call_instead(fn, frame, nargs);
            em_resolved_clear(&resolved);
            Py_DECREF(fn);
            return result;
        }
        em_resolved_clear(&resolved);
    }
    n_misses++;
    /* Guards may have run Python code (and other threads): look again. */
    PyObject *callback = PyThread_tss_get(&callback_key);
    cache = em_cache_get(code);
    if (callback == NULL || callback == RUN_ONLY ||
        (cache != NULL && (cache->flags & (EM_CACHE_SKIP | EM_CACHE_RUN_ONLY))))
        return eval_default(tstate, frame, throwflag);
    return convert_frame(tstate, frame, callback, nargs);
}

/* ------------------------------------------------------------------ FastCall */

/* FastCall(func, callback, slow): what ember.compile(fn, mode="reduce-overhead")
 * returns: em_capture_call_cached (below) on every call, and slow, the ordinary
 * wrapper taking the hook's path, for the calls it cannot make. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *func;        /* a Python function */
    PyObject *callback;    /* the capture state the wrapper sets */
    PyObject *slow;        /* the ordinary wrapper: slow(*args, **kwargs) */
    PyObject *dict;
} FastCall;

/* The frameless cache hit that FastCall, FunctionCall and ModuleCall (module_call.c)
 * try first: a call of func with positional arguments only, exactly its parameters,
 * made with capture off on this thread and no tracer, looks up the function's cache
 * entries itself (with this thread's state set to callback, as the hook would see it)
 * and calls a hit's CompiledFrame with the arguments, pushing no frame for func. An
 * error from the graph runs the frame eagerly (the CompiledFrame's on_error), so the
 * caller sees eager's exception and traceback, as on the hook's path. Returns 1 with
 * *result set (NULL with an exception set on error) when it made the call; 0 when the
 * caller must make the ordinary call (keywords, defaults to apply, a miss, an entry
 * that is not a CompiledFrame, capture already on, a tracer). */
int
em_capture_call_cached(PyObject *func, PyObject *callback, PyObject *const *args,
                       Py_ssize_t nargs, PyObject **result)
{
    PyFunctionObject *f = (PyFunctionObject *)func;
    PyCodeObject *code = (PyCodeObject *)f->func_code;
    PyThreadState *tstate = PyThreadState_Get();
    em_CodeCache *cache;
    *result = NULL;
    if (nargs != code->co_argcount || bound_slots(code) != nargs ||
        (code->co_flags & NOT_CONVERTIBLE) ||
        (code->co_flags & PLAIN_FUNCTION) != PLAIN_FUNCTION || tstate->tracing > 0 ||
        tstate->cframe->use_tracing || guards_running ||
        PyThread_tss_get(&callback_key) != NULL ||
        (cache = em_cache_get(code)) == NULL || (cache->flags & EM_CACHE_SKIP) ||
        PyTuple_GET_SIZE(cache->entries) == 0)
        return 0;

    PyObject *old, *mine;
    if (swap_state(callback, &old) < 0)
        return 1;
    em_GuardInputs in = {args, nargs, f->func_globals, f->func_builtins, f->func_closure};
    PyObject *fn = NULL;
    em_Resolved resolved;
    guards_running++;
    int r = em_cache_lookup(code, &in, &fn, &resolved);
    guards_running--;
    int hit = r > 0 && em_CompiledFrame_Check(fn);
    if (hit) {
        n_hits++;
        n_fast_hits++;
        *result = em_compiled_frame_call(fn, args, nargs, &resolved);
    }
    em_resolved_clear(&resolved);
    Py_XDECREF(fn);
    /* back to capture off: the state this call set goes, as does its reference */
    if (swap_state(old, &mine) < 0) {
        Py_CLEAR(*result);
        Py_XDECREF(old);
        return 1;
    }
    Py_XDECREF(mine);
    Py_XDECREF(old);
    return r < 0 || hit;
}

static PyObject *
fast_call_vectorcall(FastCall *self, PyObject *const *args, size_t nargsf,
                     PyObject *kwnames)
{
    PyObject *result;
    if (kwnames == NULL &&
        em_capture_call_cached(self->func, self->callback, args,
                               PyVectorcall_NARGS(nargsf), &result))
        return result;
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyObject *
fast_call_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *func, *callback, *slow;
    if (!PyArg_ParseTuple(args, "O!OO:FastCall", &PyFunction_Type, &func, &callback, &slow))
        return NULL;
    if (!PyCallable_Check(callback) || !PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "FastCall: callback and slow must be callable");
        return NULL;
    }
    FastCall *self = (FastCall *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)fast_call_vectorcall;
    self->func = Py_NewRef(func);
    self->callback = Py_NewRef(callback);
    self->slow = Py_NewRef(slow);
    return (PyObject *)self;
}

static int
fast_call_traverse(FastCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->func);
    Py_VISIT(self->callback);
    Py_VISIT(self->slow);
    Py_VISIT(self->dict);
    return 0;
}

static int
fast_call_clear(FastCall *self)
{
    Py_CLEAR(self->func);
    Py_CLEAR(self->callback);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->dict);
    return 0;
}

static void
fast_call_dealloc(FastCall *self)
{
    PyObject_GC_UnTrack(self);
    fast_call_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A method when read from an instance, as the function it stands for. */
static PyObject *
fast_call_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyGetSetDef fast_call_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyTypeObject FastCall_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember._C._capture.FastCall",
    .tp_basicsize = sizeof(FastCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "FastCall(func, callback, slow): ember.compile(func, "
              "mode='reduce-overhead'): a cache hit called with no Python frame.",
    .tp_new = fast_call_new,
    .tp_dealloc = (destructor)fast_call_dealloc,
    .tp_traverse = (traverseproc)fast_call_traverse,
    .tp_clear = (inquiry)fast_call_clear,
    .tp_vectorcall_offset = offsetof(FastCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = fast_call_descr_get,
    .tp_dictoffset = offsetof(FastCall, dict),
    .tp_getset = fast_call_getset,
};

/* ------------------------------------------------------------------ a test hook */

/* A second, trivial hook that counts frames and chains to its predecessor, so
 * tests can check that Ember chains to a hook installed before it. */
static _PyFrameEvalFunction test_previous;
static Py_ssize_t test_calls;

static PyObject *
test_hook(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag)
{
    test_calls++;
    if (test_previous != NULL)
        return test_previous(tstate, frame, throwflag);
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
}

static PyObject *
test_hook_install(PyObject *self, PyObject *noargs)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction cur = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (cur == test_hook) {
        PyErr_SetString(PyExc_RuntimeError, "the test hook is already installed");
        return NULL;
    }
    test_previous = cur == _PyEval_EvalFrameDefault ? NULL : cur;
    test_calls = 0;
    _PyInterpreterState_SetEvalFrameFunc(interp, test_hook);
    Py_RETURN_NONE;
}

static PyObject *
test_hook_uninstall(PyObject *self, PyObject *noargs)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    if (_PyInterpreterState_GetEvalFrameFunc(interp) != test_hook) {
        PyErr_SetString(PyExc_RuntimeError, "the test hook is not the current hook");
        return NULL;
    }
    _PyInterpreterState_SetEvalFrameFunc(
        interp, test_previous != NULL ? test_previous : _PyEval_EvalFrameDefault);
    return PyLong_FromSsize_t(test_calls);
}

static PyObject *
test_hook_calls(PyObject *self, PyObject *noargs)
{
    return PyLong_FromSsize_t(test_calls);
}

/* ------------------------------------------------------------------ Python API */

static int
check_main_interpreter(void)
{
    if (PyInterpreterState_Get() != PyInterpreterState_Main()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "ember.capture: the frame hook works in the main interpreter only");
        return -1;
    }
    return 0;
}

/* None -> NULL (off), RUN_ONLY, or a callable. */
static int
state_from_object(PyObject *obj, PyObject **state)
{
    if (obj == Py_None) {
        *state = NULL;
        return 0;
    }
    if (obj == RUN_ONLY || (obj != SKIP && PyCallable_Check(obj))) {
        *state = obj;
        return 0;
    }
    PyErr_Format(PyExc_TypeError,
                 "capture state must be None, RUN_ONLY or a callable, got %.200R", obj);
    return -1;
}

static PyObject *
set_state(PyObject *self, PyObject *obj)
{
    PyObject *state, *old;
    if (check_main_interpreter() < 0 || state_from_object(obj, &state) < 0 ||
        swap_state(state, &old) < 0)
        return NULL;
    return old != NULL ? old : Py_NewRef(Py_None);
}

static PyObject *
get_state(PyObject *self, PyObject *noargs)
{
    PyObject *state = PyThread_tss_get(&callback_key);
    return Py_NewRef(state != NULL ? state : Py_None);
}

static PyObject *
stay_disabled(PyObject *self, PyObject *noargs)
{
    if (callback_depth == 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "stay_disabled() is meant for the capture callback: call it "
                        "from inside the callback");
        return NULL;
    }
    keep_disabled = 1;
    Py_RETURN_NONE;
}

static int
code_arg(PyObject *obj, PyCodeObject **code)
{
    if (PyFunction_Check(obj))
        obj = PyFunction_GET_CODE(obj);
    if (!PyCode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "expected a code object or function, got %.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *code = (PyCodeObject *)obj;
    return 0;
}

static PyObject *
reset_code(PyObject *self, PyObject *obj)
{
    PyCodeObject *code;
    if (code_arg(obj, &code) < 0 || em_cache_reset_code(code) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
reset_all(PyObject *self, PyObject *noargs)
{
    if (em_cache_reset_all() < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
mark_code(PyObject *self, PyObject *args)
{
    PyObject *obj, *mark;
    PyCodeObject *code;
    if (!PyArg_ParseTuple(args, "OO:mark_code", &obj, &mark) || code_arg(obj, &code) < 0)
        return NULL;
    if (mark != SKIP && mark != RUN_ONLY) {
        PyErr_SetString(PyExc_TypeError, "mark_code: the mark must be SKIP or RUN_ONLY");
        return NULL;
    }
    if (em_cache_mark(code, mark == SKIP ? EM_CACHE_SKIP : EM_CACHE_RUN_ONLY) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
code_mark(PyObject *self, PyObject *obj)
{
    PyCodeObject *code;
    if (code_arg(obj, &code) < 0)
        return NULL;
    em_CodeCache *c = em_cache_get(code);
    if (c != NULL && (c->flags & EM_CACHE_SKIP))
        return Py_NewRef(SKIP);
    if (c != NULL && (c->flags & EM_CACHE_RUN_ONLY))
        return Py_NewRef(RUN_ONLY);
    Py_RETURN_NONE;
}

static PyObject *
cache_entries(PyObject *self, PyObject *obj)
{
    PyCodeObject *code;
    if (code_arg(obj, &code) < 0)
        return NULL;
    em_CodeCache *c = em_cache_get(code);
    return c != NULL ? Py_NewRef(c->entries) : PyTuple_New(0);
}

static PyObject *
cached_codes(PyObject *self, PyObject *noargs)
{
    return em_cache_codes();
}

static PyObject *
counters(PyObject *self, PyObject *noargs)
{
    return Py_BuildValue("{snsnsnsnsnsi}", "hits", n_hits, "misses", n_misses, "callbacks",
                         n_callbacks, "frees", em_cache_frees, "fast_hits", n_fast_hits,
                         "active_threads", active_threads);
}

/* record_frames(list or None) -> the previous one: while a list is set, the hook stays
 * linked and the code of every frame evaluated is appended to it (tests: a cache hit
 * runs no Python frame of ember's own; sys.setprofile would turn capture off). */
static PyObject *
record_frames(PyObject *self, PyObject *log)
{
    if (log != Py_None && !PyList_Check(log)) {
        PyErr_SetString(PyExc_TypeError, "record_frames: a list or None");
        return NULL;
    }
    PyObject *prev = frame_log != NULL ? frame_log : Py_NewRef(Py_None);
    frame_log = log == Py_None ? NULL : Py_NewRef(log);
    /* the hook is linked while recording, capture on or not (a compiled graph runs
     * with capture off: its frames are recorded too) */
    if (frame_log != NULL)
        hook_install();
    else if (active_threads == 0)
        hook_remove();
    return prev;
}

static PyObject *
reset_counters(PyObject *self, PyObject *noargs)
{
    n_hits = n_misses = n_callbacks = n_fast_hits = 0;
    Py_RETURN_NONE;
}

static PyObject *
hook_info(PyObject *self, PyObject *noargs)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction cur = _PyInterpreterState_GetEvalFrameFunc(interp);
    const char *current = cur == eval_frame_hook ? "ember"
                          : cur == _PyEval_EvalFrameDefault ? "default"
                          : cur == test_hook ? "test" : "other";
    const char *previous = previous_eval == NULL ? "default"
                           : previous_eval == test_hook ? "test" : "other";
    return Py_BuildValue("{sssOsssi}", "current", current, "linked",
                         hook_linked ? Py_True : Py_False, "previous", previous,
                         "active_threads", active_threads);
}

/* The address of this thread's data-stack top: flat across calls unless frames
 * leak. For tests. */
static PyObject *
datastack_top(PyObject *self, PyObject *noargs)
{
    return PyLong_FromVoidPtr(PyThreadState_Get()->datastack_top);
}

/* ------------------------------------------------------------------ CaptureState */

/* CaptureState(state): a context manager that sets this thread's capture state
 * on entry and restores the previous one on exit. Written in C so that entering
 * and leaving a capture region runs no Python frame the hook would see. */
typedef struct {
    PyObject_HEAD
    PyObject *state;          /* NULL (off), RUN_ONLY or a callable */
    PyObject *prev;
    int entered;
} CaptureState;

static PyObject *
capture_state_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *obj, *state;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "CaptureState() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "CaptureState", 1, 1, &obj) ||
        state_from_object(obj, &state) < 0)
        return NULL;
    CaptureState *cs = (CaptureState *)type->tp_alloc(type, 0);
    if (cs == NULL)
        return NULL;
    cs->state = Py_XNewRef(state);
    return (PyObject *)cs;
}

static PyObject *
capture_state_enter(PyObject *self, PyObject *noargs)
{
    CaptureState *cs = (CaptureState *)self;
    if (cs->entered) {
        PyErr_SetString(PyExc_RuntimeError, "CaptureState is not reentrant");
        return NULL;
    }
    if (check_main_interpreter() < 0 || swap_state(cs->state, &cs->prev) < 0)
        return NULL;
    cs->entered = 1;
    return Py_NewRef(self);
}

static PyObject *
capture_state_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    CaptureState *cs = (CaptureState *)self;
    PyObject *left;
    if (!cs->entered) {
        PyErr_SetString(PyExc_RuntimeError, "CaptureState exited without being entered");
        return NULL;
    }
    if (swap_state(cs->prev, &left) < 0)
        return NULL;
    Py_XDECREF(left);
    Py_CLEAR(cs->prev);
    cs->entered = 0;
    Py_RETURN_FALSE;
}

static int
capture_state_traverse(CaptureState *cs, visitproc visit, void *arg)
{
    Py_VISIT(cs->state);
    Py_VISIT(cs->prev);
    return 0;
}

static int
capture_state_clear(CaptureState *cs)
{
    Py_CLEAR(cs->state);
    Py_CLEAR(cs->prev);
    return 0;
}

static void
capture_state_dealloc(CaptureState *cs)
{
    PyObject_GC_UnTrack(cs);
    capture_state_clear(cs);
    Py_TYPE(cs)->tp_free((PyObject *)cs);
}

static PyObject *
capture_state_get(PyObject *self, void *c)
{
    PyObject *state = ((CaptureState *)self)->state;
    return Py_NewRef(state != NULL ? state : Py_None);
}

static PyMethodDef capture_state_methods[] = {
    {"__enter__", capture_state_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))capture_state_exit, METH_FASTCALL, NULL},
    {NULL},
};

static PyGetSetDef capture_state_getset[] = {
    {"state", capture_state_get, NULL, "the state this context sets", NULL},
    {NULL},
};

static PyTypeObject CaptureState_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember._C._capture.CaptureState",
    .tp_basicsize = sizeof(CaptureState),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "CaptureState(state): `with` sets this thread's capture state (None, "
              "RUN_ONLY or a callback) and restores the previous one on exit.",
    .tp_new = capture_state_new,
    .tp_dealloc = (destructor)capture_state_dealloc,
    .tp_traverse = (traverseproc)capture_state_traverse,
    .tp_clear = (inquiry)capture_state_clear,
    .tp_methods = capture_state_methods,
    .tp_getset = capture_state_getset,
};

static PyMethodDef capture_methods[] = {
    {"set_state", set_state, METH_O,
     "set_state(state) -> previous: this thread's capture state: None (off), RUN_ONLY "
     "(cached entries only) or a callback(frame_info, entries)."},
    {"get_state", get_state, METH_NOARGS, "get_state() -> this thread's capture state"},
    {"record_frames", record_frames, METH_O,
     "record_frames(list or None) -> previous: appends the code of every frame the hook "
     "is given to the list (None: stop)."},
    {"stay_disabled", stay_disabled, METH_NOARGS,
     "stay_disabled(): from inside the callback, leave capture off on this thread "
     "when the callback returns or raises."},
    {"reset_code", reset_code, METH_O,
     "reset_code(code_or_function): drop its cache entries and marks."},
    {"reset_all", reset_all, METH_NOARGS,
     "reset_all(): drop every cache entry and mark; compiled objects are released."},
    {"mark_code", mark_code, METH_VARARGS,
     "mark_code(code_or_function, SKIP | RUN_ONLY): mark a code object."},
    {"code_mark", code_mark, METH_O, "code_mark(code) -> SKIP, RUN_ONLY or None"},
    {"cache_entries", cache_entries, METH_O,
     "cache_entries(code) -> tuple of (GuardProgram, callable), most recently used first"},
    {"cached_codes", cached_codes, METH_NOARGS,
     "cached_codes() -> list of code objects with a cache or a mark"},
    {"counters", counters, METH_NOARGS,
     "counters() -> {hits, misses, callbacks, frees, fast_hits, active_threads} "
     "(fast_hits: the hits of FastCall, counted in hits too)"},
    {"reset_counters", reset_counters, METH_NOARGS, NULL},
    {"hook_info", hook_info, METH_NOARGS,
     "hook_info() -> {current, linked, previous, active_threads}"},
    {"_datastack_top", datastack_top, METH_NOARGS, NULL},
    {"_test_hook_install", test_hook_install, METH_NOARGS, NULL},
    {"_test_hook_uninstall", test_hook_uninstall, METH_NOARGS, NULL},
    {"_test_hook_calls", test_hook_calls, METH_NOARGS, NULL},
    {NULL},
};

#else /* !EM_CAPTURE_HOOK */

static PyMethodDef capture_methods[] = {
    {NULL},
};

#endif /* EM_CAPTURE_HOOK */

int
em_capture_state_is(PyObject *callback)
{
#if EM_CAPTURE_HOOK
    PyObject *state = PyThread_tss_get(&callback_key);
    return state == callback || state == RUN_ONLY;
#else
    return 1;
#endif
}

/* ------------------------------------------------------------------ module */

static struct PyModuleDef capture_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ember._C._capture",
    .m_doc = "The PEP 523 frame hook, its per-code cache and guard programs "
             "(csrc/capture/). Use it through ember.capture._hook.",
    .m_size = -1,
    .m_methods = capture_methods,
};

int
em_capture_init(PyObject *module)
{
    PyObject *m = PyModule_Create(&capture_def);
    if (m == NULL)
        return -1;
    if (PyType_Ready(&Sentinel_Type) < 0 || em_guards_init(m) < 0 ||
        PyModule_AddObjectRef(m, "SKIP", SKIP) < 0 ||
        PyModule_AddObjectRef(m, "RUN_ONLY", RUN_ONLY) < 0 ||
        PyModule_AddObjectRef(m, "available", EM_CAPTURE_HOOK ? Py_True : Py_False) < 0)
        goto error;
#if EM_CAPTURE_HOOK
    if (!PyThread_tss_is_created(&callback_key) && PyThread_tss_create(&callback_key) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "ember.capture: cannot create thread-local key");
        goto error;
    }
    if (em_cache_init() < 0 || PyType_Ready(&CaptureState_Type) < 0 ||
        PyModule_AddObjectRef(m, "CaptureState", (PyObject *)&CaptureState_Type) < 0 ||
        PyType_Ready(&FastCall_Type) < 0 ||
        PyModule_AddObjectRef(m, "FastCall", (PyObject *)&FastCall_Type) < 0 ||
        em_module_call_init(m) < 0)
        goto error;
#endif
    if (PyModule_AddObject(module, "_capture", m) < 0)
        goto error;
    return 0;

error:
    Py_DECREF(m);
    return -1;
}
