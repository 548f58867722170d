/* test_consumer.c: libwt_consumer (wt/consumer.h) against a server's export:
 * the bytes it points at are the trainer's; mappings are made once and
 * kept across versions; errors name what was wrong; device regions reach a
 * second process through their IPC handles (emulated GPUs here, real ones
 * in tests/gpu/run-device-checks.sh); a socket served by another user is
 * refused. */

#include <CUnit/CUnit.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <pthread.h>
#include <unistd.h>

#include "support/fake_cuda.h"
#include "support/fixture.h"
#include "support/wt_proc.h"
#include "wt/checksum.h"
#include "wt/clock.h"
#include "wt/consumer.h"
#include "wt/frame.h"
#include "wt/v1/export.pb-c.h"
#include "wt/pb.h"
#include "wt/server.h"
#include "wt_test.h"

static char *g_dir;
static char g_sock[400];

static int suite_init(void) {
  g_dir = wt_test_tmpdir();
  snprintf(g_sock, sizeof(g_sock), "%s/export.sock", g_dir);
  return g_dir ? 0 : 1;
}

static int suite_clean(void) {
  wt_test_rmtree(g_dir);
  free(g_dir);
  return 0;
}

static void start(wtt_server *s, wt_staging staging, const char *devices) {
  wt_server_options o = {.staging = staging,
                         .memory = devices ? WT_MEM_HOST : WT_MEM_SHARED,
                         .devices = devices,
                         .export_path = g_sock};
  wtt_server_start(s, "small", &o);
  WT_ASSERT_OK(wtt_init_grpc(s->ch, 0, s->workers));
}

/* How many of v's tensors hold seed's bytes (host tensors). */
static size_t tensors_of_seed(const wtt_server *s, const wt_consumer_version *v,
                              uint64_t seed) {
  size_t ok = 0;
  for (size_t i = 0; i < v->n_tensors && i < s->n; i++) {
    const wt_consumer_tensor *t = &v->tensors[i];
    char got[WT_DIGEST_HEX_MAX], want[WT_DIGEST_HEX_MAX];
    if (t->on_device || strcmp(t->name, s->metas[i].name) != 0) continue;
    if (wt_digest_hex(WT_HASH_SHA256, t->data, (size_t)t->nbytes, got) != NULL)
      continue;
    wtt_expected_digest(&s->metas[i], seed, WT_HASH_SHA256, want);
    ok += strcmp(got, want) == 0;
  }
  return ok;
}

/* Lines "tensor NAME HEX" of consumer_check's output that are seed's. */
static size_t lines_of_seed(const wtt_server *s, const char *out,
                            uint64_t seed) {
  size_t matched = 0;
  for (size_t i = 0; out != NULL && i < s->n; i++) {
    char want[WT_DIGEST_HEX_MAX], line[512];
    wtt_expected_digest(&s->metas[i], seed, WT_HASH_SHA256, want);
    snprintf(line, sizeof(line), "tensor %s %s\n", s->metas[i].name, want);
    matched += strstr(out, line) != NULL;
  }
  return matched;
}

/* Host regions: the trainer's bytes, read-only, mapped once for every
 * later version (the tenth acquire maps nothing); the lease visible to
 * GetServerInfo and gone after release. */
