/* The float-path int8 Conv2D of the simulator (sim/int8_float_native.py; sim/int8_float_conv.py,
 * docs/simulator.md "int8 layers"): onnxruntime's float Conv between DequantizeLinear and
 * QuantizeLinear, summed as MLAS's SGEMM kernel sums it.
 *
 *   xd  = fp32((q_x - z_x) * s_x)          q_x = sat(rne(x / s_x) + z_x) (x / s_x in fp32; NaN -> min),
 *                                          or the bytes q_x + off of a codes buffer
 *   per output and K block [k0, k0 + stride_k): acc = fma(xd[k], w[k], acc) for k in order
 *                                          (single-rounding fp32 FMAs, k = (input channel, kernel
 *                                          row, kernel column) as im2col), the blocks' sums added
 *                                          to the output in order (fp32)
 *   y   = fp32(sum + bias); q = clamp(rne(fp32(y / s_y)) + z_y, lo, hi); out = fp32((q - z_y) * s_y)
 *                                          (or the bytes q + off; or y itself: ``raw``)
 *
 * The input is dequantized once into a zero-padded float buffer (padding taps add fma(0, w, acc)
 * = acc, as the numpy path's zero-padded im2col). Register tile: MR = 6 consecutive output pixels
 * x up to 4 vectors of 16 output channels, the 24 accumulators in registers; a pixel's operand
 * is a broadcast (GEMM: channels of one group) or, for a depthwise conv (one input and one output
 * channel per group), a vector of 16 channels (the groups side by side: the same k order per lane).
 * Parallel parts (chunks of output pixels, or their weight panel ranges; see conv_part) run on the
 * fp16 kernels' worker pool (mrvl_run_parts, handed in by f8_set_runner).
 *
 * AVX2 + FMA + F16C hosts (no AVX-512 BW/VL): the same code on _native_avx2.h's pairs of 256-bit
 * halves (each lane the same IEEE operation: the same bits), with tiles of MR pixels x 16 channels
 * (NV = 1: 12 ymm accumulators, the 16-register file holds the tile) and weight panels of 16
 * channels (PW: one contiguous stream per tile); each output's FMA chain, and so its bits, does not
 * depend on the tile. */
#if !defined(__AVX512BW__) || !defined(__AVX512VL__)
#include "_native_avx2.h"        /* the 512-bit operations on pairs of 256-bit halves */
#include "_native_int8_avx2.h"   /* ... their integer ones (byte loads / stores, conversions) */
#define NV_MAX 1
#else
#define NV_MAX 4
#endif
#define PW (16 * NV_MAX)          /* the weight panels' channels */
#include "_native_common.h"

void f8_set_runner(void *fn) { runner = (runner_fn)fn; }
int f8_panel(void) { return PW; }   /* the weight panels' width (int8_float_native.py packs them) */

#define MR 6

typedef struct {
    long n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, groups, ig, og, o;
    long k, stride_k, ldw, depthwise;       /* K = ig * kh * kw; ldw: channels per group rounded to 64 */
    long in_codes, in_zp, in_lo, in_hi, in_off;
    long out_codes, out_zp, out_off;
    long raw;                               /* store y = fp32(sum + bias) itself (the tests' view) */
    long in_exact, out_exact;               /* always divide (1 / s not a normal float) */
    long m1;                                /* depthwise as MLAS's M1 kernel sums it (m1_sums): no FMA */
    float in_scale, out_scale, lo, hi;      /* lo, hi: the output codes' clamp (type range, activation) */
    float in_rcp, out_rcp;                  /* fp32(1 / s) */
    const float *wt;                        /* per group (depthwise: one) [ldw / PW][K][PW]: panels of PW channels */
    const float *bias;                      /* GEMM: per group [ldw]; depthwise: [ldw] */
} f8desc;

/* ------------------------------------------------------------------ dequantize + pad */
typedef struct {
    const f8desc *d;
    const void *x;
    float *xp;
    long hp, wp, rows, cs;
} pjob;

