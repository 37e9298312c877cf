/* nccl.cc — the emulator's NCCL: a group's ranks are host threads of this
 * process (each on its emulated device), meeting in shared memory.
 *
 * A group is found by its unique id; ncclCommInitRank blocks until all
 * ranks have joined, as NCCL's does. A collective is two barriers: every
 * rank posts its buffer, and after the first barrier each computes its
 * own result from all the posted buffers into private memory; after the
 * second (no one reads the posted buffers any more) it writes the result,
 * so in-place collectives are safe. Ranks must call collectives in the
 * same order, as NCCL requires; a rank that never comes would hang NCCL
 * and hangs this too. */
#include <stdio.h>
#include <stdlib.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "nccl.h"

struct group {
    int nranks = 0, joined = 0, left = 0;
    std::mutex lock;
    std::condition_variable cv;
    unsigned long generation = 0;
    int arrived = 0;
    std::vector<const void *> posted;
};

struct rh_emu_nccl_comm {
    group *g;
    std::string key;
    int rank;
};

static std::mutex groups_lock;
static std::map<std::string, group *> groups;
static std::atomic<unsigned long> ids{1};

static void barrier(group *g)
{
    std::unique_lock<std::mutex> l(g->lock);
    unsigned long gen = g->generation;
    if (++g->arrived == g->nranks) {
        g->arrived = 0;
        g->generation++;
        g->cv.notify_all();
    } else {
        g->cv.wait(l, [&] { return g->generation != gen; });
    }
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    default: return "internal error";
    }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "rehearse-emu-%lu", ids.fetch_add(1));
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    std::string key(id.internal, strnlen(id.internal, sizeof id.internal));
    group *g;
    {
        std::lock_guard<std::mutex> l(groups_lock);
        auto it = groups.find(key);
        if (it == groups.end()) {
            g = new group;
            g->nranks = nranks;
            g->posted.assign(nranks, nullptr);
            groups[key] = g;
        } else {
            g = it->second;
        }
    }
    std::unique_lock<std::mutex> l(g->lock);
    if (g->nranks != nranks) return ncclInvalidUsage;
    g->joined++;
    g->cv.notify_all();
    g->cv.wait(l, [&] { return g->joined >= g->nranks; });
    *comm = new rh_emu_nccl_comm{g, key, rank};
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm) return ncclSuccess;
    group *g = comm->g;
    bool last;
    {
        std::lock_guard<std::mutex> l(g->lock);
        last = ++g->left == g->nranks;
    }
    if (last) {
        std::lock_guard<std::mutex> l(groups_lock);
        groups.erase(comm->key);
        delete g;
    }
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t s)
{
    if (!comm || dt != ncclFloat || op != ncclSum) return ncclInvalidArgument;
    rh_emu::enqueue(s, [=]() {
        group *g = comm->g;
        g->posted[comm->rank] = send;
        barrier(g);
        std::vector<float> sum(count, 0.f);
        for (int r = 0; r < g->nranks; r++) {   /* rank order: every rank sums alike */
            const float *x = (const float *)g->posted[r];
            for (size_t i = 0; i < count; i++) sum[i] += x[i];
        }
        barrier(g);
        memcpy(recv, sum.data(), count * sizeof(float));
    });
    return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt, int root, ncclComm_t comm,
                           cudaStream_t s)
{
    if (!comm || root < 0 || root >= comm->g->nranks) return ncclInvalidArgument;
    size_t size = dt == ncclFloat ? 4 : dt == ncclInt32 ? 4 : 1;
    rh_emu::enqueue(s, [=]() {
        group *g = comm->g;
        g->posted[comm->rank] = send;
        barrier(g);
        std::vector<unsigned char> copy;
        if (comm->rank != root) {
            const unsigned char *src = (const unsigned char *)g->posted[root];
            copy.assign(src, src + count * size);
        }
        barrier(g);
        if (comm->rank != root) memcpy(recv, copy.data(), count * size);
        else if (recv != send) memmove(recv, send, count * size);
    });
    return ncclSuccess;
}
