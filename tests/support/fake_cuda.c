/* fake_cuda.c: GPUs emulated in host memory (see fake_cuda.h). */

#include "fake_cuda.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct fake_alloc {
  int device;
  unsigned char *dev;    /* PROT_NONE: what wt sees */
  unsigned char *mirror; /* PROT_READ | PROT_WRITE: what copies use */
  size_t len;
  uint64_t gen; /* its IPC handle's: the same for every export of it */
  int fd;       /* the memfd, kept open so another process can open it */
  int imported; /* opened from another process's handle */
  struct fake_alloc *next;
} fake_alloc;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static fake_alloc *allocs;
static uint64_t next_gen = 1;
static int hold_copies;
static int ndevices;
static fake_cuda_stats stats;
static _Thread_local int current = -1;

static wt_status *bound(int device, const char *call) {
  if (current == device) return NULL;
  pthread_mutex_lock(&mu);
  stats.binding_errors++;
  pthread_mutex_unlock(&mu);
  return wt_status_new(WT_INTERNAL,
                       "fake %s for cuda:%d on a thread bound to cuda:%d", call,
                       device, current);
}

static wt_status *f_device_count(int *count) {
  *count = ndevices;
  return NULL;
}

static wt_status *f_set_device(int device) {
  if (device < 0 || device >= ndevices)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "fake cudaSetDevice(%d): invalid device ordinal",
                         device);
  current = device;
  return NULL;
}

static wt_status *f_get_device(int *device) {
  *device = current;
  return NULL;
}

static wt_status *f_device_alloc(int device, size_t len, void **ptr) {
  wt_status *st = bound(device, "cudaMalloc");
  if (st != NULL) return st;
  fake_alloc *a = calloc(1, sizeof(*a));
  int fd = memfd_create("fake-cuda", MFD_CLOEXEC);
  if (a == NULL || fd < 0 || ftruncate(fd, (off_t)len) != 0) {
    free(a);
    if (fd >= 0) close(fd);
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "fake cudaMalloc(%zu) failed",
                         len);
  }
  a->dev = mmap(NULL, len, PROT_NONE, MAP_SHARED, fd, 0);
  a->mirror = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  a->fd = fd;
  if (a->dev == MAP_FAILED || a->mirror == MAP_FAILED) {
    if (a->dev != MAP_FAILED) munmap(a->dev, len);
    if (a->mirror != MAP_FAILED) munmap(a->mirror, len);
    close(fd);
    free(a);
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "fake cudaMalloc(%zu): mmap",
                         len);
  }
  a->device = device;
  a->len = len;
  pthread_mutex_lock(&mu);
  a->gen = next_gen++;
  a->next = allocs;
  allocs = a;
  stats.device_bytes[device] += len;
  pthread_mutex_unlock(&mu);
  *ptr = a->dev;
  return NULL;
}

static void f_device_free(int device, void *ptr) {
  pthread_mutex_lock(&mu);
  for (fake_alloc **p = &allocs; *p; p = &(*p)->next) {
    fake_alloc *a = *p;
    if (a->dev != ptr) continue;
    if (a->device != device || current != device) stats.binding_errors++;
    *p = a->next;
    stats.device_bytes[a->device] -= a->len;
    munmap(a->dev, a->len);
    munmap(a->mirror, a->len);
    close(a->fd);
    free(a);
    break;
  }
  pthread_mutex_unlock(&mu);
}

static wt_status *f_host_alloc(size_t len, void **ptr) {
  /* Its size in front, for the counters. */
  size_t *p = calloc(1, len + sizeof(size_t) * 2);
  if (p == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "fake cudaHostAlloc(%zu)", len);
  p[0] = len;
  pthread_mutex_lock(&mu);
  stats.host_bytes += len;
  pthread_mutex_unlock(&mu);
  *ptr = p + 2;
  return NULL;
}

static void f_host_free(void *ptr) {
  if (ptr == NULL) return;
  size_t *p = (size_t *)ptr - 2;
  pthread_mutex_lock(&mu);
  stats.host_bytes -= p[0];
  pthread_mutex_unlock(&mu);
  free(p);
}

/* The allocation holding [p, p + len) on any device, under mu; or NULL. */
static fake_alloc *alloc_of_locked(const void *p, size_t len) {
  const unsigned char *q = p;
  for (fake_alloc *a = allocs; a; a = a->next)
    if (q >= a->dev && len <= a->len && (size_t)(q - a->dev) <= a->len - len)
      return a;
  return NULL;
}

