/* ucx_worker_conn.c: the `ucx` worker engine's connections from the trainer
 * (accepted inside ucp_worker_progress, reaped once broken) and the receives
 * a failed round leaves behind: unexpected buckets are drained, matched ones
 * are kept until they end or their connection is replaced, so that nothing
 * of a failed round lands after it (see ucx_worker.c). */

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/ucx/ucx_worker.h"
#include "wt/log.h"
#include "wt/secure.h"

/* Gives a slot's request back to UCX (which calls no callback after this)
 * and frees its note. */
void wt_ucxe_slot_release(slot *s) {
  if (s->req != NULL) ucp_request_free(s->req);
  free(s->note);
  s->req = NULL;
  s->note = NULL;
}

void wt_ucxe_peer_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
  peer *p = arg;
  (void)ep;
  p->failed = true;
  p->why = status;
  WT_LOGD("ucx", "trainer connection closed: %s", ucs_status_string(status));
}

/* Accepts the trainer's connection; runs inside ucp_worker_progress. The
 * peer array never moves (error callbacks hold a pointer into it), so it is
 * allocated at its final capacity and slots of closed connections are
 * reused (wt_ucxe_reap_peers). */
static void hello_done(void *req, ucs_status_t status, size_t length,
                       void *user) {
  peer *p = user;
  (void)req;
  if (status == UCS_OK) p->hello_len = length;
}

/* The client's address of a connection request ("?" when UCX cannot say). */
static void request_addr(ucp_conn_request_h req, char *out, size_t n) {
  ucp_conn_request_attr_t a = {.field_mask =
                                   UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR};
  snprintf(out, n, "?");
  if (ucp_conn_request_query(req, &a) != UCS_OK) return;
  const struct sockaddr *sa = (const struct sockaddr *)&a.client_address;
  const void *ip =
      sa->sa_family == AF_INET6
          ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
          : (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
  if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) return;
  if (inet_ntop(sa->sa_family, ip, out, (socklen_t)n) == NULL)
    snprintf(out, n, "?");
}

static bool owes_hello(const peer *p) {
  return p->used && !p->authed && !p->closing && !p->evicted;
}

void wt_ucxe_on_conn(ucp_conn_request_h req, void *arg) {
  wt_engine *e = arg;
  peer *p = NULL;
  char addr[64];
  request_addr(req, addr, sizeof(addr));
  /* Who owes a hello, in all and from this address, and the oldest of
   * each. */
  size_t pending = 0, same = 0;
  peer *oldest = NULL, *oldest_same = NULL;
  for (size_t i = 0; i < e->npeers; i++) {
    peer *q = &e->peers[i];
    if (!owes_hello(q)) continue;
    pending++;
    if (oldest == NULL || q->hello_deadline_ms < oldest->hello_deadline_ms)
      oldest = q;
    if (strcmp(q->addr, addr) != 0) continue;
    same++;
    if (oldest_same == NULL ||
        q->hello_deadline_ms < oldest_same->hello_deadline_ms)
      oldest_same = q;
  }
  for (size_t i = 0; i < e->npeers && p == NULL; i++)
    if (!e->peers[i].used) p = &e->peers[i];
  if (p == NULL && e->npeers < e->cap) p = &e->peers[e->npeers++];
  if (p == NULL) {
    e->refused++;
    WT_LOGW("ucx",
            "%s: refusing a connection from %s (all %zu slots taken, %zu "
            "owing their hello; %" PRIu64 " refused so far)",
            e->where, addr, e->cap, pending, e->refused);
    ucp_listener_reject(e->listener, req);
    return;
  }
  /* Room for the newcomer: the oldest that owes its hello goes (closed at
   * the next check, outside UCX's callbacks). */
  peer *evict = same >= UCX_MAX_PENDING_PER_ADDR ? oldest_same
                : pending >= UCX_MAX_PENDING     ? oldest
                                                 : NULL;
  if (evict != NULL) {
    evict->evicted = true;
    e->evicted++;
  }
  memset(p, 0, sizeof(*p));
  snprintf(p->addr, sizeof(p->addr), "%s", addr);
  ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
                        .conn_request = req,
                        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                        .err_handler = {.cb = wt_ucxe_peer_error, .arg = p}};
  ucs_status_t us = ucp_ep_create(e->ucx->worker, &ep, &p->ep);
  if (us != UCS_OK) {
    WT_LOGW("ucx", "%s: accepting a connection to the listener: %s", e->where,
            ucs_status_string(us));
    return;
  }
  p->used = true;
  p->hello_deadline_ms = wt_mono_ms() + UCX_HELLO_MS;
  /* The first bytes on the connection must be the init's hello. */
  ucp_request_param_t rp = {
      .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS |
                      UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_USER_DATA,
      .flags = UCP_STREAM_RECV_FLAG_WAITALL,
      .datatype = ucp_dt_make_contig(1),
      .cb = {.recv_stream = hello_done},
      .user_data = p};
  void *hr = ucp_stream_recv_nbx(p->ep, p->hello, sizeof(p->hello),
                                 &p->hello_len, &rp);
  if (UCS_PTR_IS_ERR(hr)) {
    p->failed = true; /* closed by the next check */
    p->why = UCS_PTR_STATUS(hr);
  } else if (hr == NULL) {
    p->hello_len = sizeof(p->hello); /* complete at once */
  }
  p->hello_req = hr;
  WT_LOGD("ucx", "%s: a connection came in; waiting for its hello", e->where);
}

