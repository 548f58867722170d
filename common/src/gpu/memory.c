/* memory.c: memory kinds, devices, and the copies that work for every kind
 * (see wt/memory.h). */

#include "wt/memory.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "wt/cuda.h"
#include "wt/parse.h"

#define MAX_CUDA_INDEX 1023

static const char *const kind_names[WT_MEM_KIND_COUNT] = {
    [WT_MEM_HOST] = "host",
    [WT_MEM_SHARED] = "shared",
    [WT_MEM_PINNED] = "pinned",
    [WT_MEM_DEVICE] = "device",
};

const char *wt_mem_kind_name(wt_mem_kind kind) {
  if ((unsigned)kind >= WT_MEM_KIND_COUNT) return "unknown";
  return kind_names[kind];
}

wt_status *wt_mem_kind_parse(const char *name, wt_mem_kind *out) {
  for (unsigned k = 0; name != NULL && k < WT_MEM_KIND_COUNT; k++)
    if (strcasecmp(name, kind_names[k]) == 0) {
      *out = (wt_mem_kind)k;
      return NULL;
    }
  return wt_status_new(WT_INVALID_ARGUMENT,
                       "memory kind '%s' is not one of: host, shared, pinned, "
                       "device",
                       name ? name : "(null)");
}

bool wt_mem_kind_host_addressable(wt_mem_kind kind) {
  return kind == WT_MEM_HOST || kind == WT_MEM_SHARED || kind == WT_MEM_PINNED;
}

const char *wt_mem_kinds_format(uint32_t mask, char *buf, size_t cap) {
  size_t used = 0;
  if (cap == 0) return buf;
  buf[0] = '\0';
  for (unsigned k = 0; k < WT_MEM_KIND_COUNT; k++) {
    if (!(mask & WT_MEM_BIT(k))) continue;
    int n = snprintf(buf + used, cap - used, "%s%s", used ? ", " : "",
                     kind_names[k]);
    if (n < 0 || (size_t)n >= cap - used) break;
    used += (size_t)n;
  }
  if (used == 0) snprintf(buf, cap, "(none)");
  return buf;
}

/* --- devices -------------------------------------------------------------- */

wt_status *wt_device_parse(const char *s, wt_device *out) {
  if (s != NULL && strcmp(s, "cpu") == 0) {
    *out = (wt_device)WT_DEVICE_CPU_INIT;
    return NULL;
  }
  uint64_t v = 0;
  if (s != NULL && strncmp(s, "cuda:", 5) == 0 && s[5] >= '0' && s[5] <= '9') {
    if (wt_parse_u64(s + 5, &v) && v <= MAX_CUDA_INDEX &&
        !(s[5] == '0' && s[6] != '\0')) {
      *out = (wt_device){WT_DEVICE_CUDA, (int)v};
      return NULL;
    }
  }
  return wt_status_new(WT_INVALID_ARGUMENT,
                       "device '%.64s' is neither 'cpu' nor 'cuda:N' (N from "
                       "0 to %d)",
                       s ? s : "(null)", MAX_CUDA_INDEX);
}

wt_status *wt_device_list_parse(const char *s, wt_device **out, size_t *n) {
  wt_status *st = NULL;
  char *copy = NULL, *save = NULL;
  wt_device *list = NULL;
  size_t count = 0, cap = 0;
  *out = NULL;
  *n = 0;
  if (s == NULL || *s == '\0')
    WT_FAIL(WT_INVALID_ARGUMENT, "device list is empty");
  if ((copy = strdup(s)) == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "device list: out of memory");
  for (char *tok = strtok_r(copy, ",", &save); tok != NULL;
       tok = strtok_r(NULL, ",", &save)) {
    wt_device d;
    WT_CHECK(wt_device_parse(tok, &d));
    for (size_t i = 0; i < count; i++)
      if (d.type == WT_DEVICE_CUDA && wt_device_equal(list[i], d))
        WT_FAIL(WT_INVALID_ARGUMENT, "device list '%.128s' names cuda:%d twice",
                s, d.index);
    if (count == cap) {
      size_t ncap = cap ? cap * 2 : 8;
      wt_device *grown = realloc(list, ncap * sizeof(*grown));
      if (grown == NULL)
        WT_FAIL(WT_RESOURCE_EXHAUSTED, "device list: out of memory");
      list = grown;
      cap = ncap;
    }
    list[count++] = d;
  }
  if (count == 0)
    WT_FAIL(WT_INVALID_ARGUMENT, "device list '%.128s' names no device", s);
  *out = list;
  *n = count;
  list = NULL;
out:
  free(list);
  free(copy);
  return st;
}

