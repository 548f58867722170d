/* cuda_loader.c: finds and loads the CUDA module on first use (see
 * wt/cuda.h). */

#include <dlfcn.h>
#include <libgen.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wt/cuda.h"
#include "wt/log.h"

#define MODULE_FILE "libwt_cuda.so"
#define MODULE_SYMBOL "wt_cuda_module_api"
/* Overrides where the module is looked for (a path to the .so). */
#define MODULE_ENV "WT_CUDA_MODULE"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const wt_cuda_api *loaded;
static wt_status *load_error;
static _Atomic(const wt_cuda_api *) override;

#ifdef WT_WITH_CUDA
/* The module sits beside libwt_common (build tree and install alike). */
static char *module_path(void) {
  const char *env = getenv(MODULE_ENV);
  if (env != NULL && *env != '\0') return strdup(env);
  Dl_info info;
  if (dladdr((void *)&wt_cuda_api_get, &info) != 0 && info.dli_fname) {
    char *copy = strdup(info.dli_fname);
    if (copy == NULL) return NULL;
    char *path = NULL;
    if (asprintf(&path, "%s/%s", dirname(copy), MODULE_FILE) < 0) path = NULL;
    free(copy);
    return path;
  }
  return strdup(MODULE_FILE);
}
#endif

static void load(void) {
#ifndef WT_WITH_CUDA
  load_error = wt_status_new(WT_FAILED_PRECONDITION,
                             "CUDA is unavailable: this build of wt has no "
                             "CUDA support (configured with WT_WITH_CUDA=OFF "
                             "or without the CUDA toolkit)");
#else
  char *path = module_path();
  if (path == NULL) {
    load_error = wt_status_new(WT_RESOURCE_EXHAUSTED, "CUDA: out of memory");
    return;
  }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *why = dlerror();
    load_error = wt_status_new(WT_FAILED_PRECONDITION,
                               "CUDA is unavailable: cannot load %s: %s", path,
                               why ? why : "(no reason given)");
    free(path);
    return;
  }
  wt_cuda_module_fn fn = (wt_cuda_module_fn)dlsym(h, MODULE_SYMBOL);
  const wt_cuda_api *api = fn ? fn() : NULL;
  if (api == NULL || api->version != WT_CUDA_API_VERSION) {
    load_error = wt_status_new(
        WT_FAILED_PRECONDITION, "CUDA is unavailable: %s: %s", path,
        api == NULL ? "no " MODULE_SYMBOL " table"
                    : "its table is of another version (a stale module)");
    dlclose(h);
    free(path);
    return;
  }
  /* Kept loaded for the life of the process: tables point into it. */
  WT_LOGD("cuda", "loaded %s (%s)", path, api->name);
  free(path);
  loaded = api;
#endif
}

wt_status *wt_cuda_api_get(const wt_cuda_api **out) {
  const wt_cuda_api *o = atomic_load(&override);
  if (o != NULL) {
    *out = o;
    return NULL;
  }
  pthread_once(&once, load);
  *out = loaded;
  if (loaded == NULL) return wt_status_copy(load_error);
  return NULL;
}

void wt_cuda_api_override(const wt_cuda_api *api) {
  atomic_store(&override, api);
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
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    int done = 0;
    wt_status *st = api->stream_query(stream, &done);
    if (st != NULL || done) return st;
    if (cancel != NULL && atomic_load(cancel))
      return wt_status_new(WT_CANCELLED, "cancelled");
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t ms = (int64_t)(now.tv_sec - t0.tv_sec) * 1000 +
                 (now.tv_nsec - t0.tv_nsec) / 1000000;
    if (ms >= timeout_ms)
      return wt_status_new(WT_DEADLINE_EXCEEDED,
                           "did not finish within %lld ms",
                           (long long)timeout_ms);
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
  }
}
