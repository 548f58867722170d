/* ipc_worker.c: the `ipc` worker engine (CUDA IPC, the trainer and the
 * workers on one host). A worker copies each tensor
 * straight out of the trainer's own device memory into its staging buffer,
 * device to device on its own stream: one copy per byte.
 *
 * The update info carries the trainer's exports (one per allocation, the
 * same id and handle every round) and each tensor's place on each trainer
 * GPU (ipc_shared.h); the worker takes the places on its own GPU, matched by
 * UUID, opens each export once and keeps it open across rounds
 * (wt_ipc_cache). A copy that fails (the trainer's process is gone, its
 * memory with it) or does not finish within the data deadline fails the
 * receive; the worker then closes every export of that trainer, and a copy
 * still running holds the next round back until it ended (bounded by the
 * deadline) so that it cannot land in that round's buffers.
 *
 * Packed mode (init_info.ipc.packed): the trainer's ring of device
 * buffers comes with the init (init_info.ipc.ring); the worker checks that
 * the ring has its slots on this worker's GPU and opens them there and
 * then, so that a trainer on a GPU this worker cannot reach fails the
 * init. Each bucket then arrives as its own UpdateWeights whose places lie
 * in a slot; the copy is the same as unpacked.
 *
 * Exports a round does not name are closed when the next round starts
 * (wt_ipc_cache_sweep): a mapping kept open would keep memory the trainer
 * freed alive on its GPU. The ring's slots are kept open.
 *
 * Every CUDA call goes through wt/cuda.h, so this file builds and links
 * everywhere; on a host without CUDA the init fails saying why.
 */

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backends.h"
#include "wt/cuda.h"
#include "wt/engine.h"
#include "backends/ipc/ipc_shared.h"
#include "wt/log.h"
#include "wt/param_store.h"

struct wt_engine {
  wt_worker_ctx ctx;
  /* Between create and init_transfer: the init info (borrowed). */
  const Wt__V1__WeightTransferInitInfo *init;
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
  /* Packed: the ring's slots on this GPU, kept open across rounds. */
  Wt__V1__IpcExport ring[WT_IPC_MAX_RING];
  unsigned char ring_handles[WT_IPC_MAX_RING][WT_IPC_HANDLE_BYTES];
  size_t nring;
};

/* How long a failed receive lets its copies drain before it returns. */
#define IPC_SETTLE_MS 100

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
  /* init_transfer takes the ring, if any; the init stays valid until it
   * returns (wt/engine.h). */
  e->init = init;
  snprintf(e->where, sizeof(e->where), "ipc worker %u (%s)", ctx->rank,
           ctx->device_name);
  atomic_init(&e->cancelled, false);
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

/* Packed: keeps the ring's slots on this GPU and opens them. */
static wt_status *take_ring(wt_engine *e, const Wt__V1__IpcInitInfo *x) {
  wt_status *st = NULL;
  uint64_t slot_bytes = 0;
  uint32_t nslots = 0;
  WT_CHECK(wt_status_prefix(wt_ipc_ring_settings(x, &slot_bytes, &nslots), "%s",
                            e->where));
  if (x->n_ring > (size_t)nslots * WT_IPC_MAX_PLACES)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: init_info.ipc.ring has %zu buffers for %u slots; at most %u "
            "per slot (one per GPU)",
            e->where, x->n_ring, nslots, WT_IPC_MAX_PLACES);
  char others[256] = "";
  size_t used = 0;
  for (size_t i = 0; i < x->n_ring; i++) {
    const Wt__V1__IpcExport *r = x->ring[i];
    if (r->handle.len != WT_IPC_HANDLE_BYTES)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: init_info.ipc.ring[%zu] (id %" PRIu64
              "): handle is %zu bytes; a CUDA IPC handle is %d",
              e->where, i, r->id, r->handle.len, WT_IPC_HANDLE_BYTES);
    if (r->gpu_uuid == NULL || r->gpu_uuid[0] == '\0' ||
        strlen(r->gpu_uuid) >= WT_IPC_UUID_MAX)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: init_info.ipc.ring[%zu] (id %" PRIu64
              "): gpu_uuid is empty or too long",
              e->where, i, r->id);
    if (r->size_bytes < slot_bytes)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: init_info.ipc.ring[%zu] (id %" PRIu64 ") is %" PRIu64
              " bytes; packed_buffer_size_bytes is %" PRIu64,
              e->where, i, r->id, r->size_bytes, slot_bytes);
    for (size_t j = 0; j < i; j++)
      if (x->ring[j]->id == r->id)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "%s: init_info.ipc.ring[%zu]: id %" PRIu64
                " is also ring[%zu]'s",
                e->where, i, r->id, j);
    if (strcmp(r->gpu_uuid, e->uuid) != 0) {
      if (used < sizeof(others) - 1 && strstr(others, r->gpu_uuid) == NULL)
        used += (size_t)snprintf(others + used, sizeof(others) - used, "%s%s",
                                 used ? ", " : "", r->gpu_uuid);
      continue;
    }
    if (e->nring == nslots)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: init_info.ipc.ring has more than packed_num_buffers (%u) "
              "buffers on GPU %s",
              e->where, nslots, e->uuid);
    Wt__V1__IpcExport *k = &e->ring[e->nring];
    wt__v1__ipc_export__init(k);
    k->id = r->id;
    k->size_bytes = r->size_bytes;
    memcpy(e->ring_handles[e->nring], r->handle.data, WT_IPC_HANDLE_BYTES);
    k->handle.data = e->ring_handles[e->nring];
    k->handle.len = WT_IPC_HANDLE_BYTES;
    k->gpu_uuid = e->uuid;
    e->nring++;
  }
  if (e->nring == 0)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: init_info.ipc.ring has no buffer on this worker's GPU %s "
            "(the trainer's ring is on %s); the ipc backend copies from the "
            "trainer's memory on the worker's own GPU",
            e->where, e->uuid, used ? others : "no GPU");
  if (e->nring != nslots)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: init_info.ipc.ring has %zu buffers on GPU %s; "
            "packed_num_buffers is %u",
            e->where, e->nring, e->uuid, nslots);
  for (size_t i = 0; i < e->nring; i++) {
    void *base = NULL;
    WT_CHECK(wt_status_prefix(wt_ipc_cache_get(e->cache, &e->ring[i], &base),
                              "%s: init_info.ipc.ring", e->where));
  }
