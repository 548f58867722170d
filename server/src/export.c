/* export.c: the inference-side export (docs/export.md, proto/wt/v1/
 * export.proto). One thread serves a Unix-domain stream socket: it checks
 * who connects (SO_PEERCRED), reads length-prefixed ExportRequests
 * (wt/frame.h), and answers an acquire with a manifest and the worker's
 * memfds (SCM_RIGHTS) under a lease (leases.c) that rounds respect.
 *
 * Every consumer is a stranger until proven otherwise: a peer of another
 * user is closed at once; garbage, a frame too long or cut short closes
 * its connection; one that does not read its answers is closed once its
 * pending bytes wait longer than EXPORT_SEND_MS; connections, leases and
 * waiting acquires are bounded. The thread never blocks on a consumer. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "leases.h"
#include "server_state.h"
#include "wt/cuda.h"
#include "wt/frame.h"
#include "wt/log.h"
#include "wt/v1/export.pb-c.h"
#include "wt/lock.h"

#define EXPORT_MAX_REQUEST 65536
#define EXPORT_MAX_CONNS 64
#define EXPORT_TICK_MS 20
#define EXPORT_SEND_MS 10000
/* A connection that holds no lease and asks nothing this long is closed;
 * a request's frame must arrive whole within EXPORT_FRAME_MS of its first
 * byte (trust row 3: idle or half-frame connections held every place). */
#define EXPORT_IDLE_MS 60000 /* defaults of wt_server_options' */
#define EXPORT_FRAME_MS 5000
/* Connections one uid may hold: its part among the uids connected and one
 * more, so that another uid always finds a place; never below this. */
#define EXPORT_MIN_CONNS_PER_UID 4
/* How long any acquire, even one with timeout_ms 0, waits out a commit in
 * progress: the window between a store's new bytes going live and the
 * sequence that names them is a few pointer flips, so an acquire that met
 * it is answered with the new version instead of a refusal. A commit that
 * outlasts this is UNAVAILABLE (and says so), never a stalled consumer. */
#define EXPORT_COMMIT_WAIT_MS 1000

typedef struct export_conn {
  int fd;
  uint64_t id; /* the consumer, for its leases */
  int pid;
  unsigned uid, gid;
  char name[64];
  wt_frame_reader rd;
  /* An acquire waiting for a commit (or for an in-place round to end). */
  bool waiting;
  uint64_t wait_request, wait_after;
  uint32_t wait_worker;
  int64_t wait_deadline;
  int64_t wait_since; /* when the acquire came */
  char *wait_version;
  /* An answer not yet all sent; its descriptors went with its first byte. */
  uint8_t *out;
  size_t out_len, out_off;
  int64_t out_since;
  int64_t active_ms;      /* its last request (or its connecting) */
  int64_t frame_since_ms; /* a request's first byte came; 0: none pending */
} export_conn;

/* How a consumer maps one region of one worker's store: fixed from the
 * store's creation to its destruction, so worked out once at start. */
typedef struct export_region {
  Wt__V1__ExportRegion__Kind kind;
  uint64_t size;
  int fd; /* HOST_MEMFD: the store's memfd (not ours to close) */
  uint8_t id[16];
  unsigned char handle[WT_CUDA_IPC_HANDLE_BYTES]; /* DEVICE_CUDA_IPC */
  uint64_t handle_offset;
  char uuid[WT_CUDA_UUID_MAX];
} export_region;

typedef struct export_worker {
  export_region regions[WT_PARAM_STORE_MAX_REGIONS];
  size_t nregions;
  char device[WT_DEVICE_NAME_MAX];
} export_worker;

struct wt_export {
  wt_server *srv;
  export_worker *workers; /* srv->nworkers */
  char *path;
  int lfd, wakefd;
  pthread_t th;
  bool started;
  export_conn *conns[EXPORT_MAX_CONNS];
  size_t nconns;
  uint64_t next_id;
  unsigned *uids, *gids;
  size_t nuids, ngids;
  atomic_bool quit;
  int64_t idle_ms, frame_ms;
  atomic_uint_fast64_t refused, dropped;
  wt_log_limit log_limit; /* the export thread's */
};

#define note(e, fmt, ...)                                            \
  wt_log_limited(&(e)->log_limit, WT_LOG_WARN, "export", "%s: " fmt, \
                 (e)->path, __VA_ARGS__)

/* ---- connections ------------------------------------------------------------
 */

