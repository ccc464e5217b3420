/* The exact 8-bit GEMM of quantized CONV_2D and FULLY_CONNECTED, called through ctypes from
 * driver/ops/_qgemm.py and built into the same library as kernels.c, whose thread pool it uses. Two
 * variants, chosen at compile time (-march=native): AVX512-VNNI (vpdpbusd: four u8 x s8 products
 * summed into each int32 lane) and, without VNNI, AVX2 (the bytes widened to 16 bits and vpmaddwd:
 * two s16 x s16 products summed into each int32 lane, exact, unlike vpmaddubsw which saturates).
 *
 * Arithmetic (both variants). Activations a (8-bit, [m, lda], the raw input bytes; a signed input is
 * read as a ^ 0x80 = a + 128, an unsigned one as is) with zero point zx (+128 for a signed input), and
 * constant weights w' (s8, chosen at prepare so that w' - zw = w - zp_w exactly, see _qgemm.py).
 * For output (r, c):
 *
 *     sum_k (a_rk - zx)(w'_kc - zw) = sum_k a_rk w'_kc - zw * rowsum_r - zx * colsum_c + K zx zw
 *
 * The column terms (-zx colsum_c + K zx zw) are folded into colc[c] at prepare. Every term is
 * computed modulo 2^32 (vpdpbusd and vpaddd wrap; a vpmaddwd pair sum is at most 2 * 255 * 128 in
 * magnitude and never wraps; the rest is unsigned arithmetic); the left-hand side is an integer of
 * magnitude at most K * 255 * 255, which is below 2^31 for K <= QGEMM_MAX_K = 33025, so the int32
 * result modulo 2^32 is the exact sum. The int32 bias is then added in int64 and the sum requantized
 * exactly as kernels.c does (mbqm, or its 32-bit form when the total provably fits int32), so the
 * outputs are bit-identical to the float path's.
 *
 * Packed weights (mk_qgemm_packed_bytes gives the size, mk_qgemm_row_stride the input rows' stride):
 * - VNNI: panels of 16 columns, [panels][ceil(K/4)][16][4] bytes (column j of the panel, k = 4q + r);
 *   input rows are read 4 bytes at a time, so the stride is K rounded up to a multiple of 4 (the
 *   bytes past K meet zero weights).
 * - AVX2: panels of 8 columns, [panels][ceil(K/2)][8][2] int16 (k = 2q + r); each block of input rows
 *   is first widened to int16 (a ^ flip, zero-extended) in chunks of QKC along K, so rows need no
 *   padding (stride K).
 *   Or, when every pair (k, k + 1), k even, of every column has |w'_k| + |w'_k+1| <= 128 (mk_qgemm_pack
 *   checks), byte quads [panels][ceil(K/4)][8][4] summed by vpmaddubsw, which cannot saturate then; a
 *   32-byte header before the panels names the layout.
 * Zeros past K and past n in both. Without VNNI or AVX2 at compile time mk_qgemm_available() is 0
 * and nothing else here is called.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mlts_kernels.h"
#include "requant.h"
#if defined(__AVX512VNNI__)
#define QGEMM_VNNI 1
#elif defined(__AVX2__)
#define QGEMM_AVX2 1
#endif
#if defined(QGEMM_VNNI) || defined(QGEMM_AVX2)
#define QGEMM_ON 1
#include <immintrin.h>
#endif

#define QGEMM_MAX_K MK_QGEMM_MAX_K /* K * 255 * 255 < 2^31 */
#ifdef QGEMM_AVX2
#define QPANEL 8                   /* columns per panel */
#define QKG 2                      /* k values per 32-bit lane (vpmaddwd pairs) */
#define QUNIT 2                    /* bytes per packed weight (int16) */
#define NR_PANELS 2                /* panels per register block: 16 columns, 12 accumulators */
#else
#define QPANEL 16
#define QKG 4                      /* vpdpbusd quads */
#define QUNIT 1
#define NR_PANELS 4                /* panels per register block: 64 columns, 24 accumulators */
#endif
#define GROUP_COLS 64              /* columns of one task */
#define MR 6                       /* rows per register block */
#define ROWS_PER_TASK 48           /* the most rows of one task (a multiple of MR) */
#define TASKS_PER_THREAD 4         /* tasks a split job aims for per thread (fewer rows per task) */
#define QKC 1024                   /* AVX2: k values widened to int16 at a time (even) */
/* Multiply-adds from which the GEMM wakes sleeping workers (about 60 us of it on one AVX2 core); from
 * mk_split_work(PARALLEL_QGEMM) (about 8 us) it is split over workers already spinning. */
#define PARALLEL_QGEMM (1 << 22)
/* Bytes of a patch matrix from which it is built on woken workers too (a window row of few channels is
 * a copy of a few bytes: the first layer's 338 KB, 3 channels, take about 0.3 ms on one core); from
 * mk_split_work(PARALLEL_QIM2COL) on workers already spinning. */
#define PARALLEL_QIM2COL (1 << 18)


#ifdef QGEMM_ON
int mk_qgemm_available(void) { return 1; }
#else
int mk_qgemm_available(void) { return 0; }
#endif

/* The bytes per input row mk_qgemm_requant reads for sums of k products (its smallest lda). */
int64_t mk_qgemm_row_stride(int64_t k) {
#ifdef QGEMM_AVX2
    return k;
#else
    return (k + QKG - 1) / QKG * QKG;
#endif
}

#ifdef QGEMM_AVX2
/* AVX2: the packed weights start with a header of QHDR bytes whose first int32 names their layout. */
#define QHDR 32
#define LAYOUT_PAIRS 1 /* [panels][ceil(K/2)][8][2] int16: vpmaddwd on widened rows */
#define LAYOUT_QUADS 2 /* [panels][ceil(K/4)][8][4] bytes: vpmaddubsw on the rows' bytes, exact */
#define QUAD_PAIR_LIMIT 128 /* |w'_k| + |w'_k+1| <= 128: 255 * 128 = 32640 fits a vpmaddubsw lane */

