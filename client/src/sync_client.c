/* sync_client.c: the sync client, fanning every round call out to all
 * servers (see wt/client.h). */

#include "wt/clock.h"
#include "wt/client.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client_internal.h"
#include "wt/dtype.h"
#include "wt/init_info.h"
#include "wt/log.h"
#include "wt/pb.h"
#include "wt/trainer.h"

#define METHOD(name) "/wt.v1.WeightTransfer/" name

typedef struct server {
  char *target;
  wt_rpc_channel *ch;
  uint32_t world_size;
  uint32_t rank_offset;
  uint64_t round_id; /* 0: no round of ours in progress */
} server;

struct wt_sync_client {
  server *servers;
  size_t n;
  int64_t timeout_ms;
  int64_t data_timeout_ms;
  bool manual_reinit;
  /* The last successful init, for a re-init the client makes by itself:
   * its info (owned), the trainer engine it made (borrowed; it forgets the
   * client when destroyed) and that trainer's source (borrowed). */
  Wt__V1__WeightTransferInitInfo *init;
  wt_trainer *trainer;
  wt_source *init_source;
};

wt_status *wt_sync_client_new(const char *const *targets, size_t n,
                              const wt_client_options *opts,
                              wt_sync_client **out) {
  wt_status *st = NULL;
  wt_sync_client *c = NULL;
  char *token = NULL;
  *out = NULL;
  if (n == 0 || targets == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT, "targets: at least one server is needed");
  for (size_t i = 0; i < n; i++) {
    if (targets[i] == NULL || *targets[i] == '\0')
      WT_FAIL(WT_INVALID_ARGUMENT, "targets[%zu]: empty server target", i);
    for (size_t j = 0; j < i; j++)
      if (strcmp(targets[i], targets[j]) == 0)
        WT_FAIL(WT_INVALID_ARGUMENT, "targets: server '%s' is given twice",
                targets[i]);
  }
  c = calloc(1, sizeof(*c));
  if (c == NULL || (c->servers = calloc(n, sizeof(*c->servers))) == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for a client");
  c->timeout_ms = opts && opts->timeout_ms > 0 ? opts->timeout_ms
                                               : WT_CLIENT_DEFAULT_TIMEOUT_MS;
  c->data_timeout_ms = opts && opts->data_timeout_ms > 0
                           ? opts->data_timeout_ms
                           : WT_CLIENT_DEFAULT_DATA_TIMEOUT_MS;
  c->manual_reinit = opts && opts->manual_reinit;
  const char *token_file = opts && opts->token_file ? opts->token_file : NULL;
  if (token_file != NULL) WT_CHECK(wt_token_read(token_file, &token));
  wt_rpc_channel_options copts = {.default_deadline_ms = c->timeout_ms,
                                  .tls = opts ? opts->tls : NULL,
                                  .token = token};
  for (size_t i = 0; i < n; i++) {
    server *s = &c->servers[i];
    c->n = i + 1;
    if ((s->target = strdup(targets[i])) == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for a client");
    WT_CHECK(wt_rpc_channel_new(targets[i], &copts, &s->ch));
  }
  *out = c;
  c = NULL;
out:
  if (token != NULL) {
    memset(token, 0, strlen(token));
    free(token);
  }
  wt_sync_client_destroy(c);
  return st;
}

void wt_sync_client_destroy(wt_sync_client *c) {
  if (c == NULL) return;
  for (size_t i = 0; i < c->n; i++) {
    if (c->servers[i].round_id != 0)
      WT_LOGW("client",
              "%s: round %" PRIu64
              " left open; the server's round timeout "
              "will end it",
              c->servers[i].target, c->servers[i].round_id);
    wt_rpc_channel_destroy(c->servers[i].ch);
    free(c->servers[i].target);
  }
  if (c->trainer != NULL) wt_trainer_forget_client(c->trainer);
  if (c->init != NULL) wt_pb_free(&c->init->base);
  free(c->servers);
  free(c);
}

size_t wt_sync_client_server_count(const wt_sync_client *c) {
  return c->n;
}

const char *wt_sync_client_target(const wt_sync_client *c, size_t k) {
  return k < c->n ? c->servers[k].target : NULL;
}

wt_rpc_channel *wt_sync_client_channel(wt_sync_client *c, size_t k) {
  return k < c->n ? c->servers[k].ch : NULL;
}

int64_t wt_sync_client_timeout_ms(const wt_sync_client *c) {
  return c->timeout_ms;
}

int64_t wt_sync_client_data_timeout_ms(const wt_sync_client *c) {
  return c->data_timeout_ms;
}

uint32_t wt_sync_client_rank_offset(const wt_sync_client *c, size_t k) {
  return k < c->n ? c->servers[k].rank_offset : 0;
}

uint32_t wt_sync_client_server_world_size(const wt_sync_client *c, size_t k) {
  return k < c->n ? c->servers[k].world_size : 0;
}

uint64_t wt_sync_client_round_id(const wt_sync_client *c, size_t k) {
  return k < c->n ? c->servers[k].round_id : 0;
}

static wt_status *check_index(const wt_sync_client *c, size_t k) {
  if (k >= c->n)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "server index %zu: the client has %zu server(s)", k,
                         c->n);
  return NULL;
}

/* ---- fan-out ------------------------------------------------------------ */

/* Starts `method` on every server k with reqs[k] (NULL: skip server k), then
 * waits for every answer: errs[k] gets each server's status (owned by the
 * caller), resps[k] each response when `resps` is not NULL. Returns a copy
 * of the first error in server order and logs the others, so that no
 * server's failure goes unsaid. */
static wt_status *fan_out(wt_sync_client *c, const char *method,
                          const ProtobufCMessage *const *reqs,
                          const ProtobufCMessageDescriptor *resp_type,
                          int64_t deadline_ms, ProtobufCMessage **resps,
                          wt_status **errs) {
  wt_rpc_pending **pending = calloc(c->n, sizeof(*pending));
  wt_status *first = NULL;
  if (pending == NULL) {
    /* Every server's call failed: its caller reads errs[k], not only the
     * first error. */
    first = wt_status_new(WT_RESOURCE_EXHAUSTED, "%s: out of memory", method);
    for (size_t k = 0; k < c->n; k++) {
      errs[k] = reqs[k] ? wt_status_copy(first) : NULL;
      if (resps) resps[k] = NULL;
    }
    return first;
  }
  for (size_t k = 0; k < c->n; k++) {
    errs[k] = NULL;
    if (resps) resps[k] = NULL;
    if (reqs[k] == NULL) continue;
    errs[k] = wt_rpc_unary_start(c->servers[k].ch, method, reqs[k], resp_type,
                                 deadline_ms, &pending[k]);
  }
  for (size_t k = 0; k < c->n; k++) {
    if (pending[k] == NULL) continue;
    errs[k] = wt_rpc_pending_wait(pending[k], resps ? &resps[k] : NULL);
  }
  for (size_t k = 0; k < c->n; k++) {
    if (errs[k] == NULL) continue;
    if (first == NULL)
      first = wt_status_copy(errs[k]);
    else
      WT_LOGE("client", "%s", wt_status_message(errs[k]));
  }
  free(pending);
  return first;
}

static void free_all(wt_status **errs, ProtobufCMessage **resps, size_t n) {
  for (size_t k = 0; k < n; k++) {
    if (errs) wt_status_free(errs[k]);
    if (resps) wt_pb_free(resps[k]);
  }
}

/* Per-server arrays of a fan-out, allocated together. */
typedef struct fan {
  const ProtobufCMessage **reqs;
  ProtobufCMessage **resps;
  wt_status **errs;
} fan;

static wt_status *fan_alloc(size_t n, fan *f) {
  f->reqs = calloc(n, sizeof(*f->reqs));
  f->resps = calloc(n, sizeof(*f->resps));
  f->errs = calloc(n, sizeof(*f->errs));
  if (!f->reqs || !f->resps || !f->errs)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "out of memory for a call to %zu servers", n);
  return NULL;
}

