/* Sigmoid, SiLU and GELU of the simulator's float32 activations (sim/activations.py,
 * activations_smooth.py), in place, in one pass, bit for bit the numpy steps they replace
 * (activations_native.py checks the bits against numpy once per process, function by function, and
 * keeps numpy where they differ):
 *
 *   e = exp(-|x|);  sigmoid = (x >= 0 ? 1 : e) / (1 + e);  silu = x * sigmoid   (x first: NaN payload)
 *   gelu: gelu_block below
 *
 * with numpy's float32 exp (_native_exp.h). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "_native_exp.h"
#include "_native_pairwise.h"

typedef void (*part_fn)(void *arg, long part);
typedef void (*runner_fn)(part_fn fn, void *arg, long parts, int nthreads);
static runner_fn runner = 0;            /* _native_conv.c's mrvl_run_parts (act_set_runner) */

void act_set_runner(void *fn) { runner = (runner_fn)fn; }

/* activations_smooth.gelu's numpy steps: c = erfc(x * -1/sqrt 2) by the Numerical Recipes fit
 * (t = 1 / (1 + 0.5 |z|), p = Horner of t, p - |z|^2, exp, * t, 2 - p where z < 0), x * (c * 0.5);
 * each multiply and add rounded apart (the source is built with -ffp-contract=off), the constants
 * as numpy's F32(python float) gives them (double, then float) */
static const double gelu_erfc_fit[10] = {0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807,
                                         -0.18628806, 0.09678418, 0.37409196, 1.00002368, -1.26551223};

enum { ACT_SIGMOID, ACT_SILU, ACT_GELU };

/* a part of x (chunks of 16 K values): the activation ``kind`` in place, with ``post`` the fp16
 * rounding and its finiteness test too (activations.py's function and static_plan.finish_post's
 * round_fp16_ in one pass); the tail through a zero-padded vector (lanes are independent) */
typedef struct { float *x; long n, chunk; int kind, post; volatile int bad; } actjob;

/* The build's vector: 16 lanes (MRVL_EXP16) or 8, and the operations gelu_block needs, each one
 * instruction of that width (the same operation lane by lane in both) */
#ifdef MRVL_EXP16
typedef __m512 vf_t;
#define VL 16
#define VF(op) _mm512_##op
MI vf_t vf_mulf(vf_t a, vf_t b) { return mul_first16(a, b); }
MI vf_t vf_abs(vf_t a) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fffffff))); }
MI vf_t vf_exp(vf_t a) { return exp_np16(a); }
MI vf_t vf_if_neg(vf_t z, vf_t a, vf_t b) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ), a, b); }
MI vf_t vf_rne(vf_t v) { return rne16x(v); }
MI int vf_nonfinite(vf_t v) { return nonfinite16x(v) != 0; }
MI vf_t vf_negabs(vf_t a) { return or16(a, (int)0x80000000); }
MI vf_t vf_if_ge0(vf_t x, vf_t a, vf_t b) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ), a, b); }
#else
typedef __m256 vf_t;
#define VL 8
#define VF(op) _mm256_##op
MI vf_t vf_mulf(vf_t a, vf_t b) { return mul_first(a, b); }
MI vf_t vf_abs(vf_t a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
MI vf_t vf_exp(vf_t a) { return exp_np(a); }
MI vf_t vf_if_neg(vf_t z, vf_t a, vf_t b) { return _mm256_blendv_ps(a, b, _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_LT_OQ)); }
MI vf_t vf_rne(vf_t v) { return rne8(v); }
MI int vf_nonfinite(vf_t v) { return !_mm256_testz_si256(nonfinite8(v), nonfinite8(v)); }
MI vf_t vf_negabs(vf_t a) { return _mm256_or_ps(a, _mm256_set1_ps(-0.0f)); }
MI vf_t vf_if_ge0(vf_t x, vf_t a, vf_t b) { return _mm256_blendv_ps(a, b, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ)); }
#endif
MI vf_t vf_loadu(const float *p) { return VF(loadu_ps)(p); }
MI vf_t vf_load(const float *p) { return VF(load_ps)(p); }
MI void vf_store(float *p, vf_t v) { VF(store_ps)(p, v); }
MI void vf_storeu(float *p, vf_t v) { VF(storeu_ps)(p, v); }
MI vf_t vf_set1(float f) { return VF(set1_ps)(f); }
MI vf_t vf_add(vf_t a, vf_t b) { return VF(add_ps)(a, b); }
MI vf_t vf_sub(vf_t a, vf_t b) { return VF(sub_ps)(a, b); }
MI vf_t vf_mul(vf_t a, vf_t b) { return VF(mul_ps)(a, b); }
MI vf_t vf_div(vf_t a, vf_t b) { return VF(div_ps)(a, b); }

