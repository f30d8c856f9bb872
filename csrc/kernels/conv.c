/* conv.c: the convolution prim (aten.convolution): 1-d and 2-d, strided, padded,
 * dilated, grouped, and transposed.
 *
 *   convolution(input, weight, bias, stride, padding, dilation, transposed,
 *               output_padding, groups)
 *
 * A 1-d convolution runs as a 2-d one with height 1. The forward convolution gathers
 * the receptive fields of a cache-sized block of output positions into columns
 * (im2col of the block) and multiplies them by the weight, group by group, straight
 * into the output (float32: conv_loops.c; float64: BLAS), images on the thread pool;
 * the transposed convolution multiplies the input by the transposed weight and scatters
 * the columns back into the output (col2im), or, with stride 1, runs as a forward
 * convolution with the weight flipped (see "blocked loops" below). Without BLAS,
 * float64 takes the whole-image columns and NumPy's matmul. Integer inputs compute in float64 (exact
 * for the sizes PyTorch's integer kernels are used at), float16 in float32. Meta
 * inputs get the geometry only. The output is contiguous, or channels-last when the
 * input or the weight is (as PyTorch picks).
 *
 * The backward formulas (python/ember/ops/nn_ops.py): the input's gradient is the
 * transposed convolution of the output's gradient, the weight's the output's gradient
 * times the input's columns (the im2col op, whose eager kernel is here too).
 */
#include "ember.h"
#include "kutil.h"
#include "runtime/runtime.h"
#include <stdatomic.h>
#include <stdlib.h>

typedef struct {
    int nsp;                       /* spatial dims of the call: 1 or 2 */
    bool transposed;
    Py_ssize_t N, C, H, W;         /* input */
    Py_ssize_t Cout, G;            /* output channels, groups */
    Py_ssize_t kh, kw;
    Py_ssize_t sh, sw, ph, pw, dh, dw, oph, opw;
    Py_ssize_t OH, OW;
} conv_params;

/* One stride/padding/... argument: as many values as spatial dims (a single value
 * repeats), with PyTorch's message otherwise. */
