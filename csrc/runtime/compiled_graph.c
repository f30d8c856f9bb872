/* compiled_graph.c: runs a compiled graph (kernels and BLAS calls) in one call.
 *
 * CompiledGraph(jit_module, addresses, plan) is callable with the graph's input
 * tensors and returns a tuple of output tensors. The plan is the tuple of records
 * python/ember/compiler/plan.py makes (each a tuple, read here by position):
 *
 *     (inputs, buffers, steps, outputs)
 *
 * inputs:  InputSpec (sizes, strides) each input was compiled for; an input laid out
 *          differently (a gradient that arrives expanded, say) is first copied into
 *          that layout when it is dense, else the call fails; an empty input is only
 *          re-viewed with those strides
 * buffers: BufferSpec (dtype, sizes, extern) of each buffer: allocated per call
 *          (contiguous), or when extern is true, made by an extern step
 * steps:   KernelStep ("kernel", k, refs, outer, parallel, ir, chunk)
 *                                     call kernel k (addresses[k]) with pointers to refs
 *                                     over [0, outer) of its dim 0 in chunks of `chunk`
 *                                     (0: one), spread over the thread pool when
 *                                     parallel; signal handlers run between chunks
 *                                     (Ctrl-C stops the call with KeyboardInterrupt)
 *          MatmulStep ("matmul", a, b, buffer[, epilogues])
 *                                     BLAS (else numpy.matmul) from views a and b; then
 *                                     its epilogues, kernel steps whose outer index i
 *                                     reads rows [i * band, (i + 1) * band) of the
 *                                     product only (band: its rows / their outer), run
 *                                     on each block of rows BLAS makes (blas.c), or
 *                                     after the product where it cannot be cut so
 *          ExternStep ("extern", fn, views, slots, name)
 *                                     fn(*tensors of views) -> tuple of tensors, stored
 *                                     (made contiguous) in the buffer slots; kind
 *                                     "seed" (the Philox seed of the call's random
 *                                     draws) runs the same way
 * outputs: views, or None for an output with no value (a gradient that is None), or
 *          ("sym", e): the int value of size expression e
 * A ref is ("in", i) or ("buf", j); a view is (ref, sizes, strides, offset), in
 * elements of the ref's dtype.
 *
 * A symbolic plan ([dynamic], compiler/symbolic.py) has a fifth record,
 *
 *     (binds, exprs, size_inputs, schedule)
 *
 * binds:   per symbol, (input, dim): its value is that input's size at dim, or the
 *          input itself (an int) when dim is -1
 * exprs:   size expressions as postfix programs over the symbols, flat (op, arg)
 *          pairs: 0 push symbol arg, 1 push constant arg, 2 add, 3 mul, 4 floordiv,
 *          5 mod, 6 min, 7 max (Python's floor semantics, overflow checked)
 * size_inputs: the inputs that are ints (sizes), not tensors
 * schedule: (PARALLEL_MIN, CHUNK_POINTS, CHUNK_MIN_POINTS, MIN_CHUNKS) of fusion.py
 * Then any size, stride or offset of the plan, and a kernel step's outer, may be a
 * one-element tuple (e,): expression e's value on this call. A kernel step with size
 * arguments ends with (syms, points): the expressions its kernel takes (passed as an
 * int64 array at args[nrefs]) and its domain's points; its chunk is -1 and its
 * threading and chunks are decided per call from the sizes, as fusion.schedule does.
 * Each call binds the symbols from its inputs, evaluates the expressions and writes
 * them into the decoded plan (one call at a time: a lock per symbolic graph).
 *
 * The plan is decoded into the C structs below (and checked) once, when the graph is
 * built; a call only reads them.
 */
#include "runtime/runtime.h"
#include "kernels/kutil.h"

#include <pthread.h>
#include <stddef.h>
#include <structmember.h>
#include <time.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

typedef em_jit_fn kernel_fn;

static PyTypeObject CompiledGraph_Type;

/* ------------------------------------------------------------------ the plan */

typedef struct {
    bool is_buf;
    int index;
} ref_t;

typedef struct {
    int ndim;
    Py_ssize_t *sizes, *strides;     /* ndim each (strides NULL for buffers) */
} dims_t;

typedef struct {
    ref_t ref;
    dims_t dims;
    Py_ssize_t offset;
} view_t;

typedef struct {
    em_dtype_t dtype;
    dims_t dims;
    bool by_extern;
} buffer_t;

typedef enum { STEP_KERNEL, STEP_MATMUL, STEP_EXTERN } step_kind_t;

/* A field of the decoded plan that is size expression `expr` on each call. */
typedef struct {
    Py_ssize_t *field;
    int expr;
} patch_t;

typedef struct step {
    step_kind_t kind;
    /* kernel */
    kernel_fn fn;
    int nrefs;
    ref_t *refs;
    Py_ssize_t outer, chunk;
    bool parallel, may_parallel;     /* may_parallel: as the plan made it (never racy) */
    bool small;                      /* its refs hold at most SMALL_ELEMENTS in all */
    /* a symbolic kernel step: the expressions of its size arguments, their values on
     * this call, and its domain's points (sched: scheduled per call) */
    int nsyms;
    int *syms;
    int64_t *symvals;
    Py_ssize_t points;
    bool sched;
    /* matmul: buffer out = a @ b, split as `how` says (EM_GEMM_*), then its nep
     * epilogues (kernel steps, each reading `band` rows of the product per outer index) */
    view_t a, b;
    int out, how, nep;
    struct step *eps;
    int64_t band;
    /* extern: call(*views) -> the buffers slots; borrowed from the plan tuple */
    PyObject *call, *name;
    int nviews, nslots;
    view_t *views;
    int *slots;
} step_t;

/* Every allocation of a decoded plan, freed together. */
typedef struct chunk {
    struct chunk *next;
    max_align_t data[];
} chunk_t;

typedef struct {
    int ninputs, nbufs, nsteps, noutputs;
    dims_t *inputs;
    bool *input_written;             /* per input: a kernel writes into it */
    buffer_t *bufs;
    step_t *steps;
    view_t *outputs;
    bool *output_none;
    chunk_t *chunks;
    /* a symbolic plan: see the top of the file */
    bool symbolic;
    int nsymbols, nexprs, npatches, maxpatches;
    int *bind_input, *bind_dim;
    int64_t *symbol_vals, *vals;
    int *prog_start, *prog_len;      /* per expression: its pairs in progs */
    int64_t *progs;
    patch_t *patches;
    bool *size_input;
    int *output_sym;                 /* per output: its expression, or -1 */
    Py_ssize_t sched[4];
} plan_t;

