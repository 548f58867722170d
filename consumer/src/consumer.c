/* consumer.c: libwt_consumer (wt/consumer.h), a client of the export
 * socket written from proto/wt/v1/export.proto and the framing alone.
 *
 * One request at a time: send a frame, wait (poll, against a deadline) for
 * the answer's frame, take the descriptors that came with its first byte.
 * Regions are cached by region_id: a host region is mapped read-only once,
 * a device region opened with cudaIpcOpenMemHandle once; the descriptors of
 * a region already mapped are closed at once. The manifest is checked
 * before any pointer is made from it: a tensor outside its region, a
 * region without its descriptor, or an answer to another request closes
 * the consumer with an error naming what was wrong. */

#include "wt/consumer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "wt/clock.h"
#include "wt/cuda.h"
#include "wt/frame.h"
#include "wt/v1/export.pb-c.h"

#define MAX_RESPONSE (64u << 20) /* a manifest: about 500,000 tensors */
#define UNPACK_FACTOR 8          /* what unpacking one may allocate */
#define MAX_FDS 16               /* per frame; the server sends at most 2 */
#define MAX_REGIONS 64           /* cached at once */
#define KEEP_UNUSED 8 /* unreferenced mappings kept for later versions */
#define REGION_ID_MAX 32

typedef struct region {
  bool in_use;
  uint8_t id[REGION_ID_MAX];
  size_t idlen;
  bool device;
  int cuda_device;
  void *base;     /* host: the mapping; device: what ipc_open gave */
  uint64_t size;  /* the region's bytes */
  uint64_t start; /* device: the region's offset in the opened mapping */
  bool registered;
  size_t refs; /* versions that point into it */
  uint64_t last_used;
} region;

typedef struct version_priv {
  wt_consumer_version pub;      /* first: the caller's pointer is this */
  Wt__V1__ExportResponse *resp; /* owns the strings and shapes */
  wt_consumer_tensor *tensors;
  size_t *regions; /* indices into c->regions, one per manifest region */
  size_t nregions;
  struct version_priv *prev, *next;
} version_priv;

struct wt_consumer {
  int fd;
  char *path;
  wt_consumer_options o;
  uint64_t next_request;
  bool broken;
  region regions[MAX_REGIONS]; /* slots: a version keeps their indices */
  size_t nregions;             /* in use */
  uint64_t mapped, tick;
  version_priv *versions;
  const wt_cuda_api *cuda;
};

/* ---- the socket ------------------------------------------------------------
 */

typedef struct unpack_budget {
  size_t left;
  bool over;
} unpack_budget;

static void *budget_alloc(void *data, size_t size) {
  unpack_budget *b = data;
  if (size > b->left) {
    b->over = true;
    return NULL;
  }
  b->left -= size;
  return malloc(size);
}

static void budget_free(void *data, void *p) {
  (void)data;
  free(p);
}

static wt_status *broken(wt_consumer *c, wt_status *st) {
  c->broken = true;
  return st;
}

static wt_status *wait_fd(wt_consumer *c, short events, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - wt_mono_ms();
    if (left <= 0)
      return broken(c, wt_status_new(WT_DEADLINE_EXCEEDED,
                                     "export %s: no answer in time", c->path));
    struct pollfd p = {.fd = c->fd, .events = events};
    int n = poll(&p, 1, (int)(left > 1000 ? 1000 : left));
    if (n > 0) return NULL;
    if (n < 0 && errno != EINTR)
      return broken(c, wt_status_from_errno(errno, "export %s: poll", c->path));
  }
}

static wt_status *send_request(wt_consumer *c, Wt__V1__ExportRequest *req,
                               int64_t deadline) {
  size_t len = wt__v1__export_request__get_packed_size(req);
  uint8_t *buf = malloc(WT_FRAME_HEADER_BYTES + len);
  if (buf == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "export %s: out of memory",
                         c->path);
  wt_frame_header((uint32_t)len, buf);
  wt__v1__export_request__pack(req, buf + WT_FRAME_HEADER_BYTES);
  size_t off = 0, total = WT_FRAME_HEADER_BYTES + len;
  wt_status *st = NULL;
  while (off < total && st == NULL) {
    ssize_t n =
        send(c->fd, buf + off, total - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += (size_t)n;
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      st = wait_fd(c, POLLOUT, deadline);
    } else {
      st = broken(c, wt_status_new(WT_UNAVAILABLE,
                                   "export %s: the server closed the "
                                   "connection (%s)",
                                   c->path, strerror(errno)));
    }
  }
  free(buf);
  return st;
}

