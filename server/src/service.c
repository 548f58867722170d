/* service.c: the handlers of wt.v1.WeightTransfer and their method table.
 *
 * Handlers run on the threads of their admission class (wt/rpc.h): round
 * calls (init, start, update, push, finish, abort) and readers (info, world
 * size, parameters, version, checksums) each have their own, so readers can
 * never take the trainer's capacity; watch streams hold no thread at all.
 * A handler that waits (a PushWeights stream between chunks, a receive)
 * delays no other call. Handlers translate protobuf to the round state
 * machine (round.c, push.c) and back; what they answer is documented in
 * wt.proto.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "leases.h"
#include "grpc/health/v1/health.pb-c.h"
#include "grpc/reflection/v1/reflection.pb-c.h"
#include "server_state.h"
#include "wt/checksum.h"
#include "wt/chunk.h"
#include "wt/log.h"
#include "wt/pb.h"
#include "wt/lock.h"

#define METHOD(name) "/wt.v1.WeightTransfer/" name

#define LIST_DEFAULT_PAGE 1000u
#define LIST_MAX_PAGE 10000u

static const char *const capabilities[] = {
    "push_weights",      "update_weights",   "watch_weight_version",
    "checksum_sha256",   "checksum_xxh3_64", "list_parameters_paging",
    "round_timeout",     "memory_kinds",     "worker_needs_init",
    "admission_classes", "lora_adapters",
};
#define NCAPS (sizeof(capabilities) / sizeof(capabilities[0]))

static wt_param_store *store0(wt_server *srv) {
  return wt_worker_store(srv->workers[0]);
}

/* --- GetServerInfo, GetWorldSize, ListParameters ------------------------- */

/* What a backend's engine table says it can do; a lazy module that is not
 * loaded stays unloaded (asking for its table would dlopen it). */
static void backend_info(wt_server *srv, const wt_registry_entry *e,
                         Wt__V1__BackendInfo *bi, const char **kinds,
                         size_t *nkinds, char *reason, size_t reason_size) {
  wt__v1__backend_info__init(bi);
  bi->name = (char *)e->name;
  bi->loaded = e->loaded;
  bi->memory_kinds = (char **)kinds;
  *nkinds = 0;
  if (!e->loaded) return;
  const wt_engine_ops *ops = NULL;
  wt_status *st = wt_engine_lookup(srv->config.engines, e->name, &ops);
  if (st != NULL) {
    wt_status_free(st);
    bi->loaded = false;
    return;
  }
  uint32_t takes = ops->memory_kinds ? ops->memory_kinds : WT_MEM_HOST_KINDS;
  for (unsigned k = 0; k < WT_MEM_KIND_COUNT; k++)
    if (takes & WT_MEM_BIT(k))
      kinds[(*nkinds)++] = wt_mem_kind_name((wt_mem_kind)k);
  bi->n_memory_kinds = *nkinds;
  bi->cross_host = (ops->caps & WT_ENGINE_CROSS_HOST) != 0;
  bi->survives_abort = (ops->caps & WT_ENGINE_SURVIVES_ABORT) != 0;
  /* Available: the host has what it needs, and the stores suit it. */
  wt_mem_kind store = wt_param_store_memory(store0(srv));
  st = ops->probe ? ops->probe() : NULL;
  if (st == NULL && (takes & WT_MEM_BIT(store)) && ops->probe_memory)
    st = ops->probe_memory(store);
  if (st == NULL && !(takes & WT_MEM_BIT(store)))
    st = wt_status_new(WT_FAILED_PRECONDITION,
                       "it cannot receive into '%s' memory (this server's "
                       "param stores)",
                       wt_mem_kind_name(store));
  bi->available = st == NULL;
  if (st != NULL) {
    snprintf(reason, reason_size, "%s", wt_status_message(st));
    bi->unavailable_reason = reason;
    wt_status_free(st);
  } else {
    bi->unavailable_reason = (char *)"";
  }
}

