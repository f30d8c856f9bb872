/* cache.c: the per-code cache of compiled entries, kept in co_extra.
 *
 * co_extra[extra_index] of a code object is NULL (never seen) or an em_CodeCache:
 * a tuple of (GuardProgram, compiled callable) entries, MRU first, plus flags
 * (SKIP: always run the frame normally; RUN_ONLY: use the entries but never
 * convert again). Every cache is also linked into a registry, so reset_all() can
 * reach them; the registry holds no references (a cache unlinks itself when its
 * code object dies), so it never keeps code alive.
 *
 * Code objects are not tracked by the cycle collector in 3.11: whatever an entry
 * references lives until the code object dies or the cache is reset. The reset
 * functions exist so ember.compiler.reset() can release compiled objects.
 *
 * Threads: guards may run Python code (a property in an attribute chain), which
 * can switch threads; another thread may then add to or reset this cache. So the
 * entry tuple is replaced, never mutated, lookups iterate over a tuple they hold
 * a reference to, and the cache is looked up again after anything that may run
 * Python code.
 */
#include "capture.h"

#if EM_CAPTURE_HOOK

static Py_ssize_t extra_index = -1;
static em_CodeCache registry = {NULL, 0, NULL, &registry, &registry};
Py_ssize_t em_cache_frees;

static void
unlink_cache(em_CodeCache *c)
{
    c->prev->next = c->next;
    c->next->prev = c->prev;
    c->prev = c->next = c;
}

/* The co_extra free function. CPython calls it for every code object that dies
 * (with NULL when this slot was never set) and when the slot is overwritten. It
 * must not depend on module state: it may run at interpreter shutdown. */
static void
cache_free(void *ptr)
{
    em_CodeCache *c = ptr;
    if (c == NULL)
        return;
    em_cache_frees++;
    unlink_cache(c);
    PyObject *entries = c->entries;
    PyMem_RawFree(c);
    /* Last: releasing entries may run arbitrary code (finalizers of compiled
     * objects) that kills other code objects and so calls this again. */
    Py_XDECREF(entries);
}

em_CodeCache *
em_cache_get(PyCodeObject *code)
{
    void *extra = NULL;
    if (_PyCode_GetExtra((PyObject *)code, extra_index, &extra) < 0) {
        PyErr_Clear();
        return NULL;
    }
    return extra;
}

em_CodeCache *
em_cache_ensure(PyCodeObject *code)
{
    em_CodeCache *c = em_cache_get(code);
    if (c != NULL)
        return c;
    c = PyMem_RawCalloc(1, sizeof(em_CodeCache));
    if (c == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    c->entries = PyTuple_New(0);
    if (c->entries == NULL) {
        PyMem_RawFree(c);
        return NULL;
    }
    c->code = code;
    c->next = registry.next;
    c->prev = &registry;
    registry.next->prev = c;
    registry.next = c;
    /* The slot is NULL, so SetExtra calls no free function before storing. */
    if (_PyCode_SetExtra((PyObject *)code, extra_index, c) < 0) {
        unlink_cache(c);
        Py_DECREF(c->entries);
        PyMem_RawFree(c);
        return NULL;
    }
    return c;
}

/* Moves entry i of entries to the front, if entries is still the current tuple. */
static int
move_to_front(PyCodeObject *code, PyObject *entries, Py_ssize_t i)
{
    em_CodeCache *c = em_cache_get(code);
    if (c == NULL || c->entries != entries)
        return 0;   /* changed while the guards ran: leave the new order alone */
    Py_ssize_t n = PyTuple_GET_SIZE(entries);
    PyObject *reordered = PyTuple_New(n);
    if (reordered == NULL)
        return -1;
    PyTuple_SET_ITEM(reordered, 0, Py_NewRef(PyTuple_GET_ITEM(entries, i)));
    for (Py_ssize_t k = 0, j = 1; k < n; k++) {
        if (k != i)
            PyTuple_SET_ITEM(reordered, j++, Py_NewRef(PyTuple_GET_ITEM(entries, k)));
    }
    c->entries = reordered;
    Py_DECREF(entries);   /* the caller still holds one: no entry dies here */
    return 0;
}

int
em_cache_lookup(PyCodeObject *code, const em_GuardInputs *in, PyObject **fn,
                em_Resolved *resolved)
{
    em_CodeCache *c = em_cache_get(code);
    *fn = NULL;
    resolved->vals = NULL;
    resolved->n = 0;
    if (c == NULL || PyTuple_GET_SIZE(c->entries) == 0)
        return 0;
    PyObject *entries = Py_NewRef(c->entries);
    int result = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(entries); i++) {
        PyObject *entry = PyTuple_GET_ITEM(entries, i);
        em_resolved_clear(resolved);
        int r = em_guards_check_resolved(PyTuple_GET_ITEM(entry, 0), in, resolved);
        if (r < 0) {
            result = -1;
            break;
        }
        if (r > 0) {
            if (i > 0 && move_to_front(code, entries, i) < 0) {
                result = -1;
                break;
            }
            *fn = Py_NewRef(PyTuple_GET_ITEM(entry, 1));
            result = 1;
            break;
        }
    }
    Py_DECREF(entries);
    return result;
}

