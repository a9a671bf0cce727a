/* int8 Conv2D / FC / depthwise kernels of the simulator (sim/int8_native.py; docs/simulator.md
 * "int8 layers"). Bit-exact with sim/int8.py's numpy path:
 *
 *   q_x = sat(rne(x / s_x) + z_x)                       (x / s_x in fp32; NaN -> the type's minimum)
 *   acc = sum (q_x - z_x) * q_w + bias                  (exact int32)
 *   r   = clamp(rne(fp32(acc) * m[o]), lo - z_y, hi - z_y)
 *   y   = r * s_y                                       (fp32: the dequantized output)
 *
 * GEMM (groups, 1x1 .. 7x7, strides, dilation, FC): the input is quantized once to unsigned
 * bytes u = q_x + off (off = 128 for int8 activations, 0 for uint8; padding holds z_x + off),
 * gathered into an im2col matrix [rows][K4] (K rounded up to 4, the tail zero), and multiplied
 * by the packed int8 weights with AVX512-VNNI vpdpbusd (u8 x s8 -> s32, four products per lane,
 * no intermediate saturation; on AVX2 hosts _native_int8_avx2.h emulates it, and d->sat selects
 * MLAS's U8S8 arithmetic instead: adjacent pairs saturated to int16, sim/mlas_u8s8.py). sum(u * w) = sum((q_x - z_x) * w) + (z_x + off) * colsum(w), so
 * the caller's corr[o] = bias[o] - (z_x + off) * colsum(w[o]) (mod 2^32) restores the exact
 * sum modulo 2^32, the int32 accumulator's value (sim/int8.py wrap_int32: intermediate
 * wrap-around cancels, a total beyond the int32 range wraps as in onnxruntime). Weights: per group, per block of up to 64 output channels (nv vectors of 16):
 * [K4 / 4][nv * 16][4] bytes. Register tile: MR = 6 rows x nv * 16 channels (24 accumulators).
 *
 * Depthwise: the same bytes u, four horizontal taps of a channel side by side, vpdpbusd
 * against [kh][ceil(kw / 4)][channels][4] weights (see i8_depthwise); + corr as above.
 *
 * Parallel parts run on the fp16 kernels' worker pool (_native_conv.c mrvl_run_parts, handed in
 * by i8_set_runner); without it they run on the calling thread. */
#ifndef __AVX512F__
#include "_native_avx2.h"        /* AVX2 hosts: the 512-bit operations on pairs of 256-bit halves */
#include "_native_int8_avx2.h"   /* ... their integer ones, and vpdpbusd's emulations */
#endif
#include "_native_common.h"
#include <math.h>                /* rintf (i8_softmax) */

void i8_set_runner(void *fn) { runner = (runner_fn)fn; }

#define MR 6

typedef struct {
    long n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, groups, ig, og, o;
    long k, k4, cb;                        /* K = kh * kw * ig, K rounded to 4, 64-channel blocks per group */
    long in_zp, in_lo, in_hi, in_off, in_exact;  /* in_exact: always divide (1 / s not finite) */
    long in_codes, out_codes, out_zp, out_off;   /* codes: the tensor holds bytes q + off, not floats */
    long requant, out_lo, out_hi, out_exact;     /* pools: Q_out(DQ_in(q)) unless the quantizations match */
    float in_scale, out_scale, lo_r, hi_r, in_rcp, out_rcp;
    const void *wpack;                     /* GEMM: int8 blocks; depthwise: float [kh * kw][cpad] */
    const int32_t *corr;                   /* per group [cb * 64] (depthwise: the bias, [cpad]) */
    const float *mult;                     /* per group [cb * 64] (depthwise: [cpad]) */
    const float *add_prm;                  /* a Sum2D fused into the conv (i8_add's prm), or 0 */
    const void *add_other;                 /* its other operand, element for element as the output */
    long add_slot;                         /* the conv's operand of the Sum2D: 0 (a) or 1 (b) */
    long small_mult;                       /* every |m[o]| < 0.5: |acc m| < 2^30, rounds to an int32 (never 0x80000000) */
    long sat;                              /* GEMM: pair sums saturated to int16 as MLAS's U8S8 AVX2 kernel (vpmaddubsw) */
    const int32_t *wzp;                    /* GEMM: the weights' zero points z_w, per group [cb * 64], or 0 */
    long wsplit;                           /* depthwise: q_w - z_w packed as wsplit int8 terms (kh weight rows each) */
} i8desc;

/* the low bytes of 16 int32 lanes (saturated to [0, 255]) stored at o under mask m: converted in
 * a register first (a narrowing store straight to memory, vpmovusdb m128, is slow on Zen 4) */
static inline void store_u8(uint8_t *o, __mmask16 m, __m512i v) {
    __m128i b = _mm512_cvtusepi32_epi8(v);
    if (m == (__mmask16)0xffff)
        _mm_storeu_si128((__m128i *)o, b);
    else
        _mm_mask_storeu_epi8(o, m, b);
}

/* ------------------------------------------------------------------ quantize */
/* sat(rne(x / s) + z) as float: max(NaN, lo) = lo like MLAS; +-inf saturate */
static inline __m512 quant_f(__m512 x, float scale, float rcp, long exact, long zp, long lo, long hi) {
    __m512 r = _mm512_add_ps(rne_div(x, _mm512_set1_ps(scale), _mm512_set1_ps(rcp), exact), _mm512_set1_ps((float)zp));
    r = _mm512_max_ps(r, _mm512_set1_ps((float)lo));          /* NaN in the first operand: lo */
    return _mm512_min_ps(r, _mm512_set1_ps((float)hi));
}

static inline __m512 quant_r(__m512 x, const i8desc *d) {
    return quant_f(x, d->in_scale, d->in_rcp, d->in_exact, d->in_zp, d->in_lo, d->in_hi);
}

typedef struct { const i8desc *d; const float *x; uint8_t *u; long total, step; } qjob;

static void quant_u8_part(void *arg, long p) {
    qjob *j = arg;
    long i0 = p * j->step, i1 = i0 + j->step < j->total ? i0 + j->step : j->total;
    __m512 off = _mm512_set1_ps((float)j->d->in_off);
    long i = i0;
    for (; i + 16 <= i1; i += 16) {
        __m512i q = _mm512_cvtps_epi32(_mm512_add_ps(quant_r(_mm512_loadu_ps(j->x + i), j->d), off));
        _mm_storeu_si128((__m128i *)(j->u + i), _mm512_cvtusepi32_epi8(q));
    }
    if (i < i1) {
        __mmask16 m = (__mmask16)((1u << (i1 - i)) - 1);
        __m512i q = _mm512_cvtps_epi32(_mm512_add_ps(quant_r(_mm512_maskz_loadu_ps(m, j->x + i), j->d), off));
        store_u8(j->u + i, m, q);
    }
}

static void quantize_u8(const i8desc *d, const float *x, uint8_t *u, long total, int nthreads) {
    long parts = total >= (1L << 16) ? 2L * nthreads : 1;
    qjob j = {d, x, u, total, ((total + parts - 1) / parts + 15) & ~15L};
    run(quant_u8_part, &j, (total + j.step - 1) / j.step, nthreads);
}

/* short copies and fills (im2col moves runs of kw * c bytes, often < 64): two overlapping
 * unmasked moves of the largest width that fits (8, 16, 32 or 64 bytes), never a byte outside
 * [dst, dst + n) nor [src, src + n). (A masked byte store of a zmm -- the earlier form -- was 25%
 * of im2col on Zen 4: MobileNetV2's stem conv, 3 channels, spent 60% of its time in im2col.) */
static inline void copy_bytes(uint8_t *dst, const uint8_t *src, long n) {
    if (n >= 64) {
        long i = 0;
        for (; i + 64 <= n; i += 64)
            _mm512_storeu_si512((void *)(dst + i), _mm512_loadu_si512((const void *)(src + i)));
        if (i < n)
            _mm512_storeu_si512((void *)(dst + n - 64), _mm512_loadu_si512((const void *)(src + n - 64)));
    } else if (n >= 32) {
        __m256i a = _mm256_loadu_si256((const __m256i *)src), b = _mm256_loadu_si256((const __m256i *)(src + n - 32));
        _mm256_storeu_si256((__m256i *)dst, a);
        _mm256_storeu_si256((__m256i *)(dst + n - 32), b);
    } else if (n >= 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)src), b = _mm_loadu_si128((const __m128i *)(src + n - 16));
        _mm_storeu_si128((__m128i *)dst, a);
        _mm_storeu_si128((__m128i *)(dst + n - 16), b);
    } else if (n >= 8) {
        uint64_t a, b;
        memcpy(&a, src, 8);
        memcpy(&b, src + n - 8, 8);
        memcpy(dst, &a, 8);
        memcpy(dst + n - 8, &b, 8);
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, src, 4);
        memcpy(&b, src + n - 4, 4);
        memcpy(dst, &a, 4);
        memcpy(dst + n - 4, &b, 4);
    } else
        for (long i = 0; i < n; i++)
            dst[i] = src[i];
}

static inline void fill_bytes(uint8_t *dst, uint8_t v, long n) {
    if (n >= 64) {
        __m512i b = _mm512_set1_epi8((char)v);
        long i = 0;
        for (; i + 64 <= n; i += 64)
            _mm512_storeu_si512((void *)(dst + i), b);
        if (i < n)
            _mm512_storeu_si512((void *)(dst + n - 64), b);
    } else if (n >= 16) {
        __m128i b = _mm_set1_epi8((char)v);
        for (long i = 0; i + 16 <= n; i += 16)
            _mm_storeu_si128((__m128i *)(dst + i), b);
        _mm_storeu_si128((__m128i *)(dst + n - 16), b);
    } else if (n >= 8) {
        uint64_t b = 0x0101010101010101ULL * v;
        memcpy(dst, &b, 8);
        memcpy(dst + n - 8, &b, 8);
    } else
        for (long i = 0; i < n; i++)
            dst[i] = v;
}

/* ------------------------------------------------------------------ im2col */
/* rows [r0, r1) of the im2col matrix (input channels from c0) into dst (row r at dst + (r - r0) k4),
 * by stretches of one output row (b, oy) and one kernel row ky at a time: the run length and the
 * source stride stay fixed in the inner loop over ox */