/* Closes a connection that did not prove itself, without waiting. */
static void drop_stranger(wt_engine *e, peer *p, const char *why) {
  e->rejected++;
  WT_LOGW("ucx",
          "%s: closed a connection to the listener: %s (%" PRIu64
          " closed so far)",
          e->where, why, e->rejected);
  if (p->hello_req != NULL && !UCS_PTR_IS_ERR(p->hello_req)) {
    ucp_request_cancel(e->ucx->worker, p->hello_req);
    ucp_request_free(p->hello_req);
  }
  p->hello_req = NULL;
  ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                            .flags = UCP_EP_CLOSE_FLAG_FORCE};
  void *r = ucp_ep_close_nbx(p->ep, &cp);
  /* The slot is reused only once UCX is done with the endpoint (its error
   * callback points at the slot). */
  p->closing = true;
  p->close_req = r != NULL && !UCS_PTR_IS_ERR(r) ? r : NULL;
}

void wt_ucxe_check_hellos(wt_engine *e) {
  int64_t now = wt_mono_ms();
  for (size_t i = 0; i < e->npeers; i++) {
    peer *p = &e->peers[i];
    if (!p->used || p->authed) continue;
    if (p->closing) {
      if (p->close_req == NULL ||
          ucp_request_check_status(p->close_req) != UCS_INPROGRESS) {
        if (p->close_req != NULL) ucp_request_free(p->close_req);
        memset(p, 0, sizeof(*p));
      }
      continue;
    }
    ucs_status_t us =
        p->hello_req == NULL ? UCS_OK : ucp_request_check_status(p->hello_req);
    if (p->evicted && us == UCS_INPROGRESS) {
      drop_stranger(e, p,
                    "it owed its hello when a newer connection needed its "
                    "place (at most 16 owing, 8 per address)");
    } else if (p->failed) {
      drop_stranger(e, p, "it broke before its hello");
    } else if (us == UCS_INPROGRESS) {
      if (now >= p->hello_deadline_ms)
        drop_stranger(e, p, "no hello within 2000 ms");
    } else if (us != UCS_OK || p->hello_len != sizeof(p->hello) ||
               !wt_ct_equal(p->hello, e->hello, sizeof(p->hello))) {
      drop_stranger(e, p, "a wrong hello (not this init's secret)");
    } else {
      if (p->hello_req != NULL) ucp_request_free(p->hello_req);
      p->hello_req = NULL;
      p->authed = true;
      p->gen = ++e->conns;
      WT_LOGD("ucx", "%s: trainer connected", e->where);
    }
  }
}

