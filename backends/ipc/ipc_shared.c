/* ipc_shared.c: the GPU-free logic of the ipc backend (see ipc_shared.h). */

#include "backends/ipc/ipc_shared.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- selection ------------------------------------------------------------ */

/* The exports sorted by id, for lookups in O(log n). */
typedef struct export_index {
  uint64_t id;
  size_t at; /* index in ipc->exports */
} export_index;

static int cmp_export(const void *a, const void *b) {
  uint64_t x = ((const export_index *)a)->id, y = ((const export_index *)b)->id;
  return (x > y) - (x < y);
}

/* The export with `id`, or -1. */
static long find_export(const export_index *ix, size_t n, uint64_t id) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ix[mid].id == id) return (long)ix[mid].at;
    if (ix[mid].id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -1;
}

/* Checks every export and builds *out, sorted by id (the caller frees). */
static wt_status *check_exports(const Wt__V1__IpcUpdateInfo *ipc,
                                export_index **out) {
  *out = NULL;
  export_index *ix = calloc(ipc->n_exports ? ipc->n_exports : 1, sizeof(*ix));
  if (ix == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "update_info.ipc: out of memory for %zu exports",
                         ipc->n_exports);
  for (size_t i = 0; i < ipc->n_exports; i++) {
    const Wt__V1__IpcExport *e = ipc->exports[i];
    wt_status *st = NULL;
    size_t ulen = e->gpu_uuid ? strlen(e->gpu_uuid) : 0;
    if (e->handle.len != WT_IPC_HANDLE_BYTES)
      st = wt_status_new(WT_INVALID_ARGUMENT,
                         "update_info.ipc.exports[%zu] (id %" PRIu64
                         "): handle is %zu bytes; a cudaIpcMemHandle_t is %d",
                         i, e->id, e->handle.len, WT_IPC_HANDLE_BYTES);
    else if (ulen == 0 || ulen >= WT_IPC_UUID_MAX)
      st = wt_status_new(WT_INVALID_ARGUMENT,
                         "update_info.ipc.exports[%zu] (id %" PRIu64
                         "): gpu_uuid is %s",
                         i, e->id, ulen == 0 ? "empty" : "too long");
    if (st != NULL) {
      free(ix);
      return st;
    }
    ix[i] = (export_index){.id = e->id, .at = i};
  }
  qsort(ix, ipc->n_exports, sizeof(*ix), cmp_export);
  for (size_t i = 1; i < ipc->n_exports; i++)
    if (ix[i].id == ix[i - 1].id) {
      size_t a = ix[i - 1].at < ix[i].at ? ix[i - 1].at : ix[i].at;
      size_t b = ix[i - 1].at < ix[i].at ? ix[i].at : ix[i - 1].at;
      free(ix);
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "update_info.ipc.exports[%zu]: id %" PRIu64
                           " is also exports[%zu]'s",
                           b, ipc->exports[b]->id, a);
    }
  *out = ix;
  return NULL;
}

/* "GPU-a, GPU-b" of the places of tensor t (for an error). */
static void place_gpus(const Wt__V1__IpcUpdateInfo *ipc, const export_index *ix,
                       const Wt__V1__IpcTensor *t, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t p = 0; p < t->n_places && used + 1 < size; p++) {
    long e = find_export(ix, ipc->n_exports, t->places[p]->export_id);
    int w = snprintf(buf + used, size - used, "%s%s", p ? ", " : "",
                     e >= 0 ? ipc->exports[e]->gpu_uuid : "?");
    if (w < 0) break;
    used += (size_t)w;
  }
  if (t->n_places == 0) snprintf(buf, size, "none");
}

