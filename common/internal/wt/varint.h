/* varint.h: protobuf varints, for the hand-written framings of the grpc
 * backend's chunks (chunk.c) and delta chunks (delta.c). Internal. */
#ifndef WT_VARINT_H
#define WT_VARINT_H

#include <stddef.h>
#include <stdint.h>

static inline size_t wt_varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

static inline uint8_t *wt_varint_put(uint8_t *p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
}

/* A varint field (one-byte tag, value), left out when the value is 0 as
 * proto3 does: its length, and its bytes at p (returns the end). */
static inline size_t wt_varint_field_len(uint64_t v) {
  return v ? 1 + wt_varint_len(v) : 0;
}

static inline uint8_t *wt_varint_field_put(uint8_t *p, uint8_t tag,
                                           uint64_t v) {
  if (v) {
    *p++ = tag;
    p = wt_varint_put(p, v);
  }
  return p;
}

#endif
