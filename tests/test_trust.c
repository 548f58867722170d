/* test_trust.c: what a stranger can try against the control plane: no or a
 * wrong bearer token, a reader's token on a round call, plaintext to a TLS
 * server, no client certificate / one from another CA / an expired one to a
 * mutual-TLS server, token files anyone can read, strings that are not
 * UTF-8, guessed round ids, and a non-loopback listen without TLS. The PKI
 * is made with openssl at test time (tests/support/make-certs.sh). */

#include <CUnit/CUnit.h>
#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "support/fixture.h"
#include "support/wt_proc.h"
#include "wt/client.h"
#include "wt/consumer.h"
#include "wt/pb.h"
#include "wt/secure.h"
#include "wt/server.h"
#include "wt/synthetic.h"
#include "grpc/health/v1/health.pb-c.h"
#include "wt_test.h"

#define TRAINER_TOKEN "trainer-0123456789abcdef0123456789"
#define READER_TOKEN "reader-fedcba9876543210fedcba98765"

static char *g_dir;          /* this suite's temporary folder */
static char g_pki[PATH_MAX]; /* the certificates */
static char g_tokens[PATH_MAX];

static const char *pki(const char *name) {
  static char path[8][2 * PATH_MAX];
  static int next;
  char *p = path[next++ % 8];
  snprintf(p, sizeof(path[0]), "%s/%s", g_pki, name);
  return p;
}

static bool write_text(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  if (f == NULL) return false;
  fputs(text, f);
  fclose(f);
  return chmod(path, mode) == 0;
}

static void write_file(const char *path, const char *text, mode_t mode) {
  CU_ASSERT_FATAL(write_text(path, text, mode));
}

static int suite_init(void) {
  g_dir = wt_test_tmpdir();
  snprintf(g_pki, sizeof(g_pki), "%s/pki", g_dir);
  char cmd[2 * PATH_MAX];
  snprintf(cmd, sizeof(cmd), "sh '%s/support/make-certs.sh' '%s'",
           wt_test_source_dir(), g_pki);
  if (system(cmd) != 0) {
    fprintf(stderr, "make-certs.sh failed (is openssl installed?)\n");
    return 1;
  }
  snprintf(g_tokens, sizeof(g_tokens), "%s/tokens", g_dir);
  return write_text(g_tokens,
                    "# scope token\ntrainer " TRAINER_TOKEN
                    "\nreader " READER_TOKEN "\n",
                    0600)
             ? 0
             : 1;
}

static int suite_clean(void) {
  wt_test_rmtree(g_dir);
  free(g_dir);
  return 0;
}

/* A server on loopback with `o`'s trust options. */
static wt_server *start(wt_server_options o, char *target, size_t cap) {
  o.listen = "127.0.0.1:0";
  o.model = "synthetic:tiny";
  o.drain_ms = 300;
  wt_server *srv = NULL;
  WT_ASSERT_OK(wt_server_start(&o, &srv));
  CU_ASSERT_FATAL(srv != NULL);
  snprintf(target, cap, "127.0.0.1:%d", wt_server_port(srv));
  return srv;
}

static wt_rpc_channel *channel(const char *target, const wt_rpc_tls *tls,
                               const char *token) {
  wt_rpc_channel_options o = {
      .default_deadline_ms = 5000, .tls = tls, .token = token};
  wt_rpc_channel *ch = NULL;
  WT_ASSERT_OK(wt_rpc_channel_new(target, &o, &ch));
  return ch;
}

static wt_status *info_call(wt_rpc_channel *ch) {
  Wt__V1__GetServerInfoRequest req = WT__V1__GET_SERVER_INFO_REQUEST__INIT;
  return wtt_call(ch, "GetServerInfo", &req.base,
                  &wt__v1__server_info__descriptor, NULL);
}

/* Opens a WatchWeightVersion stream and reads its first message: the
 * stream's error when the server refused it. */
static wt_status *wtt_watch_open_status(wt_rpc_channel *ch) {
  Wt__V1__WatchWeightVersionRequest req =
      WT__V1__WATCH_WEIGHT_VERSION_REQUEST__INIT;
  wt_rpc_server_stream *s = NULL;
  wt_status *st = wt_rpc_server_stream_open(ch, WTT_SVC "WatchWeightVersion",
                                            &req.base, 5000, &s);
  if (st == NULL) {
    ProtobufCMessage *m = NULL;
    bool done = false;
    st = wt_rpc_server_stream_read(s, &wt__v1__weight_version__descriptor, &m,
                                   &done);
    wt_pb_free(m);
  }
  wt_rpc_server_stream_destroy(s);
  return st;
}

/* ---- bearer tokens ------------------------------------------------------ */

static void test_tokens(void) {
  char target[64];
  wt_server_options o = {.token_file = g_tokens};
  wt_server *srv = start(o, target, sizeof(target));
  wt_rpc_channel *none = channel(target, NULL, NULL);
  wt_rpc_channel *wrong =
      channel(target, NULL, "trainer-0123456789abcdef0123456780");
  wt_rpc_channel *reader = channel(target, NULL, READER_TOKEN);
  wt_rpc_channel *trainer = channel(target, NULL, TRAINER_TOKEN);

  /* No token, a wrong one (one character off), a prefix of the right one:
   * UNAUTHENTICATED on every method, readers' included. */
  WT_ASSERT_ERR(info_call(none), WT_UNAUTHENTICATED,
                "GetServerInfo: missing or wrong bearer token");
  WT_ASSERT_ERR(info_call(wrong), WT_UNAUTHENTICATED,
                "missing or wrong bearer token");
  wt_rpc_channel *prefix = channel(target, NULL, "trainer-0123456789abcdef");
  WT_ASSERT_ERR(info_call(prefix), WT_UNAUTHENTICATED, "bearer token");
  wt_rpc_channel_destroy(prefix);
  WT_ASSERT_ERR(wtt_start(none, NULL), WT_UNAUTHENTICATED, "bearer token");
  WT_ASSERT_ERR(wtt_init_grpc(wrong, 0, 1), WT_UNAUTHENTICATED, "bearer token");
  WT_ASSERT_ERR(wtt_watch_open_status(none), WT_UNAUTHENTICATED,
                "bearer token");

  /* A reader reads, and may not drive a round. */
  WT_ASSERT_OK(info_call(reader));
  char *v = wtt_version(reader, NULL);
  CU_ASSERT_STRING_EQUAL(v, "");
  free(v);
  WT_ASSERT_ERR(wtt_start(reader, NULL), WT_PERMISSION_DENIED,
                "StartWeightUpdate: the token's scope is 'reader'; this call "
                "needs a 'trainer' token");
  WT_ASSERT_ERR(wtt_init_grpc(reader, 0, 1), WT_PERMISSION_DENIED, "reader");
  WT_ASSERT_ERR(wtt_abort(reader, 1, NULL), WT_PERMISSION_DENIED, "reader");

  /* The trainer does everything; the version it commits is what a reader
   * sees. */
  WT_ASSERT_OK(wtt_init_grpc(trainer, 0, 1));
  uint64_t id = 0;
  WT_ASSERT_OK(wtt_start(trainer, &id));
  WT_ASSERT_ERR(wtt_finish(reader, "stolen", id), WT_PERMISSION_DENIED,
                "FinishWeightUpdate");
  WT_ASSERT_OK(wtt_finish(trainer, "by-trainer", id));
  wtt_assert_version(reader, "by-trainer", 1);

  wt_rpc_auth_counts ac;
  wt_server_auth_counts(srv, &ac);
  printf("\n  refused: %" PRIu64 " unauthenticated, %" PRIu64 " denied\n",
         ac.unauthenticated, ac.denied);
  CU_ASSERT(ac.unauthenticated >= 6);
  CU_ASSERT(ac.denied >= 4);

  /* The sync client reads its token from the file it is given, and never
   * from the environment ($WT_TOKEN_FILE is the tools'). */
  const char *targets[] = {target};
  wt_sync_client *c = NULL;
  wt_client_options co = {.token_file = g_tokens};
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, &co, &c));
  Wt__V1__ServerInfo *info = NULL;
  WT_ASSERT_OK(wt_sync_client_server_info(c, 0, &info));
  wt_pb_free(&info->base);
  wt_sync_client_destroy(c);
  setenv("WT_TOKEN_FILE", g_tokens, 1);
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, NULL, &c));
  WT_ASSERT_ERR(wt_sync_client_server_info(c, 0, &info), WT_UNAUTHENTICATED,
                "bearer token");
  wt_sync_client_destroy(c);
  unsetenv("WT_TOKEN_FILE");

  wt_rpc_channel_destroy(none);
  wt_rpc_channel_destroy(wrong);
  wt_rpc_channel_destroy(reader);
  wt_rpc_channel_destroy(trainer);
  wt_server_stop(srv);
}

/* Token files: the server refuses one that others can read, a short token,
 * a line of another form, a token listed twice, a NUL or control byte
 * (naming file and line), and a FIFO (at once, by what it is). */