static void close_fds(int *fds, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (fds[i] >= 0) close(fds[i]);
}

/* Reads one answer frame; the descriptors that came with it in fds. */
static wt_status *recv_response(wt_consumer *c, int64_t deadline,
                                Wt__V1__ExportResponse **out, int *fds,
                                size_t *nfds) {
  *out = NULL;
  *nfds = 0;
  wt_frame_reader rd;
  wt_frame_reader_init(&rd, MAX_RESPONSE, c->path);
  wt_status *st = NULL;
  const uint8_t *body = NULL;
  size_t blen = 0;
  uint8_t chunk[65536];
  while (st == NULL && !wt_frame_reader_frame(&rd, &body, &blen)) {
    size_t want = wt_frame_reader_want(&rd);
    if (want > sizeof(chunk)) want = sizeof(chunk);
    union {
      struct cmsghdr h;
      char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
    } ctl;
    struct iovec iov = {.iov_base = chunk, .iov_len = want};
    struct msghdr m = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = ctl.buf,
                       .msg_controllen = sizeof(ctl.buf)};
    ssize_t n = recvmsg(c->fd, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      st = wait_fd(c, POLLIN, deadline);
      continue;
    }
    for (struct cmsghdr *h = n >= 0 ? CMSG_FIRSTHDR(&m) : NULL; h != NULL;
         h = CMSG_NXTHDR(&m, h)) {
      if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
      size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      int *got = (int *)(void *)CMSG_DATA(h);
      for (size_t i = 0; i < k; i++) {
        if (*nfds < MAX_FDS)
          fds[(*nfds)++] = got[i];
        else
          close(got[i]);
      }
    }
    if (n <= 0) {
      st = broken(
          c, n == 0
                 ? wt_status_new(WT_UNAVAILABLE,
                                 "export %s: the server closed the connection "
                                 "(a peer it does not let in is closed at "
                                 "once: see --export-allow-uid)",
                                 c->path)
                 : wt_status_from_errno(errno, "export %s: recvmsg", c->path));
    } else if ((m.msg_flags & MSG_CTRUNC) != 0) {
      st = broken(c, wt_status_new(WT_INTERNAL,
                                   "export %s: more descriptors than a frame "
                                   "carries",
                                   c->path));
    } else {
      st = wt_frame_reader_feed(&rd, chunk, (size_t)n);
      if (st != NULL) broken(c, st);
    }
  }
  if (st == NULL) {
    /* What unpacking may allocate: a bounded multiple of the frame (a
     * manifest of many empty tensors would otherwise cost 40 times its
     * bytes); frees go to malloc's free, as protobuf-c's default. */
    unpack_budget b = {.left = UNPACK_FACTOR * (size_t)blen + (1u << 20)};
    ProtobufCAllocator a = {budget_alloc, budget_free, &b};
    *out = wt__v1__export_response__unpack(&a, blen, body);
    if (*out == NULL && b.over)
      st = broken(c, wt_status_new(WT_RESOURCE_EXHAUSTED,
                                   "export %s: a %zu-byte answer would take "
                                   "more than %d times its size to unpack",
                                   c->path, blen, UNPACK_FACTOR));
    else if (*out == NULL)
      st = broken(c, wt_status_new(WT_INTERNAL,
                                   "export %s: a frame that is not an "
                                   "ExportResponse",
                                   c->path));
  }
  wt_frame_reader_free(&rd);
  if (st != NULL) {
    close_fds(fds, *nfds);
    *nfds = 0;
  }
  return st;
}

/* One request and its answer (an error answer becomes a status). */
static wt_status *call(wt_consumer *c, Wt__V1__ExportRequest *req,
                       uint32_t wait_ms, Wt__V1__ExportResponse **out, int *fds,
                       size_t *nfds) {
  *out = NULL;
  *nfds = 0;
  if (c->broken)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "export %s: the connection failed earlier; close "
                         "the consumer and connect again",
                         c->path);
  req->request_id = ++c->next_request;
  int64_t deadline = wt_mono_ms() + (int64_t)wait_ms + c->o.reply_timeout_ms;
  wt_status *st = send_request(c, req, deadline);
  if (st == NULL) st = recv_response(c, deadline, out, fds, nfds);
  if (st != NULL) return st;
  Wt__V1__ExportResponse *r = *out;
  if (r->request_id != req->request_id)
    st = broken(c, wt_status_new(WT_INTERNAL,
                                 "export %s: an answer to request %" PRIu64
                                 " while request %" PRIu64 " waits",
                                 c->path, r->request_id, req->request_id));
  else if (r->result_case == WT__V1__EXPORT_RESPONSE__RESULT_ERROR)
    st = wt_status_new(
        r->error->code > 0 && r->error->code <= 16 ? (wt_code)r->error->code
                                                   : WT_UNKNOWN,
        "export %s: %s", c->path, r->error->message ? r->error->message : "");
  if (st != NULL) {
    wt__v1__export_response__free_unpacked(r, NULL);
    *out = NULL;
    close_fds(fds, *nfds);
    *nfds = 0;
  }
  return st;
}

