/* proxy.c — the router proxy's life cycle, the workers' state as the core
 * sees it, the health poller and /metrics. See proxy.h. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "router/proxy_impl.h"
#include "util/progress.h"

void rp_config_default(rp_config *c)
{
    memset(c, 0, sizeof *c);
    router_config_default(&c->core);
    c->host = "127.0.0.1";
    c->port = 30000;
    c->prefix_block = 64;
    c->health_interval_s = 1;
    c->health_timeout_s = 2;
    c->connect_timeout_s = 5;
    c->request_timeout_s = 0;
    c->max_body_bytes = 32u << 20;
    c->max_response_bytes = 8u << 20;
    c->max_connections = 1024;
    c->max_connections_per_client = 0;
    c->header_timeout_s = 10;
    c->idle_timeout_s = 30;
}

/* ---- worker URLs ---- */
static bool host_char(char ch)
{
    return isalnum((unsigned char)ch) || ch == '-' || ch == '.' || ch == '_';
}

int rp_worker_url(const char *url, char *out, size_t cap, rh_err *e)
{
    const char *s = url;
    size_t scheme = !strncmp(s, "http://", 7) ? 7 : !strncmp(s, "https://", 8) ? 8 : 0;
    if (!scheme)
        return rh_fail(e, "--worker '%s': not a URL the router can reach: it must start with http:// or https:// "
                          "(e.g. http://127.0.0.1:30001)", url);
    for (const char *q = s; *q; q++)
        if ((unsigned char)*q <= ' ' || *q == 0x7f)
            return rh_fail(e, "--worker '%s': a URL holds no spaces or control characters", url);
    const char *auth = s + scheme, *end = auth + strcspn(auth, "/?#");
    if (memchr(auth, '@', (size_t)(end - auth)))
        return rh_fail(e, "--worker '%s': user info (user@host) is not supported; pass no credentials in the URL", url);
    const char *h = auth, *hend;
    if (*h == '[') {   /* an IPv6 literal */
        hend = memchr(h, ']', (size_t)(end - h));
        if (!hend || hend == h + 1) return rh_fail(e, "--worker '%s': the IPv6 address in [] is not closed", url);
        for (const char *q = h + 1; q < hend; q++)
            if (!isxdigit((unsigned char)*q) && *q != ':' && *q != '.')
                return rh_fail(e, "--worker '%s': '%c' cannot be in an IPv6 address", url, *q);
        hend++;
    } else {
        hend = h;
        while (hend < end && *hend != ':') {
            if (!host_char(*hend)) return rh_fail(e, "--worker '%s': '%c' cannot be in a host name", url, *hend);
            hend++;
        }
        if (hend == h) return rh_fail(e, "--worker '%s': the URL names no host", url);
    }
    if (hend < end) {
        if (*hend != ':') return rh_fail(e, "--worker '%s': junk after the host", url);
        const char *d = hend + 1;
        if (d == end) return rh_fail(e, "--worker '%s': ':' with no port after it", url);
        unsigned long port = 0;
        for (const char *q = d; q < end; q++) {
            if (!isdigit((unsigned char)*q) || port > 65535)
                return rh_fail(e, "--worker '%s': the port must be a number 1-65535", url);
            port = port * 10 + (unsigned long)(*q - '0');
        }
        if (port < 1 || port > 65535) return rh_fail(e, "--worker '%s': the port must be a number 1-65535", url);
    }
    if (*end == '?' || *end == '#' || strpbrk(end, "?#"))
        return rh_fail(e, "--worker '%s': a worker's base URL takes no query or fragment", url);
    size_t n = strlen(s);
    while (n > scheme && s[n - 1] == '/') n--;
    if (n + 1 > cap || n > 400) return rh_fail(e, "--worker '%s': the URL is too long", url);
    memcpy(out, s, n);
    out[n] = '\0';
    return 0;
}

/* ---- workers' state ---- */
void rp_worker_down(rproxy *p, uint32_t i, const char *why, bool cut_inflight)
{
    rp_worker *w = &p->w[i];
    pthread_mutex_lock(&p->mu);
    bool was = w->healthy;
    w->healthy = false;
    if (cut_inflight) atomic_fetch_add(&w->down_epoch, 1);
    pthread_mutex_unlock(&p->mu);
    if (was) fprintf(stderr, "rehearse router: %s; worker %s is out of routing until its /health answers\n", why, w->url);
}

