/* aot_function.c: a compiled forward and backward as one node of eager autograd.
 *
 * AOTFunction(forward, backward, num_outputs, diff_outputs, needs_grad, tangent_meta,
 *             name, variants=None) is what AOT autograd (python/ember/aot/) returns
 * when inputs require grad. A call runs the forward graph with grad mode off; it
 * returns (outputs..., saved...). The outputs listed in diff_outputs hang from one
 * node of the C engine whose backward is an AOTBackward: it runs
 * backward(*saved, *tangents) and spreads the results over the inputs listed in
 * needs_grad (None for the others).
 *
 * When some differentiable outputs get no gradient (eager autograd would never run
 * the part of the graph only they reach), it runs instead the backward traced for
 * exactly the outputs that did: variants(present) -> (backward, saved_indices,
 * tangent_indices), a backward taking (saved[i] for i in saved_indices) and
 * (grads[k] for k in tangent_indices). So gradients that are None in eager are None
 * here, and no zeros stand in for a missing gradient. Without retain_graph the
 * engine releases the node after its backward (em_aot_backward_release): the saved
 * tensors are freed and a second backward raises, as in eager. With create_graph its
 * gradients hang from a node that refuses a double backward. All of it is C; only
 * the graphs (and building a variant the first time) run Python.
 *
 * Input mutation (python/ember/aot/mutation.py). mutations=((index, writes,
 * differentiable), ...) names the inputs the program writes into; the forward returns
 * their new values after the program's outputs. After each call they are written back:
 * with copy_ under grad mode when autograd followed the write (the input's history goes
 * on from this call's node, as from eager's in-place op), else as a plain copy; either
 * way the storage's version counter moves by `writes`, as eager's in-place ops move it.
 * A mutation (index, writes, differentiable, in_graph) the graph did in place itself
 * (python/ember/aot/inplace_writes.py: a write into a slice of the input) returns the
 * input as its new value: nothing is copied, and the counter moves by the writes the
 * graph's copy_ did not count.
 * aliases=((position, index, view), ...) are outputs that are views of such inputs: no
 * graph output, but view(input) once the new value is in, sharing the input's memory as
 * eager's result does. Before the forward runs: an input written into with autograd
 * that is a leaf requiring grad (or a view of one) raises eager's error, and a call in
 * which an input written into shares memory with another input (the graph took them
 * as separate tensors) runs fallback(*inputs) instead: the program, eagerly. A graph
 * that raises has written nothing. forward_grad=True runs the forward with the
 * caller's grad mode and no node (the eager backend: its ops record their history).
 */
#include "runtime/runtime.h"
#include "kernels/kutil.h"

typedef struct {
    Py_ssize_t index;         /* the input written into */
    Py_ssize_t writes;        /* in-place ops eager runs on it: version counter bumps */
    int differentiable;       /* autograd followed a write: copy_ under grad mode */
    Py_ssize_t in_graph;      /* writes the graph did in place (its value is the input) */
} Mutation;

typedef struct {
    Py_ssize_t position;      /* in the outputs returned */
    Py_ssize_t index;         /* the input it is a view of */
    PyObject *view;           /* view(input) -> the output */
    int sizes;                /* view(input, *inputs): its view steps read the call's
                               * sizes (a symbolic graph's, python/ember/aot/mutation.py) */
} OutputAlias;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *backward;
    PyObject *variants;       /* callable, or None */
    PyObject *saved;          /* tuple, NULL once released */
    PyObject *needs_grad;     /* tuple of input indices */
    PyObject *tangent_meta;   /* tuple of (sizes, dtype) per differentiable output */
    Py_ssize_t ninputs;
    uint64_t *versions;       /* per saved value: its storage's version as the call
                               * returned (NO_VERSION: not a tensor), or NULL */
    Py_ssize_t nversions;
} AOTBackward;

#define NO_VERSION UINT64_MAX

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *forward, *backward, *variants;
    Py_ssize_t noutputs;      /* forward outputs before the saved values, new values of
                               * the inputs written into last */
    PyObject *diff_outputs, *needs_grad, *tangent_meta, *name;
    Py_ssize_t calls;
    Mutation *mut;
    Py_ssize_t nmut;
    OutputAlias *alias;       /* by position */
    Py_ssize_t nalias;
    PyObject *fallback;       /* callable or None */
    int forward_grad;
} AOTFunction;

static PyTypeObject AOTBackward_Type, AOTFunction_Type;

/* ------------------------------------------------------------------ backward */

/* The engine is done with a Python node (no retain_graph): frees what its backward
 * holds for it, a compiled backward's saved tensors or, through its _release_saved(),
 * an autograd.Function's ctx.saved_tensors (python/ember/autograd/function.py). True
 * when something was freed: running the node again raises PyTorch's error. */
