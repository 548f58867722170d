/* ucx_engine.c: the `ucx` worker engine (built with WT_WITH_UCX).
 *
 * Who listens: the worker. init_transfer opens a ucp_listener on an
 * ephemeral port of the server's host (wt_worker_ctx.host) and reports
 * host:port in the init response, together with its packed ucp worker
 * address; the trainer then connects to every worker of every server (see
 * wt/ucx_common.h for why and how it picks one of the two). Connection
 * requests are accepted while the worker progresses, i.e. inside receive.
 *
 * Data path: the shared bucket plan (update info ucx.packed_buffer_size_bytes,
 * else the init info's, else 64 MiB); bucket b of round r is one tagged
 * message (wt_ucx_tag(r, b)). Each bucket is received straight into the
 * staging buffers of its tensors, so the worker side is zero-copy: no
 * bounce buffer. The store lays tensors out back to back, so that is
 * normally one contiguous receive, which lets UCX use its zero-copy
 * rendezvous (CMA on one host); tensors that are not neighbours make a
 * UCP_DATATYPE_IOV receive. The staging buffers are the store's regions
 * (wt_param_store_regions: both buffer sets of shadow staging, or the one
 * of inplace), fixed for the store's life: init_transfer registers each
 * once with ucp_mem_map and every contiguous receive (and chain forward)
 * passes its handle (UCP_OP_ATTR_FIELD_MEMH), so no round registers
 * memory; destroy unmaps them. An IOV receive leaves registration to UCX
 * (its registration cache). Up to packed_num_buffers (default 2) buckets
 * are posted at once, so receiving bucket b+1 overlaps the trainer packing
 * bucket b+2.
 *
 * Route and chain: every round starts with the route message
 * (wt/ucx_common.h). When it names a next worker (chain fan-out), this
 * worker connects to it (kept across rounds while the route stays), sends
 * it the rest of the route, forwards each bucket from the staging buffers
 * as soon as it has landed, and ends its receive only when the next worker
 * has taken every bucket; a failure there fails this worker's round, naming
 * the next worker.
 *
 * Transports: the init info's ucx.transports, else the server's default
 * (wt-server --ucx-transports, carried in WT_UCX_TRANSPORTS), else UCX_TLS,
 * else UCX's own choice; an invalid server default fails init naming the
 * option.
 *
 * Deadlines: the round's first message (the route) waits at most the connect
 * deadline (init_info.ucx.connect_timeout_ms; unset: 10 s, or timeout_ms if
 * larger), since it also waits for the trainer to connect and start; every
 * bucket then waits at most timeout_ms (the init info's, else the server's
 * default); a trainer that died or stopped mid-round thus fails the
 * round with DEADLINE_EXCEEDED (or UNAVAILABLE naming the trainer when UCX
 * reports the endpoint broken first); the worker aborts the store, so the
 * previous version stays. cancel wakes the wait at once. A bucket receive
 * the failed round leaves in flight is kept (settle_receives) and the next
 * round does not start writing before it has ended or its connection is
 * closed (check_strays), so no byte of a failed round lands later.
 */

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/engine.h"
#include "wt/log.h"
#include "wt/ucx_common.h"

/* Where wt-server --ucx-transports leaves the server's default. */
#define WT_UCX_TRANSPORTS_ENV "WT_UCX_TRANSPORTS"
#define UCX_DEFAULT_BUFFER_BYTES (64ull << 20)
#define UCX_DEFAULT_NUM_BUFFERS 2u
#define UCX_MAX_NUM_BUFFERS 64u
/* How long an abort waits for a posted receive to give up its buffers. */
#define UCX_GRACE_MS 1000
/* How long every trainer connection must stay broken before a receive gives
 * up on the trainer (see recv_done). */
#define UCX_PEER_GONE_MS 1000
/* How long an abort spends discarding a failed round's leftover buckets. */
#define UCX_DRAIN_MS 500

/* A connection from the trainer (normally one per init). */
typedef struct peer {
  bool used; /* slot holds a connection (closed broken ones are reused) */
  ucp_ep_h ep;
  bool failed;
  ucs_status_t why;
  uint64_t gen; /* accepted as the engine's gen-th connection */
} peer;

/* One posted bucket receive. */
typedef struct slot {
  void *req;
  wt_ucx_recv_note *note; /* malloc'd with the request, freed with it */
  size_t bucket;
  ucp_dt_iov_t *iov; /* into the round's iov array, at the bucket's first */
  size_t iovcnt;
} slot;

/* Gives a slot's request back to UCX (which calls no callback after this)
 * and frees its note. */
static void slot_release(slot *s) {
  if (s->req != NULL) ucp_request_free(s->req);
  free(s->note);
  s->req = NULL;
  s->note = NULL;
}

