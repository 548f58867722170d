/* param_store.c: a worker's parameters and the staging of a round (see
 * wt/param_store.h). */

#include "wt/param_store.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "wt/log.h"
#include "wt/synthetic.h"
#include "wt/lock.h"

#define ALIGN 64u
/* The bounce buffer of a device store's reads and digests. */
#define BOUNCE_BYTES ((size_t)4 << 20)

/* Where a tensor stands in the current round. */
enum {
  T_UNTOUCHED = 0,
  T_PARTIAL = 1, /* bytes being written, not all landed */
  T_STAGED = 2,  /* every byte landed */
};

struct wt_param_store {
  wt_staging staging;
  wt_mem_kind memory;
  wt_device device;
  char *name;
  size_t n;
  wt_tensor_meta *metas;
  uint64_t *offset; /* tensor i lives at buf.base + offset[i] */
  uint64_t total_bytes;
  /* One region per buffer set, each holding one copy of every tensor;
   * buf[1] only for shadow staging. */
  wt_mem_region buf[2];
  /* Embedded (wt_store_embedding): the caller's buffers, never freed here. */
  wt_store_embedding embed;
  bool has_embed;
  int embedded_sets;
  unsigned char *live; /* per tensor: which of buf[] is live (shadow) */
  /* Open-addressing name index: slots hold tensor index + 1, 0 is empty. */
  size_t *slots;
  size_t nslots;

  /* The round: touched[] lists the tensors whose state[] is not
   * T_UNTOUCHED, so begin/commit/abort cost what the round touched. */
  unsigned char *state;
  size_t *touched;
  size_t ntouched;
  /* Bytes of boxes landed in the round (wt_param_store_staged_part); reset
   * at a tensor's first touch of a round. */
  uint64_t *landed;

  /* Inplace: tensors whose live bytes belong to no committed version. */
  unsigned char *dirty;
  size_t ndirty;
  /* What wt_param_store_complete() answers to readers on other threads. */
  atomic_bool complete;
  atomic_uint_fast64_t commits; /* commits so far (readers compare it) */

  wt_rwlock lock;
  bool has_lock;

  /* Device memory: the pinned buffer reads and digests go through (made on
   * first use), one reader at a time. */
  wt_mutex bounce_mu;
  wt_mem_bounce bounce;
};

static const char *const staging_names[] = {
    [WT_STAGING_SHADOW] = "shadow",
    [WT_STAGING_INPLACE] = "inplace",
};

const char *wt_staging_name(wt_staging staging) {
  if ((int)staging < 0 || (int)staging > WT_STAGING_INPLACE) return NULL;
  return staging_names[staging];
}

wt_status *wt_staging_parse(const char *name, wt_staging *out) {
  for (int i = 0; name != NULL && i <= WT_STAGING_INPLACE; i++) {
    if (strcasecmp(name, staging_names[i]) == 0) {
      *out = (wt_staging)i;
      return NULL;
    }
  }
  return wt_status_new(WT_INVALID_ARGUMENT,
                       "staging '%s' is not one of: shadow, inplace",
                       name ? name : "(null)");
}

/* FNV-1a: names are short and looked up once per tensor per round. */
static uint64_t name_hash(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

static long index_find(const wt_param_store *s, const char *name) {
  if (s->nslots == 0) return -1;
  size_t mask = s->nslots - 1;
  for (size_t k = name_hash(name) & mask;; k = (k + 1) & mask) {
    size_t v = s->slots[k];
    if (v == 0) return -1;
    if (strcmp(s->metas[v - 1].name, name) == 0) return (long)(v - 1);
  }
}

static wt_status *build_index(wt_param_store *s) {
  s->nslots = 16;
  while (s->nslots < s->n * 2) s->nslots *= 2;
  s->slots = calloc(s->nslots, sizeof(*s->slots));
  if (s->slots == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "param store: out of memory for the name index");
  size_t mask = s->nslots - 1;
  for (size_t i = 0; i < s->n; i++) {
    const char *name = s->metas[i].name;
    if (index_find(s, name) >= 0)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "parameter '%s' appears twice in the model", name);
    size_t k = name_hash(name) & mask;
    while (s->slots[k] != 0) k = (k + 1) & mask;
    s->slots[k] = i + 1;
  }
  return NULL;
}

