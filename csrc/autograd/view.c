/* view.c: views and in-place updates of them, for autograd (PyTorch's view tracking).
 *
 * A view made by a dispatched op whose schema says its result may alias an input
 * (Tensor(a) self -> Tensor(a)), and whose result does share that input's storage,
 * records how it is made from its base (the root tensor of the storage): the chain of
 * (op, args after self...) steps. Replaying the steps on the base gives the view again,
 * which serves three purposes:
 *
 * - an in-place update of a differentiable view rebases the base's history:
 *   base.grad_fn becomes CopySlices, whose backward replays the steps on the base's
 *   gradient, runs the in-place op's own node on that part and writes the result back
 *   (ember.ops.view_replay.scatter), and the view's grad_fn becomes a view of the new
 *   base (the steps replayed with grad mode on);
 * - other views of that base made earlier are stale from then on (their storage's
 *   version moved on since their grad_fn was made): they get a new grad_fn the same
 *   way when next used (em_view_sync: edges, grad_fn, requires_grad, the engine);
 * - AOT tracing (ember.aot.functionalize) reads the steps to turn writes into views
 *   into functional writes of their base and to regenerate stale views.
 *
 * Steps are recorded in trace mode and with grad mode on; a view made with grad mode
 * off is EM_VIEW_NOGRAD, whose in-place update PyTorch refuses to differentiate.
 */
#include "ember.h"

static PyObject *copy_slices_hook;   /* ember.autograd.copy_slices.backward_for */
static PyObject *copy_slices_name;   /* "CopySlices" */

/* (op, args after self...): one step of a view chain. */
static PyObject *
make_step(em_Op *op, PyObject **args)
{
    PyObject *step = PyTuple_New(op->nparams);
    if (step == NULL)
        return NULL;
    Py_INCREF(op);
    PyTuple_SET_ITEM(step, 0, (PyObject *)op);
    for (int i = 1; i < op->nparams; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(step, i, args[i]);
    }
    return step;
}

int
em_view_record(em_Op *op, PyObject **args, PyObject *result)
{
    PyObject *src_o = args[op->alias_param];
    if (!em_Tensor_Check(result) || !em_Tensor_Check(src_o) || result == src_o)
        return 0;
    em_Tensor *res = (em_Tensor *)result, *src = (em_Tensor *)src_o;
    if (res->storage != src->storage || res->base == NULL)
        return 0;
    res->view_version = res->storage->version;
    char kind = em_tls.grad_enabled ? EM_VIEW_GRAD : EM_VIEW_NOGRAD;
    if (src->base != NULL && src->view_kind != EM_VIEW_GRAD)
        kind = src->view_kind;   /* views of no-grad views and of detached aliases */
    res->view_kind = kind;
    Py_CLEAR(res->view_steps);
    if (em_tls.mode != EM_MODE_TRACE && !em_tls.grad_enabled)
        return 0;
    /* the chain is known when src is the base, or a view whose chain is known */
    if (op->alias_param != 0 || (src->base != NULL && src->view_steps == NULL))
        return 0;
    PyObject *step = make_step(op, args);
    if (step == NULL)
        return -1;
    Py_ssize_t n = src->base != NULL ? PyTuple_GET_SIZE(src->view_steps) : 0;
    PyObject *steps = PyTuple_New(n + 1);
    if (steps == NULL) {
        Py_DECREF(step);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyTuple_GET_ITEM(src->view_steps, i);
        Py_INCREF(s);
        PyTuple_SET_ITEM(steps, i, s);
    }
    PyTuple_SET_ITEM(steps, n, step);
    res->view_steps = steps;
    return 0;
}

/* The steps replayed on base (dispatched: autograd and tracers see them). */
static PyObject *
replay(em_Tensor *base, PyObject *steps)
{
    Py_INCREF(base);
    PyObject *cur = (PyObject *)base;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(steps); i++) {
        PyObject *step = PyTuple_GET_ITEM(steps, i);
        em_Op *op = (em_Op *)PyTuple_GET_ITEM(step, 0);
        if (PyTuple_GET_SIZE(step) != op->nparams || op->nparams > EM_MAX_PARAMS) {
            PyErr_Format(PyExc_RuntimeError, "a view step of %U has %zd arguments",
                         op->name, PyTuple_GET_SIZE(step) - 1);
            Py_DECREF(cur);
            return NULL;
        }
        PyObject *bound[EM_MAX_PARAMS];
        bound[0] = cur;
        for (int k = 1; k < op->nparams; k++)
            bound[k] = PyTuple_GET_ITEM(step, k);
        PyObject *next = em_op_call_bound(op, bound);
        Py_DECREF(cur);
        if (next == NULL)
            return NULL;
        if (!em_Tensor_Check(next)) {
            PyErr_Format(PyExc_RuntimeError, "view step %U did not return a Tensor", op->name);
            Py_DECREF(next);
            return NULL;
        }
        cur = next;
    }
    return cur;
}