/* activations_smooth.gelu's steps over n values (a multiple of VL, at most ACT_BLOCK) in four
 * passes, each a loop of independent vectors: t (its division), the Horner fit, exp, then the
 * blend and the products. Per vector (gelu8 / gelu16 before), each vector was one dependent chain
 * of ~70 operations (two divisions, 9 multiplies and adds, exp), and four such chains an iteration
 * filled the out-of-order window before the next iteration's could start: on a Zen 5, 0.94 -> 0.49
 * ns a value on 16 lanes, 1.80 -> 0.91 on 8 (the AVX2 build). z and a are recomputed from x where a
 * pass needs them: every lane gets the same operations in the same order, the same bits. Returns
 * 1 when a result is not finite (post: after the fp16 rounding). */
#define ACT_BLOCK 512   /* values a block of gelu_block / sig_block: their scratch on the stack */
MI int gelu_block(float *x, long n, const int post) {
    float tb[ACT_BLOCK] __attribute__((aligned(64))), pb[ACT_BLOCK] __attribute__((aligned(64)));
    const double *coeffs = gelu_erfc_fit;
    const vf_t one = vf_set1(1.0f), half = vf_set1(0.5f), c = vf_set1((float)-0.7071067811865476);
    int bad = 0;
    for (long i = 0; i < n; i += VL) {
        const vf_t a = vf_abs(vf_mul(vf_loadu(x + i), c));
        vf_store(tb + i, vf_div(one, vf_add(one, vf_mulf(half, a))));
    }
    for (long i = 0; i < n; i += VL) {
        const vf_t t = vf_load(tb + i);
        vf_t p = vf_set1((float)coeffs[0]);
        for (int k = 1; k < 10; k++)
            p = vf_add(vf_mulf(p, t), vf_set1((float)coeffs[k]));
        const vf_t a = vf_abs(vf_mul(vf_loadu(x + i), c));
        vf_store(pb + i, vf_sub(p, vf_mul(a, a)));
    }
    for (long i = 0; i < n; i += VL)
        vf_store(pb + i, vf_exp(vf_load(pb + i)));
    for (long i = 0; i < n; i += VL) {
        const vf_t xv = vf_loadu(x + i);
        vf_t p = vf_mulf(vf_load(pb + i), vf_load(tb + i));
        p = vf_if_neg(vf_mul(xv, c), p, vf_sub(vf_set1(2.0f), p));
        vf_t r = vf_mulf(xv, vf_mulf(p, half));
        if (post) {
            r = vf_rne(r);
            bad |= vf_nonfinite(r);
        }
        vf_storeu(x + i, r);
    }
    return bad;
}

/* sigmoid / silu (_native_exp.h sigmoid8's operations, then x * s) over n values (a multiple of VL, at
 * most ACT_BLOCK) in two passes of independent vectors: e = exp(-|x|), then (x >= 0 ? 1 : e) /
 * (1 + e) and the product. Against four vectors an iteration in one pass: 0.32 / 0.33 -> 0.30 /
 * 0.30 ns a value (sigmoid / silu, 16 lanes, Zen 5); what is left is mostly the two divisions a
 * vector (exp's rational fit, the sigmoid's), which the numeric model fixes. Returns 1 when a result
 * is not finite (post: after the fp16 rounding). */