/* The caller's buffers for an embedded store (wt_store_embedding). */
static wt_status *embed_buffers(wt_param_store *s, size_t len, int nsets) {
  if (s->embed.buffers == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "param store '%s': embed.buffers is NULL", s->name);
  if (s->memory == WT_MEM_SHARED)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "param store '%s': embedded buffers cannot be of the "
                         "'shared' kind (a memfd the store makes itself); give "
                         "host, pinned or device memory",
                         s->name);
  void *bufs[2] = {NULL, NULL};
  wt_status *st =
      s->embed.buffers(s->embed.user, s->name, (uint64_t)len, nsets, bufs);
  if (st != NULL)
    return wt_status_prefix(st, "param store '%s': embed.buffers", s->name);
  for (int b = 0; b < nsets; b++) {
    s->buf[b].base = bufs[b];
    s->buf[b].len = len;
    s->buf[b].kind = s->memory;
    s->buf[b].device = s->device;
    s->buf[b].fd = -1;
  }
  s->embedded_sets = nsets;
  for (int b = 0; b < nsets; b++)
    if (len > 0 && (bufs[b] == NULL || ((uintptr_t)bufs[b] & (ALIGN - 1)) != 0))
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "param store '%s': embed.buffers gave set %d at %p: "
                           "NULL or not %u-byte aligned",
                           s->name, b, bufs[b], ALIGN);
  return NULL;
}

wt_status *wt_param_store_new(const wt_tensor_meta *metas, size_t n,
                              const wt_store_config *cfg,
                              wt_param_store **out) {
  wt_status *st = NULL;
  wt_param_store *s = NULL;
  wt_store_config c = {0};
  if (cfg != NULL) c = *cfg;
  if (out == NULL) WT_FAIL(WT_INVALID_ARGUMENT, "param store: 'out' is NULL");
  *out = NULL;
  if (n > 0 && metas == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT, "param store: %zu tensors but no metadata", n);
  if (wt_staging_name(c.staging) == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT, "param store: staging %d is unknown",
            (int)c.staging);
  WT_CHECK(wt_mem_kind_available(c.memory, c.device));
  s = calloc(1, sizeof(*s));
  if (s == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "param store: out of memory");
  s->buf[0].fd = s->buf[1].fd = -1;
  wt_mutex_init(&s->bounce_mu, WT_LOCK_STORE_BOUNCE, 0, "store.bounce_mu");
  s->staging = c.staging;
  s->memory = c.memory;
  s->device = c.device;
  s->name = strdup(c.name ? c.name : "");
  s->n = n;
  size_t cnt = n ? n : 1;
  s->metas = calloc(cnt, sizeof(*s->metas));
  s->offset = calloc(cnt, sizeof(*s->offset));
  s->live = calloc(cnt, 1);
  s->state = calloc(cnt, 1);
  s->dirty = calloc(cnt, 1);
  s->touched = calloc(cnt, sizeof(*s->touched));
  s->landed = calloc(cnt, sizeof(*s->landed));
  if (!s->metas || !s->offset || !s->live || !s->state || !s->dirty ||
      !s->touched || !s->landed || !s->name)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "param store: out of memory for %zu tensors",
            n);
  uint64_t len = 0;
  for (size_t i = 0; i < n; i++) {
    const wt_tensor_meta *m = &metas[i];
    WT_CHECK(wt_tensor_meta_init(&s->metas[i], m->name ? m->name : "", m->dtype,
                                 m->shape, m->ndim));
    s->offset[i] = len;
    uint64_t nb = s->metas[i].nbytes, padded = 0;
    if (__builtin_add_overflow(nb, ALIGN - 1, &padded) ||
        __builtin_add_overflow(len, padded / ALIGN * ALIGN, &len) ||
        __builtin_add_overflow(s->total_bytes, nb, &s->total_bytes))
      WT_FAIL(WT_INVALID_ARGUMENT,
              "param store: parameter '%s' (%" PRIu64
              " bytes): the model's size overflows 64 bits",
              s->metas[i].name, nb);
  }
  WT_CHECK(build_index(s));
  if (len > SIZE_MAX)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "param store: %" PRIu64 " bytes is too much",
            len);
  int nsets = c.staging == WT_STAGING_SHADOW ? 2 : 1;
  if (c.embed != NULL) {
    s->embed = *c.embed;
    s->has_embed = true;
    WT_CHECK(embed_buffers(s, (size_t)len, nsets));
  }
  for (int b = 0; b < (c.embed != NULL ? 0 : nsets); b++) {
    char what[96];
    snprintf(what, sizeof(what), "%s%sparams-%d", s->name, *s->name ? "-" : "",
             b);
    WT_CHECK(wt_status_prefix(
        wt_mem_alloc(c.memory, c.device, (size_t)len, what, &s->buf[b]),
        "param store"));
  }
  /* A commit is rare and short; readers (checksums) may be continuous, and
   * must not starve it. */
  int rc = wt_rwlock_init(&s->lock, WT_LOCK_STORE, 0, "store.lock");
  if (rc != 0) {
    st = wt_status_from_errno(rc, "param store: its readers-writer lock");
    goto out;
  }
  s->has_lock = true;
  atomic_init(&s->complete, true);
  *out = s;
  s = NULL;
