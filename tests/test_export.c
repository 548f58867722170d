/* test_export.c: the inference-side export (server/src/export.c), spoken
 * from the proto and the framing alone, as a consumer in any language
 * would: what a consumer maps is exactly one committed version; a lease
 * holds back the round that would overwrite it, and only that one; and
 * strangers (garbage, huge lengths, floods, another user) get a closed
 * connection while rounds go on. */

#include <CUnit/CUnit.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../server/src/server_state.h" /* to hold a commit's window open */
#include "support/fixture.h"
#include "support/wt_proc.h"
#include "wt/checksum.h"
#include "wt/clock.h"
#include "wt/frame.h"
#include "wt/param_store.h"
#include "wt/pb.h"
#include "wt/server.h"
#include "wt/v1/export.pb-c.h"
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

/* ---- a consumer from the proto and the framing -----------------------------
 */

static int consumer_connect(void) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(g_sock) >= sizeof(a.sun_path)) return -1;
  memcpy(a.sun_path, g_sock, strlen(g_sock) + 1);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static bool send_request(int fd, Wt__V1__ExportRequest *req) {
  size_t n = wt__v1__export_request__get_packed_size(req);
  uint8_t *buf = malloc(WT_FRAME_HEADER_BYTES + n);
  wt_frame_header((uint32_t)n, buf);
  wt__v1__export_request__pack(req, buf + WT_FRAME_HEADER_BYTES);
  bool ok = send(fd, buf, WT_FRAME_HEADER_BYTES + n, MSG_NOSIGNAL) ==
            (ssize_t)(WT_FRAME_HEADER_BYTES + n);
  free(buf);
  return ok;
}

static char g_map_why[256]; /* the first unmapped view's manifest, in short */
/* The first torn view: its version and where it differs from every seed's
 * bytes (the tensor count, a name, or the first tensor whose digest
 * matches no seed), so that a failure says what it saw. */
static char g_torn_why[512];

/* Reads `n` bytes (the first of them with recvmsg, taking the descriptors
 * that came with them into fds[0..*nfd)); false on EOF or timeout. */
static bool read_full(int fd, uint8_t *buf, size_t n, int *fds, size_t *nfd,
                      int timeout_ms) {
  size_t got = 0;
  while (got < n) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) != 1) return false;
    struct iovec iov = {buf + got, n - got};
    union {
      struct cmsghdr h;
      char space[CMSG_SPACE(sizeof(int) * 4)];
    } ctl;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fds != NULL) {
      mh.msg_control = ctl.space;
      mh.msg_controllen = sizeof(ctl.space);
    }
    ssize_t r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    if (r <= 0) return false;
    if (mh.msg_flags & MSG_CTRUNC) /* descriptors the kernel dropped */
      snprintf(g_map_why, sizeof(g_map_why), "recvmsg: MSG_CTRUNC");
    for (struct cmsghdr *h = fds ? CMSG_FIRSTHDR(&mh) : NULL; h != NULL;
         h = CMSG_NXTHDR(&mh, h))
      if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
        size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        memcpy(fds + *nfd, CMSG_DATA(h), k * sizeof(int));
        *nfd += k;
      }
    got += (size_t)r;
  }
  return true;
}

/* The next response (the caller frees it), with its descriptors. */
static Wt__V1__ExportResponse *recv_response(int fd, int *fds, size_t *nfd,
                                             int timeout_ms) {
  uint8_t h[WT_FRAME_HEADER_BYTES];
  *nfd = 0;
  if (!read_full(fd, h, sizeof(h), fds, nfd, timeout_ms)) return NULL;
  uint32_t len = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 |
                 (uint32_t)h[3] << 24;
  uint8_t *body = malloc(len ? len : 1);
  Wt__V1__ExportResponse *r = NULL;
  if (read_full(fd, body, len, NULL, NULL, timeout_ms))
    r = wt__v1__export_response__unpack(NULL, len, body);
  free(body);
  return r;
}

static Wt__V1__ExportResponse *acquire(int fd, const char *version,
                                       uint64_t after, uint32_t timeout_ms,
                                       int *fds, size_t *nfd) {
  Wt__V1__AcquireRequest a = WT__V1__ACQUIRE_REQUEST__INIT;
  a.version = (char *)(version ? version : "");
  a.after_sequence = after;
  a.timeout_ms = timeout_ms;
  Wt__V1__ExportRequest req = WT__V1__EXPORT_REQUEST__INIT;
  req.request_id = 7;
  req.op_case = WT__V1__EXPORT_REQUEST__OP_ACQUIRE;
  req.acquire = &a;
  if (!send_request(fd, &req)) return NULL;
  return recv_response(fd, fds, nfd, (int)timeout_ms + 5000);
}

static Wt__V1__ExportResponse *release(int fd, uint64_t lease) {
  Wt__V1__ReleaseRequest rr = WT__V1__RELEASE_REQUEST__INIT;
  rr.lease_id = lease;
  Wt__V1__ExportRequest req = WT__V1__EXPORT_REQUEST__INIT;
  req.request_id = 8;
  req.op_case = WT__V1__EXPORT_REQUEST__OP_RELEASE;
  req.release = &rr;
  if (!send_request(fd, &req)) return NULL;
  size_t nfd = 0;
  return recv_response(fd, NULL, &nfd, 5000);
}

static void close_fds(int *fds, size_t n) {
  for (size_t i = 0; i < n; i++) close(fds[i]);
}

/* The answer's manifest, or NULL when it is none (an error: the oneof's
 * members share their storage, so r->manifest alone may be an error's). */
static const Wt__V1__Manifest *manifest_of(const Wt__V1__ExportResponse *r) {
  return r != NULL && r->result_case == WT__V1__EXPORT_RESPONSE__RESULT_MANIFEST
             ? r->manifest
             : NULL;
}

/* The seed every tensor of the manifest's mapped bytes was filled with, or
 * UINT64_MAX when they are not all one seed's of `seeds` (a torn view). */
/* mapped_seed's answer for a view it could not map (g_map_errno says why,
 * or the regions outnumber the descriptors that came). */
#define UNMAPPED (UINT64_MAX - 1)
static int g_map_errno;

