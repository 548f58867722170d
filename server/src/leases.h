/* leases.h: consumers' leases on committed versions, and the rule that lets
 * a round write (issue #21, the inference-side export; the socket that hands
 * them out builds on this). Private to libwt_server.
 *
 * A lease pins the bytes of the version it was taken on. A round waits,
 * with a deadline, until no lease pins bytes it may write: with shadow
 * staging those are the versions older than the live one (a round writes,
 * tensor by tensor, the copy that is not live, which holds an older
 * version's bytes; a lease on the live version never delays a round), with
 * in-place staging every version (every lease delays the next round's
 * first write). While a round waits, new leases it waits for are refused,
 * so that readers arriving one after another cannot hold a writer off for
 * ever. Consumers are bounded: leases per consumer and in all.
 *
 * Thread-safe: every function takes the table's own lock. */
#ifndef WT_SERVER_LEASES_H
#define WT_SERVER_LEASES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/status.h"
#include "wt/visibility.h"

#define WT_LEASES_DEFAULT_MAX_TOTAL 1024
#define WT_LEASES_DEFAULT_MAX_PER_CONSUMER 16

typedef struct wt_leases wt_leases;

/* Zero means the default for each. */
typedef struct wt_lease_limits {
  uint32_t max_total;
  uint32_t max_per_consumer;
} wt_lease_limits;

/* Who holds a lease, for errors and GetServerInfo. */
typedef struct wt_lease_info {
  uint64_t id;
  uint64_t consumer; /* the caller's id of the consumer (its connection) */
  int pid;           /* the consumer's process (SO_PEERCRED), 0: unknown */
  unsigned uid;
  uint64_t sequence; /* the version's commit sequence */
  char version[128]; /* its name, cut to fit */
  int64_t since_unix_ms;
} wt_lease_info;

/* The caller owns *out (wt_leases_free). `limits` may be NULL. */
WT_HIDDEN wt_status *wt_leases_new(const wt_lease_limits *limits,
                                   wt_leases **out);
/* Frees the table; a wait still running must have returned. NULL is
 * ignored. */
WT_HIDDEN void wt_leases_free(wt_leases *t);

/* A lease for `consumer` on version (sequence, name); its id (random,
 * never 0) in *id. RESOURCE_EXHAUSTED naming the limit when the consumer or
 * the table holds its most; UNAVAILABLE when a round waits for leases on
 * that version to end (acquire again once it committed). */
WT_HIDDEN wt_status *wt_leases_take(wt_leases *t, uint64_t consumer, int pid,
                                    unsigned uid, uint64_t sequence,
                                    const char *version, uint64_t *id);

/* Ends lease `id` of `consumer`; NOT_FOUND (naming the id) when that
 * consumer holds no such lease, another consumer's included. */
WT_HIDDEN wt_status *wt_leases_drop(wt_leases *t, uint64_t consumer,
                                    uint64_t id);

/* How many leases `consumer` holds. */
WT_HIDDEN size_t wt_leases_held_by(wt_leases *t, uint64_t consumer);

/* Ends every lease of `consumer` (it closed its connection or died);
 * returns how many. */
WT_HIDDEN size_t wt_leases_drop_consumer(wt_leases *t, uint64_t consumer);

/* Waits until no lease is on a version of sequence below `below`
 * (UINT64_MAX: any version), refusing such leases meanwhile. NULL once
 * there is none; FAILED_PRECONDITION at `deadline_ms` (monotonic ms) naming
 * the holder of the oldest (pid, uid, since when, which version) and
 * `option` (what lengthens the wait); CANCELLED when `cancelled(arg)` (may
 * be NULL; polled every 20 ms, without the table's lock) says so. One
 * writer at a time. */
WT_HIDDEN wt_status *wt_leases_wait_free(wt_leases *t, uint64_t below,
                                         int64_t deadline_ms,
                                         const char *option,
                                         bool (*cancelled)(void *arg),
                                         void *arg);

/* Whether a lease is on a version of sequence below `below` (the oldest
 * such into *holder, may be NULL): a round checks it under the server's
 * lock, where acquires take their leases, right before it begins. */
WT_HIDDEN bool wt_leases_any_below(wt_leases *t, uint64_t below,
                                   wt_lease_info *holder);

/* Leases held now: up to `cap` of them into out[], the oldest first;
 * returns how many there are in all. */
WT_HIDDEN size_t wt_leases_list(wt_leases *t, wt_lease_info *out, size_t cap);

#endif /* WT_SERVER_LEASES_H */
