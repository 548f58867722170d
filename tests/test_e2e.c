/* test_e2e.c: wt end to end, with real processes on loopback.
 *
 * Each test starts wt-server on an ephemeral port (wt_proc.h), drives it with
 * wt-push and wt-ctl as a user would, and with raw calls of the RPC layer
 * where a test needs to stop between two steps of a round (before finish,
 * halfway through a stream) or to send bytes no client would. Expected bytes
 * come from the synthetic layouts: the server fills seed 0, a push fills
 * another seed, and both sides can compute every digest.
 *
 * Every server is stopped with SIGTERM and must exit 0: under ASan that also
 * says it leaked nothing. The teardown kills whatever an assertion left
 * running.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wt/checksum.h"
#include "wt/packing.h"
#include "wt/pb.h"
#include "wt/rpc.h"
#include "wt/synthetic.h"
#include "wt/tensor.h"
#include "wt/v1/wt.pb-c.h"
#include "support/fixture.h"
#include "support/wt_proc.h"
#include "wt_test.h"

#define METHOD(name) "/wt.v1.WeightTransfer/" name
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
/* Deadline of the test's own calls, and of a tool run. */
#define CALL_MS 20000
#define TOOL_MS 60000
#define STOP_MS 15000

/* The model a test expects on a server: a synthetic layout filled for one
 * seed, every tensor's bytes back to back in layout order. */
typedef struct model {
  wt_tensor_meta *metas;
  size_t n;
  uint64_t total;
  uint8_t *blob;
  uint64_t *offset; /* of tensor i in blob */
} model;

/* What a test holds that teardown must release when an assertion jumps out.
 */
static struct {
  char *tmp;
  wt_rpc_channel *channels[4];
  model models[3];
  wt_proc_server servers[2];
} g;

/* ------------------------------------------------------------------------ */
/* Fixture                                                                  */
/* ------------------------------------------------------------------------ */

static int suite_init(void) {
  g.tmp = wt_test_tmpdir();
  return g.tmp ? 0 : 1;
}

static int suite_clean(void) {
  wt_test_rmtree(g.tmp);
  free(g.tmp);
  g.tmp = NULL;
  return 0;
}

static void model_free(model *m) {
  wt_tensor_meta_array_free(m->metas, m->n);
  free(m->blob);
  free(m->offset);
  memset(m, 0, sizeof(*m));
}

static void test_setup(void) {}

static void test_teardown(void) {
  /* A server still registered here was left by a failed assertion: show what
   * it said before killing it. */
  for (size_t i = 0; i < NELEM(g.servers); i++)
    if (wt_proc_server_alive(&g.servers[i]))
      wt_proc_dump("wt-server log (left running)", g.servers[i].log);
  wt_proc_kill_all();
  for (size_t i = 0; i < NELEM(g.channels); i++) {
    wt_rpc_channel_destroy(g.channels[i]);
    g.channels[i] = NULL;
  }
  for (size_t i = 0; i < NELEM(g.models); i++) model_free(&g.models[i]);
  memset(g.servers, 0, sizeof(g.servers));
}

/* Starts server `i` with extra[] and returns it; fails the test otherwise. */
static wt_proc_server *start_server(int i, const char *tag,
                                    const char *const extra[]) {
  bool ok = wt_proc_server_start(&g.servers[i], g.tmp, tag, extra);
  CU_ASSERT_FATAL(ok);
  return &g.servers[i];
}

/* SIGTERM; the server must exit 0 within STOP_MS. */
static void stop_server(wt_proc_server *s) {
  CU_ASSERT_EQUAL(wt_proc_server_stop(s, STOP_MS, NULL), 0);
}

/* A channel to `s`, released in teardown. */
static wt_rpc_channel *channel(int i, const wt_proc_server *s) {
  CU_ASSERT_FATAL(i >= 0 && (size_t)i < NELEM(g.channels));
  wt_rpc_channel_options o = {.default_deadline_ms = CALL_MS};
  WT_ASSERT_OK(wt_rpc_channel_new(s->addr, &o, &g.channels[i]));
  return g.channels[i];
}

/* Layout `name` filled for `seed` into g.models[i]. */
static model *expect_model(int i, const char *name, uint64_t seed) {
  model *m = &g.models[i];
  model_free(m);
  WT_ASSERT_OK(wt_synthetic_layout(name, &m->metas, &m->n));
  m->offset = calloc(m->n ? m->n : 1, sizeof(*m->offset));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m->offset);
  for (size_t t = 0; t < m->n; t++) {
    m->offset[t] = m->total;
    m->total += m->metas[t].nbytes;
  }
  m->blob = malloc(m->total ? m->total : 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m->blob);
  for (size_t t = 0; t < m->n; t++)
    wt_synthetic_fill(&m->metas[t], seed, 0, m->blob + m->offset[t],
                      m->metas[t].nbytes);
  return m;
}

/* Runs a tool with a timeout; returns its exit code (-1: signal or timeout)
 * and its output in *out (caller frees). Prints the output when the code is
 * not `want`, so a failure says why. */