/* Discards the unexpected messages left from an aborted round (buckets the
 * trainer sent after this worker stopped receiving, or a stranger's), so
 * that they neither pile up nor hold the trainer's old connection. Each is
 * received truncated into nothing (wt_ucx_discard_unexpected), whatever
 * length it claims: nothing is allocated for it and no data is pulled (a
 * rendezvous sender is told the receive is over). Bounded in time, the
 * progress included: a flood never holds an abort longer than
 * UCX_DRAIN_MS. */
void wt_ucxe_drain_unexpected(wt_engine *e) {
  if (e->ucx == NULL) return;
  const int64_t end = wt_mono_ms() + UCX_DRAIN_MS;
  size_t dropped = 0;
  while (wt_mono_ms() < end) {
    for (int i = 0; i < 64 && ucp_worker_progress(e->ucx->worker) != 0; i++) {
    }
    size_t n = wt_ucx_discard_unexpected(e->ucx);
    if (n == 0) break;
    dropped += n;
  }
  if (dropped > 0)
    WT_LOGD("ucx", "%s: dropped %zu stale message(s)", e->where, dropped);
}

/* Closes the broken trainer connections (outside UCX callbacks) and frees
 * their slots. */
void wt_ucxe_reap_peers(wt_engine *e) {
  wt_ucxe_check_hellos(e);
  for (size_t i = 0; i < e->npeers; i++) {
    peer *p = &e->peers[i];
    if (!p->used || !p->failed || !p->authed) continue;
    wt_ucx_ep_close(e->ucx, p->ep, false, 200);
    memset(p, 0, sizeof(*p));
  }
}

/* The error of a broken trainer connection, for messages. */
ucs_status_t wt_ucxe_last_error(const wt_engine *e) {
  for (size_t i = e->npeers; i-- > 0;)
    if (e->peers[i].used && e->peers[i].authed && e->peers[i].failed)
      return e->peers[i].why;
  return UCS_ERR_CONNECTION_RESET;
}

/* A wait also ends once every trainer connection has been broken for
 * UCX_PEER_GONE_MS: not at the first error, because after a failed round the
 * trainer replaces its endpoints and the new connection may come in after
 * the old one's error. A trainer connected by worker address leaves no
 * connection here; the deadline alone bounds that wait. */
/* During a round, once a second: strangers' connections to this worker's
 * UCX ports past max_peers end the wait (the round fails, and the engine
 * is given up at the next check, which closes them): descriptors stay
 * bounded mid-round as between rounds. */
static bool strangers_over(wt_engine *e) {
  if (e->max_peers == 0 || e->nown == 0) return false;
  int64_t now = wt_mono_ms();
  if (now - e->peers_checked_ms < 1000) return e->peers_over != 0;
  e->peers_checked_ms = now;
  size_t peers = wt_ucxe_count_peers(e->own_ports, e->nown);
  e->peers_over = peers > e->max_peers ? peers : 0;
  return e->peers_over != 0;
}

bool wt_ucxe_recv_done(void *arg) {
  wait_arg *w = arg;
  wt_engine *e = w->e;
  wt_ucxe_check_hellos(e);
  if (wt_ucx_request_status(w->req) != UCS_INPROGRESS) return true;
  if (strangers_over(e)) return true;
  bool any = false, all_failed = true;
  for (size_t i = 0; i < e->npeers; i++) {
    if (!e->peers[i].used || !e->peers[i].authed) continue;
    any = true;
    all_failed = all_failed && e->peers[i].failed;
  }
  all_failed = any && all_failed;
  if (!all_failed) {
    e->gone_since_ms = 0;
    return false;
  }
  int64_t now = wt_mono_ms();
  if (e->gone_since_ms == 0) e->gone_since_ms = now;
  return now - e->gone_since_ms >= UCX_PEER_GONE_MS;
}

