/* test_ucx.c: the `ucx` backend (backends/ucx/ucx_worker*.c,
 * backends/ucx/ucx_trainer*.c) end to end with in-process servers on
 * 127.0.0.1:0 and the sync client: rounds over TCP and over shared memory
 * with several workers and two servers, and a trainer that stalls mid-round.
 * Without UCX in the build every test prints "skipped:". */

#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backends/backends.h"
#include "wt/bindings.h"
#include "wt/client.h"
#include "wt/control.h"
#include "wt/engine.h"
#include "wt/server.h"
#include "wt/source.h"
#include "wt/synthetic.h"
#include "wt/trainer.h"
#include "wt/pb.h"
#include "wt/secure.h"
#include "backends/ucx/ucx_shared.h"
#include "support/fixture.h"
#include "support/wt_proc.h"
#include "wt_test.h"

#ifdef WT_WITH_UCX

/* ---- helpers ------------------------------------------------------------ */

typedef struct ucx_info {
  Wt__V1__WeightTransferInitInfo info;
  Wt__V1__UcxInitInfo ucx;
  Wt__V1__UInt64Value bucket;
  Wt__V1__UInt32Value nbuf;
  Wt__V1__WeightTransferInitInfo__OptionsEntry opt[6];
  Wt__V1__WeightTransferInitInfo__OptionsEntry *opts[6];
  uint8_t secret[WT_UCX_SECRET_BYTES];
} ucx_info;

/* The fan-out every init info made here asks for (options["ucx_fanout"]);
 * NULL: the trainer's default (auto). */
static const char *g_fanout;
static void ucx_info_option(ucx_info *u, const char *key, const char *value);

/* Small buckets so that a round spans many of them. */
static const Wt__V1__WeightTransferInitInfo *ucx_info_make(
    ucx_info *u, const char *transports, const char *connect, uint64_t bucket,
    uint32_t timeout_ms) {
  wt__v1__weight_transfer_init_info__init(&u->info);
  wt__v1__ucx_init_info__init(&u->ucx);
  wt__v1__uint64_value__init(&u->bucket);
  wt__v1__uint32_value__init(&u->nbuf);
  u->info.backend = "ucx";
  u->info.backend_init_case =
      WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_UCX;
  u->info.ucx = &u->ucx;
  u->info.timeout_ms = timeout_ms;
  u->ucx.transports = (char *)transports;
  /* A fresh secret per init, as wt_trainer_init_info draws it. */
  WT_ASSERT_OK(wt_random_bytes(u->secret, sizeof(u->secret)));
  u->ucx.auth_secret.data = u->secret;
  u->ucx.auth_secret.len = sizeof(u->secret);
  u->bucket.value = bucket;
  u->ucx.packed_buffer_size_bytes = &u->bucket;
  u->nbuf.value = 3;
  u->ucx.packed_num_buffers = &u->nbuf;
  u->info.options = u->opts;
  if (connect != NULL) {
    wt__v1__weight_transfer_init_info__options_entry__init(&u->opt[0]);
    u->opt[0].key = "ucx_connect";
    u->opt[0].value = (char *)connect;
    u->opts[u->info.n_options++] = &u->opt[0];
  }
  if (strstr(transports, "tcp") == NULL) {
    /* Shared memory has no peer-failure support in UCX 1.13. */
    wt__v1__weight_transfer_init_info__options_entry__init(&u->opt[1]);
    u->opt[1].key = "ucx_peer_errors";
    u->opt[1].value = "off";
    u->opts[u->info.n_options++] = &u->opt[1];
  }
  if (g_fanout != NULL) ucx_info_option(u, "ucx_fanout", g_fanout);
  return &u->info;
}

/* Adds one of the trainer's settings to the init info's options map (the
 * options later in the map win). */
static void ucx_info_option(ucx_info *u, const char *key, const char *value) {
  size_t i = u->info.n_options;
  CU_ASSERT_FATAL(i < sizeof(u->opt) / sizeof(u->opt[0]));
  wt__v1__weight_transfer_init_info__options_entry__init(&u->opt[i]);
  u->opt[i].key = (char *)key;
  u->opt[i].value = (char *)value;
  u->opts[u->info.n_options++] = &u->opt[i];
}

/* Every worker of every server holds exactly the bytes of `layout` filled
 * for `seed`, and the committed version is `version`. */
static void assert_servers_hold(wt_sync_client *c, const char *layout,
                                uint64_t seed, const char *version) {
  wt_source *ref = NULL;
  WT_ASSERT_OK(wt_source_synthetic(layout, seed, &ref));
  wtt_assert_servers_hold(c, ref, WT_HASH_SHA256);
  for (size_t k = 0; k < wt_sync_client_server_count(c); k++) {
    wt_weight_version v = {0};
    WT_ASSERT_OK(wt_sync_client_get_version(c, k, &v));
    CU_ASSERT_STRING_EQUAL(v.version, version);
    wt_weight_version_clear(&v);
  }
  wt_source_destroy(ref);
}

/* Runs an update that must fail within `within_ms`; returns its error (NULL
 * when it did not fail: the assertion is already recorded). */
static wt_status *update_fails(wt_sync_client *c, wt_trainer *t, wt_source *src,
                               int64_t within_ms) {
  int64_t t0 = wt_mono_ms();
  wt_status *st = wt_sync_client_update(c, t, src, NULL, NULL);
  CU_ASSERT(wt_mono_ms() - t0 < within_ms);
  CU_ASSERT_PTR_NOT_NULL(st);
  return st;
}

/* The route the rounds took, as the servers report it (GetServerInfo's
 * per-worker bytes_received and bytes_forwarded, totals since start):
 * every worker received `rounds` times `bytes`, and `forwarders` of them
 * forwarded all of it to the next one (a chain of N workers: N - 1; a
 * parallel or sequential fan-out: none). */
static void assert_route(wt_sync_client *c, uint64_t rounds, uint64_t bytes,
                         size_t forwarders) {
  size_t workers = 0, forwarding = 0;
  for (size_t k = 0; k < wt_sync_client_server_count(c); k++) {
    Wt__V1__ServerInfo *info = NULL;
    WT_ASSERT_OK(wt_sync_client_server_info(c, k, &info));
    for (size_t i = 0; info && i < info->n_workers; i++) {
      const Wt__V1__WorkerInfo *w = info->workers[i];
      workers++;
      CU_ASSERT_EQUAL(w->bytes_received, rounds * bytes);
      CU_ASSERT(w->bytes_forwarded == 0 ||
                w->bytes_forwarded == rounds * bytes);
      forwarding += w->bytes_forwarded != 0;
    }
    if (info) wt_pb_free(&info->base);
  }
  CU_ASSERT(workers > 0);
  CU_ASSERT_EQUAL(forwarding, forwarders);
  if (forwarding != forwarders)
    fprintf(stderr, "\n  route: %zu of %zu workers forwarded, want %zu\n",
            forwarding, workers, forwarders);
}

static void round_ok(wt_sync_client *c, wt_trainer *t, wt_source *src,
                     const char *version) {
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_finish(c, version));
}

/* Two servers (2 and 3 workers) on "small", two rounds over `transports`,
 * with `staging`. Every worker registers its store's regions (two buffer
 * sets shadow, one inplace) with ucp_mem_map once, at init, and no round
 * registers more. */
static void rounds_over_staging(const char *transports, const char *connect,
                                wt_staging staging) {
  wtt_servers s;
  const uint32_t workers[] = {2, 3};
  const uint64_t regions = staging == WT_STAGING_SHADOW ? 2 : 1;
  wtt_servers_start(&s, 2,
                    (const char *const[]){"synthetic:small", "synthetic:small"},
                    workers, staging, NULL);
  wt_client_options o = {.timeout_ms = 10000, .data_timeout_ms = 20000};
  wt_sync_client *c = NULL;
  wt_trainer *t = NULL;
  wt_source *src = NULL;
  ucx_info ui;
  WT_ASSERT_OK(wt_sync_client_new(s.targets, s.n, &o, &c));
  const uint64_t maps0 = wt_ucx_mem_map_count();
  WT_ASSERT_OK(wt_sync_client_init_transfer(
      c, ucx_info_make(&ui, transports, connect, 256 << 10, 0), NULL, &t));
  CU_ASSERT_FATAL(t != NULL);
  CU_ASSERT_STRING_EQUAL(wt_trainer_backend(t), "ucx");
  CU_ASSERT_EQUAL(wt_ucx_mem_map_count() - maps0, 5 * regions);
  WT_ASSERT_OK(wt_source_synthetic("small", 5, &src));
  round_ok(c, t, src, "step-1");
  assert_servers_hold(c, "small", 5, "step-1");
  WT_ASSERT_OK(wt_source_synthetic_set_seed(src, 6));
  round_ok(c, t, src, "step-2");
  assert_servers_hold(c, "small", 6, "step-2");
  CU_ASSERT_EQUAL(wt_ucx_mem_map_count() - maps0, 5 * regions);
  /* One host: auto is parallel; the chain passes through all 5 workers. */
  bool chain = g_fanout != NULL && strcmp(g_fanout, "chain") == 0;
  assert_route(c, 2, wt_source_total_bytes(src), chain ? 4 : 0);
  wt_source_destroy(src);
  wt_trainer_destroy(t);
  wt_sync_client_destroy(c);
  wtt_servers_stop(&s);
}

static void rounds_over(const char *transports, const char *connect) {
  rounds_over_staging(transports, connect, WT_STAGING_SHADOW);
}

/* Through the workers' listeners (the default), TCP only. */
static void test_round_tcp(void) {
  rounds_over("tcp", NULL);
}

/* Inplace staging: receives land in the live buffers, the store's one
 * region per worker. */
static void test_round_inplace(void) {
  rounds_over_staging("tcp", NULL, WT_STAGING_INPLACE);
}

/* Through the packed worker addresses, shared memory only. */
static void test_round_shared_memory(void) {
  rounds_over("sm", "address");
}

/* A memory source whose tensors lie back to back in one buffer, except one
 * in its own allocation: the trainer sends the contiguous buckets straight
 * from that memory and packs the bucket around the odd one; with
 * options["ucx_fanout"] = "sequential" it
 * serves one worker after the other. Bytes as the synthetic layout's. */
static void test_memory_source_sequential(void) {
  wtt_servers s;
  const uint32_t workers[] = {1, 2};
  wtt_servers_start(&s, 2,
                    (const char *const[]){"synthetic:small", "synthetic:small"},
                    workers, WT_STAGING_SHADOW, NULL);
  wt_client_options o = {.timeout_ms = 10000, .data_timeout_ms = 20000};
  wt_sync_client *c = NULL;
  wt_trainer *t = NULL;
  wt_source *src = NULL;
  wt_tensor_meta *m = NULL;
  size_t n = 0;
  ucx_info ui;
  WT_ASSERT_OK(wt_synthetic_layout("small", &m, &n));
  CU_ASSERT_FATAL(n > 2);
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) total += m[i].nbytes;
  unsigned char *slab = malloc(total);
  unsigned char *odd = malloc(m[n / 2].nbytes);
  wt_source_tensor *tn = calloc(n, sizeof(*tn));
  CU_ASSERT_FATAL(slab != NULL && odd != NULL && tn != NULL);
  uint64_t off = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char *dst = i == n / 2 ? odd : slab + off;
    wt_synthetic_fill(&m[i], 9, 0, dst, m[i].nbytes);
    off += m[i].nbytes;
    tn[i] = (wt_source_tensor){.name = m[i].name,
                               .dtype = m[i].dtype,
                               .ndim = m[i].ndim,
                               .shape = m[i].shape,
                               .data = dst,
                               .nbytes = m[i].nbytes};
  }
  WT_ASSERT_OK(wt_source_memory(tn, n, &src));
  WT_ASSERT_OK(wt_sync_client_new(s.targets, s.n, &o, &c));
  g_fanout = "sequential";
  WT_ASSERT_OK(wt_sync_client_init_transfer(
      c, ucx_info_make(&ui, "tcp", NULL, 256 << 10, 0), NULL, &t));
  g_fanout = NULL;
  CU_ASSERT_FATAL(t != NULL);
  round_ok(c, t, src, "mem-1");
  assert_servers_hold(c, "small", 9, "mem-1");
  assert_route(c, 1, wt_source_total_bytes(src), 0); /* one after another */
  wt_trainer_destroy(t);
  t = NULL;
  /* Peer errors off through the listeners would fail at the first bucket
   * ("Endpoint is not connected"): refused up front instead. */
  ucx_info_make(&ui, "tcp", "sockaddr", 256 << 10, 0);
  ucx_info_option(&ui, "ucx_peer_errors", "off");
  WT_ASSERT_ERR(wt_sync_client_init_transfer(c, &ui.info, NULL, &t),
                WT_INVALID_ARGUMENT, "set \"ucx_connect\" to 'address'");
  wt_trainer_destroy(t);
  t = NULL;
  /* With UCX 1.13 the servers refuse to open a listener at all (its
   * sockaddr code aborts the process on 17 bytes from anyone). */
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  if (major == 1 && minor < 14)
    WT_ASSERT_ERR(
        wt_sync_client_init_transfer(
            c, ucx_info_make(&ui, "tcp", "sockaddr", 256 << 10, 0), NULL, &t),
        WT_INVALID_ARGUMENT,
        "aborts the whole process when anyone sends it 17 bytes");
  wt_trainer_destroy(t);
  t = NULL;
  /* An unknown fan-out is refused, naming the option and the value. */
  g_fanout = "tree";
  WT_ASSERT_ERR(wt_sync_client_init_transfer(
                    c, ucx_info_make(&ui, "tcp", NULL, 256 << 10, 0), NULL, &t),
                WT_INVALID_ARGUMENT, "'tree'");
  g_fanout = NULL;
  wt_trainer_destroy(t);
  wt_source_destroy(src);
  wt_sync_client_destroy(c);
  wtt_servers_stop(&s);
  free(tn);
  free(odd);
  free(slab);
  wt_tensor_meta_array_free(m, n);
}

