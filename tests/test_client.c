/* test_client.c: the client library (client/): the trainer registry, the
 * control plane, and the sync client with the grpc trainer against in-process
 * servers (server/include/wt/server.h) on 127.0.0.1:0. */

#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tool_format.h"
#include "backends/backends.h"
#include "wt/bindings.h"
#include "wt/client.h"
#include "wt/control.h"
#include "wt/pb.h"
#include "wt/safetensors.h"
#include "wt/server.h"
#include "wt/source.h"
#include "wt/synthetic.h"
#include "wt/trainer.h"
#include "support/fake_cuda.h"
#include "support/fake_engine.h"
#include "support/fake_trainer.h"
#include "support/fixture.h"
#include "support/wt_proc.h"
#include "support/sources.h"
#include "wt_test.h"

/* The grpc trainer sends chunks that lie in one tensor straight from the
 * source's memory: once update returns, gRPC holds none of it, so the
 * caller may overwrite and free it before the finish, and what commits is
 * what was sent (under ASan, any later read of the freed memory fails the
 * suite). */
static void test_grpc_push_from_memory_freed(void) {
  static wtt_server S;
  wtt_server_start(&S, "small", NULL);
  const char *targets[1] = {S.target};
  wt_client_options co = {.timeout_ms = 10000, .data_timeout_ms = 20000};
  wt_sync_client *c = NULL;
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, &co, &c));
  wt_backend_option opts[1] = {{"chunk_size", "64K"}};
  Wt__V1__WeightTransferInitInfo *info = NULL;
  WT_ASSERT_OK(wt_trainer_init_info("grpc", opts, 1, &info));
  wt_trainer *t = NULL;
  WT_ASSERT_OK(wt_sync_client_init_transfer(c, info, NULL, &t));
  wt_pb_free(&info->base);
  for (uint64_t seed = 31; seed <= 32; seed++) {
    uint64_t total = 0;
    for (size_t k = 0; k < S.n; k++) total += S.metas[k].nbytes;
    unsigned char *buf = malloc(total ? total : 1);
    wt_source_tensor *ts = calloc(S.n, sizeof(*ts));
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ts);
    uint64_t off = 0;
    for (size_t k = 0; k < S.n; k++) {
      const wt_tensor_meta *m = &S.metas[k];
      wt_synthetic_fill(m, seed, 0, buf + off, m->nbytes);
      ts[k] = (wt_source_tensor){.name = m->name,
                                 .dtype = m->dtype,
                                 .ndim = m->ndim,
                                 .shape = m->shape,
                                 .data = buf + off,
                                 .nbytes = m->nbytes};
      off += m->nbytes;
    }
    wt_source *src = NULL;
    WT_ASSERT_OK(wt_source_memory(ts, S.n, &src));
    WT_ASSERT_OK(wt_sync_client_start(c));
    WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
    /* The trainer's next step overwrites its tensors, then frees them. */
    wt_source_destroy(src);
    memset(buf, 0xee, total);
    free(buf);
    free(ts);
    WT_ASSERT_OK(wt_sync_client_finish(c, "from-memory"));
    wtt_assert_model_seed(&S, seed);
  }
  wt_trainer_destroy(t);
  wt_sync_client_destroy(c);
  wtt_server_stop(&S);
}

/* The grpc trainer's give-up: its pushes to a server that stopped (SIGSTOP)
 * fail at the data deadline while gRPC still holds chunks that refer to
 * the caller's memory (its connection cannot write: gRPC would hold them
 * until the connection died, which here, with gRPC's own TCP user timeout
 * of 20 s, is long after; the RPC layer ends the wait and shuts the
 * connection down within a second of the deadline); with a release wait of 1 ms
 * (the init info's timeout_ms) send_weights returns at once, the caller frees
 * that memory, and gRPC's late releases land in the count the slices share,
 * never in the returned frame (ASan with detect_stack_use_after_return, as
 * scripts/test.sh --sanitize runs it). Then a push to a server that
 * answers commits. */
typedef struct push_thread {
  wt_trainer *t;
  wt_source *src;
  wt_status *st;
  int64_t ms;
} push_thread;

static void *push_main(void *arg) {
  push_thread *p = arg;
  int64_t t0 = wt_mono_ms();
  p->st = wt_trainer_get_ops(p->t)->send_weights(wt_trainer_self(p->t), p->src,
                                                 NULL, NULL);
  p->ms = wt_mono_ms() - t0;
  return NULL;
}

static void test_grpc_push_gives_up_waiting(void) {
  char *dir = wt_test_tmpdir();
  CU_ASSERT_FATAL(dir != NULL);
  wt_proc_server srv;
  const char *const extra[] = {"--model", "synthetic:llama-256m", "--log-level",
                               "debug", NULL};
  CU_ASSERT_FATAL(wt_proc_server_start(&srv, dir, "stopped", extra));
  const char *targets[1] = {srv.addr};
  wt_client_options co = {
      .timeout_ms = 2000, .data_timeout_ms = 2000, .tcp_user_timeout_ms = -1};
  wt_sync_client *c = NULL;
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, &co, &c));
  Wt__V1__WeightTransferInitInfo *info = NULL;
  WT_ASSERT_OK(wt_trainer_init_info(
      "grpc", (const wt_backend_option[]){{"chunk_size", "64K"}}, 1, &info));
  /* The server's engine and round as usual; the trainer engine made by
   * hand with a release wait of 1 ms (its init info's timeout_ms). */
  WT_ASSERT_OK(wt_sync_client_init_transfer(c, info, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_start(c));
  info->timeout_ms = 1;
  wt_trainer_init_args args = {.init_info = info,
                               .ctx = wt_sync_client_trainer_ctx(c)};
  wt_trainer *t = NULL;
  WT_ASSERT_OK(wt_trainer_create("grpc", &args, &t));
  wtt_held h;
  wtt_held_load("llama-256m", 51, &h);
  push_thread p = {.t = t};
  WT_ASSERT_OK(wt_source_memory(h.tensors, h.n, &p.src));
  pthread_t th;
  CU_ASSERT_FATAL(pthread_create(&th, NULL, push_main, &p) == 0);
  /* Once the server took the push's header, it stops reading (SIGSTOP):
   * the chunks in gRPC's hands stay there until the deadline. */
  CU_ASSERT(wt_proc_wait_for_text(srv.log, "push 1 of", srv.pid, 10000));
  CU_ASSERT(kill(srv.pid, SIGSTOP) == 0);
  pthread_join(th, NULL);
  CU_ASSERT_PTR_NOT_NULL(p.st);
  printf("\n  a push to a stopped server: %s after %lld ms",
         p.st ? wt_status_message(p.st) : "(ok?)", (long long)p.ms);
  /* Its data deadline and a second, whatever gRPC holds (this suite also
   * runs beside busy loops). */
  CU_ASSERT(p.ms < co.data_timeout_ms + 1000);
  wt_status_free(p.st);
  wt_source_destroy(p.src);
  /* The caller's next step overwrites and frees its tensors. */
  for (size_t k = 0; k < h.n; k++) memset(h.data[k], 0xee, h.metas[k].nbytes);
  wtt_held_free(&h);
  wt_trainer_destroy(t);
  wt_pb_free(&info->base);
  wt_sync_client_destroy(c);
  wtt_sleep_ms(300); /* gRPC's late releases, if any */
  kill(srv.pid, SIGCONT);
  wt_proc_server_stop(&srv, 10000, NULL);
  wt_proc_kill_all();
  wt_test_rmtree(dir);
  free(dir);
  /* The next push, to a server that answers, commits its bytes. */
  static wtt_server S;
  wtt_server_start(&S, "small", NULL);
  targets[0] = S.target;
  co = (wt_client_options){.timeout_ms = 10000, .data_timeout_ms = 20000};
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, &co, &c));
  WT_ASSERT_OK(wt_trainer_init_info("grpc", NULL, 0, &info));
  wt_source *src = NULL;
  WT_ASSERT_OK(wt_source_synthetic("small", 61, &src));
  WT_ASSERT_OK(wt_sync_client_init_transfer(c, info, src, &t));
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_sync_client_update(c, t, NULL, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_finish(c, "after-the-stop"));
  wtt_assert_model_seed(&S, 61);
  wt_trainer_destroy(t);
  wt_source_destroy(src);
  wt_pb_free(&info->base);
  wt_sync_client_destroy(c);
  wtt_server_stop(&S);
}

/* ---- trainer registry --------------------------------------------------- */

