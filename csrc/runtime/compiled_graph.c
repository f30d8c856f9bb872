/* compiled_graph.c: runs a compiled graph (kernels and BLAS calls) in one call.
 *
 * CompiledGraph(jit_module, plan) is callable with the graph's input tensors and
 * returns a tuple of output tensors. The plan is the plain tuple
 * python/ember/compiler/plan.py makes:
 *
 *     (inputs, buffers, steps, outputs)
 *
 * inputs:  (sizes, strides) each input was compiled for; an input laid out
 *          differently (a gradient that arrives expanded, say) is first copied into
 *          that layout when it is dense, else the call fails; an empty input is only
 *          re-viewed with those strides
 * buffers: (dtype, sizes, extern) of each buffer: allocated per call (contiguous), or
 *          when extern is true, made by an extern step
 * steps:   ("extern", fn, views, slots, name)
 *                                     fn(*tensors of views) -> tuple of tensors, stored
 *                                     (made contiguous) in the buffer slots
 *          ("kernel", k, refs, outer, parallel)
 *                                     call kernel k with pointers to refs over
 *                                     [0, outer) of its dim 0, split across the
 *                                     thread pool when parallel
 *          ("matmul", a, b, buffer)   BLAS (NumPy's matmul) from views a and b
 * outputs: views, or None for an output with no value (a gradient that is None)
 * A ref is ("in", i) or ("buf", j); a view is (ref, sizes, strides, offset), in
 * elements of the ref's dtype.
 */
#include "ember.h"

#include <time.h>

typedef void (*kernel_fn)(void **args, int64_t start, int64_t end);

void em_parallel_for(void (*fn)(void *, int64_t, int64_t), void *ctx, int64_t n);

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

int em_blas_matmul(em_Tensor *a, em_Tensor *b, em_Tensor *out);

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *module;        /* the JitModule: keeps the code alive */
    PyObject *plan;
    int ninputs, nbufs, nkernels;
    kernel_fn *kernels;
    PyObject *matmul;        /* numpy.matmul */
    Py_ssize_t calls;
    double *step_seconds;    /* per-step time summed over calls while profiling, or NULL */
    /* the NumPy array behind each buffer after the last call; a call reuses it when
     * nothing else holds it any more (refcount 1), so large intermediates are not
     * mapped and page-faulted in afresh on every call */
    PyObject **pool;
    char *made_by_extern;    /* per buffer: an extern step makes it (read from the plan once) */
} CompiledGraph;

static double
now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------ helpers */

static int
parse_ref(PyObject *ref, int *is_buf, Py_ssize_t *index)
{
    const char *kind;
    if (!PyArg_ParseTuple(ref, "sn", &kind, index))
        return -1;
    *is_buf = kind[0] == 'b';
    return 0;
}