struct wt_engine {
  wt_worker_ctx ctx;
  uint64_t buffer_bytes;
  uint32_t num_buffers;
  /* The route wait's deadline (init_info.ucx.connect_timeout_ms); 0: the
   * default, WT_UCX_CONNECT_TIMEOUT_MS or the bucket deadline if larger. */
  int64_t connect_timeout_ms;
  char *transports;
  bool transports_from_server; /* not the init info's: the server default */
  wt_ucx *ucx;
  ucp_listener_h listener;
  peer *peers;
  size_t npeers, cap;
  char where[64];        /* "worker N" for messages */
  int64_t gone_since_ms; /* every trainer connection broken since; 0: no */
  void **orphans; /* drain buffers UCX may still write; freed at destroy */
  size_t norphans;
  /* Bucket receives of a failed round that UCX had matched and that neither
   * finished nor failed (see settle_receives): UCX may still write through
   * them into the staging buffers, so no round starts while one is left. */
  slot *strays; /* req and note of each; the rest unused */
  size_t nstrays;
  uint64_t stray_round;
  uint64_t conns;      /* connections accepted so far */
  uint64_t stray_mark; /* conns when the strays were left */
  size_t stray_bucket;   /* the first of them, for messages */
  ucp_dt_iov_t *stray_iov; /* their iov arrays, which UCX reads until then */
  /* Chain fan-out (wt/ucx_common.h): the round's route and the connection
   * to the next worker, which gets every bucket once it has landed. */
  unsigned char *route_in, *route_out;
  wt_ucx_hop *hops;
  peer fwd; /* kept across rounds while the route stays the same */
  uint32_t fwd_flags;
  char next[320]; /* "the next worker in the chain (HOST:PORT)" */
  /* The store's regions, registered once at init_transfer. */
  wt_param_region regions[WT_PARAM_STORE_MAX_REGIONS];
  ucp_mem_h memh[WT_PARAM_STORE_MAX_REGIONS];
  size_t nregions;
};

/* The registration covering [buf, buf + len), or NULL. */
static ucp_mem_h memh_of(const wt_engine *e, const void *buf, size_t len) {
  const char *p = buf;
  for (size_t i = 0; i < e->nregions; i++) {
    const char *base = e->regions[i].base;
    if (e->memh[i] != NULL && p >= base && len <= e->regions[i].len &&
        (size_t)(p - base) <= e->regions[i].len - len)
      return e->memh[i];
  }
  return NULL;
}

static void peer_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
  peer *p = arg;
  (void)ep;
  p->failed = true;
  p->why = status;
  WT_LOGD("ucx", "trainer connection closed: %s", ucs_status_string(status));
}

/* Accepts the trainer's connection; runs inside ucp_worker_progress. The
 * peer array never moves (error callbacks hold a pointer into it), so it is
 * allocated at its final capacity and slots of closed connections are
 * reused (reap_peers). */
static void on_conn(ucp_conn_request_h req, void *arg) {
  wt_engine *e = arg;
  peer *p = NULL;
  for (size_t i = 0; i < e->npeers && p == NULL; i++)
    if (!e->peers[i].used) p = &e->peers[i];
  if (p == NULL && e->npeers < e->cap) p = &e->peers[e->npeers++];
  if (p == NULL) {
    WT_LOGW("ucx", "%s: refusing a connection (%zu open)", e->where, e->cap);
    ucp_listener_reject(e->listener, req);
    return;
  }
  memset(p, 0, sizeof(*p));
  ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
                        .conn_request = req,
                        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                        .err_handler = {.cb = peer_error, .arg = p}};
  ucs_status_t us = ucp_ep_create(e->ucx->worker, &ep, &p->ep);
  if (us != UCS_OK) {
    WT_LOGW("ucx", "%s: accepting the trainer: %s", e->where,
            ucs_status_string(us));
    return;
  }
  p->used = true;
  p->gen = ++e->conns;
  WT_LOGD("ucx", "%s: trainer connected", e->where);
}

