/* sync_client.c: the round orchestration (see wt/client.h): every round
 * call fanned out to every server through the control plane's table
 * (wt/control.h), the trainer engine's rendezvous and sends while those
 * calls are pending, abort on the first failure, and the re-init a worker
 * in needs_init asks for. It reaches the servers only through the table
 * (fanout.c), and a trainer engine only through its ops and the plain
 * context it was given (wt_trainer_ctx). */

#include "wt/client.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "wt/adapter_spec.h"
#include "wt/init_info.h"
#include "wt/log.h"
#include "wt/pb.h"
#include "wt/rpc.h"
#include "wt/trainer.h"

/* The most the best-effort abort after a failed call waits for the servers
 * (wt_sync_client.failure_abort_ms): long enough for a loaded but healthy
 * server to answer, short enough that a dead one does not hold the
 * caller's error. */
#define FAILURE_ABORT_MAX_MS 5000

struct wt_sync_client {
  wt_control_plane cp; /* owned */
  size_t n;
  bool manual_reinit;
  /* Per server, in the arrays the trainer context points into. */
  const char **targets;      /* the control plane's */
  wt_rpc_channel **channels; /* the control plane's; NULL entries if none */
  uint32_t *world_sizes;     /* as last asked; 0 before */
  uint32_t *rank_offsets;    /* 1 + the world sizes before */
  uint64_t *round_ids;       /* 0: no round of ours in progress */
  uint64_t *base_sequences;  /* the start's committed version (delta.md) */
  uint64_t *base_digests;
  wt_trainer_ctx ctx;
  /* The last successful init, for a re-init the client makes by itself:
   * its info (owned), a weak hold on the trainer engine it made, and that
   * trainer's source (borrowed). */
  Wt__V1__WeightTransferInitInfo *init;
  wt_trainer_link *trainer;
  wt_source *init_source;
  /* The adapter set every call names; "" for the model (docs/lora.md). */
  char adapter[WT_ADAPTER_NAME_MAX + 1];
  bool adapter_fixed; /* by the options: an init may not name another */
  /* How long the best-effort abort after a failed call waits for the
   * servers: FAILURE_ABORT_MAX_MS, less when the control timeout or the
   * keepalive timeout is shorter. A server that does not answer by then
   * still ends its round when the failed call's cancel reaches it, or at
   * its round timeout; the caller's error must not wait on a dead peer. */
  int64_t failure_abort_ms;
};

