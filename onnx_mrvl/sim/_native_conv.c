/* The simulator's native kernels (see native.py): conv / FC as an implicit GEMM whose epilogue
 * (bias, scale, shift, activation, fp16 round-to-nearest-even, finiteness flag) runs on the
 * register tile before it is stored, optionally with a residual Sum2D fused in; depthwise conv;
 * Sum2D / Mul2D; max / average / global average pooling; NCHW <-> NHWC; the FC GEMV on fp16
 * weights; the worker pool they all run on; and run_steps, which executes a stretch of a static
 * plan in one call. Built by native.py with the system C compiler (-O3 -march=native
 * -ffp-contract=off) and called through ctypes, which releases the GIL.
 *
 * Numerics (docs/simulator.md): inputs and weights hold fp16 values in float32; each product is
 * exact in float32, so the explicit FMAs below round exactly as a multiply then an add would; the
 * sum runs over k in order in float32. The epilogue is ((acc + bias) * scale) + shift and the
 * activations of activations.py, operation for operation and without contraction, then
 * vcvtps2ph (round to nearest even, overflow to inf) and back: the same values as sim/fp16.py.
 *
 * Conv layout: out[m, o] = sum_k A[m, k] * W[k, o], m an output pixel (n, oy, ox), k = (ky, kx, c).
 * A is never materialised: each block of MR pixels x KC k-values is packed from the NHWC input
 * (zeros for padding) into a small buffer, or read in place for a 1x1 stride-1 conv and for
 * interior windows of stems and 3x3 convs at a few strides (micro_win); the weights
 * come packed once by the caller as [ceil(O/NR)][K][NR] (zero columns past O). The micro-kernel
 * keeps an MR x NR tile in 24 AVX-512 registers.
 *
 * One file (over the usual ~400 lines) on purpose: a single translation unit lets the inline
 * epilogue, activation and rounding helpers inline into every kernel loop, and gives one shared
 * object to build, key and cache.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE          /* sched_getaffinity, pthread_setaffinity_np (ONNX_MRVL_SIM_PIN) */
#endif
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__AVX512F__) || !defined(__AVX512DQ__) || !defined(__AVX512VL__)
#include "_native_avx2.h"   /* AVX2 + FMA + F16C hosts: the same kernels on 256-bit register pairs */
#endif

#define MR 12          /* output pixels per micro-tile */

/* Kernel paths added by the 2026-11-26 MobileNet pass, each giving the same bits as the code before
 * it; kernel_paths(mask) turns them off for tests/test_sim_kernel_paths.py, which compares the two */
#define PATH_DW4 1          /* depthwise: blocks of 4 pixels for interiors 4-7 pixels wide */
#define PATH_ONE_PAIRS 2    /* conv: tiles of at most 16 columns two at a time (micro_one) */
#define PATH_PANEL_PACK 4   /* conv: a stem's whole panel packed row by row, no per-pixel bookkeeping */
#define PATH_WINDOWS 8      /* conv: windows read in place (micro_one_win24, micro_win12, micro_win*) */
#define PATH_STEM_ROWS 16   /* conv: a stem of one channel block tiled along output rows (stem_rows) */
#define PATH_DW_ROW 32      /* depthwise: a whole output row of 4-8 pixels in registers (dw_row3) */
#define PATH_EIGHT 64       /* conv: an in-place 1x1 conv of at most 8 columns in 256-bit tiles (range8) */
#define PATH_STEM_BLOCKS 128 /* conv: stem_rows per channel block for stems of over 32 channels (step 6) */
#define PATH_PIPE 256       /* conv: in-place 1x1 tiles, each one's epilogue run inside the next's FMAs (direct_pipe) */
#define PATH_HALF 512       /* conv: a tile of 17-24 columns sums its second vector's 8 lanes in 256-bit FMAs */
#define PATH_MAX_CHAIN 1024 /* max pool: a vmaxps chain, NaN lanes detected apart (the NaN-propagating chain redone) */
#define PATH_AVX2_TILES 2048 /* AVX2: narrow GEMM tiles in 12-ymm blocks (fma_cols8), depthwise 3x3 stride-1 blocks in
                              * 8-lane halves (dw_block_h); both: depthwise blocks' short epilogue (dw_store) */
#define PATH_SWEEP 4096     /* AVX2: a packed block's channel blocks swept 6 rows x 16 lanes at a time over short k
                              * slices (sweep_block): the weights' slice stays in L1 for all the block's rows */
#define PATH_LANES6 8192    /* AVX2: a lane-packed grouped conv's tile 6 rows (4 + 4 of 8) x 16 lanes at a time (lane_micro) */
#define PATH_ROWS13 32768   /* AVX2: a 13-row tile's FMAs as 5 + 4 + 4 rows x 16 lanes, not 6 + 6 + 1 (fma_rows) */
#define PATH_STORE8 16384   /* AVX2: the short epilogue of whole 32-column tiles 8 lanes at a time, no no-op bounds, one
                             * finiteness test per tile (store_full8) */
#define PATH_DW_TAPS8 65536 /* AVX2: depthwise blocks summed tap by tap (strided, dilated, not 3 wide) in 8-lane halves
                             * (dw_block_taps_h) */
#define PATH_ONE_CHANNEL 131072 /* conv: one input and one output channel, every tap inside the input (a 1-D FIR
                                 * filter: basic-pitch's CQT) summed 16 output pixels at a time (conv_one_channel) */
#define PATH_ONE_OUT 262144 /* conv: a 1x1 stride-1 conv to one output channel, 16 pixels at a time (conv_one_out) */
#define PATH_POOL_ROWS 524288 /* max pool: a row's pixels whose windows lie inside the input along x in one tight loop
                               * (pool_max_inner), compiled for 2, 3 and 5 taps a kernel row */
#define PATH_DW_EDGES 1048576 /* depthwise: a wide row's first and last 8 pixels (a 3-wide kernel, one column of left
                              * padding) as blocks (dw_edge_left / dw_edge_right), not pixel by pixel */
#ifdef MRVL_AVX2   /* 16 ymm registers: direct_pipe's 12 x 32 tiles spill; fma_rows and fma_cols8 do not */
static int new_paths = PATH_DW4 | PATH_ONE_PAIRS | PATH_PANEL_PACK | PATH_WINDOWS | PATH_STEM_ROWS | PATH_DW_ROW
                       | PATH_EIGHT | PATH_STEM_BLOCKS | PATH_HALF | PATH_MAX_CHAIN | PATH_AVX2_TILES | PATH_SWEEP
                       | PATH_LANES6 | PATH_STORE8 | PATH_ROWS13 | PATH_DW_TAPS8 | PATH_ONE_CHANNEL | PATH_ONE_OUT | PATH_POOL_ROWS | PATH_DW_EDGES;
#else
static int new_paths = PATH_DW4 | PATH_ONE_PAIRS | PATH_PANEL_PACK | PATH_WINDOWS | PATH_STEM_ROWS | PATH_DW_ROW
                       | PATH_EIGHT | PATH_STEM_BLOCKS | PATH_PIPE | PATH_HALF | PATH_MAX_CHAIN | PATH_AVX2_TILES
                       | PATH_ONE_CHANNEL | PATH_ONE_OUT | PATH_POOL_ROWS | PATH_DW_EDGES;
#endif
void kernel_paths(int mask) { new_paths = mask; }
#define NR 32          /* output channels per micro-tile: two zmm */
/* k-values per packed block (the packed row stride is LDP); 256 before: each block ends in the
 * accumulators' store and reload, and 512 took 1-3% off ResNet-50's 3x3 convs (768: no better, 1024:
 * 5-17% slower). AVX-512: 576, a 3x3 conv of 64 channels in one block and of 128, 256 or 512 in
 * whole blocks (512 left a block of 64 k-values after each 512); ResNet-18's steps -1%, ResNet-50's
 * -0.3%, one thread (bench_native_ab.py); the AVX2 build, measured on its hosts, keeps 512 */
#ifdef MRVL_AVX2
#define KC 512
#else
#define KC 576
#endif
#define LDP (KC + 16)  /* the packed rows' stride: with KC 512 floats (2 KB) apart, a 24-row pair tile's rows
                        * fell in two L1 sets (12 lines each, 8 ways): the 3 -> 16 stem's packed pairs
                        * 3-6% slower than with KC 256 */
#define MC (MR * 10)   /* pixels per packed block (the packed buffer: MC x LDP floats, 253 / 284 KB per thread) */

/* the register tiles' k loops start on a 64-byte boundary (a 274-byte loop starting 48 bytes into a
 * line spans 6 of the op cache's lines instead of 5) */
#define HOT_LOOPS __attribute__((optimize("align-loops=64")))

typedef struct {
    const float *bias, *scale, *shift, *slope;   /* each padded to a multiple of NR */
    int code;                                    /* sim/jit.py ACT_CODES; < 0: no act, no rounding */
    float p0, p1;
} epi_t;

static inline __attribute__((always_inline)) __m512 blend(__mmask16 m, __m512 a, __m512 b) { return _mm512_mask_blend_ps(m, a, b); }

static inline __attribute__((always_inline)) __m512 activation(__m512 v, const epi_t *e, __m512 s) {
    const __m512 z = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
    __m512 g;
    __mmask16 lo, hi;
    switch (e->code) {
    case 1:   /* relu: v < 0 ? 0 : v (NaN stays) */
        return blend(_mm512_cmp_ps_mask(v, z, _CMP_LT_OQ), v, z);
    case 2:   /* clamp: v < p0 ? p0 : (v > p1 ? p1 : v) */
        lo = _mm512_cmp_ps_mask(v, _mm512_set1_ps(e->p0), _CMP_LT_OQ);
        hi = _mm512_cmp_ps_mask(v, _mm512_set1_ps(e->p1), _CMP_GT_OQ);
        v = blend(hi, v, _mm512_set1_ps(e->p1));
        return blend(lo, v, _mm512_set1_ps(e->p0));
    case 3:   /* leaky_relu: pos + neg * alpha */
    case 4:   /* prelu: pos + neg * slope[c] */
        lo = _mm512_cmp_ps_mask(v, z, _CMP_LT_OQ);
        return _mm512_add_ps(blend(lo, v, z), _mm512_mul_ps(_mm512_maskz_mov_ps(lo, v),
                                                           e->code == 3 ? _mm512_set1_ps(e->p0) : s));
    case 7:   /* hard_sigmoid: clip(v * alpha + beta, 0, 1) */
        g = _mm512_add_ps(_mm512_mul_ps(v, _mm512_set1_ps(e->p0)), _mm512_set1_ps(e->p1));
        g = blend(_mm512_cmp_ps_mask(g, one, _CMP_GT_OQ), g, one);
        return blend(_mm512_cmp_ps_mask(g, z, _CMP_LT_OQ), g, z);
    case 8:   /* hard_swish: v * clip(v / 6 + 0.5, 0, 1) */
        g = _mm512_add_ps(_mm512_mul_ps(v, _mm512_set1_ps((float)(1.0 / 6.0))), _mm512_set1_ps(0.5f));
        g = blend(_mm512_cmp_ps_mask(g, one, _CMP_GT_OQ), g, one);
        g = blend(_mm512_cmp_ps_mask(g, z, _CMP_LT_OQ), g, z);
        return _mm512_mul_ps(v, g);
    default:
        return v;
    }
}

#ifdef MRVL_AVX2
/* fp16 rounding of 8 lanes (F16C); rne16 of a register pair half by half: the pair form through
 * _native_avx2.h's 16-lane vcvtps2ph joined the halves (vinserti128) only to split them again */
static inline __attribute__((always_inline)) __m256 rne8(__m256 v) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
static inline __attribute__((always_inline)) __m512 rne16(__m512 v) { return mrvl_pair(rne8(v.lo), rne8(v.hi)); }
#else
static inline __attribute__((always_inline)) __m512 rne16(__m512 v) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#endif

/* the epilogue of one channel block [c, c + 16), in registers (loaded once per block, not per value) */
typedef struct {
    __m512 bias, scale, shift, slope, p0, p1;
    int code, has_bias, has_scale, has_shift;
} epv_t;

static inline __attribute__((always_inline)) void epv_load(epv_t *E, const epi_t *e, long c) {
    E->has_bias = e->bias != NULL;
    E->has_scale = e->scale != NULL;
    E->has_shift = e->shift != NULL;
    E->bias = E->has_bias ? _mm512_loadu_ps(e->bias + c) : _mm512_setzero_ps();
    E->scale = E->has_scale ? _mm512_loadu_ps(e->scale + c) : _mm512_setzero_ps();
    E->shift = E->has_shift ? _mm512_loadu_ps(e->shift + c) : _mm512_setzero_ps();
    E->code = e->code;
    E->slope = e->code == 4 ? _mm512_loadu_ps(e->slope + c) : _mm512_set1_ps(e->p0);
    E->p0 = _mm512_set1_ps(e->p0);
    E->p1 = _mm512_set1_ps(e->p1);
}

/* inf or NaN lanes (one vfpclassps: QNaN 0x01, +inf 0x08, -inf 0x10, SNaN 0x80) */
static inline __attribute__((always_inline)) __mmask16 nonfinite(__m512 v) { return _mm512_fpclass_ps_mask(v, 0x99); }

/* finish() with the block's epilogue already in registers: the same values, fewer operations.
 * relu: max(0, v) (vmaxps returns its second operand for a NaN or equal pair: NaN and -0 stay,
 * as in v < 0 ? 0 : v); clamp: min(max(v, lo), hi), ONNX Clip and numpy's clip (hi when lo > hi). */
static inline __attribute__((always_inline)) __m512 finish_v(__m512 v, const epv_t *E, __mmask16 *bad) {
    const __m512 z = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
    __m512 g;
    __mmask16 lo;
    if (E->has_bias)
        v = _mm512_add_ps(v, E->bias);
    if (E->has_scale)
        v = _mm512_mul_ps(v, E->scale);
    if (E->has_shift)
        v = _mm512_add_ps(v, E->shift);
    switch (E->code) {
    case 0:
        break;
    case 1:
        v = _mm512_max_ps(z, v);
        break;
    case 2:
        v = _mm512_min_ps(E->p1, _mm512_max_ps(E->p0, v));
        break;
    case 3:
    case 4:   /* slope holds alpha (3) or the per-channel slopes (4) */
        lo = _mm512_cmp_ps_mask(v, z, _CMP_LT_OQ);
        v = _mm512_add_ps(blend(lo, v, z), _mm512_mul_ps(_mm512_maskz_mov_ps(lo, v), E->slope));
        break;
    case 7:
        g = _mm512_add_ps(_mm512_mul_ps(v, E->p0), E->p1);
        v = _mm512_max_ps(z, _mm512_min_ps(one, g));
        break;
    case 8:
        g = _mm512_add_ps(_mm512_mul_ps(v, _mm512_set1_ps((float)(1.0 / 6.0))), _mm512_set1_ps(0.5f));
        g = _mm512_max_ps(z, _mm512_min_ps(one, g));
        v = _mm512_mul_ps(v, g);
        break;
    default:  /* < 0: the caller applies the activation and the rounding */
        return v;
    }
    v = rne16(v);
    *bad |= nonfinite(v);
    return v;
}

/* the finished value of one vector of channels [c, c + 16) (epilogue loaded for it alone) */
static inline __attribute__((always_inline)) __m512 finish(__m512 v, const epi_t *e, long c, __mmask16 *bad) {
    epv_t E;
    epv_load(&E, e, c);
    return finish_v(v, &E, bad);
}

/* acc[r] += A[r, p] * B[p] for p < kc, in order: the register tile's FMAs. With ``prefetch`` the
 * weight block ``pf`` (the next channel block's, read by the next tile) is brought into L2 on the
 * way, two prefetches per k. Only a block's first tile prefetches: the others used to prefetch
 * their own weights (two load slots per 24 FMAs for nothing; -3 to -7% on ResNet-50's 56x56 and
 * 28x28 1x1 convs, single-threaded) */
/* acc += b * broadcast(*p) as one FMA with an embedded broadcast of its memory operand ({1to16}) */
#if !defined(MRVL_AVX2) && !defined(MRVL_EMULATED)
#define FMA_BCAST(acc, bv, p) __asm__("vfmadd231ps %[m]%{1to16%}, %[b], %[c]" : [c] "+v"(acc) : [b] "v"(bv), [m] "m"(*(const float *)(p)))
#define FMA_BCAST8(acc, bv, p) __asm__("vfmadd231ps %[m]%{1to8%}, %[b], %[c]" : [c] "+v"(acc) : [b] "v"(bv), [m] "m"(*(const float *)(p)))
#elif !defined(MRVL_AVX2)   /* the emulated AVX-512 build (_native_simde.h): the same single FMA, no asm */
#define FMA_BCAST(acc, bv, p) ((acc) = _mm512_fmadd_ps((bv), _mm512_set1_ps(*(const float *)(p)), (acc)))
#define FMA_BCAST8(acc, bv, p) ((acc) = _mm256_fmadd_ps((bv), _mm256_set1_ps(*(const float *)(p)), (acc)))
#endif
/* a row's two FMAs of one k (acc0 += b0 * A, acc1 += b1 * A) from one broadcast held in a register:
 * 12 broadcasts + 2 weight loads per k of a 12 x 32 tile instead of 24 + 2 with {1to16} operands.
 * A Zen 5 core runs two 512-bit FMAs a cycle but loads into vector registers at about two a cycle,
 * so the 26 loads, not the 24 FMAs, bound the embedded form (ResNet-50's 3x3 convs at 85-88% of
 * the FMA peak; a 12 x 32 tile of K 576 in isolation 99% with this form). The same FMAs, the same
 * bits. */
#if !defined(MRVL_AVX2)
#define FMA_ROW2(acc0, acc1, b0, b1, p) do { \
        __m512 s_ = _mm512_set1_ps(*(const float *)(p)); \
        KEEP_BCAST(s_); \
        (acc0) = _mm512_fmadd_ps((b0), s_, (acc0)); \
        (acc1) = _mm512_fmadd_ps((b1), s_, (acc1)); \
    } while (0)
#if defined(MRVL_EMULATED)
#define KEEP_BCAST(v) ((void)0)
#else
#define KEEP_BCAST(v) __asm__("" : "+v"(v))   /* one vbroadcastss, not two {1to16} operands */
#endif
#else                       /* AVX2: _native_avx2.h's FMA_BCAST on register pairs, as before */
#define FMA_ROW2(acc0, acc1, b0, b1, p) do { FMA_BCAST(acc0, b0, p); FMA_BCAST(acc1, b1, p); } while (0)
#endif
#ifdef MRVL_AVX2
/* v stays in a register: GCC otherwise folded a weight vector's load into each of the FMAs that use
 * it (vfmadd231ps mem), 12 loads + 4 broadcasts per k of fma_rows24's 4 x 3 block against 3 + 4,
 * and the loads, two per cycle, bound the loop (1x1 144 -> 24 at 56x56: 75% of the FMA rate) */
#define KEEP_REG(v) __asm__("" : "+x"(v))

/* fma_rows on 16 ymm registers: the tile's 16-lane column j (of 2) for 6 rows at a time, each
 * through all kc k-values (12 accumulators, 2 weight halves, a broadcast; the 12 x 32 tile would
 * keep 48 halves in memory); each output gets the same FMAs in the same k order: the same sums.
 * A 13-row tile (a 7x7 map's last, MR + 1) runs as 5 + 4 + 4 rows (PATH_ROWS13), not 6 + 6 + 1:
 * the 1-row pass is bound by the FMA latency (2 chains: 4 cycles a k against 6 for 6 rows) */
/* c[r][0, 1] += B[p][0, 16) * A[r, p] for n (<= 6) rows, p < kc in order: the 6 x 16 passes' k loop
 * (a: row r's k-values at a + r lda; b: [kc][NR], the 16 lanes at b) */
static inline __attribute__((always_inline)) void
fma_k16(const int n, int kc, const float *a, long lda, const float *b, __m256 c[][2], const float *pf) {
    for (int p = 0; p < kc; p++) {
        if (pf) {
            _mm_prefetch((const char *)(pf + (long)p * NR), _MM_HINT_T1);
            _mm_prefetch((const char *)(pf + (long)p * NR + 16), _MM_HINT_T1);
        }
        __m256 b0 = _mm256_loadu_ps(b + (long)p * NR), b1 = _mm256_loadu_ps(b + (long)p * NR + 8);
        KEEP_REG(b0);      /* 4-row passes: 8 FMAs, 8 + 4 loads per k */
        KEEP_REG(b1);
#pragma GCC unroll 6
        for (int r = 0; r < n; r++) {
            const __m256 s = _mm256_broadcast_ss(a + r * lda + p);
            c[r][0] = _mm256_fmadd_ps(b0, s, c[r][0]);
            c[r][1] = _mm256_fmadd_ps(b1, s, c[r][1]);
        }
    }
}

static inline __attribute__((always_inline)) void
fma_pass(const int n, int r0, int kc, const float *a, long lda, const float *b, int j, __m512 acc[][2],
         const float *pf) {
    __m256 c[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < n; r++)
        c[r][0] = acc[r0 + r][j].lo, c[r][1] = acc[r0 + r][j].hi;
    fma_k16(n, kc, a + r0 * lda, lda, b + 16 * j, c, pf);
#pragma GCC unroll 6
    for (int r = 0; r < n; r++)
        acc[r0 + r][j].lo = c[r][0], acc[r0 + r][j].hi = c[r][1];
}

static inline __attribute__((always_inline)) void
fma_rows(const int mr, const int prefetch, int kc, const float *a, long lda, const float *b, const float *pf,
         __m512 acc[][2]) {
    /* the first pass prefetches, two lines per k between its FMAs: all of them before the FMAs (768
     * for an FC of K 384) held the tile back while the lines came from memory; in the k loop, an
     * FC's weights streamed from memory (MiniLM's 36 FCs of 50 rows, cold) took 8-9% less CPU */
    const float *pf0 = prefetch ? pf : NULL;
    if (mr == MR + 1 && (new_paths & PATH_ROWS13)) {
        for (int j = 0; j < 2; j++) {
            fma_pass(5, 0, kc, a, lda, b, j, acc, j ? NULL : pf0);
            fma_pass(4, 5, kc, a, lda, b, j, acc, NULL);
            fma_pass(4, 9, kc, a, lda, b, j, acc, NULL);
        }
        return;
    }
    for (int j = 0; j < 2; j++) {      /* mr <= 13: passes of 6, 6 and the rest, sizes known when compiled */
        fma_pass(mr < 6 ? mr : 6, 0, kc, a, lda, b, j, acc, j ? NULL : pf0);
        if (mr > 6)
            fma_pass(mr < 12 ? mr - 6 : 6, 6, kc, a, lda, b, j, acc, NULL);
        if (mr > 12)
            fma_pass(mr - 12, 12, kc, a, lda, b, j, acc, NULL);
    }
}

/* The narrow tiles' FMAs on 16 ymm registers: acc[r * as + v] += B[p][8 v ..] * A[r, p] for the
 * first nv (1-3) 8-lane vectors of each of mr rows (accumulators as vectors apart), 12 / nv rows at a
 * time through all kc k-values (12 accumulators; the 512-bit tiles of 24 rows x 1 vector, 12 x 1
 * and 12 x 1.5 kept 24-48 halves in memory). Each output gets the same FMAs in the same k order:
 * the same sums. a: row r's k-values at a + r lda; b: [kc][NR]. */
static inline __attribute__((always_inline)) void
fma_cols8(const int mr, const int nv, const int as, const int prefetch, int kc, const float *a, long lda,
          const float *b, const float *pf, __m256 *acc) {
    const int rb = 12 / nv;
    for (int r0 = 0; r0 < mr; r0 += rb) {
        __m256 c[12];
#pragma GCC unroll 12
        for (int r = 0; r < rb; r++)
#pragma GCC unroll 3
            for (int v = 0; v < nv; v++)
                if (r0 + r < mr)
                    c[r * nv + v] = acc[(r0 + r) * as + v];
        const float *ar = a + r0 * lda;
        for (int p = 0; p < kc; p++) {
            if (prefetch && r0 == 0) {     /* the first rows' pass, as fma_rows */
                _mm_prefetch((const char *)(pf + (long)p * NR), _MM_HINT_T1);
                _mm_prefetch((const char *)(pf + (long)p * NR + 16), _MM_HINT_T1);
            }
            __m256 bv[3];
#pragma GCC unroll 3
            for (int v = 0; v < nv; v++) {
                bv[v] = _mm256_loadu_ps(b + (long)p * NR + 8 * v);
                KEEP_REG(bv[v]);
            }
#pragma GCC unroll 12
            for (int r = 0; r < rb; r++)
                if (r0 + r < mr) {
                    const __m256 s = _mm256_broadcast_ss(ar + r * lda + p);
#pragma GCC unroll 3
                    for (int v = 0; v < nv; v++)
                        c[r * nv + v] = _mm256_fmadd_ps(bv[v], s, c[r * nv + v]);
                }
        }
#pragma GCC unroll 12
        for (int r = 0; r < rb; r++)
#pragma GCC unroll 3
            for (int v = 0; v < nv; v++)
                if (r0 + r < mr)
                    acc[(r0 + r) * as + v] = c[r * nv + v];
    }
}

/* sweep_block's register tile: c[r][0, 16) (row stride ldc) = (first ? 0 : c) + sum over p < kc of
 * a[r lda + p] * b[p NR + (0, 16)] for mr (1-6) rows, in k order: fma_rows' FMAs for those lanes */
#define SWEEP_K 128      /* k per slice: its 16-lane weight slice (8 KB) and 6 rows (3 KB) in L1 */
static inline __attribute__((always_inline)) void
sweep_tile(const int mr, int kc, const float *a, long lda, const float *b, float *c, long ldc, int first) {
    __m256 acc[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        acc[r][0] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(c + r * ldc);
        acc[r][1] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(c + r * ldc + 8);
    }
    fma_k16(mr, kc, a, lda, b, acc, NULL);
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        _mm256_storeu_ps(c + r * ldc, acc[r][0]);
        _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
    }
}
typedef void (*sweep_fn)(int kc, const float *a, long lda, const float *b, float *c, long ldc, int first);
#define SWEEP_SET(MR_) \
    static HOT_LOOPS void sweep_tile##MR_(int kc, const float *a, long lda, const float *b, float *c, long ldc, \
                                          int first) { sweep_tile(MR_, kc, a, lda, b, c, ldc, first); }
SWEEP_SET(1) SWEEP_SET(2) SWEEP_SET(3) SWEEP_SET(4) SWEEP_SET(5) SWEEP_SET(6)
static const sweep_fn sweep_tiles[7] = {NULL, sweep_tile1, sweep_tile2, sweep_tile3, sweep_tile4, sweep_tile5,
                                        sweep_tile6};
#else
static inline __attribute__((always_inline)) void
fma_rows(const int mr, const int prefetch, int kc, const float *a, long lda, const float *b, const float *pf,
         __m512 acc[][2]) {
    for (int p = 0; p < kc; p++) {
        if (prefetch) {
            _mm_prefetch((const char *)(pf + (long)p * NR), _MM_HINT_T1);
            _mm_prefetch((const char *)(pf + (long)p * NR + 16), _MM_HINT_T1);
        }
        const __m512 b0 = _mm512_loadu_ps(b + (long)p * NR), b1 = _mm512_loadu_ps(b + (long)p * NR + 16);
#pragma GCC unroll 13
        for (int r = 0; r < mr; r++) {
            FMA_ROW2(acc[r][0], acc[r][1], b0, b1, a + r * lda + p);
        }
    }
}
#endif

/* fma_rows for a block of 17-24 columns: the second vector's 8 live lanes (the rest are masked off
 * at the store) in 256-bit FMAs, which this Zen 4 runs two per cycle against one 512-bit FMA: 18
 * FMA cycles per k of a 12-row tile instead of 24 (MobileNetV2's 24-channel projections). Lanes 0-7
 * get the same FMAs in the same order: the same sums. */
#ifdef MRVL_AVX2
/* on AVX2: lanes 0-23 of each row (three ymm, the row's fourth half left as it is: zero), 4 rows
 * at a time (fma_cols8) */
static inline __attribute__((always_inline)) void
fma_rows24(const int mr, const int prefetch, int kc, const float *a, long lda, const float *b, const float *pf,
           __m512 acc[][2]) {
    fma_cols8(mr, 3, 4, prefetch, kc, a, lda, b, pf, (__m256 *)acc);
}
#else
static inline __attribute__((always_inline)) void
fma_rows24(const int mr, const int prefetch, int kc, const float *a, long lda, const float *b, const float *pf,
           __m512 acc[][2]) {
    __m256 h[MR + 1];
#pragma GCC unroll 13
    for (int r = 0; r < mr; r++)
        h[r] = _mm512_castps512_ps256(acc[r][1]);
    for (int p = 0; p < kc; p++) {
        if (prefetch) {
            _mm_prefetch((const char *)(pf + (long)p * NR), _MM_HINT_T1);
            _mm_prefetch((const char *)(pf + (long)p * NR + 16), _MM_HINT_T1);
        }
        const __m512 b0 = _mm512_loadu_ps(b + (long)p * NR);
        const __m256 b1 = _mm256_loadu_ps(b + (long)p * NR + 16);
#pragma GCC unroll 13
        for (int r = 0; r < mr; r++) {
            __m512 s_ = _mm512_set1_ps(a[r * lda + p]);     /* one broadcast for both (FMA_ROW2) */
            KEEP_BCAST(s_);
            acc[r][0] = _mm512_fmadd_ps(b0, s_, acc[r][0]);
            h[r] = _mm256_fmadd_ps(b1, _mm512_castps512_ps256(s_), h[r]);
        }
    }
#pragma GCC unroll 13
    for (int r = 0; r < mr; r++)
        acc[r][1] = _mm512_zextps256_ps512(h[r]);
}
#endif

