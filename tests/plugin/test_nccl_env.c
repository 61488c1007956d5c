/* Every NCCL_IB_* variable: one line each when set, and the same table in
 * docs/CONFIGURATION.md as in the code. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "nccl_env.h"

struct lines {
  const char *set_name, *set_value;
  char info[4][600], warn[4][600];
  int ninfo, nwarn;
};

static const char *one_var(void *arg, const char *name) {
  struct lines *l = arg;
  return l->set_name && strcmp(name, l->set_name) == 0 ? l->set_value : NULL;
}

static void on_info(void *arg, const char *msg) {
  struct lines *l = arg;
  if (l->ninfo < 4) snprintf(l->info[l->ninfo], sizeof(l->info[0]), "%s", msg);
  l->ninfo++;
}

static void on_warn(void *arg, const char *msg) {
  struct lines *l = arg;
  if (l->nwarn < 4) snprintf(l->warn[l->nwarn], sizeof(l->warn[0]), "%s", msg);
  l->nwarn++;
}

Test(nccl_env, every_set_variable_gets_one_line_of_its_kind) {
  for (size_t i = 0; i < lp_nccl_nvars; i++) {
    const struct lp_nccl_var *v = &lp_nccl_vars[i];
    struct lines l = {.set_name = v->name, .set_value = "7"};
    lp_nccl_env_report(one_var, &l, on_info, &l);
    cr_assert_eq(l.ninfo + l.nwarn, 1, "%s: %d lines", v->name, l.ninfo + l.nwarn);
    const char *line = l.nwarn ? l.warn[0] : l.info[0];
    cr_expect(strstr(line, v->name) && strstr(line, "\"7\""), "%s: the line names neither it nor its value: %s",
              v->name, line);
    cr_expect(l.ninfo == 1 && strstr(line, lp_env_treatment_str(v->treatment)), "%s: %s", v->name, line);
  }
}

Test(nccl_env, unset_and_empty_say_nothing) {
  struct lines l = {0};
  lp_nccl_env_report(one_var, &l, on_info, &l);
  struct lines e = {.set_name = "NCCL_IB_ADAPTIVE_ROUTING", .set_value = ""};
  lp_nccl_env_report(one_var, &e, on_info, &e);
  cr_expect_eq(l.ninfo + l.nwarn + e.ninfo + e.nwarn, 0);
}

Test(nccl_env, a_hostile_value_is_cut_short) {
  char big[4096];
  memset(big, 'x', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  struct lines l = {.set_name = "NCCL_IB_SUBNET_AWARE_ROUTING", .set_value = big};
  lp_nccl_env_report(one_var, &l, on_info, &l);
  cr_assert_eq(l.ninfo, 1);
  cr_expect_lt(strlen(l.info[0]), 400);
}

Test(nccl_env, names_are_unique_and_ncclish) {
  for (size_t i = 0; i < lp_nccl_nvars; i++) {
    cr_expect(strncmp(lp_nccl_vars[i].name, "NCCL_", 5) == 0, "%s", lp_nccl_vars[i].name);
    for (size_t j = i + 1; j < lp_nccl_nvars; j++)
      cr_expect(strcmp(lp_nccl_vars[i].name, lp_nccl_vars[j].name) != 0, "%s twice", lp_nccl_vars[i].name);
  }
}

Test(nccl_env, ib_disable_is_parsed_like_nccls) {
  struct lines l = {.set_name = "NCCL_IB_DISABLE", .set_value = "1"};
  struct lp_config cfg;
  cr_assert_eq(lp_config_load(&cfg, one_var, &l, on_warn, &l), 0);
  cr_expect_eq(cfg.ib_disable, 1);
  l.set_value = "yes";
  cr_assert_eq(lp_config_load(&cfg, one_var, &l, on_warn, &l), 1);
  cr_expect(strstr(l.warn[0], "NCCL_IB_DISABLE=\"yes\" is not valid"), "%s", l.warn[0]);
  cr_expect_eq(cfg.ib_disable, 0, "a bad value keeps the default");
}

/* The table of docs/CONFIGURATION.md, "## Every variable of NCCL's IB
 * transport": rows "| `NAME` | NCCL's meaning | `NCCL default` | treatment | ...". */
Test(nccl_env, the_documented_table_is_the_code_table) {
  FILE *f = fopen(LP_DOC_CONFIGURATION, "r");
  cr_assert_not_null(f, "cannot open %s", LP_DOC_CONFIGURATION);
  char line[4096];
  int in_section = 0, rows = 0;
  int seen[256] = {0};
  cr_assert_lt(lp_nccl_nvars, 256);
  while (fgets(line, sizeof(line), f)) {
    if (strncmp(line, "## ", 3) == 0) in_section = strstr(line, "Every variable of NCCL's IB transport") != NULL;
    if (!in_section || strncmp(line, "| `NCCL_", 8) != 0) continue;
    char name[128], treatment[64];
    const char *end = strchr(line + 3, '`');
    cr_assert_not_null(end);
    snprintf(name, sizeof(name), "%.*s", (int)(end - line - 3), line + 3);
    /* the fourth cell */
    const char *cell = line;
    for (int k = 0; k < 3 && cell; k++) cell = strchr(cell + 1, '|');
    cr_assert_not_null(cell, "%s: too few columns", name);
    const char *cend = strchr(cell + 1, '|');
    cr_assert_not_null(cend);
    snprintf(treatment, sizeof(treatment), "%.*s", (int)(cend - cell - 1), cell + 1);
    char *t = treatment;
    while (*t == ' ' || *t == '*') t++;
    size_t tl = strlen(t);
    while (tl && (t[tl - 1] == ' ' || t[tl - 1] == '*')) t[--tl] = '\0';
    size_t i;
    for (i = 0; i < lp_nccl_nvars && strcmp(lp_nccl_vars[i].name, name) != 0; i++)
      ;
    cr_assert_lt(i, lp_nccl_nvars, "docs name %s, which the code's table lacks", name);
    cr_expect_str_eq(t, lp_env_treatment_str(lp_nccl_vars[i].treatment), "%s: docs say \"%s\", the code \"%s\"",
                     name, t, lp_env_treatment_str(lp_nccl_vars[i].treatment));
    /* the third cell, NCCL's default, as `value` */
    const char *dcell = line;
    for (int k = 0; k < 2 && dcell; k++) dcell = strchr(dcell + 1, '|');
    char want[96];
    snprintf(want, sizeof(want), " `%s` ", lp_nccl_vars[i].nccl_default);
    cr_expect(dcell && strncmp(dcell + 1, want, strlen(want)) == 0, "%s: the docs' default is not%s", name, want);
    seen[i]++;
    rows++;
  }
  fclose(f);
  for (size_t i = 0; i < lp_nccl_nvars; i++)
    cr_expect_eq(seen[i], 1, "%s has %d rows in the docs", lp_nccl_vars[i].name, seen[i]);
  cr_expect_eq(rows, (int)lp_nccl_nvars);
}