/* The mirror address of [ptr, ptr + len) on `device`, or NULL. */
static unsigned char *mirror_of(int device, const void *ptr, size_t len) {
  pthread_mutex_lock(&mu);
  fake_alloc *a = alloc_of_locked(ptr, len);
  unsigned char *m = a != NULL && a->device == device
                         ? a->mirror + ((const unsigned char *)ptr - a->dev)
                         : NULL;
  pthread_mutex_unlock(&mu);
  return m;
}

static wt_status *f_copy(int device, void *dst, const void *src, size_t len,
                         int to_device) {
  wt_status *st =
      bound(device, to_device ? "cudaMemcpy H2D" : "cudaMemcpy D2H");
  if (st != NULL) return st;
  unsigned char *m = mirror_of(device, to_device ? dst : src, len);
  if (m == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "fake cudaMemcpy: %zu bytes at %p are not device "
                         "memory of cuda:%d",
                         len, to_device ? dst : src, device);
  if (to_device)
    memcpy(m, src, len);
  else
    memcpy(dst, m, len);
  pthread_mutex_lock(&mu);
  if (to_device)
    stats.copies_in++;
  else
    stats.copies_out++;
  if (len > stats.largest_copy) stats.largest_copy = len;
  pthread_mutex_unlock(&mu);
  return NULL;
}

static wt_status *f_copy_to_device(int device, void *dst, const void *src,
                                   size_t len) {
  return f_copy(device, dst, src, len, 1);
}

static wt_status *f_copy_to_host(int device, void *dst, const void *src,
                                 size_t len) {
  return f_copy(device, dst, src, len, 0);
}

static wt_status *f_device_uuid(int device, char out[WT_CUDA_UUID_MAX]) {
  snprintf(out, WT_CUDA_UUID_MAX, "GPU-fa4e%04x-0000-0000-0000-000000000000",
           (unsigned)device);
  return NULL;
}

/* A fake "stream" or "event" is a pointer to an int the test sets to 1
 * when the work is done; synchronising waits for it (bounded). NULL is the
 * default stream, as in CUDA: nothing queued on it here. */
static wt_status *f_sync(void *handle, const char *what) {
  static const int idle = 1;
  const int *flag = handle ? handle : &idle;
  for (int i = 0; i < 5000 && __atomic_load_n(flag, __ATOMIC_ACQUIRE) == 0; i++)
    usleep(1000);
  if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) == 0)
    return wt_status_new(WT_DEADLINE_EXCEEDED, "fake %s never completed", what);
  pthread_mutex_lock(&mu);
  stats.syncs++;
  pthread_mutex_unlock(&mu);
  return NULL;
}

static wt_status *f_stream_synchronize(void *stream) {
  return f_sync(stream, "stream");
}

static wt_status *f_event_synchronize(void *event) {
  return f_sync(event, "event");
}

/* --- IPC and asynchronous copies ------------------------------------------
 * A fake export's handle names the allocation (its address, size and a
 * generation, behind a magic), so that opening it in this process finds
 * the same memory; an allocation freed since (its trainer "died") no
 * longer opens, and copies out of a mapping of it fail. Copies land at
 * once; a stream reports them done unless fake_cuda_hold_copies holds
 * every stream "busy". */

typedef struct fake_handle {
  char magic[8]; /* "wtfkipc" */
  uint64_t dev;
  uint64_t len;
  uint64_t gen;
  /* Another process opens the memfd through /proc/PID/fd/FD, as a real
   * handle opens the allocation of another process on the same GPU. */
  int32_t pid;
  int32_t fd;
  unsigned char pad[WT_CUDA_IPC_HANDLE_BYTES - 40];
} fake_handle;

/* Another process's allocation, opened through its memfd, under mu. */
static fake_alloc *import_locked(const fake_handle *h, int device) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)h->pid, (int)h->fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat sb;
  fake_alloc *a = calloc(1, sizeof(*a));
  if (a == NULL || fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != h->len) {
    free(a);
    close(fd);
    return NULL;
  }
  a->dev = mmap(NULL, h->len, PROT_NONE, MAP_SHARED, fd, 0);
  a->mirror = mmap(NULL, h->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (a->dev == MAP_FAILED || a->mirror == MAP_FAILED) {
    if (a->dev != MAP_FAILED) munmap(a->dev, h->len);
    if (a->mirror != MAP_FAILED) munmap(a->mirror, h->len);
    free(a);
    close(fd);
    return NULL;
  }
  a->fd = fd;
  a->device = device;
  a->len = h->len;
  a->gen = h->gen;
  a->imported = 1;
  a->next = allocs;
  allocs = a;
  return a;
}