bool
em_aot_backward_release(PyObject *fn)
{
    if (PyObject_TypeCheck(fn, &AOTBackward_Type)) {
        Py_CLEAR(((AOTBackward *)fn)->saved);
        return true;
    }
    if (PyCFunction_Check(fn) || PyFunction_Check(fn))
        return false;
    static PyObject *name;
    if (name == NULL && (name = PyUnicode_InternFromString("_release_saved")) == NULL) {
        PyErr_WriteUnraisable(fn);
        return false;
    }
    PyObject *release = PyObject_GetAttr(fn, name);
    if (release == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError))
            PyErr_Clear();
        else
            PyErr_WriteUnraisable(fn);
        return false;
    }
    PyObject *r = PyObject_CallNoArgs(release);
    Py_DECREF(release);
    if (r == NULL) {
        PyErr_WriteUnraisable(fn);
        return false;
    }
    int freed = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (freed < 0) {
        PyErr_WriteUnraisable(fn);
        return false;
    }
    return freed;
}

/* The backward to run for this call's gradients, with the arguments it takes (new
 * references in *fn, *saved_idx, *tangent_idx; tangent_idx NULL: every gradient). */
static int
pick_backward(AOTBackward *self, PyObject *const *grads, Py_ssize_t ngrads, PyObject **fn,
              PyObject **saved_idx, PyObject **tangent_idx)
{
    *fn = *saved_idx = *tangent_idx = NULL;
    Py_ssize_t missing = 0;
    for (Py_ssize_t i = 0; i < ngrads; i++)
        missing += grads[i] == Py_None;
    if (missing == 0 || self->variants == Py_None) {
        if (missing > 0) {
            PyErr_SetString(PyExc_RuntimeError, "compiled backward: a gradient is missing and "
                                                "no backward was traced without it");
            return -1;
        }
        Py_INCREF(self->backward);
        *fn = self->backward;
        return 0;
    }
    PyObject *present = PyTuple_New(ngrads);
    if (present == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < ngrads; i++)
        PyTuple_SET_ITEM(present, i, PyBool_FromLong(grads[i] != Py_None));
    PyObject *v = PyObject_CallOneArg(self->variants, present);
    Py_DECREF(present);
    if (v == NULL)
        return -1;
    if (!PyTuple_Check(v) || PyTuple_GET_SIZE(v) != 3 ||
        !PyTuple_Check(PyTuple_GET_ITEM(v, 1)) || !PyTuple_Check(PyTuple_GET_ITEM(v, 2))) {
        PyErr_SetString(PyExc_RuntimeError, "compiled backward: a variant is (backward, "
                                            "saved indices, tangent indices)");
        Py_DECREF(v);
        return -1;
    }
    *fn = PyTuple_GET_ITEM(v, 0);
    *saved_idx = PyTuple_GET_ITEM(v, 1);
    *tangent_idx = PyTuple_GET_ITEM(v, 2);
    Py_INCREF(*fn);
    Py_INCREF(*saved_idx);
    Py_INCREF(*tangent_idx);
    Py_DECREF(v);
    return 0;
}

static PyObject *
double_backward_error(PyObject *self, PyObject *args)
{
    PyErr_SetString(PyExc_RuntimeError,
                    "ember.compile does not currently support double backward (a backward "
                    "through the gradients of a compiled function, as with create_graph=True)");
    return NULL;
}

static PyMethodDef double_backward_def = {"double_backward_error", double_backward_error,
                                          METH_VARARGS, NULL};

/* create_graph: the compiled backward is not differentiable (its graph reads saved
 * values as constants), so its gradients hang from a node that raises when run, as
 * PyTorch's compiled functions do, instead of silently giving wrong second-order
 * gradients. res is a new tuple of ours; its gradients are replaced by aliases (a
 * result may be one of the incoming gradients, which must stay as they are). */
static int
refuse_double_backward(PyObject *res)
{
    Py_ssize_t n = PyTuple_GET_SIZE(res), k = 0;
    PyObject *outs = PyTuple_New(n), *fn = NULL, *none = NULL, *name = NULL, *node = NULL;
    if (outs == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *g = PyTuple_GET_ITEM(res, i);
        if (!em_Tensor_Check(g) || !em_is_inexact(((em_Tensor *)g)->dtype))
            continue;
        PyObject *a = (PyObject *)em_tensor_alias((em_Tensor *)g);
        if (a == NULL)
            goto error;
        Py_INCREF(a);
        PyTuple_SET_ITEM(outs, k++, a);
        Py_SETREF(PyTuple_GET_ITEM(res, i), a);
    }
    if (k == 0) {
        Py_DECREF(outs);
        return 0;
    }
    if (_PyTuple_Resize(&outs, k) < 0)
        return -1;
    fn = PyCFunction_New(&double_backward_def, NULL);
    none = PyTuple_New(0);
    name = PyUnicode_FromString("CompiledFunctionBackwardBackward");
    if (fn == NULL || none == NULL || name == NULL)
        goto error;
    node = em_make_node(fn, none, outs, name);
    if (node == NULL)
        goto error;
    Py_DECREF(node);
    Py_DECREF(fn);
    Py_DECREF(none);
    Py_DECREF(name);
    Py_DECREF(outs);
    return 0;
error:
    Py_XDECREF(fn);
    Py_XDECREF(none);
    Py_XDECREF(name);
    Py_XDECREF(outs);
    return -1;
}

