/* ipc_trainer.c: the `ipc` trainer engine, unpacked mode (CUDA IPC; the
 * trainer and the workers on one host). Nothing is sent: each worker
 * copies the tensors straight out of the trainer's device memory during
 * UpdateWeights. The trainer exports each distinct allocation that holds a
 * tensor once (cudaIpcGetMemHandle on the allocation's base) and reuses
 * the export, under the same id, in every later round; the update info
 * names, per tensor, its export, its offset in it and the GPU's UUID
 * (wt/ipc.h).
 *
 * The trainer's tensors must not change, nor their memory be freed, until
 * the update returns: the workers read them while UpdateWeights runs.
 * Every CUDA call goes through wt/cuda.h. The packed mode (a ring of
 * trainer buffers) is not implemented yet.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/client.h"
#include "wt/cuda.h"
#include "wt/ipc.h"
#include "wt/log.h"
#include "wt/trainer.h"

/* One exported allocation, kept for the trainer's life. */
typedef struct export_entry {
  Wt__V1__IpcExport pb;
  unsigned char handle[WT_IPC_HANDLE_BYTES];
  char uuid[WT_CUDA_UUID_MAX];
  const char *base;
  uint64_t checked; /* the round in which CUDA last confirmed it */
  bool stale;       /* its allocation went away: never matched again */
} export_entry;

typedef struct ipc_trainer {
  const wt_cuda_api *api;
  export_entry *exports;
  size_t nexports, cap;
  uint64_t next_id;
  uint64_t round; /* rounds built */
  /* This round's update info, shared by every server (built once). */
  Wt__V1__IpcUpdateInfo info;
  Wt__V1__IpcExport **ex_ptrs;
  Wt__V1__IpcTensor *tensors;
  Wt__V1__IpcTensor **tensor_ptrs;
  Wt__V1__IpcPlace *places;
  Wt__V1__IpcPlace **place_ptrs;
  wt_source *built_for;
} ipc_trainer;

static void round_free(ipc_trainer *t) {
  free(t->ex_ptrs);
  free(t->tensors);
  free(t->tensor_ptrs);
  free(t->places);
  free(t->place_ptrs);
  t->ex_ptrs = NULL;
  t->tensors = NULL;
  t->tensor_ptrs = NULL;
  t->places = NULL;
  t->place_ptrs = NULL;
  t->built_for = NULL;
  wt__v1__ipc_update_info__init(&t->info);
}

static void ipc_trainer_destroy(void *self) {
  ipc_trainer *t = self;
  if (t == NULL) return;
  round_free(t);
  free(t->exports);
  free(t);
}

static wt_status *ipc_trainer_init(const wt_trainer_init_args *args,
                                   void **self) {
  wt_status *st = NULL;
  *self = NULL;
  const Wt__V1__WeightTransferInitInfo *init = args->init_info;
  if (init->backend_init_case ==
          WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_IPC &&
      init->ipc != NULL && init->ipc->packed)
    return wt_status_new(WT_UNIMPLEMENTED,
                         "init_info.ipc.packed: the packed ring is not "
                         "implemented yet; use the unpacked mode");
  ipc_trainer *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "ipc trainer: out of memory");
  wt__v1__ipc_update_info__init(&t->info);
  WT_CHECK(wt_status_prefix(wt_cuda_api_get(&t->api), "ipc trainer"));
  if (t->api->version < 2 || t->api->ipc_export == NULL)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "ipc trainer: the CUDA module (%s) has no IPC calls", t->api->name);
  t->next_id = 1;
  *self = t;
  t = NULL;
out:
  ipc_trainer_destroy(t);
  return st;
}

/* The export holding [ptr, ptr + nbytes) of tensor x. A known one is
 * confirmed with CUDA once per round (an allocation freed and another made
 * at the same address has a new handle: it gets a new export, and the old
 * id is never named again); an unknown one is exported. */
static wt_status *export_of(ipc_trainer *t, const wt_source_tensor *x,
                            size_t *index) {
  const char *p = x->data;
  for (size_t i = 0; i < t->nexports; i++) {
    export_entry *e = &t->exports[i];
    if (e->stale || p < e->base || x->nbytes > e->pb.size_bytes ||
        (uint64_t)(p - e->base) > e->pb.size_bytes - x->nbytes)
      continue;
    if (e->checked == t->round) {
      *index = i;
      return NULL;
    }
    unsigned char h[WT_IPC_HANDLE_BYTES];
    void *base = NULL;
    size_t size = 0;
    wt_status *st = t->api->ipc_export(e->base, &base, &size, h);
    if (st == NULL && base == e->base && size == e->pb.size_bytes &&
        memcmp(h, e->handle, sizeof(h)) == 0) {
      e->checked = t->round;
      *index = i;
      return NULL;
    }
    wt_status_free(st);
    e->stale = true;
  }
  if (t->nexports == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 16;
    export_entry *grown = realloc(t->exports, cap * sizeof(*grown));
    if (grown == NULL)
      return wt_status_new(WT_RESOURCE_EXHAUSTED, "ipc trainer: out of memory");
    t->exports = grown;
    t->cap = cap;
  }
  export_entry *e = &t->exports[t->nexports];
  memset(e, 0, sizeof(*e));
  void *base = NULL;
  size_t size = 0;
  wt_status *st = t->api->ipc_export(x->data, &base, &size, e->handle);
  if (st == NULL) st = t->api->device_uuid(x->device.index, e->uuid);
  if (st != NULL)
    return wt_status_prefix(st, "tensor '%s' (cuda:%d)", x->name,
                            x->device.index);
  e->base = base;
  e->checked = t->round;
  wt__v1__ipc_export__init(&e->pb);
  e->pb.id = t->next_id++;
  e->pb.size_bytes = size;
  *index = t->nexports++;
  return NULL;
}

