/* test_proto_python.c: the wire contract (proto/wt/v1/wt.proto) from Python.
 *
 * Generates Python stubs with PyPI's grpcio-tools, imports them, and moves
 * messages both ways between Python (google.protobuf) and C (protobuf-c),
 * so that a field one language writes is the field the other reads. The
 * Python half is tests/fixtures/proto_python.py. Skipped, with the reason,
 * where python3, grpcio or grpcio-tools is missing ($PYTHON overrides the
 * interpreter). */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wt/v1/wt.pb-c.h"
#include "wt_test.h"

#ifndef WT_PROTO_DIR
#error "tests/CMakeLists.txt passes the proto folder as WT_PROTO_DIR"
#endif

/* grpc_tools imports protobuf and grpc; a cold start takes a few seconds. */
#define RUN_TIMEOUT_S 120

static char *tmp;         /* generated stubs and exchanged files */
static char *skip_reason; /* set by the suite's init when Python is unusable */
static int stubs_ok;      /* the first test generated and imported them */

static const char *python(void) {
  const char *p = getenv("PYTHON");
  return p && *p ? p : "python3";
}

/* Runs argv (PATH searched) with stdout and stderr collected into *out
 * (malloc'd, NUL-terminated; the caller frees it). Returns the exit code, 127
 * when the program cannot be run, or -1 when it was killed (timeout). */
