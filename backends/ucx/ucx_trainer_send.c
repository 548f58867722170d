/* ucx_trainer_send.c: the ucx trainer's data path: the round's memory
 * (host or one GPU), the send buffers, packing a bucket or sending it in
 * place, and the sends of a round, pass by pass (see ucx_trainer.c). */

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/ucx/ucx_trainer.h"
#include "wt/cuda.h"
#include "wt/log.h"
#include "wt/packing.h"

/* Frees b's data (host or device) and its registration. */
void wt_ucxt_sbuf_free(ucx_trainer *t, sbuf *b) {
  if (b->memh != NULL) wt_ucx_mem_unmap(t->ucx, b->memh);
  b->memh = NULL;
  if (b->device >= 0 && b->data != NULL) {
    wt_status_free(wt_cuda_bind(b->device));
    t->cuda->device_free(b->device, b->data);
  } else {
    free(b->data);
  }
  b->data = NULL;
  b->cap = 0;
  b->device = -1;
}

/* The buffer's sends are all over (done or failed), or a peer broke. */
static bool sends_done(void *arg) {
  wait_arg *w = arg;
  for (size_t j = w->b->j0; j < w->b->j1; j++) {
    if (w->t->peers[j]->failed) return true;
    if (wt_ucx_request_status(w->b->reqs[j]) == UCS_INPROGRESS) return false;
  }
  return true;
}

/* Waits for the sends of `b` and frees them; an error names the worker.
 * A worker's first bucket of a round waits for the connect deadline: that
 * wait also covers the connection's set-up (a reconnect after a failed
 * round, a TCP handshake over a slow link) and the worker's start (its
 * UpdateWeights arriving); later ones wait for timeout_ms. */
static wt_status *drain(ucx_trainer *t, sbuf *b, uint64_t nbuckets) {
  wt_status *st = NULL;
  char what[160];
  bool first = false;
  for (size_t j = b->j0; j < b->j1; j++) first = first || !t->peers[j]->moved;
  const int64_t timeout = first ? t->connect_timeout_ms : t->timeout_ms;
  snprintf(what, sizeof(what), "bucket %zu of %" PRIu64 " to be delivered%s",
           b->bucket, nbuckets,
           first ? " (the worker's first of the round: connection and start "
                   "included)"
                 : "");
  wait_arg wa = {.t = t, .b = b};
  st = wt_ucx_wait(t->ucx, sends_done, &wa, wt_mono_ms() + timeout, timeout,
                   what);
  if (st != NULL && wt_status_code(st) == WT_CANCELLED) {
    /* Cancelled because a server failed the round: when that server died,
     * its workers' endpoints break too, usually a moment after its control
     * channel does. Progress briefly so that the error can name the dead
     * worker rather than say "cancelled". */
    const int64_t end = wt_mono_ms() + UCX_CANCEL_GRACE_MS;
    while (!sends_done(&wa) && wt_mono_ms() < end)
      ucp_worker_progress(t->ucx->worker);
    for (size_t j = b->j0; j < b->j1; j++)
      if (t->peers[j]->failed) {
        wt_status_free(st);
        return wt_status_new(WT_UNAVAILABLE,
                             "%s: connection broke while sending bucket %zu: "
                             "%s",
                             t->peers[j]->name, b->bucket,
                             ucs_status_string(t->peers[j]->why));
      }
  }
  if (st != NULL) {
    /* Name the first worker still pending. */
    for (size_t j = 0; j < t->npeers; j++)
      if (wt_ucx_request_status(b->reqs[j]) == UCS_INPROGRESS)
        return wt_status_prefix(st, "%s", t->peers[j]->name);
    return st;
  }
  for (size_t j = 0; j < t->npeers; j++) {
    ucs_status_t us = wt_ucx_request_status(b->reqs[j]);
    if (us == UCS_INPROGRESS && t->peers[j]->failed) us = t->peers[j]->why;
    if (us != UCS_OK)
      WT_FAIL(WT_UNAVAILABLE, "%s: sending bucket %zu failed: %s",
              t->peers[j]->name, b->bucket, ucs_status_string(us));
  }
  for (size_t j = 0; j < t->npeers; j++) {
    if (b->reqs[j] != NULL) ucp_request_free(b->reqs[j]);
    b->reqs[j] = NULL;
  }
  for (size_t j = b->j0; j < b->j1; j++) t->peers[j]->moved = true;
  b->busy = false;
out:
  return st;
}

