/* engine.c: the backward pass.
 *
 * _run_backward(roots, grads, retain_graph, create_graph, inputs, accumulate)
 * walks the graph from the roots' grad_fns in dependency order: a node runs
 * once every node that feeds it a gradient has run. Gradients reaching a leaf
 * accumulate into its .grad (accumulate=True, as Tensor.backward), or are
 * returned for the tensors in `inputs` (accumulate=False, as autograd.grad).
 * Gradients are summed, reduced to the input's shape and cast to its dtype
 * with ember ops, so that under AOT tracing these steps record themselves too.
 */
#include "ember.h"

static PyObject *
add_grads(PyObject *a, PyObject *b)
{
    if (a == NULL || a == Py_None) {
        Py_INCREF(b);
        return b;
    }
    PyObject *args[2] = {a, b};
    return em_call_op(EM_OP_ADD, args, 2, NULL);
}

/* Makes g match the shape and dtype of what the edge's target expects. */
static PyObject *
conform(PyObject *g, int ndim, const Py_ssize_t *sizes, em_dtype_t dtype, PyObject *name,
        int index)
{
    em_Tensor *t = (em_Tensor *)g;
    Py_INCREF(g);
    bool same = t->ndim == ndim && memcmp(t->sizes, sizes, sizeof(Py_ssize_t) * ndim) == 0;
    if (!same) {
        /* a broadcast input: sum the gradient back to its shape */
        bool expandable = ndim <= t->ndim;
        for (int i = 0; expandable && i < ndim; i++) {
            Py_ssize_t s = sizes[ndim - 1 - i], gs = t->sizes[t->ndim - 1 - i];
            expandable = s == gs || s == 1;
        }
        if (!expandable) {
            PyErr_Format(PyExc_RuntimeError,
                         "Function %U returned an invalid gradient at index %d - got %s but "
                         "expected shape compatible with %s", name, index, em_tshape(t),
                         em_shape_s(ndim, sizes));
            Py_DECREF(g);
            return NULL;
        }
        PyObject *shape = em_int_tuple(sizes, ndim);
        PyObject *args[2] = {g, shape};
        PyObject *r = shape ? em_call_op(EM_OP_SUM_TO_SIZE, args, 2, NULL) : NULL;
        Py_XDECREF(shape);
        Py_DECREF(g);
        if (r == NULL)
            return NULL;
        g = r;
    }
    if (em_is_complex(((em_Tensor *)g)->dtype) && !em_is_complex(dtype)) {
        /* a real input of a complex result: its gradient is the real part, as PyTorch's */
        PyObject *r = em_call_op(EM_OP_REAL, &g, 1, NULL);
        Py_DECREF(g);
        if ((g = r) == NULL)
            return NULL;
    }
    if (((em_Tensor *)g)->dtype != dtype) {
        PyObject *args[2] = {g, (PyObject *)em_dtypes[dtype]};
        PyObject *r = em_call_op(EM_OP__TO_COPY, args, 1, em_kw_dtype);
        Py_DECREF(g);
        g = r;
    }
    return g;
}

typedef struct {
    PyObject *deps;       /* node -> int: gradients still to arrive */
    PyObject *buffers;    /* node -> list of grads, one per output */
    PyObject *captures;   /* (fn, input_nr) -> index into results */
    PyObject *results;    /* list of captured gradients */
    PyObject *ready;      /* list used as a stack */
    bool accumulate;
    bool retain;
    bool create;
    PyObject *only;       /* set of leaf ids to accumulate into, or NULL for all */
} run_state;

static PyObject *
capture_key(PyObject *fn, int nr)
{
    return Py_BuildValue("(ni)", (Py_ssize_t)(uintptr_t)fn, nr);
}