static void im2col_rows(const i8desc *d, const uint8_t *u0, long c0, long r0, long r1, uint8_t *dst) {
    /* the geometry in locals: the byte stores below may alias any memory, the compiler would reload d's fields */
    const long h = d->h, w = d->w, c = d->c, oh = d->oh, ow = d->ow, kh = d->kh, kw = d->kw, sh = d->sh,
               sw = d->sw, dh = d->dh, dw = d->dw, pt = d->pt, pl = d->pl, ig = d->ig, k = d->k, k4 = d->k4;
    const uint8_t *u = u0 + c0, *in_end = u0 + d->n * h * w * c;
    const uint8_t pad = (uint8_t)(d->in_zp + d->in_off);
    const long run = kw * ig;                              /* bytes of one kernel row */
    /* output columns whose kernel row lies inside the input: [xa, xb) */
    long xa = pl > 0 ? (pl + sw - 1) / sw : 0, xb = ow;
    while (xb > xa && (xb - 1) * sw - pl + (kw - 1) * dw >= w)
        xb--;
    const int one_run = dw == 1 && ig == c;                /* an inside kernel row is one contiguous run */
    for (long r = r0; r < r1;) {
        const long b = r / (oh * ow), oy = r / ow % oh, o0 = r % ow;
        const long o1 = ow - o0 < r1 - r ? ow : o0 + (r1 - r);   /* this stretch: columns [o0, o1) */
        uint8_t *rowp = dst + (r - r0) * k4;               /* column o0 of this output row */
        for (long ky = 0; ky < kh; ky++) {
            const long iy = oy * sh - pt + ky * dh, at = ky * run;
            if (iy < 0 || iy >= h) {
                for (long ox = o0; ox < o1; ox++)
                    fill_bytes(rowp + (ox - o0) * k4 + at, pad, run);
                continue;
            }
            const uint8_t *src = u + (b * h + iy) * w * c;
            long lo = xa > o0 ? xa : o0, hi = xb < o1 ? xb : o1;
            if (!one_run || hi < lo)
                lo = hi = o0;                              /* every column the general way */
            for (long ox = o0; ox < o1; ox++) {
                if (ox == lo) {                            /* the inside columns: one run each */
                    if (run < 16 && at + 16 <= k4) {
                        /* a short run not at the row's end: one 16-byte move, the excess landing on
                         * this row's next kernel rows or K tail, written after it; read only
                         * inside the input (in_end) */
                        for (; ox < hi; ox++) {
                            const uint8_t *sp = src + (ox * sw - pl) * c;
                            if (sp + 16 <= in_end)
                                _mm_storeu_si128((__m128i *)(rowp + (ox - o0) * k4 + at), _mm_loadu_si128((const __m128i *)sp));
                            else
                                copy_bytes(rowp + (ox - o0) * k4 + at, sp, run);
                        }
                    }
                    for (; ox < hi; ox++)
                        copy_bytes(rowp + (ox - o0) * k4 + at, src + (ox * sw - pl) * c, run);
                    if (ox >= o1)
                        break;
                }
                uint8_t *dst = rowp + (ox - o0) * k4 + at;
                for (long kx = 0; kx < kw; kx++, dst += ig) {
                    const long ix = ox * sw - pl + kx * dw;
                    if (ix < 0 || ix >= w)
                        fill_bytes(dst, pad, ig);
                    else
                        copy_bytes(dst, src + ix * c, ig);
                }
            }
        }
        if (k4 > k)
            for (long ox = o0; ox < o1; ox++)
                for (long i = k; i < k4; i++)
                    rowp[(ox - o0) * k4 + i] = 0;
        r += o1 - o0;
    }
}

/* ------------------------------------------------------------------ GEMM tile + epilogue */

/* the constants of one operand, hoisted out of the element loop */
typedef struct {
    int codes;
    long exact;
    __m512 s, rcp, z, lo, hi, off;
    __m512i offz;                         /* off + z as int32: q - z = u - (off + z) */
    float scale, rcpf;
} qconst;

static inline qconst qconst_of(const float *p) {
    qconst c;
    c.codes = p[7] != 0.0f;
    c.exact = (long)p[2];
    c.scale = p[0];
    c.rcpf = p[1];
    c.s = _mm512_set1_ps(p[0]);
    c.rcp = _mm512_set1_ps(p[1]);
    c.z = _mm512_set1_ps(p[3]);
    c.lo = _mm512_set1_ps(p[4]);
    c.hi = _mm512_set1_ps(p[5]);
    c.off = _mm512_set1_ps(p[6]);
    c.offz = _mm512_set1_epi32((int)(p[6] + p[3]));
    return c;
}

/* sat(rne(x / s) + z) with hoisted constants (quant_f) */
static inline __m512 quant_c(__m512 x, const qconst *c) {
    __m512 r = rne_div(x, c->s, c->rcp, c->exact);
    return _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(r, c->z), c->lo), c->hi);
}

/* s (q - z) of one input: from the bytes u = q + off (codes) or by quantizing the float */
static inline __m512 add_in(const void *x, long i, __mmask16 m, const qconst *c) {
    __m512 qz;
    if (c->codes)
        qz = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, (const uint8_t *)x + i)),
                                                 c->offz));
    else
        qz = _mm512_sub_ps(quant_c(_mm512_maskz_loadu_ps(m, (const float *)x + i), c), c->z);
    return _mm512_mul_ps(c->s, qz);
}

/* the code q of one input (not minus z): from the bytes u = q + off (codes) or by quantizing the float */
static inline __m512 add_code(const void *x, long i, __mmask16 m, const qconst *c) {
    if (c->codes)
        return _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, (const uint8_t *)x + i))),
                             c->off);
    return quant_c(_mm512_maskz_loadu_ps(m, (const float *)x + i), c);
}

/* MLAS QLinearAdd (int8_eltwise.py) of an int8 Sum2D's requant "qlinear" / "qlinear_u8": prm[24..] =
 * [mode (1: qlinear, 0: the float form), r_a, r_b, F, shift] with F = z_c - fma(r_a, z_a, r_b z_b) of
 * the shifted zero points; v = fma(q_a + shift, r_a, fma(q_b + shift, r_b, F)), rne by cvtps2dq
 * (INT_MIN past int32: the minimum), then shift subtracted and the clamp [lo, hi] of c */
typedef struct { int on; __m512 ra, rb, f, shift; } qladd_t;

static inline qladd_t qladd_of(const float *prm) {
    qladd_t k = {prm[24] != 0.0f, _mm512_set1_ps(prm[25]), _mm512_set1_ps(prm[26]), _mm512_set1_ps(prm[27]),
                 _mm512_set1_ps(prm[28])};
    return k;
}

static inline __m512 qladd(__m512 qa, __m512 qb, const qladd_t *k, const qconst *cc) {
    __m512 v = _mm512_fmadd_ps(_mm512_add_ps(qa, k->shift), k->ra,
                               _mm512_fmadd_ps(_mm512_add_ps(qb, k->shift), k->rb, k->f));
    __m512 q = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtps_epi32(v)), k->shift);
    return _mm512_min_ps(_mm512_max_ps(q, cc->lo), cc->hi);
}

/* a Sum2D fused into a GEMM conv: the conv's codes (never stored) plus the other operand.
 * ``fast``: MLAS QLinearAdd into codes, in folded constants: qs + shift = r + (z_self + shift), the
 * other's q + shift = u + (shift - off), and the result t = cvtps(v) clamped to [lo, hi] + shift
 * and stored as t - shift + off, in int32 (the same integers as qladd's float steps) */
typedef struct {
    qconst self, other, out; qladd_t k; int self_a, fast;
    __m512 self_zs, other_adj; __m512i tlo, thi, tadj;
} fuse_t;

static inline void fuse_init(fuse_t *fz, const i8desc *d) {
    fz->self = qconst_of(d->add_prm + 8 * d->add_slot);
    fz->other = qconst_of(d->add_prm + 8 * (1 - d->add_slot));
    fz->out = qconst_of(d->add_prm + 16);
    fz->k = qladd_of(d->add_prm);
    fz->self_a = d->add_slot == 0;
    const float *p = d->add_prm, *po = p + 8 * (1 - d->add_slot), shift = p[28];
    fz->fast = fz->k.on && fz->out.codes && fz->other.codes;
    fz->self_zs = _mm512_set1_ps(p[8 * d->add_slot + 3] + shift);
    fz->other_adj = _mm512_set1_ps(shift - po[6]);
    fz->tlo = _mm512_set1_epi32((int)(p[20] + shift));
    fz->thi = _mm512_set1_epi32((int)(p[21] + shift));
    fz->tadj = _mm512_set1_epi32((int)(p[22] - shift));
}

#ifdef MRVL_AVX2     /* a call here passed r on the stack: half of a fused conv's time */
static inline __attribute__((always_inline)) void
#else
static inline void
#endif
fused_store(__m512 r, const fuse_t *fz, const void *other, long i, void *out, __mmask16 m) {
    /* r = q_conv - z_conv = q_a - z_a (the Sum2D reads the conv's codes with their quantization) */
    if (fz->fast) {
        const uint8_t *po = (const uint8_t *)other + i;
        __m512i uo = m == (__mmask16)0xffff ? _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)po))
                                            : _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, po));
        __m512 qs = _mm512_add_ps(r, fz->self_zs), qo = _mm512_add_ps(_mm512_cvtepi32_ps(uo), fz->other_adj);
        __m512 qa = fz->self_a ? qs : qo, qb = fz->self_a ? qo : qs;
        __m512 v = _mm512_fmadd_ps(qa, fz->k.ra, _mm512_fmadd_ps(qb, fz->k.rb, fz->k.f));
        __m512i t = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(v), fz->tlo), fz->thi);
        store_u8((uint8_t *)out + i, m, _mm512_add_epi32(t, fz->tadj));
        return;
    }
    __m512 q;
    if (fz->k.on) {
        __m512 qs = _mm512_add_ps(r, fz->self.z), qo = add_code(other, i, m, &fz->other);
        q = fz->self_a ? qladd(qs, qo, &fz->k, &fz->out) : qladd(qo, qs, &fz->k, &fz->out);
    } else {
        __m512 v = _mm512_add_ps(_mm512_mul_ps(fz->self.s, r), add_in(other, i, m, &fz->other));
        q = quant_c(v, &fz->out);
    }
    if (fz->out.codes)
        store_u8((uint8_t *)out + i, m, _mm512_cvtps_epi32(_mm512_add_ps(q, fz->out.off)));
    else
        _mm512_mask_storeu_ps((float *)out + i, m, _mm512_mul_ps(_mm512_sub_ps(q, fz->out.z), fz->out.s));
}

