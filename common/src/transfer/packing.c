/* packing.c: the bucket plan of packed transfers (see wt/packing.h). */

#include "wt/packing.h"

#include <inttypes.h>
#include <stdlib.h>

/* The plan is built from either a size array or metadata; these say how to
 * read item i of each, so that the rule itself is written once. */
typedef uint64_t (*size_at_fn)(const void *items, size_t i);
typedef const char *(*name_at_fn)(const void *items, size_t i);

static uint64_t size_from_array(const void *items, size_t i) {
  return ((const uint64_t *)items)[i];
}

static uint64_t size_from_meta(const void *items, size_t i) {
  return ((const wt_tensor_meta *)items)[i].nbytes;
}

static const char *name_from_meta(const void *items, size_t i) {
  const char *name = ((const wt_tensor_meta *)items)[i].name;
  return name ? name : "(unnamed)";
}

static wt_status *plan_build(const void *items, size_at_fn size_at,
                             name_at_fn name_at, size_t n,
                             uint64_t buffer_bytes, wt_pack_plan **out) {
  wt_status *st = NULL;
  wt_pack_plan *plan = NULL;
  *out = NULL;
  if (buffer_bytes == 0)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "buffer_bytes: the packed buffer size must be > 0");
  if (n > 0 && items == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT, "%zu tensor sizes given as NULL", n);
  plan = calloc(1, sizeof(*plan));
  if (plan == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for a plan");
  plan->buffer_bytes = buffer_bytes;
  plan->ntensors = n;
  if (n > 0) {
    /* Every bucket holds at least one tensor, so n buckets always suffice. */
    plan->buckets = calloc(n, sizeof(*plan->buckets));
    plan->tensor_bucket = calloc(n, sizeof(*plan->tensor_bucket));
    plan->tensor_offset = calloc(n, sizeof(*plan->tensor_offset));
    plan->tensor_start = calloc(n, sizeof(*plan->tensor_start));
    if (!plan->buckets || !plan->tensor_bucket || !plan->tensor_offset ||
        !plan->tensor_start)
      WT_FAIL(WT_RESOURCE_EXHAUSTED,
              "out of memory for the plan of %zu tensors", n);
  }

  wt_bucket *cur = NULL;
  for (size_t i = 0; i < n; i++) {
    uint64_t size = size_at(items, i);
    if (__builtin_add_overflow(plan->total_bytes, size, &plan->total_bytes)) {
      if (name_at)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "tensor '%s' (index %zu, %" PRIu64
                " bytes): total size of the tensors overflows 64 bits",
                name_at(items, i), i, size);
      WT_FAIL(WT_INVALID_ARGUMENT,
              "tensor %zu (%" PRIu64
              " bytes): total size of the tensors overflows 64 bits",
              i, size);
    }
    if (cur == NULL) {
      cur = &plan->buckets[plan->nbuckets++];
      cur->first = cur->done_first = i;
      cur->start = plan->total_bytes - size;
    }
    plan->tensor_bucket[i] = plan->nbuckets - 1;
    plan->tensor_offset[i] = cur->nbytes;
    plan->tensor_start[i] = plan->total_bytes - size;
    cur->count++;
    cur->done_count++;
    cur->nbytes += size; /* <= total_bytes, which did not overflow */
    if (cur->nbytes > plan->max_bucket_bytes)
      plan->max_bucket_bytes = cur->nbytes;
    /* vLLM closes a bucket only once it is strictly larger than the buffer;
     * one that fills it exactly takes the next tensor too. */
    if (cur->nbytes > buffer_bytes) cur = NULL;
  }
  *out = plan;
  plan = NULL;
out:
  wt_pack_plan_free(plan);
  return st;
}

wt_status *wt_pack_plan_build(const uint64_t *sizes, size_t n,
                              uint64_t buffer_bytes, wt_pack_plan **out) {
  return plan_build(sizes, size_from_array, NULL, n, buffer_bytes, out);
}

wt_status *wt_pack_plan_from_metas(const wt_tensor_meta *metas, size_t n,
                                   uint64_t buffer_bytes, wt_pack_plan **out) {
  return plan_build(metas, size_from_meta, name_from_meta, n, buffer_bytes,
                    out);
}