out:
  wt_param_store_destroy(s);
  return st;
}

void wt_param_store_destroy(wt_param_store *s) {
  if (s == NULL) return;
  if (s->has_lock) wt_rwlock_destroy(&s->lock);
  if (s->embedded_sets > 0) {
    void *bufs[2] = {s->buf[0].base, s->buf[1].base};
    if (s->embed.release != NULL)
      s->embed.release(s->embed.user, s->name, bufs, s->embedded_sets);
  } else {
    wt_mem_free(&s->buf[0]);
    wt_mem_free(&s->buf[1]);
  }
  wt_mem_bounce_free(&s->bounce);
  wt_mutex_destroy(&s->bounce_mu);
  free(s->name);
  if (s->metas != NULL)
    for (size_t i = 0; i < s->n; i++) wt_tensor_meta_clear(&s->metas[i]);
  free(s->metas);
  free(s->offset);
  free(s->live);
  free(s->state);
  free(s->dirty);
  free(s->touched);
  free(s->landed);
  free(s->slots);
  free(s);
}

static unsigned char *buffer_of(const wt_param_store *s, int b, size_t i) {
  if (s->buf[b].base == NULL) return NULL;
  return (unsigned char *)s->buf[b].base + s->offset[i];
}

/* Which buffer set holds tensor i's committed bytes. */
static int live_set(const wt_param_store *s, size_t i) {
  return s->staging == WT_STAGING_SHADOW ? s->live[i] : 0;
}

typedef struct synth_fill {
  const wt_tensor_meta *m;
  uint64_t seed;
} synth_fill;

static wt_status *fill_synthetic(void *arg, uint64_t pos, void *buf,
                                 size_t len) {
  synth_fill *f = arg;
  wt_synthetic_fill(f->m, f->seed, pos, buf, len);
  return NULL;
}

/* Load-time writes share the store's bounce buffer (device memory). */
static wt_mem_bounce *load_bounce(wt_param_store *s) {
  if (wt_mem_kind_host_addressable(s->memory) || s->bounce.buf != NULL)
    return &s->bounce;
  wt_status *st = wt_mem_bounce_init(&s->bounce, BOUNCE_BYTES);
  wt_status_free(st); /* without one, each write makes its own */
  return &s->bounce;
}

wt_status *wt_param_store_from_synthetic(const char *layout, uint64_t seed,
                                         const wt_store_config *cfg,
                                         wt_param_store **out) {
  wt_status *st = NULL;
  wt_tensor_meta *metas = NULL;
  size_t n = 0;
  wt_param_store *s = NULL;
  WT_CHECK(wt_synthetic_layout(layout, &metas, &n));
  WT_CHECK(wt_param_store_new(metas, n, cfg, &s));
  for (size_t i = 0; i < n; i++) {
    const wt_tensor_meta *m = &s->metas[i];
    synth_fill f = {m, seed};
    WT_CHECK(wt_status_prefix(
        wt_mem_fill(&s->buf[0], s->offset[i], (size_t)m->nbytes, fill_synthetic,
                    &f, load_bounce(s)),
        "param store: loading parameter '%s'", m->name));
  }
  *out = s;
  s = NULL;
out:
  wt_param_store_destroy(s);
  wt_tensor_meta_array_free(metas, n);
  return st;
}

