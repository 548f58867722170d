/* ucx_worker.c: the `ucx` worker engine (built with WT_WITH_UCX).
 *
 * Who listens: the worker. init_transfer opens a ucp_listener on an
 * ephemeral port of the server's host (wt_worker_ctx.host) and reports
 * host:port in the init response, together with its packed ucp worker
 * address; the trainer then connects to every worker of every server (see
 * ucx_shared.h for why and how it picks one of the two). Connection
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
 * (its registration cache). Every bucket's receive is posted before the
 * round's first wait (the trainer's packed_num_buffers bounds how many are
 * in flight), so receiving bucket b+1 overlaps the trainer packing bucket
 * b+2, and whatever else arrives is discarded at once.
 *
 * Device stores (wt-server --device cuda:N): the regions are GPU memory,
 * registered with their memory type, and UCX receives into them with its
 * CUDA transports (cuda_copy, cuda_ipc from a trainer on the same host,
 * GPUDirect RDMA where the NIC has it): no host bounce. A UCX whose context
 * cannot move CUDA memory (Debian 12's 1.13, or no CUDA driver) fails the
 * init saying so (wt_ucx_need_cuda). Into device memory every bucket must
 * be one contiguous run of the store.
 *
 * Trust: every tag is keyed with the init's secret (wt_ucx_tag), so only
 * the trainer of this init can send a bucket or a route this worker takes;
 * a connection to the listener must send the init's hello within
 * UCX_HELLO_MS or is closed, and at most UCX_MAX_PENDING may owe one, so
 * strangers never fill the connection slots.
 *
 * Route and chain: every round starts with the route message
 * (ucx_shared.h). When it names a next worker (chain fan-out), this
 * worker connects to it (kept across rounds while the route stays), sends
 * it the rest of the route, forwards each bucket from the staging buffers
 * as soon as it has landed, and ends its receive only when the next worker
 * has taken every bucket; a failure there fails this worker's round, naming
 * the next worker.
 *
 * Transports: the init info's ucx.transports, else the server's default
 * (wt-server --engine-option ucx.transports=LIST), else UCX_TLS,
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
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backends.h"
#include "backends/ucx/ucx_worker.h"
#include "wt/delta.h"
#include "wt/log.h"
#include "wt/lock.h"

static void ucx_destroy(wt_engine *e);

static wt_status *ucx_create(const Wt__V1__WeightTransferInitInfo *init,
                             const wt_worker_ctx *ctx, wt_engine **out) {
  wt_status *st = NULL;
  wt_engine *e = calloc(1, sizeof(*e));
  if (e == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "ucx engine: out of memory");
  e->ctx = *ctx;
  e->cap = UCX_MAX_PEERS; /* open connections, strangers' included */
  snprintf(e->where, sizeof(e->where), "ucx worker %u", ctx->rank);
  const Wt__V1__UcxInitInfo *x =
      init->backend_init_case ==
              WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_UCX
          ? init->ucx
          : NULL;
  WT_CHECK(wt_ucx_init_secret(init, e->secret));
  wt_ucx_init_settings set;
  WT_CHECK(wt_ucx_init_settings_read(init, &set));
  e->listen = set.by_sockaddr;
  e->buffer_bytes = set.buffer_bytes;
  e->num_buffers = set.num_buffers;
  e->connect_timeout_ms = set.connect_timeout_ms;
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  static atomic_bool told_old_ucx;
  if (major == 1 && minor < 14 && !atomic_exchange(&told_old_ucx, true))
    WT_LOGW("ucx",
            "UCX %u.%u.%u: a trainer that dies while its connection is being "
            "set up can abort this server (ucp_request.c: \"got REP "
            "message\", an assertion UCX removed in openucx/ucx#8175, not in "
            "1.13); run a UCX of 1.14 or later (PyPI's libucx-cu13: "
            "docs/ucx.md)",
            major, minor, release);
  if (e->listen && major == 1 && minor < 14)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "init_info.options[\"ucx_connect\"] is 'sockaddr', which this "
            "server refuses with UCX %u.%u.%u: that UCX's sockaddr listener "
            "aborts the whole process when anyone sends it 17 bytes "
            "(tcp_sockcm_ep.c:825); connect by worker address (the default), "
            "or run a UCX of 1.14 or later",
            major, minor, release);
  wt_ucx_hello(e->secret, e->hello);
  if (x != NULL) {
    if (x->trainer_address != NULL && *x->trainer_address != '\0')
      WT_FAIL(WT_INVALID_ARGUMENT,
              "init_info.ucx.trainer_address is set; in this version the "
              "workers listen and the trainer connects (leave it empty)");
    const char *d = x->delta ? x->delta : "";
    if (*d != '\0' && strcmp(d, "off") != 0 && strcmp(d, "on") != 0 &&
        strcmp(d, "auto") != 0)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "init_info.ucx.delta: '%.40s' is not on, off or auto", d);
    if (x->transports != NULL && *x->transports != '\0') {
      e->transports = strdup(x->transports);
      if (e->transports == NULL)
        WT_FAIL(WT_RESOURCE_EXHAUSTED, "ucx engine: out of memory");
    }
  }
  /* The server's default (wt-server --engine-option ucx.transports=LIST)
   * when the init info names none; UCX_TLS applies below both. */
  const char *server_tls = NULL;
  e->max_peers = WT_UCX_DEFAULT_MAX_PEER_CONNECTIONS;
  for (size_t i = 0; i < ctx->n_options; i++) {
    if (strcmp(ctx->options[i].key, "transports") == 0)
      server_tls = ctx->options[i].value;
    if (strcmp(ctx->options[i].key, "max_peer_connections") == 0)
      e->max_peers = (uint32_t)strtoul(ctx->options[i].value, NULL, 10);
  }
  e->ctx.options = NULL; /* borrowed for create only */
  e->ctx.n_options = 0;
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
  ucx_destroy(e); /* what a failed create made so far */
  return st;
}

