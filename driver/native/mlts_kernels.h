/* The compiled kernels' interface: every function the library exports, every structure that crosses
 * the boundary to Python, and the one ABI number (driver/native/__init__.py loads the library and
 * checks it; driver/native/layout.py mirrors each structure with ctypes, and tests/driver/
 * test_native_layout.py compares every field's offset and size and each structure's size with what
 * mk_layout reports).
 *
 * One library is built from kernels.c (the thread pool, GEMMs, convolutions, elementwise kernels and
 * the bound-call interpreter), lstm_kernels.c (the fused LSTM cell) and qgemm_kernels.c (the 8-bit
 * integer GEMM); they reach each other through the declarations here, never through weak symbols.
 *
 * Bump MK_ABI whenever a declaration here changes meaning: an exported function's arguments or
 * result, a structure's fields, a bound-call kind's arguments, a constant of mk_constant.
 */
#ifndef MLTS_KERNELS_H
#define MLTS_KERNELS_H

#include <stdint.h>

#define MK_ABI 17

/* Pointers travel as int64 words in bound calls and as 8-byte fields in the structures below. */
_Static_assert(sizeof(void *) == 8, "the kernels' structures assume 64-bit pointers");

/* ------------------------------------------------------------ identity */

int mk_abi(void);
/* The SHA-256 of every C source and header of driver/native when it was built (setup.py defines
 * MK_SOURCE_HASH; driver.native.source_digest computes the same): a stale build is not used. */
const char *mk_source_hash(void);

/* Row i of the layout table (0 past its end): a structure's size (*field "") or one field's offset
 * and size, by the C names. */
int mk_layout(int64_t i, const char **type, const char **field, int64_t *offset, int64_t *size);
/* Constant i of the interface (0 past its end): its name and value (bound-call kinds, limits). */
int mk_constant(int64_t i, const char **name, int64_t *value);

/* ------------------------------------------------------------ structures */

/* A window's geometry (CONV_2D, DEPTHWISE_CONV_2D): batch, input height, width, channels, kernel
 * height and width, strides, dilations, padding above and left, output height and width. */
typedef struct {
    int32_t n, h, w, c, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow;
} mk_geom_t;

/* The kernels' pool counters since the process started (mk_pool_stats): jobs handed to the pool,
 * tasks workers ran, futex wake-ups of sleeping workers, nanoseconds callers waited for workers'
 * tasks, times a spinning worker found itself descheduled, times the machine was found crowded; then
 * times a worker joined a job and found no task left (a wake-up or a spin that gained nothing), jobs
 * short enough to be split over spinning workers only that ran on the caller because every worker
 * slept, and the times mk_pool_rest told the idle workers to sleep. */
typedef struct {
    int64_t jobs, worker_tasks, wakes, wait_ns, preempted, crowded, late, kept, rests;
} mk_pool_stats_t;

/* What a prepared LSTM keeps for the fused cell (lstm_kernels.c): w the weight panels; bias, the
 * peepholes: NULL when absent. */
typedef struct {
    int64_t units, k1, k2;
    int64_t gates, act;
    double cell_clip;
    const float *w, *bias, *peep_i, *peep_f, *peep_o;
    /* Written by the kernel (a relaxed atomic; zero at prepare): how many steps of this LSTM were
     * offered to the pool (split when a worker was there to help). */
    int64_t offered;
} mk_lstm_const_t;

/* ------------------------------------------------------------ bound calls (mk_run_calls)
 *
 * A run of bound calls is two tables: call i is calls[i], an mk_call_t of MK_CALL_INTS int64 words
 * (its kind first, then its arguments in the order of the kind's structure below; pointers as
 * words), and floats[i], an mk_call_floats_t of MK_CALL_FLOATS floats. */

#define MK_CALL_INTS 20
#define MK_CALL_FLOATS 2