wt_status *wt_sync_client_new_with(wt_control_plane *cp,
                                   const wt_client_options *opts,
                                   wt_sync_client **out) {
  wt_status *st = NULL;
  wt_sync_client *c = NULL;
  *out = NULL;
  if (cp == NULL) WT_FAIL(WT_INVALID_ARGUMENT, "control plane: NULL");
  WT_CHECK(wt_control_ops_check(cp->ops));
  size_t n = cp->ops->server_count(cp->self);
  if (n == 0)
    WT_FAIL(WT_INVALID_ARGUMENT, "control plane '%s': no servers",
            cp->ops->name);
  c = calloc(1, sizeof(*c));
  if (c == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for a client");
  c->cp = *cp;
  *cp = (wt_control_plane){0};
  c->n = n;
  c->targets = calloc(n, sizeof(*c->targets));
  c->channels = calloc(n, sizeof(*c->channels));
  c->world_sizes = calloc(n, sizeof(*c->world_sizes));
  c->rank_offsets = calloc(n, sizeof(*c->rank_offsets));
  c->round_ids = calloc(n, sizeof(*c->round_ids));
  c->base_sequences = calloc(n, sizeof(*c->base_sequences));
  c->base_digests = calloc(n, sizeof(*c->base_digests));
  if (!c->targets || !c->channels || !c->world_sizes || !c->rank_offsets ||
      !c->round_ids || !c->base_sequences || !c->base_digests)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for a client");
  for (size_t k = 0; k < n; k++) {
    c->targets[k] = c->cp.ops->target(c->cp.self, k);
    c->channels[k] =
        c->cp.ops->channel ? c->cp.ops->channel(c->cp.self, k) : NULL;
  }
  c->manual_reinit = opts && opts->manual_reinit;
  if (opts && opts->adapter && *opts->adapter) {
    WT_CHECK(wt_adapter_name_check(opts->adapter, "options.adapter"));
    if (c->channels[0] == NULL)
      WT_FAIL(WT_FAILED_PRECONDITION,
              "options.adapter '%s': adapter sets need wt's own control "
              "plane; control plane '%s' has none",
              opts->adapter, c->cp.ops->name);
    snprintf(c->adapter, sizeof(c->adapter), "%s", opts->adapter);
    c->adapter_fixed = true;
  }
  c->ctx = (wt_trainer_ctx){
      .nservers = n,
      .targets = c->targets,
      .channels = c->channels,
      .world_sizes = c->world_sizes,
      .rank_offsets = c->rank_offsets,
      .round_ids = c->round_ids,
      .base_sequences = c->base_sequences,
      .base_digests = c->base_digests,
      .control_timeout_ms = opts && opts->timeout_ms > 0
                                ? opts->timeout_ms
                                : WT_CLIENT_DEFAULT_TIMEOUT_MS,
      .data_timeout_ms = opts && opts->data_timeout_ms > 0
                             ? opts->data_timeout_ms
                             : WT_CLIENT_DEFAULT_DATA_TIMEOUT_MS,
  };
  int64_t ka = wt_client_keepalive_ms(opts);
  c->failure_abort_ms = c->ctx.control_timeout_ms < FAILURE_ABORT_MAX_MS
                            ? c->ctx.control_timeout_ms
                            : FAILURE_ABORT_MAX_MS;
  if (ka > 0 && ka < c->failure_abort_ms) c->failure_abort_ms = ka;
  *out = c;
  c = NULL;
out:
  if (cp != NULL) wt_control_plane_destroy(cp);
  wt_sync_client_destroy(c);
  return st;
}

wt_status *wt_sync_client_new(const char *const *targets, size_t n,
                              const wt_client_options *opts,
                              wt_sync_client **out) {
  wt_control_plane cp = {0};
  *out = NULL;
  wt_status *st = wt_control_grpc_new(targets, n, opts, &cp);
  if (st != NULL) return st;
  return wt_sync_client_new_with(&cp, opts, out);
}

void wt_sync_client_destroy(wt_sync_client *c) {
  if (c == NULL) return;
  for (size_t i = 0; c->round_ids && i < c->n; i++)
    if (c->round_ids[i] != 0)
      WT_LOGW("client",
              "%s: round %" PRIu64
              " left open; the server's round timeout will end it",
              c->targets[i], c->round_ids[i]);
  wt_trainer_link_put(c->trainer);
  if (c->init != NULL) wt_pb_free(&c->init->base);
  wt_control_plane_destroy(&c->cp);
  free(c->targets);
  free(c->channels);
  free(c->world_sizes);
  free(c->rank_offsets);
  free(c->round_ids);
  free(c->base_sequences);
  free(c->base_digests);
  free(c);
}

const char *wt_sync_client_adapter(const wt_sync_client *c) {
  return c->adapter;
}

size_t wt_sync_client_server_count(const wt_sync_client *c) {
  return c->n;
}

const char *wt_sync_client_target(const wt_sync_client *c, size_t k) {
  return k < c->n ? c->targets[k] : NULL;
}

wt_rpc_channel *wt_sync_client_channel(wt_sync_client *c, size_t k) {
  return k < c->n ? c->channels[k] : NULL;
}

const wt_trainer_ctx *wt_sync_client_trainer_ctx(const wt_sync_client *c) {
  return &c->ctx;
}

const Wt__V1__WeightTransferInitInfo *wt_sync_client_init_info(
    const wt_sync_client *c) {
  return c->init;
}

int64_t wt_sync_client_timeout_ms(const wt_sync_client *c) {
  return c->ctx.control_timeout_ms;
}

int64_t wt_sync_client_data_timeout_ms(const wt_sync_client *c) {
  return c->ctx.data_timeout_ms;
}

uint32_t wt_sync_client_rank_offset(const wt_sync_client *c, size_t k) {
  return k < c->n ? c->rank_offsets[k] : 0;
}

uint32_t wt_sync_client_server_world_size(const wt_sync_client *c, size_t k) {
  return k < c->n ? c->world_sizes[k] : 0;
}

uint64_t wt_sync_client_round_id(const wt_sync_client *c, size_t k) {
  return k < c->n ? c->round_ids[k] : 0;
}

wt_status *wt_sync_client_reader_channel(wt_sync_client *c, size_t k,
                                         const char *method,
                                         wt_rpc_channel **ch) {
  *ch = NULL;
  if (k >= c->n)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "server index %zu: the client has %zu server(s)", k,
                         c->n);
  if (c->channels[k] == NULL)
    return wt_status_new(WT_UNIMPLEMENTED,
                         "%s %s: the control plane '%s' has no channel to a "
                         "wt-server for it",
                         c->targets[k], method, c->cp.ops->name);
  *ch = c->channels[k];
  return NULL;
}

static bool has(const wt_sync_client *c, wt_control_method m) {
  return (c->cp.ops->methods & WT_CONTROL_BIT(m)) != 0;
}

/* ---- one server's calls ------------------------------------------------- */

