/* service.c: the handlers of wt.v1.WeightTransfer and their method table.
 *
 * Each handler runs on a thread of its own (wt/rpc.h), so one that waits (a
 * PushWeights stream between chunks, a watch between commits, a receive)
 * never delays the others. Handlers translate protobuf to the round state
 * machine (round.c) and back; what they answer is documented in wt.proto.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "server_internal.h"
#include "wt/checksum.h"
#include "wt/log.h"
#include "wt/pb.h"

#define METHOD(name) "/wt.v1.WeightTransfer/" name

#define LIST_DEFAULT_PAGE 1000u
#define LIST_MAX_PAGE 10000u

static const char *const capabilities[] = {
    "push_weights",    "update_weights",   "watch_weight_version",
    "checksum_sha256", "checksum_xxh3_64", "list_parameters_paging",
    "round_timeout",
};
#define NCAPS (sizeof(capabilities) / sizeof(capabilities[0]))

static wt_param_store *store0(wt_server *srv) {
  return wt_worker_store(srv->workers[0]);
}

/* --- GetServerInfo, GetWorldSize, ListParameters ------------------------- */

static wt_status *get_server_info(wt_rpc_call *call,
                                  const ProtobufCMessage *request, void *user) {
  wt_server *srv = user;
  wt_status *st = NULL;
  wt_registry_entry *entries = NULL;
  size_t nentries = 0;
  char **backends = NULL;
  uint32_t n = srv->nworkers;
  Wt__V1__WorkerInfo *wi = calloc(n, sizeof(*wi));
  Wt__V1__WorkerInfo **wp = calloc(n, sizeof(*wp));
  if (wi == NULL || wp == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "GetServerInfo: out of memory");
  WT_CHECK(wt_registry_names(srv->engines, &entries, &nentries));
  backends = calloc(nentries ? nentries : 1, sizeof(*backends));
  if (backends == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "GetServerInfo: out of memory");
  for (size_t i = 0; i < nentries; i++) backends[i] = (char *)entries[i].name;

  Wt__V1__ServerInfo info = WT__V1__SERVER_INFO__INIT;
  Wt__V1__ModelSummary model = WT__V1__MODEL_SUMMARY__INIT;
  const wt_param_store *s0 = store0(srv);
  model.name = srv->model_name;
  model.num_parameters = wt_param_store_count(s0);
  model.total_bytes = wt_param_store_total_bytes(s0);
  info.server_version = (char *)WT_SERVER_VERSION;
  info.n_backends = nentries;
  info.backends = backends;
  info.model = &model;
  info.n_capabilities = NCAPS;
  info.capabilities = (char **)capabilities;
  info.staging = (char *)wt_staging_name(srv->staging);
  info.world_size = n;
  info.store_complete = true;

  pthread_mutex_lock(&srv->mu);
  /* Every worker goes through the same calls in the same order, so the
   * server's state is each worker's; read here under mu, it is never seen
   * half-way through an init running on the workers' threads. */
  const char *state = wt_srv_state_locked(srv);
  const char *backend = srv->initialized ? srv->backend : "";
  for (uint32_t i = 0; i < n; i++) {
    const wt_worker *w = srv->workers[i];
    wt__v1__worker_info__init(&wi[i]);
    wi[i].rank = wt_worker_rank(w);
    wi[i].device = (char *)wt_worker_device(w);
    wi[i].backend = (char *)backend;
    wi[i].state = (char *)state;
    wi[i].store_complete = wt_param_store_complete(wt_worker_store(w));
    if (!wi[i].store_complete) info.store_complete = false;
    wp[i] = &wi[i];
  }
  info.n_workers = n;
  info.workers = wp;
  info.weight_version =
      srv->sequence ? srv->history[srv->sequence % WT_VERSION_HISTORY].version
                    : (char *)"";
  /* Packed at once: the strings above may change after unlock. */
  st = wt_rpc_call_respond(call, &info.base);
  pthread_mutex_unlock(&srv->mu);
out:
  free(backends);
  free(entries);
  free(wi);
  free(wp);
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
  wt_server *srv = user;
  const Wt__V1__ListParametersRequest *req =
      (const Wt__V1__ListParametersRequest *)request;
  wt_status *st = NULL;
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
  uint32_t n = srv->nworkers;
  wt_engine_endpoint *eps = calloc(n, sizeof(*eps));
  Wt__V1__WorkerEndpoint *we = calloc(n, sizeof(*we));
  Wt__V1__WorkerEndpoint **wp = calloc(n, sizeof(*wp));
  if (eps == NULL || we == NULL || wp == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "InitWeightTransferEngine: out of memory");
  WT_CHECK(wt_srv_init_engine(srv, req->init_info, eps));
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
  wt_status *st = NULL;
  Wt__V1__StartWeightUpdateResponse resp =
      WT__V1__START_WEIGHT_UPDATE_RESPONSE__INIT;
  WT_CHECK(wt_srv_start(user, &resp.round_id));
  st = wt_rpc_call_respond(call, &resp.base);
out:
  return st;
}