static void conn_close(wt_export *e, size_t k, const char *why) {
  export_conn *c = e->conns[k];
  size_t dropped = wt_leases_drop_consumer(e->srv->ex.leases, c->id);
  if (why != NULL) {
    atomic_fetch_add(&e->dropped, 1);
    note(e, "%s: closed: %s%s", c->name, why,
         dropped ? " (its leases ended)" : "");
  } else if (dropped > 0) {
    WT_LOGD("export", "%s left; %zu lease(s) ended", c->name, dropped);
  }
  close(c->fd);
  wt_frame_reader_free(&c->rd);
  free(c->wait_version);
  free(c->out);
  free(c);
  e->conns[k] = e->conns[--e->nconns];
}

static bool peer_allowed(const wt_export *e, unsigned uid, unsigned gid) {
  if (uid == (unsigned)geteuid()) return true;
  for (size_t i = 0; i < e->nuids; i++)
    if (e->uids[i] == uid) return true;
  for (size_t i = 0; i < e->ngids; i++)
    if (e->gids[i] == gid) return true;
  return false;
}

static void accept_one(wt_export *e) {
  int fd = accept4(e->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
      note(e, "accept: %s", strerror(errno));
    return;
  }
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    note(e, "a consumer refused: SO_PEERCRED: %s", strerror(errno));
    atomic_fetch_add(&e->refused, 1);
    close(fd);
    return;
  }
  if (!peer_allowed(e, cred.uid, cred.gid)) {
    atomic_fetch_add(&e->refused, 1);
    note(e,
         "pid %d (uid %u, gid %u) refused: neither the server's user nor "
         "allowed (--export-allow-uid, --export-allow-gid)",
         (int)cred.pid, (unsigned)cred.uid, (unsigned)cred.gid);
    close(fd);
    return;
  }
  size_t of_uid = 0, uids = 1;
  for (size_t k = 0; k < e->nconns; k++) {
    of_uid += e->conns[k]->uid == cred.uid;
    bool first = e->conns[k]->uid != cred.uid;
    for (size_t j = 0; first && j < k; j++)
      first = e->conns[j]->uid != e->conns[k]->uid;
    uids += first;
  }
  size_t share = EXPORT_MAX_CONNS / (uids + 1);
  if (share < EXPORT_MIN_CONNS_PER_UID) share = EXPORT_MIN_CONNS_PER_UID;
  if (e->nconns == EXPORT_MAX_CONNS || of_uid >= share) {
    atomic_fetch_add(&e->refused, 1);
    note(e, "pid %d (uid %u) refused: %s", (int)cred.pid, (unsigned)cred.uid,
         of_uid >= share ? "its uid holds its share of the connections"
                         : "the connections are all taken");
    close(fd);
    return;
  }
  export_conn *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    close(fd);
    return;
  }
  c->fd = fd;
  c->id = ++e->next_id;
  c->pid = (int)cred.pid;
  c->uid = (unsigned)cred.uid;
  c->gid = (unsigned)cred.gid;
  snprintf(c->name, sizeof(c->name), "consumer pid %d (uid %u)", c->pid,
           c->uid);
  wt_frame_reader_init(&c->rd, EXPORT_MAX_REQUEST, c->name);
  c->active_ms = wt_mono_ms();
  e->conns[e->nconns++] = c;
  WT_LOGD("export", "%s connected", c->name);
}

/* ---- answers
 * ----------------------------------------------------------------- */

/* Queues `resp` (and fds[0..nfd), sent with its first byte); false when
 * the connection must close. */
static bool answer(export_conn *c, const Wt__V1__ExportResponse *resp,
                   const int *fds, size_t nfd) {
  if (c->out != NULL) return false; /* one request at a time */
  size_t n = wt__v1__export_response__get_packed_size(resp);
  uint8_t *buf = malloc(WT_FRAME_HEADER_BYTES + (n ? n : 1));
  if (buf == NULL) return false;
  wt_frame_header((uint32_t)n, buf);
  wt__v1__export_response__pack(resp, buf + WT_FRAME_HEADER_BYTES);
  size_t total = WT_FRAME_HEADER_BYTES + n;
  struct iovec iov = {buf, total};
  union {
    struct cmsghdr h;
    char space[CMSG_SPACE(sizeof(int) * WT_PARAM_STORE_MAX_REGIONS)];
  } ctl;
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  if (nfd > 0) {
    memset(&ctl, 0, sizeof(ctl));
    mh.msg_control = ctl.space;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfd);
    struct cmsghdr *h = CMSG_FIRSTHDR(&mh);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int) * nfd);
    memcpy(CMSG_DATA(h), fds, sizeof(int) * nfd);
  }
  ssize_t sent = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
    free(buf);
    return false;
  }
  if (sent < 0 && nfd > 0) { /* nothing went: the fds must go with byte 0 */
    free(buf);
    return false;
  }
  if (sent == (ssize_t)total) {
    free(buf);
    return true;
  }
  c->out = buf;
  c->out_len = total;
  c->out_off = sent > 0 ? (size_t)sent : 0;
  c->out_since = wt_mono_ms();
  return true;
}

