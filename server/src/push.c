/* push.c: a PushWeights stream's path into the workers (see
 * server_state.h).
 *
 * The thread that reads the stream hands each chunk to every worker's
 * thread (a PUSH_CHUNK op per worker, referring to the received bytes) and
 * reads on; each worker copies the chunk into its own staging buffers, in
 * parallel with the others and with the next read. The received message is
 * released once every worker has copied it. At most PUSH_WINDOW chunks are
 * in flight per push, which bounds the memory a fast client can make the
 * server hold. A worker's error is kept and returned by the next call.
 *
 * A push that fails in any way (a broken or cancelled stream, a bad
 * message, a worker's error, bytes missing at the end) fails its round on
 * every worker at once: what it delivered is never committed, and every
 * later call of the round names the cause.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_state.h"
#include "wt/chunk.h"
#include "wt/log.h"
#include "wt/lock.h"

/* Chunks handed to the workers and not yet copied by all of them. */
#define PUSH_WINDOW 8

struct wt_srv_push {
  wt_server *srv;
  uint64_t push_id;
  uint64_t round_id;
  uint32_t rank;        /* under a shard plan: the sending trainer rank */
  bool plan;            /* under a shard plan */
  bool resolved;        /* the header was valid */
  uint64_t total_bytes; /* what the header announced */
  uint64_t bytes;       /* handed to the workers so far */
  char peer[128];
  wt_mutex mu;
  pthread_cond_t cv; /* a chunk was copied by every worker */
  int in_flight;
  wt_status *error; /* the first error a worker reported */
  uint64_t chunks;
};

typedef struct push_chunk {
  wt_srv_push *p;
  void (*release)(void *owner);
  void *owner;
  int refs; /* workers that have not run their op yet (under p->mu) */
  struct iovec iov[WT_CHUNK_MAX_PIECES];
  size_t iovcnt;
  wt_worker_op ops[]; /* one per worker */
} push_chunk;

static void chunk_done(wt_worker_op *op, wt_status *st, void *user) {
  push_chunk *c = user;
  wt_srv_push *p = c->p;
  (void)op;
  wt_srv_touch(p->srv);
  wt_mutex_lock(&p->mu);
  if (st != NULL && p->error == NULL) {
    p->error = st;
    st = NULL;
  }
  bool last = --c->refs == 0;
  if (last) p->in_flight--;
  pthread_cond_broadcast(&p->cv);
  wt_mutex_unlock(&p->mu);
  wt_status_free(st);
  if (last) {
    if (c->release) c->release(c->owner);
    free(c);
  }
}

/* "512 MiB", "3.5 KiB", "17 bytes". */
static void format_bytes(uint64_t n, char *buf, size_t size) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (n < 1024) {
    snprintf(buf, size, "%" PRIu64 " bytes", n);
    return;
  }
  double v = (double)n / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    u++;
  }
  snprintf(buf, size, v == (double)(uint64_t)v ? "%.0f %s" : "%.1f %s", v,
           units[u]);
}

/* Under mu: fails the round of push `p` (if it is still open) for `why`. */
static void fail_round_locked(wt_server *srv, const wt_srv_push *p,
                              const char *why) {
  if (srv->round.round_id != p->round_id) return;
  char sent[32], total[32], reason[1024];
  format_bytes(p->bytes, sent, sizeof(sent));
  format_bytes(p->total_bytes, total, sizeof(total));
  char rank[32] = "";
  if (p->plan) snprintf(rank, sizeof(rank), " (rank %u)", p->rank);
  if (p->resolved)
    snprintf(reason, sizeof(reason),
             "PushWeights from %s%s failed after %s of %s: %s", p->peer, rank,
             sent, total, why);
  else
    snprintf(reason, sizeof(reason), "PushWeights from %s%s failed: %s",
             p->peer, rank, why);
  wt_srv_abort_round_locked(srv, WT_CAUSE_RECEIVE, reason);
}

static void push_free(wt_srv_push *p) {
  wt_status_free(p->error);
  pthread_cond_destroy(&p->cv);
  wt_mutex_destroy(&p->mu);
  free(p);
}