static void *
plan_alloc(plan_t *p, Py_ssize_t n, size_t size)
{
    chunk_t *c = PyMem_Calloc(1, sizeof(chunk_t) + (size_t)(n > 0 ? n : 1) * size);
    if (c == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    c->next = p->chunks;
    p->chunks = c;
    return c->data;
}

static void
plan_free(plan_t *p)
{
    while (p->chunks != NULL) {
        chunk_t *c = p->chunks;
        p->chunks = c->next;
        PyMem_Free(c);
    }
}

/* ------------------------------------------------------------------ decoding */

static int
bad_plan(const char *what)
{
    PyErr_Format(PyExc_ValueError, "CompiledGraph: bad plan: %s", what);
    return -1;
}

/* An index into something of `limit` items. */
static int
check_index(Py_ssize_t i, int limit, const char *what)
{
    return i >= 0 && i < limit ? 0 : bad_plan(what);
}

/* An int of the plan, or (e,) in a symbolic plan: expression e's value, written into
 * *field on each call. */
static int
decode_size(plan_t *p, PyObject *o, Py_ssize_t *field)
{
    if (!PyTuple_Check(o)) {
        *field = PyLong_AsSsize_t(o);
        return *field == -1 && PyErr_Occurred() ? -1 : 0;
    }
    Py_ssize_t e = PyTuple_GET_SIZE(o) == 1 ? PyLong_AsSsize_t(PyTuple_GET_ITEM(o, 0)) : -1;
    if (PyErr_Occurred())
        return -1;
    if (!p->symbolic || e < 0 || e >= p->nexprs)
        return bad_plan("a size expression");
    if (p->npatches == p->maxpatches) {
        int n = p->maxpatches ? 2 * p->maxpatches : 64;
        patch_t *more = plan_alloc(p, n, sizeof(patch_t));
        if (more == NULL)
            return -1;
        if (p->npatches)
            memcpy(more, p->patches, sizeof(patch_t) * p->npatches);
        p->patches = more;
        p->maxpatches = n;
    }
    p->patches[p->npatches].field = field;
    p->patches[p->npatches].expr = (int)e;
    p->npatches++;
    *field = 0;
    return 0;
}

/* sizes (and strides, unless NULL): tuples of ints */
static int
decode_dims(plan_t *p, PyObject *sizes, PyObject *strides, dims_t *d)
{
    Py_ssize_t n = PyTuple_GET_SIZE(sizes);
    if (n > EM_MAX_DIMS || (strides != NULL && PyTuple_GET_SIZE(strides) != n))
        return bad_plan("a shape");
    d->ndim = (int)n;
    if ((d->sizes = plan_alloc(p, 2 * n, sizeof(Py_ssize_t))) == NULL)
        return -1;
    d->strides = strides != NULL ? d->sizes + n : NULL;
    for (int k = 0; k < n; k++) {
        if (decode_size(p, PyTuple_GET_ITEM(sizes, k), &d->sizes[k]) < 0 ||
            (strides != NULL &&
             decode_size(p, PyTuple_GET_ITEM(strides, k), &d->strides[k]) < 0))
            return -1;
    }
    return 0;
}

static int
decode_ref(const plan_t *p, PyObject *ref, ref_t *r)
{
    PyObject *kind;
    Py_ssize_t i;
    if (!PyTuple_Check(ref) || !PyArg_ParseTuple(ref, "Un;CompiledGraph: a ref is (kind, i)",
                                                 &kind, &i))
        return PyErr_Occurred() ? -1 : bad_plan("a ref");
    r->is_buf = PyUnicode_CompareWithASCIIString(kind, "buf") == 0;
    if (!r->is_buf && PyUnicode_CompareWithASCIIString(kind, "in") != 0)
        return bad_plan("a ref");
    r->index = (int)i;
    return check_index(i, r->is_buf ? p->nbufs : p->ninputs, "a ref");
}

static int
decode_view(plan_t *p, PyObject *view, view_t *v)
{
    PyObject *ref, *sizes, *strides, *offset;
    if (!PyTuple_Check(view) ||
        !PyArg_ParseTuple(view, "OO!O!O;CompiledGraph: a view is (ref, sizes, strides, "
                          "offset)", &ref, &PyTuple_Type, &sizes, &PyTuple_Type, &strides,
                          &offset))
        return PyErr_Occurred() ? -1 : bad_plan("a view");
    if (decode_ref(p, ref, &v->ref) < 0 || decode_size(p, offset, &v->offset) < 0)
        return -1;
    return decode_dims(p, sizes, strides, &v->dims);
}

static int
decode_views(plan_t *p, PyObject *views, int *n, view_t **out)
{
    *n = (int)PyTuple_GET_SIZE(views);
    if ((*out = plan_alloc(p, *n, sizeof(view_t))) == NULL)
        return -1;
    for (int i = 0; i < *n; i++)
        if (decode_view(p, PyTuple_GET_ITEM(views, i), &(*out)[i]) < 0)
            return -1;
    return 0;
}

/* A kernel step whose refs hold at most this many elements in all, run as one chunk,
 * is called straight from the calling thread with the GIL held: microseconds of work,
 * for which releasing the GIL and reading the clock (em_parallel_for) would cost a
 * good part of a small graph's call. */
#define SMALL_ELEMENTS (1 << 14)

static int
decode_step(plan_t *p, PyObject *t, kernel_fn *kernels, int nkernels, step_t *s)
{
    PyObject *kind, *refs, *views, *slots, *a, *b, *rest, *outer, *syms = NULL;
    PyObject *points = NULL;
    int parallel, k;
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 1 ||
        !PyUnicode_Check(PyTuple_GET_ITEM(t, 0)))
        return bad_plan("a step");
    kind = PyTuple_GET_ITEM(t, 0);
    if (PyUnicode_CompareWithASCIIString(kind, "kernel") == 0) {
        s->kind = STEP_KERNEL;
        s->chunk = 0;
        if (!PyArg_ParseTuple(t, "OiO!Op|OnO!O;CompiledGraph: a kernel step is (kind, k, refs, "
                              "outer, parallel, ir, chunk, syms, points)", &kind, &k,
                              &PyTuple_Type, &refs, &outer, &parallel, &rest, &s->chunk,
                              &PyTuple_Type, &syms, &points) ||
            check_index(k, nkernels, "a kernel step") < 0 ||
            decode_size(p, outer, &s->outer) < 0)
            return -1;
        s->nsyms = syms != NULL ? (int)PyTuple_GET_SIZE(syms) : 0;
        s->sched = s->chunk < 0;
        if (s->sched && (!p->symbolic || points == NULL ||
                         decode_size(p, points, &s->points) < 0))
            return PyErr_Occurred() ? -1 : bad_plan("a symbolic kernel step");
        if (s->nsyms > 0) {
            s->syms = plan_alloc(p, s->nsyms, sizeof(int));
            s->symvals = plan_alloc(p, s->nsyms, sizeof(int64_t));
            if (s->syms == NULL || s->symvals == NULL)
                return -1;
            for (int j = 0; j < s->nsyms; j++) {
                Py_ssize_t e = PyLong_AsSsize_t(PyTuple_GET_ITEM(syms, j));
                if ((e == -1 && PyErr_Occurred()) || check_index(e, p->nexprs, "a size argument") < 0)
                    return -1;
                s->syms[j] = (int)e;
            }
        }
        s->fn = kernels[k];
        s->parallel = s->may_parallel = parallel;
        s->nrefs = (int)PyTuple_GET_SIZE(refs);
        if ((s->refs = plan_alloc(p, s->nrefs, sizeof(ref_t))) == NULL)
            return -1;
        Py_ssize_t elements = 0;
        for (int i = 0; i < s->nrefs; i++) {
            if (decode_ref(p, PyTuple_GET_ITEM(refs, i), &s->refs[i]) < 0)
                return -1;
            const dims_t *d = s->refs[i].is_buf ? &p->bufs[s->refs[i].index].dims
                                                : &p->inputs[s->refs[i].index];
            Py_ssize_t numel = 1;
            for (int k = 0; k < d->ndim; k++)
                numel *= d->sizes[k];
            elements += numel;
        }
        s->small = elements <= SMALL_ELEMENTS && !s->sched;
        return 0;
    }
    if (PyUnicode_CompareWithASCIIString(kind, "matmul") == 0) {
        PyObject *eps = NULL;
        s->kind = STEP_MATMUL;
        s->how = EM_GEMM_AUTO;
        if (!PyArg_ParseTuple(t, "OOOi|O!;CompiledGraph: a matmul step is (kind, a, b, out, "
                              "epilogues)", &kind, &a, &b, &s->out, &PyTuple_Type, &eps) ||
            decode_view(p, a, &s->a) < 0 || decode_view(p, b, &s->b) < 0 ||
            check_index(s->out, p->nbufs, "a matmul step") < 0)
            return -1;
        s->nep = eps != NULL ? (int)PyTuple_GET_SIZE(eps) : 0;
        if (s->nep == 0)
            return 0;
        /* the product as (rows, n): each epilogue's outer index covers `band` rows */
        const dims_t *d = &p->bufs[s->out].dims;
        Py_ssize_t rows = 1;
        for (int k = 0; k + 1 < d->ndim; k++)
            rows *= d->sizes[k];
        if ((s->eps = plan_alloc(p, s->nep, sizeof(step_t))) == NULL)
            return -1;
        for (int e = 0; e < s->nep; e++) {
            step_t *ep = &s->eps[e];
            if (decode_step(p, PyTuple_GET_ITEM(eps, e), kernels, nkernels, ep) < 0)
                return -1;
            if (ep->kind != STEP_KERNEL || ep->sched || ep->outer <= 0 || rows % ep->outer != 0)
                return bad_plan("an epilogue");
            ep->band = rows / ep->outer;
        }
        return 0;
    }
    /* a seed step (a compiled graph's Philox seed, drawn per call) runs as an extern */
    if (PyUnicode_CompareWithASCIIString(kind, "extern") == 0 ||
        PyUnicode_CompareWithASCIIString(kind, "seed") == 0) {
        s->kind = STEP_EXTERN;
        if (!PyArg_ParseTuple(t, "OOO!O!O;CompiledGraph: an extern step is (kind, fn, views, "
                              "slots, name)", &kind, &s->call, &PyTuple_Type, &views,
                              &PyTuple_Type, &slots, &s->name) ||
            decode_views(p, views, &s->nviews, &s->views) < 0)
            return -1;
        s->nslots = (int)PyTuple_GET_SIZE(slots);
        if ((s->slots = plan_alloc(p, s->nslots, sizeof(int))) == NULL)
            return -1;
        for (int i = 0; i < s->nslots; i++) {
            Py_ssize_t j = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, i));
            if ((j == -1 && PyErr_Occurred()) || check_index(j, p->nbufs, "a slot") < 0)
                return -1;
            s->slots[i] = (int)j;
        }
        return 0;
    }
    return bad_plan("a step of an unknown kind");
}

