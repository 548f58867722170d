/* wt/param_store.h: the parameters one worker holds, in one kind of memory
 * (wt/memory.h), and the staging of a round's new bytes.
 *
 * A store has a fixed list of tensors (name, dtype, shape), set when it is
 * created and never changed: a round replaces bytes, not layout. Memory is
 * one region per buffer set, allocated through the store's memory kind
 * (host, shared, pinned or device, on the store's device), each tensor 64-byte
 * aligned in it, all faulted in at creation (huge pages where the kernel
 * allows), so that a round copies at memory speed from the first one and a
 * host short of memory fails at start rather than in the middle of a round.
 * Loading, reading and digesting go through the kind: device memory is
 * copied through a pinned bounce buffer in chunks.
 *
 * Staging decides what readers see while a round runs:
 *  - shadow: every tensor has two buffers, the live one and a spare. A round
 *    writes the spare of each tensor it touches; commit flips the touched
 *    tensors under the write lock, so readers see either the old or the new
 *    version of the round's tensors, never a mix; abort forgets the touched
 *    set (no copy: the live bytes were never written). Twice the memory.
 *  - inplace: a round writes the live buffers. From the first byte written
 *    until a commit, the store is incomplete (wt_param_store_complete() is
 *    false) and readers may see torn bytes. After an abort it stays
 *    incomplete until a later round rewrote and committed every tensor that
 *    the aborted round touched.
 *
 * Threads: the round functions (begin, stage, staged, check, commit, abort)
 * are called by one writer at a time, which the caller serialises (a
 * worker's own thread, wt/worker.h). Readers bracket their reads with
 * wt_param_store_read_lock/_unlock (a read lock that only a commit's flip
 * takes exclusively, so a reader never waits for a round to send its bytes,
 * only for a flip) and may run on any thread.
 */
#ifndef WT_PARAM_STORE_H
#define WT_PARAM_STORE_H

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

typedef enum wt_staging {
  WT_STAGING_SHADOW = 0,
  WT_STAGING_INPLACE = 1,
} wt_staging;

/* "shadow", "inplace". Static; NULL outside the enum. */
const char *wt_staging_name(wt_staging staging);
/* Parses "shadow" / "inplace". Unknown: INVALID_ARGUMENT naming the string
 * and the choices. */
wt_status *wt_staging_parse(const char *name, wt_staging *out);

typedef struct wt_param_store wt_param_store;

/* Embedding, the other way round (docs/embedding.md): an engine that links
 * libwt_server gives a store its own memory, so rounds land in the
 * engine's buffers with no copy and no socket, and learns of each commit.
 * The layout is wt's: one buffer per set holding every tensor at the
 * 64-byte aligned offset wt_param_store_locate() says (the same offsets in
 * both sets). An engine whose weights are fused or sharded does not hand
 * those over: it gives wt flat buffers and, in on_commit, does its own
 * load_weights from them (the names, dtypes, shapes and pointers are the
 * store's: wt_param_store_meta and wt_param_store_live). */
typedef struct wt_store_embedding {
  /* Gives the store `nsets` buffers (1 in place, 2 shadow) of `set_bytes`
   * each, 64-byte aligned, of the config's memory kind on its device
   * (host, pinned or device memory; a memfd's `shared` kind is the
   * server's own), into out[0..nsets). They stay the caller's: the store
   * writes the model into them at creation and every round after, and
   * never frees them. Called once, from wt_param_store_new; an error ends
   * the creation with it. `store` is the store's name ("worker-0"). */
  wt_status *(*buffers)(void *user, const char *store, uint64_t set_bytes,
                        int nsets, void *out[2]);
  /* Called by wt_param_store_destroy (or a failed creation) once the store
   * no longer touches the buffers: the caller may free them. May be NULL. */
  void (*release)(void *user, const char *store, void *bufs[2], int nsets);
  /* Called after every commit on the thread that commits (a worker's),
   * shadow staging with the store's write lock held, so no reader sees the
   * flip half done: which set is live is per tensor
   * (wt_param_store_locate). It must be short, and must not call what
   * takes the store's lock (read, digest, hash_part, read_lock); the
   * layout functions and wt_param_store_live are fine. May be NULL. */
  void (*on_commit)(void *user, wt_param_store *s);
  void *user;
} wt_store_embedding;

/* How a store holds its bytes. Zero is the default of every field: shadow
 * staging in host memory on the cpu. */
