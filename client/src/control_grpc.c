/* control_grpc.c: wt's own control plane, gRPC channels to wt-servers (see
 * wt/control.h), and the method table every control plane shares. */

#include "wt/rpc.h"
#include "wt/control.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "wt/client.h"
#include "wt/log.h"
#include "wt/secure.h"

/* ---- the methods ----------------------------------------------------------
 */

static const struct {
  const char *name;
  const ProtobufCMessageDescriptor *response;
} methods[WT_CONTROL_METHODS] = {
    [WT_CONTROL_WORLD_SIZE] = {"GetWorldSize",
                               &wt__v1__get_world_size_response__descriptor},
    [WT_CONTROL_INIT] =
        {"InitWeightTransferEngine",
         &wt__v1__init_weight_transfer_engine_response__descriptor},
    [WT_CONTROL_START] = {"StartWeightUpdate",
                          &wt__v1__start_weight_update_response__descriptor},
    [WT_CONTROL_UPDATE] = {"UpdateWeights",
                           &wt__v1__update_weights_response__descriptor},
    [WT_CONTROL_FINISH] = {"FinishWeightUpdate",
                           &wt__v1__finish_weight_update_response__descriptor},
    [WT_CONTROL_ABORT] = {"AbortWeightUpdate",
                          &wt__v1__abort_weight_update_response__descriptor},
    [WT_CONTROL_SERVER_INFO] = {"GetServerInfo",
                                &wt__v1__server_info__descriptor},
};

const char *wt_control_method_name(wt_control_method m) {
  return (unsigned)m < WT_CONTROL_METHODS ? methods[m].name : "unknown";
}

const ProtobufCMessageDescriptor *wt_control_response_type(
    wt_control_method m) {
  return (unsigned)m < WT_CONTROL_METHODS ? methods[m].response : NULL;
}

wt_status *wt_control_ops_check(const wt_control_ops *ops) {
  if (ops == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "control plane: no table");
  const char *name = ops->name ? ops->name : "(unnamed)";
  if (!ops->server_count || !ops->target || !ops->call_start ||
      !ops->call_done || !ops->call_cancel || !ops->call_wait)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "control plane '%s': its table lacks server_count, "
                         "target, call_start, call_done, call_cancel or "
                         "call_wait",
                         name);
  if ((ops->methods & WT_CONTROL_REQUIRED) != WT_CONTROL_REQUIRED)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "control plane '%s': it must have init, start, "
                         "update and finish (methods 0x%x)",
                         name, ops->methods);
  return NULL;
}

void wt_control_plane_destroy(wt_control_plane *cp) {
  if (cp == NULL || cp->ops == NULL) return;
  if (cp->ops->destroy != NULL) cp->ops->destroy(cp->self);
  cp->ops = NULL;
  cp->self = NULL;
}

/* ---- gRPC -----------------------------------------------------------------
 */

typedef struct grpc_plane {
  size_t n;
  char **targets;
  wt_rpc_channel **channels;
} grpc_plane;

static size_t plane_server_count(void *self) {
  return ((grpc_plane *)self)->n;
}

static const char *plane_target(void *self, size_t k) {
  grpc_plane *g = self;
  return k < g->n ? g->targets[k] : NULL;
}

static wt_rpc_channel *plane_channel(void *self, size_t k) {
  grpc_plane *g = self;
  return k < g->n ? g->channels[k] : NULL;
}

static wt_status *plane_call_start(void *self, size_t k, wt_control_method m,
                                   const ProtobufCMessage *request,
                                   int64_t deadline_ms,
                                   wt_control_call **call) {
  grpc_plane *g = self;
  char path[96];
  *call = NULL;
  if (k >= g->n || (unsigned)m >= WT_CONTROL_METHODS)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "control plane 'grpc': server %zu, method %d", k,
                         (int)m);
  snprintf(path, sizeof(path), "/wt.v1.WeightTransfer/%s", methods[m].name);
  wt_rpc_pending *p = NULL;
  wt_status *st = wt_rpc_unary_start(g->channels[k], path, request,
                                     methods[m].response, deadline_ms, &p);
  *call = (wt_control_call *)p;
  return st;
}