static void test_trainer_registry(void) {
  const wt_trainer_ops *ops = NULL;
  WT_ASSERT_OK(wt_trainer_lookup("grpc", &ops));
  CU_ASSERT_PTR_EQUAL(ops, &wt_grpc_trainer_ops);
  CU_ASSERT_EQUAL(ops->header.abi_version, WT_TRAINER_ABI_VERSION);
  CU_ASSERT_FALSE(ops->flags & WT_TRAINER_NEEDS_UPDATE_WEIGHTS);
  char *names = NULL;
  WT_ASSERT_OK(wt_trainer_names(&names));
  CU_ASSERT_PTR_NOT_NULL(strstr(names, "grpc"));
  free(names);
  WT_ASSERT_ERR(wt_trainer_lookup("carrier-pigeon", &ops), WT_NOT_FOUND,
                "grpc");
  WT_ASSERT_ERR(wt_trainer_register("grpc", &wt_grpc_trainer_ops),
                WT_ALREADY_EXISTS, "grpc");

  /* The grpc engine checks its init info's extras. */
  wt_sync_client *c = NULL;
  const char *targets[] = {"127.0.0.1:1"};
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, NULL, &c));
  Wt__V1__WeightTransferInitInfo info = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  Wt__V1__GrpcInitInfo g = WT__V1__GRPC_INIT_INFO__INIT;
  Wt__V1__UInt64Value chunk = WT__V1__UINT64_VALUE__INIT;
  info.backend_init_case = WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_GRPC;
  info.grpc = &g;
  g.chunk_size_bytes = &chunk;
  chunk.value = 64u << 20;
  wt_trainer_init_args args = {.init_info = &info,
                               .ctx = wt_sync_client_trainer_ctx(c)};
  wt_trainer *t = NULL;
  WT_ASSERT_ERR(wt_trainer_create("grpc", &args, &t), WT_INVALID_ARGUMENT,
                "chunk_size_bytes");
  chunk.value = 4096;
  /* A round in parts needs every part entry. */
  fake_trainer_register();
  WT_ASSERT_ERR(wt_trainer_create("test-half-parts", &args, &t),
                WT_FAILED_PRECONDITION,
                "'test-half-parts': a table with parts needs prepare_part, "
                "part_info, part_done");
  CU_ASSERT_PTR_NULL(t);
  WT_ASSERT_OK(wt_trainer_create("grpc", &args, &t));
  CU_ASSERT_STRING_EQUAL(wt_trainer_backend(t), "grpc");
  CU_ASSERT_FALSE(wt_trainer_needs_update_weights(t));
  wt_trainer_destroy(t);
  wt_sync_client_destroy(c);
}

/* ---- sync client without servers ---------------------------------------- */

static void test_client_arguments(void) {
  wt_sync_client *c = NULL;
  const char *dup[] = {"127.0.0.1:1", "127.0.0.1:1"};
  WT_ASSERT_ERR(wt_sync_client_new(dup, 2, NULL, &c), WT_INVALID_ARGUMENT,
                "'127.0.0.1:1' is given twice");
  WT_ASSERT_ERR(wt_sync_client_new(dup, 0, NULL, &c), WT_INVALID_ARGUMENT,
                "at least one server");
  /* Port 1 on loopback refuses at once. */
  wt_client_options opts = {.timeout_ms = 3000};
  WT_ASSERT_OK(wt_sync_client_new(dup, 1, &opts, &c));
  CU_ASSERT_EQUAL(wt_sync_client_server_count(c), 1);
  CU_ASSERT_STRING_EQUAL(wt_sync_client_target(c, 0), "127.0.0.1:1");
  WT_ASSERT_ERR(wt_sync_client_finish(c, ""), WT_INVALID_ARGUMENT,
                "weight_version");
  uint32_t ws = 0;
  wt_status *st = wt_sync_client_world_size(c, &ws);
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  CU_ASSERT(wt_status_code(st) == WT_UNAVAILABLE ||
            wt_status_code(st) == WT_DEADLINE_EXCEEDED);
  CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), "127.0.0.1:1"));
  wt_status_free(st);
  /* An unknown backend fails before any server is called (else the error
   * would be UNAVAILABLE). */
  Wt__V1__WeightTransferInitInfo info = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  info.backend = "carrier-pigeon";
  wt_trainer *t = NULL;
  WT_ASSERT_ERR(wt_sync_client_init_transfer(c, &info, NULL, &t), WT_NOT_FOUND,
                "grpc");
  CU_ASSERT_PTR_NULL(t);
  Wt__V1__GrpcInitInfo g = WT__V1__GRPC_INIT_INFO__INIT;
  info.backend = "ucx";
  info.backend_init_case = WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_GRPC;
  info.grpc = &g;
  WT_ASSERT_ERR(wt_sync_client_init_transfer(c, &info, NULL, &t),
                WT_INVALID_ARGUMENT,
                "init_info.backend is 'ucx' but init_info carries grpc "
                "settings");
  Wt__V1__ServerInfo *si = NULL;
  WT_ASSERT_ERR(wt_sync_client_server_info(c, 3, &si), WT_INVALID_ARGUMENT,
                "server index 3");
  wt_sync_client_destroy(c);
}

/* ---- sync client against in-process servers ---------------------------- */

/* grpc init info with small chunks and buckets, so that a "tiny" round
 * spans several buckets and a tensor spans several chunks. */
typedef struct grpc_info {
  Wt__V1__WeightTransferInitInfo info;
  Wt__V1__GrpcInitInfo grpc;
  Wt__V1__UInt64Value chunk, bucket;
} grpc_info;

static const Wt__V1__WeightTransferInitInfo *grpc_info_make(grpc_info *g,
                                                            uint64_t chunk,
                                                            uint64_t bucket) {
  wt__v1__weight_transfer_init_info__init(&g->info);
  wt__v1__grpc_init_info__init(&g->grpc);
  wt__v1__uint64_value__init(&g->chunk);
  wt__v1__uint64_value__init(&g->bucket);
  g->info.backend = "grpc";
  g->info.backend_init_case =
      WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_GRPC;
  g->info.grpc = &g->grpc;
  if (chunk) {
    g->chunk.value = chunk;
    g->grpc.chunk_size_bytes = &g->chunk;
  }
  if (bucket) {
    g->bucket.value = bucket;
    g->grpc.packed_buffer_size_bytes = &g->bucket;
  }
  return &g->info;
}

typedef struct progress_log {
  unsigned calls;
  wt_progress last;
  bool monotonic;
} progress_log;

static void record_progress(const wt_progress *p, void *user) {
  progress_log *l = user;
  if (l->calls > 0 && (p->bytes_done < l->last.bytes_done ||
                       p->tensors_done < l->last.tensors_done))
    l->monotonic = false;
  l->calls++;
  l->last = *p;
}

/* A watch callback that keeps the first version and stops. */
static bool first_only(const wt_weight_version *wv, void *user) {
  snprintf((char *)user, 64, "%s", wv->version);
  return false;
}