/* The epilogue of a tile whose conv has a bias, no scale or shift, and no activation, relu or
 * clamp, and whose fused Sum2D (if any) has none of bias, scale, shift and the same activations
 * (ResNet's convs and residual adds after BatchNorm folding): v + bias, then min(hi, max(lo, v))
 * with (lo, hi) = (-inf, +inf), (0, +inf) or the clamp's bounds -- bit for bit finish_v's none /
 * relu / clamp: vmaxps and vminps return their second operand v for a NaN or an equal pair, so
 * max(-inf, v) and min(+inf, v) are v itself -- then the fp16 rounding and the finiteness flag.
 * Fewer operations than finish_v's general form (no switch per vector, four vectors held instead
 * of twelve), so the row loop is unrolled and the accumulators stay in registers. */
static inline void act_bounds(const epi_t *e, __m512 *lo, __m512 *hi) {
    const float inf = __builtin_inff();
    *lo = _mm512_set1_ps(e->code == 2 ? e->p0 : (e->code == 1 ? 0.0f : -inf));
    *hi = _mm512_set1_ps(e->code == 2 ? e->p1 : inf);
}

static inline int simple_epilogue(const epi_t *e, const float *res, const epi_t *e2) {
    return e->bias && !e->scale && !e->shift && e->code >= 0 && e->code <= 2
           && (!res || (!e2->bias && !e2->scale && !e2->shift && e2->code >= 0 && e2->code <= 2));
}

#ifdef MRVL_AVX2
/* min(hi, max(lo, v)) of act_bounds without its no-op halves: none (code 0: max(-inf, v) and
 * min(+inf, v) are v itself, NaN included) is v, relu (lo = 0, hi = +inf) max(lo, v) */
static inline __attribute__((always_inline)) __m256 bound8(__m256 v, int code, __m256 lo, __m256 hi) {
    return code == 2 ? _mm256_min_ps(hi, _mm256_max_ps(lo, v)) : code == 1 ? _mm256_max_ps(lo, v) : v;
}

/* simple_store of whole blocks on the last k block, 8 lanes at a time on AVX2: the same operations
 * per value in the same order (v + bias first operand first, the bounds, F16C rounding; then
 * + residual, its bounds, rounding), without the no-op bounds, and the finiteness test as a running
 * unsigned max of the bits shifted left by one (the sign out: a value is inf / NaN iff that is
 * >= 0xff000000, its exponent all ones), tested once per tile, instead of a compare, a vmovmskps
 * and a scalar or per vector: the epilogue (with ResNet's fused residual ~40% of a 1x1
 * expansion's samples) in ~24 instead of ~46 operations per 16 values. Compiled with and without
 * the residual (a run-time test per vector reloaded its pointer). Only whether a flag is set
 * matters to the callers (TILE_BODY). */
static inline __attribute__((always_inline)) void
store_full8(const int mr, const int has_res, __m512 acc[][2], float *c, long ldc, int rows, const epi_t *e, int col0,
            __mmask16 *bad, const float *res, const epi_t *e2, __mmask16 *bad2) {
    __m512 lo, hi, lo2 = _mm512_setzero_ps(), hi2 = lo2;
    act_bounds(e, &lo, &hi);
    if (has_res)
        act_bounds(e2, &lo2, &hi2);
    const int k1 = e->code, k2 = has_res ? e2->code : 0;
    __m256 b[4];
#pragma GCC unroll 4
    for (int h = 0; h < 4; h++)
        b[h] = _mm256_loadu_ps(e->bias + col0 + 8 * h);
    __m256i x1 = _mm256_setzero_si256(), x2 = x1;
#pragma GCC unroll 13
    for (int r = 0; r < mr; r++) {
        if (r >= rows)
            break;
        const __m256 a[4] = {acc[r][0].lo, acc[r][0].hi, acc[r][1].lo, acc[r][1].hi};
#pragma GCC unroll 4
        for (int h = 0; h < 4; h++) {
            __m256 v = rne8(bound8(mrvl_add8(a[h], b[h]), k1, lo.lo, hi.lo));
            x1 = _mm256_max_epu32(x1, _mm256_slli_epi32(_mm256_castps_si256(v), 1));
            if (has_res) {
                v = rne8(bound8(mrvl_add8(v, _mm256_loadu_ps(res + r * ldc + 8 * h)), k2, lo2.lo, hi2.lo));
                x2 = _mm256_max_epu32(x2, _mm256_slli_epi32(_mm256_castps_si256(v), 1));
            }
            _mm256_storeu_ps(c + r * ldc + 8 * h, v);
        }
    }
    const __m256i inf = _mm256_set1_epi32((int)0xff000000u);
    if (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_max_epu32(x1, inf), x1))))
        *bad |= 1;
    if (has_res && _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_max_epu32(x2, inf), x2))))
        *bad2 |= 1;
}
#endif

/* micro_lda's short epilogue (simple_epilogue holds) and store of a tile's rows x (m0, m1) columns;
 * ``full``: both vectors whole (compiled apart: unmasked loads and stores, no test of m1 per row) */
static inline __attribute__((always_inline)) void
simple_store(const int mr, const int full, __m512 acc[][2], float *c, long ldc, int rows, __mmask16 m0, __mmask16 m1,
             int last, const epi_t *e, int col0, __mmask16 *bad, const float *res, const epi_t *e2, __mmask16 *bad2) {
#ifdef MRVL_AVX2
    if (full && last && (new_paths & PATH_STORE8)) {
        if (res)
            store_full8(mr, 1, acc, c, ldc, rows, e, col0, bad, res, e2, bad2);
        else
            store_full8(mr, 0, acc, c, ldc, rows, e, col0, bad, NULL, e2, bad2);
        return;
    }
#endif
    __m512 b0 = _mm512_setzero_ps(), b1 = b0, lo = b0, hi = b0, lo2 = b0, hi2 = b0;
    if (last) {
        b0 = _mm512_loadu_ps(e->bias + col0);
        b1 = _mm512_loadu_ps(e->bias + col0 + 16);
        act_bounds(e, &lo, &hi);
        if (res)
            act_bounds(e2, &lo2, &hi2);
    }
    __mmask16 lb = 0, lb2 = 0;
#pragma GCC unroll 13
    for (int r = 0; r < mr; r++) {
        if (r >= rows)
            break;
        __m512 v0 = acc[r][0], v1 = acc[r][1];
        if (last) {
            v0 = rne16(_mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_add_ps(v0, b0))));
            lb = _kor_mask16(lb, full ? nonfinite(v0) : _kand_mask16(nonfinite(v0), m0));
            if (full || m1) {
                v1 = rne16(_mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_add_ps(v1, b1))));
                lb = _kor_mask16(lb, full ? nonfinite(v1) : _kand_mask16(nonfinite(v1), m1));
            }
            if (res) {       /* fused Sum2D: fp16 conv value + residual, its activation, fp16 */
                const __m512 r0 = full ? _mm512_loadu_ps(res + r * ldc) : _mm512_maskz_loadu_ps(m0, res + r * ldc);
                v0 = rne16(_mm512_min_ps(hi2, _mm512_max_ps(lo2, _mm512_add_ps(v0, r0))));
                lb2 = _kor_mask16(lb2, full ? nonfinite(v0) : _kand_mask16(nonfinite(v0), m0));
                if (full || m1) {
                    const __m512 r1 = full ? _mm512_loadu_ps(res + r * ldc + 16)
                                           : _mm512_maskz_loadu_ps(m1, res + r * ldc + 16);
                    v1 = rne16(_mm512_min_ps(hi2, _mm512_max_ps(lo2, _mm512_add_ps(v1, r1))));
                    lb2 = _kor_mask16(lb2, full ? nonfinite(v1) : _kand_mask16(nonfinite(v1), m1));
                }
            }
        }
        if (full) {
            _mm512_storeu_ps(c + r * ldc, v0);
            _mm512_storeu_ps(c + r * ldc + 16, v1);
        } else {
            _mm512_mask_storeu_ps(c + r * ldc, m0, v0);
            if (m1)
                _mm512_mask_storeu_ps(c + r * ldc + 16, m1, v1);
        }
    }
    *bad |= lb;
    *bad2 |= lb2;
}

/* C[rows x cols] (+)= A-panel [MR][KC] (row stride LDP) x B-panel [kc][NR]; on the last k block
 * the epilogue is applied before the store (``simple``: simple_epilogue holds). */
static inline __attribute__((always_inline)) void
micro_lda(const int mr, const int simple, int kc, const float *a, long lda, const float *b, float *c, long ldc, int rows, int cols,
          int first, int last, const epi_t *e, int col0, __mmask16 *bad,
          const float *res, const epi_t *e2, __mmask16 *bad2, const float *pf,
          const int win, int kh, int rowlen, long ystride) {
    __m512 acc[MR + 1][2];
    const __mmask16 m0 = cols >= 16 ? 0xFFFF : (__mmask16)((1u << cols) - 1);
    const __mmask16 m1 = cols >= 32 ? 0xFFFF : (cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1));
#pragma GCC unroll 13
    for (int r = 0; r < mr; r++) {
        if (first || r >= rows) {
            acc[r][0] = _mm512_setzero_ps();
            acc[r][1] = _mm512_setzero_ps();
        } else {
            acc[r][0] = _mm512_maskz_loadu_ps(m0, c + r * ldc);
            acc[r][1] = _mm512_maskz_loadu_ps(m1, c + r * ldc + 16);
        }
    }
    if (simple && last && res) {
        /* the residual rows into L1 while the FMAs run: the unrolled epilogue below reads them in
         * one burst, and a 56x56 map's residual (3.2 MB) comes from L3 (ResNet-50's 64 -> 256
         * expansions: +8-10% without, -3% with) */
#pragma GCC unroll 13
        for (int r = 0; r < mr; r++)
            if (r < rows) {
                _mm_prefetch((const char *)(res + r * ldc), _MM_HINT_T0);
                _mm_prefetch((const char *)(res + r * ldc + 16), _MM_HINT_T0);
            }
    }
    if (simple && last && first) {
        /* the output rows' lines, for writing, while the FMAs run (64 -> 256 at 56x56 with a fused
         * residual -2.5% in micro_direct_simple; plain: no change) */
#pragma GCC unroll 13
        for (int r = 0; r < mr; r++)
            if (r < rows) {
                _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_ET0);
                _mm_prefetch((const char *)(c + r * ldc + 16), _MM_HINT_ET0);
            }
    }
    if (win) {               /* windows in place: kernel row ky's taps are rowlen floats at a + ky * ystride */
        for (int ky = 0; ky < kh; ky++)
            if (pf)
                fma_rows(mr, 1, rowlen, a + ky * ystride, lda, b + (long)ky * rowlen * NR, pf + (long)ky * rowlen * NR, acc);
            else
                fma_rows(mr, 0, rowlen, a + ky * ystride, lda, b + (long)ky * rowlen * NR, NULL, acc);
    } else if (m1 && !(m1 >> 8) && (new_paths & PATH_HALF)) {    /* 17-24 columns */
        if (pf)
            fma_rows24(mr, 1, kc, a, lda, b, pf, acc);
        else
            fma_rows24(mr, 0, kc, a, lda, b, NULL, acc);
    } else if (m1 && pf)
        fma_rows(mr, 1, kc, a, lda, b, pf, acc);
    else if (m1)             /* a block's later tiles: their weights are in the caches already */
        fma_rows(mr, 0, kc, a, lda, b, NULL, acc);
    else {                 /* at most 16 columns (O = 16, the tail block of O = 144): half the FMAs */
#ifdef MRVL_AVX2
        if (new_paths & PATH_AVX2_TILES)
            fma_cols8(mr, 2, 4, 0, kc, a, lda, b, NULL, (__m256 *)acc);      /* lanes 0-15 of each row */
        else
#endif
        for (int p = 0; p < kc; p++) {
            const __m512 b0 = _mm512_loadu_ps(b + (long)p * NR);
#pragma GCC unroll 13
            for (int r = 0; r < mr; r++)
                acc[r][0] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + p]), b0, acc[r][0]);
        }
    }
    if (simple) {
        if (m0 == 0xFFFF && m1 == 0xFFFF)   /* a whole block: unmasked loads and stores */
            simple_store(mr, 1, acc, c, ldc, rows, 0xFFFF, 0xFFFF, last, e, col0, bad, res, e2, bad2);
        else
            simple_store(mr, 0, acc, c, ldc, rows, m0, m1, last, e, col0, bad, res, e2, bad2);
        return;
    }
    /* The loop below indexes the rows at run time. Indexed so, acc itself lived in the stack and
     * the k loop stored all 24-26 accumulators at every k (a 3x3 64 -> 64 conv at 40x40 with SiLU,
     * LeakyRelu or HardSwish took 2.6x its time with ReLU on AVX-512). Copied out once with fixed
     * indices, acc stays in registers through the FMAs; the values are the same. */
    __m512 tile[MR + 1][2];
#pragma GCC unroll 13
    for (int r = 0; r < mr; r++) {
        tile[r][0] = acc[r][0];
        tile[r][1] = acc[r][1];
    }
    epv_t E0 = {0}, E1 = {0}, F0 = {0}, F1 = {0};
    if (last) {
        epv_load(&E0, e, col0);
        epv_load(&E1, e, col0 + 16);
        if (res) {
            epv_load(&F0, e2, col0);
            epv_load(&F1, e2, col0 + 16);
        }
    }
    /* the non-finite lanes gather in registers, written once (through *bad per row, a load-or-store
     * chain ran through every row of the tile) */
    __mmask16 bt = 0, bt2 = 0;
    for (int r = 0; r < rows; r++) {
        __m512 v0 = tile[r][0], v1 = tile[r][1];
        if (last) {
            __mmask16 bad0 = 0, bad1 = 0;
            v0 = finish_v(v0, &E0, &bad0);
            if (m1)
                v1 = finish_v(v1, &E1, &bad1);
            bt |= (bad0 & m0) | (bad1 & m1);
            if (res) {           /* fused Sum2D: fp16 conv value + residual, its activation, fp16 */
                bad0 = bad1 = 0;
                v0 = finish_v(_mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, res + r * ldc)), &F0, &bad0);
                if (m1)
                    v1 = finish_v(_mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, res + r * ldc + 16)), &F1, &bad1);
                bt2 |= (bad0 & m0) | (bad1 & m1);
            }
        }
        _mm512_mask_storeu_ps(c + r * ldc, m0, v0);
        if (m1)
            _mm512_mask_storeu_ps(c + r * ldc + 16, m1, v1);
    }
    *bad |= bt;
    if (res)
        *bad2 |= bt2;
}

/* What the tiles of one channel block and k block share, passed by address: a tile call then takes
 * five arguments in registers. With the 17 of micro_lda (11 pushed on the stack per call) and the
 * tile loop's pointers kept on the stack, every tile issued ~25 stores behind its 24 output stores;
 * when those miss the caches (a 56x56 map's 3.2 MB output) the store queue is full and each waits
 * (ResNet-50's 64 -> 256 at 56x56: ~7% of the layer in conv_range's own loop). The tile returns
 * its finiteness flags (bit 0: a conv value not finite, bit 1: a fused-sum value). */
typedef struct {
    const float *b;               /* the weight panel [kc][NR] */
    long ldc, lda;                /* output row stride; A's row stride (in place) */
    const epi_t *e, *e2;
    int kc, cols, first, last, col0;
    int kh, rowlen;               /* windows in place (micro_win): kernel rows, floats per kernel row, */
    long ystride;                 /* floats between kernel rows */
} tile_t;

#define TILE_ARGS const tile_t *t, const float *a, float *c, const float *res, int rows, const float *pf
#define TILE_CALL t, a, c, res, rows, pf
#define TILE_BODY(MR_, S, LDA) TILE_BODY_W(MR_, S, LDA, 0)
#define TILE_BODY_W(MR_, S, LDA, WIN) \
    __mmask16 bad = 0, bad2 = 0; \
    micro_lda(MR_, S, t->kc, a, LDA, t->b, c, t->ldc, rows, t->cols, t->first, t->last, t->e, t->col0, &bad, \
              res, t->e2, &bad2, pf, WIN, t->kh, t->rowlen, t->ystride); \
    return (bad ? 1 : 0) | (bad2 ? 2 : 0);
/* A from the packed buffer (row stride LDP, a constant: one base register for all rows). The
 * register tile is compiled for 12, 8, 4 and 2 rows, so a partial panel (a 7x7 map's 49 pixels end
 * in one of 1 row) runs only the FMAs of the rows it has; the sums are the same. One or two rows
 * are bound by the FMA latency (2-4 chains), not the FMA rate: 4 cycles per k against the 4-row
 * tile's 8 (ResNet-50's 3x3 512 at 7x7: the 1-row panel took 8% of the layer in the 4-row tile). */
#define MICRO_SET(S, sfx) \
    static HOT_LOOPS int micro13##sfx(TILE_ARGS) { TILE_BODY(13, S, LDP) } \
    static HOT_LOOPS int micro12##sfx(TILE_ARGS) { TILE_BODY(12, S, LDP) } \
    static HOT_LOOPS int micro8##sfx(TILE_ARGS) { TILE_BODY(8, S, LDP) } \
    static HOT_LOOPS int micro4##sfx(TILE_ARGS) { TILE_BODY(4, S, LDP) } \
    static HOT_LOOPS int micro2##sfx(TILE_ARGS) { TILE_BODY(2, S, LDP) } \
    static inline int micro##sfx(TILE_ARGS) { \
        if (rows > MR) return micro13##sfx(TILE_CALL); \
        else if (rows > 8) return micro12##sfx(TILE_CALL); \
        else if (rows > 4) return micro8##sfx(TILE_CALL); \
        else if (rows > 2) return micro4##sfx(TILE_CALL); \
        else return micro2##sfx(TILE_CALL); \
    } \
    /* A read in place (a 1x1, stride-1, unpadded conv: the input rows themselves, row stride \
     * t->lda; full panels of MR or MR + 1 rows) */ \
    static HOT_LOOPS int micro_direct##sfx(TILE_ARGS) { \
        if (rows > MR) { TILE_BODY(MR + 1, S, t->lda) } \
        else { TILE_BODY(MR, S, t->lda) } \
    } \
    /* MR pixels of one output row whose windows lie inside the input, read in place: pixel r's \
     * kernel row ky is the rowlen floats at a + ky * ystride + r * step (see conv_range) */ \
    static HOT_LOOPS int micro_win6##sfx(TILE_ARGS) { TILE_BODY_W(MR, S, 6, 1) } \
    static HOT_LOOPS int micro_win6_4##sfx(TILE_ARGS) { TILE_BODY_W(4, S, 6, 1) } \
    static HOT_LOOPS int micro_win6_8##sfx(TILE_ARGS) { TILE_BODY_W(8, S, 6, 1) } \
    static HOT_LOOPS int micro_win64##sfx(TILE_ARGS) { TILE_BODY_W(MR, S, 64, 1) } \
    static HOT_LOOPS int micro_win128##sfx(TILE_ARGS) { TILE_BODY_W(MR, S, 128, 1) } \
    static HOT_LOOPS int micro_win256##sfx(TILE_ARGS) { TILE_BODY_W(MR, S, 256, 1) } \
    static inline int micro_win##sfx(TILE_ARGS, long step) { \
        return step == 6 ? micro_win6##sfx(TILE_CALL) : step == 64 ? micro_win64##sfx(TILE_CALL) \
             : step == 128 ? micro_win128##sfx(TILE_CALL) : micro_win256##sfx(TILE_CALL); \
    }
/* windows read in place: consecutive pixels' windows start ``step`` = stride x channels floats
 * apart, compiled as a constant so that the 12 broadcasts of a k address a + r * step * 4 bytes off
 * one base register: 6 (3-channel stride-2 stems: ResNet's 7x7, MobileNet's 3x3), 64, 128, 256
 * (3x3 convs). Each pixel still sums its k = (ky, kx, c) in order against the same weight panel,
 * all of K in one tile (no k blocks: nothing packed to bound): the packed path's values. */
MICRO_SET(0, _gen)
MICRO_SET(1, _simple)

/* ------------------------------------------------------------------ in-place 1x1 tiles, pipelined
 * A run of whole 12 x 32 tiles of an in-place 1x1 conv (conv_range's ``direct``) with one k block
 * and the short epilogue (simple_epilogue). micro_direct_simple ends each tile in its epilogue: 24
 * (48 with a fused Sum2D) vectors of bias, bounds, two conversions (the fp16 rounding), the
 * finiteness test and a store, ~400 operations that the out-of-order window cannot overlap with
 * the next tile's FMAs (ResNet-50's 64 -> 256 at 56x56, K = 64: ~20% of the layer's time beside
 * 72% in the FMA loop). Here a tile's sums go to a scratch tile in L1 and its epilogue runs one
 * vector per two k of the next tile's FMA loop, where it uses the pipes the FMAs leave idle. Each
 * value gets the same operations on the same sums: the same bits. */
typedef struct {
    const float *bias;            /* the block's 32 biases */
    __m512 lo, hi, lo2, hi2;      /* the conv's and the fused sum's bounds (act_bounds) */
    long ldc;
    int res;                      /* a fused Sum2D */
    int kind;                     /* compiled: PIPE_ANY, PIPE_SUM_RELU or PIPE_RELU */
} pipe_epi_t;

/* ResNet's two epilogues compiled apart, without the bounds that are no-ops: a conv without
 * activation whose fused sum has relu (the bottleneck's expansion), a conv with relu and no sum;
 * relu stays max(0, v) in that operand order (NaN and -0 kept: act_bounds' lo = 0) */
#define PIPE_ANY 0
#define PIPE_SUM_RELU 1
#define PIPE_RELU 2

/* the epilogue of vector q (row q / 2, columns 16 (q % 2) ...) of a pending tile: simple_store's */
static inline __attribute__((always_inline)) void
pipe_one(const pipe_epi_t *P, const float *pend, float *pc, const float *pr, int q, __mmask16 *lb, __mmask16 *lb2) {
    const long off = (long)(q >> 1) * P->ldc + (q & 1) * 16;
    const __m512 z = _mm512_setzero_ps();
    __m512 v = _mm512_add_ps(_mm512_load_ps(pend + q * 16), _mm512_loadu_ps(P->bias + (q & 1) * 16));
    if (P->kind == PIPE_ANY)
        v = _mm512_min_ps(P->hi, _mm512_max_ps(P->lo, v));
    else if (P->kind == PIPE_RELU)
        v = _mm512_max_ps(z, v);
    v = rne16(v);
    *lb = _kor_mask16(*lb, nonfinite(v));
    if (P->kind == PIPE_SUM_RELU || (P->kind == PIPE_ANY && P->res)) {
        v = _mm512_add_ps(v, _mm512_loadu_ps(pr + off));
        v = P->kind == PIPE_ANY ? _mm512_min_ps(P->hi2, _mm512_max_ps(P->lo2, v)) : _mm512_max_ps(z, v);
        v = rne16(v);
        *lb2 = _kor_mask16(*lb2, nonfinite(v));
    }
    _mm512_storeu_ps(pc + off, v);
}

/* the lines of vector q of this tile's output (for writing) and residual, which its epilogue
 * (in the next tile's loop) stores and reads: one line each per slot, not 48 prefetches at the
 * tile's start (the L1's miss buffers are fewer: the residual's loads still missed, 36% of the
 * samples of ResNet-50's 64 -> 256 at 56x56 on the instruction after them) */
static inline __attribute__((always_inline)) void pipe_ahead(const pipe_epi_t *P, float *c, const float *res, int q) {
    const long off = (long)(q >> 1) * P->ldc + (q & 1) * 16;
    _mm_prefetch((const char *)(c + off), _MM_HINT_ET0);
    if (P->kind == PIPE_SUM_RELU || (P->kind == PIPE_ANY && P->res))
        _mm_prefetch((const char *)(res + off), _MM_HINT_T0);
}

/* one tile's FMAs (rows a, lda apart; weights b [kc][NR]), the pending tile's 2 * MR epilogue
 * vectors (npend: 0 or 2 * MR) one per two k, or spread evenly over the loop when kc < 4 * MR (they
 * were one per odd k and the rest after the loop: 16 of 24 after a K = 16 tile's; MobileNetV2's
 * expansions of K 16-32 at 112x112 and 56x56 -8%, one thread); the same slots prefetch this tile's
 * output c and residual res */
static inline __attribute__((always_inline)) void
pipe_tile(const int prefetch, int kc, const float *a, long lda, const float *b, const float *pf, __m512 acc[][2],
          const pipe_epi_t *P, const float *pend, float *pc, const float *pr, int npend, __mmask16 *lb, __mmask16 *lb2,
          float *c, const float *res) {
    int q = 0;
    for (int p = 0; p < kc; p++) {
        if (prefetch) {
            _mm_prefetch((const char *)(pf + (long)p * NR), _MM_HINT_T1);
            _mm_prefetch((const char *)(pf + (long)p * NR + 16), _MM_HINT_T1);
        }
        const __m512 b0 = _mm512_loadu_ps(b + (long)p * NR), b1 = _mm512_loadu_ps(b + (long)p * NR + 16);
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++) {
            FMA_ROW2(acc[r][0], acc[r][1], b0, b1, a + r * lda + p);
        }
        /* one epilogue vector per two k (kc >= 4 MR), or all 2 MR spread evenly over a shorter loop */
        const int due = (p + 1) * 2 * MR / (kc < 4 * MR ? kc : 4 * MR);
        while (q < due && q < 2 * MR) {
            pipe_ahead(P, c, res, q);
            if (q < npend)
                pipe_one(P, pend, pc, pr, q, lb, lb2);
            q++;
        }
    }
    for (; q < 2 * MR; q++) {
        pipe_ahead(P, c, res, q);
        if (q < npend)
            pipe_one(P, pend, pc, pr, q, lb, lb2);
    }
}

/* n whole tiles (t->first, t->last, t->cols == NR, one k block): A's rows a, t->lda apart, tile i's
 * output c + i MR ldc (its residual res + i MR ldc); the first tile prefetches pf (micro_lda's) */
static inline __attribute__((always_inline)) int
direct_pipe_lda(const long LDA, const int kind, const tile_t *t, const float *a, float *c, const float *res, int n,
                const float *pf, int nb, long bstride) {
    const long ldc = t->ldc, lda = LDA ? LDA : t->lda;
    pipe_epi_t P = {t->e->bias + t->col0, _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                    _mm512_setzero_ps(), ldc, res != NULL, kind};
    act_bounds(t->e, &P.lo, &P.hi);
    if (res)
        act_bounds(t->e2, &P.lo2, &P.hi2);
    float pend[MR * NR] __attribute__((aligned(64)));
    float *pc = NULL;
    const float *pr = NULL;
    __mmask16 lb = 0, lb2 = 0;
    for (int i = 0; i < n; i++, a += MR * lda, c += MR * ldc, res = res ? res + MR * ldc : NULL)
        for (int jb = 0; jb < nb; jb++) {    /* nb > 1: every channel block of the tile in turn */
            float *cj = c + jb * NR;
            const float *rj = res ? res + jb * NR : NULL;
            __m512 acc[MR][2];
#pragma GCC unroll 12
            for (int r = 0; r < MR; r++)
                acc[r][0] = acc[r][1] = _mm512_setzero_ps();
            const int npend = i || jb ? 2 * MR : 0;
            if (i == 0 && pf)
                pipe_tile(1, t->kc, a, lda, t->b + jb * bstride, pf, acc, &P, pend, pc, pr, npend, &lb, &lb2, cj, rj);
            else
                pipe_tile(0, t->kc, a, lda, t->b + jb * bstride, NULL, acc, &P, pend, pc, pr, npend, &lb, &lb2, cj, rj);
#pragma GCC unroll 12
            for (int r = 0; r < MR; r++) {
                _mm512_store_ps(pend + r * NR, acc[r][0]);
                _mm512_store_ps(pend + r * NR + 16, acc[r][1]);
            }
            pc = cj;
            pr = rj;
            P.bias = t->e->bias + t->col0 + jb * NR;   /* the pending tile's */
        }
    for (int q = 0; n > 0 && q < 2 * MR; q++)
        pipe_one(&P, pend, pc, pr, q, &lb, &lb2);
    return (lb ? 1 : 0) | (lb2 ? 2 : 0);
}
/* A's row stride compiled in for ResNet's expansions (64 .. 512 input channels): the 12 rows' loads
 * address one base register (a run-time stride took 12 index registers, and with the epilogue's
 * pointers beside them the loop reloaded row offsets from the stack) */
#define PIPE_FN(L, KIND, sfx) \
    static HOT_LOOPS int direct_pipe##L##sfx(const tile_t *t, const float *a, float *c, const float *res, int n, \
                                             const float *pf, int nb, long bstride) { \
        return direct_pipe_lda(L, KIND, t, a, c, res, n, pf, nb, bstride); }
