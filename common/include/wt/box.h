/* wt/box.h: a box of a tensor (offsets and sizes per dimension of the
 * whole tensor's shape, as DTensor's Shard placements make), whose bytes
 * travel dense and row-major, and the contiguous runs of the whole tensor
 * they land in. A shard plan (docs/multirank.md) is made of boxes; an
 * engine that takes them (WT_ENGINE_TAKES_BOXES, wt/engine.h) scatters
 * each box's bytes with wt_box_runs.
 */
#ifndef WT_BOX_H
#define WT_BOX_H

#include <stddef.h>
#include <stdint.h>

#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* A box as a receiver uses it: all borrowed, ndim entries each; checked
 * by the shard plan it came from (wt_shard_plan_check). */
typedef struct wt_box {
  uint32_t ndim;
  const int64_t *shape;   /* the whole tensor */
  const int64_t *offsets; /* the box's first index per dimension */
  const int64_t *sizes;   /* its extent per dimension */
  size_t elem_bytes;
} wt_box;

/* Bytes of the box's payload (elem_bytes x the product of sizes). The box
 * must have passed a plan check. */
uint64_t wt_box_bytes(const wt_box *b);

/* How many contiguous runs of its tensor the box's bytes land in: one for
 * a box of whole rows (Shard(0)), one per row of a Shard(1) box. */
uint64_t wt_box_nruns(const wt_box *b);

/* Copies the shape, offsets and sizes of boxes[0..n) into one new
 * allocation and points the boxes at it, so that they outlive what they
 * pointed into. Returns the allocation (the caller's, to free() after the
 * boxes), or NULL when out of memory (the boxes are then unchanged). */
int64_t *wt_boxes_own(wt_box *boxes, size_t n);

/* One contiguous run: payload bytes [src, src + n) belong at byte `dst` of
 * the whole tensor. */
typedef wt_status *(*wt_box_run_fn)(uint64_t dst, uint64_t src, uint64_t n,
                                    void *user);

/* Calls fn for each contiguous run of payload bytes [pos, pos + len) of box
 * `b` (which passed a plan check), in payload order, stopping at fn's first
 * error. OUT_OF_RANGE when the range is outside the payload. */
wt_status *wt_box_runs(const wt_box *b, uint64_t pos, uint64_t len,
                       wt_box_run_fn fn, void *user);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_BOX_H */
