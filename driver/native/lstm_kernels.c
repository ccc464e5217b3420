/* The float32 LSTM cell in one call: the gate products and the cell's elementwise work fused
 * (called through ctypes from driver/ops/_lstm_native.py, built into the same library as
 * kernels.c, whose thread count it follows).
 *
 * The weights are packed at prepare in panels of eight units: panel p holds, for every row kk of
 * the product, the columns of units 8p..8p+7 of each gate in the order i, f, g, o (no i under
 * CIFG), gates * 8 floats, units padded with zeros to a multiple of eight. Panels go in groups of
 * three: the group of panels 3t, 3t+1 and 3t+2 is stored row by row, each row the three panels'
 * gates * 8 floats one after the other, i.e. [groups][k][3][gates * 8]; the one or two panels left
 * over form the last group, interleaved the same way ([k][2][gates * 8] or [k][gates * 8]). Every
 * group starts where its first panel would in a plain [panels][k][gates * 8] array. One pass over a
 * group gives the pre-activations of all gates of 24 units in twelve registers (nine under CIFG),
 * each row's input broadcast once for all of them, so the cell update for those units follows at
 * once: the weights are read once per step, in memory order, and nothing else is stored in between.
 * A large enough step is split by groups over kernels.c's thread pool, under the pool's own rule
 * (below), which deals them out in contiguous runs. Every run writes disjoint units, so results do
 * not depend on the thread count.
 *
 * The exponential, tanh and sigmoid are vmath.h's (Cephes' expf and tanhf polynomials, shared with
 * kernels.c's TANH and LOGISTIC); they differ from NumPy's by a few ulp.
 */

#include <stdint.h>
#include <string.h>

#include "mlts_kernels.h"

/* Multiply-adds per step from which the cell wakes the pool's sleeping workers: asr_float's 384-unit
 * steps (1.2 M; on-device step 0.41-0.49 -> 0.27-0.32 ms at 2 threads, burst, 4 A/B runs at load
 * 0.8-2.6), not tts_float's 256-unit ones (0.5 M: the wake-up and the worker's spin after it cost
 * more than half the step gives). Steps down to the pool's split size of this (1/8: 128 K) go to
 * workers already spinning only, as every other kernel's short jobs do. */
#define LSTM_PARALLEL_WORK (1 << 20)

typedef float lv8f __attribute__((vector_size(32)));
typedef int32_t lv8i __attribute__((vector_size(32)));

#define MK_VF lv8f
#define MK_VI lv8i
#define MK_V(name) v8_##name
#include "vmath.h"

/* NNAPI's fused-activation codes of the cell input and output activation. */
static inline lv8f vact(lv8f x, int act) {
    switch (act) {
    case 1:
        return v8_sel(x < v8_splat(0.0f), v8_splat(0.0f), x);
    case 3:
        return v8_clamp(x, v8_splat(0.0f), v8_splat(6.0f));
    case 4:
        return v8_tanh(x);
    case 6:
        return v8_sigmoid(x);
    default:
        return x;
    }
}

/* n (1..8) floats from p, zeros after. */
static inline lv8f load_n(const float *p, int64_t n) {
    lv8f v = v8_splat(0.0f);
    if (n == 8)
        memcpy(&v, p, 32);
    else
        memcpy(&v, p, (size_t)n * sizeof(float));
    return v;
}

static inline void store_n(float *p, lv8f v, int64_t n) {
    if (n == 8)
        memcpy(p, &v, 32);
    else
        memcpy(p, &v, (size_t)n * sizeof(float));
}

/* v in every lane (vmath.h's splat adds 0.0f, an instruction per use that cannot be folded). */
static inline lv8f bcast(float v) { return (lv8f){v, v, v, v, v, v, v, v}; }

static inline lv8f ld8(const float *p) {
    lv8f v;
    memcpy(&v, p, 32);
    return v;
}

/* acc[g] += sum over kk < k of a[kk] * w[kk][g*8 .. g*8+7] for G (3 or 4, a constant once inlined)
 * gates, w's rows G * 8 floats apart. Two chains of sums per gate, the even rows' and the odd rows'
 * (eight independent FMAs per pair of rows), added at the end; four rows per pass of the main loop,
 * each chain still summed in row order, so the floats are those of a loop over one row pair at a
 * time. G a constant keeps the sums in registers and the gate loop unrolled (a gate count read at
 * run time left a compare and branch per gate and per row pair, about 28 instructions per 8 FMAs). */
