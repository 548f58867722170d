/* shard_plan.c: the ranks' layouts become a plan; a plan is checked; boxes
 * become contiguous runs (see wt/shard_plan.h). */

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/checksum.h"
#include "wt/dtype.h"
#include "wt/shard_plan.h"
#include "wt/tensor.h"

/* --- boxes ----------------------------------------------------------------
 */

uint64_t wt_box_bytes(const wt_box *b) {
  uint64_t n = b->elem_bytes;
  for (uint32_t d = 0; d < b->ndim; d++) n *= (uint64_t)b->sizes[d];
  return n;
}

int64_t *wt_boxes_own(wt_box *boxes, size_t n) {
  size_t total = 0;
  for (size_t k = 0; k < n; k++) total += 3 * (size_t)boxes[k].ndim;
  int64_t *dims = malloc((total ? total : 1) * sizeof(*dims));
  if (dims == NULL) return NULL;
  int64_t *at = dims;
  for (size_t k = 0; k < n; k++) {
    wt_box *b = &boxes[k];
    size_t nd = b->ndim;
    if (nd) {
      memcpy(at, b->shape, nd * sizeof(*at));
      memcpy(at + nd, b->offsets, nd * sizeof(*at));
      memcpy(at + 2 * nd, b->sizes, nd * sizeof(*at));
    }
    b->shape = at;
    b->offsets = at + nd;
    b->sizes = at + 2 * nd;
    at += 3 * nd;
  }
  return dims;
}

uint64_t wt_box_nruns(const wt_box *b) {
  int k = (int)b->ndim - 1;
  while (k >= 0 && b->offsets[k] == 0 && b->sizes[k] == b->shape[k]) k--;
  uint64_t n = 1;
  for (int d = 0; d < k; d++) n *= (uint64_t)b->sizes[d];
  return n;
}

wt_status *wt_box_runs(const wt_box *b, uint64_t pos, uint64_t len,
                       wt_box_run_fn fn, void *user) {
  uint64_t total = wt_box_bytes(b);
  if (pos > total || len > total - pos)
    return wt_status_new(WT_OUT_OF_RANGE,
                         "box: bytes [%" PRIu64 ", %" PRIu64
                         ") are outside its %" PRIu64 " bytes",
                         pos, pos + len, total);
  if (len == 0) return NULL;
  /* Dimensions after `k` are whole: a run is sizes[k] x the elements of a
   * slice of them; k = -1 (every dimension whole) is one run. */
  int k = (int)b->ndim - 1;
  uint64_t inner = b->elem_bytes; /* bytes of one index of dimension k */
  while (k >= 0 && b->offsets[k] == 0 && b->sizes[k] == b->shape[k]) {
    inner *= (uint64_t)b->shape[k];
    k--;
  }
  if (k < 0) return fn(pos, pos, len, user);
  uint64_t run = inner * (uint64_t)b->sizes[k];
  uint64_t stride[WT_MAX_NDIM]; /* bytes per index of each dimension */
  stride[k] = inner;
  for (int d = k - 1; d >= 0; d--)
    stride[d] = stride[d + 1] * (uint64_t)b->shape[d + 1];
  while (len > 0) {
    uint64_t j = pos / run, within = pos % run;
    /* Run j's place: its index over dimensions 0..k-1, row-major. */
    uint64_t dst = (uint64_t)b->offsets[k] * stride[k];
    for (int d = k - 1; d >= 0; d--) {
      uint64_t i = j % (uint64_t)b->sizes[d];
      j /= (uint64_t)b->sizes[d];
      dst += ((uint64_t)b->offsets[d] + i) * stride[d];
    }
    uint64_t take = run - within < len ? run - within : len;
    wt_status *st = fn(dst + within, pos, take, user);
    if (st != NULL) return st;
    pos += take;
    len -= take;
  }
  return NULL;
}

char *wt_box_format(const Wt__V1__TensorBox *b, char *buf, size_t len) {
  size_t at = 0;
  if (len == 0) return buf;
  buf[0] = '\0';
  at += (size_t)snprintf(buf, len, "[");
  for (size_t d = 0; d < b->n_offsets && d < b->n_sizes && at < len; d++)
    at += (size_t)snprintf(buf + at, len - at, "%s%" PRId64 ":%" PRId64,
                           d ? ", " : "", b->offsets[d],
                           b->offsets[d] + b->sizes[d]);
  if (at < len) snprintf(buf + at, len - at, "]");
  return buf;
}