static bool plane_call_done(void *self, wt_control_call *call,
                            int64_t wait_ms) {
  (void)self;
  wt_rpc_pending *p = (wt_rpc_pending *)call;
  return wait_ms > 0 ? wt_rpc_pending_done_within(p, wait_ms)
                     : wt_rpc_pending_done(p);
}

static void plane_call_cancel(void *self, wt_control_call *call) {
  (void)self;
  wt_rpc_pending_cancel((wt_rpc_pending *)call);
}

static wt_status *plane_call_wait(void *self, wt_control_call *call,
                                  ProtobufCMessage **response) {
  (void)self;
  return wt_rpc_pending_wait((wt_rpc_pending *)call, response);
}

static void plane_destroy(void *self) {
  grpc_plane *g = self;
  if (g == NULL) return;
  for (size_t k = 0; k < g->n; k++) {
    if (g->channels) wt_rpc_channel_destroy(g->channels[k]);
    if (g->targets) free(g->targets[k]);
  }
  free(g->channels);
  free(g->targets);
  free(g);
}

static const wt_control_ops grpc_ops = {
    .name = "grpc",
    .methods = (1u << WT_CONTROL_METHODS) - 1,
    .server_count = plane_server_count,
    .target = plane_target,
    .call_start = plane_call_start,
    .call_done = plane_call_done,
    .call_cancel = plane_call_cancel,
    .call_wait = plane_call_wait,
    .channel = plane_channel,
    .destroy = plane_destroy,
};

wt_status *wt_control_grpc_new(const char *const *targets, size_t n,
                               const wt_client_options *opts,
                               wt_control_plane *out) {
  wt_status *st = NULL;
  grpc_plane *g = NULL;
  char *token = NULL;
  *out = (wt_control_plane){0};
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
  g = calloc(1, sizeof(*g));
  if (g == NULL || (g->targets = calloc(n, sizeof(*g->targets))) == NULL ||
      (g->channels = calloc(n, sizeof(*g->channels))) == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for a client");
  if (opts != NULL && opts->token_file != NULL)
    WT_CHECK(wt_token_read(opts->token_file, &token));
  bool discover = token == NULL && !(opts && opts->no_token_discovery);
  int64_t timeout = opts && opts->timeout_ms > 0 ? opts->timeout_ms
                                                 : WT_CLIENT_DEFAULT_TIMEOUT_MS;
  int64_t ka = wt_client_keepalive_ms(opts);
  if (ka > INT32_MAX)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "keepalive_timeout_ms: %lld is above %d (a negative value turns "
            "keepalive off)",
            (long long)ka, INT32_MAX);
  int64_t ut = wt_client_tcp_user_timeout_ms(opts);
  if (ut > INT32_MAX)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "tcp_user_timeout_ms: %lld is above %d (a negative value keeps "
            "gRPC's own, the keepalive timeout)",
            (long long)ut, INT32_MAX);
  wt_rpc_channel_options copts = {.default_deadline_ms = timeout,
                                  .tls = opts ? opts->tls : NULL,
                                  .token = token,
                                  .keepalive_time_ms = ka < 0 ? -1 : 0,
                                  .keepalive_timeout_ms = ka < 0 ? 0 : (int)ka,
                                  .tcp_user_timeout_ms = (int)ut};
  for (size_t i = 0; i < n; i++) {
    g->n = i + 1;
    if ((g->targets[i] = strdup(targets[i])) == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for a client");
    /* A server of this user on this host that generated its tokens. */
    char *found = NULL;
    if (discover)
      WT_CHECK(wt_token_discover(opts ? opts->runtime_base : NULL, targets[i],
                                 &found));
    copts.token = found ? found : token;
    st = wt_rpc_channel_new(targets[i], &copts, &g->channels[i]);
    wt_secret_free(found);
    if (st != NULL) goto out;
  }
  *out = (wt_control_plane){&grpc_ops, g};
  g = NULL;
out:
  if (token != NULL) {
    explicit_bzero(token, strlen(token));
    free(token);
  }
  plane_destroy(g);
  return st;
}