enum mk_call_kind {
    MK_CALL_IM2COL_F32 = 1,
    MK_CALL_GEMM_PACKED_BIAS_ACT_F32 = 2,
    MK_CALL_DEPTHWISE_F32 = 3,
    MK_CALL_GEMM_FEWROWS_BIAS_ACT_F32 = 4, /* mk_gemm_bias_act_f32 with m < 4 and n >= 8: never fails */
    MK_CALL_ADD_F32 = 5,
    MK_CALL_COPY = 6,
    MK_CALL_QIM2COL = 7,
    MK_CALL_QGEMM_REQUANT = 8,
    MK_CALL_DEPTHWISE_Q8 = 9,
    MK_CALL_TANH_F32 = 10,
    MK_CALL_LOGISTIC_F32 = 11,
    MK_CALL_COPY_2D = 12,
    MK_CALL_SOFTMAX_F32 = 13,
    MK_CALL_SOFTMAX_Q8 = 14,
    MK_CALL_MEAN_Q8 = 15,
    MK_CALL_PAIR_TABLE_Q8 = 16,
    MK_CALL_LSTM_CELL_F32 = 17,
};

/* MK_CALL_IM2COL_F32: mk_im2col_f32. */
typedef struct {
    int64_t kind;
    const float *x;
    const mk_geom_t *geom;
    float *cols;
} mk_call_im2col_f32_t;

/* MK_CALL_GEMM_PACKED_BIAS_ACT_F32 (b: packed panels) and MK_CALL_GEMM_FEWROWS_BIAS_ACT_F32 (b:
 * row-major), floats: mk_call_bounds_t. */
typedef struct {
    int64_t kind;
    const float *a, *b;
    float *c;
    int64_t m, n, k;
    const float *bias;
} mk_call_gemm_f32_t;

/* MK_CALL_DEPTHWISE_F32: mk_depthwise_f32, floats: mk_call_bounds_t. */
typedef struct {
    int64_t kind;
    const float *x;
    const mk_geom_t *geom;
    int64_t m;
    const float *wt, *bias;
    float *y;
} mk_call_depthwise_f32_t;

/* MK_CALL_ADD_F32: mk_add_f32. */
typedef struct {
    int64_t kind;
    const float *a, *b;
    float *y;
    int64_t n;
} mk_call_add_f32_t;

/* MK_CALL_COPY: bytes from src to dst. */
typedef struct {
    int64_t kind;
    const void *src;
    void *dst;
    int64_t bytes;
} mk_call_copy_t;

/* MK_CALL_QIM2COL: mk_qim2col. */
typedef struct {
    int64_t kind;
    const void *x;
    const mk_geom_t *geom;
    int64_t pad, lda;
    void *cols;
} mk_call_qim2col_t;

/* MK_CALL_QGEMM_REQUANT: mk_qgemm_requant. */
typedef struct {
    int64_t kind;
    const void *a;
    int64_t lda, a_signed;
    const int8_t *bp;
    const int32_t *colc;
    int64_t zw, m, n, k;
    const int64_t *bias, *mult, *left, *right;
    int64_t zp, lo, hi, is_signed;
    void *out;
} mk_call_qgemm_requant_t;

/* MK_CALL_DEPTHWISE_Q8: mk_depthwise_q8. */
typedef struct {
    int64_t kind;
    const void *x;
    int64_t is_signed, zp_x;
    const mk_geom_t *geom;
    int64_t m;
    const int16_t *wp;
    const int64_t *bias, *mult, *left, *right;
    int64_t zp_y, lo, hi;
    void *y;
} mk_call_depthwise_q8_t;

/* MK_CALL_TANH_F32 and MK_CALL_LOGISTIC_F32: mk_tanh_f32, mk_logistic_f32. */
typedef struct {
    int64_t kind;
    const float *x;
    float *y;
    int64_t n;
} mk_call_map_f32_t;

/* MK_CALL_COPY_2D: mk_copy_2d. */
typedef struct {
    int64_t kind;
    const void *src;
    void *dst;
    int64_t rows, row_bytes, src_stride, dst_stride;
} mk_call_copy_2d_t;

