/* wt/consumer.h: libwt_consumer, the inference side of wt's export
 * (docs/export.md). An inference process on the server's host connects to
 * the socket `wt-server --export PATH` serves, acquires a committed
 * version and reads its tensors where the server holds them: host regions
 * mapped read-only, device regions opened through CUDA IPC. No copy, no
 * gRPC (the library links libwt_base, libwt_proto and protobuf-c only).
 *
 *   wt_consumer *c;
 *   wt_consumer_version *v;
 *   wt_consumer_connect("/run/user/1000/wt/export.sock", NULL, &c);
 *   wt_consumer_acquire(c, NULL, &v);            // the newest version
 *   for (size_t i = 0; i < v->n_tensors; i++)
 *     load(v->tensors[i].name, v->tensors[i].data, v->tensors[i].nbytes);
 *   wt_consumer_release(c, v);
 *   wt_consumer_close(c);
 *
 * Mappings are made once per region and kept across versions: the server's
 * regions are fixed for its life (two for shadow staging, one in place),
 * so the tenth acquire maps nothing and costs one round trip on the socket
 * and the manifest's parse. A host mapping may also be registered with
 * CUDA (cudaHostRegister, read-only), once, so that the consumer's copies
 * to its GPU run at pinned speed.
 *
 * A lease pins the bytes: until wt_consumer_release (or wt_consumer_close,
 * or this process's death) the tensors' bytes are those of v->version and
 * no round overwrites them. Hold a lease only as long as the load takes:
 * a lease on an older version holds back the server's next round, which
 * fails after the server's --lease-wait, naming this process.
 *
 * Threads: a wt_consumer is used by one thread at a time (the caller
 * serialises); separate consumers are independent. Errors are wt_status
 * (wt/status.h), the caller's to free, with the server's code and message
 * when the server refused (NOT_FOUND, FAILED_PRECONDITION, UNAVAILABLE,
 * RESOURCE_EXHAUSTED, OUT_OF_RANGE) and UNAVAILABLE naming the socket when
 * the connection failed; after a connection error the consumer is closed
 * for good: close it and connect again.
 */
#ifndef WT_CONSUMER_H
#define WT_CONSUMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

typedef struct wt_consumer wt_consumer;

/* Zero is the default of every field. */
typedef struct wt_consumer_options {
  /* How long one request may wait for its answer beyond what the request
   * itself asks to wait (an acquire's timeout_ms); 0: 10000 ms. */
  uint32_t reply_timeout_ms;
  /* Register each host mapping with CUDA (cudaHostRegister, portable and
   * read-only) when it is first mapped, and unregister it at close.
   * Needs the CUDA module (wt/cuda.h): FAILED_PRECONDITION saying why
   * when it is unavailable. */
  bool register_host;
  /* Who the server may be (SO_PEERCRED of the socket's other end): 0 this
   * process's user; N > 0 user N; -1 anyone. root is always accepted. A
   * socket served by anyone else is PERMISSION_DENIED naming its uid: a
   * stranger who put a socket where the consumer looks gets nothing. */
  int64_t server_uid;
  /* Never unmap a region before wt_consumer_close, even when no held
   * version points into it (by default up to 8 such are kept, the oldest
   * unmapped beyond). For a binding whose arrays may outlive a release
   * (Python's): memory an array points at stays mapped until close. With
   * it, mapping a 65th region is RESOURCE_EXHAUSTED. */
  bool keep_mappings;
} wt_consumer_options;

/* Connects to the export socket at `path` (borrowed). *out is the caller's;
 * end it with wt_consumer_close. UNAVAILABLE naming the path when nothing
 * answers there or the server closed the connection (it refuses a peer it
 * does not let in by closing it: the first acquire then says so). */
wt_status *wt_consumer_connect(const char *path,
                               const wt_consumer_options *opts,
                               wt_consumer **out);

/* Releases every lease this consumer holds (the server ends them when the
 * socket closes), unmaps and closes every region, frees `c` and every
 * wt_consumer_version not yet released (their pointers dangle after).
 * NULL is ignored. */
void wt_consumer_close(wt_consumer *c);

/* What to acquire. Zero (or NULL) is the newest committed version of
 * worker 0, answered at once. */
typedef struct wt_acquire_options {
  const char *version;     /* NULL or "": the newest; else this name, which
                              must be the one held now (NOT_FOUND otherwise) */
  uint64_t after_sequence; /* wait for a version committed after this */
  uint32_t timeout_ms;     /* how long to wait (0: answer at once) */
  uint32_t worker;         /* whose copy: a server with one worker per GPU
                              holds one on each */
} wt_acquire_options;

/* One tensor of a version. Everything is owned by its wt_consumer_version. */
typedef struct wt_consumer_tensor {
  const char *name;
  const char *dtype; /* safetensors' names: "BF16", "F32", ... */
  const int64_t *shape;
  size_t ndim;
  uint64_t nbytes;
  /* The bytes: a host address in a read-only mapping (writing faults), or
   * a device address on cuda_device in this process's numbering. */
  const void *data;
  bool on_device;
  int cuda_device; /* -1 for host tensors */
} wt_consumer_tensor;

/* A version under a lease. Owned by the consumer; valid until
 * wt_consumer_release or wt_consumer_close. */
typedef struct wt_consumer_version {
  uint64_t lease_id;
  const char *version;
  uint64_t sequence;
  int64_t committed_unix_ms;
  uint32_t worker;    /* whose copy */
  const char *device; /* the worker's device in the server's numbering */
  size_t n_tensors;
  const wt_consumer_tensor *tensors; /* in the model's order */
} wt_consumer_version;

/* Acquires a version under a lease and maps what it needs that is not yet
 * mapped (opts may be NULL: the newest of worker 0, at once). *out is
 * valid until wt_consumer_release. A consumer holds at most 16 leases at
 * once (the server's limit: RESOURCE_EXHAUSTED beyond). A device region
 * on a GPU this process cannot see is FAILED_PRECONDITION naming its UUID. */
wt_status *wt_consumer_acquire(wt_consumer *c, const wt_acquire_options *opts,
                               wt_consumer_version **out);

/* The tensor called `name` in `v`, or NULL. */
const wt_consumer_tensor *wt_consumer_find(const wt_consumer_version *v,
                                           const char *name);

/* Ends v's lease and frees v (always, even on an error: the lease then
 * ends when the connection closes). The mappings stay for later versions. */
wt_status *wt_consumer_release(wt_consumer *c, wt_consumer_version *v);

/* How many regions the consumer has mapped (host) or opened (device) since
 * it connected, and holds now: a caller (or test) sees that later versions
 * reuse them. */
void wt_consumer_region_counts(const wt_consumer *c, uint64_t *mapped,
                               size_t *held);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_CONSUMER_H */