static int run_tool(const char *tag, const char *const argv[], int want,
                    char **out) {
  char log[PATH_MAX];
  snprintf(log, sizeof(log), "%s/%s.log", g.tmp, tag);
  char *text = NULL;
  int code = wt_proc_run(argv, log, TOOL_MS, &text);
  if (code != want) {
    fprintf(stderr, "\n  %s exited with %d (want %d)\n", argv[0], code, want);
    wt_proc_dump(tag, log);
    for (size_t i = 0; i < NELEM(g.servers); i++)
      wt_proc_server_alive(&g.servers[i]);
  }
  if (out)
    *out = text;
  else
    free(text);
  return code;
}

/* Asserts that `text` contains `needle`, printing both when not. */
#define ASSERT_CONTAINS(text, needle)                                  \
  do {                                                                 \
    const char *t_ = (text);                                           \
    bool ok_ = t_ != NULL && strstr(t_, (needle)) != NULL;             \
    if (!ok_)                                                          \
      fprintf(stderr, "\n  %s:%d: output lacks '%s':\n%s\n", __FILE__, \
              __LINE__, (needle), t_ ? t_ : "(none)");                 \
    CU_ASSERT(ok_);                                                    \
  } while (0)

/* ------------------------------------------------------------------------ */
/* Raw calls                                                                */
/* ------------------------------------------------------------------------ */

/* The server's GetWeightVersion and ServerInfo.weight_version. */
static void expect_version(wt_rpc_channel *ch, const char *version,
                           uint64_t sequence) {
  wtt_assert_version(ch, version, sequence);
  Wt__V1__ServerInfo *info = wtt_info(ch);
  CU_ASSERT_STRING_EQUAL(info->weight_version, version);
  wt_pb_free(&info->base);
}

/* Asserts that the server's committed bytes are `m`'s: one SHA-256 per
 * parameter (per worker when `workers` > 1), in model order. */
static void expect_checksums(wt_rpc_channel *ch, const model *m,
                             size_t workers) {
  Wt__V1__ChecksumWeightsRequest req = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  req.all_workers = workers > 1;
  Wt__V1__ChecksumWeightsResponse *resp = NULL;
  WT_ASSERT_OK(wtt_call(ch, "ChecksumWeights", &req.base,
                        &wt__v1__checksum_weights_response__descriptor,
                        (ProtobufCMessage **)&resp));
  CU_ASSERT_EQUAL(resp->algorithm,
                  WT__V1__CHECKSUM_ALGORITHM__CHECKSUM_ALGORITHM_SHA256);
  CU_ASSERT_EQUAL(resp->n_checksums, m->n * workers);
  size_t bad = 0, seen = 0;
  for (size_t i = 0; i < resp->n_checksums; i++) {
    const Wt__V1__ParameterChecksum *c = resp->checksums[i];
    size_t t = 0;
    while (t < m->n && strcmp(m->metas[t].name, c->name) != 0) t++;
    if (t == m->n) {
      fprintf(stderr, "\n  checksum of unknown parameter '%s'\n", c->name);
      bad++;
      continue;
    }
    char want[WT_DIGEST_HEX_MAX];
    WT_ASSERT_OK(wt_digest_hex(WT_HASH_SHA256, m->blob + m->offset[t],
                               m->metas[t].nbytes, want));
    if (strcmp(want, c->digest) != 0) {
      if (bad < 3)
        fprintf(stderr, "\n  '%s' on worker %u: digest %s, want %s\n", c->name,
                c->worker, c->digest, want);
      bad++;
    }
    seen |= (size_t)1 << (c->worker % 64);
  }
  CU_ASSERT_EQUAL(bad, 0);
  /* Every worker answered. */
  CU_ASSERT_EQUAL(seen, ((size_t)1 << workers) - 1);
  wt_pb_free((ProtobufCMessage *)resp);
}

/* Streams `m` through PushWeights in round `round_id`, with the plan for
 * `bucket` bytes and chunks of `chunk` bytes. With `cut_after` < m->total
 * the stream is cancelled once that many bytes were written, as when the
 * client dies; otherwise it is half-closed and the server's answer checked
 * against the model. */