static wt_status *f_ipc_export(const void *ptr, void **base, size_t *size,
                               unsigned char handle[WT_CUDA_IPC_HANDLE_BYTES]) {
  pthread_mutex_lock(&mu);
  fake_alloc *a = alloc_of_locked(ptr, 1);
  fake_handle h;
  memset(&h, 0, sizeof(h));
  if (a != NULL) {
    memcpy(h.magic, "wtfkipc", 8);
    h.dev = (uint64_t)(uintptr_t)a->dev;
    h.len = a->len;
    h.gen = a->gen;
    h.pid = (int32_t)getpid();
    h.fd = a->fd;
    *base = a->dev;
    *size = a->len;
    stats.ipc_exports++;
  }
  pthread_mutex_unlock(&mu);
  if (a == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "fake cuMemGetAddressRange(%p): not device memory",
                         ptr);
  memcpy(handle, &h, sizeof(h));
  return NULL;
}

static wt_status *f_ipc_open(
    int device, const unsigned char handle[WT_CUDA_IPC_HANDLE_BYTES],
    void **base) {
  wt_status *st = bound(device, "cudaIpcOpenMemHandle");
  if (st != NULL) return st;
  fake_handle h;
  memcpy(&h, handle, sizeof(h));
  pthread_mutex_lock(&mu);
  bool magic = memcmp(h.magic, "wtfkipc", 8) == 0;
  fake_alloc *a = NULL;
  if (magic && h.pid != (int32_t)getpid()) {
    a = import_locked(&h, device);
  } else if (magic) {
    a = alloc_of_locked((void *)(uintptr_t)h.dev, h.len);
    if (a != NULL && ((uint64_t)(uintptr_t)a->dev != h.dev || a->len != h.len ||
                      a->gen != h.gen))
      a = NULL;
  }
  if (a != NULL) {
    stats.ipc_opens++;
    stats.ipc_open_now++;
  } else {
    a = NULL;
  }
  pthread_mutex_unlock(&mu);
  if (a == NULL)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "fake cudaIpcOpenMemHandle: invalid resource handle "
                         "(the exporting allocation is gone)");
  *base = a->dev;
  return NULL;
}

static void f_ipc_close(int device, void *base) {
  (void)device;
  pthread_mutex_lock(&mu);
  stats.ipc_open_now--;
  for (fake_alloc **p = &allocs; *p; p = &(*p)->next) {
    fake_alloc *a = *p;
    if (a->dev != base || !a->imported) continue;
    *p = a->next; /* an import ends with its close */
    munmap(a->dev, a->len);
    munmap(a->mirror, a->len);
    close(a->fd);
    free(a);
    break;
  }
  pthread_mutex_unlock(&mu);
}

/* A created stream: the flag first (an int "done", as a test's own
 * stream), and the work other fakes (fake_nccl) have queued on it. */
typedef struct fake_copy {
  void *dst;
  const void *src;
  size_t len;
  struct fake_copy *next;
} fake_copy;

typedef struct fake_stream {
  int flag;
  int busy;
  /* Copies queued behind that work: they land, in order, once it is done
   * (a stream's order, as CUDA keeps it). */
  fake_copy *deferred, **tail;
  struct fake_stream *next; /* every created stream, for created_locked */
} fake_stream;

static fake_stream *streams;

/* `p` as a stream made by stream_create, else NULL (a test's own int flag,
 * or the default stream: nothing is queued on those). */
static fake_stream *created_locked(void *p) {
  for (fake_stream *f = streams; f != NULL; f = f->next)
    if (f == p) return f;
  return NULL;
}

static void copy_locked(void *dst, const void *src, size_t len);

static wt_status *f_stream_create(int device, void **stream) {
  wt_status *st = bound(device, "cudaStreamCreateWithFlags");
  if (st != NULL) return st;
  fake_stream *fs = calloc(1, sizeof(*fs));
  if (fs == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "fake cudaStreamCreate");
  fs->flag = 1;
  fs->tail = &fs->deferred;
  pthread_mutex_lock(&mu);
  fs->next = streams;
  streams = fs;
  pthread_mutex_unlock(&mu);
  *stream = fs;
  return NULL;
}

void fake_cuda_stream_busy(void *stream, int delta) {
  pthread_mutex_lock(&mu);
  fake_stream *fs = created_locked(stream);
  if (fs != NULL) {
    fs->busy += delta;
    while (fs->busy <= 0 && fs->deferred != NULL) {
      fake_copy *c = fs->deferred;
      fs->deferred = c->next;
      copy_locked(c->dst, c->src, c->len);
      free(c);
    }
    if (fs->deferred == NULL) fs->tail = &fs->deferred;
  }
  pthread_mutex_unlock(&mu);
}

void *fake_cuda_mirror(const void *ptr, size_t len) {
  pthread_mutex_lock(&mu);
  fake_alloc *a = alloc_of_locked(ptr, len);
  void *m = a ? a->mirror + ((const unsigned char *)ptr - a->dev) : NULL;
  pthread_mutex_unlock(&mu);
  return m;
}