wt_status *wt_srv_push_begin(wt_server *srv, wt_rpc_call *call,
                             uint64_t round_id, uint32_t trainer_rank,
                             const Wt__V1__WeightTransferUpdateInfo *info,
                             uint64_t packed_buffer_bytes,
                             const Wt__V1__DeltaBase *delta_base,
                             const wt_srv_plan_waiter *resume,
                             wt_srv_push **out) {
  wt_status *st = NULL;
  wt_srv_resolved r = {0};
  wt_worker_op *ops = calloc(srv->nworkers, sizeof(*ops));
  wt_srv_push *p = calloc(1, sizeof(*p));
  bool locked = false;
  *out = NULL;
  wt_srv_log_round(round_id);
  if (ops == NULL || p == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "PushWeights: out of memory");
  wt_mutex_init(&p->mu, WT_LOCK_PUSH, 0, "push.mu");
  pthread_cond_init(&p->cv, NULL);
  p->srv = srv;
  snprintf(p->peer, sizeof(p->peer), "%s", call ? wt_rpc_call_peer(call) : "?");
  wt_mutex_lock(&srv->round.mu);
  locked = true;
  WT_CHECK(wt_srv_need_round_locked(srv, "PushWeights", round_id));
  p->rank = trainer_rank;
  if (srv->round.plan != NULL) {
    /* Each rank's push waits its turn (or fails the round). */
    if (delta_base != NULL)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "PushWeights: rank %u: a shard plan's round takes no delta base",
              trainer_rank);
    p->plan = true;
    /* NULL: its turn; else the call is parked (touch it no more), or its
     * header is refused (and fails the round when the plan says so). */
    wt_srv_plan_fail fail;
    wt_status *turn = wt_srv_plan_push_turn(srv, call, trainer_rank, round_id,
                                            info, resume, &fail);
    if (fail.why[0] != '\0')
      wt_srv_abort_round_locked(srv, fail.cause, fail.why);
    WT_CHECK(turn);
  }
  WT_CHECK(wt_srv_need_idle_locked(srv, "PushWeights"));
  const wt_engine_ops *eops = wt_worker_engine_ops(srv->workers[0]);
  if (delta_base != NULL) {
    /* A delta against another version is refused before the push is the
     * round's: the trainer sends this server the full bytes instead, in
     * the same round (docs/delta.md). */
    WT_CHECK(wt_srv_check_delta_base_locked(
        srv, "PushWeights", "push", delta_base,
        eops != NULL && eops->push_delta != NULL));
  }
  /* From here on the push is the round's: its failure fails the round. */
  p->round_id = srv->round.round_id;
  if (eops == NULL || eops->push_chunk == NULL)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "PushWeights: backend '%s' does not take PushWeights; its data "
            "moves through UpdateWeights",
            srv->round.backend);
  if (srv->round.plan != NULL)
    WT_CHECK(wt_status_prefix(
        wt_srv_plan_resolve(srv, trainer_rank, info, false, &r),
        "PushWeights"));
  else
    WT_CHECK(wt_srv_resolve_update(srv, info, &r));
  r.u.packed_buffer_bytes = packed_buffer_bytes;
  r.u.delta = delta_base != NULL;
  p->total_bytes = r.u.total_bytes;
  p->resolved = true;
  p->push_id = ++srv->round.next_push_id;
  srv->round.push_id = p->push_id;
  srv->round.push_call = call;
  srv->round.busy = "PushWeights";
  wt_srv_touch(srv);
  wt_worker_op proto = {.kind = WT_WORKER_OP_PUSH_BEGIN,
                        .round_id = p->round_id,
                        .push_id = p->push_id,
                        .update = &r.u};
  st = wt_srv_submit_all(srv, ops, &proto);
  wt_mutex_unlock(&srv->round.mu);
  locked = false;
  if (st == NULL) st = wt_srv_wait_all(srv, ops);
  wt_mutex_lock(&srv->round.mu);
  locked = true;
  if (srv->round.push_id != p->push_id) {
    wt_status_free(st);
    st = wt_srv_aborted_error(srv, "PushWeights", p->round_id);
    goto out;
  }
  if (st != NULL) {
    /* The workers where it began end it (the others ignore the end). */
    wt_worker_op end = {.kind = WT_WORKER_OP_PUSH_END, .push_id = p->push_id};
    wt_status *submitted = wt_srv_submit_all(srv, ops, &end);
    srv->round.push_id = 0;
    srv->round.push_call = NULL;
    srv->round.busy = NULL;
    fail_round_locked(srv, p, wt_status_message(st));
    pthread_cond_broadcast(&srv->round.cv);
    wt_mutex_unlock(&srv->round.mu);
    locked = false;
    if (submitted == NULL)
      wt_status_free(wt_srv_wait_all(srv, ops));
    else
      wt_status_free(submitted);
    goto out;
  }
  WT_LOGD("server",
          "round %" PRIu64 ": push %" PRIu64 " of %zu tensors, %" PRIu64
          " bytes",
          p->round_id, p->push_id, r.u.n, r.u.total_bytes);
  *out = p;
  p = NULL;