/* The symbolic record (binds, exprs, size_inputs, schedule). */
static int
decode_symbolic(plan_t *p, PyObject *sym, int ninputs)
{
    PyObject *binds, *exprs, *size_inputs;
    if (!PyArg_ParseTuple(sym, "O!O!O!(nnnn);CompiledGraph: a symbolic record is (binds, "
                          "exprs, size_inputs, schedule)", &PyTuple_Type, &binds, &PyTuple_Type,
                          &exprs, &PyTuple_Type, &size_inputs, &p->sched[0], &p->sched[1],
                          &p->sched[2], &p->sched[3]))
        return -1;
    if (p->sched[1] <= 0 || p->sched[2] <= 0 || p->sched[3] <= 0)
        return bad_plan("a schedule");
    p->symbolic = true;
    p->nsymbols = (int)PyTuple_GET_SIZE(binds);
    p->nexprs = (int)PyTuple_GET_SIZE(exprs);
    p->bind_input = plan_alloc(p, 2 * p->nsymbols, sizeof(int));
    p->symbol_vals = plan_alloc(p, p->nsymbols, sizeof(int64_t));
    p->vals = plan_alloc(p, p->nexprs, sizeof(int64_t));
    p->prog_start = plan_alloc(p, 2 * p->nexprs, sizeof(int));
    p->size_input = plan_alloc(p, ninputs, sizeof(bool));
    if (!p->bind_input || !p->symbol_vals || !p->vals || !p->prog_start || !p->size_input)
        return -1;
    p->bind_dim = p->bind_input + p->nsymbols;
    p->prog_len = p->prog_start + p->nexprs;
    for (int k = 0; k < p->nsymbols; k++) {
        int i, d;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(binds, k), "ii;CompiledGraph: a bind is "
                              "(input, dim)", &i, &d) ||
            check_index(i, ninputs, "a bind") < 0 || d < -1 || d >= EM_MAX_DIMS)
            return PyErr_Occurred() ? -1 : bad_plan("a bind");
        p->bind_input[k] = i;
        p->bind_dim[k] = d;
    }
    Py_ssize_t total = 0;
    for (int e = 0; e < p->nexprs; e++) {
        PyObject *prog = PyTuple_GET_ITEM(exprs, e);
        if (!PyTuple_Check(prog) || PyTuple_GET_SIZE(prog) % 2 != 0 ||
            PyTuple_GET_SIZE(prog) == 0)
            return bad_plan("a size expression");
        p->prog_start[e] = (int)total;
        p->prog_len[e] = (int)(PyTuple_GET_SIZE(prog) / 2);
        total += PyTuple_GET_SIZE(prog);
    }
    if ((p->progs = plan_alloc(p, total, sizeof(int64_t))) == NULL)
        return -1;
    for (int e = 0; e < p->nexprs; e++) {
        PyObject *prog = PyTuple_GET_ITEM(exprs, e);
        int depth = 0;
        for (int k = 0; k < p->prog_len[e]; k++) {
            int64_t op = PyLong_AsLongLong(PyTuple_GET_ITEM(prog, 2 * k));
            int64_t arg = PyLong_AsLongLong(PyTuple_GET_ITEM(prog, 2 * k + 1));
            if (PyErr_Occurred())
                return -1;
            if (op < 0 || op > 7 || (op == 0 && (arg < 0 || arg >= p->nsymbols)))
                return bad_plan("a size expression");
            depth += op <= 1 ? 1 : -1;
            if (depth < 1 || depth > 64)
                return bad_plan("a size expression");
            p->progs[p->prog_start[e] + 2 * k] = op;
            p->progs[p->prog_start[e] + 2 * k + 1] = arg;
        }
        if (depth != 1)
            return bad_plan("a size expression");
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(size_inputs); k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(size_inputs, k));
        if ((i == -1 && PyErr_Occurred()) || check_index(i, ninputs, "a size input") < 0)
            return -1;
        p->size_input[i] = true;
    }
    return 0;
}