static bool answer_error(export_conn *c, uint64_t request_id, wt_code code,
                         const char *msg) {
  Wt__V1__ExportError err = WT__V1__EXPORT_ERROR__INIT;
  err.code = (int32_t)code;
  err.message = (char *)msg;
  Wt__V1__ExportResponse r = WT__V1__EXPORT_RESPONSE__INIT;
  r.request_id = request_id;
  r.result_case = WT__V1__EXPORT_RESPONSE__RESULT_ERROR;
  r.error = &err;
  return answer(c, &r, NULL, 0);
}

static bool answer_status(export_conn *c, uint64_t request_id, wt_status *st) {
  bool ok =
      answer_error(c, request_id, wt_status_code(st), wt_status_message(st));
  wt_status_free(st);
  return ok;
}

/* Sends more of a pending answer; false when the connection must close. */
static bool flush(export_conn *c) {
  while (c->out != NULL) {
    ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                     MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c->out_off += (size_t)n;
    if (c->out_off == c->out_len) {
      free(c->out);
      c->out = NULL;
    }
  }
  return true;
}

/* ---- acquire
 * ----------------------------------------------------------------- */

typedef enum { ACQ_DONE, ACQ_WAIT, ACQ_CLOSE } acq_result;

/* Builds and sends the manifest of the version held now, under a lease,
 * when it can be had now: ACQ_WAIT when the caller should wait (nothing
 * newer than `after` yet, or an in-place round is writing) and `may_wait`
 * (its timeout has not passed), or when a commit is in progress and
 * `commit_wait` (EXPORT_COMMIT_WAIT_MS has not passed since it came). */