static int
int_tuple(PyObject *t, Py_ssize_t *out, int *n)
{
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) > EM_MAX_DIMS) {
        PyErr_SetString(PyExc_ValueError, "CompiledGraph: bad shape tuple");
        return -1;
    }
    *n = (int)PyTuple_GET_SIZE(t);
    for (int i = 0; i < *n; i++) {
        out[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, i));
        if (out[i] == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

static em_Tensor *
ref_tensor(PyObject *ref, PyObject *const *inputs, em_Tensor **bufs)
{
    int is_buf;
    Py_ssize_t i;
    if (parse_ref(ref, &is_buf, &i) < 0)
        return NULL;
    em_Tensor *t = is_buf ? bufs[i] : (em_Tensor *)inputs[i];
    if (t == NULL)
        PyErr_Format(PyExc_RuntimeError, "compiled graph: buffer %zd read before it was made", i);
    return t;
}

/* A tensor for view (ref, sizes, strides, offset): the ref itself when the view is
 * all of it. New reference. */
static em_Tensor *
view_tensor(PyObject *view, PyObject *const *inputs, em_Tensor **bufs)
{
    PyObject *ref, *sz, *st;
    Py_ssize_t off, sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
    int n, ns;
    if (!PyArg_ParseTuple(view, "OOOn", &ref, &sz, &st, &off) ||
        int_tuple(sz, sizes, &n) < 0 || int_tuple(st, strides, &ns) < 0)
        return NULL;
    em_Tensor *base = ref_tensor(ref, inputs, bufs);
    if (base == NULL)
        return NULL;
    if (off == 0 && n == base->ndim &&
        memcmp(sizes, base->sizes, sizeof(Py_ssize_t) * n) == 0 &&
        memcmp(strides, base->strides, sizeof(Py_ssize_t) * n) == 0) {
        Py_INCREF(base);
        return base;
    }
    return em_tensor_view(base, n, sizes, strides, base->offset + off);
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
conform_input(PyObject *arg, PyObject *geom, Py_ssize_t i)
{
    if (!em_Tensor_Check(arg) || em_is_meta((em_Tensor *)arg)) {
        PyErr_Format(PyExc_TypeError, "compiled graph: input %zd must be a tensor with data", i);
        return NULL;
    }
    em_Tensor *t = (em_Tensor *)arg;
    em_Geom g;
    int n, ns;
    if (int_tuple(PyTuple_GET_ITEM(geom, 0), g.sizes, &n) < 0 ||
        int_tuple(PyTuple_GET_ITEM(geom, 1), g.strides, &ns) < 0)
        return NULL;
    if (n != t->ndim || memcmp(g.sizes, t->sizes, sizeof(Py_ssize_t) * n) != 0) {
        PyObject *want = em_format_shape(n, g.sizes), *got = em_format_shape(t->ndim, t->sizes);
        if (want && got)
            PyErr_Format(PyExc_RuntimeError,
                         "compiled graph: input %zd has shape %U, but the graph was compiled "
                         "for %U", i, got, want);
        Py_XDECREF(want);
        Py_XDECREF(got);
        return NULL;
    }
    bool same = true;
    for (int d = 0; d < n; d++)
        if (g.sizes[d] > 1 && g.strides[d] != t->strides[d])
            same = false;
    if (same) {
        Py_INCREF(t);
        return t;
    }
    if (t->numel == 0) {
        /* no element is read: the same (empty) data seen with the compiled strides */
        return em_tensor_view(t, n, g.sizes, g.strides, t->offset);
    }
    g.ndim = n;
    g.dtype = t->dtype;
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

/* ------------------------------------------------------------------ running */

static int
run_matmul(CompiledGraph *self, PyObject *step, PyObject *const *inputs, em_Tensor **bufs)
{
    Py_ssize_t out_i = PyLong_AsSsize_t(PyTuple_GET_ITEM(step, 3));
    if (out_i < 0 || out_i >= self->nbufs) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "CompiledGraph: bad matmul output");
        return -1;
    }
    em_Tensor *a = view_tensor(PyTuple_GET_ITEM(step, 1), inputs, bufs);
    em_Tensor *b = a ? view_tensor(PyTuple_GET_ITEM(step, 2), inputs, bufs) : NULL;
    int st = -1;
    if (a != NULL && b != NULL) {
        em_Tensor *out = bufs[out_i];
        st = em_blas_matmul(a, b, out);
        if (st == 1) {
            PyObject *ins[2] = {(PyObject *)a, (PyObject *)b};
            st = em_ufunc_call(self->matmul, ins, 2, out->array, out->dtype, out->dtype);
        }
    }
    Py_XDECREF(a);
    Py_XDECREF(b);
    return st;
}

static int
run_kernel(CompiledGraph *self, PyObject *step, PyObject *const *inputs, em_Tensor **bufs)
{
    Py_ssize_t k = PyLong_AsSsize_t(PyTuple_GET_ITEM(step, 1));
    PyObject *refs = PyTuple_GET_ITEM(step, 2);
    if (k < 0 || k >= self->nkernels || !PyTuple_Check(refs)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "CompiledGraph: bad kernel step");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(refs);
    void *small[16], **args = small;
    if (n > 16 && (args = PyMem_Malloc(sizeof(void *) * n)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        em_Tensor *t = ref_tensor(PyTuple_GET_ITEM(refs, i), inputs, bufs);
        if (t == NULL) {
            if (args != small)
                PyMem_Free(args);
            return -1;
        }
        args[i] = PyArray_DATA(t->array);
    }
    kernel_fn fn = self->kernels[k];
    Py_ssize_t outer = PyLong_AsSsize_t(PyTuple_GET_ITEM(step, 3));
    int parallel = PyObject_IsTrue(PyTuple_GET_ITEM(step, 4));
    Py_BEGIN_ALLOW_THREADS
    if (parallel && outer > 1) {
        range_job job = {fn, args};
        em_parallel_for(run_range, &job, outer);
    }
    else {
        fn(args, 0, outer);
    }
    Py_END_ALLOW_THREADS
    if (args != small)
        PyMem_Free(args);
    return 0;
}

static int
run_extern(CompiledGraph *self, PyObject *step, PyObject *const *inputs, em_Tensor **bufs)
{
    PyObject *fn = PyTuple_GET_ITEM(step, 1), *views = PyTuple_GET_ITEM(step, 2);
    PyObject *slots = PyTuple_GET_ITEM(step, 3);
    Py_ssize_t n = PyTuple_GET_SIZE(views);
    PyObject *small[8], **args = small, *res = NULL;
    Py_ssize_t made = 0;
    int st = -1;
    if (n > 8 && (args = PyMem_Malloc(sizeof(PyObject *) * n)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (; made < n; made++) {
        args[made] = (PyObject *)view_tensor(PyTuple_GET_ITEM(views, made), inputs, bufs);
        if (args[made] == NULL)
            goto done;
    }
    res = PyObject_Vectorcall(fn, args, n, NULL);
    if (res == NULL)
        goto done;
    if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != PyTuple_GET_SIZE(slots)) {
        PyErr_Format(PyExc_RuntimeError, "compiled graph: extern %S returned the wrong values",
                     PyTuple_GET_ITEM(step, 4));
        goto done;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(slots); k++) {
        Py_ssize_t j = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, k));
        PyObject *t = PyTuple_GET_ITEM(res, k);
        if (j < 0 || j >= self->nbufs || !em_Tensor_Check(t)) {
            PyErr_SetString(PyExc_RuntimeError, "compiled graph: bad extern result");
            goto done;
        }
        /* the kernels after it were built for the shape and dtype the meta rule gave */
        PyObject *spec = PyTuple_GET_ITEM(PyTuple_GET_ITEM(self->plan, 1), j);
        em_Tensor *rt = (em_Tensor *)t;
        Py_ssize_t sizes[EM_MAX_DIMS];
        int nd;
        if (int_tuple(PyTuple_GET_ITEM(spec, 1), sizes, &nd) < 0)
            goto done;
        if (rt->dtype != (em_dtype_t)PyLong_AsLong(PyTuple_GET_ITEM(spec, 0)) || rt->ndim != nd ||
            memcmp(rt->sizes, sizes, sizeof(Py_ssize_t) * nd) != 0) {
            PyErr_Format(PyExc_RuntimeError,
                         "compiled graph: extern %S returned a result unlike its meta rule's",
                         PyTuple_GET_ITEM(step, 4));
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
    for (Py_ssize_t i = 0; i < made; i++)
        Py_DECREF(args[i]);
    if (args != small)
        PyMem_Free(args);
    Py_XDECREF(res);
    return st;
}

static PyObject *
graph_vectorcall(CompiledGraph *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *in_geoms = PyTuple_GET_ITEM(self->plan, 0);
    PyObject *buf_specs = PyTuple_GET_ITEM(self->plan, 1);
    PyObject *steps = PyTuple_GET_ITEM(self->plan, 2);
    PyObject *outs = PyTuple_GET_ITEM(self->plan, 3);
    if (nargs != self->ninputs || kwnames != NULL) {
        PyErr_Format(PyExc_TypeError, "compiled graph takes %d tensors, got %zd",
                     self->ninputs, nargs);
        return NULL;
    }
    PyObject *small_in[16], **inputs = small_in;
    em_Tensor *small_buf[32], **bufs = small_buf;
    PyObject *result = NULL;
    int nin = 0, nbuf = 0;
    if (self->ninputs > 16 && (inputs = PyMem_Malloc(sizeof(PyObject *) * nargs)) == NULL)
        return PyErr_NoMemory();
    if (self->nbufs > 32 && (bufs = PyMem_Malloc(sizeof(em_Tensor *) * self->nbufs)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; nin < nargs; nin++) {
        inputs[nin] = (PyObject *)conform_input(args[nin], PyTuple_GET_ITEM(in_geoms, nin), nin);
        if (inputs[nin] == NULL)
            goto done;
    }
    for (; nbuf < self->nbufs; nbuf++) {
        PyObject *spec = PyTuple_GET_ITEM(buf_specs, nbuf);
        em_Geom g;
        int n;
        if (self->made_by_extern[nbuf]) {
            bufs[nbuf] = NULL;
            continue;
        }
        PyObject *arr = self->pool[nbuf];
        if (arr != NULL && Py_REFCNT(arr) == 1) {
            bufs[nbuf] = em_tensor_from_array((PyArrayObject *)arr, NULL, 0);
            self->pool[nbuf] = NULL;
            Py_DECREF(arr);
            if (bufs[nbuf] == NULL)
                goto done;
            continue;
        }
        g.dtype = (em_dtype_t)PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
        if (int_tuple(PyTuple_GET_ITEM(spec, 1), g.sizes, &n) < 0)
            goto done;
        g.ndim = n;
        bufs[nbuf] = em_tensor_empty(&g, false);
        if (bufs[nbuf] == NULL)
            goto done;
    }
    for (Py_ssize_t s = 0; s < PyTuple_GET_SIZE(steps); s++) {
        PyObject *step = PyTuple_GET_ITEM(steps, s);
        const char *kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(step, 0));
        double t0 = self->step_seconds != NULL ? now_seconds() : 0.0;
        int st = kind[0] == 'k' ? run_kernel(self, step, inputs, bufs)
                 : kind[0] == 'e' ? run_extern(self, step, inputs, bufs)
                                  : run_matmul(self, step, inputs, bufs);
        if (st < 0)
            goto done;
        if (self->step_seconds != NULL)
            self->step_seconds[s] += now_seconds() - t0;
    }
    Py_ssize_t nout = PyTuple_GET_SIZE(outs);
    result = PyTuple_New(nout);
    for (Py_ssize_t o = 0; result != NULL && o < nout; o++) {
        PyObject *view = PyTuple_GET_ITEM(outs, o), *t;
        if (view == Py_None) {
            /* no value (a backward graph's input that gets no gradient) */
            Py_INCREF(Py_None);
            t = Py_None;
        }
        else
            t = (PyObject *)view_tensor(view, inputs, bufs);
        if (t == NULL)
            Py_CLEAR(result);
        else
            PyTuple_SET_ITEM(result, o, t);
    }
    self->calls++;
    for (int i = 0; i < nbuf; i++) {
        em_Tensor *t = bufs[i];
        if (t != NULL && t->numel > 0 && t->storage->array != NULL &&
            !self->made_by_extern[i]) {
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
    return result;
}

/* ------------------------------------------------------------------ the type */

static void
graph_dealloc(CompiledGraph *self)
{
    Py_XDECREF(self->module);
    Py_XDECREF(self->plan);
    Py_XDECREF(self->matmul);
    PyMem_Free(self->kernels);
    PyMem_Free(self->step_seconds);
    PyMem_Free(self->made_by_extern);
    if (self->pool != NULL) {
        for (int i = 0; i < self->nbufs; i++)
            Py_XDECREF(self->pool[i]);
        PyMem_Free(self->pool);
    }
    PyObject_Free(self);
}

/* CompiledGraph(jit_module_or_None, addresses, plan) */
static PyObject *
graph_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *module, *addresses, *plan;
    if (!PyArg_ParseTuple(args, "OO!O!:CompiledGraph", &module, &PyTuple_Type, &addresses,
                          &PyTuple_Type, &plan))
        return NULL;
    if (PyTuple_GET_SIZE(plan) != 4) {
        PyErr_SetString(PyExc_ValueError, "CompiledGraph: plan is (inputs, buffers, steps, "
                                          "outputs)");
        return NULL;
    }
    CompiledGraph *self = PyObject_New(CompiledGraph, type);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)graph_vectorcall;
    Py_INCREF(module);
    self->module = module;
    Py_INCREF(plan);
    self->plan = plan;
    self->calls = 0;
    self->step_seconds = NULL;
    self->pool = NULL;
    self->made_by_extern = NULL;
    self->kernels = NULL;
    self->matmul = NULL;
    self->ninputs = (int)PyTuple_GET_SIZE(PyTuple_GET_ITEM(plan, 0));
    self->nbufs = (int)PyTuple_GET_SIZE(PyTuple_GET_ITEM(plan, 1));
    self->nkernels = (int)PyTuple_GET_SIZE(addresses);
    self->kernels = PyMem_Calloc(self->nkernels + 1, sizeof(kernel_fn));
    self->pool = PyMem_Calloc(self->nbufs + 1, sizeof(PyObject *));
    self->made_by_extern = PyMem_Calloc(self->nbufs + 1, 1);
    self->matmul = PyObject_GetAttrString(em_numpy, "matmul");
    if (self->kernels == NULL || self->pool == NULL || self->made_by_extern == NULL ||
        self->matmul == NULL) {
        Py_DECREF(self);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    for (int i = 0; i < self->nbufs; i++) {
        int ext = PyObject_IsTrue(PyTuple_GET_ITEM(PyTuple_GET_ITEM(PyTuple_GET_ITEM(plan, 1), i),
                                                   2));
        if (ext < 0) {
            Py_DECREF(self);
            return NULL;
        }
        self->made_by_extern[i] = (char)ext;
    }
    for (int k = 0; k < self->nkernels; k++) {
        void *p = PyLong_AsVoidPtr(PyTuple_GET_ITEM(addresses, k));
        if (p == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "CompiledGraph: null kernel address");
            Py_DECREF(self);
            return NULL;
        }
        self->kernels[k] = (kernel_fn)p;
    }
    return (PyObject *)self;
}

static PyObject *
graph_get_calls(CompiledGraph *self, void *c)
{
    return PyLong_FromSsize_t(self->calls);
}

static PyObject *
graph_get_plan(CompiledGraph *self, void *c)
{
    Py_INCREF(self->plan);
    return self->plan;
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
        Py_ssize_t n = PyTuple_GET_SIZE(PyTuple_GET_ITEM(self->plan, 2));
        self->step_seconds = PyMem_Calloc(n + 1, sizeof(double));
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
    Py_ssize_t n = PyTuple_GET_SIZE(PyTuple_GET_ITEM(self->plan, 2));
    PyObject *out = PyTuple_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *v = PyFloat_FromDouble(self->step_seconds[i]);
        if (v == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyTuple_SET_ITEM(out, i, v);
    }
    return out;
}

static PyGetSetDef graph_getset[] = {
    {"calls", (getter)graph_get_calls, NULL, NULL, NULL},
    {"profile", (getter)graph_get_profile, (setter)graph_set_profile, NULL, NULL},
    {"step_seconds", (getter)graph_get_step_seconds, NULL, NULL, NULL},
    {"plan", (getter)graph_get_plan, NULL, NULL, NULL},
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