static uint64_t mapped_seed(const Wt__V1__Manifest *m, const int *fds,
                            size_t nfd, const wtt_server *s,
                            const uint64_t *seeds, size_t nseeds) {
  const uint8_t *base[4] = {0};
  bool unmapped = m->n_regions > nfd;
  for (size_t r = 0; r < m->n_regions && r < nfd; r++) {
    void *p = mmap(NULL, m->regions[r]->size, PROT_READ, MAP_SHARED,
                   fds[m->regions[r]->fd_index], 0);
    base[r] = p == MAP_FAILED ? NULL : p;
    if (p == MAP_FAILED) {
      g_map_errno = errno;
      unmapped = true;
    }
  }
  if (unmapped && g_map_why[0] == '\0') {
    int off = snprintf(g_map_why, sizeof(g_map_why),
                       "%zu regions, %zu descriptors came:", m->n_regions, nfd);
    for (size_t r = 0; r < m->n_regions && off < (int)sizeof(g_map_why); r++)
      off += snprintf(g_map_why + off, sizeof(g_map_why) - (size_t)off,
                      " [kind %d, fd_index %d]", (int)m->regions[r]->kind,
                      (int)m->regions[r]->fd_index);
  }
  if (unmapped) { /* not a torn view: one that could not be looked at */
    for (size_t r = 0; r < m->n_regions && r < nfd; r++)
      if (base[r]) munmap((void *)base[r], m->regions[r]->size);
    return UNMAPPED;
  }
  uint64_t found = UINT64_MAX;
  char why[256] = "";
  for (size_t k = 0; k < nseeds && found == UINT64_MAX; k++) {
    bool all = m->n_tensors == s->n;
    if (!all)
      snprintf(why, sizeof(why), "%zu tensors, the model has %zu", m->n_tensors,
               s->n);
    for (size_t i = 0; all && i < m->n_tensors; i++) {
      const Wt__V1__ExportTensor *t = m->tensors[i];
      char got[WT_DIGEST_HEX_MAX], want[WT_DIGEST_HEX_MAX];
      all = t->region < m->n_regions && base[t->region] != NULL &&
            strcmp(t->name, s->metas[i].name) == 0;
      if (!all) {
        snprintf(why, sizeof(why), "tensor %zu '%.60s' (region %u of %zu)", i,
                 t->name, (unsigned)t->region, m->n_regions);
        break;
      }
      WT_ASSERT_OK(wt_digest_hex(WT_HASH_SHA256, base[t->region] + t->offset,
                                 (size_t)t->nbytes, got));
      wtt_expected_digest(&s->metas[i], seeds[k], WT_HASH_SHA256, want);
      all = strcmp(got, want) == 0;
      if (!all && i > 0)
        snprintf(why, sizeof(why),
                 "tensor %zu '%.60s' matches no seed (seed %llu held the "
                 "ones before it)",
                 i, t->name, (unsigned long long)seeds[k]);
      else if (!all && why[0] == '\0')
        snprintf(why, sizeof(why),
                 "tensor 0 '%.60s' at offset %llu matches no seed", t->name,
                 (unsigned long long)t->offset);
    }
    if (all) found = seeds[k];
  }
  if (found == UINT64_MAX && g_torn_why[0] == '\0')
    snprintf(g_torn_why, sizeof(g_torn_why),
             "version '%.60s' (sequence %llu), %zu seeds tried: %s", m->version,
             (unsigned long long)m->sequence, nseeds, why);
  for (size_t r = 0; r < m->n_regions && r < nfd; r++)
    if (base[r]) munmap((void *)base[r], m->regions[r]->size);
  return found;
}

static void start(wtt_server *s, wt_staging staging, uint32_t lease_wait_ms) {
  wt_server_options o = {.staging = staging,
                         .memory = WT_MEM_SHARED,
                         .export_path = g_sock,
                         .lease_wait_ms = lease_wait_ms};
  wtt_server_start(s, "small", &o);
  WT_ASSERT_OK(wtt_init_grpc(s->ch, 0, s->workers));
}

/* ---- tests ----------------------------------------------------------------
 */

/* A version acquired, mapped read-only (a writable map fails), hashed: the
 * trainer's bytes; the lease released once, not twice. */
static void test_acquire_and_map(void) {
  wtt_server s;
  start(&s, WT_STAGING_SHADOW, 0);
  struct stat sb;
  CU_ASSERT_FATAL(stat(g_sock, &sb) == 0);
  CU_ASSERT_EQUAL(sb.st_mode & 0777, 0600);
  int fd = consumer_connect();
  CU_ASSERT_FATAL(fd >= 0);
  int fds[4];
  size_t nfd = 0;
  /* Nothing committed yet: said at once, or waited for. */
  Wt__V1__ExportResponse *r = acquire(fd, NULL, 0, 0, fds, &nfd);
  CU_ASSERT_FATAL(r != NULL);
  CU_ASSERT_EQUAL(r->result_case, WT__V1__EXPORT_RESPONSE__RESULT_ERROR);
  CU_ASSERT_EQUAL(r->error->code, WT_FAILED_PRECONDITION);
  wt__v1__export_response__free_unpacked(r, NULL);
  wtt_commit_round(&s, "v1", 1);
  r = acquire(fd, NULL, 0, 0, fds, &nfd);
  CU_ASSERT_FATAL(r != NULL &&
                  r->result_case == WT__V1__EXPORT_RESPONSE__RESULT_MANIFEST);
  const Wt__V1__Manifest *m = r->manifest;
  CU_ASSERT_STRING_EQUAL(m->version, "v1");
  CU_ASSERT_EQUAL(m->sequence, 1);
  CU_ASSERT_EQUAL(m->n_regions, 2); /* shadow: two copies */
  CU_ASSERT_EQUAL(nfd, m->n_regions);
  CU_ASSERT_EQUAL(m->n_tensors, s.n);
  CU_ASSERT_EQUAL(r->request_id, 7);
  uint64_t seeds[] = {1};
  CU_ASSERT_EQUAL(mapped_seed(m, fds, nfd, &s, seeds, 1), 1);
  /* Sealed: no writable mapping, no write. */
  CU_ASSERT_EQUAL(mmap(NULL, m->regions[0]->size, PROT_READ | PROT_WRITE,
                       MAP_SHARED, fds[0], 0),
                  MAP_FAILED);
  CU_ASSERT_EQUAL(write(fds[0], "x", 1), -1);
  uint64_t lease = m->lease_id;
  close_fds(fds, nfd);
  wt__v1__export_response__free_unpacked(r, NULL);
  /* GetServerInfo shows who holds what. */
  Wt__V1__ServerInfo *info = wtt_info(s.ch);
  CU_ASSERT_FATAL(info != NULL);
  CU_ASSERT_STRING_EQUAL(info->export_path, g_sock);
  CU_ASSERT_EQUAL(info->lease_count, 1);
  CU_ASSERT_FATAL(info->n_leases == 1);
  CU_ASSERT_EQUAL(info->leases[0]->pid, (uint32_t)getpid());
  CU_ASSERT_STRING_EQUAL(info->leases[0]->version, "v1");
  wt_pb_free(&info->base);
  /* A named version: the held one, or NOT_FOUND naming it. */
  r = acquire(fd, "v0", 0, 0, fds, &nfd);
  CU_ASSERT_FATAL(r != NULL);
  CU_ASSERT_EQUAL(r->result_case, WT__V1__EXPORT_RESPONSE__RESULT_ERROR);
  CU_ASSERT_EQUAL(r->error->code, WT_NOT_FOUND);
  CU_ASSERT_PTR_NOT_NULL(strstr(r->error->message, "holds 'v1'"));
  wt__v1__export_response__free_unpacked(r, NULL);
  r = release(fd, lease);
  CU_ASSERT_FATAL(r != NULL);
  CU_ASSERT_EQUAL(r->result_case, WT__V1__EXPORT_RESPONSE__RESULT_RELEASED);
  CU_ASSERT_EQUAL(r->released, lease);
  wt__v1__export_response__free_unpacked(r, NULL);
  r = release(fd, lease);
  CU_ASSERT_FATAL(r != NULL);
  CU_ASSERT_EQUAL(r->result_case, WT__V1__EXPORT_RESPONSE__RESULT_ERROR);
  CU_ASSERT_EQUAL(r->error->code, WT_NOT_FOUND);
  wt__v1__export_response__free_unpacked(r, NULL);
  close(fd);
  wtt_server_stop(&s);
  CU_ASSERT(access(g_sock, F_OK) != 0); /* the socket goes with the server */
}