static void test_round_one_server(void) {
  wtt_servers s;
  const char *models[] = {"synthetic:tiny"};
  const uint32_t workers[] = {1};
  wtt_servers_start(&s, 1, models, workers, WT_STAGING_SHADOW, NULL);
  wt_sync_client *c = wtt_client_of(&s);

  uint32_t ws = 0;
  WT_ASSERT_OK(wt_sync_client_world_size(c, &ws));
  CU_ASSERT_EQUAL(ws, 2);
  CU_ASSERT_EQUAL(wt_sync_client_rank_offset(c, 0), 1);

  Wt__V1__ServerInfo *info = NULL;
  WT_ASSERT_OK(wt_sync_client_server_info(c, 0, &info));
  CU_ASSERT_STRING_EQUAL(info->model->name, "synthetic:tiny");
  wt_pb_free(&info->base);

  wt_tensor_meta *params = NULL;
  size_t np = 0;
  WT_ASSERT_OK(
      wt_sync_client_list_parameters(c, 0, "model.layers.0.", &params, &np));
  CU_ASSERT_EQUAL(np, 4);
  for (size_t i = 0; i < np; i++)
    CU_ASSERT_EQUAL(strncmp(params[i].name, "model.layers.0.", 15), 0);
  wt_tensor_meta_array_free(params, np);

  /* Before any round: nothing committed. */
  wt_weight_version v = {0};
  WT_ASSERT_OK(wt_sync_client_get_version(c, 0, &v));
  CU_ASSERT_STRING_EQUAL(v.version, "");
  CU_ASSERT_EQUAL(v.sequence, 0);
  wt_weight_version_clear(&v);

  wt_source *src = NULL;
  wt_trainer *t = NULL;
  grpc_info gi;
  WT_ASSERT_OK(wt_source_synthetic("tiny", 7, &src));
  WT_ASSERT_ERR(wt_sync_client_update(c, NULL, src, NULL, NULL),
                WT_INVALID_ARGUMENT, "trainer");
  WT_ASSERT_OK(wt_sync_client_init_transfer(c, grpc_info_make(&gi, 1000, 2048),
                                            src, &t));
  CU_ASSERT_PTR_NOT_NULL_FATAL(t);
  WT_ASSERT_ERR(wt_sync_client_update(c, t, NULL, NULL, NULL),
                WT_FAILED_PRECONDITION, "no round in progress");
  WT_ASSERT_OK(wt_sync_client_start(c));
  CU_ASSERT_NOT_EQUAL(wt_sync_client_round_id(c, 0), 0);
  progress_log pl = {.monotonic = true};
  WT_ASSERT_OK(wt_sync_client_update(c, t, NULL, record_progress, &pl));
  CU_ASSERT(pl.calls >= 2);
  CU_ASSERT_TRUE(pl.monotonic);
  CU_ASSERT_EQUAL(pl.last.tensors_done, 7);
  CU_ASSERT_EQUAL(pl.last.tensors_total, 7);
  CU_ASSERT_EQUAL(pl.last.bytes_done, 6080);
  CU_ASSERT_EQUAL(pl.last.bytes_total, 6080);
  /* Not visible before finish. */
  WT_ASSERT_OK(wt_sync_client_get_version(c, 0, &v));
  CU_ASSERT_EQUAL(v.sequence, 0);
  wt_weight_version_clear(&v);
  WT_ASSERT_OK(wt_sync_client_finish(c, "step-1"));
  CU_ASSERT_EQUAL(wt_sync_client_round_id(c, 0), 0);
  WT_ASSERT_OK(wt_sync_client_get_version(c, 0, &v));
  CU_ASSERT_STRING_EQUAL(v.version, "step-1");
  CU_ASSERT_EQUAL(v.sequence, 1);
  wt_weight_version_clear(&v);
  wtt_assert_servers_hold(c, src, WT_HASH_SHA256);
  wtt_assert_servers_hold(c, src, WT_HASH_XXH3_64);

  /* A second round with default chunk and bucket sizes, from a checkpoint
   * (zero-copy pointers into its mapping). */
  char *dir = wt_test_tmpdir();
  char *path = wtt_write_layout(dir, "tiny", 9, false);
  wt_source *ck = NULL;
  WT_ASSERT_OK(wt_source_checkpoint_open(path, &ck));
  wt_trainer_destroy(t);
  WT_ASSERT_OK(
      wt_sync_client_init_transfer(c, grpc_info_make(&gi, 0, 0), NULL, &t));
  WT_ASSERT_OK(wt_sync_client_start(c));
  CU_ASSERT_NOT_EQUAL(wt_sync_client_round_id(c, 0), 0);
  WT_ASSERT_OK(wt_sync_client_update(c, t, ck, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_finish(c, "from-checkpoint"));
  wtt_assert_servers_hold(c, ck, WT_HASH_SHA256);

  /* watch: the current version comes first. */
  char seen[64] = "";
  WT_ASSERT_OK(wt_sync_client_watch(c, 0, 5000, first_only, seen));
  CU_ASSERT_STRING_EQUAL(seen, "from-checkpoint");

  /* Unknown names in a checksum request come back NOT_FOUND naming them. */
  const char *names[] = {"no.such.weight"};
  wt_param_checksum *sums = NULL;
  size_t ns = 0;
  WT_ASSERT_ERR(wt_sync_client_checksums(c, 0, names, 1, WT_HASH_SHA256, false,
                                         &sums, &ns),
                WT_NOT_FOUND, "no.such.weight");

  wt_source_destroy(ck);
  wt_test_rmtree(dir);
  free(dir);
  free(path);
  wt_trainer_destroy(t);
  wt_source_destroy(src);
  wt_sync_client_destroy(c);
  wtt_servers_stop(&s);
}

static void test_round_two_servers(void) {
  wtt_servers s;
  const char *models[] = {"synthetic:tiny", "synthetic:tiny"};
  const uint32_t workers[] = {1, 2};
  wtt_servers_start(&s, 2, models, workers, WT_STAGING_SHADOW, NULL);
  wt_sync_client *c = wtt_client_of(&s);

  uint32_t ws = 0;
  WT_ASSERT_OK(wt_sync_client_world_size(c, &ws));
  CU_ASSERT_EQUAL(ws, 4);
  CU_ASSERT_EQUAL(wt_sync_client_server_world_size(c, 0), 1);
  CU_ASSERT_EQUAL(wt_sync_client_server_world_size(c, 1), 2);
  CU_ASSERT_EQUAL(wt_sync_client_rank_offset(c, 0), 1);
  CU_ASSERT_EQUAL(wt_sync_client_rank_offset(c, 1), 2);

  wt_source *src = NULL;
  wt_trainer *t = NULL;
  grpc_info gi;
  WT_ASSERT_OK(wt_source_synthetic("tiny", 3, &src));
  WT_ASSERT_OK(
      wt_sync_client_init_transfer(c, grpc_info_make(&gi, 512, 1024), src, &t));
  for (int round = 1; round <= 2; round++) {
    WT_ASSERT_OK(wt_source_synthetic_set_seed(src, 3 + (uint64_t)round));
    WT_ASSERT_OK(wt_sync_client_start(c));
    /* Each server draws its own random round id. */
    CU_ASSERT_NOT_EQUAL(wt_sync_client_round_id(c, 0), 0);
    CU_ASSERT_NOT_EQUAL(wt_sync_client_round_id(c, 1), 0);
    CU_ASSERT_NOT_EQUAL(wt_sync_client_round_id(c, 0),
                        wt_sync_client_round_id(c, 1));
    progress_log pl = {.monotonic = true};
    WT_ASSERT_OK(wt_sync_client_update(c, t, NULL, record_progress, &pl));
    CU_ASSERT_EQUAL(pl.last.bytes_done, 6080);
    CU_ASSERT_EQUAL(pl.last.tensors_done, 7);
    WT_ASSERT_OK(wt_sync_client_finish(c, round == 1 ? "v1" : "v2"));
    wtt_assert_servers_hold(c, src, WT_HASH_SHA256);
  }
  for (size_t k = 0; k < 2; k++) {
    wt_weight_version v = {0};
    WT_ASSERT_OK(wt_sync_client_get_version(c, k, &v));
    CU_ASSERT_STRING_EQUAL(v.version, "v2");
    CU_ASSERT_EQUAL(v.sequence, 2);
    wt_weight_version_clear(&v);
  }
  wt_trainer_destroy(t);
  wt_source_destroy(src);
  wt_sync_client_destroy(c);
  wtt_servers_stop(&s);
}

/* A server that rejects the update: the error names that server and the
 * parameter, and the round is aborted on every server (the previous
 * version stays, the next start works). */
static void test_server_error_aborts_round(void) {
  wtt_servers s;
  const char *models[] = {"synthetic:tiny", "synthetic:tiny"};
  const uint32_t workers[] = {1, 1};
  wtt_servers_start(&s, 2, models, workers, WT_STAGING_SHADOW, NULL);
  wt_sync_client *c = wtt_client_of(&s);
  grpc_info gi;
  wt_trainer *t = NULL;
  WT_ASSERT_OK(
      wt_sync_client_init_transfer(c, grpc_info_make(&gi, 0, 0), NULL, &t));

  /* The tiny layout with q_proj's [16, 16] unchanged but down_proj
   * transposed: [40, 16] where the model has [16, 40]. */
  wtt_held h;
  wtt_held_load("tiny", 4, &h);
  int64_t transposed[2] = {40, 16};
  for (size_t i = 0; i < h.n; i++)
    if (strcmp(h.metas[i].name, "model.layers.0.mlp.down_proj.weight") == 0)
      h.tensors[i].shape = transposed;
  wt_source *bad = NULL;
  WT_ASSERT_OK(wt_source_memory(h.tensors, h.n, &bad));

  WT_ASSERT_OK(wt_sync_client_start(c));
  wt_status *st = wt_sync_client_update(c, t, bad, NULL, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  CU_ASSERT_EQUAL(wt_status_code(st), WT_INVALID_ARGUMENT);
  /* Both reject it; whichever did first is named, the other was cancelled
   * on its account. */
  CU_ASSERT(strstr(wt_status_message(st), s.target[0]) != NULL ||
            strstr(wt_status_message(st), s.target[1]) != NULL);
  CU_ASSERT_PTR_NOT_NULL(
      strstr(wt_status_message(st), "model.layers.0.mlp.down_proj.weight"));
  CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), "[40, 16]"));
  wt_status_free(st);
  CU_ASSERT_EQUAL(wt_sync_client_round_id(c, 0), 0);
  CU_ASSERT_EQUAL(wt_sync_client_round_id(c, 1), 0);
  WT_ASSERT_ERR(wt_sync_client_finish(c, "never"), WT_FAILED_PRECONDITION,
                "FinishWeightUpdate on 127.0.0.1:");

  /* A source out of its metadata's order is caught before any byte moves,
   * and that round is aborted too. */
  wt_tensor_meta m[3] = {{0}};
  const wt_source_tensor swapped[3] = {wtt_t_b, wtt_t_a, wtt_t_c};
  wtt_scripted sc = {.yields = swapped, .n = 3};
  wt_source *unordered = NULL;
  wtt_abc_metas(m);
  WT_ASSERT_OK(wt_source_new(&wtt_scripted_vt, &sc, m, 3, &unordered));
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_ERR(wt_sync_client_update(c, t, unordered, NULL, NULL),
                WT_INVALID_ARGUMENT,
                "tensor 0 is 'b' but the metadata has 'a' there");
  CU_ASSERT_EQUAL(wt_sync_client_round_id(c, 0), 0);
  CU_ASSERT_EQUAL(wt_sync_client_round_id(c, 1), 0);
  wt_source_destroy(unordered);
  for (int i = 0; i < 3; i++) wt_tensor_meta_clear(&m[i]);

  /* An explicit abort ends the round everywhere. */
  WT_ASSERT_OK(wt_sync_client_start(c));
  CU_ASSERT_NOT_EQUAL(wt_sync_client_round_id(c, 1), 0);
  WT_ASSERT_OK(wt_sync_client_abort(c, "changed my mind"));
  CU_ASSERT_EQUAL(wt_sync_client_round_id(c, 0), 0);
  CU_ASSERT_EQUAL(wt_sync_client_round_id(c, 1), 0);

  /* The next round works, and nothing of the failed ones was committed. */
  wt_source *good = NULL;
  WT_ASSERT_OK(wt_source_synthetic("tiny", 8, &good));
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_sync_client_update(c, t, good, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_finish(c, "after-failure"));
  wtt_assert_servers_hold(c, good, WT_HASH_XXH3_64);
  wt_weight_version v = {0};
  WT_ASSERT_OK(wt_sync_client_get_version(c, 1, &v));
  CU_ASSERT_EQUAL(v.sequence, 1);
  wt_weight_version_clear(&v);

  wt_source_destroy(good);
  wt_source_destroy(bad);
  wtt_held_free(&h);
  wt_trainer_destroy(t);
  wt_sync_client_destroy(c);
  wtt_servers_stop(&s);
}

