/* nccl_worker.c: the `nccl` worker engine (NCCL broadcast from the
 * trainer's GPU, rank 0, into this worker's device store; wt/nccl_seam.h).
 *
 * Init: the worker joins the trainer's communicator as rank rank_offset +
 * its index (non-blocking ncclCommInitRankConfig, every rank at once), then
 * the warm-up all-reduce of one float32 that vLLM's peers issue right after
 * the init. Both waits have the init's deadline (init_info.timeout_ms, else
 * the server's default), so a trainer that never comes fails the init
 * within it, naming the wait.
 *
 * Receive, packed (init_info.nccl.packed): the shared bucket plan (vLLM's
 * rule, wt/packing.h) with packed_num_buffers device buffers and as many
 * streams, round-robin (wt_nccl_schedule); bucket b is broadcast into
 * buffer b % n on stream b % n and unpacked on that stream into the
 * staging buffers of its tensors; a buffer is reused only once its stream
 * finished the bucket before. Unpacked: one broadcast per tensor, in update
 * order, straight into its staging buffer, waited for about every
 * packed_buffer_size_bytes. Every wait polls the communicator's state and
 * the stream against the data deadline (wt_nccl_wait).
 *
 * Failure: a deadline, a cancel or an error aborts the communicator
 * (ncclCommAbort, on this worker's thread, nothing else in flight): the
 * round fails, the previous version stays, and since an aborted
 * communicator cannot be used again the engine does not survive the abort:
 * the worker goes to needs_init until the trainer initialises again.
 */

#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backends.h"
#include "wt/clock.h"
#include "wt/cuda.h"
#include "wt/engine.h"
#include "wt/log.h"
#include "wt/memory.h"
#include "backends/nccl/nccl_shared.h"
#include "wt/packing.h"
#include "wt/param_store.h"

struct wt_engine {
  wt_worker_ctx ctx;
  wt_nccl_settings set;
  int rank;
  wt_nccl_rank r; /* the communicator, streams, buffers (nccl_shared.h) */
};

static void nccl_destroy(wt_engine *e) {
  if (e == NULL) return;
  wt_nccl_rank_close(&e->r);
  free(e);
}

static wt_status *nccl_create(const Wt__V1__WeightTransferInitInfo *init,
                              const wt_worker_ctx *ctx, wt_engine **out) {
  wt_status *st = NULL;
  *out = NULL;
  wt_engine *e = calloc(1, sizeof(*e));
  if (e == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "nccl engine (worker %u): out of memory", ctx->rank);
  e->ctx = *ctx;
  char where[128];
  snprintf(where, sizeof(where), "nccl worker %u (%s)", ctx->rank,
           ctx->device_name);
  if (ctx->device.type != WT_DEVICE_CUDA)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "%s: the nccl backend broadcasts GPU to GPU; this worker's store "
            "is on %s (start wt-server with --device cuda:N)",
            where, ctx->device_name);
  WT_CHECK(wt_status_prefix(wt_nccl_check_init(init, ctx->num_workers, &e->set),
                            "%s", where));
  e->rank = wt_nccl_worker_rank(&e->set, ctx->rank);
  snprintf(where, sizeof(where), "nccl worker %u (%s, rank %d of %u)",
           ctx->rank, ctx->device_name, e->rank, e->set.world_size);
  WT_CHECK(wt_nccl_rank_open(&e->r, ctx->device,
                             e->set.packed ? e->set.num_buffers : 1, where,
                             "InitWeightTransferEngine again"));
  *out = e;
  e = NULL;
out:
  nccl_destroy(e);
  return st;
}

static wt_status *nccl_init_transfer(wt_engine *e,
                                     wt_engine_endpoint *endpoint) {
  (void)endpoint; /* the trainer's unique id is the rendezvous */
  wt_status *st = NULL;
  char what[96];
  snprintf(what, sizeof(what), "joining the trainer's communicator (%u ranks)",
           e->set.world_size);
  WT_CHECK(wt_nccl_rank_join(&e->r, e->set.unique_id, e->set.world_size,
                             e->rank, e->ctx.data_timeout_ms, what));
  WT_LOGI("nccl", "%s: joined (%s)", e->r.where, e->r.nccl->name);
out:
  return st;
}

static wt_status *nccl_start_update(wt_engine *e, uint64_t round_id) {
  (void)round_id;
  atomic_store(&e->r.cancelled, false);
  if (e->r.comm == NULL)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "%s: the communicator was aborted; "
                         "InitWeightTransferEngine again",
                         e->r.where);
  return NULL;
}

static wt_status *receive_packed(wt_engine *e, const wt_update *u,
                                 uint64_t buffer_bytes,
                                 wt_receive_stats *stats) {
  wt_status *st = NULL;
  wt_pack_plan *plan = NULL;
  wt_nccl_step *steps = NULL;
  WT_CHECK(wt_pack_plan_build(u->nbytes, u->n, buffer_bytes, &plan));
  WT_CHECK(wt_nccl_schedule(plan, e->set.num_buffers, &steps));
  WT_CHECK(wt_nccl_rank_buffers(&e->r, e->set.num_buffers,
                                plan->max_bucket_bytes, "nccl receive buffer"));
  for (size_t b = 0; b < plan->nbuckets; b++) {
    const wt_nccl_step *s = &steps[b];
    const wt_bucket *bk = &plan->buckets[b];
    void *stream = e->r.streams[s->buffer];
    if (s->waits)
      WT_CHECK(wt_nccl_rank_wait(
          &e->r, stream, e->ctx.data_timeout_ms,
          "bucket %zu (before bucket %zu reuses its buffer)", s->after, b));
    char *buf = e->r.bufs[s->buffer].base;
    WT_CHECK(wt_status_prefix(
        e->r.nccl->broadcast(NULL, buf, bk->nbytes, 0, e->r.comm, stream),
        "%s: bucket %zu", e->r.where, b));
    for (size_t k = bk->first; k < bk->first + bk->count; k++) {
      if (u->nbytes[k] == 0) continue;
      void *dst = wt_param_store_stage(e->ctx.store, u->index[k]);
      WT_CHECK(wt_status_prefix(
          e->r.cuda->copy_async(dst, buf + plan->tensor_offset[k], u->nbytes[k],
                                stream),
          "%s: unpacking bucket %zu", e->r.where, b));
    }
  }
  for (uint32_t i = 0; i < e->set.num_buffers; i++)
    WT_CHECK(wt_nccl_rank_wait(&e->r, e->r.streams[i], e->ctx.data_timeout_ms,
                               "the last buckets (stream %u)", i));
  stats->tensors = u->n;
  stats->bytes = u->total_bytes;
out:
  free(steps);
  wt_pack_plan_free(plan);
  return st;
}