/* Shadow staging: a lease on the live version never delays a round; once
 * that version is older, it holds back the round that would overwrite it
 * (failing after --lease-wait, naming the holder), and its release lets
 * the round through. An acquire that waits gets the next commit. */
static void test_shadow_leases(void) {
  wtt_server s;
  start(&s, WT_STAGING_SHADOW, 300);
  wtt_commit_round(&s, "v1", 1);
  int fd = consumer_connect();
  int fds[4];
  size_t nfd = 0;
  Wt__V1__ExportResponse *r = acquire(fd, NULL, 0, 0, fds, &nfd);
  CU_ASSERT_FATAL(manifest_of(r) != NULL);
  uint64_t lease = r->manifest->lease_id;
  int64_t t0 = wt_mono_ms();
  /* The live version's lease: no delay. A round a lease holds back can only
   * fail (StartWeightUpdate waits for the lease to end, up to --lease-wait,
   * then fails naming the holder), and this lease stays held throughout:
   * the round committing, the lease still there, proves it did not wait,
   * whatever the machine's load (no clock in it). */
  wtt_commit_round(&s, "v2", 2);
  int64_t round_ms = wt_mono_ms() - t0;
  Wt__V1__ServerInfo *info = wtt_info(s.ch);
  CU_ASSERT_FATAL(info != NULL);
  CU_ASSERT_EQUAL(info->lease_count, 1);
  CU_ASSERT_FATAL(info->n_leases == 1);
  CU_ASSERT_STRING_EQUAL(info->leases[0]->version, "v1");
  wt_pb_free(&info->base);
  /* What the consumer maps is still v1's, whole. */
  uint64_t seeds[] = {1, 2};
  CU_ASSERT_EQUAL(mapped_seed(r->manifest, fds, nfd, &s, seeds, 2), 1);
  /* v1 is now older: the next round would write its copies. */
  uint64_t id = 0;
  t0 = wt_mono_ms();
  WT_ASSERT_ERR(wtt_start(s.ch, &id), WT_FAILED_PRECONDITION,
                "has held version 'v1' (sequence 1)");
  int64_t failed_ms = wt_mono_ms() - t0;
  CU_ASSERT(failed_ms >= 290 && failed_ms < 3000);
  wt__v1__export_response__free_unpacked(r, NULL);
  r = release(fd, lease);
  CU_ASSERT(r && r->result_case == WT__V1__EXPORT_RESPONSE__RESULT_RELEASED);
  wt__v1__export_response__free_unpacked(r, NULL);
  close_fds(fds, nfd);
  wtt_commit_round(&s, "v3", 3);
  /* Waiting for the next commit. */
  r = acquire(fd, NULL, 0, 0, fds, &nfd);
  CU_ASSERT_FATAL(manifest_of(r) != NULL);
  uint64_t seq = r->manifest->sequence;
  Wt__V1__ExportResponse *rel = release(fd, r->manifest->lease_id);
  CU_ASSERT_PTR_NOT_NULL(rel);
  if (rel) wt__v1__export_response__free_unpacked(rel, NULL);
  wt__v1__export_response__free_unpacked(r, NULL);
  close_fds(fds, nfd);
  /* The commit comes from this thread once the acquire is waiting. */
  int fd2 = consumer_connect();
  Wt__V1__AcquireRequest a = WT__V1__ACQUIRE_REQUEST__INIT;
  a.version = "";
  a.after_sequence = seq;
  a.timeout_ms = 10000;
  Wt__V1__ExportRequest req = WT__V1__EXPORT_REQUEST__INIT;
  req.request_id = 9;
  req.op_case = WT__V1__EXPORT_REQUEST__OP_ACQUIRE;
  req.acquire = &a;
  CU_ASSERT_FATAL(send_request(fd2, &req));
  wtt_sleep_ms(100);
  wtt_commit_round(&s, "v4", 4);
  r = recv_response(fd2, fds, &nfd, 10000);
  CU_ASSERT_FATAL(manifest_of(r) != NULL);
  CU_ASSERT_STRING_EQUAL(r->manifest->version, "v4");
  CU_ASSERT_EQUAL(r->manifest->sequence, seq + 1);
  wt__v1__export_response__free_unpacked(r, NULL);
  close_fds(fds, nfd);
  close(fd2);
  close(fd);
  printf(
      "\n  shadow: a round beside a lease on the live version: %lld ms; "
      "one that would overwrite a leased version failed after %lld ms "
      "(--lease-wait 0.3 s)\n",
      (long long)round_ms, (long long)failed_ms);
  wtt_server_stop(&s);
}

/* The number of leases the server's consumers hold (GetServerInfo). */
static uint32_t lease_count(wtt_server *s) {
  Wt__V1__ServerInfo *info = wtt_info(s->ch);
  CU_ASSERT_FATAL(info != NULL);
  uint32_t n = info->lease_count;
  wt_pb_free(&info->base);
  return n;
}

/* Waits until the server's consumers hold `want` leases; false after 10 s
 * (a deadline against hanging: it is a matter of milliseconds). */
static bool await_lease_count(wtt_server *s, uint32_t want) {
  for (int64_t end = wt_mono_ms() + 10000;;) {
    if (lease_count(s) == want) return true;
    if (wt_mono_ms() > end) return false;
    wtt_sleep_ms(2);
  }
}

typedef struct release_waiting {
  int fd; /* the holder's connection */
  uint64_t lease;
  bool waited; /* a round was seen waiting for the lease */
  bool released;
} release_waiting;

/* Releases the lease once a round waits for it: an acquire from another
 * connection is then refused as "about to be overwritten by a round"
 * (an acquire that gets a lease before the round waits releases it at
 * once). Ends the wait after 10 s, a deadline against hanging. */