/* The i-th index of idx, checked against n. */
static Py_ssize_t
index_at(PyObject *idx, Py_ssize_t i, Py_ssize_t n)
{
    Py_ssize_t j = PyLong_AsSsize_t(PyTuple_GET_ITEM(idx, i));
    if (j == -1 && PyErr_Occurred())
        return -1;
    if (j < 0 || j >= n) {
        PyErr_Format(PyExc_RuntimeError, "compiled backward: index %zd out of range", j);
        return -1;
    }
    return j;
}

/* A saved value (an input or an output of the call, or an intermediate) written in
 * place since the call returned: eager's error, as its saved variables raise it (the
 * backward would read the new values). */
static int
check_saved_version(AOTBackward *self, Py_ssize_t j, PyObject *v)
{
    if (self->versions == NULL || j >= self->nversions ||
            self->versions[j] == NO_VERSION || !em_Tensor_Check(v))
        return 0;
    em_Tensor *t = (em_Tensor *)v;
    if (t->storage->version == self->versions[j])
        return 0;
    PyErr_Format(PyExc_RuntimeError, "one of the variables needed for gradient computation "
                 "has been modified by an inplace operation: [ember.%s %s], which is saved "
                 "value %zd of CompiledFunctionBackward, is at version %llu; expected "
                 "version %llu instead.", em_dtypes[t->dtype]->name, em_tshape(t), j,
                 (unsigned long long)t->storage->version,
                 (unsigned long long)self->versions[j]);
    return -1;
}

/* Records the versions of the saved tensors as the call returns them. */
static int
record_saved_versions(AOTBackward *bw)
{
    Py_ssize_t n = PyTuple_GET_SIZE(bw->saved);
    if (n == 0)
        return 0;
    bw->versions = PyMem_Malloc(sizeof(uint64_t) * n);
    if (bw->versions == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    bw->nversions = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(bw->saved, i);
        bw->versions[i] = em_Tensor_Check(v) ? ((em_Tensor *)v)->storage->version
                                             : NO_VERSION;
    }
    return 0;
}

