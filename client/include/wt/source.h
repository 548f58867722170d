/* wt/source.h: weight sources, the trainer's iterator of tensors.
 *
 * A source declares its metadata (name, dtype, shape of every tensor, in
 * order) up front and then yields the tensors one by one, in that order,
 * each round afresh (wt_source_rewind). This is vLLM's pair of a metadata
 * list and a `(name, tensor)` iterator. A yielded tensor either points at its
 * bytes (`data`, contiguous, valid until the source is destroyed) or has
 * `data == NULL` and produces any byte range on demand (wt_source_read), which
 * lets a synthetic source stream a tensor in chunks without holding it.
 *
 * Every yield is checked against the declared metadata: a tensor out of
 * order, with another dtype or shape, or with a byte count that differs from
 * dtype x shape, is INVALID_ARGUMENT naming the tensor. wt_source_validate()
 * runs that check over a whole round before a trainer sends any byte, so
 * yielding must be cheap (hand out pointers, do not compute tensors).
 *
 * Memory: a yielded tensor says where its bytes are (kind and device,
 * wt/memory.h): host memory by default, or GPU memory (a PyTorch or JAX
 * trainer handing over data_ptr()s), optionally with the CUDA stream or
 * event after which the bytes are ready (wt_source_tensor_ready waits for
 * it). A backend states which kinds it sends from (wt_trainer_ops
 * .memory_kinds); wt_source_validate_for refuses the others before a byte
 * moves, naming the tensor.
 *
 * A source is not thread-safe: one round iterates it from one thread.
 */
#ifndef WT_SOURCE_H
#define WT_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/checksum.h"
#include "wt/memory.h"
#include "wt/safetensors.h"
#include "wt/status.h"
#include "wt/tensor.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

typedef struct wt_source wt_source;

/* One tensor as a source yields it (and as wt_source_memory takes it). The
 * strings, shape and data belong to whoever yields it and stay valid until
 * the next yield (data: until the source is destroyed). */
typedef struct wt_source_tensor {
  const char *name;
  wt_dtype dtype;
  int ndim;
  const int64_t *shape;
  /* `nbytes` contiguous bytes, or NULL: bytes come from wt_source_read. */
  const void *data;
  uint64_t nbytes;
  /* Where `data` is: host memory (zero) by default; WT_MEM_DEVICE on
   * `device` (cuda:N) for a GPU tensor. */
  wt_mem_kind kind;
  wt_device device;
  /* Optional cudaStream_t / cudaEvent_t after which the bytes are ready
   * (the event wins when both are set); NULL: ready now. Borrowed. */
  void *cuda_stream;
  void *cuda_event;
} wt_source_tensor;

/* What a source implementation provides (wt_source_new). */
typedef struct wt_source_vtable {
  /* Names the kind of source in messages: "checkpoint", "memory", ... */
  const char *kind;
  /* Starts the iteration over from the first tensor. */
  wt_status *(*rewind)(void *impl);
  /* Yields the next tensor into *t, or sets *done at the end. */
  wt_status *(*next)(void *impl, wt_source_tensor *t, bool *done);
  /* Writes bytes [offset, offset + len) of the tensor last yielded (whose
   * `data` was NULL) into buf. NULL when every tensor has `data`. */
  wt_status *(*read)(void *impl, const wt_source_tensor *t, uint64_t offset,
                     void *buf, size_t len);
  /* Releases `impl`. May be NULL. */
  void (*destroy)(void *impl);
} wt_source_vtable;

/* Creates a source over an implementation. `vt` must outlive the source;
 * `metas[0..n)` is copied; ownership of `impl` passes to the source in every
 * case (on error vt->destroy(impl) has already run). Duplicate names are
 * INVALID_ARGUMENT. The caller owns *out (wt_source_destroy()). */
wt_status *wt_source_new(const wt_source_vtable *vt, void *impl,
                         const wt_tensor_meta *metas, size_t n,
                         wt_source **out);

/* A source over a checkpoint, in the checkpoint's order, whose tensors point
 * into its read-only mapping (zero copy). `ck` is borrowed and must outlive
 * the source. The caller owns *out. */
wt_status *wt_source_checkpoint(const wt_checkpoint *ck, wt_source **out);