static void test_token_files(void) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/bad-tokens", g_dir);
  wt_token *t = NULL;
  size_t n = 0;
  write_file(path, "trainer " TRAINER_TOKEN "\n", 0644);
  WT_ASSERT_ERR(wt_tokens_load(path, &t, &n), WT_INVALID_ARGUMENT,
                "mode 644 lets others read the tokens; chmod 600 it");
  write_file(path, "trainer short\n", 0600);
  WT_ASSERT_ERR(wt_tokens_load(path, &t, &n), WT_INVALID_ARGUMENT,
                "line 1: a token of 5 characters (it needs 16 to 512");
  write_file(path, "\n# c\nadmin " TRAINER_TOKEN "\n", 0600);
  WT_ASSERT_ERR(wt_tokens_load(path, &t, &n), WT_INVALID_ARGUMENT,
                "line 3: expected \"trainer TOKEN\" or \"reader TOKEN\"");
  write_file(path, "trainer " TRAINER_TOKEN "\nreader " TRAINER_TOKEN "\n",
             0600);
  WT_ASSERT_ERR(wt_tokens_load(path, &t, &n), WT_INVALID_ARGUMENT,
                "line 2: the token is listed twice");
  write_file(path, "# nothing\n", 0600);
  WT_ASSERT_ERR(wt_tokens_load(path, &t, &n), WT_INVALID_ARGUMENT,
                "no token in it");
  WT_ASSERT_OK(wt_tokens_load(g_tokens, &t, &n));
  CU_ASSERT_EQUAL(n, 2);
  CU_ASSERT_EQUAL(wt_tokens_match(t, n, TRAINER_TOKEN, strlen(TRAINER_TOKEN)),
                  WT_SCOPE_ALL);
  CU_ASSERT_EQUAL(wt_tokens_match(t, n, READER_TOKEN, strlen(READER_TOKEN)),
                  WT_SCOPE_READER);
  CU_ASSERT_EQUAL(wt_tokens_match(t, n, TRAINER_TOKEN, 10), 0);
  wt_tokens_free(t, n);
  /* A server with a bad file does not start. */
  wt_server_options o = {
      .listen = "127.0.0.1:0", .model = "synthetic:tiny", .token_file = path};
  wt_server *srv = NULL;
  WT_ASSERT_ERR(wt_server_start(&o, &srv), WT_INVALID_ARGUMENT, "--token-file");
  /* A client's file: the token alone, or in the server's form. */
  char *tok = NULL;
  write_file(path, "  " READER_TOKEN "  \n", 0644);
  WT_ASSERT_OK(wt_token_read(path, &tok));
  CU_ASSERT_STRING_EQUAL(tok, READER_TOKEN);
  free(tok);
  WT_ASSERT_OK(wt_token_read(g_tokens, &tok));
  CU_ASSERT_STRING_EQUAL(tok, TRAINER_TOKEN);
  free(tok);
  write_file(path, "two words here\n", 0600);
  WT_ASSERT_ERR(wt_token_read(path, &tok), WT_INVALID_ARGUMENT,
                "expected the token alone");

  /* A NUL byte would end the text there, silently dropping the tokens
   * after it: refused naming its line. So is any other control byte. */
  {
    static const char nul_file[] =
        "trainer " TRAINER_TOKEN "\n# note\0\nreader " READER_TOKEN "\n";
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    fwrite(nul_file, 1, sizeof(nul_file) - 1, f);
    fclose(f);
    chmod(path, 0600);
    WT_ASSERT_ERR(wt_tokens_load(path, &t, &n), WT_INVALID_ARGUMENT,
                  "line 2: a NUL byte");
    WT_ASSERT_ERR(wt_token_read(path, &tok), WT_INVALID_ARGUMENT,
                  "line 2: a NUL byte");
  }
  write_file(path, "trainer " TRAINER_TOKEN "\n# bell \a here\n", 0600);
  WT_ASSERT_ERR(wt_tokens_load(path, &t, &n), WT_INVALID_ARGUMENT,
                "line 2: control byte 0x07");
  /* A FIFO as the token file: refused at once, never waited on. */
  unlink(path);
  CU_ASSERT_FATAL(mkfifo(path, 0600) == 0);
  int64_t t0 = wt_mono_ms();
  WT_ASSERT_ERR(wt_tokens_load(path, &t, &n), WT_INVALID_ARGUMENT,
                "a FIFO, not a regular file");
  WT_ASSERT_ERR(wt_token_read(path, &tok), WT_INVALID_ARGUMENT,
                "a FIFO, not a regular file");
  CU_ASSERT(wt_mono_ms() - t0 < 1000);
  unlink(path);
}

/* ---- TLS and mutual TLS -------------------------------------------------- */

static void test_tls(void) {
  char target[64];
  wt_server_options o = {.tls_cert = pki("server.pem"),
                         .tls_key = pki("server.key")};
  wt_server *srv = start(o, target, sizeof(target));
  /* A round trip over TLS, verified against the test CA. */
  wt_rpc_tls ok = {.ca_file = pki("ca.pem")};
  wt_rpc_channel *ch = channel(target, &ok, NULL);
  WT_ASSERT_OK(info_call(ch));
  WT_ASSERT_OK(wtt_init_grpc(ch, 0, 1));
  uint64_t id = 0;
  WT_ASSERT_OK(wtt_start(ch, &id));
  wtt_upd u;
  wt_tensor_meta *metas = NULL;
  size_t n = 0;
  WT_ASSERT_OK(wt_synthetic_layout("tiny", &metas, &n));
  wtt_upd_init(&u, metas, NULL, n);
  WT_ASSERT_OK(wtt_push_all(ch, &u, id, 0, 1000, 1, NULL));
  WT_ASSERT_OK(wtt_finish(ch, "over-tls", id));
  wtt_assert_version(ch, "over-tls", 1);
  wt_rpc_channel_destroy(ch);
  /* Plaintext to it, or TLS that trusts another CA: no call gets through. */
  ch = channel(target, NULL, NULL);
  WT_ASSERT_ERR(info_call(ch), WT_UNAVAILABLE, "");
  wt_rpc_channel_destroy(ch);
  wt_rpc_tls other = {.ca_file = pki("other-ca.pem")};
  ch = channel(target, &other, NULL);
  WT_ASSERT_ERR(info_call(ch), WT_UNAVAILABLE, "");
  wt_rpc_channel_destroy(ch);
  /* A name the certificate does not carry. */
  wt_rpc_tls badname = {.ca_file = pki("ca.pem"), .server_name = "evil.test"};
  ch = channel(target, &badname, NULL);
  WT_ASSERT_ERR(info_call(ch), WT_UNAVAILABLE, "");
  wt_rpc_channel_destroy(ch);
  wt_tensor_meta_array_free(metas, n);
  wt_server_stop(srv);

  /* Files that are missing or not PEM fail the start, naming them. */
  wt_server_options bad = {.listen = "127.0.0.1:0",
                           .model = "synthetic:tiny",
                           .tls_cert = pki("nope.pem"),
                           .tls_key = pki("server.key")};
  WT_ASSERT_ERR(wt_server_start(&bad, &srv), WT_INVALID_ARGUMENT,
                "--tls-cert '");
  bad.tls_cert = g_tokens;
  WT_ASSERT_ERR(wt_server_start(&bad, &srv), WT_INVALID_ARGUMENT,
                "no PEM block in it");
  bad.tls_cert = pki("server.pem");
  bad.tls_key = NULL;
  WT_ASSERT_ERR(wt_server_start(&bad, &srv), WT_INVALID_ARGUMENT,
                "needs --tls-key");
  /* PEM of the wrong kind, a key that is not the certificate's, a CA file
   * with no certificate: each names the option, its file and the reason. */
  static const struct {
    const char *cert, *key, *ca, *want;
  } wrong[] = {
      {"server.key", "server.key", NULL, "not a certificate"},
      {"server.pem", "other.key", NULL, "does not match --tls-cert"},
      {"server.pem", "server.key", "server.key", "--tls-ca '"},
  };
  for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
    bad.tls_cert = pki(wrong[i].cert); /* pki() keeps its last 8 */
    bad.tls_key = pki(wrong[i].key);
    bad.tls_ca = wrong[i].ca ? pki(wrong[i].ca) : NULL;
    WT_ASSERT_ERR(wt_server_start(&bad, &srv), WT_INVALID_ARGUMENT,
                  wrong[i].want);
  }
}

/* A call in flight over TLS when the server stops still gets its answer
 * (a checksum is cancelled by a stop, saying so): wt relays TLS until
 * gRPC is done with the connection, not only until accepting stops, so
 * the client reads the server's status, not a connection that died. */
static void test_tls_stop_in_flight(void) {
  wt_server_options o = {.listen = "127.0.0.1:0",
                         .model = "synthetic:llama-256m",
                         .workers = 1,
                         .drain_ms = 20000,
                         .tls_cert = pki("server.pem"),
                         .tls_key = pki("server.key")};
  wt_server *srv = NULL;
  WT_ASSERT_OK(wt_server_start(&o, &srv));
  char target[64];
  snprintf(target, sizeof(target), "127.0.0.1:%d", wt_server_port(srv));
  wt_rpc_tls ok = {.ca_file = pki("ca.pem")};
  wt_rpc_channel *ch = channel(target, &ok, NULL);
  WT_ASSERT_OK(info_call(ch));
  Wt__V1__ChecksumWeightsRequest req = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  wtt_bg_call sum = {.ch = ch,
                     .method = "ChecksumWeights",
                     .req = &req.base,
                     .type = &wt__v1__checksum_weights_response__descriptor,
                     .deadline_ms = 60000};
  int64_t t0 = wt_mono_ms();
  wtt_bg_start(&sum);
  int running = 0;
  while (running == 0 && wt_mono_ms() - t0 < 10000) {
    wt_server_admission(srv, WT_SERVER_CLASS_READER, &running, NULL, NULL);
    if (running == 0) wtt_sleep_ms(2);
  }
  CU_ASSERT(running > 0);
  int64_t s0 = wt_mono_ms();
  wt_server_stop(srv);
  int64_t stop_ms = wt_mono_ms() - s0;
  wt_status *st = wtt_bg_join(&sum);
  printf(
      "\n  a checksum in flight over TLS when the server stopped: %s after "
      "%lld ms; the stop took %lld ms\n",
      st ? wt_status_message(st) : "answered OK", (long long)(sum.end_ms - t0),
      (long long)stop_ms);
  WT_ASSERT_ERR(st, WT_CANCELLED, "the server is stopping");
  wt_rpc_channel_destroy(ch);
}

static void test_mutual_tls(void) {
  char target[64];
  wt_server_options o = {.tls_cert = pki("server.pem"),
                         .tls_key = pki("server.key"),
                         .tls_ca = pki("ca.pem"),
                         .token_file = g_tokens};
  wt_server *srv = start(o, target, sizeof(target));
  const struct {
    const char *what, *cert, *key;
    bool ok;
  } cases[] = {
      {"no client certificate", NULL, NULL, false},
      {"a certificate from another CA", "other.pem", "other.key", false},
      {"an expired certificate", "expired.pem", "expired.key", false},
      {"the trainer's certificate", "client.pem", "client.key", true},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    wt_rpc_tls t = {.ca_file = pki("ca.pem")};
    if (cases[i].cert) {
      t.cert_file = pki(cases[i].cert);
      t.key_file = pki(cases[i].key);
    }
    wt_rpc_channel *ch = channel(target, &t, TRAINER_TOKEN);
    wt_status *st = info_call(ch);
    printf("\n  %s: %s", cases[i].what,
           st ? wt_code_name(wt_status_code(st)) : "OK");
    if (cases[i].ok) {
      WT_ASSERT_OK(st);
      /* The certificate alone is not enough where tokens are on. */
      wt_rpc_channel *nt = channel(target, &t, NULL);
      WT_ASSERT_ERR(info_call(nt), WT_UNAUTHENTICATED, "bearer token");
      wt_rpc_channel_destroy(nt);
    } else {
      CU_ASSERT_PTR_NOT_NULL(st);
      CU_ASSERT(st == NULL || wt_status_code(st) == WT_UNAVAILABLE);
      wt_status_free(st);
    }
    wt_rpc_channel_destroy(ch);
  }
  printf("\n");
  wt_server_stop(srv);
}

