/* engine_registry.c: the worker-engine registry and the one place where the
 * built-in backends are registered (see wt/engine.h).
 *
 * `grpc`, `ipc` and `nccl` always (ipc and nccl call CUDA and NCCL only
 * through wt/cuda.h and wt/nccl.h, whose modules are loaded on first use,
 * so a host without them pays nothing until such an init, which then fails
 * saying why); `ucx` when built with UCX.
 */

#include <pthread.h>
#include <stdlib.h>

#include "wt/engine.h"
#include "wt/log.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static wt_registry *registry;
/* Why the registry could not be built; copied to every caller. */
static wt_status *registry_error;

wt_status *wt_engine_register_builtins(wt_registry *reg) {
  wt_status *st = NULL;
  WT_CHECK(wt_registry_register(reg, "grpc", &wt_grpc_engine_ops));
  WT_CHECK(wt_registry_register(reg, "ipc", &wt_ipc_engine_ops));
  /* NCCL only through wt/nccl.h, loaded when an nccl init asks for it. */
  WT_CHECK(wt_registry_register(reg, "nccl", &wt_nccl_engine_ops));
#ifdef WT_WITH_UCX
  WT_CHECK(wt_registry_register(reg, "ucx", &wt_ucx_engine_ops));
#endif
out:
  return st;
}

static void build(void) {
  wt_status *st = NULL;
  wt_registry *reg = NULL;
  WT_CHECK(wt_registry_new("worker engine", WT_ENGINE_ABI_VERSION, &reg));
  WT_CHECK(wt_engine_register_builtins(reg));
  registry = reg;
  reg = NULL;
out:
  wt_registry_destroy(reg);
  registry_error = st;
}

wt_status *wt_engine_registry(wt_registry **out) {
  pthread_once(&once, build);
  if (registry_error != NULL) return wt_status_copy(registry_error);
  *out = registry;
  return NULL;
}

wt_status *wt_engine_lookup(wt_registry *reg, const char *backend,
                            const wt_engine_ops **ops) {
  wt_status *st = NULL;
  const void *p = NULL;
  if (reg == NULL) WT_CHECK(wt_engine_registry(&reg));
  WT_CHECK(wt_registry_lookup(reg, backend ? backend : "", &p));
  *ops = p;
out:
  return st;
}

wt_status *wt_engine_names(wt_registry *reg, char **out) {
  wt_status *st = NULL;
  if (reg == NULL) WT_CHECK(wt_engine_registry(&reg));
  WT_CHECK(wt_registry_names_joined(reg, out));
out:
  return st;
}