/* Every pair (k, k + 1), k even, of every column keeps |w'_k| + |w'_k+1| <= QUAD_PAIR_LIMIT. */
static int quads_exact(const int8_t *w, int64_t k, int64_t n) {
    for (int64_t kk = 0; kk < k; kk += 2)
        for (int64_t c = 0; c < n; c++) {
            int s = abs(w[kk * n + c]) + (kk + 1 < k ? abs(w[(kk + 1) * n + c]) : 0);
            if (s > QUAD_PAIR_LIMIT) return 0;
        }
    return 1;
}
#endif

/* The bytes of mk_qgemm_pack's output for weights [k, n]. */
int64_t mk_qgemm_packed_bytes(int64_t k, int64_t n) {
#ifdef QGEMM_AVX2
    /* the pairs' layout is the larger of the two */
    return QHDR + (n + QPANEL - 1) / QPANEL * ((k + QKG - 1) / QKG) * QPANEL * QKG * QUNIT;
#else
    return (n + QPANEL - 1) / QPANEL * ((k + QKG - 1) / QKG) * QPANEL * QKG * QUNIT;
#endif
}

/* w' [k, n] (s8, row-major) into the panel layout above (bp holds mk_qgemm_packed_bytes(k, n) bytes).
 * AVX2: the quads' layout when every pair of k of every column is small enough for vpmaddubsw to sum
 * it without saturating (quads_exact: per-channel filters quantized to 7 bits are), else the pairs'. */
int mk_qgemm_pack(const int8_t *w, int64_t k, int64_t n, void *bp) {
    memset(bp, 0, (size_t)mk_qgemm_packed_bytes(k, n));
#ifdef QGEMM_AVX2
    int32_t layout = quads_exact(w, k, n) ? LAYOUT_QUADS : LAYOUT_PAIRS;
    memcpy(bp, &layout, sizeof(layout));
    if (layout == LAYOUT_QUADS) {
        int8_t *dst = (int8_t *)bp + QHDR;
        int64_t kq4 = (k + 3) / 4;
        for (int64_t kk = 0; kk < k; kk++)
            for (int64_t c = 0; c < n; c++)
                dst[((c / QPANEL) * kq4 + kk / 4) * (QPANEL * 4) + (c % QPANEL) * 4 + kk % 4] = w[kk * n + c];
        return layout;
    }
    bp = (char *)bp + QHDR;
#endif
    int64_t kq = (k + QKG - 1) / QKG;
    for (int64_t kk = 0; kk < k; kk++)
        for (int64_t c = 0; c < n; c++) {
            int64_t i = ((c / QPANEL) * kq + kk / QKG) * (QPANEL * QKG) + (c % QPANEL) * QKG + kk % QKG;
#ifdef QGEMM_AVX2
            ((int16_t *)bp)[i] = w[kk * n + c];
#else
            ((int8_t *)bp)[i] = w[kk * n + c];
#endif
        }
#ifdef QGEMM_AVX2
    return LAYOUT_PAIRS;
#else
    return 0;
#endif
}

typedef struct {
    const uint8_t *a;
    int64_t lda, m, n, k;
    uint32_t flip;
    const void *bp;
    const int32_t *colc;
    int32_t zw;
    const int64_t *bias, *mult, *left, *right;
    const int32_t *bias32, *mult32, *right32, *cb32; /* cb32: colc + bias32 modulo 2^32 */
    int narrow;
    int32_t zp, lo, hi;
    int is_signed;
    void *out;
    int64_t row_chunks, rows_per_task; /* rows_per_task: a multiple of MR, at most ROWS_PER_TASK */
    int quads;                         /* AVX2: the weights are in LAYOUT_QUADS */
} qjob;

#ifdef QGEMM_ON
/* mbqm: requant.h */

/* Row r's centred sums acc[0 .. nc) of columns c0.. (int32 modulo 2^32) plus the bias, requantized. */
static void epilogue_row(const qjob *j, const int32_t *acc, int64_t r, int64_t c0, int nc, uint32_t rowterm) {
    int64_t base = r * j->n + c0;
    if (j->narrow) {
        int i = 0;
#ifdef QGEMM_VNNI
        /* the 32-bit form below, 16 lanes at a time */
        const __m512i rt = _mm512_set1_epi32((int)rowterm), round = _mm512_set1_epi64((int64_t)1 << 30);
        const __m512i lo = _mm512_set1_epi32(j->lo - j->zp), hi = _mm512_set1_epi32(j->hi - j->zp);
        const __m512i zp = _mm512_set1_epi32(j->zp), one = _mm512_set1_epi32(1);
        for (; i < nc; i += 16) {
            __mmask16 m = nc - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (nc - i)) - 1u);
            int64_t c = c0 + i;
            __m512i t = _mm512_sub_epi32(_mm512_add_epi32(_mm512_maskz_loadu_epi32(m, acc + i),
                                                          _mm512_maskz_loadu_epi32(m, j->cb32 + c)), rt);
            __m512i mult = _mm512_maskz_loadu_epi32(m, j->mult32 + c), r = _mm512_maskz_loadu_epi32(m, j->right32 + c);
            __m512i pe = _mm512_add_epi64(_mm512_mul_epi32(t, mult), round);
            __m512i po = _mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(t, 32), _mm512_srli_epi64(mult, 32)), round);
            __m512i y = _mm512_mask_blend_epi32((__mmask16)0xaaaa, _mm512_srli_epi64(pe, 31), _mm512_slli_epi64(po, 1));
            __m512i mask = _mm512_sub_epi32(_mm512_sllv_epi32(one, r), one);
            __m512i rem = _mm512_and_si512(y, mask);
            __m512i thr = _mm512_sub_epi32(_mm512_srai_epi32(mask, 1), _mm512_srai_epi32(y, 31));
            y = _mm512_srav_epi32(y, r);
            y = _mm512_mask_add_epi32(y, _mm512_cmpgt_epi32_mask(rem, thr), y, one);
            y = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(y, lo), hi), zp);
            _mm_mask_storeu_epi8((char *)j->out + base + i, m, _mm512_cvtepi32_epi8(y));
        }
