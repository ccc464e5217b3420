/* Compiled inner loops of the sample driver, called through ctypes (driver/native/__init__.py).
 *
 * Plain C over raw pointers: no Python API, so the GIL is released for the whole call and two
 * executions can run kernels at the same time. Work is split over the kernels' own threads by
 * output rows when an operation is large enough to pay for the hand-off; every thread writes a
 * disjoint slice of the output, so results do not depend on the thread count.
 *
 * Layouts are NHWC. Quantized arithmetic repeats driver/ops/_quant.py's int64 formulas exactly
 * (built with -fwrapv: int64 overflow wraps as NumPy's does), so results are bit-identical to the
 * NumPy path.
 */

#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "mlts_kernels.h"
#include "requant.h"
#ifdef __AVX2__
#include <immintrin.h>
#endif

static int g_threads = 1;

/* Work (elements) from which an operation wakes sleeping workers, about 50 us of it: a worker joins
 * a job about a microsecond after it is published when it spins, tens when it sleeps, and on a busy
 * machine (where idle workers sleep at once, see PREEMPTED_NS) a woken worker only competes for the
 * caller's core (measured: MobileNet 0.25 twice as slow on two threads as on one when every job from
 * 10 us woke one). Work from PARALLEL_WORK >> g_split (about 6 us) is split too, but only over workers
 * that are already spinning (a model's operations follow each other within the spin window). */
#define PARALLEL_WORK (1 << 18)
#define DEFAULT_SPLIT 3
static int g_split = DEFAULT_SPLIT;

/* Jobs below base >> shift of work stay on the calling thread (0: only jobs that may wake workers). */
void mk_set_split(int shift) { g_split = shift < 0 ? 0 : (shift > 12 ? 12 : shift); }

int mk_split(void) { return g_split; }

#ifndef MK_SOURCE_HASH
#define MK_SOURCE_HASH "unknown"
#endif

int mk_abi(void) { return MK_ABI; }

/* The SHA-256 of every source and header of driver/native when it was built (setup.py defines it): a
 * stale build is not used. */
const char *mk_source_hash(void) { return MK_SOURCE_HASH; }

void mk_set_threads(int n) { g_threads = n < 1 ? 1 : (n > 64 ? 64 : n); }

int mk_threads(void) { return g_threads; }


/* ------------------------------------------------------------ the kernels' thread pool
 *
 * One pool for every kernel (BLAS's own threads are off, see driver/native/__init__.py). A job is
 * `ntasks` calls fn(ctx, t); the calling thread publishes it, wakes sleeping workers and claims
 * tasks itself, in runs from a shared counter (pool_run); it then waits only for the tasks a worker
 * has claimed and not finished. A worker that is descheduled when the job is published (a busy
 * machine) finds no task left when it runs and holds up nothing: the caller never waits for a
 * worker to arrive, only for a task in progress. An idle worker spins for a bounded window
 * (mk_set_spin, about the gap between two operations of a model) so that the next operation's
 * job starts without a wake-up, then sleeps on a futex until the next job; when the execution has
 * ended (mk_pool_rest) it sleeps at once.
 *
 * The job's state word holds its generation (high 32 bits) and the next unclaimed task (low 32);
 * a worker claims tasks i .. i + n - 1 of generation g by compare-and-swap from (g, i) to (g, i + n),
 * so a late worker can never claim a task of a newer job with an older job's view. Between jobs the
 * word is CLOSED (no task claimable) while the caller writes the next job's fields. */

typedef mk_task_fn task_fn;

#define MAX_WORKERS 63
#define CLOSED 0xffffffffu

static struct {
    /* What idle workers read while they spin, on a cache line of its own: the claims and completions
     * of a job (state, done) write their line at every claim, which would otherwise pull the line the
     * spinning workers read away from them each time (false sharing). */
    _Alignas(64) _Atomic uint32_t gen; /* the futex word: generation of the latest job */
    _Atomic int sleepers;    /* workers asleep (or about to be) on gen */
    _Atomic uint64_t rest;   /* 1 << 32 | the generation after which idle workers sleep at once */
    _Alignas(64) _Atomic uint64_t state; /* generation << 32 | next task, CLOSED between jobs */
    _Atomic int64_t done;    /* tasks of the current job finished */
    atomic_flag busy;        /* a caller owns the pool */
    _Atomic(task_fn) fn;
    _Atomic(void *) ctx;
    _Atomic int64_t ntasks;
    _Atomic int helpers;     /* workers 0 .. helpers-1 take part in the current job */
    int workers;             /* started */
    pthread_mutex_t start;
} g_pool = {.busy = ATOMIC_FLAG_INIT, .start = PTHREAD_MUTEX_INITIALIZER};

static _Atomic int64_t g_spin_ns = 100000;

/* A spinning worker that finds a gap of PREEMPTED_NS between two looks at the clock was descheduled:
 * the machine has more runnable threads than cores, where spinning takes CPU from the threads doing
 * the work. Idle workers then sleep at once for NOSPIN_NS. */
#define PREEMPTED_NS 200000
#define NOSPIN_NS 100000000
static _Atomic int64_t g_nospin_until = 0;

/* When the caller waited this long for a task a worker had claimed, and four times as long as its own
 * tasks took, the worker was descheduled mid-task (a busy machine);
 * jobs then run on the caller's thread alone for BACKOFF_NS, so that two threads are never slower
 * than one for long. */
#define STALL_NS 50000
#define BACKOFF_NS 100000000
static _Atomic int64_t g_backoff_until = 0;
static _Atomic int64_t g_backoffs = 0;
/* Counters of the pool since the process started (mk_pool_stats): jobs handed to the pool, tasks
 * workers ran, futex wake-ups of sleeping workers, nanoseconds callers waited for workers' tasks,
 * times a spinning worker found itself descheduled, times the machine was found crowded; then times
 * a worker joined a job and found no task left (a wake-up or a spin that gained nothing), jobs short
 * enough to be split over spinning workers only that ran on the caller because every worker slept,
 * and the times mk_pool_rest told the idle workers to sleep. */
enum {
    ST_JOBS, ST_WORKER_TASKS, ST_WAKES, ST_WAIT_NS, ST_PREEMPTED, ST_CROWDED, ST_LATE, ST_KEPT, ST_RESTS,
    ST_COUNT
};
static _Atomic int64_t g_stat[ST_COUNT];

static inline int64_t stat_of(int i) { return atomic_load_explicit(&g_stat[i], memory_order_relaxed); }

/* Copies the counters into *out (mlts_kernels.h); returns how many there are. */
int mk_pool_stats(mk_pool_stats_t *out) {
    out->jobs = stat_of(ST_JOBS);
    out->worker_tasks = stat_of(ST_WORKER_TASKS);
    out->wakes = stat_of(ST_WAKES);
    out->wait_ns = stat_of(ST_WAIT_NS);
    out->preempted = stat_of(ST_PREEMPTED);
    out->crowded = stat_of(ST_CROWDED);
    out->late = stat_of(ST_LATE);
    out->kept = stat_of(ST_KEPT);
    out->rests = stat_of(ST_RESTS);
    return ST_COUNT;
}
_Static_assert(sizeof(mk_pool_stats_t) == ST_COUNT * sizeof(int64_t), "mk_pool_stats_t has a field per counter");

/* How many times the pool fell back to the caller's thread alone (see STALL_NS). */
int64_t mk_pool_backoffs(void) { return atomic_load(&g_backoffs); }

/* How long an idle worker spins before it sleeps (microseconds; 0: sleep at once). */
void mk_set_spin(int us) { atomic_store(&g_spin_ns, us < 0 ? 0 : (int64_t)us * 1000); }

int mk_spin(void) { return (int)(atomic_load(&g_spin_ns) / 1000); }

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static inline int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Claim and run tasks of job `gen` until none is left (or a newer job replaced it); how many.
 *
 * Tasks are claimed in runs (guided): each claim takes 1 / (2 x threads of the job) of the tasks not
 * yet claimed, at least one. A claim and its completion are two writes to a cache line both threads
 * use, about as long as a short task (a row of a small depthwise layer, a fraction of a
 * microsecond), so claiming tasks one at a time cost a small job much of what splitting it saved;
 * runs keep the claims to a dozen or so per job on two threads (64 tasks: 16, 12, 9, 7, 5, 4, 3, ...)
 * and give each thread contiguous rows or panels, while the last claims are still single tasks, so a
 * thread that joins late or runs slowly holds the others up by one short task at the end. */
static int64_t pool_run(uint32_t gen) {
    int64_t ran = 0;
    for (;;) {
        uint64_t s = atomic_load_explicit(&g_pool.state, memory_order_acquire);
        if ((uint32_t)(s >> 32) != gen) return ran;
        uint32_t next = (uint32_t)s;
        /* Acquire: a field written for a newer job orders that job's CLOSED before the CAS below,
         * which then fails. */
        int64_t ntasks = atomic_load_explicit(&g_pool.ntasks, memory_order_acquire);
        if (next == CLOSED || (int64_t)next >= ntasks) return ran;
        int64_t share = 2 * (int64_t)(atomic_load_explicit(&g_pool.helpers, memory_order_relaxed) + 1);
        int64_t take = (ntasks - next + share - 1) / share;
        task_fn fn = atomic_load_explicit(&g_pool.fn, memory_order_acquire);
        void *ctx = atomic_load_explicit(&g_pool.ctx, memory_order_acquire);
        if (!atomic_compare_exchange_weak_explicit(&g_pool.state, &s, s + (uint64_t)take,
                                                   memory_order_acq_rel, memory_order_acquire))
            continue;
        for (int64_t t = next; t < (int64_t)next + take; t++) fn(ctx, t);
        atomic_fetch_add_explicit(&g_pool.done, take, memory_order_release);
        ran += take;
    }
}

/* The machine is crowded when more threads are running than there are CPUs (the kernel's count of
 * running threads in /proc/loadavg, which includes the reader): a spinning worker would then take a
 * core from a thread with work. Looked at no more than every CROWD_CHECK_NS; idle workers then sleep
 * at once until the next look. */
#define CROWD_CHECK_NS 10000000
static _Atomic int64_t g_crowd_checked = 0;

static void check_crowd(int64_t t) {
    int64_t last = atomic_load_explicit(&g_crowd_checked, memory_order_relaxed);
    if (t - last < CROWD_CHECK_NS ||
        !atomic_compare_exchange_strong_explicit(&g_crowd_checked, &last, t, memory_order_relaxed,
                                                 memory_order_relaxed))
        return;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    char buf[128];
    int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return;
    buf[n] = 0;
    /* "0.52 0.58 0.59 3/271 1234": the fourth field is running/total. */
    const char *p = buf;
    for (int field = 0; field < 3 && p; field++) {
        p = strchr(p, ' ');
        if (p) p++;
    }
    if (!p) return;
    long running = strtol(p, NULL, 10);
    if (cpus > 0 && running > cpus) {
        atomic_store_explicit(&g_nospin_until, t + CROWD_CHECK_NS, memory_order_relaxed);
        atomic_fetch_add_explicit(&g_stat[ST_CROWDED], 1, memory_order_relaxed);
    }
}

static void *pool_worker(void *arg) {
    int id = (int)(intptr_t)arg;
    uint32_t seen = atomic_load(&g_pool.gen);
    for (;;) {
        int64_t start = now_ns(), last = start;
        check_crowd(start);
        uint32_t g;
        unsigned spins = 0;
        while ((g = atomic_load_explicit(&g_pool.gen, memory_order_acquire)) == seen) {
            cpu_relax();
            if ((++spins & 127) != 0) continue;
            int64_t t = now_ns();
            if (t - last >= PREEMPTED_NS) {
                atomic_store_explicit(&g_nospin_until, t + NOSPIN_NS, memory_order_relaxed);
                atomic_fetch_add_explicit(&g_stat[ST_PREEMPTED], 1, memory_order_relaxed);
            }
            last = t;
            int64_t window = atomic_load_explicit(&g_spin_ns, memory_order_relaxed);
            if (t < atomic_load_explicit(&g_nospin_until, memory_order_relaxed) ||
                atomic_load_explicit(&g_pool.rest, memory_order_relaxed) == (1ull << 32 | seen))
                window = 0;
            if (t - start >= window) {
                atomic_fetch_add(&g_pool.sleepers, 1);
                syscall(SYS_futex, &g_pool.gen, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
                atomic_fetch_sub(&g_pool.sleepers, 1);
                start = last = now_ns();
            }
        }
        seen = g;
        if (id < atomic_load_explicit(&g_pool.helpers, memory_order_relaxed)) {
            int64_t ran = pool_run(g);
            if (ran)
                atomic_fetch_add_explicit(&g_stat[ST_WORKER_TASKS], ran, memory_order_relaxed);
            else
                atomic_fetch_add_explicit(&g_stat[ST_LATE], 1, memory_order_relaxed);
        }
    }
    return NULL;
}

/* Start workers until there are `n` (fewer if the system refuses); how many there are. */
static int pool_start(int n) {
    if (n > MAX_WORKERS) n = MAX_WORKERS;
    pthread_mutex_lock(&g_pool.start);
    while (g_pool.workers < n) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int failed = pthread_create(&t, &attr, pool_worker, (void *)(intptr_t)g_pool.workers);
        pthread_attr_destroy(&attr);
        if (failed) break;
        __atomic_store_n(&g_pool.workers, g_pool.workers + 1, __ATOMIC_RELAXED);
    }
    int have = g_pool.workers;
    pthread_mutex_unlock(&g_pool.start);
    return have;
}

/* fn(ctx, t) for t in [0, ntasks) on up to nt threads (the caller's included). Results must not
 * depend on which thread runs a task. A second caller while the pool is in use (two executions at
 * once) runs its tasks on its own thread. */
static void parallel_for_job(int nt, int64_t ntasks, task_fn fn, void *ctx, int wake) {
    if (nt > ntasks) nt = (int)ntasks;
    int helpers = nt - 1;
    int64_t backoff = atomic_load_explicit(&g_backoff_until, memory_order_relaxed);
    if (backoff && now_ns() < backoff) helpers = 0;
    if (helpers > 0 && !wake &&
        __atomic_load_n(&g_pool.workers, __ATOMIC_RELAXED) - atomic_load(&g_pool.sleepers) <= 0) {
        /* A short job and every worker asleep (or none started): the caller's alone, at the cost of
         * two loads (the check below, under the pool's flag, decides when some worker is awake). */
        atomic_fetch_add_explicit(&g_stat[ST_KEPT], 1, memory_order_relaxed);
        helpers = 0;
    }
    if (helpers > 0 && ntasks < (int64_t)CLOSED && !atomic_flag_test_and_set(&g_pool.busy)) {
        int have = pool_start(helpers);
        if (have < helpers) helpers = have;
        if (!wake) {
            /* A short job goes only to workers already spinning: waking one costs the caller a
             * system call and the worker tens of microseconds, and on a busy machine (where the
             * idle workers sleep at once) it would only compete for the caller's core. */
            int awake = have - atomic_load(&g_pool.sleepers);
            if (awake < helpers) helpers = awake;
            if (helpers <= 0) atomic_fetch_add_explicit(&g_stat[ST_KEPT], 1, memory_order_relaxed);
        }
        if (helpers > 0) {
            uint32_t gen = atomic_load_explicit(&g_pool.gen, memory_order_relaxed) + 1;
            atomic_store_explicit(&g_pool.fn, fn, memory_order_release);
            atomic_store_explicit(&g_pool.ctx, ctx, memory_order_release);
            atomic_store_explicit(&g_pool.ntasks, ntasks, memory_order_release);
            atomic_store_explicit(&g_pool.helpers, helpers, memory_order_relaxed);
            atomic_store_explicit(&g_pool.done, 0, memory_order_relaxed);
            atomic_store_explicit(&g_pool.state, (uint64_t)gen << 32, memory_order_release);
            atomic_store(&g_pool.gen, gen);
            atomic_fetch_add_explicit(&g_stat[ST_JOBS], 1, memory_order_relaxed);
            if (atomic_load(&g_pool.sleepers) > 0) {
                atomic_fetch_add_explicit(&g_stat[ST_WAKES], 1, memory_order_relaxed);
                syscall(SYS_futex, &g_pool.gen, FUTEX_WAKE_PRIVATE, helpers, NULL, NULL, 0);
            }
            int64_t t0 = now_ns();
            int64_t ran = pool_run(gen);
            /* Only tasks a worker claimed remain; a descheduled worker gets the CPU back soonest
             * if we yield ours. */
            int64_t t1 = 0, tw = now_ns();  /* tw: counted as waiting from here */
            for (unsigned spins = 0; atomic_load_explicit(&g_pool.done, memory_order_acquire) < ntasks; spins++) {
                if (spins < 4096) {
                    cpu_relax();
                    continue;
                }
                if (!t1) t1 = now_ns();
                sched_yield();
            }
            atomic_fetch_add_explicit(&g_stat[ST_WAIT_NS], now_ns() - tw, memory_order_relaxed);
            if (t1) {
                /* A stall: a wait of STALL_NS and of four of this caller's tasks (a worker's
                 * task of normal length ends sooner). */
                int64_t t2 = now_ns(), per_task = (t1 - t0) / (ran > 0 ? ran : 1);
                if (t2 - t1 >= STALL_NS && t2 - t1 >= 4 * per_task) {
                    atomic_store(&g_backoff_until, t2 + BACKOFF_NS);
                    atomic_fetch_add(&g_backoffs, 1);
                }
            }
            atomic_store(&g_pool.state, ((uint64_t)gen << 32) | CLOSED);
            atomic_flag_clear(&g_pool.busy);
            return;
        }
        atomic_flag_clear(&g_pool.busy);
    }
    for (int64_t t = 0; t < ntasks; t++) fn(ctx, t);
}