/* Copies n bytes into dst: memcpy from host memory, or queued on the
 * trainer's stream from and into a GPU's (the caller waits). */
static wt_status *put(ucx_trainer *t, void *dst, const void *src, size_t n) {
  if (t->device < 0) {
    memcpy(dst, src, n);
    return NULL;
  }
  return t->cuda->copy_async(dst, src, n, t->stream);
}

/* Waits for the packing stream within the data deadline, or a cancel. */
static wt_status *wait_packed(ucx_trainer *t, size_t bucket) {
  return wt_status_prefix(wt_cuda_stream_wait(t->cuda, t->stream, t->timeout_ms,
                                              &t->ucx->cancelled),
                          "packing bucket %zu on cuda:%d", bucket, t->device);
}

static wt_status *pack(ucx_trainer *t, wt_source *src, const wt_pack_plan *plan,
                       size_t bucket, unsigned char *dst, const void **bytes) {
  wt_status *st = NULL;
  const wt_bucket *bk = &plan->buckets[bucket];
  const unsigned char *run = NULL; /* the bucket so far, in place */
  uint64_t off = 0;
  bool in_place = true;
  for (size_t k = bk->first; k < bk->first + bk->count; k++) {
    /* A split plan's bucket may begin inside the tensor the bucket before
     * ended in: that one is still the source's last yield. */
    if (t->held_index != k) {
      bool done = false;
      WT_CHECK(wt_source_next(src, &t->held, &done));
      if (done)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "source ended before the plan's tensor %zu", k);
      t->held_index = k;
      if (t->held.nbytes > 0) WT_CHECK(wt_source_tensor_ready(&t->held));
    }
    const wt_source_tensor *tn = &t->held;
    uint64_t part_off = 0, len = 0;
    wt_pack_part(plan, bucket, k, tn->nbytes, &part_off, &len);
    if (len == 0) continue;
    const unsigned char *data =
        tn->data != NULL ? (const unsigned char *)tn->data + part_off : NULL;
    if (in_place && data != NULL && (run == NULL || run + off == data)) {
      if (run == NULL) run = data;
      off += len;
      continue;
    }
    if (in_place && off > 0) WT_CHECK(put(t, dst, run, off)); /* so far */
    in_place = false;
    if (data != NULL)
      WT_CHECK(put(t, dst + off, data, len));
    else
      WT_CHECK(wt_source_read(src, tn, part_off, dst + off, len));
    off += len;
  }
  if (!in_place && t->device >= 0) WT_CHECK(wait_packed(t, bucket));
  *bytes = in_place && run != NULL ? (const void *)run : (const void *)dst;
out:
  return st;
}

wt_status *wt_ucxt_source_device(wt_source *src, int *out) {
  wt_status *st = NULL;
  int device = -1;
  bool host = false;
  const char *first = NULL;
  char first_where[32] = "";
  WT_CHECK(wt_source_rewind(src));
  for (;;) {
    wt_source_tensor x;
    bool done = false;
    WT_CHECK(wt_source_next(src, &x, &done));
    if (done) break;
    bool dev = x.kind == WT_MEM_DEVICE;
    char here[32];
    if (dev)
      snprintf(here, sizeof(here), "cuda:%d", x.device.index);
    else
      snprintf(here, sizeof(here), "host memory");
    if (first == NULL) {
      first = x.name;
      snprintf(first_where, sizeof(first_where), "%s", here);
    }
    if ((dev && (host || (device >= 0 && device != x.device.index))) ||
        (!dev && device >= 0))
      WT_FAIL(WT_INVALID_ARGUMENT,
              "tensor '%s' is in %s, tensor '%s' in %s; the ucx backend "
              "sends a round from host memory or from one GPU",
              x.name, here, first, first_where);
    if (dev)
      device = x.device.index;
    else
      host = true;
  }
  WT_CHECK(wt_source_rewind(src));
  *out = device;
out:
  return st;
}

/* Where this round's tensors are: host memory, or one GPU (t->device),
 * which UCX must be able to move. */