#elif defined(QGEMM_AVX2)
        /* the 32-bit form below, 8 lanes at a time (the rest one by one) */
        const __m256i rt = _mm256_set1_epi32((int)rowterm), round = _mm256_set1_epi64x((int64_t)1 << 30);
        const __m256i lo = _mm256_set1_epi32(j->lo - j->zp), hi = _mm256_set1_epi32(j->hi - j->zp);
        const __m256i zp = _mm256_set1_epi32(j->zp), one = _mm256_set1_epi32(1);
        for (; i + 8 <= nc; i += 8) {
            int64_t c = c0 + i;
            __m256i t = _mm256_sub_epi32(_mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(acc + i)),
                                                          _mm256_loadu_si256((const __m256i *)(j->cb32 + c))), rt);
            __m256i mult = _mm256_loadu_si256((const __m256i *)(j->mult32 + c));
            __m256i r = _mm256_loadu_si256((const __m256i *)(j->right32 + c));
            __m256i pe = _mm256_add_epi64(_mm256_mul_epi32(t, mult), round);
            __m256i po = _mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(t, 32), _mm256_srli_epi64(mult, 32)), round);
            __m256i y = _mm256_blend_epi32(_mm256_srli_epi64(pe, 31), _mm256_slli_epi64(po, 1), 0xaa);
            __m256i mask = _mm256_sub_epi32(_mm256_sllv_epi32(one, r), one);
            __m256i rem = _mm256_and_si256(y, mask);
            __m256i thr = _mm256_sub_epi32(_mm256_srai_epi32(mask, 1), _mm256_srai_epi32(y, 31));
            y = _mm256_srav_epi32(y, r);
            y = _mm256_sub_epi32(y, _mm256_cmpgt_epi32(rem, thr)); /* + 1 where rem > thr */
            y = _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(y, lo), hi), zp);
            /* y is within the output type's range: the saturating packs keep every value */
            __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
            __m128i b8 = j->is_signed ? _mm_packs_epi16(w16, w16) : _mm_packus_epi16(w16, w16);
            _mm_storel_epi64((__m128i *)((char *)j->out + base + i), b8);
        }
#endif
        int32_t slo = j->lo - j->zp, shi = j->hi - j->zp;
        for (; i < nc; i++) {
            int64_t c = c0 + i;
            int32_t t = (int32_t)((uint32_t)acc[i] + (uint32_t)j->colc[c] - rowterm) + j->bias32[c];
            int64_t p = (int64_t)t * j->mult32[c] + ((int64_t)1 << 30);
            int32_t y = (int32_t)((uint64_t)p >> 31);
            int32_t rr = j->right32[c];
            int32_t mask = (int32_t)(((uint32_t)1 << rr) - 1u);
            int32_t rem = y & mask, thr = (mask >> 1) + (y < 0);
            y = (y >> rr) + (rem > thr);
            y = (y < slo ? slo : (y > shi ? shi : y)) + j->zp;
            if (j->is_signed)
                ((int8_t *)j->out)[base + i] = (int8_t)y;
            else
                ((uint8_t *)j->out)[base + i] = (uint8_t)y;
        }
        return;
    }
    for (int i = 0; i < nc; i++) {
        int64_t c = c0 + i;
        int64_t t = (int64_t)(int32_t)((uint32_t)acc[i] + (uint32_t)j->colc[c] - rowterm) + j->bias[c];
        int64_t y = mbqm(t, j->mult[c], j->left[c], j->right[c]) + j->zp;
        y = y < j->lo ? j->lo : (y > j->hi ? j->hi : y);
        if (j->is_signed)
            ((int8_t *)j->out)[base + i] = (int8_t)y;
        else
            ((uint8_t *)j->out)[base + i] = (uint8_t)y;
    }
}

static inline int32_t ld32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

#ifdef QGEMM_VNNI
/* zw * (the row's sum of a as read) for rows r0 .. r1 of the task (0 when zw is 0). */
static void row_terms(const qjob *j, int64_t r0, int64_t r1, uint32_t *rowterms) {
    for (int64_t r = r0; r < r1; r++) {
        uint32_t s = 0;
        if (j->zw) {
            const uint8_t *a = j->a + r * j->lda;
            if (j->flip) { /* read as a ^ 0x80 = (int8) a + 128 */
                int32_t t = 0;
                for (int64_t kk = 0; kk < j->k; kk++) t += (int8_t)a[kk];
                s = (uint32_t)t + 128u * (uint32_t)j->k;
            } else {
                for (int64_t kk = 0; kk < j->k; kk++) s += a[kk];
            }
        }
        rowterms[r - r0] = s * (uint32_t)j->zw;
    }
}
#endif
#endif

#ifdef QGEMM_VNNI
/* One k-step of the register block: row i's four bytes at a_i (as read: ^ flip) times panels' b_p. The
 * accumulators are named variables, not an array, so that they stay in registers; rows >= mr and
 * panels >= np are compiled out (mr, np are constants in every instantiation). */
#define ROW(i)                                                                                  \
    if (mr > i) {                                                                               \
        __m512i av = _mm512_xor_si512(_mm512_set1_epi32(LOAD(i)), flipv);                       \
        c##i##0 = _mm512_dpbusd_epi32(c##i##0, av, b0);                                         \
        if (np > 1) c##i##1 = _mm512_dpbusd_epi32(c##i##1, av, b1);                             \
        if (np > 2) c##i##2 = _mm512_dpbusd_epi32(c##i##2, av, b2);                             \
        if (np > 3) c##i##3 = _mm512_dpbusd_epi32(c##i##3, av, b3);                             \
    }
#define STEP(q)                                                                                 \
    do {                                                                                        \
        const int8_t *bq = bp + (q) * 64;                                                       \
        __m512i b0 = _mm512_loadu_si512((const void *)bq), b1 = b0, b2 = b0, b3 = b0;           \
        if (np > 1) b1 = _mm512_loadu_si512((const void *)(bq + pstride));                     \
        if (np > 2) b2 = _mm512_loadu_si512((const void *)(bq + 2 * pstride));                  \
        if (np > 3) b3 = _mm512_loadu_si512((const void *)(bq + 3 * pstride));                  \
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)                                               \
    } while (0)