static wt_status *update_weights(wt_rpc_call *call,
                                 const ProtobufCMessage *request, void *user) {
  const Wt__V1__UpdateWeightsRequest *req =
      (const Wt__V1__UpdateWeightsRequest *)request;
  wt_status *st = NULL;
  wt_receive_stats stats = {0};
  WT_CHECK(wt_srv_update(user, req->round_id, req->update_info, &stats));
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
  wt_status *st = NULL;
  WT_CHECK(wt_srv_finish(user, req->round_id, req->weight_version));
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
  wt_status *st = NULL;
  bool aborted = false;
  WT_CHECK(wt_srv_abort(user, req->round_id, req->reason, &aborted));
  Wt__V1__AbortWeightUpdateResponse resp =
      WT__V1__ABORT_WEIGHT_UPDATE_RESPONSE__INIT;
  resp.aborted = aborted;
  st = wt_rpc_call_respond(call, &resp.base);
out:
  return st;
}

/* --- PushWeights ---------------------------------------------------------- */

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  uint64_t x = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t b = *(*p)++;
    x |= (uint64_t)(b & 0x7f) << shift;
    if ((b & 0x80) == 0) {
      *v = x;
      return true;
    }
  }
  return false;
}

/* A data message received in more slices than this takes the copying
 * path (messages of 1 MiB arrive in about 20). */
#define MAX_PIECES 256

/* A BucketChunk as it lies in the received buffers. */
typedef struct chunk_view {
  uint32_t bucket;
  uint64_t offset;
  struct iovec iov[MAX_PIECES];
  size_t iovcnt;
} chunk_view;

/* Parses the start p[0..n) of a PushWeightsChunk message of `total` bytes
 * that is one BucketChunk (field 2) of fields bucket and offset followed by
 * data as the last field, which is how every protobuf library writes it.
 * Sets where the data bytes start in the message. */
static bool parse_chunk_prefix(const uint8_t *p, size_t n, size_t total,
                               uint32_t *bucket, uint64_t *offset,
                               size_t *data_start) {
  const uint8_t *q = p, *end = p + n;
  uint64_t tag = 0, size = 0, b = 0, off = 0;
  if (!read_varint(&q, end, &tag) || tag != ((2u << 3) | 2u)) return false;
  if (!read_varint(&q, end, &size) || size != total - (size_t)(q - p))
    return false;
  for (;;) {
    if (!read_varint(&q, end, &tag)) return false;
    switch (tag) {
      case (1u << 3) | 0u:
        if (!read_varint(&q, end, &b) || b > UINT32_MAX) return false;
        break;
      case (2u << 3) | 0u:
        if (!read_varint(&q, end, &off)) return false;
        break;
      case (3u << 3) | 2u: {
        uint64_t len = 0;
        if (!read_varint(&q, end, &len)) return false;
        size_t start = (size_t)(q - p);
        if (len != total - start) return false;
        *bucket = (uint32_t)b;
        *offset = off;
        *data_start = start;
        return true;
      }
      default:
        return false;
    }
  }
}

/* The data path: a chunk's bytes are taken where gRPC received them (no
 * joining of slices, no protobuf-c copy), so each byte is copied once, into
 * the staging buffers. Anything else (the header, an unusual encoding)
 * returns false and takes protobuf-c's path. */
