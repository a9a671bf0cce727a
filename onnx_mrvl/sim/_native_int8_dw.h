/* The int8 depthwise kernel of _native_int8.c (i8_depthwise; docs/simulator.md "int8 kernels"),
 * included once by it at this point: it uses that file's i8desc, quant_r, store_u8 and run. */
#ifndef MRVL_NATIVE_INT8_DW_H
#define MRVL_NATIVE_INT8_DW_H
/* ------------------------------------------------------------------ depthwise */
/* Depthwise with VNNI: a lane of vpdpbusd sums four products of one channel, so four horizontal
 * taps of a channel are laid side by side. Each part (an image, a range of output rows, a range
 * of 16-channel blocks [c0, c0 + cw)) turns the padded input rows it needs, one at a time, into
 * E[g][ox][cw][4]: the bytes u = q + off at columns ox * sw + (4 g + i) * dw, i < 4 (kx = 4 g + i;
 * the weights of kx >= kw are 0), from the padded row U[wp][cw] by a 4 x 16 byte transpose (one
 * vpermb with AVX512-VBMI). The E rows live in a ring of (kh - 1) * dh + 1 rows: each input row is
 * transposed once per part (before: a slab per part of one to a few output rows, so that with
 * two threads a 14x14 map built every row three times). Then out[ox][c] = sum over ky, g of
 * dpbusd(E_row(oy * sh + ky * dh)[g][ox][c], W4[ky][g][c]) -- int32, exact -- and the epilogue as
 * the GEMM's (+ corr, the same correction). Parts split the channels first (no row is built
 * twice), then the rows. */
typedef struct {
    const i8desc *d; const float *x; float *out;
    long wp, cpad, g4, ring, rparts, cparts, cbs;
    int failed;
    long khw;                 /* weight rows: kh, or kh * d->wsplit (the input rows read once per term) */
} dwjob;

/* a thread's ring of E rows and its U row (each worker has its own; the caller's scratch is not used) */
static __thread void *dw_buf = 0;
static __thread size_t dw_cap = 0;

static uint8_t *dw_scratch(size_t bytes) {
    return grow_buffer(&dw_buf, &dw_cap, bytes);
}

/* padded row y (input row y - pt) of image b, channels [c0, c0 + cw), as bytes u = q + off:
 * [wp][cw], pads z + off, channels past c 0 */
static void dw_fill_row(const i8desc *d, const float *x, uint8_t *dst, long b, long y, long wp, long c0, long cw) {
    const long c = d->c, w = d->w, pl = d->pl, h = d->h;
    const uint8_t pad = (uint8_t)(d->in_zp + d->in_off);
    const long valid = c - c0 < cw ? c - c0 : cw;
    y -= d->pt;
    if (y < 0 || y >= h) {
        memset(dst, pad, wp * cw);
        return;
    }
    if (d->in_codes && c0 == 0 && cw == c) {              /* codes, all channels: one copy for the interior */
        long left = pl < wp ? pl : wp, right = wp - pl - w;
        memset(dst, pad, left * cw);
        if (pl < wp)
            memcpy(dst + pl * cw, (const uint8_t *)x + (b * h + y) * w * c, (wp - pl < w ? wp - pl : w) * c);
        if (right > 0)
            memset(dst + (pl + w) * cw, pad, right * cw);
        return;
    }
    const __m512 off = _mm512_set1_ps((float)d->in_off);
    for (long xx = 0; xx < wp; xx++) {
        const long ix = xx - pl;
        uint8_t *o = dst + xx * cw;
        if (ix < 0 || ix >= w) {
            memset(o, pad, cw);
            continue;
        }
        if (d->in_codes) {
            memcpy(o, (const uint8_t *)x + ((b * h + y) * w + ix) * c + c0, valid);
            if (valid < cw)
                memset(o + valid, 0, cw - valid);
            continue;
        }
        const float *src = x + ((b * h + y) * w + ix) * c + c0;
        for (long k = 0; k < cw; k += 16) {
            __mmask16 m = lanes(valid - k);
            __m512i q = _mm512_cvtps_epi32(_mm512_add_ps(quant_r(_mm512_maskz_loadu_ps(m, src + k), d), off));
            _mm_storeu_si128((__m128i *)(o + k), _mm512_cvtusepi32_epi8(_mm512_maskz_mov_epi32(m, q)));
        }
    }
}

