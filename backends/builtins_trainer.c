/* builtins_trainer.c: the one place where the built-in backends' trainer
 * tables are registered (wt/trainer.h), built into libwt_client.
 *
 * One table per folder backends/<name>/ built in (backends_list.h). The
 * GPU backends are registered directly; what is lazy is their driver
 * libraries: CUDA only through wt/cuda.h and NCCL only through
 * wt/nccl_seam.h, whose modules load when an ipc or nccl init asks. */

#include "backends/backends.h"
#include "wt/trainer.h"

#define TABLE(name) &wt_##name##_trainer_ops,
static const void *const tables[] = {WT_BUILTIN_BACKENDS(TABLE)};

wt_status *wt_trainer_register_builtins(wt_registry *reg) {
  return wt_registry_register_tables(reg, tables,
                                     sizeof(tables) / sizeof(tables[0]));
}
