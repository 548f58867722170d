/* nccl_trainer.c: the `nccl` trainer engine: rank 0 of an NCCL
 * communicator with every worker of every server, broadcasting the
 * trainer's device tensors (wt/nccl_seam.h).
 *
 * Rendezvous, as vLLM's unique-id path: trainer_init draws the ncclUniqueId
 * (ncclGetUniqueId); server_init_info puts its 128 bytes in every server's
 * init_info.nccl (world_size and rank_offset are the client's); connect,
 * while every server's InitWeightTransferEngine is pending, joins as rank 0
 * (non-blocking) and runs the warm-up all-reduce of one float32 that every
 * vLLM peer issues right after the init. Both waits have the connect
 * deadline.
 *
 * A round: packed, the shared bucket plan with packed_num_buffers device
 * buffers on the trainer's GPU and as many streams, round-robin
 * (wt_nccl_schedule): bucket b is packed (device to device) into buffer
 * b % n on stream b % n and broadcast from it on that stream, and a buffer
 * is reused only once its stream finished the bucket before. Unpacked: one
 * broadcast per tensor, in update order, straight from the trainer's
 * tensors. The trainer's tensors must not change until the update returns.
 *
 * Failure: every wait has the data deadline and the cancel; a deadline, a
 * cancel or an error aborts the communicator (wt_nccl_wait), the round fails
 * on every server, and the engine needs a new init (init_transfer again).
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
#include "wt/client.h"
#include "wt/cuda.h"
#include "wt/log.h"
#include "wt/memory.h"
#include "backends/nccl/nccl_shared.h"
#include "wt/packing.h"
#include "wt/trainer.h"

typedef struct nccl_trainer {
  const wt_trainer_ctx *ctx; /* the servers; borrowed, may be NULL */
  int64_t timeout_ms, connect_timeout_ms;
  bool packed;
  uint64_t buffer_bytes;
  uint32_t num_buffers;
  unsigned char id[WT_NCCL_UNIQUE_ID_BYTES];
  uint32_t world;
  bool joined;
  wt_nccl_rank r; /* rank 0: communicator, streams, buffers (nccl_shared.h) */
  /* What every server's init and update info carry. */
  Wt__V1__NcclInitInfo init_copy;
  Wt__V1__NcclUpdateInfo uinfo;
  Wt__V1__UInt64Value ubuf;
  Wt__V1__UInt32Value unum;
} nccl_trainer;

static void nccl_trainer_destroy(void *self) {
  nccl_trainer *t = self;
  if (t == NULL) return;
  wt_nccl_rank_close(&t->r);
  free(t);
}

static wt_status *nccl_trainer_init(const wt_trainer_init_args *args,
                                    void **self) {
  wt_status *st = NULL;
  *self = NULL;
  const Wt__V1__WeightTransferInitInfo *init = args->init_info;
  nccl_trainer *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "nccl trainer: out of memory");
  t->ctx = args->ctx;
  const Wt__V1__NcclInitInfo *x =
      init->backend_init_case ==
              WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_NCCL
          ? init->nccl
          : NULL;
  if (x != NULL && x->nccl_unique_id.len != 0)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "init_info.nccl.nccl_unique_id: the trainer engine draws it; "
            "leave it empty");
  t->packed = x != NULL && x->packed;
  WT_CHECK(wt_nccl_packing(x, &t->buffer_bytes, &t->num_buffers));
  t->timeout_ms = args->data_timeout_ms;
  /* Joining waits for every worker's start, too. */
  t->connect_timeout_ms = t->timeout_ms > 10000 ? t->timeout_ms : 10000;
  /* Rank 0 on the source's GPU, else the calling thread's. */
  int device = 0;
  WT_CHECK(
      wt_status_prefix(wt_source_gpu(args->source, &device), "nccl trainer"));
  WT_CHECK(wt_status_prefix(wt_cuda_bind(device), "nccl trainer"));
  WT_CHECK(wt_nccl_rank_open(
      &t->r, (wt_device){.type = WT_DEVICE_CUDA, .index = device},
      t->packed ? t->num_buffers : 1, "nccl trainer", "init_transfer again"));
  WT_CHECK(wt_status_prefix(t->r.nccl->get_unique_id(t->id), "nccl trainer"));
  if (x != NULL)
    t->init_copy = *x;
  else
    wt__v1__nccl_init_info__init(&t->init_copy);
  t->init_copy.nccl_unique_id.data = t->id;
  t->init_copy.nccl_unique_id.len = WT_NCCL_UNIQUE_ID_BYTES;
  wt__v1__nccl_update_info__init(&t->uinfo);
  wt__v1__uint64_value__init(&t->ubuf);
  wt__v1__uint32_value__init(&t->unum);
  t->ubuf.value = t->buffer_bytes;
  t->unum.value = t->num_buffers;
  t->uinfo.packed_buffer_size_bytes = &t->ubuf;
  t->uinfo.packed_num_buffers = &t->unum;
  *self = t;
  t = NULL;
