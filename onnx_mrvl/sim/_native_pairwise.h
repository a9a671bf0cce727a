/* numpy's float32 pairwise sum (FLOAT_pairwise_sum, what np.add.reduce runs along a contiguous axis)
 * of v[0:n], or with sq of the fp32 products v[i] * v[i] (a mean of squares: the products rounded,
 * then added): under 8 values in order from -0.0 (the identity); up to 128 in 8 lane sums (lane j:
 * i = j mod 8 of the whole blocks of 8, the first block their start), folded ((r0 + r1) + (r2 + r3)) +
 * ((r4 + r5) + (r6 + r7)), then the rest in order; else the two halves, the first a multiple of 8.
 * np.add.reduce then adds the result to its initial 0.0 (a caller that reproduces it adds 0.0f: a
 * -0.0 sum becomes +0.0). Shared by _native_norm.c (LayerNorm means) and _native_act.c (Softmax);
 * each library checks its results against numpy when it loads. */
#ifndef MRVL_NATIVE_PAIRWISE_H
#define MRVL_NATIVE_PAIRWISE_H
#include <immintrin.h>

static float pairwise_sum(const float *v, long n, int sq) {
    if (n < 8) {
        float r = -0.0f;
        for (long i = 0; i < n; i++)
            r += sq ? v[i] * v[i] : v[i];
        return r;
    }
    if (n <= 128) {
        __m256 r = _mm256_loadu_ps(v);
        if (sq)
            r = _mm256_mul_ps(r, r);
        long i = 8;
        for (; i < n - n % 8; i += 8) {
            __m256 x = _mm256_loadu_ps(v + i);
            r = _mm256_add_ps(r, sq ? _mm256_mul_ps(x, x) : x);
        }
        __m256 h = _mm256_hadd_ps(r, r);       /* (r0 + r1), (r2 + r3) per half, twice */
        h = _mm256_hadd_ps(h, h);              /* ((r0 + r1) + (r2 + r3)) per half */
        float res = _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
        for (; i < n; i++)
            res += sq ? v[i] * v[i] : v[i];
        return res;
    }
    long n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(v, n2, sq) + pairwise_sum(v + n2, n - n2, sq);
}
#endif
