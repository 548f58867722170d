/* grpc_trainer.c: the `grpc` backend's trainer engine. Its bytes travel in
 * the control channel: one PushWeights stream per server, a header with the
 * update info, then the shared bucket plan's bytes in chunks (see
 * proto/wt/v1/wt.proto and wt/trainer.h).
 *
 * One producer (the calling thread) walks the source and builds each chunk
 * message once. A chunk whose bytes lie in one tensor the source hands out
 * in host memory (a checkpoint's mmap, a memory source) is two slices: its
 * framing, and a slice that refers to the tensor's own bytes, so the trainer
 * copies nothing (the kernel's socket copy is the only one); any other
 * chunk (across tensors, or a synthetic source's fill) is one slice the
 * bytes are copied into. The slices are then shared, by reference, with one
 * sender thread per server through a small ring, so N servers cost at most
 * one copy, and a slow server holds the others back by at most the ring's
 * depth. send_weights returns only once gRPC has let go of every slice that
 * refers to the source's memory, so the caller may free it at once; should
 * gRPC hold one longer than the release wait (the init info's timeout_ms,
 * else 30 s), send_weights gives up and says so, and the late release then
 * lands in the heap count those slices share (`borrows`), never in a
 * returned frame.
 *
 * Delta rounds (option delta=on|auto, docs/delta.md, wt/delta.h): the
 * trainer keeps the bytes it last sent (`base`, the model's size, in plan
 * order) and their digest. A server whose committed digest at the round's
 * start (StartWeightUpdateResponse) is that digest took them: it gets a
 * delta push, each chunk a zstd frame of new XOR base, or the raw bytes
 * where the frame would not be smaller. Every other server gets a full
 * push of the same round first. The base is overwritten as the round is
 * sent, so a failed round leaves no server holding it, and the next round
 * is full; nothing can apply a delta to the wrong base, because the server
 * checks the digest of every chunk's base range before applying it. */

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/byte_buffer.h>
#include <grpc/slice.h>

#include "backends/backends.h"
#include "backends/grpc/grpc_shared.h"
#include "wt/adapter_spec.h"
#include "wt/clock.h"
#include "wt/delta.h"
#include "wt/delta_state.h"
#include "wt/client.h"
#include "wt/log.h"
#include "wt/packing.h"
#include "wt/pb.h"
#include "wt/rpc.h"
#include "wt/trainer.h"
#include "wt/lock.h"

#define PUSH_METHOD "/wt.v1.WeightTransfer/PushWeights"

/* Chunks in flight per server beyond the one being written. */
#define RING 8
/* How long send_weights waits for gRPC to let go of the source's memory
 * when the init info gives no data deadline. */
#define DEFAULT_RELEASE_WAIT_MS 30000

typedef struct grpc_trainer {
  const wt_trainer_ctx *ctx; /* the servers; borrowed */
  uint64_t chunk_bytes;
  uint64_t buffer_bytes;
  int64_t release_wait_ms;
  unsigned pushes; /* numbers transfer ids */
  /* A rank of a shard plan (docs/multirank.md): every push names it. */
  uint32_t trainer_rank;
  /* The adapter set the pushes fill (docs/lora.md); "" for the model. */
  char adapter[WT_ADAPTER_NAME_MAX + 1];
  /* Delta rounds. */
  wt_delta_state d;
  unsigned char *new_buf, *xor_buf;
  wt_grpc_delta_stats stats;
} grpc_trainer;

static void grpc_trainer_destroy(void *self);

