/* grpc_worker.c: the `grpc` worker engine. Its bytes arrive inside the
 * control channel, as PushWeights chunks of the shared bucket plan; each
 * chunk is checked against the plan and copied straight into the staging
 * buffers of the tensors it covers (no bucket buffer in between), in any
 * memory kind (wt_param_store_stage_write).
 *
 * Init info (GrpcInitInfo), read as the trainer reads it
 * (wt_grpc_init_settings_read, wt/chunk.h): chunk_size_bytes (unset: 1 MiB;
 * at most the server's message limit less framing) bounds every chunk;
 * packed_buffer_size_bytes (unset: 64 MiB) is the bucket size a push uses
 * when its header says 0. There is no receive op: UpdateWeights is for
 * backends that move data outside the control channel.
 *
 * A shard plan's push (docs/multirank.md): tensor k of the push is a box
 * of its tensor (wt_update.boxes), whose dense bytes land through the
 * box's runs (wt_box_runs); the tensor counts as staged once its boxes'
 * bytes, from every rank's push, add up to it.
 *
 * Delta pushes (docs/delta.md, wt/delta.h): a DeltaChunk is decoded into a
 * scratch buffer of its raw length (the frame's claimed size checked
 * first), the committed bytes of its range are read and their digest
 * checked, and only then is their XOR written to staging through the same
 * path as a BucketChunk's bytes. A push that covers the whole store
 * digests every byte it lands, for the version's base digest.
 */

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backends.h"
#include "backends/grpc/grpc_shared.h"
#include "wt/delta.h"
#include "wt/engine.h"
#include "wt/log.h"

struct wt_engine {
  wt_worker_ctx ctx;
  uint64_t chunk_limit;
  uint64_t packed_buffer_bytes;
  atomic_bool cancelled;

  /* The push in progress (pushing), or nothing. */
  bool pushing;
  size_t n;
  size_t *index;  /* store index of tensor k (copied from the update) */
  uint64_t *size; /* its bytes in the push: the tensor's, or its box's */
  /* A shard plan's push (wt_update.boxes): tensor k is box boxes[k], whose
   * arrays live in dims (wt_boxes_own: the update is borrowed). */
  wt_box *boxes;
  int64_t *dims;
  wt_pack_plan *plan;
  size_t bucket;   /* next bucket expected */
  uint64_t offset; /* next offset expected within it */
  size_t next;     /* first tensor not yet complete */
  bool begun;      /* tensor `next` is staged (its buffer handed out) */
  uint64_t bytes;  /* bytes landed in this push */
  bool delta;      /* the header named a checked base */
  bool hashing;    /* the push covers the store: digest what lands */
  wt_delta_hasher *hash;
  /* Delta chunks: the codec, the decoded chunk and the base's bytes
   * (chunk_limit each, made on the first delta chunk). */
  wt_delta_codec *codec;
  unsigned char *scratch, *base;
};

static wt_status *grpc_create(const Wt__V1__WeightTransferInitInfo *init,
                              const wt_worker_ctx *ctx, wt_engine **out) {
  wt_status *st = NULL;
  wt_engine *e = calloc(1, sizeof(*e));
  if (e == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "grpc engine (worker %u): out of memory",
            ctx->rank);
  e->ctx = *ctx;
  atomic_init(&e->cancelled, false);
  wt_grpc_init_settings set;
  WT_CHECK(wt_grpc_init_settings_read(init, ctx->max_message_bytes, &set));
  e->chunk_limit = set.chunk_bytes;
  e->packed_buffer_bytes = set.buffer_bytes;
  *out = e;
  e = NULL;
out:
  free(e);
  return st;
}

static wt_status *grpc_init_transfer(wt_engine *e,
                                     wt_engine_endpoint *endpoint) {
  /* Nothing to join: the bytes come over the control channel. */
  WT_LOGD("grpc",
          "worker %u: chunks up to %" PRIu64 " bytes, buckets of %" PRIu64
          " bytes",
          e->ctx.rank, e->chunk_limit, e->packed_buffer_bytes);
  return NULL;
}

static void push_reset(wt_engine *e) {
  free(e->index);
  e->index = NULL;
  free(e->size);
  e->size = NULL;
  free(e->boxes);
  e->boxes = NULL;
  free(e->dims);
  e->dims = NULL;
  wt_pack_plan_free(e->plan);
  e->plan = NULL;
  e->pushing = false;
  e->n = 0;
  e->bucket = 0;
  e->offset = 0;
  e->next = 0;
  e->begun = false;
  e->bytes = 0;
  e->delta = false;
  e->hashing = false;
}

static wt_status *grpc_start_update(wt_engine *e, uint64_t round_id) {
  atomic_store(&e->cancelled, false);
  push_reset(e);
  return NULL;
}