int rp_pick(rproxy *p, const uint64_t *hashes, uint32_t n_hashes, uint64_t *epoch)
{
    pthread_mutex_lock(&p->mu);
    for (uint32_t i = 0; i < p->n; i++)
        p->view[i] = (router_replica){.healthy = p->w[i].healthy, .outstanding = p->w[i].outstanding,
                                      .kv_use = p->w[i].kv_use};
    uint64_t errors = router_errors(p->core), trips = router_trips(p->core);
    int k = router_pick(p->core, p->view, hashes, n_hashes);
    if (!errors && router_errors(p->core))   /* the first only: a broken script would flood the log */
        fprintf(stderr, "rehearse router: Lua policy error, routing by least outstanding instead: %s\n",
                router_error(p->core));
    if (router_trips(p->core) > trips)   /* once per trip */
        fprintf(stderr,
                "rehearse router: the Lua policy keeps failing (trip %llu): route() is not called for the next "
                "%llu picks (--policy-max-failures)\n",
                (unsigned long long)router_trips(p->core), (unsigned long long)router_backoff(p->core));
    if (k >= 0) {
        p->w[k].outstanding++;
        p->w[k].requests++;
        *epoch = atomic_load(&p->w[k].down_epoch);
    }
    pthread_mutex_unlock(&p->mu);
    return k;
}

void rp_finished(rproxy *p, uint32_t i, bool failed)
{
    pthread_mutex_lock(&p->mu);
    if (p->w[i].outstanding) p->w[i].outstanding--;
    if (failed) p->w[i].errors++;
    pthread_mutex_unlock(&p->mu);
}

int rp_first_healthy(rproxy *p, uint32_t from)
{
    int k = -1;
    pthread_mutex_lock(&p->mu);
    for (uint32_t i = from; i < p->n && k < 0; i++)
        if (p->w[i].healthy) k = (int)i;
    pthread_mutex_unlock(&p->mu);
    return k;
}

uint32_t rp_healthy_workers(const rproxy *p)
{
    uint32_t k = 0;
    pthread_mutex_lock((pthread_mutex_t *)&p->mu);
    for (uint32_t i = 0; i < p->n; i++) k += p->w[i].healthy;
    pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
    return k;
}

uint64_t rp_live_requests(const rproxy *p)
{
    return atomic_load(&((rproxy *)p)->live);
}

const char *rp_url(const rproxy *p)
{
    return p->url;
}

void rp_drain(rproxy *p)
{
    atomic_store(&p->draining, true);
}

/* ---- Prometheus ---- */
double rp_prom_value(const char *text, const char *name)
{
    size_t n = strlen(name);
    double best = -1;
    for (const char *l = text; l && *l;) {
        const char *end = strchr(l, '\n');
        if (!end) end = l + strlen(l);
        if (*l != '#' && !strncmp(l, name, n) && (l[n] == ' ' || l[n] == '{')) {
            const char *v = l + n;
            if (*v == '{') {   /* past the labels (a '}' inside a quoted value is not one) */
                bool q = false;
                for (v++; v < end && (q || *v != '}'); v++) {
                    if (*v == '\\' && q && v + 1 < end) v++;
                    else if (*v == '"') q = !q;
                }
                if (v < end) v++;
            }
            char *stop;
            double x = strtod(v, &stop);
            if (stop != v && isfinite(x) && x > best) best = x;
        }
        l = *end ? end + 1 : NULL;
    }
    return best;
}

static void put_label(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"') fputc('\\', f);
        if (*s == '\n') fputs("\\n", f);
        else fputc(*s, f);
    }
}