/* Only the second server fails (it holds another model): the error names
 * it, and the first server's round is aborted too. */
static void test_second_server_fails(void) {
  wtt_servers s;
  const char *models[] = {"synthetic:tiny", "synthetic:small"};
  const uint32_t workers[] = {1, 1};
  wtt_servers_start(&s, 2, models, workers, WT_STAGING_SHADOW, NULL);
  wt_sync_client *c = wtt_client_of(&s);
  grpc_info gi;
  wt_trainer *t = NULL;
  wt_source *src = NULL;
  WT_ASSERT_OK(wt_source_synthetic("tiny", 2, &src));
  WT_ASSERT_OK(
      wt_sync_client_init_transfer(c, grpc_info_make(&gi, 0, 0), src, &t));
  WT_ASSERT_OK(wt_sync_client_start(c));
  wt_status *st = wt_sync_client_update(c, t, NULL, NULL, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), s.target[1]));
  CU_ASSERT_PTR_NULL(strstr(wt_status_message(st), s.target[0]));
  wt_status_free(st);
  CU_ASSERT_EQUAL(wt_sync_client_round_id(c, 0), 0);
  /* Server 0's round is gone: a new start there works. */
  const char *first[] = {s.targets[0]};
  wt_sync_client *c0 = NULL;
  WT_ASSERT_OK(wt_sync_client_new(first, 1, NULL, &c0));
  WT_ASSERT_OK(wt_sync_client_start(c0));
  WT_ASSERT_OK(wt_sync_client_abort(c0, "test done"));
  wt_sync_client_destroy(c0);

  wt_trainer_destroy(t);
  wt_source_destroy(src);
  wt_sync_client_destroy(c);
  wtt_servers_stop(&s);
}

/* A backend that moves data while UpdateWeights is pending ("test-async",
 * support/fake_trainer.h), to exercise the client's asynchronous path: its
 * send_weights waits until cancelled. A grpc server answers UpdateWeights
 * with FAILED_PRECONDITION at once, so the client must cancel the sender
 * and report the server's error. */
static void test_update_weights_path(void) {
  fake_trainer_register();
  fake_trainer_reset();
  wtt_servers s;
  const char *models[] = {"synthetic:tiny"};
  const uint32_t workers[] = {1};
  wtt_servers_start(&s, 1, models, workers, WT_STAGING_SHADOW, NULL);
  wt_sync_client *c = wtt_client_of(&s);
  grpc_info gi;
  wt_source *src = NULL;
  WT_ASSERT_OK(wt_source_synthetic("tiny", 1, &src));
  /* The servers get a grpc engine; the trainer is the fake. */
  WT_ASSERT_OK(
      wt_sync_client_init_transfer(c, grpc_info_make(&gi, 0, 0), NULL, NULL));
  wt_trainer_init_args args = {.init_info = &gi.info,
                               .ctx = wt_sync_client_trainer_ctx(c)};
  wt_trainer *t = NULL;
  WT_ASSERT_OK(wt_trainer_create("test-async", &args, &t));
  CU_ASSERT_TRUE(wt_trainer_needs_update_weights(t));
  WT_ASSERT_OK(wt_sync_client_start(c));
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  wt_status *st = wt_sync_client_update(c, t, src, NULL, NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  CU_ASSERT_EQUAL(wt_status_code(st), WT_FAILED_PRECONDITION);
  CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), s.target[0]));
  CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), "PushWeights"));
  wt_status_free(st);
  CU_ASSERT_TRUE(fake_trainer_get_stats().cancelled);
  CU_ASSERT_EQUAL(fake_trainer_get_stats().update_infos, 1);
  CU_ASSERT(t1.tv_sec - t0.tv_sec < 5); /* cancelled, not timed out */
  CU_ASSERT_EQUAL(wt_sync_client_round_id(c, 0), 0);
  wt_trainer_destroy(t);
  wt_source_destroy(src);
  wt_sync_client_destroy(c);
  wtt_servers_stop(&s);
}

/* ---- backends' own init info -------------------------------------------- */

static void test_init_info_from_options(void) {
  Wt__V1__WeightTransferInitInfo *info = NULL;
  wt_backend_option g[] = {{"chunk_size", "4K"}, {"bucket_size", "1MiB"}};
  WT_ASSERT_OK(wt_trainer_init_info("grpc", g, 2, &info));
  CU_ASSERT_STRING_EQUAL(info->backend, "grpc");
  CU_ASSERT_EQUAL_FATAL(info->backend_init_case,
                        WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_GRPC);
  CU_ASSERT_EQUAL(info->grpc->chunk_size_bytes->value, 4096);
  CU_ASSERT_EQUAL(info->grpc->packed_buffer_size_bytes->value, 1 << 20);
  wt_pb_free(&info->base);
  WT_ASSERT_OK(wt_trainer_init_info("grpc", NULL, 0, &info));
  CU_ASSERT_PTR_NULL(info->grpc->chunk_size_bytes); /* the default */
  wt_pb_free(&info->base);
  wt_backend_option bad[] = {{"fanout", "chain"}};
  WT_ASSERT_ERR(wt_trainer_init_info("grpc", bad, 1, &info),
                WT_INVALID_ARGUMENT,
                "backend 'grpc' has no option 'fanout' (its options: "
                "chunk_size, bucket_size, delta)");
  CU_ASSERT_PTR_NULL(info);
  wt_backend_option zero[] = {{"chunk_size", "0"}};
  WT_ASSERT_ERR(wt_trainer_init_info("grpc", zero, 1, &info),
                WT_INVALID_ARGUMENT, "option chunk_size: must be at least 1");
  wt_backend_option junk[] = {{"bucket_size", "lots"}};
  WT_ASSERT_ERR(wt_trainer_init_info("grpc", junk, 1, &info),
                WT_INVALID_ARGUMENT,
                "option bucket_size: 'lots' is not a size");
  WT_ASSERT_ERR(wt_trainer_init_info("carrier-pigeon", NULL, 0, &info),
                WT_NOT_FOUND, "carrier-pigeon");
#ifdef WT_WITH_UCX
  wt_backend_option u[] = {
      {"bucket_size", "8M"},         {"num_buffers", "3"},
      {"transports", "tcp"},         {"fanout", "chain"},
      {"connect", "address"},        {"peer_errors", "off"},
      {"connect_timeout_ms", "2500"}};
  WT_ASSERT_OK(wt_trainer_init_info("ucx", u, 7, &info));
  CU_ASSERT_EQUAL_FATAL(info->backend_init_case,
                        WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_UCX);
  CU_ASSERT_EQUAL(info->ucx->packed_buffer_size_bytes->value, 8 << 20);
  CU_ASSERT_EQUAL(info->ucx->packed_num_buffers->value, 3);
  CU_ASSERT_EQUAL(info->ucx->connect_timeout_ms->value, 2500);
  CU_ASSERT_STRING_EQUAL(info->ucx->transports, "tcp");
  CU_ASSERT_EQUAL_FATAL(info->n_options, 3);
  CU_ASSERT_STRING_EQUAL(info->options[0]->key, "ucx_fanout");
  CU_ASSERT_STRING_EQUAL(info->options[0]->value, "chain");
  CU_ASSERT_STRING_EQUAL(info->options[2]->key, "ucx_peer_errors");
  /* What the builder makes, the backend's trainer accepts. */
  size_t len = wt__v1__weight_transfer_init_info__get_packed_size(info);
  CU_ASSERT(len > 0);
  wt_pb_free(&info->base);
  wt_backend_option chunk[] = {{"chunk_size", "1M"}};
  WT_ASSERT_ERR(wt_trainer_init_info("ucx", chunk, 1, &info),
                WT_INVALID_ARGUMENT,
                "backend 'ucx' has no option 'chunk_size'");
#endif
}

