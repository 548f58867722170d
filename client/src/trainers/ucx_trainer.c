/* ucx_trainer.c: the `ucx` trainer engine (built with WT_WITH_UCX).
 *
 * Rendezvous: the client hands every server's init response to
 * init_response, which creates one endpoint per worker: by default with the
 * worker's packed worker address (UCP_EP_PARAM_FIELD_REMOTE_ADDRESS), which
 * came over the control channel; with init_info.options["ucx_connect"] =
 * "sockaddr", through the worker's listener (the reported host:port), which
 * the worker then opens, and the first bytes are this init's hello. The
 * connection completes while both sides progress, i.e. during the first
 * round.
 *
 * Data path: the shared bucket plan over the source's metadata (buffer size:
 * init_info.ucx.packed_buffer_size_bytes, default 64 MiB, passed to every
 * worker in update_info.ucx so both sides plan alike). The plan is the
 * split one (update_info.ucx.split_tensors; options["ucx_split_tensors"],
 * default "on"): buckets of exactly the buffer size, a larger tensor cut
 * across them, so that no bucket, and no chain hop, takes longer than the
 * buffer's time; vLLM's plan when "off", or when the buffer is so small
 * that a round would need more than WT_PACK_SPLIT_MAX_BUCKETS. A bucket whose
 * tensors the source hands out as pointers lying back to back (a
 * checkpoint's mmap, a memory source) is sent straight from that memory:
 * zero copy on the trainer. Any other bucket is packed once into one of
 * packed_num_buffers (default 2) send buffers (a synthetic source writes its
 * bytes there directly). Fan-out (options["ucx_fanout"]): "auto", the
 * default, is the chain once the workers are on more than one host and
 * parallel while they share one (round_fanout); "parallel" sends each
 * bucket to every worker of every server at once (one
 * tagged send per worker from the same memory, tag wt_ucx_tag(round of that
 * server, bucket)); "sequential" serves one worker after the other, reading
 * the source once per worker; "chain" sends to the first worker only, which
 * forwards every bucket to the next as it lands, and so on (the route
 * message of wt/ucx_common.h tells each worker its successor). Readying the
 * next bucket overlaps the sends of the previous ones; when every buffer is in
 * flight the oldest is waited for, with the client's data deadline (or the init
 * info's timeout_ms); a worker's first bucket of a round with the connect
 * deadline (init_info.ucx.connect_timeout_ms; unset: 10 s, or timeout_ms if
 * larger), since it includes the connection's set-up and the worker's start. A
 * worker whose endpoint breaks (UCX's peer-failure handling) or whose send does
 * not complete in time ends send_weights with an error naming the server and
 * the worker. Its settings are the init info's options (ucx_connect,
 * ucx_peer_errors, ucx_fanout, ucx_split_tensors; the table `settings`); it
 * reads no environment (wt-push turns WT_UCX_* into options).
 *
 * Device sources (tensors in GPU memory, wt-push --device cuda:N): a round
 * is all host memory or all on one GPU. From a GPU, a bucket whose tensors
 * lie back to back is sent straight from them, and any other is packed
 * device to device (cudaMemcpyAsync on the trainer's stream) into send
 * buffers on that GPU, registered once with ucp_mem_map as CUDA memory;
 * UCX's CUDA transports then move it (cuda_ipc to a worker's GPU on the
 * same host, GPUDirect RDMA where a NIC has it): no host bounce. A UCX that
 * cannot move CUDA memory fails the round saying so (wt_ucx_need_cuda).
 *
 * Peer-failure handling (UCP_ERR_HANDLING_MODE_PEER, on by default) reports
 * a dead worker at once (and, through the listener connection, a dead
 * trainer to the workers), but UCX 1.13's shared-memory transports do not
 * support it and are then never selected ("no peer failure handler"), and
 * its sockaddr wireup picks network transports only. Shared memory on one
 * host therefore takes init_info.options "ucx_connect" = "address" and
 * "ucx_peer_errors" = "off"; dead peers are then found by the deadlines.
 */

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wt/cuda.h"
#include "wt/log.h"
#include "wt/packing.h"
#include "wt/secure.h"
#include "wt/trainer.h"
#include "wt/ucx_common.h"

