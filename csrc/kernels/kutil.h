/* kutil.h: helpers shared by the reduction, view, shape and indexing kernels
 * (kutil.c): finding ops by name for C composites, NumPy ufuncs, errstate, result
 * geometry and PyTorch-worded shape errors. */
#ifndef EMBER_KUTIL_H
#define EMBER_KUTIL_H

#include "ember.h"

/* The public op `name` (ember.ops.api.<name>, the first overload, which tries the
 * others); a borrowed reference, cached. NULL with an exception set. */
em_Op *em_op_named(const char *name);
/* Calls the named op through the dispatcher (mode, autograd): what a C composite
 * does for each op it is made of. */
PyObject *em_call(const char *name, PyObject *const *args, Py_ssize_t nargs);
/* The same with keyword arguments (values after the positionals, names in kwnames). */
PyObject *em_call_kw(const char *name, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames);

/* numpy.<name> (a ufunc or function), borrowed, cached. */
PyObject *em_np(const char *name);
/* Sets NumPy's errstate to ignore (PyTorch never warns about inf/nan); returns a
 * token for em_errstate_restore, NULL with an exception set. */
PyObject *em_errstate_ignore(void);
int em_errstate_restore(PyObject *token);
/* ufunc(*ins, out=out) with errstate ignored and casting="unsafe" (no signature). */
int em_ufunc_out(PyObject *ufunc, PyObject **ins, int nin, PyArrayObject *out);
/* ufunc.<method>(args..., **kw) with errstate ignored (reduce, accumulate, at). */
PyObject *em_ufunc_method(PyObject *ufunc, const char *method, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames);

/* Whether a kernel computes geometry only (meta mode or a meta input). */
static inline bool
em_meta_of(em_Tensor *t)
{
    return em_tls.mode == EM_MODE_META || em_is_meta(t);
}

/* A fresh tensor of t's shape and dtype dt, laid out as empty_like(t) would
 * (dense layouts are kept). */
em_Tensor *em_empty_like(em_Tensor *t, em_dtype_t dt, bool meta);
/* A fresh contiguous tensor. */
em_Tensor *em_empty(int ndim, const Py_ssize_t *sizes, em_dtype_t dt, bool meta);
/* Copies (and casts) src (a Tensor, an array or a number) into dst, unless dst is meta. */
int em_copy_into(em_Tensor *dst, PyObject *src);

/* "[2, 3]" of a tensor's shape, new reference. */
PyObject *em_shape_str(em_Tensor *t);
/* Formats a message with %S shape arguments; sets exc; returns NULL. */
PyObject *em_error(PyObject *exc, const char *fmt, ...);

/* Python int -> Py_ssize_t; dims normalised with em_wrap_dim. -1 with an error. */
int em_int_arg(PyObject *o, Py_ssize_t *out);
int em_dim_arg(PyObject *o, int ndim, Py_ssize_t *out);
/* A tuple of ints (already converted by the binder) into out; n receives the length. */
int em_int_list(PyObject *tup, Py_ssize_t *out, int *n, int max);
/* -1 with a RuntimeError unless a result of ndim dims fits EM_MAX_DIMS: every kernel
 * building a geometry with more dims than its input checks before it fills a
 * fixed-size array. The message names `name` (NULL: the dispatcher adds the op's name,
 * which it does not for composites while tracing). */
int em_check_ndim(const char *name, Py_ssize_t ndim);

/* out[..., j, ...] = src[..., idx[..., j, ...], ...] along d, over idx's shape (out
 * has idx's shape; src may be larger in the other dims). idx is int64, in range. */
void em_gather_loop(PyArrayObject *src, PyArrayObject *idx, int d, PyArrayObject *out);
/* A view of arr reversed along d (negative stride). */
PyArrayObject *em_flip_view(PyArrayObject *arr, int d);

/* x[indices] = value for tensor indices (a tuple of Tensors and None), in place and
 * without autograd (indexing.c): __setitem__'s path. A tensor value must have self's
 * dtype unless cast (PyTorch's masked_fill case: x[mask] = 0-d tensor). */
int em_index_put_inplace(em_Tensor *self, PyObject *indices, PyObject *value, bool cast);

#endif /* EMBER_KUTIL_H */
