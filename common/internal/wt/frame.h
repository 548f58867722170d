/* wt/frame.h: length-prefixed frames, as the export socket carries them
 * (issue #21; both halves, the server and libwt_consumer, use this one
 * reader): a 4-byte little-endian length N, 1 <= N <= the reader's limit,
 * then N bytes (one protobuf message). A reader asks for no more bytes than
 * the frame in hand needs, so a caller reading a socket never takes the
 * next frame's bytes, or the descriptors sent with them, early. */
#ifndef WT_FRAME_H
#define WT_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

#define WT_FRAME_HEADER_BYTES 4

/* Frames of one stream, read in pieces. The caller owns it: init, feed
 * what wt_frame_reader_want says, take frames with _next, free. */
typedef struct wt_frame_reader {
  uint8_t *buf;
  size_t len;       /* bytes held */
  size_t max;       /* the largest frame body accepted */
  const char *peer; /* names the peer in errors (borrowed) */
} wt_frame_reader;

/* `max_frame` >= 1; `peer` (may be NULL) must outlive the reader. */
void wt_frame_reader_init(wt_frame_reader *r, size_t max_frame,
                          const char *peer);
void wt_frame_reader_free(wt_frame_reader *r);

/* How many bytes to read next (> 0): the rest of the header, or of the
 * frame's body. */
size_t wt_frame_reader_want(const wt_frame_reader *r);

/* Appends data[0..n), n <= wt_frame_reader_want(r). INVALID_ARGUMENT
 * naming the peer when the header just completed announces 0 bytes or more
 * than the limit (say, 4 GiB): the stream is then unusable and must be
 * closed. RESOURCE_EXHAUSTED when out of memory. */
wt_status *wt_frame_reader_feed(wt_frame_reader *r, const void *data, size_t n);

/* True when a whole frame is held: *body and *len (borrowed, valid until
 * the next feed) are it; the next feed starts the next frame. */
bool wt_frame_reader_frame(wt_frame_reader *r, const uint8_t **body,
                           size_t *len);

/* The header of a frame of `len` bytes. */
void wt_frame_header(uint32_t len, uint8_t out[WT_FRAME_HEADER_BYTES]);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_FRAME_H */
