/* test_interop_python.c: the wire contract from another language.
 *
 * tests/interop/push_client.py (grpcio, stubs generated from proto/ at test
 * time) drives a real wt-server that serves a checkpoint the Python
 * safetensors package wrote, so both sides know every byte without wt's
 * synthetic generator: it lists the parameters, pushes new values with its
 * own implementation of the packing rule, and compares the server's SHA-256
 * digests with hashlib's. This suite then checks from C what the Python
 * client left behind: the version, and the digests on every worker.
 *
 * Skipped, saying why, where python3 or one of its modules is missing.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/pb.h"
#include "wt/rpc.h"
#include "wt/v1/wt.pb-c.h"
#include "support/wt_proc.h"
#include "wt_test.h"

#define PY_MS 120000
#define WORKERS 2

static char *g_tmp;
static wt_rpc_channel *g_ch;
static json_t *g_expected;

static int suite_init(void) {
  g_tmp = wt_test_tmpdir();
  return g_tmp ? 0 : 1;
}

static int suite_clean(void) {
  wt_test_rmtree(g_tmp);
  free(g_tmp);
  g_tmp = NULL;
  return 0;
}

static void test_setup(void) {}

static void test_teardown(void) {
  wt_proc_kill_all();
  wt_rpc_channel_destroy(g_ch);
  g_ch = NULL;
  json_decref(g_expected);
  g_expected = NULL;
}

/* Runs argv with output into TMP/TAG.log; prints it when the exit code is
 * not 0. Returns the code; *out (may be NULL) gets the output. */
static int run(const char *tag, const char *const argv[], char **out) {
  char log[PATH_MAX];
  snprintf(log, sizeof(log), "%s/%s.log", g_tmp, tag);
  char *text = NULL;
  int code = wt_proc_run(argv, log, PY_MS, &text);
  if (code != 0) wt_proc_dump(tag, log);
  if (out)
    *out = text;
  else
    free(text);
  return code;
}

