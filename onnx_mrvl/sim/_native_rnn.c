/* One direction of an LSTM / GRU / RNN layer (sim/recurrent.py) over all its timesteps in one call:
 * the recurrent product h R^T and the cell update of every step, instead of ~15 numpy calls a step.
 *
 * h R^T: per output o, the products h[k] * R[o, k] (fp16 values, or an int8 layer's centred codes:
 * exact in fp32) added in order k = 0, 1, ... from 0 in float32, each product rounded apart from the
 * sum (no FMA: the same bits for any operands); then an int8 layer's per-output scale, in fp32.
 * R^T is read as fp16, packed [gate][ceil(H/8)][H][8] (the zero lanes past H never stored); eight
 * blocks of 8 outputs at a time keep eight add chains in flight. Output blocks split over the
 * pool's threads (a split does not change a sum).
 *
 * The cell update is recurrent.py's numpy steps one by one, each multiply and add rounded apart
 * (built with -ffp-contract=off): the gates' clip, sigmoid (activations.numpy_sigmoid's steps on
 * numpy's exp, _native_exp.h) and tanh (numpy's own float32 tanh loop, whose address the caller
 * passes: recurrent_native.py reads it from np.tanh), the fp16 rounding of c_t, h_t and a GRU's
 * r_t * h_{t-1}, per-row lengths as selects. recurrent_native.py checks the bits against the numpy
 * form once per process. */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "_native_exp.h"

typedef void (*part_fn)(void *arg, long part);
typedef void (*runner_fn)(part_fn fn, void *arg, long parts, int nthreads);
typedef void (*loop_fn)(char **args, const intptr_t *dims, const intptr_t *steps, void *data);  /* a ufunc's inner loop (npy_intp) */
static runner_fn runner = 0;            /* _native_conv.c's mrvl_run_parts (rnn_set_runner) */

void rnn_set_runner(void *fn) { runner = (runner_fn)fn; }

enum { CELL_LSTM, CELL_GRU, CELL_RNN };
enum { ACT_SIGMOID, ACT_TANH };
#define GROUP 8                         /* output blocks of 8 summed together */

/* ------------------------------------------------------------------ h R^T */
typedef struct {
    const uint16_t *r;                  /* [G][nb][H][8] fp16 */
    const float *scale, *h;             /* [G*H] or NULL; [B, H] */
    float *out;                         /* [B, G*H] */
    long b, hid, nb, gh, g0, gpg, groups, step;   /* gpg: groups of GROUP blocks per gate */
} mv_job;

static void mv_group(const mv_job *j, long grp) {
    const long g = j->g0 + grp / j->gpg, blk0 = grp % j->gpg * GROUP;   /* a group never spans two gates */
    const long nblk = j->nb - blk0 < GROUP ? j->nb - blk0 : GROUP;
    const uint16_t *w = j->r + (g * j->nb + blk0) * j->hid * 8;
    for (long b = 0; b < j->b; b++) {
        const float *h = j->h + b * j->hid;
        __m256 acc[GROUP];
        for (int t = 0; t < GROUP; t++)
            acc[t] = _mm256_setzero_ps();
        if (nblk == GROUP) {
            for (long k = 0; k < j->hid; k++) {
                const __m256 hv = _mm256_set1_ps(h[k]);
#pragma GCC unroll 8
                for (int t = 0; t < GROUP; t++)
                    acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(hv, _mm256_cvtph_ps(_mm_loadu_si128(
                                 (const __m128i *)(w + (t * j->hid + k) * 8)))));
            }
        } else {
            for (long k = 0; k < j->hid; k++) {
                const __m256 hv = _mm256_set1_ps(h[k]);
                for (int t = 0; t < nblk; t++)
                    acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(hv, _mm256_cvtph_ps(_mm_loadu_si128(
                                 (const __m128i *)(w + (t * j->hid + k) * 8)))));
            }
        }
        for (int t = 0; t < nblk; t++) {
            float v[8];
            _mm256_storeu_ps(v, acc[t]);
            const long o0 = (blk0 + t) * 8, n = j->hid - o0 < 8 ? j->hid - o0 : 8;
            float *out = j->out + b * j->gh + g * j->hid + o0;
            const float *s = j->scale ? j->scale + g * j->hid + o0 : NULL;
            for (long l = 0; l < n; l++)
                out[l] = s ? v[l] * s[l] : v[l];
        }
    }
}

