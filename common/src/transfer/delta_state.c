/* delta_state.c: the trainer engines' delta state (wt/delta_state.h). */

#include "wt/delta_state.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

wt_status *wt_delta_state_init(wt_delta_state *d, const char *mode,
                               const char *field) {
  memset(d, 0, sizeof(*d));
  const char *m = mode ? mode : "";
  if (*m == '\0' || strcmp(m, "off") == 0)
    d->mode = WT_DELTA_OFF;
  else if (strcmp(m, "on") == 0)
    d->mode = WT_DELTA_ON;
  else if (strcmp(m, "auto") == 0)
    d->mode = WT_DELTA_AUTO;
  else
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: '%.40s' is not on, off or auto", field, m);
  if (d->mode == WT_DELTA_OFF) return NULL;
  wt_status *st = wt_delta_hasher_new(&d->hash);
  if (st != NULL) return st;
  d->codec = wt_delta_codec_new();
  if (d->codec == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "%s: out of memory for the delta codec", field);
  return NULL;
}

void wt_delta_state_clear(wt_delta_state *d) {
  free(d->base);
  wt_delta_hasher_free(d->hash);
  wt_delta_codec_free(d->codec);
  memset(d, 0, sizeof(*d));
}

wt_status *wt_delta_option_set(const char *value, char **field) {
  const char *v = value ? value : "";
  if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0 && strcmp(v, "auto") != 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "option delta: '%s' is not on, off or auto", v);
  char *copy = strdup(v);
  if (copy == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
  if (*field != NULL && *field != (char *)protobuf_c_empty_string) free(*field);
  *field = copy;
  return NULL;
}

uint64_t wt_delta_layout_digest(const wt_tensor_meta *metas, size_t n) {
  wt_delta_hasher *h = NULL;
  wt_status *st = wt_delta_hasher_new(&h);
  if (st != NULL) {
    wt_status_free(st);
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    wt_delta_hasher_update(h, metas[i].name, strlen(metas[i].name) + 1);
    int32_t dt = (int32_t)metas[i].dtype;
    wt_delta_hasher_update(h, &dt, sizeof(dt));
    wt_delta_hasher_update(h, &metas[i].nbytes, sizeof(metas[i].nbytes));
  }
  uint64_t dg = wt_delta_hasher_digest(h);
  wt_delta_hasher_free(h);
  return dg;
}

wt_status *wt_delta_state_reserve(wt_delta_state *d, uint64_t total,
                                  const char *who) {
  if (d->base != NULL && d->base_bytes == total) return NULL;
  free(d->base);
  d->base = malloc(total ? (size_t)total : 1);
  d->base_bytes = d->base ? total : 0;
  d->base_digest = 0;
  if (d->base == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "%s: out of memory for the delta base (%" PRIu64
                         " bytes, the model's size; delta=off needs none)",
                         who, total);
  return NULL;
}

void wt_delta_measured(wt_delta_state *d, bool delta, double ns_per_byte) {
  if (d->rounds++ == 0) return;
  if (delta)
    d->delta_ns = ns_per_byte;
  else
    d->full_ns = ns_per_byte;
}

void wt_delta_plan_round(wt_delta_state *d, bool usable, bool *try_delta,
                         bool *keep) {
  if (d->mode == WT_DELTA_ON) {
    *try_delta = usable;
    *keep = true;
    return;
  }
  bool delta_wins =
      d->delta_ns <= 0 || (d->full_ns > 0 && d->delta_ns < d->full_ns);
  bool probe = ++d->since_probe >= WT_DELTA_PROBE_ROUNDS;
  if (probe) d->since_probe = 0;
  *try_delta = usable && (delta_wins != probe);
  *keep = delta_wins || d->since_probe + 1 >= WT_DELTA_PROBE_ROUNDS;
}
