/* bindings.c: wt/bindings.h's JSON wrappers over the sync client. */

#include "wt/bindings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "wt/pb.h"
#include "wt/shard_plan.h"
#include "wt/dtype.h"
#include "wt/trainer.h"

void wt_bindings_free(void *p) {
  free(p);
}

wt_status *wt_bindings_client_new(
    const char *const *targets, size_t n, int64_t timeout_ms,
    int64_t data_timeout_ms, const char *token_file, const char *runtime_base,
    bool no_token_discovery, const char *adapter, int64_t keepalive_timeout_ms,
    int64_t tcp_user_timeout_ms, wt_sync_client **out) {
  wt_client_options o = {.timeout_ms = timeout_ms,
                         .data_timeout_ms = data_timeout_ms,
                         .token_file = token_file,
                         .runtime_base = runtime_base,
                         .no_token_discovery = no_token_discovery,
                         .adapter = adapter,
                         .keepalive_timeout_ms = keepalive_timeout_ms,
                         .tcp_user_timeout_ms = tcp_user_timeout_ms};
  return wt_sync_client_new(targets, n, &o, out);
}

wt_status *wt_bindings_client_new_with(wt_control_plane *cp, int64_t timeout_ms,
                                       int64_t data_timeout_ms,
                                       wt_sync_client **out) {
  wt_client_options o = {.timeout_ms = timeout_ms,
                         .data_timeout_ms = data_timeout_ms};
  return wt_sync_client_new_with(cp, &o, out);
}

/* `json` (wt's form, or vLLM's dict that `from_vllm` rewrites as wt's) as
 * a message of type `desc`; errors name `what`. */
static wt_status *parse(const ProtobufCMessageDescriptor *desc,
                        const char *json,
                        wt_status *(*from_vllm)(const char *, char **),
                        const char *what, ProtobufCMessage **m) {
  char *as_wt = NULL;
  wt_status *st = from_vllm(json, &as_wt);
  if (st == NULL) st = wt_pb_from_json(desc, as_wt ? as_wt : json, what, m);
  free(as_wt);
  return st;
}

wt_status *wt_bindings_init_transfer(wt_sync_client *c,
                                     const char *init_info_json,
                                     bool make_trainer, wt_trainer **trainer) {
  if (trainer) *trainer = NULL;
  ProtobufCMessage *m = NULL;
  wt_status *st =
      parse(&wt__v1__weight_transfer_init_info__descriptor, init_info_json,
            wt_vllm_init_info_from_dict, "init_info", &m);
  if (st != NULL) return st;
  st =
      wt_sync_client_init_transfer(c, (const Wt__V1__WeightTransferInitInfo *)m,
                                   NULL, make_trainer ? trainer : NULL);
  wt_pb_free(m);
  return st;
}

wt_status *wt_bindings_update_info(wt_sync_client *c,
                                   const char *update_info_json) {
  ProtobufCMessage *m = NULL;
  wt_status *st =
      parse(&wt__v1__weight_transfer_update_info__descriptor, update_info_json,
            wt_vllm_update_info_from_dict, "update_info", &m);
  if (st != NULL) return st;
  st = wt_sync_client_update_plain(c,
                                   (const Wt__V1__WeightTransferUpdateInfo *)m);
  wt_pb_free(m);
  return st;
}

wt_status *wt_bindings_server_info(wt_sync_client *c, size_t k, char **json) {
  *json = NULL;
  Wt__V1__ServerInfo *info = NULL;
  wt_status *st = wt_sync_client_server_info(c, k, &info);
  if (st == NULL) st = wt_pb_to_json(&info->base, json);
  if (info) wt_pb_free(&info->base);
  return st;
}

/* The init info the trainer engine of `backend` builds from its options
 * (`options_json`: a JSON object of strings; NULL: none). The caller owns
 * *out (wt_pb_free). */