wt_status *wt_param_store_from_checkpoint(const wt_checkpoint *ck,
                                          const wt_store_config *cfg,
                                          wt_param_store **out) {
  wt_status *st = NULL;
  wt_tensor_meta *metas = NULL;
  wt_param_store *s = NULL;
  size_t n = wt_checkpoint_count(ck);
  metas = calloc(n ? n : 1, sizeof(*metas));
  if (metas == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "param store: out of memory for %zu tensors",
            n);
  /* Shallow copies: wt_param_store_new copies what it keeps. */
  for (size_t i = 0; i < n; i++) metas[i] = wt_checkpoint_at(ck, i)->meta;
  WT_CHECK(wt_param_store_new(metas, n, cfg, &s));
  for (size_t i = 0; i < n; i++) {
    const wt_st_tensor *t = wt_checkpoint_at(ck, i);
    WT_CHECK(
        wt_status_prefix(wt_mem_write(&s->buf[0], s->offset[i], t->data,
                                      (size_t)t->meta.nbytes, load_bounce(s)),
                         "param store: loading parameter '%s'", t->meta.name));
  }
  *out = s;
  s = NULL;
out:
  wt_param_store_destroy(s);
  free(metas);
  return st;
}

size_t wt_param_store_count(const wt_param_store *s) {
  return s->n;
}

const wt_tensor_meta *wt_param_store_meta(const wt_param_store *s, size_t i) {
  return i < s->n ? &s->metas[i] : NULL;
}

uint64_t wt_param_store_total_bytes(const wt_param_store *s) {
  return s->total_bytes;
}

size_t wt_param_store_regions(const wt_param_store *s,
                              wt_param_region out[WT_PARAM_STORE_MAX_REGIONS]) {
  size_t n = 0;
  for (size_t i = 0; i < 2; i++)
    if (s->buf[i].base != NULL && s->buf[i].len > 0) out[n++] = s->buf[i];
  return n;
}

const char *wt_param_store_name(const wt_param_store *s) {
  return s->name;
}

wt_staging wt_param_store_staging(const wt_param_store *s) {
  return s->staging;
}

wt_mem_kind wt_param_store_memory(const wt_param_store *s) {
  return s->memory;
}

wt_device wt_param_store_device(const wt_param_store *s) {
  return s->device;
}

uint64_t wt_param_store_bytes_held(const wt_param_store *s) {
  return (uint64_t)s->buf[0].len + (uint64_t)s->buf[1].len;
}

wt_status *wt_param_store_find(const wt_param_store *s, const char *name,
                               size_t *idx) {
  long i = name ? index_find(s, name) : -1;
  if (i < 0)
    return wt_status_new(WT_NOT_FOUND, "parameter '%s' is not in the model",
                         name ? name : "(null)");
  *idx = (size_t)i;
  return NULL;
}

/* --- round ---------------------------------------------------------------- */

/* Ends the round's per-tensor states. Inplace, a tensor still marked
 * written holds bytes of no committed version: it becomes dirty. */
static void round_reset(wt_param_store *s) {
  for (size_t k = 0; k < s->ntouched; k++) {
    size_t i = s->touched[k];
    if (s->staging == WT_STAGING_INPLACE && s->state[i] != T_UNTOUCHED &&
        !s->dirty[i]) {
      s->dirty[i] = 1;
      s->ndirty++;
    }
    s->state[i] = T_UNTOUCHED;
  }
  s->ntouched = 0;
  atomic_store(&s->complete, s->ndirty == 0);
}

void wt_param_store_begin(wt_param_store *s) {
  round_reset(s);
}

void *wt_param_store_stage(wt_param_store *s, size_t i) {
  if (i >= s->n) return NULL;
  if (s->state[i] == T_UNTOUCHED) {
    s->touched[s->ntouched++] = i;
    s->landed[i] = 0;
  }
  s->state[i] = T_PARTIAL;
  if (s->staging == WT_STAGING_INPLACE) {
    atomic_store(&s->complete, false);
    return buffer_of(s, 0, i);
  }
  return buffer_of(s, 1 - s->live[i], i);
}

/* OUT_OF_RANGE unless tensor i exists and [offset, offset + len) lies in
 * it. */
static wt_status *check_range(const wt_param_store *s, size_t i,
                              uint64_t offset, size_t len) {
  if (i >= s->n)
    return wt_status_new(WT_OUT_OF_RANGE,
                         "param store: tensor index %zu of %zu", i, s->n);
  const wt_tensor_meta *m = &s->metas[i];
  if (offset > m->nbytes || len > m->nbytes - offset)
    return wt_status_new(WT_OUT_OF_RANGE,
                         "parameter '%s': bytes [%" PRIu64 ", %" PRIu64
                         ") are outside its %" PRIu64 " bytes",
                         m->name, offset, offset + len, m->nbytes);
  return NULL;
}

