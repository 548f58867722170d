/* test_admission.c: nobody locks the control plane out (server/service.c,
 * common/rpc_server.c). Watch streams hold no thread, so a thousand are
 * open while a push and a hundred readers run; readers have their own limit
 * and never take the round calls' capacity; a client that opens a push and
 * says nothing, or stops in the middle, is ended by a deadline. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/fixture.h"
#include "wt/pb.h"

static wtt_server S;

/* Threads of this process now. */
static int threads_now(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int n = -1;
  while (f && fgets(line, sizeof(line), f))
    if (sscanf(line, "Threads: %d", &n) == 1) break;
  if (f) fclose(f);
  return n;
}

/* Readers hammering the server until told to stop. */
typedef struct readers {
  wt_rpc_channel *ch;
  atomic_bool stop;
  atomic_long calls, errors;
  pthread_t tids[128];
  int n;
  wt_status *first_error;
  pthread_mutex_t mu;
} readers;

static void *reader_main(void *arg) {
  readers *r = arg;
  char *names[1] = {"model.norm.weight"};
  while (!atomic_load(&r->stop)) {
    Wt__V1__GetWeightVersionRequest v =
        WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
    wt_status *st = wtt_call(r->ch, "GetWeightVersion", &v.base,
                             &wt__v1__weight_version__descriptor, NULL);
    if (st == NULL) {
      Wt__V1__ChecksumWeightsRequest c = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
      c.n_names = 1;
      c.names = names;
      c.algorithm = WT__V1__CHECKSUM_ALGORITHM__CHECKSUM_ALGORITHM_XXH3_64;
      st = wtt_call(r->ch, "ChecksumWeights", &c.base,
                    &wt__v1__checksum_weights_response__descriptor, NULL);
    }
    atomic_fetch_add(&r->calls, 2);
    if (st != NULL) {
      atomic_fetch_add(&r->errors, 1);
      pthread_mutex_lock(&r->mu);
      if (r->first_error == NULL)
        r->first_error = st;
      else
        wt_status_free(st);
      pthread_mutex_unlock(&r->mu);
    }
  }
  return NULL;
}

/* This suite's readers all come from this process, one peer. */
#define PEER_QUOTAS_LIFTED                                             \
  .max_reader_calls_per_peer = 4096, .max_watchers_per_peer = 1000000, \
  .reader_bytes_per_sec = 1ull << 40

static void readers_start(readers *r, wt_rpc_channel *ch, int n) {
  memset(r, 0, sizeof(*r));
  pthread_mutex_init(&r->mu, NULL);
  r->ch = ch;
  for (int i = 0; i < n; i++)
    CU_ASSERT_FATAL(pthread_create(&r->tids[r->n++], NULL, reader_main, r) ==
                    0);
}

static long readers_stop(readers *r) {
  atomic_store(&r->stop, true);
  for (int i = 0; i < r->n; i++) pthread_join(r->tids[i], NULL);
  if (r->first_error != NULL)
    fprintf(stderr, "\n  a reader failed: %s\n",
            wt_status_message(r->first_error));
  wt_status_free(r->first_error);
  pthread_mutex_destroy(&r->mu);
  return atomic_load(&r->errors);
}

#define NWATCH 1000
#define NCHAN 10

/* A thousand watch streams on one server: none holds a thread; each sees
 * the next commit, made while a hundred readers call the server. */
