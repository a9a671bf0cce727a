/* The AVX-512 subset _native_conv.c uses, on AVX2 + FMA + F16C hosts (no __AVX512F__): each
 * 512-bit vector is a pair of 256-bit halves (lanes 0-7, 8-15), a 16-lane mask a uint16 whose bit
 * i is lane i. Every lane gets the same IEEE fp32 operation as under AVX-512 (vaddps, vfmadd,
 * vmaxps / vminps with their NaN and equal-pair operand order, vcmpps predicates, vcvtps2ph's
 * round-to-nearest-even), so the kernels' results are the same bits; masked loads and stores do
 * not touch masked-off lanes (vmaskmovps), as under AVX-512.
 *
 * Included by _native_conv.c after <immintrin.h>: GCC and clang declare the AVX-512 types and
 * intrinsics even without -mavx512f (target attributes), so the names are redirected by macro to
 * the mrvl_* definitions below (the type names too: __m512 becomes mrvl_v16). Only the forms the
 * kernels use are given (e.g. vfpclassps for inf / NaN only); anything else fails to inline. */
#ifndef MRVL_NATIVE_AVX2_H
#define MRVL_NATIVE_AVX2_H
#include <immintrin.h>
#include <stdint.h>

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "the native kernels need AVX-512F, or AVX2 + FMA + F16C (the simulator falls back to numba without them)"
#endif

#define MRVL_AVX2 1
#define MI static inline __attribute__((always_inline))

typedef struct { __m256 lo, hi; } mrvl_v16;
typedef struct { __m256i lo, hi; } mrvl_i16;
typedef struct { __m256d lo, hi; } mrvl_d8;
#define __m512 mrvl_v16
#define __m512i mrvl_i16
#define __m512d mrvl_d8

/* the 8-lane mask m (bit i: lane i) as a vector of all-ones / zero lanes */
MI __m256i mrvl_m8(unsigned m) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)m), bit), bit);
}
MI __mmask16 mrvl_bits(__m256 lo, __m256 hi) {
    return (__mmask16)((unsigned)_mm256_movemask_ps(lo) | (unsigned)_mm256_movemask_ps(hi) << 8);
}
MI __m256 mrvl_sel(__m256 a, __m256 b, unsigned m) {      /* lanes of m: b, else a */
    return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(mrvl_m8(m)));
}
MI mrvl_v16 mrvl_pair(__m256 lo, __m256 hi) { mrvl_v16 r = {lo, hi}; return r; }
MI mrvl_i16 mrvl_ipair(__m256i lo, __m256i hi) { mrvl_i16 r = {lo, hi}; return r; }

#define MRVL_BIN(name, op) \
    MI mrvl_v16 mrvl_##name(mrvl_v16 a, mrvl_v16 b) { return mrvl_pair(op(a.lo, b.lo), op(a.hi, b.hi)); }
/* a + b, a - b, a * b with a as the first source: of two NaN operands the first one's payload comes
 * out (as from AVX-512's vaddps a, b); GCC's _mm256_add_ps / _mm256_mul_ps are plain vector
 * operations it may commute, which changed max pool's NaN-propagating update (acc + v) */
#define MRVL_ASM(name, insn) MI __m256 mrvl_##name##8(__m256 a, __m256 b) { \
    __m256 r; __asm__(insn " %2, %1, %0" : "=x"(r) : "x"(a), "xm"(b)); return r; }
MRVL_ASM(add, "vaddps")
MRVL_ASM(sub, "vsubps")
MRVL_ASM(mul, "vmulps")
#undef MRVL_ASM
MRVL_BIN(add_ps, mrvl_add8)
MRVL_BIN(sub_ps, mrvl_sub8)
MRVL_BIN(mul_ps, mrvl_mul8)
MRVL_BIN(div_ps, _mm256_div_ps)
MRVL_BIN(max_ps, _mm256_max_ps)
MRVL_BIN(min_ps, _mm256_min_ps)
#undef MRVL_BIN
#define MRVL_IBIN(name, op) \
    MI mrvl_i16 mrvl_##name(mrvl_i16 a, mrvl_i16 b) { return mrvl_ipair(op(a.lo, b.lo), op(a.hi, b.hi)); }
