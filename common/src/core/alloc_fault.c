/* alloc_fault.c: the counter behind alloc_fault.h (WT_ALLOC_FAULTS builds
 * only). */
#ifndef WT_ALLOC_FAULT_IMPL
#define WT_ALLOC_FAULT_IMPL
#endif
#include "alloc_fault.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include "wt/lock.h"

static atomic_uint_fast64_t g_count;
static atomic_uint_fast64_t g_fail_at; /* 0: never */
static atomic_bool g_fired;

void wt_fault_alloc_arm(uint64_t n) {
  atomic_store(&g_fail_at, 0);
  atomic_store(&g_count, 0);
  atomic_store(&g_fired, false);
  atomic_store(&g_fail_at, n);
}

uint64_t wt_fault_alloc_count(void) {
  return atomic_load(&g_count);
}

bool wt_fault_alloc_fired(void) {
  return atomic_load(&g_fired);
}

/* The call sites seen: open addressing over (file, line). */
#define SITES 8192
typedef struct site {
  const char *file;
  int line;
} site;
static site g_sites[SITES];
static size_t g_nsites;
static wt_mutex g_sites_mu =
    WT_MUTEX_INITIALIZER(WT_LOCK_ALLOC_FAULT, "alloc_fault.sites");

static void note_site(const char *file, int line) {
  size_t h = ((uintptr_t)file * 31u + (size_t)line) % SITES;
  wt_mutex_lock(&g_sites_mu);
  for (size_t k = 0; k < SITES; k++) {
    site *s = &g_sites[(h + k) % SITES];
    if (s->file == file && s->line == line) break;
    if (s->file == NULL) {
      s->file = file;
      s->line = line;
      g_nsites++;
      break;
    }
  }
  wt_mutex_unlock(&g_sites_mu);
}

size_t wt_fault_alloc_sites(const char *files_like) {
  size_t n = 0;
  wt_mutex_lock(&g_sites_mu);
  for (size_t k = 0; k < SITES; k++)
    if (g_sites[k].file != NULL &&
        (files_like == NULL || strstr(g_sites[k].file, files_like) != NULL))
      n++;
  wt_mutex_unlock(&g_sites_mu);
  return n;
}

/* Counts one allocation at file:line; true when it is the one to fail. */
static bool fail_now(const char *file, int line) {
  note_site(file, line);
  uint64_t k = atomic_fetch_add(&g_count, 1) + 1;
  uint64_t at = atomic_load(&g_fail_at);
  if (at == 0 || k != at) return false;
  atomic_store(&g_fired, true);
  errno = ENOMEM;
  return true;
}

void *wt_fault_malloc(size_t n, const char *file, int line) {
  return fail_now(file, line) ? NULL : malloc(n);
}

void *wt_fault_calloc(size_t n, size_t size, const char *file, int line) {
  return fail_now(file, line) ? NULL : calloc(n, size);
}

void *wt_fault_realloc(void *p, size_t n, const char *file, int line) {
  return fail_now(file, line) ? NULL : realloc(p, n);
}

char *wt_fault_strdup(const char *s, const char *file, int line) {
  return fail_now(file, line) ? NULL : strdup(s);
}

char *wt_fault_strndup(const char *s, size_t n, const char *file, int line) {
  return fail_now(file, line) ? NULL : strndup(s, n);
}

int wt_fault_vasprintf(const char *file, int line, char **out, const char *fmt,
                       va_list ap) {
  if (fail_now(file, line)) {
    *out = NULL;
    return -1;
  }
  return vasprintf(out, fmt, ap);
}

int wt_fault_asprintf(const char *file, int line, char **out, const char *fmt,
                      ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = wt_fault_vasprintf(file, line, out, fmt, ap);
  va_end(ap);
  return rc;
}