/* ---- memory of a trainer's tensors --------------------------------------- */

/* A GPU tensor handed to a backend that sends from host memory: refused
 * before any byte moves, naming the tensor; the round is aborted. */
static void test_device_tensor_refused(void) {
  wtt_servers s;
  const char *models[] = {"synthetic:tiny"};
  const uint32_t workers[] = {1};
  wtt_servers_start(&s, 1, models, workers, WT_STAGING_SHADOW, NULL);
  wt_sync_client *c = wtt_client_of(&s);
  grpc_info gi;
  wt_trainer *t = NULL;
  WT_ASSERT_OK(
      wt_sync_client_init_transfer(c, grpc_info_make(&gi, 0, 0), NULL, &t));
  wtt_held h;
  wtt_held_load("tiny", 4, &h);
  /* Never dereferenced: refused by kind first. */
  h.tensors[3].kind = WT_MEM_DEVICE;
  h.tensors[3].device = (wt_device){WT_DEVICE_CUDA, 0};
  wt_source *src = NULL;
  WT_ASSERT_OK(wt_source_memory(h.tensors, h.n, &src));
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_ERR(wt_sync_client_update(c, t, src, NULL, NULL),
                WT_INVALID_ARGUMENT,
                "tensor 'model.layers.0.mlp.down_proj.weight' is in device "
                "memory (cuda:0); backend 'grpc' sends from host, shared, "
                "pinned memory only");
  CU_ASSERT_EQUAL(wt_sync_client_round_id(c, 0), 0);
  wt_weight_version v = {0};
  WT_ASSERT_OK(wt_sync_client_get_version(c, 0, &v));
  CU_ASSERT_EQUAL(v.sequence, 0);
  wt_weight_version_clear(&v);
  /* A memory source refuses device memory without a GPU device. */
  h.tensors[3].device = (wt_device)WT_DEVICE_CPU_INIT;
  wt_source *bad = NULL;
  WT_ASSERT_ERR(wt_source_memory(h.tensors, h.n, &bad), WT_INVALID_ARGUMENT,
                "device memory needs a cuda:N device, not cpu");
  wt_source_destroy(src);
  wtt_held_free(&h);
  wt_trainer_destroy(t);
  wt_sync_client_destroy(c);
  wtt_servers_stop(&s);
}

static void *set_later(void *flag) {
  wtt_sleep_ms(150);
  __atomic_store_n((int *)flag, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* A tensor produced on a CUDA stream (a device-to-host copy of a PyTorch
 * trainer) is sent once its event says the bytes are ready. */
static void test_tensor_ready_event(void) {
  fake_cuda_install(1);
  wtt_servers s;
  const char *models[] = {"synthetic:tiny"};
  const uint32_t workers[] = {1};
  wtt_servers_start(&s, 1, models, workers, WT_STAGING_SHADOW, NULL);
  wt_sync_client *c = wtt_client_of(&s);
  grpc_info gi;
  wt_trainer *t = NULL;
  WT_ASSERT_OK(
      wt_sync_client_init_transfer(c, grpc_info_make(&gi, 0, 0), NULL, &t));
  wtt_held h;
  wtt_held_load("tiny", 6, &h);
  int event = 0;
  h.tensors[0].cuda_event = &event;
  h.tensors[2].cuda_stream = &event;
  wt_source *src = NULL;
  WT_ASSERT_OK(wt_source_memory(h.tensors, h.n, &src));
  pthread_t th;
  CU_ASSERT_FATAL(pthread_create(&th, NULL, set_later, &event) == 0);
  int64_t t0 = wt_mono_ms();
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_finish(c, "ready"));
  CU_ASSERT(wt_mono_ms() - t0 >= 100);
  pthread_join(th, NULL);
  CU_ASSERT(fake_cuda_get_stats().syncs >= 2);
  wtt_assert_servers_hold(c, src, WT_HASH_SHA256);
  wt_source_destroy(src);
  wtt_held_free(&h);
  wt_trainer_destroy(t);
  wt_sync_client_destroy(c);
  wtt_servers_stop(&s);
  fake_cuda_uninstall();
}

/* ---- re-init when a server needs it -------------------------------------- */

typedef struct fragile_info {
  Wt__V1__WeightTransferInitInfo info;
  Wt__V1__WeightTransferInitInfo__OptionsEntry opt;
  Wt__V1__WeightTransferInitInfo__OptionsEntry *opts[1];
} fragile_info;

static const Wt__V1__WeightTransferInitInfo *fragile_info_make(
    fragile_info *f, const char *seed) {
  wt__v1__weight_transfer_init_info__init(&f->info);
  wt__v1__weight_transfer_init_info__options_entry__init(&f->opt);
  f->info.backend = "fake-fragile";
  f->opt.key = "seed";
  f->opt.value = (char *)seed;
  f->opts[0] = &f->opt;
  f->info.options = f->opts;
  f->info.n_options = 1;
  return &f->info;
}

/* Until every worker of server k shows `state`. */
static void wait_state(wt_sync_client *c, size_t k, const char *state) {
  int64_t end = wt_mono_ms() + 5000;
  for (;;) {
    Wt__V1__ServerInfo *info = NULL;
    WT_ASSERT_OK(wt_sync_client_server_info(c, k, &info));
    bool all = true;
    for (size_t i = 0; i < info->n_workers; i++)
      all = all && strcmp(info->workers[i]->state, state) == 0;
    wt_pb_free(&info->base);
    if (all || wt_mono_ms() > end) {
      CU_ASSERT(all);
      return;
    }
    wtt_sleep_ms(10);
  }
}

static void one_round(wt_sync_client *c, wt_trainer *t, wt_source *src,
                      const char *version) {
  WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_finish(c, version));
  wtt_assert_servers_hold(c, src, WT_HASH_SHA256);
}

/* A backend whose engines do not survive an abort: after one, the next
 * start re-initialises every server (and the trainer engine, in place) by
 * itself and goes on; also when only the second server of two needs it.
 * With manual_reinit the client says so instead. */
static void test_reinit_when_needed(void) {
  fake_trainer_register();
  fake_engine_reset();
  wt_registry *reg = fake_engine_registry();
  wtt_servers s;
  const char *models[] = {"synthetic:tiny", "synthetic:tiny"};
  const uint32_t workers[] = {1, 2};
  wtt_servers_start(&s, 2, models, workers, WT_STAGING_SHADOW, reg);
  wt_sync_client *c = wtt_client_of(&s);
  fragile_info fi;
  wt_source *src = NULL;
  WT_ASSERT_OK(wt_source_synthetic("tiny", 3, &src));
  wt_trainer *t = NULL;
  fake_trainer_reset();
  WT_ASSERT_OK(
      wt_sync_client_init_transfer(c, fragile_info_make(&fi, "3"), src, &t));
  CU_ASSERT_EQUAL(fake_engine_get_stats().inits, 3);
  WT_ASSERT_OK(wt_sync_client_start(c));
  one_round(c, t, src, "v1");

  /* An aborted round: every worker needs a new init. */
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_sync_client_abort(c, "drop it"));
  wait_state(c, 0, "needs_init");
  wait_state(c, 1, "needs_init");
  WT_ASSERT_OK(wt_sync_client_start(c));
  CU_ASSERT_EQUAL(fake_engine_get_stats().inits, 6);
  CU_ASSERT_EQUAL(fake_trainer_get_stats().inits,
                  2); /* the same handle, a new engine */
  one_round(c, t, src, "v2");

  /* Only the second server needs it (its round was aborted elsewhere, by
   * a call with the round's id): the first's new round is aborted, both are
   * re-initialised, and the round goes on. A client without a round of its
   * own aborts nothing. */
  WT_ASSERT_OK(wt_sync_client_start(c));
  const char *second[] = {s.targets[1]};
  wt_sync_client *other = NULL;
  WT_ASSERT_OK(wt_sync_client_new(second, 1, NULL, &other));
  WT_ASSERT_OK(wt_sync_client_abort(other, "not my round"));
  wait_state(other, 0, "updating");
  wt_rpc_channel *och = NULL;
  WT_ASSERT_OK(wt_rpc_channel_new(s.targets[1], NULL, &och));
  WT_ASSERT_OK(wtt_abort(och, wt_sync_client_round_id(c, 1), NULL));
  wt_rpc_channel_destroy(och);
  wait_state(other, 0, "needs_init");
  wait_state(c, 0, "updating");
  wt_status_free(wt_sync_client_abort(c, "our round is gone there"));
  WT_ASSERT_OK(wt_sync_client_start(c));
  CU_ASSERT_EQUAL(fake_engine_get_stats().inits, 9);
  CU_ASSERT_NOT_EQUAL(wt_sync_client_round_id(c, 0), 0);
  CU_ASSERT_NOT_EQUAL(wt_sync_client_round_id(c, 1), 0);
  one_round(c, t, src, "v3");
  wt_sync_client_destroy(other);

  /* A client told not to re-init says what to do. */
  wt_client_options mo = {.timeout_ms = 10000, .manual_reinit = true};
  wt_sync_client *manual = NULL;
  WT_ASSERT_OK(wt_sync_client_new(s.targets, 2, &mo, &manual));
  wt_trainer *mt = NULL;
  WT_ASSERT_OK(wt_sync_client_init_transfer(manual, fragile_info_make(&fi, "3"),
                                            src, &mt));
  WT_ASSERT_OK(wt_sync_client_start(manual));
  WT_ASSERT_OK(wt_sync_client_abort(manual, "drop it"));
  wait_state(manual, 0, "needs_init");
  WT_ASSERT_ERR(wt_sync_client_start(manual), WT_FAILED_PRECONDITION,
                "needs a new InitWeightTransferEngine");
  wt_trainer_destroy(mt);
  mt = NULL;
  WT_ASSERT_OK(wt_sync_client_init_transfer(manual, fragile_info_make(&fi, "3"),
                                            src, &mt));
  WT_ASSERT_OK(wt_sync_client_start(manual));
  one_round(manual, mt, src, "v4");
  wt_trainer_destroy(mt);
  wt_sync_client_destroy(manual);

  /* A trainer destroyed before its client, and a client before its
   * trainer: neither leaves the other pointing at freed memory. */
  wt_trainer_destroy(t);
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_sync_client_abort(c, "no trainer"));
  wt_sync_client_destroy(c);
  wt_source_destroy(src);
  wtt_servers_stop(&s);
  wt_registry_destroy(reg);
}

