/* registry.c: backends by name, direct or lazily dlopen'ed (see
 * wt/registry.h). */

#include "wt/registry.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/log.h"
#include "wt/lock.h"
#include "core/module.h"

typedef struct entry {
  char *name;
  const void *ops; /* NULL for a lazy entry not loaded yet */
  char *shared_object;
  char *symbol;
  void *handle; /* dlopen handle of a loaded lazy entry */
} entry;

struct wt_registry {
  char *kind;
  uint32_t abi_version;
  wt_mutex mu;
  entry *entries; /* sorted by name, so listings and messages are stable */
  size_t n, cap;
};

wt_status *wt_registry_new(const char *kind, uint32_t abi_version,
                           wt_registry **out) {
  wt_status *st = NULL;
  wt_registry *reg = NULL;
  if (out == NULL) WT_FAIL(WT_INVALID_ARGUMENT, "registry: 'out' is NULL");
  *out = NULL;
  if (kind == NULL || *kind == '\0')
    WT_FAIL(WT_INVALID_ARGUMENT, "registry: 'kind' is empty");
  reg = calloc(1, sizeof(*reg));
  if (reg == NULL || (reg->kind = strdup(kind)) == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s registry: out of memory", kind);
  reg->abi_version = abi_version;
  wt_mutex_init(&reg->mu, WT_LOCK_REGISTRY, 0, "registry.mu");
  *out = reg;
  reg = NULL;
out:
  if (reg != NULL) {
    free(reg->kind);
    free(reg);
  }
  return st;
}

void wt_registry_destroy(wt_registry *reg) {
  if (reg == NULL) return;
  for (size_t i = 0; i < reg->n; i++) {
    entry *e = &reg->entries[i];
    if (e->handle != NULL && dlclose(e->handle) != 0)
      WT_LOGW("registry", "%s backend '%s': dlclose(%s): %s", reg->kind,
              e->name, e->shared_object, dlerror());
    free(e->name);
    free(e->shared_object);
    free(e->symbol);
  }
  free(reg->entries);
  wt_mutex_destroy(&reg->mu);
  free(reg->kind);
  free(reg);
}

const char *wt_registry_kind(const wt_registry *reg) {
  return reg ? reg->kind : NULL;
}

/* Index of `name`, or -1; *pos is where it would be inserted. */
static long find_locked(const wt_registry *reg, const char *name, size_t *pos) {
  size_t i = 0;
  for (; i < reg->n; i++) {
    int c = strcmp(reg->entries[i].name, name);
    if (c == 0) return (long)i;
    if (c > 0) break;
  }
  if (pos != NULL) *pos = i;
  return -1;
}

/* Checks a table's header against the registry; `from` says where the table
 * came from, for the message ("" for a direct registration). */
static wt_status *check_header(const wt_registry *reg, const char *name,
                               const void *ops, const char *from) {
  const wt_ops_header *h = ops;
  if (h->abi_version != reg->abi_version)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "%s backend '%s'%s: ops table has ABI version %u, "
                         "this build expects %u",
                         reg->kind, name, from, (unsigned)h->abi_version,
                         (unsigned)reg->abi_version);
  if (h->name == NULL || strcmp(h->name, name) != 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s backend '%s'%s: ops table names itself '%s'",
                         reg->kind, name, from, h->name ? h->name : "(null)");
  return NULL;
}

/* Inserts a new entry at its sorted place; takes ownership of the strings
 * in `e` on success only. */
