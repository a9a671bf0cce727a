/* Testing only: build the AVX-512 kernels on an AVX2 host (native.py, ONNX_MRVL_NATIVE_EMULATE).
 *
 * Passed with -include before each kernel source: SIMDe (github.com/simd-everywhere/simde, on
 * the include path) gives the AVX-512 F/DQ/VL/BW/VNNI(/VBMI) intrinsics as native aliases on the
 * host's AVX2 registers, then the __AVX512*__ macros the sources test are defined, so they compile
 * their AVX-512 paths. The few intrinsics SIMDe lacks are given below, lane for lane as Intel's
 * pseudocode defines them. Never used by a normal build. */
#ifndef MRVL_NATIVE_SIMDE_H
#define MRVL_NATIVE_SIMDE_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE          /* before any system header, as the sources expect */
#endif
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <immintrin.h>
#include <simde/x86/avx512.h>
#include <stdint.h>
#include <string.h>

#define MRVL_EMULATED 1    /* _native_conv.c: intrinsics for its inline AVX-512 asm */
#define __AVX512F__ 1
#define __AVX512DQ__ 1
#define __AVX512VL__ 1
#define __AVX512BW__ 1
#define __AVX512VNNI__ 1
#ifdef MRVL_EMULATE_VBMI
#define __AVX512VBMI__ 1
#endif

#pragma GCC diagnostic ignored "-Wpsabi"   /* 512-bit values between inlined helpers */
#define MRVL_SI static inline __attribute__((always_inline))
typedef union { __m512 v; float f[16]; uint32_t u[16]; int32_t i[16]; } mrvl_emu16;
typedef union { __m512i v; float f[16]; uint32_t u[16]; int32_t i[16]; } mrvl_emu16i;

MRVL_SI __mmask16 mrvl_emu_kand(__mmask16 a, __mmask16 b) { return (__mmask16)(a & b); }
MRVL_SI __mmask16 mrvl_emu_kor(__mmask16 a, __mmask16 b) { return (__mmask16)(a | b); }

MRVL_SI __mmask16 mrvl_emu_cmplt_epi32_mask(__m512i a, __m512i b) {
    mrvl_emu16i x = {a}, y = {b};
    unsigned m = 0;
    for (int i = 0; i < 16; i++)
        m |= (unsigned)(x.i[i] < y.i[i]) << i;
    return (__mmask16)m;
}

/* vcvtps2ph (imm: rounding) on each 256-bit half: the host's F16C instruction, the same bits */
#define mrvl_emu_cvtps_ph(v, imm) ({ mrvl_emu16 a_ = {(v)}; __m256i r_; \
    __m128i lo_ = _mm256_cvtps_ph(_mm256_loadu_ps(a_.f), imm), hi_ = _mm256_cvtps_ph(_mm256_loadu_ps(a_.f + 8), imm); \
    memcpy(&r_, &lo_, 16); memcpy((char *)&r_ + 16, &hi_, 16); r_; })

/* vpmovusdb: unsigned int32 -> uint8, saturated */
MRVL_SI __m128i mrvl_emu_cvtusepi32_epi8(__m512i a) {
    mrvl_emu16i x = {a};
    uint8_t b[16];
    for (int i = 0; i < 16; i++)
        b[i] = x.u[i] > 255u ? 255 : (uint8_t)x.u[i];
    __m128i r;
    memcpy(&r, b, 16);
    return r;
}

/* vfpclassps: bit 0 QNaN, 1 +0, 2 -0, 3 +inf, 4 -inf, 5 denormal, 6 negative finite, 7 SNaN */
MRVL_SI __mmask16 mrvl_emu_fpclass_ps_mask(__m512 a, int imm) {
    mrvl_emu16 x = {a};
    unsigned m = 0;
    for (int i = 0; i < 16; i++) {
        uint32_t u = x.u[i], e = (u >> 23) & 0xff, f = u & 0x7fffff, s = u >> 31;
        int hit = ((imm & 0x01) && e == 0xff && f && (f >> 22)) || ((imm & 0x02) && u == 0)
                  || ((imm & 0x04) && u == 0x80000000u) || ((imm & 0x08) && u == 0x7f800000u)
                  || ((imm & 0x10) && u == 0xff800000u) || ((imm & 0x20) && e == 0 && f)
                  || ((imm & 0x40) && s && e != 0xff && (e || f)) || ((imm & 0x80) && e == 0xff && f && !(f >> 22));
        m |= (unsigned)hit << i;
    }
    return (__mmask16)m;
}