static wt_status *grpc_finish_update(wt_engine *e) {
  push_reset(e);
  return NULL;
}

static void grpc_abort_update(wt_engine *e) {
  atomic_store(&e->cancelled, false);
  push_reset(e);
}

static void grpc_cancel(wt_engine *e) {
  atomic_store(&e->cancelled, true);
}

static void grpc_destroy(wt_engine *e) {
  if (e == NULL) return;
  push_reset(e);
  wt_delta_hasher_free(e->hash);
  wt_delta_codec_free(e->codec);
  free(e->scratch);
  free(e->base);
  free(e);
}

/* Marks complete every tensor of the current bucket that ends at or before
 * the current offset without needing a byte (zero-size tensors), and moves
 * past finished buckets (including buckets of zero bytes). */
static void settle(wt_engine *e) {
  const wt_pack_plan *p = e->plan;
  for (;;) {
    while (e->next < e->n && p->tensor_bucket[e->next] == e->bucket &&
           p->tensor_offset[e->next] <= e->offset && e->size[e->next] == 0) {
      wt_param_store_stage(e->ctx.store, e->index[e->next]);
      wt_param_store_staged(e->ctx.store, e->index[e->next]);
      e->next++;
    }
    if (e->bucket < p->nbuckets && e->offset == p->buckets[e->bucket].nbytes) {
      e->bucket++;
      e->offset = 0;
      continue;
    }
    return;
  }
}

/* Copies the update's boxes and their arrays (a shard plan's push). */
/* Keeps the update's boxes (a shard plan's push): the update is borrowed
 * for push_begin only, the chunks come later. */
static wt_status *copy_boxes(wt_engine *e, const wt_update *u) {
  if (u->delta)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "worker %u: a push of boxes takes no delta base",
                         e->ctx.rank);
  e->boxes = malloc((u->n ? u->n : 1) * sizeof(*e->boxes));
  if (e->boxes != NULL) {
    if (u->n) memcpy(e->boxes, u->boxes, u->n * sizeof(*e->boxes));
    e->dims = wt_boxes_own(e->boxes, u->n);
  }
  if (e->boxes == NULL || e->dims == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "grpc engine: out of memory for %zu boxes", u->n);
  return NULL;
}

static wt_status *grpc_push_begin(wt_engine *e, const wt_update *u) {
  wt_status *st = NULL;
  push_reset(e);
  if (!u->packed)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "update_info.packed is false; PushWeights carries packed buckets "
            "(set packed = true)");
  uint64_t buffer =
      u->packed_buffer_bytes ? u->packed_buffer_bytes : e->packed_buffer_bytes;
  WT_CHECK(wt_pack_plan_build(u->nbytes, u->n, buffer, &e->plan));
  e->index = malloc((u->n ? u->n : 1) * sizeof(*e->index));
  if (e->index == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "grpc engine: out of memory for %zu tensors",
            u->n);
  if (u->n) memcpy(e->index, u->index, u->n * sizeof(*e->index));
  e->size = malloc((u->n ? u->n : 1) * sizeof(*e->size));
  if (e->size == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "grpc engine: out of memory for %zu tensors",
            u->n);
  if (u->n) memcpy(e->size, u->nbytes, u->n * sizeof(*e->size));
  if (u->boxes != NULL) WT_CHECK(copy_boxes(e, u));
  e->n = u->n;
  e->pushing = true;
  e->delta = u->delta;
  /* Every tensor of the store once (the server refuses duplicates): the
   * version this push makes has a digest. */
  if (u->boxes == NULL && u->n == wt_param_store_count(e->ctx.store)) {
    if (e->hash == NULL) WT_CHECK(wt_delta_hasher_new(&e->hash));
    wt_delta_hasher_reset(e->hash);
    e->hashing = true;
  }
  settle(e);
out:
  if (st != NULL) push_reset(e);
  return st;
}

/* One run of a box's bytes into its tensor's staging buffer. */
typedef struct box_write {
  wt_param_store *store;
  size_t idx;
  const unsigned char *src; /* the bytes from payload offset `base` on */
  uint64_t base;
} box_write;

static wt_status *write_run(uint64_t dst, uint64_t src, uint64_t n,
                            void *user) {
  box_write *w = user;
  return wt_param_store_stage_write(w->store, w->idx, dst,
                                    w->src + (src - w->base), (size_t)n);
}

/* Lands src[0..n), bytes [at, at + n) of tensor k of the push: into the
 * tensor at `at`, or, for a box, scattered where the box lies. */
static wt_status *land(wt_engine *e, size_t k, uint64_t at,
                       const unsigned char *src, uint64_t n) {
  if (e->boxes == NULL)
    return wt_param_store_stage_write(e->ctx.store, e->index[k], at, src,
                                      (size_t)n);
  box_write w = {e->ctx.store, e->index[k], src, at};
  return wt_box_runs(&e->boxes[k], at, n, write_run, &w);
}

