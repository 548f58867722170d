/* inspect.c: the reader calls of one server (parameters, versions, watch,
 * checksums; see wt/client.h). They are wt's own methods, beyond a round,
 * and need the control plane's gRPC channel. */

#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "wt/rpc.h"
#include "wt/dtype.h"
#include "wt/pb.h"

#define METHOD(name) "/wt.v1.WeightTransfer/" name

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
  wt_rpc_channel *ch = NULL;
  wt_status *st = NULL;
  wt_tensor_meta *all = NULL;
  size_t count = 0, cap = 0;
  char *token = NULL;
  Wt__V1__ListParametersResponse *resp = NULL;
  *metas = NULL;
  *n = 0;
  WT_CHECK(wt_sync_client_reader_channel(c, k, "ListParameters", &ch));
  for (;;) {
    Wt__V1__ListParametersRequest req = WT__V1__LIST_PARAMETERS_REQUEST__INIT;
    req.name_prefix = (char *)(prefix ? prefix : "");
    req.adapter = (char *)wt_sync_client_adapter(c);
    req.page_token = token ? token : (char *)"";
    WT_CHECK(wt_rpc_unary(ch, METHOD("ListParameters"), &req.base,
                          &wt__v1__list_parameters_response__descriptor,
                          wt_sync_client_timeout_ms(c),
                          (ProtobufCMessage **)&resp));
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
                           "%s", wt_sync_client_target(c, k)));
      count++;
    }
    if (resp->next_page_token == NULL || *resp->next_page_token == '\0') break;
    /* A server that hands back the token it was given would loop forever. */
    if ((token && strcmp(token, resp->next_page_token) == 0) ||
        resp->n_parameters == 0)
      WT_FAIL(WT_INTERNAL, "%s: ListParameters paging does not advance",
              wt_sync_client_target(c, k));
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
  wt_rpc_channel *ch = NULL;
  wt_status *st = NULL;
  Wt__V1__GetWeightVersionRequest req =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  Wt__V1__WeightVersion *resp = NULL;
  memset(out, 0, sizeof(*out));
  req.adapter = (char *)wt_sync_client_adapter(c);
  WT_CHECK(wt_sync_client_reader_channel(c, k, "GetWeightVersion", &ch));
  WT_CHECK(wt_rpc_unary(ch, METHOD("GetWeightVersion"), &req.base,
                        &wt__v1__weight_version__descriptor,
                        wt_sync_client_timeout_ms(c),
                        (ProtobufCMessage **)&resp));
  WT_CHECK(version_from_pb(resp, out));
out:
  wt_pb_free(resp ? &resp->base : NULL);
  return st;
}

wt_status *wt_sync_client_watch(wt_sync_client *c, size_t k,
                                int64_t deadline_ms, wt_version_fn fn,
                                void *user) {
  wt_rpc_channel *ch = NULL;
  wt_status *st = NULL;
  Wt__V1__WatchWeightVersionRequest req =
      WT__V1__WATCH_WEIGHT_VERSION_REQUEST__INIT;
  wt_rpc_server_stream *s = NULL;
  ProtobufCMessage *msg = NULL;
  wt_weight_version v = {0};
  req.adapter = (char *)wt_sync_client_adapter(c);
  WT_CHECK(wt_sync_client_reader_channel(c, k, "WatchWeightVersion", &ch));
  WT_CHECK(wt_rpc_server_stream_open(ch, METHOD("WatchWeightVersion"),
                                     &req.base, deadline_ms, &s));
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
  wt_rpc_channel *ch = NULL;
  wt_status *st = NULL;
  Wt__V1__ChecksumWeightsRequest req = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  Wt__V1__ChecksumWeightsResponse *resp = NULL;
  wt_param_checksum *sums = NULL;
  size_t count = 0;
  *out = NULL;
  *nout = 0;
  WT_CHECK(wt_sync_client_reader_channel(c, k, "ChecksumWeights", &ch));
  req.n_names = n;
  req.names = (char **)names;
  req.adapter = (char *)wt_sync_client_adapter(c);
  req.algorithm = alg == WT_HASH_XXH3_64
                      ? WT__V1__CHECKSUM_ALGORITHM__CHECKSUM_ALGORITHM_XXH3_64
                      : WT__V1__CHECKSUM_ALGORITHM__CHECKSUM_ALGORITHM_SHA256;
  req.all_workers = all_workers;
  WT_CHECK(wt_rpc_unary(ch, METHOD("ChecksumWeights"), &req.base,
                        &wt__v1__checksum_weights_response__descriptor,
                        wt_sync_client_data_timeout_ms(c),
                        (ProtobufCMessage **)&resp));
  sums = calloc(resp->n_checksums > 0 ? resp->n_checksums : 1, sizeof(*sums));
  if (sums == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for %zu checksums",
            resp->n_checksums);
  for (size_t i = 0; i < resp->n_checksums; i++) {
    const Wt__V1__ParameterChecksum *pc = resp->checksums[i];
    if (strlen(pc->digest) >= WT_DIGEST_HEX_MAX)
      WT_FAIL(WT_INTERNAL, "%s: digest of '%s' is %zu characters long",
              wt_sync_client_target(c, k), pc->name, strlen(pc->digest));
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