#define DECL(i) __m512i c##i##0 = z, c##i##1 = z, c##i##2 = z, c##i##3 = z;
#define STORE(i)                                                                                \
    if (mr > i) {                                                                               \
        _mm512_storeu_si512((void *)(out + i * 64), c##i##0);                                   \
        if (np > 1) _mm512_storeu_si512((void *)(out + i * 64 + 16), c##i##1);                  \
        if (np > 2) _mm512_storeu_si512((void *)(out + i * 64 + 32), c##i##2);                  \
        if (np > 3) _mm512_storeu_si512((void *)(out + i * 64 + 48), c##i##3);                  \
    }

/* Rows r0 .. r0 + mr, panels p0 .. p0 + np: the register block, then its epilogue. */
static inline __attribute__((always_inline)) void block(const qjob *j, int64_t r0, const int mr, int64_t p0,
                                                        const int np, const uint32_t *rowterms) {
    int64_t kq = (j->k + 3) / 4, pstride = kq * 64;
    const int8_t *bp = (const int8_t *)j->bp + p0 * pstride;
    const int64_t lda = j->lda;
    const uint8_t *a0 = j->a + r0 * lda, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda, *a4 = a3 + lda,
                  *a5 = a4 + lda;
    const __m512i flipv = _mm512_set1_epi32((int)j->flip), z = _mm512_setzero_si512();
    DECL(0) DECL(1) DECL(2) DECL(3) DECL(4) DECL(5)
#define LOAD(i) ld32(a##i + 4 * q)
    for (int64_t q = 0; q < kq; q++) STEP(q);
#undef LOAD
    int32_t out[MR * GROUP_COLS];
    STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5)
    int64_t c0 = p0 * QPANEL;
    int nc = (int)((j->n - c0) < np * QPANEL ? (j->n - c0) : np * QPANEL);
    for (int i = 0; i < mr; i++) epilogue_row(j, out + i * 64, r0 + i, c0, nc, rowterms[i]);
}

#define BLOCK_NP(mr)                                         \
    switch (np) {                                            \
    case 1: block(j, r, mr, p0, 1, rt); break;               \
    case 2: block(j, r, mr, p0, 2, rt); break;               \
    case 3: block(j, r, mr, p0, 3, rt); break;               \
    default: block(j, r, mr, p0, 4, rt); break;              \
    }

static void qgemm_task(void *ctx, int64_t t) {
    const qjob *j = ctx;
    int64_t rc = t % j->row_chunks, g = t / j->row_chunks;
    int64_t panels = (j->n + QPANEL - 1) / QPANEL;
    int64_t p0 = g * NR_PANELS;
    int np = (int)(panels - p0 < NR_PANELS ? panels - p0 : NR_PANELS);
    int64_t r0 = rc * j->rows_per_task, r1 = r0 + j->rows_per_task < j->m ? r0 + j->rows_per_task : j->m;
    uint32_t rowterms[ROWS_PER_TASK];
    row_terms(j, r0, r1, rowterms);
    for (int64_t r = r0; r < r1; r += MR) {
        int mr = (int)(r1 - r < MR ? r1 - r : MR);
        const uint32_t *rt = rowterms + (r - r0);
        switch (mr) {
        case 6: BLOCK_NP(6); break;
        case 5: BLOCK_NP(5); break;
        case 4: BLOCK_NP(4); break;
        case 3: BLOCK_NP(3); break;
        case 2: BLOCK_NP(2); break;
        default: BLOCK_NP(1); break;
        }
    }
}
#endif

#ifdef QGEMM_AVX2
/* The AVX2 variant. A task's rows are taken MR at a time and widened to int16 (a ^ flip,
 * zero-extended) QKC values of k at a time, their row sums formed on the way (psadbw); for each such chunk every register block of the task's
 * columns (2 panels: 16 columns) adds its products to the block's sums kept in acc [MR][GROUP_COLS].
 * One k-pair step: row i's two int16 values broadcast as one 32-bit word times the panels' (k, k+1)
 * pairs of 8 columns (vpmaddwd), added to the row's accumulators. Named accumulators (12) so that
 * they stay in registers; rows >= mr and panels >= np are compiled out. */
#define ROW2(i)                                                                                 \
    if (mr > i) {                                                                               \
        __m256i av = _mm256_set1_epi32(ld32(ab + i * QKC * 2 + off));                           \
        c##i##0 = _mm256_add_epi32(c##i##0, _mm256_madd_epi16(av, b0));                         \
        if (np > 1) c##i##1 = _mm256_add_epi32(c##i##1, _mm256_madd_epi16(av, b1));             \
    }
#define DECL2(i) __m256i c##i##0 = z, c##i##1 = z;
#define LOAD2(i)                                                                                \
    if (mr > i) {                                                                               \
        c##i##0 = _mm256_loadu_si256((const __m256i *)(acc + i * GROUP_COLS));                  \
        if (np > 1) c##i##1 = _mm256_loadu_si256((const __m256i *)(acc + i * GROUP_COLS + 8));  \
    }
#define STORE2(i)                                                                               \
    if (mr > i) {                                                                               \
        _mm256_storeu_si256((__m256i *)(acc + i * GROUP_COLS), c##i##0);                        \
        if (np > 1) _mm256_storeu_si256((__m256i *)(acc + i * GROUP_COLS + 8), c##i##1);        \
    }

/* acc[i][0 .. 8 np) += sum over pairs q < nq of widened row i (aw + i * QKC) times panel b (and the
 * next panel, pstride int16 further). (Setting acc on the first chunk of k instead of clearing and
 * reading it made the k loop 4% longer at K = 384 with GCC 12: the clearing stays.) */
static inline __attribute__((always_inline)) void block2(const int16_t *aw, const int mr, const int16_t *b,
                                                         int64_t pstride, const int np, int64_t nq, int32_t *acc) {
    const __m256i z = _mm256_setzero_si256();
    DECL2(0) DECL2(1) DECL2(2) DECL2(3) DECL2(4) DECL2(5)
    LOAD2(0) LOAD2(1) LOAD2(2) LOAD2(3) LOAD2(4) LOAD2(5)
    /* one byte offset for the rows (4 a step) and the panels (32 a step): fewer loop instructions */
    const char *ab = (const char *)aw, *bb0 = (const char *)b, *bb1 = (const char *)(b + pstride);
    for (int64_t off = 0; off < 4 * nq; off += 4) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)(bb0 + 8 * off)), b1 = b0;
        if (np > 1) b1 = _mm256_loadu_si256((const __m256i *)(bb1 + 8 * off));
        ROW2(0) ROW2(1) ROW2(2) ROW2(3) ROW2(4) ROW2(5)
    }
    STORE2(0) STORE2(1) STORE2(2) STORE2(3) STORE2(4) STORE2(5)
}

/* kc bytes of src (^ flip) as int16 into dst, a zero after them when kc is odd (the pair's other half);
 * returns their sum (the row sum of a as read, for the row term). */
static inline uint32_t widen(const uint8_t *src, int64_t kc, uint8_t flip, int16_t *dst) {
    const __m128i f = _mm_set1_epi8((char)flip), z = _mm_setzero_si128();
    __m128i sum = z;
    int64_t i = 0;
    for (; i + 16 <= kc; i += 16) {
        __m128i v = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(src + i)), f);
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_cvtepu8_epi16(v));
        sum = _mm_add_epi64(sum, _mm_sad_epu8(v, z)); /* two sums of 8 bytes */
    }
    if (i + 8 <= kc) { /* 8 more (K = 24, 27, ...): the upper bytes of the load are zero, add nothing */
        const __m128i f8 = _mm_set_epi64x(0, (int64_t)(0x0101010101010101ull * flip));
        __m128i v = _mm_xor_si128(_mm_loadl_epi64((const __m128i *)(src + i)), f8);
        _mm_storeu_si128((__m128i *)(dst + i), _mm_cvtepu8_epi16(v));
        sum = _mm_add_epi64(sum, _mm_sad_epu8(v, z));
        i += 8;
    }
    uint32_t s = (uint32_t)(_mm_cvtsi128_si64(sum) + _mm_extract_epi64(sum, 1));
    for (; i < kc; i++) {
        uint8_t v = (uint8_t)(src[i] ^ flip);
        dst[i] = (int16_t)v;
        s += v;
    }
    if (kc & 1) dst[kc] = 0;
    return s;
}