static void parallel_for(int nt, int64_t ntasks, task_fn fn, void *ctx) { parallel_for_job(nt, ntasks, fn, ctx, 1); }

/* fn(ctx, t) for t in [0, rows) over the kernels' threads when `work` (elements or multiply-adds)
 * reaches base >> g_split; workers are woken for it only from `base`. */
static void parallel_rows(int64_t work, int64_t base, int64_t rows, task_fn fn, void *ctx) {
    int nt = g_threads <= 1 || work < (base >> g_split) || rows < 2 ? 1 : (rows < g_threads ? (int)rows : g_threads);
    parallel_for_job(nt, rows, fn, ctx, work >= base);
}

/* parallel_for for the other kernel files built into this library (qgemm_kernels.c). */
void mk_parallel_for(int nt, int64_t ntasks, task_fn fn, void *ctx) { parallel_for(nt, ntasks, fn, ctx); }

/* fn(ctx, t) for t in [0, ntasks) over up to nt threads; sleeping workers are woken only when `wake`,
 * else only workers already spinning help (lstm_kernels.c). */
void mk_parallel_for_job(int nt, int64_t ntasks, task_fn fn, void *ctx, int wake) {
    parallel_for_job(nt, ntasks, fn, ctx, wake);
}

/* Jobs below base >> split of work run on the caller's thread (lstm_kernels.c's rule is the pool's). */
int64_t mk_split_work(int64_t base) { return base >> g_split; }

/* The caller's execution ended: idle workers sleep now instead of spinning out their window, so they
 * take no CPU from the threads that return its results and read the next request (the service's
 * reader, the client). The next job that may wake them does; a shorter one runs on the caller. */
void mk_pool_rest(void) {
    if (!__atomic_load_n(&g_pool.workers, __ATOMIC_RELAXED)) return;
    uint64_t rest = 1ull << 32 | atomic_load_explicit(&g_pool.gen, memory_order_acquire);
    if (atomic_load_explicit(&g_pool.rest, memory_order_relaxed) == rest) return;
    atomic_store_explicit(&g_pool.rest, rest, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_stat[ST_RESTS], 1, memory_order_relaxed);
}

static inline float clampf(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* Vector types (GCC/Clang vector extensions) of the register-blocked loops. */
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

static inline v8f ld_f32(const float *p, v8i zp) {
    (void)zp;
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ------------------------------------------------------------ GEMM over the kernels' threads */

/* The process's BLAS sgemm (cblas_sgemm, 32- or 64-bit integer interface), found by the loader;
 * BLAS's own threads are turned off so every thread the driver uses is one of ours. */
typedef void (*sgemm64_t)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t,
                          const float *, int64_t, float, float *, int64_t);
typedef void (*sgemm32_t)(int, int, int, int, int, int, float, const float *, int, const float *, int,
                          float, float *, int);
static void *g_sgemm = NULL;
static int g_sgemm_ilp64 = 0;

void mk_set_sgemm(void *fn, int ilp64) {
    g_sgemm = fn;
    g_sgemm_ilp64 = ilp64;
}

int mk_has_sgemm(void) { return g_sgemm != NULL; }

#define ROW_MAJOR 101
#define NO_TRANS 111

/* The epilogue a GEMM may apply as it stores c: + bias[column], then clamp to [lo, hi]
 * (bias NULL: none). The same float operations as a separate pass over c, so the same bits. */
typedef struct {
    const float *bias;
    float lo, hi;
    const void *rq; /* a requant_t: each finished block of c (exact integers) requantized into qout */
    void *qout;
} epilogue_t;

static void requant_block(const float *c, int64_t n, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                          const void *rq, void *out);

static inline v8f epi8(v8f v, const epilogue_t *e, int64_t j) {
    if (!e->bias) return v;
    v8i z = {0};
    v += ld_f32(e->bias + j, z);
#ifdef __AVX2__
    return (v8f)_mm256_min_ps(_mm256_set1_ps(e->hi), _mm256_max_ps(_mm256_set1_ps(e->lo), (__m256)v));
#else
    for (int q = 0; q < 8; q++) v[q] = clampf(v[q], e->lo, e->hi);
    return v;
#endif
}

static inline float epi1(float v, const epilogue_t *e, int64_t j) {
    return e->bias ? clampf(v + e->bias[j], e->lo, e->hi) : v;
}

/* The epilogue over a block of c already computed: rows [r0, r1), columns [c0, c1). */
static void epilogue_block(float *c, int64_t n, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                           const epilogue_t *e) {
    if (e->bias) {
        for (int64_t r = r0; r < r1; r++) {
            float *p = c + r * n;
            for (int64_t j = c0; j < c1; j++) p[j] = clampf(p[j] + e->bias[j], e->lo, e->hi);
        }
    }
    if (e->rq) requant_block(c, n, r0, r1, c0, c1, e->rq, e->qout);
}

/* c[m, n] = a[m, k] @ b[k, n] for a block: rows [r0, r1), columns [c0, c1); all row-major, dense;
 * then the epilogue on the block while it is in cache. */
static void sgemm_block(const float *a, const float *b, float *c, int64_t n, int64_t k, int64_t r0,
                        int64_t r1, int64_t c0, int64_t c1, const epilogue_t *e) {
    if (r1 <= r0 || c1 <= c0) return;
    if (g_sgemm_ilp64)
        ((sgemm64_t)g_sgemm)(ROW_MAJOR, NO_TRANS, NO_TRANS, r1 - r0, c1 - c0, k, 1.0f, a + r0 * k, k, b + c0,
                             n, 0.0f, c + r0 * n + c0, n);
    else
        ((sgemm32_t)g_sgemm)(ROW_MAJOR, NO_TRANS, NO_TRANS, (int)(r1 - r0), (int)(c1 - c0), (int)k, 1.0f,
                             a + r0 * k, (int)k, b + c0, (int)n, 0.0f, c + r0 * n + c0, (int)n);
    epilogue_block(c, n, r0, r1, c0, c1, e);
}

/* Multiply-adds from which a GEMM wakes sleeping workers (about 40 us of it; see PARALLEL_WORK). */
#define PARALLEL_GEMM (1 << 22)

/* GEMMs with few terms per output (K <= SMALL_K: the expansion layers of MobileNet v2, a first
 * convolution's 27) are where BLAS is least efficient; this loop keeps a 4 x 16 block of C in
 * registers and streams B's rows, which stay in L1. */
#ifndef SMALL_K
#define SMALL_K 32
#endif
/* ... and so are small GEMMs (a late MobileNet layer's 64 x 128 x 128): BLAS's per-call set-up and
 * packing cost more than the arithmetic there (measured: twice the time of this loop). */
#ifndef SMALL_GEMM
#define SMALL_GEMM (1 << 22)
#endif
#ifndef SMALL_N
#define SMALL_N 16
#endif
/* ... and so are GEMMs whose B (bytes) fits in L2 (MobileNet's pointwise layers up to 256 x 256):
 * measured faster than this machine's BLAS up to about 0.75 MB, slower beyond. */
#ifndef SMALL_B
#define SMALL_B (768 << 10)
#endif

static void gemm_smallk_rows(const float *a, const float *b, float *c, int64_t ld, int64_t n, int64_t k,
                             int64_t r0, int64_t r1, const epilogue_t *e) {
    v8i z = {0};
    int64_t i = r0;
    /* Six rows by 16 columns: twelve sums in flight, enough to keep both FMA units busy. The same
     * sums in the same order as the loops below. */
    for (; i + 6 <= r1 && n >= 16; i += 6) {
        const float *ar[6];
        for (int r = 0; r < 6; r++) ar[r] = a + (i + r) * k;
        int64_t j = 0;
        for (; j + 16 <= n; j += 16) {
            v8f s0[6] = {{0}}, s1[6] = {{0}};
            for (int64_t q = 0; q < k; q++) {
                v8f b0 = ld_f32(b + q * ld + j, z), b1 = ld_f32(b + q * ld + j + 8, z);
                for (int r = 0; r < 6; r++) {
                    float av = ar[r][q];
                    s0[r] += av * b0;
                    s1[r] += av * b1;
                }
            }
            for (int r = 0; r < 6; r++) {
                v8f o0 = epi8(s0[r], e, j), o1 = epi8(s1[r], e, j + 8);
                memcpy(c + (i + r) * ld + j, &o0, 32);
                memcpy(c + (i + r) * ld + j + 8, &o1, 32);
            }
        }
        for (; j + 8 <= n; j += 8) {
            v8f s0[6] = {{0}};
            for (int64_t q = 0; q < k; q++) {
                v8f b0 = ld_f32(b + q * ld + j, z);
                for (int r = 0; r < 6; r++) s0[r] += ar[r][q] * b0;
            }
            for (int r = 0; r < 6; r++) {
                v8f o0 = epi8(s0[r], e, j);
                memcpy(c + (i + r) * ld + j, &o0, 32);
            }
        }
        for (int r = 0; r < 6; r++) {
            const float *a0 = ar[r];
            int64_t jj = j;
            for (; jj + 8 <= n; jj += 8) {
                v8f c0 = {0};
                for (int64_t q = 0; q < k; q++) c0 += a0[q] * ld_f32(b + q * ld + jj, z);
                c0 = epi8(c0, e, jj);
                memcpy(c + (i + r) * ld + jj, &c0, 32);
            }
            for (; jj < n; jj++) {
                float s0 = 0;
                for (int64_t q = 0; q < k; q++) s0 += a0[q] * b[q * ld + jj];
                c[(i + r) * ld + jj] = epi1(s0, e, jj);
            }
        }
    }
    for (; i + 4 <= r1; i += 4) {
        const float *a0 = a + i * k, *a1 = a0 + k, *a2 = a1 + k, *a3 = a2 + k;
        int64_t j = 0;
        for (; j + 16 <= n; j += 16) {
            v8f c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
            for (int64_t q = 0; q < k; q++) {
                v8f b0 = ld_f32(b + q * ld + j, z), b1 = ld_f32(b + q * ld + j + 8, z);
                c00 += a0[q] * b0;
                c01 += a0[q] * b1;
                c10 += a1[q] * b0;
                c11 += a1[q] * b1;
                c20 += a2[q] * b0;
                c21 += a2[q] * b1;
                c30 += a3[q] * b0;
                c31 += a3[q] * b1;
            }
            c00 = epi8(c00, e, j), c01 = epi8(c01, e, j + 8), c10 = epi8(c10, e, j), c11 = epi8(c11, e, j + 8);
            c20 = epi8(c20, e, j), c21 = epi8(c21, e, j + 8), c30 = epi8(c30, e, j), c31 = epi8(c31, e, j + 8);
            float *o = c + i * ld + j;
            memcpy(o, &c00, 32);
            memcpy(o + 8, &c01, 32);
            memcpy(o + ld, &c10, 32);
            memcpy(o + ld + 8, &c11, 32);
            memcpy(o + 2 * ld, &c20, 32);
            memcpy(o + 2 * ld + 8, &c21, 32);
            memcpy(o + 3 * ld, &c30, 32);
            memcpy(o + 3 * ld + 8, &c31, 32);
        }
        for (; j + 8 <= n; j += 8) {
            v8f c00 = {0}, c10 = {0}, c20 = {0}, c30 = {0};
            for (int64_t q = 0; q < k; q++) {
                v8f b0 = ld_f32(b + q * ld + j, z);
                c00 += a0[q] * b0;
                c10 += a1[q] * b0;
                c20 += a2[q] * b0;
                c30 += a3[q] * b0;
            }
            c00 = epi8(c00, e, j), c10 = epi8(c10, e, j), c20 = epi8(c20, e, j), c30 = epi8(c30, e, j);
            float *o = c + i * ld + j;
            memcpy(o, &c00, 32);
            memcpy(o + ld, &c10, 32);
            memcpy(o + 2 * ld, &c20, 32);
            memcpy(o + 3 * ld, &c30, 32);
        }
        for (; j < n; j++) {
            float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int64_t q = 0; q < k; q++) {
                float bv = b[q * ld + j];
                s0 += a0[q] * bv;
                s1 += a1[q] * bv;
                s2 += a2[q] * bv;
                s3 += a3[q] * bv;
            }
            c[i * ld + j] = epi1(s0, e, j);
            c[(i + 1) * ld + j] = epi1(s1, e, j);
            c[(i + 2) * ld + j] = epi1(s2, e, j);
            c[(i + 3) * ld + j] = epi1(s3, e, j);
        }
    }
    for (; i < r1; i++) {
        const float *a0 = a + i * k;
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            v8f c0 = {0};
            for (int64_t q = 0; q < k; q++) c0 += a0[q] * ld_f32(b + q * ld + j, z);
            c0 = epi8(c0, e, j);
            memcpy(c + i * ld + j, &c0, 32);
        }
        for (; j < n; j++) {
            float s0 = 0;
            for (int64_t q = 0; q < k; q++) s0 += a0[q] * b[q * ld + j];
            c[i * ld + j] = epi1(s0, e, j);
        }
    }
}

/* c = a @ b for fewer than four rows (a fully connected layer on one vector, an LSTM step): b is
 * streamed once, row after row in memory order (it is usually larger than the caches), four rows at a
 * time into the row of c, which stays in L1; then the epilogue over that row. */
static void gemm_fewrows(const float *a, const float *b, float *c, int64_t ld, int64_t m, int64_t n, int64_t k,
                         const epilogue_t *e) {
    v8i z = {0};
    for (int64_t i = 0; i < m; i++) {
        const float *a0 = a + i * k;
        float *ci = c + i * ld;
        memset(ci, 0, (size_t)n * sizeof(float));
        int64_t q = 0;
        for (; q + 8 <= k; q += 8) {
            const float *b0 = b + q * ld;
            float x[8];
            memcpy(x, a0 + q, sizeof x);
            int64_t j = 0;
            for (; j + 16 <= n; j += 16) {
                v8f acc0 = ld_f32(ci + j, z), acc1 = ld_f32(ci + j + 8, z);
                for (int r = 0; r < 8; r++) {
                    acc0 += x[r] * ld_f32(b0 + r * ld + j, z);
                    acc1 += x[r] * ld_f32(b0 + r * ld + j + 8, z);
                }
                memcpy(ci + j, &acc0, 32);
                memcpy(ci + j + 8, &acc1, 32);
            }
            for (; j < n; j++) {
                float acc = ci[j];
                for (int r = 0; r < 8; r++) acc += x[r] * b0[r * ld + j];
                ci[j] = acc;
            }
        }
        for (; q + 4 <= k; q += 4) {
            const float *b0 = b + q * ld, *b1 = b0 + ld, *b2 = b1 + ld, *b3 = b2 + ld;
            float x0 = a0[q], x1 = a0[q + 1], x2 = a0[q + 2], x3 = a0[q + 3];
            int64_t j = 0;
            for (; j + 8 <= n; j += 8) {
                v8f acc = ld_f32(ci + j, z);
                acc += x0 * ld_f32(b0 + j, z);
                acc += x1 * ld_f32(b1 + j, z);
                acc += x2 * ld_f32(b2 + j, z);
                acc += x3 * ld_f32(b3 + j, z);
                memcpy(ci + j, &acc, 32);
            }
            for (; j < n; j++) {
                float acc = ci[j];
                acc += x0 * b0[j];
                acc += x1 * b1[j];
                acc += x2 * b2[j];
                acc += x3 * b3[j];
                ci[j] = acc;
            }
        }
        for (; q < k; q++) {
            const float *b0 = b + q * ld;
            float x0 = a0[q];
            int64_t j = 0;
            for (; j + 8 <= n; j += 8) {
                v8f acc = ld_f32(ci + j, z);
                acc += x0 * ld_f32(b0 + j, z);
                memcpy(ci + j, &acc, 32);
            }
            for (; j < n; j++) ci[j] += x0 * b0[j];
        }
        epilogue_block(c, ld, i, i + 1, 0, n, e);
    }
}

typedef struct {
    const float *a, *b;
    float *c;
    int64_t m, n, k, rows, width, row_chunks, col_chunks;
    const epilogue_t *e;
} smallk_job;

static void smallk_task(void *ctx, int64_t t) {
    const smallk_job *j = ctx;
    const epilogue_t *e = j->e;
    int64_t m = j->m, n = j->n, rows = j->rows, width = j->width;
    int64_t r0 = (t / j->col_chunks) * rows, r1 = r0 + rows < m ? r0 + rows : m;
    int64_t c0 = (t % j->col_chunks) * width, c1 = c0 + width < n ? c0 + width : n;
    epilogue_t part = {e->bias ? e->bias + c0 : NULL, e->lo, e->hi, NULL, NULL};
    gemm_smallk_rows(j->a, j->b + c0, j->c + c0, n, c1 - c0, j->k, r0, r1, &part);
    if (e->rq) requant_block(j->c, n, r0, r1, c0, c1, e->rq, e->qout);
}

static void gemm_smallk(const float *a, const float *b, float *c, int64_t m, int64_t n, int64_t k,
                        const epilogue_t *e) {
    const int64_t rows = 60; /* rows per chunk of work: ten blocks of six */
    int64_t row_chunks = (m + rows - 1) / rows;
    int nt = g_threads;
    if (nt <= 1 || m * n * k < (PARALLEL_GEMM >> g_split)) nt = 1;
    /* Columns in chunks too (multiples of 16) when there are fewer row chunks than work for the
     * threads, and so that a chunk of B (k x width) stays in L2. */
    int64_t width = n;
    while (width > 64 && (row_chunks * ((n + width - 1) / width) < 4 * nt || k * width * 4 > (256 << 10)))
        width = ((width / 2) + 15) / 16 * 16;
    int64_t col_chunks = (n + width - 1) / width;
    smallk_job job = {a, b, c, m, n, k, rows, width, row_chunks, col_chunks, e};
    parallel_for_job(nt, row_chunks * col_chunks, smallk_task, &job, m * n * k >= PARALLEL_GEMM);
}

