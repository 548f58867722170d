/* runtime_tokens.c: generated tokens, where a server writes them and where a
 * client of the same user finds them (wt/secure.h; docs/trust.md, "Secure
 * by default").
 *
 * The directory is the whole of the protection: only its user may enter
 * it, so only that user can read a token file in it or plant one. Every
 * check is made on what is there (lstat: not a link, owner, mode), never on
 * a name alone. */

#include <errno.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wt/secure.h"

#define TOKEN_BYTES 32

static wt_status *check_dir(const char *dir) {
  struct stat sb;
  if (lstat(dir, &sb) != 0)
    return wt_status_new(WT_FAILED_PRECONDITION, "runtime directory '%s': %s",
                         dir, strerror(errno));
  if (!S_ISDIR(sb.st_mode))
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "runtime directory '%s': not a directory (a link or "
                         "a file is never followed)",
                         dir);
  if (sb.st_uid != geteuid())
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "runtime directory '%s': owned by uid %u, not by "
                         "this user (%u); someone may have made it to read "
                         "what is written there. Remove it, or pass "
                         "--token-file",
                         dir, (unsigned)sb.st_uid, (unsigned)geteuid());
  if (sb.st_mode & 077)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "runtime directory '%s': mode %03o lets others in "
                         "(chmod 700 it)",
                         dir, (unsigned)(sb.st_mode & 0777));
  return NULL;
}

wt_status *wt_runtime_dir(const char *base, bool create, char *out,
                          size_t cap) {
  char user_run[64];
  snprintf(user_run, sizeof(user_run), "/run/user/%u", (unsigned)geteuid());
  struct stat sb;
  int n;
  if (base != NULL && *base != '\0')
    n = snprintf(out, cap, "%s/wt", base);
  else if (lstat(user_run, &sb) == 0 && S_ISDIR(sb.st_mode) &&
           sb.st_uid == geteuid())
    n = snprintf(out, cap, "%s/wt", user_run);
  else
    n = snprintf(out, cap, "/tmp/wt-%u", (unsigned)geteuid());
  if (n < 0 || (size_t)n >= cap)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "runtime directory under '%s': path too long",
                         base ? base : "");
  if (create && mkdir(out, 0700) != 0 && errno != EEXIST)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "runtime directory '%s': cannot create it: %s", out,
                         strerror(errno));
  return check_dir(out);
}

void wt_runtime_token_path(const char *dir, int port, char *out, size_t cap) {
  snprintf(out, cap, "%s/tokens-%d", dir, port);
}

/* 32 random bytes as unpadded base64url: 43 characters of '!'..'~'. */
static wt_status *fresh_token(char **out) {
  static const char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  uint8_t raw[TOKEN_BYTES + 1];
  wt_status *st = wt_random_bytes(raw, TOKEN_BYTES);
  if (st != NULL) return st;
  raw[TOKEN_BYTES] = 0;
  char *t = malloc(64);
  if (t == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  size_t k = 0;
  for (size_t i = 0; i < TOKEN_BYTES; i += 3) {
    uint32_t v = (uint32_t)raw[i] << 16 | (uint32_t)raw[i + 1] << 8 |
                 (i + 2 < TOKEN_BYTES ? raw[i + 2] : 0);
    size_t chars = i + 2 < TOKEN_BYTES ? 4 : 3; /* 32 = 10 * 3 + 2 */
    for (size_t c = 0; c < chars; c++)
      t[k++] = alphabet[(v >> (18 - 6 * c)) & 63];
  }
  t[k] = 0;
  memset(raw, 0, sizeof(raw));
  *out = t;
  return NULL;
}

wt_status *wt_tokens_generate(wt_token **out, size_t *n) {
  *out = NULL;
  *n = 0;
  wt_token *t = calloc(2, sizeof(*t));
  if (t == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  t[0].scope = WT_SCOPE_ALL;
  t[1].scope = WT_SCOPE_READER;
  wt_status *st = fresh_token(&t[0].token);
  if (st == NULL) st = fresh_token(&t[1].token);
  if (st != NULL) {
    wt_tokens_free(t, 2);
    return st;
  }
  *out = t;
  *n = 2;
  return NULL;
}

wt_status *wt_tokens_write(const char *path, const wt_token *tokens, size_t n) {
  char tmp[4096];
  if (snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid()) >=
      (int)sizeof(tmp))
    return wt_status_new(WT_INVALID_ARGUMENT, "token file '%s': path too long",
                         path);
  unlink(tmp);
  int fd =
      open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return wt_status_new(WT_FAILED_PRECONDITION, "token file '%s': %s", tmp,
                         strerror(errno));
  FILE *f = fdopen(fd, "w");
  if (f == NULL) {
    close(fd);
    unlink(tmp);
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "token file '%s': %s", tmp,
                         strerror(errno));
  }
  fprintf(f,
          "# wt-server's generated tokens (trainer first); clients of this "
          "user on this host find them.\n");
  for (size_t i = 0; i < n; i++)
    fprintf(f, "%s %s\n",
            (tokens[i].scope & WT_SCOPE_TRAINER) ? "trainer" : "reader",
            tokens[i].token);
  bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
  int err = errno;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    if (ok) err = errno;
    unlink(tmp);
    return wt_status_new(WT_FAILED_PRECONDITION, "token file '%s': %s", path,
                         strerror(err));
  }
  return NULL;
}

void wt_tokens_unlink_if_ours(const char *path, const wt_token *tokens,
                              size_t n) {
  wt_token *now = NULL;
  size_t m = 0;
  wt_status *st = wt_tokens_load(path, &now, &m);
  if (st != NULL) {
    wt_status_free(st);
    return;
  }
  bool same = m == n;
  for (size_t i = 0; same && i < n; i++)
    same = strcmp(now[i].token, tokens[i].token) == 0;
  wt_tokens_free(now, m);
  if (same) unlink(path);
}