static void fan_free(fan *f, size_t n) {
  if (f->resps || f->errs) free_all(f->errs, f->resps, n);
  free(f->reqs);
  free(f->resps);
  free(f->errs);
  memset(f, 0, sizeof(*f));
}

/* ---- inspection --------------------------------------------------------- */

wt_status *wt_sync_client_server_info(wt_sync_client *c, size_t k,
                                      Wt__V1__ServerInfo **info) {
  wt_status *st = NULL;
  Wt__V1__GetServerInfoRequest req = WT__V1__GET_SERVER_INFO_REQUEST__INIT;
  *info = NULL;
  WT_CHECK(check_index(c, k));
  WT_CHECK(wt_rpc_unary(c->servers[k].ch, METHOD("GetServerInfo"), &req.base,
                        &wt__v1__server_info__descriptor, c->timeout_ms,
                        (ProtobufCMessage **)info));
out:
  return st;
}

wt_status *wt_sync_client_world_size(wt_sync_client *c, uint32_t *world_size) {
  wt_status *st = NULL;
  fan f = {0};
  Wt__V1__GetWorldSizeRequest req = WT__V1__GET_WORLD_SIZE_REQUEST__INIT;
  uint32_t total = 1;
  *world_size = 0;
  WT_CHECK(fan_alloc(c->n, &f));
  for (size_t k = 0; k < c->n; k++) f.reqs[k] = &req.base;
  WT_CHECK(fan_out(c, METHOD("GetWorldSize"), f.reqs,
                   &wt__v1__get_world_size_response__descriptor, c->timeout_ms,
                   f.resps, f.errs));
  for (size_t k = 0; k < c->n; k++) {
    uint32_t ws = ((Wt__V1__GetWorldSizeResponse *)f.resps[k])->world_size;
    if (ws == 0)
      WT_FAIL(WT_FAILED_PRECONDITION, "%s: server reports world size 0",
              c->servers[k].target);
    c->servers[k].world_size = ws;
    c->servers[k].rank_offset = total;
    if (__builtin_add_overflow(total, ws, &total))
      WT_FAIL(WT_OUT_OF_RANGE, "%s: world size overflows 32 bits",
              c->servers[k].target);
  }
  *world_size = total;
out:
  fan_free(&f, c->n);
  return st;
}

static wt_status *meta_from_info(const Wt__V1__ParameterInfo *p,
                                 wt_tensor_meta *m) {
  wt_status *st = NULL;
  wt_dtype dt;
  if (p->n_shape > WT_MAX_NDIM)
    WT_FAIL(WT_INVALID_ARGUMENT, "parameter '%s': %zu dimensions", p->name,
            p->n_shape);
  WT_CHECK(wt_status_prefix(wt_dtype_from_name(p->dtype, &dt), "parameter '%s'",
                            p->name));
  WT_CHECK(wt_status_prefix(
      wt_tensor_meta_init(m, p->name, dt, p->shape, (int)p->n_shape),
      "parameter '%s'", p->name));
out:
  return st;
}