static int
discover(run_state *st, PyObject *roots)
{
    PyObject *stack = PyList_New(0), *seen = PySet_New(NULL);
    if (stack == NULL || seen == NULL)
        goto error;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(roots); i++) {
        PyObject *n = PyList_GET_ITEM(roots, i);
        if (PySet_Contains(seen, n) == 0) {
            if (PySet_Add(seen, n) < 0 || PyList_Append(stack, n) < 0)
                goto error;
        }
    }
    while (PyList_GET_SIZE(stack) > 0) {
        Py_ssize_t last = PyList_GET_SIZE(stack) - 1;
        em_Node *node = (em_Node *)PyList_GET_ITEM(stack, last);
        Py_INCREF(node);
        if (PyList_SetSlice(stack, last, last + 1, NULL) < 0) {
            Py_DECREF(node);
            goto error;
        }
        for (int e = 0; e < node->nedges; e++) {
            PyObject *fn = node->edges[e].fn;
            if (fn == NULL || !em_Node_Check(fn))
                continue;
            PyObject *cnt = PyDict_GetItemWithError(st->deps, fn);
            long c = cnt ? PyLong_AsLong(cnt) : 0;
            PyObject *nc = PyLong_FromLong(c + 1);
            if (nc == NULL || PyDict_SetItem(st->deps, fn, nc) < 0) {
                Py_XDECREF(nc);
                Py_DECREF(node);
                goto error;
            }
            Py_DECREF(nc);
            int r = PySet_Contains(seen, fn);
            if (r < 0 || (r == 0 && (PySet_Add(seen, fn) < 0 || PyList_Append(stack, fn) < 0))) {
                Py_DECREF(node);
                goto error;
            }
        }
        Py_DECREF(node);
    }
    Py_DECREF(stack);
    Py_DECREF(seen);
    return 0;
error:
    Py_XDECREF(stack);
    Py_XDECREF(seen);
    return -1;
}

static int
store_capture(run_state *st, PyObject *key, PyObject *g)
{
    if (st->captures == NULL)
        return 0;
    PyObject *idx = PyDict_GetItemWithError(st->captures, key);
    if (idx == NULL)
        return PyErr_Occurred() ? -1 : 0;
    Py_ssize_t i = PyLong_AsSsize_t(idx);
    PyObject *prev = PyList_GET_ITEM(st->results, i);
    PyObject *sum = add_grads(prev, g);
    if (sum == NULL)
        return -1;
    return PyList_SetItem(st->results, i, sum) < 0 ? -1 : 1;
}

/* A dense copy of g for a leaf's .grad: the leaf owns it (optimizers update it in
 * place), so it must not alias another gradient, a user's tensor or a broadcast. */
static PyObject *
owned_copy(em_Tensor *g)
{
    em_Geom geom = {.ndim = g->ndim, .dtype = g->dtype};
    memcpy(geom.sizes, g->sizes, sizeof(Py_ssize_t) * g->ndim);
    em_contiguous_strides(&geom);
    em_Tensor *c = em_tensor_empty(&geom, em_is_meta(g));
    if (c != NULL && !em_is_meta(g) && PyArray_CopyInto(c->array, g->array) < 0)
        Py_CLEAR(c);
    return (PyObject *)c;
}

/* grad += g in place, as PyTorch accumulates outside create_graph; 0 when grad
 * can't take it (a graph, meta, overlapping memory), -1 on error. */
static int
add_in_place(em_Tensor *grad, em_Tensor *g)
{
    if (grad->grad_fn != NULL || em_is_meta(grad) || em_is_meta(g) || grad->dtype != g->dtype ||
        grad->ndim != g->ndim ||
        memcmp(grad->sizes, g->sizes, sizeof(Py_ssize_t) * g->ndim) != 0 ||
        !PyArray_ISWRITEABLE(grad->array))
        return 0;
    for (int d = 0; d < grad->ndim; d++)
        if (grad->strides[d] == 0 && grad->sizes[d] > 1)
            return 0;
    PyObject *ins[2] = {(PyObject *)grad, (PyObject *)g};
    if (em_ufunc_call(em_np.add, ins, 2, grad->array, grad->dtype, grad->dtype) < 0)
        return -1;
    grad->storage->version++;
    return 1;
}

/* A gradient reached a leaf: the leaf's hooks run, then it is captured (autograd.grad)
 * and/or accumulated into .grad (backward). */
