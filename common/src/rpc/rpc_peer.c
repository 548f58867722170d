/* rpc_peer.c: the server's peers (see rpc_internal.h): who a call comes
 * from, and each peer's share of an admission class (the per-peer table,
 * under the server's lock), used by the server's admission (rpc_server.c),
 * its calls (rpc_call.c) and its streams (rpc_stream.c). */

#include <grpc/grpc.h>
#include <grpc/support/alloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_internal.h"

/* A place in `key`'s share of class `cls` (wt_rpc_class.max_per_peer: a
 * fair share of the class's room among the peers holding some, never below
 * the configured floor); NULL when its share is full (*held: what it holds,
 * *limit: its share now; *held -1: out of memory). */
rpc_peer *rpc_peer_take_locked(wt_rpc_server *s, const char *key, size_t cls,
                               int *held, int *limit) {
  rpc_pool *p = &s->pools[cls];
  rpc_peer *e = s->peers;
  while (e != NULL && (e->cls != cls || strcmp(e->key, key) != 0)) e = e->next;
  int peers = p->peers + (e == NULL);
  long room = (long)p->cfg.max_running + p->cfg.max_queued;
  long share = p->cfg.per_peer_cap ? 0 : room / (peers > 0 ? peers : 1);
  *limit = share > p->cfg.max_per_peer ? (int)share : p->cfg.max_per_peer;
  *held = e ? e->held : 0;
  if (*held >= *limit) return NULL;
  if (e == NULL) {
    if ((e = calloc(1, sizeof(*e))) == NULL) {
      *held = -1;
      return NULL;
    }
    e->cls = cls;
    snprintf(e->key, sizeof(e->key), "%s", key);
    e->next = s->peers;
    s->peers = e;
    p->peers++;
  }
  e->held++;
  return e;
}

void rpc_peer_release_locked(wt_rpc_server *s, rpc_peer *slot) {
  if (slot == NULL || --slot->held > 0) return;
  for (rpc_peer **pp = &s->peers; *pp != NULL; pp = &(*pp)->next)
    if (*pp == slot) {
      *pp = slot->next;
      s->pools[slot->cls].peers--;
      free(slot);
      return;
    }
}

void rpc_server_peer_key(wt_rpc_server *s, grpc_call *call, char *key,
                         size_t n) {
  char *peer = grpc_call_get_peer(call);
  if (!rpc_listener_peer_key(s->listener, peer, key, n)) {
    /* "ipv4:10.0.0.5:41234" -> "ip:10.0.0.5" */
    const char *p = peer ? peer : "?";
    const char *colon = strchr(p, ':');
    const char *last = strrchr(p, ':');
    const char *from = colon ? colon + 1 : p;
    int len = last && last > from ? (int)(last - from) : (int)strlen(from);
    snprintf(key, n, "ip:%.*s", len, from);
  }
  gpr_free(peer);
}

char *rpc_server_peer(wt_rpc_server *s, grpc_call *call) {
  return rpc_listener_peer(s->listener, grpc_call_get_peer(call));
}
