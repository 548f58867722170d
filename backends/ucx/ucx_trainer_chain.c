/* ucx_trainer_chain.c: the ucx trainer's fan-out: which route a round
 * takes (auto, parallel, sequential, chain) and the route messages that
 * tell each worker its successor in a chain (ucx_shared.h). */

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/ucx/ucx_trainer.h"
#include "wt/cuda.h"
#include "wt/log.h"
#include "wt/packing.h"

uint64_t wt_ucxt_round_of(ucx_trainer *t, const peer *p) {
  return p->server < t->ctx->nservers ? t->ctx->round_ids[p->server] : 0;
}

/* Sends the round's route message to every worker the trainer sends to:
 * the rest of the chain to the first worker (chain fan-out), an empty
 * route to every worker otherwise. */
wt_status *wt_ucxt_send_routes(ucx_trainer *t, size_t j0, size_t j1) {
  wt_status *st = NULL;
  wt_ucx_hop *hops = NULL;
  bool chain = t->fanout == FANOUT_CHAIN;
  if (j1 <= j0) return NULL;
  size_t ntargets = chain ? 1 : j1 - j0;
  size_t nhops = chain ? j1 - j0 - 1 : 0;
  uint32_t flags = (t->by_sockaddr ? 0 : WT_UCX_ROUTE_BY_ADDRESS) |
                   (t->peer_errors ? WT_UCX_ROUTE_PEER_ERRORS : 0);
  if (nhops > 0) {
    hops = calloc(nhops, sizeof(*hops));
    if (hops == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; i < nhops; i++) {
    const peer *p = t->peers[j0 + i + 1];
    hops[i].round = wt_ucxt_round_of(t, p);
    snprintf(hops[i].host, sizeof(hops[i].host), "%s", p->host);
    hops[i].port = p->port;
    hops[i].worker_address = p->worker_address;
    hops[i].worker_address_len = p->worker_address_len;
  }
  /* Each group's route in its own buffer: the first group's may still be
   * in flight while the second's is sent. */
  unsigned char *route = j0 == 0 ? t->route : t->route + WT_UCX_ROUTE_MAX;
  size_t len = wt_ucx_route_pack(route, WT_UCX_ROUTE_MAX, flags, hops, nhops);
  if (len == 0)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "backend 'ucx': a chain of %zu workers does not fit in one route "
            "message (at most %d hops)",
            j1 - j0, WT_UCX_ROUTE_HOPS);
  for (size_t j = j0; j < j0 + ntargets; j++) {
    peer *p = t->peers[j];
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                              .datatype = ucp_dt_make_contig(1)};
    void *req = ucp_tag_send_nbx(
        p->ep, route, len,
        wt_ucx_tag(t->secret, wt_ucxt_round_of(t, p),
                   wt_ucx_rank_bucket(t->ranked, t->rank, WT_UCX_ROUTE_BUCKET)),
        &rp);
    if (UCS_PTR_IS_ERR(req))
      WT_FAIL(WT_UNAVAILABLE, "%s: sending the round's route: %s", p->name,
              ucs_status_string(UCS_PTR_STATUS(req)));
    t->route_reqs[j] = req;
    WT_LOGD("ucx", "trainer: the route (%zu hop(s)) to %s", nhops, p->name);
  }
out:
  free(hops);
  return st;
}

static bool routes_done(void *arg) {
  ucx_trainer *t = arg;
  for (size_t j = 0; j < t->npeers; j++) {
    if (t->route_reqs[j] == NULL) continue;
    if (t->peers[j]->failed) return true;
    if (wt_ucx_request_status(t->route_reqs[j]) == UCS_INPROGRESS) return false;
  }
  return true;
}

/* Waits for the route messages (long delivered when the buckets are). */
wt_status *wt_ucxt_drain_routes(ucx_trainer *t) {
  wt_status *st = NULL;
  WT_CHECK(wt_ucx_wait(t->ucx, routes_done, t, wt_mono_ms() + t->timeout_ms,
                       t->timeout_ms, "the round's route to be delivered"));
  for (size_t j = 0; j < t->npeers; j++) {
    ucs_status_t us = wt_ucx_request_status(t->route_reqs[j]);
    if (us == UCS_INPROGRESS && t->peers[j]->failed) us = t->peers[j]->why;
    if (us != UCS_OK)
      WT_FAIL(WT_UNAVAILABLE, "%s: sending the round's route failed: %s",
              t->peers[j]->name, ucs_status_string(us));
    if (t->route_reqs[j] != NULL) ucp_request_free(t->route_reqs[j]);
    t->route_reqs[j] = NULL;
  }
out:
  return st;
}

/* The round's fan-out. auto: the chain once the workers are on more than
 * one host (each host's link then carries one copy instead of N:
 * bench/fanout_bench.sh on rate-limited links, docs/benchmarks.md), parallel
 * while they share one (the trainer's host, or any one: the copies then share a
 * CPU and memory bus, where parallel was ahead in bench/ucx_bench.sh). */
int wt_ucxt_round_fanout(const ucx_trainer *t) {
  if (t->ranked) return FANOUT_PARALLEL; /* the ranks send at once */
  if (t->fanout_option != FANOUT_AUTO) return t->fanout_option;
  for (size_t j = 1; j < t->npeers; j++)
    if (strcmp(t->peers[j]->host, t->peers[0]->host) != 0) return FANOUT_CHAIN;
  return FANOUT_PARALLEL;
}
