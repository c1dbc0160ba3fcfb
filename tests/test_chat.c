/* tests/test_chat.c - chat formats rendered exactly as each family's
 * published template renders them (expected strings written out by hand
 * from the Gemma, ChatML and Llama 3 template documentation). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "engine/chat.h"

static void expect_chat(const struct sd_chat *c, const struct sd_chat_msg *m, size_t n, const char *want) {
    char buf[1024];
    int64_t r = sd_chat_render(c, m, n, true, buf, sizeof buf);
    assert_true(r >= 0);
    assert_string_equal(buf, want);
    assert_int_equal((size_t)r, strlen(want));
    /* Probing: a buffer one byte short reports the size needed. */
    char small[8];
    int64_t need = sd_chat_render(c, m, n, true, small, strlen(want) < 8 ? 0 : 7);
    assert_int_equal(need, -(int64_t)(strlen(want) + 1));
}

/* A family's format with no default system turn. */
static void expect(enum sd_chat_format f, const struct sd_chat_msg *m, size_t n, const char *want) {
    expect_chat(&(struct sd_chat){f, NULL, NULL, NULL}, m, n, want);
}

static const struct sd_chat_msg conv[] = {
    {"system", "Be brief."},
    {"user", "Hi"},
    {"assistant", "Hello!"},
    {"user", "Sum 2+2"},
};

static void test_gemma(void **state) {
    (void)state;
    expect(SD_CHAT_GEMMA, conv, 4,
           "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
           "<start_of_turn>model\nHello!<end_of_turn>\n"
           "<start_of_turn>user\nSum 2+2<end_of_turn>\n"
           "<start_of_turn>model\n");
}

static void test_chatml(void **state) {
    (void)state;
    expect(SD_CHAT_CHATML, conv, 4,
           "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
           "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nSum 2+2<|im_end|>\n"
           "<|im_start|>assistant\n");
}