/* Held while a worker's UCX opens its listening sockets, so that the
 * sockets that appear are that worker's (ucx_worker_socks.c). */
static wt_mutex g_listen_mu =
    WT_MUTEX_INITIALIZER(WT_LOCK_UCX_LISTEN, "ucx_worker.listen_mu");

static wt_status *ucx_init_transfer(wt_engine *e,
                                    wt_engine_endpoint *endpoint) {
  wt_status *st = NULL;
  uint16_t before[64];
  size_t nbefore = 0;
  wt_mutex_lock(&g_listen_mu);
  nbefore = wt_ucxe_listening_ports(before, 64);
  struct sockaddr_storage ss;
  socklen_t len = 0;
  ucs_status_t us;
  const char *host = e->ctx.host && *e->ctx.host ? e->ctx.host : "127.0.0.1";
  /* UCX listens (its sockaddr listener and its TCP transport) only on the
   * interface of the server's --listen address, unless that is a wildcard
   * or UCX_NET_DEVICES says otherwise. */
  char ifname[64] = "";
  st = wt_ucx_interface_of(host, ifname, sizeof(ifname));
  if (st != NULL) {
    st = wt_status_prefix(st, "%s", e->where);
    goto out;
  }
  st = wt_ucx_new(e->transports, ifname[0] ? ifname : NULL, e->listen, e->where,
                  &e->ucx);
  if (st != NULL && e->transports_from_server)
    st = wt_status_prefix(st,
                          "transports '%s' from the server's "
                          "--engine-option ucx.transports",
                          e->transports);
  if (st != NULL) goto out;
  /* A device store: straight into GPU memory where UCX moves it (its
   * cuda_copy and cuda_ipc transports; GPUDirect RDMA where a NIC has it),
   * refused here otherwise. */
  e->cuda = e->ctx.device.type == WT_DEVICE_CUDA;
  if (e->cuda) WT_CHECK(wt_ucx_need_cuda(e->ucx, e->where));
  /* Once per engine: the regions do not move while the store lives. */
  e->nregions = wt_param_store_regions(e->ctx.store, e->regions);
  for (size_t i = 0; i < e->nregions; i++) {
    char what[128];
    snprintf(what, sizeof(what), "%s: staging region %zu", e->where, i);
    WT_CHECK(wt_ucx_mem_map(e->ucx, e->regions[i].base, e->regions[i].len,
                            e->cuda, what, &e->memh[i]));
  }
  WT_LOGD("ucx", "%s: registered %zu staging region(s) with ucp_mem_map",
          e->where, e->nregions);
  if (!e->listen) goto address;
  WT_CHECK(wt_ucx_sockaddr(host, 0, &ss, &len));
  ucp_listener_params_t lp = {
      .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                    UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
      .sockaddr = {.addr = (const struct sockaddr *)&ss, .addrlen = len},
      .conn_handler = {.cb = wt_ucxe_on_conn, .arg = e}};
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
address:
  if (!e->listen)
    snprintf(endpoint->address, sizeof(endpoint->address), "%s", host);
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
  WT_LOGD("ucx", "%s: %s %s:%u (transports %s)", e->where,
          e->listen ? "listening on"
                    : "reachable by worker address; no "
                      "listener, interface of",
          host, (unsigned)endpoint->port,
          e->transports ? e->transports : "default");
out : {
  /* This worker's listeners: what appeared since `before`. */
  uint16_t after[64];
  size_t nafter = wt_ucxe_listening_ports(after, 64);
  e->nown = 0;
  for (size_t i = 0; i < nafter && e->nown < 16; i++) {
    bool old = false;
    for (size_t j = 0; j < nbefore && !old; j++) old = before[j] == after[i];
    if (!old) e->own_ports[e->nown++] = after[i];
  }
}
  wt_mutex_unlock(&g_listen_mu);
  return st;
}