static wt_status *ucx_create(const Wt__V1__WeightTransferInitInfo *init,
                             const wt_worker_ctx *ctx, wt_engine **out) {
  wt_status *st = NULL;
  wt_engine *e = calloc(1, sizeof(*e));
  if (e == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "ucx engine: out of memory");
  e->ctx = *ctx;
  e->buffer_bytes = UCX_DEFAULT_BUFFER_BYTES;
  e->num_buffers = UCX_DEFAULT_NUM_BUFFERS;
  e->cap = 64; /* open connections: one per trainer (re)connect */
  snprintf(e->where, sizeof(e->where), "ucx worker %u", ctx->rank);
  const Wt__V1__UcxInitInfo *x =
      init->backend_init_case ==
              WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_UCX
          ? init->ucx
          : NULL;
  if (x != NULL) {
    if (x->packed_buffer_size_bytes != NULL) {
      if (x->packed_buffer_size_bytes->value == 0)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "init_info.ucx.packed_buffer_size_bytes is 0; it must be at "
                "least 1");
      e->buffer_bytes = x->packed_buffer_size_bytes->value;
    }
    if (x->packed_num_buffers != NULL) {
      uint32_t v = x->packed_num_buffers->value;
      if (v == 0 || v > UCX_MAX_NUM_BUFFERS)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "init_info.ucx.packed_num_buffers is %u; it must be 1..%u", v,
                UCX_MAX_NUM_BUFFERS);
      e->num_buffers = v;
    }
    if (x->connect_timeout_ms != NULL) {
      if (x->connect_timeout_ms->value == 0)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "init_info.ucx.connect_timeout_ms is 0; it must be at least 1 "
                "(unset: %d ms)",
                WT_UCX_CONNECT_TIMEOUT_MS);
      e->connect_timeout_ms = x->connect_timeout_ms->value;
    }
    if (x->trainer_address != NULL && *x->trainer_address != '\0')
      WT_FAIL(WT_INVALID_ARGUMENT,
              "init_info.ucx.trainer_address is set; in this version the "
              "workers listen and the trainer connects (leave it empty)");
    if (x->transports != NULL && *x->transports != '\0') {
      e->transports = strdup(x->transports);
      if (e->transports == NULL)
        WT_FAIL(WT_RESOURCE_EXHAUSTED, "ucx engine: out of memory");
    }
  }
  /* The server's default (wt-server --ucx-transports) when the init info
   * names none; UCX_TLS applies below both. */
  const char *server_tls = getenv(WT_UCX_TRANSPORTS_ENV);
  if (e->transports == NULL && server_tls != NULL && *server_tls != '\0') {
    e->transports = strdup(server_tls);
    if (e->transports == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "ucx engine: out of memory");
    e->transports_from_server = true;
  }
  e->peers = calloc(e->cap, sizeof(*e->peers));
  e->route_in = malloc(WT_UCX_ROUTE_MAX);
  e->route_out = malloc(WT_UCX_ROUTE_MAX);
  e->hops = calloc(WT_UCX_ROUTE_HOPS, sizeof(*e->hops));
  if (e->peers == NULL || !e->route_in || !e->route_out || !e->hops)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "ucx engine: out of memory");
  *out = e;
  e = NULL;
out:
  if (e) {
    free(e->route_in);
    free(e->route_out);
    free(e->hops);
    free(e->peers);
    free(e->transports);
    free(e);
  }
  return st;
}

static wt_status *ucx_init_transfer(wt_engine *e,
                                    const Wt__V1__WeightTransferInitInfo *init,
                                    wt_engine_endpoint *endpoint) {
  wt_status *st = NULL;
  struct sockaddr_storage ss;
  socklen_t len = 0;
  ucs_status_t us;
  (void)init;
  const char *host = e->ctx.host && *e->ctx.host ? e->ctx.host : "127.0.0.1";
  st = wt_ucx_new(e->transports, e->where, &e->ucx);
  if (st != NULL && e->transports_from_server)
    st = wt_status_prefix(st,
                          "transports '%s' from the server's "
                          "--ucx-transports (" WT_UCX_TRANSPORTS_ENV ")",
                          e->transports);
  if (st != NULL) goto out;
  /* Once per engine: the regions do not move while the store lives. */
  e->nregions = wt_param_store_regions(e->ctx.store, e->regions);
  for (size_t i = 0; i < e->nregions; i++) {
    char what[128];
    snprintf(what, sizeof(what), "%s: staging region %zu", e->where, i);
    WT_CHECK(wt_ucx_mem_map(e->ucx, e->regions[i].base, e->regions[i].len, what,
                            &e->memh[i]));
  }
  WT_LOGD("ucx", "%s: registered %zu staging region(s) with ucp_mem_map",
          e->where, e->nregions);
  WT_CHECK(wt_ucx_sockaddr(host, 0, &ss, &len));
  ucp_listener_params_t lp = {
      .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                    UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
      .sockaddr = {.addr = (const struct sockaddr *)&ss, .addrlen = len},
      .conn_handler = {.cb = on_conn, .arg = e}};
  us = ucp_listener_create(e->ucx->worker, &lp, &e->listener);
  if (us != UCS_OK)
    WT_FAIL(WT_UNAVAILABLE, "%s: listening on %s: %s", e->where, host,
            ucs_status_string(us));
  ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
  us = ucp_listener_query(e->listener, &la);
  if (us != UCS_OK)
    WT_FAIL(WT_INTERNAL, "%s: ucp_listener_query: %s", e->where,
            ucs_status_string(us));
  uint16_t port = la.sockaddr.ss_family == AF_INET6
                      ? ntohs(((struct sockaddr_in6 *)&la.sockaddr)->sin6_port)
                      : ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port);
  snprintf(endpoint->address, sizeof(endpoint->address), "%s", host);
  endpoint->port = port;
  /* Also the packed worker address: a trainer connecting with it gets every
   * transport UCX can reach us by, shared memory included (UCX 1.13's
   * sockaddr wireup does not select shared memory). */
  ucp_address_t *addr = NULL;
  size_t alen = 0;
  us = ucp_worker_get_address(e->ucx->worker, &addr, &alen);
  if (us != UCS_OK)
    WT_FAIL(WT_INTERNAL, "%s: ucp_worker_get_address: %s", e->where,
            ucs_status_string(us));
  endpoint->worker_address = malloc(alen);
  if (endpoint->worker_address == NULL) {
    ucp_worker_release_address(e->ucx->worker, addr);
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", e->where);
  }
  memcpy(endpoint->worker_address, addr, alen);
  endpoint->worker_address_len = alen;
  ucp_worker_release_address(e->ucx->worker, addr);
  WT_LOGD("ucx", "%s: listening on %s:%u (transports %s)", e->where, host,
          (unsigned)port, e->transports ? e->transports : "default");
