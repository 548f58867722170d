/* ucx_common.c: context/worker setup, deadline-bounded progress and request
 * helpers shared by the `ucx` engines (see wt/ucx_common.h). */

#include "wt/ucx_common.h"

#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wt/log.h"

/* The TCP send segment wt asks for unless UCX_TCP_TX_SEG_SIZE is set. */
#define WT_UCX_TCP_TX_SEG "64k"

int64_t wt_ucx_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t wt_ucx_connect_timeout_ms(int64_t configured, int64_t timeout_ms) {
  if (configured > 0) return configured;
  return timeout_ms > WT_UCX_CONNECT_TIMEOUT_MS ? timeout_ms
                                                : WT_UCX_CONNECT_TIMEOUT_MS;
}

wt_status *wt_ucx_new(const char *transports, const char *who, wt_ucx **out) {
  wt_status *st = NULL;
  ucp_config_t *config = NULL;
  ucs_status_t us;
  wt_ucx *u = calloc(1, sizeof(*u));
  *out = NULL;
  if (u == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", who);
  u->efd = -1;
  us = ucp_config_read(NULL, NULL, &config);
  if (us != UCS_OK)
    WT_FAIL(WT_INTERNAL, "%s: ucp_config_read: %s", who, ucs_status_string(us));
  if (transports != NULL && *transports != '\0') {
    us = ucp_config_modify(config, "TLS", transports);
    if (us != UCS_OK)
      WT_FAIL(WT_INVALID_ARGUMENT, "%s: transports '%s': %s", who, transports,
              ucs_status_string(us));
  }
  /* UCX TCP's 8 KiB default send segment halves large sends when
   * peer-failure handling is on (profile: a user-space memmove per
   * segment; loopback 2.2 GB/s, 3 GB/s with 64 KiB). UCX_TCP_TX_SEG_SIZE
   * still wins. The key is the transport's own ("TX_SEG_SIZE" of the "TCP_"
   * table): ucp hands keys it does not know to every transport that has
   * them, and only tcp has this one. */
  /* Only where tcp may be selected: UCX warns about a key no transport
   * takes. */
  const char *tls = transports && *transports ? transports : getenv("UCX_TLS");
  bool tcp = tls == NULL || *tls == '\0' || strstr(tls, "all") != NULL ||
             (tls[0] == '^') != (strstr(tls, "tcp") != NULL);
  if (tcp && getenv("UCX_TCP_TX_SEG_SIZE") == NULL) {
    us = ucp_config_modify(config, "TX_SEG_SIZE", WT_UCX_TCP_TX_SEG);
    if (us != UCS_OK)
      WT_LOGD("ucx", "%s: TCP_TX_SEG_SIZE=%s not applied: %s", who,
              WT_UCX_TCP_TX_SEG, ucs_status_string(us));
  }
  ucp_params_t params = {
      .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
      .features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP,
      .name = "wt"};
  us = ucp_init(&params, config, &u->context);
  if (us != UCS_OK)
    WT_FAIL(WT_UNAVAILABLE, "%s: ucp_init (transports '%s'): %s", who,
            transports && *transports ? transports : "default",
            ucs_status_string(us));
  ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                            .thread_mode = UCS_THREAD_MODE_SINGLE};
  us = ucp_worker_create(u->context, &wp, &u->worker);
  if (us != UCS_OK)
    WT_FAIL(WT_UNAVAILABLE, "%s: ucp_worker_create: %s", who,
            ucs_status_string(us));
  us = ucp_worker_get_efd(u->worker, &u->efd);
  if (us != UCS_OK)
    WT_FAIL(WT_UNAVAILABLE, "%s: ucp_worker_get_efd: %s", who,
            ucs_status_string(us));
  *out = u;
  u = NULL;
out:
  if (config) ucp_config_release(config);
  wt_ucx_destroy(u);
  return st;
}

void wt_ucx_destroy(wt_ucx *u) {
  if (u == NULL) return;
  if (u->worker) ucp_worker_destroy(u->worker);
  if (u->context) ucp_cleanup(u->context);
  free(u);
}

void wt_ucx_cancel(wt_ucx *u) {
  atomic_store(&u->cancelled, true);
  /* Documented as callable from any thread: wakes a wait blocked in poll. */
  if (u->worker) ucp_worker_signal(u->worker);
}

void wt_ucx_reset_cancel(wt_ucx *u) {
  atomic_store(&u->cancelled, false);
}