#define BLOCK2_NP(mr)                                                       \
    if (np == 2)                                                            \
        block2(aw, mr, b, pstride, 2, nq, ac);                              \
    else                                                                    \
        block2(aw, mr, b, pstride, 1, nq, ac);

/* epilogue_row for the rows r .. r + mr of a task's block (row i's sums at acc + i * GROUP_COLS, its
 * row term rowterm[i]): in the 32-bit form each group of 8 columns' constants (the product's odd-lane
 * multipliers, the shift's mask and half) are set up once for all the block's rows. */
static inline __attribute__((always_inline)) void epilogue_block(const qjob *j, const int32_t *acc, int64_t r, int mr, int64_t c0, int nc,
                                                           const uint32_t *rowterm) {
    int i = 0;
    if (j->narrow) {
        const __m256i round = _mm256_set1_epi64x((int64_t)1 << 30), one = _mm256_set1_epi32(1);
        const __m256i lo = _mm256_set1_epi32(j->lo - j->zp), hi = _mm256_set1_epi32(j->hi - j->zp);
        const __m256i zp = _mm256_set1_epi32(j->zp);
        for (; i + 8 <= nc; i += 8) {
            int64_t c = c0 + i;
            const __m256i cb = _mm256_loadu_si256((const __m256i *)(j->cb32 + c));
            const __m256i mult = _mm256_loadu_si256((const __m256i *)(j->mult32 + c));
            const __m256i m_odd = _mm256_srli_epi64(mult, 32);
            const __m256i rr = _mm256_loadu_si256((const __m256i *)(j->right32 + c));
            const __m256i mask = _mm256_sub_epi32(_mm256_sllv_epi32(one, rr), one);
            const __m256i half = _mm256_srai_epi32(mask, 1);
            for (int row = 0; row < mr; row++) {
                __m256i t = _mm256_sub_epi32(
                    _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(acc + row * GROUP_COLS + i)), cb),
                    _mm256_set1_epi32((int)rowterm[row]));
                __m256i pe = _mm256_add_epi64(_mm256_mul_epi32(t, mult), round);
                __m256i po = _mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(t, 32), m_odd), round);
                __m256i y = _mm256_blend_epi32(_mm256_srli_epi64(pe, 31), _mm256_slli_epi64(po, 1), 0xaa);
                __m256i rem = _mm256_and_si256(y, mask);
                __m256i thr = _mm256_sub_epi32(half, _mm256_srai_epi32(y, 31));
                y = _mm256_srav_epi32(y, rr);
                y = _mm256_sub_epi32(y, _mm256_cmpgt_epi32(rem, thr)); /* + 1 where rem > thr */
                y = _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(y, lo), hi), zp);
                __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
                __m128i b8 = j->is_signed ? _mm_packs_epi16(w16, w16) : _mm_packus_epi16(w16, w16);
                _mm_storel_epi64((__m128i *)((char *)j->out + (r + row) * j->n + c), b8);
            }
        }
    }
    if (i < nc)
        for (int row = 0; row < mr; row++)
            epilogue_row(j, acc + row * GROUP_COLS + i, r + row, c0 + i, nc - i, rowterm[row]);
}