/* E[g][ox][cw][4] of one padded row U[wp][cw] */
static void dw_build_erow(const i8desc *d, long wp, long g4, long cw, const uint8_t *u, uint8_t *e) {
    const long ow = d->ow, sw = d->sw, dw = d->dw;
#ifdef __AVX512VBMI__
    /* out byte 4 ch + i = in byte 16 i + ch: the 4 x 16 transpose */
    static const uint8_t tr[64] = {0, 16, 32, 48, 1, 17, 33, 49, 2, 18, 34, 50, 3, 19, 35, 51,
                                   4, 20, 36, 52, 5, 21, 37, 53, 6, 22, 38, 54, 7, 23, 39, 55,
                                   8, 24, 40, 56, 9, 25, 41, 57, 10, 26, 42, 58, 11, 27, 43, 59,
                                   12, 28, 44, 60, 13, 29, 45, 61, 14, 30, 46, 62, 15, 31, 47, 63};
    const __m512i idx = _mm512_loadu_si512((const void *)tr);
#endif
    for (long g = 0; g < g4; g++)
        for (long ox = 0; ox < ow; ox++) {
            const long x0 = ox * sw + 4 * g * dw;
            const uint8_t *p[4];
            for (int i = 0; i < 4; i++) {
                long xi = x0 + i * dw;
                p[i] = u + (xi < wp ? xi : wp - 1) * cw;      /* past the row: weight 0 */
            }
            uint8_t *o = e + (g * ow + ox) * cw * 4;
#ifdef __AVX512VBMI__
            if (cw == 16 && dw == 1 && x0 + 3 < wp) {         /* the four columns side by side */
                _mm512_storeu_si512((void *)o, _mm512_permutexvar_epi8(idx, _mm512_loadu_si512((const void *)p[0])));
                continue;
            }
            for (long k = 0; k < cw; k += 16) {
                __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p[0] + k)));
                v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p[1] + k)), 1);
                v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p[2] + k)), 2);
                v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p[3] + k)), 3);
                _mm512_storeu_si512((void *)(o + k * 4), _mm512_permutexvar_epi8(idx, v));
            }
#else
            for (long k = 0; k < cw; k += 16) {
                __m128i v0 = _mm_loadu_si128((const __m128i *)(p[0] + k)), v1 = _mm_loadu_si128((const __m128i *)(p[1] + k));
                __m128i v2 = _mm_loadu_si128((const __m128i *)(p[2] + k)), v3 = _mm_loadu_si128((const __m128i *)(p[3] + k));
                __m128i t0 = _mm_unpacklo_epi8(v0, v1), t1 = _mm_unpackhi_epi8(v0, v1);
                __m128i t2 = _mm_unpacklo_epi8(v2, v3), t3 = _mm_unpackhi_epi8(v2, v3);
                __m128i *dst = (__m128i *)(o + k * 4);
                _mm_storeu_si128(dst, _mm_unpacklo_epi16(t0, t2));
                _mm_storeu_si128(dst + 1, _mm_unpackhi_epi16(t0, t2));
                _mm_storeu_si128(dst + 2, _mm_unpacklo_epi16(t1, t3));
                _mm_storeu_si128(dst + 3, _mm_unpackhi_epi16(t1, t3));
            }
#endif
        }
}

/* the epilogue's constants, in registers (a byte store may alias the descriptor: no reloads) */
typedef struct { __m512 lo, hi, s; __m512i zo; int codes; } dwout;