/* ---- a caller's own control plane -----------------------------------------
 */

/* A control plane of the caller's: forwards every call to wt's own gRPC
 * plane and counts the calls per method. The "minimal" table has only the
 * four calls of vLLM's VLLMWeightSyncClient and no channel, as vLLM's HTTP
 * routes would. */
typedef struct recorder {
  wt_control_plane inner;
  int calls[WT_CONTROL_METHODS];
} recorder;

static size_t rec_count(void *self) {
  recorder *r = self;
  return r->inner.ops->server_count(r->inner.self);
}

static const char *rec_target(void *self, size_t k) {
  recorder *r = self;
  return r->inner.ops->target(r->inner.self, k);
}

static wt_status *rec_start(void *self, size_t k, wt_control_method m,
                            const ProtobufCMessage *req, int64_t deadline_ms,
                            wt_control_call **call) {
  recorder *r = self;
  r->calls[m]++;
  return r->inner.ops->call_start(r->inner.self, k, m, req, deadline_ms, call);
}

static bool rec_done(void *self, wt_control_call *call, int64_t ms) {
  recorder *r = self;
  return r->inner.ops->call_done(r->inner.self, call, ms);
}

static void rec_cancel(void *self, wt_control_call *call) {
  recorder *r = self;
  r->inner.ops->call_cancel(r->inner.self, call);
}

static wt_status *rec_wait(void *self, wt_control_call *call,
                           ProtobufCMessage **resp) {
  recorder *r = self;
  return r->inner.ops->call_wait(r->inner.self, call, resp);
}

static wt_rpc_channel *rec_channel(void *self, size_t k) {
  recorder *r = self;
  return r->inner.ops->channel(r->inner.self, k);
}

static void rec_destroy(void *self) {
  recorder *r = self;
  wt_control_plane_destroy(&r->inner);
}

static const wt_control_ops rec_full_ops = {
    .name = "recorder",
    .methods = (1u << WT_CONTROL_METHODS) - 1,
    .server_count = rec_count,
    .target = rec_target,
    .call_start = rec_start,
    .call_done = rec_done,
    .call_cancel = rec_cancel,
    .call_wait = rec_wait,
    .channel = rec_channel,
    .destroy = rec_destroy,
};

static const wt_control_ops rec_minimal_ops = {
    .name = "minimal",
    .methods = WT_CONTROL_REQUIRED,
    .server_count = rec_count,
    .target = rec_target,
    .call_start = rec_start,
    .call_done = rec_done,
    .call_cancel = rec_cancel,
    .call_wait = rec_wait,
    .destroy = rec_destroy,
};

static wt_sync_client *recorder_client(recorder *r, const wt_control_ops *ops,
                                       const wtt_servers *s) {
  memset(r, 0, sizeof(*r));
  wt_client_options o = {.timeout_ms = 10000, .data_timeout_ms = 20000};
  WT_ASSERT_OK(wt_control_grpc_new(s->targets, s->n, &o, &r->inner));
  wt_control_plane cp = {ops, r};
  wt_sync_client *c = NULL;
  WT_ASSERT_OK(wt_sync_client_new_with(&cp, &o, &c));
  CU_ASSERT_PTR_NULL(cp.ops); /* the client took it */
  return c;
}

/* The round orchestration reaches the servers only through the control
 * plane's table: a caller's plane drives grpc and ucx rounds whose bytes
 * land, every round call going through its table (the counts), the
 * deadlines and the abort on a failure included. A plane with only vLLM's
 * four calls and no channel: the backends that need no channel run (each
 * server one rank), `grpc` is refused naming the plane's lack, and reader
 * calls say UNIMPLEMENTED naming the plane. A table that lacks a call is
 * refused by name. */
static void test_caller_control_plane(void) {
  wtt_servers s;
  const char *models[] = {"synthetic:tiny", "synthetic:tiny"};
  const uint32_t workers[] = {1, 2};
  wtt_servers_start(&s, 2, models, workers, WT_STAGING_SHADOW, NULL);
  static recorder r;
  wt_sync_client *c = recorder_client(&r, &rec_full_ops, &s);
  grpc_info gi;
  wt_source *src = NULL;
  wt_trainer *t = NULL;
  WT_ASSERT_OK(wt_source_synthetic("tiny", 41, &src));
  WT_ASSERT_OK(
      wt_sync_client_init_transfer(c, grpc_info_make(&gi, 0, 0), src, &t));
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_sync_client_update(c, t, NULL, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_finish(c, "plane-1"));
  wtt_assert_servers_hold(c, src, WT_HASH_SHA256);
  CU_ASSERT_EQUAL(r.calls[WT_CONTROL_INIT], 2);
  CU_ASSERT_EQUAL(r.calls[WT_CONTROL_START], 2);
  CU_ASSERT_EQUAL(r.calls[WT_CONTROL_FINISH], 2);
  CU_ASSERT_EQUAL(r.calls[WT_CONTROL_UPDATE], 0); /* grpc pushes */
  CU_ASSERT(r.calls[WT_CONTROL_WORLD_SIZE] >= 2);
  /* A failed round is aborted on every server through the table. */
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_sync_client_abort(c, "caller's abort"));
  CU_ASSERT_EQUAL(r.calls[WT_CONTROL_ABORT], 2);
  wt_trainer_destroy(t);
  t = NULL;
#ifdef WT_WITH_UCX
  Wt__V1__WeightTransferInitInfo *ui = NULL;
  WT_ASSERT_OK(wt_trainer_init_info(
      "ucx", (const wt_backend_option[]){{"transports", "tcp"}}, 1, &ui));
  WT_ASSERT_OK(wt_sync_client_init_transfer(c, ui, src, &t));
  WT_ASSERT_OK(wt_source_synthetic_set_seed(src, 42));
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_sync_client_update(c, t, NULL, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_finish(c, "plane-2"));
  wtt_assert_servers_hold(c, src, WT_HASH_SHA256);
  CU_ASSERT_EQUAL(r.calls[WT_CONTROL_UPDATE], 2);
  wt_trainer_destroy(t);
  t = NULL;
#endif
  wt_sync_client_destroy(c);

  /* vLLM's four calls, no channel: the caller's choice of backend is
   * what is wrong (docs/python.md: INVALID_ARGUMENT naming it). */
  wt_sync_client *m = recorder_client(&r, &rec_minimal_ops, &s);
  WT_ASSERT_ERR(
      wt_sync_client_init_transfer(m, grpc_info_make(&gi, 0, 0), src, &t),
      WT_INVALID_ARGUMENT,
      "backend 'grpc' pushes over a wt-server's gRPC "
      "channel, and the control plane has none");
  CU_ASSERT_EQUAL(r.calls[WT_CONTROL_WORLD_SIZE], 0);
  wt_tensor_meta *metas = NULL;
  size_t nm = 0;
  WT_ASSERT_ERR(wt_sync_client_list_parameters(m, 0, NULL, &metas, &nm),
                WT_UNIMPLEMENTED, "control plane 'minimal'");
#ifdef WT_WITH_UCX
  /* Server 1 has two workers; without GetWorldSize it counts as one rank,
   * and its workers refuse the world they are told, by name. */
  WT_ASSERT_ERR(wt_sync_client_init_transfer(m, ui, src, &t),
                WT_INVALID_ARGUMENT,
                "init_info.rank_offset 2 with 2 worker(s) needs ranks up to "
                "3; init_info.world_size 3");
  CU_ASSERT_PTR_NULL(t);
  wt_pb_free(&ui->base);
