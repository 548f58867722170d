/* sources.c: weight sources (see wt/source.h): the checked iterator, and the
 * checkpoint, memory and synthetic implementations. */

#include "wt/source.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/cuda.h"
#include "wt/synthetic.h"

struct wt_source {
  const wt_source_vtable *vt;
  void *impl;
  wt_tensor_meta *metas;
  size_t n;
  uint64_t total_bytes;
  size_t cursor; /* index of the tensor the next yield must be */
  void *scratch; /* wt_source_tensor_data's reusable buffer */
  size_t scratch_cap;
};

/* Bytes hashed or copied per step when a tensor has no pointer. */
#define READ_STEP ((size_t)1 << 20)

static int cmp_name_ptr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A name twice in one round would make the receiver write one tensor twice
 * and never another; catch it where the list is made. */
static wt_status *check_unique_names(const wt_tensor_meta *metas, size_t n) {
  wt_status *st = NULL;
  const char **names = NULL;
  if (n < 2) return NULL;
  names = malloc(n * sizeof(*names));
  if (names == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for %zu tensor names", n);
  for (size_t i = 0; i < n; i++) names[i] = metas[i].name;
  qsort(names, n, sizeof(*names), cmp_name_ptr);
  for (size_t i = 1; i < n; i++)
    if (strcmp(names[i - 1], names[i]) == 0)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "tensor '%s' appears twice in the source's metadata", names[i]);
out:
  free(names);
  return st;
}