static void test_thousand_watchers(void) {
  /* One process is one peer: the quotas per peer (their own test, in
   * trust) are lifted so that the class's limits are what is measured. */
  wt_server_options o = {.workers = 1, PEER_QUOTAS_LIFTED};
  wtt_server_start(&S, "small", &o);
  WT_ASSERT_OK(wtt_init_grpc(S.ch, 0, 1));
  wt_rpc_channel *ch[NCHAN];
  for (int c = 0; c < NCHAN; c++)
    WT_ASSERT_OK(wt_rpc_channel_new(S.target, NULL, &ch[c]));
  wt_rpc_server_stream **w = calloc(NWATCH, sizeof(*w));
  int before = threads_now();
  for (int i = 0; i < NWATCH; i++) w[i] = wtt_watch_open(ch[i % NCHAN]);
  /* Opened on the server (they answer only when a version commits). */
  int running = 0, queued = 0, pool = 0;
  int64_t end = wt_mono_ms() + 10000;
  while (running < NWATCH && wt_mono_ms() < end) {
    wt_server_admission(S.srv, WT_SERVER_CLASS_WATCH, &running, &queued, &pool);
    if (running < NWATCH) wtt_sleep_ms(10);
  }
  int after = threads_now();
  int rthreads = 0, dthreads = 0;
  wt_server_admission(S.srv, WT_SERVER_CLASS_ROUND, NULL, NULL, &rthreads);
  wt_server_admission(S.srv, WT_SERVER_CLASS_READER, NULL, NULL, &dthreads);
  printf(
      "\n  %d watch streams open; process threads %d before them, %d with "
      "them; watch threads %d, round threads %d, reader threads %d\n",
      running, before, after, pool, rthreads, dthreads);
  CU_ASSERT_EQUAL(running, NWATCH);
  CU_ASSERT_EQUAL(pool, 0);
  CU_ASSERT(after - before <= 4); /* none per stream */

  readers r;
  readers_start(&r, S.ch, 100);
  int64_t t0 = wt_mono_ms();
  wtt_commit_round(&S, "v1", 5);
  int64_t push_ms = wt_mono_ms() - t0;
  wtt_sleep_ms(100);
  long errors = readers_stop(&r);
  printf(
      "  a round of %zu tensors in %lld ms beside 100 readers: %ld calls, "
      "%ld errors; process threads %d\n",
      S.n, (long long)push_ms, atomic_load(&r.calls), errors, threads_now());
  CU_ASSERT_EQUAL(errors, 0);
  wt_server_admission(S.srv, WT_SERVER_CLASS_READER, NULL, NULL, &dthreads);
  CU_ASSERT(dthreads <= WT_SERVER_DEFAULT_READER_CALLS);
  for (int i = 0; i < NWATCH; i++) wtt_watch_expect(w[i], "v1", 1);
  /* And the next one. */
  wtt_commit_round(&S, "v2", 6);
  for (int i = 0; i < NWATCH; i++) wtt_watch_expect(w[i], "v2", 2);
  for (int i = 0; i < NWATCH; i++) wt_rpc_server_stream_destroy(w[i]);
  /* Closed streams leave the server. */
  end = wt_mono_ms() + 10000;
  do {
    wt_server_admission(S.srv, WT_SERVER_CLASS_WATCH, &running, NULL, NULL);
    if (running > 0) wtt_sleep_ms(10);
  } while (running > 0 && wt_mono_ms() < end);
  CU_ASSERT_EQUAL(running, 0);
  free(w);
  for (int c = 0; c < NCHAN; c++) wt_rpc_channel_destroy(ch[c]);
  wtt_assert_model_seed(&S, 6);
  wtt_server_stop(&S);
}

/* Slow readers fill their own class: they wait their turn (and past the
 * queue get RESOURCE_EXHAUSTED naming the option), while the trainer's
 * round calls go through at once. */
