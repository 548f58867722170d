/* control_vllm.c: wt.v1 requests as the dicts an unmodified vLLM worker
 * accepts (wt/bindings.h, WT_CONTROL_VLLM_DICTS), for a control plane that
 * is vLLM's own (HTTPVLLMWeightSyncClient, RayVLLMWeightSyncClient, a
 * framework's wrapper of vLLM's routes).
 *
 * The fields and rules are vLLM's `vllm.distributed.weight_transfer`, as
 * documented for its main branch in September 2026 (docs.vllm.ai,
 * nccl_common.NCCLWeightTransferInitInfo, keyword-only;
 * nccl_engine.NCCLWeightTransferUpdateInfo):
 *
 *   init_info:   nccl_unique_id_b64 (standard base64 of the 128 bytes of
 *                ncclGetUniqueId; the unique-id rendezvous, so no
 *                master_address or master_port: vLLM drops the unset mode),
 *                rank_offset, world_size, packed, packed_buffer_size_bytes,
 *                packed_num_buffers
 *   update_info: names, dtype_names (PyTorch's names), shapes (lists of
 *                ints)
 *   finish:      weight_version, when there is one
 *
 * Only `nccl` has a vLLM worker engine that wt's trainer can feed: vLLM's
 * ipc handles are torch pickles (wt's are protobuf), and vLLM has no grpc
 * or ucx engine. Any other backend is INVALID_ARGUMENT naming it. */

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "wt/base64.h"
#include "wt/init_info.h"
#include "wt/nccl_seam.h"

static wt_status *dump(json_t *o, const char *what, char **out) {
  char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  if (s == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "%s as vLLM's dict: out of memory", what);
  *out = s;
  return NULL;
}

static wt_status *init_dict(const Wt__V1__InitWeightTransferEngineRequest *r,
                            char **out) {
  const Wt__V1__WeightTransferInitInfo *i = r->init_info;
  const char *backend = i && i->backend ? i->backend : "";
  if (i == NULL ||
      i->backend_init_case !=
          WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_NCCL ||
      i->nccl == NULL)
    return wt_status_new(
        WT_INVALID_ARGUMENT,
        "backend '%s' to a vLLM control plane: a vLLM worker receives only "
        "nccl from wt (vLLM's ipc handles are torch pickles; it has no grpc "
        "or ucx engine)",
        backend);
  const Wt__V1__NcclInitInfo *n = i->nccl;
  if (n->nccl_unique_id.len != WT_NCCL_UNIQUE_ID_BYTES)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "init_info.nccl.nccl_unique_id: %zu bytes, not %d",
                         n->nccl_unique_id.len, WT_NCCL_UNIQUE_ID_BYTES);
  char b64[4 * ((WT_NCCL_UNIQUE_ID_BYTES + 2) / 3) + 1];
  wt_base64_encode(n->nccl_unique_id.data, n->nccl_unique_id.len, b64);
  uint64_t buffer_bytes = 0;
  uint32_t num_buffers = 0;
  wt_status *st = wt_nccl_packing(n, &buffer_bytes, &num_buffers);
  if (st != NULL) return st;
  json_t *info =
      json_pack("{s:s, s:I, s:I, s:b, s:I, s:I}", "nccl_unique_id_b64", b64,
                "rank_offset", (json_int_t)i->rank_offset, "world_size",
                (json_int_t)i->world_size, "packed", (int)n->packed,
                "packed_buffer_size_bytes", (json_int_t)buffer_bytes,
                "packed_num_buffers", (json_int_t)num_buffers);
  return dump(info ? json_pack("{s:o}", "init_info", info) : NULL,
              "InitWeightTransferEngine", out);
}

static wt_status *update_dict(const Wt__V1__UpdateWeightsRequest *r,
                              char **out) {
  const Wt__V1__WeightTransferUpdateInfo *u = r->update_info;
  json_t *names = json_array(), *dtypes = json_array(), *shapes = json_array();
  for (size_t k = 0; u && k < u->n_names; k++)
    json_array_append_new(names, json_string(u->names[k]));
  for (size_t k = 0; u && k < u->n_dtype_names; k++)
    json_array_append_new(dtypes, json_string(u->dtype_names[k]));
  for (size_t k = 0; u && k < u->n_shapes; k++) {
    json_t *dims = json_array();
    for (size_t d = 0; u->shapes[k] && d < u->shapes[k]->n_dims; d++)
      json_array_append_new(dims, json_integer(u->shapes[k]->dims[d]));
    json_array_append_new(shapes, dims);
  }
  json_t *info = json_pack("{s:o, s:o, s:o}", "names", names, "dtype_names",
                           dtypes, "shapes", shapes);
  return dump(info ? json_pack("{s:o}", "update_info", info) : NULL,
              "UpdateWeights", out);
}

wt_status *wt_vllm_request_json(wt_control_method m,
                                const ProtobufCMessage *req, char **out) {
  *out = NULL;
  switch (m) {
    case WT_CONTROL_INIT:
      return init_dict((const Wt__V1__InitWeightTransferEngineRequest *)req,
                       out);
    case WT_CONTROL_UPDATE:
      return update_dict((const Wt__V1__UpdateWeightsRequest *)req, out);
    case WT_CONTROL_FINISH: {
      const Wt__V1__FinishWeightUpdateRequest *f =
          (const Wt__V1__FinishWeightUpdateRequest *)req;
      json_t *o = json_object();
      if (o && f->weight_version && *f->weight_version)
        json_object_set_new(o, "weight_version",
                            json_string(f->weight_version));
      return dump(o, "FinishWeightUpdate", out);
    }
    default:
      return dump(json_object(), wt_control_method_name(m), out);
  }
}