wt_status *wt_ipc_select(const Wt__V1__IpcUpdateInfo *ipc, size_t n,
                         const char *const *names, const uint64_t *nbytes,
                         const char *uuid, wt_ipc_place *out) {
  if (ipc == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "update_info.ipc is missing; the ipc backend needs "
                         "the trainer's exports and each tensor's place");
  if (ipc->n_tensors != n)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "update_info.ipc.tensors has %zu entries for %zu "
                         "names; one per name, in the same order",
                         ipc->n_tensors, n);
  /* Bounded before anything is looked at: an update cannot make a worker
   * check more than it could use. */
  if (ipc->n_exports > (n ? n : 1) * WT_IPC_MAX_PLACES)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "update_info.ipc.exports has %zu entries for %zu "
                         "tensors; at most %d per tensor",
                         ipc->n_exports, n, WT_IPC_MAX_PLACES);
  for (size_t k = 0; k < n; k++)
    if (ipc->tensors[k]->n_places > WT_IPC_MAX_PLACES)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "update_info.ipc.tensors[%zu] ('%s') has %zu "
                           "places; at most %d (one per GPU)",
                           k, names[k], ipc->tensors[k]->n_places,
                           WT_IPC_MAX_PLACES);
  export_index *ix = NULL;
  wt_status *st = check_exports(ipc, &ix);
  if (st != NULL) return st;
  const size_t ne = ipc->n_exports;
  for (size_t k = 0; k < n && st == NULL; k++) {
    const Wt__V1__IpcTensor *t = ipc->tensors[k];
    bool found = false;
    for (size_t p = 0; p < t->n_places && st == NULL; p++) {
      const Wt__V1__IpcPlace *pl = t->places[p];
      long e = find_export(ix, ne, pl->export_id);
      if (e < 0) {
        st = wt_status_new(WT_INVALID_ARGUMENT,
                           "update_info.ipc.tensors[%zu].places[%zu] ('%s'): "
                           "export %" PRIu64
                           " is not in update_info.ipc."
                           "exports",
                           k, p, names[k], pl->export_id);
        break;
      }
      const Wt__V1__IpcExport *x = ipc->exports[e];
      if (pl->offset_bytes > x->size_bytes ||
          nbytes[k] > x->size_bytes - pl->offset_bytes) {
        st = wt_status_new(WT_INVALID_ARGUMENT,
                           "update_info.ipc.tensors[%zu].places[%zu] ('%s'): "
                           "%" PRIu64 " bytes at offset %" PRIu64
                           " run past export %" PRIu64 " (%" PRIu64 " bytes)",
                           k, p, names[k], nbytes[k], pl->offset_bytes, x->id,
                           x->size_bytes);
        break;
      }
      for (size_t q = 0; q < p && st == NULL; q++) {
        long f = find_export(ix, ne, t->places[q]->export_id);
        if (strcmp(ipc->exports[f]->gpu_uuid, x->gpu_uuid) == 0)
          st = wt_status_new(WT_INVALID_ARGUMENT,
                             "update_info.ipc.tensors[%zu] ('%s'): places "
                             "%zu and %zu are both on GPU %s; at most one "
                             "per GPU",
                             k, names[k], q, p, x->gpu_uuid);
      }
      if (st == NULL && strcmp(x->gpu_uuid, uuid) == 0) {
        out[k] = (wt_ipc_place){.export_index = (size_t)e,
                                .offset = pl->offset_bytes};
        found = true;
      }
    }
    if (st == NULL && !found) {
      char gpus[256];
      place_gpus(ipc, ix, t, gpus, sizeof(gpus));
      st = wt_status_new(WT_INVALID_ARGUMENT,
                         "update_info.ipc.tensors[%zu] ('%s'): no place on "
                         "GPU %s (this worker's); the trainer exported it "
                         "on: %s",
                         k, names[k], uuid, gpus);
    }
  }
  free(ix);
  return st;
}

/* --- the cache of opened exports ----------------------------------------- */

typedef struct cache_entry {
  uint64_t id;
  unsigned char handle[WT_IPC_HANDLE_BYTES];
  void *base;
  bool used; /* got since the last sweep */
} cache_entry;