static inline void dw_emit(__m512i acc, __m512 mv, const dwout *q, float *out, long at, __mmask16 m) {
    __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), mv);     /* acc started at corr */
    if (q->codes) {                                            /* clamp, then round (as the GEMM's) */
        f = _mm512_min_ps(_mm512_max_ps(f, q->lo), q->hi);
        store_u8((uint8_t *)out + at, m, _mm512_add_epi32(_mm512_cvtps_epi32(f), q->zo));
        return;
    }
    f = _mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    f = _mm512_min_ps(_mm512_max_ps(f, q->lo), q->hi);
    _mm512_mask_storeu_ps(out + at, m, _mm512_mul_ps(f, q->s));
}

/* npx (<= 4) pixels from column ox of 16 channels at c (cl = c - c0 within the part's E rows
 * er[ky]); KH, G4: the kernel rows and tap groups when constant (0: from the job) */
static inline __attribute__((always_inline)) void
dw_block(const dwjob *j, const int KH, const int G4, const uint8_t *const *er, long cw, long ox, long orow, long c,
         long cl, long npx, __mmask16 m, const dwout *q) {
    const i8desc *d = j->d;
    const int8_t *w4 = (const int8_t *)d->wpack + c * 4;
    const long kh = KH ? KH : j->khw, g4 = G4 ? G4 : j->g4, gstride = d->ow * cw * 4, px = cw * 4, cpad4 = j->cpad * 4;
    __m512i a0 = _mm512_loadu_si512((const void *)(d->corr + c)), a1 = a0, a2 = a0, a3 = a0;
#pragma GCC unroll 7
    for (long ky = 0; ky < kh; ky++) {
        const uint8_t *row = er[ky] + (ox * cw + cl) * 4;
#pragma GCC unroll 2
        for (long g = 0; g < g4; g++) {
            __m512i wv = _mm512_loadu_si512((const void *)(w4 + (ky * g4 + g) * cpad4));
            const uint8_t *e = row + g * gstride;
            a0 = _mm512_dpbusd_epi32(a0, _mm512_loadu_si512((const void *)e), wv);
            if (npx > 1) a1 = _mm512_dpbusd_epi32(a1, _mm512_loadu_si512((const void *)(e + px)), wv);
            if (npx > 2) a2 = _mm512_dpbusd_epi32(a2, _mm512_loadu_si512((const void *)(e + 2 * px)), wv);
            if (npx > 3) a3 = _mm512_dpbusd_epi32(a3, _mm512_loadu_si512((const void *)(e + 3 * px)), wv);
        }
    }
    __m512 mv = _mm512_loadu_ps(d->mult + c);
    const long ldc = d->c;
    dw_emit(a0, mv, q, j->out, orow + c, m);
    if (npx > 1) dw_emit(a1, mv, q, j->out, orow + ldc + c, m);
    if (npx > 2) dw_emit(a2, mv, q, j->out, orow + 2 * ldc + c, m);
    if (npx > 3) dw_emit(a3, mv, q, j->out, orow + 3 * ldc + c, m);
}

/* one output row: every column, every channel block of the part */
static inline __attribute__((always_inline)) void
dw_row(const dwjob *j, const int KH, const int G4, const uint8_t *const *er, long cw, long c0, long orow0,
       const dwout *q) {
    const i8desc *d = j->d;
    const long ow = d->ow, ldc = d->c;
    long ox = 0;
    for (; ox + 4 <= ow; ox += 4)
        for (long cl = 0; cl < cw; cl += 16)
            dw_block(j, KH, G4, er, cw, ox, orow0 + ox * ldc, c0 + cl, cl, 4, lanes(ldc - c0 - cl), q);
    if (ox < ow)
        for (long cl = 0; cl < cw; cl += 16)
            dw_block(j, KH, G4, er, cw, ox, orow0 + ox * ldc, c0 + cl, cl, ow - ox, lanes(ldc - c0 - cl), q);
}