/* The pipelined chain (options["ucx_fanout"] = "chain"): the trainer sends to
 * the first worker only, each worker forwards to the next, across both servers;
 * over TCP through the listeners and over shared memory by worker address. */
static void test_chain(void) {
  g_fanout = "chain";
  rounds_over("tcp", NULL);
  rounds_over("sm", "address");
  g_fanout = NULL;
}

/* The default fan-out (auto) with workers on two hosts (two loopback
 * addresses: 127.0.0.1 and 127.0.0.2) takes the chain across them; the
 * bytes land on both, round after round. */
static void test_auto_fanout_two_hosts(void) {
  static wtt_server a, b;
  wt_server_options oa = {.workers = 1},
                    ob = {.workers = 2, .listen = "127.0.0.2:0"};
  wtt_server_start(&a, "small", &oa);
  wtt_server_start(&b, "small", &ob);
  const char *targets[2] = {a.target, b.target};
  wt_client_options o = {.timeout_ms = 10000, .data_timeout_ms = 20000};
  wt_sync_client *c = NULL;
  wt_trainer *t = NULL;
  wt_source *src = NULL;
  ucx_info ui;
  WT_ASSERT_OK(wt_sync_client_new(targets, 2, &o, &c));
  WT_ASSERT_OK(wt_sync_client_init_transfer(
      c, ucx_info_make(&ui, "tcp", NULL, 256 << 10, 0), NULL, &t));
  WT_ASSERT_OK(wt_source_synthetic("small", 8, &src));
  round_ok(c, t, src, "auto-1");
  assert_servers_hold(c, "small", 8, "auto-1");
  WT_ASSERT_OK(wt_source_synthetic_set_seed(src, 9));
  round_ok(c, t, src, "auto-2");
  assert_servers_hold(c, "small", 9, "auto-2");
  /* The chain, not a parallel fan-out: trainer -> a's worker -> b's two. */
  assert_route(c, 2, wt_source_total_bytes(src), 2);
  wt_source_destroy(src);
  wt_trainer_destroy(t);
  wt_sync_client_destroy(c);
  wtt_server_stop(&b);
  wtt_server_stop(&a);
}

/* Tensors larger than the bucket (small's 512 KiB embedding and lm_head,
 * 64 KiB buckets): the trainer cuts them across buckets (split_tensors,
 * the default), through a chain of two workers, from a synthetic source
 * (bytes read in parts) and a memory source (parts sent in place); and
 * with options["ucx_split_tensors"] = "off", vLLM's plan, where each is a
 * bucket of its own, as with buffers too small to split (16 bytes: 213,312
 * buckets). Every byte lands either way. Then a stranger's update info that
 * asks for split buckets of 1 byte (3.3 million of them) is refused by
 * name before any receive is posted; the server answers and the bytes and
 * the version stay. */
static void test_split_tensors(void) {
  wtt_server S;
  wtt_server_start_simple(&S, "small", 2, WT_STAGING_SHADOW, 0);
  wt_client_options o = {.timeout_ms = 10000, .data_timeout_ms = 20000};
  const char *targets[1] = {S.target};
  wt_sync_client *c = NULL;
  wt_trainer *t = NULL;
  wt_source *src = NULL;
  ucx_info ui;
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, &o, &c));
  g_fanout = "chain";
  WT_ASSERT_OK(wt_sync_client_init_transfer(
      c, ucx_info_make(&ui, "tcp", NULL, 64 << 10, 0), NULL, &t));
  WT_ASSERT_OK(wt_source_synthetic("small", 21, &src));
  round_ok(c, t, src, "split-1");
  wtt_assert_model_seed(&S, 21);
  wt_source_destroy(src);
  src = NULL;
  /* In place from one slab: the parts of a cut tensor are sent from it. */
  uint64_t total = 0;
  for (size_t i = 0; i < S.n; i++) total += S.metas[i].nbytes;
  unsigned char *slab = malloc(total);
  wt_source_tensor *tn = calloc(S.n, sizeof(*tn));
  CU_ASSERT_FATAL(slab != NULL && tn != NULL);
  uint64_t off = 0;
  for (size_t i = 0; i < S.n; i++) {
    wt_synthetic_fill(&S.metas[i], 22, 0, slab + off, S.metas[i].nbytes);
    tn[i] = (wt_source_tensor){.name = S.metas[i].name,
                               .dtype = S.metas[i].dtype,
                               .ndim = S.metas[i].ndim,
                               .shape = S.metas[i].shape,
                               .data = slab + off,
                               .nbytes = S.metas[i].nbytes};
    off += S.metas[i].nbytes;
  }
  WT_ASSERT_OK(wt_source_memory(tn, S.n, &src));
  round_ok(c, t, src, "split-2");
  wtt_assert_model_seed(&S, 22);
  wt_source_destroy(src);
  src = NULL;
  wt_trainer_destroy(t);
  t = NULL;

  ucx_info_make(&ui, "tcp", NULL, 64 << 10, 0);
  ucx_info_option(&ui, "ucx_split_tensors", "off");
  WT_ASSERT_OK(wt_sync_client_init_transfer(c, &ui.info, NULL, &t));
  WT_ASSERT_OK(wt_source_synthetic("small", 23, &src));
  round_ok(c, t, src, "whole-3");
  wtt_assert_model_seed(&S, 23);
  wt_source_destroy(src);
  wt_trainer_destroy(t);
  t = NULL;
  /* 16-byte buffers would split 3.4 MB into 213,312 buckets: the trainer
   * takes vLLM's plan instead (one bucket per tensor), and it lands. */
  WT_ASSERT_OK(wt_sync_client_init_transfer(
      c, ucx_info_make(&ui, "tcp", NULL, 16, 0), NULL, &t));
  WT_ASSERT_OK(wt_source_synthetic("small", 24, &src));
  round_ok(c, t, src, "whole-4");
  wtt_assert_model_seed(&S, 24);
  wt_source_destroy(src);
  wt_trainer_destroy(t);
  t = NULL;
  ucx_info_make(&ui, "tcp", NULL, 64 << 10, 0);
  ucx_info_option(&ui, "ucx_split_tensors", "sometimes");
  WT_ASSERT_ERR(wt_sync_client_init_transfer(c, &ui.info, NULL, &t),
                WT_INVALID_ARGUMENT,
                "init_info.options[\"ucx_split_tensors\"] is 'sometimes'");
  g_fanout = NULL;
  wt_trainer_destroy(t);
  t = NULL;

  /* The stranger: a round opened by a real init, then its own update. */
  WT_ASSERT_OK(wt_sync_client_init_transfer(
      c, ucx_info_make(&ui, "tcp", NULL, 64 << 10, 500), NULL, &t));
  WT_ASSERT_OK(wt_sync_client_start(c));
  wtt_upd u;
  wtt_upd_init(&u, S.metas, NULL, S.n);
  Wt__V1__UcxUpdateInfo xu = WT__V1__UCX_UPDATE_INFO__INIT;
  Wt__V1__UInt64Value one = WT__V1__UINT64_VALUE__INIT;
  one.value = 1;
  xu.packed_buffer_size_bytes = &one;
  xu.split_tensors = true;
  u.info.backend_update_case =
      WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__BACKEND_UPDATE_UCX;
  u.info.ucx = &xu;
  int64_t t0 = wt_mono_ms();
  WT_ASSERT_ERR(wtt_update(S.ch, &u.info, wt_sync_client_round_id(c, 0)),
                WT_INVALID_ARGUMENT,
                "update_info.ucx.packed_buffer_size_bytes with "
                "split_tensors: buffer_bytes: 1-byte buckets would cut the "
                "round's 3412992 bytes into 3412992 buckets, more than "
                "65536");
  CU_ASSERT(wt_mono_ms() - t0 < 2000);
  wtt_assert_serving(S.ch, 2);
  wtt_assert_model_seed(&S, 24);
  wtt_assert_version(S.ch, "whole-4", 4);
  wt_status_free(wt_sync_client_abort(c, "test"));
  wt_trainer_destroy(t);
  wt_sync_client_destroy(c);
  wtt_server_stop(&S);
  free(tn);
  free(slab);

  /* wt-push --option split_tensors=off: the init info's option. */
  wt_backend_option opt = {"split_tensors", "off"};
  Wt__V1__WeightTransferInitInfo *info = NULL;
  WT_ASSERT_OK(wt_trainer_init_info("ucx", &opt, 1, &info));
  CU_ASSERT_FATAL(info != NULL && info->n_options == 1);
  CU_ASSERT_STRING_EQUAL(info->options[0]->key, "ucx_split_tensors");
  CU_ASSERT_STRING_EQUAL(info->options[0]->value, "off");
  wt_pb_free(&info->base);
}

/* A source that stalls (once armed) before yielding the bytes of tensor
 * `stall_at`, as a trainer that stopped mid-round. */
typedef struct stall {
  wt_source *inner;
  int stall_ms;
  size_t stall_at;
  size_t next;
  bool armed;
  pid_t kill_pid;    /* > 0: SIGKILL this process instead of stalling */
  const char *shell; /* non-NULL: run this command instead of stalling */
  /* non-NULL: stall until this server's round was aborted (its workers'
   * waits ended) instead of stall_ms; waited_ms: how long, -1 never */
  wt_rpc_channel *until_aborted;
  int64_t waited_ms;
} stall;

static wt_status *stall_rewind(void *impl) {
  stall *s = impl;
  s->next = 0;
  return wt_source_rewind(s->inner);
}

static wt_status *stall_next(void *impl, wt_source_tensor *t, bool *done) {
  stall *s = impl;
  wt_status *st = wt_source_next(s->inner, t, done);
  if (st == NULL && !*done) s->next++;
  return st;
}