/* ---- connect and close
 * --------------------------------------------------------- */

wt_status *wt_consumer_connect(const char *path,
                               const wt_consumer_options *opts,
                               wt_consumer **out) {
  if (out == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "consumer: 'out' is NULL");
  *out = NULL;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (path == NULL || *path == '\0' || strlen(path) >= sizeof(sa.sun_path))
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "consumer: the export path is empty or longer than "
                         "%zu bytes",
                         sizeof(sa.sun_path) - 1);
  memcpy(sa.sun_path, path, strlen(path));
  wt_consumer *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "consumer: out of memory");
  if (opts != NULL) c->o = *opts;
  if (c->o.reply_timeout_ms == 0) c->o.reply_timeout_ms = 10000;
  c->path = strdup(path);
  c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  wt_status *st = NULL;
  if (c->path == NULL) {
    st = wt_status_new(WT_RESOURCE_EXHAUSTED, "consumer: out of memory");
  } else if (c->fd < 0) {
    st = wt_status_from_errno(errno, "export %s: socket", path);
  } else if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    st = wt_status_new(WT_UNAVAILABLE,
                       "export %s: nothing answers there (%s); is wt-server "
                       "running with --export %s?",
                       path, strerror(errno), path);
  } else {
    struct ucred cr;
    socklen_t cl = sizeof(cr);
    uid_t me = getuid();
    int64_t want = c->o.server_uid == 0 ? (int64_t)me : c->o.server_uid;
    if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0)
      st = wt_status_from_errno(errno, "export %s: SO_PEERCRED", path);
    else if (want >= 0 && cr.uid != 0 && (int64_t)cr.uid != want &&
             cr.uid != me)
      st = wt_status_new(WT_PERMISSION_DENIED,
                         "export %s: served by uid %u (pid %d), not by uid "
                         "%" PRId64
                         " or root: not a wt-server this consumer "
                         "trusts (see wt_consumer_options.server_uid)",
                         path, (unsigned)cr.uid, (int)cr.pid, want);
  }
  if (st == NULL && c->o.register_host) {
    st = wt_cuda_api_get(&c->cuda);
    if (st == NULL && c->cuda->version < 3)
      st = wt_status_new(WT_FAILED_PRECONDITION,
                         "the CUDA module's table is version %u, registering "
                         "host memory needs 3",
                         c->cuda->version);
    if (st != NULL) st = wt_status_prefix(st, "consumer: register_host");
  }
  if (st != NULL) {
    wt_consumer_close(c);
    return st;
  }
  *out = c;
  return NULL;
}

static void region_drop(wt_consumer *c, region *r) {
  if (r->device) {
    if (c->cuda != NULL && wt_cuda_bind(r->cuda_device) == NULL)
      c->cuda->ipc_close(r->cuda_device, r->base);
  } else {
    if (r->registered && c->cuda != NULL) c->cuda->host_unregister(r->base);
    if (r->size > 0) munmap(r->base, (size_t)r->size);
  }
  memset(r, 0, sizeof(*r));
  c->nregions--;
}

static void version_free(wt_consumer *c, version_priv *v) {
  for (size_t i = 0; i < v->nregions; i++) c->regions[v->regions[i]].refs--;
  if (v->prev)
    v->prev->next = v->next;
  else
    c->versions = v->next;
  if (v->next) v->next->prev = v->prev;
  wt__v1__export_response__free_unpacked(v->resp, NULL);
  free(v->tensors);
  free(v->regions);
  free(v);
}

