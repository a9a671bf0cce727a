/* Standard base64 (RFC 4648 alphabet, '=' padding, no line breaks): the bytes of Python's
 * binascii.b2a_base64(data, newline=False), for the Constants-JSON (emit/base64_native.py).
 *
 * AVX2 where the CPU has it (W. Mula and D. Lemire, "Faster Base64 Encoding and Decoding using
 * AVX2 Instructions", ACM TOW 2018: 24 input bytes -> 32 characters per step: a byte shuffle, two
 * 16-bit multiplies split the 6-bit fields, a 16-entry shuffle table adds each field's ASCII
 * offset), else and for the tail a scalar loop. Called through ctypes, so the GIL is released. */
#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
#endif

static const char ALPHABET[64] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t b64_encoded_size(size_t n) { return (n + 2) / 3 * 4; }

static size_t encode_scalar(const uint8_t *src, size_t n, uint8_t *dst) {
    uint8_t *out = dst;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = ((uint32_t)src[i] << 16) | ((uint32_t)src[i + 1] << 8) | src[i + 2];
        out[0] = ALPHABET[v >> 18];
        out[1] = ALPHABET[(v >> 12) & 63];
        out[2] = ALPHABET[(v >> 6) & 63];
        out[3] = ALPHABET[v & 63];
        out += 4;
    }
    if (i < n) {
        uint32_t v = (uint32_t)src[i] << 16;
        if (i + 1 < n) v |= (uint32_t)src[i + 1] << 8;
        out[0] = ALPHABET[v >> 18];
        out[1] = ALPHABET[(v >> 12) & 63];
        out[2] = i + 1 < n ? ALPHABET[(v >> 6) & 63] : '=';
        out[3] = '=';
        out += 4;
    }
    return (size_t)(out - dst);
}

#ifdef HAVE_AVX2_PATH
__attribute__((target("avx2")))
static size_t encode_avx2(const uint8_t *src, size_t n, uint8_t *dst) {
    /* per 128-bit lane: 12 input bytes b0..b11 at lane bytes 0..11; each 3 bytes (a, b, c) become
     * the 32-bit word [b, a, c, b], whose four 6-bit fields the multiplies move into its bytes */
    const __m256i shuffle = _mm256_setr_epi8(1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10,
                                             1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10);
    const __m256i mask_ac = _mm256_set1_epi32(0x0fc0fc00), mul_ac = _mm256_set1_epi32(0x04000040);
    const __m256i mask_bd = _mm256_set1_epi32(0x003f03f0), mul_bd = _mm256_set1_epi32(0x01000010);
    /* ASCII offset of a 6-bit value v, indexed by max(v - 51, 0) + (v > 25): 'A', 'a' - 26, '0' - 52, '+', '/' */
    const __m256i offsets = _mm256_setr_epi8(65, 71, -4, -4, -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 0, 0,
                                             65, 71, -4, -4, -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 0, 0);
    const __m256i c51 = _mm256_set1_epi8(51), c25 = _mm256_set1_epi8(25);
    size_t i = 0;
    uint8_t *out = dst;
    for (; i + 28 <= n; i += 24) {   /* the second lane's 16-byte load reads up to src[i + 27] */
        __m128i lo = _mm_loadu_si128((const __m128i *)(src + i));
        __m128i hi = _mm_loadu_si128((const __m128i *)(src + i + 12));
        __m256i in = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
        in = _mm256_shuffle_epi8(in, shuffle);
        __m256i ac = _mm256_mulhi_epu16(_mm256_and_si256(in, mask_ac), mul_ac);
        __m256i bd = _mm256_mullo_epi16(_mm256_and_si256(in, mask_bd), mul_bd);
        __m256i v = _mm256_or_si256(ac, bd);
        __m256i idx = _mm256_sub_epi8(_mm256_subs_epu8(v, c51), _mm256_cmpgt_epi8(v, c25));
        __m256i chars = _mm256_add_epi8(v, _mm256_shuffle_epi8(offsets, idx));
        _mm256_storeu_si256((__m256i *)out, chars);
        out += 32;
    }
    out += encode_scalar(src + i, n - i, out);
    return (size_t)(out - dst);
}
#endif

/* 1 when the vector path runs on this CPU (reported by the Python side), else 0 */
int b64_vector(void) {
#ifdef HAVE_AVX2_PATH
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? 1 : 0;
#else
    return 0;
#endif
}

/* Encode src[0:n] into dst (b64_encoded_size(n) bytes); returns the characters written.
 * vector: the value b64_vector() returned (0 forces the scalar loop). */
size_t b64_encode(const uint8_t *src, size_t n, uint8_t *dst, int vector) {
#ifdef HAVE_AVX2_PATH
    if (vector)
        return encode_avx2(src, n, dst);
#endif
    (void)vector;
    return encode_scalar(src, n, dst);
}