static wt_status *insert_locked(wt_registry *reg, const entry *e) {
  size_t pos = 0;
  if (find_locked(reg, e->name, &pos) >= 0)
    return wt_status_new(WT_ALREADY_EXISTS,
                         "%s backend '%s' is already registered", reg->kind,
                         e->name);
  if (reg->n == reg->cap) {
    size_t cap = reg->cap ? reg->cap * 2 : 8;
    entry *grown = realloc(reg->entries, cap * sizeof(*grown));
    if (grown == NULL)
      return wt_status_new(WT_RESOURCE_EXHAUSTED,
                           "%s backend '%s': out of memory", reg->kind,
                           e->name);
    reg->entries = grown;
    reg->cap = cap;
  }
  memmove(&reg->entries[pos + 1], &reg->entries[pos],
          (reg->n - pos) * sizeof(*reg->entries));
  reg->entries[pos] = *e;
  reg->n++;
  return NULL;
}

static wt_status *check_name(const wt_registry *reg, const char *name) {
  if (reg == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "registry: 'reg' is NULL");
  if (name == NULL || *name == '\0')
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s registry: backend name is empty", reg->kind);
  return NULL;
}

wt_status *wt_registry_register_tables(wt_registry *reg,
                                       const void *const *tables, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const wt_ops_header *h = tables[i];
    wt_status *st = wt_registry_register(reg, h->name, h);
    if (st != NULL) return st;
  }
  return NULL;
}

wt_status *wt_registry_register(wt_registry *reg, const char *name,
                                const void *ops) {
  wt_status *st = check_name(reg, name);
  if (st != NULL) return st;
  if (ops == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s backend '%s': ops table is NULL", reg->kind, name);
  st = check_header(reg, name, ops, "");
  if (st != NULL) return st;
  entry e = {.name = strdup(name), .ops = ops};
  if (e.name == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "%s backend '%s': out of memory", reg->kind, name);
  wt_mutex_lock(&reg->mu);
  st = insert_locked(reg, &e);
  wt_mutex_unlock(&reg->mu);
  if (st != NULL) {
    free(e.name);
    return st;
  }
  WT_LOGD("registry", "%s backend '%s' registered", reg->kind, name);
  return NULL;
}

wt_status *wt_registry_register_lazy(wt_registry *reg, const char *name,
                                     const char *shared_object,
                                     const char *symbol) {
  wt_status *st = check_name(reg, name);
  if (st != NULL) return st;
  if (shared_object == NULL || *shared_object == '\0')
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s backend '%s': shared object path is empty",
                         reg->kind, name);
  if (symbol == NULL || *symbol == '\0')
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s backend '%s': symbol name is empty", reg->kind,
                         name);
  entry e = {.name = strdup(name),
             .shared_object = strdup(shared_object),
             .symbol = strdup(symbol)};
  if (e.name == NULL || e.shared_object == NULL || e.symbol == NULL) {
    st = wt_status_new(WT_RESOURCE_EXHAUSTED, "%s backend '%s': out of memory",
                       reg->kind, name);
  } else {
    wt_mutex_lock(&reg->mu);
    st = insert_locked(reg, &e);
    wt_mutex_unlock(&reg->mu);
  }
  if (st != NULL) {
    free(e.name);
    free(e.shared_object);
    free(e.symbol);
    return st;
  }
  WT_LOGD("registry", "%s backend '%s' registered lazily (%s, %s)", reg->kind,
          name, shared_object, symbol);
  return NULL;
}

/* Loads a lazy entry. Called with the lock held, so that concurrent first
 * lookups load the object once; a plugin's constructors must therefore not
 * call back into this registry. */
static wt_status *load_locked(wt_registry *reg, entry *e) {
  wt_status *st = NULL;
  char *from = NULL;
  void *handle = NULL, *sym = NULL;
  char what[160];
  snprintf(what, sizeof(what), "%s backend '%s'", reg->kind, e->name);
  WT_CHECK(wt_module_open(what, e->shared_object, e->symbol, &handle, &sym));
  const void *ops = sym;
  if (asprintf(&from, " (symbol '%s' in %s)", e->symbol, e->shared_object) <
      0) {
    from = NULL;
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s backend '%s': out of memory", reg->kind,
            e->name);
  }
  WT_CHECK(check_header(reg, e->name, ops, from));
  e->handle = handle;
  e->ops = ops;
  handle = NULL;
  WT_LOGI("registry", "%s backend '%s' loaded from %s", reg->kind, e->name,
          e->shared_object);
