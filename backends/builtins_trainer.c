/* builtins_trainer.c: the one place where the built-in backends' trainer
 * tables are registered (wt/trainer.h), built into libwt_client.
 *
 * One line per folder backends/<name>/ built in (backends_list.h). The GPU
 * backends are registered directly; what is lazy is their driver
 * libraries: CUDA only through wt/cuda.h and NCCL only through wt/nccl_seam.h,
 * whose modules load when an ipc or nccl init asks for them. */

#include "backends/backends.h"
#include "wt/trainer.h"

wt_status *wt_trainer_register_builtins(wt_registry *reg) {
  wt_status *st = NULL;
#define REGISTER(name) \
  WT_CHECK(wt_registry_register(reg, #name, &wt_##name##_trainer_ops));
  WT_BUILTIN_BACKENDS(REGISTER)
#undef REGISTER
out:
  return st;
}