static wt_status *stall_read(void *impl, const wt_source_tensor *t,
                             uint64_t offset, void *buf, size_t len) {
  stall *s = impl;
  if (s->armed && s->next - 1 == s->stall_at) {
    s->armed = false;
    if (s->shell != NULL) {
      CU_ASSERT_EQUAL(system(s->shell), 0);
      return wt_source_read(s->inner, t, offset, buf, len);
    }
    if (s->until_aborted != NULL) {
      s->waited_ms = wtt_wait_left_updating(s->until_aborted, 10000);
      return wt_source_read(s->inner, t, offset, buf, len);
    }
    if (s->kill_pid > 0) {
      kill(s->kill_pid, SIGKILL);
      int status = 0;
      CU_ASSERT(wt_proc_wait(s->kill_pid, 5000, &status));
      return wt_source_read(s->inner, t, offset, buf, len);
    }
    struct timespec ts = {.tv_sec = s->stall_ms / 1000,
                          .tv_nsec = (long)(s->stall_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  return wt_source_read(s->inner, t, offset, buf, len);
}

static const wt_source_vtable stall_vt = {.kind = "stalling",
                                          .rewind = stall_rewind,
                                          .next = stall_next,
                                          .read = stall_read};

static void test_trainer_stalls_mid_round(void) {
  wtt_servers s;
  const uint32_t workers[] = {2};
  wtt_servers_start(&s, 1,
                    (const char *const[]){"synthetic:small", "synthetic:small"},
                    workers, WT_STAGING_SHADOW, NULL);
  wt_client_options o = {.timeout_ms = 10000, .data_timeout_ms = 20000};
  wt_sync_client *c = NULL;
  wt_trainer *t = NULL;
  wt_source *good = NULL, *bad = NULL;
  ucx_info ui;
  stall *impl = calloc(1, sizeof(*impl));
  CU_ASSERT_FATAL(impl != NULL);
  WT_ASSERT_OK(wt_sync_client_new(s.targets, s.n, &o, &c));
  /* Worker waits end after 700 ms without a bucket. */
  WT_ASSERT_OK(wt_sync_client_init_transfer(
      c, ucx_info_make(&ui, "tcp", NULL, 64 << 10, 700), NULL, &t));
  WT_ASSERT_OK(wt_source_synthetic("small", 5, &good));
  round_ok(c, t, good, "step-1");

  size_t n = 0;
  WT_ASSERT_OK(wt_source_synthetic("small", 9, &impl->inner));
  const wt_tensor_meta *m = wt_source_metas(impl->inner, &n);
  impl->stall_at = n / 2;
  /* The trainer stalls until the workers' waits (700 ms) ended the round
   * (10 s: a deadline against hanging), then goes on. */
  wt_rpc_channel *watch = NULL;
  WT_ASSERT_OK(wt_rpc_channel_new(s.targets[0], NULL, &watch));
  impl->until_aborted = watch;
  impl->waited_ms = -1;
  wt_source *inner = impl->inner;
  WT_ASSERT_OK(wt_source_new(&stall_vt, impl, m, n, &bad));
  impl->armed = true;
  WT_ASSERT_OK(wt_sync_client_start(c));
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  wt_status *st = wt_sync_client_update(c, t, bad, NULL, NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  CU_ASSERT_PTR_NOT_NULL(st);
  if (st) {
    CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), "timed out"));
    wt_status_free(st);
  }
  double secs =
      (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  printf(
      "\n  the workers ended the stalled round after %lld ms; the update "
      "ended after %.2f s\n",
      (long long)impl->waited_ms, secs);
  CU_ASSERT(impl->waited_ms >= 0); /* the workers' waits ended the round */
  CU_ASSERT(secs < 15.0);
  wt_rpc_channel_destroy(watch);
  /* The previous version and its bytes stay. */
  assert_servers_hold(c, "small", 5, "step-1");
  /* The next round works. */
  WT_ASSERT_OK(wt_source_synthetic_set_seed(good, 6));
  round_ok(c, t, good, "step-2");
  assert_servers_hold(c, "small", 6, "step-2");
  wt_source_destroy(bad); /* does not own impl (no destroy op) */
  wt_source_destroy(inner);
  free(impl);
  wt_source_destroy(good);
  wt_trainer_destroy(t);
  wt_sync_client_destroy(c);
  wtt_servers_stop(&s);
}

/* ---- receives report their length -----------------------------------------
 */

/* Sends `len` bytes of `msg` with `tag` on `ep`; returns the request. */
static void *send_tagged(ucp_ep_h ep, const void *msg, size_t len,
                         ucp_tag_t tag) {
  ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                           .datatype = ucp_dt_make_contig(1)};
  void *req = ucp_tag_send_nbx(ep, msg, len, tag, &p);
  CU_ASSERT(!UCS_PTR_IS_ERR(req));
  return UCS_PTR_IS_ERR(req) ? NULL : req;
}

/* Receives `tag` on b into buf (progressing both workers); returns the
 * completion's note. */
static wt_ucx_recv_note recv_tagged(wt_ucx *a, wt_ucx *b, void *buf, size_t cap,
                                    ucp_tag_t tag) {
  wt_ucx_recv_note note;
  void *req =
      wt_ucx_tag_recv(b, buf, cap, ucp_dt_make_contig(1), NULL, tag, &note);
  CU_ASSERT(req != NULL && !UCS_PTR_IS_ERR(req));
  if (req == NULL || UCS_PTR_IS_ERR(req)) return note;
  const int64_t end = wt_mono_ms() + 5000;
  while (wt_ucx_request_status(req) == UCS_INPROGRESS && wt_mono_ms() < end) {
    ucp_worker_progress(a->worker);
    ucp_worker_progress(b->worker);
  }
  CU_ASSERT_EQUAL(wt_ucx_request_status(req), UCS_OK);
  wt_ucx_request_drop(b, req, 0);
  return note;
}

/* The worker's receives learn how many bytes arrived, whether the message
 * came in before the receive was posted (UCX 1.13 then completes it at
 * once and, through the plain API, reports no length: the route of a round
 * read as 0 bytes) or after. */
static void test_recv_reports_length(void) {
  wt_ucx *a = NULL, *b = NULL;
  ucp_address_t *addr = NULL;
  size_t alen = 0;
  ucp_ep_h ep = NULL;
  unsigned char msg[100], buf[256];
  for (size_t i = 0; i < sizeof(msg); i++) msg[i] = (unsigned char)(i * 7 + 1);
  WT_ASSERT_OK(wt_ucx_new("tcp", NULL, false, "test sender", &a));
  WT_ASSERT_OK(wt_ucx_new("tcp", NULL, false, "test receiver", &b));
  CU_ASSERT_FATAL(ucp_worker_get_address(b->worker, &addr, &alen) == UCS_OK);
  ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                               .address = addr};
  CU_ASSERT_FATAL(ucp_ep_create(a->worker, &ep_params, &ep) == UCS_OK);

  /* Arrived first: wait until b holds it as an unexpected message. */
  void *sreq = send_tagged(ep, msg, sizeof(msg), 42);
  ucp_tag_recv_info_t probe;
  const int64_t end = wt_mono_ms() + 5000;
  while (ucp_tag_probe_nb(b->worker, 42, UINT64_MAX, 0, &probe) == NULL &&
         wt_mono_ms() < end) {
    ucp_worker_progress(a->worker);
    ucp_worker_progress(b->worker);
  }
  CU_ASSERT_FATAL(ucp_tag_probe_nb(b->worker, 42, UINT64_MAX, 0, &probe) !=
                  NULL);
  memset(buf, 0, sizeof(buf));
  wt_ucx_recv_note n = recv_tagged(a, b, buf, sizeof(buf), 42);
  CU_ASSERT(n.done);
  CU_ASSERT_EQUAL(n.status, UCS_OK);
  CU_ASSERT_EQUAL(n.length, sizeof(msg));
  CU_ASSERT_EQUAL(memcmp(buf, msg, sizeof(msg)), 0);
  wt_ucx_request_drop(a, sreq, 1000);

  /* Posted first. */
  memset(buf, 0, sizeof(buf));
  sreq = send_tagged(ep, msg, 60, 43);
  n = recv_tagged(a, b, buf, sizeof(buf), 43);
  CU_ASSERT(n.done);
  CU_ASSERT_EQUAL(n.length, 60);
  CU_ASSERT_EQUAL(memcmp(buf, msg, 60), 0);
  wt_ucx_request_drop(a, sreq, 1000);

  wt_ucx_ep_close(a, ep, false, 1000);
  ucp_worker_release_address(b->worker, addr);
  wt_ucx_destroy(a);
  wt_ucx_destroy(b);
}

/* ---- late starts: the first message waits for the connect deadline ------ */

/* A worker engine ("ucx" in a registry of the test's own) whose receive
 * starts late_ms late, as a worker whose UpdateWeights arrives late (a
 * loaded host, a control channel recovering from a cut). */
static atomic_int late_worker_ms;
static wt_engine_ops late_engine_ops, renamed_engine_ops;

static wt_status *late_receive(wt_engine *e, const wt_update *u,
                               wt_receive_stats *stats) {
  int ms = atomic_load(&late_worker_ms);
  struct timespec ts = {.tv_sec = ms / 1000,
                        .tv_nsec = (long)(ms % 1000) * 1000000L};
  if (ms > 0) nanosleep(&ts, NULL);
  return wt_ucx_engine_ops.receive(e, u, stats);
}

/* A trainer engine ("ucx-late") that starts sending late_ms late, as a
 * trainer whose process is slow to get to send_weights. */
static atomic_int late_trainer_ms;
static wt_trainer_ops late_trainer_ops;

static wt_status *late_send(void *self, wt_source *source,
                            wt_progress_fn progress, void *user) {
  int ms = atomic_load(&late_trainer_ms);
  struct timespec ts = {.tv_sec = ms / 1000,
                        .tv_nsec = (long)(ms % 1000) * 1000000L};
  if (ms > 0) nanosleep(&ts, NULL);
  return wt_ucx_trainer_ops.send_weights(self, source, progress, user);
}

/* A server on "small" with `workers` workers whose engines come from
 * `reg`, and a client to it (data deadline 20 s). */
static wt_server *registry_server(wt_registry *reg, uint32_t workers,
                                  wt_sync_client **c) {
  wt_server *srv = NULL;
  wt_server_options so = {.listen = "127.0.0.1:0",
                          .model = "synthetic:small",
                          .workers = workers,
                          .drain_ms = 200,
                          .engine_registry = reg};
  WT_ASSERT_OK(wt_server_start(&so, &srv));
  char target[32];
  snprintf(target, sizeof(target), "127.0.0.1:%d", wt_server_port(srv));
  const char *targets[] = {target};
  wt_client_options o = {.timeout_ms = 10000, .data_timeout_ms = 20000};
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, &o, c));
  return srv;
}

/* Data waits of 700 ms; one side starts 1.5 s late. The round's first
 * message waits for the connect deadline (default 10 s) instead, so the
 * round works either way; a connect deadline shorter than the delay fails
 * the round naming the worker, the previous version stays, and the next
 * round works. */
static void test_late_start(void) {
  wt_registry *reg = NULL;
  WT_ASSERT_OK(wt_registry_new("worker engine", WT_ENGINE_ABI_VERSION, &reg));
  late_engine_ops = wt_ucx_engine_ops;
  late_engine_ops.receive = late_receive;
  WT_ASSERT_OK(wt_registry_register(reg, "ucx", &late_engine_ops));
  renamed_engine_ops = wt_ucx_engine_ops; /* on time, for "ucx-late" below */
  renamed_engine_ops.header.name = "ucx-late";
  WT_ASSERT_OK(wt_registry_register(reg, "ucx-late", &renamed_engine_ops));
  static bool trainer_registered;
  if (!trainer_registered) {
    late_trainer_ops = wt_ucx_trainer_ops;
    late_trainer_ops.header.name = "ucx-late";
    late_trainer_ops.send_weights = late_send;
    WT_ASSERT_OK(wt_trainer_register("ucx-late", &late_trainer_ops));
    trainer_registered = true;
  }
  wt_sync_client *c = NULL;
  wt_server *srv = registry_server(reg, 2, &c);
  wt_trainer *t = NULL;
  wt_source *src = NULL;
  ucx_info ui;
  WT_ASSERT_OK(wt_source_synthetic("small", 5, &src));

  /* The workers start late: the trainer's wait for each worker's first
   * bucket covers it. */
  WT_ASSERT_OK(wt_sync_client_init_transfer(
      c, ucx_info_make(&ui, "tcp", NULL, 64 << 10, 700), NULL, &t));
  atomic_store(&late_worker_ms, 1500);
  round_ok(c, t, src, "late-1");
  assert_servers_hold(c, "small", 5, "late-1");

  /* ... unless the connect deadline is shorter than the delay. */
  wt_trainer_destroy(t);
  t = NULL;
  Wt__V1__UInt32Value ct = WT__V1__UINT32_VALUE__INIT;
  ct.value = 600;
  ucx_info_make(&ui, "tcp", NULL, 64 << 10, 300);
  ui.ucx.connect_timeout_ms = &ct;
  WT_ASSERT_OK(wt_sync_client_init_transfer(c, &ui.info, NULL, &t));
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_source_synthetic_set_seed(src, 6));
  wt_status *st = update_fails(c, t, src, 5000);
  if (st) {
    const char *msg = wt_status_message(st);
    CU_ASSERT_EQUAL(wt_status_code(st), WT_DEADLINE_EXCEEDED);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "timed out after 600 ms"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "first of the round"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, " worker "));
    if (strstr(msg, "first of the round") == NULL)
      fprintf(stderr, "\n  unexpected error: %s\n", msg);
    wt_status_free(st);
  }
  atomic_store(&late_worker_ms, 0);
  assert_servers_hold(c, "small", 5, "late-1");
  WT_ASSERT_OK(wt_source_synthetic_set_seed(src, 7));
  round_ok(c, t, src, "late-2");
  assert_servers_hold(c, "small", 7, "late-2");
  /* connect_timeout_ms = 0 is refused on both sides, naming the field. */
  wt_trainer_destroy(t);
  t = NULL;
  ct.value = 0;
  WT_ASSERT_ERR(wt_sync_client_init_transfer(c, &ui.info, NULL, &t),
                WT_INVALID_ARGUMENT, "init_info.ucx.connect_timeout_ms is 0");
  wt_trainer_destroy(t);
  t = NULL;

  /* The trainer starts late: each worker's wait for the round's first
   * message (the route) covers it. "ucx-late" carries no ucx init message
   * (its name is not the oneof's), so every ucx setting is a default and
   * the init's secret travels as options["ucx_auth_secret"]. */
  Wt__V1__WeightTransferInitInfo late = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  late.backend = "ucx-late";
  late.timeout_ms = 700;
  uint8_t late_secret[WT_UCX_SECRET_BYTES];
  char late_hex[2 * WT_UCX_SECRET_BYTES + 1];
  WT_ASSERT_OK(wt_random_bytes(late_secret, sizeof(late_secret)));
  for (size_t i = 0; i < sizeof(late_secret); i++)
    snprintf(late_hex + 2 * i, 3, "%02x", late_secret[i]);
  Wt__V1__WeightTransferInitInfo__OptionsEntry late_opt =
      WT__V1__WEIGHT_TRANSFER_INIT_INFO__OPTIONS_ENTRY__INIT;
  Wt__V1__WeightTransferInitInfo__OptionsEntry *late_opts[] = {&late_opt};
  late_opt.key = "ucx_auth_secret";
  late_opt.value = late_hex;
  late.n_options = 1;
  late.options = late_opts;
  WT_ASSERT_OK(wt_sync_client_init_transfer(c, &late, NULL, &t));
  atomic_store(&late_trainer_ms, 1500);
  WT_ASSERT_OK(wt_source_synthetic_set_seed(src, 8));
  round_ok(c, t, src, "late-3");
  atomic_store(&late_trainer_ms, 0);
  assert_servers_hold(c, "small", 8, "late-3");

  wt_source_destroy(src);
  wt_trainer_destroy(t);
  wt_sync_client_destroy(c);
  wt_server_stop(srv);
  wt_registry_destroy(reg);
}