static acq_result try_acquire(wt_export *e, export_conn *c, uint64_t rid,
                              const char *want, uint64_t after, uint32_t worker,
                              bool may_wait, bool commit_wait) {
  wt_server *srv = e->srv;
  if (worker >= srv->nworkers) {
    char msg[128];
    snprintf(msg, sizeof(msg),
             "worker %" PRIu32 " does not exist: the server has %" PRIu32
             " (0 to %" PRIu32 ")",
             worker, srv->nworkers, srv->nworkers - 1);
    return answer_error(c, rid, WT_OUT_OF_RANGE, msg) ? ACQ_DONE : ACQ_CLOSE;
  }
  const export_worker *ew = &e->workers[worker];
  wt_param_store *s = wt_worker_store(srv->workers[worker]);
  bool inplace = wt_param_store_staging(s) == WT_STAGING_INPLACE;
  wt_param_store_read_lock(s);
  wt_mutex_lock(&srv->round.mu);
  uint64_t seq = srv->round.sequence;
  /* committing: the bytes under this read lock may be the next version's
   * while its sequence is not yet counted; and an in-place round writes
   * the very bytes a lease would describe. */
  bool busy =
      srv->round.committing ||
      (inplace && (srv->round.round_id != 0 || !wt_param_store_complete(s)));
  bool committing = srv->round.committing;
  if (busy || seq == 0 || seq <= after) {
    wt_mutex_unlock(&srv->round.mu);
    wt_param_store_read_unlock(s);
    if (may_wait || (committing && commit_wait)) return ACQ_WAIT;
    if (committing) {
      char msg[200];
      snprintf(msg, sizeof(msg),
               "FinishWeightUpdate has been committing the version after "
               "sequence %" PRIu64 " for over %d ms; acquire again",
               seq, EXPORT_COMMIT_WAIT_MS);
      return answer_error(c, rid, WT_UNAVAILABLE, msg) ? ACQ_DONE : ACQ_CLOSE;
    }
    if (busy)
      return answer_error(c, rid, WT_UNAVAILABLE,
                          "a round is writing the weights in place (or the "
                          "store is incomplete after a failed one); acquire "
                          "again once a round commits")
                 ? ACQ_DONE
                 : ACQ_CLOSE;
    char msg[160];
    snprintf(msg, sizeof(msg),
             "no version committed after sequence %" PRIu64
             " yet (the server holds sequence %" PRIu64 ")",
             after, seq);
    return answer_error(c, rid, WT_FAILED_PRECONDITION, msg) ? ACQ_DONE
                                                             : ACQ_CLOSE;
  }
  const wt_version_entry *v = &srv->round.history[seq % WT_VERSION_HISTORY];
  char version[256];
  snprintf(version, sizeof(version), "%s", v->version ? v->version : "");
  int64_t committed_ms = v->committed_unix_ms;
  wt_status *st = NULL;
  uint64_t lease = 0;
  if (want != NULL && *want != '\0' && strcmp(want, version) != 0)
    st = wt_status_new(WT_NOT_FOUND,
                       "version '%s' is not held: the server holds '%s' "
                       "(sequence %" PRIu64 ")",
                       want, version, seq);
  else /* under mu, where a round checks for leases before it begins */
    st = wt_leases_take(srv->ex.leases, c->id, c->pid, c->uid, seq, version,
                        &lease);
  wt_mutex_unlock(&srv->round.mu);
  if (st != NULL) {
    wt_param_store_read_unlock(s);
    return answer_status(c, rid, st) ? ACQ_DONE : ACQ_CLOSE;
  }

  size_t nr = ew->nregions, nfd = 0;
  size_t n = wt_param_store_count(s);
  Wt__V1__ExportRegion reg[WT_PARAM_STORE_MAX_REGIONS];
  Wt__V1__ExportRegion *regp[WT_PARAM_STORE_MAX_REGIONS];
  int fds[WT_PARAM_STORE_MAX_REGIONS];
  for (size_t r = 0; r < nr; r++) {
    const export_region *er = &ew->regions[r];
    wt__v1__export_region__init(&reg[r]);
    reg[r].index = (uint32_t)r;
    reg[r].kind = er->kind;
    reg[r].size = er->size;
    reg[r].region_id.data = (uint8_t *)er->id;
    reg[r].region_id.len = sizeof(er->id);
    if (er->kind == WT__V1__EXPORT_REGION__KIND__HOST_MEMFD) {
      reg[r].fd_index = (int32_t)nfd;
      fds[nfd++] = er->fd;
    } else {
      reg[r].fd_index = -1;
      reg[r].ipc_handle.data = (uint8_t *)er->handle;
      reg[r].ipc_handle.len = sizeof(er->handle);
      reg[r].gpu_uuid = (char *)er->uuid;
      reg[r].handle_offset = er->handle_offset;
    }
    regp[r] = &reg[r];
  }
  Wt__V1__ExportTensor *ts = calloc(n ? n : 1, sizeof(*ts));
  Wt__V1__ExportTensor **tp = calloc(n ? n : 1, sizeof(*tp));
  if (ts == NULL || tp == NULL) {
    wt_param_store_read_unlock(s);
    free(ts);
    free(tp);
    wt_status_free(wt_leases_drop(srv->ex.leases, c->id, lease));
    return answer_error(c, rid, WT_RESOURCE_EXHAUSTED, "out of memory")
               ? ACQ_DONE
               : ACQ_CLOSE;
  }
  for (size_t i = 0; i < n; i++) {
    const wt_tensor_meta *m = wt_param_store_meta(s, i);
    size_t region = 0;
    uint64_t offset = 0;
    wt_param_store_locate(s, i, &region, &offset);
    wt__v1__export_tensor__init(&ts[i]);
    ts[i].name = m->name;
    ts[i].dtype = (char *)wt_dtype_safetensors_name(m->dtype);
    ts[i].n_shape = m->ndim;
    ts[i].shape = (int64_t *)m->shape;
    ts[i].region = (uint32_t)region;
    ts[i].offset = offset;
    ts[i].nbytes = m->nbytes;
    tp[i] = &ts[i];
  }
  Wt__V1__Manifest man = WT__V1__MANIFEST__INIT;
  man.lease_id = lease;
  man.version = version;
  man.sequence = seq;
  man.committed_unix_ms = committed_ms;
  man.n_regions = nr;
  man.regions = regp;
  man.n_tensors = n;
  man.tensors = tp;
  man.worker = worker;
  man.device = (char *)ew->device;
  Wt__V1__ExportResponse resp = WT__V1__EXPORT_RESPONSE__INIT;
  resp.request_id = rid;
  resp.result_case = WT__V1__EXPORT_RESPONSE__RESULT_MANIFEST;
  resp.manifest = &man;
  /* The read lock is held until the manifest is packed: its locations are
   * the live ones of this sequence, and the lease keeps them so. */
  bool ok = answer(c, &resp, fds, nfd);
  wt_param_store_read_unlock(s);
  free(ts);
  free(tp);
  WT_LOGD("export", "%s: lease %" PRIu64 " on '%s' (sequence %" PRIu64 ")",
          c->name, lease, version, seq);
  return ok ? ACQ_DONE : ACQ_CLOSE;
}