/* The AVX2 variant on weights in LAYOUT_QUADS (mk_qgemm_pack chose it: every pair of k of every column
 * has |w'_k| + |w'_k+1| <= 128). One k-quad step: row i's four bytes (as read: ^ flip) broadcast as one
 * 32-bit word, vpmaddubsw with a panel's 8 columns x 4 k (u8 x s8, two products summed into each 16-bit
 * lane: at most 255 * 128 = 32640 in magnitude, so it never saturates and is exact), vpmaddwd with ones
 * (the two 16-bit sums of a lane pair into int32, exact), vpaddd into the row's accumulators. Three
 * instructions per 32 products where the pairs' path takes four, and no widening of the rows: they are
 * read in place, K at a time, the sums kept in registers (MR4 = 6 rows x 16 columns: 12 accumulators,
 * the first panel, the broadcast, a product and the ones: 16 ymm registers; the second panel is read
 * as a memory operand). */
#define MR4 6
#define ROW4(i, ptr)                                                                            \
    if (mr > i) {                                                                               \
        __m256i av = _mm256_set1_epi32(ld32(ptr));                                              \
        if (flip) av = _mm256_xor_si256(av, flipv);                                             \
        c##i##0 = _mm256_add_epi32(c##i##0, _mm256_madd_epi16(_mm256_maddubs_epi16(av, b0), ones)); \
        if (np > 1) c##i##1 = _mm256_add_epi32(c##i##1, _mm256_madd_epi16(_mm256_maddubs_epi16(av, b1), ones)); \
    }
#define ROW4T(i)                                                                                \
    if (mr > i) {                                                                               \
        int32_t w = 0;                                                                          \
        memcpy(&w, a##i + 4 * kq, (size_t)kt); /* the last k % 4: zero bytes meet zero weights */ \
        __m256i av = _mm256_set1_epi32(w);                                                      \
        if (flip) av = _mm256_xor_si256(av, flipv);                                             \
        c##i##0 = _mm256_add_epi32(c##i##0, _mm256_madd_epi16(_mm256_maddubs_epi16(av, b0), ones)); \
        if (np > 1) c##i##1 = _mm256_add_epi32(c##i##1, _mm256_madd_epi16(_mm256_maddubs_epi16(av, b1), ones)); \
    }

/* acc[i][0 .. 8 np) = sum over k of row i (a + i * lda, as read) times panel b (and the next panel,
 * pstride bytes further), for rows i < mr. */
static inline __attribute__((always_inline)) void block4(const uint8_t *a, int64_t lda, const int mr,
                                                         const int8_t *b, int64_t pstride, const int np,
                                                         int64_t k, const int flip, int32_t *acc) {
    const __m256i z = _mm256_setzero_si256(), ones = _mm256_set1_epi16(1);
    const __m256i flipv = _mm256_set1_epi8((char)0x80);
    const uint8_t *a0 = a, *a1 = mr > 1 ? a + lda : a, *a2 = mr > 2 ? a + 2 * lda : a, *a3 = mr > 3 ? a + 3 * lda : a;
    const uint8_t *a4 = mr > 4 ? a + 4 * lda : a, *a5 = mr > 5 ? a + 5 * lda : a;
    __m256i c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z, c40 = z, c41 = z, c50 = z, c51 = z;
    const int64_t kq = k / 4, kt = k % 4;
    const int8_t *b1p = b + pstride;
    /* The last k % 4 first (the sums are exact in any order): the loop's sums then go straight to the
     * stores, which keeps GCC 12 from copying and spilling the accumulators around the loop. */
    if (kt) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)(b + 32 * kq)), b1 = b0;
        if (np > 1) b1 = _mm256_loadu_si256((const __m256i *)(b1p + 32 * kq));
        ROW4T(0) ROW4T(1) ROW4T(2) ROW4T(3) ROW4T(4) ROW4T(5)
    }
    /* rows 0-2 at p0 + {0, 1, 2} lda and 3-5 at p3 + {0, 1, 2} lda (base + index addressing): three
     * pointers and lda instead of six pointers, which left GCC 12 short of registers */
    const uint8_t *p0 = a, *p3 = mr > 3 ? a + 3 * lda : a;
    for (const int8_t *bq = b, *bend = b + 32 * kq; bq < bend; bq += 32, p0 += 4, p3 += 4) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)bq), b1 = b0;
        if (np > 1) b1 = _mm256_loadu_si256((const __m256i *)(bq + pstride));
        ROW4(0, p0) ROW4(1, p0 + lda) ROW4(2, p0 + 2 * lda) ROW4(3, p3) ROW4(4, p3 + lda) ROW4(5, p3 + 2 * lda)
    }
    _mm256_storeu_si256((__m256i *)acc, c00);
    if (np > 1) _mm256_storeu_si256((__m256i *)(acc + 8), c01);
    if (mr > 1) {
        _mm256_storeu_si256((__m256i *)(acc + GROUP_COLS), c10);
        if (np > 1) _mm256_storeu_si256((__m256i *)(acc + GROUP_COLS + 8), c11);
    }
    if (mr > 2) {
        _mm256_storeu_si256((__m256i *)(acc + 2 * GROUP_COLS), c20);
        if (np > 1) _mm256_storeu_si256((__m256i *)(acc + 2 * GROUP_COLS + 8), c21);
    }
    if (mr > 3) {
        _mm256_storeu_si256((__m256i *)(acc + 3 * GROUP_COLS), c30);
        if (np > 1) _mm256_storeu_si256((__m256i *)(acc + 3 * GROUP_COLS + 8), c31);
    }
    if (mr > 4) {
        _mm256_storeu_si256((__m256i *)(acc + 4 * GROUP_COLS), c40);
        if (np > 1) _mm256_storeu_si256((__m256i *)(acc + 4 * GROUP_COLS + 8), c41);
    }
    if (mr > 5) {
        _mm256_storeu_si256((__m256i *)(acc + 5 * GROUP_COLS), c50);
        if (np > 1) _mm256_storeu_si256((__m256i *)(acc + 5 * GROUP_COLS + 8), c51);
    }
}

#define BLOCK4_NP(mr, flip)                                                 \
    if (np == 2)                                                            \
        block4(a, j->lda, mr, b, pstride, 2, j->k, flip, ac);               \
    else                                                                    \
        block4(a, j->lda, mr, b, pstride, 1, j->k, flip, ac);
