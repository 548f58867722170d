/* service.c: the handlers of wt.v1.WeightTransfer and their method table.
 *
 * Handlers run on the threads of their admission class (wt/rpc.h): round
 * calls (init, start, update, push, finish, abort) and readers (info, world
 * size, parameters, version, checksums) each have their own, so readers can
 * never take the trainer's capacity; watch streams hold no thread at all.
 * A handler that waits (a PushWeights stream between chunks, a receive)
 * delays no other call. A handler only decodes its request into plain
 * arguments (checking its fields), calls the subsystem that owns the state
 * (round.c, push.c, hash_pool.c, slot.c, ...) and encodes the result into
 * its answer; what they answer is documented in wt.proto.
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

static void encode_backend(const wt_srv_backend_info *b,
                           Wt__V1__BackendInfo *bi) {
  wt__v1__backend_info__init(bi);
  bi->name = (char *)b->name;
  bi->loaded = b->loaded;
  bi->memory_kinds = (char **)b->memory_kinds;
  if (!b->loaded) return;
  bi->n_memory_kinds = b->n_memory_kinds;
  bi->cross_host = b->cross_host;
  bi->survives_abort = b->survives_abort;
  bi->available = b->available;
  bi->unavailable_reason = (char *)b->reason;
}

static void encode_worker(const wt_srv_worker_info *w, Wt__V1__WorkerInfo *wi) {
  wt__v1__worker_info__init(wi);
  wi->rank = w->rank;
  wi->device = (char *)w->device;
  wi->backend = (char *)w->status.backend;
  wi->state = (char *)wt_worker_state_name(w->status.state);
  wi->reason = (char *)w->status.reason;
  wi->memory_kind = (char *)w->memory_kind;
  wi->bytes_held = w->bytes_held;
  wi->store_complete = w->store_complete;
  wi->bytes_received = w->status.bytes_received;
  wi->bytes_forwarded = w->status.bytes_forwarded;
}

static void encode_round_record(const wt_srv_round_record *r,
                                Wt__V1__RoundRecord *rr) {
  wt__v1__round_record__init(rr);
  rr->outcome = (char *)(r->committed ? "committed" : "failed");
  rr->cause = (char *)(r->committed ? "" : wt_srv_cause_name(r->cause));
  rr->version = r->version ? r->version : (char *)"";
  rr->sequence = r->sequence;
  rr->started_unix_ms = r->started_unix_ms;
  rr->ended_unix_ms = r->ended_unix_ms;
  rr->bytes_received = r->bytes;
}

/* The most leases GetServerInfo lists (lease_count counts them all). */
#define MAX_LEASES_SHOWN 64

static void encode_leases(const wt_lease_info *held, size_t n,
                          Wt__V1__LeaseInfo *li, Wt__V1__LeaseInfo **lp) {
  for (size_t i = 0; i < n; i++) {
    wt__v1__lease_info__init(&li[i]);
    li[i].pid = (uint32_t)held[i].pid;
    li[i].uid = held[i].uid;
    li[i].version = (char *)held[i].version;
    li[i].sequence = held[i].sequence;
    li[i].since_unix_ms = held[i].since_unix_ms;
    lp[i] = &li[i];
  }
}

static void encode_admission(const char *name, const wt_rpc_class_load *l,
                             Wt__V1__AdmissionInfo *ai) {
  wt__v1__admission_info__init(ai);
  ai->name = (char *)name;
  ai->running = (uint32_t)l->running;
  ai->queued = (uint32_t)l->queued;
  ai->refused = l->refused;
}

/* The round's part of the answer: recent_rounds (into rr and rp), state,
 * plan, weight_version. */
