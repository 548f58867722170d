/* test_embed.c: embedding (wt_store_embedding, docs/embedding.md): a store
 * over buffers its caller owns, a round, the commit callback, and the bytes
 * in the caller's buffers, shadow and in place; then a server whose every
 * worker's store is the engine's, rounds pushed over gRPC, and the
 * engine's own "load_weights" in the callback seeing the trainer's bytes. */

#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "support/fixture.h"
#include "wt/checksum.h"
#include "wt/param_store.h"
#include "wt/server.h"
#include "wt/synthetic.h"
#include "wt_test.h"

#define MAX_T 64

typedef struct engine {
  pthread_mutex_t mu;
  void *bufs[4][2]; /* per store (worker), per set */
  int nsets[4];
  uint64_t set_bytes;
  int released, commits;
  bool misalign, fail;
  /* What the engine "loaded" at the last commit of worker 0. */
  char digest[MAX_T][WT_DIGEST_HEX_MAX];
  size_t region[MAX_T];
  bool pointers_ok;
} engine;

static int store_index(const char *name) {
  return strncmp(name, "worker-", 7) == 0 ? atoi(name + 7) & 3 : 0;
}

static wt_status *give(void *user, const char *store, uint64_t set_bytes,
                       int nsets, void *out[2]) {
  engine *e = user;
  if (e->fail)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "the engine has no memory");
  int k = store_index(store);
  pthread_mutex_lock(&e->mu);
  e->set_bytes = set_bytes;
  e->nsets[k] = nsets;
  for (int b = 0; b < nsets; b++) {
    e->bufs[k][b] = aligned_alloc(64, set_bytes + 64);
    memset(e->bufs[k][b], 0xee, set_bytes + 64);
    out[b] = (char *)e->bufs[k][b] + (e->misalign ? 8 : 0);
  }
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

static void give_back(void *user, const char *store, void *bufs[2], int nsets) {
  engine *e = user;
  int k = store_index(store);
  pthread_mutex_lock(&e->mu);
  for (int b = 0; b < nsets; b++) {
    CU_ASSERT((char *)bufs[b] - (e->misalign ? 8 : 0) == (char *)e->bufs[k][b]);
    free(e->bufs[k][b]);
    e->bufs[k][b] = NULL;
  }
  e->released++;
  pthread_mutex_unlock(&e->mu);
}

/* The engine's load_weights: every tensor's live bytes, where the store
 * says they are, hashed (a real engine copies them into its own layout). */
static void committed(void *user, wt_param_store *s) {
  engine *e = user;
  wt_param_region regions[WT_PARAM_STORE_MAX_REGIONS];
  size_t nr = wt_param_store_regions(s, regions);
  bool first = strcmp(wt_param_store_name(s), "worker-0") == 0 ||
               strcmp(wt_param_store_name(s), "") == 0;
  pthread_mutex_lock(&e->mu);
  e->commits++;
  for (size_t i = 0; first && i < wt_param_store_count(s) && i < MAX_T; i++) {
    const wt_tensor_meta *m = wt_param_store_meta(s, i);
    uint64_t off = 0;
    wt_param_store_locate(s, i, &e->region[i], &off);
    const void *live = wt_param_store_live(s, i);
    if (e->region[i] >= nr ||
        (const char *)regions[e->region[i]].base + off != live)
      e->pointers_ok = false;
    wt_status_free(
        wt_digest_hex(WT_HASH_SHA256, live, (size_t)m->nbytes, e->digest[i]));
  }
  pthread_mutex_unlock(&e->mu);
}

static void engine_init(engine *e) {
  memset(e, 0, sizeof(*e));
  pthread_mutex_init(&e->mu, NULL);
  e->pointers_ok = true;
}

static void check_store(wt_staging staging) {
  engine e;
  engine_init(&e);
  wt_store_embedding emb = {give, give_back, committed, &e};
  wt_store_config cfg = {.staging = staging, .embed = &emb};
  wt_param_store *s = NULL;
  WT_ASSERT_OK(wt_param_store_from_synthetic("small", 3, &cfg, &s));
  CU_ASSERT_FATAL(s != NULL);
  int nsets = staging == WT_STAGING_SHADOW ? 2 : 1;
  CU_ASSERT_EQUAL(e.nsets[0], nsets);
  /* The model was written into the caller's buffer, at the store's offsets. */
  size_t n = wt_param_store_count(s);
  size_t right = 0;
  for (size_t i = 0; i < n; i++) {
    const wt_tensor_meta *m = wt_param_store_meta(s, i);
    size_t region = 9;
    uint64_t off = 0;
    wt_param_store_locate(s, i, &region, &off);
    char got[WT_DIGEST_HEX_MAX], want[WT_DIGEST_HEX_MAX];
    WT_ASSERT_OK(wt_digest_hex(WT_HASH_SHA256, (char *)e.bufs[0][region] + off,
                               (size_t)m->nbytes, got));
    wtt_expected_digest(m, 3, WT_HASH_SHA256, want);
    right += strcmp(got, want) == 0;
  }
  CU_ASSERT_EQUAL(right, n);
  /* A round rewrites tensor 0 with seed 8's bytes. */
  const wt_tensor_meta *m0 = wt_param_store_meta(s, 0);
  unsigned char *bytes = malloc((size_t)m0->nbytes);
  wt_synthetic_fill(m0, 8, 0, bytes, (size_t)m0->nbytes);
  wt_param_store_begin(s);
  WT_ASSERT_OK(wt_param_store_stage_write(s, 0, 0, bytes, (size_t)m0->nbytes));
  wt_param_store_staged(s, 0);
  WT_ASSERT_OK(wt_param_store_check_commit(s));
  int before = e.commits;
  wt_param_store_commit(s);
  CU_ASSERT_EQUAL(e.commits, before + 1);
  CU_ASSERT(e.pointers_ok);
  /* Shadow: tensor 0 now lives in the caller's second set, the rest in the
   * first; in place: all in the one set. */
  CU_ASSERT_EQUAL(e.region[0], staging == WT_STAGING_SHADOW ? 1u : 0u);
  CU_ASSERT_EQUAL(e.region[1], 0);
  char want[WT_DIGEST_HEX_MAX];
  wtt_expected_digest(m0, 8, WT_HASH_SHA256, want);
  CU_ASSERT_STRING_EQUAL(e.digest[0], want);
  wtt_expected_digest(wt_param_store_meta(s, 1), 3, WT_HASH_SHA256, want);
  CU_ASSERT_STRING_EQUAL(e.digest[1], want);
  uint64_t off = 0;
  size_t region = 0;
  wt_param_store_locate(s, 0, &region, &off);
  CU_ASSERT_EQUAL(
      memcmp((char *)e.bufs[0][region] + off, bytes, (size_t)m0->nbytes), 0);
  free(bytes);
  wt_param_store_destroy(s);
  CU_ASSERT_EQUAL(e.released, 1); /* given back once, then the caller's */
  CU_ASSERT_PTR_NULL(e.bufs[0][0]);
}