/* Builds the round's update info from `src` (every tensor in device
 * memory, ready once its stream or event is). */
static wt_status *build_round(ipc_trainer *t, wt_source *src) {
  wt_status *st = NULL;
  round_free(t);
  t->round++;
  size_t n = 0;
  (void)wt_source_metas(src, &n);
  size_t alloc = n ? n : 1;
  t->tensors = calloc(alloc, sizeof(*t->tensors));
  t->tensor_ptrs = calloc(alloc, sizeof(*t->tensor_ptrs));
  t->places = calloc(alloc, sizeof(*t->places));
  t->place_ptrs = calloc(alloc, sizeof(*t->place_ptrs));
  bool *used = NULL;
  if (!t->tensors || !t->tensor_ptrs || !t->places || !t->place_ptrs)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "ipc trainer: out of memory for %zu tensors",
            n);
  WT_CHECK(wt_source_rewind(src));
  for (size_t k = 0; k < n; k++) {
    wt_source_tensor x;
    bool done = false;
    WT_CHECK(wt_source_next(src, &x, &done));
    if (done)
      WT_FAIL(WT_INTERNAL, "source ended after %zu of %zu tensors", k, n);
    if (x.kind != WT_MEM_DEVICE || x.data == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "tensor '%s': the ipc backend exports device memory; this "
              "tensor is not in a GPU's memory",
              x.name);
    /* The workers read the bytes as soon as UpdateWeights starts. */
    if (x.cuda_event != NULL)
      WT_CHECK(t->api->event_synchronize(x.cuda_event));
    else if (x.cuda_stream != NULL)
      WT_CHECK(t->api->stream_synchronize(x.cuda_stream));
    size_t e = 0;
    WT_CHECK(export_of(t, &x, &e));
    wt__v1__ipc_place__init(&t->places[k]);
    t->places[k].export_id = t->exports[e].pb.id;
    t->places[k].offset_bytes =
        (uint64_t)((const char *)x.data - t->exports[e].base);
    t->place_ptrs[k] = &t->places[k];
    wt__v1__ipc_tensor__init(&t->tensors[k]);
    t->tensors[k].n_places = 1;
    t->tensors[k].places = &t->place_ptrs[k];
    t->tensor_ptrs[k] = &t->tensors[k];
  }
  /* Only the exports this round names. */
  used = calloc(t->nexports ? t->nexports : 1, sizeof(*used));
  t->ex_ptrs = calloc(t->nexports ? t->nexports : 1, sizeof(*t->ex_ptrs));
  if (used == NULL || t->ex_ptrs == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "ipc trainer: out of memory");
  for (size_t k = 0; k < n; k++)
    for (size_t i = 0; i < t->nexports; i++)
      if (t->exports[i].pb.id == t->places[k].export_id) used[i] = true;
  size_t m = 0;
  for (size_t i = 0; i < t->nexports; i++) {
    if (!used[i]) continue;
    /* Pointers into the entry: set here, after any realloc. */
    t->exports[i].pb.handle.data = t->exports[i].handle;
    t->exports[i].pb.handle.len = WT_IPC_HANDLE_BYTES;
    t->exports[i].pb.gpu_uuid = t->exports[i].uuid;
    t->ex_ptrs[m++] = &t->exports[i].pb;
  }
  t->info.n_exports = m;
  t->info.exports = t->ex_ptrs;
  t->info.n_tensors = n;
  t->info.tensors = t->tensor_ptrs;
  t->built_for = src;
out:
  free(used);
  if (st != NULL) round_free(t);
  return st;
}

static wt_status *ipc_update_info(void *self, wt_source *source, size_t k,
                                  Wt__V1__WeightTransferUpdateInfo *info) {
  ipc_trainer *t = self;
  /* The same info for every server, built for the first. */
  if (k == 0 || t->built_for != source) {
    wt_status *st = build_round(t, source);
    if (st != NULL) return st;
  }
  info->backend_update_case =
      WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__BACKEND_UPDATE_IPC;
  info->ipc = &t->info;
  /* The workers copy each tensor whole: no bucket plan. */
  info->packed = false;
  return NULL;
}

static wt_status *ipc_send_weights(void *self, wt_source *source,
                                   wt_progress_fn progress, void *user) {
  (void)self;
  /* The workers copy during UpdateWeights; nothing moves from here. */
  if (progress != NULL) {
    size_t n = 0;
    (void)wt_source_metas(source, &n);
    wt_progress p = {.tensors_done = n,
                     .tensors_total = n,
                     .bytes_done = wt_source_total_bytes(source),
                     .bytes_total = wt_source_total_bytes(source)};
    progress(&p, user);
  }
  return NULL;
}

const wt_trainer_ops wt_ipc_trainer_ops = {
    .header = {.abi_version = WT_TRAINER_ABI_VERSION, .name = "ipc"},
    .flags = WT_TRAINER_NEEDS_UPDATE_WEIGHTS,
    .memory_kinds = WT_MEM_BIT(WT_MEM_DEVICE),
    .trainer_init = ipc_trainer_init,
    .update_info = ipc_update_info,
    .send_weights = ipc_send_weights,
    .destroy = ipc_trainer_destroy,
};
