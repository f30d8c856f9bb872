/* ember.h: the one core header shared by every C file of ember._C.
 *
 * Names shared between files carry the em_ prefix; everything else is static.
 * Functions returning PyObject* return NULL with an exception set on failure;
 * functions returning int return -1 with an exception set.
 */
#ifndef EMBER_H
#define EMBER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PY_ARRAY_UNIQUE_SYMBOL em_ARRAY_API
#define PY_UFUNC_UNIQUE_SYMBOL em_UFUNC_API
#ifndef EM_IMPORT_ARRAY
#define NO_IMPORT_ARRAY
#define NO_IMPORT_UFUNC
#endif
#include <numpy/arrayobject.h>
#include <numpy/ufuncobject.h>

#include "dispatch/op_ids.h"

#define EM_MAX_DIMS 64
#define EM_INLINE_DIMS 6
#define EM_MAX_PARAMS 16

/* ------------------------------------------------------------------ dtypes */

typedef enum {
    EM_BOOL = 0,
    EM_UINT8,
    EM_INT8,
    EM_INT16,
    EM_INT32,
    EM_INT64,
    EM_FLOAT16,
    EM_FLOAT32,
    EM_FLOAT64,
    EM_BFLOAT16,             /* NumPy's through ml_dtypes (its type number is found at import) */
    EM_COMPLEX64,            /* two float32 (NumPy's complex64) */
    EM_COMPLEX128,           /* two float64 */
    EM_NDTYPES,
    EM_UNDEFINED = -1
} em_dtype_t;

typedef struct {
    PyObject_HEAD
    em_dtype_t code;
    int npy_type;
    int itemsize;
    const char *name;        /* "float32" */
    PyArray_Descr *descr;    /* NumPy descriptor, borrowed from NumPy */
} em_DType;

extern PyTypeObject em_DType_Type;
extern em_DType *em_dtypes[EM_NDTYPES];
extern em_dtype_t em_default_dtype;   /* float32 unless set_default_dtype */

static inline bool em_is_float(em_dtype_t t)
{
    return (t >= EM_FLOAT16 && t <= EM_FLOAT64) || t == EM_BFLOAT16;
}
/* float16 and bfloat16: computed in float32 where a loop has no 16-bit path */
static inline bool em_is_half(em_dtype_t t) { return t == EM_FLOAT16 || t == EM_BFLOAT16; }
static inline bool em_is_int(em_dtype_t t) { return t >= EM_UINT8 && t <= EM_INT64; }
static inline bool em_is_complex(em_dtype_t t)
{
    return t == EM_COMPLEX64 || t == EM_COMPLEX128;
}
/* floating or complex: the dtypes that can require gradients and that true division,
 * the float-only ops and sums keep as they are */
static inline bool em_is_inexact(em_dtype_t t) { return em_is_float(t) || em_is_complex(t); }
/* complex64 -> float32, complex128 -> float64; others unchanged */
static inline em_dtype_t
em_complex_value_type(em_dtype_t t)
{
    return t == EM_COMPLEX64 ? EM_FLOAT32 : t == EM_COMPLEX128 ? EM_FLOAT64 : t;
}
em_dtype_t em_promote_types(em_dtype_t a, em_dtype_t b);
em_dtype_t em_dtype_from_npy(int npy_type);
em_dtype_t em_dtype_from_object(PyObject *obj);   /* ember or NumPy dtype; -1 + error */
const char *em_dtype_torch_name(em_dtype_t t);    /* "Float", "Long" as in PyTorch errors */
int em_dtype_init(PyObject *module);
int em_dlpack_init(PyObject *module);   /* tensor/dlpack.c: _dlpack_export/_dlpack_import */

/* ------------------------------------------------------------------ storage */

/* The memory behind a tensor and all its views: a NumPy array (NULL for meta
 * tensors) and the version counter that in-place operations bump. */
typedef struct {
    PyObject_HEAD
    PyArrayObject *array;
    uint64_t version;
} em_Storage;

extern PyTypeObject em_Storage_Type;
em_Storage *em_storage_new(PyArrayObject *array);   /* steals nothing */

/* ------------------------------------------------------------------ tensor */

