/* threadpool.c: the persistent worker threads compiled kernels run on.
 *
 * em_parallel_for(fn, ctx, n) splits [0, n) into one contiguous range per thread; the
 * calling thread runs the first range itself. Workers are started on first use and
 * spin for a short while after each job before they sleep on a condition variable
 * (waking a sleeping thread costs tens of microseconds in a VM; a spinning one, well
 * under one), so back-to-back kernels of one graph find them awake. Nothing here
 * touches Python: callers release the GIL around it.
 *
 * fork() (DataLoader workers, multiprocessing): a pthread_atfork handler registered when
 * the module loads takes both locks before the fork, so no job is half-run and no worker
 * holds the pool's lock in the copied memory (a job never needs the GIL to finish, so the
 * forking thread, which holds it, waits at most one job). The parent then releases them;
 * the child, whose only thread is the one that forked, releases them too, forgets the
 * workers (threads are not copied) and starts new ones when it next needs them.
 */
#include "runtime/runtime.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#define MAX_THREADS 64
#define SPIN_ROUNDS 20000

static struct {
    pthread_mutex_t lock;          /* serialises jobs, guards sleeping workers */
    pthread_cond_t wake;
    int started;                   /* workers running */
    int nthreads;                  /* threads a job uses, the caller included */
    atomic_ulong generation;       /* bumped per job */
    atomic_int remaining;          /* ranges not finished */
    em_range_fn fn;
    void *ctx;
    int64_t n;
    int parts;
    atomic_int next;               /* next range to take */
} pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .nthreads = 1,
};

static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER;

static void
run_ranges(void)
{
    for (;;) {
        int i = atomic_fetch_add(&pool.next, 1);
        if (i >= pool.parts)
            return;
        int64_t lo = pool.n * i / pool.parts, hi = pool.n * (i + 1) / pool.parts;
        if (lo < hi)
            pool.fn(pool.ctx, lo, hi);
        atomic_fetch_sub(&pool.remaining, 1);
    }
}

static void *
worker(void *arg)
{
    unsigned long seen = atomic_load(&pool.generation);
    for (;;) {
        int spins = 0;
        while (atomic_load(&pool.generation) == seen && spins < SPIN_ROUNDS) {
            spins++;
#if defined(__x86_64__)
            __builtin_ia32_pause();
#endif
        }
        if (atomic_load(&pool.generation) == seen) {
            pthread_mutex_lock(&pool.lock);
            while (atomic_load(&pool.generation) == seen)
                pthread_cond_wait(&pool.wake, &pool.lock);
            pthread_mutex_unlock(&pool.lock);
        }
        seen = atomic_load(&pool.generation);
        run_ranges();
    }
    return arg;
}

static void
before_fork(void)
{
    pthread_mutex_lock(&job_lock);
    pthread_mutex_lock(&pool.lock);
}

static void
after_fork_parent(void)
{
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&job_lock);
}

static void
after_fork_child(void)
{
    pool.started = 0;
    atomic_store(&pool.remaining, 0);
    atomic_store(&pool.next, 0);
    pthread_cond_init(&pool.wake, NULL);     /* no thread of the parent waits on it here */
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&job_lock);
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

/* Runs fn over [0, n) on up to pool.nthreads threads; returns when all are done. */
void
em_parallel_for(em_range_fn fn, void *ctx, int64_t n)
{
    int want = pool.nthreads < n ? pool.nthreads : (int)n;
    if (want <= 1 || pthread_mutex_trylock(&job_lock) != 0) {
        fn(ctx, 0, n);     /* one thread, or another job is running: run it here */
        return;
    }
    int have = start_workers(want);
    if (have < want)
        want = have;
    pool.fn = fn;
    pool.ctx = ctx;
    pool.n = n;
    pool.parts = want;
    atomic_store(&pool.remaining, want);
    atomic_store(&pool.next, 0);
    pthread_mutex_lock(&pool.lock);
    atomic_fetch_add(&pool.generation, 1);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    run_ranges();
    while (atomic_load(&pool.remaining) > 0) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    }
    pthread_mutex_unlock(&job_lock);
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

static PyMethodDef pool_methods[] = {
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
