/* The integer AVX-512 subset _native_int8.c uses, on AVX2 hosts (after _native_avx2.h, whose
 * 512-bit pairs of 256-bit halves it extends): byte / word / dword operations lane for lane as
 * AVX-512BW does them (the packs act within 128-bit lanes, as there), masked byte loads and
 * stores through a stack copy (never a byte outside the mask), and vpdpbusd's two emulations:
 *
 *   MRVL_DP_EXACT: u8 x s8 widened to int16 (even and odd bytes apart), vpmaddwd of each
 *     (|a0 b0 + a2 b2| <= 65280: exact), both added into the int32 lane -- vpdpbusd's value;
 *   MRVL_DP_SAT: vpmaddubsw (the adjacent pair a0 b0 + a1 b1 saturated to int16) then vpmaddwd
 *     with ones -- MLAS's U8S8 AVX2 kernel's arithmetic (sim/mlas_u8s8.py).
 * The packed operands pair K values 4j, 4j + 1 and 4j + 2, 4j + 3 of each dword: onnxruntime's
 * adjacent pairs. */
#ifndef MRVL_NATIVE_INT8_AVX2_H
#define MRVL_NATIVE_INT8_AVX2_H
#define MI static inline __attribute__((always_inline))

#define MRVL_I2(name, op) \
    MI mrvl_i16 mrvl_##name(mrvl_i16 a, mrvl_i16 b) { return mrvl_ipair(op(a.lo, b.lo), op(a.hi, b.hi)); }
MRVL_I2(adds_epi16, _mm256_adds_epi16)
MRVL_I2(sub_epi32, _mm256_sub_epi32)
MRVL_I2(max_epi32, _mm256_max_epi32)
MRVL_I2(min_epi32, _mm256_min_epi32)
MRVL_I2(max_epu8, _mm256_max_epu8)
MRVL_I2(min_epu8, _mm256_min_epu8)
MRVL_I2(packs_epi32, _mm256_packs_epi32)
MRVL_I2(packus_epi16, _mm256_packus_epi16)
#undef MRVL_I2

MI mrvl_i16 mrvl_setzero_si512(void) { return mrvl_ipair(_mm256_setzero_si256(), _mm256_setzero_si256()); }
MI mrvl_i16 mrvl_set1_epi16(short x) { return mrvl_ipair(_mm256_set1_epi16(x), _mm256_set1_epi16(x)); }
MI mrvl_i16 mrvl_set1_epi8(char x) { return mrvl_ipair(_mm256_set1_epi8(x), _mm256_set1_epi8(x)); }
MI mrvl_i16 mrvl_set_epi32(int p, int o, int n, int m, int l, int k, int j, int i, int h, int g, int f, int e,
                           int d, int c, int b, int a) {
    return mrvl_ipair(_mm256_setr_epi32(a, b, c, d, e, f, g, h), _mm256_setr_epi32(i, j, k, l, m, n, o, p));
}
MI void mrvl_storeu_si512(void *p, mrvl_i16 v) {
    _mm256_storeu_si256((__m256i *)p, v.lo);
    _mm256_storeu_si256((__m256i *)p + 1, v.hi);
}
MI mrvl_v16 mrvl_cvtepi32_ps(mrvl_i16 a) { return mrvl_pair(_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)); }
MI mrvl_i16 mrvl_cvtps_epi32(mrvl_v16 a) { return mrvl_ipair(_mm256_cvtps_epi32(a.lo), _mm256_cvtps_epi32(a.hi)); }
MI mrvl_i16 mrvl_cvtepu8_epi32(__m128i a) {
    return mrvl_ipair(_mm256_cvtepu8_epi32(a), _mm256_cvtepu8_epi32(_mm_srli_si128(a, 8)));
}
/* vpmovusdb: each dword as unsigned, saturated to 255 */
MI __m128i mrvl_cvtusepi32_epi8(mrvl_i16 a) {
    const __m256i c = _mm256_set1_epi32(255);
    __m256i w = _mm256_packus_epi32(_mm256_min_epu32(a.lo, c), _mm256_min_epu32(a.hi, c));  /* lo0-3 hi0-3 lo4-7 hi4-7 */
    w = _mm256_permute4x64_epi64(w, 0xd8);
    return _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
}
MI mrvl_i16 mrvl_maskz_mov_epi32(__mmask16 m, mrvl_i16 a) {
    return mrvl_ipair(_mm256_and_si256(a.lo, mrvl_m8(m & 0xff)), _mm256_and_si256(a.hi, mrvl_m8(m >> 8)));
}
/* vpermd over 16 dwords: each half from both halves, by bit 3 of the index */
MI mrvl_i16 mrvl_permutexvar_epi32(mrvl_i16 idx, mrvl_i16 a) {
    const __m256i eight = _mm256_set1_epi32(8);
    __m256i l = _mm256_blendv_epi8(_mm256_permutevar8x32_epi32(a.lo, idx.lo), _mm256_permutevar8x32_epi32(a.hi, idx.lo),
                                   _mm256_cmpeq_epi32(_mm256_and_si256(idx.lo, eight), eight));
    __m256i h = _mm256_blendv_epi8(_mm256_permutevar8x32_epi32(a.lo, idx.hi), _mm256_permutevar8x32_epi32(a.hi, idx.hi),
                                   _mm256_cmpeq_epi32(_mm256_and_si256(idx.hi, eight), eight));
    return mrvl_ipair(l, h);
}
#define mrvl_mask_i32gather_epi32(src, m, idx, base, scale) ({ \
    const mrvl_i16 s_ = (src), i_ = (idx); const unsigned m_ = (m); \
    mrvl_ipair(_mm256_mask_i32gather_epi32(s_.lo, (const int *)(base), i_.lo, mrvl_m8(m_ & 0xff), scale), \
               _mm256_mask_i32gather_epi32(s_.hi, (const int *)(base), i_.hi, mrvl_m8(m_ >> 8), scale)); })

