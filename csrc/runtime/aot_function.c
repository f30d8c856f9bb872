/* aot_function.c: a compiled forward and backward as one node of eager autograd.
 *
 * AOTFunction(forward, backward, num_outputs, diff_outputs, needs_grad, tangent_meta,
 *             name) is what AOT autograd (python/ember/aot/) returns when inputs
 * require grad. A call runs the forward graph with grad mode off; it returns
 * (outputs..., saved...). The outputs listed in diff_outputs hang from one node of the
 * C engine whose backward is an AOTBackward: it fills missing gradients with zeros,
 * runs backward(*saved, *tangents) and spreads the results over the inputs listed in
 * needs_grad (None for the others). All of it is C; only the graphs may run Python.
 */
#include "ember.h"

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *backward;
    PyObject *saved;          /* tuple */
    PyObject *needs_grad;     /* tuple of input indices */
    PyObject *tangent_meta;   /* tuple of (sizes, dtype) per differentiable output */
    Py_ssize_t ninputs;
} AOTBackward;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *forward, *backward;
    Py_ssize_t noutputs;
    PyObject *diff_outputs, *needs_grad, *tangent_meta, *name;
    Py_ssize_t calls;
} AOTFunction;

static PyTypeObject AOTBackward_Type, AOTFunction_Type;

/* ------------------------------------------------------------------ backward */

static PyObject *
zeros_for(PyObject *meta)
{
    PyObject *sizes = PyTuple_GET_ITEM(meta, 0);
    em_Geom g = {.ndim = (int)PyTuple_GET_SIZE(sizes)};
    g.dtype = em_dtype_from_object(PyTuple_GET_ITEM(meta, 1));
    if (g.dtype == EM_UNDEFINED)
        return NULL;
    for (int i = 0; i < g.ndim; i++)
        g.sizes[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, i));
    if (PyErr_Occurred())
        return NULL;
    em_Tensor *t = em_tensor_empty(&g, false);
    if (t != NULL && t->numel > 0) {
        PyObject *zero = PyLong_FromLong(0);
        if (zero == NULL || PyArray_FillWithScalar(t->array, zero) < 0)
            Py_CLEAR(t);
        Py_XDECREF(zero);
    }
    return (PyObject *)t;
}

static PyObject *
backward_vectorcall(AOTBackward *self, PyObject *const *grads, size_t nargsf, PyObject *kw)
{
    Py_ssize_t ngrads = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nsaved = PyTuple_GET_SIZE(self->saved);
    if (ngrads != PyTuple_GET_SIZE(self->tangent_meta)) {
        PyErr_Format(PyExc_RuntimeError, "compiled backward expects %zd gradients, got %zd",
                     PyTuple_GET_SIZE(self->tangent_meta), ngrads);
        return NULL;
    }
    Py_ssize_t n = nsaved + ngrads;
    PyObject **args = PyMem_Malloc(sizeof(PyObject *) * (n + 1));
    PyObject *res = NULL, *out = NULL;
    Py_ssize_t made = 0;
    if (args == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < nsaved; i++)
        args[i] = PyTuple_GET_ITEM(self->saved, i);
    for (Py_ssize_t i = 0; i < ngrads; i++, made++) {
        if (grads[i] != Py_None) {
            Py_INCREF(grads[i]);
            args[nsaved + i] = grads[i];
        }
        else if ((args[nsaved + i] = zeros_for(PyTuple_GET_ITEM(self->tangent_meta, i))) == NULL)
            goto done;
    }
    res = PyObject_Vectorcall(self->backward, args, n, NULL);
    if (res == NULL)
        goto done;
    if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != PyTuple_GET_SIZE(self->needs_grad)) {
        PyErr_SetString(PyExc_RuntimeError, "compiled backward returned the wrong gradients");
        goto done;
    }
    out = PyTuple_New(self->ninputs);
    if (out == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < self->ninputs; i++) {
        Py_INCREF(Py_None);
        PyTuple_SET_ITEM(out, i, Py_None);
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(self->needs_grad); k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(self->needs_grad, k));
        PyObject *g = PyTuple_GET_ITEM(res, k);
        Py_INCREF(g);
        Py_SETREF(PyTuple_GET_ITEM(out, i), g);
    }
done:
    for (Py_ssize_t i = 0; i < made; i++)
        Py_DECREF(args[nsaved + i]);
    PyMem_Free(args);
    Py_XDECREF(res);
    return out;
}

static void
backward_dealloc(AOTBackward *self)
{
    Py_XDECREF(self->backward);
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

/* AOTFunction(forward, backward, num_outputs, diff_outputs, needs_grad, tangent_meta, name) */
static PyObject *
function_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *fw, *bw, *diff, *needs, *meta, *name;
    Py_ssize_t nout;
    if (!PyArg_ParseTuple(args, "OOnO!O!O!U:AOTFunction", &fw, &bw, &nout, &PyTuple_Type,
                          &diff, &PyTuple_Type, &needs, &PyTuple_Type, &meta, &name))
        return NULL;
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