static int
accumulate_leaf(run_state *st, em_Tensor *leaf, PyObject *g)
{
    PyObject *key = capture_key((PyObject *)leaf, 0);
    if (key == NULL)
        return -1;
    int captured = 0;
    if (st->captures != NULL) {
        captured = PyDict_Contains(st->captures, key);
        if (captured < 0) {
            Py_DECREF(key);
            return -1;
        }
    }
    int into_grad = st->accumulate && !captured;
    if (into_grad && st->only != NULL) {
        PyObject *id = PyLong_FromVoidPtr(leaf);
        into_grad = id ? PySet_Contains(st->only, id) : -1;
        Py_XDECREF(id);
    }
    if (into_grad < 0 || (!captured && !into_grad)) {
        Py_DECREF(key);
        return into_grad < 0 ? -1 : 0;
    }
    Py_INCREF(g);
    for (Py_ssize_t i = 0; leaf->hooks != NULL && i < PyList_GET_SIZE(leaf->hooks); i++) {
        PyObject *res = PyObject_CallOneArg(PyList_GET_ITEM(leaf->hooks, i), g);
        if (res == NULL)
            goto error;
        if (res != Py_None && !em_Tensor_Check(res)) {
            PyErr_Format(PyExc_TypeError, "a gradient hook returned %s, not a Tensor or None",
                         Py_TYPE(res)->tp_name);
            Py_DECREF(res);
            goto error;
        }
        if (res != Py_None)
            Py_SETREF(g, res);
        else
            Py_DECREF(res);
    }
    if (captured) {
        int r = store_capture(st, key, g);
        Py_DECREF(key);
        Py_DECREF(g);
        return r < 0 ? -1 : 0;
    }
    Py_DECREF(key);
    if (leaf->grad == NULL) {
        if (!st->create)
            Py_SETREF(g, owned_copy((em_Tensor *)g));
        leaf->grad = g;
        return g == NULL ? -1 : 0;
    }
    if (!st->create && em_Tensor_Check(leaf->grad)) {
        int r = add_in_place((em_Tensor *)leaf->grad, (em_Tensor *)g);
        if (r != 0) {
            Py_DECREF(g);
            return r < 0 ? -1 : 0;
        }
    }
    PyObject *sum = add_grads(leaf->grad, g);
    Py_DECREF(g);
    if (sum == NULL)
        return -1;
    Py_SETREF(leaf->grad, sum);
    return 0;
error:
    Py_DECREF(key);
    Py_DECREF(g);
    return -1;
}

static PyObject *
buffer_of(run_state *st, PyObject *fn)
{
    PyObject *buf = PyDict_GetItemWithError(st->buffers, fn);
    if (buf != NULL || PyErr_Occurred())
        return buf;
    int nout = ((em_Node *)fn)->nout;
    buf = PyList_New(nout);
    if (buf == NULL)
        return NULL;
    for (int i = 0; i < nout; i++) {
        Py_INCREF(Py_None);
        PyList_SET_ITEM(buf, i, Py_None);
    }
    int r = PyDict_SetItem(st->buffers, fn, buf);
    Py_DECREF(buf);
    return r < 0 ? NULL : buf;
}

static int
send(run_state *st, PyObject *fn, int nr, PyObject *g)
{
    if (em_Tensor_Check(fn))
        return accumulate_leaf(st, (em_Tensor *)fn, g);
    PyObject *buf = buffer_of(st, fn);
    if (buf == NULL)
        return -1;
    PyObject *sum = add_grads(PyList_GET_ITEM(buf, nr), g);
    if (sum == NULL)
        return -1;
    return PyList_SetItem(buf, nr, sum);
}

static int
arrived(run_state *st, PyObject *fn)
{
    PyObject *cnt = PyDict_GetItemWithError(st->deps, fn);
    if (cnt == NULL)
        return PyErr_Occurred() ? -1 : PyList_Append(st->ready, fn);
    long c = PyLong_AsLong(cnt) - 1;
    PyObject *nc = PyLong_FromLong(c);
    if (nc == NULL || PyDict_SetItem(st->deps, fn, nc) < 0) {
        Py_XDECREF(nc);
        return -1;
    }
    Py_DECREF(nc);
    return c == 0 ? PyList_Append(st->ready, fn) : 0;
}