typedef struct {
    const float *a, *b;
    float *c;
    int64_t m, n, k, width;
    const epilogue_t *e;
} fewrows_job;

static void fewrows_task(void *ctx, int64_t t) {
    const fewrows_job *j = ctx;
    int64_t c0 = t * j->width, c1 = c0 + j->width < j->n ? c0 + j->width : j->n;
    const epilogue_t *e = j->e;
    epilogue_t part = {e->bias ? e->bias + c0 : NULL, e->lo, e->hi, NULL, NULL};
    gemm_fewrows(j->a, j->b + c0, j->c + c0, j->n, j->m, c1 - c0, j->k, &part);
    if (e->rq) requant_block(j->c, j->n, 0, j->m, c0, c1, e->rq, e->qout);
}

/* Weights (bytes) of a GEMM on fewer than four rows, which streams them once, from which it is split
 * over spinning workers, and from which it wakes sleeping ones: a wake-up costs the caller a system
 * call and the worker tens of microseconds before it runs, about as long as streaming 1 MB, so only
 * a stream of PARALLEL_WORK's size (about 50 us) pays for one. MobileNet v1 0.25's 1 MB classifier
 * woke a worker on every execution (which then spun out its window after the model's last split
 * operation); MobileNet 1.0 and v2's 4-5 MB classifiers still do. */
#define FEWROWS_SPLIT_BYTES (512 << 10)
#define FEWROWS_WAKE_BYTES (2 << 20)

/* Bytes of c a single-threaded BLAS call writes before its epilogue runs (about L2). */
#define EPILOGUE_CHUNK (256 << 10)

typedef struct {
    const float *a, *b;
    float *c;
    int64_t n, k, per, extent, extent_m;
    int by_rows;
    const epilogue_t *e;
} sgemm_job;

static void sgemm_task(void *ctx, int64_t t) {
    const sgemm_job *j = ctx;
    int64_t lo = t * j->per, hi = lo + j->per < j->extent ? lo + j->per : j->extent;
    if (j->by_rows)
        sgemm_block(j->a, j->b, j->c, j->n, j->k, lo, hi, 0, j->n, j->e);
    else
        sgemm_block(j->a, j->b, j->c, j->n, j->k, 0, j->extent_m, lo, hi, j->e);
}

/* c = a @ b, then the epilogue, split by rows (or, for few rows, by columns) over the kernels'
 * threads: each block is one single-threaded BLAS call, so results do not depend on the thread
 * count. -1 without BLAS (nothing written). */
static int gemm_epilogue(const float *a, const float *b, float *c, int64_t m, int64_t n, int64_t k,
                         const epilogue_t *e) {
    if (m >= 4 && n >= SMALL_N && (k <= SMALL_K || m * n * k <= SMALL_GEMM || k * n * 4 <= SMALL_B)) {
        gemm_smallk(a, b, c, m, n, k, e);
        return 0;
    }
    if (m < 4 && n >= 8) {
        /* Streaming b is the cost: split its columns over the threads from FEWROWS_SPLIT_BYTES of it,
         * waking sleeping workers from FEWROWS_WAKE_BYTES (each element of c is summed in the same
         * order whatever the split). */
        int nt = g_threads;
        int64_t bytes = k * n * (int64_t)sizeof(float);
        if (nt <= 1 || bytes < FEWROWS_SPLIT_BYTES) {
            gemm_fewrows(a, b, c, n, m, n, k, e);
            return 0;
        }
        int64_t width = (n + 4 * nt - 1) / (4 * nt);
        width = width < 64 ? 64 : (width + 15) / 16 * 16;
        fewrows_job job = {a, b, c, m, n, k, width, e};
        parallel_for_job(nt, (n + width - 1) / width, fewrows_task, &job, bytes >= FEWROWS_WAKE_BYTES);
        return 0;
    }
    if (!g_sgemm) return -1;
    if (g_sgemm_ilp64 == 0 && (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)) return -1;
    int nt = g_threads;
    if (nt <= 1 || m * n * k < (PARALLEL_GEMM >> g_split)) {
        /* Rows in chunks whose part of c stays in cache until the epilogue reads it (with or without
         * an epilogue, so that both give the same bits). */
        int64_t per = m;
        if (m * n * (int64_t)sizeof(float) > EPILOGUE_CHUNK) {
            per = EPILOGUE_CHUNK / ((int64_t)sizeof(float) * n);
            if (per < 16) per = 16;
        }
        for (int64_t r0 = 0; r0 < m; r0 += per)
            sgemm_block(a, b, c, n, k, r0, r0 + per < m ? r0 + per : m, 0, n, e);
        return 0;
    }
    int by_rows = m >= 8 * (int64_t)nt;
    int64_t extent = by_rows ? m : n;
    /* Four blocks per thread, dealt out dynamically (see PARALLEL_WORK); column blocks stay
     * multiples of 16 floats (whole cache lines of c's rows). */
    int64_t blocks = 4 * (int64_t)nt;
    int64_t per = (extent + blocks - 1) / blocks;
    if (!by_rows) per = (per + 15) / 16 * 16;
    blocks = (extent + per - 1) / per;
    sgemm_job job = {a, b, c, n, k, per, extent, m, by_rows, e};
    parallel_for_job(nt, blocks, sgemm_task, &job, m * n * k >= PARALLEL_GEMM);
    return 0;
}

/* ------------------------------------------------------------ GEMM on prepacked weights */

/* A thread's staging buffer (centred 8-bit rows as float32), grown as needed and kept for the next
 * call: one per thread, never shared, freed when the thread ends (a thread-specific key's destructor). */
static _Thread_local float *t_stage;
static _Thread_local int64_t t_stage_floats;
static pthread_key_t g_stage_key;
static pthread_once_t g_stage_once = PTHREAD_ONCE_INIT;
static int g_stage_key_ok;

static void stage_key_init(void) { g_stage_key_ok = pthread_key_create(&g_stage_key, free) == 0; }

static float *stage_buffer(int64_t floats) {
    if (floats > t_stage_floats) {
        pthread_once(&g_stage_once, stage_key_init);
        if (!g_stage_key_ok) return NULL;
        float *p = realloc(t_stage, (size_t)floats * sizeof(float));
        if (!p) return NULL;
        t_stage = p;
        t_stage_floats = floats;
        pthread_setspecific(g_stage_key, p);
    }
    return t_stage;
}

/* Columns per panel of a packed B: bp[(p * k + q) * PANEL + j] = b[q, p * PANEL + j], 0 past n. */
#define PANEL 16

/* B [k, n] (row-major) into panels of PANEL columns, each k x PANEL contiguous: a panel streams from
 * memory in order, where b's own rows are n floats apart (every row a new page for large n). */
void mk_pack_b_f32(const float *b, int64_t k, int64_t n, float *bp) {
    int64_t panels = (n + PANEL - 1) / PANEL;
    for (int64_t p = 0; p < panels; p++) {
        int64_t j0 = p * PANEL, w = n - j0 < PANEL ? n - j0 : PANEL;
        for (int64_t q = 0; q < k; q++) {
            float *dst = bp + (p * k + q) * PANEL;
            memcpy(dst, b + q * n + j0, (size_t)w * sizeof(float));
            for (int64_t j = w; j < PANEL; j++) dst[j] = 0.0f;
        }
    }
}

/* R (1..6) rows of c, one panel: R x 16 sums in registers over all k, B's panel streamed in order;
 * the epilogue as the block is stored (`cols` valid columns from column j). */
static inline __attribute__((always_inline)) void packed_micro(int R, const float *a, int64_t k, const float *bpp,
                                                               float *c, int64_t ldc, int64_t j, int64_t cols,
                                                               const epilogue_t *e) {
    v8i z = {0};
    v8f s0[6], s1[6];
    const float *ar[6];
    for (int r = 0; r < R; r++) {
        ar[r] = a + r * k;
        s0[r] = (v8f){0};
        s1[r] = (v8f){0};
    }
    if (cols <= 8) { /* a last panel of at most 8 columns: half the work */
#pragma GCC unroll 2
        for (int64_t q = 0; q < k; q++) {
            v8f b0 = ld_f32(bpp + q * PANEL, z);
            for (int r = 0; r < R; r++) s0[r] += ar[r][q] * b0;
        }
    } else {
#pragma GCC unroll 2
        for (int64_t q = 0; q < k; q++) {
            v8f b0 = ld_f32(bpp + q * PANEL, z), b1 = ld_f32(bpp + q * PANEL + 8, z);
            for (int r = 0; r < R; r++) {
                float av = ar[r][q];
                s0[r] += av * b0;
                s1[r] += av * b1;
            }
        }
    }
#ifdef __AVX2__
    if (e->bias && (cols == 8 || cols == PANEL)) {
        /* The epilogue's constants loaded once for the block's rows: stores through c may alias e and
         * its bias, so epi8 would load them again for every vector stored (the same floats). */
        const __m256 vlo = _mm256_set1_ps(e->lo), vhi = _mm256_set1_ps(e->hi);
        const v8f b0 = ld_f32(e->bias + j, z), b1 = cols == PANEL ? ld_f32(e->bias + j + 8, z) : b0;
        for (int r = 0; r < R; r++) {
            float *o = c + r * ldc + j;
            _mm256_storeu_ps(o, _mm256_min_ps(vhi, _mm256_max_ps(vlo, (__m256)(s0[r] + b0))));
            if (cols == PANEL) _mm256_storeu_ps(o + 8, _mm256_min_ps(vhi, _mm256_max_ps(vlo, (__m256)(s1[r] + b1))));
        }
        return;
    }
#endif
    for (int r = 0; r < R; r++) {
        float *o = c + r * ldc + j;
        if (cols == 8) {
            v8f o0 = epi8(s0[r], e, j);
            memcpy(o, &o0, 32);
        } else if (cols == PANEL) {
            v8f o0 = epi8(s0[r], e, j), o1 = epi8(s1[r], e, j + 8);
            memcpy(o, &o0, 32);
            memcpy(o + 8, &o1, 32);
        } else {
            float t[PANEL];
            memcpy(t, &s0[r], 32);
            memcpy(t + 8, &s1[r], 32);
            for (int64_t q = 0; q < cols; q++) o[q] = epi1(t[q], e, j + q);
        }
    }
}

/* Rows [r0, r1) by panels [p0, p1) of c = a @ B (B packed), then the epilogue. Each element of c is
 * the sum over q in order, whatever the block, so results do not depend on how work is split. */
static void gemm_packed_block(const float *a, const float *bp, float *c, int64_t n, int64_t k, int64_t r0,
                              int64_t r1, int64_t p0, int64_t p1, const epilogue_t *e) {
    for (int64_t i = r0; i < r1; i += 6) {
        int64_t rows = r1 - i < 6 ? r1 - i : 6;
        const float *ai = a + i * k;
        float *ci = c + i * n;
        for (int64_t p = p0; p < p1; p++) {
            int64_t j = p * PANEL, cols = n - j < PANEL ? n - j : PANEL;
            const float *bpp = bp + p * k * PANEL;
            switch (rows) {
            case 6: packed_micro(6, ai, k, bpp, ci, n, j, cols, e); break;
            case 5: packed_micro(5, ai, k, bpp, ci, n, j, cols, e); break;
            case 4: packed_micro(4, ai, k, bpp, ci, n, j, cols, e); break;
            case 3: packed_micro(3, ai, k, bpp, ci, n, j, cols, e); break;
            case 2: packed_micro(2, ai, k, bpp, ci, n, j, cols, e); break;
            default: packed_micro(1, ai, k, bpp, ci, n, j, cols, e); break;
            }
        }
    }
    if (e->rq) {
        int64_t c1 = p1 * PANEL < n ? p1 * PANEL : n;
        requant_block(c, n, r0, r1, p0 * PANEL, c1, e->rq, e->qout);
    }
}

typedef struct {
    const float *a, *bp;
    float *c;
    int64_t m, n, k, rows, row_chunks, group, panels;
    const epilogue_t *e;
    const void *x8; /* instead of a: 8-bit rows, centred per task (x - zp as float32) */
    int is_signed, zp;
    _Atomic int failed;
} packed_job;

static void packed_task(void *ctx, int64_t t) {
    packed_job *j = ctx;
    int64_t g0 = (t / j->row_chunks) * j->group, g1 = g0 + j->group < j->panels ? g0 + j->group : j->panels;
    int64_t r0 = (t % j->row_chunks) * j->rows, r1 = r0 + j->rows < j->m ? r0 + j->rows : j->m;
    if (!j->x8) {
        gemm_packed_block(j->a, j->bp, j->c, j->n, j->k, r0, r1, g0, g1, j->e);
        return;
    }
    /* The task's rows of a, centred into this thread's buffer (in cache for the multiply). */
    int64_t count = (r1 - r0) * j->k, at = r0 * j->k;
    float *a = stage_buffer(count);
    if (!a) {
        atomic_store(&j->failed, 1);
        return;
    }
    if (j->is_signed) {
        const int8_t *s = (const int8_t *)j->x8 + at;
        for (int64_t i = 0; i < count; i++) a[i] = (float)(s[i] - j->zp);
    } else {
        const uint8_t *s = (const uint8_t *)j->x8 + at;
        for (int64_t i = 0; i < count; i++) a[i] = (float)(s[i] - j->zp);
    }
    epilogue_t part = *j->e;
    if (part.qout) part.qout = (char *)part.qout + r0 * j->n;
    gemm_packed_block(a, j->bp, j->c + r0 * j->n, j->n, j->k, 0, r1 - r0, g0, g1, &part);
}

/* Multiply-adds from which a GEMM on packed weights wakes sleeping workers (about 40 us of it). */
#define PARALLEL_PACKED_GEMM (1 << 22)

/* Bytes of packed B one task multiplies (its panels stay in L2 while the task's rows stream by). */
#define PACKED_B_CHUNK (256 << 10)

/* c = a @ B with B packed by mk_pack_b_f32, then the epilogue: tasks of up to 60 rows by a group of
 * panels, dealt out over the kernels' threads panel group by panel group (consecutive tasks share
 * their panels). No BLAS call, so no per-call packing. */
static int gemm_packed_x(const float *a, const void *x8, int is_signed, int zp, const float *bp, float *c,
                         int64_t m, int64_t n, int64_t k, const epilogue_t *e) {
    int64_t panels = (n + PANEL - 1) / PANEL;
    if (m <= 0 || panels <= 0) return 0;
    int nt = g_threads;
    if (nt <= 1 || m * n * k < (PARALLEL_PACKED_GEMM >> g_split)) nt = 1;
    /* Chunks of at most 60 rows, of equal size in blocks of six. */
    int64_t row_chunks = (m + 59) / 60;
    int64_t rows = ((m + row_chunks - 1) / row_chunks + 5) / 6 * 6;
    row_chunks = (m + rows - 1) / rows;
    int64_t group = panels;
    while (group > 1 && (k * group * PANEL * 4 > PACKED_B_CHUNK || (nt > 1 && row_chunks * ((panels + group - 1) / group) < 4 * nt)))
        group = (group + 1) / 2;
    int64_t groups = (panels + group - 1) / group;
    packed_job job = {a, bp, c, m, n, k, rows, row_chunks, group, panels, e, x8, is_signed, zp, 0};
    parallel_for_job(nt, row_chunks * groups, packed_task, &job, m * n * k >= PARALLEL_PACKED_GEMM);
    return atomic_load(&job.failed) ? -1 : 0;
}

static void gemm_packed(const float *a, const float *bp, float *c, int64_t m, int64_t n, int64_t k,
                        const epilogue_t *e) {
    gemm_packed_x(a, NULL, 0, 0, bp, c, m, n, k, e);
}

/* c = clamp(a @ b + bias, lo, hi) with b packed (mk_pack_b_f32). */
void mk_gemm_packed_bias_act_f32(const float *a, const float *bp, float *c, int64_t m, int64_t n, int64_t k,
                                 const float *bias, float lo, float hi) {
    epilogue_t e = {bias, lo, hi, NULL, NULL};
    gemm_packed(a, bp, c, m, n, k, &e);
}

int mk_gemm_f32(const float *a, const float *b, float *c, int64_t m, int64_t n, int64_t k) {
    epilogue_t none = {NULL, 0.0f, 0.0f, NULL, NULL};
    return gemm_epilogue(a, b, c, m, n, k, &none);
}

/* c = clamp(a @ b + bias, lo, hi), the bias and clamp applied as c is stored (a convolution's or fully
 * connected layer's epilogue without a second pass over its output). -1 without BLAS. */
int mk_gemm_bias_act_f32(const float *a, const float *b, float *c, int64_t m, int64_t n, int64_t k,
                         const float *bias, float lo, float hi) {
    epilogue_t e = {bias, lo, hi, NULL, NULL};
    return gemm_epilogue(a, b, c, m, n, k, &e);
}

/* ------------------------------------------------------------ requantization (see driver/ops/_quant.py) */

/* mbqm: requant.h */

