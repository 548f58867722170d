/* backends/backends.h: the built-in backends' two tables, the worker's
 * (wt/engine.h: registered by backends/builtins_worker.c, built into
 * libwt_server) and the trainer's (wt/trainer.h: registered by
 * backends/builtins_trainer.c, built into libwt_client).
 *
 * Each backend is one folder, backends/<name>/ (docs/adding-a-backend.md):
 * <name>_worker*.c (built into libwt_server), <name>_trainer*.c (into
 * libwt_client), <name>.h and <name>.c for what both halves agree on (into
 * libwt_common), and backend.cmake naming them. CMake writes the list of
 * the folders built in (WT_BUILTIN_BACKENDS, backends_list.h); each names
 * its tables wt_<name>_engine_ops and wt_<name>_trainer_ops. Private to
 * wt's libraries: not installed. */
#ifndef WT_BACKENDS_H
#define WT_BACKENDS_H

#include "backends_list.h" /* generated: WT_BUILTIN_BACKENDS(X) */
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* The tables' types are wt/engine.h's and wt/trainer.h's; each library
 * sees only its own side's header. */
struct wt_engine_ops;
struct wt_trainer_ops;
#define WT_DECLARE_BACKEND(name)                            \
  extern const struct wt_engine_ops wt_##name##_engine_ops; \
  extern const struct wt_trainer_ops wt_##name##_trainer_ops;
WT_BUILTIN_BACKENDS(WT_DECLARE_BACKEND)
#undef WT_DECLARE_BACKEND

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_BACKENDS_H */
