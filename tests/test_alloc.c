/* Suite "alloc": allocation-failure injection over a whole round, in the
 * style of curl's torture tests. In a build configured with
 * -DWT_ALLOC_FAULTS=ON (scripts/test.sh --alloc-faults, under ASan) every
 * allocation of wt's own code (libwt_common, libwt_server, libwt_client) is
 * counted; the test counts those of one whole round (init, start, push,
 * finish, checksum) on an in-process server with two workers, then for
 * every N up to that count makes the N-th fail and runs the round again:
 * each call must come back (an error, or success where the failure was
 * absorbed), and the next round on the same server must commit and hold
 * exactly its bytes. ASan's leak check covers every failure path taken. In
 * any other build the suite says "skipped: built without WT_ALLOC_FAULTS"
 * (wt_tests --suite alloc exits 77, which ctest reports as a skip). */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/fixture.h"
#include "wt/client.h"
#include "wt/pb.h"
#include "wt/source.h"
#include "wt/synthetic.h"
#include "wt/trainer.h"

#ifdef WT_ALLOC_FAULTS
#define WT_ALLOC_FAULT_IMPL /* the test's own allocations are not counted */
#include "alloc_fault.h"

static wtt_server S;

/* init, start, push, finish, checksum; the first error. *open_round is the
 * round left open when it failed midway (0: none). */
static wt_status *whole_round(uint64_t seed, uint64_t *open_round) {
  wt_status *st = NULL;
  uint64_t id = 0;
  char version[64];
  *open_round = 0;
  if ((st = wtt_init_grpc(S.ch, 1000, S.workers)) != NULL) return st;
  if ((st = wtt_start(S.ch, &id)) != NULL) return st;
  *open_round = id;
  wtt_upd u;
  wtt_upd_init(&u, S.metas, NULL, S.n);
  if ((st = wtt_push_all(S.ch, &u, id, 2048, 1000, seed, NULL)) != NULL)
    return st;
  snprintf(version, sizeof(version), "alloc-%" PRIu64, seed);
  if ((st = wtt_finish(S.ch, version, id)) != NULL) return st;
  *open_round = 0;
  Wt__V1__ChecksumWeightsRequest req = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  req.all_workers = true;
  ProtobufCMessage *resp = NULL;
  st = wtt_call(S.ch, "ChecksumWeights", &req.base,
                &wt__v1__checksum_weights_response__descriptor, &resp);
  if (st == NULL) {
    const Wt__V1__ChecksumWeightsResponse *r =
        (const Wt__V1__ChecksumWeightsResponse *)resp;
    if (r->n_checksums != S.n * S.workers)
      st = wt_status_new(WT_INTERNAL, "ChecksumWeights: %zu digests of %zu",
                         r->n_checksums, S.n * S.workers);
  }
  wt_pb_free(resp);
  return st;
}

/* One round of some kind: the first error; *open tells whether it left a
 * round to abort. */
typedef wt_status *(*round_fn)(uint64_t seed, uint64_t *open);
/* Drops what a failed round left; then the server must serve again. */
typedef void (*cleanup_fn)(uint64_t open);
/* After a good round: the bytes of `seed` are what every worker holds. */
typedef void (*check_fn)(uint64_t seed);

/* The torture loop: counts one round's allocations, then fails each of
 * them in turn; the next round must always commit. */
static void torture(const char *what, round_fn round, cleanup_fn cleanup,
                    check_fn check) {
  uint64_t open = 0, seed = 1;
  /* A first round warms up what is made once (registries, engines). */
  WT_ASSERT_OK(round(seed++, &open));
  wt_fault_alloc_arm(0);
  WT_ASSERT_OK(round(seed++, &open));
  const uint64_t count = wt_fault_alloc_count();
  CU_ASSERT_FATAL(count > 0);
  uint64_t injected = 0, absorbed = 0, not_reached = 0, failed = 0;
  uint64_t by_code[WT_UNAUTHENTICATED + 1] = {0};
  for (uint64_t n = 1; n <= count; n++) {
    wt_fault_alloc_arm(n);
    wt_status *st = round(seed++, &open);
    bool fired = wt_fault_alloc_fired();
    wt_fault_alloc_arm(0);
    injected += fired;
    not_reached += !fired;
    if (st != NULL) {
      failed++;
      int code = (int)wt_status_code(st);
      if (code >= 0 && code <= WT_UNAUTHENTICATED) by_code[code]++;
      /* Every error says what failed. */
      CU_ASSERT(strlen(wt_status_message(st)) > 0);
      if (getenv("WT_ALLOC_VERBOSE") != NULL)
        printf("\n  %s: allocation %" PRIu64 ": %s", what, n,
               wt_status_message(st));
      wt_status_free(st);
    } else if (fired) {
      absorbed++;
    }
    /* The server keeps serving: the trainer drops what failed, and the
     * next round commits and holds exactly its bytes. */
    cleanup(open);
    uint64_t good = seed++;
    st = round(good, &open);
    if (st != NULL)
      printf("\n  %s: after failing allocation %" PRIu64 " of %" PRIu64
             ", the next round: %s",
             what, n, count, wt_status_message(st));
    WT_ASSERT_OK(st);
    check(good);
  }
  printf("\n  %s: %" PRIu64 " allocations of wt's own per round; %" PRIu64
         " failures injected (%" PRIu64 " not reached in that run); %" PRIu64
         " rounds failed (",
         what, count, injected, not_reached, failed);
  const char *sep = "";
  for (int c = 0; c <= WT_UNAUTHENTICATED; c++)
    if (by_code[c]) {
      printf("%s%s %" PRIu64, sep, wt_code_name((wt_code)c), by_code[c]);
      sep = ", ";
    }
  printf("), %" PRIu64
         " absorbed (the round still succeeded); %zu "
         "allocation sites reached so far in this process\n",
         absorbed, wt_fault_alloc_sites(NULL));
}