/* ---- strings ---------------------------------------------------------- */

static void test_strings_are_utf8(void) {
  static const struct {
    const char *s;
    bool ok;
  } cases[] = {
      {"", true},
      {"step-1", true},
      {"\xc3\xa9t\xc3\xa9", true}, /* été */
      {"\xf0\x9f\x98\x80", true},  /* U+1F600 */
      {"\xff", false},             /* never in UTF-8 */
      {"\xc0\xaf", false},         /* overlong '/' */
      {"\xed\xa0\x80", false},     /* a surrogate */
      {"\xf4\x90\x80\x80", false}, /* above U+10FFFF */
      {"abc\xe2\x82", false},      /* cut short */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    CU_ASSERT_EQUAL(wt_utf8_valid(cases[i].s, strlen(cases[i].s), NULL),
                    cases[i].ok);

  /* Against a server: a version, a parameter name, a dtype name and an
   * option that are not UTF-8 are INVALID_ARGUMENT naming the field; the
   * version stays what it was, and conforming clients still read it. */
  wtt_server S;
  uint64_t id = wtt_serve_round(&S, "tiny", 1, WT_STAGING_SHADOW, 0);
  WT_ASSERT_ERR(wtt_finish(S.ch, "v\xff\xfe", id), WT_INVALID_ARGUMENT,
                "wt.v1.FinishWeightUpdateRequest: field weight_version is "
                "not valid UTF-8");
  wtt_upd u;
  wtt_upd_init(&u, S.metas, NULL, S.n);
  u.names[1] = "model.\xc0\xaf";
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, id, 0, 1000, 1, NULL),
                WT_INVALID_ARGUMENT,
                "field header.update_info.names[1] is not valid UTF-8");
  wtt_upd_init(&u, S.metas, NULL, S.n);
  u.dtypes[2] = "bfloat\xed\xa0\x80";
  WT_ASSERT_ERR(wtt_push_all(S.ch, &u, id, 0, 1000, 1, NULL),
                WT_INVALID_ARGUMENT,
                "field header.update_info.dtype_names[2] is not valid UTF-8");
  Wt__V1__AbortWeightUpdateRequest ar =
      WT__V1__ABORT_WEIGHT_UPDATE_REQUEST__INIT;
  ar.round_id = id;
  ar.reason = "\xff";
  WT_ASSERT_ERR(
      wtt_call(S.ch, "AbortWeightUpdate", &ar.base,
               &wt__v1__abort_weight_update_response__descriptor, NULL),
      WT_INVALID_ARGUMENT, "field reason is not valid UTF-8");
  Wt__V1__WeightTransferInitInfo info = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  Wt__V1__GrpcInitInfo g = WT__V1__GRPC_INIT_INFO__INIT;
  info.backend = "grpc";
  info.backend_init_case = WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_GRPC;
  info.grpc = &g;
  Wt__V1__WeightTransferInitInfo__OptionsEntry e =
      WT__V1__WEIGHT_TRANSFER_INIT_INFO__OPTIONS_ENTRY__INIT;
  Wt__V1__WeightTransferInitInfo__OptionsEntry *ep = &e;
  e.key = "fanout";
  e.value = "chain\xff";
  info.n_options = 1;
  info.options = &ep;
  WT_ASSERT_ERR(wtt_init(S.ch, &info, NULL), WT_INVALID_ARGUMENT,
                "field init_info.options[0].value is not valid UTF-8");
  /* Nothing of it landed: the round goes on and commits a proper name. */
  wtt_upd_init(&u, S.metas, NULL, S.n);
  WT_ASSERT_OK(wtt_push_all(S.ch, &u, id, 0, 1000, 1, NULL));
  WT_ASSERT_OK(wtt_finish(S.ch, "v-ok", id));
  wtt_assert_version(S.ch, "v-ok", 1);
  wtt_server_stop(&S);
}

/* ---- processes: exposure, and the tools over TLS with tokens ----------- */

static void test_listen_beyond_loopback(void) {
  char log[PATH_MAX];
  snprintf(log, sizeof(log), "%s/exposed.log", g_dir);
  const char *const argv[] = {WT_SERVER_BIN, "--listen",       "0.0.0.0:0",
                              "--model",     "synthetic:tiny", NULL};
  char *out = NULL;
  int code = wt_proc_run(argv, log, 30000, &out);
  CU_ASSERT_EQUAL(code, 1);
  CU_ASSERT_PTR_NOT_NULL(out && strstr(out,
                                       "--listen 0.0.0.0:0: not a "
                                       "loopback address, and TLS is "
                                       "off"));
  CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "--insecure"));
  if (out && !strstr(out, "not a loopback address")) fprintf(stderr, "%s", out);
  free(out);
  /* With TLS it serves on every interface (the test talks to loopback). */
  wt_proc_server s;
  const char *const tls[] = {
      "--tls-cert",   pki("server.pem"), "--tls-key", pki("server.key"),
      "--token-file", g_tokens,          NULL};
  CU_ASSERT_FATAL(wt_proc_server_start(&s, g_dir, "tls-server", tls));
  /* wt-push and wt-ctl over TLS with the trainer's token file; wt-ctl with
   * no token is refused. */
  const char *const push[] = {
      WT_PUSH_BIN,    "--server", s.addr,     "--tls-ca", pki("ca.pem"),
      "--token-file", g_tokens,   "--verify", "--quiet",  NULL};
  snprintf(log, sizeof(log), "%s/push.log", g_dir);
  code = wt_proc_run(push, log, 60000, &out);
  if (code != 0) fprintf(stderr, "%s", out ? out : "");
  CU_ASSERT_EQUAL(code, 0);
  free(out);
  const char *const ctl[] = {WT_CTL_BIN,    "--server", s.addr, "--tls-ca",
                             pki("ca.pem"), "version",  NULL};
  snprintf(log, sizeof(log), "%s/ctl.log", g_dir);
  code = wt_proc_run(ctl, log, 30000, &out);
  CU_ASSERT_EQUAL(code, 1);
  CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "UNAUTHENTICATED"));
  free(out);
  setenv("WT_TOKEN_FILE", g_tokens, 1);
  code = wt_proc_run(ctl, log, 30000, &out);
  unsetenv("WT_TOKEN_FILE");
  CU_ASSERT_EQUAL(code, 0);
  CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "step-1"));
  if (out && !strstr(out, "step-1")) fprintf(stderr, "%s", out);
  free(out);
  CU_ASSERT_EQUAL(wt_proc_server_stop(&s, 10000, NULL), 0);
}

/* ---- HTTP/2: what gRPC 1.51's transport must survive -------------------- */

/* Streams a second the attacker opens: about what this 2-core machine's
 * server takes at full speed in a normal build (it answered a well-behaved
 * client throughout 10,000 a second). A sanitized server is several times
 * slower per stream, so it faces a proportionally lighter attack; either
 * way the number is printed. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define H2_RATE "1000"
#else
#define H2_RATE "5000"
#endif

/* How much the process may grow during an attack, in KiB of what
 * wtt_held_kib() measures: RSS in a normal build, the live heap under
 * AddressSanitizer (whose RSS also holds its quarantine, up to 256 MiB of
 * freed memory, so it measures the number of allocations, not what is
 * kept). The same bound in both. */
#define ATTACK_GROWTH_KIB (64 * 1024L)

/* ", heap A -> B MiB" where the bound is on the heap (sanitized), else "". */
static const char *held_note(char *buf, size_t len, long held0) {
  buf[0] = 0;
  if (strcmp(wtt_held_what(), "RSS") != 0)
    snprintf(buf, len, ", %s %ld -> %ld MiB", wtt_held_what(), held0 / 1024,
             wtt_held_kib() / 1024);
  return buf;
}

static bool have_h2(void) {
  return system("python3 -c 'import h2' >/dev/null 2>&1") == 0;
}

/* Whether the child `pid` still runs (it is not reaped). */
static bool child_running(pid_t pid) {
  siginfo_t info = {0};
  return waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == 0;
}

/* Runs tests/h2_attack.py MODE against `target` for `seconds` (many-conns:
 * until the server closed every connection, at most that) while a
 * well-behaved client calls GetServerInfo every 100 ms (5 s deadline), for
 * as long as the attack runs: every call must be answered. Returns the line the
 * attack printed (static) and, in *grew_kib (may be NULL), how much this
 * process (the server's) grew meanwhile. */
static const char *survive(const char *mode, const char *port,
                           const char *target, const wt_rpc_tls *tls,
                           int seconds, long *grew_kib) {
  char script[PATH_MAX], log[PATH_MAX], secs[16];
  snprintf(script, sizeof(script), "%s/fixtures/h2_attack.py",
           wt_test_source_dir());
  snprintf(log, sizeof(log), "%s/h2-%s.log", g_dir, mode);
  snprintf(secs, sizeof(secs), "%d", seconds);
  const char *const argv[] = {"/usr/bin/env", "python3",   script,
                              mode,           "127.0.0.1", port,
                              secs,           H2_RATE,     NULL};
  long rss0 = wtt_rss_kib(), held0 = wtt_held_kib();
  pid_t pid = wt_proc_spawn(argv, log, NULL);
  CU_ASSERT_FATAL(pid > 0);
  wt_rpc_channel *ch = channel(target, tls, TRAINER_TOKEN);
  int calls = 0, failed = 0;
  int64_t worst = 0;
  /* The attack's whole life; its SECONDS and 30 s more: a deadline. */
  int64_t end = wt_mono_ms() + seconds * 1000 + 30000;
  while (child_running(pid) && wt_mono_ms() < end) {
    int64_t t0 = wt_mono_ms();
    Wt__V1__GetServerInfoRequest req = WT__V1__GET_SERVER_INFO_REQUEST__INIT;
    wt_status *st = wt_rpc_unary(ch, WTT_SVC "GetServerInfo", &req.base,
                                 &wt__v1__server_info__descriptor, 5000, NULL);
    int64_t took = wt_mono_ms() - t0;
    if (took > worst) worst = took;
    calls++;
    if (st != NULL) {
      failed++;
      fprintf(stderr, "\n  during %s: %s\n", mode, wt_status_message(st));
      wt_status_free(st);
    }
    wtt_sleep_ms(100);
  }
  int status = 0;
  CU_ASSERT(wt_proc_wait(pid, 30000, &status));
  char *out = NULL, note[64];
  FILE *f = fopen(log, "r");
  static char line[256];
  line[0] = 0;
  if (f) {
    if (!fgets(line, sizeof(line), f)) line[0] = 0;
    fclose(f);
  }
  line[strcspn(line, "\n")] = 0;
  free(out);
  printf("\n  %-12s %s (at most " H2_RATE
         " streams/s); %d calls beside it, "
         "%d failed, worst %lld ms; process RSS %ld -> %ld MiB%s",
         mode, line, calls, failed, (long long)worst, rss0 / 1024,
         wtt_rss_kib() / 1024, held_note(note, sizeof(note), held0));
  CU_ASSERT(calls > 0);
  CU_ASSERT_EQUAL(failed, 0);
  WT_ASSERT_OK(info_call(ch));
  wt_rpc_channel_destroy(ch);
  if (grew_kib) *grew_kib = wtt_held_kib() - held0;
  return line;
}