/* the padded buffer's pixel stride (floats): C, or C + 16 when 4C bytes is a multiple of 512
 * (then 6 pixels' cache lines, C apart, fall into 1-4 of the L1 cache's 64 sets and evict each
 * other: the 3x3 512 -> 512 conv at 7x7 ran at half speed). Past C: never read (a depthwise tile
 * reads up to C rounded to 16). */
static long pixel_stride(long c) {
    return c % 128 ? c : c + 16;
}

/* count values of x from src0 dequantized (quantized first unless codes) into o */
static void convert_run(const f8desc *d, const void *x, long src0, float *o, long count) {
    const __m512 s = _mm512_set1_ps(d->in_scale), z = _mm512_set1_ps((float)d->in_zp), rcp = _mm512_set1_ps(d->in_rcp);
    const __m512 lo = _mm512_set1_ps((float)d->in_lo), hi = _mm512_set1_ps((float)d->in_hi);
    const __m512i offz = _mm512_set1_epi32((int)(d->in_off + d->in_zp));
    for (long i = 0; i < count; i += 16) {
        __mmask16 m = lanes(count - i);
        __m512 qz;
        if (d->in_codes) {
            __m512i u = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, (const uint8_t *)x + src0 + i));
            qz = _mm512_cvtepi32_ps(_mm512_sub_epi32(u, offz));
        } else {
            __m512 v = _mm512_maskz_loadu_ps(m, (const float *)x + src0 + i);
            __m512 r = rne_div(v, s, rcp, d->in_exact);
            r = _mm512_max_ps(_mm512_add_ps(r, z), lo);          /* NaN in the first operand: lo */
            qz = _mm512_sub_ps(_mm512_min_ps(r, hi), z);
        }
        _mm512_mask_storeu_ps(o + i, m, _mm512_mul_ps(qz, s));
    }
}

static void pad_part(void *arg, long p) {       /* one row of the padded buffer */
    const pjob *j = arg;
    const f8desc *d = j->d;
    long b = p / j->hp, py = p % j->hp, iy = py - d->pt, c = d->c, cs = j->cs;
    float *dst = j->xp + p * j->wp * cs;
    if (iy < 0 || iy >= d->h) {
        memset(dst, 0, sizeof(float) * j->wp * cs);
        return;
    }
    long x0 = d->pl < j->wp ? d->pl : j->wp;                   /* padded columns before the input */
    long x1 = d->pl + d->w < j->wp ? d->pl + d->w : j->wp;     /* end of the input columns used */
    memset(dst, 0, sizeof(float) * x0 * cs);
    if (x1 < j->wp)
        memset(dst + x1 * cs, 0, sizeof(float) * (j->wp - x1) * cs);
    long src0 = ((b * d->h + iy) * d->w) * c;
    if (cs == c)                                /* one run of the row's pixels, else one per pixel */
        convert_run(d, j->x, src0, dst + x0 * c, (x1 - x0) * c);
    else
        for (long x = x0; x < x1; x++)
            convert_run(d, j->x, src0 + (x - x0) * c, dst + x * cs, c);
}

