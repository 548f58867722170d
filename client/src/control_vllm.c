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
#include "wt/nccl.h"

static wt_status *dump(json_t *o, const char *what, char **out) {
  char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  if (s == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "%s as vLLM's dict: out of memory",
                         what);
  *out = s;
  return NULL;
}

static wt_status *init_dict(const Wt__V1__InitWeightTransferEngineRequest *r,
                            char **out) {
  const Wt__V1__WeightTransferInitInfo *i = r->init_info;
  const char *backend = i && i->backend ? i->backend : "";
  if (i == NULL || i->backend_init_case !=
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
  json_t *info = json_pack("{s:s, s:I, s:I, s:b, s:I, s:I}", "nccl_unique_id_b64",
                           b64, "rank_offset", (json_int_t)i->rank_offset,
                           "world_size", (json_int_t)i->world_size, "packed",
                           (int)n->packed, "packed_buffer_size_bytes",
                           (json_int_t)buffer_bytes, "packed_num_buffers",
                           (json_int_t)num_buffers);
  return dump(info ? json_pack("{s:o}", "init_info", info) : NULL,
              "InitWeightTransferEngine", out);
}

static wt_status *update_dict(const Wt__V1__UpdateWeightsRequest *r, char **out) {
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

wt_status *wt_vllm_request_json(wt_control_method m, const ProtobufCMessage *req,
                                char **out) {
  *out = NULL;
  switch (m) {
    case WT_CONTROL_INIT:
      return init_dict((const Wt__V1__InitWeightTransferEngineRequest *)req, out);
    case WT_CONTROL_UPDATE:
      return update_dict((const Wt__V1__UpdateWeightsRequest *)req, out);
    case WT_CONTROL_FINISH: {
      const Wt__V1__FinishWeightUpdateRequest *f =
          (const Wt__V1__FinishWeightUpdateRequest *)req;
      json_t *o = json_object();
      if (o && f->weight_version && *f->weight_version)
        json_object_set_new(o, "weight_version", json_string(f->weight_version));
      return dump(o, "FinishWeightUpdate", out);
    }
    default:
      return dump(json_object(), wt_control_method_name(m), out);
  }
}
