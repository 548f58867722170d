/* chunk.c: the `grpc` backend's data-message codec (see wt/chunk.h). */

#include "wt/chunk.h"

#include <inttypes.h>

#include <grpc/slice.h>

#include "wt/varint.h"

/* Wire tags of PushWeightsChunk and BucketChunk. */
#define TAG_CHUNK ((2u << 3) | 2u)  /* PushWeightsChunk.chunk, bytes */
#define TAG_BUCKET ((1u << 3) | 0u) /* BucketChunk.bucket, varint */
#define TAG_OFFSET ((2u << 3) | 0u) /* BucketChunk.offset, varint */
#define TAG_DATA ((3u << 3) | 2u)   /* BucketChunk.data, bytes */

size_t wt_chunk_prefix(uint32_t bucket, uint64_t offset, uint64_t len,
                       uint8_t *out) {
  uint64_t inner = 1 + wt_varint_len(len) + len + wt_varint_field_len(bucket) +
                   wt_varint_field_len(offset);
  size_t prefix = 1 + wt_varint_len(inner) + (size_t)(inner - len);
  if (out != NULL) {
    uint8_t *p = out;
    *p++ = TAG_CHUNK;
    p = wt_varint_put(p, inner);
    p = wt_varint_field_put(p, TAG_BUCKET, bucket);
    p = wt_varint_field_put(p, TAG_OFFSET, offset);
    *p++ = TAG_DATA;
    wt_varint_put(p, len);
  }
  return prefix;
}

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  uint64_t x = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t b = *(*p)++;
    /* The tenth byte may carry only the top bit of a 64-bit value. */
    if (shift == 63 && b > 1) return false;
    x |= (uint64_t)(b & 0x7f) << shift;
    if ((b & 0x80) == 0) {
      *v = x;
      return true;
    }
  }
  return false;
}

bool wt_chunk_parse_prefix(const uint8_t *p, size_t n, size_t total,
                           uint32_t *bucket, uint64_t *offset,
                           size_t *data_start) {
  const uint8_t *q = p, *end = p + (n < total ? n : total);
  uint64_t tag = 0, size = 0, b = 0, off = 0;
  if (!read_varint(&q, end, &tag) || tag != TAG_CHUNK) return false;
  if (!read_varint(&q, end, &size) || size != total - (size_t)(q - p))
    return false;
  for (;;) {
    if (!read_varint(&q, end, &tag)) return false;
    switch (tag) {
      /* A field given twice: the last one wins, as in protobuf-c. */
      case TAG_BUCKET:
        if (!read_varint(&q, end, &b) || b > UINT32_MAX) return false;
        break;
      case TAG_OFFSET:
        if (!read_varint(&q, end, &off)) return false;
        break;
      case TAG_DATA: {
        uint64_t len = 0;
        if (!read_varint(&q, end, &len)) return false;
        size_t start = (size_t)(q - p);
        if (len != total - start) return false;
        *bucket = (uint32_t)b;
        *offset = off;
        *data_start = start;
        return true;
      }
      default:
        return false;
    }
  }
}

bool wt_chunk_view_of(grpc_byte_buffer *bb, wt_chunk_view *v) {
  if (bb->type != GRPC_BB_RAW || bb->data.raw.compression != GRPC_COMPRESS_NONE)
    return false;
  const grpc_slice_buffer *sb = &bb->data.raw.slice_buffer;
  if (sb->count == 0 || sb->count > WT_CHUNK_MAX_PIECES) return false;
  size_t skip = 0;
  if (!wt_chunk_parse_prefix(GRPC_SLICE_START_PTR(sb->slices[0]),
                             GRPC_SLICE_LENGTH(sb->slices[0]), sb->length,
                             &v->bucket, &v->offset, &skip))
    return false;
  v->iovcnt = 0;
  for (size_t i = 0; i < sb->count; i++) {
    size_t len = GRPC_SLICE_LENGTH(sb->slices[i]);
    if (skip >= len) {
      skip -= len;
      continue;
    }
    v->iov[v->iovcnt].iov_base = GRPC_SLICE_START_PTR(sb->slices[i]) + skip;
    v->iov[v->iovcnt].iov_len = len - skip;
    v->iovcnt++;
    skip = 0;
  }
  return true;
}
