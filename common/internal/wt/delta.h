/* wt/delta.h: delta rounds (docs/delta.md), what the trainer's encoder and
 * the server's decoder must agree on, in one place.
 *
 * A delta push sends, per chunk of the shared bucket plan, either the new
 * bytes (a BucketChunk, as a full push does) or a DeltaChunk: a zstd frame
 * of (new XOR base) over the chunk's raw range, with the xxh3-64 of the
 * base's bytes there. XOR makes an unchanged byte a zero, and a bf16 step
 * that moves an element by a few units in the last place changes only its
 * low bits, so a chunk of a model that moved 2 percent is mostly zeros and
 * compresses to a fraction. The encoder sends the raw bytes whenever the
 * frame would not be smaller, so a delta push is never larger than a full
 * one (beyond the framing).
 *
 * A version's digest (wt_delta_hasher) is the xxh3-64 of its bytes in the
 * order a push sends them: tensor after tensor, in the update's order. The
 * server computes it as a full push lands and keeps it with the committed
 * version; the trainer computes it over what it sent, and names it as the
 * base of its next delta push.
 */
#ifndef WT_DELTA_H
#define WT_DELTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* zstd's fastest level: the encoder must keep up with a 10 Gbit/s link
 * on a trainer's spare core, and XORed deltas compress well at any level. */
#define WT_DELTA_ZSTD_LEVEL 1

/* The xxh3-64 of n bytes. 0 is never a digest (it means "unknown" on the
 * wire): a true 0 is reported as 1. */
uint64_t wt_delta_digest(const void *p, size_t n);

/* A running digest over bytes fed in order. */
typedef struct wt_delta_hasher wt_delta_hasher;
/* The caller frees *out with wt_delta_hasher_free(). */
wt_status *wt_delta_hasher_new(wt_delta_hasher **out);
void wt_delta_hasher_reset(wt_delta_hasher *h);
void wt_delta_hasher_update(wt_delta_hasher *h, const void *p, size_t n);
uint64_t wt_delta_hasher_digest(const wt_delta_hasher *h);
void wt_delta_hasher_free(wt_delta_hasher *h);

/* dst[i] ^= src[i] for n bytes. */
void wt_delta_xor(void *dst, const void *src, size_t n);

/* The compressor and the decompressor contexts (one per thread that uses
 * them); NULL on out of memory. */
typedef struct wt_delta_codec wt_delta_codec;
wt_delta_codec *wt_delta_codec_new(void);
void wt_delta_codec_free(wt_delta_codec *c);

/* The largest frame wt_delta_encode may write for n raw bytes. */
size_t wt_delta_frame_bound(size_t n);

/* Encodes n bytes: xor_buf[0..n) becomes new ^ base, then its zstd frame
 * is written to out[0..cap). Returns the frame's length, or 0 when it
 * would not be smaller than n (send the raw bytes instead) or cannot be
 * made. */
size_t wt_delta_encode(wt_delta_codec *c, const void *new_bytes,
                       const void *base, size_t n, void *xor_buf, void *out,
                       size_t cap);

/* Decodes a frame that claims to hold raw_len bytes into out[0..raw_len),
 * never writing past it: INVALID_ARGUMENT naming `where` for a frame that
 * is corrupt or truncated, that says another size than raw_len (a bomb
 * claims more), or that holds more than one frame. out then holds
 * new ^ base; the caller XORs the base back in. */
wt_status *wt_delta_decode(wt_delta_codec *c, const void *frame, size_t len,
                           uint64_t raw_len, void *out, const char *where);

/* The longest framing wt_delta_chunk_prefix writes. */
#define WT_DELTA_PREFIX_MAX 64

/* The serialized PushWeightsChunk{delta: DeltaChunk} up to its data (the
 * canonical encoding: fields in number order, zeros left out, data last),
 * before `data_len` frame bytes. Returns its length; writes it to out
 * (WT_DELTA_PREFIX_MAX bytes) when out is not NULL. */
size_t wt_delta_chunk_prefix(uint32_t bucket, uint64_t offset, uint64_t raw_len,
                             uint64_t base_digest, uint64_t data_len,
                             uint8_t *out);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_DELTA_H */