static void test_store_shadow(void) {
  check_store(WT_STAGING_SHADOW);
}
static void test_store_inplace(void) {
  check_store(WT_STAGING_INPLACE);
}

/* What the caller gets wrong is said, and its buffers are given back. */
static void test_store_refusals(void) {
  engine e;
  engine_init(&e);
  wt_store_embedding emb = {give, give_back, committed, &e};
  wt_param_store *s = NULL;
  wt_store_config shared = {.memory = WT_MEM_SHARED, .embed = &emb};
  WT_ASSERT_ERR(wt_param_store_from_synthetic("tiny", 1, &shared, &s),
                WT_INVALID_ARGUMENT, "cannot be of the 'shared' kind");
  e.misalign = true;
  wt_store_config cfg = {.embed = &emb, .name = "worker-1"};
  WT_ASSERT_ERR(wt_param_store_from_synthetic("tiny", 1, &cfg, &s),
                WT_INVALID_ARGUMENT, "not 64-byte aligned");
  CU_ASSERT_EQUAL(e.released, 1);
  e.misalign = false;
  e.fail = true;
  WT_ASSERT_ERR(wt_param_store_from_synthetic("tiny", 1, &cfg, &s),
                WT_RESOURCE_EXHAUSTED, "'worker-1': embed.buffers: the engine");
  wt_store_embedding none = {NULL, NULL, NULL, &e};
  cfg.embed = &none;
  WT_ASSERT_ERR(wt_param_store_from_synthetic("tiny", 1, &cfg, &s),
                WT_INVALID_ARGUMENT, "embed.buffers is NULL");
  CU_ASSERT_PTR_NULL(s);
}

/* A server over the engine's memory: two workers, rounds over gRPC, the
 * callback per worker per commit, the trainer's bytes in the engine's
 * buffers; the export is not needed (no socket, no copy). */
static void check_server(wt_staging staging) {
  engine e;
  engine_init(&e);
  wt_store_embedding emb = {give, give_back, committed, &e};
  wt_server_options o = {.staging = staging, .workers = 2, .embed = &emb};
  wtt_server s;
  wtt_server_start(&s, "small", &o);
  WT_ASSERT_OK(wtt_init_grpc(s.ch, 0, s.workers));
  CU_ASSERT(e.nsets[0] > 0 && e.nsets[1] > 0);
  for (uint64_t seed = 5; seed <= 7; seed++) {
    int before = e.commits;
    wtt_commit_round(&s, "emb", seed);
    CU_ASSERT_EQUAL(e.commits, before + 2); /* each worker's store, once */
    size_t right = 0;
    for (size_t i = 0; i < s.n && i < MAX_T; i++) {
      char want[WT_DIGEST_HEX_MAX];
      wtt_expected_digest(&s.metas[i], seed, WT_HASH_SHA256, want);
      right += strcmp(e.digest[i], want) == 0;
    }
    CU_ASSERT_EQUAL(right, s.n);
  }
  CU_ASSERT(e.pointers_ok);
  wtt_server_stop(&s);
  CU_ASSERT_EQUAL(e.released, 2);
}

static void test_server_shadow(void) {
  check_server(WT_STAGING_SHADOW);
}
static void test_server_inplace(void) {
  check_server(WT_STAGING_INPLACE);
}

void wt_test_suite_embed(void);
void wt_test_suite_embed(void) {
  CU_pSuite s = CU_add_suite("embed", NULL, NULL);
  CU_add_test(s, "a store over the caller's buffers, shadow",
              test_store_shadow);
  CU_add_test(s, "a store over the caller's buffers, in place",
              test_store_inplace);
  CU_add_test(s, "refusals name what is wrong", test_store_refusals);
  CU_add_test(s, "a server over the engine's memory, shadow",
              test_server_shadow);
  CU_add_test(s, "a server over the engine's memory, in place",
              test_server_inplace);
}