/* Copies n bytes that belong at `pos` of the current bucket into the
 * staging buffers of the tensors there (a memcpy for host memory, the
 * store's copy for device memory), marking tensors complete as their last
 * byte lands. The caller checked order and bounds. */
static wt_status *copy_in(wt_engine *e, uint64_t pos, const unsigned char *src,
                          size_t left) {
  const wt_pack_plan *p = e->plan;
  if (e->hashing) wt_delta_hasher_update(e->hash, src, left);
  while (left > 0) {
    /* In order and in bounds, so tensor `next` covers `pos`. */
    size_t k = e->next;
    size_t idx = e->index[k];
    uint64_t t_off = p->tensor_offset[k];
    uint64_t t_end = t_off + e->size[k];
    if (pos == t_end) { /* a zero-size tensor between two others */
      wt_param_store_stage(e->ctx.store, idx);
      wt_param_store_staged(e->ctx.store, idx);
      e->next++;
      continue;
    }
    if (!e->begun) {
      wt_param_store_stage(e->ctx.store, idx);
      e->begun = true;
    }
    uint64_t take = t_end - pos < left ? t_end - pos : left;
    wt_status *st = land(e, k, pos - t_off, src, take);
    if (st != NULL) return st;
    src += take;
    pos += take;
    left -= (size_t)take;
    if (pos == t_end && e->boxes != NULL) {
      wt_param_store_staged_part(e->ctx.store, idx, e->size[k]);
      e->begun = false;
      e->next++;
    } else if (pos == t_end) {
      wt_param_store_staged(e->ctx.store, idx);
      e->begun = false;
      e->next++;
    }
  }
  return NULL;
}

/* The checks every chunk passes before a byte of it lands: a push in
 * progress, not cancelled, in the plan, in order, in bounds, at most a
 * chunk's worth of `len` bytes. */
static wt_status *check_chunk(wt_engine *e, uint32_t bucket, uint64_t offset,
                              size_t len) {
  const wt_pack_plan *p = e->plan;
  if (!e->pushing)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "bucket %" PRIu32 " offset %" PRIu64
                         ": no push is in progress on worker %u",
                         bucket, offset, e->ctx.rank);
  if (atomic_load(&e->cancelled))
    return wt_status_new(WT_CANCELLED,
                         "bucket %" PRIu32 " offset %" PRIu64
                         ": the round was cancelled on worker %u",
                         bucket, offset, e->ctx.rank);
  if (bucket >= p->nbuckets)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "bucket %" PRIu32 " offset %" PRIu64
                         ": the plan has %zu buckets (0..%zu)",
                         bucket, offset, p->nbuckets,
                         p->nbuckets ? p->nbuckets - 1 : 0);
  if (len == 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "bucket %" PRIu32 " offset %" PRIu64
                         ": chunk carries no data",
                         bucket, offset);
  if (len > e->chunk_limit)
    return wt_status_new(
        WT_INVALID_ARGUMENT,
        "bucket %" PRIu32 " offset %" PRIu64
        ": chunk of %zu bytes exceeds the chunk size of %" PRIu64 " bytes",
        bucket, offset, len, e->chunk_limit);
  if (bucket != e->bucket || offset != e->offset)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "bucket %" PRIu32 " offset %" PRIu64
                         ": out of order; expected bucket %zu offset %" PRIu64,
                         bucket, offset, e->bucket, e->offset);
  uint64_t size = p->buckets[bucket].nbytes;
  if (len > size - offset)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "bucket %" PRIu32 " offset %" PRIu64
                         ": %zu bytes run past the bucket's end (%" PRIu64
                         " bytes)",
                         bucket, offset, len, size);
  return NULL;
}

static wt_status *grpc_push_chunk(wt_engine *e, uint32_t bucket,
                                  uint64_t offset, const struct iovec *iov,
                                  size_t iovcnt) {
  size_t len = 0;
  for (size_t i = 0; i < iovcnt; i++) len += iov[i].iov_len;
  wt_status *cst = check_chunk(e, bucket, offset, len);
  if (cst != NULL) return cst;
  uint64_t pos = offset;
  for (size_t i = 0; i < iovcnt; i++) {
    wt_status *st = copy_in(e, pos, iov[i].iov_base, iov[i].iov_len);
    if (st != NULL)
      return wt_status_prefix(st, "worker %u: bucket %" PRIu32, e->ctx.rank,
                              bucket);
    pos += iov[i].iov_len;
  }
  e->offset = pos;
  e->bytes += len;
  settle(e);
  return NULL;
}

/* Reads the committed bytes of [pos, pos + len) of the current bucket
 * into out, tensor by tensor from `next` (which covers pos). */