/* the k loop of one MR x (NV * 16) tile, accumulators named so that they stay in registers */
#define TILE_LOOP(NV)                                                                              \
    for (long k = 0; k < k4n; k++) {                                                              \
        const int8_t *bk = b + k * NV * 64;                                                       \
        __m512i b0 = _mm512_load_si512((const void *)bk), b1, b2, b3;                             \
        if (NV > 1) b1 = _mm512_load_si512((const void *)(bk + 64));                              \
        if (NV > 2) b2 = _mm512_load_si512((const void *)(bk + 128));                             \
        if (NV > 3) b3 = _mm512_load_si512((const void *)(bk + 192));                             \
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)                                                 \
    }
/* c += the four products of each dword: exact (vpdpbusd), or SAT: the adjacent pairs saturated to
 * int16 first (vpmaddubsw + vpmaddwd with ones: MLAS's U8S8 AVX2 kernel, sim/mlas_u8s8.py) */
#ifdef MRVL_AVX2
#define DP(c, bv) c = SAT ? mrvl_dpbusd_sat(c, av, bv) : _mm512_dpbusd_epi32(c, av, bv)
#else
#define DP(c, bv) c = SAT ? _mm512_add_epi32(c, _mm512_madd_epi16(_mm512_maddubs_epi16(av, bv), _mm512_set1_epi16(1))) \
                      : _mm512_dpbusd_epi32(c, av, bv)
#endif
#define ROW(r)                                                                                     \
    if (r < ROWS) {                                                                                \
        __m512i av = _mm512_set1_epi32(*(const int32_t *)(a + r * lda + 4 * k));                  \
        DP(c##r##0, b0);                                                                           \
        if (NV > 1) DP(c##r##1, b1);                                                               \
        if (NV > 2) DP(c##r##2, b2);                                                               \
        if (NV > 3) DP(c##r##3, b3);                                                               \
    }

enum { EP_FLOAT, EP_CODES, EP_FUSED };    /* the epilogue: dequantized floats, codes, a fused Sum2D */

/* one row's 16 lanes of strip v from accumulator ACC (int32): requantized, then stored as the EP says
 * (``lo``, ``hi``, ``s``, ``zo``, ``mv`` and the lane mask ``m`` in scope) */
#define EPILOGUE(ACC, r, v)                                                                                  \
    {                                                                                                        \
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(ACC), mv);                                               \
        if (EP == EP_FUSED) {    /* ``out`` is the Sum2D's output; ``at`` the tile's first element */        \
            f = _mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);                     \
            fused_store(_mm512_min_ps(_mm512_max_ps(f, lo), hi), fz, d->add_other, at + r * ldo + v * 16, out, m); \
        } else if (EP == EP_CODES) {    /* clamp, then round (cvtps: RNE): the same, the bounds being integers */ \
            f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);                                                     \
            store_u8((uint8_t *)out + r * ldo + v * 16, m, _mm512_add_epi32(_mm512_cvtps_epi32(f), zo));     \
        } else {                                                                                             \
            f = _mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);                     \
            f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);                                                     \
            _mm512_mask_storeu_ps(out + r * ldo + v * 16, m, _mm512_mul_ps(f, s));                           \
        }                                                                                                    \
    }

static inline __attribute__((always_inline)) void
tile(const int NV, const int EP, const int ROWS, const int SAT, long k4n, const uint8_t *a, long lda, const int8_t *b, int rows,
     const int32_t *corr, const float *mult, const i8desc *d, float *out, long ldo, long ncols,
     const fuse_t *fz, long at, const int32_t *zw, const int32_t *rs) {
    /* the accumulators start at corr (bias and offset correction): the epilogue skips an add */
    const __m512i z0 = _mm512_loadu_si512((const void *)corr);
    const __m512i z1 = NV > 1 ? _mm512_loadu_si512((const void *)(corr + 16)) : z0;
    const __m512i z2 = NV > 2 ? _mm512_loadu_si512((const void *)(corr + 32)) : z0;
    const __m512i z3 = NV > 3 ? _mm512_loadu_si512((const void *)(corr + 48)) : z0;
    __m512i c00 = z0, c01 = z1, c02 = z2, c03 = z3, c10 = z0, c11 = z1, c12 = z2, c13 = z3, c20 = z0, c21 = z1,
            c22 = z2, c23 = z3, c30 = z0, c31 = z1, c32 = z2, c33 = z3, c40 = z0, c41 = z1, c42 = z2, c43 = z3,
            c50 = z0, c51 = z1, c52 = z2, c53 = z3;
    TILE_LOOP(NV)
    __m512i acc[MR][4] = {{c00, c01, c02, c03}, {c10, c11, c12, c13}, {c20, c21, c22, c23},
                          {c30, c31, c32, c33}, {c40, c41, c42, c43}, {c50, c51, c52, c53}};
    if (zw) {                 /* weights with zero points: acc -= z_w[o] * (the row's byte sum), mod 2^32 */
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            if (r >= rows)
                break;
            const __m512i sr = _mm512_set1_epi32(rs[r]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[r][v] = _mm512_sub_epi32(acc[r][v], _mm512_mullo_epi32(_mm512_loadu_si512((const void *)(zw + 16 * v)), sr));
        }
    }
    __m512 lo = _mm512_set1_ps(d->lo_r), hi = _mm512_set1_ps(d->hi_r), s = _mm512_set1_ps(d->out_scale);
    __m512i zo = _mm512_set1_epi32((int)(d->out_zp + d->out_off));
    if (EP == EP_CODES && NV == 4 && ncols == 64) {
        /* a row's 64 codes in one store: int32 -> int16 -> bytes by two packs (+ z + off in int16;
         * the clamped values fit, no saturation), then the lanes back in order */
        const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        const __m512i zo16 = _mm512_set1_epi16((short)(d->out_zp + d->out_off));
        const __m512 m0 = _mm512_loadu_ps(mult), m1 = _mm512_loadu_ps(mult + 16), m2 = _mm512_loadu_ps(mult + 32),
                     m3 = _mm512_loadu_ps(mult + 48);
        if (d->small_mult) {
            /* round first, then clamp in bytes: the saturating packs and the byte clamp to
             * [lo_r, hi_r] + z + off (inside [0, 255]) compose to the clamp of the rounded value */
            const __m512i blo = _mm512_set1_epi8((char)(d->lo_r + d->out_zp + d->out_off));
            const __m512i bhi = _mm512_set1_epi8((char)(d->hi_r + d->out_zp + d->out_off));
#pragma GCC unroll 6
            for (int r = 0; r < MR; r++) {
                if (r >= rows)
                    break;
#define REQ(v, mv) _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[r][v]), mv))
                __m512i p01 = _mm512_adds_epi16(_mm512_packs_epi32(REQ(0, m0), REQ(1, m1)), zo16);
                __m512i p23 = _mm512_adds_epi16(_mm512_packs_epi32(REQ(2, m2), REQ(3, m3)), zo16);
#undef REQ
                __m512i u8 = _mm512_min_epu8(_mm512_max_epu8(_mm512_packus_epi16(p01, p23), blo), bhi);
                _mm512_storeu_si512((void *)((uint8_t *)out + r * ldo), _mm512_permutexvar_epi32(order, u8));
            }
            return;
        }
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            if (r >= rows)
                break;
#define REQ(v, mv) _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[r][v]), mv), lo), hi))
            __m512i p01 = _mm512_adds_epi16(_mm512_packs_epi32(REQ(0, m0), REQ(1, m1)), zo16);
            __m512i p23 = _mm512_adds_epi16(_mm512_packs_epi32(REQ(2, m2), REQ(3, m3)), zo16);
#undef REQ
            _mm512_storeu_si512((void *)((uint8_t *)out + r * ldo),
                                _mm512_permutexvar_epi32(order, _mm512_packus_epi16(p01, p23)));
        }
        return;
    }
    /* both loops fully unrolled (constant trip counts, rows past ``rows`` skipped): the
     * accumulators are read from registers, not spilled to the stack and reloaded */
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        __m512 mv = _mm512_loadu_ps(mult + v * 16);
        long left = ncols - v * 16;
        __mmask16 m = lanes(left);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            if (r >= rows)
                break;
            EPILOGUE(acc[r][v], r, v)
        }
    }
}

#ifdef MRVL_AVX2
/* AVX2 (16 ymm registers), the tiles of a conv with its Sum2D fused (EP_FUSED): the tile above holds
 * 24 accumulators of two ymm each (spilled in its k loop) and called fused_store per 16 lanes. Here
 * each 8-channel half of a 16-channel strip runs its own k loop over the tile's rows (their bytes
 * stay in L1) with 6 one-ymm accumulators, then the strip's epilogue with fused_store inlined.
 * Exact integer sums in another order: the same int32 values, bit for bit. The other epilogues
 * keep ``tile``: with these k loops their convs were slower (docs/simulator.md "int8 kernels"). */
