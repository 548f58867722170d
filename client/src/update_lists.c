/* update_lists.c: an update info's lists (names, dtype names, shapes) from
 * a source's metadata, for every backend that states an update (see
 * wt/trainer.h). */

#include <stdlib.h>
#include <string.h>

#include "wt/dtype.h"
#include "wt/trainer.h"

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