size_t wt_shard_replica_holder(size_t tensor_index, size_t nholders) {
  return nholders ? tensor_index % nholders : 0;
}

/* --- checks ---------------------------------------------------------------
 */

/* One box of one rank, as the checks see it. */
typedef struct entry {
  const Wt__V1__TensorBox *box;
  uint32_t rank;
  wt_dtype dtype;
  uint64_t volume; /* elements of the box */
  uint64_t numel;  /* elements of the tensor */
  size_t cls;      /* build: the first entry of its group with this box */
  bool send;       /* build: this rank sends it */
} entry;

static int entry_cmp(const void *a, const void *b) {
  const entry *x = a, *y = b;
  int c = strcmp(x->box->name, y->box->name);
  if (c != 0) return c;
  return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* Checks one box on its own; fills e's dtype, volume and numel. */
static wt_status *check_box(entry *e, const char *who) {
  const Wt__V1__TensorBox *b = e->box;
  char sh[128], bx[160];
  if (b->name == NULL || *b->name == '\0')
    return wt_status_new(WT_INVALID_ARGUMENT, "%s: a box has no tensor name",
                         who);
  wt_status *st = wt_dtype_from_name(b->dtype, &e->dtype);
  if (st != NULL) return wt_status_prefix(st, "%s: tensor '%s'", who, b->name);
  if (b->n_shape > WT_MAX_NDIM)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: tensor '%s' has %zu dimensions; at most %d", who,
                         b->name, b->n_shape, WT_MAX_NDIM);
  if (b->n_offsets != b->n_shape || b->n_sizes != b->n_shape)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: tensor '%s': the box has %zu offsets and %zu "
                         "sizes for %zu dimensions",
                         who, b->name, b->n_offsets, b->n_sizes, b->n_shape);
  st = wt_shape_numel(b->shape, (int)b->n_shape, &e->numel);
  if (st != NULL) return wt_status_prefix(st, "%s: tensor '%s'", who, b->name);
  e->volume = 1;
  for (size_t d = 0; d < b->n_shape; d++) {
    if (b->offsets[d] < 0 || b->sizes[d] < 0 || b->offsets[d] > b->shape[d] ||
        b->sizes[d] > b->shape[d] - b->offsets[d])
      return wt_status_new(
          WT_INVALID_ARGUMENT,
          "%s: tensor '%s': box %s lies outside its shape %s (dimension %zu)",
          who, b->name, wt_box_format(b, bx, sizeof(bx)),
          wt_shape_format(b->shape, (int)b->n_shape, sh, sizeof(sh)), d);
    e->volume *= (uint64_t)b->sizes[d];
  }
  return NULL;
}

static bool same_meta(const entry *a, const entry *b) {
  if (a->dtype != b->dtype || a->box->n_shape != b->box->n_shape) return false;
  return wt_dims_equal(a->box->shape, b->box->shape, a->box->n_shape);
}

static bool same_box(const Wt__V1__TensorBox *a, const Wt__V1__TensorBox *b) {
  return wt_dims_equal(a->offsets, b->offsets, a->n_shape) &&
         wt_dims_equal(a->sizes, b->sizes, a->n_shape);
}

static bool overlap(const Wt__V1__TensorBox *a, const Wt__V1__TensorBox *b) {
  for (size_t d = 0; d < a->n_shape; d++) {
    int64_t lo = a->offsets[d] > b->offsets[d] ? a->offsets[d] : b->offsets[d];
    int64_t ha = a->offsets[d] + a->sizes[d], hb = b->offsets[d] + b->sizes[d];
    if (lo >= (ha < hb ? ha : hb)) return false;
  }
  return true;
}

static wt_status *meta_differs(const entry *e, const entry *ref,
                               const char *field) {
  char a[128], b[128];
  return wt_status_new(
      WT_INVALID_ARGUMENT,
      "%srank %u's layout differs from rank %u's: tensor '%s' is %s %s on "
      "rank %u and %s %s on rank %u",
      field, e->rank, ref->rank, e->box->name, wt_dtype_torch_name(e->dtype),
      wt_shape_format(e->box->shape, (int)e->box->n_shape, a, sizeof(a)),
      e->rank, wt_dtype_torch_name(ref->dtype),
      wt_shape_format(ref->box->shape, (int)ref->box->n_shape, b, sizeof(b)),
      ref->rank);
}