void wt_consumer_close(wt_consumer *c) {
  if (c == NULL) return;
  if (c->fd >= 0) close(c->fd); /* the server ends every lease */
  while (c->versions != NULL) version_free(c, c->versions);
  for (size_t i = 0; i < MAX_REGIONS; i++)
    if (c->regions[i].in_use) region_drop(c, &c->regions[i]);
  free(c->path);
  free(c);
}

void wt_consumer_region_counts(const wt_consumer *c, uint64_t *mapped,
                               size_t *held) {
  if (mapped) *mapped = c ? c->mapped : 0;
  if (held) *held = c ? c->nregions : 0;
}

/* ---- regions
 * ------------------------------------------------------------------- */

/* Unmaps regions no version points into, oldest first, beyond KEEP_UNUSED
 * (a server that restarted has new ones; the old ones would pile up). */
static void trim(wt_consumer *c) {
  if (c->o.keep_mappings) return;
  for (;;) {
    size_t unused = 0, oldest = SIZE_MAX;
    for (size_t i = 0; i < MAX_REGIONS; i++) {
      if (!c->regions[i].in_use || c->regions[i].refs != 0) continue;
      unused++;
      if (oldest == SIZE_MAX ||
          c->regions[i].last_used < c->regions[oldest].last_used)
        oldest = i;
    }
    if (unused <= KEEP_UNUSED) return;
    region_drop(c, &c->regions[oldest]);
  }
}

/* The local index of the GPU called `uuid`. */
static wt_status *find_gpu(wt_consumer *c, const char *uuid, int *out) {
  int n = 0;
  wt_status *st = c->cuda->device_count(&n);
  if (st != NULL) return st;
  for (int d = 0; d < n; d++) {
    char u[WT_CUDA_UUID_MAX];
    if ((st = c->cuda->device_uuid(d, u)) != NULL) return st;
    if (strcmp(u, uuid) == 0) {
      *out = d;
      return NULL;
    }
  }
  return wt_status_new(WT_FAILED_PRECONDITION,
                       "GPU %s is not one of this process's %d (check "
                       "CUDA_VISIBLE_DEVICES)",
                       uuid, n);
}

static wt_status *region_open(wt_consumer *c, const Wt__V1__ExportRegion *m,
                              const int *fds, size_t nfds, size_t *out) {
  if (m->region_id.len == 0 || m->region_id.len > REGION_ID_MAX)
    return wt_status_new(WT_INTERNAL,
                         "region %" PRIu32 ": region_id of %zu bytes", m->index,
                         m->region_id.len);
  bool device = m->kind == WT__V1__EXPORT_REGION__KIND__DEVICE_CUDA_IPC;
  size_t slot = SIZE_MAX;
  for (size_t i = 0; i < MAX_REGIONS; i++) {
    region *r = &c->regions[i];
    if (!r->in_use) {
      if (slot == SIZE_MAX) slot = i;
      continue;
    }
    if (r->idlen == m->region_id.len && r->device == device &&
        memcmp(r->id, m->region_id.data, r->idlen) == 0 && r->size == m->size) {
      r->last_used = ++c->tick;
      *out = i;
      return NULL;
    }
  }
  if (slot == SIZE_MAX)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "region %" PRIu32
                         ": %d regions are mapped already "
                         "(release versions)",
                         m->index, MAX_REGIONS);
  region r;
  memset(&r, 0, sizeof(r));
  memcpy(r.id, m->region_id.data, m->region_id.len);
  r.idlen = m->region_id.len;
  r.device = device;
  r.size = m->size;
  r.cuda_device = -1;
  wt_status *st = NULL;
  if (m->kind == WT__V1__EXPORT_REGION__KIND__HOST_MEMFD) {
    struct stat sb;
    if (m->fd_index < 0 || (size_t)m->fd_index >= nfds)
      return wt_status_new(WT_INTERNAL,
                           "region %" PRIu32 ": descriptor %" PRId32
                           " of the %zu that came",
                           m->index, m->fd_index, nfds);
    int fd = fds[m->fd_index];
    /* Only memory the server can no longer shrink, grow or write but
     * through its own mapping: one it could shrink would kill this
     * process with SIGBUS at the next read (trust row 7). */
    int seals = fcntl(fd, F_GET_SEALS);
    const int need = F_SEAL_SHRINK | F_SEAL_GROW;
    if (seals < 0 || (seals & need) != need ||
        (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) == 0)
      return wt_status_new(WT_PERMISSION_DENIED,
                           "region %" PRIu32
                           ": its memfd is not sealed "
                           "against shrinking, growing and writing (seals "
                           "0x%x); a server that shrank it would kill this "
                           "process: refused",
                           m->index, seals < 0 ? 0 : (unsigned)seals);
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < m->size ||
        m->size > SIZE_MAX)
      return wt_status_new(WT_INTERNAL,
                           "region %" PRIu32
                           ": its descriptor holds fewer "
                           "than its %" PRIu64 " bytes",
                           m->index, m->size);
    if (m->size > 0) {
      r.base = mmap(NULL, (size_t)m->size, PROT_READ, MAP_SHARED, fd, 0);
      if (r.base == MAP_FAILED)
        return wt_status_from_errno(
            errno, "region %" PRIu32 ": mmap of %" PRIu64 " bytes", m->index,
            m->size);
      if (c->o.register_host) {
        st = c->cuda->host_register(r.base, (size_t)m->size, 1);
        if (st != NULL) {
          munmap(r.base, (size_t)m->size);
          return wt_status_prefix(st, "region %" PRIu32, m->index);
        }
        r.registered = true;
      }
    }
  } else if (device) {
    if (m->ipc_handle.len != WT_CUDA_IPC_HANDLE_BYTES || m->gpu_uuid == NULL)
      return wt_status_new(WT_INTERNAL,
                           "region %" PRIu32 ": a CUDA IPC handle of %zu bytes",
                           m->index, m->ipc_handle.len);
    if (c->cuda == NULL && (st = wt_cuda_api_get(&c->cuda)) != NULL)
      return wt_status_prefix(st, "region %" PRIu32 " is device memory on %s",
                              m->index, m->gpu_uuid);
    if ((st = find_gpu(c, m->gpu_uuid, &r.cuda_device)) == NULL &&
        (st = wt_cuda_bind(r.cuda_device)) == NULL)
      st = c->cuda->ipc_open(r.cuda_device, m->ipc_handle.data, &r.base);
    if (st != NULL)
      return wt_status_prefix(st, "region %" PRIu32 " (device memory on %s)",
                              m->index, m->gpu_uuid);
    r.start = m->handle_offset;
  } else {
    return wt_status_new(WT_UNIMPLEMENTED,
                         "region %" PRIu32
                         ": kind %d is not one this library "
                         "knows (a newer server?)",
                         m->index, (int)m->kind);
  }
  r.in_use = true;
  r.last_used = ++c->tick;
  c->mapped++;
  c->regions[slot] = r;
  c->nregions++;
  *out = slot;
  return NULL;
}