wt_status *wt_ucx_wait(wt_ucx *u, bool (*cond)(void *), void *arg,
                       int64_t deadline_ms, int64_t timeout_ms,
                       const char *what) {
  for (;;) {
    while (ucp_worker_progress(u->worker) != 0) {
    }
    if (cond != NULL && cond(arg)) return NULL;
    if (atomic_load(&u->cancelled))
      return wt_status_new(WT_CANCELLED, "cancelled while waiting for %s",
                           what);
    int64_t left = deadline_ms - wt_ucx_now_ms();
    if (left <= 0)
      return wt_status_new(WT_DEADLINE_EXCEEDED,
                           "timed out after %lld ms waiting for %s",
                           (long long)timeout_ms, what);
    ucs_status_t us = ucp_worker_arm(u->worker);
    if (us == UCS_ERR_BUSY) continue; /* events arrived meanwhile */
    if (us != UCS_OK)
      return wt_status_new(WT_INTERNAL,
                           "ucp_worker_arm while waiting for %s: %s", what,
                           ucs_status_string(us));
    /* Bounded sleep: some transports (shared memory) do not wake the fd, so
     * a short slice keeps them moving without burning a core. */
    struct pollfd pfd = {.fd = u->efd, .events = POLLIN};
    (void)poll(&pfd, 1, 1);
  }
}

static atomic_uint_fast64_t mem_maps;

wt_status *wt_ucx_mem_map(wt_ucx *u, void *base, size_t len, const char *what,
                          ucp_mem_h *memh) {
  ucp_mem_map_params_t p = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                          UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                            .address = base,
                            .length = len};
  *memh = NULL;
  ucs_status_t us = ucp_mem_map(u->context, &p, memh);
  if (us != UCS_OK) {
    *memh = NULL;
    return wt_status_new(WT_UNAVAILABLE, "%s: ucp_mem_map of %zu bytes: %s",
                         what, len, ucs_status_string(us));
  }
  atomic_fetch_add(&mem_maps, 1);
  return NULL;
}

void wt_ucx_mem_unmap(wt_ucx *u, ucp_mem_h memh) {
  if (u == NULL || memh == NULL) return;
  ucs_status_t us = ucp_mem_unmap(u->context, memh);
  if (us != UCS_OK) WT_LOGW("ucx", "ucp_mem_unmap: %s", ucs_status_string(us));
}

uint64_t wt_ucx_mem_map_count(void) {
  return atomic_load(&mem_maps);
}

static void on_recv(void *req, ucs_status_t status,
                    const ucp_tag_recv_info_t *info, void *user) {
  wt_ucx_recv_note *n = user;
  (void)req;
  n->status = status;
  n->length = status == UCS_OK && info != NULL ? info->length : 0;
  n->done = true;
}

void *wt_ucx_tag_recv(wt_ucx *u, void *buf, size_t count, ucp_datatype_t dt,
                      ucp_mem_h memh, ucp_tag_t tag, wt_ucx_recv_note *note) {
  *note = (wt_ucx_recv_note){0};
  ucp_request_param_t p = {
      .op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_CALLBACK |
                      UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
      .datatype = dt,
      .cb.recv = on_recv,
      .user_data = note};
  if (memh != NULL) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    p.memh = memh;
  }
  return ucp_tag_recv_nbx(u->worker, buf, count, tag, UINT64_MAX, &p);
}

ucs_status_t wt_ucx_request_status(void *req) {
  if (req == NULL) return UCS_OK;
  if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
  return ucp_request_check_status(req);
}

void wt_ucx_request_drop(wt_ucx *u, void *req, int64_t grace_ms) {
  if (req == NULL || UCS_PTR_IS_ERR(req)) return;
  if (ucp_request_check_status(req) == UCS_INPROGRESS) {
    ucp_request_cancel(u->worker, req);
    int64_t deadline = wt_ucx_now_ms() + grace_ms;
    while (ucp_request_check_status(req) == UCS_INPROGRESS &&
           wt_ucx_now_ms() < deadline)
      ucp_worker_progress(u->worker);
  }
  ucp_request_free(req);
}

