/* What the int8 kernels (_native_int8.c) and the float-path int8 conv (_native_i8float.c) share:
 * the parallel-part runner (the fp16 kernels' worker pool, handed in by i8_set_runner /
 * f8_set_runner), the calling thread's scratch buffer, lane masks and rne(x / s).
 * Included once by each of those sources (static definitions: each library has its own). */
#ifndef MRVL_NATIVE_COMMON_H
#define MRVL_NATIVE_COMMON_H
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef void (*part_fn)(void *arg, long part);
typedef void (*runner_fn)(part_fn fn, void *arg, long parts, int nthreads);
static runner_fn runner = 0;      /* _native_conv.c's mrvl_run_parts, or 0 */

/* fn(arg, p) for p < parts: on the worker pool, else on the calling thread */
static void run(part_fn fn, void *arg, long parts, int nthreads) {
    if (runner && parts > 1 && nthreads > 1)
        runner(fn, arg, parts, nthreads);
    else
        for (long p = 0; p < parts; p++)
            fn(arg, p);
}

/* a thread's buffer *buf of *cap bytes, grown to at least ``bytes``: 64-byte aligned, grown in
 * pages, kept; 0 when the allocation fails */
static void *grow_buffer(void **buf, size_t *cap, size_t bytes) {
    if (bytes > *cap) {
        free(*buf);
        size_t c = (bytes + 4095) & ~(size_t)4095;
        *buf = aligned_alloc(64, c);
        *cap = *buf ? c : 0;
    }
    return *buf;
}

/* thread-local scratch of the calling thread (workers only write into the caller's buffer) */
static __thread void *scratch = 0;
static __thread size_t scratch_cap = 0;

static void *get_scratch(size_t bytes) {
    return grow_buffer(&scratch, &scratch_cap, bytes);
}

/* the first ``left`` of 16 lanes (none when left <= 0) */
static inline __mmask16 lanes(long left) {
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (left > 0 ? left : 0)) - 1);
}

/* rne(x / s) as float: y = fp32(x * fp32(1 / s)) and fp32(x / s) both lie within 2^-24 |x / s|
 * of x / s (three roundings in all: |y - fp32(x / s)| <= 3 * 2^-24 |x / s| < 1.9e-4 below
 * |x / s| = 1024), so they round to the same integer unless y lies within 0.0005 of a
 * half-integer; only then is the vector divided (rare: 0.1% of the lanes for uniform
 * fractions; inputs that are codes times the scale are never near). Beyond 1024 the code
 * saturates either way (|z| <= 255), and a near-tie there only costs a division.
 * ``exact``: always divide (1 / s not a normal float). */
#define NEAR_TIE 0.4995f
static inline __m512 rne_div(__m512 x, __m512 scale, __m512 rcp, long exact) {
    __m512 y = _mm512_mul_ps(x, rcp);
    __m512 r = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __mmask16 near = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(y, r)), _mm512_set1_ps(NEAR_TIE), _CMP_GT_OQ);
    if (near || exact)
        r = _mm512_roundscale_ps(_mm512_div_ps(x, scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return r;
}
#endif