static PyObject *
backward_vectorcall(AOTBackward *self, PyObject *const *grads, size_t nargsf, PyObject *kw)
{
    Py_ssize_t ngrads = PyVectorcall_NARGS(nargsf);
    PyObject *fn = NULL, *saved_idx = NULL, *tangent_idx = NULL, *res = NULL, *out = NULL;
    PyObject *saved = NULL, **args = NULL;
    if (ngrads != PyTuple_GET_SIZE(self->tangent_meta)) {
        PyErr_Format(PyExc_RuntimeError, "compiled backward expects %zd gradients, got %zd",
                     PyTuple_GET_SIZE(self->tangent_meta), ngrads);
        return NULL;
    }
    if (self->saved == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Trying to backward through the graph a second time (or directly "
                        "access saved tensors after they have already been freed) in "
                        "CompiledFunctionBackward. Saved intermediate values of the graph are "
                        "freed when you call .backward() or autograd.grad(). Specify "
                        "retain_graph=True if you need to backward through the graph a second "
                        "time or if you need to access saved tensors after calling backward.");
        return NULL;
    }
    out = PyTuple_New(self->ninputs);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < self->ninputs; i++) {
        Py_INCREF(Py_None);
        PyTuple_SET_ITEM(out, i, Py_None);
    }
    bool any = false;
    for (Py_ssize_t i = 0; i < ngrads; i++)
        any |= grads[i] != Py_None;
    if (!any)
        return out;     /* nothing to propagate: every input gets None */
    if (pick_backward(self, grads, ngrads, &fn, &saved_idx, &tangent_idx) < 0)
        goto error;
    Py_ssize_t nsaved = PyTuple_GET_SIZE(self->saved);
    Py_ssize_t ns = saved_idx ? PyTuple_GET_SIZE(saved_idx) : nsaved;
    Py_ssize_t nt = tangent_idx ? PyTuple_GET_SIZE(tangent_idx) : ngrads;
    args = PyMem_Malloc(sizeof(PyObject *) * (ns + nt + 1));
    if (args == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    /* borrowed: saved (held here) and grads (held by the caller) outlive the call */
    saved = self->saved;
    Py_INCREF(saved);
    for (Py_ssize_t i = 0; i < ns; i++) {
        Py_ssize_t j = saved_idx ? index_at(saved_idx, i, nsaved) : i;
        if (j < 0)
            goto error;
        args[i] = PyTuple_GET_ITEM(saved, j);
        if (check_saved_version(self, j, args[i]) < 0)
            goto error;
    }
    for (Py_ssize_t i = 0; i < nt; i++) {
        Py_ssize_t k = tangent_idx ? index_at(tangent_idx, i, ngrads) : i;
        if (k < 0)
            goto error;
        if (grads[k] == Py_None) {
            PyErr_SetString(PyExc_RuntimeError, "compiled backward: a variant reads a "
                                                "missing gradient");
            goto error;
        }
        args[ns + i] = grads[k];
    }
    int create_graph = em_tls.grad_enabled;
    em_tls.grad_enabled = 0;
    res = PyObject_Vectorcall(fn, args, ns + nt, NULL);
    em_tls.grad_enabled = create_graph;
    if (res == NULL)
        goto error;
    if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != PyTuple_GET_SIZE(self->needs_grad)) {
        PyErr_SetString(PyExc_RuntimeError, "compiled backward returned the wrong gradients");
        goto error;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(self->needs_grad); k++) {
        Py_ssize_t i = index_at(self->needs_grad, k, self->ninputs);
        if (i < 0)
            goto error;
        PyObject *g = PyTuple_GET_ITEM(res, k);
        Py_INCREF(g);
        Py_SETREF(PyTuple_GET_ITEM(out, i), g);
    }
    if (create_graph && refuse_double_backward(out) < 0)
        goto error;
    PyMem_Free(args);
    Py_DECREF(saved);
    Py_DECREF(res);
    Py_DECREF(fn);
    Py_XDECREF(saved_idx);
    Py_XDECREF(tangent_idx);
    return out;
error:
    PyMem_Free(args);
    Py_XDECREF(saved);
    Py_XDECREF(res);
    Py_XDECREF(fn);
    Py_XDECREF(saved_idx);
    Py_XDECREF(tangent_idx);
    Py_DECREF(out);
    return NULL;
}

static void
backward_dealloc(AOTBackward *self)
{
    Py_XDECREF(self->backward);
    Py_XDECREF(self->variants);
    Py_XDECREF(self->saved);
    Py_XDECREF(self->needs_grad);
    Py_XDECREF(self->tangent_meta);
    PyMem_Free(self->versions);
    PyObject_Free(self);
}

static PyTypeObject AOTBackward_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember._C.AOTBackward",
    .tp_basicsize = sizeof(AOTBackward),
    .tp_dealloc = (destructor)backward_dealloc,
    .tp_vectorcall_offset = offsetof(AOTBackward, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "The backward of one call of a compiled function (holds its saved tensors).",
};

/* ------------------------------------------------------------------ forward */

static bool
seen_before(PyObject *o, PyObject *const *inputs, Py_ssize_t ninputs, PyObject *outs,
            Py_ssize_t upto)
{
    for (Py_ssize_t i = 0; i < ninputs; i++)
        if (inputs[i] == o)
            return true;
    for (Py_ssize_t i = 0; i < upto; i++)
        if (PyTuple_GET_ITEM(outs, i) == o)
            return true;
    return false;
}

/* ------------------------------------------------------------------ input mutation */

typedef struct {
    uintptr_t lo, hi;         /* the bytes a tensor's elements span */
    int written;
} Extent;

static int
extent_cmp(const void *a, const void *b)
{
    uintptr_t x = ((const Extent *)a)->lo, y = ((const Extent *)b)->lo;
    return x < y ? -1 : x > y;
}

/* Whether an input written into shares memory with another input (conservatively:
 * their byte ranges meet). Sorted by start, a range meets an earlier one exactly when
 * it starts before the furthest end so far. 1, 0, or -1 with an error. */