#endif
  wt_sync_client_destroy(m);

  /* A table without call_wait is refused by name, and the plane released. */
  static const wt_control_ops broken = {.name = "broken",
                                        .methods = WT_CONTROL_REQUIRED,
                                        .server_count = rec_count,
                                        .target = rec_target,
                                        .call_start = rec_start,
                                        .call_done = rec_done,
                                        .call_cancel = rec_cancel,
                                        .destroy = rec_destroy};
  memset(&r, 0, sizeof(r));
  WT_ASSERT_OK(wt_control_grpc_new(s.targets, s.n, NULL, &r.inner));
  wt_control_plane cp = {&broken, &r};
  WT_ASSERT_ERR(wt_sync_client_new_with(&cp, NULL, &m), WT_INVALID_ARGUMENT,
                "control plane 'broken'");
  CU_ASSERT_PTR_NULL(m);
  wt_source_destroy(src);
  wtt_servers_stop(&s);
}

/* ---- a control plane over a JSON callback (wt/bindings.h) ------------------
 */

typedef enum {
  CB_VLLM,
  CB_FORWARD,
  CB_SILENT,
  CB_ERROR,
  CB_SLOW,
  CB_GARBAGE
} cb_mode;

typedef struct cb_state {
  cb_mode mode;
  uint32_t flags; /* wt_control_callback_new's */
  pthread_mutex_t mu;
  int calls[WT_CONTROL_METHODS];
  char last[WT_CONTROL_METHODS][4096];
  wt_control_plane inner; /* CB_FORWARD: wt's own, to real servers */
} cb_state;

static const ProtobufCMessageDescriptor *request_type(int m) {
  switch (m) {
    case WT_CONTROL_WORLD_SIZE:
      return &wt__v1__get_world_size_request__descriptor;
    case WT_CONTROL_INIT:
      return &wt__v1__init_weight_transfer_engine_request__descriptor;
    case WT_CONTROL_START:
      return &wt__v1__start_weight_update_request__descriptor;
    case WT_CONTROL_UPDATE:
      return &wt__v1__update_weights_request__descriptor;
    case WT_CONTROL_FINISH:
      return &wt__v1__finish_weight_update_request__descriptor;
    case WT_CONTROL_ABORT:
      return &wt__v1__abort_weight_update_request__descriptor;
    default:
      return &wt__v1__get_server_info_request__descriptor;
  }
}

static void cb_fn(void *user, size_t k, int m, const char *req,
                  wt_control_reply *reply) {
  cb_state *st = user;
  pthread_mutex_lock(&st->mu);
  st->calls[m]++;
  snprintf(st->last[m], sizeof(st->last[m]), "%s", req);
  pthread_mutex_unlock(&st->mu);
  switch (st->mode) {
    case CB_VLLM: /* answers nothing, as vLLM's client returns None */
      wt_control_reply_ok(reply, NULL);
      return;
    case CB_SILENT:
      return;
    case CB_ERROR:
      wt_control_reply_error(reply, WT_FAILED_PRECONDITION,
                             "the engine said no");
      return;
    case CB_SLOW:
      usleep(700 * 1000);
      wt_control_reply_ok(reply, "{}");
      return;
    case CB_GARBAGE:
      wt_control_reply_ok(reply, "{\"round_id\": \"seven\"}");
      return;
    case CB_FORWARD:
      break;
  }
  ProtobufCMessage *in = NULL, *out = NULL;
  wt_control_call *call = NULL;
  wt_status *e = wt_pb_from_json(request_type(m), req, NULL, &in);
  if (e == NULL)
    e = st->inner.ops->call_start(st->inner.self, k, (wt_control_method)m, in,
                                  20000, &call);
  if (e == NULL) e = st->inner.ops->call_wait(st->inner.self, call, &out);
  char *json = NULL;
  if (e == NULL) e = wt_pb_to_json(out, &json);
  if (e == NULL)
    wt_control_reply_ok(reply, json);
  else
    wt_control_reply_error(reply, (int)wt_status_code(e), wt_status_message(e));
  wt_status_free(e);
  free(json);
  wt_pb_free(in);
  wt_pb_free(out);
}

static wt_sync_client *cb_client(cb_state *st, cb_mode mode, size_t n,
                                 const char *const *targets, uint32_t methods,
                                 int64_t timeout_ms) {
  st->mode = mode;
  wt_control_plane cp;
  WT_ASSERT_OK(
      wt_control_callback_new(targets, n, methods, st->flags, cb_fn, st, &cp));
  wt_sync_client *c = NULL;
  WT_ASSERT_OK(wt_bindings_client_new_with(&cp, timeout_ms, timeout_ms, &c));
  return c;
}

/* A plane of vLLM's shape (four calls, answers with nothing): the requests
 * it gets as JSON carry the init info, the update info and the version; a
 * round id of the plane's own holds the round together; the bindings'
 * JSON refusals name the field. Then a callback that forwards to real
 * servers: a ucx round whose bytes land. And the callback's failures:
 * an error with the target and method, no answer, a slow answer, an
 * answer that is not the response. */
static void test_callback_control_plane(void) {
  static cb_state st;
  memset(&st, 0, sizeof(st));
  pthread_mutex_init(&st.mu, NULL);
  const char *one[] = {"http://vllm:8000"};
  wt_sync_client *c =
      cb_client(&st, CB_VLLM, 1, one, WT_CONTROL_REQUIRED, 5000);
  WT_ASSERT_OK(wt_bindings_init_transfer(
      c, "{\"backend\":\"ucx\",\"ucx\":{\"trainer_port\":7}}", false, NULL));
  CU_ASSERT_PTR_NOT_NULL(
      strstr(st.last[WT_CONTROL_INIT], "\"trainer_port\":7"));
  CU_ASSERT_PTR_NOT_NULL(strstr(st.last[WT_CONTROL_INIT], "\"world_size\":2"));
  WT_ASSERT_OK(wt_sync_client_start(c));
  CU_ASSERT_EQUAL(wt_sync_client_round_id(c, 0), 1); /* the plane's own */
  WT_ASSERT_OK(
      wt_bindings_update_info(c,
                              "{\"names\":[\"w\"],\"dtype_names\":[\"float32\"]"
                              ",\"shapes\":[{\"dims\":[4]}]}"));
  CU_ASSERT_PTR_NOT_NULL(
      strstr(st.last[WT_CONTROL_UPDATE], "\"names\":[\"w\"]"));
  CU_ASSERT_PTR_NOT_NULL(strstr(st.last[WT_CONTROL_UPDATE], "\"round_id\":1"));
  WT_ASSERT_OK(wt_sync_client_finish(c, "step-1"));
  CU_ASSERT_PTR_NOT_NULL(
      strstr(st.last[WT_CONTROL_FINISH], "\"weight_version\":\"step-1\""));
  WT_ASSERT_ERR(wt_bindings_init_transfer(c, "{\"backend\":7}", false, NULL),
                WT_INVALID_ARGUMENT, "init_info.backend: expected a string");
  WT_ASSERT_ERR(wt_bindings_update_info(c, "{\"names\":[\"w\"]}"),
                WT_FAILED_PRECONDITION, "no round in progress");
  wt_sync_client_destroy(c);

  static const struct {
    cb_mode mode;
    wt_code code;
    const char *needle;
  } bad[] = {
      {CB_ERROR, WT_FAILED_PRECONDITION,
       "http://vllm:8000 StartWeightUpdate: the engine said no"},
      {CB_SILENT, WT_INTERNAL, "returned without an answer"},
      {CB_SLOW, WT_DEADLINE_EXCEEDED,
       "no answer from the control plane in time"},
      {CB_GARBAGE, WT_INVALID_ARGUMENT,
       "the control plane's answer: field response.round_id"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    c = cb_client(&st, bad[i].mode, 1, one, WT_CONTROL_REQUIRED, 300);
    WT_ASSERT_ERR(wt_sync_client_start(c), bad[i].code, bad[i].needle);
    wt_sync_client_destroy(c); /* waits for the slow callback */
  }
  WT_ASSERT_ERR(wt_control_callback_new(one, 1, WT_CONTROL_BIT(WT_CONTROL_INIT),
                                        0, cb_fn, &st, &(wt_control_plane){0}),
                WT_INVALID_ARGUMENT, "init, start, update and finish");

#ifdef WT_WITH_UCX
  wtt_servers s;
  const char *models[] = {"synthetic:tiny", "synthetic:tiny"};
  const uint32_t workers[] = {1, 2};
  wtt_servers_start(&s, 2, models, workers, WT_STAGING_SHADOW, NULL);
  wt_client_options o = {.timeout_ms = 10000, .data_timeout_ms = 20000};
  WT_ASSERT_OK(wt_control_grpc_new(s.targets, s.n, &o, &st.inner));
  c = cb_client(&st, CB_FORWARD, s.n, s.targets, (1u << WT_CONTROL_METHODS) - 1,
                20000);
  wt_source *src = NULL;
  wt_trainer *t = NULL;
  char *json = NULL;
  WT_ASSERT_OK(wt_source_synthetic("tiny", 77, &src));
  char *init = NULL;
  WT_ASSERT_OK(
      wt_bindings_trainer_init_info("ucx", "{\"transports\":\"tcp\"}", &init));
  CU_ASSERT_PTR_NOT_NULL(init ? strstr(init, "\"auth_secret\":") : NULL);
  WT_ASSERT_ERR(
      wt_bindings_trainer_init_info("ucx", "{\"bogus\":\"1\"}", &json),
      WT_INVALID_ARGUMENT, "bogus");
  WT_ASSERT_ERR(wt_bindings_trainer_init_info("nope", NULL, &json),
                WT_NOT_FOUND, "nope");
  WT_ASSERT_OK(wt_bindings_init_transfer(c, init, true, &t));
  wt_bindings_free(init);
  CU_ASSERT_FATAL(t != NULL);
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_finish(c, "json-1"));
  WT_ASSERT_OK(wt_bindings_server_info(c, 1, &json)); /* through the callback */
  CU_ASSERT_PTR_NOT_NULL(json ? strstr(json, "\"weight_version\":\"json-1\"")
                              : NULL);
  wt_bindings_free(json);
  json = NULL;
  wt_trainer_destroy(t);
  wt_sync_client_destroy(c);
  /* The bytes landed: checked through wt's own client. */
  wt_sync_client *check = NULL;
  WT_ASSERT_OK(wt_sync_client_new(s.targets, s.n, &o, &check));
  uint32_t ws = 0;
  WT_ASSERT_OK(wt_sync_client_world_size(check, &ws));
  CU_ASSERT_EQUAL(ws, 4);
  wtt_assert_servers_hold(check, src, WT_HASH_SHA256);
  WT_ASSERT_OK(wt_bindings_server_info(check, 0, &json));
  CU_ASSERT_PTR_NOT_NULL(json ? strstr(json, "\"weight_version\":\"json-1\"")
                              : NULL);
  wt_bindings_free(json);
  wt_sync_client_destroy(check);
  wt_source_destroy(src);
  wtt_servers_stop(&s);
#endif
}