static void test_http2_attacks(void) {
  if (!have_h2()) {
    wt_test_skip("HTTP/2 attacks", "python3 has no h2 (pip install h2)");
    return;
  }
  char target[64], port[16];
  wt_server_options o = {.token_file = g_tokens};
  wt_server *srv = start(o, target, sizeof(target));
  snprintf(port, sizeof(port), "%d", wt_server_port(srv));
  survive("rapid-reset", port, target, NULL, 4, NULL);
  survive("big-headers", port, target, NULL, 2, NULL);
  survive("hpack-bomb", port, target, NULL, 2, NULL);
  survive("many-streams", port, target, NULL, 2, NULL);
  /* 16 tokenless requests announcing 16 MiB bodies that never end (#20,
   * attack 2): the token is checked on the call's metadata, before any of
   * its body is read, so the server refuses each at once and buffers
   * nothing of them (before: RSS 19 MiB -> 6.2 GiB, 2.8 to 3.9 GiB kept). */
  long grew = 0;
  const char *said = survive("unfinished-bodies", port, target, NULL, 3, &grew);
  CU_ASSERT(grew < ATTACK_GROWTH_KIB);
  CU_ASSERT_PTR_NOT_NULL(strstr(said, "16 streams ended by the server"));
  /* 1,000 connections that never speak, held until the server closed
   * them (at most 7 s): the well-behaved client is still answered, and the
   * server closed every one (over its cap, or after the 3 s grace; gRPC
   * 1.51 alone kept them all). */
  said = survive("many-conns", port, target, NULL, 7, NULL);
  int opened = -1, gone = -2;
  CU_ASSERT(sscanf(said, "many-conns: %d connections opened, %d closed",
                   &opened, &gone) == 2);
  CU_ASSERT_EQUAL(gone, opened);
  wt_server_stop(srv);
  /* With mutual TLS a stranger's bytes never reach HTTP/2 at all. */
  wt_server_options m = {.tls_cert = pki("server.pem"),
                         .tls_key = pki("server.key"),
                         .tls_ca = pki("ca.pem"),
                         .token_file = g_tokens};
  srv = start(m, target, sizeof(target));
  snprintf(port, sizeof(port), "%d", wt_server_port(srv));
  wt_rpc_tls t = {.ca_file = pki("ca.pem"),
                  .cert_file = pki("client.pem"),
                  .key_file = pki("client.key")};
  survive("rapid-reset", port, target, &t, 2, NULL);
  printf("\n");
  wt_server_stop(srv);
}

typedef struct health_flood {
  const char *target;
  atomic_bool *stop;
} health_flood;

static void *health_flood_main(void *p) {
  health_flood *a = p;
  wt_rpc_channel *ch = channel(a->target, NULL, NULL);
  while (!atomic_load(a->stop)) {
    int status = 0;
    wt_status_free(wtt_health_check(ch, "", &status));
  }
  wt_rpc_channel_destroy(ch);
  return NULL;
}

/* ---- health: public, and nothing more
 * ------------------------------------------ */

/* The health service answers without a token (probes carry none) and
 * that opens nothing else: a token-less caller's other calls are still
 * UNAUTHENTICATED; a connection that makes only health calls is still
 * closed at the auth grace (it never counts as authorized, so strangers
 * cannot hold connections with it); a flood of health checks from one peer
 * leaves a trainer's round committing. */