wt_status *wt_sync_client_list_parameters(wt_sync_client *c, size_t k,
                                          const char *prefix,
                                          wt_tensor_meta **metas, size_t *n) {
  wt_status *st = NULL;
  wt_tensor_meta *all = NULL;
  size_t count = 0, cap = 0;
  char *token = NULL;
  Wt__V1__ListParametersResponse *resp = NULL;
  *metas = NULL;
  *n = 0;
  WT_CHECK(check_index(c, k));
  for (;;) {
    Wt__V1__ListParametersRequest req = WT__V1__LIST_PARAMETERS_REQUEST__INIT;
    req.name_prefix = (char *)(prefix ? prefix : "");
    req.page_token = token ? token : (char *)"";
    WT_CHECK(wt_rpc_unary(c->servers[k].ch, METHOD("ListParameters"), &req.base,
                          &wt__v1__list_parameters_response__descriptor,
                          c->timeout_ms, (ProtobufCMessage **)&resp));
    if (count + resp->n_parameters > cap) {
      size_t ncap = cap ? cap : 64;
      while (ncap < count + resp->n_parameters) ncap *= 2;
      wt_tensor_meta *grown = realloc(all, ncap * sizeof(*grown));
      if (grown == NULL)
        WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for %zu parameters",
                ncap);
      memset(grown + cap, 0, (ncap - cap) * sizeof(*grown));
      all = grown;
      cap = ncap;
    }
    for (size_t i = 0; i < resp->n_parameters; i++) {
      WT_CHECK(
          wt_status_prefix(meta_from_info(resp->parameters[i], &all[count]),
                           "%s", c->servers[k].target));
      count++;
    }
    if (resp->next_page_token == NULL || *resp->next_page_token == '\0') break;
    /* A server that hands back the token it was given would loop forever. */
    if ((token && strcmp(token, resp->next_page_token) == 0) ||
        resp->n_parameters == 0)
      WT_FAIL(WT_INTERNAL, "%s: ListParameters paging does not advance",
              c->servers[k].target);
    free(token);
    if ((token = strdup(resp->next_page_token)) == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
    wt_pb_free(&resp->base);
    resp = NULL;
  }
  *metas = all;
  *n = count;
  all = NULL;
  count = 0;
out:
  wt_pb_free(resp ? &resp->base : NULL);
  free(token);
  wt_tensor_meta_array_free(all, count);
  return st;
}

void wt_weight_version_clear(wt_weight_version *v) {
  if (v == NULL) return;
  free(v->version);
  memset(v, 0, sizeof(*v));
}