static wt_status *push_model(wt_rpc_channel *ch, uint64_t round_id,
                             const model *m, uint64_t bucket, uint64_t chunk,
                             uint64_t cut_after) {
  wt_status *st = NULL;
  wt_pack_plan *plan = NULL;
  wt_rpc_client_stream *s = NULL;
  Wt__V1__PushWeightsResponse *resp = NULL;
  char **dtypes = calloc(m->n, sizeof(*dtypes));
  Wt__V1__Shape *shapes = calloc(m->n, sizeof(*shapes));
  Wt__V1__Shape **shape_ptrs = calloc(m->n, sizeof(*shape_ptrs));
  char **names = calloc(m->n, sizeof(*names));
  if (!dtypes || !shapes || !shape_ptrs || !names)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t t = 0; t < m->n; t++) {
    names[t] = m->metas[t].name;
    dtypes[t] = (char *)wt_dtype_torch_name(m->metas[t].dtype);
    wt__v1__shape__init(&shapes[t]);
    shapes[t].n_dims = (size_t)m->metas[t].ndim;
    shapes[t].dims = (int64_t *)m->metas[t].shape;
    shape_ptrs[t] = &shapes[t];
  }
  Wt__V1__GrpcUpdateInfo gu = WT__V1__GRPC_UPDATE_INFO__INIT;
  gu.transfer_id = "e2e";
  Wt__V1__WeightTransferUpdateInfo ui =
      WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__INIT;
  ui.n_names = ui.n_dtype_names = ui.n_shapes = m->n;
  ui.names = names;
  ui.dtype_names = dtypes;
  ui.shapes = shape_ptrs;
  ui.packed = true;
  ui.backend_update_case =
      WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__BACKEND_UPDATE_GRPC;
  ui.grpc = &gu;
  Wt__V1__PushWeightsHeader h = WT__V1__PUSH_WEIGHTS_HEADER__INIT;
  h.update_info = &ui;
  h.round_id = round_id;
  h.packed_buffer_size_bytes = bucket;
  Wt__V1__PushWeightsChunk msg = WT__V1__PUSH_WEIGHTS_CHUNK__INIT;
  msg.payload_case = WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_HEADER;
  msg.header = &h;

  WT_CHECK(wt_pack_plan_from_metas(m->metas, m->n, bucket, &plan));
  WT_CHECK(wt_rpc_client_stream_open(ch, METHOD("PushWeights"), 0, &s));
  WT_CHECK(wt_rpc_client_stream_write(s, &msg.base));

  Wt__V1__BucketChunk bc = WT__V1__BUCKET_CHUNK__INIT;
  msg.payload_case = WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_CHUNK;
  msg.chunk = &bc;
  uint64_t sent = 0, bucket_start = 0;
  for (size_t b = 0; b < plan->nbuckets && sent < cut_after; b++) {
    const wt_bucket *bk = &plan->buckets[b];
    for (uint64_t off = 0; off < bk->nbytes && sent < cut_after; off += chunk) {
      uint64_t len = bk->nbytes - off < chunk ? bk->nbytes - off : chunk;
      bc.bucket = (uint32_t)b;
      bc.offset = off;
      bc.data.data = m->blob + bucket_start + off;
      bc.data.len = (size_t)len;
      WT_CHECK(wt_rpc_client_stream_write(s, &msg.base));
      sent += len;
    }
    bucket_start += bk->nbytes;
  }
  if (cut_after < m->total) {
    /* destroy cancels the call; first let the server take the stream (a
     * call cancelled before the server accepted it never reaches its
     * handler, and then no round can fail for it). */
    usleep(100000);
    goto out;
  }
  WT_CHECK(
      wt_rpc_client_stream_finish(s, &wt__v1__push_weights_response__descriptor,
                                  (ProtobufCMessage **)&resp));
  if (resp->tensors_received != m->n || resp->bytes_received != m->total)
    WT_FAIL(WT_INTERNAL,
            "PushWeights answered %llu tensors, %llu bytes; sent "
            "%zu, %llu",
            (unsigned long long)resp->tensors_received,
            (unsigned long long)resp->bytes_received, m->n,
            (unsigned long long)m->total);
out:
  wt_pb_free((ProtobufCMessage *)resp);
  wt_rpc_client_stream_destroy(s);
  wt_pack_plan_free(plan);
  free(names);
  free(dtypes);
  free(shapes);
  free(shape_ptrs);
  return st;
}

/* Calls StartWeightUpdate until it succeeds (a vanished trainer's round ends
 * by the server's round timeout), up to timeout_ms. */