static bool
all_none(PyObject *grads)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(grads); i++)
        if (PyTuple_GET_ITEM(grads, i) != Py_None)
            return false;
    return true;
}

/* What a node with no gradient to propagate returns: None for every edge (and the
 * error a released node raises, so a second backward still fails loudly). */
static PyObject *
none_grads(em_Node *node)
{
    if (node->released)
        return em_node_released_error(node);
    PyObject *out = PyTuple_New(node->nedges);
    for (int e = 0; out != NULL && e < node->nedges; e++) {
        Py_INCREF(Py_None);
        PyTuple_SET_ITEM(out, e, Py_None);
    }
    return out;
}

/* A node's post-hooks (node.__dict__["_post_hooks"], ember.autograd.graph): each is
 * hook(grad_inputs, grad_outputs) -> None or new grad_inputs, after the node ran, as
 * PyTorch's Node.register_hook. *out (a new reference) may be replaced. */
static int
run_post_hooks(em_Node *node, PyObject **out, PyObject *grads)
{
    static PyObject *key;
    if (node->dict == NULL)
        return 0;
    if (key == NULL && (key = PyUnicode_InternFromString("_post_hooks")) == NULL)
        return -1;
    PyObject *hooks = PyDict_GetItemWithError(node->dict, key);
    if (hooks == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyList_Check(hooks)) {
        PyErr_SetString(PyExc_TypeError, "a node's _post_hooks must be a list");
        return -1;
    }
    Py_INCREF(hooks);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(hooks); i++) {
        PyObject *res = PyObject_CallFunctionObjArgs(PyList_GET_ITEM(hooks, i), *out, grads,
                                                     NULL);
        if (res == NULL)
            goto error;
        if (res == Py_None) {
            Py_DECREF(res);
            continue;
        }
        PyObject *t = PySequence_Tuple(res);
        Py_DECREF(res);
        if (t == NULL)
            goto error;
        if (PyTuple_GET_SIZE(t) != PyTuple_GET_SIZE(*out)) {
            PyErr_Format(PyExc_RuntimeError, "hook of %U returned %zd gradients, expected %zd",
                         node->name, PyTuple_GET_SIZE(t), PyTuple_GET_SIZE(*out));
            Py_DECREF(t);
            goto error;
        }
        Py_SETREF(*out, t);
    }
    Py_DECREF(hooks);
    return 0;
error:
    Py_DECREF(hooks);
    return -1;
}

