/* fuzz_chat_template.c — any bytes as a chat template and its variables:
 * the input up to its first NUL is the template, the rest a JSON object of
 * variables (a small conversation when it is absent or not an object).
 * Parsing either fails with a message naming the line or gives a template,
 * whose render gives a string of the length it reports or a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "engine/model/chat_template.h"

static const char *DEFAULT_VARS =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"hi\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>x</think>yo\", \"tool_calls\": [{\"type\": \"function\","
    " \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}, {\"role\": \"tool\", \"content\": \"r\"}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *src = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    json_t *vars = NULL;
    if (nul) vars = json_loadb((const char *)nul + 1, size - tlen - 1, 0, NULL);
    if (!json_is_object(vars)) {
        json_decref(vars);
        vars = json_loads(DEFAULT_VARS, 0, NULL);
        if (!vars) abort();
    }
    rh_err e = {{0}};
    chat_template *t = chat_template_parse(src, tlen, &e);
    if (!t) {
        if (strncmp(e.msg, "chat template", 13)) abort();
    } else {
        size_t len = 0;
        char *out = chat_template_render(t, vars, &len, &e);
        if (out) {
            if (len > CHAT_TEMPLATE_MAX_OUTPUT || out[len] != '\0') abort();
            free(out);
        } else if (strncmp(e.msg, "chat template", 13)) {
            abort();
        }
        chat_template_free(t);
    }
    json_decref(vars);
    return 0;
}