static int
written_inputs_overlap(AOTFunction *self, PyObject *const *inputs, Py_ssize_t ninputs)
{
    Extent *ext = PyMem_Malloc(sizeof(Extent) * (ninputs ? ninputs : 1));
    if (ext == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < ninputs; i++) {
        if (!em_Tensor_Check(inputs[i]))
            continue;
        em_Tensor *t = (em_Tensor *)inputs[i];
        if (em_is_meta(t) || t->numel == 0)
            continue;
        Py_ssize_t size = em_dtypes[t->dtype]->itemsize;
        intptr_t lo = 0, hi = size;
        for (int d = 0; d < t->ndim; d++) {
            intptr_t span = (intptr_t)(t->sizes[d] - 1) * t->strides[d] * size;
            if (span > 0)
                hi += span;
            else
                lo += span;
        }
        uintptr_t data = (uintptr_t)PyArray_DATA(t->array);
        ext[n].lo = data + lo;
        ext[n].hi = data + hi;
        ext[n].written = 0;
        for (Py_ssize_t k = 0; k < self->nmut; k++)
            ext[n].written |= self->mut[k].index == i;
        n++;
    }
    qsort(ext, n, sizeof(Extent), extent_cmp);
    uintptr_t end = 0, written_end = 0;
    int overlap = 0;
    for (Py_ssize_t i = 0; i < n && !overlap; i++) {
        overlap = ext[i].lo < written_end || (ext[i].written && ext[i].lo < end);
        if (ext[i].hi > end)
            end = ext[i].hi;
        if (ext[i].written && ext[i].hi > written_end)
            written_end = ext[i].hi;
    }
    PyMem_Free(ext);
    return overlap;
}

/* Eager's refusals of an in-place write autograd would follow. */
static int
check_writable(AOTFunction *self, PyObject *const *inputs, int grad)
{
    for (Py_ssize_t k = 0; k < self->nmut && grad; k++) {
        if (!self->mut[k].differentiable)
            continue;
        em_Tensor *t = (em_Tensor *)inputs[self->mut[k].index];
        em_Tensor *base = (em_Tensor *)t->base;
        if (base != NULL && t->view_kind != EM_VIEW_NONE && base->requires_grad &&
            base->grad_fn == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "a view of a leaf Variable that requires "
                                                "grad is being used in an in-place operation.");
            return -1;
        }
        if (t->requires_grad && t->grad_fn == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "a leaf Variable that requires grad is being "
                                                "used in an in-place operation.");
            return -1;
        }
    }
    return 0;
}

/* The checks before a call that writes into inputs: 1 when the call must run the
 * fallback instead, 0 to go on, -1 with an error. */
static int
check_inputs(AOTFunction *self, PyObject *const *inputs, Py_ssize_t ninputs, int grad)
{
    for (Py_ssize_t k = 0; k < self->nmut; k++) {
        Py_ssize_t i = self->mut[k].index;
        if (i >= ninputs || !em_Tensor_Check(inputs[i])) {
            PyErr_Format(PyExc_TypeError, "compiled function: input %zd, which the graph "
                                          "writes into, is not a tensor", i);
            return -1;
        }
    }
    if (check_writable(self, inputs, grad) < 0)
        return -1;
    return written_inputs_overlap(self, inputs, ninputs);
}