out:
  return st;
}

/* Discards the unexpected messages left from an aborted round (buckets the
 * trainer sent after this worker stopped receiving), so that they neither
 * pile up nor hold the trainer's old connection. */
static void drain_unexpected(wt_engine *e) {
  if (e->ucx == NULL) return;
  /* Bounded: a bucket whose sender is unreachable never completes. */
  const int64_t end = wt_ucx_now_ms() + UCX_DRAIN_MS;
  while (wt_ucx_now_ms() < end) {
    ucp_tag_recv_info_t info;
    while (ucp_worker_progress(e->ucx->worker) != 0) {
    }
    ucp_tag_message_h msg = ucp_tag_probe_nb(e->ucx->worker, 0, 0, 1, &info);
    if (msg == NULL) return;
    void *scratch = malloc(info.length ? info.length : 1);
    if (scratch == NULL) return;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                             .datatype = ucp_dt_make_contig(1)};
    void *req =
        ucp_tag_msg_recv_nbx(e->ucx->worker, scratch, info.length, msg, &p);
    if (req != NULL && !UCS_PTR_IS_ERR(req)) {
      while (ucp_request_check_status(req) == UCS_INPROGRESS &&
             wt_ucx_now_ms() < end)
        ucp_worker_progress(e->ucx->worker);
      bool busy = ucp_request_check_status(req) == UCS_INPROGRESS;
      wt_ucx_request_drop(e->ucx, req, 0);
      if (busy) {
        /* UCX may still write into it: keep it until the worker is gone. */
        void **o = realloc(e->orphans, (e->norphans + 1) * sizeof(*o));
        if (o != NULL) {
          e->orphans = o;
          e->orphans[e->norphans++] = scratch;
          scratch = NULL;
        } else {
          scratch = NULL; /* leaked rather than reused */
        }
      }
    }
    free(scratch);
    WT_LOGD("ucx", "%s: dropped a stale bucket (tag %#" PRIx64 ", %zu bytes)",
            e->where, (uint64_t)info.sender_tag, (size_t)info.length);
  }
}

static wt_status *ucx_start_update(wt_engine *e, uint64_t round_id) {
  (void)round_id;
  if (e->ucx) wt_ucx_reset_cancel(e->ucx);
  return NULL;
}

static wt_status *ucx_finish_update(wt_engine *e) {
  (void)e;
  return NULL;
}

static void ucx_abort_update(wt_engine *e) {
  if (e->ucx) wt_ucx_reset_cancel(e->ucx);
  drain_unexpected(e);
}

static void ucx_cancel(wt_engine *e) {
  if (e->ucx) wt_ucx_cancel(e->ucx);
}

static void ucx_destroy(wt_engine *e) {
  if (e == NULL) return;
  if (e->ucx) {
    drain_unexpected(e);
    for (size_t i = 0; i < e->nstrays; i++) {
      slot_release(&e->strays[i]);
    }
    e->nstrays = 0;
    wt_ucx_ep_close(e->ucx, e->fwd.ep, false, 200);
    for (size_t i = 0; i < e->npeers; i++)
      if (e->peers[i].used) wt_ucx_ep_close(e->ucx, e->peers[i].ep, false, 200);
    if (e->listener) ucp_listener_destroy(e->listener);
    for (size_t i = 0; i < e->nregions; i++)
      wt_ucx_mem_unmap(e->ucx, e->memh[i]);
    wt_ucx_destroy(e->ucx);
  }
  for (size_t i = 0; i < e->norphans; i++) free(e->orphans[i]);
  free(e->orphans);
  free(e->strays);
  free(e->stray_iov);
  free(e->route_in);
  free(e->route_out);
  free(e->hops);
  free(e->peers);
  free(e->transports);
  free(e);
}

/* Closes the broken trainer connections (outside UCX callbacks) and frees
 * their slots. */
static void reap_peers(wt_engine *e) {
  for (size_t i = 0; i < e->npeers; i++) {
    peer *p = &e->peers[i];
    if (!p->used || !p->failed) continue;
    wt_ucx_ep_close(e->ucx, p->ep, false, 200);
    memset(p, 0, sizeof(*p));
  }
}

/* The error of a broken trainer connection, for messages. */
static ucs_status_t last_error(const wt_engine *e) {
  for (size_t i = e->npeers; i-- > 0;)
    if (e->peers[i].used && e->peers[i].failed) return e->peers[i].why;
  return UCS_ERR_CONNECTION_RESET;
}

typedef struct wait_arg {
  wt_engine *e;
  void *req;
} wait_arg;

/* A wait also ends once every trainer connection has been broken for
 * UCX_PEER_GONE_MS: not at the first error, because after a failed round the
 * trainer replaces its endpoints and the new connection may come in after
 * the old one's error. A trainer connected by worker address leaves no
 * connection here; the deadline alone bounds that wait. */