#define UCX_GRACE_MS 1000
/* How long a cancelled send waits for a dead worker's endpoint to report
 * the failure (see drain). */
#define UCX_CANCEL_GRACE_MS 300

typedef struct peer {
  size_t server;
  uint32_t rank;
  char name[320]; /* "HOST:PORT worker R (ADDR:PORT)" */
  char host[256]; /* where its listener is */
  uint32_t port;
  struct sockaddr_storage addr;
  socklen_t addrlen;
  unsigned char *worker_address; /* NULL: connect by sockaddr */
  size_t worker_address_len;
  ucp_ep_h ep;
  bool failed;
  ucs_status_t why;
  bool moved; /* a bucket of this round reached it */
} peer;

/* One send buffer and the sends of the bucket it holds. */
typedef struct sbuf {
  unsigned char *data;
  uint64_t cap;
  int device;     /* data is on this GPU; -1: host memory */
  ucp_mem_h memh; /* device data: its registration */
  size_t bucket;
  bool busy;
  size_t j0, j1; /* the peers it goes to: [j0, j1) */
  void **reqs;   /* one per peer */
} sbuf;

enum { FANOUT_PARALLEL, FANOUT_SEQUENTIAL, FANOUT_CHAIN, FANOUT_AUTO };

typedef struct ucx_trainer {
  const wt_trainer_ctx *ctx; /* the servers; borrowed */
  wt_ucx *ucx;
  uint64_t buffer_bytes;
  uint32_t num_buffers;
  int64_t timeout_ms;
  int64_t connect_timeout_ms; /* a peer's first bucket of a round */
  bool by_sockaddr;           /* options["ucx_connect"] == "sockaddr" */
  /* The settings table's fields (ints, set by apply_settings). */
  int peer_errors;            /* options["ucx_peer_errors"] != "off" */
  int fanout;                 /* this round's: FANOUT_* but AUTO */
  int fanout_option;          /* options["ucx_fanout"]: FANOUT_* */
  int split_option;           /* options["ucx_split_tensors"] != "off" */
  bool split;                 /* this round's plan is split (update info) */
  /* A split plan's tensor that spans buckets: the source's last yield,
   * kept for the next bucket (held_index SIZE_MAX: none). */
  wt_source_tensor held;
  size_t held_index;
  peer **peers; /* stable addresses: UCX error callbacks point at them */
  size_t npeers;
  sbuf *bufs;
  bool lanes_logged;
  uint8_t secret[WT_UCX_SECRET_BYTES]; /* init_info.ucx.auth_secret */
  uint8_t hello[WT_UCX_HELLO_BYTES];
  unsigned char *route; /* the route message being sent */
  void **route_reqs;    /* its sends, one per peer */
  Wt__V1__UcxUpdateInfo uinfo;
  Wt__V1__UInt64Value ubuf;
  /* Device sources: the round's GPU (-1: host), CUDA, the packing stream. */
  int device;
  const wt_cuda_api *cuda;
  void *stream;
  int stream_device;
} ucx_trainer;

static void peer_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
  peer *p = arg;
  (void)ep;
  p->failed = true;
  p->why = status;
}

/* Creates p's endpoint to its worker; the connection completes while both
 * sides progress. */
static wt_status *peer_connect(ucx_trainer *t, peer *p) {
  wt_status *st = NULL;
  ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
                        .err_mode = t->peer_errors ? UCP_ERR_HANDLING_MODE_PEER
                                                   : UCP_ERR_HANDLING_MODE_NONE,
                        .err_handler = {.cb = peer_error, .arg = p}};
  if (p->worker_address != NULL) {
    ep.field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = (const ucp_address_t *)p->worker_address;
  } else {
    ep.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = (const struct sockaddr *)&p->addr;
    ep.sockaddr.addrlen = p->addrlen;
  }
  p->failed = false;
  p->why = UCS_OK;
  ucs_status_t us = ucp_ep_create(t->ucx->worker, &ep, &p->ep);
  if (us != UCS_OK) {
    p->ep = NULL;
    WT_FAIL(WT_UNAVAILABLE, "%s: connecting: %s", p->name,
            ucs_status_string(us));
  }
  if (p->worker_address == NULL) {
    /* The worker's listener closes a connection that does not send this
     * init's hello first. */
    ucp_request_param_t hp = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                              .datatype = ucp_dt_make_contig(1)};
    void *hr = ucp_stream_send_nbx(p->ep, t->hello, sizeof(t->hello), &hp);
    if (UCS_PTR_IS_ERR(hr))
      WT_FAIL(WT_UNAVAILABLE, "%s: sending the hello: %s", p->name,
              ucs_status_string(UCS_PTR_STATUS(hr)));
    if (hr != NULL) ucp_request_free(hr); /* completes on its own */
  }
