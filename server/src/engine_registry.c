/* engine_registry.c: the worker-engine registry (see wt/engine.h), filled
 * with the built-in backends by backends/builtins_worker.c. */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "wt/engine.h"
#include "wt/log.h"

/* The one registry of the process: global by design (DESIGN.md). */
static wt_registry_once registry = WT_REGISTRY_ONCE_INIT(
    "worker engine", WT_ENGINE_ABI_VERSION, wt_engine_register_builtins);

static void build(void) {
  wt_registry_once_build(&registry);
}

wt_status *wt_engine_registry(wt_registry **out) {
  return wt_registry_once_get(&registry, build, out);
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

/* The backend of "BACKEND.KEY" into name[], and the KEY. */
static const char *split_key(const char *key, char *name, size_t cap) {
  const char *dot = key ? strchr(key, '.') : NULL;
  if (dot == NULL || dot == key || dot[1] == '\0' || (size_t)(dot - key) >= cap)
    return NULL;
  memcpy(name, key, (size_t)(dot - key));
  name[dot - key] = '\0';
  return dot + 1;
}

wt_status *wt_engine_options_for(const char *backend,
                                 const wt_backend_option *opts, size_t n,
                                 wt_backend_option **out, size_t *nout) {
  *out = NULL;
  *nout = 0;
  size_t len = strlen(backend), count = 0;
  for (size_t i = 0; i < n; i++)
    count += strncmp(opts[i].key, backend, len) == 0 && opts[i].key[len] == '.';
  if (count == 0) return NULL;
  wt_backend_option *mine = calloc(count, sizeof(*mine));
  if (mine == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "backend '%s': out of memory for its options",
                         backend);
  for (size_t i = 0; i < n; i++)
    if (strncmp(opts[i].key, backend, len) == 0 && opts[i].key[len] == '.')
      mine[(*nout)++] =
          (wt_backend_option){opts[i].key + len + 1, opts[i].value};
  *out = mine;
  return NULL;
}

wt_status *wt_engine_options_check(wt_registry *reg,
                                   const wt_backend_option *opts, size_t n) {
  wt_status *st = NULL;
  wt_backend_option *mine = NULL;
  for (size_t i = 0; i < n && st == NULL; i++) {
    char name[64];
    const wt_engine_ops *ops = NULL;
    if (split_key(opts[i].key, name, sizeof(name)) == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "engine option '%.64s': not BACKEND.KEY (e.g. ucx.transports)",
              opts[i].key ? opts[i].key : "");
    /* Each backend once, at its first option. */
    bool seen = false;
    for (size_t j = 0; j < i && !seen; j++) {
      char other[64];
      seen = split_key(opts[j].key, other, sizeof(other)) != NULL &&
             strcmp(other, name) == 0;
    }
    if (seen) continue;
    WT_CHECK(wt_status_prefix(wt_engine_lookup(reg, name, &ops),
                              "engine option '%s'", opts[i].key));
    size_t nmine = 0;
    WT_CHECK(wt_engine_options_for(name, opts, n, &mine, &nmine));
    if (ops->check_options != NULL) {
      st = ops->check_options(mine, nmine);
    } else {
      static const char *const none[] = {NULL};
      st = wt_option_unknown(name, &mine[0], none);
    }
    if (st != NULL)
      st = wt_status_prefix(st, "engine option '%s'", opts[i].key);
    free(mine);
    mine = NULL;
  }
out:
  free(mine);
  return st;
}