typedef struct em_Tensor {
    PyObject_HEAD
    PyArrayObject *array;      /* NumPy view of the data; NULL for meta tensors */
    em_Storage *storage;
    em_dtype_t dtype;
    int ndim;
    Py_ssize_t *sizes;         /* inline_geom or heap */
    Py_ssize_t *strides;       /* in elements */
    Py_ssize_t offset;         /* storage offset, in elements */
    Py_ssize_t numel;
    Py_ssize_t inline_geom[2 * EM_INLINE_DIMS];
    /* autograd */
    char requires_grad;
    char retains_grad;
    int output_nr;
    PyObject *grad;            /* Tensor or NULL */
    PyObject *grad_fn;         /* em_Node or NULL for leaves */
    PyObject *hooks;           /* list or NULL */
    PyObject *base;            /* tensor this one is a view of, or NULL */
    /* views made by dispatched view ops (csrc/autograd/view.c): the ops that make this
     * tensor from base, a tuple of (op, args after self...), or NULL when not known */
    PyObject *view_steps;
    uint64_t view_version;     /* storage version when grad_fn was last made from base */
    char view_kind;            /* EM_VIEW_*: how autograd treats this view */
    PyObject *trace;           /* opaque slot for tracers (graph proxies) */
    PyObject *dict;
    PyObject *weakreflist;
} em_Tensor;

/* view_kind: a differentiable view (made with grad mode on: in-place updates rebase its
 * base's history), one made with grad mode off (PyTorch refuses to differentiate in-place
 * updates of it), or no view for autograd (roots, detached aliases). */
#define EM_VIEW_NONE 0
#define EM_VIEW_GRAD 1
#define EM_VIEW_NOGRAD 2

extern PyTypeObject em_Tensor_Type;
#define em_Tensor_Check(o) PyObject_TypeCheck((o), &em_Tensor_Type)
#define em_is_meta(t) ((t)->array == NULL)

/* A tensor geometry, used to build outputs and views before any data exists. */
typedef struct {
    int ndim;
    em_dtype_t dtype;
    Py_ssize_t sizes[EM_MAX_DIMS];
    Py_ssize_t strides[EM_MAX_DIMS];   /* elements; filled by em_contiguous_strides */
} em_Geom;

void em_contiguous_strides(em_Geom *g);
void em_tensoriter_strides(int nops, Py_ssize_t (*st)[EM_MAX_DIMS], em_Geom *g,
                           bool skip_unit);   /* rules.c */
Py_ssize_t em_geom_numel(const em_Geom *g);
/* New tensor owning fresh (uninitialised) memory of geometry g, or a meta tensor. */
em_Tensor *em_tensor_empty(const em_Geom *g, bool meta);
em_Tensor *em_tensor_empty_like_layout(const em_Geom *g, bool meta); /* honours g->strides */
/* Wraps an existing array (no copy). storage NULL: the array becomes the storage. */
em_Tensor *em_tensor_from_array(PyArrayObject *array, em_Storage *storage,
                                Py_ssize_t offset);
/* A view of base with new geometry (sizes/strides in elements) and offset. */
em_Tensor *em_tensor_view(em_Tensor *base, int ndim, const Py_ssize_t *sizes,
                          const Py_ssize_t *strides, Py_ssize_t offset);
em_Tensor *em_tensor_view_dtype(em_Tensor *base, em_dtype_t dtype, int ndim,
                                const Py_ssize_t *sizes, const Py_ssize_t *strides,
                                Py_ssize_t offset);
/* A detached alias sharing storage and geometry (no autograd history). */
em_Tensor *em_tensor_alias(em_Tensor *src);
int em_tensor_set_geom(em_Tensor *t, int ndim, const Py_ssize_t *sizes,
                       const Py_ssize_t *strides);
bool em_tensor_is_contiguous(const em_Tensor *t);
PyObject *em_tensor_to_array(em_Tensor *t);   /* new ref to the NumPy view; error if meta */
em_Tensor *em_tensor_contiguous(em_Tensor *t); /* new ref: t itself or a contiguous copy */
PyObject *em_sizes_tuple(const em_Tensor *t);        /* its shape, an ember.Size */
PyObject *em_int_tuple(const Py_ssize_t *v, int n);   /* a tuple of n ints */
/* "[2, 3]": a shape as text for messages, in one of four per-thread buffers used in
 * turn (so one message may show four shapes). */
const char *em_shape_s(int ndim, const Py_ssize_t *sizes);
#define em_tshape(t) em_shape_s((t)->ndim, (t)->sizes)
int em_tensor_init_type(PyObject *module);

/* ------------------------------------------------------------------ modes */

typedef enum { EM_MODE_EAGER = 0, EM_MODE_META = 1, EM_MODE_TRACE = 2 } em_mode_t;

