/* ipc_ref.c: wt-bench-ipc-ref, the ipc benchmark's reference: a plain
 * device-to-device copy of BYTES on one GPU (cudaMemcpyAsync on a stream,
 * through wt/cuda.h), RUNS times after one warm-up; prints
 * "ref GB/s best B median M" and exits 0, or says why not.
 *
 *   wt-bench-ipc-ref BYTES [RUNS] [DEVICE]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_util.h"
#include "wt/cuda.h"

static int fail(wt_status *st) {
  fprintf(stderr, "wt-bench-ipc-ref: %s\n", wt_status_message(st));
  wt_status_free(st);
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: wt-bench-ipc-ref BYTES [RUNS] [DEVICE]\n");
    return 2;
  }
  size_t bytes = strtoull(argv[1], NULL, 10);
  int runs = argc > 2 ? atoi(argv[2]) : 5;
  int dev = argc > 3 ? atoi(argv[3]) : 0;
  if (bytes == 0 || runs < 1 || runs > 1000) {
    fprintf(stderr, "wt-bench-ipc-ref: BYTES must be > 0, RUNS 1..1000\n");
    return 2;
  }
  const wt_cuda_api *api = NULL;
  wt_status *st = wt_cuda_api_get(&api);
  if (st == NULL) st = wt_cuda_bind(dev);
  if (st != NULL) return fail(st);
  void *src = NULL, *dst = NULL, *stream = NULL;
  if ((st = api->device_alloc(dev, bytes, &src)) != NULL ||
      (st = api->device_alloc(dev, bytes, &dst)) != NULL ||
      (st = api->stream_create(dev, &stream)) != NULL)
    return fail(st);
  double *gbps = calloc((size_t)runs, sizeof(*gbps));
  for (int r = -1; r < runs; r++) {
    double t0 = bench_now_s();
    if ((st = api->copy_async(dst, src, bytes, stream)) != NULL)
      return fail(st);
    if ((st = api->stream_synchronize(stream)) != NULL) return fail(st);
    double dt = bench_now_s() - t0;
    if (r >= 0) gbps[r] = (double)bytes / dt / 1e9;
  }
  qsort(gbps, (size_t)runs, sizeof(*gbps), bench_cmp_double);
  printf("ref GB/s best %.2f median %.2f (%zu bytes, cuda:%d, %d runs)\n",
         gbps[runs - 1], gbps[runs / 2], bytes, dev, runs);
  free(gbps);
  api->stream_destroy(stream);
  api->device_free(dev, src);
  api->device_free(dev, dst);
  return 0;
}