/* A box's start and index, sorted by the start on one dimension. */
typedef struct keyed {
  int64_t start;
  size_t i;
} keyed;

static int keyed_cmp(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start;
}

/* No two of the distinct boxes of e[0..n) (nd of them) overlap. A sweep
 * along the dimension whose offsets vary most: a box that starts at or
 * after the end of every box before it overlaps none of them (every box of
 * a Shard(d) layout), else it is compared with each; *budget bounds the
 * comparisons of a whole plan (a stranger's plan costs bounded time). */
static wt_status *check_overlaps(const entry *e, size_t n, size_t nd,
                                 const char *name, const char *field,
                                 uint64_t *budget) {
  char b1[160], b2[160];
  wt_status *st = NULL;
  if (nd < 2) return NULL;
  keyed *k = malloc(nd * sizeof(*k));
  if (k == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  size_t ndim = e[0].box->n_shape, best = 0, best_d = 0;
  for (size_t d = 0; d < ndim; d++) {
    size_t m = 0, distinct = 0;
    for (size_t i = 0; i < n; i++)
      if (e[i].volume != 0 && e[i].cls == i)
        k[m++] = (keyed){e[i].box->offsets[d], i};
    qsort(k, m, sizeof(*k), keyed_cmp);
    for (size_t j = 0; j < m; j++)
      distinct += j == 0 || k[j].start != k[j - 1].start;
    if (distinct > best) best = distinct, best_d = d;
  }
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (e[i].volume != 0 && e[i].cls == i)
      k[m++] = (keyed){ndim ? e[i].box->offsets[best_d] : 0, i};
  qsort(k, m, sizeof(*k), keyed_cmp);
  int64_t max_end = INT64_MIN;
  for (size_t a = 0; a < m; a++) {
    const Wt__V1__TensorBox *x = e[k[a].i].box;
    if (ndim == 0 || k[a].start < max_end)
      for (size_t b = 0; b < a; b++) {
        if (*budget == 0)
          WT_FAIL(WT_INVALID_ARGUMENT,
                  "%stensor '%s': the plan's boxes need more than %llu "
                  "comparisons to check for overlap",
                  field, name, (unsigned long long)WT_PLAN_MAX_COMPARISONS);
        (*budget)--;
        const entry *y = &e[k[b].i];
        if (overlap(x, y->box))
          WT_FAIL(WT_INVALID_ARGUMENT,
                  "%stensor '%s': rank %u's box %s overlaps rank %u's box %s",
                  field, name, e[k[a].i].rank, wt_box_format(x, b1, sizeof(b1)),
                  y->rank, wt_box_format(y->box, b2, sizeof(b2)));
      }
    if (ndim) {
      int64_t end = x->offsets[best_d] + x->sizes[best_d];
      if (end > max_end) max_end = end;
    }
  }
out:
  free(k);
  return st;
}

/* Checks one tensor's entries e[0..n) (sorted by rank): one dtype and
 * shape, one box per rank, and (build) a box from every one of `world`
 * ranks; resolves replicas (build: marks `send`), then checks that the
 * boxes sent overlap nowhere and cover every element. */
static wt_status *check_tensor(entry *e, size_t n, size_t tindex,
                               uint32_t world, bool build, const char *field,
                               uint64_t *budget) {
  const char *name = e[0].box->name;
  for (size_t i = 1; i < n; i++) {
    if (e[i].rank == e[i - 1].rank)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "%srank %u lists tensor '%s' twice", field,
                           e[i].rank, name);
    if (!same_meta(&e[i], &e[0])) return meta_differs(&e[i], &e[0], field);
  }
  if (build && n != world) {
    /* The first rank without it (e is sorted by rank). */
    uint32_t r = 0;
    while (r < n && e[r].rank == r) r++;
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%srank %u's layout differs from rank %u's: it lists "
                         "no tensor '%s' (every rank lists every tensor, with "
                         "an empty box for none of it)",
                         field, r, r == 0 ? e[0].rank : 0, name);
  }
  if (n > WT_PLAN_MAX_BOXES_PER_TENSOR)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%stensor '%s' has %zu boxes; at most %d", field, name,
                         n, WT_PLAN_MAX_BOXES_PER_TENSOR);
  /* Replicas: every holder of the same box, by rank; one of them sends. */
  for (size_t i = 0; i < n; i++) {
    e[i].cls = i;
    e[i].send = false;
    if (e[i].volume == 0) continue;
    if (build)
      for (size_t j = 0; j < i; j++)
        if (e[j].volume != 0 && e[j].cls == j && same_box(e[i].box, e[j].box)) {
          e[i].cls = j;
          break;
        }
  }
  uint64_t covered = 0;
  size_t nd = 0; /* distinct boxes, the ones sent */
  for (size_t i = 0; i < n; i++) {
    if (e[i].volume == 0 || e[i].cls != i) continue;
    covered += e[i].volume;
    nd++;
    if (!build) continue;
    size_t holders = 0, pick, seen = 0;
    for (size_t j = i; j < n; j++) holders += e[j].cls == i && e[j].volume;
    pick = wt_shard_replica_holder(tindex, holders);
    for (size_t j = i; j < n; j++)
      if (e[j].cls == i && e[j].volume && seen++ == pick) e[j].send = true;
  }
  wt_status *st = check_overlaps(e, n, nd, name, field, budget);
  if (st != NULL) return st;
  if (covered != e[0].numel)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%stensor '%s': %" PRIu64 " of its %" PRIu64
                         " elements are in no rank's box",
                         field, name, e[0].numel - covered, e[0].numel);
  return NULL;
}