out:
  /* A header that does not fit the model fails the round it names. */
  if (st != NULL && locked && p != NULL && p->round_id != 0)
    fail_round_locked(srv, p, wt_status_message(st));
  if (locked) wt_mutex_unlock(&srv->round.mu);
  wt_srv_resolved_clear(&r);
  if (p != NULL) push_free(p);
  free(ops);
  return st;
}

static wt_status *push_submit(wt_srv_push *p, uint32_t bucket, uint64_t offset,
                              const struct iovec *iov, size_t iovcnt,
                              bool delta, uint64_t raw_len,
                              uint64_t base_digest,
                              void (*release)(void *owner), void *owner) {
  wt_server *srv = p->srv;
  wt_status *st = NULL;
  push_chunk *c = NULL;
  if (iovcnt > WT_CHUNK_MAX_PIECES) {
    st = wt_status_new(WT_INVALID_ARGUMENT,
                       "PushWeights: a chunk in %zu pieces; at most %d", iovcnt,
                       WT_CHUNK_MAX_PIECES);
    goto fail;
  }
  wt_mutex_lock(&p->mu);
  while (p->in_flight >= PUSH_WINDOW && p->error == NULL)
    wt_cond_wait(&p->cv, &p->mu);
  if (p->error != NULL) {
    st = wt_status_copy(p->error);
    wt_mutex_unlock(&p->mu);
    goto fail;
  }
  wt_mutex_unlock(&p->mu);
  c = calloc(1, sizeof(*c) + srv->nworkers * sizeof(wt_worker_op));
  if (c == NULL) {
    st = wt_status_new(WT_RESOURCE_EXHAUSTED, "PushWeights: out of memory");
    goto fail;
  }
  c->p = p;
  c->release = release;
  c->owner = owner;
  c->iovcnt = iovcnt;
  memcpy(c->iov, iov, iovcnt * sizeof(*iov));
  c->refs = (int)srv->nworkers;
  wt_mutex_lock(&p->mu);
  p->in_flight++;
  p->chunks++;
  for (size_t i = 0; i < iovcnt; i++) p->bytes += iov[i].iov_len;
  wt_mutex_unlock(&p->mu);
  wt_srv_touch(srv);
  for (uint32_t i = 0; i < srv->nworkers; i++) {
    c->ops[i] = (wt_worker_op){.kind = WT_WORKER_OP_PUSH_CHUNK,
                               .round_id = p->round_id,
                               .push_id = p->push_id,
                               .bucket = bucket,
                               .offset = offset,
                               .iov = c->iov,
                               .iovcnt = c->iovcnt,
                               .delta = delta,
                               .raw_len = raw_len,
                               .base_digest = base_digest,
                               .on_done = chunk_done,
                               .user = c};
    wt_status *e = wt_worker_submit(srv->workers[i], &c->ops[i]);
    /* Only when the worker is going away: count it as done. */
    if (e != NULL) chunk_done(&c->ops[i], e, c);
  }
  return NULL;
fail:
  if (release) release(owner);
  return st;
}

wt_status *wt_srv_push_chunk(wt_srv_push *p, uint32_t bucket, uint64_t offset,
                             const struct iovec *iov, size_t iovcnt,
                             void (*release)(void *owner), void *owner) {
  return push_submit(p, bucket, offset, iov, iovcnt, false, 0, 0, release,
                     owner);
}

