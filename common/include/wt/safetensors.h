/* wt/safetensors.h: reading and writing safetensors checkpoints.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON header, then
 * the data region. The reader maps the file (mmap, read-only) and validates
 * the header strictly before handing out any tensor: length within the file
 * and at most WT_SAFETENSORS_MAX_HEADER, valid JSON object, known dtypes,
 * data_offsets in range, non-overlapping and together covering the whole
 * data region, shape x itemsize == byte length; `__metadata__` (string to
 * string) is allowed. Every error is INVALID_ARGUMENT (or an errno status for
 * I/O) with a message naming the file and the tensor or field at fault.
 *
 * Tensors are presented in data-offset order (the file's layout order).
 */
#ifndef WT_SAFETENSORS_H
#define WT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "wt/status.h"
#include "wt/tensor.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* Largest JSON header accepted (the reference implementation's cap). */
#define WT_SAFETENSORS_MAX_HEADER (100u * 1000u * 1000u)

typedef struct wt_st_tensor {
  wt_tensor_meta meta; /* name, dtype, shape, nbytes */
  uint64_t offset;     /* start within the data region */
  const void *data;    /* meta.nbytes bytes, inside the mapping */
} wt_st_tensor;

typedef struct wt_safetensors wt_safetensors;

/* Opens and validates `path`. The caller owns *out (close with
 * wt_safetensors_close()); tensor data stays valid until then. */
wt_status *wt_safetensors_open(const char *path, wt_safetensors **out);

/* Same over a caller-owned buffer (not copied; must outlive *out). `what`
 * names the buffer in error messages (NULL: "buffer"). Used by fuzzing. */
wt_status *wt_safetensors_open_buffer(const void *data, size_t len,
                                      const char *what, wt_safetensors **out);

size_t wt_safetensors_count(const wt_safetensors *f);
/* i-th tensor in data-offset order; owned by `f`. NULL if out of range. */
const wt_st_tensor *wt_safetensors_at(const wt_safetensors *f, size_t i);
/* Tensor by name, owned by `f`; NULL if absent. */
const wt_st_tensor *wt_safetensors_find(const wt_safetensors *f,
                                        const char *name);
/* Value of `__metadata__[key]`, owned by `f`; NULL if absent. */
const char *wt_safetensors_metadata(const wt_safetensors *f, const char *key);
/* Unmaps and frees. NULL is ignored. */
void wt_safetensors_close(wt_safetensors *f);

/* A tensor to write: borrowed by wt_safetensors_write for the call only. */
typedef struct wt_st_write_tensor {
  const char *name;
  wt_dtype dtype;
  int ndim;
  const int64_t *shape;
  const void *data; /* numel x itemsize bytes */
} wt_st_write_tensor;

/* Writes `n` tensors to `path` (atomically: a temporary file renamed into
 * place) in the order given, header padded with spaces to 8 bytes as the
 * reference writer does. `metadata` is NULL or a NULL-terminated array of
 * key, value, key, value, ... strings for `__metadata__`. Duplicate names are
 * INVALID_ARGUMENT. */
wt_status *wt_safetensors_write(const char *path,
                                const wt_st_write_tensor *tensors, size_t n,
                                const char *const *metadata);

/* A checkpoint: one .safetensors file, or a sharded checkpoint through its
 * `*.safetensors.index.json` (`weight_map`: tensor name -> shard file,
 * relative to the index's folder). Every tensor the index names must be in
 * the shard it names, and every shard tensor must be in the index; a name in
 * two shards is INVALID_ARGUMENT. Tensors are presented shard by shard
 * (shards in sorted file-name order), each shard in data-offset order. */
typedef struct wt_checkpoint wt_checkpoint;

/* The caller owns *out (close with wt_checkpoint_close()). */
wt_status *wt_checkpoint_open(const char *path, wt_checkpoint **out);
size_t wt_checkpoint_count(const wt_checkpoint *c);
const wt_st_tensor *wt_checkpoint_at(const wt_checkpoint *c, size_t i);
const wt_st_tensor *wt_checkpoint_find(const wt_checkpoint *c,
                                       const char *name);
uint64_t wt_checkpoint_total_bytes(const wt_checkpoint *c);
void wt_checkpoint_close(wt_checkpoint *c);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_SAFETENSORS_H */
