/* ipc_trainer.c: the `ipc` trainer engine (CUDA IPC; the trainer and the
 * workers on one host). Nothing is sent over a socket: each worker copies
 * out of the trainer's device memory during UpdateWeights.
 *
 * Unpacked (the default): a round is one UpdateWeights per server whose
 * update info names, per tensor, the export of the allocation that holds
 * it, the offset in it and the GPU's UUID (ipc_shared.h). The trainer exports
 * each distinct allocation once (cudaIpcGetMemHandle on the allocation's
 * base) and reuses the export, under the same id, in every later round.
 * One copy per byte, the worker's.
 *
 * Packed (init_info.ipc.packed): a ring of packed_num_buffers device
 * buffers of packed_buffer_size_bytes each on the trainer's GPU, allocated
 * and exported once at init (init_info.ipc.ring). A round follows the
 * shared bucket plan (wt/packing.h) with one UpdateWeights per bucket and
 * server: bucket b is packed into slot b % n on the trainer's own stream
 * while the workers copy bucket b - 1 out of its slot, and a slot is
 * rewritten only once every server's UpdateWeights of the bucket before
 * returned (wt_ipc_ring). A tensor that would not fit in a slot (the one
 * that closes a bucket past the buffer size) is taken from its own memory,
 * as in the unpacked mode. Two copies per byte, memory bounded by the ring.
 *
 * Either way the trainer's tensors must not change, nor their memory be
 * freed, until the update returns: the workers read them (unpacked), or
 * the trainer packs them, while UpdateWeights runs. Every CUDA call goes
 * through wt/cuda.h, and every wait has the data deadline.
 */

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backends.h"
#include "wt/client.h"
#include "wt/cuda.h"
#include "backends/ipc/ipc_shared.h"
#include "wt/log.h"
#include "wt/packing.h"
#include "wt/parse.h"
#include "wt/trainer.h"

/* One exported allocation, kept for the trainer's life. */
typedef struct export_entry {
  Wt__V1__IpcExport pb;
  unsigned char handle[WT_IPC_HANDLE_BYTES];
  char uuid[WT_CUDA_UUID_MAX];
  const char *base;
  uint64_t checked; /* the round in which CUDA last confirmed it */
  uint64_t listed;  /* the part buffer fill that lists it last */
  bool stale;       /* its allocation went away: never matched again */
} export_entry;

/* One ring slot: a device buffer of the trainer's, exported at init. */
typedef struct ring_slot {
  void *ptr;
  export_entry ex;
} ring_slot;

/* One part of a round: tensors [first, first + count) of the source; the
 * first `packed` of them go into a ring slot (packed mode), the rest are
 * taken from their own memory. */
typedef struct part_plan {
  size_t first, count, packed;
} part_plan;

/* A part's update info, valid until every server finished the part. */
typedef struct part_buf {
  size_t part; /* SIZE_MAX: none */
  Wt__V1__IpcUpdateInfo info;
  Wt__V1__IpcExport **ex_ptrs;
  size_t ex_cap;
  Wt__V1__IpcTensor *tensors;
  Wt__V1__IpcTensor **tensor_ptrs;
  Wt__V1__IpcPlace *places;
  Wt__V1__IpcPlace **place_ptrs;
  uint64_t *sizes;
  size_t cap;
} part_buf;

typedef struct ipc_trainer {
  const wt_cuda_api *api;
  const wt_trainer_ctx *ctx; /* the servers; borrowed, may be NULL */
  int64_t timeout_ms;        /* every wait of a round */
  export_entry **exports;    /* each its own allocation: pointers stay valid */
  size_t nexports, cap;
  uint64_t next_id;
  uint64_t round; /* rounds planned */
  atomic_bool cancelled;

  /* Packed mode. */
  bool packed;
  uint64_t slot_bytes;
  uint32_t nslots;
  int device;   /* the ring's GPU */
  void *stream; /* the trainer's packing stream */
  ring_slot *slots;
  Wt__V1__IpcExport **ring_ptrs;
  Wt__V1__IpcInitInfo init_copy; /* what server_init_info sends */
  wt_ipc_ring ring;

  /* This round's plan: parts, and one buffer per slot (unpacked: one). */
  wt_pack_plan *plan;
  part_plan *parts;
  size_t nparts;
  part_buf *bufs;
  size_t nbufs;
  wt_source *src;
  size_t next_tensor; /* the source's iteration, as prepare_part left it */
  uint64_t fills;     /* part buffers filled, ever (export_entry.listed) */
} ipc_trainer;