struct wt_ipc_cache {
  wt_ipc_opener opener;
  cache_entry *entries;
  size_t n, cap;
  size_t last; /* the entry the last get found */
  uint64_t opens;
};

wt_status *wt_ipc_cache_new(const wt_ipc_opener *opener, wt_ipc_cache **out) {
  *out = NULL;
  if (opener == NULL || opener->open == NULL || opener->close == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "ipc cache: opener needs open and close");
  wt_ipc_cache *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "ipc cache: out of memory");
  c->opener = *opener;
  *out = c;
  return NULL;
}

static void entry_close(wt_ipc_cache *c, cache_entry *e) {
  if (e->base != NULL) c->opener.close(c->opener.ctx, e->base);
  e->base = NULL;
}

wt_status *wt_ipc_cache_get(wt_ipc_cache *c, const Wt__V1__IpcExport *e,
                            void **base) {
  *base = NULL;
  if (e->handle.len != WT_IPC_HANDLE_BYTES)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "export %" PRIu64 ": handle is %zu bytes, not %d",
                         e->id, e->handle.len, WT_IPC_HANDLE_BYTES);
  cache_entry *slot = NULL;
  /* An update names its exports tensor after tensor: the last one found
   * is usually the next one asked for. */
  if (c->last < c->n && c->entries[c->last].id == e->id)
    slot = &c->entries[c->last];
  for (size_t i = 0; slot == NULL && i < c->n; i++)
    if (c->entries[i].id == e->id) {
      slot = &c->entries[i];
      c->last = i;
    }
  if (slot != NULL && slot->base != NULL &&
      memcmp(slot->handle, e->handle.data, WT_IPC_HANDLE_BYTES) == 0) {
    slot->used = true;
    *base = slot->base;
    return NULL;
  }
  if (slot != NULL) {
    /* The same id for another allocation: the old one is gone. */
    entry_close(c, slot);
  } else {
    if (c->n == c->cap) {
      size_t cap = c->cap ? c->cap * 2 : 8;
      cache_entry *grown = realloc(c->entries, cap * sizeof(*grown));
      if (grown == NULL)
        return wt_status_new(WT_RESOURCE_EXHAUSTED,
                             "export %" PRIu64 ": out of memory", e->id);
      c->entries = grown;
      c->cap = cap;
    }
    slot = &c->entries[c->n];
    memset(slot, 0, sizeof(*slot));
    slot->id = e->id;
  }
  void *mapped = NULL;
  wt_status *st = c->opener.open(c->opener.ctx, e->handle.data, &mapped);
  if (st != NULL) {
    /* A new slot is dropped; a reopened one stays closed (base NULL). */
    if (slot == &c->entries[c->n]) memset(slot, 0, sizeof(*slot));
    return wt_status_prefix(st, "export %" PRIu64 " (GPU %s)", e->id,
                            e->gpu_uuid ? e->gpu_uuid : "?");
  }
  if (slot == &c->entries[c->n]) c->n++;
  memcpy(slot->handle, e->handle.data, WT_IPC_HANDLE_BYTES);
  slot->base = mapped;
  slot->used = true;
  c->opens++;
  *base = mapped;
  return NULL;
}

void wt_ipc_cache_close_all(wt_ipc_cache *c) {
  if (c == NULL) return;
  for (size_t i = 0; i < c->n; i++) entry_close(c, &c->entries[i]);
  c->n = 0;
}

size_t wt_ipc_cache_sweep(wt_ipc_cache *c) {
  size_t closed = 0, kept = 0;
  for (size_t i = 0; c && i < c->n; i++) {
    cache_entry *e = &c->entries[i];
    if (!e->used || e->base == NULL) {
      closed += e->base != NULL;
      entry_close(c, e);
      continue;
    }
    e->used = false;
    c->entries[kept++] = *e;
  }
  if (c) c->n = kept;
  return closed;
}