static void cleanup_raw(uint64_t open) {
  if (open != 0) wt_status_free(wtt_abort(S.ch, open, NULL));
}

static void check_raw(uint64_t seed) {
  wtt_assert_model_seed(&S, seed);
}

/* The server's side, driven call by call. */
static void test_every_allocation_of_a_round(void) {
  wtt_server_start_simple(&S, "tiny", 2, WT_STAGING_SHADOW, 0);
  torture("calls by hand (grpc)", whole_round, cleanup_raw, check_raw);
  wtt_server_stop(&S);
}

/* The trainer's side too: the sync client, a trainer engine and a source. */
static wtt_servers SS;
static wt_sync_client *C;
static const char *g_backend;

static wt_status *client_round(uint64_t seed, uint64_t *open) {
  wt_status *st = NULL;
  Wt__V1__WeightTransferInitInfo *init = NULL;
  wt_trainer *t = NULL;
  wt_source *src = NULL;
  wt_param_checksum *sums = NULL;
  size_t nsums = 0;
  char version[64];
  *open = 0;
  if ((st = wt_source_synthetic("tiny", seed, &src)) != NULL) goto out;
  if ((st = wt_trainer_init_info(g_backend, NULL, 0, &init)) != NULL) goto out;
  if ((st = wt_sync_client_init_transfer(C, init, src, &t)) != NULL) goto out;
  if ((st = wt_sync_client_start(C)) != NULL) goto out;
  *open = 1;
  if ((st = wt_sync_client_update(C, t, src, NULL, NULL)) != NULL) goto out;
  snprintf(version, sizeof(version), "client-%" PRIu64, seed);
  if ((st = wt_sync_client_finish(C, version)) != NULL) goto out;
  *open = 0;
  st = wt_sync_client_checksums(C, 0, NULL, 0, WT_HASH_SHA256, true, &sums,
                                &nsums);
out:
  wt_param_checksums_free(sums, nsums);
  wt_trainer_destroy(t);
  wt_source_destroy(src);
  wt_pb_free(init ? &init->base : NULL);
  return st;
}

static void cleanup_client(uint64_t open) {
  if (open != 0) wt_status_free(wt_sync_client_abort(C, "alloc test"));
}

static void check_client(uint64_t seed) {
  wt_source *src = NULL;
  WT_ASSERT_OK(wt_source_synthetic("tiny", seed, &src));
  wtt_assert_servers_hold(C, src, WT_HASH_SHA256);
  wt_source_destroy(src);
}

static void client_torture(const char *backend, const char *what) {
  const char *models[] = {"synthetic:tiny"};
  const uint32_t workers[] = {2};
  wtt_servers_start(&SS, 1, models, workers, WT_STAGING_SHADOW, NULL);
  C = wtt_client_of(&SS);
  g_backend = backend;
  torture(what, client_round, cleanup_client, check_client);
  wt_sync_client_destroy(C);
  C = NULL;
  wtt_servers_stop(&SS);
}

static void test_client_grpc(void) {
  client_torture("grpc", "sync client, grpc");
}

static void test_client_ucx(void) {
#ifdef WT_WITH_UCX
  client_torture("ucx", "sync client, ucx");
#else
  wt_test_skip("allocation failures, ucx", "built without UCX");
#endif
}

void wt_test_suite_alloc(void) {
  CU_pSuite s = CU_add_suite("alloc", NULL, NULL);
  CU_add_test(s, "the N-th allocation of a round fails, for every N",
              test_every_allocation_of_a_round);
  CU_add_test(s, "the same through the sync client, grpc", test_client_grpc);
  CU_add_test(s, "the same through the sync client, ucx", test_client_ucx);
}

#else

/* Nothing to run: the suite says it skipped (the runner exits 77 when it
 * was the one asked for, which ctest reports as a skip). */
void wt_test_suite_alloc(void) {
  wt_test_suite_skipped(
      "built without WT_ALLOC_FAULTS (cmake -DWT_ALLOC_FAULTS=ON; "
      "scripts/test.sh --alloc-faults runs it under ASan)");
}

#endif