static void *release_waiting_main(void *p) {
  release_waiting *rw = p;
  int probe = consumer_connect();
  int fds[4];
  size_t nfd = 0;
  for (int64_t end = wt_mono_ms() + 10000; !rw->waited && wt_mono_ms() < end;) {
    Wt__V1__ExportResponse *r = acquire(probe, NULL, 0, 0, fds, &nfd);
    if (r == NULL) break;
    if (r->result_case == WT__V1__EXPORT_RESPONSE__RESULT_MANIFEST) {
      Wt__V1__ExportResponse *rel = release(probe, r->manifest->lease_id);
      if (rel) wt__v1__export_response__free_unpacked(rel, NULL);
      close_fds(fds, nfd);
      wtt_sleep_ms(2);
    } else {
      rw->waited = r->result_case == WT__V1__EXPORT_RESPONSE__RESULT_ERROR &&
                   r->error->code == WT_UNAVAILABLE &&
                   strstr(r->error->message,
                          "about to be overwritten by a "
                          "round") != NULL;
      if (!rw->waited) wtt_sleep_ms(2);
    }
    wt__v1__export_response__free_unpacked(r, NULL);
  }
  close(probe);
  Wt__V1__ExportResponse *r = release(rw->fd, rw->lease);
  rw->released =
      r != NULL && r->result_case == WT__V1__EXPORT_RESPONSE__RESULT_RELEASED;
  if (r) wt__v1__export_response__free_unpacked(r, NULL);
  return NULL;
}

/* In-place staging: every lease delays the next round's start, which
 * fails after --lease-wait naming the holder; released in time, the round
 * goes on; during a round nothing can be acquired. A consumer killed while
 * it holds a lease: the lease ends at once. */
static void test_inplace_leases(void) {
  wtt_server s;
  start(&s, WT_STAGING_INPLACE, 300);
  wtt_commit_round(&s, "v1", 1);
  int fd = consumer_connect();
  int fds[4];
  size_t nfd = 0;
  Wt__V1__ExportResponse *r = acquire(fd, NULL, 0, 0, fds, &nfd);
  CU_ASSERT_FATAL(manifest_of(r) != NULL);
  CU_ASSERT_EQUAL(r->manifest->n_regions, 1);
  uint64_t id = 0;
  WT_ASSERT_ERR(wtt_start(s.ch, &id), WT_FAILED_PRECONDITION,
                "has held version 'v1'");
  uint64_t lease = r->manifest->lease_id;
  wt__v1__export_response__free_unpacked(r, NULL);
  close_fds(fds, nfd);
  r = release(fd, lease);
  CU_ASSERT(r && r->result_case == WT__V1__EXPORT_RESPONSE__RESULT_RELEASED);
  if (r) wt__v1__export_response__free_unpacked(r, NULL);
  close(fd);

  /* A consumer killed while it holds a lease: the lease ends at once (its
   * connection's end; nothing is released), so the next round, whose
   * start waits for it at most --lease-wait (0.3 s), commits. */
  pid_t kid = fork();
  if (kid == 0) {
    int k = consumer_connect();
    int kf[4];
    size_t kn = 0;
    Wt__V1__ExportResponse *kr = acquire(k, NULL, 0, 0, kf, &kn);
    if (manifest_of(kr) == NULL) _exit(1);
    pause();
    _exit(0);
  }
  CU_ASSERT_FATAL(kid > 0);
  CU_ASSERT(await_lease_count(&s, 1)); /* the child holds its lease */
  uint64_t sid = 0;
  WT_ASSERT_ERR(wtt_start(s.ch, &sid), WT_FAILED_PRECONDITION,
                "has held version");
  kill(kid, SIGKILL);
  waitpid(kid, NULL, 0);
  int64_t t0 = wt_mono_ms();
  wtt_commit_round(&s, "v2", 2);
  int64_t after_kill = wt_mono_ms() - t0;
  wtt_assert_model_seed(&s, 2);
  CU_ASSERT_EQUAL(lease_count(&s), 0);
  printf(
      "\n  in place: a held lease failed the round after --lease-wait; "
      "a killed consumer's lease ended: the next round took %lld ms\n",
      (long long)after_kill);
  wtt_server_stop(&s);

  /* Released while the round waits: it goes on. A --lease-wait far above
   * anything the release takes (30 s, a deadline against hanging), and the
   * release comes once the round is seen waiting: neither depends on the
   * machine's speed. */
  start(&s, WT_STAGING_INPLACE, 30000);
  wtt_commit_round(&s, "v1", 1);
  fd = consumer_connect();
  r = acquire(fd, NULL, 0, 0, fds, &nfd);
  CU_ASSERT_FATAL(manifest_of(r) != NULL);
  release_waiting rw = {.fd = fd, .lease = r->manifest->lease_id};
  wt__v1__export_response__free_unpacked(r, NULL);
  close_fds(fds, nfd);
  pthread_t th;
  CU_ASSERT_FATAL(pthread_create(&th, NULL, release_waiting_main, &rw) == 0);
  WT_ASSERT_OK(wtt_start(s.ch, &id)); /* waits for the release */
  pthread_join(th, NULL);
  CU_ASSERT(rw.waited);
  CU_ASSERT(rw.released);
  /* During the round: nothing to acquire. */
  r = acquire(fd, NULL, 0, 0, fds, &nfd);
  CU_ASSERT_FATAL(r != NULL);
  CU_ASSERT_EQUAL(r->result_case, WT__V1__EXPORT_RESPONSE__RESULT_ERROR);
  CU_ASSERT_EQUAL(r->error->code, WT_UNAVAILABLE);
  wt__v1__export_response__free_unpacked(r, NULL);
  WT_ASSERT_OK(wtt_abort(s.ch, id, NULL));
  close(fd);
  wtt_server_stop(&s);
}

/* Sets the server's `committing`, as FinishWeightUpdate does between a
 * store's new bytes going live and the sequence that names them. */
static void set_committing(wtt_server *s, bool on) {
  wt_mutex_lock(&s->srv->round.mu);
  s->srv->round.committing = on;
  wt_mutex_unlock(&s->srv->round.mu);
}

/* An acquire (even with timeout 0) that meets a commit in progress waits it
 * out and gets the version, instead of a refusal that says no version is
 * held (a consumer acquiring beside rounds got one in about one run of
 * forty); a commit that outlasts a second is UNAVAILABLE, never a stall.
 * The window is held open by the test: a real one lasts microseconds. */