char *rp_metrics_text(rproxy *p, size_t *len)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return NULL;
    static const struct {
        const char *name, *type, *help;
    } m[] = {
        {"rehearse_router_requests_total", "counter", "Requests the router sent the worker (a retry after a refused connection counts again)."},
        {"rehearse_router_outstanding", "gauge", "Requests sent to the worker and not finished."},
        {"rehearse_router_errors_total", "counter", "Requests to the worker that failed: refused, reset, timed out, cut short, or answered 5xx."},
        {"rehearse_router_worker_healthy", "gauge", "1 while the worker is in routing, 0 while it is out."},
        {"rehearse_router_worker_kv_use", "gauge", "The worker's KV-cache use (0..1) as its /metrics last said; 0 when it says none."},
    };
    pthread_mutex_lock(&p->mu);
    for (size_t k = 0; k < sizeof m / sizeof m[0]; k++) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", m[k].name, m[k].help, m[k].name, m[k].type);
        for (uint32_t i = 0; i < p->n; i++) {
            const rp_worker *w = &p->w[i];
            fprintf(f, "%s{worker=\"", m[k].name);
            put_label(f, w->url);
            fputs("\"} ", f);
            switch (k) {
            case 0: fprintf(f, "%llu\n", (unsigned long long)w->requests); break;
            case 1: fprintf(f, "%u\n", w->outstanding); break;
            case 2: fprintf(f, "%llu\n", (unsigned long long)w->errors); break;
            case 3: fprintf(f, "%d\n", w->healthy ? 1 : 0); break;
            default: fprintf(f, "%.17g\n", w->kv_use); break;
            }
        }
    }
    uint64_t policy_errors = router_errors(p->core), trips = router_trips(p->core);
    pthread_mutex_unlock(&p->mu);
    fprintf(f, "# HELP rehearse_router_live_requests Requests routed and not finished.\n"
               "# TYPE rehearse_router_live_requests gauge\nrehearse_router_live_requests %llu\n",
            (unsigned long long)atomic_load(&p->live));
    if (p->guard)
        fprintf(f, "# HELP rehearse_router_client_connections Client connections open now.\n"
                   "# TYPE rehearse_router_client_connections gauge\nrehearse_router_client_connections %llu\n"
                   "# HELP rehearse_router_header_timeouts_total Client connections closed because a request's "
                   "header was not in by its deadline (--header-timeout).\n"
                   "# TYPE rehearse_router_header_timeouts_total counter\nrehearse_router_header_timeouts_total %llu\n",
                (unsigned long long)rh_guard_open_total(p->guard), (unsigned long long)rh_guard_cut_total(p->guard));
    fprintf(f, "# HELP rehearse_router_policy_errors_total Lua policy calls that failed; each of those requests "
               "went to the least outstanding worker.\n"
               "# TYPE rehearse_router_policy_errors_total counter\nrehearse_router_policy_errors_total %llu\n",
            (unsigned long long)policy_errors);
    fprintf(f, "# HELP rehearse_router_policy_breaker_trips_total Times the Lua policy failed --policy-max-failures "
               "times in a row (or again after a back-off) and was not called for a while.\n"
               "# TYPE rehearse_router_policy_breaker_trips_total counter\n"
               "rehearse_router_policy_breaker_trips_total %llu\n",
            (unsigned long long)trips);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* ---- the health poller ---- */
#define PROBE_BODY_LIMIT (4u << 20)

typedef struct probe {
    CURL *h;
    char *buf;
    size_t n, cap;
    bool over;
    long status;
    CURLcode rc;
    bool done;
    char err[CURL_ERROR_SIZE];
} probe;

static size_t probe_body(char *ptr, size_t size, size_t nmemb, void *ctx)
{
    probe *q = ctx;
    size_t n = size * nmemb;
    if (q->over || q->n + n + 1 > PROBE_BODY_LIMIT) {
        q->over = true;
        return n;
    }
    if (q->n + n + 1 > q->cap) {
        size_t c = q->cap ? q->cap : 4096;
        while (c < q->n + n + 1) c *= 2;
        char *b = realloc(q->buf, c);
        if (!b) return 0;
        q->buf = b;
        q->cap = c;
    }
    memcpy(q->buf + q->n, ptr, n);
    q->n += n;
    q->buf[q->n] = '\0';
    return n;
}