typedef struct {
    int mode;
    int grad_enabled;
    PyObject *tracer;          /* callable(op, args) for EM_MODE_TRACE */
    int autocast;              /* ember.autocast's lower-precision dtype, or -1: off */
} em_ThreadState;

extern _Thread_local em_ThreadState em_tls;
/* A symbolic int ([dynamic]) while tracing: bound by int parameters as it is. */
bool em_is_symint(PyObject *v);
int em_mode_init(PyObject *module);

/* ------------------------------------------------------------------ ops */

typedef enum {
    EM_ARG_TENSOR,       /* Tensor (numbers accepted for elementwise kinds) */
    EM_ARG_SCALAR,       /* Python int/float/bool */
    EM_ARG_INT,
    EM_ARG_INTLIST,      /* int[]; also int[1]: a bare int is accepted */
    EM_ARG_BOOL,
    EM_ARG_FLOAT,
    EM_ARG_DTYPE,
    EM_ARG_STR,
    EM_ARG_TENSORLIST,
    EM_ARG_ANY,
    EM_ARG_DEVICE,
    EM_ARG_GENERATOR,
} em_argtype_t;

typedef struct {
    PyObject *name;          /* interned */
    em_argtype_t type;
    bool optional;           /* accepts None */
    bool kwonly;
    bool varargs_list;       /* int[] that may be given as *args */
    bool int1;               /* int[1]: a bare int is accepted */
    bool number_ok;          /* a Tensor parameter that also takes Python numbers */
    PyObject *defval;        /* NULL: required */
} em_Param;

typedef enum {
    EM_KIND_UNARY = 0,       /* same dtype as input */
    EM_KIND_UNARY_FLOAT,     /* integers and bool promote to the default float dtype */
    EM_KIND_BINARY,          /* promote, broadcast */
    EM_KIND_BINARY_FLOAT,    /* promote, integers to the default float dtype */
    EM_KIND_COMPARE,         /* promote to compute, bool result */
    EM_KIND_REDUCE,          /* dim, keepdim */
    EM_KIND_REDUCE_INDEX,    /* dim, keepdim; (values, indices) */
    EM_KIND_MATMUL,
    EM_KIND_VIEW,
    EM_KIND_FACTORY,
    EM_KIND_CUSTOM,
    EM_NKINDS
} em_kind_t;

typedef struct em_Op em_Op;
/* args: the bound arguments in signature order (borrowed). Returns a new
 * reference to the result (a Tensor or a tuple of Tensors). */
typedef PyObject *(*em_kernel_fn)(em_Op *op, PyObject **args);

struct em_Op {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *name;            /* "add" */
    PyObject *overload;        /* "Tensor", "" */
    PyObject *schema;          /* the signature string */
    PyObject *entry;           /* the Python OpEntry */
    PyObject *backward;        /* Python formula or NULL (not differentiable) */
    PyObject *decompose;       /* entry.decompose or NULL ("decomposed" kernels) */
    PyObject *impl;            /* entry.impl or NULL ("python" kernels) */
    PyObject *ufunc;           /* NumPy ufunc for ufunc-backed kernels, or NULL */
    int ufunc_has_identity;    /* its identity is not None (what it reduces empty to) */
    PyObject *reduce_ufunc;    /* second ufunc (e.g. argmax for max.dim) or NULL */
    PyObject *backward_name;   /* "AddBackward0" */
    em_Op *next;               /* next overload of the same name, or NULL */
    em_Op *functional;         /* in-place ops: the out-of-place op they update self with */
    em_kernel_fn kernel;
    em_kind_t kind;
    int id;                    /* entry.op_id (EM_OP_* for the ops C calls), else -1 */
    int nparams;
    int npositional;
    int nouts;
    int inplace;               /* mutates its first argument */
    int composite;             /* runs its kernel in every mode; the ops it calls dispatch */
    int alias_param;           /* the parameter the result may be a view of (its schema's
                                * Tensor(a) return), or -1 */
    int rule;                  /* variant of the kind's dtype rule (EM_RULE_*) */
    int autocast;              /* EM_AUTOCAST_*: how autocast casts its arguments */
    uint32_t backward_reads;   /* which of (result, *args) the formula reads (bit 0: the
                                * result, bit i + 1: parameter i; entry.backward_uses),
                                * all bits when that can't be told */
    em_Param params[EM_MAX_PARAMS];
};

/* Autocast policies (entry.autocast; PyTorch's CPU lists): cast floating arguments
 * (float64 aside) to the autocast dtype, to float32, or to their widest type. */