/* ---- acquire and release
 * ---------------------------------------------------------- */

static wt_status *build(wt_consumer *c, version_priv *v, const int *fds,
                        size_t nfds) {
  const Wt__V1__Manifest *m = v->resp->manifest;
  v->regions = calloc(m->n_regions ? m->n_regions : 1, sizeof(*v->regions));
  v->tensors = calloc(m->n_tensors ? m->n_tensors : 1, sizeof(*v->tensors));
  if (v->regions == NULL || v->tensors == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory for %zu tensors",
                         m->n_tensors);
  for (size_t i = 0; i < m->n_regions; i++) {
    if (m->regions[i]->index != i)
      return wt_status_new(WT_INTERNAL, "region %zu says it is region %" PRIu32,
                           i, m->regions[i]->index);
    wt_status *st = region_open(c, m->regions[i], fds, nfds, &v->regions[i]);
    if (st != NULL) return st;
    c->regions[v->regions[i]].refs++;
    v->nregions++;
  }
  for (size_t i = 0; i < m->n_tensors; i++) {
    const Wt__V1__ExportTensor *t = m->tensors[i];
    if (t->region >= m->n_regions)
      return wt_status_new(WT_INTERNAL,
                           "tensor '%s': region %" PRIu32 " of %zu", t->name,
                           t->region, m->n_regions);
    const region *r = &c->regions[v->regions[t->region]];
    uint64_t end = 0;
    if (__builtin_add_overflow(t->offset, t->nbytes, &end) || end > r->size)
      return wt_status_new(WT_INTERNAL,
                           "tensor '%s': bytes [%" PRIu64 ", +%" PRIu64
                           ") lie outside its region of %" PRIu64,
                           t->name, t->offset, t->nbytes, r->size);
    wt_consumer_tensor *o = &v->tensors[i];
    o->name = t->name;
    o->dtype = t->dtype;
    o->shape = t->shape;
    o->ndim = t->n_shape;
    o->nbytes = t->nbytes;
    o->data = (const uint8_t *)r->base + r->start + t->offset;
    o->on_device = r->device;
    o->cuda_device = r->cuda_device;
  }
  v->pub.lease_id = m->lease_id;
  v->pub.version = m->version;
  v->pub.sequence = m->sequence;
  v->pub.committed_unix_ms = m->committed_unix_ms;
  v->pub.worker = m->worker;
  v->pub.device = m->device;
  v->pub.n_tensors = m->n_tensors;
  v->pub.tensors = v->tensors;
  return NULL;
}