#define PIPE_LDA(L) PIPE_FN(L, PIPE_ANY, _any) PIPE_FN(L, PIPE_SUM_RELU, _sum_relu) PIPE_FN(L, PIPE_RELU, _relu) \
    static int direct_pipe##L(const tile_t *t, const float *a, float *c, const float *res, int n, const float *pf, \
                              int nb, long bs) { \
        if (res && t->e->code == 0 && t->e2->code == 1) return direct_pipe##L##_sum_relu(t, a, c, res, n, pf, nb, bs); \
        if (!res && t->e->code == 1) return direct_pipe##L##_relu(t, a, c, res, n, pf, nb, bs); \
        return direct_pipe##L##_any(t, a, c, res, n, pf, nb, bs); \
    }
PIPE_LDA(0)
PIPE_LDA(64)
PIPE_LDA(128)
PIPE_LDA(256)
PIPE_LDA(512)
/* n whole tiles of nb channel blocks (weights bstride floats apart, outputs NR columns apart): with
 * nb > 1 tile by tile, each tile's blocks in turn (its 12 rows stay in L1; pf unused) */
static int direct_pipe(const tile_t *t, const float *a, float *c, const float *res, int n, const float *pf, int nb,
                       long bstride) {
    switch (t->lda) {
    case 64: return direct_pipe64(t, a, c, res, n, pf, nb, bstride);
    case 128: return direct_pipe128(t, a, c, res, n, pf, nb, bstride);
    case 256: return direct_pipe256(t, a, c, res, n, pf, nb, bstride);
    case 512: return direct_pipe512(t, a, c, res, n, pf, nb, bstride);
    default: return direct_pipe0(t, a, c, res, n, pf, nb, bstride);
    }
}

/* Two consecutive tiles of at most 16 columns (O <= 16, or the last 16 of O = 48, 80, ...) as one:
 * 24 or 25 rows x one vector, the rows of the two panels (lda apart, in two groups of 12 that share
 * their row offsets). One weight load per 24 FMAs instead of 12, one call and one epilogue pass
 * per pair: the same products summed in the same order per value, so the same bits as two calls
 * of micro_lda. */
static inline __attribute__((always_inline)) void
micro_one_lda(const int mr, const int win, int nky, long rs, int kc, const float *a, long lda, const float *b,
              float *c, long ldc, int cols, int first, int last, const epi_t *e, int col0, __mmask16 *bad,
              const float *res, const epi_t *e2, __mmask16 *bad2, const int simple) {
    __m512 acc[2 * MR + 1];
    const __mmask16 m0 = cols >= 16 ? 0xFFFF : (__mmask16)((1u << cols) - 1);
#pragma GCC unroll 25
    for (int r = 0; r < mr; r++)
        acc[r] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, c + r * ldc);
    /* win: A read in place from the input windows, row r's k = (ky, q) at a[r lda + ky rs + q]
     * (kernel rows of kc contiguous floats: a stem's 3 channels), the same k order as packed */
    for (int ky = 0; ky < (win ? nky : 1); ky++, a += rs, b += (long)kc * NR) {
        const float *a1 = a + MR * lda;
#ifdef MRVL_AVX2          /* the two groups of rows one after the other, 6 rows at a time */
        if (new_paths & PATH_AVX2_TILES) {
            fma_cols8(mr < MR ? mr : MR, 2, 2, 0, kc, a, lda, b, NULL, (__m256 *)acc);
            if (mr > MR)
                fma_cols8(mr - MR, 2, 2, 0, kc, a1, lda, b, NULL, (__m256 *)(acc + MR));
            continue;
        }
#endif
        for (int p = 0; p < kc; p++) {
            const __m512 b0 = _mm512_loadu_ps(b + (long)p * NR);
#pragma GCC unroll 12
            for (int r = 0; r < (mr < MR ? mr : MR); r++)
                acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + p]), b0, acc[r]);
#pragma GCC unroll 13
            for (int r = 0; r < mr - MR; r++)
                acc[MR + r] = _mm512_fmadd_ps(_mm512_set1_ps(a1[r * lda + p]), b0, acc[MR + r]);
        }
    }
    if (!last) {
#pragma GCC unroll 25
        for (int r = 0; r < mr; r++)
            _mm512_mask_storeu_ps(c + r * ldc, m0, acc[r]);
        return;
    }
    if (simple) {            /* simple_epilogue holds: micro_lda's short form, bit for bit finish_v's */
        const __m512 bv = _mm512_loadu_ps(e->bias + col0);
        __m512 lo, hi, lo2 = bv, hi2 = bv;
        act_bounds(e, &lo, &hi);
        if (res)
            act_bounds(e2, &lo2, &hi2);
        __mmask16 lb = 0, lb2 = 0;
#pragma GCC unroll 25
        for (int r = 0; r < mr; r++) {
            __m512 v = rne16(_mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_add_ps(acc[r], bv))));
            lb = _kor_mask16(lb, nonfinite(v));
            if (res) {
                v = rne16(_mm512_min_ps(hi2, _mm512_max_ps(lo2, _mm512_add_ps(v, _mm512_maskz_loadu_ps(m0, res + r * ldc)))));
                lb2 = _kor_mask16(lb2, nonfinite(v));
            }
            _mm512_mask_storeu_ps(c + r * ldc, m0, v);
        }
        *bad |= lb & m0;
        if (res)
            *bad2 |= lb2 & m0;
        return;
    }
    epv_t E0, F0 = {0};
    epv_load(&E0, e, col0);
    if (res)
        epv_load(&F0, e2, col0);
    __mmask16 bt = 0, bt2 = 0;
#pragma GCC unroll 25
    for (int r = 0; r < mr; r++) {
        __mmask16 b0 = 0;
        __m512 v = finish_v(acc[r], &E0, &b0);
        bt |= b0;
        if (res) {
            __mmask16 b1 = 0;
            v = finish_v(_mm512_add_ps(v, _mm512_maskz_loadu_ps(m0, res + r * ldc)), &F0, &b1);
            bt2 |= b1;
        }
        _mm512_mask_storeu_ps(c + r * ldc, m0, v);
    }
    *bad |= bt & m0;
    if (res)
        *bad2 |= bt2 & m0;
}

/* the pairs through tile_t (t->kc, b, ldc, cols, first, last, e, col0, e2; A's row stride lda):
 * flags returned as the tiles' (bit 0: a conv value not finite, bit 1: a fused-sum value) */
#define ONE_FLAGS (bad ? 1 : 0) | (bad2 ? 2 : 0)
#define ONE_PAIR(MR_, S) \
    __mmask16 bad = 0, bad2 = 0; \
    micro_one_lda(MR_, 0, 1, 0, t->kc, a, lda, t->b, c, t->ldc, t->cols, t->first, t->last, t->e, t->col0, &bad, \
                  res, t->e2, &bad2, S); \
    return ONE_FLAGS;
static HOT_LOOPS int micro_one24(const tile_t *t, const float *a, long lda, float *c, const float *res) { ONE_PAIR(2 * MR, 0) }
static HOT_LOOPS int micro_one25(const tile_t *t, const float *a, long lda, float *c, const float *res) { ONE_PAIR(2 * MR + 1, 0) }
static HOT_LOOPS int micro_one24s(const tile_t *t, const float *a, long lda, float *c, const float *res) { ONE_PAIR(2 * MR, 1) }
static HOT_LOOPS int micro_one25s(const tile_t *t, const float *a, long lda, float *c, const float *res) { ONE_PAIR(2 * MR + 1, 1) }

/* 24 pixels of one output row whose windows lie inside the input, A read from the windows in place
 * (t->kh kernel rows of t->rowlen floats, t->ystride apart; the pixels lda apart): a stem's panels
 * unpacked, all of K (no fused sum) */
#define ONE_WIN24(S) \
    __mmask16 bad = 0; \
    micro_one_lda(2 * MR, 1, t->kh, t->ystride, t->rowlen, a, lda, t->b, c, t->ldc, t->cols, 1, 1, t->e, t->col0, &bad, \
                  NULL, NULL, NULL, S); \
    return bad ? 1 : 0;
static HOT_LOOPS int micro_one_win24(const tile_t *t, const float *a, float *c, long lda) { ONE_WIN24(0) }
static HOT_LOOPS int micro_one_win24s(const tile_t *t, const float *a, float *c, long lda) { ONE_WIN24(1) }
/* the same for 12 pixels (stem_rows: an interior run of 12-23 pixels) */
#define ONE_WIN12(S) \
    __mmask16 bad = 0; \
    micro_one_lda(MR, 1, t->kh, t->ystride, t->rowlen, a, lda, t->b, c, t->ldc, t->cols, 1, 1, t->e, t->col0, &bad, \
                  NULL, NULL, NULL, S); \
    return bad ? 1 : 0;
static HOT_LOOPS int micro_one_win12(const tile_t *t, const float *a, float *c, long lda) { ONE_WIN12(0) }
static HOT_LOOPS int micro_one_win12s(const tile_t *t, const float *a, float *c, long lda) { ONE_WIN12(1) }
/* step 6 (3-channel stride-2 stems) compiled in: the broadcasts of a k address a + r * 24 bytes off
 * one base register; with a run-time step each row had its own pointer, more than the free
 * registers, and the k loop reloaded 14 of them per k (MobileNetV2 0.5's stem 0.159 -> 0.138 ms).
 * Compiled for 4, 8, ..., 24 pixels: a row's last tile of stem_rows takes the rest rounded up to
 * a multiple of 4 (it overlapped the tile before by up to 23 pixels). */
#define ONE_WIN6(MR_, S) \
    __mmask16 bad = 0; \
    micro_one_lda(MR_, 1, t->kh, t->ystride, t->rowlen, a, 6, t->b, c, t->ldc, t->cols, 1, 1, t->e, t->col0, &bad, \
                  NULL, NULL, NULL, S); \
    return bad ? 1 : 0;
typedef int (*win6_fn)(const tile_t *t, const float *a, float *c);
#define WIN6_SET(MR_) \
    static HOT_LOOPS int micro_one_win6_##MR_(const tile_t *t, const float *a, float *c) { ONE_WIN6(MR_, 0) } \
    static HOT_LOOPS int micro_one_win6s_##MR_(const tile_t *t, const float *a, float *c) { ONE_WIN6(MR_, 1) }
WIN6_SET(4) WIN6_SET(8) WIN6_SET(12) WIN6_SET(16) WIN6_SET(20) WIN6_SET(24)
static const win6_fn win6_tiles[2][6] = {
    {micro_one_win6_4, micro_one_win6_8, micro_one_win6_12, micro_one_win6_16, micro_one_win6_20, micro_one_win6_24},
    {micro_one_win6s_4, micro_one_win6s_8, micro_one_win6s_12, micro_one_win6s_16, micro_one_win6s_20,
     micro_one_win6s_24}};

typedef struct {
    const float *x;
    long h, w, c, cs;             /* input [n, h, w, cs]; a group's taps read c channels of each pixel */
    long oh, ow;
    long kh, kw, sh, sw, dh, dw, pt, pl;
} geom_t;

/* dst[0, n) = src[0, n), or zeros for src NULL: masked vector moves (the runs are often a few
 * floats -- a kernel row of a 3-channel stem -- where a libc call costs more than the copy) */
static inline __attribute__((always_inline)) void copy_run(float *dst, const float *src, long n) {
    long i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, src ? _mm512_loadu_ps(src + i) : _mm512_setzero_ps());
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(dst + i, m, src ? _mm512_maskz_loadu_ps(m, src + i) : _mm512_setzero_ps());
    }
}

/* pack pixels [m0, m0 + rows) x k-values [k0, k0 + kc) into dst[MR][LDP] (zeros past rows/padding).
 * Pixel and kernel-row indices advance incrementally: integer divisions per row (tens of cycles
 * each) cost more than the copies when K is small (a 3-channel stem: K = 27). */
static void pack(const geom_t *g, long m0, int rows, long k0, int kc, float *dst) {
    const long c = g->c, rowlen = g->kw * c;         /* one kernel row of taps: contiguous when dw == 1 */
    long ox = m0 % g->ow, t = m0 / g->ow, oy = t % g->oh, n = t / g->oh;
    const long ky_first = k0 / rowlen, rem_first = k0 % rowlen, tap_first = rem_first / c, ch_first = rem_first % c;
    const long nv = (rowlen + 15) / 16;              /* vectors per kernel row */
    if ((new_paths & PATH_PANEL_PACK) && rows == MR && k0 == 0 && kc == g->kh * rowlen && nv <= 2 && g->dw == 1 && c == g->cs
        && (g->kh - 1) * rowlen + 16 * nv <= KC && ox + MR <= g->ow) {
        /* a whole panel in one output row, every window inside the input, rows of at most 32
         * floats (3-channel stems: 3x3 K = 27, 7x7 K = 147): each kernel row one or two loads and
         * stores, with no per-pixel bookkeeping (it took ~27 cycles a pixel: 40% of MobileNetV2's
         * stem). Whole vectors: a row's tail is overwritten by the next row, the last one's lands
         * in the packed row's unused end (never read: k < kc), and the loads stay inside the image */
        const long iy0 = oy * g->sh - g->pt, ix0 = ox * g->sw - g->pl, ixl = (ox + MR - 1) * g->sw - g->pl;
        const long rs = g->dh * g->w * c, ps = g->sw * c;
        const float *src = g->x + ((n * g->h + iy0) * g->w + ix0) * c;
        if (iy0 >= 0 && iy0 + (g->kh - 1) * g->dh < g->h && ix0 >= 0 && ixl + g->kw <= g->w
            && src + (MR - 1) * ps + (g->kh - 1) * rs + 16 * nv <= g->x + (n + 1) * g->h * g->w * c) {
            for (int r = 0; r < MR; r++, src += ps)
                for (long ky = 0; ky < g->kh; ky++) {
                    _mm512_storeu_ps(dst + r * LDP + ky * rowlen, _mm512_loadu_ps(src + ky * rs));
                    if (nv > 1)
                        _mm512_storeu_ps(dst + r * LDP + ky * rowlen + 16, _mm512_loadu_ps(src + ky * rs + 16));
                }
            return;
        }
    }
    for (int r = 0; r < MR; r++) {
        float *d = dst + r * LDP;
        if (r >= rows) {
            copy_run(d, NULL, kc);
            continue;
        }
        const long iy0 = oy * g->sh - g->pt, ix0 = ox * g->sw - g->pl;
        const int whole = g->dw == 1 && c == g->cs && ix0 >= 0 && ix0 + g->kw <= g->w;
        if (whole && k0 == 0 && kc == g->kh * rowlen && iy0 >= 0 && iy0 + (g->kh - 1) * g->dh < g->h) {
            /* an interior pixel whose whole window is one block: one copy per kernel row (small-C
             * stems: a row is a few floats, and the general loop's bookkeeping cost more) */
            const float *src = g->x + ((n * g->h + iy0) * g->w + ix0) * c;     /* c == cs here */
            if (rowlen <= 16 && (g->kh - 1) * rowlen + 16 <= KC) {
                /* rows of at most 16 floats (3-channel stems): masked loads, whole-vector stores in
                 * kernel-row order (each row's tail is overwritten by the next row; the last one's
                 * lands in the packed row's unused end) */
                const __mmask16 mk = (__mmask16)((1u << rowlen) - 1);
                const float *end = g->x + (n + 1) * g->h * g->w * c;
                for (long ky = 0; ky < g->kh; ky++) {
                    const float *sp = src + ky * g->dh * g->w * c;
                    _mm512_storeu_ps(d + ky * rowlen, sp + 16 <= end ? _mm512_loadu_ps(sp) : _mm512_maskz_loadu_ps(mk, sp));
                }
            } else {
                for (long ky = 0; ky < g->kh; ky++)
                    copy_run(d + ky * rowlen, src + ky * g->dh * g->w * c, rowlen);
            }
        } else if (k0 == 0 && kc == g->kh * rowlen && iy0 >= 0 && iy0 + (g->kh - 1) * g->dh < g->h
                   && ix0 >= 0 && ix0 + (g->kw - 1) * g->dw < g->w) {
            /* an interior pixel whose window is one block but whose taps are not contiguous (a
             * group's channels, or dilation): one copy per tap, without the general loop's
             * bookkeeping (a grouped conv's taps are a few floats each) */
            const float *src = g->x + ((n * g->h + iy0) * g->w + ix0) * g->cs;
            for (long ky = 0; ky < g->kh; ky++)
                for (long kx = 0; kx < g->kw; kx++)
                    copy_run(d + (ky * g->kw + kx) * c, src + (ky * g->dh * g->w + kx * g->dw) * g->cs, c);
        } else {
        /* (ky, tap, ch): the position of k in the window, advanced per run without divisions
         * (a grouped conv's runs are a few channels each) */
        long k = k0, ky = ky_first, rem = rem_first, tap = tap_first, ch = ch_first;
        while (k < k0 + kc) {
            const long iy = iy0 + ky * g->dh;
            long run, ix, cc;
            if (whole) {
                run = rowlen - rem;              /* the rest of the kernel row in one copy */
                ix = ix0;
                cc = rem;
            } else {
                run = c - ch;                    /* the rest of one tap's channels */
                ix = ix0 + tap * g->dw;
                cc = ch;
            }
            if (run > k0 + kc - k)
                run = k0 + kc - k;
            if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
                copy_run(d + (k - k0), NULL, run);
            else
                copy_run(d + (k - k0), g->x + ((n * g->h + iy) * g->w + ix) * g->cs + cc, run);
            k += run;
            if (whole) {
                rem += run;
                if (rem == rowlen) {
                    rem = 0;
                    ky++;
                }
            } else if ((ch += run) == c) {
                ch = 0;
                if (++tap == g->kw) {
                    tap = 0;
                    ky++;
                }
            }
        }
        }
        if (++ox == g->ow) {
            ox = 0;
            if (++oy == g->oh) {
                oy = 0;
                n++;
            }
        }
    }
}

/* 12 pixels of one output row whose windows lie inside the input x 17-32 columns, A read from the
 * windows in place (t->kh kernel rows of t->rowlen floats, t->ystride apart; the pixels lda apart):
 * the fp32 sums go to c, then micro12_gen finishes them as a last k block (the same sums, one store
 * and reload) */
static HOT_LOOPS int micro_win12(const tile_t *t, const float *a, float *c, long lda) {
    __m512 acc[MR][2];
    const float *b = t->b;
    const int kc = t->rowlen;
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++)
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int ky = 0; ky < t->kh; ky++, a += t->ystride, b += (long)kc * NR)
#ifdef MRVL_AVX2
        fma_rows(MR, 0, kc, a, lda, b, NULL, acc);
#else
        for (int p = 0; p < kc; p++) {
            const __m512 b0 = _mm512_loadu_ps(b + (long)p * NR), b1 = _mm512_loadu_ps(b + (long)p * NR + 16);
#pragma GCC unroll 12
            for (int r = 0; r < MR; r++) {
                FMA_ROW2(acc[r][0], acc[r][1], b0, b1, a + r * lda + p);
            }
        }
#endif
    const __mmask16 m1 = t->cols >= 32 ? 0xFFFF : (__mmask16)((1u << (t->cols - 16)) - 1);
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
        _mm512_storeu_ps(c + r * t->ldc, acc[r][0]);
        _mm512_mask_storeu_ps(c + r * t->ldc + 16, m1, acc[r][1]);
    }
    tile_t f = *t;               /* finish: a last k block of no k values over the stored sums */
    f.kc = 0;
    f.first = 0;
    f.last = 1;
    return micro12_gen(&f, NULL, c, NULL, MR, NULL);
}

#ifdef MRVL_AVX2
/* One k block of one whole channel block (t->cols == NR) for ``rows`` packed rows (row stride LDP) on
 * 16 ymm registers. The tiles (fma_rows) ran 6 rows x 16 lanes at a time through all kc k-values:
 * each pass re-read its 32 KB of weights from L2, and a 49-row block ended in a latency-bound 1-row
 * tile (ResNet-50's 3x3 512 at 7x7, K = 4608: 21% of the FMA peak). Here each SWEEP_K slice is
 * swept over all the rows in balanced tiles of 4-6 (49 rows: 9 of 5-6; fewer rows: one tile),
 * each tile's two 16-lane halves in turn, the slice's 16 KB of weights staying in L1; the fp32
 * sums wait in the output rows between slices, and on the last k block micro_gen / micro_simple
 * finish them as a block of no k values (micro_win12's way). The next slice's weights are
 * prefetched into L2 while a slice runs: that layer's 9.4 MB come from DRAM (all blocks reading
 * one block's weights took 2.76 against 3.43 ms). Each output gets the same FMAs in the same k
 * order: the same sums. */
static int sweep_block(const tile_t *t, const float *a, float *c, const float *res, int rows, const float *next) {
    const int groups = (rows + 5) / 6;
    for (int kk = 0; kk < t->kc; kk += SWEEP_K) {
        const int kn = t->kc - kk < SWEEP_K ? t->kc - kk : SWEEP_K;
        const int first = t->first && kk == 0;
        /* the next slice's weights (the next block's first at the last one) into L2 while this one
         * runs, a share per tile: from DRAM when the layer's weights exceed the caches (9.4 MB) */
        const char *pf = (const char *)(kk + SWEEP_K < t->kc ? t->b + (long)(kk + SWEEP_K) * NR : next);
        const long pn = kk + SWEEP_K < t->kc ? (t->kc - kk - SWEEP_K < SWEEP_K ? t->kc - kk - SWEEP_K : SWEEP_K) : SWEEP_K;
        const long lines = pf ? pn * NR * 4 / 64 : 0, per = (lines + 2 * groups - 1) / (2 * groups);
        long l = 0;
        for (int g = 0, r0 = 0; g < groups; g++) {
            const int n = (int)(((long)(g + 1) * rows) / groups) - r0;
            for (int h = 0; h < 2; h++) {       /* the two halves in turn: the rows' slice read twice from L1 */
                for (long e = l + per; l < e && l < lines; l++)
                    _mm_prefetch(pf + l * 64, _MM_HINT_T1);
                sweep_tiles[n](kn, a + (long)r0 * LDP + kk, LDP, t->b + (long)kk * NR + 16 * h, c + r0 * t->ldc + 16 * h,
                               t->ldc, first);
            }
            r0 += n;
        }
    }
    if (!t->last)
        return 0;
    tile_t f = *t;
    f.kc = 0;
    f.first = 0;
    int flags = 0;
    for (int r0 = 0; r0 < rows; r0 += MR) {
        const int n = rows - r0 < MR ? rows - r0 : MR;
        flags |= (simple_epilogue(t->e, res, t->e2) ? micro_simple : micro_gen)(&f, NULL, c + r0 * t->ldc,
                                                                            res ? res + r0 * t->ldc : NULL, n, NULL);
    }
    return flags;
}
#endif

/* the first input pixel of the window of output pixel m when the n pixels m .. m + n - 1 lie in
 * one output row and their windows inside the input (no padding), else NULL */
static const float *window_row(const geom_t *g, long m, long n) {
    const long ox = m % g->ow, t = m / g->ow, oy = t % g->oh, img = t / g->oh;
    const long iy0 = oy * g->sh - g->pt, ix0 = ox * g->sw - g->pl, ixl = (ox + n - 1) * g->sw - g->pl;
    if (ox + n > g->ow || iy0 < 0 || iy0 + (g->kh - 1) * g->dh >= g->h || ix0 < 0
        || ixl + (g->kw - 1) * g->dw >= g->w)
        return NULL;
    return g->x + ((img * g->h + iy0) * g->w + ix0) * g->cs;
}

/* A stem of one channel block (at most NR output channels), one k block, no fused sum, windows
 * read in place (conv_range decides): output pixels [m0, m1) tiled along the output rows instead
 * of in MR-aligned panels of the flattened pixels. Those panels cross the row ends (112 pixels a
 * row: ~1 pair of panels in 5 crossed one), and every such panel and every one holding a padded
 * border pixel was packed: MobileNetV2 0.5's 3 -> 16 stem spent 22% of its time packing and 16%
 * in packed tiles. Here each row runs as tiles of tw pixels (24: one vector of columns, pairs of
 * 12 rows; 12: two vectors), the last one ending at the row's end; a tile whose windows lie
 * inside the input reads them there, and one with padding reads a strip: its kernel rows copied
 * with zeros in the padding (what pack writes), so its products are the packed tile's. Only a
 * row cut by the part's ends into fewer than MR pixels is packed as before. Every value sums the
 * same products in the same order as in conv_range, so the bits are the same. */
static int stem_packed(const geom_t *g, const tile_t *t, long q, long end, float *out, long ldo, int simple,
                       float *abuf) {
    int flags = 0;
    while (q < end) {
        const long left = end - q;
        if (t->cols <= 16 && left >= 2 * MR && (new_paths & PATH_ONE_PAIRS)) {
            pack(g, q, MR, 0, t->kc, abuf);
            pack(g, q + MR, MR, 0, t->kc, abuf + MR * LDP);
            flags |= (simple ? micro_one24s : micro_one24)(t, abuf, LDP, out + q * ldo, NULL);
            q += 2 * MR;
        } else {
            const int rows = left < MR ? (int)left : MR;
            pack(g, q, rows, 0, t->kc, abuf);
            flags |= (simple ? micro_simple : micro_gen)(t, abuf, out + q * ldo, NULL, rows, NULL);
            q += rows;
        }
    }
    return flags;
}

/* the kernel rows of the windows of n pixels of output row oy of image img starting at ox, as
 * strip[ky][(n - 1) * sw + kw][c] with zeros where a tap lies in the padding */
static void stem_strip(const geom_t *g, long img, long oy, long ox, long n, float *strip) {
    const long c = g->c, npx = (n - 1) * g->sw + g->kw, ix0 = ox * g->sw - g->pl, iy0 = oy * g->sh - g->pt;
    const long xa = ix0 < 0 ? -ix0 : 0, xb = ix0 + npx > g->w ? g->w - ix0 : npx;    /* in-range pixels */
    for (long ky = 0; ky < g->kh; ky++, strip += npx * c) {
        const long iy = iy0 + ky * g->dh;
        if (iy < 0 || iy >= g->h || xb <= xa) {
            copy_run(strip, NULL, npx * c);
            continue;
        }
        copy_run(strip, NULL, xa * c);
        copy_run(strip + xa * c, g->x + ((img * g->h + iy) * g->w + ix0 + xa) * c, (xb - xa) * c);
        copy_run(strip + xb * c, NULL, (npx - xb) * c);
    }
}

/* one tile of n pixels (a multiple of 4 for step 6 and at most 16 columns; else tw) */
static int stem_tile(const tile_t *t, const float *src, float *oc, long step, int n, int windows, int simple) {
    if (t->cols <= 16 && step == 6)
        return win6_tiles[simple][n / 4 - 1](t, src, oc);
    if (t->cols <= 16)
        return n == 2 * MR ? (simple ? micro_one_win24s : micro_one_win24)(t, src, oc, step)
                           : (simple ? micro_one_win12s : micro_one_win12)(t, src, oc, step);
    if (windows && step == 6 && n < MR)      /* a row's rest of 1-8 pixels (stem_rows' quads) */
        return n == 4 ? (simple ? micro_win6_4_simple : micro_win6_4_gen)(t, src, oc, NULL, n, NULL)
                      : (simple ? micro_win6_8_simple : micro_win6_8_gen)(t, src, oc, NULL, n, NULL);
    if (windows)
        return (simple ? micro_win_simple : micro_win_gen)(t, src, oc, NULL, MR, NULL, step);
    return micro_win12(t, src, oc, step);
}

static int stem_rows(const geom_t *g, const float *wpack, long o, long ldo, float *out, long m0, long m1,
                     const epi_t *e, int simple, int windows, float *abuf, long col0) {
    const long K = g->kh * g->kw * g->c, step = g->sw * g->c;
    const tile_t t = {wpack, ldo, g->cs, e, NULL, (int)K, (int)o, 1, 1, (int)col0, (int)g->kh, (int)(g->kw * g->c),
                      g->dh * g->w * g->c};
    const int tw = o <= 16 ? 2 * MR : MR, quads = step == 6 && (o <= 16 || windows);
    /* a strip must fit the packed buffer (it does for stems: 3 x 49 x 3 floats) */
    const int strips = g->kh * ((tw - 1) * g->sw + g->kw) * g->c <= (long)MC * LDP;
    /* the interior columns [xa, xb): every tap of the window inside the input */
    long xa = g->pl > 0 ? (g->pl + g->sw - 1) / g->sw : 0;
    const long lastx = g->w - 1 - (g->kw - 1) * g->dw + g->pl;
    long xb = lastx < 0 ? 0 : lastx / g->sw + 1;
    if (xb > g->ow)
        xb = g->ow;
    if (xa > xb)
        xa = xb;
    int flags = 0;
    long pend = m0;                                   /* the packed run waiting: [pend, p) */
    for (long p = m0; p < m1;) {
        const long ox = p % g->ow, r = p / g->ow, oy = r % g->oh, img = r / g->oh;
        const long L = (g->ow - ox) < (m1 - p) ? (g->ow - ox) : (m1 - p);   /* this row's pixels in range */
        const long iy0 = oy * g->sh - g->pt;
        const int rowin = iy0 >= 0 && iy0 + (g->kh - 1) * g->dh < g->h;
        if (L >= MR && (strips || (rowin && xa <= ox && ox + L <= xb))) {
            flags |= stem_packed(g, &t, pend, p, out, ldo, simple, abuf);
            for (long q = 0; q < L;) {
                /* tiles of tw pixels; the rest in one tile rounded up to 4 pixels (quads) or MR,
                 * ending at the row's end (overlapping the tile before: the same values) */
                const long rest = L - q;
                int n = rest >= tw ? tw : (quads ? (int)((rest + 3) & ~3L) : (rest <= MR || L < tw ? MR : tw));
                if (n > L)                   /* a row of 13-23 pixels (quads): 12-20, then the rest */
                    n = (int)(L & ~3L);
                const long s = q + n <= L ? q : L - n;
                const long xs = ox + s;
                const float *src;
                tile_t ts = t;
                if (rowin && xs >= xa && xs + n <= xb) {
                    src = g->x + ((img * g->h + iy0) * g->w + xs * g->sw - g->pl) * g->c;
                } else if (strips) {
                    stem_strip(g, img, oy, xs, n, abuf);
                    ts.ystride = ((n - 1) * g->sw + g->kw) * g->c;
                    src = abuf;
                } else {                     /* (not reached: the row is inside, see above) */
                    flags |= stem_packed(g, &t, p + s, p + s + n, out, ldo, simple, abuf);
                    q = s + n;
                    continue;
                }
                flags |= stem_tile(&ts, src, out + (p + s) * ldo, step, n, windows, simple);
                q = s + n;
            }
            pend = p + L;
        }
        p += L;
    }
    flags |= stem_packed(g, &t, pend, m1, out, ldo, simple, abuf);
    return flags;
}