/* ---- requests
 * ------------------------------------------------------------------ */

static bool handle(wt_export *e, export_conn *c, const uint8_t *body,
                   size_t len) {
  Wt__V1__ExportRequest *req = wt__v1__export_request__unpack(NULL, len, body);
  if (req == NULL) {
    note(e, "%s: a frame that is not an ExportRequest; closing", c->name);
    return false;
  }
  bool ok = true;
  if (c->waiting || c->out != NULL) {
    ok = false; /* a second request before the first was answered */
    note(e, "%s: a request before the last one was answered; closing", c->name);
  } else if (req->op_case == WT__V1__EXPORT_REQUEST__OP_ACQUIRE) {
    const Wt__V1__AcquireRequest *a = req->acquire;
    acq_result r =
        try_acquire(e, c, req->request_id, a->version, a->after_sequence,
                    a->worker, a->timeout_ms > 0, true);
    if (r == ACQ_WAIT) {
      c->waiting = true;
      c->wait_request = req->request_id;
      c->wait_after = a->after_sequence;
      c->wait_worker = a->worker;
      c->wait_since = wt_mono_ms();
      c->wait_deadline = c->wait_since + a->timeout_ms;
      c->wait_version = strdup(a->version ? a->version : "");
      if (c->wait_version == NULL) ok = false;
    }
    ok = ok && r != ACQ_CLOSE;
  } else if (req->op_case == WT__V1__EXPORT_REQUEST__OP_RELEASE) {
    wt_status *st =
        wt_leases_drop(e->srv->ex.leases, c->id, req->release->lease_id);
    if (st != NULL) {
      ok = answer_status(c, req->request_id, st);
    } else {
      Wt__V1__ExportResponse r = WT__V1__EXPORT_RESPONSE__INIT;
      r.request_id = req->request_id;
      r.result_case = WT__V1__EXPORT_RESPONSE__RESULT_RELEASED;
      r.released = req->release->lease_id;
      ok = answer(c, &r, NULL, 0);
    }
  } else {
    ok = answer_error(c, req->request_id, WT_INVALID_ARGUMENT,
                      "an ExportRequest with neither acquire nor release");
  }
  wt__v1__export_request__free_unpacked(req, NULL);
  return ok;
}

/* Reads what the connection sent; false when it must close (*why set,
 * NULL for a consumer that simply left). */
static bool readable(wt_export *e, export_conn *c, const char **why) {
  uint8_t buf[4096];
  for (int rounds = 0; rounds < 64; rounds++) {
    size_t want = wt_frame_reader_want(&c->rd);
    if (want > sizeof(buf)) want = sizeof(buf);
    ssize_t n = recv(c->fd, buf, want, MSG_DONTWAIT);
    if (n == 0) {
      *why = NULL;
      return false;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return true;
      *why = strerror(errno);
      return false;
    }
    wt_status *st = wt_frame_reader_feed(&c->rd, buf, (size_t)n);
    if (st != NULL) {
      note(e, "%s", wt_status_message(st));
      wt_status_free(st);
      *why = "a malformed frame";
      return false;
    }
    const uint8_t *body = NULL;
    size_t len = 0;
    if (wt_frame_reader_frame(&c->rd, &body, &len)) {
      c->active_ms = wt_mono_ms();
      c->frame_since_ms = 0;
      if (!handle(e, c, body, len)) {
        *why = "a bad request";
        return false;
      }
    } else if (c->frame_since_ms == 0) {
      c->frame_since_ms = wt_mono_ms(); /* a request begun */
    }
  }
  return true;
}

/* ---- the thread
 * ------------------------------------------------------------------ */