out:
  return st;
}

/* Force-closing an endpoint is the one way to end UCX sends still in flight
 * (ucp_request_cancel only applies to receives): it completes them with an
 * error, so that the send buffers are free again. */
static void peer_close(ucx_trainer *t, peer *p) {
  wt_ucx_ep_close(t->ucx, p->ep, false, UCX_GRACE_MS);
  p->ep = NULL;
}

/* Frees b's data (host or device) and its registration. */
static void sbuf_free(ucx_trainer *t, sbuf *b) {
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

static void ucx_trainer_destroy(void *self) {
  ucx_trainer *t = self;
  if (t == NULL) return;
  for (size_t i = 0; i < t->npeers; i++)
    if (t->ucx) peer_close(t, t->peers[i]);
  for (uint32_t i = 0; t->bufs && i < t->num_buffers; i++) {
    for (size_t j = 0; t->bufs[i].reqs && j < t->npeers; j++)
      wt_ucx_request_drop(t->ucx, t->bufs[i].reqs[j], UCX_GRACE_MS);
    free(t->bufs[i].reqs);
    sbuf_free(t, &t->bufs[i]);
  }
  free(t->bufs);
  if (t->stream != NULL) t->cuda->stream_destroy(t->stream);
  for (size_t j = 0; t->route_reqs && j < t->npeers; j++)
    wt_ucx_request_drop(t->ucx, t->route_reqs[j], UCX_GRACE_MS);
  free(t->route_reqs);
  free(t->route);
  for (size_t i = 0; i < t->npeers; i++) {
    free(t->peers[i]->worker_address);
    free(t->peers[i]);
  }
  free(t->peers);
  wt_ucx_destroy(t->ucx);
  free(t);
}

/* The trainer's own settings in the init info's options map, as a table:
 * each key, its values (the first is the default) and what each sets.
 * ucx_connect, which both halves read, is wt_ucx_init_settings_read's. */
typedef struct setting_choice {
  const char *name;
  int value;
} setting_choice;

typedef struct setting {
  const char *key;
  const setting_choice *choices; /* NULL-terminated; [0] the default */
  size_t offset;                 /* an int field of ucx_trainer */
} setting;

static const setting_choice on_off[] = {{"on", 1}, {"off", 0}, {NULL, 0}};
static const setting_choice fanout_choices[] = {{"auto", FANOUT_AUTO},
                                                {"parallel", FANOUT_PARALLEL},
                                                {"sequential",
                                                 FANOUT_SEQUENTIAL},
                                                {"chain", FANOUT_CHAIN},
                                                {NULL, 0}};
static const setting settings[] = {
    {"ucx_peer_errors", on_off, offsetof(ucx_trainer, peer_errors)},
    {"ucx_fanout", fanout_choices, offsetof(ucx_trainer, fanout_option)},
    {"ucx_split_tensors", on_off, offsetof(ucx_trainer, split_option)},
};

/* Every setting's default, then the init info's options in order (a later
 * one wins); a value not in the table is INVALID_ARGUMENT naming the key,
 * the value and the choices. Other keys belong to others and pass. */
static wt_status *apply_settings(ucx_trainer *t,
                                 const Wt__V1__WeightTransferInitInfo *init) {
  const size_t n = sizeof(settings) / sizeof(settings[0]);
  for (size_t s = 0; s < n; s++)
    *(int *)((char *)t + settings[s].offset) = settings[s].choices[0].value;
  for (size_t i = 0; i < init->n_options; i++) {
    const char *key = init->options[i]->key;
    const char *val = init->options[i]->value ? init->options[i]->value : "";
    for (size_t s = 0; key != NULL && s < n; s++) {
      if (strcmp(key, settings[s].key) != 0) continue;
      const setting_choice *c = settings[s].choices;
      while (c->name != NULL && strcmp(c->name, val) != 0) c++;
      if (c->name != NULL) {
        *(int *)((char *)t + settings[s].offset) = c->value;
        break;
      }
      char list[160] = "";
      size_t used = 0;
      for (c = settings[s].choices; c->name != NULL; c++) {
        int w = snprintf(list + used, sizeof(list) - used, "%s'%s'%s",
                         c == settings[s].choices ? ""
                         : c[1].name == NULL      ? " or "
                                                  : ", ",
                         c->name, c == settings[s].choices ? " (default)" : "");
        if (w < 0 || (size_t)w >= sizeof(list) - used) break;
        used += (size_t)w;
      }
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "init_info.options[\"%s\"] is '%.64s'; it must be "
                           "%s",
                           key, val, list);
    }
  }
  return NULL;
}

