/* ipc_engine.c: the `ipc` worker engine, unpacked mode (CUDA IPC, the
 * trainer and the workers on one host). A worker copies each tensor
 * straight out of the trainer's own device memory into its staging buffer,
 * device to device on its own stream: one copy per byte.
 *
 * The update info carries the trainer's exports (one per allocation, the
 * same id and handle every round) and each tensor's place on each trainer
 * GPU (wt/ipc.h); the worker takes the places on its own GPU, matched by
 * UUID, opens each export once and keeps it open across rounds
 * (wt_ipc_cache). A copy that fails (the trainer's process is gone, its
 * memory with it) or does not finish within the data deadline fails the
 * receive; the worker then closes every export of that trainer, and a copy
 * still running holds the next round back until it ended (bounded by the
 * deadline) so that it cannot land in that round's buffers.
 *
 * Every CUDA call goes through wt/cuda.h, so this file builds and links
 * everywhere; on a host without CUDA the init fails saying why. The packed
 * mode (a ring of trainer buffers) is refused at init for now.
 */

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wt/cuda.h"
#include "wt/engine.h"
#include "wt/ipc.h"
#include "wt/log.h"
#include "wt/param_store.h"

struct wt_engine {
  wt_worker_ctx ctx;
  char where[64];
  const wt_cuda_api *api;
  int device;
  char uuid[WT_CUDA_UUID_MAX];
  void *stream;
  wt_ipc_cache *cache;
  atomic_bool cancelled;
  /* Copies of a failed receive may still be running on the stream: the
   * next round waits for them, and the trainer's exports are closed only
   * once they ended (never under a copy that reads them). */
  bool copies_in_flight;
};

/* How long a failed receive lets its copies drain before it returns. */
#define IPC_SETTLE_MS 100

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static wt_status *open_export(void *ctx, const unsigned char *handle,
                              void **base) {
  wt_engine *e = ctx;
  return e->api->ipc_open(e->device, handle, base);
}

static void close_export(void *ctx, void *base) {
  wt_engine *e = ctx;
  e->api->ipc_close(e->device, base);
}

static void ipc_destroy(wt_engine *e) {
  if (e == NULL) return;
  wt_ipc_cache_free(e->cache);
  if (e->stream != NULL) e->api->stream_destroy(e->stream);
  free(e);
}

static wt_status *ipc_create(const Wt__V1__WeightTransferInitInfo *init,
                             const wt_worker_ctx *ctx, wt_engine **out) {
  wt_status *st = NULL;
  *out = NULL;
  wt_engine *e = calloc(1, sizeof(*e));
  if (e == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "ipc engine (worker %u): out of memory", ctx->rank);
  e->ctx = *ctx;
  snprintf(e->where, sizeof(e->where), "ipc worker %u (%s)", ctx->rank,
           ctx->device_name);
  atomic_init(&e->cancelled, false);
  const Wt__V1__IpcInitInfo *x =
      init != NULL && init->backend_init_case ==
                          WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_IPC
          ? init->ipc
          : NULL;
  if (x != NULL && x->packed)
    WT_FAIL(WT_UNIMPLEMENTED,
            "%s: init_info.ipc.packed: the packed ring is not implemented "
            "yet; use the unpacked mode (packed unset)",
            e->where);
  if (ctx->device.type != WT_DEVICE_CUDA)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "%s: the ipc backend copies GPU to GPU; this worker's store is "
            "on %s (start wt-server with --device cuda:N)",
            e->where, ctx->device_name);
  e->device = ctx->device.index;
  WT_CHECK(wt_status_prefix(wt_cuda_api_get(&e->api), "%s", e->where));
  if (e->api->version < 2 || e->api->ipc_open == NULL)
    WT_FAIL(WT_FAILED_PRECONDITION, "%s: the CUDA module (%s) has no IPC calls",
            e->where, e->api->name);
  WT_CHECK(wt_status_prefix(e->api->device_uuid(e->device, e->uuid), "%s",
                            e->where));
  WT_CHECK(wt_status_prefix(e->api->stream_create(e->device, &e->stream), "%s",
                            e->where));
  wt_ipc_opener op = {open_export, close_export, e};
  WT_CHECK(wt_ipc_cache_new(&op, &e->cache));
  *out = e;
  e = NULL;
out:
  ipc_destroy(e);
  return st;
}

static wt_status *ipc_init_transfer(wt_engine *e,
                                    const Wt__V1__WeightTransferInitInfo *init,
                                    wt_engine_endpoint *endpoint) {
  (void)e;
  (void)init;
  (void)endpoint; /* nothing to connect: the handles come with each update */
  return NULL;
}

/* Waits for the stream's copies, until `deadline` or a cancel. */
static wt_status *wait_copies(wt_engine *e, int64_t deadline, size_t n,
                              uint64_t bytes) {
  for (;;) {
    int done = 0;
    wt_status *st = e->api->stream_query(e->stream, &done);
    if (st != NULL) return wt_status_prefix(st, "%s: copying", e->where);
    if (done) return NULL;
    if (atomic_load(&e->cancelled))
      return wt_status_new(WT_CANCELLED,
                           "%s: cancelled while copying %zu tensors (%" PRIu64
                           " bytes) from the trainer",
                           e->where, n, bytes);
    if (now_ms() >= deadline)
      return wt_status_new(WT_DEADLINE_EXCEEDED,
                           "%s: the copies of %zu tensors (%" PRIu64
                           " bytes) from the trainer did not finish within "
                           "%" PRIu32 " ms",
                           e->where, n, bytes, e->ctx.timeout_ms);
    struct timespec ts = {0, 100 * 1000};
    nanosleep(&ts, NULL);
  }
}

