/* conv_loops.c: the float32 products of the eager convolution's blocks (conv.c), as
 * register-tiled C loops that read the gathered columns where they lie (no packing):
 *
 *   em_conv_gemm_f32: C (m x n) = A (m x k) B (k x n) (+ C), A read with any strides
 *     (its elements are broadcast), B's rows contiguous (loaded as vectors): the
 *     forward product weight @ columns and the transposed one weight^T @ input;
 *   em_conv_dot_f32: C (m x n) = G (m x P) X (n x P)^T (+ C), both rows contiguous:
 *     the weight gradient, output gradient @ columns^T, as dot products along P.
 *
 * BLAS (OpenBLAS) packs both operands on every call and handles the few rows of a
 * convolution's product (Cout / groups, often 16 to 64) poorly; these loops keep an
 * 8-row by 2-vector tile of the product in registers (AVX-512: 16 x 16 floats), or a
 * 4 by 2 tile of 8-float vectors (AVX2 and generic x86-64), chosen at run time. Every
 * sum runs in a fixed order (along k; a dot's 16 lanes added as a tree), so the results
 * do not depend on the machine's load or on the thread count.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "fp-contract=fast")
#endif
#include "kutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* vectors of 16, 8 and 4 floats: kutil.h's em_v16f, em_v8f, em_v4f */
#define LOAD(v, p) memcpy(&(v), (p), sizeof(v))
#define STORE(p, v) memcpy((p), &(v), sizeof(v))

/* One row tile of rows r0.. (mr of them; rows past m repeat the last, computed, never
 * stored) and NV vectors of VL columns at column j. */
#define GEMM_TILE(VT, VL, MR, NV)                                                        \
    {                                                                                    \
        VT x[MR][NV];                                                                    \
        for (int i = 0; i < MR; i++)                                                     \
            for (int h = 0; h < NV; h++)                                                 \
                x[i][h] = (VT){0};                                                       \
        const float *b = B + j;                                                          \
        for (int64_t p = 0; p < k; p++, b += ldb) {                                      \
            VT bv[NV];                                                                   \
            for (int h = 0; h < NV; h++)                                                 \
                LOAD(bv[h], b + h * VL);                                                 \
            for (int i = 0; i < MR; i++) {                                               \
                float s = a[i][p * acs];                                                 \
                for (int h = 0; h < NV; h++)                                             \
                    x[i][h] += s * bv[h];                                                \
            }                                                                            \
        }                                                                                \
        for (int i = 0; i < mr; i++)                                                     \
            for (int h = 0; h < NV; h++) {                                               \
                float *dst = C + (r0 + i) * ldc + j + h * VL;                            \
                VT v = x[i][h], old;                                                     \
                if (acc) {                                                               \
                    LOAD(old, dst);                                                      \
                    v += old;                                                            \
                }                                                                        \
                STORE(dst, v);                                                           \
            }                                                                            \
    }

#define GEMM_FN(NAME, ATTR, VT, VL, MR)                                                  \
    ATTR static void NAME(int64_t m, int64_t n, int64_t k, const float *A, int64_t ars,  \
                          int64_t acs, const float *B, int64_t ldb, float *C, int64_t ldc, \
                          int acc)                                                       \
    {                                                                                    \
        for (int64_t r0 = 0; r0 < m; r0 += MR) {                                         \
            int mr = m - r0 < MR ? (int)(m - r0) : MR;                                   \
            const float *a[MR];                                                          \
            for (int i = 0; i < MR; i++)                                                 \
                a[i] = A + (r0 + (i < mr ? i : mr - 1)) * ars;                           \
            int64_t j = 0;                                                               \
            for (; j + 2 * VL <= n; j += 2 * VL)                                         \
                GEMM_TILE(VT, VL, MR, 2)                                                 \
            for (; j + VL <= n; j += VL)                                                 \
                GEMM_TILE(VT, VL, MR, 1)                                                 \
            for (; j < n; j++)                                                           \
                for (int i = 0; i < mr; i++) {                                           \
                    float s = 0.0f;                                                      \
                    for (int64_t p = 0; p < k; p++)                                      \
                        s += a[i][p * acs] * B[p * ldb + j];                             \
                    float *dst = C + (r0 + i) * ldc + j;                                 \
                    *dst = acc ? *dst + s : s;                                           \
                }                                                                        \
        }                                                                                \
    }

/* C[i, j] (+)= sum_p G[i, p] X[j, p] in 4 x 4 tiles of 16-float lane sums, each added
 * as a tree (em_lanes_total; rows and columns past the edge repeat the last, never
 * stored), the P tail added in order. */