/* ------------------------------------------------------------------ 8-column tiles
 * An in-place 1x1 conv (conv_range's ``direct``) of at most 8 output channels, one k block, one
 * channel block (MobileNetV2 0.5's first projection, 16 -> 8 at 112x112): a 16-lane tile of one
 * pixel left 8 lanes idle, half of every FMA. Zen 4 runs a 512-bit FMA as two 256-bit halves (one
 * per cycle) and 256-bit ones two per cycle, so each pixel gets one 256-bit accumulator: the
 * same FMA rate per instruction, half the lanes, 24 pixels per tile, the weights read from the
 * panel's first 8 columns (interleaving pixel pairs into 16 lanes for one vbroadcastsd per FMA
 * cost more than it saved: two permutes and stores per pair, 0.089 -> 0.082 ms). Each lane sums
 * its own k in order from zero, so the values are micro_one's / micro_direct's bit for bit; the
 * epilogue runs on two pixels per 512-bit vector ([pixel 2i: 0..7][pixel 2i + 1: 0..7], the
 * epilogue vectors duplicated), and with 8 columns (ldc 8) one store writes both rows. */
#define P8 24               /* pixels per 8-column tile */

/* an epilogue vector of channels [c, c + 8) in both halves */
static inline __attribute__((always_inline)) __m512 dup8(const float *v) {
    return _mm512_broadcast_f32x8(_mm256_loadu_ps(v));
}

static inline __attribute__((always_inline)) __m512 pair_load(const float *p, long ldc, __mmask16 mc, int two) {
    if (ldc == 8)
        return _mm512_maskz_loadu_ps(two ? (__mmask16)(mc | mc << 8) : mc, p);
    const __m256 l = _mm256_maskz_loadu_ps((__mmask8)mc, p);
    return _mm512_insertf32x8(_mm512_castps256_ps512(l),
                              two ? _mm256_maskz_loadu_ps((__mmask8)mc, p + ldc) : _mm256_setzero_ps(), 1);
}

static inline __attribute__((always_inline)) void pair_store(float *p, long ldc, __mmask16 mc, int two, __m512 v) {
    if (ldc == 8) {
        _mm512_mask_storeu_ps(p, two ? (__mmask16)(mc | mc << 8) : mc, v);
        return;
    }
    _mm256_mask_storeu_ps(p, (__mmask8)mc, _mm512_castps512_ps256(v));
    if (two)
        _mm256_mask_storeu_ps(p + ldc, (__mmask8)mc, _mm512_extractf32x8_ps(v, 1));
}

/* npx (<= P8) pixels, rows LDA floats apart at a (LDA < 0: lda, run time); out rows c, ldc apart */
static inline __attribute__((always_inline)) int
tile8(const int NP, const int simple, const long LDA, const float *a, long lda, const float *b, long K, float *c,
      long ldc, int cols, int npx, const epi_t *e, const float *res, const epi_t *e2, long col0) {
    const long ld = LDA > 0 ? LDA : lda;
    __m256 a8[P8];
#pragma GCC unroll 24
    for (int r = 0; r < NP; r++)
        a8[r] = _mm256_setzero_ps();
#ifdef MRVL_AVX2
    if (new_paths & PATH_AVX2_TILES)
        fma_cols8(NP, 1, 1, 0, (int)K, a, ld, b, NULL, a8);
    else
#endif
    for (long p = 0; p < K; p++) {
        const __m256 wv = _mm256_loadu_ps(b + p * NR);
#pragma GCC unroll 24
        for (int r = 0; r < NP; r++)
            a8[r] = _mm256_fmadd_ps(_mm256_set1_ps(a[r * ld + p]), wv, a8[r]);
    }
    __m512 acc[P8 / 2];
#pragma GCC unroll 12
    for (int i = 0; i < NP / 2; i++)
        acc[i] = _mm512_insertf32x8(_mm512_castps256_ps512(a8[2 * i]), a8[2 * i + 1], 1);
    const __mmask16 mc = (__mmask16)((1u << cols) - 1);
    __mmask16 lb = 0, lb2 = 0;
    if (simple) {            /* simple_epilogue holds: micro_one's short form */
        const __m512 bv = dup8(e->bias + col0);
        __m512 lo, hi, lo2 = bv, hi2 = bv;
        act_bounds(e, &lo, &hi);
        if (res)
            act_bounds(e2, &lo2, &hi2);
#pragma GCC unroll 12
        for (int i = 0; i < NP / 2; i++) {
            if (2 * i >= npx)
                break;
            const int two = 2 * i + 1 < npx;
            const __mmask16 mi = two ? (__mmask16)(mc | mc << 8) : mc;
            __m512 v = rne16(_mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_add_ps(acc[i], bv))));
            lb = _kor_mask16(lb, _kand_mask16(nonfinite(v), mi));
            if (res) {
                v = rne16(_mm512_min_ps(hi2, _mm512_max_ps(lo2, _mm512_add_ps(v, pair_load(res + 2 * i * ldc, ldc, mc, two)))));
                lb2 = _kor_mask16(lb2, _kand_mask16(nonfinite(v), mi));
            }
            pair_store(c + 2 * i * ldc, ldc, mc, two, v);
        }
        return (lb ? 1 : 0) | (lb2 ? 2 : 0);
    }
    epv_t E, F = {0};
    epv_load(&E, e, col0);
    E.bias = E.has_bias ? dup8(e->bias + col0) : E.bias;
    E.scale = E.has_scale ? dup8(e->scale + col0) : E.scale;
    E.shift = E.has_shift ? dup8(e->shift + col0) : E.shift;
    E.slope = e->code == 4 ? dup8(e->slope + col0) : E.slope;
    if (res) {
        epv_load(&F, e2, col0);
        F.bias = F.has_bias ? dup8(e2->bias + col0) : F.bias;
        F.scale = F.has_scale ? dup8(e2->scale + col0) : F.scale;
        F.shift = F.has_shift ? dup8(e2->shift + col0) : F.shift;
        F.slope = e2->code == 4 ? dup8(e2->slope + col0) : F.slope;
    }
    for (int i = 0; 2 * i < npx; i++) {
        const int two = 2 * i + 1 < npx;
        const __mmask16 mi = two ? (__mmask16)(mc | mc << 8) : mc;
        __mmask16 b0 = 0;
        __m512 v = finish_v(acc[i], &E, &b0);
        lb |= b0 & mi;
        if (res) {
            __mmask16 b1 = 0;
            v = finish_v(_mm512_add_ps(v, pair_load(res + 2 * i * ldc, ldc, mc, two)), &F, &b1);
            lb2 |= b1 & mi;
        }
        pair_store(c + 2 * i * ldc, ldc, mc, two, v);
    }
    return (lb ? 1 : 0) | (lb2 ? 2 : 0);
}

#define TILE8(sfx, NP, S, LDA) \
    static HOT_LOOPS int tile8##sfx(const float *a, long lda, const float *b, long K, float *c, long ldc, int cols, \
                                    int npx, const epi_t *e, const float *res, const epi_t *e2, long col0) { \
        return tile8(NP, S, LDA, a, lda, b, K, c, ldc, cols, npx, e, res, e2, col0); \
    }
/* rows 16 or 32 floats apart compiled in (24 broadcasts off one base register); other strides at
 * run time; the packed rest (LDP) in tiles of 24 or, for at most 8 pixels, 8 */
TILE8(_16, P8, 0, 16) TILE8(_16s, P8, 1, 16) TILE8(_32, P8, 0, 32) TILE8(_32s, P8, 1, 32) TILE8(_n, P8, 0, -1)
TILE8(_ns, P8, 1, -1) TILE8(_q, P8, 0, LDP) TILE8(_qs, P8, 1, LDP) TILE8(_q8, 8, 0, LDP) TILE8(_q8s, 8, 1, LDP)
typedef int (*tile8_fn)(const float *, long, const float *, long, float *, long, int, int, const epi_t *,
                        const float *, const epi_t *, long);

/* pixels [m0, m1) of an in-place 1x1 conv (rows cs floats apart, K <= KC, o <= 8 columns of
 * wpack's one block): tiles of P8 pixels; the last one's missing rows are read as zeros from q */
static int range8(const float *x, long cs, long K, const float *wpack, long o, long ldo, float *out,
                  long m0, long m1, const epi_t *e, const float *res, const epi_t *e2, int simple, float *q) {
    const tile8_fn fn = cs == 16 ? (simple ? tile8_16s : tile8_16) : cs == 32 ? (simple ? tile8_32s : tile8_32)
                      : (simple ? tile8_ns : tile8_n);
    int flags = 0;
    for (long m = m0; m < m1; m += P8) {
        const int npx = m1 - m < P8 ? (int)(m1 - m) : P8;
        const float *r = res ? res + m * ldo : NULL;
        if (npx == P8) {
            flags |= fn(x + m * cs, cs, wpack, K, out + m * ldo, ldo, (int)o, npx, e, r, e2, 0);
        } else {                     /* the rows there, zeros after */
            const int np = npx <= 8 ? 8 : P8;
            for (int i = 0; i < np; i++)
                copy_run(q + i * LDP, i < npx ? x + (m + i) * cs : NULL, K);
            flags |= (np == 8 ? (simple ? tile8_q8s : tile8_q8) : (simple ? tile8_qs : tile8_q))(q, LDP, wpack, K,
                     out + m * ldo, ldo, (int)o, npx, e, r, e2, 0);
        }
    }
    return flags;
}

/* Output pixels [m0, m1) and channel blocks [j0, j1) of one conv (FC: a 1x1 conv over [M,1,1,K]),
 * or of one group of a grouped conv: its c input channels of pixels cs floats apart, its o output
 * channels of rows ldo floats apart (x, out and the epilogue vectors already offset to the group).
 * wpack: [ceil(o/NR)][K][NR]; out: [pixels, ldo]. Returns 1 when every finished value is finite
 * (always 1 for code < 0: the caller finishes those), else 0. */
static int conv_range(const float *x, long h, long w, long c, long cs, long oh, long ow,
              long kh, long kw, long sh, long sw, long dh, long dw, long pt, long pl,
              const float *wpack, long o, long ldo, float *out, long m0, long m1, long j0, long j1,
              const float *bias, const float *scale, const float *shift, const float *slope,
              int code, float p0, float p1, const float *res, const epi_t *e2) {
    const geom_t g = {x, h, w, c, cs, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl};
    const epi_t e = {bias, scale, shift, slope, code, p0, p1};
    const long K = kh * kw * c;
    const int simple = simple_epilogue(&e, res, e2);
    static __thread float abuf[MC * LDP] __attribute__((aligned(64)));   /* per thread, no malloc */
    int flags = 0;
    /* 1x1, stride 1, no padding: the input rows are A's rows; read them in place, except a last
     * partial micro-tile, whose missing rows must read as zeros (packed), and rows a multiple of
     * 4 KB apart (cs of 1024, 2048 floats): a panel's 12 rows then fall in the same L1 sets and
     * evict each other while the panel is re-read for every block of 32 output channels. Packed,
     * ResNet-50's 1x1 contractions (1024 -> 256 at 14x14, 2048 -> 512 at 7x7) took 9-12% less CPU
     * (1.17-1.23x onnxruntime's time -> 1.04-1.11x, one thread); the same sums in the same order */
    const int direct = kh == 1 && kw == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && oh == h && ow == w
                       && cs % 1024 != 0;
    /* windows read in place instead of packed (micro_win): contiguous kernel rows of an ungrouped
     * input, consecutive windows a compiled step apart (ResNet-50's stem -5%, MobileNet's 3x3/2
     * stem -32%, 3x3 64 at 56x56 -2%, 3x3/2 -2 to -4%, single-threaded) */
    const long step = sw * c;
    const int windows = (new_paths & PATH_WINDOWS) && !direct && kh * kw > 1 && dw == 1 && c == cs
                        && (step == 6 || step == 64 || step == 128 || step == 256)
                        && (o % NR == 0 || o % NR > 16);   /* every block two vectors wide */
    /* other steps (a stride-1 stem: 3 floats) of a stem of 17-32 output channels, one k block, no
     * fused sum: 12-pixel tiles read in place by micro_win12 */
    const int win12 = !windows && (new_paths & PATH_WINDOWS) && !direct && !res && o > 16 && o <= NR && K <= KC
                      && dw == 1 && c == cs;
    /* at most 16 output channels, one k block, no fused sum: pairs of tiles (micro_one_win24) */
    const int win24 = (new_paths & PATH_WINDOWS) && !direct && !res && o <= 16 && K <= KC && dw == 1 && c == cs;
    if ((new_paths & PATH_EIGHT) && direct && o <= 8 && K <= KC && j0 == 0 && j1 == 1)
        return 3 & ~range8(x, cs, K, wpack, o, ldo, out, m0, m1, &e, res, e2, simple, abuf);
    if ((new_paths & PATH_STEM_ROWS) && (win24 || windows || win12) && !res && !direct && o <= NR && K <= KC
        && dw == 1 && c == cs && j0 == 0 && j1 == 1)
        return 3 & ~stem_rows(&g, wpack, o, ldo, out, m0, m1, &e, simple, windows, abuf, 0);
    /* a 3-channel stride-2 stem of more channel blocks (ResNet's 7x7/2 3 -> 64): stem_rows block by
     * block (the input, 600 KB for 224x224, stays in L2 between them); conv_range's panels of the
     * flattened pixels packed every panel that crossed a row's end or held a padded pixel */
    const long rest = ow % MR;     /* a row's last tile: rest rounded up to 4 pixels (a row of 25: 1 -> 4, +8%) */
    if ((new_paths & PATH_STEM_BLOCKS) && (new_paths & PATH_STEM_ROWS) && windows && step == 6 && !res && o > NR
        && K <= KC && ((rest + 3) & ~3L) - rest <= 1) {
        int f = 0;
        for (long j = j0; j < j1; j++)
            f |= stem_rows(&g, wpack + j * K * NR, (o - j * NR) < NR ? (o - j * NR) : NR, ldo, out + j * NR, m0, m1,
                           &e, simple, windows, abuf, j * NR);
        return 3 & ~f;
    }
    const float *win[MC / MR + 1];
    for (long mc = m0; mc < m1; mc += MC) {
        const long mrows = (m1 - mc) < MC ? (m1 - mc) : MC;
        const int panels = (int)((mrows + MR - 1) / MR);
        /* a block of MR * q + 1 rows (a 7x7 map's 49) ends in one panel of MR + 1: the packed
         * panels are consecutive rows of LDP floats, so it reads the last panel's row as its 13th
         * (one tile of 26 FMAs per k instead of 24 plus a latency-bound 1-row tile) */
        const int tiles = panels > 1 && mrows % MR == 1 ? panels - 1 : panels;
        /* a stem of at most 16 output channels (one k block, no fused sum): the pairs of panels
         * (tiles i, i + 1, i even, as the tile loop pairs them) whose 24 pixels lie in one output row
         * with their windows inside the input read the input in place (micro_one_win24) */
        long win2 = 0;
        const float *wsrc2[MC / (2 * MR)];
        if (win24)
            for (int i = 0; i + 1 < tiles; i += 2)
                if ((i + 2 < tiles || mc + mrows - (mc + (long)i * MR) == 2 * MR)
                    && (wsrc2[i / 2] = window_row(&g, mc + (long)i * MR, 2 * MR)))
                    win2 |= 1L << i;
        for (int i = 0; i < panels; i++) {
            const long r0 = mc + (long)i * MR;
            win[i] = NULL;
            if ((windows || win12) && mc + mrows - r0 >= MR && (i + 1 < tiles || tiles == panels))
                /* a full panel (not the head of a merged 13-row tile) inside one output row, every
                 * window inside the input: read in place, all K in one tile */
                win[i] = window_row(&g, r0, MR);
        }
        for (long k0 = 0; k0 < K; k0 += KC) {
            const int kc = (int)((K - k0) < KC ? (K - k0) : KC);
            for (int i = 0; i < panels; i++) {
                const long r0 = mc + (long)i * MR;
                const int rows = (int)((mc + mrows - r0) < MR ? (mc + mrows - r0) : MR);
                if (win[i] == NULL && (!direct || rows < MR) && !(win2 >> (i & ~1) & 1))
                    pack(&g, r0, rows, k0, kc, abuf + (long)i * MR * LDP);
            }
            /* every panel packed (no windows in place, no pairs): sweep_block's slices. Not with a
             * fused Sum2D of one k block: its output may be the residual itself (static_plan's in-place
             * sums), which the sweep's partial sums would overwrite before the epilogue reads it */
#ifdef MRVL_AVX2
            int sweep = (new_paths & PATH_SWEEP) && !direct && !win2 && (!res || K > KC);
            for (int i = 0; i < panels && sweep; i++)
                sweep = win[i] == NULL;
#endif
            int ifirst = 0;
            if ((new_paths & PATH_PIPE) && direct && simple && K <= 128 && j1 - j0 > 1 && o >= j1 * NR) {
                /* K <= 128: the whole tiles one by one, every channel block inner (direct_pipe's nb: the
                 * tile's 12 input rows stay in L1; block by block each block re-read the 120 rows) */
                int n = 0;
                while (n < tiles && (n + 1 < tiles || mrows - (long)n * MR == MR))
                    n++;
                if (n > 0) {
                    const tile_t t0 = {wpack + j0 * K * NR, ldo, cs, &e, e2, (int)K, NR, 1, 1, (int)(j0 * NR), 1,
                                       (int)c, 0};
                    flags |= direct_pipe(&t0, x + mc * cs, out + mc * ldo + j0 * NR, res ? res + mc * ldo + j0 * NR : NULL,
                                         n, NULL, (int)(j1 - j0), K * NR);
                    ifirst = n;
                }
            }
            for (long j = j0; j < j1 && ifirst < tiles; j++) {
                /* while the first panel runs, prefetch the next block's weights (from DRAM when the
                 * layer's weights exceed the caches) */
                const float *bp = wpack + (j * K + k0) * NR;
                const float *next = j + 1 < j1 ? wpack + ((j + 1) * K + k0) * NR : bp;
                const tile_t t = {bp, ldo, cs, &e, e2, kc, (int)((o - j * NR) < NR ? (o - j * NR) : NR),
                                  k0 == 0, k0 + KC >= K, (int)(j * NR), (int)kh, (int)(kw * c), dh * w * c};
#ifdef MRVL_AVX2
                if (sweep && t.cols == NR) {
                    flags |= sweep_block(&t, abuf, out + mc * ldo + j * NR, res ? res + mc * ldo + j * NR : NULL,
                                         (int)mrows, j + 1 < j1 ? next : NULL);
                    continue;
                }
#endif
                const tile_t tw = {bp, ldo, cs, &e, e2, (int)K, t.cols, 1, 1, t.col0, t.kh, t.rowlen, t.ystride};
                float *oc = out + (mc + (long)ifirst * MR) * ldo + j * NR;
                const float *rc = res ? res + (mc + (long)ifirst * MR) * ldo + j * NR : NULL;
                for (int i = ifirst; i < tiles; i++, oc += MR * ldo, rc = rc ? rc + MR * ldo : NULL) {
                    const int rows = i + 1 < tiles ? MR : (int)(mc + mrows - mc - (long)i * MR);   /* MR + 1 when merged */
                    const float *pf = i == 0 ? next : NULL;
                    if (win2 >> i & 1) {     /* this tile and the next: 24 windows in place (no fused sum) */
                        flags |= (simple ? micro_one_win24s : micro_one_win24)(&tw, wsrc2[i / 2], oc, sw * c);
                        i++;
                        oc += MR * ldo;
                        continue;
                    }
                    if (t.cols <= 8 && t.first && t.last && !direct && i + 1 < tiles && (new_paths & PATH_EIGHT)
                        && (i + 2 < tiles || mrows - (long)(i + 1) * MR == MR)) {
                        /* at most 8 columns, one k block: two packed panels as one 24-pixel tile8 */
                        flags |= (simple ? tile8_qs : tile8_q)(abuf + (long)i * MR * LDP, LDP, t.b, kc, oc, ldo, t.cols,
                                                               2 * MR, &e, rc, e2, t.col0);
                        i++;
                        oc += MR * ldo;
                        rc = rc ? rc + MR * ldo : NULL;
                        continue;
                    }
                    if (t.cols <= 16 && i + 1 < tiles && (new_paths & PATH_ONE_PAIRS)) {
                        /* one vector of columns: this tile and the next as one of 24 or 25 rows */
                        const int rows2 = i + 2 < tiles ? MR : (int)(mrows - (long)(i + 1) * MR);
                        if (rows2 >= MR) {
                            const float *ap = direct ? x + (mc + (long)i * MR) * cs + k0 : abuf + (long)i * MR * LDP;
                            const long lda = direct ? cs : LDP;
                            flags |= (simple ? (rows2 > MR ? micro_one25s : micro_one24s)
                                      : (rows2 > MR ? micro_one25 : micro_one24))(&t, ap, lda, oc, rc);
                            i++;
                            oc += MR * ldo;
                            rc = rc ? rc + MR * ldo : NULL;
                            continue;
                        }
                    }
                    if (direct && rows == MR && simple && t.first && t.last && t.cols == NR && (new_paths & PATH_PIPE)) {
                        /* the run of whole tiles from here (a merged 13-row last tile not in it) */
                        int n = 1;
                        while (i + n < tiles && (i + n + 1 < tiles || mrows - (long)(i + n) * MR == MR))
                            n++;
                        flags |= direct_pipe(&t, x + (mc + (long)i * MR) * cs + k0, oc, rc, n, pf, 1, 0);
                        i += n - 1;
                        oc += (n - 1) * MR * ldo;
                        rc = rc ? rc + (n - 1) * MR * ldo : NULL;
                        continue;
                    }
                    if (direct && rows >= MR)
                        flags |= (simple ? micro_direct_simple : micro_direct_gen)(&t, x + (mc + (long)i * MR) * cs + k0,
                                                                                   oc, rc, rows, pf);
                    else if (win[i]) {       /* all of K at the first k block */
                        if (k0 == 0)
                            flags |= !windows ? micro_win12(&tw, win[i], oc, step)
                                     : (simple ? micro_win_simple : micro_win_gen)(&tw, win[i], oc, rc, rows, pf, step);
                    }
                    else
                        flags |= (simple ? micro_simple : micro_gen)(&t, abuf + (long)i * MR * LDP, oc, rc, rows, pf);
                }
            }
        }
    }
    return 3 & ~flags;
}

/* ------------------------------------------------------------------ lane-packed grouped conv
 * A grouped conv of og = 1, 2, 4 or 8 output channels per group fills 1/16 .. 1/2 of a vector in
 * conv_range (a ResNeXt 3x3 g32 at 28x28x256: 8 channels of 16 lanes). Here P = 16 / og groups
 * share one vector: lane l = i * P + j holds output channel i of group j of the tile. The packed
 * input holds, per pixel and k, the P groups' values side by side ([row][k][P]), one P-float
 * broadcast per FMA (vbroadcastsd / f32x4 / f32x8, a load; no shuffle); the weights come as
 * [ceil(G/P)][K][16] (zeros for the groups past G). Each lane still sums its own k in order from
 * zero, padding taps as zero products: the same values as conv_range. One permute per output
 * vector puts the lanes back in channel order before the epilogue. og = 16 (P = 1) runs here too:
 * one pass over the rows for all groups, the panel's geometry shared, the next rows prefetched
 * (0.42 -> 0.36 ms at 14x14x512 g32 against conv_range's group-by-group blocks). */
#define MRL 12          /* pixels per lane tile (one vector each) */
#define LK 1024         /* packed floats per pixel row and k block */
#define LDL (LK + 16)   /* the packed rows' stride: a constant (one base register for all rows in the
                         * micro-kernel), 65 lines, so successive rows fall in different cache sets */

typedef struct {
    __m512i idx0, idx1;           /* transpose of one whole tap of P*cg <= 32 floats */
    __mmask16 ld0, ld1, st0, st1; /* its loads (the tile's groups) and stores (P*cg floats) */
    int fast, whole16;            /* P*cg <= 32; P*cg == 16 and the tile has P groups */
} lane_tap_t;

/* dst[i * P + j] = src[j * cg + ci + i] for i < n, j < P (zero for j >= np) */
static inline void lane_transpose(const float *src, float *dst, long cg, long ci, long n, int P, long np,
                                  const lane_tap_t *T) {
    if (T->fast && ci == 0 && n == cg) {
        if (T->ld0 == 0xFFFF && T->st0 == 0xFFFF && !T->ld1 && !T->st1) {
            _mm512_storeu_ps(dst, _mm512_permutexvar_ps(T->idx0, _mm512_loadu_ps(src)));
            return;
        }
        const __m512 lo = _mm512_maskz_loadu_ps(T->ld0, src), hi = _mm512_maskz_loadu_ps(T->ld1, src + 16);
        _mm512_mask_storeu_ps(dst, T->st0, _mm512_permutex2var_ps(lo, T->idx0, hi));
        if (T->st1)
            _mm512_mask_storeu_ps(dst + 16, T->st1, _mm512_permutex2var_ps(lo, T->idx1, hi));
        return;
    }
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i pm = _mm512_set1_epi32(P - 1);
    const int sh = P == 1 ? 0 : P == 2 ? 1 : P == 4 ? 2 : P == 8 ? 3 : 4;
    for (long L0 = 0; L0 < n * P; L0 += 16) {
        const __m512i L = _mm512_add_epi32(lane, _mm512_set1_epi32((int)L0));
        const __m512i jv = _mm512_and_si512(L, pm), iv = _mm512_srli_epi32(L, sh);
        const __mmask16 m = _mm512_cmplt_epi32_mask(L, _mm512_set1_epi32((int)(n * P)))
                            & _mm512_cmplt_epi32_mask(jv, _mm512_set1_epi32((int)np));
        const __m512i off = _mm512_add_epi32(_mm512_mullo_epi32(jv, _mm512_set1_epi32((int)cg)),
                                             _mm512_add_epi32(iv, _mm512_set1_epi32((int)ci)));
        const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, off, src, 4);
        const long left = n * P - L0;
        _mm512_mask_storeu_ps(dst + L0, left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1), v);
    }
}

/* one output pixel of a panel: its image's input offset and window origin; whole: every tap in range */
typedef struct {
    long base, iy0, ix0;
    int whole;
} lane_px_t;

/* the panel's pixels [m0, m0 + rows), once for all its tiles (divisions per pixel row) */
static void lane_pixels(const geom_t *g, long m0, int rows, lane_px_t *px) {
    long ox = m0 % g->ow, t = m0 / g->ow, oy = t % g->oh, n = t / g->oh;
    for (int r = 0; r < rows; r++) {
        const long iy0 = oy * g->sh - g->pt, ix0 = ox * g->sw - g->pl;
        px[r].base = n * g->h * g->w * g->cs;
        px[r].iy0 = iy0;
        px[r].ix0 = ix0;
        px[r].whole = iy0 >= 0 && iy0 + (g->kh - 1) * g->dh < g->h && ix0 >= 0 && ix0 + (g->kw - 1) * g->dw < g->w;
        if (++ox == g->ow) {
            ox = 0;
            if (++oy == g->oh) {
                oy = 0;
                n++;
            }
        }
    }
}

/* pack the panel's pixels px[0, rows) x k [k0, k0 + kc) of the tile's groups (input channels from
 * cbase, np groups of cg) into dst[mr][ld] as [k - k0][P]; rows past ``rows`` zero */
