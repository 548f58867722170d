/* frame.c: see wt/frame.h. The buffer grows to the announced frame only
 * once its header is in and checked against the limit. */

#include "wt/frame.h"

#include <stdlib.h>
#include <string.h>

void wt_frame_reader_init(wt_frame_reader *r, size_t max_frame,
                          const char *peer) {
  memset(r, 0, sizeof(*r));
  r->max = max_frame ? max_frame : 1;
  r->peer = peer;
}

void wt_frame_reader_free(wt_frame_reader *r) {
  free(r->buf);
  memset(r, 0, sizeof(*r));
}

static uint32_t body_len(const wt_frame_reader *r) {
  return (uint32_t)r->buf[0] | (uint32_t)r->buf[1] << 8 |
         (uint32_t)r->buf[2] << 16 | (uint32_t)r->buf[3] << 24;
}

/* The whole frame is held. */
static bool complete(const wt_frame_reader *r) {
  return r->len >= WT_FRAME_HEADER_BYTES &&
         r->len == WT_FRAME_HEADER_BYTES + (size_t)body_len(r);
}

size_t wt_frame_reader_want(const wt_frame_reader *r) {
  if (r->len < WT_FRAME_HEADER_BYTES) return WT_FRAME_HEADER_BYTES - r->len;
  if (complete(r)) return WT_FRAME_HEADER_BYTES; /* the next header */
  return WT_FRAME_HEADER_BYTES + (size_t)body_len(r) - r->len;
}

wt_status *wt_frame_reader_feed(wt_frame_reader *r, const void *data,
                                size_t n) {
  if (complete(r)) r->len = 0; /* the frame taken is done with */
  if (n > wt_frame_reader_want(r))
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "frame reader: %zu bytes fed, %zu wanted", n,
                         wt_frame_reader_want(r));
  if (r->buf == NULL && (r->buf = malloc(WT_FRAME_HEADER_BYTES)) == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "frame reader: out of memory");
  if (r->len < WT_FRAME_HEADER_BYTES) {
    memcpy(r->buf + r->len, data, n);
    r->len += n;
    if (r->len < WT_FRAME_HEADER_BYTES) return NULL;
    uint32_t len = body_len(r);
    if (len == 0 || len > r->max)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "%s: a frame of %u bytes (frames are 1 to %zu "
                           "bytes)",
                           r->peer ? r->peer : "peer", len, r->max);
    uint8_t *grown = realloc(r->buf, WT_FRAME_HEADER_BYTES + (size_t)len);
    if (grown == NULL)
      return wt_status_new(WT_RESOURCE_EXHAUSTED,
                           "frame reader: out of memory for %u bytes", len);
    r->buf = grown;
    return NULL;
  }
  memcpy(r->buf + r->len, data, n);
  r->len += n;
  return NULL;
}

bool wt_frame_reader_frame(wt_frame_reader *r, const uint8_t **body,
                           size_t *len) {
  if (!complete(r)) return false;
  *body = r->buf + WT_FRAME_HEADER_BYTES;
  *len = body_len(r);
  return true;
}

void wt_frame_header(uint32_t len, uint8_t out[WT_FRAME_HEADER_BYTES]) {
  out[0] = (uint8_t)len;
  out[1] = (uint8_t)(len >> 8);
  out[2] = (uint8_t)(len >> 16);
  out[3] = (uint8_t)(len >> 24);
}
