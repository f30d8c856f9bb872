/* threadpool.c: the persistent worker threads compiled kernels run on.
 *
 * em_parallel_for(fn, ctx, n, chunk, parallel) runs fn over [0, n) in chunks of `chunk`
 * indices: chunk i is [i * chunk, (i + 1) * chunk), so where an index falls (which
 * element starts a vector, which ends in a scalar tail) never depends on the thread
 * count or on timing, and results are identical run to run. When parallel, the workers
 * and the calling thread take chunks off a shared counter; otherwise the caller runs
 * them in order. Workers are started on first use and spin for a short while after each
 * job before they sleep on a condition variable (waking a sleeping thread costs tens of
 * microseconds in a VM; a spinning one, well under one), so back-to-back kernels of one
 * graph find them awake. A spinning thread (a worker between jobs, the caller waiting
 * for chunks others took) yields its core every YIELD_EVERY rounds, so that BLAS's
 * threads, or a descheduled worker, are not kept waiting by it (relax()).
 *
 * The caller releases the GIL while the chunks run. Between its chunks, at most every
 * SIGNAL_CHECK_SECONDS, the main thread (the only one Python runs signal handlers in)
 * takes the GIL back and runs PyErr_CheckSignals: when a signal
 * handler raised (Ctrl-C's KeyboardInterrupt), it closes the counter so no thread
 * starts another chunk, waits for the chunks already taken, and returns -1 with the
 * exception set. The pool is then idle and ready for the next job.
 *
 * The counter is one 64-bit word, the job's generation (high half) and the next chunk
 * (low half), so a worker that wakes late for a finished job cannot take a chunk of the
 * next one: its compare-and-swap names the old generation. A job ends with the counter
 * closed (CLOSED), and only then are the job's fields written again.
 *
 * fork() (DataLoader workers, multiprocessing): a pthread_atfork handler registered when
 * the module loads takes the pool's lock before the fork, so no worker holds it in the
 * copied memory. A job may be running in another thread of the parent (its caller may
 * be waiting for the GIL the forking thread holds, so the handler cannot wait for the
 * job); the child, whose only thread is the one that forked, runs no job of the parent:
 * it forgets the workers (threads are not copied), makes its locks anew and starts new
 * workers when it next needs them.
 */
#include "runtime/runtime.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64
#define SPIN_ROUNDS 20000
#define YIELD_EVERY 64
#define CLOSED 0xffffffffu              /* the chunk half of a closed counter */
#define MAX_CHUNKS (CLOSED - 1)
#define SIGNAL_CHECK_SECONDS 0.02

static struct {
    pthread_mutex_t lock;          /* guards sleeping workers */
    pthread_cond_t wake;
    int started;                   /* workers running */
    int nthreads;                  /* threads a job uses, the caller included */
    atomic_uint generation;        /* bumped per job */
    atomic_uint_least64_t ticket;  /* generation << 32 | next chunk (CLOSED: none) */
    atomic_long done;              /* chunks finished */
    em_range_fn fn;
    void *ctx;
    int64_t n, chunk;
    uint32_t nchunks;
} pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .nthreads = 1,
    .ticket = CLOSED,
};

static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER;   /* one job at a time */
/* Jobs handed to the pool's threads since the module loaded (read by _pool_jobs(): tests
 * check that a kernel does spread its chunks; written under job_lock). */
static unsigned long long pool_jobs;

/* One round of a spin-wait: a pause, and every YIELD_EVERY rounds the core to another
 * runnable thread. The cores may be busy with BLAS's own threads (a matrix product
 * right after a kernel), other processes, or the very thread being waited for (more
 * threads than cores): a waiter that only pauses holds its core for its whole time
 * slice, one that yields lets them run. */
static void
relax(int spins)
{
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    if (spins % YIELD_EVERY == 0)
        sched_yield();
}

static void
run_chunk(em_range_fn fn, void *ctx, int64_t n, int64_t chunk, uint32_t i)
{
    int64_t lo = (int64_t)i * chunk;
    int64_t hi = n - lo > chunk ? lo + chunk : n;
    if (lo < hi)
        fn(ctx, lo, hi);
}

/* Takes the next chunk of job `gen`: its number, or -1 when there is none. */
static int64_t
take_chunk(uint32_t gen)
{
    uint64_t t = atomic_load(&pool.ticket);
    for (;;) {
        uint32_t i = (uint32_t)t;
        if ((uint32_t)(t >> 32) != gen || i == CLOSED || i >= pool.nchunks)
            return -1;
        if (atomic_compare_exchange_weak(&pool.ticket, &t, t + 1))
            return i;
    }
}

static void
work_on(uint32_t gen)
{
    int64_t i;
    while ((i = take_chunk(gen)) >= 0) {
        run_chunk(pool.fn, pool.ctx, pool.n, pool.chunk, (uint32_t)i);
        atomic_fetch_add(&pool.done, 1);
    }
}

static void *
worker(void *arg)
{
    unsigned seen = atomic_load(&pool.generation);
    for (;;) {
        int spins = 0;
        while (atomic_load(&pool.generation) == seen && spins < SPIN_ROUNDS) {
            spins++;
            relax(spins);
        }
        if (atomic_load(&pool.generation) == seen) {
            pthread_mutex_lock(&pool.lock);
            while (atomic_load(&pool.generation) == seen)
                pthread_cond_wait(&pool.wake, &pool.lock);
            pthread_mutex_unlock(&pool.lock);
        }
        seen = atomic_load(&pool.generation);
        work_on(seen);
    }
    return arg;
}

