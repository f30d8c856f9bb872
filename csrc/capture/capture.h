/* capture.h: the frame hook, its per-code cache and guard programs (csrc/capture/).
 *
 * Three files share this header:
 *   guards.c      GuardProgram (guards evaluated in C) and FrameInfo (what the
 *                 converter sees of a frame); version independent.
 *   cache.c       the per-code cache kept in co_extra, and the registry of code
 *                 objects that have one; CPython 3.11 only.
 *   eval_frame.c  the PEP 523 hook, the per-thread callback, the callback
 *                 protocol and the module ember._C._capture; the only file that
 *                 includes CPython's internal frame header.
 */
#ifndef EMBER_CAPTURE_H
#define EMBER_CAPTURE_H

#include "ember.h"

/* The hook is built for CPython 3.11 only: its frame layout is version specific
 * (3.12 needs the hook to clear and pop frames itself). Elsewhere the module
 * still imports and reports the hook as unavailable. */
#if defined(PY_VERSION_HEX) && PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 \
    && !defined(PYPY_VERSION)
#define EM_CAPTURE_HOOK 1
#else
#define EM_CAPTURE_HOOK 0
#endif

/* ------------------------------------------------------------------ guards */

/* The values a guard program reads: the frame's argument slots in slot order,
 * the function's globals and builtins, and its closure (a tuple of cells).
 * Everything is borrowed; globals, builtins and closure may be NULL. */
typedef struct {
    PyObject *const *args;
    Py_ssize_t nargs;
    PyObject *globals;
    PyObject *builtins;
    PyObject *closure;
} em_GuardInputs;

extern PyTypeObject em_GuardProgram_Type;
#define em_GuardProgram_Check(o) (Py_TYPE(o) == &em_GuardProgram_Type)

/* Runs the program over in. Returns 1 (all guards pass), 0 (a guard failed) or
 * -1 with an exception set. With reason != NULL, a failure stores a new
 * reference to a message in *reason ("tensor 'x' size mismatch at dim 0:
 * expected 8, got 16"). */
int em_guards_check(PyObject *program, const em_GuardInputs *in, PyObject **reason);

/* The values of a program's sources, resolved by a check that passed: one entry per
 * source (a new reference, or NULL for a source no guard needed). */
typedef struct {
    PyObject **vals;
    int n;
    PyObject *small[16];
} em_Resolved;

/* em_guards_check that, when every guard passes, keeps the resolved sources in *out
 * (release them with em_resolved_clear, whatever the result). */
int em_guards_check_resolved(PyObject *program, const em_GuardInputs *in,
                             em_Resolved *out);
void em_resolved_clear(em_Resolved *r);
/* The index of the program's source that getter (a Source.getter() chain) names, or
 * -1 when the program has no such source. Never sets an exception. */
int em_guards_find_source(PyObject *program, PyObject *getter);

/* FrameInfo: a struct sequence (code, func, globals, builtins, args, closure). */
extern PyTypeObject *em_FrameInfo_Type;
PyObject *em_frame_info_new(PyObject *code, PyObject *func, PyObject *globals,
                            PyObject *builtins, PyObject *args, PyObject *closure);

int em_guards_init(PyObject *module);

/* 1 if this thread's capture state is callback or RUN_ONLY (always 1 where the
 * hook is not built), else 0: the COMPILE_CONTEXT guard. */
int em_capture_state_is(PyObject *callback);

/* ------------------------------------------------------------------ cache */

#if EM_CAPTURE_HOOK

#define EM_CACHE_SKIP 1        /* never convert; run the frame normally */
#define EM_CACHE_RUN_ONLY 2    /* use cached entries; never call the callback */

/* What co_extra holds for a code object Ember has seen: its entries, MRU first,
 * as a tuple of (GuardProgram, compiled callable) pairs (never NULL), and flags.
 * A code object without one has NULL in its co_extra slot. */
typedef struct em_CodeCache {
    PyObject *entries;
    int flags;
    PyCodeObject *code;                      /* borrowed: the owner */
    struct em_CodeCache *prev, *next;        /* registry of all caches */
} em_CodeCache;

/* The cache of code, or NULL if it has none. Never sets an exception. */
em_CodeCache *em_cache_get(PyCodeObject *code);
/* The cache of code, created if needed. NULL with an exception set on failure. */
em_CodeCache *em_cache_ensure(PyCodeObject *code);
/* Finds the first entry whose guards pass, moves it to the front and stores a new
 * reference to its compiled callable in *fn, and the sources its guards resolved in
 * *resolved (cleared by the caller). Returns 1 (hit), 0 (miss) or -1.
 * Safe against guards that run Python code which resets this cache. */
int em_cache_lookup(PyCodeObject *code, const em_GuardInputs *in, PyObject **fn,
                    em_Resolved *resolved);
/* Prepends (guards, fn). Returns 0 or -1. */
int em_cache_add(PyCodeObject *code, PyObject *guards, PyObject *fn);
/* Sets flag (EM_CACHE_SKIP or EM_CACHE_RUN_ONLY). Returns 0 or -1. */
int em_cache_mark(PyCodeObject *code, int flag);
/* Drops the cache of one code object, or of all of them. Compiled callables are
 * released after the registry is consistent again. Return 0 or -1. */
int em_cache_reset_code(PyCodeObject *code);
int em_cache_reset_all(void);
/* A list of the code objects that have a cache. */
PyObject *em_cache_codes(void);
/* How many caches the co_extra free function has released. */
extern Py_ssize_t em_cache_frees;

int em_cache_init(void);

/* Sets this thread's capture state (NULL: off, RUN_ONLY or a callback; borrowed)
 * and stores the previous one, a new reference or NULL, in *old; installs or
 * removes the hook as needed. Returns 0 or -1. CompiledFrame runs its graph with
 * capture off this way, as torch runs compiled graphs under disable: the frames a
 * graph calls (allow_in_graph functions, a backend's Python code) are not
 * converted, while a compiled function they call turns its own capture on. */
int em_capture_swap_state(PyObject *state, PyObject **old);

/* A cache hit of Python function func without a frame for it (eval_frame.c): 1 with
 * *result set (NULL and an exception on error) when it made the call, 0 when the
 * caller must make the ordinary call. */
int em_capture_call_cached(PyObject *func, PyObject *callback, PyObject *const *args,
                           Py_ssize_t nargs, PyObject **result);

/* ModuleCall (module_call.c): OptimizedModule.__call__ in C; adds the type to m. */
int em_module_call_init(PyObject *m);

/* CompiledFrame (compiled_frame.c): a cache hit's call with the frame's argument
 * slots and the sources its guard program resolved. */
extern PyTypeObject em_CompiledFrame_Type;
#define em_CompiledFrame_Check(o) (Py_TYPE(o) == &em_CompiledFrame_Type)
PyObject *em_compiled_frame_call(PyObject *frame, PyObject *const *args, Py_ssize_t nargs,
                                 const em_Resolved *resolved);

#endif /* EM_CAPTURE_HOOK */

#endif /* EMBER_CAPTURE_H */