static void buf_free(part_buf *b) {
  free(b->ex_ptrs);
  free(b->tensors);
  free(b->tensor_ptrs);
  free(b->places);
  free(b->place_ptrs);
  free(b->sizes);
  memset(b, 0, sizeof(*b));
  b->part = SIZE_MAX;
}

/* Room for n tensors and m exports in b. */
static wt_status *buf_reserve(part_buf *b, size_t n, size_t m) {
  if (n > b->cap) {
    part_buf g = *b;
    g.tensors = realloc(b->tensors, n * sizeof(*g.tensors));
    if (g.tensors) b->tensors = g.tensors;
    g.tensor_ptrs = realloc(b->tensor_ptrs, n * sizeof(*g.tensor_ptrs));
    if (g.tensor_ptrs) b->tensor_ptrs = g.tensor_ptrs;
    g.places = realloc(b->places, n * sizeof(*g.places));
    if (g.places) b->places = g.places;
    g.place_ptrs = realloc(b->place_ptrs, n * sizeof(*g.place_ptrs));
    if (g.place_ptrs) b->place_ptrs = g.place_ptrs;
    g.sizes = realloc(b->sizes, n * sizeof(*g.sizes));
    if (g.sizes) b->sizes = g.sizes;
    if (!g.tensors || !g.tensor_ptrs || !g.places || !g.place_ptrs || !g.sizes)
      return wt_status_new(WT_RESOURCE_EXHAUSTED,
                           "ipc trainer: out of memory for %zu tensors", n);
    b->cap = n;
  }
  if (m > b->ex_cap) {
    Wt__V1__IpcExport **e = realloc(b->ex_ptrs, m * sizeof(*e));
    if (e == NULL)
      return wt_status_new(WT_RESOURCE_EXHAUSTED, "ipc trainer: out of memory");
    b->ex_ptrs = e;
    b->ex_cap = m;
  }
  return NULL;
}

static void round_free(ipc_trainer *t) {
  for (size_t i = 0; i < t->nbufs; i++) buf_free(&t->bufs[i]);
  free(t->bufs);
  free(t->parts);
  wt_pack_plan_free(t->plan);
  t->bufs = NULL;
  t->nbufs = 0;
  t->parts = NULL;
  t->nparts = 0;
  t->plan = NULL;
  t->src = NULL;
}

static void ipc_trainer_destroy(void *self) {
  ipc_trainer *t = self;
  if (t == NULL) return;
  round_free(t);
  wt_ipc_ring_clear(&t->ring);
  if (t->slots != NULL) {
    wt_status *b = wt_cuda_bind(t->device);
    wt_status_free(b);
    for (uint32_t s = 0; s < t->nslots; s++)
      if (t->slots[s].ptr != NULL)
        t->api->device_free(t->device, t->slots[s].ptr);
  }
  if (t->stream != NULL) t->api->stream_destroy(t->stream);
  free(t->slots);
  free(t->ring_ptrs);
  for (size_t i = 0; i < t->nexports; i++) free(t->exports[i]);
  free(t->exports);
  free(t);
}

/* The ring on `device`: nslots buffers allocated, exported, listed in the
 * init info every server gets. */