/* ---- strangers on the data plane ---------------------------------------- */

static bool file_contains(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  char line[4096];
  bool found = false;
  while (f && !found && fgets(line, sizeof(line), f))
    found = strstr(line, needle) != NULL;
  if (f) fclose(f);
  return found;
}

/* The worker engine as built, but its init reports the worker's packed
 * address to the test: what a stranger who read the init response off a
 * plaintext control channel would know. */
static wt_engine_ops spy_engine_ops;
static char spy_addr[2 * 16384 + 8];

static wt_status *spy_init(wt_engine *e, wt_engine_endpoint *ep) {
  wt_status *st = wt_ucx_engine_ops.init_transfer(e, ep);
  if (st == NULL && ep->worker_address != NULL &&
      2 * ep->worker_address_len + 6 < sizeof(spy_addr)) {
    strcpy(spy_addr, "addr:");
    for (size_t i = 0; i < ep->worker_address_len; i++)
      snprintf(spy_addr + 5 + 2 * i, 3, "%02x", ep->worker_address[i]);
  }
  return st;
}

/* Runs the attacker with argv (after the binary) in the background. */
static pid_t attack_start(const char *dir, const char *tag,
                          const char *const *args, char *log, size_t cap) {
  snprintf(log, cap, "%s/attack-%s.log", dir, tag);
  const char *argv[8] = {WT_UCX_ATTACK_BIN};
  for (size_t i = 0; args[i] != NULL && i < 6; i++) argv[i + 1] = args[i];
  pid_t pid = wt_proc_spawn(argv, log, NULL);
  CU_ASSERT_FATAL(pid > 0);
  return pid;
}

/* A registry whose ucx engine is the real one, its init spied on: the
 * worker address lands in spy_addr. */
static wt_registry *spy_registry(void) {
  wt_registry *reg = NULL;
  WT_ASSERT_OK(wt_registry_new("worker engine", WT_ENGINE_ABI_VERSION, &reg));
  spy_engine_ops = wt_ucx_engine_ops;
  spy_engine_ops.init_transfer = spy_init;
  WT_ASSERT_OK(wt_registry_register(reg, "ucx", &spy_engine_ops));
  return reg;
}

/* Waits for the attacker and returns its report line (static): the one
 * that starts with "MODE:" (a sanitizer's summary may follow it). */
static const char *attack_end(pid_t pid, const char *log, const char *mode) {
  static char line[512];
  int status = 0;
  CU_ASSERT(wt_proc_wait(pid, 60000, &status));
  line[0] = '\0';
  FILE *f = fopen(log, "r");
  char buf[512];
  while (f && fgets(buf, sizeof(buf), f))
    if (strncmp(buf, mode, strlen(mode)) == 0 && buf[strlen(mode)] == ':')
      snprintf(line, sizeof(line), "%s", buf);
  if (f) fclose(f);
  line[strcspn(line, "\n")] = '\0';
  return line;
}

/* Waits until the attacker says its attack is under way ("ready: MODE";
 * 10 s: a deadline against hanging). */
static void attack_ready(pid_t pid, const char *log) {
  bool ready = wt_proc_wait_for_text(log, "ready:", pid, 10000);
  if (!ready) wt_proc_dump("ucx_attack", log);
  CU_ASSERT_FATAL(ready);
}

/* Whether the attacker still runs (it is not reaped). */
static bool attack_running(pid_t pid) {
  siginfo_t info = {0};
  return waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == 0;
}

/* Ends the attack now (it reports as at the end of its SECONDS): the test
 * has seen what it looked for while the attack went on. */
static void attack_stop(pid_t pid) {
  CU_ASSERT(attack_running(pid)); /* it lasted as long as the test looked */
  kill(pid, SIGUSR1);
}

/* Waits until this process's descriptors are `more` above fds0 (strangers'
 * connections accepted) or 10 s passed; returns the count then. */
static int await_fds_above(int fds0, int more) {
  int now = wtt_open_fds();
  for (int64_t end = wt_mono_ms() + 10000;
       now < fds0 + more && wt_mono_ms() < end;) {
    wtt_sleep_ms(10);
    now = wtt_open_fds();
  }
  return now;
}

/* Rounds keep committing the trainer's bytes, and only those, while a
 * stranger who knows the worker's address (not the init's secret) injects a
 * route to its own listener and bucket 0 under the tags rounds used to
 * have, floods 8 KiB messages on random tags, or holds 64 idle
 * connections. */
static void test_strangers_by_address(void) {
  char *dir = wt_test_tmpdir();
  wt_registry *reg = spy_registry();
  wt_sync_client *c = NULL;
  wt_server *srv = registry_server(reg, 1, &c);
  wt_trainer *t = NULL;
  wt_source *src = NULL;
  ucx_info ui;
  spy_addr[0] = '\0';
  WT_ASSERT_OK(wt_sync_client_init_transfer(
      c, ucx_info_make(&ui, "tcp", NULL, 256 << 10, 5000), NULL, &t));
  CU_ASSERT_FATAL(spy_addr[0] != '\0');
  WT_ASSERT_OK(wt_source_synthetic("small", 5, &src));
  round_ok(c, t, src, "s-5");
  uint64_t seed = 5;

  const struct {
    const char *mode;
    const char *n; /* idle: connections */
  } attacks[] = {
      {"inject", NULL}, {"flood", NULL}, {"idle", "64"}, {"claims", NULL}};
  int64_t worst_abort = 0;
  for (size_t a = 0; a < sizeof(attacks) / sizeof(attacks[0]); a++) {
    /* Stopped once the rounds beside it are done (60 s: a deadline). */
    const char *args[] = {attacks[a].mode, "60", spy_addr, attacks[a].n, NULL};
    char log[PATH_MAX];
    long rss0 = wtt_rss_kib() / 1024;
    pid_t pid = attack_start(dir, attacks[a].mode, args, log, sizeof(log));
    attack_ready(pid, log);
    int rounds = 0, failed = 0;
    int64_t end = wt_mono_ms() + 3000;
    while (wt_mono_ms() < end) {
      char v[32];
      snprintf(v, sizeof(v), "s-%llu", (unsigned long long)++seed);
      WT_ASSERT_OK(wt_source_synthetic_set_seed(src, seed));
      if (strcmp(attacks[a].mode, "claims") == 0) {
        /* An abort drains what is unexpected: never what a message claims
         * (before: RSS 30 MiB -> 6.4 GiB over 3 aborts, one took 12.1 s). */
        int64_t a0 = wt_mono_ms();
        WT_ASSERT_OK(wt_sync_client_start(c));
        WT_ASSERT_OK(wt_sync_client_abort(c, "a round that aborts"));
        wtt_sleep_ms(50);
        int64_t took = wt_mono_ms() - a0;
        if (took > worst_abort) worst_abort = took;
      }
      wt_status *st = wt_sync_client_start(c);
      if (st == NULL) st = wt_sync_client_update(c, t, src, NULL, NULL);
      if (st == NULL) st = wt_sync_client_finish(c, v);
      if (st != NULL) {
        fprintf(stderr, "\n  round during %s: %s\n", attacks[a].mode,
                wt_status_message(st));
        wt_status_free(wt_sync_client_abort(c, "test"));
        wt_status_free(st);
        failed++;
        seed--;
      } else {
        /* The committed bytes are the trainer's: none of 0x41. */
        assert_servers_hold(c, "small", seed, v);
      }
      rounds++;
    }
    long rss1 = wtt_rss_kib() / 1024;
    attack_stop(pid);
    const char *report = attack_end(pid, log, attacks[a].mode);
    printf("\n  %-6s (%s): %d rounds beside it, %d failed; RSS %ld -> %ld MiB",
           attacks[a].mode, report, rounds, failed, rss0, rss1);
    if (strcmp(attacks[a].mode, "claims") == 0) {
      printf("; worst start+abort %lld ms", (long long)worst_abort);
      CU_ASSERT(worst_abort < 3000);
    }
    CU_ASSERT(rounds > 0);
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT(rss1 - rss0 < 256);
    if (strcmp(attacks[a].mode, "inject") == 0) {
      CU_ASSERT_PTR_NOT_NULL(strstr(report, "; 0 connections"));
      CU_ASSERT_PTR_NOT_NULL(strstr(report, "messages sent"));
    }
  }
  printf("\n");
  wt_trainer_destroy(t);
  wt_source_destroy(src);
  wt_sync_client_destroy(c);
  wt_server_stop(srv);
  wt_registry_destroy(reg);
  wt_test_rmtree(dir);
  free(dir);
}

/* Row 6 of docs/trust.md: a stranger who knows a worker's address opens
 * UCX endpoints to it, each a connection the server accepts with no
 * callback to wt. Past ucx.max_peer_connections the engine is given up,
 * which closes them all: between rounds within the worker's check (1 s),
 * or at the next round's start (what `between` false tests: checks only
 * there); the client inits again (a new worker, a new address) and the
 * round commits; the descriptors come back. (Before: one descriptor each,
 * no limit; at 19,978 the trainer's re-init failed.) */
static void stranger_endpoints_reclaimed(bool between) {
  char *dir = wt_test_tmpdir();
  wt_registry *reg = spy_registry();
  wt_backend_option eo[1] = {{"ucx.max_peer_connections", "16"}};
  wt_server_options so = {.listen = "127.0.0.1:0",
                          .model = "synthetic:small",
                          .workers = 1,
                          .drain_ms = 200,
                          .engine_registry = reg,
                          .engine_options = eo,
                          .n_engine_options = 1,
                          .engine_check_ms = between ? 0 : -1};
  wt_server *srv = NULL;
  WT_ASSERT_OK(wt_server_start(&so, &srv));
  char target[32];
  snprintf(target, sizeof(target), "127.0.0.1:%d", wt_server_port(srv));
  const char *targets[] = {target};
  wt_client_options co = {.timeout_ms = 10000, .data_timeout_ms = 20000};
  wt_sync_client *c = NULL;
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, &co, &c));
  wt_trainer *t = NULL;
  wt_source *src = NULL;
  ucx_info ui;
  spy_addr[0] = '\0';
  WT_ASSERT_OK(wt_sync_client_init_transfer(
      c, ucx_info_make(&ui, "tcp", NULL, 256 << 10, 5000), NULL, &t));
  CU_ASSERT_FATAL(spy_addr[0] != '\0');
  char old_addr[sizeof(spy_addr)];
  snprintf(old_addr, sizeof(old_addr), "%s", spy_addr);
  WT_ASSERT_OK(wt_source_synthetic("small", 7, &src));
  round_ok(c, t, src, "e-7");
  int fds0 = wtt_open_fds();
  /* They hold on until stopped (60 s: a deadline against hanging). */
  const char *args[] = {"idle", "60", spy_addr, "64", NULL};
  char log[PATH_MAX];
  pid_t pid = attack_start(dir, "endpoints", args, log, sizeof(log));
  int during = await_fds_above(fds0, 32);
  if (between) {
    /* No round runs: within the check (1 s) the engine is given up and
     * the strangers' descriptors are back, while the server stays healthy
     * and its worker reads ready. */
    int64_t w0 = wt_mono_ms();
    int idle = during;
    int64_t freed_ms = -1;
    while (wt_mono_ms() - w0 < 3000) {
      idle = wtt_open_fds();
      if (idle <= fds0 + 4) {
        freed_ms = wt_mono_ms() - w0;
        break;
      }
      wtt_sleep_ms(50);
    }
    Wt__V1__ServerInfo *info = NULL;
    WT_ASSERT_OK(wt_sync_client_server_info(c, 0, &info));
    CU_ASSERT_FATAL(info != NULL && info->n_workers == 1);
    const Wt__V1__WorkerInfo *wi = info->workers[0];
    wt_rpc_channel *hc = NULL;
    WT_ASSERT_OK(wt_rpc_channel_new(target, NULL, &hc));
    int health = 0;
    WT_ASSERT_OK(wtt_health_check(hc, "", &health));
    wt_rpc_channel_destroy(hc);
    printf(
        "\n  between rounds: %d -> %d descriptors, freed %lld ms after "
        "the strangers held them, no round run; the worker reads '%s' "
        "(%s); health %s",
        during, idle, (long long)freed_ms, wi->state, wi->reason,
        health == 1 ? "SERVING" : "NOT SERVING");
    CU_ASSERT(freed_ms >= 0);
    CU_ASSERT_STRING_EQUAL(wi->state, "ready");
    CU_ASSERT_PTR_NOT_NULL(strstr(wi->reason, "between rounds"));
    CU_ASSERT_EQUAL(health, 1);
    wt_pb_free(&info->base);
  }
  /* The next round: the engine is given up, the client inits again. */
  WT_ASSERT_OK(wt_source_synthetic_set_seed(src, 8));
  int64_t t0 = wt_mono_ms();
  wt_status *st = wt_sync_client_start(c);
  if (st == NULL) st = wt_sync_client_update(c, t, src, NULL, NULL);
  if (st == NULL) st = wt_sync_client_finish(c, "e-8");
  WT_ASSERT_OK(st);
  int64_t took = wt_mono_ms() - t0;
  assert_servers_hold(c, "small", 8, "e-8");
  int after = wtt_open_fds();
  for (int64_t end = wt_mono_ms() + 10000;
       after > fds0 + 4 && wt_mono_ms() < end;) {
    wtt_sleep_ms(10);
    after = wtt_open_fds();
  }
  /* The descriptors came back while the strangers still held on. */
  attack_stop(pid);
  const char *report = attack_end(pid, log, "idle");
  printf(
      "\n  %s; server descriptors %d -> %d during -> %d after the round "
      "(%lld ms, with the re-init); a new worker address: %s\n",
      report, fds0, during, after, (long long)took,
      strcmp(old_addr, spy_addr) != 0 ? "yes" : "no");
  CU_ASSERT(during >= fds0 + 16); /* the strangers did hold descriptors */
  CU_ASSERT(after <= fds0 + 4);
  CU_ASSERT(strcmp(old_addr, spy_addr) != 0);
  /* And rounds go on, on the new engine. */
  WT_ASSERT_OK(wt_source_synthetic_set_seed(src, 9));
  round_ok(c, t, src, "e-9");
  assert_servers_hold(c, "small", 9, "e-9");
  wt_trainer_destroy(t);
  wt_source_destroy(src);
  wt_sync_client_destroy(c);
  wt_server_stop(srv);
  wt_registry_destroy(reg);
  wt_test_rmtree(dir);
  free(dir);
}