static wt_status *start_round_eventually(wt_rpc_channel *ch, int64_t timeout_ms,
                                         uint64_t *round_id) {
  int64_t end = wt_mono_ms() + timeout_ms;
  for (;;) {
    wt_status *st = wtt_start(ch, round_id);
    if (st == NULL || wt_status_code(st) != WT_FAILED_PRECONDITION ||
        wt_mono_ms() >= end)
      return st;
    wt_status_free(st);
    usleep(100000);
  }
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

/* The user's main path: wt-push --verify, then wt-ctl sees the version, the
 * digests and the parameters. */
static void test_push_verify_and_ctl(void) {
  const char *const sargs[] = {"--model", "synthetic:small", NULL};
  wt_proc_server *s = start_server(0, "push-verify-server", sargs);
  char *out = NULL;

  const char *const before[] = {WT_CTL_BIN, "--server", s->addr, "version",
                                NULL};
  CU_ASSERT_EQUAL(run_tool("ctl-version-before", before, 0, NULL), 0);

  const char *const push[] = {WT_PUSH_BIN, "--server", s->addr, "--synthetic",
                              "small",     "--seed",   "1",     "--version",
                              "e2e-v1",    "--verify", NULL};
  CU_ASSERT_EQUAL(run_tool("push-verify", push, 0, &out), 0);
  ASSERT_CONTAINS(out, "e2e-v1");
  free(out);

  CU_ASSERT_EQUAL(run_tool("ctl-version", before, 0, &out), 0);
  ASSERT_CONTAINS(out, "e2e-v1");
  free(out);

  /* The bytes are the seed-1 fill, as the server digests them... */
  model *m = expect_model(0, "small", 1);
  wt_rpc_channel *ch = channel(0, s);
  expect_checksums(ch, m, 1);
  expect_version(ch, "e2e-v1", 1);

  /* ...and as wt-ctl shows them. */
  char want[WT_DIGEST_HEX_MAX];
  WT_ASSERT_OK(
      wt_digest_hex(WT_HASH_SHA256, m->blob, m->metas[0].nbytes, want));
  const char *const sum[] = {WT_CTL_BIN, "--server",       s->addr,
                             "checksum", m->metas[0].name, NULL};
  CU_ASSERT_EQUAL(run_tool("ctl-checksum", sum, 0, &out), 0);
  ASSERT_CONTAINS(out, want);
  free(out);

  const char *const params[] = {WT_CTL_BIN, "--server", s->addr, "params",
                                NULL};
  CU_ASSERT_EQUAL(run_tool("ctl-params", params, 0, &out), 0);
  ASSERT_CONTAINS(out, m->metas[m->n - 1].name);
  free(out);

  const char *const info[] = {WT_CTL_BIN, "--server", s->addr, "info", NULL};
  CU_ASSERT_EQUAL(run_tool("ctl-info", info, 0, &out), 0);
  ASSERT_CONTAINS(out, "e2e-v1");
  free(out);

  stop_server(s);
}

/* A round driven call by call: the pushed bytes and the version show only
 * once FinishWeightUpdate returned, on both workers, and a watcher sees the
 * commit. */
static void test_version_visible_after_finish(void) {
  const char *const sargs[] = {"--model", "synthetic:small", "--workers", "2",
                               NULL};
  wt_proc_server *s = start_server(0, "finish-server", sargs);
  wt_rpc_channel *ch = channel(0, s);
  model *initial = expect_model(0, "small", 0);
  model *next = expect_model(1, "small", 5);
  uint64_t round_id = 0;

  expect_version(ch, "", 0);
  expect_checksums(ch, initial, 2);
  WT_ASSERT_ERR(wtt_start(ch, &round_id), WT_FAILED_PRECONDITION, "init");

  WT_ASSERT_OK(wtt_init_grpc(ch, 64 * 1024, 2));
  WT_ASSERT_OK(wtt_start(ch, &round_id));
  CU_ASSERT(round_id >= 1);
  WT_ASSERT_OK(
      push_model(ch, round_id, next, 1024 * 1024, 64 * 1024, UINT64_MAX));

  /* Every byte landed, nothing is visible yet. */
  expect_version(ch, "", 0);
  expect_checksums(ch, initial, 2);

  wt_rpc_server_stream *watch = wtt_watch_open(ch);
  usleep(300000); /* let the server register the watcher */

  WT_ASSERT_OK(wtt_finish(ch, "e2e-raw-1", round_id));
  expect_version(ch, "e2e-raw-1", 1);
  expect_checksums(ch, next, 2);

  /* The watcher may first get the version current when it subscribed. */
  bool seen = false;
  for (int i = 0; i < 4 && !seen; i++) {
    Wt__V1__WeightVersion *v = NULL;
    bool done = false;
    wt_status *st =
        wt_rpc_server_stream_read(watch, &wt__v1__weight_version__descriptor,
                                  (ProtobufCMessage **)&v, &done);
    if (st != NULL) {
      fprintf(stderr, "\n  watch: %s\n", wt_status_message(st));
      wt_status_free(st);
      break;
    }
    if (done) break;
    seen = strcmp(v->version, "e2e-raw-1") == 0 && v->sequence == 1;
    wt_pb_free((ProtobufCMessage *)v);
  }
  CU_ASSERT(seen);
  wt_rpc_server_stream_destroy(watch);

  wtt_assert_serving(ch, 2);

  stop_server(s);
}

/* Three host workers, each holding the full model, all verified. */
static void test_many_workers(void) {
  const char *const sargs[] = {"--model", "synthetic:small", "--workers", "3",
                               NULL};
  wt_proc_server *s = start_server(0, "workers-server", sargs);
  const char *const push[] = {WT_PUSH_BIN, "--server", s->addr, "--synthetic",
                              "small",     "--seed",   "2",     "--version",
                              "e2e-w3",    "--verify", NULL};
  char *out = NULL;
  CU_ASSERT_EQUAL(run_tool("push-workers", push, 0, &out), 0);
  ASSERT_CONTAINS(out, "e2e-w3");
  free(out);

  wt_rpc_channel *ch = channel(0, s);
  expect_version(ch, "e2e-w3", 1);
  expect_checksums(ch, expect_model(0, "small", 2), 3);
  stop_server(s);
}

/* One wt-push fanned out to two servers (1 and 2 workers). */
static void test_two_servers(void) {
  const char *const a_args[] = {"--model", "synthetic:small", NULL};
  const char *const b_args[] = {"--model", "synthetic:small", "--workers", "2",
                                NULL};
  wt_proc_server *a = start_server(0, "fan-server-a", a_args);
  wt_proc_server *b = start_server(1, "fan-server-b", b_args);
  const char *const push[] = {WT_PUSH_BIN, "--server",    a->addr,   "--server",
                              b->addr,     "--synthetic", "small",   "--seed",
                              "3",         "--version",   "e2e-fan", "--verify",
                              NULL};
  char *out = NULL;
  CU_ASSERT_EQUAL(run_tool("push-fan", push, 0, &out), 0);
  ASSERT_CONTAINS(out, "e2e-fan");
  free(out);

  const model *m = expect_model(0, "small", 3);
  wt_proc_server *both[] = {a, b};
  for (int i = 0; i < 2; i++) {
    const char *const ver[] = {WT_CTL_BIN, "--server", both[i]->addr, "version",
                               NULL};
    CU_ASSERT_EQUAL(
        run_tool(i ? "fan-version-b" : "fan-version-a", ver, 0, &out), 0);
    ASSERT_CONTAINS(out, "e2e-fan");
    free(out);
    wt_rpc_channel *ch = channel(i, both[i]);
    expect_version(ch, "e2e-fan", 1);
    expect_checksums(ch, m, (size_t)i + 1);
  }
  stop_server(a);
  stop_server(b);
}

/* A PushWeights stream cancelled halfway: the round fails at once (well
 * before the round timeout, 60 s), the committed version and bytes
 * stay, the server keeps serving, and the next round commits. */
static void test_stream_cut_keeps_previous(void) {
  const char *const sargs[] = {"--model", "synthetic:small", "--staging",
                               "shadow", NULL};
  wt_proc_server *s = start_server(0, "cut-server", sargs);
  wt_rpc_channel *ch = channel(0, s);
  model *v1 = expect_model(0, "small", 11);
  model *v2 = expect_model(1, "small", 12);
  uint64_t round_id = 0;
  const uint64_t bucket = 512 * 1024, chunk = 32 * 1024;

  WT_ASSERT_OK(wtt_init_grpc(ch, chunk, 1));
  WT_ASSERT_OK(wtt_start(ch, &round_id));
  WT_ASSERT_OK(push_model(ch, round_id, v1, bucket, chunk, UINT64_MAX));
  WT_ASSERT_OK(wtt_finish(ch, "cut-v1", round_id));

  WT_ASSERT_OK(wtt_start(ch, &round_id));
  WT_ASSERT_OK(push_model(ch, round_id, v2, bucket, chunk, v2->total / 2));
  /* At once, not at the round timeout (60 s, the default): 10 s is a bound
   * no load reaches and far below it. */
  int64_t ms = wtt_wait_left_updating(ch, 10000);
  CU_ASSERT(ms >= 0 && ms < 10000);

  expect_version(ch, "cut-v1", 1);
  expect_checksums(ch, v1, 1);
  WT_ASSERT_ERR(wtt_finish(ch, "cut-v2", round_id), WT_FAILED_PRECONDITION,
                "read: the client (ipv4:127.0.0.1:");

  WT_ASSERT_OK(wtt_start(ch, &round_id));
  WT_ASSERT_OK(push_model(ch, round_id, v2, bucket, chunk, UINT64_MAX));
  expect_checksums(ch, v1, 1);
  WT_ASSERT_OK(wtt_finish(ch, "cut-v2", round_id));
  expect_version(ch, "cut-v2", 2);
  expect_checksums(ch, v2, 1);
  stop_server(s);
}

/* The model and chunk size that make a wt-push last long enough to be
 * interrupted after its first progress output. */
#define SLOW_MODEL "llama-256m"
#define SLOW_CHUNK "65536"

/* Starts wt-push of SLOW_MODEL against `s` and waits for its first progress
 * output; returns its pid. */
static pid_t start_slow_push(const wt_proc_server *s, const char *tag,
                             const char *seed, const char *version) {
  char log[PATH_MAX];
  snprintf(log, sizeof(log), "%s/%s.log", g.tmp, tag);
  const char *const push[] = {
      WT_PUSH_BIN, "--server",  s->addr, "--synthetic",  SLOW_MODEL, "--seed",
      seed,        "--version", version, "--chunk-size", SLOW_CHUNK, NULL};
  pid_t pid = wt_proc_spawn(push, log, NULL);
  CU_ASSERT_FATAL(pid > 0);
  /* Off a terminal wt-push prints a "progress:" line at every tenth of the
   * bytes: the first one says the stream is well under way. */
  bool started = wt_proc_wait_for_text(log, "progress:", pid, TOOL_MS);
  if (!started) wt_proc_dump(tag, log);
  CU_ASSERT_FATAL(started);
  return pid;
}

/* wt-push SIGKILLed mid-stream: previous version and bytes intact (shadow
 * staging), the server answers, the abandoned round ends by the round
 * timeout, and the next push succeeds. */
static void test_push_killed_midstream(void) {
  const char *const sargs[] = {"--model", "synthetic:" SLOW_MODEL, "--staging",
                               "shadow",  "--round-timeout",       "1",
                               NULL};
  wt_proc_server *s = start_server(0, "kill-server", sargs);
  wt_rpc_channel *ch = channel(0, s);
  model *v1 = expect_model(0, SLOW_MODEL, 21);
  uint64_t round_id = 0;
  const uint64_t bucket = 64 * 1024 * 1024, chunk = 1024 * 1024;

  WT_ASSERT_OK(wtt_init_grpc(ch, chunk, 1));
  WT_ASSERT_OK(wtt_start(ch, &round_id));
  WT_ASSERT_OK(push_model(ch, round_id, v1, bucket, chunk, UINT64_MAX));
  WT_ASSERT_OK(wtt_finish(ch, "kill-v1", round_id));

  pid_t pid = start_slow_push(s, "push-killed", "22", "kill-v2");
  kill(pid, SIGKILL);
  int status = 0;
  CU_ASSERT(wt_proc_wait(pid, 10000, &status));

  expect_version(ch, "kill-v1", 1);
  expect_checksums(ch, v1, 1);

  /* The killed push's round is open until the 1 s round timeout. */
  int64_t t0 = wt_mono_ms();
  WT_ASSERT_OK(start_round_eventually(ch, 10000, &round_id));
  CU_ASSERT(wt_mono_ms() - t0 < 8000);
  bool aborted = false;
  WT_ASSERT_OK(wtt_abort(ch, round_id, &aborted));
  CU_ASSERT(aborted);
  expect_version(ch, "kill-v1", 1);

  const char *const again[] = {
      WT_PUSH_BIN, "--server",      s->addr, "--synthetic",
      SLOW_MODEL,  "--seed",        "23",    "--version",
      "kill-v3",   "--verify=xxh3", NULL};
  char *out = NULL;
  /* The fast hash: the server digests 250 MiB, under ASan too. */
  CU_ASSERT_EQUAL(run_tool("push-after-kill", again, 0, &out), 0);
  ASSERT_CONTAINS(out, "kill-v3");
  free(out);
  expect_version(ch, "kill-v3", 2);
  stop_server(s);
}

/* SIGTERM while a push streams: the server aborts the round and exits 0
 * promptly; the push fails (exit 1) rather than hanging. */
static void test_sigterm_during_push(void) {
  const char *const sargs[] = {"--model", "synthetic:" SLOW_MODEL, NULL};
  wt_proc_server *s = start_server(0, "term-server", sargs);
  pid_t pid = start_slow_push(s, "push-term", "31", "term-v1");

  int64_t took = 0;
  CU_ASSERT_EQUAL(wt_proc_server_stop(s, STOP_MS, &took), 0);
  /* Prompt: the round is aborted, not waited for (loaded CI machines get
   * some slack). */
  CU_ASSERT(took < 8000);

  int status = 0;
  bool exited = wt_proc_wait(pid, TOOL_MS, &status);
  CU_ASSERT(exited);
  if (exited) {
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  }
}

/* Bytes that are no protobuf message of any type: field 1, length-delimited,
 * claiming 127 bytes where 7 follow. */
static const uint8_t garbage[] = {0x0a, 0x7f, 'g', 'a', 'r',
                                  'b',  'a',  'g', 'e'};

/* Sends `garbage` as the only message of a call to `method` (what the raw
 * bytes of a unary call look like on the wire too) and returns the status. */
static wt_status *send_garbage(wt_rpc_channel *ch, const char *method) {
  wt_status *st = NULL;
  wt_rpc_client_stream *s = NULL;
  grpc_slice slice =
      grpc_slice_from_copied_buffer((const char *)garbage, sizeof(garbage));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
  grpc_slice_unref(slice);
  st = wt_rpc_client_stream_open(ch, method, 0, &s);
  if (st == NULL) {
    st = wt_rpc_client_stream_write_raw(s, bb);
    bb = NULL;
  }
  if (st == NULL)
    st = wt_rpc_client_stream_finish(
        s, &wt__v1__get_world_size_response__descriptor, NULL);
  if (bb) grpc_byte_buffer_destroy(bb);
  wt_rpc_client_stream_destroy(s);
  return st;
}

/* Garbage to each of the 12 methods: INVALID_ARGUMENT naming the request
 * type; an unknown method: UNIMPLEMENTED; the server keeps serving, with its
 * round intact. */
static void test_garbage_to_every_method(void) {
  static const struct {
    const char *method, *type;
  } methods[] = {
      {METHOD("GetServerInfo"), "wt.v1.GetServerInfoRequest"},
      {METHOD("GetWorldSize"), "wt.v1.GetWorldSizeRequest"},
      {METHOD("ListParameters"), "wt.v1.ListParametersRequest"},
      {METHOD("InitWeightTransferEngine"),
       "wt.v1.InitWeightTransferEngineRequest"},
      {METHOD("StartWeightUpdate"), "wt.v1.StartWeightUpdateRequest"},
      {METHOD("UpdateWeights"), "wt.v1.UpdateWeightsRequest"},
      {METHOD("PushWeights"), "wt.v1.PushWeightsChunk"},
      {METHOD("FinishWeightUpdate"), "wt.v1.FinishWeightUpdateRequest"},
      {METHOD("AbortWeightUpdate"), "wt.v1.AbortWeightUpdateRequest"},
      {METHOD("GetWeightVersion"), "wt.v1.GetWeightVersionRequest"},
      {METHOD("WatchWeightVersion"), "wt.v1.WatchWeightVersionRequest"},
      {METHOD("ChecksumWeights"), "wt.v1.ChecksumWeightsRequest"},
  };
  const char *const sargs[] = {"--model", "synthetic:tiny", NULL};
  wt_proc_server *s = start_server(0, "garbage-server", sargs);
  wt_rpc_channel *ch = channel(0, s);
  uint64_t round_id = 0;
  /* A round is open, so that PushWeights gets as far as reading. */
  WT_ASSERT_OK(wtt_init_grpc(ch, 1024, 1));
  WT_ASSERT_OK(wtt_start(ch, &round_id));

  for (size_t i = 0; i < NELEM(methods); i++) {
    WT_ASSERT_ERR(send_garbage(ch, methods[i].method), WT_INVALID_ARGUMENT,
                  methods[i].type);
  }
  WT_ASSERT_ERR(send_garbage(ch, METHOD("NoSuchCall")), WT_UNIMPLEMENTED,
                "NoSuchCall");

  expect_version(ch, "", 0);
  expect_checksums(ch, expect_model(0, "tiny", 0), 1);
  model *m = expect_model(1, "tiny", 41);
  WT_ASSERT_OK(push_model(ch, round_id, m, 4096, 1024, UINT64_MAX));
  WT_ASSERT_OK(wtt_finish(ch, "after-garbage", round_id));
  expect_version(ch, "after-garbage", 1);
  expect_checksums(ch, m, 1);
  stop_server(s);
}

/* Numbers out of range are usage errors naming the option, not silently
 * replaced by a default (a timeout of "inf" or 1e300 used to become the
 * default deadline, a seed past 2^64 used to become 2^64 - 1). */
static void test_tools_refuse_out_of_range_numbers(void) {
  static const struct {
    const char *tag, *bin, *opt, *value, *needle;
  } cases[] = {
      {"push-timeout-inf", WT_PUSH_BIN, "--timeout", "inf", "--timeout"},
      {"push-timeout-huge", WT_PUSH_BIN, "--timeout", "1e300", "--timeout"},
      {"push-timeout-tiny", WT_PUSH_BIN, "--timeout", "0.00001", "--timeout"},
      {"push-seed-big", WT_PUSH_BIN, "--seed", "18446744073709551616",
       "--seed"},
      {"push-chunk-big", WT_PUSH_BIN, "--chunk-size", "18446744073709551616",
       "--chunk-size"},
      {"ctl-timeout-inf", WT_CTL_BIN, "--timeout", "inf", "--timeout"},
      {"ctl-timeout-huge", WT_CTL_BIN, "--timeout", "1e300", "--timeout"},
  };
  for (size_t i = 0; i < NELEM(cases); i++) {
    /* Port 1: should a bad number get through, nothing is pushed. */
    const char *const argv[] = {cases[i].bin, "--server",     "127.0.0.1:1",
                                cases[i].opt, cases[i].value, "version",
                                NULL};
    /* wt-push takes no command: drop "version" for it. */
    const char *const push_argv[] = {cases[i].bin,   "--server",
                                     "127.0.0.1:1",  cases[i].opt,
                                     cases[i].value, NULL};
    bool is_push = strcmp(cases[i].bin, WT_PUSH_BIN) == 0;
    char *out = NULL;
    CU_ASSERT_EQUAL(run_tool(cases[i].tag, is_push ? push_argv : argv, 2, &out),
                    2);
    ASSERT_CONTAINS(out, cases[i].needle);
    ASSERT_CONTAINS(out, cases[i].value);
    free(out);
  }
  const char *const watch[] = {WT_CTL_BIN, "--server", "127.0.0.1:1",
                               "watch",    "--count",  "18446744073709551616",
                               NULL};
  char *out = NULL;
  CU_ASSERT_EQUAL(run_tool("ctl-count-big", watch, 2, &out), 2);
  ASSERT_CONTAINS(out, "watch --count: '18446744073709551616'");
  free(out);
}

/* Backend options from the command line: wt-push hands --bucket-size,
 * --chunk-size and --option KEY=VALUE to the backend, which builds its init
 * info from them; one it does not take is a usage error (exit 2) naming
 * the backend and the option, before anything is sent. */
static void test_push_backend_options(void) {
  const char *const sargs[] = {"--model", "synthetic:small", NULL};
  wt_proc_server *s = start_server(0, "options-server", sargs);
  const char *const push[] = {WT_PUSH_BIN,
                              "--server",
                              s->addr,
                              "--synthetic",
                              "small",
                              "--seed",
                              "4",
                              "--version",
                              "opt-v1",
                              "--option",
                              "bucket_size=256K",
                              "--chunk-size",
                              "16K",
                              "--verify",
                              NULL};
  char *out = NULL;
  CU_ASSERT_EQUAL(run_tool("push-options", push, 0, &out), 0);
  ASSERT_CONTAINS(out, "opt-v1");
  free(out);
  wt_rpc_channel *ch = channel(0, s);
  expect_version(ch, "opt-v1", 1);
  expect_checksums(ch, expect_model(0, "small", 4), 1);
  static const struct {
    const char *tag, *backend, *opt, *needle;
  } bad[] = {
#ifdef WT_WITH_UCX
      {"push-ucx-chunk", "ucx", "chunk_size=1M",
       "backend 'ucx' has no option 'chunk_size'"},
#endif
      {"push-grpc-unknown", "grpc", "fanout=2",
       "backend 'grpc' has no option 'fanout'"},
      {"push-grpc-size", "grpc", "bucket_size=lots", "bucket_size"},
      {"push-no-equals", "grpc", "bucket_size", "is not KEY=VALUE"},
  };
  for (size_t i = 0; i < NELEM(bad); i++) {
    const char *const argv[] = {
        WT_PUSH_BIN, "--server",     s->addr,    "--synthetic", "small",
        "--backend", bad[i].backend, "--option", bad[i].opt,    NULL};
    CU_ASSERT_EQUAL(run_tool(bad[i].tag, argv, 2, &out), 2);
    ASSERT_CONTAINS(out, bad[i].needle);
    free(out);
  }
  /* Nothing of those reached the server. */
  expect_version(ch, "opt-v1", 1);
  stop_server(s);
}

/* wt-server's own options: shared memory serves a round like host memory;
 * a device this machine lacks ends the start (exit 1) naming it; limits out
 * of range are usage errors (exit 2) naming the option. */
static void test_server_options(void) {
  const char *const sargs[] = {"--model",
                               "synthetic:small",
                               "--memory",
                               "shared",
                               "--max-round-calls",
                               "2",
                               "--max-reader-calls",
                               "2",
                               "--max-watchers",
                               "4",
                               "--header-timeout",
                               "2",
                               NULL};
  wt_proc_server *s = start_server(0, "memory-server", sargs);
  const char *const push[] = {WT_PUSH_BIN, "--server", s->addr, "--synthetic",
                              "small",     "--seed",   "6",     "--version",
                              "shared-v1", "--verify", NULL};
  char *out = NULL;
  CU_ASSERT_EQUAL(run_tool("push-shared", push, 0, &out), 0);
  free(out);
  const char *const info[] = {WT_CTL_BIN, "--server", s->addr, "info", NULL};
  CU_ASSERT_EQUAL(run_tool("ctl-info-shared", info, 0, &out), 0);
  ASSERT_CONTAINS(out, "shared");
  ASSERT_CONTAINS(out, "shared-v1");
  free(out);
  stop_server(s);

  /* No GPU answers here (on a machine with one, the gpu suite covers it). */
  const char *const gpu[] = {
      WT_SERVER_BIN,    "--listen", "127.0.0.1:0", "--model",
      "synthetic:tiny", "--device", "cuda:0",      NULL};
  char log[PATH_MAX];
  snprintf(log, sizeof(log), "%s/server-gpu.log", g.tmp);
  pid_t pid = wt_proc_spawn(gpu, log, NULL);
  CU_ASSERT_FATAL(pid > 0);
  int status = 0;
  bool exited = wt_proc_wait(pid, TOOL_MS, &status);
  if (!exited) {
    kill(pid, SIGTERM);
    wt_proc_wait(pid, STOP_MS, &status);
    wt_test_skip("wt-server --device cuda:0 fails without a GPU",
                 "a CUDA device answers here");
  } else {
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    char *text = wt_proc_read_file(log);
    ASSERT_CONTAINS(text, "device 'cuda:0'");
    ASSERT_CONTAINS(text, "CUDA");
    free(text);
  }

  static const struct {
    const char *tag, *opt, *value, *needle;
  } bad[] = {
      {"server-round-calls", "--max-round-calls", "0", "--max-round-calls '0'"},
      {"server-reader-calls", "--max-reader-calls", "5000",
       "--max-reader-calls '5000' is not a number from 1 to 4096"},
      {"server-watchers", "--max-watchers", "-1", "--max-watchers '-1'"},
      {"server-header-timeout", "--header-timeout", "0",
       "--header-timeout '0'"},
      {"server-memory", "--memory", "device",
       "device memory comes with --device"},
      {"server-memory-name", "--memory", "gpu", "--memory 'gpu' is not host"},
      {"server-device-name", "--device", "gpu0", "device 'gpu0'"},
  };
  for (size_t i = 0; i < NELEM(bad); i++) {
    const char *const argv[] = {WT_SERVER_BIN, "--listen",   "127.0.0.1:0",
                                bad[i].opt,    bad[i].value, NULL};
    CU_ASSERT_EQUAL(run_tool(bad[i].tag, argv, 2, &out), 2);
    ASSERT_CONTAINS(out, bad[i].needle);
    free(out);
  }
}

void wt_test_suite_e2e(void) {
  CU_pSuite s = CU_add_suite_with_setup_and_teardown(
      "e2e", suite_init, suite_clean, test_setup, test_teardown);
  CU_add_test(s, "push --verify, then wt-ctl", test_push_verify_and_ctl);
  CU_add_test(s, "version visible only after finish",
              test_version_visible_after_finish);
  CU_add_test(s, "three workers", test_many_workers);
  CU_add_test(s, "two servers from one push", test_two_servers);
  CU_add_test(s, "stream cut halfway keeps the previous version",
              test_stream_cut_keeps_previous);
  CU_add_test(s, "wt-push killed mid-stream", test_push_killed_midstream);
  CU_add_test(s, "SIGTERM during a push", test_sigterm_during_push);
  CU_add_test(s, "garbage to every method", test_garbage_to_every_method);
  CU_add_test(s, "tools refuse out-of-range numbers",
              test_tools_refuse_out_of_range_numbers);
  CU_add_test(s, "wt-push backend options", test_push_backend_options);
  CU_add_test(s, "wt-server memory, device and limit options",
              test_server_options);
}