static wt_status *round_memory(ucx_trainer *t, wt_source *src) {
  wt_status *st = NULL;
  int device = -1;
  WT_CHECK(wt_ucxt_source_device(src, &device));
  t->device = device;
  if (device < 0) goto out;
  WT_CHECK(wt_ucx_need_cuda(t->ucx, "ucx trainer"));
  if (t->cuda == NULL)
    WT_CHECK(wt_status_prefix(wt_cuda_api_get(&t->cuda), "ucx trainer"));
  if (t->cuda->version < 2 || t->cuda->copy_async == NULL)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "ucx trainer: the CUDA module (%s) has no asynchronous copies",
            t->cuda->name);
  WT_CHECK(wt_status_prefix(wt_cuda_bind(device), "ucx trainer"));
  if (t->stream != NULL && t->stream_device != device) {
    t->cuda->stream_destroy(t->stream);
    t->stream = NULL;
  }
  if (t->stream == NULL) {
    WT_CHECK(wt_status_prefix(t->cuda->stream_create(device, &t->stream),
                              "ucx trainer: cuda:%d", device));
    t->stream_device = device;
  }
out:
  return st;
}

/* A round begins: its fan-out, and a fresh endpoint to every worker whose
 * last one closed or broke (the workers accept it inside their receive). */
static wt_status *round_begin(ucx_trainer *t) {
  wt_status *st = NULL;
  if (t->npeers == 0)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "backend 'ucx': no worker endpoint (init_transfer first)");
  t->fanout = wt_ucxt_round_fanout(t);
  if (t->fanout_option == FANOUT_AUTO)
    WT_LOGD("ucx", "trainer: fan-out auto: %s (%zu workers)",
            t->fanout == FANOUT_CHAIN ? "chain, the workers are on more "
                                        "than one host"
                                      : "parallel, the workers share a host",
            t->npeers);
  wt_ucx_reset_cancel(t->ucx);
  for (size_t j = 0; j < t->npeers; j++) {
    peer *p = t->peers[j];
    p->moved = false;
    if (p->ep != NULL && !p->failed) continue;
    if (p->ep != NULL) wt_ucxt_peer_close(t, p);
    WT_CHECK(wt_ucxt_peer_connect(t, p));
  }
out:
  return st;
}

/* Send buffers of the plan's largest bucket, in the round's memory (host,
 * or registered on its GPU), and the request slots of every send. */