static void test_health_is_public_only(void) {
  wtt_server s;
  wt_server_options o = {.token_file = g_tokens, .auth_grace_ms = 300};
  wtt_server_start(&s, "tiny", &o);
  wt_rpc_channel *anon = channel(s.target, NULL, NULL);
  int status = -1;
  WT_ASSERT_OK(wtt_health_check(anon, "", &status));
  CU_ASSERT_EQUAL(
      status, GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
  WT_ASSERT_ERR(wtt_health_check(anon, "wt.v1.Other", &status), WT_NOT_FOUND,
                "no service 'wt.v1.Other' here");
  WT_ASSERT_ERR(info_call(anon), WT_UNAUTHENTICATED, "");
  /* Health calls past the grace: the connection is closed all the same. */
  wt_rpc_conn_counts c0, c1;
  wt_server_conn_counts(s.srv, &c0);
  int64_t t0 = wt_mono_ms();
  int answered = 0;
  while (wt_mono_ms() - t0 < 1200) {
    wt_status *st = wtt_health_check(anon, "", &status);
    answered += st == NULL;
    wt_status_free(st);
    wtt_sleep_ms(20);
  }
  wt_server_conn_counts(s.srv, &c1);
  CU_ASSERT(c1.expired > c0.expired);
  CU_ASSERT(answered > 0);
  /* Eight threads of health checks; a round commits beside them. */
  atomic_bool stop;
  atomic_init(&stop, false);
  health_flood fa = {s.target, &stop};
  pthread_t th[8];
  for (int i = 0; i < 8; i++)
    pthread_create(&th[i], NULL, health_flood_main, &fa);
  wt_rpc_channel_destroy(s.ch);
  s.ch = channel(s.target, NULL, TRAINER_TOKEN);
  WT_ASSERT_OK(wtt_init_grpc(s.ch, 0, s.workers));
  int64_t r0 = wt_mono_ms();
  wtt_commit_round(&s, "beside-health", 5);
  int64_t took = wt_mono_ms() - r0;
  atomic_store(&stop, true);
  for (int i = 0; i < 8; i++) pthread_join(th[i], NULL);
  CU_ASSERT(took < 5000);
  printf(
      "\n  health without a token; its connection closed at the grace (%" PRIu64
      " expired); a round beside 8 health floods: %" PRId64 " ms\n",
      c1.expired - c0.expired, took);
  wt_rpc_channel_destroy(anon);
  wtt_server_stop(&s);
}

/* Opens a Health.Watch stream on `ch` and reads its first answer: NULL
 * when it was admitted (*out the stream), else the refusal. */
static wt_status *health_watch(wt_rpc_channel *ch, wt_rpc_server_stream **out) {
  Grpc__Health__V1__HealthCheckRequest req =
      GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  wt_rpc_server_stream *st = NULL;
  wt_status *err = wt_rpc_server_stream_open(ch, "/grpc.health.v1.Health/Watch",
                                             &req.base, 10000, &st);
  ProtobufCMessage *m = NULL;
  bool done = false;
  if (err == NULL)
    err = wt_rpc_server_stream_read(
        st, &grpc__health__v1__health_check_response__descriptor, &m, &done);
  if (err == NULL && done) err = wt_status_new(WT_UNKNOWN, "ended at once");
  wt_pb_free(m);
  if (err != NULL) {
    if (st) wt_rpc_server_stream_destroy(st);
    return err;
  }
  *out = st;
  return NULL;
}

/* Trust row 6: Health.Watch streams (public, no token) have a class of
 * their own, 4 per peer: a stranger's flood of them is refused past that
 * and takes no place of a reader's WatchWeightVersion. */
static void test_health_watch_apart(void) {
  wtt_server s;
  wt_server_options o = {
      .token_file = g_tokens, .auth_grace_ms = 20000, .max_watchers = 4};
  wtt_server_start(&s, "tiny", &o);
  wt_rpc_channel *anon = channel(s.target, NULL, NULL);
  wt_rpc_server_stream *hw[12] = {0};
  int admitted = 0, refused = 0;
  for (int i = 0; i < 12; i++) {
    wt_status *st = health_watch(anon, &hw[i]);
    if (st == NULL) {
      admitted++;
    } else {
      refused += wt_status_code(st) == WT_RESOURCE_EXHAUSTED;
      wt_status_free(st);
    }
  }
  CU_ASSERT_EQUAL(admitted, 4);
  CU_ASSERT_EQUAL(refused, 8);
  /* Every reader watch still gets in: the class is the readers' own. */
  wt_rpc_channel *reader = channel(s.target, NULL, READER_TOKEN);
  wt_rpc_server_stream *w[4] = {0};
  for (int i = 0; i < 4; i++) {
    Wt__V1__WatchWeightVersionRequest req =
        WT__V1__WATCH_WEIGHT_VERSION_REQUEST__INIT;
    WT_ASSERT_OK(wt_rpc_server_stream_open(reader, WTT_SVC "WatchWeightVersion",
                                           &req.base, 10000, &w[i]));
  }
  wt_rpc_channel_destroy(s.ch);
  s.ch = channel(s.target, NULL, TRAINER_TOKEN);
  WT_ASSERT_OK(wtt_init_grpc(s.ch, 0, s.workers));
  wtt_commit_round(&s, "beside-health-watch", 3);
  for (int i = 0; i < 4; i++) {
    wtt_watch_expect(w[i], "beside-health-watch", 1);
    wt_rpc_server_stream_destroy(w[i]);
  }
  for (int i = 0; i < 12; i++)
    if (hw[i]) wt_rpc_server_stream_destroy(hw[i]);
  printf(
      "\n  Health.Watch from one peer: %d admitted, %d refused; 4 of 4 reader "
      "watches served\n",
      admitted, refused);
  wt_rpc_channel_destroy(reader);
  wt_rpc_channel_destroy(anon);
  wtt_server_stop(&s);
}

/* Trust row 5: a stream whose client reads nothing (its flow-control
 * window 0) is ended like a silent one: two stalled reflection streams
 * (which hold a thread each, two per peer) are ended within the write
 * stall, and the class is free again. */
static void test_stalled_readers_ended(void) {
  if (!have_h2()) {
    wt_test_skip("stalled readers", "python3 has no h2 (pip install h2)");
    return;
  }
  wtt_server s;
  wt_server_options o = {.token_file = g_tokens, .auth_grace_ms = 60000};
  wtt_server_start(&s, "tiny", &o);
  char script[PATH_MAX], log[PATH_MAX], port[16];
  snprintf(script, sizeof(script), "%s/fixtures/h2_attack.py",
           wt_test_source_dir());
  snprintf(log, sizeof(log), "%s/stalled-reader.log", g_dir);
  snprintf(port, sizeof(port), "%d", wt_server_port(s.srv));
  const char *const argv[] = {
      "/usr/bin/env", "python3", script, "stalled-reader", "127.0.0.1",
      port,           "40",      "2",    READER_TOKEN,     NULL};
  char *out = NULL;
  int64_t t0 = wt_mono_ms();
  CU_ASSERT_EQUAL(wt_proc_run(argv, log, 60000, &out), 0);
  int64_t took = wt_mono_ms() - t0;
  CU_ASSERT_PTR_NOT_NULL_FATAL(out);
  int ended = 0;
  for (const char *p = out; (p = strstr(p, "ended by the server after "));
       p++) {
    double secs = -1;
    if (sscanf(p, "ended by the server after %lf s", &secs) == 1 && secs > 0 &&
        secs < (WT_RPC_WRITE_STALL_MS + 8000) / 1000.0)
      ended++;
  }
  CU_ASSERT_EQUAL(ended, 2);
  /* the class is free again, and the server answers */
  Wt__V1__ServerInfo *info = NULL;
  wt_rpc_channel *ch = channel(s.target, NULL, READER_TOKEN);
  Wt__V1__GetServerInfoRequest req = WT__V1__GET_SERVER_INFO_REQUEST__INIT;
  WT_ASSERT_OK(wt_rpc_unary(ch, WTT_SVC "GetServerInfo", &req.base,
                            &wt__v1__server_info__descriptor, 5000,
                            (ProtobufCMessage **)&info));
  int running = -1;
  for (size_t i = 0; info && i < info->n_admission; i++)
    if (strcmp(info->admission[i]->name, "reflection") == 0)
      running = (int)info->admission[i]->running;
  CU_ASSERT_EQUAL(running, 0);
  wt_pb_free(info ? &info->base : NULL);
  printf("\n  two reflection streams that read nothing: %s  (%lld ms in all)",
         out, (long long)took);
  free(out);
  wt_rpc_channel_destroy(ch);

  /* A watch stream that reads nothing holds no thread; it ends when a
   * version is to be sent after WT_RPC_WRITE_STALL_MS of blocked sending. */
  wt_rpc_channel_destroy(s.ch);
  s.ch = channel(s.target, NULL, TRAINER_TOKEN);
  WT_ASSERT_OK(wtt_init_grpc(s.ch, 0, s.workers));
  wtt_commit_round(&s, "stall-1", 1);
  snprintf(log, sizeof(log), "%s/stalled-watch.log", g_dir);
  const char *const wargv[] = {
      "/usr/bin/env", "python3", script, "stalled-watch", "127.0.0.1",
      port,           "40",      "1",    READER_TOKEN,    NULL};
  pid_t pid = wt_proc_spawn(wargv, log, NULL);
  CU_ASSERT_FATAL(pid > 0);
  int watchers = 0;
  for (int64_t until = wt_mono_ms() + 10000;
       watchers < 1 && wt_mono_ms() < until; wtt_sleep_ms(20))
    wt_server_admission(s.srv, WT_SERVER_CLASS_WATCH, &watchers, NULL, NULL);
  CU_ASSERT_EQUAL_FATAL(watchers, 1);
  /* its first version is stuck behind a window of 0: past the stall, the
   * next commit ends the stream */
  wtt_sleep_ms(WT_RPC_WRITE_STALL_MS + 500);
  wtt_commit_round(&s, "stall-2", 2);
  int status = 0;
  CU_ASSERT(wt_proc_wait(pid, 45000, &status));
  wt_server_admission(s.srv, WT_SERVER_CLASS_WATCH, &watchers, NULL, NULL);
  CU_ASSERT_EQUAL(watchers, 0);
  FILE *f = fopen(log, "r");
  char line[256] = "";
  if (f) {
    if (!fgets(line, sizeof(line), f)) line[0] = 0;
    fclose(f);
  }
  CU_ASSERT_PTR_NULL(strstr(line, "never"));
  printf("\n  a watch stream that reads nothing: %s", line);
  wtt_server_stop(&s);
}

/* ---- connections: descriptors are a budget ---------------------------------
 */

/* A trainer's round on a new connection (its own channel, token and all):
 * init once, then start, push every tensor for `seed`, finish. Returns
 * the ms it took. */
static const wt_rpc_tls *g_round_tls; /* TLS for the rounds below */

static int64_t round_on_new_connection(wtt_server *s, const char *version,
                                       uint64_t seed) {
  int64_t t0 = wt_mono_ms();
  wt_rpc_channel_destroy(s->ch);
  s->ch = channel(s->target, g_round_tls, TRAINER_TOKEN);
  wtt_commit_round(s, version, seed);
  return wt_mono_ms() - t0;
}

/* #20, attack 1: preface-only connections (no token) by the hundred. The
 * server holds at most its cap; a newcomer takes the place of the oldest
 * connection without an authorized call, and those are closed after the
 * grace anyway, so a trainer's round on a fresh connection commits during
 * the flood, the next one at once after it, and descriptors and RSS come
 * back. (Before: none closed; at the descriptor limit the listener never
 * accepted again.) */
static void connection_flood(bool tls) {
  if (!have_h2()) {
    wt_test_skip("connection flood", "python3 has no h2 (pip install h2)");
    return;
  }
  wtt_server s;
  wt_server_options o = {
      .token_file = g_tokens, .max_connections = 64, .auth_grace_ms = 1000};
  wt_rpc_tls ctls = {.ca_file = pki("ca.pem")};
  if (tls) {
    o.tls_cert = pki("server.pem");
    o.tls_key = pki("server.key");
  }
  g_round_tls = tls ? &ctls : NULL;
  wtt_server_start(&s, "tiny", &o);
  wt_rpc_channel_destroy(s.ch);
  s.ch = channel(s.target, g_round_tls, TRAINER_TOKEN);
  WT_ASSERT_OK(wtt_init_grpc(s.ch, 0, s.workers));
  round_on_new_connection(&s, "before", 1);
  int fds0 = wtt_open_fds();
  long rss0 = wtt_rss_kib(), held0 = wtt_held_kib();

  char script[PATH_MAX], log[PATH_MAX], port[16];
  snprintf(script, sizeof(script), "%s/fixtures/h2_attack.py",
           wt_test_source_dir());
  snprintf(log, sizeof(log), "%s/%spreface-flood.log", g_dir,
           tls ? "tls-" : "");
  snprintf(port, sizeof(port), "%d", wt_server_port(s.srv));
  /* Four times the cap, reopened as fast as the server closes them (over
   * TLS: each one's handshake done first), until the rounds below are done
   * (it is stopped then; 60 s is a deadline against hanging). */
  const char *const argv[] = {
      "/usr/bin/env", "python3",
      script,         tls ? "tls-preface-flood" : "preface-flood",
      "127.0.0.1",    port,
      "60",           "256",
      pki("ca.pem"),  NULL};
  wt_rpc_conn_counts before;
  wt_server_conn_counts(s.srv, &before);
  pid_t pid = wt_proc_spawn(argv, log, NULL);
  CU_ASSERT_FATAL(pid > 0);
  /* The looks start once the flood does: its first 32 connections
   * accepted. (Python's start took over the 2 s of looks once, beside the
   * vLLM tests: "at most 1 open in 40 looks".) */
  for (int64_t t0 = wt_mono_ms(); wt_mono_ms() - t0 < 30000;) {
    wt_rpc_conn_counts c;
    wt_server_conn_counts(s.srv, &c);
    if (c.accepted >= before.accepted + 32 || !child_running(pid)) break;
    wtt_sleep_ms(10);
  }
  /* The flood holds the cap. One look at the count can land between an
   * eviction and the attacker's reopen (CI saw 10 of 64 once on a busy
   * machine), so the count is read every 50 ms for 2 s: no look may
   * exceed the cap, and the fullest must show the flood took the places. */
  int peak = 0, over = 0, looks = 0;
  for (int64_t t0 = wt_mono_ms(); wt_mono_ms() - t0 < 2000; looks++) {
    wt_rpc_conn_counts during;
    wt_server_conn_counts(s.srv, &during);
    if (during.open > peak) peak = during.open;
    over += during.open > 64;
    wtt_sleep_ms(50);
  }
  int64_t worst = 0;
  for (int i = 0; i < 3; i++) {
    char v[16];
    snprintf(v, sizeof(v), "flood-%d", i);
    int64_t took = round_on_new_connection(&s, v, 10 + (uint64_t)i);
    if (took > worst) worst = took;
    wtt_sleep_ms(300);
  }
  /* The flood went on throughout; it ends now (SIGUSR1: it reports and
   * closes its connections, as at the end of its time). */
  CU_ASSERT(child_running(pid));
  kill(pid, SIGUSR1);
  int status = 0;
  CU_ASSERT(wt_proc_wait(pid, 30000, &status));
  int64_t after = round_on_new_connection(&s, "after", 20);
  wtt_assert_model_seed(&s, 20);
  /* The strangers' connections close as they leave. */
  int fds1 = -1;
  for (int i = 0; i < 30; i++) {
    fds1 = wtt_open_fds();
    if (fds1 <= fds0 + 2) break;
    wtt_sleep_ms(100);
  }
  wt_rpc_conn_counts cc;
  wt_server_conn_counts(s.srv, &cc);
  char line[256] = "", note[64];
  FILE *f = fopen(log, "r");
  if (f) {
    if (!fgets(line, sizeof(line), f)) line[0] = 0;
    fclose(f);
  }
  line[strcspn(line, "\n")] = 0;
  printf(
      "\n  %s\n  server: cap %d, at most %d open in %d looks during the "
      "flood (%d over the cap); %" PRIu64 " accepted, %" PRIu64
      " evicted, %" PRIu64 " expired, %" PRIu64 " refused, %" PRIu64
      " shed; rounds on a new connection: worst %lld ms "
      "during, %lld ms just after; descriptors %d -> %d, RSS %ld -> %ld "
      "MiB%s\n",
      line, cc.limit, peak, looks, over, cc.accepted, cc.evicted, cc.expired,
      cc.refused, cc.shed, (long long)worst, (long long)after, fds0, fds1,
      rss0 / 1024, wtt_rss_kib() / 1024, held_note(note, sizeof(note), held0));
  CU_ASSERT_EQUAL(cc.limit, 64);
  CU_ASSERT_EQUAL(over, 0);
  CU_ASSERT(peak >= 32); /* the flood did hold the server's places */
  CU_ASSERT(cc.evicted + cc.expired > 0);
  CU_ASSERT(worst < 3000);
  CU_ASSERT(after < 1000);
  CU_ASSERT(fds1 <= fds0 + 2);
  CU_ASSERT(wtt_held_kib() - held0 < ATTACK_GROWTH_KIB);
  g_round_tls = NULL;
  wtt_server_stop(&s);
}

static void test_connection_flood(void) {
  connection_flood(false);
}

/* The same over TLS: the server terminates TLS itself (gRPC 1.51's TLS
 * listener had no cap and no grace), so the flood of connections that
 * finish their handshake and then say nothing meets the same limits. */
static void test_connection_flood_tls(void) {
  connection_flood(true);
}

/* What a TLS server refuses in its handshake, and a stranger's silence
 * before it: closed at the grace like any connection without an
 * authorized call. */
static void test_tls_handshakes(void) {
  char target[64];
  wt_server_options o = {.tls_cert = pki("server.pem"),
                         .tls_key = pki("server.key"),
                         .token_file = g_tokens,
                         .auth_grace_ms = 1000};
  wt_server *srv = start(o, target, sizeof(target));
  int fds0 = wtt_open_fds();
  /* 32 connections that never send their ClientHello. */
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)wt_server_port(srv)),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int socks[32], nclosed = 0;
  for (int i = 0; i < 32; i++) {
    socks[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CU_ASSERT_FATAL(socks[i] >= 0);
    CU_ASSERT(connect(socks[i], (struct sockaddr *)&a, sizeof(a)) == 0);
  }
  int64_t t0 = wt_mono_ms();
  for (int i = 0; i < 32; i++) {
    struct pollfd p = {.fd = socks[i], .events = POLLIN};
    char b;
    int left = (int)(3000 - (wt_mono_ms() - t0));
    if (poll(&p, 1, left > 0 ? left : 0) == 1 && read(socks[i], &b, 1) <= 0)
      nclosed++;
    close(socks[i]);
  }
  int64_t took = wt_mono_ms() - t0;
  CU_ASSERT_EQUAL(nclosed, 32);
  CU_ASSERT(took < 2500);

  char out[2048] = "";
  bool ran = false;
  if (have_h2()) { /* python3 with its ssl module */
    char script[PATH_MAX], log[PATH_MAX], port[16];
    snprintf(script, sizeof(script), "%s/fixtures/h2_attack.py",
             wt_test_source_dir());
    snprintf(log, sizeof(log), "%s/tls-probe.log", g_dir);
    snprintf(port, sizeof(port), "%d", wt_server_port(srv));
    const char *const argv[] = {"/usr/bin/env", "python3", script, "tls-probe",
                                "127.0.0.1",    port,      "10",   "0",
                                pki("ca.pem"),  NULL};
    char *text = NULL;
    CU_ASSERT_EQUAL(wt_proc_run(argv, log, 30000, &text), 0);
    snprintf(out, sizeof(out), "%s", text ? text : "");
    free(text);
    ran = true;
    CU_ASSERT_PTR_NULL(strstr(out, "WRONG"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "ok: no ALPN h2 offered: refused"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(out, "ok: no ALPN extension at all: refused"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "ok: TLS 1.1 at most: refused"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "ok: a ClientHello cut short: closed"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(out, "ok: ALPN h2, TLS 1.2 or later: accepted (alpn h2)"));
  }
  /* The server still serves TLS, and its descriptors came back. */
  wt_rpc_tls ok = {.ca_file = pki("ca.pem")};
  wt_rpc_channel *ch = channel(target, &ok, TRAINER_TOKEN);
  WT_ASSERT_OK(info_call(ch));
  wt_rpc_channel_destroy(ch);
  int fds1 = -1;
  for (int i = 0; i < 30; i++) {
    fds1 = wtt_open_fds();
    if (fds1 <= fds0 + 3) break;
    wtt_sleep_ms(100);
  }
  CU_ASSERT(fds1 <= fds0 + 3);
  wt_rpc_conn_counts cc;
  wt_server_conn_counts(srv, &cc);
  printf(
      "\n  32 silent connections to a TLS server: all closed within %lld ms "
      "(grace 1 s; %" PRIu64 " expired); descriptors %d -> %d\n%s",
      (long long)took, cc.expired, fds0, fds1,
      ran ? out : "  (handshake probes skipped: no python3 h2)\n");
  wt_server_stop(srv);
}

/* Descriptors ran out anyway (something else took them): the listener
 * closes the waiting connection with a spare descriptor and keeps
 * accepting; once descriptors are back a call is answered. (gRPC 1.51's
 * own listener never accepted again after one EMFILE.) */
static void accept_after_emfile(bool tls) {
  char target[64];
  wt_server_options o = {.token_file = g_tokens};
  wt_rpc_tls ctls = {.ca_file = pki("ca.pem")};
  if (tls) {
    o.tls_cert = pki("server.pem");
    o.tls_key = pki("server.key");
  }
  const wt_rpc_tls *ct = tls ? &ctls : NULL;
  wt_server *srv = start(o, target, sizeof(target));
  wt_rpc_channel *ch = channel(target, ct, TRAINER_TOKEN);
  WT_ASSERT_OK(info_call(ch));
  wt_rpc_channel_destroy(ch);

  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)wt_server_port(srv)),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  static int filler[1 << 16];
  size_t nfill = 0;
  while (nfill < sizeof(filler) / sizeof(filler[0])) {
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    filler[nfill++] = fd;
  }
  CU_ASSERT_FATAL(nfill > 0);
  close(filler[--nfill]); /* room for the stranger's socket only */
  int sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool closed = false;
  if (sock >= 0 && connect(sock, (struct sockaddr *)&a, sizeof(a)) == 0) {
    struct pollfd p = {.fd = sock, .events = POLLIN};
    char b;
    closed = poll(&p, 1, 3000) == 1 && read(sock, &b, 1) <= 0;
  }
  if (sock >= 0) close(sock);
  while (nfill > 0) close(filler[--nfill]);
  CU_ASSERT(closed);
  wt_rpc_conn_counts cc;
  wt_server_conn_counts(srv, &cc);
  CU_ASSERT(cc.shed >= 1);
  ch = channel(target, ct, TRAINER_TOKEN);
  int64_t t0 = wt_mono_ms();
  WT_ASSERT_OK(info_call(ch));
  printf("\n  %s out of descriptors: the connection was %s, %" PRIu64
         " shed; then a call answered in %lld ms\n",
         tls ? "TLS:" : "plaintext:", closed ? "closed at once" : "NOT closed",
         cc.shed, (long long)(wt_mono_ms() - t0));
  wt_rpc_channel_destroy(ch);
  wt_server_stop(srv);
}

