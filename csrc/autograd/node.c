/* node.c: autograd graph nodes.
 *
 * An op node is recorded by the dispatcher after an op runs with an input that
 * requires grad: it keeps the op, its bound arguments (tensors with their
 * version at save time) and detached aliases of its outputs, and one edge per
 * tensor input (flattened over tensor lists). Its backward is the op table's
 * formula, a Python function written with ember ops:
 *
 *     formula(grad, result, *args) -> a gradient per parameter (None where none)
 *
 * where grad and result are a tensor, or tuples for ops with several outputs.
 * A Python node instead calls fn(*grads) -> one gradient per input edge; AOT
 * autograd hangs compiled backward graphs on it.
 */
#include "ember.h"

static uint64_t next_seq;

static em_Node *
node_alloc(void)
{
    em_Node *n = PyObject_GC_New(em_Node, &em_Node_Type);
    if (n == NULL)
        return NULL;
    memset(((char *)n) + sizeof(PyObject), 0, sizeof(em_Node) - sizeof(PyObject));
    n->seq = next_seq++;
    PyObject_GC_Track(n);
    return n;
}

/* The outputs' metadata and their sizes are one allocation (attach_outputs). */
static void
free_meta(em_OutMeta *m, int n)
{
    PyMem_Free(m);
}

static int
node_traverse(em_Node *self, visitproc visit, void *arg)
{
    Py_VISIT(self->op);
    Py_VISIT(self->py_backward);
    Py_VISIT(self->saved);
    Py_VISIT(self->saved_versions);
    Py_VISIT(self->saved_outputs);
    Py_VISIT(self->inner);
    Py_VISIT(self->pre_hooks);
    Py_VISIT(self->dict);
    for (int i = 0; i < self->nedges; i++)
        Py_VISIT(self->edges[i].fn);
    return 0;
}

static int
node_clear(em_Node *self)
{
    Py_CLEAR(self->py_backward);
    Py_CLEAR(self->saved);
    Py_CLEAR(self->saved_versions);
    Py_CLEAR(self->saved_outputs);
    Py_CLEAR(self->inner);
    Py_CLEAR(self->pre_hooks);
    Py_CLEAR(self->dict);
    for (int i = 0; i < self->nedges; i++)
        Py_CLEAR(self->edges[i].fn);
    return 0;
}

static void
node_dealloc(em_Node *self)
{
    PyObject_GC_UnTrack(self);
    Py_TRASHCAN_BEGIN(self, node_dealloc)
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    node_clear(self);
    Py_CLEAR(self->op);
    Py_CLEAR(self->name);
    PyMem_Free(self->edges);
    free_meta(self->outmeta, self->nout);
    PyObject_GC_Del(self);
    Py_TRASHCAN_END
}

/* ------------------------------------------------------------------ building */

static void
fill_meta(em_OutMeta *m, em_Tensor *t, Py_ssize_t *sizes)
{
    m->ndim = t->ndim;
    m->dtype = t->dtype;
    m->meta = em_is_meta(t);
    m->sizes = sizes;
    memcpy(m->sizes, t->sizes, sizeof(Py_ssize_t) * t->ndim);
}

static em_Edge
edge_to(em_Tensor *t)
{
    em_Edge e = {NULL, 0};
    if (!t->requires_grad)
        return e;
    if (t->grad_fn != NULL) {
        e.fn = t->grad_fn;
        e.input_nr = t->output_nr;
    }
    else {
        e.fn = (PyObject *)t;
    }
    Py_INCREF(e.fn);
    return e;
}

/* Output tensors of a result: a tensor, or a tuple (named tuples included). */
static int
outputs_of(PyObject *result, PyObject **outs, int max)
{
    if (em_Tensor_Check(result)) {
        outs[0] = result;
        return 1;
    }
    if (!PyTuple_Check(result))
        return 0;
    int n = (int)PyTuple_GET_SIZE(result);
    if (n > max)
        n = max;
    for (int i = 0; i < n; i++)
        outs[i] = PyTuple_GET_ITEM(result, i);
    return n;
}