static wt_status *get_server_info(wt_rpc_call *call,
                                  const ProtobufCMessage *request, void *user) {
  wt_server *srv = user;
  wt_status *st = NULL;
  wt_registry_entry *entries = NULL;
  size_t nentries = 0;
  char **backends = NULL;
  Wt__V1__BackendInfo *bi = NULL;
  Wt__V1__BackendInfo **bp = NULL;
  const char *(*kinds)[WT_MEM_KIND_COUNT] = NULL;
  char(*reasons)[256] = NULL;
  Wt__V1__AdapterInfo **adapters = NULL;
  size_t nadapters = 0;
  uint32_t n = srv->nworkers;
  Wt__V1__WorkerInfo *wi = calloc(n, sizeof(*wi));
  Wt__V1__WorkerInfo **wp = calloc(n, sizeof(*wp));
  wt_worker_status *ws = calloc(n, sizeof(*ws));
  if (wi == NULL || wp == NULL || ws == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "GetServerInfo: out of memory");
  WT_CHECK(wt_registry_names(srv->config.engines, &entries, &nentries));
  size_t cnt = nentries ? nentries : 1;
  backends = calloc(cnt, sizeof(*backends));
  bi = calloc(cnt, sizeof(*bi));
  bp = calloc(cnt, sizeof(*bp));
  kinds = calloc(cnt, sizeof(*kinds));
  reasons = calloc(cnt, sizeof(*reasons));
  if (backends == NULL || bi == NULL || bp == NULL || kinds == NULL ||
      reasons == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "GetServerInfo: out of memory");
  for (size_t i = 0; i < nentries; i++) {
    size_t nk = 0;
    backends[i] = (char *)entries[i].name;
    backend_info(srv, &entries[i], &bi[i], kinds[i], &nk, reasons[i],
                 sizeof(reasons[i]));
    bp[i] = &bi[i];
  }

  Wt__V1__ServerInfo info = WT__V1__SERVER_INFO__INIT;
  Wt__V1__ModelSummary model = WT__V1__MODEL_SUMMARY__INIT;
  const wt_param_store *s0 = store0(srv);
  model.name = srv->config.model_name;
  model.num_parameters = wt_param_store_count(s0);
  model.total_bytes = wt_param_store_total_bytes(s0);
  info.server_version = (char *)WT_SERVER_VERSION;
  info.n_backends = nentries;
  info.backends = backends;
  info.n_backend_info = nentries;
  info.backend_info = bp;
  info.model = &model;
  info.n_capabilities = NCAPS;
  info.capabilities = (char **)capabilities;
  info.staging = (char *)wt_staging_name(srv->config.staging);
  info.world_size = n;
  info.store_complete = true;
  for (uint32_t i = 0; i < n; i++) {
    const wt_worker *w = srv->workers[i];
    const wt_param_store *ps = wt_worker_store(w);
    wt_worker_get_status(w, &ws[i]);
    wt__v1__worker_info__init(&wi[i]);
    wi[i].rank = wt_worker_rank(w);
    wi[i].device = (char *)wt_worker_device_name(w);
    wi[i].backend = ws[i].backend;
    wi[i].state = (char *)wt_worker_state_name(ws[i].state);
    wi[i].reason = ws[i].reason;
    wi[i].memory_kind = (char *)wt_mem_kind_name(wt_param_store_memory(ps));
    wi[i].bytes_held = wt_param_store_bytes_held(ps);
    wi[i].store_complete = wt_param_store_complete(ps);
    wi[i].bytes_received = ws[i].bytes_received;
    wi[i].bytes_forwarded = ws[i].bytes_forwarded;
    if (!wi[i].store_complete) info.store_complete = false;
    wp[i] = &wi[i];
  }
  info.n_workers = n;
  info.workers = wp;
  /* The adapter sets, before the round's lock (their locks come first). */
  WT_CHECK(wt_srv_adapters_info(srv, &adapters, &nadapters));
  info.n_adapters = nadapters;
  info.adapters = adapters;
  /* The export's leases: who holds what, for an operator to see. */
  wt_lease_info held[64];
  Wt__V1__LeaseInfo li[64];
  Wt__V1__LeaseInfo *lp[64];
  if (srv->ex.leases != NULL) {
    size_t total = wt_leases_list(srv->ex.leases, held, 64);
    size_t shown = total < 64 ? total : 64;
    for (size_t i = 0; i < shown; i++) {
      wt__v1__lease_info__init(&li[i]);
      li[i].pid = (uint32_t)held[i].pid;
      li[i].uid = held[i].uid;
      li[i].version = held[i].version;
      li[i].sequence = held[i].sequence;
      li[i].since_unix_ms = held[i].since_unix_ms;
      lp[i] = &li[i];
    }
    info.n_leases = shown;
    info.leases = lp;
    info.lease_count = (uint32_t)total;
    info.export_path = srv->ex.path;
  }
  /* The admission classes now, for monitors. */
  Wt__V1__AdmissionInfo ai[WT_NCLASSES];
  Wt__V1__AdmissionInfo *ap[WT_NCLASSES];
  for (size_t c = 0; c < WT_NCLASSES; c++) {
    wt_rpc_class_load l;
    wt_rpc_server_class_load(srv->rpc, c, &l);
    wt__v1__admission_info__init(&ai[c]);
    ai[c].name = (char *)srv->classes[c].name;
    ai[c].running = (uint32_t)l.running;
    ai[c].queued = (uint32_t)l.queued;
    ai[c].refused = l.refused;
    ap[c] = &ai[c];
  }
  info.n_admission = WT_NCLASSES;
  info.admission = ap;
  Wt__V1__RoundRecord rr[WT_RECENT_ROUNDS];
  Wt__V1__RoundRecord *rp[WT_RECENT_ROUNDS];
  wt_mutex_lock(&srv->round.mu);
  /* The open round and the last ones (never their ids). */
  if (srv->round.round_id != 0) {
    info.round_started_unix_ms = srv->metrics.rounds.started_unix_ms;
    for (uint32_t i = 0; i < n; i++)
      wi[i].round_bytes_received =
          wt_srv_round_bytes_locked(srv, i, ws[i].bytes_received);
  }
  uint64_t ended = srv->metrics.rounds.ended;
  size_t nrec = ended < WT_RECENT_ROUNDS ? (size_t)ended : WT_RECENT_ROUNDS;
  for (size_t k = 0; k < nrec; k++) {
    const wt_srv_round_record *r =
        &srv->metrics.rounds.recent[(ended - 1 - k) % WT_RECENT_ROUNDS];
    wt__v1__round_record__init(&rr[k]);
    rr[k].outcome = (char *)(r->committed ? "committed" : "failed");
    rr[k].cause = (char *)(r->committed ? "" : wt_srv_cause_name(r->cause));
    rr[k].version = r->version ? r->version : (char *)"";
    rr[k].sequence = r->sequence;
    rr[k].started_unix_ms = r->started_unix_ms;
    rr[k].ended_unix_ms = r->ended_unix_ms;
    rr[k].bytes_received = r->bytes;
    rp[k] = &rr[k];
  }
  info.n_recent_rounds = nrec;
  info.recent_rounds = rp;
  info.state = (char *)wt_srv_state_locked(srv);
  if (srv->round.plan != NULL) {
    info.plan_digest = (char *)wt_srv_plan_digest(srv->round.plan);
    wt_srv_plan_info(srv->round.plan, &info.plan_world_size, &info.plan_joined);
    wt_srv_plan_round_info(srv, &info.plan_ranks_in_round, &info.plan_parked);
  }
  info.auth = (char *)(srv->auth.mode ? srv->auth.mode : "none");
  info.weight_version =
      srv->round.sequence
          ? srv->round.history[srv->round.sequence % WT_VERSION_HISTORY].version
          : (char *)"";
  /* Packed at once: the version may change after unlock. */
  st = wt_rpc_call_respond(call, &info.base);
  wt_mutex_unlock(&srv->round.mu);
out:
  free(backends);
  free(bi);
  free(bp);
  free(kinds);
  free(reasons);
  free(entries);
  free(wi);
  free(wp);
  free(ws);
  wt_srv_adapters_info_free(adapters, nadapters);
  return st;
}

