/* module.h: the one loader of optional modules (libwt_cuda.so,
 * libwt_nccl.so) and of lazily registered backends. Not installed.
 *
 * A module here is a shared object wt finds beside libwt_common (or at a
 * path an embedder sets) and opens once; what it exports is a function
 * returning a table whose first field is a uint32_t version. The table is
 * kept for the life of the process (tables point into the object). */
#ifndef WT_CORE_MODULE_H
#define WT_CORE_MODULE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "wt/status.h"
#include "wt/visibility.h"

/* Opens `path` (RTLD_NOW | RTLD_LOCAL) and resolves `symbol`. On success
 * *handle is the caller's (dlclose, or keep it) and *sym the symbol's
 * address. The error, FAILED_PRECONDITION, names `what`, the path and the
 * symbol, and says dlopen's or dlsym's reason once. */
WT_HIDDEN wt_status *wt_module_open(const char *what, const char *path,
                                    const char *symbol, void **handle,
                                    void **sym);

/* One optional module of libwt_common: a static of its seam's file. */
typedef struct wt_module {
  const char *what;   /* "CUDA", "NCCL": starts every message */
  const char *file;   /* "libwt_cuda.so", looked for beside libwt_common */
  const char *symbol; /* "wt_cuda_module_api": a function returning the table */
  uint32_t version;   /* the table's first field must say this */
  /* NULL when this build has the module; else why it has not (the whole
   * message after "<what> is unavailable: "). */
  const char *not_built;
  /* State: loaded once. */
  pthread_once_t once;
  const void *table;
  wt_status *error;
  _Atomic(const void *) override;
} wt_module;

#define WT_MODULE_INIT(what_, file_, symbol_, version_, not_built_) \
  {                                                                 \
    .what = (what_), .file = (file_), .symbol = (symbol_),          \
    .version = (version_), .not_built = (not_built_),               \
    .once = PTHREAD_ONCE_INIT                                       \
  }

/* The override when set, else the module's table, loaded on the first
 * call; the same FAILED_PRECONDITION (a copy, the caller's) every call
 * after a failed load. `m` must be a static whose `once` is
 * PTHREAD_ONCE_INIT (WT_MODULE_INIT); `load` is a function of the seam
 * calling wt_module_load(m) (pthread_once takes no argument). */
WT_HIDDEN wt_status *wt_module_get(wt_module *m, void (*load)(void),
                                   const void **table);
WT_HIDDEN void wt_module_load(wt_module *m);
WT_HIDDEN void wt_module_override(wt_module *m, const void *table);

#endif /* WT_CORE_MODULE_H */
