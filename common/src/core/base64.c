/* base64.c: wt/base64.h. */

#include "wt/base64.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static const char B64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void wt_base64_encode(const unsigned char *in, size_t n, char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16;
    if (i + 1 < n) v |= (uint32_t)in[i + 1] << 8;
    if (i + 2 < n) v |= in[i + 2];
    out[o++] = B64[(v >> 18) & 63];
    out[o++] = B64[(v >> 12) & 63];
    out[o++] = i + 1 < n ? B64[(v >> 6) & 63] : '=';
    out[o++] = i + 2 < n ? B64[v & 63] : '=';
  }
  out[o] = '\0';
}

static int b64_value(char c) {
  const char *p = c ? strchr(B64, c) : NULL;
  return p ? (int)(p - B64) : -1;
}

wt_status *wt_base64_decode(const char *in, unsigned char *out, size_t cap,
                            size_t *n, const char *what) {
  size_t len = strlen(in), o = 0;
  *n = 0;
  if (len % 4 != 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: %zu characters is not standard base64 (a "
                         "multiple of 4, padded with '=')",
                         what, len);
  for (size_t i = 0; i < len; i += 4) {
    int v[4];
    bool last = i + 4 == len;
    for (int k = 0; k < 4; k++) {
      v[k] = b64_value(in[i + (size_t)k]);
      bool pad = in[i + (size_t)k] == '=' && last && k >= 2 &&
                 (k == 3 || in[i + 3] == '=');
      if (v[k] < 0 && !pad)
        return wt_status_new(WT_INVALID_ARGUMENT,
                             "%s: character %zu ('%c') is not standard "
                             "base64 (URL-safe base64 is not accepted)",
                             what, i + (size_t)k,
                             in[i + (size_t)k] >= 32 && in[i + (size_t)k] < 127
                                 ? in[i + (size_t)k]
                                 : '?');
      if (pad) v[k] = -1;
    }
    size_t bytes = v[2] < 0 ? 1 : v[3] < 0 ? 2 : 3;
    if (o + bytes > cap)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "%s: decodes to more than %zu bytes", what, cap);
    uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 |
                 (uint32_t)(v[2] < 0 ? 0 : v[2]) << 6 |
                 (uint32_t)(v[3] < 0 ? 0 : v[3]);
    out[o++] = (unsigned char)(x >> 16);
    if (bytes > 1) out[o++] = (unsigned char)(x >> 8);
    if (bytes > 2) out[o++] = (unsigned char)x;
  }
  *n = o;
  return NULL;
}
