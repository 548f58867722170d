/* cuda_loader.c: finds and loads the CUDA module on first use (see
 * wt/cuda.h). */

#include <time.h>

#include "wt/cuda.h"
#include "wt/clock.h"
#include "wt/log.h"
#include "core/module.h"

#ifdef WT_WITH_CUDA
#define NOT_BUILT NULL
#else
#define NOT_BUILT                                                           \
  "this build of wt has no CUDA support (configured with WT_WITH_CUDA=OFF " \
  "or without the CUDA toolkit)"
#endif

static wt_module module =
    WT_MODULE_INIT("CUDA", "libwt_cuda.so", "wt_cuda_module_api",
                   WT_CUDA_API_VERSION, NOT_BUILT);

static void load(void) {
  wt_module_load(&module);
}

wt_status *wt_cuda_api_get(const wt_cuda_api **out) {
  const void *t = NULL;
  wt_status *st = wt_module_get(&module, load, &t);
  *out = t;
  return st;
}

void wt_cuda_api_override(const wt_cuda_api *api) {
  wt_module_override(&module, api);
}

wt_status *wt_cuda_check_device(int device) {
  const wt_cuda_api *api = NULL;
  wt_status *st = wt_cuda_api_get(&api);
  if (st != NULL) return wt_status_prefix(st, "device 'cuda:%d'", device);
  int count = 0;
  st = api->device_count(&count);
  if (st != NULL) return wt_status_prefix(st, "device 'cuda:%d'", device);
  if (device < 0 || device >= count)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "device 'cuda:%d' does not exist: %d CUDA device(s) "
                         "visible",
                         device, count);
  return NULL;
}

wt_status *wt_cuda_bind(int device) {
  const wt_cuda_api *api = NULL;
  wt_status *st = wt_cuda_api_get(&api);
  if (st != NULL) return st;
  int cur = -1;
  wt_status *get = api->get_device(&cur);
  if (get == NULL && cur == device) return NULL;
  wt_status_free(get);
  return api->set_device(device);
}

wt_status *wt_cuda_stream_wait(const wt_cuda_api *api, void *stream,
                               int64_t timeout_ms, const atomic_bool *cancel) {
  int64_t t0 = wt_mono_ms();
  for (;;) {
    int done = 0;
    wt_status *st = api->stream_query(stream, &done);
    if (st != NULL || done) return st;
    if (cancel != NULL && atomic_load(cancel))
      return wt_status_new(WT_CANCELLED, "cancelled");
    if (wt_mono_ms() - t0 >= timeout_ms)
      return wt_status_new(WT_DEADLINE_EXCEEDED,
                           "did not finish within %lld ms",
                           (long long)timeout_ms);
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
  }
}