void wt_ucx_ep_close(wt_ucx *u, ucp_ep_h ep, bool flush, int64_t grace_ms) {
  if (ep == NULL) return;
  ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                           .flags = flush ? 0 : UCP_EP_CLOSE_FLAG_FORCE};
  void *req = ucp_ep_close_nbx(ep, &p);
  if (req == NULL || UCS_PTR_IS_ERR(req)) return;
  int64_t deadline = wt_ucx_now_ms() + grace_ms;
  while (ucp_request_check_status(req) == UCS_INPROGRESS &&
         wt_ucx_now_ms() < deadline)
    ucp_worker_progress(u->worker);
  if (ucp_request_check_status(req) == UCS_INPROGRESS && flush) {
    /* The peer does not answer: force it. */
    ucp_request_free(req);
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    req = ucp_ep_close_nbx(ep, &p);
    if (req == NULL || UCS_PTR_IS_ERR(req)) return;
    deadline = wt_ucx_now_ms() + grace_ms;
    while (ucp_request_check_status(req) == UCS_INPROGRESS &&
           wt_ucx_now_ms() < deadline)
      ucp_worker_progress(u->worker);
  }
  ucp_request_free(req);
}

wt_status *wt_ucx_sockaddr(const char *host, uint32_t port,
                           struct sockaddr_storage *ss, socklen_t *len) {
  wt_status *st = NULL;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  struct addrinfo *res = NULL;
  char portstr[16];
  snprintf(portstr, sizeof(portstr), "%u", (unsigned)port);
  int rc = getaddrinfo(host, portstr, &hints, &res);
  if (rc != 0 || res == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT, "address '%s:%u' does not resolve: %s", host,
            (unsigned)port, gai_strerror(rc));
  memset(ss, 0, sizeof(*ss));
  memcpy(ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
out:
  if (res) freeaddrinfo(res);
  return st;
}

/* Route layout, host byte order (both ends run wt on the same kind of
 * host): u32 magic, u32 flags, u32 n, u32 0; per hop: u64 round, u32 port,
 * u32 address length, char host[256], the address padded to 8 bytes. */
#define ROUTE_MAGIC 0x31525457u /* "WTR1" */

size_t wt_ucx_route_pack(unsigned char *buf, size_t cap, uint32_t flags,
                         const wt_ucx_hop *hops, size_t n) {
  if (n > WT_UCX_ROUTE_HOPS || cap < 16) return 0;
  uint32_t head[4] = {ROUTE_MAGIC, flags, (uint32_t)n, 0};
  memcpy(buf, head, sizeof(head));
  size_t off = sizeof(head);
  for (size_t i = 0; i < n; i++) {
    size_t alen = hops[i].worker_address ? hops[i].worker_address_len : 0;
    size_t need = 8 + 4 + 4 + 256 + (alen + 7) / 8 * 8;
    if (off + need > cap) return 0;
    uint32_t port = hops[i].port, len32 = (uint32_t)alen;
    memcpy(buf + off, &hops[i].round, 8);
    memcpy(buf + off + 8, &port, 4);
    memcpy(buf + off + 12, &len32, 4);
    memset(buf + off + 16, 0, 256);
    snprintf((char *)buf + off + 16, 256, "%s", hops[i].host);
    if (alen) memcpy(buf + off + 16 + 256, hops[i].worker_address, alen);
    off += need;
  }
  return off;
}

wt_status *wt_ucx_route_parse(const unsigned char *buf, size_t len,
                              const char *who, uint32_t *flags,
                              wt_ucx_hop *hops, size_t *n) {
  uint32_t head[4];
  if (len < sizeof(head))
    return wt_status_new(WT_DATA_LOSS, "%s: route message of %zu bytes", who,
                         len);
  memcpy(head, buf, sizeof(head));
  if (head[0] != ROUTE_MAGIC || head[2] > WT_UCX_ROUTE_HOPS)
    return wt_status_new(WT_DATA_LOSS,
                         "%s: malformed route message (magic %#x, %u hops)",
                         who, head[0], head[2]);
  *flags = head[1];
  *n = head[2];
  size_t off = sizeof(head);
  for (size_t i = 0; i < *n; i++) {
    uint32_t port, alen;
    if (off + 16 + 256 > len)
      return wt_status_new(WT_DATA_LOSS, "%s: route message cut at hop %zu",
                           who, i);
    memcpy(&hops[i].round, buf + off, 8);
    memcpy(&port, buf + off + 8, 4);
    memcpy(&alen, buf + off + 12, 4);
    hops[i].port = port;
    memcpy(hops[i].host, buf + off + 16, 256);
    hops[i].host[255] = '\0';
    off += 16 + 256;
    size_t padded = ((size_t)alen + 7) / 8 * 8;
    if (off + padded > len)
      return wt_status_new(WT_DATA_LOSS, "%s: route message cut at hop %zu",
                           who, i);
    hops[i].worker_address = alen ? buf + off : NULL;
    hops[i].worker_address_len = alen;
    off += padded;
  }
  return NULL;
}