static int
int_params(PyObject *list, const char *what, int nsp, Py_ssize_t *out)
{
    if (PyLong_Check(list)) {     /* a default given as a bare int */
        out[0] = out[1] = PyLong_AsSsize_t(list);
        return PyErr_Occurred() ? -1 : 0;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(list);
    if (n != 1 && n != nsp) {
        PyObject *l = PySequence_List(list);
        PyObject *s = l ? PyObject_Repr(l) : NULL;
        if (s != NULL)
            PyErr_Format(PyExc_RuntimeError,
                         "expected %s to be a single integer value or a list of %d values to "
                         "match the convolution dimensions, but got %s=%U", what, nsp, what, s);
        Py_XDECREF(s);
        Py_XDECREF(l);
        return -1;
    }
    for (int i = 0; i < nsp; i++) {
        out[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(list, n == 1 ? 0 : i));
        if (out[i] == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

/* "Given groups=1, weight of size [8, 3, 3, 3], expected input[1, 4, 5, 5] to have 3
 * channels, but got 4 channels instead" */
static int
channels_error(const char *given, long value, em_Tensor *input, em_Tensor *weight,
               Py_ssize_t expected)
{
    PyErr_Format(PyExc_RuntimeError,
                 "Given %s=%ld, weight of size %s, expected input%s to have %zd channels, "
                 "but got %zd channels instead", given, value, em_tshape(weight),
                 em_tshape(input), expected, input->sizes[1]);
    return -1;
}

/* Checks the arguments as PyTorch does and fills p. */
static int
conv_setup(PyObject **args, conv_params *p)
{
    em_Tensor *input = (em_Tensor *)args[0], *weight = (em_Tensor *)args[1];
    PyObject *bias = args[2];
    p->transposed = PyObject_IsTrue(args[6]);
    long groups = PyLong_AsLong(args[8]);
    if (groups == -1 && PyErr_Occurred())
        return -1;
    int wd = weight->ndim;
    if (wd != 3 && wd != 4) {
        if (wd == 5)
            PyErr_SetString(PyExc_NotImplementedError,
                            "3-d convolutions are not supported");
        else
            PyErr_Format(PyExc_RuntimeError, "weight should have at least three dimensions, "
                         "but got weight of size %s", em_tshape(weight));
        return -1;
    }
    if (input->ndim != wd) {
        PyErr_Format(PyExc_RuntimeError,
                     "Expected %d-dimensional input for %d-dimensional weight %s, but got "
                     "%d-dimensional input of size %s instead", wd, wd, em_tshape(weight),
                     input->ndim, em_tshape(input));
        return -1;
    }
    int nsp = p->nsp = wd - 2;
    Py_ssize_t stride[2], padding[2], dilation[2], opad[2];
    if (int_params(args[3], "stride", nsp, stride) < 0 ||
        int_params(args[4], "padding", nsp, padding) < 0 ||
        int_params(args[5], "dilation", nsp, dilation) < 0 ||
        int_params(args[7], "output_padding", nsp, opad) < 0)
        return -1;
    if (weight->dtype != input->dtype) {
        PyErr_Format(PyExc_RuntimeError, "expected scalar type %s but found %s",
                     em_dtype_torch_name(input->dtype), em_dtype_torch_name(weight->dtype));
        return -1;
    }
    for (int i = 0; i < nsp; i++) {
        if (padding[i] < 0) {
            PyErr_SetString(PyExc_RuntimeError, "negative padding is not supported");
            return -1;
        }
        if (opad[i] < 0) {
            PyErr_SetString(PyExc_RuntimeError, "negative output_padding is not supported");
            return -1;
        }
        if (stride[i] <= 0) {
            PyErr_SetString(PyExc_RuntimeError, "non-positive stride is not supported");
            return -1;
        }
    }
    for (int i = 0; i < nsp; i++) {
        if (dilation[i] <= 0) {
            PyObject *l = PySequence_List(args[5]);
            PyObject *s = l ? PyObject_Repr(l) : NULL;
            Py_XDECREF(l);
            if (s)
                PyErr_Format(PyExc_RuntimeError,
                             "dilation should be greater than zero, but got %U", s);
            Py_XDECREF(s);
            return -1;
        }
    }
    if (groups <= 0) {
        PyErr_SetString(PyExc_RuntimeError, "non-positive groups is not supported");
        return -1;
    }
    if (weight->sizes[0] < 1 || weight->sizes[0] % groups != 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "Given groups=%ld, expected weight to be %s %ld at dimension 0, but got "
                     "weight of size %s instead", groups,
                     weight->sizes[0] < 1 ? "at least" : "divisible by",
                     weight->sizes[0] < 1 ? 1L : groups, em_tshape(weight));
        return -1;
    }
    p->G = groups;
    p->N = input->sizes[0];
    p->C = input->sizes[1];
    if (!p->transposed) {
        if (p->C != weight->sizes[1] * groups)
            return channels_error("groups", groups, input, weight, weight->sizes[1] * groups);
        p->Cout = weight->sizes[0];
    }
    else {
        if (p->C != weight->sizes[0])
            return channels_error("transposed", 1, input, weight, weight->sizes[0]);
        p->Cout = weight->sizes[1] * groups;
    }
    if (bias != Py_None) {
        em_Tensor *b = (em_Tensor *)bias;
        if (b->ndim != 1 || b->sizes[0] != p->Cout) {
            PyErr_Format(PyExc_RuntimeError,
                         "Given weight of size %s, expected bias to be 1-dimensional with %zd "
                         "elements, but got bias of size %s instead", em_tshape(weight),
                         p->Cout, em_tshape(b));
            return -1;
        }
    }
    /* 1-d runs as 2-d with a unit height */
    p->H = nsp == 2 ? input->sizes[2] : 1;
    p->W = input->sizes[wd - 1];
    p->kh = nsp == 2 ? weight->sizes[2] : 1;
    p->kw = weight->sizes[wd - 1];
    p->sh = nsp == 2 ? stride[0] : 1;
    p->ph = nsp == 2 ? padding[0] : 0;
    p->dh = nsp == 2 ? dilation[0] : 1;
    p->oph = nsp == 2 ? opad[0] : 0;
    p->sw = stride[nsp - 1];
    p->pw = padding[nsp - 1];
    p->dw = dilation[nsp - 1];
    p->opw = opad[nsp - 1];
    if (!p->transposed) {
        Py_ssize_t eh = p->dh * (p->kh - 1) + 1, ew = p->dw * (p->kw - 1) + 1;
        Py_ssize_t ih = p->H + 2 * p->ph, iw = p->W + 2 * p->pw;
        if (ih < eh || iw < ew) {
            if (nsp == 2)
                PyErr_Format(PyExc_RuntimeError,
                             "Calculated padded input size per channel: (%zd x %zd). Kernel "
                             "size: (%zd x %zd). Kernel size can't be greater than actual "
                             "input size", ih, iw, eh, ew);
            else
                PyErr_Format(PyExc_RuntimeError,
                             "Calculated padded input size per channel: (%zd). Kernel size: "
                             "(%zd). Kernel size can't be greater than actual input size",
                             iw, ew);
            return -1;
        }
        p->OH = (ih - eh) / p->sh + 1;
        p->OW = (iw - ew) / p->sw + 1;
    }
    else {
        for (int i = 0; i < nsp; i++) {
            if (opad[i] >= stride[i] && opad[i] >= dilation[i]) {
                if (nsp == 2)
                    PyErr_Format(PyExc_RuntimeError,
                                 "output padding must be smaller than either stride or "
                                 "dilation, but got output_padding_height: %zd "
                                 "output_padding_width: %zd stride_height: %zd stride_width: "
                                 "%zd dilation_height: %zd dilation_width: %zd", opad[0],
                                 opad[1], stride[0], stride[1], dilation[0], dilation[1]);
                else
                    PyErr_Format(PyExc_RuntimeError,
                                 "output padding must be smaller than either stride or "
                                 "dilation, but got output_padding: %zd stride: %zd "
                                 "dilation: %zd", opad[0], stride[0], dilation[0]);
                return -1;
            }
        }
        p->OH = (p->H - 1) * p->sh - 2 * p->ph + p->dh * (p->kh - 1) + p->oph + 1;
        p->OW = (p->W - 1) * p->sw - 2 * p->pw + p->dw * (p->kw - 1) + p->opw + 1;
        if (p->OH <= 0 || p->OW <= 0) {
            PyErr_Format(PyExc_RuntimeError,
                         "Given input size per channel: (%zd x %zd). Calculated output size "
                         "per channel: (%zd x %zd). Output size is too small", p->H, p->W,
                         p->OH, p->OW);
            return -1;
        }
    }
    /* PyTorch's CPU kernels: no bool one; integers other than int64 only in the plain
     * (undilated, untransposed) one. Empty batches never reach a kernel. */
    bool dilated = p->dh > 1 || p->dw > 1;
    if (p->N > 0 && (input->dtype == EM_BOOL ||
                     (em_is_int(input->dtype) && input->dtype != EM_INT64 &&
                      (dilated || p->transposed)))) {
        PyErr_Format(PyExc_NotImplementedError, "\"%s\" not implemented for '%s'",
                     p->transposed ? "slow_conv_transpose2d_out_cpu"
                     : dilated ? "slow_conv_dilated<>" : "slow_conv2d_cpu",
                     em_dtype_torch_name(input->dtype));
        return -1;
    }
    return 0;
}

/* Whether t is laid out channels-last ((N, H, W, C) in memory; a 3-d (N, C, L) tensor
 * counts as (N, C, 1, L), as PyTorch runs 1-d convolutions) and not plainly contiguous. */
static bool
is_channels_last(em_Tensor *t)
{
    if ((t->ndim != 4 && t->ndim != 3) || em_tensor_is_contiguous(t))
        return false;
    /* dims ordered from innermost to outermost: C, W, (H), N */
    static const int order4[4] = {1, 3, 2, 0}, order3[3] = {1, 2, 0};
    const int *order = t->ndim == 4 ? order4 : order3;
    Py_ssize_t expected = 1;
    for (int k = 0; k < t->ndim; k++) {
        int d = order[k];
        if (t->sizes[d] != 1 && t->strides[d] != expected)
            return false;
        expected *= t->sizes[d];
    }
    return true;
}

/* ------------------------------------------------------------------ loops */

#define IM2COL(T)                                                                        \
static void                                                                              \
im2col_##T(const T *x, T *cols, Py_ssize_t C, const conv_params *p)                      \
{                                                                                        \
    Py_ssize_t hw = p->H * p->W, ohw = p->OH * p->OW;                                    \
    for (Py_ssize_t c = 0; c < C; c++) {                                                 \
        const T *xc = x + c * hw;                                                        \
        for (Py_ssize_t ki = 0; ki < p->kh; ki++)                                        \
            for (Py_ssize_t kj = 0; kj < p->kw; kj++) {                                  \
                T *row = cols + ((c * p->kh + ki) * p->kw + kj) * ohw;                   \
                for (Py_ssize_t oh = 0; oh < p->OH; oh++) {                              \
                    Py_ssize_t ih = oh * p->sh - p->ph + ki * p->dh;                     \
                    T *r = row + oh * p->OW;                                             \
                    if (ih < 0 || ih >= p->H) {                                          \
                        for (Py_ssize_t ow = 0; ow < p->OW; ow++)                        \
                            r[ow] = 0;                                                   \
                        continue;                                                        \
                    }                                                                    \
                    const T *xr = xc + ih * p->W;                                        \
                    Py_ssize_t off = kj * p->dw - p->pw;                                 \
                    /* ow in [lo, hi) reads inside the row; the rest is padding */       \
                    Py_ssize_t lo = off >= 0 ? 0 : (-off + p->sw - 1) / p->sw;           \
                    Py_ssize_t hi = p->W - 1 - off < 0 ? 0 : (p->W - 1 - off) / p->sw + 1; \
                    if (hi > p->OW)                                                      \
                        hi = p->OW;                                                      \
                    if (lo > hi)                                                         \
                        lo = hi;                                                         \
                    for (Py_ssize_t ow = 0; ow < lo; ow++)                               \
                        r[ow] = 0;                                                       \
                    if (p->sw == 1)                                                      \
                        memcpy(r + lo, xr + lo + off, sizeof(T) * (size_t)(hi - lo));    \
                    else                                                                 \
                        for (Py_ssize_t ow = lo; ow < hi; ow++)                          \
                            r[ow] = xr[ow * p->sw + off];                                \
                    for (Py_ssize_t ow = hi; ow < p->OW; ow++)                           \
                        r[ow] = 0;                                                       \
                }                                                                        \
            }                                                                            \
    }                                                                                    \
}

/* cols: (Cout*kh*kw, H*W) of one image, added into out (Cout, OH, OW). */
#define COL2IM(T)                                                                        \
static void                                                                              \
col2im_##T(const T *cols, T *out, Py_ssize_t C, const conv_params *p)                    \
{                                                                                        \
    Py_ssize_t hw = p->H * p->W, ohw = p->OH * p->OW;                                    \
    for (Py_ssize_t c = 0; c < C; c++) {                                                 \
        T *oc = out + c * ohw;                                                           \
        for (Py_ssize_t ki = 0; ki < p->kh; ki++)                                        \
            for (Py_ssize_t kj = 0; kj < p->kw; kj++) {                                  \
                const T *row = cols + ((c * p->kh + ki) * p->kw + kj) * hw;              \
                for (Py_ssize_t i = 0; i < p->H; i++) {                                  \
                    Py_ssize_t oh = i * p->sh - p->ph + ki * p->dh;                      \
                    if (oh < 0 || oh >= p->OH)                                           \
                        continue;                                                        \
                    T *orow = oc + oh * p->OW;                                           \
                    const T *r = row + i * p->W;                                         \
                    Py_ssize_t off = kj * p->dw - p->pw;                                 \
                    for (Py_ssize_t j = 0; j < p->W; j++) {                              \
                        Py_ssize_t ow = j * p->sw + off;                                 \
                        if (ow >= 0 && ow < p->OW)                                       \
                            orow[ow] += r[j];                                            \
                    }                                                                    \
                }                                                                        \
            }                                                                            \
    }                                                                                    \
}

#define ADD_BIAS(T)                                                                      \
static void                                                                              \
add_bias_##T(T *out, const T *bias, Py_ssize_t N, Py_ssize_t C, Py_ssize_t hw)           \
{                                                                                        \
    for (Py_ssize_t n = 0; n < N; n++)                                                   \
        for (Py_ssize_t c = 0; c < C; c++) {                                             \
            T b = bias[c], *o = out + (n * C + c) * hw;                                  \
            for (Py_ssize_t i = 0; i < hw; i++)                                          \
                o[i] += b;                                                               \
        }                                                                                \
}

IM2COL(float)
IM2COL(double)
COL2IM(float)
COL2IM(double)
ADD_BIAS(float)
ADD_BIAS(double)

/* ------------------------------------------------------------------ blocked loops
 *
 * A float32 convolution (a float64 one when BLAS is at hand) never materialises an
 * image's whole column matrix: the columns of a block of P output positions (P chosen
 * so that the block, Cig*kh*kw x P, fits in about BLOCK_BYTES of cache) are gathered
 * into a scratch buffer and multiplied by the weight straight into the output
 * (float32: conv_loops.c's register-tiled loops; float64: one single-threaded BLAS
 * call); a transposed convolution multiplies a block of input positions by the
 * transposed weight into the scratch and scatters it back (col2im of the block). Images
 * are the units of work on the thread pool, each computed alone in a fixed order, so
 * results do not depend on the thread count. The weight gradient (conv_weight_grad)
 * multiplies the output gradient's blocks by the same gathered columns, accumulating
 * one partial sum per image, then adds the images' sums in order. */
#define BLOCK_BYTES (256 * 1024)
#define POOL_CONV_MIN (1 << 18)       /* multiply-adds from which images go to the pool */
#define UNIT_POSITIONS 256           /* positions of a unit of several small images */
#define MIN_UNITS 4

/* rows (c, ki, kj) of the columns of output positions [p0, p0 + P) of channels
 * [0, C) of one image x (C, H, W): cols (C*kh*kw, P), rows ld apart */
#define IM2COL_BLOCK(T)                                                                  \
static void                                                                              \
im2col_block_##T(const T *x, T *cols, Py_ssize_t C, Py_ssize_t p0, Py_ssize_t P,         \
                 Py_ssize_t ld, const conv_params *p)                                    \
{                                                                                        \
    Py_ssize_t hw = p->H * p->W;                                                         \
    for (Py_ssize_t c = 0; c < C; c++)                                                   \
        for (Py_ssize_t ki = 0; ki < p->kh; ki++)                                        \
            for (Py_ssize_t kj = 0; kj < p->kw; kj++) {                                  \
                T *row = cols + ((c * p->kh + ki) * p->kw + kj) * ld;                    \
                Py_ssize_t off = kj * p->dw - p->pw;                                     \
                Py_ssize_t lo = off >= 0 ? 0 : (-off + p->sw - 1) / p->sw;               \
                Py_ssize_t hi = p->W - 1 - off < 0 ? 0 : (p->W - 1 - off) / p->sw + 1;   \
                if (hi > p->OW)                                                          \
                    hi = p->OW;                                                          \
                if (lo > hi)                                                             \
                    lo = hi;                                                             \
                Py_ssize_t q = 0, oh = p0 / p->OW, ow0 = p0 % p->OW;                     \
                while (q < P) {                                                          \
                    Py_ssize_t seg = p->OW - ow0 < P - q ? p->OW - ow0 : P - q;          \
                    Py_ssize_t ih = oh * p->sh - p->ph + ki * p->dh, e = ow0 + seg;      \
                    T *r = row + q - ow0;          /* r[ow] for ow in [ow0, e) */        \
                    if (ih < 0 || ih >= p->H) {                                          \
                        for (Py_ssize_t ow = ow0; ow < e; ow++)                          \
                            r[ow] = 0;                                                   \
                    }                                                                    \
                    else {                                                               \
                        const T *xr = x + c * hw + ih * p->W;                            \
                        Py_ssize_t a = lo > ow0 ? lo : ow0, b = hi < e ? hi : e;         \
                        if (a > b)                                                       \
                            a = b;                                                       \
                        for (Py_ssize_t ow = ow0; ow < a; ow++)                          \
                            r[ow] = 0;                                                   \
                        if (p->sw == 1)                                                  \
                            memcpy(r + a, xr + a + off, sizeof(T) * (size_t)(b - a));    \
                        else                                                             \
                            for (Py_ssize_t ow = a; ow < b; ow++)                        \
                                r[ow] = xr[ow * p->sw + off];                            \
                        for (Py_ssize_t ow = b; ow < e; ow++)                            \
                            r[ow] = 0;                                                   \
                    }                                                                    \
                    q += seg;                                                            \
                    oh++;                                                                \
                    ow0 = 0;                                                             \
                }                                                                        \
            }                                                                            \
}

/* cols (C*kh*kw, P): the columns of a transposed convolution's input positions
 * [p0, p0 + P) (of H x W), added into out (C, OH, OW) */
#define COL2IM_BLOCK(T)                                                                  \
static void                                                                              \
col2im_block_##T(const T *cols, T *out, Py_ssize_t C, Py_ssize_t p0, Py_ssize_t P,       \
                 const conv_params *p)                                                   \
{                                                                                        \
    Py_ssize_t ohw = p->OH * p->OW;                                                      \
    for (Py_ssize_t c = 0; c < C; c++)                                                   \
        for (Py_ssize_t ki = 0; ki < p->kh; ki++)                                        \
            for (Py_ssize_t kj = 0; kj < p->kw; kj++) {                                  \
                const T *row = cols + ((c * p->kh + ki) * p->kw + kj) * P;               \
                Py_ssize_t off = kj * p->dw - p->pw;                                     \
                Py_ssize_t q = 0, i = p0 / p->W, j0 = p0 % p->W;                         \
                while (q < P) {                                                          \
                    Py_ssize_t seg = p->W - j0 < P - q ? p->W - j0 : P - q;              \
                    Py_ssize_t oh = i * p->sh - p->ph + ki * p->dh;                      \
                    if (oh >= 0 && oh < p->OH) {                                         \
                        T *orow = out + c * ohw + oh * p->OW;                            \
                        const T *r = row + q - j0;                                       \
                        for (Py_ssize_t j = j0; j < j0 + seg; j++) {                     \
                            Py_ssize_t ow = j * p->sw + off;                             \
                            if (ow >= 0 && ow < p->OW)                                   \
                                orow[ow] += r[j];                                        \
                        }                                                                \
                    }                                                                    \
                    q += seg;                                                            \
                    i++;                                                                 \
                    j0 = 0;                                                              \
                }                                                                        \
            }                                                                            \
}

IM2COL_BLOCK(float)
IM2COL_BLOCK(double)
COL2IM_BLOCK(float)
COL2IM_BLOCK(double)

typedef struct {
    const conv_params *p;
    em_dtype_t t;
    int itemsize;
    const char *x, *w;             /* input (N, C, H*W), weight; or (wgrad) x, gout */
    char *out;                     /* output (N, Cout, OH*OW); or (wgrad) per-image sums */
    Py_ssize_t P;                  /* positions per block */
    atomic_int failed;             /* a scratch allocation failed */
    Py_ssize_t imgs;               /* images per unit of work (wgrad; others 1) */
} blocked_job;

/* c = op(a) @ b (+ c) for one block: float32 by conv_loops.c's register-tiled loops,
 * float64 by BLAS. */
static void
block_gemm(em_dtype_t t, int ta, int64_t m, int64_t n, int64_t k, const void *a,
           int64_t lda, const void *b, int64_t ldb, bool acc, void *c, int64_t ldc)
{
    if (t == EM_FLOAT32)
        em_conv_gemm_f32(m, n, k, a, ta ? 1 : lda, ta ? lda : 1, b, ldb, c, ldc, acc);
    else
        em_blas_gemm(t, ta, 0, m, n, k, a, lda, b, ldb, acc, c, ldc);
}

/* Whether the blocked loops can run: float32 always, float64 with BLAS. */
static bool
blocked_ok(em_dtype_t t)
{
    return t == EM_FLOAT32 || em_blas_available();
}

/* Positions per block: the block's columns (rows x P) in about BLOCK_BYTES, a multiple
 * of 16, at least 16, at most all of them. */
static Py_ssize_t
block_positions(Py_ssize_t rows, Py_ssize_t total, int itemsize)
{
    Py_ssize_t P = BLOCK_BYTES / (rows * itemsize > 0 ? rows * itemsize : 1) / 16 * 16;
    if (P < 16)
        P = 16;
    return P < total ? P : total;
}

static bool
conv_pointwise(const conv_params *p)
{
    return p->kh * p->kw == 1 && p->sh == 1 && p->sw == 1 && p->ph == 0 && p->pw == 0;
}

/* The sizes a block job's images share, and its scratch buffer. */
typedef struct {
    Py_ssize_t G, Cig, Cog, K;     /* groups, in/out channels per group, kernel taps */
    Py_ssize_t hw, ohw, sz;        /* input and output positions per channel, item size */
    char *scratch;                 /* rows x P items, or NULL for no rows */
} block_setup;

/* The common start of the block loops: b filled from job j and a scratch of `rows`
 * rows of P items (none when rows is 0); false (j->failed set) when it cannot be
 * allocated. */
static bool
block_begin(blocked_job *j, Py_ssize_t rows, block_setup *b)
{
    const conv_params *p = j->p;
    b->G = p->G;
    b->Cig = p->C / p->G;
    b->Cog = p->Cout / p->G;
    b->K = p->kh * p->kw;
    b->hw = p->H * p->W;
    b->ohw = p->OH * p->OW;
    b->sz = j->itemsize;
    b->scratch = NULL;
    if (rows == 0)
        return true;
    b->scratch = malloc((size_t)(rows * j->P * b->sz));
    if (b->scratch == NULL) {
        atomic_store(&j->failed, 1);
        return false;
    }
    return true;
}

/* Images per unit of work of a float32 product over small images (fewer than
 * UNIT_POSITIONS / 2 output positions): UNIT_POSITIONS / positions of them, their
 * columns side by side in one deeper block, leaving at least MIN_UNITS units (when there
 * are as many images); 1 otherwise. The grouping depends on the sizes alone. */
static Py_ssize_t
images_per_unit(em_dtype_t t, Py_ssize_t N, Py_ssize_t positions)
{
    if (t != EM_FLOAT32 || positions <= 0 || positions >= UNIT_POSITIONS / 2)
        return 1;
    Py_ssize_t most = (N + MIN_UNITS - 1) / MIN_UNITS, imgs = UNIT_POSITIONS / positions;
    imgs = imgs < most ? imgs : most;
    return imgs > 1 ? imgs : 1;
}

/* float32 forward units of j->imgs whole images: their columns side by side (CK, npos),
 * one product per group into a (Cog, npos) scratch, then each image's part into out */
static void
forward_units_f32(blocked_job *j, const block_setup *b, int64_t u0, int64_t u1)
{
    const conv_params *p = j->p;
    Py_ssize_t Cig = b->Cig, Cog = b->Cog, CK = b->Cig * b->K, hw = b->hw, ohw = b->ohw;
    float *cols = (float *)b->scratch, *prod = cols + CK * j->P;
    for (int64_t u = u0; u < u1; u++) {
        Py_ssize_t i0 = u * j->imgs, i1 = i0 + j->imgs < p->N ? i0 + j->imgs : p->N;
        Py_ssize_t npos = (i1 - i0) * ohw;
        for (Py_ssize_t g = 0; g < b->G; g++) {
            for (Py_ssize_t i = i0; i < i1; i++)
                im2col_block_float((const float *)j->x + (i * p->C + g * Cig) * hw,
                                   cols + (i - i0) * ohw, Cig, 0, ohw, npos, p);
            em_conv_gemm_f32(Cog, npos, CK, (const float *)j->w + g * Cog * CK, CK, 1, cols,
                             npos, prod, npos, 0);
            for (Py_ssize_t i = i0; i < i1; i++) {
                float *og = (float *)j->out + (i * p->Cout + g * Cog) * ohw;
                for (Py_ssize_t co = 0; co < Cog; co++)
                    memcpy(og + co * ohw, prod + co * npos + (i - i0) * ohw,
                           sizeof(float) * (size_t)ohw);
            }
        }
    }
}

static void
forward_images(void *ctx, int64_t n0, int64_t n1)
{
    blocked_job *j = ctx;
    const conv_params *p = j->p;
    bool pw = conv_pointwise(p);
    block_setup b;
    if (j->imgs > 1) {
        if (!block_begin(j, p->C / p->G * p->kh * p->kw + p->Cout / p->G, &b))
            return;
        forward_units_f32(j, &b, n0, n1);
        free(b.scratch);
        return;
    }
    if (!block_begin(j, pw ? 0 : p->C / p->G * p->kh * p->kw, &b))
        return;
    Py_ssize_t G = b.G, Cig = b.Cig, Cog = b.Cog, K = b.K, hw = b.hw, ohw = b.ohw, sz = b.sz;
    char *scratch = b.scratch;
    for (int64_t n = n0; n < n1; n++)
        for (Py_ssize_t g = 0; g < G; g++) {
            const char *xg = j->x + (n * p->C + g * Cig) * hw * sz;
            const char *wg = j->w + g * Cog * Cig * K * sz;
            char *og = j->out + (n * p->Cout + g * Cog) * ohw * sz;
            for (Py_ssize_t p0 = 0; p0 < ohw; p0 += j->P) {
                Py_ssize_t np = ohw - p0 < j->P ? ohw - p0 : j->P;
                if (pw) {
                    block_gemm(j->t, 0, Cog, np, Cig, wg, Cig, xg + p0 * sz, hw, false,
                               og + p0 * sz, ohw);
                    continue;
                }
                if (j->t == EM_FLOAT32)
                    im2col_block_float((const float *)xg, (float *)scratch, Cig, p0, np, np, p);
                else
                    im2col_block_double((const double *)xg, (double *)scratch, Cig, p0, np, np,
                                        p);
                block_gemm(j->t, 0, Cog, np, Cig * K, wg, Cig * K, scratch, np, false,
                           og + p0 * sz, ohw);
            }
        }
    free(scratch);
}

/* the transposed convolution: out zeroed beforehand */
static void
transposed_images(void *ctx, int64_t n0, int64_t n1)
{
    blocked_job *j = ctx;
    const conv_params *p = j->p;
    block_setup b;
    if (!block_begin(j, p->Cout / p->G * p->kh * p->kw, &b))
        return;
    Py_ssize_t G = b.G, Cig = b.Cig, Cog = b.Cog, K = b.K, hw = b.hw, ohw = b.ohw, sz = b.sz;
    char *scratch = b.scratch;
    for (int64_t n = n0; n < n1; n++)
        for (Py_ssize_t g = 0; g < G; g++) {
            const char *xg = j->x + (n * p->C + g * Cig) * hw * sz;
            const char *wg = j->w + g * Cig * Cog * K * sz;       /* (Cig, Cog*K) */
            char *og = j->out + (n * p->Cout + g * Cog) * ohw * sz;
            for (Py_ssize_t p0 = 0; p0 < hw; p0 += j->P) {
                Py_ssize_t np = hw - p0 < j->P ? hw - p0 : j->P;
                block_gemm(j->t, 1, Cog * K, np, Cig, wg, Cog * K, xg + p0 * sz, hw, false,
                           scratch, np);
                if (j->t == EM_FLOAT32)
                    col2im_block_float((const float *)scratch, (float *)og, Cog, p0, np, p);
                else
                    col2im_block_double((const double *)scratch, (double *)og, Cog, p0, np, p);
            }
        }
    free(scratch);
}

/* float32 weight gradient units of j->imgs whole images each (images smaller than a
 * block): unit u's sum (its images' columns side by side, one product of depth imgs *
 * OH*OW per group) into part u */
static void
wgrad_units_f32(blocked_job *j, const block_setup *b, Py_ssize_t CK, float *goT, int64_t u0,
                int64_t u1)
{
    const conv_params *p = j->p;
    Py_ssize_t Cig = b->Cig, Cog = b->Cog, hw = b->hw, ohw = b->ohw;
    float *cols = (float *)b->scratch;
    for (int64_t u = u0; u < u1; u++) {
        Py_ssize_t i0 = u * j->imgs, i1 = i0 + j->imgs < p->N ? i0 + j->imgs : p->N;
        Py_ssize_t npos = (i1 - i0) * ohw;
        for (Py_ssize_t g = 0; g < b->G; g++) {
            for (Py_ssize_t i = i0; i < i1; i++) {
                const float *xg = (const float *)j->x + (i * p->C + g * Cig) * hw;
                const float *gb = (const float *)j->w + (i * p->Cout + g * Cog) * ohw;
                Py_ssize_t at = (i - i0) * ohw;
                im2col_block_float(xg, cols + at, Cig, 0, ohw, npos, p);
                for (Py_ssize_t co = 0; co < Cog; co++)
                    for (Py_ssize_t q = 0; q < ohw; q++)
                        goT[(at + q) * Cog + co] = gb[co * ohw + q];
            }
            float *og = (float *)j->out + (u * p->Cout + g * Cog) * CK;
            em_conv_gemm_f32(CK, Cog, npos, cols, npos, 1, goT, Cog, og, Cog, 0);
        }
    }
}

/* weight gradient of the forward convolution p of x giving gout: per image n,
 * out[n] (Cout, Cig*K) = sum over blocks of gout[n] (Cog, P) @ columns(x[n])^T */
static void
wgrad_images(void *ctx, int64_t n0, int64_t n1)
{
    blocked_job *j = ctx;
    const conv_params *p = j->p;
    bool pw = conv_pointwise(p), f32 = j->t == EM_FLOAT32;
    Py_ssize_t CK = p->C / p->G * p->kh * p->kw;
    /* float32: the product is taken transposed, columns (CK, P) @ gout^T (P, Cog) into
     * a (CK, Cog) sum per image (conv_loops.c's loops want the right operand's rows
     * contiguous; gout's block is the small one to transpose) */
    block_setup b;
    if (!block_begin(j, CK + (f32 ? p->Cout / p->G : 0), &b))
        return;
    Py_ssize_t G = b.G, Cig = b.Cig, Cog = b.Cog, hw = b.hw, ohw = b.ohw, sz = b.sz;
    char *scratch = b.scratch;
    float *goT = f32 ? (float *)(scratch + CK * j->P * sz) : NULL;
    if (j->imgs > 1) {
        wgrad_units_f32(j, &b, CK, goT, n0, n1);
        free(scratch);
        return;
    }
    for (int64_t n = n0; n < n1; n++)
        for (Py_ssize_t g = 0; g < G; g++) {
            const char *xg = j->x + (n * p->C + g * Cig) * hw * sz;
            const char *gg = j->w + (n * p->Cout + g * Cog) * ohw * sz;
            char *og = j->out + (n * p->Cout + g * Cog) * CK * sz;
            for (Py_ssize_t p0 = 0; p0 < ohw; p0 += j->P) {
                Py_ssize_t np = ohw - p0 < j->P ? ohw - p0 : j->P;
                const char *cols = xg + p0 * sz;
                Py_ssize_t ldc = hw;
                if (!pw) {
                    if (f32)
                        im2col_block_float((const float *)xg, (float *)scratch, Cig, p0, np, np, p);
                    else
                        im2col_block_double((const double *)xg, (double *)scratch, Cig, p0, np,
                                            np, p);
                    cols = scratch;
                    ldc = np;
                }
                if (f32) {
                    const float *gb = (const float *)(gg + p0 * sz);
                    for (Py_ssize_t co = 0; co < Cog; co++)
                        for (Py_ssize_t q = 0; q < np; q++)
                            goT[q * Cog + co] = gb[co * ohw + q];
                    em_conv_gemm_f32(CK, Cog, np, (const float *)cols, ldc, 1, goT, Cog,
                                     (float *)og, Cog, p0 > 0);
                }
                else
                    em_blas_gemm(j->t, 0, 1, Cog, CK, np, gg + p0 * sz, ohw, cols, ldc, p0 > 0,
                                 og, CK);
            }
        }
    free(scratch);
}

/* Runs fn over the images of the block job of p in dtype t (operands x and w into out,
 * blocks of `rows` rows of columns of the `positions` positions; macs multiply-adds in
 * all; units of `imgs` images) on the pool (BLAS single-threaded meanwhile): 0, or -1
 * with an exception. */
static int
run_images(em_range_fn fn, const conv_params *p, em_dtype_t t, const void *x, const void *w,
           void *out, Py_ssize_t rows, Py_ssize_t positions, double macs, Py_ssize_t imgs)
{
    int sz = t == EM_FLOAT32 ? 4 : 8;
    /* units of several images take their whole positions in one block */
    Py_ssize_t P = imgs > 1 ? positions : block_positions(rows, positions, sz);
    blocked_job job = {p, t, sz, x, w, out, P, 0, imgs};
    blocked_job *j = &job;
    Py_ssize_t units = (p->N + imgs - 1) / imgs;
    bool parallel = units > 1 && em_pool_threads() > 1 && macs >= POOL_CONV_MIN;
    int restore = parallel ? em_blas_single() : 0;
    int st = em_parallel_for(fn, j, units, 1, parallel);
    em_blas_restore(restore);
    if (st == 0 && atomic_load(&j->failed)) {
        PyErr_NoMemory();
        st = -1;
    }
    return st;
}

/* ------------------------------------------------------------------ the kernel */

/* A C-contiguous, aligned array of t's values in the NumPy type npy (new reference). */
static PyArrayObject *
as_compute(em_Tensor *t, int npy)
{
    PyArray_Descr *d = PyArray_DescrFromType(npy);
    return (PyArrayObject *)PyArray_FromAny((PyObject *)t->array, d, 0, 0,
                                            NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED |
                                            NPY_ARRAY_FORCECAST, NULL);
}

static PyArrayObject *
reshaped(PyArrayObject *a, int nd, const npy_intp *dims)
{
    PyArray_Dims shape = {(npy_intp *)dims, nd};
    return (PyArrayObject *)PyArray_Newshape(a, &shape, NPY_CORDER);
}

static PyArrayObject *
new_array(int nd, const npy_intp *dims, int npy, bool zero)
{
    return (PyArrayObject *)(zero ? PyArray_ZEROS(nd, (npy_intp *)dims, npy, 0)
                                  : PyArray_EMPTY(nd, (npy_intp *)dims, npy, 0));
}

/* matmul(a, b, out=out) in the compute dtype. */
static int
matmul_into(PyObject *matmul, PyArrayObject *a, PyArrayObject *b, PyArrayObject *out,
            em_dtype_t compute)
{
    PyObject *ins[2] = {(PyObject *)a, (PyObject *)b};
    return em_ufunc_call(matmul, ins, 2, out, compute, compute);
}

/* The forward convolution: out (N, Cout, OH*OW) in the compute type. */
static int
conv_forward(PyObject *matmul, const conv_params *p, PyArrayObject *x, PyArrayObject *w,
             PyArrayObject *out, int npy, em_dtype_t compute)
{
    Py_ssize_t G = p->G, Cig = p->C / G, Cog = p->Cout / G, K = p->kh * p->kw;
    Py_ssize_t ohw = p->OH * p->OW;
    if (blocked_ok(compute)) {
        Py_ssize_t imgs = images_per_unit(compute, p->N, ohw);
        return run_images(forward_images, p, compute, PyArray_DATA(x), PyArray_DATA(w),
                          PyArray_DATA(out), Cig * K, imgs * ohw,
                          (double)p->N * p->Cout * Cig * K * ohw, imgs);
    }
    PyArrayObject *cols = NULL, *cols4 = NULL, *w3 = NULL, *out4 = NULL;
    int st = -1;
    bool pointwise = K == 1 && p->sh == 1 && p->sw == 1 && p->ph == 0 && p->pw == 0;
    if (pointwise) {
        cols = x;
        Py_INCREF(cols);
    }
    else {
        npy_intp cd[3] = {p->N, p->C * K, ohw};
        cols = new_array(3, cd, npy, false);
        if (cols == NULL)
            goto done;
        Py_ssize_t xs = p->C * p->H * p->W, cs = p->C * K * ohw;
        char *xd = PyArray_DATA(x), *cdp = PyArray_DATA(cols);
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t n = 0; n < p->N; n++) {
            if (npy == NPY_FLOAT)
                im2col_float((float *)xd + n * xs, (float *)cdp + n * cs, p->C, p);
            else
                im2col_double((double *)xd + n * xs, (double *)cdp + n * cs, p->C, p);
        }
        Py_END_ALLOW_THREADS
    }
    npy_intp c4[4] = {p->N, G, Cig * K, ohw}, w3d[3] = {G, Cog, Cig * K},
             o4[4] = {p->N, G, Cog, ohw};
    if ((cols4 = reshaped(cols, 4, c4)) == NULL || (w3 = reshaped(w, 3, w3d)) == NULL ||
        (out4 = reshaped(out, 4, o4)) == NULL)
        goto done;
    st = matmul_into(matmul, w3, cols4, out4, compute);
done:
    Py_XDECREF(cols);
    Py_XDECREF(cols4);
    Py_XDECREF(w3);
    Py_XDECREF(out4);
    return st;
}

