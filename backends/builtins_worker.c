/* builtins_worker.c: the one place where the built-in backends' worker
 * tables are registered (wt/engine.h), built into libwt_server.
 *
 * One table per folder backends/<name>/ built in (backends_list.h, written
 * by backends/backends.cmake): `grpc`, `ipc` and `nccl` always (ipc and
 * nccl call CUDA and NCCL only through wt/cuda.h and wt/nccl_seam.h, whose
 * modules load on first use, so a host without them pays nothing until
 * such an init, which then fails saying why); `ucx` when built with UCX. */

#include "backends/backends.h"
#include "wt/engine.h"

#define TABLE(name) &wt_##name##_engine_ops,
static const void *const tables[] = {WT_BUILTIN_BACKENDS(TABLE)};

wt_status *wt_engine_register_builtins(wt_registry *reg) {
  return wt_registry_register_tables(reg, tables,
                                     sizeof(tables) / sizeof(tables[0]));
}