/* Collects every box of `in` into *out (sorted by name, then rank) and
 * checks the ranks: each of 0..world-1 exactly once. */
static wt_status *collect(const Wt__V1__ShardPlan *in, bool build,
                          const char *field, entry **out, size_t *nout) {
  wt_status *st = NULL;
  size_t n = 0, at = 0;
  entry *e = NULL;
  size_t *seen = NULL;
  uint32_t world = (uint32_t)in->n_ranks;
  if (in->n_ranks == 0)
    return wt_status_new(WT_INVALID_ARGUMENT, "%sranks is empty", field);
  if (in->n_ranks > WT_PLAN_MAX_RANKS)
    return wt_status_new(WT_INVALID_ARGUMENT, "%s%zu ranks; at most %d", field,
                         in->n_ranks, WT_PLAN_MAX_RANKS);
  if (in->world_size != 0 && in->world_size != world)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%sworld_size is %u but %u rank layouts came", field,
                         in->world_size, world);
  if (in->nonce.len > WT_PLAN_MAX_NONCE)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%snonce is %zu bytes; at most %d", field,
                         in->nonce.len, WT_PLAN_MAX_NONCE);
  seen = calloc(world, sizeof(*seen));
  if (seen == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; i < in->n_ranks; i++) {
    const Wt__V1__RankBoxes *r = in->ranks[i];
    if (r == NULL) continue;
    if (r->rank >= world)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%slayout %zu claims rank %u of %u ranks (0..%u)", field, i,
              r->rank, world, world - 1);
    if (!build && r->rank != i)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%sranks[%zu] is rank %u; a plan lists its ranks in order", field,
              i, r->rank);
    if (seen[r->rank])
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%srank %u is claimed by two layouts (%zu and %zu)", field,
              r->rank, seen[r->rank] - 1, i);
    seen[r->rank] = i + 1;
    n += r->n_boxes;
  }
  for (uint32_t r = 0; r < world; r++)
    if (!seen[r])
      WT_FAIL(WT_INVALID_ARGUMENT, "%sno layout for rank %u (%u ranks)", field,
              r, world);
  e = calloc(n ? n : 1, sizeof(*e));
  if (e == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; i < in->n_ranks; i++) {
    const Wt__V1__RankBoxes *r = in->ranks[i];
    char who[64];
    snprintf(who, sizeof(who), "%srank %u", field, r->rank);
    for (size_t k = 0; k < r->n_boxes; k++) {
      if (r->boxes[k] == NULL)
        WT_FAIL(WT_INVALID_ARGUMENT, "%s: box %zu is empty", who, k);
      e[at].box = r->boxes[k];
      e[at].rank = r->rank;
      WT_CHECK(check_box(&e[at], who));
      if (!build) {
        if (e[at].volume == 0)
          WT_FAIL(WT_INVALID_ARGUMENT,
                  "%s: tensor '%s': an empty box in a plan", who,
                  r->boxes[k]->name);
        if (k > 0 && strcmp(r->boxes[k - 1]->name, r->boxes[k]->name) >= 0)
          WT_FAIL(WT_INVALID_ARGUMENT,
                  "%s: boxes are not sorted by name at '%s' (after '%s')", who,
                  r->boxes[k]->name, r->boxes[k - 1]->name);
      }
      at++;
    }
  }
  qsort(e, n, sizeof(*e), entry_cmp);
  *out = e;
  *nout = n;
  e = NULL;