out:
  nccl_trainer_destroy(t);
  return st;
}

static wt_status *nccl_server_init_info(void *self, size_t k,
                                        Wt__V1__WeightTransferInitInfo *info) {
  nccl_trainer *t = self;
  (void)k;
  info->backend_init_case =
      WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_NCCL;
  info->nccl = &t->init_copy;
  t->world = info->world_size; /* the client's, the same for every server */
  return NULL;
}

static wt_status *nccl_connect(void *self) {
  nccl_trainer *t = self;
  wt_status *st = NULL;
  if (t->world < 2)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "nccl trainer: world size %u (no worker)", t->world);
  snprintf(t->r.where, sizeof(t->r.where), "nccl trainer (rank 0 of %u)",
           t->world);
  WT_CHECK(wt_status_prefix(wt_cuda_bind(t->r.device.index), "nccl trainer"));
  char what[96];
  snprintf(what, sizeof(what), "waiting for the %u worker(s) to join",
           t->world - 1);
  /* Joining waits for every worker's start, too. */
  WT_CHECK(wt_nccl_rank_join(&t->r, t->id, t->world, 0, t->connect_timeout_ms,
                             what));
  t->joined = true;
  WT_LOGI("nccl", "trainer: rank 0 of %u joined (%s)", t->world,
          t->r.nccl->name);
out:
  return st;
}

static wt_status *nccl_update_info(void *self, wt_source *source, size_t k,
                                   Wt__V1__WeightTransferUpdateInfo *info) {
  nccl_trainer *t = self;
  (void)source;
  (void)k;
  info->backend_update_case =
      WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__BACKEND_UPDATE_NCCL;
  info->nccl = &t->uinfo;
  info->packed = t->packed;
  return NULL;
}

/* The next tensor of the source, in device memory and ready. */
static wt_status *next_tensor(wt_source *src, size_t k, wt_source_tensor *x) {
  bool done = false;
  wt_status *st = wt_source_next(src, x, &done);
  if (st != NULL) return st;
  if (done)
    return wt_status_new(WT_INTERNAL, "source ended before tensor %zu", k);
  if (x->kind != WT_MEM_DEVICE || (x->data == NULL && x->nbytes > 0))
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "tensor '%s': the nccl backend broadcasts from GPU "
                         "memory; this tensor is not in a GPU's memory",
                         x->name);
  return wt_source_tensor_ready(x);
}

static wt_status *send_packed(nccl_trainer *t, wt_source *src,
                              wt_progress_fn progress, void *user) {
  wt_status *st = NULL;
  wt_pack_plan *plan = NULL;
  wt_nccl_step *steps = NULL;
  size_t n = 0;
  const wt_tensor_meta *metas = wt_source_metas(src, &n);
  wt_progress pr = {.tensors_total = n,
                    .bytes_total = wt_source_total_bytes(src)};
  WT_CHECK(wt_pack_plan_from_metas(metas, n, t->buffer_bytes, &plan));
  WT_CHECK(wt_nccl_schedule(plan, t->num_buffers, &steps));
  WT_CHECK(wt_nccl_rank_buffers(&t->r, t->num_buffers, plan->max_bucket_bytes,
                                "nccl send buffer"));
  for (size_t b = 0; b < plan->nbuckets; b++) {
    const wt_nccl_step *s = &steps[b];
    const wt_bucket *bk = &plan->buckets[b];
    void *stream = t->r.streams[s->buffer];
    if (s->waits) {
      WT_CHECK(wt_nccl_rank_wait(
          &t->r, stream, t->timeout_ms,
          "bucket %zu (before bucket %zu reuses its buffer)", s->after, b));
      pr.tensors_done += plan->buckets[s->after].count;
      pr.bytes_done += plan->buckets[s->after].nbytes;
      if (progress) progress(&pr, user);
    }
    char *buf = t->r.bufs[s->buffer].base;
    for (size_t k = bk->first; k < bk->first + bk->count; k++) {
      wt_source_tensor x;
      WT_CHECK(next_tensor(src, k, &x));
      if (x.nbytes == 0) continue;
      WT_CHECK(
          wt_status_prefix(t->r.cuda->copy_async(buf + plan->tensor_offset[k],
                                                 x.data, x.nbytes, stream),
                           "nccl trainer: packing tensor '%s'", x.name));
    }
    WT_CHECK(wt_status_prefix(
        t->r.nccl->broadcast(buf, buf, bk->nbytes, 0, t->r.comm, stream),
        "nccl trainer: bucket %zu", b));
  }
  for (uint32_t i = 0; i < t->num_buffers; i++)
    WT_CHECK(wt_nccl_rank_wait(&t->r, t->r.streams[i], t->timeout_ms,
                               "the last buckets (stream %u)", i));
out:
  free(steps);
  wt_pack_plan_free(plan);
  return st;
}