static inline int64_t clampi(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

typedef struct {
    const int64_t *bias;  /* [cout] */
    const int64_t *mult;  /* [cout] Q31 mantissas */
    const int64_t *left;  /* [cout] max(e, 0) */
    const int64_t *right; /* [cout] max(-e, 0) */
    int64_t zp, lo, hi;
    int is_signed;
    /* Derived by requant_init: int32 copies for the 32-bit form, and when it applies. */
    int32_t *bias32, *mult32, *right32;
    int narrow;  /* no left shifts and every |bias| <= 2^31 - 2^24: totals of |acc| < 2^24 fit int32 */
    int uniform; /* one mantissa and shift for every channel (per-tensor scales) */
} requant_t;

#define REQUANT_INIT(bias, mult, left, right, zp, lo, hi, is_signed) \
    {bias, mult, left, right, zp, lo, hi, is_signed, NULL, NULL, NULL, 0, 0}

/* Fill in the derived fields; 0 when out of memory. */
static int requant_init(requant_t *q, int cout) {
    q->bias32 = malloc(sizeof(int32_t) * (size_t)cout * 3 + 4);
    if (!q->bias32) return 0;
    q->mult32 = q->bias32 + cout;
    q->right32 = q->mult32 + cout;
    q->narrow = q->uniform = 1;
    const int64_t limit = ((int64_t)1 << 31) - ((int64_t)1 << 24);
    for (int c = 0; c < cout; c++) {
        q->narrow &= q->left[c] == 0 && q->bias[c] <= limit && q->bias[c] >= -limit;
        q->uniform &= q->mult[c] == q->mult[0] && q->right[c] == q->right[0];
        q->bias32[c] = (int32_t)q->bias[c];
        q->mult32[c] = (int32_t)q->mult[c];
        q->right32[c] = (int32_t)q->right[c];
    }
    return 1;
}

static void requant_free(requant_t *q) { free(q->bias32); }

static inline void store_q(void *out, int64_t i, int64_t v, int is_signed) {
    if (is_signed)
        ((int8_t *)out)[i] = (int8_t)v;
    else
        ((uint8_t *)out)[i] = (uint8_t)v;
}

/* In the narrow case mbqm's int64 steps give the same values as this 32-bit form, which the
 * compiler vectorises: the high half of the 64-bit product (its low 32 bits after a logical shift
 * equal those after an arithmetic one) and the rounding shift as (y >> r) + (remainder > threshold),
 * the identity _quant.multiply_by_quantized_multiplier rests on; clamping before adding the zero
 * point keeps the sum within int32. */
#define REQUANT32(T, M, R, OUT)                                          \
    do {                                                                 \
        int64_t p_ = (int64_t)(T) * (M) + ((int64_t)1 << 30);            \
        int32_t y_ = (int32_t)((uint64_t)p_ >> 31);                      \
        int32_t r_ = (R);                                                \
        int32_t mask_ = (int32_t)(((uint32_t)1 << r_) - 1u);             \
        int32_t rem_ = y_ & mask_;                                       \
        int32_t thr_ = (mask_ >> 1) + (y_ < 0);                          \
        y_ = (y_ >> r_) + (rem_ > thr_);                                 \
        y_ = y_ < lo ? lo : (y_ > hi ? hi : y_);                         \
        (OUT) = y_ + zp;                                                 \
    } while (0)

#define CHUNK 256

static void store_row(const int32_t *res, int n, void *out, int64_t base, int is_signed) {
    if (is_signed) {
        int8_t *o = (int8_t *)out + base;
        for (int i = 0; i < n; i++) o[i] = (int8_t)res[i];
    } else {
        uint8_t *o = (uint8_t *)out + base;
        for (int i = 0; i < n; i++) o[i] = (uint8_t)res[i];
    }
}

/* One row of float accumulators (exact integers, |a| < 2^24 by the callers' bound) plus the bias,
 * requantized into out[base .. base + cout). */
static void requant_row_f32(const float *restrict a, int cout, const requant_t *q, void *out, int64_t base) {
    if (!q->narrow) {
        for (int co = 0; co < cout; co++) {
            int64_t y = mbqm((int64_t)a[co] + q->bias[co], q->mult[co], q->left[co], q->right[co]) + q->zp;
            store_q(out, base + co, clampi(y, q->lo, q->hi), q->is_signed);
        }
        return;
    }
    int32_t lo = (int32_t)(q->lo - q->zp), hi = (int32_t)(q->hi - q->zp), zp = (int32_t)q->zp;
    int32_t res[CHUNK];
    const int32_t *restrict b32 = q->bias32;
    for (int c0 = 0; c0 < cout; c0 += CHUNK) {
        int n = cout - c0 < CHUNK ? cout - c0 : CHUNK;
        const float *restrict ac = a + c0;
        const int32_t *restrict bc = b32 + c0;
        if (q->uniform) {
            int64_t m = q->mult32[0];
            int32_t r = q->right32[0];
            for (int i = 0; i < n; i++) REQUANT32((int32_t)ac[i] + bc[i], m, r, res[i]);
        } else {
            const int32_t *restrict mc = q->mult32 + c0, *restrict rc = q->right32 + c0;
            for (int i = 0; i < n; i++) REQUANT32((int32_t)ac[i] + bc[i], mc[i], rc[i], res[i]);
        }
        store_row(res, n, out, base + c0, q->is_signed);
    }
}

typedef struct {
    const float *acc;
    int cout;
    const requant_t *q;
    void *out;
} requant_job;

static void requant_task(void *ctx, int64_t r) {
    const requant_job *j = ctx;
    requant_row_f32(j->acc + r * j->cout, j->cout, j->q, j->out, r * j->cout);
}

/* Float accumulators [rows, cout] holding exact integers, to the 8-bit output (requantize()). */
int mk_requant_f32(const float *acc, int64_t rows, int cout, const int64_t *bias, const int64_t *mult,
                    const int64_t *left, const int64_t *right, int64_t zp, int64_t lo, int64_t hi,
                    int is_signed, void *out) {
    requant_t q = REQUANT_INIT(bias, mult, left, right, zp, lo, hi, is_signed);
    if (!requant_init(&q, cout)) return -1;
    requant_job job = {acc, cout, &q, out};
    parallel_rows(rows * cout, PARALLEL_WORK, rows, requant_task, &job);
    requant_free(&q);
    return 0;
}

/* Rows [r0, r1), columns [c0, c1) of the accumulators c [., n] requantized into out (same layout):
 * the GEMM's requantizing epilogue, run on each block while it is in cache. */
static void requant_block(const float *c, int64_t n, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                          const void *rq, void *out) {
    requant_t part = *(const requant_t *)rq;
    part.bias += c0, part.mult += c0, part.left += c0, part.right += c0;
    part.bias32 += c0, part.mult32 += c0, part.right32 += c0;
    for (int64_t r = r0; r < r1; r++) requant_row_f32(c + r * n + c0, (int)(c1 - c0), &part, out, r * n + c0);
}

/* acc = a @ b (float32 holding exact integers, the callers' bound), requantized into out block by
 * block as the GEMM finishes each (the values of mk_gemm_f32 then mk_requant_f32 without a second
 * pass over acc). 0, -1 when out of memory, -2 without BLAS for this shape (nothing written). */
int mk_gemm_requant_f32(const float *a, const float *b, float *acc, int64_t m, int64_t n, int64_t k,
                        const int64_t *bias, const int64_t *mult, const int64_t *left, const int64_t *right,
                        int64_t zp, int64_t lo, int64_t hi, int is_signed, void *out) {
    requant_t q = REQUANT_INIT(bias, mult, left, right, zp, lo, hi, is_signed);
    if (!requant_init(&q, (int)n)) return -1;
    epilogue_t e = {NULL, 0.0f, 0.0f, &q, out};
    int status = gemm_epilogue(a, b, acc, m, n, k, &e);
    requant_free(&q);
    return status == 0 ? 0 : -2;
}

/* mk_gemm_requant_f32 with b packed (mk_pack_b_f32): 0, or -1 when out of memory. */
int mk_gemm_packed_requant_f32(const float *a, const float *bp, float *acc, int64_t m, int64_t n, int64_t k,
                               const int64_t *bias, const int64_t *mult, const int64_t *left,
                               const int64_t *right, int64_t zp, int64_t lo, int64_t hi, int is_signed,
                               void *out) {
    requant_t q = REQUANT_INIT(bias, mult, left, right, zp, lo, hi, is_signed);
    if (!requant_init(&q, (int)n)) return -1;
    epilogue_t e = {NULL, 0.0f, 0.0f, &q, out};
    gemm_packed(a, bp, acc, m, n, k, &e);
    requant_free(&q);
    return 0;
}

/* mk_gemm_packed_requant_f32 on 8-bit rows x [m, k] minus their zero point (a pointwise convolution's
 * or fully connected layer's input), centred task by task instead of in a pass of its own. 0, or -1
 * when out of memory. */
int mk_gemm_packed_requant_q8(const void *x, int x_signed, int zp_x, const float *bp, float *acc, int64_t m,
                              int64_t n, int64_t k, const int64_t *bias, const int64_t *mult, const int64_t *left,
                              const int64_t *right, int64_t zp, int64_t lo, int64_t hi, int is_signed, void *out) {
    requant_t q = REQUANT_INIT(bias, mult, left, right, zp, lo, hi, is_signed);
    if (!requant_init(&q, (int)n)) return -1;
    epilogue_t e = {NULL, 0.0f, 0.0f, &q, out};
    int status = gemm_packed_x(NULL, x, x_signed, zp_x, bp, acc, m, n, k, &e);
    requant_free(&q);
    return status;
}

/* ------------------------------------------------------------ float epilogue and patches */

typedef struct {
    float *y;
    int cout;
    const float *bias;
    float lo, hi;
} bias_act_job;

static void bias_act_task(void *ctx, int64_t r) {
    const bias_act_job *j = ctx;
    float *p = j->y + r * j->cout;
    for (int c = 0; c < j->cout; c++) p[c] = clampf(p[c] + j->bias[c], j->lo, j->hi);
}

/* y[r, c] = clamp(y[r, c] + bias[c], lo, hi) in place. */
void mk_bias_act_f32(float *y, int64_t rows, int cout, const float *bias, float lo, float hi) {
    bias_act_job job = {y, cout, bias, lo, hi};
    parallel_rows(rows * cout, PARALLEL_WORK, rows, bias_act_task, &job);
}

/* A window's geometry travels as one mk_geom_t (mlts_kernels.h): fewer call arguments. */
typedef mk_geom_t geom_t;
#define GEOM_ARGS const mk_geom_t *gp
#define GEOM_INIT (*gp)

typedef struct {
    const void *x;
    geom_t g;
    int is_signed, zp;
    float *cols;
} im2col_job;

/* The element types of im2col's input: float32, or 8-bit values made float32 less their zero point. */
enum { IM2COL_F32, IM2COL_U8, IM2COL_S8 };

/* n values of x from element `at`, as float32 (8-bit ones less zp), into dst. */
static inline __attribute__((always_inline)) void im2col_copy(const void *x, int kind, int zp, int64_t at,
                                                              int n, float *dst) {
    if (kind == IM2COL_F32) {
        /* The few channels of a first layer make memcpy calls dominate, and a compiled loop's set-up
         * (overlap checks, a vector body, a scalar tail) costs about 9 instructions per float of a
         * 9-float window row: whole vectors, the last one overlapping the one before. */
        const float *src = (const float *)x + at;
#ifdef __AVX2__
        if (n >= 8) {
            int q = 0;
            for (; q + 8 <= n; q += 8) _mm256_storeu_ps(dst + q, _mm256_loadu_ps(src + q));
            if (q < n) _mm256_storeu_ps(dst + n - 8, _mm256_loadu_ps(src + n - 8));
            return;
        }
        if (n >= 4) {
            _mm_storeu_ps(dst, _mm_loadu_ps(src));
            _mm_storeu_ps(dst + n - 4, _mm_loadu_ps(src + n - 4));
            return;
        }
#endif
        for (int q = 0; q < n; q++) dst[q] = src[q];
    } else if (kind == IM2COL_S8) {
        const int8_t *src = (const int8_t *)x + at;
        for (int q = 0; q < n; q++) dst[q] = (float)(src[q] - zp);
    } else {
        const uint8_t *src = (const uint8_t *)x + at;
        for (int q = 0; q < n; q++) dst[q] = (float)(src[q] - zp);
    }
}

/* The patch row of output pixel (b, oy, ox): its window rows and taps, 0 in the padding. */
static inline __attribute__((always_inline)) void im2col_pixel(const im2col_job *j, int b, int oy, int ox,
                                                               int span, int64_t k, int kind) {
    const geom_t g = j->g;
    int64_t r = (int64_t)b * g.oh + oy;
    float *dst = j->cols + (r * g.ow + ox) * k;
    int ix0 = ox * g.sw - g.pl;
    int row_inside = g.dw == 1 && ix0 >= 0 && ix0 + g.kw <= g.w;
    for (int ky = 0; ky < g.kh; ky++) {
        int iy = oy * g.sh - g.pt + ky * g.dh;
        if (iy < 0 || iy >= g.h) {
            memset(dst, 0, sizeof(float) * (size_t)span);
            dst += span;
            continue;
        }
        if (row_inside) {
            im2col_copy(j->x, kind, j->zp, (((int64_t)b * g.h + iy) * g.w + ix0) * g.c, span, dst);
            dst += span;
            continue;
        }
        for (int kx = 0; kx < g.kw; kx++, dst += g.c) {
            int ix = ix0 + kx * g.dw;
            if (ix < 0 || ix >= g.w)
                memset(dst, 0, sizeof(float) * (size_t)g.c);
            else
                im2col_copy(j->x, kind, j->zp, (((int64_t)b * g.h + iy) * g.w + ix) * g.c, g.c, dst);
        }
    }
}

/* Row r (one output row of one image) of the patch matrix [N*OH*OW, KH*KW*C] of x as float32, 0 where
 * a tap falls in the padding (for 8-bit x, 0 = the zero point). Inlined once per element type. */
static inline __attribute__((always_inline)) void im2col_row(const im2col_job *j, int64_t r, int kind) {
    const geom_t g = j->g;
    int64_t k = (int64_t)g.kh * g.kw * g.c;
    int b = (int)(r / g.oh), oy = (int)(r % g.oh);
    int span = g.kw * g.c; /* values of one window row, contiguous in x when dilation_w is 1 */
    int ox = 0;
    if (kind == IM2COL_F32 && g.dw == 1 && g.kh <= 16 && oy * g.sh - g.pt >= 0 &&
        oy * g.sh - g.pt + (g.kh - 1) * g.dh < g.h) {
        /* Every window row of this output row inside the input vertically: the rows' starts found once,
         * then the pixels whose windows are inside horizontally too are copies at fixed offsets (the
         * first layer of a MobileNet: three copies of 9 floats per pixel, where the general loop below
         * spent about 130 instructions a pixel on its bounds). */
        const float *rowp[16];
        for (int ky = 0; ky < g.kh; ky++)
            rowp[ky] = (const float *)j->x + ((int64_t)b * g.h + oy * g.sh - g.pt + ky * g.dh) * g.w * g.c;
        int lo = 0;
        while (lo < g.ow && lo * g.sw - g.pl < 0) lo++;
        for (; ox < lo; ox++) im2col_pixel(j, b, oy, ox, span, k, kind);
#ifdef __AVX2__
        if (span >= 8 && span <= 16) {
            /* One window row: a vector and a second one overlapping it (3 x 3 windows of 3 to 5
             * channels), without im2col_copy's tests per row. */
            for (; ox < g.ow && ox * g.sw - g.pl + g.kw <= g.w; ox++) {
                float *dst = j->cols + (r * g.ow + ox) * k;
                int64_t at = ((int64_t)ox * g.sw - g.pl) * g.c;
                for (int ky = 0; ky < g.kh; ky++, dst += span) {
                    __m256 v0 = _mm256_loadu_ps(rowp[ky] + at), v1 = _mm256_loadu_ps(rowp[ky] + at + span - 8);
                    _mm256_storeu_ps(dst, v0);
                    _mm256_storeu_ps(dst + span - 8, v1);
                }
            }
        }
#endif
        for (; ox < g.ow && ox * g.sw - g.pl + g.kw <= g.w; ox++) {
            float *dst = j->cols + (r * g.ow + ox) * k;
            int64_t at = ((int64_t)ox * g.sw - g.pl) * g.c;
            for (int ky = 0; ky < g.kh; ky++, dst += span) im2col_copy(rowp[ky], kind, 0, at, span, dst);
        }
    }
    for (; ox < g.ow; ox++) im2col_pixel(j, b, oy, ox, span, k, kind);
}

static void im2col_f32_task(void *ctx, int64_t r) { im2col_row(ctx, r, IM2COL_F32); }

static void im2col_q8_task(void *ctx, int64_t r) {
    const im2col_job *j = ctx;
    if (j->is_signed)
        im2col_row(j, r, IM2COL_S8);
    else
        im2col_row(j, r, IM2COL_U8);
}

/* The patch matrix [N*OH*OW, KH*KW*C] of x (float32), 0 where a tap falls in the padding. */
void mk_im2col_f32(const float *x, GEOM_ARGS, float *cols) {
    geom_t g = GEOM_INIT;
    int64_t rows = (int64_t)g.n * g.oh, k = (int64_t)g.kh * g.kw * g.c;
    im2col_job job = {x, g, 0, 0, cols};
    parallel_rows(rows * g.ow * k, PARALLEL_WORK, rows, im2col_f32_task, &job);
}

/* The same patch matrix of 8-bit x minus its zero point, as float32 (padding is 0 = the zero point). */
void mk_im2col_q8(const void *xv, int is_signed, int zp, GEOM_ARGS, float *cols) {
    geom_t g = GEOM_INIT;
    int64_t rows = (int64_t)g.n * g.oh, k = (int64_t)g.kh * g.kw * g.c;
    im2col_job job = {xv, g, is_signed, zp, cols};
    parallel_rows(rows * g.ow * k, PARALLEL_WORK, rows, im2col_q8_task, &job);
}

typedef struct {
    const void *x;
    int is_signed, zp;
    int64_t count;
    float *out;
} center_job;

static void center_task(void *ctx, int64_t ch) {
    const center_job *j = ctx;
    int64_t end = (ch + 1) * 4096 < j->count ? (ch + 1) * 4096 : j->count;
    int zp = j->zp;
    float *out = j->out;
    if (j->is_signed) {
        const int8_t *s = (const int8_t *)j->x;
        for (int64_t i = ch * 4096; i < end; i++) out[i] = (float)(s[i] - zp);
    } else {
        const uint8_t *s = (const uint8_t *)j->x;
        for (int64_t i = ch * 4096; i < end; i++) out[i] = (float)(s[i] - zp);
    }
}

/* Contiguous 8-bit x minus its zero point as float32 (the patch matrix of an unpadded 1x1 stride-1 conv). */
void mk_center_q8(const void *xv, int is_signed, int zp, int64_t count, float *out) {
    int64_t chunks = (count + 4095) / 4096;
    center_job job = {xv, is_signed, zp, count, out};
    parallel_rows(count, PARALLEL_WORK, chunks, center_task, &job);
}

/* ------------------------------------------------------------ depthwise convolution */

/* The float depthwise kernel (m == 1): windows wholly inside the input take fixed tap offsets
 * (dw_inside_f32, dw_inside4_f32), the others the taps inside the input in window order
 * (dw_border_f32); each sums one pixel's taps 8 or 16 channels at a time in vector registers, any
 * remainder one channel at a time. */

/* The vectorised pixel loop handles windows of at most this many taps; larger ones take the generic loop. */
#define DW_MAX_TAPS 64

/* One output pixel of a float depthwise window lying wholly inside the input (m == 1): every tap at a
 * fixed offset `toff[t]` from the window's corner, weights tap by tap; the same sums in the same order
 * as dw_border_f32, then bias and clamp, eight channels at a time. */
static inline void dw_inside_f32(const float *corner, const int64_t *toff, int taps, const float *wt, int c,
                                 const float *bias, float lo, float hi, float *out) {
    v8i z = {0};
    int c0 = 0;
#ifdef __AVX2__
    __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    for (; c0 + 16 <= c; c0 += 16) {
        v8f a0 = {0}, a1 = {0};
        for (int t = 0; t < taps; t++) {
            const float *xp = corner + toff[t] + c0, *wp = wt + (int64_t)t * c + c0;
            a0 += ld_f32(xp, z) * ld_f32(wp, z);
            a1 += ld_f32(xp + 8, z) * ld_f32(wp + 8, z);
        }
        a0 += ld_f32(bias + c0, z);
        a1 += ld_f32(bias + c0 + 8, z);
        /* max(lo, a) then min(hi, a): a NaN stays NaN, as in clampf. */
        _mm256_storeu_ps(out + c0, _mm256_min_ps(vhi, _mm256_max_ps(vlo, (__m256)a0)));
        _mm256_storeu_ps(out + c0 + 8, _mm256_min_ps(vhi, _mm256_max_ps(vlo, (__m256)a1)));
    }
    for (; c0 + 8 <= c; c0 += 8) {
        v8f a0 = {0};
        for (int t = 0; t < taps; t++) a0 += ld_f32(corner + toff[t] + c0, z) * ld_f32(wt + (int64_t)t * c + c0, z);
        a0 += ld_f32(bias + c0, z);
        _mm256_storeu_ps(out + c0, _mm256_min_ps(vhi, _mm256_max_ps(vlo, (__m256)a0)));
    }
#endif
    for (; c0 < c; c0++) {
        float a0 = 0.0f;
        for (int t = 0; t < taps; t++) a0 += corner[toff[t] + c0] * wt[(int64_t)t * c + c0];
        out[c0] = clampf(a0 + bias[c0], lo, hi);
    }
}

/* Channels [c0, c) of dw_inside4_f32's four pixels, one at a time, each tap one fused multiply-add as
 * in the vector lanes (explicit, so that the floats do not depend on how the compiler unrolls or
 * contracts the loop for a given tap count). */
static inline void dw_rest4_f32(const float *corner, int64_t step, const int64_t *toff, int taps, const float *wt,
                                int c, int c0, const float *bias, float lo, float hi, float *out) {
    for (; c0 < c; c0++) {
        for (int p = 0; p < 4; p++) {
            float a0 = 0.0f;
            for (int t = 0; t < taps; t++)
                a0 = __builtin_fmaf(corner[p * step + toff[t] + c0], wt[(int64_t)t * c + c0], a0);
            out[p * c + c0] = clampf(a0 + bias[c0], lo, hi);
        }
    }
}

/* Four neighbouring output pixels of dw_inside_f32 (corners `step` floats apart), eight channels at a
 * time: four independent sums hide the multiply-add latency that one pixel of few channels waits on.
 * `taps` a constant once inlined (3x3 windows: dw_inside4_3x3_f32) unrolls the tap loop: MobileNet's
 * 3x3 layers take 3.8-4.9 instructions per 8-lane multiply-add in all instead of 4.8-5.3 (callgrind). */
static inline __attribute__((always_inline)) void dw_inside4_f32(const float *corner, int64_t step,
                                                                 const int64_t *toff, const int taps,
                                                                 const float *wt, int c, const float *bias,
                                                                 float lo, float hi, float *out) {
    int c0 = 0;
#ifdef __AVX2__
    v8i z = {0};
    __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    for (; c0 + 8 <= c; c0 += 8) {
        v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
#pragma GCC unroll 9
        for (int t = 0; t < taps; t++) {
            const float *xp = corner + toff[t] + c0;
            v8f wv = ld_f32(wt + (int64_t)t * c + c0, z);
            a0 += ld_f32(xp, z) * wv;
            a1 += ld_f32(xp + step, z) * wv;
            a2 += ld_f32(xp + 2 * step, z) * wv;
            a3 += ld_f32(xp + 3 * step, z) * wv;
        }
        v8f bv = ld_f32(bias + c0, z);
        a0 += bv;
        a1 += bv;
        a2 += bv;
        a3 += bv;
        _mm256_storeu_ps(out + c0, _mm256_min_ps(vhi, _mm256_max_ps(vlo, (__m256)a0)));
        _mm256_storeu_ps(out + c + c0, _mm256_min_ps(vhi, _mm256_max_ps(vlo, (__m256)a1)));
        _mm256_storeu_ps(out + 2 * c + c0, _mm256_min_ps(vhi, _mm256_max_ps(vlo, (__m256)a2)));
        _mm256_storeu_ps(out + 3 * c + c0, _mm256_min_ps(vhi, _mm256_max_ps(vlo, (__m256)a3)));
    }
#endif
    if (c0 < c) dw_rest4_f32(corner, step, toff, taps, wt, c, c0, bias, lo, hi, out);
}

static void dw_inside4_3x3_f32(const float *corner, int64_t step, const int64_t *toff, const float *wt, int c,
                               const float *bias, float lo, float hi, float *out) {
    dw_inside4_f32(corner, step, toff, 9, wt, c, bias, lo, hi, out);
}

static void dw_inside4_any_f32(const float *corner, int64_t step, const int64_t *toff, int taps, const float *wt,
                               int c, const float *bias, float lo, float hi, float *out) {
    dw_inside4_f32(corner, step, toff, taps, wt, c, bias, lo, hi, out);
}

/* One output pixel whose window reaches into the padding (m == 1): the taps inside the input in window
 * order, and the bias and clamp applied in the same registers (a separate
 * scalar pass over the pixel's channels cost more than its taps: most pixels of the 4 x 4 and 8 x 8
 * layers of a small MobileNet are border pixels). */
static void dw_border_f32(const float *x, const geom_t *gp, int b, int oy, int ox, const float *wt,
                          const float *bias, float lo, float hi, float *out) {
    const geom_t g = *gp;
    const int c = g.c;
    const float *tap_x[DW_MAX_TAPS], *tap_w[DW_MAX_TAPS];
    int taps = 0;
    for (int ky = 0; ky < g.kh; ky++) {
        int iy = oy * g.sh - g.pt + ky * g.dh;
        if (iy < 0 || iy >= g.h) continue;
        for (int kx = 0; kx < g.kw; kx++) {
            int ix = ox * g.sw - g.pl + kx * g.dw;
            if (ix < 0 || ix >= g.w) continue;
            tap_x[taps] = x + (((int64_t)b * g.h + iy) * g.w + ix) * c;
            tap_w[taps++] = wt + ((int64_t)ky * g.kw + kx) * c;
        }
    }
    int c0 = 0;
#ifdef __AVX2__
    v8i z = {0};
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    for (; c0 + 16 <= c; c0 += 16) {
        v8f a0 = {0}, a1 = {0};
        for (int t = 0; t < taps; t++) {
            a0 += ld_f32(tap_x[t] + c0, z) * ld_f32(tap_w[t] + c0, z);
            a1 += ld_f32(tap_x[t] + c0 + 8, z) * ld_f32(tap_w[t] + c0 + 8, z);
        }
        a0 += ld_f32(bias + c0, z);
        a1 += ld_f32(bias + c0 + 8, z);
        _mm256_storeu_ps(out + c0, _mm256_min_ps(vhi, _mm256_max_ps(vlo, (__m256)a0)));
        _mm256_storeu_ps(out + c0 + 8, _mm256_min_ps(vhi, _mm256_max_ps(vlo, (__m256)a1)));
    }
    for (; c0 + 8 <= c; c0 += 8) {
        v8f a0 = {0};
        for (int t = 0; t < taps; t++) a0 += ld_f32(tap_x[t] + c0, z) * ld_f32(tap_w[t] + c0, z);
        a0 += ld_f32(bias + c0, z);
        _mm256_storeu_ps(out + c0, _mm256_min_ps(vhi, _mm256_max_ps(vlo, (__m256)a0)));
    }
#endif
    for (; c0 < c; c0++) {
        float a0 = 0.0f;
        for (int t = 0; t < taps; t++) a0 = __builtin_fmaf(tap_x[t][c0], tap_w[t][c0], a0);
        out[c0] = clampf(a0 + bias[c0], lo, hi);
    }
}

/* Depthwise work (multiply-adds) from which it wakes sleeping workers, about 70 us of it: a
 * depthwise multiply-add costs several GEMM ones (one output per few taps, no reuse of a register
 * block). */
#define DW_PARALLEL_WORK (1 << 19)
#define DWQ_TASKS_PER_THREAD 4 /* the fewest tasks per thread before the 8-bit kernel splits rows' channels */

typedef struct {
    const void *x;
    geom_t g;
    int m;
    const float *wt, *bias;
    float lo, hi;
    void *y;
    /* float: offsets of the taps from a window's corner, and the output columns whose windows lie
     * inside the input horizontally: [ox_lo, ox_hi) */
    int64_t toff[DW_MAX_TAPS];
    int taps, inside, ox_lo, ox_hi;
} dw_job;

static void dw_f32_task(void *ctx, int64_t r) {
    const dw_job *d = ctx;
    const geom_t g = d->g;
    const int m = d->m, cout = g.c * m, taps = d->taps, ox_lo = d->ox_lo, ox_hi = d->ox_hi;
    const float *x = d->x, *wt = d->wt, *bias = d->bias;
    const float lo = d->lo, hi = d->hi;
    float *y = d->y;
    int b = (int)(r / g.oh), oy = (int)(r % g.oh);
    int iy0 = oy * g.sh - g.pt;
    int row_inside = d->inside && iy0 >= 0 && iy0 + (g.kh - 1) * g.dh < g.h;
    for (int ox = 0; ox < g.ow; ox++) {
        float *out = y + (r * g.ow + ox) * cout;
        if (row_inside && ox >= ox_lo && ox + 4 <= ox_hi) {
            const float *corner = x + (((int64_t)b * g.h + iy0) * g.w + ox * g.sw - g.pl) * g.c;
            if (taps == 9)
                dw_inside4_3x3_f32(corner, (int64_t)g.sw * g.c, d->toff, wt, cout, bias, lo, hi, out);
            else
                dw_inside4_any_f32(corner, (int64_t)g.sw * g.c, d->toff, taps, wt, cout, bias, lo, hi, out);
            ox += 3;
            continue;
        }
        if (row_inside && ox >= ox_lo && ox < ox_hi) {
            const float *corner = x + (((int64_t)b * g.h + iy0) * g.w + ox * g.sw - g.pl) * g.c;
            dw_inside_f32(corner, d->toff, taps, wt, cout, bias, lo, hi, out);
            continue;
        }
        if (m == 1 && g.kh * g.kw <= DW_MAX_TAPS) {
            dw_border_f32(x, &g, b, oy, ox, wt, bias, lo, hi, out);
            continue;
        }
        for (int co = 0; co < cout; co++) out[co] = 0.0f;
        for (int ky = 0; ky < g.kh; ky++) {
            int iy = oy * g.sh - g.pt + ky * g.dh;
            if (iy < 0 || iy >= g.h) continue;
            for (int kx = 0; kx < g.kw; kx++) {
                int ix = ox * g.sw - g.pl + kx * g.dw;
                if (ix < 0 || ix >= g.w) continue;
                const float *xp = x + (((int64_t)b * g.h + iy) * g.w + ix) * g.c;
                const float *wp = wt + ((int64_t)ky * g.kw + kx) * cout;
                for (int ci = 0; ci < g.c; ci++)
                    for (int j = 0; j < m; j++) out[ci * m + j] += xp[ci] * wp[ci * m + j];
            }
        }
        for (int co = 0; co < cout; co++) out[co] = clampf(out[co] + bias[co], lo, hi);
    }
}

/* Float depthwise: wt [KH,KW,C*M], bias [C*M]; y [N,OH,OW,C*M] = clamp(bias + taps, lo, hi). */
void mk_depthwise_f32(const float *x, GEOM_ARGS, int m, const float *wt, const float *bias, float lo,
                      float hi, float *y) {
    dw_job d = {.x = x, .g = GEOM_INIT, .m = m, .wt = wt, .bias = bias, .lo = lo, .hi = hi, .y = y};
    const geom_t g = d.g;
    int64_t rows = (int64_t)g.n * g.oh, work = rows * g.ow * g.c * m * g.kh * g.kw;
    d.taps = g.kh * g.kw;
    d.inside = m == 1 && d.taps <= DW_MAX_TAPS;
    if (d.inside) {
        for (int ky = 0; ky < g.kh; ky++)
            for (int kx = 0; kx < g.kw; kx++)
                d.toff[ky * g.kw + kx] = ((int64_t)ky * g.dh * g.w + (int64_t)kx * g.dw) * g.c;
        while (d.ox_lo < g.ow && d.ox_lo * g.sw - g.pl < 0) d.ox_lo++;
        d.ox_hi = d.ox_lo;
        while (d.ox_hi < g.ow && d.ox_hi * g.sw - g.pl + (g.kw - 1) * g.dw < g.w) d.ox_hi++;
    }
    parallel_rows(work, DW_PARALLEL_WORK, rows, dw_f32_task, &d);
}

/* ------------------------------------------------------------ quantized depthwise convolution */

/* Exact integer arithmetic, as NNAPI's: int32 sums of (x - zp_x) * (w - zp_w), then the bias and the
 * requantization of requant_row_f32 (its 32-bit form in vector registers when it applies, else mbqm's
 * int64 steps).
 *
 * The packed weights (int16 elements; w = the filter minus its zero point, [taps, cout], each value in
 * [-255, 255]), written by mk_depthwise_q8_pack:
 *   [0, 2 * cout)   the sum of w over the taps of each channel, as int32 (the zero point's share);
 *   then, per full group g of 8 channels and pair j of taps, 16 int16: (w[2j][8g + i], w[2j + 1][8g + i])
 *                   for i = 0 .. 7 (0 for a tap 2j + 1 past the last), vpmaddwd's second operand;
 *   then w itself, [taps, cout] (channels past the last full group, depth multipliers above 1).
 *
 * The vector path (AVX2, depth multiplier 1, at most DWQ_MAX_TAPS taps) sums the raw bytes x * w, whose
 * padding reads the zero point's byte, and takes zp_x * sum(w) off with the bias: the same integers as
 * the sum of (x - zp_x) * w. A task is one output row, its KH input rows read in place (rows above or
 * below the input: a row of zero-point bytes). The pixels whose windows lie inside the input
 * horizontally go four at a time, 16 channels at a time: each pair of taps one vpmaddwd per 8 channels,
 * the weights loaded once for the four pixels, and the requantization of their int32 sums in
 * registers; the others one at a time, their taps outside the input reading the zero-point row. */

/* The most taps of the vector path: every int32 sum of products below 2^24 (258 * 255 * 255), so the
 * requantization's 32-bit form applies (requant_t.narrow). */
#define DWQ_MAX_TAPS 258

static inline int64_t dwq_pairs_at(int64_t cout) { return 2 * cout; }
static inline int64_t dwq_plain_at(int64_t taps, int64_t cout) {
    return 2 * cout + (cout / 8) * ((taps + 1) / 2) * 16;
}

/* The int16 elements of mk_depthwise_q8_pack's output for a filter of `taps` taps and `cout` channels. */
int64_t mk_depthwise_q8_packed_size(int64_t taps, int64_t cout) {
    return taps < 1 || cout < 1 ? 0 : dwq_plain_at(taps, cout) + taps * cout;
}

/* w [taps, cout] int16 (the filter minus its zero point) into the packed form above. */
void mk_depthwise_q8_pack(const int16_t *w, int64_t taps, int64_t cout, int16_t *packed) {
    if (taps < 1 || cout < 1) return;
    for (int64_t c = 0; c < cout; c++) {
        int32_t s = 0;
        for (int64_t t = 0; t < taps; t++) s += w[t * cout + c];
        memcpy(packed + 2 * c, &s, sizeof s);
    }
    int64_t pairs = (taps + 1) / 2;
    int16_t *pw = packed + dwq_pairs_at(cout);
    for (int64_t g = 0; g < cout / 8; g++)
        for (int64_t j = 0; j < pairs; j++)
            for (int i = 0; i < 8; i++) {
                int64_t c = 8 * g + i, t = 2 * j;
                pw[(g * pairs + j) * 16 + 2 * i] = w[t * cout + c];
                pw[(g * pairs + j) * 16 + 2 * i + 1] = t + 1 < taps ? w[(t + 1) * cout + c] : 0;
            }
    memcpy(packed + dwq_plain_at(taps, cout), w, sizeof(int16_t) * (size_t)(taps * cout));
}

typedef struct {
    const void *x;
    geom_t g;
    int m, is_signed, zp_x, taps, pairs;
    const int16_t *wpairs, *wplain;
    const int32_t *wsum;  /* [cout] the sum of w over the taps */
    const int32_t *beff;  /* [cout] bias - zp_x * wsum (int32, wrapping): the raw sums' offset */
    const requant_t *q;
    int vec;              /* the vector path applies */
    int narrow;           /* its requantization in the 32-bit form */
    const uint8_t *zrow;  /* a row of zero-point bytes, as wide as an input row */
    int ox_lo, ox_hi;     /* the output columns whose windows lie inside the input horizontally */
    int cparts, cpart;    /* vector path: tasks per output row, each of cpart channels (a multiple of 16) */
    int c_lo, c_hi;       /* a task's channels (its own copy of the job) */
    void *y;
} dwq_job;

/* One output value from an exact centred sum: mbqm's int64 steps (requant_row_f32's values). */
static inline void dwq_store1(const requant_t *q, int co, int64_t acc, void *y, int64_t i) {
    int64_t v = mbqm(acc + q->bias[co], q->mult[co], q->left[co], q->right[co]) + q->zp;
    store_q(y, i, clampi(v, q->lo, q->hi), q->is_signed);
}

/* Output row r of any geometry and depth multiplier, one value at a time in int64 (the path without
 * AVX2, for depth multipliers above 1 and when a row's copy cannot be had). */
static void dwq_row_generic(const dwq_job *d, int64_t r) {
    const geom_t g = d->g;
    const int m = d->m, cout = g.c * m, zp = d->zp_x;
    int b = (int)(r / g.oh), oy = (int)(r % g.oh);
    for (int ox = 0; ox < g.ow; ox++) {
        int64_t base = (r * g.ow + ox) * cout;
        for (int co = 0; co < cout; co++) {
            int ci = co / m;
            int64_t acc = 0;
            for (int ky = 0; ky < g.kh; ky++) {
                int iy = oy * g.sh - g.pt + ky * g.dh;
                if (iy < 0 || iy >= g.h) continue;
                for (int kx = 0; kx < g.kw; kx++) {
                    int ix = ox * g.sw - g.pl + kx * g.dw;
                    if (ix < 0 || ix >= g.w) continue;
                    int64_t at = (((int64_t)b * g.h + iy) * g.w + ix) * g.c + ci;
                    int32_t xv = d->is_signed ? ((const int8_t *)d->x)[at] : ((const uint8_t *)d->x)[at];
                    acc += (int64_t)(xv - zp) * d->wplain[((int64_t)ky * g.kw + kx) * cout + co];
                }
            }
            dwq_store1(d->q, co, acc, d->y, base + co);
        }
    }
}

#ifdef __AVX2__
/* The requantization constants of 8 channels (requant_row_f32's 32-bit form, lane by lane). */
typedef struct {
    __m256i bias, m_even, m_odd, r, mask, half, lo, hi, zp;
} dwq_rq8;

static inline dwq_rq8 dwq_rq_load(const dwq_job *d, int c0) {
    const requant_t *q = d->q;
    dwq_rq8 p;
    p.bias = _mm256_loadu_si256((const __m256i *)(d->beff + c0));
    p.m_even = _mm256_loadu_si256((const __m256i *)(q->mult32 + c0));
    p.m_odd = _mm256_srli_epi64(p.m_even, 32);
    p.r = _mm256_loadu_si256((const __m256i *)(q->right32 + c0));
    p.mask = _mm256_sub_epi32(_mm256_sllv_epi32(_mm256_set1_epi32(1), p.r), _mm256_set1_epi32(1));
    p.half = _mm256_srli_epi32(p.mask, 1);
    p.lo = _mm256_set1_epi32((int32_t)(q->lo - q->zp));
    p.hi = _mm256_set1_epi32((int32_t)(q->hi - q->zp));
    p.zp = _mm256_set1_epi32((int32_t)q->zp);
    return p;
}

/* REQUANT32 on 8 lanes: raw sums plus the offset, the high half of the product rounded (bits 31..62 of
 * t * m + 2^30), the rounding shift, the clamp, the zero point. */
static inline __m256i dwq_requant8(__m256i acc, const dwq_rq8 *p) {
    const __m256i round = _mm256_set1_epi64x((int64_t)1 << 30);
    __m256i t = _mm256_add_epi32(acc, p->bias);
    __m256i pe = _mm256_add_epi64(_mm256_mul_epi32(t, p->m_even), round);
    __m256i po = _mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(t, 32), p->m_odd), round);
    __m256i y = _mm256_blend_epi32(_mm256_srli_epi64(pe, 31), _mm256_slli_epi64(po, 1), 0xAA);
    __m256i rem = _mm256_and_si256(y, p->mask);
    __m256i thr = _mm256_sub_epi32(p->half, _mm256_srai_epi32(y, 31));
    y = _mm256_sub_epi32(_mm256_srav_epi32(y, p->r), _mm256_cmpgt_epi32(rem, thr));
    y = _mm256_min_epi32(_mm256_max_epi32(y, p->lo), p->hi);
    return _mm256_add_epi32(y, p->zp);
}