static void test_accept_after_emfile(void) {
  accept_after_emfile(false);
  accept_after_emfile(true);
}

/* ---- readers: quotas per peer, and below rounds ----------------------------
 */

static wt_status *checksum_call(wt_rpc_channel *ch, int64_t deadline_ms) {
  Wt__V1__ChecksumWeightsRequest req = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  return wt_rpc_unary(ch, WTT_SVC "ChecksumWeights", &req.base,
                      &wt__v1__checksum_weights_response__descriptor,
                      deadline_ms, NULL);
}

/* Runs `argv` as uid/gid 65534 (setpriv), for a second peer on this host;
 * false when this process cannot (not root, or no setpriv). */
static bool as_nobody(const char *tag, const char *const *argv, int *code,
                      char **out) {
  if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0) return false;
  const char *full[16] = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                          "--clear-groups"};
  size_t n = 4;
  for (size_t i = 0; argv[i] && n + 1 < 16; i++) full[n++] = argv[i];
  full[n] = NULL;
  char log[PATH_MAX];
  snprintf(log, sizeof(log), "%s/%s.log", g_dir, tag);
  *code = wt_proc_run(full, log, 30000, out);
  return true;
}

/* Trust row 3: another allowed uid opens 40 connections to the export,
 * half of them stuck in half a frame, the rest idle. It gets its share of
 * the 64 places (32), the half frames are closed at the frame deadline
 * and the idle ones at the idle limit, and the server's own uid's consumer
 * is served all along. */
static void test_export_shares(void) {
  if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0) {
    wt_test_skip("export shares",
                 "needs root and setpriv to run as another uid");
    return;
  }
  /* a directory the other uid can reach (the suite's own is private) */
  char dir[] = "/tmp/wt-export-shares-XXXXXX", sock[64];
  CU_ASSERT_FATAL(mkdtemp(dir) != NULL && chmod(dir, 0711) == 0);
  snprintf(sock, sizeof(sock), "%s/export.sock", dir);
  unsigned nobody = 65534;
  wtt_server s;
  wt_server_options o = {.token_file = g_tokens,
                         .memory = WT_MEM_SHARED,
                         .export_path = sock,
                         .export_allow_uids = &nobody,
                         .n_export_allow_uids = 1,
                         .export_frame_ms = 1000,
                         .export_idle_ms = 3000};
  wtt_server_start(&s, "tiny", &o);
  wt_rpc_channel_destroy(s.ch);
  s.ch = channel(s.target, NULL, TRAINER_TOKEN);
  WT_ASSERT_OK(wtt_init_grpc(s.ch, 0, s.workers));
  wtt_commit_round(&s, "v1", 1);
  char script[PATH_MAX], log[PATH_MAX];
  snprintf(script, sizeof(script), "%s/fixtures/export_hold.py",
           wt_test_source_dir());
  snprintf(log, sizeof(log), "%s/export-hold.log", g_dir);
  const char *const argv[] = {"/usr/bin/setpriv",
                              "--reuid=65534",
                              "--regid=65534",
                              "--clear-groups",
                              "/usr/bin/env",
                              "python3",
                              script,
                              sock,
                              "40",
                              "12",
                              "20",
                              NULL};
  pid_t pid = wt_proc_spawn(argv, log, NULL);
  CU_ASSERT_FATAL(pid > 0);
  /* Its connections are in (it says so once it made them; 10 s is a
   * deadline against hanging). */
  CU_ASSERT_FATAL(wt_proc_wait_for_text(log, "connected:", pid, 10000));
  /* The server's own uid is served beside them, every time. */
  int served = 0;
  for (int i = 0; i < 10; i++) {
    wt_consumer *c = NULL;
    wt_consumer_version *v = NULL;
    wt_status *st = wt_consumer_connect(sock, NULL, &c);
    if (st == NULL) st = wt_consumer_acquire(c, NULL, &v);
    if (st == NULL && strcmp(v->version, "v1") == 0) served++;
    if (st != NULL) fprintf(stderr, "\n  consumer: %s", wt_status_message(st));
    wt_status_free(st);
    if (v) wt_status_free(wt_consumer_release(c, v));
    wt_consumer_close(c);
    wtt_sleep_ms(100);
  }
  CU_ASSERT_EQUAL(served, 10);
  int status = 0;
  CU_ASSERT(wt_proc_wait(pid, 30000, &status));
  FILE *f = fopen(log, "r");
  char line[512] = "", buf[512];
  while (f && fgets(buf, sizeof(buf), f))
    if (strncmp(buf, "export-hold:", 12) == 0)
      snprintf(line, sizeof(line), "%s", buf);
  if (f) fclose(f);
  int conns = 0, refused = 0;
  double half = -1, idle = -1;
  CU_ASSERT_EQUAL(sscanf(line,
                         "export-hold: %d connected, %d refused at once; "
                         "half frames closed after %lf s (0 still open); "
                         "idle closed after %lf s (0 still open)",
                         &conns, &refused, &half, &idle),
                  4);
  CU_ASSERT_EQUAL(conns, 40);
  CU_ASSERT_EQUAL(refused, 8); /* its share: 64 / (1 uid + 1) = 32 */
  CU_ASSERT(half > 0 && half < 3.0);
  CU_ASSERT(idle >= 2.5 && idle < 7.0);
  printf(
      "\n  another uid's 40 connections: %s; the server's uid served %d of "
      "10\n",
      line, served);
  wtt_server_stop(&s);
  unlink(sock);
  rmdir(dir);
}