out:
  free(from);
  if (handle != NULL) dlclose(handle);
  return st;
}

/* "a, b, c" for the registry's names; NULL if out of memory. */
static char *join_locked(const wt_registry *reg) {
  size_t len = 1;
  for (size_t i = 0; i < reg->n; i++) len += strlen(reg->entries[i].name) + 2;
  char *s = malloc(len);
  if (s == NULL) return NULL;
  char *p = s;
  for (size_t i = 0; i < reg->n; i++) {
    if (i > 0) {
      memcpy(p, ", ", 2);
      p += 2;
    }
    size_t k = strlen(reg->entries[i].name);
    memcpy(p, reg->entries[i].name, k);
    p += k;
  }
  *p = '\0';
  return s;
}

wt_status *wt_registry_lookup(wt_registry *reg, const char *name,
                              const void **ops) {
  wt_status *st = check_name(reg, name);
  if (st != NULL) return st;
  if (ops == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "%s registry: 'ops' is NULL",
                         reg->kind);
  *ops = NULL;
  wt_mutex_lock(&reg->mu);
  long i = find_locked(reg, name, NULL);
  if (i < 0) {
    char *names = join_locked(reg);
    st = wt_status_new(WT_NOT_FOUND, "unknown %s backend '%s'; registered: %s",
                       reg->kind, name,
                       names == NULL ? "(out of memory)"
                       : *names      ? names
                                     : "(none)");
    free(names);
    goto out;
  }
  entry *e = &reg->entries[i];
  if (e->ops == NULL) WT_CHECK(load_locked(reg, e));
  *ops = e->ops;
out:
  wt_mutex_unlock(&reg->mu);
  return st;
}

wt_status *wt_registry_names(wt_registry *reg, wt_registry_entry **entries,
                             size_t *n) {
  if (reg == NULL || entries == NULL || n == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "registry names: NULL argument");
  wt_status *st = NULL;
  *entries = NULL;
  *n = 0;
  wt_mutex_lock(&reg->mu);
  if (reg->n > 0) {
    wt_registry_entry *list = calloc(reg->n, sizeof(*list));
    if (list == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s registry: out of memory", reg->kind);
    for (size_t i = 0; i < reg->n; i++) {
      const entry *e = &reg->entries[i];
      list[i] = (wt_registry_entry){
          .name = e->name,
          .lazy = e->symbol != NULL,
          .loaded = e->ops != NULL,
          .shared_object = e->shared_object,
          .symbol = e->symbol,
      };
    }
    *entries = list;
    *n = reg->n;
  }
out:
  wt_mutex_unlock(&reg->mu);
  return st;
}

wt_status *wt_registry_names_joined(wt_registry *reg, char **out) {
  if (reg == NULL || out == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "registry names: NULL argument");
  wt_mutex_lock(&reg->mu);
  *out = join_locked(reg);
  wt_mutex_unlock(&reg->mu);
  if (*out == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "%s registry: out of memory",
                         reg->kind);
  return NULL;
}

void wt_registry_once_build(wt_registry_once *g) {
  wt_status *st = NULL;
  wt_registry *reg = NULL;
  WT_CHECK(wt_registry_new(g->kind, g->abi_version, &reg));
  if (g->fill != NULL) WT_CHECK(g->fill(reg));
  g->reg = reg;
  reg = NULL;
out:
  wt_registry_destroy(reg);
  g->error = st;
}

wt_status *wt_registry_once_get(wt_registry_once *g, void (*build)(void),
                                wt_registry **out) {
  pthread_once(&g->once, build);
  *out = g->reg;
  return g->error != NULL ? wt_status_copy(g->error) : NULL;
}