wt_status *wt_param_store_stage_write(wt_param_store *s, size_t i,
                                      uint64_t offset, const void *src,
                                      size_t len) {
  wt_status *range = check_range(s, i, offset, len);
  if (range != NULL) return range;
  const wt_tensor_meta *m = &s->metas[i];
  int b = s->staging == WT_STAGING_INPLACE ? 0 : 1 - s->live[i];
  if (wt_mem_kind_host_addressable(s->memory)) {
    memcpy(buffer_of(s, b, i) + offset, src, len);
    return NULL;
  }
  return wt_status_prefix(wt_mem_ops_of(s->memory)->copy_in(
                              &s->buf[b], s->offset[i] + offset, src, len),
                          "parameter '%s'", m->name);
}

void wt_param_store_staged(wt_param_store *s, size_t i) {
  if (i >= s->n) return;
  if (s->state[i] == T_UNTOUCHED) s->touched[s->ntouched++] = i;
  s->state[i] = T_STAGED;
}

void wt_param_store_staged_part(wt_param_store *s, size_t i, uint64_t bytes) {
  if (i >= s->n || s->state[i] != T_PARTIAL) return;
  s->landed[i] += bytes;
  if (s->landed[i] >= s->metas[i].nbytes) s->state[i] = T_STAGED;
}

void wt_param_store_round_stats(const wt_param_store *s, size_t *staged,
                                size_t *partial, uint64_t *staged_bytes) {
  size_t ns = 0, np = 0;
  uint64_t bytes = 0;
  for (size_t k = 0; k < s->ntouched; k++) {
    size_t i = s->touched[k];
    if (s->state[i] == T_STAGED) {
      ns++;
      bytes += s->metas[i].nbytes;
    } else {
      np++;
    }
  }
  if (staged) *staged = ns;
  if (partial) *partial = np;
  if (staged_bytes) *staged_bytes = bytes;
}

wt_status *wt_param_store_check_commit(const wt_param_store *s) {
  for (size_t k = 0; k < s->ntouched; k++) {
    size_t i = s->touched[k];
    if (s->state[i] == T_PARTIAL)
      return wt_status_new(WT_FAILED_PRECONDITION,
                           "parameter '%s' was only partly received in this "
                           "round, which cannot commit",
                           s->metas[i].name);
  }
  return NULL;
}

void wt_param_store_set_lock_index(wt_param_store *s, unsigned index) {
  s->lock.order = (uint32_t)WT_LOCK_STORE << 16 | (index & 0xffff);
}

void wt_param_store_write_lock(wt_param_store *s) {
  wt_rwlock_wrlock(&s->lock);
}

void wt_param_store_write_unlock(wt_param_store *s) {
  wt_rwlock_unlock(&s->lock);
}

void wt_param_store_commit(wt_param_store *s) {
  bool shadow = s->staging == WT_STAGING_SHADOW;
  if (shadow) wt_param_store_write_lock(s);
  wt_param_store_commit_locked(s);
  if (shadow) wt_param_store_write_unlock(s);
}

void wt_param_store_commit_locked(wt_param_store *s) {
  if (s->staging == WT_STAGING_SHADOW) {
    for (size_t k = 0; k < s->ntouched; k++) {
      size_t i = s->touched[k];
      if (s->state[i] == T_STAGED) s->live[i] ^= 1;
    }
  } else {
    for (size_t k = 0; k < s->ntouched; k++) {
      size_t i = s->touched[k];
      if (s->state[i] == T_STAGED && s->dirty[i]) {
        s->dirty[i] = 0;
        s->ndirty--;
      }
    }
  }
  atomic_fetch_add(&s->commits, 1);
  /* Staged tensors are settled; partly written ones of an inplace round are
   * torn and stay dirty through round_reset. */
  for (size_t k = 0; k < s->ntouched; k++) {
    size_t i = s->touched[k];
    if (s->state[i] == T_STAGED) s->state[i] = T_UNTOUCHED;
  }
  round_reset(s);
  if (s->has_embed && s->embed.on_commit != NULL)
    s->embed.on_commit(s->embed.user, s);
}

void wt_param_store_abort(wt_param_store *s) {
  round_reset(s);
}

/* --- readers -------------------------------------------------------------- */

uint64_t wt_param_store_commits(const wt_param_store *s) {
  return atomic_load(&((wt_param_store *)s)->commits);
}