out:
  free(e);
  free(seen);
  return st;
}

/* Runs check_tensor over every tensor of the sorted entries. */
static wt_status *check_all(entry *e, size_t n, uint32_t world, bool build,
                            const char *field) {
  size_t tindex = 0;
  uint64_t budget = WT_PLAN_MAX_COMPARISONS;
  for (size_t i = 0; i < n; tindex++) {
    size_t j = i + 1;
    while (j < n && strcmp(e[j].box->name, e[i].box->name) == 0) j++;
    wt_status *st =
        check_tensor(e + i, j - i, tindex, world, build, field, &budget);
    if (st != NULL) return st;
    i = j;
  }
  if (build && n == 0)
    return wt_status_new(WT_INVALID_ARGUMENT, "%sno rank lists any tensor",
                         field);
  return NULL;
}

/* --- digest ---------------------------------------------------------------
 */

static void put_u32(wt_hasher *h, uint32_t v) {
  uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
                  (uint8_t)(v >> 24)};
  wt_hasher_update(h, b, 4);
}

static void put_bytes(wt_hasher *h, const void *p, size_t n) {
  put_u32(h, (uint32_t)n);
  if (n) wt_hasher_update(h, p, n);
}

static void put_i64s(wt_hasher *h, const int64_t *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint64_t u = (uint64_t)v[i];
    uint8_t b[8];
    for (int k = 0; k < 8; k++) b[k] = (uint8_t)(u >> (8 * k));
    wt_hasher_update(h, b, 8);
  }
}

wt_status *wt_shard_plan_digest(const Wt__V1__ShardPlan *plan,
                                char hex[WT_PLAN_DIGEST_HEX]) {
  wt_hasher *h = NULL;
  wt_status *st = wt_hasher_new(WT_HASH_SHA256, &h);
  if (st != NULL) return st;
  static const char tag[] = "wt.v1.ShardPlan/1";
  put_bytes(h, tag, sizeof(tag) - 1);
  put_u32(h, (uint32_t)plan->n_ranks);
  put_bytes(h, plan->nonce.data, plan->nonce.len);
  /* A generation is part of what the ranks agree on (0: none, hashed as
   * before generations, so such a plan's digest is unchanged). */
  if (plan->generation != 0) {
    static const char gtag[] = "generation";
    put_bytes(h, gtag, sizeof(gtag) - 1);
    uint8_t g[8];
    for (int k = 0; k < 8; k++) g[k] = (uint8_t)(plan->generation >> (8 * k));
    wt_hasher_update(h, g, 8);
  }
  for (size_t r = 0; r < plan->n_ranks; r++) {
    const Wt__V1__RankBoxes *rb = plan->ranks[r];
    put_u32(h, rb ? rb->rank : UINT32_MAX);
    put_u32(h, rb ? (uint32_t)rb->n_boxes : 0);
    for (size_t k = 0; rb && k < rb->n_boxes; k++) {
      const Wt__V1__TensorBox *b = rb->boxes[k];
      wt_dtype dt;
      wt_status *e = wt_dtype_from_name(b->dtype, &dt);
      const char *dn = e == NULL ? wt_dtype_torch_name(dt) : b->dtype;
      wt_status_free(e);
      put_bytes(h, b->name, strlen(b->name));
      put_bytes(h, dn, strlen(dn));
      put_u32(h, (uint32_t)b->n_shape);
      put_i64s(h, b->shape, b->n_shape);
      put_u32(h, (uint32_t)b->n_offsets);
      put_i64s(h, b->offsets, b->n_offsets);
      put_u32(h, (uint32_t)b->n_sizes);
      put_i64s(h, b->sizes, b->n_sizes);
    }
  }
  wt_hasher_final_hex(h, hex);
  wt_hasher_free(h);
  return NULL;
}

/* --- build and check ------------------------------------------------------
 */

void wt_shard_plan_free(Wt__V1__ShardPlan *plan) {
  if (plan != NULL) protobuf_c_message_free_unpacked(&plan->base, NULL);
}

static int64_t *dup_i64(const int64_t *v, size_t n) {
  int64_t *c = malloc((n ? n : 1) * sizeof(*c));
  if (c != NULL && n) memcpy(c, v, n * sizeof(*c));
  return c;
}

