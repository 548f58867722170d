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

#include <stddef.h>
#include <stdint.h>

#include "wt/status.h"
#include "wt/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wt_bucket {
  size_t first;     /* index of the first tensor */
  size_t count;     /* tensors [first, first + count) */
  uint64_t nbytes;  /* sum of their sizes */
} wt_bucket;

typedef struct wt_pack_plan {
  uint64_t buffer_bytes;     /* the buffer size the plan was made with */
  size_t ntensors;
  size_t nbuckets;
  wt_bucket *buckets;        /* nbuckets entries */
  size_t *tensor_bucket;     /* ntensors entries: bucket of tensor i */
  uint64_t *tensor_offset;   /* ntensors entries: byte offset within bucket */
  uint64_t max_bucket_bytes; /* largest bucket (what a receiver allocates) */
  uint64_t total_bytes;
} wt_pack_plan;

/* Builds the plan for tensors of `sizes[0..n)` bytes with buffer size
 * `buffer_bytes` (> 0, else INVALID_ARGUMENT naming it). Total overflow is
 * INVALID_ARGUMENT. On success the caller owns *out and releases it with
 * wt_pack_plan_free(). */
wt_status *wt_pack_plan_build(const uint64_t *sizes, size_t n,
                              uint64_t buffer_bytes, wt_pack_plan **out);

/* Same, from metadata (uses metas[i].nbytes). */
wt_status *wt_pack_plan_from_metas(const wt_tensor_meta *metas, size_t n,
                                   uint64_t buffer_bytes, wt_pack_plan **out);

/* NULL is ignored. */
void wt_pack_plan_free(wt_pack_plan *plan);

#ifdef __cplusplus
}
#endif

#endif /* WT_PACKING_H */
