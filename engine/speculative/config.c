/* config.c — the speculative knobs by CLI name, for every front (replay,
 * serve) and for trace headers. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "engine/speculative/spec.h"
#include "util/args.h"

void spec_config_default(spec_config *c)
{
    memset(c, 0, sizeof *c);
    c->ngram_min = 1;
    c->ngram_max = 12;
}

const char *spec_algorithm_name(spec_algorithm a)
{
    return a == SPEC_NGRAM ? "NGRAM" : a == SPEC_DRAFT ? "DRAFT" : "none";
}


static const char *const knobs[] = {
    "speculative-algorithm", "speculative-ngram-min-match-window-size", "speculative-ngram-max-match-window-size",
    "speculative-draft-layers", "speculative-draft-model-path", "speculative-draft-seed", "speculative-eagle-topk",
};

int spec_config_is_knob(const char *name_in)
{
    char name[96];
    rh_knob_name(name_in, name, sizeof name);
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++)
        if (!strcmp(name, knobs[i])) return 1;
    return 0;
}

/* 1 set, -1 bad (spec_config_set's convention). */
static int set_u32(uint32_t *slot, const char *flag, const char *v, uint32_t lo, uint32_t hi, rh_err *e)
{
    return rh_parse_u32(v, flag, lo, hi, slot, e) < 0 ? -1 : 1;
}

int spec_config_set(spec_config *c, const char *name_in, const char *v, rh_err *e)
{
    char name[96];
    rh_knob_name(name_in, name, sizeof name);
    if (!strcmp(name, "speculative-algorithm")) {
        if (!v) return rh_fail(e, "--speculative-algorithm needs a value (NGRAM or DRAFT)");
        if (!strcasecmp(v, "ngram")) c->algorithm = SPEC_NGRAM;
        else if (!strcasecmp(v, "draft") || !strcasecmp(v, "standalone")) c->algorithm = SPEC_DRAFT;
        else if (!strcasecmp(v, "none")) c->algorithm = SPEC_NONE;
        else return rh_fail(e, "--speculative-algorithm: '%s' is not NGRAM or DRAFT", v);
        return 1;
    }
    if (!strcmp(name, "speculative-ngram-min-match-window-size"))
        return set_u32(&c->ngram_min, "--speculative-ngram-min-match-window-size", v, 1, 1024, e);
    if (!strcmp(name, "speculative-ngram-max-match-window-size"))
        return set_u32(&c->ngram_max, "--speculative-ngram-max-match-window-size", v, 1, 1024, e);
    if (!strcmp(name, "speculative-draft-layers"))
        return set_u32(&c->draft_layers, "--speculative-draft-layers", v, 1, 4096, e);
    if (!strcmp(name, "speculative-draft-model-path")) {
        if (!v || !*v) return rh_fail(e, "--speculative-draft-model-path needs a model (preset, config.json or directory)");
        c->draft_model = v;
        return 1;
    }
    if (!strcmp(name, "speculative-eagle-topk")) {   /* SGLang's: 1 is the chain this engine drafts */
        uint32_t k;
        if (rh_parse_u32(v, "--speculative-eagle-topk", 1, 64, &k, e) < 0) return -1;
        if (k != 1)
            return rh_fail(e, "--speculative-eagle-topk %u: this engine drafts a chain (1); a tree's speed is what "
                              "rehearse sim --speculative-eagle-topk prices", k);
        return 1;
    }
    if (!strcmp(name, "speculative-draft-seed")) {
        unsigned long long u;
        if (rh_parse_u64(v, "--speculative-draft-seed", &u, e) < 0) return -1;
        c->draft_seed = u;
        return 1;
    }
    return 0;
}

const char *spec_config_help(void)
{
    return "  --speculative-algorithm A  NGRAM (prompt lookup) or DRAFT (a draft model; also STANDALONE); with\n"
           "                            --speculative-num-steps K (3 when not given) drafts per decode\n"
           "  --speculative-config JSON  vLLM's: {\"method\": \"ngram\", \"num_speculative_tokens\": K,\n"
           "                            \"prompt_lookup_min\": N, \"prompt_lookup_max\": N}, or a draft\n"
           "                            {\"model\": M, \"num_speculative_tokens\": K}\n"
           "  --speculative-ngram-min-match-window-size N   shortest suffix NGRAM matches (1)\n"
           "  --speculative-ngram-max-match-window-size N   longest suffix NGRAM matches (12)\n"
           "  --speculative-draft-layers L  DRAFT: the target's first L layers and its LM head\n"
           "                            (self-speculation; default a quarter of its layers)\n"
           "  --speculative-draft-model-path M  DRAFT: a smaller model with the same vocabulary\n"
           "  --speculative-draft-seed S  DRAFT: seed of the draft's sampling streams (0)\n"
           "  --speculative-eagle-topk 1   SGLang's: taken, a chain is what this engine drafts (a wider\n"
           "                            tree is refused; rehearse sim prices one)\n";
}

int spec_config_validate(const spec_config *c, rh_err *e)
{
    if (c->ngram_min > c->ngram_max)
        return rh_fail(e, "--speculative-ngram-min-match-window-size %u exceeds the max %u", c->ngram_min,
                       c->ngram_max);
    if (c->algorithm != SPEC_DRAFT && (c->draft_model || c->draft_m || c->draft_layers))
        return rh_fail(e, "--speculative-draft-layers and --speculative-draft-model-path need "
                          "--speculative-algorithm DRAFT");
    if ((c->draft_model || c->draft_m) && c->draft_layers)
        return rh_fail(e, "--speculative-draft-layers (self-speculation) and --speculative-draft-model-path "
                          "both name the draft model; give one");
    return 0;
}

void spec_config_foreach(const spec_config *c, void (*fn)(void *ctx, const char *name, const char *value), void *ctx)
{
    char buf[32];
    fn(ctx, "speculative-algorithm", spec_algorithm_name(c->algorithm));
    if (c->algorithm == SPEC_NGRAM) {
        snprintf(buf, sizeof buf, "%u", c->ngram_min);
        fn(ctx, "speculative-ngram-min-match-window-size", buf);
        snprintf(buf, sizeof buf, "%u", c->ngram_max);
        fn(ctx, "speculative-ngram-max-match-window-size", buf);
    } else if (c->algorithm == SPEC_DRAFT) {
        if (c->draft_model) fn(ctx, "speculative-draft-model-path", c->draft_model);
        else if (c->draft_layers) {
            snprintf(buf, sizeof buf, "%u", c->draft_layers);
            fn(ctx, "speculative-draft-layers", buf);
        }
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)c->draft_seed);
        fn(ctx, "speculative-draft-seed", buf);
    }
}