/* A transposed convolution of stride 1 (no output padding, padding at most the
 * kernel's dilated extent) is the forward convolution of its input with the weight's
 * channels swapped within each group and its taps reversed, padded by
 * dilation * (kernel - 1) - padding: the blocked forward loops then compute it, their
 * product as deep as Cout/G * kh * kw (the gradient of a stride-1 convolution's input). */
static int
transposed_as_forward(const conv_params *p, PyArrayObject *x, PyArrayObject *w,
                      PyArrayObject *out, int npy, em_dtype_t compute)
{
    Py_ssize_t G = p->G, Cig = p->C / G, Cog = p->Cout / G, kh = p->kh, kw = p->kw;
    Py_ssize_t K = kh * kw, sz = npy == NPY_FLOAT ? 4 : 8;
    char *wf = malloc((size_t)(p->Cout * Cig * K * sz)), *wd = PyArray_DATA(w);
    if (wf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    /* w (C, Cog, kh, kw) -> wf (Cout, Cig, kh, kw): wf[g Cog + co, ci, i, j] =
     * w[g Cig + ci, co, kh - 1 - i, kw - 1 - j] */
    for (Py_ssize_t g = 0; g < G; g++)
        for (Py_ssize_t co = 0; co < Cog; co++)
            for (Py_ssize_t ci = 0; ci < Cig; ci++)
                for (Py_ssize_t t = 0; t < K; t++) {
                    Py_ssize_t dst = (((g * Cog + co) * Cig + ci) * K + t) * sz;
                    Py_ssize_t src = (((g * Cig + ci) * Cog + co) * K + (K - 1 - t)) * sz;
                    memcpy(wf + dst, wd + src, (size_t)sz);
                }
    conv_params q = *p;
    q.transposed = false;
    q.ph = p->dh * (kh - 1) - p->ph;
    q.pw = p->dw * (kw - 1) - p->pw;
    Py_ssize_t imgs = images_per_unit(compute, q.N, q.OH * q.OW);
    int st = run_images(forward_images, &q, compute, PyArray_DATA(x), wf, PyArray_DATA(out),
                        Cig * K, imgs * q.OH * q.OW,
                        (double)q.N * q.Cout * Cig * K * q.OH * q.OW, imgs);
    free(wf);
    return st;
}

/* The transposed convolution: out (N, Cout, OH*OW), zeroed, in the compute type. */
static int
conv_transposed(PyObject *matmul, const conv_params *p, PyArrayObject *x, PyArrayObject *w,
                PyArrayObject *out, int npy, em_dtype_t compute)
{
    Py_ssize_t G = p->G, Cig = p->C / G, Cog = p->Cout / G, K = p->kh * p->kw;
    Py_ssize_t hw = p->H * p->W;
    if (blocked_ok(compute) && p->sh == 1 && p->sw == 1 && p->oph == 0 && p->opw == 0 &&
        p->ph <= p->dh * (p->kh - 1) && p->pw <= p->dw * (p->kw - 1))
        return transposed_as_forward(p, x, w, out, npy, compute);
    if (blocked_ok(compute))
        return run_images(transposed_images, p, compute, PyArray_DATA(x), PyArray_DATA(w),
                          PyArray_DATA(out), Cog * K, hw, (double)p->N * p->C * Cog * K * hw, 1);
    PyArrayObject *w3 = NULL, *wt = NULL, *x4 = NULL, *cols = NULL;
    int st = -1;
    npy_intp w3d[3] = {G, Cig, Cog * K}, x4d[4] = {p->N, G, Cig, hw},
             cd[4] = {p->N, G, Cog * K, hw};
    if ((w3 = reshaped(w, 3, w3d)) == NULL ||
        (wt = (PyArrayObject *)PyArray_SwapAxes(w3, 1, 2)) == NULL ||
        (x4 = reshaped(x, 4, x4d)) == NULL || (cols = new_array(4, cd, npy, false)) == NULL)
        goto done;
    if (matmul_into(matmul, wt, x4, cols, compute) < 0)
        goto done;
    Py_ssize_t cs = p->Cout * K * hw, os = p->Cout * p->OH * p->OW;
    char *cdp = PyArray_DATA(cols), *od = PyArray_DATA(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t n = 0; n < p->N; n++) {
        if (npy == NPY_FLOAT)
            col2im_float((float *)cdp + n * cs, (float *)od + n * os, p->Cout, p);
        else
            col2im_double((double *)cdp + n * cs, (double *)od + n * os, p->Cout, p);
    }
    Py_END_ALLOW_THREADS
    st = 0;
done:
    Py_XDECREF(w3);
    Py_XDECREF(wt);
    Py_XDECREF(x4);
    Py_XDECREF(cols);
    return st;
}

/* convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
 *             groups) */
static PyObject *
k_convolution(em_Op *op, PyObject **args)
{
    em_Tensor *input = (em_Tensor *)args[0], *weight = (em_Tensor *)args[1];
    PyObject *bias = args[2];
    if (em_refuse_complex(op, args[0]) < 0 || em_refuse_complex(op, args[1]) < 0 ||
        em_refuse_complex(op, bias) < 0)
        return NULL;
    conv_params p = {0};
    if (conv_setup(args, &p) < 0)
        return NULL;
    em_Geom g = {.ndim = input->ndim, .dtype = input->dtype};
    g.sizes[0] = p.N;
    g.sizes[1] = p.Cout;
    if (p.nsp == 2)
        g.sizes[2] = p.OH;
    g.sizes[g.ndim - 1] = p.OW;
    em_contiguous_strides(&g);
    bool channels_last = is_channels_last(input) || is_channels_last(weight);
    if (channels_last) {
        /* (N, C, [H,] W) laid out as (N, [H,] W, C) */
        g.strides[1] = 1;
        g.strides[g.ndim - 1] = p.Cout;
        if (p.nsp == 2)
            g.strides[2] = p.Cout * p.OW;
        g.strides[0] = p.Cout * p.OW * p.OH;
    }
    bool meta = em_tls.mode == EM_MODE_META || em_is_meta(input) || em_is_meta(weight) ||
                (bias != Py_None && em_is_meta((em_Tensor *)bias));
    em_Tensor *out = channels_last ? em_tensor_empty_like_layout(&g, meta)
                                   : em_tensor_empty(&g, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;

    em_dtype_t compute = input->dtype == EM_FLOAT32 || em_is_half(input->dtype)
                             ? EM_FLOAT32 : EM_FLOAT64;
    int npy = compute == EM_FLOAT32 ? NPY_FLOAT : NPY_DOUBLE;
    PyArrayObject *x = NULL, *w = NULL, *b = NULL, *res = NULL;
    npy_intp rd[3] = {p.N, p.Cout, p.OH * p.OW};
    if ((x = as_compute(input, npy)) == NULL || (w = as_compute(weight, npy)) == NULL ||
        (bias != Py_None && (b = as_compute((em_Tensor *)bias, npy)) == NULL))
        goto error;
    bool direct = !channels_last && compute == input->dtype;   /* compute into out */
    if (direct) {
        res = reshaped(out->array, 3, rd);
        if (res == NULL)
            goto error;
        if (p.transposed || p.C == 0)
            PyArray_FILLWBYTE(res, 0);
    }
    else if ((res = new_array(3, rd, npy, p.transposed || p.C == 0)) == NULL)
        goto error;
    if (p.C > 0) {
        int st = p.transposed ? conv_transposed(op->ufunc, &p, x, w, res, npy, compute)
                              : conv_forward(op->ufunc, &p, x, w, res, npy, compute);
        if (st < 0)
            goto error;
    }
    if (b != NULL) {
        char *od = PyArray_DATA(res), *bd = PyArray_DATA(b);
        Py_BEGIN_ALLOW_THREADS
        if (npy == NPY_FLOAT)
            add_bias_float((float *)od, (float *)bd, p.N, p.Cout, p.OH * p.OW);
        else
            add_bias_double((double *)od, (double *)bd, p.N, p.Cout, p.OH * p.OW);
        Py_END_ALLOW_THREADS
    }
    if (!direct) {
        npy_intp od[EM_MAX_DIMS];
        for (int i = 0; i < g.ndim; i++)
            od[i] = g.sizes[i];
        PyArrayObject *r = reshaped(res, g.ndim, od);
        if (r == NULL || PyArray_CopyInto(out->array, r) < 0) {
            Py_XDECREF(r);
            goto error;
        }
        Py_DECREF(r);
    }
    Py_DECREF(x);
    Py_DECREF(w);
    Py_XDECREF(b);
    Py_DECREF(res);
    return (PyObject *)out;
error:
    Py_XDECREF(x);
    Py_XDECREF(w);
    Py_XDECREF(b);
    Py_XDECREF(res);
    Py_DECREF(out);
    return NULL;
}

/* im2col(self, kernel_size, dilation, padding, stride): (N, C, H, W) -> the receptive
 * fields as columns, (N, C*kh*kw, OH*OW) (nn.functional.unfold). float32/float64 here;
 * other dtypes, meta inputs and errors take the decomposition. */
static PyObject *
k_im2col(em_Op *op, PyObject **args)
{
    em_Tensor *x = (em_Tensor *)args[0];
    Py_ssize_t k[2], d[2], p[2], s[2];
    PyObject *lists[4] = {args[1], args[2], args[3], args[4]};
    Py_ssize_t *outs[4] = {k, d, p, s};
    bool fast = em_tls.mode != EM_MODE_META && !em_is_meta(x) && x->ndim == 4 &&
                (x->dtype == EM_FLOAT32 || x->dtype == EM_FLOAT64);
    for (int i = 0; fast && i < 4; i++)
        fast = PyTuple_Check(lists[i]) && PyTuple_GET_SIZE(lists[i]) == 2;
    for (int i = 0; fast && i < 4; i++) {
        outs[i][0] = PyLong_AsSsize_t(PyTuple_GET_ITEM(lists[i], 0));
        outs[i][1] = PyLong_AsSsize_t(PyTuple_GET_ITEM(lists[i], 1));
    }
    PyErr_Clear();
    conv_params q = {0};
    if (fast) {
        q.N = x->sizes[0];
        q.C = x->sizes[1];
        q.H = x->sizes[2];
        q.W = x->sizes[3];
        q.kh = k[0], q.kw = k[1], q.dh = d[0], q.dw = d[1];
        q.ph = p[0], q.pw = p[1], q.sh = s[0], q.sw = s[1];
        fast = q.kh > 0 && q.kw > 0 && q.dh > 0 && q.dw > 0 && q.ph >= 0 && q.pw >= 0 &&
               q.sh > 0 && q.sw > 0;
        if (fast) {
            Py_ssize_t eh = q.dh * (q.kh - 1) + 1, ew = q.dw * (q.kw - 1) + 1;
            q.OH = (q.H + 2 * q.ph - eh) / q.sh + 1;
            q.OW = (q.W + 2 * q.pw - ew) / q.sw + 1;
            fast = q.H + 2 * q.ph >= eh && q.W + 2 * q.pw >= ew && q.N * q.C > 0;
        }
    }
    if (!fast)
        return em_decomposed_kernel(op, args);
    em_Geom g = {.ndim = 3, .dtype = x->dtype,
                 .sizes = {q.N, q.C * q.kh * q.kw, q.OH * q.OW}};
    em_contiguous_strides(&g);
    em_Tensor *out = em_tensor_empty(&g, false);
    if (out == NULL || out->numel == 0)
        return (PyObject *)out;
    int npy = x->dtype == EM_FLOAT32 ? NPY_FLOAT : NPY_DOUBLE;
    PyArrayObject *xa = as_compute(x, npy);
    if (xa == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    Py_ssize_t xs = q.C * q.H * q.W, cs = g.sizes[1] * g.sizes[2];
    char *xd = PyArray_DATA(xa), *cd = PyArray_DATA(out->array);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t n = 0; n < q.N; n++) {
        if (npy == NPY_FLOAT)
            im2col_float((float *)xd + n * xs, (float *)cd + n * cs, q.C, &q);
        else
            im2col_double((double *)xd + n * xs, (double *)cd + n * cs, q.C, &q);
    }
    Py_END_ALLOW_THREADS
    Py_DECREF(xa);
    return (PyObject *)out;
}

/* The weight gradient of p's 2-d convolution of x (N, C, H, W) whose output's gradient
 * is go (N, Cout, OH, OW), both C-contiguous of x's dtype (float32, or float64 with
 * BLAS), into out (Cout, C/G, kh, kw) by the blocked loops above, units of images summed
 * in order (so the bits do not depend on the threads): 0, or -1 with an exception. */
static int
grad_weight_blocked(const conv_params *p, em_dtype_t t, const char *xd, const char *gd,
                    char *od)
{
    Py_ssize_t groups = p->G, Cig = p->C / groups, K = p->kh * p->kw, R = p->Cout * Cig * K;
    int sz = t == EM_FLOAT32 ? 4 : 8;
    if (R == 0)
        return 0;
    if (p->N == 0 || p->OH * p->OW == 0) {
        memset(od, 0, (size_t)(R * sz));
        return 0;
    }
    /* small float32 images go several to a unit of work (images_per_unit: one product
     * per group, as deep as their positions, instead of one shallow product and one
     * partial sum per image) */
    Py_ssize_t ohw = p->OH * p->OW, imgs = images_per_unit(t, p->N, ohw);
    Py_ssize_t units = (p->N + imgs - 1) / imgs;
    char *part = malloc((size_t)(units * R * sz));
    if (part == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (run_images(wgrad_images, p, t, xd, gd, part, Cig * K, imgs * ohw,
                   (double)p->N * R * ohw, imgs) < 0) {
        free(part);
        return -1;
    }
    /* the units' sums added in order (float32's are (CK, Cout/G) per group:
     * transposed on the way) */
    if (sz == 4) {
        Py_ssize_t Cog = p->Cout / groups, CK = Cig * K;
        float *o = (float *)od;
        for (Py_ssize_t n = 0; n < units; n++)
            for (Py_ssize_t g = 0; g < groups; g++) {
                const float *q = (const float *)part + n * R + g * Cog * CK;
                float *og = o + g * Cog * CK;
                for (Py_ssize_t r = 0; r < CK; r++)
                    for (Py_ssize_t co = 0; co < Cog; co++)
                        og[co * CK + r] = n ? og[co * CK + r] + q[r * Cog + co] : q[r * Cog + co];
            }
    }
    else {
        double *o = (double *)od;
        memcpy(od, part, (size_t)(R * sz));
        for (Py_ssize_t n = 1; n < units; n++) {
            const double *q = (const double *)part + n * R;
            for (Py_ssize_t i = 0; i < R; i++)
                o[i] += q[i];
        }
    }
    free(part);
    return 0;
}

/* The same in float64 by the definition, with no BLAS: per weight element, the sum over
 * the samples and output positions of gradient times tap. */
static void
grad_weight_direct(const conv_params *p, const double *x, const double *go, double *out)
{
    Py_ssize_t Cig = p->C / p->G, Cog = p->Cout / p->G, ohw = p->OH * p->OW;
    for (Py_ssize_t co = 0; co < p->Cout; co++)
        for (Py_ssize_t ci = 0; ci < Cig; ci++)
            for (Py_ssize_t i = 0; i < p->kh; i++)
                for (Py_ssize_t j = 0; j < p->kw; j++) {
                    double acc = 0.0;
                    Py_ssize_t c = (co / Cog) * Cig + ci;
                    for (Py_ssize_t n = 0; n < p->N; n++)
                        for (Py_ssize_t oh = 0; oh < p->OH; oh++) {
                            Py_ssize_t h = oh * p->sh + i * p->dh - p->ph;
                            if (h < 0 || h >= p->H)
                                continue;
                            for (Py_ssize_t ow = 0; ow < p->OW; ow++) {
                                Py_ssize_t w = ow * p->sw + j * p->dw - p->pw;
                                if (w < 0 || w >= p->W)
                                    continue;
                                acc += go[(n * p->Cout + co) * ohw + oh * p->OW + ow] *
                                       x[((n * p->C + c) * p->H + h) * p->W + w];
                            }
                        }
                    out[((co * Cig + ci) * p->kh + i) * p->kw + j] = acc;
                }
}

/* _C._grad_conv_weight(input, grad_output, kh, kw, stride, padding, dilation, groups):
 * the weight gradient (Cout, C/groups, kh, kw) of a 2-d convolution of input
 * (N, C, H, W) whose output's gradient is grad_output (N, Cout, OH, OW), by the blocked
 * loops above; None when the case does not apply (not eager with grad mode off, not
 * contiguous float32/float64 of one dtype, no BLAS, or sizes that do not match), and
 * the backward formula computes it with ops. */
PyObject *
em_grad_conv_weight(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8)
        return PyErr_Format(PyExc_TypeError, "_grad_conv_weight takes 8 arguments");
    if (em_tls.mode != EM_MODE_EAGER || em_tls.grad_enabled || !em_Tensor_Check(args[0]) ||
        !em_Tensor_Check(args[1]) || !blocked_ok(((em_Tensor *)args[0])->dtype))
        Py_RETURN_NONE;
    em_Tensor *x = (em_Tensor *)args[0], *go = (em_Tensor *)args[1];
    if (em_is_meta(x) || em_is_meta(go) || x->dtype != go->dtype ||
        (x->dtype != EM_FLOAT32 && x->dtype != EM_FLOAT64) || x->ndim != 4 || go->ndim != 4 ||
        !PyArray_IS_C_CONTIGUOUS(x->array) || !PyArray_IS_C_CONTIGUOUS(go->array))
        Py_RETURN_NONE;
    conv_params p = {0};
    Py_ssize_t s[2], pd[2], d[2];
    p.nsp = 2;
    p.kh = PyLong_AsSsize_t(args[2]);
    p.kw = PyLong_AsSsize_t(args[3]);
    long groups = PyLong_AsLong(args[7]);
    if (PyErr_Occurred() || int_params(args[4], "stride", 2, s) < 0 ||
        int_params(args[5], "padding", 2, pd) < 0 || int_params(args[6], "dilation", 2, d) < 0)
        return NULL;
    p.N = x->sizes[0], p.C = x->sizes[1], p.H = x->sizes[2], p.W = x->sizes[3];
    p.Cout = go->sizes[1], p.G = groups;
    p.sh = s[0], p.sw = s[1], p.ph = pd[0], p.pw = pd[1], p.dh = d[0], p.dw = d[1];
    if (groups <= 0 || p.C % groups || p.Cout % groups || go->sizes[0] != p.N || p.kh <= 0 ||
        p.kw <= 0 || p.sh <= 0 || p.sw <= 0 || p.ph < 0 || p.pw < 0 || p.dh <= 0 || p.dw <= 0)
        Py_RETURN_NONE;
    Py_ssize_t eh = p.dh * (p.kh - 1) + 1, ew = p.dw * (p.kw - 1) + 1;
    if (p.H + 2 * p.ph < eh || p.W + 2 * p.pw < ew)
        Py_RETURN_NONE;
    p.OH = (p.H + 2 * p.ph - eh) / p.sh + 1;
    p.OW = (p.W + 2 * p.pw - ew) / p.sw + 1;
    if (p.OH != go->sizes[2] || p.OW != go->sizes[3])
        Py_RETURN_NONE;
    Py_ssize_t wsz[4] = {p.Cout, p.C / groups, p.kh, p.kw};
    em_Tensor *out = em_empty(4, wsz, x->dtype, false);
    if (out == NULL)
        return NULL;
    if (grad_weight_blocked(&p, x->dtype, PyArray_DATA(x->array), PyArray_DATA(go->array),
                            PyArray_DATA(out->array)) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return (PyObject *)out;
}

/* convolution_weight_grad(input, grad_output, kernel_size, stride, padding, dilation,
 * groups): the prim of the same gradient (any layout; float32, float64), so a compiled
 * graph runs it as an extern step with eager's bits. */
static PyObject *
k_convolution_weight_grad(em_Op *op, PyObject **args)
{
    em_Tensor *x = (em_Tensor *)args[0], *go = (em_Tensor *)args[1];
    conv_params p = {0};
    Py_ssize_t k[2], s[2], pd[2], d[2];
    p.nsp = 2;
    if (int_params(args[2], "kernel_size", 2, k) < 0 ||
        int_params(args[3], "stride", 2, s) < 0 || int_params(args[4], "padding", 2, pd) < 0 ||
        int_params(args[5], "dilation", 2, d) < 0)
        return NULL;
    p.G = PyLong_AsSsize_t(args[6]);
    if (p.G == -1 && PyErr_Occurred())
        return NULL;
    if (x->ndim != 4 || go->ndim != 4) {
        PyErr_Format(PyExc_RuntimeError, "convolution_weight_grad(): expected 4-d input and "
                     "grad_output, got %s and %s", em_tshape(x), em_tshape(go));
        return NULL;
    }
    if ((x->dtype != EM_FLOAT32 && x->dtype != EM_FLOAT64) || go->dtype != x->dtype) {
        PyErr_Format(PyExc_NotImplementedError, "convolution_weight_grad(): expected float32 "
                     "or float64 input and grad_output of one dtype");
        return NULL;
    }
    p.N = x->sizes[0], p.C = x->sizes[1], p.H = x->sizes[2], p.W = x->sizes[3];
    p.Cout = go->sizes[1];
    p.kh = k[0], p.kw = k[1], p.sh = s[0], p.sw = s[1], p.ph = pd[0], p.pw = pd[1];
    p.dh = d[0], p.dw = d[1];
    bool ok = p.G > 0 && p.C % p.G == 0 && p.Cout % p.G == 0 && go->sizes[0] == p.N &&
              p.kh > 0 && p.kw > 0 && p.sh > 0 && p.sw > 0 && p.ph >= 0 && p.pw >= 0 &&
              p.dh > 0 && p.dw > 0;
    Py_ssize_t eh = p.dh * (p.kh - 1) + 1, ew = p.dw * (p.kw - 1) + 1;
    ok = ok && p.H + 2 * p.ph >= eh && p.W + 2 * p.pw >= ew;
    if (ok) {
        p.OH = (p.H + 2 * p.ph - eh) / p.sh + 1;
        p.OW = (p.W + 2 * p.pw - ew) / p.sw + 1;
        ok = p.OH == go->sizes[2] && p.OW == go->sizes[3];
    }
    if (!ok) {
        PyErr_Format(PyExc_RuntimeError, "convolution_weight_grad(): grad_output %s is not "
                     "the output of a convolution of input %s by this geometry",
                     em_tshape(go), em_tshape(x));
        return NULL;
    }
    Py_ssize_t wsz[4] = {p.Cout, p.C / p.G, p.kh, p.kw};
    bool meta = em_tls.mode == EM_MODE_META || em_is_meta(x) || em_is_meta(go);
    em_Tensor *out = em_empty(4, wsz, x->dtype, meta);
    if (out == NULL || meta || out->numel == 0)
        return (PyObject *)out;
    int npy = x->dtype == EM_FLOAT32 ? NPY_FLOAT : NPY_DOUBLE;
    PyArrayObject *xa = NULL, *ga = NULL;
    if ((xa = as_compute(x, npy)) == NULL || (ga = as_compute(go, npy)) == NULL)
        goto error;
    if (blocked_ok(x->dtype)) {
        if (grad_weight_blocked(&p, x->dtype, PyArray_DATA(xa), PyArray_DATA(ga),
                                PyArray_DATA(out->array)) < 0)
            goto error;
    }
    else {
        Py_BEGIN_ALLOW_THREADS
        grad_weight_direct(&p, PyArray_DATA(xa), PyArray_DATA(ga), PyArray_DATA(out->array));
        Py_END_ALLOW_THREADS
    }
    Py_DECREF(xa);
    Py_DECREF(ga);
    return (PyObject *)out;
error:
    Py_XDECREF(xa);
    Py_XDECREF(ga);
    Py_DECREF(out);
    return NULL;
}

const em_KernelEntry em_conv_kernels[] = {
    {"convolution", k_convolution},
    {"im2col", k_im2col},
    {"convolution_weight_grad", k_convolution_weight_grad},
    {NULL, NULL},
};
