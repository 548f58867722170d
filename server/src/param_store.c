/* param_store.c: a worker's parameters and the staging of a round (see
 * wt/param_store.h). */

#include "wt/param_store.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "wt/log.h"
#include "wt/synthetic.h"

#define ALIGN 64u

/* Where a tensor stands in the current round. */
enum {
  T_UNTOUCHED = 0,
  T_PARTIAL = 1, /* bytes being written, not all landed */
  T_STAGED = 2,  /* every byte landed */
};

/* One anonymous mapping holding one copy of every tensor. */
typedef struct arena {
  unsigned char *base;
  size_t len;
} arena;

struct wt_param_store {
  wt_staging staging;
  size_t n;
  wt_tensor_meta *metas;
  uint64_t *offset; /* tensor i lives at arena.base + offset[i] */
  uint64_t total_bytes;
  arena buf[2];        /* buf[1] only for shadow staging */
  unsigned char *live; /* per tensor: which of buf[] is live (shadow) */
  /* Open-addressing name index: slots hold tensor index + 1, 0 is empty. */
  size_t *slots;
  size_t nslots;

  /* The round: touched[] lists the tensors whose state[] is not
   * T_UNTOUCHED, so begin/commit/abort cost what the round touched. */
  unsigned char *state;
  size_t *touched;
  size_t ntouched;

  /* Inplace: tensors whose live bytes belong to no committed version. */
  unsigned char *dirty;
  size_t ndirty;
  /* What wt_param_store_complete() answers to readers on other threads. */
  atomic_bool complete;