static void pack_lanes(const geom_t *g, long cbase, long np, int P, const lane_tap_t *T, const lane_px_t *px,
                       int rows, int mr, long k0, long kc, float *dst, long ld) {
    const long cg = g->c, K = g->kh * g->kw * cg;
    const long tap0 = k0 ? k0 / cg : 0, ci0 = k0 ? k0 % cg : 0;
    const long ky0 = tap0 ? tap0 / g->kw : 0, kx0 = tap0 ? tap0 % g->kw : 0;
    for (int r = 0; r < mr; r++) {
        float *d = dst + r * ld;
        if (r >= rows) {
            copy_run(d, NULL, kc * P);
            continue;
        }
        const long iy0 = px[r].iy0, ix0 = px[r].ix0;
        const float *base = g->x + px[r].base + cbase;
        if (T->whole16 && px[r].whole && k0 == 0 && kc == K) {
            /* an interior pixel whose taps are one vector each (P * cg = 16, every group of the
             * tile): one load, permute and store per tap, without the loop's bookkeeping */
            const float *s = base + (iy0 * g->w + ix0) * g->cs;
            for (long ky = 0; ky < g->kh; ky++)
                for (long kx = 0; kx < g->kw; kx++, d += 16)
                    _mm512_storeu_ps(d, _mm512_permutexvar_ps(T->idx0,
                                     _mm512_loadu_ps(s + (ky * g->dh * g->w + kx * g->dw) * g->cs)));
            continue;
        }
        long k = k0, ci = ci0, ky = ky0, kx = kx0;
        while (k < k0 + kc) {
            long run = cg - ci;
            if (run > k0 + kc - k)
                run = k0 + kc - k;
            const long iy = iy0 + ky * g->dh, ix = ix0 + kx * g->dw;
            float *dk = d + (k - k0) * P;
            if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
                copy_run(dk, NULL, run * P);
            else
                lane_transpose(base + (iy * g->w + ix) * g->cs, dk, cg, ci, run, P, np, T);
            k += run;
            ci = 0;
            if (++kx == g->kw) {
                kx = 0;
                ky++;
            }
        }
    }
}

static inline __m512 lane_bcast(const int P, const float *p) {
    if (P == 1)
        return _mm512_set1_ps(*p);
    if (P == 2)
        return _mm512_castpd_ps(_mm512_broadcastsd_pd(_mm_load_sd((const double *)p)));
    if (P == 4)
        return _mm512_broadcast_f32x4(_mm_loadu_ps(p));
    if (P == 8)
        return _mm512_broadcast_f32x8(_mm256_loadu_ps(p));
    return _mm512_loadu_ps(p);
}

/* one tile: rows x 16 lanes += A [mr][lda] ([k][P]) x B [kc][16]; partial sums in accbuf between
 * k blocks; on the last block, permute to channel order, the epilogue, store lanes ``m`` */
static inline __attribute__((always_inline)) void
lane_micro(const int mr, const int P, long kc, const float *a, long lda, const float *b, float *c, long ldc,
           int rows, __mmask16 m, int first, int last, const epi_t *e, long col0, __mmask16 *bad,
           __m512i perm, float *accbuf) {
    __m512 acc[MRL];
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++)
        acc[r] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(accbuf + r * 16);
#ifdef MRVL_AVX2
    /* 16 ymm registers: the 12-row tile's 24 halves spilled; here 4-6 rows at a time through all kc
     * (12 rows: 6 + 6, 8: 4 + 4), each output's FMAs the same in the same k order */
    if (new_paths & PATH_LANES6) {
        const int ng = (mr + 5) / 6;
#pragma GCC unroll 2
        for (int g = 0; g < ng; g++) {
            const int r0 = g * mr / ng, n = (g + 1) * mr / ng - r0;
            __m256 c[6][2];
#pragma GCC unroll 6
            for (int r = 0; r < n; r++)
                c[r][0] = acc[r0 + r].lo, c[r][1] = acc[r0 + r].hi;
            const float *ar = a + r0 * lda;
            for (long p = 0; p < kc; p++) {
                __m256 b0 = _mm256_loadu_ps(b + p * 16), b1 = _mm256_loadu_ps(b + p * 16 + 8);
                KEEP_REG(b0);
                KEEP_REG(b1);
#pragma GCC unroll 6
                for (int r = 0; r < n; r++) {
                    const float *q = ar + r * lda + p * P;
                    __m256 s0, s1;
                    if (P == 16) {
                        s0 = _mm256_loadu_ps(q);
                        s1 = _mm256_loadu_ps(q + 8);
                    } else {
                        s0 = P == 1 ? _mm256_broadcast_ss(q)
                                : P == 2 ? _mm256_castpd_ps(_mm256_broadcast_sd((const double *)q))
                                : P == 4 ? _mm256_broadcast_ps((const __m128 *)q) : _mm256_loadu_ps(q);
                        KEEP_REG(s0);    /* P = 8: one load for both halves' FMAs */
                        s1 = s0;
                    }
                    c[r][0] = _mm256_fmadd_ps(s0, b0, c[r][0]);
                    c[r][1] = _mm256_fmadd_ps(s1, b1, c[r][1]);
                }
            }
#pragma GCC unroll 6
            for (int r = 0; r < n; r++)
                acc[r0 + r].lo = c[r][0], acc[r0 + r].hi = c[r][1];
        }
    } else
#endif
    for (long p = 0; p < kc; p++) {
        const __m512 bv = _mm512_loadu_ps(b + p * 16);
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++)
            acc[r] = _mm512_fmadd_ps(lane_bcast(P, a + r * lda + p * P), bv, acc[r]);
    }
    if (!last) {
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++)
            _mm512_storeu_ps(accbuf + r * 16, acc[r]);
        return;
    }
    epv_t E;
    epv_load(&E, e, col0);
    __mmask16 bd = 0;
    for (int r = 0; r < rows; r++)
        _mm512_mask_storeu_ps(c + r * ldc, m, finish_v(_mm512_permutexvar_ps(perm, acc[r]), &E, &bd));
    *bad |= bd & m;
}

#define LANE_MICRO(P, MR_) \
    static void lane_micro_##P##_##MR_(long kc, const float *a, long lda, const float *b, float *c, long ldc, \
                                       int rows, __mmask16 m, int first, int last, const epi_t *e, long col0, \
                                       __mmask16 *bad, __m512i perm, float *accbuf) { \
        (void)lda; \
        lane_micro(MR_, P, kc, a, LDL, b, c, ldc, rows, m, first, last, e, col0, bad, perm, accbuf); \
    }
LANE_MICRO(1, 12) LANE_MICRO(1, 8) LANE_MICRO(1, 4)
LANE_MICRO(2, 12) LANE_MICRO(2, 8) LANE_MICRO(2, 4)
LANE_MICRO(4, 12) LANE_MICRO(4, 8) LANE_MICRO(4, 4)
LANE_MICRO(8, 12) LANE_MICRO(8, 8) LANE_MICRO(8, 4)
LANE_MICRO(16, 12) LANE_MICRO(16, 8) LANE_MICRO(16, 4)

typedef void (*lane_micro_fn)(long, const float *, long, const float *, float *, long, int, __mmask16, int, int,
                              const epi_t *, long, __mmask16 *, __m512i, float *);

/* output pixels [m0, m1) of a grouped conv with og = 16 / P channels per group (every group):
 * wl [ceil(G/P)][K][16]. Returns 1 when every finished value is finite (always for code < 0). */
static int conv_lanes_range(const geom_t *g, long G, int P, const float *wl, long o, float *out, long m0, long m1,
                            const epi_t *e) {
    static __thread float abuf[MRL * LDL] __attribute__((aligned(64)));
    static __thread float accbuf[MRL * 16] __attribute__((aligned(64)));
    const lane_micro_fn fns[5][3] = {
        {lane_micro_1_12, lane_micro_1_8, lane_micro_1_4}, {lane_micro_2_12, lane_micro_2_8, lane_micro_2_4},
        {lane_micro_4_12, lane_micro_4_8, lane_micro_4_4}, {lane_micro_8_12, lane_micro_8_8, lane_micro_8_4},
        {lane_micro_16_12, lane_micro_16_8, lane_micro_16_4}};
    const int pi = P == 1 ? 0 : P == 2 ? 1 : P == 4 ? 2 : P == 8 ? 3 : 4;
    const long cg = g->c, og = 16 / P, K = g->kh * g->kw * cg, tiles = (G + P - 1) / P, kcmax = LK / P;
    int perm_i[16], i0[16], i1[16];
    for (int q = 0; q < 16; q++) {
        perm_i[q] = (int)((q % og) * P + q / og);           /* channel q of the tile <- lane */
        i0[q] = (int)((q % P) * cg + q / P);                /* lane q (< 32) of a whole tap <- input */
        i1[q] = (int)(((q + 16) % P) * cg + (q + 16) / P);
    }
    const __m512i perm = _mm512_loadu_si512(perm_i);
    __mmask16 bad = 0;
    for (long mp = m0; mp < m1; mp += MRL) {
        const int rows = (int)(m1 - mp < MRL ? m1 - mp : MRL);
        const int v = rows > 8 ? 0 : rows > 4 ? 1 : 2, mr = v == 0 ? 12 : v == 1 ? 8 : 4;
        const lane_micro_fn fn = fns[pi][v];
        lane_px_t px[MRL];
        lane_pixels(g, mp, rows, px);
        if (mp + MRL < m1) {
            /* the next panel's last window row, all channels: new input lines (at batch 8 the maps
             * come from DRAM; per tile a pixel is one line of a 256-512 byte stride) */
            lane_px_t nx[MRL];
            const int nrows = (int)(m1 - mp - MRL < MRL ? m1 - mp - MRL : MRL);
            lane_pixels(g, mp + MRL, nrows, nx);
            long done = -1;              /* the pixels' offsets only grow: each pixel once */
            for (int r = 0; r < nrows; r++) {
                const long iy = nx[r].iy0 + (g->kh - 1) * g->dh;
                if (iy < 0 || iy >= g->h)
                    continue;
                for (long kx = 0; kx < g->kw; kx++) {
                    const long ix = nx[r].ix0 + kx * g->dw, q = nx[r].base + (iy * g->w + ix) * g->cs;
                    if (ix < 0 || ix >= g->w || q <= done)
                        continue;
                    done = q;
                    for (long b = 0; b < g->cs * 4; b += 64)
                        _mm_prefetch((const char *)(g->x + q) + b, _MM_HINT_T0);
                }
            }
        }
        for (long t = 0; t < tiles; t++) {
            const long np = G - t * P < P ? G - t * P : P, width = P * cg, loaded = np * cg;
            const lane_tap_t T = {_mm512_loadu_si512(i0), _mm512_loadu_si512(i1),
                                  loaded >= 16 ? 0xFFFF : (__mmask16)((1u << loaded) - 1),
                                  loaded >= 32 ? 0xFFFF : (loaded <= 16 ? 0 : (__mmask16)((1u << (loaded - 16)) - 1)),
                                  width >= 16 ? 0xFFFF : (__mmask16)((1u << width) - 1),
                                  width <= 16 ? 0 : (__mmask16)((1u << (width - 16)) - 1), width <= 32,
                                  width == 16 && np == P};
            const long valid = np * og;
            const __mmask16 m = valid >= 16 ? 0xFFFF : (__mmask16)((1u << valid) - 1);
            for (long k0 = 0; k0 < K; k0 += kcmax) {
                const long kc = K - k0 < kcmax ? K - k0 : kcmax;
                pack_lanes(g, t * P * cg, np, P, &T, px, rows, mr, k0, kc, abuf, LDL);
                fn(kc, abuf, LDL, wl + (t * K + k0) * 16, out + mp * o + t * 16, o, rows, m, k0 == 0,
                   k0 + kcmax >= K, e, t * 16, &bad, perm, accbuf);
            }
        }
    }
    return bad ? 0 : 1;
}

/* One core's fp32 FMA peak, for the benchmarks (bench_sim_kernels.py, bench_sim_overhead.py): n
 * rounds of 12 independent 16-lane FMA chains (12 > the FMA latency x its throughput), nothing
 * else in the loop; *out: their sum, so that the loop is not dropped. A conv can at best run at
 * 16 MACs per such instruction. */
void fma_peak(long n, float *out) {
    const __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-7f);
    __m512 a0 = _mm512_set1_ps(0.0f), a1 = _mm512_set1_ps(1.0f), a2 = _mm512_set1_ps(2.0f), a3 = _mm512_set1_ps(3.0f),
           a4 = _mm512_set1_ps(4.0f), a5 = _mm512_set1_ps(5.0f), a6 = _mm512_set1_ps(6.0f), a7 = _mm512_set1_ps(7.0f),
           a8 = _mm512_set1_ps(8.0f), a9 = _mm512_set1_ps(9.0f), a10 = _mm512_set1_ps(10.0f), a11 = _mm512_set1_ps(11.0f);
    for (long i = 0; i < n; i++) {
        a0 = _mm512_fmadd_ps(a0, b, c), a1 = _mm512_fmadd_ps(a1, b, c), a2 = _mm512_fmadd_ps(a2, b, c);
        a3 = _mm512_fmadd_ps(a3, b, c), a4 = _mm512_fmadd_ps(a4, b, c), a5 = _mm512_fmadd_ps(a5, b, c);
        a6 = _mm512_fmadd_ps(a6, b, c), a7 = _mm512_fmadd_ps(a7, b, c), a8 = _mm512_fmadd_ps(a8, b, c);
        a9 = _mm512_fmadd_ps(a9, b, c), a10 = _mm512_fmadd_ps(a10, b, c), a11 = _mm512_fmadd_ps(a11, b, c);
    }
    const __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                   _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)),
                                                 _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11))));
    *out = _mm512_reduce_add_ps(s);
}

/* fp16 rounding of n floats in place (tests compare it with sim/fp16.py) */
void round_fp16(float *v, long n) {
    long i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(v + i, rne16(_mm512_loadu_ps(v + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(v + i, m, rne16(_mm512_maskz_loadu_ps(m, v + i)));
    }
}

/* ------------------------------------------------------------------ worker pool
 * Dispatching a layer through Python threads costs ~100 us on a VM (two futex wake-ups); these
 * workers poll for SPIN_NS after each task before they sleep (poll_wait: pause, then
 * sched_yield after YIELD_NS), so consecutive layers reach them in microseconds. One caller at
 * a time: a concurrent caller runs its work inline. */
#define MAXW 64
#define SPIN_NS 500000L

typedef void (*part_fn)(void *arg, long part);

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;     /* one dispatcher at a time */
static pthread_mutex_t sleep_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sleep_cond = PTHREAD_COND_INITIALIZER;
static int pool_size = 0;            /* worker threads started (besides the caller) */
static pid_t pool_pid = 0;
static atomic_long generation = 0;   /* bumped per dispatch */
static atomic_long parts_done = 0;
/* the parts not yet claimed, [lo, hi) as lo << 32 | hi (claim_part) */
static _Atomic uint64_t span = 0;
static part_fn cur_fn;
static void *cur_arg;
static atomic_int sleepers = 0;

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

/* Profiling (mrvl_profile): the time each thread spends inside parts, summed (work_ns), so that
 * a caller can compare it with the wall time: how much of it both cores computed. Off: one
 * predictable branch per part. */
static atomic_int profiling = 0;
static atomic_long work_ns = 0;
/* With a part log (run_steps_parts): per part [part, thread (0: the caller), its thread CPU ns,
 * its start (wall ns)]: CPU times do not count the time a thread waited for a core, so a loaded
 * machine still shows each part's cost and the split's balance. */
static long *part_log = NULL, part_log_cap = 0;
static atomic_long part_log_n = 0;
static _Thread_local int pool_tid = 0;

static long thread_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void run_part_profiled(part_fn fn, void *arg, long p) {
    const long t0 = now_ns(), c0 = part_log ? thread_ns() : 0;
    fn(arg, p);
    const long c1 = part_log ? thread_ns() : 0;
    atomic_fetch_add(&work_ns, now_ns() - t0);
    if (part_log) {
        const long i = atomic_fetch_add(&part_log_n, 1);
        if (i < part_log_cap) {
            long *r = part_log + 4 * i;
            r[0] = p, r[1] = pool_tid, r[2] = c1 - c0, r[3] = t0;
        }
    }
}

static inline void run_part(part_fn fn, void *arg, long p) {
    if (!atomic_load_explicit(&profiling, memory_order_relaxed)) {
        fn(arg, p);
        return;
    }
    run_part_profiled(fn, arg, p);
}

/* One round of a polling loop (w->t0: when it began, 0: not yet read): pause for the first
 * YIELD_NS, then sched_yield. A wait that long means the thread waited for (a worker holding a
 * part, or the caller between layers) is not running: preempted on a loaded machine, or sharing
 * this core (a woken worker placed on its waker's core); spinning with pause only kept the core
 * from it until the scheduler's time slice ran out (ms). Idle, a yield with nothing else to run
 * returns at once. Measured at load ~12-18 on 2 cores, MobileNetV2-style width 0.5, median of a
 * run: pause only 5.7-13.2 ms (23 ms at load 18), yielding after 20 us 7.0-11.3 ms, after 200 us
 * 6.9-7.1 ms, with the process pinned to one core or not (20 us gave away more of the time
 * slices to other processes). Returns the ns waited (checked every 256 rounds while pausing). */
#define YIELD_NS 200000L
typedef struct {
    long t0, spins;
} poll_t;

static inline long poll_wait(poll_t *w) {
    if (!w->t0)
        w->t0 = now_ns();
    if (w->spins >= 0) {
        _mm_pause();
        if (++w->spins % 256)
            return 0;
        const long waited = now_ns() - w->t0;
        if (waited <= YIELD_NS)
            return waited;
        w->spins = -1;               /* from now on: yield */
    }
    sched_yield();
    return now_ns() - w->t0;
}

/* The next part: the caller takes them from the front, the workers from the back, so on two threads
 * each takes one contiguous stretch of the rows (or channel blocks) and they meet where the work
 * balances. With one shared counter the claims interleaved (parts 0, 2, 4 on one thread, 1, 3, 5 on
 * the other). That kept a thread on its own rows only between layers split the same way; halves
 * line up whatever the layers' part counts and strides (4 or 8 parts, a stride-2 layer's half as
 * many rows, dw_pw's bands), and a 3x3 conv's halo rows cross one boundary between the threads
 * instead of seven. Idle 2-core Zen 5, the steps on two threads (bench_native_ab.py --threads 2, two
 * runs): ResNet-50 -1.3 to -2.2%, ResNet-18 -2.0 to -2.2%, MobileNetV2 1.0 -4.6 to -5.9%, 0.5 -5.8
 * to -7.7%. -1: none left. */
static long claim_part(int back) {
    uint64_t s = atomic_load_explicit(&span, memory_order_relaxed);
    for (;;) {
        const uint64_t lo = s >> 32, hi = s & 0xFFFFFFFFu;
        if (lo >= hi)
            return -1;
        const uint64_t n = back ? (lo << 32 | (hi - 1)) : ((lo + 1) << 32 | hi);
        if (atomic_compare_exchange_weak(&span, &s, n))
            return (long)(back ? hi - 1 : lo);
    }
}

static void work(void) {
    long p;
    const int back = pool_tid != 0;
    while ((p = claim_part(back)) >= 0) {
        run_part(cur_fn, cur_arg, p);
        atomic_fetch_add(&parts_done, 1);
    }
}

static atomic_int workers_started = 0;

/* ONNX_MRVL_SIM_PIN=1 (read when a worker is created): worker k is born pinned to the k-th CPU of
 * the process's allowed set (mod their count), the caller stays free, as onnxruntime's default
 * intra-op pool pins its workers (their /proc task affinity: one CPU each, the caller's thread
 * all). Off by default: on a shared machine a pinned worker cannot move off a busy core. For A/B
 * runs on an idle machine: can a worker woken onto its caller's core (both then share one core
 * until the scheduler moves one) explain a kernel timed at one-thread speed? */
static void pin_attr(pthread_attr_t *a, int k) {
    const char *v = getenv("ONNX_MRVL_SIM_PIN");
    cpu_set_t allowed, one;
    if (!v || strcmp(v, "1") != 0 || sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return;
    const int n = CPU_COUNT(&allowed);
    if (n < 2)
        return;
    for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed) || seen++ != k % n)
            continue;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        pthread_attr_setaffinity_np(a, sizeof one, &one);
        return;
    }
}

static void *worker(void *unused) {
    (void)unused;
    pool_tid = atomic_fetch_add(&workers_started, 1) + 1;
    long seen = atomic_load(&generation);
    for (;;) {
        poll_t w = {now_ns(), 0};
        while (atomic_load_explicit(&generation, memory_order_acquire) == seen) {
            if (poll_wait(&w) > SPIN_NS) {
                pthread_mutex_lock(&sleep_lock);
                atomic_fetch_add(&sleepers, 1);
                while (atomic_load(&generation) == seen)
                    pthread_cond_wait(&sleep_cond, &sleep_lock);
                atomic_fetch_sub(&sleepers, 1);
                pthread_mutex_unlock(&sleep_lock);
            }
        }
        seen = atomic_load(&generation);
        work();
    }
    return NULL;
}

/* run fn(arg, p) for p in [0, parts) on the caller and up to nthreads - 1 workers */
static void run_parts(part_fn fn, void *arg, long parts, int nthreads) {
    if (nthreads > MAXW)
        nthreads = MAXW;
    if (parts <= 1 || nthreads <= 1 || pthread_mutex_trylock(&pool_lock) != 0) {
        for (long p = 0; p < parts; p++)
            run_part(fn, arg, p);
        return;
    }
    if (pool_pid != getpid()) {          /* first use, or a forked child: no workers, and the
                                          * sleep state copied from the parent means nothing */
        pthread_mutex_init(&sleep_lock, NULL);
        pthread_cond_init(&sleep_cond, NULL);
        atomic_store(&sleepers, 0);
        pool_size = 0;
        pool_pid = getpid();
    }
    while (pool_size < nthreads - 1) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pin_attr(&a, pool_size + 1);
        if (pthread_create(&t, &a, worker, NULL) != 0) {
            pthread_attr_destroy(&a);
            break;
        }
        pthread_attr_destroy(&a);
        pool_size++;
    }
    cur_fn = fn;
    cur_arg = arg;
    atomic_store(&parts_done, 0);
    atomic_store(&span, (uint64_t)parts);
    atomic_fetch_add(&generation, 1);
    if (atomic_load(&sleepers) > 0) {
        pthread_mutex_lock(&sleep_lock);
        pthread_cond_broadcast(&sleep_cond);
        pthread_mutex_unlock(&sleep_lock);
    }
    work();
    poll_t w = {0, 0};
    while (atomic_load_explicit(&parts_done, memory_order_acquire) < parts)
        poll_wait(&w);        /* a part still running on a worker */
    pthread_mutex_unlock(&pool_lock);
}

/* Parts per thread: 4 for big layers (load balance), fewer for small ones, where each part's
 * setup and the final wait for the slowest part weigh more than the imbalance. */
static long part_factor(long work, long min_work) {
    return work >= 16 * min_work ? 4 : (work >= 4 * min_work ? 2 : 1);
}

/* The number of parts to split ``rows`` into, a few per thread once ``work`` reaches ``min_work``
 * (below it a handoff costs more than it saves); part p covers part_range(p, parts, rows). */
static long row_parts(long rows, long work, long min_work, int nthreads) {
    long parts = nthreads > 1 && work >= min_work ? nthreads * part_factor(work, min_work) : 1;
    if (parts > rows)
        parts = rows;
    return parts < 1 ? (rows ? 1 : 0) : parts;
}

/* [*a, *b): part p of ``total`` units split into ``parts`` parts whose sizes differ by at most one.
 * (Equal steps with a short last part left one thread idle at the end of small layers: 196 rows
 * of a 14x14 map in parts of 60, 60, 60, 16 gave the threads 120 and 76 rows.) */
static inline void part_range(long p, long parts, long total, long *a, long *b) {
    *a = p * total / parts;
    *b = (p + 1) * total / parts;
}

/* ------------------------------------------------------------------ conv entry point
 * A conv of at least CONV_PAR_MACS MACs (~5 us on one core) is split over the threads: a handoff
 * to a spinning worker costs ~1 us, and MobileNet's 7x7 / 14x14 layers of 0.3-1 M MACs ran on one
 * core while the other waited (a chain of 1x1 convs at 14x14x64: 18 us per layer on 1 or 2
 * threads before). Bigger layers get more parts per thread (part_factor of 1 M MACs). */
#define CONV_PAR_MACS (1L << 18)
typedef struct {
    const float *x;
    long h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
    const float *wpack;
    long o;
    float *out;
    long rows, nb, split_rows, parts;    /* nb: channel blocks of one group; parts: of MR-row chunks
                                          * (split_rows) or of channel blocks, balanced (part_range) */
    long groups;     /* parts: row ranges of step rows, or channel-block ranges */
    long lanes;      /* > 0: groups per vector (og = 16 / lanes), weights [ceil(G/lanes)][K/G][16] */
    const float *bias, *scale, *shift, *slope;
    int code;
    float p0, p1;
    const float *res;
    const epi_t *e2;
    atomic_int ok;
} conv_job;

static void conv_part(void *arg, long p) {
    conv_job *j = arg;
    long m0 = 0, m1 = j->rows, j0 = 0, j1 = j->nb;
    if (j->split_rows) {
        part_range(p, j->parts, (j->rows + MR - 1) / MR, &m0, &m1);
        m0 *= MR;
        m1 = m1 * MR < j->rows ? m1 * MR : j->rows;
    } else {
        part_range(p, j->parts, j->nb, &j0, &j1);
    }
    if (m0 >= m1 || j0 >= j1)
        return;
    if (j->lanes > 0) {
        const geom_t g = {j->x, j->h, j->w, j->c / j->groups, j->c, j->oh, j->ow, j->kh, j->kw, j->sh, j->sw,
                          j->dh, j->dw, j->pt, j->pl};
        const epi_t e = {j->bias, j->scale, j->shift, j->slope, j->code, j->p0, j->p1};
        if (!conv_lanes_range(&g, j->groups, (int)j->lanes, j->wpack, j->o, j->out, m0, m1, &e))
            atomic_fetch_and(&j->ok, 2);
        return;
    }
    /* a grouped conv: per block of MC rows, each group in turn, its input channels, weights, output
     * channels and epilogue vectors offset (the vectors are padded for the last group's block);
     * the groups share the block's input rows while they are in the cache */
    const long G = j->groups, cg = j->c / G, og = j->o / G, wstride = j->nb * j->kh * j->kw * cg * NR;
    const long step = G > 1 ? MC : m1 - m0;
    int r = 3;
    for (long ma = m0; ma < m1; ma += step) {
        const long mb = ma + step < m1 ? ma + step : m1;
        for (long g = 0; g < G; g++) {
            const long co = g * og;
            r &= conv_range(j->x + g * cg, j->h, j->w, cg, j->c, j->oh, j->ow, j->kh, j->kw, j->sh, j->sw, j->dh,
                            j->dw, j->pt, j->pl, j->wpack + g * wstride, og, j->o, j->out + co, ma, mb, j0, j1,
                            j->bias ? j->bias + co : NULL, j->scale ? j->scale + co : NULL,
                            j->shift ? j->shift + co : NULL, j->slope ? j->slope + co : NULL,
                            j->code, j->p0, j->p1, j->res, j->e2);
        }
    }
    if (r != 3)
        atomic_fetch_and(&j->ok, r);
}