static wt_status *get_world_size(wt_rpc_call *call,
                                 const ProtobufCMessage *request, void *user) {
  wt_server *srv = user;
  Wt__V1__GetWorldSizeResponse resp = WT__V1__GET_WORLD_SIZE_RESPONSE__INIT;
  resp.world_size = srv->nworkers;
  return wt_rpc_call_respond(call, &resp.base);
}

static wt_status *list_parameters(wt_rpc_call *call,
                                  const ProtobufCMessage *request, void *user) {
  wt_server *srv = NULL;
  const Wt__V1__ListParametersRequest *req =
      (const Wt__V1__ListParametersRequest *)request;
  wt_status *st = wt_srv_route(user, req->adapter, &srv);
  if (st != NULL) return st;
  const wt_param_store *s = store0(srv);
  size_t total = wt_param_store_count(s);
  const char *prefix = req->name_prefix ? req->name_prefix : "";
  size_t plen = strlen(prefix);
  size_t page = req->page_size ? req->page_size : LIST_DEFAULT_PAGE;
  if (page > LIST_MAX_PAGE) page = LIST_MAX_PAGE;
  Wt__V1__ParameterInfo *pi = NULL;
  Wt__V1__ParameterInfo **pp = NULL;
  char next[32] = "";

  /* A token is the model index where the next page starts. */
  size_t start = 0;
  if (req->page_token && *req->page_token) {
    char *end = NULL;
    unsigned long long v = strtoull(req->page_token, &end, 10);
    if (*end != '\0' || v > total || req->page_token[0] == '-')
      WT_FAIL(WT_INVALID_ARGUMENT,
              "page_token '%.64s' is not a token this server gave",
              req->page_token);
    start = (size_t)v;
  }
  size_t matching = 0;
  for (size_t i = 0; i < total; i++)
    if (strncmp(wt_param_store_meta(s, i)->name, prefix, plen) == 0) matching++;
  pi = calloc(page, sizeof(*pi));
  pp = calloc(page, sizeof(*pp));
  if (pi == NULL || pp == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "ListParameters: out of memory");
  size_t k = 0;
  for (size_t i = start; i < total; i++) {
    const wt_tensor_meta *m = wt_param_store_meta(s, i);
    if (strncmp(m->name, prefix, plen) != 0) continue;
    if (k == page) {
      snprintf(next, sizeof(next), "%zu", i);
      break;
    }
    wt__v1__parameter_info__init(&pi[k]);
    pi[k].name = m->name;
    pi[k].dtype = (char *)wt_dtype_torch_name(m->dtype);
    pi[k].n_shape = (size_t)m->ndim;
    pi[k].shape = (int64_t *)m->shape;
    pi[k].nbytes = m->nbytes;
    pp[k] = &pi[k];
    k++;
  }
  Wt__V1__ListParametersResponse resp = WT__V1__LIST_PARAMETERS_RESPONSE__INIT;
  resp.n_parameters = k;
  resp.parameters = pp;
  resp.next_page_token = next;
  resp.total_count = matching;
  st = wt_rpc_call_respond(call, &resp.base);
out:
  free(pi);
  free(pp);
  return st;
}

/* --- the round ------------------------------------------------------------ */

static wt_status *init_engine(wt_rpc_call *call,
                              const ProtobufCMessage *request, void *user) {
  wt_server *srv = user;
  const Wt__V1__InitWeightTransferEngineRequest *req =
      (const Wt__V1__InitWeightTransferEngineRequest *)request;
  wt_status *st = NULL;
  if (req->init_info != NULL && req->init_info->adapter != NULL) {
    if (req->init_info->shard_plan != NULL)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "init_info: adapter '%s' with a shard_plan; an "
                           "adapter set's rounds come from one trainer rank",
                           req->init_info->adapter->name);
    st = wt_srv_adapter_open(user, req->init_info->adapter, &srv);
    if (st != NULL) return st;
  }
  uint32_t n = srv->nworkers;
  wt_engine_endpoint *eps = calloc(n, sizeof(*eps));
  Wt__V1__WorkerEndpoint *we = calloc(n, sizeof(*we));
  Wt__V1__WorkerEndpoint **wp = calloc(n, sizeof(*wp));
  if (eps == NULL || we == NULL || wp == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "InitWeightTransferEngine: out of memory");
  WT_CHECK(
      wt_srv_init_engine(srv, req->init_info, wt_rpc_call_peer(call), eps));
  for (uint32_t i = 0; i < n; i++) {
    wt__v1__worker_endpoint__init(&we[i]);
    we[i].rank = i;
    we[i].address = eps[i].address;
    we[i].port = eps[i].port;
    we[i].worker_address.data = eps[i].worker_address;
    we[i].worker_address.len = eps[i].worker_address_len;
    wp[i] = &we[i];
  }
  char msg[128];
  snprintf(msg, sizeof(msg), "backend '%s' ready on %u worker(s)",
           req->init_info->backend, n);
  Wt__V1__InitWeightTransferEngineResponse resp =
      WT__V1__INIT_WEIGHT_TRANSFER_ENGINE_RESPONSE__INIT;
  resp.ready = true;
  resp.message = msg;
  resp.n_endpoints = n;
  resp.endpoints = wp;
  st = wt_rpc_call_respond(call, &resp.base);
out:
  for (uint32_t i = 0; eps != NULL && i < n; i++) free(eps[i].worker_address);
  free(eps);
  free(we);
  free(wp);
  return st;
}