/* MK_CALL_SOFTMAX_F32: mk_softmax_f32, floats: mk_call_softmax_floats_t. */
typedef struct {
    int64_t kind;
    const float *x;
    float *y;
    int64_t rows, cols;
} mk_call_softmax_f32_t;

/* MK_CALL_SOFTMAX_Q8: mk_softmax_q8. */
typedef struct {
    int64_t kind;
    const void *x;
    void *y;
    int64_t rows, cols;
    const int64_t *exp_f0, *exp_accum;
    int64_t is_signed;
} mk_call_softmax_q8_t;

/* MK_CALL_MEAN_Q8: mk_mean_q8. */
typedef struct {
    int64_t kind;
    const void *x;
    int64_t is_signed, outer, n, inner;
    const uint8_t *table;
    int64_t table_base;
    void *y;
} mk_call_mean_q8_t;

/* MK_CALL_PAIR_TABLE_Q8: mk_pair_table_q8. */
typedef struct {
    int64_t kind;
    const uint8_t *a, *b, *table;
    uint8_t *y;
    int64_t n;
} mk_call_pair_table_q8_t;
/* MK_CALL_LSTM_CELL_F32: mk_lstm_cell_f32 (its arguments in its order; add, a2, gates_out may be NULL). */
typedef struct {
    int64_t kind;
    const mk_lstm_const_t *cst;
    int64_t batch;
    const float *a1;
    int64_t lda1;
    const float *a2;
    int64_t lda2;
    const float *add;
    int64_t ldadd;
    const float *c_in;
    float *c_out, *h_out, *gates_out;
} mk_call_lstm_cell_f32_t;

/* One bound call's words. */
typedef union {
    int64_t word[MK_CALL_INTS];
    int64_t kind;
    mk_call_im2col_f32_t im2col_f32;
    mk_call_gemm_f32_t gemm_f32;
    mk_call_depthwise_f32_t depthwise_f32;
    mk_call_add_f32_t add_f32;
    mk_call_copy_t copy;
    mk_call_qim2col_t qim2col;
    mk_call_qgemm_requant_t qgemm_requant;
    mk_call_depthwise_q8_t depthwise_q8;
    mk_call_map_f32_t map_f32;
    mk_call_copy_2d_t copy_2d;
    mk_call_softmax_f32_t softmax_f32;
    mk_call_softmax_q8_t softmax_q8;
    mk_call_mean_q8_t mean_q8;
    mk_call_pair_table_q8_t pair_table_q8;
    mk_call_lstm_cell_f32_t lstm_cell_f32;
} mk_call_t;

/* The bounds of a fused activation (lo, hi). */
typedef struct {
    float lo, hi;
} mk_call_bounds_t;

typedef struct {
    float beta;
} mk_call_softmax_floats_t;

/* One bound call's floats. */
typedef union {
    float word[MK_CALL_FLOATS];
    mk_call_bounds_t bounds;
    mk_call_softmax_floats_t softmax;
} mk_call_floats_t;

_Static_assert(sizeof(mk_call_t) == MK_CALL_INTS * sizeof(int64_t), "a call's arguments outgrow its words");
_Static_assert(sizeof(mk_call_floats_t) == MK_CALL_FLOATS * sizeof(float), "a call's floats outgrow theirs");

/* Runs n calls in order, the same functions with the same arguments as one ctypes call each, in one
 * foreign call (one release of the caller's interpreter lock). Returns 0, or i + 1 when call i failed
 * (*status: its kernel's status) or is of an unknown kind or takes other arguments (*status: 0);
 * nothing after call i ran. */
int64_t mk_run_calls(const mk_call_t *calls, const mk_call_floats_t *floats, int64_t n, int64_t *status);

/* mk_run_calls, watching for a reason to stop between calls (preemption inside a bound run): before
 * each call after the first it stops when *word, the highest priority running (mlts.hal.qos), exceeds
 * mine, or when CLOCK_MONOTONIC has passed deadline_ns (when >= 0). word may be NULL. One load per
 * call, and a clock read when there is a deadline. Returns 0 when every call ran, i + 1 when call i
 * failed (as mk_run_calls), -(i + 1) when it stopped before call i (i >= 1; calls 0 .. i-1 ran): the
 * caller waits at its checkpoint, then runs calls i .. n-1. */