const char *wt_device_format(wt_device d, char buf[WT_DEVICE_NAME_MAX]) {
  if (d.type == WT_DEVICE_CUDA)
    snprintf(buf, WT_DEVICE_NAME_MAX, "cuda:%d", d.index);
  else
    snprintf(buf, WT_DEVICE_NAME_MAX, "cpu");
  return buf;
}

bool wt_device_equal(wt_device a, wt_device b) {
  if (a.type != b.type) return false;
  return a.type == WT_DEVICE_CPU || a.index == b.index;
}

/* --- host kinds ----------------------------------------------------------- */

static wt_status *need_cpu(wt_mem_kind kind, wt_device device) {
  if (device.type == WT_DEVICE_CPU) return NULL;
  return wt_status_new(WT_INVALID_ARGUMENT,
                       "memory kind '%s' lives on the host, not on cuda:%d",
                       kind_names[kind], device.index);
}

static wt_status *host_available(wt_device device) {
  return need_cpu(WT_MEM_HOST, device);
}

/* Faults every page in now, rather than in a round's first copy: a round
 * then runs at memory speed from the start, and a host short of memory
 * fails at load. Huge pages where the kernel allows them. */
static void populate(void *p, size_t len) {
  madvise(p, len, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
  if (madvise(p, len, MADV_POPULATE_WRITE) == 0) return;
#endif
  long page = sysconf(_SC_PAGESIZE);
  for (size_t off = 0; off < len; off += (size_t)(page > 0 ? page : 4096))
    ((volatile unsigned char *)p)[off] = 0;
}

static wt_status *host_alloc(wt_device device, size_t len, const char *what,
                             wt_mem_region *out) {
  (void)device;
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
  if (p == MAP_FAILED)
    return wt_status_from_errno(errno, "%s: mapping %zu bytes of host memory",
                                what, len);
  populate(p, len);
  out->base = p;
  return NULL;
}

static void map_release(wt_mem_region *r) {
  munmap(r->base, r->len);
}

static wt_status *host_copy_in(const wt_mem_region *r, size_t off,
                               const void *src, size_t len) {
  memcpy((unsigned char *)r->base + off, src, len);
  return NULL;
}

static wt_status *host_copy_out(const wt_mem_region *r, size_t off, void *dst,
                                size_t len) {
  memcpy(dst, (const unsigned char *)r->base + off, len);
  return NULL;
}

static wt_status *shared_available(wt_device device) {
  return need_cpu(WT_MEM_SHARED, device);
}

/* A memfd of fixed size, mapped shared, then sealed: against growing and
 * shrinking (a process that maps it can rely on its length) and against
 * any write but through this mapping (F_SEAL_FUTURE_WRITE: no one handed
 * the memfd, nor a reopen of it, can map it writable or write(2) it; the
 * server's own mapping keeps writing). */
static wt_status *shared_alloc(wt_device device, size_t len, const char *what,
                               wt_mem_region *out) {
  (void)device;
  char name[64];
  snprintf(name, sizeof(name), "wt:%.58s", what);
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return wt_status_from_errno(errno, "%s: memfd_create", what);
  if (ftruncate(fd, (off_t)len) != 0) {
    wt_status *st = wt_status_from_errno(
        errno, "%s: sizing a memfd to %zu bytes", what, len);
    close(fd);
    return st;
  }
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    wt_status *st =
        wt_status_from_errno(errno, "%s: mapping a %zu-byte memfd", what, len);
    close(fd);
    return st;
  }
  if (fcntl(fd, F_ADD_SEALS,
            F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) !=
      0) {
    wt_status *st = wt_status_from_errno(errno, "%s: sealing a memfd", what);
    munmap(p, len);
    close(fd);
    return st;
  }
  populate(p, len);
  out->base = p;
  out->fd = fd;
  return NULL;
}

static void shared_release(wt_mem_region *r) {
  munmap(r->base, r->len);
  if (r->fd >= 0) close(r->fd);
}

/* --- CUDA kinds ----------------------------------------------------------- */

static wt_status *pinned_available(wt_device device) {
  wt_status *st = need_cpu(WT_MEM_PINNED, device);
  if (st != NULL) return st;
  const wt_cuda_api *api = NULL;
  st = wt_cuda_api_get(&api);
  if (st != NULL) return st;
  int count = 0;
  return api->device_count(&count);
}

static wt_status *pinned_alloc(wt_device device, size_t len, const char *what,
                               wt_mem_region *out) {
  (void)device;
  const wt_cuda_api *api = NULL;
  wt_status *st = wt_cuda_api_get(&api);
  if (st == NULL) st = api->host_alloc(len, &out->base);
  return wt_status_prefix(st, "%s: %zu bytes of pinned memory", what, len);
}