#define BLOCK4_MR(flip)                                                     \
    switch (mr) {                                                           \
    case 6: BLOCK4_NP(6, flip); break;                                      \
    case 5: BLOCK4_NP(5, flip); break;                                      \
    case 4: BLOCK4_NP(4, flip); break;                                      \
    case 3: BLOCK4_NP(3, flip); break;                                      \
    case 2: BLOCK4_NP(2, flip); break;                                      \
    default: BLOCK4_NP(1, flip); break;                                     \
    }

/* The sum of the k bytes of src as read (^ flip). */
static inline uint32_t row_sum(const uint8_t *src, int64_t k, uint8_t flip) {
    const __m128i f = _mm_set1_epi8((char)flip), z = _mm_setzero_si128();
    __m128i sum = z;
    int64_t i = 0;
    for (; i + 16 <= k; i += 16)
        sum = _mm_add_epi64(sum, _mm_sad_epu8(_mm_xor_si128(_mm_loadu_si128((const __m128i *)(src + i)), f), z));
    uint32_t s = (uint32_t)(_mm_cvtsi128_si64(sum) + _mm_extract_epi64(sum, 1));
    for (; i < k; i++) s += (uint8_t)(src[i] ^ flip);
    return s;
}

/* qgemm_task on LAYOUT_QUADS weights: the task's rows MR4 at a time, every register block of its columns
 * over the whole of K, then the block's epilogue. */
static void qgemm_task_quads(const qjob *j, int64_t r0, int64_t r1, int64_t p0, int gp, int64_t c0, int nc) {
    int64_t pstride = (j->k + 3) / 4 * 32; /* bytes per panel */
    const int8_t *bpg = (const int8_t *)j->bp + QHDR + p0 * pstride;
    int32_t acc[MR4 * GROUP_COLS];
    for (int64_t r = r0; r < r1; r += MR4) {
        int mr = (int)(r1 - r < MR4 ? r1 - r : MR4);
        const uint8_t *a = j->a + r * j->lda;
        uint32_t rowterm[MR4] = {0}; /* zw * the row's sum of a as read */
        if (j->zw)
            for (int i = 0; i < mr; i++) rowterm[i] = row_sum(a + i * j->lda, j->k, (uint8_t)j->flip) * (uint32_t)j->zw;
        for (int pp = 0; pp < gp; pp += 2) {
            int np = gp - pp < 2 ? gp - pp : 2;
            const int8_t *b = bpg + pp * pstride;
            int32_t *ac = acc + pp * QPANEL;
            if (j->flip) {
                BLOCK4_MR(1)
            } else {
                BLOCK4_MR(0)
            }
        }
        epilogue_block(j, acc, r, mr, c0, nc, rowterm);
    }
}

static void qgemm_task(void *ctx, int64_t t) {
    const qjob *j = ctx;
    int64_t rc = t % j->row_chunks, g = t / j->row_chunks;
    int64_t panels = (j->n + QPANEL - 1) / QPANEL;
    int64_t p0 = g * (GROUP_COLS / QPANEL);
    int gp = (int)(panels - p0 < GROUP_COLS / QPANEL ? panels - p0 : GROUP_COLS / QPANEL);
    int64_t c0 = p0 * QPANEL;
    int nc = (int)(j->n - c0 < GROUP_COLS ? j->n - c0 : GROUP_COLS);
    int64_t r0 = rc * j->rows_per_task, r1 = r0 + j->rows_per_task < j->m ? r0 + j->rows_per_task : j->m;
    if (j->quads) {
        qgemm_task_quads(j, r0, r1, p0, gp, c0, nc);
        return;
    }
    int64_t pstride = (j->k + 1) / 2 * 16; /* int16 per panel */
    const int16_t *bpg = (const int16_t *)((const char *)j->bp + QHDR) + p0 * pstride;
    int16_t aw[MR * QKC];
    int32_t acc[MR * GROUP_COLS];
    for (int64_t r = r0; r < r1; r += MR) {
        int mr = (int)(r1 - r < MR ? r1 - r : MR);
        uint32_t rowsum[MR] = {0}; /* of a as read: zw * rowsum is the row term */
        memset(acc, 0, sizeof(acc));
        for (int64_t k0 = 0; k0 < j->k; k0 += QKC) {
            int64_t kc = j->k - k0 < QKC ? j->k - k0 : QKC, nq = (kc + 1) / 2;
            for (int i = 0; i < mr; i++)
                rowsum[i] += widen(j->a + (r + i) * j->lda + k0, kc, (uint8_t)j->flip, aw + i * QKC);
            for (int pp = 0; pp < gp; pp += NR_PANELS) {
                int np = gp - pp < NR_PANELS ? gp - pp : NR_PANELS;
                const int16_t *b = bpg + pp * pstride + k0 / 2 * 16;
                int32_t *ac = acc + pp * QPANEL;
                switch (mr) {
                case 6: BLOCK2_NP(6); break;
                case 5: BLOCK2_NP(5); break;
                case 4: BLOCK2_NP(4); break;
                case 3: BLOCK2_NP(3); break;
                case 2: BLOCK2_NP(2); break;
                default: BLOCK2_NP(1); break;
                }
            }
        }
        uint32_t rowterm[MR];
        for (int i = 0; i < mr; i++) rowterm[i] = rowsum[i] * (uint32_t)j->zw;
        epilogue_block(j, acc, r, mr, c0, nc, rowterm);
    }
}
#endif

/* out[m, n] = requantize(sum_k (a - zx)(w' - zw) + bias) for 8-bit a [m, lda] (a_signed: read as
 * a + 128; lda >= mk_qgemm_row_stride(k), any bytes past k of each row read but multiplied by the
 * packed weights' zeros), w' packed by mk_qgemm_pack, colc[n] the column terms (module comment). 0; -1
 * when out of memory; -2 without VNNI or AVX2, for k > QGEMM_MAX_K or a too short lda (nothing
 * written). */