/* ---- vLLM's dicts into wt ------------------------------------------------
 * The other way: the dicts vLLM's own trainer engines hand a
 * VLLMWeightSyncClient (wt's Client among them), as wt.v1's JSON. The same
 * fields as above, so this file is the one place that knows them. */

/* Set and not null (vLLM's asdict() leaves the unused mode's fields null). */
static json_t *field(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  return json_is_null(v) ? NULL : v;
}

static int has_any(json_t *o, const char *const *keys) {
  for (size_t k = 0; keys[k]; k++)
    if (field(o, keys[k])) return 1;
  return 0;
}

wt_status *wt_vllm_init_info_from_dict(const char *json, char **out) {
  *out = NULL;
  static const char *const vllm_keys[] = {
      "nccl_unique_id_b64", "master_address", "master_port", NULL};
  /* Every field of vLLM's NCCLWeightTransferInitInfo in unique-id mode. */
  static const char *const known[] = {
      "nccl_unique_id_b64", "packed",      "packed_buffer_size_bytes",
      "packed_num_buffers", "rank_offset", "world_size",
      "master_address",     "master_port", NULL};
  json_error_t e;
  json_t *in = json_loads(json ? json : "", JSON_REJECT_DUPLICATES, &e);
  if (!json_is_object(in) || json_object_get(in, "backend") ||
      !has_any(in, vllm_keys)) {
    json_decref(in);
    return NULL; /* wt's own form (or not JSON: wt_pb_from_json says why) */
  }
  wt_status *st = NULL;
  const char *tcp = field(in, "master_address") ? "master_address"
                    : field(in, "master_port")  ? "master_port"
                                                : NULL;
  const char *key;
  json_t *v;
  json_t *id = field(in, "nccl_unique_id_b64");
  if (tcp != NULL) {
    st = wt_status_new(
        WT_INVALID_ARGUMENT,
        "init_info.%s: vLLM's TCPStore rendezvous (master_address and "
        "master_port) needs torch on every rank; wt's nccl backend takes "
        "vLLM's unique-id mode: init_info.nccl_unique_id_b64 (standard base64 "
        "of the 128 bytes of ncclGetUniqueId) with rank_offset and world_size",
        tcp);
    goto out;
  }
  json_object_foreach(in, key, v) {
    int ok = 0;
    for (size_t k = 0; known[k]; k++) ok |= strcmp(key, known[k]) == 0;
    if (!ok) {
      st = wt_status_new(WT_INVALID_ARGUMENT,
                         "init_info.%s: not a field of vLLM's "
                         "NCCLWeightTransferInitInfo (unique-id mode)",
                         key);
      goto out;
    }
  }
  if (!json_is_string(id)) {
    st = wt_status_new(WT_INVALID_ARGUMENT,
                       "init_info.nccl_unique_id_b64: a base64 string");
    goto out;
  }
  /* wt's JSON carries bytes as standard base64 too: the id goes as it is. */
  json_t *nccl = json_pack("{s:O}", "nccl_unique_id", id);
  json_t *o =
      nccl ? json_pack("{s:s, s:o}", "backend", "nccl", "nccl", nccl) : NULL;
  json_object_foreach(in, key, v) {
    if (o == NULL || json_is_null(v) ||
        strcmp(key, "nccl_unique_id_b64") == 0 ||
        strcmp(key, "master_address") == 0 || strcmp(key, "master_port") == 0)
      continue;
    if (strcmp(key, "rank_offset") == 0 || strcmp(key, "world_size") == 0)
      json_object_set(o, key, v);
    else if (strcmp(key, "packed") == 0)
      json_object_set(nccl, key, v);
    else /* the sizes are wrapper messages in wt.v1 (unset: the defaults) */
      json_object_set_new(nccl, key, json_pack("{s:O}", "value", v));
  }
  st = dump(o, "init_info", out);
out:
  json_decref(in);
  return st;
}

wt_status *wt_vllm_update_info_from_dict(const char *json, char **out) {
  *out = NULL;
  json_error_t e;
  json_t *in = json_loads(json ? json : "", JSON_REJECT_DUPLICATES, &e);
  json_t *shapes = json_is_object(in) ? json_object_get(in, "shapes") : NULL;
  if (!json_is_array(shapes) || json_array_size(shapes) == 0 ||
      !json_is_array(json_array_get(shapes, 0))) {
    json_decref(in);
    return NULL; /* wt's own form: shapes as {"dims": [...]} */
  }
  json_t *as_wt = json_array();
  size_t k;
  json_t *s;
  wt_status *st = NULL;
  json_array_foreach(shapes, k, s) {
    if (!json_is_array(s)) {
      st = wt_status_new(WT_INVALID_ARGUMENT,
                         "update_info.shapes[%zu]: a list of ints, as the "
                         "shapes before it",
                         k);
      break;
    }
    json_array_append_new(as_wt, json_pack("{s:O}", "dims", s));
  }
  if (st == NULL) {
    json_object_set_new(in, "shapes", as_wt);
    return dump(in, "update_info", out);
  }
  json_decref(as_wt);
  json_decref(in);
  return st;
}