int
em_cache_add(PyCodeObject *code, PyObject *guards, PyObject *fn)
{
    em_CodeCache *c = em_cache_ensure(code);
    if (c == NULL)
        return -1;
    PyObject *entry = PyTuple_Pack(2, guards, fn);
    if (entry == NULL)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(c->entries);
    PyObject *grown = PyTuple_New(n + 1);
    if (grown == NULL) {
        Py_DECREF(entry);
        return -1;
    }
    PyTuple_SET_ITEM(grown, 0, entry);
    for (Py_ssize_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(grown, i + 1, Py_NewRef(PyTuple_GET_ITEM(c->entries, i)));
    PyObject *old = c->entries;
    c->entries = grown;
    Py_DECREF(old);   /* every old entry is in grown too: nothing dies */
    return 0;
}

int
em_cache_mark(PyCodeObject *code, int flag)
{
    em_CodeCache *c = em_cache_ensure(code);
    if (c == NULL)
        return -1;
    c->flags |= flag;
    return 0;
}

int
em_cache_reset_code(PyCodeObject *code)
{
    em_CodeCache *c = em_cache_get(code);
    if (c == NULL)
        return 0;
    /* Detach the entries first so the free function runs no arbitrary code while
     * the slot is being cleared. */
    PyObject *entries = c->entries;
    c->entries = NULL;
    if (_PyCode_SetExtra((PyObject *)code, extra_index, NULL) < 0) {
        c->entries = entries;
        return -1;
    }
    Py_DECREF(entries);
    return 0;
}

int
em_cache_reset_all(void)
{
    Py_ssize_t n = 0;
    for (em_CodeCache *c = registry.next; c != &registry; c = c->next)
        n++;
    PyObject *garbage = PyList_New(n);
    if (garbage == NULL)
        return -1;
    /* Phase 1: empty the registry without running Python code (no entry is
     * released, so no finalizer can unlink a cache under us). */
    Py_ssize_t k = 0;
    while (registry.next != &registry) {
        em_CodeCache *c = registry.next;
        PyList_SET_ITEM(garbage, k++, c->entries);   /* steals */
        c->entries = NULL;
        if (_PyCode_SetExtra((PyObject *)c->code, extra_index, NULL) < 0) {
            /* Cannot happen for a valid index. Leave an empty, unregistered
             * cache behind rather than a broken one. */
            PyErr_Clear();
            unlink_cache(c);
            c->entries = PyTuple_New(0);   /* the empty-tuple singleton: cannot fail */
            c->flags = 0;
        }
    }
    /* Phase 2: release every entry; finalizers may now run. */
    Py_DECREF(garbage);
    return 0;
}

PyObject *
em_cache_codes(void)
{
    PyObject *list = PyList_New(0);
    if (list == NULL)
        return NULL;
    for (em_CodeCache *c = registry.next; c != &registry; c = c->next) {
        if (PyList_Append(list, (PyObject *)c->code) < 0) {
            Py_DECREF(list);
            return NULL;
        }
    }
    return list;
}

int
em_cache_init(void)
{
    if (extra_index >= 0)
        return 0;   /* one index per process: CPython never releases them */
    extra_index = _PyEval_RequestCodeExtraIndex(cache_free);
    if (extra_index < 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "ember.capture: no free co_extra index (CPython allows 255)");
        return -1;
    }
    return 0;
}

#endif /* EM_CAPTURE_HOOK */