int
em_view_refresh(em_Tensor *t)
{
    em_Tensor *base = (em_Tensor *)t->base;
    uint64_t before = t->view_version;
    t->view_version = t->storage->version;
    if (!base->requires_grad || t->view_steps == NULL)
        return 0;
    int grad = em_tls.grad_enabled;
    em_tls.grad_enabled = 1;
    PyObject *v = replay(base, t->view_steps);
    em_tls.grad_enabled = grad;
    if (v == NULL) {
        t->view_version = before;
        return -1;
    }
    em_Tensor *r = (em_Tensor *)v;
    t->requires_grad = r->requires_grad;
    Py_XINCREF(r->grad_fn);
    Py_XSETREF(t->grad_fn, r->grad_fn);
    t->output_nr = r->output_nr;
    Py_DECREF(v);
    return 0;
}

int
em_view_sync_args(em_Op *op, PyObject **args)
{
    for (int i = 0; i < op->nparams; i++) {
        PyObject *a = args[i];
        if (em_Tensor_Check(a)) {
            if (em_view_sync((em_Tensor *)a) < 0)
                return -1;
        }
        else if (op->params[i].type == EM_ARG_TENSORLIST && PyTuple_Check(a)) {
            for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(a); k++) {
                PyObject *e = PyTuple_GET_ITEM(a, k);
                if (em_Tensor_Check(e) && em_view_sync((em_Tensor *)e) < 0)
                    return -1;
            }
        }
    }
    return 0;
}

/* (base, the tensors fn reads after self): CopySlices' inputs, one per edge of fn's
 * node after its first, in the same order. */
static PyObject *
rebase_inputs(em_Op *fn, PyObject **fargs, em_Tensor *base)
{
    PyObject *list = PyList_New(0);
    if (list == NULL || PyList_Append(list, (PyObject *)base) < 0)
        goto error;
    for (int i = 1; i < fn->nparams; i++) {
        PyObject *a = fargs[i];
        if (fn->params[i].type == EM_ARG_TENSOR && em_Tensor_Check(a)) {
            if (PyList_Append(list, a) < 0)
                goto error;
        }
        else if (fn->params[i].type == EM_ARG_TENSORLIST && PyTuple_Check(a)) {
            for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(a); k++)
                if (PyList_Append(list, PyTuple_GET_ITEM(a, k)) < 0)
                    goto error;
        }
    }
    PyObject *tup = PyList_AsTuple(list);
    Py_DECREF(list);
    return tup;
error:
    Py_XDECREF(list);
    return NULL;
}

int
em_view_rebase(em_Op *fn, PyObject **fargs, em_Tensor *view, PyObject *result)
{
    em_Tensor *base = (em_Tensor *)view->base;
    PyObject *inputs = NULL, *outputs = NULL, *backward = NULL, *node = NULL;
    if (copy_slices_hook == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the CopySlices backward is not bound");
        return -1;
    }
    em_Tensor *r = (em_Tensor *)result;
    if (r->grad_fn == NULL)
        return 0;   /* a result that cannot carry a gradient (not floating point) */
    inputs = rebase_inputs(fn, fargs, base);
    outputs = PyTuple_Pack(1, (PyObject *)base);
    if (inputs == NULL || outputs == NULL)
        goto error;
    backward = PyObject_CallFunctionObjArgs(copy_slices_hook, r->grad_fn, view->view_steps,
                                            NULL);
    if (backward == NULL)
        goto error;
    node = em_make_node(backward, inputs, outputs, copy_slices_name);
    if (node == NULL)
        goto error;
    if (em_Node_Check(r->grad_fn)) {
        Py_INCREF(r->grad_fn);
        ((em_Node *)node)->inner = (em_Node *)r->grad_fn;
    }
    /* the view is now a view of the new base */
    view->view_version = view->storage->version - 1;
    if (em_view_refresh(view) < 0)
        goto error;
    Py_DECREF(node);
    Py_DECREF(backward);
    Py_DECREF(inputs);
    Py_DECREF(outputs);
    return 0;
error:
    Py_XDECREF(node);
    Py_XDECREF(backward);
    Py_XDECREF(inputs);
    Py_XDECREF(outputs);
    return -1;
}

/* _set_copy_slices(fn): fn(node, steps) -> the backward of a CopySlices node. */
static PyObject *
set_copy_slices(PyObject *self, PyObject *fn)
{
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "_set_copy_slices expects a callable");
        return NULL;
    }
    Py_INCREF(fn);
    Py_XSETREF(copy_slices_hook, fn);
    Py_RETURN_NONE;
}

static PyMethodDef view_methods[] = {
    {"_set_copy_slices", set_copy_slices, METH_O,
     "_set_copy_slices(fn): fn(node, view_steps) makes a CopySlices backward."},
    {NULL},
};

int
em_view_init(PyObject *module)
{
    copy_slices_name = PyUnicode_InternFromString("CopySlices");
    if (copy_slices_name == NULL)
        return -1;
    return PyModule_AddFunctions(module, view_methods);
}