static wt_status *send_unpacked(nccl_trainer *t, wt_source *src) {
  wt_status *st = NULL;
  size_t n = 0;
  (void)wt_source_metas(src, &n);
  uint64_t queued = 0;
  for (size_t k = 0; k < n; k++) {
    wt_source_tensor x;
    WT_CHECK(next_tensor(src, k, &x));
    WT_CHECK(
        wt_status_prefix(t->r.nccl->broadcast(x.data, (void *)x.data, x.nbytes,
                                              0, t->r.comm, t->r.streams[0]),
                         "nccl trainer: tensor '%s'", x.name));
    queued += x.nbytes;
    /* The workers wait about every buffer's worth; so does the trainer. */
    if (queued >= t->buffer_bytes || k + 1 == n) {
      WT_CHECK(wt_nccl_rank_wait(&t->r, t->r.streams[0], t->timeout_ms,
                                 "tensors up to %zu of %zu", k + 1, n));
      queued = 0;
    }
  }
out:
  return st;
}

static wt_status *nccl_send_weights(void *self, wt_source *source,
                                    wt_progress_fn progress, void *user) {
  nccl_trainer *t = self;
  wt_status *st = NULL;
  atomic_store(&t->r.cancelled, false);
  if (t->r.comm == NULL || !t->joined)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "nccl trainer: no communicator (it was aborted, or "
                         "never joined); init_transfer again");
  WT_CHECK(wt_status_prefix(wt_cuda_bind(t->r.device.index), "nccl trainer"));
  WT_CHECK(wt_source_rewind(source));
  WT_CHECK(t->packed ? send_packed(t, source, progress, user)
                     : send_unpacked(t, source));
  if (progress != NULL) {
    size_t n = 0;
    (void)wt_source_metas(source, &n);
    wt_progress p = {.tensors_done = n,
                     .tensors_total = n,
                     .bytes_done = wt_source_total_bytes(source),
                     .bytes_total = wt_source_total_bytes(source)};
    progress(&p, user);
  }
out:
  /* Failed outside a wait (a bad tensor): the workers are inside
   * collectives the trainer will not join; only an abort ends them. */
  if (st != NULL) wt_nccl_rank_abort(&t->r);
  return st;
}

static void nccl_trainer_cancel(void *self) {
  nccl_trainer *t = self;
  atomic_store(&t->r.cancelled, true);
}

static wt_status *nccl_init_info(const wt_backend_option *opts, size_t n,
                                 Wt__V1__WeightTransferInitInfo *info) {
  Wt__V1__NcclInitInfo *x = malloc(sizeof(*x));
  if (x == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
  wt__v1__nccl_init_info__init(x);
  info->backend_init_case =
      WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_NCCL;
  info->nccl = x;
  for (size_t i = 0; i < n; i++) {
    wt_status *st =
        wt_option_packing("nccl", &opts[i], &x->packed,
                          &x->packed_buffer_size_bytes, &x->packed_num_buffers);
    if (st != NULL) return st;
  }
  return NULL;
}

const wt_trainer_ops wt_nccl_trainer_ops = {
    .header = {.abi_version = WT_TRAINER_ABI_VERSION, .name = "nccl"},
    .flags = WT_TRAINER_NEEDS_UPDATE_WEIGHTS,
    .memory_kinds = WT_MEM_BIT(WT_MEM_DEVICE),
    .init_info = nccl_init_info,
    .trainer_init = nccl_trainer_init,
    .server_init_info = nccl_server_init_info,
    .connect = nccl_connect,
    .update_info = nccl_update_info,
    .send_weights = nccl_send_weights,
    .cancel = nccl_trainer_cancel,
    .destroy = nccl_trainer_destroy,
};