wt_status *wt_sync_client_server_info(wt_sync_client *c, size_t k,
                                      Wt__V1__ServerInfo **info) {
  wt_status *st = NULL;
  Wt__V1__GetServerInfoRequest req = WT__V1__GET_SERVER_INFO_REQUEST__INIT;
  wt_control_call *call = NULL;
  *info = NULL;
  if (k >= c->n)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "server index %zu: the client has %zu server(s)", k, c->n);
  if (!has(c, WT_CONTROL_SERVER_INFO))
    WT_FAIL(WT_UNIMPLEMENTED,
            "%s GetServerInfo: the control plane '%s' has "
            "no such call",
            c->targets[k], c->cp.ops->name);
  WT_CHECK(c->cp.ops->call_start(c->cp.self, k, WT_CONTROL_SERVER_INFO,
                                 &req.base, c->ctx.control_timeout_ms, &call));
  WT_CHECK(c->cp.ops->call_wait(c->cp.self, call, (ProtobufCMessage **)info));
out:
  return st;
}

/* ---- world size -----------------------------------------------------------
 */

wt_status *wt_sync_client_world_size(wt_sync_client *c, uint32_t *world_size) {
  wt_status *st = NULL;
  wt_fan f = {0};
  Wt__V1__GetWorldSizeRequest req = WT__V1__GET_WORLD_SIZE_REQUEST__INIT;
  uint32_t total = 1;
  *world_size = 0;
  WT_CHECK(wt_fan_alloc(c->n, &f));
  /* A control plane without the call: each server is one rank. */
  for (size_t k = 0; k < c->n && has(c, WT_CONTROL_WORLD_SIZE); k++)
    f.reqs[k] = &req.base;
  WT_CHECK(
      wt_fan_out(&c->cp, WT_CONTROL_WORLD_SIZE, c->ctx.control_timeout_ms, &f));
  for (size_t k = 0; k < c->n; k++) {
    uint32_t ws = f.resps[k]
                      ? ((Wt__V1__GetWorldSizeResponse *)f.resps[k])->world_size
                      : 1;
    if (ws == 0)
      WT_FAIL(WT_FAILED_PRECONDITION, "%s: server reports world size 0",
              c->targets[k]);
    c->world_sizes[k] = ws;
    c->rank_offsets[k] = total;
    if (__builtin_add_overflow(total, ws, &total))
      WT_FAIL(WT_OUT_OF_RANGE, "%s: world size overflows 32 bits",
              c->targets[k]);
  }
  *world_size = total;
out:
  wt_fan_free(&f);
  return st;
}

/* ---- init -----------------------------------------------------------------
 */

/* Per-server copies of an init info: shallow, with the ranks set. */
typedef struct init_copy {
  Wt__V1__WeightTransferInitInfo info;
  Wt__V1__InitWeightTransferEngineRequest req;
} init_copy;

/* Every server's answer was ready, else the first that was not. */
static wt_status *check_ready(wt_sync_client *c, const char *backend,
                              wt_fan *f) {
  wt_status *st = NULL;
  for (size_t k = 0; k < c->n; k++) {
    const Wt__V1__InitWeightTransferEngineResponse *r =
        (const Wt__V1__InitWeightTransferEngineResponse *)f->resps[k];
    if (f->errs[k] == NULL && (r == NULL || !r->ready))
      f->errs[k] = wt_status_new(
          WT_FAILED_PRECONDITION, "%s: backend '%s' not ready: %s",
          c->targets[k], backend,
          r && r->message && *r->message ? r->message : "(no reason given)");
    if (f->errs[k] == NULL) continue;
    if (st == NULL)
      st = wt_status_copy(f->errs[k]);
    else
      WT_LOGE("client", "%s", wt_status_message(f->errs[k]));
  }
  return st;
}

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
  void *self = t ? wt_trainer_self(t) : NULL;
  init_copy *copies = NULL;
  wt_fan f = {0};
  uint32_t world = 0;
  WT_CHECK(wt_sync_client_world_size(c, &world));
  WT_CHECK(wt_fan_alloc(c->n, &f));
  copies = calloc(c->n, sizeof(*copies));
  if (copies == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for init of %zu servers",
            c->n);
  for (size_t k = 0; k < c->n; k++) {
    init_copy *ic = &copies[k];
    ic->info = *info;
    ic->info.backend = (char *)backend;
    ic->info.rank_offset = c->rank_offsets[k];
    ic->info.world_size = world;
    if (ops && ops->server_init_info)
      WT_CHECK(wt_status_prefix(ops->server_init_info(self, k, &ic->info), "%s",
                                c->targets[k]));
    wt__v1__init_weight_transfer_engine_request__init(&ic->req);
    ic->req.init_info = &ic->info;
    f.reqs[k] = &ic->req.base;
  }
  st = wt_fan_start(&c->cp, WT_CONTROL_INIT, c->ctx.data_timeout_ms, &f);
  /* The rendezvous runs while every server's init is pending: a worker's
   * init may block until the trainer joins. */
  if (st == NULL && ops && ops->connect)
    st = wt_status_prefix(ops->connect(self), "trainer engine '%s': connect",
                          backend);
  wt_status *wst = wt_fan_wait(&c->cp, st != NULL, &f);
  wt_status_free(wst); /* check_ready says it again, with the not-ready */
  if (st != NULL) goto out;
  WT_CHECK(check_ready(c, backend, &f));
  /* A backend whose workers listen connects to them now (its errors name
   * the server and worker). */
  for (size_t k = 0; k < c->n && ops && ops->init_response; k++)
    WT_CHECK(ops->init_response(
        self, k, (const Wt__V1__InitWeightTransferEngineResponse *)f.resps[k]));
  WT_LOGD("client", "backend '%s' initialised on %zu server(s), world size %u",
          backend, c->n, (unsigned)world);
