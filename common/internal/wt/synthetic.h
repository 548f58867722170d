/* wt/synthetic.h: built-in model layouts with deterministic contents.
 *
 * A server started with `--model synthetic:NAME` holds the layout NAME, every
 * tensor filled for seed 0. A trainer's synthetic weight source fills the same
 * layout for another seed (wt-push uses the round's sequence number), so both
 * sides can compute every expected byte and checksum without a checkpoint.
 *
 * Contents are a pure function of (tensor name, seed, byte offset): any byte
 * range can be produced independently, which lets a sender stream a tensor in
 * chunks and a verifier check a slice.
 */
#ifndef WT_SYNTHETIC_H
#define WT_SYNTHETIC_H

#include <stddef.h>
#include <stdint.h>

#include "wt/status.h"
#include "wt/tensor.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* The layout wt-server serves by default: a small Llama-like model of about
 * 256 MiB (bfloat16 weights, float32 norms). */
#define WT_SYNTHETIC_DEFAULT "llama-256m"

/* Builds the metadata of layout `name` ("llama-256m", "tiny" (a few KiB, for
 * tests), "small" (a few MiB, mixed dtypes), "bench-1g" (1 GiB, a few hundred
 * tensors, mixed bfloat16/float32)). Unknown: NOT_FOUND listing the names.
 * The caller owns *metas (free with wt_tensor_meta_array_free(*metas, *n)). */
wt_status *wt_synthetic_layout(const char *name, wt_tensor_meta **metas,
                               size_t *n);

/* NULL-terminated list of layout names. Static. */
const char *const *wt_synthetic_layout_names(void);

/* Writes bytes [offset, offset + len) of tensor `m`'s contents for `seed`
 * into buf. offset + len must not exceed m->nbytes. */
void wt_synthetic_fill(const wt_tensor_meta *m, uint64_t seed, uint64_t offset,
                       void *buf, size_t len);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_SYNTHETIC_H */