  pthread_rwlock_t lock;
  bool has_lock;
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

/* Maps `len` bytes. Both buffers are faulted in here, at load, rather than
 * by a round's first copy: a round then runs at memory speed from the first
 * one, and a host short of memory fails at start, not mid-round. Huge pages
 * where the kernel allows them: fewer faults and TLB misses for GiBs. */
static wt_status *arena_map(arena *a, size_t len) {
  a->len = len;
  if (len == 0) return NULL;
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    a->len = 0;
    return wt_status_from_errno(errno, "param store: mapping %zu bytes", len);
  }
  a->base = p;
  madvise(p, len, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
  if (madvise(p, len, MADV_POPULATE_WRITE) == 0) return NULL;
#endif
  /* Older kernels: touch one byte per page. */
  long page = sysconf(_SC_PAGESIZE);
  for (size_t off = 0; off < len; off += (size_t)(page > 0 ? page : 4096))
    ((volatile unsigned char *)p)[off] = 0;
  return NULL;
}

static void arena_unmap(arena *a) {
  if (a->base != NULL) munmap(a->base, a->len);
  a->base = NULL;
  a->len = 0;
}

wt_status *wt_param_store_new(const wt_tensor_meta *metas, size_t n,
                              wt_staging staging, wt_param_store **out) {
  wt_status *st = NULL;
  wt_param_store *s = NULL;
  if (out == NULL) WT_FAIL(WT_INVALID_ARGUMENT, "param store: 'out' is NULL");
  *out = NULL;
  if (n > 0 && metas == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT, "param store: %zu tensors but no metadata", n);
  if (wt_staging_name(staging) == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT, "param store: staging %d is unknown",
            (int)staging);
  s = calloc(1, sizeof(*s));
  if (s == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "param store: out of memory");
  s->staging = staging;
  s->n = n;
  size_t cnt = n ? n : 1;
  s->metas = calloc(cnt, sizeof(*s->metas));
  s->offset = calloc(cnt, sizeof(*s->offset));
  s->live = calloc(cnt, 1);
  s->state = calloc(cnt, 1);
  s->dirty = calloc(cnt, 1);
  s->touched = calloc(cnt, sizeof(*s->touched));
  if (!s->metas || !s->offset || !s->live || !s->state || !s->dirty ||
      !s->touched)
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
  WT_CHECK(arena_map(&s->buf[0], (size_t)len));
  if (staging == WT_STAGING_SHADOW)
    WT_CHECK(arena_map(&s->buf[1], (size_t)len));
  /* A commit is rare and short; readers (checksums) may be continuous, and
   * must not starve it. */
  pthread_rwlockattr_t attr;
  pthread_rwlockattr_init(&attr);
  pthread_rwlockattr_setkind_np(&attr,
                                PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  int rc = pthread_rwlock_init(&s->lock, &attr);
  pthread_rwlockattr_destroy(&attr);
  if (rc != 0) {
    st = wt_status_from_errno(rc, "param store: pthread_rwlock_init");
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
  if (s->has_lock) pthread_rwlock_destroy(&s->lock);
  arena_unmap(&s->buf[0]);
  arena_unmap(&s->buf[1]);
  if (s->metas != NULL)
    for (size_t i = 0; i < s->n; i++) wt_tensor_meta_clear(&s->metas[i]);
  free(s->metas);
  free(s->offset);
  free(s->live);
  free(s->state);
  free(s->dirty);
  free(s->touched);
  free(s->slots);
  free(s);
}

static unsigned char *buffer_of(const wt_param_store *s, int b, size_t i) {
  if (s->buf[b].base == NULL) return NULL;
  return s->buf[b].base + s->offset[i];
}

wt_status *wt_param_store_from_synthetic(const char *layout, uint64_t seed,
                                         wt_staging staging,
                                         wt_param_store **out) {
  wt_status *st = NULL;
  wt_tensor_meta *metas = NULL;
  size_t n = 0;
  wt_param_store *s = NULL;
  WT_CHECK(wt_synthetic_layout(layout, &metas, &n));
  WT_CHECK(wt_param_store_new(metas, n, staging, &s));
  for (size_t i = 0; i < n; i++) {
    const wt_tensor_meta *m = &s->metas[i];
    if (m->nbytes > 0)
      wt_synthetic_fill(m, seed, 0, buffer_of(s, 0, i), (size_t)m->nbytes);
  }
  *out = s;
  s = NULL;
out:
  wt_param_store_destroy(s);
  wt_tensor_meta_array_free(metas, n);
  return st;
}

wt_status *wt_param_store_from_checkpoint(const wt_checkpoint *ck,
                                          wt_staging staging,
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
  WT_CHECK(wt_param_store_new(metas, n, staging, &s));
  for (size_t i = 0; i < n; i++) {
    const wt_st_tensor *t = wt_checkpoint_at(ck, i);
    if (t->meta.nbytes > 0)
      memcpy(buffer_of(s, 0, i), t->data, (size_t)t->meta.nbytes);
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
    if (s->buf[i].base != NULL && s->buf[i].len > 0)
      out[n++] =
          (wt_param_region){.base = s->buf[i].base, .len = s->buf[i].len};
  return n;
}

wt_staging wt_param_store_staging(const wt_param_store *s) {
  return s->staging;
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
  if (s->state[i] == T_UNTOUCHED) s->touched[s->ntouched++] = i;
  s->state[i] = T_PARTIAL;
  if (s->staging == WT_STAGING_INPLACE) {
    atomic_store(&s->complete, false);
    return buffer_of(s, 0, i);
  }
  return buffer_of(s, 1 - s->live[i], i);
}

void wt_param_store_staged(wt_param_store *s, size_t i) {
  if (i >= s->n) return;
  if (s->state[i] == T_UNTOUCHED) s->touched[s->ntouched++] = i;
  s->state[i] = T_STAGED;
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
                           "round; send it again or abort the round",
                           s->metas[i].name);
  }
  return NULL;
}

void wt_param_store_write_lock(wt_param_store *s) {
  pthread_rwlock_wrlock(&s->lock);
}

void wt_param_store_write_unlock(wt_param_store *s) {
  pthread_rwlock_unlock(&s->lock);
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
  /* Staged tensors are settled; partly written ones of an inplace round are
   * torn and stay dirty through round_reset. */
  for (size_t k = 0; k < s->ntouched; k++) {
    size_t i = s->touched[k];
    if (s->state[i] == T_STAGED) s->state[i] = T_UNTOUCHED;
  }
  round_reset(s);
}

void wt_param_store_abort(wt_param_store *s) {
  round_reset(s);
}

/* --- readers -------------------------------------------------------------- */

bool wt_param_store_complete(const wt_param_store *s) {
  return atomic_load(&s->complete);
}

void wt_param_store_read_lock(wt_param_store *s) {
  pthread_rwlock_rdlock(&s->lock);
}

void wt_param_store_read_unlock(wt_param_store *s) {
  pthread_rwlock_unlock(&s->lock);
}

const void *wt_param_store_live(const wt_param_store *s, size_t i) {
  if (i >= s->n) return NULL;
  return buffer_of(s, s->staging == WT_STAGING_SHADOW ? s->live[i] : 0, i);
}

wt_status *wt_param_store_read(wt_param_store *s, size_t i, uint64_t offset,
                               void *buf, size_t len) {
  if (i >= s->n)
    return wt_status_new(WT_OUT_OF_RANGE,
                         "param store: tensor index %zu of %zu", i, s->n);
  const wt_tensor_meta *m = &s->metas[i];
  if (offset > m->nbytes || len > m->nbytes - offset)
    return wt_status_new(WT_OUT_OF_RANGE,
                         "parameter '%s': bytes [%" PRIu64 ", %" PRIu64
                         ") are outside its %" PRIu64 " bytes",
                         m->name, offset, offset + len, m->nbytes);
  if (len == 0) return NULL;
  wt_param_store_read_lock(s);
  memcpy(buf, (const unsigned char *)wt_param_store_live(s, i) + offset, len);
  wt_param_store_read_unlock(s);
  return NULL;
}

wt_status *wt_param_store_digest(wt_param_store *s, size_t i, wt_hash_alg alg,
                                 char hex[WT_DIGEST_HEX_MAX]) {
  if (i >= s->n)
    return wt_status_new(WT_OUT_OF_RANGE,
                         "param store: tensor index %zu of %zu", i, s->n);
  const void *p = wt_param_store_live(s, i);
  static const unsigned char empty[1];
  return wt_digest_hex(alg, p ? p : empty, (size_t)s->metas[i].nbytes, hex);
}