/* masked byte moves: a full mask as a plain move, else through a stack copy, touching only the
 * bytes of the mask */
MI __m128i mrvl_maskz_loadu_epi8_128(__mmask16 m, const void *p) {
    if (m == 0xffff)
        return _mm_loadu_si128((const __m128i *)p);
    uint8_t t[16] = {0};
    for (int i = 0; i < 16; i++)
        if (m >> i & 1)
            t[i] = ((const uint8_t *)p)[i];
    return _mm_loadu_si128((const __m128i *)t);
}
MI void mrvl_mask_storeu_epi8_128(void *p, __mmask16 m, __m128i v) {
    if (m == 0xffff) {
        _mm_storeu_si128((__m128i *)p, v);
        return;
    }
    uint8_t t[16];
    _mm_storeu_si128((__m128i *)t, v);
    for (int i = 0; i < 16; i++)
        if (m >> i & 1)
            ((uint8_t *)p)[i] = t[i];
}
MI mrvl_i16 mrvl_maskz_loadu_epi8(__mmask64 m, const void *p) {
    if (m == ~(__mmask64)0)
        return mrvl_loadu_si512(p);
    uint8_t t[64] = {0};
    for (int i = 0; i < 64; i++)
        if (m >> i & 1)
            t[i] = ((const uint8_t *)p)[i];
    return mrvl_loadu_si512(t);
}
MI void mrvl_mask_storeu_epi8(void *p, __mmask64 m, mrvl_i16 v) {
    if (m == ~(__mmask64)0) {
        mrvl_storeu_si512(p, v);
        return;
    }
    uint8_t t[64];
    mrvl_storeu_si512(t, v);
    for (int i = 0; i < 64; i++)
        if (m >> i & 1)
            ((uint8_t *)p)[i] = t[i];
}

/* vpdpbusd: c + sum of the four u8 x s8 products of each dword, in the two modes above. The
 * operands widened to int16, even and odd bytes apart */
typedef struct { __m256i even, odd; } mrvl_dpa;             /* u8 even / odd bytes as int16 */
typedef struct { __m256i elo, olo, ehi, ohi; } mrvl_dpb;    /* s8 even / odd bytes as int16, per half */

