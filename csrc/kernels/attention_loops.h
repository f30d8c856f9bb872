/* attention_loops.h: the block loops of the fused attention kernels, for one element
 * type. attention.c includes this file twice, with T (float, double), SUF (f32, f64),
 * ITYPE (the integer of T's width), EXP and LOG defined; nothing else includes it.
 *
 * Every product is gemm(): C (m x n) = alpha * A (m x k) B (k x n) [+ C], A read with
 * any strides (its elements are broadcast), B with unit column stride (its rows are
 * loaded as vectors); a 4-row by 2-vector register tile. Products whose B would be a
 * transposed operand (Q K^T, dO V^T) read a block of K or V packed transposed first.
 */
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SUF)

typedef T FN(vec) __attribute__((vector_size(32)));

#define VL ((int64_t)(32 / sizeof(T)))

/* unaligned vector loads and stores (macros: a vector argument or return value of a
 * function would change the ABI between the target clones) */
#define VLOAD(v, p) memcpy(&(v), (p), sizeof(v))
#define VSTORE(p, v) memcpy((p), &(v), sizeof(v))

/* C = alpha * A B (+ C when acc). */
EM_CLONES static void
FN(gemm)(int64_t m, int64_t n, int64_t k, T alpha, const T *A, int64_t ars, int64_t acs,
         const T *B, int64_t ldb, T *C, int64_t ldc, int acc)
{
    for (int64_t r0 = 0; r0 < m; r0 += 4) {
        int64_t mr = m - r0 < 4 ? m - r0 : 4;
        /* rows past m repeat the last one: computed, never stored */
        const T *a0 = A + r0 * ars;
        const T *a1 = A + (r0 + (mr > 1 ? 1 : 0)) * ars;
        const T *a2 = A + (r0 + (mr > 2 ? 2 : mr - 1)) * ars;
        const T *a3 = A + (r0 + (mr > 3 ? 3 : mr - 1)) * ars;
        T *c[4] = {C + r0 * ldc, C + (r0 + 1) * ldc, C + (r0 + 2) * ldc, C + (r0 + 3) * ldc};
        int64_t j = 0;
        for (; j + 2 * VL <= n; j += 2 * VL) {
            FN(vec) x00 = {0}, x01 = {0}, x10 = {0}, x11 = {0};
            FN(vec) x20 = {0}, x21 = {0}, x30 = {0}, x31 = {0};
            const T *b = B + j;
            for (int64_t p = 0; p < k; p++, b += ldb) {
                FN(vec) b0, b1;
                VLOAD(b0, b);
                VLOAD(b1, b + VL);
                T s0 = a0[p * acs], s1 = a1[p * acs], s2 = a2[p * acs], s3 = a3[p * acs];
                x00 += s0 * b0;
                x01 += s0 * b1;
                x10 += s1 * b0;
                x11 += s1 * b1;
                x20 += s2 * b0;
                x21 += s2 * b1;
                x30 += s3 * b0;
                x31 += s3 * b1;
            }
            FN(vec) xs[4][2] = {{x00, x01}, {x10, x11}, {x20, x21}, {x30, x31}};
            for (int64_t r = 0; r < mr; r++)
                for (int h = 0; h < 2; h++) {
                    T *dst = c[r] + j + h * VL;
                    FN(vec) v = alpha * xs[r][h], old;
                    if (acc) {
                        VLOAD(old, dst);
                        v += old;
                    }
                    VSTORE(dst, v);
                }
        }
        for (; j + VL <= n; j += VL) {
            FN(vec) x0 = {0}, x1 = {0}, x2 = {0}, x3 = {0};
            const T *b = B + j;
            for (int64_t p = 0; p < k; p++, b += ldb) {
                FN(vec) b0;
                VLOAD(b0, b);
                x0 += a0[p * acs] * b0;
                x1 += a1[p * acs] * b0;
                x2 += a2[p * acs] * b0;
                x3 += a3[p * acs] * b0;
            }
            FN(vec) xs[4] = {x0, x1, x2, x3};
            for (int64_t r = 0; r < mr; r++) {
                T *dst = c[r] + j;
                FN(vec) v = alpha * xs[r], old;
                if (acc) {
                    VLOAD(old, dst);
                    v += old;
                }
                VSTORE(dst, v);
            }
        }
        for (; j < n; j++) {
            const T *ar[4] = {a0, a1, a2, a3};
            for (int64_t r = 0; r < mr; r++) {
                T s = 0;
                for (int64_t p = 0; p < k; p++)
                    s += ar[r][p * acs] * B[p * ldb + j];
                c[r][j] = acc ? c[r][j] + alpha * s : alpha * s;
            }
        }
    }
}