MRVL_IBIN(add_epi32, _mm256_add_epi32)
MRVL_IBIN(mullo_epi32, _mm256_mullo_epi32)
MRVL_IBIN(and_si512, _mm256_and_si256)
#undef MRVL_IBIN

MI mrvl_v16 mrvl_fmadd_ps(mrvl_v16 a, mrvl_v16 b, mrvl_v16 c) {
    return mrvl_pair(_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi));
}
MI mrvl_v16 mrvl_abs_ps(mrvl_v16 a) {
    const __m256 m = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    return mrvl_pair(_mm256_and_ps(a.lo, m), _mm256_and_ps(a.hi, m));
}
MI mrvl_v16 mrvl_set1_ps(float x) { return mrvl_pair(_mm256_set1_ps(x), _mm256_set1_ps(x)); }
MI mrvl_v16 mrvl_setzero_ps(void) { return mrvl_pair(_mm256_setzero_ps(), _mm256_setzero_ps()); }
MI mrvl_i16 mrvl_set1_epi32(int x) { return mrvl_ipair(_mm256_set1_epi32(x), _mm256_set1_epi32(x)); }
MI mrvl_i16 mrvl_setr_epi32(int a, int b, int c, int d, int e, int f, int g, int h,
                            int i, int j, int k, int l, int m, int n, int o, int p) {
    return mrvl_ipair(_mm256_setr_epi32(a, b, c, d, e, f, g, h), _mm256_setr_epi32(i, j, k, l, m, n, o, p));
}
MI mrvl_i16 mrvl_srli_epi32(mrvl_i16 a, unsigned n) {
    const __m128i c = _mm_cvtsi32_si128((int)n);
    return mrvl_ipair(_mm256_srl_epi32(a.lo, c), _mm256_srl_epi32(a.hi, c));
}
MI __mmask16 mrvl_cmplt_epi32_mask(mrvl_i16 a, mrvl_i16 b) {
    return mrvl_bits(_mm256_castsi256_ps(_mm256_cmpgt_epi32(b.lo, a.lo)),
                     _mm256_castsi256_ps(_mm256_cmpgt_epi32(b.hi, a.hi)));
}

/* loads and stores (masked: vmaskmovps, which neither reads nor faults on masked-off lanes) */
MI mrvl_v16 mrvl_loadu_ps(const void *p) {
    const float *f = (const float *)p;
    return mrvl_pair(_mm256_loadu_ps(f), _mm256_loadu_ps(f + 8));
}
MI mrvl_v16 mrvl_load_ps(const void *p) {
    const float *f = (const float *)p;
    return mrvl_pair(_mm256_load_ps(f), _mm256_load_ps(f + 8));
}
MI void mrvl_storeu_ps(void *p, mrvl_v16 v) { _mm256_storeu_ps((float *)p, v.lo); _mm256_storeu_ps((float *)p + 8, v.hi); }
MI void mrvl_store_ps(void *p, mrvl_v16 v) { _mm256_store_ps((float *)p, v.lo); _mm256_store_ps((float *)p + 8, v.hi); }
MI mrvl_i16 mrvl_loadu_si512(const void *p) {
    const __m256i *q = (const __m256i *)p;
    return mrvl_ipair(_mm256_loadu_si256(q), _mm256_loadu_si256(q + 1));
}
MI __m256 mrvl_maskz_loadu8(__mmask8 m, const void *p) { return _mm256_maskload_ps((const float *)p, mrvl_m8(m)); }
MI void mrvl_mask_storeu8(void *p, __mmask8 m, __m256 v) { _mm256_maskstore_ps((float *)p, mrvl_m8(m), v); }
MI mrvl_v16 mrvl_maskz_loadu_ps(__mmask16 m, const void *p) {
    const float *f = (const float *)p;
    if (m == 0xffff)
        return mrvl_loadu_ps(f);
    return mrvl_pair(_mm256_maskload_ps(f, mrvl_m8(m & 0xff)),
                     (m >> 8) ? _mm256_maskload_ps(f + 8, mrvl_m8(m >> 8)) : _mm256_setzero_ps());
}
MI void mrvl_mask_storeu_ps(void *p, __mmask16 m, mrvl_v16 v) {
    float *f = (float *)p;
    if (m == 0xffff) {
        mrvl_storeu_ps(f, v);
        return;
    }
    _mm256_maskstore_ps(f, mrvl_m8(m & 0xff), v.lo);
    if (m >> 8)
        _mm256_maskstore_ps(f + 8, mrvl_m8(m >> 8), v.hi);
}