static void test_host_versions(void) {
  wtt_server s;
  start(&s, WT_STAGING_SHADOW, NULL);
  wt_consumer *c = NULL;
  WT_ASSERT_OK(wt_consumer_connect(g_sock, NULL, &c));
  wt_consumer_version *v = NULL;
  /* Nothing committed: at once, and after a wait that nothing ends. */
  WT_ASSERT_ERR(wt_consumer_acquire(c, NULL, &v), WT_FAILED_PRECONDITION,
                "no version committed");
  wt_acquire_options wait = {.timeout_ms = 100};
  int64_t t0 = wt_mono_ms();
  WT_ASSERT_ERR(wt_consumer_acquire(c, &wait, &v), WT_FAILED_PRECONDITION,
                "no version committed");
  CU_ASSERT(wt_mono_ms() - t0 >= 90);
  uint64_t mapped = 0;
  size_t held = 0;
  for (uint64_t seed = 1; seed <= 10; seed++) {
    char name[32];
    snprintf(name, sizeof(name), "v%" PRIu64, seed);
    wtt_commit_round(&s, name, seed);
    WT_ASSERT_OK(wt_consumer_acquire(c, NULL, &v));
    CU_ASSERT_FATAL(v != NULL);
    CU_ASSERT_STRING_EQUAL(v->version, name);
    CU_ASSERT_EQUAL(v->sequence, seed);
    CU_ASSERT_EQUAL(v->worker, 0);
    CU_ASSERT_STRING_EQUAL(v->device, "cpu");
    CU_ASSERT_EQUAL(v->n_tensors, s.n);
    CU_ASSERT_EQUAL(tensors_of_seed(&s, v, seed), s.n);
    CU_ASSERT_PTR_NOT_NULL(wt_consumer_find(v, s.metas[0].name));
    CU_ASSERT_PTR_NULL(wt_consumer_find(v, "no.such.tensor"));
    if (seed == 1) {
      Wt__V1__ServerInfo *info = wtt_info(s.ch);
      CU_ASSERT_FATAL(info != NULL);
      CU_ASSERT_EQUAL(info->lease_count, 1);
      wt_pb_free(&info->base);
      /* The mapping is read-only: a write faults (in a child). */
      pid_t pid = fork();
      if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        *(volatile uint8_t *)v->tensors[0].data = 1;
        _exit(0);
      }
      int status = 0;
      waitpid(pid, &status, 0);
      CU_ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    }
    WT_ASSERT_OK(wt_consumer_release(c, v));
    wt_consumer_region_counts(c, &mapped, &held);
    CU_ASSERT_EQUAL(mapped, 2); /* shadow: both sets, mapped once */
  }
  CU_ASSERT_EQUAL(held, 2);
  Wt__V1__ServerInfo *info = wtt_info(s.ch);
  CU_ASSERT_FATAL(info != NULL);
  CU_ASSERT_EQUAL(info->lease_count, 0);
  wt_pb_free(&info->base);
  /* The server's refusals, with its words. */
  wt_acquire_options named = {.version = "v3"};
  WT_ASSERT_ERR(wt_consumer_acquire(c, &named, &v), WT_NOT_FOUND,
                "the server holds 'v10'");
  wt_acquire_options worker = {.worker = 4};
  WT_ASSERT_ERR(wt_consumer_acquire(c, &worker, &v), WT_OUT_OF_RANGE,
                "worker 4 does not exist: the server has 1");
  /* 16 leases per consumer; the 17th is refused, the rest stay good. */
  wt_consumer_version *vs[17];
  for (int i = 0; i < 16; i++)
    WT_ASSERT_OK(wt_consumer_acquire(c, NULL, &vs[i]));
  WT_ASSERT_ERR(wt_consumer_acquire(c, NULL, &vs[16]), WT_RESOURCE_EXHAUSTED,
                "16");
  CU_ASSERT_EQUAL(tensors_of_seed(&s, vs[15], 10), s.n);
  for (int i = 0; i < 15; i++) WT_ASSERT_OK(wt_consumer_release(c, vs[i]));
  /* Closing with a version still held ends its lease too. */
  wt_consumer_close(c);
  int64_t until = wt_mono_ms() + 2000;
  uint32_t leases = 1;
  while (leases != 0 && wt_mono_ms() < until) {
    info = wtt_info(s.ch);
    CU_ASSERT_FATAL(info != NULL);
    leases = info->lease_count;
    wt_pb_free(&info->base);
    if (leases) usleep(10000);
  }
  CU_ASSERT_EQUAL(leases, 0);
  wtt_server_stop(&s);
}