static void test_stranger_endpoints_reclaimed(void) {
  stranger_endpoints_reclaimed(false);
}

static void test_stranger_endpoints_between_rounds(void) {
  stranger_endpoints_reclaimed(true);
}

/* Trust row 10: strangers' endpoints are counted during a round too. A
 * round is open and its worker waits for the trainer's first bucket when
 * 64 strangers connect to the worker's UCX port (cap 16): the wait ends
 * within about a second with RESOURCE_EXHAUSTED naming the count, not at
 * the data deadline; the engine is then given up (descriptors back), and
 * after a new init the next round commits. */
static void test_stranger_endpoints_mid_round(void) {
  char *dir = wt_test_tmpdir();
  wt_registry *reg = spy_registry();
  wt_backend_option eo[1] = {{"ucx.max_peer_connections", "16"}};
  wt_server_options so = {.listen = "127.0.0.1:0",
                          .model = "synthetic:small",
                          .workers = 1,
                          .drain_ms = 200,
                          .engine_registry = reg,
                          .engine_options = eo,
                          .n_engine_options = 1};
  wt_server *srv = NULL;
  WT_ASSERT_OK(wt_server_start(&so, &srv));
  char target[32];
  snprintf(target, sizeof(target), "127.0.0.1:%d", wt_server_port(srv));
  const char *targets[] = {target};
  wt_client_options co = {.timeout_ms = 10000, .data_timeout_ms = 20000};
  wt_sync_client *c = NULL;
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, &co, &c));
  wt_trainer *t = NULL;
  wt_source *src = NULL;
  ucx_info ui;
  spy_addr[0] = '\0';
  WT_ASSERT_OK(wt_sync_client_init_transfer(
      c, ucx_info_make(&ui, "tcp", NULL, 256 << 10, 20000), NULL, &t));
  CU_ASSERT_FATAL(spy_addr[0] != '\0');
  WT_ASSERT_OK(wt_source_synthetic("small", 7, &src));
  round_ok(c, t, src, "m-7");
  int fds0 = wtt_open_fds();
  /* The update names every tensor; no byte of it is sent. */
  wt_tensor_meta *metas = NULL;
  size_t n = 0;
  WT_ASSERT_OK(wt_sync_client_list_parameters(c, 0, NULL, &metas, &n));
  size_t cap = 64 + n * 200;
  char *json = malloc(cap), shape[128];
  size_t len = (size_t)snprintf(json, cap, "{\"names\": [");
  for (size_t i = 0; i < n; i++)
    len += (size_t)snprintf(json + len, cap - len, "%s\"%s\"", i ? ", " : "",
                            metas[i].name);
  len += (size_t)snprintf(json + len, cap - len, "], \"dtype_names\": [");
  for (size_t i = 0; i < n; i++)
    len += (size_t)snprintf(json + len, cap - len, "%s\"%s\"", i ? ", " : "",
                            wt_dtype_torch_name(metas[i].dtype));
  len += (size_t)snprintf(json + len, cap - len, "], \"shapes\": [");
  for (size_t i = 0; i < n; i++) {
    size_t k = 0;
    shape[0] = 0;
    for (int d = 0; d < metas[i].ndim; d++)
      k += (size_t)snprintf(shape + k, sizeof(shape) - k, "%s%lld",
                            d ? ", " : "", (long long)metas[i].shape[d]);
    len += (size_t)snprintf(json + len, cap - len, "%s{\"dims\": [%s]}",
                            i ? ", " : "", shape);
  }
  snprintf(json + len, cap - len, "]}");
  wt_tensor_meta_array_free(metas, n);
  WT_ASSERT_OK(wt_sync_client_start(c));
  /* They hold on until stopped (60 s: a deadline against hanging). */
  const char *args[] = {"idle", "60", spy_addr, "64", NULL};
  char log[PATH_MAX];
  pid_t pid = attack_start(dir, "mid-round", args, log, sizeof(log));
  int64_t t0 = wt_mono_ms();
  wt_status *st = wt_bindings_update_info(c, json);
  int64_t took = wt_mono_ms() - t0;
  free(json);
  CU_ASSERT_EQUAL(wt_status_code(st), WT_RESOURCE_EXHAUSTED);
  CU_ASSERT_PTR_NOT_NULL(
      st ? strstr(wt_status_message(st), "ucx.max_peer_connections") : NULL);
  CU_ASSERT(took < 8000); /* the data deadline is 20 s */
  printf("\n  mid-round: the wait ended after %lld ms: %s", (long long)took,
         st ? wt_status_message(st) : "OK?");
  wt_status_free(st);
  /* The engine goes at the next check; the next round, after a new init,
   * commits and the descriptors are back. */
  int after = wtt_open_fds();
  for (int64_t end = wt_mono_ms() + 10000;
       after > fds0 + 4 && wt_mono_ms() < end;) {
    wtt_sleep_ms(10);
    after = wtt_open_fds();
  }
  WT_ASSERT_OK(wt_source_synthetic_set_seed(src, 8));
  st = wt_sync_client_start(c);
  if (st == NULL) st = wt_sync_client_update(c, t, src, NULL, NULL);
  if (st == NULL) st = wt_sync_client_finish(c, "m-8");
  WT_ASSERT_OK(st);
  assert_servers_hold(c, "small", 8, "m-8");
  /* All that while the strangers held on. */
  attack_stop(pid);
  const char *report = attack_end(pid, log, "idle");
  printf("\n  %s; server descriptors %d before, %d after\n", report, fds0,
         after);
  CU_ASSERT(after <= fds0 + 4);
  wt_trainer_destroy(t);
  wt_source_destroy(src);
  wt_sync_client_destroy(c);
  wt_server_stop(srv);
  wt_registry_destroy(reg);
  wt_test_rmtree(dir);
  free(dir);
}

/* Process `pid`'s TCP sockets in kernel state `state` (0x0a LISTEN, 0x01
 * ESTABLISHED), from its socket fds and the kernel's tables: each one's
 * local and remote port (at most cap). */
static size_t tcp_sockets(pid_t pid, unsigned state, int *local, int *remote,
                          size_t cap) {
  char path[64];
  unsigned long inodes[1024];
  size_t ni = 0, n = 0;
  snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  struct dirent *de;
  while (d && (de = readdir(d)) != NULL && ni < 1024) {
    char link[PATH_MAX], target[128];
    snprintf(link, sizeof(link), "%s/%s", path, de->d_name);
    ssize_t l = readlink(link, target, sizeof(target) - 1);
    if (l <= 0) continue;
    target[l] = '\0';
    unsigned long ino = 0;
    if (sscanf(target, "socket:[%lu]", &ino) == 1) inodes[ni++] = ino;
  }
  if (d) closedir(d);
  const char *tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
  for (size_t k = 0; k < 2; k++) {
    FILE *f = fopen(tables[k], "r");
    char line[512];
    while (f && fgets(line, sizeof(line), f)) {
      char lo[128], re[128];
      unsigned st = 0;
      unsigned long ino = 0;
      if (sscanf(line, " %*d: %127s %127s %x %*s %*s %*s %*s %*s %lu", lo, re,
                 &st, &ino) != 4 ||
          st != state)
        continue;
      const char *lc = strrchr(lo, ':'), *rc = strrchr(re, ':');
      for (size_t i = 0; i < ni && n < cap; i++)
        if (inodes[i] == ino) {
          local[n] = lc ? (int)strtol(lc + 1, NULL, 16) : 0;
          remote[n++] = rc ? (int)strtol(rc + 1, NULL, 16) : 0;
        }
    }
    if (f) fclose(f);
  }
  return n;
}

/* The listening TCP ports of process `pid` other than `skip`. */
static size_t listening_ports(pid_t pid, int skip, int *ports, size_t cap) {
  int local[256], remote[256];
  size_t m = tcp_sockets(pid, 0x0a, local, remote, 256), n = 0;
  for (size_t i = 0; i < m && n < cap; i++)
    if (local[i] != skip) ports[n++] = local[i];
  return n;
}

/* How many TCP connections process `pid` has established to `port` (0:
 * to any port). */
static size_t connections_to(pid_t pid, int port) {
  static int local[1024], remote[1024];
  size_t m = tcp_sockets(pid, 0x01, local, remote, 1024), n = 0;
  for (size_t i = 0; i < m; i++)
    if (port == 0 || remote[i] == port) n++;
  return n;
}

/* Raw bytes (17, 64, 300, 4096 zero bytes, 64 KiB of 0xff) to every UCX
 * port of a real wt-server: it stays up and the next round commits. With
 * UCX 1.13 the sockaddr listener is what died of it (an assertion in its
 * tcp_sockcm code): the workers open none unless asked, and such a server
 * refuses to (test_memory_source_sequential checks the refusal). */
