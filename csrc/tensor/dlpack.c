/* dlpack.c: ember's own DLPack capsules, both ways, zero-copy.
 *
 * NumPy's implementation of the protocol refuses dtypes it has no DLPack code for
 * (ml_dtypes' bfloat16 among them), so ember builds and reads the capsules itself:
 *
 *   _dlpack_export(array, versioned, copied) -> a "dltensor_versioned" capsule
 *       (DLPack 1.0: read-only and is-copied flags) or a legacy "dltensor" one over a
 *       NumPy array of an ember dtype; the managed tensor holds a reference to the
 *       array (hence its memory) until the consumer calls the deleter, or until the
 *       capsule dies unconsumed.
 *   _dlpack_import(capsule) -> a NumPy array over the producer's memory (of an ember
 *       dtype: bfloat16 included), whose base owns the managed tensor and calls its
 *       deleter when the array dies; the capsule is renamed "used_..." (consumed once).
 *
 * The structs are the DLPack ABI (dlpack.h, v1.0): written from the specification.
 */
#include "ember.h"

#include <stdint.h>
#include <string.h>

typedef struct {
    int32_t device_type;
    int32_t device_id;
} DLDevice;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;      /* in elements; NULL: C-contiguous */
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_COMPLEX = 5, DL_BOOL = 6 };
enum { DL_CPU = 1, DL_CUDA_HOST = 3, DL_ROCM_HOST = 11 };

#define DL_FLAG_READ_ONLY ((uint64_t)1 << 0)
#define DL_FLAG_IS_COPIED ((uint64_t)1 << 1)

static const char LEGACY[] = "dltensor";
static const char VERSIONED[] = "dltensor_versioned";
static const char OWNER[] = "ember.dlpack_owner";

/* ember dtype <-> DLPack (code, bits) */
static const struct {
    em_dtype_t dtype;
    uint8_t code, bits;
} DL_TYPES[] = {
    {EM_BOOL, DL_BOOL, 8},        {EM_UINT8, DL_UINT, 8},      {EM_INT8, DL_INT, 8},
    {EM_INT16, DL_INT, 16},       {EM_INT32, DL_INT, 32},      {EM_INT64, DL_INT, 64},
    {EM_FLOAT16, DL_FLOAT, 16},   {EM_FLOAT32, DL_FLOAT, 32},  {EM_FLOAT64, DL_FLOAT, 64},
    {EM_BFLOAT16, DL_BFLOAT, 16}, {EM_COMPLEX64, DL_COMPLEX, 64},
    {EM_COMPLEX128, DL_COMPLEX, 128},
};
#define N_DL_TYPES ((int)(sizeof(DL_TYPES) / sizeof(DL_TYPES[0])))

/* ------------------------------------------------------------------ export */

/* One allocation: the managed tensor, then shape and strides (2 * ndim int64). */
typedef struct {
    DLManagedTensorVersioned v;
    DLManagedTensor legacy;
    int versioned;
    int64_t geom[];
} ExportBlock;

static void
release_block(ExportBlock *b)
{
    PyGILState_STATE st = PyGILState_Ensure();
    Py_XDECREF((PyObject *)(b->versioned ? b->v.manager_ctx : b->legacy.manager_ctx));
    PyMem_RawFree(b);
    PyGILState_Release(st);
}

static void
delete_versioned(DLManagedTensorVersioned *m)
{
    release_block((ExportBlock *)m);
}

static void
delete_legacy(DLManagedTensor *m)
{
    release_block((ExportBlock *)((char *)m - offsetof(ExportBlock, legacy)));
}

/* An unconsumed capsule frees its tensor; a consumed one ("used_...") is the
 * consumer's. */
static void
capsule_destructor(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, VERSIONED)) {
        DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, VERSIONED);
        if (m != NULL && m->deleter != NULL)
            m->deleter(m);
    }
    else if (PyCapsule_IsValid(cap, LEGACY)) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, LEGACY);
        if (m != NULL && m->deleter != NULL)
            m->deleter(m);
    }
    PyErr_Clear();
}