/* dst (cols x rows, row stride ldd) = src (rows x cols, row stride lds) transposed. */
static void
FN(pack_t)(int64_t rows, int64_t cols, const T *src, int64_t lds, T *dst, int64_t ldd)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[c * ldd + r] = src[r * lds + c];
}

typedef ITYPE FN(ivec) __attribute__((vector_size(32)));

/* max(init, row[0..n)), NaN ignored (as the scalar comparison ignores it). */
EM_CLONES static T
FN(row_max)(const T *row, int64_t n, T init)
{
    FN(vec) m = init - (FN(vec)){0};
    int64_t c = 0;
    for (; c + VL <= n; c += VL) {
        FN(vec) x;
        VLOAD(x, row + c);
        FN(ivec) gt = x > m;
        m = (FN(vec))(((FN(ivec))x & gt) | ((FN(ivec))m & ~gt));
    }
    T r = init;
    for (int i = 0; i < VL; i++)
        r = m[i] > r ? m[i] : r;
    for (; c < n; c++)
        r = row[c] > r ? row[c] : r;
    return r;
}

/* row[c] = exp(row[c] - shift); returns their sum. */
EM_CLONES static T
FN(row_exp)(T *row, int64_t n, T shift)
{
    for (int64_t c = 0; c < n; c++)
        row[c] = EXP(row[c] - shift);
    FN(vec) acc = {0};
    int64_t c = 0;
    for (; c + VL <= n; c += VL) {
        FN(vec) x;
        VLOAD(x, row + c);
        acc += x;
    }
    T s = 0;
    for (int i = 0; i < VL; i++)
        s += acc[i];
    for (; c < n; c++)
        s += row[c];
    return s;
}

/* d[c] = p[c] * (d[c] - D) */
EM_CLONES static void
FN(row_dsoftmax)(const T *restrict p, T *restrict d, int64_t n, T D)
{
    for (int64_t c = 0; c < n; c++)
        d[c] = p[c] * (d[c] - D);
}

/* S (m x n, row stride n) = scale * Q[i0:i0+m] K[j0:j0+n]^T, masked (-inf where the
 * causal mask hides a key; attn_mask is added). Kt: K's block packed. */
static void
FN(scores)(const attn_args *a, int64_t b, int64_t h, int64_t i0, int64_t m, int64_t j0,
           int64_t n, const T *Kt, T *S)
{
    const T *q = (const T *)a->q + b * a->qs[0] + h * a->qs[1] + i0 * a->qs[2];
    FN(gemm)(m, n, a->E, (T)a->scale, q, a->qs[2], 1, Kt, n, S, n, 0);
    for (int64_t r = 0; r < m; r++) {
        T *row = S + r * n;
        int64_t i = i0 + r;
        if (a->causal)
            for (int64_t c = i + 1 - j0 < 0 ? 0 : i + 1 - j0; c < n; c++)
                row[c] = -INFINITY;
        if (a->mask_kind == MASK_FLOAT) {
            const T *mr = (const T *)a->mask + b * a->ms[0] + h * a->ms[1] + i * a->ms[2] +
                          j0 * a->ms[3];
            for (int64_t c = 0; c < n; c++)
                row[c] += mr[c * a->ms[3]];
        }
    }
}

/* Each thread's blocks: BR x BC scores, a packed K block (and V block), BR x Ev
 * accumulators, running maxima and sums; in the thread's own scratch. */
typedef struct {
    T *kt, *vt, *s, *dp, *acc, *mx, *l;
} FN(scratch);

static int
FN(scratch_get)(attn_args *a, FN(scratch) *w)
{
    int64_t d = a->E > a->Ev ? a->E : a->Ev;
    size_t total = (size_t)(d * BC * 2 + BR * BC * 2 + BR * a->Ev + 2 * BR + 8);
    T *p = thread_scratch(total * sizeof(T));
    if (p == NULL) {
        atomic_store(&a->failed, 1);
        return -1;
    }
    w->kt = p;
    w->vt = w->kt + d * BC;
    w->s = w->vt + d * BC;
    w->dp = w->s + BR * BC;
    w->acc = w->dp + BR * BC;
    w->mx = w->acc + BR * a->Ev;
    w->l = w->mx + BR;
    return 0;
}