out:
  wt_fan_free(&f);
  free(copies);
  return st;
}

/* A deep copy of `info` (the client keeps it to init again by itself). */
static wt_status *init_info_copy(const Wt__V1__WeightTransferInitInfo *info,
                                 Wt__V1__WeightTransferInitInfo **out) {
  return wt_pb_copy(&info->base, (ProtobufCMessage **)out);
}

/* Every server says it holds adapter sets (capability "lora_adapters"):
 * a server before them would drop the spec and re-init its model. */
static wt_status *adapter_capable(wt_sync_client *c, const char *name) {
  for (size_t k = 0; k < c->n; k++) {
    Wt__V1__ServerInfo *info = NULL;
    wt_status *st = wt_sync_client_server_info(c, k, &info);
    if (st != NULL) return st;
    bool capable = false;
    for (size_t i = 0; i < info->n_capabilities && !capable; i++)
      capable = strcmp(info->capabilities[i], "lora_adapters") == 0;
    wt_pb_free(&info->base);
    if (!capable)
      return wt_status_new(WT_FAILED_PRECONDITION,
                           "%s: adapter '%s': this server holds no adapter "
                           "sets (no capability lora_adapters: wt before "
                           "docs/lora.md)",
                           c->targets[k], name);
  }
  return NULL;
}

/* The adapter set of an init (docs/lora.md): the options' or the spec's
 * name into name[WT_ADAPTER_NAME_MAX + 1] ("" for the model), the spec
 * completed from the source's tensors. On wt's own control plane only:
 * another (vLLM's HTTP routes) has no adapter sets. The client names it
 * once the init succeeded. */
static wt_status *adapter_init(wt_sync_client *c,
                               Wt__V1__WeightTransferInitInfo *copy,
                               wt_source *source, char *name) {
  wt_status *st = NULL;
  Wt__V1__AdapterSpec *spec = copy->adapter;
  name[0] = '\0';
  if (spec == NULL && !c->adapter_fixed) return NULL; /* the model's */
  if (c->channels[0] == NULL)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "adapter '%s': adapter sets need wt's own control "
                         "plane; control plane '%s' has none",
                         spec ? spec->name : c->adapter, c->cp.ops->name);
  if (spec == NULL) {
    /* The options name the set: the spec comes from the source. */
    if ((spec = calloc(1, sizeof(*spec))) == NULL)
      return wt_status_new(WT_RESOURCE_EXHAUSTED, "adapter: out of memory");
    wt__v1__adapter_spec__init(spec);
    copy->adapter = spec; /* freed with the copy */
    if ((spec->name = strdup(c->adapter)) == NULL)
      return wt_status_new(WT_RESOURCE_EXHAUSTED, "adapter: out of memory");
  } else if (c->adapter_fixed && strcmp(spec->name, c->adapter) != 0) {
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "init_info.adapter.name '%s', but the client's "
                         "options.adapter is '%s'",
                         spec->name, c->adapter);
  }
  size_t n = 0;
  const wt_tensor_meta *metas = source ? wt_source_metas(source, &n) : NULL;
  WT_CHECK(wt_adapter_spec_complete(spec, metas, n));
  if (copy->shard_plan != NULL)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "init_info: adapter '%s' with a shard_plan; an adapter set's "
            "rounds come from one trainer rank",
            spec->name);
  WT_CHECK(adapter_capable(c, spec->name));
  snprintf(name, WT_ADAPTER_NAME_MAX + 1, "%s", spec->name);
out:
  return st;
}