static void test_acquire_during_commit(void) {
  wtt_server s;
  start(&s, WT_STAGING_SHADOW, 0);
  wtt_commit_round(&s, "v1", 1);
  int fd = consumer_connect();
  CU_ASSERT_FATAL(fd >= 0);
  int fds[4];
  size_t nfd = 0;
  Wt__V1__AcquireRequest a = WT__V1__ACQUIRE_REQUEST__INIT;
  a.version = "";
  Wt__V1__ExportRequest req = WT__V1__EXPORT_REQUEST__INIT;
  req.request_id = 9;
  req.op_case = WT__V1__EXPORT_REQUEST__OP_ACQUIRE;
  req.acquire = &a;

  set_committing(&s, true);
  CU_ASSERT_FATAL(send_request(fd, &req));
  struct pollfd p = {.fd = fd, .events = POLLIN};
  int early = poll(&p, 1, 300); /* no answer while the commit lasts */
  int64_t t0 = wt_mono_ms();
  set_committing(&s, false);
  Wt__V1__ExportResponse *r = recv_response(fd, fds, &nfd, 5000);
  int64_t took = wt_mono_ms() - t0;
  CU_ASSERT_EQUAL(early, 0);
  const Wt__V1__Manifest *m = manifest_of(r);
  CU_ASSERT_FATAL(m != NULL);
  CU_ASSERT_STRING_EQUAL(m->version, "v1");
  uint64_t seeds[1] = {1};
  CU_ASSERT_EQUAL(mapped_seed(m, fds, nfd, &s, seeds, 1), 1);
  Wt__V1__ExportResponse *rr = release(fd, m->lease_id);
  CU_ASSERT(rr != NULL &&
            rr->result_case == WT__V1__EXPORT_RESPONSE__RESULT_RELEASED);
  if (rr) wt__v1__export_response__free_unpacked(rr, NULL);
  wt__v1__export_response__free_unpacked(r, NULL);
  close_fds(fds, nfd);

  /* A commit that does not end: refused once a second has passed. */
  set_committing(&s, true);
  int64_t t1 = wt_mono_ms();
  CU_ASSERT_FATAL(send_request(fd, &req));
  r = recv_response(fd, fds, &nfd, 10000);
  int64_t refused_after = wt_mono_ms() - t1;
  set_committing(&s, false);
  CU_ASSERT_FATAL(r != NULL);
  CU_ASSERT_EQUAL(r->result_case, WT__V1__EXPORT_RESPONSE__RESULT_ERROR);
  if (r->result_case == WT__V1__EXPORT_RESPONSE__RESULT_ERROR) {
    CU_ASSERT_EQUAL(r->error->code, WT_UNAVAILABLE);
    CU_ASSERT_PTR_NOT_NULL(strstr(r->error->message, "committing"));
    printf(
        "\n  answered %lld ms after the commit ended; a commit held open: "
        "%s after %lld ms\n",
        (long long)took, r->error->message, (long long)refused_after);
  }
  CU_ASSERT(refused_after >= 1000 && refused_after < 5000);
  wt__v1__export_response__free_unpacked(r, NULL);
  close_fds(fds, nfd);
  /* And the connection still answers. */
  r = acquire(fd, NULL, 0, 0, fds, &nfd);
  CU_ASSERT(manifest_of(r) != NULL);
  if (r) wt__v1__export_response__free_unpacked(r, NULL);
  close_fds(fds, nfd);
  close(fd);
  wtt_server_stop(&s);
}

/* A consumer that acquires, hashes and releases in a loop while rounds
 * commit as fast as they can: every view is exactly one version. */
typedef struct hasher_arg {
  wtt_server *s;
  atomic_bool stop;
  int views, torn, errors, unmapped, refused;
  char first_refusal[256];
  uint64_t seeds[64];
  atomic_size_t nseeds;
} hasher_arg;

static void *hasher_main(void *p) {
  hasher_arg *h = p;
  int fd = consumer_connect();
  while (!atomic_load(&h->stop)) {
    int fds[4];
    size_t nfd = 0;
    Wt__V1__ExportResponse *r = acquire(fd, NULL, 0, 0, fds, &nfd);
    const Wt__V1__Manifest *m = manifest_of(r);
    if (m == NULL) {
      h->errors += r == NULL;
      /* Refused: with shadow staging a version is always held, and an
       * acquire that meets a commit waits it out. */
      if (r != NULL &&
          r->result_case == WT__V1__EXPORT_RESPONSE__RESULT_ERROR &&
          h->refused++ == 0)
        snprintf(h->first_refusal, sizeof(h->first_refusal), "%s: %s",
                 wt_code_name((wt_code)r->error->code), r->error->message);
      if (r) wt__v1__export_response__free_unpacked(r, NULL);
      close_fds(fds, nfd);
      continue;
    }
    size_t n = atomic_load(&h->nseeds);
    uint64_t got = mapped_seed(m, fds, nfd, h->s, h->seeds, n);
    h->views++;
    if (got == UINT64_MAX) h->torn++;
    if (got == UNMAPPED) h->unmapped++;
    Wt__V1__ExportResponse *rr = release(fd, m->lease_id);
    if (rr) wt__v1__export_response__free_unpacked(rr, NULL);
    wt__v1__export_response__free_unpacked(r, NULL);
    close_fds(fds, nfd);
  }
  close(fd);
  return NULL;
}

static void test_views_during_rounds(void) {
  wtt_server s;
  start(&s, WT_STAGING_SHADOW, 0);
  static hasher_arg h;
  memset(&h, 0, sizeof(h));
  h.s = &s;
  h.seeds[0] = 1;
  atomic_store(&h.nseeds, 1);
  wtt_commit_round(&s, "r1", 1);
  pthread_t th;
  CU_ASSERT_FATAL(pthread_create(&th, NULL, hasher_main, &h) == 0);
  int64_t worst = 0;
  for (uint64_t k = 2; k <= 50; k++) {
    h.seeds[k - 1] = k;
    atomic_store(&h.nseeds, (size_t)k);
    char v[16];
    snprintf(v, sizeof(v), "r%llu", (unsigned long long)k);
    int64_t t0 = wt_mono_ms();
    wtt_commit_round(&s, v, k);
    int64_t took = wt_mono_ms() - t0;
    if (took > worst) worst = took;
  }
  atomic_store(&h.stop, true);
  pthread_join(th, NULL);
  printf(
      "\n  50 rounds beside a consumer: %d views, %d torn, %d errors, %d "
      "not mapped (%s%s%s); slowest round %lld ms\n",
      h.views, h.torn, h.errors, h.unmapped,
      h.unmapped ? strerror(g_map_errno) : "-", h.unmapped ? "; " : "",
      g_map_why, (long long)worst);
  if (h.torn) printf("  the first torn view: %s\n", g_torn_why);
  printf("  %d acquires refused%s%s\n", h.refused,
         h.refused ? "; the first: " : "", h.first_refusal);
  CU_ASSERT(h.views > 0);
  CU_ASSERT_EQUAL(h.torn, 0);
  CU_ASSERT_EQUAL(h.refused, 0);
  CU_ASSERT_EQUAL(h.unmapped, 0);
  CU_ASSERT_EQUAL(h.errors, 0);
  wtt_server_stop(&s);
}

/* Issue 45, item 1: consumers that hold a lease across commits (the vLLM
 * pattern: a worker serves version N while N+1 and N+2 land, then loads)
 * beside back-to-back rounds. A round's start then waits for the shadow's
 * lease while consumers acquire: the lease table's lock and round.mu were
 * taken in both orders and the export hung for good after 100-250 rounds.
 * Every acquire is answered, every round commits, the server still
 * answers. */
#define HOLDERS 4
typedef struct holder_arg {
  atomic_bool stop;
  atomic_int acquires, unanswered, refused;
  char first_refusal[256];
} holder_arg;