static int run(char *const argv[], char **out) {
  *out = NULL;
  int fd[2];
  if (pipe2(fd, O_CLOEXEC) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) {
    close(fd[0]);
    close(fd[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(fd[1], STDOUT_FILENO);
    dup2(fd[1], STDERR_FILENO);
    execvp(argv[0], argv);
    fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(fd[1]);
  size_t len = 0, cap = 4096;
  char *buf = malloc(cap);
  time_t deadline = time(NULL) + RUN_TIMEOUT_S;
  int killed = 0;
  for (;;) {
    struct pollfd p = {.fd = fd[0], .events = POLLIN};
    int r = poll(&p, 1, 1000);
    if (r < 0 && errno != EINTR) break;
    if (time(NULL) > deadline) {
      kill(pid, SIGKILL);
      killed = 1;
      break;
    }
    if (r <= 0) continue;
    if (len + 1024 > cap) {
      char *grown = realloc(buf, cap *= 2);
      if (grown == NULL) break;
      buf = grown;
    }
    ssize_t n = read(fd[0], buf + len, cap - len - 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  close(fd[0]);
  if (buf != NULL) buf[len] = '\0';
  *out = buf;
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (killed || !WIFEXITED(wstatus)) return -1;
  return WEXITSTATUS(wstatus);
}

/* Runs tests/fixtures/proto_python.py with `cmd` (and `arg`); returns its
 * output, or NULL after failing the test with what Python said. */
static char *run_helper(const char *cmd, const char *arg) {
  char script[4096];
  snprintf(script, sizeof(script), "%s/fixtures/proto_python.py",
           wt_test_source_dir());
  char *argv[] = {(char *)python(), script,      tmp,
                  (char *)cmd,      (char *)arg, NULL};
  char *out = NULL;
  int rc = run(argv, &out);
  if (rc != 0) {
    fprintf(stderr, "\n  proto_python.py %s exited %d:\n%s\n", cmd, rc,
            out ? out : "");
    free(out);
    return NULL;
  }
  return out;
}

static char *join_path(const char *dir, const char *name) {
  char *p = NULL;
  if (asprintf(&p, "%s/%s", dir, name) < 0) return NULL;
  return p;
}

static int suite_init(void) {
  tmp = wt_test_tmpdir();
  if (tmp == NULL) return 1;
  char *argv[] = {(char *)python(), "-c",
                  "import grpc, grpc_tools.protoc, google.protobuf", NULL};
  char *out = NULL;
  int rc = run(argv, &out);
  if (rc != 0) {
    /* Keep the last line: Python's "ModuleNotFoundError: ..." */
    char *last = out ? out : "";
    size_t n = strlen(last);
    while (n > 0 && last[n - 1] == '\n') last[--n] = '\0';
    char *nl = strrchr(last, '\n');
    if (asprintf(&skip_reason, "%s with grpcio and grpcio-tools not usable: %s",
                 python(), nl ? nl + 1 : last) < 0)
      skip_reason = NULL;
  }
  free(out);
  return 0;
}

static int suite_clean(void) {
  wt_test_rmtree(tmp);
  free(tmp);
  free(skip_reason);
  tmp = skip_reason = NULL;
  stubs_ok = 0;
  return 0;
}

static int skipped(const char *test) {
  if (skip_reason == NULL) return 0;
  wt_test_skip(test, skip_reason);
  return 1;
}

/* How each call streams, as the lead's proto declares it. */
static const char *expected_kind(const char *method) {
  if (strcmp(method, "PushWeights") == 0) return "stream_unary";
  if (strcmp(method, "WatchWeightVersion") == 0) return "unary_stream";
  return "unary_unary";
}

static void test_stubs(void) {
  if (skipped("python stubs")) return;
  char *argv[] = {(char *)python(),  "-m", "grpc_tools.protoc",
                  "-I" WT_PROTO_DIR, NULL, NULL,
                  "wt/v1/wt.proto",  NULL};
  char *py_out = NULL, *grpc_out = NULL, *out = NULL;
  CU_ASSERT_FATAL(asprintf(&py_out, "--python_out=%s", tmp) > 0);
  CU_ASSERT_FATAL(asprintf(&grpc_out, "--grpc_python_out=%s", tmp) > 0);
  argv[4] = py_out;
  argv[5] = grpc_out;
  int rc = run(argv, &out);
  if (rc != 0)
    fprintf(stderr, "\n  grpc_tools.protoc exited %d:\n%s\n", rc,
            out ? out : "");
  CU_ASSERT_EQUAL(rc, 0);
  free(out);
  free(py_out);
  free(grpc_out);
  for (int i = 0; i < 2; i++) {
    char *p = join_path(tmp, i ? "wt/v1/wt_pb2_grpc.py" : "wt/v1/wt_pb2.py");
    CU_ASSERT_EQUAL(access(p, R_OK), 0);
    free(p);
  }
  if (rc != 0) return;

  out = run_helper("stubs", NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(out);
  /* Python's stub has every method protobuf-c's service descriptor has, and
   * nothing else, each with the right streaming shape. */
  const ProtobufCServiceDescriptor *svc = &wt__v1__weight_transfer__descriptor;
  CU_ASSERT_EQUAL(svc->n_methods, 12);
  unsigned lines = 0;
  for (unsigned i = 0; i < svc->n_methods; i++) {
    char want[256];
    snprintf(want, sizeof(want), "method %s %s\n", svc->methods[i].name,
             expected_kind(svc->methods[i].name));
    if (strstr(out, want) == NULL)
      fprintf(stderr, "\n  Python stub lacks '%.*s'; it printed:\n%s\n",
              (int)strlen(want) - 1, want, out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
  }
  for (const char *p = out; (p = strstr(p, "method ")) != NULL; p++) lines++;
  CU_ASSERT_EQUAL(lines, svc->n_methods);
  /* Python's bytes for a ParameterInfo (which parse back equal there) are
   * the bytes protobuf-c packs for the same values. */
  int64_t shape[] = {32000, 4096};
  Wt__V1__ParameterInfo pi = WT__V1__PARAMETER_INFO__INIT;
  pi.name = "model.embed_tokens.weight";
  pi.dtype = "bfloat16";
  pi.n_shape = 2;
  pi.shape = shape;
  pi.nbytes = 32000ull * 4096 * 2;
  uint8_t packed[128];
  size_t n = wt__v1__parameter_info__get_packed_size(&pi);
  CU_ASSERT_FATAL(n <= sizeof(packed));
  wt__v1__parameter_info__pack(&pi, packed);
  char want[2 * sizeof(packed) + 16] = "roundtrip ";
  for (size_t i = 0; i < n; i++)
    snprintf(want + 10 + 2 * i, 3, "%02x", packed[i]);
  strcat(want, "\n");
  if (strstr(out, want) == NULL)
    fprintf(stderr, "\n  C packed: %s  Python printed:\n%s\n", want, out);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
  free(out);
  stubs_ok = 1;
}

static unsigned char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  unsigned char *buf = malloc(1 << 16);
  *len = buf ? fread(buf, 1, 1 << 16, f) : 0;
  fclose(f);
  return buf;
}

/* Bytes Python wrote are the values C reads: bytes, uint32, bool, a oneof,
 * a set and an unset wrapper, a map. */
static void test_python_to_c(void) {
  if (skipped("python -> C")) return;
  CU_ASSERT_TRUE_FATAL(stubs_ok);
  char *path = join_path(tmp, "init.bin");
  char *out = run_helper("write-init", path);
  CU_ASSERT_PTR_NOT_NULL_FATAL(out);
  free(out);
  size_t len = 0;
  unsigned char *bytes = read_all(path, &len);
  free(path);
  CU_ASSERT_PTR_NOT_NULL_FATAL(bytes);
  Wt__V1__InitWeightTransferEngineRequest *req =
      wt__v1__init_weight_transfer_engine_request__unpack(NULL, len, bytes);
  free(bytes);
  CU_ASSERT_PTR_NOT_NULL_FATAL(req);
  const Wt__V1__WeightTransferInitInfo *info = req->init_info;
  CU_ASSERT_PTR_NOT_NULL_FATAL(info);
  CU_ASSERT_STRING_EQUAL(info->backend, "nccl");
  CU_ASSERT_EQUAL(info->timeout_ms, 5000);
  CU_ASSERT_EQUAL_FATAL(info->backend_init_case,
                        WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_NCCL);
  const Wt__V1__NcclInitInfo *nccl = info->nccl;
  CU_ASSERT_EQUAL_FATAL(nccl->nccl_unique_id.len, 128);
  int id_ok = 1;
  for (int i = 0; i < 128; i++)
    id_ok &= nccl->nccl_unique_id.data[i] == (uint8_t)((i * 7 + 3) % 256);
  CU_ASSERT_TRUE(id_ok);
  CU_ASSERT_EQUAL(info->world_size, 3);
  CU_ASSERT_EQUAL(info->rank_offset, 1);
  CU_ASSERT_TRUE(nccl->packed);
  CU_ASSERT_PTR_NOT_NULL_FATAL(nccl->packed_buffer_size_bytes);
  CU_ASSERT_EQUAL(nccl->packed_buffer_size_bytes->value, 1073741824u);
  /* Unset in Python: absent in C, so the 2-buffer default can apply. */
  CU_ASSERT_PTR_NULL(nccl->packed_num_buffers);
  CU_ASSERT_EQUAL_FATAL(info->n_options, 1);
  CU_ASSERT_STRING_EQUAL(info->options[0]->key, "nccl_timeout_ms");
  CU_ASSERT_STRING_EQUAL(info->options[0]->value, "60000");
  wt__v1__init_weight_transfer_engine_request__free_unpacked(req, NULL);
}

/* And the other way: what C packs, Python reads field for field, including
 * a wrapper set to zero (present) next to one left unset (absent). */
static void test_c_to_python(void) {
  if (skipped("C -> python")) return;
  CU_ASSERT_TRUE_FATAL(stubs_ok);
  int64_t dims0[] = {8, 4};
  Wt__V1__Shape s0 = WT__V1__SHAPE__INIT, s1 = WT__V1__SHAPE__INIT;
  s0.n_dims = 2;
  s0.dims = dims0;
  Wt__V1__Shape *shapes[] = {&s0, &s1}; /* s1: a scalar */
  char *names[] = {"model.layers.0.mlp.up_proj.weight", "lm_head.weight"};
  char *dtypes[] = {"bfloat16", "float32"};
  uint64_t sizes[] = {64, 4};
  Wt__V1__UInt64Value zero = WT__V1__UINT64_VALUE__INIT;
  Wt__V1__NcclUpdateInfo nccl = WT__V1__NCCL_UPDATE_INFO__INIT;
  nccl.packed_buffer_size_bytes = &zero;
  Wt__V1__WeightTransferUpdateInfo info =
      WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__INIT;
  info.n_names = 2;
  info.names = names;
  info.n_dtype_names = 2;
  info.dtype_names = dtypes;
  info.n_shapes = 2;
  info.shapes = shapes;
  info.packed = 1;
  info.n_packed_tensor_sizes = 2;
  info.packed_tensor_sizes = sizes;
  info.backend_update_case =
      WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__BACKEND_UPDATE_NCCL;
  info.nccl = &nccl;
  Wt__V1__UpdateWeightsRequest req = WT__V1__UPDATE_WEIGHTS_REQUEST__INIT;
  req.update_info = &info;
  req.round_id = 9;

  size_t len = wt__v1__update_weights_request__get_packed_size(&req);
  uint8_t *bytes = malloc(len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(bytes);
  CU_ASSERT_EQUAL(wt__v1__update_weights_request__pack(&req, bytes), len);
  char *path = join_path(tmp, "update.bin");
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(fwrite(bytes, 1, len, f), len);
  fclose(f);
  free(bytes);

  char *out = run_helper("read-update", path);
  free(path);
  CU_ASSERT_PTR_NOT_NULL_FATAL(out);
  const char *want =
      "round_id 9\n"
      "names ['model.layers.0.mlp.up_proj.weight', 'lm_head.weight']\n"
      "dtype_names ['bfloat16', 'float32']\n"
      "shapes [[8, 4], []]\n"
      "packed True\n"
      "packed_tensor_sizes [64, 4]\n"
      "backend nccl\n"
      "has packed_buffer_size_bytes True 0\n"
      "has packed_num_buffers False\n";
  if (strcmp(out, want) != 0)
    fprintf(stderr, "\n  Python read:\n%s  expected:\n%s", out, want);
  CU_ASSERT_STRING_EQUAL(out, want);
  free(out);
}

void wt_test_suite_proto_python(void) {
  CU_pSuite s = CU_add_suite("proto_python", suite_init, suite_clean);
  CU_add_test(s, "python stubs generate and import", test_stubs);
  CU_add_test(s, "python writes, C reads (NcclInitInfo)", test_python_to_c);
  CU_add_test(s, "C writes, python reads (UpdateWeightsRequest)",
              test_c_to_python);
}