static void mv_part(void *arg, long p) {
    const mv_job *j = arg;
    const long end = (p + 1) * j->step < j->groups ? (p + 1) * j->step : j->groups;
    for (long grp = p * j->step; grp < end; grp++)
        mv_group(j, grp);
}

/* out[b, g*H + o] for gates g0 .. g0 + ng - 1 */
static void mv(const uint16_t *r, const float *scale, const float *h, float *out, long b, long hid, long gh,
               long g0, long ng, int nthreads) {
    const long nb = (hid + 7) / 8, gpg = (nb + GROUP - 1) / GROUP;
    mv_job j = {r, scale, h, out, b, hid, nb, gh, g0, gpg, ng * gpg, 0};
    long parts = runner && nthreads > 1 && b * hid * ng * hid >= (1L << 16) ? nthreads * 2 : 1;
    if (parts > j.groups)
        parts = j.groups;
    j.step = (j.groups + parts - 1) / parts;
    parts = (j.groups + j.step - 1) / j.step;
    if (parts > 1)
        runner(mv_part, &j, parts, nthreads);
    else
        mv_part(&j, 0);
}

/* h R^T alone (recurrent_native.py checks it against sequential_sum when it loads): out [B, G*H]
 * for gates g0 .. g0 + ng - 1 of the packed R^T, times scale[o] when scale is not NULL */
void rnn_product(const uint16_t *r, const float *scale, const float *h, float *out, long b, long hid, long gates,
                 long g0, long ng, int nthreads) {
    mv(r, scale, h, out, b, hid, gates * hid, g0, ng, nthreads);
}

/* ------------------------------------------------------------------ the cell's elementwise steps */
typedef struct {
    float clip;
    loop_fn tanh_fn;
    void *tanh_data;
} acts_t;

/* recurrent.Recurrent._act: np.clip(x, -clip, clip) when clip > 0, then the activation, in place */
static void act(const acts_t *a, float *x, long n, int kind) {
    if (a->clip > 0) {
        const float lo = -a->clip, hi = a->clip;
        for (long i = 0; i < n; i++)
            x[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);      /* NaN stays NaN */
    }
    if (kind == ACT_TANH) {
        char *args[2] = {(char *)x, (char *)x};
        const intptr_t dims[1] = {n}, steps[2] = {4, 4};
        a->tanh_fn(args, dims, steps, a->tanh_data);
        return;
    }
    long i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, sigmoid8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        float t[8] = {0};
        memcpy(t, x + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(t, sigmoid8(_mm256_loadu_ps(t)));
        memcpy(x + i, t, (size_t)(n - i) * sizeof(float));
    }
}

/* fp16.round_fp16_: x rounded to fp16 values in place; 1 when all are finite */
static int round16(float *x, long n) {
    __m256i bad = _mm256_setzero_si256();
    long i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = rne8(_mm256_loadu_ps(x + i));
        bad = _mm256_or_si256(bad, nonfinite8(v));
        _mm256_storeu_ps(x + i, v);
    }
    int ok = _mm256_testz_si256(bad, bad);
    for (; i < n; i++) {
        x[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
        ok &= (x[i] - x[i]) == 0.0f;
    }
    return ok;
}

/* d: [cell, T, B, H, reverse, act f, act g, act h, clip (float bits), lbr, xw [T, B, G*H] (biases in),
 *     R packed, scale or 0, peepholes [3, H] (i o f) or 0, rb_h [H] or 0, h [B, H] (in: the initial
 *     state, out: the final one), c likewise (LSTM), active [T, B] uint8 or 0, y, y's row stride in
 *     floats (row t of this direction at y + t * stride, [B, H]), tanh loop, its data, threads]
 * Returns 1 when every state is finite, 0 when one is not, -1 out of memory. */