static wt_status *backend_init_info(const char *backend,
                                    const char *options_json,
                                    Wt__V1__WeightTransferInitInfo **out) {
  *out = NULL;
  /* The options as an init info's map: {"options": {...}}. */
  size_t n = options_json ? strlen(options_json) : 0;
  char *wrapped = malloc(n + 16);
  if (wrapped == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  snprintf(wrapped, n + 16, "{\"options\":%s}", n ? options_json : "{}");
  ProtobufCMessage *m = NULL;
  wt_status *st = wt_pb_from_json(
      &wt__v1__weight_transfer_init_info__descriptor, wrapped, "config", &m);
  free(wrapped);
  if (st != NULL) return st;
  const Wt__V1__WeightTransferInitInfo *w =
      (const Wt__V1__WeightTransferInitInfo *)m;
  wt_backend_option *opts =
      calloc(w->n_options ? w->n_options : 1, sizeof(*opts));
  if (opts == NULL) {
    st = wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  } else {
    for (size_t i = 0; i < w->n_options; i++) {
      opts[i].key = w->options[i]->key;
      opts[i].value = w->options[i]->value;
    }
    st = wt_trainer_init_info(backend, opts, w->n_options, out);
  }
  free(opts);
  wt_pb_free(m);
  return st;
}

wt_status *wt_bindings_trainer_init_info(const char *backend,
                                         const char *options_json,
                                         char **json) {
  *json = NULL;
  Wt__V1__WeightTransferInitInfo *info = NULL;
  wt_status *st = backend_init_info(backend, options_json, &info);
  if (st == NULL) st = wt_pb_to_json(&info->base, json);
  if (info) wt_pb_free(&info->base);
  return st;
}

wt_status *wt_bindings_trainer_init_info_new(const char *backend,
                                             const char *options_json,
                                             const char *init_info_json,
                                             void **out) {
  *out = NULL;
  Wt__V1__WeightTransferInitInfo *info = NULL;
  char *as_wt = NULL;
  wt_status *st = backend_init_info(backend, options_json, &info);
  /* The caller's fields over the backend's, straight into the message. */
  if (st == NULL && init_info_json != NULL && *init_info_json != '\0') {
    st = wt_vllm_init_info_from_dict(init_info_json, &as_wt);
    if (st == NULL)
      st = wt_pb_merge_json(&info->base, as_wt ? as_wt : init_info_json,
                            "init_info");
  }
  if (st == NULL && strcmp(info->backend, backend) != 0) {
    /* The engine's backend, whatever the caller's dict said. */
    char *b = strdup(backend);
    if (b == NULL) {
      st = wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
    } else {
      if (info->backend != protobuf_c_empty_string) free(info->backend);
      info->backend = b;
    }
  }
  free(as_wt);
  if (st == NULL) {
    *out = info;
    info = NULL;
  }
  if (info) wt_pb_free(&info->base);
  return st;
}

void wt_bindings_init_info_free(void *info) {
  if (info) wt_pb_free(info);
}

wt_status *wt_bindings_trainer_init_transfer(wt_sync_client *c,
                                             const void *info,
                                             wt_trainer **trainer) {
  *trainer = NULL;
  if (info == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "init_info: NULL");
  return wt_sync_client_init_transfer(
      c, (const Wt__V1__WeightTransferInitInfo *)info, NULL, trainer);
}

wt_status *wt_bindings_client_init_info(wt_sync_client *c, char **json) {
  *json = NULL;
  const Wt__V1__WeightTransferInitInfo *info = wt_sync_client_init_info(c);
  if (info == NULL)
    return wt_status_new(
        WT_FAILED_PRECONDITION,
        "init_info: the client has not initialized a transfer");
  return wt_pb_to_json(&info->base, json);
}

wt_status *wt_bindings_shard_plan(const char *layouts_json, char **plan_json) {
  ProtobufCMessage *m = NULL;
  Wt__V1__ShardPlan *plan = NULL;
  *plan_json = NULL;
  wt_status *st =
      wt_pb_from_json(&wt__v1__shard_plan__descriptor,
                      layouts_json ? layouts_json : "", "layouts", &m);
  if (st == NULL) st = wt_shard_plan_build((const Wt__V1__ShardPlan *)m, &plan);
  if (st == NULL) st = wt_pb_to_json(&plan->base, plan_json);
  wt_shard_plan_free(plan);
  if (m != NULL) wt_pb_free(m);
  return st;
}

wt_status *wt_bindings_list_parameters(wt_sync_client *c, size_t k,
                                       const char *prefix, char **json) {
  *json = NULL;
  wt_tensor_meta *metas = NULL;
  size_t n = 0;
  wt_status *st = wt_sync_client_list_parameters(c, k, prefix, &metas, &n);
  if (st != NULL) return st;
  Wt__V1__ParameterInfo *ps = calloc(n ? n : 1, sizeof(*ps));
  Wt__V1__ParameterInfo **pp = calloc(n ? n : 1, sizeof(*pp));
  if (ps == NULL || pp == NULL) {
    st = wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  } else {
    for (size_t i = 0; i < n; i++) {
      wt__v1__parameter_info__init(&ps[i]);
      ps[i].name = metas[i].name;
      ps[i].dtype = (char *)wt_dtype_torch_name(metas[i].dtype);
      ps[i].n_shape = (size_t)metas[i].ndim;
      ps[i].shape = (int64_t *)metas[i].shape;
      ps[i].nbytes = metas[i].nbytes;
      pp[i] = &ps[i];
    }
    Wt__V1__ListParametersResponse r = WT__V1__LIST_PARAMETERS_RESPONSE__INIT;
    r.n_parameters = n;
    r.parameters = pp;
    r.total_count = n;
    st = wt_pb_to_json(&r.base, json);
  }
  free(ps);
  free(pp);
  wt_tensor_meta_array_free(metas, n);
  return st;
}