/* 16 requantized int32 values (channels 0-7 in a, 8-15 in b) to 16 bytes at o (values in range). */
static inline void dwq_store16(__m256i a, __m256i b, void *o, int sgn) {
    __m256i v = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
    v = sgn ? _mm256_packs_epi16(v, v) : _mm256_packus_epi16(v, v);
    _mm_storeu_si128((__m128i *)o, _mm256_castsi256_si128(_mm256_permute4x64_epi64(v, 0x08)));
}

static inline void dwq_store8(__m256i a, void *o, int sgn) {
    __m256i v = _mm256_packs_epi32(a, a);
    v = sgn ? _mm256_packs_epi16(v, v) : _mm256_packus_epi16(v, v);
    v = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
    _mm_storel_epi64((__m128i *)o, _mm256_castsi256_si128(v));
}

static inline __m256i dwq_widen16(__m128i v, int sgn) { return sgn ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v); }
static inline __m256i dwq_widen32(const uint8_t *p, int sgn) {
    __m128i v = _mm_loadl_epi64((const __m128i *)p);
    return sgn ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v);
}

/* Raw sums of P pixels (tap t of pixel p at tp[t] + off + p * step) x 16 channels: acc[2p] channels
 * 0-7, acc[2p + 1] channels 8-15; w0, w1 the pair blocks of the two groups of 8. A signed input's odd
 * last tap widens to 32 bits (its high half -1 for negative bytes) against a zero weight. */
