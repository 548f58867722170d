# grpc: the bytes ride the control channel's Push stream.
wt_backend(NAME grpc
  SHARED grpc_shared.c
  WORKER grpc_worker.c
  TRAINER grpc_trainer.c)