/* Strangers who know the worker's address make UCX accept a connection per
 * endpoint, unbounded (row 6 of docs/trust.md): past max_peers, the
 * engine is given up at the next round's start, which closes them all, and
 * the trainer's client inits again (a new worker, a new address). */
static bool ucx_needs_reinit(wt_engine *e, char *why, size_t n) {
  if (e->ucx == NULL || e->max_peers == 0) return false;
  size_t peers = wt_ucxe_count_peers(e->own_ports, e->nown);
  if (peers <= e->max_peers) return false;
  if (peers == SIZE_MAX) {
    snprintf(why, n,
             "the process ran out of descriptors while %s's UCX ports are "
             "open: strangers who know its address may hold them; a new "
             "init closes them and gives a new address",
             e->where);
    return true;
  }
  snprintf(why, n,
           "%zu connections to the UCX ports of %s, more than the %u a trainer "
           "needs (ucx.max_peer_connections): strangers who know its "
           "address; a new init closes them and gives a new address",
           peers, e->where, e->max_peers);
  return true;
}

static wt_status *ucx_start_update(wt_engine *e, uint64_t round_id) {
  e->round_id = round_id;
  if (e->ucx) wt_ucx_reset_cancel(e->ucx);
  return NULL;
}

static wt_status *ucx_finish_update(wt_engine *e) {
  (void)e;
  return NULL;
}

static void ucx_abort_update(wt_engine *e) {
  if (e->ucx) wt_ucx_reset_cancel(e->ucx);
  wt_ucxe_drain_unexpected(e);
}

static void ucx_cancel(wt_engine *e) {
  if (e->ucx) wt_ucx_cancel(e->ucx);
}

static void ucx_destroy(wt_engine *e) {
  if (e == NULL) return;
  size_t going = 0;
  for (size_t i = 0; e->ucx && i < e->nstrays; i++)
    going += wt_ucx_request_status(e->strays[i].req) == UCS_INPROGRESS;
  if (going > 0) {
    /* A failed round's bucket is still matched (its link was cut): tearing
     * the UCX worker down under it aborts UCX 1.13 (an assertion over the
     * put in flight). The old worker is left as it is, never progressed
     * again, so nothing more is written through it; its memory is the
     * price, once per such init. */
    WT_LOGW("ucx",
            "%s: %zu receive(s) of failed round %" PRIu64
            " still in flight; leaving the old UCX worker behind unprogressed "
            "rather than destroying it under them",
            e->where, going, e->stray_round);
    free(e->route_in);
    free(e->route_out);
    free(e->hops);
    free(e->transports);
    return; /* the rest is UCX's until exit */
  }
  if (e->ucx) {
    wt_ucxe_drain_unexpected(e);
    for (size_t i = 0; i < e->nstrays; i++) {
      wt_ucxe_slot_release(&e->strays[i]);
    }
    e->nstrays = 0;
    wt_ucx_ep_close(e->ucx, e->fwd.ep, false, 200);
    for (size_t i = 0; i < e->npeers; i++) {
      peer *p = &e->peers[i];
      if (!p->used) continue;
      if (p->hello_req != NULL) {
        ucp_request_cancel(e->ucx->worker, p->hello_req);
        ucp_request_free(p->hello_req);
      }
      if (!p->closing) wt_ucx_ep_close(e->ucx, p->ep, false, 200);
      if (p->close_req != NULL) {
        int64_t end = wt_mono_ms() + 200;
        while (ucp_request_check_status(p->close_req) == UCS_INPROGRESS &&
               wt_mono_ms() < end)
          ucp_worker_progress(e->ucx->worker);
        ucp_request_free(p->close_req);
      }
    }
    if (e->listener) ucp_listener_destroy(e->listener);
    for (size_t i = 0; i < e->nregions; i++)
      wt_ucx_mem_unmap(e->ucx, e->memh[i]);
    wt_ucx_destroy(e->ucx);
  }
  for (size_t i = 0; i < e->norphans; i++) free(e->orphans[i]);
  free(e->orphans);
  wt_ucxe_delta_free(e);
  free(e->strays);
  free(e->stray_iov);
  free(e->route_in);
  free(e->route_out);
  free(e->hops);
  free(e->peers);
  free(e->transports);
  free(e);
}