static void
before_fork(void)
{
    pthread_mutex_lock(&pool.lock);
}

static void
after_fork_parent(void)
{
    pthread_mutex_unlock(&pool.lock);
}

static void
after_fork_child(void)
{
    pool.started = 0;
    atomic_store(&pool.ticket, CLOSED);
    /* no thread of the parent is here to wait on the condition or release the job
     * lock (a job another thread ran at the fork holds it) */
    pthread_cond_init(&pool.wake, NULL);
    pthread_mutex_init(&job_lock, NULL);
    pthread_mutex_unlock(&pool.lock);
}

static int
start_workers(int want)
{
    while (pool.started < want - 1) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int err = pthread_create(&t, &attr, worker, NULL);
        pthread_attr_destroy(&attr);
        if (err != 0)
            break;
        pool.started++;
    }
    return pool.started + 1;
}

static double
monotonic_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Between chunks, with the GIL released as *ts: every SIGNAL_CHECK_SECONDS, takes the
 * GIL and runs the signal handlers; -1 when one raised (the exception is set). Only the
 * main thread runs handlers (*last < 0 elsewhere: it never takes the GIL here). */
static int
check_signals(PyThreadState **ts, double *last)
{
    if (*last < 0)
        return 0;
    double now = monotonic_seconds();
    if (now - *last < SIGNAL_CHECK_SECONDS)
        return 0;
    *last = now;
    PyEval_RestoreThread(*ts);
    int st = PyErr_CheckSignals();
    *ts = PyEval_SaveThread();
    return st;
}

int
em_parallel_for(em_range_fn fn, void *ctx, int64_t n, int64_t chunk, int parallel)
{
    if (n <= 0)
        return 0;
    if (chunk <= 0 || chunk > n)
        chunk = n;
    int64_t nchunks = (n - 1) / chunk + 1;
    if (nchunks > MAX_CHUNKS) {
        chunk = (n - 1) / MAX_CHUNKS + 1;
        nchunks = (n - 1) / chunk + 1;
    }
    int want = pool.nthreads < nchunks ? pool.nthreads : (int)nchunks;
    double last = _PyOS_IsMainThread() ? monotonic_seconds() : -1.0;
    int st = 0;
    PyThreadState *ts = PyEval_SaveThread();
    if (!parallel || want <= 1 || pthread_mutex_trylock(&job_lock) != 0) {
        /* one thread, or another job is running: the chunks in order, here */
        for (int64_t i = 0; i < nchunks && st == 0; i++) {
            run_chunk(fn, ctx, n, chunk, (uint32_t)i);
            if (i + 1 < nchunks)
                st = check_signals(&ts, &last);
        }
        PyEval_RestoreThread(ts);
        return st;
    }
    start_workers(want);
    pool_jobs++;
    pool.fn = fn;
    pool.ctx = ctx;
    pool.n = n;
    pool.chunk = chunk;
    pool.nchunks = (uint32_t)nchunks;
    atomic_store(&pool.done, 0);
    uint32_t gen = atomic_load(&pool.generation) + 1;
    atomic_store(&pool.ticket, (uint64_t)gen << 32);
    pthread_mutex_lock(&pool.lock);
    atomic_store(&pool.generation, gen);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    int64_t i;
    while ((i = take_chunk(gen)) >= 0) {
        run_chunk(fn, ctx, n, chunk, (uint32_t)i);
        atomic_fetch_add(&pool.done, 1);
        if ((st = check_signals(&ts, &last)) < 0)
            break;
    }
    /* close the counter; then wait for the chunks other threads took */
    uint64_t t = atomic_exchange(&pool.ticket, ((uint64_t)gen << 32) | CLOSED);
    uint32_t taken = (uint32_t)t;
    if (taken > pool.nchunks)
        taken = pool.nchunks;
    for (int spins = 1; atomic_load(&pool.done) < (long)taken; spins++)
        relax(spins);
    pthread_mutex_unlock(&job_lock);
    PyEval_RestoreThread(ts);
    return st;
}

int
em_pool_threads(void)
{
    return pool.nthreads;
}

static PyObject *
set_num_threads(PyObject *self, PyObject *arg)
{
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 1) {
        PyErr_SetString(PyExc_ValueError, "set_num_threads expects a positive integer");
        return NULL;
    }
    pool.nthreads = n > MAX_THREADS ? MAX_THREADS : (int)n;
    em_blas_set_threads(pool.nthreads);
    Py_RETURN_NONE;
}

static PyObject *
get_num_threads(PyObject *self, PyObject *noargs)
{
    return PyLong_FromLong(pool.nthreads);
}

static PyObject *
pool_jobs_count(PyObject *self, PyObject *noargs)
{
    return PyLong_FromUnsignedLongLong(pool_jobs);
}

static PyMethodDef pool_methods[] = {
    {"_pool_jobs", pool_jobs_count, METH_NOARGS,
     "_pool_jobs(): jobs handed to the pool's threads so far (for tests)."},
    {"set_num_threads", set_num_threads, METH_O,
     "set_num_threads(n): threads compiled kernels and BLAS products use (the caller "
     "included)."},
    {"get_num_threads", get_num_threads, METH_NOARGS, NULL},
    {NULL},
};

int
em_threadpool_init(PyObject *module)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("OMP_NUM_THREADS");
    if (env != NULL && atoi(env) > 0)
        n = atoi(env);
    pool.nthreads = n < 1 ? 1 : (n > MAX_THREADS ? MAX_THREADS : (int)n);
    int err = pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    if (err != 0) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return PyModule_AddFunctions(module, pool_methods);
}