static int
decode_plan(plan_t *p, PyObject *plan, kernel_fn *kernels, int nkernels)
{
    PyObject *inputs, *bufs, *steps, *outputs, *sizes, *strides, *dtype, *sym = NULL;
    if (!PyArg_ParseTuple(plan, "O!O!O!O!|O!;CompiledGraph: a plan is (inputs, buffers, "
                          "steps, outputs[, symbolic])", &PyTuple_Type, &inputs, &PyTuple_Type,
                          &bufs, &PyTuple_Type, &steps, &PyTuple_Type, &outputs,
                          &PyTuple_Type, &sym))
        return -1;
    if (sym != NULL && decode_symbolic(p, sym, (int)PyTuple_GET_SIZE(inputs)) < 0)
        return -1;
    p->ninputs = (int)PyTuple_GET_SIZE(inputs);
    p->nbufs = (int)PyTuple_GET_SIZE(bufs);
    p->nsteps = (int)PyTuple_GET_SIZE(steps);
    p->noutputs = (int)PyTuple_GET_SIZE(outputs);
    p->inputs = plan_alloc(p, p->ninputs, sizeof(dims_t));
    p->bufs = plan_alloc(p, p->nbufs, sizeof(buffer_t));
    p->steps = plan_alloc(p, p->nsteps, sizeof(step_t));
    p->outputs = plan_alloc(p, p->noutputs, sizeof(view_t));
    p->output_none = plan_alloc(p, p->noutputs, sizeof(bool));
    p->input_written = plan_alloc(p, p->ninputs, sizeof(bool));
    if (!p->inputs || !p->bufs || !p->steps || !p->outputs || !p->output_none ||
        !p->input_written)
        return -1;
    p->output_sym = plan_alloc(p, p->noutputs, sizeof(int));
    if (p->output_sym == NULL)
        return -1;
    for (int i = 0; i < p->ninputs; i++) {
        PyObject *t = PyTuple_GET_ITEM(inputs, i);
        int written = 0;
        if (!PyTuple_Check(t) ||
            !PyArg_ParseTuple(t, "O!O!|p;CompiledGraph: an input is (sizes, strides[, "
                              "written])", &PyTuple_Type, &sizes, &PyTuple_Type, &strides,
                              &written) ||
            decode_dims(p, sizes, strides, &p->inputs[i]) < 0)
            return PyErr_Occurred() ? -1 : bad_plan("an input");
        p->input_written[i] = written;
    }
    for (int i = 0; i < p->nbufs; i++) {
        PyObject *t = PyTuple_GET_ITEM(bufs, i);
        buffer_t *b = &p->bufs[i];
        int ext;
        if (!PyTuple_Check(t) ||
            !PyArg_ParseTuple(t, "O!O!p;CompiledGraph: a buffer is (dtype, sizes, extern)",
                              &em_DType_Type, &dtype, &PyTuple_Type, &sizes, &ext) ||
            decode_dims(p, sizes, NULL, &b->dims) < 0)
            return PyErr_Occurred() ? -1 : bad_plan("a buffer");
        b->dtype = ((em_DType *)dtype)->code;
        b->by_extern = ext;
    }
    for (int i = 0; i < p->nsteps; i++)
        if (decode_step(p, PyTuple_GET_ITEM(steps, i), kernels, nkernels, &p->steps[i]) < 0)
            return -1;
    for (int i = 0; i < p->noutputs; i++) {
        PyObject *o = PyTuple_GET_ITEM(outputs, i);
        p->output_none[i] = o == Py_None;
        p->output_sym[i] = -1;
        if (PyTuple_Check(o) && PyTuple_GET_SIZE(o) == 2 &&
            PyUnicode_Check(PyTuple_GET_ITEM(o, 0))) {
            Py_ssize_t e = PyLong_AsSsize_t(PyTuple_GET_ITEM(o, 1));
            if ((e == -1 && PyErr_Occurred()) || !p->symbolic ||
                check_index(e, p->nexprs, "a size output") < 0)
                return PyErr_Occurred() ? -1 : bad_plan("a size output");
            p->output_sym[i] = (int)e;
            continue;
        }
        if (o != Py_None && decode_view(p, o, &p->outputs[i]) < 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ the type */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *module;        /* the JitModule: keeps the code alive */
    PyObject *plan;          /* the plan tuple (owns what steps borrow) */
    plan_t p;
    kernel_fn *kernels;
    PyObject *matmul;        /* numpy.matmul */
    Py_ssize_t calls;
    double *step_seconds;    /* per-step time summed over calls while profiling, or NULL */
    /* tune(graph, *args), called once, before the first call runs (max-autotune:
     * compiler/autotune.py); keep: what the schedule set_step gave needs alive */
    PyObject *tune, *keep;
    /* the NumPy array behind each buffer after the last call; a call reuses it when
     * nothing else holds it any more (refcount 1), so large intermediates are not
     * mapped and page-faulted in afresh on every call */
    PyObject **pool;
    PyThread_type_lock lock;    /* a symbolic graph: one call at a time (it writes its plan) */
    unsigned long lock_forks;   /* fork_count when the lock was made */
} CompiledGraph;

/* fork() copies a lock another thread held at that moment, held for ever in the child
 * (a DataLoader worker forked while a thread runs the graph): the child counts its
 * forks and a graph made before the last one gets a new lock (the old one is left,
 * as the thread that held it is not in this process). */
static unsigned long fork_count;
static int fork_handler_set;

static void
count_fork(void)
{
    fork_count++;
}

static int
graph_lock_acquire(CompiledGraph *self)
{
    if (self->lock_forks != fork_count) {
        PyThread_type_lock fresh = PyThread_allocate_lock();
        if (fresh == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->lock = fresh;
        self->lock_forks = fork_count;
    }
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
    return 0;
}

static double
now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------ helpers */

static em_Tensor *
ref_tensor(ref_t r, PyObject *const *inputs, em_Tensor **bufs)
{
    em_Tensor *t = r.is_buf ? bufs[r.index] : (em_Tensor *)inputs[r.index];
    if (t == NULL)
        PyErr_Format(PyExc_RuntimeError, "compiled graph: buffer %d read before it was made",
                     r.index);
    return t;
}

/* A tensor for a view: the ref itself when the view is all of it. New reference. */
static em_Tensor *
view_tensor(const view_t *v, PyObject *const *inputs, em_Tensor **bufs)
{
    em_Tensor *base = ref_tensor(v->ref, inputs, bufs);
    if (base == NULL)
        return NULL;
    int n = v->dims.ndim;
    if (v->offset == 0 && n == base->ndim &&
        memcmp(v->dims.sizes, base->sizes, sizeof(Py_ssize_t) * n) == 0 &&
        memcmp(v->dims.strides, base->strides, sizeof(Py_ssize_t) * n) == 0) {
        Py_INCREF(base);
        return base;
    }
    return em_tensor_view(base, n, v->dims.sizes, v->dims.strides, base->offset + v->offset);
}

/* True when g's strides lay its elements out without gaps or overlaps (a permutation
 * of a contiguous layout): only then can a copy be made in that layout. */
static bool
dense(const em_Geom *g)
{
    int order[EM_MAX_DIMS], n = 0;
    for (int d = 0; d < g->ndim; d++) {
        if (g->sizes[d] == 0)
            return true;
        if (g->sizes[d] > 1)
            order[n++] = d;
    }
    for (int i = 1; i < n; i++)       /* sort dims by stride, smallest first */
        for (int j = i; j > 0 && g->strides[order[j]] < g->strides[order[j - 1]]; j--) {
            int tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
    Py_ssize_t expect = 1;
    for (int i = 0; i < n; i++) {
        if (g->strides[order[i]] != expect)
            return false;
        expect *= g->sizes[order[i]];
    }
    return true;
}

/* The input as the kernels expect it laid out (a copy if it arrived otherwise). */
static em_Tensor *
conform_input(PyObject *arg, const dims_t *want, Py_ssize_t i)
{
    if (!em_Tensor_Check(arg) || em_is_meta((em_Tensor *)arg)) {
        PyErr_Format(PyExc_TypeError, "compiled graph: input %zd must be a tensor with data", i);
        return NULL;
    }
    em_Tensor *t = (em_Tensor *)arg;
    int n = want->ndim;
    if (n != t->ndim || memcmp(want->sizes, t->sizes, sizeof(Py_ssize_t) * n) != 0) {
        PyErr_Format(PyExc_RuntimeError, "compiled graph: input %zd has shape %s, but the graph "
                     "was compiled for %s", i, em_tshape(t), em_shape_s(n, want->sizes));
        return NULL;
    }
    bool same = true;
    for (int d = 0; d < n; d++)
        if (want->sizes[d] > 1 && want->strides[d] != t->strides[d])
            same = false;
    if (same) {
        Py_INCREF(t);
        return t;
    }
    if (t->numel == 0) {
        /* no element is read: the same (empty) data seen with the compiled strides */
        return em_tensor_view(t, n, want->sizes, want->strides, t->offset);
    }
    em_Geom g;
    g.ndim = n;
    g.dtype = t->dtype;
    memcpy(g.sizes, want->sizes, sizeof(Py_ssize_t) * n);
    memcpy(g.strides, want->strides, sizeof(Py_ssize_t) * n);
    if (!dense(&g)) {
        PyErr_Format(PyExc_RuntimeError,
                     "compiled graph: input %zd arrived in another layout than the sparse one "
                     "the graph was compiled for", i);
        return NULL;
    }
    em_Tensor *copy = em_tensor_empty_like_layout(&g, false);
    if (copy == NULL)
        return NULL;
    bool ok = copy->ndim == n;
    for (int d = 0; ok && d < n; d++)
        ok = g.sizes[d] <= 1 || copy->strides[d] == g.strides[d];
    if (!ok) {
        Py_DECREF(copy);
        PyErr_Format(PyExc_RuntimeError,
                     "compiled graph: input %zd arrived in a layout the graph cannot read",
                     i);
        return NULL;
    }
    if (PyArray_CopyInto(copy->array, t->array) < 0) {
        Py_DECREF(copy);
        return NULL;
    }
    return copy;
}

/* buffer j for this call: last call's memory when nothing else holds it, else new */
static em_Tensor *
make_buffer(CompiledGraph *self, int j)
{
    const buffer_t *b = &self->p.bufs[j];
    PyObject *arr = self->pool[j];
    if (arr != NULL && Py_REFCNT(arr) == 1 && self->p.symbolic &&
        (PyArray_NDIM((PyArrayObject *)arr) != b->dims.ndim ||
         memcmp(PyArray_DIMS((PyArrayObject *)arr), b->dims.sizes,
                sizeof(Py_ssize_t) * b->dims.ndim) != 0)) {
        self->pool[j] = NULL;           /* last call's sizes: not this call's */
        Py_DECREF(arr);
        arr = NULL;
    }
    if (arr != NULL && Py_REFCNT(arr) == 1) {
        em_Tensor *t = em_tensor_from_array((PyArrayObject *)arr, NULL, 0);
        self->pool[j] = NULL;
        Py_DECREF(arr);
        return t;
    }
    em_Geom g;
    g.ndim = b->dims.ndim;
    g.dtype = b->dtype;
    memcpy(g.sizes, b->dims.sizes, sizeof(Py_ssize_t) * g.ndim);
    return em_tensor_empty(&g, false);
}

/* ------------------------------------------------------------------ running */

typedef struct {
    kernel_fn fn;
    void **args;
} range_job;

static void
run_range(void *ctx, int64_t start, int64_t end)
{
    range_job *job = ctx;
    job->fn(job->args, start, end);
}

/* The data pointers of a kernel step's refs, into small (16) or a new array; then its
 * size arguments and (set by run_kernel) its error record. */
static void **
kernel_args(const step_t *s, PyObject *const *inputs, em_Tensor **bufs, void **small)
{
    void **args = small;
    if (s->nrefs + 2 > 16 && (args = PyMem_Malloc(sizeof(void *) * (s->nrefs + 2))) == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (int i = 0; i < s->nrefs; i++) {
        em_Tensor *t = ref_tensor(s->refs[i], inputs, bufs);
        if (t == NULL) {
            if (args != small)
                PyMem_Free(args);
            return NULL;
        }
        args[i] = PyArray_DATA(t->array);
    }
    args[s->nrefs] = s->symvals;         /* a symbolic kernel's size arguments */
    args[s->nrefs + 1] = NULL;
    return args;
}

/* A kernel's gathered loads found an index value out of range (its error record
 * {1, value, size, index tensor}, loop_ir `bound`, which only the index prim's lowering
 * emits): eager's IndexError, in its words (csrc/kernels/indexing.c). */
static int
index_error(const int64_t *err)
{
    if (err[2] == 0)
        PyErr_SetString(PyExc_IndexError,
                        "index(): index is out of bounds for dimension with size 0");
    else
        PyErr_Format(PyExc_IndexError,
                     "index(): index %lld is out of bounds for dimension %lld with size %lld",
                     (long long)err[1], (long long)err[3], (long long)err[2]);
    return -1;
}

static int
run_kernel(const step_t *s, PyObject *const *inputs, em_Tensor **bufs)
{
    void *small[16], **args = kernel_args(s, inputs, bufs, small);
    if (args == NULL)
        return -1;
    int64_t err[4] = {0, 0, 0, 0};
    args[s->nrefs + 1] = err;
    int st = 0;
    if (s->small && (s->chunk <= 0 || s->chunk >= s->outer)) {
        if (s->outer > 0)
            s->fn(args, 0, s->outer);
    }
    else {
        range_job job = {s->fn, args};
        st = em_parallel_for(run_range, &job, s->outer, s->chunk, s->parallel);
    }
    if (args != small)
        PyMem_Free(args);
    if (st == 0 && err[0] != 0)
        st = index_error(err);
    return st;
}

/* The product, its epilogues on each block of rows as BLAS makes it when it can (else
 * after the whole product, as the kernel steps they are). */
static int
run_matmul(CompiledGraph *self, const step_t *s, PyObject *const *inputs, em_Tensor **bufs)
{
    em_Tensor *a = view_tensor(&s->a, inputs, bufs);
    em_Tensor *b = a ? view_tensor(&s->b, inputs, bufs) : NULL;
    em_epilogue_t ep;
    void *small[EM_MAX_EPILOGUES][16];
    int st = -1;
    ep.n = 0;
    ep.done = false;
    if (a == NULL || b == NULL)
        goto done;
    if (s->nep <= EM_MAX_EPILOGUES) {
        for (; ep.n < s->nep; ep.n++) {
            const step_t *e = &s->eps[ep.n];
            if ((ep.args[ep.n] = kernel_args(e, inputs, bufs, small[ep.n])) == NULL)
                goto done;
            ep.fn[ep.n] = e->fn;
            ep.band[ep.n] = e->band;
        }
    }
    em_Tensor *out = bufs[s->out];
    st = em_blas_matmul_ep(a, b, out, s->how, ep.n > 0 ? &ep : NULL);
    if (st == 1) {
        PyObject *ins[2] = {(PyObject *)a, (PyObject *)b};
        st = em_ufunc_call(self->matmul, ins, 2, out->array, out->dtype, out->dtype);
    }
    for (int e = 0; st == 0 && !ep.done && e < s->nep; e++)
        st = run_kernel(&s->eps[e], inputs, bufs);
done:
    for (int e = 0; e < ep.n; e++)
        if (ep.args[e] != small[e])
            PyMem_Free(ep.args[e]);
    Py_XDECREF(a);
    Py_XDECREF(b);
    return st;
}

static int
run_extern(CompiledGraph *self, const step_t *s, PyObject *const *inputs, em_Tensor **bufs)
{
    PyObject *small[8], **args = small, *res = NULL;
    int made = 0, st = -1;
    if (s->nviews > 8 && (args = PyMem_Malloc(sizeof(PyObject *) * s->nviews)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (; made < s->nviews; made++) {
        args[made] = (PyObject *)view_tensor(&s->views[made], inputs, bufs);
        if (args[made] == NULL)
            goto done;
    }
    res = PyObject_Vectorcall(s->call, args, s->nviews, NULL);
    if (res == NULL)
        goto done;
    if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != s->nslots) {
        PyErr_Format(PyExc_RuntimeError, "compiled graph: extern %S returned the wrong values",
                     s->name);
        goto done;
    }
    for (int k = 0; k < s->nslots; k++) {
        int j = s->slots[k];
        PyObject *t = PyTuple_GET_ITEM(res, k);
        if (!em_Tensor_Check(t)) {
            PyErr_SetString(PyExc_RuntimeError, "compiled graph: bad extern result");
            goto done;
        }
        /* the kernels after it were built for the shape and dtype the meta rule gave */
        const buffer_t *b = &self->p.bufs[j];
        em_Tensor *rt = (em_Tensor *)t;
        if (rt->dtype != b->dtype || rt->ndim != b->dims.ndim ||
            memcmp(rt->sizes, b->dims.sizes, sizeof(Py_ssize_t) * rt->ndim) != 0) {
            PyErr_Format(PyExc_RuntimeError,
                         "compiled graph: extern %S returned a result unlike its meta rule's",
                         s->name);
            goto done;
        }
        em_Tensor *c = em_tensor_contiguous(rt);
        if (c == NULL || em_is_meta(c)) {
            Py_XDECREF(c);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "compiled graph: extern made no data");
            goto done;
        }
        Py_XSETREF(bufs[j], c);
    }
    st = 0;
done:
    for (int i = 0; i < made; i++)
        Py_DECREF(args[i]);
    if (args != small)
        PyMem_Free(args);
    Py_XDECREF(res);
    return st;
}

static int
run_step(CompiledGraph *self, const step_t *s, PyObject *const *inputs, em_Tensor **bufs)
{
    switch (s->kind) {
    case STEP_KERNEL: return run_kernel(s, inputs, bufs);
    case STEP_MATMUL: return run_matmul(self, s, inputs, bufs);
    default: return run_extern(self, s, inputs, bufs);
    }
}

/* The tune hook, taken off first (its timing calls run the graph as is) */
static int
run_tune(CompiledGraph *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *tune = self->tune;
    self->tune = NULL;
    PyObject *small[17], **targs = small, *res = NULL;
    if (nargs + 1 > 17 && (targs = PyMem_Malloc(sizeof(PyObject *) * (nargs + 1))) == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    targs[0] = (PyObject *)self;
    for (Py_ssize_t i = 0; i < nargs; i++)
        targs[i + 1] = args[i];
    res = PyObject_Vectorcall(tune, targs, nargs + 1, NULL);
    if (targs != small)
        PyMem_Free(targs);
    if (res == NULL)
        goto error;
    Py_DECREF(res);
    Py_DECREF(tune);
    return 0;
error:
    Py_DECREF(tune);
    return -1;
}

/* A size expression's value: its postfix program over the call's symbols. */
static int
eval_expr(const plan_t *p, int e, int64_t *out)
{
    int64_t stack[64];
    int n = 0;
    const int64_t *prog = p->progs + p->prog_start[e];
    for (int k = 0; k < p->prog_len[e]; k++) {
        int64_t op = prog[2 * k], arg = prog[2 * k + 1];
        if (op == 0 || op == 1) {
            stack[n++] = op == 0 ? p->symbol_vals[arg] : arg;
            continue;
        }
        int64_t b = stack[--n], a = stack[--n], r;
        bool bad = false;
        switch (op) {
        case 2: bad = __builtin_add_overflow(a, b, &r); break;
        case 3: bad = __builtin_mul_overflow(a, b, &r); break;
        case 4:
        case 5:
            if (b == 0 || (a == INT64_MIN && b == -1)) {
                bad = true;
                r = 0;
                break;
            }
            r = op == 4 ? a / b : a % b;
            if (op == 4 && (a % b != 0) && ((a < 0) != (b < 0)))
                r -= 1;                       /* floor */
            if (op == 5 && r != 0 && ((r < 0) != (b < 0)))
                r += b;
            break;
        case 6: r = a < b ? a : b; break;
        default: r = a > b ? a : b; break;
        }
        if (bad) {
            PyErr_SetString(PyExc_OverflowError, "compiled graph: a size expression "
                            "overflows or divides by zero");
            return -1;
        }
        stack[n++] = r;
    }
    *out = stack[0];
    return 0;
}

/* A symbolic graph's sizes for this call: the symbols from the inputs, the
 * expressions, written into the plan, and the kernel steps' schedules. */
static int
bind_sizes(plan_t *p, PyObject *const *args)
{
    for (int k = 0; k < p->nsymbols; k++) {
        PyObject *a = args[p->bind_input[k]];
        int d = p->bind_dim[k];
        int64_t v;
        if (d < 0) {
            v = PyLong_AsLongLong(a);
            if (v == -1 && PyErr_Occurred())
                return -1;
        }
        else {
            if (!em_Tensor_Check(a) || ((em_Tensor *)a)->ndim <= d) {
                PyErr_Format(PyExc_TypeError, "compiled graph: input %d must be a tensor "
                             "of more than %d dims", p->bind_input[k], d);
                return -1;
            }
            v = ((em_Tensor *)a)->sizes[d];
        }
        p->symbol_vals[k] = v;
    }
    for (int e = 0; e < p->nexprs; e++)
        if (eval_expr(p, e, &p->vals[e]) < 0)
            return -1;
    for (int k = 0; k < p->npatches; k++)
        *p->patches[k].field = (Py_ssize_t)p->vals[p->patches[k].expr];
    for (int i = 0; i < p->nsteps; i++) {
        step_t *s = &p->steps[i];
        if (s->kind != STEP_KERNEL || !s->sched)
            continue;
        for (int j = 0; j < s->nsyms; j++)
            s->symvals[j] = p->vals[s->syms[j]];
        /* fusion.schedule, at this call's sizes */
        Py_ssize_t outer = s->outer, points = s->points;
        if (outer < 0 || points < 0) {
            PyErr_SetString(PyExc_RuntimeError, "compiled graph: a negative size");
            return -1;
        }
        s->parallel = s->may_parallel && outer > 1 && points >= p->sched[0];
        Py_ssize_t per_index = outer > 0 ? points / outer : 0, target = p->sched[1];
        if (s->parallel) {
            target = points / p->sched[3];
            if (target > p->sched[1])
                target = p->sched[1];
            if (target < p->sched[2])
                target = p->sched[2];
        }
        Py_ssize_t chunk = per_index ? (target + per_index - 1) / per_index : outer;
        if (chunk < 1)
            chunk = 1;
        s->chunk = chunk < outer ? chunk : outer;
        s->small = !s->parallel && points <= SMALL_ELEMENTS && s->chunk >= outer;
    }
    return 0;
}

/* Runs the graph; its outputs [0, split) in a new tuple (the result), and with
 * rest != NULL the others in *rest (a new tuple): a compiled forward's outputs and
 * the values it saves, made as two tuples (aot_function.c). */
static PyObject *
run_graph(CompiledGraph *self, PyObject *const *args, Py_ssize_t nargs, int split,
          PyObject **rest)
{
    const plan_t *p = &self->p;
    if (nargs != p->ninputs) {
        PyErr_Format(PyExc_TypeError, "compiled graph takes %d tensors, got %zd",
                     p->ninputs, nargs);
        return NULL;
    }
    if (self->tune != NULL && run_tune(self, args, nargs) < 0)
        return NULL;
    if (self->lock != NULL && graph_lock_acquire(self) < 0)
        return NULL;
    PyObject *small_in[16], **inputs = small_in;
    em_Tensor *small_buf[32], **bufs = small_buf;
    PyObject *result = NULL;
    int nin = 0, nbuf = 0;
    if (p->ninputs > 16 && (inputs = PyMem_Malloc(sizeof(PyObject *) * nargs)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (p->symbolic && bind_sizes((plan_t *)p, args) < 0)
        goto done;
    if (p->nbufs > 32 && (bufs = PyMem_Malloc(sizeof(em_Tensor *) * p->nbufs)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; nin < nargs; nin++) {
        if (p->symbolic && p->size_input[nin]) {
            inputs[nin] = Py_NewRef(args[nin]);     /* a size: read by bind_sizes */
            continue;
        }
        inputs[nin] = (PyObject *)conform_input(args[nin], &p->inputs[nin], nin);
        if (inputs[nin] == NULL)
            goto done;
    }
    for (; nbuf < p->nbufs; nbuf++) {
        bufs[nbuf] = NULL;
        if (!p->bufs[nbuf].by_extern && (bufs[nbuf] = make_buffer(self, nbuf)) == NULL)
            goto done;
    }
    for (int s = 0; s < p->nsteps; s++) {
        double t0 = self->step_seconds != NULL ? now_seconds() : 0.0;
        if (run_step(self, &p->steps[s], inputs, bufs) < 0 || PyErr_CheckSignals() < 0)
            goto done;
        if (self->step_seconds != NULL)
            self->step_seconds[s] += now_seconds() - t0;
    }
    /* an input the kernels wrote into that arrived in another layout ran as a copy
     * (conform_input): the copy goes back into it, all of it (the plan's writes are
     * into the compiled layout) */
    for (int i = 0; i < nin; i++)
        if (p->input_written[i] && inputs[i] != args[i] &&
            em_copy_into((em_Tensor *)args[i], inputs[i]) < 0)
            goto done;
    result = PyTuple_New(split);
    if (result != NULL && rest != NULL &&
        (*rest = PyTuple_New(p->noutputs - split)) == NULL)
        Py_CLEAR(result);
    for (int o = 0; result != NULL && o < p->noutputs; o++) {
        PyObject *t;
        if (p->output_none[o]) {
            /* no value (a backward graph's input that gets no gradient) */
            Py_INCREF(Py_None);
            t = Py_None;
        }
        else if (p->output_sym[o] >= 0)
            t = PyLong_FromLongLong(p->vals[p->output_sym[o]]);
        else
            t = (PyObject *)view_tensor(&p->outputs[o], inputs, bufs);
        if (t == NULL) {
            Py_CLEAR(result);
            if (rest != NULL)
                Py_CLEAR(*rest);
        }
        else if (o < split)
            PyTuple_SET_ITEM(result, o, t);
        else
            PyTuple_SET_ITEM(*rest, o - split, t);
    }
    self->calls++;
    for (int i = 0; i < nbuf; i++) {
        em_Tensor *t = bufs[i];
        if (t != NULL && t->numel > 0 && t->storage->array != NULL && !p->bufs[i].by_extern) {
            Py_INCREF(t->storage->array);
            Py_XSETREF(self->pool[i], (PyObject *)t->storage->array);
        }
    }
done:
    for (int i = 0; i < nin; i++)
        Py_DECREF(inputs[i]);
    for (int i = 0; i < nbuf; i++)
        Py_XDECREF(bufs[i]);
    if (inputs != small_in)
        PyMem_Free(inputs);
    if (bufs != small_buf)
        PyMem_Free(bufs);
    if (self->lock != NULL)
        PyThread_release_lock(self->lock);
    return result;
}

static PyObject *
graph_vectorcall(CompiledGraph *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "compiled graph takes no keyword arguments");
        return NULL;
    }
    return run_graph(self, args, PyVectorcall_NARGS(nargsf), self->p.noutputs, NULL);
}

int
em_compiled_graph_call_split(PyObject *graph, PyObject *const *args, Py_ssize_t nargs,
                             Py_ssize_t split, PyObject **first, PyObject **rest)
{
    if (Py_TYPE(graph) != &CompiledGraph_Type)
        return 1;
    CompiledGraph *self = (CompiledGraph *)graph;
    if (split < 0 || split > self->p.noutputs) {
        PyErr_SetString(PyExc_RuntimeError, "compiled forward returned too few values");
        return -1;
    }
    *rest = NULL;
    *first = run_graph(self, args, nargs, (int)split, rest);
    return *first == NULL ? -1 : 0;
}

static void
graph_dealloc(CompiledGraph *self)
{
    if (self->pool != NULL) {
        for (int i = 0; i < self->p.nbufs; i++)
            Py_XDECREF(self->pool[i]);
        PyMem_Free(self->pool);
    }
    plan_free(&self->p);
    if (self->lock != NULL)
        PyThread_free_lock(self->lock);
    Py_XDECREF(self->module);
    Py_XDECREF(self->plan);
    Py_XDECREF(self->matmul);
    Py_XDECREF(self->tune);
    Py_XDECREF(self->keep);
    PyMem_Free(self->kernels);
    PyMem_Free(self->step_seconds);
    PyObject_Free(self);
}

/* glibc gives the memory freed at the top of its heap back to the system at once (more
 * than 128 KB by default), so a compiled graph's outputs and saved tensors, allocated
 * afresh by every call after the last call's were freed, page-fault in their memory
 * each time (1,500 faults per training step of a small ResNet block: slower than
 * eager, whose allocations reuse the heap). Once a graph is compiled, 64 MB are kept
 * at the top instead (M_TOP_PAD; the pages are counted once, at the high-water mark),
 * unless MALLOC_TOP_PAD_ says otherwise. */
static void
keep_heap_top(void)
{
#if defined(__GLIBC__) && defined(M_TOP_PAD)
    static int done;
    if (!done) {
        done = 1;
        if (getenv("MALLOC_TOP_PAD_") == NULL)
            mallopt(M_TOP_PAD, 64 << 20);
    }
#endif
}

/* CompiledGraph(jit_module_or_None, addresses, plan) */
static PyObject *
graph_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    keep_heap_top();
    PyObject *module, *addresses, *plan;
    if (!PyArg_ParseTuple(args, "OO!O!:CompiledGraph", &module, &PyTuple_Type, &addresses,
                          &PyTuple_Type, &plan))
        return NULL;
    CompiledGraph *self = PyObject_New(CompiledGraph, type);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)graph_vectorcall;
    Py_INCREF(module);
    self->module = module;
    Py_INCREF(plan);
    self->plan = plan;
    memset(&self->p, 0, sizeof self->p);
    self->calls = 0;
    self->step_seconds = NULL;
    self->pool = NULL;
    self->tune = NULL;
    self->keep = NULL;
    self->lock = NULL;
    int nkernels = (int)PyTuple_GET_SIZE(addresses);
    self->kernels = PyMem_Calloc(nkernels + 1, sizeof(kernel_fn));
    self->matmul = PyObject_GetAttrString(em_numpy, "matmul");
    if (self->kernels == NULL || self->matmul == NULL) {
        Py_DECREF(self);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    for (int k = 0; k < nkernels; k++) {
        void *p = PyLong_AsVoidPtr(PyTuple_GET_ITEM(addresses, k));
        if (p == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "CompiledGraph: null kernel address");
            Py_DECREF(self);
            return NULL;
        }
        self->kernels[k] = (kernel_fn)p;
    }
    if (decode_plan(&self->p, plan, self->kernels, nkernels) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->pool = PyMem_Calloc(self->p.nbufs + 1, sizeof(PyObject *));
    if (self->p.symbolic && !fork_handler_set) {
        if (pthread_atfork(NULL, NULL, count_fork) != 0) {
            Py_DECREF(self);
            PyErr_SetString(PyExc_RuntimeError, "compiled graph: pthread_atfork failed");
            return NULL;
        }
        fork_handler_set = 1;
    }
    if (self->p.symbolic && (self->lock = PyThread_allocate_lock()) == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->lock_forks = fork_count;
    if (self->pool == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

/* profile: True times every step of each call (profile = True again resets the
 * sums); step_seconds: the sums, one per step, or None when not profiling */
static PyObject *
graph_get_profile(CompiledGraph *self, void *c)
{
    return PyBool_FromLong(self->step_seconds != NULL);
}

static int
graph_set_profile(CompiledGraph *self, PyObject *value, void *c)
{
    int on = value == NULL ? 0 : PyObject_IsTrue(value);
    if (on < 0)
        return -1;
    PyMem_Free(self->step_seconds);
    self->step_seconds = NULL;
    if (on) {
        self->step_seconds = PyMem_Calloc(self->p.nsteps + 1, sizeof(double));
        if (self->step_seconds == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

static PyObject *
graph_get_step_seconds(CompiledGraph *self, void *c)
{
    if (self->step_seconds == NULL)
        Py_RETURN_NONE;
    PyObject *out = PyTuple_New(self->p.nsteps);
    for (int i = 0; out != NULL && i < self->p.nsteps; i++) {
        PyObject *v = PyFloat_FromDouble(self->step_seconds[i]);
        if (v == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyTuple_SET_ITEM(out, i, v);
    }
    return out;
}

static PyObject *
graph_get_tune(CompiledGraph *self, void *c)
{
    return Py_NewRef(self->tune != NULL ? self->tune : Py_None);
}

static int
graph_set_tune(CompiledGraph *self, PyObject *value, void *c)
{
    if (value != NULL && value != Py_None && !PyCallable_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "CompiledGraph.tune must be callable or None");
        return -1;
    }
    Py_XSETREF(self->tune, value == NULL || value == Py_None ? NULL : Py_NewRef(value));
    return 0;
}

/* set_step(i, parallel, chunk, address, how, keep): the schedule of step i. A kernel
 * step runs in chunks of `chunk` (> 0) indices, on the pool when parallel (only where
 * the plan made it parallel: a step accumulating along dim 0 never is), with the code
 * at address when not None (an equivalent kernel; keep holds it alive); a matmul step
 * splits as how says (0 as the runtime decides, 1 over the pool, 2 one BLAS call). */
static PyObject *
graph_set_step(CompiledGraph *self, PyObject *args)
{
    Py_ssize_t i, chunk;
    int parallel, how;
    PyObject *address, *keep;
    if (!PyArg_ParseTuple(args, "npnOiO:set_step", &i, &parallel, &chunk, &address, &how,
                          &keep))
        return NULL;
    if (i < 0 || i >= self->p.nsteps) {
        PyErr_SetString(PyExc_IndexError, "set_step: no such step");
        return NULL;
    }
    step_t *s = &self->p.steps[i];
    if (s->kind == STEP_KERNEL) {
        if (chunk <= 0 || (parallel && !s->may_parallel)) {
            PyErr_SetString(PyExc_ValueError, "set_step: a chunk must be positive, and only "
                            "a step the plan made parallel may run in parallel");
            return NULL;
        }
        kernel_fn fn = s->fn;
        if (address != Py_None && (fn = (kernel_fn)PyLong_AsVoidPtr(address)) == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "set_step: null kernel address");
            return NULL;
        }
        if (keep != Py_None) {
            if (self->keep == NULL && (self->keep = PyList_New(0)) == NULL)
                return NULL;
            if (PyList_Append(self->keep, keep) < 0)
                return NULL;
        }
        s->fn = fn;
        s->parallel = parallel;
        s->chunk = chunk;
    }
    else if (s->kind == STEP_MATMUL) {
        if (how < EM_GEMM_AUTO || how > EM_GEMM_ONE_CALL) {
            PyErr_SetString(PyExc_ValueError, "set_step: how is 0, 1 or 2");
            return NULL;
        }
        s->how = how;
    }
    Py_RETURN_NONE;
}

static PyMethodDef graph_methods[] = {
    {"set_step", (PyCFunction)graph_set_step, METH_VARARGS,
     "set_step(i, parallel, chunk, address, how, keep): step i's schedule."},
    {NULL},
};

static PyGetSetDef graph_getset[] = {
    {"profile", (getter)graph_get_profile, (setter)graph_set_profile, NULL, NULL},
    {"tune", (getter)graph_get_tune, (setter)graph_set_tune, NULL, NULL},
    {"step_seconds", (getter)graph_get_step_seconds, NULL, NULL, NULL},
    {NULL},
};

static PyMemberDef graph_members[] = {
    {"calls", T_PYSSIZET, offsetof(CompiledGraph, calls), READONLY, NULL},
    {"plan", T_OBJECT, offsetof(CompiledGraph, plan), READONLY, NULL},
    {NULL},
};

static PyTypeObject CompiledGraph_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember._C.CompiledGraph",
    .tp_basicsize = sizeof(CompiledGraph),
    .tp_dealloc = (destructor)graph_dealloc,
    .tp_vectorcall_offset = offsetof(CompiledGraph, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Runs the kernels and BLAS calls of a compiled graph in one call.",
    .tp_getset = graph_getset,
    .tp_members = graph_members,
    .tp_methods = graph_methods,
    .tp_new = graph_new,
};

int
em_compiled_graph_init(PyObject *module)
{
    if (PyType_Ready(&CompiledGraph_Type) < 0)
        return -1;
    Py_INCREF(&CompiledGraph_Type);
    return PyModule_AddObject(module, "CompiledGraph", (PyObject *)&CompiledGraph_Type);
}