static bool
arg_requires_grad(PyObject *a)
{
    if (em_Tensor_Check(a))
        return ((em_Tensor *)a)->requires_grad;
    if (PyTuple_Check(a)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(a); i++) {
            PyObject *e = PyTuple_GET_ITEM(a, i);
            if (em_Tensor_Check(e) && ((em_Tensor *)e)->requires_grad)
                return true;
        }
    }
    return false;
}

/* Hangs node on the differentiable outputs; keeps detached aliases of them when
 * aliases is true (an op's formula may read its results: unpack_output; a node with
 * a Python backward reads none, and keeps none). */
static int
attach_outputs(em_Node *node, PyObject **outs, int nout, bool aliases)
{
    node->nout = nout;
    /* the metadata, then every output's sizes (one at least: no null pointer) */
    size_t dims = 0;
    for (int k = 0; k < nout; k++)
        if (em_Tensor_Check(outs[k]))
            dims += (size_t)((em_Tensor *)outs[k])->ndim + 1;
    node->outmeta = PyMem_Calloc(1, sizeof(em_OutMeta) * (size_t)(nout ? nout : 1) +
                                    sizeof(Py_ssize_t) * dims);
    Py_ssize_t *sizes = node->outmeta == NULL ? NULL :
        (Py_ssize_t *)(node->outmeta + (nout ? nout : 1));
    if (aliases)
        node->saved_outputs = PyTuple_New(nout);
    if (node->outmeta == NULL || (aliases && node->saved_outputs == NULL)) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return -1;
    }
    for (int k = 0; k < nout; k++) {
        if (!em_Tensor_Check(outs[k])) {
            if (aliases) {
                Py_INCREF(Py_None);
                PyTuple_SET_ITEM(node->saved_outputs, k, Py_None);
            }
            continue;
        }
        em_Tensor *o = (em_Tensor *)outs[k];
        fill_meta(&node->outmeta[k], o, sizes);
        sizes += o->ndim + 1;
        node->outmeta[k].version = o->storage->version;
        if (aliases) {
            PyObject *alias = (PyObject *)em_tensor_alias(o);
            if (alias == NULL)
                return -1;
            PyTuple_SET_ITEM(node->saved_outputs, k, alias);
        }
        if (!em_is_inexact(o->dtype))
            continue;
        o->requires_grad = 1;
        Py_INCREF(node);
        Py_XSETREF(o->grad_fn, (PyObject *)node);
        o->output_nr = k;
    }
    return 0;
}