/* a[0..8) <- the 8 x 8 transpose of a[0..8) (row r, lane k -> row k, lane r) */
static inline __attribute__((always_inline)) void tr8x8(__m256 a[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(a[i], a[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(a[i], a[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        a[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        a[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* ------------------------------------------------------------------ one input, one output channel
 * The GEMM tiles hold 32 output channels a row: with one, 31 of 32 lanes idled and each output pixel
 * cost a tile row's bookkeeping (basic-pitch's CQT filters, [1, 43849] -> [1, 21922] by 7 taps at
 * stride 2: 0.5 ms each, ~40 of them). Here 16 output pixels of a row are the lanes: per pixel
 * acc = 0, then one FMA per tap in the GEMM's k order (ky, kx), then the same epilogue (its channel-0
 * vectors in every lane), the fused Sum2D's too: the same operations per value, the same bits.
 * Only without padding (every tap inside the input, as the GEMM's packed rows then read). */
/* the epilogue of 16 output pixels of one channel (E, F: its vectors in every lane; res: a fused
 * Sum2D's operand or NULL), stored under m; the finiteness of each stage into bad / bad2 */
static inline __attribute__((always_inline)) void
one_channel_store(__m512 acc, const epv_t *E, const epv_t *F, const float *res, float *o, __mmask16 m,
                  __mmask16 *bad, __mmask16 *bad2) {
    __mmask16 b0 = 0;
    __m512 v = finish_v(acc, E, &b0);
    *bad |= b0 & m;
    if (res) {
        __mmask16 b1 = 0;
        v = finish_v(_mm512_add_ps(v, _mm512_maskz_loadu_ps(m, res)), F, &b1);
        *bad2 |= b1 & m;
    }
    _mm512_mask_storeu_ps(o, m, v);
}

typedef struct {
    const float *x, *w, *res;
    float *out;
    long n, h, wd, oh, ow, kh, kw, sh, sw, dh, dw, step;   /* step: units (16 pixels of a row) a part */
    epi_t e, e2;
    atomic_int ok;
} c1_job;

static void c1_part(void *arg, long p) {
    c1_job *j = arg;
    const long per_row = (j->ow + 15) / 16, units = j->n * j->oh * per_row;
    const long u0 = p * j->step, u1 = u0 + j->step < units ? u0 + j->step : units;
    epv_t E, F;
    epv_load(&E, &j->e, 0);
    epv_load(&F, &j->e2, 0);
    __mmask16 bad = 0, bad2 = 0;
    float t[16];
    for (long u = u0; u < u1; u++) {
        const long r = u / per_row, ox = u % per_row * 16, img = r / j->oh, oy = r % j->oh;
        const float *xr = j->x + (img * j->h + oy * j->sh) * j->wd;
        const long left = j->ow - ox;
        const int nl = left >= 16 ? 16 : (int)left;
        const __mmask16 m = nl == 16 ? 0xFFFF : (__mmask16)((1u << nl) - 1);
        __m512 acc = _mm512_setzero_ps();
        for (long ky = 0; ky < j->kh; ky++)
            for (long kx = 0; kx < j->kw; kx++) {
                const float *src = xr + ky * j->dh * j->wd + ox * j->sw + kx * j->dw;
                __m512 xv;
                if (j->sw == 1) {
                    xv = _mm512_maskz_loadu_ps(m, src);
                } else {
                    for (int l = 0; l < 16; l++)
                        t[l] = l < nl ? src[l * j->sw] : 0.0f;
                    xv = _mm512_loadu_ps(t);
                }
                acc = _mm512_fmadd_ps(xv, _mm512_set1_ps(j->w[(ky * j->kw + kx) * NR]), acc);
            }
        one_channel_store(acc, &E, &F, j->res ? j->res + r * j->ow + ox : NULL, j->out + r * j->ow + ox, m, &bad,
                          &bad2);
    }
    if (bad || bad2)
        atomic_fetch_and(&j->ok, (bad ? 0 : 1) | (bad2 ? 0 : 2));
}

/* an epilogue's channel-0 vectors broadcast into 16 lanes (vec: 4 x 16 floats of storage) */
static epi_t c1_epi(const epi_t *e, float *vec) {
    epi_t b = *e;
    const float *src[4] = {e->bias, e->scale, e->shift, e->slope};
    const float **dst[4] = {&b.bias, &b.scale, &b.shift, &b.slope};
    for (int i = 0; i < 4; i++) {
        if (!src[i])
            continue;
        for (int l = 0; l < 16; l++)
            vec[i * 16 + l] = src[i][0];
        *dst[i] = vec + i * 16;
    }
    return b;
}

static int conv_one_channel(const float *x, long n, long h, long w, long oh, long ow, long kh, long kw, long sh,
                            long sw, long dh, long dw, const float *wpack, float *out, const epi_t *e,
                            const float *res, const epi_t *e2, int nthreads) {
    float vec[2][64];
    const epi_t none = {NULL, NULL, NULL, NULL, 0, 0.0f, 0.0f};
    c1_job j = {x, wpack, res, out, n, h, w, oh, ow, kh, kw, sh, sw, dh, dw, 0, c1_epi(e, vec[0]),
                c1_epi(res ? e2 : &none, vec[1]), 3};
    const long units = n * oh * ((ow + 15) / 16), macs = n * oh * ow * kh * kw;   /* a 1-D signal: one row */
    long parts = nthreads > 1 && macs >= CONV_PAR_MACS ? nthreads * 2 : 1;
    if (parts > units)
        parts = units;
    j.step = (units + parts - 1) / parts;
    parts = (units + j.step - 1) / j.step;
    run_parts(c1_part, &j, parts, nthreads);
    return atomic_load(&j.ok);
}

/* A 1x1 stride-1 conv to one output channel (a DB text detector's or a segmenter's last layer, the
 * phase convs of its 2x2 ConvTranspose: 24 -> 1 at 320x320): 16 pixels as the lanes, their channels
 * brought into lanes 8 x 8 by tr8x8, one FMA per channel in order from 0 -- the GEMM's k order -- then
 * the same epilogue as conv_one_channel; the pixels [n * h * w] are one run (no padding, stride 1) */
typedef struct {
    const float *x, *w, *res;
    float *out;
    long px, c, step;
    epi_t e, e2;
    atomic_int ok;
} o1_job;

static void o1_part(void *arg, long p) {
    o1_job *j = arg;
    const long q0 = p * j->step, q1 = q0 + j->step < j->px ? q0 + j->step : j->px, c8 = j->c / 8 * 8;
    epv_t E, F;
    epv_load(&E, &j->e, 0);
    epv_load(&F, &j->e2, 0);
    __mmask16 bad = 0, bad2 = 0;
    float buf[16], t[8];
    for (long q = q0; q < q1; q += 16) {
        const int nl = q1 - q >= 16 ? 16 : (int)(q1 - q);
        const __mmask16 m = nl == 16 ? 0xFFFF : (__mmask16)((1u << nl) - 1);
        for (int half = 0; half < 2; half++) {
            const long base = q + 8 * half;
            const int nh = nl - 8 * half >= 8 ? 8 : (nl - 8 * half > 0 ? nl - 8 * half : 0);
            __m256 acc = _mm256_setzero_ps();
            for (long c0 = 0; nh && c0 < c8; c0 += 8) {
                __m256 a[8];
                for (int r = 0; r < 8; r++)
                    a[r] = r < nh ? _mm256_loadu_ps(j->x + (base + r) * j->c + c0) : _mm256_setzero_ps();
                tr8x8(a);
                for (int ci = 0; ci < 8; ci++)
                    acc = _mm256_fmadd_ps(a[ci], _mm256_set1_ps(j->w[(c0 + ci) * NR]), acc);
            }
            for (long ch = c8; nh && ch < j->c; ch++) {
                for (int r = 0; r < 8; r++)
                    t[r] = r < nh ? j->x[(base + r) * j->c + ch] : 0.0f;
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(t), _mm256_set1_ps(j->w[ch * NR]), acc);
            }
            _mm256_storeu_ps(buf + 8 * half, acc);
        }
        one_channel_store(_mm512_loadu_ps(buf), &E, &F, j->res ? j->res + q : NULL, j->out + q, m, &bad, &bad2);
    }
    if (bad || bad2)
        atomic_fetch_and(&j->ok, (bad ? 0 : 1) | (bad2 ? 0 : 2));
}

static int conv_one_out(const float *x, long px, long c, const float *wpack, float *out, const epi_t *e,
                        const float *res, const epi_t *e2, int nthreads) {
    float vec[2][64];
    const epi_t none = {NULL, NULL, NULL, NULL, 0, 0.0f, 0.0f};
    o1_job j = {x, wpack, res, out, px, c, 0, c1_epi(e, vec[0]), c1_epi(res ? e2 : &none, vec[1]), 3};
    const long blocks = (px + 15) / 16;
    long parts = nthreads > 1 && px * c >= CONV_PAR_MACS ? nthreads * 2 : 1;
    if (parts > blocks)
        parts = blocks;
    j.step = (blocks + parts - 1) / parts * 16;      /* whole blocks of 16 pixels a part */
    parts = (px + j.step - 1) / j.step;
    run_parts(o1_part, &j, parts, nthreads);
    return atomic_load(&j.ok);
}

/* One conv (FC: a 1x1 conv over [M,1,1,K]) on up to nthreads threads; wpack [ceil(o/NR)][K][NR],
 * out [n*oh*ow, o]; with groups > 1, wpack holds each group's [ceil(o/groups/NR)][K/groups][NR] in
 * turn, or with lanes > 0 (P groups of 16 / P channels per vector, native.lane_groups) each
 * tile's [K/groups][16] (no residual then). With res (same layout as out) and e2, a following Sum2D is fused: out holds
 * finish2(finish(conv) + res). Returns bit 0: every conv value finite (always set for code < 0,
 * which the caller finishes); bit 1: every fused Sum2D value finite (set when not fused). */
static int conv_nhwc(const float *x, long n, long h, long w, long c, long oh, long ow,
                     long kh, long kw, long sh, long sw, long dh, long dw, long pt, long pl,
                     const float *wpack, long o, float *out,
                     const float *bias, const float *scale, const float *shift, const float *slope,
                     int code, float p0, float p1, const float *res, const epi_t *e2, long groups, long lanes,
                     int nthreads) {
    if (groups < 1)
        groups = 1;
    if ((new_paths & PATH_ONE_CHANNEL) && c == 1 && o == 1 && groups == 1 && lanes <= 0 && pt == 0 && pl == 0
            && (oh - 1) * sh + (kh - 1) * dh < h && (ow - 1) * sw + (kw - 1) * dw < w && oh > 0 && ow > 0) {
        const epi_t e = {bias, scale, shift, slope, code, p0, p1};
        return conv_one_channel(x, n, h, w, oh, ow, kh, kw, sh, sw, dh, dw, wpack, out, &e, res, e2, nthreads);
    }
    if ((new_paths & PATH_ONE_OUT) && c > 1 && o == 1 && groups == 1 && lanes <= 0 && kh == 1 && kw == 1
            && sh == 1 && sw == 1 && pt == 0 && pl == 0 && oh == h && ow == w && n * h * w > 0) {
        const epi_t e = {bias, scale, shift, slope, code, p0, p1};
        return conv_one_out(x, n * h * w, c, wpack, out, &e, res, e2, nthreads);
    }
    conv_job j = {x, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, wpack, o, out,
                  n * oh * ow, (o / groups + NR - 1) / NR, 1, 0, groups, lanes, bias, scale, shift, slope, code,
                  p0, p1, res, e2, 3};
    const long K = kh * kw * c / groups, macs = j.rows * K * o;
    long parts = 1;
    if (nthreads > 1 && macs >= CONV_PAR_MACS) {
        /* rows split: every thread streams all the weights; channel split: all the input.
         * Split channels when the weights are the larger operand or the rows are few. */
        const int by_rows = groups > 1 || j.nb < nthreads || (j.rows >= (long)MR * 8 * nthreads && j.rows >= o);
        j.split_rows = by_rows;
        if (by_rows) {
            const long chunks = (j.rows + MR - 1) / MR;      /* MR-aligned parts, a few per thread */
            const long want = nthreads * part_factor(macs, 1L << 20);
            parts = want < chunks ? want : chunks;
        } else {
            /* one part per thread: every channel part packs all the rows' A panels again (2-5%
             * of a 14x14 / 7x7 layer each: with two parts per thread each thread packed twice) */
            parts = nthreads < j.nb ? nthreads : j.nb;
            if (kh * kw == 1 && j.nb % parts) {
                /* a 1x1 conv (no im2col to repeat per part) whose blocks do not divide evenly: parts
                 * of unequal size (5 blocks as 1, 1, 1, 2) left a thread idle for
                 * a block at the end (MobileNetV2's 7x7 projections: 20-27% of the layer). The
                 * smallest multiple of the threads up to 8 per thread that divides the blocks (18
                 * blocks: 6 parts), else for up to 8 blocks per thread a row split, one part per
                 * thread (each streams all the weights, at most 8 blocks per thread of them). One
                 * block per part with the rows split too (5 blocks: 10 parts, 15: 30) cost 20-50%
                 * more CPU than one thread on MobileNetV2 0.5's 14x14 / 7x7 expansions (part setup,
                 * a partial panel per part, each block's weights and rows in both cores' caches):
                 * its modelled two-thread makespan of the 1x1 convs 497-505 -> 463-477 us */
                long q = 2L * nthreads;
                while (q <= j.nb && q <= 8L * nthreads && j.nb % q)
                    q += nthreads;
                if (q <= j.nb && q <= 8L * nthreads) {
                    parts = q;
                } else if (j.nb <= 8L * nthreads && (j.rows + MR - 1) / MR >= nthreads) {
                    j.split_rows = 1;
                    parts = nthreads;
                }
            }
        }
    }
    if (parts <= 1) {
        j.split_rows = 1;
        parts = 1;
    }
    j.parts = parts;
    run_parts(conv_part, &j, parts, nthreads);
    return atomic_load(&j.ok);
}

/* ------------------------------------------------------------------ depthwise conv
 * out[n, oy, ox, c] = sum over in-range taps (row-major, the first a product, then FMAs, which
 * are exact for fp16 products) of x[n, iy, ix, c] * w[ky, kx, c], then the epilogue.
 * x [n, h, w, c]; w [kh*kw][cp] and the epilogue vectors zero-padded to cp (a multiple of 64). */
typedef struct {
    const float *x, *w;
    long n, h, wd, c, cp, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
    float *out;
    long parts, cparts;                  /* parts: of rows x cparts: of 64-channel units */
    epi_t e;
    atomic_int ok;
} dw_job;

/* one output pixel, all channels, four 16-channel vectors at a time (four FMA chains in flight):
 * the pixels the 8-pixel blocks do not cover (borders, and rows narrower than a block) */
static void dw_pixel_all(const dw_job *j, long n, long y0, long x0, float *o, long c0, long c1, __mmask16 *bad) {
    for (long cb = c0; cb < c1; cb += 64) {
        __m512 acc[4];
        __mmask16 m[4];
        for (int v = 0; v < 4; v++) {
            const long left = c1 - cb - 16 * v;
            m[v] = left >= 16 ? 0xFFFF : (left <= 0 ? 0 : (__mmask16)((1u << left) - 1));
            acc[v] = _mm512_setzero_ps();
        }
        int first = 1;
        for (long ky = 0; ky < j->kh; ky++) {
            const long iy = y0 + ky * j->dh;
            if (iy < 0 || iy >= j->h)
                continue;
            for (long kx = 0; kx < j->kw; kx++) {
                const long ix = x0 + kx * j->dw;
                if (ix < 0 || ix >= j->wd)
                    continue;
                const float *xs = j->x + ((n * j->h + iy) * j->wd + ix) * j->c + cb;
                const float *ws = j->w + (ky * j->kw + kx) * j->cp + cb;
#pragma GCC unroll 4
                for (int v = 0; v < 4; v++) {
                    const __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(m[v], xs + 16 * v), _mm512_loadu_ps(ws + 16 * v));
                    acc[v] = first ? p : _mm512_add_ps(acc[v], p);     /* product then add: as an FMA */
                }
                first = 0;
            }
        }
        for (int v = 0; v < 4 && m[v]; v++) {
            __mmask16 b = 0;
            const __m512 y = finish(acc[v], &j->e, cb + 16 * v, &b);
            *bad |= b & m[v];
            _mm512_mask_storeu_ps(o + cb + 16 * v, m[v], y);
        }
    }
}

#define DWB 8   /* interior output pixels per register block */

/* The finished values of NB pixels' sums acc (16 channels from cb, lanes m) stored at ob (pixel
 * stride c); the lanes that were not finite. A simple_epilogue (bias, then none / relu / clamp) as
 * micro_lda's short form, v + bias then min(hi, max(lo, v)) (act_bounds: bit for bit finish_v's),
 * without finish_v's tests and switch per vector. */
static inline __attribute__((always_inline)) __mmask16
dw_store(const int full, const int NB, const dw_job *j, const __m512 *acc, __mmask16 m, float *ob, long cb) {
    const long c = j->c;
    __mmask16 bad = 0;
    const int simple = (new_paths & PATH_AVX2_TILES) && simple_epilogue(&j->e, NULL, NULL);
    epv_t E = {0};
    __m512 bv = _mm512_setzero_ps(), lo = bv, hi = bv;
    if (simple) {
        bv = _mm512_loadu_ps(j->e.bias + cb);
        act_bounds(&j->e, &lo, &hi);
    } else {
        epv_load(&E, &j->e, cb);
    }
#pragma GCC unroll 8
    for (int t = 0; t < NB; t++) {
        __mmask16 bb = 0;
        const __m512 y = simple ? rne16(_mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_add_ps(acc[t], bv))))
                                : finish_v(acc[t], &E, &bb);
        bad = _kor_mask16(bad, simple ? nonfinite(y) : bb);
        if (full)
            _mm512_storeu_ps(ob + t * c, y);
        else
            _mm512_mask_storeu_ps(ob + t * c, m, y);
    }
    return bad & m;
}

/* NB (8 or 4) interior output pixels x 16 channels [cb, cb + 16) (lanes m) of one output row: xb
 * the first pixel's first in-range tap, wt its weights, nky kernel rows in range; the finished
 * values go to ob (pixel stride c). Returns the lanes that were not finite. Compiled for whole
 * channel blocks (full: plain loads; a masked load costs a zeroing move and a dependency), for
 * row3 (stride 1, 3 taps wide: a row of NB + 2 input vectors serves all three taps; else tap by
 * tap) and for NB (4: maps whose interior row is 4-7 pixels wide, 7x7 and 14x14 / 2, which
 * otherwise ran pixel by pixel: MobileNetV2's 7x7x960 0.045 -> 0.034 ms, 14x14x576 / 2 0.031 ->
 * 0.021 ms, one thread). Every path sums the taps in the same order (kernel rows, then taps, the
 * first a product). A stride-2 row3 (2 NB + 1 input vectors for the three taps, 40% fewer loads)
 * measured no faster (loads are not what bounds the /2 layers) and was not kept. The epilogue's vectors are
 * loaded after the sums: held through them they took 6 of the 32 registers, and the tap loop
 * spilled its input vectors. */
#ifdef MRVL_AVX2
/* finish_v on lanes 0-7 of half h of the block's epilogue (Eh: both halves of each vector set to
 * half h, epv_half): finish_v itself on (v, v), whose two halves are the same operations on the same
 * values (GCC computes them once); the result's and *bad's lanes 0-7 */
static inline __attribute__((always_inline)) void epv_half(epv_t *Eh, const epv_t *E, int h) {
    *Eh = *E;
#define EPV_HALF(f) Eh->f = mrvl_pair(h ? E->f.hi : E->f.lo, h ? E->f.hi : E->f.lo)
    EPV_HALF(bias); EPV_HALF(scale); EPV_HALF(shift); EPV_HALF(slope);
#undef EPV_HALF
}
static inline __attribute__((always_inline)) __m256 finish_half(__m256 v, const epv_t *Eh, __mmask16 *bad) {
    __mmask16 b = 0;
    const __m512 y = finish_v(mrvl_pair(v, v), Eh, &b);
    *bad |= b & 0xff;
    return y.lo;
}

/* dw_block's row3 form on 16 ymm registers: the 16 channels as two 8-lane halves, one after the
 * other (the 16-lane block held 8 accumulators and 10 input vectors in 36 halves: spilled), each
 * with NB accumulators and three weights. A kernel row's NB + 2 input vectors are loaded once each,
 * in order, each FMAed into the (up to) three pixels whose tap it is (pixel t: x[t] * w0 first, then
 * x[t + 1] * w1, then x[t + 2] * w2, as dw_block), so every pixel sums the same products in the same
 * order: the same bits. Lanes 8-15 are skipped when m leaves none. MobileNetV2's 3x3 at 56x56x144,
 * one thread: -10 to -13% (benchmarks/bench_native_ab.py). The tap-by-tap form (stride 2) and
 * dw_row3 (rows of 4-8 pixels) measured 20-30% slower in halves (8 FMA chains against 16, whose
 * spills cost less) and stay 16 lanes wide. */
static inline __attribute__((always_inline)) void
dw_row3_taps8(const int full, const int NB, const int first, const dw_job *j, const float *xb, const float *wt,
              unsigned mh, __m256 acc[]) {
    const long c = j->c;
    const __m256 w0 = _mm256_loadu_ps(wt), w1 = _mm256_loadu_ps(wt + j->cp), w2 = _mm256_loadu_ps(wt + 2 * j->cp);
#pragma GCC unroll 10
    for (int t = 0; t < NB + 2; t++) {
        const __m256 xv = full ? _mm256_loadu_ps(xb + t * c) : mrvl_maskz_loadu8(mh, xb + t * c);
        if (t < NB)              /* the row's first tap: a product on the first kernel row */
            acc[t] = first ? mrvl_mul8(xv, w0) : _mm256_fmadd_ps(xv, w0, acc[t]);
        if (t >= 1 && t - 1 < NB)
            acc[t - 1] = _mm256_fmadd_ps(xv, w1, acc[t - 1]);
        if (t >= 2)
            acc[t - 2] = _mm256_fmadd_ps(xv, w2, acc[t - 2]);
    }
}

/* The finished values of a block's half h (lanes 8h .. 8h + 7 of the 16 channels from cb, lanes mh of
 * them) of NB pixels' sums acc, stored at ob (pixel stride c); the lanes that were not finite (bits of
 * mh). simple (simple_epilogue: bias, then none / relu / clamp): the epilogue as micro_lda's short form,
 * v + bias, min(hi, max(lo, v)) (bit for bit finish_v's, act_bounds), the fp16 rounding, and the lanes'
 * largest |bits| kept for one finiteness test per half (finish_v's switch and mask per vector took ~45%
 * of the layer: 0.405 against 0.222 ms without any epilogue, 56x56x144, one thread); else finish_v on
 * the half (epv_half). */
static inline __attribute__((always_inline)) __mmask16
dw_store_half(const int full, const int simple, const int NB, const dw_job *j, const __m256 *acc, unsigned mh, int h,
              const epv_t *E, __m512 lo, __m512 hi, float *ob, long cb) {
    const long c = j->c;
    __mmask16 bh = 0;
    if (simple) {
        const __m256 b8 = _mm256_loadu_ps(j->e.bias + cb + 8 * h);
        const __m256i abs = _mm256_set1_epi32(0x7fffffff);
        __m256i big = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int t = 0; t < NB; t++) {
            const __m256 y = _mm256_cvtph_ps(_mm256_cvtps_ph(
                _mm256_min_ps(hi.lo, _mm256_max_ps(lo.lo, mrvl_add8(acc[t], b8))),
                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            big = _mm256_max_epu32(big, _mm256_and_si256(_mm256_castps_si256(y), abs));
            if (full)
                _mm256_storeu_ps(ob + t * c + 8 * h, y);
            else
                mrvl_mask_storeu8(ob + t * c + 8 * h, mh, y);
        }
        bh = (__mmask16)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(big, _mm256_set1_epi32(0x7f7fffff))));
    } else {
        epv_t Eh;
        epv_half(&Eh, E, h);
#pragma GCC unroll 8
        for (int t = 0; t < NB; t++) {
            const __m256 y = finish_half(acc[t], &Eh, &bh);
            if (full)
                _mm256_storeu_ps(ob + t * c + 8 * h, y);
            else
                mrvl_mask_storeu8(ob + t * c + 8 * h, mh, y);
        }
    }
    return bh & mh;
}

/* dw_block on 16 ymm registers, the 16 channels as two 8-lane halves one after the other (the 16-lane
 * block's 8 accumulators alone filled the 16 registers: spilled). row3: dw_row3_taps8 per kernel row;
 * else tap by tap (strided, dilated or not 3 wide): for each in-range kernel row and tap, the NB pixels'
 * inputs (pixel stride sw c) FMAed with the tap's weights, the first tap a product. Every pixel sums
 * the same products in the same order as dw_block: the same bits. Lanes 8-15 are skipped when m leaves
 * none. MobileNetV2's 3x3/2 at 112x112x96 (one thread, thread CPU, bench_native_ab): 0.288 -> 0.271 ms. */
static inline __attribute__((always_inline)) __mmask16
dw_block_h(const int full, const int simple, const int row3, const int NB, const dw_job *j, const float *xb,
           const float *wt, long nky, __mmask16 m, float *ob, long cb) {
    const long c = j->c, rowstep = j->dh * j->wd * c, pixstride = j->sw * c, tapstride = j->dw * c;
    epv_t E = {0};
    __m512 lo = _mm512_setzero_ps(), hi = lo;
    if (simple)
        act_bounds(&j->e, &lo, &hi);
    else
        epv_load(&E, &j->e, cb);
    __mmask16 bad = 0;
    for (int h = 0; h < 2; h++) {
        const unsigned mh = (m >> (8 * h)) & 0xFF;
        if (!mh)
            break;
        __m256 acc[DWB];
        const float *x = xb + 8 * h, *w = wt + 8 * h;
        if (row3) {
            dw_row3_taps8(full, NB, 1, j, x, w, mh, acc);
            for (long ky = 1; ky < nky; ky++)
                dw_row3_taps8(full, NB, 0, j, x + ky * rowstep, w + ky * 3 * j->cp, mh, acc);
        } else {
            int first = 1;
            for (long ky = 0; ky < nky; ky++) {
                const float *xt = x + ky * rowstep;
                for (long kx = 0; kx < j->kw; kx++, xt += tapstride, w += j->cp) {
                    const __m256 wv = _mm256_loadu_ps(w);
#pragma GCC unroll 8
                    for (int t = 0; t < NB; t++) {
                        const __m256 xv = full ? _mm256_loadu_ps(xt + t * pixstride) : mrvl_maskz_loadu8(mh, xt + t * pixstride);
                        acc[t] = first ? mrvl_mul8(xv, wv) : _mm256_fmadd_ps(xv, wv, acc[t]);
                    }
                    first = 0;
                }
            }
        }
        bad |= dw_store_half(full, simple, NB, j, acc, mh, h, &E, lo, hi, ob, cb) << (8 * h);
    }
    return bad;
}
#endif

/* one kernel row of dw_block's row3 form: its NB + 2 input vectors (pixel stride c) serve the three
 * taps of the NB pixels, x[t] * w0 (a product on the first kernel row), then x[t + 1] * w1, x[t + 2] * w2 */
static inline __attribute__((always_inline)) void
dw_krow3(const int full, const int NB, const int first, const float *xb, const float *wt, long c, long cp, __mmask16 m,
         __m512 acc[]) {
    __m512 xv[DWB + 2];
#pragma GCC unroll 10
    for (int t = 0; t < NB + 2; t++)
        xv[t] = full ? _mm512_loadu_ps(xb + t * c) : _mm512_maskz_loadu_ps(m, xb + t * c);
    const __m512 w0 = _mm512_loadu_ps(wt), w1 = _mm512_loadu_ps(wt + cp), w2 = _mm512_loadu_ps(wt + 2 * cp);
    if (first) {
#pragma GCC unroll 8
        for (int t = 0; t < NB; t++)
            acc[t] = _mm512_mul_ps(xv[t], w0);
    } else {
#pragma GCC unroll 8
        for (int t = 0; t < NB; t++)
            acc[t] = _mm512_fmadd_ps(xv[t], w0, acc[t]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < NB; t++)
        acc[t] = _mm512_fmadd_ps(xv[t + 1], w1, acc[t]);
#pragma GCC unroll 8
    for (int t = 0; t < NB; t++)
        acc[t] = _mm512_fmadd_ps(xv[t + 2], w2, acc[t]);
}

static inline __attribute__((always_inline)) __mmask16
dw_block(const int full, const int row3, const int NB, const dw_job *j, const float *xb, const float *wt, long nky,
         __mmask16 m, float *ob, long cb) {
    const long c = j->c, rowstep = j->dh * j->wd * c, pixstride = j->sw * c, tapstride = j->dw * c;
    __m512 acc[DWB];
#pragma GCC unroll 8
    for (int t = 0; t < NB; t++)
        acc[t] = _mm512_setzero_ps();        /* nky >= 1: overwritten by the first tap's products */
    if (row3 && nky == 3) {
        /* all three kernel rows in range (every row but a map's top and bottom ones): the loop below
         * unrolled, the same loads and FMAs in the same order without its counters (one thread:
         * MobileNetV2's 3x3 at 56x56x144 and 112x112x32 -10%, 14x14x384 -17%, bench_native_ab.py;
         * unrolling the strided tap-by-tap loop alike made dw_rows large enough to lose it again) */
#pragma GCC unroll 3
        for (long ky = 0; ky < 3; ky++, xb += rowstep, wt += 3 * j->cp)
            dw_krow3(full, NB, ky == 0, xb, wt, c, j->cp, m, acc);
    } else if (row3) {
        for (long ky = 0; ky < nky; ky++, xb += rowstep, wt += 3 * j->cp)
            dw_krow3(full, NB, ky == 0, xb, wt, c, j->cp, m, acc);
    } else {
        int first = 1;
        for (long ky = 0; ky < nky; ky++, xb += rowstep) {
            const float *xt = xb;
            for (long kx = 0; kx < j->kw; kx++, xt += tapstride, wt += j->cp) {
                const __m512 wv = _mm512_loadu_ps(wt);
                if (first) {                     /* the first tap: a product */
#pragma GCC unroll 8
                    for (int t = 0; t < NB; t++)
                        acc[t] = _mm512_mul_ps(full ? _mm512_loadu_ps(xt + t * pixstride)
                                                    : _mm512_maskz_loadu_ps(m, xt + t * pixstride), wv);
                    first = 0;
                } else {
#pragma GCC unroll 8
                    for (int t = 0; t < NB; t++)
                        acc[t] = _mm512_fmadd_ps(full ? _mm512_loadu_ps(xt + t * pixstride)
                                                      : _mm512_maskz_loadu_ps(m, xt + t * pixstride), wv, acc[t]);
                }
            }
        }
    }
    return dw_store(full, NB, j, acc, m, ob, cb);
}

/* dw_block for a runtime row3 and whole / masked channel block, at NB pixels */
static inline __attribute__((always_inline)) __mmask16
dw_block_nb(const int NB, int row3, const dw_job *j, const float *xb, const float *wt, long nky, __mmask16 m,
            float *ob, long cb) {
#ifdef MRVL_AVX2
    if (row3 ? (new_paths & PATH_AVX2_TILES) : (new_paths & PATH_DW_TAPS8)) {
        const int full = m == 0xFFFF, simple = simple_epilogue(&j->e, NULL, NULL);
#define DW_H(F, S) (row3 ? dw_block_h(F, S, 1, NB, j, xb, wt, nky, m, ob, cb) : dw_block_h(F, S, 0, NB, j, xb, wt, nky, m, ob, cb))
        return full ? (simple ? DW_H(1, 1) : DW_H(1, 0)) : (simple ? DW_H(0, 1) : DW_H(0, 0));
#undef DW_H
    }
#endif
    if (m == 0xFFFF && row3)
        return dw_block(1, 1, NB, j, xb, wt, nky, m, ob, cb);
    if (m == 0xFFFF)
        return dw_block(1, 0, NB, j, xb, wt, nky, m, ob, cb);
    if (row3)
        return dw_block(0, 1, NB, j, xb, wt, nky, m, ob, cb);
    return dw_block(0, 0, NB, j, xb, wt, nky, m, ob, cb);
}

/* A whole output row of NB = ow (4-8) pixels x 16 channels of a 3-wide kernel with one column of
 * left padding (dilation 1, any stride): MobileNet's 7x7 maps (3x3, and 14x14 / 2). Pixel 0's
 * kx = 0 tap lies in the padding, and the last pixel's kx = 2 tap too unless last_in; every other
 * tap is in range. The blocks of 4 and the pixel-by-pixel borders (dw_pixel_all, its sums on the
 * stack) computed 8 + 2 pixel-rows for 7 pixels: 7x7x960 spent ~40% of its time in the borders.
 * Each pixel sums its in-range taps in the same order (kernel rows, then taps; the first a
 * product, the others FMAs of exact products: dw_pixel_all's multiply then add), so the bits are
 * those of dw_block / dw_pixel_all. xr: the input row of kernel row ky0 at ix = 0, channel cb. */
static inline __attribute__((always_inline)) __mmask16
dw_row3(const int NB, const int full, const int first_pad, const dw_job *j, const float *xr, const float *wt, long nky,
        int last_in, __mmask16 m, float *ob, long cb) {
    const long c = j->c, rowstep = j->dh * j->wd * c, ps = j->sw * c;
#define DWR_LD(p) (full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, (p)))
    __m512 acc[8];
#pragma GCC unroll 8
    for (int t = 0; t < NB; t++)
        acc[t] = _mm512_setzero_ps();        /* nky >= 1: overwritten by the first tap's products */
    for (long ky = 0; ky < nky; ky++, xr += rowstep, wt += 3 * j->cp) {
        const __m512 w0 = _mm512_loadu_ps(wt), w1 = _mm512_loadu_ps(wt + j->cp), w2 = _mm512_loadu_ps(wt + 2 * j->cp);
        if (ky == 0) {                       /* the first in-range tap: a product */
            if (first_pad)
                acc[0] = _mm512_mul_ps(DWR_LD(xr), w1);
#pragma GCC unroll 8
            for (int t = first_pad; t < NB; t++)
                acc[t] = _mm512_mul_ps(DWR_LD(xr + t * ps - c), w0);
        } else {
            if (first_pad)
                acc[0] = _mm512_fmadd_ps(DWR_LD(xr), w1, acc[0]);
#pragma GCC unroll 8
            for (int t = first_pad; t < NB; t++)
                acc[t] = _mm512_fmadd_ps(DWR_LD(xr + t * ps - c), w0, acc[t]);
        }
#pragma GCC unroll 8
        for (int t = first_pad; t < NB; t++)
            acc[t] = _mm512_fmadd_ps(DWR_LD(xr + t * ps), w1, acc[t]);
#pragma GCC unroll 8
        for (int t = 0; t < NB - 1; t++)
            acc[t] = _mm512_fmadd_ps(DWR_LD(xr + t * ps + c), w2, acc[t]);
        if (last_in)
            acc[NB - 1] = _mm512_fmadd_ps(DWR_LD(xr + (NB - 1) * ps + c), w2, acc[NB - 1]);
    }
#undef DWR_LD
    return dw_store(full, NB, j, acc, m, ob, cb);
}

#define DW_ROW3_NB(NB) \
    static __mmask16 dw_row3_##NB(const dw_job *j, const float *xr, const float *wt, long nky, int last_in, \
                                  __mmask16 m, float *ob, long cb) { \
        return m == 0xFFFF ? dw_row3(NB, 1, 1, j, xr, wt, nky, last_in, m, ob, cb) \
                           : dw_row3(NB, 0, 1, j, xr, wt, nky, last_in, m, ob, cb); \
    }
DW_ROW3_NB(4) DW_ROW3_NB(5) DW_ROW3_NB(6) DW_ROW3_NB(7) DW_ROW3_NB(8)
typedef __mmask16 (*dw_row3_fn)(const dw_job *, const float *, const float *, long, int, __mmask16, float *, long);
static const dw_row3_fn dw_row3_fns[5] = {dw_row3_4, dw_row3_5, dw_row3_6, dw_row3_7, dw_row3_8};

/* The 8-pixel blocks at the two ends of a wider row of a 3-wide kernel with one column of left
 * padding (dilation 1, any stride): dw_row3 on the row's first 8 pixels (pixel 0's kx = 0 tap in the
 * padding) and, when the row's last pixel's kx = 2 tap lies in the padding too, a mirrored block
 * on its last 8 pixels (first_pad 0, last_in 0). These pixels went through dw_pixel_all one by one
 * (per tap its bounds, per 64 channels its masks): 2 of 56 pixels a row of MobileNetV2's 3x3 at
 * 56x56x144 took ~12% of the layer. The same taps in the same order, the first a product: the
 * same bits. xr: the input row of kernel row ky0 at ix = the block's first pixel's ox x stride. */
static __mmask16 dw_edge_left(const dw_job *j, const float *xr, const float *wt, long nky, __mmask16 m, float *ob,
                              long cb) {
    return m == 0xFFFF ? dw_row3(DWB, 1, 1, j, xr, wt, nky, 1, m, ob, cb) : dw_row3(DWB, 0, 1, j, xr, wt, nky, 1, m, ob, cb);
}
static __mmask16 dw_edge_right(const dw_job *j, const float *xr, const float *wt, long nky, __mmask16 m, float *ob,
                               long cb) {
    return m == 0xFFFF ? dw_row3(DWB, 1, 0, j, xr, wt, nky, 0, m, ob, cb) : dw_row3(DWB, 0, 0, j, xr, wt, nky, 0, m, ob, cb);
}

/* rows of 4-8 pixels, a 3-wide kernel, one column of left padding: dw_row3 (else NULL) */
static dw_row3_fn dw_row_fn(const dw_job *j) {
    return (new_paths & PATH_DW_ROW) && j->kw == 3 && j->dw == 1 && j->pl == 1 && j->ow >= 4 && j->ow <= 8
           && (j->ow - 1) * j->sw <= j->wd - 1 ? dw_row3_fns[j->ow - 4] : NULL;
}

/* dw_rows for dw_row_fn's rows: each output row whole, all of its pixels in registers */
static int dw_rows_whole(const dw_job *j, dw_row3_fn rowfn, long r0, long r1, long c0, long c1) {
    const int last_in = (j->ow - 1) * j->sw + 1 < j->wd;
    const long rowstride = j->wd * j->c;
    __mmask16 bad = 0;
    for (long r = r0; r < r1; r++) {
        const long n = r / j->oh, oy = r % j->oh, y0 = oy * j->sh - j->pt;
        long ky0 = 0, ky1 = j->kh;                   /* kernel rows in range */
        while (ky0 < j->kh && y0 + ky0 * j->dh < 0)
            ky0++;
        while (ky1 > ky0 && y0 + (ky1 - 1) * j->dh >= j->h)
            ky1--;
        float *orow = j->out + r * j->ow * j->c;
        if (ky0 == ky1) {                            /* no tap in range: dw_pixel_all's zeros */
            for (long ox = 0; ox < j->ow; ox++)
                dw_pixel_all(j, n, y0, ox * j->sw - j->pl, orow + ox * j->c, c0, c1, &bad);
            continue;
        }
        const float *xr = j->x + (n * j->h + y0 + ky0 * j->dh) * rowstride;
        for (long cb = c0; cb < c1; cb += 16) {
            const long left = c1 - cb;
            const __mmask16 m = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
            bad |= rowfn(j, xr + cb, j->w + ky0 * 3 * j->cp + cb, ky1 - ky0, last_in, m, orow + cb, cb);
        }
    }
    return bad ? 0 : 1;
}

/* output rows [r0, r1) (of n * oh), channels [c0, c1); returns 1 when every value is finite */
static int dw_rows(const dw_job *j, long r0, long r1, long c0, long c1) {
    /* interior columns: every kx tap in range */
    long lo = j->pl > 0 ? (j->pl + j->sw - 1) / j->sw : 0, hi = (j->wd - 1 - (j->kw - 1) * j->dw + j->pl) / j->sw + 1;
    if (j->wd - 1 - (j->kw - 1) * j->dw + j->pl < 0)
        hi = 0;
    if (lo > j->ow)
        lo = j->ow;
    if (hi > j->ow)
        hi = j->ow;
    if (hi < lo)
        hi = lo;
    __mmask16 bad = 0;
    const long rowstride = j->wd * j->c;
    const int row3 = j->sw == 1 && j->dw == 1 && j->kw == 3;
    /* a row's two ends as 8-pixel blocks (dw_edge_left / right): a 3-wide kernel with one column of
     * left padding, the right end's padding at most one column, rows of at least 9 pixels (the two
     * blocks overlap in rows under 16: those pixels computed twice, the same values); the interior
     * blocks then run over [blo, bhi) */
    const int edges = (new_paths & PATH_DW_EDGES) && j->kw == 3 && j->dw == 1 && j->pl == 1 && lo == 1
                      && hi >= j->ow - 1 && j->ow > DWB;
    const int right = edges && hi < j->ow;           /* the last pixel's kx = 2 tap in the padding */
    const long blo = edges ? DWB : lo, bhi = right ? j->ow - DWB : hi;
    for (long r = r0; r < r1; r++) {
        const long n = r / j->oh, oy = r % j->oh, y0 = oy * j->sh - j->pt;
        long ky0 = 0, ky1 = j->kh;                   /* kernel rows in range */
        while (ky0 < j->kh && y0 + ky0 * j->dh < 0)
            ky0++;
        while (ky1 > ky0 && y0 + (ky1 - 1) * j->dh >= j->h)
            ky1--;
        float *orow = j->out + r * j->ow * j->c;
        /* interior pixels in blocks of 8, or of 4 when the interior is 4-7 pixels wide */
        const long nb = hi - lo >= DWB ? DWB : (hi - lo >= 4 && (new_paths & PATH_DW4) ? 4 : 0);
        const int blocks = ky0 < ky1 && nb;
        if (blocks) {
            /* pixel blocks outside, channel blocks inside: each pixel's channels are read and
             * written as one contiguous run (channels outside walked the rows once per 16
             * channels at the pixel stride, missing the cache on every line at batch 8) */
            if (edges) {
                const float *xr = j->x + (n * j->h + y0 + ky0 * j->dh) * rowstride;
                const float *wt = j->w + ky0 * 3 * j->cp;
                const long oxr = j->ow - DWB;
                for (long cb = c0; cb < c1; cb += 16) {
                    const long left = c1 - cb;
                    const __mmask16 m = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
                    bad |= dw_edge_left(j, xr + cb, wt + cb, ky1 - ky0, m, orow + cb, cb);
                    if (right)
                        bad |= dw_edge_right(j, xr + oxr * j->sw * j->c + cb, wt + cb, ky1 - ky0, m, orow + oxr * j->c + cb, cb);
                }
            }
            for (long oxb = blo; oxb < bhi; oxb += nb) {
                const long ox = bhi - oxb < nb ? bhi - nb : oxb;   /* a last block overlapping the one before: same values */
                for (long cb = c0; cb < c1; cb += 16) {
                    const long left = c1 - cb;
                    const __mmask16 m = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
                    const float *xb = j->x + (n * j->h + y0 + ky0 * j->dh) * rowstride + (ox * j->sw - j->pl) * j->c + cb;
                    const float *wt = j->w + ky0 * j->kw * j->cp + cb;
                    float *ob = orow + ox * j->c + cb;
                    if (nb == DWB)
                        bad |= dw_block_nb(DWB, row3, j, xb, wt, ky1 - ky0, m, ob, cb);
                    else
                        bad |= dw_block_nb(4, row3, j, xb, wt, ky1 - ky0, m, ob, cb);
                }
            }
        }
        for (long ox = 0; ox < j->ow; ox++) {           /* every pixel the blocks did not cover */
            if (blocks && (edges || (ox >= lo && ox < hi)))
                continue;
            dw_pixel_all(j, n, y0, ox * j->sw - j->pl, orow + ox * j->c, c0, c1, &bad);
        }
    }
    return bad ? 0 : 1;
}

static void dw_part(void *arg, long p) {
    dw_job *j = arg;
    long r0, r1, c0, c1;
    part_range(p / j->cparts, j->parts / j->cparts, j->n * j->oh, &r0, &r1);
    part_range(p % j->cparts, j->cparts, (j->c + 63) / 64, &c0, &c1);
    c0 *= 64;
    c1 = c1 * 64 < j->c ? c1 * 64 : j->c;
    const dw_row3_fn rowfn = dw_row_fn(j);
    if (!(rowfn ? dw_rows_whole(j, rowfn, r0, r1, c0, c1) : dw_rows(j, r0, r1, c0, c1)))
        atomic_store(&j->ok, 0);
}

static int depthwise_nhwc(const float *x, long n, long h, long w, long c, long oh, long ow, long kh, long kw,
                   long sh, long sw, long dh, long dw, long pt, long pl, const float *wt, long cp, float *out,
                   const float *bias, const float *scale, const float *shift, const float *slope,
                   int code, float p0, float p1, int nthreads) {
    dw_job j = {x, wt, n, h, w, c, cp, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, out, 0, 1,
                {bias, scale, shift, slope, code, p0, p1}, 1};
    const long rows = n * oh;
    /* the parts the work calls for; a small map (7x7, 14x14) has too few rows for them, so each
     * row splits into channel ranges too (whole 64-channel units) */
    const long work = rows * ow * c * kh * kw, units = (c + 63) / 64;
    const long want = row_parts(work > 0 ? 1L << 30 : 0, work, 1L << 16, nthreads);
    const long rparts = want < rows ? want : rows;
    j.cparts = rparts > 0 && want > rparts ? (want + rparts - 1) / rparts : 1;
    if (j.cparts > units)
        j.cparts = units;
    j.parts = rparts * j.cparts;
    run_parts(dw_part, &j, j.parts, nthreads);
    return atomic_load(&j.ok);
}

/* ------------------------------------------------------------------ Sum2D / Mul2D
 * out[n, p, c] = finish(a[n, p, c] (+|*) b[n?, p?, c?]): a, out [N, P, C]; b [BN, BP, BC], each of
 * its axes 1 (broadcast) or the full size. slope (prelu) is padded to a multiple of 16. */
typedef struct {
    const float *a, *b;
    float *out;
    long n, p, c, bn, bp, bc;
    int mul;
    long parts, flat;               /* flat: the element count when b is whole or one value and the
                                     * epilogue has no per-channel term (then one run, not rows of C) */
    epi_t e;
    atomic_int ok;
} bin_job;

/* the flat form: elements [16 u0, 16 u1) of a, b (or its one value) and out; each lane the same
 * operations as in rows of C (the lanes are independent), without the per-row overhead that made a
 * 1-channel map (C = 1: one masked vector a pixel) ~40x slower than numpy's add */
static void bin_flat(bin_job *j, long u0, long u1) {
    epv_t E;
    epv_load(&E, &j->e, 0);
    const int one_b = j->bc * j->bp * j->bn == 1;
    const __m512 b1 = _mm512_set1_ps(j->b[0]);
    __mmask16 bad = 0;
    for (long u = u0; u < u1; u++) {
        const long i = u * 16, left = j->flat - i;
        const __mmask16 m = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
        const __m512 av = _mm512_maskz_loadu_ps(m, j->a + i);
        const __m512 bv = one_b ? b1 : _mm512_maskz_loadu_ps(m, j->b + i);
        __mmask16 bb = 0;
        const __m512 y = finish_v(j->mul ? _mm512_mul_ps(av, bv) : _mm512_add_ps(av, bv), &E, &bb);
        bad |= bb & m;
        _mm512_mask_storeu_ps(j->out + i, m, y);
    }
    if (bad)
        atomic_store(&j->ok, 0);
}

static void bin_part(void *arg, long part) {
    bin_job *j = arg;
    long r0, r1;
    if (j->flat) {
        part_range(part, j->parts, (j->flat + 15) / 16, &r0, &r1);
        bin_flat(j, r0, r1);
        return;
    }
    part_range(part, j->parts, j->n * j->p, &r0, &r1);
    __mmask16 bad = 0;
    epv_t E;                                    /* the epilogue, once (prelu's slope: per 16 channels) */
    epv_load(&E, &j->e, 0);
    const int per_channel = j->e.code == 4;
    long n = j->p ? r0 / j->p : 0, q = j->p ? r0 % j->p : 0;
    for (long r = r0; r < r1; r++) {
        const float *a = j->a + r * j->c;
        const float *b = j->b + ((j->bn > 1 ? n : 0) * j->bp + (j->bp > 1 ? q : 0)) * j->bc;
        float *o = j->out + r * j->c;
        const __m512 b1 = _mm512_set1_ps(b[0]);
        for (long c = 0; c < j->c; c += 16) {
            const long left = j->c - c;
            const __mmask16 m = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
            const __m512 av = _mm512_maskz_loadu_ps(m, a + c);
            const __m512 bv = j->bc > 1 ? _mm512_maskz_loadu_ps(m, b + c) : b1;
            __mmask16 bb = 0;
            const __m512 v = j->mul ? _mm512_mul_ps(av, bv) : _mm512_add_ps(av, bv);
            const __m512 y = per_channel ? finish(v, &j->e, c, &bb) : finish_v(v, &E, &bb);
            bad |= bb & m;
            _mm512_mask_storeu_ps(o + c, m, y);
        }
        if (++q == j->p) {
            q = 0;
            n++;
        }
    }
    if (bad)
        atomic_store(&j->ok, 0);
}

int binary_npc(const float *a, const float *b, float *out, long n, long p, long c, long bn, long bp, long bc,
               int mul, const float *slope, int code, float p0, float p1, int nthreads) {
    bin_job j = {a, b, out, n, p, c, bn, bp, bc, mul, 0, 0, {NULL, NULL, NULL, slope, code, p0, p1}, 1};
    const long rows = n * p;
    if (code != 4 && ((bn == n && bp == p && bc == c) || bn * bp * bc == 1)) {   /* code 4: prelu's slope per channel */
        j.flat = rows * c;
        j.parts = row_parts((j.flat + 15) / 16, j.flat, 1L << 16, nthreads);
    } else {
        j.parts = row_parts(rows, rows * c, 1L << 16, nthreads);
    }
    run_parts(bin_part, &j, j.parts, nthreads);
    return atomic_load(&j.ok);
}

/* ------------------------------------------------------------------ descriptor entry points
 * One int64 array per prepared layer and input shape, so a call passes 4 arguments instead of
 * ~30 (ctypes converts each one): [n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, o or cp,
 * weights, bias, scale, shift, slope (addresses), code, p0 bits, p1 bits]; conv_desc also reads
 * [23..26] (a fused Sum2D's activation), [27] (groups) and [28] (a grouped conv's groups per
 * vector when its weights are lane-packed, else 0: conv_lanes_range). */
static float bits_to_float(long v) {
    uint32_t u = (uint32_t)v;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* res: the residual of a fused Sum2D, whose activation is d[23..26]: code, p0 bits, p1 bits, slope */
int conv_desc(const long *d, const float *x, float *out, const float *res, int nthreads) {
    const epi_t e2 = {NULL, NULL, NULL, res ? (const float *)d[26] : NULL, res ? (int)d[23] : 0,
                      res ? bits_to_float(d[24]) : 0.0f, res ? bits_to_float(d[25]) : 0.0f};
    return conv_nhwc(x, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12], d[13],
                     (const float *)d[15], d[14], out, (const float *)d[16], (const float *)d[17],
                     (const float *)d[18], (const float *)d[19], (int)d[20], bits_to_float(d[21]),
                     bits_to_float(d[22]), res, res ? &e2 : NULL, d[27], d[28], nthreads);
}

int depthwise_desc(const long *d, const float *x, float *out, int nthreads) {
    return depthwise_nhwc(x, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12],
                          d[13], (const float *)d[15], d[14], out, (const float *)d[16], (const float *)d[17],
                          (const float *)d[18], (const float *)d[19], (int)d[20], bits_to_float(d[21]),
                          bits_to_float(d[22]), nthreads);
}

/* ------------------------------------------------------------------ depthwise + pointwise
 * A depthwise conv and the 1x1 conv that reads its output (MobileNet's depthwise -> projection),
 * in one pass over bands of output rows: each part computes its band's depthwise rows, then the
 * 1x1 conv of those pixels while they are in its cache. One dispatch and one barrier instead of
 * two, and at batch 8 the depthwise output is read back from L2 instead of memory. Each value
 * is computed by the same code on the same inputs as the two layers one after the other (a
 * conv's value does not depend on which pixels share its part), so the results are the same
 * bits. The caller guarantees that the 1x1 conv's output overlaps neither the depthwise input
 * nor its output. */
typedef struct {
    dw_job dw;
    const long *cd;                  /* the 1x1 conv's descriptor (conv_desc layout) */
    float *out;
    const float *res;
    epi_t e, e2;
    long rows, parts;
    int reverse;                     /* bands from the last to the first (one thread: dw_pw) */
    atomic_int ok_dw, ok_pw;
} dwpw_job;

static void dwpw_part(void *arg, long p) {
    dwpw_job *j = arg;
    const long *d = j->cd;
    long r0, r1;
    part_range(j->reverse ? j->parts - 1 - p : p, j->parts, j->rows, &r0, &r1);
    if (r0 >= r1)
        return;
    const dw_row3_fn rowfn = dw_row_fn(&j->dw);
    if (!(rowfn ? dw_rows_whole(&j->dw, rowfn, r0, r1, 0, j->dw.c) : dw_rows(&j->dw, r0, r1, 0, j->dw.c)))
        atomic_store(&j->ok_dw, 0);
    const long ow = j->dw.ow;
    const int r = conv_range(j->dw.out, d[1], d[2], d[3], d[3], d[4], d[5], 1, 1, 1, 1, 1, 1, 0, 0,
                             (const float *)d[15], d[14], d[14], j->out, r0 * ow, r1 * ow, 0, (d[14] + NR - 1) / NR,
                             j->e.bias, j->e.scale, j->e.shift, j->e.slope, j->e.code, j->e.p0, j->e.p1,
                             j->res, j->res ? &j->e2 : NULL);
    if (r != 3)
        atomic_fetch_and(&j->ok_pw, r);
}

#define DWPW_BAND_BYTES (192L << 10)    /* depthwise output per band: stays in L2 with its input rows */

/* ok[0]: the depthwise result bits, ok[1]: the 1x1 conv's (conv_desc's). A map with too few rows
 * for a band per thread runs the two layers one after the other (their own splits). */
void dw_pw(const long *dd, const float *x, float *mid, const long *cd, float *out, const float *res,
           int nthreads, int *ok) {
    const long rows = dd[0] * dd[4], row_bytes = dd[5] * dd[3] * 4;
    if (nthreads > 1 && rows < 4L * nthreads) {
        ok[0] = depthwise_desc(dd, x, mid, nthreads);
        ok[1] = conv_desc(cd, mid, out, res, nthreads);
        return;
    }
    dwpw_job j;
    memset(&j, 0, sizeof j);
    j.dw = (dw_job){x, (const float *)dd[15], dd[0], dd[1], dd[2], dd[3], dd[14], dd[4], dd[5], dd[6], dd[7], dd[8],
                    dd[9], dd[10], dd[11], dd[12], dd[13], mid, 1, 1,
                    {(const float *)dd[16], (const float *)dd[17], (const float *)dd[18], (const float *)dd[19],
                     (int)dd[20], bits_to_float(dd[21]), bits_to_float(dd[22])}, 1};
    j.cd = cd;
    j.out = out;
    j.res = res;
    j.e = (epi_t){(const float *)cd[16], (const float *)cd[17], (const float *)cd[18], (const float *)cd[19],
                  (int)cd[20], bits_to_float(cd[21]), bits_to_float(cd[22])};
    j.e2 = (epi_t){NULL, NULL, NULL, res ? (const float *)cd[26] : NULL, res ? (int)cd[23] : 0,
                   res ? bits_to_float(cd[24]) : 0.0f, res ? bits_to_float(cd[25]) : 0.0f};
    j.rows = rows;
    const long work = rows * dd[5] * (dd[3] * dd[6] * dd[7] + cd[14] * dd[3]);
    long parts = 1;
    if (nthreads <= 1 || work >= (1L << 18)) {      /* a small layer on several threads: one part */
        long band = DWPW_BAND_BYTES / (row_bytes > 0 ? row_bytes : 1);
        band = band > 0 ? band : 1;
        parts = (rows + band - 1) / band;
        if (nthreads > 1) {
            parts = (parts + nthreads - 1) / nthreads * nthreads;      /* equal shares per thread */
            /* bands of unequal rows (14 rows in 4 parts: 3, 4, 3, 4) left a thread idle a row
             * long at the end (MobileNetV2's 14x14 blocks: ~15% of the pair): fewer parts, a
             * multiple of the threads, that divide the rows, if their bands stay within twice
             * the target (14 rows: 2 bands of 7; 56: 8 of 7) */
            for (long q = parts - nthreads; rows % parts && q >= nthreads; q -= nthreads)
                if (rows % q == 0 && rows / q <= 2 * band)
                    parts = q;
        }
        if (parts > rows)
            parts = rows;
    }
    j.parts = parts;
    /* On one thread (as a batch split into whole images per core runs each image) the bands run
     * from the bottom of the map up: the layer before wrote its output top-down, and its last
     * rows (up to the 2 MB L2) are still in this core's cache while its first rows went out to
     * L3. MobileNetV2 1.0 on one thread, thread CPU: the 3x3/2 depthwise reading the 16 -> 96
     * expansion's 4.8 MB output -9 us (413), the 3x3 at 112x112 reading the stem's 1.6 MB -11 us
     * (324), medians over 6 interleaved rounds. On several threads the bands run top-down:
     * bottom-up took 2-8% more of those pairs' CPU there (one A/B run, load 10). Which band runs
     * when does not change a value. */
    j.reverse = nthreads <= 1 && parts > 1;
    atomic_store(&j.ok_dw, 1);
    atomic_store(&j.ok_pw, 3);
    run_parts(dwpw_part, &j, parts, nthreads);
    ok[0] = atomic_load(&j.ok_dw);
    ok[1] = atomic_load(&j.ok_pw);
}

/* ------------------------------------------------------------------ pooling
 * Max: the max over the window's taps, a tap in the padding counting as -inf, NaN propagating
 * (numpy's maximum). Avg: the taps summed in row-major order, a tap in the padding adding +0.0,
 * divided by div[oy * ow + ox] (the caller's float32 count), rounded to fp16. */
typedef struct {
    const float *x, *div;
    float *out;
    long n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
    int avg;
    long parts;
    atomic_int ok;
} pool_job;

/* Max pool, output pixels [x0, x1) of one row whose kernel rows [ky0, ky1) and every kernel column
 * lie inside the input (xp: pixel x0's first tap): pool_part's vmaxps chain with the same taps in
 * the same order, without its per-pixel bookkeeping (the window's row and column ranges, masks,
 * padding flags: ~30 scalar operations a pixel against 4-9 vector ones for a 2x2 / 3x3 pool of 16
 * channels). One thread: PP-HGNet's 2x2/1 pool at 320x320x16 0.73 -> 0.32 ms (onnxruntime's NCHW
 * MaxPool 0.72), ResNet's 3x3/2 at 112x112x64 0.100 -> 0.082 ms. KW taps a kernel row, compiled. A
 * pixel whose block holds a NaN returns its index: pool_part finishes it (and the rest) its way.
 * Returns x1 when all went through. */
static inline __attribute__((always_inline)) long
pool_max_inner(const float *xp, float *o, long c, long x0, long x1, long xstep_px, long ky0, long ky1, long ystep,
               long xstep, const int KW) {
    const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
    for (long ox = x0; ox < x1; ox++, xp += xstep_px, o += c) {
        for (long cb = 0; cb < c; cb += 16) {
            const long left = c - cb;
            const __mmask16 m = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
            __m512 mx = ninf;
            __mmask16 nan = 0;
            for (long ky = ky0; ky < ky1; ky++) {
                const float *xr = xp + ky * ystep + cb;
#pragma GCC unroll 8
                for (int kx = 0; kx < KW; kx++) {
                    const __m512 v = _mm512_maskz_loadu_ps(m, xr + kx * xstep);
                    nan = _kor_mask16(nan, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
                    mx = _mm512_max_ps(mx, v);
                }
            }
            if (nan)
                return ox;
            _mm512_mask_storeu_ps(o + cb, m, mx);
        }
    }
    return x1;
}
static long pool_max_inner2(const float *xp, float *o, long c, long x0, long x1, long xs, long ky0, long ky1,
                            long ys, long xst) { return pool_max_inner(xp, o, c, x0, x1, xs, ky0, ky1, ys, xst, 2); }
static long pool_max_inner3(const float *xp, float *o, long c, long x0, long x1, long xs, long ky0, long ky1,
                            long ys, long xst) { return pool_max_inner(xp, o, c, x0, x1, xs, ky0, ky1, ys, xst, 3); }
static long pool_max_inner5(const float *xp, float *o, long c, long x0, long x1, long xs, long ky0, long ky1,
                            long ys, long xst) { return pool_max_inner(xp, o, c, x0, x1, xs, ky0, ky1, ys, xst, 5); }

/* Only the window's taps inside the input are visited (their rows and columns are a range each),
 * with the same results as visiting padding too: a max tap in the padding (-inf) never changes
 * a max, except as the start value when it is the window's first tap (then the first real tap
 * goes through the NaN-propagating update, as it did); an average's padding taps add +0.0, which
 * changes only a -0 running sum to +0, and so does one +0.0 added at the end. */
static void pool_part(void *arg, long p) {
    pool_job *j = arg;
    long r0, r1;
    part_range(p, j->parts, j->n * j->oh, &r0, &r1);
    const __m512 ninf = _mm512_set1_ps(-__builtin_inff()), zero = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (long r = r0; r < r1; r++) {
        const long n = r / j->oh, oy = r % j->oh, iy0 = oy * j->sh - j->pt;
        long ky0 = 0, ky1 = j->kh;
        while (ky0 < j->kh && iy0 + ky0 * j->dh < 0)
            ky0++;
        while (ky1 > ky0 && iy0 + (ky1 - 1) * j->dh >= j->h)
            ky1--;
        /* the columns whose windows lie inside the input along x: [xa, xb), run by pool_max_inner */
        long xa = j->ow, xb = j->ow;
        if (!j->avg && (new_paths & PATH_MAX_CHAIN) && (new_paths & PATH_POOL_ROWS) && ky0 < ky1
            && (j->kw == 2 || j->kw == 3 || j->kw == 5)) {
            const long last = j->w - 1 - (j->kw - 1) * j->dw + j->pl;    /* ox * sw <= last */
            xa = (j->pl + j->sw - 1) / j->sw;
            xb = last < 0 ? 0 : (last / j->sw + 1 < j->ow ? last / j->sw + 1 : j->ow);
            if (xb <= xa)
                xa = xb = j->ow;
        }
        for (long ox = 0; ox < j->ow; ox++) {
            if (ox == xa) {
                const long ystep = j->dh * j->w * j->c, xstep = j->dw * j->c;
                const float *xp = j->x + ((n * j->h + iy0) * j->w + xa * j->sw - j->pl) * j->c;
                float *o = j->out + (r * j->ow + xa) * j->c;
                const long stop = (j->kw == 2 ? pool_max_inner2 : j->kw == 3 ? pool_max_inner3 : pool_max_inner5)(
                    xp, o, j->c, xa, xb, j->sw * j->c, ky0, ky1, ystep, xstep);
                if (stop == xb) {
                    ox = xb - 1;
                    continue;
                }
                ox = stop;                /* a NaN in this pixel: the update below, from this pixel on */
            }
            const long ix0 = ox * j->sw - j->pl;
            long kx0 = 0, kx1 = j->kw;
            while (kx0 < j->kw && ix0 + kx0 * j->dw < 0)
                kx0++;
            while (kx1 > kx0 && ix0 + (kx1 - 1) * j->dw >= j->w)
                kx1--;
            const int any = ky0 < ky1 && kx0 < kx1;
            const int padded = !any || (ky1 - ky0) * (kx1 - kx0) != j->kh * j->kw;
            const int first_real = any && ky0 == 0 && kx0 == 0;     /* the window's first tap is real */
            const long base = ((n * j->h + iy0) * j->w + ix0) * j->c;   /* may be < 0; real taps are not */
            const long ystep = j->dh * j->w * j->c, xstep = j->dw * j->c;
            float *o = j->out + (r * j->ow + ox) * j->c;
            for (long cb = 0; cb < j->c; cb += 16) {
                const long left = j->c - cb;
                const __mmask16 m = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
                if (!j->avg && (new_paths & PATH_MAX_CHAIN)) {
                    /* without a NaN, the update below is max(acc, v) (vmaxps: v on a tie, so -0 / +0
                     * come out as there); its NaN test sat on the chain, 3 dependent operations per
                     * tap (ResNet-50's 3x3/2 pool 1.9x onnxruntime's time). So: a plain vmaxps chain,
                     * NaN lanes gathered apart; a vector with one runs the update below instead. */
                    __m512 mx = ninf;
                    __mmask16 nan = 0;
                    for (long ky = ky0; ky < ky1; ky++) {
                        const float *xr = j->x + base + ky * ystep + cb;
#pragma GCC unroll 4
                        for (long kx = kx0; kx < kx1; kx++) {
                            const __m512 v = _mm512_maskz_loadu_ps(m, xr + kx * xstep);
                            nan = _kor_mask16(nan, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
                            mx = _mm512_max_ps(mx, v);
                        }
                    }
                    if (!nan) {
                        _mm512_mask_storeu_ps(o + cb, m, mx);
                        continue;
                    }
                }
                __m512 acc = j->avg ? zero : ninf;
                int skip = first_real;            /* the first tap is acc already */
                if (first_real)
                    acc = _mm512_maskz_loadu_ps(m, j->x + base + cb);
                for (long ky = ky0; ky < ky1; ky++) {
                    const long xr = base + ky * ystep + cb;
                    for (long kx = kx0; kx < kx1; kx++) {
                        if (skip) {
                            skip = 0;
                            continue;
                        }
                        const __m512 v = _mm512_maskz_loadu_ps(m, j->x + xr + kx * xstep);
                        if (j->avg) {
                            acc = _mm512_add_ps(acc, v);
                        } else {
                            const __mmask16 nan = _mm512_cmp_ps_mask(acc, v, _CMP_UNORD_Q);
                            acc = _mm512_mask_add_ps(_mm512_max_ps(acc, v), nan, acc, v);   /* NaN stays */
                        }
                    }
                }
                if (j->avg) {
                    if (padded)
                        acc = _mm512_add_ps(acc, zero);
                    acc = rne16(_mm512_div_ps(acc, _mm512_set1_ps(j->div[oy * j->ow + ox])));
                    bad |= _mm512_cmp_ps_mask(_mm512_abs_ps(acc), _mm512_set1_ps(__builtin_inff()), _CMP_NLT_UQ) & m;
                }
                _mm512_mask_storeu_ps(o + cb, m, acc);
            }
        }
    }
    if (bad)
        atomic_store(&j->ok, 0);
}

/* d: [n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, avg]; returns 1 when every average is finite */
int pool_desc(const long *d, const float *x, float *out, const float *div, int nthreads) {
    pool_job j = {x, div, out, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12],
                  d[13], (int)d[14], 0, 1};
    const long rows = j.n * j.oh;
    j.parts = row_parts(rows, rows * j.ow * j.c * j.kh * j.kw, 1L << 16, nthreads);
    run_parts(pool_part, &j, j.parts, nthreads);
    return atomic_load(&j.ok);
}

/* ------------------------------------------------------------------ NCHW <-> NHWC
 * out[n, p, c] = x[n, c, p] (to_nhwc) or out[n, c, p] = x[n, p, c], p over h * w. */
typedef struct {
    const float *x;
    float *out;
    long n, c, hw;
    int to_nhwc;
    long step;
} tr_job;

#define TRB 256

/* pixels [p0, p1) of one image: planes x[c][hw] -> o[p][C] (to_nhwc), or x[p][C] -> planes o[c][hw];
 * 8 pixels x 8 channels through registers (rows of 8 read and written whole), the edges one by one */
static void tr_block(const float *x, float *o, long nc, long hw, long p0, long p1, int to_nhwc) {
    const long p8 = p0 + (p1 - p0) / 8 * 8, c8 = nc / 8 * 8;
    if (nc == 1) {                      /* one channel: the same order */
        memcpy(o + p0, x + p0, (size_t)(p1 - p0) * sizeof(float));
        return;
    }
    for (long p = p0; p < p8; p += 8) {
        for (long c = 0; c < c8; c += 8) {
            __m256 a[8];
            for (int r = 0; r < 8; r++)
                a[r] = _mm256_loadu_ps(to_nhwc ? x + (c + r) * hw + p : x + (p + r) * nc + c);
            tr8x8(a);
            for (int r = 0; r < 8; r++)
                _mm256_storeu_ps(to_nhwc ? o + (p + r) * nc + c : o + (c + r) * hw + p, a[r]);
        }
        for (long c = c8; c < nc; c++)
            for (long q = p; q < p + 8; q++) {
                if (to_nhwc)
                    o[q * nc + c] = x[c * hw + q];
                else
                    o[c * hw + q] = x[q * nc + c];
            }
    }
    for (long q = p8; q < p1; q++)
        for (long c = 0; c < nc; c++) {
            if (to_nhwc)
                o[q * nc + c] = x[c * hw + q];
            else
                o[c * hw + q] = x[q * nc + c];
        }
}

static void tr_part(void *arg, long part) {
    tr_job *j = arg;
    const long blocks = (j->hw + TRB - 1) / TRB, total = j->n * blocks;
    const long b0 = part * j->step, b1 = b0 + j->step < total ? b0 + j->step : total;
    for (long b = b0; b < b1; b++) {
        const long n = b / blocks, p0 = (b % blocks) * TRB, p1 = p0 + TRB < j->hw ? p0 + TRB : j->hw;
        const float *x = j->x + n * j->c * j->hw;
        float *o = j->out + n * j->c * j->hw;
        if (j->to_nhwc && j->c == 3) {           /* image inputs: interleave the planes */
            const float *x0 = x, *x1 = x + j->hw, *x2 = x + 2 * j->hw;
            for (long p = p0; p < p1; p++) {
                o[3 * p] = x0[p];
                o[3 * p + 1] = x1[p];
                o[3 * p + 2] = x2[p];
            }
        } else {
            tr_block(x, o, j->c, j->hw, p0, p1, j->to_nhwc);
        }
    }
}

void transpose_layout(const float *x, float *out, long n, long c, long hw, int to_nhwc, int nthreads) {
    tr_job j = {x, out, n, c, hw, to_nhwc, 0};
    const long total = n * ((hw + TRB - 1) / TRB);
    long parts = nthreads > 1 && n * c * hw >= (1L << 20) ? nthreads * 4 : 1;   /* memory-bound: cores only pay off for large tensors */
    if (parts > total)
        parts = total;
    if (parts < 1)
        parts = 1;
    j.step = (total + parts - 1) / parts;
    parts = total ? (total + j.step - 1) / j.step : 0;
    run_parts(tr_part, &j, parts, nthreads);
}

/* ------------------------------------------------------------------ FC on a few rows (GEMV)
 * out[n, o] = finish(sum_k x[n, k] * W[k, o]) for n < rows <= GEMV_ROWS. A batch-1 FC is bound by
 * reading its weights, so they are read as fp16 (they hold fp16 values: exact), half the bytes,
 * packed [ceil(o/16)][K][16]; four column blocks at a time keep eight FMA chains in flight. The
 * sum runs over k in order in float32, as in the conv kernel. */
#define GEMV_ROWS 4

typedef struct {
    const float *x;
    const uint16_t *w;
    float *out;
    long rows, k, o, nb, step;
    epi_t e;
    atomic_int ok;
} gemv_job;

static void gemv_part(void *arg, long part) {
    gemv_job *j = arg;
    const long b0 = part * j->step, b1 = b0 + j->step < j->nb ? b0 + j->step : j->nb;
    __mmask16 bad = 0;
    for (long b = b0; b < b1; b += 4) {
        const int nbk = (int)(b1 - b < 4 ? b1 - b : 4);
        for (long n = 0; n < j->rows; n++) {
            const float *x = j->x + n * j->k;
            __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
            const uint16_t *w0 = j->w + b * j->k * 16;
            if (nbk == 4) {
                for (long p = 0; p < j->k; p++) {
                    const __m512 xv = _mm512_set1_ps(x[p]);
#pragma GCC unroll 4
                    for (int t = 0; t < 4; t++)
                        acc[t] = _mm512_fmadd_ps(xv, _mm512_cvtph_ps(_mm256_loadu_si256(
                                     (const __m256i *)(w0 + (t * j->k + p) * 16))), acc[t]);
                }
            } else {
                for (int t = 0; t < nbk; t++)
                    for (long p = 0; p < j->k; p++)
                        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(x[p]), _mm512_cvtph_ps(_mm256_loadu_si256(
                                     (const __m256i *)(w0 + (t * j->k + p) * 16))), acc[t]);
            }
            for (int t = 0; t < nbk; t++) {
                const long c = (b + t) * 16, left = j->o - c;
                const __mmask16 m = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
                __mmask16 bb = 0;
                const __m512 y = finish(acc[t], &j->e, c, &bb);
                bad |= bb & m;
                _mm512_mask_storeu_ps(j->out + n * j->o + c, m, y);
            }
        }
    }
    if (bad)
        atomic_store(&j->ok, 0);
}

/* d: [rows, k, o, weights (fp16, [ceil(o/16)][k][16]), bias, slope, code, p0 bits, p1 bits] */
int gemv_desc(const long *d, const float *x, float *out, int nthreads) {
    gemv_job j = {x, (const uint16_t *)d[3], out, d[0], d[1], d[2], (d[2] + 15) / 16, 0,
                  {(const float *)d[4], NULL, NULL, (const float *)d[5], (int)d[6], bits_to_float(d[7]),
                   bits_to_float(d[8])}, 1};
    long parts = nthreads > 1 && j.k * j.o >= (1L << 16) ? nthreads * 2 : 1;
    long quads = (j.nb + 3) / 4;
    if (parts > quads)
        parts = quads;
    if (parts < 1)
        parts = 1;
    j.step = (quads + parts - 1) / parts * 4;
    parts = (j.nb + j.step - 1) / j.step;
    run_parts(gemv_part, &j, parts, nthreads);
    return atomic_load(&j.ok);
}

/* ------------------------------------------------------------------ global average pool, input copy
 * out[n, c] = rne16((sum over p of x[n, p, c], in order p = 0, 1, ...) / hw): numpy's sum over a
 * non-contiguous axis adds the rows in this order, so the result is the same bits. */
/* a pass from x to out over n images of hw pixels x c channels, in ``parts`` parts
 * (row_parts, part_range); ok: the pass's result bits (global_avgpool, transpose_round) */
typedef struct {
    const float *x;
    float *out;
    long n, hw, c, parts;
    atomic_int ok;
} plane_job;

/* part p: a range of (image, 16-channel block) units, each summed over its pixels in order */
static void gap_part(void *arg, long p) {
    plane_job *j = arg;
    const long cbs = (j->c + 15) / 16;
    long u0, u1;
    part_range(p, j->parts, j->n * cbs, &u0, &u1);
    __mmask16 bad = 0;
    const __m512 div = _mm512_set1_ps((float)j->hw);
    for (long u = u0; u < u1; u++) {
        const long b = u / cbs, cb = (u % cbs) * 16, left = j->c - cb;
        const __mmask16 m = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
        const float *xs = j->x + b * j->hw * j->c + cb;
        __m512 acc = _mm512_maskz_loadu_ps(m, xs);
        for (long q = 1; q < j->hw; q++)
            acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, xs + q * j->c));
        acc = rne16(_mm512_div_ps(acc, div));
        bad |= nonfinite(acc) & m;
        _mm512_mask_storeu_ps(j->out + b * j->c + cb, m, acc);
    }
    if (bad)
        atomic_store(&j->ok, 0);
}