static PyObject *
dlpack_export(PyObject *self, PyObject *args)
{
    PyArrayObject *arr;
    int versioned, copied;
    if (!PyArg_ParseTuple(args, "O!pp:_dlpack_export", &PyArray_Type, &arr, &versioned,
                          &copied))
        return NULL;
    em_dtype_t dt = em_dtype_from_npy(PyArray_TYPE(arr));
    int k = 0;
    while (k < N_DL_TYPES && DL_TYPES[k].dtype != dt)
        k++;
    if (dt == EM_UNDEFINED || k == N_DL_TYPES) {
        PyErr_Clear();
        PyErr_Format(PyExc_BufferError, "DLPack: no DLPack type for NumPy dtype %R",
                     (PyObject *)PyArray_DESCR(arr));
        return NULL;
    }
    int ndim = PyArray_NDIM(arr);
    if (ndim < 0 || ndim > EM_MAX_DIMS) {
        PyErr_Format(PyExc_BufferError, "DLPack: %d dims (at most %d)", ndim, EM_MAX_DIMS);
        return NULL;
    }
    npy_intp itemsize = PyArray_ITEMSIZE(arr);
    ExportBlock *b = PyMem_RawCalloc(1, sizeof(ExportBlock) + 2 * (size_t)ndim *
                                            sizeof(int64_t));
    if (b == NULL)
        return PyErr_NoMemory();
    int64_t *shape = b->geom, *strides = b->geom + ndim;
    for (int d = 0; d < ndim; d++) {
        shape[d] = PyArray_DIM(arr, d);
        strides[d] = itemsize ? PyArray_STRIDE(arr, d) / itemsize : 0;
    }
    DLTensor t = {
        .data = PyArray_DATA(arr),
        .device = {DL_CPU, 0},
        .ndim = ndim,
        .dtype = {DL_TYPES[k].code, DL_TYPES[k].bits, 1},
        .shape = shape,
        .strides = strides,
        .byte_offset = 0,
    };
    b->versioned = versioned;
    Py_INCREF(arr);
    PyObject *cap;
    if (versioned) {
        b->v.version.major = 1;
        b->v.version.minor = 0;
        b->v.manager_ctx = arr;
        b->v.deleter = delete_versioned;
        b->v.flags = (PyArray_ISWRITEABLE(arr) ? 0 : DL_FLAG_READ_ONLY) |
                     (copied ? DL_FLAG_IS_COPIED : 0);
        b->v.dl_tensor = t;
        cap = PyCapsule_New(&b->v, VERSIONED, capsule_destructor);
    }
    else {
        b->legacy.manager_ctx = arr;
        b->legacy.deleter = delete_legacy;
        b->legacy.dl_tensor = t;
        cap = PyCapsule_New(&b->legacy, LEGACY, capsule_destructor);
    }
    if (cap == NULL) {
        Py_DECREF(arr);
        PyMem_RawFree(b);
    }
    return cap;
}

/* ------------------------------------------------------------------ import */

/* The imported array's base: a capsule owning the managed tensor, calling its deleter
 * when it dies. */
typedef struct {
    void *managed;
    int versioned;
} Owner;

static void
owner_destructor(PyObject *cap)
{
    Owner *o = PyCapsule_GetPointer(cap, OWNER);
    if (o == NULL) {
        PyErr_Clear();
        return;
    }
    if (o->versioned) {
        DLManagedTensorVersioned *m = o->managed;
        if (m->deleter != NULL)
            m->deleter(m);
    }
    else {
        DLManagedTensor *m = o->managed;
        if (m->deleter != NULL)
            m->deleter(m);
    }
    PyMem_RawFree(o);
}

static em_dtype_t
dtype_of(DLDataType t)
{
    if (t.lanes != 1)
        return EM_UNDEFINED;
    for (int k = 0; k < N_DL_TYPES; k++)
        if (DL_TYPES[k].code == t.code && DL_TYPES[k].bits == t.bits)
            return DL_TYPES[k].dtype;
    return EM_UNDEFINED;
}