static void test_strangers_raw_bytes(void) {
  char *dir = wt_test_tmpdir();
  wt_proc_server srv;
  const char *const extra[] = {"--model", "synthetic:small", "--workers", "2",
                               NULL};
  CU_ASSERT_FATAL(wt_proc_server_start(&srv, dir, "raw-server", extra));
  const char *targets[] = {srv.addr};
  wt_client_options o = {.timeout_ms = 10000, .data_timeout_ms = 20000};
  wt_sync_client *c = NULL;
  wt_trainer *t = NULL;
  wt_source *src = NULL;
  ucx_info ui;
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, &o, &c));
  WT_ASSERT_OK(wt_sync_client_init_transfer(
      c, ucx_info_make(&ui, "tcp", NULL, 256 << 10, 5000), NULL, &t));
  WT_ASSERT_OK(wt_source_synthetic("small", 5, &src));
  round_ok(c, t, src, "raw-5");
  int grpc_port = atoi(strrchr(srv.addr, ':') + 1);
  int ports[32];
  size_t n = listening_ports(srv.pid, grpc_port, ports, 32);
  char pstr[32][16];
  const char *args[40] = {"garbage", "127.0.0.1"};
  for (size_t i = 0; i < n; i++) {
    snprintf(pstr[i], sizeof(pstr[i]), "%d", ports[i]);
    args[2 + i] = pstr[i];
  }
  args[2 + n] = NULL;
  char log[PATH_MAX];
  snprintf(log, sizeof(log), "%s/attack-garbage.log", dir);
  const char *argv[42] = {WT_UCX_ATTACK_BIN};
  for (size_t i = 0; args[i]; i++) argv[i + 1] = args[i];
  char *out = NULL;
  CU_ASSERT_EQUAL(wt_proc_run(argv, log, 60000, &out), 0);
  wtt_sleep_ms(500);
  bool alive = wt_proc_server_alive(&srv);
  printf("\n  %s against %zu UCX port(s) of wt-server: %s\n",
         out ? strtok(out, "\n") : "?", n, alive ? "still serving" : "DIED");
  free(out);
  CU_ASSERT(n >= 1);
  CU_ASSERT_FATAL(alive);
  WT_ASSERT_OK(wt_source_synthetic_set_seed(src, 6));
  round_ok(c, t, src, "raw-6");
  assert_servers_hold(c, "small", 6, "raw-6");
  /* Every UCX port is on the interface of --listen (loopback here). */
  FILE *f = fopen("/proc/net/tcp", "r");
  char line[512];
  int beyond = 0;
  while (f && fgets(line, sizeof(line), f)) {
    unsigned a = 0, port = 0, st = 0;
    if (sscanf(line, " %*d: %x:%x %*s %x", &a, &port, &st) != 3 || st != 0x0a)
      continue;
    for (size_t i = 0; i < n; i++)
      if ((int)port == ports[i] && (a & 0xff) != 127) {
        beyond++;
        printf("\n  a UCX port beyond loopback: %s", line);
      }
  }
  if (f) fclose(f);
  if (beyond != 0) { /* what else the server listens on, for the diagnosis */
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "ls -l /proc/%d/fd | grep socket; ss -ltnp",
             (int)srv.pid);
    if (system(cmd) != 0) printf("\n  (ss failed)");
  }
  CU_ASSERT_EQUAL(beyond, 0);

  /* Where UCX's listener is safe (1.14 on), an init may ask for one: raw
   * bytes to it change nothing either, and of 64 connections that never
   * send the init's hello at most 16 are held (8 per address; each newer
   * one takes the oldest's place, so none is refused; the held ones are
   * closed 2 s on) while the trainer's rounds go on. */
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  if (major == 1 && minor < 14) {
    wt_test_skip("the sockaddr listener under attack",
                 "UCX 1.13 runs no listener (wt refuses to open one)");
  } else {
    wt_trainer_destroy(t);
    t = NULL;
    WT_ASSERT_OK(wt_sync_client_init_transfer(
        c, ucx_info_make(&ui, "tcp", "sockaddr", 256 << 10, 5000), NULL, &t));
    uint64_t seed = 7;
    WT_ASSERT_OK(wt_source_synthetic_set_seed(src, seed));
    round_ok(c, t, src, "raw-7");
    n = listening_ports(srv.pid, grpc_port, ports, 32);
    for (size_t i = 0; i < n; i++) {
      snprintf(pstr[i], sizeof(pstr[i]), "%d", ports[i]);
      argv[3 + i] = pstr[i];
    }
    argv[3 + n] = NULL;
    CU_ASSERT_EQUAL(wt_proc_run(argv, log, 60000, NULL), 0);
    CU_ASSERT_FATAL(wt_proc_server_alive(&srv));
    char idle_target[64];
    int closed = 0;
    for (size_t i = 0; i < n; i++) {
      snprintf(idle_target, sizeof(idle_target), "127.0.0.1:%d", ports[i]);
      /* Stopped after the rounds (60 s: a deadline against hanging). */
      const char *iargs[] = {"idle", "60", idle_target, "64", NULL};
      char ilog[PATH_MAX];
      pid_t ip = attack_start(dir, "idle-listener", iargs, ilog, sizeof(ilog));
      attack_ready(ip, ilog);
      /* Rounds for 3.5 s while the attack lasts: the worker meets the
       * strangers while it progresses. */
      for (int64_t end = wt_mono_ms() + 3500; wt_mono_ms() < end;) {
        WT_ASSERT_OK(wt_source_synthetic_set_seed(src, ++seed));
        char v[32];
        snprintf(v, sizeof(v), "raw-%llu", (unsigned long long)seed);
        round_ok(c, t, src, v);
        assert_servers_hold(c, "small", seed, v);
        wtt_sleep_ms(100);
      }
      attack_stop(ip);
      attack_end(ip, ilog, "idle");
      /* Strangers are only dealt with while the worker progresses (in a
       * round): past 16 owing a hello (8 per address) the oldest makes room
       * for the newcomer, and those that owe one longer than 2 s are
       * closed at the next wait. */
      closed += file_contains(srv.log, "a newer connection needed its") ||
                file_contains(srv.log, "no hello within 2000 ms");
    }
    if (closed == 0) wt_proc_dump("wt-server", srv.log);
    CU_ASSERT(closed > 0);
    CU_ASSERT(wt_proc_server_alive(&srv));
  }
  wt_trainer_destroy(t);
  wt_source_destroy(src);
  wt_sync_client_destroy(c);
  CU_ASSERT_EQUAL(wt_proc_server_stop(&srv, 10000, NULL), 0);
  wt_test_rmtree(dir);
  free(dir);
}

/* ---- a trainer behind strangers on a listener ---------------------------- */

/* wt's own control plane, except that the answer to an init waits until
 * strangers have connected to the worker's UCX listener it names: the
 * trainer's connection then comes behind theirs. */
typedef struct behind_plane {
  wt_control_plane inner;
  const char *dir;
  pid_t attacker;
  size_t made; /* the strangers' connections made before the answer */
  char log[PATH_MAX];
} behind_plane;

static size_t bh_count(void *s) {
  behind_plane *b = s;
  return b->inner.ops->server_count(b->inner.self);
}
static const char *bh_target(void *s, size_t k) {
  behind_plane *b = s;
  return b->inner.ops->target(b->inner.self, k);
}
static wt_status *bh_start(void *s, size_t k, wt_control_method m,
                           const ProtobufCMessage *req, int64_t deadline_ms,
                           wt_control_call **call) {
  behind_plane *b = s;
  return b->inner.ops->call_start(b->inner.self, k, m, req, deadline_ms, call);
}
static bool bh_done(void *s, wt_control_call *call, int64_t wait_ms) {
  behind_plane *b = s;
  return b->inner.ops->call_done(b->inner.self, call, wait_ms);
}
static void bh_cancel(void *s, wt_control_call *call) {
  behind_plane *b = s;
  b->inner.ops->call_cancel(b->inner.self, call);
}
static wt_status *bh_wait(void *s, wt_control_call *call,
                          ProtobufCMessage **response) {
  behind_plane *b = s;
  ProtobufCMessage *r = NULL;
  wt_status *st = b->inner.ops->call_wait(b->inner.self, call, &r);
  if (st == NULL && r != NULL && b->attacker == 0 &&
      r->descriptor ==
          &wt__v1__init_weight_transfer_engine_response__descriptor) {
    const Wt__V1__InitWeightTransferEngineResponse *ir = (const void *)r;
    if (ir->n_endpoints > 0 && ir->endpoints[0]->port != 0) {
      char target[300];
      snprintf(target, sizeof(target), "%s:%u", ir->endpoints[0]->address,
               (unsigned)ir->endpoints[0]->port);
      /* They hold on until stopped (60 s: a deadline against hanging). */
      const char *args[] = {"idle", "60", target, "64", NULL};
      b->attacker =
          attack_start(b->dir, "behind", args, b->log, sizeof(b->log));
      /* Their 64 connections are made (the kernel accepts them for the
       * listener: no progress of the worker needed) before the trainer's
       * comes; 10 s is a deadline against hanging. */
      size_t made = 0;
      for (int64_t end = wt_mono_ms() + 10000;
           (made = connections_to(b->attacker, (int)ir->endpoints[0]->port)) <
               64 &&
           wt_mono_ms() < end;)
        wtt_sleep_ms(10);
      b->made = made;
    }
  }
  if (response)
    *response = r;
  else
    wt_pb_free(r);
  return st;
}
static wt_rpc_channel *bh_channel(void *s, size_t k) {
  behind_plane *b = s;
  return b->inner.ops->channel(b->inner.self, k);
}
static wt_control_ops behind_ops = {
    .name = "behind",
    .server_count = bh_count,
    .target = bh_target,
    .call_start = bh_start,
    .call_done = bh_done,
    .call_cancel = bh_cancel,
    .call_wait = bh_wait,
    .channel = bh_channel,
};

/* Row 4 of docs/trust.md, the case the strangers test could not make: 64
 * strangers connect to a worker's listener first and never send a hello;
 * the trainer's connection comes after them. It sends its hello at once,
 * takes the place of the oldest owing one, and its rounds commit while the
 * strangers hold on. */
static void test_trainer_behind_strangers(void) {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  if (major == 1 && minor < 14) {
    wt_test_skip("a trainer behind strangers on a listener",
                 "UCX 1.13 runs no listener (wt refuses to open one)");
    return;
  }
  char *dir = wt_test_tmpdir();
  wt_registry *reg = spy_registry();
  wt_sync_client *plain = NULL;
  wt_server *srv = registry_server(reg, 1, &plain);
  behind_plane b = {.dir = dir};
  const char *targets[] = {wt_sync_client_target(plain, 0)};
  wt_client_options co = {.timeout_ms = 10000, .data_timeout_ms = 20000};
  WT_ASSERT_OK(wt_control_grpc_new(targets, 1, &co, &b.inner));
  behind_ops.methods = b.inner.ops->methods;
  wt_control_plane cp = {&behind_ops, &b};
  wt_sync_client *c = NULL;
  WT_ASSERT_OK(wt_sync_client_new_with(&cp, &co, &c));
  wt_trainer *t = NULL;
  wt_source *src = NULL;
  ucx_info ui;
  WT_ASSERT_OK(wt_sync_client_init_transfer(
      c, ucx_info_make(&ui, "tcp", "sockaddr", 256 << 10, 5000), NULL, &t));
  CU_ASSERT_FATAL(b.attacker > 0);
  WT_ASSERT_OK(wt_source_synthetic("small", 11, &src));
  int64_t t0 = wt_mono_ms();
  round_ok(c, t, src, "behind-11");
  int64_t first = wt_mono_ms() - t0;
  assert_servers_hold(c, "small", 11, "behind-11");
  WT_ASSERT_OK(wt_source_synthetic_set_seed(src, 12));
  round_ok(c, t, src, "behind-12");
  assert_servers_hold(c, "small", 12, "behind-12");
  /* All that while the strangers held on. */
  attack_stop(b.attacker);
  const char *report = attack_end(b.attacker, b.log, "idle");
  printf(
      "\n  %s (%zu made before the trainer's); the trainer's first round "
      "behind them took %lld ms\n",
      report, b.made, (long long)first);
  CU_ASSERT_PTR_NOT_NULL(strstr(report, "idle: 64 connections"));
  wt_trainer_destroy(t);
  wt_source_destroy(src);
  wt_sync_client_destroy(c);
  wt_sync_client_destroy(plain);
  wt_server_stop(srv);
  wt_registry_destroy(reg);
  wt_test_rmtree(dir);
  free(dir);
}

/* ---- real processes ------------------------------------------------------ */

/* wt-push (a real trainer process) killed mid-round: the workers' receive
 * fails within a few seconds (their connection to the trainer broke), the
 * previous version stays, and the next push works. */