/* The input's new value into the input, as eager's in-place ops leave it. */
static int
write_back(em_Tensor *dst, PyObject *value, const Mutation *m, int grad)
{
    if (!em_Tensor_Check(value)) {
        PyErr_Format(PyExc_RuntimeError, "compiled function: the new value of input %zd "
                                         "is a %s, not a tensor", m->index,
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    em_Tensor *v = (em_Tensor *)value;
    if (v->ndim != dst->ndim || memcmp(v->sizes, dst->sizes, sizeof(Py_ssize_t) * dst->ndim)) {
        PyErr_Format(PyExc_RuntimeError, "compiled function: the new value of input %zd "
                                         "does not have its shape", m->index);
        return -1;
    }
    if (m->differentiable && grad) {
        PyObject *args[2] = {(PyObject *)dst, value};
        PyObject *r = em_call_op(EM_OP_COPY_, args, 2, NULL);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
        dst->storage->version += (uint64_t)(m->writes - 1);
        return 0;
    }
    if (value == (PyObject *)dst) {
        /* written in place by the graph (python/ember/aot/inplace_writes.py): its
         * copy_ moved the version counter already */
        dst->storage->version += (uint64_t)(m->writes - m->in_graph);
        return 0;
    }
    if (em_copy_into(dst, value) < 0)
        return -1;
    dst->storage->version += (uint64_t)m->writes;
    return 0;
}

/* The outputs returned: the graph's (before the new values of inputs), with the views
 * of inputs written into made again at their positions. Steals outs. */
static PyObject *
with_aliases(AOTFunction *self, PyObject *outs, PyObject *const *inputs, Py_ssize_t ninputs)
{
    Py_ssize_t ngraph = self->noutputs - self->nmut, n = ngraph + self->nalias;
    if (self->nalias == 0 && PyTuple_GET_SIZE(outs) == n)
        return outs;
    PyObject *res = PyTuple_New(n);
    if (res == NULL)
        goto error;
    Py_ssize_t next = 0, a = 0;
    for (Py_ssize_t pos = 0; pos < n; pos++) {
        PyObject *o;
        if (a < self->nalias && self->alias[a].position == pos) {
            if (self->alias[a].index >= ninputs) {
                PyErr_Format(PyExc_RuntimeError, "compiled function: output %zd is a view "
                                                 "of input %zd, of %zd", pos,
                             self->alias[a].index, ninputs);
                goto error;
            }
            if (self->alias[a].sizes) {
                PyObject *small[17], **args = small;
                if (ninputs + 1 > 17 &&
                    (args = PyMem_Malloc(sizeof(PyObject *) * (ninputs + 1))) == NULL) {
                    PyErr_NoMemory();
                    goto error;
                }
                args[0] = inputs[self->alias[a].index];
                memcpy(args + 1, inputs, sizeof(PyObject *) * ninputs);
                o = PyObject_Vectorcall(self->alias[a].view, args, ninputs + 1, NULL);
                if (args != small)
                    PyMem_Free(args);
            }
            else
                o = PyObject_CallOneArg(self->alias[a].view, inputs[self->alias[a].index]);
            a++;
            if (o == NULL)
                goto error;
        }
        else if (next < ngraph) {
            o = PyTuple_GET_ITEM(outs, next++);
            Py_INCREF(o);
        }
        else {
            PyErr_SetString(PyExc_RuntimeError, "compiled function: output positions do "
                                                "not add up");
            goto error;
        }
        PyTuple_SET_ITEM(res, pos, o);
    }
    if (a != self->nalias || next != ngraph) {
        PyErr_SetString(PyExc_RuntimeError, "compiled function: output positions do not "
                                            "add up");
        goto error;
    }
    Py_DECREF(outs);
    return res;
error:
    Py_XDECREF(res);
    Py_DECREF(outs);
    return NULL;
}

static PyObject *
run_fallback(AOTFunction *self, PyObject *const *inputs, Py_ssize_t ninputs)
{
    if (self->fallback == Py_None) {
        PyErr_SetString(PyExc_RuntimeError, "compiled function: an input the graph writes "
                                            "into shares memory with another input");
        return NULL;
    }
    PyObject *res = PyObject_Vectorcall(self->fallback, inputs, ninputs, NULL);
    if (res != NULL && !PyTuple_Check(res)) {
        PyErr_SetString(PyExc_RuntimeError, "compiled function: the fallback must return a "
                                            "tuple");
        Py_CLEAR(res);
    }
    return res;
}

/* ------------------------------------------------------------------ calls */

static PyObject *
function_vectorcall(AOTFunction *self, PyObject *const *inputs, size_t nargsf, PyObject *kw)
{
    Py_ssize_t ninputs = PyVectorcall_NARGS(nargsf);
    int grad = em_tls.grad_enabled;
    if (self->nmut > 0) {
        int r = check_inputs(self, inputs, ninputs, grad);
        if (r < 0)
            return NULL;
        if (r > 0)
            return run_fallback(self, inputs, ninputs);
    }
    PyObject *res = NULL, *outs = NULL, *saved = NULL, *node = NULL;
    AOTBackward *bw = NULL;
    if (!self->forward_grad)
        em_tls.grad_enabled = 0;
    /* a compiled graph makes the outputs and the saved values as two tuples */
    int direct = em_compiled_graph_call_split(self->forward, inputs, ninputs, self->noutputs,
                                              &outs, &saved);
    if (direct == 1)
        res = PyObject_Vectorcall(self->forward, inputs, ninputs, NULL);
    em_tls.grad_enabled = grad;
    if (direct < 0)
        return NULL;
    if (direct == 1) {
        if (res == NULL)
            return NULL;
        if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) < self->noutputs) {
            PyErr_SetString(PyExc_RuntimeError, "compiled forward returned too few values");
            goto done;
        }
        outs = PyTuple_GetSlice(res, 0, self->noutputs);
        saved = PyTuple_GetSlice(res, self->noutputs, PyTuple_GET_SIZE(res));
        if (outs == NULL || saved == NULL)
            goto done;
    }
    /* an output that is an input, or repeats another output, gets its own alias so
     * that hanging the node from it leaves the other one alone (not the new values of
     * inputs written into: no output, and the input itself when written in place) */
    for (Py_ssize_t i = 0; i < self->noutputs - self->nmut && !self->forward_grad; i++) {
        PyObject *o = PyTuple_GET_ITEM(outs, i);
        if (em_Tensor_Check(o) && seen_before(o, inputs, ninputs, outs, i)) {
            PyObject *a = (PyObject *)em_tensor_alias((em_Tensor *)o);
            if (a == NULL)
                goto done;
            Py_SETREF(PyTuple_GET_ITEM(outs, i), a);
        }
    }
    /* the differentiable outputs (borrowed from outs) and the inputs go to the node as
     * arrays: no tuple made per call */
    Py_ssize_t nd = PyTuple_GET_SIZE(self->diff_outputs);
    PyObject *dsmall[16], **dout = dsmall;
    if (nd > 0 && grad) {
        if (nd > 16 && (dout = PyMem_Malloc(sizeof(PyObject *) * nd)) == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t k = 0; k < nd; k++)
            dout[k] = PyTuple_GET_ITEM(outs, PyLong_AsSsize_t(
                PyTuple_GET_ITEM(self->diff_outputs, k)));
        bw = PyObject_New(AOTBackward, &AOTBackward_Type);
        if (bw == NULL) {
            if (dout != dsmall)
                PyMem_Free(dout);
            goto done;
        }
        bw->vectorcall = (vectorcallfunc)backward_vectorcall;
        bw->versions = NULL;
        bw->nversions = 0;
        Py_INCREF(self->backward);
        bw->backward = self->backward;
        Py_INCREF(self->variants);
        bw->variants = self->variants;
        Py_INCREF(saved);
        bw->saved = saved;
        Py_INCREF(self->needs_grad);
        bw->needs_grad = self->needs_grad;
        Py_INCREF(self->tangent_meta);
        bw->tangent_meta = self->tangent_meta;
        bw->ninputs = ninputs;
        node = em_make_node_v((PyObject *)bw, inputs, ninputs, dout, nd, self->name);
        if (dout != dsmall)
            PyMem_Free(dout);
        if (node == NULL)
            goto done;
    }
    Py_ssize_t first = self->noutputs - self->nmut;
    for (Py_ssize_t k = 0; k < self->nmut; k++) {
        em_Tensor *dst = (em_Tensor *)inputs[self->mut[k].index];
        if (write_back(dst, PyTuple_GET_ITEM(outs, first + k), &self->mut[k], grad) < 0)
            goto done;
    }
    /* (after the write-backs: the graph's own writes are not the user's) */
    if (bw != NULL && record_saved_versions(bw) < 0)
        goto done;
    if (self->nmut > 0 || self->nalias > 0) {
        PyObject *user = PyTuple_GetSlice(outs, 0, first);
        Py_SETREF(outs, user);
        if (outs == NULL || (outs = with_aliases(self, outs, inputs, ninputs)) == NULL)
            goto done;
    }
    self->calls++;
    Py_XDECREF(res);
    Py_XDECREF(saved);
    Py_XDECREF(node);
    Py_XDECREF(bw);
    return outs;
done:
    Py_XDECREF(res);
    Py_XDECREF(outs);
    Py_XDECREF(saved);
    Py_XDECREF(node);
    Py_XDECREF(bw);
    return NULL;
}