static wt_status *grpc_trainer_init(const wt_trainer_init_args *args,
                                    void **self) {
  wt_status *st = NULL;
  const Wt__V1__WeightTransferInitInfo *info = args->init_info;
  grpc_trainer *g = NULL;
  *self = NULL;
  if (args->ctx == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT, "grpc trainer: no servers (no context)");
  for (size_t k = 0; k < args->ctx->nservers; k++)
    if (args->ctx->channels == NULL || args->ctx->channels[k] == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "backend 'grpc' pushes over a wt-server's gRPC channel, and "
              "the control plane has none for %s (a foreign or vLLM client: "
              "choose a backend its workers receive)",
              args->ctx->targets[k]);
  g = calloc(1, sizeof(*g));
  if (g == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  g->ctx = args->ctx;
  g->release_wait_ms = info && info->timeout_ms ? (int64_t)info->timeout_ms
                                                : DEFAULT_RELEASE_WAIT_MS;
  /* Bound by the servers' default receive limit: a server with a larger
   * one takes larger chunks only when told so at both ends. */
  wt_grpc_init_settings set;
  WT_CHECK(
      wt_grpc_init_settings_read(info, WT_RPC_DEFAULT_MAX_RECEIVE_BYTES, &set));
  g->chunk_bytes = set.chunk_bytes;
  g->buffer_bytes = set.buffer_bytes;
  WT_CHECK(wt_delta_state_init(&g->d,
                               info && info->grpc ? info->grpc->delta : NULL,
                               "init info grpc.delta"));
  if (info && info->adapter && info->adapter->name)
    snprintf(g->adapter, sizeof(g->adapter), "%s", info->adapter->name);
  if (info && info->shard_plan) {
    g->trainer_rank = info->shard_plan->rank;
    if (g->d.mode != WT_DELTA_OFF)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "init info grpc.delta: a shard plan's rounds send every box "
              "in full; leave delta off");
  }
  if (g->d.mode != WT_DELTA_OFF) {
    g->new_buf = malloc(g->chunk_bytes);
    g->xor_buf = malloc(g->chunk_bytes);
    if (g->new_buf == NULL || g->xor_buf == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED,
              "grpc trainer: out of memory for delta "
              "buffers");
  }
  *self = g;
  g = NULL;
out:
  grpc_trainer_destroy(g);
  return st;
}

static void grpc_trainer_destroy(void *self) {
  grpc_trainer *g = self;
  if (g == NULL) return;
  wt_delta_state_clear(&g->d);
  free(g->new_buf);
  free(g->xor_buf);
  free(g);
}

/* ---- one push ----------------------------------------------------------- */

typedef struct push push;

typedef struct sender {
  push *p;
  size_t k;
  const char *target;
  wt_rpc_client_stream *stream;
  uint64_t consumed; /* chunks taken from the ring */
  wt_status *st;
  pthread_t thread;
  bool started;
} sender;

/* One chunk message: its framing and bytes in one slice, or the framing
 * and a slice over the source's own memory. */
typedef struct chunk_msg {
  grpc_slice s[2];
  size_t n;
} chunk_msg;

/* The slices over the source's memory that gRPC holds: one reference for
 * the push and one per such slice, on the heap, so that a release gRPC
 * makes after the push gave up waiting lands in live memory; the last
 * reference frees it. */
typedef struct borrows {
  atomic_int_fast64_t refs;
} borrows;

static void borrows_put(borrows *b) {
  if (atomic_fetch_sub(&b->refs, 1) == 1) free(b);
}

struct push {
  wt_mutex mu;
  pthread_cond_t produced_cv;
  pthread_cond_t consumed_cv;
  chunk_msg ring[RING];
  borrows *borrowed;
  uint64_t produced; /* chunks published; ring[i % RING] holds chunk i */
  bool done;         /* the producer published its last chunk */
  bool failed;       /* someone failed: everyone stops */
  sender *senders;
  size_t n;
  /* What each server must acknowledge. */
  uint64_t total_bytes;
  uint64_t total_tensors;
  Wt__V1__PushWeightsChunk *headers; /* one per server (round ids differ) */
};

/* Marks the push failed and cancels every stream, so that senders blocked in
 * a write return at once. Called without the lock held. */
static void push_fail(push *p) {
  wt_mutex_lock(&p->mu);
  bool first = !p->failed;
  p->failed = true;
  pthread_cond_broadcast(&p->produced_cv);
  pthread_cond_broadcast(&p->consumed_cv);
  wt_mutex_unlock(&p->mu);
  if (!first) return;
  for (size_t k = 0; k < p->n; k++)
    if (p->senders[k].stream) wt_rpc_client_stream_cancel(p->senders[k].stream);
}

static wt_status *check_response(const sender *s,
                                 const Wt__V1__PushWeightsResponse *r) {
  const push *p = s->p;
  if (r->bytes_received != p->total_bytes ||
      r->tensors_received != p->total_tensors)
    return wt_status_new(WT_DATA_LOSS,
                         "%s " PUSH_METHOD ": server acknowledged %" PRIu64
                         " tensors and %" PRIu64 " bytes of %" PRIu64
                         " and %" PRIu64 " sent",
                         s->target, r->tensors_received, r->bytes_received,
                         p->total_tensors, p->total_bytes);
  return NULL;
}