static inline __attribute__((always_inline)) void dwq_acc16(const uint8_t *const *tp, int taps, int64_t off,
                                                           int64_t step, const int16_t *w0, const int16_t *w1,
                                                           int P, int sgn, __m256i *acc) {
    for (int p = 0; p < 2 * P; p++) acc[p] = _mm256_setzero_si256();
    int j = 0;
    for (; 2 * j + 1 < taps; j++) {
        __m256i wa = _mm256_loadu_si256((const __m256i *)(w0 + 16 * j));
        __m256i wb = _mm256_loadu_si256((const __m256i *)(w1 + 16 * j));
        const uint8_t *pa = tp[2 * j] + off, *pb = tp[2 * j + 1] + off;
        for (int p = 0; p < P; p++) {
            __m128i xa = _mm_loadu_si128((const __m128i *)(pa + p * step));
            __m128i xb = _mm_loadu_si128((const __m128i *)(pb + p * step));
            __m256i lo = dwq_widen16(_mm_unpacklo_epi8(xa, xb), sgn);
            __m256i hi = dwq_widen16(_mm_unpackhi_epi8(xa, xb), sgn);
            acc[2 * p] = _mm256_add_epi32(acc[2 * p], _mm256_madd_epi16(lo, wa));
            acc[2 * p + 1] = _mm256_add_epi32(acc[2 * p + 1], _mm256_madd_epi16(hi, wb));
        }
    }
    if (2 * j < taps) {
        __m256i wa = _mm256_loadu_si256((const __m256i *)(w0 + 16 * j));
        __m256i wb = _mm256_loadu_si256((const __m256i *)(w1 + 16 * j));
        const uint8_t *pa = tp[2 * j] + off;
        for (int p = 0; p < P; p++) {
            acc[2 * p] = _mm256_add_epi32(acc[2 * p], _mm256_madd_epi16(dwq_widen32(pa + p * step, sgn), wa));
            acc[2 * p + 1] =
                _mm256_add_epi32(acc[2 * p + 1], _mm256_madd_epi16(dwq_widen32(pa + p * step + 8, sgn), wb));
        }
    }
}

/* dwq_acc16 for one group of 8 channels. */
static inline __attribute__((always_inline)) void dwq_acc8(const uint8_t *const *tp, int taps, int64_t off,
                                                          int64_t step, const int16_t *w0, int P, int sgn,
                                                          __m256i *acc) {
    for (int p = 0; p < P; p++) acc[p] = _mm256_setzero_si256();
    int j = 0;
    for (; 2 * j + 1 < taps; j++) {
        __m256i wa = _mm256_loadu_si256((const __m256i *)(w0 + 16 * j));
        const uint8_t *pa = tp[2 * j] + off, *pb = tp[2 * j + 1] + off;
        for (int p = 0; p < P; p++) {
            __m128i xa = _mm_loadl_epi64((const __m128i *)(pa + p * step));
            __m128i xb = _mm_loadl_epi64((const __m128i *)(pb + p * step));
            acc[p] = _mm256_add_epi32(acc[p], _mm256_madd_epi16(dwq_widen16(_mm_unpacklo_epi8(xa, xb), sgn), wa));
        }
    }
    if (2 * j < taps) {
        __m256i wa = _mm256_loadu_si256((const __m256i *)(w0 + 16 * j));
        for (int p = 0; p < P; p++)
            acc[p] = _mm256_add_epi32(acc[p], _mm256_madd_epi16(dwq_widen32(tp[2 * j] + off + p * step, sgn), wa));
    }
}

/* n raw sums of channels c0 .. c0 + n - 1 (acc) to output bytes at o + c0 without the 32-bit form. */
static inline void dwq_store_wide(const dwq_job *d, const __m256i *acc, int n, int c0, int64_t at) {
    int32_t raw[16];
    memcpy(raw, acc, sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++)
        dwq_store1(d->q, c0 + i, (int64_t)raw[i] - (int64_t)d->zp_x * d->wsum[c0 + i], d->y, at + i);
}

/* P neighbouring output pixels (tap t of pixel p at tp[t] + off0 + p * sw * C, the first output value
 * at y + at0): every channel group, then the channels past them. T: the tap count when known at compile
 * time (its loops unrolled), else 0. */
static inline __attribute__((always_inline)) void dwq_pixels(const dwq_job *d, const uint8_t *const *tp,
                                                            int64_t off0, int64_t at0, int P, int sgn, int T) {
    const geom_t g = d->g;
    const int c = g.c, taps = T ? T : d->taps, pairs = T ? (T + 1) / 2 : d->pairs;
    const int64_t step = (int64_t)g.sw * c;
    const int c_hi = d->c_hi;
    char *y = d->y;
    int c0 = d->c_lo;
    for (; c0 + 16 <= c_hi; c0 += 16) {
        __m256i acc[8];
        const int16_t *w0 = d->wpairs + (int64_t)(c0 / 8) * pairs * 16;
        dwq_acc16(tp, taps, off0 + c0, step, w0, w0 + pairs * 16, P, sgn, acc);
        if (d->narrow) {
            dwq_rq8 qa = dwq_rq_load(d, c0), qb = dwq_rq_load(d, c0 + 8);
            for (int p = 0; p < P; p++)
                dwq_store16(dwq_requant8(acc[2 * p], &qa), dwq_requant8(acc[2 * p + 1], &qb),
                            y + at0 + (int64_t)p * c + c0, sgn);
        } else {
            for (int p = 0; p < P; p++) {
                __m256i two[2] = {acc[2 * p], acc[2 * p + 1]}; /* acc itself stays in registers */
                dwq_store_wide(d, two, 16, c0, at0 + (int64_t)p * c + c0);
            }
        }
    }
    for (; c0 + 8 <= c_hi; c0 += 8) {
        __m256i acc[4];
        dwq_acc8(tp, taps, off0 + c0, step, d->wpairs + (int64_t)(c0 / 8) * pairs * 16, P, sgn, acc);
        if (d->narrow) {
            dwq_rq8 qa = dwq_rq_load(d, c0);
            for (int p = 0; p < P; p++) dwq_store8(dwq_requant8(acc[p], &qa), y + at0 + (int64_t)p * c + c0, sgn);
        } else {
            for (int p = 0; p < P; p++) {
                __m256i one = acc[p];
                dwq_store_wide(d, &one, 8, c0, at0 + (int64_t)p * c + c0);
            }
        }
    }
    for (; c0 < c_hi; c0++)
        for (int p = 0; p < P; p++) {
            int64_t acc = 0;
            for (int t = 0; t < taps; t++) {
                const uint8_t *xp = tp[t] + off0 + p * step + c0;
                int32_t xv = sgn ? *(const int8_t *)xp : *xp;
                acc += (int64_t)(xv - d->zp_x) * d->wplain[(int64_t)t * c + c0];
            }
            dwq_store1(d->q, c0, acc, d->y, at0 + (int64_t)p * c + c0);
        }
}

/* Output pixel ox of output row r (input rows `rows`) whose window leaves the input horizontally: its
 * taps outside read the row of zero-point bytes. */
static inline __attribute__((always_inline)) void dwq_border(const dwq_job *d, const uint8_t *const *rows,
                                                            int64_t r, int ox, int sgn, int T) {
    const geom_t g = d->g;
    const uint8_t *pt[DWQ_MAX_TAPS];
    for (int ky = 0; ky < g.kh; ky++)
        for (int kx = 0; kx < g.kw; kx++) {
            int ix = ox * g.sw - g.pl + kx * g.dw;
            pt[ky * g.kw + kx] = ix < 0 || ix >= g.w ? d->zrow : rows[ky] + (int64_t)ix * g.c;
        }
    dwq_pixels(d, pt, 0, (r * g.ow + ox) * g.c, 1, sgn, T);
}

/* The pixels of output row r whose windows lie inside the input horizontally, [ox_lo, ox_hi): blocks of
 * four, then one block of the one to three left; tp[t]: tap t's input row, from its column kx * dw. */
static inline __attribute__((always_inline)) void dwq_inside(const dwq_job *d, const uint8_t *const *tp,
                                                            int64_t r, int sgn, int T) {
    const geom_t g = d->g;
    int ox = d->ox_lo, hi = d->ox_hi;
#define DWQ_AT(ox) ((int64_t)((ox) * g.sw - g.pl) * g.c), ((r * g.ow + (ox)) * g.c)
    for (; ox + 4 <= hi; ox += 4) dwq_pixels(d, tp, DWQ_AT(ox), 4, sgn, T);
    if (hi - ox == 3)
        dwq_pixels(d, tp, DWQ_AT(ox), 3, sgn, T);
    else if (hi - ox == 2)
        dwq_pixels(d, tp, DWQ_AT(ox), 2, sgn, T);
    else if (hi - ox == 1)
        dwq_pixels(d, tp, DWQ_AT(ox), 1, sgn, T);
#undef DWQ_AT
}

/* Every pixel of output row r. */
static inline __attribute__((always_inline)) void dwq_row_pixels(const dwq_job *d, const uint8_t *const *rows,
                                                                const uint8_t *const *tp, int64_t r, int sgn,
                                                                int T) {
    for (int ox = 0; ox < d->ox_lo; ox++) dwq_border(d, rows, r, ox, sgn, T);
    dwq_inside(d, tp, r, sgn, T);
    for (int ox = d->ox_hi; ox < d->g.ow; ox++) dwq_border(d, rows, r, ox, sgn, T);
}

/* Output row r on the vector path (see above). */
static inline __attribute__((always_inline)) void dwq_row_vec(const dwq_job *d, int64_t r, int sgn) {
    const geom_t g = d->g;
    const int c = g.c;
    int b = (int)(r / g.oh), oy = (int)(r % g.oh);
    const uint8_t *rows[DWQ_MAX_TAPS];
    const uint8_t *tp[DWQ_MAX_TAPS];
    for (int ky = 0; ky < g.kh; ky++) {
        int iy = oy * g.sh - g.pt + ky * g.dh;
        rows[ky] = iy < 0 || iy >= g.h ? d->zrow : (const uint8_t *)d->x + ((int64_t)b * g.h + iy) * g.w * c;
    }
    for (int ky = 0; ky < g.kh; ky++)
        for (int kx = 0; kx < g.kw; kx++) tp[ky * g.kw + kx] = rows[ky] + (int64_t)kx * g.dw * c;
    if (d->taps == 9)
        dwq_row_pixels(d, rows, tp, r, sgn, 9); /* 3 x 3: the zoo's windows */
    else
        dwq_row_pixels(d, rows, tp, r, sgn, 0);
}
#endif

/* Task t: output row t / cparts, its channels of part t % cparts (the vector path), or the whole row. */
static void dwq_task(void *ctx, int64_t t) {
    const dwq_job *d = ctx;
#ifdef __AVX2__
    if (d->vec) {
        dwq_job part;
        int64_t r = t;
        if (d->cparts > 1) { /* the job holds every channel: c_lo 0, c_hi C */
            part = *d;
            r = t / d->cparts;
            part.c_lo = (int)(t % d->cparts) * d->cpart;
            part.c_hi = part.c_lo + d->cpart < d->g.c ? part.c_lo + d->cpart : d->g.c;
            d = &part;
        }
        if (d->is_signed)
            dwq_row_vec(d, r, 1);
        else
            dwq_row_vec(d, r, 0);
        return;
    }
#endif
    dwq_row_generic(d, t);
}

