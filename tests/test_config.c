/*
 * test_config.c - flags, NORMD_* variables and their precedence; bad values are refused with a
 * message naming the option.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../server/config.h"

static int load(nd_config *cfg, int argc, const char **argv, nd_error *err)
{
    nd_config_defaults(cfg);
    return nd_config_load(cfg, argc, (char **)argv, err);
}

Test(config, defaults_are_loopback_and_auto)
{
    nd_config cfg;
    nd_error err;
    const char *argv[] = {"normd"};
    cr_assert_eq(load(&cfg, 1, argv, &err), 0);
    cr_assert_str_eq(cfg.listen_host, "127.0.0.1");
    cr_assert_eq(cfg.listen_port, 8000);
    cr_assert_eq(cfg.backend, ND_BACKEND_AUTO);
}

Test(config, flags_win_over_the_environment)
{
    setenv("NORMD_MAX_BATCH_ROWS", "123", 1);
    setenv("NORMD_BACKEND", "null", 1);
    nd_config cfg;
    nd_error err;
    const char *argv[] = {"normd", "--max-batch-rows=456", "--listen", "[::1]:9000",
                          "--devices", "0,2", "--unix", "/tmp/n.sock"};
    cr_assert_eq(load(&cfg, 8, argv, &err), 0, "%s", err.msg);
    cr_assert_eq(cfg.max_batch_rows, 456);
    cr_assert_eq(cfg.backend, ND_BACKEND_NULL);
    cr_assert_str_eq(cfg.listen_host, "::1");
    cr_assert_eq(cfg.listen_port, 9000);
    cr_assert_eq(cfg.ndevices, 2);
    cr_assert_eq(cfg.devices[1], 2);
    cr_assert_str_eq(cfg.unix_path, "/tmp/n.sock");
    unsetenv("NORMD_MAX_BATCH_ROWS");
    unsetenv("NORMD_BACKEND");
}

Test(config, bad_values_name_the_option)
{
    struct {
        const char *arg, *needle;
    } cases[] = {
        {"--max-batch-rows=0", "max-batch-rows"}, {"--threads=abc", "threads"},
        {"--backend=gpu", "backend"},             {"--listen=localhost", "listen"},
        {"--listen=h:70000", "listen"},           {"--devices=0,x", "devices"},
        {"--no-such-flag=1", "no-such-flag"},     {"--queue-limit", "queue-limit"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nd_config cfg;
        nd_error err = {{0}};
        const char *argv[] = {"normd", cases[i].arg};
        cr_assert_eq(load(&cfg, 2, argv, &err), -1, "%s accepted", cases[i].arg);
        cr_assert(strstr(err.msg, cases[i].needle), "%s: message \"%s\"", cases[i].arg, err.msg);
    }
    setenv("NORMD_STREAMS", "0", 1);
    nd_config cfg;
    nd_error err;
    const char *argv[] = {"normd"};
    cr_assert_eq(load(&cfg, 1, argv, &err), -1);
    cr_assert(strstr(err.msg, "NORMD_STREAMS"), "%s", err.msg);
    unsetenv("NORMD_STREAMS");
}

Test(config, listening_nowhere_is_refused)
{
    nd_config cfg;
    nd_error err;
    const char *argv[] = {"normd", "--listen", "off"};
    cr_assert_eq(load(&cfg, 3, argv, &err), -1);
    cr_assert(strstr(err.msg, "unix"), "%s", err.msg);
}

Test(config, beyond_loopback_needs_an_admin_token_or_the_explicit_flag)
{
    nd_config cfg;
    nd_error err = {{0}};
    const char *open_[] = {"normd", "--listen", "0.0.0.0:8000"};
    cr_assert_eq(load(&cfg, 3, open_, &err), -1);
    cr_assert(strstr(err.msg, "beyond loopback") && strstr(err.msg, "--admin-token-file"),
              "%s", err.msg);
    const char *flagged[] = {"normd", "--listen", "0.0.0.0:8000", "--allow-open-admin"};
    cr_assert_eq(load(&cfg, 4, flagged, &err), 0, "%s", err.msg);
    cr_assert_eq(cfg.allow_open_admin, 1);
    const char *flag_off[] = {"normd", "--allow-open-admin=0", "--listen", "[::]:8000"};
    cr_assert_eq(load(&cfg, 4, flag_off, &err), -1);
    const char *loopback[] = {"normd", "--listen", "localhost:8000"};
    cr_assert_eq(load(&cfg, 3, loopback, &err), 0, "%s", err.msg);
    const char *v6loop[] = {"normd", "--listen", "[::1]:8000"};
    cr_assert_eq(load(&cfg, 3, v6loop, &err), 0, "%s", err.msg);
    setenv("NORMD_ALLOW_OPEN_ADMIN", "1", 1);
    cr_assert_eq(load(&cfg, 3, open_, &err), 0, "%s", err.msg);
    unsetenv("NORMD_ALLOW_OPEN_ADMIN");
}

Test(config, the_admin_token_is_the_first_line_of_its_file)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/normd-test-token-%d", (int)getpid());
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("  tok-123 \nsecond line ignored\n", f);
    fclose(f);
    nd_config cfg;
    nd_error err = {{0}};
    const char *argv[] = {"normd", "--admin-token-file", path, "--listen", "0.0.0.0:1"};
    cr_assert_eq(load(&cfg, 5, argv, &err), 0, "%s", err.msg);
    cr_assert_str_eq(cfg.admin_token, "tok-123");
    f = fopen(path, "w");
    fputs("\n", f);
    fclose(f);
    cr_assert_eq(load(&cfg, 3, argv, &err), -1, "an empty token was taken");
    cr_assert(strstr(err.msg, "admin-token-file"), "%s", err.msg);
    unlink(path);
    cr_assert_eq(load(&cfg, 3, argv, &err), -1, "a missing file was taken");
    cr_assert(strstr(err.msg, path), "%s", err.msg);
}