static void *sender_main(void *arg) {
  sender *s = arg;
  push *p = s->p;
  wt_status *st = NULL;
  ProtobufCMessage *resp = NULL;
  WT_CHECK(wt_rpc_client_stream_write(s->stream, &p->headers[s->k].base));
  for (;;) {
    wt_mutex_lock(&p->mu);
    while (s->consumed == p->produced && !p->done && !p->failed)
      wt_cond_wait(&p->produced_cv, &p->mu);
    if (p->failed || s->consumed == p->produced) {
      bool failed = p->failed;
      wt_mutex_unlock(&p->mu);
      if (failed) goto out;
      break;
    }
    /* The slot cannot be reused before this sender moves past it. */
    const chunk_msg *m = &p->ring[s->consumed % RING];
    grpc_byte_buffer *bb =
        grpc_raw_byte_buffer_create((grpc_slice *)m->s, m->n);
    wt_mutex_unlock(&p->mu);
    st = wt_rpc_client_stream_write_raw(s->stream, bb);
    wt_mutex_lock(&p->mu);
    s->consumed++;
    pthread_cond_signal(&p->consumed_cv);
    wt_mutex_unlock(&p->mu);
    if (st != NULL) goto out;
  }
  WT_CHECK(wt_rpc_client_stream_finish(
      s->stream, &wt__v1__push_weights_response__descriptor, &resp));
  WT_CHECK(check_response(s, (const Wt__V1__PushWeightsResponse *)resp));
out:
  wt_pb_free(resp);
  if (st != NULL) {
    s->st = st;
    push_fail(p);
  }
  return NULL;
}

static void chunk_unref(chunk_msg *m) {
  for (size_t i = 0; i < m->n; i++) grpc_slice_unref(m->s[i]);
  m->n = 0;
}

/* Publishes `slice` (ownership passes to the ring) once every sender has
 * taken the chunk that used its slot. False when the push failed. */
static bool publish(push *p, chunk_msg slice) {
  wt_mutex_lock(&p->mu);
  for (;;) {
    if (p->failed) break;
    uint64_t slowest = p->produced;
    for (size_t k = 0; k < p->n; k++)
      if (p->senders[k].consumed < slowest) slowest = p->senders[k].consumed;
    if (p->produced - slowest < RING) break;
    wt_cond_wait(&p->consumed_cv, &p->mu);
  }
  bool ok = !p->failed;
  if (ok) {
    if (p->produced >= RING) chunk_unref(&p->ring[p->produced % RING]);
    p->ring[p->produced % RING] = slice;
    p->produced++;
    pthread_cond_broadcast(&p->produced_cv);
  }
  wt_mutex_unlock(&p->mu);
  if (!ok) chunk_unref(&slice);
  return ok;
}

/* Where the producer stands in the source. */
typedef struct cursor {
  wt_source *src;
  wt_source_tensor t;
  bool have;       /* t is a yielded tensor */
  uint64_t offset; /* bytes of t already sent */
  wt_progress prog;
} cursor;

/* Moves past tensors whose bytes are all sent, yielding the next one. */
static wt_status *cursor_advance(cursor *c) {
  wt_status *st = NULL;
  while (!c->have || c->offset == c->t.nbytes) {
    bool done = false;
    if (c->have) c->prog.tensors_done++;
    c->have = false;
    WT_CHECK(wt_source_next(c->src, &c->t, &done));
    if (done)
      WT_FAIL(WT_INTERNAL, "%s source ended before the plan's bytes",
              wt_source_kind(c->src));
    WT_CHECK(wt_source_tensor_ready(&c->t));
    c->have = true;
    c->offset = 0;
  }
out:
  return st;
}

/* Zero-size tensors after the last byte still belong to the round: the
 * source yields them to their end. */
static wt_status *cursor_finish(cursor *c) {
  wt_status *st = NULL;
  for (;;) {
    bool done = false;
    if (c->have) {
      c->prog.tensors_done++;
      c->have = false;
    }
    WT_CHECK(wt_source_next(c->src, &c->t, &done));
    if (done) break;
    c->have = true;
    c->offset = 0;
  }
out:
  return st;
}

/* gRPC let go of a slice over the source's memory: it touches only the
 * shared count, which outlives the push. */
static void borrowed_done(void *arg) {
  borrows_put(arg);
}