MI int sig_block(float *x, long n, const int kind, const int post) {
    float eb[ACT_BLOCK] __attribute__((aligned(64)));
    const vf_t one = vf_set1(1.0f);
    int bad = 0;
    for (long i = 0; i < n; i += VL)
        vf_store(eb + i, vf_exp(vf_negabs(vf_loadu(x + i))));
    for (long i = 0; i < n; i += VL) {
        const vf_t xv = vf_loadu(x + i), e = vf_load(eb + i);
        vf_t r = vf_div(vf_if_ge0(xv, e, one), vf_add(e, one));
        if (kind == ACT_SILU)
            r = vf_mulf(xv, r);
        if (post) {
            r = vf_rne(r);
            bad |= vf_nonfinite(r);
        }
        vf_storeu(x + i, r);
    }
    return bad;
}

MI int act_block(float *x, long n, const int kind, const int post) {
    return kind == ACT_GELU ? gelu_block(x, n, post) : sig_block(x, n, kind, post);
}

/* the activation ``kind`` over x[0:n] in blocks (gelu_block, sig_block: the same operations per lane);
 * the last 1 to VL - 1 values through a zero-padded copy (a zero lane's result, 0 or 0.5, is finite:
 * no false finiteness flag) */
MI void act_range(actjob *j, float *x, long n, const int kind, const int post) {
    int bad = 0;
    const long whole = n / VL * VL;
    for (long b = 0; b < whole; b += ACT_BLOCK)
        bad |= act_block(x + b, whole - b < ACT_BLOCK ? whole - b : ACT_BLOCK, kind, post);
    if (whole < n) {
        float t[VL] __attribute__((aligned(64))) = {0};
        memcpy(t, x + whole, (size_t)(n - whole) * sizeof(float));
        bad |= act_block(t, VL, kind, post);
        memcpy(x + whole, t, (size_t)(n - whole) * sizeof(float));
    }
    if (bad)
        j->bad = 1;
}

static void act_part(void *arg, long p) {
    actjob *j = arg;
    long i = p * j->chunk, n = (i + j->chunk < j->n ? i + j->chunk : j->n) - i;
    float *x = j->x + i;
    switch (j->kind * 2 + j->post) {      /* each form compiled apart */
    case ACT_SIGMOID * 2: act_range(j, x, n, ACT_SIGMOID, 0); break;
    case ACT_SIGMOID * 2 + 1: act_range(j, x, n, ACT_SIGMOID, 1); break;
    case ACT_SILU * 2: act_range(j, x, n, ACT_SILU, 0); break;
    case ACT_SILU * 2 + 1: act_range(j, x, n, ACT_SILU, 1); break;
    case ACT_GELU * 2: act_range(j, x, n, ACT_GELU, 0); break;
    default: act_range(j, x, n, ACT_GELU, 1); break;
    }
}

static int act_run(float *x, long n, int kind, int post, int nthreads) {
    const long chunk = 1L << 14;        /* 64 KB a part */
    actjob j = {x, n, chunk, kind, post, 0};
    long parts = (n + chunk - 1) / chunk;
    if (runner && parts > 1 && nthreads > 1)
        runner(act_part, &j, parts, nthreads);
    else
        for (long p = 0; p < parts; p++)
            act_part(&j, p);
    return !j.bad;
}

/* x[0:n] = act(x) in place (kind: 0 sigmoid, 1 silu, 2 gelu), on up to nthreads threads */
void act_apply(float *x, long n, int kind, int nthreads) { act_run(x, n, kind, 0, nthreads); }

/* x[0:n] = fp16(act(x)) in place; 1 when every result is finite. Called by _native_conv.c's
 * run_steps after a conv / FC whose record names it (static_records.py). */
int act_post(float *x, long n, int kind, int nthreads) { return act_run(x, n, kind, 1, nthreads); }

/* ------------------------------------------------------------------ Softmax over the last axis
 * norm_ops.softmax's numpy steps on ``rows`` rows of n values: m = the row's max (NaN if it holds
 * one), e = x - m, numpy's exp, s = np.sum(e) in numpy's pairwise order (pairwise_sum), e *= 1 / s, then
 * the fp16 rounding; returns 1 when every result is finite. Rows go in blocks of ~2 K values (one
 * pass each step, in L1), blocks over the threads. */