static void *holder_main(void *p) {
  holder_arg *h = p;
  int fd = consumer_connect();
  uint64_t held = 0; /* the lease kept across commits */
  while (!atomic_load(&h->stop)) {
    int fds[4];
    size_t nfd = 0;
    Wt__V1__ExportResponse *r = acquire(fd, NULL, 0, 0, fds, &nfd);
    atomic_fetch_add(&h->acquires, 1);
    if (r == NULL) {
      atomic_fetch_add(&h->unanswered, 1);
      break;
    }
    const Wt__V1__Manifest *m = manifest_of(r);
    if (m != NULL) {
      if (held != 0) {
        Wt__V1__ExportResponse *rr = release(fd, held);
        if (rr == NULL) atomic_fetch_add(&h->unanswered, 1);
        if (rr) wt__v1__export_response__free_unpacked(rr, NULL);
      }
      held = m->lease_id;
    } else if (atomic_fetch_add(&h->refused, 1) == 0 &&
               r->result_case == WT__V1__EXPORT_RESPONSE__RESULT_ERROR) {
      snprintf(h->first_refusal, sizeof(h->first_refusal), "%s: %s",
               wt_code_name((wt_code)r->error->code), r->error->message);
    }
    wt__v1__export_response__free_unpacked(r, NULL);
    close_fds(fds, nfd);
  }
  close(fd);
  return NULL;
}

static void test_leases_beside_rounds(void) {
  enum { ROUNDS = 10000 };
  wtt_server s;
  /* A start waits for the shadow's leases up to 10 s: far above a
   * holder's next acquire (they loop), a deadline against hanging. */
  wt_server_options o = {.staging = WT_STAGING_SHADOW,
                         .memory = WT_MEM_SHARED,
                         .export_path = g_sock,
                         .lease_wait_ms = 10000};
  wtt_server_start(&s, "tiny", &o);
  WT_ASSERT_OK(wtt_init_grpc(s.ch, 0, s.workers));
  wtt_commit_round(&s, "v1", 1);
  static holder_arg h;
  memset(&h, 0, sizeof(h));
  pthread_t th[HOLDERS];
  for (int i = 0; i < HOLDERS; i++)
    CU_ASSERT_FATAL(pthread_create(&th[i], NULL, holder_main, &h) == 0);
  int64_t t0 = wt_mono_ms(), worst = 0;
  int done = 0;
  for (uint64_t k = 2; k <= ROUNDS + 1; k++) {
    char v[16];
    snprintf(v, sizeof(v), "v%llu", (unsigned long long)k);
    int64_t r0 = wt_mono_ms();
    uint64_t id = 0;
    wt_status *st = wtt_start(s.ch, &id);
    if (st == NULL) {
      wtt_upd u;
      wtt_upd_init(&u, s.metas, NULL, s.n);
      st = wtt_push_all(s.ch, &u, id, 0, 1 << 20, k, NULL);
      if (st == NULL) st = wtt_finish(s.ch, v, id);
    }
    if (st != NULL) {
      printf("\n  round %llu failed: %s\n", (unsigned long long)k,
             wt_status_message(st));
      wt_status_free(st);
      CU_FAIL("a round beside lease holders failed");
      break;
    }
    int64_t took = wt_mono_ms() - r0;
    if (took > worst) worst = took;
    done++;
  }
  atomic_store(&h.stop, true);
  for (int i = 0; i < HOLDERS; i++) pthread_join(th[i], NULL);
  printf(
      "\n  %d rounds beside %d lease holders in %lld ms (slowest %lld "
      "ms): %d acquires, %d unanswered, %d refused%s%s\n",
      done, HOLDERS, (long long)(wt_mono_ms() - t0), (long long)worst,
      atomic_load(&h.acquires), atomic_load(&h.unanswered),
      atomic_load(&h.refused), h.first_refusal[0] ? "; the first: " : "",
      h.first_refusal);
  CU_ASSERT_EQUAL(done, ROUNDS);
  CU_ASSERT_EQUAL(atomic_load(&h.unanswered), 0);
  CU_ASSERT(atomic_load(&h.acquires) > 0);
  /* The server still answers, and holds the last version. */
  Wt__V1__ServerInfo *info = wtt_info(s.ch);
  CU_ASSERT_FATAL(info != NULL);
  wt_pb_free(&info->base);
  wtt_assert_model_seed(&s, ROUNDS + 1);
  wtt_server_stop(&s);
}

/* Eight consumer processes acquiring the same version at once: each maps
 * the one host copy (the server's RSS does not grow per consumer) and
 * every hash is the trainer's. */
