/* backends/ipc/ipc_shared.h: the logic of the `ipc` backend (CUDA IPC between a
 * trainer and workers on one host) that needs no GPU: validating an update's
 * exports and places and picking each tensor's place on a worker's own GPU, the
 * worker's cache of opened exports, and the packed ring's slot accounting.
 * The CUDA calls themselves (cudaIpcGetMemHandle, cudaIpcOpenMemHandle,
 * the copies) are behind wt/cuda.h; these functions take them as plain
 * function pointers, so every path here is tested without a device.
 *
 * Wire (proto/wt/v1/wt.proto, IpcUpdateInfo): the trainer exports each
 * distinct allocation that holds its tensors once (IpcExport: an id, the
 * 64-byte handle, the GPU's UUID, the allocation's size) and names, per
 * tensor, where it is on each GPU that holds it (IpcPlace: export id and
 * offset). A worker copies from the place on its own GPU, matched by UUID.
 */
#ifndef WT_IPC_H
#define WT_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/status.h"
#include "wt/v1/wt.pb-c.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* sizeof(cudaIpcMemHandle_t). */
#define WT_IPC_HANDLE_BYTES 64
/* The longest GPU UUID taken ("GPU-" and 36 characters, or "MIG-..."). */
#define WT_IPC_UUID_MAX 96
/* At most this many places per tensor (one per GPU of a host), and this
 * many exports per tensor of the update: bounds what an update can make a
 * worker check. */
#define WT_IPC_MAX_PLACES 16
/* The packed ring: at most this many buffers (packed_num_buffers), and
 * this many ring entries a worker keeps (its GPU's). */
#define WT_IPC_MAX_SLOTS 16
#define WT_IPC_MAX_RING WT_IPC_MAX_SLOTS

/* Where one tensor's bytes are for this worker: export exports[export] of
 * the update info, at `offset`. */
typedef struct wt_ipc_place {
  size_t export_index;
  uint64_t offset;
} wt_ipc_place;

/* Validates `ipc` for an update of n tensors (names[k], nbytes[k]; the
 * update's validated lists) and picks, for each tensor, its place on the
 * GPU `uuid` (the worker's own) into out[0..n). INVALID_ARGUMENT naming the
 * field and what is wrong: no ipc info; a tensor count other than n; more
 * than WT_IPC_MAX_PLACES exports per tensor, or places of one tensor; an
 * export whose handle is not WT_IPC_HANDLE_BYTES bytes, whose UUID is empty
 * or too long, or whose id repeats; a place naming no export; two places
 * of one tensor on one GPU; a place that runs past its export's size
 * (overflow-safe); a tensor with no place on `uuid` (naming the tensor,
 * this GPU's UUID and the GPUs the trainer did export it on). */
wt_status *wt_ipc_select(const Wt__V1__IpcUpdateInfo *ipc, size_t n,
                         const char *const *names, const uint64_t *nbytes,
                         const char *uuid, wt_ipc_place *out);
/* The checks cost O((exports + places) log exports), whatever was sent. */

/* How a cache opens and closes an export (cudaIpcOpenMemHandle and
 * cudaIpcCloseMemHandle on the worker's device, in the engine). */
typedef struct wt_ipc_opener {
  wt_status *(*open)(void *ctx, const unsigned char handle[WT_IPC_HANDLE_BYTES],
                     void **base);
  void (*close)(void *ctx, void *base);
  void *ctx;
} wt_ipc_opener;

/* A worker's opened exports, by id: each opened once and kept open across
 * rounds. Not thread-safe (a worker's one thread uses it). */
typedef struct wt_ipc_cache wt_ipc_cache;

/* `opener` is copied. The caller owns *out (wt_ipc_cache_free). */
wt_status *wt_ipc_cache_new(const wt_ipc_opener *opener, wt_ipc_cache **out);

/* The mapped base of export `e`, opened the first time its id is seen. An
 * id seen before with other handle bytes (the trainer freed that
 * allocation and exported a new one under the same id) is closed and
 * opened again. The open's error is prefixed with the export's id and GPU.
 * *base stays valid until the id is reopened, closed or the cache freed. */
wt_status *wt_ipc_cache_get(wt_ipc_cache *c, const Wt__V1__IpcExport *e,
                            void **base);

/* Closes every export not got since the last sweep (the trainer freed
 * that memory, or stopped naming it: a mapping kept open would keep the
 * trainer's freed GPU memory alive) and returns how many it closed. A
 * worker sweeps at the start of each round, so an export survives while
 * every round names it. */
size_t wt_ipc_cache_sweep(wt_ipc_cache *c);

/* Closes every export (the trainer is gone, or a new init). */
void wt_ipc_cache_close_all(wt_ipc_cache *c);

/* Exports open now, and opens made since the cache was created. */
size_t wt_ipc_cache_size(const wt_ipc_cache *c);
uint64_t wt_ipc_cache_opens(const wt_ipc_cache *c);

/* Closes everything and frees c. NULL is ignored. */
void wt_ipc_cache_free(wt_ipc_cache *c);

/* The packed ring's size from init_info.ipc, as both sides read it:
 * packed_buffer_size_bytes (unset: 1 GiB, vLLM's default; 0 refused) and
 * packed_num_buffers (unset: 2; between 2 and WT_IPC_MAX_SLOTS).
 * INVALID_ARGUMENT naming the field otherwise. */
wt_status *wt_ipc_ring_settings(const Wt__V1__IpcInitInfo *x,
                                uint64_t *slot_bytes, uint32_t *nslots);

/* The packed ring's accounting, on the trainer's side: nslots device
 * buffers, bucket b in slot b % nslots, each written once and then copied
 * out by every one of nworkers workers. A slot is rewritten only once
 * every worker has finished copying out of it; the trainer never waits
 * longer than that. Not thread-safe (the caller holds its own lock). */
typedef struct wt_ipc_ring {
  uint32_t nslots;
  uint32_t nworkers;
  /* Per slot: the bucket in it (UINT64_MAX: none yet) and the workers
   * that have not finished copying it. */
  uint64_t *bucket;
  uint32_t *pending;
} wt_ipc_ring;

/* nslots at least 2 and nworkers at least 1: INVALID_ARGUMENT otherwise.
 * The caller owns r's arrays (wt_ipc_ring_clear). */
wt_status *wt_ipc_ring_init(wt_ipc_ring *r, uint32_t nslots, uint32_t nworkers);
void wt_ipc_ring_clear(wt_ipc_ring *r);

/* Whether bucket b's slot is free to be written: it is empty, or every
 * worker finished copying the bucket before b in it (b - nslots). Buckets
 * are written in order. */
bool wt_ipc_ring_writable(const wt_ipc_ring *r, uint64_t b);

/* Bucket b was written into its slot (it must be writable): every worker
 * now has it to copy. FAILED_PRECONDITION when its slot is not free. */
wt_status *wt_ipc_ring_written(wt_ipc_ring *r, uint64_t b);

/* One worker finished copying bucket b. FAILED_PRECONDITION naming the
 * bucket when b is not in its slot, or every worker had copied it already
 * (a worker reporting twice, or a stale report). */
wt_status *wt_ipc_ring_copied(wt_ipc_ring *r, uint64_t b);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_IPC_H */