static void test_trainer_killed(void) {
  char *dir = wt_test_tmpdir();
  wt_proc_server srv;
  char log[PATH_MAX], out[PATH_MAX];
  /* A round idle for 3 s is aborted: the last resort when the workers do
   * not hear of the trainer's death (by worker address, which UCX 1.13
   * must use, they often do, but not always). */
  const char *const extra[] = {
      "--model", "synthetic:llama-256m", "--workers", "2", "--round-timeout",
      "3",       "--log-level",          "debug",     NULL};
  CU_ASSERT_FATAL(wt_proc_server_start(&srv, dir, "server", extra));
  snprintf(log, sizeof(log), "%s/push1.log", dir);
  const char *const push1[] = {WT_PUSH_BIN,   "--server",   srv.addr,
                               "--synthetic", "llama-256m", "--backend",
                               "ucx",         "--version",  "u1",
                               "--quiet",     NULL};
  CU_ASSERT_EQUAL(wt_proc_run(push1, log, 60000, NULL), 0);

  snprintf(out, sizeof(out), "%s/push2.log", dir);
  /* Through the workers' listeners where UCX runs them safely (1.14 on):
   * the connection they hold breaks when the trainer dies. By worker
   * address UCX 1.22 tells the workers nothing, and the data deadline alone
   * would end their wait. */
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  const bool listener = major > 1 || minor >= 14;
  const char *const push2[] = {
      WT_PUSH_BIN,
      "--server",
      srv.addr,
      "--synthetic",
      "llama-256m",
      "--backend",
      "ucx",
      "--bucket-size",
      "1048576",
      "--version",
      "u2",
      "--option",
      listener ? "connect=sockaddr" : "connect=address",
      NULL};
  pid_t pid = wt_proc_spawn(push2, out, NULL);
  CU_ASSERT_FATAL(pid > 0);
  /* The first progress line: some buckets landed, most did not. */
  CU_ASSERT(wt_proc_wait_for_text(out, "progress", pid, 30000));
  kill(pid, SIGKILL);
  int status = 0;
  CU_ASSERT(wt_proc_wait(pid, 5000, &status));
  CU_ASSERT(WIFSIGNALED(status));
  int64_t t0 = wt_mono_ms();
  /* The server sees the trainer gone: its UpdateWeights call is cancelled
   * (the receives stop and the round ends), or, through a listener (UCX
   * 1.14 on), the workers' connection breaks; failing both, the round's
   * idle timer ends it. */
  bool gone = false;
  while (!gone && wt_mono_ms() - t0 < 10000) {
    gone = file_contains(srv.log, "the trainer is gone") ||
           (!listener && file_contains(srv.log, "aborted: idle for"));
    if (!gone) wtt_sleep_ms(50);
  }
  int64_t gone_ms = wt_mono_ms() - t0;
  printf("\n  the workers left the dead trainer's round after %lld ms (%s)\n",
         (long long)gone_ms,
         file_contains(srv.log, "the trainer is gone")
             ? "the server saw the trainer gone"
             : "the idle timer ended it");
  CU_ASSERT(gone);
  CU_ASSERT(gone_ms < (listener ? 5000 : 6000));
  if (!gone) wt_proc_dump("wt-server", srv.log);

  wt_sync_client *c = NULL;
  const char *targets[] = {srv.addr};
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, NULL, &c));
  uint32_t world = 0;
  WT_ASSERT_OK(wt_sync_client_world_size(c, &world));
  CU_ASSERT_EQUAL(world, 3);
  wt_weight_version v = {0};
  WT_ASSERT_OK(wt_sync_client_get_version(c, 0, &v));
  CU_ASSERT_STRING_EQUAL(v.version, "u1");
  wt_weight_version_clear(&v);
  /* wt-push's default seed is the server's sequence + 1: u1 holds seed 1. */
  assert_servers_hold(c, "llama-256m", 1, "u1");

  snprintf(log, sizeof(log), "%s/push3.log", dir);
  const char *const push3[] = {WT_PUSH_BIN,   "--server",   srv.addr,
                               "--synthetic", "llama-256m", "--backend",
                               "ucx",         "--version",  "u3",
                               "--verify",    "--quiet",    NULL};
  CU_ASSERT_EQUAL(wt_proc_run(push3, log, 60000, NULL), 0);
  WT_ASSERT_OK(wt_sync_client_get_version(c, 0, &v));
  CU_ASSERT_STRING_EQUAL(v.version, "u3");
  wt_weight_version_clear(&v);
  wt_sync_client_destroy(c);
  CU_ASSERT_EQUAL(wt_proc_server_stop(&srv, 10000, NULL), 0);
  wt_proc_kill_all();
  wt_test_rmtree(dir);
  free(dir);
}

/* A wt-server (real process) killed mid-round: the trainer's update ends
 * within a few seconds with an error naming that server and one of its
 * workers (rank and UCX address). */
static void test_worker_killed(void) {
  char *dir = wt_test_tmpdir();
  wt_proc_server srv;
  const char *const extra[] = {"--model", "synthetic:small", "--workers", "2",
                               NULL};
  CU_ASSERT_FATAL(wt_proc_server_start(&srv, dir, "server", extra));
  wt_client_options o = {.timeout_ms = 10000, .data_timeout_ms = 20000};
  wt_sync_client *c = NULL;
  wt_trainer *t = NULL;
  wt_source *bad = NULL;
  ucx_info ui;
  const char *targets[] = {srv.addr};
  stall *impl = calloc(1, sizeof(*impl));
  CU_ASSERT_FATAL(impl != NULL);
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, &o, &c));
  WT_ASSERT_OK(wt_sync_client_init_transfer(
      c, ucx_info_make(&ui, "tcp", NULL, 64 << 10, 10000), NULL, &t));
  size_t n = 0;
  WT_ASSERT_OK(wt_source_synthetic("small", 9, &impl->inner));
  const wt_tensor_meta *m = wt_source_metas(impl->inner, &n);
  wt_source *inner = impl->inner;
  impl->stall_at = n / 2;
  impl->kill_pid = srv.pid;
  WT_ASSERT_OK(wt_source_new(&stall_vt, impl, m, n, &bad));
  WT_ASSERT_OK(wt_sync_client_start(c));
  impl->armed = true;
  wt_status *st = update_fails(c, t, bad, 8000);
  if (st) {
    const char *msg = wt_status_message(st);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, srv.addr));
    char w0[300], w1[300];
    snprintf(w0, sizeof(w0), "%s worker 0 (127.0.0.1:", srv.addr);
    snprintf(w1, sizeof(w1), "%s worker 1 (127.0.0.1:", srv.addr);
    CU_ASSERT(strstr(msg, w0) != NULL || strstr(msg, w1) != NULL);
    if (strstr(msg, w0) == NULL && strstr(msg, w1) == NULL)
      fprintf(stderr, "\nno worker named in: %s\n", msg);
    wt_status_free(st);
  }
  srv.pid = 0; /* reaped by the source */
  wt_source_destroy(bad);
  wt_source_destroy(inner);
  free(impl);
  wt_trainer_destroy(t);
  wt_sync_client_destroy(c);
  wt_proc_kill_all();
  wt_test_rmtree(dir);
  free(dir);
}

/* wt-server --engine-option ucx.transports=LIST: the workers' default when
 * the init info names no transports. An invalid list fails init with an
 * error naming the option and the list; transports in the init info take
 * precedence over it. A setting the ucx backend does not take, a backend
 * that does not exist and one without a key each stop the server at start,
 * naming the option. */
static void test_server_transports_option(void) {
  char *dir = wt_test_tmpdir();
  wt_proc_server srv;
  static const struct {
    const char *option, *expect;
  } bad[] = {
      {"ucx.nope=1",
       "backend 'ucx' has no option 'nope' (its options: "
       "transports, max_peer_connections)"},
      {"ucx.max_peer_connections=lots",
       "option max_peer_connections: 'lots' is not a count"},
      {"nosuch.transports=tcp", "engine option 'nosuch.transports'"},
      {"transports=tcp", "not BACKEND.KEY=VALUE"},
      {"ucx.transports=", "option transports: empty"},
      {"grpc.chunk=1", "backend 'grpc' has no option 'chunk'"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    const char *const argv[] = {
        WT_SERVER_BIN,    "--listen",        "127.0.0.1:0", "--model",
        "synthetic:tiny", "--engine-option", bad[i].option, NULL};
    char log[PATH_MAX], *out = NULL;
    snprintf(log, sizeof(log), "%s/bad-%zu.log", dir, i);
    int code = wt_proc_run(argv, log, 30000, &out);
    CU_ASSERT(code == 1 || code == 2);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, bad[i].expect));
    if (out == NULL || strstr(out, bad[i].expect) == NULL)
      fprintf(stderr, "--engine-option %s: %s\n", bad[i].option,
              out ? out : "(no output)");
    free(out);
  }
  const char *const extra[] = {
      "--model",         "synthetic:small",           "--workers", "1",
      "--engine-option", "ucx.transports=no_such_tl", NULL};
  CU_ASSERT_FATAL(wt_proc_server_start(&srv, dir, "server", extra));
  wt_client_options o = {.timeout_ms = 10000, .data_timeout_ms = 20000};
  wt_sync_client *c = NULL;
  wt_trainer *t = NULL;
  wt_source *src = NULL;
  ucx_info ui;
  const char *targets[] = {srv.addr};
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, &o, &c));
  /* Empty transports in the init info: the server's option applies (the
   * trainer side uses UCX's default). */
  const Wt__V1__WeightTransferInitInfo *info =
      ucx_info_make(&ui, "tcp", NULL, 256 << 10, 0);
  ui.ucx.transports = "";
  wt_status *st = wt_sync_client_init_transfer(c, info, NULL, &t);
  CU_ASSERT_PTR_NOT_NULL(st);
  if (st) {
    const char *msg = wt_status_message(st);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "--engine-option ucx.transports"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "no_such_tl"));
    wt_status_free(st);
  }
  wt_trainer_destroy(t);
  t = NULL;
  /* wt-push takes the ucx trainer's settings from WT_UCX_* and passes them
   * as options (the library reads no environment): a bad one is refused by
   * the backend, naming it; --option given on the command line wins. */
  {
    const char *const push[] = {WT_PUSH_BIN, "--server", srv.addr, "--backend",
                                "ucx",       "--quiet",  NULL};
    const char *const push_opt[] = {
        WT_PUSH_BIN, "--server",        srv.addr,   "--backend",      "ucx",
        "--option",  "fanout=parallel", "--option", "transports=tcp", "--quiet",
        NULL};
    char log[PATH_MAX], *out = NULL;
    snprintf(log, sizeof(log), "%s/push-env.log", dir);
    setenv("WT_UCX_FANOUT", "tree", 1);
    int code = wt_proc_run(push, log, 60000, &out);
    CU_ASSERT_EQUAL(code, 1);
    CU_ASSERT_PTR_NOT_NULL(
        out && strstr(out, "init_info.options[\"ucx_fanout\"] is 'tree'"));
    free(out);
    out = NULL;
    code = wt_proc_run(push_opt, log, 60000, &out);
    unsetenv("WT_UCX_FANOUT");
    CU_ASSERT_EQUAL(code, 0);
    if (code != 0) fprintf(stderr, "%s", out ? out : "");
    free(out);
  }
  /* The init info's transports win over the server's option. */
  WT_ASSERT_OK(wt_sync_client_init_transfer(
      c, ucx_info_make(&ui, "tcp", NULL, 256 << 10, 0), NULL, &t));
  CU_ASSERT_FATAL(t != NULL);
  WT_ASSERT_OK(wt_source_synthetic("small", 3, &src));
  round_ok(c, t, src, "tls-1");
  assert_servers_hold(c, "small", 3, "tls-1");
  wt_source_destroy(src);
  wt_trainer_destroy(t);
  wt_sync_client_destroy(c);
  CU_ASSERT_EQUAL(wt_proc_server_stop(&srv, 10000, NULL), 0);
  wt_proc_kill_all();
  wt_test_rmtree(dir);
  free(dir);
}

/* ---- two "hosts": network namespaces joined by veth ---------------------- */

#define NS "wt-ucx-test"
#define NS_SETUP                                                      \
  "ip netns add " NS                                                  \
  " && ip link add wtucx0 type veth peer name wtucx1 && "             \
  "ip link set wtucx1 netns " NS                                      \
  " && "                                                              \
  "ip addr add 10.231.7.2/24 dev wtucx0 && ip link set wtucx0 up && " \
  "ip netns exec " NS                                                 \
  " ip addr add 10.231.7.1/24 dev wtucx1 && "                         \
  "ip netns exec " NS                                                 \
  " ip link set wtucx1 up && "                                        \
  "ip netns exec " NS " ip link set lo up"
#define NS_CLEANUP                                       \
  "ip link del wtucx0 >/dev/null 2>&1; ip netns del " NS \
  " >/dev/null 2>&1; true"

/* The ip binary (wt_proc_spawn does not search PATH). */
static const char *ip_bin(void) {
  return access("/usr/sbin/ip", X_OK) == 0 ? "/usr/sbin/ip" : "/sbin/ip";
}

/* Starts wt-server inside the namespace; fills s like wt_proc_server_start. */
static bool ns_server_start(wt_proc_server *s, const char *dir) {
  memset(s, 0, sizeof(*s));
  snprintf(s->log, sizeof(s->log), "%s/ns-server.log", dir);
  const char *const argv[] = {
      ip_bin(), "netns", "exec", NS, WT_SERVER_BIN, "--listen", "10.231.7.1:0",
      "--model", "synthetic:small", "--workers", "2", "--round-timeout", "2",
      /* a veth only this test's namespaces reach */
      "--insecure", "--no-auth", "--log-level",
      "debug", /* shown if the test fails */
      NULL};
  s->pid = wt_proc_spawn(argv, s->log, &s->out_fd);
  if (s->pid <= 0) return false;
  char buf[512];
  size_t len = 0;
  int64_t end = wt_mono_ms() + 30000;
  while (wt_mono_ms() < end && len < sizeof(buf) - 1) {
    ssize_t got = read(s->out_fd, buf + len, sizeof(buf) - 1 - len);
    if (got <= 0) break;
    len += (size_t)got;
    buf[len] = '\0';
    const char *at = strstr(buf, "listening on ");
    const char *nl = at ? strchr(at, '\n') : NULL;
    if (nl) {
      at += strlen("listening on ");
      snprintf(s->addr, sizeof(s->addr), "%.*s", (int)(nl - at), at);
      return true;
    }
  }
  wt_proc_dump("wt-server in " NS, s->log);
  return false;
}

/* A trainer on one "host" and a server with two workers on another: a round
 * over the veth link works; the link cut mid-round ends the update with an
 * error within the deadlines, the server keeps the previous version, and
 * once the link is back the next round works. */