static float row_max(const float *a, long n) {  /* NaN when the row holds one (numpy's max) */
    float m = a[0];
    int nan = 0;
    long i = 0;
    if (n >= 8) {                               /* the sign of a zero max does not matter: x - (+-0) */
        __m256 v = _mm256_loadu_ps(a), un = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        for (i = 8; i + 8 <= n; i += 8) {
            const __m256 u = _mm256_loadu_ps(a + i);
            un = _mm256_or_ps(un, _mm256_cmp_ps(u, u, _CMP_UNORD_Q));
            v = _mm256_max_ps(v, u);
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        m = _mm_cvtss_f32(h);
        nan = _mm256_movemask_ps(un) != 0;
    }
    for (; i < n; i++) {
        nan |= a[i] != a[i];
        m = a[i] > m ? a[i] : m;
    }
    return nan ? __builtin_nanf("") : m;
}

typedef struct { const float *x; float *out; long rows, n, chunk; volatile int bad; } smjob;

static void sm_rows(smjob *j, long r0, long r1) {
    const long n = j->n;
    float *o = j->out + r0 * n;
    __m256i bad = _mm256_setzero_si256();
    for (long r = r0; r < r1; r++, o += n) {
        const float *x = j->x + r * n;
        const float m = row_max(x, n);
        for (long i = 0; i < n; i++)
            o[i] = x[i] - m;
    }
    o = j->out + r0 * n;
    const long total = (r1 - r0) * n;
    long i = 0;
#ifdef MRVL_EXP16
    for (; i + 16 <= total; i += 16)        /* exp_np16: exp_np's operations on 16 lanes */
        _mm512_storeu_ps(o + i, exp_np16(_mm512_loadu_ps(o + i)));
#endif
    for (; i + 8 <= total; i += 8)
        _mm256_storeu_ps(o + i, exp_np(_mm256_loadu_ps(o + i)));
    if (i < total) {
        float t[8] = {0};
        memcpy(t, o + i, (size_t)(total - i) * sizeof(float));
        _mm256_storeu_ps(t, exp_np(_mm256_loadu_ps(t)));
        memcpy(o + i, t, (size_t)(total - i) * sizeof(float));
    }
    for (long r = r0; r < r1; r++, o += n) {
        const __m256 inv = _mm256_set1_ps(1.0f / pairwise_sum(o, n, 0));
        long k = 0;
        for (; k + 8 <= n; k += 8) {
            const __m256 v = rne8(mul_first(_mm256_loadu_ps(o + k), inv));
            bad = _mm256_or_si256(bad, nonfinite8(v));
            _mm256_storeu_ps(o + k, v);
        }
        if (k < n) {
            float t[8] = {0};
            memcpy(t, o + k, (size_t)(n - k) * sizeof(float));
            const __m256 v = rne8(mul_first(_mm256_loadu_ps(t), inv));
            if (_mm256_movemask_ps(_mm256_castsi256_ps(nonfinite8(v))) & ((1 << (n - k)) - 1))
                bad = _mm256_set1_epi32(-1);
            _mm256_storeu_ps(t, v);
            memcpy(o + k, t, (size_t)(n - k) * sizeof(float));
        }
    }
    if (!_mm256_testz_si256(bad, bad))
        j->bad = 1;
}

static void sm_part(void *arg, long p) {
    smjob *j = arg;
    const long end = (p + 1) * j->chunk < j->rows ? (p + 1) * j->chunk : j->rows;
    const long block = j->n >= 2048 ? 1 : 2048 / j->n;
    for (long r = p * j->chunk; r < end; r += block)
        sm_rows(j, r, r + block < end ? r + block : end);
}

/* out = fp16(softmax(x)) over the last axis of [rows, n] (x and out apart or the same); 1 when all
 * is finite. Called by _native_conv.c's run_steps (record kind 13, static_records.py). */
int act_softmax(const float *x, float *out, long rows, long n, int nthreads) {
    smjob j = {x, out, rows, n, rows, 0};
    if (rows <= 0 || n <= 0)
        return 1;
    const long want = (1L << 14) / n + 1;       /* ~64 KB a part */
    long parts = 1;
    if (runner && nthreads > 1 && rows > want) {
        j.chunk = want;
        parts = (rows + want - 1) / want;
    }
    if (parts > 1)
        runner(sm_part, &j, parts, nthreads);
    else
        sm_part(&j, 0);
    return !j.bad;
}