bool wt_param_store_complete(const wt_param_store *s) {
  return atomic_load(&s->complete);
}

void wt_param_store_read_lock(wt_param_store *s) {
  wt_rwlock_rdlock(&s->lock);
}

void wt_param_store_read_unlock(wt_param_store *s) {
  wt_rwlock_unlock(&s->lock);
}

const void *wt_param_store_live(const wt_param_store *s, size_t i) {
  if (i >= s->n) return NULL;
  return buffer_of(s, live_set(s, i), i);
}

void wt_param_store_locate(const wt_param_store *s, size_t i, size_t *region,
                           uint64_t *offset) {
  /* Regions are reported in buffer-set order, so the index is the set. */
  *region = i < s->n ? (size_t)live_set(s, i) : 0;
  *offset = i < s->n ? s->offset[i] : 0;
}

/* The bounce buffer for one read or digest of a device store, taken (and
 * made on first use); NULL for host memory. Released with bounce_put. */
static wt_mem_bounce *bounce_take(wt_param_store *s) {
  if (wt_mem_kind_host_addressable(s->memory)) return NULL;
  wt_mutex_lock(&s->bounce_mu);
  if (s->bounce.buf == NULL) {
    wt_status *st = wt_mem_bounce_init(&s->bounce, BOUNCE_BYTES);
    wt_status_free(st); /* without one, each copy makes its own */
  }
  return &s->bounce;
}

static void bounce_put(wt_param_store *s, wt_mem_bounce *b) {
  if (b != NULL) wt_mutex_unlock(&s->bounce_mu);
}

wt_status *wt_param_store_read(wt_param_store *s, size_t i, uint64_t offset,
                               void *buf, size_t len) {
  wt_status *range = check_range(s, i, offset, len);
  if (range != NULL) return range;
  const wt_tensor_meta *m = &s->metas[i];
  if (len == 0) return NULL;
  wt_param_store_read_lock(s);
  wt_mem_bounce *b = bounce_take(s);
  wt_status *st =
      wt_mem_read(&s->buf[live_set(s, i)], s->offset[i] + offset, buf, len, b);
  bounce_put(s, b);
  wt_param_store_read_unlock(s);
  return wt_status_prefix(st, "parameter '%s'", m->name);
}

static wt_status *hash_chunk(void *arg, uint64_t pos, const void *buf,
                             size_t len) {
  wt_hasher_update(arg, buf, len);
  return NULL;
}

wt_status *wt_param_store_hash_part(wt_param_store *s, size_t i,
                                    uint64_t offset, size_t len, wt_hasher *h) {
  wt_status *range = check_range(s, i, offset, len);
  if (range != NULL) return range;
  if (len == 0) return NULL;
  if (wt_mem_kind_host_addressable(s->memory)) {
    wt_hasher_update(h, (const uint8_t *)wt_param_store_live(s, i) + offset,
                     len);
    return NULL;
  }
  wt_mem_bounce *b = bounce_take(s);
  wt_status *st = wt_mem_visit(&s->buf[live_set(s, i)], s->offset[i] + offset,
                               len, hash_chunk, h, b);
  bounce_put(s, b);
  return wt_status_prefix(st, "parameter '%s'", s->metas[i].name);
}

wt_status *wt_param_store_digest(wt_param_store *s, size_t i, wt_hash_alg alg,
                                 char hex[WT_DIGEST_HEX_MAX]) {
  if (i >= s->n)
    return wt_status_new(WT_OUT_OF_RANGE,
                         "param store: tensor index %zu of %zu", i, s->n);
  const wt_tensor_meta *m = &s->metas[i];
  if (wt_mem_kind_host_addressable(s->memory)) {
    const void *p = wt_param_store_live(s, i);
    static const unsigned char empty[1];
    return wt_digest_hex(alg, p ? p : empty, (size_t)m->nbytes, hex);
  }
  wt_hasher *h = NULL;
  wt_status *st = wt_hasher_new(alg, &h);
  if (st != NULL) return st;
  wt_mem_bounce *b = bounce_take(s);
  st = wt_mem_visit(&s->buf[live_set(s, i)], s->offset[i], (size_t)m->nbytes,
                    hash_chunk, h, b);
  bounce_put(s, b);
  if (st == NULL) wt_hasher_final_hex(h, hex);
  wt_hasher_free(h);
  return wt_status_prefix(st, "parameter '%s'", m->name);
}