static void f_stream_destroy(void *stream) {
  pthread_mutex_lock(&mu);
  fake_stream *fs = created_locked(stream);
  for (fake_stream **p = &streams; fs != NULL && *p != NULL; p = &(*p)->next)
    if (*p == fs) {
      *p = fs->next;
      break;
    }
  pthread_mutex_unlock(&mu);
  while (fs != NULL && fs->deferred != NULL) {
    fake_copy *c = fs->deferred;
    fs->deferred = c->next;
    free(c);
  }
  free(stream);
}

static void copy_locked(void *dst, const void *src, size_t len) {
  fake_alloc *d = alloc_of_locked(dst, len), *s = alloc_of_locked(src, len);
  if (d != NULL && s != NULL)
    memcpy(d->mirror + ((unsigned char *)dst - d->dev),
           s->mirror + ((const unsigned char *)src - s->dev), len);
}

static wt_status *f_copy_async(void *dst, const void *src, size_t len,
                               void *stream) {
  pthread_mutex_lock(&mu);
  fake_alloc *d = alloc_of_locked(dst, len), *s = alloc_of_locked(src, len);
  fake_stream *fs = created_locked(stream);
  if (d != NULL && s != NULL) {
    fake_copy *c = NULL;
    if (fs != NULL && fs->busy > 0 && (c = malloc(sizeof(*c))) != NULL) {
      *c = (fake_copy){dst, src, len, NULL};
      *fs->tail = c;
      fs->tail = &c->next;
    } else {
      copy_locked(dst, src, len);
    }
    stats.copies_d2d++;
  }
  pthread_mutex_unlock(&mu);
  if (d == NULL || s == NULL)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "fake cudaMemcpyAsync: %zu bytes from %p to %p: %s is "
                         "not device memory (an illegal address)",
                         len, src, dst,
                         d == NULL ? "the destination" : "the source");
  return NULL;
}

static wt_status *f_stream_query(void *stream, int *done) {
  pthread_mutex_lock(&mu);
  *done =
      !hold_copies && (stream == NULL || ((fake_stream *)stream)->busy <= 0);
  pthread_mutex_unlock(&mu);
  return NULL;
}

void fake_cuda_hold_copies(int hold) {
  pthread_mutex_lock(&mu);
  hold_copies = hold;
  pthread_mutex_unlock(&mu);
}

/* Registration only counts: emulated copies read host memory directly. */
static wt_status *f_host_register(void *ptr, size_t len, int read_only) {
  if (ptr == NULL || len == 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "fake cudaHostRegister(%p, %zu): invalid argument",
                         ptr, len);
  pthread_mutex_lock(&mu);
  stats.host_registered++;
  if (read_only) stats.host_registered_read_only++;
  pthread_mutex_unlock(&mu);
  return NULL;
}

static void f_host_unregister(void *ptr) {
  if (ptr == NULL) return;
  pthread_mutex_lock(&mu);
  stats.host_registered--;
  pthread_mutex_unlock(&mu);
}

static const wt_cuda_api fake_api = {
    .version = WT_CUDA_API_VERSION,
    .name = "fake",
    .device_count = f_device_count,
    .set_device = f_set_device,
    .get_device = f_get_device,
    .device_alloc = f_device_alloc,
    .device_free = f_device_free,
    .host_alloc = f_host_alloc,
    .host_free = f_host_free,
    .copy_to_device = f_copy_to_device,
    .copy_to_host = f_copy_to_host,
    .device_uuid = f_device_uuid,
    .stream_synchronize = f_stream_synchronize,
    .event_synchronize = f_event_synchronize,
    .ipc_export = f_ipc_export,
    .ipc_open = f_ipc_open,
    .ipc_close = f_ipc_close,
    .stream_create = f_stream_create,
    .stream_destroy = f_stream_destroy,
    .copy_async = f_copy_async,
    .stream_query = f_stream_query,
    .host_register = f_host_register,
    .host_unregister = f_host_unregister,
};

void fake_cuda_install(int devices) {
  pthread_mutex_lock(&mu);
  ndevices = devices < 1 ? 1 : devices > 8 ? 8 : devices;
  memset(&stats, 0, sizeof(stats));
  pthread_mutex_unlock(&mu);
  wt_cuda_api_override(&fake_api);
}

void fake_cuda_uninstall(void) {
  wt_cuda_api_override(NULL);
}

fake_cuda_stats fake_cuda_get_stats(void) {
  pthread_mutex_lock(&mu);
  fake_cuda_stats s = stats;
  pthread_mutex_unlock(&mu);
  return s;
}

int fake_cuda_current(void) {
  return current;
}