static wt_status *start_update(wt_rpc_call *call,
                               const ProtobufCMessage *request, void *user) {
  const Wt__V1__StartWeightUpdateRequest *req =
      (const Wt__V1__StartWeightUpdateRequest *)request;
  wt_status *st = NULL;
  wt_server *srv = NULL;
  Wt__V1__StartWeightUpdateResponse resp =
      WT__V1__START_WEIGHT_UPDATE_RESPONSE__INIT;
  WT_CHECK(wt_srv_route(user, req->adapter, &srv));
  WT_CHECK(
      wt_srv_start(srv, req->trainer_rank, req->plan_digest, &resp.round_id));
  /* The round is this caller's now: nobody commits before its finish. */
  wt_srv_committed(srv, &resp.committed_sequence, &resp.committed_digest);
  st = wt_rpc_call_respond(call, &resp.base);
out:
  return st;
}

/* On the polling thread when an UpdateWeights call is cancelled: only
 * signals (every worker's blocked engine call returns). */
static void cancel_receives(void *arg) {
  wt_server *srv = arg;
  for (uint32_t i = 0; i < srv->nworkers; i++)
    if (srv->workers[i] != NULL) wt_worker_cancel(srv->workers[i]);
}

static wt_status *update_weights(wt_rpc_call *call,
                                 const ProtobufCMessage *request, void *user) {
  const Wt__V1__UpdateWeightsRequest *req =
      (const Wt__V1__UpdateWeightsRequest *)request;
  wt_server *srv = NULL;
  wt_receive_stats stats = {0};
  wt_status *st = wt_srv_route(user, req->adapter, &srv);
  if (st != NULL) return st;
  /* A trainer gone mid-receive (its call cancelled) stops the workers'
   * receives at once; wt_srv_update then ends the round. */
  wt_rpc_call_set_cancel_callback(call, cancel_receives, srv);
  st = wt_srv_update(srv, call, req->round_id, req->trainer_rank,
                     req->update_info, &stats);
  /* Parked for the other ranks: the call is its owner's now (the layer
   * clears the callback when it ends). */
  if (wt_rpc_is_parked(st)) return st;
  wt_rpc_call_set_cancel_callback(call, NULL, NULL);
  if (st != NULL) goto out;
  Wt__V1__UpdateWeightsResponse resp = WT__V1__UPDATE_WEIGHTS_RESPONSE__INIT;
  resp.tensors_received = stats.tensors;
  resp.bytes_received = stats.bytes;
  st = wt_rpc_call_respond(call, &resp.base);
out:
  return st;
}

static wt_status *finish_update(wt_rpc_call *call,
                                const ProtobufCMessage *request, void *user) {
  const Wt__V1__FinishWeightUpdateRequest *req =
      (const Wt__V1__FinishWeightUpdateRequest *)request;
  wt_server *srv = NULL;
  wt_status *st = wt_srv_route(user, req->adapter, &srv);
  if (st != NULL) return st;
  WT_CHECK(wt_srv_finish(srv, call, req->round_id, req->trainer_rank,
                         req->weight_version));
  Wt__V1__FinishWeightUpdateResponse resp =
      WT__V1__FINISH_WEIGHT_UPDATE_RESPONSE__INIT;
  resp.weight_version = req->weight_version;
  st = wt_rpc_call_respond(call, &resp.base);
out:
  return st;
}

static wt_status *abort_update(wt_rpc_call *call,
                               const ProtobufCMessage *request, void *user) {
  const Wt__V1__AbortWeightUpdateRequest *req =
      (const Wt__V1__AbortWeightUpdateRequest *)request;
  wt_server *srv = NULL;
  bool aborted = false;
  wt_status *st = wt_srv_route(user, req->adapter, &srv);
  if (st != NULL) return st;
  WT_CHECK(wt_srv_abort(srv, req->round_id, req->reason, &aborted));
  Wt__V1__AbortWeightUpdateResponse resp =
      WT__V1__ABORT_WEIGHT_UPDATE_RESPONSE__INIT;
  resp.aborted = aborted;
  st = wt_rpc_call_respond(call, &resp.base);
out:
  return st;
}

/* --- PushWeights ---------------------------------------------------------- */

static void release_bb(void *bb) {
  grpc_byte_buffer_destroy(bb);
}

static void release_msg(void *msg) {
  wt__v1__push_weights_chunk__free_unpacked(msg, NULL);
}

/* How long the stream may stay silent before its next message: the header
 * must come promptly; between data messages the round's data deadline. */
static int64_t read_timeout(wt_server *srv, bool pushing) {
  if (!pushing) return srv->config.header_timeout_ms;
  wt_mutex_lock(&srv->round.mu);
  int64_t t = srv->round.data_timeout_ms ? srv->round.data_timeout_ms
                                         : srv->config.data_timeout_ms;
  wt_mutex_unlock(&srv->round.mu);
  return t;
}

/* A PushWeights stream being read. Its header, once read, stays here
 * while the push waits for its turn parked (a shard plan's rank). */
typedef struct push_stream {
  void *user; /* the server's */
  uint64_t nmsg;
  Wt__V1__PushWeightsChunk *header; /* the header message, while parked */
} push_stream;

static void push_stream_free(void *arg) {
  push_stream *ps = arg;
  if (ps->header != NULL)
    wt__v1__push_weights_chunk__free_unpacked(ps->header, NULL);
  free(ps);
}

static wt_status *push_resume(wt_rpc_call *call, void *arg, void *user);

/* Begins the push of `ps`'s header; wt_rpc_call_park's status when it
 * waits for its turn (then the call and ps are no longer this thread's). */
static wt_status *push_begin(wt_rpc_call *call, push_stream *ps,
                             wt_server **srv, wt_srv_push **push) {
  const Wt__V1__PushWeightsHeader *h = ps->header->header;
  /* From here on the push and its deadlines are the named set's. */
  wt_status *st = wt_srv_route(ps->user, h->adapter, srv);
  if (st != NULL) return st;
  wt_srv_plan_waiter resume = {
      .resume = push_resume, .arg = ps, .free_arg = push_stream_free};
  st = wt_srv_push_begin(*srv, call, h->round_id, h->trainer_rank,
                         h->update_info, h->packed_buffer_size_bytes,
                         h->delta_base, &resume, push);
  if (wt_rpc_is_parked(st)) return st;
  wt__v1__push_weights_chunk__free_unpacked(ps->header, NULL);
  ps->header = NULL;
  return st;
}