/* ------------------------------------------------------------------ tile */
/* the epilogue of a tile's sums: y = fp32(sum + bias), quantized, stored as values or codes (or y: raw) */
static inline __attribute__((always_inline)) void
tile_store(const int NV, const f8desc *d, __m512 (*part)[NV_MAX], const float *bias, int rows, long ncols,
           void *out, long at) {
    const __m512 s = _mm512_set1_ps(d->out_scale), z = _mm512_set1_ps((float)d->out_zp);
    const __m512 rcp = _mm512_set1_ps(d->out_rcp);
    const __m512 lo = _mm512_set1_ps(d->lo), hi = _mm512_set1_ps(d->hi);
    const __m512i off = _mm512_set1_epi32((int)d->out_off);
    for (int v = 0; v < NV; v++) {
        __m512 bv = _mm512_loadu_ps(bias + v * 16);
        __mmask16 m = lanes(ncols - v * 16);
        for (int r = 0; r < rows; r++) {
            __m512 y = _mm512_add_ps(part[r][v], bv);
            if (d->raw) {
                _mm512_mask_storeu_ps((float *)out + at + r * d->o + v * 16, m, y);
                continue;
            }
            __m512 q = rne_div(y, s, rcp, d->out_exact);
            q = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(q, z), lo), hi);
            long i = at + r * d->o + v * 16;
            if (d->out_codes) {
                __m128i bytes = _mm512_cvtusepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(q), off));
                _mm_mask_storeu_epi8((uint8_t *)out + i, m, bytes);
            } else
                _mm512_mask_storeu_ps((float *)out + i, m, _mm512_mul_ps(_mm512_sub_ps(q, z), s));
        }
    }
}


/* acc[r][v] chains of FMAs over k in [k0, k1); a pixel's operand: a broadcast (GEMM) or 16 channels */
#define ROW(r)                                                                                     \
    {                                                                                              \
        const float *ar = xp + pix[r] + ko;                                                       \
        __m512 a0 = DW ? _mm512_loadu_ps(ar) : _mm512_set1_ps(*ar);                                \
        c##r##0 = _mm512_fmadd_ps(a0, b0, c##r##0);                                               \
        if (NV > 1) c##r##1 = _mm512_fmadd_ps(DW ? _mm512_loadu_ps(ar + 16) : a0, b1, c##r##1);    \
        if (NV > 2) c##r##2 = _mm512_fmadd_ps(DW ? _mm512_loadu_ps(ar + 32) : a0, b2, c##r##2);    \
        if (NV > 3) c##r##3 = _mm512_fmadd_ps(DW ? _mm512_loadu_ps(ar + 48) : a0, b3, c##r##3);    \
    }

/* the K block [k0, k0 + stride_k) of a tile, its sums added to ``part`` (the tile's sums of the
 * blocks before; set by the first); after the last block the epilogue */
static inline __attribute__((always_inline)) void
tile(const int NV, const int DW, const f8desc *d, const float *xp, const long *pix, const long *koff,
     const float *w, long k0, __m512 (*part)[NV_MAX], const float *bias, int rows, long ncols, void *out, long at) {
    long k1 = k0 + d->stride_k < d->k ? k0 + d->stride_k : d->k;
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00,
           c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00, c30 = c00, c31 = c00, c32 = c00, c33 = c00,
           c40 = c00, c41 = c00, c42 = c00, c43 = c00, c50 = c00, c51 = c00, c52 = c00, c53 = c00;
    for (long k = k0; k < k1; k++) {
        const float *bk = w + k * PW;
        const long ko = koff[k];
        __m512 b0 = _mm512_loadu_ps(bk), b1, b2, b3;
        if (NV > 1) b1 = _mm512_loadu_ps(bk + 16);
        if (NV > 2) b2 = _mm512_loadu_ps(bk + 32);
        if (NV > 3) b3 = _mm512_loadu_ps(bk + 48);
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
    }
    __m512 acc[MR][4] = {{c00, c01, c02, c03}, {c10, c11, c12, c13}, {c20, c21, c22, c23},
                         {c30, c31, c32, c33}, {c40, c41, c42, c43}, {c50, c51, c52, c53}};
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < NV; v++)
            part[r][v] = k0 == 0 ? acc[r][v] : _mm512_add_ps(part[r][v], acc[r][v]);
    if (k1 < d->k)
        return;
    tile_store(NV, d, part, bias, rows, ncols, out, at);
}
#undef ROW

/* A depthwise tile as MLAS's SgemmKernelM1Avx sums an SGEMM with M = 1 (one output channel per group:
 * onnxruntime's weights come from a DequantizeLinear, so its NCHWc depthwise kernel never takes the
 * conv; int8_float_conv.m1_chain): per output the K taps in groups of 4, then one of 2, then 1 (the
 * rest), each product rounded (vmulps), a group's products added left to right, the group's sum added
 * to the output (the first group's sum is the output). One K block; then the epilogue. The MR rows
 * side by side (their chains interleaved: each add waits for the one before in its chain). */