static bool recv_done(void *arg) {
  wait_arg *w = arg;
  wt_engine *e = w->e;
  if (wt_ucx_request_status(w->req) != UCS_INPROGRESS) return true;
  bool any = false, all_failed = true;
  for (size_t i = 0; i < e->npeers; i++) {
    if (!e->peers[i].used) continue;
    any = true;
    all_failed = all_failed && e->peers[i].failed;
  }
  all_failed = any && all_failed;
  if (!all_failed) {
    e->gone_since_ms = 0;
    return false;
  }
  int64_t now = wt_ucx_now_ms();
  if (e->gone_since_ms == 0) e->gone_since_ms = now;
  return now - e->gone_since_ms >= UCX_PEER_GONE_MS;
}

/* Posts the receive of bucket `b` into its tensors' staging buffers. */
static wt_status *post_bucket(wt_engine *e, const wt_update *u,
                              const wt_pack_plan *plan, uint64_t round_id,
                              size_t b, ucp_dt_iov_t *iov_all, slot *s) {
  wt_status *st = NULL;
  const wt_bucket *bk = &plan->buckets[b];
  s->bucket = b;
  s->iovcnt = 0;
  s->req = NULL;
  s->iov = iov_all + bk->first;
  for (size_t k = bk->first; k < bk->first + bk->count; k++) {
    void *dst = wt_param_store_stage(e->ctx.store, u->index[k]);
    if (u->nbytes[k] == 0) continue;
    /* The store lays tensors out back to back: merge neighbours, so that a
     * bucket usually lands as one contiguous receive. */
    ucp_dt_iov_t *last = s->iovcnt ? &s->iov[s->iovcnt - 1] : NULL;
    if (last != NULL && (char *)last->buffer + last->length == (char *)dst) {
      last->length += u->nbytes[k];
      continue;
    }
    s->iov[s->iovcnt].buffer = dst;
    s->iov[s->iovcnt].length = u->nbytes[k];
    s->iovcnt++;
  }
  ucp_datatype_t dt = ucp_dt_make_iov();
  void *buf = s->iov;
  size_t count = s->iovcnt;
  ucp_mem_h memh = NULL;
  if (s->iovcnt == 1) { /* contiguous: lets UCX use its zero-copy paths */
    dt = ucp_dt_make_contig(1);
    buf = s->iov[0].buffer;
    count = s->iov[0].length;
    memh = memh_of(e, buf, count);
  }
  s->note = malloc(sizeof(*s->note));
  if (s->note == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", e->where);
  s->req = wt_ucx_tag_recv(e->ucx, buf, count, dt, memh, wt_ucx_tag(round_id, b),
                           s->note);
  if (UCS_PTR_IS_ERR(s->req)) {
    ucs_status_t us = UCS_PTR_STATUS(s->req);
    s->req = NULL;
    free(s->note);
    s->note = NULL;
    WT_FAIL(WT_INTERNAL, "%s: posting the receive of bucket %zu: %s", e->where,
            b, ucs_status_string(us));
  }
out:
  return st;
}

/* Checks a finished bucket and marks its tensors staged. */
static wt_status *land_bucket(wt_engine *e, const wt_update *u,
                              const wt_pack_plan *plan, slot *s,
                              wt_receive_stats *stats) {
  wt_status *st = NULL;
  const wt_bucket *bk = &plan->buckets[s->bucket];
  /* Completed (the caller waited for it), so its callback has run. */
  ucs_status_t us = s->note->done ? s->note->status : UCS_ERR_NO_MESSAGE;
  size_t length = s->note->length;
  slot_release(s);
  if (us == UCS_ERR_MESSAGE_TRUNCATED || (us == UCS_OK && length != bk->nbytes))
    WT_FAIL(WT_DATA_LOSS,
            "%s: bucket %zu: received %zu bytes, the plan says %" PRIu64,
            e->where, s->bucket, length, bk->nbytes);
  if (us != UCS_OK)
    WT_FAIL(WT_UNAVAILABLE,
            "%s: the trainer is gone (receiving bucket %zu failed: %s)",
            e->where, s->bucket, ucs_status_string(us));
  for (size_t k = bk->first; k < bk->first + bk->count; k++)
    wt_param_store_staged(e->ctx.store, u->index[k]);
  stats->tensors += bk->count;
  stats->bytes += bk->nbytes;
out:
  return st;
}

/* Receives the round's route (wt/ucx_common.h) into e->hops. */
static wt_status *recv_route(wt_engine *e, const wt_update *u, int64_t timeout,
                             uint32_t *flags, size_t *nhops) {
  wt_status *st = NULL;
  wt_ucx_recv_note note; /* the request is freed before this returns */
  void *req = wt_ucx_tag_recv(e->ucx, e->route_in, WT_UCX_ROUTE_MAX,
                              ucp_dt_make_contig(1), NULL,
                              wt_ucx_tag(u->round_id, WT_UCX_ROUTE_BUCKET),
                              &note);
  if (UCS_PTR_IS_ERR(req)) {
    ucs_status_t us = UCS_PTR_STATUS(req);
    req = NULL;
    WT_FAIL(WT_INTERNAL, "%s: posting the receive of the route: %s", e->where,
            ucs_status_string(us));
  }
  char what[128];
  snprintf(what, sizeof(what),
           "the route of round %" PRIu64 " from the trainer", u->round_id);
  wait_arg wa = {.e = e, .req = req};
  st = wt_ucx_wait(e->ucx, recv_done, &wa, wt_ucx_now_ms() + timeout, timeout,
                   what);
  if (st != NULL) {
    bool broke = e->gone_since_ms != 0;
    WT_CHECK(
        wt_status_prefix(st, "%s%s", e->where,
                         broke ? " (the trainer's connection broke)" : ""));
  }
  if (wt_ucx_request_status(req) == UCS_INPROGRESS)
    WT_FAIL(WT_UNAVAILABLE,
            "%s: the trainer is gone (its connection broke: %s) while "
            "waiting for %s",
            e->where, ucs_status_string(last_error(e)), what);
  ucs_status_t us = note.done ? note.status : UCS_ERR_NO_MESSAGE;
  if (us != UCS_OK)
    WT_FAIL(WT_UNAVAILABLE, "%s: receiving %s failed: %s", e->where, what,
            ucs_status_string(us));
  WT_CHECK(wt_ucx_route_parse(e->route_in, note.length, e->where, flags,
                              e->hops, nhops));
out:
  if (req != NULL) wt_ucx_request_drop(e->ucx, req, UCX_GRACE_MS);
  return st;
}

/* Connects to the route's first hop and sends it the rest of the route. */
static wt_status *fwd_start(wt_engine *e, uint32_t flags, size_t nhops,
                            void **route_req) {
  wt_status *st = NULL;
  const wt_ucx_hop *h = &e->hops[0];
  struct sockaddr_storage ss;
  socklen_t len = 0;
  char next[sizeof(e->next)];
  snprintf(next, sizeof(next), "the next worker in the chain (%s:%u)", h->host,
           (unsigned)h->port);
  /* The connection of the previous round, if it goes to the same worker
   * the same way and is whole. */
  bool same = e->fwd.ep != NULL && !e->fwd.failed && e->fwd_flags == flags &&
              strcmp(next, e->next) == 0;
  if (same) goto route;
  wt_ucx_ep_close(e->ucx, e->fwd.ep, !e->fwd.failed, UCX_GRACE_MS);
  memset(&e->fwd, 0, sizeof(e->fwd));
  snprintf(e->next, sizeof(e->next), "%s", next);
  e->fwd_flags = flags;
  ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
                        .err_mode = (flags & WT_UCX_ROUTE_PEER_ERRORS)
                                        ? UCP_ERR_HANDLING_MODE_PEER
                                        : UCP_ERR_HANDLING_MODE_NONE,
                        .err_handler = {.cb = peer_error, .arg = &e->fwd}};
  if ((flags & WT_UCX_ROUTE_BY_ADDRESS) && h->worker_address != NULL) {
    ep.field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = (const ucp_address_t *)h->worker_address;
  } else {
    WT_CHECK(wt_status_prefix(wt_ucx_sockaddr(h->host, h->port, &ss, &len),
                              "%s: %s", e->where, e->next));
    ep.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = (const struct sockaddr *)&ss;
    ep.sockaddr.addrlen = len;
  }
  ucs_status_t us = ucp_ep_create(e->ucx->worker, &ep, &e->fwd.ep);
  if (us != UCS_OK) {
    e->fwd.ep = NULL;
    WT_FAIL(WT_UNAVAILABLE, "%s: connecting to %s: %s", e->where, e->next,
            ucs_status_string(us));
  }
  e->fwd.used = true;
route:;
  size_t rlen = wt_ucx_route_pack(e->route_out, WT_UCX_ROUTE_MAX, flags,
                                  e->hops + 1, nhops - 1);
  if (rlen == 0)
    WT_FAIL(WT_INTERNAL, "%s: the route does not fit in a message", e->where);
  ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                           .datatype = ucp_dt_make_contig(1)};
  *route_req = ucp_tag_send_nbx(e->fwd.ep, e->route_out, rlen,
                                wt_ucx_tag(h->round, WT_UCX_ROUTE_BUCKET), &p);
  if (UCS_PTR_IS_ERR(*route_req)) {
    us = UCS_PTR_STATUS(*route_req);
    *route_req = NULL;
    WT_FAIL(WT_UNAVAILABLE, "%s: sending the route to %s: %s", e->where,
            e->next, ucs_status_string(us));
  }
