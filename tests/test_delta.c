/* Delta rounds (docs/delta.md): the codec and its refusals, rounds that
 * send only what changed (shadow and in place, bytes verified), the
 * fallback to a full push for a server that holds another version, a
 * failed round that leaves the version and makes the next round full, the
 * pushes a stranger may craft (a base the server does not hold, a delta
 * without a base, a decompression bomb, truncated and corrupt frames, a
 * wrong base digest, a range past the bucket), and memory over many
 * rounds. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../server/src/server_state.h" /* to forget a digest */
#include "support/fixture.h"
#include "support/sources.h"
#include "wt/delta.h"
#include "wt/pb.h"
#include "wt/synthetic.h"
#include "wt/trainer.h"
#ifdef WT_WITH_UCX
#include "backends/ucx/ucx_shared.h"
#endif

/* ---- the codec ----------------------------------------------------------- */

static void test_codec(void) {
  enum { N = 256 << 10 };
  unsigned char *base = malloc(N), *next = malloc(N), *x = malloc(N);
  size_t cap = wt_delta_frame_bound(N);
  unsigned char *frame = malloc(cap), *out = malloc(N);
  CU_ASSERT_FATAL(base && next && x && frame && out);
  for (size_t i = 0; i < N; i++)
    base[i] = (unsigned char)(i * 2654435761u >> 13);
  memcpy(next, base, N);
  for (size_t i = 0; i < N; i += 97) next[i] ^= 1; /* about 1 percent */
  wt_delta_codec *c = wt_delta_codec_new();
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  size_t len = wt_delta_encode(c, next, base, N, x, frame, cap);
  CU_ASSERT(len > 0 && len < N / 8);
  WT_ASSERT_OK(wt_delta_decode(c, frame, len, N, out, "test"));
  wt_delta_xor(out, base, N);
  CU_ASSERT_EQUAL(memcmp(out, next, N), 0);
  /* Everything changed at random: not smaller, so raw (0). */
  for (size_t i = 0; i < N; i++) next[i] = (unsigned char)rand();
  CU_ASSERT_EQUAL(wt_delta_encode(c, next, base, N, x, frame, cap), 0);

  /* Refusals, none writing past `out` (N/2 bytes here; ASan watches). */
  memcpy(next, base, N);
  next[5] ^= 0x40;
  len = wt_delta_encode(c, next, base, N, x, frame, cap); /* claims N */
  CU_ASSERT_FATAL(len > 0);
  unsigned char *small = malloc(N / 2);
  WT_ASSERT_ERR(wt_delta_decode(c, frame, len, N / 2, small, "bomb"),
                WT_INVALID_ARGUMENT, "bomb: the delta's zstd frame expands to");
  WT_ASSERT_ERR(wt_delta_decode(c, frame, len / 2, N, out, "cut"),
                WT_INVALID_ARGUMENT,
                "cut: the delta is not exactly one zstd frame");
  unsigned char *two = malloc(2 * len);
  memcpy(two, frame, len);
  memcpy(two + len, frame, len);
  WT_ASSERT_ERR(wt_delta_decode(c, two, 2 * len, N, out, "two"),
                WT_INVALID_ARGUMENT, "bytes after the frame");
  WT_ASSERT_ERR(wt_delta_decode(c, "garbage!", 8, N, out, "junk"),
                WT_INVALID_ARGUMENT, "junk: the delta is not a zstd frame");
  unsigned char *bad = malloc(len);
  memcpy(bad, frame, len);
  for (size_t i = len / 3; i < len - 4; i++) bad[i] ^= 0x5a;
  wt_status *st = wt_delta_decode(c, bad, len, N, out, "corrupt");
  CU_ASSERT_EQUAL(wt_status_code(st), WT_INVALID_ARGUMENT);
  wt_status_free(st);
  /* Digests: never 0 (0 says "unknown" on the wire). */
  CU_ASSERT_NOT_EQUAL(wt_delta_digest(base, 0), 0);
  CU_ASSERT_NOT_EQUAL(wt_delta_digest(base, N), wt_delta_digest(next, N));
  wt_delta_codec_free(c);
  free(bad);
  free(two);
  free(small);
  free(base);
  free(next);
  free(x);
  free(frame);
  free(out);
}

/* ---- rounds ----------------------------------------------------------------
 */