/* Quantized depthwise: wp the packed weights (mk_depthwise_q8_pack); y = requantize(bias + the int32 sums
 * of (x - zp_x) * w). 0, or -1 when out of memory. */
int mk_depthwise_q8(const void *xv, int is_signed, int zp_x, GEOM_ARGS, int m, const int16_t *wp,
                    const int64_t *bias, const int64_t *mult, const int64_t *left, const int64_t *right,
                    int64_t zp_y, int64_t lo, int64_t hi, void *yv) {
    dwq_job d = {.x = xv, .g = GEOM_INIT, .m = m, .is_signed = is_signed, .zp_x = zp_x, .y = yv};
    const geom_t g = d.g;
    int cout = g.c * m;
    d.taps = g.kh * g.kw;
    d.pairs = (d.taps + 1) / 2;
    d.wpairs = wp + dwq_pairs_at(cout);
    d.wplain = wp + dwq_plain_at(d.taps, cout);
    requant_t q = REQUANT_INIT(bias, mult, left, right, zp_y, lo, hi, is_signed);
    if (!requant_init(&q, cout)) return -1;
    d.q = &q;
    int32_t *sums = malloc(sizeof(int32_t) * (size_t)cout * 2 + 4);
    if (!sums) {
        requant_free(&q);
        return -1;
    }
    memcpy(sums, wp, sizeof(int32_t) * (size_t)cout);
    int32_t *beff = sums + cout;
    for (int co = 0; co < cout; co++) beff[co] = (int32_t)(uint32_t)(q.bias32[co] - (int64_t)zp_x * sums[co]);
    d.wsum = sums;
    d.beff = beff;
    uint8_t *zrow = NULL;
#ifdef __AVX2__
    d.vec = m == 1 && d.taps <= DWQ_MAX_TAPS;
    d.narrow = q.narrow;
    if (d.vec) {
        /* The output columns whose windows lie inside the input horizontally: [ox_lo, ox_hi). */
        while (d.ox_lo < g.ow && d.ox_lo * g.sw - g.pl < 0) d.ox_lo++;
        d.ox_hi = d.ox_lo;
        while (d.ox_hi < g.ow && d.ox_hi * g.sw - g.pl + (g.kw - 1) * g.dw < g.w) d.ox_hi++;
        /* What taps outside the input read: a row of zero-point bytes as wide as an input row. */
        size_t bytes = (size_t)g.w * (size_t)g.c;
        zrow = malloc(bytes ? bytes : 1);
        if (zrow) {
            memset(zrow, (uint8_t)zp_x, bytes);
            d.zrow = zrow;
        } else {
            d.vec = 0;
        }
    }
#endif
    int64_t rows = (int64_t)g.n * g.oh, work = rows * g.ow * cout * d.taps;
    /* Few output rows for the threads (the 7x7 layers): each row's channels split in parts of a multiple
     * of 16, so that every thread gets DWQ_TASKS_PER_THREAD tasks or the parts are 16 channels. */
    d.cparts = 1;
    d.cpart = d.c_hi = g.c;
    d.c_lo = 0;
    if (d.vec && g_threads > 1 && rows < (int64_t)g_threads * DWQ_TASKS_PER_THREAD && g.c >= 32) {
        int64_t want = ((int64_t)g_threads * DWQ_TASKS_PER_THREAD + rows - 1) / rows;
        if (want > g.c / 16) want = g.c / 16;
        d.cpart = (int)((g.c + want - 1) / want + 15) / 16 * 16;
        d.cparts = (g.c + d.cpart - 1) / d.cpart;
    }
    parallel_rows(work, DW_PARALLEL_WORK, rows * d.cparts, dwq_task, &d);
    free(zrow);
    free(sums);
    requant_free(&q);
    return 0;
}


/* TANH and LOGISTIC, 16 floats at a time: vmath.h's Cephes exp and tanh (shared with lstm_kernels.c);
 * logistic(x) = 1 / (1 + exp(-x)). Measured against float64 over every 7th float32 of [2^-12, 12]
 * (tanh) and every 5th of [2^-12, 80] (logistic), both signs: at most 1.33 and 2.49 ulp (libm's
 * tanhf: 2.16 ulp; 1 / (1 + expf(-x)): 2.49). A NaN stays NaN; tanh keeps a zero's sign (|x| < 2^-12
 * gives x, tanh's float32 value there), gives +-1 for +-inf; logistic gives 1 for +inf and about
 * 4.6e-39 for x below -88.3 (exp's clamp) and -inf. */
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
#define MK_VF v16f
#define MK_VI v16i
#define MK_V(name) v16_##name
#include "vmath.h"

/* y = f(x) elementwise, n floats, 16 at a time (the last ones padded with zeros); y may be x. */
static inline void map16(const float *x, float *y, int64_t n, v16f (*f)(v16f)) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f v;
        memcpy(&v, x + i, 64);
        v = f(v);
        memcpy(y + i, &v, 64);
    }
    if (i < n) {
        v16f v = v16_splat(0.0f);
        memcpy(&v, x + i, (size_t)(n - i) * sizeof(float));
        v = f(v);
        memcpy(y + i, &v, (size_t)(n - i) * sizeof(float));
    }
}

/* y = tanh(x), n floats; y may be x. */
void mk_tanh_f32(const float *x, float *y, int64_t n) { map16(x, y, n, v16_tanh); }

/* y = 1 / (1 + exp(-x)), n floats; y may be x. */
void mk_logistic_f32(const float *x, float *y, int64_t n) { map16(x, y, n, v16_sigmoid); }

/* rows blocks of row_bytes bytes each: block r from src + r * src_stride to dst + r * dst_stride. */
void mk_copy_2d(const void *src, void *dst, int64_t rows, int64_t row_bytes, int64_t src_stride,
                int64_t dst_stride) {
    const char *s = src;
    char *d = dst;
    for (int64_t r = 0; r < rows; r++) memcpy(d + r * dst_stride, s + r * src_stride, (size_t)row_bytes);
}

/* SOFTMAX along the last axis of rows x cols floats: y = e / sum(e), e = exp(beta * (x - max(x))) per
 * row, as the NumPy kernel computes it (x - max, then times beta unless beta is 1); the max propagates
 * a NaN as np.maximum does. exp is exp16 (Cephes, as TANH's), 0 below -87.3 (a -inf difference
 * included; the true value there is under 1.2e-38). y may be x. */
void mk_softmax_f32(const float *x, float *y, int64_t rows, int64_t cols, float beta) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = xr[0];
        for (int64_t i = 1; i < cols; i++) {
            float v = xr[i];
            if (v > m || v != v) m = v;
            if (m != m) break;
        }
        v16f acc = v16_splat(0.0f), mv = v16_splat(m), bv = v16_splat(beta), lo = v16_splat(-87.3f), zero = v16_splat(0.0f);
        int64_t i = 0;
        for (; i + 16 <= cols; i += 16) {
            v16f z;
            memcpy(&z, xr + i, 64);
            z = z - mv;
            if (beta != 1.0f) z = z * bv;
            v16f e = v16_sel(z < lo, zero, v16_exp(z));
            acc += e;
            memcpy(yr + i, &e, 64);
        }
        float sum = 0.0f;
        for (int k = 0; k < 16; k++) sum += acc[k];
        if (i < cols) {
            int64_t n = cols - i;
            v16f z = v16_splat(0.0f);
            memcpy(&z, xr + i, (size_t)n * sizeof(float));
            z = z - mv;
            if (beta != 1.0f) z = z * bv;
            v16f e = v16_sel(z < lo, zero, v16_exp(z));
            for (int64_t k = 0; k < n; k++) sum += e[k];
            memcpy(yr + i, &e, (size_t)n * sizeof(float));
        }
        for (int64_t k = 0; k < cols; k++) yr[k] = yr[k] / sum;
    }
}

/* gemmlowp's SaturatingRoundingDoublingHighMul of two int32 values (held in int64). */
static inline int64_t srdhm32(int64_t a, int64_t b) {
    if (a == INT32_MIN && b == INT32_MIN) return INT32_MAX;
    int64_t ab = a * b;
    int64_t v = ab + (ab >= 0 ? ((int64_t)1 << 30) : 1 - ((int64_t)1 << 30));
    return v >= 0 ? v >> 31 : -((-v) >> 31);
}

static inline int64_t wrap32(int64_t v) { return (int64_t)(int32_t)(uint32_t)(uint64_t)v; }

/* GetReciprocal of one positive int32 row sum in Q12.19 (softmax.reciprocal_of, step for step):
 * *inv the F0 raw of 2^bits / sum, *bits its exponent. */
static void q8_softmax_reciprocal(int64_t total, int64_t *inv, int64_t *bits) {
    int width = 64 - __builtin_clzll((uint64_t)total);
    int headroom_plus_one = 32 - width;
    int64_t a = (total << headroom_plus_one) - ((int64_t)1 << 31);
    int64_t s = a + INT32_MAX; /* >= 0: the shifted sum has its top bit set */
    int64_t half_denominator = (s + 1) >> 1;
    const int64_t forty_eight_over_17 = 1515870810, minus_32_over_17 = -1010580540;
    int64_t x = wrap32(forty_eight_over_17 + srdhm32(half_denominator, minus_32_over_17));
    const int64_t lim4 = ((int64_t)1 << 29) - 1;
    for (int k = 0; k < 3; k++) {
        int64_t one_minus_dx = wrap32(((int64_t)1 << 29) - srdhm32(half_denominator, x));
        int64_t p = srdhm32(x, one_minus_dx);
        int64_t times_four = p > lim4 ? INT32_MAX : (p < -lim4 ? INT32_MIN : p * 4);
        x = wrap32(x + times_four);
    }
    const int64_t lim2 = ((int64_t)1 << 30) - 1;
    *inv = x > lim2 ? INT32_MAX : (x < -lim2 ? INT32_MIN : x * 2);
    *bits = 12 - headroom_plus_one;
}

/* 8-bit SOFTMAX along the last axis of rows x cols values (uint8, or int8 when is_signed), NNAPI's
 * fixed-point kernel (driver/ops/softmax.py): per row d = x - max in [-255, 0]; the Q12.19 sum of
 * exp_accum[d + 255] (int64, saturated to INT32_MAX), its reciprocal, and per entry
 * RoundingDivideByPOT(SRDHM(inv, exp_f0[d + 255]), bits + 23) clamped to 255, minus 128 when signed.
 * exp_f0 and exp_accum are the 256-entry tables of softmax.exp_tables (non-negative int32 raws). */
void mk_softmax_q8(const void *x, void *y, int64_t rows, int64_t cols, const int64_t *exp_f0,
                   const int64_t *exp_accum, int is_signed) {
    for (int64_t r = 0; r < rows; r++) {
        int32_t m = -256;
        if (is_signed) {
            const int8_t *xr = (const int8_t *)x + r * cols;
            for (int64_t i = 0; i < cols; i++) m = xr[i] > m ? xr[i] : m;
        } else {
            const uint8_t *xr = (const uint8_t *)x + r * cols;
            for (int64_t i = 0; i < cols; i++) m = xr[i] > m ? xr[i] : m;
        }
        int64_t total = 0;
        if (is_signed) {
            const int8_t *xr = (const int8_t *)x + r * cols;
            for (int64_t i = 0; i < cols; i++) total += exp_accum[xr[i] - m + 255];
        } else {
            const uint8_t *xr = (const uint8_t *)x + r * cols;
            for (int64_t i = 0; i < cols; i++) total += exp_accum[xr[i] - m + 255];
        }
        if (total > INT32_MAX) total = INT32_MAX;
        if (total < 1) total = 1; /* not reached: the row's maximum adds exp(0) = 2^19 */
        int64_t inv, bits;
        q8_softmax_reciprocal(total, &inv, &bits);
        /* The row's 256 possible outputs, then one look-up per entry. */
        int64_t shift = bits + 23;
        int32_t table[256];
        for (int d = 0; d < 256; d++) {
            int64_t v = (inv * exp_f0[d] + ((int64_t)1 << 30)) >> 31;
            v = (v + ((int64_t)1 << (shift - 1))) >> shift;
            table[d] = (int32_t)(v > 255 ? 255 : v) - (is_signed ? 128 : 0);
        }
        if (is_signed) {
            const int8_t *xr = (const int8_t *)x + r * cols;
            int8_t *yr = (int8_t *)y + r * cols;
            for (int64_t i = 0; i < cols; i++) yr[i] = (int8_t)table[xr[i] - m + 255];
        } else {
            const uint8_t *xr = (const uint8_t *)x + r * cols;
            uint8_t *yr = (uint8_t *)y + r * cols;
            for (int64_t i = 0; i < cols; i++) yr[i] = (uint8_t)table[xr[i] - m + 255];
        }
    }
}

/* 8-bit MEAN over the middle axis of a C-contiguous [outer, n, inner] view (uint8, or int8 when
 * is_signed): each raw sum s of n values (exact in int32: n * 255 < 2^31 for the callers' n) is
 * looked up as table[s - table_base], the output byte of driver/ops/mean.py's table for n values
 * (table_base = n times the type's smallest value). */
void mk_mean_q8(const void *x, int is_signed, int64_t outer, int64_t n, int64_t inner, const uint8_t *table,
                int64_t table_base, void *y) {
    enum { BLOCK = 256 };
    int32_t acc[BLOCK];
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i0 = 0; i0 < inner; i0 += BLOCK) {
            int64_t w = inner - i0 < BLOCK ? inner - i0 : BLOCK;
            for (int64_t i = 0; i < w; i++) acc[i] = 0;
            if (is_signed) {
                const int8_t *base = (const int8_t *)x + o * n * inner + i0;
                for (int64_t k = 0; k < n; k++)
                    for (int64_t i = 0; i < w; i++) acc[i] += base[k * inner + i];
            } else {
                const uint8_t *base = (const uint8_t *)x + o * n * inner + i0;
                for (int64_t k = 0; k < n; k++)
                    for (int64_t i = 0; i < w; i++) acc[i] += base[k * inner + i];
            }
            uint8_t *out = (uint8_t *)y + o * inner + i0;
            for (int64_t i = 0; i < w; i++) out[i] = table[acc[i] - table_base];
        }
    }
}

typedef struct {
    const uint8_t *a, *b, *table;
    uint8_t *y;
    int64_t n;
} pair_table_job;

#define PAIR_TABLE_CHUNK 16384 /* elements of one task */

static void pair_table_task(void *ctx, int64_t t) {
    const pair_table_job *j = ctx;
    int64_t i0 = t * PAIR_TABLE_CHUNK, i1 = i0 + PAIR_TABLE_CHUNK < j->n ? i0 + PAIR_TABLE_CHUNK : j->n;
    const uint8_t *a = j->a, *b = j->b, *table = j->table;
    uint8_t *y = j->y;
    for (int64_t i = i0; i < i1; i++) y[i] = table[(unsigned)a[i] << 8 | b[i]];
}

/* y[i] = table[a[i] * 256 + b[i]] for n bytes: an 8-bit binary operation (ADD, MUL, MAXIMUM, MINIMUM
 * of driver/ops/_binary.py) tabulated at prepare over every pair of input bytes (65536 entries), on
 * two inputs of one shape; chunks of PAIR_TABLE_CHUNK over the kernels' threads. */
void mk_pair_table_q8(const uint8_t *a, const uint8_t *b, const uint8_t *table, uint8_t *y, int64_t n) {
    if (n <= 0) return;
    pair_table_job job = {a, b, table, y, n};
    int64_t chunks = (n + PAIR_TABLE_CHUNK - 1) / PAIR_TABLE_CHUNK;
    parallel_rows(n, PARALLEL_WORK, chunks, pair_table_task, &job);
}