/* masks: compares, blends, moves */
#define mrvl_cmp_ps_mask(a, b, pred) ({ const mrvl_v16 a_ = (a), b_ = (b); \
    mrvl_bits(_mm256_cmp_ps(a_.lo, b_.lo, pred), _mm256_cmp_ps(a_.hi, b_.hi, pred)); })
MI mrvl_v16 mrvl_mask_blend_ps(__mmask16 m, mrvl_v16 a, mrvl_v16 b) {
    return mrvl_pair(mrvl_sel(a.lo, b.lo, m & 0xff), mrvl_sel(a.hi, b.hi, m >> 8));
}
MI mrvl_v16 mrvl_maskz_mov_ps(__mmask16 m, mrvl_v16 a) {
    return mrvl_pair(_mm256_and_ps(a.lo, _mm256_castsi256_ps(mrvl_m8(m & 0xff))),
                     _mm256_and_ps(a.hi, _mm256_castsi256_ps(mrvl_m8(m >> 8))));
}
MI mrvl_v16 mrvl_mask_add_ps(mrvl_v16 src, __mmask16 m, mrvl_v16 a, mrvl_v16 b) {
    return mrvl_mask_blend_ps(m, src, mrvl_add_ps(a, b));
}
/* vfpclassps for inf / NaN (0x99: QNaN, +inf, -inf, SNaN): |bits| > max finite */
MI __mmask16 mrvl_nonfinite(mrvl_v16 v) {
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), big = _mm256_set1_epi32(0x7f7fffff);
    return mrvl_bits(_mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(v.lo), abs), big)),
                     _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(v.hi), abs), big)));
}
#define mrvl_fpclass_ps_mask(v, imm) ({ _Static_assert((imm) == 0x99, "only inf / NaN lanes"); mrvl_nonfinite(v); })

/* shuffles: lane i of permutexvar is a[idx[i] & 15]; permutex2var picks a or b by bit 4 */
MI __m256 mrvl_perm16(mrvl_v16 a, __m256i idx) {
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(a.lo, idx), _mm256_permutevar8x32_ps(a.hi, idx),
                            _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}
MI mrvl_v16 mrvl_permutexvar_ps(mrvl_i16 idx, mrvl_v16 a) {
    return mrvl_pair(mrvl_perm16(a, idx.lo), mrvl_perm16(a, idx.hi));
}
MI __m256 mrvl_perm32(mrvl_v16 a, __m256i idx, mrvl_v16 b) {
    return _mm256_blendv_ps(mrvl_perm16(a, idx), mrvl_perm16(b, idx), _mm256_castsi256_ps(_mm256_slli_epi32(idx, 27)));
}
MI mrvl_v16 mrvl_permutex2var_ps(mrvl_v16 a, mrvl_i16 idx, mrvl_v16 b) {
    return mrvl_pair(mrvl_perm32(a, idx.lo, b), mrvl_perm32(a, idx.hi, b));
}
MI mrvl_v16 mrvl_mask_permutexvar_ps(mrvl_v16 src, __mmask16 m, mrvl_i16 idx, mrvl_v16 a) {
    return mrvl_mask_blend_ps(m, src, mrvl_permutexvar_ps(idx, a));
}
#define mrvl_mask_i32gather_ps(src, m, idx, base, scale) ({ \
    const mrvl_v16 s_ = (src); const mrvl_i16 i_ = (idx); const __mmask16 m_ = (m); \
    mrvl_pair(_mm256_mask_i32gather_ps(s_.lo, (const float *)(base), i_.lo, _mm256_castsi256_ps(mrvl_m8(m_ & 0xff)), scale), \
              _mm256_mask_i32gather_ps(s_.hi, (const float *)(base), i_.hi, _mm256_castsi256_ps(mrvl_m8(m_ >> 8)), scale)); })

