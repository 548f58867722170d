/* export_info.c: wt-ctl export-info [--export] PATH [--worker W], what a
 * consumer of wt-server's export (docs/export.md) sees: it acquires the
 * newest version through libwt_consumer (wt/consumer.h), prints the
 * manifest and where its regions were mapped, and releases the lease. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool_format.h"
#include "wt/consumer.h"

/* A server's string as printed: a copy without control bytes. */
static const char *shown(const char *s, char *buf, size_t len) {
  snprintf(buf, len, "%s", s ? s : "");
  return wt_tool_printable(buf);
}

int wt_ctl_export_info(const char *path, uint32_t worker) {
  wt_consumer *c = NULL;
  wt_status *st = wt_consumer_connect(path, NULL, &c);
  if (st != NULL) {
    fprintf(stderr, "wt-ctl: export-info: cannot connect: %s\n",
            wt_status_message(st));
    wt_status_free(st);
    return 1;
  }
  wt_acquire_options ao = {.worker = worker};
  wt_consumer_version *v = NULL;
  st = wt_consumer_acquire(c, &ao, &v);
  if (st != NULL) {
    fprintf(stderr, "wt-ctl: export-info: %s (%s)\n", wt_status_message(st),
            wt_code_name(wt_status_code(st)));
    wt_status_free(st);
    wt_consumer_close(c);
    return 1;
  }
  char b[32];
  uint64_t total = 0;
  size_t on_device = 0;
  for (size_t i = 0; i < v->n_tensors; i++) {
    total += v->tensors[i].nbytes;
    on_device += v->tensors[i].on_device;
  }
  uint64_t mapped = 0;
  size_t held = 0;
  wt_consumer_region_counts(c, &mapped, &held);
  printf("export:       %s\n", path);
  char s1[4200], s2[256];
  printf("version:      %s (sequence %" PRIu64 ")\n",
         shown(v->version, s1, sizeof(s1)), v->sequence);
  printf("worker:       %" PRIu32 " on %s\n", v->worker,
         shown(v->device, s2, sizeof(s2)));
  printf("tensors:      %zu, %s, %s\n", v->n_tensors,
         wt_tool_human_bytes(total, b, sizeof(b)),
         on_device ? "device memory (CUDA IPC)" : "host memory (read-only)");
  printf("regions:      %zu mapped\n", held);
  for (size_t i = 0; i < v->n_tensors && i < 3; i++)
    printf("  %s %s, %" PRIu64 " bytes\n",
           shown(v->tensors[i].name, s1, sizeof(s1)),
           shown(v->tensors[i].dtype, s2, sizeof(s2)), v->tensors[i].nbytes);
  if (v->n_tensors > 3) printf("  ... %zu more\n", v->n_tensors - 3);
  st = wt_consumer_release(c, v);
  printf("lease:        %s\n",
         st == NULL ? "released" : "NOT released (closing the socket ends it)");
  int rc = st == NULL ? 0 : 1;
  if (st != NULL) {
    fprintf(stderr, "wt-ctl: export-info: %s\n", wt_status_message(st));
    wt_status_free(st);
  }
  wt_consumer_close(c);
  return rc;
}