size_t wt_ipc_cache_size(const wt_ipc_cache *c) {
  size_t open = 0;
  for (size_t i = 0; c && i < c->n; i++) open += c->entries[i].base != NULL;
  return open;
}

uint64_t wt_ipc_cache_opens(const wt_ipc_cache *c) {
  return c ? c->opens : 0;
}

void wt_ipc_cache_free(wt_ipc_cache *c) {
  if (c == NULL) return;
  wt_ipc_cache_close_all(c);
  free(c->entries);
  free(c);
}

/* --- the packed ring ------------------------------------------------------ */

wt_status *wt_ipc_ring_settings(const Wt__V1__IpcInitInfo *x,
                                uint64_t *slot_bytes, uint32_t *nslots) {
  *slot_bytes = x->packed_buffer_size_bytes ? x->packed_buffer_size_bytes->value
                                            : (1ull << 30);
  *nslots = x->packed_num_buffers ? x->packed_num_buffers->value : 2;
  if (*slot_bytes == 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "init_info.ipc.packed_buffer_size_bytes is 0; give "
                         "the size of each ring buffer (unset: 1 GiB)");
  if (*nslots < 2 || *nslots > WT_IPC_MAX_SLOTS)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "init_info.ipc.packed_num_buffers is %" PRIu32
                         "; between 2 and %d (one being packed while the "
                         "workers copy another)",
                         *nslots, WT_IPC_MAX_SLOTS);
  return NULL;
}

wt_status *wt_ipc_ring_init(wt_ipc_ring *r, uint32_t nslots,
                            uint32_t nworkers) {
  memset(r, 0, sizeof(*r));
  if (nslots < 2)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "packed_num_buffers is %" PRIu32
                         "; the ring needs at least 2 (one written while "
                         "workers copy out of another)",
                         nslots);
  if (nworkers == 0)
    return wt_status_new(WT_INVALID_ARGUMENT, "ipc ring: no workers");
  r->bucket = malloc(nslots * sizeof(*r->bucket));
  r->pending = calloc(nslots, sizeof(*r->pending));
  if (r->bucket == NULL || r->pending == NULL) {
    wt_ipc_ring_clear(r);
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "ipc ring: out of memory");
  }
  for (uint32_t i = 0; i < nslots; i++) r->bucket[i] = UINT64_MAX;
  r->nslots = nslots;
  r->nworkers = nworkers;
  return NULL;
}

void wt_ipc_ring_clear(wt_ipc_ring *r) {
  free(r->bucket);
  free(r->pending);
  memset(r, 0, sizeof(*r));
}

bool wt_ipc_ring_writable(const wt_ipc_ring *r, uint64_t b) {
  uint32_t s = (uint32_t)(b % r->nslots);
  if (r->bucket[s] == UINT64_MAX) return b < r->nslots;
  return r->bucket[s] + r->nslots == b && r->pending[s] == 0;
}

wt_status *wt_ipc_ring_written(wt_ipc_ring *r, uint64_t b) {
  if (!wt_ipc_ring_writable(r, b))
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "ipc ring: bucket %" PRIu64
                         " written into slot %" PRIu64
                         " before every worker finished copying out of it",
                         b, b % r->nslots);
  uint32_t s = (uint32_t)(b % r->nslots);
  r->bucket[s] = b;
  r->pending[s] = r->nworkers;
  return NULL;
}

wt_status *wt_ipc_ring_copied(wt_ipc_ring *r, uint64_t b) {
  uint32_t s = (uint32_t)(b % r->nslots);
  if (r->bucket[s] != b)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "ipc ring: a worker finished bucket %" PRIu64
                         ", which is not in slot %" PRIu32 " (it holds %s)",
                         b, s, r->bucket[s] == UINT64_MAX ? "none" : "another");
  if (r->pending[s] == 0)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "ipc ring: bucket %" PRIu64
                         " reported copied more times than there are workers "
                         "(%" PRIu32 ")",
                         b, r->nworkers);
  r->pending[s]--;
  return NULL;
}