static wt_status *ring_create(ipc_trainer *t) {
  wt_status *st = NULL;
  WT_CHECK(wt_status_prefix(wt_cuda_bind(t->device), "ipc trainer: cuda:%d",
                            t->device));
  t->slots = calloc(t->nslots, sizeof(*t->slots));
  t->ring_ptrs = calloc(t->nslots, sizeof(*t->ring_ptrs));
  if (t->slots == NULL || t->ring_ptrs == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "ipc trainer: out of memory");
  char uuid[WT_CUDA_UUID_MAX];
  WT_CHECK(wt_status_prefix(t->api->device_uuid(t->device, uuid),
                            "ipc trainer: cuda:%d", t->device));
  for (uint32_t s = 0; s < t->nslots; s++) {
    ring_slot *r = &t->slots[s];
    WT_CHECK(wt_status_prefix(
        t->api->device_alloc(t->device, t->slot_bytes, &r->ptr),
        "init_info.ipc: ring slot %u of %u (%" PRIu64 " bytes on cuda:%d)",
        s + 1, t->nslots, t->slot_bytes, t->device));
    void *base = NULL;
    size_t size = 0;
    WT_CHECK(
        wt_status_prefix(t->api->ipc_export(r->ptr, &base, &size, r->ex.handle),
                         "init_info.ipc: exporting ring slot %u", s + 1));
    if (base != r->ptr || size < t->slot_bytes)
      WT_FAIL(WT_INTERNAL,
              "init_info.ipc: ring slot %u: CUDA says its allocation is %zu "
              "bytes at another address",
              s + 1, size);
    memcpy(r->ex.uuid, uuid, sizeof(uuid));
    r->ex.base = r->ptr;
    wt__v1__ipc_export__init(&r->ex.pb);
    r->ex.pb.id = t->next_id++;
    r->ex.pb.handle.data = r->ex.handle;
    r->ex.pb.handle.len = WT_IPC_HANDLE_BYTES;
    r->ex.pb.gpu_uuid = r->ex.uuid;
    r->ex.pb.size_bytes = t->slot_bytes;
    t->ring_ptrs[s] = &r->ex.pb;
  }
  WT_CHECK(wt_status_prefix(t->api->stream_create(t->device, &t->stream),
                            "ipc trainer: cuda:%d", t->device));
out:
  return st;
}

static wt_status *ipc_trainer_init(const wt_trainer_init_args *args,
                                   void **self) {
  wt_status *st = NULL;
  *self = NULL;
  const Wt__V1__WeightTransferInitInfo *init = args->init_info;
  const Wt__V1__IpcInitInfo *x =
      init->backend_init_case ==
              WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_IPC
          ? init->ipc
          : NULL;
  ipc_trainer *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "ipc trainer: out of memory");
  atomic_init(&t->cancelled, false);
  t->ctx = args->ctx;
  t->timeout_ms = args->data_timeout_ms;
  WT_CHECK(wt_status_prefix(wt_cuda_api_get(&t->api), "ipc trainer"));
  if (t->api->version < 2 || t->api->ipc_export == NULL)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "ipc trainer: the CUDA module (%s) has no IPC calls", t->api->name);
  t->next_id = 1;
  if (x != NULL && x->packed) {
    t->packed = true;
    WT_CHECK(wt_ipc_ring_settings(x, &t->slot_bytes, &t->nslots));
    if (x->n_ring != 0)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "init_info.ipc.ring: the trainer engine makes the ring; leave "
              "it empty");
    WT_CHECK(wt_status_prefix(wt_source_gpu(args->source, &t->device),
                              "ipc trainer"));
    WT_CHECK(ring_create(t));
    t->init_copy = *x;
    t->init_copy.n_ring = t->nslots;
    t->init_copy.ring = t->ring_ptrs;
  }
  *self = t;
  t = NULL;
out:
  ipc_trainer_destroy(t);
  return st;
}

static wt_status *ipc_server_init_info(void *self, size_t k,
                                       Wt__V1__WeightTransferInitInfo *info) {
  ipc_trainer *t = self;
  (void)k;
  /* The ring, the same for every server. */
  if (t->packed) info->ipc = &t->init_copy;
  return NULL;
}

/* The export holding [ptr, ptr + nbytes) of tensor x. A known one is
 * confirmed with CUDA once per round (an allocation freed and another made
 * at the same address has a new handle: it gets a new export, and the old
 * id is never named again); an unknown one is exported. */