static inline __attribute__((always_inline)) void
half_sums(const int ROWS, const int SAT, long k4n, const uint8_t *a, long lda, const int8_t *bh, long bstride,
          __m256i z, int32_t (*acc)[16]) {
    const __m256i one = _mm256_set1_epi16(1);
    __m256i c0 = z, c1 = z, c2 = z, c3 = z, c4 = z, c5 = z;
    for (long k = 0; k < k4n; k++) {
        const __m256i b = _mm256_loadu_si256((const __m256i *)(bh + k * bstride));
        __m256i be = b, bo = b;
        if (!SAT) {                      /* vpdpbusd exact: the s8 bytes widened, even and odd apart */
            be = _mm256_srai_epi16(_mm256_slli_epi16(b, 8), 8);
            bo = _mm256_srai_epi16(b, 8);
        }
#define ROW8(r)                                                                                          \
        if (r < ROWS) {                                                                                  \
            const __m256i av = _mm256_set1_epi32(*(const int32_t *)(a + r * lda + 4 * k));              \
            c##r = SAT ? _mm256_add_epi32(c##r, _mm256_madd_epi16(_mm256_maddubs_epi16(av, b), one))     \
                       : mrvl_dp8(c##r, mrvl_dpa_of(av), be, bo);                                        \
        }
        ROW8(0) ROW8(1) ROW8(2) ROW8(3) ROW8(4) ROW8(5)
#undef ROW8
    }
    _mm256_storeu_si256((__m256i *)acc[0], c0);
    _mm256_storeu_si256((__m256i *)acc[1], c1);
    _mm256_storeu_si256((__m256i *)acc[2], c2);
    _mm256_storeu_si256((__m256i *)acc[3], c3);
    _mm256_storeu_si256((__m256i *)acc[4], c4);
    _mm256_storeu_si256((__m256i *)acc[5], c5);
}
/* its four forms as functions of their own: inlined into the tile, the k loop shared the registers
 * with the tile's epilogue and spilled an accumulator */
#define HALF_SUMS(NAME, ROWS, SAT)                                                                        \
    static __attribute__((noinline)) void NAME(long k4n, const uint8_t *a, long lda, const int8_t *bh,    \
                                               long bstride, const int32_t *z, int32_t (*acc)[16]) {      \
        half_sums(ROWS, SAT, k4n, a, lda, bh, bstride, _mm256_loadu_si256((const __m256i *)z), acc);     \
    }
HALF_SUMS(half_sums_6s, MR, 1)
HALF_SUMS(half_sums_1s, 1, 1)
HALF_SUMS(half_sums_6x, MR, 0)
HALF_SUMS(half_sums_1x, 1, 0)
#undef HALF_SUMS

static __attribute__((noipa)) void     /* one copy (the fused epilogue only): the build stays quick */
tile_strips(const int NV, const int EP_, const int ROWS, const int SAT, long k4n, const uint8_t *a, long lda,
            const int8_t *b, int rows, const int32_t *corr, const float *mult, const i8desc *d, float *out,
            long ldo, long ncols, const fuse_t *fz, long at, const int32_t *zw, const int32_t *rs) {
    const int EP = EP_FUSED;
    (void)EP_;
    for (int v = 0; v < NV; v++) {
        int32_t sums[MR][16] __attribute__((aligned(64)));   /* in memory: the first half's sums do not
                                                                  * take registers from the second's k loop */
        void (*const sums_of)(long, const uint8_t *, long, const int8_t *, long, const int32_t *, int32_t (*)[16]) =
            SAT ? (ROWS == 1 ? half_sums_1s : half_sums_6s) : (ROWS == 1 ? half_sums_1x : half_sums_6x);
        sums_of(k4n, a, lda, b + v * 64, NV * 64, corr + 16 * v, sums);
        sums_of(k4n, a, lda, b + v * 64 + 32, NV * 64, corr + 16 * v + 8, (int32_t (*)[16])(&sums[0][8]));
        if (zw)               /* as tile's: - z_w[o] * the row's byte sum, mod 2^32 */
            for (int r = 0; r < rows; r++)
                for (int l = 0; l < 16; l++)
                    sums[r][l] = (int32_t)((uint32_t)sums[r][l] - (uint32_t)zw[16 * v + l] * (uint32_t)rs[r]);
        /* the epilogue's constants here, not held in registers through the k loops */
        const __m512 lo = _mm512_set1_ps(d->lo_r), hi = _mm512_set1_ps(d->hi_r), s = _mm512_set1_ps(d->out_scale);
        const __m512i zo = _mm512_set1_epi32((int)(d->out_zp + d->out_off));
        const __m512 mv = _mm512_loadu_ps(mult + v * 16);
        const __mmask16 m = lanes(ncols - v * 16);
        for (int r = 0; r < rows; r++)
            EPILOGUE(_mm512_loadu_si512((const void *)sums[r]), r, v)
    }
}
#define TILE(EP) (EP == EP_FUSED ? tile_strips : tile)   /* the other epilogues: the AVX-512 tile was faster */
#else
#define TILE(EP) tile
#endif
#undef ROW
#undef DP

/* ROWS: the rows the k loop computes -- 6, or 1 for a last panel of one row (a 7x7 map: 49 rows,
 * 8 panels and one row; the full tile would compute 5 rows for nothing) */
#define TILE_EP(EP, ROWS, SAT)                                                                            \
    switch (nv) {                                                                                         \
    case 4: TILE(EP)(4, EP, ROWS, SAT, k4n, a, lda, b, rows, corr, mult, d, out, ldo, ncols, fz, at, zw, rs); break;  \
    case 3: TILE(EP)(3, EP, ROWS, SAT, k4n, a, lda, b, rows, corr, mult, d, out, ldo, ncols, fz, at, zw, rs); break;  \
    case 2: TILE(EP)(2, EP, ROWS, SAT, k4n, a, lda, b, rows, corr, mult, d, out, ldo, ncols, fz, at, zw, rs); break;  \
    default: TILE(EP)(1, EP, ROWS, SAT, k4n, a, lda, b, rows, corr, mult, d, out, ldo, ncols, fz, at, zw, rs); break; \
    }
#define TILE_ROWS(EP)                                                                                     \
    if (d->sat) {                                                                                         \
        if (rows == 1)                                                                                    \
            TILE_EP(EP, 1, 1)                                                                             \
        else                                                                                              \
            TILE_EP(EP, MR, 1)                                                                            \
    } else if (rows == 1)                                                                                 \
        TILE_EP(EP, 1, 0)                                                                                 \
    else                                                                                                  \
        TILE_EP(EP, MR, 0)

static void tile_nv(int nv, long k4n, const uint8_t *a, long lda, const int8_t *b, int rows,
                    const int32_t *corr, const float *mult, const i8desc *d, float *out, long ldo, long ncols,
                    const fuse_t *fz, long at, const int32_t *zw, const int32_t *rs) {
    if (fz)
        TILE_ROWS(EP_FUSED)
    else if (d->out_codes)
        TILE_ROWS(EP_CODES)
    else
        TILE_ROWS(EP_FLOAT)
}
#undef TILE_ROWS
#undef TILE_EP

/* a thread's im2col panels (the caller's scratch holds the quantized input) */
static __thread void *panel_buf = 0;
static __thread size_t panel_cap = 0;

static uint8_t *panel_scratch(size_t bytes) {
    return grow_buffer(&panel_buf, &panel_cap, bytes);
}

/* a thread's byte sums of its panels' rows (weights with zero points) */
static __thread void *rsum_buf = 0;
static __thread size_t rsum_cap = 0;

/* the sum of n bytes (mod 2^32) */
static inline int32_t byte_sum(const uint8_t *p, long n) {
    __m256i acc = _mm256_setzero_si256();
    long i = 0;
    for (; i + 32 <= n; i += 32)
        acc = _mm256_add_epi64(acc, _mm256_sad_epu8(_mm256_loadu_si256((const __m256i *)(p + i)), _mm256_setzero_si256()));
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t, acc);
    uint64_t sum = t[0] + t[1] + t[2] + t[3];
    for (; i < n; i++)
        sum += p[i];
    return (int32_t)(uint32_t)sum;
}

typedef struct {
    const i8desc *d;
    const uint8_t *u;          /* the input bytes; direct: the rows [rows][k4] themselves */
    const uint8_t *tail;       /* direct: the last panel, zero-padded to MR rows, never past the input */
    float *out;
    long g, rows, panels, rparts, cparts, direct;
    int failed;
} gjob;

/* Part p: row panels [p0, p1) x 64-channel blocks [c0, c1) (sizes differing by at most one). Not
 * direct: the part first gathers its panels' im2col rows into its thread's buffer -- no separate
 * im2col pass over the whole matrix and no barrier between the two; the rows are in the L2
 * cache when the tiles read them -- then each weight block runs over all its panels. */
static void gemm_part(void *arg, long p) {
    gjob *j = arg;
    const i8desc *d = j->d;
    const long pr = p / j->cparts, pc = p % j->cparts;
    const long p0 = pr * j->panels / j->rparts, p1 = (pr + 1) * j->panels / j->rparts;
    const long c0 = pc * d->cb / j->cparts, c1 = (pc + 1) * d->cb / j->cparts;
    if (p0 >= p1 || c0 >= c1)
        return;
    const long k4 = d->k4, k4n = k4 / 4;
    const uint8_t *abase;
    if (j->direct)
        abase = j->u + p0 * MR * k4;
    else {
        uint8_t *buf = panel_scratch((size_t)((p1 - p0) * MR * k4 + 64));
        if (!buf) {
            j->failed = 1;
            return;
        }
        long r1 = p1 * MR < j->rows ? p1 * MR : j->rows;
        im2col_rows(d, j->u, j->g * d->ig, p0 * MR, r1, buf);   /* rows past the end: never stored */
        abase = buf;
    }
    const int8_t *wg = (const int8_t *)d->wpack + j->g * d->cb * k4n * 256;
    int32_t *rsum = 0;          /* weights with zero points: each row's byte sum (the K4 tail is 0) */
    if (d->wzp) {
        rsum = grow_buffer(&rsum_buf, &rsum_cap, (size_t)(p1 - p0) * MR * sizeof(int32_t));
        if (!rsum) {
            j->failed = 1;
            return;
        }
        for (long pn = p0; pn < p1; pn++) {
            const uint8_t *a = j->direct && pn == j->panels - 1 ? j->tail : abase + (pn - p0) * MR * k4;
            const long rows = j->rows - pn * MR < MR ? j->rows - pn * MR : MR;
            for (long i = 0; i < rows; i++)
                rsum[(pn - p0) * MR + i] = byte_sum(a + i * k4, k4);
        }
    }
    fuse_t fuse, *fz = 0;
    if (d->add_prm) {
        fuse_init(&fuse, d);
        fz = &fuse;
    }
    for (long cb = c0; cb < c1; cb++) {
        long col = cb * 64, ncols = d->og - col < 64 ? d->og - col : 64;
        int nv = (int)((ncols + 15) / 16);
        const int8_t *b = wg + cb * k4n * 256;
        const int32_t *corr = d->corr + j->g * d->cb * 64 + col;
        const float *mult = d->mult + j->g * d->cb * 64 + col;
        const int32_t *zw = d->wzp ? d->wzp + j->g * d->cb * 64 + col : 0;
        for (long pn = p0; pn < p1; pn++) {
            long r = pn * MR;
            int rows = j->rows - r < MR ? (int)(j->rows - r) : MR;
            const uint8_t *a = j->direct && pn == j->panels - 1 ? j->tail : abase + (pn - p0) * MR * k4;
            long at = r * d->o + j->g * d->og + col;       /* element index of the tile's first output */
            const int32_t *rs = rsum ? rsum + (pn - p0) * MR : 0;
            if (fz) {
                tile_nv(nv, k4n, a, k4, b, rows, corr, mult, d, j->out, d->o, ncols, fz, at, zw, rs);
                continue;
            }
            float *o = d->out_codes ? (float *)((uint8_t *)j->out + at) : j->out + at;
            tile_nv(nv, k4n, a, k4, b, rows, corr, mult, d, o, d->o, ncols, 0, 0, zw, rs);
        }
    }
}