/* Errors that name what went wrong: nothing at the path; a path too long;
 * a server gone mid-way (the consumer says so, then refuses to go on). */
static void test_errors(void) {
  wt_consumer *c = NULL;
  char missing[460];
  snprintf(missing, sizeof(missing), "%s/nobody.sock", g_dir);
  WT_ASSERT_ERR(wt_consumer_connect(missing, NULL, &c), WT_UNAVAILABLE,
                "nobody.sock: nothing answers there");
  CU_ASSERT_PTR_NULL(c);
  char longp[200];
  memset(longp, 'x', sizeof(longp) - 1);
  longp[sizeof(longp) - 1] = '\0';
  WT_ASSERT_ERR(wt_consumer_connect(longp, NULL, &c), WT_INVALID_ARGUMENT,
                "longer than");
  wtt_server s;
  start(&s, WT_STAGING_INPLACE, NULL);
  wtt_commit_round(&s, "e1", 1);
  WT_ASSERT_OK(wt_consumer_connect(g_sock, NULL, &c));
  wt_consumer_version *v = NULL;
  WT_ASSERT_OK(wt_consumer_acquire(c, NULL, &v));
  uint64_t mapped = 0;
  wt_consumer_region_counts(c, &mapped, NULL);
  CU_ASSERT_EQUAL(mapped, 1); /* in place: one set */
  CU_ASSERT_EQUAL(tensors_of_seed(&s, v, 1), s.n);
  WT_ASSERT_OK(wt_consumer_release(c, v));
  wtt_server_stop(&s);
  WT_ASSERT_ERR(wt_consumer_acquire(c, NULL, &v), WT_UNAVAILABLE,
                "the server closed the connection");
  WT_ASSERT_ERR(wt_consumer_acquire(c, NULL, &v), WT_FAILED_PRECONDITION,
                "connect again");
  wt_consumer_close(c);
}

/* A socket served by another user (a stranger's socket where the consumer
 * looks) is refused before a byte is sent. Needs root to switch uid. */
static void test_stranger_server(void) {
  if (geteuid() != 0) {
    wt_test_skip("consumer: a socket served by another user",
                 "not root: cannot serve a socket as another uid here");
    return;
  }
  char path[460];
  snprintf(path, sizeof(path), "%s/stranger.sock", g_dir);
  int pipefd[2];
  CU_ASSERT_FATAL(pipe(pipefd) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, path, strlen(path) + 1);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        chmod(path, 0777) != 0 || setgid(65534) != 0 || setuid(65534) != 0 ||
        listen(fd, 4) != 0)
      _exit(1);
    if (write(pipefd[1], "r", 1) != 1) _exit(1);
    int cfd = accept(fd, NULL, NULL);
    char b[64];
    ssize_t n = cfd >= 0 ? read(cfd, b, sizeof(b)) : -1;
    _exit(n > 0 ? 3 : 0); /* 3: the consumer sent bytes to a stranger */
  }
  close(pipefd[1]);
  char r = 0;
  CU_ASSERT_FATAL(read(pipefd[0], &r, 1) == 1);
  close(pipefd[0]);
  wt_consumer *c = NULL;
  WT_ASSERT_ERR(wt_consumer_connect(path, NULL, &c), WT_PERMISSION_DENIED,
                "served by uid 65534");
  CU_ASSERT_PTR_NULL(c);
  int status = 0;
  waitpid(pid, &status, 0);
  CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Device regions on two emulated GPUs: a second process (consumer_check)
 * acquires each worker's copy through its CUDA IPC handle and hashes the
 * trainer's bytes; a host version's registration is counted. */