static wt_status *export_of(ipc_trainer *t, const wt_source_tensor *x,
                            export_entry **out) {
  const char *p = x->data;
  for (size_t i = 0; i < t->nexports; i++) {
    export_entry *e = t->exports[i];
    if (e->stale || p < e->base || x->nbytes > e->pb.size_bytes ||
        (uint64_t)(p - e->base) > e->pb.size_bytes - x->nbytes)
      continue;
    if (e->checked == t->round) {
      *out = e;
      return NULL;
    }
    unsigned char h[WT_IPC_HANDLE_BYTES];
    void *base = NULL;
    size_t size = 0;
    wt_status *st = t->api->ipc_export(e->base, &base, &size, h);
    if (st == NULL && base == e->base && size == e->pb.size_bytes &&
        memcmp(h, e->handle, sizeof(h)) == 0) {
      e->checked = t->round;
      *out = e;
      return NULL;
    }
    wt_status_free(st);
    e->stale = true;
  }
  if (t->nexports == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 16;
    export_entry **grown = realloc(t->exports, cap * sizeof(*grown));
    if (grown == NULL)
      return wt_status_new(WT_RESOURCE_EXHAUSTED, "ipc trainer: out of memory");
    t->exports = grown;
    t->cap = cap;
  }
  export_entry *e = calloc(1, sizeof(*e));
  if (e == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "ipc trainer: out of memory");
  void *base = NULL;
  size_t size = 0;
  wt_status *st = t->api->ipc_export(x->data, &base, &size, e->handle);
  if (st == NULL) st = t->api->device_uuid(x->device.index, e->uuid);
  if (st != NULL) {
    free(e);
    return wt_status_prefix(st, "tensor '%s' (cuda:%d)", x->name,
                            x->device.index);
  }
  e->base = base;
  e->checked = t->round;
  wt__v1__ipc_export__init(&e->pb);
  e->pb.id = t->next_id++;
  e->pb.size_bytes = size;
  t->exports[t->nexports++] = e;
  *out = e;
  return NULL;
}

/* Plans the round: one part (unpacked), or one per bucket of the plan. */
static wt_status *ipc_parts(void *self, wt_source *src, size_t *nparts) {
  ipc_trainer *t = self;
  wt_status *st = NULL;
  round_free(t);
  t->round++;
  atomic_store(&t->cancelled, false);
  /* Exports the last round did not name are forgotten, as the workers
   * forget them (wt_ipc_cache_sweep): a trainer that allocates its tensors
   * anew every step does not grow a list, nor keep old memory mapped. */
  size_t kept = 0;
  for (size_t i = 0; i < t->nexports; i++) {
    export_entry *e = t->exports[i];
    if (e->stale || e->checked + 1 < t->round)
      free(e);
    else
      t->exports[kept++] = e;
  }
  t->nexports = kept;
  size_t n = 0;
  const wt_tensor_meta *metas = wt_source_metas(src, &n);
  if (t->packed) {
    WT_CHECK(wt_pack_plan_from_metas(metas, n, t->slot_bytes, &t->plan));
    t->nparts = t->plan->nbuckets ? t->plan->nbuckets : 1;
  } else {
    t->nparts = 1;
  }
  t->nbufs = t->packed ? t->nslots : 1;
  t->parts = calloc(t->nparts, sizeof(*t->parts));
  t->bufs = calloc(t->nbufs, sizeof(*t->bufs));
  if (t->parts == NULL || t->bufs == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED,
            "ipc trainer: out of memory for a plan of %zu parts", t->nparts);
  for (size_t i = 0; i < t->nbufs; i++) t->bufs[i].part = SIZE_MAX;
  if (t->packed && t->plan->nbuckets > 0) {
    for (size_t b = 0; b < t->plan->nbuckets; b++) {
      const wt_bucket *bk = &t->plan->buckets[b];
      part_plan *pp = &t->parts[b];
      pp->first = bk->first;
      pp->count = bk->count;
      /* What fits in a slot at its planned offset; only the tensor that
       * closed the bucket past the buffer size can be left over. */
      while (pp->packed < pp->count) {
        size_t i = pp->first + pp->packed;
        if (t->plan->tensor_offset[i] + metas[i].nbytes > t->slot_bytes) break;
        pp->packed++;
      }
    }
  } else {
    t->parts[0].first = 0;
    t->parts[0].count = t->packed ? 0 : n;
  }
  if (t->packed) {
    /* The packing stream's GPU, for the thread that runs the round. */
    WT_CHECK(wt_status_prefix(wt_cuda_bind(t->device), "ipc trainer"));
    uint32_t servers = t->ctx ? (uint32_t)t->ctx->nservers : 1;
    wt_ipc_ring_clear(&t->ring);
    WT_CHECK(wt_ipc_ring_init(&t->ring, t->nslots, servers ? servers : 1));
  }
  WT_CHECK(wt_source_rewind(src));
  t->src = src;
  t->next_tensor = 0;
  *nparts = t->nparts;
out:
  if (st != NULL) round_free(t);
  return st;
}

