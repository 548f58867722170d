/* export_info.c: wt-ctl export-info PATH, what a consumer of wt-server's
 * export (docs/export.md) would see: it acquires the newest version over
 * the socket, prints the manifest, maps nothing, and releases the lease.
 * Written, as any consumer may be, from proto/wt/v1/export.proto and the
 * framing (wt/frame.h). */

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tool_format.h"
#include "wt/frame.h"
#include "wt/v1/export.pb-c.h"

#define ANSWER_MS 10000
#define MAX_ANSWER (256u << 20)

/* n bytes, the descriptors that came with them into fds (closed by the
 * caller); false on EOF, error or silence. */
static bool read_full(int fd, uint8_t *buf, size_t n, int *fds, size_t *nfd) {
  size_t got = 0;
  while (got < n) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ANSWER_MS) != 1) return false;
    struct iovec iov = {buf + got, n - got};
    union {
      struct cmsghdr h;
      char space[CMSG_SPACE(sizeof(int) * 4)];
    } ctl;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
                        .msg_control = ctl.space,
                        .msg_controllen = sizeof(ctl.space)};
    ssize_t r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    if (r <= 0) return false;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h))
      if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS)
        for (size_t k = 0; k < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
             k++) {
          int d;
          memcpy(&d, CMSG_DATA(h) + k * sizeof(int), sizeof(int));
          if (*nfd < 4) fds[(*nfd)++] = d;
          else close(d);
        }
    got += (size_t)r;
  }
  return true;
}

static Wt__V1__ExportResponse *exchange(int fd, Wt__V1__ExportRequest *req,
                                        int *fds, size_t *nfd) {
  size_t n = wt__v1__export_request__get_packed_size(req);
  uint8_t buf[WT_FRAME_HEADER_BYTES + 512];
  if (n > 512) return NULL;
  wt_frame_header((uint32_t)n, buf);
  wt__v1__export_request__pack(req, buf + WT_FRAME_HEADER_BYTES);
  if (send(fd, buf, WT_FRAME_HEADER_BYTES + n, MSG_NOSIGNAL) !=
      (ssize_t)(WT_FRAME_HEADER_BYTES + n))
    return NULL;
  uint8_t h[WT_FRAME_HEADER_BYTES];
  if (!read_full(fd, h, sizeof(h), fds, nfd)) return NULL;
  uint32_t len = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 |
                 (uint32_t)h[3] << 24;
  if (len == 0 || len > MAX_ANSWER) return NULL;
  uint8_t *body = malloc(len);
  Wt__V1__ExportResponse *r = NULL;
  if (body && read_full(fd, body, len, fds, nfd))
    r = wt__v1__export_response__unpack(NULL, len, body);
  free(body);
  return r;
}

int wt_ctl_export_info(const char *path) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof(a.sun_path)) {
    fprintf(stderr, "wt-ctl: export-info: '%s' is too long a socket path\n",
            path);
    return 2;
  }
  memcpy(a.sun_path, path, strlen(path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
    fprintf(stderr, "wt-ctl: export-info: cannot connect to %s: %s\n", path,
            strerror(errno));
    if (fd >= 0) close(fd);
    return 1;
  }
  Wt__V1__AcquireRequest acq = WT__V1__ACQUIRE_REQUEST__INIT;
  Wt__V1__ExportRequest req = WT__V1__EXPORT_REQUEST__INIT;
  req.request_id = 1;
  req.op_case = WT__V1__EXPORT_REQUEST__OP_ACQUIRE;
  req.acquire = &acq;
  int fds[4];
  size_t nfd = 0;
  Wt__V1__ExportResponse *r = exchange(fd, &req, fds, &nfd);
  int rc = 0;
  if (r == NULL) {
    fprintf(stderr, "wt-ctl: export-info: %s: no answer (closed, or not an "
                    "export socket)\n", path);
    rc = 1;
  } else if (r->result_case == WT__V1__EXPORT_RESPONSE__RESULT_ERROR) {
    fprintf(stderr, "wt-ctl: export-info: %s: %s\n", path, r->error->message);
    rc = 1;
  } else if (r->result_case == WT__V1__EXPORT_RESPONSE__RESULT_MANIFEST) {
    const Wt__V1__Manifest *m = r->manifest;
    char b[32];
    uint64_t total = 0;
    for (size_t i = 0; i < m->n_tensors; i++) total += m->tensors[i]->nbytes;
    printf("export:       %s\n", path);
    printf("version:      %s (sequence %" PRIu64 ")\n", m->version,
           m->sequence);
    printf("tensors:      %zu, %s\n", m->n_tensors,
           wt_tool_human_bytes(total, b, sizeof(b)));
    for (size_t i = 0; i < m->n_regions; i++)
      printf("region %u:     host memfd, %s (descriptor %s)\n",
             m->regions[i]->index,
             wt_tool_human_bytes(m->regions[i]->size, b, sizeof(b)),
             (size_t)m->regions[i]->fd_index < nfd ? "received" : "MISSING");
    for (size_t i = 0; i < m->n_tensors && i < 3; i++)
      printf("  %s %s in region %u at %" PRIu64 "\n", m->tensors[i]->name,
             m->tensors[i]->dtype, m->tensors[i]->region,
             m->tensors[i]->offset);
    if (m->n_tensors > 3) printf("  ... %zu more\n", m->n_tensors - 3);
    Wt__V1__ReleaseRequest rel = WT__V1__RELEASE_REQUEST__INIT;
    rel.lease_id = m->lease_id;
    Wt__V1__ExportRequest rreq = WT__V1__EXPORT_REQUEST__INIT;
    rreq.request_id = 2;
    rreq.op_case = WT__V1__EXPORT_REQUEST__OP_RELEASE;
    rreq.release = &rel;
    size_t none = 0;
    Wt__V1__ExportResponse *rr = exchange(fd, &rreq, fds + nfd, &none);
    printf("lease:        %s\n",
           rr && rr->result_case == WT__V1__EXPORT_RESPONSE__RESULT_RELEASED
               ? "released"
               : "NOT released (closing the socket ends it)");
    if (rr) wt__v1__export_response__free_unpacked(rr, NULL);
  }
  for (size_t i = 0; i < nfd; i++) close(fds[i]);
  if (r) wt__v1__export_response__free_unpacked(r, NULL);
  close(fd);
  return rc;
}
