/* wt/lock.h: wt's mutexes, each with its place in one lock order.
 *
 * Every lock of the server, the RPC layer, the backends and the client's
 * shared state is a wt_mutex (or a wt_rwlock) made with a rank from the
 * table below. A thread takes a lock only when its rank is above the rank
 * of every lock it holds; locks of one rank that one thread holds together
 * (a server's stores, which FinishWeightUpdate write-locks all at once) are
 * told apart by an index and taken in its order. With that rule no two
 * threads can each hold what the other waits for.
 *
 * The rule is checked, not hoped for: a build with WT_LOCK_CHECK (every
 * Debug build, so the sanitizer and ThreadSanitizer builds of the test
 * suite) keeps each thread's held locks and aborts on the first lock taken
 * out of order, naming both locks and the thread's held list. A deadlock
 * that needs two threads and an unlucky schedule is then caught by any
 * single run that takes the two locks the wrong way round.
 *
 * The second rule, which no checker can see, is the one the table's
 * comments state for each lock: a thread never waits for another party's
 * progress (a trainer's next message, another rank, a consumer) while it
 * holds a lock; it waits on its own condition, with a deadline, or is
 * parked (wt_rpc_call_suspend) and holds nothing. Waits for a worker's own
 * thread (local work that always ends) are the one exception, and say so.
 *
 * Condition waits go through wt_cond_wait / wt_cond_wait_until, which keep
 * the mutex in the held list while they sleep (the thread takes nothing
 * meanwhile, and holds the mutex again when they return).
 */
#ifndef WT_LOCK_H
#define WT_LOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* The lock order, outermost first. A lock may be taken while holding only
 * locks of lower rank (or of the same rank and a lower index). */
typedef enum wt_lock_rank {
  /* --- server (server/src) --- */
  /* adapters.create_mu: one adapter set made at a time; held while the
   * set's stores are made, before adapters.mu. */
  WT_LOCK_ADAPTERS_CREATE = 100,
  /* adapters.mu: the list of adapter sets. */
  WT_LOCK_ADAPTERS = 110,
  /* health.mu: Health.Watch streams; before the round's mu (the status
   * reads the round's state). */
  WT_LOCK_HEALTH = 200,
  /* watch.mu: WatchWeightVersion streams; before the round's mu (each
   * watcher is sent the versions it has not seen). */
  WT_LOCK_WATCH = 210,
  /* A param store's readers-writer lock, indexed by worker: readers hash
   * under it; FinishWeightUpdate write-locks every store, in worker order,
   * without the round's mu; the export reads the round's state under a
   * store's read lock. */
  WT_LOCK_STORE = 300,
  /* round.mu: the round state machine, the plan, the versions, the
   * metrics' figures. Held only for short work: no engine call, no wait
   * for a worker, no network I/O. Work for the workers is submitted under
   * it (a submit never blocks). */
  WT_LOCK_ROUND = 400,
  /* The lease table (leases.c): taken under the round's mu by an export
   * acquire; a round's wait for leases holds only this one. */
  WT_LOCK_LEASES = 500,
  /* A push's window (push.c): chunks handed to the workers. */
  WT_LOCK_PUSH = 600,
  /* A call's cancel callback (rpc_call.c): held while the callback runs on
   * the polling thread, so a callback takes only locks above this one. */
  WT_LOCK_RPC_CANCEL = 650,
  /* A worker's engine pointer (worker.c), for wt_worker_cancel. */
  WT_LOCK_WORKER_ENGINE = 700,
  /* A worker's op queue and published status (worker.c), indexed by
   * worker. */
  WT_LOCK_WORKER = 710,
  /* A param store's bounce buffer for device memory (param_store.c). */
  WT_LOCK_STORE_BOUNCE = 720,
  /* Readers' budgets (reader_budget.c). */
  WT_LOCK_READERS = 800,
  /* The hashing pool's queue (hash_pool.c). */
  WT_LOCK_HASH_POOL = 810,
  /* The metrics endpoint's connections (metrics.c). */
  WT_LOCK_METRICS_HTTP = 820,

  /* --- the RPC layer (common/src/rpc) --- */
  /* The server's pools, classes, peers and state (rpc_server.c). */
  WT_LOCK_RPC_SERVER = 900,
  /* A WT_RPC_WATCH stream's queue (rpc_stream.c). */
  WT_LOCK_RPC_STREAM = 910,
  /* A call's batches (rpc_call.c). */
  WT_LOCK_RPC_CALL = 920,
  /* The listener's hand-over of a connection to gRPC, then its table
   * (rpc_listener.c). */
  WT_LOCK_RPC_LISTENER_HAND = 930,
  WT_LOCK_RPC_LISTENER = 940,

  /* --- the client (client/src, the trainer halves of backends) --- */
  /* The trainer-engine registry's table (trainer_registry.c). */
  WT_LOCK_TRAINER_REGISTRY = 1000,
  /* A control plane made of the caller's callbacks (control_callback.c):
   * its table, then one pending call. */
  WT_LOCK_CONTROL_CALLBACK = 1010,
  WT_LOCK_CONTROL_CALLBACK_CALL = 1020,
  /* The fan-out of one call to many servers (fanout.c). */
  WT_LOCK_FANOUT = 1030,
  /* The grpc trainer's ring of chunks shared by its senders. */
  WT_LOCK_GRPC_RING = 1040,

  /* --- leaves: take no other lock while holding one of these --- */
  /* A registry of backends (registry.c). */
  WT_LOCK_REGISTRY = 1100,
  /* The ucx worker engines' shared listener (ucx_worker.c). */
  WT_LOCK_UCX_LISTEN = 1110,
  /* NCCL's library selection (nccl_seam.c). */
  WT_LOCK_NCCL_SELECT = 1120,
  /* The allocation-fault sites (alloc_fault.c, test builds). */
  WT_LOCK_ALLOC_FAULT = 1130,
  /* The client's socket mutator's table of sockets (rpc_client.c),
   * called by gRPC with its own locks held. */
  WT_LOCK_RPC_MUTATOR = 1140,
  /* For code outside the table (tests): checked against nothing above. */
  WT_LOCK_LEAF = 2000,
} wt_lock_rank;