static wt_status *round_buffers(ucx_trainer *t, const wt_pack_plan *plan) {
  wt_status *st = NULL;
  if (t->route_reqs == NULL) {
    t->route_reqs = calloc(t->npeers, sizeof(*t->route_reqs));
    if (t->route_reqs == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (uint32_t i = 0; i < t->num_buffers; i++) {
    sbuf *b = &t->bufs[i];
    if (b->reqs == NULL) {
      b->reqs = calloc(t->npeers, sizeof(*b->reqs));
      if (b->reqs == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
    }
    uint64_t enc = wt_ucx_delta_bound(plan->max_bucket_bytes);
    if (t->nfull < t->npeers && b->enc_cap < enc) {
      free(b->enc);
      b->enc_cap = 0;
      if ((b->enc = malloc(enc ? (size_t)enc : 1)) == NULL)
        WT_FAIL(WT_RESOURCE_EXHAUSTED,
                "out of memory for a delta send buffer of %" PRIu64 " bytes",
                enc);
      b->enc_cap = enc;
    }
    if (b->cap >= plan->max_bucket_bytes && b->device == t->device) continue;
    wt_ucxt_sbuf_free(t, b);
    size_t len = plan->max_bucket_bytes ? plan->max_bucket_bytes : 1;
    if (t->device >= 0) {
      void *d = NULL;
      WT_CHECK(wt_status_prefix(t->cuda->device_alloc(t->device, len, &d),
                                "a send buffer of %zu bytes on cuda:%d", len,
                                t->device));
      b->data = d;
      b->device = t->device;
      WT_CHECK(wt_ucx_mem_map(t->ucx, b->data, len, true, "a send buffer",
                              &b->memh));
    } else if ((b->data = malloc(len)) == NULL) {
      WT_FAIL(WT_RESOURCE_EXHAUSTED,
              "out of memory for a send buffer of %" PRIu64 " bytes",
              plan->max_bucket_bytes);
    }
    b->cap = plan->max_bucket_bytes;
  }
out:
  return st;
}

/* Bucket `bkt`, at `bytes` (b's data, or the source's own memory), to the
 * workers [j0, j1), each with its server's round in the tag. */
static wt_status *send_bucket(ucx_trainer *t, sbuf *b, size_t bkt,
                              const void *bytes, size_t len, size_t j0,
                              size_t j1) {
  b->bucket = bkt;
  b->busy = true;
  b->j0 = j0;
  b->j1 = j1;
  for (size_t j = j0; j < j1; j++) {
    peer *p = t->peers[j];
    if (p->failed || p->ep == NULL)
      return wt_status_new(
          WT_UNAVAILABLE, "%s: connection broke: %s", p->name,
          ucs_status_string(p->failed ? p->why : UCS_ERR_NOT_CONNECTED));
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                              .datatype = ucp_dt_make_contig(1)};
    if (t->device >= 0) {
      rp.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
      rp.memory_type = UCS_MEMORY_TYPE_CUDA;
      if (bytes == b->data && b->memh != NULL) {
        rp.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        rp.memh = b->memh;
      }
    }
    void *req = ucp_tag_send_nbx(
        p->ep, bytes, len,
        wt_ucx_tag(t->secret, wt_ucxt_round_of(t, p),
                   wt_ucx_rank_bucket(t->ranked, t->rank, bkt)),
        &rp);
    if (UCS_PTR_IS_ERR(req))
      return wt_status_new(WT_UNAVAILABLE, "%s: sending bucket %zu: %s",
                           p->name, bkt,
                           ucs_status_string(UCS_PTR_STATUS(req)));
    b->reqs[j] = req;
  }
  return NULL;
}

/* What a round has sent so far, for progress (a sequential fan-out sends
 * everything once per worker). */
typedef struct round_progress {
  wt_progress pr;
  uint64_t tensors, bytes;
  size_t npasses;
  wt_progress_fn fn;
  void *user;
} round_progress;

static void bucket_sent(round_progress *rp, const wt_bucket *bk, bool report) {
  rp->tensors += bk->done_count;
  rp->bytes += bk->nbytes;
  rp->pr.tensors_done = rp->tensors / rp->npasses;
  rp->pr.bytes_done = rp->bytes / rp->npasses;
  if (report && rp->fn) rp->fn(&rp->pr, rp->user);
}

/* What a pass does with the base (docs/delta.md): nothing, keep the new
 * bytes as the next round's base, or send delta buckets against it (and
 * keep the new bytes). */
enum { PASS_PLAIN, PASS_KEEP, PASS_DELTA };

/* Bucket bytes[0..n) at byte `at` of the round: with PASS_DELTA its delta
 * message (ucx_shared.h) into b->enc, *len its size; the new bytes
 * replace the base's there and go into the round's digest. */
static void through_base(ucx_trainer *t, sbuf *b, int mode,
                         const unsigned char *bytes, uint64_t n, uint64_t at,
                         size_t *len) {
  int64_t t0 = wt_mono_us();
  unsigned char *q = b->enc;
  for (uint64_t pos = 0; pos < n;) {
    size_t seg = n - pos < WT_UCX_DELTA_SEGMENT_BYTES
                     ? (size_t)(n - pos)
                     : WT_UCX_DELTA_SEGMENT_BYTES;
    unsigned char *base = t->d.base + at + pos;
    const unsigned char *nb = bytes + pos;
    if (mode == PASS_DELTA) {
      uint64_t digest = wt_delta_digest(base, seg);
      size_t flen = wt_delta_encode(t->d.codec, nb, base, seg, t->xor_buf,
                                    q + WT_UCX_DELTA_HEADER_BYTES, seg);
      if (flen > 0) {
        wt_ucx_delta_header_put(q, seg, digest, flen);
      } else { /* not smaller: the new bytes as they are */
        flen = seg;
        wt_ucx_delta_header_put(q, seg, 0, seg);
        memcpy(q + WT_UCX_DELTA_HEADER_BYTES, nb, seg);
      }
      q += WT_UCX_DELTA_HEADER_BYTES + flen;
      t->stats.delta_wire_bytes += flen;
    }
    memcpy(base, nb, seg);
    wt_delta_hasher_update(t->d.hash, nb, seg);
    pos += seg;
  }
  *len = mode == PASS_DELTA ? (size_t)(q - b->enc) : (size_t)n;
  t->encode_ns += (wt_mono_us() - t0) * 1000;
}

/* One pass over the source to the workers [j0, j1): each bucket packed
 * (or sent in place) into the next buffer once that buffer's last sends
 * completed, then the buffers still in flight, oldest first. */
static wt_status *send_pass(ucx_trainer *t, wt_source *source,
                            const wt_pack_plan *plan, size_t j0, size_t j1,
                            int mode, round_progress *rp) {
  wt_status *st = NULL;
  WT_CHECK(wt_source_rewind(source));
  t->held_index = SIZE_MAX;
  if (mode != PASS_PLAIN) wt_delta_hasher_reset(t->d.hash);
  uint64_t at = 0; /* the bucket's place in the round's bytes (= in base) */
  for (size_t bkt = 0; bkt < plan->nbuckets; bkt++) {
    sbuf *b = &t->bufs[bkt % t->num_buffers];
    if (b->busy) {
      WT_CHECK(drain(t, b, plan->nbuckets));
      bucket_sent(rp, &plan->buckets[b->bucket], true);
    }
    const void *bytes = NULL;
    uint64_t nbytes = plan->buckets[bkt].nbytes;
    WT_CHECK(pack(t, source, plan, bkt, b->data, &bytes));
    size_t len = (size_t)nbytes;
    if (mode != PASS_PLAIN) through_base(t, b, mode, bytes, nbytes, at, &len);
    if (mode == PASS_DELTA) bytes = b->enc;
    WT_CHECK(send_bucket(t, b, bkt, bytes, len, j0, j1));
    at += nbytes;
  }
  size_t inflight =
      plan->nbuckets < t->num_buffers ? plan->nbuckets : t->num_buffers;
  for (size_t i = 0; i < inflight; i++) {
    size_t bkt = plan->nbuckets - inflight + i;
    sbuf *b = &t->bufs[bkt % t->num_buffers];
    if (!b->busy) continue;
    WT_CHECK(drain(t, b, plan->nbuckets));
    bucket_sent(rp, &plan->buckets[bkt], false);
  }
out:
  return st;
}

/* Which transports carry the data (UCX_TLS, transports) is otherwise
 * invisible: each endpoint's lanes, once, at debug level. */
static void log_lanes(ucx_trainer *t) {
  if (!wt_log_enabled(WT_LOG_DEBUG) || t->lanes_logged) return;
  t->lanes_logged = true;
  for (size_t j = 0; j < t->npeers; j++) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL) break;
    ucp_ep_print_info(t->peers[j]->ep, f);
    fclose(f);
    WT_LOGD("ucx", "%s: %s", t->peers[j]->name, text);
    free(text);
  }
}

