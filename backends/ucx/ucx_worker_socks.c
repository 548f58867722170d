/* ucx_worker_socks.c: which TCP connections of this process are peers of a UCX
 * worker (docs/trust.md, attack row 6).
 *
 * A stranger who knows a worker's address makes UCX accept a TCP
 * connection per endpoint, with no callback to wt. UCX has no limit on
 * them, so wt counts them from outside: the listening ports the worker
 * opened (the listening sockets this process has after ucp_worker_create
 * and not before, found under one lock so that two workers' starts do not
 * mix), then, when asked, this process's established connections whose
 * local port is one of those. Sockets are matched by inode between
 * /proc/self/fd and the kernel's tables (/proc/self/net/tcp, tcp6), so
 * other processes' sockets never count. */

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/ucx/ucx_worker.h"

#define TCP_ESTABLISHED 0x01
#define TCP_LISTEN 0x0a

static int cmp_ulong(const void *a, const void *b) {
  unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;
  return x < y ? -1 : x > y;
}

/* This process's socket inodes, sorted; *n set. The caller frees. NULL
 * (and *n 0) when they cannot be listed: *exhausted tells whether that was
 * for want of a descriptor. */
static unsigned long *own_sockets(size_t *n, bool *exhausted) {
  size_t cap = 256, k = 0;
  unsigned long *v = malloc(cap * sizeof(*v));
  DIR *d = opendir("/proc/self/fd");
  *exhausted = d == NULL && (errno == EMFILE || errno == ENFILE);
  if (d == NULL) {
    free(v);
    *n = 0;
    return NULL;
  }
  struct dirent *de;
  while (v != NULL && d != NULL && (de = readdir(d)) != NULL) {
    char link[300], target[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%s", de->d_name);
    ssize_t l = readlink(link, target, sizeof(target) - 1);
    if (l <= 0) continue;
    target[l] = '\0';
    unsigned long ino = 0;
    if (sscanf(target, "socket:[%lu]", &ino) != 1) continue;
    if (k == cap) {
      unsigned long *m = realloc(v, 2 * cap * sizeof(*v));
      if (m == NULL) break;
      v = m;
      cap *= 2;
    }
    /* cppcheck-suppress nullPointerRedundantCheck ; the loop needs v */
    v[k++] = ino;
  }
  if (d) closedir(d);
  if (v) qsort(v, k, sizeof(*v), cmp_ulong);
  *n = v ? k : 0;
  return v;
}

/* Calls fn(local port, state, user) for every TCP socket of this process;
 * false when the process is out of descriptors to look with. */
static bool each_tcp(void (*fn)(unsigned port, unsigned state, void *user),
                     void *user) {
  size_t n = 0;
  bool exhausted = false;
  unsigned long *mine = own_sockets(&n, &exhausted);
  const char *tables[] = {"/proc/self/net/tcp", "/proc/self/net/tcp6"};
  for (size_t t = 0; mine != NULL && t < 2; t++) {
    FILE *f = fopen(tables[t], "r");
    char line[512];
    if (f == NULL) {
      exhausted = exhausted || errno == EMFILE || errno == ENFILE;
      continue;
    }
    if (fgets(line, sizeof(line), f) == NULL) { /* the header */
      fclose(f);
      continue;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
      unsigned port = 0, state = 0;
      unsigned long ino = 0;
      if (sscanf(line,
                 "%*d: %*[0-9A-Fa-f]:%X %*[0-9A-Fa-f]:%*X %X %*X:%*X "
                 "%*X:%*X %*X %*u %*u %lu",
                 &port, &state, &ino) != 3)
        continue;
      if (bsearch(&ino, mine, n, sizeof(*mine), cmp_ulong) != NULL)
        fn(port, state, user);
    }
    fclose(f);
  }
  free(mine);
  return !exhausted;
}

typedef struct port_list {
  uint16_t *ports;
  size_t n, cap;
} port_list;

static void add_listening(unsigned port, unsigned state, void *user) {
  port_list *l = user;
  if (state != TCP_LISTEN || l->n == l->cap) return;
  for (size_t i = 0; i < l->n; i++)
    if (l->ports[i] == port) return;
  l->ports[l->n++] = (uint16_t)port;
}

size_t wt_ucxe_listening_ports(uint16_t *ports, size_t cap) {
  port_list l = {ports, 0, cap};
  each_tcp(add_listening, &l);
  return l.n;
}

typedef struct peer_count {
  const uint16_t *ports;
  size_t n;
  size_t count;
} peer_count;

static void count_accepted(unsigned port, unsigned state, void *user) {
  peer_count *c = user;
  if (state != TCP_ESTABLISHED) return;
  for (size_t i = 0; i < c->n; i++)
    if (c->ports[i] == port) {
      c->count++;
      return;
    }
}

size_t wt_ucxe_count_peers(const uint16_t *ports, size_t n) {
  peer_count c = {ports, n, 0};
  /* Out of descriptors to count with: as good as over any limit (the
   * engine given up closes what strangers hold). */
  if (n > 0 && !each_tcp(count_accepted, &c)) return SIZE_MAX;
  return c.count;
}