out:
  return st;
}

/* Forwards landed bucket `s` to the next worker, from the staging buffers. */
static wt_status *fwd_bucket(wt_engine *e, const slot *s, void **req) {
  ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                           .datatype = ucp_dt_make_iov()};
  const void *buf = s->iov;
  size_t count = s->iovcnt;
  if (s->iovcnt == 1) {
    p.datatype = ucp_dt_make_contig(1);
    buf = s->iov[0].buffer;
    count = s->iov[0].length;
    p.memh = memh_of(e, buf, count);
    if (p.memh != NULL) p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
  }
  *req = ucp_tag_send_nbx(e->fwd.ep, buf, count,
                          wt_ucx_tag(e->hops[0].round, s->bucket), &p);
  if (UCS_PTR_IS_ERR(*req)) {
    ucs_status_t us = UCS_PTR_STATUS(*req);
    *req = NULL;
    return wt_status_new(WT_UNAVAILABLE, "%s: forwarding bucket %zu to %s: %s",
                         e->where, s->bucket, e->next, ucs_status_string(us));
  }
  return NULL;
}

typedef struct fwd_wait {
  wt_engine *e;
  void **reqs;
  size_t n;
} fwd_wait;

static bool fwd_done(void *arg) {
  fwd_wait *w = arg;
  if (w->e->fwd.failed) return true;
  for (size_t i = 0; i < w->n; i++)
    if (wt_ucx_request_status(w->reqs[i]) == UCS_INPROGRESS) return false;
  return true;
}