/* width changes and broadcasts */
MI mrvl_v16 mrvl_castps256_ps512(__m256 a) { return mrvl_pair(a, _mm256_setzero_ps()); }
MI mrvl_v16 mrvl_zextps256_ps512(__m256 a) { return mrvl_pair(a, _mm256_setzero_ps()); }
MI __m256 mrvl_castps512_ps256(mrvl_v16 a) { return a.lo; }
MI __m256 mrvl_extractf32x8_ps(mrvl_v16 a, int i) { return i ? a.hi : a.lo; }
MI mrvl_v16 mrvl_insertf32x8(mrvl_v16 a, __m256 b, int i) { return i ? mrvl_pair(a.lo, b) : mrvl_pair(b, a.hi); }
MI mrvl_v16 mrvl_broadcast_f32x8(__m256 a) { return mrvl_pair(a, a); }
MI mrvl_v16 mrvl_broadcast_f32x4(__m128 a) {
    const __m256 b = _mm256_insertf128_ps(_mm256_castps128_ps256(a), a, 1);
    return mrvl_pair(b, b);
}
MI mrvl_d8 mrvl_broadcastsd_pd(__m128d a) {
    const __m256d b = _mm256_broadcastsd_pd(a);
    mrvl_d8 r = {b, b};
    return r;
}
MI mrvl_v16 mrvl_castpd_ps(mrvl_d8 a) { return mrvl_pair(_mm256_castpd_ps(a.lo), _mm256_castpd_ps(a.hi)); }
MI float mrvl_reduce_add_ps(mrvl_v16 a) {      /* fma_peak's checksum only: any order */
    const __m256 s = _mm256_add_ps(a.lo, a.hi);
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

/* fp16: vcvtps2ph (F16C: the same rounding, overflow to inf) and back */
#define mrvl_cvtps_ph(v, rnd) ({ const mrvl_v16 v_ = (v); \
    _mm256_set_m128i(_mm256_cvtps_ph(v_.hi, rnd), _mm256_cvtps_ph(v_.lo, rnd)); })
MI mrvl_v16 mrvl_cvtph_ps(__m256i h) {
    return mrvl_pair(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
}
#define mrvl_roundscale_ps(v, rnd) ({ const mrvl_v16 v_ = (v); \
    mrvl_pair(_mm256_round_ps(v_.lo, rnd), _mm256_round_ps(v_.hi, rnd)); })