static void test_device_second_process(void) {
  fake_cuda_install(2);
  wtt_server s;
  start(&s, WT_STAGING_SHADOW, "cuda:0,cuda:1");
  wtt_commit_round(&s, "gpu-4", 4);
  char log[460];
  snprintf(log, sizeof(log), "%s/consumer-check.log", g_dir);
  for (int w = 0; w < 2; w++) {
    char wbuf[8];
    snprintf(wbuf, sizeof(wbuf), "%d", w);
    const char *const argv[] = {
        WT_CONSUMER_CHECK_BIN, g_sock, "--fake-gpus", "2", "--worker", wbuf,
        "--acquires",          "3",    NULL};
    char *out = NULL;
    CU_ASSERT_EQUAL(wt_proc_run(argv, log, 60000, &out), 0);
    if (out == NULL) {
      wt_proc_dump("consumer_check", log);
      CU_FAIL("consumer_check printed nothing");
      continue;
    }
    char head[128];
    snprintf(head, sizeof(head),
             "version gpu-4 sequence 1 worker %d device cuda:%d", w, w);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, head));
    CU_ASSERT_EQUAL(lines_of_seed(&s, out, 4), s.n);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "mapped 2 held 2")); /* 3 acquires */
    if (lines_of_seed(&s, out, 4) != s.n) printf("%s", out);
    free(out);
  }
  printf(
      "\n  a second process hashed %zu tensors on each of 2 emulated GPUs "
      "through their IPC handles\n",
      s.n);
  wtt_server_stop(&s);
  fake_cuda_uninstall();
  /* Host memory registered read-only (the emulated CUDA counts it). */
  wtt_server h;
  start(&h, WT_STAGING_SHADOW, NULL);
  wtt_commit_round(&h, "host-5", 5);
  const char *const argv[] = {WT_CONSUMER_CHECK_BIN, g_sock, "--fake-gpus", "1",
                              "--register",          NULL};
  char *out = NULL;
  CU_ASSERT_EQUAL(wt_proc_run(argv, log, 60000, &out), 0);
  CU_ASSERT_FATAL(out != NULL);
  CU_ASSERT_EQUAL(lines_of_seed(&h, out, 5), h.n);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "registered 2")); /* both sets, once */
  free(out);
  wtt_server_stop(&h);
}

/* ---- a server that lies ----------------------------------------------------
 */

typedef enum {
  LIE_OUTSIDE,    /* a tensor past its region's end */
  LIE_NO_FD,      /* a memfd region without its descriptor */
  LIE_REQUEST_ID, /* an answer to another request */
  LIE_SILENCE,    /* no answer */
  LIE_HUGE,       /* a frame of 4 GiB announced */
  LIE_GARBAGE,    /* a frame that is not an ExportResponse */
  LIE_UNSEALED,   /* a memfd it could still shrink (SIGBUS) */
  LIE_BLOAT,      /* 8 MiB of empty tensors: 40 times that unpacked */
} lie;

typedef struct liar {
  int lfd;
  lie how;
} liar;

