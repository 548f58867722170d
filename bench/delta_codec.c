/* delta_codec.c: the delta codec's rate per core (bench/delta_bench.sh,
 * docs/delta.md), apart from any link: encode (what a trainer does per
 * segment of a round: the base's digest, XOR, zstd, the base updated, the
 * new bytes' digest) and decode (what a worker does: zstd, the base's
 * bytes read and hashed, XOR, the new bytes written and hashed), on one
 * thread, over SIZE_MB of a bf16 tensor stepped by
 * client/tools/update_step.c's generator at each FRACTION. The reference
 * in the same run is memcpy of the same bytes. Not a test.
 *
 * usage: wt-bench-delta-codec [SIZE_MB [FRACTION...]] */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../client/tools/update_step.h"
#include "wt/clock.h"
#include "wt/delta.h"

#define SEG (1u << 20)

static double secs(int64_t us) {
  return (double)us / 1e6;
}

int main(int argc, char **argv) {
  size_t mb = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
  size_t n = mb << 20;
  static const char *def[] = {"0.005", "0.02", "0.1", "0.5", "1"};
  const char **fr = argc > 2 ? (const char **)argv + 2 : def;
  int nfr = argc > 2 ? argc - 2 : 5;
  unsigned char *base = malloc(n), *next = malloc(n), *copy = malloc(n);
  unsigned char *frames = malloc(n + (n / SEG + 1) * 64);
  size_t *flen = calloc(n / SEG + 1, sizeof(*flen));
  unsigned char *x = malloc(SEG), *dbase = malloc(SEG);
  wt_delta_codec *c = wt_delta_codec_new();
  wt_delta_hasher *h = NULL;
  if (!base || !next || !copy || !frames || !flen || !x || !dbase || !c ||
      wt_delta_hasher_new(&h) != NULL) {
    fprintf(stderr, "delta_codec: out of memory\n");
    return 1;
  }
  wt_tensor_meta m = {.name = "w",
                      .dtype = WT_DTYPE_BFLOAT16,
                      .ndim = 1,
                      .numel = n / 2,
                      .nbytes = n};
  m.shape[0] = (int64_t)(n / 2);
  for (size_t i = 0; i < n; i++)
    base[i] = (unsigned char)(i * 2654435761u >> 7);
  memcpy(copy, base, n); /* touched once: the timed copy is the copy */
  int64_t t0 = wt_mono_us();
  memcpy(copy, base, n);
  double ref = (double)n / secs(wt_mono_us() - t0 + 1) / 1e6;
  printf(
      "delta codec on one thread, %zu MiB bf16; memcpy %.0f MB/s (the "
      "reference)\n",
      mb, ref);
  printf("%-8s %10s %12s %12s %9s %9s\n", "changed", "ratio", "encode_MB/s",
         "decode_MB/s", "enc/memcpy", "dec/memcpy");
  for (int f = 0; f < nfr; f++) {
    double frac = strtod(fr[f], NULL);
    memcpy(next, base, n);
    wt_update_step(&m, next, frac, 7, 1);
    memcpy(copy, base, n); /* the trainer's base */
    size_t wire = 0;
    t0 = wt_mono_us();
    wt_delta_hasher_reset(h);
    for (size_t s = 0, off = 0; off < n; s++, off += SEG) {
      size_t len = n - off < SEG ? n - off : SEG;
      (void)wt_delta_digest(copy + off, len);
      flen[s] = wt_delta_encode(c, next + off, copy + off, len, x,
                                frames + wire, len);
      if (flen[s] == 0) {
        memcpy(frames + wire, next + off, len);
        wire += len;
      } else {
        wire += flen[s];
      }
      memcpy(copy + off, next + off, len);
      wt_delta_hasher_update(h, copy + off, len);
    }
    double enc = (double)n / secs(wt_mono_us() - t0 + 1) / 1e6;
    /* The worker: base holds the committed bytes; decode into `copy`. */
    size_t at = 0;
    t0 = wt_mono_us();
    wt_delta_hasher_reset(h);
    for (size_t s = 0, off = 0; off < n; s++, off += SEG) {
      size_t len = n - off < SEG ? n - off : SEG;
      if (flen[s] == 0) {
        memcpy(copy + off, frames + at, len);
        at += len;
      } else {
        wt_status *st =
            wt_delta_decode(c, frames + at, flen[s], len, x, "bench");
        if (st != NULL) {
          fprintf(stderr, "delta_codec: %s\n", wt_status_message(st));
          return 1;
        }
        at += flen[s];
        memcpy(dbase, base + off, len);
        (void)wt_delta_digest(dbase, len);
        wt_delta_xor(x, dbase, len);
        memcpy(copy + off, x, len);
      }
      wt_delta_hasher_update(h, copy + off, len);
    }
    double dec = (double)n / secs(wt_mono_us() - t0 + 1) / 1e6;
    if (memcmp(copy, next, n) != 0) {
      fprintf(stderr, "delta_codec: decoded bytes differ\n");
      return 1;
    }
    printf("%-8s %9.1fx %12.0f %12.0f %9.2f %9.2f\n", fr[f],
           (double)n / (double)wire, enc, dec, enc / ref, dec / ref);
  }
  wt_delta_hasher_free(h);
  wt_delta_codec_free(c);
  free(base);
  free(next);
  free(copy);
  free(frames);
  free(flen);
  free(x);
  free(dbase);
  return 0;
}