#undef _kand_mask16
#undef _kor_mask16
#define _kand_mask16(a, b) ((__mmask16)((a) & (b)))
#define _kor_mask16(a, b) ((__mmask16)((a) | (b)))
#undef _mm256_maskz_loadu_ps
#undef _mm256_mask_storeu_ps
#define _mm256_maskz_loadu_ps mrvl_maskz_loadu8
#define _mm256_mask_storeu_ps mrvl_mask_storeu8
/* every _mm512_x used: _mm512_x -> mrvl_x (undefined first: some are macros without -O) */
#undef _mm512_abs_ps
#undef _mm512_add_epi32
#undef _mm512_add_ps
#undef _mm512_sub_ps
#undef _mm512_and_si512
#undef _mm512_broadcast_f32x4
#undef _mm512_broadcast_f32x8
#undef _mm512_broadcastsd_pd
#undef _mm512_castpd_ps
#undef _mm512_castps256_ps512
#undef _mm512_castps512_ps256
#undef _mm512_cmp_ps_mask
#undef _mm512_cmplt_epi32_mask
#undef _mm512_cvtph_ps
#undef _mm512_cvtps_ph
#undef _mm512_div_ps
#undef _mm512_extractf32x8_ps
#undef _mm512_fmadd_ps
#undef _mm512_fpclass_ps_mask
#undef _mm512_insertf32x8
#undef _mm512_load_ps
#undef _mm512_loadu_ps
#undef _mm512_loadu_si512
#undef _mm512_mask_add_ps
#undef _mm512_mask_blend_ps
#undef _mm512_mask_i32gather_ps
#undef _mm512_mask_permutexvar_ps
#undef _mm512_mask_storeu_ps
#undef _mm512_maskz_loadu_ps
#undef _mm512_maskz_mov_ps
#undef _mm512_max_ps
#undef _mm512_min_ps
#undef _mm512_mul_ps
#undef _mm512_mullo_epi32
#undef _mm512_permutex2var_ps
#undef _mm512_permutexvar_ps
#undef _mm512_reduce_add_ps
#undef _mm512_set1_epi32
#undef _mm512_set1_ps
#undef _mm512_setr_epi32
#undef _mm512_setzero_ps
#undef _mm512_srli_epi32
#undef _mm512_store_ps
#undef _mm512_storeu_ps
#undef _mm512_zextps256_ps512
#undef _mm512_roundscale_ps
#define _mm512_abs_ps mrvl_abs_ps
#define _mm512_add_epi32 mrvl_add_epi32
#define _mm512_add_ps mrvl_add_ps
#define _mm512_sub_ps mrvl_sub_ps
#define _mm512_and_si512 mrvl_and_si512
#define _mm512_broadcast_f32x4 mrvl_broadcast_f32x4
#define _mm512_broadcast_f32x8 mrvl_broadcast_f32x8
#define _mm512_broadcastsd_pd mrvl_broadcastsd_pd
#define _mm512_castpd_ps mrvl_castpd_ps
#define _mm512_castps256_ps512 mrvl_castps256_ps512
#define _mm512_castps512_ps256 mrvl_castps512_ps256
#define _mm512_cmp_ps_mask mrvl_cmp_ps_mask
#define _mm512_cmplt_epi32_mask mrvl_cmplt_epi32_mask
#define _mm512_cvtph_ps mrvl_cvtph_ps
#define _mm512_cvtps_ph mrvl_cvtps_ph
#define _mm512_div_ps mrvl_div_ps
#define _mm512_extractf32x8_ps mrvl_extractf32x8_ps
#define _mm512_fmadd_ps mrvl_fmadd_ps
#define _mm512_fpclass_ps_mask mrvl_fpclass_ps_mask
#define _mm512_insertf32x8 mrvl_insertf32x8
#define _mm512_load_ps mrvl_load_ps
#define _mm512_loadu_ps mrvl_loadu_ps
#define _mm512_loadu_si512 mrvl_loadu_si512
#define _mm512_mask_add_ps mrvl_mask_add_ps
#define _mm512_mask_blend_ps mrvl_mask_blend_ps
#define _mm512_mask_i32gather_ps mrvl_mask_i32gather_ps
#define _mm512_mask_permutexvar_ps mrvl_mask_permutexvar_ps
#define _mm512_mask_storeu_ps mrvl_mask_storeu_ps
#define _mm512_maskz_loadu_ps mrvl_maskz_loadu_ps
#define _mm512_maskz_mov_ps mrvl_maskz_mov_ps
#define _mm512_max_ps mrvl_max_ps
#define _mm512_min_ps mrvl_min_ps
#define _mm512_mul_ps mrvl_mul_ps
#define _mm512_mullo_epi32 mrvl_mullo_epi32
#define _mm512_permutex2var_ps mrvl_permutex2var_ps
#define _mm512_permutexvar_ps mrvl_permutexvar_ps
#define _mm512_reduce_add_ps mrvl_reduce_add_ps
#define _mm512_set1_epi32 mrvl_set1_epi32
#define _mm512_set1_ps mrvl_set1_ps
#define _mm512_setr_epi32 mrvl_setr_epi32
#define _mm512_setzero_ps mrvl_setzero_ps
#define _mm512_srli_epi32 mrvl_srli_epi32
#define _mm512_store_ps mrvl_store_ps
#define _mm512_storeu_ps mrvl_storeu_ps
#define _mm512_zextps256_ps512 mrvl_zextps256_ps512
#define _mm512_roundscale_ps mrvl_roundscale_ps

/* the kernels' embedded-broadcast FMAs (inline vfmadd231ps m32{1to16}): acc += b * *p */
#define FMA_BCAST(acc, bv, p) do { const __m256 s_ = _mm256_broadcast_ss((const float *)(p)); \
    (acc).lo = _mm256_fmadd_ps((bv).lo, s_, (acc).lo); (acc).hi = _mm256_fmadd_ps((bv).hi, s_, (acc).hi); } while (0)
#define FMA_BCAST8(acc, bv, p) ((acc) = _mm256_fmadd_ps((bv), _mm256_broadcast_ss((const float *)(p)), (acc)))
#undef MI
#endif