int
em_autograd_record(em_Op *op, PyObject **args, PyObject *result)
{
    bool need = false;
    int nedges = 0;
    if (em_view_sync_args(op, args) < 0)
        return -1;
    for (int i = 0; i < op->nparams; i++) {
        PyObject *a = args[i];
        if (op->params[i].type == EM_ARG_TENSOR && em_Tensor_Check(a)) {
            nedges++;
            need |= ((em_Tensor *)a)->requires_grad;
        }
        else if (op->params[i].type == EM_ARG_TENSORLIST && PyTuple_Check(a)) {
            nedges += (int)PyTuple_GET_SIZE(a);
            need |= arg_requires_grad(a);
        }
    }
    if (!need)
        return 0;
    PyObject *outs[16];
    int nout = outputs_of(result, outs, 16);
    if (nout == 0)
        return 0;
    em_Node *node = node_alloc();
    if (node == NULL)
        return -1;
    Py_INCREF(op);
    node->op = op;
    Py_INCREF(op->backward_name);
    node->name = op->backward_name;
    node->edges = PyMem_Calloc(nedges ? nedges : 1, sizeof(em_Edge));
    node->saved = PyTuple_New(op->nparams);
    node->saved_versions = PyTuple_New(op->nparams);
    if (node->edges == NULL || node->saved == NULL || node->saved_versions == NULL)
        goto error;
    int e = 0;
    for (int i = 0; i < op->nparams; i++) {
        PyObject *a = args[i];
        Py_INCREF(a);
        PyTuple_SET_ITEM(node->saved, i, a);
        PyObject *ver = Py_None;
        Py_INCREF(ver);
        if (op->params[i].type == EM_ARG_TENSOR && em_Tensor_Check(a)) {
            node->edges[e++] = edge_to((em_Tensor *)a);
            /* a view's gradient is a function of shapes only: later writes into the
             * storage it shares with its result do not change it */
            if (op->kind == EM_KIND_VIEW && i == op->alias_param) {
                PyTuple_SET_ITEM(node->saved_versions, i, ver);
                continue;
            }
            Py_DECREF(ver);
            ver = PyLong_FromUnsignedLongLong(((em_Tensor *)a)->storage->version);
            if (ver == NULL) {
                PyTuple_SET_ITEM(node->saved_versions, i, Py_None);
                Py_INCREF(Py_None);
                goto error;
            }
        }
        else if (op->params[i].type == EM_ARG_TENSORLIST && PyTuple_Check(a)) {
            for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(a); k++)
                node->edges[e++] = edge_to((em_Tensor *)PyTuple_GET_ITEM(a, k));
        }
        PyTuple_SET_ITEM(node->saved_versions, i, ver);
    }
    node->nedges = e;
    if (attach_outputs(node, outs, nout, true) < 0)
        goto error;
    Py_DECREF(node);
    return 0;
error:
    if (!PyErr_Occurred())
        PyErr_NoMemory();
    Py_DECREF(node);
    return -1;
}

/* A node whose backward is fn(*grads), returning one gradient per input, attached
 * to the outputs: arrays of ni inputs and no outputs (a compiled function's call makes
 * its node from its vectorcall arguments, no tuple). Returns the node (new reference). */
