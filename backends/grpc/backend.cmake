# grpc: the bytes ride the control channel's Push stream.
wt_backend(NAME grpc
  SHARED grpc.c
  WORKER grpc_worker.c
  TRAINER grpc_trainer.c grpc_trainer_delta.c)