wt_status *wt_ucxe_wait_recv(wt_engine *e, void *req, int64_t timeout_ms,
                             const char *what) {
  wait_arg wa = {.e = e, .req = req};
  wt_status *st = wt_ucx_wait(e->ucx, wt_ucxe_recv_done, &wa,
                              wt_mono_ms() + timeout_ms, timeout_ms, what);
  if (st != NULL) {
    bool broke = e->gone_since_ms != 0;
    return wt_status_prefix(st, "%s%s", e->where,
                            broke ? " (the trainer's connection broke)" : "");
  }
  if (wt_ucx_request_status(req) == UCS_INPROGRESS && e->peers_over != 0) {
    char count[64] = "the process ran out of descriptors";
    if (e->peers_over != SIZE_MAX)
      snprintf(count, sizeof(count), "%zu connections", e->peers_over);
    return wt_status_new(
        WT_RESOURCE_EXHAUSTED,
        "%s: %s to its UCX ports while waiting for %s, more than the %u a "
        "trainer needs (ucx.max_peer_connections): strangers who know its "
        "address; the round ends and a new init closes them",
        e->where, count, what, e->max_peers);
  }
  if (wt_ucx_request_status(req) == UCS_INPROGRESS)
    return wt_status_new(WT_UNAVAILABLE,
                         "%s: the trainer is gone (its connection broke: %s) "
                         "while waiting for %s",
                         e->where, ucs_status_string(wt_ucxe_last_error(e)),
                         what);
  return NULL;
}

typedef struct settle_arg {
  wt_engine *e;
  slot *slots; /* e->nslots of them */
} settle_arg;

static bool slots_settled(void *arg) {
  settle_arg *w = arg;
  for (size_t i = 0; i < w->e->nslots; i++)
    if (wt_ucx_request_status(w->slots[i].req) == UCS_INPROGRESS) return false;
  return true;
}

/* Ends the bucket receives a failed round left posted, so that nothing of
 * that round lands in the staging buffers later (when the next round, or
 * readers, own them). A receive UCX has not matched yet is cancelled. One
 * it has matched (the trainer had begun sending the bucket) cannot be
 * cancelled: UCX keeps writing as the rest of the bucket arrives (over TCP
 * the sender's puts land whatever became of the request), which a stalled
 * trainer or a cut link may deliver seconds later. Such a receive is kept in
 * e->strays, together with the iov arrays UCX reads, and the next round
 * first waits for it to end (wt_ucxe_check_strays): the bucket completes, or
 * fails once UCX sees the trainer's connection break. (Closing the connection
 * here instead would end it at once, but UCX 1.13's TCP transport can then
 * trip an assertion over a put in flight and abort the process.) Takes
 * *iov_all when it keeps strays. */
void wt_ucxe_settle_receives(wt_engine *e, slot *slots, uint64_t round_id,
                             ucp_dt_iov_t **iov_all) {
  settle_arg w = {.e = e, .slots = slots};
  for (size_t i = 0; i < e->nslots; i++)
    if (wt_ucx_request_status(slots[i].req) == UCS_INPROGRESS)
      ucp_request_cancel(e->ucx->worker, slots[i].req);
  const int64_t end = wt_mono_ms() + UCX_SETTLE_MS;
  while (!slots_settled(&w) && wt_mono_ms() < end)
    ucp_worker_progress(e->ucx->worker);
  for (size_t i = 0; i < e->nslots; i++) {
    if (slots[i].req == NULL) continue;
    slot *n = NULL;
    if (wt_ucx_request_status(slots[i].req) == UCS_INPROGRESS)
      n = realloc(e->strays, (e->nstrays + 1) * sizeof(*n));
    if (n != NULL) {
      e->strays = n;
      if (e->nstrays == 0) {
        e->stray_round = round_id;
        e->stray_bucket = slots[i].bucket;
        e->stray_mark = e->conns;
      }
      e->strays[e->nstrays++] = slots[i];
    } else {
      /* Ended; or, out of memory, left to UCX, which owns it until it ends
       * and calls no callback once it is freed. */
      wt_ucxe_slot_release(&slots[i]);
    }
    slots[i].req = NULL;
    slots[i].note = NULL;
  }
  if (e->nstrays > 0) {
    WT_LOGI("ucx",
            "%s: round %" PRIu64
            " failed while the trainer was sending "
            "bucket %zu; the next round waits until that bucket ends",
            e->where, round_id, e->stray_bucket);
    if (e->stray_iov == NULL) {
      e->stray_iov = *iov_all;
      *iov_all = NULL;
    }
  }
}

/* The trainer connected again since the strays were left: it replaces its
 * endpoints after a failed round, closing the old ones first. */
