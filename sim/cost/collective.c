/* collective.c — the collective model of collective.h. */
#include "sim/cost/collective.h"

#include <math.h>

/* The call's shape: GPUs per NVLink domain and domains spanned. */
static void span(const rl_gpu *g, uint32_t n, uint32_t per_node, double *q, double *m)
{
    uint32_t d = per_node && per_node < n ? per_node : n;
    uint32_t dom = g->links.nvlink_domain ? g->links.nvlink_domain : g->gpus_per_node;
    *q = d < dom ? d : dom;
    if (*q < 1) *q = 1;
    *m = ceil(n / *q);
}

double rl_send_recv_s(const rl_gpu *g, bool across, double bytes, double eff)
{
    const rl_links *l = &g->links;
    if (across) return l->send_recv_latency_s + l->slow_hop_latency_s + bytes / (l->slow_Bps * eff);
    return l->send_recv_latency_s + bytes / (l->nvlink_Bps * eff);
}

/* A ring's bandwidth and the latency its slow hops add. */
static double ring_Bps(const rl_gpu *g, double q, double m, double *extra)
{
    const rl_links *l = &g->links;
    if (m <= 1) {
        *extra = 0;
        return l->allreduce_nvlink_eff * l->nvlink_Bps;
    }
    double paths = q < l->slow_links ? q : l->slow_links;
    *extra = 2 * l->slow_hop_latency_s;
    return l->allreduce_slow_eff * fmin(l->nvlink_Bps, l->slow_Bps * paths);
}

double rl_allreduce_s(const rl_gpu *g, uint32_t n, uint32_t per_node, double bytes, double eff)
{
    if (n < 2) return 0;
    double q, m, extra;
    span(g, n, per_node, &q, &m);
    double B = ring_Bps(g, q, m, &extra) * eff;
    return g->links.allreduce_latency_s + 2.0 * (n - 1) * g->links.ring_step_latency_s + extra +
           2.0 * (n - 1) / n * bytes / B;
}

double rl_allgather_s(const rl_gpu *g, uint32_t n, uint32_t per_node, double bytes, double eff)
{
    if (n < 2) return 0;
    double q, m, extra;
    span(g, n, per_node, &q, &m);
    double B = ring_Bps(g, q, m, &extra) * eff;
    return g->links.allreduce_latency_s + (n - 1.0) * g->links.ring_step_latency_s + extra / 2 +
           (n - 1.0) / n * bytes / B;
}

double rl_alltoall_s(const rl_gpu *g, uint32_t n, uint32_t per_node, double bytes, double eff)
{
    if (n < 2) return 0;
    const rl_links *l = &g->links;
    double q, m;
    span(g, n, per_node, &q, &m);
    double intra = bytes * (q - 1) / n, inter = bytes * (n - q) / n;
    double t = fmax(intra / (l->nvlink_Bps * eff), inter > 0 ? inter / (l->slow_Bps * eff) : 0);
    return l->send_recv_latency_s + (inter > 0 ? l->slow_hop_latency_s : 0) + t;
}

double rl_custom_allreduce_s(const rl_gpu *g, double bytes, double eff)
{
    const rl_links *l = &g->links;
    if (!(l->custom_allreduce_Bps > 0)) return INFINITY;
    return l->custom_allreduce_latency_s + bytes / (l->custom_allreduce_Bps * eff);
}

double rl_deepep_split_s(const rl_gpu *g, bool low_latency, double nvlink_bytes, double rdma_bytes, double eff)
{
    const rl_links *l = &g->links;
    double lat = low_latency ? l->ep_ll_latency_s : l->ep_normal_latency_s;
    double bn = low_latency ? l->ep_ll_nvlink_Bps : l->ep_normal_nvlink_Bps;
    double br = low_latency ? l->ep_ll_rdma_Bps : l->ep_normal_rdma_Bps;
    if (!(bn > 0)) bn = l->nvlink_Bps;
    if (!(br > 0)) br = l->slow_Bps;
    if (!(lat > 0)) lat = l->send_recv_latency_s + (rdma_bytes > 0 ? l->slow_hop_latency_s : 0);
    return lat + fmax(nvlink_bytes / (bn * eff), rdma_bytes > 0 ? rdma_bytes / (br * eff) : 0);
}

double rl_deepep_s(const rl_gpu *g, bool low_latency, uint32_t n, uint32_t per_node, double bytes, double eff)
{
    if (n < 2) return 0;
    double q, m;
    span(g, n, per_node, &q, &m);
    return rl_deepep_split_s(g, low_latency, bytes * (q - 1) / n, bytes * (n - q) / n, eff);
}