static inline __attribute__((always_inline)) void panel_dot_g(const float *restrict a, int64_t k,
                                                              const float *restrict w, const int G, lv8f acc[4]) {
    const int64_t stride = (int64_t)G * 8;
    lv8f s0[4] = {{0}}, s1[4] = {{0}};
    int64_t kk = 0;
    for (; kk + 4 <= k; kk += 4) {
        const float *w0 = w + kk * stride;
        lv8f x0 = bcast(a[kk]), x1 = bcast(a[kk + 1]), x2 = bcast(a[kk + 2]), x3 = bcast(a[kk + 3]);
        for (int g = 0; g < G; g++) {
            s0[g] += x0 * ld8(w0 + g * 8);
            s1[g] += x1 * ld8(w0 + stride + g * 8);
        }
        for (int g = 0; g < G; g++) {
            s0[g] += x2 * ld8(w0 + 2 * stride + g * 8);
            s1[g] += x3 * ld8(w0 + 3 * stride + g * 8);
        }
    }
    for (; kk + 2 <= k; kk += 2) {
        const float *w0 = w + kk * stride;
        lv8f x0 = bcast(a[kk]), x1 = bcast(a[kk + 1]);
        for (int g = 0; g < G; g++) {
            s0[g] += x0 * ld8(w0 + g * 8);
            s1[g] += x1 * ld8(w0 + stride + g * 8);
        }
    }
    if (kk < k) {
        const float *w0 = w + kk * stride;
        lv8f x0 = bcast(a[kk]);
        for (int g = 0; g < G; g++) s0[g] += x0 * ld8(w0 + g * 8);
    }
    for (int g = 0; g < G; g++) acc[g] += s0[g] + s1[g];
}

/* panel_dot_g for the LSTM's gate count: 4, or 3 under CIFG. */
static inline __attribute__((always_inline)) void panel_dot(const float *a, int64_t k, const float *w, int gates,
                                                            lv8f acc[4]) {
    if (gates == 4)
        panel_dot_g(a, k, w, 4, acc);
    else
        panel_dot_g(a, k, w, 3, acc);
}

/* acc[n] += sum over kk < k of a[kk] * w[kk][n*8 .. n*8+7] for n < N (a group's gates: 12, or 9 under
 * CIFG, for three panels; 8 or 6 for two; a constant once inlined), w's rows N * 8 floats apart. Each
 * row's a[kk] is broadcast once for the N products; one chain of sums per accumulator, in row order
 * (6 to 12 independent FMAs in flight cover the FMA's latency); eight rows per pass of the main loop.
 * The sums are named variables (an array indexed in an unrolled loop left the compiler shuffling
 * them between registers, a move per FMA or two). */
static inline __attribute__((always_inline)) void group_dot_g(const float *restrict a, int64_t k,
                                                              const float *restrict w, const int N, lv8f acc[12]) {
    const int64_t stride = (int64_t)N * 8;
    lv8f s0 = acc[0], s1 = acc[1], s2 = acc[2], s3 = acc[3], s4 = acc[4], s5 = acc[5];
    lv8f s6 = N > 6 ? acc[6] : s0, s7 = N > 6 ? acc[7] : s0, s8 = N > 8 ? acc[8] : s0;
    lv8f s9 = N > 9 ? acc[9] : s0, s10 = N > 9 ? acc[10] : s0, s11 = N > 9 ? acc[11] : s0;
#define GROUP_ROW(x, wr)                                                                                    \
    do {                                                                                                   \
        const float *w_ = (wr);                                                                            \
        const lv8f x_ = (x);                                                                               \
        s0 += x_ * ld8(w_);                                                                                \
        s1 += x_ * ld8(w_ + 8);                                                                            \
        s2 += x_ * ld8(w_ + 16);                                                                           \
        s3 += x_ * ld8(w_ + 24);                                                                           \
        s4 += x_ * ld8(w_ + 32);                                                                           \
        s5 += x_ * ld8(w_ + 40);                                                                           \
        if (N > 6) {                                                                                       \
            s6 += x_ * ld8(w_ + 48);                                                                       \
            s7 += x_ * ld8(w_ + 56);                                                                       \
        }                                                                                                  \
        if (N > 8) s8 += x_ * ld8(w_ + 64);                                                                \
        if (N > 9) {                                                                                       \
            s9 += x_ * ld8(w_ + 72);                                                                       \
            s10 += x_ * ld8(w_ + 80);                                                                      \
            s11 += x_ * ld8(w_ + 88);                                                                      \
        }                                                                                                  \
    } while (0)
    int64_t kk = 0;
    for (; kk + 8 <= k; kk += 8) {
        const float *w0 = w + kk * stride;
        const float *ak = a + kk;
        GROUP_ROW(bcast(ak[0]), w0);
        GROUP_ROW(bcast(ak[1]), w0 + stride);
        GROUP_ROW(bcast(ak[2]), w0 + 2 * stride);
        GROUP_ROW(bcast(ak[3]), w0 + 3 * stride);
        GROUP_ROW(bcast(ak[4]), w0 + 4 * stride);
        GROUP_ROW(bcast(ak[5]), w0 + 5 * stride);
        GROUP_ROW(bcast(ak[6]), w0 + 6 * stride);
        GROUP_ROW(bcast(ak[7]), w0 + 7 * stride);
    }
    for (; kk < k; kk++) GROUP_ROW(bcast(a[kk]), w + kk * stride);
#undef GROUP_ROW
    acc[0] = s0, acc[1] = s1, acc[2] = s2, acc[3] = s3, acc[4] = s4, acc[5] = s5;
    if (N > 6) acc[6] = s6, acc[7] = s7;
    if (N > 8) acc[8] = s8;
    if (N > 9) acc[9] = s9, acc[10] = s10, acc[11] = s11;
}