/* A failed round ends what is in flight (the buffers are reused next
 * round) by closing the endpoints; the next round connects to every worker
 * afresh. All of them, not only those with sends still going: a send that
 * completed locally may sit unacknowledged in the kernel's socket buffer,
 * and after a cut link that TCP connection stays in retransmission
 * back-off (seconds, up to minutes) after the link is back, stalling
 * whatever the next round queues behind it. A fresh connection starts
 * clean, and tells the worker that the old one is obsolete (see the ucx
 * engine's check_strays). */
static void round_failed(ucx_trainer *t) {
  for (size_t j = 0; j < t->npeers; j++) wt_ucxt_peer_close(t, t->peers[j]);
  for (uint32_t i = 0; i < t->num_buffers; i++) {
    sbuf *b = &t->bufs[i];
    for (size_t j = 0; b->reqs && j < t->npeers; j++) {
      wt_ucx_request_drop(t->ucx, b->reqs[j], UCX_GRACE_MS);
      b->reqs[j] = NULL;
    }
    b->busy = false;
  }
  for (size_t j = 0; t->route_reqs && j < t->npeers; j++) {
    wt_ucx_request_drop(t->ucx, t->route_reqs[j], UCX_GRACE_MS);
    t->route_reqs[j] = NULL;
  }
}

/* Orders the peers for the round: the workers of servers that get a full
 * round first, then those that get a delta (t->nfull: where they start),
 * each group in server order. The peer structs do not move (UCX's
 * callbacks point at them), only the array of pointers. */