static void test_readers_never_take_round_capacity(void) {
  wt_server_options o = {.max_reader_calls = 2,
                         .max_round_calls = 2,
                         .workers = 2,
                         PEER_QUOTAS_LIFTED};
  wtt_server_start(&S, "llama-256m", &o);
  WT_ASSERT_OK(wtt_init_grpc(S.ch, 0, 2));
  /* Every tensor on both workers: about 500 MiB of hashing each (a few
   * hundred ms). */
  enum { NSLOW = 40 };
  Wt__V1__ChecksumWeightsRequest creq = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  creq.all_workers = true;
  /* The same round alone first: the reference for the one beside them. */
  wtt_upd u;
  wtt_upd_init(&u, S.metas, NULL, S.n);
  int64_t a0 = wt_mono_ms();
  uint64_t id = 0;
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  WT_ASSERT_OK(wtt_push_all(S.ch, &u, id, 0, 1 << 20, 2, NULL));
  WT_ASSERT_OK(wtt_abort(S.ch, id, NULL));
  int64_t alone_ms = wt_mono_ms() - a0;
  wtt_bg_call slow[NSLOW];
  for (int i = 0; i < NSLOW; i++) {
    slow[i] =
        (wtt_bg_call){.ch = S.ch,
                      .method = "ChecksumWeights",
                      .req = &creq.base,
                      .type = &wt__v1__checksum_weights_response__descriptor};
    wtt_bg_start(&slow[i]);
  }
  /* Until they fill their class (10 s: a deadline against hanging). */
  int running = 0, queued = 0;
  for (int64_t end = wt_mono_ms() + 10000; wt_mono_ms() < end;) {
    wt_server_admission(S.srv, WT_SERVER_CLASS_READER, &running, &queued, NULL);
    if (running == 2 && queued > 0) break;
    wtt_sleep_ms(2);
  }
  printf("\n  readers: %d running, %d waiting\n", running, queued);
  CU_ASSERT_EQUAL(running, 2);
  CU_ASSERT(queued > 0);
  /* The trainer's round meanwhile, call by call. */
  int64_t t0 = wt_mono_ms();
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  WT_ASSERT_OK(wtt_push_all(S.ch, &u, id, 0, 1 << 20, 2, NULL));
  WT_ASSERT_OK(wtt_abort(S.ch, id, NULL));
  int64_t round_ms = wt_mono_ms() - t0;
  printf(
      "  start, push, abort beside %d slow readers: %lld ms (alone: %lld "
      "ms)\n",
      NSLOW, (long long)round_ms, (long long)alone_ms);
  /* Not queued behind them: readers share the CPU (hashing on this
   * machine's cores), never the round's threads. A ratio to the round
   * alone in this run, so a slow or loaded machine slows both: the two
   * hashing threads take at most the cores the round would have had. */
  CU_ASSERT(round_ms < 3 * alone_ms + 1000);
  /* What the test claims is shown; the readers still queued are not
   * waited for (40 full-model checksums can take minutes on a loaded or
   * sanitized build): stopping the server ends them, each with its answer
   * or the shutdown's, never a refusal. */
  wt_server_stop(S.srv);
  S.srv = NULL;
  for (int i = 0; i < NSLOW; i++) {
    wt_status *st = wtt_bg_join(&slow[i]);
    wt_code code = wt_status_code(st);
    CU_ASSERT(st == NULL || code == WT_UNAVAILABLE || code == WT_CANCELLED ||
              code == WT_ABORTED);
    if (st != NULL && code != WT_UNAVAILABLE && code != WT_CANCELLED &&
        code != WT_ABORTED)
      fprintf(stderr, "  reader %d: %s\n", i, wt_status_message(st));
    wt_status_free(st);
  }
  wtt_server_stop(&S);

  o.max_reader_calls = 1;
  wtt_server_start(&S, "llama-256m", &o);
  /* One slow reader holds the one thread; of a burst of quick ones, 64
   * wait and are answered after it, the rest are refused. */
  wtt_bg_call hold = {.ch = S.ch,
                      .method = "ChecksumWeights",
                      .req = &creq.base,
                      .type = &wt__v1__checksum_weights_response__descriptor};
  wtt_bg_start(&hold);
  do {
    wt_server_admission(S.srv, WT_SERVER_CLASS_READER, &running, NULL, NULL);
  } while (running < 1);
  enum { NBURST = 80 };
  Wt__V1__GetWeightVersionRequest vreq =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  wtt_bg_call burst[NBURST];
  for (int i = 0; i < NBURST; i++) {
    burst[i] = (wtt_bg_call){.ch = S.ch,
                             .method = "GetWeightVersion",
                             .req = &vreq.base,
                             .type = &wt__v1__weight_version__descriptor,
                             .deadline_ms = 30000};
    wtt_bg_start(&burst[i]);
  }
  int refused = 0;
  for (int i = 0; i < NBURST; i++) {
    wt_status *st = wtt_bg_join(&burst[i]);
    if (st != NULL) {
      if (wt_status_code(st) != WT_RESOURCE_EXHAUSTED)
        fprintf(stderr, "\n  reader %d: %s\n", i, wt_status_message(st));
      CU_ASSERT_EQUAL(wt_status_code(st), WT_RESOURCE_EXHAUSTED);
      CU_ASSERT_PTR_NOT_NULL(
          strstr(wt_status_message(st), "reader calls running and"));
      CU_ASSERT_PTR_NOT_NULL(
          strstr(wt_status_message(st), "wt-server --max-reader-calls"));
      refused++;
    }
    wt_status_free(st);
  }
  WT_ASSERT_OK(wtt_bg_join(&hold));
  printf("  %d of %d readers refused with 1 thread and 64 waiting\n", refused,
         NBURST);
  CU_ASSERT(refused > 0);
  CU_ASSERT(refused <= NBURST - 64); /* the held one runs, 64 wait */
  wtt_server_stop(&S);
}