/* What wt-ctl info, version and top print of a server's answer (a hostile
 * or old server's versions, reasons, causes) carries no control byte:
 * terminal escapes and forged lines never reach a reader's terminal. */
static void test_tools_printable(void) {
  Wt__V1__ServerInfo in = WT__V1__SERVER_INFO__INIT;
  Wt__V1__WorkerInfo w = WT__V1__WORKER_INFO__INIT, *ws[] = {&w};
  Wt__V1__RoundRecord r = WT__V1__ROUND_RECORD__INIT, *rs[] = {&r};
  Wt__V1__LeaseInfo l = WT__V1__LEASE_INFO__INIT, *ls[] = {&l};
  char *strs[] = {strdup("v\x1b]52;c;aGk=\x07"), strdup("ok\nforged line"),
                  strdup("\x1b[2Jcause"), strdup("lease\x7fv"),
                  strdup("plain")};
  in.weight_version = strs[0];
  w.reason = strs[1];
  r.cause = strs[2];
  l.version = strs[3];
  in.server_version = strs[4];
  in.n_workers = 1;
  in.workers = ws;
  in.n_recent_rounds = 1;
  in.recent_rounds = rs;
  in.n_leases = 1;
  in.leases = ls;
  wt_tool_printable_pb(&in.base);
  CU_ASSERT_STRING_EQUAL(in.weight_version, "v?]52;c;aGk=?");
  CU_ASSERT_STRING_EQUAL(w.reason, "ok?forged line");
  CU_ASSERT_STRING_EQUAL(r.cause, "?[2Jcause");
  CU_ASSERT_STRING_EQUAL(l.version, "lease?v");
  CU_ASSERT_STRING_EQUAL(in.server_version, "plain");
  /* the untouched fields (protobuf-c's shared empty string) stay so */
  CU_ASSERT_STRING_EQUAL(in.state, "");
  char nl[] = "a\r\nb";
  CU_ASSERT_STRING_EQUAL(wt_tool_printable(nl), "a??b");
  CU_ASSERT_PTR_NULL(wt_tool_printable(NULL));
  for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) free(strs[i]);
}

/* The Python path's init in one direction (wt_bindings_trainer_init_transfer):
 * the backend's options and the caller's dict go in once, the caller's
 * fields win where it sets them, the backend is the engine's whatever the
 * dict says, nothing comes back but what wt_bindings_client_init_info is
 * asked for; a round then lands its bytes. */
static void test_bindings_init_one_way(void) {
  wtt_servers s;
  const char *models[] = {"synthetic:tiny"};
  const uint32_t workers[] = {1};
  wtt_servers_start(&s, 1, models, workers, WT_STAGING_SHADOW, NULL);
  wt_sync_client *c = wtt_client_of(&s);
  wt_source *src = NULL;
  wt_trainer *t = NULL;
  char *json = NULL;
  WT_ASSERT_OK(wt_source_synthetic("tiny", 78, &src));
  void *info = NULL;
  WT_ASSERT_ERR(wt_bindings_trainer_init_info_new(
                    "grpc", "{\"chunk_size\":\"x\"}", NULL, &info),
                WT_INVALID_ARGUMENT, "chunk_size");
  WT_ASSERT_ERR(wt_bindings_trainer_init_info_new("nope", NULL, NULL, &info),
                WT_NOT_FOUND, "nope");
  WT_ASSERT_ERR(
      wt_bindings_trainer_init_info_new("grpc", NULL, "{\"nope\":1}", &info),
      WT_INVALID_ARGUMENT, "nope");
  CU_ASSERT_PTR_NULL(info);
  WT_ASSERT_ERR(wt_bindings_client_init_info(c, &json), WT_FAILED_PRECONDITION,
                "init_info");
  WT_ASSERT_OK(wt_bindings_trainer_init_info_new(
      "grpc", "{\"chunk_size\":\"65536\",\"bucket_size\":\"1048576\"}",
      "{\"backend\":\"ucx\",\"timeout_ms\":7000,"
      "\"grpc\":{\"packed_buffer_size_bytes\":{\"value\":2097152}}}",
      &info));
  WT_ASSERT_OK(wt_bindings_trainer_init_transfer(c, info, &t));
  wt_bindings_init_info_free(info);
  CU_ASSERT_FATAL(t != NULL);
  CU_ASSERT_STRING_EQUAL(wt_trainer_backend(t), "grpc");
  const Wt__V1__WeightTransferInitInfo *sent = wt_sync_client_init_info(c);
  CU_ASSERT_FATAL(sent != NULL && sent->grpc != NULL);
  CU_ASSERT_STRING_EQUAL(sent->backend, "grpc"); /* the engine's */
  CU_ASSERT_EQUAL(sent->timeout_ms, 7000);       /* the caller's */
  CU_ASSERT_FATAL(sent->grpc->chunk_size_bytes &&
                  sent->grpc->packed_buffer_size_bytes);
  CU_ASSERT_EQUAL(sent->grpc->chunk_size_bytes->value, 65536); /* options' */
  CU_ASSERT_EQUAL(sent->grpc->packed_buffer_size_bytes->value,
                  2097152); /* wins */
  WT_ASSERT_OK(wt_bindings_client_init_info(c, &json));
  CU_ASSERT_PTR_NOT_NULL(json ? strstr(json, "\"timeout_ms\":7000") : NULL);
  wt_bindings_free(json);
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_finish(c, "one-way-1"));
  wtt_assert_servers_hold(c, src, WT_HASH_SHA256);
  wt_trainer_destroy(t);
  wt_source_destroy(src);
  wt_sync_client_destroy(c);
  wtt_servers_stop(&s);
}

void wt_test_suite_client(void);
void wt_test_suite_client(void) {
  CU_pSuite s = CU_add_suite("client", NULL, NULL);
  CU_add_test(s, "a caller's own control plane drives the rounds",
              test_caller_control_plane);
  CU_add_test(s, "a control plane over a JSON callback",
              test_callback_control_plane);
  CU_add_test(s, "bindings: the Python path's init in one direction",
              test_bindings_init_one_way);
  CU_add_test(s, "grpc push from memory the caller frees at once",
              test_grpc_push_from_memory_freed);
  CU_add_test(s, "grpc push gives up waiting for gRPC's hold (ASan)",
              test_grpc_push_gives_up_waiting);
  CU_add_test(s, "trainer registry", test_trainer_registry);
  CU_add_test(s, "client arguments", test_client_arguments);
  CU_add_test(s, "round one server", test_round_one_server);
  CU_add_test(s, "round two servers", test_round_two_servers);
  CU_add_test(s, "server error aborts round", test_server_error_aborts_round);
  CU_add_test(s, "second server fails", test_second_server_fails);
  CU_add_test(s, "update weights path", test_update_weights_path);
  CU_add_test(s, "backends build their init info from options",
              test_init_info_from_options);
  CU_add_test(s, "a GPU tensor to a host backend is refused",
              test_device_tensor_refused);
  CU_add_test(s, "a tensor is sent once its CUDA event is done",
              test_tensor_ready_event);
  CU_add_test(s, "re-init when a server needs it", test_reinit_when_needed);
  CU_add_test(s, "tools print no control byte a server sends",
              test_tools_printable);
}