/* Reads the stream of `ps` to its end (a header first when none came),
 * then ends the push; frees ps unless the call parked. */
static wt_status *push_run(wt_rpc_call *call, push_stream *ps) {
  wt_server *srv = ps->user;
  wt_status *st = NULL;
  wt_srv_push *push = NULL;
  grpc_byte_buffer *bb = NULL;
  Wt__V1__PushWeightsChunk *msg = NULL;
  wt_chunk_view view;
  if (ps->header != NULL) { /* resumed: its turn came */
    st = push_begin(call, ps, &srv, &push);
    if (wt_rpc_is_parked(st)) return st;
    if (st != NULL) goto out;
  }
  for (;;) {
    st = wt_rpc_call_read_raw_within(
        call, read_timeout(srv, push != NULL),
        push ? "the next chunk" : "the PushWeights header", &bb);
    if (st != NULL) goto out; /* silent, gone, or the call ended */
    if (bb == NULL) break;    /* half-closed */
    ps->nmsg++;
    if (push != NULL && wt_chunk_view_of(bb, &view)) {
      /* The data path: the bytes stay where gRPC received them. */
      grpc_byte_buffer *owned = bb;
      bb = NULL;
      WT_CHECK(wt_srv_push_chunk(push, view.bucket, view.offset, view.iov,
                                 view.iovcnt, release_bb, owned));
      continue;
    }
    grpc_slice slice = grpc_empty_slice();
    st = wt_pb_flatten(bb, &slice);
    grpc_byte_buffer_destroy(bb);
    bb = NULL;
    if (st != NULL) goto out;
    msg = wt__v1__push_weights_chunk__unpack(NULL, GRPC_SLICE_LENGTH(slice),
                                             GRPC_SLICE_START_PTR(slice));
    size_t len = GRPC_SLICE_LENGTH(slice);
    grpc_slice_unref(slice);
    if (msg == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "PushWeights message %" PRIu64
              ": malformed wt.v1.PushWeightsChunk (%zu bytes)",
              ps->nmsg, len);
    if ((st = wt_pb_check_utf8(&msg->base)) != NULL) {
      st = wt_status_prefix(st, "PushWeights message %" PRIu64, ps->nmsg);
      goto out;
    }
    if (msg->payload_case == WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_HEADER) {
      if (push != NULL)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "PushWeights message %" PRIu64
                ": a second header; one PushWeights call carries one header",
                ps->nmsg);
      /* Kept in ps before the push may park: a resume on another thread
       * reads it from there. */
      ps->header = msg;
      msg = NULL;
      st = push_begin(call, ps, &srv, &push);
      if (wt_rpc_is_parked(st)) return st;
      if (st != NULL) goto out;
      continue;
    } else if (msg->payload_case == WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_CHUNK) {
      const Wt__V1__BucketChunk *c = msg->chunk;
      if (push == NULL)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "PushWeights message %" PRIu64 " is a chunk (bucket %" PRIu32
                " offset %" PRIu64 "); the first message must be a header",
                ps->nmsg, c->bucket, c->offset);
      struct iovec iov = {c->data.data, c->data.len};
      Wt__V1__PushWeightsChunk *owned = msg;
      msg = NULL;
      WT_CHECK(wt_srv_push_chunk(push, c->bucket, c->offset, &iov, 1,
                                 release_msg, owned));
      continue;
    } else if (msg->payload_case == WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_DELTA) {
      const Wt__V1__DeltaChunk *c = msg->delta;
      if (push == NULL)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "PushWeights message %" PRIu64
                " is a delta chunk (bucket %" PRIu32 " offset %" PRIu64
                "); the first message must be a "
                "header",
                ps->nmsg, c->bucket, c->offset);
      Wt__V1__PushWeightsChunk *owned = msg;
      msg = NULL;
      WT_CHECK(wt_srv_push_delta(push, c->bucket, c->offset, c->raw_length,
                                 c->base_digest, c->data.data, c->data.len,
                                 release_msg, owned));
      continue;
    } else {
      WT_FAIL(WT_INVALID_ARGUMENT,
              "PushWeights message %" PRIu64
              " has neither a header nor a chunk",
              ps->nmsg);
    }
  }
  if (push == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "PushWeights: the stream ended before its header");
  wt_receive_stats stats = {0};
  wt_srv_push *p = push;
  push = NULL;
  WT_CHECK(wt_srv_push_end(p, NULL, &stats));
  Wt__V1__PushWeightsResponse resp = WT__V1__PUSH_WEIGHTS_RESPONSE__INIT;
  resp.tensors_received = stats.tensors;
  resp.bytes_received = stats.bytes;
  st = wt_rpc_call_respond(call, &resp.base);
out:
  if (msg != NULL) wt__v1__push_weights_chunk__free_unpacked(msg, NULL);
  if (bb != NULL) grpc_byte_buffer_destroy(bb);
  /* A stream that broke, or a bad message: the push is over and its round
   * failed with it (nothing it sent is committed). */
  if (push != NULL) {
    wt_status *end = wt_srv_push_end(push, st, NULL);
    if (st == NULL) {
      st = end;
    } else {
      wt_status_free(end);
    }
  }
  if (st != NULL && ps->nmsg > 0)
    WT_LOGW("server", "PushWeights from %s: %s", wt_rpc_call_peer(call),
            wt_status_message(st));
  push_stream_free(ps);
  return st;
}

static wt_status *push_resume(wt_rpc_call *call, void *arg, void *user) {
  (void)user;
  return push_run(call, arg);
}