static void test_eight_consumers(void) {
  wtt_server s;
  start(&s, WT_STAGING_SHADOW, 0);
  wtt_commit_round(&s, "v1", 1);
  long rss0 = wtt_rss_kib();
  int go[2], done[2], end[2];
  CU_ASSERT_FATAL(pipe(go) == 0 && pipe(done) == 0 && pipe(end) == 0);
  pid_t kids[8];
  for (int k = 0; k < 8; k++) {
    kids[k] = fork();
    if (kids[k] == 0) {
      char b;
      if (read(go[0], &b, 1) != 1) _exit(3);
      int fd = consumer_connect();
      int fds[4];
      size_t nfd = 0;
      Wt__V1__ExportResponse *r = acquire(fd, NULL, 0, 0, fds, &nfd);
      if (manifest_of(r) == NULL) _exit(2);
      uint64_t seeds[] = {1};
      uint64_t got = mapped_seed(r->manifest, fds, nfd, &s, seeds, 1);
      /* Holding the lease (and the mapping) until the parent looked. */
      char ok = got == 1 ? 'y' : 'n';
      if (write(done[1], &ok, 1) != 1) _exit(3);
      if (read(end[0], &b, 1) != 1) _exit(3);
      _exit(got == 1 ? 0 : 1);
    }
  }
  if (write(go[1], "gggggggg", 8) != 8) CU_FAIL("cannot start the consumers");
  int good = 0;
  for (int k = 0; k < 8; k++) {
    char ok = 0;
    if (read(done[0], &ok, 1) == 1 && ok == 'y') good++;
  }
  Wt__V1__ServerInfo *info = wtt_info(s.ch);
  CU_ASSERT_FATAL(info != NULL);
  uint32_t leases = info->lease_count;
  wt_pb_free(&info->base);
  long rss1 = wtt_rss_kib();
  if (write(end[1], "eeeeeeee", 8) != 8) CU_FAIL("cannot end the consumers");
  int exited = 0;
  for (int k = 0; k < 8; k++) {
    int status = -1;
    waitpid(kids[k], &status, 0);
    exited += WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  close(go[0]);
  close(go[1]);
  close(done[0]);
  close(done[1]);
  close(end[0]);
  close(end[1]);
  printf(
      "\n  8 consumers on one version: %d hashed the trainer's bytes, %u "
      "leases at once; server RSS %ld -> %ld MiB (the model: %.1f MiB)\n",
      good, leases, rss0 / 1024, rss1 / 1024,
      (double)wt_param_store_total_bytes(wt_server_store(s.srv, 0)) /
          (1 << 20));
  CU_ASSERT_EQUAL(good, 8);
  CU_ASSERT_EQUAL(exited, 8);
  CU_ASSERT_EQUAL(leases, 8);
  CU_ASSERT(rss1 - rss0 < 2 * 1024); /* no copy per consumer */
  wtt_server_stop(&s);
}

/* Strangers on the socket: garbage, a 4 GiB length, a frame cut short,
 * a second request before the first was answered, 100 connections; and,
 * as root, a consumer of another uid. Each gets a closed connection; the
 * server keeps serving rounds and a well-behaved consumer. */
static bool closed_by_server(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  char b[256];
  if (poll(&p, 1, 3000) != 1) return false;
  ssize_t n;
  while ((n = read(fd, b, sizeof(b))) > 0) {
  }
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

static void test_strangers(void) {
  wtt_server s;
  start(&s, WT_STAGING_SHADOW, 0);
  wtt_commit_round(&s, "v1", 1);
  int fd = consumer_connect();
  CU_ASSERT(send(fd, "garbage garbage garbage", 23, MSG_NOSIGNAL) == 23);
  CU_ASSERT(closed_by_server(fd));
  close(fd);
  fd = consumer_connect();
  uint8_t huge[WT_FRAME_HEADER_BYTES];
  wt_frame_header(0xffffffffu, huge);
  CU_ASSERT(send(fd, huge, sizeof(huge), MSG_NOSIGNAL) == sizeof(huge));
  CU_ASSERT(closed_by_server(fd));
  close(fd);
  fd = consumer_connect(); /* cut short, then gone */
  wt_frame_header(100, huge);
  CU_ASSERT(send(fd, huge, sizeof(huge), MSG_NOSIGNAL) == sizeof(huge));
  close(fd);
  /* Two requests back to back (the second before the first's answer). */
  fd = consumer_connect();
  Wt__V1__AcquireRequest a = WT__V1__ACQUIRE_REQUEST__INIT;
  a.after_sequence = 99;
  a.timeout_ms = 5000;
  Wt__V1__ExportRequest req = WT__V1__EXPORT_REQUEST__INIT;
  req.op_case = WT__V1__EXPORT_REQUEST__OP_ACQUIRE;
  req.acquire = &a;
  CU_ASSERT(send_request(fd, &req) && send_request(fd, &req));
  CU_ASSERT(closed_by_server(fd));
  close(fd);
  /* 100 connections: past 64, closed at once. */
  int many[100], closed = 0;
  for (int i = 0; i < 100; i++) many[i] = consumer_connect();
  wtt_sleep_ms(200);
  for (int i = 0; i < 100; i++) {
    struct pollfd p = {.fd = many[i], .events = POLLIN};
    char b;
    if (many[i] >= 0 && poll(&p, 1, 0) == 1 && read(many[i], &b, 1) == 0)
      closed++;
  }
  CU_ASSERT(closed >= 36);
  for (int i = 0; i < 100; i++)
    if (many[i] >= 0) close(many[i]);
  /* Another user. */
  if (geteuid() == 0) {
    pid_t kid = fork();
    if (kid == 0) {
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
      /* The socket is 0600: connect itself fails for another uid; the
       * server's SO_PEERCRED check stands behind that. */
      int k = consumer_connect();
      _exit(k < 0 && errno == EACCES ? 0 : k < 0 ? 3 : 1);
    }
    int status = -1;
    waitpid(kid, &status, 0);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  } else {
    printf(
        "\n  skipped: a consumer of another uid (needs root to become "
        "one)");
  }
  /* 10,000 acquires on one connection, none released, no descriptor
   * closed: 16 leases, the rest refused; the server's lease count stays
   * bounded and it goes on. */
  fd = consumer_connect();
  static int kept[64];
  size_t nkept = 0, granted = 0, refused = 0;
  int64_t t0 = wt_mono_ms();
  for (int i = 0; i < 10000; i++) {
    int got[4];
    size_t ngot = 0;
    Wt__V1__ExportResponse *x = acquire(fd, NULL, 0, 0, got, &ngot);
    if (x == NULL) break;
    if (x->result_case == WT__V1__EXPORT_RESPONSE__RESULT_MANIFEST) granted++;
    if (x->result_case == WT__V1__EXPORT_RESPONSE__RESULT_ERROR &&
        x->error->code == WT_RESOURCE_EXHAUSTED)
      refused++;
    for (size_t k = 0; k < ngot; k++) {
      if (nkept < 64)
        kept[nkept++] = got[k];
      else
        close(got[k]);
    }
    wt__v1__export_response__free_unpacked(x, NULL);
  }
  CU_ASSERT_EQUAL(granted, 16);
  CU_ASSERT_EQUAL(refused, 10000 - 16);
  printf(
      "\n  10,000 acquires without release: %zu granted, %zu refused in "
      "%" PRId64 " ms",
      granted, refused, wt_mono_ms() - t0);
  Wt__V1__ServerInfo *flood = wtt_info(s.ch);
  CU_ASSERT_FATAL(flood != NULL);
  CU_ASSERT_EQUAL(flood->lease_count, 16);
  wt_pb_free(&flood->base);
  close_fds(kept, nkept);
  close(fd);
  /* Still serving: a consumer and a round. */
  wtt_commit_round(&s, "v2", 2);
  fd = consumer_connect();
  int fds[4];
  size_t nfd = 0;
  Wt__V1__ExportResponse *r = acquire(fd, NULL, 0, 0, fds, &nfd);
  CU_ASSERT_FATAL(manifest_of(r) != NULL);
  uint64_t seeds[] = {2};
  CU_ASSERT_EQUAL(mapped_seed(r->manifest, fds, nfd, &s, seeds, 1), 2);
  wt__v1__export_response__free_unpacked(r, NULL);
  close_fds(fds, nfd);
  close(fd);
  printf("\n");
  wtt_server_stop(&s);
}

/* Let in by --export-allow-uid (as root: children of uids 65533 and
 * 65534): the socket is 0666 and SO_PEERCRED decides, so the one let in is
 * served and the other is closed at once, counted. */
static void test_allow_uid(void) {
  if (geteuid() != 0) {
    wt_test_skip("export: --export-allow-uid",
                 "needs root to run consumers of other uids");
    return;
  }
  char dir[300], path[340];
  snprintf(dir, sizeof(dir), "%s/shared", g_dir);
  mkdir(dir, 0711);
  chmod(g_dir, 0711); /* others may pass through, not list or write */
  chmod(dir, 0711);
  snprintf(path, sizeof(path), "%s/export.sock", dir);
  char saved[400];
  snprintf(saved, sizeof(saved), "%s", g_sock);
  snprintf(g_sock, sizeof(g_sock), "%s", path);
  unsigned allow[] = {65533};
  wt_server_options o = {.memory = WT_MEM_SHARED,
                         .export_path = path,
                         .export_allow_uids = allow,
                         .n_export_allow_uids = 1};
  wtt_server s;
  wtt_server_start(&s, "small", &o);
  WT_ASSERT_OK(wtt_init_grpc(s.ch, 0, s.workers));
  wtt_commit_round(&s, "v1", 1);
  int codes[2] = {-1, -1};
  const unsigned uids[2] = {65533, 65534};
  for (int k = 0; k < 2; k++) {
    pid_t kid = fork();
    if (kid == 0) {
      if (setgid(uids[k]) != 0 || setuid(uids[k]) != 0) _exit(2);
      int fd = consumer_connect();
      if (fd < 0) _exit(3);
      int fds[4];
      size_t nfd = 0;
      Wt__V1__ExportResponse *r = acquire(fd, NULL, 0, 0, fds, &nfd);
      _exit(manifest_of(r) != NULL ? 0 : 1);
    }
    int status = -1;
    waitpid(kid, &status, 0);
    codes[k] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  CU_ASSERT_EQUAL(codes[0], 0); /* let in: a manifest */
  CU_ASSERT_EQUAL(codes[1], 1); /* another uid: closed, no answer */
  wtt_server_stop(&s);
  chmod(g_dir, 0700);
  snprintf(g_sock, sizeof(g_sock), "%s", saved);
}

/* A consumer in Python, from the proto and the framing alone (stdlib and
 * google.protobuf; tests/fixtures/export_consumer.py): the contract is
 * language-neutral. Skipped, saying why, without grpc_tools. */
static void test_python_consumer(void) {
  if (system("python3 -c 'import grpc_tools.protoc, google.protobuf' "
             ">/dev/null 2>&1") != 0) {
    wt_test_skip(
        "export: a Python consumer",
        "python3 has no grpc_tools/protobuf (pip install grpcio-tools)");
    return;
  }
  char gen[300], out_arg[340], log[340], script[PATH_MAX];
  snprintf(gen, sizeof(gen), "%s/py", g_dir);
  mkdir(gen, 0700);
  snprintf(out_arg, sizeof(out_arg), "--python_out=%s", gen);
  const char *const protoc[] = {"/usr/bin/env",
                                "python3",
                                "-m",
                                "grpc_tools.protoc",
                                "-I" WT_PROTO_DIR,
                                out_arg,
                                WT_PROTO_DIR "/wt/v1/export.proto",
                                NULL};
  snprintf(log, sizeof(log), "%s/protoc.log", g_dir);
  CU_ASSERT_FATAL(wt_proc_run(protoc, log, 120000, NULL) == 0);
  wtt_server s;
  start(&s, WT_STAGING_SHADOW, 0);
  wtt_commit_round(&s, "py-3", 3);
  snprintf(script, sizeof(script), "%s/fixtures/export_consumer.py",
           wt_test_source_dir());
  const char *const argv[] = {"/usr/bin/env", "python3", script, gen,
                              g_sock,         NULL};
  snprintf(log, sizeof(log), "%s/export-consumer.log", g_dir);
  char *out = NULL;
  CU_ASSERT_EQUAL(wt_proc_run(argv, log, 120000, &out), 0);
  CU_ASSERT_FATAL(out != NULL);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "version py-3 1"));
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "write-map refused"));
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "released True"));
  size_t matched = 0;
  for (size_t i = 0; i < s.n; i++) {
    char want[WT_DIGEST_HEX_MAX], line[512];
    wtt_expected_digest(&s.metas[i], 3, WT_HASH_SHA256, want);
    snprintf(line, sizeof(line), "tensor %s %s\n", s.metas[i].name, want);
    matched += strstr(out, line) != NULL;
  }
  CU_ASSERT_EQUAL(matched, s.n);
  printf(
      "\n  a Python consumer (stdlib + protobuf) hashed %zu of %zu tensors "
      "as the trainer's\n",
      matched, s.n);
  free(out);
  wtt_server_stop(&s);
}