/* Past the watch limit a stream is refused, naming the option. */
static void test_watch_limit(void) {
  wt_server_options o = {.max_watchers = 3, PEER_QUOTAS_LIFTED};
  wtt_server_start(&S, "tiny", &o);
  wt_rpc_server_stream *w[3];
  for (int i = 0; i < 3; i++) w[i] = wtt_watch_open(S.ch);
  int running = 0;
  int64_t end = wt_mono_ms() + 5000;
  do {
    wt_server_admission(S.srv, WT_SERVER_CLASS_WATCH, &running, NULL, NULL);
  } while (running < 3 && wt_mono_ms() < end);
  wt_rpc_server_stream *extra = wtt_watch_open(S.ch);
  ProtobufCMessage *m = NULL;
  bool done = false;
  WT_ASSERT_ERR(wt_rpc_server_stream_read(
                    extra, &wt__v1__weight_version__descriptor, &m, &done),
                WT_RESOURCE_EXHAUSTED,
                "server busy: 3 watch streams open (the limit; raise it with "
                "wt-server --max-watchers)");
  wt_rpc_server_stream_destroy(extra);
  /* A slot frees when a stream closes. */
  wt_rpc_server_stream_destroy(w[0]);
  end = wt_mono_ms() + 5000;
  do {
    wt_server_admission(S.srv, WT_SERVER_CLASS_WATCH, &running, NULL, NULL);
  } while (running > 2 && wt_mono_ms() < end);
  w[0] = wtt_watch_open(S.ch);
  WT_ASSERT_OK(wtt_init_grpc(S.ch, 0, 1));
  wtt_commit_round(&S, "seen", 1);
  for (int i = 0; i < 3; i++) {
    wtt_watch_expect(w[i], "seen", 1);
    wt_rpc_server_stream_destroy(w[i]);
  }
  wtt_server_stop(&S);
}

/* Streams that open a PushWeights and send nothing are ended at the header
 * deadline; one that stops between chunks at the data deadline (the init's
 * timeout_ms), with the round timeout far away. Neither holds its slot. */
