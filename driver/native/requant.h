/* NNAPI's requantization multiply, shared by kernels.c and qgemm_kernels.c (both must give the same
 * bytes). Every digest of a kernel source covers this header too (setup.py, driver/native). */
#ifndef MLTS_REQUANT_H
#define MLTS_REQUANT_H

#include <stdint.h>

/* x * (m / 2^31) * 2^left rounded as NNAPI's MultiplyByQuantizedMultiplier, then a rounding divide by
 * 2^right (ties away from zero): the int64 steps of driver/ops/_quant.py. */
static inline int64_t mbqm(int64_t x, int64_t m, int64_t left, int64_t right) {
    int64_t y = x << left;
    y *= m;
    y += (int64_t)1 << 30;
    y >>= 31;
    if (right) {
        int64_t negative = y < 0;
        y += ((int64_t)1 << right) >> 1;
        y -= negative;
        y >>= right;
    }
    return y;
}

#endif