int global_avgpool(const float *x, float *out, long n, long hw, long c, int nthreads) {
    plane_job j = {x, out, n, hw, c, 0, 1};
    const long units = n * ((c + 15) / 16);
    j.parts = row_parts(units, n * hw * c, 1L << 16, nthreads);
    run_parts(gap_part, &j, j.parts, nthreads);
    return atomic_load(&j.ok);
}

/* dst = rne16(src), n values; returns bit 0: every src value finite, bit 1: every dst value finite */
int copy_round(const float *src, float *dst, long n) {
    __mmask16 bad_in = 0, bad_out = 0;
    for (long i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(m, src + i);
        const __m512 r = rne16(v);
        bad_in |= nonfinite(v) & m;
        bad_out |= nonfinite(r) & m;
        _mm512_mask_storeu_ps(dst + i, m, r);
    }
    return (bad_in ? 0 : 1) | (bad_out ? 0 : 2);
}

/* out[n, p, c] = rne16(x[n, c, p]): a program input's rounding fused into its NCHW -> NHWC
 * transpose, split over pixel blocks (each thread rounds and interleaves its own pixels);
 * returns bit 0: every input value finite, bit 1: every rounded value finite */
/* interleaving 16 pixels of 3 planes: output vector q, lane i holds value 16 q + i = 3 pixel + ch;
 * tr3_idx[q][0]: its index into (plane 0, plane 1) for ch < 2, tr3_idx[q][1]: into plane 2,
 * tr3_from2[q]: the lanes of plane 2 */