static void *export_main(void *arg) {
  wt_export *e = arg;
  struct pollfd pfd[EXPORT_MAX_CONNS + 2];
  while (!atomic_load(&e->quit)) {
    size_t np = 0;
    pfd[np++] = (struct pollfd){.fd = e->wakefd, .events = POLLIN};
    pfd[np++] = (struct pollfd){.fd = e->lfd, .events = POLLIN};
    for (size_t k = 0; k < e->nconns; k++)
      pfd[np++] = (struct pollfd){
          .fd = e->conns[k]->fd,
          .events = (short)(POLLIN | (e->conns[k]->out ? POLLOUT : 0))};
    int rc = poll(pfd, np, EXPORT_TICK_MS);
    if (rc < 0 && errno != EINTR) break;
    if (pfd[0].revents & POLLIN) {
      uint64_t v;
      if (read(e->wakefd, &v, sizeof(v)) < 0) { /* woken either way */
      }
    }
    /* Connections first (by fd: closing one moves another into its
     * place), then a newcomer. */
    for (size_t p = 2; p < np; p++) {
      if (pfd[p].revents == 0) continue;
      size_t k = 0;
      while (k < e->nconns && e->conns[k]->fd != pfd[p].fd) k++;
      if (k == e->nconns) continue;
      export_conn *c = e->conns[k];
      const char *why = NULL;
      bool keep = true;
      if (pfd[p].revents & (POLLERR | POLLNVAL)) keep = false;
      if (keep && (pfd[p].revents & POLLOUT)) keep = flush(c);
      if (keep && (pfd[p].revents & (POLLIN | POLLHUP)))
        keep = readable(e, c, &why);
      if (!keep) conn_close(e, k, why);
    }
    if (pfd[1].revents & POLLIN) accept_one(e);
    /* Waiting acquires, and answers a consumer does not take. */
    int64_t now = wt_mono_ms();
    for (size_t k = 0; k < e->nconns;) {
      export_conn *c = e->conns[k];
      const char *why = NULL;
      bool keep = true;
      if (c->out != NULL && now - c->out_since > EXPORT_SEND_MS) {
        keep = false;
        why = "it did not read its answer for 10 s";
      } else if (c->frame_since_ms && now - c->frame_since_ms > e->frame_ms) {
        keep = false;
        why =
            "a request did not arrive whole in time (--export's frame "
            "deadline)";
      } else if (!c->waiting && c->out == NULL &&
                 now - c->active_ms > e->idle_ms &&
                 wt_leases_held_by(e->srv->ex.leases, c->id) == 0) {
        keep = false;
        why = "it held no lease and asked nothing for the idle limit";
      } else if (c->waiting) {
        bool last = now >= c->wait_deadline;
        bool commit_wait = now - c->wait_since < EXPORT_COMMIT_WAIT_MS;
        acq_result r =
            try_acquire(e, c, c->wait_request, c->wait_version, c->wait_after,
                        c->wait_worker, !last, commit_wait);
        if (r != ACQ_WAIT) {
          c->waiting = false;
          free(c->wait_version);
          c->wait_version = NULL;
        }
        keep = r != ACQ_CLOSE;
        if (!keep) why = "its answer could not be sent";
      }
      if (keep)
        k++;
      else
        conn_close(e, k, why);
    }
  }
  while (e->nconns > 0) conn_close(e, e->nconns - 1, NULL);
  return NULL;
}

/* ---- start and stop
 * ---------------------------------------------------------------- */

/* The socket's directory: a directory no one else may write to (a
 * stranger there could replace the socket under the consumers). */