/* What a prepared LSTM keeps for the kernel: mk_lstm_const_t (mlts_kernels.h). */
typedef mk_lstm_const_t lstm_const_t;

typedef struct {
    const lstm_const_t *cst;
    int64_t batch, lda1, lda2, ldadd;
    const float *a1, *a2, *add, *c_in;
    float *c_out, *h_out, *gates_out;
} lstm_job_t;

/* The cell update of the units of panels p..p+count-1 (8p..) of batch row r from their gates'
 * pre-activations zp (panel p's gates, then panel p + 1's, ...: the products only; bias, added parts
 * and peepholes are added here). Not inlined: one copy of the elementwise code, called with the sums
 * once they are final, leaves the product loops their registers; a group per call pays the call and
 * the reading of the constants once for up to 24 units. */
static inline __attribute__((always_inline)) void cell_update_g(const lstm_job_t *j, int64_t r, int64_t p,
                                                                const lv8f *zp, int count, const int gates) {
    const lstm_const_t *cst = j->cst;
    const int64_t units = cst->units;
    const int act = (int)cst->act;
    const float cell_clip = (float)cst->cell_clip;
    const float *bias = cst->bias, *peep_i = cst->peep_i, *peep_f = cst->peep_f, *peep_o = cst->peep_o;
    const float *add = j->add ? j->add + r * j->ldadd : NULL;
    const float *c_in = j->c_in + r * units;
    float *c_out = j->c_out + r * units, *h_out = j->h_out + r * units;
    float *gates_out = j->gates_out ? j->gates_out + r * gates * units : NULL;
    const int cifg = gates == 3;
    const int fi = cifg ? 0 : 1; /* index of the forget gate */
    for (int q = 0; q < count; q++, zp += gates) {
        const int64_t u0 = (p + q) * 8;
        const int64_t nu = units - u0 < 8 ? units - u0 : 8;
        lv8f z[4] = {zp[0], zp[1], zp[2], cifg ? zp[2] : zp[3]};
#pragma GCC unroll 4
        for (int g = 0; g < gates; g++) {
            if (bias) z[g] += load_n(bias + g * units + u0, nu);
            if (add) z[g] += load_n(add + g * units + u0, nu);
        }
        lv8f c = load_n(c_in + u0, nu);
        if (peep_f) z[fi] += load_n(peep_f + u0, nu) * c;
        if (peep_i && !cifg) z[0] += load_n(peep_i + u0, nu) * c;
        lv8f f = v8_sigmoid(z[fi]);
        lv8f g = vact(z[fi + 1], act);
        lv8f i = cifg ? v8_splat(1.0f) - f : v8_sigmoid(z[0]);
        lv8f cn = f * c + i * g;
        if (cell_clip > 0) cn = v8_clamp(cn, v8_splat(-cell_clip), v8_splat(cell_clip));
        lv8f pre_o = z[fi + 2];
        if (peep_o) pre_o += load_n(peep_o + u0, nu) * cn;
        lv8f o = v8_sigmoid(pre_o);
        lv8f h = o * vact(cn, act);
        store_n(c_out + u0, cn, nu);
        store_n(h_out + u0, h, nu);
        if (gates_out) {
            float *go = gates_out + u0;
            if (!cifg) store_n(go, i, nu);
            store_n(go + fi * units, f, nu);
            store_n(go + (fi + 1) * units, g, nu);
            store_n(go + (fi + 2) * units, o, nu);
        }
    }
}

/* cell_update_g for the LSTM's gate count (4, or 3 under CIFG), a constant in each copy: the gates'
 * sums stay in registers. */