static wt_status *push_weights(wt_rpc_call *call,
                               const ProtobufCMessage *request, void *user) {
  (void)request;
  push_stream *ps = calloc(1, sizeof(*ps));
  if (ps == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "PushWeights: out of memory");
  ps->user = user;
  return push_run(call, ps);
}

/* --- versions ------------------------------------------------------------- */

static wt_status *get_weight_version(wt_rpc_call *call,
                                     const ProtobufCMessage *request,
                                     void *user) {
  wt_server *srv = NULL;
  const Wt__V1__GetWeightVersionRequest *req =
      (const Wt__V1__GetWeightVersionRequest *)request;
  wt_status *rst = wt_srv_route(user, req->adapter, &srv);
  if (rst != NULL) return rst;
  Wt__V1__WeightVersion v = WT__V1__WEIGHT_VERSION__INIT;
  wt_mutex_lock(&srv->round.mu);
  if (srv->round.sequence > 0) {
    const wt_version_entry *e =
        &srv->round.history[srv->round.sequence % WT_VERSION_HISTORY];
    v.version = e->version;
    v.sequence = e->sequence;
    v.committed_unix_ms = e->committed_unix_ms;
  }
  wt_status *st = wt_rpc_call_respond(call, &v.base);
  wt_mutex_unlock(&srv->round.mu);
  return st;
}

/* WatchWeightVersion: a stream on the server the request names (watch.c
 * sends it the versions). */
static wt_status *watch_weight_version(wt_rpc_stream *s,
                                       const ProtobufCMessage *request,
                                       void *user) {
  wt_server *srv = NULL;
  const Wt__V1__WatchWeightVersionRequest *req =
      (const Wt__V1__WatchWeightVersionRequest *)request;
  wt_status *st = wt_srv_route(user, req->adapter, &srv);
  if (st != NULL) return st;
  return wt_srv_watch_open(srv, s);
}

/* --- ChecksumWeights ------------------------------------------------------ */

static bool stopping(wt_server *srv) {
  wt_mutex_lock(&srv->round.mu);
  bool stop = srv->round.stopping;
  wt_mutex_unlock(&srv->round.mu);
  return stop;
}

static wt_status *version_changed(size_t done, size_t total) {
  return wt_status_new(WT_ABORTED,
                       "ChecksumWeights: version changed; retry (a commit "
                       "landed after %zu of %zu digests)",
                       done, total);
}

/* The fewest names ChecksumWeights accepts however small the model. */
#define WT_CHECKSUM_MIN_NAME_CAP 1024

/* A part of a tensor hashed under one hold of the read lock. */
#define CHECKSUM_PART (1u << 20)

/* One part's hashing, on a low-priority thread (hash_pool.c). */
typedef struct hash_part_job {
  wt_param_store *s;
  size_t i;
  uint64_t off;
  size_t len;
  wt_hasher *h;
  wt_status *st;
} hash_part_job;

static void hash_part_run(void *arg) {
  hash_part_job *j = arg;
  j->st = wt_param_store_hash_part(j->s, j->i, j->off, j->len, j->h);
}

/* A reader's part, copied out of the store: hashed without its lock. */
typedef struct hash_copy_job {
  const uint8_t *buf;
  size_t len;
  wt_hasher *h;
} hash_copy_job;

static void hash_copy_run(void *arg) {
  hash_copy_job *j = arg;
  wt_hasher_update(j->h, j->buf, j->len);
}

typedef struct halt_arg {
  wt_server *srv;
  wt_rpc_call *call;
} halt_arg;

static bool halted(void *arg) {
  halt_arg *a = arg;
  return wt_rpc_call_cancelled(a->call) || stopping(a->srv);
}