#define DOT_FN(NAME, ATTR)                                                               \
    ATTR static void NAME(int64_t m, int64_t n, int64_t P, const float *G, int64_t ldg,  \
                          const float *X, int64_t ldx, float *C, int64_t ldc, int acc)   \
    {                                                                                    \
        for (int64_t i0 = 0; i0 < m; i0 += 4) {                                          \
            int mi = m - i0 < 4 ? (int)(m - i0) : 4;                                     \
            const float *g[4];                                                           \
            for (int a = 0; a < 4; a++)                                                  \
                g[a] = G + (i0 + (a < mi ? a : mi - 1)) * ldg;                           \
            for (int64_t j0 = 0; j0 < n; j0 += 4) {                                      \
                int nj = n - j0 < 4 ? (int)(n - j0) : 4;                                 \
                const float *x[4];                                                       \
                for (int b = 0; b < 4; b++)                                              \
                    x[b] = X + (j0 + (b < nj ? b : nj - 1)) * ldx;                       \
                em_v16f s[4][4];                                                         \
                for (int a = 0; a < 4; a++)                                              \
                    for (int b = 0; b < 4; b++)                                          \
                        s[a][b] = (em_v16f){0};                                          \
                int64_t p = 0;                                                           \
                for (; p + 16 <= P; p += 16) {                                           \
                    em_v16f gv[4], xv[4];                                                \
                    for (int a = 0; a < 4; a++)                                          \
                        LOAD(gv[a], g[a] + p);                                           \
                    for (int b = 0; b < 4; b++)                                          \
                        LOAD(xv[b], x[b] + p);                                           \
                    for (int a = 0; a < 4; a++)                                          \
                        for (int b = 0; b < 4; b++)                                      \
                            s[a][b] += gv[a] * xv[b];                                    \
                }                                                                        \
                for (int a = 0; a < mi; a++)                                             \
                    for (int b = 0; b < nj; b++) {                                       \
                        float t = em_lanes_total(s[a][b]);                               \
                        for (int64_t q = p; q < P; q++)                                  \
                            t += g[a][q] * x[b][q];                                      \
                        float *dst = C + (i0 + a) * ldc + j0 + b;                        \
                        *dst = acc ? *dst + t : t;                                       \
                    }                                                                    \
            }                                                                            \
        }                                                                                \
    }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(EM_NO_CLONES)
#define HAVE_V4 1
GEMM_FN(gemm_v4, __attribute__((target("arch=x86-64-v4"))), em_v16f, 16, 8)
DOT_FN(dot_v4, __attribute__((target("arch=x86-64-v4"))))
GEMM_FN(gemm_v3, __attribute__((target("arch=x86-64-v3"))), em_v8f, 8, 4)
DOT_FN(dot_v3, __attribute__((target("arch=x86-64-v3"))))
#endif
GEMM_FN(gemm_generic, , em_v8f, 8, 4)
DOT_FN(dot_generic, )

/* Whether EMBER_LLVM_FEATURES, when set, enables feature (e.g. "avx2"): the one switch
 * that narrows the JIT's vectors narrows these loops too, so tests reach every path on
 * any host. */
static int
env_enables(const char *env, const char *feature)
{
    char want[32];
    if (env == NULL)
        return 1;
    if (snprintf(want, sizeof(want), "+%s", feature) >= (int)sizeof(want))
        return 0;
    const char *p = strstr(env, want);
    size_t n = strlen(want);
    /* "+avx512f" must not match inside "+avx512fp16" */
    while (p != NULL && p[n] != '\0' && p[n] != ',')
        p = strstr(p + 1, want);
    return p != NULL;
}

/* 2: AVX-512 (x86-64-v4), 1: AVX2 and FMA (x86-64-v3), 0: neither; the host's, no
 * more than EMBER_LLVM_FEATURES enables */
int
em_conv_cpu_level(void)
{
#ifdef HAVE_V4
    static int level = -1;
    if (level < 0) {
        const char *env = getenv("EMBER_LLVM_FEATURES");
        if (env != NULL && env[0] == '\0')
            env = NULL;
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
            env_enables(env, "avx512f") && env_enables(env, "avx512bw") &&
            env_enables(env, "avx512dq") && env_enables(env, "avx512vl"))
            level = 2;
        else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                 env_enables(env, "avx2") && env_enables(env, "fma"))
            level = 1;
        else
            level = 0;
    }
    return level;
#else
    return 0;
#endif
}

void
em_conv_gemm_f32(int64_t m, int64_t n, int64_t k, const float *A, int64_t ars, int64_t acs,
                 const float *B, int64_t ldb, float *C, int64_t ldc, int acc)
{
#ifdef HAVE_V4
    int level = em_conv_cpu_level();
    if (level == 2) {
        gemm_v4(m, n, k, A, ars, acs, B, ldb, C, ldc, acc);
        return;
    }
    if (level == 1) {
        gemm_v3(m, n, k, A, ars, acs, B, ldb, C, ldc, acc);
        return;
    }
#endif
    gemm_generic(m, n, k, A, ars, acs, B, ldb, C, ldc, acc);
}

void
em_conv_dot_f32(int64_t m, int64_t n, int64_t P, const float *G, int64_t ldg, const float *X,
                int64_t ldx, float *C, int64_t ldc, int acc)
{
#ifdef HAVE_V4
    int level = em_conv_cpu_level();
    if (level == 2) {
        dot_v4(m, n, P, G, ldg, X, ldx, C, ldc, acc);
        return;
    }
    if (level == 1) {
        dot_v3(m, n, P, G, ldg, X, ldx, C, ldc, acc);
        return;
    }
#endif
    dot_generic(m, n, P, G, ldg, X, ldx, C, ldc, acc);
}