uint64_t wt_pack_split_buckets(uint64_t total_bytes, uint64_t buffer_bytes) {
  uint64_t nb = total_bytes / buffer_bytes + (total_bytes % buffer_bytes != 0);
  return nb ? nb : 1; /* tensors, but no bytes: one empty bucket */
}

/* The split plan: the vLLM plan's walk for the totals and the checks,
 * then the cut into buffer-sized buckets. */
static wt_status *plan_build_split(const void *items, size_at_fn size_at,
                                   name_at_fn name_at, size_t n,
                                   uint64_t buffer_bytes, wt_pack_plan **out) {
  wt_status *st = NULL;
  wt_pack_plan *plan = NULL;
  *out = NULL;
  WT_CHECK(plan_build(items, size_at, name_at, n, buffer_bytes, &plan));
  if (n == 0) goto done;
  const uint64_t total = plan->total_bytes;
  uint64_t nb = wt_pack_split_buckets(total, buffer_bytes);
  if (nb > WT_PACK_SPLIT_MAX_BUCKETS)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "buffer_bytes: %" PRIu64
            "-byte buckets would cut the round's %" PRIu64
            " bytes into %" PRIu64
            " buckets, more than %u: use a larger "
            "packed buffer size",
            buffer_bytes, total, nb, WT_PACK_SPLIT_MAX_BUCKETS);
  wt_bucket *b = calloc((size_t)nb, sizeof(*b));
  if (b == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED,
            "out of memory for a plan of %" PRIu64 " buckets", nb);
  free(plan->buckets);
  plan->buckets = b;
  plan->nbuckets = (size_t)nb;
  plan->split = true;
  plan->max_bucket_bytes = 0;
  for (size_t j = 0; j < plan->nbuckets; j++) {
    b[j].start = (uint64_t)j * buffer_bytes;
    b[j].nbytes = (j + 1 == plan->nbuckets) ? total - b[j].start : buffer_bytes;
    if (b[j].nbytes > plan->max_bucket_bytes)
      plan->max_bucket_bytes = b[j].nbytes;
  }
  for (size_t i = 0; i < n; i++) {
    uint64_t s0 = plan->tensor_start[i], size = size_at(items, i);
    size_t b0, b1; /* the buckets of its first and last byte */
    if (size == 0) {
      b0 = b1 = s0 < total ? (size_t)(s0 / buffer_bytes) : plan->nbuckets - 1;
    } else {
      b0 = (size_t)(s0 / buffer_bytes);
      b1 = (size_t)((s0 + size - 1) / buffer_bytes);
    }
    plan->tensor_bucket[i] = b0;
    plan->tensor_offset[i] = s0 - b[b0].start;
    for (size_t j = b0; j <= b1; j++) {
      if (b[j].count == 0) b[j].first = i;
      b[j].count = i - b[j].first + 1;
    }
    if (b[b1].done_count == 0) b[b1].done_first = i;
    b[b1].done_count = i - b[b1].done_first + 1;
  }
done:
  *out = plan;
  plan = NULL;
out:
  wt_pack_plan_free(plan);
  return st;
}

wt_status *wt_pack_plan_build_split(const uint64_t *sizes, size_t n,
                                    uint64_t buffer_bytes, wt_pack_plan **out) {
  return plan_build_split(sizes, size_from_array, NULL, n, buffer_bytes, out);
}

wt_status *wt_pack_plan_split_from_metas(const wt_tensor_meta *metas, size_t n,
                                         uint64_t buffer_bytes,
                                         wt_pack_plan **out) {
  return plan_build_split(metas, size_from_meta, name_from_meta, n,
                          buffer_bytes, out);
}

void wt_pack_part(const wt_pack_plan *plan, size_t b, size_t k, uint64_t size,
                  uint64_t *offset, uint64_t *len) {
  const wt_bucket *bk = &plan->buckets[b];
  uint64_t s0 = plan->tensor_start[k];
  uint64_t lo = s0 > bk->start ? s0 : bk->start;
  uint64_t end = bk->start + bk->nbytes;
  uint64_t hi = s0 + size < end ? s0 + size : end;
  *offset = lo - s0;
  *len = hi > lo ? hi - lo : 0;
}

void wt_pack_plan_free(wt_pack_plan *plan) {
  if (plan == NULL) return;
  free(plan->buckets);
  free(plan->tensor_bucket);
  free(plan->tensor_offset);
  free(plan->tensor_start);
  free(plan);
}