int64_t mk_run_calls_watched(const mk_call_t *calls, const mk_call_floats_t *floats, int64_t n, int64_t *status,
                             const volatile int64_t *word, int64_t mine, int64_t deadline_ns);

/* ------------------------------------------------------------ the thread pool (kernels.c) */

typedef void (*mk_task_fn)(void *ctx, int64_t t);

void mk_set_threads(int n);
int mk_threads(void);
void mk_set_split(int shift);
int mk_split(void);
void mk_set_spin(int us);
int mk_spin(void);
/* Copies the counters into *out; returns how many there are (the fields of mk_pool_stats_t). */
int mk_pool_stats(mk_pool_stats_t *out);
int64_t mk_pool_backoffs(void);
void mk_pool_rest(void);
/* fn(ctx, t) for t in [0, ntasks) over nt threads, waking sleeping workers. */
void mk_parallel_for(int nt, int64_t ntasks, mk_task_fn fn, void *ctx);
/* The same; wake 0: only workers already spinning join (a job short enough, see kernels.c). */
void mk_parallel_for_job(int nt, int64_t ntasks, mk_task_fn fn, void *ctx, int wake);
/* Work below this (for a job that would wake workers from `base`) stays on the caller. */
int64_t mk_split_work(int64_t base);

/* ------------------------------------------------------------ float32 GEMMs (kernels.c) */

void mk_set_sgemm(void *fn, int ilp64);
int mk_has_sgemm(void);
void mk_pack_b_f32(const float *b, int64_t k, int64_t n, float *bp);
void mk_gemm_packed_bias_act_f32(const float *a, const float *bp, float *c, int64_t m, int64_t n, int64_t k,
                                 const float *bias, float lo, float hi);
int mk_gemm_f32(const float *a, const float *b, float *c, int64_t m, int64_t n, int64_t k);
int mk_gemm_bias_act_f32(const float *a, const float *b, float *c, int64_t m, int64_t n, int64_t k,
                         const float *bias, float lo, float hi);
void mk_bias_act_f32(float *y, int64_t rows, int cout, const float *bias, float lo, float hi);

/* ------------------------------------------------------------ requantization (kernels.c) */

int mk_requant_f32(const float *acc, int64_t rows, int cout, const int64_t *bias, const int64_t *mult,
                   const int64_t *left, const int64_t *right, int64_t zp, int64_t lo, int64_t hi, int is_signed,
                   void *out);
int mk_gemm_requant_f32(const float *a, const float *b, float *acc, int64_t m, int64_t n, int64_t k,
                        const int64_t *bias, const int64_t *mult, const int64_t *left, const int64_t *right,
                        int64_t zp, int64_t lo, int64_t hi, int is_signed, void *out);
int mk_gemm_packed_requant_f32(const float *a, const float *bp, float *acc, int64_t m, int64_t n, int64_t k,
                               const int64_t *bias, const int64_t *mult, const int64_t *left, const int64_t *right,
                               int64_t zp, int64_t lo, int64_t hi, int is_signed, void *out);
int mk_gemm_packed_requant_q8(const void *x, int x_signed, int zp_x, const float *bp, float *acc, int64_t m,
                              int64_t n, int64_t k, const int64_t *bias, const int64_t *mult, const int64_t *left,
                              const int64_t *right, int64_t zp, int64_t lo, int64_t hi, int is_signed, void *out);

/* ------------------------------------------------------------ windows (kernels.c) */

void mk_im2col_f32(const float *x, const mk_geom_t *geom, float *cols);
void mk_im2col_q8(const void *x, int is_signed, int zp, const mk_geom_t *geom, float *cols);
void mk_center_q8(const void *x, int is_signed, int zp, int64_t count, float *out);
void mk_depthwise_f32(const float *x, const mk_geom_t *geom, int m, const float *wt, const float *bias, float lo,
                      float hi, float *y);