static wt_status *produce(push *p, cursor *c, const wt_pack_plan *plan,
                          uint64_t chunk_bytes, wt_progress_fn progress,
                          void *user) {
  wt_status *st = NULL;
  for (size_t b = 0; b < plan->nbuckets; b++) {
    uint64_t nbytes = plan->buckets[b].nbytes;
    for (uint64_t off = 0; off < nbytes;) {
      uint64_t len = nbytes - off < chunk_bytes ? nbytes - off : chunk_bytes;
      size_t prefix = wt_chunk_prefix((uint32_t)b, off, len, NULL);
      if ((st = cursor_advance(c)) != NULL) goto out;
      if (c->t.data != NULL && c->t.kind != WT_MEM_DEVICE &&
          c->t.nbytes - c->offset >= len) {
        /* The whole chunk in this tensor's own memory: refer to it. */
        chunk_msg m = {.n = 2};
        m.s[0] = grpc_slice_malloc(prefix);
        wt_chunk_prefix((uint32_t)b, off, len, GRPC_SLICE_START_PTR(m.s[0]));
        atomic_fetch_add(&p->borrowed->refs, 1);
        m.s[1] = grpc_slice_new_with_user_data((char *)c->t.data + c->offset,
                                               (size_t)len, borrowed_done,
                                               p->borrowed);
        c->offset += len;
        if (!publish(p, m)) goto out; /* a sender has the error */
        off += len;
        c->prog.bytes_done += len;
        if (c->offset == c->t.nbytes) {
          c->prog.tensors_done++;
          c->have = false;
        }
        if (progress) progress(&c->prog, user);
        continue;
      }
      grpc_slice slice = grpc_slice_malloc(prefix + (size_t)len);
      uint8_t *dst = GRPC_SLICE_START_PTR(slice);
      wt_chunk_prefix((uint32_t)b, off, len, dst);
      dst += prefix;
      for (uint64_t filled = 0; filled < len;) {
        if ((st = cursor_advance(c)) != NULL) break;
        uint64_t take = c->t.nbytes - c->offset;
        if (take > len - filled) take = len - filled;
        st = wt_source_read(c->src, &c->t, c->offset, dst + filled,
                            (size_t)take);
        if (st != NULL) break;
        c->offset += take;
        filled += take;
      }
      if (st != NULL) {
        grpc_slice_unref(slice);
        goto out;
      }
      if (!publish(p, (chunk_msg){.s = {slice}, .n = 1}))
        goto out; /* a sender has the error */
      off += len;
      c->prog.bytes_done += len;
      if (c->have && c->offset == c->t.nbytes) {
        c->prog.tensors_done++;
        c->have = false;
      }
      if (progress) progress(&c->prog, user);
    }
  }
  st = cursor_finish(c);
out:
  return st;
}

static void headers_free(Wt__V1__PushWeightsChunk *h, size_t n) {
  if (h == NULL) return;
  for (size_t k = 0; k < n; k++) {
    Wt__V1__PushWeightsHeader *hd = h[k].header;
    if (hd == NULL) continue;
    if (hd->update_info) {
      free(hd->update_info->grpc ? hd->update_info->grpc->transfer_id : NULL);
      free(hd->update_info->grpc);
      free(hd->update_info);
    }
    free(hd);
  }
  free(h);
}

static wt_status *headers_build(grpc_trainer *g, const wt_update_lists *l,
                                Wt__V1__PushWeightsChunk **out) {
  wt_status *st = NULL;
  size_t ns = g->ctx->nservers;
  Wt__V1__PushWeightsChunk *h = calloc(ns, sizeof(*h));
  unsigned push_no = ++g->pushes;
  *out = NULL;
  if (h == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t k = 0; k < ns; k++) wt__v1__push_weights_chunk__init(&h[k]);
  for (size_t k = 0; k < ns; k++) {
    Wt__V1__PushWeightsHeader *hd = calloc(1, sizeof(*hd));
    Wt__V1__WeightTransferUpdateInfo *ui = calloc(1, sizeof(*ui));
    Wt__V1__GrpcUpdateInfo *gi = calloc(1, sizeof(*gi));
    char *tid = NULL;
    uint64_t round = g->ctx->round_ids[k];
    if (asprintf(&tid, "push-r%" PRIu64 "-%u", round, push_no) < 0) tid = NULL;
    if (!hd || !ui || !gi || !tid) {
      free(hd);
      free(ui);
      free(gi);
      free(tid);
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
    }
    wt__v1__push_weights_header__init(hd);
    wt__v1__weight_transfer_update_info__init(ui);
    wt__v1__grpc_update_info__init(gi);
    gi->transfer_id = tid;
    ui->backend_update_case =
        WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__BACKEND_UPDATE_GRPC;
    ui->grpc = gi;
    hd->update_info = ui;
    h[k].payload_case = WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_HEADER;
    h[k].header = hd;
    wt_update_lists_apply(l, ui);
    hd->round_id = round;
    hd->trainer_rank = g->trainer_rank;
    hd->adapter = g->adapter;
    hd->packed_buffer_size_bytes = g->buffer_bytes;
  }
  *out = h;
  h = NULL;
out:
  headers_free(h, ns);
  return st;
}

