/* wt/shard_plan.h: many trainer ranks, one version (docs/multirank.md).
 *
 * Each trainer rank holds boxes of tensors (offsets and sizes per dimension
 * of the whole tensor, as DTensor's Shard and Replicate placements make).
 * The ranks' layouts (a wt.v1.ShardPlan whose ranks[] list what each rank
 * holds) become a plan: what each rank sends. Building it checks that every
 * rank describes the same tensors, that no two boxes overlap and that
 * every byte is held; a box several ranks hold alike (a replica) is sent by
 * one of them, chosen by the replicate rule below, which every rank and
 * every server computes alike. The plan's digest (SHA-256 over its
 * canonical form) is what the ranks and the servers compare.
 *
 * A box's bytes travel as a dense row-major tensor of shape `sizes`; the
 * receiver scatters them into the whole tensor with wt_box_runs (wt/box.h).
 *
 * Not installed: libwt_server and libwt_client (and its Python bindings)
 * share it through libwt_common.
 */
#ifndef WT_SHARD_PLAN_H
#define WT_SHARD_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "wt/box.h"
#include "wt/status.h"
#include "wt/v1/wt.pb-c.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* True when the n dimensions at a and b are equal. A scalar's (n == 0)
 * arrays are NULL as protobuf-c leaves them, which memcmp may not take even
 * for 0 bytes: every comparison of shapes, offsets or sizes goes here. */
static inline bool wt_dims_equal(const int64_t *a, const int64_t *b, size_t n) {
  return n == 0 || memcmp(a, b, n * sizeof(int64_t)) == 0;
}

/* Limits a plan (a stranger's init) is held to. */
#define WT_PLAN_MAX_RANKS 4096
#define WT_PLAN_MAX_BOXES_PER_TENSOR 4096
/* Box comparisons a plan's overlap check may make, in all. */
#define WT_PLAN_MAX_COMPARISONS (1ull << 26)
/* Contiguous runs a plan's boxes may make, in all (an engine may keep one
 * entry per run: ucx's iov). */
#define WT_PLAN_MAX_RUNS (1u << 22)
#define WT_PLAN_MAX_NONCE 64
#define WT_PLAN_DIGEST_HEX 65 /* 64 hex digits and a NUL */

/* The replicate rule: of `nholders` ranks (sorted ascending) that hold the
 * same box of the tensor at position `tensor_index` of the plan's sorted
 * names, holder (tensor_index % nholders) sends it; replicated tensors are
 * thus spread over their holders. */
size_t wt_shard_replica_holder(size_t tensor_index, size_t nholders);

/* Builds the plan from every rank's layout (`layouts->ranks`, any order,
 * each naming its rank; `world_size`, when set, must be their count;
 * `nonce` is kept). Refusals (INVALID_ARGUMENT) name the rank and the
 * tensor: a rank claimed twice or missing, a layout that lists other
 * tensors (or another dtype or shape) than rank 0's, a box outside its
 * tensor, two boxes that overlap, bytes that no box holds. The caller owns
 * *plan (wt_shard_plan_free). */
wt_status *wt_shard_plan_build(const Wt__V1__ShardPlan *layouts,
                               Wt__V1__ShardPlan **plan);

/* Checks a plan as a server receives it: ranks[r].rank == r for r <
 * world_size, each rank's boxes sorted by name, one per tensor, boxes
 * within their tensors, one dtype and shape per name, no overlap, every
 * byte of every named tensor covered exactly once, and `digest` equal to
 * the plan's. INVALID_ARGUMENT naming the field, the rank and the tensor. */
wt_status *wt_shard_plan_check(const Wt__V1__ShardPlan *plan);

/* The plan's digest (its `digest`, `rank` fields ignored) as hex. */
wt_status *wt_shard_plan_digest(const Wt__V1__ShardPlan *plan,
                                char hex[WT_PLAN_DIGEST_HEX]);

/* Frees a plan from wt_shard_plan_build. NULL is ignored. */
void wt_shard_plan_free(Wt__V1__ShardPlan *plan);

/* "[0:2, 0:10]" for a box into buf (NUL-terminated, truncated). */
char *wt_box_format(const Wt__V1__TensorBox *b, char *buf, size_t len);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_SHARD_PLAN_H */