#define PANEL_BYTES (192L << 10)     /* a part's im2col rows: well inside a 1 MB L2 */

/* Returns 1 (done) or 0 (out of memory). */
int i8_conv(const i8desc *d, const float *x, float *out, int nthreads) {
    long rows = d->n * d->oh * d->ow, panels = (rows + MR - 1) / MR;
    long in_total = d->n * d->h * d->w * d->c;
    int direct = d->kh == 1 && d->kw == 1 && d->sh == 1 && d->sw == 1 && d->pt == 0 && d->pl == 0 &&
                 d->h == d->oh && d->w == d->ow && d->groups == 1 && d->k4 == d->c;
    size_t ubytes = d->in_codes ? 0 : ((size_t)in_total + 63) & ~(size_t)63;
    size_t tbytes = direct ? ((size_t)MR * d->k4 + 63) & ~(size_t)63 : 0;
    uint8_t *buf = get_scratch(ubytes + tbytes + 64);
    if (!buf)
        return 0;
    const uint8_t *u = d->in_codes ? (const uint8_t *)x : buf;
    uint8_t *tail = buf + ubytes;
    if (!d->in_codes)
        quantize_u8(d, x, buf, in_total, nthreads);
    if (direct) {                        /* the last panel's rows past the end read a zero-padded copy */
        long last = (panels - 1) * MR;
        memset(tail, 0, (size_t)MR * d->k4);
        memcpy(tail, u + last * d->k4, (size_t)(rows - last) * d->k4);
    }
    long work = rows * d->k * d->og;                         /* MACs per group */
    int par = nthreads > 1 && work >= (1L << 18) ? nthreads : 1;
    /* parts: row panels when there are many, else output-channel blocks too; without im2col
     * rows in the cache, at least enough parts that each one's rows fit PANEL_BYTES */
    long want = par > 1 ? (work >= (1L << 22) ? 4L * par : 2L * par) : 1;
    long cparts = 1;
    while (cparts < d->cb && panels * cparts < want * 4 && cparts * 2 <= want)
        cparts *= 2;
    if (direct && panels < 8 * want)    /* few rows (14x14, 7x7 maps): split the channels, each weight read once */
        cparts = want;
    if (cparts > d->cb)
        cparts = d->cb;
    long rparts = want / cparts < 1 ? 1 : want / cparts;
    if (!direct) {
        long fit = (panels * MR * d->k4 + PANEL_BYTES - 1) / PANEL_BYTES;
        if (rparts < fit)
            rparts = fit;
    }
    if (rparts > panels)
        rparts = panels;
    for (long g = 0; g < d->groups; g++) {
        gjob gj = {d, u, tail, out, g, rows, panels, rparts, cparts, direct, 0};
        run(gemm_part, &gj, rparts * cparts, par);
        if (gj.failed)
            return 0;
    }
    return 1;
}

#include "_native_int8_dw.h"                /* the depthwise kernel */

/* ------------------------------------------------------------------ int8 Sum2D (two int8 tensors)
 * int8.Int8Add: requant "qlinear" / "qlinear_u8": MLAS QLinearAdd (qladd above); "float":
 * v = fp32(s_a (q_a - z_a)) + fp32(s_b (q_b - z_b)), q_c = clamp(rne(v / s_c) + z_c, lo, hi); then
 * y = (q_c - z_c) s_c. prm (floats): [s, 1/s, exact, z, lo, hi, off, codes] for a, b, then c (lo, hi:
 * the activation's clamp; codes: the tensor holds bytes q + off), then qladd's five. */
typedef struct { const void *a, *b; const float *prm; void *out; long n, step; } ajob;

static inline void add_v(const ajob *j, long i, __mmask16 m, const qconst *ca, const qconst *cb, const qconst *cc,
                         const qladd_t *k) {
    __m512 q;
    if (k->on)
        q = qladd(add_code(j->a, i, m, ca), add_code(j->b, i, m, cb), k, cc);
    else
        q = quant_c(_mm512_add_ps(add_in(j->a, i, m, ca), add_in(j->b, i, m, cb)), cc);
    if (cc->codes)
        store_u8((uint8_t *)j->out + i, m, _mm512_cvtps_epi32(_mm512_add_ps(q, cc->off)));
    else
        _mm512_mask_storeu_ps((float *)j->out + i, m, _mm512_mul_ps(_mm512_sub_ps(q, cc->z), cc->s));
}

/* MLAS QLinearAdd with all three tensors in codes (the static plan's form): q + shift = u + (shift -
 * off) per operand, the result clamped in int32 to [lo, hi] + shift and stored as t - shift + off
 * (the integers of qladd's float steps; fuse_init's folding for two operands) */
static void add_codes(const ajob *j, long i, long i1, const qladd_t *k) {
    const float *p = j->prm, shift = p[28];
    const __m512 adj_a = _mm512_set1_ps(shift - p[6]), adj_b = _mm512_set1_ps(shift - p[14]);
    const __m512i tlo = _mm512_set1_epi32((int)(p[20] + shift)), thi = _mm512_set1_epi32((int)(p[21] + shift));
    const __m512i tadj = _mm512_set1_epi32((int)(p[22] - shift));
    const uint8_t *a = j->a, *b = j->b;
    uint8_t *o = j->out;
    for (; i < i1; i += 16) {
        __mmask16 m = lanes(i1 - i);
        __m512i ua, ub;
        if (m == (__mmask16)0xffff) {
            ua = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(a + i)));
            ub = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b + i)));
        } else {
            ua = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, a + i));
            ub = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, b + i));
        }
        __m512 qa = _mm512_add_ps(_mm512_cvtepi32_ps(ua), adj_a), qb = _mm512_add_ps(_mm512_cvtepi32_ps(ub), adj_b);
        __m512 v = _mm512_fmadd_ps(qa, k->ra, _mm512_fmadd_ps(qb, k->rb, k->f));
        __m512i t = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(v), tlo), thi);
        store_u8(o + i, m, _mm512_add_epi32(t, tadj));
    }
}

static void add_part(void *arg, long part) {
    ajob *j = arg;
    const qconst ca = qconst_of(j->prm), cb = qconst_of(j->prm + 8), cc = qconst_of(j->prm + 16);
    const qladd_t k = qladd_of(j->prm);
    long i = part * j->step, i1 = i + j->step < j->n ? i + j->step : j->n;
    if (k.on && ca.codes && cb.codes && cc.codes) {
        add_codes(j, i, i1, &k);
        return;
    }
    for (; i + 16 <= i1; i += 16)
        add_v(j, i, (__mmask16)0xffff, &ca, &cb, &cc, &k);
    if (i < i1)
        add_v(j, i, (__mmask16)((1u << (i1 - i)) - 1), &ca, &cb, &cc, &k);
}

void i8_add(const void *a, const void *b, void *out, long n, const float *prm, int nthreads) {
    long parts = nthreads > 1 && n >= (1L << 15) ? 2L * nthreads : 1;
    ajob j = {a, b, prm, out, n, ((n + parts - 1) / parts + 15) & ~15L};
    run(add_part, &j, (n + j.step - 1) / j.step, nthreads);
}

/* the output codes q (floats) at out + at under mask m: the bytes q + off (out_codes), else the
 * dequantized values (q - z_y) s_y */
static inline void store_q(const i8desc *d, __m512 q, void *out, long at, __mmask16 m) {
    if (d->out_codes)
        store_u8((uint8_t *)out + at, m, _mm512_cvtps_epi32(_mm512_add_ps(q, _mm512_set1_ps((float)d->out_off))));
    else
        _mm512_mask_storeu_ps((float *)out + at, m, _mm512_mul_ps(_mm512_sub_ps(q, _mm512_set1_ps((float)d->out_zp)),
                                                                  _mm512_set1_ps(d->out_scale)));
}

/* the input as bytes q + off: the codes themselves, or quantized into the scratch (0: no memory) */
static const uint8_t *input_bytes(const i8desc *d, const float *x, long total, int nthreads) {
    if (d->in_codes)
        return (const uint8_t *)x;
    uint8_t *buf = get_scratch((size_t)total + 64);
    if (buf)
        quantize_u8(d, x, buf, total, nthreads);
    return buf;
}

/* ------------------------------------------------------------------ int8 max pool
 * int8.Int8Pool (Maxpool2D): the window maximum of the codes (padding never wins; bytes q + off
 * are ordered as the codes), then Q_out(DQ_in(q)) -- the code itself when both quantizations
 * match. A window without a valid tap (not produced by pool_geometry) gives the minimum. */
typedef struct { const i8desc *d; const uint8_t *u; void *out; long step, total; } pjob;

static inline void pool_emit(const i8desc *d, __m128i m8, int any, void *out, long at, __mmask16 m) {
    __m512 q = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(m8)), _mm512_set1_ps((float)d->in_off));
    if (!any)
        q = _mm512_set1_ps((float)d->out_lo);
    else if (d->requant) {
        __m512 v = _mm512_mul_ps(_mm512_sub_ps(q, _mm512_set1_ps((float)d->in_zp)), _mm512_set1_ps(d->in_scale));
        q = quant_f(v, d->out_scale, d->out_rcp, d->out_exact, d->out_zp, d->out_lo, d->out_hi);
    }
    store_q(d, q, out, at, m);
}

