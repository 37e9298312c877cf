/* bench_body.c — see bench_body.h. The body is printed by hand rather than
 * built as a jansson tree: a 100k-token prompt would otherwise cost 100k
 * allocations per request on the thread that times every other request. */
#include "client/bench_body.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Short, frequent words that most tokenizers keep as one token with their
 * leading space. 256 of them, indexed by the low byte of a token id. */
static const char *const words[256] = {
    "the", "of", "and", "to", "in", "is", "was", "that", "for", "on", "as", "with", "by", "he", "at", "from",
    "his", "it", "an", "were", "are", "which", "this", "also", "be", "has", "or", "had", "first", "one",
    "their", "its", "new", "after", "but", "who", "not", "they", "have", "her", "she", "two", "been", "other",
    "when", "there", "all", "during", "into", "school", "time", "may", "years", "more", "most", "only", "over",
    "city", "some", "world", "would", "where", "later", "up", "such", "used", "many", "can", "state", "about",
    "national", "out", "known", "university", "united", "then", "made", "between", "before", "both", "film",
    "three", "while", "under", "year", "team", "series", "season", "through", "being", "each", "well", "early",
    "war", "long", "part", "since", "south", "north", "east", "west", "high", "any", "same", "called", "music",
    "album", "river", "second", "number", "member", "group", "life", "great", "party", "played", "began",
    "government", "public", "history", "game", "work", "line", "name", "church", "side", "area", "local",
    "family", "town", "county", "club", "house", "station", "based", "four", "major", "built", "five", "small",
    "center", "along", "around", "left", "final", "back", "until", "became", "people", "will", "home",
    "district", "included", "however", "against", "several", "set", "order", "record", "show", "power", "near",
    "within", "following", "received", "company", "could", "given", "end", "day", "main", "form", "service",
    "military", "water", "field", "song", "book", "best", "total", "last", "land", "top", "led", "young", "air",
    "road", "point", "age", "much", "large", "story", "role", "due", "court", "once", "art", "law", "six",
    "own", "held", "open", "head", "office", "took", "use", "region", "language", "general", "even", "site",
    "still", "village", "design", "health", "data", "light", "model", "energy", "paper", "money", "night",
    "stone", "market", "green", "black", "white", "red", "blue", "gold", "iron", "glass", "tree", "bird",
    "fish", "horse", "ship", "train", "bridge", "tower", "garden", "forest", "island", "lake", "hill", "valley",
    "coast", "plain", "desert", "snow", "rain", "wind", "fire", "earth", "star", "moon",
};

const char *bench_word(int32_t id)
{
    return words[(uint32_t)id & 255u];
}

char *bench_json_string(const char *s)
{
    json_t *j = json_string(s);
    char *out = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    json_decref(j);
    return out;
}

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

/* Room for len more bytes and a NUL; -1 (and oom set) when memory ran out. */
static int reserve(sbuf *b, size_t len)
{
    if (b->oom) return -1;
    if (b->n + len + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 1024;
        while (b->n + len + 1 > c) c *= 2;
        char *p = realloc(b->p, c);
        if (!p) {
            b->oom = 1;
            return -1;
        }
        b->p = p;
        b->cap = c;
    }
    return 0;
}

static void put(sbuf *b, const char *s, size_t len)
{
    if (reserve(b, len) < 0) return;
    memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = '\0';
}

static void puts_(sbuf *b, const char *s)
{
    put(b, s, strlen(s));
}

/* Decimal digits of a token id. snprintf costs ~40 ns a call, and a
 * 128k-token prompt is built on the thread that stamps every stream's
 * chunks: this keeps a long prompt's body to a fraction of a millisecond. */
static size_t format_id(int32_t id, char *out)
{
    char tmp[12];
    size_t n = 0, k = 0;
    uint32_t v = id < 0 ? (uint32_t)0 - (uint32_t)id : (uint32_t)id;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (id < 0) out[k++] = '-';
    while (n) out[k++] = tmp[--n];
    return k;
}

