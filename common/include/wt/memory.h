/* wt/memory.h: kinds of memory and the devices that hold them.
 *
 * Every buffer a param store (server) or a weight source (trainer) holds is
 * of one memory kind, allocated through that kind's table (wt_mem_ops):
 *
 *   kind     what                                      who can read it
 *   host     anonymous pages (mmap)                    this process
 *   shared   a memfd, mapped shared                    this process, and any
 *                                                      process given the fd
 *   pinned   page-locked host memory (cudaHostAlloc)   this process, DMA
 *   device   GPU memory on one device (cudaMalloc)     the GPU (copies only)
 *
 * `pinned` and `device` exist only where the CUDA module (wt/cuda.h) loads
 * and a device answers; asking for them elsewhere is an error that names the
 * kind and why it is unavailable (wt_mem_kind_available).
 *
 * The first three are host-addressable: the CPU reads and writes them
 * directly. `device` memory is reached through the kind's copies only; the
 * helpers below (wt_mem_write, wt_mem_read, wt_mem_fill, wt_mem_visit) move
 * it through a pinned bounce buffer in chunks, so that a load, a read or a
 * digest works the same for every kind and never holds a whole tensor twice
 * on the host.
 *
 * A device is "cpu" or "cuda:N" (wt_device_parse). Host kinds live on "cpu";
 * device memory on its cuda:N. Copies to and from device memory bind the
 * calling thread to that device first (wt/cuda.h), so any thread may call
 * them.
 */
#ifndef WT_MEMORY_H
#define WT_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

typedef enum wt_mem_kind {
  WT_MEM_HOST = 0,
  WT_MEM_SHARED = 1,
  WT_MEM_PINNED = 2,
  WT_MEM_DEVICE = 3,
} wt_mem_kind;

#define WT_MEM_KIND_COUNT 4
/* Sets of kinds, as engines and trainers state what they accept. */
#define WT_MEM_BIT(kind) (1u << (unsigned)(kind))
#define WT_MEM_HOST_KINDS                                \
  (WT_MEM_BIT(WT_MEM_HOST) | WT_MEM_BIT(WT_MEM_SHARED) | \
   WT_MEM_BIT(WT_MEM_PINNED))
#define WT_MEM_ALL_KINDS (WT_MEM_HOST_KINDS | WT_MEM_BIT(WT_MEM_DEVICE))

/* "host", "shared", "pinned", "device". Static; "unknown" outside the enum. */
const char *wt_mem_kind_name(wt_mem_kind kind);
/* Parses a kind's name; INVALID_ARGUMENT naming the string and the choices. */
wt_status *wt_mem_kind_parse(const char *name, wt_mem_kind *out);
/* Whether the CPU can dereference memory of `kind`. */
bool wt_mem_kind_host_addressable(wt_mem_kind kind);
/* The names of the kinds in `mask` joined by ", " into buf (cap bytes);
 * returns buf. */
const char *wt_mem_kinds_format(uint32_t mask, char *buf, size_t cap);

typedef enum wt_device_type {
  WT_DEVICE_CPU = 0,
  WT_DEVICE_CUDA = 1,
} wt_device_type;

/* A device: the host ("cpu", index 0) or one GPU ("cuda:N"). */
typedef struct wt_device {
  wt_device_type type;
  int index;
} wt_device;

#define WT_DEVICE_CPU_INIT \
  { WT_DEVICE_CPU, 0 }
/* Longest wt_device_format output plus NUL. */
#define WT_DEVICE_NAME_MAX 24

/* Parses "cpu" or "cuda:N" (N a decimal 0..1023); INVALID_ARGUMENT naming
 * the string. */
wt_status *wt_device_parse(const char *s, wt_device *out);
/* Parses a comma-separated list ("cuda:0,cuda:1"); duplicates of a GPU are
 * INVALID_ARGUMENT. The caller frees *out with free(). */
wt_status *wt_device_list_parse(const char *s, wt_device **out, size_t *n);
/* "cpu" or "cuda:N" into buf; returns buf. */
const char *wt_device_format(wt_device d, char buf[WT_DEVICE_NAME_MAX]);
bool wt_device_equal(wt_device a, wt_device b);

/* One allocation of one kind. `base` is a host address for host kinds and a
 * device address for `device`; `fd` is the memfd of `shared` (owned by the
 * region, -1 otherwise). Owned by whoever allocated it; released with
 * wt_mem_free(). */
typedef struct wt_mem_region {
  void *base;
  size_t len;
  wt_mem_kind kind;
  wt_device device;
  int fd;
} wt_mem_region;

