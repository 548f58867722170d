/* delta.c: the delta rounds' codec (see wt/delta.h): XOR against the base,
 * zstd frames, digests, and the DeltaChunk framing. */

#include "wt/delta.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include "wt/varint.h"

/* Wire tags of PushWeightsChunk.delta and DeltaChunk. */
#define TAG_DELTA ((3u << 3) | 2u)  /* PushWeightsChunk.delta, bytes */
#define TAG_BUCKET ((1u << 3) | 0u) /* bucket, varint */
#define TAG_OFFSET ((2u << 3) | 0u) /* offset, varint */
#define TAG_RAW ((3u << 3) | 0u)    /* raw_length, varint */
#define TAG_BASE ((4u << 3) | 1u)   /* base_digest, fixed64 */
#define TAG_DATA ((5u << 3) | 2u)   /* data, bytes */

uint64_t wt_delta_digest(const void *p, size_t n) {
  uint64_t d = XXH3_64bits(p, n);
  return d ? d : 1;
}

struct wt_delta_hasher {
  XXH3_state_t *state;
};

wt_status *wt_delta_hasher_new(wt_delta_hasher **out) {
  wt_delta_hasher *h = calloc(1, sizeof(*h));
  if (h == NULL || (h->state = XXH3_createState()) == NULL) {
    free(h);
    *out = NULL;
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "delta digest: out of memory");
  }
  XXH3_64bits_reset(h->state);
  *out = h;
  return NULL;
}

void wt_delta_hasher_reset(wt_delta_hasher *h) {
  XXH3_64bits_reset(h->state);
}

void wt_delta_hasher_update(wt_delta_hasher *h, const void *p, size_t n) {
  if (n) XXH3_64bits_update(h->state, p, n);
}

uint64_t wt_delta_hasher_digest(const wt_delta_hasher *h) {
  uint64_t d = XXH3_64bits_digest(h->state);
  return d ? d : 1;
}

void wt_delta_hasher_free(wt_delta_hasher *h) {
  if (h == NULL) return;
  XXH3_freeState(h->state);
  free(h);
}

void wt_delta_xor(void *dst, const void *src, size_t n) {
  unsigned char *d = dst;
  const unsigned char *s = src;
  size_t i = 0;
  /* Eight bytes at a time (memcpy: no alignment assumed); the compiler
   * vectorises the loop. */
  for (; i + 8 <= n; i += 8) {
    uint64_t a, b;
    memcpy(&a, d + i, 8);
    memcpy(&b, s + i, 8);
    a ^= b;
    memcpy(d + i, &a, 8);
  }
  for (; i < n; i++) d[i] ^= s[i];
}

struct wt_delta_codec {
  ZSTD_CCtx *c;
  ZSTD_DCtx *d;
};

wt_delta_codec *wt_delta_codec_new(void) {
  wt_delta_codec *c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  c->c = ZSTD_createCCtx();
  c->d = ZSTD_createDCtx();
  if (c->c == NULL || c->d == NULL) {
    wt_delta_codec_free(c);
    return NULL;
  }
  /* The frame says its size: the decoder checks it against raw_length
   * before it decodes a byte. */
  ZSTD_CCtx_setParameter(c->c, ZSTD_c_compressionLevel, WT_DELTA_ZSTD_LEVEL);
  ZSTD_CCtx_setParameter(c->c, ZSTD_c_contentSizeFlag, 1);
  ZSTD_CCtx_setParameter(c->c, ZSTD_c_checksumFlag, 0);
  return c;
}

void wt_delta_codec_free(wt_delta_codec *c) {
  if (c == NULL) return;
  ZSTD_freeCCtx(c->c);
  ZSTD_freeDCtx(c->d);
  free(c);
}

size_t wt_delta_frame_bound(size_t n) {
  return ZSTD_compressBound(n);
}

size_t wt_delta_encode(wt_delta_codec *c, const void *new_bytes,
                       const void *base, size_t n, void *xor_buf, void *out,
                       size_t cap) {
  if (n == 0) return 0;
  memcpy(xor_buf, new_bytes, n);
  wt_delta_xor(xor_buf, base, n);
  size_t r = ZSTD_compress2(c->c, out, cap, xor_buf, n);
  if (ZSTD_isError(r) || r >= n) return 0;
  return r;
}

wt_status *wt_delta_decode(wt_delta_codec *c, const void *frame, size_t len,
                           uint64_t raw_len, void *out, const char *where) {
  unsigned long long claims = ZSTD_getFrameContentSize(frame, len);
  if (claims == ZSTD_CONTENTSIZE_ERROR)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: the delta is not a zstd frame (%zu bytes)", where,
                         len);
  if (claims == ZSTD_CONTENTSIZE_UNKNOWN)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: the delta's zstd frame does not say its size",
                         where);
  if (claims != raw_len)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: the delta's zstd frame expands to %llu bytes; "
                         "the chunk covers %llu",
                         where, claims, (unsigned long long)raw_len);
  size_t flen = ZSTD_findFrameCompressedSize(frame, len);
  if (ZSTD_isError(flen) || flen != len)
    return wt_status_new(
        WT_INVALID_ARGUMENT, "%s: the delta is not exactly one zstd frame (%s)",
        where,
        ZSTD_isError(flen) ? ZSTD_getErrorName(flen) : "bytes after the frame");
  size_t r = ZSTD_decompressDCtx(c->d, out, (size_t)raw_len, frame, len);
  if (ZSTD_isError(r))
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: the delta's zstd frame is corrupt: %s", where,
                         ZSTD_getErrorName(r));
  if (r != raw_len)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: the delta's zstd frame held %zu bytes; the chunk "
                         "covers %llu",
                         where, r, (unsigned long long)raw_len);
  return NULL;
}

size_t wt_delta_chunk_prefix(uint32_t bucket, uint64_t offset, uint64_t raw_len,
                             uint64_t base_digest, uint64_t data_len,
                             uint8_t *out) {
  uint64_t inner = 1 + wt_varint_len(data_len) + data_len +
                   wt_varint_field_len(bucket) + wt_varint_field_len(offset) +
                   wt_varint_field_len(raw_len) + (base_digest ? 1 + 8 : 0);
  size_t prefix = 1 + wt_varint_len(inner) + (size_t)(inner - data_len);
  if (out != NULL) {
    uint8_t *p = out;
    *p++ = TAG_DELTA;
    p = wt_varint_put(p, inner);
    p = wt_varint_field_put(p, TAG_BUCKET, bucket);
    p = wt_varint_field_put(p, TAG_OFFSET, offset);
    p = wt_varint_field_put(p, TAG_RAW, raw_len);
    if (base_digest) {
      *p++ = TAG_BASE;
      for (int i = 0; i < 8; i++) *p++ = (uint8_t)(base_digest >> (8 * i));
    }
    *p++ = TAG_DATA;
    wt_varint_put(p, data_len);
  }
  return prefix;
}