/* The int16 elements of a quantized depthwise filter's packed weights (0 for no taps or channels), and
 * the packing of w [taps, cout] int16 (the filter minus its zero point, each in [-255, 255]). */
int64_t mk_depthwise_q8_packed_size(int64_t taps, int64_t cout);
void mk_depthwise_q8_pack(const int16_t *w, int64_t taps, int64_t cout, int16_t *packed);
/* wp: packed by mk_depthwise_q8_pack for taps = KH * KW and cout = C * m. 0, or -1 when out of memory. */
int mk_depthwise_q8(const void *x, int is_signed, int zp_x, const mk_geom_t *geom, int m, const int16_t *wp,
                    const int64_t *bias, const int64_t *mult, const int64_t *left, const int64_t *right, int64_t zp_y,
                    int64_t lo, int64_t hi, void *y);

/* ------------------------------------------------------------ elementwise (kernels.c) */

void mk_add_f32(const float *a, const float *b, float *y, int64_t n);
void mk_tanh_f32(const float *x, float *y, int64_t n);
void mk_logistic_f32(const float *x, float *y, int64_t n);
void mk_copy_2d(const void *src, void *dst, int64_t rows, int64_t row_bytes, int64_t src_stride,
                int64_t dst_stride);
void mk_softmax_f32(const float *x, float *y, int64_t rows, int64_t cols, float beta);
void mk_softmax_q8(const void *x, void *y, int64_t rows, int64_t cols, const int64_t *exp_f0,
                   const int64_t *exp_accum, int is_signed);
void mk_mean_q8(const void *x, int is_signed, int64_t outer, int64_t n, int64_t inner, const uint8_t *table,
                int64_t table_base, void *y);
void mk_pair_table_q8(const uint8_t *a, const uint8_t *b, const uint8_t *table, uint8_t *y, int64_t n);

/* ------------------------------------------------------------ the fused LSTM cell (lstm_kernels.c) */

void mk_lstm_cell_f32(const mk_lstm_const_t *cst, int64_t batch, const float *a1, int64_t lda1, const float *a2,
                      int64_t lda2, const float *add, int64_t ldadd, const float *c_in, float *c_out, float *h_out,
                      float *gates_out);

/* ------------------------------------------------------------ the 8-bit integer GEMM (qgemm_kernels.c) */

/* The largest K of mk_qgemm_requant: K * 255 * 255 < 2^31. */
#define MK_QGEMM_MAX_K 33025

/* 1 when built for a processor with AVX512-VNNI or AVX2; otherwise nothing else of qgemm_kernels.c
 * may be called (mk_qgemm_requant returns -2). The packed layout and the input rows' stride depend
 * on the variant compiled: callers size them with mk_qgemm_packed_bytes and mk_qgemm_row_stride. */
int mk_qgemm_available(void);
/* The smallest lda of mk_qgemm_requant for sums of k products (k, or k rounded up to a multiple of 4). */
int64_t mk_qgemm_row_stride(int64_t k);
/* The bytes mk_qgemm_pack writes for weights [k, n]. */
int64_t mk_qgemm_packed_bytes(int64_t k, int64_t n);
/* Packs w' [k, n] into bp; returns the layout it chose: 0 the VNNI variant's one layout, with AVX2
 * 1 (int16 pairs along k, vpmaddwd) or 2 (byte quads along k, vpmaddubsw: only when every pair of k of
 * every column has |w'_k| + |w'_k+1| <= 128, so that its 16-bit sums cannot saturate). */
int mk_qgemm_pack(const int8_t *w, int64_t k, int64_t n, void *bp);
int mk_qgemm_requant(const void *a, int64_t lda, int a_signed, const void *bp, const int32_t *colc, int32_t zw,
                     int64_t m, int64_t n, int64_t k, const int64_t *bias, const int64_t *mult, const int64_t *left,
                     const int64_t *right, int64_t zp, int64_t lo, int64_t hi, int is_signed, void *out);
void mk_qim2col(const void *x, const mk_geom_t *geom, int pad, int64_t lda, void *cols);

#endif
