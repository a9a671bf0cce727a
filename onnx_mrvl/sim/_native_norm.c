/* The two sums of onnxruntime's AVX2 fp32 LayerNormalization kernel that norm_ops.py reproduces
 * (``_mean_f64_lanes``, ``_lanes_fma_sum``), per row in C instead of a Python loop over blocks of
 * 4 / 8 columns (norm_native.py checks the bits against those numpy forms once per process and keeps
 * numpy where they differ). The same operations in the same order: float64 adds in 4 lanes for the
 * mean; for the sum of squares an FMA per lane taken, as numpy takes it, as the float64 product
 * (exact) plus the float64 accumulator, rounded to float32 (built with -ffp-contract=off: nothing
 * else is fused). The whole kernels of both LayerNorm forms too (``ln_ort_rows``, ``ln_numpy_rows``):
 * ~12 numpy passes a call each, checked the same way. */
#include <math.h>
#include <stdint.h>
#include "_native_pairwise.h"

/* fp32(sum(v[0:n]) / n): 4 float64 lanes over the whole blocks of 4 (lane k: i = k mod 4), folded
 * (l0 + l2) + (l1 + l3), the remainder added in order */
static float mean_f64_lanes(const float *v, long n) {
    const long n4 = n / 4 * 4;
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (long j = 0; j < n4; j += 4) {
        a0 = a0 + (double)v[j];
        a1 = a1 + (double)v[j + 1];
        a2 = a2 + (double)v[j + 2];
        a3 = a3 + (double)v[j + 3];
    }
    double s = (a0 + a2) + (a1 + a3);
    for (long k = n4; k < n; k++)
        s = s + (double)v[k];
    return (float)(s / (double)n);
}

void ln_mean_f64_lanes(const float *x, long rows, long n, float *out) {
    for (long r = 0; r < rows; r++)
        out[r] = mean_f64_lanes(x + r * n, n);
}

/* the 8-lane sum of v[0:n]^2: acc_k = fp32(d d + acc_k) over the whole blocks of 8, folded
 * (a[4:8] + a[0:4]), (b[2:4] + b[0:2]), c0 + c1; a block of 4 of the remainder as fp32 products
 * added one by one, then fp32(d d + v) per element */
static float lanes_fma_sum(const float *v, long n) {
    const long n8 = n / 8 * 8;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (long j = 0; j < n8; j += 8)
        for (int k = 0; k < 8; k++)
            acc[k] = (float)((double)v[j + k] * (double)v[j + k] + (double)acc[k]);
    float h4[4], h2[2];
    for (int k = 0; k < 4; k++)
        h4[k] = acc[4 + k] + acc[k];
    for (int k = 0; k < 2; k++)
        h2[k] = h4[2 + k] + h4[k];
    float s = h2[0] + h2[1];
    long i = n8;
    if (n - i >= 4) {
        float p[4];
        for (int k = 0; k < 4; k++)
            p[k] = v[i + k] * v[i + k];
        for (int k = 0; k < 4; k++)
            s = s + p[k];
        i += 4;
    }
    for (; i < n; i++)
        s = (float)((double)v[i] * (double)v[i] + (double)s);
    return s;
}

void ln_lanes_fma_sum(const float *d, long rows, long n, float *out) {
    for (long r = 0; r < rows; r++)
        out[r] = lanes_fma_sum(d + r * n, n);
}

/* onnxruntime's AVX2 LayerNormalization kernel, row by row (norm_ops.layernorm_onnxruntime, rows of
 * 8 or more, not rms): m = mean_f64_lanes, d = fp32(x - m), r = 1 / sqrt(lanes_fma_sum(d) / n + eps)
 * in fp32, y = fp32(double(fp32(d r)) g + b), b 0.0 when absent (numpy's float64 form of the FMA) */
void ln_ort_rows(const float *x, long rows, long n, float eps, const float *g, const float *b, float *out) {
    for (long r = 0; r < rows; r++) {
        const float *v = x + r * n;
        float *d = out + r * n;
        const float m = mean_f64_lanes(v, n);
        for (long i = 0; i < n; i++)
            d[i] = v[i] - m;
        const float rs = 1.0f / sqrtf(lanes_fma_sum(d, n) / (float)n + eps);
        for (long i = 0; i < n; i++)
            d[i] = (float)((double)(d[i] * rs) * (double)g[i] + (b ? (double)b[i] : 0.0));
    }
}

/* norm_ops.layernorm over the last axis (not rms), row by row, unrounded: m = np.mean(x) (0 plus the
 * pairwise sum, divided by n in float64: numpy divides by an intp count), d = x - m, var = mean(d d),
 * r = 1 / sqrt(var + eps), y = d r g (+ b) */
void ln_numpy_rows(const float *x, long rows, long n, float eps, const float *g, const float *b, float *out) {
    for (long r = 0; r < rows; r++) {
        const float *v = x + r * n;
        float *d = out + r * n;
        const float m = (float)((double)(0.0f + pairwise_sum(v, n, 0)) / (double)n);
        for (long i = 0; i < n; i++)
            d[i] = v[i] - m;
        const float var = (float)((double)(0.0f + pairwise_sum(d, n, 1)) / (double)n) + eps;
        const float rs = 1.0f / sqrtf(var);
        for (long i = 0; i < n; i++) {
            float t = d[i] * rs;
            t = t * g[i];
            d[i] = b ? t + b[i] : t;
        }
    }
}
