/* nccl_seam.c: the loader of the NCCL module and the choice of the
 * process's NCCL (wt/nccl_seam.h). */

#include "wt/nccl_seam.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/log.h"
#include "wt/lock.h"
#include "core/module.h"

/* --- the module ----------------------------------------------------------- */

#ifdef WT_WITH_NCCL
#define NOT_BUILT NULL
#else
#define NOT_BUILT                                                           \
  "this build of wt has no NCCL support (configured with WT_WITH_NCCL=OFF " \
  "or without NCCL)"
#endif

static wt_module module =
    WT_MODULE_INIT("NCCL", "libwt_nccl.so", "wt_nccl_module_api",
                   WT_NCCL_API_VERSION, NOT_BUILT);

static void load(void) {
  wt_module_load(&module);
}

wt_status *wt_nccl_api_get(const wt_nccl_api **out) {
  const void *t = NULL;
  wt_status *st = wt_module_get(&module, load, &t);
  *out = t;
  return st;
}

void wt_nccl_api_override(const wt_nccl_api *api) {
  wt_module_override(&module, api);
}

/* --- choosing the NCCL ------------------------------------------------------
 */

static wt_mutex select_mu =
    WT_MUTEX_INITIALIZER(WT_LOCK_NCCL_SELECT, "nccl_seam.select_mu");
static char selected[1024]; /* the library wt_nccl_select loaded first */
static int selected_code;

wt_status *wt_nccl_version_parse(const char *text, int *code) {
  unsigned major = 0, minor = 0, patch = 0;
  char extra = 0;
  if (text == NULL ||
      sscanf(text, "%u.%u.%u%c", &major, &minor, &patch, &extra) != 3 ||
      major > 9 || minor > 99 || patch > 99)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "nccl_version '%s': not MAJOR.MINOR.PATCH (2.27.3)",
                         text ? text : "");
  /* ncclGetVersion's code since 2.9: major * 10000 + minor * 100 + patch. */
  *code = (int)(major * 10000 + minor * 100 + patch);
  return NULL;
}

static void version_text(int code, char out[16]) {
  snprintf(out, 16, "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
}

wt_status *wt_nccl_select(const char *library, const char *expect_version) {
  wt_status *st = NULL;
  int want = 0;
  if (expect_version && *expect_version &&
      (st = wt_nccl_version_parse(expect_version, &want)) != NULL)
    return st;
  wt_mutex_lock(&select_mu);
  if (library && *library) {
    if (selected[0] != '\0' && strcmp(selected, library) != 0) {
      st = wt_status_new(WT_FAILED_PRECONDITION,
                         "nccl_library %s: this process loaded %s already; one "
                         "NCCL per process",
                         library, selected);
    } else if (selected[0] == '\0') {
      /* Loaded global before the module, so that the module's libnccl.so.2
       * is this one (the dynamic loader matches it by its soname). */
      void *h = dlopen(library, RTLD_NOW | RTLD_GLOBAL);
      int (*get)(int *) = h ? (int (*)(int *))dlsym(h, "ncclGetVersion") : NULL;
      int code = 0;
      if (h == NULL)
        st = wt_status_new(WT_FAILED_PRECONDITION, "nccl_library %s: %s",
                           library, dlerror());
      else if (get == NULL || get(&code) != 0)
        st = wt_status_new(WT_FAILED_PRECONDITION,
                           "nccl_library %s: no ncclGetVersion there: not NCCL",
                           library);
      if (st == NULL) {
        snprintf(selected, sizeof(selected), "%s", library);
        selected_code = code;
      }
    }
  }
  wt_mutex_unlock(&select_mu);
  if (st != NULL || want == 0) return st;
  const wt_nccl_api *api = NULL;
  if ((st = wt_nccl_api_get(&api)) != NULL) return st;
  int have = api->version_code();
  if (have != want) {
    char h[16], w[16];
    version_text(have, h);
    version_text(want, w);
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "NCCL %s is loaded here (%s), the peers run %s "
                         "(nccl_version): NCCL refuses a peer of another "
                         "version; load theirs (nccl_library)",
                         h, selected[0] ? selected : api->name, w);
  }
  return NULL;
}