static void maxpool_part(void *arg, long part) {
    pjob *j = arg;
    const i8desc *d = j->d;
    const long h = d->h, w = d->w, c = d->c, oh = d->oh, ow = d->ow, kh = d->kh, kw = d->kw, sh = d->sh,
               sw = d->sw, dh = d->dh, dw = d->dw, pt = d->pt, pl = d->pl;
    /* the codes pass through (the quantizations match, bytes out): 64 channels a vector, no conversion */
    const int bytes = !d->requant && d->out_codes;
    const uint8_t *u = j->u;
    long r0 = part * j->step, r1 = r0 + j->step < j->total ? r0 + j->step : j->total;   /* rows n * oh */
    for (long r = r0; r < r1; r++) {
        long b = r / oh, oy = r % oh;
        long ky0 = 0, ky1 = kh;                             /* the kernel rows inside the input */
        while (ky0 < kh && oy * sh - pt + ky0 * dh < 0)
            ky0++;
        while (ky1 > ky0 && oy * sh - pt + (ky1 - 1) * dh >= h)
            ky1--;
        for (long ox = 0; ox < ow; ox++) {
            long at = (r * ow + ox) * c;
            long kx0 = 0, kx1 = kw;
            while (kx0 < kw && ox * sw - pl + kx0 * dw < 0)
                kx0++;
            while (kx1 > kx0 && ox * sw - pl + (kx1 - 1) * dw >= w)
                kx1--;
            const int any = ky0 < ky1 && kx0 < kx1;
            const long base = ((b * h + oy * sh - pt) * w + ox * sw - pl) * c;      /* tap (0, 0), maybe outside */
            for (long c0 = 0; c0 < c; c0 += 64) {
                const __mmask64 m = c - c0 >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (c - c0)) - 1);
                __m512i mx = _mm512_setzero_si512();
                for (long ky = ky0; ky < ky1; ky++)
                    for (long kx = kx0; kx < kx1; kx++) {
                        const uint8_t *p = u + base + (ky * dh * w + kx * dw) * c + c0;
                        mx = _mm512_max_epu8(mx, m == ~(__mmask64)0 ? _mm512_loadu_si512((const void *)p)
                                                                    : _mm512_maskz_loadu_epi8(m, p));
                    }
                if (bytes && any) {
                    if (m == ~(__mmask64)0)
                        _mm512_storeu_si512((void *)((uint8_t *)j->out + at + c0), mx);
                    else
                        _mm512_mask_storeu_epi8((uint8_t *)j->out + at + c0, m, mx);
                    continue;
                }
                uint8_t v[64];
                _mm512_storeu_si512((void *)v, mx);
                for (long k = 0; k < 64 && c0 + k < c; k += 16)
                    pool_emit(d, _mm_loadu_si128((const __m128i *)(v + k)), any, j->out, at + c0 + k, lanes(c - c0 - k));
            }
        }
    }
}

int i8_maxpool(const i8desc *d, const float *x, void *out, int nthreads) {
    long in_total = d->n * d->h * d->w * d->c;
    const uint8_t *u = input_bytes(d, x, in_total, nthreads);
    if (!u)
        return 0;
    long total = d->n * d->oh, work = total * d->ow * d->c * d->kh * d->kw;
    int par = nthreads > 1 && work >= (1L << 17) ? nthreads : 1;
    long parts = par > 1 ? 4L * par : 1;
    pjob j = {d, u, out, (total + parts - 1) / parts, total};
    run(maxpool_part, &j, (total + j.step - 1) / j.step, par);
    return 1;
}

/* int8 GlobalAvgpool2D (MLAS QLinearGlobalAveragePool): acc = sum(q) - z_x HW (int32),
 * q_y = sat(rne(fp32(acc) * m) + z_y) with m = fp32(s_x / fp32(s_y HW)) in d->mult[0]. */
int i8_global_avgpool(const i8desc *d, const float *x, void *out, int nthreads) {
    (void)nthreads;
    long hw = d->h * d->w, in_total = d->n * hw * d->c;
    const uint8_t *u = input_bytes(d, x, in_total, 1);
    if (!u)
        return 0;
    __m512 mv = _mm512_set1_ps(d->mult[0]);
    __m512i zc = _mm512_set1_epi32((int)((d->in_zp + d->in_off) * hw));
    for (long b = 0; b < d->n; b++)
        for (long c = 0; c < d->c; c += 16) {
            long left = d->c - c;
            __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
            __m512i acc = _mm512_setzero_si512();
            for (long p = 0; p < hw; p++)
                acc = _mm512_add_epi32(acc, _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, u + (b * hw + p) * d->c + c)));
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc, zc)), mv);
            f = _mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            f = _mm512_add_ps(f, _mm512_set1_ps((float)d->out_zp));
            f = _mm512_min_ps(_mm512_max_ps(f, _mm512_set1_ps((float)d->out_lo)), _mm512_set1_ps((float)d->out_hi));
            store_q(d, f, out, b * d->c + c, m);
        }
    return 1;
}

/* The dequantized value fp32(fp32(q - z) s) of pixel p of 16 channels (lanes under m; u: their first pixel) */
static inline __m512 gap_value(const uint8_t *u, long p, long cs, __mmask16 m, __m512 zc, __m512 s) {
    const __m512i q = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, u + p * cs));
    return _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(q), zc), s);
}

/* ort_reduce.sum_last of 16 channels' rows (each channel's hw values, a row of onnxruntime's [N * C,
 * HW] tensor) whose first ``head`` values precede the row's first 16-byte boundary: Eigen's packets
 * of 4, two accumulators over blocks of 8, p0 + p1, one more packet when left, (a0 + a2) + (a1 + a3),
 * then the head values and the tail in order (fewer than 4 after the head: all in order). Each lane
 * gets ort_reduce's operations in its order. */
static __m512 eigen_row_sum(const uint8_t *u, long hw, long head, long cs, __mmask16 m, __m512 zc, __m512 s) {
    const long size = hw - head, n2 = size / 8 * 8, n1 = size / 4 * 4;
    __m512 t;
    if (n1 == 0) {
        t = gap_value(u, 0, cs, m, zc, s);
        for (long k = 1; k < hw; k++)
            t = _mm512_add_ps(t, gap_value(u, k, cs, m, zc, s));
        return t;
    }
    __m512 p0[4], p1[4];
    for (int j = 0; j < 4; j++)
        p0[j] = gap_value(u, head + j, cs, m, zc, s);
    if (n1 > 4) {
        for (int j = 0; j < 4; j++)
            p1[j] = gap_value(u, head + 4 + j, cs, m, zc, s);
        for (long i = 8; i < n2; i += 8)
            for (int j = 0; j < 4; j++) {
                p0[j] = _mm512_add_ps(p0[j], gap_value(u, head + i + j, cs, m, zc, s));
                p1[j] = _mm512_add_ps(p1[j], gap_value(u, head + i + 4 + j, cs, m, zc, s));
            }
        for (int j = 0; j < 4; j++)
            p0[j] = _mm512_add_ps(p0[j], p1[j]);
        if (n1 > n2)
            for (int j = 0; j < 4; j++)
                p0[j] = _mm512_add_ps(p0[j], gap_value(u, head + n2 + j, cs, m, zc, s));
    }
    t = _mm512_add_ps(_mm512_add_ps(p0[0], p0[2]), _mm512_add_ps(p0[1], p0[3]));
    for (long k = 0; k < head; k++)
        t = _mm512_add_ps(t, gap_value(u, k, cs, m, zc, s));
    for (long k = head + n1; k < hw; k++)
        t = _mm512_add_ps(t, gap_value(u, k, cs, m, zc, s));
    return t;
}

/* int8 GlobalAvgpool2D with requant "float" (onnxruntime's fp32 ReduceMean between DQ and Q):
 * v = fp32(fp32(q - z_x) * s_x) summed per channel in fp32, mean = fp32(sum / HW), times
 * d->mult[0] (Quark's Mul(c) before the Q; 1 when absent: exact), then QuantizeLinear to the output.
 * d->mult[1] 0: the sum in pixel order (its strided RK path, numpy's sum over axes (1, 2)); 1: Eigen's
 * row sums of its KR path (int8.py mean_sum "rows": eigen_row_sum, the lanes grouped by their rows' head). */
int i8_global_avgpool_float(const i8desc *d, const float *x, void *out, int nthreads) {
    (void)nthreads;
    long hw = d->h * d->w, in_total = d->n * hw * d->c;
    const uint8_t *u = input_bytes(d, x, in_total, 1);
    if (!u)
        return 0;
    const __m512 s = _mm512_set1_ps(d->in_scale), zc = _mm512_set1_ps((float)(d->in_zp + d->in_off));
    const __m512 den = _mm512_set1_ps((float)hw), mul = _mm512_set1_ps(d->mult[0]);
    const int rows = d->mult[1] != 0.0f;
    for (long b = 0; b < d->n; b++)
        for (long c = 0; c < d->c; c += 16) {
            long left = d->c - c;
            __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
            __m512 acc = _mm512_setzero_ps();
            if (rows) {
                /* row r = b C + c + lane starts r hw floats into an aligned buffer: head = -r hw mod 4 */
                __mmask16 by_head[4] = {0, 0, 0, 0};
                for (int l = 0; l < 16 && l < left; l++)
                    by_head[(4 - ((b * d->c + c + l) * hw) % 4) % 4] |= (__mmask16)(1u << l);
                for (int h = 0; h < 4; h++)
                    if (by_head[h])
                        acc = _mm512_mask_blend_ps(by_head[h], acc, eigen_row_sum(u + b * hw * d->c + c, hw,
                                                   h < hw ? h : hw, d->c, by_head[h], zc, s));
            } else {
                for (long p = 0; p < hw; p++)
                    acc = _mm512_add_ps(acc, gap_value(u + b * hw * d->c + c, p, d->c, m, zc, s));
            }
            __m512 mean = _mm512_mul_ps(_mm512_div_ps(acc, den), mul);
            store_q(d, quant_f(mean, d->out_scale, d->out_rcp, d->out_exact, d->out_zp, d->out_lo, d->out_hi),
                    out, b * d->c + c, m);
        }
    return 1;
}

