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

static void expect(enum sd_chat_format f, const struct sd_chat_msg *m, size_t n, const char *want) {
    char buf[1024];
    int64_t r = sd_chat_render(f, m, n, true, buf, sizeof buf);
    assert_true(r >= 0);
    assert_string_equal(buf, want);
    assert_int_equal((size_t)r, strlen(want));
    /* Probing: a buffer one byte short reports the size needed. */
    char small[8];
    int64_t need = sd_chat_render(f, m, n, true, small, strlen(want) < 8 ? 0 : 7);
    assert_int_equal(need, -(int64_t)(strlen(want) + 1));
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemma),
        cmocka_unit_test(test_chatml),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_plain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
