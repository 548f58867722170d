/* ucx_shared.c: context/worker setup, deadline-bounded progress and request
 * helpers shared by the `ucx` engines (see ucx_shared.h). */

#include "backends/ucx/ucx_shared.h"

#include <errno.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wt/log.h"
#include "wt/secure.h"

/* The TCP send segment wt asks for unless UCX_TCP_TX_SEG_SIZE is set. */
#define WT_UCX_TCP_TX_SEG "64k"

uint64_t wt_ucx_rank_bucket(bool ranked, uint32_t rank, uint64_t bucket) {
  return ranked ? ((uint64_t)rank + 1) << 32 | (bucket & 0xffffffffu) : bucket;
}

ucp_tag_t wt_ucx_tag(const uint8_t secret[WT_UCX_SECRET_BYTES],
                     uint64_t round_id, uint64_t bucket) {
  uint8_t msg[16], mac[32];
  for (int i = 0; i < 8; i++) {
    msg[i] = (uint8_t)(round_id >> (8 * i));
    msg[8 + i] = (uint8_t)(bucket >> (8 * i));
  }
  wt_hmac_sha256(secret, WT_UCX_SECRET_BYTES, msg, sizeof(msg), mac);
  ucp_tag_t t = 0;
  memcpy(&t, mac, sizeof(t));
  return t;
}

/* A secret that is not random keys nothing: 32 random bytes show at least
 * 8 different values (the odds of fewer are below 2^-100), while all zeros,
 * a repeated byte or a short pattern do not. */
static wt_status *check_secret(const uint8_t s[WT_UCX_SECRET_BYTES]) {
  bool seen[256] = {false};
  unsigned distinct = 0;
  for (size_t i = 0; i < WT_UCX_SECRET_BYTES; i++)
    if (!seen[s[i]]) {
      seen[s[i]] = true;
      distinct++;
    }
  if (distinct < 8)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "init_info.ucx.auth_secret: %u distinct byte values "
                         "in %d bytes; it must be random (drawn for this init "
                         "by wt_trainer_init_info), not zeros or a pattern",
                         distinct, WT_UCX_SECRET_BYTES);
  return NULL;
}

wt_status *wt_ucx_init_secret(const Wt__V1__WeightTransferInitInfo *init,
                              uint8_t out[WT_UCX_SECRET_BYTES]) {
  const Wt__V1__UcxInitInfo *x =
      init->backend_init_case ==
              WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_UCX
          ? init->ucx
          : NULL;
  if (x != NULL && x->auth_secret.len == WT_UCX_SECRET_BYTES) {
    memcpy(out, x->auth_secret.data, WT_UCX_SECRET_BYTES);
    return check_secret(out);
  }
  for (size_t i = 0; x == NULL && i < init->n_options; i++) {
    const char *k = init->options[i]->key, *v = init->options[i]->value;
    if (k == NULL || strcmp(k, "ucx_auth_secret") != 0 || v == NULL) continue;
    bool ok = strlen(v) == 2 * WT_UCX_SECRET_BYTES;
    for (size_t j = 0; ok && j < WT_UCX_SECRET_BYTES; j++) {
      unsigned b = 0;
      ok = sscanf(v + 2 * j, "%2x", &b) == 1 && v[2 * j] != '+' &&
           v[2 * j] != '-' && v[2 * j] != ' ';
      out[j] = (uint8_t)b;
    }
    if (ok) return check_secret(out);
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "init_info.options[\"ucx_auth_secret\"]: not %d hex "
                         "digits",
                         2 * WT_UCX_SECRET_BYTES);
  }
  return wt_status_new(
      WT_INVALID_ARGUMENT,
      "init_info.ucx.auth_secret: %zu bytes; it must be %d random bytes "
      "drawn for this init (wt_trainer_init_info fills it)",
      x ? x->auth_secret.len : 0, WT_UCX_SECRET_BYTES);
}

void wt_ucx_hello(const uint8_t secret[WT_UCX_SECRET_BYTES],
                  uint8_t out[WT_UCX_HELLO_BYTES]) {
  static const char label[] = "wt-ucx-hello";
  memcpy(out, "WTUCXHI1", 8);
  wt_hmac_sha256(secret, WT_UCX_SECRET_BYTES, label, sizeof(label) - 1,
                 out + 8);
}

static void discard_done(void *req, ucs_status_t status,
                         const ucp_tag_recv_info_t *info, void *user) {
  (void)req;
  (void)status;
  (void)info;
  (void)user;
}