static inline __attribute__((always_inline)) void
m1_sums(const int NV, const f8desc *d, const float *xp, const long *pix, const long *koff, const float *w,
        __m512 (*part)[NV_MAX], const float *bias, int rows, long ncols, void *out, long at) {
    for (int v = 0; v < NV; v++) {
        __m512 acc[MR];
        for (long k = 0; k < d->k;) {
            const long left = d->k - k;
            const int size = left >= 4 ? 4 : (left >= 2 ? 2 : 1);
            __m512 t[MR];
            const __m512 w0 = _mm512_loadu_ps(w + k * PW + 16 * v);
#pragma GCC unroll 6
            for (int r = 0; r < MR; r++)
                t[r] = _mm512_mul_ps(_mm512_loadu_ps(xp + pix[r] + koff[k] + 16 * v), w0);
            for (int i = 1; i < size; i++) {
                const __m512 wi = _mm512_loadu_ps(w + (k + i) * PW + 16 * v);
#pragma GCC unroll 6
                for (int r = 0; r < MR; r++)
                    t[r] = _mm512_add_ps(t[r], _mm512_mul_ps(_mm512_loadu_ps(xp + pix[r] + koff[k + i] + 16 * v), wi));
            }
#pragma GCC unroll 6
            for (int r = 0; r < MR; r++)
                acc[r] = k == 0 ? t[r] : _mm512_add_ps(t[r], acc[r]);
            k += size;
        }
        for (int r = 0; r < rows; r++)
            part[r][v] = acc[r];
    }
    tile_store(NV, d, part, bias, rows, ncols, out, at);
}

static void tile_nv(int nv, int dw, const f8desc *d, const float *xp, const long *pix, const long *koff,
                    const float *w, long k0, __m512 (*part)[NV_MAX], const float *bias, int rows, long ncols,
                    void *out, long at) {
#define T(NV) (d->m1 ? m1_sums(NV, d, xp, pix, koff, w, part, bias, rows, ncols, out, at) \
                     : dw ? tile(NV, 1, d, xp, pix, koff, w, k0, part, bias, rows, ncols, out, at) \
                          : tile(NV, 0, d, xp, pix, koff, w, k0, part, bias, rows, ncols, out, at))
    if (NV_MAX >= 4 && nv == 4)          /* the widths beyond NV_MAX are never built */
        T(4);
    else if (NV_MAX >= 3 && nv == 3)
        T(3);
    else if (NV_MAX >= 2 && nv == 2)
        T(2);
    else
        T(1);
#undef T
}

/* ------------------------------------------------------------------ conv */
typedef struct {
    const f8desc *d;
    const float *xp;
    const long *koff;
    void *out;
    long wp, hp, gtiles;                   /* gtiles: tiles of MR pixels of the N x OH x OW outputs */
    long cs;                               /* the padded buffer's pixel stride */
    long chunks, panels, split;            /* a group's chunks of MC tiles; its panels, in split ranges */
} gjob;

/* a tile is MR consecutive output pixels (m = (image, row, column) in order, across rows: only
 * the last tile of the batch is short) x up to PW channels of a group. A part is a chunk of MC
 * tiles of one group and a range of its weight panels (all of them unless the parts would be
 * few: a 7x7 map is 9 tiles, two chunks of 8 and 1), walked per panel and K block (each tile's blocks in order, its
 * partial sums kept between them): the block's panel slice stays in the L1 cache for the MC
 * tiles, the chunk's input pixels in the L2 cache. */