MI mrvl_dpa mrvl_dpa_of(__m256i a) {
    mrvl_dpa r = {_mm256_and_si256(a, _mm256_set1_epi16(0xff)), _mm256_srli_epi16(a, 8)};
    return r;
}
MI mrvl_dpb mrvl_dpb_of(mrvl_i16 b) {
    mrvl_dpb r = {_mm256_srai_epi16(_mm256_slli_epi16(b.lo, 8), 8), _mm256_srai_epi16(b.lo, 8),
                  _mm256_srai_epi16(_mm256_slli_epi16(b.hi, 8), 8), _mm256_srai_epi16(b.hi, 8)};
    return r;
}
MI __m256i mrvl_dp8(__m256i c, mrvl_dpa a, __m256i be, __m256i bo) {
    return _mm256_add_epi32(c, _mm256_add_epi32(_mm256_madd_epi16(a.even, be), _mm256_madd_epi16(a.odd, bo)));
}
/* exact (_mm512_dpbusd_epi32); the weights' preparation, the same value in each row's call, is computed once */
MI mrvl_i16 mrvl_dpbusd_epi32(mrvl_i16 c, mrvl_i16 a, mrvl_i16 b) {
    const mrvl_dpb p = mrvl_dpb_of(b);
    return mrvl_ipair(mrvl_dp8(c.lo, mrvl_dpa_of(a.lo), p.elo, p.olo), mrvl_dp8(c.hi, mrvl_dpa_of(a.hi), p.ehi, p.ohi));
}
/* saturating pairs (vpmaddubsw, vpmaddwd with ones) */
MI mrvl_i16 mrvl_dpbusd_sat(mrvl_i16 c, mrvl_i16 a, mrvl_i16 b) {
    const __m256i one = _mm256_set1_epi16(1);
    return mrvl_ipair(_mm256_add_epi32(c.lo, _mm256_madd_epi16(_mm256_maddubs_epi16(a.lo, b.lo), one)),
                      _mm256_add_epi32(c.hi, _mm256_madd_epi16(_mm256_maddubs_epi16(a.hi, b.hi), one)));
}

#undef _mm512_set1_epi16
#undef _mm512_set1_epi8
#undef _mm512_setzero_si512
#undef _mm512_set_epi32
#define _mm512_adds_epi16 mrvl_adds_epi16
#define _mm512_sub_epi32 mrvl_sub_epi32
#define _mm512_max_epi32 mrvl_max_epi32
#define _mm512_min_epi32 mrvl_min_epi32
#define _mm512_max_epu8 mrvl_max_epu8
#define _mm512_min_epu8 mrvl_min_epu8
#define _mm512_packs_epi32 mrvl_packs_epi32
#define _mm512_packus_epi16 mrvl_packus_epi16
#define _mm512_setzero_si512 mrvl_setzero_si512
#define _mm512_set1_epi16 mrvl_set1_epi16
#define _mm512_set1_epi8 mrvl_set1_epi8
#define _mm512_set_epi32 mrvl_set_epi32
#define _mm512_storeu_si512 mrvl_storeu_si512
#define _mm512_load_si512 mrvl_loadu_si512
#define _mm512_cvtepi32_ps mrvl_cvtepi32_ps
#define _mm512_cvtps_epi32 mrvl_cvtps_epi32
#define _mm512_cvtepu8_epi32 mrvl_cvtepu8_epi32
#define _mm512_cvtusepi32_epi8 mrvl_cvtusepi32_epi8
#define _mm512_maskz_mov_epi32 mrvl_maskz_mov_epi32
#define _mm512_permutexvar_epi32 mrvl_permutexvar_epi32
#define _mm512_mask_i32gather_epi32 mrvl_mask_i32gather_epi32
#define _mm512_maskz_loadu_epi8 mrvl_maskz_loadu_epi8
#define _mm512_mask_storeu_epi8 mrvl_mask_storeu_epi8
#define _mm_maskz_loadu_epi8 mrvl_maskz_loadu_epi8_128
#define _mm_mask_storeu_epi8 mrvl_mask_storeu_epi8_128
#define _mm512_dpbusd_epi32 mrvl_dpbusd_epi32
#undef MI
#endif