static bool reconnected(const wt_engine *e) {
  for (size_t i = 0; i < e->npeers; i++)
    if (e->peers[i].used && e->peers[i].authed && !e->peers[i].failed &&
        e->peers[i].gen > e->stray_mark)
      return true;
  return false;
}

static bool strays_done(void *arg) {
  const wt_engine *e = arg;
  if (reconnected(e)) return true;
  for (size_t i = 0; i < e->nstrays; i++)
    if (wt_ucx_request_status(e->strays[i].req) == UCS_INPROGRESS) return false;
  return true;
}

/* Waits up to `timeout` ms for the strays to end and frees them; fails,
 * naming the bucket, if one is still going (or the wait is cancelled).
 * Once the trainer has connected anew, the connections the strays came
 * through are obsolete (the trainer closed its ends before reconnecting,
 * though over a cut link this side may not hear of it for seconds): they
 * are closed, so that nothing more arrives through them, and the strays
 * are released to UCX. */
wt_status *wt_ucxe_check_strays(wt_engine *e, int64_t timeout) {
  if (e->nstrays == 0) return NULL;
  wt_status_free(wt_ucx_wait(e->ucx, strays_done, e, wt_mono_ms() + timeout,
                             timeout, "a failed round's bucket to end"));
  if (reconnected(e)) {
    size_t closed = 0;
    for (size_t i = 0; i < e->npeers; i++) {
      peer *p = &e->peers[i];
      if (!p->used || !p->authed || p->gen > e->stray_mark) continue;
      wt_ucx_ep_close(e->ucx, p->ep, false, 200);
      memset(p, 0, sizeof(*p));
      closed++;
    }
    size_t going = 0;
    for (size_t i = 0; i < e->nstrays; i++) {
      going += wt_ucx_request_status(e->strays[i].req) == UCS_INPROGRESS;
      /* No callback after this; no data either, its connection is gone. */
      wt_ucxe_slot_release(&e->strays[i]);
    }
    e->nstrays = 0;
    if (going > 0) {
      WT_LOGI("ucx",
              "%s: the trainer reconnected; closed %zu old connection(s) "
              "that %zu receive(s) of failed round %" PRIu64
              " were still coming through",
              e->where, closed, going, e->stray_round);
      if (e->stray_iov != NULL) {
        /* UCX may still hold the iov arrays of the released receives:
         * kept until destroy (leaked if even that cannot be recorded). */
        void **o = realloc(e->orphans, (e->norphans + 1) * sizeof(*o));
        if (o != NULL) {
          e->orphans = o;
          e->orphans[e->norphans++] = e->stray_iov;
        }
        e->stray_iov = NULL;
      }
    }
    free(e->stray_iov);
    e->stray_iov = NULL;
    return NULL;
  }
  size_t kept = 0;
  for (size_t i = 0; i < e->nstrays; i++) {
    if (wt_ucx_request_status(e->strays[i].req) == UCS_INPROGRESS) {
      e->strays[kept++] = e->strays[i];
    } else {
      wt_ucxe_slot_release(&e->strays[i]);
    }
  }
  e->nstrays = kept;
  if (kept > 0)
    return wt_status_new(
        WT_FAILED_PRECONDITION,
        "%s: %zu bucket receive(s) of failed round %" PRIu64
        " (bucket %zu first) may still write into the staging buffers: the "
        "trainer began sending them and, after %" PRId64
        " ms, has neither finished nor disconnected; InitWeightTransferEngine "
        "again to reset the engine",
        e->where, kept, e->stray_round, e->stray_bucket, timeout);
  free(e->stray_iov);
  e->stray_iov = NULL;
  return NULL;
}

/* The registration covering [buf, buf + len), or NULL. */
ucp_mem_h wt_ucxe_memh_of(const wt_engine *e, const void *buf, size_t len) {
  const char *p = buf;
  for (size_t i = 0; i < e->nregions; i++) {
    const char *base = e->regions[i].base;
    if (e->memh[i] != NULL && p >= base && len <= e->regions[i].len &&
        (size_t)(p - base) <= e->regions[i].len - len)
      return e->memh[i];
  }
  return NULL;
}