static int
run_node(run_state *st, em_Node *node)
{
    PyObject *buf = buffer_of(st, (PyObject *)node);
    if (buf == NULL)
        return -1;
    PyObject *grads = PyList_AsTuple(buf);
    if (grads == NULL || PyDict_DelItem(st->buffers, (PyObject *)node) < 0) {
        Py_XDECREF(grads);
        return -1;
    }
    if (node->pre_hooks != NULL) {
        /* tensor hooks on this node's outputs: (output_nr, fn) */
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(node->pre_hooks); i++) {
            PyObject *h = PyList_GET_ITEM(node->pre_hooks, i);
            int nr = (int)PyLong_AsLong(PyTuple_GET_ITEM(h, 0));
            PyObject *g = PyTuple_GET_ITEM(grads, nr);
            if (g == Py_None)
                continue;
            PyObject *res = PyObject_CallOneArg(PyTuple_GET_ITEM(h, 1), g);
            if (res == NULL) {
                Py_DECREF(grads);
                return -1;
            }
            if (res != Py_None) {
                PyObject *ng = PyTuple_New(PyTuple_GET_SIZE(grads));
                for (Py_ssize_t j = 0; ng != NULL && j < PyTuple_GET_SIZE(grads); j++) {
                    PyObject *v = j == nr ? res : PyTuple_GET_ITEM(grads, j);
                    Py_INCREF(v);
                    PyTuple_SET_ITEM(ng, j, v);
                }
                Py_SETREF(grads, ng);
            }
            Py_DECREF(res);
            if (grads == NULL)
                return -1;
        }
    }
    /* captures of non-leaf tensors: the gradient of that output is complete now,
     * and its tensor's hooks have run */
    for (int k = 0; st->captures != NULL && k < node->nout; k++) {
        PyObject *g = PyTuple_GET_ITEM(grads, k);
        if (g == Py_None)
            continue;
        PyObject *key = capture_key((PyObject *)node, k);
        int r = key ? store_capture(st, key, g) : -1;
        Py_XDECREF(key);
        if (r < 0) {
            Py_DECREF(grads);
            return -1;
        }
    }
    /* A node reached only by missing gradients (a formula returned None for its
     * output, or the gradients of its outputs were never asked for) passes None on
     * to every input without running, as PyTorch's nodes do when no gradient is
     * defined; a multi-output node some of whose gradients are missing gets None
     * for those, which its formula handles. */
    bool ran = !all_none(grads);
    PyObject *out = ran ? em_node_apply(node, grads) : none_grads(node);
    if (out == NULL) {
        Py_DECREF(grads);
        return -1;
    }
    if (!st->retain)
        em_node_release(node);
    Py_ssize_t nout = PyTuple_GET_SIZE(out);
    if (nout != node->nedges) {
        PyErr_Format(PyExc_RuntimeError,
                     "function %U returned an incorrect number of gradients (expected %d, got "
                     "%zd)", node->name, node->nedges, nout);
        Py_DECREF(grads);
        Py_DECREF(out);
        return -1;
    }
    int hooked = ran ? run_post_hooks(node, &out, grads) : 0;
    Py_DECREF(grads);
    if (hooked < 0) {
        Py_DECREF(out);
        return -1;
    }
    for (int e = 0; e < node->nedges; e++) {
        PyObject *fn = node->edges[e].fn;
        PyObject *g = PyTuple_GET_ITEM(out, e);
        if (fn == NULL)
            continue;
        if (g != Py_None) {
            if (!em_Tensor_Check(g)) {
                PyErr_Format(PyExc_TypeError, "%U returned a %s as gradient %d, not a Tensor",
                             node->name, Py_TYPE(g)->tp_name, e);
                Py_DECREF(out);
                return -1;
            }
            PyObject *c;
            if (em_Tensor_Check(fn)) {
                em_Tensor *t = (em_Tensor *)fn;
                c = conform(g, t->ndim, t->sizes, t->dtype, node->name, e);
            }
            else {
                em_Node *target = (em_Node *)fn;
                em_OutMeta *m = &target->outmeta[node->edges[e].input_nr];
                c = conform(g, m->ndim, m->sizes, m->dtype, node->name, e);
            }
            if (c == NULL || send(st, fn, node->edges[e].input_nr, c) < 0) {
                Py_XDECREF(c);
                Py_DECREF(out);
                return -1;
            }
            Py_DECREF(c);
        }
        if (em_Node_Check(fn) && arrived(st, fn) < 0) {
            Py_DECREF(out);
            return -1;
        }
    }
    Py_DECREF(out);
    return 0;
}

static PyObject *
ones_like(em_Tensor *t)
{
    em_Geom g = {.ndim = t->ndim, .dtype = t->dtype};
    memcpy(g.sizes, t->sizes, sizeof(Py_ssize_t) * t->ndim);
    em_contiguous_strides(&g);
    em_Tensor *o = em_tensor_empty(&g, em_is_meta(t));
    if (o != NULL && !em_is_meta(t)) {
        PyObject *one = PyLong_FromLong(1);
        if (one == NULL || PyArray_FillWithScalar(o->array, one) < 0)
            Py_CLEAR(o);
        Py_XDECREF(one);
    }
    return (PyObject *)o;
}