/* Posts the receive of bucket `b`: into its tensors' staging buffers, or
 * (a delta round) into dmsg[0..dcap) of the engine's receive buffer. */
/* Appends [p, p + len) to the slot's iov, merged with its last entry when
 * they are neighbours (the store lays tensors out back to back, so a
 * bucket usually lands as one contiguous receive). */
static void append_iov(slot *s, char *p, size_t len) {
  ucp_dt_iov_t *last = s->iovcnt ? &s->iov[s->iovcnt - 1] : NULL;
  if (last != NULL && (char *)last->buffer + last->length == p) {
    last->length += len;
    return;
  }
  s->iov[s->iovcnt].buffer = p;
  s->iov[s->iovcnt].length = len;
  s->iovcnt++;
}

/* A box's runs into a slot's iov (s NULL: only counted, into *count). */
typedef struct run_to_iov {
  slot *s;
  char *base; /* the tensor's staging buffer */
  size_t count;
} run_to_iov;

static wt_status *run_iov(uint64_t dst, uint64_t src, uint64_t n, void *user) {
  run_to_iov *r = user;
  (void)src;
  r->count++;
  if (r->s != NULL) append_iov(r->s, r->base + dst, (size_t)n);
  return NULL;
}

/* The iov entries bucket b of `plan` can need: one per tensor (part), or,
 * for boxes, one per run. */
static size_t bucket_iov_count(const wt_update *u, const wt_pack_plan *plan,
                               size_t b) {
  const wt_bucket *bk = &plan->buckets[b];
  if (u->boxes == NULL) return bk->count;
  size_t n = 0;
  for (size_t k = bk->first; k < bk->first + bk->count; k++) {
    uint64_t off = 0, len = 0;
    wt_pack_part(plan, b, k, u->nbytes[k], &off, &len);
    run_to_iov r = {NULL, NULL, 0};
    if (len) wt_status_free(wt_box_runs(&u->boxes[k], off, len, run_iov, &r));
    n += r.count;
  }
  return n;
}