/* A trainer's tensors (h) changed as a step changes them: every 50th
 * 2-byte element of every tensor moved by one unit in the last place,
 * starting at element `phase`. */
static void step(wtt_held *h, unsigned phase) {
  for (size_t i = 0; i < h->n; i++) {
    uint16_t *e = h->data[i];
    size_t n = h->metas[i].nbytes / 2;
    for (size_t k = phase % 50; k < n; k += 50) e[k] ^= 1;
  }
}

typedef struct delta_setup {
  wt_sync_client *c;
  wt_trainer *t;
  wt_source *src;
  wtt_held h;
} delta_setup;

static void setup_with(delta_setup *d, const wtt_servers *s, const char *layout,
                       const char *backend, const wt_backend_option *opts,
                       size_t nopts) {
  d->c = wtt_client_of(s);
  Wt__V1__WeightTransferInitInfo *info = NULL;
  WT_ASSERT_OK(wt_trainer_init_info(backend, opts, nopts, &info));
  WT_ASSERT_OK(wt_sync_client_init_transfer(d->c, info, NULL, &d->t));
  wt_pb_free(&info->base);
  wtt_held_load(layout, 1, &d->h);
  WT_ASSERT_OK(wt_source_memory(d->h.tensors, d->h.n, &d->src));
}

static void setup(delta_setup *d, const wtt_servers *s, const char *layout,
                  const char *mode) {
  wt_backend_option opts[2] = {{"delta", mode}, {"chunk_size", "256K"}};
  setup_with(d, s, layout, "grpc", opts, 2);
}

static void teardown(delta_setup *d) {
  wt_source_destroy(d->src);
  wtt_held_free(&d->h);
  wt_trainer_destroy(d->t);
  wt_sync_client_destroy(d->c);
}

