/* wt/packing.h: the bucket plan both sides of a transfer compute.
 *
 * vLLM's rule (packed_broadcast_producer/consumer): walk the tensors in
 * order, append each one's flat bytes to the current bucket (no padding,
 * no alignment); once the bucket's size EXCEEDS the buffer size (strictly
 * greater), close it and start a new one; at the end, close the current
 * bucket if it holds at least one tensor (a bucket of only zero-size tensors
 * still counts, with 0 bytes). Consequences that tests pin down:
 *  - a tensor larger than the buffer closes the bucket it lands in;
 *  - a bucket that fills exactly to the buffer size stays open and takes the
 *    next tensor too;
 *  - an empty list has no bucket.
 * The plan depends only on the byte sizes in order, so trainer and worker
 * compute the same one from names, dtypes and shapes.
 */
#ifndef WT_PACKING_H
#define WT_PACKING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/status.h"
#include "wt/tensor.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

typedef struct wt_bucket {
  size_t first;    /* index of the first tensor */
  size_t count;    /* tensors [first, first + count) */
  uint64_t nbytes; /* sum of their sizes (of their parts, split) */
  uint64_t start;  /* its first byte's offset in the round's bytes */
  /* The tensors whose last byte (or, zero-size, whose place) is in this
   * bucket: [done_first, done_first + done_count). The whole bucket but
   * for split plans, where a tensor that spans buckets is done in its
   * last. */
  size_t done_first, done_count;
} wt_bucket;

typedef struct wt_pack_plan {
  uint64_t buffer_bytes; /* the buffer size the plan was made with */
  size_t ntensors;
  size_t nbuckets;
  wt_bucket *buckets;        /* nbuckets entries */
  size_t *tensor_bucket;     /* ntensors entries: bucket of tensor i */
  uint64_t *tensor_offset;   /* ntensors entries: byte offset within bucket */
  uint64_t *tensor_start;    /* ntensors entries: offset in the round's bytes */
  uint64_t max_bucket_bytes; /* largest bucket (what a receiver allocates) */
  uint64_t total_bytes;
  bool split; /* made by wt_pack_plan_build_split */
} wt_pack_plan;

/* The most buckets a split plan may have: a buffer size so small that a
 * round would need more is refused (a receiver keeps state per bucket). */
#define WT_PACK_SPLIT_MAX_BUCKETS 65536u

/* How many buckets the split plan cuts `total_bytes` into with buffers of
 * `buffer_bytes` (> 0): at least 1. The plan is refused past
 * WT_PACK_SPLIT_MAX_BUCKETS; a trainer asks this to choose the plan. */
uint64_t wt_pack_split_buckets(uint64_t total_bytes, uint64_t buffer_bytes);

/* Builds the plan for tensors of `sizes[0..n)` bytes with buffer size
 * `buffer_bytes` (> 0, else INVALID_ARGUMENT naming it). Total overflow is
 * INVALID_ARGUMENT. On success the caller owns *out and releases it with
 * wt_pack_plan_free(). */
wt_status *wt_pack_plan_build(const uint64_t *sizes, size_t n,
                              uint64_t buffer_bytes, wt_pack_plan **out);

/* Same, from metadata (uses metas[i].nbytes). */
wt_status *wt_pack_plan_from_metas(const wt_tensor_meta *metas, size_t n,
                                   uint64_t buffer_bytes, wt_pack_plan **out);

/* The split plan (wt's own `ucx` rounds, update_info.ucx.split_tensors):
 * the round's bytes, the tensors back to back in order, cut into buckets of
 * exactly `buffer_bytes` (the last one shorter), so that a tensor larger
 * than the buffer spans several buckets and no bucket is larger than the
 * buffer. A pipeline (chain fan-out) then moves a bucket's time per hop,
 * never a whole large tensor's. Zero-size tensors go in the bucket their
 * place falls in (the last one at the end); tensors but no bytes make one
 * empty bucket. More than WT_PACK_SPLIT_MAX_BUCKETS buckets is
 * INVALID_ARGUMENT naming buffer_bytes. Ownership as wt_pack_plan_build. */
wt_status *wt_pack_plan_build_split(const uint64_t *sizes, size_t n,
                                    uint64_t buffer_bytes, wt_pack_plan **out);

/* Same, from metadata. */
wt_status *wt_pack_plan_split_from_metas(const wt_tensor_meta *metas, size_t n,
                                         uint64_t buffer_bytes,
                                         wt_pack_plan **out);

/* The part of tensor k (of `size` bytes, one of bucket b's) that bucket b
 * carries: bytes [*offset, *offset + *len) of the tensor; the whole tensor
 * in a plan that is not split. */
void wt_pack_part(const wt_pack_plan *plan, size_t b, size_t k, uint64_t size,
                  uint64_t *offset, uint64_t *len);

/* NULL is ignored. */
void wt_pack_plan_free(wt_pack_plan *plan);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_PACKING_H */