out:
  if (st != NULL) {
    wt_ipc_cache_close_all(e->cache);
    e->nring = 0;
  }
  return st;
}

static wt_status *ipc_init_transfer(wt_engine *e,
                                    wt_engine_endpoint *endpoint) {
  (void)endpoint; /* nothing to connect: the handles come with the init and
                     each update */
  const Wt__V1__WeightTransferInitInfo *init = e->init;
  e->init = NULL; /* borrowed until this returns */
  const Wt__V1__IpcInitInfo *x =
      init != NULL && init->backend_init_case ==
                          WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_IPC
          ? init->ipc
          : NULL;
  /* A new trainer: nothing of the last one stays mapped. */
  if (!e->copies_in_flight) wt_ipc_cache_close_all(e->cache);
  e->nring = 0;
  if (x == NULL || !x->packed) {
    if (x != NULL && x->n_ring != 0)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "%s: init_info.ipc.ring is set but packed is not",
                           e->where);
    return NULL;
  }
  return take_ring(e, x);
}

/* Waits for the stream's copies, up to timeout_ms or a cancel. */
static wt_status *wait_copies(wt_engine *e, int64_t timeout_ms, size_t n,
                              uint64_t bytes) {
  return wt_status_prefix(
      wt_cuda_stream_wait(e->api, e->stream, timeout_ms, &e->cancelled),
      "%s: the copies of %zu tensors (%" PRIu64 " bytes) from the trainer",
      e->where, n, bytes);
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

/* Keeps the ring open and closes what the last round did not name. */
static void sweep(wt_engine *e) {
  for (size_t i = 0; i < e->nring; i++) {
    void *base = NULL;
    wt_status *st = wt_ipc_cache_get(e->cache, &e->ring[i], &base);
    if (st != NULL) {
      WT_LOGW("ipc", "%s: reopening ring slot %zu: %s", e->where, i,
              wt_status_message(st));
      wt_status_free(st);
    }
  }
  size_t closed = wt_ipc_cache_sweep(e->cache);
  if (closed > 0)
    WT_LOGI("ipc", "%s: closed %zu export(s) the last round did not name",
            e->where, closed);
}

static wt_status *ipc_start_update(wt_engine *e, uint64_t round_id) {
  (void)round_id;
  atomic_store(&e->cancelled, false);
  if (!e->copies_in_flight) {
    sweep(e);
    return NULL;
  }
  /* A failed round's copies must end before this round's bytes land. */
  wt_status *st = wait_copies(e, e->ctx.data_timeout_ms, 0, 0);
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
  WT_CHECK(wait_copies(e, e->ctx.data_timeout_ms, u->n, u->total_bytes));
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
    wt_status *drained = wait_copies(e, IPC_SETTLE_MS, 0, 0);
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