size_t wt_ucx_discard_unexpected(wt_ucx *u) {
  size_t n = 0;
  for (;;) {
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg = ucp_tag_probe_nb(u->worker, 0, 0, 1, &info);
    if (msg == NULL) break;
    static char none[1];
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_CALLBACK,
        .datatype = ucp_dt_make_contig(1),
        .cb = {.recv = discard_done}};
    void *req = ucp_tag_msg_recv_nbx(u->worker, none, 0, msg, &p);
    /* Truncated into nothing: UCX completes it at once for an eager message
     * and tells a rendezvous sender the receive is over. */
    if (req != NULL && !UCS_PTR_IS_ERR(req)) ucp_request_free(req);
    n++;
  }
  u->discarded += n;
  return n;
}

wt_status *wt_ucx_init_settings_read(const Wt__V1__WeightTransferInitInfo *init,
                                     wt_ucx_init_settings *out) {
  *out = (wt_ucx_init_settings){.buffer_bytes = WT_UCX_DEFAULT_BUFFER_BYTES,
                                .num_buffers = WT_UCX_DEFAULT_NUM_BUFFERS};
  const Wt__V1__UcxInitInfo *x =
      init->backend_init_case ==
              WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_UCX
          ? init->ucx
          : NULL;
  if (x != NULL && x->packed_buffer_size_bytes != NULL) {
    if (x->packed_buffer_size_bytes->value == 0)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "init_info.ucx.packed_buffer_size_bytes is 0; it "
                           "must be at least 1");
    out->buffer_bytes = x->packed_buffer_size_bytes->value;
  }
  if (x != NULL && x->packed_num_buffers != NULL) {
    uint32_t v = x->packed_num_buffers->value;
    if (v == 0 || v > WT_UCX_MAX_NUM_BUFFERS)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "init_info.ucx.packed_num_buffers is %u; it must "
                           "be 1..%u",
                           v, WT_UCX_MAX_NUM_BUFFERS);
    out->num_buffers = v;
  }
  if (x != NULL && x->connect_timeout_ms != NULL) {
    if (x->connect_timeout_ms->value == 0)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "init_info.ucx.connect_timeout_ms is 0; it must be "
                           "at least 1 (unset: %d ms, or timeout_ms if "
                           "larger)",
                           WT_UCX_CONNECT_TIMEOUT_MS);
    out->connect_timeout_ms = x->connect_timeout_ms->value;
  }
  for (size_t i = 0; i < init->n_options; i++) {
    const char *k = init->options[i]->key, *v = init->options[i]->value;
    if (k == NULL || strcmp(k, "ucx_connect") != 0) continue;
    if (v == NULL) v = "";
    if (strcmp(v, "address") != 0 && strcmp(v, "sockaddr") != 0)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "init_info.options[\"ucx_connect\"] is '%.64s'; "
                           "it must be 'address' (default) or 'sockaddr'",
                           v);
    out->by_sockaddr = strcmp(v, "sockaddr") == 0;
  }
  return NULL;
}

int64_t wt_ucx_connect_timeout_ms(int64_t configured, int64_t timeout_ms) {
  if (configured > 0) return configured;
  return timeout_ms > WT_UCX_CONNECT_TIMEOUT_MS ? timeout_ms
                                                : WT_UCX_CONNECT_TIMEOUT_MS;
}

/* Whether interface address `ia` is `a` (same family). */
static bool same_addr(const struct sockaddr *ia, const struct sockaddr *a) {
  if (ia == NULL || ia->sa_family != a->sa_family) return false;
  if (a->sa_family == AF_INET)
    return ((const struct sockaddr_in *)ia)->sin_addr.s_addr ==
           ((const struct sockaddr_in *)a)->sin_addr.s_addr;
  if (a->sa_family == AF_INET6)
    return memcmp(&((const struct sockaddr_in6 *)ia)->sin6_addr,
                  &((const struct sockaddr_in6 *)a)->sin6_addr, 16) == 0;
  return false;
}

/* A loopback interface answers for its whole subnet (lo's 127.0.0.1/8
 * takes 127.0.0.2), which getifaddrs lists as one address. */