/* DequantizeLinear(QuantizeLinear(x)) (int8.fake_quant): (q - z) * m with prm = [s, 1/s, exact, z, lo, hi, m]:
 * m = s, or m = 1 for the codes less their zero point (int8.centered_codes) */
typedef struct { const float *x; float *out; const float *p; long n, step; } fqjob;

static void fq_part(void *arg, long part) {
    fqjob *j = arg;
    const float *p = j->p;
    long i = part * j->step, i1 = i + j->step < j->n ? i + j->step : j->n;
    for (; i < i1; i += 16) {
        __mmask16 m = i1 - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (i1 - i)) - 1);
        __m512 q = quant_f(_mm512_maskz_loadu_ps(m, j->x + i), p[0], p[1], (long)p[2], (long)p[3], (long)p[4], (long)p[5]);
        _mm512_mask_storeu_ps(j->out + i, m, _mm512_mul_ps(_mm512_sub_ps(q, _mm512_set1_ps(p[3])), _mm512_set1_ps(p[6])));
    }
}

void i8_fake_quant(const float *x, float *out, long n, const float *prm, int nthreads) {
    long parts = nthreads > 1 && n >= (1L << 16) ? 2L * nthreads : 1;
    fqjob j = {x, out, prm, n, ((n + parts - 1) / parts + 15) & ~15L};
    run(fq_part, &j, (n + j.step - 1) / j.step, nthreads);
}

/* ------------------------------------------------------------------ element-wise ops over broadcast rows
 * i8_qmul and i8_float_binary_fq: a's rows [N, P] of C values each, b broadcast onto them as [BN, BP,
 * BC] (each axis 1 or whole), the rows split over up to nthreads threads (element-wise: any split
 * gives the same bits); bad: a part saw a non-finite value (i8_float_binary_fq). */
typedef struct { const float *a, *b; float *out; long p, c, bn, bp, bc, rows, parts; const float *prm; int op;
                 volatile int bad; } bjob;

static inline const float *bcast_row(const bjob *j, long row) {
    return j->b + ((j->bn > 1 ? row / j->p : 0) * j->bp + (j->bp > 1 ? row % j->p : 0)) * j->bc;
}

static int bcast_run(part_fn fn, const float *a, const float *b, float *out, long n, long p, long c, long bn,
                     long bp, long bc, const float *prm, int op, int nthreads) {
    const long rows = n * p;
    long parts = nthreads > 1 && rows * c >= (1L << 16) ? 2L * nthreads : 1;
    if (parts > rows)
        parts = rows > 0 ? rows : 1;
    bjob j = {a, b, out, p, c, bn, bp, bc, rows, parts, prm, op, 0};
    run(fn, &j, parts, nthreads);
    return !j.bad;
}

/* QLinearMul (int8_out Mul2D), int8_transformer.qlinear_mul_codes: out = (q - shift - z_y) s_y,
 * q = min(hi, max(lo, |v| < 2^31 ? rne(v) : lo)), v = fp32(fp32(ca cb) r) + z_c, ca = Q_a(a) - z_a
 * (quant_f), cb (b) the second operand's centered codes as float32.
 * prm = [s_a, 1/s_a, exact_a, z_a, lo_a, hi_a, r, z_c, lo, hi, shift, z_y, s_y] */
static void qmul_part(void *arg, long part) {
    const bjob *j = arg;
    const float *prm = j->prm;
    const float r = prm[6], zc = prm[7], lo = prm[8], hi = prm[9], shift = prm[10], zy = prm[11], sy = prm[12];
    const long c = j->c, bc = j->bc;
    const long r0 = part * j->rows / j->parts, r1 = (part + 1) * j->rows / j->parts;
    for (long row = r0; row < r1; row++) {
        const float *ar = j->a + row * c, *br = bcast_row(j, row);
        float *o = j->out + row * c;
        for (long k = 0; k < c; k += 16) {
            __mmask16 m = lanes(c - k);
            __m512 qa = quant_f(_mm512_maskz_loadu_ps(m, ar + k), prm[0], prm[1], (long)prm[2], (long)prm[3],
                                (long)prm[4], (long)prm[5]);
            __m512 ca = _mm512_sub_ps(qa, _mm512_set1_ps(prm[3]));
            __m512 b = bc > 1 ? _mm512_maskz_loadu_ps(m, br + k) : _mm512_set1_ps(br[0]);
            __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(ca, b), _mm512_set1_ps(r)), _mm512_set1_ps(zc));
            __mmask16 small = _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(2147483648.0f), _CMP_LT_OQ);
            __m512 q = _mm512_mask_blend_ps(small, _mm512_set1_ps(lo),
                                            _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            q = _mm512_min_ps(_mm512_max_ps(q, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
            q = _mm512_sub_ps(_mm512_sub_ps(q, _mm512_set1_ps(shift)), _mm512_set1_ps(zy));
            _mm512_mask_storeu_ps(o + k, m, _mm512_mul_ps(q, _mm512_set1_ps(sy)));
        }
    }
}

void i8_qmul(const float *a, const float *cb, float *out, long n, long p, long c, long bn, long bp, long bc,
             const float *prm, int nthreads) {
    bcast_run(qmul_part, a, cb, out, n, p, c, bn, bp, bc, prm, 0, nthreads);
}

/* A float Sum2D / Mul2D / Div, then Q -> DQ: int8_transformer.int8_out_binary without input codes or
 * activation (onnxruntime's fp32 Add / Mul / Div between DQ and Q: an S8 squeeze-excite gate, a bias):
 * y = fp32(a op b) (IEEE per lane, numpy's values), then int8.fake_quant of y (fq_part's operations,
 * prm: its seven). A non-finite y sets bad (the numpy step's finiteness test, taken before the
 * quantization). */
static void fbin_part(void *arg, long part) {
    bjob *j = arg;
    const float *prm = j->prm;
    const __m512 z = _mm512_set1_ps(prm[3]), m_out = _mm512_set1_ps(prm[6]);
    const long c = j->c, bc = j->bc;
    const long r0 = part * j->rows / j->parts, r1 = (part + 1) * j->rows / j->parts;
    __mmask16 bad = 0;
    for (long row = r0; row < r1; row++) {
        const float *ar = j->a + row * c, *br = bcast_row(j, row);
        float *o = j->out + row * c;
        for (long k = 0; k < c; k += 16) {
            const __mmask16 m = lanes(c - k);
            const __m512 a = _mm512_maskz_loadu_ps(m, ar + k);
            const __m512 b = bc > 1 ? _mm512_maskz_loadu_ps(m, br + k) : _mm512_set1_ps(br[0]);
            const __m512 y = j->op == 0 ? _mm512_add_ps(a, b) : j->op == 1 ? _mm512_mul_ps(a, b) : _mm512_div_ps(a, b);
            bad |= _mm512_cmp_ps_mask(_mm512_sub_ps(y, y), _mm512_setzero_ps(), _CMP_NEQ_UQ) & m;   /* y - y: NaN for inf, NaN */
            const __m512 q = quant_f(y, prm[0], prm[1], (long)prm[2], (long)prm[3], (long)prm[4], (long)prm[5]);
            _mm512_mask_storeu_ps(o + k, m, _mm512_mul_ps(_mm512_sub_ps(q, z), m_out));
        }
    }
    if (bad)
        j->bad = 1;
}

/* op: 0 add, 1 mul, 2 div. Returns 1 when every y is finite. */
int i8_float_binary_fq(const float *a, const float *b, float *out, long n, long p, long c, long bn, long bp, long bc,
                       const float *prm, int op, int nthreads) {
    return bcast_run(fbin_part, a, b, out, n, p, c, bn, bp, bc, prm, op, nthreads);
}

/* ------------------------------------------------------------------ QLinearSoftmax (last axis)
 * int8_transformer.Int8Softmax, requant qlinear: per row of d values, the codes c = Q_x(x) (fp32
 * x / s_x, rne, + z_x, clamped; NaN -> lo), e = table[255 + c - max(c)], the row's sum of e in fp32 in
 * order, q = clamp(rne(double(e) y_scale / double(sum)) + z_y), out = fp32((q - z_y) s_y).
 * prm = [s_x, z_x, lo_x, hi_x, y_scale, z_y, lo_y, hi_y, s_y] */
int i8_softmax(const float *x, float *out, long rows, long d, const float *table, const float *prm) {
    const float sx = prm[0], zx = prm[1], lox = prm[2], hix = prm[3];
    const double ys = prm[4];
    const float zy = prm[5], loy = prm[6], hiy = prm[7], sy = prm[8];
    float *code = malloc(sizeof(float) * (size_t)(d > 0 ? d : 1));
    if (!code)
        return 0;                                      /* out of memory: the caller raises */
    for (long r = 0; r < rows; r++) {
        const float *v = x + r * d;
        float *o = out + r * d, m = -1e30f;
        for (long i = 0; i < d; i++) {
            float q = rintf(v[i] / sx) + zx;
            q = q > lox ? q : lox;                     /* NaN: the minimum (MLAS) */
            q = q < hix ? q : hix;
            code[i] = q;
            m = q > m ? q : m;
        }
        float total = 0.0f;
        for (long i = 0; i < d; i++) {
            code[i] = table[(long)(255.0f + code[i] - m)];
            total += code[i];
        }
        for (long i = 0; i < d; i++) {
            float q = (float)rint((double)code[i] * ys / (double)total) + zy;
            q = q < loy ? loy : (q > hiy ? hiy : q);
            o[i] = (q - zy) * sy;
        }
    }
    free(code);
    return 1;
}

/* ------------------------------------------------------------------ int8 BatchMatMul
 * int8_transformer.Int8BatchMatMul (qlinear): out[b, i, j] = (q - z) s, q = min(hi, max(lo, rne(fp32(acc) m)
 * + z)), acc = sum over p of a[b, i, p] c[b, p, j], the operands' codes less their zero points held as
 * float32 (a [batch][m][k], c [batch][k][n]). |codes| <= 255: with k 255^2 < 2^24 every partial sum is an
 * integer float32 holds exactly, whatever the order; else the sums run in double (exact too). The
 * numpy form sums in float64 (exact) and rounds to float32: the same values. prm = [m, z, lo, hi, s] */