/* Whether this build checks the order (WT_LOCK_CHECK). */
bool wt_lock_checked(void);

typedef struct wt_mutex {
  pthread_mutex_t mu;
  uint32_t order; /* rank << 16 | index */
  const char *name;
} wt_mutex;

/* A mutex with a static lifetime: static wt_mutex m =
 * WT_MUTEX_INITIALIZER(WT_LOCK_REGISTRY, "name"); */
#define WT_MUTEX_INITIALIZER(rank, nm) \
  { PTHREAD_MUTEX_INITIALIZER, (uint32_t)(rank) << 16, (nm) }

/* `name` (static) names the lock in a report; `index` orders locks of one
 * rank (0 when a thread never holds two of them). */
void wt_mutex_init(wt_mutex *m, wt_lock_rank rank, unsigned index,
                   const char *name);
void wt_mutex_destroy(wt_mutex *m);
void wt_mutex_lock(wt_mutex *m);
/* True when it took the lock; a try never waits, so it may be taken out
 * of order (it is still held, and checked against what comes after). */
bool wt_mutex_trylock(wt_mutex *m);
void wt_mutex_unlock(wt_mutex *m);
/* Aborts (in a checked build) unless this thread holds `m`: the
 * precondition of a function named ..._locked. */
void wt_mutex_assert_held(const wt_mutex *m);

/* Waits on `cv` with `m` held (pthread_cond_wait). */
void wt_cond_wait(pthread_cond_t *cv, wt_mutex *m);
/* Waits on `cv` (made by wt_cond_init_monotonic, wt/clock.h; `m` held)
 * until it is signalled or wt_mono_ms() reaches `deadline_ms`: 0, or
 * ETIMEDOUT when the deadline passed (at once when it has already). May
 * wake early, as every condition wait may. */
int wt_cond_wait_until(pthread_cond_t *cv, wt_mutex *m, int64_t deadline_ms);

typedef struct wt_rwlock {
  pthread_rwlock_t rw;
  uint32_t order;
  const char *name;
} wt_rwlock;

/* Writers are preferred (a reader waits while a writer does) and a thread
 * must not take a read lock it holds again. 0 or an errno. */
int wt_rwlock_init(wt_rwlock *l, wt_lock_rank rank, unsigned index,
                   const char *name);
void wt_rwlock_destroy(wt_rwlock *l);
void wt_rwlock_rdlock(wt_rwlock *l);
void wt_rwlock_wrlock(wt_rwlock *l);
void wt_rwlock_unlock(wt_rwlock *l);

/* How many locks this thread holds (0 in an unchecked build): a test's
 * check that a path returns holding nothing. */
int wt_lock_held_count(void);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_LOCK_H */
