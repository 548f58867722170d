/* module.c: the one loader of optional modules and lazy backends (see
 * module.h). */

#include "module.h"

#include <dlfcn.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wt/log.h"

wt_status *wt_module_open(const char *what, const char *path,
                          const char *symbol, void **handle, void **sym) {
  *handle = NULL;
  *sym = NULL;
  dlerror(); /* a stale error must not be read as ours */
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *why = dlerror();
    /* dlerror starts with the path itself: say it once. */
    size_t n = strlen(path);
    if (why != NULL && strncmp(why, path, n) == 0 &&
        strncmp(why + n, ": ", 2) == 0)
      why += n + 2;
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "%s: cannot load shared object '%s' (for symbol "
                         "'%s'): %s",
                         what, path, symbol, why ? why : "(no reason given)");
  }
  dlerror();
  void *s = dlsym(h, symbol);
  if (s == NULL) {
    const char *why = dlerror();
    /* Made before dlclose, which may reuse dlerror's buffer. */
    wt_status *st = wt_status_new(
        WT_FAILED_PRECONDITION, "%s: shared object '%s' has no symbol '%s': %s",
        what, path, symbol, why ? why : "symbol is NULL");
    dlclose(h);
    return st;
  }
  *handle = h;
  *sym = s;
  return NULL;
}

/* The module's file beside the shared object that holds this function
 * (libwt_common, in the build tree and installed alike). */
static char *beside_common(const char *file) {
  Dl_info info;
  char *path = NULL;
  if (dladdr((void *)&wt_module_open, &info) != 0 && info.dli_fname) {
    char *copy = strdup(info.dli_fname);
    char *dir = copy ? realpath(dirname(copy), NULL) : NULL;
    if (dir != NULL && asprintf(&path, "%s/%s", dir, file) < 0) path = NULL;
    free(dir);
    free(copy);
    return path;
  }
  return strdup(file);
}

typedef const void *(*table_fn)(void);

void wt_module_load(wt_module *m) {
  if (m->not_built != NULL) {
    m->error = wt_status_new(WT_FAILED_PRECONDITION, "%s is unavailable: %s",
                             m->what, m->not_built);
    return;
  }
  char *path = beside_common(m->file);
  if (path == NULL) {
    m->error =
        wt_status_new(WT_RESOURCE_EXHAUSTED, "%s: out of memory", m->what);
    return;
  }
  if (access(path, F_OK) != 0) {
    m->error = wt_status_new(WT_FAILED_PRECONDITION,
                             "%s is unavailable: %s was not built (no %s)",
                             m->what, m->file, path);
    free(path);
    return;
  }
  void *h = NULL, *sym = NULL;
  char what[64];
  snprintf(what, sizeof(what), "%s is unavailable", m->what);
  wt_status *st = wt_module_open(what, path, m->symbol, &h, &sym);
  if (st != NULL) {
    m->error = st;
    free(path);
    return;
  }
  const void *table = ((table_fn)sym)();
  if (table == NULL || *(const uint32_t *)table != m->version) {
    m->error = wt_status_new(
        WT_FAILED_PRECONDITION, "%s is unavailable: %s: %s", m->what, path,
        table == NULL ? "its table is NULL"
                      : "its table is of another version (a stale module)");
    dlclose(h);
    free(path);
    return;
  }
  WT_LOGD("module", "loaded %s", path);
  free(path);
  m->table = table; /* kept loaded for the life of the process */
}

wt_status *wt_module_get(wt_module *m, void (*load)(void), const void **table) {
  const void *o = atomic_load(&m->override);
  if (o != NULL) {
    *table = o;
    return NULL;
  }
  pthread_once(&m->once, load);
  *table = m->table;
  return m->table == NULL ? wt_status_copy(m->error) : NULL;
}

void wt_module_override(wt_module *m, const void *table) {
  atomic_store(&m->override, table);
}