wt_status *wt_srv_push_delta(wt_srv_push *p, uint32_t bucket, uint64_t offset,
                             uint64_t raw_len, uint64_t base_digest,
                             const void *frame, size_t len,
                             void (*release)(void *owner), void *owner) {
  struct iovec iov = {(void *)frame, len};
  return push_submit(p, bucket, offset, &iov, 1, true, raw_len, base_digest,
                     release, owner);
}

void wt_srv_committed(wt_server *srv, uint64_t *sequence, uint64_t *digest) {
  wt_mutex_lock(&srv->round.mu);
  *sequence = srv->round.sequence;
  *digest = srv->round.committed_digest;
  wt_mutex_unlock(&srv->round.mu);
}

wt_status *wt_srv_push_end(wt_srv_push *p, const wt_status *cause,
                           wt_receive_stats *stats) {
  wt_server *srv = p->srv;
  wt_status *st = NULL;
  wt_worker_op *ops = calloc(srv->nworkers, sizeof(*ops));
  wt_mutex_lock(&p->mu);
  while (p->in_flight > 0) wt_cond_wait(&p->cv, &p->mu);
  wt_mutex_unlock(&p->mu);
  wt_mutex_lock(&srv->round.mu);
  if (srv->round.push_id != p->push_id) {
    /* Aborted under the push: the workers dropped it with the round. */
    if (cause == NULL)
      st = wt_srv_aborted_error(srv, "PushWeights", p->round_id);
    wt_mutex_unlock(&srv->round.mu);
    goto out;
  }
  if (ops == NULL) {
    st = wt_status_new(WT_RESOURCE_EXHAUSTED, "PushWeights: out of memory");
    srv->round.push_id = 0;
    srv->round.push_call = NULL;
    srv->round.busy = NULL;
    fail_round_locked(srv, p, wt_status_message(st));
    wt_mutex_unlock(&srv->round.mu);
    goto out;
  }
  wt_worker_op end = {.kind = WT_WORKER_OP_PUSH_END,
                      .push_id = p->push_id,
                      .stream_ended = cause == NULL};
  st = wt_srv_submit_all(srv, ops, &end);
  wt_mutex_unlock(&srv->round.mu);
  if (st == NULL) st = wt_srv_wait_all(srv, ops);
  if (stats != NULL) *stats = ops[0].stats;
  wt_mutex_lock(&srv->round.mu);
  if (srv->round.push_id == p->push_id) {
    srv->round.push_id = 0;
    srv->round.push_call = NULL;
    srv->round.busy = NULL;
  }
  /* The first cause explains the rest: a worker's error, then what ended
   * the stream, then what the end found missing. */
  const wt_status *why = p->error ? p->error : cause ? cause : st;
  if (why != NULL) fail_round_locked(srv, p, wt_status_message(why));
  if (why == NULL && srv->round.round_id == p->round_id) {
    /* The version this round makes has a digest when its one update was
     * this push and it covered the store on every worker alike. */
    uint64_t d = ops[0].stats.digest;
    for (uint32_t i = 1; i < srv->nworkers; i++)
      if (ops[i].stats.digest != d) d = 0;
    srv->round.round_digest = ++srv->round.round_updates == 1 ? d : 0;
    if (srv->round.plan != NULL) {
      wt_srv_plan_pushed(srv->round.plan, p->round_id, p->rank);
      wt_srv_plan_kick_locked(srv); /* the next rank's turn */
    }
  }
  wt_srv_touch(srv);
  pthread_cond_broadcast(&srv->round.cv);
  wt_mutex_unlock(&srv->round.mu);
out:
  if (p->error != NULL) {
    wt_status_free(st);
    st = p->error;
    p->error = NULL;
  }
  free(ops);
  push_free(p);
  return st;
}

int64_t wt_srv_push_read_timeout(wt_server *srv, bool pushing) {
  if (!pushing) return srv->config.header_timeout_ms;
  wt_mutex_lock(&srv->round.mu);
  int64_t t = srv->round.data_timeout_ms ? srv->round.data_timeout_ms
                                         : srv->config.data_timeout_ms;
  wt_mutex_unlock(&srv->round.mu);
  return t;
}

wt_status *wt_srv_push_abandon(wt_srv_push *p, wt_status *st) {
  wt_status *end = wt_srv_push_end(p, st, NULL);
  if (st == NULL) return end;
  wt_status_free(end);
  return st;
}