/* ---- delta rounds ---------------------------------------------------------
 */

/* What a pass that keeps the base does beside sending. */
typedef struct base_pass {
  grpc_trainer *g;
  const wt_pack_plan *plan;
  bool encode;   /* DeltaChunks against the base (else the raw bytes) */
  uint64_t wire; /* data bytes of the chunk messages */
  int64_t encode_ns;
} base_pass;

/* Copies bytes [cursor, +len) of the round into dst, tensor by tensor. */
static wt_status *gather(cursor *c, unsigned char *dst, uint64_t len) {
  wt_status *st = NULL;
  for (uint64_t filled = 0; filled < len;) {
    WT_CHECK(cursor_advance(c));
    uint64_t take = c->t.nbytes - c->offset;
    if (take > len - filled) take = len - filled;
    if (c->t.data != NULL && c->t.kind != WT_MEM_DEVICE)
      memcpy(dst + filled, (const unsigned char *)c->t.data + c->offset,
             (size_t)take);
    else
      WT_CHECK(
          wt_source_read(c->src, &c->t, c->offset, dst + filled, (size_t)take));
    c->offset += take;
    filled += take;
    if (c->offset == c->t.nbytes) {
      c->prog.tensors_done++;
      c->have = false;
    }
  }
out:
  return st;
}

/* produce()'s twin for a pass that keeps the base: every chunk's new bytes
 * go through the base buffer (and the digest); with `encode` a chunk goes
 * out as a delta frame against the base's old bytes where that is
 * smaller, else (and without `encode`) as a slice over the base's new
 * bytes. */
static wt_status *produce_base(push *p, cursor *c, base_pass *bp,
                               uint64_t chunk_bytes, wt_progress_fn progress,
                               void *user) {
  wt_status *st = NULL;
  grpc_trainer *g = bp->g;
  const wt_pack_plan *plan = bp->plan;
  wt_delta_hasher_reset(g->d.hash);
  uint64_t at = 0; /* the chunk's place in the round's bytes (= in base) */
  for (size_t b = 0; b < plan->nbuckets; b++) {
    uint64_t nbytes = plan->buckets[b].nbytes;
    for (uint64_t off = 0; off < nbytes;) {
      uint64_t len = nbytes - off < chunk_bytes ? nbytes - off : chunk_bytes;
      unsigned char *base = g->d.base + at;
      chunk_msg m = {.n = 1};
      if (bp->encode) {
        WT_CHECK(gather(c, g->new_buf, len));
        int64_t t0 = (wt_mono_us() * 1000);
        uint64_t base_digest = wt_delta_digest(base, (size_t)len);
        size_t bound = wt_delta_frame_bound((size_t)len);
        grpc_slice slice = grpc_slice_malloc(WT_DELTA_PREFIX_MAX + bound);
        uint8_t *q = GRPC_SLICE_START_PTR(slice);
        size_t flen =
            wt_delta_encode(g->d.codec, g->new_buf, base, (size_t)len,
                            g->xor_buf, q + WT_DELTA_PREFIX_MAX, bound);
        size_t prefix = 0;
        if (flen > 0) {
          prefix = wt_delta_chunk_prefix((uint32_t)b, off, len, base_digest,
                                         flen, NULL);
          /* The framing right before the frame, the slice cut to fit. */
          wt_delta_chunk_prefix((uint32_t)b, off, len, base_digest, flen,
                                q + WT_DELTA_PREFIX_MAX - prefix);
          m.s[0] = grpc_slice_sub(slice, WT_DELTA_PREFIX_MAX - prefix,
                                  WT_DELTA_PREFIX_MAX + flen);
          bp->wire += flen;
        } else { /* not smaller: the new bytes as they are */
          prefix = wt_chunk_prefix((uint32_t)b, off, len, NULL);
          m.s[0] = grpc_slice_sub(slice, 0, prefix + (size_t)len);
          uint8_t *r = GRPC_SLICE_START_PTR(m.s[0]);
          wt_chunk_prefix((uint32_t)b, off, len, r);
          memcpy(r + prefix, g->new_buf, (size_t)len);
          bp->wire += len;
        }
        grpc_slice_unref(slice);
        memcpy(base, g->new_buf, (size_t)len);
        wt_delta_hasher_update(g->d.hash, base, (size_t)len);
        bp->encode_ns += (wt_mono_us() * 1000) - t0;
      } else {
        /* The new bytes land in the base, and the message refers to them
         * there (stable until the next round). */
        WT_CHECK(gather(c, base, len));
        int64_t t0 = (wt_mono_us() * 1000);
        wt_delta_hasher_update(g->d.hash, base, (size_t)len);
        bp->encode_ns += (wt_mono_us() * 1000) - t0;
        size_t prefix = wt_chunk_prefix((uint32_t)b, off, len, NULL);
        m.n = 2;
        m.s[0] = grpc_slice_malloc(prefix);
        wt_chunk_prefix((uint32_t)b, off, len, GRPC_SLICE_START_PTR(m.s[0]));
        atomic_fetch_add(&p->borrowed->refs, 1);
        m.s[1] = grpc_slice_new_with_user_data(base, (size_t)len, borrowed_done,
                                               p->borrowed);
        bp->wire += len;
      }
      if (!publish(p, m)) goto out; /* a sender has the error */
      off += len;
      at += len;
      c->prog.bytes_done += len;
      if (progress) progress(&c->prog, user);
    }
  }
  st = cursor_finish(c);
out:
  return st;
}