static wt_status *post_bucket(wt_engine *e, const wt_update *u,
                              const wt_pack_plan *plan, uint64_t round_id,
                              uint64_t tag_bucket, size_t b, ucp_dt_iov_t *iov,
                              unsigned char *dmsg, size_t dcap, slot *s) {
  wt_status *st = NULL;
  const wt_bucket *bk = &plan->buckets[b];
  s->bucket = b;
  s->iovcnt = 0;
  s->req = NULL;
  s->dmsg = NULL;
  s->dlen = 0;
  s->iov = iov;
  for (size_t k = bk->first; k < bk->first + bk->count; k++) {
    uint64_t off = 0, len = 0;
    wt_pack_part(plan, b, k, u->nbytes[k], &off, &len);
    if (len == 0) continue;
    char *base = wt_param_store_stage(e->ctx.store, u->index[k]);
    if (u->boxes != NULL) { /* a box: its runs, where it lies */
      run_to_iov r = {s, base, 0};
      WT_CHECK(wt_box_runs(&u->boxes[k], off, len, run_iov, &r));
      continue;
    }
    append_iov(s, base + off, (size_t)len);
  }
  /* UCX moves device memory as contiguous runs only. */
  if (e->cuda && s->iovcnt > 1)
    WT_FAIL(WT_UNIMPLEMENTED,
            "%s: bucket %zu lands in %zu separate runs of this worker's GPU "
            "memory (its tensors are not neighbours in the store, or a box "
            "is not a block of whole rows); ucx receives into device memory "
            "contiguously only: send the tensors in the store's order "
            "(ListParameters)",
            e->where, b, s->iovcnt);
  ucp_datatype_t dt = ucp_dt_make_iov();
  void *buf = s->iov;
  size_t count = s->iovcnt;
  ucp_mem_h memh = NULL;
  if (u->delta) { /* into the bounce buffer, decoded once landed */
    dt = ucp_dt_make_contig(1);
    s->dmsg = dmsg;
    buf = dmsg;
    count = dcap;
  } else if (s->iovcnt ==
             1) { /* contiguous: lets UCX use its zero-copy paths */
    dt = ucp_dt_make_contig(1);
    buf = s->iov[0].buffer;
    count = s->iov[0].length;
    memh = wt_ucxe_memh_of(e, buf, count);
  }
  s->note = malloc(sizeof(*s->note));
  if (s->note == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", e->where);
  s->req =
      wt_ucx_tag_recv(e->ucx, buf, count, dt, memh,
                      wt_ucx_tag(e->secret, round_id, tag_bucket), s->note);
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
  wt_ucxe_slot_release(s);
  if (s->dmsg != NULL && us == UCS_ERR_MESSAGE_TRUNCATED)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: delta bucket %zu: the message is larger than a delta of "
            "%" PRIu64 " bytes can be (%" PRIu64 ")",
            e->where, s->bucket, bk->nbytes, wt_ucx_delta_bound(bk->nbytes));
  if (us == UCS_ERR_MESSAGE_TRUNCATED ||
      (us == UCS_OK && s->dmsg == NULL && length != bk->nbytes))
    WT_FAIL(WT_DATA_LOSS,
            "%s: bucket %zu: received %zu bytes, the plan says %" PRIu64,
            e->where, s->bucket, length, bk->nbytes);
  if (us != UCS_OK)
    WT_FAIL(WT_UNAVAILABLE,
            "%s: the trainer is gone (receiving bucket %zu failed: %s)",
            e->where, s->bucket, ucs_status_string(us));
  if (s->dmsg != NULL) {
    s->dlen = length;
    WT_CHECK(wt_ucxe_delta_land(e, u, plan, s));
  } else {
    wt_ucxe_hash_bucket(e, s);
  }
  for (size_t k = bk->done_first; k < bk->done_first + bk->done_count; k++)
    if (u->boxes != NULL)
      wt_param_store_staged_part(e->ctx.store, u->index[k], u->nbytes[k]);
    else
      wt_param_store_staged(e->ctx.store, u->index[k]);
  stats->tensors += bk->done_count;
  stats->bytes += bk->nbytes;
out:
  return st;
}

/* Rank r's part of a shard plan's update (docs/multirank.md), as an
 * update of its own; the update itself when it has one sender. */
static wt_update sub_update(const wt_update *u, uint32_t r) {
  if (u->nranks == 0) return *u;
  wt_update v = *u;
  size_t a = u->rank_first[r], b = u->rank_first[r + 1];
  v.n = b - a;
  v.index = u->index + a;
  v.nbytes = u->nbytes + a;
  v.boxes = u->boxes ? u->boxes + a : NULL;
  v.info = u->rank_info[r];
  v.total_bytes = 0;
  for (size_t k = 0; k < v.n; k++) v.total_bytes += v.nbytes[k];
  v.nranks = 0;
  v.rank_first = NULL;
  v.rank_info = NULL;
  return v;
}

/* The update info's ucx extras, or NULL. */
static const Wt__V1__UcxUpdateInfo *ucx_info_of(const wt_update *u) {
  return u->info != NULL &&
                 u->info->backend_update_case ==
                     WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__BACKEND_UPDATE_UCX
             ? u->info->ucx
             : NULL;
}

/* The bucket plan of one sender's update: its update info's buffer size
 * and split setting, as the trainer planned. */
