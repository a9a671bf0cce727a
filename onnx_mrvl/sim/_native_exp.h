/* numpy's float32 exp on AVX2 + FMA3 / AVX-512F hosts (``simd_exp_FLOAT`` of
 * numpy/_core/src/umath/loops_exponent_log.dispatch.c.src, which np.exp runs for every float32
 * element there): NaN -> NaN, x >= 88.7228... -> inf, x <= -103.972... -> 0, else k = rint(x log2 e)
 * (by adding and subtracting 1.5 * 2^23), Cody-Waite r = x - k ln 2 in three FMAs (ln 2 split in two,
 * the third term 0), exp(r) = P5(r) / Q2(r) (Horner, FMAs), times 2^k by adding k to the exponent
 * bits (k <= -125: 2^-125 that way, then divided by 2^(-k - 125): the denormal results). Each lane
 * gets the same IEEE operations in the same order, so the same bits. Also the sigmoid built on it
 * (activations.numpy_sigmoid's steps), the fp16 rounding and the finiteness test of 8 lanes.
 * Shared by _native_act.c and _native_rnn.c; each library checks its results against numpy when it
 * loads. 256-bit code: it builds for both kernel variants (an AVX-512 host has AVX2 + FMA too). */
#ifndef MRVL_NATIVE_EXP_H
#define MRVL_NATIVE_EXP_H
#include <immintrin.h>

#define MI static inline __attribute__((always_inline))

/* a * b with a as vmulps' first source (of two NaNs, a's payload: numpy's x *= s) */
MI __m256 mul_first(__m256 a, __m256 b) {
    __m256 r;
    __asm__("vmulps %2, %1, %0" : "=x"(r) : "x"(a), "xm"(b));
    return r;
}

MI __m256 exp_np(__m256 x) {
    const __m256 zero = _mm256_setzero_ps(), minq = _mm256_set1_ps(-125.0f);
    const __m256 magic = _mm256_set1_ps(0x1.800000p+23f);
    __m256 nan_m = _mm256_cmp_ps(x, x, _CMP_NEQ_UQ);
    x = _mm256_blendv_ps(x, zero, nan_m);
    __m256 max_m = _mm256_cmp_ps(x, _mm256_set1_ps(88.72283935546875f), _CMP_GE_OQ);
    __m256 min_m = _mm256_cmp_ps(x, _mm256_set1_ps(-103.97208404541015625f), _CMP_LE_OQ);
    x = _mm256_blendv_ps(x, zero, _mm256_or_ps(_mm256_or_ps(nan_m, min_m), max_m));
    __m256 q = _mm256_mul_ps(x, _mm256_set1_ps(1.442695040888963407359924681001892137f));
    q = _mm256_sub_ps(_mm256_add_ps(q, magic), magic);
    __m256 r = _mm256_fmadd_ps(q, _mm256_set1_ps(-6.93145752e-1f), x);
    r = _mm256_fmadd_ps(q, _mm256_set1_ps(-1.42860677e-6f), r);
    r = _mm256_fmadd_ps(q, zero, r);
    __m256 num = _mm256_fmadd_ps(_mm256_set1_ps(5.082762527590693718096e-04f), r,
                                 _mm256_set1_ps(6.757896990527504603057e-03f));
    num = _mm256_fmadd_ps(num, r, _mm256_set1_ps(5.114512081637298353406e-02f));
    num = _mm256_fmadd_ps(num, r, _mm256_set1_ps(2.473615434895520810817e-01f));
    num = _mm256_fmadd_ps(num, r, _mm256_set1_ps(7.257664613233124478488e-01f));
    num = _mm256_fmadd_ps(num, r, _mm256_set1_ps(9.999999999980870924916e-01f));
    __m256 den = _mm256_fmadd_ps(_mm256_set1_ps(2.159509375685829852307e-02f), r,
                                 _mm256_set1_ps(-2.742335390411667452936e-01f));
    den = _mm256_fmadd_ps(den, r, _mm256_set1_ps(1.0f));
    __m256 p = _mm256_div_ps(num, den);
    __m256 den_m = _mm256_cmp_ps(q, minq, _CMP_LE_OQ);
    if (_mm256_movemask_ps(den_m)) {
        __m256 diff = _mm256_blendv_ps(zero, _mm256_sub_ps(zero, _mm256_sub_ps(q, minq)), den_m);
        __m256i pow2 = _mm256_sllv_epi32(_mm256_set1_epi32(1), _mm256_cvtps_epi32(diff));
        __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(_mm256_max_ps(q, minq)), 23);
        p = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
        p = _mm256_blendv_ps(p, _mm256_div_ps(p, _mm256_cvtepi32_ps(pow2)), den_m);
    } else {
        __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(q), 23);
        p = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
    }
    p = _mm256_blendv_ps(p, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)), nan_m);
    p = _mm256_blendv_ps(p, _mm256_castsi256_ps(_mm256_set1_epi32(0x7f800000)), max_m);
    return _mm256_blendv_ps(p, zero, min_m);
}