static void pinned_release(wt_mem_region *r) {
  const wt_cuda_api *api = NULL;
  wt_status *st = wt_cuda_api_get(&api);
  if (st == NULL) api->host_free(r->base);
  wt_status_free(st);
}

static wt_status *device_available(wt_device device) {
  if (device.type != WT_DEVICE_CUDA)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "memory kind 'device' needs a GPU device (cuda:N), "
                         "not cpu");
  return wt_cuda_check_device(device.index);
}

static wt_status *device_alloc(wt_device device, size_t len, const char *what,
                               wt_mem_region *out) {
  const wt_cuda_api *api = NULL;
  wt_status *st = wt_cuda_api_get(&api);
  if (st == NULL) st = wt_cuda_bind(device.index);
  if (st == NULL) st = api->device_alloc(device.index, len, &out->base);
  return wt_status_prefix(st, "%s: %zu bytes on cuda:%d", what, len,
                          device.index);
}

static void device_release(wt_mem_region *r) {
  const wt_cuda_api *api = NULL;
  wt_status *st = wt_cuda_api_get(&api);
  if (st == NULL) st = wt_cuda_bind(r->device.index);
  if (st == NULL) api->device_free(r->device.index, r->base);
  wt_status_free(st);
}

static wt_status *device_copy_in(const wt_mem_region *r, size_t off,
                                 const void *src, size_t len) {
  const wt_cuda_api *api = NULL;
  wt_status *st = wt_cuda_api_get(&api);
  if (st == NULL) st = wt_cuda_bind(r->device.index);
  if (st == NULL)
    st = api->copy_to_device(r->device.index, (unsigned char *)r->base + off,
                             src, len);
  return st;
}

static wt_status *device_copy_out(const wt_mem_region *r, size_t off, void *dst,
                                  size_t len) {
  return wt_mem_copy_to_host(WT_MEM_DEVICE, r->device, dst,
                             (const unsigned char *)r->base + off, len);
}

static const wt_mem_ops kinds[WT_MEM_KIND_COUNT] = {
    [WT_MEM_HOST] = {WT_MEM_HOST, "host", true, host_available, host_alloc,
                     map_release, host_copy_in, host_copy_out},
    [WT_MEM_SHARED] = {WT_MEM_SHARED, "shared", true, shared_available,
                       shared_alloc, shared_release, host_copy_in,
                       host_copy_out},
    [WT_MEM_PINNED] = {WT_MEM_PINNED, "pinned", true, pinned_available,
                       pinned_alloc, pinned_release, host_copy_in,
                       host_copy_out},
    [WT_MEM_DEVICE] = {WT_MEM_DEVICE, "device", false, device_available,
                       device_alloc, device_release, device_copy_in,
                       device_copy_out},
};

const wt_mem_ops *wt_mem_ops_of(wt_mem_kind kind) {
  if ((unsigned)kind >= WT_MEM_KIND_COUNT) return NULL;
  return &kinds[kind];
}

wt_status *wt_mem_kind_available(wt_mem_kind kind, wt_device device) {
  const wt_mem_ops *ops = wt_mem_ops_of(kind);
  char dev[WT_DEVICE_NAME_MAX];
  if (ops == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "memory kind %d is unknown",
                         (int)kind);
  return wt_status_prefix(ops->available(device),
                          "memory kind '%s' on %s is unavailable", ops->name,
                          wt_device_format(device, dev));
}

wt_status *wt_mem_alloc(wt_mem_kind kind, wt_device device, size_t len,
                        const char *what, wt_mem_region *out) {
  const wt_mem_ops *ops = wt_mem_ops_of(kind);
  memset(out, 0, sizeof(*out));
  out->fd = -1;
  out->kind = kind;
  out->device = device;
  if (ops == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "%s: memory kind %d is unknown",
                         what, (int)kind);
  if (len == 0) return NULL;
  wt_status *st = ops->alloc(device, len, what, out);
  if (st != NULL) {
    out->base = NULL;
    out->fd = -1;
    return st;
  }
  out->len = len;
  return NULL;
}

void wt_mem_free(wt_mem_region *r) {
  if (r == NULL) return;
  const wt_mem_ops *ops = wt_mem_ops_of(r->kind);
  if (r->base != NULL && ops != NULL) ops->release(r);
  memset(r, 0, sizeof(*r));
  r->fd = -1;
}

/* --- copies --------------------------------------------------------------- */

wt_status *wt_mem_bounce_init(wt_mem_bounce *b, size_t cap) {
  const wt_cuda_api *api = NULL;
  memset(b, 0, sizeof(*b));
  wt_status *st = wt_cuda_api_get(&api);
  if (st == NULL) st = api->host_alloc(cap, &b->buf);
  if (st != NULL)
    return wt_status_prefix(st, "a %zu-byte pinned bounce buffer", cap);
  b->cap = cap;
  return NULL;
}