enum { EM_AUTOCAST_NONE, EM_AUTOCAST_LOWER, EM_AUTOCAST_FP32, EM_AUTOCAST_PROMOTE };

extern PyTypeObject em_Op_Type;
#define em_Op_Check(o) PyObject_TypeCheck((o), &em_Op_Type)

/* Ops by id (op_ids.h, generated from the op table): em_ops[EM_OP_VIEW] is the public
 * view op, filled by ember.ops.install() (_C._bind_ops). */
extern em_Op *em_ops[EM_NOPS];
/* em_ops[id], bounds-checked; NULL (no exception) when install() bound none. */
static inline em_Op *
em_op_lookup(int id)
{
    return (id >= 0 && id < EM_NOPS) ? em_ops[id] : NULL;
}
/* The same, NULL with a RuntimeError. */
em_Op *em_op(int id);
/* Calls the op of id through the dispatcher as Python would: positional args, then the
 * values of the keyword arguments named in kwnames (NULL: none). What a C composite
 * does for each op it is made of. */
PyObject *em_call_op(int id, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
/* Keyword names for em_call_op, made once: ("dtype",), ("memory_format",); and the
 * string "contiguous_format". */
extern PyObject *em_kw_dtype, *em_kw_memory_format, *em_str_contiguous_format;

/* Calls an op with already-bound arguments (dispatch by mode, then autograd). */
PyObject *em_op_call_bound(em_Op *op, PyObject **args);
/* Runs an in-place op: the functional op's kernel, written back into self, with
 * autograd history rebased onto self. */
PyObject *em_inplace_call(em_Op *op, PyObject **args);
/* Hands a call to the thread's tracer (trace mode): tracer(op, bound_args). */
PyObject *em_call_tracer(em_Op *op, PyObject **args);
/* Calls an op by positional arguments only (missing trailing args take defaults). */
PyObject *em_op_call(em_Op *op, PyObject *const *args, Py_ssize_t nargs);
em_kernel_fn em_find_kernel(const char *name);
int em_op_init(PyObject *module);
int em_registry_init(PyObject *module);   /* kernels/registry.c: _C._kernel_names */

/* ------------------------------------------------------------------ rules (C side)
 * Shape and dtype rules per op kind, shared by eager kernels and the meta path. */

/* Broadcast geometry of operands (Tensors or numbers); raises RuntimeError
 * naming the op and the shapes. */
int em_broadcast(const char *opname, PyObject **operands, int n, em_Geom *out);
/* PyTorch's type promotion over operands (Tensors and Python numbers). */
em_dtype_t em_result_type(PyObject **operands, int n);
/* Output strides for an elementwise result, following PyTorch's TensorIterator:
 * the layout of the inputs is kept. */
void em_elementwise_strides(PyObject **operands, int n, em_Geom *g);
/* Normalises dim into [0, ndim); IndexError as PyTorch words it. */
int em_wrap_dim(Py_ssize_t *dim, int ndim);
/* Python int -> Py_ssize_t; a dim normalised with em_wrap_dim. -1 with an error. */
int em_int_arg(PyObject *o, Py_ssize_t *out);
int em_dim_arg(PyObject *o, int ndim, Py_ssize_t *out);
/* dims: None, int or sequence -> mask of reduced dims; ndim 0 accepts 0 and -1. */
int em_reduce_dims(PyObject *dims, int ndim, bool *mask);
em_Tensor *em_tensor_meta_like(em_Tensor *t);

/* Variants of a kind's dtype rule. */
#define EM_RULE_INT_TO_LONG 1   /* sum, prod: integers and bool accumulate in int64 */
#define EM_RULE_FLOAT_ONLY 2    /* mean: integer inputs are an error */
#define EM_RULE_NO_BOOL 4       /* neg, sub: bool inputs are an error */
#define EM_RULE_INTEGRAL 8      /* bitwise ops: no floating point kernel (NotImplementedError) */
#define EM_RULE_NOT_BOOL 16     /* pow: no bool kernel (NotImplementedError) */
#define EM_RULE_FLOATING 32     /* gelu, lerp: no integer or bool kernel (NotImplementedError) */
#define EM_RULE_COMPLEX 64      /* add, mul, exp: takes complex operands (others refuse them) */
#define EM_RULE_COMPLEX_TO_REAL 128  /* abs: a complex operand gives its parts' dtype */
#define EM_RULE_NO_HALF 256     /* ndtri, zeta: no float16/bfloat16 kernel (NotImplementedError) */

/* ------------------------------------------------------------------ kernels */

typedef struct {
    const char *name;
    em_kernel_fn fn;
} em_KernelEntry;

extern const em_KernelEntry em_elementwise_kernels[];
extern const em_KernelEntry em_reduction_kernels[];
extern const em_KernelEntry em_view_kernels[];
extern const em_KernelEntry em_linalg_kernels[];
extern const em_KernelEntry em_factory_kernels[];
extern const em_KernelEntry em_random_kernels[];
extern const em_KernelEntry em_nn_kernels[];     /* nn.c: decomposed nn ops, linear */
extern const em_KernelEntry em_conv_kernels[];   /* conv.c: convolution */
extern const em_KernelEntry em_pool_kernels[];   /* pool.c: max pooling */
extern const em_KernelEntry em_attention_kernels[]; /* attention.c: fused attention */
extern const em_KernelEntry em_ctc_kernels[];       /* ctc.c: the CTC loss and its gradient */
extern const em_KernelEntry em_grid_sample_kernels[]; /* grid_sample.c: grid_sampler_2d/3d */
extern const em_KernelEntry em_embedding_bag_kernels[]; /* embedding_bag.c: bags of rows */
/* nn.c: the eager result of an op that is its decomposition (entry.decompose, grad off);
 * C kernels of nn ops fall back to it for the cases they do not cover. */
PyObject *em_decomposed_kernel(em_Op *op, PyObject **args);
extern const em_KernelEntry em_shape_kernels[];     /* shape.c */
extern const em_KernelEntry em_indexing_kernels[];  /* indexing.c */

int em_reduction_init(void);    /* reduction.c */
/* random.c: _C._set_default_generator(gen), the generator random ops draw from */
PyObject *em_set_default_generator(PyObject *self, PyObject *gen);

/* NumPy glue (kernels/numpy.c), set up once at import by em_numpy_init: the NumPy
 * functions kernels call (em_np.add is numpy.add, borrowed), NumPy's errstate and the
 * calls of ufuncs. */
#define EM_NUMPY_FUNCTIONS(X)                                                           \
    X(absolute) X(add) X(all) X(arange) X(broadcast_to) X(copyto) X(equal) X(exp)       \
    X(floor) X(floor_divide) X(fmod) X(greater_equal) X(iinfo) X(isfinite) X(less)     \
    X(less_equal) X(log) X(logical_and) X(maximum) X(minimum) X(multiply) X(not_equal) \
    X(power) X(sqrt) X(subtract) X(true_divide) X(trunc)
#define EM_NUMPY_FIELD(name) PyObject *name;
typedef struct {
    EM_NUMPY_FUNCTIONS(EM_NUMPY_FIELD)
} em_NumPy;
#undef EM_NUMPY_FIELD
extern em_NumPy em_np;
extern PyObject *em_numpy;    /* the numpy module */
/* interned "unsafe" and the ufunc method names */
extern PyObject *em_str_unsafe, *em_str_at, *em_str_reduce, *em_str_accumulate;
int em_numpy_init(void);
/* Sets NumPy's errstate to ignore; returns a token for em_errstate_restore, NULL with an
 * exception set. */
PyObject *em_errstate_ignore(void);
int em_errstate_restore(PyObject *token);
/* ufunc(ins..., out=out, signature=(compute, ..., result), casting="unsafe") (1 to 3
 * inputs: Tensors, arrays or numbers) with errstate ignored; Python ints of an integer
 * loop wrap to its width. compute EM_UNDEFINED: no signature, NumPy picks the loop. */
int em_ufunc_call(PyObject *ufunc, PyObject **ins, int nin, PyArrayObject *out,
                  em_dtype_t compute, em_dtype_t result);
/* ufunc.<method>(args..., **kw) with errstate ignored (em_str_reduce, em_str_at, ...). */
PyObject *em_ufunc_method(PyObject *ufunc, PyObject *method, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames);

PyObject *em_number_from(PyObject *obj);  /* numbers pass through; error otherwise */
bool em_is_number(PyObject *obj);
/* Tensor and numbers in args -> result geometry for an elementwise kind. */
int em_elementwise_geom(em_Op *op, PyObject **operands, int n, em_Geom *g,
                        em_dtype_t *compute);
bool em_any_meta(PyObject **operands, int n);

/* ------------------------------------------------------------------ autograd */

typedef struct {
    PyObject *fn;     /* em_Node, em_Tensor (leaf accumulation) or NULL */
    int input_nr;
} em_Edge;

typedef struct {
    int ndim;
    em_dtype_t dtype;
    Py_ssize_t *sizes;
    bool meta;
    uint64_t version;          /* of the output's storage when saved */
} em_OutMeta;

typedef struct em_Node {
    PyObject_HEAD
    em_Op *op;                 /* op-table node, or NULL */
    PyObject *py_backward;     /* Python-callable node: fn(*grads) -> grads */
    PyObject *name;
    PyObject *saved;           /* tuple: bound args; tensors as saved values */
    PyObject *saved_versions;  /* tuple of ints or None, parallel to saved */
    PyObject *saved_outputs;   /* tuple of detached aliases, or NULL */
    int nedges;
    em_Edge *edges;
    int nout;
    em_OutMeta *outmeta;
    uint64_t seq;
    bool released;
    struct em_Node *inner;     /* CopySlices: the in-place op's node it runs, released
                                * with it */
    PyObject *pre_hooks;       /* list or NULL */
    PyObject *dict;
    PyObject *weakreflist;
} em_Node;

extern PyTypeObject em_Node_Type;
#define em_Node_Check(o) PyObject_TypeCheck((o), &em_Node_Type)

/* Records an autograd node for op if grad mode is on and an input requires grad. */
int em_autograd_record(em_Op *op, PyObject **args, PyObject *result);
/* A node whose backward calls fn(*grads) -> one gradient per input, attached to the
 * outputs (tuples of tensors). Returns the node. */
PyObject *em_make_node(PyObject *fn, PyObject *inputs, PyObject *outputs, PyObject *name);
PyObject *em_make_node_v(PyObject *fn, PyObject *const *inputs, Py_ssize_t ninputs,
                         PyObject *const *outputs, Py_ssize_t noutputs, PyObject *name);
/* Frees what a Python node's fn saved for its backward when fn is a compiled
 * backward (aot_function.c); true if it was one (the node is then released). */
bool em_aot_backward_release(PyObject *fn);
int em_node_init_type(PyObject *module);
int em_engine_init(PyObject *module);
/* node.c, for the engine: runs a node's backward on grads (a tuple, one per output; None
 * where none arrived), returning one gradient (or None) per edge; frees what a node
 * saved; PyTorch's error for a node already released. */
PyObject *em_node_apply(em_Node *node, PyObject *grads);
void em_node_release(em_Node *node);
PyObject *em_node_released_error(em_Node *node);

/* Views (csrc/autograd/view.c). A result of op(args) that shares args[alias_param]'s
 * storage records the step that made it (so base, steps replay it). */
int em_view_record(em_Op *op, PyObject **args, PyObject *result);
/* A differentiable view whose storage was written since its grad_fn was made gets a
 * new grad_fn: its steps replayed on its base's current history. */
int em_view_refresh(em_Tensor *t);
static inline int
em_view_sync(em_Tensor *t)
{
    if (t->base == NULL || t->view_kind != EM_VIEW_GRAD ||
        t->view_version == t->storage->version)
        return 0;
    return em_view_refresh(t);
}
/* Refreshes every tensor argument of op (tensor lists included). */
int em_view_sync_args(em_Op *op, PyObject **args);
/* An in-place fn(fargs) wrote result into view (fargs[0] is view's old value) and fn's
 * node hangs from result: the base's history becomes CopySlices(old base history, that
 * node), and view becomes a view of the new base. */
int em_view_rebase(em_Op *fn, PyObject **fargs, em_Tensor *view, PyObject *result);
int em_view_init(PyObject *module);

/* ------------------------------------------------------------------ capture */
/* Adds ember._C._capture: the frame hook, its cache and guards (csrc/capture/). */
int em_capture_init(PyObject *module);
int em_compiled_frame_init(PyObject *module);     /* capture/compiled_frame.c */

/* ------------------------------------------------------------------ compiled code */
/* The types of compiled graphs and their parts, added to ember._C by module.c. */
int em_compiled_graph_init(PyObject *module);     /* runtime/compiled_graph.c */
int em_aot_function_init(PyObject *module);       /* runtime/aot_function.c */
int em_blas_init(PyObject *module);               /* runtime/blas.c */
int em_threadpool_init(PyObject *module);         /* runtime/threadpool.c */
int em_jit_init_type(PyObject *module);           /* jit/jit.c: JitKernel, _jit_* */

/* ------------------------------------------------------------------ misc */
PyObject *em_llvm_info(PyObject *self, PyObject *noargs);

#endif /* EMBER_H */
