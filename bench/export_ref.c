/* export_ref.c: wt-bench-export, the consumer's side of bench/export_bench.sh.
 *
 *   wt-bench-export SOCKET [ACQUIRES] [PASSES] [--h2d DEVICE]
 *
 * 1. ACQUIRES (10) acquire-and-release cycles through libwt_consumer: the
 *    first maps the regions, later ones reuse them; prints each one's time.
 * 2. Reads every byte of the version through the mapping (a sum of 64-bit
 *    words) PASSES (5) times, and the same over a private buffer of the
 *    same size in the same run (the reference); prints the medians.
 * 3. With --h2d: copies every tensor to a device buffer from a mapping
 *    registered read-only (cudaHostRegister), and the same bytes from
 *    pinned memory (cudaHostAlloc) with the same copy (cudaMemcpy), PASSES
 *    times each; prints the medians. Without CUDA it says why and skips.
 *
 * Output lines are "key value" for the script's table. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/clock.h"
#include "wt/consumer.h"
#include "wt/cuda.h"

static int die(const char *what, wt_status *st) {
  fprintf(stderr, "wt-bench-export: %s: %s\n", what, wt_status_message(st));
  wt_status_free(st);
  return 1;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static uint64_t sum_words(const void *p, size_t n) {
  const uint64_t *w = p;
  uint64_t s = 0;
  for (size_t i = 0; i < n / 8; i++) s += w[i];
  return s;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr,
            "usage: wt-bench-export SOCKET [ACQUIRES] [PASSES] "
            "[--h2d DEVICE]\n");
    return 2;
  }
  int acquires = argc > 2 && argv[2][0] != '-' ? atoi(argv[2]) : 10;
  int passes = argc > 3 && argv[3][0] != '-' ? atoi(argv[3]) : 5;
  int h2d = -1;
  for (int i = 2; i + 1 < argc; i++)
    if (strcmp(argv[i], "--h2d") == 0) h2d = atoi(argv[i + 1]);
  if (acquires < 1) acquires = 1;
  if (passes < 1 || passes > 64) passes = 5;

  wt_consumer *c = NULL;
  wt_status *st = wt_consumer_connect(argv[1], NULL, &c);
  if (st != NULL) return die("connect", st);
  wt_consumer_version *v = NULL;
  for (int k = 1; k <= acquires; k++) {
    int64_t t0 = wt_mono_us();
    if ((st = wt_consumer_acquire(c, NULL, &v)) != NULL)
      return die("acquire", st);
    double ms = (double)(wt_mono_us() - t0) / 1000.0;
    if (k == 1 || k == acquires) printf("acquire_%d_ms %.3f\n", k, ms);
    if (k == acquires) break; /* keep the last one for the reads */
    if ((st = wt_consumer_release(c, v)) != NULL) return die("release", st);
  }
  uint64_t total = 0;
  for (size_t i = 0; i < v->n_tensors; i++) total += v->tensors[i].nbytes;
  printf("tensors %zu\nbytes %" PRIu64 "\n", v->n_tensors, total);

  /* Reads: the mapping against a private buffer of the same size. */
  unsigned char *priv = malloc((size_t)total);
  if (priv == NULL)
    return fprintf(stderr, "wt-bench-export: out of memory\n"), 1;
  memset(priv, 1, (size_t)total);
  double map_gbps[64], priv_gbps[64];
  uint64_t sink = 0;
  for (int p = 0; p < passes; p++) {
    int64_t t0 = wt_mono_us();
    for (size_t i = 0; i < v->n_tensors; i++)
      sink += sum_words(v->tensors[i].data, (size_t)v->tensors[i].nbytes);
    int64_t t1 = wt_mono_us();
    sink += sum_words(priv, (size_t)total);
    int64_t t2 = wt_mono_us();
    map_gbps[p] = (double)total / (double)(t1 - t0) / 1e3;
    priv_gbps[p] = (double)total / (double)(t2 - t1) / 1e3;
  }
  printf("read_mapping_gbps %.2f\nread_private_gbps %.2f\nsink %" PRIu64 "\n",
         median(map_gbps, passes), median(priv_gbps, passes), sink % 7);
  free(priv);

  if (h2d >= 0) {
    const wt_cuda_api *api = NULL;
    int n = 0;
    st = wt_cuda_api_get(&api);
    if (st == NULL) st = api->device_count(&n);
    if (st == NULL && h2d >= n)
      st = wt_status_new(WT_FAILED_PRECONDITION, "no CUDA device %d", h2d);
    if (st != NULL) {
      printf("h2d skipped: %s\n", wt_status_message(st));
      wt_status_free(st);
    } else {
      wt_consumer *rc = NULL;
      wt_consumer_options ro = {.register_host = true};
      wt_consumer_version *rv = NULL;
      void *dev = NULL, *pinned = NULL;
      if ((st = wt_consumer_connect(argv[1], &ro, &rc)) != NULL ||
          (st = wt_consumer_acquire(rc, NULL, &rv)) != NULL ||
          (st = wt_cuda_bind(h2d)) != NULL ||
          (st = api->device_alloc(h2d, (size_t)total, &dev)) != NULL ||
          (st = api->host_alloc((size_t)total, &pinned)) != NULL)
        return die("h2d set-up", st);
      memset(pinned, 1, (size_t)total);
      double reg_gbps[64], pin_gbps[64];
      for (int p = 0; p < passes && st == NULL; p++) {
        int64_t t0 = wt_mono_us();
        uint64_t off = 0;
        for (size_t i = 0; i < rv->n_tensors && st == NULL; i++) {
          st = api->copy_to_device(h2d, (char *)dev + off, rv->tensors[i].data,
                                   (size_t)rv->tensors[i].nbytes);
          off += rv->tensors[i].nbytes;
        }
        int64_t t1 = wt_mono_us();
        off = 0;
        for (size_t i = 0; i < rv->n_tensors && st == NULL; i++) {
          st = api->copy_to_device(h2d, (char *)dev + off, (char *)pinned + off,
                                   (size_t)rv->tensors[i].nbytes);
          off += rv->tensors[i].nbytes;
        }
        int64_t t2 = wt_mono_us();
        reg_gbps[p] = (double)total / (double)(t1 - t0) / 1e3;
        pin_gbps[p] = (double)total / (double)(t2 - t1) / 1e3;
      }
      if (st != NULL) return die("h2d copy", st);
      printf("h2d_registered_gbps %.2f\nh2d_pinned_gbps %.2f\n",
             median(reg_gbps, passes), median(pin_gbps, passes));
      api->host_free(pinned);
      api->device_free(h2d, dev);
      wt_status_free(wt_consumer_release(rc, rv));
      wt_consumer_close(rc);
    }
  }
  wt_status_free(wt_consumer_release(c, v));
  wt_consumer_close(c);
  return 0;
}