wt_status *wt_source_new(const wt_source_vtable *vt, void *impl,
                         const wt_tensor_meta *metas, size_t n,
                         wt_source **out) {
  wt_status *st = NULL;
  wt_source *src = NULL;
  *out = NULL;
  if (vt == NULL || vt->next == NULL || vt->rewind == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT, "a source needs rewind and next functions");
  if (n > 0 && metas == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT, "%zu tensors declared with NULL metadata", n);
  for (size_t i = 0; i < n; i++)
    if (metas[i].name == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT, "tensor %zu of the metadata has no name", i);
  WT_CHECK(check_unique_names(metas, n));
  src = calloc(1, sizeof(*src));
  if (src == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for a source");
  src->vt = vt;
  src->impl = impl;
  impl = NULL;
  if (n > 0) {
    src->metas = calloc(n, sizeof(*src->metas));
    if (src->metas == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for %zu tensors", n);
  }
  for (size_t i = 0; i < n; i++) {
    WT_CHECK(wt_tensor_meta_init(&src->metas[i], metas[i].name, metas[i].dtype,
                                 metas[i].shape, metas[i].ndim));
    src->n = i + 1;
    if (__builtin_add_overflow(src->total_bytes, src->metas[i].nbytes,
                               &src->total_bytes))
      WT_FAIL(WT_INVALID_ARGUMENT,
              "tensor '%s': total size of the source overflows 64 bits",
              metas[i].name);
  }
  *out = src;
  src = NULL;
out:
  if (impl != NULL && vt != NULL && vt->destroy != NULL) vt->destroy(impl);
  wt_source_destroy(src);
  return st;
}

void wt_source_destroy(wt_source *src) {
  if (src == NULL) return;
  if (src->vt->destroy != NULL) src->vt->destroy(src->impl);
  wt_tensor_meta_array_free(src->metas, src->n);
  free(src->scratch);
  free(src);
}

const wt_tensor_meta *wt_source_metas(const wt_source *src, size_t *n) {
  if (n != NULL) *n = src->n;
  return src->metas;
}

size_t wt_source_count(const wt_source *src) {
  return src->n;
}

uint64_t wt_source_total_bytes(const wt_source *src) {
  return src->total_bytes;
}

const char *wt_source_kind(const wt_source *src) {
  return src->vt->kind != NULL ? src->vt->kind : "custom";
}

wt_status *wt_source_rewind(wt_source *src) {
  wt_status *st = NULL;
  WT_CHECK(src->vt->rewind(src->impl));
  src->cursor = 0;
out:
  return st;
}

/* The contract of a yield, checked for every source alike. */
static wt_status *check_yield(const wt_source *src, const wt_source_tensor *t,
                              size_t index) {
  wt_status *st = NULL;
  const wt_tensor_meta *m = &src->metas[index];
  char got[96], want[96];
  if (t->name == NULL || strcmp(t->name, m->name) != 0)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s source: tensor %zu is '%s' but the metadata has '%s' there "
            "(a source must yield in metadata order)",
            wt_source_kind(src), index, t->name ? t->name : "(unnamed)",
            m->name);
  if (t->dtype != m->dtype) {
    const char *gn = wt_dtype_torch_name(t->dtype);
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s source: tensor '%s': dtype %s does not match the metadata's %s",
            wt_source_kind(src), m->name, gn ? gn : "(invalid)",
            wt_dtype_torch_name(m->dtype));
  }
  bool same_shape = t->ndim == m->ndim && (t->ndim == 0 || t->shape != NULL);
  for (int d = 0; same_shape && d < t->ndim; d++)
    same_shape = t->shape[d] == m->shape[d];
  if (!same_shape) {
    if (t->ndim < 0 || t->ndim > WT_MAX_NDIM || t->shape == NULL)
      snprintf(got, sizeof(got), "(%d dimensions)", t->ndim);
    else
      wt_shape_format(t->shape, t->ndim, got, sizeof(got));
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s source: tensor '%s': shape %s does not match the metadata's %s",
            wt_source_kind(src), m->name, got,
            wt_shape_format(m->shape, m->ndim, want, sizeof(want)));
  }
  if (t->nbytes != m->nbytes)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s source: tensor '%s': %" PRIu64
            " bytes yielded, but dtype x shape is %" PRIu64 " bytes",
            wt_source_kind(src), m->name, t->nbytes, m->nbytes);
  if (t->data == NULL && t->nbytes > 0 && src->vt->read == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s source: tensor '%s': yielded without data, and the source "
            "cannot produce its bytes",
            wt_source_kind(src), m->name);
  if ((unsigned)t->kind >= WT_MEM_KIND_COUNT)
    WT_FAIL(WT_INVALID_ARGUMENT, "%s source: tensor '%s': memory kind %d",
            wt_source_kind(src), m->name, (int)t->kind);
  if (t->kind == WT_MEM_DEVICE &&
      (t->device.type != WT_DEVICE_CUDA || t->data == NULL))
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s source: tensor '%s': device memory needs a cuda:N device and "
            "a data pointer",
            wt_source_kind(src), m->name);
out:
  return st;
}

wt_status *wt_source_next(wt_source *src, wt_source_tensor *t, bool *done) {
  wt_status *st = NULL;
  bool end = false;
  memset(t, 0, sizeof(*t));
  *done = false;
  WT_CHECK(src->vt->next(src->impl, t, &end));
  if (end) {
    if (src->cursor < src->n)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s source ended after %zu of %zu tensors: tensor '%s' was "
              "never yielded",
              wt_source_kind(src), src->cursor, src->n,
              src->metas[src->cursor].name);
    *done = true;
    goto out;
  }
  if (src->cursor >= src->n)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s source yielded tensor '%s' after the %zu tensors of its "
            "metadata",
            wt_source_kind(src), t->name ? t->name : "(unnamed)", src->n);
  WT_CHECK(check_yield(src, t, src->cursor));
  src->cursor++;
out:
  return st;
}

