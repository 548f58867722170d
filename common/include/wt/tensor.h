/* wt/tensor.h: tensor metadata with overflow-checked sizes. */
#ifndef WT_TENSOR_H
#define WT_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "wt/dtype.h"
#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* Most dimensions a wt tensor may have (PyTorch allows 64; no model weight
 * comes close). More is INVALID_ARGUMENT. */
#define WT_MAX_NDIM 16

/* Name, dtype and shape of one tensor. `name` is owned by the struct when it
 * comes from wt_tensor_meta_init() and is released by wt_tensor_meta_clear();
 * arrays of metadata are released with wt_tensor_meta_array_free(). */
typedef struct wt_tensor_meta {
  char *name;
  wt_dtype dtype;
  int ndim;
  int64_t shape[WT_MAX_NDIM];
  uint64_t numel;  /* product of shape; 1 for a scalar (ndim 0) */
  uint64_t nbytes; /* numel * itemsize */
} wt_tensor_meta;

/* Element count of `shape[0..ndim)`. Negative dimensions, ndim outside
 * 0..WT_MAX_NDIM, and a product that overflows 64 bits are
 * INVALID_ARGUMENT. */
wt_status *wt_shape_numel(const int64_t *shape, int ndim, uint64_t *out);

/* Byte count of a tensor: numel * itemsize, overflow-checked. */
wt_status *wt_tensor_nbytes(wt_dtype dt, const int64_t *shape, int ndim,
                            uint64_t *out);

/* Fills `m`: copies `name` (strdup), checks shape and sizes. On error `m` is
 * left cleared (name NULL). The caller releases with wt_tensor_meta_clear(). */
wt_status *wt_tensor_meta_init(wt_tensor_meta *m, const char *name, wt_dtype dt,
                               const int64_t *shape, int ndim);

/* Frees m->name and zeroes `m`. NULL is ignored. */
void wt_tensor_meta_clear(wt_tensor_meta *m);

/* Clears `n` entries and frees the array itself. NULL is ignored. */
void wt_tensor_meta_array_free(wt_tensor_meta *metas, size_t n);

/* Writes "[4, 8]" (or "[]" for a scalar) into buf (always NUL-terminated,
 * truncated with "..." if small). Returns buf. */
char *wt_shape_format(const int64_t *shape, int ndim, char *buf, size_t len);

/* True when dtype and shape are equal (names are not compared). */
int wt_tensor_meta_same_layout(const wt_tensor_meta *a,
                               const wt_tensor_meta *b);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_TENSOR_H */