static void python_client(bool tls) {
  const char *const probe[] = {
      "/usr/bin/env", "python3", "-c",
      "import grpc, grpc_tools.protoc, safetensors.numpy, numpy", NULL};
  char log[PATH_MAX];
  snprintf(log, sizeof(log), "%s/probe.log", g_tmp);
  char *said = NULL;
  if (wt_proc_run(probe, log, PY_MS, &said) != 0) {
    /* The last line names what is missing ("No module named 'grpc_tools'",
     * or env's "No such file or directory" for python3 itself). */
    size_t len = said ? strlen(said) : 0;
    while (len > 0 && said[len - 1] == '\n') said[--len] = '\0';
    const char *last = said ? strrchr(said, '\n') : NULL;
    last = last ? last + 1 : (said ? said : "");
    char why[512];
    snprintf(why, sizeof(why),
             "needs python3 with grpcio, grpcio-tools, safetensors and "
             "numpy (%s)",
             last);
    wt_test_skip("python client", why);
    free(said);
    return;
  }
  free(said);

  char script[PATH_MAX], ckpt[PATH_MAX], expected[PATH_MAX];
  snprintf(script, sizeof(script), "%s/interop/push_client.py",
           wt_test_source_dir());
  snprintf(ckpt, sizeof(ckpt), "%s/model.safetensors", g_tmp);
  snprintf(expected, sizeof(expected), "%s/expected.json", g_tmp);

  const char *const make[] = {"/usr/bin/env",    "python3", script,
                              "make-checkpoint", ckpt,      NULL};
  CU_ASSERT_EQUAL_FATAL(run("make-checkpoint", make, NULL), 0);

  /* Over TLS: a throw-away PKI; the server terminates TLS itself
   * (OpenSSL), the client is grpcio's (BoringSSL). */
  char pki[PATH_MAX], cert[PATH_MAX + 16], key[PATH_MAX + 16],
      ca[PATH_MAX + 16];
  snprintf(pki, sizeof(pki), "%s/pki", g_tmp);
  snprintf(cert, sizeof(cert), "%s/server.pem", pki);
  snprintf(key, sizeof(key), "%s/server.key", pki);
  snprintf(ca, sizeof(ca), "%s/ca.pem", pki);
  if (tls) {
    char mk[PATH_MAX];
    snprintf(mk, sizeof(mk), "%s/support/make-certs.sh", wt_test_source_dir());
    const char *const certs[] = {"/bin/sh", mk, pki, NULL};
    CU_ASSERT_EQUAL_FATAL(run("make-certs", certs, NULL), 0);
  }
  wt_proc_server s;
  const char *const plain_args[] = {"--model", ckpt, "--workers", "2", NULL};
  const char *const tls_args[] = {"--model",   ckpt,         "--workers",
                                  "2",         "--tls-cert", cert,
                                  "--tls-key", key,          NULL};
  CU_ASSERT_FATAL(wt_proc_server_start(&s, g_tmp,
                                       tls ? "py-tls-server" : "py-server",
                                       tls ? tls_args : plain_args));

  const char *const push[] = {"/usr/bin/env",
                              "python3",
                              script,
                              "push",
                              "--server",
                              s.addr,
                              "--checkpoint",
                              ckpt,
                              "--proto-dir",
                              WT_PROTO_DIR,
                              "--version",
                              "py-v1",
                              "--expected-json",
                              expected,
                              tls ? "--tls-ca" : NULL,
                              ca,
                              NULL};
  char *out = NULL;
  CU_ASSERT_EQUAL(run(tls ? "push-client-tls" : "push-client", push, &out), 0);
  CU_ASSERT_PTR_NOT_NULL(out ? strstr(out, "interop: OK") : NULL);
  free(out);

  /* What the Python client committed, seen from C on every worker. */
  json_error_t jerr;
  g_expected = json_load_file(expected, 0, &jerr);
  if (!g_expected) fprintf(stderr, "\n  %s: %s\n", expected, jerr.text);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g_expected);
  json_t *digests = json_object_get(g_expected, "sha256");
  CU_ASSERT_FATAL(json_is_object(digests));

  wt_rpc_tls ctls = {.ca_file = ca};
  wt_rpc_channel_options o = {.default_deadline_ms = 20000,
                              .tls = tls ? &ctls : NULL};
  WT_ASSERT_OK(wt_rpc_channel_new(s.addr, &o, &g_ch));
  Wt__V1__GetWeightVersionRequest vreq =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  Wt__V1__WeightVersion *v = NULL;
  WT_ASSERT_OK(wt_rpc_unary(g_ch, "/wt.v1.WeightTransfer/GetWeightVersion",
                            &vreq.base, &wt__v1__weight_version__descriptor, 0,
                            (ProtobufCMessage **)&v));
  CU_ASSERT_STRING_EQUAL(v->version, "py-v1");
  wt_pb_free((ProtobufCMessage *)v);

  Wt__V1__ChecksumWeightsRequest creq = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  creq.all_workers = true;
  Wt__V1__ChecksumWeightsResponse *c = NULL;
  WT_ASSERT_OK(wt_rpc_unary(g_ch, "/wt.v1.WeightTransfer/ChecksumWeights",
                            &creq.base,
                            &wt__v1__checksum_weights_response__descriptor, 0,
                            (ProtobufCMessage **)&c));
  CU_ASSERT_EQUAL(c->n_checksums, json_object_size(digests) * WORKERS);
  size_t bad = 0;
  for (size_t i = 0; i < c->n_checksums; i++) {
    const char *want =
        json_string_value(json_object_get(digests, c->checksums[i]->name));
    if (!want || strcmp(want, c->checksums[i]->digest) != 0) {
      fprintf(stderr, "\n  '%s' on worker %u: %s, Python sent %s\n",
              c->checksums[i]->name, c->checksums[i]->worker,
              c->checksums[i]->digest, want ? want : "(no such tensor)");
      bad++;
    }
  }
  CU_ASSERT_EQUAL(bad, 0);
  wt_pb_free((ProtobufCMessage *)c);

  CU_ASSERT_EQUAL(wt_proc_server_stop(&s, 15000, NULL), 0);
  wt_rpc_channel_destroy(g_ch);
  g_ch = NULL;
  json_decref(g_expected);
  g_expected = NULL;
}

static void test_python_client(void) {
  python_client(false);
}
static void test_python_client_tls(void) {
  python_client(true);
}

void wt_test_suite_interop_python(void) {
  CU_pSuite s = CU_add_suite_with_setup_and_teardown(
      "interop_python", suite_init, suite_clean, test_setup, test_teardown);
  CU_add_test(s, "python grpcio client pushes and verifies",
              test_python_client);
  CU_add_test(s, "python grpcio client over TLS", test_python_client_tls);
}