void wt_mem_bounce_free(wt_mem_bounce *b) {
  if (b == NULL || b->buf == NULL) return;
  const wt_cuda_api *api = NULL;
  wt_status *st = wt_cuda_api_get(&api);
  if (st == NULL) api->host_free(b->buf);
  wt_status_free(st);
  memset(b, 0, sizeof(*b));
}

static wt_status *check_range(const wt_mem_region *r, size_t off, size_t len) {
  if (off > r->len || len > r->len - off)
    return wt_status_new(WT_OUT_OF_RANGE,
                         "bytes [%zu, %zu) are outside a %zu-byte %s region",
                         off, off + len, r->len, wt_mem_kind_name(r->kind));
  return NULL;
}

/* The region's bounce buffer for one call: `b`, or one made now. */
static wt_status *bounce_for(wt_mem_bounce *b, wt_mem_bounce *own,
                             wt_mem_bounce **use) {
  if (b != NULL && b->buf != NULL) {
    *use = b;
    return NULL;
  }
  *use = own;
  return wt_mem_bounce_init(own, WT_MEM_BOUNCE_BYTES);
}

wt_status *wt_mem_fill(const wt_mem_region *r, size_t off, size_t len,
                       wt_mem_fill_fn fill, void *arg, wt_mem_bounce *b) {
  wt_status *st = NULL;
  wt_mem_bounce own = {0}, *use = NULL;
  const wt_mem_ops *ops = wt_mem_ops_of(r->kind);
  WT_CHECK(check_range(r, off, len));
  if (len == 0) goto out;
  if (ops->host_addressable) {
    st = fill(arg, 0, (unsigned char *)r->base + off, len);
    goto out;
  }
  WT_CHECK(bounce_for(b, &own, &use));
  for (size_t pos = 0; pos < len;) {
    size_t n = len - pos < use->cap ? len - pos : use->cap;
    WT_CHECK(fill(arg, pos, use->buf, n));
    WT_CHECK(ops->copy_in(r, off + pos, use->buf, n));
    pos += n;
  }
out:
  wt_mem_bounce_free(&own);
  return st;
}

wt_status *wt_mem_visit(const wt_mem_region *r, size_t off, size_t len,
                        wt_mem_visit_fn visit, void *arg, wt_mem_bounce *b) {
  wt_status *st = NULL;
  wt_mem_bounce own = {0}, *use = NULL;
  const wt_mem_ops *ops = wt_mem_ops_of(r->kind);
  WT_CHECK(check_range(r, off, len));
  if (len == 0) goto out;
  if (ops->host_addressable) {
    st = visit(arg, 0, (const unsigned char *)r->base + off, len);
    goto out;
  }
  WT_CHECK(bounce_for(b, &own, &use));
  for (size_t pos = 0; pos < len;) {
    size_t n = len - pos < use->cap ? len - pos : use->cap;
    WT_CHECK(ops->copy_out(r, off + pos, use->buf, n));
    WT_CHECK(visit(arg, pos, use->buf, n));
    pos += n;
  }
out:
  wt_mem_bounce_free(&own);
  return st;
}

static wt_status *fill_from(void *arg, uint64_t pos, void *buf, size_t len) {
  memcpy(buf, (const unsigned char *)arg + pos, len);
  return NULL;
}

static wt_status *visit_into(void *arg, uint64_t pos, const void *buf,
                             size_t len) {
  memcpy((unsigned char *)arg + pos, buf, len);
  return NULL;
}

wt_status *wt_mem_write(const wt_mem_region *r, size_t off, const void *src,
                        size_t len, wt_mem_bounce *b) {
  return wt_mem_fill(r, off, len, fill_from, (void *)src, b);
}

wt_status *wt_mem_read(const wt_mem_region *r, size_t off, void *dst,
                       size_t len, wt_mem_bounce *b) {
  return wt_mem_visit(r, off, len, visit_into, dst, b);
}

wt_status *wt_mem_copy_to_host(wt_mem_kind kind, wt_device device, void *dst,
                               const void *ptr, size_t len) {
  if (wt_mem_kind_host_addressable(kind)) {
    memcpy(dst, ptr, len);
    return NULL;
  }
  const wt_cuda_api *api = NULL;
  wt_status *st = wt_cuda_api_get(&api);
  if (st == NULL) st = wt_cuda_bind(device.index);
  if (st == NULL) st = api->copy_to_host(device.index, dst, ptr, len);
  return st;
}