static void dw_part(void *arg, long part) {
    dwjob *j = arg;
    const i8desc *d = j->d;
    const long oh = d->oh, ow = d->ow, sh = d->sh, dh = d->dh, kh = d->kh, ring = j->ring;
    const long per_image = j->rparts * j->cparts, b = part / per_image;
    const long rp = part % per_image / j->cparts, cp = part % j->cparts;
    const long oy0 = rp * oh / j->rparts, oy1 = (rp + 1) * oh / j->rparts;
    /* channels in units of 64 (a cache line of output codes: two parts never write one line) */
    const long units = (j->cbs + 3) / 4, c0 = cp * units / j->cparts * 64;
    const long c1 = (cp + 1) * units / j->cparts * 64 < j->cpad ? (cp + 1) * units / j->cparts * 64 : j->cpad;
    const long cw = c1 - c0;
    if (oy0 >= oy1 || cw <= 0)
        return;
    const long erow = j->g4 * ow * cw * 4;
    uint8_t *buf = dw_scratch((size_t)(ring * erow + j->wp * cw + 64));
    if (!buf) {
        j->failed = 1;
        return;
    }
    const dwout q = {_mm512_set1_ps(d->lo_r), _mm512_set1_ps(d->hi_r), _mm512_set1_ps(d->out_scale),
                     _mm512_set1_epi32((int)(d->out_zp + d->out_off)), (int)d->out_codes};
    const int k33 = kh == 3 && j->g4 == 1 && d->wsplit <= 1;
    uint8_t *urow = buf + ring * erow;
    long next = oy0 * sh;                                   /* the next padded row to transpose */
    const uint8_t *er[j->khw];                              /* kh >= 1; the rows once per weight term */
    for (long oy = oy0; oy < oy1; oy++) {
        const long top = oy * sh, last = top + (kh - 1) * dh;
        if (next < top)
            next = top;
        for (; next <= last; next++) {
            dw_fill_row(d, j->x, urow, b, next, j->wp, c0, cw);
            dw_build_erow(d, j->wp, j->g4, cw, urow, buf + next % ring * erow);
        }
        for (long ky = 0; ky < j->khw; ky++)
            er[ky] = buf + (top + ky % kh * dh) % ring * erow;
        const long orow0 = (b * oh + oy) * ow * d->c;
        if (k33)
            dw_row(j, 3, 1, er, cw, c0, orow0, &q);
        else
            dw_row(j, 0, 0, er, cw, c0, orow0, &q);
    }
}

int i8_depthwise(const i8desc *d, const float *x, float *out, int nthreads) {
    long cpad = (d->c + 15) & ~15L, g4 = (d->kw + 3) / 4;
    long wp = (d->ow - 1) * d->sw + (d->kw - 1) * d->dw + 1;
    if (wp < d->w + d->pl)
        wp = d->w + d->pl;
    long work = d->n * d->oh * d->ow * d->c * d->kh * d->kw;
    int par = nthreads > 1 && work >= (1L << 17) ? nthreads : 1;
    dwjob j = {d, x, out, wp, cpad, g4, (d->kh - 1) * d->dh + 1, 1, 1, cpad / 16, 0, d->wsplit > 1 ? d->wsplit * d->kh : d->kh};
    /* parts: a few per thread, images first; then rows while a part keeps 8 output rows or more
     * (its ring's first (kh - 1) * dh rows are transposed again by the part above: <= 25% more),
     * else 64-channel units (never 16: two threads would write the two halves of one cache line
     * of a 32-channel map's codes), then rows again */
    long want = par > 1 ? 3L * par : 1, per_image = (want + d->n - 1) / d->n, units = (j.cbs + 3) / 4;
    if (per_image > 1 && d->oh / per_image < 8) {
        j.cparts = per_image < units ? per_image : units;
        j.rparts = (per_image + j.cparts - 1) / j.cparts;
    } else
        j.rparts = per_image;
    if (j.rparts > d->oh)
        j.rparts = d->oh;
    run(dw_part, &j, d->n * j.rparts * j.cparts, par);
    return !j.failed;
}
#endif
