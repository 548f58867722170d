/* ucx_worker_delta.c: delta rounds in the `ucx` worker engine (docs/delta.md;
 * the message format is in ucx_shared.h, the codec in wt/delta.h).
 *
 * A delta round's bucket cannot land straight in staging as a full one
 * does: its bytes are a function of the committed ones, which an in-place
 * store keeps in the very buffers the round writes. So every bucket of a
 * delta round is received into a bounce buffer (posted, like a full
 * round's, before the round's first wait, so that nothing of the trainer's
 * waits in the unexpected queue), and decoded from there segment by
 * segment: the frame into dscratch (never past the segment's size), the
 * committed bytes of the segment into dbase, their digest checked against
 * the one the segment names, and only then new = decoded XOR base written
 * into staging. A chain hop forwards the bounce buffer's bytes as they
 * came. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/ucx/ucx_worker.h"
#include "wt/delta.h"

wt_status *wt_ucxe_delta_prepare(wt_engine *e, const wt_update *u,
                                 const wt_pack_plan *plan) {
  (void)u;
  if (e->cuda)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "%s: a delta round into a device store: delta "
                         "buckets are decoded on the host; send the full "
                         "bytes (docs/delta.md)",
                         e->where);
  uint64_t need = 0;
  for (size_t b = 0; b < plan->nbuckets; b++)
    need += wt_ucx_delta_bound(plan->buckets[b].nbytes);
  if (need > SIZE_MAX)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "%s: a delta round of %" PRIu64 " bytes", e->where,
                         need);
  if (e->dbuf == NULL || e->dcap < need) {
    free(e->dbuf);
    e->dcap = 0;
    e->dbuf = malloc(need ? (size_t)need : 1);
    if (e->dbuf == NULL)
      return wt_status_new(WT_RESOURCE_EXHAUSTED,
                           "%s: out of memory for the delta round's receive "
                           "buffer (%" PRIu64 " bytes, the model's size)",
                           e->where, need);
    e->dcap = (size_t)need;
  }
  if (e->codec == NULL) {
    e->codec = wt_delta_codec_new();
    e->dscratch = malloc(WT_UCX_DELTA_SEGMENT_BYTES);
    e->dbase = malloc(WT_UCX_DELTA_SEGMENT_BYTES);
    if (e->codec == NULL || e->dscratch == NULL || e->dbase == NULL) {
      wt_ucxe_delta_free(e);
      return wt_status_new(WT_RESOURCE_EXHAUSTED,
                           "%s: out of memory for delta buffers", e->where);
    }
  }
  return NULL;
}

/* One tensor's part of a bucket: where its new bytes go, where its
 * committed bytes are. */
typedef struct piece {
  unsigned char *stage;
  const unsigned char *live;
  uint64_t len;
} piece;

/* Copies bytes [pos, pos + n) of the bucket between `buf` and the pieces:
 * into staging (to_stage), or out of the committed bytes. */
static void copy_range(const piece *p, size_t np, uint64_t pos,
                       unsigned char *buf, uint64_t n, bool to_stage) {
  uint64_t start = 0;
  for (size_t i = 0; i < np && n > 0; i++) {
    uint64_t end = start + p[i].len;
    if (pos < end) {
      uint64_t at = pos - start;
      uint64_t take = p[i].len - at < n ? p[i].len - at : n;
      if (to_stage)
        memcpy(p[i].stage + at, buf, (size_t)take);
      else
        memcpy(buf, p[i].live + at, (size_t)take);
      buf += take;
      pos += take;
      n -= take;
    }
    start = end;
  }
}

typedef struct land_ctx {
  wt_engine *e;
  const piece *p;
  size_t np;
  const char *where;
} land_ctx;

/* One checked segment: raw bytes straight into staging; a frame decoded,
 * its base read and checked, then new = decoded XOR base into staging. */
static wt_status *land_segment(void *arg, uint64_t pos, uint64_t raw,
                               uint64_t base_digest, const unsigned char *data,
                               size_t dlen) {
  land_ctx *c = arg;
  wt_engine *e = c->e;
  const unsigned char *out = data;
  if (base_digest != 0) {
    char where[160];
    snprintf(where, sizeof(where), "%s at byte %" PRIu64, c->where, pos);
    wt_status *st =
        wt_delta_decode(e->codec, data, dlen, raw, e->dscratch, where);
    if (st != NULL) return st;
    copy_range(c->p, c->np, pos, e->dbase, raw, false);
    uint64_t have = wt_delta_digest(e->dbase, (size_t)raw);
    if (have != base_digest)
      return wt_status_new(WT_FAILED_PRECONDITION,
                           "%s: the committed bytes there (digest %016" PRIx64
                           ") are not the delta's base (%016" PRIx64 ")",
                           where, have, base_digest);
    wt_delta_xor(e->dscratch, e->dbase, (size_t)raw);
    out = e->dscratch;
  }
  copy_range(c->p, c->np, pos, (unsigned char *)out, raw, true);
  if (e->hashing) wt_delta_hasher_update(e->hash, out, (size_t)raw);
  return NULL;
}

wt_status *wt_ucxe_delta_land(wt_engine *e, const wt_update *u,
                              const wt_pack_plan *plan, const slot *s) {
  const wt_bucket *bk = &plan->buckets[s->bucket];
  piece *p = calloc(bk->count ? bk->count : 1, sizeof(*p));
  size_t np = 0;
  if (p == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  wt_param_store_read_lock(e->ctx.store);
  for (size_t k = bk->first; k < bk->first + bk->count; k++) {
    uint64_t off = 0, len = 0;
    wt_pack_part(plan, s->bucket, k, u->nbytes[k], &off, &len);
    if (len == 0) continue;
    p[np].stage =
        (unsigned char *)wt_param_store_stage(e->ctx.store, u->index[k]) + off;
    p[np].live =
        (const unsigned char *)wt_param_store_live(e->ctx.store, u->index[k]) +
        off;
    p[np].len = len;
    np++;
  }
  char where[96];
  snprintf(where, sizeof(where), "%s: delta bucket %zu", e->where, s->bucket);
  land_ctx c = {.e = e, .p = p, .np = np, .where = where};
  wt_status *st =
      wt_ucx_delta_walk(s->dmsg, s->dlen, bk->nbytes, where, land_segment, &c);
  wt_param_store_read_unlock(e->ctx.store);
  free(p);
  return st;
}

void wt_ucxe_hash_bucket(wt_engine *e, const slot *s) {
  if (!e->hashing) return;
  for (size_t i = 0; i < s->iovcnt; i++)
    wt_delta_hasher_update(e->hash, s->iov[i].buffer, s->iov[i].length);
}

void wt_ucxe_delta_free(wt_engine *e) {
  wt_delta_codec_free(e->codec);
  wt_delta_hasher_free(e->hash);
  free(e->dbuf);
  free(e->dscratch);
  free(e->dbase);
  e->codec = NULL;
  e->hash = NULL;
  e->dbuf = e->dscratch = e->dbase = NULL;
  e->dcap = 0;
}
