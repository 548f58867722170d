/* wt/delta_state.h: what the trainer engines that send delta rounds (grpc,
 * ucx; docs/delta.md) keep between rounds: the mode, the base copy and its
 * digest, the codec, and delta=auto's measurements. Not installed. */
#ifndef WT_DELTA_STATE_H
#define WT_DELTA_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "wt/delta.h"
#include "wt/tensor.h"
#include "wt/visibility.h"

WT_API_BEGIN

enum { WT_DELTA_OFF, WT_DELTA_ON, WT_DELTA_AUTO };
/* delta=auto tries the other way this often, so that a changed link or
 * update is noticed. */
#define WT_DELTA_PROBE_ROUNDS 16

typedef struct wt_delta_state {
  int mode;            /* WT_DELTA_* */
  unsigned char *base; /* the bytes last sent, plan order; base_bytes long */
  uint64_t base_bytes;
  uint64_t base_layout; /* digest of the names and sizes they were sent as */
  uint64_t base_digest; /* of base; 0: base holds no complete round */
  wt_delta_hasher *hash;
  wt_delta_codec *codec;
  /* auto: nanoseconds per byte of the model, last measured each way */
  double full_ns, delta_ns;
  unsigned since_probe;
  uint64_t rounds; /* measured so far (wt_delta_measured) */
} wt_delta_state;

/* Reads `mode` ("", "off", "on", "auto"; INVALID_ARGUMENT naming `field`
 * otherwise) and, unless off, makes the digest and the codec. The caller
 * frees with wt_delta_state_clear (also after a failure). */
wt_status *wt_delta_state_init(wt_delta_state *d, const char *mode,
                               const char *field);
void wt_delta_state_clear(wt_delta_state *d);

/* The trainer option delta=on|off|auto (wt-push --delta) into its init
 * info's string field *field (replaced; freed with the init info):
 * INVALID_ARGUMENT naming the option for any other value. */
wt_status *wt_delta_option_set(const char *value, char **field);

/* A digest of a round's layout (names, dtypes, sizes in order): a base is
 * only a base for the same layout. */
uint64_t wt_delta_layout_digest(const wt_tensor_meta *metas, size_t n);

/* The base buffer for a round of `total` bytes (forgets the base when the
 * size changed); RESOURCE_EXHAUSTED naming `who` and the size. */
wt_status *wt_delta_state_reserve(wt_delta_state *d, uint64_t total,
                                  const char *who);

/* This round's way: whether to send deltas where a server holds the base
 * (*try_delta; `usable`: the base is one), and whether to keep the base for
 * the next round (*keep). delta=on always does both. delta=auto measures a
 * round each way first, then takes the faster way per byte of the last
 * rounds; every WT_DELTA_PROBE_ROUNDS it tries the other once, keeping the
 * base the round before so that the probe can be a delta. While full
 * rounds win, no base is kept: those rounds cost what delta=off costs. */
void wt_delta_plan_round(wt_delta_state *d, bool usable, bool *try_delta,
                         bool *keep);

/* A round took ns_per_byte nanoseconds per byte of the model, as a delta
 * round (`delta`) or a full one. The first round of an engine is not
 * counted: it also sets up connections (and, over ucx, their wireup),
 * which would make full rounds look slower than they are. */
void wt_delta_measured(wt_delta_state *d, bool delta, double ns_per_byte);

WT_API_END

#endif /* WT_DELTA_STATE_H */
