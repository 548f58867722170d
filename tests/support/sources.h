/* sources.h: what the client and sources suites share: tensors held in
 * memory, a source of scripted yields (to break the contract on purpose)
 * over the tensors a, b, c, and checkpoints written to disk. */
#ifndef WT_TEST_SOURCES_H
#define WT_TEST_SOURCES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/source.h"
#include "wt/tensor.h"

/* Tensors of a layout with bytes for `seed`, held in memory. */
typedef struct wtt_held {
  wt_tensor_meta *metas;
  size_t n;
  void **data;
  wt_source_tensor *tensors;
} wtt_held;

void wtt_held_load(const char *layout, uint64_t seed, wtt_held *h);
void wtt_held_free(wtt_held *h);

/* A source of scripted yields (wt_source_new with wtt_scripted_vt). */
typedef struct wtt_scripted {
  const wt_source_tensor *yields;
  size_t n;
  size_t next;
} wtt_scripted;
extern const wt_source_vtable wtt_scripted_vt;

/* Metadata a/b/c: f32 [2, 3], bf16 [4], u8 []; their tensors; a shape
 * that is not a's. */
void wtt_abc_metas(wt_tensor_meta m[3]);
extern const wt_source_tensor wtt_t_a, wtt_t_b, wtt_t_c;
extern const int64_t wtt_shape_bad[2];

/* Validates a scripted source over a/b/c yielding `yields`. */
wt_status *wtt_validate_scripted(const wt_source_tensor *yields, size_t n);

/* Writes `layout` with `seed` as one safetensors file, or as two shards and
 * an index when `sharded`; returns the path to open (caller frees). */
char *wtt_write_layout(const char *dir, const char *layout, uint64_t seed,
                       bool sharded);

#endif /* WT_TEST_SOURCES_H */