static CURL *probe_handle(probe *q, const char *url, double timeout_s, double connect_s)
{
    memset(q, 0, sizeof *q);
    if (!(q->h = curl_easy_init())) return NULL;
    curl_easy_setopt(q->h, CURLOPT_URL, url);
    curl_easy_setopt(q->h, CURLOPT_WRITEFUNCTION, probe_body);
    curl_easy_setopt(q->h, CURLOPT_WRITEDATA, q);
    curl_easy_setopt(q->h, CURLOPT_PRIVATE, q);
    curl_easy_setopt(q->h, CURLOPT_ERRORBUFFER, q->err);
    curl_easy_setopt(q->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(q->h, CURLOPT_TIMEOUT_MS, (long)ceil(timeout_s * 1e3));
    double c = connect_s < timeout_s ? connect_s : timeout_s;
    curl_easy_setopt(q->h, CURLOPT_CONNECTTIMEOUT_MS, (long)ceil(c * 1e3));
    return q->h;
}

/* GET /health and /metrics of every worker at once; then each worker's
 * verdict. `first`: the start, where the healthy are not announced. */
static void poll_round(rproxy *p, bool first)
{
    uint32_t n = p->n;
    probe *q = calloc(2 * (size_t)n, sizeof *q);
    CURLM *m = curl_multi_init();
    if (!q || !m) {
        free(q);
        if (m) curl_multi_cleanup(m);
        return;   /* out of memory: the state stays as it was */
    }
    char url[640];
    for (uint32_t i = 0; i < 2 * n; i++) {
        snprintf(url, sizeof url, "%s%s", p->w[i / 2].url, i % 2 ? "/metrics" : "/health");
        if (probe_handle(&q[i], url, p->cfg.health_timeout_s, p->cfg.connect_timeout_s))
            curl_multi_add_handle(m, q[i].h);
        else q[i].done = true, q[i].rc = CURLE_OUT_OF_MEMORY;
    }
    int running = 1;
    while (running > 0) {
        if (curl_multi_perform(m, &running) != CURLM_OK) break;
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            probe *x = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            x->rc = msg->data.result;
            x->done = true;
            curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
        }
        if (running > 0) curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    for (uint32_t i = 0; i < n; i++) {
        probe *hq = &q[2 * i], *mq = &q[2 * i + 1];
        rp_worker *w = &p->w[i];
        char why[CURL_ERROR_SIZE + 700];
        if (!hq->done || hq->rc != CURLE_OK) {
            snprintf(why, sizeof why, "worker %s: GET /health: %s%s%s", w->url,
                     curl_easy_strerror(hq->done ? hq->rc : CURLE_OPERATION_TIMEDOUT), hq->err[0] ? ": " : "", hq->err);
            if (first) {
                fprintf(stderr, "rehearse router: %s; starting without worker %s, it joins when its /health answers\n",
                        why, w->url);
                atomic_fetch_add(&w->down_epoch, 1);
            } else rp_worker_down(p, i, why, true);
            continue;
        }
        double kv = -1;
        if (mq->done && mq->rc == CURLE_OK && mq->status == 200 && mq->buf) {
            static const char *names[] = {"sglang:token_usage", "vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"};
            for (size_t k = 0; k < 3 && kv < 0; k++) kv = rp_prom_value(mq->buf, names[k]);
        }
        bool ok = hq->status >= 200 && hq->status < 300;
        pthread_mutex_lock(&p->mu);
        bool was = w->healthy;
        w->healthy = ok;
        w->kv_use = kv < 0 ? 0 : kv > 1 ? 1 : kv;
        pthread_mutex_unlock(&p->mu);
        if (ok && !was && !first) fprintf(stderr, "rehearse router: worker %s answers again: back in routing\n", w->url);
        else if (!ok && (was || first))
            fprintf(stderr, "rehearse router: worker %s is out of routing: GET /health answered %ld\n", w->url, hq->status);
    }
    for (uint32_t i = 0; i < 2 * n; i++) {
        if (q[i].h) {
            curl_multi_remove_handle(m, q[i].h);
            curl_easy_cleanup(q[i].h);
        }
        free(q[i].buf);
    }
    curl_multi_cleanup(m);
    free(q);
}

static void *poller_main(void *arg)
{
    rproxy *p = arg;
    pthread_mutex_lock(&p->poll_mu);
    while (!p->poll_quit) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double at = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + p->cfg.health_interval_s;
        ts.tv_sec = (time_t)at;
        ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
        int rc = 0;
        while (!p->poll_quit && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&p->poll_cv, &p->poll_mu, &ts);
        if (p->poll_quit) break;
        pthread_mutex_unlock(&p->poll_mu);
        poll_round(p, false);
        rp_record_flush(p);
        pthread_mutex_lock(&p->poll_mu);
    }
    pthread_mutex_unlock(&p->poll_mu);
    return NULL;
}

/* The first healthy worker's first model id (malloc'd), for the trace header. */
static char *served_model(rproxy *p)
{
    int k = rp_first_healthy(p, 0);
    if (k < 0) return NULL;
    char url[640];
    snprintf(url, sizeof url, "%s/v1/models", p->w[k].url);
    probe q;
    if (!probe_handle(&q, url, p->cfg.health_timeout_s, p->cfg.connect_timeout_s)) return NULL;
    char *name = NULL;
    if (curl_easy_perform(q.h) == CURLE_OK && q.buf) {
        json_t *j = json_loads(q.buf, 0, NULL);
        const char *id = json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id"));
        if (id) name = strdup(id);
        json_decref(j);
    }
    curl_easy_cleanup(q.h);
    free(q.buf);
    return name;
}

/* ---- life cycle ---- */
static void proxy_free(rproxy *p)
{
    if (!p) return;
    router_free(p->core);
    free(p->view);
    free(p->w);
    free(p->urls);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->rec_mu);
    pthread_mutex_destroy(&p->poll_mu);
    pthread_cond_destroy(&p->poll_cv);
    free(p);
}