/* The copies of a failed receive ended: the trainer that failed is
 * forgotten (its exports closed; a live trainer's are reopened next time). */
static void forget_trainer(wt_engine *e) {
  size_t open = wt_ipc_cache_size(e->cache);
  wt_ipc_cache_close_all(e->cache);
  e->copies_in_flight = false;
  WT_LOGW("ipc",
          "%s: closed the trainer's %zu export(s) after a failed "
          "receive",
          e->where, open);
}

static wt_status *ipc_start_update(wt_engine *e, uint64_t round_id) {
  (void)round_id;
  atomic_store(&e->cancelled, false);
  if (!e->copies_in_flight) return NULL;
  /* A failed round's copies must end before this round's bytes land. */
  wt_status *st = wait_copies(e, now_ms() + e->ctx.timeout_ms, 0, 0);
  if (st != NULL)
    return wt_status_prefix(st,
                            "a failed round's copies are still running; "
                            "InitWeightTransferEngine again");
  forget_trainer(e);
  return NULL;
}

static wt_status *ipc_receive(wt_engine *e, const wt_update *u,
                              wt_receive_stats *stats) {
  wt_status *st = NULL;
  const Wt__V1__WeightTransferUpdateInfo *info = u->info;
  const Wt__V1__IpcUpdateInfo *ipc =
      info != NULL &&
              info->backend_update_case ==
                  WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__BACKEND_UPDATE_IPC
          ? info->ipc
          : NULL;
  wt_ipc_place *places = calloc(u->n ? u->n : 1, sizeof(*places));
  bool queued = false;
  if (places == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory for %zu tensors",
            e->where, u->n);
  WT_CHECK(wt_ipc_select(ipc, u->n, (const char *const *)info->names, u->nbytes,
                         e->uuid, places));
  /* Every export opened (or found open), then every copy queued. */
  for (size_t k = 0; k < u->n; k++) {
    void *base = NULL;
    WT_CHECK(wt_status_prefix(
        wt_ipc_cache_get(e->cache, ipc->exports[places[k].export_index], &base),
        "%s: tensor '%s'", e->where, info->names[k]));
    void *dst = wt_param_store_stage(e->ctx.store, u->index[k]);
    if (u->nbytes[k] == 0) continue;
    queued = true;
    WT_CHECK(wt_status_prefix(
        e->api->copy_async(dst, (const char *)base + places[k].offset,
                           u->nbytes[k], e->stream),
        "%s: tensor '%s'", e->where, info->names[k]));
  }
  WT_CHECK(wait_copies(e, now_ms() + e->ctx.timeout_ms, u->n, u->total_bytes));
  queued = false;
  for (size_t k = 0; k < u->n; k++)
    wt_param_store_staged(e->ctx.store, u->index[k]);
  stats->tensors = u->n;
  stats->bytes = u->total_bytes;
out:
  if (st != NULL && queued) {
    /* The trainer may be gone (its memory with it). Its exports are closed
     * once the copies ended: now, if they do within a moment, else when
     * the next round has waited for them. */
    e->copies_in_flight = true;
    atomic_store(&e->cancelled, false);
    wt_status *drained = wait_copies(e, now_ms() + IPC_SETTLE_MS, 0, 0);
    if (drained == NULL) forget_trainer(e);
    wt_status_free(drained);
  } else if (st != NULL) {
    /* Nothing queued (a bad update, an export that would not open): the
     * trainer's exports are closed at once. */
    forget_trainer(e);
  }
  free(places);
  return st;
}

static wt_status *ipc_finish_update(wt_engine *e) {
  (void)e;
  return NULL;
}

static void ipc_abort_update(wt_engine *e) {
  atomic_store(&e->cancelled, false);
}

static void ipc_cancel(wt_engine *e) {
  atomic_store(&e->cancelled, true);
}

/* CUDA with the IPC calls and at least one device. */
static wt_status *ipc_probe(void) {
  const wt_cuda_api *api = NULL;
  wt_status *st = wt_cuda_api_get(&api);
  if (st != NULL) return st;
  if (api->version < 2 || api->ipc_open == NULL)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "the CUDA module (%s) has no IPC calls", api->name);
  int count = 0;
  st = api->device_count(&count);
  if (st == NULL && count == 0)
    st = wt_status_new(WT_FAILED_PRECONDITION, "no CUDA device is visible");
  return st;
}

const wt_engine_ops wt_ipc_engine_ops = {
    .header = {.abi_version = WT_ENGINE_ABI_VERSION, .name = "ipc"},
    .memory_kinds = WT_MEM_BIT(WT_MEM_DEVICE),
    .caps = WT_ENGINE_SURVIVES_ABORT,
    .create = ipc_create,
    .init_transfer = ipc_init_transfer,
    .start_update = ipc_start_update,
    .receive = ipc_receive,
    .finish_update = ipc_finish_update,
    .abort_update = ipc_abort_update,
    .cancel = ipc_cancel,
    .destroy = ipc_destroy,
    .probe = ipc_probe,
};