static void order_peers(ucx_trainer *t) {
  size_t ns = t->ctx->nservers;
#define PEER_KEY(p)                                                   \
  (((uint64_t)((p)->server < ns && t->delta_to[(p)->server]) << 63) | \
   ((uint64_t)(p)->server << 32) | (p)->rank)
  for (size_t j = 1; j < t->npeers; j++) { /* insertion sort: few peers */
    peer *p = t->peers[j];
    uint64_t key = PEER_KEY(p);
    size_t i = j;
    for (; i > 0 && PEER_KEY(t->peers[i - 1]) > key; i--)
      t->peers[i] = t->peers[i - 1];
    t->peers[i] = p;
  }
  t->nfull = 0;
  while (t->nfull < t->npeers && !(PEER_KEY(t->peers[t->nfull]) >> 63))
    t->nfull++;
#undef PEER_KEY
}

/* The round, in steps: begin (fan-out, connections), the source's memory,
 * the plan, the buffers, the routes, every pass (parallel: one pass to
 * every worker; sequential: one per worker, the source read once each;
 * chain: one pass to the first worker, which forwards), the routes' sends
 * waited for. */
wt_status *wt_ucxt_send_weights(void *self, wt_source *source,
                                wt_progress_fn progress, void *user) {
  wt_status *st = NULL;
  ucx_trainer *t = self;
  wt_pack_plan *plan = NULL;
  size_t n = 0;
  const wt_tensor_meta *metas = wt_source_metas(source, &n);
  round_progress rp = {
      .pr = {.tensors_total = n, .bytes_total = wt_source_total_bytes(source)},
      .fn = progress,
      .user = user};
  int64_t t0 = wt_mono_us();
  WT_CHECK(round_begin(t));
  order_peers(t);
  WT_CHECK(round_memory(t, source));
  WT_CHECK(t->split
               ? wt_pack_plan_split_from_metas(metas, n, t->buffer_bytes, &plan)
               : wt_pack_plan_from_metas(metas, n, t->buffer_bytes, &plan));
  WT_CHECK(round_buffers(t, plan));
  size_t nf = t->nfull, nd = t->npeers - nf;
  t->stats = (wt_delta_stats){.raw_bytes = plan->total_bytes};
  for (size_t k = 0; k < t->ctx->nservers; k++) {
    t->stats.delta_servers += t->delta_to[k];
    t->stats.full_servers += !t->delta_to[k];
  }
  t->encode_ns = 0;
  /* The base is rewritten as the round goes: a base again only once the
   * round was sent whole. */
  t->d.base_digest = 0;
  bool keep = t->d.mode != WT_DELTA_OFF && t->device < 0 &&
              (nd > 0 || t->keep_base) && t->d.base_bytes == plan->total_bytes;
  bool seq = t->fanout == FANOUT_SEQUENTIAL;
  bool chain = t->fanout == FANOUT_CHAIN;
  /* Passes: the full group (workers that hold another version) first,
   * then the delta group, which a sequential fan-out serves as one
   * parallel pass (the base is rewritten as it is encoded). */
  rp.npasses = (seq ? nf : nf > 0) + (nd > 0);
  WT_CHECK(wt_ucxt_send_routes(t, 0, nf));
  WT_CHECK(wt_ucxt_send_routes(t, nf, t->npeers));
  for (size_t j = 0; j < nf; j = seq ? j + 1 : nf) {
    size_t j1 = seq ? j + 1 : chain ? 1 : nf;
    int mode = keep && nd == 0 && j == 0 ? PASS_KEEP : PASS_PLAIN;
    WT_CHECK(send_pass(t, source, plan, j, j1, mode, &rp));
  }
  if (nd > 0) {
    size_t j1 = chain ? nf + 1 : t->npeers;
    WT_CHECK(send_pass(t, source, plan, nf, j1, PASS_DELTA, &rp));
  }
  WT_CHECK(wt_ucxt_drain_routes(t));
  if (keep) {
    t->d.base_digest = wt_delta_hasher_digest(t->d.hash);
    t->d.base_layout = t->layout;
  }
  if (t->d.mode != WT_DELTA_OFF) {
    double took = (double)(wt_mono_us() - t0) * 1000.0;
    double per_byte =
        took / (double)(plan->total_bytes ? plan->total_bytes : 1);
    wt_delta_measured(&t->d, nd > 0, per_byte);
    t->stats.encode_s = (double)t->encode_ns / 1e9;
    t->stats.round_s = took / 1e9;
  }
  log_lanes(t);
  rp.pr.tensors_done = rp.pr.tensors_total;
  rp.pr.bytes_done = rp.pr.bytes_total;
  if (progress) progress(&rp.pr, user);
out:
  if (st != NULL) round_failed(t);
  wt_pack_plan_free(plan);
  return st;
}