PyObject *
em_make_node_v(PyObject *fn, PyObject *const *inputs, Py_ssize_t ni, PyObject *const *outputs,
               Py_ssize_t no, PyObject *name)
{
    em_Node *node = node_alloc();
    if (node == NULL)
        return NULL;
    Py_INCREF(fn);
    node->py_backward = fn;
    Py_INCREF(name);
    node->name = name;
    node->edges = PyMem_Calloc(ni ? ni : 1, sizeof(em_Edge));
    if (node->edges == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    node->nedges = (int)ni;
    for (Py_ssize_t i = 0; i < ni; i++) {
        PyObject *t = inputs[i];
        if (em_Tensor_Check(t)) {
            if (em_view_sync((em_Tensor *)t) < 0)
                goto error;
            node->edges[i] = edge_to((em_Tensor *)t);
        }
    }
    if (attach_outputs(node, (PyObject **)outputs, (int)no, false) < 0)
        goto error;
    return (PyObject *)node;
error:
    Py_DECREF(node);
    return NULL;
}

/* The same from tuples of inputs and outputs. */
PyObject *
em_make_node(PyObject *fn, PyObject *inputs, PyObject *outputs, PyObject *name)
{
    return em_make_node_v(fn, &PyTuple_GET_ITEM(inputs, 0), PyTuple_GET_SIZE(inputs),
                          &PyTuple_GET_ITEM(outputs, 0), PyTuple_GET_SIZE(outputs), name);
}

/* _make_node(fn, inputs, outputs, name) */
static PyObject *
make_node(PyObject *self, PyObject *args)
{
    PyObject *fn, *inputs, *outputs, *name;
    if (!PyArg_ParseTuple(args, "OO!O!U:_make_node", &fn, &PyTuple_Type, &inputs,
                          &PyTuple_Type, &outputs, &name))
        return NULL;
    return em_make_node(fn, inputs, outputs, name);
}

/* ------------------------------------------------------------------ running */

/* PyTorch's error for a saved tensor (input or output k of node) written in place since
 * it was saved at version `expect`. */
static int
modified_error(em_Node *node, em_Tensor *t, const char *what, int k, uint64_t expect)
{
    PyErr_Format(PyExc_RuntimeError, "one of the variables needed for gradient computation "
                 "has been modified by an inplace operation: [ember.%s %s], which is %s %d "
                 "of %U, is at version %llu; expected version %llu instead.",
                 em_dtypes[t->dtype]->name, em_tshape(t), what, k, node->name,
                 (unsigned long long)t->storage->version, (unsigned long long)expect);
    return -1;
}

static int
check_version(em_Node *node, int i)
{
    PyObject *ver = PyTuple_GET_ITEM(node->saved_versions, i);
    if (ver == Py_None)
        return 0;
    em_Tensor *t = (em_Tensor *)PyTuple_GET_ITEM(node->saved, i);
    unsigned long long expect = PyLong_AsUnsignedLongLong(ver);
    if (t->storage->version == expect)
        return 0;
    return modified_error(node, t, "input", i, expect);
}

/* The result as the formula sees it: detached, or (when building a graph of
 * the backward) re-attached to this node. */
static PyObject *
unpack_output(em_Node *node, int k, bool check)
{
    PyObject *alias = PyTuple_GET_ITEM(node->saved_outputs, k);
    if (check && em_Tensor_Check(alias) &&
        ((em_Tensor *)alias)->storage->version != node->outmeta[k].version) {
        modified_error(node, (em_Tensor *)alias, "output", k, node->outmeta[k].version);
        return NULL;
    }
    if (!em_Tensor_Check(alias) || !em_tls.grad_enabled ||
        !em_is_inexact(((em_Tensor *)alias)->dtype)) {
        Py_INCREF(alias);
        return alias;
    }
    em_Tensor *t = em_tensor_alias((em_Tensor *)alias);
    if (t == NULL)
        return NULL;
    t->requires_grad = 1;
    Py_INCREF(node);
    t->grad_fn = (PyObject *)node;
    t->output_nr = k;
    return (PyObject *)t;
}

PyObject *
em_node_released_error(em_Node *node)
{
    PyErr_Format(PyExc_RuntimeError,
                 "Trying to backward through the graph a second time (or directly access saved "
                 "tensors after they have already been freed) in %U. Saved intermediate values "
                 "of the graph are freed when you call .backward() or autograd.grad(). Specify "
                 "retain_graph=True if you need to backward through the graph a second time or "
                 "if you need to access saved tensors after calling backward.", node->name);
    return NULL;
}

/* Runs the node's backward on grads (a tuple, one per output; None where no
 * gradient arrived). Returns a tuple with one gradient (or None) per edge. */
PyObject *
em_node_apply(em_Node *node, PyObject *grads)
{
    if (node->released)
        return em_node_released_error(node);
    PyObject *raw;
    if (node->py_backward != NULL) {
        raw = PyObject_Call(node->py_backward, grads, NULL);
        if (raw == NULL)
            return NULL;
        if (em_Tensor_Check(raw) || raw == Py_None) {
            PyObject *t = PyTuple_Pack(1, raw);
            Py_DECREF(raw);
            raw = t;
        }
        else if (!PyTuple_Check(raw)) {
            PyObject *t = PySequence_Tuple(raw);
            Py_DECREF(raw);
            raw = t;
        }
        return raw;
    }
    em_Op *op = node->op;
    /* Only what the formula reads must be unmodified (op->backward_reads). */
    for (int i = 0; i < op->nparams; i++)
        if (((op->backward_reads >> (i + 1)) & 1) && check_version(node, i) < 0)
            return NULL;
    bool check_result = op->backward_reads & 1;
    int n = op->nparams + 2;
    PyObject **call = PyMem_Malloc(sizeof(PyObject *) * n);
    if (call == NULL)
        return PyErr_NoMemory();
    PyObject *result = NULL;
    if (node->nout == 1) {
        Py_INCREF(PyTuple_GET_ITEM(grads, 0));
        call[0] = PyTuple_GET_ITEM(grads, 0);
        result = unpack_output(node, 0, check_result);
    }
    else {
        Py_INCREF(grads);
        call[0] = grads;
        result = PyTuple_New(node->nout);
        for (int k = 0; result != NULL && k < node->nout; k++) {
            PyObject *o = unpack_output(node, k, check_result);
            if (o == NULL)
                Py_CLEAR(result);
            else
                PyTuple_SET_ITEM(result, k, o);
        }
    }
    if (result == NULL) {
        Py_DECREF(call[0]);
        PyMem_Free(call);
        return NULL;
    }
    call[1] = result;
    for (int i = 0; i < op->nparams; i++)
        call[i + 2] = PyTuple_GET_ITEM(node->saved, i);
    raw = PyObject_Vectorcall(op->backward, call, n, NULL);
    Py_DECREF(call[0]);
    Py_DECREF(call[1]);
    PyMem_Free(call);
    if (raw == NULL)
        return NULL;
    if (!PyTuple_Check(raw) && !PyList_Check(raw)) {
        PyObject *t = PyTuple_Pack(1, raw);
        Py_DECREF(raw);
        raw = t;
        if (raw == NULL)
            return NULL;
    }
    /* per parameter -> per edge */
    PyObject *per_edge = PyTuple_New(node->nedges);
    if (per_edge == NULL) {
        Py_DECREF(raw);
        return NULL;
    }
    Py_ssize_t nraw = PySequence_Size(raw);
    int e = 0;
    for (int i = 0; i < op->nparams && e <= node->nedges; i++) {
        PyObject *a = PyTuple_GET_ITEM(node->saved, i);
        bool is_tensor = op->params[i].type == EM_ARG_TENSOR && em_Tensor_Check(a);
        bool is_list = op->params[i].type == EM_ARG_TENSORLIST && PyTuple_Check(a);
        if (!is_tensor && !is_list)
            continue;
        PyObject *g = i < nraw ? PySequence_GetItem(raw, i) : (Py_INCREF(Py_None), Py_None);
        if (g == NULL)
            goto error;
        if (is_tensor) {
            PyTuple_SET_ITEM(per_edge, e++, g);
            continue;
        }
        Py_ssize_t nl = PyTuple_GET_SIZE(a);
        for (Py_ssize_t k = 0; k < nl; k++) {
            PyObject *gk = g == Py_None ? (Py_INCREF(Py_None), Py_None)
                                        : PySequence_GetItem(g, k);
            if (gk == NULL) {
                Py_DECREF(g);
                goto error;
            }
            PyTuple_SET_ITEM(per_edge, e++, gk);
        }
        Py_DECREF(g);
    }
    Py_DECREF(raw);
    return per_edge;
error:
    Py_DECREF(raw);
    Py_DECREF(per_edge);
    return NULL;
}

void
em_node_release(em_Node *node)
{
    if (node->op == NULL) {
        /* CopySlices frees what its in-place op's node saved; compiled backwards free
         * their saved tensors; other Python nodes keep what their closure needs */
        if (node->inner != NULL) {
            em_node_release(node->inner);
            node->released = node->inner->released;
            return;
        }
        if (node->py_backward != NULL && em_aot_backward_release(node->py_backward))
            node->released = true;
        return;
    }
    Py_CLEAR(node->saved);
    Py_CLEAR(node->saved_versions);
    Py_CLEAR(node->saved_outputs);
    node->released = true;
}

/* ------------------------------------------------------------------ the type */

static PyObject *
node_name(em_Node *self, PyObject *noargs)
{
    Py_INCREF(self->name);
    return self->name;
}

static PyObject *
node_repr(em_Node *self)
{
    return PyUnicode_FromFormat("<%U object at %p>", self->name, self);
}

static PyObject *accumulate_grad_factory;   /* Python: AccumulateGrad(variable) */

static PyObject *
node_next_functions(em_Node *self, void *c)
{
    PyObject *t = PyTuple_New(self->nedges);
    if (t == NULL)
        return NULL;
    for (int i = 0; i < self->nedges; i++) {
        PyObject *fn = self->edges[i].fn;
        PyObject *item;
        if (fn == NULL)
            item = Py_BuildValue("(Oi)", Py_None, 0);
        else if (em_Tensor_Check(fn) && accumulate_grad_factory != NULL) {
            PyObject *acc = PyObject_CallOneArg(accumulate_grad_factory, fn);
            item = acc ? Py_BuildValue("(Ni)", acc, 0) : NULL;
        }
        else
            item = Py_BuildValue("(Oi)", fn, self->edges[i].input_nr);
        if (item == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, item);
    }
    return t;
}

static PyObject *
node_saved(em_Node *self, void *c)
{
    if (self->released)
        return em_node_released_error(self);
    PyObject *s = self->saved ? self->saved : Py_None;
    Py_INCREF(s);
    return s;
}

static PyObject *
node_op(em_Node *self, void *c)
{
    PyObject *o = self->op ? (PyObject *)self->op : Py_None;
    Py_INCREF(o);
    return o;
}

static PyObject *
node_pre_hooks(em_Node *self, void *c)
{
    if (self->pre_hooks == NULL && (self->pre_hooks = PyList_New(0)) == NULL)
        return NULL;
    Py_INCREF(self->pre_hooks);
    return self->pre_hooks;
}

static PyObject *
node_seq(em_Node *self, void *c)
{
    return PyLong_FromUnsignedLongLong(self->seq);
}

static PyObject *
node_apply_py(em_Node *self, PyObject *args)
{
    return em_node_apply(self, args);
}

static PyMethodDef node_methods[] = {
    {"name", (PyCFunction)node_name, METH_NOARGS, NULL},
    {"_apply", (PyCFunction)node_apply_py, METH_VARARGS,
     "_apply(*grads): run this node's backward (one gradient per edge)."},
    {NULL},
};

static PyGetSetDef node_getset[] = {
    {"next_functions", (getter)node_next_functions, NULL, NULL, NULL},
    {"_saved_args", (getter)node_saved, NULL, NULL, NULL},
    {"_op", (getter)node_op, NULL, NULL, NULL},
    {"_pre_hooks", (getter)node_pre_hooks, NULL, NULL, NULL},
    {"_sequence_nr", (getter)node_seq, NULL, NULL, NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

PyTypeObject em_Node_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember.autograd.graph.Node",
    .tp_basicsize = sizeof(em_Node),
    .tp_dealloc = (destructor)node_dealloc,
    .tp_repr = (reprfunc)node_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)node_traverse,
    .tp_clear = (inquiry)node_clear,
    .tp_weaklistoffset = offsetof(em_Node, weakreflist),
    .tp_dictoffset = offsetof(em_Node, dict),
    .tp_methods = node_methods,
    .tp_getset = node_getset,
    .tp_doc = "A node of the autograd graph (a tensor's grad_fn).",
};

static PyObject *
set_accumulate_grad(PyObject *self, PyObject *factory)
{
    Py_INCREF(factory);
    Py_XSETREF(accumulate_grad_factory, factory);
    Py_RETURN_NONE;
}

static PyMethodDef node_module_methods[] = {
    {"_make_node", make_node, METH_VARARGS, NULL},
    {"_set_accumulate_grad", set_accumulate_grad, METH_O, NULL},
    {NULL},
};

int
em_node_init_type(PyObject *module)
{
    if (PyType_Ready(&em_Node_Type) < 0)
        return -1;
    Py_INCREF(&em_Node_Type);
    if (PyModule_AddObject(module, "Node", (PyObject *)&em_Node_Type) < 0)
        return -1;
    return PyModule_AddFunctions(module, node_module_methods);
}
