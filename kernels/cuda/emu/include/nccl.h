/* nccl.h (emulator) — NCCL's types and the entry points comm.cu uses,
 * implemented in-process by kernels/cuda/emu/nccl.cc: the ranks of a group
 * are host threads of one process (emulated GPUs), and collectives meet at
 * barriers in shared memory. RH_NCCL_BUILTIN tells comm.cu to call these
 * directly instead of loading libnccl. */
#ifndef RH_CUDA_EMU_NCCL_H
#define RH_CUDA_EMU_NCCL_H

#include "cuda_runtime.h"

#define RH_NCCL_BUILTIN 1

typedef struct { char internal[128]; } ncclUniqueId;
typedef struct rh_emu_nccl_comm *ncclComm_t;
typedef enum { ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
               ncclInvalidArgument = 4, ncclInvalidUsage = 5 } ncclResult_t;
typedef enum { ncclInt8 = 0, ncclChar = 0, ncclUint8 = 1, ncclInt32 = 2, ncclFloat32 = 7, ncclFloat = 7 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;

ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt, int root, ncclComm_t comm,
                           cudaStream_t s);
const char *ncclGetErrorString(ncclResult_t r);

#endif