/* The Lua policy's time limit: the wall clock, the router's own. */
static double wall_clock(void *ctx)
{
    (void)ctx;
    return rh_now();
}

rproxy *rp_start(const rp_config *c, rh_err *e)
{
    if (!c->n_workers) return rh_fail(e, "no --worker given: the router needs at least one worker URL"), NULL;
    if (c->n_workers > RP_MAX_WORKERS)
        return rh_fail(e, "%u workers: at most %u --worker", c->n_workers, RP_MAX_WORKERS), NULL;
    if (!c->prefix_block) return rh_fail(e, "--prefix-block must be at least 1"), NULL;
    if (!(c->health_interval_s > 0) || !(c->health_timeout_s > 0) || !(c->connect_timeout_s > 0))
        return rh_fail(e, "--health-interval, --health-timeout and --connect-timeout must be > 0 seconds"), NULL;
    struct in_addr bind_addr;
    const char *host = c->host ? c->host : "127.0.0.1";
    if (strcmp(host, "localhost") && inet_pton(AF_INET, host, &bind_addr) != 1)
        return rh_fail(e, "--host %s: not an IPv4 address (127.0.0.1 serves this machine, 0.0.0.0 every interface)",
                       host), NULL;
    if (c->record_path) {   /* a local mistake is said before any worker is asked anything */
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", c->record_path);
        char *slash = strrchr(dir, '/');
        if (!slash) snprintf(dir, sizeof dir, ".");
        else if (slash == dir) dir[1] = '\0';
        else *slash = '\0';
        if (access(dir, W_OK) != 0)
            return rh_fail(e, "--record-trace %s: cannot write in %s: %s", c->record_path, dir, strerror(errno)), NULL;
    }
    if (bench_curl_init(e) < 0) return NULL;
    rproxy *p = calloc(1, sizeof *p);
    if (!p) return rh_fail(e, "out of memory starting the router"), NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->rec_mu, NULL);
    pthread_mutex_init(&p->poll_mu, NULL);
    pthread_cond_init(&p->poll_cv, NULL);
    p->cfg = *c;
    p->n = c->n_workers;
    p->w = calloc(p->n, sizeof *p->w);
    p->urls = calloc(p->n, sizeof *p->urls);
    p->view = calloc(p->n, sizeof *p->view);
    if (!p->w || !p->urls || !p->view) {
        proxy_free(p);
        return rh_fail(e, "out of memory starting the router"), NULL;
    }
    for (uint32_t i = 0; i < p->n; i++) {
        if (rp_worker_url(c->workers[i], p->w[i].url, sizeof p->w[i].url, e) < 0) {
            proxy_free(p);
            return NULL;
        }
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(p->w[j].url, p->w[i].url)) {
                rh_fail(e, "--worker %s is given twice (workers %u and %u): each worker once", p->w[i].url, j, i);
                proxy_free(p);
                return NULL;
            }
        p->urls[i] = p->w[i].url;
    }
    p->cfg.workers = p->urls;
    router_config rc = c->core;
    rc.n_replicas = p->n;
    rc.guard_clock = wall_clock;
    if (!(p->core = router_new(&rc, e))) {
        proxy_free(p);
        return NULL;
    }
    p->t0 = rh_now();
    poll_round(p, true);
    if (c->record_path) {
        char *model = served_model(p);
        int r = rp_record_open(p, model, e);
        free(model);
        if (r < 0) {
            proxy_free(p);
            return NULL;
        }
    }
    if (rp_http_start(p, e) < 0) {
        rp_record_close(p, NULL);
        proxy_free(p);
        return NULL;
    }
    if (pthread_create(&p->poller, NULL, poller_main, p) != 0) {
        rp_http_stop(p);
        rp_record_close(p, NULL);
        proxy_free(p);
        return rh_fail(e, "cannot start the health poller thread"), NULL;
    }
    p->poller_started = true;
    return p;
}

int rp_stop(rproxy *p, rh_err *e)
{
    if (!p) return 0;
    atomic_store(&p->draining, true);
    atomic_store(&p->quit, true);   /* transfers in flight give up within 0.1 s */
    /* ... and their clients get the error (a stream's last event) before
     * the connections close */
    for (double end = rh_now() + 2; atomic_load(&p->live) && rh_now() < end;) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    rp_http_stop(p);
    if (p->poller_started) {
        pthread_mutex_lock(&p->poll_mu);
        p->poll_quit = true;
        pthread_cond_signal(&p->poll_cv);
        pthread_mutex_unlock(&p->poll_mu);
        pthread_join(p->poller, NULL);
    }
    int rc = rp_record_close(p, e);
    proxy_free(p);
    return rc;
}
