/* tensor.c: tensor metadata with overflow-checked sizes (see wt/tensor.h). */

#include "wt/tensor.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for WT_MAX_NDIM dimensions of a sign, 19 digits and ", " each. */
#define SHAPE_TEXT_MAX (WT_MAX_NDIM * 23 + 8)

wt_status *wt_shape_numel(const int64_t *shape, int ndim, uint64_t *out) {
  if (ndim < 0 || ndim > WT_MAX_NDIM)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "shape has %d dimensions; wt allows 0..%d", ndim,
                         WT_MAX_NDIM);
  if (ndim > 0 && shape == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "shape of %d dimensions is missing (NULL)", ndim);
  char text[SHAPE_TEXT_MAX];
  int has_zero = 0;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return wt_status_new(
          WT_INVALID_ARGUMENT,
          "shape %s: dimension %d is %" PRId64 "; dimensions must be >= 0",
          wt_shape_format(shape, ndim, text, sizeof(text)), i, shape[i]);
    if (shape[i] == 0) has_zero = 1;
  }
  /* A zero anywhere makes the tensor empty however large the other
   * dimensions are, as in PyTorch. */
  if (has_zero) {
    *out = 0;
    return NULL;
  }
  uint64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (__builtin_mul_overflow(n, (uint64_t)shape[i], &n))
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "shape %s: element count overflows 64 bits "
                           "(at dimension %d)",
                           wt_shape_format(shape, ndim, text, sizeof(text)), i);
  }
  *out = n;
  return NULL;
}

/* Both counts of a tensor, so that wt_tensor_meta_init() checks once. */
static wt_status *tensor_sizes(wt_dtype dt, const int64_t *shape, int ndim,
                               uint64_t *numel, uint64_t *nbytes) {
  size_t itemsize = wt_dtype_itemsize(dt);
  if (itemsize == 0)
    return wt_status_new(WT_INVALID_ARGUMENT, "dtype %d is not a wt dtype",
                         (int)dt);
  uint64_t n = 0, bytes = 0;
  wt_status *st = wt_shape_numel(shape, ndim, &n);
  if (st != NULL) return st;
  if (__builtin_mul_overflow(n, (uint64_t)itemsize, &bytes)) {
    char text[SHAPE_TEXT_MAX];
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "shape %s of %s: %" PRIu64
                         " elements of %zu bytes overflow 64 bits",
                         wt_shape_format(shape, ndim, text, sizeof(text)),
                         wt_dtype_torch_name(dt), n, itemsize);
  }
  *numel = n;
  *nbytes = bytes;
  return NULL;
}

wt_status *wt_tensor_nbytes(wt_dtype dt, const int64_t *shape, int ndim,
                            uint64_t *out) {
  uint64_t numel = 0;
  return tensor_sizes(dt, shape, ndim, &numel, out);
}

wt_status *wt_tensor_meta_init(wt_tensor_meta *m, const char *name, wt_dtype dt,
                               const int64_t *shape, int ndim) {
  wt_status *st = NULL;
  memset(m, 0, sizeof(*m));
  const char *label = name ? name : "(unnamed)";
  uint64_t numel = 0, nbytes = 0;
  st = tensor_sizes(dt, shape, ndim, &numel, &nbytes);
  if (st != NULL) return wt_status_prefix(st, "tensor '%s'", label);
  if (name != NULL) {
    m->name = strdup(name);
    if (m->name == NULL)
      return wt_status_new(WT_RESOURCE_EXHAUSTED,
                           "tensor '%s': out of memory copying its name",
                           label);
  }
  m->dtype = dt;
  m->ndim = ndim;
  if (ndim > 0) memcpy(m->shape, shape, (size_t)ndim * sizeof(shape[0]));
  m->numel = numel;
  m->nbytes = nbytes;
  return NULL;
}

void wt_tensor_meta_clear(wt_tensor_meta *m) {
  if (m == NULL) return;
  free(m->name);
  memset(m, 0, sizeof(*m));
}

void wt_tensor_meta_array_free(wt_tensor_meta *metas, size_t n) {
  if (metas == NULL) return;
  for (size_t i = 0; i < n; i++) wt_tensor_meta_clear(&metas[i]);
  free(metas);
}

/* Appends to a fixed buffer, remembering whether anything was cut off. */
typedef struct text_buf {
  char *buf;
  size_t len;
  size_t pos;
  int truncated;
} text_buf;

static void text_append(text_buf *t, const char *s) {
  size_t n = strlen(s);
  size_t room = t->len - 1 - t->pos;
  if (n > room) {
    n = room;
    t->truncated = 1;
  }
  memcpy(t->buf + t->pos, s, n);
  t->pos += n;
  t->buf[t->pos] = '\0';
}

char *wt_shape_format(const int64_t *shape, int ndim, char *buf, size_t len) {
  if (buf == NULL || len == 0) return buf;
  text_buf t = {buf, len, 0, 0};
  buf[0] = '\0';
  if (ndim < 0 || (ndim > 0 && shape == NULL)) {
    text_append(&t, "[?]");
  } else {
    text_append(&t, "[");
    for (int i = 0; i < ndim && !t.truncated; i++) {
      char num[24];
      snprintf(num, sizeof(num), i ? ", %" PRId64 : "%" PRId64, shape[i]);
      text_append(&t, num);
    }
    text_append(&t, "]");
  }
  if (t.truncated && len >= 4) memcpy(buf + len - 4, "...", 4);
  return buf;
}

int wt_tensor_meta_same_layout(const wt_tensor_meta *a,
                               const wt_tensor_meta *b) {
  if (a == NULL || b == NULL) return 0;
  if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
  if (a->ndim < 0 || a->ndim > WT_MAX_NDIM) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return 0;
  return 1;
}