/* #20, attack 8 and 7's share: one peer (a user on this host) may hold at
 * most its quota of watch streams and of reader calls running or waiting;
 * beyond it that peer is refused naming the limit, and another peer is
 * still served. */
static void test_reader_quotas(void) {
  wtt_server s;
  wt_server_options o = {.token_file = g_tokens,
                         .max_watchers = 8,
                         .max_watchers_per_peer = 2,
                         .max_reader_calls = 1,
                         .max_reader_calls_per_peer = 1,
                         .reader_bytes_per_sec = 1 << 20};
  wtt_server_start(&s, "small", &o);
  wt_rpc_channel_destroy(s.ch);
  s.ch = channel(s.target, NULL, TRAINER_TOKEN);
  WT_ASSERT_OK(wtt_init_grpc(s.ch, 0, s.workers));
  wtt_commit_round(&s, "v1", 1);
  wt_rpc_channel *rd = channel(s.target, NULL, READER_TOKEN);
  /* A peer alone may use the whole class, not only its floor (2): all 8
   * watches; the ninth finds the class full. */
  wt_rpc_server_stream *w[8];
  for (int i = 0; i < 8; i++) w[i] = wtt_watch_open(rd);
  WT_ASSERT_ERR(wtt_watch_open_status(rd), WT_RESOURCE_EXHAUSTED,
                "8 watch streams open");
  /* Reader calls: one runs (a slow checksum, 1 MiB/s for 3.3 MiB) and 64
   * may wait; alone, this peer's six are all taken. */
  wt_rpc_pending *bg[6];
  Wt__V1__ChecksumWeightsRequest creq = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  for (int i = 0; i < 6; i++)
    WT_ASSERT_OK(wt_rpc_unary_start(
        rd, WTT_SVC "ChecksumWeights", &creq.base,
        &wt__v1__checksum_weights_response__descriptor, 30000, &bg[i]));
  int running = 0, queued = 0;
  for (int i = 0; i < 200 && running + queued < 6; i++) {
    wt_server_admission(s.srv, WT_SERVER_CLASS_READER, &running, &queued, NULL);
    if (running + queued < 6) wtt_sleep_ms(10);
  }
  CU_ASSERT_EQUAL(running + queued, 6);
  /* The trainer's own reader calls are not this uid's reader share: they
   * run in the round class, at once, beside six readers of its uid. */
  int64_t t0 = wt_mono_ms();
  WT_ASSERT_OK(info_call(s.ch));
  CU_ASSERT(wt_mono_ms() - t0 < 1000);
  /* Another user on this host is another peer: once ours leave room, its
   * watch is served, and ours are held to their share (8 / 2 peers). */
  for (int i = 6; i < 8; i++) wt_rpc_server_stream_destroy(w[i]);
  int held = -1;
  for (int i = 0; i < 200 && held != 6; i++) {
    wt_server_admission(s.srv, WT_SERVER_CLASS_WATCH, &held, NULL, NULL);
    if (held != 6) wtt_sleep_ms(10);
  }
  char nd[] = "/tmp/wt-nobody-XXXXXX", tok[64];
  CU_ASSERT_FATAL(mkdtemp(nd) != NULL && chmod(nd, 0711) == 0);
  snprintf(tok, sizeof(tok), "%s/token", nd);
  write_file(tok, "reader " READER_TOKEN "\n", 0600);
  int code = -1;
  char *out = NULL;
  const char *const watch[] = {WT_CTL_BIN,     "--server", s.target,
                               "--token-file", tok,        "watch",
                               "--count",      "1",        NULL};
  if (chown(tok, 65534, 65534) == 0 &&
      as_nobody("quota-nobody-watch", watch, &code, &out)) {
    CU_ASSERT_EQUAL(code, 0);
    CU_ASSERT_PTR_NOT_NULL(out ? strstr(out, "v1") : NULL);
    free(out);
    printf(
        "\n  another uid on this host: a watch served beside this uid's "
        "six");
  } else {
    printf(
        "\n  skipped: a second peer (needs root and setpriv to run as "
        "another uid)");
  }
  unlink(tok);
  rmdir(nd);
  /* The six reader calls have been looked at: they are cancelled now
   * rather than waited for (one at a time, 3.3 s each: about 20 s), and
   * their places come back too. */
  for (int i = 0; i < 6; i++) wt_rpc_pending_cancel(bg[i]);
  for (int i = 0; i < 6; i++) wt_status_free(wt_rpc_pending_wait(bg[i], NULL));
  for (int i = 0; i < 6; i++) wt_rpc_server_stream_destroy(w[i]);
  /* The places come back as the calls end. */
  held = -1;
  for (int i = 0; i < 200 && held != 0; i++) {
    wt_server_admission(s.srv, WT_SERVER_CLASS_WATCH, &held, NULL, NULL);
    if (held != 0) wtt_sleep_ms(10);
  }
  CU_ASSERT_EQUAL(held, 0);
  for (int64_t end = wt_mono_ms() + 10000;
       wt_server_admission(s.srv, WT_SERVER_CLASS_READER, &running, &queued,
                           NULL),
               running + queued != 0 && wt_mono_ms() < end;)
    wtt_sleep_ms(10);
  CU_ASSERT_EQUAL(running + queued, 0);
  WT_ASSERT_OK(wtt_watch_open_status(rd));
  printf("\n");
  wt_rpc_channel_destroy(rd);
  wtt_server_stop(&s);
}

typedef struct checksum_loop {
  const char *target;
  atomic_bool *stop;
  int calls, refused;
  pthread_t th;
} checksum_loop;