int i8_bmm(const float *a, const float *c, float *out, long batch, long m, long k, long n, const float *prm) {
    const float mult = prm[0], z = prm[1], lo = prm[2], hi = prm[3], s = prm[4];
    const int f32 = k * 255L * 255L < (1L << 24);
    float *accf = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    double *accd = f32 ? NULL : malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!accf || (!f32 && !accd)) {                   /* out of memory: the caller raises */
        free(accf);
        free(accd);
        return 0;
    }
    for (long b = 0; b < batch; b++)
        for (long i = 0; i < m; i++) {
            const float *ar = a + (b * m + i) * k, *cb = c + b * k * n;
            if (f32) {
                for (long j = 0; j < n; j++)
                    accf[j] = 0.0f;
                for (long p = 0; p < k; p++)
                    for (long j = 0; j < n; j++)
                        accf[j] += ar[p] * cb[p * n + j];
            } else {
                for (long j = 0; j < n; j++)
                    accd[j] = 0.0;
                for (long p = 0; p < k; p++)
                    for (long j = 0; j < n; j++)
                        accd[j] += (double)ar[p] * (double)cb[p * n + j];
                for (long j = 0; j < n; j++)
                    accf[j] = (float)accd[j];
            }
            float *o = out + (b * m + i) * n;
            for (long j = 0; j < n; j++) {
                float q = rintf(accf[j] * mult) + z;
                q = q < lo ? lo : (q > hi ? hi : q);
                o[j] = (q - z) * s;
            }
        }
    free(accf);
    free(accd);
    return 1;
}

/* ------------------------------------------------------------------ table lookup
 * out[r, o_off + c] = table[c or 0][u] for x [rows][c]: u = q_x + off = q_x - lo, the byte of the
 * input code (read from codes, or quantized as every int8 layer does). The int8 Lookup, and each
 * input of an int8 Concat along the channels (its requantization is a function of the code).
 * ``values``: the dequantized outputs, ``codes``: the output bytes q_y + off, as int32. */
typedef struct {
    long rows, c, ldo, o_off, per_channel, in_codes, out_codes;
    const float *prm;                      /* the input's quantization (i8_add's 8 floats) */
    const float *values;                   /* [per_channel ? c : 1][256] */
    const int32_t *codes;                  /* [per_channel ? c : 1][256] */
} lkdesc;

typedef struct { const lkdesc *d; const void *x; void *out; long step; } lkjob;

static void lookup_part(void *arg, long p) {
    const lkjob *j = arg;
    const lkdesc *d = j->d;
    long r0 = p * j->step, r1 = r0 + j->step < d->rows ? r0 + j->step : d->rows;
    qconst q = qconst_of(d->prm);
    const __m512i lane256 = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                               _mm512_set1_epi32(256));
    for (long r = r0; r < r1; r++) {
        for (long c0 = 0; c0 < d->c; c0 += 16) {
            long left = d->c - c0;
            __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
            long i = r * d->c + c0;
            __m512i idx;
            if (d->in_codes)
                idx = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, (const uint8_t *)j->x + i));
            else
                idx = _mm512_cvtps_epi32(_mm512_add_ps(quant_c(_mm512_maskz_loadu_ps(m, (const float *)j->x + i), &q), q.off));
            if (d->per_channel)
                idx = _mm512_add_epi32(idx, _mm512_add_epi32(lane256, _mm512_set1_epi32((int)(c0 * 256))));
            long o = r * d->ldo + d->o_off + c0;
            if (d->out_codes)
                store_u8((uint8_t *)j->out + o, m,
                         _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, d->codes, 4));
            else
                _mm512_mask_storeu_ps((float *)j->out + o, m,
                                      _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, d->values, 4));
        }
    }
}

int i8_lookup(const lkdesc *d, const void *x, void *out, int nthreads) {
    if (d->rows <= 0 || d->c <= 0)
        return 1;
    long parts = d->rows * d->c >= (1L << 15) ? 2L * nthreads : 1;
    if (parts > d->rows)
        parts = d->rows > 0 ? d->rows : 1;
    lkjob j = {d, x, out, (d->rows + parts - 1) / parts};
    run(lookup_part, &j, (d->rows + j.step - 1) / j.step, nthreads);
    return 1;
}

/* ------------------------------------------------------------------ average pool
 * int8 Avgpool2D (sim/int8.py Int8Pool): v = fp32(s_x (q_x - z_x)) per input element (one pass
 * into a float scratch), the window sum in fp32 in window order (rows, then columns; taps
 * outside the input add exact zeros: skipped), / div[oy, ox] in fp32, then QuantizeLinear
 * (requant "float") or QLinearAveragePool's rne(fp32(fp32(avg / s_y) + z_y + shift)) - shift
 * (shift 128 for int8 output, "qlinear"), clamped; out as float or bytes. */
typedef struct {
    long n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
    long in_codes, out_codes, qlinear;
    const float *in_prm, *out_prm;         /* i8_add's 8 floats of each quantization */
    const float *div;                      /* [oh][ow] window counts */
} apdesc;

typedef struct { const apdesc *d; const void *x; float *v; void *out; long total, step, rows, rstep; } apjob;

static void ap_deq_part(void *arg, long p) {
    const apjob *j = arg;
    qconst q = qconst_of(j->d->in_prm);
    long i0 = p * j->step, i1 = i0 + j->step < j->total ? i0 + j->step : j->total;
    for (long i = i0; i < i1; i += 16) {
        __mmask16 m = i1 - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (i1 - i)) - 1);
        __m512 qz;
        if (j->d->in_codes)
            qz = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, (const uint8_t *)j->x + i)),
                                                     q.offz));
        else
            qz = _mm512_sub_ps(quant_c(_mm512_maskz_loadu_ps(m, (const float *)j->x + i), &q), q.z);
        _mm512_mask_storeu_ps(j->v + i, m, _mm512_mul_ps(q.s, qz));
    }
}

static void ap_pool_part(void *arg, long p) {
    const apjob *j = arg;
    const apdesc *d = j->d;
    qconst qo = qconst_of(d->out_prm);
    float shift = d->qlinear && d->out_prm[6] != 0.0f ? 128.0f : 0.0f;   /* int8 output: the uint8 domain */
    __m512 zs = _mm512_set1_ps(d->out_prm[3] + shift), sh = _mm512_set1_ps(shift);
    long r0 = p * j->rstep, r1 = r0 + j->rstep < j->rows ? r0 + j->rstep : j->rows;
    for (long r = r0; r < r1; r++) {
        long b = r / d->oh, oy = r % d->oh;
        for (long ox = 0; ox < d->ow; ox++) {
            __m512 dv = _mm512_set1_ps(d->div[oy * d->ow + ox]);
            for (long c0 = 0; c0 < d->c; c0 += 16) {
                __mmask16 m = d->c - c0 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (d->c - c0)) - 1);
                __m512 acc = _mm512_setzero_ps();
                for (long i = 0; i < d->kh; i++) {
                    long iy = oy * d->sh + i * d->dh - d->pt;
                    if (iy < 0 || iy >= d->h)
                        continue;
                    for (long k = 0; k < d->kw; k++) {
                        long ix = ox * d->sw + k * d->dw - d->pl;
                        if (ix < 0 || ix >= d->w)
                            continue;
                        acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, j->v + ((b * d->h + iy) * d->w + ix) * d->c + c0));
                    }
                }
                __m512 avg = _mm512_div_ps(acc, dv), q;
                if (d->qlinear) {
                    __m512 t = _mm512_add_ps(_mm512_div_ps(avg, qo.s), zs);
                    q = _mm512_sub_ps(_mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), sh);
                    q = _mm512_min_ps(_mm512_max_ps(q, qo.lo), qo.hi);
                } else
                    q = quant_c(avg, &qo);
                long o = ((b * d->oh + oy) * d->ow + ox) * d->c + c0;
                if (d->out_codes)
                    store_u8((uint8_t *)j->out + o, m, _mm512_cvtps_epi32(_mm512_add_ps(q, qo.off)));
                else
                    _mm512_mask_storeu_ps((float *)j->out + o, m, _mm512_mul_ps(_mm512_sub_ps(q, qo.z), qo.s));
            }
        }
    }
}

int i8_avgpool(const apdesc *d, const void *x, void *out, int nthreads) {
    long total = d->n * d->h * d->w * d->c, rows = d->n * d->oh;
    if (total <= 0 || rows <= 0 || d->ow <= 0)
        return 1;
    float *v = (float *)get_scratch(sizeof(float) * (size_t)total);
    if (!v)
        return 0;
    long parts = total >= (1L << 15) ? 2L * nthreads : 1;
    apjob j = {d, x, v, out, total, (((total + parts - 1) / parts) + 15) & ~15L, rows, 0};
    run(ap_deq_part, &j, (total + j.step - 1) / j.step, nthreads);
    long rp = rows < 4L * nthreads ? rows : 4L * nthreads;
    j.rstep = (rows + rp - 1) / rp;
    run(ap_pool_part, &j, (rows + j.rstep - 1) / j.rstep, nthreads);
    return 1;
}

/* ------------------------------------------------------------------ a run of bound calls
 * The static plan's consecutive int8 steps in one call (sim/int8_plan.py batch_records): per
 * record {kind, fn, a0, a1, a2, n, prm}: kind 0 an ``int fn(desc, x, out, nthreads)`` kernel (conv,
 * depthwise, pools, the float-path conv), 1 ``i8_add``-style ``fn(a, b, out, n, prm, nthreads)``,
 * 2 nothing (a Sum2D its conv computed). Returns the index of the first call that failed (out of
 * memory) or -1. */
typedef struct { long kind; void *fn, *a0, *a1, *a2; long n; const float *prm; } i8call;
typedef int (*kernel_fn)(const void *, const void *, void *, int);
typedef void (*add_fn)(const void *, const void *, void *, long, const float *, int);

long i8_run_calls(const i8call *c, long count, int nthreads) {
    for (long i = 0; i < count; i++) {
        if (c[i].kind == 0) {
            if (!((kernel_fn)c[i].fn)(c[i].a0, c[i].a1, c[i].a2, nthreads))
                return i;
        } else if (c[i].kind == 1)
            ((add_fn)c[i].fn)(c[i].a0, c[i].a1, c[i].a2, c[i].n, c[i].prm, nthreads);
    }
    return -1;
}
