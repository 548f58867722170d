/* ucx_worker_chain.c: chain fan-out in the `ucx` worker engine (see
 * ucx_shared.h): every round starts with the route message; a worker
 * the route names a successor for connects to it, passes the rest of the
 * route on, and forwards each bucket from its staging buffers once it has
 * landed. */

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/ucx/ucx_worker.h"
#include "wt/delta.h"
#include "wt/log.h"

/* Receives the round's route (ucx_shared.h) into e->hops. */
wt_status *wt_ucxe_recv_route(wt_engine *e, const wt_update *u, int64_t timeout,
                              uint32_t *flags, size_t *nhops) {
  wt_status *st = NULL;
  wt_ucx_recv_note note; /* the request is freed before this returns */
  void *req = wt_ucx_tag_recv(
      e->ucx, e->route_in, WT_UCX_ROUTE_MAX, ucp_dt_make_contig(1), NULL,
      wt_ucx_tag(e->secret, e->round_id, WT_UCX_ROUTE_BUCKET), &note);
  if (UCS_PTR_IS_ERR(req)) {
    ucs_status_t us = UCS_PTR_STATUS(req);
    req = NULL;
    WT_FAIL(WT_INTERNAL, "%s: posting the receive of the route: %s", e->where,
            ucs_status_string(us));
  }
  char what[128];
  snprintf(what, sizeof(what), "the route of the round from the trainer");
  WT_CHECK(wt_ucxe_wait_recv(e, req, timeout, what));
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

wt_status *wt_ucxe_recv_routes_ranked(wt_engine *e, const wt_update *u,
                                      int64_t timeout) {
  wt_status *st = NULL;
  uint32_t n = u->nranks;
  void **reqs = calloc(n, sizeof(*reqs));
  wt_ucx_recv_note *notes = calloc(n, sizeof(*notes));
  unsigned char *bufs = malloc((size_t)n * WT_UCX_ROUTE_MAX);
  if (reqs == NULL || notes == NULL || bufs == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", e->where);
  for (uint32_t r = 0; r < n; r++) {
    reqs[r] = wt_ucx_tag_recv(
        e->ucx, bufs + (size_t)r * WT_UCX_ROUTE_MAX, WT_UCX_ROUTE_MAX,
        ucp_dt_make_contig(1), NULL,
        wt_ucx_tag(e->secret, e->round_id,
                   wt_ucx_rank_bucket(true, r, WT_UCX_ROUTE_BUCKET)),
        &notes[r]);
    if (UCS_PTR_IS_ERR(reqs[r])) {
      ucs_status_t us = UCS_PTR_STATUS(reqs[r]);
      reqs[r] = NULL;
      WT_FAIL(WT_INTERNAL, "%s: posting the receive of rank %u's route: %s",
              e->where, r, ucs_status_string(us));
    }
  }
  for (uint32_t r = 0; r < n; r++) {
    char what[128];
    snprintf(what, sizeof(what), "the route of the round from trainer rank %u",
             r);
    WT_CHECK(wt_ucxe_wait_recv(e, reqs[r], timeout, what));
    ucs_status_t us = notes[r].done ? notes[r].status : UCS_ERR_NO_MESSAGE;
    if (us != UCS_OK)
      WT_FAIL(WT_UNAVAILABLE, "%s: receiving %s failed: %s", e->where, what,
              ucs_status_string(us));
    uint32_t flags = 0;
    size_t nhops = 0;
    WT_CHECK(wt_ucx_route_parse(bufs + (size_t)r * WT_UCX_ROUTE_MAX,
                                notes[r].length, e->where, &flags, e->hops,
                                &nhops));
    if (nhops != 0)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: trainer rank %u's route names %zu hop(s); a shard plan's "
              "round fans out in parallel (ucx_fanout 'parallel')",
              e->where, r, nhops);
  }
out:
  for (uint32_t r = 0; reqs != NULL && r < n; r++)
    if (reqs[r] != NULL) wt_ucx_request_drop(e->ucx, reqs[r], UCX_GRACE_MS);
  free(reqs);
  free(notes);
  free(bufs);
  return st;
}

/* Connects to the route's first hop and sends it the rest of the route. */
wt_status *wt_ucxe_fwd_start(wt_engine *e, uint32_t flags, size_t nhops,
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
  /* By worker address every worker's port is 0: the address itself says
   * which worker it is (routes change between rounds, e.g. a delta round's
   * chain leaves out the servers that get a full one). */
  uint64_t addr_id =
      h->worker_address != NULL
          ? wt_delta_digest(h->worker_address, h->worker_address_len)
          : 0;
  bool same = e->fwd.ep != NULL && !e->fwd.failed && e->fwd_flags == flags &&
              strcmp(next, e->next) == 0 && e->fwd_addr_id == addr_id;
  if (same) goto route;
  /* The old next worker took every bucket of the last round (its receive
   * ended only then), so there is nothing to flush: a flushing close
   * would wait for that worker to progress, which it may not do before
   * its own next round. */
  wt_ucx_ep_close(e->ucx, e->fwd.ep, false, UCX_GRACE_MS);
  memset(&e->fwd, 0, sizeof(e->fwd));
  snprintf(e->next, sizeof(e->next), "%s", next);
  e->fwd_flags = flags;
  e->fwd_addr_id = addr_id;
  ucp_ep_params_t ep = {
      .field_mask =
          UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER,
      .err_mode = (flags & WT_UCX_ROUTE_PEER_ERRORS)
                      ? UCP_ERR_HANDLING_MODE_PEER
                      : UCP_ERR_HANDLING_MODE_NONE,
      .err_handler = {.cb = wt_ucxe_peer_error, .arg = &e->fwd}};
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
  e->fwd.authed = true;
  if (!(flags & WT_UCX_ROUTE_BY_ADDRESS) || h->worker_address == NULL) {
    /* Through the next worker's listener: prove this init first. */
    ucp_request_param_t hp = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                              .datatype = ucp_dt_make_contig(1)};
    void *hr = ucp_stream_send_nbx(e->fwd.ep, e->hello, sizeof(e->hello), &hp);
    if (UCS_PTR_IS_ERR(hr))
      WT_FAIL(WT_UNAVAILABLE, "%s: sending the hello to %s: %s", e->where,
              e->next, ucs_status_string(UCS_PTR_STATUS(hr)));
    if (hr != NULL) ucp_request_free(hr); /* completes on its own */
  }
route:;
  size_t rlen = wt_ucx_route_pack(e->route_out, WT_UCX_ROUTE_MAX, flags,
                                  e->hops + 1, nhops - 1);
  if (rlen == 0)
    WT_FAIL(WT_INTERNAL, "%s: the route does not fit in a message", e->where);
  ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                           .datatype = ucp_dt_make_contig(1)};
  *route_req = ucp_tag_send_nbx(
      e->fwd.ep, e->route_out, rlen,
      wt_ucx_tag(e->secret, h->round, WT_UCX_ROUTE_BUCKET), &p);
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
wt_status *wt_ucxe_fwd_bucket(wt_engine *e, const slot *s, void **req) {
  ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                           .datatype = ucp_dt_make_iov()};
  const void *buf = s->iov;
  size_t count = s->iovcnt;
  if (s->dmsg != NULL) { /* a delta bucket: as it came */
    p.datatype = ucp_dt_make_contig(1);
    buf = s->dmsg;
    count = s->dlen;
  } else if (s->iovcnt == 1) {
    p.datatype = ucp_dt_make_contig(1);
    buf = s->iov[0].buffer;
    count = s->iov[0].length;
    p.memh = wt_ucxe_memh_of(e, buf, count);
    if (p.memh != NULL) p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
  }
  *req =
      ucp_tag_send_nbx(e->fwd.ep, buf, count,
                       wt_ucx_tag(e->secret, e->hops[0].round, s->bucket), &p);
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
wt_status *wt_ucxe_fwd_finish(wt_engine *e, void **reqs, size_t n,
                              int64_t timeout) {
  wt_status *st = NULL;
  fwd_wait w = {.e = e, .reqs = reqs, .n = n};
  char what[400];
  snprintf(what, sizeof(what), "%s to take the forwarded buckets", e->next);
  WT_CHECK(wt_status_prefix(
      wt_ucx_wait(e->ucx, fwd_done, &w, wt_mono_ms() + timeout, timeout, what),
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