/* One thread's range of (batch * head, query block) units of the forward pass. */
static void
FN(forward_range)(void *ctx, int64_t lo, int64_t hi)
{
    attn_args *a = ctx;
    FN(scratch) w;
    if (FN(scratch_get)(a, &w) < 0)
        return;
    int64_t E = a->E, Ev = a->Ev;
    for (int64_t u = lo; u < hi; u++) {
        int64_t b, h, qb;
        unit_decode(a, u, a->nqb, &b, &h, &qb);
        int64_t i0 = qb * BR, m = a->L - i0 < BR ? a->L - i0 : BR;
        for (int64_t r = 0; r < m; r++) {
            w.mx[r] = -INFINITY;
            w.l[r] = 0;
        }
        memset(w.acc, 0, (size_t)(m * Ev) * sizeof(T));
        int64_t jend = a->causal && i0 + m < a->S ? i0 + m : a->S;
        for (int64_t j0 = 0; j0 < jend; j0 += BC) {
            int64_t n = jend - j0 < BC ? jend - j0 : BC;
            const T *k = (const T *)a->k + b * a->ks[0] + h * a->ks[1] + j0 * a->ks[2];
            const T *v = (const T *)a->v + b * a->vs[0] + h * a->vs[1] + j0 * a->vs[2];
            FN(pack_t)(n, E, k, a->ks[2], w.kt, n);
            FN(scores)(a, b, h, i0, m, j0, n, w.kt, w.s);
            /* online softmax: rescale what was summed so far to the new row maximum */
            for (int64_t r = 0; r < m; r++) {
                T *row = w.s + r * n;
                T mnew = FN(row_max)(row, n, w.mx[r]);
                if (mnew == -INFINITY) {      /* every key so far hidden */
                    memset(row, 0, (size_t)n * sizeof(T));
                    continue;
                }
                T alpha = EXP(w.mx[r] - mnew);
                T sum = FN(row_exp)(row, n, mnew);
                w.l[r] = w.l[r] * alpha + sum;
                w.mx[r] = mnew;
                if (alpha != 1) {
                    T *acc = w.acc + r * Ev;
                    for (int64_t c = 0; c < Ev; c++)
                        acc[c] *= alpha;
                }
            }
            FN(gemm)(m, Ev, n, 1, w.s, n, 1, v, a->vs[2], w.acc, Ev, 1);
        }
        T *o = (T *)a->out + b * a->os[0] + h * a->os[1] + i0 * a->os[2];
        T *lse = (T *)a->lse_out + b * a->ls[0] + h * a->ls[1] + i0 * a->ls[2];
        for (int64_t r = 0; r < m; r++) {
            T l = w.l[r], *acc = w.acc + r * Ev, *orow = o + r * a->os[2];
            if (l == 0) {       /* no key visible: 0 as the decomposition, logsumexp 0 as
                                 * PyTorch's kernel */
                for (int64_t c = 0; c < Ev; c++)
                    orow[c] = 0;
                lse[r * a->ls[2]] = 0;
                continue;
            }
            T inv = 1 / l;
            for (int64_t c = 0; c < Ev; c++)
                orow[c] = acc[c] * inv;
            lse[r * a->ls[2]] = w.mx[r] + LOG(l);
        }
    }
}

/* P = exp(S - logsumexp) for the block's rows (a row that sees no key has scores -inf,
 * so P 0). */
static void
FN(probs)(const attn_args *a, int64_t b, int64_t h, int64_t i0, int64_t m, int64_t n, T *S)
{
    const T *lse = (const T *)a->lse + b * a->ls[0] + h * a->ls[1] + i0 * a->ls[2];
    for (int64_t r = 0; r < m; r++) {
        T *row = S + r * n, x = lse[r * a->ls[2]];
        if (x == -INFINITY) {
            memset(row, 0, (size_t)n * sizeof(T));
            continue;
        }
        FN(row_exp)(row, n, x);
    }
}

/* dS = P * (dO V^T - D) into dp (D: the rows' sums of dO * O). */
static void
FN(dscores)(const attn_args *a, int64_t b, int64_t h, int64_t i0, int64_t m, int64_t n,
            const T *P, const T *Vt, T *dp)
{
    const T *go = (const T *)a->go + b * a->gs[0] + h * a->gs[1] + i0 * a->gs[2];
    FN(gemm)(m, n, a->Ev, 1, go, a->gs[2], 1, Vt, n, dp, n, 0);
    const T *D = (const T *)a->delta + (b * a->H + h) * a->L + i0;
    for (int64_t r = 0; r < m; r++)
        FN(row_dsoftmax)(P + r * n, dp + r * n, n, D[r]);
}

/* D[b, h, i] = sum_c dO[i, c] O[i, c], per (batch * head, query block). */
static void
FN(delta_range)(void *ctx, int64_t lo, int64_t hi)
{
    attn_args *a = ctx;
    for (int64_t u = lo; u < hi; u++) {
        int64_t b = u / a->H, h = u % a->H;
        const T *go = (const T *)a->go + b * a->gs[0] + h * a->gs[1];
        const T *o = (const T *)a->o + b * a->os[0] + h * a->os[1];
        T *D = (T *)a->delta + u * a->L;
        for (int64_t i = 0; i < a->L; i++) {
            T s = 0;
            for (int64_t c = 0; c < a->Ev; c++)
                s += go[i * a->gs[2] + c] * o[i * a->os[2] + c];
            D[i] = s;
        }
    }
}