static void test_llama3(void **state) {
    (void)state;
    expect(SD_CHAT_LLAMA3, conv + 1, 1,
           "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void test_plain(void **state) {
    (void)state;
    expect(SD_CHAT_PLAIN, conv, 3, "Be brief.\n\nUser: Hi\nAssistant: Hello!\nAssistant:");
    assert_string_equal(sd_chat_end_of_turn(SD_CHAT_PLAIN), "\nUser:");
    assert_string_equal(sd_chat_format_name(SD_CHAT_PLAIN), "plain");
    assert_string_equal(sd_chat_end_of_turn(SD_CHAT_GEMMA), "<end_of_turn>");
}

/* The default system text sd_chat_detect finds in a template (NULL: none). */
static char *default_system(const char *tmpl) {
    struct sd_chat c;
    bool known;
    assert_int_equal(sd_chat_detect(tmpl, &c, &known), 0);
    assert_true(known);
    return c.default_system;
}

/* Qwen2.5's template (its head, as the instruct GGUFs carry it): a system
 * turn of its own where the messages open without one. The literals that
 * go on with a message's content are not it. */
static const char k_qwen25[] =
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif "
    "%}\n"
    "{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n"
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
    "'<|im_end|>' + "
    "'\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

static void test_chatml_default_system(void **state) {
    (void)state;
    struct sd_chat c;
    bool known;
    assert_int_equal(sd_chat_detect(k_qwen25, &c, &known), 0);
    assert_int_equal(c.format, SD_CHAT_CHATML);
    assert_string_equal(c.default_system,
                        "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    /* Where the messages open without a system turn, the template's own
     * comes first; a system message of the caller's replaces it. */
    expect_chat(
        &c, conv + 1, 1,
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect_chat(
        &c, conv, 2,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* One turn as a generation reads its system text: NULL the template's
     * own, "" no system turn at all, else that text. */
    const char *user = "Hi";
    const char *want[3] = {
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"};
    const char *systems[3] = {NULL, "", "Be brief."};
    for (int k = 0; k < 3; k++) {
        char buf[256];
        int64_t need = -sd_chat_render_turn(&c, systems[k], user, NULL, 0);
        assert_int_equal(need, (int64_t)strlen(want[k]) + 1);
        assert_int_equal(sd_chat_render_turn(&c, systems[k], user, buf, sizeof buf),
                         (int64_t)strlen(want[k]));
        assert_string_equal(buf, want[k]);
    }
    assert_non_null(c.default_system); /* "" left the model's own untouched */
    /* A conversation asks for no system turn by opening with a system
     * message of NULL content (sdnpu chat --system ""); the turns after it
     * render as ever. */
    const struct sd_chat_msg none[3] = {{"system", NULL}, {"user", "Hi"}, {"assistant", "Hello."}};
    expect_chat(&c, none, 3,
                "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
                "<|im_start|>assistant\n");
    const struct sd_chat_msg empty = {"system", ""};
    expect_chat(&c, &empty, 1,
                "<|im_start|>system\n<|im_end|>\n<|im_start|>assistant\n"); /* "": an empty turn */
    sd_chat_free(&c);
    assert_null(c.default_system);
}

static void test_default_system_forms(void **state) {
    (void)state;
    /* Qwen2's: inside an if, one literal. */
    char *s =
        default_system("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' "
                       "%}{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
                       "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'}}"
                       "{% endfor %}");
    assert_string_equal(s, "You are a helpful assistant.");
    sd_free(s);
    /* Escapes undone, in a double-quoted literal. */
    s = default_system("{{ \"<|im_start|>system\\nSay \\\"hi\\\".\\nIt\\'s two lines.<|im_end|>\\n\" }}");
    assert_string_equal(s, "Say \"hi\".\nIt's two lines.");
    sd_free(s);
    /* None: a ChatML template without one, a system turn built from a
     * message, a literal never closed, the marker outside a literal, and
     * another family's template that spells ChatML's marker nowhere. */
    assert_null(default_system("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + "
                               "'<|im_end|>\\n'}}{% endfor %}"));
    assert_null(default_system("{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"));
    assert_null(default_system("{{ '<|im_start|>system\\nunfinished <|im_end|>"));
    assert_null(default_system("<|im_start|>system\\nYou are X.<|im_end|>"));
    assert_null(default_system("{{ '<start_of_turn>user\\n' }}"));
}

/* The tools branch of Qwen2.5's template (the 1.5B's, whose instruction
 * line writes its braces twice: the text comes from the literals, escapes
 * undone), and a template that names the tags but not that layout. */
static const char k_qwen25_tools[] =
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif "
    "%}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions.\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nReturn <tool_call>\\n{{\\\"name\\\": "
    "<function-name>}}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a "
    "helpful "
    "assistant.<|im_end|>\\n' }}\n{%- endif %}\n"
    "{%- elif message.role == \"tool\" %}{{- '\\n<tool_response>\\n' }}{%- endif %}";

static void test_chatml_tools(void **state) {
    (void)state;
    struct sd_chat c;
    bool known;
    assert_int_equal(sd_chat_detect(k_qwen25_tools, &c, &known), 0);
    assert_string_equal(c.tools_head, "\n\n# Tools\n\nYou may call one or more functions.\n<tools>");
    assert_string_equal(c.tools_tail, "\n</tools>\n\nReturn <tool_call>\n{{\"name\": <function-name>}}\n"
                                      "</tool_call><|im_end|>\n");
    const struct sd_chat_msg msgs[] = {
        {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "<tool_call>\nX\n</tool_call>"},
        {"tool", "21"},          {"tool", "ok"}, {"user", "And?"}};
    const char *want =
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions.\n<tools>\n"
        "{\"a\": 1}\n{\"b\": 2}\n</tools>\n\nReturn <tool_call>\n{{\"name\": <function-name>}}\n"
        "</tool_call><|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        "<tool_call>\nX\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n21\n"
        "</tool_response>\n<tool_response>\nok\n</tool_response><|im_end|>\n<|im_start|>user\n"
        "And?<|im_end|>\n<|im_start|>assistant\n";
    char buf[1024];
    assert_int_equal(sd_chat_render_tools(&c, msgs, 6, "{\"a\": 1}\n{\"b\": 2}", true, buf, sizeof buf),
                     (int64_t)strlen(want));
    assert_string_equal(buf, want);
    /* Without a system message the template's own text opens the turn. */
    assert_true(sd_chat_render_tools(&c, msgs + 1, 1, "{}", false, buf, sizeof buf) > 0);
    assert_non_null(strstr(buf,
                           "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                           "assistant.\n\n# Tools"));
    sd_chat_free(&c);
    /* The tags without the literals around the tools: no tools. */
    assert_int_equal(sd_chat_detect("<|im_start|>{{ x }}<tool_call><tool_response>", &c, &known), 0);
    assert_null(c.tools_head);
    assert_null(c.tools_tail);
    sd_chat_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemma),
        cmocka_unit_test(test_chatml),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_plain),
        cmocka_unit_test(test_chatml_default_system),
        cmocka_unit_test(test_chatml_tools),
        cmocka_unit_test(test_default_system_forms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
