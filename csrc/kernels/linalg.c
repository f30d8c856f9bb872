/* linalg.c: matmul. float32/float64 products BLAS can read go to the runtime's
 * em_blas_matmul, as compiled graphs' do: single-threaded BLAS calls over blocks fixed
 * by the shape, spread over Ember's pool (BLAS's own threads stay at 1 meanwhile, so two
 * pools never fight over the cores, and results do not depend on the thread count);
 * anything else NumPy's matmul computes. */
#include "ember.h"
#include "runtime/runtime.h"

/* C type names as PyTorch prints them in dtype mismatch errors. */
static const char *
c_type_name(em_dtype_t t)
{
    static const char *names[EM_NDTYPES] = {
        [EM_BOOL] = "bool", [EM_UINT8] = "unsigned char", [EM_INT8] = "signed char",
        [EM_INT16] = "short int", [EM_INT32] = "int", [EM_INT64] = "long int",
        [EM_FLOAT16] = "c10::Half", [EM_FLOAT32] = "float", [EM_FLOAT64] = "double",
        [EM_BFLOAT16] = "c10::BFloat16", [EM_COMPLEX64] = "c10::complex<float>",
        [EM_COMPLEX128] = "c10::complex<double>",
    };
    return names[t];
}

/* Result geometry of matmul(a, b) with PyTorch's rules and error messages. */
static int
matmul_geom(em_Tensor *a, em_Tensor *b, em_Geom *g)
{
    int na = a->ndim, nb = b->ndim;
    if (na == 0 || nb == 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "matmul(): both arguments to matmul need to be at least 1D, but they are "
                     "%dD and %dD", na, nb);
        return -1;
    }
    if (a->dtype != b->dtype) {
        PyErr_Format(PyExc_RuntimeError,
                     "matmul(): expected m1 and m2 to have the same dtype, but got: %s != %s",
                     c_type_name(a->dtype), c_type_name(b->dtype));
        return -1;
    }
    g->dtype = a->dtype;
    Py_ssize_t k_a = a->sizes[na - 1];
    Py_ssize_t k_b = nb == 1 ? b->sizes[0] : b->sizes[nb - 2];
    if (k_a != k_b) {
        if (na == 1 && nb == 1)
            PyErr_Format(PyExc_RuntimeError,
                         "matmul(): inconsistent tensor size, expected tensor [%zd] and src "
                         "[%zd] to have the same number of elements, but got %zd and %zd "
                         "elements respectively", k_a, k_b, k_a, k_b);
        else
            PyErr_Format(PyExc_RuntimeError,
                         "matmul(): mat1 and mat2 shapes cannot be multiplied (%zdx%zd and "
                         "%zdx%zd)", na == 1 ? 1 : a->sizes[na - 2], k_a, k_b,
                         nb == 1 ? 1 : b->sizes[nb - 1]);
        return -1;
    }
    /* batch dimensions broadcast */
    int ba = na > 2 ? na - 2 : 0, bb = nb > 2 ? nb - 2 : 0;
    int nbatch = ba > bb ? ba : bb;
    for (int i = 0; i < nbatch; i++) {
        int ia = i - (nbatch - ba), ib = i - (nbatch - bb);
        Py_ssize_t sa = ia >= 0 ? a->sizes[ia] : 1, sb = ib >= 0 ? b->sizes[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            PyErr_Format(PyExc_RuntimeError,
                         "matmul(): The size of tensor a (%zd) must match the size of tensor "
                         "b (%zd) at non-singleton dimension %d (shapes %s and %s)",
                         sa, sb, i, em_shape_s(na, a->sizes), em_shape_s(nb, b->sizes));
            return -1;
        }
        g->sizes[i] = sa == 1 ? sb : sa;
    }
    int nd = nbatch;
    if (na > 1)
        g->sizes[nd++] = a->sizes[na - 2];
    if (nb > 1)
        g->sizes[nd++] = b->sizes[nb - 1];
    g->ndim = nd;
    em_contiguous_strides(g);
    if (a->dtype == EM_BOOL && k_a > 0 && em_geom_numel(g) > 0) {
        /* PyTorch has no bool kernel (empty products never reach one) */
        PyErr_SetString(PyExc_NotImplementedError,
                        "matmul(): \"addmm_impl_cpu_\" not implemented for 'Bool'");
        return -1;
    }
    return 0;
}

static PyObject *
k_matmul(em_Op *op, PyObject **args)
{
    em_Tensor *a = (em_Tensor *)args[0], *b = (em_Tensor *)args[1];
    em_Geom g;
    if (matmul_geom(a, b, &g) < 0)
        return NULL;
    bool meta = em_tls.mode == EM_MODE_META || em_is_meta(a) || em_is_meta(b);
    em_Tensor *out = em_tensor_empty(&g, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    if (a->sizes[a->ndim - 1] == 0) {
        /* an empty contraction sums nothing */
        PyObject *zero = PyLong_FromLong(0);
        int st = zero ? PyArray_FillWithScalar(out->array, zero) : -1;
        Py_XDECREF(zero);
        if (st < 0)
            goto error;
        return (PyObject *)out;
    }
    int st = em_blas_matmul(a, b, out);
    if (st < 0)
        goto error;
    if (st == 0)
        return (PyObject *)out;
    PyObject *in[2] = {(PyObject *)a, (PyObject *)b};
    /* bfloat16 (NumPy has no loop for it) computes in float32, rounded once */
    em_dtype_t compute = g.dtype == EM_BFLOAT16 ? EM_FLOAT32 : g.dtype;
    if (em_ufunc_call(op->ufunc, in, 2, out->array, compute, compute) < 0)
        goto error;
    return (PyObject *)out;
error:
    Py_DECREF(out);
    return NULL;
}

const em_KernelEntry em_linalg_kernels[] = {
    {"matmul", k_matmul},
    {NULL, NULL},
};