static __attribute__((noinline)) void cell_update(const lstm_job_t *j, int64_t r, int64_t p, const lv8f *zp,
                                                  int count) {
    if (j->cst->gates == 4)
        cell_update_g(j, r, p, zp, count, 4);
    else
        cell_update_g(j, r, p, zp, count, 3);
}

/* Batch row r of the N / gates panels from p on, from their group's weights wp (N a constant once
 * inlined, so that the sums stay in registers). */
static inline __attribute__((always_inline)) void group_step(const lstm_job_t *j, int64_t r, int64_t p,
                                                             const float *wp, const float *a1, const float *a2,
                                                             const int N, const int count) {
    const int64_t k1 = j->cst->k1, k2 = j->cst->k2;
    lv8f z[12] = {{0}};
    group_dot_g(a1, k1, wp, N, z);
    if (k2 > 0) group_dot_g(a2, k2, wp + k1 * N * 8, N, z);
    cell_update(j, r, p, z, count);
}

/* The step of the units of groups t0..t1-1 (panels 3t0..3t1-1, fewer in the last group) for every
 * batch row. */
static void cell_groups(const lstm_job_t *j, int64_t t0, int64_t t1) {
    const lstm_const_t *cst = j->cst;
    const int64_t units = cst->units, k1 = cst->k1, k2 = cst->k2, k = k1 + k2;
    const int64_t panels = (units + 7) / 8;
    const int gates = (int)cst->gates;
    const int64_t gw = (int64_t)gates * 8; /* floats of one panel's row */
    for (int64_t t = t0; t < t1; t++) {
        const int64_t p = 3 * t;
        const float *wp = cst->w + p * k * gw;
        const int count = panels - p < 3 ? (int)(panels - p) : 3;
        for (int64_t r = 0; r < j->batch; r++) {
            const float *a1 = j->a1 + r * j->lda1, *a2 = k2 > 0 ? j->a2 + r * j->lda2 : NULL;
            if (count == 3) {
                if (gates == 4)
                    group_step(j, r, p, wp, a1, a2, 12, 3);
                else
                    group_step(j, r, p, wp, a1, a2, 9, 3);
            } else if (count == 2) {
                if (gates == 4)
                    group_step(j, r, p, wp, a1, a2, 8, 2);
                else
                    group_step(j, r, p, wp, a1, a2, 6, 2);
            } else {
                lv8f z[4] = {{0}};
                panel_dot(a1, k1, wp, gates, z);
                if (k2 > 0) panel_dot(a2, k2, wp + k1 * gw, gates, z);
                cell_update(j, r, p, z, 1);
            }
        }
    }
}

/* Task t of the pool: group t (the pool claims them in contiguous runs). */
static void cell_task(void *ctx, int64_t t) { cell_groups(ctx, t, t + 1); }

/* One LSTM step for `batch` rows (see _lstm_cell for the formulas; no layer norm, no projection):
 *
 *   pre = a1 @ W[:k1] + a2 @ W[k1:] (+ bias) (+ add), per gate i, f, g, o (no i under CIFG)
 *
 * From the constants `cst`: w the panels of k1 + k2 rows; bias [gates * units] gate-major like
 * NNAPI's packed gates, or NULL; the peepholes [units] or NULL; act the cell activation code;
 * cell_clip > 0 clips the new cell state. Per call: a1 [batch, k1] and a2 [batch, k2] (a2 NULL
 * when k2 = 0) with row strides lda1 and lda2; add [batch, gates * units] gate-major (row stride
 * ldadd) or NULL; c_in [batch, units]. Writes c_out [batch, units] (may be c_in), h_out
 * [batch, units] (must not overlap a1, a2) and, when not NULL, gates_out [batch, gates * units],
 * the gate activations gate-major. */
void mk_lstm_cell_f32(const lstm_const_t *cst, int64_t batch, const float *a1, int64_t lda1, const float *a2,
                      int64_t lda2, const float *add, int64_t ldadd, const float *c_in, float *c_out,
                      float *h_out, float *gates_out) {
    lstm_job_t job = {cst, batch, lda1, lda2, ldadd, a1, a2, add, c_in, c_out, h_out, gates_out};
    const int64_t groups = (cst->units + 23) / 24;
    const int64_t work = batch * (cst->k1 + cst->k2) * cst->units * cst->gates;
    int nt = mk_threads();
    if (nt > 1 && groups >= 2 && work >= mk_split_work(LSTM_PARALLEL_WORK)) {
        __atomic_fetch_add(&((lstm_const_t *)cst)->offered, 1, __ATOMIC_RELAXED); /* only this field */
        mk_parallel_for_job(nt, groups, cell_task, &job, work >= LSTM_PARALLEL_WORK);
        return;
    }
    cell_groups(&job, 0, groups);
}