static bool view_chunk(grpc_byte_buffer *bb, chunk_view *v) {
  if (bb->type != GRPC_BB_RAW || bb->data.raw.compression != GRPC_COMPRESS_NONE)
    return false;
  const grpc_slice_buffer *sb = &bb->data.raw.slice_buffer;
  if (sb->count == 0 || sb->count > MAX_PIECES) return false;
  size_t skip = 0;
  if (!parse_chunk_prefix(GRPC_SLICE_START_PTR(sb->slices[0]),
                          GRPC_SLICE_LENGTH(sb->slices[0]), sb->length,
                          &v->bucket, &v->offset, &skip))
    return false;
  v->iovcnt = 0;
  for (size_t i = 0; i < sb->count; i++) {
    size_t len = GRPC_SLICE_LENGTH(sb->slices[i]);
    if (skip >= len) {
      skip -= len;
      continue;
    }
    v->iov[v->iovcnt].iov_base = GRPC_SLICE_START_PTR(sb->slices[i]) + skip;
    v->iov[v->iovcnt].iov_len = len - skip;
    v->iovcnt++;
    skip = 0;
  }
  return true;
}

static wt_status *push_weights(wt_rpc_call *call,
                               const ProtobufCMessage *request, void *user) {
  wt_server *srv = user;
  wt_status *st = NULL;
  uint64_t push_id = 0, nmsg = 0;
  bool pushing = false;
  grpc_slice slice = grpc_empty_slice();
  grpc_byte_buffer *bb = NULL;
  Wt__V1__PushWeightsChunk *msg = NULL;
  chunk_view view;
  for (;;) {
    st = wt_rpc_call_read_raw(call, &bb);
    if (st != NULL) goto out; /* the client went away or the call ended */
    if (bb == NULL) break;    /* half-closed */
    nmsg++;
    bool is_chunk = view_chunk(bb, &view);
    if (!is_chunk) {
      WT_CHECK(wt_pb_flatten(bb, &slice));
      const uint8_t *p = GRPC_SLICE_START_PTR(slice);
      size_t n = GRPC_SLICE_LENGTH(slice);
      msg = wt__v1__push_weights_chunk__unpack(NULL, n, p);
      if (msg == NULL)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "PushWeights message %" PRIu64
                ": malformed wt.v1.PushWeightsChunk (%zu bytes)",
                nmsg, n);
      if (msg->payload_case == WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_CHUNK) {
        is_chunk = true;
        view.bucket = msg->chunk->bucket;
        view.offset = msg->chunk->offset;
        view.iov[0].iov_base = msg->chunk->data.data;
        view.iov[0].iov_len = msg->chunk->data.len;
        view.iovcnt = 1;
      } else if (msg->payload_case ==
                 WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_HEADER) {
        const Wt__V1__PushWeightsHeader *h = msg->header;
        if (pushing)
          WT_FAIL(WT_INVALID_ARGUMENT,
                  "PushWeights message %" PRIu64
                  ": a second header; one PushWeights call carries one "
                  "header",
                  nmsg);
        WT_CHECK(wt_srv_push_begin(srv, call, h->round_id, h->update_info,
                                   h->packed_buffer_size_bytes, &push_id));
        pushing = true;
      } else {
        WT_FAIL(WT_INVALID_ARGUMENT,
                "PushWeights message %" PRIu64
                " has neither a header nor a chunk",
                nmsg);
      }
    }
    if (is_chunk) {
      if (!pushing)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "PushWeights message %" PRIu64 " is a chunk (bucket %" PRIu32
                " offset %" PRIu64 "); the first message must be a header",
                nmsg, view.bucket, view.offset);
      WT_CHECK(wt_srv_push_chunk(srv, push_id, view.bucket, view.offset,
                                 view.iov, view.iovcnt));
    }
    if (msg != NULL) wt__v1__push_weights_chunk__free_unpacked(msg, NULL);
    msg = NULL;
    grpc_slice_unref(slice);
    slice = grpc_empty_slice();
    grpc_byte_buffer_destroy(bb);
    bb = NULL;
  }
  if (!pushing)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "PushWeights: the stream ended before its header");
  wt_receive_stats stats = {0};
  pushing = false;
  WT_CHECK(wt_srv_push_end(srv, push_id, true, &stats));
  Wt__V1__PushWeightsResponse resp = WT__V1__PUSH_WEIGHTS_RESPONSE__INIT;
  resp.tensors_received = stats.tensors;
  resp.bytes_received = stats.bytes;
  st = wt_rpc_call_respond(call, &resp.base);
