/* validate.c: an update info checked against the model before any byte
 * moves (see wt_srv_resolve_update in server_state.h). */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_state.h"
#include "wt/pb.h"
#include "wt/dtype.h"
#include "wt/tensor.h"

void wt_srv_resolved_clear(wt_srv_resolved *r) {
  free(r->index);
  free(r->nbytes);
  free(r->boxes);
  free(r->dims);
  free(r->rank_first);
  for (uint32_t i = 0; r->rank_info != NULL && i < r->nranks; i++)
    if (r->rank_info[i] != NULL) wt_pb_free(&r->rank_info[i]->base);
  free(r->rank_info);
  memset(r, 0, sizeof(*r));
}

void wt_srv_resolved_done(wt_srv_resolved *r, size_t n,
                          const Wt__V1__WeightTransferUpdateInfo *info) {
  r->u.n = n;
  r->u.index = r->index;
  r->u.nbytes = r->nbytes;
  r->u.boxes = r->boxes;
  r->u.packed = info->packed;
  r->u.info = info;
}

wt_status *wt_srv_resolve_update(wt_server *srv,
                                 const Wt__V1__WeightTransferUpdateInfo *info,
                                 wt_srv_resolved *out) {
  wt_status *st = NULL;
  const wt_param_store *store = wt_worker_store(srv->workers[0]);
  size_t nmodel = wt_param_store_count(store);
  long *seen = NULL; /* position in the request + 1, per model tensor */
  memset(out, 0, sizeof(*out));
  if (info == NULL) WT_FAIL(WT_INVALID_ARGUMENT, "update_info is missing");
  size_t n = info->n_names;
  if (info->n_dtype_names != n || info->n_shapes != n)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "update_info has %zu names, %zu dtype_names and %zu shapes; the "
            "three lists must have equal lengths",
            n, info->n_dtype_names, info->n_shapes);
  if (info->n_packed_tensor_sizes != 0 && info->n_packed_tensor_sizes != n)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "update_info has %zu packed_tensor_sizes for %zu names; give one "
            "per name or none",
            info->n_packed_tensor_sizes, n);
  out->index = calloc(n ? n : 1, sizeof(*out->index));
  out->nbytes = calloc(n ? n : 1, sizeof(*out->nbytes));
  seen = calloc(nmodel ? nmodel : 1, sizeof(*seen));
  if (out->index == NULL || out->nbytes == NULL || seen == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "update_info: out of memory for %zu names",
            n);
  for (size_t k = 0; k < n; k++) {
    const char *name = info->names[k];
    size_t idx = 0;
    wt_status *nf = wt_param_store_find(store, name, &idx);
    if (nf != NULL) {
      wt_status_free(nf);
      WT_FAIL(WT_INVALID_ARGUMENT,
              "parameter '%s' (update_info.names[%zu]) is not in the model",
              name, k);
    }
    if (seen[idx] != 0)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "parameter '%s' appears twice in update_info.names (at %ld and "
              "%zu)",
              name, seen[idx] - 1, k);
    seen[idx] = (long)k + 1;
    const wt_tensor_meta *m = wt_param_store_meta(store, idx);
    wt_dtype dt;
    wt_status *bad = wt_dtype_from_name(info->dtype_names[k], &dt);
    if (bad != NULL) {
      st = wt_status_prefix(bad, "parameter '%s'", name);
      goto out;
    }
    if (dt != m->dtype)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "parameter '%s': dtype %s does not match the model's %s", name,
              wt_dtype_torch_name(dt), wt_dtype_torch_name(m->dtype));
    const Wt__V1__Shape *sh = info->shapes[k];
    size_t ndim = sh ? sh->n_dims : 0;
    const int64_t *dims = sh ? sh->dims : NULL;
    bool same = ndim == (size_t)m->ndim;
    for (size_t d = 0; same && d < ndim; d++) same = dims[d] == m->shape[d];
    if (!same) {
      char got[128], want[128];
      if (ndim > WT_MAX_NDIM)
        snprintf(got, sizeof(got), "of %zu dimensions", ndim);
      else
        wt_shape_format(dims, (int)ndim, got, sizeof(got));
      WT_FAIL(WT_INVALID_ARGUMENT,
              "parameter '%s': shape %s does not match the model's %s", name,
              got, wt_shape_format(m->shape, m->ndim, want, sizeof(want)));
    }
    if (info->n_packed_tensor_sizes != 0 &&
        info->packed_tensor_sizes[k] != m->nbytes)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "parameter '%s': update_info.packed_tensor_sizes[%zu] is %" PRIu64
              " bytes; the model's tensor has %" PRIu64,
              name, k, info->packed_tensor_sizes[k], m->nbytes);
    out->index[k] = idx;
    out->nbytes[k] = m->nbytes;
    out->u.total_bytes += m->nbytes;
  }
  wt_srv_resolved_done(out, n, info);
out:
  free(seen);
  if (st != NULL) wt_srv_resolved_clear(out);
  return st;
}