static wt_status *version_from_pb(const Wt__V1__WeightVersion *pb,
                                  wt_weight_version *v) {
  memset(v, 0, sizeof(*v));
  v->version = strdup(pb->version ? pb->version : "");
  if (v->version == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  v->sequence = pb->sequence;
  v->committed_unix_ms = pb->committed_unix_ms;
  return NULL;
}

wt_status *wt_sync_client_get_version(wt_sync_client *c, size_t k,
                                      wt_weight_version *out) {
  wt_status *st = NULL;
  Wt__V1__GetWeightVersionRequest req =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  Wt__V1__WeightVersion *resp = NULL;
  memset(out, 0, sizeof(*out));
  WT_CHECK(check_index(c, k));
  WT_CHECK(wt_rpc_unary(c->servers[k].ch, METHOD("GetWeightVersion"), &req.base,
                        &wt__v1__weight_version__descriptor, c->timeout_ms,
                        (ProtobufCMessage **)&resp));
  WT_CHECK(version_from_pb(resp, out));
out:
  wt_pb_free(resp ? &resp->base : NULL);
  return st;
}

wt_status *wt_sync_client_watch(wt_sync_client *c, size_t k,
                                int64_t deadline_ms, wt_version_fn fn,
                                void *user) {
  wt_status *st = NULL;
  Wt__V1__WatchWeightVersionRequest req =
      WT__V1__WATCH_WEIGHT_VERSION_REQUEST__INIT;
  wt_rpc_server_stream *s = NULL;
  ProtobufCMessage *msg = NULL;
  wt_weight_version v = {0};
  WT_CHECK(check_index(c, k));
  WT_CHECK(wt_rpc_server_stream_open(c->servers[k].ch,
                                     METHOD("WatchWeightVersion"), &req.base,
                                     deadline_ms, &s));
  for (;;) {
    bool done = false;
    WT_CHECK(wt_rpc_server_stream_read(s, &wt__v1__weight_version__descriptor,
                                       &msg, &done));
    if (done) break;
    WT_CHECK(version_from_pb((Wt__V1__WeightVersion *)msg, &v));
    wt_pb_free(msg);
    msg = NULL;
    bool more = fn(&v, user);
    wt_weight_version_clear(&v);
    if (!more) break;
  }
out:
  wt_weight_version_clear(&v);
  wt_pb_free(msg);
  wt_rpc_server_stream_destroy(s);
  return st;
}

void wt_param_checksums_free(wt_param_checksum *sums, size_t n) {
  if (sums == NULL) return;
  for (size_t i = 0; i < n; i++) free(sums[i].name);
  free(sums);
}

wt_status *wt_sync_client_checksums(wt_sync_client *c, size_t k,
                                    const char *const *names, size_t n,
                                    wt_hash_alg alg, bool all_workers,
                                    wt_param_checksum **out, size_t *nout) {
  wt_status *st = NULL;
  Wt__V1__ChecksumWeightsRequest req = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  Wt__V1__ChecksumWeightsResponse *resp = NULL;
  wt_param_checksum *sums = NULL;
  size_t count = 0;
  *out = NULL;
  *nout = 0;
  WT_CHECK(check_index(c, k));
  req.n_names = n;
  req.names = (char **)names;
  req.algorithm = alg == WT_HASH_XXH3_64
                      ? WT__V1__CHECKSUM_ALGORITHM__CHECKSUM_ALGORITHM_XXH3_64
                      : WT__V1__CHECKSUM_ALGORITHM__CHECKSUM_ALGORITHM_SHA256;
  req.all_workers = all_workers;
  WT_CHECK(wt_rpc_unary(c->servers[k].ch, METHOD("ChecksumWeights"), &req.base,
                        &wt__v1__checksum_weights_response__descriptor,
                        c->data_timeout_ms, (ProtobufCMessage **)&resp));
  sums = calloc(resp->n_checksums > 0 ? resp->n_checksums : 1, sizeof(*sums));
  if (sums == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for %zu checksums",
            resp->n_checksums);
  for (size_t i = 0; i < resp->n_checksums; i++) {
    const Wt__V1__ParameterChecksum *pc = resp->checksums[i];
    if (strlen(pc->digest) >= WT_DIGEST_HEX_MAX)
      WT_FAIL(WT_INTERNAL, "%s: digest of '%s' is %zu characters long",
              c->servers[k].target, pc->name, strlen(pc->digest));
    if ((sums[i].name = strdup(pc->name)) == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
    count = i + 1;
    strcpy(sums[i].digest, pc->digest);
    sums[i].worker = pc->worker;
  }
  *out = sums;
  *nout = count;
  sums = NULL;
out:
  wt_param_checksums_free(sums, count);
  wt_pb_free(resp ? &resp->base : NULL);
  return st;
}

/* ---- rounds ------------------------------------------------------------- */

/* Per-server copies of an init info: shallow, with the ranks set. */
typedef struct init_copy {
  Wt__V1__WeightTransferInitInfo info;
  Wt__V1__InitWeightTransferEngineRequest req;
} init_copy;

/* Initialises `backend` on every server with `info`, and `t` (NULL: no
 * trainer engine) alongside: world size and ranks, the trainer's
 * server_init_info, every server's InitWeightTransferEngine started, the
 * trainer's connect while they are pending, then every answer and the
 * trainer's init_response. */
static wt_status *init_servers(wt_sync_client *c,
                               const Wt__V1__WeightTransferInitInfo *info,
                               const char *backend, wt_trainer *t) {
  wt_status *st = NULL;
  const wt_trainer_ops *ops = t ? wt_trainer_get_ops(t) : NULL;
  init_copy *copies = NULL;
  wt_rpc_pending **pending = NULL;
  wt_status **errs = NULL;
  ProtobufCMessage **resps = NULL;
  uint32_t world = 0;
  WT_CHECK(wt_sync_client_world_size(c, &world));
  copies = calloc(c->n, sizeof(*copies));
  pending = calloc(c->n, sizeof(*pending));
  errs = calloc(c->n, sizeof(*errs));
  resps = calloc(c->n, sizeof(*resps));
  if (!copies || !pending || !errs || !resps)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for init of %zu servers",
            c->n);
  for (size_t k = 0; k < c->n; k++) {
    init_copy *ic = &copies[k];
    ic->info = *info;
    ic->info.backend = (char *)backend;
    ic->info.rank_offset = c->servers[k].rank_offset;
    ic->info.world_size = world;
    if (t && ops->server_init_info)
      WT_CHECK(wt_status_prefix(
          ops->server_init_info(wt_trainer_self(t), k, &ic->info), "%s",
          c->servers[k].target));
    wt__v1__init_weight_transfer_engine_request__init(&ic->req);
    ic->req.init_info = &ic->info;
  }
  for (size_t k = 0; k < c->n && st == NULL; k++)
    st = wt_rpc_unary_start(
        c->servers[k].ch, METHOD("InitWeightTransferEngine"),
        &copies[k].req.base,
        &wt__v1__init_weight_transfer_engine_response__descriptor,
        c->data_timeout_ms, &pending[k]);
  /* The rendezvous runs while every server's init is pending: a worker's
   * init may block until the trainer joins. */
  if (st == NULL && t && ops->connect)
    st = wt_status_prefix(ops->connect(wt_trainer_self(t)),
                          "trainer engine '%s': connect", backend);
  for (size_t k = 0; k < c->n; k++) {
    if (pending[k] == NULL) continue;
    if (st != NULL) wt_rpc_pending_cancel(pending[k]);
    errs[k] = wt_rpc_pending_wait(pending[k], &resps[k]);
  }
  if (st != NULL) goto out;
  for (size_t k = 0; k < c->n; k++) {
    const Wt__V1__InitWeightTransferEngineResponse *r =
        (const Wt__V1__InitWeightTransferEngineResponse *)resps[k];
    if (errs[k] == NULL && (r == NULL || !r->ready))
      errs[k] = wt_status_new(
          WT_FAILED_PRECONDITION, "%s: backend '%s' not ready: %s",
          c->servers[k].target, backend,
          r && r->message && *r->message ? r->message : "(no reason given)");
    if (errs[k] == NULL) continue;
    if (st == NULL)
      st = wt_status_copy(errs[k]);
    else
      WT_LOGE("client", "%s", wt_status_message(errs[k]));
  }
  if (st != NULL) goto out;
  /* A backend whose workers listen connects to them now (its errors name
   * the server and worker). */
  for (size_t k = 0; k < c->n && t && ops->init_response; k++)
    WT_CHECK(ops->init_response(
        wt_trainer_self(t), k,
        (const Wt__V1__InitWeightTransferEngineResponse *)resps[k]));
  WT_LOGD("client", "backend '%s' initialised on %zu server(s), world size %u",
          backend, c->n, (unsigned)world);
out:
  if (errs) free_all(errs, resps, c->n);
  free(errs);
  free(resps);
  free(pending);
  free(copies);
  return st;
}

/* A deep copy of `info` (the client keeps it to init again by itself). */
static wt_status *init_info_copy(const Wt__V1__WeightTransferInitInfo *info,
                                 Wt__V1__WeightTransferInitInfo **out) {
  size_t len = wt__v1__weight_transfer_init_info__get_packed_size(info);
  uint8_t *buf = malloc(len ? len : 1);
  *out = NULL;
  if (buf == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
  wt__v1__weight_transfer_init_info__pack(info, buf);
  *out = wt__v1__weight_transfer_init_info__unpack(NULL, len, buf);
  free(buf);
  if (*out == NULL)
    return wt_status_new(WT_INTERNAL, "init info: cannot copy it");
  return NULL;
}

wt_status *wt_sync_client_init_transfer(
    wt_sync_client *c, const Wt__V1__WeightTransferInitInfo *info,
    wt_source *source, wt_trainer **trainer) {
  wt_status *st = NULL;
  const char *backend = NULL;
  const wt_trainer_ops *ops = NULL;
  wt_trainer *t = NULL;
  Wt__V1__WeightTransferInitInfo *copy = NULL;
  if (trainer) *trainer = NULL;
  WT_CHECK(wt_init_info_backend(info, &backend));
  if (trainer) WT_CHECK(wt_trainer_lookup(backend, &ops));
  WT_CHECK(init_info_copy(info, &copy));
  if (trainer) {
    /* The ranks are known once the servers answered their world size. */
    uint32_t world = 0;
    WT_CHECK(wt_sync_client_world_size(c, &world));
    copy->world_size = world;
    wt_trainer_init_args args = {
        .init_info = copy, .client = c, .source = source};
    WT_CHECK(wt_trainer_create(backend, &args, &t));
  }
  WT_CHECK(init_servers(c, copy, backend, t));
  /* Kept for a re-init the client makes by itself (wt_sync_client_start). */
  if (c->init != NULL) wt_pb_free(&c->init->base);
  c->init = copy;
  copy = NULL;
  c->init_source = source;
  if (c->trainer != NULL) wt_trainer_forget_client(c->trainer);
  c->trainer = t;
  if (t != NULL) wt_trainer_attach(t, c);
  if (trainer) {
    *trainer = t;
    t = NULL;
  }
out:
  if (copy != NULL) wt_pb_free(&copy->base);
  wt_trainer_destroy(t);
  return st;
}

void wt_sync_client_forget_trainer(wt_sync_client *c, wt_trainer *t) {
  if (c->trainer == t) c->trainer = NULL;
}

/* The servers whose failed start says a worker needs a new init: asks each
 * one that answered FAILED_PRECONDITION for its workers' states. */
static bool needs_init(wt_sync_client *c, wt_status **errs, char *why,
                       size_t cap) {
  bool any = false;
  for (size_t k = 0; k < c->n; k++) {
    if (errs[k] == NULL || wt_status_code(errs[k]) != WT_FAILED_PRECONDITION)
      continue;
    Wt__V1__ServerInfo *info = NULL;
    wt_status *st = wt_sync_client_server_info(c, k, &info);
    if (st != NULL) {
      wt_status_free(st);
      continue;
    }
    for (size_t i = 0; i < info->n_workers; i++) {
      const Wt__V1__WorkerInfo *w = info->workers[i];
      if (w->state == NULL || strcmp(w->state, "needs_init") != 0) continue;
      if (!any)
        snprintf(why, cap, "%s worker %u (%s): %s", c->servers[k].target,
                 w->rank, w->device, w->reason ? w->reason : "");
      any = true;
      break;
    }
    wt_pb_free(&info->base);
  }
  return any;
}

/* Aborts the rounds this client started, on the servers in `mask` (NULL:
 * every server with a round), best effort. */
static wt_status *abort_rounds(wt_sync_client *c, const char *reason,
                               const bool *mask) {
  wt_status *st = NULL;
  fan f = {0};
  Wt__V1__AbortWeightUpdateRequest *reqs = NULL;
  WT_CHECK(fan_alloc(c->n, &f));
  reqs = calloc(c->n, sizeof(*reqs));
  if (reqs == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t k = 0; k < c->n; k++) {
    server *s = &c->servers[k];
    if ((mask && !mask[k]) || s->round_id == 0) continue;
    wt__v1__abort_weight_update_request__init(&reqs[k]);
    reqs[k].reason = (char *)(reason ? reason : "");
    reqs[k].round_id = s->round_id;
    f.reqs[k] = &reqs[k].base;
  }
  st = fan_out(c, METHOD("AbortWeightUpdate"), f.reqs,
               &wt__v1__abort_weight_update_response__descriptor, c->timeout_ms,
               NULL, f.errs);
  for (size_t k = 0; k < c->n; k++)
    if (f.reqs[k] != NULL) c->servers[k].round_id = 0;
out:
  fan_free(&f, c->n);
  free(reqs);
  return st;
}

wt_status *wt_sync_client_abort(wt_sync_client *c, const char *reason) {
  /* Only the servers with a round of ours are asked, with its ids: a round
   * is aborted only by the trainer that started it (another's id is not
   * known here, and a server refuses round id 0). */
  return abort_rounds(c, reason, NULL);
}

/* One StartWeightUpdate on every server. When some fail, the rounds that
 * started elsewhere are aborted; *reinit says whether a failed server has a
 * worker in needs_init (and `why` which). */
static wt_status *start_once(wt_sync_client *c, bool *reinit, char *why,
                             size_t cap) {
  wt_status *st = NULL;
  fan f = {0};
  bool *started = NULL;
  Wt__V1__StartWeightUpdateRequest req =
      WT__V1__START_WEIGHT_UPDATE_REQUEST__INIT;
  *reinit = false;
  WT_CHECK(fan_alloc(c->n, &f));
  for (size_t k = 0; k < c->n; k++) f.reqs[k] = &req.base;
  st = fan_out(c, METHOD("StartWeightUpdate"), f.reqs,
               &wt__v1__start_weight_update_response__descriptor, c->timeout_ms,
               f.resps, f.errs);
  for (size_t k = 0; k < c->n; k++)
    if (f.errs[k] == NULL)
      c->servers[k].round_id =
          ((Wt__V1__StartWeightUpdateResponse *)f.resps[k])->round_id;
  if (st != NULL) {
    started = calloc(c->n, sizeof(*started));
    bool any = false;
    for (size_t k = 0; started && k < c->n; k++)
      any |= started[k] = f.errs[k] == NULL;
    if (any) {
      wt_status *ast =
          abort_rounds(c, "start failed on another server", started);
      if (ast) WT_LOGW("client", "%s", wt_status_message(ast));
      wt_status_free(ast);
    }
    *reinit = needs_init(c, f.errs, why, cap);
  }
out:
  free(started);
  fan_free(&f, c->n);
  return st;
}

/* Initialises every server (and the trainer engine in place) again with
 * the last init's info. */
static wt_status *reinit(wt_sync_client *c) {
  wt_status *st = NULL;
  const char *backend = NULL;
  WT_CHECK(wt_init_info_backend(c->init, &backend));
  if (c->trainer != NULL) {
    wt_trainer_init_args args = {
        .init_info = c->init, .client = c, .source = c->init_source};
    WT_CHECK(wt_trainer_reinit(c->trainer, &args));
  }
  WT_CHECK(init_servers(c, c->init, backend, c->trainer));
out:
  return st;
}

wt_status *wt_sync_client_start(wt_sync_client *c) {
  char why[768] = "";
  bool again = false;
  wt_status *st = start_once(c, &again, why, sizeof(why));
  if (st == NULL || !again) return st;
  if (c->manual_reinit || c->init == NULL) {
    WT_LOGW("client", "%s needs a new init; %s", why,
            c->manual_reinit ? "this client re-inits only when told to "
                               "(manual_reinit)"
                             : "this client made no init to repeat");
    return st;
  }
  const char *backend = NULL;
  wt_status_free(wt_init_info_backend(c->init, &backend));
  WT_LOGW("client", "re-initialising backend '%s' on %zu server(s): %s",
          backend ? backend : "?", c->n, why);
  wt_status *rst = reinit(c);
  if (rst != NULL) {
    wt_status *out = wt_status_new(
        wt_status_code(rst), "%s; re-initialising the backend failed: %s",
        wt_status_message(st), wt_status_message(rst));
    wt_status_free(rst);
    wt_status_free(st);
    return out;
  }
  wt_status_free(st);
  return start_once(c, &again, why, sizeof(why));
}

wt_status *wt_sync_client_finish(wt_sync_client *c,
                                 const char *weight_version) {
  wt_status *st = NULL;
  fan f = {0};
  Wt__V1__FinishWeightUpdateRequest *reqs = NULL;
  if (weight_version == NULL || *weight_version == '\0')
    WT_FAIL(WT_INVALID_ARGUMENT, "weight_version: must not be empty");
  for (size_t k = 0; k < c->n; k++)
    if (c->servers[k].round_id == 0)
      WT_FAIL(WT_FAILED_PRECONDITION,
              "FinishWeightUpdate on %s: this client has no round in "
              "progress there (call wt_sync_client_start first)",
              c->servers[k].target);
  WT_CHECK(fan_alloc(c->n, &f));
  reqs = calloc(c->n, sizeof(*reqs));
  if (reqs == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t k = 0; k < c->n; k++) {
    wt__v1__finish_weight_update_request__init(&reqs[k]);
    reqs[k].weight_version = (char *)weight_version;
    reqs[k].round_id = c->servers[k].round_id;
    f.reqs[k] = &reqs[k].base;
  }
  st = fan_out(c, METHOD("FinishWeightUpdate"), f.reqs,
               &wt__v1__finish_weight_update_response__descriptor,
               c->timeout_ms, NULL, f.errs);
  for (size_t k = 0; k < c->n; k++)
    if (f.errs[k] == NULL) c->servers[k].round_id = 0;
out:
  fan_free(&f, c->n);
  free(reqs);
  return st;
}

/* ---- update ------------------------------------------------------------- */

/* For backends that need UpdateWeights: owns the pending calls while the
 * trainer sends, waits for each as it completes, and cancels the trainer
 * when a server fails first. */
typedef struct update_watch {
  wt_trainer *t;
  wt_rpc_pending **pending;
  wt_status **errs;
  const char **targets;
  size_t n;
  pthread_mutex_t mu;
  bool cancel_calls;  /* set by the sender when send_weights failed */
  long cancelled_for; /* server whose error cancelled the trainer, or -1 */
  /* Once the trainer sent its last byte, every server must answer by then
   * (0: not yet sent): a server past its own data deadline has failed its
   * round, and an answer that does not come is a link gone dead. */
  int64_t answer_by_ms;
  int64_t answer_within_ms;
} update_watch;

static void *watch_updates(void *arg) {
  update_watch *w = arg;
  size_t remaining = 0;
  bool calls_cancelled = false;
  for (size_t k = 0; k < w->n; k++) remaining += w->pending[k] != NULL;
  while (remaining > 0) {
    pthread_mutex_lock(&w->mu);
    bool cancel = w->cancel_calls;
    int64_t answer_by = w->answer_by_ms;
    pthread_mutex_unlock(&w->mu);
    if (answer_by != 0 && !cancel && wt_mono_ms() > answer_by) {
      for (size_t k = 0; k < w->n; k++) {
        if (w->pending[k] == NULL) continue;
        wt_rpc_pending_cancel(w->pending[k]);
        wt_status_free(wt_rpc_pending_wait(w->pending[k], NULL));
        w->pending[k] = NULL;
        remaining--;
        w->errs[k] = wt_status_new(
            WT_DEADLINE_EXCEEDED,
            "%s UpdateWeights: no answer within %" PRId64
            " ms (the data deadline) after the trainer sent its last byte; "
            "the server or the link to it is gone",
            w->targets[k], w->answer_within_ms);
        if (w->cancelled_for < 0) w->cancelled_for = (long)k;
      }
      break;
    }
    if (cancel && !calls_cancelled) {
      for (size_t k = 0; k < w->n; k++)
        if (w->pending[k]) wt_rpc_pending_cancel(w->pending[k]);
      calls_cancelled = true;
    }
    for (size_t k = 0; k < w->n; k++) {
      if (w->pending[k] == NULL || !wt_rpc_pending_done(w->pending[k]))
        continue;
      w->errs[k] = wt_rpc_pending_wait(w->pending[k], NULL);
      w->pending[k] = NULL;
      remaining--;
      const wt_trainer_ops *ops = wt_trainer_get_ops(w->t);
      if (w->errs[k] != NULL && w->cancelled_for < 0 && !cancel) {
        w->cancelled_for = (long)k;
        if (ops->cancel) ops->cancel(wt_trainer_self(w->t));
      }
    }
    if (remaining == 0) break;
    /* Block on the first call still running, for at most 5 ms: its end is
     * seen at once (so a round's last answer costs no poll interval), and
     * a cancel or the answer deadline within 5 ms. */
    for (size_t k = 0; k < w->n; k++)
      if (w->pending[k] != NULL) {
        (void)wt_rpc_pending_done_within(w->pending[k], 5);
        break;
      }
  }
  return NULL;
}

/* Per-server update info from the source's metadata, plus the backend's
 * extras. Strings point into the source's metadata. */
typedef struct update_copy {
  Wt__V1__UpdateWeightsRequest req;
  Wt__V1__WeightTransferUpdateInfo info;
} update_copy;

void wt_update_lists_free(wt_update_lists *l) {
  if (l == NULL) return;
  free(l->names);
  free(l->dtype_names);
  free(l->shapes);
  free(l->shape_ptrs);
  memset(l, 0, sizeof(*l));
}

wt_status *wt_update_lists_build(const wt_source *src, wt_update_lists *l) {
  size_t n = 0;
  const wt_tensor_meta *m = wt_source_metas(src, &n);
  size_t alloc = n > 0 ? n : 1;
  memset(l, 0, sizeof(*l));
  l->names = calloc(alloc, sizeof(*l->names));
  l->dtype_names = calloc(alloc, sizeof(*l->dtype_names));
  l->shapes = calloc(alloc, sizeof(*l->shapes));
  l->shape_ptrs = calloc(alloc, sizeof(*l->shape_ptrs));
  if (!l->names || !l->dtype_names || !l->shapes || !l->shape_ptrs) {
    wt_update_lists_free(l);
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "out of memory for the update info of %zu tensors", n);
  }
  l->n = n;
  for (size_t i = 0; i < n; i++) {
    l->names[i] = m[i].name;
    l->dtype_names[i] = (char *)wt_dtype_torch_name(m[i].dtype);
    wt__v1__shape__init(&l->shapes[i]);
    l->shapes[i].n_dims = (size_t)m[i].ndim;
    l->shapes[i].dims = (int64_t *)m[i].shape;
    l->shape_ptrs[i] = &l->shapes[i];
  }
  return NULL;
}

void wt_update_lists_apply(const wt_update_lists *l,
                           Wt__V1__WeightTransferUpdateInfo *info) {
  info->n_names = info->n_dtype_names = info->n_shapes = l->n;
  info->names = l->names;
  info->dtype_names = l->dtype_names;
  info->shapes = l->shape_ptrs;
  info->packed = true;
}

/* What runs on the trainer's side while every server's UpdateWeights is
 * pending. */
typedef wt_status *(*send_step_fn)(void *arg);

/* Starts UpdateWeights with copies[k].req on every server, runs `send`
 * while the calls are pending (a server that fails first cancels the
 * trainer), and waits for every call: a server gets the data deadline
 * plus a second to answer once `send` returned. The round's error (NULL:
 * every server answered OK). */
static wt_status *calls_around(wt_sync_client *c, wt_trainer *t,
                               update_copy *copies, send_step_fn send,
                               void *arg) {
  wt_status *st = NULL, *send_st = NULL;
  update_watch w = {.t = t, .n = c->n, .cancelled_for = -1};
  bool sync_init = false, thread_started = false;
  pthread_t thread;

  w.pending = calloc(c->n, sizeof(*w.pending));
  w.errs = calloc(c->n, sizeof(*w.errs));
  w.targets = calloc(c->n, sizeof(*w.targets));
  if (!w.pending || !w.errs || !w.targets)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for an update");
  for (size_t k = 0; k < c->n; k++) w.targets[k] = c->servers[k].target;
  if (pthread_mutex_init(&w.mu, NULL) != 0)
    WT_FAIL(WT_INTERNAL, "cannot create the update's lock");
  sync_init = true;
  for (size_t k = 0; k < c->n && st == NULL; k++)
    st = wt_rpc_unary_start(c->servers[k].ch, METHOD("UpdateWeights"),
                            &copies[k].req.base,
                            &wt__v1__update_weights_response__descriptor,
                            c->data_timeout_ms, &w.pending[k]);
  int rc = pthread_create(&thread, NULL, watch_updates, &w);
  if (rc != 0) {
    /* Without the watcher nobody would wait for the calls: cancel them and
     * wait here. */
    for (size_t k = 0; k < c->n; k++)
      if (w.pending[k]) {
        wt_rpc_pending_cancel(w.pending[k]);
        wt_status_free(wt_rpc_pending_wait(w.pending[k], NULL));
        w.pending[k] = NULL;
      }
    if (st == NULL)
      st = wt_status_from_errno(rc, "cannot start the update's watcher");
    goto out;
  }
  thread_started = true;
  if (st != NULL) goto out;
  send_st = send != NULL ? send(arg) : NULL;
  if (send_st == NULL) {
    pthread_mutex_lock(&w.mu);
    w.answer_within_ms = c->init && c->init->timeout_ms ? c->init->timeout_ms
                                                        : c->data_timeout_ms;
    /* Plus a second for the answer itself to travel. */
    w.answer_by_ms = wt_mono_ms() + w.answer_within_ms + 1000;
    pthread_mutex_unlock(&w.mu);
  }
out:
  if (thread_started) {
    if (send_st != NULL || st != NULL) {
      pthread_mutex_lock(&w.mu);
      w.cancel_calls = true;
      pthread_mutex_unlock(&w.mu);
    }
    pthread_join(thread, NULL);
  }
  if (st == NULL) {
    /* The server's own error explains a trainer cancelled on its account
     * better than the trainer's CANCELLED does. */
    if (w.cancelled_for >= 0 && send_st != NULL &&
        wt_status_code(send_st) != WT_CANCELLED) {
      /* Both failed on their own (a server that died takes its workers'
       * data connections with it): the server's error says which server,
       * the trainer's which worker. */
      const wt_status *srv_st = w.errs[w.cancelled_for];
      st = wt_status_new(wt_status_code(srv_st), "%s; the trainer: %s",
                         wt_status_message(srv_st), wt_status_message(send_st));
    } else if (w.cancelled_for >= 0) {
      st = wt_status_copy(w.errs[w.cancelled_for]);
    } else if (send_st != NULL) {
      st = send_st;
      send_st = NULL;
    } else {
      for (size_t k = 0; k < c->n && st == NULL; k++)
        if (w.errs && w.errs[k]) st = wt_status_copy(w.errs[k]);
    }
  }
  wt_status_free(send_st);
  if (w.errs) free_all(w.errs, NULL, c->n);
  if (sync_init) {
    pthread_mutex_destroy(&w.mu);
  }
  free(w.errs);
  free(w.targets);
  free(w.pending);
  return st;
}

typedef struct send_args {
  wt_trainer *t;
  wt_source *src;
  wt_progress_fn progress;
  void *user;
  size_t part; /* parts: the one to prepare */
} send_args;

static wt_status *send_whole(void *arg) {
  send_args *a = arg;
  return wt_trainer_get_ops(a->t)->send_weights(wt_trainer_self(a->t), a->src,
                                                a->progress, a->user);
}

static wt_status *prepare_next(void *arg) {
  send_args *a = arg;
  return wt_trainer_get_ops(a->t)->prepare_part(wt_trainer_self(a->t), a->src,
                                                a->part);
}

static wt_status *update_with_calls(wt_sync_client *c, wt_trainer *t,
                                    wt_source *src, wt_progress_fn progress,
                                    void *user) {
  wt_status *st = NULL;
  const wt_trainer_ops *ops = wt_trainer_get_ops(t);
  wt_update_lists lists = {0};
  update_copy *copies = calloc(c->n, sizeof(*copies));
  if (copies == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for an update");
  WT_CHECK(wt_update_lists_build(src, &lists));
  for (size_t k = 0; k < c->n; k++) {
    update_copy *uc = &copies[k];
    wt__v1__weight_transfer_update_info__init(&uc->info);
    wt_update_lists_apply(&lists, &uc->info);
    if (ops->update_info)
      WT_CHECK(wt_status_prefix(
          ops->update_info(wt_trainer_self(t), src, k, &uc->info), "%s",
          c->servers[k].target));
    wt__v1__update_weights_request__init(&uc->req);
    uc->req.update_info = &uc->info;
    uc->req.round_id = c->servers[k].round_id;
  }
  send_args a = {.t = t, .src = src, .progress = progress, .user = user};
  st = calls_around(c, t, copies, send_whole, &a);
out:
  free(copies);
  wt_update_lists_free(&lists);
  return st;
}

/* The round as the trainer's parts (wt_trainer_ops.parts): part p + 1 is
 * prepared while every server takes part p. */
static wt_status *update_in_parts(wt_sync_client *c, wt_trainer *t,
                                  wt_source *src, wt_progress_fn progress,
                                  void *user) {
  wt_status *st = NULL;
  const wt_trainer_ops *ops = wt_trainer_get_ops(t);
  void *self = wt_trainer_self(t);
  wt_update_lists lists = {0};
  size_t nparts = 0;
  update_copy *copies = calloc(c->n, sizeof(*copies));
  if (copies == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for an update");
  WT_CHECK(wt_update_lists_build(src, &lists));
  WT_CHECK(ops->parts(self, src, &nparts));
  if (nparts > 0) WT_CHECK(ops->prepare_part(self, src, 0));
  size_t nsrc = 0;
  const wt_tensor_meta *metas = wt_source_metas(src, &nsrc);
  wt_progress pr = {.tensors_total = nsrc,
                    .bytes_total = wt_source_total_bytes(src)};
  for (size_t p = 0; p < nparts; p++) {
    size_t tensors = 0;
    for (size_t k = 0; k < c->n; k++) {
      update_copy *uc = &copies[k];
      wt__v1__weight_transfer_update_info__init(&uc->info);
      wt_update_lists_apply(&lists, &uc->info);
      WT_CHECK(wt_status_prefix(ops->part_info(self, src, p, k, &uc->info),
                                "%s", c->servers[k].target));
      wt__v1__update_weights_request__init(&uc->req);
      uc->req.update_info = &uc->info;
      uc->req.round_id = c->servers[k].round_id;
      tensors = uc->info.n_names;
    }
    /* The part's first tensor, for the progress of its bytes. */
    size_t first =
        tensors > 0 ? (size_t)(copies[0].info.names - lists.names) : 0;
    send_args a = {.t = t, .src = src, .part = p + 1};
    st = calls_around(c, t, copies, p + 1 < nparts ? prepare_next : NULL, &a);
    if (st != NULL) goto out;
    for (size_t k = 0; k < c->n; k++) ops->part_done(self, p, k);
    if (progress != NULL) {
      for (size_t i = first; i < first + tensors && i < nsrc; i++)
        pr.bytes_done += metas[i].nbytes;
      pr.tensors_done += tensors;
      progress(&pr, user);
    }
  }
out:
  free(copies);
  wt_update_lists_free(&lists);
  return st;
}

wt_status *wt_sync_client_update(wt_sync_client *c, wt_trainer *trainer,
                                 wt_source *source, wt_progress_fn progress,
                                 void *user) {
  wt_status *st = NULL;
  wt_source *src =
      source ? source : (trainer ? wt_trainer_source(trainer) : NULL);
  if (trainer == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "trainer: no trainer engine (create one with init_transfer)");
  if (src == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "source: none given, and the trainer engine has none");
  for (size_t k = 0; k < c->n; k++)
    if (c->servers[k].round_id == 0)
      return wt_status_new(WT_FAILED_PRECONDITION,
                           "%s: no round in progress (start one first)",
                           c->servers[k].target);
  if (wt_trainer_self(trainer) == NULL)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "trainer engine '%s' has no engine: its last re-init failed; call "
            "init_transfer again",
            wt_trainer_backend(trainer));
  uint32_t kinds = wt_trainer_get_ops(trainer)->memory_kinds;
  WT_CHECK(wt_source_validate_for(src, kinds ? kinds : WT_MEM_HOST_KINDS,
                                  wt_trainer_backend(trainer)));
  if (wt_trainer_needs_update_weights(trainer) &&
      wt_trainer_get_ops(trainer)->parts != NULL)
    WT_CHECK(update_in_parts(c, trainer, src, progress, user));
  else if (wt_trainer_needs_update_weights(trainer))
    WT_CHECK(update_with_calls(c, trainer, src, progress, user));
  else
    WT_CHECK(wt_trainer_get_ops(trainer)->send_weights(wt_trainer_self(trainer),
                                                       src, progress, user));
out:
  if (st != NULL && trainer != NULL && src != NULL) {
    /* A half-sent round must not be finished by mistake. */
    wt_status *ast = abort_rounds(c, wt_status_message(st), NULL);
    if (ast != NULL) {
      WT_LOGW("client", "aborting the failed round: %s",
              wt_status_message(ast));
      wt_status_free(ast);
    }
  }
  return st;
}