/* activations.numpy_sigmoid: e = exp(-|x|), (x >= 0 ? 1 : e) / (1 + e) */
MI __m256 sigmoid8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 e = exp_np(_mm256_or_ps(x, _mm256_set1_ps(-0.0f)));        /* exp(-|x|): the sign bit set */
    return _mm256_div_ps(_mm256_blendv_ps(e, one, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ)),
                         _mm256_add_ps(e, one));
}

MI __m256 rne8(__m256 v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }

MI __m256i nonfinite8(__m256 v) {       /* |bits| above the largest float: inf or NaN */
    return _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7fffffff)),
                              _mm256_set1_epi32(0x7f7fffff));
}

/* The same operations on 16 lanes (AVX-512F builds, not the SIMDe-emulated one): each lane gets
 * exp_np's IEEE operations in the same order, so the same bits; vblendvps becomes a
 * masked blend (k ? b : a, as blendv(a, b, mask)). Twice the values per operation where the host
 * has 512-bit pipes (_native_act.c's GELU 1.8 -> 1.0 ns a value on a Zen 5 EPYC). */
#if defined(__AVX512F__) && !defined(MRVL_EMULATED)
#define MRVL_EXP16 1
MI __m512 mul_first16(__m512 a, __m512 b) {
    __m512 r;
    __asm__("vmulps %2, %1, %0" : "=v"(r) : "v"(a), "vm"(b));
    return r;
}

MI __m512 or16(__m512 a, int bits) {
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_set1_epi32(bits)));
}

MI __m512 exp_np16(__m512 x) {
    const __m512 zero = _mm512_setzero_ps(), minq = _mm512_set1_ps(-125.0f);
    const __m512 magic = _mm512_set1_ps(0x1.800000p+23f);
    const __mmask16 nan_m = _mm512_cmp_ps_mask(x, x, _CMP_NEQ_UQ);
    x = _mm512_mask_blend_ps(nan_m, x, zero);
    const __mmask16 max_m = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.72283935546875f), _CMP_GE_OQ);
    const __mmask16 min_m = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-103.97208404541015625f), _CMP_LE_OQ);
    x = _mm512_mask_blend_ps((__mmask16)(nan_m | min_m | max_m), x, zero);
    __m512 q = _mm512_mul_ps(x, _mm512_set1_ps(1.442695040888963407359924681001892137f));
    q = _mm512_sub_ps(_mm512_add_ps(q, magic), magic);
    __m512 r = _mm512_fmadd_ps(q, _mm512_set1_ps(-6.93145752e-1f), x);
    r = _mm512_fmadd_ps(q, _mm512_set1_ps(-1.42860677e-6f), r);
    r = _mm512_fmadd_ps(q, zero, r);
    __m512 num = _mm512_fmadd_ps(_mm512_set1_ps(5.082762527590693718096e-04f), r,
                                 _mm512_set1_ps(6.757896990527504603057e-03f));
    num = _mm512_fmadd_ps(num, r, _mm512_set1_ps(5.114512081637298353406e-02f));
    num = _mm512_fmadd_ps(num, r, _mm512_set1_ps(2.473615434895520810817e-01f));
    num = _mm512_fmadd_ps(num, r, _mm512_set1_ps(7.257664613233124478488e-01f));
    num = _mm512_fmadd_ps(num, r, _mm512_set1_ps(9.999999999980870924916e-01f));
    __m512 den = _mm512_fmadd_ps(_mm512_set1_ps(2.159509375685829852307e-02f), r,
                                 _mm512_set1_ps(-2.742335390411667452936e-01f));
    den = _mm512_fmadd_ps(den, r, _mm512_set1_ps(1.0f));
    __m512 p = _mm512_div_ps(num, den);
    const __mmask16 den_m = _mm512_cmp_ps_mask(q, minq, _CMP_LE_OQ);
    if (den_m) {
        __m512 diff = _mm512_mask_blend_ps(den_m, zero, _mm512_sub_ps(zero, _mm512_sub_ps(q, minq)));
        __m512i pow2 = _mm512_sllv_epi32(_mm512_set1_epi32(1), _mm512_cvtps_epi32(diff));
        __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(_mm512_max_ps(q, minq)), 23);
        p = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e));
        p = _mm512_mask_blend_ps(den_m, p, _mm512_div_ps(p, _mm512_cvtepi32_ps(pow2)));
    } else {
        __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(q), 23);
        p = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e));
    }
    p = _mm512_mask_blend_ps(nan_m, p, _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
    p = _mm512_mask_blend_ps(max_m, p, _mm512_castsi512_ps(_mm512_set1_epi32(0x7f800000)));
    return _mm512_mask_blend_ps(min_m, p, zero);
}

MI __m512 rne16x(__m512 v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }

MI __mmask16 nonfinite16x(__m512 v) {    /* |bits| above the largest float: inf or NaN */
    return _mm512_cmpgt_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)),
                                   _mm512_set1_epi32(0x7f7fffff));
}
#endif

#endif
