/* chat.c — the chat templates the server knows: it does not run Jinja, so it recognises the
 * common forms in tokenizer_config.json's chat_template and writes each as its reference
 * template (the models' published Jinja) renders it with add_generation_prompt. */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server.h"

static const char *const names[] = {"none", "chatml", "llama3", "llama2", "mistral"};

int srv_chat_parse_name(const char *name, srv_chat_kind *out) {
    for (int k = SRV_CHAT_CHATML; k <= SRV_CHAT_MISTRAL; k++)
        if (name && !strcmp(name, names[k])) {
            *out = (srv_chat_kind)k;
            return 0;
        }
    return -1;
}

const char *srv_chat_name(srv_chat_kind k) {
    return k >= SRV_CHAT_NONE && k <= SRV_CHAT_MISTRAL ? names[k] : "?";
}

static srv_chat_kind classify(const char *t) {
    if (strstr(t, "<|im_start|>")) return SRV_CHAT_CHATML;
    if (strstr(t, "<|start_header_id|>")) return SRV_CHAT_LLAMA3;
    if (strstr(t, "[INST]")) return strstr(t, "<<SYS>>") ? SRV_CHAT_LLAMA2 : SRV_CHAT_MISTRAL;
    return SRV_CHAT_NONE;
}

srv_chat_kind srv_chat_detect(const char *tokenizer_config, size_t len) {
    if (!tokenizer_config || len == 0) return SRV_CHAT_NONE;
    cJSON *root = cJSON_ParseWithLength(tokenizer_config, len);
    if (!root) return SRV_CHAT_NONE;
    srv_chat_kind k = SRV_CHAT_NONE;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    if (cJSON_IsString(t)) k = classify(t->valuestring);
    else if (cJSON_IsArray(t)) {
        /* transformers' list form: [{"name": ..., "template": ...}], "default" being the one used */
        const cJSON *it;
        cJSON_ArrayForEach(it, t) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
            const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(it, "template");
            if (cJSON_IsString(name) && !strcmp(name->valuestring, "default") && cJSON_IsString(tpl))
                k = classify(tpl->valuestring);
        }
    }
    cJSON_Delete(root);
    return k;
}

const char *srv_chat_end_token(srv_chat_kind k) {
    switch (k) {
    case SRV_CHAT_CHATML: return "<|im_end|>";
    case SRV_CHAT_LLAMA3: return "<|eot_id|>";
    case SRV_CHAT_LLAMA2:
    case SRV_CHAT_MISTRAL: return "</s>";
    default: return NULL;
    }
}

static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Jinja's |trim and Python's str.strip() on ASCII whitespace. */
static void put_stripped(srv_buf *out, const char *s, size_t n) {
    while (n && is_space(*s)) s++, n--;
    while (n && is_space(s[n - 1])) n--;
    srv_buf_put(out, s, n);
}

/* Llama 2 and Mistral refuse any order but [system] user assistant user ... */
static int check_alternation(const srv_chat_msg *msgs, int n, int first, char *msg, size_t msg_n) {
    for (int i = first; i < n; i++) {
        const int want_user = (i - first) % 2 == 0;
        if (!strcmp(msgs[i].role, "system")) {
            snprintf(msg, msg_n, "messages[%d]: this chat template takes a system message only first", i);
            return -1;
        }
        if (want_user != !strcmp(msgs[i].role, "user")) {
            snprintf(msg, msg_n,
                     "messages[%d]: this chat template needs the roles to alternate user, assistant, user, ... "
                     "(after an optional system message); got %s", i, msgs[i].role);
            return -1;
        }
    }
    if (n == first) {
        snprintf(msg, msg_n, "messages: this chat template needs a user message");
        return -1;
    }
    return 0;
}

int srv_chat_render(srv_chat_kind k, const srv_chat_msg *msgs, int n, const char *bos, const char *eos,
                    srv_buf *out, char *msg, size_t msg_n) {
    switch (k) {
    case SRV_CHAT_CHATML:
        for (int i = 0; i < n; i++) {
            srv_buf_printf(out, "<|im_start|>%s\n", msgs[i].role);
            srv_buf_put(out, msgs[i].content, msgs[i].len);
            srv_buf_puts(out, "<|im_end|>\n");
        }
        srv_buf_puts(out, "<|im_start|>assistant\n");
        return 0;
    case SRV_CHAT_LLAMA3:
        srv_buf_puts(out, bos ? bos : "<|begin_of_text|>");
        for (int i = 0; i < n; i++) {
            srv_buf_printf(out, "<|start_header_id|>%s<|end_header_id|>\n\n", msgs[i].role);
            put_stripped(out, msgs[i].content, msgs[i].len);
            srv_buf_puts(out, "<|eot_id|>");
        }
        srv_buf_puts(out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        return 0;
    case SRV_CHAT_LLAMA2:
    case SRV_CHAT_MISTRAL: {
        const int has_system = n > 0 && !strcmp(msgs[0].role, "system");
        if (check_alternation(msgs, n, has_system, msg, msg_n) != 0) return -1;
        const char *b = bos ? bos : "<s>", *e = eos ? eos : "</s>";
        if (k == SRV_CHAT_MISTRAL) srv_buf_puts(out, b);
        for (int i = has_system; i < n; i++) {
            const int user = !strcmp(msgs[i].role, "user");
            if (k == SRV_CHAT_LLAMA2 && user) {
                srv_buf_printf(out, "%s[INST] ", b);
                if (i == has_system && has_system) {
                    /* the system message goes inside the first [INST], as Llama 2's template puts it */
                    srv_buf_puts(out, "<<SYS>>\n");
                    srv_buf_put(out, msgs[0].content, msgs[0].len);
                    srv_buf_puts(out, "\n<</SYS>>\n\n");
                    /* the template strips the whole content, i.e. the user text's end only */
                    size_t l = msgs[i].len;
                    while (l && is_space(msgs[i].content[l - 1])) l--;
                    srv_buf_put(out, msgs[i].content, l);
                } else put_stripped(out, msgs[i].content, msgs[i].len);
                srv_buf_puts(out, " [/INST]");
            } else if (k == SRV_CHAT_LLAMA2) {
                srv_buf_puts(out, " ");
                put_stripped(out, msgs[i].content, msgs[i].len);
                srv_buf_printf(out, " %s", e);
            } else if (user) {
                srv_buf_puts(out, "[INST] ");
                if (i == has_system && has_system) {
                    /* Mistral's first template has no system role: later ones put it before the
                     * user's text, which is what this does for the first turn */
                    srv_buf_put(out, msgs[0].content, msgs[0].len);
                    srv_buf_puts(out, "\n\n");
                }
                srv_buf_put(out, msgs[i].content, msgs[i].len);
                srv_buf_puts(out, " [/INST]");
            } else {
                srv_buf_put(out, msgs[i].content, msgs[i].len);
                srv_buf_puts(out, e);
            }
        }
        return 0;
    }
    default: snprintf(msg, msg_n, "no chat template"); return -1;
    }
}