wt_status *wt_source_read(wt_source *src, const wt_source_tensor *t,
                          uint64_t offset, void *buf, size_t len) {
  wt_status *st = NULL;
  if (offset > t->nbytes || len > t->nbytes - offset)
    WT_FAIL(WT_OUT_OF_RANGE,
            "tensor '%s': bytes [%" PRIu64 ", %" PRIu64
            ") requested of a tensor of %" PRIu64 " bytes",
            t->name, offset, offset + (uint64_t)len, t->nbytes);
  if (len == 0) goto out;
  if (t->data != NULL) {
    WT_CHECK(wt_status_prefix(
        wt_mem_copy_to_host(t->kind, t->device, buf,
                            (const char *)t->data + offset, len),
        "tensor '%s'", t->name));
    goto out;
  }
  WT_CHECK(src->vt->read(src->impl, t, offset, buf, len));
out:
  return st;
}

wt_status *wt_source_gpu(wt_source *src, int *device) {
  *device = -1;
  if (src != NULL) {
    wt_status *st = wt_source_rewind(src);
    wt_source_tensor x;
    bool done = false;
    if (st == NULL) st = wt_source_next(src, &x, &done);
    if (st == NULL && !done && x.kind == WT_MEM_DEVICE)
      *device = x.device.index;
    wt_status_free(st);
    st = wt_source_rewind(src);
    if (st != NULL || *device >= 0) return st;
  }
  const wt_cuda_api *api = NULL;
  wt_status *st = wt_cuda_api_get(&api);
  if (st == NULL) st = api->get_device(device);
  if (st == NULL && *device < 0) *device = 0;
  return st;
}

wt_status *wt_source_tensor_ready(const wt_source_tensor *t) {
  if (t->cuda_event == NULL && t->cuda_stream == NULL) return NULL;
  const wt_cuda_api *api = NULL;
  wt_status *st = wt_cuda_api_get(&api);
  if (st == NULL)
    st = t->cuda_event ? api->event_synchronize(t->cuda_event)
                       : api->stream_synchronize(t->cuda_stream);
  return wt_status_prefix(st, "tensor '%s': waiting for its bytes", t->name);
}

wt_status *wt_source_tensor_data(wt_source *src, const wt_source_tensor *t,
                                 const void **data) {
  wt_status *st = NULL;
  *data = NULL;
  if ((t->data != NULL && wt_mem_kind_host_addressable(t->kind)) ||
      t->nbytes == 0) {
    *data = t->data != NULL ? t->data : src->scratch;
    goto out;
  }
  if (t->nbytes > SIZE_MAX)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "tensor '%s': %" PRIu64 " bytes", t->name,
            t->nbytes);
  if (t->nbytes > src->scratch_cap) {
    void *p = realloc(src->scratch, (size_t)t->nbytes);
    if (p == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED,
              "tensor '%s': out of memory for %" PRIu64 " bytes", t->name,
              t->nbytes);
    src->scratch = p;
    src->scratch_cap = (size_t)t->nbytes;
  }
  WT_CHECK(wt_source_read(src, t, 0, src->scratch, (size_t)t->nbytes));
  *data = src->scratch;
out:
  return st;
}

wt_status *wt_source_validate_for(wt_source *src, uint32_t kinds,
                                  const char *backend) {
  wt_status *st = NULL;
  wt_source_tensor t;
  bool done = false;
  WT_CHECK(wt_source_rewind(src));
  for (;;) {
    WT_CHECK(wt_source_next(src, &t, &done));
    if (done) break;
    if (!(kinds & WT_MEM_BIT(t.kind))) {
      char dev[WT_DEVICE_NAME_MAX], list[64];
      WT_FAIL(WT_INVALID_ARGUMENT,
              "tensor '%s' is in %s memory (%s); backend '%s' sends from %s "
              "memory only",
              t.name, wt_mem_kind_name(t.kind), wt_device_format(t.device, dev),
              backend ? backend : "?",
              wt_mem_kinds_format(kinds, list, sizeof(list)));
    }
  }
  WT_CHECK(wt_source_rewind(src));
out:
  return st;
}

wt_status *wt_source_validate(wt_source *src) {
  return wt_source_validate_for(src, WT_MEM_ALL_KINDS, NULL);
}