/* One kind's table. Every entry is thread-safe. */
typedef struct wt_mem_ops {
  wt_mem_kind kind;
  const char *name;
  bool host_addressable;
  /* NULL when memory of this kind can be had on `device` here; else
   * FAILED_PRECONDITION (or INVALID_ARGUMENT for a device the kind does not
   * live on) saying why. */
  wt_status *(*available)(wt_device device);
  /* Allocates `len` bytes (zeroed, faulted in) on `device`; `what` names the
   * allocation in errors and, for `shared`, the memfd. */
  wt_status *(*alloc)(wt_device device, size_t len, const char *what,
                      wt_mem_region *out);
  /* Releases r (NULL base is ignored) and zeroes it. */
  void (*release)(wt_mem_region *r);
  /* Copies host bytes into [off, off + len) of r, and back out. The range
   * is the caller's to check. */
  wt_status *(*copy_in)(const wt_mem_region *r, size_t off, const void *src,
                        size_t len);
  wt_status *(*copy_out)(const wt_mem_region *r, size_t off, void *dst,
                         size_t len);
} wt_mem_ops;

/* The table of `kind` (static), or NULL outside the enum. */
const wt_mem_ops *wt_mem_ops_of(wt_mem_kind kind);

/* wt_mem_ops_of(kind)->available(device), with the kind named. */
wt_status *wt_mem_kind_available(wt_mem_kind kind, wt_device device);

/* Allocates through the kind's table; a region of 0 bytes has a NULL base.
 * Errors name `what`, the kind and the device. */
wt_status *wt_mem_alloc(wt_mem_kind kind, wt_device device, size_t len,
                        const char *what, wt_mem_region *out);
/* Releases a region from wt_mem_alloc and zeroes it (fd -1). NULL and an
 * empty region are ignored. */
void wt_mem_free(wt_mem_region *r);

/* A pinned host buffer through which non-host-addressable memory is copied
 * in chunks. Owned by the caller; one user at a time. */
typedef struct wt_mem_bounce {
  void *buf;
  size_t cap;
} wt_mem_bounce;

/* Chunk size of the bounce buffers the helpers allocate themselves. */
#define WT_MEM_BOUNCE_BYTES ((size_t)8 << 20)

/* Allocates a pinned bounce buffer of `cap` bytes (CUDA's page-locked memory;
 * FAILED_PRECONDITION where CUDA is unavailable). */
wt_status *wt_mem_bounce_init(wt_mem_bounce *b, size_t cap);
void wt_mem_bounce_free(wt_mem_bounce *b);

/* Produces bytes [pos, pos + len) of a range into buf. */
typedef wt_status *(*wt_mem_fill_fn)(void *arg, uint64_t pos, void *buf,
                                     size_t len);
/* Consumes bytes [pos, pos + len) of a range from buf. */
typedef wt_status *(*wt_mem_visit_fn)(void *arg, uint64_t pos, const void *buf,
                                      size_t len);

/* Fills [off, off + len) of r with `fill`: in place, in one call, for a
 * host-addressable kind; otherwise chunk by chunk into the bounce buffer
 * `b` (NULL: one allocated for the call), each chunk copied in after it is
 * produced. OUT_OF_RANGE when the range is outside r. */
wt_status *wt_mem_fill(const wt_mem_region *r, size_t off, size_t len,
                       wt_mem_fill_fn fill, void *arg, wt_mem_bounce *b);
/* Hands [off, off + len) of r to `visit` in order: in place, in one call,
 * for a host-addressable kind; otherwise copied out chunk by chunk through
 * the bounce buffer (as above). */
wt_status *wt_mem_visit(const wt_mem_region *r, size_t off, size_t len,
                        wt_mem_visit_fn visit, void *arg, wt_mem_bounce *b);
/* Copies host bytes into [off, off + len) of r (through `b` for device
 * memory), and out of it. */
wt_status *wt_mem_write(const wt_mem_region *r, size_t off, const void *src,
                        size_t len, wt_mem_bounce *b);
wt_status *wt_mem_read(const wt_mem_region *r, size_t off, void *dst,
                       size_t len, wt_mem_bounce *b);

/* Copies between host memory and memory of `kind` at `ptr` on `device`
 * (for tensors that are not in a region: a trainer's device tensors). Host
 * kinds: memcpy. */
wt_status *wt_mem_copy_to_host(wt_mem_kind kind, wt_device device, void *dst,
                               const void *ptr, size_t len);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_MEMORY_H */