static wt_delta_stats round_of(delta_setup *d, const char *version) {
  WT_ASSERT_OK(wt_sync_client_start(d->c));
  WT_ASSERT_OK(wt_sync_client_update(d->c, d->t, d->src, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_finish(d->c, version));
  wt_delta_stats s = {0};
  WT_ASSERT_OK(wt_trainer_delta_stats(d->t, &s));
  return s;
}

/* Rounds 1..n of steps, versions PREFIX1..: each a delta to all `nservers`
 * servers, every worker's bytes checked; the most bytes one put on the
 * wire, and the last round's figures in *last. */
static uint64_t delta_steps(delta_setup *d, const char *prefix, unsigned n,
                            size_t nservers, wt_delta_stats *last) {
  uint64_t worst = 0;
  for (unsigned r = 1; r <= n; r++) {
    step(&d->h, r);
    char v[16];
    snprintf(v, sizeof(v), "%s%u", prefix, r);
    *last = round_of(d, v);
    CU_ASSERT_EQUAL(last->delta_servers, nservers);
    CU_ASSERT_EQUAL(last->full_servers, 0);
    if (last->delta_wire_bytes > worst) worst = last->delta_wire_bytes;
    wtt_assert_servers_hold(d->c, d->src, WT_HASH_SHA256);
  }
  return worst;
}

static void test_rounds(wt_staging staging) {
  wtt_servers s;
  const char *models[1] = {"synthetic:small"};
  uint32_t workers[1] = {2};
  wtt_servers_start(&s, 1, models, workers, staging, NULL);
  delta_setup d;
  setup(&d, &s, "small", "on");
  wt_delta_stats st = round_of(&d, "r0");
  CU_ASSERT_EQUAL(st.full_servers, 1); /* nothing to be relative to yet */
  CU_ASSERT_EQUAL(st.delta_servers, 0);
  wtt_assert_servers_hold(d.c, d.src, WT_HASH_SHA256);
  uint64_t worst = delta_steps(&d, "r", 6, 1, &st);
  printf("\n  %s: %" PRIu64 " bytes a round, at most %" PRIu64
         " on the wire for a 2%% step (%.1fx fewer)\n",
         staging == WT_STAGING_INPLACE ? "in place" : "shadow", st.raw_bytes,
         worst, (double)st.raw_bytes / (double)(worst ? worst : 1));
  CU_ASSERT(worst * 4 < st.raw_bytes);
  teardown(&d);
  wtt_servers_stop(&s);
}

static void test_rounds_shadow(void) {
  test_rounds(WT_STAGING_SHADOW);
}
static void test_rounds_inplace(void) {
  test_rounds(WT_STAGING_INPLACE);
}

/* Step `phase`, a round sent and aborted before its finish: every one of
 * the `nservers` servers still holds `version`. */
static void abort_keeps(delta_setup *d, unsigned phase, size_t nservers,
                        const char *version) {
  step(&d->h, phase);
  WT_ASSERT_OK(wt_sync_client_start(d->c));
  WT_ASSERT_OK(wt_sync_client_update(d->c, d->t, d->src, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_abort(d->c, "the test"));
  for (size_t k = 0; k < nservers; k++) {
    wt_weight_version v = {0};
    WT_ASSERT_OK(wt_sync_client_get_version(d->c, k, &v));
    CU_ASSERT_STRING_EQUAL(v.version, version);
    wt_weight_version_clear(&v);
  }
}

/* Someone else inits server k (of `workers` workers) with grpc and commits
 * a version of their own there. */
static void other_commits(const wtt_servers *s, size_t k, uint32_t workers) {
  wt_rpc_channel *ch = NULL;
  WT_ASSERT_OK(wt_rpc_channel_new(s->target[k], NULL, &ch));
  WT_ASSERT_OK(wtt_init_grpc(ch, 0, workers));
  wtt_server other = {.srv = s->srv[k], .ch = ch};
  snprintf(other.target, sizeof(other.target), "%s", s->target[k]);
  wt_param_store *ps = wt_server_store(s->srv[k], 0);
  size_t n = wt_param_store_count(ps);
  other.metas = calloc(n, sizeof(*other.metas));
  for (size_t i = 0; i < n; i++) other.metas[i] = *wt_param_store_meta(ps, i);
  other.n = n;
  other.workers = workers;
  wtt_commit_round(&other, "someone-else", 77);
  free(other.metas);
  wt_rpc_channel_destroy(ch);
}

/* Two servers; the second is pushed another version by someone else: the
 * next round is a delta for the first and a full push for the second, in
 * the same round, and both hold the trainer's bytes. An aborted round
 * leaves every server's version; the trainer's base was overwritten, so
 * the next round is full everywhere, then deltas again. */
static void test_fallback_and_failure(void) {
  wtt_servers s;
  const char *models[2] = {"synthetic:small", "synthetic:small"};
  uint32_t workers[2] = {1, 2};
  wtt_servers_start(&s, 2, models, workers, WT_STAGING_SHADOW, NULL);
  delta_setup d;
  setup(&d, &s, "small", "on");
  round_of(&d, "v1");
  step(&d.h, 1);
  wt_delta_stats st = round_of(&d, "v2");
  CU_ASSERT_EQUAL(st.delta_servers, 2);
  /* Someone else commits a version on server 1 only. */
  other_commits(&s, 1, 2);
  step(&d.h, 2);
  /* That init replaced ours on server 1: the client re-inits it. */
  st = round_of(&d, "v3");
  CU_ASSERT_EQUAL(st.delta_servers, 1);
  CU_ASSERT_EQUAL(st.full_servers, 1);
  wtt_assert_servers_hold(d.c, d.src, WT_HASH_SHA256);
  /* A delta round aborted before its finish. */
  abort_keeps(&d, 3, 2, "v3");
  st = round_of(&d, "v4");
  CU_ASSERT_EQUAL(st.full_servers, 2); /* nobody holds the trainer's base */
  wtt_assert_servers_hold(d.c, d.src, WT_HASH_SHA256);
  step(&d.h, 4);
  st = round_of(&d, "v5");
  CU_ASSERT_EQUAL(st.delta_servers, 2);
  wtt_assert_servers_hold(d.c, d.src, WT_HASH_SHA256);
  teardown(&d);
  wtt_servers_stop(&s);
}

/* ---- strangers -------------------------------------------------------------
 */

/* StartWeightUpdate by hand, with its committed version. */
static uint64_t start_with_base(wt_rpc_channel *ch, Wt__V1__DeltaBase *base) {
  Wt__V1__StartWeightUpdateRequest req =
      WT__V1__START_WEIGHT_UPDATE_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  WT_ASSERT_OK(wtt_call(ch, "StartWeightUpdate", &req.base,
                        &wt__v1__start_weight_update_response__descriptor,
                        &resp));
  if (resp == NULL) return 0;
  Wt__V1__StartWeightUpdateResponse *r = (void *)resp;
  uint64_t id = r->round_id;
  wt__v1__delta_base__init(base);
  base->sequence = r->committed_sequence;
  base->digest = r->committed_digest;
  wt_pb_free(resp);
  return id;
}

/* One stranger's delta push: the header with `base`, one DeltaChunk; the
 * error the server answers must be `code` naming `words`. */
static void stranger_push(wtt_server *S, const Wt__V1__DeltaBase *base,
                          uint64_t id, uint64_t offset, uint64_t raw_len,
                          uint64_t base_digest, const void *frame, size_t len,
                          wt_code code, const char *words) {
  wtt_upd u;
  wtt_upd_init(&u, S->metas, NULL, S->n);
  wtt_pusher p;
  wt_status *st = wtt_push_open_delta(&p, S->ch, &u, id, 0, 256 << 10, 9, base);
  if (st == NULL)
    st = wtt_push_delta_chunk(&p, 0, offset, raw_len, base_digest, frame, len);
  wt_status_free(st);
  st = wtt_push_close(&p, NULL);
  CU_ASSERT_EQUAL(wt_status_code(st), code);
  if (st && !strstr(wt_status_message(st), words))
    printf("\n  unexpected: %s\n", wt_status_message(st));
  CU_ASSERT_PTR_NOT_NULL(st ? strstr(wt_status_message(st), words) : NULL);
  wt_status_free(st);
}

static void test_strangers(void) {
  wtt_server S;
  wtt_server_start_simple(&S, "small", 1, WT_STAGING_SHADOW, 0);
  WT_ASSERT_OK(wtt_init_grpc(S.ch, 0, 1));
  wtt_commit_round(&S, "v1", 5);
  /* The base of v1, and the bytes of bucket 0's first chunk there. */
  size_t raw = 64 << 10;
  unsigned char *base_bytes = calloc(1, raw), *next = malloc(raw);
  size_t cap = wt_delta_frame_bound(2 * raw);
  unsigned char *frame = malloc(cap), *x = malloc(2 * raw);
  WT_ASSERT_OK(
      wt_param_store_read(wt_server_store(S.srv, 0), 0, 0, base_bytes, raw));
  uint64_t base_digest = wt_delta_digest(base_bytes, raw);
  memcpy(next, base_bytes, raw);
  next[100] ^= 1;
  wt_delta_codec *c = wt_delta_codec_new();
  size_t flen = wt_delta_encode(c, next, base_bytes, raw, x, frame, cap);
  CU_ASSERT_FATAL(flen > 0);

  Wt__V1__DeltaBase base;
  uint64_t id = start_with_base(S.ch, &base);
  CU_ASSERT_EQUAL(base.sequence, 1);
  CU_ASSERT_NOT_EQUAL(base.digest, 0);
  /* 1. A base the server does not hold: refused for this push only, both
   * versions named; the round stays open and a full push commits. */
  Wt__V1__DeltaBase wrong = base;
  wrong.digest ^= 1;
  stranger_push(&S, &wrong, id, 0, raw, base_digest, frame, flen,
                WT_FAILED_PRECONDITION,
                "delta base refused: the push is "
                "relative to sequence 1");
  wrong = base;
  wrong.sequence = 7;
  stranger_push(&S, &wrong, id, 0, raw, base_digest, frame, flen,
                WT_FAILED_PRECONDITION, "this server holds sequence 1");
  wtt_upd u;
  wtt_upd_init(&u, S.metas, NULL, S.n);
  WT_ASSERT_OK(wtt_push_all(S.ch, &u, id, 0, 256 << 10, 6, NULL));
  WT_ASSERT_OK(wtt_finish(S.ch, "v2", id));
  wtt_assert_model_seed(&S, 6);

  /* Each of these fails its round; v2 stays, byte for byte. */
  struct {
    const char *what;
    bool with_base;
    uint64_t offset, raw_len, digest;
    const void *frame;
    size_t len;
    wt_code code;
    const char *words;
  } cases[] = {
      {"no base", false, 0, raw, 0, frame, flen, WT_INVALID_ARGUMENT,
       "a delta chunk in a push whose header names no delta_base"},
      {"bomb", true, 0, raw / 2, 0, frame, flen, WT_INVALID_ARGUMENT,
       "the delta's zstd frame expands to"},
      {"truncated", true, 0, raw, 0, frame, flen / 2, WT_INVALID_ARGUMENT,
       "not exactly one zstd frame"},
      {"garbage", true, 0, raw, 0, "not zstd at all", 15, WT_INVALID_ARGUMENT,
       "not a zstd frame"},
      {"wrong base digest", true, 0, raw, 1, frame, flen,
       WT_FAILED_PRECONDITION, "are not the delta's base"},
      {"past the bucket", true, 0, (uint64_t)1 << 40, 0, frame, flen,
       WT_INVALID_ARGUMENT, "exceeds the chunk size"},
      {"out of order", true, 4096, raw, 0, frame, flen, WT_INVALID_ARGUMENT,
       "out of order"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    id = start_with_base(S.ch, &base);
    /* The base digest of v2 where the chunk lands, unless the case
     * spoils it. */
    WT_ASSERT_OK(
        wt_param_store_read(wt_server_store(S.srv, 0), 0, 0, base_bytes, raw));
    uint64_t d =
        cases[i].digest ? cases[i].digest : wt_delta_digest(base_bytes, raw);
    stranger_push(&S, cases[i].with_base ? &base : NULL, id, cases[i].offset,
                  cases[i].raw_len, d, cases[i].frame, cases[i].len,
                  cases[i].code, cases[i].words);
    CU_ASSERT(wtt_wait_left_updating(S.ch, 5000) >= 0);
    WT_ASSERT_ERR(wtt_finish(S.ch, "never", id), WT_FAILED_PRECONDITION, "");
    wtt_assert_version(S.ch, "v2", 2);
    wtt_assert_model_seed(&S, 6);
  }
  wt_delta_codec_free(c);
  free(base_bytes);
  free(next);
  free(frame);
  free(x);
  wtt_server_stop(&S);
}

/* ---- memory
 * ------------------------------------------------------------------ */

/* 200 delta rounds: this process (the trainer and the server in one)
 * stays flat after warm-up: its RSS, or under AddressSanitizer its live heap
 * (see wtt_held_kib). */
static void rss_flat(const char *backend) {
  wtt_servers s;
  const char *models[1] = {"synthetic:small"};
  uint32_t workers[1] = {1};
  wtt_servers_start(&s, 1, models, workers, WT_STAGING_SHADOW, NULL);
  delta_setup d;
  if (strcmp(backend, "grpc") == 0) {
    setup(&d, &s, "small", "on");
  } else {
    wt_backend_option opts[] = {
        {"delta", "on"}, {"bucket_size", "256K"}, {"transports", "tcp"}};
    setup_with(&d, &s, "small", backend, opts, 3);
  }
  long held20 = 0;
  for (unsigned r = 0; r < 200; r++) {
    step(&d.h, r);
    char v[16];
    snprintf(v, sizeof(v), "m%u", r);
    wt_delta_stats st = round_of(&d, v);
    if (r > 0) CU_ASSERT_EQUAL(st.delta_servers, 1);
    if (r == 19) held20 = wtt_held_kib();
  }
  long held200 = wtt_held_kib();
  wtt_assert_servers_hold(d.c, d.src, WT_HASH_XXH3_64);
  printf("\n  %s: %s after 20 delta rounds %ld KiB, after 200 %ld KiB\n",
         backend, wtt_held_what(), held20, held200);
  CU_ASSERT(held200 <= held20 + held20 / 20);
  teardown(&d);
  wtt_servers_stop(&s);
}

#ifdef WT_WITH_UCX
/* ---- ucx -------------------------------------------------------------------
 */

/* `nservers` servers of 2 workers, `staging`, a ucx trainer with delta=on
 * and the `fanout`: a first full round, then deltas to every server, bytes
 * checked on every worker each round; server 1 without a known version
 * gets the next round full and the others a delta (a chain then runs
 * as two: the full group's and the delta group's); an aborted round makes
 * the next full everywhere, then deltas again. */
static void ucx_rounds(wt_staging staging, const char *fanout,
                       size_t nservers) {
  wtt_servers s;
  const char *models[3] = {"synthetic:small", "synthetic:small",
                           "synthetic:small"};
  uint32_t workers[3] = {2, 2, 2};
  wtt_servers_start(&s, nservers, models, workers, staging, NULL);
  delta_setup d;
  wt_backend_option opts[] = {{"delta", "on"},
                              {"bucket_size", "256K"},
                              {"transports", "tcp"},
                              {"fanout", fanout}};
  setup_with(&d, &s, "small", "ucx", opts, 4);
  wt_delta_stats st = round_of(&d, "u0");
  CU_ASSERT_EQUAL(st.full_servers, nservers);
  CU_ASSERT_EQUAL(st.delta_servers, 0);
  wtt_assert_servers_hold(d.c, d.src, WT_HASH_SHA256);
  uint64_t worst = delta_steps(&d, "u", 4, nservers, &st);
  printf("\n  ucx %s, %s, %zu server(s): %" PRIu64
         " bytes a round, at most %" PRIu64 " on the wire (%.1fx fewer)",
         fanout, staging == WT_STAGING_INPLACE ? "in place" : "shadow",
         nservers, st.raw_bytes, worst,
         (double)st.raw_bytes / (double)(worst ? worst : 1));
  CU_ASSERT(worst > 0 && worst * 4 < st.raw_bytes);
  if (nservers >= 2) {
    /* Server 1 no longer knows what it holds (what a restart, another
     * backend's round or a failed in-place round leave): white box, since
     * each of those also ends this init, and a re-init starts the
     * trainer's engine afresh (no base), which the abort below covers. */
    wt_mutex_lock(&s.srv[1]->round.mu);
    s.srv[1]->round.committed_digest = 0;
    wt_mutex_unlock(&s.srv[1]->round.mu);
    step(&d.h, 5);
    st = round_of(&d, "u5");
    CU_ASSERT_EQUAL(st.delta_servers, nservers - 1);
    CU_ASSERT_EQUAL(st.full_servers, 1);
    wtt_assert_servers_hold(d.c, d.src, WT_HASH_SHA256);
  }
  /* A delta round aborted before its finish: every version stays. */
  abort_keeps(&d, 6, nservers, nservers >= 2 ? "u5" : "u4");
  st = round_of(&d, "u7");
  CU_ASSERT_EQUAL(st.full_servers, nservers);
  wtt_assert_servers_hold(d.c, d.src, WT_HASH_SHA256);
  step(&d.h, 8);
  st = round_of(&d, "u8");
  CU_ASSERT_EQUAL(st.delta_servers, nservers);
  wtt_assert_servers_hold(d.c, d.src, WT_HASH_SHA256);
  teardown(&d);
  wtt_servers_stop(&s);
}

/* The framing of a delta bucket (ucx_shared.h) as a stranger may send
 * it: each malformed message is refused before its bad segment is handed
 * on, naming what is wrong. */
typedef struct seen {
  int segments;
} seen;

static wt_status *count_segment(void *arg, uint64_t pos, uint64_t raw,
                                uint64_t base, const unsigned char *data,
                                size_t len) {
  (void)pos, (void)raw, (void)base, (void)data, (void)len;
  ((seen *)arg)->segments++;
  return NULL;
}

static void test_ucx_framing(void) {
  const uint64_t raw = WT_UCX_DELTA_SEGMENT_BYTES + 1000; /* two segments */
  size_t cap = (size_t)wt_ucx_delta_bound(raw) + 64;
  unsigned char *m = calloc(1, cap);
  CU_ASSERT_FATAL(m != NULL);
  /* A valid one: both segments raw. */
  wt_ucx_delta_header_put(m, WT_UCX_DELTA_SEGMENT_BYTES, 0,
                          WT_UCX_DELTA_SEGMENT_BYTES);
  size_t second = WT_UCX_DELTA_HEADER_BYTES + WT_UCX_DELTA_SEGMENT_BYTES;
  wt_ucx_delta_header_put(m + second, 1000, 0, 1000);
  size_t len = second + WT_UCX_DELTA_HEADER_BYTES + 1000;
  CU_ASSERT_EQUAL(len, wt_ucx_delta_bound(raw));
  seen sn = {0};
  WT_ASSERT_OK(wt_ucx_delta_walk(m, len, raw, "b", count_segment, &sn));
  CU_ASSERT_EQUAL(sn.segments, 2);
  struct {
    const char *what;
    size_t len;
    uint64_t raw2, base2, dlen2;
    wt_code code;
    const char *words;
    int segments; /* handed on before the refusal */
  } cases[] = {
      {"empty", 0, 1000, 0, 1000, WT_DATA_LOSS,
       "ends before the segment's header", 0},
      {"cut header", second + 10, 1000, 0, 1000, WT_DATA_LOSS,
       "ends before the segment's header", 1},
      {"cut data", len - 1, 1000, 0, 1000, WT_DATA_LOSS,
       "1000 bytes of data, 999 are left", 1},
      {"claims more", len, 1ull << 40, 0, 1000, WT_INVALID_ARGUMENT,
       "a segment of 1099511627776 bytes; the plan's is 1000", 1},
      {"short raw", len, 1000, 0, 10, WT_INVALID_ARGUMENT,
       "a raw segment of 10 bytes covers 1000", 1},
      {"data past the end", len, 1000, 7, 1u << 30, WT_DATA_LOSS, "are left",
       1},
      {"trailing bytes", len + 5, 1000, 0, 1000, WT_INVALID_ARGUMENT,
       "5 bytes after the last segment", 2},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    wt_ucx_delta_header_put(m + second, cases[i].raw2, cases[i].base2,
                            cases[i].dlen2);
    sn.segments = 0;
    wt_status *st =
        wt_ucx_delta_walk(m, cases[i].len, raw, "b", count_segment, &sn);
    CU_ASSERT_EQUAL(wt_status_code(st), cases[i].code);
    CU_ASSERT_PTR_NOT_NULL(st ? strstr(wt_status_message(st), cases[i].words)
                              : NULL);
    if (st == NULL || !strstr(wt_status_message(st), cases[i].words))
      printf("\n  %s: %s", cases[i].what, st ? wt_status_message(st) : "ok");
    CU_ASSERT_EQUAL(sn.segments, cases[i].segments);
    wt_status_free(st);
  }
  free(m);
}

/* Wrong bases over ucx. An UpdateWeights that names another version than
 * the server's is refused before the round is the call's, naming both, and
 * the round still takes the trainer's update. Committed bytes that are not
 * what their digest says (as a lying or broken store would be) fail the
 * delta round at the first segment whose base differs, and the version
 * stays; the next round is full and lands. */
static void test_ucx_wrong_base(void) {
  wtt_servers s;
  const char *models[1] = {"synthetic:small"};
  uint32_t workers[1] = {1};
  wtt_servers_start(&s, 1, models, workers, WT_STAGING_SHADOW, NULL);
  delta_setup d;
  wt_backend_option opts[] = {
      {"delta", "on"}, {"bucket_size", "256K"}, {"transports", "tcp"}};
  setup_with(&d, &s, "small", "ucx", opts, 3);
  round_of(&d, "w0");
  wt_rpc_channel *ch = NULL;
  WT_ASSERT_OK(wt_rpc_channel_new(s.target[0], NULL, &ch));
  Wt__V1__DeltaBase base;
  uint64_t id = start_with_base(ch, &base);
  CU_ASSERT_FATAL(id != 0 && base.digest != 0);
  Wt__V1__DeltaBase wrong = base;
  wrong.digest ^= 0x5a5a;
  Wt__V1__UcxUpdateInfo ux = WT__V1__UCX_UPDATE_INFO__INIT;
  ux.delta_base = &wrong;
  Wt__V1__WeightTransferUpdateInfo ui =
      WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__INIT;
  ui.backend_update_case =
      WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__BACKEND_UPDATE_UCX;
  ui.ucx = &ux;
  Wt__V1__UpdateWeightsRequest req = WT__V1__UPDATE_WEIGHTS_REQUEST__INIT;
  req.update_info = &ui;
  req.round_id = id;
  wt_status *st = wtt_call(ch, "UpdateWeights", &req.base,
                           &wt__v1__update_weights_response__descriptor, NULL);
  CU_ASSERT_EQUAL(wt_status_code(st), WT_FAILED_PRECONDITION);
  char both[160];
  snprintf(both, sizeof(both), "(digest %016" PRIx64 "), this server holds",
           wrong.digest);
  CU_ASSERT_PTR_NOT_NULL(st ? strstr(wt_status_message(st), both) : NULL);
  wt_status_free(st);
  /* The round is still open: abort it (the trainer's round follows). */
  bool aborted = false;
  WT_ASSERT_OK(wtt_abort(ch, id, &aborted));
  CU_ASSERT(aborted);
  wt_rpc_channel_destroy(ch);

  /* One committed byte changes under its digest. */
  wt_param_store *ps = wt_server_store(s.srv[0], 0);
  size_t last = wt_param_store_count(ps) - 1;
  unsigned char *live = (unsigned char *)wt_param_store_live(ps, last);
  unsigned char was = live[0];
  live[0] ^= 0x80;
  step(&d.h, 1);
  WT_ASSERT_OK(wt_sync_client_start(d.c));
  st = wt_sync_client_update(d.c, d.t, d.src, NULL, NULL);
  CU_ASSERT_EQUAL(wt_status_code(st), WT_FAILED_PRECONDITION);
  CU_ASSERT_PTR_NOT_NULL(
      st ? strstr(wt_status_message(st), "are not the delta's base") : NULL);
  wt_status_free(st);
  wt_status_free(wt_sync_client_abort(d.c, "the test"));
  wt_weight_version v = {0};
  WT_ASSERT_OK(wt_sync_client_get_version(d.c, 0, &v));
  CU_ASSERT_STRING_EQUAL(v.version, "w0");
  wt_weight_version_clear(&v);
  CU_ASSERT_EQUAL(live[0], was ^ 0x80); /* nothing of the round landed */
  wt_delta_stats ds = round_of(&d, "w2");
  CU_ASSERT_EQUAL(ds.full_servers, 1);
  wtt_assert_servers_hold(d.c, d.src, WT_HASH_SHA256);
  teardown(&d);
  wtt_servers_stop(&s);
}

static void test_ucx_shadow(void) {
  ucx_rounds(WT_STAGING_SHADOW, "parallel", 1);
}
static void test_ucx_inplace(void) {
  ucx_rounds(WT_STAGING_INPLACE, "parallel", 1);
}
static void test_ucx_parallel(void) {
  ucx_rounds(WT_STAGING_SHADOW, "parallel", 2);
}
static void test_ucx_sequential(void) {
  ucx_rounds(WT_STAGING_INPLACE, "sequential", 2);
}
static void test_ucx_chain(void) {
  ucx_rounds(WT_STAGING_SHADOW, "chain", 3);
}
#endif

static void test_rss_flat(void) {
  rss_flat("grpc");
}
#ifdef WT_WITH_UCX
static void test_ucx_rss_flat(void) {
  rss_flat("ucx");
}
#endif

void wt_test_suite_delta(void);
void wt_test_suite_delta(void) {
  CU_pSuite s = CU_add_suite("delta", NULL, NULL);
  CU_add_test(s, "codec: round trip, raw when not smaller, refusals",
              test_codec);
  CU_add_test(s, "rounds send what changed (shadow)", test_rounds_shadow);
  CU_add_test(s, "rounds send what changed (in place)", test_rounds_inplace);
  CU_add_test(s, "a server without the base gets a full push; a failed round",
              test_fallback_and_failure);
  CU_add_test(s, "strangers' delta pushes", test_strangers);
  CU_add_test(s, "memory flat over 200 delta rounds", test_rss_flat);
#ifdef WT_WITH_UCX
  CU_add_test(s, "ucx: delta bucket framing refusals", test_ucx_framing);
  CU_add_test(s, "ucx: wrong bases are refused, the version stays",
              test_ucx_wrong_base);
  CU_add_test(s, "ucx: delta rounds (shadow, one server)", test_ucx_shadow);
  CU_add_test(s, "ucx: delta rounds (in place, one server)", test_ucx_inplace);
  CU_add_test(s,
              "ucx: parallel fan-out, a server off the base gets a full "
              "round; an aborted round",
              test_ucx_parallel);
  CU_add_test(s, "ucx: sequential fan-out, in place", test_ucx_sequential);
  CU_add_test(s, "ucx: chain of three, split into a full and a delta chain",
              test_ucx_chain);
  CU_add_test(s, "ucx: memory flat over 200 delta rounds", test_ucx_rss_flat);
#endif
}