static PyObject *
run_backward(PyObject *self, PyObject *args)
{
    PyObject *roots, *grads, *inputs;
    int retain, create, accumulate, allow_unused = 0;
    if (!PyArg_ParseTuple(args, "O!O!ppOp|p:_run_backward", &PyTuple_Type, &roots,
                          &PyTuple_Type, &grads, &retain, &create, &inputs, &accumulate,
                          &allow_unused))
        return NULL;
    Py_ssize_t nroots = PyTuple_GET_SIZE(roots);
    if (PyTuple_GET_SIZE(grads) != nroots) {
        PyErr_Format(PyExc_RuntimeError, "grad can be implicitly created only for scalar "
                                         "outputs; got %zd gradients for %zd tensors",
                     PyTuple_GET_SIZE(grads), nroots);
        return NULL;
    }
    run_state st = {0};
    st.accumulate = accumulate;
    st.retain = retain;
    st.create = create;
    PyObject *result = NULL, *root_nodes = NULL;
    int saved_grad = em_tls.grad_enabled;
    st.deps = PyDict_New();
    st.buffers = PyDict_New();
    st.ready = PyList_New(0);
    root_nodes = PyList_New(0);
    if (!st.deps || !st.buffers || !st.ready || !root_nodes)
        goto done;
    Py_ssize_t ninputs = 0;
    if (inputs != Py_None) {
        if (!PyTuple_Check(inputs)) {
            PyErr_SetString(PyExc_TypeError, "inputs must be a tuple of tensors");
            goto done;
        }
        ninputs = PyTuple_GET_SIZE(inputs);
        st.captures = PyDict_New();
        st.results = PyList_New(ninputs);
        if (accumulate)
            st.only = PySet_New(NULL);
        if (!st.captures || !st.results || (accumulate && !st.only))
            goto done;
        for (Py_ssize_t i = 0; i < ninputs; i++) {
            Py_INCREF(Py_None);
            PyList_SET_ITEM(st.results, i, Py_None);
            PyObject *t = PyTuple_GET_ITEM(inputs, i);
            if (em_Tensor_Check(t) && em_view_sync((em_Tensor *)t) < 0)
                goto done;
            if (!em_Tensor_Check(t) || !((em_Tensor *)t)->requires_grad) {
                PyErr_Format(PyExc_RuntimeError,
                             "One of the differentiated Tensors does not require grad");
                goto done;
            }
            em_Tensor *it = (em_Tensor *)t;
            if (accumulate && it->grad_fn == NULL) {
                PyObject *id = PyLong_FromVoidPtr(it);
                int r = id ? PySet_Add(st.only, id) : -1;
                Py_XDECREF(id);
                if (r < 0)
                    goto done;
                continue;
            }
            PyObject *key = it->grad_fn ? capture_key(it->grad_fn, it->output_nr)
                                        : capture_key(t, 0);
            PyObject *idx = PyLong_FromSsize_t(i);
            int r = (key && idx) ? PyDict_SetItem(st.captures, key, idx) : -1;
            Py_XDECREF(key);
            Py_XDECREF(idx);
            if (r < 0)
                goto done;
        }
    }
    em_tls.grad_enabled = create;
    /* seed the roots */
    for (Py_ssize_t i = 0; i < nroots; i++) {
        PyObject *r = PyTuple_GET_ITEM(roots, i), *g = PyTuple_GET_ITEM(grads, i);
        if (em_Tensor_Check(r) && em_view_sync((em_Tensor *)r) < 0)
            goto done;
        if (!em_Tensor_Check(r) || !((em_Tensor *)r)->requires_grad) {
            PyErr_Format(PyExc_RuntimeError,
                         "element %zd of tensors does not require grad and does not have a "
                         "grad_fn", i);
            goto done;
        }
        em_Tensor *rt = (em_Tensor *)r;
        PyObject *gg;
        if (g == Py_None) {
            if (rt->numel != 1) {
                PyErr_SetString(PyExc_RuntimeError,
                                "grad can be implicitly created only for scalar outputs");
                goto done;
            }
            gg = ones_like(rt);
        }
        else {
            if (!em_Tensor_Check(g)) {
                PyErr_SetString(PyExc_TypeError, "gradients must be Tensors or None");
                goto done;
            }
            em_Tensor *gt = (em_Tensor *)g;
            if (gt->ndim != rt->ndim ||
                memcmp(gt->sizes, rt->sizes, sizeof(Py_ssize_t) * rt->ndim) != 0) {
                PyErr_Format(PyExc_RuntimeError,
                             "Mismatch in shape: grad_output[%zd] has a shape of %s and "
                             "output[%zd] has a shape of %s.", i, em_tshape(gt), i,
                             em_tshape(rt));
                goto done;
            }
            Py_INCREF(g);
            gg = g;
        }
        if (gg == NULL)
            goto done;
        int s;
        if (rt->grad_fn == NULL) {
            s = accumulate_leaf(&st, rt, gg);
        }
        else {
            s = send(&st, rt->grad_fn, rt->output_nr, gg);
            if (s == 0 && PyList_Append(root_nodes, rt->grad_fn) < 0)
                s = -1;
        }
        Py_DECREF(gg);
        if (s < 0)
            goto done;
    }
    if (discover(&st, root_nodes) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(root_nodes); i++) {
        PyObject *n = PyList_GET_ITEM(root_nodes, i);
        PyObject *cnt = PyDict_GetItemWithError(st.deps, n);
        if (cnt == NULL && PyErr_Occurred())
            goto done;
        if (cnt == NULL || PyLong_AsLong(cnt) == 0) {
            if (PySequence_Contains(st.ready, n) == 0 && PyList_Append(st.ready, n) < 0)
                goto done;
        }
    }
    while (PyList_GET_SIZE(st.ready) > 0) {
        Py_ssize_t last = PyList_GET_SIZE(st.ready) - 1;
        PyObject *node = PyList_GET_ITEM(st.ready, last);
        Py_INCREF(node);
        if (PyList_SetSlice(st.ready, last, last + 1, NULL) < 0 ||
            run_node(&st, (em_Node *)node) < 0) {
            Py_DECREF(node);
            goto done;
        }
        Py_DECREF(node);
    }
    if (st.results != NULL && !accumulate) {
        for (Py_ssize_t i = 0; i < ninputs; i++) {
            if (PyList_GET_ITEM(st.results, i) == Py_None && !allow_unused) {
                PyErr_SetString(PyExc_RuntimeError,
                                "One of the differentiated Tensors appears to not have been "
                                "used in the graph. Set allow_unused=True if this is the "
                                "desired behavior.");
                goto done;
            }
        }
        result = PyList_AsTuple(st.results);
    }
    else if (st.results != NULL) {
        /* backward(inputs=...) with non-leaf inputs: their .grad */
        for (Py_ssize_t i = 0; i < ninputs; i++) {
            em_Tensor *t = (em_Tensor *)PyTuple_GET_ITEM(inputs, i);
            PyObject *g = PyList_GET_ITEM(st.results, i);
            if (t->grad_fn == NULL || g == Py_None)
                continue;
            PyObject *sum = add_grads(t->grad, g);
            if (sum == NULL)
                goto done;
            Py_XSETREF(t->grad, sum);
        }
        result = Py_None;
        Py_INCREF(result);
    }
    else {
        result = Py_None;
        Py_INCREF(result);
    }
done:
    em_tls.grad_enabled = saved_grad;
    Py_XDECREF(st.deps);
    Py_XDECREF(st.buffers);
    Py_XDECREF(st.captures);
    Py_XDECREF(st.results);
    Py_XDECREF(st.ready);
    Py_XDECREF(st.only);
    Py_XDECREF(root_nodes);
    return result;
}

static PyMethodDef engine_methods[] = {
    {"_run_backward", run_backward, METH_VARARGS,
     "_run_backward(roots, grads, retain_graph, create_graph, inputs, accumulate, "
     "allow_unused=False)"},
    {NULL},
};

int
em_engine_init(PyObject *module)
{
    return PyModule_AddFunctions(module, engine_methods);
}
