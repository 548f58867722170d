/* wt/registry.h: a registry of backends by name (the factory of DESIGN.md).
 *
 * A registry maps a backend name ("grpc", "ucx", "nccl", ...) to a table of
 * function pointers (its "ops"). The server keeps one for worker engines and
 * the client one for trainer engines; this module is the engine both use and
 * holds no global state itself.
 *
 * Every ops table begins with a wt_ops_header. A registry is created with
 * the ABI version its users were compiled against and refuses a table that
 * says otherwise, so a stale plugin is an error at lookup, not a crash.
 *
 * A backend is registered either directly (the table is in this process) or
 * lazily (a shared object path and a symbol): the object is dlopen'ed only on
 * the first lookup of that name, so a third-party backend whose libraries
 * are missing costs nothing until someone asks for it. A loaded object stays
 * loaded until the registry is destroyed. (wt's own GPU backends are
 * registered directly; their CUDA and NCCL are modules loaded on first use,
 * wt/cuda.h and wt/nccl_seam.h.)
 *
 * All functions are thread-safe on the same registry, except that
 * wt_registry_destroy() must not race with any other call.
 */
#ifndef WT_REGISTRY_H
#define WT_REGISTRY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* The first member of every ops table. `name` must equal the name the table
 * is registered under, which catches a lazy symbol that resolves to another
 * backend's table. */
typedef struct wt_ops_header {
  uint32_t abi_version;
  const char *name;
} wt_ops_header;

typedef struct wt_registry wt_registry;

/* What wt_registry_names() reports for one backend. Strings belong to the
 * registry and stay valid until it is destroyed. */
typedef struct wt_registry_entry {
  const char *name;
  int lazy;                  /* registered with wt_registry_register_lazy */
  int loaded;                /* ops available without loading (always 1 for
                                direct entries; 1 once a lazy one loaded) */
  const char *shared_object; /* lazy only, else NULL */
  const char *symbol;        /* lazy only, else NULL */
} wt_registry_entry;

/* Creates an empty registry. `kind` ("worker engine", "trainer engine") is
 * copied and names the registry in every error message; `abi_version` is
 * the version every ops table must carry. The caller owns *out and releases
 * it with wt_registry_destroy(). */
wt_status *wt_registry_new(const char *kind, uint32_t abi_version,
                           wt_registry **out);

/* Releases the registry and dlclose()s every shared object it loaded; ops
 * pointers obtained from lazy entries are invalid afterwards. NULL is
 * ignored. */
void wt_registry_destroy(wt_registry *reg);

/* Registers `ops` (a table beginning with wt_ops_header) under `name`. The
 * table is borrowed and must outlive the registry; `name` is copied.
 * ALREADY_EXISTS if the name is taken, FAILED_PRECONDITION if the table's
 * ABI version differs from the registry's, INVALID_ARGUMENT for an empty
 * name or a header naming another backend. */
wt_status *wt_registry_register(wt_registry *reg, const char *name,
                                const void *ops);

/* Registers each of tables[0..n) under the name its wt_ops_header gives,
 * as wt_registry_register; stops at the first error. */
wt_status *wt_registry_register_tables(wt_registry *reg,
                                       const void *const *tables, size_t n);

/* Records that `name` is provided by the table at `symbol` in the shared
 * object `shared_object` (a path, or a bare file name searched as dlopen(3)
 * does). Nothing is loaded now; strings are copied. ALREADY_EXISTS if the
 * name is taken. */
wt_status *wt_registry_register_lazy(wt_registry *reg, const char *name,
                                     const char *shared_object,
                                     const char *symbol);

/* Sets *ops to the table registered under `name`, loading a lazy entry on
 * its first lookup (dlopen RTLD_NOW | RTLD_LOCAL, then dlsym). The table
 * belongs to the registry (or the loaded object) and is valid until the
 * registry is destroyed; every lookup of a name returns the same pointer.
 * NOT_FOUND for an unknown name, with the registered names in the message;
 * FAILED_PRECONDITION when a lazy entry cannot be loaded (the message names
 * the backend, the shared object, the symbol and dlerror()'s text) or its
 * table has the wrong ABI version; INVALID_ARGUMENT when the loaded table
 * names another backend. A failed load is unloaded and not remembered: the
 * next lookup tries again. */
wt_status *wt_registry_lookup(wt_registry *reg, const char *name,
                              const void **ops);

/* Sets *entries to a malloc'd array of *n entries, sorted by name; the
 * caller frees the array with free() (not the strings, which belong to the
 * registry). An empty registry gives *entries == NULL and *n == 0. */
wt_status *wt_registry_names(wt_registry *reg, wt_registry_entry **entries,
                             size_t *n);

/* The registered names sorted and joined by ", " ("grpc, ucx"; "" when
 * empty). The caller owns *out and frees it with free(). */
wt_status *wt_registry_names_joined(wt_registry *reg, char **out);

/* The `kind` given at creation; owned by the registry. */
const char *wt_registry_kind(const wt_registry *reg);

/* A process's registry of one side (the worker engines', the trainer
 * engines'), made once with its built-ins: the one wrapper both sides use.
 * A static of the side's file, initialised with WT_REGISTRY_ONCE_INIT. */
typedef struct wt_registry_once {
  pthread_once_t once;
  const char *kind;
  uint32_t abi_version;
  wt_status *(*fill)(wt_registry *reg); /* registers the built-ins */
  wt_registry *reg;
  wt_status *error;
} wt_registry_once;

#define WT_REGISTRY_ONCE_INIT(kind_, abi_, fill_) \
  { PTHREAD_ONCE_INIT, (kind_), (abi_), (fill_), NULL, NULL }

/* Sets *out to the registry, made on the first call (`build` is the
 * side's function calling wt_registry_once_build(&g), since pthread_once
 * takes no argument). When making it failed, *out is NULL and a copy of
 * that error comes back, every time. */
wt_status *wt_registry_once_get(wt_registry_once *g, void (*build)(void),
                                wt_registry **out);
void wt_registry_once_build(wt_registry_once *g);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_REGISTRY_H */