/* wt-ctl export-info PATH: what a consumer sees, and the lease given back. */
static void test_ctl_export_info(void) {
  wtt_server s;
  start(&s, WT_STAGING_SHADOW, 0);
  wtt_commit_round(&s, "ctl-1", 1);
  char log[340];
  snprintf(log, sizeof(log), "%s/export-info.log", g_dir);
  const char *const argv[] = {WT_CTL_BIN, "export-info", "--export", g_sock,
                              NULL};
  char *out = NULL;
  CU_ASSERT_EQUAL(wt_proc_run(argv, log, 30000, &out), 0);
  CU_ASSERT_PTR_NOT_NULL(out ? strstr(out, "version:      ctl-1 (sequence 1)")
                             : NULL);
  CU_ASSERT_PTR_NOT_NULL(out ? strstr(out, "lease:        released") : NULL);
  CU_ASSERT_PTR_NOT_NULL(out ? strstr(out, "regions:      2 mapped") : NULL);
  CU_ASSERT_PTR_NOT_NULL(out ? strstr(out, "worker:       0 on cpu") : NULL);
  free(out);
  Wt__V1__ServerInfo *info = wtt_info(s.ch);
  CU_ASSERT_FATAL(info != NULL);
  CU_ASSERT_EQUAL(info->lease_count, 0);
  wt_pb_free(&info->base);
  wtt_server_stop(&s);
  /* No server there: said, exit 1. */
  out = NULL;
  CU_ASSERT_EQUAL(wt_proc_run(argv, log, 30000, &out), 1);
  CU_ASSERT_PTR_NOT_NULL(out ? strstr(out, "cannot connect") : NULL);
  free(out);
}

/* Start-up refusals: no shared memory, a directory others may write. */
static void test_refusals(void) {
  wt_server_options o = {.model = "synthetic:tiny",
                         .listen = "127.0.0.1:0",
                         .export_path = g_sock};
  wt_server *srv = NULL;
  WT_ASSERT_ERR(wt_server_start(&o, &srv), WT_FAILED_PRECONDITION,
                "needs --memory shared");
  char open_dir[300], path[340];
  snprintf(open_dir, sizeof(open_dir), "%s/open", g_dir);
  mkdir(open_dir, 0777);
  chmod(open_dir, 0777);
  snprintf(path, sizeof(path), "%s/export.sock", open_dir);
  o.memory = WT_MEM_SHARED;
  o.export_path = path;
  WT_ASSERT_ERR(wt_server_start(&o, &srv), WT_INVALID_ARGUMENT,
                "is writable by others");
}

void wt_test_suite_export(void) {
  CU_pSuite s = CU_add_suite("export", suite_init, suite_clean);
  CU_add_test(s, "acquire, map, release", test_acquire_and_map);
  CU_add_test(s, "shadow: leases and the rounds they hold back",
              test_shadow_leases);
  CU_add_test(s, "in place: leases, a killed consumer", test_inplace_leases);
  CU_add_test(s, "an acquire during a commit waits it out",
              test_acquire_during_commit);
  CU_add_test(s, "views during 50 rounds are never torn",
              test_views_during_rounds);
  CU_add_test(s, "10,000 rounds beside consumers holding leases",
              test_leases_beside_rounds);
  CU_add_test(s, "eight consumers, one host copy", test_eight_consumers);
  CU_add_test(s, "strangers on the socket", test_strangers);
  CU_add_test(s, "a Python consumer from the proto", test_python_consumer);
  CU_add_test(s, "wt-ctl export-info", test_ctl_export_info);
  CU_add_test(s, "start-up refusals", test_refusals);
  CU_add_test(s, "--export-allow-uid", test_allow_uid);
}