/* y = a + b, n floats (IEEE sums: NumPy's np.add bit for bit). */
void mk_add_f32(const float *a, const float *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

/* ------------------------------------------------------------ a run of bound calls (driver/bound_steps.py)
 *
 * The calls' layout is mlts_kernels.h's mk_call_t and mk_call_floats_t (driver/native/layout.py). */

int64_t mk_run_calls(const mk_call_t *calls, const mk_call_floats_t *floats, int64_t n, int64_t *status) {
    *status = 0;
    for (int64_t i = 0; i < n; i++) {
        const mk_call_t *c = calls + i;
        const mk_call_floats_t *f = floats + i;
        int st = 0;
        switch (c->kind) {
        case MK_CALL_IM2COL_F32: {
            const mk_call_im2col_f32_t *a = &c->im2col_f32;
            mk_im2col_f32(a->x, a->geom, a->cols);
            break;
        }
        case MK_CALL_GEMM_PACKED_BIAS_ACT_F32: {
            const mk_call_gemm_f32_t *a = &c->gemm_f32;
            mk_gemm_packed_bias_act_f32(a->a, a->b, a->c, a->m, a->n, a->k, a->bias, f->bounds.lo, f->bounds.hi);
            break;
        }
        case MK_CALL_GEMM_FEWROWS_BIAS_ACT_F32: {
            const mk_call_gemm_f32_t *a = &c->gemm_f32;
            if (a->m >= 4 || a->n < 8) return i + 1;
            mk_gemm_bias_act_f32(a->a, a->b, a->c, a->m, a->n, a->k, a->bias, f->bounds.lo, f->bounds.hi);
            break;
        }
        case MK_CALL_ADD_F32: {
            const mk_call_add_f32_t *a = &c->add_f32;
            mk_add_f32(a->a, a->b, a->y, a->n);
            break;
        }
        case MK_CALL_COPY: {
            const mk_call_copy_t *a = &c->copy;
            memcpy(a->dst, a->src, (size_t)a->bytes);
            break;
        }
        case MK_CALL_QIM2COL: {
            const mk_call_qim2col_t *a = &c->qim2col;
            mk_qim2col(a->x, a->geom, (int)a->pad, a->lda, a->cols);
            break;
        }
        case MK_CALL_QGEMM_REQUANT: {
            const mk_call_qgemm_requant_t *a = &c->qgemm_requant;
            st = mk_qgemm_requant(a->a, a->lda, (int)a->a_signed, a->bp, a->colc, (int32_t)a->zw, a->m, a->n, a->k,
                                  a->bias, a->mult, a->left, a->right, a->zp, a->lo, a->hi, (int)a->is_signed,
                                  a->out);
            break;
        }
        case MK_CALL_DEPTHWISE_Q8: {
            const mk_call_depthwise_q8_t *a = &c->depthwise_q8;
            st = mk_depthwise_q8(a->x, (int)a->is_signed, (int)a->zp_x, a->geom, (int)a->m, a->wp, a->bias, a->mult,
                                 a->left, a->right, a->zp_y, a->lo, a->hi, a->y);
            break;
        }
        case MK_CALL_DEPTHWISE_F32: {
            const mk_call_depthwise_f32_t *a = &c->depthwise_f32;
            mk_depthwise_f32(a->x, a->geom, (int)a->m, a->wt, a->bias, f->bounds.lo, f->bounds.hi, a->y);
            break;
        }
        case MK_CALL_TANH_F32:
            mk_tanh_f32(c->map_f32.x, c->map_f32.y, c->map_f32.n);
            break;
        case MK_CALL_LOGISTIC_F32:
            mk_logistic_f32(c->map_f32.x, c->map_f32.y, c->map_f32.n);
            break;
        case MK_CALL_COPY_2D: {
            const mk_call_copy_2d_t *a = &c->copy_2d;
            mk_copy_2d(a->src, a->dst, a->rows, a->row_bytes, a->src_stride, a->dst_stride);
            break;
        }
        case MK_CALL_SOFTMAX_F32: {
            const mk_call_softmax_f32_t *a = &c->softmax_f32;
            mk_softmax_f32(a->x, a->y, a->rows, a->cols, f->softmax.beta);
            break;
        }
        case MK_CALL_SOFTMAX_Q8: {
            const mk_call_softmax_q8_t *a = &c->softmax_q8;
            mk_softmax_q8(a->x, a->y, a->rows, a->cols, a->exp_f0, a->exp_accum, (int)a->is_signed);
            break;
        }
        case MK_CALL_MEAN_Q8: {
            const mk_call_mean_q8_t *a = &c->mean_q8;
            mk_mean_q8(a->x, (int)a->is_signed, a->outer, a->n, a->inner, a->table, a->table_base, a->y);
            break;
        }
        case MK_CALL_PAIR_TABLE_Q8: {
            const mk_call_pair_table_q8_t *a = &c->pair_table_q8;
            mk_pair_table_q8(a->a, a->b, a->table, a->y, a->n);
            break;
        }
        case MK_CALL_LSTM_CELL_F32: {
            const mk_call_lstm_cell_f32_t *a = &c->lstm_cell_f32;
            mk_lstm_cell_f32(a->cst, a->batch, a->a1, a->lda1, a->a2, a->lda2, a->add, a->ldadd, a->c_in, a->c_out,
                             a->h_out, a->gates_out);
            break;
        }
        default:
            return i + 1;
        }
        if (st != 0) {
            *status = st;
            return i + 1;
        }
    }
    return 0;
}

int64_t mk_run_calls_watched(const mk_call_t *calls, const mk_call_floats_t *floats, int64_t n, int64_t *status,
                             const volatile int64_t *word, int64_t mine, int64_t deadline_ns) {
    *status = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i > 0) {
            if (word != NULL && *word > mine) return -(i + 1);
            if (deadline_ns >= 0) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                if ((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec > deadline_ns) return -(i + 1);
            }
        }
        int64_t failed = mk_run_calls(calls + i, floats + i, 1, status);
        if (failed) return i + 1;
    }
    return 0;
}

/* ------------------------------------------------------------ the interface's layout (driver/native/layout.py)
 *
 * Every structure of mlts_kernels.h, its size and each field's offset and size, for the test that
 * compares them with the ctypes mirrors; and the interface's constants. */

typedef struct {
    const char *type, *field;
    int64_t offset, size;
} layout_row;

#define L_TYPE(T) {#T, "", 0, sizeof(T)}
#define L_FIELD(T, F) {#T, #F, offsetof(T, F), sizeof(((T *)0)->F)}

static const layout_row g_layout[] = {
    L_TYPE(mk_geom_t), L_FIELD(mk_geom_t, n), L_FIELD(mk_geom_t, h), L_FIELD(mk_geom_t, w), L_FIELD(mk_geom_t, c),
    L_FIELD(mk_geom_t, kh), L_FIELD(mk_geom_t, kw), L_FIELD(mk_geom_t, sh), L_FIELD(mk_geom_t, sw),
    L_FIELD(mk_geom_t, dh), L_FIELD(mk_geom_t, dw), L_FIELD(mk_geom_t, pt), L_FIELD(mk_geom_t, pl),
    L_FIELD(mk_geom_t, oh), L_FIELD(mk_geom_t, ow),

    L_TYPE(mk_pool_stats_t), L_FIELD(mk_pool_stats_t, jobs), L_FIELD(mk_pool_stats_t, worker_tasks),
    L_FIELD(mk_pool_stats_t, wakes), L_FIELD(mk_pool_stats_t, wait_ns), L_FIELD(mk_pool_stats_t, preempted),
    L_FIELD(mk_pool_stats_t, crowded), L_FIELD(mk_pool_stats_t, late), L_FIELD(mk_pool_stats_t, kept),
    L_FIELD(mk_pool_stats_t, rests),

    L_TYPE(mk_lstm_const_t), L_FIELD(mk_lstm_const_t, units), L_FIELD(mk_lstm_const_t, k1),
    L_FIELD(mk_lstm_const_t, k2), L_FIELD(mk_lstm_const_t, gates), L_FIELD(mk_lstm_const_t, act),
    L_FIELD(mk_lstm_const_t, cell_clip), L_FIELD(mk_lstm_const_t, w), L_FIELD(mk_lstm_const_t, bias),
    L_FIELD(mk_lstm_const_t, peep_i), L_FIELD(mk_lstm_const_t, peep_f), L_FIELD(mk_lstm_const_t, peep_o),
    L_FIELD(mk_lstm_const_t, offered),

    L_TYPE(mk_call_im2col_f32_t), L_FIELD(mk_call_im2col_f32_t, kind), L_FIELD(mk_call_im2col_f32_t, x),
    L_FIELD(mk_call_im2col_f32_t, geom), L_FIELD(mk_call_im2col_f32_t, cols),

    L_TYPE(mk_call_gemm_f32_t), L_FIELD(mk_call_gemm_f32_t, kind), L_FIELD(mk_call_gemm_f32_t, a),
    L_FIELD(mk_call_gemm_f32_t, b), L_FIELD(mk_call_gemm_f32_t, c), L_FIELD(mk_call_gemm_f32_t, m),
    L_FIELD(mk_call_gemm_f32_t, n), L_FIELD(mk_call_gemm_f32_t, k), L_FIELD(mk_call_gemm_f32_t, bias),

    L_TYPE(mk_call_depthwise_f32_t), L_FIELD(mk_call_depthwise_f32_t, kind), L_FIELD(mk_call_depthwise_f32_t, x),
    L_FIELD(mk_call_depthwise_f32_t, geom), L_FIELD(mk_call_depthwise_f32_t, m), L_FIELD(mk_call_depthwise_f32_t, wt),
    L_FIELD(mk_call_depthwise_f32_t, bias), L_FIELD(mk_call_depthwise_f32_t, y),

    L_TYPE(mk_call_add_f32_t), L_FIELD(mk_call_add_f32_t, kind), L_FIELD(mk_call_add_f32_t, a),
    L_FIELD(mk_call_add_f32_t, b), L_FIELD(mk_call_add_f32_t, y), L_FIELD(mk_call_add_f32_t, n),

    L_TYPE(mk_call_copy_t), L_FIELD(mk_call_copy_t, kind), L_FIELD(mk_call_copy_t, src), L_FIELD(mk_call_copy_t, dst),
    L_FIELD(mk_call_copy_t, bytes),

    L_TYPE(mk_call_qim2col_t), L_FIELD(mk_call_qim2col_t, kind), L_FIELD(mk_call_qim2col_t, x),
    L_FIELD(mk_call_qim2col_t, geom), L_FIELD(mk_call_qim2col_t, pad), L_FIELD(mk_call_qim2col_t, lda),
    L_FIELD(mk_call_qim2col_t, cols),

    L_TYPE(mk_call_qgemm_requant_t), L_FIELD(mk_call_qgemm_requant_t, kind), L_FIELD(mk_call_qgemm_requant_t, a),
    L_FIELD(mk_call_qgemm_requant_t, lda), L_FIELD(mk_call_qgemm_requant_t, a_signed),
    L_FIELD(mk_call_qgemm_requant_t, bp), L_FIELD(mk_call_qgemm_requant_t, colc), L_FIELD(mk_call_qgemm_requant_t, zw),
    L_FIELD(mk_call_qgemm_requant_t, m), L_FIELD(mk_call_qgemm_requant_t, n), L_FIELD(mk_call_qgemm_requant_t, k),
    L_FIELD(mk_call_qgemm_requant_t, bias), L_FIELD(mk_call_qgemm_requant_t, mult),
    L_FIELD(mk_call_qgemm_requant_t, left), L_FIELD(mk_call_qgemm_requant_t, right),
    L_FIELD(mk_call_qgemm_requant_t, zp), L_FIELD(mk_call_qgemm_requant_t, lo), L_FIELD(mk_call_qgemm_requant_t, hi),
    L_FIELD(mk_call_qgemm_requant_t, is_signed), L_FIELD(mk_call_qgemm_requant_t, out),

    L_TYPE(mk_call_depthwise_q8_t), L_FIELD(mk_call_depthwise_q8_t, kind), L_FIELD(mk_call_depthwise_q8_t, x),
    L_FIELD(mk_call_depthwise_q8_t, is_signed), L_FIELD(mk_call_depthwise_q8_t, zp_x),
    L_FIELD(mk_call_depthwise_q8_t, geom), L_FIELD(mk_call_depthwise_q8_t, m), L_FIELD(mk_call_depthwise_q8_t, wp),
    L_FIELD(mk_call_depthwise_q8_t, bias), L_FIELD(mk_call_depthwise_q8_t, mult),
    L_FIELD(mk_call_depthwise_q8_t, left), L_FIELD(mk_call_depthwise_q8_t, right),
    L_FIELD(mk_call_depthwise_q8_t, zp_y), L_FIELD(mk_call_depthwise_q8_t, lo), L_FIELD(mk_call_depthwise_q8_t, hi),
    L_FIELD(mk_call_depthwise_q8_t, y),

    L_TYPE(mk_call_map_f32_t), L_FIELD(mk_call_map_f32_t, kind), L_FIELD(mk_call_map_f32_t, x),
    L_FIELD(mk_call_map_f32_t, y), L_FIELD(mk_call_map_f32_t, n),

    L_TYPE(mk_call_copy_2d_t), L_FIELD(mk_call_copy_2d_t, kind), L_FIELD(mk_call_copy_2d_t, src),
    L_FIELD(mk_call_copy_2d_t, dst), L_FIELD(mk_call_copy_2d_t, rows), L_FIELD(mk_call_copy_2d_t, row_bytes),
    L_FIELD(mk_call_copy_2d_t, src_stride), L_FIELD(mk_call_copy_2d_t, dst_stride),

    L_TYPE(mk_call_softmax_f32_t), L_FIELD(mk_call_softmax_f32_t, kind), L_FIELD(mk_call_softmax_f32_t, x),
    L_FIELD(mk_call_softmax_f32_t, y), L_FIELD(mk_call_softmax_f32_t, rows), L_FIELD(mk_call_softmax_f32_t, cols),

    L_TYPE(mk_call_softmax_q8_t), L_FIELD(mk_call_softmax_q8_t, kind), L_FIELD(mk_call_softmax_q8_t, x),
    L_FIELD(mk_call_softmax_q8_t, y), L_FIELD(mk_call_softmax_q8_t, rows), L_FIELD(mk_call_softmax_q8_t, cols),
    L_FIELD(mk_call_softmax_q8_t, exp_f0), L_FIELD(mk_call_softmax_q8_t, exp_accum),
    L_FIELD(mk_call_softmax_q8_t, is_signed),

    L_TYPE(mk_call_mean_q8_t), L_FIELD(mk_call_mean_q8_t, kind), L_FIELD(mk_call_mean_q8_t, x),
    L_FIELD(mk_call_mean_q8_t, is_signed), L_FIELD(mk_call_mean_q8_t, outer), L_FIELD(mk_call_mean_q8_t, n),
    L_FIELD(mk_call_mean_q8_t, inner), L_FIELD(mk_call_mean_q8_t, table), L_FIELD(mk_call_mean_q8_t, table_base),
    L_FIELD(mk_call_mean_q8_t, y),

    L_TYPE(mk_call_pair_table_q8_t), L_FIELD(mk_call_pair_table_q8_t, kind), L_FIELD(mk_call_pair_table_q8_t, a),
    L_FIELD(mk_call_pair_table_q8_t, b), L_FIELD(mk_call_pair_table_q8_t, table),
    L_FIELD(mk_call_pair_table_q8_t, y), L_FIELD(mk_call_pair_table_q8_t, n),
    L_TYPE(mk_call_lstm_cell_f32_t), L_FIELD(mk_call_lstm_cell_f32_t, kind), L_FIELD(mk_call_lstm_cell_f32_t, cst),
    L_FIELD(mk_call_lstm_cell_f32_t, batch), L_FIELD(mk_call_lstm_cell_f32_t, a1),
    L_FIELD(mk_call_lstm_cell_f32_t, lda1), L_FIELD(mk_call_lstm_cell_f32_t, a2),
    L_FIELD(mk_call_lstm_cell_f32_t, lda2), L_FIELD(mk_call_lstm_cell_f32_t, add),
    L_FIELD(mk_call_lstm_cell_f32_t, ldadd), L_FIELD(mk_call_lstm_cell_f32_t, c_in),
    L_FIELD(mk_call_lstm_cell_f32_t, c_out), L_FIELD(mk_call_lstm_cell_f32_t, h_out),
    L_FIELD(mk_call_lstm_cell_f32_t, gates_out),

    L_TYPE(mk_call_t), L_FIELD(mk_call_t, word), L_FIELD(mk_call_t, kind), L_FIELD(mk_call_t, im2col_f32),
    L_FIELD(mk_call_t, gemm_f32), L_FIELD(mk_call_t, depthwise_f32), L_FIELD(mk_call_t, add_f32),
    L_FIELD(mk_call_t, copy), L_FIELD(mk_call_t, qim2col), L_FIELD(mk_call_t, qgemm_requant),
    L_FIELD(mk_call_t, depthwise_q8), L_FIELD(mk_call_t, map_f32), L_FIELD(mk_call_t, copy_2d),
    L_FIELD(mk_call_t, softmax_f32), L_FIELD(mk_call_t, softmax_q8), L_FIELD(mk_call_t, mean_q8),
    L_FIELD(mk_call_t, pair_table_q8),
    L_FIELD(mk_call_t, lstm_cell_f32),

    L_TYPE(mk_call_bounds_t), L_FIELD(mk_call_bounds_t, lo), L_FIELD(mk_call_bounds_t, hi),
    L_TYPE(mk_call_softmax_floats_t), L_FIELD(mk_call_softmax_floats_t, beta),
    L_TYPE(mk_call_floats_t), L_FIELD(mk_call_floats_t, word), L_FIELD(mk_call_floats_t, bounds),
    L_FIELD(mk_call_floats_t, softmax),
};

int mk_layout(int64_t i, const char **type, const char **field, int64_t *offset, int64_t *size) {
    if (i < 0 || i >= (int64_t)(sizeof g_layout / sizeof g_layout[0])) return 0;
    *type = g_layout[i].type;
    *field = g_layout[i].field;
    *offset = g_layout[i].offset;
    *size = g_layout[i].size;
    return 1;
}

typedef struct {
    const char *name;
    int64_t value;
} constant_row;

#define C_ROW(C) {#C, C}

static const constant_row g_constants[] = {
    C_ROW(MK_ABI),
    C_ROW(MK_CALL_INTS),
    C_ROW(MK_CALL_FLOATS),
    C_ROW(MK_CALL_IM2COL_F32),
    C_ROW(MK_CALL_GEMM_PACKED_BIAS_ACT_F32),
    C_ROW(MK_CALL_DEPTHWISE_F32),
    C_ROW(MK_CALL_GEMM_FEWROWS_BIAS_ACT_F32),
    C_ROW(MK_CALL_ADD_F32),
    C_ROW(MK_CALL_COPY),
    C_ROW(MK_CALL_QIM2COL),
    C_ROW(MK_CALL_QGEMM_REQUANT),
    C_ROW(MK_CALL_DEPTHWISE_Q8),
    C_ROW(MK_CALL_TANH_F32),
    C_ROW(MK_CALL_LOGISTIC_F32),
    C_ROW(MK_CALL_COPY_2D),
    C_ROW(MK_CALL_SOFTMAX_F32),
    C_ROW(MK_CALL_SOFTMAX_Q8),
    C_ROW(MK_CALL_MEAN_Q8),
    C_ROW(MK_CALL_PAIR_TABLE_Q8),
    C_ROW(MK_CALL_LSTM_CELL_F32),
    C_ROW(MK_QGEMM_MAX_K),
};

int mk_constant(int64_t i, const char **name, int64_t *value) {
    if (i < 0 || i >= (int64_t)(sizeof g_constants / sizeof g_constants[0])) return 0;
    *name = g_constants[i].name;
    *value = g_constants[i].value;
    return 1;
}