static void test_silent_and_stalled_pushes(void) {
  wt_server_options o = {.max_round_calls = 4, .header_timeout_ms = 300};
  wtt_server_start(&S, "tiny", &o);
  enum { NSILENT = 12 };
  wt_rpc_client_stream *silent[NSILENT];
  int64_t t0 = wt_mono_ms();
  for (int i = 0; i < NSILENT; i++)
    WT_ASSERT_OK(wt_rpc_client_stream_open(S.ch, WTT_SVC "PushWeights", 10000,
                                           &silent[i]));
  /* Four at a time (the round threads), each for 300 ms. */
  int running = 0, queued = 0;
  do {
    wtt_sleep_ms(20);
    wt_server_admission(S.srv, WT_SERVER_CLASS_ROUND, &running, &queued, NULL);
  } while ((running > 0 || queued > 0) && wt_mono_ms() - t0 < 5000);
  int64_t ms = wt_mono_ms() - t0;
  printf(
      "\n  %d silent pushes on 4 round threads were ended within %lld "
      "ms\n",
      NSILENT, (long long)ms);
  CU_ASSERT(ms < 3000);
  CU_ASSERT_EQUAL(running + queued, 0);
  /* What each of them was told. */
  wtt_upd u;
  wtt_upd_init(&u, S.metas, NULL, S.n);
  Wt__V1__PushWeightsHeader h = WT__V1__PUSH_WEIGHTS_HEADER__INIT;
  h.update_info = &u.info;
  Wt__V1__PushWeightsChunk msg = WT__V1__PUSH_WEIGHTS_CHUNK__INIT;
  msg.payload_case = WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_HEADER;
  msg.header = &h;
  for (int i = 0; i < NSILENT; i++) {
    WT_ASSERT_ERR(wt_rpc_client_stream_write(silent[i], &msg.base),
                  WT_DEADLINE_EXCEEDED,
                  "no message within 300 ms while waiting for the "
                  "PushWeights header");
    wt_rpc_client_stream_destroy(silent[i]);
  }

  /* A header, some chunks, then silence: the data deadline of 400 ms. */
  Wt__V1__GrpcInitInfo g = WT__V1__GRPC_INIT_INFO__INIT;
  Wt__V1__WeightTransferInitInfo info = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  info.backend = "grpc";
  info.timeout_ms = 400;
  info.backend_init_case = WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_GRPC;
  info.grpc = &g;
  WT_ASSERT_OK(wtt_init(S.ch, &info, NULL));
  uint64_t id = 0;
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  wtt_pusher p;
  WT_ASSERT_OK(wtt_push_open(&p, S.ch, &u, id, 2048, 1000, 1));
  WT_ASSERT_OK(wtt_push_send(&p, 1000));
  t0 = wt_mono_ms();
  WT_ASSERT_ERR(wtt_push_close(&p, NULL), WT_DATA_LOSS,
                "stream ended after 1000 of 6080 bytes");
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  WT_ASSERT_OK(wtt_push_open(&p, S.ch, &u, id, 2048, 1000, 1));
  WT_ASSERT_OK(wtt_push_send(&p, 1000));
  /* Until the data deadline failed the round (10 s: a deadline against
   * hanging); the next write then gets the stream's status. */
  CU_ASSERT(wtt_wait_left_updating(S.ch, 10000) >= 0);
  WT_ASSERT_ERR(wtt_push_send(&p, 1000), WT_DEADLINE_EXCEEDED,
                "no message within 400 ms while waiting for the next chunk");
  wt_status_free(wtt_push_close(&p, NULL));
  /* The stall failed its round, which says so. */
  WT_ASSERT_ERR(wtt_finish(S.ch, "stalled", id), WT_FAILED_PRECONDITION,
                "no message within 400 ms while waiting for the next chunk");
  WT_ASSERT_OK(wtt_start(S.ch, &id));
  WT_ASSERT_OK(wtt_push_all(S.ch, &u, id, 2048, 1000, 3, NULL));
  WT_ASSERT_OK(wtt_finish(S.ch, "after-stall", id));
  wtt_assert_model_seed(&S, 3);
  wtt_server_stop(&S);
}

void wt_test_suite_admission(void);
void wt_test_suite_admission(void) {
  CU_pSuite s = CU_add_suite("admission", NULL, NULL);
  CU_add_test(s, "1000 watch streams, a push and 100 readers",
              test_thousand_watchers);
  CU_add_test(s, "readers never take the round calls' capacity",
              test_readers_never_take_round_capacity);
  CU_add_test(s, "the watch limit", test_watch_limit);
  CU_add_test(s, "silent and stalled pushes are ended",
              test_silent_and_stalled_pushes);
}
