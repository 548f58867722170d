/* ucx_trainer_conn.c: the ucx trainer's connections: one endpoint per
 * worker, by the worker's packed address or through its listener with this
 * init's hello, made at init_response and again for a round after one
 * broke (see ucx_trainer.c). */

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/ucx/ucx_trainer.h"
#include "wt/cuda.h"
#include "wt/log.h"
#include "wt/packing.h"

static void peer_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
  peer *p = arg;
  (void)ep;
  p->failed = true;
  p->why = status;
}

/* Creates p's endpoint to its worker; the connection completes while both
 * sides progress. */
wt_status *wt_ucxt_peer_connect(ucx_trainer *t, peer *p) {
  wt_status *st = NULL;
  ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
                        .err_mode = t->peer_errors ? UCP_ERR_HANDLING_MODE_PEER
                                                   : UCP_ERR_HANDLING_MODE_NONE,
                        .err_handler = {.cb = peer_error, .arg = p}};
  if (p->worker_address != NULL) {
    ep.field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = (const ucp_address_t *)p->worker_address;
  } else {
    ep.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = (const struct sockaddr *)&p->addr;
    ep.sockaddr.addrlen = p->addrlen;
  }
  p->failed = false;
  p->why = UCS_OK;
  ucs_status_t us = ucp_ep_create(t->ucx->worker, &ep, &p->ep);
  if (us != UCS_OK) {
    p->ep = NULL;
    WT_FAIL(WT_UNAVAILABLE, "%s: connecting: %s", p->name,
            ucs_status_string(us));
  }
  if (p->worker_address == NULL) {
    /* The worker's listener closes a connection that does not send this
     * init's hello first. */
    ucp_request_param_t hp = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                              .datatype = ucp_dt_make_contig(1)};
    void *hr = ucp_stream_send_nbx(p->ep, t->hello, sizeof(t->hello), &hp);
    if (UCS_PTR_IS_ERR(hr))
      WT_FAIL(WT_UNAVAILABLE, "%s: sending the hello: %s", p->name,
              ucs_status_string(UCS_PTR_STATUS(hr)));
    if (hr != NULL) ucp_request_free(hr); /* completes on its own */
  }
out:
  return st;
}

/* Force-closing an endpoint is the one way to end UCX sends still in flight
 * (ucp_request_cancel only applies to receives): it completes them with an
 * error, so that the send buffers are free again. */
void wt_ucxt_peer_close(ucx_trainer *t, peer *p) {
  wt_ucx_ep_close(t->ucx, p->ep, false, UCX_GRACE_MS);
  p->ep = NULL;
}

wt_status *wt_ucxt_init_response(
    void *self, size_t k, const Wt__V1__InitWeightTransferEngineResponse *r) {
  wt_status *st = NULL;
  ucx_trainer *t = self;
  peer *p = NULL;
  if (r == NULL || r->n_endpoints == 0)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "backend 'ucx': the init response lists no worker endpoint");
  peer **np = realloc(t->peers, (t->npeers + r->n_endpoints) * sizeof(*np));
  if (np == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  t->peers = np;
  for (size_t i = 0; i < r->n_endpoints; i++) {
    const Wt__V1__WorkerEndpoint *we = r->endpoints[i];
    p = calloc(1, sizeof(*p));
    if (p == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
    p->server = k;
    p->rank = we->rank;
    snprintf(p->name, sizeof(p->name), "%s worker %u (%s:%u)",
             t->ctx->targets[k], we->rank, we->address ? we->address : "",
             we->port);
    if (t->by_sockaddr &&
        (we->address == NULL || *we->address == '\0' || we->port == 0))
      WT_FAIL(WT_FAILED_PRECONDITION,
              "%s: the worker has no UCX listener (it opens one only when "
              "the init info's options say \"ucx_connect\": \"sockaddr\")",
              p->name);
    if (!t->by_sockaddr && we->worker_address.len == 0)
      WT_FAIL(WT_FAILED_PRECONDITION,
              "%s: the init response gives no UCX worker address", p->name);
    snprintf(p->host, sizeof(p->host), "%s", we->address ? we->address : "");
    p->port = we->port;
    if (t->by_sockaddr)
      WT_CHECK(wt_status_prefix(
          wt_ucx_sockaddr(we->address, we->port, &p->addr, &p->addrlen), "%s",
          p->name));
    if (!t->by_sockaddr && we->worker_address.len > 0) {
      p->worker_address = malloc(we->worker_address.len);
      if (p->worker_address == NULL)
        WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
      memcpy(p->worker_address, we->worker_address.data,
             we->worker_address.len);
      p->worker_address_len = we->worker_address.len;
    }
    WT_CHECK(wt_ucxt_peer_connect(t, p));
    t->peers[t->npeers++] = p;
    p = NULL;
  }
out:
  if (p) free(p->worker_address);
  free(p);
  return st;
}