static wt_status *plan_of(wt_engine *e, const wt_update *u,
                          wt_pack_plan **plan) {
  wt_status *st = NULL;
  uint64_t buffer = e->buffer_bytes;
  if (u->packed_buffer_bytes) buffer = u->packed_buffer_bytes;
  const Wt__V1__UcxUpdateInfo *ux = ucx_info_of(u);
  if (ux != NULL && ux->packed_buffer_size_bytes != NULL) {
    buffer = ux->packed_buffer_size_bytes->value;
    if (buffer == 0)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "update_info.ucx.packed_buffer_size_bytes is 0; it must be at "
              "least 1");
  }
  if (ux != NULL && ux->split_tensors)
    /* The plan refuses a buffer so small it would make more buckets than
     * WT_PACK_SPLIT_MAX_BUCKETS: a stranger cannot make this worker keep
     * state for millions. */
    WT_CHECK(wt_status_prefix(
        wt_pack_plan_build_split(u->nbytes, u->n, buffer, plan),
        "%s: update_info.ucx.packed_buffer_size_bytes with split_tensors",
        e->where));
  else
    WT_CHECK(wt_pack_plan_build(u->nbytes, u->n, buffer, plan));
out:
  return st;
}

static wt_status *ucx_receive(wt_engine *e, const wt_update *u,
                              wt_receive_stats *stats) {
  wt_status *st = NULL;
  const uint32_t nr = u->nranks ? u->nranks : 1;
  const bool ranked = u->nranks != 0;
  wt_update *subs = NULL;
  wt_pack_plan **plans = NULL;
  size_t *iov_at = NULL; /* each slot's first iov entry */
  slot *slots = NULL;
  ucp_dt_iov_t *iov_all = NULL;
  void **fwd_reqs = NULL; /* per bucket, then the route's */
  size_t nslots = 0, niov = 0, posted = 0, landed = 0, nhops = 0;
  uint32_t rflags = 0;
  const int64_t timeout = e->ctx.data_timeout_ms;
  const int64_t connect_timeout =
      wt_ucx_connect_timeout_ms(e->connect_timeout_ms, timeout);
  if (e->ucx == NULL)
    WT_FAIL(WT_FAILED_PRECONDITION, "%s: not initialised (init_transfer)",
            e->where);
  if (ranked && u->delta)
    WT_FAIL(WT_INVALID_ARGUMENT, "%s: a shard plan's round takes no delta base",
            e->where);
  subs = calloc(nr, sizeof(*subs));
  plans = calloc(nr, sizeof(*plans));
  if (subs == NULL || plans == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", e->where);
  for (uint32_t r = 0; r < nr; r++) {
    subs[r] = sub_update(u, r);
    st = plan_of(e, &subs[r], &plans[r]);
    if (st != NULL && ranked) st = wt_status_prefix(st, "trainer rank %u", r);
    if (st != NULL) goto out;
    nslots += plans[r]->nbuckets;
  }
  iov_at = calloc(nslots + 1, sizeof(*iov_at));
  if (iov_at == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", e->where);
  for (uint32_t r = 0, i = 0; r < nr; r++)
    for (size_t b = 0; b < plans[r]->nbuckets; b++, i++) {
      iov_at[i] = niov;
      niov += bucket_iov_count(&subs[r], plans[r], b);
    }
  /* A stray bucket still moving moves within the data deadline; one that
   * does not is stuck (a cut link), and the caller hears so in time. */
  WT_CHECK(wt_ucxe_check_strays(e, timeout));
  /* A round that covers the host store digests what it lands when the
   * trainer asks (it keeps a base): the base a later delta names. */
  const Wt__V1__UcxUpdateInfo *ux = ucx_info_of(u);
  e->hashing = !ranked && u->boxes == NULL && ux != NULL &&
               (ux->digest || u->delta) && !e->cuda &&
               u->n == wt_param_store_count(e->ctx.store);
  if (e->hashing && e->hash == NULL) WT_CHECK(wt_delta_hasher_new(&e->hash));
  if (e->hashing) wt_delta_hasher_reset(e->hash);
  if (u->delta) WT_CHECK(wt_ucxe_delta_prepare(e, u, plans[0]));
  wt_ucxe_reap_peers(e);
  e->gone_since_ms = 0;
  /* Every bucket's receive (of every rank) is posted before the first
   * wait, straight into its staging buffers: then every message of the
   * round matches a posted receive as it arrives, and whatever lands in the
   * unexpected queue meanwhile is no trainer's (its tag is keyed with the
   * init's secret), so each wait discards it at once and a flood cannot
   * pile up. */
  slots = calloc(nslots ? nslots : 1, sizeof(*slots));
  e->nslots = nslots;
  iov_all = calloc(niov + 1, sizeof(*iov_all));
  if (slots == NULL || iov_all == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", e->where);
  for (uint32_t r = 0, at = 0; r < nr; r++)
    for (size_t b = 0; b < plans[r]->nbuckets; b++) {
      size_t dcap =
          u->delta ? (size_t)wt_ucx_delta_bound(plans[r]->buckets[b].nbytes)
                   : 0;
      slots[posted].rank = r;
      WT_CHECK(post_bucket(
          e, &subs[r], plans[r], e->round_id, wt_ucx_rank_bucket(ranked, r, b),
          b, iov_all + iov_at[posted], u->delta ? e->dbuf + at : NULL, dcap,
          &slots[posted]));
      posted++;
      at += dcap;
    }
  e->ucx->discard = true;
  /* The route is the round's first message: its wait also covers the
   * trainer's (re)connection and its start, hence the connect deadline. */
  if (ranked) {
    WT_CHECK(wt_ucxe_recv_routes_ranked(e, u, connect_timeout));
  } else {
    WT_CHECK(wt_ucxe_recv_route(e, u, connect_timeout, &rflags, &nhops));
  }
  if (nhops > 0) {
    fwd_reqs = calloc(plans[0]->nbuckets + 1, sizeof(*fwd_reqs));
    if (fwd_reqs == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", e->where);
    WT_CHECK(
        wt_ucxe_fwd_start(e, rflags, nhops, &fwd_reqs[plans[0]->nbuckets]));
  }
  const int64_t t_route = wt_mono_ms();
  int64_t t_first = t_route;
  while (landed < nslots) {
    slot *s = &slots[landed];
    const wt_pack_plan *plan = plans[s->rank];
    char what[160];
    if (ranked)
      snprintf(what, sizeof(what), "bucket %zu of %zu from trainer rank %u",
               s->bucket, plan->nbuckets, s->rank);
    else
      snprintf(what, sizeof(what), "bucket %zu of %zu from the trainer", landed,
               plan->nbuckets);
    WT_CHECK(wt_ucxe_wait_recv(e, s->req, timeout, what));
    /* A delta bucket goes on as it came before this worker decodes it (the
     * next worker checks it for itself), so that the chain does not wait
     * for each hop's decoding; a full one goes on from staging once it
     * has landed. */
    bool sent_on = false;
    if (fwd_reqs != NULL && s->dmsg != NULL && s->note->done &&
        s->note->status == UCS_OK) {
      s->dlen = s->note->length;
      WT_CHECK(wt_ucxe_fwd_bucket(e, s, &fwd_reqs[s->bucket]));
      sent_on = true;
    }
    st = land_bucket(e, &subs[s->rank], plan, s, stats);
    if (st != NULL && ranked)
      st = wt_status_prefix(st, "trainer rank %u", s->rank);
    if (st != NULL) goto out;
    if (landed == 0) t_first = wt_mono_ms();
    if (fwd_reqs != NULL && !sent_on)
      WT_CHECK(wt_ucxe_fwd_bucket(e, s, &fwd_reqs[s->bucket]));
    landed++;
  }
  const int64_t t_landed = wt_mono_ms();
  if (fwd_reqs != NULL) {
    WT_CHECK(wt_ucxe_fwd_finish(e, fwd_reqs, plans[0]->nbuckets + 1, timeout));
    stats->forwarded_bytes += plans[0]->total_bytes;
  }
  if (e->hashing) stats->digest = wt_delta_hasher_digest(e->hash);
  /* Where a round's time goes, hop by hop (bench/fanout_bench.sh). */
  WT_LOGD("ucx",
          "%s: round %" PRIu64
          ": %zu bucket(s) from %u sender(s); after the route: first "
          "landed %lld ms, last %lld ms%s, forwarded %lld ms",
          e->where, e->round_id, nslots, nr, (long long)(t_first - t_route),
          (long long)(t_landed - t_route),
          fwd_reqs != NULL ? "" : " (last in the chain)",
          (long long)(wt_mono_ms() - t_route));
out:
  if (e->ucx) e->ucx->discard = false;
  if (slots) wt_ucxe_settle_receives(e, slots, e->round_id, &iov_all);
  e->nslots = 0;
  if (fwd_reqs != NULL) {
    /* A failed round: forcing the close ends sends still in flight. */
    if (st != NULL) {
      wt_ucx_ep_close(e->ucx, e->fwd.ep, false, UCX_GRACE_MS);
      memset(&e->fwd, 0, sizeof(e->fwd));
    }
    for (size_t i = 0; i <= plans[0]->nbuckets; i++)
      wt_ucx_request_drop(e->ucx, fwd_reqs[i], UCX_GRACE_MS);
    free(fwd_reqs);
  }
  free(iov_all);
  free(slots);
  free(iov_at);
  for (uint32_t r = 0; plans != NULL && r < nr; r++)
    wt_pack_plan_free(plans[r]);
  free(plans);
  free(subs);
  return st;
}

/* Device memory needs a UCX that moves CUDA memory: asked of a UCX
 * context once per process (creating one loads UCX's transports). */
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static char cuda_missing[512];

static void probe_cuda(void) {
  wt_ucx *u = NULL;
  wt_status *st = wt_ucx_new(NULL, NULL, false, "ucx", &u);
  if (st == NULL) st = wt_ucx_need_cuda(u, "ucx");
  if (st != NULL)
    snprintf(cuda_missing, sizeof(cuda_missing), "%s", wt_status_message(st));
  wt_status_free(st);
  wt_ucx_destroy(u);
}

static wt_status *ucx_probe_memory(wt_mem_kind kind) {
  if (kind != WT_MEM_DEVICE) return NULL;
  pthread_once(&cuda_once, probe_cuda);
  return cuda_missing[0]
             ? wt_status_new(WT_FAILED_PRECONDITION, "%s", cuda_missing)
             : NULL;
}

/* The server's settings of this backend: transports=LIST, the workers'
 * UCX transports when an init info names none. */
static wt_status *ucx_check_options(const wt_backend_option *opts, size_t n) {
  static const char *const known[] = {"transports", "max_peer_connections",
                                      NULL};
  for (size_t i = 0; i < n; i++) {
    if (strcmp(opts[i].key, "max_peer_connections") == 0) {
      char *end = NULL;
      unsigned long v = strtoul(opts[i].value ? opts[i].value : "", &end, 10);
      if (opts[i].value == NULL || end == opts[i].value || *end != '\0' ||
          v > 1000000)
        return wt_status_new(WT_INVALID_ARGUMENT,
                             "option max_peer_connections: '%s' is not a "
                             "count from 0 (no limit) to 1000000",
                             opts[i].value ? opts[i].value : "");
      continue;
    }
    if (strcmp(opts[i].key, "transports") != 0)
      return wt_option_unknown("ucx", &opts[i], known);
    if (opts[i].value == NULL || *opts[i].value == '\0')
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "option transports: empty (name UCX transports, "
                           "e.g. tcp or sm,self)");
  }
  return NULL;
}

const wt_engine_ops wt_ucx_engine_ops = {
    .header = {WT_ENGINE_ABI_VERSION, "ucx"},
    /* Host memory: this build's UCX transports read and write it directly
     * (no CUDA transports are configured). */
    .memory_kinds = WT_MEM_HOST_KINDS | WT_MEM_BIT(WT_MEM_DEVICE),
    .probe_memory = ucx_probe_memory,
    .caps = WT_ENGINE_CROSS_HOST | WT_ENGINE_SURVIVES_ABORT |
            WT_ENGINE_TAKES_BOXES | WT_ENGINE_RECEIVES_DELTA,
    .create = ucx_create,
    .init_transfer = ucx_init_transfer,
    .start_update = ucx_start_update,
    .receive = ucx_receive,
    .finish_update = ucx_finish_update,
    .abort_update = ucx_abort_update,
    .cancel = ucx_cancel,
    .destroy = ucx_destroy,
    .check_options = ucx_check_options,
    .needs_reinit = ucx_needs_reinit,
};