static int tr3_idx[3][2][16];
static __mmask16 tr3_from2[3];

__attribute__((constructor)) static void tr3_init(void) {
    for (int q = 0; q < 3; q++)
        for (int i = 0; i < 16; i++) {
            const int v = 16 * q + i, px = v / 3, ch = v % 3;
            tr3_idx[q][0][i] = ch == 1 ? 16 + px : px;
            tr3_idx[q][1][i] = px;
            if (ch == 2)
                tr3_from2[q] |= (__mmask16)(1u << i);
        }
}

static void trr_part(void *arg, long part) {
    plane_job *j = arg;
    const long blocks = (j->hw + TRB - 1) / TRB;
    long b0, b1;
    part_range(part, j->parts, j->n * blocks, &b0, &b1);
    __mmask16 bad_in = 0, bad_out = 0;
    for (long b = b0; b < b1; b++) {
        const long n = b / blocks, p0 = (b % blocks) * TRB, p1 = p0 + TRB < j->hw ? p0 + TRB : j->hw;
        const float *x = j->x + n * j->c * j->hw;
        float *o = j->out + n * j->c * j->hw;
        long pv = p0;
        if (j->c == 3) {
            /* an RGB image: 16 pixels of the three planes rounded, then interleaved in registers
             * (two permutes per output vector) instead of 48 scalar stores */
            const __m512i i01[3] = {_mm512_loadu_si512(tr3_idx[0][0]), _mm512_loadu_si512(tr3_idx[1][0]),
                                    _mm512_loadu_si512(tr3_idx[2][0])};
            const __m512i i2[3] = {_mm512_loadu_si512(tr3_idx[0][1]), _mm512_loadu_si512(tr3_idx[1][1]),
                                   _mm512_loadu_si512(tr3_idx[2][1])};
            for (; pv + 16 <= p1; pv += 16) {
                __m512 r[3];
                for (int ch = 0; ch < 3; ch++) {
                    const __m512 v = _mm512_loadu_ps(x + ch * j->hw + pv);
                    r[ch] = rne16(v);
                    bad_in |= nonfinite(v);
                    bad_out |= nonfinite(r[ch]);
                }
                for (int q = 0; q < 3; q++)
                    _mm512_storeu_ps(o + pv * 3 + 16 * q, _mm512_mask_permutexvar_ps(
                        _mm512_permutex2var_ps(r[0], i01[q], r[1]), tr3_from2[q], i2[q], r[2]));
            }
        }
        for (long ch = 0; ch < j->c; ch++)
            for (long p = pv; p < p1; p += 16) {
                const __mmask16 m = p1 - p >= 16 ? 0xFFFF : (__mmask16)((1u << (p1 - p)) - 1);
                const __m512 v = _mm512_maskz_loadu_ps(m, x + ch * j->hw + p);
                const __m512 r = rne16(v);
                bad_in |= nonfinite(v) & m;
                bad_out |= nonfinite(r) & m;
                float tmp[16];
                _mm512_storeu_ps(tmp, r);
                const int cnt = p1 - p >= 16 ? 16 : (int)(p1 - p);
                for (int t = 0; t < cnt; t++)
                    o[(p + t) * j->c + ch] = tmp[t];
            }
    }
    if (bad_in || bad_out)
        atomic_fetch_and(&j->ok, (bad_in ? 0 : 1) | (bad_out ? 0 : 2));
}

int transpose_round(const float *x, float *out, long n, long c, long hw, int nthreads) {
    plane_job j = {x, out, n, hw, c, 0, 3};
    j.parts = row_parts(n * ((hw + TRB - 1) / TRB), n * c * hw, 1L << 16, nthreads);
    run_parts(trr_part, &j, j.parts, nthreads);
    return atomic_load(&j.ok);
}

/* ------------------------------------------------------------------ strided copies (Concat, Slice2D)
 * desc: ``blocks`` rows of 6 longs [src, dst, rows, count, src stride, dst stride] (floats): each
 * block copies ``rows`` runs of ``count`` values, src + r * src stride -> dst + r * dst stride. A
 * Concat is one block per input (its run of the output's rows), a Slice2D one block: the values
 * move bit for bit, as numpy's concatenate / copyto. Big copies are split over rows of the blocks. */
typedef struct {
    const long *desc;
    long blocks, rows, parts;
} copy_job;

static void copy_part(void *arg, long p) {
    const copy_job *j = arg;
    long r0, r1, base = 0;
    part_range(p, j->parts, j->rows, &r0, &r1);
    for (long b = 0; b < j->blocks && base < r1; b++) {
        const long *d = j->desc + 6 * b;
        const long lo = r0 > base ? r0 - base : 0, hi = r1 - base < d[2] ? r1 - base : d[2];
        const float *src = (const float *)d[0];
        float *dst = (float *)d[1];
        const long n = d[3], ss = d[4], ds = d[5];
        if (n == 1) {                 /* one value a row (a Concat of one-channel maps): no call per value */
            for (long r = lo; r < hi; r++)
                dst[r * ds] = src[r * ss];
        } else if (n < 16) {
            for (long r = lo; r < hi; r++)
                for (long k = 0; k < n; k++)
                    dst[r * ds + k] = src[r * ss + k];
        } else {
            for (long r = lo; r < hi; r++)
                memcpy(dst + r * ds, src + r * ss, (size_t)n * sizeof(float));
        }
        base += d[2];
    }
}

int copy_blocks(const long *desc, long blocks, int nthreads) {
    copy_job j = {desc, blocks, 0, 0};
    long work = 0;
    for (long b = 0; b < blocks; b++) {
        j.rows += desc[6 * b + 2];
        work += desc[6 * b + 2] * desc[6 * b + 3];
    }
    j.parts = row_parts(j.rows, work, 1L << 17, nthreads);
    run_parts(copy_part, &j, j.parts, nthreads);
    return 1;
}

/* ------------------------------------------------------------------ a run of steps in one call
 * The static plan (static_plan.py) hands over each stretch of consecutive native steps as
 * records of STEP_WORDS longs, [kind, arguments...], and gets each step's result bits in ok[]:
 * one ctypes call instead of one per layer. */
#define STEP_WORDS 16

/* A sigmoid / silu / gelu finished in C (kinds 1, 2, 6): s[12] the function (_native_act.c act_post,
 * by address: it applies the activation to the kernel's unrounded output, rounds it to fp16 and
 * says whether all is finite), s[13] the output's values, s[14] the activation's kind; the step's
 * bit 0 is then its answer, as static_plan.finish_post's round_fp16_ gives it for an activation
 * numpy finishes. */
typedef int (*post_fn)(float *x, long n, int kind, int nthreads);

static int with_post(const long *s, int bits, float *out, int nthreads) {
    if (!s[12])
        return bits;
    return (bits & ~1) | (((post_fn)s[12])(out, s[13], (int)s[14], nthreads) ? 1 : 0);
}

typedef int (*rows_fn)(const float *x, float *out, long rows, long n, int nthreads);

static int run_step(const long *s, int nthreads) {
    switch (s[0]) {
    case 1:   /* conv: descriptor, x, out, residual or 0 */
        return with_post(s, conv_desc((const long *)s[1], (const float *)s[2], (float *)s[3], (const float *)s[4],
                                      nthreads), (float *)s[3], nthreads);
    case 2:   /* depthwise: descriptor, x, out */
        return with_post(s, depthwise_desc((const long *)s[1], (const float *)s[2], (float *)s[3], nthreads),
                         (float *)s[3], nthreads);
    case 3:   /* Sum2D / Mul2D: a, b, out, n, p, c, bn, bp, bc, mul, slope, code, p0 bits, p1 bits */
        return binary_npc((const float *)s[1], (const float *)s[2], (float *)s[3], s[4], s[5], s[6], s[7], s[8],
                           s[9], (int)s[10], (const float *)s[11], (int)s[12], bits_to_float(s[13]),
                           bits_to_float(s[14]), nthreads);
    case 4:   /* pooling: descriptor, x, out, divisors or 0 */
        return pool_desc((const long *)s[1], (const float *)s[2], (float *)s[3], (const float *)s[4], nthreads);
    case 5:   /* layout: x, out, n, c, hw, to_nhwc */
        transpose_layout((const float *)s[1], (float *)s[2], s[3], s[4], s[5], (int)s[6], nthreads);
        return 1;
    case 6:   /* FC GEMV: descriptor, x, out */
        return with_post(s, gemv_desc((const long *)s[1], (const float *)s[2], (float *)s[3], nthreads),
                         (float *)s[3], nthreads);
    case 7:   /* global average pool: x, out, n, hw, c */
        return global_avgpool((const float *)s[1], (float *)s[2], s[3], s[4], s[5], nthreads);
    case 8:   /* a program input, rounded while transposed to NHWC: x, out, n, c, hw */
        return transpose_round((const float *)s[1], (float *)s[2], s[3], s[4], s[5], nthreads);
    case 9:   /* nothing to run: a Reshape / Flatten whose output is its input's memory */
        return 1;
    case 10:  /* depthwise + 1x1 (run_record) without its kind-11 partner: the depthwise alone */
        return depthwise_desc((const long *)s[1], (const float *)s[2], (float *)s[3], nthreads);
    case 11:  /* the 1x1 conv of a kind-10 record, run alone: as kind 1 */
        return conv_desc((const long *)s[1], (const float *)s[2], (float *)s[3], (const float *)s[4], nthreads);
    case 12:  /* strided copies (Concat, Slice2D): descriptor, blocks */
        return copy_blocks((const long *)s[1], s[2], nthreads);
    case 13:  /* a row kernel of another library (Softmax: _native_act.c act_softmax): function, x, out, rows, n */
        return ((rows_fn)s[1])((const float *)s[2], (float *)s[3], s[4], s[5], nthreads);
    default:
        return -1;
    }
}


/* kind 10: a depthwise conv and the 1x1 conv of the next record in one pass (dw_pw): depthwise
 * descriptor, x, its output, the 1x1 conv's descriptor, output, residual or 0; it writes both
 * records' results, and the next record (kind 11: the 1x1 conv's own kind-1 arguments) is
 * skipped. Returns the records consumed. */
static long run_record(const long *s, long left, int *ok, int nthreads) {
    if (s[0] == 10 && left >= 2 && s[STEP_WORDS] == 11) {
        dw_pw((const long *)s[1], (const float *)s[2], (float *)s[3], (const long *)s[4], (float *)s[5],
              (const float *)s[6], nthreads, ok);
        return 2;
    }
    ok[0] = run_step(s, nthreads);
    return 1;
}

void run_steps(const long *steps, long count, int *ok, int nthreads) {
    for (long i = 0; i < count;)
        i += run_record(steps + i * STEP_WORDS, count - i, ok + i, nthreads);
}

/* run_steps with a profile: prof[2 i] the wall ns of step i, prof[2 i + 1] the ns its threads
 * spent inside parts (a step that runs no parts, e.g. the global average pool: its wall time);
 * a fused pair's time is its first record's, the second's 0 */
void run_steps_profiled(const long *steps, long count, int *ok, int nthreads, long *prof) {
    atomic_store(&profiling, 1);
    for (long i = 0; i < count;) {
        const long w0 = atomic_load(&work_ns), t0 = now_ns();
        const long used = run_record(steps + i * STEP_WORDS, count - i, ok + i, nthreads);
        const long t1 = now_ns(), w = atomic_load(&work_ns) - w0;
        prof[2 * i] = t1 - t0;
        prof[2 * i + 1] = w > 0 ? w : t1 - t0;
        if (used == 2)
            prof[2 * i + 2] = prof[2 * i + 3] = 0;
        i += used;
    }
    atomic_store(&profiling, 0);
}

/* run_steps_profiled with a part log: log [cap][4] (run_part_profiled), counts[i] the entries of
 * step i (of a fused pair: the first record's; entries past cap are dropped, counted) */
void run_steps_parts(const long *steps, long count, int *ok, int nthreads, long *prof, long *log, long cap,
                     long *counts) {
    part_log_cap = cap;
    atomic_store(&part_log_n, 0);
    part_log = log;
    atomic_store(&profiling, 1);
    for (long i = 0; i < count;) {
        const long w0 = atomic_load(&work_ns), t0 = now_ns(), n0 = atomic_load(&part_log_n);
        const long used = run_record(steps + i * STEP_WORDS, count - i, ok + i, nthreads);
        const long t1 = now_ns(), w = atomic_load(&work_ns) - w0;
        prof[2 * i] = t1 - t0;
        prof[2 * i + 1] = w > 0 ? w : t1 - t0;
        counts[i] = atomic_load(&part_log_n) - n0;
        if (used == 2)
            prof[2 * i + 2] = prof[2 * i + 3] = counts[i + 1] = 0;
        i += used;
    }
    atomic_store(&profiling, 0);
    part_log = NULL;
}

/* The worker pool for the other native library (_native_int8.c, sim/int8_native.py): its
 * parallel parts run on these workers instead of a second pool competing for the cores. */
void mrvl_run_parts(part_fn fn, void *arg, long parts, int nthreads) {
    run_parts(fn, arg, parts, nthreads);
}