/* masked gathers: lanes off the mask keep src and read nothing */
MRVL_SI __m512i mrvl_emu_mask_i32gather_epi32(__m512i src, __mmask16 k, __m512i idx, const void *base, int scale) {
    mrvl_emu16i r = {src}, x = {idx};
    for (int i = 0; i < 16; i++)
        if (k >> i & 1)
            memcpy(&r.i[i], (const char *)base + (int64_t)x.i[i] * scale, 4);
    return r.v;
}

MRVL_SI __m512 mrvl_emu_mask_i32gather_ps(__m512 src, __mmask16 k, __m512i idx, const void *base, int scale) {
    mrvl_emu16 r = {src};
    mrvl_emu16i x = {idx};
    for (int i = 0; i < 16; i++)
        if (k >> i & 1)
            memcpy(&r.f[i], (const char *)base + (int64_t)x.i[i] * scale, 4);
    return r.v;
}

MRVL_SI __m512 mrvl_emu_zextps256_ps512(__m256 a) {
    mrvl_emu16 r;
    memset(r.f, 0, sizeof r.f);
    _mm256_storeu_ps(r.f, a);
    return r.v;
}

#undef _kand_mask16
#define _kand_mask16 mrvl_emu_kand
#undef _kor_mask16
#define _kor_mask16 mrvl_emu_kor
#undef _mm512_cmplt_epi32_mask
#define _mm512_cmplt_epi32_mask mrvl_emu_cmplt_epi32_mask
#undef _mm512_cvtps_ph
#define _mm512_cvtps_ph mrvl_emu_cvtps_ph
#undef _mm512_cvtusepi32_epi8
#define _mm512_cvtusepi32_epi8 mrvl_emu_cvtusepi32_epi8
#undef _mm512_fpclass_ps_mask
#define _mm512_fpclass_ps_mask mrvl_emu_fpclass_ps_mask
#undef _mm512_mask_i32gather_epi32
#define _mm512_mask_i32gather_epi32 mrvl_emu_mask_i32gather_epi32
#undef _mm512_mask_i32gather_ps
#define _mm512_mask_i32gather_ps mrvl_emu_mask_i32gather_ps
#undef _mm512_zextps256_ps512
#define _mm512_zextps256_ps512 mrvl_emu_zextps256_ps512

/* masked loads / stores lane by lane: SIMDe's read (and write back) the whole vector, so a masked
 * store rewrote lanes off the mask with their old values, racing with the thread that owns them
 * (a conv's 8-column block rewrote the next pixel's first 8 channels: wrong bits under 2 threads) */
#define MRVL_EMU_MASKED(name, T, N, E) \
    MRVL_SI T mrvl_emu_maskz_loadu_##name(uint64_t k, const void *p) { \
        E v[N]; memset(v, 0, sizeof v); \
        for (int i = 0; i < N; i++) if (k >> i & 1) memcpy(&v[i], (const E *)p + i, sizeof(E)); \
        T r; memcpy(&r, v, sizeof r); return r; } \
    MRVL_SI void mrvl_emu_mask_storeu_##name(void *p, uint64_t k, T a) { \
        E v[N]; memcpy(v, &a, sizeof v); \
        for (int i = 0; i < N; i++) if (k >> i & 1) memcpy((E *)p + i, &v[i], sizeof(E)); }
MRVL_EMU_MASKED(ps512, __m512, 16, float)
MRVL_EMU_MASKED(ps256, __m256, 8, float)
MRVL_EMU_MASKED(epi8_512, __m512i, 64, uint8_t)
MRVL_EMU_MASKED(epi8_128, __m128i, 16, uint8_t)
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps(k, p) mrvl_emu_maskz_loadu_ps512((k), (p))
#undef _mm256_maskz_loadu_ps
#define _mm256_maskz_loadu_ps(k, p) mrvl_emu_maskz_loadu_ps256((k), (p))
#undef _mm512_maskz_loadu_epi8
#define _mm512_maskz_loadu_epi8(k, p) mrvl_emu_maskz_loadu_epi8_512((k), (p))
#undef _mm_maskz_loadu_epi8
#define _mm_maskz_loadu_epi8(k, p) mrvl_emu_maskz_loadu_epi8_128((k), (p))
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps(p, k, a) mrvl_emu_mask_storeu_ps512((p), (k), (a))
#undef _mm256_mask_storeu_ps
#define _mm256_mask_storeu_ps(p, k, a) mrvl_emu_mask_storeu_ps256((p), (k), (a))
#undef _mm512_mask_storeu_epi8
#define _mm512_mask_storeu_epi8(p, k, a) mrvl_emu_mask_storeu_epi8_512((p), (k), (a))
#undef _mm_mask_storeu_epi8
#define _mm_mask_storeu_epi8(p, k, a) mrvl_emu_mask_storeu_epi8_128((p), (k), (a))
#endif