static void *liar_main(void *p) {
  liar *l = p;
  int fd = accept(l->lfd, NULL, NULL);
  if (fd < 0) return NULL;
  uint8_t req[256];
  ssize_t n = read(fd, req, sizeof(req)); /* one small request */
  uint64_t rid = 0;
  if (n > 4) {
    Wt__V1__ExportRequest *r =
        wt__v1__export_request__unpack(NULL, (size_t)n - 4, req + 4);
    if (r) rid = r->request_id;
    wt__v1__export_request__free_unpacked(r, NULL);
  }
  int memfd = memfd_create("liar", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (ftruncate(memfd, 4096) != 0) rid = 0;
  if (l->how != LIE_UNSEALED &&
      fcntl(memfd, F_ADD_SEALS,
            F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    rid = 0;
  Wt__V1__ExportRegion reg = WT__V1__EXPORT_REGION__INIT;
  uint8_t id[16] = {1};
  reg.kind = WT__V1__EXPORT_REGION__KIND__HOST_MEMFD;
  reg.size = 4096;
  reg.region_id.data = id;
  reg.region_id.len = sizeof(id);
  reg.fd_index = l->how == LIE_NO_FD ? 3 : 0;
  Wt__V1__ExportRegion *regp = &reg;
  Wt__V1__ExportTensor t = WT__V1__EXPORT_TENSOR__INIT;
  t.name = "w";
  t.dtype = "F32";
  t.offset = l->how == LIE_OUTSIDE ? 4000 : 0;
  t.nbytes = 1024;
  Wt__V1__ExportTensor *tp = &t;
  Wt__V1__Manifest m = WT__V1__MANIFEST__INIT;
  m.lease_id = 1;
  m.version = "lie";
  m.n_regions = 1;
  m.regions = &regp;
  m.n_tensors = 1;
  m.tensors = &tp;
  /* LIE_BLOAT: 4 Mi empty tensors (2 bytes each on the wire) */
  size_t nbloat = l->how == LIE_BLOAT ? (size_t)4 << 20 : 0;
  Wt__V1__ExportTensor empty = WT__V1__EXPORT_TENSOR__INIT;
  Wt__V1__ExportTensor **bloat =
      nbloat ? malloc(nbloat * sizeof(*bloat)) : NULL;
  for (size_t i = 0; bloat && i < nbloat; i++) bloat[i] = &empty;
  if (bloat) {
    m.n_tensors = nbloat;
    m.tensors = bloat;
  }
  Wt__V1__ExportResponse resp = WT__V1__EXPORT_RESPONSE__INIT;
  resp.request_id = l->how == LIE_REQUEST_ID ? rid + 100 : rid;
  resp.result_case = WT__V1__EXPORT_RESPONSE__RESULT_MANIFEST;
  resp.manifest = &m;
  size_t len = wt__v1__export_response__get_packed_size(&resp);
  uint8_t *buf = malloc(4 + len);
  wt_frame_header((uint32_t)len, buf);
  wt__v1__export_response__pack(&resp, buf + 4);
  free(bloat);
  if (l->how == LIE_HUGE) wt_frame_header(0xffffffffu, buf);
  if (l->how == LIE_GARBAGE) memset(buf + 4, 0xff, len);
  if (l->how == LIE_SILENCE) {
    usleep(1500 * 1000);
  } else {
    union {
      struct cmsghdr h;
      char space[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof(ctl));
    struct iovec iov = {buf, 4 + len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (l->how != LIE_NO_FD) {
      mh.msg_control = ctl.space;
      mh.msg_controllen = sizeof(ctl.space);
      struct cmsghdr *h = CMSG_FIRSTHDR(&mh);
      h->cmsg_level = SOL_SOCKET;
      h->cmsg_type = SCM_RIGHTS;
      h->cmsg_len = CMSG_LEN(sizeof(int));
      memcpy(CMSG_DATA(h), &memfd, sizeof(int));
    }
    size_t sent = 0;
    while (sent < 4 + len) { /* a large frame goes in several writes */
      ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
      if (w <= 0) break;
      sent += (size_t)w;
      iov.iov_base = buf + sent;
      iov.iov_len = 4 + len - sent;
      mh.msg_control = NULL;
      mh.msg_controllen = 0;
    }
    usleep(300 * 1000); /* the consumer reads before the close */
  }
  free(buf);
  close(memfd);
  close(fd);
  return NULL;
}

/* A server (of this user: trusted to connect) whose answers lie: the
 * consumer says what was wrong and builds no pointer from it. */
static void test_lying_server(void) {
  static const struct {
    lie how;
    wt_code code;
    const char *needle;
  } cases[] = {
      {LIE_OUTSIDE, WT_INTERNAL, "lie outside its region"},
      {LIE_NO_FD, WT_INTERNAL, "descriptor 3 of the 0 that came"},
      {LIE_REQUEST_ID, WT_INTERNAL, "an answer to request"},
      {LIE_SILENCE, WT_DEADLINE_EXCEEDED, "no answer in time"},
      {LIE_HUGE, WT_INVALID_ARGUMENT, "liar.sock"},
      {LIE_GARBAGE, WT_INTERNAL, "not an ExportResponse"},
      {LIE_UNSEALED, WT_PERMISSION_DENIED,
       "its memfd is not sealed against shrinking, growing and writing"},
      {LIE_BLOAT, WT_RESOURCE_EXHAUSTED, "more than 8 times its size"},
  };
  char path[460];
  snprintf(path, sizeof(path), "%s/liar.sock", g_dir);
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
    unlink(path);
    liar l = {.how = cases[k].how};
    l.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, path, strlen(path) + 1);
    CU_ASSERT_FATAL(bind(l.lfd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
                    listen(l.lfd, 4) == 0);
    pthread_t th;
    pthread_create(&th, NULL, liar_main, &l);
    /* the bloated manifest takes the liar a while to pack */
    wt_consumer_options o = {.reply_timeout_ms =
                                 cases[k].how == LIE_BLOAT ? 30000 : 300};
    wt_consumer *c = NULL;
    WT_ASSERT_OK(wt_consumer_connect(path, &o, &c));
    wt_consumer_version *v = NULL;
    wt_status *st = wt_consumer_acquire(c, NULL, &v);
    CU_ASSERT_PTR_NULL(v);
    CU_ASSERT_EQUAL(wt_status_code(st), cases[k].code);
    CU_ASSERT_PTR_NOT_NULL(st ? strstr(wt_status_message(st), cases[k].needle)
                              : NULL);
    if (st && !strstr(wt_status_message(st), cases[k].needle))
      printf("\n  case %zu: %s", k, wt_status_message(st));
    wt_status_free(st);
    size_t held = 9;
    wt_consumer_region_counts(c, NULL, &held);
    CU_ASSERT_EQUAL(held, cases[k].how == LIE_OUTSIDE ? 1u : 0u);
    wt_consumer_close(c);
    pthread_join(th, NULL);
    close(l.lfd);
  }
  unlink(path);
}

/* docs/export.md's example, as a user runs it; and no gRPC in it. */
static void test_example(void) {
  wtt_server s;
  start(&s, WT_STAGING_SHADOW, NULL);
  wtt_commit_round(&s, "ex-2", 2);
  char log[460];
  snprintf(log, sizeof(log), "%s/example.log", g_dir);
  const char *const argv[] = {WT_LIST_TENSORS_BIN, g_sock, NULL};
  char *out = NULL;
  CU_ASSERT_EQUAL(wt_proc_run(argv, log, 30000, &out), 0);
  char head[64];
  snprintf(head, sizeof(head), "version ex-2: %zu tensors\n", s.n);
  CU_ASSERT_PTR_NOT_NULL(out ? strstr(out, head) : NULL);
  CU_ASSERT_PTR_NOT_NULL(out ? strstr(out, s.metas[0].name) : NULL);
  free(out);
  wtt_server_stop(&s);
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "ldd '%s' | grep -q grpc", WT_LIST_TENSORS_BIN);
  CU_ASSERT_NOT_EQUAL(system(cmd), 0); /* libwt_consumer pulls no gRPC in */
}

void wt_test_suite_consumer(void);
void wt_test_suite_consumer(void) {
  CU_pSuite s = CU_add_suite("consumer", suite_init, suite_clean);
  CU_add_test(s, "host versions: the trainer's bytes, mapped once",
              test_host_versions);
  CU_add_test(s, "errors name the path, the server's refusal, the break",
              test_errors);
  CU_add_test(s, "a socket served by another user is refused",
              test_stranger_server);
  CU_add_test(s, "device regions reach a second process (emulated GPUs)",
              test_device_second_process);
  CU_add_test(s, "the docs' example, without gRPC", test_example);
  CU_add_test(s, "a server that lies gets an error, not a pointer",
              test_lying_server);
}