int mk_qgemm_requant(const void *a, int64_t lda, int a_signed, const void *bp, const int32_t *colc, int32_t zw,
                     int64_t m, int64_t n, int64_t k, const int64_t *bias, const int64_t *mult, const int64_t *left,
                     const int64_t *right, int64_t zp, int64_t lo, int64_t hi, int is_signed, void *out) {
#ifdef QGEMM_ON
    if (k < 1 || k > QGEMM_MAX_K || lda < mk_qgemm_row_stride(k)) return -2;
    if (m <= 0 || n <= 0) return 0;
    int32_t *b32 = malloc(sizeof(int32_t) * (size_t)n * 4);
    if (!b32) return -1;
    int32_t *m32 = b32 + n, *r32 = m32 + n, *cb32 = r32 + n;
    /* The 32-bit form applies when no channel shifts left, shifts right by less than 32 and every
     * total |sum + bias| <= K * 65025 + |bias| fits int32. */
    int narrow = 1;
    int64_t limit = ((int64_t)1 << 31) - 1 - k * 65025;
    for (int64_t c = 0; c < n; c++) {
        narrow &= left[c] == 0 && right[c] < 32 && bias[c] <= limit && bias[c] >= -limit;
        b32[c] = (int32_t)bias[c];
        m32[c] = (int32_t)mult[c];
        r32[c] = (int32_t)right[c];
        cb32[c] = (int32_t)((uint32_t)colc[c] + (uint32_t)b32[c]);
    }
    int64_t groups = (n + GROUP_COLS - 1) / GROUP_COLS, work = m * n * k;
    int nt = mk_threads();
    if (work < mk_split_work(PARALLEL_QGEMM)) nt = 1;
    /* Rows per task: ROWS_PER_TASK, or fewer when the job would give each thread fewer than
     * TASKS_PER_THREAD tasks (the 7x7 and 14x14 layers: 49 or 196 rows), the same rows in each. */
    int64_t row_chunks = (m + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
    if (nt > 1 && row_chunks * groups < (int64_t)nt * TASKS_PER_THREAD) {
        int64_t want = ((int64_t)nt * TASKS_PER_THREAD + groups - 1) / groups;
        row_chunks = want < (m + MR - 1) / MR ? want : (m + MR - 1) / MR;
    }
    int64_t rows_per_task = ((m + row_chunks - 1) / row_chunks + MR - 1) / MR * MR;
    qjob job = {a, lda, m, n, k, a_signed ? 0x80808080u : 0u, bp, colc, zw, bias, mult, left, right,
                b32, m32, r32, cb32, narrow, (int32_t)zp, (int32_t)lo, (int32_t)hi, is_signed, out,
                (m + rows_per_task - 1) / rows_per_task, rows_per_task, 0};
#ifdef QGEMM_AVX2
    int32_t layout;
    memcpy(&layout, bp, sizeof(layout));
    if (layout != LAYOUT_PAIRS && layout != LAYOUT_QUADS) {
        free(b32);
        return -2;
    }
    job.quads = layout == LAYOUT_QUADS;
#endif
    int64_t ntasks = job.row_chunks * groups;
    if (nt > 1)
        mk_parallel_for_job(nt, ntasks, qgemm_task, &job, work >= PARALLEL_QGEMM);
    else
        for (int64_t t = 0; t < ntasks; t++) qgemm_task(&job, t);
    free(b32);
    return 0;
#else
    (void)a, (void)lda, (void)a_signed, (void)bp, (void)colc, (void)zw, (void)m, (void)n, (void)k;
    (void)bias, (void)mult, (void)left, (void)right, (void)zp, (void)lo, (void)hi, (void)is_signed, (void)out;
    return -2;
#endif
}

typedef mk_geom_t qgeom_t;

typedef struct {
    const uint8_t *x;
    qgeom_t g;
    uint8_t pad;
    int64_t lda;
    uint8_t *cols;
} qim2col_job;

/* Row r (one output row of one image) of the byte patch matrix [N*OH*OW, lda], `pad` where a tap
 * falls in the padding (the input's zero point: centred 0). */
static void qim2col_task(void *ctx, int64_t r) {
    const qim2col_job *j = ctx;
    const qgeom_t g = j->g;
    int b = (int)(r / g.oh), oy = (int)(r % g.oh);
    int span = g.kw * g.c;
    for (int ox = 0; ox < g.ow; ox++) {
        uint8_t *dst = j->cols + (r * g.ow + ox) * j->lda;
        int ix0 = ox * g.sw - g.pl;
        int row_inside = g.dw == 1 && ix0 >= 0 && ix0 + g.kw <= g.w;
        for (int ky = 0; ky < g.kh; ky++) {
            int iy = oy * g.sh - g.pt + ky * g.dh;
            if (iy < 0 || iy >= g.h) {
                memset(dst, j->pad, (size_t)span);
                dst += span;
                continue;
            }
            if (row_inside) {
                memcpy(dst, j->x + (((int64_t)b * g.h + iy) * g.w + ix0) * g.c, (size_t)span);
                dst += span;
                continue;
            }
            for (int kx = 0; kx < g.kw; kx++, dst += g.c) {
                int ix = ix0 + kx * g.dw;
                if (ix < 0 || ix >= g.w)
                    memset(dst, j->pad, (size_t)g.c);
                else
                    memcpy(dst, j->x + (((int64_t)b * g.h + iy) * g.w + ix) * g.c, (size_t)g.c);
            }
        }
    }
}

/* The byte patch matrix [N*OH*OW, lda] of 8-bit x (its geometry *gp), `pad` in the padding. */
void mk_qim2col(const void *x, const mk_geom_t *gp, int pad, int64_t lda, void *cols) {
    qgeom_t g = *gp;
    qim2col_job job = {x, g, (uint8_t)pad, lda, cols};
    int64_t rows = (int64_t)g.n * g.oh, bytes = rows * g.ow * lda;
    int nt = mk_threads();
    if (bytes < mk_split_work(PARALLEL_QIM2COL) || rows < 2) nt = 1;
    if (nt > 1)
        mk_parallel_for_job(nt, rows, qim2col_task, &job, bytes >= PARALLEL_QIM2COL);
    else
        for (int64_t t = 0; t < rows; t++) qim2col_task(&job, t);
}