out:
  if (msg != NULL) wt__v1__push_weights_chunk__free_unpacked(msg, NULL);
  grpc_slice_unref(slice);
  if (bb != NULL) grpc_byte_buffer_destroy(bb);
  /* A stream that broke, or a bad message: the push is over; its partial
   * tensors are not committed (the round stays open). */
  if (pushing) wt_status_free(wt_srv_push_end(srv, push_id, false, NULL));
  if (st != NULL && pushing)
    WT_LOGW("server", "PushWeights from %s: %s", wt_rpc_call_peer(call),
            wt_status_message(st));
  return st;
}

/* --- versions ------------------------------------------------------------- */

static wt_status *get_weight_version(wt_rpc_call *call,
                                     const ProtobufCMessage *request,
                                     void *user) {
  wt_server *srv = user;
  Wt__V1__WeightVersion v = WT__V1__WEIGHT_VERSION__INIT;
  pthread_mutex_lock(&srv->mu);
  if (srv->sequence > 0) {
    const wt_version_entry *e =
        &srv->history[srv->sequence % WT_VERSION_HISTORY];
    v.version = e->version;
    v.sequence = e->sequence;
    v.committed_unix_ms = e->committed_unix_ms;
  }
  wt_status *st = wt_rpc_call_respond(call, &v.base);
  pthread_mutex_unlock(&srv->mu);
  return st;
}

/* Runs on the polling thread, so it must not wait for mu (a finish may
 * hold it while a commit waits for readers). Without mu a wakeup can be
 * missed; the watch's timed wait covers that. */
static void wake_watchers(void *arg) {
  wt_server *srv = arg;
  pthread_cond_broadcast(&srv->cv);
}

/* The longest a watch whose client left may wait to notice. */
#define WATCH_POLL_MS 200

static void wait_watch_locked(wt_server *srv) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_nsec += WATCH_POLL_MS * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(&srv->cv, &srv->mu, &ts);
}

static wt_status *watch_weight_version(wt_rpc_call *call,
                                       const ProtobufCMessage *request,
                                       void *user) {
  wt_server *srv = user;
  wt_status *st = NULL;
  wt_rpc_call_set_cancel_callback(call, wake_watchers, srv);
  pthread_mutex_lock(&srv->mu);
  /* The current version first, if any, then every commit after it. */
  uint64_t next = srv->sequence > 0 ? srv->sequence : 1;
  for (;;) {
    while (!srv->stopping && !wt_rpc_call_cancelled(call) &&
           srv->sequence < next)
      wait_watch_locked(srv);
    if (srv->stopping || wt_rpc_call_cancelled(call)) break;
    /* A watcher that fell behind the history resumes at its oldest entry. */
    if (srv->sequence >= WT_VERSION_HISTORY &&
        next <= srv->sequence - WT_VERSION_HISTORY)
      next = srv->sequence - WT_VERSION_HISTORY + 1;
    const wt_version_entry *e = &srv->history[next % WT_VERSION_HISTORY];
    char *version = strdup(e->version);
    Wt__V1__WeightVersion v = WT__V1__WEIGHT_VERSION__INIT;
    v.version = version ? version : (char *)"";
    v.sequence = e->sequence;
    v.committed_unix_ms = e->committed_unix_ms;
    pthread_mutex_unlock(&srv->mu);
    st = wt_rpc_call_write(call, &v.base);
    free(version);
    pthread_mutex_lock(&srv->mu);
    if (st != NULL) break;
    next++;
  }
  pthread_mutex_unlock(&srv->mu);
  wt_rpc_call_set_cancel_callback(call, NULL, NULL);
  return st;
}

/* --- ChecksumWeights ------------------------------------------------------ */

static bool stopping(wt_server *srv) {
  pthread_mutex_lock(&srv->mu);
  bool stop = srv->stopping;
  pthread_mutex_unlock(&srv->mu);
  return stop;
}