static void encode_round(const wt_srv_round_info *r, Wt__V1__ServerInfo *info,
                         Wt__V1__RoundRecord *rr, Wt__V1__RoundRecord **rp) {
  for (size_t k = 0; k < r->nrecent; k++) {
    encode_round_record(&r->recent[k], &rr[k]);
    rp[k] = &rr[k];
  }
  info->n_recent_rounds = r->nrecent;
  info->recent_rounds = rp;
  info->state = (char *)r->state;
  if (r->plan) {
    info->plan_digest = r->plan_digest;
    info->plan_world_size = r->plan_world_size;
    info->plan_joined = r->plan_joined;
    info->plan_ranks_in_round = r->plan_ranks_in_round;
    info->plan_parked = r->plan_parked;
  }
  info->weight_version = r->weight_version ? r->weight_version : (char *)"";
}

static wt_status *get_server_info(wt_rpc_call *call,
                                  const ProtobufCMessage *request, void *user) {
  wt_server *srv = user;
  wt_status *st = NULL;
  wt_srv_backend_info *backs = NULL;
  size_t nentries = 0;
  char **backends = NULL;
  Wt__V1__BackendInfo *bi = NULL;
  Wt__V1__BackendInfo **bp = NULL;
  Wt__V1__AdapterInfo **adapters = NULL;
  size_t nadapters = 0;
  wt_srv_round_info round;
  memset(&round, 0, sizeof(round));
  uint32_t n = srv->nworkers;
  Wt__V1__WorkerInfo *wi = calloc(n, sizeof(*wi));
  Wt__V1__WorkerInfo **wp = calloc(n, sizeof(*wp));
  wt_srv_worker_info *ws = calloc(n, sizeof(*ws));
  uint64_t *received = calloc(n, sizeof(*received));
  uint64_t *round_bytes = calloc(n, sizeof(*round_bytes));
  if (wi == NULL || wp == NULL || ws == NULL || received == NULL ||
      round_bytes == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "GetServerInfo: out of memory");
  WT_CHECK(wt_srv_backends_info(srv, &backs, &nentries));
  size_t cnt = nentries ? nentries : 1;
  backends = calloc(cnt, sizeof(*backends));
  bi = calloc(cnt, sizeof(*bi));
  bp = calloc(cnt, sizeof(*bp));
  if (backends == NULL || bi == NULL || bp == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "GetServerInfo: out of memory");
  for (size_t i = 0; i < nentries; i++) {
    backends[i] = (char *)backs[i].name;
    encode_backend(&backs[i], &bi[i]);
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
  wt_srv_workers_info(srv, ws);
  for (uint32_t i = 0; i < n; i++) {
    encode_worker(&ws[i], &wi[i]);
    received[i] = ws[i].status.bytes_received;
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
  wt_lease_info held[MAX_LEASES_SHOWN];
  Wt__V1__LeaseInfo li[MAX_LEASES_SHOWN];
  Wt__V1__LeaseInfo *lp[MAX_LEASES_SHOWN];
  if (srv->ex.leases != NULL) {
    size_t total = wt_leases_list(srv->ex.leases, held, MAX_LEASES_SHOWN);
    info.n_leases = total < MAX_LEASES_SHOWN ? total : MAX_LEASES_SHOWN;
    encode_leases(held, info.n_leases, li, lp);
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
    encode_admission(srv->classes[c].name, &l, &ai[c]);
    ap[c] = &ai[c];
  }
  info.n_admission = WT_NCLASSES;
  info.admission = ap;
  /* The round's, copied under its lock (the version may change after). */
  WT_CHECK(wt_srv_round_info_get(srv, received, round_bytes, &round));
  if (round.open) {
    info.round_started_unix_ms = round.round_started_unix_ms;
    for (uint32_t i = 0; i < n; i++)
      wi[i].round_bytes_received = round_bytes[i];
  }
  Wt__V1__RoundRecord rr[WT_RECENT_ROUNDS];
  Wt__V1__RoundRecord *rp[WT_RECENT_ROUNDS];
  encode_round(&round, &info, rr, rp);
  info.auth = (char *)(srv->auth.mode ? srv->auth.mode : "none");
  st = wt_rpc_call_respond(call, &info.base);
out:
  free(backends);
  free(bi);
  free(bp);
  free(backs);
  free(wi);
  free(wp);
  free(ws);
  free(received);
  free(round_bytes);
  wt_srv_adapters_info_free(adapters, nadapters);
  wt_srv_round_info_clear(&round);
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

/* Message `nmsg` of a PushWeights stream, not a data chunk's view: *out
 * (the caller's) unpacked from bb (destroyed here). */
static wt_status *decode_message(grpc_byte_buffer *bb, uint64_t nmsg,
                                 Wt__V1__PushWeightsChunk **out) {
  grpc_slice slice = grpc_empty_slice();
  *out = NULL;
  wt_status *st = wt_pb_flatten(bb, &slice);
  grpc_byte_buffer_destroy(bb);
  if (st != NULL) return st;
  Wt__V1__PushWeightsChunk *msg = wt__v1__push_weights_chunk__unpack(
      NULL, GRPC_SLICE_LENGTH(slice), GRPC_SLICE_START_PTR(slice));
  size_t len = GRPC_SLICE_LENGTH(slice);
  grpc_slice_unref(slice);
  if (msg == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "PushWeights message %" PRIu64
                         ": malformed wt.v1.PushWeightsChunk (%zu bytes)",
                         nmsg, len);
  if ((st = wt_pb_check_utf8(&msg->base)) != NULL) {
    wt__v1__push_weights_chunk__free_unpacked(msg, NULL);
    return wt_status_prefix(st, "PushWeights message %" PRIu64, nmsg);
  }
  *out = msg;
  return NULL;
}

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
        call, wt_srv_push_read_timeout(srv, push != NULL),
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
    st = decode_message(bb, ps->nmsg, &msg);
    bb = NULL;
    if (st != NULL) goto out;
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
  if (push != NULL) st = wt_srv_push_abandon(push, st);
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

static wt_status *checksum_weights(wt_rpc_call *call,
                                   const ProtobufCMessage *request,
                                   void *user) {
  wt_server *srv = NULL;
  const Wt__V1__ChecksumWeightsRequest *req =
      (const Wt__V1__ChecksumWeightsRequest *)request;
  wt_srv_digest *d = NULL;
  size_t total = 0;
  Wt__V1__ParameterChecksum *pc = NULL;
  Wt__V1__ParameterChecksum **pp = NULL;
  wt_status *st = wt_srv_route(user, req->adapter, &srv);
  if (st != NULL) return st;
  if (req->algorithm != WT__V1__CHECKSUM_ALGORITHM__CHECKSUM_ALGORITHM_SHA256 &&
      req->algorithm != WT__V1__CHECKSUM_ALGORITHM__CHECKSUM_ALGORITHM_XXH3_64)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "algorithm %d is neither CHECKSUM_ALGORITHM_SHA256 (0) nor "
            "CHECKSUM_ALGORITHM_XXH3_64 (1)",
            (int)req->algorithm);
  WT_CHECK(wt_srv_checksum(srv, call, (wt_hash_alg)req->algorithm, req->names,
                           req->n_names, req->all_workers, &d, &total));
  pc = calloc(total ? total : 1, sizeof(*pc));
  pp = calloc(total ? total : 1, sizeof(*pp));
  if (pc == NULL || pp == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "ChecksumWeights: out of memory");
  for (size_t i = 0; i < total; i++) {
    wt__v1__parameter_checksum__init(&pc[i]);
    pc[i].name = (char *)d[i].name;
    pc[i].digest = d[i].hex;
    pc[i].worker = d[i].worker;
    pp[i] = &pc[i];
  }
  Wt__V1__ChecksumWeightsResponse resp =
      WT__V1__CHECKSUM_WEIGHTS_RESPONSE__INIT;
  resp.algorithm = req->algorithm;
  resp.n_checksums = total;
  resp.checksums = pp;
  st = wt_rpc_call_respond(call, &resp.base);
out:
  free(d);
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
