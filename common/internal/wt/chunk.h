/* wt/chunk.h: the wire form of the `grpc` backend's data message,
 * PushWeightsChunk{chunk: BucketChunk{bucket, offset, data}}
 * (proto/wt/v1/wt.proto), in one place for both sides: the trainer's half
 * (backends/grpc/) writes it, the server's PushWeights handler reads it.
 *
 * The trainer writes each chunk as this framing followed by the data bytes,
 * so that the data goes from the source straight into the message's slice
 * (wt_chunk_prefix); the server takes the data where gRPC received it,
 * without joining slices or a protobuf-c copy (wt_chunk_view). Both follow
 * the encoding every protobuf library produces for this message: the oneof
 * field 2, then bucket (1) and offset (2) as varints, zero ones left out as
 * proto3 does, then data (3) last. A message in any other valid encoding
 * (fields reordered, unknown fields) is not recognised here; the server then
 * unpacks it with protobuf-c, so it is still accepted.
 */
#ifndef WT_CHUNK_H
#define WT_CHUNK_H

#include <grpc/byte_buffer.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* The longest framing wt_chunk_prefix writes. */
#define WT_CHUNK_PREFIX_MAX 40

/* The framing before `len` data bytes of bucket `bucket` at `offset`.
 * Returns its length; writes it into out (WT_CHUNK_PREFIX_MAX bytes) when
 * out is not NULL. */
size_t wt_chunk_prefix(uint32_t bucket, uint64_t offset, uint64_t len,
                       uint8_t *out);

/* Parses the start p[0..n) of a serialized PushWeightsChunk of `total`
 * bytes: true when it is one BucketChunk in the encoding above, setting
 * bucket, offset, and where the data starts (*data_start; the data runs to
 * `total`). False for anything else. Never reads past p + n. */
bool wt_chunk_parse_prefix(const uint8_t *p, size_t n, size_t total,
                           uint32_t *bucket, uint64_t *offset,
                           size_t *data_start);

/* A chunk's data lying in a received message's buffers: iov[0..iovcnt)
 * points into `bb`, valid while bb lives. */
#define WT_CHUNK_MAX_PIECES 256
typedef struct wt_chunk_view {
  uint32_t bucket;
  uint64_t offset;
  struct iovec iov[WT_CHUNK_MAX_PIECES];
  size_t iovcnt;
} wt_chunk_view;

/* Views a received message as a chunk without copying: true when it is an
 * uncompressed raw buffer of at most WT_CHUNK_MAX_PIECES slices whose first
 * slice holds the whole framing (wt_chunk_parse_prefix). */
bool wt_chunk_view_of(grpc_byte_buffer *bb, wt_chunk_view *v);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_CHUNK_H */