/* Waits for the packing stream, up to the deadline or a cancel. */
static wt_status *wait_stream(ipc_trainer *t, size_t part, uint64_t bytes) {
  return wt_status_prefix(
      wt_cuda_stream_wait(t->api, t->stream, t->timeout_ms, &t->cancelled),
      "ipc trainer: packing bucket %zu (%" PRIu64 " bytes) into the ring", part,
      bytes);
}

/* Adds e to b's exports unless this fill listed it already. */
static void buf_add_export(ipc_trainer *t, part_buf *b, export_entry *e) {
  if (e->listed == t->fills) return;
  e->listed = t->fills;
  e->pb.handle.data = e->handle;
  e->pb.handle.len = WT_IPC_HANDLE_BYTES;
  e->pb.gpu_uuid = e->uuid;
  b->ex_ptrs[b->info.n_exports++] = &e->pb;
}

static wt_status *ipc_prepare_part(void *self, wt_source *src, size_t part) {
  ipc_trainer *t = self;
  wt_status *st = NULL;
  if (src != t->src || part >= t->nparts)
    return wt_status_new(WT_INTERNAL,
                         "ipc trainer: part %zu of a round not planned", part);
  const part_plan *pp = &t->parts[part];
  size_t slot = t->packed ? part % t->nslots : 0;
  part_buf *b = &t->bufs[slot];
  if (t->packed && !wt_ipc_ring_writable(&t->ring, part))
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "ipc trainer: ring slot %zu still holds bucket %zu "
                         "for a worker",
                         slot, part - t->nslots);
  /* An export can be needed per tensor (unpacked), plus the slot. */
  WT_CHECK(buf_reserve(b, pp->count ? pp->count : 1, pp->count + 1));
  b->part = SIZE_MAX;
  t->fills++;
  wt__v1__ipc_update_info__init(&b->info);
  b->info.exports = b->ex_ptrs;
  if (t->packed) buf_add_export(t, b, &t->slots[slot].ex);
  if (t->next_tensor != pp->first)
    WT_FAIL(WT_INTERNAL, "ipc trainer: part %zu starts at tensor %zu, not %zu",
            part, pp->first, t->next_tensor);
  uint64_t packed_bytes = 0;
  bool queued = false;
  for (size_t j = 0; j < pp->count; j++) {
    size_t i = pp->first + j;
    wt_source_tensor x;
    bool done = false;
    WT_CHECK(wt_source_next(src, &x, &done));
    t->next_tensor++;
    if (done) WT_FAIL(WT_INTERNAL, "source ended after %zu tensors", i);
    if (x.kind != WT_MEM_DEVICE || x.data == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "tensor '%s': the ipc backend exports device memory; this "
              "tensor is not in a GPU's memory",
              x.name);
    /* Read as soon as UpdateWeights starts (unpacked), or packed now. */
    if (x.cuda_event != NULL)
      WT_CHECK(t->api->event_synchronize(x.cuda_event));
    else if (x.cuda_stream != NULL)
      WT_CHECK(t->api->stream_synchronize(x.cuda_stream));
    Wt__V1__IpcPlace *pl = &b->places[j];
    wt__v1__ipc_place__init(pl);
    if (j < pp->packed) {
      uint64_t off = t->plan->tensor_offset[i];
      pl->export_id = t->slots[slot].ex.pb.id;
      pl->offset_bytes = off;
      if (x.nbytes > 0) {
        WT_CHECK(wt_status_prefix(
            t->api->copy_async((char *)t->slots[slot].ptr + off, x.data,
                               x.nbytes, t->stream),
            "ipc trainer: packing tensor '%s'", x.name));
        queued = true;
      }
      packed_bytes += x.nbytes;
    } else {
      export_entry *e = NULL;
      WT_CHECK(export_of(t, &x, &e));
      pl->export_id = e->pb.id;
      pl->offset_bytes = (uint64_t)((const char *)x.data - e->base);
      buf_add_export(t, b, e);
    }
    b->place_ptrs[j] = pl;
    wt__v1__ipc_tensor__init(&b->tensors[j]);
    b->tensors[j].n_places = 1;
    b->tensors[j].places = &b->place_ptrs[j];
    b->tensor_ptrs[j] = &b->tensors[j];
    b->sizes[j] = x.nbytes;
  }
  if (queued) WT_CHECK(wait_stream(t, part, packed_bytes));
  if (t->packed) WT_CHECK(wt_ipc_ring_written(&t->ring, part));
  b->info.n_tensors = pp->count;
  b->info.tensors = b->tensor_ptrs;
  b->part = part;