int rnn_direction(const long *d) {
    const int cell = (int)d[0], fk = (int)d[5], gk = (int)d[6], hk = (int)d[7], lbr = (int)d[9];
    const long T = d[1], B = d[2], H = d[3], G = cell == CELL_LSTM ? 4 : cell == CELL_GRU ? 3 : 1, GH = G * H;
    union { int32_t i; float f; } clip = {(int32_t)d[8]};
    const float *xw = (const float *)d[10], *scale = (const float *)d[12], *peep = (const float *)d[13];
    const float *rbh = (const float *)d[14];
    const uint16_t *r = (const uint16_t *)d[11];
    float *h = (float *)d[15], *c = (float *)d[16], *y = (float *)d[18];
    const uint8_t *active = (const uint8_t *)d[17];
    const long ystride = d[19];
    const int nthreads = (int)d[22];
    const acts_t a = {clip.f, (loop_fn)d[20], (void *)d[21]};
    float *buf = malloc(sizeof(float) * (size_t)(2 * B * GH + 3 * B * H + 8));
    if (!buf)
        return -1;
    float *hr = buf, *g = hr + B * GH, *hn = g + B * GH, *cn = hn + B * H, *tmp = cn + B * H;
    int ok = 1;
    for (long s = 0; s < T; s++) {
        const long t = d[4] ? T - 1 - s : s;
        const float *x = xw + t * B * GH;
        if (cell == CELL_GRU) {
            mv(r, scale, h, hr, B, H, GH, 0, lbr ? 3 : 2, nthreads);
            for (long b = 0; b < B; b++) {
                const float *xb = x + b * GH, *hb = hr + b * GH;
                float *z = g + b * GH, *rg = z + H;
                for (long i = 0; i < 2 * H; i++)
                    z[i] = xb[i] + hb[i];
                act(&a, z, H, fk);
                act(&a, rg, H, fk);
                if (!lbr)
                    for (long i = 0; i < H; i++)          /* a MAC operand: fp16 (its finiteness not asked) */
                        tmp[b * H + i] = rg[i] * h[b * H + i];
            }
            if (!lbr) {
                round16(tmp, B * H);
                mv(r, scale, tmp, hr, B, H, GH, 2, 1, nthreads);
            }
            for (long b = 0; b < B; b++) {
                const float *xb = x + b * GH, *hb = hr + b * GH, *z = g + b * GH, *rg = z + H;
                float *hh = z + 2 * H, *hnb = hn + b * H;
                const float *hp = h + b * H;
                for (long i = 0; i < H; i++)
                    hh[i] = lbr ? xb[2 * H + i] + rg[i] * (hb[2 * H + i] + rbh[i]) : xb[2 * H + i] + hb[2 * H + i];
                act(&a, hh, H, gk);
                for (long i = 0; i < H; i++)
                    hnb[i] = (1.0f - z[i]) * hh[i] + z[i] * hp[i];
            }
            ok &= round16(hn, B * H);
        } else if (cell == CELL_RNN) {
            mv(r, scale, h, hr, B, H, GH, 0, 1, nthreads);
            for (long i = 0; i < B * H; i++)
                hn[i] = x[i] + hr[i];
            act(&a, hn, B * H, fk);
            ok &= round16(hn, B * H);
        } else {
            mv(r, scale, h, hr, B, H, GH, 0, 4, nthreads);
            for (long b = 0; b < B; b++) {
                const float *xb = x + b * GH, *hb = hr + b * GH, *cp = c + b * H;
                float *gi = g + b * GH, *go = gi + H, *gf = go + H, *gc = gf + H, *cnb = cn + b * H;
                for (long i = 0; i < GH; i++)
                    gi[i] = xb[i] + hb[i];
                if (peep)
                    for (long i = 0; i < H; i++) {
                        gi[i] += peep[i] * cp[i];
                        gf[i] += peep[2 * H + i] * cp[i];
                    }
                act(&a, gi, H, fk);
                act(&a, gf, H, fk);
                act(&a, gc, H, gk);
                for (long i = 0; i < H; i++)
                    cnb[i] = gf[i] * cp[i] + gi[i] * gc[i];
            }
            ok &= round16(cn, B * H);
            for (long b = 0; b < B; b++) {
                float *go = g + b * GH + H, *cnb = cn + b * H, *tb = tmp + b * H, *hnb = hn + b * H;
                if (peep)
                    for (long i = 0; i < H; i++)
                        go[i] += peep[H + i] * cnb[i];
                act(&a, go, H, fk);
                memcpy(tb, cnb, (size_t)H * sizeof(float));
                act(&a, tb, H, hk);
                for (long i = 0; i < H; i++)
                    hnb[i] = go[i] * tb[i];
            }
            ok &= round16(hn, B * H);
        }
        float *yt = y + t * ystride;
        for (long b = 0; b < B; b++) {
            const int on = active ? active[t * B + b] != 0 : 1;
            if (on) {
                memcpy(yt + b * H, hn + b * H, (size_t)H * sizeof(float));
                memcpy(h + b * H, hn + b * H, (size_t)H * sizeof(float));
                if (cell == CELL_LSTM)
                    memcpy(c + b * H, cn + b * H, (size_t)H * sizeof(float));
            } else {
                memset(yt + b * H, 0, (size_t)H * sizeof(float));
            }
        }
    }
    free(buf);
    return ok;
}