wt_status *wt_consumer_acquire(wt_consumer *c, const wt_acquire_options *opts,
                               wt_consumer_version **out) {
  if (c == NULL || out == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "consumer: 'c' or 'out' is NULL");
  *out = NULL;
  wt_acquire_options o = {0};
  if (opts != NULL) o = *opts;
  Wt__V1__AcquireRequest a = WT__V1__ACQUIRE_REQUEST__INIT;
  a.version = (char *)(o.version ? o.version : "");
  a.after_sequence = o.after_sequence;
  a.timeout_ms = o.timeout_ms;
  a.worker = o.worker;
  Wt__V1__ExportRequest req = WT__V1__EXPORT_REQUEST__INIT;
  req.op_case = WT__V1__EXPORT_REQUEST__OP_ACQUIRE;
  req.acquire = &a;
  Wt__V1__ExportResponse *resp = NULL;
  int fds[MAX_FDS];
  size_t nfds = 0;
  wt_status *st = call(c, &req, o.timeout_ms, &resp, fds, &nfds);
  if (st != NULL) return st;
  if (resp->result_case != WT__V1__EXPORT_RESPONSE__RESULT_MANIFEST ||
      resp->manifest == NULL) {
    wt__v1__export_response__free_unpacked(resp, NULL);
    close_fds(fds, nfds);
    return broken(c, wt_status_new(WT_INTERNAL,
                                   "export %s: an acquire answered without a "
                                   "manifest",
                                   c->path));
  }
  version_priv *v = calloc(1, sizeof(*v));
  if (v == NULL) {
    wt__v1__export_response__free_unpacked(resp, NULL);
    close_fds(fds, nfds);
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "consumer: out of memory");
  }
  v->resp = resp;
  v->next = c->versions;
  if (c->versions) c->versions->prev = v;
  c->versions = v;
  st = build(c, v, fds, nfds);
  close_fds(fds, nfds); /* the mappings hold the memory */
  if (st != NULL) {
    /* The lease is the server's to end: the connection is unusable now. */
    version_free(c, v);
    trim(c);
    return broken(c,
                  wt_status_prefix(st, "export %s: a bad manifest", c->path));
  }
  trim(c);
  *out = &v->pub;
  return NULL;
}

const wt_consumer_tensor *wt_consumer_find(const wt_consumer_version *v,
                                           const char *name) {
  if (v == NULL || name == NULL) return NULL;
  for (size_t i = 0; i < v->n_tensors; i++)
    if (strcmp(v->tensors[i].name, name) == 0) return &v->tensors[i];
  return NULL;
}

wt_status *wt_consumer_release(wt_consumer *c, wt_consumer_version *pub) {
  if (c == NULL || pub == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "consumer: 'c' or 'v' is NULL");
  version_priv *v = (version_priv *)pub;
  uint64_t lease = v->pub.lease_id;
  version_free(c, v);
  trim(c);
  Wt__V1__ReleaseRequest r = WT__V1__RELEASE_REQUEST__INIT;
  r.lease_id = lease;
  Wt__V1__ExportRequest req = WT__V1__EXPORT_REQUEST__INIT;
  req.op_case = WT__V1__EXPORT_REQUEST__OP_RELEASE;
  req.release = &r;
  Wt__V1__ExportResponse *resp = NULL;
  int fds[MAX_FDS];
  size_t nfds = 0;
  wt_status *st = call(c, &req, 0, &resp, fds, &nfds);
  if (st != NULL) return st;
  close_fds(fds, nfds);
  bool ok = resp->result_case == WT__V1__EXPORT_RESPONSE__RESULT_RELEASED &&
            resp->released == lease;
  wt__v1__export_response__free_unpacked(resp, NULL);
  if (!ok)
    return broken(c, wt_status_new(WT_INTERNAL,
                                   "export %s: a release of lease %" PRIu64
                                   " answered with something else",
                                   c->path, lease));
  return NULL;
}