/* ---- a round
 * ------------------------------------------------------------------ */

/* One push of the round to the servers in mask[] (all when NULL): full
 * (bp NULL: produce(), zero copy), or through the base (bp). */
static wt_status *push_to(grpc_trainer *g, wt_source *src,
                          const wt_pack_plan *plan, const wt_update_lists *l,
                          const bool *mask, base_pass *bp,
                          wt_progress_fn progress, void *user) {
  wt_status *st = NULL;
  const wt_trainer_ctx *ctx = g->ctx;
  size_t ns = ctx->nservers;
  size_t n = 0;
  wt_source_metas(src, &n);
  push p = {0};
  cursor cur = {.src = src};
  bool sync_init = false;
  Wt__V1__DeltaBase *bases = NULL;
  /* The streams' deadline and the RPC layer's grace: by then every stream
   * has ended and gRPC has let go of what it wrote, or its connection was
   * shut down so that it never reads those bytes again. */
  int64_t release_by = INT64_MAX;

  cur.prog.tensors_total = n;
  cur.prog.bytes_total = wt_source_total_bytes(src);
  p.total_bytes = plan->total_bytes;
  p.total_tensors = n;
  WT_CHECK(headers_build(g, l, &p.headers));
  if (bp != NULL && bp->encode) {
    bases = calloc(ns, sizeof(*bases));
    if (bases == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
    for (size_t k = 0; k < ns; k++) {
      wt__v1__delta_base__init(&bases[k]);
      bases[k].sequence = ctx->base_sequences ? ctx->base_sequences[k] : 0;
      bases[k].digest = g->d.base_digest;
      p.headers[k].header->delta_base = &bases[k];
    }
  }
  p.borrowed = calloc(1, sizeof(*p.borrowed));
  if (p.borrowed != NULL) atomic_init(&p.borrowed->refs, 1); /* the push's */
  p.senders = calloc(ns, sizeof(*p.senders));
  if (p.senders == NULL || p.borrowed == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  wt_mutex_init(&p.mu, WT_LOCK_GRPC_RING, 0, "grpc_push.mu");
  if (pthread_cond_init(&p.produced_cv, NULL) != 0 ||
      pthread_cond_init(&p.consumed_cv, NULL) != 0)
    WT_FAIL(WT_INTERNAL, "cannot create the push's lock");
  sync_init = true;
  WT_CHECK(wt_source_rewind(src));
  if (ctx->data_timeout_ms > 0)
    release_by = wt_mono_ms() + ctx->data_timeout_ms + WT_RPC_DEADLINE_GRACE_MS;
  for (size_t k = 0; k < ns; k++) {
    if (mask && !mask[k]) continue;
    sender *s = &p.senders[p.n++];
    s->p = &p;
    s->k = k;
    s->target = ctx->targets[k];
    WT_CHECK(wt_rpc_client_stream_open(ctx->channels[k], PUSH_METHOD,
                                       ctx->data_timeout_ms, &s->stream));
  }
  for (size_t j = 0; j < p.n; j++) {
    int rc =
        pthread_create(&p.senders[j].thread, NULL, sender_main, &p.senders[j]);
    if (rc != 0) {
      st = wt_status_from_errno(rc, "cannot start the sender for %s",
                                p.senders[j].target);
      goto out;
    }
    p.senders[j].started = true;
  }
  st = bp ? produce_base(&p, &cur, bp, g->chunk_bytes, progress, user)
          : produce(&p, &cur, plan, g->chunk_bytes, progress, user);
  wt_mutex_lock(&p.mu);
  p.done = true;
  pthread_cond_broadcast(&p.produced_cv);
  wt_mutex_unlock(&p.mu);
out:
  if (st != NULL && p.senders != NULL) push_fail(&p);
  for (size_t j = 0; p.senders && j < p.n; j++)
    if (p.senders[j].started) pthread_join(p.senders[j].thread, NULL);
  /* The first server to fail explains the push; the others were cancelled
   * on its account. A source error (st) comes before both. */
  for (size_t j = 0; p.senders && j < p.n; j++) {
    sender *s = &p.senders[j];
    if (st == NULL && s->st != NULL && wt_status_code(s->st) != WT_CANCELLED) {
      st = s->st;
      s->st = NULL;
    }
  }
  for (size_t j = 0; p.senders && j < p.n; j++) {
    sender *s = &p.senders[j];
    if (st == NULL && s->st != NULL) {
      st = s->st;
      s->st = NULL;
    }
    wt_status_free(s->st);
    wt_rpc_client_stream_destroy(s->stream);
  }
  if (sync_init) {
    for (uint64_t i = 0; i < p.produced && i < RING; i++)
      chunk_unref(&p.ring[i]);
    /* gRPC lets go of the last slices over the source's memory as its
     * calls end (a cancelled one's writes may linger a moment): the caller
     * may free that memory once this returns. The wait ends at the release
     * wait, or at the streams' deadline and grace, whichever comes first. */
    int64_t give_up = wt_mono_ms() + g->release_wait_ms;
    if (give_up > release_by) give_up = release_by;
    while (atomic_load(&p.borrowed->refs) > 1) {
      if (wt_mono_ms() >= give_up) {
        /* Every stream has ended by now, or the RPC layer shut its
         * connection down, so gRPC sends none of those bytes any more;
         * only a gRPC whose connections it cannot shut may still. */
        WT_LOGE("grpc",
                "trainer: gRPC still holds %" PRIdFAST64
                " chunk(s) of the source's memory after the release wait "
                "(%" PRId64
                " ms, the init info's timeout_ms) or the pushes' "
                "deadline (data_timeout_ms) and %d ms; %s",
                (int_fast64_t)(atomic_load(&p.borrowed->refs) - 1),
                g->release_wait_ms, WT_RPC_DEADLINE_GRACE_MS,
                wt_rpc_tcp_user_timeout_supported()
                    ? "it drops them unread"
                    : "this gRPC may still send them: the caller must not "
                      "free that memory yet");
        break;
      }
      struct timespec ts = {0, 1000 * 1000};
      nanosleep(&ts, NULL);
    }
    wt_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.produced_cv);
    pthread_cond_destroy(&p.consumed_cv);
  }
  if (st == NULL && progress) progress(&cur.prog, user);
  if (p.borrowed != NULL) borrows_put(p.borrowed);
  free(p.senders);
  if (p.headers && bases)
    for (size_t k = 0; k < ns; k++) p.headers[k].header->delta_base = NULL;
  free(bases);
  headers_free(p.headers, ns);
  return st;
}

static wt_status *grpc_send_weights(void *self, wt_source *src,
                                    wt_progress_fn progress, void *user) {
  wt_status *st = NULL;
  grpc_trainer *g = self;
  const wt_trainer_ctx *ctx = g->ctx;
  size_t ns = ctx->nservers;
  size_t n = 0;
  const wt_tensor_meta *metas = wt_source_metas(src, &n);
  wt_pack_plan *plan = NULL;
  wt_update_lists l = {0};
  bool *delta_to = NULL;
  if (n == 0) goto out; /* nothing to send is a finished push */
  WT_CHECK(wt_pack_plan_from_metas(metas, n, g->buffer_bytes, &plan));
  if (plan->nbuckets > UINT32_MAX)
    WT_FAIL(WT_INVALID_ARGUMENT, "%zu buckets: more than the wire allows",
            plan->nbuckets);
  WT_CHECK(wt_update_lists_build(src, &l));
  if (g->d.mode == WT_DELTA_OFF) {
    WT_CHECK(push_to(g, src, plan, &l, NULL, NULL, progress, user));
    goto out;
  }

  /* Delta rounds: which servers hold what the base holds. */
  int64_t t0 = (wt_mono_us() * 1000);
  uint64_t layout = wt_delta_layout_digest(metas, n);
  WT_CHECK(wt_delta_state_reserve(&g->d, plan->total_bytes, "grpc trainer"));
  bool try_delta = false, keep = true;
  wt_delta_plan_round(&g->d,
                      g->d.base_digest != 0 && g->d.base_layout == layout &&
                          ctx->base_digests != NULL,
                      &try_delta, &keep);
  delta_to = calloc(ns, sizeof(*delta_to));
  bool *full_to = calloc(ns, sizeof(*full_to));
  if (delta_to == NULL || full_to == NULL) {
    free(full_to);
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  }
  uint32_t nd = 0, nf = 0;
  for (size_t k = 0; k < ns; k++) {
    delta_to[k] = try_delta && ctx->base_digests[k] == g->d.base_digest;
    full_to[k] = !delta_to[k];
    nd += delta_to[k];
    nf += full_to[k];
  }
  uint64_t digest = g->d.base_digest;
  g->d.base_digest = 0; /* overwritten below: a base again once all is sent */
  g->stats = (wt_grpc_delta_stats){
      .raw_bytes = plan->total_bytes, .delta_servers = nd, .full_servers = nf};
  base_pass bp = {.g = g, .plan = plan};
  /* The servers that hold another version first, straight from the
   * source; they keep the base only when no delta pass follows. */
  if (nf > 0)
    st = push_to(g, src, plan, &l, full_to, nd || !keep ? NULL : &bp, progress,
                 user);
  free(full_to);
  if (st == NULL && nd > 0) {
    g->d.base_digest = digest; /* named in the delta headers */
    bp.encode = true;
    bp.wire = 0;
    st = push_to(g, src, plan, &l, delta_to, &bp, progress, user);
    g->stats.delta_wire_bytes = bp.wire;
    g->d.base_digest = 0;
  }
  if (st != NULL) goto out;
  if (nd > 0 || keep) {
    g->d.base_digest = wt_delta_hasher_digest(g->d.hash);
    g->d.base_layout = layout;
  }
  double took = (double)((wt_mono_us() * 1000) - t0);
  g->stats.encode_s = (double)bp.encode_ns / 1e9;
  g->stats.round_s = took / 1e9;
  double per_byte = took / (double)(plan->total_bytes ? plan->total_bytes : 1);
  wt_delta_measured(&g->d, nd > 0, per_byte);
out:
  free(delta_to);
  wt_update_lists_free(&l);
  wt_pack_plan_free(plan);
  return st;
}

static wt_status *grpc_delta_stats(const void *self, wt_delta_stats *out) {
  *out = ((const grpc_trainer *)self)->stats;
  return NULL;
}

/* Options: chunk_size (bytes per PushWeights message), bucket_size (the
 * shared plan's bucket). */
static wt_status *grpc_init_info(const wt_backend_option *opts, size_t n,
                                 Wt__V1__WeightTransferInitInfo *info) {
  static const char *const known[] = {"chunk_size", "bucket_size", "delta",
                                      NULL};
  wt_status *st = NULL;
  Wt__V1__GrpcInitInfo *g = malloc(sizeof(*g));
  if (g == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
  wt__v1__grpc_init_info__init(g);
  info->backend_init_case =
      WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_GRPC;
  info->grpc = g;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(opts[i].key, "delta") == 0) {
      WT_CHECK(wt_delta_option_set(opts[i].value, &g->delta));
      continue;
    }
    bool chunk = strcmp(opts[i].key, "chunk_size") == 0;
    if (!chunk && strcmp(opts[i].key, "bucket_size") != 0)
      WT_CHECK(wt_option_unknown("grpc", &opts[i], known));
    uint64_t v = 0;
    WT_CHECK(wt_option_size(&opts[i], &v));
    if (v == 0)
      WT_FAIL(WT_INVALID_ARGUMENT, "option %s: must be at least 1 byte",
              opts[i].key);
    Wt__V1__UInt64Value **slot =
        chunk ? &g->chunk_size_bytes : &g->packed_buffer_size_bytes;
    if (*slot == NULL) {
      if ((*slot = malloc(sizeof(**slot))) == NULL)
        WT_FAIL(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
      wt__v1__uint64_value__init(*slot);
    }
    (*slot)->value = v;
  }
out:
  return st;
}

const wt_trainer_ops wt_grpc_trainer_ops = {
    .header = {.abi_version = WT_TRAINER_ABI_VERSION, .name = "grpc"},
    .flags = 0,
    .memory_kinds = WT_MEM_HOST_KINDS,
    .init_info = grpc_init_info,
    .trainer_init = grpc_trainer_init,
    .send_weights = grpc_send_weights,
    .destroy = grpc_trainer_destroy,
    .delta_stats = grpc_delta_stats,
};