/* Waits for the forwarded sends (reqs[0..n)) and frees them. */
static wt_status *fwd_finish(wt_engine *e, void **reqs, size_t n,
                             int64_t timeout) {
  wt_status *st = NULL;
  fwd_wait w = {.e = e, .reqs = reqs, .n = n};
  char what[400];
  snprintf(what, sizeof(what), "%s to take the forwarded buckets", e->next);
  WT_CHECK(
      wt_status_prefix(wt_ucx_wait(e->ucx, fwd_done, &w,
                                   wt_ucx_now_ms() + timeout, timeout, what),
                       "%s", e->where));
  for (size_t i = 0; i < n; i++) {
    ucs_status_t us = wt_ucx_request_status(reqs[i]);
    if (us == UCS_INPROGRESS && e->fwd.failed) us = e->fwd.why;
    if (us != UCS_OK)
      WT_FAIL(WT_UNAVAILABLE, "%s: forwarding to %s failed: %s", e->where,
              e->next, ucs_status_string(us));
  }
out:
  return st;
}

typedef struct settle_arg {
  wt_engine *e;
  slot *slots; /* e->num_buffers of them */
} settle_arg;

static bool slots_settled(void *arg) {
  settle_arg *w = arg;
  for (size_t i = 0; i < w->e->num_buffers; i++)
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
 * first waits for it to end (check_strays): the bucket completes, or fails
 * once UCX sees the trainer's connection break. (Closing the connection
 * here instead would end it at once, but UCX 1.13's TCP transport can then
 * trip an assertion over a put in flight and abort the process.) Takes
 * *iov_all when it keeps strays. */