/* A copy of box e (its dtype by its torch name) appended to rank rb. */
static bool append_box(Wt__V1__RankBoxes *rb, const entry *e) {
  Wt__V1__TensorBox *b = malloc(sizeof(*b));
  if (b == NULL) return false;
  wt__v1__tensor_box__init(b);
  rb->boxes[rb->n_boxes++] = b;
  const Wt__V1__TensorBox *s = e->box;
  size_t nd = s->n_shape;
  b->name = strdup(s->name);
  b->dtype = strdup(wt_dtype_torch_name(e->dtype));
  b->shape = dup_i64(s->shape, nd);
  b->offsets = dup_i64(s->offsets, nd);
  b->sizes = dup_i64(s->sizes, nd);
  if (b->name == NULL || b->dtype == NULL || b->shape == NULL ||
      b->offsets == NULL || b->sizes == NULL)
    return false;
  b->n_shape = b->n_offsets = b->n_sizes = nd;
  return true;
}

wt_status *wt_shard_plan_build(const Wt__V1__ShardPlan *layouts,
                               Wt__V1__ShardPlan **out) {
  wt_status *st = NULL;
  entry *e = NULL;
  size_t n = 0;
  Wt__V1__ShardPlan *p = NULL;
  *out = NULL;
  WT_CHECK(collect(layouts, true, "layouts: ", &e, &n));
  uint32_t world = (uint32_t)layouts->n_ranks;
  WT_CHECK(check_all(e, n, world, true, "layouts: "));
  p = malloc(sizeof(*p));
  if (p == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  wt__v1__shard_plan__init(p);
  p->ranks = calloc(world, sizeof(*p->ranks));
  if (p->ranks == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  /* Each rank's boxes to send, in name order (e is sorted by name). */
  size_t *count = calloc(world, sizeof(*count));
  if (count == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; i < n; i++) count[e[i].rank] += e[i].send;
  for (uint32_t r = 0; r < world; r++) {
    Wt__V1__RankBoxes *rb = malloc(sizeof(*rb));
    if (rb != NULL) {
      wt__v1__rank_boxes__init(rb);
      rb->rank = r;
      rb->boxes = calloc(count[r] ? count[r] : 1, sizeof(*rb->boxes));
    }
    if (rb == NULL || rb->boxes == NULL) {
      free(rb);
      free(count);
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
    }
    p->ranks[p->n_ranks++] = rb;
  }
  free(count);
  for (size_t i = 0; i < n; i++)
    if (e[i].send && !append_box(p->ranks[e[i].rank], &e[i]))
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  p->world_size = world;
  p->generation = layouts->generation;
  if (layouts->nonce.len) {
    p->nonce.data = malloc(layouts->nonce.len);
    if (p->nonce.data == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
    memcpy(p->nonce.data, layouts->nonce.data, layouts->nonce.len);
    p->nonce.len = layouts->nonce.len;
  }
  char hex[WT_PLAN_DIGEST_HEX];
  WT_CHECK(wt_shard_plan_digest(p, hex));
  p->digest = strdup(hex);
  if (p->digest == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  *out = p;
  p = NULL;
out:
  wt_shard_plan_free(p);
  free(e);
  return st;
}

wt_status *wt_shard_plan_check(const Wt__V1__ShardPlan *plan) {
  wt_status *st = NULL;
  entry *e = NULL;
  size_t n = 0;
  const char *field = "shard_plan: ";
  if (plan->world_size != plan->n_ranks)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%sworld_size is %u but it lists %zu ranks", field,
                         plan->world_size, plan->n_ranks);
  if (plan->rank >= plan->world_size)
    return wt_status_new(
        WT_INVALID_ARGUMENT, "%srank is %u; the plan has ranks 0..%u", field,
        plan->rank, plan->world_size ? plan->world_size - 1 : 0);
  WT_CHECK(collect(plan, false, field, &e, &n));
  WT_CHECK(check_all(e, n, plan->world_size, false, field));
  char hex[WT_PLAN_DIGEST_HEX];
  WT_CHECK(wt_shard_plan_digest(plan, hex));
  if (plan->digest == NULL || strcmp(plan->digest, hex) != 0)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%sdigest '%.64s' is not the plan's (%s): the ranks built "
            "another plan than the one sent",
            field, plan->digest ? plan->digest : "", hex);
out:
  free(e);
  return st;
}
