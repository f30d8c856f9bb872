/* cloops.c: elementwise loops written in C, for ops NumPy has no single ufunc for.
 *
 * Contiguous float32 and float64 inputs run a tight loop (cloned for AVX-512 and
 * AVX2 on x86-64, so the compiler vectorises it for the CPU at hand); any other
 * layout is first copied to a contiguous buffer.
 */
#include "ember.h"

/* These loops are the point of the file: let the compiler vectorise them fully
 * (before vecmath.h, so its inline functions get the same options and inline). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "no-trapping-math", "no-math-errno")
#endif
#include "kernels/vecmath.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(EM_NO_CLONES)
#define EM_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define EM_CLONES
#endif

EM_CLONES static void
sigmoid_f32(const float *restrict x, float *restrict y, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        y[i] = 1.0f / (1.0f + em_expf(-x[i]));
}

static void
sigmoid_f64(const double *restrict x, double *restrict y, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        y[i] = 1.0 / (1.0 + exp(-x[i]));
}

EM_CLONES static void
relu_f32(const float *restrict x, float *restrict y, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
    {
        float m = x[i] > 0.0f ? x[i] : 0.0f;
        y[i] = x[i] != x[i] ? x[i] : m;   /* NaN stays NaN */
    }
}

EM_CLONES static void
relu_f64(const double *restrict x, double *restrict y, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
    {
        double m = x[i] > 0.0 ? x[i] : 0.0;
        y[i] = x[i] != x[i] ? x[i] : m;
    }
}

typedef struct {
    const char *name;
    void (*f32)(const float *, float *, Py_ssize_t);
    void (*f64)(const double *, double *, Py_ssize_t);
} loop_entry;

static const loop_entry loops[] = {
    {"sigmoid", sigmoid_f32, sigmoid_f64},
    {"relu", relu_f32, relu_f64},
    {NULL, NULL, NULL},
};

/* Runs the named loop from in to out (same shape; out freshly allocated, contiguous
 * or dense). Returns 1 when done, 0 when this dtype has no C loop, -1 on error. */
int
em_unary_cloop(const char *name, em_Tensor *in, em_Tensor *out)
{
    const loop_entry *e = loops;
    while (e->name != NULL && strcmp(e->name, name) != 0)
        e++;
    if (e->name == NULL || in->dtype != out->dtype ||
        (in->dtype != EM_FLOAT32 && in->dtype != EM_FLOAT64))
        return 0;
    em_Tensor *src = em_tensor_contiguous(in);
    if (src == NULL)
        return -1;
    int status = 1;
    if (!em_tensor_is_contiguous(out)) {
        status = 0;   /* caller's generic path handles strided outputs */
    }
    else {
        Py_BEGIN_ALLOW_THREADS
        if (in->dtype == EM_FLOAT32)
            e->f32(PyArray_DATA(src->array), PyArray_DATA(out->array), out->numel);
        else
            e->f64(PyArray_DATA(src->array), PyArray_DATA(out->array), out->numel);
        Py_END_ALLOW_THREADS
    }
    Py_DECREF(src);
    return status;
}