static void settle_receives(wt_engine *e, slot *slots, uint64_t round_id,
                            ucp_dt_iov_t **iov_all) {
  settle_arg w = {.e = e, .slots = slots};
  for (size_t i = 0; i < e->num_buffers; i++)
    if (wt_ucx_request_status(slots[i].req) == UCS_INPROGRESS)
      ucp_request_cancel(e->ucx->worker, slots[i].req);
  const int64_t end = wt_ucx_now_ms() + UCX_GRACE_MS;
  while (!slots_settled(&w) && wt_ucx_now_ms() < end)
    ucp_worker_progress(e->ucx->worker);
  for (size_t i = 0; i < e->num_buffers; i++) {
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
      slot_release(&slots[i]);
    }
    slots[i].req = NULL;
    slots[i].note = NULL;
  }
  if (e->nstrays > 0) {
    WT_LOGI("ucx",
            "%s: round %" PRIu64 " failed while the trainer was sending "
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
    if (e->peers[i].used && !e->peers[i].failed &&
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
static wt_status *check_strays(wt_engine *e, int64_t timeout) {
  if (e->nstrays == 0) return NULL;
  wt_status_free(wt_ucx_wait(e->ucx, strays_done, e,
                             wt_ucx_now_ms() + timeout, timeout,
                             "a failed round's bucket to end"));
  if (reconnected(e)) {
    size_t closed = 0;
    for (size_t i = 0; i < e->npeers; i++) {
      peer *p = &e->peers[i];
      if (!p->used || p->gen > e->stray_mark) continue;
      wt_ucx_ep_close(e->ucx, p->ep, false, 200);
      memset(p, 0, sizeof(*p));
      closed++;
    }
    size_t going = 0;
    for (size_t i = 0; i < e->nstrays; i++) {
      going += wt_ucx_request_status(e->strays[i].req) == UCS_INPROGRESS;
      /* No callback after this; no data either, its connection is gone. */
      slot_release(&e->strays[i]);
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
      slot_release(&e->strays[i]);
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

static wt_status *ucx_receive(wt_engine *e, const wt_update *u,
                              wt_receive_stats *stats) {
  wt_status *st = NULL;
  wt_pack_plan *plan = NULL;
  slot *slots = NULL;
  ucp_dt_iov_t *iov_all = NULL;
  void **fwd_reqs = NULL; /* per bucket, then the route's */
  size_t posted = 0, landed = 0, nhops = 0;
  uint32_t rflags = 0;
  const int64_t timeout = e->ctx.timeout_ms ? e->ctx.timeout_ms : 60000;
  const int64_t connect_timeout =
      wt_ucx_connect_timeout_ms(e->connect_timeout_ms, timeout);
  if (e->ucx == NULL)
    WT_FAIL(WT_FAILED_PRECONDITION, "%s: not initialised (init_transfer)",
            e->where);
  uint64_t buffer = e->buffer_bytes;
  if (u->packed_buffer_bytes) buffer = u->packed_buffer_bytes;
  if (u->info != NULL &&
      u->info->backend_update_case ==
          WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__BACKEND_UPDATE_UCX &&
      u->info->ucx != NULL && u->info->ucx->packed_buffer_size_bytes != NULL) {
    buffer = u->info->ucx->packed_buffer_size_bytes->value;
    if (buffer == 0)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "update_info.ucx.packed_buffer_size_bytes is 0; it must be at "
              "least 1");
  }
  WT_CHECK(check_strays(e, connect_timeout));
  WT_CHECK(wt_pack_plan_build(u->nbytes, u->n, buffer, &plan));
  reap_peers(e);
  e->gone_since_ms = 0;
  slots = calloc(e->num_buffers, sizeof(*slots));
  iov_all = calloc(u->n ? u->n : 1, sizeof(*iov_all));
  if (slots == NULL || iov_all == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", e->where);
  /* The route is the round's first message: its wait also covers the
   * trainer's (re)connection and its start, hence the connect deadline. */
  WT_CHECK(recv_route(e, u, connect_timeout, &rflags, &nhops));
  if (nhops > 0) {
    fwd_reqs = calloc(plan->nbuckets + 1, sizeof(*fwd_reqs));
    if (fwd_reqs == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", e->where);
    WT_CHECK(fwd_start(e, rflags, nhops, &fwd_reqs[plan->nbuckets]));
  }
  while (landed < plan->nbuckets) {
    while (posted < plan->nbuckets && posted - landed < e->num_buffers) {
      WT_CHECK(post_bucket(e, u, plan, u->round_id, posted, iov_all,
                           &slots[posted % e->num_buffers]));
      posted++;
    }
    slot *s = &slots[landed % e->num_buffers];
    char what[160];
    snprintf(what, sizeof(what),
             "bucket %zu of %zu (round %" PRIu64 ") from the trainer", landed,
             plan->nbuckets, u->round_id);
    wait_arg wa = {.e = e, .req = s->req};
    st = wt_ucx_wait(e->ucx, recv_done, &wa, wt_ucx_now_ms() + timeout, timeout,
                     what);
    if (st != NULL) {
      bool broke = e->gone_since_ms != 0;
      WT_CHECK(
          wt_status_prefix(st, "%s%s", e->where,
                           broke ? " (the trainer's connection broke)" : ""));
    }
    if (wt_ucx_request_status(s->req) == UCS_INPROGRESS)
      WT_FAIL(WT_UNAVAILABLE,
              "%s: the trainer is gone (its connection broke: %s) while "
              "waiting for %s",
              e->where, ucs_status_string(last_error(e)), what);
    WT_CHECK(land_bucket(e, u, plan, s, stats));
    if (fwd_reqs != NULL) WT_CHECK(fwd_bucket(e, s, &fwd_reqs[s->bucket]));
    landed++;
  }
  if (fwd_reqs != NULL)
    WT_CHECK(fwd_finish(e, fwd_reqs, plan->nbuckets + 1, timeout));
out:
  if (slots) settle_receives(e, slots, u->round_id, &iov_all);
  if (fwd_reqs != NULL) {
    /* A failed round: forcing the close ends sends still in flight. */
    if (st != NULL) {
      wt_ucx_ep_close(e->ucx, e->fwd.ep, false, UCX_GRACE_MS);
      memset(&e->fwd, 0, sizeof(e->fwd));
    }
    for (size_t i = 0; i <= plan->nbuckets; i++)
      wt_ucx_request_drop(e->ucx, fwd_reqs[i], UCX_GRACE_MS);
    free(fwd_reqs);
  }
  free(iov_all);
  free(slots);
  wt_pack_plan_free(plan);
  return st;
}

const wt_engine_ops wt_ucx_engine_ops = {
    .header = {WT_ENGINE_ABI_VERSION, "ucx"},
    /* Host memory: this build's UCX transports read and write it directly
     * (no CUDA transports are configured). */
    .memory_kinds = WT_MEM_HOST_KINDS,
    .caps = WT_ENGINE_CROSS_HOST | WT_ENGINE_SURVIVES_ABORT,
    .create = ucx_create,
    .init_transfer = ucx_init_transfer,
    .start_update = ucx_start_update,
    .receive = ucx_receive,
    .finish_update = ucx_finish_update,
    .abort_update = ucx_abort_update,
    .cancel = ucx_cancel,
    .destroy = ucx_destroy,
};