/* Room for the longest ids, then digits straight into the buffer. */
static void put_ids(sbuf *b, const int32_t *tokens, uint32_t n_tokens)
{
    if (reserve(b, (size_t)n_tokens * 12 + 2) < 0) return;
    char *p = b->p + b->n;
    for (uint32_t i = 0; i < n_tokens; i++) {
        if (i) *p++ = ',';
        p += format_id(tokens[i], p);
    }
    b->n = (size_t)(p - b->p);
    b->p[b->n] = '\0';
}

char *bench_request_body(const bench_body_opts *o, const int32_t *tokens, uint32_t n_tokens, const char *text,
                         uint32_t max_tokens, size_t *len)
{
    char *text_json = text ? bench_json_string(text) : NULL;
    if (text && !text_json) return NULL;
    sbuf b = {0};
    char num[32];
    /* Ids take at most 11 characters each; one reservation avoids regrowth. */
    size_t guess = 256 + (size_t)n_tokens * (o->chat ? 8 : 12) + 16 + (o->extra ? strlen(o->extra) : 0) +
                   (o->sampling ? strlen(o->sampling) : 0) +
                   (o->lora_path ? strlen(o->lora_path) + 16 : 0) + strlen(o->model_json);
    b.p = malloc(guess);
    if (!b.p) return NULL;
    b.cap = guess;
    b.p[0] = '\0';
    if (o->generate) {
        puts_(&b, text_json ? "{\"text\":" : "{\"input_ids\":[");
    } else {
        puts_(&b, "{\"model\":");
        puts_(&b, o->model_json);
    }
    if (text_json) {
        if (o->chat) puts_(&b, ",\"messages\":[{\"role\":\"user\",\"content\":");
        else if (!o->generate) puts_(&b, ",\"prompt\":");
        puts_(&b, text_json);
        if (o->chat) puts_(&b, "}]");
    } else if (o->generate) {
        put_ids(&b, tokens, n_tokens);
        puts_(&b, "]");
    } else if (o->chat) {
        puts_(&b, ",\"messages\":[{\"role\":\"user\",\"content\":\"");
        for (uint32_t i = 0; i < n_tokens; i++) {
            if (i) put(&b, " ", 1);
            puts_(&b, bench_word(tokens[i]));
        }
        puts_(&b, "\"}]");
    } else {
        puts_(&b, ",\"prompt\":[");
        put_ids(&b, tokens, n_tokens);
        puts_(&b, "]");
    }
    snprintf(num, sizeof num, "%u", max_tokens);
    const char *eos = o->keep_eos ? "false" : "true";
    /* greedy unless the sampling members set a temperature (vLLM's client:
     * temperature 0 when --temperature is not given) */
    const char *samp = o->sampling && o->sampling[0] ? o->sampling : NULL;
    const char *greedy = samp && strstr(samp, "\"temperature\":") ? "" : "\"temperature\":0,";
    if (o->generate) {
        puts_(&b, ",\"sampling_params\":{");
        puts_(&b, greedy);
        if (samp) {
            puts_(&b, samp);
            puts_(&b, ",");
        }
        puts_(&b, "\"max_new_tokens\":");
        puts_(&b, num);
        puts_(&b, ",\"ignore_eos\":");
        puts_(&b, eos);
        puts_(&b, o->stream ? "},\"stream\":true" : "},\"stream\":false");
    } else {
        puts_(&b, ",\"max_tokens\":");
        puts_(&b, num);
        puts_(&b, ",");
        puts_(&b, greedy);
        if (samp) {
            puts_(&b, samp);
            puts_(&b, ",");
        }
        puts_(&b, "\"ignore_eos\":");
        puts_(&b, eos);
        if (o->stream) puts_(&b, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
        else puts_(&b, ",\"stream\":false");
    }
    if (o->priority) {
        snprintf(num, sizeof num, ",\"priority\":%d", (int)o->priority);
        puts_(&b, num);
    }
    if (o->generate && o->lora_path) {
        puts_(&b, ",\"lora_path\":");
        puts_(&b, o->lora_path);
    }
    if (o->extra && o->extra[0]) {
        puts_(&b, ",");
        puts_(&b, o->extra);
    }
    puts_(&b, "}");
    free(text_json);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.n;
    return b.p;
}