static int
parse_mutations(AOTFunction *self, PyObject *spec)
{
    Py_ssize_t n = PyTuple_GET_SIZE(spec);
    self->mut = PyMem_Calloc(n ? n : 1, sizeof(Mutation));
    if (self->mut == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        Mutation *m = &self->mut[k];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(spec, k), "nnp|n:AOTFunction mutation",
                              &m->index, &m->writes, &m->differentiable, &m->in_graph))
            return -1;
        if (m->index < 0 || m->writes < 1 || m->in_graph < 0 || m->in_graph > m->writes) {
            PyErr_SetString(PyExc_ValueError, "AOTFunction: a mutation is (input index >= 0, "
                                              "writes >= 1, differentiable[, 0 <= writes "
                                              "done in the graph <= writes])");
            return -1;
        }
        self->nmut++;
    }
    if (self->nmut > self->noutputs) {
        PyErr_SetString(PyExc_ValueError, "AOTFunction: more mutations than outputs");
        return -1;
    }
    return 0;
}

static int
parse_aliases(AOTFunction *self, PyObject *spec)
{
    Py_ssize_t n = PyTuple_GET_SIZE(spec);
    self->alias = PyMem_Calloc(n ? n : 1, sizeof(OutputAlias));
    if (self->alias == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        OutputAlias *a = &self->alias[k];
        PyObject *view;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(spec, k), "nnO|p:AOTFunction alias",
                              &a->position, &a->index, &view, &a->sizes))
            return -1;
        if (a->position < 0 || a->index < 0 || !PyCallable_Check(view) ||
            (k > 0 && a->position <= self->alias[k - 1].position)) {
            PyErr_SetString(PyExc_ValueError, "AOTFunction: an alias is (position, input "
                                              "index, view callable), by position");
            return -1;
        }
        Py_INCREF(view);
        a->view = view;
        self->nalias++;
    }
    return 0;
}

/* AOTFunction(forward, backward, num_outputs, diff_outputs, needs_grad, tangent_meta, name,
 *             variants=None, *, mutations=(), aliases=(), fallback=None,
 *             forward_grad=False) */