static wt_status *ucx_trainer_init(const wt_trainer_init_args *args,
                                   void **self) {
  wt_status *st = NULL;
  ucx_trainer *t = calloc(1, sizeof(*t));
  if (t != NULL) t->device = -1;
  if (t == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  const Wt__V1__WeightTransferInitInfo *init = args->init_info;
  const Wt__V1__UcxInitInfo *x =
      init->backend_init_case ==
              WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_UCX
          ? init->ucx
          : NULL;
  if (args->ctx == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT, "ucx trainer: no servers (no context)");
  t->ctx = args->ctx;
  t->timeout_ms = init->timeout_ms ? (int64_t)init->timeout_ms
                                   : t->ctx->data_timeout_ms;
  wt_ucx_init_settings set;
  WT_CHECK(wt_ucx_init_settings_read(init, &set));
  t->buffer_bytes = set.buffer_bytes;
  t->num_buffers = set.num_buffers;
  t->by_sockaddr = set.by_sockaddr;
  t->connect_timeout_ms =
      wt_ucx_connect_timeout_ms(set.connect_timeout_ms, t->timeout_ms);
  t->held_index = SIZE_MAX;
  WT_CHECK(apply_settings(t, init));
  if (t->by_sockaddr && !t->peer_errors)
    /* The workers' listeners accept with peer-failure handling, and UCX
     * refuses a connection whose two ends disagree on it. */
    WT_FAIL(WT_INVALID_ARGUMENT,
            "init_info.options[\"ucx_peer_errors\"] is 'off' but "
            "\"ucx_connect\" is 'sockaddr': connections through the "
            "workers' listeners always handle peer failures; set "
            "\"ucx_connect\" to 'address' too");
  WT_CHECK(wt_ucx_init_secret(init, t->secret));
  wt_ucx_hello(t->secret, t->hello);
  WT_CHECK(wt_ucx_new(x ? x->transports : NULL, NULL, t->by_sockaddr,
                      "ucx trainer", &t->ucx));
  t->bufs = calloc(t->num_buffers, sizeof(*t->bufs));
  for (uint32_t i = 0; t->bufs != NULL && i < t->num_buffers; i++)
    t->bufs[i].device = -1;
  t->route = malloc(WT_UCX_ROUTE_MAX);
  if (t->bufs == NULL || t->route == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  *self = t;
  t = NULL;
out:
  ucx_trainer_destroy(t);
  return st;
}

static wt_status *ucx_init_response(
    void *self, size_t k, const Wt__V1__InitWeightTransferEngineResponse *r) {
  wt_status *st = NULL;
  ucx_trainer *t = self;
  peer *p = NULL;
  if (r == NULL || r->n_endpoints == 0)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "backend 'ucx': the init response lists no worker endpoint");
  peer **np = realloc(t->peers, (t->npeers + r->n_endpoints) * sizeof(*np));
  if (np == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  t->peers = np;
  for (size_t i = 0; i < r->n_endpoints; i++) {
    const Wt__V1__WorkerEndpoint *we = r->endpoints[i];
    p = calloc(1, sizeof(*p));
    if (p == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
    p->server = k;
    p->rank = we->rank;
    snprintf(p->name, sizeof(p->name), "%s worker %u (%s:%u)",
             t->ctx->targets[k], we->rank,
             we->address ? we->address : "", we->port);
    if (t->by_sockaddr &&
        (we->address == NULL || *we->address == '\0' || we->port == 0))
      WT_FAIL(WT_FAILED_PRECONDITION,
              "%s: the worker has no UCX listener (it opens one only when "
              "the init info's options say \"ucx_connect\": \"sockaddr\")",
              p->name);
    if (!t->by_sockaddr && we->worker_address.len == 0)
      WT_FAIL(WT_FAILED_PRECONDITION,
              "%s: the init response gives no UCX worker address", p->name);
    snprintf(p->host, sizeof(p->host), "%s", we->address ? we->address : "");
    p->port = we->port;
    if (t->by_sockaddr)
      WT_CHECK(wt_status_prefix(
          wt_ucx_sockaddr(we->address, we->port, &p->addr, &p->addrlen), "%s",
          p->name));
    if (!t->by_sockaddr && we->worker_address.len > 0) {
      p->worker_address = malloc(we->worker_address.len);
      if (p->worker_address == NULL)
        WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
      memcpy(p->worker_address, we->worker_address.data,
             we->worker_address.len);
      p->worker_address_len = we->worker_address.len;
    }
    WT_CHECK(peer_connect(t, p));
    t->peers[t->npeers++] = p;
    p = NULL;
  }
out:
  if (p) free(p->worker_address);
  free(p);
  return st;
}

static wt_status *ucx_update_info(void *self, wt_source *source, size_t k,
                                  Wt__V1__WeightTransferUpdateInfo *info) {
  ucx_trainer *t = self;
  wt__v1__ucx_update_info__init(&t->uinfo);
  wt__v1__uint64_value__init(&t->ubuf);
  t->ubuf.value = t->buffer_bytes;
  t->uinfo.packed_buffer_size_bytes = &t->ubuf;
  /* Split unless asked not to, or so small a buffer would make more
   * buckets than a worker takes (then vLLM's plan: as many at most as
   * tensors). */
  uint64_t total = wt_source_total_bytes(source);
  t->split = t->split_option && wt_pack_split_buckets(total, t->buffer_bytes) <=
                                    WT_PACK_SPLIT_MAX_BUCKETS;
  if (t->split_option && !t->split && k == 0)
    WT_LOGD("ucx",
            "trainer: vLLM's bucket plan, not the split one: %" PRIu64
            "-byte buffers would cut the round's %" PRIu64
            " bytes into more than %u buckets",
            t->buffer_bytes, total, WT_PACK_SPLIT_MAX_BUCKETS);
  t->uinfo.split_tensors = t->split;
  info->backend_update_case =
      WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__BACKEND_UPDATE_UCX;
  info->ucx = &t->uinfo;
  return NULL;
}

static void ucx_trainer_cancel(void *self) {
  ucx_trainer *t = self;
  wt_ucx_cancel(t->ucx);
}

typedef struct wait_arg {
  ucx_trainer *t;
  sbuf *b;
} wait_arg;

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

/* Readies bucket `bk` (the source's next tensors) for sending: *bytes
 * points at its bytes. When the source hands out pointers (a checkpoint's
 * mmap, a memory source) and the bucket's tensors lie back to back, that is
 * the source's own memory, valid until the source is destroyed: no copy.
 * Otherwise the bucket is packed into `dst`, the one copy of the path. */
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

static uint64_t round_of(ucx_trainer *t, const peer *p) {
  return p->server < t->ctx->nservers
             ? t->ctx->round_ids[p->server]
             : 0;
}

/* Sends the round's route message to every worker the trainer sends to:
 * the rest of the chain to the first worker (chain fan-out), an empty
 * route to every worker otherwise. */
static wt_status *send_routes(ucx_trainer *t) {
  wt_status *st = NULL;
  wt_ucx_hop *hops = NULL;
  bool chain = t->fanout == FANOUT_CHAIN;
  size_t ntargets = chain ? 1 : t->npeers;
  size_t nhops = chain ? t->npeers - 1 : 0;
  uint32_t flags = (t->by_sockaddr ? 0 : WT_UCX_ROUTE_BY_ADDRESS) |
                   (t->peer_errors ? WT_UCX_ROUTE_PEER_ERRORS : 0);
  if (nhops > 0) {
    hops = calloc(nhops, sizeof(*hops));
    if (hops == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; i < nhops; i++) {
    const peer *p = t->peers[i + 1];
    hops[i].round = round_of(t, p);
    snprintf(hops[i].host, sizeof(hops[i].host), "%s", p->host);
    hops[i].port = p->port;
    hops[i].worker_address = p->worker_address;
    hops[i].worker_address_len = p->worker_address_len;
  }
  size_t len =
      wt_ucx_route_pack(t->route, WT_UCX_ROUTE_MAX, flags, hops, nhops);
  if (len == 0)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "backend 'ucx': a chain of %zu workers does not fit in one route "
            "message (at most %d hops)",
            t->npeers, WT_UCX_ROUTE_HOPS);
  for (size_t j = 0; j < ntargets; j++) {
    peer *p = t->peers[j];
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                              .datatype = ucp_dt_make_contig(1)};
    void *req = ucp_tag_send_nbx(
        p->ep, t->route, len,
        wt_ucx_tag(t->secret, round_of(t, p), WT_UCX_ROUTE_BUCKET), &rp);
    if (UCS_PTR_IS_ERR(req))
      WT_FAIL(WT_UNAVAILABLE, "%s: sending the round's route: %s", p->name,
              ucs_status_string(UCS_PTR_STATUS(req)));
    t->route_reqs[j] = req;
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
static wt_status *drain_routes(ucx_trainer *t) {
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

/* Where this round's tensors are: host memory, or one GPU (t->device),
 * which UCX must be able to move. */
static wt_status *round_memory(ucx_trainer *t, wt_source *src) {
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

/* The round's fan-out. auto: the chain once the workers are on more than
 * one host (each host's link then carries one copy instead of N:
 * bench/fanout_bench.sh on rate-limited links, docs/benchmarks.md), parallel while
 * they share one (the trainer's host, or any one: the copies then share a
 * CPU and memory bus, where parallel was ahead in bench/ucx_bench.sh). */
static int round_fanout(const ucx_trainer *t) {
  if (t->fanout_option != FANOUT_AUTO) return t->fanout_option;
  for (size_t j = 1; j < t->npeers; j++)
    if (strcmp(t->peers[j]->host, t->peers[0]->host) != 0) return FANOUT_CHAIN;
  return FANOUT_PARALLEL;
}

static wt_status *ucx_send_weights(void *self, wt_source *source,
                                   wt_progress_fn progress, void *user) {
  wt_status *st = NULL;
  ucx_trainer *t = self;
  wt_pack_plan *plan = NULL;
  size_t n = 0;
  const wt_tensor_meta *metas = wt_source_metas(source, &n);
  wt_progress pr = {.tensors_total = n,
                    .bytes_total = wt_source_total_bytes(source)};
  if (t->npeers == 0)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "backend 'ucx': no worker endpoint (init_transfer first)");
  t->fanout = round_fanout(t);
  if (t->fanout_option == FANOUT_AUTO)
    WT_LOGD("ucx", "trainer: fan-out auto: %s (%zu workers)",
            t->fanout == FANOUT_CHAIN ? "chain, the workers are on more "
                                        "than one host"
                                      : "parallel, the workers share a host",
            t->npeers);
  wt_ucx_reset_cancel(t->ucx);
  /* Endpoints closed or broken in an earlier round connect again; the
   * workers accept the new connection inside their receive. */
  for (size_t j = 0; j < t->npeers; j++) {
    peer *p = t->peers[j];
    p->moved = false;
    if (p->ep != NULL && !p->failed) continue;
    if (p->ep != NULL) peer_close(t, p);
    WT_CHECK(peer_connect(t, p));
  }
  WT_CHECK(round_memory(t, source));
  WT_CHECK(t->split
               ? wt_pack_plan_split_from_metas(metas, n, t->buffer_bytes, &plan)
               : wt_pack_plan_from_metas(metas, n, t->buffer_bytes, &plan));
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
    if (b->cap < plan->max_bucket_bytes || b->device != t->device) {
      sbuf_free(t, b);
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
  }
  /* Parallel fan-out: one pass, every bucket to every worker. Sequential:
   * one pass per worker (the source is read once per worker). Chain: one
   * pass to the first worker, which forwards. */
  bool seq = t->fanout == FANOUT_SEQUENTIAL;
  size_t npasses = seq ? t->npeers : 1;
  uint64_t done_tensors = 0, done_bytes = 0;
  WT_CHECK(send_routes(t));
  for (size_t pass = 0; pass < npasses; pass++) {
    size_t j0 = seq ? pass : 0;
    size_t j1 = seq ? pass + 1 : t->fanout == FANOUT_CHAIN ? 1 : t->npeers;
    WT_CHECK(wt_source_rewind(source));
    t->held_index = SIZE_MAX;
    for (size_t bkt = 0; bkt < plan->nbuckets; bkt++) {
      sbuf *b = &t->bufs[bkt % t->num_buffers];
      if (b->busy) {
        WT_CHECK(drain(t, b, plan->nbuckets));
        const wt_bucket *done = &plan->buckets[b->bucket];
        done_tensors += done->done_count;
        done_bytes += done->nbytes;
        pr.tensors_done = done_tensors / npasses;
        pr.bytes_done = done_bytes / npasses;
        if (progress) progress(&pr, user);
      }
      const wt_bucket *bk = &plan->buckets[bkt];
      const void *bytes = NULL;
      WT_CHECK(pack(t, source, plan, bkt, b->data, &bytes));
      b->bucket = bkt;
      b->busy = true;
      b->j0 = j0;
      b->j1 = j1;
      for (size_t j = j0; j < j1; j++) {
        peer *p = t->peers[j];
        if (p->failed || p->ep == NULL)
          WT_FAIL(
              WT_UNAVAILABLE, "%s: connection broke: %s", p->name,
              ucs_status_string(p->failed ? p->why : UCS_ERR_NOT_CONNECTED));
        uint64_t round = round_of(t, p);
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
        void *req = ucp_tag_send_nbx(p->ep, bytes, bk->nbytes,
                                     wt_ucx_tag(t->secret, round, bkt), &rp);
        if (UCS_PTR_IS_ERR(req))
          WT_FAIL(WT_UNAVAILABLE, "%s: sending bucket %zu: %s", p->name, bkt,
                  ucs_status_string(UCS_PTR_STATUS(req)));
        b->reqs[j] = req;
      }
    }
    for (size_t i = 0; i < plan->nbuckets && i < t->num_buffers; i++) {
      /* Oldest first, so progress counts buckets in order. */
      size_t bkt =
          plan->nbuckets -
          (plan->nbuckets < t->num_buffers ? plan->nbuckets : t->num_buffers) +
          i;
      sbuf *b = &t->bufs[bkt % t->num_buffers];
      if (!b->busy) continue;
      WT_CHECK(drain(t, b, plan->nbuckets));
      done_tensors += plan->buckets[bkt].done_count;
      done_bytes += plan->buckets[bkt].nbytes;
    }
  }
  WT_CHECK(drain_routes(t));
  if (wt_log_enabled(WT_LOG_DEBUG) && !t->lanes_logged) {
    /* Which transports carry the data (UCX_TLS, transports) is otherwise
     * invisible: log each endpoint's lanes once. */
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
  pr.tensors_done = pr.tensors_total;
  pr.bytes_done = pr.bytes_total;
  if (progress) progress(&pr, user);
out:
  if (st != NULL) {
    /* End what is in flight (the buffers are reused next round) by closing
     * the endpoints; the next round connects to every worker afresh. All
     * of them, not only those with sends still going: a send that
     * completed locally may sit unacknowledged in the kernel's socket
     * buffer, and after a cut link that TCP connection stays in
     * retransmission back-off (seconds, up to minutes) after the link is
     * back, stalling whatever the next round queues behind it. A fresh
     * connection starts clean, and tells the worker that the old one is
     * obsolete (see the ucx engine's check_strays). */
    for (size_t j = 0; j < t->npeers; j++) peer_close(t, t->peers[j]);
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
  wt_pack_plan_free(plan);
  return st;
}

/* Adds init_info.options[key] = value (malloc'd, for wt_pb_free). */
static wt_status *add_map_option(Wt__V1__WeightTransferInitInfo *info,
                                 const char *key, const char *value) {
  Wt__V1__WeightTransferInitInfo__OptionsEntry **grown =
      realloc(info->options, (info->n_options + 1) * sizeof(*grown));
  if (grown == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
  info->options = grown;
  Wt__V1__WeightTransferInitInfo__OptionsEntry *e = malloc(sizeof(*e));
  if (e == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
  wt__v1__weight_transfer_init_info__options_entry__init(e);
  e->key = strdup(key);
  e->value = strdup(value);
  info->options[info->n_options++] = e;
  if (e->key == NULL || e->value == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
  return NULL;
}

/* Options: bucket_size, num_buffers, transports, connect_timeout_ms, and
 * connect / peer_errors / fanout / split_tensors (the init info's ucx_*
 * options, checked by trainer_init like any other). */
static wt_status *ucx_init_info(const wt_backend_option *opts, size_t n,
                                Wt__V1__WeightTransferInitInfo *info) {
  static const char *const known[] = {
      "bucket_size", "num_buffers", "transports", "connect_timeout_ms",
      "connect",     "peer_errors", "fanout",     "split_tensors",
      NULL};
  wt_status *st = NULL;
  Wt__V1__UcxInitInfo *x = malloc(sizeof(*x));
  if (x == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
  wt__v1__ucx_init_info__init(x);
  info->backend_init_case = WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_UCX;
  info->ucx = x;
  /* This init's secret: keys every tag and the hello (wt/ucx_common.h). */
  x->auth_secret.data = malloc(WT_UCX_SECRET_BYTES);
  if (x->auth_secret.data == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
  x->auth_secret.len = WT_UCX_SECRET_BYTES;
  WT_CHECK(wt_random_bytes(x->auth_secret.data, WT_UCX_SECRET_BYTES));
  for (size_t i = 0; i < n; i++) {
    const wt_backend_option *o = &opts[i];
    if (strcmp(o->key, "bucket_size") == 0) {
      WT_CHECK(wt_option_size_field(o, &x->packed_buffer_size_bytes));
    } else if (strcmp(o->key, "num_buffers") == 0) {
      WT_CHECK(wt_option_u32_field(o, &x->packed_num_buffers));
    } else if (strcmp(o->key, "connect_timeout_ms") == 0) {
      WT_CHECK(wt_option_u32_field(o, &x->connect_timeout_ms));
    } else if (strcmp(o->key, "transports") == 0) {
      free(x->transports == (char *)protobuf_c_empty_string ? NULL
                                                            : x->transports);
      if ((x->transports = strdup(o->value ? o->value : "")) == NULL)
        WT_FAIL(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
    } else if (strcmp(o->key, "connect") == 0 ||
               strcmp(o->key, "peer_errors") == 0 ||
               strcmp(o->key, "fanout") == 0 ||
               strcmp(o->key, "split_tensors") == 0) {
      char key[32];
      snprintf(key, sizeof(key), "ucx_%s", o->key);
      WT_CHECK(add_map_option(info, key, o->value ? o->value : ""));
    } else {
      WT_CHECK(wt_option_unknown("ucx", o, known));
    }
  }
out:
  return st;
}

const wt_trainer_ops wt_ucx_trainer_ops = {
    .header = {.abi_version = WT_TRAINER_ABI_VERSION, .name = "ucx"},
    .flags = WT_TRAINER_NEEDS_UPDATE_WEIGHTS,
    .memory_kinds = WT_MEM_HOST_KINDS | WT_MEM_BIT(WT_MEM_DEVICE),
    .init_info = ucx_init_info,
    .trainer_init = ucx_trainer_init,
    .update_info = ucx_update_info,
    .send_weights = ucx_send_weights,
    .cancel = ucx_trainer_cancel,
    .destroy = ucx_trainer_destroy,
    .init_response = ucx_init_response,
};
