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
    if (!plan->buckets || !plan->tensor_bucket || !plan->tensor_offset)
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
      cur->first = i;
    }
    plan->tensor_bucket[i] = plan->nbuckets - 1;
    plan->tensor_offset[i] = cur->nbytes;
    cur->count++;
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

void wt_pack_plan_free(wt_pack_plan *plan) {
  if (plan == NULL) return;
  free(plan->buckets);
  free(plan->tensor_bucket);
  free(plan->tensor_offset);
  free(plan);
}