typedef struct wt_store_config {
  wt_staging staging;
  wt_mem_kind memory; /* wt/memory.h; `device` needs a cuda:N device */
  wt_device device;   /* where the memory is: cpu, or cuda:N */
  const char *name;   /* names the store in errors and its memfds; NULL: "" */
  /* NULL: the store allocates its memory. Else the caller's (borrowed;
   * must outlive the store). */
  const wt_store_embedding *embed;
} wt_store_config;

/* A store for `metas[0..n)` (copied; names must be unique, else
 * INVALID_ARGUMENT naming the duplicate) with every byte zero, held as `cfg`
 * says (NULL: the defaults). A memory kind unavailable on the device is
 * FAILED_PRECONDITION naming the kind and why. The caller owns *out and
 * releases it with wt_param_store_destroy(), on a thread that may use the
 * store's device. */
wt_status *wt_param_store_new(const wt_tensor_meta *metas, size_t n,
                              const wt_store_config *cfg, wt_param_store **out);

/* A store holding synthetic layout `layout` filled for `seed`
 * (wt/synthetic.h). */
wt_status *wt_param_store_from_synthetic(const char *layout, uint64_t seed,
                                         const wt_store_config *cfg,
                                         wt_param_store **out);

/* A store holding a copy of every tensor of `ck`, in the checkpoint's order;
 * `ck` may be closed afterwards. */
wt_status *wt_param_store_from_checkpoint(const wt_checkpoint *ck,
                                          const wt_store_config *cfg,
                                          wt_param_store **out);

/* Frees the store and its buffers. NULL is ignored. No round function and no
 * reader may be running. */
void wt_param_store_destroy(wt_param_store *s);

/* --- layout (immutable; any thread) --------------------------------------- */

size_t wt_param_store_count(const wt_param_store *s);
/* Metadata of tensor `i` (< count), owned by the store. */
const wt_tensor_meta *wt_param_store_meta(const wt_param_store *s, size_t i);
/* Sum of every tensor's nbytes (one version; shadow holds twice this). */
uint64_t wt_param_store_total_bytes(const wt_param_store *s);
wt_staging wt_param_store_staging(const wt_param_store *s);
/* The config's name ("" when none), owned by the store. */
const char *wt_param_store_name(const wt_param_store *s);
wt_mem_kind wt_param_store_memory(const wt_param_store *s);
wt_device wt_param_store_device(const wt_param_store *s);
/* Bytes of memory the store's regions hold (shadow: both buffer sets). */
uint64_t wt_param_store_bytes_held(const wt_param_store *s);
/* Index of `name` in *idx, or NOT_FOUND "parameter 'x' is not in the model". */
wt_status *wt_param_store_find(const wt_param_store *s, const char *name,
                               size_t *idx);

/* One allocation that holds buffers: every pointer wt_param_store_stage()
 * returns lies in one of the store's regions, with its nbytes. A region
 * carries its kind, device and (shared memory) memfd. Fixed from creation
 * to destroy. */
typedef wt_mem_region wt_param_region;

#define WT_PARAM_STORE_MAX_REGIONS 2

/* The store's regions, for an engine that registers the staging memory
 * once (e.g. ucp_mem_map) instead of per round, and for a reader that maps
 * a shared store: two for shadow staging (one per buffer set), one for
 * inplace, none for an empty model. Writes out[0..n) (copies: the memory,
 * and a memfd, stay owned by the store and valid until
 * wt_param_store_destroy()) and returns n. */
size_t wt_param_store_regions(const wt_param_store *s,
                              wt_param_region out[WT_PARAM_STORE_MAX_REGIONS]);

/* --- a round (one writer at a time) -------------------------------------- */

/* Starts a round: forgets anything staged by an earlier round that neither
 * committed nor aborted. */
void wt_param_store_begin(wt_param_store *s);

/* The buffer a round writes tensor `i`'s nbytes into: the spare (shadow) or
 * the live buffer (inplace); a device address for device memory. Marks the
 * tensor as being written (partial) until wt_param_store_staged(), even when
 * it was staged earlier in this round, because its bytes are being
 * replaced; inplace, marks the store incomplete. The pointer is valid until
 * the round commits or aborts. */
void *wt_param_store_stage(wt_param_store *s, size_t i);

/* Copies host bytes src[0..len) to offset `offset` of tensor `i`'s staging
 * buffer (staged with wt_param_store_stage in this round): a memcpy for
 * host memory, the kind's copy for device memory. OUT_OF_RANGE naming the
 * parameter when the range is outside the tensor. */
wt_status *wt_param_store_stage_write(wt_param_store *s, size_t i,
                                      uint64_t offset, const void *src,
                                      size_t len);