/* Opens `path` (a .safetensors file or a sharded *.safetensors.index.json)
 * with wt_checkpoint_open() and returns a source that owns the checkpoint. */
wt_status *wt_source_checkpoint_open(const char *path, wt_source **out);

/* A source over tensors in memory, in array order, each of its own kind
 * and device (a trainer's GPU tensors: WT_MEM_DEVICE on cuda:N, with their
 * stream or event). Names and shapes are copied; the data (and streams,
 * events) are borrowed and must outlive the source. A NULL `data`, an
 * `nbytes` that is not dtype x shape, or device memory on a cpu device is
 * INVALID_ARGUMENT naming the tensor. The caller owns *out. */
wt_status *wt_source_memory(const wt_source_tensor *tensors, size_t n,
                            wt_source **out);

/* A source over the synthetic layout `layout` (see wt/synthetic.h) whose
 * bytes are wt_synthetic_fill(seed): nothing is held, every range is
 * produced on demand. Unknown layout: NOT_FOUND listing the names. The
 * caller owns *out. */
wt_status *wt_source_synthetic(const char *layout, uint64_t seed,
                               wt_source **out);

/* Changes the seed of a synthetic source for the next round.
 * FAILED_PRECONDITION for any other source. */
wt_status *wt_source_synthetic_set_seed(wt_source *src, uint64_t seed);

/* Releases the source (and what it owns). NULL is ignored. */
void wt_source_destroy(wt_source *src);

/* The declared metadata, owned by the source; *n set to its length. */
const wt_tensor_meta *wt_source_metas(const wt_source *src, size_t *n);
size_t wt_source_count(const wt_source *src);
uint64_t wt_source_total_bytes(const wt_source *src);
/* "checkpoint", "memory", "synthetic", or the vtable's kind. Static. */
const char *wt_source_kind(const wt_source *src);

/* Starts a round: the next wt_source_next yields the first tensor. */
wt_status *wt_source_rewind(wt_source *src);

/* Yields the next tensor into *t (sets *done false), or sets *done true after
 * the last one. Checks the tensor against the metadata (see above); a source
 * that ends early or yields more than declared is INVALID_ARGUMENT too. */
wt_status *wt_source_next(wt_source *src, wt_source_tensor *t, bool *done);

/* Copies bytes [offset, offset + len) of `t`, the tensor last yielded, into
 * host memory buf (through CUDA for a device tensor). A range beyond the
 * tensor is OUT_OF_RANGE naming it. */
wt_status *wt_source_read(wt_source *src, const wt_source_tensor *t,
                          uint64_t offset, void *buf, size_t len);

/* The GPU a device backend works on for `src`: its first tensor's, when
 * that is in device memory; else the calling thread's CUDA device (as
 * torch.cuda.current_device()). Rewinds src. */
wt_status *wt_source_gpu(wt_source *src, int *device);

/* Waits until `t`'s bytes are ready (its CUDA event, else its stream; no-op
 * without either). Backends call it before reading a tensor. */
wt_status *wt_source_tensor_ready(const wt_source_tensor *t);

/* Sets *data to `t`'s bytes in host memory: t->data itself when it is
 * host-addressable, or a buffer owned by the source (reused, valid until the
 * next call or the source's destruction) filled with wt_source_read. For
 * backends that need a tensor contiguous. */
wt_status *wt_source_tensor_data(wt_source *src, const wt_source_tensor *t,
                                 const void **data);

/* Iterates one whole round, checking every yield, then rewinds. */
wt_status *wt_source_validate(wt_source *src);

/* As wt_source_validate, and every tensor's memory must be of a kind in
 * `kinds` (WT_MEM_BIT set): else INVALID_ARGUMENT naming the tensor, its
 * memory, `backend` and the kinds it sends from. */
wt_status *wt_source_validate_for(wt_source *src, uint32_t kinds,
                                  const char *backend);

/* Digests of every tensor's bytes in metadata order, computed locally: sets
 * *digests to a malloc'd array of wt_source_count() strings of
 * WT_DIGEST_HEX_MAX bytes each (free() it). Rewinds before and after. */
wt_status *wt_source_checksums(wt_source *src, wt_hash_alg alg,
                               char (**digests)[WT_DIGEST_HEX_MAX]);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_SOURCE_H */