static PyObject *
function_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"forward", "backward", "num_outputs", "diff_outputs",
                             "needs_grad", "tangent_meta", "name", "variants", "mutations",
                             "aliases", "fallback", "forward_grad", NULL};
    PyObject *fw, *bw, *diff, *needs, *meta, *name, *variants = Py_None;
    PyObject *mutations = NULL, *aliases = NULL, *fallback = Py_None;
    int forward_grad = 0;
    Py_ssize_t nout;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOnO!O!O!U|O$O!O!Op:AOTFunction", kwlist,
                                     &fw, &bw, &nout, &PyTuple_Type, &diff, &PyTuple_Type,
                                     &needs, &PyTuple_Type, &meta, &name, &variants,
                                     &PyTuple_Type, &mutations, &PyTuple_Type, &aliases,
                                     &fallback, &forward_grad))
        return NULL;
    if (variants != Py_None && !PyCallable_Check(variants)) {
        PyErr_SetString(PyExc_TypeError, "AOTFunction: variants must be callable or None");
        return NULL;
    }
    if (fallback != Py_None && !PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "AOTFunction: fallback must be callable or None");
        return NULL;
    }
    if (PyTuple_GET_SIZE(meta) != PyTuple_GET_SIZE(diff)) {
        PyErr_SetString(PyExc_ValueError, "AOTFunction: one tangent meta per differentiable "
                                          "output");
        return NULL;
    }
    if (bw == Py_None && PyTuple_GET_SIZE(diff) > 0) {
        PyErr_SetString(PyExc_ValueError, "AOTFunction: differentiable outputs need a "
                                          "backward");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(diff); k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(diff, k));
        if (i < 0 || i >= nout) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "AOTFunction: a differentiable output "
                                                  "index is out of range");
            return NULL;
        }
    }
    AOTFunction *self = PyObject_New(AOTFunction, type);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)function_vectorcall;
    Py_INCREF(fw);
    self->forward = fw;
    Py_INCREF(bw);
    self->backward = bw;
    Py_INCREF(variants);
    self->variants = variants;
    self->noutputs = nout;
    Py_INCREF(diff);
    self->diff_outputs = diff;
    Py_INCREF(needs);
    self->needs_grad = needs;
    Py_INCREF(meta);
    self->tangent_meta = meta;
    Py_INCREF(name);
    self->name = name;
    self->calls = 0;
    self->mut = NULL;
    self->nmut = 0;
    self->alias = NULL;
    self->nalias = 0;
    Py_INCREF(fallback);
    self->fallback = fallback;
    self->forward_grad = forward_grad;
    if ((mutations != NULL && parse_mutations(self, mutations) < 0) ||
        (aliases != NULL && parse_aliases(self, aliases) < 0)) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void
function_dealloc(AOTFunction *self)
{
    for (Py_ssize_t k = 0; k < self->nalias; k++)
        Py_DECREF(self->alias[k].view);
    PyMem_Free(self->alias);
    PyMem_Free(self->mut);
    Py_XDECREF(self->fallback);
    Py_XDECREF(self->forward);
    Py_XDECREF(self->backward);
    Py_XDECREF(self->variants);
    Py_XDECREF(self->diff_outputs);
    Py_XDECREF(self->needs_grad);
    Py_XDECREF(self->tangent_meta);
    Py_XDECREF(self->name);
    PyObject_Free(self);
}

static PyObject *
function_get(AOTFunction *self, void *which)
{
    PyObject *v = which == NULL ? self->forward : self->backward;
    Py_INCREF(v);
    return v;
}

static PyObject *
function_calls(AOTFunction *self, void *c)
{
    return PyLong_FromSsize_t(self->calls);
}

static PyGetSetDef function_getset[] = {
    {"forward", (getter)function_get, NULL, NULL, NULL},
    {"backward", (getter)function_get, NULL, NULL, (void *)1},
    {"calls", (getter)function_calls, NULL, NULL, NULL},
    {NULL},
};

static PyTypeObject AOTFunction_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember._C.AOTFunction",
    .tp_basicsize = sizeof(AOTFunction),
    .tp_dealloc = (destructor)function_dealloc,
    .tp_vectorcall_offset = offsetof(AOTFunction, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A compiled forward whose outputs hang from one node running the compiled "
              "backward.",
    .tp_getset = function_getset,
    .tp_new = function_new,
};

int
em_aot_function_init(PyObject *module)
{
    if (PyType_Ready(&AOTBackward_Type) < 0 || PyType_Ready(&AOTFunction_Type) < 0)
        return -1;
    Py_INCREF(&AOTFunction_Type);
    return PyModule_AddObject(module, "AOTFunction", (PyObject *)&AOTFunction_Type);
}