wt_status *wt_sync_client_init_transfer(
    wt_sync_client *c, const Wt__V1__WeightTransferInitInfo *info,
    wt_source *source, wt_trainer **trainer) {
  wt_status *st = NULL;
  const char *backend = NULL;
  const wt_trainer_ops *ops = NULL;
  wt_trainer *t = NULL;
  wt_trainer_link *link = NULL;
  Wt__V1__WeightTransferInitInfo *copy = NULL;
  char adapter[WT_ADAPTER_NAME_MAX + 1];
  if (trainer) *trainer = NULL;
  WT_CHECK(wt_init_info_backend(info, &backend));
  if (trainer) WT_CHECK(wt_trainer_lookup(backend, &ops));
  WT_CHECK(init_info_copy(info, &copy));
  WT_CHECK(adapter_init(c, copy, source, adapter));
  if (trainer) {
    /* The ranks are known once the servers answered their world size. */
    uint32_t world = 0;
    WT_CHECK(wt_sync_client_world_size(c, &world));
    copy->world_size = world;
    wt_trainer_init_args args = {
        .init_info = copy, .ctx = &c->ctx, .source = source};
    WT_CHECK(wt_trainer_create(backend, &args, &t));
    if ((link = wt_trainer_link_get(t)) == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for a trainer engine");
  }
  WT_CHECK(init_servers(c, copy, backend, t));
  /* Kept for a re-init the client makes by itself (wt_sync_client_start). */
  if (c->init != NULL) wt_pb_free(&c->init->base);
  c->init = copy;
  copy = NULL;
  memcpy(c->adapter, adapter, sizeof(c->adapter));
  c->init_source = source;
  wt_trainer_link_put(c->trainer);
  c->trainer = link;
  link = NULL;
  if (trainer) {
    *trainer = t;
    t = NULL;
  }
out:
  if (copy != NULL) wt_pb_free(&copy->base);
  wt_trainer_link_put(link);
  wt_trainer_destroy(t);
  return st;
}

/* ---- start, abort, re-init ------------------------------------------------
 */

/* Whether a server whose failed start said FAILED_PRECONDITION has a worker
 * in needs_init (asked through GetServerInfo, where the plane has it);
 * `why` says which. */
static bool needs_init(wt_sync_client *c, wt_status **errs, char *why,
                       size_t cap) {
  bool any = false;
  for (size_t k = 0; k < c->n && has(c, WT_CONTROL_SERVER_INFO); k++) {
    if (errs[k] == NULL || wt_status_code(errs[k]) != WT_FAILED_PRECONDITION)
      continue;
    Wt__V1__ServerInfo *info = NULL;
    wt_status *st = wt_sync_client_server_info(c, k, &info);
    if (st != NULL) {
      wt_status_free(st);
      continue;
    }
    /* A set's round: its own state says (docs/lora.md). */
    for (size_t i = 0; c->adapter[0] && i < info->n_adapters; i++) {
      const Wt__V1__AdapterInfo *a = info->adapters[i];
      if (strcmp(a->name, c->adapter) != 0 || a->state == NULL ||
          strcmp(a->state, "needs_init") != 0)
        continue;
      if (!any)
        snprintf(why, cap, "%s adapter '%s': needs a new init", c->targets[k],
                 a->name);
      any = true;
    }
    for (size_t i = 0; !c->adapter[0] && i < info->n_workers; i++) {
      const Wt__V1__WorkerInfo *w = info->workers[i];
      if (w->state == NULL || strcmp(w->state, "needs_init") != 0) continue;
      if (!any)
        snprintf(why, cap, "%s worker %u (%s): %s", c->targets[k], w->rank,
                 w->device, w->reason ? w->reason : "");
      any = true;
      break;
    }
    wt_pb_free(&info->base);
  }
  return any;
}

/* Aborts the rounds this client started, on the servers in `mask` (NULL:
 * every server with a round), best effort, waiting at most deadline_ms.
 * After a failure (`failed`) a server whose link looks cut is not asked:
 * its answer could only come when TCP's user timeout drops the connection,
 * and the caller's error must not wait on it; its round ends at its data
 * deadline (it gets no more data), or at its round timeout. */
static wt_status *abort_rounds(wt_sync_client *c, const char *reason,
                               const bool *mask, int64_t deadline_ms,
                               bool failed) {
  wt_status *st = NULL;
  wt_fan f = {0};
  Wt__V1__AbortWeightUpdateRequest *reqs = NULL;
  WT_CHECK(wt_fan_alloc(c->n, &f));
  reqs = calloc(c->n, sizeof(*reqs));
  if (reqs == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t k = 0; k < c->n; k++) {
    if ((mask && !mask[k]) || c->round_ids[k] == 0) continue;
    wt__v1__abort_weight_update_request__init(&reqs[k]);
    reqs[k].adapter = c->adapter;
    reqs[k].reason = (char *)(reason ? reason : "");
    reqs[k].round_id = c->round_ids[k];
    /* Without the call the round is left to the server's round timeout. */
    int64_t silent_ms = 0;
    if (failed && c->channels[k] != NULL &&
        wt_rpc_channel_link_silent(c->channels[k], &silent_ms))
      WT_LOGW("client",
              "%s: not waiting for its abort: its link looks cut (nothing "
              "acknowledged for %lld ms, after %d retransmissions)",
              c->targets[k], (long long)silent_ms, WT_RPC_SILENT_RETRANSMITS);
    else if (has(c, WT_CONTROL_ABORT))
      f.reqs[k] = &reqs[k].base;
    c->round_ids[k] = 0;
  }
  st = wt_fan_out(&c->cp, WT_CONTROL_ABORT, deadline_ms, &f);
out:
  wt_fan_free(&f);
  free(reqs);
  return st;
}

wt_status *wt_sync_client_abort(wt_sync_client *c, const char *reason) {
  /* Only the servers with a round of ours are asked, with its ids: a round
   * is aborted only by the trainer that started it (another's id is not
   * known here, and a server refuses round id 0). */
  return abort_rounds(c, reason, NULL, c->ctx.control_timeout_ms, false);
}

/* The shard plan this client's rank joined (docs/multirank.md), or NULL:
 * its start, update, push and finish then name its rank. */
static const Wt__V1__ShardPlan *shard_plan(const wt_sync_client *c) {
  return c->init != NULL ? c->init->shard_plan : NULL;
}

/* One StartWeightUpdate on every server. When some fail, the rounds that
 * started elsewhere are aborted; *reinit says whether a failed server has a
 * worker in needs_init (and `why` which). */
static wt_status *start_once(wt_sync_client *c, bool *reinit, char *why,
                             size_t cap) {
  wt_status *st = NULL;
  wt_fan f = {0};
  bool *started = NULL;
  Wt__V1__StartWeightUpdateRequest req =
      WT__V1__START_WEIGHT_UPDATE_REQUEST__INIT;
  req.adapter = c->adapter;
  *reinit = false;
  /* A rank of a shard plan joins the plan's round (docs/multirank.md). */
  const Wt__V1__ShardPlan *plan = shard_plan(c);
  if (plan != NULL) {
    req.trainer_rank = plan->rank;
    req.plan_digest = plan->digest;
  }
  WT_CHECK(wt_fan_alloc(c->n, &f));
  for (size_t k = 0; k < c->n; k++) f.reqs[k] = &req.base;
  st = wt_fan_out(&c->cp, WT_CONTROL_START, c->ctx.control_timeout_ms, &f);
  for (size_t k = 0; k < c->n; k++)
    if (f.errs[k] == NULL && f.resps[k] != NULL) {
      const Wt__V1__StartWeightUpdateResponse *r =
          (const Wt__V1__StartWeightUpdateResponse *)f.resps[k];
      c->round_ids[k] = r->round_id;
      c->base_sequences[k] = r->committed_sequence;
      c->base_digests[k] = r->committed_digest;
    }
  if (st != NULL) {
    started = calloc(c->n, sizeof(*started));
    bool any = false;
    for (size_t k = 0; started && k < c->n; k++)
      any |= started[k] = f.errs[k] == NULL;
    if (any) {
      wt_status *ast = abort_rounds(c, "start failed on another server",
                                    started, c->failure_abort_ms, true);
      if (ast) WT_LOGW("client", "%s", wt_status_message(ast));
      wt_status_free(ast);
    }
    *reinit = needs_init(c, f.errs, why, cap);
  }
out:
  free(started);
  wt_fan_free(&f);
  return st;
}

/* Initialises every server (and the trainer engine in place, if it is
 * still there) again with the last init's info. */
static wt_status *reinit(wt_sync_client *c) {
  wt_status *st = NULL;
  const char *backend = NULL;
  wt_trainer *t = c->trainer ? wt_trainer_link_trainer(c->trainer) : NULL;
  WT_CHECK(wt_init_info_backend(c->init, &backend));
  if (t != NULL) {
    wt_trainer_init_args args = {
        .init_info = c->init, .ctx = &c->ctx, .source = c->init_source};
    WT_CHECK(wt_trainer_reinit(t, &args));
  }
  WT_CHECK(init_servers(c, c->init, backend, t));
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

/* ---- finish ---------------------------------------------------------------
 */

wt_status *wt_sync_client_finish(wt_sync_client *c,
                                 const char *weight_version) {
  wt_status *st = NULL;
  wt_fan f = {0};
  Wt__V1__FinishWeightUpdateRequest *reqs = NULL;
  const Wt__V1__ShardPlan *plan = shard_plan(c);
  if (weight_version == NULL || *weight_version == '\0')
    WT_FAIL(WT_INVALID_ARGUMENT, "weight_version: must not be empty");
  for (size_t k = 0; k < c->n; k++)
    if (c->round_ids[k] == 0)
      WT_FAIL(WT_FAILED_PRECONDITION,
              "FinishWeightUpdate on %s: this client has no round in "
              "progress there (call wt_sync_client_start first)",
              c->targets[k]);
  WT_CHECK(wt_fan_alloc(c->n, &f));
  reqs = calloc(c->n, sizeof(*reqs));
  if (reqs == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t k = 0; k < c->n; k++) {
    wt__v1__finish_weight_update_request__init(&reqs[k]);
    reqs[k].adapter = c->adapter;
    reqs[k].weight_version = (char *)weight_version;
    reqs[k].round_id = c->round_ids[k];
    if (plan != NULL) reqs[k].trainer_rank = plan->rank;
    f.reqs[k] = &reqs[k].base;
  }
  /* Under a shard plan a finish returns when every rank finished, which
   * the server bounds by the data deadline: this call's deadline is past
   * it, so that the server's answer (naming the rank that did not come)
   * arrives first. */
  st = wt_fan_out(&c->cp, WT_CONTROL_FINISH,
                  plan != NULL ? wt_sync_client_data_timeout_ms(c) +
                                     c->ctx.control_timeout_ms
                               : c->ctx.control_timeout_ms,
                  &f);
  for (size_t k = 0; k < c->n; k++)
    if (f.errs[k] == NULL) c->round_ids[k] = 0;
out:
  wt_fan_free(&f);
  free(reqs);
  return st;
}

/* ---- the protocol's update_weights ------------------------------------------
 */

wt_status *wt_sync_client_update_plain(
    wt_sync_client *c, const Wt__V1__WeightTransferUpdateInfo *info) {
  wt_status *st = NULL;
  wt_fan f = {0};
  Wt__V1__UpdateWeightsRequest *reqs = NULL;
  for (size_t k = 0; k < c->n; k++)
    if (c->round_ids[k] == 0)
      return wt_status_new(WT_FAILED_PRECONDITION,
                           "UpdateWeights on %s: this client has no round in "
                           "progress there (start one first)",
                           c->targets[k]);
  WT_CHECK(wt_fan_alloc(c->n, &f));
  reqs = calloc(c->n, sizeof(*reqs));
  if (reqs == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t k = 0; k < c->n; k++) {
    wt__v1__update_weights_request__init(&reqs[k]);
    reqs[k].adapter = c->adapter;
    reqs[k].update_info = (Wt__V1__WeightTransferUpdateInfo *)info;
    reqs[k].round_id = c->round_ids[k];
    if (shard_plan(c) != NULL) reqs[k].trainer_rank = shard_plan(c)->rank;
    f.reqs[k] = &reqs[k].base;
  }
  st = wt_fan_out(&c->cp, WT_CONTROL_UPDATE, c->ctx.data_timeout_ms, &f);
  if (st != NULL) {
    wt_status *ast =
        abort_rounds(c, wt_status_message(st), NULL, c->failure_abort_ms, true);
    if (ast != NULL) {
      WT_LOGW("client", "aborting the failed round: %s",
              wt_status_message(ast));
      wt_status_free(ast);
    }
  }
out:
  wt_fan_free(&f);
  free(reqs);
  return st;
}

/* ---- update ---------------------------------------------------------------
 */

/* Per-server update info from the source's metadata, plus the backend's
 * extras. Strings point into the source's metadata. */
typedef struct update_copy {
  Wt__V1__UpdateWeightsRequest req;
  Wt__V1__WeightTransferUpdateInfo info;
} update_copy;

/* An update's per-server requests, built from the source's lists. */
typedef struct update_reqs {
  wt_update_lists lists;
  update_copy *copies;
  const ProtobufCMessage **reqs;
} update_reqs;

static wt_status *update_reqs_new(wt_sync_client *c, wt_source *src,
                                  update_reqs *u) {
  memset(u, 0, sizeof(*u));
  u->copies = calloc(c->n, sizeof(*u->copies));
  u->reqs = calloc(c->n, sizeof(*u->reqs));
  if (u->copies == NULL || u->reqs == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory for an update");
  return wt_update_lists_build(src, &u->lists);
}

static void update_reqs_free(update_reqs *u) {
  free(u->copies);
  free(u->reqs);
  wt_update_lists_free(&u->lists);
}

/* Server k's request with the whole source's lists, for the backend's
 * extras to be added. */
static Wt__V1__WeightTransferUpdateInfo *update_req_reset(wt_sync_client *c,
                                                          update_reqs *u,
                                                          size_t k) {
  update_copy *uc = &u->copies[k];
  wt__v1__weight_transfer_update_info__init(&uc->info);
  wt_update_lists_apply(&u->lists, &uc->info);
  wt__v1__update_weights_request__init(&uc->req);
  uc->req.adapter = c->adapter;
  uc->req.update_info = &uc->info;
  uc->req.round_id = c->round_ids[k];
  if (shard_plan(c) != NULL) uc->req.trainer_rank = shard_plan(c)->rank;
  u->reqs[k] = &uc->req.base;
  return &uc->info;
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

static void cancel_trainer(void *arg) {
  wt_trainer *t = arg;
  const wt_trainer_ops *ops = wt_trainer_get_ops(t);
  if (ops->cancel) ops->cancel(wt_trainer_self(t));
}

/* How long a server may take to answer once the trainer sent its last
 * byte: the init's data deadline. */
static int64_t answer_within_ms(const wt_sync_client *c) {
  return wt_trainer_data_deadline_ms(c->init, &c->ctx);
}

static wt_status *update_with_calls(wt_sync_client *c, wt_trainer *t,
                                    wt_source *src, wt_progress_fn progress,
                                    void *user) {
  wt_status *st = NULL;
  const wt_trainer_ops *ops = wt_trainer_get_ops(t);
  update_reqs u;
  WT_CHECK(update_reqs_new(c, src, &u));
  for (size_t k = 0; k < c->n; k++) {
    Wt__V1__WeightTransferUpdateInfo *info = update_req_reset(c, &u, k);
    if (ops->update_info)
      WT_CHECK(
          wt_status_prefix(ops->update_info(wt_trainer_self(t), src, k, info),
                           "%s", c->targets[k]));
  }
  send_args a = {.t = t, .src = src, .progress = progress, .user = user};
  wt_fan_sender s = {.send = send_whole,
                     .arg = &a,
                     .cancel = cancel_trainer,
                     .cancel_arg = t,
                     .answer_within_ms = answer_within_ms(c)};
  st = wt_fan_around(&c->cp, u.reqs, c->ctx.data_timeout_ms, &s);
out:
  update_reqs_free(&u);
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
  update_reqs u;
  size_t nparts = 0;
  WT_CHECK(update_reqs_new(c, src, &u));
  WT_CHECK(ops->parts(self, src, &nparts));
  if (nparts > 0) WT_CHECK(ops->prepare_part(self, src, 0));
  size_t nsrc = 0;
  const wt_tensor_meta *metas = wt_source_metas(src, &nsrc);
  wt_progress pr = {.tensors_total = nsrc,
                    .bytes_total = wt_source_total_bytes(src)};
  for (size_t p = 0; p < nparts; p++) {
    size_t tensors = 0;
    for (size_t k = 0; k < c->n; k++) {
      Wt__V1__WeightTransferUpdateInfo *info = update_req_reset(c, &u, k);
      WT_CHECK(wt_status_prefix(ops->part_info(self, src, p, k, info), "%s",
                                c->targets[k]));
      tensors = info->n_names;
    }
    /* The part's first tensor, for the progress of its bytes. */
    size_t first =
        tensors > 0 ? (size_t)(u.copies[0].info.names - u.lists.names) : 0;
    send_args a = {.t = t, .src = src, .part = p + 1};
    wt_fan_sender s = {.send = p + 1 < nparts ? prepare_next : NULL,
                       .arg = &a,
                       .cancel = cancel_trainer,
                       .cancel_arg = t,
                       .answer_within_ms = answer_within_ms(c)};
    WT_CHECK(wt_fan_around(&c->cp, u.reqs, c->ctx.data_timeout_ms, &s));
    for (size_t k = 0; k < c->n; k++) ops->part_done(self, p, k);
    if (progress != NULL) {
      for (size_t i = first; i < first + tensors && i < nsrc; i++)
        pr.bytes_done += metas[i].nbytes;
      pr.tensors_done += tensors;
      progress(&pr, user);
    }
  }
out:
  update_reqs_free(&u);
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
    if (c->round_ids[k] == 0)
      return wt_status_new(WT_FAILED_PRECONDITION,
                           "%s: no round in progress (start one first)",
                           c->targets[k]);
  if (wt_trainer_self(trainer) == NULL)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "trainer engine '%s' has no engine: its last re-init failed; call "
            "init_transfer again",
            wt_trainer_backend(trainer));
  const wt_trainer_ops *ops = wt_trainer_get_ops(trainer);
  uint32_t kinds = ops->memory_kinds;
  WT_CHECK(wt_source_validate_for(src, kinds ? kinds : WT_MEM_HOST_KINDS,
                                  wt_trainer_backend(trainer)));
  if (wt_trainer_needs_update_weights(trainer) && ops->parts != NULL)
    WT_CHECK(update_in_parts(c, trainer, src, progress, user));
  else if (wt_trainer_needs_update_weights(trainer))
    WT_CHECK(update_with_calls(c, trainer, src, progress, user));
  else
    WT_CHECK(ops->send_weights(wt_trainer_self(trainer), src, progress, user));
out:
  if (st != NULL && trainer != NULL && src != NULL) {
    /* A half-sent round must not be finished by mistake. */
    wt_status *ast =
        abort_rounds(c, wt_status_message(st), NULL, c->failure_abort_ms, true);
    if (ast != NULL) {
      WT_LOGW("client", "aborting the failed round: %s",
              wt_status_message(ast));
      wt_status_free(ast);
    }
  }
  return st;
}
