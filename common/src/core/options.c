/* options.c: backend settings from text (see wt/options.h). */

#include "wt/options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/parse.h"

wt_status *wt_option_size(const wt_backend_option *o, uint64_t *out) {
  if (!wt_parse_size(o->value, out))
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "option %s: '%.64s' is not a size (e.g. 4096, 1M, "
                         "64MiB)",
                         o->key, o->value ? o->value : "");
  return NULL;
}

wt_status *wt_option_u32(const wt_backend_option *o, uint32_t *out) {
  uint64_t v = 0;
  if (!wt_parse_u64(o->value, &v) || v > UINT32_MAX)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "option %s: '%.64s' is not a number from 0 to %u",
                         o->key, o->value ? o->value : "", UINT32_MAX);
  *out = (uint32_t)v;
  return NULL;
}

wt_status *wt_option_bool(const wt_backend_option *o, bool *out) {
  const char *v = o->value ? o->value : "";
  if (strcmp(v, "1") == 0 || strcmp(v, "true") == 0)
    *out = true;
  else if (strcmp(v, "0") == 0 || strcmp(v, "false") == 0)
    *out = false;
  else
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "option %s: '%.64s' is not 1, 0, true or false",
                         o->key, v);
  return NULL;
}

wt_status *wt_option_packing(const char *backend, const wt_backend_option *o,
                             protobuf_c_boolean *packed,
                             Wt__V1__UInt64Value **buffer_size,
                             Wt__V1__UInt32Value **num_buffers) {
  static const char *const known[] = {"packed", "bucket_size", "num_buffers",
                                      NULL};
  if (strcmp(o->key, "packed") == 0) {
    bool v = false;
    wt_status *st = wt_option_bool(o, &v);
    if (st == NULL) *packed = v;
    return st;
  }
  if (strcmp(o->key, "bucket_size") == 0)
    return wt_option_size_field(o, buffer_size);
  if (strcmp(o->key, "num_buffers") == 0)
    return wt_option_u32_field(o, num_buffers);
  return wt_option_unknown(backend, o, known);
}

wt_status *wt_option_size_field(const wt_backend_option *o,
                                Wt__V1__UInt64Value **slot) {
  uint64_t v = 0;
  wt_status *st = wt_option_size(o, &v);
  if (st != NULL) return st;
  if (*slot == NULL && (*slot = malloc(sizeof(**slot))) == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "option %s: out of memory",
                         o->key);
  wt__v1__uint64_value__init(*slot);
  (*slot)->value = v;
  return NULL;
}

wt_status *wt_option_u32_field(const wt_backend_option *o,
                               Wt__V1__UInt32Value **slot) {
  uint32_t v = 0;
  wt_status *st = wt_option_u32(o, &v);
  if (st != NULL) return st;
  if (*slot == NULL && (*slot = malloc(sizeof(**slot))) == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "option %s: out of memory",
                         o->key);
  wt__v1__uint32_value__init(*slot);
  (*slot)->value = v;
  return NULL;
}

wt_status *wt_option_unknown(const char *backend, const wt_backend_option *o,
                             const char *const *known) {
  char list[512] = "";
  size_t used = 0;
  for (size_t i = 0; known[i] != NULL; i++) {
    int w = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "",
                     known[i]);
    if (w < 0 || (size_t)w >= sizeof(list) - used) break;
    used += (size_t)w;
  }
  return wt_status_new(WT_INVALID_ARGUMENT,
                       "backend '%s' has no option '%.64s' (its options: %s)",
                       backend, o->key ? o->key : "", used ? list : "none");
}