static wt_status *check_dir(const char *path) {
  char *copy = strdup(path);
  if (copy == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  char *dir = dirname(copy);
  struct stat sb;
  wt_status *st = NULL;
  if (stat(dir, &sb) != 0)
    st = wt_status_new(WT_INVALID_ARGUMENT, "--export %s: directory '%s': %s",
                       path, dir, strerror(errno));
  else if (!S_ISDIR(sb.st_mode))
    st = wt_status_new(WT_INVALID_ARGUMENT,
                       "--export %s: '%s' is not a directory", path, dir);
  else if (sb.st_uid != geteuid() && sb.st_uid != 0)
    st = wt_status_new(WT_INVALID_ARGUMENT,
                       "--export %s: directory '%s' belongs to uid %u, "
                       "neither this user nor root",
                       path, dir, (unsigned)sb.st_uid);
  else if (sb.st_mode & (S_IWGRP | S_IWOTH))
    st = wt_status_new(WT_INVALID_ARGUMENT,
                       "--export %s: directory '%s' (mode %03o) is writable "
                       "by others, who could replace the socket; use a "
                       "private one such as $XDG_RUNTIME_DIR",
                       path, dir, (unsigned)(sb.st_mode & 0777));
  free(copy);
  return st;
}

static wt_status *open_socket(wt_export *e) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(e->path) >= sizeof(a.sun_path))
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "--export %s: longer than a socket path may be (%zu)",
                         e->path, sizeof(a.sun_path) - 1);
  memcpy(a.sun_path, e->path, strlen(e->path) + 1);
  struct stat sb;
  if (lstat(e->path, &sb) == 0) {
    if (!S_ISSOCK(sb.st_mode) || sb.st_uid != geteuid())
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "--export %s: exists and is not a socket of this "
                           "user's; remove it",
                           e->path);
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool live =
        probe >= 0 && connect(probe, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (probe >= 0) close(probe);
    if (live)
      return wt_status_new(WT_UNAVAILABLE,
                           "--export %s: another server serves it", e->path);
    unlink(e->path); /* a stale socket of ours */
  }
  e->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (e->lfd < 0)
    return wt_status_from_errno(errno, "--export %s: socket", e->path);
  if (bind(e->lfd, (struct sockaddr *)&a, sizeof(a)) != 0)
    return wt_status_new(WT_UNAVAILABLE, "--export %s: bind: %s", e->path,
                         strerror(errno));
  /* Only the server's user may connect, unless others were let in: one
   * gid is the socket's group (0660); more, or any uid, need 0666 and
   * SO_PEERCRED alone decides (the directory must let them reach it). */
  mode_t mode = 0600;
  if (e->ngids == 1 && e->nuids == 0) {
    if (chown(e->path, (uid_t)-1, (gid_t)e->gids[0]) != 0)
      return wt_status_new(WT_UNAVAILABLE, "--export %s: chown to gid %u: %s",
                           e->path, e->gids[0], strerror(errno));
    mode = 0660;
  } else if (e->ngids > 0 || e->nuids > 0) {
    mode = 0666;
  }
  if (chmod(e->path, mode) != 0 || listen(e->lfd, 64) != 0)
    return wt_status_new(WT_UNAVAILABLE, "--export %s: %s", e->path,
                         strerror(errno));
  return NULL;
}

/* Works out, once, how a consumer maps each worker's regions: a memfd's
 * id from its inode; a device region's CUDA IPC handle of the allocation
 * that holds it and the GPU's UUID. */
static wt_status *describe_workers(wt_export *e) {
  wt_server *srv = e->srv;
  e->workers = calloc(srv->nworkers ? srv->nworkers : 1, sizeof(*e->workers));
  if (e->workers == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "--export: out of memory");
  for (uint32_t w = 0; w < srv->nworkers; w++) {
    export_worker *ew = &e->workers[w];
    wt_param_store *s = wt_worker_store(srv->workers[w]);
    wt_device dev = wt_param_store_device(s);
    wt_device_format(dev, ew->device);
    wt_param_region regions[WT_PARAM_STORE_MAX_REGIONS];
    ew->nregions = wt_param_store_regions(s, regions);
    for (size_t r = 0; r < ew->nregions; r++) {
      export_region *er = &ew->regions[r];
      er->size = regions[r].len;
      er->fd = -1;
      if (regions[r].kind == WT_MEM_SHARED) {
        struct stat sb;
        if (fstat(regions[r].fd, &sb) != 0)
          return wt_status_from_errno(
              errno, "--export: worker %" PRIu32 " region %zu: fstat", w, r);
        uint64_t d = (uint64_t)sb.st_dev, ino = (uint64_t)sb.st_ino;
        memcpy(er->id, &d, 8);
        memcpy(er->id + 8, &ino, 8);
        er->kind = WT__V1__EXPORT_REGION__KIND__HOST_MEMFD;
        er->fd = regions[r].fd;
        continue;
      }
      const wt_cuda_api *api = NULL;
      void *base = NULL;
      size_t size = 0;
      wt_status *st = wt_cuda_api_get(&api);
      if (st == NULL) st = wt_cuda_bind(dev.index);
      if (st == NULL)
        st = api->ipc_export(regions[r].base, &base, &size, er->handle);
      if (st == NULL) st = api->device_uuid(dev.index, er->uuid);
      if (st != NULL)
        return wt_status_prefix(st,
                                "--export: worker %" PRIu32 " (%s) region %zu",
                                w, ew->device, r);
      er->kind = WT__V1__EXPORT_REGION__KIND__DEVICE_CUDA_IPC;
      er->handle_offset =
          (uint64_t)((uintptr_t)regions[r].base - (uintptr_t)base);
      /* The same allocation gives the same handle: its bytes are its id. */
      uint64_t h = 1469598103934665603ull, o = er->handle_offset;
      for (size_t i = 0; i < sizeof(er->handle); i++)
        h = (h ^ er->handle[i]) * 1099511628211ull;
      memcpy(er->id, &h, 8);
      memcpy(er->id + 8, &o, 8);
    }
  }
  return NULL;
}