static void *checksum_loop_main(void *arg) {
  checksum_loop *l = arg;
  wt_rpc_channel *ch = channel(l->target, NULL, READER_TOKEN);
  while (!atomic_load(l->stop)) {
    wt_status *st = checksum_call(ch, 30000);
    l->calls++;
    if (st != NULL) {
      l->refused++;
      wtt_sleep_ms(20);
    }
    wt_status_free(st);
  }
  wt_rpc_channel_destroy(ch);
  return NULL;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Median of `n` rounds' ms (each start, push of the whole model, finish). */
static int64_t median_round_ms(wtt_server *s, int n, uint64_t seed) {
  int64_t t[16];
  for (int i = 0; i < n && i < 16; i++) {
    char v[32];
    snprintf(v, sizeof(v), "r%llu-%d", (unsigned long long)seed, i);
    int64_t t0 = wt_mono_ms();
    wtt_commit_round(s, v, seed + (uint64_t)i);
    t[i] = wt_mono_ms() - t0;
  }
  qsort(t, (size_t)n, sizeof(t[0]), cmp_i64);
  return t[n / 2];
}

/* #20, attack 7: 16 loops of full-model SHA-256 checksums from one reader
 * (a round went 0.18 s -> 2.24 s). Now that peer runs at most its quota of
 * them, on threads niced below the rounds', each hashing in 1 MiB parts
 * under the store's lock and paid for from the peer's budget: a round
 * beside them stays within 1.5x of the round alone. */
static void test_readers_below_rounds(void) {
  wtt_server s;
  wt_server_options o = {.token_file = g_tokens};
  wtt_server_start(&s, "llama-256m", &o);
  wt_rpc_channel_destroy(s.ch);
  s.ch = channel(s.target, NULL, TRAINER_TOKEN);
  WT_ASSERT_OK(wtt_init_grpc(s.ch, 0, s.workers));
  wtt_commit_round(&s, "warm", 1);
  int64_t alone = median_round_ms(&s, 5, 100);
  atomic_bool stop;
  atomic_init(&stop, false);
  checksum_loop loops[16];
  for (int i = 0; i < 16; i++) {
    loops[i] = (checksum_loop){.target = s.target, .stop = &stop};
    CU_ASSERT_FATAL(
        pthread_create(&loops[i].th, NULL, checksum_loop_main, &loops[i]) == 0);
  }
  /* The loops' checksums run (10 s: a deadline against hanging). */
  int running = 0;
  for (int64_t end = wt_mono_ms() + 10000;
       running == 0 && wt_mono_ms() < end;) {
    wt_server_admission(s.srv, WT_SERVER_CLASS_READER, &running, NULL, NULL);
    if (running == 0) wtt_sleep_ms(5);
  }
  CU_ASSERT(running > 0);
  int64_t beside = median_round_ms(&s, 5, 200);
  atomic_store(&stop, true);
  int calls = 0, refused = 0;
  for (int i = 0; i < 16; i++) {
    pthread_join(loops[i].th, NULL);
    calls += loops[i].calls;
    refused += loops[i].refused;
  }
  /* Read in-process: on a loaded host (scripts/test.sh --loaded) the
   * readers' niced hashing threads get a few percent of the CPUs, and a
   * ChecksumWeights of 504 MiB then outlasts its 10 s deadline, by
   * design (readers come after everything else). */
  wtt_assert_model_seed_direct(&s, 204);
  printf(
      "\n  llama-256m round (median of 5): %lld ms alone, %lld ms beside "
      "16 checksum loops of one peer (%d calls ended, %d refused or "
      "aborted: its quota, or a commit); ratio %.2f\n",
      (long long)alone, (long long)beside, calls, refused,
      (double)beside / (double)(alone ? alone : 1));
  /* The 1.5x of the issue is what this prints on a quiet machine (1.13 to
   * 1.22 on the 2-core VM); the assertion leaves room for a CI machine's
   * noise and still fails the old 12x at once. */
  CU_ASSERT(beside <= alone * 2 + 20);
  wtt_server_stop(&s);
}

/* ---- secure by default ----------------------------------------------------
 */

/* wt-server with no trust flags (#20): fresh tokens in a 0600 file in a
 * 0700 runtime directory; wt-ctl and the client library of the same user
 * find them, a caller without a token is refused, another uid cannot read
 * the file, it is gone after the stop; a runtime directory others may enter
 * fails the start; --no-auth runs open and says so in its log and in
 * GetServerInfo. */
static void test_default_auth(void) {
  char run[PATH_MAX], dir[PATH_MAX + 8], path[PATH_MAX + 32], log[PATH_MAX];
  snprintf(run, sizeof(run), "%s/run", g_dir);
  mkdir(run, 0700);
  const char *was = getenv("XDG_RUNTIME_DIR");
  char *saved = was ? strdup(was) : NULL;
  setenv("XDG_RUNTIME_DIR", run, 1); /* the tools and the server read it */

  wt_proc_server p;
  const char *const extra[] = {"--auth", "--model", "synthetic:tiny", NULL};
  CU_ASSERT_FATAL(wt_proc_server_start(&p, g_dir, "default-auth", extra));
  int port = atoi(strrchr(p.addr, ':') + 1);
  snprintf(dir, sizeof(dir), "%s/wt", run);
  wt_runtime_token_path(dir, port, path, sizeof(path));
  char *text = wt_proc_read_file(p.log);
  CU_ASSERT_PTR_NOT_NULL(text ? strstr(text, path) : NULL); /* says where */
  free(text);
  struct stat sd, sf;
  CU_ASSERT_FATAL(stat(dir, &sd) == 0 && stat(path, &sf) == 0);
  CU_ASSERT_EQUAL(sd.st_mode & 0777, 0700);
  CU_ASSERT_EQUAL(sf.st_mode & 0777, 0600);
  CU_ASSERT_EQUAL(sf.st_uid, geteuid());

  /* The tool finds the token; GetServerInfo says how calls are checked. */
  snprintf(log, sizeof(log), "%s/default-auth-ctl.log", g_dir);
  const char *const ctl[] = {WT_CTL_BIN, "--server", p.addr, "info", NULL};
  char *out = NULL;
  CU_ASSERT_EQUAL(wt_proc_run(ctl, log, 30000, &out), 0);
  CU_ASSERT_PTR_NOT_NULL(out ? strstr(out, "auth:         generated") : NULL);
  free(out);
  /* So does the library, for the same user and a loopback target. */
  const char *targets[] = {p.addr};
  wt_client_options co = {.runtime_base = run};
  wt_sync_client *c = NULL;
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, &co, &c));
  uint32_t ws = 0;
  WT_ASSERT_OK(wt_sync_client_world_size(c, &ws));
  CU_ASSERT_EQUAL(ws, 2); /* the trainer and the server's one worker */
  wt_sync_client_destroy(c);
  /* A caller without it is refused. */
  wt_rpc_channel *ch = channel(p.addr, NULL, NULL);
  WT_ASSERT_ERR(info_call(ch), WT_UNAUTHENTICATED, "bearer token");
  wt_rpc_channel_destroy(ch);
  /* Another uid cannot read it (as root a child can become nobody). */
  if (geteuid() == 0) {
    pid_t kid = fork();
    if (kid == 0) {
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
      int fd = open(path, O_RDONLY);
      _exit(fd < 0 && errno == EACCES ? 0 : 1);
    }
    int status = -1;
    CU_ASSERT_FATAL(kid > 0 && waitpid(kid, &status, 0) == kid);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  } else {
    printf(
        "\n  skipped: reading the token file as another uid (needs root "
        "to become one; the modes 0700 and 0600 were checked)");
  }
  CU_ASSERT_EQUAL(wt_proc_server_stop(&p, 10000, NULL), 0);
  CU_ASSERT(access(path, F_OK) != 0); /* removed at the stop */
  /* A file left for a port no process of this user listens on (the server
   * died; another user's may hold the port now) is never used, nor is one
   * for a target off loopback. */
  write_file(path, "trainer " TRAINER_TOKEN "\n", 0600);
  char *found = NULL;
  WT_ASSERT_OK(wt_token_discover(run, p.addr, &found));
  CU_ASSERT_PTR_NULL(found);
  char far[64];
  snprintf(far, sizeof(far), "10.1.2.3:%d", port);
  WT_ASSERT_OK(wt_token_discover(run, far, &found));
  CU_ASSERT_PTR_NULL(found);
  unlink(path);

  /* A runtime directory others may enter: the start fails naming it. */
  chmod(dir, 0755);
  const char *const srv[] = {WT_SERVER_BIN, "--listen",       "127.0.0.1:0",
                             "--model",     "synthetic:tiny", NULL};
  snprintf(log, sizeof(log), "%s/default-auth-open-dir.log", g_dir);
  out = NULL;
  CU_ASSERT_EQUAL(wt_proc_run(srv, log, 30000, &out), 1);
  CU_ASSERT_PTR_NOT_NULL(out ? strstr(out, "lets others in") : NULL);
  free(out);
  chmod(dir, 0700);

  /* --no-auth: open, and said. */
  const char *const open_extra[] = {"--model", "synthetic:tiny", NULL};
  CU_ASSERT_FATAL(wt_proc_server_start(&p, g_dir, "no-auth", open_extra));
  text = wt_proc_read_file(p.log);
  CU_ASSERT_PTR_NOT_NULL(text ? strstr(text, "--no-auth: no tokens") : NULL);
  free(text);
  snprintf(log, sizeof(log), "%s/no-auth-ctl.log", g_dir);
  const char *const ctl2[] = {WT_CTL_BIN, "--server", p.addr, "info", NULL};
  out = NULL;
  CU_ASSERT_EQUAL(wt_proc_run(ctl2, log, 30000, &out), 0);
  CU_ASSERT_PTR_NOT_NULL(out ? strstr(out, "auth:         none") : NULL);
  free(out);
  wt_proc_server_stop(&p, 10000, NULL);
  if (saved) {
    setenv("XDG_RUNTIME_DIR", saved, 1);
    free(saved);
  } else {
    unsetenv("XDG_RUNTIME_DIR");
  }
}

/* Files that are not regular and signals at start-up (real processes): a
 * FIFO as wt-server's token file or model makes it exit at once naming
 * what the file is (before, the start hung with SIGTERM and SIGINT
 * blocked; only SIGKILL ended it); a SIGTERM while it loads a large model
 * ends it within a second. */
static void test_startup_files_and_signals(void) {
  char fifo[PATH_MAX], log[PATH_MAX];
  snprintf(fifo, sizeof(fifo), "%s/fifo", g_dir);
  unlink(fifo);
  CU_ASSERT_FATAL(mkfifo(fifo, 0600) == 0);
  static const char *const flags[] = {"--token-file", "--model"};
  for (size_t i = 0; i < 2; i++) {
    const char *const argv[] = {WT_SERVER_BIN, "--listen", "127.0.0.1:0",
                                flags[i],      fifo,       NULL};
    snprintf(log, sizeof(log), "%s/fifo-%zu.log", g_dir, i);
    char *out = NULL;
    int64_t t0 = wt_mono_ms();
    int code = wt_proc_run(argv, log, 10000, &out);
    CU_ASSERT_EQUAL(code, 1);
    CU_ASSERT(wt_mono_ms() - t0 < 5000);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "a FIFO, not a regular file"));
    if (out == NULL || !strstr(out, "a FIFO"))
      fprintf(stderr, "%s %s: %s\n", flags[i], fifo, out ? out : "");
    free(out);
  }
  unlink(fifo);
  /* SIGTERM while a 1 GiB model is being made: out at once, saying so. */
  const char *const argv[] = {WT_SERVER_BIN,        "--listen",
                              "127.0.0.1:0",        "--model",
                              "synthetic:bench-1g", NULL};
  snprintf(log, sizeof(log), "%s/start-sigterm.log", g_dir);
  pid_t pid = wt_proc_spawn(argv, log, NULL);
  CU_ASSERT_FATAL(pid > 0);
  /* Once it takes signals (before, a signal ends a process by default: it
   * has not reached main yet). */
  CU_ASSERT(wt_proc_wait_for_text(log, "starting: loading", pid, 20000));
  int64_t t0 = wt_mono_ms();
  CU_ASSERT_EQUAL(kill(pid, SIGTERM), 0);
  int status = 0;
  CU_ASSERT(wt_proc_wait(pid, 10000, &status));
  int64_t ms = wt_mono_ms() - t0;
  printf("\n  SIGTERM during start-up: exited after %lld ms", (long long)ms);
  CU_ASSERT(ms < 2000);
  CU_ASSERT(WIFEXITED(status));
  char *text = wt_proc_read_file(log);
  /* Either it was still starting (the usual case) or it had started and
   * stopped cleanly; never a hang. */
  CU_ASSERT(text && (strstr(text, "during start-up") ||
                     (WIFEXITED(status) && WEXITSTATUS(status) == 0)));
  free(text);
}

void wt_test_suite_trust(void) {
  CU_pSuite s = CU_add_suite("trust", suite_init, suite_clean);
  CU_add_test(s, "bearer tokens and scopes", test_tokens);
  CU_add_test(s, "token files", test_token_files);
  CU_add_test(s, "start-up: FIFOs refused, signals taken",
              test_startup_files_and_signals);
  CU_add_test(s, "TLS", test_tls);
  CU_add_test(s, "mutual TLS", test_mutual_tls);
  CU_add_test(s, "TLS: a call in flight when the server stops",
              test_tls_stop_in_flight);
  CU_add_test(s, "strings are UTF-8", test_strings_are_utf8);
  CU_add_test(s, "listen beyond loopback", test_listen_beyond_loopback);
  CU_add_test(s, "HTTP/2 attacks", test_http2_attacks);
  CU_add_test(s, "health: public, and nothing more",
              test_health_is_public_only);
  CU_add_test(s, "health: Health.Watch apart from the readers' watches",
              test_health_watch_apart);
  CU_add_test(s, "streams: a client that reads nothing is ended",
              test_stalled_readers_ended);
  CU_add_test(s, "connections: a preface-only flood", test_connection_flood);
  CU_add_test(s, "connections: a preface-only flood over TLS",
              test_connection_flood_tls);
  CU_add_test(s, "connections: TLS handshakes refused, silence closed",
              test_tls_handshakes);
  CU_add_test(s, "connections: accepting after EMFILE",
              test_accept_after_emfile);
  CU_add_test(s, "secure by default: generated tokens, --no-auth",
              test_default_auth);
  CU_add_test(s, "readers: quotas per peer", test_reader_quotas);
  CU_add_test(s, "export: a uid's share, idle and half-frame connections",
              test_export_shares);
  CU_add_test(s, "readers: below rounds", test_readers_below_rounds);
}