static wt_status *checksum_weights(wt_rpc_call *call,
                                   const ProtobufCMessage *request,
                                   void *user) {
  wt_server *srv = user;
  const Wt__V1__ChecksumWeightsRequest *req =
      (const Wt__V1__ChecksumWeightsRequest *)request;
  wt_status *st = NULL;
  wt_param_store *s0 = store0(srv);
  size_t *idx = NULL;
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
  size_t n = req->n_names ? req->n_names : wt_param_store_count(s0);
  uint32_t nw = req->all_workers ? srv->nworkers : 1;
  idx = calloc(n ? n : 1, sizeof(*idx));
  if (idx == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "ChecksumWeights: out of memory");
  for (size_t k = 0; k < n; k++) {
    if (req->n_names)
      WT_CHECK(wt_param_store_find(s0, req->names[k], &idx[k]));
    else
      idx[k] = k;
  }
  size_t total = n * nw;
  hex = calloc(total ? total : 1, sizeof(*hex));
  pc = calloc(total ? total : 1, sizeof(*pc));
  pp = calloc(total ? total : 1, sizeof(*pp));
  if (hex == NULL || pc == NULL || pp == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "ChecksumWeights: out of memory");
  for (uint32_t w = 0; w < nw; w++) {
    wt_param_store *s = wt_worker_store(srv->workers[w]);
    /* One read lock per worker: its digests describe one version. */
    wt_param_store_read_lock(s);
    for (size_t k = 0; k < n && st == NULL; k++) {
      /* A pass over a large model takes a while: a client that left, or a
       * server stopping, ends it between digests. */
      if (wt_rpc_call_cancelled(call) || stopping(srv)) {
        st = wt_status_new(WT_CANCELLED,
                           "ChecksumWeights: stopped after %zu of %zu digests: "
                           "the client left or the server is stopping",
                           (size_t)w * n + k, total);
        break;
      }
      st = wt_param_store_digest(s, idx[k], alg, hex[w * n + k]);
    }
    wt_param_store_read_unlock(s);
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
  free(idx);
  free(hex);
  free(pc);
  free(pp);
  return st;
}

/* --- the table ------------------------------------------------------------ */

static const wt_rpc_method methods[] = {
    {METHOD("GetServerInfo"), WT_RPC_UNARY,
     &wt__v1__get_server_info_request__descriptor,
     &wt__v1__server_info__descriptor, get_server_info},
    {METHOD("GetWorldSize"), WT_RPC_UNARY,
     &wt__v1__get_world_size_request__descriptor,
     &wt__v1__get_world_size_response__descriptor, get_world_size},
    {METHOD("ListParameters"), WT_RPC_UNARY,
     &wt__v1__list_parameters_request__descriptor,
     &wt__v1__list_parameters_response__descriptor, list_parameters},
    {METHOD("InitWeightTransferEngine"), WT_RPC_UNARY,
     &wt__v1__init_weight_transfer_engine_request__descriptor,
     &wt__v1__init_weight_transfer_engine_response__descriptor, init_engine},
    {METHOD("StartWeightUpdate"), WT_RPC_UNARY,
     &wt__v1__start_weight_update_request__descriptor,
     &wt__v1__start_weight_update_response__descriptor, start_update},
    {METHOD("UpdateWeights"), WT_RPC_UNARY,
     &wt__v1__update_weights_request__descriptor,
     &wt__v1__update_weights_response__descriptor, update_weights},
    {METHOD("PushWeights"), WT_RPC_CLIENT_STREAM,
     &wt__v1__push_weights_chunk__descriptor,
     &wt__v1__push_weights_response__descriptor, push_weights},
    {METHOD("FinishWeightUpdate"), WT_RPC_UNARY,
     &wt__v1__finish_weight_update_request__descriptor,
     &wt__v1__finish_weight_update_response__descriptor, finish_update},
    {METHOD("AbortWeightUpdate"), WT_RPC_UNARY,
     &wt__v1__abort_weight_update_request__descriptor,
     &wt__v1__abort_weight_update_response__descriptor, abort_update},
    {METHOD("GetWeightVersion"), WT_RPC_UNARY,
     &wt__v1__get_weight_version_request__descriptor,
     &wt__v1__weight_version__descriptor, get_weight_version},
    {METHOD("WatchWeightVersion"), WT_RPC_SERVER_STREAM,
     &wt__v1__watch_weight_version_request__descriptor,
     &wt__v1__weight_version__descriptor, watch_weight_version},
    {METHOD("ChecksumWeights"), WT_RPC_UNARY,
     &wt__v1__checksum_weights_request__descriptor,
     &wt__v1__checksum_weights_response__descriptor, checksum_weights},
};

const wt_rpc_method *wt_srv_methods(size_t *n) {
  *n = sizeof(methods) / sizeof(methods[0]);
  return methods;
}