static PyObject *
dlpack_import(PyObject *self, PyObject *cap)
{
    int versioned;
    if (PyCapsule_IsValid(cap, VERSIONED))
        versioned = 1;
    else if (PyCapsule_IsValid(cap, LEGACY))
        versioned = 0;
    else {
        PyErr_SetString(PyExc_ValueError, "DLPack: not an unconsumed DLPack capsule "
                                          "(\"dltensor\" or \"dltensor_versioned\")");
        return NULL;
    }
    void *managed = PyCapsule_GetPointer(cap, versioned ? VERSIONED : LEGACY);
    if (managed == NULL)
        return NULL;
    DLTensor *t;
    uint64_t flags = 0;
    if (versioned) {
        DLManagedTensorVersioned *m = managed;
        if (m->version.major != 1) {
            PyErr_Format(PyExc_BufferError, "DLPack: version %u.%u is not supported "
                         "(ember reads 1.x)", m->version.major, m->version.minor);
            return NULL;
        }
        t = &m->dl_tensor;
        flags = m->flags;
    }
    else
        t = &((DLManagedTensor *)managed)->dl_tensor;
    if (t->device.device_type != DL_CPU && t->device.device_type != DL_CUDA_HOST &&
        t->device.device_type != DL_ROCM_HOST) {
        PyErr_Format(PyExc_BufferError, "DLPack: ember runs on the CPU only; the tensor is "
                     "on DLPack device (%d, %d)", t->device.device_type,
                     t->device.device_id);
        return NULL;
    }
    em_dtype_t dt = dtype_of(t->dtype);
    if (dt == EM_UNDEFINED) {
        PyErr_Format(PyExc_RuntimeError, "Unsupported dtype in DLTensor (code %d, %d bits, "
                     "%d lanes): ember has bool, uint8, int8, int16, int32, int64, float16, "
                     "bfloat16, float32, float64, complex64 and complex128",
                     t->dtype.code, t->dtype.bits, t->dtype.lanes);
        return NULL;
    }
    if (t->ndim < 0 || t->ndim > EM_MAX_DIMS) {
        PyErr_Format(PyExc_RuntimeError, "DLPack: %d dims (ember has at most %d)", t->ndim,
                     EM_MAX_DIMS);
        return NULL;
    }
    PyArray_Descr *descr = em_dtypes[dt]->descr;
    npy_intp itemsize = em_dtypes[dt]->itemsize;
    npy_intp shape[EM_MAX_DIMS], strides[EM_MAX_DIMS];
    npy_intp step = itemsize;
    for (int d = t->ndim - 1; d >= 0; d--) {
        shape[d] = (npy_intp)t->shape[d];
        strides[d] = t->strides != NULL ? (npy_intp)t->strides[d] * itemsize : step;
        step *= shape[d] > 0 ? shape[d] : 1;
    }
    Owner *o = PyMem_RawMalloc(sizeof(Owner));
    if (o == NULL)
        return PyErr_NoMemory();
    o->managed = managed;
    o->versioned = versioned;
    PyObject *owner = PyCapsule_New(o, OWNER, owner_destructor);
    if (owner == NULL) {
        PyMem_RawFree(o);
        return NULL;
    }
    /* from here the owner holds the tensor: the capsule is consumed */
    if (PyCapsule_SetName(cap, versioned ? "used_dltensor_versioned" : "used_dltensor") < 0) {
        o->managed = NULL;
        PyMem_RawFree(o);
        PyCapsule_SetDestructor(owner, NULL);
        Py_DECREF(owner);
        return NULL;
    }
    Py_INCREF(descr);
    int npflags = (flags & DL_FLAG_READ_ONLY) ? 0 : NPY_ARRAY_WRITEABLE;
    PyObject *arr = PyArray_NewFromDescr(&PyArray_Type, descr, t->ndim, shape, strides,
                                         (char *)t->data + t->byte_offset, npflags, NULL);
    if (arr == NULL) {
        Py_DECREF(owner);
        return NULL;
    }
    if (PyArray_SetBaseObject((PyArrayObject *)arr, owner) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    PyArray_UpdateFlags((PyArrayObject *)arr, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_F_CONTIGUOUS |
                                                  NPY_ARRAY_ALIGNED);
    return Py_BuildValue("(Nii)", arr, (flags & DL_FLAG_IS_COPIED) != 0, versioned);
}

static PyMethodDef dlpack_methods[] = {
    {"_dlpack_export", dlpack_export, METH_VARARGS,
     "_dlpack_export(array, versioned, copied): a DLPack capsule over a NumPy array of an "
     "ember dtype (bfloat16 too), zero-copy."},
    {"_dlpack_import", dlpack_import, METH_O,
     "_dlpack_import(capsule) -> (array, is_copied, versioned): the producer's memory as "
     "a NumPy array of an ember dtype; the capsule is consumed."},
    {NULL},
};

int
em_dlpack_init(PyObject *module)
{
    return PyModule_AddFunctions(module, dlpack_methods);
}