#define MC 8
static void conv_part(void *arg, long p) {
    const gjob *j = arg;
    const f8desc *d = j->d;
    long nch = d->depthwise ? d->o : d->og, mtotal = d->n * d->oh * d->ow, hw = d->oh * d->ow;
    long per = j->chunks * j->split, g = p / per, t0 = (p % per) / j->split * MC, s = p % j->split;
    long t1 = t0 + MC < j->gtiles ? t0 + MC : j->gtiles;
    long c1 = (s + 1) * j->panels / j->split * PW;
    const float *w = d->wt + (d->depthwise ? 0 : g * d->k * d->ldw);
    const float *bias = d->bias + (d->depthwise ? 0 : g * d->ldw);
    long pix[MC][MR];
    __m512 part[MC][MR][NV_MAX];
    for (long t = t0; t < t1; t++) {
        long m0 = t * MR;
        int rows = mtotal - m0 < MR ? (int)(mtotal - m0) : MR;
        for (int i = 0; i < MR; i++) {          /* the rows past the last repeat it (not stored) */
            long m = m0 + (i < rows ? i : rows - 1), b = m / hw, oy = (m % hw) / d->ow, ox = m % d->ow;
            pix[t - t0][i] = ((b * j->hp + oy * d->sh) * j->wp + ox * d->sw) * j->cs + (d->depthwise ? 0 : g * d->ig);
        }
    }
    for (long c0 = s * j->panels / j->split * PW; c0 < c1 && c0 < nch; c0 += PW) {
        int nv = (int)((nch - c0 + 15) / 16);
        if (nv > NV_MAX)
            nv = NV_MAX;
        const float *wc = w + c0 * d->k;
        for (long k0 = 0; k0 < d->k; k0 += d->stride_k)
            for (long t = t0; t < t1; t++) {
                long m0 = t * MR;
                int rows = mtotal - m0 < MR ? (int)(mtotal - m0) : MR;
                tile_nv(nv, (int)d->depthwise, d, j->xp + (d->depthwise ? c0 : 0), pix[t - t0], j->koff,
                        wc, k0, part[t - t0], bias + c0, rows, nch - c0, j->out, m0 * d->o + g * d->og + c0);
            }
    }
}

/* x [N, H, W, C] float (or bytes q + off), out [N, OH, OW, O] float (or bytes); 0: out of memory */
int f8_conv(const f8desc *d, const void *x, void *out, int nthreads) {
    long hp = (d->oh - 1) * d->sh + (d->kh - 1) * d->dh + 1, wp = (d->ow - 1) * d->sw + (d->kw - 1) * d->dw + 1;
    long cs = pixel_stride(d->c);
    size_t floats = (size_t)(d->n * hp * wp * cs) + 64;   /* + 64: a depthwise tile's last vector loads */
    float *xp = get_scratch(sizeof(float) * floats);
    long *koff = malloc(sizeof(long) * d->k);
    if (!xp || !koff) {
        free(koff);
        return 0;
    }
    memset(xp + floats - 64, 0, 64 * sizeof(float));
    long kk = d->kh * d->kw;
    for (long k = 0; k < d->k; k++) {          /* k = (input channel, kernel row, kernel column) */
        long ci = k / kk, ky = (k % kk) / d->kw, kx = k % d->kw;
        koff[k] = (ky * d->dh * wp + kx * d->dw) * cs + (d->depthwise ? 0 : ci);
    }
    pjob pj = {d, x, xp, hp, wp, d->n * hp, cs};
    run(pad_part, &pj, pj.rows, nthreads);
    long gtiles = (d->n * d->oh * d->ow + MR - 1) / MR, groups = d->depthwise ? 1 : d->groups;
    long chunks = (gtiles + MC - 1) / MC, panels = ((d->depthwise ? d->o : d->og) + PW - 1) / PW, split = 1;
    while (split * 2 <= panels && groups * chunks * split < 4L * nthreads)   /* parts for every thread */
        split *= 2;
    gjob gj = {d, xp, koff, out, wp, hp, gtiles, cs, chunks, panels, split};
    run(conv_part, &gj, groups * chunks * split, nthreads);
    free(koff);
    return 1;
}