bool wt_tcp_socket_uid(int local_port, int remote_port, unsigned want,
                       unsigned *uid_out) {
  static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
  for (size_t k = 0; k < 2; k++) {
    FILE *f = fopen(tables[k], "re");
    if (f == NULL) continue;
    char line[512];
    bool found = false;
    if (fgets(line, sizeof(line), f) == NULL) { /* the header */
      fclose(f);
      continue;
    }
    while (!found && fgets(line, sizeof(line), f) != NULL) {
      /* "  0: 0100007F:C351 00000000:0000 0A ... uid ..." */
      char local[64], remote[64];
      unsigned state = 0, uid = 0, tr = 0;
      unsigned long tx = 0, rx = 0, when = 0, retr = 0;
      if (sscanf(line, " %*d: %63s %63s %x %lx:%lx %x:%lx %lx %u", local,
                 remote, &state, &tx, &rx, &tr, &when, &retr, &uid) != 9)
        continue;
      const char *lc = strrchr(local, ':'), *rc = strrchr(remote, ':');
      if (lc == NULL || rc == NULL || state != want) continue;
      if ((int)strtol(lc + 1, NULL, 16) != local_port) continue;
      if (remote_port != 0 && (int)strtol(rc + 1, NULL, 16) != remote_port)
        continue;
      *uid_out = uid;
      found = true;
    }
    fclose(f);
    if (found) return true;
  }
  return false;
}

bool wt_tcp_peer_uid(const struct sockaddr *client,
                     const struct sockaddr *server, unsigned *uid) {
  if (client->sa_family != server->sa_family ||
      (client->sa_family != AF_INET && client->sa_family != AF_INET6))
    return false;
  struct {
    struct nlmsghdr nh;
    struct inet_diag_req_v2 r;
  } req;
  memset(&req, 0, sizeof(req));
  req.nh.nlmsg_len = sizeof(req);
  req.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  req.nh.nlmsg_flags = NLM_F_REQUEST;
  req.r.sdiag_family = (uint8_t)client->sa_family;
  req.r.sdiag_protocol = IPPROTO_TCP;
  req.r.idiag_states = ~0u;
  req.r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  /* The client's socket: its own end is `client`, its peer `server`. */
  if (client->sa_family == AF_INET) {
    const struct sockaddr_in *c = (const struct sockaddr_in *)client;
    const struct sockaddr_in *s = (const struct sockaddr_in *)server;
    req.r.id.idiag_sport = c->sin_port;
    req.r.id.idiag_dport = s->sin_port;
    memcpy(req.r.id.idiag_src, &c->sin_addr, 4);
    memcpy(req.r.id.idiag_dst, &s->sin_addr, 4);
  } else {
    const struct sockaddr_in6 *c = (const struct sockaddr_in6 *)client;
    const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)server;
    req.r.id.idiag_sport = c->sin6_port;
    req.r.id.idiag_dport = s->sin6_port;
    memcpy(req.r.id.idiag_src, &c->sin6_addr, 16);
    memcpy(req.r.id.idiag_dst, &s->sin6_addr, 16);
  }
  int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return false;
  struct timeval tv = {0, 200000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  struct sockaddr_nl nl = {.nl_family = AF_NETLINK};
  bool found = false;
  if (sendto(fd, &req, sizeof(req), 0, (struct sockaddr *)&nl, sizeof(nl)) ==
      (ssize_t)sizeof(req)) {
    union {
      struct nlmsghdr h;
      char buf[8192];
    } resp;
    ssize_t n = recv(fd, &resp, sizeof(resp), 0);
    for (struct nlmsghdr *h = &resp.h; n > 0 && NLMSG_OK(h, (size_t)n);
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) break; /* an error, done */
      const struct inet_diag_msg *m = NLMSG_DATA(h);
      *uid = m->idiag_uid;
      found = true;
      break;
    }
  }
  close(fd);
  return found;
}

bool wt_port_listener_is_mine(int port) {
  unsigned uid = 0;
  return wt_tcp_socket_uid(port, 0, 0x0A, &uid) && uid == (unsigned)geteuid();
}

/* The port of `target` when its host is loopback; -1 otherwise. */
static int loopback_port(const char *target) {
  const char *colon = strrchr(target, ':');
  if (colon == NULL) return -1;
  size_t hl = (size_t)(colon - target);
  char host[64];
  if (hl == 0 || hl >= sizeof(host)) return -1;
  memcpy(host, target, hl);
  host[hl] = 0;
  bool loop = strcmp(host, "localhost") == 0 || strcmp(host, "[::1]") == 0 ||
              strcmp(host, "::1") == 0 || strncmp(host, "127.", 4) == 0;
  char *end = NULL;
  long port = strtol(colon + 1, &end, 10);
  if (!loop || end == colon + 1 || *end != 0 || port < 1 || port > 65535)
    return -1;
  return (int)port;
}

wt_status *wt_token_discover(const char *base, const char *target, char **out) {
  *out = NULL;
  int port = loopback_port(target);
  if (port < 0) return NULL;
  char dir[4096], path[4200];
  wt_status *st = wt_runtime_dir(base, false, dir, sizeof(dir));
  if (st != NULL) { /* no runtime directory: nothing generated here */
    wt_status_free(st);
    return NULL;
  }
  wt_runtime_token_path(dir, port, path, sizeof(path));
  struct stat sb;
  if (lstat(path, &sb) != 0) return NULL;
  if (!wt_port_listener_is_mine(port)) return NULL;
  return wt_token_read(path, out);
}