static void test_two_hosts_link_cut(void) {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  if (major > 1 || minor >= 14) {
    /* Not run with this UCX: its trainer side fails to connect across the
     * veth pair ("Destination is unreachable"), with and without
     * UCX_NET_DEVICES pinned to the veth, by worker address and through
     * the listener alike; not resolved yet. */
    wt_test_skip("two hosts over veth",
                 "UCX >= 1.14 answers 'Destination is unreachable' across "
                 "this test's veth pair (same machine, two namespaces); "
                 "runs with UCX 1.13");
    return;
  }
  if (system(NS_CLEANUP) != 0 || system(NS_SETUP " >/dev/null 2>&1") != 0) {
    (void)system(NS_CLEANUP);
    wt_test_skip("two hosts over veth",
                 "cannot create a network namespace (ip netns add failed; "
                 "needs root or CAP_NET_ADMIN)");
    return;
  }
  char *dir = wt_test_tmpdir();
  wt_proc_server srv;
  wt_sync_client *c = NULL;
  wt_trainer *t = NULL;
  wt_source *good = NULL, *bad = NULL;
  ucx_info ui;
  wt_status *st = NULL;
  stall *impl = calloc(1, sizeof(*impl));
  CU_ASSERT_FATAL(impl != NULL);
  if (!ns_server_start(&srv, dir)) {
    CU_FAIL("wt-server did not serve inside the namespace");
    goto out;
  }
  const char *targets[] = {srv.addr};
  /* The link is down until the failed update returns: keepalive answers
   * within 1 s keep that short (with the default 10 s the outage grew to
   * about 8 s, and TCP's retransmission backoff on the trainer's old
   * connection could then outlast the next round's 1.5 s bucket wait). */
  wt_client_options o = {.timeout_ms = 5000,
                         .data_timeout_ms = 5000,
                         .keepalive_timeout_ms = 1000};
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, &o, &c));
  /* Worker and trainer waits end 1.5 s after the last progress. */
  WT_ASSERT_OK(wt_sync_client_init_transfer(
      c, ucx_info_make(&ui, "tcp", NULL, 64 << 10, 1500), NULL, &t));
  WT_ASSERT_OK(wt_source_synthetic("small", 5, &good));
  round_ok(c, t, good, "h1");
  assert_servers_hold(c, "small", 5, "h1");

  size_t n = 0;
  WT_ASSERT_OK(wt_source_synthetic("small", 9, &impl->inner));
  const wt_tensor_meta *m = wt_source_metas(impl->inner, &n);
  impl->stall_at = n / 2;
  impl->shell = "ip link set wtucx0 down";
  WT_ASSERT_OK(wt_source_new(&stall_vt, impl, m, n, &bad));
  WT_ASSERT_OK(wt_sync_client_start(c));
  impl->armed = true;
  st = update_fails(c, t, bad, 15000);
  if (st) {
    CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), srv.addr));
    wt_status_free(st);
  }
  CU_ASSERT_EQUAL(system("ip link set wtucx0 up"), 0);
  /* Once the control channel is back and the server aborted the orphaned
   * round (its round timeout is 2 s), a new round starts. */
  int64_t until = wt_mono_ms() + 30000;
  for (;;) {
    st = wt_sync_client_start(c);
    if (st == NULL || wt_mono_ms() > until) break;
    wt_status_free(st);
    struct timespec ts = {.tv_nsec = 200 * 1000000L};
    nanosleep(&ts, NULL);
  }
  if (st != NULL) wt_proc_dump("wt-server in " NS, srv.log);
  WT_ASSERT_OK(st);
  WT_ASSERT_OK(wt_sync_client_abort(c, "only checking"));
  assert_servers_hold(c, "small", 5, "h1");
  WT_ASSERT_OK(wt_source_synthetic_set_seed(good, 6));
  /* The trainer reconnects; the first bucket's wait covers that and the
   * workers' start (the connect deadline), later ones 1.5 s each. */
  WT_ASSERT_OK(wt_sync_client_start(c));
  st = wt_sync_client_update(c, t, good, NULL, NULL);
  if (st != NULL && file_contains(srv.log,
                                  "may still write into the staging "
                                  "buffers")) {
    /* By worker address the worker holds no connection of the trainer's
     * that it could close: a bucket that was mid-flight when the link went
     * down stays matched until UCX notices the old connection is dead, and
     * the round says so (within the data deadline) instead of letting the
     * bucket land later. A new init replaces the engine and clears it. */
    printf("\n  a bucket cut mid-flight kept the worker until a new init: %s",
           wt_status_message(st));
    wt_status_free(st);
    wt_status_free(wt_sync_client_abort(c, "stray bucket"));
    wt_trainer_destroy(t);
    t = NULL;
    WT_ASSERT_OK(wt_sync_client_init_transfer(
        c, ucx_info_make(&ui, "tcp", NULL, 64 << 10, 1500), NULL, &t));
    WT_ASSERT_OK(wt_sync_client_start(c));
    st = wt_sync_client_update(c, t, good, NULL, NULL);
  }
  if (st != NULL) wt_proc_dump("wt-server in " NS, srv.log);
  WT_ASSERT_OK(st);
  WT_ASSERT_OK(wt_sync_client_finish(c, "h2"));
  assert_servers_hold(c, "small", 6, "h2");
out:
  wt_source_destroy(bad);
  wt_source_destroy(impl->inner);
  free(impl);
  wt_source_destroy(good);
  wt_trainer_destroy(t);
  wt_sync_client_destroy(c);
  if (srv.pid > 0) kill(srv.pid, SIGTERM);
  wt_proc_kill_all();
  (void)system(NS_CLEANUP);
  wt_test_rmtree(dir);
  free(dir);
}

/* After every test, whatever ended it: no UCX setting of one test leaks
 * into the next. */
static void ucx_test_teardown(void) {
  unsetenv("UCX_NET_DEVICES");
}

/* What both halves read of an init info, from one function: the defaults,
 * and each bad field refused by name (the trainer and every worker refuse
 * the same init the same way). */
/* Where a worker's UCX may listen: the interface of --listen's host (a
 * name resolved as the control port does), all of them for a wildcard,
 * and an error (never "every interface") for an address no interface
 * holds. (A name that does not resolve is one too; not tried here: it
 * would ask DNS.) */
static void test_listen_interface(void) {
  char ifname[64];
  WT_ASSERT_OK(wt_ucx_interface_of("127.0.0.1", ifname, sizeof(ifname)));
  CU_ASSERT_STRING_EQUAL(ifname, "lo");
  WT_ASSERT_OK(wt_ucx_interface_of("127.0.0.2", ifname, sizeof(ifname)));
  CU_ASSERT_STRING_EQUAL(ifname, "lo"); /* lo holds 127.0.0.0/8 */
  WT_ASSERT_OK(wt_ucx_interface_of("0.0.0.0", ifname, sizeof(ifname)));
  CU_ASSERT_STRING_EQUAL(ifname, "");
  WT_ASSERT_OK(wt_ucx_interface_of("::", ifname, sizeof(ifname)));
  CU_ASSERT_STRING_EQUAL(ifname, "");
  WT_ASSERT_ERR(wt_ucx_interface_of("192.0.2.1", ifname, sizeof(ifname)),
                WT_FAILED_PRECONDITION,
                "listen host '192.0.2.1': no interface holds this address");
  CU_ASSERT_STRING_EQUAL(ifname, "");
  WT_ASSERT_OK(wt_ucx_interface_of("localhost", ifname, sizeof(ifname)));
  CU_ASSERT_STRING_EQUAL(ifname, "lo"); /* 127.0.0.1 and ::1: lo once */
}

static void test_init_settings(void) {
  ucx_info ui;
  wt_ucx_init_settings set;
  WT_ASSERT_OK(wt_ucx_init_settings_read(
      ucx_info_make(&ui, "tcp", NULL, 256 << 10, 0), &set));
  CU_ASSERT_EQUAL(set.buffer_bytes, 256 << 10);
  CU_ASSERT_EQUAL(set.num_buffers, 3);
  CU_ASSERT_FALSE(set.by_sockaddr);
  CU_ASSERT_EQUAL(set.connect_timeout_ms, 0);
  Wt__V1__WeightTransferInitInfo bare = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  WT_ASSERT_OK(wt_ucx_init_settings_read(&bare, &set));
  CU_ASSERT_EQUAL(set.buffer_bytes, WT_UCX_DEFAULT_BUFFER_BYTES);
  CU_ASSERT_EQUAL(set.num_buffers, WT_UCX_DEFAULT_NUM_BUFFERS);
  ucx_info_make(&ui, "tcp", "sockaddr", 256 << 10, 0);
  WT_ASSERT_OK(wt_ucx_init_settings_read(&ui.info, &set));
  CU_ASSERT_TRUE(set.by_sockaddr);
  ucx_info_make(&ui, "tcp", "carrier-pigeon", 256 << 10, 0);
  WT_ASSERT_ERR(wt_ucx_init_settings_read(&ui.info, &set), WT_INVALID_ARGUMENT,
                "init_info.options[\"ucx_connect\"] is 'carrier-pigeon'");
  ucx_info_make(&ui, "tcp", NULL, 256 << 10, 0);
  ui.bucket.value = 0;
  WT_ASSERT_ERR(wt_ucx_init_settings_read(&ui.info, &set), WT_INVALID_ARGUMENT,
                "init_info.ucx.packed_buffer_size_bytes is 0");
  ucx_info_make(&ui, "tcp", NULL, 256 << 10, 0);
  ui.nbuf.value = WT_UCX_MAX_NUM_BUFFERS + 1;
  WT_ASSERT_ERR(wt_ucx_init_settings_read(&ui.info, &set), WT_INVALID_ARGUMENT,
                "init_info.ucx.packed_num_buffers is 65; it must be 1..64");
  /* A secret that keys nothing: all zeros, or a short pattern. */
  uint8_t secret[WT_UCX_SECRET_BYTES];
  ucx_info_make(&ui, "tcp", NULL, 256 << 10, 0);
  WT_ASSERT_OK(wt_ucx_init_secret(&ui.info, secret));
  memset(ui.secret, 0, sizeof(ui.secret));
  WT_ASSERT_ERR(wt_ucx_init_secret(&ui.info, secret), WT_INVALID_ARGUMENT,
                "init_info.ucx.auth_secret: 1 distinct byte values");
  for (size_t i = 0; i < sizeof(ui.secret); i++)
    ui.secret[i] = (uint8_t)(i % 4);
  WT_ASSERT_ERR(wt_ucx_init_secret(&ui.info, secret), WT_INVALID_ARGUMENT,
                "4 distinct byte values");
}

void wt_test_suite_ucx(void) {
  CU_pSuite s = CU_add_suite_with_setup_and_teardown("ucx", NULL, NULL, NULL,
                                                     ucx_test_teardown);
  CU_add_test(s, "init settings both halves read", test_init_settings);
  CU_add_test(s, "where UCX listens: the interface of --listen",
              test_listen_interface);
  CU_add_test(s, "round over tcp, 2 servers x (2, 3) workers", test_round_tcp);
  CU_add_test(s, "memory source (zero-copy sends), sequential fan-out",
              test_memory_source_sequential);
  CU_add_test(s, "pipelined chain fan-out, tcp and shared memory", test_chain);
  CU_add_test(s, "tensors larger than the bucket: split, chain, a stranger",
              test_split_tensors);
  CU_add_test(s, "the default fan-out across two hosts",
              test_auto_fanout_two_hosts);
  CU_add_test(s, "round over shared memory, 2 servers x (2, 3) workers",
              test_round_shared_memory);
  CU_add_test(s, "inplace staging: one registered region per worker",
              test_round_inplace);
  CU_add_test(s, "trainer stalls mid-round: workers time out, next works",
              test_trainer_stalls_mid_round);
  CU_add_test(s, "receives report their length, early or late message",
              test_recv_reports_length);
  CU_add_test(s, "late start: first message waits for the connect deadline",
              test_late_start);
  CU_add_test(s, "wt-push killed mid-round (real processes)",
              test_trainer_killed);
  CU_add_test(s, "wt-server killed mid-round (real processes)",
              test_worker_killed);
  CU_add_test(
      s,
      "wt-server --engine-option ucx.transports: default, errors, precedence",
      test_server_transports_option);
  CU_add_test(s, "two hosts (netns + veth), link cut mid-round",
              test_two_hosts_link_cut);
  CU_add_test(s, "strangers who know a worker's address",
              test_strangers_by_address);
  CU_add_test(s, "strangers' endpoints to a worker are reclaimed",
              test_stranger_endpoints_reclaimed);
  CU_add_test(s, "strangers' endpoints counted mid-round",
              test_stranger_endpoints_mid_round);
  CU_add_test(s, "strangers' endpoints reclaimed between rounds",
              test_stranger_endpoints_between_rounds);
  CU_add_test(s, "a trainer behind strangers on a listener",
              test_trainer_behind_strangers);
  CU_add_test(s, "raw bytes to every UCX port (real process)",
              test_strangers_raw_bytes);
}

#else /* !WT_WITH_UCX */

/* Nothing to run: the suite says it skipped (the runner exits 77 when it
 * was the one asked for, which ctest reports as a skip). */
void wt_test_suite_ucx(void) {
  wt_test_suite_skipped("built without UCX (WT_WITH_UCX=OFF)");
}

#endif
