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
 */
#include "ember.h"

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *backward;
    PyObject *variants;       /* callable, or None */
    PyObject *saved;          /* tuple, NULL once released */
    PyObject *needs_grad;     /* tuple of input indices */
    PyObject *tangent_meta;   /* tuple of (sizes, dtype) per differentiable output */
    Py_ssize_t ninputs;
} AOTBackward;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *forward, *backward, *variants;
    Py_ssize_t noutputs;
    PyObject *diff_outputs, *needs_grad, *tangent_meta, *name;
    Py_ssize_t calls;
} AOTFunction;

static PyTypeObject AOTBackward_Type, AOTFunction_Type;

/* ------------------------------------------------------------------ backward */

bool
em_aot_backward_release(PyObject *fn)
{
    if (!PyObject_TypeCheck(fn, &AOTBackward_Type))
        return false;
    Py_CLEAR(((AOTBackward *)fn)->saved);
    return true;
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
        if (!em_Tensor_Check(g) || !em_is_float(((em_Tensor *)g)->dtype))
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

static PyObject *
function_vectorcall(AOTFunction *self, PyObject *const *inputs, size_t nargsf, PyObject *kw)
{
    Py_ssize_t ninputs = PyVectorcall_NARGS(nargsf);
    int grad = em_tls.grad_enabled;
    em_tls.grad_enabled = 0;
    PyObject *res = PyObject_Vectorcall(self->forward, inputs, ninputs, NULL);
    em_tls.grad_enabled = grad;
    PyObject *outs = NULL, *saved = NULL, *diff = NULL, *node = NULL;
    AOTBackward *bw = NULL;
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
    /* an output that is an input, or repeats another output, gets its own alias so
     * that hanging the node from it leaves the other one alone */
    for (Py_ssize_t i = 0; i < self->noutputs; i++) {
        PyObject *o = PyTuple_GET_ITEM(outs, i);
        if (em_Tensor_Check(o) && seen_before(o, inputs, ninputs, outs, i)) {
            PyObject *a = (PyObject *)em_tensor_alias((em_Tensor *)o);
            if (a == NULL)
                goto done;
            Py_SETREF(PyTuple_GET_ITEM(outs, i), a);
        }
    }
    Py_ssize_t nd = PyTuple_GET_SIZE(self->diff_outputs);
    diff = PyTuple_New(nd);
    if (diff == NULL)
        goto done;
    for (Py_ssize_t k = 0; k < nd; k++) {
        PyObject *o = PyTuple_GET_ITEM(outs, PyLong_AsSsize_t(PyTuple_GET_ITEM(self->diff_outputs, k)));
        Py_INCREF(o);
        PyTuple_SET_ITEM(diff, k, o);
    }
    if (nd > 0 && grad) {
        bw = PyObject_New(AOTBackward, &AOTBackward_Type);
        if (bw == NULL)
            goto done;
        bw->vectorcall = (vectorcallfunc)backward_vectorcall;
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
        PyObject *in = PyTuple_New(ninputs);
        if (in == NULL)
            goto done;
        for (Py_ssize_t i = 0; i < ninputs; i++) {
            Py_INCREF(inputs[i]);
            PyTuple_SET_ITEM(in, i, inputs[i]);
        }
        node = em_make_node((PyObject *)bw, in, diff, self->name);
        Py_DECREF(in);
        if (node == NULL)
            goto done;
    }
    self->calls++;
    Py_DECREF(res);
    Py_XDECREF(saved);
    Py_XDECREF(diff);
    Py_XDECREF(node);
    Py_XDECREF(bw);
    return outs;
done:
    Py_XDECREF(res);
    Py_XDECREF(outs);
    Py_XDECREF(saved);
    Py_XDECREF(diff);
    Py_XDECREF(node);
    Py_XDECREF(bw);
    return NULL;
}

/* AOTFunction(forward, backward, num_outputs, diff_outputs, needs_grad, tangent_meta, name,
 *             variants=None) */
static PyObject *
function_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *fw, *bw, *diff, *needs, *meta, *name, *variants = Py_None;
    Py_ssize_t nout;
    if (!PyArg_ParseTuple(args, "OOnO!O!O!U|O:AOTFunction", &fw, &bw, &nout, &PyTuple_Type,
                          &diff, &PyTuple_Type, &needs, &PyTuple_Type, &meta, &name,
                          &variants))
        return NULL;
    if (variants != Py_None && !PyCallable_Check(variants)) {
        PyErr_SetString(PyExc_TypeError, "AOTFunction: variants must be callable or None");
        return NULL;
    }
    if (PyTuple_GET_SIZE(meta) != PyTuple_GET_SIZE(diff)) {
        PyErr_SetString(PyExc_ValueError, "AOTFunction: one tangent meta per differentiable "
                                          "output");
        return NULL;
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
    return (PyObject *)self;
}

static void
function_dealloc(AOTFunction *self)
{
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