out:
  return st;
}

static wt_status *ipc_part_info(void *self, wt_source *src, size_t part,
                                size_t k,
                                Wt__V1__WeightTransferUpdateInfo *info) {
  ipc_trainer *t = self;
  (void)k;
  part_buf *b = &t->bufs[t->packed ? part % t->nslots : 0];
  if (src != t->src || part >= t->nparts || b->part != part)
    return wt_status_new(WT_INTERNAL, "ipc trainer: part %zu not prepared",
                         part);
  const part_plan *pp = &t->parts[part];
  info->names += pp->first;
  info->dtype_names += pp->first;
  info->shapes += pp->first;
  info->n_names = info->n_dtype_names = info->n_shapes = pp->count;
  info->backend_update_case =
      WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__BACKEND_UPDATE_IPC;
  info->ipc = &b->info;
  /* Packed: the bucket's sizes, as vLLM's tensor_sizes; the worker checks
   * them against its own metadata. */
  info->packed = t->packed;
  if (t->packed) {
    info->n_packed_tensor_sizes = pp->count;
    info->packed_tensor_sizes = b->sizes;
  }
  return NULL;
}

static void ipc_part_done(void *self, size_t part, size_t k) {
  ipc_trainer *t = self;
  if (!t->packed) return;
  wt_status *st = wt_ipc_ring_copied(&t->ring, part);
  if (st != NULL) {
    WT_LOGW("ipc", "trainer: server %zu, bucket %zu: %s", k, part,
            wt_status_message(st));
    wt_status_free(st);
  }
}

static void ipc_cancel(void *self) {
  ipc_trainer *t = self;
  atomic_store(&t->cancelled, true);
}

static wt_status *ipc_init_info(const wt_backend_option *opts, size_t n,
                                Wt__V1__WeightTransferInitInfo *info) {
  Wt__V1__IpcInitInfo *x = malloc(sizeof(*x));
  if (x == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
  wt__v1__ipc_init_info__init(x);
  info->backend_init_case = WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_IPC;
  info->ipc = x;
  for (size_t i = 0; i < n; i++) {
    wt_status *st =
        wt_option_packing("ipc", &opts[i], &x->packed,
                          &x->packed_buffer_size_bytes, &x->packed_num_buffers);
    if (st != NULL) return st;
  }
  return NULL;
}

const wt_trainer_ops wt_ipc_trainer_ops = {
    .header = {.abi_version = WT_TRAINER_ABI_VERSION, .name = "ipc"},
    .flags = WT_TRAINER_NEEDS_UPDATE_WEIGHTS,
    .memory_kinds = WT_MEM_BIT(WT_MEM_DEVICE),
    .init_info = ipc_init_info,
    .trainer_init = ipc_trainer_init,
    .server_init_info = ipc_server_init_info,
    .cancel = ipc_cancel,
    .destroy = ipc_trainer_destroy,
    .parts = ipc_parts,
    .prepare_part = ipc_prepare_part,
    .part_info = ipc_part_info,
    .part_done = ipc_part_done,
};