static wt_status *receive_unpacked(wt_engine *e, const wt_update *u,
                                   uint64_t chunk_bytes,
                                   wt_receive_stats *stats) {
  wt_status *st = NULL;
  uint64_t queued = 0;
  for (size_t k = 0; k < u->n; k++) {
    void *dst = wt_param_store_stage(e->ctx.store, u->index[k]);
    /* Zero-byte tensors are broadcast too: both sides call the same
     * sequence of collectives. */
    WT_CHECK(wt_status_prefix(e->r.nccl->broadcast(NULL, dst, u->nbytes[k], 0,
                                                   e->r.comm, e->r.streams[0]),
                              "%s: tensor %zu", e->r.where, k));
    queued += u->nbytes[k];
    if (queued >= chunk_bytes || k + 1 == u->n) {
      WT_CHECK(wt_nccl_rank_wait(&e->r, e->r.streams[0], e->ctx.data_timeout_ms,
                                 "tensors up to %zu of %zu", k + 1, u->n));
      queued = 0;
    }
  }
  stats->tensors = u->n;
  stats->bytes = u->total_bytes;
out:
  return st;
}

static wt_status *nccl_receive(wt_engine *e, const wt_update *u,
                               wt_receive_stats *stats) {
  wt_status *st = NULL;
  if (e->r.comm == NULL)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "%s: the communicator was aborted; "
                         "InitWeightTransferEngine again",
                         e->r.where);
  const Wt__V1__NcclUpdateInfo *x =
      u->info != NULL &&
              u->info->backend_update_case ==
                  WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__BACKEND_UPDATE_NCCL
          ? u->info->nccl
          : NULL;
  uint64_t buffer_bytes = e->set.buffer_bytes;
  if (x != NULL && x->packed_buffer_size_bytes != NULL) {
    if (x->packed_buffer_size_bytes->value == 0)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "%s: update_info.nccl.packed_buffer_size_bytes is 0",
                           e->r.where);
    buffer_bytes = x->packed_buffer_size_bytes->value;
  }
  if (x != NULL && x->packed_num_buffers != NULL &&
      x->packed_num_buffers->value != e->set.num_buffers)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: update_info.nccl.packed_num_buffers is %" PRIu32
                         "; this init has %" PRIu32,
                         e->r.where, x->packed_num_buffers->value,
                         e->set.num_buffers);
  if (u->packed != e->set.packed)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: update_info.packed is %s; this init is %s",
                         e->r.where, u->packed ? "true" : "false",
                         e->set.packed ? "packed" : "unpacked");
  st = u->packed ? receive_packed(e, u, buffer_bytes, stats)
                 : receive_unpacked(e, u, buffer_bytes, stats);
  if (st == NULL)
    for (size_t k = 0; k < u->n; k++)
      wt_param_store_staged(e->ctx.store, u->index[k]);
  return st;
}

static wt_status *nccl_finish_update(wt_engine *e) {
  (void)e;
  return NULL;
}

static void nccl_abort_update(wt_engine *e) {
  /* A round that failed inside a collective aborted the communicator
   * already; one that failed elsewhere (validation) left it intact, but the
   * trainer has sent its broadcasts: nothing can re-align the sequence, so
   * the engine goes (no WT_ENGINE_SURVIVES_ABORT) and the next init starts
   * a new communicator. */
  wt_nccl_rank_abort(&e->r);
  atomic_store(&e->r.cancelled, false);
}

static void nccl_cancel(wt_engine *e) {
  atomic_store(&e->r.cancelled, true);
}

/* CUDA, a device and the NCCL module. */
static wt_status *nccl_probe(void) {
  const wt_cuda_api *cuda = NULL;
  const wt_nccl_api *nccl = NULL;
  wt_status *st = wt_cuda_api_get(&cuda);
  int count = 0;
  if (st == NULL) st = cuda->device_count(&count);
  if (st == NULL && count == 0)
    st = wt_status_new(WT_FAILED_PRECONDITION, "no CUDA device is visible");
  if (st == NULL) st = wt_nccl_api_get(&nccl);
  return st;
}

const wt_engine_ops wt_nccl_engine_ops = {
    .header = {.abi_version = WT_ENGINE_ABI_VERSION, .name = "nccl"},
    .memory_kinds = WT_MEM_BIT(WT_MEM_DEVICE),
    .caps = WT_ENGINE_CROSS_HOST,
    .create = nccl_create,
    .init_transfer = nccl_init_transfer,
    .start_update = nccl_start_update,
    .receive = nccl_receive,
    .finish_update = nccl_finish_update,
    .abort_update = nccl_abort_update,
    .cancel = nccl_cancel,
    .destroy = nccl_destroy,
    .probe = nccl_probe,
};