/* dK and dV of one (batch * head, key block): sums over the query blocks that see it. */
static void
FN(dkv_range)(void *ctx, int64_t lo, int64_t hi)
{
    attn_args *a = ctx;
    FN(scratch) w;
    if (FN(scratch_get)(a, &w) < 0)
        return;
    int64_t E = a->E, Ev = a->Ev;
    for (int64_t u = lo; u < hi; u++) {
        int64_t b, h, kb;
        unit_decode(a, u, a->nkb, &b, &h, &kb);
        int64_t j0 = kb * BC, n = a->S - j0 < BC ? a->S - j0 : BC;
        const T *k = (const T *)a->k + b * a->ks[0] + h * a->ks[1] + j0 * a->ks[2];
        const T *v = (const T *)a->v + b * a->vs[0] + h * a->vs[1] + j0 * a->vs[2];
        T *dk = (T *)a->dk + b * a->dks[0] + h * a->dks[1] + j0 * a->dks[2];
        T *dv = (T *)a->dv + b * a->dvs[0] + h * a->dvs[1] + j0 * a->dvs[2];
        for (int64_t r = 0; r < n; r++) {
            memset(dk + r * a->dks[2], 0, (size_t)E * sizeof(T));
            memset(dv + r * a->dvs[2], 0, (size_t)Ev * sizeof(T));
        }
        FN(pack_t)(n, E, k, a->ks[2], w.kt, n);
        FN(pack_t)(n, Ev, v, a->vs[2], w.vt, n);
        for (int64_t i0 = a->causal ? j0 / BR * BR : 0; i0 < a->L; i0 += BR) {
            int64_t m = a->L - i0 < BR ? a->L - i0 : BR;
            const T *q = (const T *)a->q + b * a->qs[0] + h * a->qs[1] + i0 * a->qs[2];
            const T *go = (const T *)a->go + b * a->gs[0] + h * a->gs[1] + i0 * a->gs[2];
            FN(scores)(a, b, h, i0, m, j0, n, w.kt, w.s);
            FN(probs)(a, b, h, i0, m, n, w.s);
            /* dV += P^T dO; dK += scale * dS^T Q */
            FN(gemm)(n, Ev, m, 1, w.s, 1, n, go, a->gs[2], dv, a->dvs[2], 1);
            FN(dscores)(a, b, h, i0, m, n, w.s, w.vt, w.dp);
            FN(gemm)(n, E, m, (T)a->scale, w.dp, 1, n, q, a->qs[2], dk, a->dks[2], 1);
        }
    }
}

/* dQ of one (batch * head, query block): a sum over the key blocks it sees. */
static void
FN(dq_range)(void *ctx, int64_t lo, int64_t hi)
{
    attn_args *a = ctx;
    FN(scratch) w;
    if (FN(scratch_get)(a, &w) < 0)
        return;
    int64_t E = a->E, Ev = a->Ev;
    for (int64_t u = lo; u < hi; u++) {
        int64_t b, h, qb;
        unit_decode(a, u, a->nqb, &b, &h, &qb);
        int64_t i0 = qb * BR, m = a->L - i0 < BR ? a->L - i0 : BR;
        T *dq = (T *)a->dq + b * a->dqs[0] + h * a->dqs[1] + i0 * a->dqs[2];
        for (int64_t r = 0; r < m; r++)
            memset(dq + r * a->dqs[2], 0, (size_t)E * sizeof(T));
        int64_t jend = a->causal && i0 + m < a->S ? i0 + m : a->S;
        for (int64_t j0 = 0; j0 < jend; j0 += BC) {
            int64_t n = jend - j0 < BC ? jend - j0 : BC;
            const T *k = (const T *)a->k + b * a->ks[0] + h * a->ks[1] + j0 * a->ks[2];
            const T *v = (const T *)a->v + b * a->vs[0] + h * a->vs[1] + j0 * a->vs[2];
            FN(pack_t)(n, E, k, a->ks[2], w.kt, n);
            FN(pack_t)(n, Ev, v, a->vs[2], w.vt, n);
            FN(scores)(a, b, h, i0, m, j0, n, w.kt, w.s);
            FN(probs)(a, b, h, i0, m, n, w.s);
            FN(dscores)(a, b, h, i0, m, n, w.s, w.vt, w.dp);
            /* dQ += scale * dS K */
            FN(gemm)(m, E, n, (T)a->scale, w.dp, n, 1, k, a->ks[2], dq, a->dqs[2], 1);
        }
    }
}

#undef VL
#undef VLOAD
#undef VSTORE
#undef FN
#undef CAT
#undef CAT_
