/* sources.c: sources and checkpoints for tests (see sources.h). */

#include "sources.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/safetensors.h"
#include "wt/synthetic.h"
#include "wt_test.h"

void wtt_held_load(const char *layout, uint64_t seed, wtt_held *h) {
  memset(h, 0, sizeof(*h));
  WT_ASSERT_OK(wt_synthetic_layout(layout, &h->metas, &h->n));
  h->data = calloc(h->n, sizeof(*h->data));
  h->tensors = calloc(h->n, sizeof(*h->tensors));
  CU_ASSERT_FATAL(h->data && h->tensors);
  for (size_t i = 0; i < h->n; i++) {
    const wt_tensor_meta *m = &h->metas[i];
    h->data[i] = malloc(m->nbytes ? m->nbytes : 1);
    CU_ASSERT_FATAL(h->data[i] != NULL);
    wt_synthetic_fill(m, seed, 0, h->data[i], m->nbytes);
    h->tensors[i] = (wt_source_tensor){.name = m->name,
                                       .dtype = m->dtype,
                                       .ndim = m->ndim,
                                       .shape = m->shape,
                                       .data = h->data[i],
                                       .nbytes = m->nbytes};
  }
}

void wtt_held_free(wtt_held *h) {
  for (size_t i = 0; i < h->n; i++) free(h->data[i]);
  free(h->data);
  free(h->tensors);
  wt_tensor_meta_array_free(h->metas, h->n);
}

static wt_status *scripted_rewind(void *impl) {
  ((wtt_scripted *)impl)->next = 0;
  return NULL;
}

static wt_status *scripted_next(void *impl, wt_source_tensor *t, bool *done) {
  wtt_scripted *s = impl;
  if (s->next == s->n) {
    *done = true;
    return NULL;
  }
  *t = s->yields[s->next++];
  return NULL;
}

const wt_source_vtable wtt_scripted_vt = {
    .kind = "wtt_scripted", .rewind = scripted_rewind, .next = scripted_next};

/* Metadata a/b/c: f32 [2, 3], bf16 [4], u8 []. */
static const int64_t shape_a[] = {2, 3}, shape_b[] = {4};
const int64_t wtt_shape_bad[] = {3, 2};
static float data_a[6] = {1, 2, 3, 4, 5, 6};
static uint16_t data_b[4] = {7, 8, 9, 10};
static uint8_t data_c[1] = {42};

void wtt_abc_metas(wt_tensor_meta m[3]) {
  WT_ASSERT_OK(wt_tensor_meta_init(&m[0], "a", WT_DTYPE_FLOAT32, shape_a, 2));
  WT_ASSERT_OK(wt_tensor_meta_init(&m[1], "b", WT_DTYPE_BFLOAT16, shape_b, 1));
  WT_ASSERT_OK(wt_tensor_meta_init(&m[2], "c", WT_DTYPE_UINT8, NULL, 0));
}

const wt_source_tensor wtt_t_a = {.name = "a",
                                  .dtype = WT_DTYPE_FLOAT32,
                                  .ndim = 2,
                                  .shape = shape_a,
                                  .data = data_a,
                                  .nbytes = 24};
const wt_source_tensor wtt_t_b = {.name = "b",
                                  .dtype = WT_DTYPE_BFLOAT16,
                                  .ndim = 1,
                                  .shape = shape_b,
                                  .data = data_b,
                                  .nbytes = 8};
const wt_source_tensor wtt_t_c = {
    .name = "c", .dtype = WT_DTYPE_UINT8, .data = data_c, .nbytes = 1};

/* Validates a wtt_scripted source over a/b/c yielding `yields`. */
wt_status *wtt_validate_scripted(const wt_source_tensor *yields, size_t n) {
  wt_tensor_meta m[3] = {0};
  wt_source *src = NULL;
  wtt_scripted *s = calloc(1, sizeof(*s));
  s->yields = yields;
  s->n = n;
  wtt_abc_metas(m);
  /* The wtt_scripted impl is freed by hand: its vtable has no destroy. */
  wt_status *st = wt_source_new(&wtt_scripted_vt, s, m, 3, &src);
  if (st == NULL) st = wt_source_validate(src);
  wt_source_destroy(src);
  free(s);
  for (int i = 0; i < 3; i++) wt_tensor_meta_clear(&m[i]);
  return st;
}

/* Writes `layout` with `seed` as one safetensors file, or as two shards and
 * an index when `sharded`; returns the path to open (caller frees). */
char *wtt_write_layout(const char *dir, const char *layout, uint64_t seed,
                       bool sharded) {
  wtt_held h;
  wtt_held_load(layout, seed, &h);
  wt_st_write_tensor *w = calloc(h.n, sizeof(*w));
  for (size_t i = 0; i < h.n; i++)
    w[i] = (wt_st_write_tensor){h.metas[i].name, h.metas[i].dtype,
                                h.metas[i].ndim, h.metas[i].shape, h.data[i]};
  char *path = NULL;
  if (!sharded) {
    CU_ASSERT_FATAL(asprintf(&path, "%s/model.safetensors", dir) > 0);
    WT_ASSERT_OK(wt_safetensors_write(path, w, h.n, NULL));
  } else {
    char *p1 = NULL, *p2 = NULL;
    size_t half = h.n / 2;
    CU_ASSERT_FATAL(asprintf(&p1, "%s/model-00001-of-00002.safetensors", dir) >
                    0);
    CU_ASSERT_FATAL(asprintf(&p2, "%s/model-00002-of-00002.safetensors", dir) >
                    0);
    WT_ASSERT_OK(wt_safetensors_write(p1, w, half, NULL));
    WT_ASSERT_OK(wt_safetensors_write(p2, w + half, h.n - half, NULL));
    CU_ASSERT_FATAL(asprintf(&path, "%s/model.safetensors.index.json", dir) >
                    0);
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    fprintf(f, "{\"metadata\": {}, \"weight_map\": {");
    for (size_t i = 0; i < h.n; i++)
      fprintf(f, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"",
              i ? ", " : "", h.metas[i].name, i < half ? 1 : 2);
    fprintf(f, "}}\n");
    fclose(f);
    free(p1);
    free(p2);
  }
  free(w);
  wtt_held_free(&h);
  return path;
}