wt_status *wt_export_start(wt_server *srv, const wt_server_options *o,
                           wt_export **out) {
  *out = NULL;
  for (uint32_t w = 0; w < srv->nworkers; w++) {
    wt_mem_kind k = wt_param_store_memory(wt_worker_store(srv->workers[w]));
    if (k != WT_MEM_SHARED && k != WT_MEM_DEVICE)
      return wt_status_new(
          WT_FAILED_PRECONDITION,
          "--export %s: needs --memory shared (a consumer maps the worker's "
          "memfd) or device (a consumer opens its CUDA IPC handle); worker "
          "%" PRIu32 " holds %s memory",
          o->export_path, w, wt_mem_kind_name(k));
  }
  wt_status *dir = check_dir(o->export_path);
  if (dir != NULL) return dir;
  wt_export *e = calloc(1, sizeof(*e));
  if (e == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  e->srv = srv;
  e->lfd = e->wakefd = -1;
  e->idle_ms = o->export_idle_ms ? o->export_idle_ms : EXPORT_IDLE_MS;
  e->frame_ms = o->export_frame_ms ? o->export_frame_ms : EXPORT_FRAME_MS;
  atomic_init(&e->quit, false);
  atomic_init(&e->refused, 0);
  atomic_init(&e->dropped, 0);
  e->path = strdup(o->export_path);
  if (o->n_export_allow_uids > 0)
    e->uids = malloc(o->n_export_allow_uids * sizeof(*e->uids));
  if (o->n_export_allow_gids > 0)
    e->gids = malloc(o->n_export_allow_gids * sizeof(*e->gids));
  wt_status *st = NULL;
  if (e->path == NULL || (o->n_export_allow_uids && e->uids == NULL) ||
      (o->n_export_allow_gids && e->gids == NULL)) {
    st = wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
    goto fail;
  }
  e->nuids = o->n_export_allow_uids;
  e->ngids = o->n_export_allow_gids;
  if (e->nuids)
    memcpy(e->uids, o->export_allow_uids, e->nuids * sizeof(unsigned));
  if (e->ngids)
    memcpy(e->gids, o->export_allow_gids, e->ngids * sizeof(unsigned));
  if ((st = describe_workers(e)) != NULL) goto fail;
  if ((st = open_socket(e)) != NULL) goto fail;
  e->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  int rc = e->wakefd < 0 ? errno : pthread_create(&e->th, NULL, export_main, e);
  if (rc != 0) {
    st = wt_status_from_errno(rc, "--export %s: starting its thread", e->path);
    goto fail;
  }
  e->started = true;
  struct stat sb;
  WT_LOGI("export",
          "serving committed versions on %s (mode %03o; %zu uid(s) and %zu "
          "gid(s) let in beside this user)",
          e->path, stat(e->path, &sb) == 0 ? (unsigned)(sb.st_mode & 0777) : 0u,
          e->nuids, e->ngids);
  *out = e;
  return NULL;
fail:
  wt_export_stop(e);
  return st;
}

void wt_export_stop(wt_export *e) {
  if (e == NULL) return;
  if (e->started) {
    atomic_store(&e->quit, true);
    uint64_t one = 1;
    if (write(e->wakefd, &one, sizeof(one)) < 0) { /* it wakes within a tick */
    }
    pthread_join(e->th, NULL);
  }
  if (e->lfd >= 0) {
    close(e->lfd);
    unlink(e->path);
  }
  if (e->wakefd >= 0) close(e->wakefd);
  free(e->path);
  free(e->uids);
  free(e->gids);
  free(e->workers);
  free(e);
}

void wt_export_counts(wt_export *e, uint64_t *refused, uint64_t *dropped) {
  if (refused) *refused = e ? atomic_load(&e->refused) : 0;
  if (dropped) *dropped = e ? atomic_load(&e->dropped) : 0;
}