static wt_status *read_base(wt_engine *e, uint64_t pos, unsigned char *out,
                            size_t len) {
  const wt_pack_plan *p = e->plan;
  size_t k = e->next;
  while (len > 0 && k < e->n) {
    size_t idx = e->index[k];
    uint64_t t_off = p->tensor_offset[k];
    uint64_t t_end = t_off + wt_param_store_meta(e->ctx.store, idx)->nbytes;
    if (pos >= t_end) {
      k++;
      continue;
    }
    uint64_t take = t_end - pos < len ? t_end - pos : len;
    wt_status *st =
        wt_param_store_read(e->ctx.store, idx, pos - t_off, out, (size_t)take);
    if (st != NULL) return st;
    out += take;
    pos += take;
    len -= (size_t)take;
  }
  return NULL;
}

static wt_status *grpc_push_delta(wt_engine *e, uint32_t bucket,
                                  uint64_t offset, uint64_t raw_len,
                                  uint64_t base_digest, const void *frame,
                                  size_t len) {
  wt_status *st = NULL;
  char where[96];
  snprintf(where, sizeof(where),
           "worker %u: bucket %" PRIu32 " offset %" PRIu64, e->ctx.rank, bucket,
           offset);
  if (e->pushing && !e->delta)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: a delta chunk in a push whose header names no "
                         "delta_base",
                         where);
  if (raw_len > SIZE_MAX) raw_len = SIZE_MAX;
  WT_CHECK(check_chunk(e, bucket, offset, (size_t)raw_len));
  if (len > e->chunk_limit)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: a delta frame of %zu bytes exceeds the chunk size of %" PRIu64
            " bytes",
            where, len, e->chunk_limit);
  if (e->codec == NULL) {
    e->codec = wt_delta_codec_new();
    e->scratch = malloc(e->chunk_limit);
    e->base = malloc(e->chunk_limit);
    if (e->codec == NULL || e->scratch == NULL || e->base == NULL) {
      wt_delta_codec_free(e->codec);
      free(e->scratch);
      free(e->base);
      e->codec = NULL;
      e->scratch = e->base = NULL;
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory for delta buffers",
              where);
    }
  }
  /* Everything checked before staging changes: the frame decodes to
   * exactly the range, and the committed bytes there are the base. */
  WT_CHECK(wt_delta_decode(e->codec, frame, len, raw_len, e->scratch, where));
  WT_CHECK(read_base(e, offset, e->base, (size_t)raw_len));
  uint64_t have = wt_delta_digest(e->base, (size_t)raw_len);
  if (have != base_digest)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "%s: the committed bytes there (digest %016" PRIx64
            ") are not the delta's base (%016" PRIx64 ")",
            where, have, base_digest);
  wt_delta_xor(e->scratch, e->base, (size_t)raw_len);
  st = copy_in(e, offset, e->scratch, (size_t)raw_len);
  if (st != NULL) {
    st = wt_status_prefix(st, "%s", where);
    goto out;
  }
  e->offset = offset + raw_len;
  e->bytes += raw_len;
  settle(e);
out:
  return st;
}

static wt_status *grpc_push_end(wt_engine *e, bool stream_ended,
                                wt_receive_stats *stats) {
  wt_status *st = NULL;
  if (!e->pushing) {
    push_reset(e);
    return NULL;
  }
  if (stats != NULL) {
    stats->tensors = e->next;
    stats->bytes = e->bytes;
    stats->digest = e->hashing && e->bucket >= e->plan->nbuckets
                        ? wt_delta_hasher_digest(e->hash)
                        : 0;
  }
  if (e->bucket < e->plan->nbuckets)
    st = wt_status_new(
        WT_DATA_LOSS, "stream %s after %" PRIu64 " of %" PRIu64 " bytes",
        stream_ended ? "ended" : "broke", e->bytes, e->plan->total_bytes);
  push_reset(e);
  return st;
}

const wt_engine_ops wt_grpc_engine_ops = {
    .header = {.abi_version = WT_ENGINE_ABI_VERSION, .name = "grpc"},
    /* Chunks are copied through the store, so every kind works: device
     * memory takes one host-to-device copy per piece. */
    .memory_kinds = WT_MEM_ALL_KINDS,
    .caps =
        WT_ENGINE_CROSS_HOST | WT_ENGINE_SURVIVES_ABORT | WT_ENGINE_TAKES_BOXES,
    .create = grpc_create,
    .init_transfer = grpc_init_transfer,
    .start_update = grpc_start_update,
    .receive = NULL,
    .finish_update = grpc_finish_update,
    .abort_update = grpc_abort_update,
    .cancel = grpc_cancel,
    .destroy = grpc_destroy,
    .push_begin = grpc_push_begin,
    .push_chunk = grpc_push_chunk,
    .push_end = grpc_push_end,
    .push_delta = grpc_push_delta,
};