static wt_status *checksum_weights(wt_rpc_call *call,
                                   const ProtobufCMessage *request,
                                   void *user) {
  wt_server *srv = NULL;
  wt_reader_budget *budget = NULL;
  wt_hasher *h = NULL;
  const Wt__V1__ChecksumWeightsRequest *req =
      (const Wt__V1__ChecksumWeightsRequest *)request;
  wt_status *st = wt_srv_route(user, req->adapter, &srv);
  if (st != NULL) return st;
  bool trainer = wt_rpc_call_trainer(call);
  wt_param_store *s0 = store0(srv);
  uint8_t *copy = NULL; /* a reader's part, out of a host store */
  size_t *idx = NULL;
  unsigned char *seen = NULL;
  uint64_t *commits = NULL;
  char(*hex)[WT_DIGEST_HEX_MAX] = NULL;
  Wt__V1__ParameterChecksum *pc = NULL;
  Wt__V1__ParameterChecksum **pp = NULL;
  if (req->algorithm != WT__V1__CHECKSUM_ALGORITHM__CHECKSUM_ALGORITHM_SHA256 &&
      req->algorithm != WT__V1__CHECKSUM_ALGORITHM__CHECKSUM_ALGORITHM_XXH3_64)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "algorithm %d is neither CHECKSUM_ALGORITHM_SHA256 (0) nor "
            "CHECKSUM_ALGORITHM_XXH3_64 (1)",
            (int)req->algorithm);
  wt_hash_alg alg = (wt_hash_alg)req->algorithm;
  size_t count = wt_param_store_count(s0);
  /* Limits first, before a name is looked up or a byte hashed: a request
   * can have no use for more names than twice the model's tensors. */
  size_t max_names = 2 * count > WT_CHECKSUM_MIN_NAME_CAP
                         ? 2 * count
                         : WT_CHECKSUM_MIN_NAME_CAP;
  if (req->n_names > max_names)
    WT_FAIL(WT_RESOURCE_EXHAUSTED,
            "ChecksumWeights: %zu names; at most %zu (twice the model's %zu "
            "tensors, at least %d)",
            req->n_names, max_names, count, WT_CHECKSUM_MIN_NAME_CAP);
  uint32_t nw = req->all_workers ? srv->nworkers : 1;
  idx = calloc(count ? count : 1, sizeof(*idx));
  seen = calloc(count ? count : 1, 1);
  if (idx == NULL || seen == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "ChecksumWeights: out of memory");
  /* Each tensor once, in the order first asked for. */
  size_t n = 0;
  for (size_t k = 0; k < (req->n_names ? req->n_names : count); k++) {
    size_t i = k;
    if (req->n_names) WT_CHECK(wt_param_store_find(s0, req->names[k], &i));
    if (seen[i]) continue;
    seen[i] = 1;
    idx[n++] = i;
  }
  size_t total = n * nw;
  /* What the reply will weigh (a name, a digest and a worker per entry, with
   * protobuf's framing): refused now rather than built and then not sent. */
  uint64_t reply = 16;
  for (size_t k = 0; k < n; k++)
    reply += (strlen(wt_param_store_meta(s0, idx[k])->name) +
              WT_DIGEST_HEX_MAX + 24) *
             (uint64_t)nw;
  if (reply > srv->config.max_send_bytes)
    WT_FAIL(WT_RESOURCE_EXHAUSTED,
            "ChecksumWeights: the reply for %zu digests would be about %" PRIu64
            " bytes, above the largest reply the server sends (%" PRIu64
            " bytes); ask for fewer names%s",
            total, reply, srv->config.max_send_bytes,
            req->all_workers ? " or without all_workers" : "");
  hex = calloc(total ? total : 1, sizeof(*hex));
  pc = calloc(total ? total : 1, sizeof(*pc));
  pp = calloc(total ? total : 1, sizeof(*pp));
  commits = calloc(nw, sizeof(*commits));
  if (hex == NULL || pc == NULL || pp == NULL || commits == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "ChecksumWeights: out of memory");
  /* Every digest of the reply describes one version: each worker's store's
   * commit count is noted under the read lock of its first part, checked
   * under the lock of every later one, and the earlier workers' counts are
   * checked once more under the last worker's first lock (a commit between
   * two workers' passes). A commit landing during the pass makes the call
   * fail with ABORTED rather than mix two versions (one before it is
   * simply not seen, nor one after its last part). */
  /* Each tensor is hashed in parts of CHECKSUM_PART bytes, the read lock
   * held per part: a commit waits for one part, and the reader's thread
   * (niced below rounds') never holds the lock through a large tensor.
   * Every part is paid for from the peer's budget (reader_budget.c). */
  char key[80];
  wt_rpc_call_peer_key(call, key, sizeof(key));
  /* Readers pay from the model server's budgets for every set they read. */
  wt_server *bsrv = srv->base ? srv->base : srv;
  budget = wt_srv_budget_take(bsrv, key);
  WT_CHECK(wt_hasher_new(alg, &h));
  if (!trainer && (copy = malloc(CHECKSUM_PART)) == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "ChecksumWeights: out of memory");
  halt_arg ha = {srv, call};
  for (uint32_t w = 0; w < nw; w++) {
    wt_param_store *s = wt_worker_store(srv->workers[w]);
    for (size_t k = 0; k < n && st == NULL; k++) {
      uint64_t size = wt_param_store_meta(s, idx[k])->nbytes;
      wt_hasher_reset(h);
      uint64_t off = 0;
      do {
        /* A pass over a large model takes a while: a client that left, or
         * a server stopping, ends it between parts. */
        if (halted(&ha)) {
          st = wt_status_new(WT_CANCELLED,
                             "ChecksumWeights: stopped after %zu of %zu "
                             "digests: the client left or the server is "
                             "stopping",
                             (size_t)w * n + k, total);
          break;
        }
        size_t part =
            size - off < CHECKSUM_PART ? (size_t)(size - off) : CHECKSUM_PART;
        wt_param_store_read_lock(s);
        if (k == 0 && off == 0) commits[w] = wt_param_store_commits(s);
        bool same = wt_param_store_commits(s) == commits[w];
        /* At the last worker's first part, under its lock (a commit takes
         * every worker's write lock): no commit landed since the earlier
         * workers' passes. One after the last part does not matter: what
         * was hashed was whole. */
        for (uint32_t e = 0; same && w == nw - 1 && k == 0 && off == 0 && e < w;
             e++)
          same = wt_param_store_commits(wt_worker_store(srv->workers[e])) ==
                 commits[e];
        hash_part_job job = {s, idx[k], off, part, h, NULL};
        /* A trainer's own check (wt-push --verify) hashes on its thread, at
         * the trainer's priority: readers' niced threads may get a few
         * percent of a loaded host, and a trainer waits on no reader. */
        if (same && trainer) hash_part_run(&job);
        bool copied = false;
        if (same && !trainer &&
            wt_mem_kind_host_addressable(wt_param_store_memory(s))) {
          /* A reader's part of a host store: copied under the lock at this
           * thread's priority, hashed after it at the pool's. A niced
           * thread never holds the lock: on a loaded host it could wait
           * seconds for a CPU while a commit waits for it. */
          memcpy(copy, (const uint8_t *)wt_param_store_live(s, idx[k]) + off,
                 part);
          copied = true;
        } else if (same && !trainer) {
          wt_hash_pool_run(srv->readers.hashers, hash_part_run, &job);
        }
        if (same && !copied) st = job.st;
        wt_param_store_read_unlock(s);
        if (copied) {
          hash_copy_job cj = {copy, part, h};
          wt_hash_pool_run(srv->readers.hashers, hash_copy_run, &cj);
        }
        if (!same) st = version_changed((size_t)w * n + k, total);
        off += part;
        /* Halted while it waits: the next part's check says so. */
        if (st == NULL && part > 0)
          wt_srv_budget_spend(bsrv, budget, part, halted, &ha);
      } while (st == NULL && off < size);
      if (st == NULL) wt_hasher_final_hex(h, hex[w * n + k]);
    }
    if (st != NULL) goto out;
    for (size_t k = 0; k < n; k++) {
      Wt__V1__ParameterChecksum *c = &pc[w * n + k];
      wt__v1__parameter_checksum__init(c);
      c->name = wt_param_store_meta(s, idx[k])->name;
      c->digest = hex[w * n + k];
      c->worker = w;
      pp[w * n + k] = c;
    }
  }

  Wt__V1__ChecksumWeightsResponse resp =
      WT__V1__CHECKSUM_WEIGHTS_RESPONSE__INIT;
  resp.algorithm = req->algorithm;
  resp.n_checksums = total;
  resp.checksums = pp;
  st = wt_rpc_call_respond(call, &resp.base);