static bool on_loopback(const struct ifaddrs *i, const struct sockaddr *a) {
  if (!(i->ifa_flags & IFF_LOOPBACK) || i->ifa_addr == NULL ||
      i->ifa_netmask == NULL || a->sa_family != AF_INET ||
      i->ifa_addr->sa_family != AF_INET)
    return false;
  uint32_t mask = ((const struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr;
  return (((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr & mask) ==
         (((const struct sockaddr_in *)a)->sin_addr.s_addr & mask);
}

static bool unspecified(const struct sockaddr *a) {
  if (a->sa_family == AF_INET)
    return ((const struct sockaddr_in *)a)->sin_addr.s_addr == 0;
  return a->sa_family == AF_INET6 &&
         IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

wt_status *wt_ucx_interface_of(const char *host, char *buf, size_t cap) {
  if (cap > 0) buf[0] = '\0';
  /* As the control port's listener resolves it ("localhost" included). */
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  int rc = host ? getaddrinfo(host, NULL, &hints, &res) : EAI_NONAME;
  if (rc != 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "listen host '%s': %s: UCX would not know which "
                         "interface to listen on",
                         host ? host : "(none)", gai_strerror(rc));
  for (struct addrinfo *r = res; r; r = r->ai_next)
    if (unspecified(r->ai_addr)) { /* a wildcard: every interface */
      freeaddrinfo(res);
      return NULL;
    }
  /* getifaddrs can fail now and then (a netlink dump cut short while
   * interfaces change): tried again, and never taken as "every interface". */
  struct ifaddrs *ifs = NULL;
  int err = 0;
  for (int attempt = 0; attempt < 5; attempt++) {
    if (getifaddrs(&ifs) == 0) {
      err = 0;
      break;
    }
    err = errno;
    ifs = NULL;
  }
  size_t used = 0;
  for (struct addrinfo *r = res; r && ifs; r = r->ai_next)
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
      if (!same_addr(i->ifa_addr, r->ai_addr) && !on_loopback(i, r->ai_addr))
        continue;
      /* The interfaces of every address the name has, once each. */
      size_t nlen = strlen(i->ifa_name);
      bool have = false;
      for (const char *p = buf; *p && !have;
           p += strcspn(p, ","), p += *p == ',')
        have =
            strncmp(p, i->ifa_name, nlen) == 0 && (p[nlen] == ',' || !p[nlen]);
      if (!have && used + nlen + 2 < cap) {
        used += (size_t)snprintf(buf + used, cap - used, "%s%s",
                                 used ? "," : "", i->ifa_name);
      }
      break;
    }
  if (ifs) freeifaddrs(ifs);
  freeaddrinfo(res);
  if (used > 0) return NULL;
  if (err != 0)
    return wt_status_new(WT_UNAVAILABLE,
                         "listen host '%s': cannot read the interfaces "
                         "(getifaddrs: %s), so UCX's listening sockets could "
                         "not be kept to its interface; refused rather than "
                         "listening on every one",
                         host, strerror(err));
  return wt_status_new(WT_FAILED_PRECONDITION,
                       "listen host '%s': no interface holds this address, "
                       "so UCX's listening sockets could not be kept to it; "
                       "refused rather than listening on every interface",
                       host);
}

wt_status *wt_ucx_new(const char *transports, const char *net_devices,
                      bool stream, const char *who, wt_ucx **out) {
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
  if (net_devices != NULL && *net_devices != '\0' &&
      getenv("UCX_NET_DEVICES") == NULL) {
    us = ucp_config_modify(config, "NET_DEVICES", net_devices);
    if (us != UCS_OK)
      WT_FAIL(WT_INVALID_ARGUMENT, "%s: network devices '%s': %s", who,
              net_devices, ucs_status_string(us));
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
      .features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP |
                  (stream ? UCP_FEATURE_STREAM : 0),
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
  ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
  if (ucp_context_query(u->context, &ca) == UCS_OK)
    u->memory_types = ca.memory_types;
  else
    u->memory_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
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
    /* Bounded: under a flood progress never runs dry, and what it takes in
     * must be discarded (below) before it piles up. */
    int busy = 0;
    while (busy < 64 && ucp_worker_progress(u->worker) != 0) busy++;
    /* Probing costs a little on every pass: done when progress ran dry
     * only once a millisecond, at once when it did not (a flood). */
    bool probe =
        u->discard && (busy == 64 || wt_mono_ms() >= u->discard_next_ms);
    if (probe) u->discard_next_ms = wt_mono_ms() + 1;
    if (probe && wt_ucx_discard_unexpected(u) > 0 &&
        wt_mono_ms() >= u->discard_log_ms) {
      WT_LOGW("ucx",
              "discarded %llu message(s) that no receive of this round "
              "matches (a failed round's late buckets, or a peer without "
              "the init's secret)",
              (unsigned long long)u->discarded);
      u->discard_log_ms = wt_mono_ms() + 5000;
    }
    if (cond != NULL && cond(arg)) return NULL;
    if (atomic_load(&u->cancelled))
      return wt_status_new(WT_CANCELLED, "cancelled while waiting for %s",
                           what);
    int64_t left = deadline_ms - wt_mono_ms();
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

wt_status *wt_ucx_need_cuda(const wt_ucx *u, const char *who) {
  if (u->memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) return NULL;
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  char types[160] = "";
  size_t used = 0;
  for (int m = 0; m < UCS_MEMORY_TYPE_LAST && used < sizeof(types) - 1; m++)
    if (u->memory_types & UCS_BIT(m))
      used += (size_t)snprintf(types + used, sizeof(types) - used, "%s%s",
                               used ? ", " : "", ucs_memory_type_names[m]);
  return wt_status_new(
      WT_FAILED_PRECONDITION,
      "%s: the UCX in use (%u.%u.%u) cannot move CUDA device memory here "
      "(its memory types: %s); that needs UCX built with CUDA and its "
      "cuda_copy transport loaded with a CUDA driver (UCX 1.22 from PyPI's "
      "libucx-cu13 has it; Debian 12's 1.13 has none)",
      who, major, minor, release, used ? types : "none");
}

wt_status *wt_ucx_mem_map(wt_ucx *u, void *base, size_t len, bool cuda,
                          const char *what, ucp_mem_h *memh) {
  ucp_mem_map_params_t p = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                          UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                            .address = base,
                            .length = len};
  if (cuda) {
    p.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    p.memory_type = UCS_MEMORY_TYPE_CUDA;
  }
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
  ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE |
                                           UCP_OP_ATTR_FIELD_CALLBACK |
                                           UCP_OP_ATTR_FIELD_USER_DATA |
                                           UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
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
    int64_t deadline = wt_mono_ms() + grace_ms;
    while (ucp_request_check_status(req) == UCS_INPROGRESS &&
           wt_mono_ms() < deadline)
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
  int64_t deadline = wt_mono_ms() + grace_ms;
  while (ucp_request_check_status(req) == UCS_INPROGRESS &&
         wt_mono_ms() < deadline)
    ucp_worker_progress(u->worker);
  if (ucp_request_check_status(req) == UCS_INPROGRESS && flush) {
    /* The peer does not answer: force it. */
    ucp_request_free(req);
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    req = ucp_ep_close_nbx(ep, &p);
    if (req == NULL || UCS_PTR_IS_ERR(req)) return;
    deadline = wt_mono_ms() + grace_ms;
    while (ucp_request_check_status(req) == UCS_INPROGRESS &&
           wt_mono_ms() < deadline)
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

/* ---- delta buckets (ucx_shared.h) ---- */

uint64_t wt_ucx_delta_bound(uint64_t raw) {
  uint64_t segs =
      (raw + WT_UCX_DELTA_SEGMENT_BYTES - 1) / WT_UCX_DELTA_SEGMENT_BYTES;
  return raw + segs * WT_UCX_DELTA_HEADER_BYTES;
}

static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

void wt_ucx_delta_header_put(unsigned char *out, uint64_t raw_len,
                             uint64_t base_digest, uint64_t data_len) {
  put64(out, raw_len);
  put64(out + 8, base_digest);
  put64(out + 16, data_len);
}

void wt_ucx_delta_header_get(const unsigned char *in, uint64_t *raw_len,
                             uint64_t *base_digest, uint64_t *data_len) {
  *raw_len = get64(in);
  *base_digest = get64(in + 8);
  *data_len = get64(in + 16);
}

wt_status *wt_ucx_delta_walk(const unsigned char *msg, size_t len, uint64_t raw,
                             const char *where, wt_ucx_delta_segment_fn seg,
                             void *arg) {
  size_t left = len;
  uint64_t pos = 0;
  while (pos < raw) {
    if (left < WT_UCX_DELTA_HEADER_BYTES)
      return wt_status_new(WT_DATA_LOSS,
                           "%s at byte %" PRIu64
                           ": the message (%zu bytes) "
                           "ends before the segment's header",
                           where, pos, len);
    uint64_t n = 0, base = 0, dlen = 0;
    wt_ucx_delta_header_get(msg, &n, &base, &dlen);
    msg += WT_UCX_DELTA_HEADER_BYTES;
    left -= WT_UCX_DELTA_HEADER_BYTES;
    uint64_t want = raw - pos < WT_UCX_DELTA_SEGMENT_BYTES
                        ? raw - pos
                        : WT_UCX_DELTA_SEGMENT_BYTES;
    if (n != want)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "%s at byte %" PRIu64 ": a segment of %" PRIu64
                           " bytes; the plan's is %" PRIu64,
                           where, pos, n, want);
    if (dlen > left)
      return wt_status_new(WT_DATA_LOSS,
                           "%s at byte %" PRIu64 ": the segment says %" PRIu64
                           " bytes of data, %zu are left",
                           where, pos, dlen, left);
    if (base == 0 && dlen != n)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "%s at byte %" PRIu64 ": a raw segment of %" PRIu64
                           " bytes covers %" PRIu64,
                           where, pos, dlen, n);
    wt_status *st = seg(arg, pos, n, base, msg, (size_t)dlen);
    if (st != NULL) return st;
    msg += dlen;
    left -= (size_t)dlen;
    pos += n;
  }
  if (left != 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: %zu bytes after the last segment", where, left);
  return NULL;
}