/* Records that every byte of tensor `i` landed in its staging buffer. */
void wt_param_store_staged(wt_param_store *s, size_t i);

/* Records that a box of `bytes` bytes of tensor `i` (staged with
 * wt_param_store_stage in this round) landed: the tensor is staged once
 * its boxes' bytes add up to its nbytes. The caller lands each byte once
 * (a shard plan's boxes do not overlap, docs/multirank.md). */
void wt_param_store_staged_part(wt_param_store *s, size_t i, uint64_t bytes);

/* Counts of the current round: tensors staged (all bytes landed), tensors
 * partly written, and the staged tensors' bytes. Any pointer may be NULL. */
void wt_param_store_round_stats(const wt_param_store *s, size_t *staged,
                                size_t *partial, uint64_t *staged_bytes);

/* FAILED_PRECONDITION naming the first partly written tensor (its bytes are
 * not all there, so committing would serve a torn tensor); NULL when the
 * round can commit. Changes nothing. */
wt_status *wt_param_store_check_commit(const wt_param_store *s);

/* Makes every staged tensor live (shadow: flips them under the write lock)
 * and ends the round. Partly written tensors are dropped (call
 * wt_param_store_check_commit() first to refuse them). Inplace, the store is
 * complete again once no tensor is left dirty by an aborted round. */
void wt_param_store_commit(wt_param_store *s);

/* The same commit in steps, for a caller that must not block while holding
 * a lock of its own: wt_param_store_write_lock() waits for readers (a long
 * checksum) to leave, wt_param_store_commit_locked() commits under it (never
 * blocks), wt_param_store_write_unlock() lets readers in again. */
void wt_param_store_write_lock(wt_param_store *s);
void wt_param_store_commit_locked(wt_param_store *s);
void wt_param_store_write_unlock(wt_param_store *s);

/* Ends the round without changing what readers see (shadow). Inplace, every
 * tensor the round wrote into stays dirty and the store incomplete. */
void wt_param_store_abort(wt_param_store *s);

/* --- readers (any thread) ------------------------------------------------ */

/* False while an inplace round is writing, and after an inplace round was
 * aborted with bytes written (until repaired, see above). Always true for
 * shadow staging. */
bool wt_param_store_complete(const wt_param_store *s);

/* How many commits the store has seen: a reader that takes the read lock
 * more than once (one tensor at a time, so that a commit never waits long)
 * compares it to know its reads describe one version. Any thread. */
uint64_t wt_param_store_commits(const wt_param_store *s);

/* A read lock on the committed bytes: between the two calls,
 * wt_param_store_live() pointers stay valid and their bytes do not change
 * (shadow staging). */
void wt_param_store_read_lock(wt_param_store *s);
void wt_param_store_read_unlock(wt_param_store *s);

/* The committed bytes of tensor `i` (a device address for device memory);
 * only under the read lock. */
const void *wt_param_store_live(const wt_param_store *s, size_t i);

/* Where tensor `i`'s committed bytes are: region *region (an index into
 * wt_param_store_regions) at byte *offset. Only under the read lock: a
 * shadow commit moves it to the other buffer set. */
void wt_param_store_locate(const wt_param_store *s, size_t i, size_t *region,
                           uint64_t *offset);

/* Copies bytes [offset, offset + len) of tensor `i`'s committed contents
 * into host memory buf, under the read lock (through the kind's copies for
 * device memory). Out of range: OUT_OF_RANGE naming the parameter. */
wt_status *wt_param_store_read(wt_param_store *s, size_t i, uint64_t offset,
                               void *buf, size_t len);

/* Digest of tensor `i`'s committed bytes; only under the read lock, so that
 * a caller digesting many tensors sees one version of all of them. Device
 * memory is copied through the store's pinned bounce buffer in chunks
 * (digests of one store then take turns). */
wt_status *wt_param_store_digest(wt_param_store *s, size_t i, wt_hash_alg alg,
                                 char hex[WT_DIGEST_HEX_MAX]);

/* Feeds bytes [offset, offset + len) of tensor `i`'s committed contents to
 * `h`, under the read lock (a caller hashing a large tensor in parts holds
 * the lock per part, so a commit waits for one part, not a tensor, and
 * checks wt_param_store_commits between parts). OUT_OF_RANGE naming the
 * parameter when the range is not inside it. */
wt_status *wt_param_store_hash_part(wt_param_store *s, size_t i,
                                    uint64_t offset, size_t len, wt_hasher *h);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_PARAM_STORE_H */
