/* Cephes' expf and tanhf polynomials on GCC vectors of floats, included once per vector type by
 * kernels.c (16 lanes: TANH, LOGISTIC, SOFTMAX) and lstm_kernels.c (8 lanes: the LSTM cell's gates).
 *
 * Before including, define MK_VF (a float vector type), MK_VI (the int32 vector of the same width)
 * and MK_V(name), which names this width's functions: splat, sel, clamp, abs, exp, tanh, sigmoid.
 * Every lane is computed alone, so a value's result does not depend on the width.
 *
 * exp(x) clamps x to [-87.3, 88.3] (a NaN stays NaN); about 1 ulp there. tanh is Cephes' odd
 * polynomial below 0.625 and 1 - 2 / (exp(2|x|) + 1) above, x itself below 2^-12 (a zero keeps its
 * sign), +-1 at +-inf; sigmoid(x) = 1 / (1 + exp(-x)). Measured against float64: at most 1.33 ulp
 * (tanh) and 2.49 ulp (sigmoid).
 */

#include <stdint.h>
#include <string.h>

static inline MK_VF MK_V(splat)(float v) { return (MK_VF){0} + v; }

/* Lanes of a where m is set (all ones), of b where it is clear (a vector comparison's result). */
static inline MK_VF MK_V(sel)(MK_VI m, MK_VF a, MK_VF b) {
    MK_VI ai, bi, r;
    memcpy(&ai, &a, sizeof ai);
    memcpy(&bi, &b, sizeof bi);
    r = (ai & m) | (bi & ~m);
    MK_VF out;
    memcpy(&out, &r, sizeof out);
    return out;
}

/* x clamped to [lo, hi]; a NaN stays NaN (as NumPy's clip and maximum keep it). */
static inline MK_VF MK_V(clamp)(MK_VF x, MK_VF lo, MK_VF hi) {
    return MK_V(sel)(x < lo, lo, MK_V(sel)(x > hi, hi, x));
}

static inline MK_VF MK_V(abs)(MK_VF x) {
    MK_VI bits;
    memcpy(&bits, &x, sizeof bits);
    bits &= 0x7fffffff;
    memcpy(&x, &bits, sizeof x);
    return x;
}

static inline MK_VF MK_V(exp)(MK_VF x) {
    x = MK_V(clamp)(x, MK_V(splat)(-87.3f), MK_V(splat)(88.3f));
    MK_VF fx = x * 1.44269504088896341f;
    fx = (fx + 12582912.0f) - 12582912.0f; /* round to nearest: add and subtract 1.5 * 2^23 */
    x = x - fx * 0.693359375f;
    x = x - fx * -2.12194440e-4f;
    MK_VF z = x * x;
    MK_VF y = MK_V(splat)(1.9875691500e-4f);
    y = y * x + 1.3981999507e-3f;
    y = y * x + 8.3334519073e-3f;
    y = y * x + 4.1665795894e-2f;
    y = y * x + 1.6666665459e-1f;
    y = y * x + 5.0000001201e-1f;
    y = y * z + x + 1.0f;
    MK_VI bits = (__builtin_convertvector(fx, MK_VI) + 127) << 23;
    MK_VF scale;
    memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

static inline MK_VF MK_V(tanh)(MK_VF x) {
    MK_VF ax = MK_V(abs)(x);
    MK_VF big = 1.0f - 2.0f / (MK_V(exp)(ax + ax) + 1.0f);
    big = MK_V(sel)(x < 0.0f, -big, big);
    MK_VF z = x * x;
    MK_VF p = MK_V(splat)(-5.70498872745e-3f);
    p = p * z + 2.06390887954e-2f;
    p = p * z + -5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z + -3.33332819422e-1f;
    MK_VF small = p * z * x + x;
    return MK_V(sel)(ax < 0x1p-12f, x, MK_V(sel)(ax < 0.625f, small, big));
}

static inline MK_VF MK_V(sigmoid)(MK_VF x) { return 1.0f / (1.0f + MK_V(exp)(-x)); }