out:
  free(copy);
  wt_hasher_free(h);
  if (budget != NULL)
    wt_srv_budget_release(srv->base ? srv->base : srv, budget);
  free(idx);
  free(seen);
  free(commits);
  free(hex);
  free(pc);
  free(pp);
  return st;
}

/* --- the table ------------------------------------------------------------ */

#define ROUND WT_CLASS_ROUND
#define READER WT_CLASS_READER

static const wt_rpc_method methods[] = {
    {METHOD("GetServerInfo"), WT_RPC_UNARY,
     &wt__v1__get_server_info_request__descriptor,
     &wt__v1__server_info__descriptor, get_server_info, READER, NULL, NULL,
     WT_SCOPE_READER},
    {METHOD("GetWorldSize"), WT_RPC_UNARY,
     &wt__v1__get_world_size_request__descriptor,
     &wt__v1__get_world_size_response__descriptor, get_world_size, READER, NULL,
     NULL, WT_SCOPE_READER},
    {METHOD("ListParameters"), WT_RPC_UNARY,
     &wt__v1__list_parameters_request__descriptor,
     &wt__v1__list_parameters_response__descriptor, list_parameters, READER,
     NULL, NULL, WT_SCOPE_READER},
    {METHOD("InitWeightTransferEngine"), WT_RPC_UNARY,
     &wt__v1__init_weight_transfer_engine_request__descriptor,
     &wt__v1__init_weight_transfer_engine_response__descriptor, init_engine,
     ROUND, NULL, NULL, WT_SCOPE_TRAINER},
    {METHOD("StartWeightUpdate"), WT_RPC_UNARY,
     &wt__v1__start_weight_update_request__descriptor,
     &wt__v1__start_weight_update_response__descriptor, start_update, ROUND,
     NULL, NULL, WT_SCOPE_TRAINER},
    {METHOD("UpdateWeights"), WT_RPC_UNARY,
     &wt__v1__update_weights_request__descriptor,
     &wt__v1__update_weights_response__descriptor, update_weights, ROUND, NULL,
     NULL, WT_SCOPE_TRAINER},
    {METHOD("PushWeights"), WT_RPC_CLIENT_STREAM,
     &wt__v1__push_weights_chunk__descriptor,
     &wt__v1__push_weights_response__descriptor, push_weights, ROUND, NULL,
     NULL, WT_SCOPE_TRAINER},
    {METHOD("FinishWeightUpdate"), WT_RPC_UNARY,
     &wt__v1__finish_weight_update_request__descriptor,
     &wt__v1__finish_weight_update_response__descriptor, finish_update, ROUND,
     NULL, NULL, WT_SCOPE_TRAINER},
    {METHOD("AbortWeightUpdate"), WT_RPC_UNARY,
     &wt__v1__abort_weight_update_request__descriptor,
     &wt__v1__abort_weight_update_response__descriptor, abort_update, ROUND,
     NULL, NULL, WT_SCOPE_TRAINER},
    {METHOD("GetWeightVersion"), WT_RPC_UNARY,
     &wt__v1__get_weight_version_request__descriptor,
     &wt__v1__weight_version__descriptor, get_weight_version, READER, NULL,
     NULL, WT_SCOPE_READER},
    {METHOD("WatchWeightVersion"), WT_RPC_WATCH,
     &wt__v1__watch_weight_version_request__descriptor,
     &wt__v1__weight_version__descriptor, NULL, WT_CLASS_WATCH,
     watch_weight_version, wt_srv_watch_closed, WT_SCOPE_READER},
    {METHOD("ChecksumWeights"), WT_RPC_UNARY,
     &wt__v1__checksum_weights_request__descriptor,
     &wt__v1__checksum_weights_response__descriptor, checksum_weights, READER,
     NULL, NULL, WT_SCOPE_READER},
    /* The standard health service (health.c): no token, its own class. */
    {"/grpc.health.v1.Health/Check", WT_RPC_UNARY,
     &grpc__health__v1__health_check_request__descriptor,
     &grpc__health__v1__health_check_response__descriptor, wt_srv_health_check,
     WT_CLASS_HEALTH, NULL, NULL, WT_SCOPE_PUBLIC},
    {"/grpc.health.v1.Health/Watch", WT_RPC_WATCH,
     &grpc__health__v1__health_check_request__descriptor,
     &grpc__health__v1__health_check_response__descriptor, NULL,
     WT_CLASS_HEALTH_WATCH, wt_srv_health_watch_open,
     wt_srv_health_watch_closed, WT_SCOPE_PUBLIC},
    /* Server reflection (reflection.c): v1 and v1alpha are the same
     * messages, read and written with v1's descriptors. A reader's token. */
    {"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
     WT_RPC_BIDI_STREAM,
     &grpc__reflection__v1__server_reflection_request__descriptor,
     &grpc__reflection__v1__server_reflection_response__descriptor,
     wt_srv_reflection, WT_CLASS_REFLECTION, NULL, NULL, WT_SCOPE_READER},
    {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
     WT_RPC_BIDI_STREAM,
     &grpc__reflection__v1__server_reflection_request__descriptor,
     &grpc__reflection__v1__server_reflection_response__descriptor,
     wt_srv_reflection, WT_CLASS_REFLECTION, NULL, NULL, WT_SCOPE_READER},
};

const wt_rpc_method *wt_srv_methods(size_t *n) {
  *n = sizeof(methods) / sizeof(methods[0]);
  return methods;
}