wt_status *wt_source_checksums(wt_source *src, wt_hash_alg alg,
                               char (**digests)[WT_DIGEST_HEX_MAX]) {
  wt_status *st = NULL;
  char(*hex)[WT_DIGEST_HEX_MAX] = NULL;
  wt_hasher *h = NULL;
  unsigned char *buf = NULL;
  wt_source_tensor t;
  bool done = false;
  *digests = NULL;
  hex = calloc(src->n > 0 ? src->n : 1, sizeof(*hex));
  if (hex == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for %zu digests", src->n);
  WT_CHECK(wt_hasher_new(alg, &h));
  WT_CHECK(wt_source_rewind(src));
  for (size_t i = 0;; i++) {
    WT_CHECK(wt_source_next(src, &t, &done));
    if (done) break;
    wt_hasher_reset(h);
    WT_CHECK(wt_source_tensor_ready(&t));
    if (t.data != NULL && wt_mem_kind_host_addressable(t.kind)) {
      wt_hasher_update(h, t.data, (size_t)t.nbytes);
    } else {
      if (buf == NULL && (buf = malloc(READ_STEP)) == NULL)
        WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for a read buffer");
      for (uint64_t off = 0; off < t.nbytes; off += READ_STEP) {
        size_t len =
            t.nbytes - off < READ_STEP ? (size_t)(t.nbytes - off) : READ_STEP;
        WT_CHECK(wt_source_read(src, &t, off, buf, len));
        wt_hasher_update(h, buf, len);
      }
    }
    wt_hasher_final_hex(h, hex[i]);
  }
  WT_CHECK(wt_source_rewind(src));
  *digests = hex;
  hex = NULL;
out:
  free(buf);
  wt_hasher_free(h);
  free(hex);
  return st;
}

/* ---- checkpoint: tensors point into the read-only mapping -------------- */

typedef struct ckpt_source {
  const wt_checkpoint *ck;
  wt_checkpoint *owned;
  size_t next;
} ckpt_source;

static wt_status *ckpt_rewind(void *impl) {
  ((ckpt_source *)impl)->next = 0;
  return NULL;
}

static wt_status *ckpt_next(void *impl, wt_source_tensor *t, bool *done) {
  ckpt_source *cs = impl;
  const wt_st_tensor *st = wt_checkpoint_at(cs->ck, cs->next);
  if (st == NULL) {
    *done = true;
    return NULL;
  }
  cs->next++;
  t->name = st->meta.name;
  t->dtype = st->meta.dtype;
  t->ndim = st->meta.ndim;
  t->shape = st->meta.shape;
  t->data = st->data;
  t->nbytes = st->meta.nbytes;
  return NULL;
}

static void ckpt_destroy(void *impl) {
  ckpt_source *cs = impl;
  if (cs == NULL) return;
  wt_checkpoint_close(cs->owned);
  free(cs);
}

static const wt_source_vtable ckpt_vt = {
    .kind = "checkpoint",
    .rewind = ckpt_rewind,
    .next = ckpt_next,
    .destroy = ckpt_destroy,
};

static wt_status *source_over_checkpoint(const wt_checkpoint *ck,
                                         wt_checkpoint *owned,
                                         wt_source **out) {
  wt_status *st = NULL;
  size_t n = wt_checkpoint_count(ck);
  wt_tensor_meta *metas = NULL;
  ckpt_source *cs = calloc(1, sizeof(*cs));
  if (cs == NULL) {
    wt_checkpoint_close(owned);
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for a checkpoint source");
  }
  cs->ck = ck;
  cs->owned = owned;
  /* Shallow copies: wt_source_new copies what it keeps. */
  metas = calloc(n > 0 ? n : 1, sizeof(*metas));
  if (metas == NULL) {
    ckpt_destroy(cs);
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for %zu tensors", n);
  }
  for (size_t i = 0; i < n; i++) metas[i] = wt_checkpoint_at(ck, i)->meta;
  WT_CHECK(wt_source_new(&ckpt_vt, cs, metas, n, out));
out:
  free(metas);
  return st;
}

wt_status *wt_source_checkpoint(const wt_checkpoint *ck, wt_source **out) {
  *out = NULL;
  return source_over_checkpoint(ck, NULL, out);
}

wt_status *wt_source_checkpoint_open(const char *path, wt_source **out) {
  wt_status *st = NULL;
  wt_checkpoint *ck = NULL;
  *out = NULL;
  WT_CHECK(wt_checkpoint_open(path, &ck));
  WT_CHECK(source_over_checkpoint(ck, ck, out));
out:
  return st;
}

/* ---- memory: caller's buffers ------------------------------------------ */

typedef struct mem_tensor {
  wt_tensor_meta meta;
  const void *data;
  wt_mem_kind kind;
  wt_device device;
  void *cuda_stream, *cuda_event;
} mem_tensor;

typedef struct mem_source {
  mem_tensor *tensors;
  size_t n;
  size_t next;
} mem_source;

static wt_status *mem_rewind(void *impl) {
  ((mem_source *)impl)->next = 0;
  return NULL;
}

static wt_status *mem_next(void *impl, wt_source_tensor *t, bool *done) {
  mem_source *ms = impl;
  if (ms->next >= ms->n) {
    *done = true;
    return NULL;
  }
  const mem_tensor *mt = &ms->tensors[ms->next++];
  t->name = mt->meta.name;
  t->dtype = mt->meta.dtype;
  t->ndim = mt->meta.ndim;
  t->shape = mt->meta.shape;
  t->data = mt->data;
  t->nbytes = mt->meta.nbytes;
  t->kind = mt->kind;
  t->device = mt->device;
  t->cuda_stream = mt->cuda_stream;
  t->cuda_event = mt->cuda_event;
  return NULL;
}

static void mem_destroy(void *impl) {
  mem_source *ms = impl;
  if (ms == NULL) return;
  for (size_t i = 0; i < ms->n; i++) wt_tensor_meta_clear(&ms->tensors[i].meta);
  free(ms->tensors);
  free(ms);
}

static const wt_source_vtable mem_vt = {
    .kind = "memory",
    .rewind = mem_rewind,
    .next = mem_next,
    .destroy = mem_destroy,
};

wt_status *wt_source_memory(const wt_source_tensor *tensors, size_t n,
                            wt_source **out) {
  wt_status *st = NULL;
  wt_tensor_meta *metas = NULL;
  mem_source *ms = NULL;
  *out = NULL;
  if (n > 0 && tensors == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT, "%zu tensors given as NULL", n);
  ms = calloc(1, sizeof(*ms));
  if (ms == NULL ||
      (ms->tensors = calloc(n > 0 ? n : 1, sizeof(*ms->tensors))) == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for %zu tensors", n);
  for (size_t i = 0; i < n; i++) {
    const wt_source_tensor *t = &tensors[i];
    const char *name = t->name ? t->name : "(unnamed)";
    if (t->ndim > 0 && t->shape == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT, "tensor '%s': %d dimensions, no shape", name,
              t->ndim);
    WT_CHECK(wt_status_prefix(wt_tensor_meta_init(&ms->tensors[i].meta, name,
                                                  t->dtype, t->shape, t->ndim),
                              "tensor '%s'", name));
    ms->n = i + 1;
    if (t->nbytes != ms->tensors[i].meta.nbytes) {
      char shape[96];
      WT_FAIL(WT_INVALID_ARGUMENT,
              "tensor '%s': %" PRIu64 " bytes given, but %s x %s is %" PRIu64
              " bytes",
              name, t->nbytes, wt_dtype_torch_name(t->dtype),
              wt_shape_format(t->shape, t->ndim, shape, sizeof(shape)),
              ms->tensors[i].meta.nbytes);
    }
    if (t->data == NULL && t->nbytes > 0)
      WT_FAIL(WT_INVALID_ARGUMENT, "tensor '%s': data is NULL", name);
    if ((unsigned)t->kind >= WT_MEM_KIND_COUNT)
      WT_FAIL(WT_INVALID_ARGUMENT, "tensor '%s': memory kind %d is unknown",
              name, (int)t->kind);
    if (t->kind == WT_MEM_DEVICE && t->device.type != WT_DEVICE_CUDA)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "tensor '%s': device memory needs a cuda:N device, not cpu",
              name);
    ms->tensors[i].data = t->data;
    ms->tensors[i].kind = t->kind;
    ms->tensors[i].device = t->device;
    ms->tensors[i].cuda_stream = t->cuda_stream;
    ms->tensors[i].cuda_event = t->cuda_event;
  }
  metas = calloc(n > 0 ? n : 1, sizeof(*metas));
  if (metas == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for %zu tensors", n);
  for (size_t i = 0; i < n; i++) metas[i] = ms->tensors[i].meta;
  st = wt_source_new(&mem_vt, ms, metas, n, out);
  ms = NULL; /* owned by the source now, even on error */
out:
  free(metas);
  mem_destroy(ms);
  return st;
}

/* ---- synthetic: bytes computed on demand -------------------------------- */

typedef struct synth_source {
  wt_tensor_meta *metas;
  size_t n;
  size_t next;
  uint64_t seed;
} synth_source;

static wt_status *synth_rewind(void *impl) {
  ((synth_source *)impl)->next = 0;
  return NULL;
}

static wt_status *synth_next(void *impl, wt_source_tensor *t, bool *done) {
  synth_source *ss = impl;
  if (ss->next >= ss->n) {
    *done = true;
    return NULL;
  }
  const wt_tensor_meta *m = &ss->metas[ss->next++];
  t->name = m->name;
  t->dtype = m->dtype;
  t->ndim = m->ndim;
  t->shape = m->shape;
  t->data = NULL;
  t->nbytes = m->nbytes;
  return NULL;
}

static wt_status *synth_read(void *impl, const wt_source_tensor *t,
                             uint64_t offset, void *buf, size_t len) {
  synth_source *ss = impl;
  /* `t` is the tensor last yielded, whose metadata is ours. */
  const wt_tensor_meta *m = &ss->metas[ss->next > 0 ? ss->next - 1 : 0];
  if (ss->next == 0 || strcmp(m->name, t->name) != 0)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "synthetic source: tensor '%s' is not the one last "
                         "yielded",
                         t->name);
  wt_synthetic_fill(m, ss->seed, offset, buf, len);
  return NULL;
}

static void synth_destroy(void *impl) {
  synth_source *ss = impl;
  if (ss == NULL) return;
  wt_tensor_meta_array_free(ss->metas, ss->n);
  free(ss);
}

static const wt_source_vtable synth_vt = {
    .kind = "synthetic",
    .rewind = synth_rewind,
    .next = synth_next,
    .read = synth_read,
    .destroy = synth_destroy,
};

wt_status *wt_source_synthetic(const char *layout, uint64_t seed,
                               wt_source **out) {
  wt_status *st = NULL;
  synth_source *ss = calloc(1, sizeof(*ss));
  *out = NULL;
  if (ss == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for a synthetic source");
  ss->seed = seed;
  WT_CHECK(wt_synthetic_layout(layout, &ss->metas, &ss->n));
  st = wt_source_new(&synth_vt, ss, ss->metas, ss->n, out);
  ss = NULL; /* owned by the source now, even on error */
out:
  synth_destroy(ss);
  return st;
}

wt_status *wt_source_synthetic_set_seed(wt_source *src, uint64_t seed) {
  if (src->vt != &synth_vt)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "a seed applies to a synthetic source, not a %s one",
                         wt_source_kind(src));
  ((synth_source *)src->impl)->seed = seed;
  return NULL;
}
