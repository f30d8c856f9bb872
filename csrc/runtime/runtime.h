/* runtime.h: internal to csrc/runtime: what compiled graphs (compiled_graph.c) call in
 * the thread pool (threadpool.c) and BLAS (blas.c). */
#ifndef EMBER_RUNTIME_H
#define EMBER_RUNTIME_H

#include "ember.h"

typedef void (*em_range_fn)(void *ctx, int64_t start, int64_t end);

/* Runs fn over [0, n) in chunks [i * chunk, (i + 1) * chunk) (chunk <= 0: one), spread
 * over the thread pool when parallel, else in order on this thread. Called with the GIL
 * held; releases it while fn runs (fn touches no Python object) and takes it back
 * between chunks now and then to run signal handlers: -1 with their exception set
 * (KeyboardInterrupt) when one raised, once the chunks begun are done; else 0. */
int em_parallel_for(em_range_fn fn, void *ctx, int64_t n, int64_t chunk, int parallel);

/* The threads a pool job uses, the caller included. */
int em_pool_threads(void);

/* out = a @ b straight into BLAS: 0 done, 1 not handled (the caller uses
 * numpy.matmul), -1 when a signal handler raised (Ctrl-C) while it ran on the pool. */
int em_blas_matmul(em_Tensor *a, em_Tensor *b, em_Tensor *out);

/* The same, split as `how` says: EM_GEMM_AUTO as em_blas_matmul decides (the pool for
 * large products), EM_GEMM_POOL over the pool whenever it has threads, EM_GEMM_ONE_CALL
 * one call on one thread (never BLAS's own threads beside the pool's). max-autotune picks one per product by timing. */
enum { EM_GEMM_AUTO, EM_GEMM_POOL, EM_GEMM_ONE_CALL };
int em_blas_matmul_how(em_Tensor *a, em_Tensor *b, em_Tensor *out, int how);

/* A compiled kernel: runs outer indices [start, end) of its domain on pointers args. */
typedef void (*em_jit_fn)(void **args, int64_t start, int64_t end);

/* The epilogues of a product (plan.MatmulStep): kernel k runs outer indices
 * [g0 / band[k], g1 / band[k]) right after BLAS has made rows [g0, g1) of the product
 * seen as (rows, n). */
#define EM_MAX_EPILOGUES 16
typedef struct {
    int n;
    em_jit_fn fn[EM_MAX_EPILOGUES];
    void **args[EM_MAX_EPILOGUES];
    int64_t band[EM_MAX_EPILOGUES];
    bool done;          /* set when they ran on the product's blocks */
} em_epilogue_t;

/* em_blas_matmul_how, running ep's kernels (when not NULL) on each block of rows as
 * it is made; ep->done tells whether they ran (else the caller runs them after). */
int em_blas_matmul_ep(em_Tensor *a, em_Tensor *b, em_Tensor *out, int how,
                      em_epilogue_t *ep);

/* The BLAS library's threads (ember.set_num_threads sets them with the pool's). */
void em_blas_set_threads(int n);

/* Calls graph when it is a CompiledGraph with *first its outputs [0, split) and *rest
 * the others (new tuples): 0, or -1 with an exception set; 1 (nothing done) when graph
 * is another callable. */
int em_compiled_graph_call_split(PyObject *graph, PyObject *const *args, Py_ssize_t nargs,
                                 Py_ssize_t split, PyObject **first, PyObject **rest);

#endif /* EMBER_RUNTIME_H */
